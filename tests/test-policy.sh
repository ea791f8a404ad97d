#!/bin/bash
# smcctl policy / smcctl pnet against a private dbus-daemon and a private smcd, proven
# on real connections through smcrun: a tcp rule for a peer port makes the connect
# fall back with SMCD_DECL_POLICY (SOL_SMC getsockopt and smcctl -j stats agree), a
# listen rule keeps a listener TCP-only (connects to it: SMC_CLC_DECL_PEERNOSMC), del
# restores SMC; rules and pnet entries survive a restart; corrupt state files are moved
# aside; bad input is refused with nothing changed; an unprivileged caller may show
# but not change (smcd's own check, and the bus policy file on a system-like bus).
# Args: SMCD SMCCTL LIBSMCRUN SMCRUN POLICY. Skips (77) without dbus-daemon. TAP-ish.
set -u
smcd=$1 smcctl=$2 lib=$3 smcrun=$4 buspolicy=$5
command -v dbus-daemon >/dev/null || { echo "SKIP: dbus-daemon not installed"; exit 77; }

tmp=$(mktemp -d /tmp/smcd-test-policy.XXXXXX)
chmod 755 "$tmp" # the unprivileged caller must reach the bus socket
rundir=$tmp/run
mkdir "$rundir"
spid= dpid= dpid2=
cleanup() {
        [ -n "$spid" ] && kill "$spid" 2>/dev/null && wait "$spid" 2>/dev/null
        [ -n "$dpid" ] && kill "$dpid" 2>/dev/null
        [ -n "$dpid2" ] && kill "$dpid2" 2>/dev/null
        rm -rf "$tmp"
}
trap cleanup EXIT

failed=0
ok() { echo "ok - $*"; }
nok() { echo "not ok - $*"; failed=1; }

# a bus that lets everybody own and call everything: smcd's own checks are under test
# shellcheck source=tests/lib-bus.sh
. "$(dirname "$0")/lib-bus.sh"
start_bus "$tmp" bus || exit 1
dpid=$BUS_PID
export SMCD_RUNTIME_DIR=$rundir SMCRUN_LIB=$lib

statedir=$tmp/state # never the host's /var/lib/smcd
pfile=$statedir/policy.json nfile=$statedir/pnet.json
start_smcd() {
        "$smcd" -v --runtime-dir "$rundir" --state-file "$statedir/tunables.json" "$@" >"$tmp/smcd.log" 2>&1 &
        spid=$!
        for _ in $(seq 100); do "$smcctl" policy >/dev/null 2>&1 && break; sleep 0.05; done
}
stop_smcd() {
        kill "$spid"; wait "$spid"; local rc=$?; spid=
        [ $rc -eq 0 ] || nok "smcd exit $rc: $(tail -5 "$tmp/smcd.log")"
}
start_smcd
"$smcctl" policy >"$tmp/out" 2>&1 || { nok "smcctl policy: $(cat "$tmp/out")"; cat "$tmp/smcd.log"; exit 1; }

# a sanitizer build of libsmcrun.so needs its runtime preloaded first
san=$(ldd "$lib" | awk '$1 ~ /^lib(a|ub|t|hwa)san\.so/ { print $3 }' | paste -sd:)
# (python3 is not instrumented: no leak check in it; smcd keeps the caller's options)
san_opts="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"

# One connection through smcrun on HOST:PORT (server and client in one python3
# process), 30000 bytes each way; prints the SOL_SMC mode and fallback reason of both
# ends as JSON: {"client": {"mode": M, "reason": "0x..."}, "server": {...}}.
cat >"$tmp/conn.py" <<'PY'
import json, socket, struct, sys
SOL_SMC, MODE, REASON = 286, 0x5301, 0x5302
host, port = sys.argv[1], int(sys.argv[2])
fam = socket.AF_INET6 if ":" in host else socket.AF_INET
s = socket.socket(fam); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((host, port)); s.listen(4)
c = socket.socket(fam); c.connect((host, s.getsockname()[1])); a, _ = s.accept()
for x, y in ((c, a), (a, c)):
    x.sendall(b"x" * 30000); got = 0
    while got < 30000: got += len(y.recv(65536))
def info(x):
    r = struct.unpack("I", x.getsockopt(SOL_SMC, REASON, 4))[0]
    return {"mode": x.getsockopt(SOL_SMC, MODE), "reason": "0x%08x" % r}
print(json.dumps({"client": info(c), "server": info(a)}))
a.close(); c.close(); s.close()
PY
conn() {
        timeout 30 env ${san:+LD_PRELOAD="$san"} ASAN_OPTIONS="$san_opts" sh "$smcrun" python3 "$tmp/conn.py" "$@" 2>&1
}
# the mode and reason of the client end: "1 0x00000000" (SMC-D) or "2 0x0b010000" ...
client_of() { python3 -c 'import json,sys; c = json.loads(sys.argv[1])["client"]; print(c["mode"], c["reason"])' "$1" 2>/dev/null; }
# a free port below the ephemeral range (32768..): a port the kernel handed out could
# be taken as a source port by another test's connections before we bind it
free_port() {
        python3 -c 'import errno, random, socket
for _ in range(1000):
    p = random.randrange(20000, 32000)
    try:
        socket.socket().bind(("127.0.0.1", p))
        socket.socket(socket.AF_INET6).bind(("::1", p))
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            continue
    print(p)
    break'
}
# count of fallback reason NAME in smcctl -j stats (0 if absent)
fallbacks() {
        "$smcctl" -j stats | python3 -c '
import json, sys
def find(o):
    if isinstance(o, dict):
        if "by_reason" in o: return o["by_reason"]
        for v in o.values():
            r = find(v)
            if r is not None: return r
br = find(json.load(sys.stdin)) or []
print(sum(e["count"] for e in br if e["name"] == sys.argv[1]))' "$1"
}
listeners() { "$smcctl" -j stats | python3 -c 'import json,sys; print(json.load(sys.stdin)["smcd"]["listeners_total"])'; }
hits() { "$smcctl" -j policy | python3 -c 'import json,sys; print([r["hits"] for r in json.load(sys.stdin) if r["id"] == int(sys.argv[1])][0])' "$1"; }

# ---- empty tables ----
[ "$("$smcctl" -j policy)" = "[]" ] && [ "$("$smcctl" -j pnet)" = "[]" ] && ok "empty tables: -j policy and -j pnet are []" \
        || nok "empty tables: $("$smcctl" -j policy) $("$smcctl" -j pnet)"
[ "$("$smcctl" policy)" = "ID  SCOPE  LOCAL-PORT  PEER-PORT  PREFIX  ACTION  HITS" ] && ok "policy text: header only" \
        || nok "policy text empty: $("$smcctl" policy)"
[ "$("$smcctl" pnet)" = "NETDEV  IBDEV  PORT  PNETID" ] && ok "pnet text: header only" || nok "pnet text empty: $("$smcctl" pnet)"
[ ! -e "$pfile" ] && [ ! -e "$nfile" ] && ok "no state files before a change" || nok "state files written at start"

# ---- a connect rule: peer port -> SMCD_DECL_POLICY ----
p1=$(free_port)
out=$(conn 127.0.0.1 "$p1")
[ "$(client_of "$out")" = "1 0x00000000" ] && ok "before any rule: SMC-D to port $p1 ($out)" || nok "baseline SMC-D: $out"
pol0=$(fallbacks SMCD_DECL_POLICY)
id=$("$smcctl" policy add connect peer-port "$p1" action tcp 2>"$tmp/err")
[ "$id" = 1 ] && ok "policy add connect peer-port $p1 action tcp: id $id" || nok "policy add: '$id' $(cat "$tmp/err")"
out=$(conn 127.0.0.1 "$p1")
[ "$(client_of "$out")" = "2 0x0b010000" ] && ok "tcp rule: connect falls back with SMCD_DECL_POLICY ($out)" \
        || nok "tcp rule: $out"
pol1=$(fallbacks SMCD_DECL_POLICY)
[ "$pol1" = $((pol0 + 1)) ] && ok "smcctl -j stats: SMCD_DECL_POLICY fallbacks $pol0 -> $pol1" || nok "POLICY fallbacks $pol0 -> $pol1"
[ "$(hits 1)" = 1 ] && ok "rule 1 hit once" || nok "rule 1 hits: $(hits 1)"
p2=$(free_port)
out=$(conn 127.0.0.1 "$p2")
[ "$(client_of "$out")" = "1 0x00000000" ] && ok "another port stays SMC-D" || nok "port $p2: $out"
# IPv6 and a prefix rule; the prefix is the destination's
out=$(conn ::1 "$p2")
[ "$(client_of "$out")" = "1 0x00000000" ] && ok "::1 SMC-D before a prefix rule" || nok "::1 baseline: $out"
id=$("$smcctl" policy add prefix ::1/128 action tcp 2>"$tmp/err")
out=$(conn ::1 "$p2")
[ "$id" = 2 ] && [ "$(client_of "$out")" = "2 0x0b010000" ] && ok "prefix ::1/128 rule: [::1] falls back with POLICY" \
        || nok "prefix ::1/128: id '$id' $out $(cat "$tmp/err")"
# first match wins: an smc rule for p1 inserted at position 1 overrides rule 1
id=$("$smcctl" policy add position 1 peer-port "$p1" action smc 2>"$tmp/err")
out=$(conn 127.0.0.1 "$p1")
if [ "$id" = 3 ] && [ "$(client_of "$out")" = "1 0x00000000" ] &&
   [ "$("$smcctl" -j policy | python3 -c 'import json,sys; print(" ".join(str(r["id"]) for r in json.load(sys.stdin)))')" = "3 1 2" ]
then ok "position 1: rule 3 first, smc wins over rule 1 (first match)"; else nok "position: id '$id' $out $("$smcctl" policy)"; fi
"$smcctl" policy del 3 && "$smcctl" policy del 2 || nok "del 3, del 2"

# ---- a listen rule keeps the listener TCP-only ----
p3=$(free_port)
l0=$(listeners)
id=$("$smcctl" policy add listen local-port "$p3" action tcp 2>"$tmp/err")
out=$(conn 127.0.0.1 "$p3")
l1=$(listeners)
if [ "$id" = 4 ] && [ "$(client_of "$out")" = "2 0x03010000" ] && [ "$l1" = "$l0" ] && [ "$(hits 4)" = 1 ]; then
        ok "listen rule: no SMC listener registered (listeners_total $l0 -> $l1), connect falls back PEERNOSMC ($out)"
else nok "listen rule: id '$id' $out listeners $l0 -> $l1 hits $(hits 4) $(cat "$tmp/err")"; fi
grep -q "policy rule 4 keeps this listener TCP" "$tmp/smcd.log" && ok "smcd logged the refused LISTEN" \
        || nok "no log line for the refused LISTEN"
# a wildcard listener: 0.0.0.0 is in 0.0.0.0/0 only
id=$("$smcctl" policy add listen prefix 10.0.0.0/8 action tcp 2>"$tmp/err")
out=$(conn 0.0.0.0 "$p2")
[ "$id" = 5 ] && [ "$(client_of "$out")" = "1 0x00000000" ] && ok "listen prefix 10.0.0.0/8 does not hold 0.0.0.0: SMC-D" \
        || nok "wildcard listener: $out"
"$smcctl" policy del 5 || nok "del 5"
# del restores SMC (for new listens)
"$smcctl" policy del 4 2>"$tmp/err" && "$smcctl" policy del 1 2>>"$tmp/err" || nok "del 4 / del 1: $(cat "$tmp/err")"
out=$(conn 127.0.0.1 "$p3")
out2=$(conn 127.0.0.1 "$p1")
[ "$(client_of "$out")" = "1 0x00000000" ] && [ "$(client_of "$out2")" = "1 0x00000000" ] && [ "$("$smcctl" -j policy)" = "[]" ] \
        && ok "after del: SMC-D again on $p3 (listen) and $p1 (connect)" || nok "after del: $out / $out2"

# ---- text and JSON agree ----
"$smcctl" policy add connect local-port 1000-2000 peer-port 80 prefix 192.168.0.0/16 action tcp >/dev/null &&
"$smcctl" policy add listen local-port 8080 action tcp >/dev/null &&
"$smcctl" policy add prefix fd00::/8 action smc >/dev/null || nok "three adds"
"$smcctl" -j policy >"$tmp/json"; "$smcctl" -d policy >"$tmp/text"
if python3 - "$tmp/json" "$tmp/text" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); t = open(sys.argv[2]).read().splitlines()
keys = ["id", "scope", "local_port", "peer_port", "prefix", "action", "hits", "rule"]
assert t[0].split() == ["ID", "SCOPE", "LOCAL-PORT", "PEER-PORT", "PREFIX", "ACTION", "HITS", "RULE"], t[0]
assert len(t) == len(j) + 1 == 4, t
for r, line in zip(j, t[1:]):
    assert list(r) == keys, r
    f = line.split(None, 7)
    want = [str(r[k]) if r[k] is not None else "-" for k in keys]
    assert f == want, (f, want)
assert j[0]["rule"] == "connect local-port 1000-2000 peer-port 80 prefix 192.168.0.0/16 action tcp", j[0]
assert j[1]["scope"] == "listen" and j[1]["local_port"] == "8080" and j[1]["peer_port"] is None, j[1]
# aligned: every column starts where its header does
hdr = t[0]
for col in ["SCOPE", "LOCAL-PORT", "PEER-PORT", "PREFIX", "ACTION"]:
    i = hdr.index(col)
    for line in t[1:]: assert line[i - 1] == " " and line[i] != " ", (col, line)
PY
then ok "policy -d text and -j JSON agree, stable keys, aligned"; else nok "policy text/JSON: $(cat "$tmp/json" "$tmp/text")"; fi
"$smcctl" po sh >/dev/null 2>&1 && "$smcctl" pn >/dev/null 2>&1 && ok "prefixes po / pn" || nok "prefixes po / pn"

# ---- pnet ----
"$smcctl" pnet add eth1 mlx5_1 2>"$tmp/err" && "$smcctl" pnet add eth0 mlx5_0 1 pnetid net1 2>>"$tmp/err" &&
"$smcctl" pnet add eth0.100 mlx5_0 1 pnetid NET1 2>>"$tmp/err" && "$smcctl" pnet add ens2 roce_x 2 2>>"$tmp/err" \
        && ok "pnet add x4" || nok "pnet add: $(cat "$tmp/err")"
want='[{"netdev":"ens2","ibdev":"roce_x","port":2,"pnetid":null},{"netdev":"eth0","ibdev":"mlx5_0","port":1,"pnetid":"NET1"},{"netdev":"eth0.100","ibdev":"mlx5_0","port":1,"pnetid":"NET1"},{"netdev":"eth1","ibdev":"mlx5_1","port":1,"pnetid":null}]'
[ "$("$smcctl" -j pnet)" = "$want" ] && ok "pnet -j: sorted, port default 1, pnetid upper case" || nok "pnet -j: $("$smcctl" -j pnet)"
"$smcctl" pnet >"$tmp/text"
if [ "$(sed -n 1p "$tmp/text")" = "NETDEV    IBDEV   PORT  PNETID" ] && [ "$(sed -n 3p "$tmp/text")" = "eth0      mlx5_0     1  NET1" ] &&
   [ "$(sed -n 5p "$tmp/text")" = "eth1      mlx5_1     1  -" ]; then ok "pnet text table aligned"
else nok "pnet text: $(cat "$tmp/text")"; fi
"$smcctl" pnet del eth0.100 2>"$tmp/err" && ok "pnet del eth0.100" || nok "pnet del: $(cat "$tmp/err")"
if command -v busctl >/dev/null; then
        c1=$(busctl --address="$DBUS_SYSTEM_BUS_ADDRESS" get-property org.smcd.smcd1 /org/smcd/smcd1/pnet org.smcd.smcd1.Pnet Count)
        c2=$(busctl --address="$DBUS_SYSTEM_BUS_ADDRESS" get-property org.smcd.smcd1 /org/smcd/smcd1/policy org.smcd.smcd1.Policy Count)
        [ "$c1" = "u 3" ] && [ "$c2" = "u 3" ] && ok "Count properties: pnet $c1, policy $c2" || nok "Count: $c1 / $c2"
        out=$(busctl --address="$DBUS_SYSTEM_BUS_ADDRESS" introspect org.smcd.smcd1 /org/smcd/smcd1/policy 2>&1)
        echo "$out" | grep -q '^org.smcd.smcd1.Policy' && echo "$out" | grep -q '^\.Add  *method  *s  *u ' &&
        echo "$out" | grep -q '^\.Del  *method  *u ' && echo "$out" | grep -q '^\.List  *method  *-  *s ' \
                && ok "introspect Policy: Add(s)->u, Del(u), List()->s" || nok "introspect policy: $out"
        out=$(busctl --address="$DBUS_SYSTEM_BUS_ADDRESS" introspect org.smcd.smcd1 /org/smcd/smcd1/pnet 2>&1)
        echo "$out" | grep -q '^org.smcd.smcd1.Pnet' && echo "$out" | grep -q '^\.Add  *method  *ssus  *- ' &&
        echo "$out" | grep -q '^\.Del  *method  *s  *- ' && ok "introspect Pnet: Add(ssus), Del(s)" || nok "introspect pnet: $out"
        out=$(busctl --address="$DBUS_SYSTEM_BUS_ADDRESS" call org.smcd.smcd1 /org/smcd/smcd1/policy org.smcd.smcd1.Policy Add s "action smc" 2>&1)
        [ "$out" = "u 9" ] && ok "busctl Policy.Add: $out" || nok "busctl Add: $out"
        busctl --address="$DBUS_SYSTEM_BUS_ADDRESS" call org.smcd.smcd1 /org/smcd/smcd1/policy org.smcd.smcd1.Policy Del u 9 \
                || nok "busctl Del 9"
fi

# ---- bad input: refused, nothing changed (table and file byte for byte) ----
snap() { "$smcctl" -j policy >"$tmp/p.json"; "$smcctl" -j pnet >"$tmp/n.json"; cp "$pfile" "$tmp/p.file"; cp "$nfile" "$tmp/n.file"; }
same() {
        "$smcctl" -j policy | cmp -s - "$tmp/p.json" && "$smcctl" -j pnet | cmp -s - "$tmp/n.json" &&
        cmp -s "$pfile" "$tmp/p.file" && cmp -s "$nfile" "$tmp/n.file"
}
snap
bad_rule() {
        local msg=$1; shift
        "$smcctl" policy add "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?
        if [ $rc -ne 0 ] && grep -qF -- "$msg" "$tmp/err" && [ ! -s "$tmp/out" ] && same; then
                ok "refused (exit $rc): $*: $(cat "$tmp/err")"
        else nok "bad rule '$*': exit $rc, stderr $(cat "$tmp/err"), stdout $(cat "$tmp/out")"; fi
}
bad_rule 'unknown word "frob"' frob action tcp
bad_rule 'unknown word "port"' port 80 action tcp
bad_rule '"local-port" is given twice' local-port 1 local-port 2 action tcp
bad_rule 'the scope is given twice' connect listen action tcp
bad_rule '"action" is given twice' action tcp action smc
bad_rule 'missing "action smc|tcp"' connect peer-port 80
bad_rule 'action: expected smc or tcp, not "udp"' action udp
bad_rule 'peer-port: bad port "0"' peer-port 0 action tcp
bad_rule 'peer-port: bad port "65536"' peer-port 65536 action tcp
bad_rule 'local-port: bad range "9-3"' local-port 9-3 action tcp
bad_rule 'peer-port: bad port "http"' peer-port http action tcp
bad_rule 'prefix: bad length in "10.0.0.0/33"' prefix 10.0.0.0/33 action tcp
bad_rule 'prefix: bad address "300.0.0.0"' prefix 300.0.0.0/8 action tcp
bad_rule 'prefix: "10.9.0.0/8" has bits set beyond /8 (did you mean 10.0.0.0/8?)' prefix 10.9.0.0/8 action tcp
bad_rule 'prefix: bad address "fd00:::"' prefix fd00:::/8 action tcp
bad_rule '"peer-port" never matches a listen' listen peer-port 80 action tcp
bad_rule 'position 9 is beyond the end (3 rules: at most 4)' position 9 action tcp
bad_rule 'the same as rule' listen local-port 8080 action tcp
bad_rule '"prefix" needs a value' action tcp prefix
bad_rule 'not printable ASCII' "action tcp $(printf '\001')"
"$smcctl" policy add >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && same && ok "policy add without a rule: exit 2" || nok "policy add empty: exit $rc"
"$smcctl" policy del 99 2>"$tmp/err"; rc=$?
[ $rc -eq 1 ] && grep -q "No policy rule with id 99" "$tmp/err" && same && ok "del of a missing rule: NotFound, exit 1" \
        || nok "del 99: exit $rc $(cat "$tmp/err")"
for a in 0 x -1 4294967296 "1 2"; do
        # shellcheck disable=SC2086
        "$smcctl" policy del $a >/dev/null 2>&1; rc=$?
        [ $rc -eq 2 ] && same || nok "policy del '$a': exit $rc"
done
ok "policy del with a bad ID (0 x -1 4294967296, two IDs): exit 2, nothing changed"
bad_pnet() {
        local msg=$1; shift
        "$smcctl" pnet add "$@" >/dev/null 2>"$tmp/err"; local rc=$?
        if [ $rc -ne 0 ] && grep -qF -- "$msg" "$tmp/err" && same; then ok "pnet refused (exit $rc): $(cat "$tmp/err")"
        else nok "bad pnet '$*': exit $rc, $(cat "$tmp/err")"; fi
}
bad_pnet 'netdev: bad name "a234567890123456"' a234567890123456 mlx5_0
bad_pnet 'netdev: bad name "eth/0"' eth/0 mlx5_0
bad_pnet 'netdev: bad name ".."' .. mlx5_0
bad_pnet 'ibdev: bad name "a:b"' eth9 a:b
bad_pnet 'port: expected 1..255, not 0' eth9 mlx5_0 0
bad_pnet 'port: expected 1..255, not 256' eth9 mlx5_0 256
bad_pnet 'bad PORT "x1"' eth9 mlx5_0 x1
bad_pnet 'pnetid: "ABCDEFGHIJKLMNOPQ" is longer than 16' eth9 mlx5_0 1 pnetid ABCDEFGHIJKLMNOPQ
bad_pnet 'pnetid: "NET_1" has a character other than A-Z and 0-9' eth9 mlx5_0 1 pnetid NET_1
bad_pnet 'netdev eth0 has an entry already' eth0 mlx5_7
bad_pnet 'mlx5_0 port 1 belongs to pnetid NET1 already (netdev eth0), not NET2' eth9 mlx5_0 1 pnetid NET2
bad_pnet 'unexpected argument "extra"' eth9 mlx5_0 1 extra
bad_pnet 'expected NETDEV IBDEV' eth9
"$smcctl" pnet del eth9 2>"$tmp/err"; rc=$?
[ $rc -eq 1 ] && grep -q 'No pnet entry for netdev "eth9"' "$tmp/err" && same && ok "pnet del of a missing netdev: NotFound" \
        || nok "pnet del eth9: exit $rc $(cat "$tmp/err")"
if command -v dbus-send >/dev/null; then
        out=$(dbus-send --system --print-reply --dest=org.smcd.smcd1 /org/smcd/smcd1/policy \
              org.smcd.smcd1.Policy.Add string:"action maybe" 2>&1)
        echo "$out" | grep -q '^Error org.smcd.smcd1.Error.InvalidArgument: action: expected smc or tcp' \
                && ok "named error InvalidArgument" || nok "InvalidArgument: $out"
        out=$(dbus-send --system --print-reply --dest=org.smcd.smcd1 /org/smcd/smcd1/policy \
              org.smcd.smcd1.Policy.Del uint32:12345 2>&1)
        echo "$out" | grep -q '^Error org.smcd.smcd1.Error.NotFound:' && ok "named error NotFound" || nok "NotFound: $out"
        out=$(dbus-send --system --print-reply --dest=org.smcd.smcd1 /org/smcd/smcd1/pnet \
              org.smcd.smcd1.Pnet.Add string:eth9 string:mlx5_9 uint32:1 string:"no way" 2>&1)
        echo "$out" | grep -q '^Error org.smcd.smcd1.Error.InvalidArgument: pnetid:' && same \
                && ok "Pnet.Add bad pnetid: InvalidArgument" || nok "Pnet.Add: $out"
fi

# ---- a failed save changes nothing ----
# the state directory made unwritable for root too: replace it by a file for a moment
mv "$statedir" "$tmp/state.moved" && touch "$statedir"
"$smcctl" policy add peer-port 4444 action tcp >/dev/null 2>"$tmp/err"; rc1=$?
"$smcctl" pnet del eth1 2>>"$tmp/err"; rc2=$?
rm "$statedir" && mv "$tmp/state.moved" "$statedir"
if [ $rc1 -ne 0 ] && [ $rc2 -ne 0 ] && grep -q "Cannot save the policy" "$tmp/err" && grep -q "Cannot save the pnet table" "$tmp/err" &&
        ! grep -q "admin group only" "$tmp/err" && same
then ok "failed saves: errors, nothing changed ($(tr '\n' ' ' <"$tmp/err"))"
else nok "failed save: exit $rc1 / $rc2: $(cat "$tmp/err")"; fi

# ---- unprivileged callers: show yes, change no ----
if command -v setpriv >/dev/null; then
        nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$smcctl" "$@"; }
        [ "$(nobody -j policy)" = "$(cat "$tmp/p.json")" ] && [ "$(nobody -j pnet)" = "$(cat "$tmp/n.json")" ] &&
        nobody policy >/dev/null && nobody pnet >/dev/null && ok "unprivileged policy / pnet show" || nok "unprivileged show"
        for cmd in "policy add action tcp" "policy del 1" "pnet add eth9 mlx5_9" "pnet del eth0"; do
                # shellcheck disable=SC2086
                nobody $cmd >/dev/null 2>"$tmp/err"; rc=$?
                if [ $rc -ne 0 ] && grep -q "Only root or the admin group" "$tmp/err" && same; then ok "unprivileged $cmd refused"
                else nok "unprivileged $cmd: exit $rc $(cat "$tmp/err")"; fi
        done
        out=$(setpriv --reuid=65534 --regid=65534 --clear-groups dbus-send --system --print-reply \
              --dest=org.smcd.smcd1 /org/smcd/smcd1/pnet org.smcd.smcd1.Pnet.Del string:eth0 2>&1)
        echo "$out" | grep -q "^Error org.smcd.smcd1.Error.AccessDenied:" && same && ok "Pnet.Del named error AccessDenied" \
                || nok "Pnet.Del unprivileged: $out"
        # the admin group may (smcd --admin-group)
        stop_smcd
        start_smcd --admin-group 4242
        out=$(setpriv --reuid=65534 --regid=65534 --groups=4242 "$smcctl" policy add peer-port 4242 action tcp 2>&1)
        if [ "$out" = 10 ] && setpriv --reuid=65534 --regid=65534 --groups=4242 "$smcctl" policy del 10; then
                ok "a member of the admin group may add and del (id $out)"
        else nok "admin group: $out"; fi
else
        echo "ok - SKIP unprivileged checks: setpriv not installed"
fi

# ---- persistence across a restart ----
"$smcctl" -j policy | python3 -c 'import json,sys; l = json.load(sys.stdin); [r.pop("hits") for r in l]; print(json.dumps(l))' >"$tmp/before"
"$smcctl" -j pnet >"$tmp/pnet.before"
stop_smcd
start_smcd
"$smcctl" -j policy | python3 -c 'import json,sys; l = json.load(sys.stdin); [r.pop("hits") for r in l]; print(json.dumps(l))' >"$tmp/after"
if cmp -s "$tmp/before" "$tmp/after" && "$smcctl" -j pnet | cmp -s - "$tmp/pnet.before" && [ "$(wc -c <"$tmp/after")" -gt 100 ]; then
        ok "rules (ids, order) and pnet entries survive a restart"
else nok "restart: $(cat "$tmp/before") vs $(cat "$tmp/after")"; fi
id=$("$smcctl" policy add peer-port 4443 action tcp)
[ "$id" = 11 ] && ok "ids are not reused after a restart (next id $id)" || nok "next id after restart: $id"
"$smcctl" policy del "$id"
# a restored rule acts
p4=$(free_port)
"$smcctl" policy add connect peer-port "$p4" action tcp >/dev/null
stop_smcd
start_smcd
out=$(conn 127.0.0.1 "$p4")
[ "$(client_of "$out")" = "2 0x0b010000" ] && ok "a rule loaded at start acts: POLICY fallback" || nok "loaded rule: $out"

# ---- corrupt state files: moved aside, empty tables, one log line each ----
stop_smcd
n=0
for content in '{"next_id": 3, "rules": [' '{"next_id": 3, "rules": [{"id": 1, "rule": "action maybe"}]}' '[]' \
               '{"next_id": 3, "rules": [], "extra": 1}' '{"next_id": 3, "rules": [{"id": 1, "rule": "action tcp"}, {"id": 1, "rule": "action smc"}]}'; do
        n=$((n + 1))
        rm -f "$statedir"/*.corrupt-*
        printf '%s' "$content" >"$pfile"
        printf '%s' "{\"entries\": [{\"netdev\": \"eth0\"}]}" >"$nfile"
        start_smcd
        line=$(grep "Corrupt state file $pfile" "$tmp/smcd.log"); nline=$(grep "Corrupt state file $nfile" "$tmp/smcd.log")
        if [ "$("$smcctl" -j policy)" = "[]" ] && [ "$("$smcctl" -j pnet)" = "[]" ] && [ ! -e "$pfile" ] && [ ! -e "$nfile" ] &&
           [ "$(cat "$statedir"/policy.json.corrupt-*)" = "$content" ] && ls "$statedir"/pnet.json.corrupt-* >/dev/null 2>&1 &&
           [ "$(echo "$line" | wc -l)" = 1 ] && [ -n "$line" ] && [ -n "$nline" ]; then
                ok "corrupt policy.json $n: empty table, moved aside, logged: $line"
        else nok "corrupt $n ($content): $("$smcctl" -j policy) $(ls "$statedir"); $(cat "$tmp/smcd.log")"; fi
        stop_smcd
done
start_smcd
id=$("$smcctl" policy add action smc)
"$smcctl" pnet add eth0 mlx5_0 || nok "pnet add after a corrupt file"
[ "$id" = 1 ] && grep -q '"next_id": 2' "$pfile" && [ "$("$smcctl" -j pnet | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')" = 1 ] \
        && ok "after corrupt files: fresh tables (id $id)" || nok "fresh table: $id"
stop_smcd

# ---- the bus policy file: the method names it denies are ours ----
start_bus "$tmp" bus2 "$buspolicy" || exit 1
dpid2=$BUS_PID
start_smcd --admin-group 4242
snap
if command -v setpriv >/dev/null; then
        for m in "policy add action tcp" "policy del 1" "pnet add eth9 mlx5_9" "pnet del eth0"; do
                # shellcheck disable=SC2086
                setpriv --reuid=65534 --regid=65534 --clear-groups "$smcctl" $m >/dev/null 2>"$tmp/err"; rc=$?
                # the bus itself refuses (its AccessDenied names the rule), before smcd sees it
                if [ $rc -ne 0 ] && grep -qi "rejected send message" "$tmp/err" && same; then ok "bus policy denies $m"
                else nok "bus policy, $m: exit $rc $(cat "$tmp/err")"; fi
        done
        setpriv --reuid=65534 --regid=65534 --clear-groups "$smcctl" policy >/dev/null 2>"$tmp/err" &&
        setpriv --reuid=65534 --regid=65534 --clear-groups "$smcctl" pnet >/dev/null 2>>"$tmp/err" \
                && ok "bus policy allows policy / pnet show" || nok "bus policy show: $(cat "$tmp/err")"
fi
"$smcctl" policy add peer-port 1234 action tcp >/dev/null 2>"$tmp/err" && "$smcctl" pnet add eth5 mlx5_5 2>>"$tmp/err" \
        && ok "bus policy: root may add" || nok "bus policy, root: $(cat "$tmp/err") $(cat "$tmp/bus2.log")"
stop_smcd

exit $failed
