#!/bin/bash
# tests/apps/exec-inherit.py under smcrun over a private smcd, with every exec-family
# wrapper of libsmcrun.so driven from a C program (tests/exec-variants.c); checks that
# smcd ended every connection orderly. (test-smcrun-apps.sh runs the same app without
# the C variants.)
# Args: SMCD LIBSMCRUN SMCRUN EXEC_VARIANTS
set -u
smcd=$1 lib=$2 smcrun=$3
export EXEC_VARIANTS=$4
here=$(dirname "$0")
rundir=$(mktemp -d /tmp/smcd-test-exec.XXXXXX)
export SMCD_RUNTIME_DIR=$rundir SMCRUN_LIB=$lib
"$smcd" --no-bus --runtime-dir "$rundir" >"$rundir/smcd.log" 2>&1 &
spid=$!
trap 'kill $spid 2>/dev/null; wait $spid 2>/dev/null; rm -rf "$rundir"' EXIT
for _ in $(seq 100); do [ -S "$rundir/smcd.sock" ] && break; sleep 0.05; done
# a sanitizer build: its runtime ahead of libsmcrun.so (as test-smcrun-apps.sh)
san=$(ldd "$lib" | awk '$1 ~ /^lib(a|ub|t|hwa)san\.so/ { print $3 }' | paste -sd:)
if [ -n "$san" ]; then
        export LD_PRELOAD="$san${LD_PRELOAD:+:$LD_PRELOAD}"
        export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
fi
failed=0
if out=$(timeout 100 sh "$smcrun" python3 "$here/apps/exec-inherit.py" 2>&1); then
        echo "ok - exec-inherit: $out"
else
        echo "not ok - exec-inherit: $out"
        failed=1
fi
kill -USR1 $spid
sleep 0.5
python3 - "$rundir/stats.json" <<'PY' || failed=1
import json, sys
s = json.load(open(sys.argv[1]))["smcd"]
# 21 cases with a connection; every one closed, none aborted, none left open
ok = s["conns_client"] >= 21 and s["conns_current"] == 0 and s["conns_aborted"] == 0
print("%s - stats: conns_client %d, conns_current %d, conns_aborted %d" %
      ("ok" if ok else "not ok", s["conns_client"], s["conns_current"], s["conns_aborted"]))
sys.exit(0 if ok else 1)
PY
exit $failed
