#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# kernel-smc-capture.sh: capture the exact bytes the Linux kernel's SMC-R v2 exchanges
# with smcd (CLC on TCP, LLC and CDC as RoCEv2 SENDs), in the throw-away qemu VM on
# Debian's 6.12 kernel. A documented tool, NOT a CI test: its output is what
# tests/test-smcr-kernel-bytes.c was written from; run it again after a kernel or smcd
# change and compare.
#
#   tests/vm/kernel-smc-capture.sh RESULTS_DIR [BUILD_DIR]      (BUILD_DIR default: build)
#
# Set-up as tests/test-kernel-smcr-vm.sh: tests/vm/rxe-pair-setup.sh makes host A (rxe0
# on smc0a, 10.77.0.1: smcd --roce-dev rxe0 + the client library, tests/smcr-xfer) and
# host B (rxe1 on smc0b, 10.77.0.2: the kernel's AF_SMC, tests/kernel-smc-xfer; pnet
# KINT = smc0b + rxe1 port 1). `tcpdump -i smc0b` sees both directions: the CLC
# messages on TCP and the RoCEv2 packets (UDP 4791). Phases, each on its own TCP port:
#   decline-*     the kernel's UEID is KCAPTURE-OTHER (smcd has SMCD-USERSPACE): kernel
#                 client -> smcd server (smcd declines) and smcd client -> kernel server
#                 (the kernel declines); both fall back to TCP
#   (then the kernel's UEID table is flushed and SMCD-USERSPACE added)
#   to-kernel-*   smcd client -> kernel server: first contact (the kernel's ACCEPT,
#                 CONFIRM LINK request and its asymmetric ADD LINK request, which smcd
#                 rejects), reuse, 3 connections at once (CONFIRM RKEY), the kernel
#                 closes first / smcd half-closes first
#   from-kernel-* kernel client -> smcd server: the same the other way round
#   idle          nothing for a few s: TEST LINK (net.smc.smcr_testlink_time = 3 s)
#   rmmod         `rmmod smc_diag smc`, then smcd stops (SIGTERM): whatever either side
#                 sends when its link groups end (the kernel's DELETE LINK)
# Results in RESULTS_DIR: capture.pcap, phases.txt (phase start/end times), meta.txt
# (kernel version, addresses), smcd.log, the xfer outputs, and messages.txt: every CLC,
# LLC and CDC message in order, annotated (phase, direction, kernel version, message
# type) with its exact bytes in hex, written by tests/vm/smc-pcap-extract.py (which also
# runs on its own: smc-pcap-extract.py capture.pcap --phases phases.txt --meta meta.txt
# [--c] for C arrays). About 1.5-3 min of VM time (TCG). Exit 0 when the capture and
# the extraction worked (the phases' own results are in messages.txt / the .out files).
set -u

if [ -z "${SMCD_TEST_IN_VM:-}" ]; then
        [ $# -ge 1 ] || { echo "usage: $0 RESULTS_DIR [BUILD_DIR]" >&2; exit 2; }
        res=$1 build=${2:-build}
        here=$(realpath "$(dirname "$0")")
        for f in smcd/smcd tests/smcr-xfer tests/kernel-smc-xfer; do
                [ -x "$build/$f" ] || { echo "$build/$f missing (ninja -C $build)" >&2; exit 2; }
        done
        command -v tcpdump >/dev/null || { echo "tcpdump not installed" >&2; exit 77; }
        "$here/run-vm" --kernel 6.12 --check || exit 77
        mkdir -p "$res" || exit 2
        "$here/run-vm" --results "$res" --kernel 6.12 --timeout "${KCAP_VM_TIMEOUT:-420}" --mem 2048 \
                --env SMCD_TEST_IN_VM=1 --env RXE_PAIR_SETUP="$here/rxe-pair-setup.sh" \
                "$here/kernel-smc-capture.sh" "$(realpath "$build/smcd/smcd")" \
                "$(realpath "$build/tests/smcr-xfer")" "$(realpath "$build/tests/kernel-smc-xfer")" \
                "$here/kernel-smc-config.py" "$here/smc-pcap-extract.py"
        rc=$?
        [ $rc = 0 ] || { echo "kernel-smc-capture: the VM run failed ($rc)" >&2; exit $rc; }
        python3 "$here/smc-pcap-extract.py" "$res/capture.pcap" --phases "$res/phases.txt" \
                --meta "$res/meta.txt" >"$res/messages.txt" || exit 1
        grep -c '^# [0-9]' "$res/messages.txt" | sed 's/^/kernel-smc-capture: messages: /'
        grep '^# [0-9]' "$res/messages.txt" | awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^(dir|type)=/) printf "%s ", $i; print "" }' |
                sort | uniq -c | sort -rn
        echo "kernel-smc-capture: results in $res (messages.txt)"
        exit 0
fi

smcd=$1 xfer=$2 kxfer=$3 kcfg=$4 extract=$5
res=/results
tmp=$(mktemp -d /tmp/kcap.XXXXXX)
pids=()
log() { echo "# $*"; }
finish() {
        for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
        sleep 0.3
        for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
        cp "$tmp"/*.log "$tmp"/*.out "$res/" 2>/dev/null
}
trap finish EXIT
die() { echo "kernel-smc-capture: $*" >&2; exit 1; }
phase() { echo "$1 $2 $(date +%s.%N)" >>"$res/phases.txt"; }

: >"$res/phases.txt"
vars=$(sh "$RXE_PAIR_SETUP") || die "rxe-pair-setup failed"
eval "$vars"
# warm-up TCP connection (see tests/test-kernel-smcr-vm.sh: TCG vs live code patching)
python3 -c 'import socket; l = socket.create_server(("127.0.0.1", 0)); c = socket.create_connection(l.getsockname()); a, _ = l.accept(); c.sendall(b"x"); a.recv(1); c.close(); a.close(); l.close()'
sleep 1

modprobe smc || die "modprobe smc"
echo 3 >/proc/sys/net/smc/smcr_testlink_time 2>/dev/null || log "cannot set smcr_testlink_time"
python3 "$kcfg" pnet KINT "$RXE_B_NETDEV" "$RXE_B_DEV" 1 >"$tmp/kcfg.out" 2>&1 || die "pnet: $(cat "$tmp/kcfg.out")"
# a UEID smcd does not have: the kernel declines smcd's proposals and smcd the kernel's
python3 "$kcfg" ueid KCAPTURE-OTHER >>"$tmp/kcfg.out" 2>&1 || die "ueid: $(cat "$tmp/kcfg.out")"
# the UEID table has no flush command in kernel-smc-config.py: SMC_NETLINK_FLUSH_UEID (12)
flush_ueid() {
        python3 - "$kcfg" <<'EOF'
import sys, types
m = types.ModuleType("kcfg")
exec(compile(open(sys.argv[1]).read(), sys.argv[1], "exec"), m.__dict__)
g = m.Genl()
g.request(g.family("SMC_GEN_NETLINK"), 12)
EOF
}

{
        echo "kernel $(uname -r)"
        echo "smcd_host A $RXE_A_IP $RXE_A_NETDEV $RXE_A_DEV mac 02:00:0a:4d:00:01 gid $RXE_A_GID"
        echo "kernel_host B $RXE_B_IP $RXE_B_NETDEV $RXE_B_DEV mac 02:00:0a:4d:00:02 gid $RXE_B_GID"
        # rxe's own packets carry CLOCK_MONOTONIC time stamps in the capture
        echo "clock_offset $(python3 -c 'import time; print("%.6f" % (time.time() - time.clock_gettime(time.CLOCK_MONOTONIC)))')"
        echo "testlink_time $(cat /proc/sys/net/smc/smcr_testlink_time 2>/dev/null)"
        for f in smcr_max_links_per_lgr smcr_max_conns_per_lgr; do
                echo "$f $(cat /proc/sys/net/smc/$f 2>/dev/null)"
        done
} >"$res/meta.txt"

grep -q " cgroup2 " /proc/mounts || { mkdir -p /sys/fs/cgroup && mount -t cgroup2 none /sys/fs/cgroup; } || die "cgroup2"
tcpdump -i "$RXE_B_NETDEV" -U -s 0 -w "$res/capture.pcap" >"$tmp/tcpdump.log" 2>&1 &
tdpid=$!
pids+=($tdpid)
for _ in $(seq 100); do grep -q listening "$tmp/tcpdump.log" && break; sleep 0.1; done
grep -q listening "$tmp/tcpdump.log" || die "tcpdump: $(cat "$tmp/tcpdump.log")"

mkdir -p "$tmp/a"
"$smcd" -v --no-bus --runtime-dir "$tmp/a" --state-file "$tmp/a/tunables.json" --roce-dev "$RXE_A_DEV" \
        >"$tmp/smcd.log" 2>&1 &
pid_a=$!
pids+=($pid_a)
for _ in $(seq 300); do [ -S "$tmp/a/smcd.sock" ] && break; sleep 0.1; done
[ -S "$tmp/a/smcd.sock" ] || die "smcd did not start: $(tail -5 "$tmp/smcd.log")"
export SMCD_RUNTIME_DIR=$tmp/a

port=7000
# to_kernel NAME SIZES PARALLEL COUNT [ENV...]: kernel server on B, smcd client on A
to_kernel() {
        local name=$1 sizes=$2 par=$3 count=$4 sp
        shift 4
        port=$((port + 1))
        phase START "$name"
        env ${KSRV_ENV:-} "$kxfer" server "$RXE_B_IP" $port "$count" >"$tmp/$name.ksrv.out" 2>&1 &
        sp=$!
        for _ in $(seq 100); do grep -q listening "$tmp/$name.ksrv.out" && break; sleep 0.1; done
        env "$@" timeout 60 "$xfer" client "$RXE_B_IP" $port "$sizes" "$par" >"$tmp/$name.cli.out" 2>&1
        timeout 60 tail --pid=$sp -f /dev/null
        wait $sp
        sleep 1
        phase END "$name"
        log "$name: $(grep -ho 'mode=[A-Z?]*' "$tmp/$name".*.out | sort | uniq -c | tr '\n' ' ')"
}
# from_kernel NAME SIZES PARALLEL COUNT [ENV...]: smcd server on A, kernel client on B
from_kernel() {
        local name=$1 sizes=$2 par=$3 count=$4 sp
        shift 4
        port=$((port + 1))
        phase START "$name"
        "$xfer" server "$RXE_A_IP" $port "$count" >"$tmp/$name.srv.out" 2>&1 &
        sp=$!
        for _ in $(seq 100); do grep -q listening "$tmp/$name.srv.out" && break; sleep 0.1; done
        env "$@" timeout 60 "$kxfer" client "$RXE_A_IP" $port "$sizes" "$par" >"$tmp/$name.kcli.out" 2>&1
        timeout 60 tail --pid=$sp -f /dev/null
        wait $sp
        sleep 1
        phase END "$name"
        log "$name: $(grep -ho 'mode=[A-Z?]*' "$tmp/$name".*.out | sort | uniq -c | tr '\n' ' ')"
}

log "kernel $(uname -r), capturing on $RXE_B_NETDEV"
from_kernel decline-from-kernel 100 1 1
to_kernel decline-to-kernel 100 1 1
flush_ueid >>"$tmp/kcfg.out" 2>&1 || die "flush UEID: $(cat "$tmp/kcfg.out")"
python3 "$kcfg" ueid SMCD-USERSPACE >>"$tmp/kcfg.out" 2>&1 || die "ueid: $(cat "$tmp/kcfg.out")"
python3 "$kcfg" show >>"$tmp/kcfg.out" 2>&1

to_kernel to-kernel-first 1000 1 1
to_kernel to-kernel-reuse 1,65536 1 2
to_kernel to-kernel-parallel 3x1000 3 3 SMCR_XFER_TOGETHER=1
KSRV_ENV=KSMC_XFER_WAIT_EOF=1 to_kernel to-kernel-smcd-closes-first 100 1 1 SMCR_XFER_SHUTDOWN=1
from_kernel from-kernel-first 1000 1 1
from_kernel from-kernel-reuse 1,65536 1 2
from_kernel from-kernel-parallel 3x1000 3 3 KSMC_XFER_TOGETHER=1
from_kernel from-kernel-kernel-closes-first 100 1 1 KSMC_XFER_SHUTDOWN=1

phase START idle
sleep 8
phase END idle

phase START rmmod
timeout 30 rmmod smc_diag smc 2>"$tmp/rmmod.out" || log "rmmod smc: $(cat "$tmp/rmmod.out")"
sleep 3
kill "$pid_a"
timeout 20 tail --pid="$pid_a" -f /dev/null
sleep 1
phase END rmmod

kill -INT $tdpid
timeout 10 tail --pid=$tdpid -f /dev/null
cat "$tmp/tcpdump.log"
python3 "$extract" "$res/capture.pcap" --phases "$res/phases.txt" --meta "$res/meta.txt" --summary ||
        die "extractor failed"
exit 0
