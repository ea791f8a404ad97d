#!/bin/bash
# TCP fallback connections in `smcctl connections` (smcd/fallback.h), against a private
# dbus-daemon and a private smcd: a connect that falls back (no SMC listener at the
# destination; a policy rule) and a plain TCP connection accepted by an SMC listener are
# listed with mode TCP, the reason, the kernel's TCP state, buffer sizes, payload bytes
# and the owner's pid and uid; they disappear when closed and when the process is
# killed; the filters and the text table; malformed or foreign FALLBACK notices are
# refused (handshake_errors) and change nothing; with a bound of 200, 2000 live
# fallbacks keep 200 rows and smcd's memory flat.
# Args: SMCD SMCCTL LIBSMCRUN SMCRUN. Skips (77) without dbus-daemon. TAP-ish output.
set -u
smcd=$1 smcctl=$2 lib=$3 smcrun=$4
command -v dbus-daemon >/dev/null || { echo "SKIP: dbus-daemon not installed"; exit 77; }

tmp=$(mktemp -d /tmp/smcd-test-fallback.XXXXXX)
chmod 755 "$tmp"  # the unprivileged raw client must reach smcd.sock
rundir=$tmp/run
mkdir "$rundir"
spid='' dpid='' pids=()
cleanup() {
        touch "$tmp/go"
        sleep 0.2  # the helpers see "go" and exit by themselves
        for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
        for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
        [ -n "$spid" ] && kill "$spid" 2>/dev/null && wait "$spid" 2>/dev/null
        [ -n "$dpid" ] && kill "$dpid" 2>/dev/null
        rm -rf "$tmp"
}
trap cleanup EXIT

# shellcheck source=tests/lib-bus.sh
. "$(dirname "$0")/lib-bus.sh"
start_bus "$tmp" bus || exit 1
dpid=$BUS_PID

failed=0
ok() { echo "ok - $*"; }
nok() { echo "not ok - $*"; failed=1; }

export SMCD_RUNTIME_DIR=$rundir SMCRUN_LIB=$lib
ulimit -n 8192 2>/dev/null || true  # 2000 connections held by one plain server

start_smcd() {
        "$smcd" -v --runtime-dir "$rundir" --state-file "$tmp/state/tunables.json" "$@" >>"$tmp/smcd.log" 2>&1 &
        spid=$!
        for _ in $(seq 100); do "$smcctl" stats >/dev/null 2>&1 && return 0; sleep 0.05; done
        nok "smcd did not come up: $(cat "$tmp/smcd.log")"
        exit 1
}
stop_smcd() {
        kill "$spid"; wait "$spid"; local rc=$?; spid=
        [ $rc -eq 0 ] && ok "smcd exits cleanly" || { nok "smcd exit $rc"; tail -20 "$tmp/smcd.log"; }
}
start_smcd

# a sanitizer build of libsmcrun.so needs its runtime preloaded first
san=$(ldd "$lib" | awk '$1 ~ /^lib(a|ub|t|hwa)san\.so/ { print $3 }' | paste -sd:)
# bg_smcrun LOG PROGRAM ARGS: start PROGRAM under smcrun in the background, output to
# LOG; $! (and the last of pids) is the program itself, whose pid cleanup kills
bg_smcrun() {
        local log=$1; shift
        (exec env ${san:+LD_PRELOAD="$san"} ${san:+ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"} \
                sh "$smcrun" "$@") >"$log" 2>&1 &
        pids+=($!)
}
prop() {
        busctl --address="$DBUS_SYSTEM_BUS_ADDRESS" get-property org.smcd.smcd1 /org/smcd/smcd1/connections \
                org.smcd.smcd1.Connections "$1" 2>&1 | awk '{ print $2 }'
}
# rows of `smcctl -j connections ARGS` for which the python expression on e holds
count_rows() {
        local expr=$1; shift
        "$smcctl" -j connections "$@" | python3 -c 'import json, sys
print(sum(1 for e in json.load(sys.stdin) if eval(sys.argv[1])))' "$expr"
}
# wait up to 5 s until count_rows EXPR ARGS prints N
wait_rows() {
        local n=$1 expr=$2; shift 2
        for _ in $(seq 100); do [ "$(count_rows "$expr" "$@")" = "$n" ] && return 0; sleep 0.05; done
        return 1
}
wait_file() { for _ in $(seq 200); do [ -s "$1" ] && return 0; sleep 0.05; done; return 1; }

# A plain TCP server, not under smcrun (so no SMC listener): accepts, reads 1000 bytes,
# answers 10, holds the connection; writes its port; on "$tmp/close" it closes them all.
cat >"$tmp/plain.py" <<'PY'
import os, socket, sys, threading, time
d, tag = sys.argv[1], sys.argv[2]
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0)); s.listen(4096)
held = []
def serve():
    while True:
        a, _ = s.accept(); held.append(a)
        if tag == "echo":
            got = 0
            while got < 1000: got += len(a.recv(65536))
            a.sendall(b"y" * 10)
threading.Thread(target=serve, daemon=True).start()
open(d + "/%s.port.tmp" % tag, "w").write(str(s.getsockname()[1]))
os.rename(d + "/%s.port.tmp" % tag, d + "/%s.port" % tag)
while not (os.path.exists(d + "/go") or not os.path.isdir(d)):
    if os.path.exists(d + "/%s.close" % tag):
        for a in held: a.close()
        held.clear()
    time.sleep(0.02)
PY
python3 "$tmp/plain.py" "$tmp" echo &
pids+=($!)
wait_file "$tmp/echo.port" || { nok "plain server did not start"; exit 1; }
pport=$(cat "$tmp/echo.port")

[ "$(count_rows 'True' --mode tcp)" = 0 ] && ok "no TCP rows before" || nok "TCP rows before: $("$smcctl" -j connections)"

# ---- 1. a client that falls back: no SMC listener at the destination ----
cat >"$tmp/client.py" <<'PY'
import os, socket, struct, sys, time
d, port, tag = sys.argv[1], int(sys.argv[2]), sys.argv[3]
c = socket.socket()
if tag == "nonblock":
    c.setblocking(False)
    assert c.connect_ex(("127.0.0.1", port)) in (0, 115), "not EINPROGRESS"  # 115 = EINPROGRESS
    import select; select.select([], [c], [], 5); c.setblocking(True)
else:
    c.connect(("127.0.0.1", port))
c.sendall(b"x" * 1000); got = 0
while got < 10: got += len(c.recv(65536))
try: mode = c.getsockopt(286, 0x5301); reason = struct.unpack("I", c.getsockopt(286, 0x5302, 4))[0]
except OSError: mode = reason = 0  # not under smcrun: no SOL_SMC
open(d + "/%s.info.tmp" % tag, "w").write("%d %d %d 0x%08x\n" % (os.getpid(), c.getsockname()[1], mode, reason))
os.rename(d + "/%s.info.tmp" % tag, d + "/%s.info" % tag)
while not os.path.exists(d + "/%s.closeit" % tag) and not (os.path.exists(d + "/go") or not os.path.isdir(d)): time.sleep(0.02)
c.close()
open(d + "/%s.closed" % tag, "w").write("1")
while not (os.path.exists(d + "/go") or not os.path.isdir(d)): time.sleep(0.02)
PY
bg_smcrun "$tmp/c1.log" python3 "$tmp/client.py" "$tmp" "$pport" c1
wait_file "$tmp/c1.info" || nok "client 1: $(cat "$tmp/c1.log")"
read -r c1pid c1port c1mode c1reason <"$tmp/c1.info"
[ "$c1mode" = 2 ] && [ "$c1reason" = 0x03010000 ] && ok "client 1 fell back (SOL_SMC: mode TCP, reason $c1reason)" \
        || nok "client 1: mode $c1mode reason $c1reason"
if wait_rows 1 'e["mode"] == "TCP"' --mode tcp &&
   "$smcctl" -j connections --mode tcp >"$tmp/json" && python3 - "$tmp/json" "$c1pid" "$c1port" "$pport" "$(id -u)" <<'PY' 2>"$tmp/err"
import json, sys
l = json.load(open(sys.argv[1])); pid, cport, sport, uid = (int(x) for x in sys.argv[2:])
assert len(l) == 1, l
e = l[0]
keys = {"id", "role", "state", "local", "peer", "mode", "fallback_reason", "fallback_code", "sndbuf", "rmb",
        "bytes_tx", "bytes_rx", "msgs_tx", "msgs_rx", "pid", "uid"}
assert set(e) == keys, e
assert e["role"] == "client" and e["state"] == "ESTABLISHED" and e["mode"] == "TCP", e
assert e["local"] == "127.0.0.1:%d" % cport and e["peer"] == "127.0.0.1:%d" % sport, e
assert e["fallback_reason"] == "SMC_CLC_DECL_PEERNOSMC" and e["fallback_code"] == "0x03010000", e
assert e["pid"] == pid and e["uid"] == uid, e
assert e["bytes_tx"] == 1000 and e["bytes_rx"] == 10, e
assert e["sndbuf"] > 0 and e["rmb"] > 0 and e["msgs_tx"] is None and e["msgs_rx"] is None, e
assert len(e["id"]) == 16 and int(e["id"], 16) != 0, e
PY
then ok "client fallback listed: ESTABLISHED, PEERNOSMC, pid $c1pid, uid $(id -u), bytes 1000/10, buffers"
else nok "client fallback row: $(cat "$tmp/err") $(cat "$tmp/json")"; fi
# the id is the kernel's socket cookie, as ss -e shows it (sk:...)
if command -v ss >/dev/null; then
        id=$("$smcctl" -j connections --mode tcp | python3 -c 'import json,sys; print(int(json.load(sys.stdin)[0]["id"], 16))')
        ss -tne "sport = :$c1port" | grep -q "sk:$(printf %x "$id")\b" && ok "the row's id is the socket cookie (ss -e sk:)" \
                || nok "id $id not in ss -e: $(ss -tne "sport = :$c1port")"
fi

# filters, text table
n_smcd=$(count_rows True --mode smcd); n_port=$(count_rows True --port "$pport"); n_other=$(count_rows True --port 1)
n_all=$(count_rows True)
[ "$n_smcd" = 0 ] && [ "$n_port" = 1 ] && [ "$n_other" = 0 ] && [ "$n_all" = 1 ] \
        && ok "filters: --mode smcd 0, --port $pport 1, --port 1 0, all 1" \
        || nok "filters: smcd $n_smcd, port $n_port, other $n_other, all $n_all"
"$smcctl" connections --mode tcp >"$tmp/out" 2>&1
if head -1 "$tmp/out" | grep -q '^ID  *ROLE  *STATE  *LOCAL  *PEER  *MODE  *REASON  *SNDBUF  *RMB  *TX  *RX  *PID  *UID$' &&
   [ "$(wc -l <"$tmp/out")" = 2 ] && sed -n 2p "$tmp/out" | grep -q " ESTABLISHED .* TCP  *SMC_CLC_DECL_PEERNOSMC .* 1000  *10  *$c1pid "; then
        c1h=$(head -1 "$tmp/out" | awk '{ print index($0, "REASON") }'); c1r=$(sed -n 2p "$tmp/out" | awk '{ print index($0, "SMC_CLC") }')
        [ "$c1h" = "$c1r" ] && ok "text: REASON column, aligned" || nok "text not aligned: $c1h vs $c1r: $(cat "$tmp/out")"
else nok "text table: $(cat "$tmp/out")"; fi

# the peer closes: the kernel's state shows
touch "$tmp/echo.close"
wait_rows 1 'e["state"] == "CLOSE_WAIT"' --mode tcp && ok "peer closed: state CLOSE_WAIT" \
        || nok "after the peer's close: $("$smcctl" -j connections --mode tcp)"
rm -f "$tmp/echo.close"

# the client closes its socket (the process lives on): the row goes
touch "$tmp/c1.closeit"
wait_file "$tmp/c1.closed"
wait_rows 0 True --mode tcp && ok "closed by the client: row gone" || nok "after close: $("$smcctl" -j connections --mode tcp)"
[ "$(prop FallbackCount)" = 0 ] && ok "FallbackCount 0 after the List" || nok "FallbackCount $(prop FallbackCount)"

# ---- 2. a nonblocking connect (EINPROGRESS) is listed too ----
bg_smcrun "$tmp/nb.log" python3 "$tmp/client.py" "$tmp" "$pport" nonblock
wait_file "$tmp/nonblock.info" || nok "nonblocking client: $(cat "$tmp/nb.log")"
read -r nbpid nbport _ <"$tmp/nonblock.info"
wait_rows 1 "e['pid'] == $nbpid and e['local'].endswith(':$nbport') and e['state'] == 'ESTABLISHED'" --mode tcp \
        && ok "nonblocking connect listed" || nok "nonblocking: $("$smcctl" -j connections --mode tcp)"
touch "$tmp/nonblock.closeit"
wait_rows 0 True --mode tcp && ok "nonblocking: gone after close" || nok "nonblocking after close: $("$smcctl" -j connections)"

# ---- IPv6: ::1 and a v4-mapped peer (an AF_INET6 socket reaching 127.0.0.1) ----
# a plain dual-stack server (not under smcrun); the client under smcrun
cat >"$tmp/v6.py" <<'PY'
import os, socket, sys, time
d, role = sys.argv[1], sys.argv[2]
if role == "server":
    try:
        s = socket.socket(socket.AF_INET6); s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        s.bind(("::", 0)); s.listen(4)
        port = s.getsockname()[1]
        socket.create_connection(("::1", port)).close()
    except OSError as e:
        port = 0
    open(d + "/v6.port.tmp", "w").write("%d\n" % port); os.rename(d + "/v6.port.tmp", d + "/v6.port")
    held = []
    while port and not (os.path.exists(d + "/go") or not os.path.isdir(d)):
        s.settimeout(0.2)
        try: held.append(s.accept()[0])
        except socket.timeout: pass
    sys.exit(0)
port = int(sys.argv[3])
a = socket.create_connection(("::1", port))
b = socket.socket(socket.AF_INET6); b.connect(("::ffff:127.0.0.1", port))
open(d + "/v6.info.tmp", "w").write("%d %d\n" % (a.getsockname()[1], b.getsockname()[1]))
os.rename(d + "/v6.info.tmp", d + "/v6.info")
while not os.path.exists(d + "/v6.closeit") and not (os.path.exists(d + "/go") or not os.path.isdir(d)): time.sleep(0.02)
PY
python3 "$tmp/v6.py" "$tmp" server &
pids+=($!)
wait_file "$tmp/v6.port" || nok "v6 server"
v6port=$(cat "$tmp/v6.port")
if [ "$v6port" = 0 ]; then
        ok "SKIP IPv6: no ::1 here"
else
        bg_smcrun "$tmp/v6.log" python3 "$tmp/v6.py" "$tmp" client "$v6port"
        wait_file "$tmp/v6.info" || nok "v6 client: $(cat "$tmp/v6.log")"
        read -r v6a v6b <"$tmp/v6.info"
        wait_rows 2 "e['local'] in ('[::1]:$v6a', '[::ffff:127.0.0.1]:$v6b') and e['state'] == 'ESTABLISHED'" --mode tcp \
                && ok "IPv6 fallbacks listed: [::1]:$v6a, [::ffff:127.0.0.1]:$v6b" \
                || nok "IPv6: $("$smcctl" -j connections --mode tcp)"
        touch "$tmp/v6.closeit"
        wait_rows 0 True && ok "IPv6: gone after close" || nok "IPv6 after close: $("$smcctl" -j connections)"
fi

# ---- 3. killed: its rows go with its control connection ----
bg_smcrun "$tmp/k.log" python3 "$tmp/client.py" "$tmp" "$pport" k
wait_file "$tmp/k.info" || nok "client k: $(cat "$tmp/k.log")"
read -r kpyid _ <"$tmp/k.info"
wait_rows 1 "e['pid'] == $kpyid" --mode tcp && [ "$(prop FallbackCount)" = 1 ] || nok "client k not listed"
kill -9 "$kpyid"; wait "$kpyid" 2>/dev/null
for _ in $(seq 100); do [ "$(prop FallbackCount)" = 0 ] && break; sleep 0.05; done
[ "$(prop FallbackCount)" = 0 ] && ok "killed client: its entry freed by smcd at once (FallbackCount 0 without a List)" \
        || nok "killed client: FallbackCount $(prop FallbackCount)"
[ "$(count_rows True)" = 0 ] && ok "killed client: no rows" || nok "killed: $("$smcctl" -j connections)"

# ---- 4. server side: an SMC listener accepts a plain TCP client ----
cat >"$tmp/server.py" <<'PY'
import os, socket, sys, time
d, tag = sys.argv[1], sys.argv[2]
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(4)
open(d + "/%s.port.tmp" % tag, "w").write("%d %d\n" % (os.getpid(), s.getsockname()[1]))
os.rename(d + "/%s.port.tmp" % tag, d + "/%s.port" % tag)
a, _ = s.accept()
got = 0
while got < 1000: got += len(a.recv(65536))
a.sendall(b"y" * 10)
while not os.path.exists(d + "/%s.closeit" % tag) and not (os.path.exists(d + "/go") or not os.path.isdir(d)): time.sleep(0.02)
a.close(); s.close()
PY
bg_smcrun "$tmp/s1.log" python3 "$tmp/server.py" "$tmp" s1
wait_file "$tmp/s1.port" || nok "server: $(cat "$tmp/s1.log")"
read -r s1pid s1port <"$tmp/s1.port"
python3 "$tmp/client.py" "$tmp" "$s1port" plainc >"$tmp/plainc.log" 2>&1 &  # not under smcrun
pids+=($!)
wait_file "$tmp/plainc.info" || nok "plain client: $(cat "$tmp/plainc.log")"
read -r _ pcport _ <"$tmp/plainc.info"
if wait_rows 1 "e['role'] == 'server'" --mode tcp &&
   "$smcctl" -j connections --mode tcp >"$tmp/json" && python3 - "$tmp/json" "$s1pid" "$s1port" "$pcport" <<'PY' 2>"$tmp/err"
import json, sys
l = json.load(open(sys.argv[1])); pid, sport, cport = (int(x) for x in sys.argv[2:])
assert len(l) == 1, l
e = l[0]
assert e["role"] == "server" and e["state"] == "ESTABLISHED" and e["pid"] == pid, e
assert e["local"] == "127.0.0.1:%d" % sport and e["peer"] == "127.0.0.1:%d" % cport, e
assert e["fallback_reason"] == "SMC_CLC_DECL_PEERNOSMC" and e["fallback_code"] == "0x03010000", e
assert e["bytes_rx"] == 1000 and e["bytes_tx"] == 10, e
PY
then ok "server side: a plain TCP client accepted by an SMC listener is listed (PEERNOSMC, pid $s1pid)"
else nok "server row: $(cat "$tmp/err") $(cat "$tmp/json")"; fi
touch "$tmp/s1.closeit" "$tmp/plainc.closeit"
wait_rows 0 True --mode tcp && ok "server side: gone after close" || nok "server after close: $("$smcctl" -j connections)"

# a pre-forked server: the listener made before fork(), the child accepts
cat >"$tmp/forked.py" <<'PY'
import os, socket, sys, time
d = sys.argv[1]
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(4)
pid = os.fork()
if pid == 0:
    a, _ = s.accept()
    open(d + "/fk.child.tmp", "w").write("%d\n" % os.getpid()); os.rename(d + "/fk.child.tmp", d + "/fk.child")
    while not os.path.exists(d + "/fk.closeit") and not (os.path.exists(d + "/go") or not os.path.isdir(d)): time.sleep(0.02)
    os._exit(0)
open(d + "/fk.port.tmp", "w").write("%d\n" % s.getsockname()[1]); os.rename(d + "/fk.port.tmp", d + "/fk.port")
os.waitpid(pid, 0)
PY
bg_smcrun "$tmp/fk.log" python3 "$tmp/forked.py" "$tmp"
wait_file "$tmp/fk.port" || nok "forked server: $(cat "$tmp/fk.log")"
python3 -c 'import socket, sys, time; c = socket.create_connection(("127.0.0.1", int(sys.argv[1]))); time.sleep(30)' \
        "$(cat "$tmp/fk.port")" &
fkc=$!; pids+=("$fkc")
wait_file "$tmp/fk.child" || nok "forked child: $(cat "$tmp/fk.log")"
fkpid=$(cat "$tmp/fk.child")
wait_rows 1 "e['role'] == 'server' and e['pid'] == $fkpid" --mode tcp \
        && ok "pre-forked server: the child's accepted TCP connection is listed with the child's pid" \
        || nok "forked: $("$smcctl" -j connections --mode tcp)"
touch "$tmp/fk.closeit"; kill "$fkc"
wait_rows 0 True && ok "forked: gone after close" || nok "forked after close: $("$smcctl" -j connections)"

# ---- 5. a policy rule: both ends under smcrun, both rows carry SMCD_DECL_POLICY ----
bg_smcrun "$tmp/s2.log" python3 "$tmp/server.py" "$tmp" s2
wait_file "$tmp/s2.port" || nok "server 2: $(cat "$tmp/s2.log")"
read -r s2pid s2port <"$tmp/s2.port"
rid=$("$smcctl" policy add connect peer-port "$s2port" action tcp 2>"$tmp/err") || nok "policy add: $(cat "$tmp/err")"
bg_smcrun "$tmp/c2.log" python3 "$tmp/client.py" "$tmp" "$s2port" c2
wait_file "$tmp/c2.info" || nok "client 2: $(cat "$tmp/c2.log")"
read -r c2pid c2port _ c2reason <"$tmp/c2.info"
if [ "$c2reason" = 0x0b010000 ] && wait_rows 2 'e["fallback_reason"] == "SMCD_DECL_POLICY"' --mode tcp &&
   "$smcctl" -j connections --port "$s2port" >"$tmp/json" && python3 - "$tmp/json" "$c2pid" "$s2pid" "$c2port" "$s2port" <<'PY' 2>"$tmp/err"
import json, sys
l = json.load(open(sys.argv[1])); cpid, spid, cport, sport = (int(x) for x in sys.argv[2:])
assert len(l) == 2 and all(e["mode"] == "TCP" and e["fallback_code"] == "0x0b010000" for e in l), l
cl = [e for e in l if e["role"] == "client"][0]; sv = [e for e in l if e["role"] == "server"][0]
assert cl["pid"] == cpid and sv["pid"] == spid, l
assert cl["local"] == sv["peer"] == "127.0.0.1:%d" % cport and cl["peer"] == sv["local"] == "127.0.0.1:%d" % sport, l
assert cl["bytes_tx"] == sv["bytes_rx"] == 1000 and sv["bytes_tx"] == cl["bytes_rx"] == 10, l
PY
then ok "policy peer-port $s2port action tcp: client and server rows, both SMCD_DECL_POLICY"
else nok "policy rows: reason $c2reason $(cat "$tmp/err") $(cat "$tmp/json")"; fi
"$smcctl" policy del "$rid" || nok "policy del"
touch "$tmp/s2.closeit" "$tmp/c2.closeit"
wait_rows 0 True && ok "policy: rows gone after close" || nok "policy after close: $("$smcctl" -j connections)"

# ---- 6. malformed and foreign notices: refused, counted, nothing changes ----
cat >"$tmp/raw.py" <<'PY'
import errno, os, socket, struct, sys
rundir, what = sys.argv[1], sys.argv[2]
MAGIC, HELLO, HELLO_REPLY, ERROR, FALLBACK = 0x64434d53, 1, 2, 11, 12
def hdr(t, seq, length, version=2): return struct.pack("<IHHII", MAGIC, version, t, length, seq)
def addr(host, port):
    return struct.pack("<HHI", socket.AF_INET, port, 0) + socket.inet_pton(socket.AF_INET, host) + bytes(12)
def notice(seq, local, peer, role=0, reason=0x03010000, length=72, version=2):
    return hdr(FALLBACK, seq, length, version) + local + peer + struct.pack("<II", role, reason) + bytes(length - 72)
def recv(s):
    data = s.recv(512)
    t, seq = struct.unpack_from("<H", data, 6)[0], struct.unpack_from("<I", data, 12)[0]
    return t, seq, (struct.unpack_from("<i", data, 16)[0] if t == ERROR else None)
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET); s.connect(rundir + "/smcd.sock"); s.settimeout(5)
v = 1 if what == "v1" else 2
s.send(hdr(HELLO, 1, 32, 1) + struct.pack("<IIII", 1, v, 0, 0))
assert recv(s)[0] == HELLO_REPLY
errors = []
def name(e): return "EOPNOTSUPP" if e == errno.EOPNOTSUPP else errno.errorcode[e]
def expect_error(msg, seq):
    s.send(msg); t, rseq, err = recv(s)
    assert t == ERROR and rseq == seq, (t, rseq, err)
    errors.append(-err)
def expect_silence(msg, seq):
    s.send(msg)
    s.send(hdr(HELLO, seq + 1, 32, v) + struct.pack("<IIII", 1, 2, 0, 0))  # a barrier: ERROR EALREADY
    t, rseq, err = recv(s)
    assert t == ERROR and rseq == seq + 1 and err == -errno.EALREADY, ("the notice was answered", t, rseq, err)
# a live TCP connection of this process (uid 0 unless run unprivileged)
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(1)
c = socket.create_connection(l.getsockname()); a, _ = l.accept()
local, peer = addr("127.0.0.1", c.getsockname()[1]), addr("127.0.0.1", l.getsockname()[1])
if what == "bad":
    expect_error(notice(10, local, peer, length=76), 10)                 # wrong length
    expect_error(notice(11, local, peer)[:68], 11)                       # short
    expect_error(notice(12, addr("0.0.0.0", 5), peer), 12)               # wildcard address
    expect_error(notice(13, local, addr("127.0.0.1", 0)), 13)            # port 0
    expect_error(notice(14, struct.pack("<HHI", 1, 5, 0) + bytes(16), peer), 14)  # AF_UNIX
    expect_error(notice(15, local, peer, role=7), 15)                    # no such role
    expect_error(notice(16, local, peer, reason=0x03990000), 16)         # no such reason
    expect_error(notice(17, local, peer, role=1, reason=0x03010000), 17) # a server gives no reason
    expect_error(notice(18, local, peer, version=1), 18)                 # version 1 has no FALLBACK
    print(" ".join(name(e) for e in errors))
    # well-formed, about no socket: no answer, nothing listed
    expect_silence(notice(30, addr("127.0.0.1", 1), addr("127.0.0.1", 2)), 30)
    print("silent")
elif what == "v1":
    expect_error(notice(10, local, peer), 10)                            # v2 on a version-1 connection
    print(" ".join(name(e) for e in errors))
elif what == "foreign":
    # run unprivileged: the socket named is root's (argv[3], argv[4]: its ports)
    local, peer = addr("127.0.0.1", int(sys.argv[3])), addr("127.0.0.1", int(sys.argv[4]))
    expect_error(notice(10, local, peer), 10)
    print(" ".join(name(e) for e in errors))
elif what == "good":
    # a root client may tell of any of its connections, with any known reason
    expect_silence(notice(10, local, peer, reason=0x030d0000), 10)       # SMC_CLC_DECL_MAX_DMB
    open(sys.argv[3] + ".tmp", "w").write("%d %d\n" % (c.getsockname()[1], l.getsockname()[1]))
    os.rename(sys.argv[3] + ".tmp", sys.argv[3])
    import time
    while not os.path.exists(sys.argv[4]) and os.path.isdir(os.path.dirname(sys.argv[4])): time.sleep(0.02)
PY
he() { "$smcctl" -j stats | python3 -c 'import json,sys; print(json.load(sys.stdin)["smcd"]["handshake_errors"])'; }
he0=$(he); before=$("$smcctl" -j connections)
out=$(timeout 20 python3 "$tmp/raw.py" "$rundir" bad 2>&1)
[ "$out" = "$(printf 'EBADMSG EBADMSG EBADMSG EBADMSG EBADMSG EBADMSG EBADMSG EBADMSG EOPNOTSUPP\nsilent')" ] \
        && ok "malformed notices refused: $(echo $out)" || nok "malformed notices: $out"
out=$(timeout 20 python3 "$tmp/raw.py" "$rundir" v1 2>&1)
[ "$out" = EPROTONOSUPPORT ] && ok "FALLBACK on a version-1 connection: EPROTONOSUPPORT" || nok "v1: $out"
he1=$(he)
[ $((he1 - he0)) = 11 ] && ok "handshake_errors +11 (9 malformed, 1 version-1, 1 barrier HELLO)" \
        || nok "handshake_errors $he0 -> $he1"
[ "$("$smcctl" -j connections)" = "$before" ] && [ "$(prop FallbackCount)" = 0 ] \
        && ok "nothing listed after the refused notices" || nok "changed: $("$smcctl" -j connections)"
# a notice about another uid's socket (an unprivileged client naming root's connection)
if command -v setpriv >/dev/null; then
        timeout 20 python3 "$tmp/raw.py" "$rundir" good "$tmp/good.ports" "$tmp/good.done" >"$tmp/good.log" 2>&1 &
        gpid=$!; pids+=("$gpid")
        wait_file "$tmp/good.ports" || nok "raw good: $(cat "$tmp/good.log")"
        read -r gc gl <"$tmp/good.ports"
        wait_rows 1 "e['fallback_reason'] == 'SMC_CLC_DECL_MAX_DMB' and e['local'] == '127.0.0.1:$gc'" --mode tcp \
                && ok "a root client's notice (raw protocol) is listed with its reason" \
                || nok "raw good: $("$smcctl" -j connections)"
        he0=$(he)
        upy=python3; [ -x /usr/bin/python3 ] && upy=/usr/bin/python3  # not a shim in root's home
        out=$(timeout 20 setpriv --reuid=65534 --regid=65534 --clear-groups "$upy" "$tmp/raw.py" "$rundir" foreign "$gc" "$gl" 2>&1)
        [ "$out" = EPERM ] && [ $(($(he) - he0)) = 1 ] && [ "$(prop FallbackCount)" = 1 ] \
                && ok "uid 65534 naming root's connection: EPERM, counted, nothing added" || nok "foreign: $out"
        touch "$tmp/good.done"; wait "$gpid"
        wait_rows 0 True && ok "raw client gone: no rows" || nok "after raw: $("$smcctl" -j connections)"
fi
stop_smcd

# ---- 7. bounded: --max-fallback-conns 200 (50 per client), 4 clients x 500 live fallbacks ----
start_smcd --max-fallback-conns 200
rss() { awk '/^VmRSS:/ { print $2 }' "/proc/$spid/status"; }
cat >"$tmp/many.py" <<'PY'
import os, socket, sys, time
d, port, tag, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
held = [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]
open(d + "/%s.last.tmp" % tag, "w").write("%d %d\n" % (os.getpid(), held[-1].getsockname()[1]))
os.rename(d + "/%s.last.tmp" % tag, d + "/%s.last" % tag)
while not (os.path.exists(d + "/go") or not os.path.isdir(d)) and not os.path.exists(d + "/many.close"): time.sleep(0.05)
PY
python3 "$tmp/plain.py" "$tmp" many &
pids+=($!)
wait_file "$tmp/many.port" || nok "many: plain server"
mport=$(cat "$tmp/many.port")
rss0=$(rss)
for k in 1 2 3 4; do
        bg_smcrun "$tmp/m$k.log" python3 "$tmp/many.py" "$tmp" "$mport" "m$k" 500
done
for k in 1 2 3 4; do wait_file "$tmp/m$k.last" || nok "many client $k: $(cat "$tmp/m$k.log")"; done
rss1=$(rss)
for _ in $(seq 100); do [ "$(prop FallbackCount)" = 200 ] && [ "$(prop FallbackEvicted)" = 1800 ] && break; sleep 0.05; done
count=$(prop FallbackCount); evicted=$(prop FallbackEvicted)
"$smcctl" -j connections --mode tcp >"$tmp/many.json"
if [ "$count" = 200 ] && [ "$evicted" = 1800 ] &&
   python3 - "$tmp/many.json" "$tmp" <<'PY' 2>"$tmp/err"
import json, sys
l = json.load(open(sys.argv[1]))
assert len(l) == 200 and all(e["state"] == "ESTABLISHED" for e in l), len(l)
for k in range(1, 5):
    pid, port = (int(x) for x in open("%s/m%d.last" % (sys.argv[2], k)).read().split())
    mine = [e for e in l if e["pid"] == pid]
    assert len(mine) == 50, (k, len(mine))   # its newest 50
    assert any(e["local"] == "127.0.0.1:%d" % port for e in mine), ("newest kept", k)
PY
then ok "2000 live fallbacks, bound 200: 200 rows (50 newest per client), 1800 evicted; smcd RSS $rss0 -> $rss1 KiB"
else nok "bounded: count $count evicted $evicted $(cat "$tmp/err")"; fi
[ $((rss1 - rss0)) -lt 4096 ] && ok "smcd's memory grew by $((rss1 - rss0)) KiB (< 4 MiB)" \
        || nok "smcd's memory grew by $((rss1 - rss0)) KiB"
for k in 1 2 3 4; do read -r p _ <"$tmp/m$k.last"; kill "$p"; wait "$p" 2>/dev/null; done
for _ in $(seq 100); do [ "$(prop FallbackCount)" = 0 ] && break; sleep 0.05; done
[ "$(prop FallbackCount)" = 0 ] && ok "all 4 clients killed: FallbackCount 0" || nok "after kill: $(prop FallbackCount)"
stop_smcd

exit $failed
