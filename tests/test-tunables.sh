#!/bin/bash
# The tunables that reach connections and clients, against a private dbus-daemon and a
# private smcd: set with smcctl, then seen acting on new connections made under smcrun:
#   sndbuf / rmem         ring sizes in `smcctl -j connections` (sndbuf / rmb fields)
#   busy_poll, autocork_size  the values a client runs with (getsockopt SOL_SMC
#                         SMC_PROTO_BUSY_POLL / SMC_PROTO_AUTOCORK), live for new
#                         connections, the environment overriding them
#   max_handshakes_per_uid  a burst of connects: some fall back with SMCD_DECL_HSRATE,
#                         another uid is not affected, a second later it works again
#   max_listeners_per_uid  over it a listener stays TCP (bytes checked both ways),
#                         another uid has its own count, a closed one frees a place;
#                         one over it when it comes back after a restart comes back later
#   max_conns_per_lgr, test_link_time, ueid  stored, shown, persisted (SMC-R)
# then bad values refused with nothing changed, persistence across a restart, and the
# same settings as smcd options and config file keys.
# Args: SMCD SMCCTL LIBSMCRUN SMCRUN. Skips (77) without dbus-daemon. TAP-ish output.
set -u
smcd=$1 smcctl=$2 lib=$3 smcrun=$4
command -v dbus-daemon >/dev/null || { echo "SKIP: dbus-daemon not installed"; exit 77; }

tmp=$(mktemp -d /tmp/smcd-test-tunables.XXXXXX)
chmod 755 "$tmp"  # a second uid's client must reach the control socket
rundir=$tmp/run
mkdir "$rundir"
spid= dpid=
cleanup() {
        [ -n "$spid" ] && kill "$spid" 2>/dev/null && wait "$spid" 2>/dev/null
        [ -n "$dpid" ] && kill "$dpid" 2>/dev/null
        rm -rf "$tmp"
}
trap cleanup EXIT

# shellcheck source=tests/lib-bus.sh
. "$(dirname "$0")/lib-bus.sh"
start_bus "$tmp" bus || exit 1
dpid=$BUS_PID
export SMCD_RUNTIME_DIR=$rundir SMCRUN_LIB=$lib

failed=0
ok() { echo "ok - $*"; }
nok() { echo "not ok - $*"; failed=1; }

state=$tmp/state/tunables.json
start_smcd() {
        "$smcd" -v --runtime-dir "$rundir" --state-file "$state" "$@" >"$tmp/smcd.log" 2>&1 &
        spid=$!
        for _ in $(seq 100); do "$smcctl" stats >/dev/null 2>&1 && break; sleep 0.05; done
}
stop_smcd() { kill "$spid"; wait "$spid"; local rc=$?; spid=; return $rc; }
get() { "$smcctl" tunables get "$1" 2>&1; }

# Run python3 (argv: the rest) under smcrun, with a sanitizer runtime preloaded first if
# libsmcrun.so was built with one. smcctl, run from python, gets the environment
# without LD_PRELOAD.
san=$(ldd "$lib" | awk '$1 ~ /^lib(a|ub|t|hwa)san\.so/ { print $3 }' | paste -sd:)
smcpy() {
        timeout 60 env ${san:+LD_PRELOAD="$san"} \
                ${san:+ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"} sh "$smcrun" "$@"
}

start_smcd
"$smcctl" stats >/dev/null 2>&1 || { nok "smcd did not come up: $(cat "$tmp/smcd.log")"; exit 1; }

# ---- defaults and show ----
if "$smcctl" -j tunables | python3 -c '
import json, sys
t = json.load(sys.stdin)
want = {"sndbuf": "16384", "busy_poll": "50", "autocork_size": "65536", "max_handshakes_per_uid": "0",
        "max_conns_per_lgr": "255", "test_link_time": "30", "ueid": "SMCD-USERSPACE", "short_conn_rate": "1000"}
assert {k: t[k] for k in want} == want, t' 2>"$tmp/err"
then ok "defaults of the new tunables"; else nok "defaults: $(cat "$tmp/err")"; fi

# ---- sndbuf: an RMB is the larger of its reader's SO_RCVBUF / rmem and its writer's
# SO_SNDBUF / sndbuf ----
cat >"$tmp/rings.py" <<'PY'
import json, os, socket, subprocess, sys
smcctl = sys.argv[1]
env = dict(os.environ); env.pop("LD_PRELOAD", None)
K = 1024
def opt(s, name, v):
    if v: s.setsockopt(socket.SOL_SOCKET, name, v)
# tunables to set | listener SO_SNDBUF, SO_RCVBUF | client SO_SNDBUF, SO_RCVBUF | want client rmb, server rmb
for case in sys.argv[2:]:
    sets, lopt, copt, want = case.split("|")
    if sets:
        subprocess.check_call([smcctl, "tunables", "set"] + sets.split(), env=env)
    lsnd, lrcv = (int(x) * K for x in lopt.split(","))
    csnd, crcv = (int(x) * K for x in copt.split(","))
    wc, ws = (int(x) * K for x in want.split(","))
    s = socket.socket(); opt(s, socket.SO_SNDBUF, lsnd); opt(s, socket.SO_RCVBUF, lrcv)
    s.bind(("127.0.0.1", 0)); s.listen(4)
    c = socket.socket(); opt(c, socket.SO_SNDBUF, csnd); opt(c, socket.SO_RCVBUF, crcv)
    c.connect(s.getsockname()); a, _ = s.accept()
    assert c.getsockopt(286, 0x5301) == 1, "not SMC-D: %s" % case
    l = json.loads(subprocess.check_output([smcctl, "-j", "connections"], env=env))
    cport = c.getsockname()[1]
    cl = [e for e in l if e["role"] == "client" and e["local"].endswith(":%d" % cport)]
    sv = [e for e in l if e["role"] == "server" and e["peer"].endswith(":%d" % cport)]
    assert len(cl) == 1 and len(sv) == 1, l
    cl, sv = cl[0], sv[0]
    got = (cl["rmb"], sv["rmb"])
    assert got == (wc, ws), "%s: rmb client/server %s, want %s" % (case, got, (wc, ws))
    assert cl["sndbuf"] == sv["rmb"] and sv["sndbuf"] == cl["rmb"], (cl, sv)
    # what the app sees: SO_SNDBUF is twice the ring it writes into (the peer's RMB),
    # as Linux doubles what it reports (TCP, and the kernel's SMC)
    assert c.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) == 2 * ws and \
           a.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) == 2 * wc, case
    print("%-32s listener %-8s client %-8s -> rmb client %4dK server %4dK" %
          (sets or "-", lopt, copt, wc // K, ws // K))
    a.close(); c.close(); s.close()
PY
if out=$(smcpy python3 "$tmp/rings.py" "$smcctl" \
        "sndbuf=256K|0,0|0,0|256,256" \
        "|0,0|32,0|256,128" \
        "sndbuf=16K rmem=64K|0,0|512,0|64,512" \
        "|128,0|0,16|128,64" \
        "|0,32|0,0|64,32" \
        "rmem=128K|0,0|0,0|128,128" 2>&1); then
        ok "sndbuf/rmem set ring sizes (smcctl -j connections):"; echo "$out" | sed 's/^/#   /'
else nok "sndbuf ring sizes: $out"; fi
[ "$(get sndbuf)" = 16384 ] && [ "$(get rmem)" = 131072 ] && ok "sndbuf, rmem back to 16384, 131072" \
        || nok "sndbuf $(get sndbuf) rmem $(get rmem)"

# ---- busy_poll, autocork_size: handed to both ends of each new connection ----
cat >"$tmp/tune.py" <<'PY'
import os, socket, subprocess, sys
smcctl = sys.argv[1]
env = dict(os.environ); env.pop("LD_PRELOAD", None)
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(4)
def pair():
    c = socket.create_connection(s.getsockname()); a, _ = s.accept()
    assert c.getsockopt(286, 0x5301) == 1 and a.getsockopt(286, 0x5301) == 1
    return c, a
def vals(c, a):
    return "%d/%d %d/%d" % (c.getsockopt(286, 0x5303), a.getsockopt(286, 0x5303),
                            c.getsockopt(286, 0x5304), a.getsockopt(286, 0x5304))
c1, a1 = pair()
first = vals(c1, a1)
if len(sys.argv) > 2:
    subprocess.check_call([smcctl, "tunables", "set"] + sys.argv[2:], env=env)
c2, a2 = pair()
print(first, "|", vals(c2, a2), "|", vals(c1, a1))
# not on a listener or a TCP socket: ENOTCONN
try:
    s.getsockopt(286, 0x5303); print("listener answered")
except OSError as e:
    assert e.errno == 107, e
PY
"$smcctl" tunables set busy_poll=123 autocork_size=8K 2>"$tmp/err" || nok "set busy_poll, autocork_size: $(cat "$tmp/err")"
# 128 KiB rings: autocork_size is capped at half the ring (65536)
out=$(smcpy python3 "$tmp/tune.py" "$smcctl" busy_poll=200 autocork_size=1M 2>&1)
[ "$out" = "123/123 8192/8192 | 200/200 65536/65536 | 123/123 8192/8192" ] \
        && ok "busy_poll/autocork_size reach both ends; a change applies to new connections only: $out" \
        || nok "busy_poll/autocork_size: '$out'"
out=$(SMC_BUSY_POLL_US=7 SMC_AUTOCORK=5000 smcpy python3 "$tmp/tune.py" "$smcctl" busy_poll=0 2>&1)
[ "$out" = "7/7 5000/5000 | 7/7 5000/5000 | 7/7 5000/5000" ] \
        && ok "SMC_BUSY_POLL_US / SMC_AUTOCORK override smcd's values: $out" || nok "environment override: '$out'"
out=$(smcpy python3 "$tmp/tune.py" "$smcctl" 2>&1)
[ "$out" = "0/0 65536/65536 | 0/0 65536/65536 | 0/0 65536/65536" ] \
        && ok "busy_poll=0 reaches the clients (no spinning): $out" || nok "busy_poll=0: '$out'"

# ---- max_handshakes_per_uid: a token bucket per uid ----
cat >"$tmp/burst.py" <<'PY'
import json, os, socket, struct, sys, time
d, n = sys.argv[1], int(sys.argv[2])
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(128)
def burst(k):
    modes, conns = {}, []
    for _ in range(k):
        c = socket.create_connection(s.getsockname()); conns.append(c)
        mode = c.getsockopt(286, 0x5301)
        reason = struct.unpack("I", c.getsockopt(286, 0x5302, 4))[0]
        key = "smcd" if mode == 1 else "0x%08x" % reason
        modes[key] = modes.get(key, 0) + 1
    return modes, conns
first, conns = burst(n)
open(d + "/port.tmp", "w").write("%d\n" % s.getsockname()[1]); os.rename(d + "/port.tmp", d + "/port")
while not os.path.exists(d + "/go"): time.sleep(0.02)
time.sleep(1.1)  # the bucket refills within a second
again, more = burst(1)
print(json.dumps({"burst": first, "after": again}))
for c in conns + more: c.close()
PY
cat >"$tmp/other.py" <<'PY'
import socket, struct, sys
port = int(sys.argv[1]); modes = []
for _ in range(3):
    c = socket.create_connection(("127.0.0.1", port))
    modes.append("smcd" if c.getsockopt(286, 0x5301) == 1 else
                 "0x%08x" % struct.unpack("I", c.getsockopt(286, 0x5302, 4))[0])
    c.close()
print(" ".join(modes))
PY
chmod 644 "$tmp/other.py"
fb0=$("$smcctl" -j stats | python3 -c '
import json, sys
def find(o):
    if isinstance(o, dict):
        for k, v in o.items():
            if "HSRATE" in k and isinstance(v, int): return v
            r = find(v)
            if r is not None: return r
print(find(json.load(sys.stdin)) or 0)')
"$smcctl" tunables set max_handshakes_per_uid=3 2>"$tmp/err" || nok "set max_handshakes_per_uid: $(cat "$tmp/err")"
rm -f "$tmp/port" "$tmp/go"
smcpy python3 "$tmp/burst.py" "$tmp" 12 >"$tmp/burst.out" 2>&1 &
bpid=$!
for _ in $(seq 200); do [ -s "$tmp/port" ] && break; sleep 0.05; done
port=$(cat "$tmp/port" 2>/dev/null)
if command -v setpriv >/dev/null && [ -n "$port" ]; then
        other=$(setpriv --reuid=65534 --regid=65534 --clear-groups \
                env ${san:+LD_PRELOAD="$san"} ${san:+ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"} \
                sh "$smcrun" /usr/bin/python3 "$tmp/other.py" "$port" 2>&1)
        [ "$other" = "smcd smcd smcd" ] && ok "another uid (65534) is not limited meanwhile: $other" \
                || nok "another uid during the burst: '$other'"
else
        echo "ok - SKIP second uid: setpriv not installed"
fi
touch "$tmp/go"
wait "$bpid"
if python3 - "$tmp/burst.out" <<'PY' 2>"$tmp/err"
import json, sys
r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
b = r["burst"]
# burst 3, refill 3/s: the first 3 (maybe a 4th on a slow machine) go SMC-D, the rest
# fall back with SMCD_DECL_HSRATE (0x0b020000) and nothing else
assert 3 <= b.get("smcd", 0) <= 4 and b.get("smcd", 0) + b.get("0x0b020000", 0) == 12, b
assert r["after"] == {"smcd": 1}, r
print(b)
PY
then ok "max_handshakes_per_uid=3: a burst of 12 connects: $(cat "$tmp/err" "$tmp/burst.out" | tail -1)"
else nok "handshake limit: $(cat "$tmp/err" "$tmp/burst.out")"; fi
fb1=$("$smcctl" -j stats | python3 -c '
import json, sys
def find(o):
    if isinstance(o, dict):
        for k, v in o.items():
            if "HSRATE" in k and isinstance(v, int): return v
            r = find(v)
            if r is not None: return r
print(find(json.load(sys.stdin)) or 0)')
[ $((fb1 - fb0)) -ge 8 ] && ok "stats count the HSRATE fallbacks ($fb0 -> $fb1)" || nok "HSRATE in stats: $fb0 -> $fb1"
grep -q "falls back to TCP: SMCD_DECL_HSRATE" "$tmp/smcd.log" && ok "smcd logged the HSRATE fallback" \
        || nok "no HSRATE fallback in the log"
"$smcctl" tunables set max_handshakes_per_uid=0 2>"$tmp/err" || nok "set max_handshakes_per_uid=0"

# ---- max_listeners_per_uid: SMC listeners per uid; over it a socket stays TCP ----
cat >"$tmp/listeners.py" <<'PY'
import socket, struct
def listener():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(8); return s
def mode(s):
    # a connect to it, with bytes both ways over it: "smcd" or the fallback reason
    c = socket.create_connection(s.getsockname()); a, _ = s.accept()
    c.sendall(b"ping" * 1000); got = b""
    while len(got) < 4000: got += a.recv(4000 - len(got))
    a.sendall(got[::-1]); back = b""
    while len(back) < 4000: back += c.recv(4000 - len(back))
    assert got == b"ping" * 1000 and back == got[::-1]
    m = "smcd" if c.getsockopt(286, 0x5301) == 1 else "0x%08x" % struct.unpack("I", c.getsockopt(286, 0x5302, 4))[0]
    c.close(); a.close(); return m
ls = [listener() for _ in range(3)]
out = [mode(s) for s in ls]
ls[0].close()
out.append(mode(listener()))  # one fewer: a new listener is SMC again
print(" ".join(out))
PY
chmod 644 "$tmp/listeners.py"
"$smcctl" tunables set max_listeners_per_uid=2 2>"$tmp/err" || nok "set max_listeners_per_uid: $(cat "$tmp/err")"
out=$(smcpy python3 "$tmp/listeners.py" 2>&1)
case $out in
"smcd smcd 0x"*" smcd") ok "max_listeners_per_uid=2: the third listener stays TCP, every byte right: $out" ;;
*) nok "max_listeners_per_uid=2: '$out'" ;;
esac
grep -q "SMC listeners (max_listeners_per_uid)" "$tmp/smcd.log" && ok "smcd logged the refused LISTEN" \
        || nok "no max_listeners_per_uid refusal in the log"
if command -v setpriv >/dev/null; then
        other=$(setpriv --reuid=65534 --regid=65534 --clear-groups \
                env ${san:+LD_PRELOAD="$san"} ${san:+ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"} \
                sh "$smcrun" /usr/bin/python3 "$tmp/listeners.py" 2>&1)
        case $other in
        "smcd smcd 0x"*" smcd") ok "uid 65534 has a limit of its own: $other" ;;
        *) nok "uid 65534: '$other'" ;;
        esac
fi
"$smcctl" tunables set max_listeners_per_uid=0 2>"$tmp/err" || nok "set max_listeners_per_uid=0"
out=$(smcpy python3 "$tmp/listeners.py" 2>&1)
[ "$out" = "smcd smcd smcd smcd" ] && ok "max_listeners_per_uid=0: unlimited: $out" || nok "max_listeners_per_uid=0: '$out'"
# a listener that finds the limit reached when it comes back after an smcd restart
# (another process listened first) comes back once there is room again
cat >"$tmp/lsrv.py" <<'PY'
import os, socket, sys, threading
d = sys.argv[1]
ls = socket.socket(); ls.bind(("127.0.0.1", 0)); ls.listen(16)
def serve(c):
    while True:
        b = c.recv(65536)
        if not b: break
        c.sendall(b)
    c.close()
open(d + "/lsrv.tmp", "w").write("%d\n" % ls.getsockname()[1]); os.rename(d + "/lsrv.tmp", d + "/lsrv.port")
while True:
    c, _ = ls.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
PY
cat >"$tmp/lcli.py" <<'PY'
import os, socket, struct, sys
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
d = os.urandom(100000); c.sendall(d); c.shutdown(socket.SHUT_WR); g = b""
while True:
    b = c.recv(65536)
    if not b: break
    g += b
assert g == d
print("smcd" if c.getsockopt(286, 0x5301) == 1 else "0x%08x" % struct.unpack("I", c.getsockopt(286, 0x5302, 4))[0])
PY
cat >"$tmp/lhog.py" <<'PY'
import os, socket, sys, time
d = sys.argv[1]
ls = socket.socket(); ls.bind(("127.0.0.1", 0)); ls.listen(1)
open(d + "/lhog.up", "w").close()
while not os.path.exists(d + "/lhog.release"): time.sleep(0.05)
PY
rm -f "$tmp/lsrv.port" "$tmp/lhog.up" "$tmp/lhog.release"
smcpy python3 "$tmp/lsrv.py" "$tmp" >"$tmp/lsrv.log" 2>&1 &
lsrv=$!
for _ in $(seq 200); do [ -s "$tmp/lsrv.port" ] && break; sleep 0.05; done
lport=$(cat "$tmp/lsrv.port" 2>/dev/null)
before=$(smcpy python3 "$tmp/lcli.py" "$lport" 2>&1)
"$smcctl" tunables set max_listeners_per_uid=1 2>"$tmp/err" || nok "set max_listeners_per_uid=1"
stop_smcd
start_smcd
smcpy python3 "$tmp/lhog.py" "$tmp" >/dev/null 2>&1 &
lhog=$!
for _ in $(seq 200); do [ -e "$tmp/lhog.up" ] && break; sleep 0.05; done
seq_modes=$(smcpy python3 "$tmp/lcli.py" "$lport" 2>&1)  # TCP; its accept asks: over the limit
sleep 1.1
seq_modes="$seq_modes $(smcpy python3 "$tmp/lcli.py" "$lport" 2>&1)"  # still TCP (asked again after 2 s)
touch "$tmp/lhog.release"; wait "$lhog"
for _ in 1 2 3 4; do
        sleep 1
        seq_modes="$seq_modes $(smcpy python3 "$tmp/lcli.py" "$lport" 2>&1)"
done
kill "$lsrv"; wait "$lsrv" 2>/dev/null
case "$before | $seq_modes" in
"smcd | 0x"*" 0x"*" smcd") ok "a listener over the limit after an smcd restart comes back once there is room: $before | $seq_modes" ;;
*) nok "listener over the limit after a restart: '$before | $seq_modes'" ;;
esac
"$smcctl" tunables set max_listeners_per_uid=1024 2>"$tmp/err" || nok "set max_listeners_per_uid=1024"

# ---- SMC-R ones: stored, shown, persisted ----
"$smcctl" tunables set max_conns_per_lgr=16 test_link_time=0 2>"$tmp/err" && [ "$(get max_conns_per_lgr)" = 16 ] &&
        [ "$(get test_link_time)" = 0 ] && ok "max_conns_per_lgr=16 test_link_time=0" \
        || nok "SMC-R tunables: $(cat "$tmp/err")"
"$smcctl" set ueid="smcd-userspace, Tenant.A-1" 2>"$tmp/err" && [ "$(get ueid)" = SMCD-USERSPACE,TENANT.A-1 ] &&
        grep -q "Tunable ueid set to \"SMCD-USERSPACE,TENANT.A-1\"" "$tmp/smcd.log" &&
        ok "ueid: two User EIDs, upper-cased: $(get ueid)" || nok "ueid: $(cat "$tmp/err") $(get ueid)"

# ---- bad values: refused, non-zero exit, nothing changed ----
"$smcctl" tunables set sndbuf=100K busy_poll=9 autocork_size=4K max_handshakes_per_uid=1000 2>"$tmp/err" \
        || nok "set several: $(cat "$tmp/err")"
before=$("$smcctl" -j tunables); cp "$state" "$tmp/state.before"
bad() {
        local what=$1 msg=$2; shift 2
        "$smcctl" tunables set "$@" >/dev/null 2>"$tmp/err"; rc=$?
        if [ $rc -ne 0 ] && grep -q -- "$msg" "$tmp/err" && [ "$("$smcctl" -j tunables)" = "$before" ] &&
           cmp -s "$state" "$tmp/state.before"; then ok "$what refused (exit $rc: $(cat "$tmp/err")), nothing changed"
        else nok "$what: exit $rc: $(cat "$tmp/err"); now $("$smcctl" -j tunables)"; fi
}
bad "sndbuf too big" 'sndbuf: expected bytes 16K..1M' sndbuf=2M
bad "sndbuf too small" 'sndbuf: expected bytes 16K..1M' sndbuf=8K
bad "sndbuf not a size" 'sndbuf: expected bytes 16K..1M' sndbuf=big
bad "busy_poll too big" 'busy_poll: expected microseconds 0..10000' busy_poll=10001
bad "busy_poll negative" 'busy_poll: expected microseconds' busy_poll=-1
bad "autocork_size 0" 'autocork_size: expected bytes 1K..1M' autocork_size=0
bad "autocork_size too big" 'autocork_size: expected bytes 1K..1M' autocork_size=2M
bad "max_handshakes_per_uid too big" 'max_handshakes_per_uid: expected handshakes per second' max_handshakes_per_uid=1000001
bad "max_handshakes_per_uid not a number" 'max_handshakes_per_uid: expected' max_handshakes_per_uid=fast
bad "max_conns_per_lgr 15" 'max_conns_per_lgr: expected a number 16..255' max_conns_per_lgr=15
bad "max_conns_per_lgr 256" 'max_conns_per_lgr: expected a number 16..255' max_conns_per_lgr=256
bad "test_link_time too big" 'test_link_time: expected seconds 0..3600' test_link_time=3601
bad "short_conn_rate too big" 'short_conn_rate: expected connections per second 0..10000000' short_conn_rate=10000001
bad "short_conn_rate not a number" 'short_conn_rate: expected connections per second' short_conn_rate=fast
bad "test_link_time with unit" 'test_link_time: expected seconds' test_link_time=30s
bad "ueid with a blank inside" 'ueid: bad User EID "A B"' "ueid=A B"
bad "ueid starting with a dot" 'ueid: bad User EID ".X"' ueid=.X
bad "ueid of 33 characters" 'ueid: bad User EID' ueid=ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456
bad "five ueids" 'ueid: at most 4 User EIDs' ueid=A,B,C,D,E
bad "ueid of blanks only" 'ueid: bad User EID ""' "ueid=   "
bad "a ueid twice" 'ueid: User EID "A" given twice' ueid=a,A
bad "a good one then a bad one (rolled back)" 'busy_poll: expected' sndbuf=1M busy_poll=x
if command -v setpriv >/dev/null; then
        setpriv --reuid=65534 --regid=65534 --clear-groups "$smcctl" tunables set sndbuf=32K >/dev/null 2>"$tmp/err"; rc=$?
        [ $rc -ne 0 ] && grep -q "Only root" "$tmp/err" && [ "$(get sndbuf)" = 131072 ] && cmp -s "$state" "$tmp/state.before" \
                && ok "unprivileged set sndbuf refused: $(cat "$tmp/err")" || nok "unprivileged set: exit $rc $(cat "$tmp/err")"
fi
python3 -c '
import json, sys
t = json.load(open(sys.argv[1]))
assert len(t) == 17 and t["ueid"] == "SMCD-USERSPACE,TENANT.A-1" and t["sndbuf"] == "131072" and t["busy_poll"] == "9" and t["autocork_size"] == "4096" \
   and t["max_handshakes_per_uid"] == "1000" and t["max_conns_per_lgr"] == "16" and t["test_link_time"] == "0", t' \
        "$state" 2>"$tmp/err" && ok "state file holds the new tunables: $(tr -d ' \n' <"$state")" \
        || nok "state file: $(cat "$tmp/err")"

# ---- persisted across a restart; the state file wins over the options ----
stop_smcd && ok "smcd exits cleanly" || nok "smcd exit"
start_smcd --sndbuf 16K --busy-poll 1 --autocork-size 64K --max-handshakes-per-uid 0 --max-conns-per-lgr 255 \
        --test-link-time 30
out=$("$smcctl" -j tunables)
[ "$out" = "$before" ] && ok "after a restart: the state file wins over the options" || nok "after restart: $out (want $before)"
out=$(smcpy python3 "$tmp/tune.py" "$smcctl" 2>&1)
[ "$out" = "9/9 4096/4096 | 9/9 4096/4096 | 9/9 4096/4096" ] \
        && ok "restored busy_poll/autocork_size reach clients: $out" || nok "after restart: '$out'"
out=$(smcpy python3 "$tmp/rings.py" "$smcctl" "|0,0|0,0|128,128" 2>&1) \
        && ok "restored sndbuf=128K sizes rings: $out" || nok "restored sndbuf: $out"
stop_smcd

# ---- the same settings as options and config file keys ----
rm -f "$state"
cat >"$tmp/smcd.conf" <<CONF
# tunables as config keys
sndbuf = 32K
busy-poll = 11
test-link-time = 60
ueid = ""
CONF
start_smcd --config "$tmp/smcd.conf" --autocork-size 2K --max-handshakes-per-uid 50 --max-conns-per-lgr 100 --rmem 16K
if "$smcctl" -j tunables | python3 -c '
import json, sys
t = json.load(sys.stdin)
want = {"sndbuf": "32768", "busy_poll": "11", "test_link_time": "60", "autocork_size": "2048", "ueid": "",
        "max_handshakes_per_uid": "50", "max_conns_per_lgr": "100", "rmem": "16384"}
assert {k: t[k] for k in want} == want, t' 2>"$tmp/err"
then ok "options and config file keys set the tunables"; else nok "options: $(cat "$tmp/err")"; fi
[ -e "$state" ] && nok "a state file was written without a set" || ok "options alone write no state file"
stop_smcd
badopt() {
        local what=$1 msg=$2; shift 2
        "$smcd" --no-bus --runtime-dir "$tmp/never" --state-file "$tmp/never.json" "$@" >/dev/null 2>"$tmp/err"; rc=$?
        [ $rc -eq 2 ] && grep -q -- "$msg" "$tmp/err" && [ ! -e "$tmp/never" ] \
                && ok "$what: exit 2: $(head -1 "$tmp/err")" || nok "$what: exit $rc: $(cat "$tmp/err")"
}
badopt "--sndbuf 2M" 'command line: sndbuf: expected bytes 16K..1M' --sndbuf 2M
badopt "--busy-poll 10001" 'busy-poll: expected microseconds 0..10000' --busy-poll 10001
badopt "--autocork-size 512" 'autocork-size: expected bytes 1K..1M' --autocork-size 512
badopt "--max-handshakes-per-uid -5" 'max-handshakes-per-uid: expected' --max-handshakes-per-uid -5
badopt "--max-conns-per-lgr 8" 'max-conns-per-lgr: expected a number 16..255' --max-conns-per-lgr 8
badopt "--ueid -X" 'ueid: bad User EID "-X"' --ueid -X
badopt "--test-link-time 1h" 'test-link-time: expected seconds 0..3600' --test-link-time 1h
badopt "--max-conns-per-uid x (message kept)" 'max-conns-per-uid: expected a number' --max-conns-per-uid x
badopt "--busy_poll (options use dashes)" 'unrecognized option' --busy_poll 5
printf 'sndbuf = 64K\nbusy-poll = 20000\n' >"$tmp/bad.conf"
badopt "config file busy-poll = 20000" "$tmp/bad.conf:2: busy-poll: expected microseconds" --config "$tmp/bad.conf"
printf 'busy_poll = 5\n' >"$tmp/bad2.conf"
badopt "config file key with '_'" "$tmp/bad2.conf:1: unknown key: busy_poll" --config "$tmp/bad2.conf"
"$smcd" --help | grep -q -- '--max-handshakes-per-uid N' && ok "--help lists the tunables" || nok "--help"

# ---- this library with an smcd of protocol version 1 (ctl-proto.h, Versions): a fake
# one that speaks only version 1 and answers every CONNECT with a fallback ----
mkdir "$tmp/v1"
cat >"$tmp/fake-v1.py" <<'PY'
import array, os, socket, struct, sys
HDR, MAGIC = struct.Struct("<IHHII"), 0x64434d53
srv = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET); srv.bind(sys.argv[1] + "/smcd.sock"); srv.listen(4)
open(sys.argv[1] + "/ready", "w").close()
c, _ = srv.accept(); seen = []
while True:
    data, anc, _, _ = c.recvmsg(256, socket.CMSG_SPACE(16 * 4))
    nfd = 0
    for lvl, typ, d in anc:
        fds = array.array("i"); fds.frombytes(d[:len(d) - len(d) % 4])
        nfd += len(fds)
        for fd in fds: os.close(fd)
    if not data: break
    magic, ver, mtype, ln, seq = HDR.unpack_from(data)
    seen.append("%d/v%d/%d/%dfd" % (mtype, ver, len(data), nfd))
    if mtype == 1:    # HELLO -> HELLO_REPLY, version 1
        seen[-1] += "/%d..%d" % struct.unpack_from("<II", data, 16)
        c.send(HDR.pack(MAGIC, 1, 2, 32, seq) + struct.pack("<IIQ", 1, 0, 7))
    elif mtype == 3:  # LISTEN -> ERROR -EOPNOTSUPP
        c.send(HDR.pack(MAGIC, 1, 11, 120, seq) + struct.pack("<iI", -95, 0) + b"v1 fake".ljust(96, b"\0"))
    elif mtype == 6:  # CONNECT -> CONNECT_REPLY (v1: 112 bytes), TCP, SMC_CLC_DECL_PEERNOSMC
        c.send(HDR.pack(MAGIC, 1, 7, 112, seq) + struct.pack("<QII", 0, 0, 0x03010000) + bytes(80))
print(" ".join(seen))
PY
python3 "$tmp/fake-v1.py" "$tmp/v1" >"$tmp/fake.out" 2>&1 &
fpid=$!
for _ in $(seq 100); do [ -e "$tmp/v1/ready" ] && break; sleep 0.05; done
out=$(SMCD_RUNTIME_DIR=$tmp/v1 smcpy python3 - <<'PY' 2>&1
import socket, struct
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1)
c = socket.create_connection(s.getsockname()); a, _ = s.accept()
c.sendall(b"v1"); assert a.recv(2) == b"v1"
print(c.getsockopt(286, 0x5301), "0x%08x" % struct.unpack("I", c.getsockopt(286, 0x5302, 4))[0])
PY
)
wait "$fpid"
seen=$(cat "$tmp/fake.out")
# HELLO sent as version 1 offering 1..6 (SMC_CTL_VERSION); LISTEN (48 bytes, its fd) and
# CONNECT (72) in version 1, the CONNECT without the TCP socket that version 3 adds (the
# library trims the fds to the negotiated version); the reply's reason (not NOSMCDDEV:
# the handshake worked) reaches the socket
[ "$out" = "2 0x03010000" ] && [ "$seen" = "1/v1/32/0fd/1..6 3/v1/48/1fd 6/v1/72/0fd" ] \
        && ok "with a version-1 smcd: requests in version 1 ($seen), fallback reason $out" \
        || nok "version-1 smcd: client '$out', smcd saw '$seen'"

exit $failed
