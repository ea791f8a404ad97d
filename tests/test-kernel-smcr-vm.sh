#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# smcd against the Linux kernel's own SMC-R v2, in a throw-away qemu VM on Debian's 6.12
# kernel (tests/vm/run-vm --kernel 6.12; 6.1's rxe is not good enough for kernel SMC-R).
# tests/vm/rxe-pair-setup.sh makes two "hosts" joined by one veth pair:
#   host A: rxe0 on smc0a, 10.77.0.1: ONE smcd (--roce-dev rxe0) + the client library
#           (tests/smcr-xfer.c)
#   host B: rxe1 on smc0b, 10.77.0.2: the kernel's AF_SMC (tests/kernel-smc-xfer.c), set
#           up over generic netlink by tests/vm/kernel-smc-config.py: pnet table
#           smc0b + rxe1 port 1 -> pnetid KINT, and the UEID SMCD-USERSPACE (smcd's,
#           smcd/smcr.c SMCR_UEID), without which the kernel declines SMC-R v2.
# Cases: smcd client -> kernel server and kernel client -> smcd server, sizes 1 B .. 16 MiB
# both ways with checksums, both ends in SMC-R (the library's mode, the kernel's mode from
# smc_diag, smcd's smcr.conns_client / conns_server counters); 50 connections at once in
# one link group (each direction); the close started by either side; SIGKILL of either
# end mid-transfer (the other end gets an error, never hangs; the link group goes on);
# every connection freed in smcd afterwards (smcr.conns_current 0). Then smcd restarted
# with other User EIDs (the ueid tunable): none in common -> both sides decline, TCP with
# the reason recorded on both ends; one in common among several -> SMC-R v2 with that
# UEID. Then smcrun on smcd's side: kernel-smc-xfer as a plain AF_INET program under
# smcrun against the kernel's AF_SMC, both directions.
# Last, two RoCE devices on each side (the second path rxe2/rxe3 of rxe-pair-setup.sh
# RXE_PAIR_LINKS=2, which the earlier cases leave unused): smcd offers the kernel a
# second link and takes the kernel's ADD LINK; the kernel (v2) makes its side of either
# on its first device (an asymmetric link across the two subnets, which this one-kernel
# VM cannot carry), so the link never comes up and the kernel deletes it after its 5 s
# wait. Checked: data intact in SMC-R both ways, the ADD LINK / DELETE LINK exchange
# ends cleanly, no link group ends, and smcd does not try again in a loop.
# At the very end smcd is stopped (SIGTERM) with transfers under way both ways: the
# kernel's ends must fail within 15 s (smcd sends DELETE LINK; without it the kernel
# waits for TEST LINK, 30 s), the library's ends too.
# Args: SMCD SMCR_XFER KERNEL_SMC_XFER RUN_VM KERNEL_SMC_CONFIG [LIBSMCRUN SMCRUN]. Skips
# (77) without qemu, the 6.12 kernel (scripts/install-vm-deps.sh --kernel-6.12) or the
# rdma tools.
# KSMC_VM_KEEP=DIR keeps smcd's log, the outputs and the guest's dmesg. TAP-ish output; exit 0 if all passed.
set -u

if [ -z "${SMCD_TEST_IN_VM:-}" ]; then
        smcd=$1 xfer=$2 kxfer=$3 runvm=$4 kcfg=$5 runlib=${6:-} runsh=${7:-}
        [ -x "$runvm" ] || { echo "SKIP: $runvm missing"; exit 77; }
        for p in rdma ip; do
                command -v $p >/dev/null || { echo "SKIP: $p not installed (scripts/install-vm-deps.sh)"; exit 77; }
        done
        "$runvm" --kernel 6.12 --check || { echo "SKIP: no 6.12 kernel or qemu"; exit 77; }
        keep=()
        [ -n "${KSMC_VM_KEEP:-}" ] && mkdir -p "$KSMC_VM_KEEP" && keep=(--results "$KSMC_VM_KEEP")
        # Booted again (up to 3 boots) when the GUEST KERNEL crashed (tests/vm/retry-crashed:
        # the 6.12 guest under qemu TCG, not SMC); any other failure counts at once.
        "$(dirname "$0")/vm/retry-crashed" 3 \
                "$runvm" "${keep[@]}" --kernel 6.12 --timeout "${KSMC_VM_TIMEOUT:-800}" --mem 2048 \
                --env SMCD_TEST_IN_VM=1 --env RXE_PAIR_SETUP="$(realpath "$(dirname "$0")")/vm/rxe-pair-setup.sh" \
                "$0" "$(realpath "$smcd")" "$(realpath "$xfer")" "$(realpath "$kxfer")" "$(realpath "$kcfg")" \
                ${runsh:+"$(realpath "$runlib")" "$(realpath "$runsh")"}
        rc=$?
        exit "$rc"
fi

smcd=$1 xfer=$2 kxfer=$3 kcfg=$4 runlib=${5:-} runsh=${6:-}
failed=0 passed=0
ok() { echo "ok - $*"; passed=$((passed + 1)); }
nok() { echo "not ok - $*"; failed=$((failed + 1)); }
now() { read -r up _ </proc/uptime; echo "$up"; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f s", b - a }'; }
tmp=$(mktemp -d /tmp/ksmc-vm.XXXXXX)
pids=()
finish() {
        for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
        sleep 0.2
        for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
        # (with the guest kernel's log: its SMC side of a failed check)
        [ -d /results ] && [ -w /results ] && dmesg >"$tmp/dmesg.out" 2>&1
        [ -d /results ] && [ -w /results ] && cp "$tmp"/*.log "$tmp"/*.out /results/ 2>/dev/null
}
trap finish EXIT
done_tests() {
        echo "$passed passed, $failed failed"
        [ "$failed" = 0 ]
        exit $?
}

echo "# kernel $(uname -r)"
t0=$(now)
vars=$(RXE_PAIR_LINKS=2 sh "$RXE_PAIR_SETUP") || { nok "rxe-pair-setup"; done_tests; }
eval "$vars"
ok "rxe pairs: $RXE_A_DEV ($RXE_A_IP) <-> $RXE_B_DEV ($RXE_B_IP), $RXE_A2_DEV ($RXE_A2_IP) <-> $RXE_B2_DEV ($RXE_B2_IP) in $(since "$t0")"
# Warm-up: the VM's first TCP connection makes the kernel flip static keys (the
# net_get_random_once of the established-hash secret, patched from a workqueue). One run
# of three panicked in inet_ehashfn (RIP on the 2nd byte of its 5-byte NOP) right in the
# first SMC handshake: most likely qemu TCG (thread=multi) racing that live code
# patching. Let it happen now, while nothing else runs.
python3 -c 'import socket; l = socket.create_server(("127.0.0.1", 0)); c = socket.create_connection(l.getsockname()); a, _ = l.accept(); c.sendall(b"x"); a.recv(1); c.close(); a.close(); l.close()' &&
        sleep 1

# the kernel's SMC on host B only: its netdev and rxe1 share a pnetid; smcd's UEID
if modprobe smc && python3 "$kcfg" pnet KINT "$RXE_B_NETDEV" "$RXE_B_DEV" 1 >"$tmp/kcfg.out" 2>&1 &&
   python3 "$kcfg" ueid SMCD-USERSPACE >>"$tmp/kcfg.out" 2>&1 && python3 "$kcfg" show >>"$tmp/kcfg.out" 2>&1 &&
   grep -q "ueid: 'SMCD-USERSPACE  " "$tmp/kcfg.out"; then
        ok "kernel SMC configured: pnet $RXE_B_NETDEV/$RXE_B_DEV:1 -> KINT, UEID SMCD-USERSPACE"
else
        nok "kernel SMC configuration: $(tr '\n' ' ' <"$tmp/kcfg.out")"
        done_tests
fi

# smcd's SMC TCP option program attaches to the cgroup v2 root
if ! grep -q " cgroup2 " /proc/mounts; then
        mkdir -p /sys/fs/cgroup && mount -t cgroup2 none /sys/fs/cgroup || { nok "mount cgroup2"; done_tests; }
fi
mkdir -p "$tmp/a"
start_smcd() { # [OPTION...]: smcd on host A (log appended to a.log), pid in pid_a
        rm -f "$tmp/a/smcd.sock"
        "$smcd" -v --no-bus --runtime-dir "$tmp/a" --state-file "$tmp/a/tunables.json" --roce-dev "$RXE_A_DEV" "$@" \
                >>"$tmp/a.log" 2>&1 &
        pid_a=$!
        pids+=($pid_a)
        for _ in $(seq 300); do [ -S "$tmp/a/smcd.sock" ] && break; sleep 0.1; done
        [ -S "$tmp/a/smcd.sock" ] && ! grep -q "SMC-R unavailable" "$tmp/a.log"
}
stop_smcd() {
        kill "$pid_a" && timeout 30 tail --pid="$pid_a" -f /dev/null
}
if start_smcd; then
        ok "smcd on $RXE_A_DEV only"
else
        nok "smcd did not start with SMC-R: $(tail -5 "$tmp/a.log")"
        done_tests
fi
export SMCD_RUNTIME_DIR=$tmp/a

stat_of() { # KEY: a counter of the SMC-R section of smcd's stats.json (after SIGUSR1)
        kill -USR1 "$pid_a" 2>/dev/null
        sleep 1
        python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d.get("smcr",{}).get(sys.argv[2],0))' \
                "$tmp/a/stats.json" "$1" 2>/dev/null || echo 0
}
# lgr_ids FROM_LINE: the distinct link group ids of smcd's handshakes logged after line FROM_LINE
lgr_ids() { tail -n +"$(($1 + 1))" "$tmp/a.log" | grep -o 'SMC-R v2 .*link group [0-9a-f]*' | awk '{print $NF}' | sort -u; }
handshakes() { tail -n +"$(($1 + 1))" "$tmp/a.log" | grep -c 'SMC-R v2 .*link group '; }
loglines() { wc -l <"$tmp/a.log"; }

port=6000
want=SMCR # the mode both ends must be in
# xfer_to_kernel LABEL SIZES PARALLEL COUNT [ENV...]: kernel server on B, smcd client on A
xfer_to_kernel() {
        local label=$1 sizes=$2 par=$3 count=$4 t sp crc src
        shift 4
        port=$((port + 1))
        t=$(now)
        env KSMC_XFER_MODE=$want ${KSMC_SRV_ENV:-} "$kxfer" server "$RXE_B_IP" $port "$count" >"$tmp/ksrv.$port.out" 2>&1 &
        sp=$!
        pids+=($sp)
        for _ in $(seq 100); do grep -q listening "$tmp/ksrv.$port.out" && break; sleep 0.1; done
        env SMCR_XFER_MODE=$want "$@" timeout 300 ${CLI_WRAP:-"$xfer"} client "$RXE_B_IP" $port "$sizes" "$par" >"$tmp/cli.$port.out" 2>&1
        crc=$?
        timeout 120 tail --pid=$sp -f /dev/null
        wait $sp
        src=$?
        if [ $crc = 0 ] && [ $src = 0 ]; then
                ok "$label: $(grep -c '^ok client' "$tmp/cli.$port.out") client + $(grep -c "^ok server .*mode=$want" "$tmp/ksrv.$port.out") kernel server checks in $want, $(since "$t")"
        else
                nok "$label: library client exit $crc, kernel server exit $src"
                grep -v '^ok' "$tmp/cli.$port.out" | head -5
                grep -v '^ok' "$tmp/ksrv.$port.out" | head -5
                tail -15 "$tmp/a.log"
        fi
}
# xfer_from_kernel LABEL SIZES PARALLEL COUNT [ENV...]: smcd server on A, kernel client on B
xfer_from_kernel() {
        local label=$1 sizes=$2 par=$3 count=$4 t sp crc src
        shift 4
        port=$((port + 1))
        t=$(now)
        SMCR_XFER_MODE=$want ${SRV_WRAP:-"$xfer"} server "$RXE_A_IP" $port "$count" >"$tmp/srv.$port.out" 2>&1 &
        sp=$!
        pids+=($sp)
        for _ in $(seq 100); do grep -q listening "$tmp/srv.$port.out" && break; sleep 0.1; done
        env KSMC_XFER_MODE=$want "$@" timeout 300 "$kxfer" client "$RXE_A_IP" $port "$sizes" "$par" >"$tmp/kcli.$port.out" 2>&1
        crc=$?
        timeout 120 tail --pid=$sp -f /dev/null
        wait $sp
        src=$?
        if [ $crc = 0 ] && [ $src = 0 ]; then
                ok "$label: $(grep -c "^ok client .*mode=$want" "$tmp/kcli.$port.out") kernel client + $(grep -c '^ok server' "$tmp/srv.$port.out") server checks in $want, $(since "$t")"
        else
                nok "$label: kernel client exit $crc, library server exit $src"
                grep -v '^ok' "$tmp/kcli.$port.out" | head -5
                grep -v '^ok' "$tmp/srv.$port.out" | head -5
                tail -15 "$tmp/a.log"
        fi
}

# First contact from a kernel client: with max_links 2 its connect() waits 2 s for the
# server's ADD LINK and 1 s more for a DECLINE (smcr_clnt_conf_first_link: fixed kernel
# timers); smcd, with no second device, negotiates max_links 1 in its Accept, so no
# wait. (Before: the first 1-byte transfer took 4.3-4.5 s in this VM; after: 1.2-1.3 s.)
xfer_from_kernel "first contact of a kernel client" 1 1 1
cms=$(grep -o 'connect_ms=[0-9]*' "$tmp/kcli.$port.out" | head -1)
[ -n "$cms" ] && [ "${cms#connect_ms=}" -lt 3000 ] && grep -q "max links 1" "$tmp/a.log" &&
        ok "no ADD LINK wait in the kernel client's first connect() ($cms; smcd: $(grep -o 'max links 1[^,]*' "$tmp/a.log" | head -1))" ||
        nok "the kernel client's first connect(): ${cms:-no connect_ms} ($(grep -o 'max links [0-9]*' "$tmp/a.log" | head -1))"
sizes=1,100,65536,1000000,16777216
c0=$(stat_of conns_client) s0=$(stat_of conns_server)
xfer_to_kernel "smcd client -> kernel server, sizes 1 B .. 16 MiB both ways, checksums" $sizes 1 5
xfer_from_kernel "kernel client -> smcd server, sizes 1 B .. 16 MiB both ways, checksums" $sizes 1 5
c1=$(stat_of conns_client) s1=$(stat_of conns_server)
[ $((c1 - c0)) -ge 5 ] && [ $((s1 - s0)) -ge 5 ] &&
        ok "smcd counted them in SMC-R: smcr.conns_client $c0 -> $c1, smcr.conns_server $s0 -> $s1" ||
        nok "smcd counters: smcr.conns_client $c0 -> $c1, smcr.conns_server $s0 -> $s1 (want +5 each)"
# the kernel chose v2 every time; one first contact per direction (two link groups)
hs=$(grep -c 'SMC-R v[0-9] .*link group ' "$tmp/a.log") hs2=$(grep -c 'SMC-R v2 .*link group ' "$tmp/a.log")
fc=$(grep -c 'SMC-R v2 .*(first contact)' "$tmp/a.log")
[ "$hs" = 11 ] && [ "$hs2" = 11 ] && [ "$fc" = 2 ] &&
        ok "SMC-R v2 in all $hs handshakes, first contact once per direction ($fc), reused after" ||
        nok "handshakes $hs, of them v2 $hs2, first contacts $fc (want 11, 11, 2)"
grep -o 'link group [0-9a-f]*: ADD LINK.*' "$tmp/a.log" | sort -u | sed 's/^/# smcd: /'

for dir in to from; do
        l0=$(loglines)
        if [ $dir = to ]; then
                xfer_to_kernel "50 connections at once, smcd client -> kernel server" 50x65536 50 50 SMCR_XFER_TOGETHER=1
        else
                xfer_from_kernel "50 connections at once, kernel client -> smcd server" 50x65536 50 50 KSMC_XFER_TOGETHER=1
        fi
        ids=$(lgr_ids "$l0") n=$(handshakes "$l0")
        fc=$(tail -n +"$((l0 + 1))" "$tmp/a.log" | grep -c 'SMC-R v2 .*(first contact)')
        [ "$(echo "$ids" | grep -c .)" = 1 ] && [ "$n" = 50 ] && [ "$fc" -le 1 ] &&
                ok "the 50 connections ($dir kernel) share one link group ($ids; new first contacts: $fc)" ||
                nok "50 connections ($dir kernel): $n handshakes in link groups $(echo $ids), $fc first contacts"
done

# who closes: the kernel server closes right after its reply above (kernel first) and the
# library server likewise (smcd first); here the other way round in each direction
KSMC_SRV_ENV=KSMC_XFER_WAIT_EOF=1 xfer_to_kernel "smcd client half-closes first, kernel server closes after EOF" \
        1,65536,1000000 1 3 SMCR_XFER_SHUTDOWN=1
xfer_from_kernel "kernel client half-closes first, smcd server replies and closes" 1,65536,1000000 1 3 KSMC_XFER_SHUTDOWN=1

# kill_mid DIR VICTIM: a 1 GiB transfer (DIR to: kernel server, library client; from:
# library server, kernel client), VICTIM (lib or kernel) killed with SIGKILL once smcd has
# the connection in SMC-R; the other end must end with an error within 60 s
kill_mid() {
        local dir=$1 victim=$2 sp cp vpid other t rc cur label out
        port=$((port + 1))
        if [ "$dir" = to ]; then
                label="SIGKILL of the $victim end, smcd client -> kernel server"
                "$kxfer" server "$RXE_B_IP" $port 1 >"$tmp/ksrv.$port.out" 2>&1 &
                sp=$!
                for _ in $(seq 100); do grep -q listening "$tmp/ksrv.$port.out" && break; sleep 0.1; done
                "$xfer" client "$RXE_B_IP" $port 1073741824 1 >"$tmp/cli.$port.out" 2>&1 &
                cp=$!
                if [ "$victim" = smcd-side ]; then vpid=$cp other=$sp out=$tmp/ksrv.$port.out
                else vpid=$sp other=$cp out=$tmp/cli.$port.out; fi
        else
                label="SIGKILL of the $victim end, kernel client -> smcd server"
                "$xfer" server "$RXE_A_IP" $port 1 >"$tmp/srv.$port.out" 2>&1 &
                sp=$!
                for _ in $(seq 100); do grep -q listening "$tmp/srv.$port.out" && break; sleep 0.1; done
                "$kxfer" client "$RXE_A_IP" $port 1073741824 1 >"$tmp/kcli.$port.out" 2>&1 &
                cp=$!
                if [ "$victim" = smcd-side ]; then vpid=$sp other=$cp out=$tmp/kcli.$port.out
                else vpid=$cp other=$sp out=$tmp/srv.$port.out; fi
        fi
        pids+=($sp $cp)
        cur=0
        for _ in 1 2 3 4 5; do cur=$(stat_of conns_current); [ "$cur" -ge 1 ] && break; done
        if [ "$cur" -lt 1 ] || ! kill -0 "$vpid" 2>/dev/null || ! kill -0 "$other" 2>/dev/null; then
                nok "$label: not under way in SMC-R at the kill (smcr.conns_current $cur)"
                kill -9 "$sp" "$cp" 2>/dev/null
                return
        fi
        { kill -9 "$vpid"; wait "$vpid"; } 2>/dev/null # (no "Killed" line from bash)
        t=$(now)
        if timeout 60 tail --pid="$other" -f /dev/null; then
                wait "$other"
                rc=$?
                [ "$rc" != 0 ] && ok "$label: the other end ended with an error in $(since "$t") (exit $rc: $(grep -m1 FAIL "$out"))" ||
                        nok "$label: the other end exited 0 after its peer was killed mid-transfer"
        else
                nok "$label: the other end still runs 60 s after the kill"
                kill -9 "$other"
        fi
}
l0=$(loglines)
kill_mid to smcd-side
kill_mid to kernel
kill_mid from smcd-side
kill_mid from kernel
xfer_to_kernel "after the kills, smcd client -> kernel server" 1,65536,1000000 1 3
xfer_from_kernel "after the kills, kernel client -> smcd server" 1,65536,1000000 1 3
fc=$(tail -n +"$((l0 + 1))" "$tmp/a.log" | grep -c 'SMC-R v2 .*(first contact)')
ended=$(tail -n +"$((l0 + 1))" "$tmp/a.log" | grep -c 'link group .*aborting\|link group [0-9a-f]* freed')
[ "$fc" = 0 ] && [ "$ended" = 0 ] && ok "the link groups outlived the kills (no new first contact, none ended)" ||
        nok "after the kills: $fc new first contacts, $ended link groups ended"
sleep 2
cur=$(stat_of conns_current)
[ "$cur" = 0 ] && ok "every SMC-R connection freed in smcd (smcr.conns_current 0)" ||
        nok "smcr.conns_current $cur after all closed"

# ---- User EIDs (smcd's ueid tunable): none in common -> a decline each way ----
stop_smcd
if start_smcd --ueid NOT-THE-KERNELS; then
        ok "smcd restarted with ueid NOT-THE-KERNELS"
        want=TCP
        ds0=$(stat_of decline_sent) dr0=$(stat_of decline_rcvd)
        xfer_to_kernel "no common UEID, smcd client -> kernel server: TCP, data intact" 1,1000000 1 2
        xfer_from_kernel "no common UEID, kernel client -> smcd server: TCP, data intact" 1,1000000 1 2
        ds1=$(stat_of decline_sent) dr1=$(stat_of decline_rcvd)
        lr=$(grep -o 'reason=0x[0-9a-f]*' "$tmp/cli.$((port - 1)).out" | sort -u | tr '\n' ' ')
        kr=$(grep -o 'reason=0x[0-9a-f]* peer=0x[0-9a-f]*' "$tmp/kcli.$port.out" | sort -u | tr '\n' ' ')
        # the kernel declined smcd's proposal (its last failed check: smcd also offers v1,
        # whose prefix check fails here) and smcd declined the kernel's v2-only one with
        # SMC_CLC_DECL_NOUEID; the kernel records PEERDECL + smcd's diagnosis
        [ -n "$lr" ] && ! echo "$lr" | grep -q 'reason=0x00000000' && [ "$kr" = "reason=0x05000000 peer=0x03030008 " ] &&
           [ $((dr1 - dr0)) -ge 2 ] && [ $((ds1 - ds0)) -ge 2 ] &&
                ok "decline reasons recorded: library client $lr; kernel client $kr; smcd decline_rcvd +$((dr1 - dr0)), decline_sent +$((ds1 - ds0))" ||
                nok "decline reasons: library client '$lr', kernel client '$kr', decline_rcvd $dr0 -> $dr1, decline_sent $ds0 -> $ds1"
        grep -q 'SMC-R server handshake: fallback: SMC_CLC_DECL_NOUEID' "$tmp/a.log" &&
                ok "smcd logged its decline (SMC_CLC_DECL_NOUEID)" || nok "no NOUEID decline in smcd's log"
        want=SMCR
else
        nok "smcd with --ueid NOT-THE-KERNELS did not start: $(tail -3 "$tmp/a.log")"
fi

# ---- several User EIDs, one in common ----
stop_smcd
l0=$(loglines)
if python3 "$kcfg" ueid KINT-SITE >>"$tmp/kcfg.out" 2>&1 && start_smcd --ueid "other-eid,kint-site"; then
        xfer_to_kernel "UEIDs OTHER-EID,KINT-SITE vs the kernel's SMCD-USERSPACE,KINT-SITE, smcd client -> kernel server" \
                1,1000000 1 2
        xfer_from_kernel "the same, kernel client -> smcd server" 1,1000000 1 2
        n=$(tail -n +"$((l0 + 1))" "$tmp/a.log" | grep -c 'SMC-R v2 .*UEID KINT-SITE\.')
        [ "$n" = 4 ] && ok "all 4 handshakes agreed on UEID KINT-SITE" || nok "handshakes with UEID KINT-SITE: $n of 4"
else
        nok "second UEID: $(tail -3 "$tmp/kcfg.out") $(tail -3 "$tmp/a.log")"
fi

# ---- smcrun on smcd's side: an ordinary AF_INET program against the kernel's AF_SMC ----
if [ -n "$runsh" ]; then
        c0=$(stat_of conns_client) s0=$(stat_of conns_server)
        SRV_WRAP="env KSMC_XFER_FAMILY=inet SMCRUN_LIB=$runlib sh $runsh $kxfer" \
                xfer_from_kernel "kernel AF_SMC client -> kernel-smc-xfer (AF_INET) under smcrun, checksums" $sizes 1 5
        CLI_WRAP="sh $runsh $kxfer" xfer_to_kernel "kernel-smc-xfer (AF_INET) under smcrun -> kernel AF_SMC server, checksums" \
                $sizes 1 5 KSMC_XFER_FAMILY=inet SMCRUN_LIB="$runlib"
        c1=$(stat_of conns_client) s1=$(stat_of conns_server)
        [ $((c1 - c0)) = 5 ] && [ $((s1 - s0)) = 5 ] &&
                ok "smcd carried the smcrun connections in SMC-R: smcr.conns_client +5, smcr.conns_server +5" ||
                nok "smcrun connections: smcr.conns_client $c0 -> $c1, smcr.conns_server $s0 -> $s1 (want +5 each)"
else
        echo "ok - smcrun against the kernel # SKIP (no LIBSMCRUN / SMCRUN given)"
fi

# ---- two devices on each side ----
stop_smcd
l0=$(loglines)
if python3 "$kcfg" pnet KINT "$RXE_B2_NETDEV" "$RXE_B2_DEV" 1 >>"$tmp/kcfg.out" 2>&1 &&
   start_smcd --roce-dev "$RXE_A2_DEV"; then
        ok "smcd on $RXE_A_DEV and $RXE_A2_DEV, the kernel's pnet KINT on $RXE_B_DEV and $RXE_B2_DEV"
        xfer_from_kernel "two devices each, kernel client -> smcd server (smcd sends ADD LINK)" 1,1000000,16777216 1 3
        xfer_to_kernel "two devices each, smcd client -> kernel server (the kernel sends ADD LINK)" 1,1000000,16777216 1 3
        sleep 12 # the kernel's wait for the new link's CONFIRM LINK (5 s), then any retry
        xfer_from_kernel "two devices each, after the ADD LINK attempts, kernel client -> smcd server" 65536 1 1
        xfer_to_kernel "two devices each, after the ADD LINK attempts, smcd client -> kernel server" 65536 1 1
        new=$(tail -n +"$((l0 + 1))" "$tmp/a.log")
        adds=$(echo "$new" | grep -c ': ADD LINK [0-9]* on ')
        ended=$(echo "$new" | grep -c 'link group .*aborting')
        fc=$(echo "$new" | grep -c 'SMC-R v2 .*(first contact), max links 2')
        [ "$fc" = 2 ] && [ "$adds" -ge 1 ] && [ "$adds" -le 2 ] && [ "$ended" = 0 ] &&
                ok "max links 2 negotiated both ways; smcd's ADD LINK tries: $adds (no loop); no link group ended" ||
                nok "two devices: first contacts with max links 2: $fc, smcd ADD LINK tries $adds, groups ended $ended"
        echo "$new" | grep -o 'link group [0-9a-f]*: \(link [0-9] ([a-z0-9]*) removed\|no second link\|link [0-9] added\|ADD LINK rejected\)[^;.]*' |
                sort | uniq -c | sed 's/^/# smcd: /'
else
        nok "two devices: $(tail -3 "$tmp/kcfg.out") $(tail -3 "$tmp/a.log")"
fi

sleep 2
cur=$(stat_of conns_current)
[ "$cur" = 0 ] && ok "at the end, every SMC-R connection freed in smcd (smcr.conns_current 0)" ||
        nok "smcr.conns_current $cur at the end"

# ---- smcd stopped (SIGTERM) mid-transfer: the kernel is told (DELETE LINK) ----
# Without that the kernel would notice only by TEST LINK (30 s; never with
# smcr_testlink_time 0); 15 s is the bound here.
port=$((port + 1))
"$kxfer" server "$RXE_B_IP" $port 1 >"$tmp/ksrv.$port.out" 2>&1 &
ks=$!
for _ in $(seq 100); do grep -q listening "$tmp/ksrv.$port.out" && break; sleep 0.1; done
"$xfer" client "$RXE_B_IP" $port 1073741824 1 >"$tmp/cli.$port.out" 2>&1 &
lc=$!
port=$((port + 1))
"$xfer" server "$RXE_A_IP" $port 1 >"$tmp/srv.$port.out" 2>&1 &
ls=$!
for _ in $(seq 100); do grep -q listening "$tmp/srv.$port.out" && break; sleep 0.1; done
"$kxfer" client "$RXE_A_IP" $port 1073741824 1 >"$tmp/kcli.$port.out" 2>&1 &
kc=$!
pids+=($ks $lc $ls $kc)
cur=0
for _ in 1 2 3 4 5; do cur=$(stat_of conns_current); [ "$cur" -ge 2 ] && break; done
if [ "$cur" -ge 2 ]; then
        t=$(now)
        kill -TERM "$pid_a"
        res=""
        for pp in "kernel server:$ks" "library client:$lc" "library server:$ls" "kernel client:$kc"; do
                n=${pp%%:*} p=${pp##*:}
                if timeout 15 tail --pid="$p" -f /dev/null; then
                        wait "$p"
                        res="$res; $n exit $?"
                else
                        res="$res; $n STILL RUNNING"
                        kill -9 "$p"
                fi
        done
        el=$(since "$t")
        case $res in
        *"STILL RUNNING"* | *"exit 0"*) nok "smcd SIGTERM mid-transfer: after $el$res" ;;
        *) ok "smcd SIGTERM mid-transfer: both kernel ends and both library ends ended with an error within $el$res" ;;
        esac
        grep -q "told the peers that their link groups end" "$tmp/a.log" &&
                ok "smcd told the kernel (DELETE LINK) before it exited" || nok "no DELETE LINK at smcd's exit in its log"
else
        nok "smcd SIGTERM mid-transfer: transfers not under way (smcr.conns_current $cur)"
fi
grep -i "protocol violation\|unexpected\|malformed\|refus" "$tmp/a.log" | head -5 | sed 's/^/# smcd log: /'
done_tests
