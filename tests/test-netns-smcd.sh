#!/bin/bash
# SMC-D across network namespaces (smcd --cross-netns yes): two namespaces A and B
# joined by a veth pair (10.211.N.1/24 in A, 10.211.N.2/24 in B), one private smcd in
# the root namespace, servers and clients run in the namespaces with
# `ip netns exec NS sh SMCRUN python3 tests/netns-smcd.py ...` (they reach smcd through
# its runtime directory's unix socket, which no network namespace hides).
#   0. smcd accepts --cross-netns yes, and cross-netns=yes in its configuration file;
#   1. smcrun server in B, smcrun client in A: both ends SMC-D; echo of 1 B, 4 KiB+1,
#      1 MiB and 16 MiB both ways (sha256); getsockname/getpeername of both ends as TCP
#      gives them; smcd's conns_netns grew by 1;
#   2. 40 concurrent connections from A (nonblocking connects), 256 KiB echoed on each:
#      all correct, all SMC-D at both ends; conns_netns grew by 40;
#   3. plain server in B, smcrun client in A: the data right, the client TCP with
#      SMC_CLC_DECL_PEERNOSMC; conns_netns unchanged;
#   4. smcrun server in B, plain client in A: TCP, the data right;
#   5. a port nobody listens on in B: ECONNREFUSED from A with smcrun as without; and
#      127.0.0.1:P from A, where only B listens (on 0.0.0.0:P): ECONNREFUSED (the
#      namespaces' own addresses are never joined: tests/apps/netns-isolation.py);
#   6. smcd without --cross-netns: the pair of 1 gets TCP, SMC_CLC_DECL_PEERNOSMC, the
#      data right;
#   7. a pair inside B (to 127.0.0.1, and to B's own address): SMC-D, conns_netns
#      unchanged;
#   8. a client in A SIGKILLed in the middle of a 64 MiB transfer: the server in B reads
#      EOF or ECONNRESET (no hang) and smcd's conns_current is back to its earlier
#      value within 5 s;
#   9. the server's process exits while a connection is idle: the client reads EOF;
#  10. a server whose forked worker switched to uid 65534 after the master listened
#      (nginx's default): SMC-D, conns_netns grew;
#  11. an SO_REUSEPORT group in B, a plain member first, then one under smcrun: 20
#      smcrun clients from A all get TCP (PEERNOSMC) with their data right;
#  12. an SO_REUSEPORT group in B, both members under smcrun: 20 smcrun clients from A
#      all get SMC-D at both ends, conns_netns grew by 20;
#  13. a server whose worker (another uid) cannot reach smcd (runtime directory
#      0700): its library declines the clients' CLC proposals, 8 clients get TCP with
#      their data right;
#  14. smcd gets SIGTERM while a client's handshake waits for the server's accept: it
#      runs on until the handshake has ended, a client connecting meanwhile gets TCP
#      (NOSMCDEV), both clients' data right, then it exits;
#  15. smcd SIGKILLed while a client's handshake waits for the server's accept, a new
#      smcd started before the server accepts: the server's application reads no CLC
#      byte (the library declines the proposal the old smcd's echo brought);
#  16. a server in B hands its port over between two SO_REUSEPORT listeners (nginx's
#      binary upgrade, haproxy's reload): it accepts from A until EAGAIN, closes A,
#      then serves from B, while 32 clients from A connect at once (closing A at once,
#      and 300 ms after the last accept): every client is
#      answered (B's namespace has net.ipv4.tcp_migrate_req=1 for the TCP connections
#      in A's kernel queue; smcd moves A's SMC-D connections whose handshake was still
#      running, and those queued on its accept channel, to B);
#  17. in B, two listeners on 0.0.0.0 and one port under smcrun, one bound to the veth
#      (SO_BINDTODEVICE, of uid 65534), one to lo: 8 connections to 127.0.0.1 from B
#      all reach the one bound to lo, as over TCP (before: 4 went to the veth's,
#      another uid's: helper 123).
#  18. nonblocking connects from A as event loops make them (netns-smcd.py asyncconn):
#      to a server in B that accepts only later, connect() says EINPROGRESS at once
#      (it used to wait for the accept) and the socket is not writable until then,
#      with no call waiting (poll() and select() sleeping on it are woken by the
#      connection; blocking recv/send end after SO_RCVTIMEO / SO_SNDTIMEO or at a
#      signal, as TCP's); a connect whose SYNs go nowhere answers as TCP in
#      SYN_SENT (EAGAIN, EALREADY, SO_ERROR 0, ENOTCONN) and closes at once; then epoll
#      ET/LT/ONESHOT, connect() again, a blocking send right after EINPROGRESS, 20 at
#      once from one thread, 10 closed at once, a refused connect then the same socket
#      again: all SMC-D with their echo right; conns_netns grew by 32.
# Before the feature, 0 and the SMC-D and conns_netns checks of 1 and 2 failed (10:
# the worker's handshake request was refused, and it read the CLC proposal as data;
# 11: the plain member echoed the option for the other one: clients reset).
# Args: SMCD LIBSMCRUN SMCRUN NETNS-SMCD.PY [CLC-LATE (tests/clc-late.c)]. Root; skips (77) when namespaces or veth
# cannot be made, or when smcd logs that the SMC TCP option program cannot be loaded.
set -u
smcd=$1 lib=$2 smcrun=$3 py=$4 clclate=${5:-}

skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root (network namespaces, veth, BPF)"
command -v ip >/dev/null || skip "no ip(8)"

N=$(($$ % 250 + 1))
NET=10.211.$N
IPA=$NET.1 IPB=$NET.2
NSA=smcd-nsA-$$ NSB=smcd-nsB-$$
VA=smcA$$ VB=smcB$$   # (interface names: at most 15 characters)
tmp=$(mktemp -d /tmp/smcd-test-netns.XXXXXX) || exit 1
chmod 755 "$tmp"
spid='' pids=() made_ns=()

# shellcheck disable=SC2317  # (called by the EXIT trap)
cleanup() {
        local p ns
        for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
        for ns in "${made_ns[@]}"; do
                # (processes in our own namespaces are ours: SIGKILL what is left)
                for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
        done
        for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
        if [ -n "$spid" ]; then
                kill -TERM "$spid" 2>/dev/null
                for _ in $(seq 50); do kill -0 "$spid" 2>/dev/null || break; sleep 0.1; done
                kill -KILL "$spid" 2>/dev/null
                wait "$spid" 2>/dev/null
        fi
        for ns in "${made_ns[@]}"; do ip netns del "$ns" 2>/dev/null; done
        ip link del "$VA" 2>/dev/null
        [ -n "${KEEP_TMP:-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

failed=0
ok() { echo "ok - $*"; }
nok() { echo "not ok - $*"; failed=1; }
is_num() { [[ $1 =~ ^[0-9]+$ ]]; }

# --- topology
ip netns add "$NSA" 2>/dev/null || skip "cannot create a network namespace"
made_ns+=("$NSA")
ip netns add "$NSB" 2>/dev/null || skip "cannot create a second network namespace"
made_ns+=("$NSB")
ip link add "$VA" type veth peer name "$VB" 2>/dev/null || skip "cannot create a veth pair"
if ! { ip link set "$VA" netns "$NSA" && ip link set "$VB" netns "$NSB" &&
        ip -n "$NSA" addr add "$IPA/24" dev "$VA" && ip -n "$NSB" addr add "$IPB/24" dev "$VB" &&
        ip -n "$NSA" link set lo up && ip -n "$NSB" link set lo up &&
        ip -n "$NSA" link set "$VA" up && ip -n "$NSB" link set "$VB" up; }; then
        skip "cannot set the veth pair up between the namespaces"
fi
for _ in $(seq 50); do   # (IPv4 on veth: no DAD, but the carrier takes a moment)
        ip netns exec "$NSA" ping -c1 -W1 "$IPB" >/dev/null 2>&1 && break
        sleep 0.1
done

# --- smcd (private runtime directory and state file; no system bus)
export SMCRUN_LIB=$lib
san=$(ldd "$lib" | awk '$1 ~ /^lib(a|ub|t|hwa)san\.so/ { print $3 }' | paste -sd:)
if [ -n "$san" ]; then   # a sanitizer build: its runtime ahead of everything
        export LD_PRELOAD="$san${LD_PRELOAD:+:$LD_PRELOAD}"
        export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
fi
start_smcd() { # NAME [ARGS...]: smcd in $tmp/NAME (runtime directory); 0 when its socket is there
        local name=$1
        shift
        rundir=$tmp/$name
        mkdir -p "$rundir/state"
        "$smcd" -v --no-bus --short-conn-rate=0 --runtime-dir "$rundir" --state-file "$rundir/state/tunables.json" \
                "$@" >"$rundir/smcd.log" 2>&1 &
        spid=$!
        export SMCD_RUNTIME_DIR=$rundir
        for _ in $(seq 100); do
                [ -S "$rundir/smcd.sock" ] && return 0
                kill -0 "$spid" 2>/dev/null || break
                sleep 0.05
        done
        wait "$spid" 2>/dev/null
        spid=''
        return 1
}
stop_smcd() {
        [ -n "$spid" ] || return 0
        kill -TERM "$spid" 2>/dev/null
        for _ in $(seq 50); do kill -0 "$spid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$spid" 2>/dev/null
        wait "$spid" 2>/dev/null
        spid=''
}
smcd_stat() { # NAME: smcd's .smcd.NAME now ("absent" if stats.json has no such counter)
        rm -f "$rundir/stats.json"
        kill -USR1 "$spid" 2>/dev/null || { echo "no-smcd"; return; }
        for _ in $(seq 50); do [ -s "$rundir/stats.json" ] && break; sleep 0.05; done
        sleep 0.05
        timeout 10 python3 -c 'import json, sys
v = json.load(open(sys.argv[1]))["smcd"].get(sys.argv[2])
print("absent" if v is None else v)' "$rundir/stats.json" "$1" 2>/dev/null || echo "unreadable"
}
tcpopt_unavailable() {
        grep -Ei "cannot load the SMC TCP option program|SMC TCP option program cannot be loaded|without the SMC TCP option program" \
                "$rundir/smcd.log"
}

# 0. the option and its configuration file key
printf 'cross-netns=yes\n' >"$tmp/smcd.conf"
if start_smcd conf --config "$tmp/smcd.conf"; then
        ok "0: smcd accepts cross-netns=yes in its configuration file"
        stop_smcd
else
        nok "0: smcd accepts cross-netns=yes in its configuration file: $(head -c 300 "$tmp/conf/smcd.log")"
fi
if start_smcd smcd1 --cross-netns yes; then
        ok "0: smcd --cross-netns yes runs"
else
        nok "0: smcd --cross-netns yes runs: $(head -c 300 "$tmp/smcd1/smcd.log")"
        # (so that every other check still runs: the TCP ones must pass without the feature)
        start_smcd smcd1b || { echo "smcd does not start: $(cat "$rundir/smcd.log")"; exit 1; }
fi
if why=$(tcpopt_unavailable); then
        skip "smcd cannot load the SMC TCP option program: $why"
fi

# --- programs in the namespaces (every one under timeout)
in_ns() { # NS SMC(smc|plain) SECONDS ARGS...: tests/netns-smcd.py ARGS in NS
        local ns=$1 how=$2 secs=$3
        shift 3
        if [ "$how" = smc ]; then
                timeout -k 5 "$secs" ip netns exec "$ns" sh "$smcrun" python3 "$py" "$@"
        else
                timeout -k 5 "$secs" ip netns exec "$ns" env SMCRUN_DISABLE=1 python3 "$py" "$@"
        fi
}
server_port=
start_server() { # NAME NS SMC [ARGS...]: a server in the background; its port in $server_port
        local name=$1 ns=$2 how=$3
        shift 3
        rm -f "$tmp/$name.port"
        in_ns "$ns" "$how" 150 server --port-file "$tmp/$name.port" "$@" >"$tmp/$name.log" 2>&1 &
        server_pid=$!
        pids+=("$server_pid")
        for _ in $(seq 100); do
                [ -s "$tmp/$name.port" ] && break
                kill -0 "$server_pid" 2>/dev/null || break
                sleep 0.05
        done
        server_port=$(cat "$tmp/$name.port" 2>/dev/null)
        [ -n "$server_port" ] || { nok "server $name did not start: $(cat "$tmp/$name.log")"; return 1; }
}
client() { # NS SMC SECONDS ARGS...: a client whose "ok / not ok" lines go to the output
        local out rc
        out=$(in_ns "$@" 2>&1)
        rc=$?
        echo "$out"
        if [ $rc != 0 ]; then
                failed=1
                echo "$out" | grep -q "^not ok" || nok "client $* exited with status $rc"
        fi
}
delta_check() { # LABEL NAME BEFORE WANT(+N: grew by N at least; 0: unchanged)
        local label=$1 name=$2 before=$3 want=$4 after
        after=$(smcd_stat "$name")
        if [ "$want" = 0 ]; then
                if [ "$after" = "$before" ]; then
                        ok "$label: smcd's $name unchanged ($before -> $after)"
                else
                        nok "$label: smcd's $name unchanged ($before -> $after)"
                fi
        elif is_num "$before" && is_num "$after" && [ $((after - before)) -ge "${want#+}" ]; then
                ok "$label: smcd's $name grew by ${want#+} ($before -> $after)"
        else
                nok "$label: smcd's $name grew by ${want#+} ($before -> $after)"
        fi
}

start_server s1 "$NSB" smc --bind 0.0.0.0 || exit 1
P1=$server_port
start_server s3 "$NSB" plain --bind "$IPB" || exit 1
P3=$server_port

# 1.
b=$(smcd_stat conns_netns)
client "$NSA" smc 60 client --label 1 --addr "$IPB" --port "$P1" --local-ip "$IPA" \
        --expect smcd --server-expect smcd --sizes 1,4097,1048576,16777216
delta_check 1 conns_netns "$b" +1

# 2.
b=$(smcd_stat conns_netns)
client "$NSA" smc 90 client --label 2 --addr "$IPB" --port "$P1" --local-ip "$IPA" \
        --expect smcd --server-expect smcd --sizes 262144 --conns 40
delta_check 2 conns_netns "$b" +40

# 3.
b=$(smcd_stat conns_netns)
client "$NSA" smc 60 client --label 3 --addr "$IPB" --port "$P3" --local-ip "$IPA" \
        --expect tcp --reason SMC_CLC_DECL_PEERNOSMC --server-expect plain --sizes 1,4097,1048576
delta_check 3 conns_netns "$b" 0

# 4.
client "$NSA" plain 60 client --label 4 --addr "$IPB" --port "$P1" --local-ip "$IPA" \
        --expect plain --server-expect tcp --sizes 1,4097,1048576

# 5.
P5=$((P1 == 65535 ? P1 - 1 : P1 + 1))
[ "$P5" = "$P3" ] && P5=$((P5 + 1))
client "$NSA" smc 30 refused --label "5 (smcrun)" --addr "$IPB" --port "$P5"
client "$NSA" plain 30 refused --label "5 (plain)" --addr "$IPB" --port "$P5"
client "$NSA" smc 30 refused --label "5 (smcrun, B listens on 0.0.0.0:$P1)" --addr 127.0.0.1 --port "$P1"

# 7.
b=$(smcd_stat conns_netns)
client "$NSB" smc 60 client --label 7 --addr 127.0.0.1 --port "$P1" --local-ip 127.0.0.1 \
        --expect smcd --server-expect smcd --sizes 1,4097,1048576
delta_check 7 conns_netns "$b" 0
# ... and to B's own veth address (a wildcard listener of a namespace other than
# smcd's, found at the namespace's IPv4 address: before 2026-12-06 TCP)
b=$(smcd_stat conns_netns)
client "$NSB" smc 60 client --label "7 (to $IPB)" --addr "$IPB" --port "$P1" --local-ip "$IPB" \
        --expect smcd --server-expect smcd --sizes 1,4097,1048576
delta_check "7 (to $IPB)" conns_netns "$b" 0

# 11. an SO_REUSEPORT group in B whose first member is plain and second one runs under
# smcrun: the second is not marked for the SMC TCP option (the program cannot tell the
# members apart), so every smcrun client from A gets TCP with its data right, whichever
# member the kernel picks (before: the plain member echoed the option for the other
# one, its clients were reset and it read their CLC proposals; helper 117)
if start_server s11p "$NSB" plain --reuseport; then
        P11=$server_port
        if start_server s11s "$NSB" smc --reuseport --port "$P11"; then
                client "$NSA" smc 90 client --label 11 --addr "$IPB" --port "$P11" --local-ip "$IPA" \
                        --expect tcp --reason SMC_CLC_DECL_PEERNOSMC --sizes 1,4097,65536 --conns 20
        fi
fi

# 12. an SO_REUSEPORT group in B whose members all run under smcrun (nginx
# `reuseport`, haproxy): each is marked when it registers (every listener the kernel
# shows on the group's address and port is marked), so 20 smcrun clients from A get
# SMC-D at both ends, whichever member accepts (from 12c52b3 until the group check:
# TCP, PEERNOSMC)
if start_server s12a "$NSB" smc --reuseport; then
        P12=$server_port
        if start_server s12b "$NSB" smc --reuseport --port "$P12"; then
                b=$(smcd_stat conns_netns)
                client "$NSA" smc 90 client --label "12 (SO_REUSEPORT, all members under smcrun)" --addr "$IPB" \
                        --port "$P12" --local-ip "$IPA" --expect smcd --server-expect smcd --sizes 1,4097,65536 --conns 20
                delta_check "12 (SO_REUSEPORT)" conns_netns "$b" +20
        fi
fi

# 10. a server whose forked worker switched uid after the master listened (nginx's
# default): SMC-D between the namespaces too (before: the worker's handshake request
# was refused and it read the client's CLC proposal as data; helper 116)
if start_server s10 "$NSB" smc --worker-uid 65534; then
        P10=$server_port
        b=$(smcd_stat conns_netns)
        client "$NSA" smc 60 client --label "10 (worker uid 65534)" --addr "$IPB" --port "$P10" --local-ip "$IPA" \
                --expect smcd --server-expect smcd --sizes 1,4097,1048576
        delta_check "10 (worker uid 65534)" conns_netns "$b" +1
fi

# 13. the accepting process cannot reach smcd (a worker of another uid, the runtime
# directory 0700): the listener is marked (its master registered it), so clients get
# the echo and send CLC; the worker's library declines each proposal and the
# connection goes on as TCP with its data right (before: the application read the
# proposal as data and the client was reset; helper 118)
if start_server s13 "$NSB" smc --worker-uid 65534; then
        P13=$server_port
        chmod 700 "$rundir"
        client "$NSA" smc 90 client --label "13 (worker cannot reach smcd)" --addr "$IPB" --port "$P13" \
                --local-ip "$IPA" --expect tcp --sizes 1,4097,65536 --conns 8
        # ... and a proposal that comes 2.5 s after the connection (an smcd that stalled:
        # tests/clc-late.c sends it itself): the worker's library still waits for it
        # and declines it, then the connection is TCP (before 2026-12-07 the library
        # waited 1 s and the application read the proposal; helper 119)
        if [ -n "$clclate" ]; then
                out=$(timeout 60 "$clclate" "$IPB" "$P13" 2500 "$NSA" 2>&1)
                rc=$?
                echo "$out" | sed 's/^\(ok\|not ok\) - clc-late:/\1 - 13 (late proposal):/'
                [ $rc = 0 ] || [ $rc = 77 ] || { failed=1; echo "$out" | grep -q "^not ok" ||
                        nok "13 (late proposal): clc-late exited $rc"; }
        fi
        chmod 755 "$rundir"
fi

# 8.
if start_server s8 "$NSB" smc --bind "$IPB" --once; then
        P8=$server_port s8pid=$server_pid
        b=$(smcd_stat conns_current)
        in_ns "$NSA" smc 60 killme --addr "$IPB" --port "$P8" >"$tmp/killme.log" 2>&1 &
        kpid=$!
        pids+=("$kpid")
        info=
        for _ in $(seq 200); do
                info=$(grep -m1 '^{' "$tmp/killme.log")
                [ -n "$info" ] && break
                kill -0 "$kpid" 2>/dev/null || break
                sleep 0.05
        done
        cpid=$(echo "$info" | sed -n 's/.*"pid": \([0-9]*\).*/\1/p')
        if [ -n "$cpid" ] && kill -KILL "$cpid"; then
                wait "$kpid" 2>/dev/null
                ok "8: client in A (pid $cpid, $info) SIGKILLed 4 MiB into a 64 MiB transfer"
                for _ in $(seq 400); do grep -q '^{' "$tmp/s8.log" && break; sleep 0.05; done
                out=$(grep -m1 '^{' "$tmp/s8.log")
                if echo "$out" | grep -Eq '"outcome": "(eof|reset)'; then
                        ok "8: the server in B sees EOF or ECONNRESET: $out"
                else
                        nok "8: the server in B sees EOF or ECONNRESET: ${out:-nothing in 20 s: $(cat "$tmp/s8.log")}"
                fi
                now=
                for _ in $(seq 25); do
                        now=$(smcd_stat conns_current)
                        [ "$now" = "$b" ] && break
                        sleep 0.2
                done
                if [ "$now" = "$b" ]; then
                        ok "8: smcd's conns_current back to $b within 5 s"
                else
                        nok "8: smcd's conns_current back to $b within 5 s (now $now)"
                fi
        else
                nok "8: the client did not start its transfer: $(cat "$tmp/killme.log")"
        fi
        kill "$s8pid" 2>/dev/null
fi

# 9.
if start_server s9 "$NSB" smc --bind "$IPB"; then
        client "$NSA" smc 30 idle --label 9 --addr "$IPB" --port "$server_port"
fi

# 14. smcd stops (SIGTERM) while a client's handshake is in flight: the client in A
# connected (its TCP handshake done, the proposal sent) to a server in B that has not
# accepted yet. smcd runs on until that handshake ends, takes no new one meanwhile (a
# client connecting then gets TCP), and exits when it has: both clients connect, as
# TCP, with their data right (before 2026-12-07 smcd exited at once and the first
# client's connect failed with ECONNRESET)
if start_server s14 "$NSB" smc --bind "$IPB" --accept-after "$tmp/go14"; then
        P14=$server_port
        est14() { # N: N connections to B's port P14 established in A (within 10 s)
                for _ in $(seq 200); do
                        [ "$(ip netns exec "$NSA" ss -Htn state established dst "$IPB:$P14" | wc -l)" -ge "$1" ] &&
                                return 0
                        sleep 0.05
                done
                return 1
        }
        in_ns "$NSA" smc 60 client --label "14 (in flight at SIGTERM)" --addr "$IPB" --port "$P14" \
                --local-ip "$IPA" --expect tcp --sizes 1,4097,1048576 >"$tmp/c14a.log" 2>&1 &
        c14a=$!
        pids+=("$c14a")
        est14 1 || nok "14: the first client's TCP connection is not established in 10 s"
        sleep 0.2 # (its SMCR reaches smcd: the library sends it at once)
        kill -TERM "$spid"
        in_ns "$NSA" smc 60 client --label "14 (connects while smcd stops)" --addr "$IPB" --port "$P14" \
                --local-ip "$IPA" --expect tcp --reason SMC_CLC_DECL_NOSMCDEV --sizes 1,4097,1048576 \
                >"$tmp/c14b.log" 2>&1 &
        c14b=$!
        pids+=("$c14b")
        est14 2 || nok "14: the second client's TCP connection is not established in 10 s"
        if kill -0 "$spid" 2>/dev/null; then
                ok "14: smcd still runs with a handshake in flight, after SIGTERM"
        else
                nok "14: smcd still runs with a handshake in flight, after SIGTERM: $(tail -n 5 "$rundir/smcd.log")"
        fi
        touch "$tmp/go14"
        wait "$c14a"
        rc=$?
        cat "$tmp/c14a.log"
        [ $rc = 0 ] || { failed=1; grep -q "^not ok" "$tmp/c14a.log" || nok "14: first client exited $rc"; }
        wait "$c14b"
        rc=$?
        cat "$tmp/c14b.log"
        [ $rc = 0 ] || { failed=1; grep -q "^not ok" "$tmp/c14b.log" || nok "14: second client exited $rc"; }
        for _ in $(seq 100); do kill -0 "$spid" 2>/dev/null || break; sleep 0.05; done
        if ! kill -0 "$spid" 2>/dev/null && grep -q "handshakes in flight have ended: exiting" "$rundir/smcd.log"; then
                ok "14: smcd exited once the handshake had ended"
        else
                nok "14: smcd exited once the handshake had ended: $(tail -n 5 "$rundir/smcd.log")"
        fi
fi

# 15. an smcd that dies (SIGKILL) while a client's handshake waits for the server's
# accept, and a new one before the server accepts: the client's connect fails
# (ECONNRESET, documented), and the server's application must not read the client's
# CLC proposal, which the old smcd's echo brought: the new smcd cannot know of that
# echo (its SYN came before the new smcd marked the listener), so the library looks for
# a queued proposal and declines it (helper 122: the application read 92 bytes of it)
if start_smcd s15 --cross-netns yes && start_server s15 "$NSB" smc --bind "$IPB" --once --accept-after "$tmp/go15"; then
        P15=$server_port s15pid=$server_pid
        timeout 30 ip netns exec "$NSA" sh "$smcrun" python3 -c '
import socket, sys
s = socket.socket(); s.settimeout(20)
try:
    s.connect((sys.argv[1], int(sys.argv[2])))
    print("connected")
except OSError as e:
    print("connect: %s" % e)
' "$IPB" "$P15" >"$tmp/c15.log" 2>&1 &
        c15=$!
        pids+=("$c15")
        for _ in $(seq 200); do
                [ "$(ip netns exec "$NSA" ss -Htn state established dst "$IPB:$P15" | wc -l)" -ge 1 ] && break
                sleep 0.05
        done
        sleep 0.3 # (the proposal is sent)
        kill -KILL "$spid"
        wait "$spid" 2>/dev/null
        wait "$c15"
        start_smcd s15 --cross-netns yes || nok "15: smcd does not start again: $(cat "$rundir/smcd.log")"
        touch "$tmp/go15"
        for _ in $(seq 200); do grep -q '^{' "$tmp/s15.log" && break; sleep 0.05; done
        out=$(grep -m1 '^{' "$tmp/s15.log")
        if echo "$out" | grep -Eq '"outcome": "(eof|reset)", "bytes": 0,'; then
                ok "15: the server's application reads no CLC byte after the restart ($out; client: $(cat "$tmp/c15.log"))"
        else
                nok "15: the server's application reads no CLC byte after the restart: ${out:-nothing in 10 s: $(tail -n 3 "$tmp/s15.log")} (client: $(cat "$tmp/c15.log"))"
        fi
        kill "$s15pid" 2>/dev/null
fi

# 16. an SO_REUSEPORT listener closed while SMC-D handshakes of connections it
# accepted still run, and connections wait on its accept channel: another listener of
# the group gets them (helper 122: 29 of 32.7k connections lost this way)
if [ -z "$spid" ]; then start_smcd s16 --cross-netns yes || nok "16: smcd does not start"; fi
if [ -n "$spid" ] && ip netns exec "$NSB" sysctl -qw net.ipv4.tcp_migrate_req=1 2>/dev/null; then
        handoff=$(dirname "$py")/apps/reuseport-handoff.py
        # (0: the close comes while the handshakes run; 300 ms: after they ended, with
        # their NEW_CONNs on A's accept channel)
        for after in 0 300; do
                rm -f "$tmp/s16.port"
                timeout -k 5 60 ip netns exec "$NSB" sh "$smcrun" python3 "$handoff" serve --bind "$IPB" \
                        --port-file "$tmp/s16.port" --close-after $after >"$tmp/s16.log" 2>&1 &
                s16pid=$!
                pids+=("$s16pid")
                for _ in $(seq 100); do [ -s "$tmp/s16.port" ] && break; sleep 0.05; done
                b=$(smcd_stat conns_netns)
                mb=$(grep -c 'moved to listener' "$rundir/smcd.log") wb=$(grep -c 'went during a handshake' "$rundir/smcd.log")
                out=$(timeout -k 5 60 ip netns exec "$NSA" sh "$smcrun" python3 "$handoff" connect --addr "$IPB" \
                        --port "$(cat "$tmp/s16.port" 2>/dev/null)" --conns 32 2>&1)
                rc=$?
                wait "$s16pid"
                a=$(smcd_stat conns_netns)
                moved="moved from the channel: $(($(grep -c 'moved to listener' "$rundir/smcd.log") - mb)), during the handshake: $(($(grep -c 'went during a handshake' "$rundir/smcd.log") - wb))"
                if [ $rc = 0 ]; then
                        ok "16 (close after $after ms): 32 clients all answered across the close of an SO_REUSEPORT listener ($out; server: $(cat "$tmp/s16.log"); conns_netns +$((a - b)), $moved)"
                else
                        nok "16 (close after $after ms): 32 clients all answered across the close of an SO_REUSEPORT listener: $out (server: $(cat "$tmp/s16.log"); $moved)"
                fi
        done
else
        ok "16: skipped: no net.ipv4.tcp_migrate_req (Linux < 5.14)"
fi

# 17. a listener bound to a device (SO_BINDTODEVICE) gets only what arrives on it: a
# connection to 127.0.0.1 never reaches one bound to the veth (of another uid here)
if [ -n "$spid" ]; then
        cat >"$tmp/bind17.py" <<'PY'
import os, select, socket, sys, time
dev, port_file = sys.argv[1], sys.argv[2]
if dev != "lo":  # the veth's listener: of uid 65534, counts what it accepts
    os.setgid(65534)
    os.setuid(65534)
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, dev.encode())
s.bind(("0.0.0.0", int(open(port_file).read()) if os.path.exists(port_file) else 0))
s.listen(16)
if not os.path.exists(port_file):
    open(port_file + ".tmp", "w").write(str(s.getsockname()[1]))
    os.rename(port_file + ".tmp", port_file)
open(port_file + "." + dev, "w").write("ready")
n = 0
while select.select([s], [], [], 4)[0]:
    c, _ = s.accept()
    c.sendall(dev.encode())
    c.close()
    n += 1
print("%s accepted %d" % (dev, n), flush=True)
PY
        mkdir -p "$tmp/p17d" && chmod 777 "$tmp/p17d" # (the port file of uid 65534)
        ip netns exec "$NSB" sh "$smcrun" /usr/bin/python3 "$tmp/bind17.py" "$VB" "$tmp/p17d/p" >"$tmp/s17a.log" 2>&1 &
        s17a=$!
        pids+=("$s17a")
        for _ in $(seq 100); do [ -e "$tmp/p17d/p.$VB" ] && break; sleep 0.05; done
        ip netns exec "$NSB" sh "$smcrun" /usr/bin/python3 "$tmp/bind17.py" lo "$tmp/p17d/p" >"$tmp/s17b.log" 2>&1 &
        s17b=$!
        pids+=("$s17b")
        for _ in $(seq 100); do [ -e "$tmp/p17d/p.lo" ] && break; sleep 0.05; done
        got=$(ip netns exec "$NSB" sh "$smcrun" /usr/bin/python3 -c '
import socket, sys
out = []
for i in range(8):
    c = socket.create_connection(("127.0.0.1", int(open(sys.argv[1]).read())), timeout=5)
    out.append(c.recv(16).decode() or "EOF")
    c.close()
print(" ".join(out))' "$tmp/p17d/p" 2>&1)
        wait "$s17a" "$s17b"
        if [ "$got" = "lo lo lo lo lo lo lo lo" ] && grep -q "^$VB accepted 0" "$tmp/s17a.log"; then
                ok "17: 8 connections to 127.0.0.1 all reach the listener bound to lo, none the one bound to $VB ($(cat "$tmp/s17a.log" "$tmp/s17b.log" | tr '\n' ' '))"
        else
                nok "17: connections to 127.0.0.1: $got ($(cat "$tmp/s17a.log" "$tmp/s17b.log" | tr '\n' ' '))"
        fi
fi

# 18. nonblocking connects over CLC: EINPROGRESS at once, the handshakes in the
# library's thread (before: connect() waited for TCP's handshake and the server's
# accept, an event loop stalled)
# (a dead address: B has $NET.3, so smcd takes it for its wildcard listener's, but A
# sends it to a MAC nobody has: its SYNs go nowhere)
if [ -n "$spid" ] && ip -n "$NSB" addr add "$NET.3/32" dev "$VB" &&
        ip -n "$NSA" neigh replace "$NET.3" lladdr 02:00:00:00:00:03 dev "$VA" nud permanent &&
        start_server s18 "$NSB" smc --bind 0.0.0.0; then
        P18=$server_port
        if start_server s18g "$NSB" smc --bind "$IPB" --accept-after "$tmp/go18"; then
                b=$(smcd_stat conns_netns)
                client "$NSA" smc 120 asyncconn --label 18 --addr "$IPB" --port "$P18" \
                        --gated-port "$server_port" --go "$tmp/go18" --dead-addr "$NET.3" --refused-port 9
                delta_check 18 conns_netns "$b" +32
        fi
fi

# 6. (last: another smcd, without --cross-netns)
stop_smcd
if start_smcd smcd2; then
        if start_server s6 "$NSB" smc --bind 0.0.0.0; then
                b=$(smcd_stat conns_netns)
                client "$NSA" smc 60 client --label "6 (no --cross-netns)" --addr "$IPB" --port "$server_port" \
                        --local-ip "$IPA" --expect tcp --reason SMC_CLC_DECL_PEERNOSMC --server-expect tcp \
                        --sizes 1,4097,1048576,16777216
                delta_check "6 (no --cross-netns)" conns_netns "$b" 0
        fi
else
        nok "6: smcd without --cross-netns did not start: $(cat "$rundir/smcd.log")"
fi

exit $failed
