#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# smcd's RoCE verbs layer (smcd/roce.c) for real: in a throw-away qemu VM
# (tests/vm/run-vm), two soft-RoCE devices rxe0 / rxe1 on the two ends of a veth pair
# (tests/vm/rxe-pair-setup.sh: 10.77.0.1 on smc0a, 10.77.0.2 on smc0b), then
# tests/test-roce.c runs both as two "hosts" in one process, once with the CQs in the
# event loop and once with them served by the CQ polling threads. Args: TEST_ROCE RUN_VM.
# Skips (77) when the VM cannot run (run-vm's 77) or without rdma_rxe in the VM.
set -u
bin=$1 runvm=$2

if [ -z "${SMCD_TEST_IN_VM:-}" ]; then
        [ -x "$runvm" ] || { echo "SKIP: $runvm missing"; exit 77; }
        setup="$(realpath "$(dirname "$runvm")")/rxe-pair-setup.sh"
        [ -r "$setup" ] || { echo "SKIP: $setup missing"; exit 77; }
        # run-vm copies this script; the setup script and the binary are read from the
        # host tree (the VM's root)
        exec "$runvm" --timeout 400 --env SMCD_TEST_IN_VM=1 --env RXE_PAIR_SETUP="$setup" \
                ${SMCD_TEST_SEED:+--env SMCD_TEST_SEED="$SMCD_TEST_SEED"} "$0" "$(realpath "$bin")" "$runvm"
fi

modprobe rdma_rxe 2>/dev/null || { echo "SKIP: no rdma_rxe module for $(uname -r)"; exit 77; }
t0=$(cut -d' ' -f1 /proc/uptime)
vars=$(sh "$RXE_PAIR_SETUP") || { echo "not ok - rxe pair set-up failed"; exit 1; }
eval "$vars"
t1=$(cut -d' ' -f1 /proc/uptime)
echo "# rxe pair ready in $(awk "BEGIN { printf \"%.1f\", $t1 - $t0 }") s (uptime $t1 s, kernel $(uname -r))"

# under ASan (a -Db_sanitize=address build) leaks are reported at exit
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
# twice: the CQs in the event loop (default), then served by the polling threads
rc=0
for mode in event thread; do
        echo "# test-roce, CQs in $mode mode"
        SMCD_TEST_CQ_POLL=$mode timeout 300 "$bin" "$RXE_A_DEV" "$RXE_A_IP" "$RXE_B_DEV" "$RXE_B_IP"
        r=$?
        t2=$(cut -d' ' -f1 /proc/uptime)
        echo "# test-roce ($mode mode) exit $r after $(awk "BEGIN { printf \"%.1f\", $t2 - $t1 }") s"
        t1=$t2
        [ $rc -ne 0 ] || rc=$r
done
sh "$RXE_PAIR_SETUP" down 2>/dev/null
exit $rc
