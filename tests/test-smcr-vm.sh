#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# SMC-R for real, in a throw-away qemu VM (tests/vm/run-vm, TCG): two smcd instances as
# two hosts, smcd A on rxe0 (10.77.0.1, smc0a) and smcd B on rxe1 (10.77.0.2, smc0b),
# the two ends of one veth pair (tests/vm/rxe-pair-setup.sh). Through the client library
# (tests/smcr-xfer.c): checked transfers both directions, 1 B .. 64 MiB, many
# connections in parallel (more than one link group), inline on and off (the inline CDC
# counter moves only with on), a plain TCP server reached without SMC (no CLC byte),
# a client killed with SIGKILL mid-transfer, bytes a cork or MSG_MORE held when the
# sender's process ends (sent before its FIN; dropped by an RST), the netdev set down
# mid-transfer.
# Two links per group (a second veth pair, rxe2/rxe3 on 10.78.0.x): the server adds
# the second link (ADD LINK), connections spread over both; the second path's netdev
# set down mid-transfer moves its connections to the first link with every byte
# intact (failover), and the link is added again when the netdev is back.
# An SO_REUSEPORT server on B that accepts from its old listener until EAGAIN, closes it
# and serves from the new one while 32 clients from A connect: every client answered
# (the SMC-R connections whose handshake ran at the close, or that waited on the old
# listener's accept channel, go to the new listener: SMC-R hand-over).
# smcd A stopped (SIGTERM) while a handshake waits for the server's accept: it declines
# instead of its CONFIRM and exits after; the connection goes on as TCP.
# Through smcrun too: sockperf ping-pong and throughput (when sockperf is installed).
# Args: SMCD SMCR_XFER RUN_VM [LIBSMCRUN SMCRUN]. Skips (77) without qemu / kernel / rdma
# tools. SMCR_VM_KEEP=DIR keeps smcd's logs. SMCD_SMCR_TRACE=1 traces every CDC.
# SMC_DEBUG=1: the client library's fallback / error decisions (libsmcproto(3)) go to
# the smcr-xfer outputs (cli.PORT, srv.PORT).
# SMCR_TESTS=sizes,parallel,plain,kill,held,sockperf,pnet,inline,cqpoll,linkdown,failover,handoff,async,stop picks cases.
# TAP-ish output; exit 0 if all passed.
set -u

if [ -z "${SMCD_TEST_IN_VM:-}" ]; then
        smcd=$1 xfer=$2 runvm=$3 lib=${4:-} run=${5:-}
        [ -x "$runvm" ] || { echo "SKIP: $runvm missing"; exit 77; }
        for p in rdma ip; do
                command -v $p >/dev/null || { echo "SKIP: $p not installed (scripts/install-vm-deps.sh)"; exit 77; }
        done
        "$runvm" --check || exit 77
        keep=()
        [ -n "${SMCR_VM_KEEP:-}" ] && mkdir -p "$SMCR_VM_KEEP" && keep=(--results "$SMCR_VM_KEEP")
        exec "$runvm" "${keep[@]}" --timeout "${SMCR_VM_TIMEOUT:-900}" --mem 2048 --env SMCD_TEST_IN_VM=1 \
                --env RXE_PAIR_SETUP="$(realpath "$(dirname "$0")")/vm/rxe-pair-setup.sh" \
                --env HANDOFF_APP="$(realpath "$(dirname "$0")")/apps/reuseport-handoff.py" \
                --env NETNS_APP="$(realpath "$(dirname "$0")")/netns-smcd.py" \
                --env SMCR_TESTS="${SMCR_TESTS:-all}" --env SMCD_SMCR_TRACE="${SMCD_SMCR_TRACE:-}" \
                --env SMC_DEBUG="${SMC_DEBUG:-}" \
                "$0" "$(realpath "$smcd")" "$(realpath "$xfer")" "${lib:+$(realpath "$lib")}" "${run:+$(realpath "$run")}"
fi

smcd=$1 xfer=$2 smcrun_lib=${3:-} smcrun_sh=${4:-}
failed=0 passed=0
ok() { echo "ok - $*"; passed=$((passed + 1)); }
nok() { echo "not ok - $*"; failed=$((failed + 1)); }
now() { read -r up _ </proc/uptime; echo "$up"; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f s", b - a }'; }
want() { [ "$SMCR_TESTS" = all ] || [[ ",$SMCR_TESTS," == *",$1,"* ]]; }
tmp=$(mktemp -d /tmp/smcr-vm.XXXXXX)
pids=()
cleanup() {
        for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
        sleep 0.2
        for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
        # SMCR_VM_KEEP=DIR on the host: the smcd logs and outputs land there
        [ -d /results ] && [ -w /results ] && cp "$tmp"/*.log "$tmp"/*.out /results/ 2>/dev/null
}
trap cleanup EXIT

echo "# kernel $(uname -r)"
t0=$(now)
# 300 SMC-R connections in one client process hold 3 descriptors each (the app's
# socket, the doorbell end, the idle TCP socket), more while they are set up
ulimit -n 8192 2>/dev/null || ulimit -n "$(ulimit -Hn)"
echo "# descriptors per process: $(ulimit -n)"
vars=$(RXE_PAIR_LINKS=2 sh "$RXE_PAIR_SETUP") || { nok "rxe-pair-setup"; exit 1; }
eval "$vars"
ok "rxe pairs: $RXE_A_DEV ($RXE_A_IP) <-> $RXE_B_DEV ($RXE_B_IP), $RXE_A2_DEV ($RXE_A2_IP) <-> $RXE_B2_DEV ($RXE_B2_IP) in $(since "$t0")"

# the SMC TCP option program attaches to the cgroup v2 root
if ! grep -q " cgroup2 " /proc/mounts; then
        mkdir -p /sys/fs/cgroup && mount -t cgroup2 none /sys/fs/cgroup || { nok "mount cgroup2"; exit 1; }
fi

start_smcd() { # NAME DEV [extra options]
        local name=$1 dev=$2
        shift 2
        mkdir -p "$tmp/$name"
        "$smcd" -v --no-bus --runtime-dir "$tmp/$name" --state-file "$tmp/$name/tunables.json" \
                --roce-dev "$dev" "$@" >"$tmp/$name.log" 2>&1 &
        pids+=($!)
        eval "pid_$name=$!"
        for _ in $(seq 300); do [ -S "$tmp/$name/smcd.sock" ] && return 0; sleep 0.1; done
        return 1
}
stop_smcd() { # NAME
        local p
        eval "p=\$pid_$1"
        kill "$p" 2>/dev/null
        for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        wait "$p" 2>/dev/null
}
A() { SMCD_RUNTIME_DIR=$tmp/a "$@"; }
B() { SMCD_RUNTIME_DIR=$tmp/b "$@"; }
stat_of() { # NAME KEY: a counter of the SMC-R section of stats.json
        python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d.get("smcr",{}).get(sys.argv[2],0))' \
                "$tmp/$1/stats.json" "$2" 2>/dev/null || echo 0
}

# `ip link set X down` flushes the routes and (permanent) neighbour entries through X:
# put back what rxe-pair-setup.sh made for host A's side of path 1 or 2 (TABLE DEV SRC DST)
restore_path() {
        ip route replace "$4" dev "$2" src "$3" table "$1"
        ip neigh replace "$4" lladdr "$(cat /sys/class/net/"$5"/address)" dev "$2" nud permanent
}
wait_port() { # DEV: ACTIVE again (10 s at most)
        local st
        for _ in $(seq 100); do
                read -r st _ <"/sys/class/infiniband/$1/ports/1/state" 2>/dev/null
                [ "${st%:}" = 4 ] && return 0
                sleep 0.1
        done
        return 1
}

port=5000
run_xfer() { # LABEL SIZES PARALLEL [COUNT]: server on B, client on A; both must pass in SMC-R
        local label=$1 sizes=$2 par=$3 count=$4 t
        port=$((port + 1))
        t=$(now)
        SMCD_RUNTIME_DIR=$tmp/b SMCR_XFER_MODE=SMCR "$xfer" server "$RXE_B_IP" $port "$count" >"$tmp/srv.$port" 2>&1 &
        local sp=$!
        for _ in $(seq 100); do grep -q listening "$tmp/srv.$port" && break; sleep 0.1; done
        if A env SMCR_XFER_MODE=SMCR ${SMCR_XFER_TOGETHER:+SMCR_XFER_TOGETHER=1} \
                ${SMCR_XFER_SHUTDOWN:+SMCR_XFER_SHUTDOWN=1} timeout 600 "$xfer" client "$RXE_B_IP" $port "$sizes" "$par" >"$tmp/cli.$port" 2>&1 &&
           timeout 120 tail --pid=$sp -f /dev/null && wait $sp; then
                ok "$label: $(grep -c '^ok client' "$tmp/cli.$port") client + $(grep -c '^ok server' "$tmp/srv.$port") server checks in SMC-R, $(since "$t")"
        else
                nok "$label"
                grep -v '^ok' "$tmp/cli.$port" | head -5
                grep -v '^ok' "$tmp/srv.$port" | head -5
                kill $sp 2>/dev/null
                tail -20 "$tmp/a.log"
                tail -20 "$tmp/b.log"
        fi
}

start_smcd a "$RXE_A_DEV" || { nok "smcd A did not start"; cat "$tmp/a.log"; exit 1; }
start_smcd b "$RXE_B_DEV" || { nok "smcd B did not start"; cat "$tmp/b.log"; exit 1; }
ok "two smcd instances (A on $RXE_A_DEV, B on $RXE_B_DEV)"
if grep -q "SMC-R unavailable" "$tmp/a.log" "$tmp/b.log"; then
        nok "SMC-R unavailable: $(grep -h 'SMC-R unavailable' "$tmp/a.log" "$tmp/b.log" | head -2)"
        exit 1
fi

if want sizes; then
        run_xfer "sizes 1 B .. 64 MiB, both directions, checksums" \
                1,2,3,100,4095,4096,4097,65535,65536,65537,1000000,16777216,67108864 1 13
fi
if want sizes; then
        # half-close (shutdown(SHUT_WR)) before the reply, then close: every connection
        # must still be freed on both sides (DONE_WRITING, then CLOSED)
        SMCR_XFER_SHUTDOWN=1 run_xfer "half-close then close, 8 connections" 1,100,65536,65537,1000000,1,2,3 1 8
        sleep 2
        kill -USR1 "$pid_a" "$pid_b" 2>/dev/null; sleep 1
        ca=$(stat_of a conns_current) cb=$(stat_of b conns_current)
        [ "$ca" = 0 ] && [ "$cb" = 0 ] && ok "every SMC-R connection freed on both sides (smcr.conns_current 0 / 0)" ||
                nok "connections left: A $ca, B $cb (smcr.conns_current)"
fi
if want parallel; then
        # every transfer intact and every one in SMC-R (the rare SMC_CLC_DECL_INTERR
        # fallbacks seen here were the library's requests made during another thread's
        # HELLO: fixed, test ctl-concurrent)
        port=$((port + 1))
        t=$(now)
        SMCD_RUNTIME_DIR=$tmp/b "$xfer" server "$RXE_B_IP" $port 300 >"$tmp/srv.$port" 2>&1 &
        sp=$!
        for _ in $(seq 100); do grep -q listening "$tmp/srv.$port" && break; sleep 0.1; done
        A env SMCR_XFER_TOGETHER=1 timeout 600 "$xfer" client "$RXE_B_IP" $port 300x4096 300 >"$tmp/cli.$port" 2>&1
        crc=$?
        timeout 120 tail --pid=$sp -f /dev/null
        wait $sp
        src=$?
        okc=$(grep -c '^ok client' "$tmp/cli.$port") oks=$(grep -c '^ok server' "$tmp/srv.$port")
        smcr=$(grep -c '^ok client .*mode=SMCR' "$tmp/cli.$port")
        fb=$(grep '^ok client .*mode=TCP' "$tmp/cli.$port" | grep -o 'reason=0x[0-9a-f]*' | sort | uniq -c | tr '\n' ' ')
        if [ $crc -eq 0 ] && [ $src -eq 0 ] && [ "$okc" -eq 300 ] && [ "$oks" -eq 300 ] && [ "$smcr" -eq 300 ]; then
                ok "300 connections open at once: 300 transfers intact both ways, $smcr in SMC-R${fb:+ (TCP: $fb)}, $(since "$t")"
        else
                nok "300 connections: client exit $crc ($okc ok), server exit $src ($oks ok), $smcr in SMC-R${fb:+ (TCP: $fb)}"
                grep -v '^ok' "$tmp/cli.$port" | head -5
        fi
        lg=$(grep -c "link group .* (first contact)" "$tmp/a.log")
        [ "$lg" -ge 2 ] && ok "client side made $lg link groups (max 255 connections each)" ||
                nok "link groups on A: $lg (want >= 2)"
fi
if want plain; then
        # a plain TCP server (not through the library): the client must fall back with
        # PEERNOSMC and the server must see nothing but the application's bytes
        port=$((port + 1))
        python3 - "$RXE_B_IP" $port >"$tmp/plain.out" 2>&1 <<'PY' &
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1)
print("listening", flush=True)
c, _ = s.accept()
data = b""
while len(data) < 16 + 1000:
    b = c.recv(65536)
    if not b: break
    data += b
size = int.from_bytes(data[:8], "little")
print("first16", data[:16].hex(), "len", len(data), "size", size, flush=True)
c.close()
PY
        pp=$!
        for _ in $(seq 100); do grep -q listening "$tmp/plain.out" && break; sleep 0.1; done
        A "$xfer" client "$RXE_B_IP" $port 1000 >"$tmp/plaincli.out" 2>&1
        wait $pp
        if grep -q "size 1000" "$tmp/plain.out" && grep -q "len 1016" "$tmp/plain.out" &&
           grep -q "mode=TCP reason=0x03010000" "$tmp/plaincli.out"; then
                ok "plain TCP peer: client fell back (PEERNOSMC), server got exactly the 1016 application bytes"
        else
                nok "plain TCP peer: $(cat "$tmp/plain.out") / $(cat "$tmp/plaincli.out")"
        fi
fi
if want kill; then
        # SIGKILL of a client mid-transfer: the server side ends (reset or EOF), smcd
        # frees the connection, the next transfer works
        port=$((port + 1))
        SMCD_RUNTIME_DIR=$tmp/b "$xfer" server "$RXE_B_IP" $port 1 >"$tmp/ksrv.out" 2>&1 &
        ks=$!
        for _ in $(seq 100); do grep -q listening "$tmp/ksrv.out" && break; sleep 0.1; done
        # a simple command (not through the A function): $! is the client itself
        SMCD_RUNTIME_DIR=$tmp/a "$xfer" hold "$RXE_B_IP" $port 100000000 >"$tmp/kcli.out" 2>&1 &
        kc=$!
        for _ in $(seq 200); do grep -q connected "$tmp/kcli.out" && break; sleep 0.1; done
        sleep 1
        kill -9 $kc
        if timeout 60 tail --pid=$ks -f /dev/null; then
                grep -q "mode=SMCR" "$tmp/kcli.out" && grep -q "FAIL server" "$tmp/ksrv.out" &&
                        ok "client SIGKILLed mid-transfer: server saw the end ($(grep -o 'error=.*' "$tmp/ksrv.out"))" ||
                        nok "kill: $(cat "$tmp/kcli.out" "$tmp/ksrv.out")"
        else
                nok "server hangs after its peer was SIGKILLed"
                kill $ks
        fi
        run_xfer "after the kill, a new transfer" 1048576 1 1
fi
if want held; then
        # bytes a cork or MSG_MORE held back when the sending process ends: TCP's kernel
        # sends them before its FIN (smcd does here: the send buffer's prod_held); an
        # RST (SO_LINGER {1, 0}) drops them. Client on A, server on B, both under smcrun
        if [ -z "$smcrun_sh" ]; then
                echo "ok - held bytes at a process's end # SKIP (no smcrun)"
        else
                cat >"$tmp/held.py" <<'PY'
import os, signal, socket, struct, sys
role, ip, port, how = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
if role == "server":
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((ip, port))
    ls.listen(1)
    print("listening", flush=True)
    s, _ = ls.accept()
    s.settimeout(10)
    got, end = b"", "?"
    try:
        while True:
            d = s.recv(100)
            if not d:
                end = "EOF"
                break
            got += d
    except OSError as e:
        end = "ECONNRESET" if isinstance(e, ConnectionResetError) else repr(e)
    print("mode %d got %r then %s" % (s.getsockopt(286, 0x5301), got, end), flush=True)
else:
    c = socket.create_connection((ip, port))
    print("mode %d" % c.getsockopt(286, 0x5301), flush=True)
    if how == "cork":
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
        c.send(b"HELLO")
    else:
        c.send(b"HELLO", socket.MSG_MORE)
    if how == "linger":
        c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        c.close()
    if how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    os._exit(0)
PY
                for how in more cork kill linger; do
                        port=$((port + 1))
                        B env SMCRUN_LIB="$smcrun_lib" timeout 60 sh "$smcrun_sh" python3 "$tmp/held.py" server \
                                "$RXE_B_IP" $port $how >"$tmp/hsrv.$how" 2>&1 &
                        hs=$!
                        for _ in $(seq 100); do grep -q listening "$tmp/hsrv.$how" && break; sleep 0.1; done
                        A env SMCRUN_LIB="$smcrun_lib" timeout 60 sh "$smcrun_sh" python3 "$tmp/held.py" client \
                                "$RXE_B_IP" $port $how >"$tmp/hcli.$how" 2>&1
                        wait $hs
                        [ $how = linger ] && w="got b'' then ECONNRESET" || w="got b'HELLO' then EOF"
                        if grep -q "^mode 3" "$tmp/hcli.$how" && grep -q "^mode 3 $w" "$tmp/hsrv.$how"; then
                                ok "held bytes at the sender's end ($how): server $w, in SMC-R"
                        else
                                nok "held bytes at the sender's end ($how): client '$(cat "$tmp/hcli.$how")', server '$(cat "$tmp/hsrv.$how")', want '$w'"
                        fi
                done
        fi
fi
if want sockperf; then
        if [ -z "$smcrun_sh" ] || ! command -v sockperf >/dev/null; then
                echo "ok - sockperf under smcrun # SKIP (no sockperf or smcrun)"
        else
                port=$((port + 1))
                before=$(stat_of a conns_client)
                SMCD_RUNTIME_DIR=$tmp/b SMCRUN_LIB="$smcrun_lib" sh "$smcrun_sh" sockperf sr --tcp -i "$RXE_B_IP" -p $port \
                        >"$tmp/sp-srv.out" 2>&1 &
                spp=$!
                pids+=($spp)
                for _ in $(seq 100); do grep -q "listen on" "$tmp/sp-srv.out" && break; sleep 0.1; done
                if A env SMCRUN_LIB="$smcrun_lib" timeout 120 sh "$smcrun_sh" sockperf pp --tcp -i "$RXE_B_IP" \
                        -p $port -t 5 --mps=100000 >"$tmp/sp-pp.out" 2>&1 &&
                   A env SMCRUN_LIB="$smcrun_lib" timeout 120 sh "$smcrun_sh" sockperf tp --tcp -i "$RXE_B_IP" \
                        -p $port -t 5 -m 65000 >"$tmp/sp-tp.out" 2>&1; then
                        kill -USR1 "$pid_a" 2>/dev/null; sleep 1
                        after=$(stat_of a conns_client)
                        lat=$(sed -n 's/.*Summary: Latency is *\([0-9.]*\).*/\1/p' "$tmp/sp-pp.out" | head -1)
                        bw=$(sed -n 's/.*Summary: BandWidth is *\([0-9.]*\).*/\1/p' "$tmp/sp-tp.out" | head -1)
                        if [ -n "$lat" ] && [ -n "$bw" ] && [ "$after" -ge $((before + 2)) ]; then
                                ok "sockperf under smcrun over SMC-R: pp latency $lat usec, tp $bw MBps (smcr.conns_client $before -> $after)"
                        else
                                nok "sockperf under smcrun: latency '$lat' bw '$bw', smcr.conns_client $before -> $after"
                                tail -5 "$tmp/sp-pp.out" "$tmp/sp-tp.out"
                        fi
                else
                        nok "sockperf under smcrun failed"
                        tail -5 "$tmp/sp-pp.out" "$tmp/sp-tp.out" "$tmp/sp-srv.out"
                fi
                kill $spp 2>/dev/null
        fi
fi
if want pnet; then
        # a pnet entry that maps A's netdev to the other host's device: A has no usable
        # device for the connection, declines (NOSMCRDEV), both ends go on over TCP
        stop_smcd a
        printf '{"entries": [{"netdev": "%s", "ibdev": "%s", "port": 1, "pnetid": null}]}\n' \
                "$RXE_A_NETDEV" "$RXE_B_DEV" >"$tmp/a/pnet.json"
        start_smcd a "$RXE_A_DEV" || nok "restart A with a pnet table"
        port=$((port + 1))
        SMCD_RUNTIME_DIR=$tmp/b "$xfer" server "$RXE_B_IP" $port 1 >"$tmp/pn-srv.out" 2>&1 &
        pp=$!
        for _ in $(seq 100); do grep -q listening "$tmp/pn-srv.out" && break; sleep 0.1; done
        A timeout 120 "$xfer" client "$RXE_B_IP" $port 100000 >"$tmp/pn-cli.out" 2>&1
        timeout 60 tail --pid=$pp -f /dev/null
        if grep -q "^ok client size=100000 mode=TCP reason=0x03030002" "$tmp/pn-cli.out" &&
           grep -q "^ok server size=100000 mode=TCP" "$tmp/pn-srv.out"; then
                ok "pnet $RXE_A_NETDEV -> $RXE_B_DEV on A: SMC_CLC_DECL_NOSMCRDEV, the data went over TCP intact"
        else
                nok "pnet: $(cat "$tmp/pn-cli.out" "$tmp/pn-srv.out")"
        fi
        stop_smcd a
        rm -f "$tmp/a/pnet.json"
        start_smcd a "$RXE_A_DEV" || nok "restart A without a pnet table"
fi
if want inline; then
        # inline=on: the CDC inline counter moves; inline=off: it does not
        stop_smcd a
        stop_smcd b
        for mode in on off; do
                start_smcd a "$RXE_A_DEV" --inline $mode && start_smcd b "$RXE_B_DEV" --inline $mode ||
                        { nok "restart with inline=$mode"; continue; }
                run_xfer "inline=$mode transfer" 1,65536,1048576 1 3
                stop_smcd a
                stop_smcd b
                n=$(python3 -c 'import re,sys; print(sum(int(x) for x in re.findall(r"inline_sends=(\d+)", open(sys.argv[1]).read())))' "$tmp/a.log")
                s=$(python3 -c 'import re,sys; print(sum(int(x) for x in re.findall(r"cdc_sends=(\d+)", open(sys.argv[1]).read())))' "$tmp/a.log")
                if [ "$mode" = on ] && [ "$n" -gt 0 ] && [ "$n" -eq "$s" ]; then
                        ok "inline=on: $n of $s CDC sends inline"
                elif [ "$mode" = off ] && [ "$n" -eq 0 ] && [ "$s" -gt 0 ]; then
                        ok "inline=off: 0 of $s CDC sends inline"
                else
                        nok "inline=$mode: $n of $s CDC sends inline"
                fi
        done
        start_smcd a "$RXE_A_DEV"
        start_smcd b "$RXE_B_DEV"
fi
if want cqpoll; then
        # cq_poll=thread: the completions come through each device's polling thread
        stop_smcd a
        stop_smcd b
        if start_smcd a "$RXE_A_DEV" --cq-poll thread && start_smcd b "$RXE_B_DEV" --cq-poll thread; then
                run_xfer "cq_poll=thread transfer" 1,65536,1048576,16777216 2 4
                threads=$(cat /proc/"$pid_a"/task/*/comm /proc/"$pid_b"/task/*/comm 2>/dev/null | grep -c '^cq-rxe')
                [ "$threads" = 2 ] && ok "cq_poll=thread: a polling thread per device in each smcd" ||
                        nok "cq_poll=thread: $threads polling threads (want 2)"
        else
                nok "restart with cq_poll=thread"
        fi
        stop_smcd a
        stop_smcd b
        start_smcd a "$RXE_A_DEV"
        start_smcd b "$RXE_B_DEV"
fi
if want linkdown; then
        port=$((port + 1))
        SMCD_RUNTIME_DIR=$tmp/b "$xfer" server "$RXE_B_IP" $port 1 >"$tmp/lsrv.out" 2>&1 &
        ls=$!
        for _ in $(seq 100); do grep -q listening "$tmp/lsrv.out" && break; sleep 0.1; done
        SMCD_RUNTIME_DIR=$tmp/a "$xfer" hold "$RXE_B_IP" $port 100000000 >"$tmp/lcli.out" 2>&1 &
        lc=$!
        for _ in $(seq 200); do grep -q connected "$tmp/lcli.out" && break; sleep 0.1; done
        sleep 1
        ip link set "$RXE_A_NETDEV" down
        if timeout 120 tail --pid=$lc -f /dev/null && timeout 60 tail --pid=$ls -f /dev/null; then
                ok "netdev down mid-transfer: both ends ended ($(grep -o 'error=.*' "$tmp/lcli.out" | head -1) / $(grep -o 'error=.*' "$tmp/lsrv.out" | head -1))"
        else
                nok "netdev down: an end hangs"
                kill $lc $ls 2>/dev/null
        fi
        ip link set "$RXE_A_NETDEV" up
        restore_path 7701 "$RXE_A_NETDEV" "$RXE_A_IP" "$RXE_B_IP" "$RXE_B_NETDEV"
        wait_port "$RXE_A_DEV" || nok "$RXE_A_DEV not ACTIVE again"
fi
if want failover; then
        # both hosts with two devices: the server (B) adds a second link on rxe3 <-> rxe2
        stop_smcd a
        stop_smcd b
        start_smcd a "$RXE_A_DEV" --roce-dev "$RXE_A2_DEV" && start_smcd b "$RXE_B_DEV" --roce-dev "$RXE_B2_DEV" ||
                nok "smcd with two devices"
        # N links added on both sides (smcr.links_added), within 30 s
        links_added() {
                for _ in $(seq 150); do
                        kill -USR1 "$pid_a" "$pid_b" 2>/dev/null
                        sleep 0.2
                        [ "$(stat_of a links_added)" = "$1" ] && [ "$(stat_of b links_added)" = "$1" ] && return 0
                done
                return 1
        }
        run_xfer "first contact with two devices" 1000,1000 1 2
        links_added 1 && ok "ADD LINK: the second link is up on both sides" ||
                { nok "ADD LINK: links_added A $(stat_of a links_added) B $(stat_of b links_added)"; grep -i "link" "$tmp/a.log" "$tmp/b.log" | tail -20; }
        # 4 connections at once over the two links; the second path goes down mid-transfer
        port=$((port + 1))
        t=$(now)
        SMCD_RUNTIME_DIR=$tmp/b "$xfer" server "$RXE_B_IP" $port 4 >"$tmp/fsrv.out" 2>&1 &
        fs=$!
        for _ in $(seq 100); do grep -q listening "$tmp/fsrv.out" && break; sleep 0.1; done
        SMCD_RUNTIME_DIR=$tmp/a SMCR_XFER_MODE=SMCR SMCR_XFER_TOGETHER=1 timeout 600 "$xfer" client "$RXE_B_IP" $port                 16777216,16777216,16777216,16777216 4 >"$tmp/fcli.out" 2>&1 &
        fc=$!
        # the path goes down once all 4 are connected (a fixed delay let a fast run finish
        # first: then no connection had anything to move)
        for _ in $(seq 300); do
                kill -USR1 "$pid_a" 2>/dev/null
                sleep 0.1
                [ "$(stat_of a conns_current)" -ge 4 ] && break
        done
        sleep 0.5
        kill -0 $fc 2>/dev/null && fo_alive=1 || fo_alive=0
        ip link set "$RXE_A2_NETDEV" down
        if wait $fc && timeout 120 tail --pid=$fs -f /dev/null && wait $fs; then
                kill -USR1 "$pid_a" "$pid_b" 2>/dev/null
                sleep 1
                fa=$(stat_of a failovers) fb=$(stat_of b failovers)
                if [ "$fo_alive" = 0 ]; then
                        nok "failover: the transfers ended before $RXE_A2_NETDEV went down"
                elif [ "$fa" -ge 1 ] && [ "$fb" -ge 1 ]; then
                        ok "failover: $(grep -c '^ok client' "$tmp/fcli.out") + $(grep -c '^ok server' "$tmp/fsrv.out") checked 16 MiB transfers intact while $RXE_A2_NETDEV went down (connections moved: A $fa, B $fb), $(since "$t")"
                else
                        nok "failover: transfers ok but no connection moved (A $fa, B $fb): did they all use link 1?"
                fi
        else
                nok "failover: a transfer failed when $RXE_A2_NETDEV went down"
                grep -v '^ok' "$tmp/fcli.out" | head -5
                grep -v '^ok' "$tmp/fsrv.out" | head -5
                kill $fs 2>/dev/null
                grep -iE "link|warn|fail" "$tmp/a.log" | tail -15
                grep -iE "link|warn|fail" "$tmp/b.log" | tail -15
        fi
        ip link set "$RXE_A2_NETDEV" up
        restore_path 7801 "$RXE_A2_NETDEV" "$RXE_A2_IP" "$RXE_B2_IP" "$RXE_B2_NETDEV"
        links_added 2 && ok "the link is added again once $RXE_A2_NETDEV is up" ||
                nok "no second link after $RXE_A2_NETDEV came up: links_added A $(stat_of a links_added) B $(stat_of b links_added)"
        run_xfer "transfers over the re-added link" 1000000,1000000,1000000,1000000 4 4
fi

if want handoff; then
        # SO_REUSEPORT hand-over over SMC-R (tests/apps/reuseport-handoff.py): B's
        # server accepts from listener A until EAGAIN (smcd B then runs the handshakes
        # of what it took), closes A and serves from B; 32 clients on host A at once.
        # The kernel moves A's queued TCP connections (tcp_migrate_req=1), smcd B the
        # SMC-R ones (before 2026-12-07 those were reset)
        if [ -z "$smcrun_sh" ]; then
                echo "ok - handoff # SKIP (no smcrun)"
        elif ! sysctl -qw net.ipv4.tcp_migrate_req=1 2>/dev/null; then
                echo "ok - handoff # SKIP (no net.ipv4.tcp_migrate_req)"
        else
                handoff=$HANDOFF_APP
                # (0: the close comes while smcd B runs the handshakes; 500 ms: after
                # they ended, their NEW_CONNs on A's accept channel)
                for after in 0 500; do
                        t=$(now)
                        kill -USR1 "$pid_b" 2>/dev/null; sleep 0.5
                        hb=$(stat_of b handshakes_ok)
                        mb=$(grep -c 'moved to listener' "$tmp/b.log") wb=$(grep -c 'went during a handshake' "$tmp/b.log")
                        rm -f "$tmp/handoff.port"
                        B env SMCRUN_LIB="$smcrun_lib" timeout 150 sh "$smcrun_sh" python3 "$handoff" serve --bind "$RXE_B_IP" \
                                --port-file "$tmp/handoff.port" --close-after $after >"$tmp/handoff-srv.out" 2>&1 &
                        sp=$!
                        for _ in $(seq 100); do [ -s "$tmp/handoff.port" ] && break; sleep 0.1; done
                        out=$(A env SMCRUN_LIB="$smcrun_lib" timeout 150 sh "$smcrun_sh" python3 "$handoff" connect \
                                --addr "$RXE_B_IP" --port "$(cat "$tmp/handoff.port" 2>/dev/null)" --conns 32 2>&1)
                        crc=$?
                        wait "$sp"
                        kill -USR1 "$pid_b" 2>/dev/null; sleep 0.5
                        ha=$(stat_of b handshakes_ok)
                        moved="moved from the channel $(($(grep -c 'moved to listener' "$tmp/b.log") - mb)), during the handshake $(($(grep -c 'went during a handshake' "$tmp/b.log") - wb))"
                        if [ $crc = 0 ] && [ $((ha - hb)) -ge 1 ]; then
                                ok "handoff (close after $after ms): 32 clients all answered across the close of an SO_REUSEPORT listener ($out; server $(cat "$tmp/handoff-srv.out"); SMC-R handshakes on B +$((ha - hb)); $moved), $(since "$t")"
                        else
                                nok "handoff (close after $after ms): client exit $crc: $out (server $(cat "$tmp/handoff-srv.out"); SMC-R handshakes on B +$((ha - hb)); $moved)"
                        fi
                done
        fi
fi

if want async; then
        # nonblocking connects over SMC-R as event loops make them (tests/netns-smcd.py
        # asyncconn): EINPROGRESS before the gated server accepts (not writable, no call
        # waits meanwhile), SYN_SENT answered as TCP, epoll ET / LT / ONESHOT, connect again, a blocking send at once, 20 at once, 10
        # closed at once, refused then the same socket again (before 2026-12-07 connect() waited for both handshakes and
        # for the server's accept)
        if [ -z "$smcrun_sh" ]; then
                echo "ok - async # SKIP (no smcrun)"
        else
                t=$(now)
                rm -f "$tmp/as.port" "$tmp/asg.port" "$tmp/as.go"
                B env SMCRUN_LIB="$smcrun_lib" timeout 200 sh "$smcrun_sh" python3 "$NETNS_APP" server --bind "$RXE_B_IP" \
                        --port-file "$tmp/as.port" >"$tmp/as-srv.out" 2>&1 &
                pids+=($!)
                B env SMCRUN_LIB="$smcrun_lib" timeout 200 sh "$smcrun_sh" python3 "$NETNS_APP" server --bind "$RXE_B_IP" \
                        --port-file "$tmp/asg.port" --accept-after "$tmp/as.go" >"$tmp/asg-srv.out" 2>&1 &
                pids+=($!)
                for _ in $(seq 100); do [ -s "$tmp/as.port" ] && [ -s "$tmp/asg.port" ] && break; sleep 0.1; done
                kill -USR1 "$pid_b" 2>/dev/null; sleep 0.5
                hb=$(stat_of b handshakes_ok)
                # (a dead address on A's link: its SYNs go to a MAC nobody has)
                dead=${RXE_B_IP%.*}.99
                ip route replace "$dead/32" dev "$RXE_A_NETDEV" src "$RXE_A_IP"
                ip neigh replace "$dead" lladdr 02:00:00:00:00:99 dev "$RXE_A_NETDEV" nud permanent
                out=$(A env SMCRUN_LIB="$smcrun_lib" timeout 150 sh "$smcrun_sh" python3 "$NETNS_APP" asyncconn --label async \
                        --addr "$RXE_B_IP" --port "$(cat "$tmp/as.port" 2>/dev/null)" \
                        --gated-port "$(cat "$tmp/asg.port" 2>/dev/null)" --go "$tmp/as.go" --want-mode 3 \
                        --refused-port 9 --dead-addr "$dead" 2>&1)
                crc=$?
                ip neigh del "$dead" dev "$RXE_A_NETDEV" 2>/dev/null
                ip route del "$dead/32" 2>/dev/null
                kill -USR1 "$pid_b" 2>/dev/null; sleep 0.5
                ha=$(stat_of b handshakes_ok)
                echo "$out" | sed 's/^/# /'
                if [ $crc = 0 ] && ! echo "$out" | grep -q "^not ok" && [ $((ha - hb)) -ge 32 ]; then
                        ok "async: nonblocking connects over SMC-R as event loops make them, $(echo "$out" | grep -c '^ok') checks (SMC-R handshakes on B +$((ha - hb))), $(since "$t")"
                else
                        nok "async: client exit $crc, $(echo "$out" | grep -c '^not ok') checks failed (SMC-R handshakes on B +$((ha - hb)); servers: $(cat "$tmp/as-srv.out" "$tmp/asg-srv.out" | tail -3))"
                fi
        fi
fi

if want stop; then
        # smcd A (the client's host) gets SIGTERM while its client's handshake waits for
        # the server's accept: A runs on until that handshake has ended, answering the
        # server's ACCEPT with a DECLINE instead of its CONFIRM (an SMC-R connection
        # would end with A in a moment), then exits; the connection goes on as TCP at
        # both ends, every byte right (before 2026-12-07: A exited at once, ECONNRESET)
        port=$((port + 1))
        t=$(now)
        SMCD_RUNTIME_DIR=$tmp/b SMCR_XFER_ACCEPT_AFTER=$tmp/go.$port "$xfer" server "$RXE_B_IP" $port 1 \
                >"$tmp/srv.$port" 2>&1 &
        sp=$!
        for _ in $(seq 100); do grep -q listening "$tmp/srv.$port" && break; sleep 0.1; done
        A timeout 120 "$xfer" client "$RXE_B_IP" $port 1000000 1 >"$tmp/cli.$port" 2>&1 &
        cp=$!
        for _ in $(seq 200); do
                [ "$(ss -Htn state established dst "$RXE_B_IP:$port" | wc -l)" -ge 1 ] && break
                sleep 0.05
        done
        sleep 0.3 # (its SMCR reaches smcd A, the proposal goes out)
        kill -TERM "$pid_a"
        sleep 0.5
        kill -0 "$pid_a" 2>/dev/null && ok "stop: smcd A runs on after SIGTERM with a handshake in flight" ||
                nok "stop: smcd A runs on after SIGTERM with a handshake in flight: $(tail -n 3 "$tmp/a.log")"
        touch "$tmp/go.$port"
        wait "$cp"
        crc=$?
        timeout 60 tail --pid=$sp -f /dev/null
        wait "$sp"
        src=$?
        if [ $crc = 0 ] && [ $src = 0 ] && grep -q '^ok client .*mode=TCP' "$tmp/cli.$port" &&
           grep -q '^ok server .*mode=TCP' "$tmp/srv.$port"; then
                ok "stop: the connection in its handshake went on as TCP at both ends, 1 MB both ways checked ($(grep -o 'reason=0x[0-9a-f]*' "$tmp/cli.$port")), $(since "$t")"
        else
                nok "stop: client exit $crc, server exit $src: $(cat "$tmp/cli.$port" "$tmp/srv.$port" | head -4)"
        fi
        for _ in $(seq 100); do kill -0 "$pid_a" 2>/dev/null || break; sleep 0.05; done
        if ! kill -0 "$pid_a" 2>/dev/null && grep -q "handshakes in flight have ended: exiting" "$tmp/a.log"; then
                ok "stop: smcd A exited once the handshake had ended"
        else
                nok "stop: smcd A exited once the handshake had ended: $(tail -n 5 "$tmp/a.log")"
        fi
fi

stop_smcd a
stop_smcd b
echo "# total $(since "$t0")"
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
