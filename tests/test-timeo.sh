#!/bin/bash
# Run test-timeo over SMC-D (private smcd) and over TCP (SMCPROTO_DISABLE=1); both must
# pass and report the same checks. Args: SMCD TEST-TIMEO
set -u
smcd=$1 prog=$2
rundir=$(mktemp -d /tmp/smcd-test-timeo.XXXXXX)
"$smcd" --runtime-dir "$rundir" >"$rundir/smcd.log" 2>&1 &
spid=$!
trap 'kill $spid 2>/dev/null; wait $spid 2>/dev/null; rm -rf "$rundir"' EXIT
for _ in $(seq 100); do [ -S "$rundir/smcd.sock" ] && break; sleep 0.05; done
smc=$(SMCD_RUNTIME_DIR=$rundir "$prog"); rs=$?
tcp=$(SMCPROTO_DISABLE=1 SMCD_RUNTIME_DIR=$rundir "$prog"); rt=$?
echo "$smc"; echo "$tcp"
[ $rs -eq 0 ] && [ $rt -eq 0 ] || exit 1
grep -q "^# mode SMC-D" <<<"$smc" || { echo "not ok - the SMC run was not SMC-D"; exit 1; }
[ "$(grep -v '^#' <<<"$smc")" = "$(grep -v '^#' <<<"$tcp")" ] || { echo "not ok - SMC-D and TCP differ"; exit 1; }
echo "ok - SMC-D behaves as TCP"
