#!/bin/bash
# smcd's D-Bus API and smcctl against a private dbus-daemon and a private smcd.
# Args: SMCD SMCCTL LIBSMCRUN SMCRUN POLICY. Skips (77) without dbus-daemon. TAP-ish
# output. Two buses: a permissive one (smcd's own checks), then one with the system
# bus's default policy plus units/org.smcd.smcd1.conf (the policy file itself).
set -u
smcd=$1 smcctl=$2 lib=$3 smcrun=$4 policy=$5
command -v dbus-daemon >/dev/null || { echo "SKIP: dbus-daemon not installed"; exit 77; }

tmp=$(mktemp -d /tmp/smcd-test-dbus.XXXXXX)
chmod 755 "$tmp"  # the unprivileged caller must reach the bus socket
rundir=$tmp/run
mkdir "$rundir"
spid= dpid= spid2= dpid2= hpid=
cleanup() {
        [ -n "$hpid" ] && touch "$tmp/go" && kill "$hpid" 2>/dev/null && wait "$hpid" 2>/dev/null
        [ -n "$spid" ] && kill "$spid" 2>/dev/null && wait "$spid" 2>/dev/null
        [ -n "$spid2" ] && kill "$spid2" 2>/dev/null && wait "$spid2" 2>/dev/null
        [ -n "$dpid" ] && kill "$dpid" 2>/dev/null
        [ -n "$dpid2" ] && kill "$dpid2" 2>/dev/null
        rm -rf "$tmp"
}
trap cleanup EXIT

# A minimal bus that lets everybody connect, own and call everything: the real policy
# (units/org.smcd.smcd1.conf) is for the system bus; here smcd itself is under test.
# shellcheck source=tests/lib-bus.sh
. "$(dirname "$0")/lib-bus.sh"
start_bus "$tmp" bus || exit 1
dpid=$BUS_PID

failed=0
ok() { echo "ok - $*"; }
nok() { echo "not ok - $*"; failed=1; }

export SMCD_RUNTIME_DIR=$rundir SMCRUN_LIB=$lib
state=$tmp/state/tunables.json  # never the host's /var/lib/smcd
"$smcd" -v --runtime-dir "$rundir" --state-file "$state" >"$tmp/smcd.log" 2>&1 &
spid=$!
# ready on the bus: the name has an owner
for _ in $(seq 100); do "$smcctl" stats >/dev/null 2>&1 && break; sleep 0.05; done

if "$smcctl" stats >"$tmp/out" 2>&1; then ok "smcctl stats answers"; else nok "smcctl stats: $(cat "$tmp/out")"; cat "$tmp/smcd.log"; exit 1; fi

# one real SMC-D connection through smcrun (python3 client and server in one process)
san=$(ldd "$lib" | awk '$1 ~ /^lib(a|ub|t|hwa)san\.so/ { print $3 }' | paste -sd:)
if [ -n "$san" ]; then
        export LD_PRELOAD="$san${LD_PRELOAD:+:$LD_PRELOAD}"
        export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
fi
if out=$(timeout 30 sh "$smcrun" python3 - <<'PY' 2>&1
import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1)
c = socket.create_connection(s.getsockname()); a, _ = s.accept()
c.sendall(b"x" * 1000); got = 0
while got < 1000: got += len(a.recv(65536))
a.close(); c.close(); s.close(); print("echo ok")
PY
); then ok "connection under smcrun: $out"; else nok "connection under smcrun: $out"; fi

# connections: a connection held open under smcrun (one python3 process, both ends)
"$smcctl" -j connections >"$tmp/out" 2>&1
[ "$(cat "$tmp/out")" = "[]" ] && ok "connections: none before" || nok "connections before: $(cat "$tmp/out")"
timeout 60 sh "$smcrun" python3 - "$tmp" <<'PY' >"$tmp/hold.log" 2>&1 &
import os, socket, sys, time
d = sys.argv[1]
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1)
c = socket.create_connection(s.getsockname()); a, _ = s.accept()
c.sendall(b"x" * 1000); got = 0
while got < 1000: got += len(a.recv(65536))
a.sendall(b"y" * 10); got = 0
while got < 10: got += len(c.recv(65536))
open(d + "/ports.tmp", "w").write("%d %d\n" % (s.getsockname()[1], c.getsockname()[1]))
os.rename(d + "/ports.tmp", d + "/ports")
while not os.path.exists(d + "/go"): time.sleep(0.02)
a.close(); c.close(); s.close(); print("hold ok")
PY
hpid=$!
for _ in $(seq 300); do [ -s "$tmp/ports" ] && break; sleep 0.05; done
unset LD_PRELOAD
read -r sport cport <"$tmp/ports"
if "$smcctl" -j connections >"$tmp/json" 2>"$tmp/err" &&
   python3 - "$tmp/json" "$sport" "$cport" "$(id -u)" "$hpid" <<'PY' 2>"$tmp/err"
import json, sys
l = json.load(open(sys.argv[1])); sport, cport, uid = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
assert len(l) == 2, l
keys = {"id", "role", "state", "local", "peer", "mode", "fallback_reason", "fallback_code", "sndbuf", "rmb",
        "bytes_tx", "bytes_rx", "msgs_tx", "msgs_rx", "pid", "uid"}
for e in l: assert set(e) == keys, e
cl = [e for e in l if e["role"] == "client"]; sv = [e for e in l if e["role"] == "server"]
assert len(cl) == 1 and len(sv) == 1, l
cl, sv = cl[0], sv[0]
assert sv["local"] == "127.0.0.1:%d" % sport and cl["peer"] == "127.0.0.1:%d" % sport, l
assert cl["local"] == "127.0.0.1:%d" % cport and sv["peer"] == "127.0.0.1:%d" % cport, l
for e in l:
    assert e["uid"] == uid and e["pid"] > 0 and e["mode"] == "SMCD" and e["state"] == "open", e
    assert e["fallback_reason"] is None and e["fallback_code"] is None, e
    assert len(e["id"]) == 16 and int(e["id"], 16) != 0, e
assert cl["pid"] == sv["pid"], l
assert cl["sndbuf"] == sv["rmb"] and cl["rmb"] == sv["sndbuf"] and cl["rmb"] >= 16384, l
assert cl["bytes_tx"] == 1000 and sv["bytes_rx"] == 1000 and sv["bytes_tx"] == 10 and cl["bytes_rx"] == 10, l
PY
then ok "smcctl -j connections: 2 endpoints, ports $sport/$cport, uid $(id -u), bytes"
else nok "smcctl -j connections: $(cat "$tmp/err") $(cat "$tmp/json") $(cat "$tmp/hold.log")"; fi
n=$("$smcctl" -j connections --port "$sport" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')
m=$("$smcctl" -j connections --port=1 | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')
t=$("$smcctl" -j connections --mode tcp | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')
[ "$n" = 2 ] && [ "$m" = 0 ] && [ "$t" = 0 ] && ok "connections --port / --mode filter ($n, $m, $t)" \
        || nok "connections filters: --port $sport: $n, --port=1: $m, --mode tcp: $t"
"$smcctl" connections --port "$cport" >"$tmp/out" 2>&1
if head -1 "$tmp/out" | grep -q '^ID  *ROLE  *STATE  *LOCAL  *PEER  *MODE  *REASON  *SNDBUF  *RMB  *TX  *RX  *PID  *UID$' &&
   [ "$(wc -l <"$tmp/out")" = 3 ] && grep -q " 127.0.0.1:$cport " "$tmp/out" && grep -q "server" "$tmp/out"; then
        ok "connections text: header and 2 rows"
else nok "connections text: $(cat "$tmp/out")"; fi
# aligned: the header's columns start where the values do (left-aligned ROLE column)
c1=$(head -1 "$tmp/out" | awk '{ print index($0, "ROLE") }'); c2=$(sed -n 2p "$tmp/out" | awk '{ print index($0, $2) }')
[ "$c1" = "$c2" ] && ok "connections text aligned" || nok "connections text not aligned ($c1 vs $c2)"
"$smcctl" conn sh --mode smcd >/dev/null 2>&1 && ok "connections prefixes" || nok "connections prefixes"
"$smcctl" connections --bogus >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && grep -q 'unknown filter' "$tmp/err" && ok "unknown filter: exit 2, $(cat "$tmp/err")" \
        || nok "unknown filter: exit $rc $(cat "$tmp/err")"
"$smcctl" connections --mode udp >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && ok "unknown mode: exit 2" || nok "unknown mode: exit $rc"
"$smcctl" connections --port 70000 >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && ok "bad port: exit 2" || nok "bad port: exit $rc"
# a filter given twice (helper 121: the last one won, silently)
for args in "--port 80 --port 81" "--mode smcd --mode tcp"; do
        # shellcheck disable=SC2086
        "$smcctl" connections $args >/dev/null 2>"$tmp/err"; rc=$?
        [ $rc -eq 2 ] && grep -q "given twice" "$tmp/err" && ok "connections $args: exit 2, $(cat "$tmp/err")" ||
                nok "connections $args: exit $rc $(cat "$tmp/err")"
done
# output that cannot be written (a full disk, a closed standard output): exit 1 with a
# message, for smcctl's tables and JSON and for smcd's --help (helper 110: exit 0, silent)
for args in "stats" "-j stats" "tunables" "--version"; do
        "$smcctl" $args >/dev/full 2>"$tmp/err"; rc=$?
        [ $rc -eq 1 ] && grep -q 'cannot write the output' "$tmp/err" && ok "smcctl $args >/dev/full: exit 1" \
                || nok "smcctl $args >/dev/full: exit $rc $(cat "$tmp/err")"
done
"$smcctl" stats >&- 2>"$tmp/err"; rc=$?
[ $rc -eq 1 ] && grep -q 'cannot write the output' "$tmp/err" && ok "smcctl stats, standard output closed: exit 1" \
        || nok "smcctl stats >&-: exit $rc $(cat "$tmp/err")"
"$smcd" --help >/dev/full 2>"$tmp/err"; rc=$?
[ $rc -eq 1 ] && grep -q 'cannot write the output' "$tmp/err" && ok "smcd --help >/dev/full: exit 1" \
        || nok "smcd --help >/dev/full: exit $rc $(cat "$tmp/err")"
if command -v setpriv >/dev/null; then
        n=$(setpriv --reuid=65534 --regid=65534 --clear-groups "$smcctl" -j connections |
            python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')
        [ "$n" = 2 ] && ok "unprivileged connections" || nok "unprivileged connections: '$n'"
fi
touch "$tmp/go"
wait "$hpid"; rc=$?; hpid=
[ $rc -eq 0 ] && ok "held connection closed: $(cat "$tmp/hold.log")" || nok "held connection: exit $rc $(cat "$tmp/hold.log")"
for _ in $(seq 100); do [ "$("$smcctl" -j connections)" = "[]" ] && break; sleep 0.05; done
out=$("$smcctl" -j connections)
[ "$out" = "[]" ] && ok "connections: empty after close" || nok "connections after close: $out"
"$smcctl" connections >"$tmp/out"
[ "$(wc -l <"$tmp/out")" = 1 ] && ok "connections text: header only when empty" || nok "connections text empty: $(cat "$tmp/out")"

"$smcctl" stats >"$tmp/out" 2>&1
# the MODE table (smcctl-stats.c): row conns_client, column SMC-D
n=$(awk '$1 == "conns_client" { print $2; exit }' "$tmp/out")
if [ "${n:-0}" -ge 1 ]; then ok "stats text: conns_client (SMC-D) $n"; else nok "stats text: conns_client '${n:-}'"; cat "$tmp/out"; fi
# aligned: in the MODE table every SMC-D value ends in the header's SMC-D column
cols=$(awk 'NF == 0 { exit } { print index($0, $2) + length($2) }' "$tmp/out" | sort -u | wc -l)
[ "$cols" -eq 1 ] && ok "stats text aligned" || nok "stats text not aligned ($cols value columns)"

if "$smcctl" -j stats | python3 -c 'import json, sys; s = json.load(sys.stdin); assert s["smcd"]["conns_client"] >= 1 and "pool" in s' 2>"$tmp/err"
then ok "smcctl -j stats is JSON, conns_client >= 1"; else nok "smcctl -j stats: $(cat "$tmp/err")"; fi
if "$smcctl" -j -p stats | python3 -c 'import json, sys; t = sys.stdin.read(); json.loads(t); assert "\n  " in t' 2>"$tmp/err"
then ok "smcctl -j -p stats is indented JSON"; else nok "smcctl -j -p stats: $(cat "$tmp/err")"; fi
# text and JSON agree on the MODE table (tests/test-stats.sh compares every table)
"$smcctl" -j stats >"$tmp/json"; "$smcctl" stats >"$tmp/out"
if python3 - "$tmp/json" "$tmp/out" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
rows = [l.split() for l in open(sys.argv[2]).read().split("\n\n")[0].splitlines()[1:]]
smcr_own = ["cdc_sends", "llc_sends", "rdma_writes", "link_groups", "link_groups_total", "links_failed", "links_added", "failovers", "handshakes_ok", "handshakes_declined", "handshakes_failed", "decline_sent", "decline_rcvd"]  # the SMCR table's
assert rows and [r[0] for r in rows] == [k for k in j["smcr"] if k not in smcr_own], rows
bad = [r for r in rows if r[1] != str(j["smcd"][r[0]]) or r[2] != str(j["smcr"][r[0]])]
assert not bad, bad
PY
then ok "text and JSON agree"; else nok "text and JSON differ"; fi

"$smcctl" st >/dev/null 2>&1 && ok "prefix 'st' works" || nok "prefix 'st' failed"
"$smcctl" stats sh >/dev/null 2>&1 && ok "command prefix 'sh' works" || nok "command prefix 'sh' failed"
"$smcctl" bogus >/dev/null 2>"$tmp/err"; rc=$?
if [ $rc -ne 0 ] && grep -q 'unknown object "bogus"' "$tmp/err"; then ok "unknown object: exit $rc, $(cat "$tmp/err")"; else nok "unknown object: exit $rc"; fi
"$smcctl" stats frob >/dev/null 2>"$tmp/err"; rc=$?
if [ $rc -ne 0 ] && grep -q 'unknown command "frob"' "$tmp/err"; then ok "unknown command: exit $rc"; else nok "unknown command: exit $rc"; fi
"$smcctl" --bogus-option stats >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] && ok "bad option: exit 2" || nok "bad option: exit $rc"
"$smcctl" >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] && ok "no object: exit 2" || nok "no object: exit $rc"
# without a bus: arguments are checked first (a usage error: 2), then the bus (1)
out=""
for a in "set rmem" "connections --port abc" "policy del x"; do
        # shellcheck disable=SC2086 # (the words of $a are the arguments)
        DBUS_SYSTEM_BUS_ADDRESS=unix:path=/nonexistent "$smcctl" $a >/dev/null 2>"$tmp/err"; rc=$?
        [ $rc -eq 2 ] || out="$out smcctl $a: exit $rc ($(cat "$tmp/err"));"
done
DBUS_SYSTEM_BUS_ADDRESS=unix:path=/nonexistent "$smcctl" stats >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 1 ] && grep -q "cannot connect to the system bus" "$tmp/err" || out="$out smcctl stats: exit $rc ($(cat "$tmp/err"));"
[ -z "$out" ] && ok "no bus: bad arguments exit 2 before the bus is looked at, stats exits 1" || nok "no bus:$out"

# an unprivileged caller may read but not reset
if command -v setpriv >/dev/null; then
        setpriv --reuid=65534 --regid=65534 --clear-groups "$smcctl" stats >/dev/null 2>"$tmp/err" \
                && ok "unprivileged stats show" || nok "unprivileged stats show: $(cat "$tmp/err")"
        setpriv --reuid=65534 --regid=65534 --clear-groups "$smcctl" stats reset >/dev/null 2>"$tmp/err"; rc=$?
        n=$("$smcctl" -j stats | python3 -c 'import json,sys; print(json.load(sys.stdin)["smcd"]["conns_client"])')
        if [ $rc -ne 0 ] && grep -q "Only root" "$tmp/err" && [ "$n" -ge 1 ]; then
                ok "unprivileged reset refused (exit $rc: $(cat "$tmp/err")), counters kept"
        else nok "unprivileged reset: exit $rc, conns_client $n: $(cat "$tmp/err")"; fi
        if command -v busctl >/dev/null; then
                out=$(setpriv --reuid=65534 --regid=65534 --clear-groups busctl --address="$DBUS_SYSTEM_BUS_ADDRESS" \
                      call org.smcd.smcd1 /org/smcd/smcd1/stats org.smcd.smcd1.Stats Reset 2>&1)
                echo "$out" | grep -q "Only root" && ok "busctl call refused: $out" || nok "busctl call: $out"
        fi
        if command -v dbus-send >/dev/null; then
                out=$(setpriv --reuid=65534 --regid=65534 --clear-groups dbus-send --system --print-reply \
                      --dest=org.smcd.smcd1 /org/smcd/smcd1/stats org.smcd.smcd1.Stats.Reset 2>&1)
                echo "$out" | grep -q "^Error org.smcd.smcd1.Error.AccessDenied:" && ok "named error: $out" \
                        || nok "named error: $out"
        fi
else
        echo "ok - SKIP unprivileged checks: setpriv not installed"
fi

"$smcctl" stats reset 2>"$tmp/err" && ok "stats reset" || nok "stats reset: $(cat "$tmp/err")"
n=$("$smcctl" stats | awk '$1 == "conns_client" { print $2; exit }')
[ "$n" = 0 ] && ok "conns_client 0 after reset" || nok "conns_client '$n' after reset"

if command -v busctl >/dev/null; then
        out=$(busctl --address="$DBUS_SYSTEM_BUS_ADDRESS" introspect org.smcd.smcd1 /org/smcd/smcd1 2>&1)
        if echo "$out" | grep -q '^org.smcd.smcd1.Manager' && echo "$out" | grep -q '\.SetTunable' &&
           echo "$out" | grep -q '\.Version'; then
                ok "busctl introspect shows org.smcd.smcd1.Manager"
        else nok "busctl introspect: $out"; fi
        out=$(busctl --address="$DBUS_SYSTEM_BUS_ADDRESS" introspect org.smcd.smcd1 /org/smcd/smcd1/stats 2>&1)
        echo "$out" | grep -q '^org.smcd.smcd1.Stats' && echo "$out" | grep -q '\.Get ' && echo "$out" | grep -q '\.Reset ' \
                && ok "busctl introspect shows org.smcd.smcd1.Stats" || nok "introspect stats: $out"
        out=$(busctl --address="$DBUS_SYSTEM_BUS_ADDRESS" introspect org.smcd.smcd1 /org/smcd/smcd1/connections 2>&1)
        echo "$out" | grep -q '^org.smcd.smcd1.Connections' && echo "$out" | grep -q '\.List ' && echo "$out" | grep -q '\.Count ' \
                && ok "busctl introspect shows org.smcd.smcd1.Connections" || nok "introspect connections: $out"
        out=$(busctl --address="$DBUS_SYSTEM_BUS_ADDRESS" tree org.smcd.smcd1 2>&1)
        echo "$out" | grep -q '/org/smcd/smcd1/stats' && echo "$out" | grep -q '/org/smcd/smcd1/connections' \
                && ok "busctl tree lists the objects" || nok "busctl tree: $out"
        v=$(busctl --address="$DBUS_SYSTEM_BUS_ADDRESS" get-property org.smcd.smcd1 /org/smcd/smcd1 org.smcd.smcd1.Manager Version)
        [[ "$v" == s\ \"*\" ]] && ok "Version property: $v" || nok "Version property: $v"
else
        echo "ok - SKIP busctl checks: busctl not installed"
fi

# ---- tunables ----
keys="autocork_size buf_clear busy_poll cq_poll inline max_buf_per_uid max_clients_per_uid max_conns_per_lgr max_conns_per_uid"
keys="$keys max_handshakes_per_uid max_links_per_lgr max_listeners_per_uid rmem short_conn_rate sndbuf test_link_time ueid"  # the new ones: test-tunables.sh
"$smcctl" tunables >"$tmp/out" 2>&1
[ "$(awk '{ print $1 }' "$tmp/out" | paste -sd' ')" = "$keys" ] && ok "tunables show lists every key" \
        || nok "tunables show: $(cat "$tmp/out")"
if "$smcctl" -j tunables show | python3 -c '
import json, sys
t = json.load(sys.stdin)
assert t == {"buf_clear": "release", "cq_poll": "event", "inline": "auto", "max_buf_per_uid": "0", "max_clients_per_uid": "256",
             "max_conns_per_uid": "0", "rmem": "131072", "autocork_size": "65536", "busy_poll": "50",
             "max_conns_per_lgr": "255", "max_handshakes_per_uid": "0", "max_links_per_lgr": "2", "max_listeners_per_uid": "1024", "sndbuf": "16384", "test_link_time": "30",
             "short_conn_rate": "1000", "ueid": "SMCD-USERSPACE"}, t' 2>"$tmp/err"
then ok "smcctl -j tunables: the defaults"; else nok "smcctl -j tunables: $(cat "$tmp/err")"; fi
[ "$("$smcctl" tunables get buf_clear)" = release ] && ok "tunables get buf_clear" || nok "tunables get buf_clear"
[ "$("$smcctl" -j tun get rmem)" = '{"rmem":"131072"}' ] && ok "tunables get -j, prefix" || nok "tunables get -j: $("$smcctl" -j tun get rmem)"
[ -e "$state" ] && nok "state file written before any set" || ok "no state file before a set"
if "$smcctl" tunables set buf_clear=create 2>"$tmp/err" &&
   [ "$("$smcctl" tunables get buf_clear)" = create ] &&
   [ "$("$smcctl" -j stats | python3 -c 'import json,sys; print(json.load(sys.stdin)["pool"]["buf_clear"])')" = create ] &&
   [ "$(busctl --address="$DBUS_SYSTEM_BUS_ADDRESS" call org.smcd.smcd1 /org/smcd/smcd1 org.smcd.smcd1.Manager GetTunable s buf_clear)" = 's "create"' ]
then ok "set buf_clear=create: get, GetTunable and stats pool.buf_clear agree"
else nok "set buf_clear=create: $(cat "$tmp/err")"; fi
# stats.json (SIGUSR1) has the same keys as Stats.Get, pool.buf_clear too (helper 110:
# it had no buf_clear)
rm -f "$rundir/stats.json"
kill -USR1 "$spid"
for _ in $(seq 100); do [ -s "$rundir/stats.json" ] && break; sleep 0.05; done
"$smcctl" -j stats >"$tmp/get.json"
if python3 - "$rundir/stats.json" "$tmp/get.json" >"$tmp/err" 2>&1 <<'PY'
import json, sys
f, g = (json.load(open(x)) for x in sys.argv[1:3])
def keys(d, p=""):
    return {p + k for k in d} | {x for k, v in d.items() if isinstance(v, dict) for x in keys(v, p + k + ".")}
assert keys(f) == keys(g), keys(f) ^ keys(g)
assert f["pool"]["buf_clear"] == "create", f["pool"]
PY
then ok "stats.json: the keys of Stats.Get, pool.buf_clear create"
else nok "stats.json against Stats.Get: $(tr '\n' ' ' <"$tmp/err")"; fi
grep -q "Tunable buf_clear set to \"create\"" "$tmp/smcd.log" && ok "smcd logged the change" || nok "no log line for the set"
"$smcctl" set inline=off 2>"$tmp/err" && [ "$("$smcctl" get inline)" = off ] && [ "$("$smcctl" tunables get inline)" = off ] \
        && ok "smcctl set inline=off / smcctl get inline (short forms)" || nok "short set/get: $(cat "$tmp/err")"
n0=$(grep -c "Tunable rmem set to" "$tmp/smcd.log")
"$smcctl" set rmem=32K bogus=1 2>"$tmp/err"; rc=$?
[ $rc -ne 0 ] && grep -q "nothing was changed" "$tmp/err" && [ "$(grep -c "Tunable rmem set to" "$tmp/smcd.log")" = "$n0" ] \
        && ok "a multi-key set with a bad key applies nothing, not even for a moment: $(cat "$tmp/err")" \
        || nok "multi-key set: exit $rc $(cat "$tmp/err"); $(grep "Tunable rmem" "$tmp/smcd.log")"
"$smcctl" set 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && grep -q "expected KEY=VALUE" "$tmp/err" && ok "smcctl set without KEY=VALUE: usage error" || nok "bare set: exit $rc $(cat "$tmp/err")"
"$smcctl" s >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -ne 0 ] && grep -q "ambiguous object" "$tmp/err" && ok "smcctl s is ambiguous: $(cat "$tmp/err")" || nok "smcctl s: exit $rc $(cat "$tmp/err")"
python3 -c 'import json,sys; t = json.load(open(sys.argv[1])); assert t["buf_clear"] == "create" and len(t) == 17, t' "$state" \
        2>"$tmp/err" && ok "state file written: $(tr -d ' \n' <"$state")" || nok "state file: $(cat "$tmp/err")"
ls "$tmp/state" | grep -q tmp- && nok "temporary file left: $(ls "$tmp/state")" || ok "no temporary file left"
"$smcctl" tunables set max_conns_per_uid=100 max_buf_per_uid=64M max_clients_per_uid=0 rmem=200K inline=on 2>"$tmp/err"
out=$("$smcctl" -j tunables)
[ "$out" = '{"autocork_size":"65536","buf_clear":"create","busy_poll":"50","cq_poll":"event","inline":"on","max_buf_per_uid":"67108864","max_clients_per_uid":"0","max_conns_per_lgr":"255","max_conns_per_uid":"100","max_handshakes_per_uid":"0","max_links_per_lgr":"2","max_listeners_per_uid":"1024","rmem":"262144","short_conn_rate":"1000","sndbuf":"16384","test_link_time":"30","ueid":"SMCD-USERSPACE"}' ] \
        && ok "set several (sizes normalized, rmem rounded to 256K): $out" || nok "set several: $(cat "$tmp/err") $out"
before=$("$smcctl" -j tunables); cp "$state" "$tmp/state.before"
bad() {
        local what=$1 msg=$2; shift 2
        "$smcctl" tunables set "$@" >/dev/null 2>"$tmp/err"; rc=$?
        if [ $rc -ne 0 ] && grep -q -- "$msg" "$tmp/err" && [ "$("$smcctl" -j tunables)" = "$before" ] &&
           cmp -s "$state" "$tmp/state.before"; then ok "$what refused (exit $rc: $(cat "$tmp/err")), nothing changed"
        else nok "$what: exit $rc: $(cat "$tmp/err"); now $("$smcctl" -j tunables)"; fi
}
bad "unknown key" 'unknown tunable "bogus"' bogus=1
bad "bad buf_clear" 'buf_clear: expected release or create' buf_clear=sometimes
bad "bad inline" 'inline: expected auto, on or off' inline=maybe
bad "rmem too big" 'rmem: expected bytes 16K..1M' rmem=2M
bad "rmem too small" 'rmem: expected bytes 16K..1M' rmem=1K
bad "negative number" 'max_conns_per_uid: expected a number' max_conns_per_uid=-1
bad "bad size" 'max_buf_per_uid: expected bytes' max_buf_per_uid=12X
bad "no =" 'expected KEY=VALUE' buf_clear
bad "second of two bad (first rolled back)" 'expected auto, on or off' buf_clear=release inline=maybe
"$smcctl" tunables get nope >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -ne 0 ] && grep -q 'Unknown tunable "nope"' "$tmp/err" && ok "get unknown key: exit $rc" || nok "get unknown key: exit $rc $(cat "$tmp/err")"
if command -v dbus-send >/dev/null; then
        out=$(dbus-send --system --print-reply --dest=org.smcd.smcd1 /org/smcd/smcd1 \
              org.smcd.smcd1.Manager.SetTunable string:rmem string:lots 2>&1)
        echo "$out" | grep -q "^Error org.smcd.smcd1.Error.InvalidArgument: rmem:" && ok "named error InvalidArgument: $out" \
                || nok "InvalidArgument: $out"
fi
if command -v setpriv >/dev/null; then
        setpriv --reuid=65534 --regid=65534 --clear-groups "$smcctl" tunables set inline=off >/dev/null 2>"$tmp/err"; rc=$?
        [ $rc -ne 0 ] && grep -q "Only root" "$tmp/err" && [ "$("$smcctl" tunables get inline)" = on ] && cmp -s "$state" "$tmp/state.before" \
                && ok "unprivileged set refused: $(cat "$tmp/err")" || nok "unprivileged set: exit $rc $(cat "$tmp/err")"
        out=$(setpriv --reuid=65534 --regid=65534 --clear-groups dbus-send --system --print-reply \
              --dest=org.smcd.smcd1 /org/smcd/smcd1 org.smcd.smcd1.Manager.SetTunable string:inline string:off 2>&1)
        echo "$out" | grep -q "^Error org.smcd.smcd1.Error.AccessDenied:" && ok "SetTunable named error AccessDenied" \
                || nok "SetTunable unprivileged: $out"
        setpriv --reuid=65534 --regid=65534 --clear-groups "$smcctl" tunables get inline >"$tmp/out" 2>&1 \
                && [ "$(cat "$tmp/out")" = on ] && ok "unprivileged get" || nok "unprivileged get: $(cat "$tmp/out")"
fi
# rmem applies to a new connection without SO_RCVBUF: its RMB is 256K (set above)
# (a sanitizer build of libsmcrun.so needs its runtime preloaded first, as above)
if out=$(timeout 30 env ${san:+LD_PRELOAD="$san"} ${san:+ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"} \
         sh "$smcrun" python3 - "$smcctl" <<'PY' 2>&1
import json, os, socket, subprocess, sys
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1)
c = socket.create_connection(s.getsockname()); a, _ = s.accept()
env = dict(os.environ); env.pop("LD_PRELOAD", None)
l = json.loads(subprocess.check_output([sys.argv[1], "-j", "connections"], env=env))
cl = [e for e in l if e["role"] == "client"]
a.close(); c.close(); s.close()
assert len(cl) == 1 and cl[0]["rmb"] == 262144, l
print("client rmb", cl[0]["rmb"])
PY
); then ok "rmem=256K used by a new connection: $out"; else nok "rmem on a new connection: $out"; fi

# --no-bus: a second smcd does not touch the bus
"$smcd" --no-bus --runtime-dir "$tmp" --state-file "$tmp/state-nobus.json" >"$tmp/smcd2.log" 2>&1 &
p2=$!
for _ in $(seq 100); do [ -S "$tmp/smcd.sock" ] && break; sleep 0.05; done
kill $p2; wait $p2; rc=$?
grep -qi "D-Bus\|system bus" "$tmp/smcd2.log" && nok "--no-bus smcd mentioned the bus: $(cat "$tmp/smcd2.log")" || ok "--no-bus (exit $rc)"

kill "$spid"; wait "$spid"; rc=$?; spid=
[ $rc -eq 0 ] && ok "smcd exits cleanly" || { nok "smcd exit $rc"; cat "$tmp/smcd.log"; }

# tunables persist across a restart; the state file overrides the command line
start_smcd() {
        "$smcd" -v --runtime-dir "$rundir" --state-file "$state" "$@" >"$tmp/smcd.log" 2>&1 &
        spid=$!
        for _ in $(seq 100); do "$smcctl" stats >/dev/null 2>&1 && break; sleep 0.05; done
}
stop_smcd() { kill "$spid"; wait "$spid"; spid=; }
start_smcd --buf-clear release --rmem 32K
out=$("$smcctl" -j tunables)
[ "$out" = "$before" ] && ok "after a restart the state file wins over the options: $out" || nok "after restart: $out (want $before)"
[ "$("$smcctl" -j stats | python3 -c 'import json,sys; print(json.load(sys.stdin)["pool"]["buf_clear"])')" = create ] \
        && ok "restored buf_clear=create is live in the pool" || nok "pool.buf_clear after restart"
stop_smcd
# a state file that exists but cannot be read is left alone: changes are refused
mv "$state" "$tmp/state.saved"
mkdir "$state"
start_smcd
"$smcctl" set inline=off 2>"$tmp/err"; rc=$?
if [ $rc -ne 0 ] && grep -q "could not be read when smcd started" "$tmp/err" && [ -d "$state" ] &&
   ! grep -q "admin group only" "$tmp/err" &&
   grep -q "refusing changes until smcd restarts" "$tmp/smcd.log"; then
        ok "unreadable state file: set refused, file left alone: $(cat "$tmp/err")"
else nok "unreadable state file: exit $rc $(cat "$tmp/err"); $(ls -la "$tmp/state")"; fi
stop_smcd
rmdir "$state"; mv "$tmp/state.saved" "$state"

# the admin group: a non-root member may change state, a non-member may not
if command -v setpriv >/dev/null; then
        start_smcd --admin-group 4242
        setpriv --reuid=65534 --regid=65534 --groups=4242 "$smcctl" stats reset 2>"$tmp/err" \
                && ok "admin group member (gid 4242) may reset stats" || nok "admin group member refused: $(cat "$tmp/err")"
        setpriv --reuid=65534 --regid=4242 --clear-groups "$smcctl" tunables set inline=off 2>"$tmp/err" \
                && [ "$("$smcctl" tunables get inline)" = off ] \
                && ok "admin group as primary group may set a tunable" || nok "admin primary group: $(cat "$tmp/err")"
        "$smcctl" tunables set inline=on
        setpriv --reuid=65534 --regid=65534 --groups=4243 "$smcctl" stats reset 2>"$tmp/err"; rc=$?
        [ $rc -ne 0 ] && grep -q "admin group" "$tmp/err" && ok "another group is refused: $(cat "$tmp/err")" \
                || nok "non-member: exit $rc $(cat "$tmp/err")"
        stop_smcd
        start_smcd --admin-group ""
        setpriv --reuid=65534 --regid=65534 --groups=4242 "$smcctl" stats reset 2>/dev/null \
                && nok "--admin-group \"\": a group member could reset" || ok "--admin-group \"\": root only"
        stop_smcd
fi
"$smcd" --admin-group no-such-group-xyz --no-bus --runtime-dir "$tmp" >"$tmp/err" 2>&1; rc=$?
[ $rc -ne 0 ] && grep -q "no such group" "$tmp/err" && ok "unknown --admin-group refused: $(cat "$tmp/err")" \
        || nok "unknown admin group: exit $rc $(cat "$tmp/err")"
# a corrupt state file: smcd starts on the defaults (the options), the file is kept aside
n=0
for content in '{"buf_clear": "create", ' '[1, 2]' '{"buf_clear": "create", "rmem": 65536}' \
               '{"buf_clear": "create\u0000junk"}'; do
        n=$((n + 1))
        rm -f "$tmp/state"/tunables.json.corrupt-*
        printf '%s' "$content" >"$state"
        start_smcd --rmem 32K
        v=$("$smcctl" tunables get buf_clear 2>&1); r=$("$smcctl" tunables get rmem 2>&1)
        line=$(grep "Corrupt state file" "$tmp/smcd.log")
        if [ "$v" = release ] && [ "$r" = 32768 ] && [ ! -e "$state" ] && ls "$tmp/state"/tunables.json.corrupt-* >/dev/null 2>&1 &&
           [ "$(cat "$tmp/state"/tunables.json.corrupt-*)" = "$content" ] && [ "$(echo "$line" | wc -l)" = 1 ] && [ -n "$line" ]; then
                ok "corrupt state file $n: defaults, moved aside, logged: $line"
        else nok "corrupt state file $n ($content): buf_clear $v rmem $r; $(ls "$tmp/state"); $(cat "$tmp/smcd.log")"; fi
        stop_smcd
done
# a state file of a newer smcd (a downgrade): a key this one does not know and a value
# it refuses are logged and skipped, the rest applies, the file stays; a save keeps the
# unknown key (before: taken as corrupt, every saved tunable lost)
rm -f "$tmp/state"/tunables.json.corrupt-*
printf '%s' '{"buf_clear": "create", "frobnicate": "1", "inline": "sometimes", "sndbuf": "131072"}' >"$state"
start_smcd --rmem 32K
v=$("$smcctl" tunables get buf_clear 2>&1) s=$("$smcctl" tunables get sndbuf 2>&1) i=$("$smcctl" tunables get inline 2>&1)
if [ "$v" = create ] && [ "$s" = 131072 ] && [ "$i" = auto ] && [ -e "$state" ] &&
   ! ls "$tmp/state"/tunables.json.corrupt-* >/dev/null 2>&1 &&
   [ "$(grep -c 'State file .*: not applied' "$tmp/smcd.log")" = 2 ] && grep -q '"frobnicate" is no tunable of this smcd' "$tmp/smcd.log" &&
   "$smcctl" tunables set rmem=65536 && python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
assert d["frobnicate"] == "1" and d["rmem"] == "65536" and d["buf_clear"] == "create" and d["inline"] == "auto", d' "$state"; then
        ok "newer state file: known keys applied, unknown key and refused value skipped and logged, the file kept, a save keeps the unknown key"
else nok "newer state file: buf_clear $v sndbuf $s inline $i; $(ls "$tmp/state"); $(cat "$state"); $(grep -i "state file" "$tmp/smcd.log")"; fi
stop_smcd
rm -f "$state"
# a save killed between creating and renaming its temporary file: smcd removes it at start
echo '{"buf_clear": "create"' >"$state.tmp-AbC123"
echo keep >"$state.tmp-notours"
start_smcd
if [ ! -e "$state.tmp-AbC123" ] && [ -e "$state.tmp-notours" ] && grep -q "Removed 1 temporary file" "$tmp/smcd.log"; then
        ok "a stale temporary file of a save is removed at start, nothing else"
else nok "stale tmp: $(ls "$tmp/state") $(grep -i temporary "$tmp/smcd.log")"; fi
stop_smcd
rm -f "$state.tmp-notours"
# a state file whose directory does not exist yet, two levels deep: created on the first set
mkdir "$tmp/run5"
"$smcd" --runtime-dir "$tmp/run5" --state-file "$tmp/deep/er/tunables.json" >"$tmp/smcd5.log" 2>&1 &
p5=$!
for _ in $(seq 100); do [ -S "$tmp/run5/smcd.sock" ] && "$smcctl" stats >/dev/null 2>&1 && break; sleep 0.05; done
if "$smcctl" set inline=off 2>"$tmp/err" && grep -q '"inline": *"off"' "$tmp/deep/er/tunables.json"; then
        ok "the state directory is created with its parents"
else nok "nested state dir: $(cat "$tmp/err")"; fi
kill "$p5"; wait "$p5"
# a second smcd for the same runtime directory stops before it reads (or moves) anything
start_smcd
printf 'garbage' >"$tmp/state/second.json"
"$smcd" --runtime-dir "$rundir" --state-file "$tmp/state/second.json" --no-bus >"$tmp/err" 2>&1; rc=$?
if [ $rc -ne 0 ] && grep -q "Another smcd is serving" "$tmp/err" && [ "$(cat "$tmp/state/second.json")" = garbage ] &&
   ! ls "$tmp/state"/second.json.corrupt-* >/dev/null 2>&1 && "$smcctl" stats >/dev/null; then
        ok "a second smcd exits at once, its corrupt state file untouched, the first one serving"
else nok "second smcd: exit $rc $(cat "$tmp/err"); $(ls "$tmp/state")"; fi
stop_smcd
rm -f "$tmp/state/second.json"
# two smcd started at the same moment: one runs, the other exits 1; the socket is the
# runner's (both used to bind it in turn, and the first one's exit removed the
# other's socket); 10 rounds
race=$tmp/race
bad=
for round in $(seq 10); do
        rm -rf "$race"
        mkdir -p "$race"
        "$smcd" --no-bus --runtime-dir "$race" --state-file "$race/a.json" >"$race/a.log" 2>&1 &
        pa=$!
        "$smcd" --no-bus --runtime-dir "$race" --state-file "$race/b.json" >"$race/b.log" 2>&1 &
        pb=$!
        sleep 0.5
        alive=0
        for p in $pa $pb; do kill -0 $p 2>/dev/null && alive=$((alive + 1)); done
        if [ $alive != 1 ] || ! python3 -c 'import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET); s.connect(sys.argv[1])' "$race/smcd.sock" 2>/dev/null; then
                bad="round $round: $alive running; $(cat "$race"/*.log | tr '\n' ' ')"
        fi
        kill $pa $pb 2>/dev/null
        wait $pa $pb 2>/dev/null
        [ -n "$bad" ] && break
done
rm -rf "$race"
[ -z "$bad" ] && ok "two smcd started at once, 10 rounds: one runs and serves its socket, the other exits" \
        || nok "two smcd at once: $bad"
# paths refused before anything is touched (exit 2): a runtime directory too long for
# the socket's path (it was created, and corrupt state files moved aside, first); a
# state file named as the policy table beside it (that file was taken for corrupt
# tunables and moved aside, and then overwritten by both tables)
long=$tmp/$(printf 'd%.0s' $(seq 100))
printf 'garbage' >"$tmp/state/policy.json.keep"
cp "$tmp/state/policy.json.keep" "$tmp/state/x.json"
"$smcd" --no-bus --runtime-dir "$long" --state-file "$tmp/state/x.json" >"$tmp/err" 2>&1; rc1=$?
"$smcd" --no-bus --runtime-dir "$tmp/run3" --state-file "$tmp/state3/policy.json" >>"$tmp/err" 2>&1; rc2=$?
if [ $rc1 = 2 ] && [ $rc2 = 2 ] && [ ! -e "$long" ] && [ ! -e "$tmp/run3" ] && [ ! -e "$tmp/state3" ] &&
        [ "$(cat "$tmp/state/x.json")" = garbage ] && grep -q "too long" "$tmp/err" && grep -q "policy table" "$tmp/err"; then
        ok "a too long runtime directory and a state file named policy.json: exit 2, nothing created or moved"
else nok "bad paths: exit $rc1 / $rc2: $(cat "$tmp/err")"; fi
rm -f "$tmp/state/policy.json.keep" "$tmp/state/x.json"
# two corrupt files, one after the other (within a second or not): both kept aside
rm -f "$tmp/state"/tunables.json.corrupt-*
for content in 'first' 'second'; do
        printf '%s' "$content" >"$state"
        start_smcd
        stop_smcd
done
if [ "$(for f in "$tmp/state"/tunables.json.corrupt-*; do cat "$f"; echo; done | sort | tr '\n' ' ')" = "first second " ]; then
        ok "two corrupt state files are both kept: $(cd "$tmp/state" && echo tunables.json.corrupt-*)"
else nok "corrupt files: $(ls "$tmp/state")"; fi

# The policy file on a bus with the system bus's default policy (deny method calls and
# name ownership unless a policy allows them), as /usr/share/dbus-1/system.conf.
start_bus "$tmp" bus2 "$policy" || exit 1
dpid2=$BUS_PID
mkdir "$tmp/run2"
"$smcd" --runtime-dir "$tmp/run2" --state-file "$tmp/state2/tunables.json" >"$tmp/smcd3.log" 2>&1 &
spid2=$!
for _ in $(seq 100); do "$smcctl" stats >/dev/null 2>&1 && break; sleep 0.05; done
"$smcctl" stats >/dev/null 2>"$tmp/err" && ok "policy: root owns the name, stats answers" \
        || nok "policy: stats: $(cat "$tmp/err") $(cat "$tmp/smcd3.log" "$tmp/bus2.log")"
"$smcctl" stats reset 2>"$tmp/err" && ok "policy: root may reset" || nok "policy: root reset: $(cat "$tmp/err")"
if command -v setpriv >/dev/null; then
        nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
        nobody "$smcctl" stats >/dev/null 2>"$tmp/err" && ok "policy: everybody may read stats" \
                || nok "policy: unprivileged stats: $(cat "$tmp/err")"
        nobody "$smcctl" -j connections >"$tmp/out" 2>"$tmp/err" && [ "$(cat "$tmp/out")" = "[]" ] \
                && ok "policy: everybody may list connections" \
                || nok "policy: unprivileged connections: $(cat "$tmp/out" "$tmp/err")"
        nobody "$smcctl" stats reset 2>"$tmp/err"; rc=$?
        if [ $rc -ne 0 ] && grep -q "Rejected send message" "$tmp/err" && grep -q "root and smcd's admin group only" "$tmp/err"; then
                ok "policy: the bus refuses an unprivileged ResetStats: $(head -c 120 "$tmp/err")"
        else nok "policy: unprivileged reset: exit $rc: $(cat "$tmp/err")"; fi
        if command -v busctl >/dev/null; then
                nobody busctl --address="$DBUS_SYSTEM_BUS_ADDRESS" introspect org.smcd.smcd1 /org/smcd/smcd1 \
                        >/dev/null 2>"$tmp/err" && ok "policy: everybody may introspect" \
                        || nok "policy: unprivileged introspect: $(cat "$tmp/err")"
        fi
        # only root may own the name: an unprivileged smcd runs without D-Bus
        mkdir -m 755 "$tmp/run3" && chown 65534 "$tmp/run3" # (its own: smcd refuses one others can write)
        # setpriv directly (not through the shell function): $! must be smcd itself
        setpriv --reuid=65534 --regid=65534 --clear-groups \
                "$smcd" --runtime-dir "$tmp/run3" --state-file "$tmp/run3/tunables.json" >"$tmp/smcd4.log" 2>&1 &
        p4=$!
        for _ in $(seq 100); do [ -S "$tmp/run3/smcd.sock" ] && break; sleep 0.05; done
        sleep 0.2; kill $p4; wait $p4
        grep -q "Cannot own org.smcd.smcd1" "$tmp/smcd4.log" && ok "policy: an unprivileged smcd may not own the name" \
                || nok "policy: unprivileged smcd: $(cat "$tmp/smcd4.log")"
fi
kill "$spid2"; wait "$spid2"; rc=$?; spid2=
[ $rc -eq 0 ] && ok "smcd (policy bus) exits cleanly" || nok "smcd (policy bus) exit $rc"
exit $failed
