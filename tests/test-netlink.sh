#!/bin/bash
# smcd's netlink monitor, the Devices and LinkGroups objects and smcctl devices /
# linkgroups, in a private network namespace (unshare -n: only lo) with a private
# dbus-daemon and a private smcd. Args: SMCD SMCCTL LIBSMCRUN SMCRUN.
# Skips (77) without unshare, ip, dbus-daemon or python3, or if a network namespace
# cannot be created (not root). TAP-ish output.
set -u
smcd=$1 smcctl=$2 lib=$3 smcrun=$4

if [ -z "${SMCD_TEST_IN_NETNS:-}" ]; then
        for p in unshare ip dbus-daemon python3; do
                command -v "$p" >/dev/null || { echo "SKIP: $p not installed"; exit 77; }
        done
        unshare -n true 2>/dev/null || { echo "SKIP: cannot create a network namespace (unshare -n; root?)"; exit 77; }
        SMCD_TEST_IN_NETNS=1 exec unshare -n bash "$0" "$@"
fi

tmp=$(mktemp -d /tmp/smcd-test-netlink.XXXXXX)
rundir=$tmp/run
mkdir "$rundir"
spid= dpid= hpid=
cleanup() {
        [ -n "$hpid" ] && touch "$tmp/go" && kill "$hpid" 2>/dev/null && wait "$hpid" 2>/dev/null
        [ -n "$spid" ] && kill -CONT "$spid" 2>/dev/null && kill "$spid" 2>/dev/null && wait "$spid" 2>/dev/null
        [ -n "$dpid" ] && kill "$dpid" 2>/dev/null && wait "$dpid" 2>/dev/null
        rm -rf "$tmp"
}
trap cleanup EXIT

failed=0
ok() { echo "ok - $*"; }
nok() { echo "not ok - $*"; failed=1; }
skip() { echo "ok - # SKIP $*"; }

ip link set lo up

# shellcheck source=tests/lib-bus.sh
. "$(dirname "$0")/lib-bus.sh"
start_bus "$tmp" bus || exit 1
dpid=$BUS_PID
export SMCD_RUNTIME_DIR=$rundir SMCRUN_LIB=$lib

"$smcd" -v --runtime-dir "$rundir" --state-file "$tmp/state/tunables.json" >"$tmp/smcd.log" 2>&1 &
spid=$!
for _ in $(seq 200); do "$smcctl" stats >/dev/null 2>&1 && break; sleep 0.05; done
"$smcctl" stats >/dev/null 2>&1 || { echo "not ok - smcd did not come up"; cat "$tmp/smcd.log"; exit 1; }
grep -q "Cannot open the netlink monitor" "$tmp/smcd.log" && { nok "netlink monitor: $(cat "$tmp/smcd.log")"; exit 1; }

# The sanitizer runtime ahead of libsmcrun.so in a sanitizer build (python3 is not
# instrumented); only for the programs run under smcrun.
san=$(ldd "$lib" | awk '$1 ~ /^lib(a|ub|t|hwa)san\.so/ { print $3 }' | paste -sd:)
under_smcrun() {
        if [ -n "$san" ]; then
                LD_PRELOAD="$san" ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" sh "$smcrun" "$@"
        else
                sh "$smcrun" "$@"
        fi
}

devjson() { "$smcctl" -j devices; }
# the addresses of netdev $1, one per line
addrs_of() {
        devjson | python3 -c '
import json, sys
for n in json.load(sys.stdin)["netdevs"]:
    if n["name"] == sys.argv[1]:
        print("\n".join(n["addresses"]))' "$1"
}
# wait until the python condition $1 on d (the Devices JSON) holds; 5 s at most
wait_devices() {
        for _ in $(seq 100); do
                devjson >"$tmp/dev.json" 2>/dev/null &&
                        python3 -c "import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if ($1) else 1)" \
                                "$tmp/dev.json" 2>/dev/null && return 0
                sleep 0.05
        done
        return 1
}
counter() {  # netlink counter $1
        devjson | python3 -c 'import json,sys; print(json.load(sys.stdin)["netlink"][sys.argv[1]])' "$1"
}

# check_smcd_conn ADDR WHAT: a connection under smcrun from ADDR's family's wildcard
# listener to ADDR, held while smcctl connections must show it as SMC-D
cat >"$tmp/hold.py" <<'PY'
import os, socket, sys, time
addr, d = sys.argv[1], sys.argv[2]
fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
s = socket.socket(fam); s.bind(("::" if fam == socket.AF_INET6 else "0.0.0.0", 0)); s.listen(1)
port = s.getsockname()[1]
c = socket.socket(fam); c.settimeout(3); c.connect((addr, port)); a, _ = s.accept()
c.sendall(b"y" * 100); got = 0
while got < 100: got += len(a.recv(100))
open(d + "/hport.tmp", "w").write("%d\n" % port); os.rename(d + "/hport.tmp", d + "/hport")
while not os.path.exists(d + "/hgo"): time.sleep(0.02)
a.close(); c.close(); s.close(); print("held ok")
PY
check_smcd_conn() {
        local addr=$1 what=$2 peer hp port rc
        rm -f "$tmp/hport" "$tmp/hgo"
        under_smcrun python3 "$tmp/hold.py" "$addr" "$tmp" >"$tmp/h.log" 2>&1 &
        hp=$!
        for _ in $(seq 200); do [ -s "$tmp/hport" ] && break; kill -0 $hp 2>/dev/null || break; sleep 0.05; done
        port=$(cat "$tmp/hport" 2>/dev/null)
        case $addr in *:*) peer="[$addr]:$port" ;; *) peer="$addr:$port" ;; esac
        if [ -n "$port" ] && "$smcctl" -j connections | python3 -c '
import json, sys
l = json.load(sys.stdin)
assert [e["mode"] for e in l if e["role"] == "client" and e["peer"] == sys.argv[1]] == ["SMCD"], l' "$peer" 2>"$tmp/err"
        then ok "$what: SMC-D"
        else nok "$what: not SMC-D: $(cat "$tmp/err" "$tmp/h.log")"; fi
        touch "$tmp/hgo"
        wait $hp; rc=$?
        [ $rc -eq 0 ] || nok "$what: exit $rc: $(cat "$tmp/h.log")"
}

# ---- devices at start: loopback-ism and lo with 127.0.0.1/8 ----
if devjson >"$tmp/dev.json" 2>"$tmp/err" && python3 - "$tmp/dev.json" <<'PY' 2>"$tmp/err"
import json, re, sys
d = json.load(open(sys.argv[1]))
assert set(d) >= {"ism", "roce", "netdevs", "netlink", "roce_note"}, d.keys()
assert len(d["ism"]) == 1, d["ism"]
i = d["ism"][0]
assert set(i) == {"name", "type", "state", "gid", "chid", "dmbs_in_use", "dmb_bytes_in_use", "connections"}, i
assert i["name"] == "loopback-ism" and i["type"] == "ISM" and i["state"] == "up" and i["chid"] == "ffff", i
assert re.fullmatch("[0-9a-f]{16}", i["gid"]) and int(i["gid"], 16) != 0, i
lo = [n for n in d["netdevs"] if n["name"] == "lo"]
assert len(lo) == 1, d["netdevs"]
lo = lo[0]
assert set(lo) == {"name", "ifindex", "state", "admin", "operstate", "carrier", "mtu", "mac", "addresses"}, lo
assert lo["state"] == "up" and lo["ifindex"] == 1 and "127.0.0.1/8" in lo["addresses"], lo
assert "::1/128" in lo["addresses"], lo
assert d["netlink"]["source"] == "netlink", d["netlink"]
if not d["roce"]:
    assert d["roce_note"], d
PY
then ok "devices: loopback-ism (gid $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["ism"][0]["gid"])' "$tmp/dev.json")), lo up with 127.0.0.1/8 and ::1/128"
else nok "devices at start: $(cat "$tmp/err") $(cat "$tmp/dev.json")"; fi
roce_n=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["roce"]))' "$tmp/dev.json")
note=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["roce_note"])' "$tmp/dev.json")
[ "$roce_n" = 0 ] && grep -qF "RoCE devices: none ($note)" "$tmp/smcd.log" \
        && ok "roce: empty here, and smcd's log says why: $note" \
        || { [ "$roce_n" != 0 ] && ok "roce: $roce_n port(s)" || nok "roce: no log line saying why ($note)"; }
gid1=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["ism"][0]["gid"])' "$tmp/dev.json")

# ---- an address appears live ----
a0=$(counter addr_events)
t0=$(date +%s%N)
ip addr add 10.77.0.1/32 dev lo
if wait_devices '"10.77.0.1/32" in [a for n in d["netdevs"] if n["name"] == "lo" for a in n["addresses"]]'; then
        t1=$(date +%s%N)
        ok "10.77.0.1/32 appears in devices ($(( (t1 - t0) / 1000000 )) ms incl. smcctl)"
else nok "10.77.0.1/32 not in devices: $(addrs_of lo | paste -sd' ')"; fi
a1=$(counter addr_events)
[ "$a1" -gt "$a0" ] && ok "addr_events counted ($a0 -> $a1)" || nok "addr_events $a0 -> $a1"
ip addr del 10.77.0.1/32 dev lo
wait_devices '"10.77.0.1/32" not in [a for n in d["netdevs"] if n["name"] == "lo" for a in n["addresses"]]' \
        && ok "10.77.0.1/32 gone from devices after ip addr del" || nok "10.77.0.1/32 still listed"

ip -6 addr add fd00:77::1/128 dev lo nodad
if wait_devices '"fd00:77::1/128" in [a for n in d["netdevs"] if n["name"] == "lo" for a in n["addresses"]]'; then
        ok "fd00:77::1/128 appears in devices"
        check_smcd_conn fd00:77::1 "connect to fd00:77::1 on a [::] listener"
else nok "fd00:77::1/128 not in devices: $(addrs_of lo | paste -sd' ')"; fi
ip -6 addr del fd00:77::1/128 dev lo
wait_devices '"fd00:77::1/128" not in [a for n in d["netdevs"] if n["name"] == "lo" for a in n["addresses"]]' \
        && ok "fd00:77::1/128 gone after ip addr del" || nok "fd00:77::1/128 still listed"

# ---- the connect decision follows the addresses at once ----
# One process under smcrun: a listener on 0.0.0.0; connect to 10.77.0.1 while it is not
# local (fails: no route); add the address and connect at once (well within the old
# getifaddrs cache's second): SMC-D; hold it for the checks below; delete the address
# and connect at once: not local any more, so TCP, which finds no route.
under_smcrun python3 - "$tmp" <<'PY' >"$tmp/hold.log" 2>&1 &
import os, socket, subprocess, sys, time
d = sys.argv[1]
env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
ip = lambda *a: subprocess.run(["ip"] + list(a), env=env, check=True)
s = socket.socket(); s.bind(("0.0.0.0", 0)); s.listen(4); port = s.getsockname()[1]
def conn():
    c = socket.socket(); c.settimeout(3)
    try:
        c.connect(("10.77.0.1", port)); return c
    except OSError as e:
        c.close(); return e
r = conn()
print("before add:", r if isinstance(r, OSError) else "connected")
assert isinstance(r, OSError), "connected to 10.77.0.1 before it was added"
ip("addr", "add", "10.77.0.1/32", "dev", "lo")
c = conn()
assert not isinstance(c, OSError), "after add: %s" % c
a, peer = s.accept()
c.sendall(b"x" * 1000); got = 0
while got < 1000: got += len(a.recv(65536))
print("after add: connected, echo ok, port", port)
open(d + "/port.tmp", "w").write("%d\n" % port); os.rename(d + "/port.tmp", d + "/port")
while not os.path.exists(d + "/go"): time.sleep(0.02)
a.close(); c.close()
ip("addr", "del", "10.77.0.1/32", "dev", "lo")
r = conn()
print("after del:", r if isinstance(r, OSError) else "connected")
assert isinstance(r, OSError), "connected to 10.77.0.1 after it was deleted"
s.close()
print("hold ok")
PY
hpid=$!
for _ in $(seq 300); do [ -s "$tmp/port" ] && break; kill -0 $hpid 2>/dev/null || break; sleep 0.05; done
if [ -s "$tmp/port" ]; then
        port=$(cat "$tmp/port")
        if "$smcctl" -j connections >"$tmp/conns.json" && python3 - "$tmp/conns.json" "$port" <<'PY' 2>"$tmp/err"
import json, sys
l = json.load(open(sys.argv[1])); port = int(sys.argv[2])
cl = [e for e in l if e["role"] == "client" and e["peer"] == "10.77.0.1:%d" % port]
assert len(cl) == 1 and cl[0]["mode"] == "SMCD", l
PY
        then ok "connect to 10.77.0.1 right after ip addr add is SMC-D (smcctl connections)"
        else nok "connection to 10.77.0.1 not SMC-D: $(cat "$tmp/err") $(cat "$tmp/conns.json")"; fi
        wait_devices 'd["ism"][0]["connections"] == 1 and d["ism"][0]["dmbs_in_use"] == 2 and d["ism"][0]["dmb_bytes_in_use"] > 0' \
                && ok "devices: loopback-ism counts 1 connection, 2 DMBs in use" \
                || nok "loopback-ism counters: $(cat "$tmp/dev.json")"
else nok "held connection did not come up: $(cat "$tmp/hold.log")"; fi
touch "$tmp/go"
wait "$hpid"; rc=$?; hpid=
[ $rc -eq 0 ] && ok "connect decision: $(paste -sd';' "$tmp/hold.log")" \
        || nok "connect decision: exit $rc: $(cat "$tmp/hold.log")"
wait_devices 'd["ism"][0]["connections"] == 0' && ok "loopback-ism: 0 connections after close" \
        || nok "loopback-ism connections after close: $(cat "$tmp/dev.json")"

# ---- link up / down of a veth pair ----
if ip link add nlt0 type veth peer name nlt1 2>"$tmp/err"; then
        wait_devices '{"nlt0", "nlt1"} <= {n["name"] for n in d["netdevs"]} and all(n["state"] == "down" for n in d["netdevs"] if n["name"].startswith("nlt"))' \
                && ok "veth nlt0/nlt1 appear, down" || nok "veth not in devices: $(cat "$tmp/dev.json")"
        ip addr add 10.79.0.1/24 dev nlt0
        up0=$(counter link_up)
        ip link set nlt0 up; ip link set nlt1 up
        wait_devices 'all(n["state"] == "up" and n["operstate"] == "UP" and n["carrier"] for n in d["netdevs"] if n["name"].startswith("nlt"))' \
                && ok "nlt0/nlt1 up in devices" || nok "nlt up: $(cat "$tmp/dev.json")"
        ip link set nlt1 down
        wait_devices '[(n["state"], n["admin"], n["operstate"]) for n in d["netdevs"] if n["name"] == "nlt0"] == [("down", "up", "LOWERLAYERDOWN")]' \
                && ok "peer down: nlt0 down (admin up, operstate LOWERLAYERDOWN)" || nok "nlt0 after peer down: $(cat "$tmp/dev.json")"
        ip link set nlt1 up
        wait_devices '[n["state"] for n in d["netdevs"] if n["name"] == "nlt0"] == ["up"]' \
                && ok "nlt0 up again" || nok "nlt0 up again: $(cat "$tmp/dev.json")"
        ip link set nlt0 down
        wait_devices '[(n["state"], n["admin"]) for n in d["netdevs"] if n["name"] == "nlt0"] == [("down", "down")]' \
                && ok "nlt0 admin down" || nok "nlt0 admin down: $(cat "$tmp/dev.json")"
        up1=$(counter link_up); down1=$(counter link_down)
        [ "$up1" -ge $((up0 + 3)) ] && [ "$down1" -ge 2 ] && ok "link_up / link_down counted ($up0 -> $up1, $down1)" \
                || nok "link counters: up $up0 -> $up1, down $down1"
        grep -q "Link nlt0 (ifindex [0-9]*) is up" "$tmp/smcd.log" &&
        grep -q "Link nlt0 (ifindex [0-9]*) is down (admin up, operstate LOWERLAYERDOWN, carrier off)" "$tmp/smcd.log" &&
        grep -q "Link nlt0 (ifindex [0-9]*) is down (admin down" "$tmp/smcd.log" \
                && ok "smcd logs nlt0's up/down transitions: $(grep -c 'Link nlt0' "$tmp/smcd.log") lines" \
                || nok "smcd log lacks nlt0 transitions: $(grep Link "$tmp/smcd.log")"
        # an address on a link that is down is still this host's (the kernel delivers to it)
        "$smcctl" -j devices | python3 -c '
import json, sys
n = [n for n in json.load(sys.stdin)["netdevs"] if n["name"] == "nlt0"][0]
assert n["mac"].count(":") == 5 and "10.79.0.1/24" in n["addresses"] and n["mtu"] == 1500, n' 2>"$tmp/err" \
                && ok "nlt0: MAC, mtu 1500, 10.79.0.1/24" || nok "nlt0 details: $(cat "$tmp/err")"
        ip link del nlt0
        wait_devices 'not any(n["name"].startswith("nlt") for n in d["netdevs"])' \
                && ok "veth removed from devices" || nok "veth still listed: $(cat "$tmp/dev.json")"
        grep -q "Link nlt0 (ifindex [0-9]*) was removed" "$tmp/smcd.log" && ok "smcd logs the removal" \
                || nok "no removal log line"
else
        skip "veth links: $(cat "$tmp/err")"
fi

# ---- a bridge (libnl files a bridge master under AF_BRIDGE only) and its port ----
if ip link add nlbr0 type bridge 2>"$tmp/err"; then
        ip addr add 10.79.0.1/24 dev nlbr0
        ip link set nlbr0 up
        wait_devices '[(n["name"], "10.79.0.1/24" in n["addresses"]) for n in d["netdevs"] if n["name"] == "nlbr0"] == [("nlbr0", True)]' \
                && ok "bridge nlbr0 listed once, with its address" || nok "bridge not in devices: $(cat "$tmp/dev.json")"
        if ip link add nlt2 type veth peer name nlt3 2>/dev/null && ip link set nlt2 master nlbr0; then
                wait_devices '[n["name"] for n in d["netdevs"]].count("nlt2") == 1 and [n["name"] for n in d["netdevs"]].count("nlbr0") == 1' \
                        && ok "a bridge port and its bridge are listed once each" || nok "bridge port: $(cat "$tmp/dev.json")"
                ip link del nlt2
        fi
        ip link del nlbr0
        wait_devices 'not any(n["name"] == "nlbr0" for n in d["netdevs"])' \
                && ok "bridge removed from devices" || nok "bridge still listed: $(cat "$tmp/dev.json")"
else
        skip "bridge: $(cat "$tmp/err")"
fi

# ---- overrun: the kernel drops notifications while smcd is stopped; smcd resyncs ----
n=3000
for i in $(seq 0 $((n - 1))); do echo "addr add 10.78.$((i / 250)).$((i % 250 + 1))/32 dev lo"; done >"$tmp/add.batch"
sed 's/^addr add/addr del/' "$tmp/add.batch" >"$tmp/del.batch"
o0=$(counter overruns); r0=$(counter resyncs)
kill -STOP "$spid"
ip -batch "$tmp/add.batch"
kill -CONT "$spid"
if wait_devices "sum(1 for x in d['netdevs'] if x['name'] == 'lo' for a in x['addresses'] if a.startswith('10.78.')) == $n"; then
        ok "after an overrun: all $n new addresses listed"
else nok "after the add burst: $(addrs_of lo | grep -c '^10\.78\.') of $n listed"; fi
o1=$(counter overruns); r1=$(counter resyncs)
rmem_max=$(cat /proc/sys/net/core/rmem_max 2>/dev/null || echo 0)
if [ "$o1" -gt "$o0" ] && [ "$r1" -gt "$r0" ] && grep -q "overrun" "$tmp/smcd.log"; then
        ok "overrun detected and resynced (overruns $o0 -> $o1, resyncs $r0 -> $r1)"
elif [ "$o1" = "$o0" ] && [ "$rmem_max" -ge 1048576 ]; then
        # smcd asks for 1 MiB; with a raised net.core.rmem_max $n messages may fit
        skip "no overrun with net.core.rmem_max $rmem_max"
else nok "no overrun/resync seen (overruns $o0 -> $o1, resyncs $r0 -> $r1)"; fi
check_smcd_conn 10.78.11.250 "connect to 10.78.11.250 (added during the overrun)"
kill -STOP "$spid"
ip -batch "$tmp/del.batch"
kill -CONT "$spid"
wait_devices "not any(a.startswith('10.78.') for x in d['netdevs'] for a in x['addresses'])" \
        && ok "after a delete burst: none of them listed (overruns $(counter overruns))" \
        || nok "after the delete burst: $(addrs_of lo | grep -c '^10\.78\.') still listed"
out=$(under_smcrun python3 - <<'PY' 2>&1
import socket
s = socket.socket(); s.bind(("0.0.0.0", 0)); s.listen(1)
try:
    socket.create_connection(("10.78.11.250", s.getsockname()[1]), timeout=3); print("connected")
except OSError as e: print("refused:", e)
PY
)
echo "$out" | grep -q "^refused" && ok "connect to a deleted address is not SMC-D: $out" || nok "after delete burst: $out"
kill -0 "$spid" && ok "smcd survived the bursts" || nok "smcd died"
grep "Netlink resync done" "$tmp/smcd.log" | sed 's/^<.>smcd: /# /' 

# ---- forged and malformed messages (root may unicast to smcd's netlink socket) ----
b0=$(counter bad_messages)
cat >"$tmp/inject.py" <<'PY'

import os, socket, struct, sys
pid = int(sys.argv[1])
inodes = set()
for fd in os.listdir("/proc/%d/fd" % pid):
    try:
        l = os.readlink("/proc/%d/fd/%s" % (pid, fd))
    except OSError:
        continue
    if l.startswith("socket:["):
        inodes.add(int(l[8:-1]))
# smcd's subscribed NETLINK_ROUTE socket: protocol 0, groups != 0
ports = [int(f[2]) for f in (l.split() for l in open("/proc/net/netlink").read().splitlines()[1:])
         if f[1] == "0" and int(f[3], 16) != 0 and int(f[9]) in inodes]
assert len(ports) == 1, ports
s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
s.bind((0, 0))
msg = lambda typ, payload: struct.pack("=IHHII", 16 + len(payload), typ, 0, 1, 0) + payload
attr = lambda t, data: struct.pack("=HH", 4 + len(data), t) + data
ifa = struct.pack("=BBBBI", socket.AF_INET, 32, 0, 0, 1)  # ifaddrmsg on lo
a = socket.inet_aton("10.66.0.1")
forged = [msg(20, ifa + attr(2, a) + attr(1, a))]          # a forged RTM_NEWADDR 10.66.0.1/32 lo
bad = [msg(16, b""),                                       # RTM_NEWLINK without its ifinfomsg
       msg(20, ifa + struct.pack("=HH", 200, 2) + a),      # an attribute longer than the message
       msg(0x7777, b"\0" * 8),                             # an unknown type
       b"\xff" * 7]                                        # not even a header
for m in forged if sys.argv[2] == "forged" else bad:
    s.sendto(m, (ports[0], 0))
PY
# the forged address alone first (a malformed message after it would make smcd resync,
# which would remove it anyway), then a real change that smcd must read after it
if python3 "$tmp/inject.py" "$spid" forged 2>"$tmp/err" && ip addr add 10.77.0.9/32 dev lo &&
   python3 "$tmp/inject.py" "$spid" bad 2>>"$tmp/err"; then
        wait_devices '"10.77.0.9/32" in [a for n in d["netdevs"] if n["name"] == "lo" for a in n["addresses"]]' \
                && ok "after forged messages: still live (10.77.0.9/32 appears)" || nok "not live after forged messages"
        python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(any(a.startswith("10.66.") for n in d["netdevs"] for a in n["addresses"]))' "$tmp/dev.json" \
                && ok "the forged address is not listed" || nok "forged address listed: $(cat "$tmp/dev.json")"
        b1=$(counter bad_messages)
        [ "$b1" -ge $((b0 + 4)) ] && ok "forged/malformed messages dropped and counted (bad_messages $b0 -> $b1)" \
                || nok "bad_messages $b0 -> $b1"
        ip addr del 10.77.0.9/32 dev lo
else
        nok "injecting netlink messages: $(cat "$tmp/err")"
fi
kill -0 "$spid" && ok "smcd alive after forged messages" || nok "smcd died on forged messages"

# ---- text and JSON agree ----
"$smcctl" devices >"$tmp/text" 2>"$tmp/err" || nok "smcctl devices: $(cat "$tmp/err")"
"$smcctl" -j devices >"$tmp/dev.json"
if python3 - "$tmp/text" "$tmp/dev.json" <<'PY' 2>"$tmp/err"
import json, sys
text = open(sys.argv[1]).read().split("\n\n")
d = json.load(open(sys.argv[2]))
assert len(text) == 3, text
for block, key, title, header in zip(text, ("ism", "roce", "netdevs"), ("ISM devices:", "RoCE devices:", "Netdevs:"),
                                    ("NAME  TYPE  STATE  GID", "NAME  PORT  STATE", "NAME  IFINDEX  STATE")):
    lines = block.strip("\n").split("\n")
    assert lines[0].startswith(title), lines
    assert " ".join(lines[1].split()).startswith(" ".join(header.split())), lines
    names = [l.split()[0] for l in lines[2:]]
    assert names == [r["name"] for r in d[key]], (key, names, d[key])
    # aligned: every row as long as the header or longer (last column unpadded)
    col2 = lines[1].index(lines[1].split()[1])
    for l in lines[2:]:
        assert l[col2 - 2:col2] == "  " or lines[1].split()[1] in ("IFINDEX", "PORT"), (l, lines[1])
lo = [l for l in text[2].split("\n") if l.startswith("lo ")][0]
assert "127.0.0.1/8,::1/128" in lo, lo
PY
then ok "devices text and JSON agree (sections, headers, names; lo's addresses)"
else nok "devices text vs JSON: $(cat "$tmp/err")"; cat "$tmp/text"; fi
"$smcctl" -d devices >"$tmp/text" 2>&1
head -3 "$tmp/text" | tail -1 | grep -q "^loopback-ism" && grep -q "^NAME  *IFINDEX  *STATE  *ADMIN  *OPERSTATE  *CARRIER  *MTU  *MAC  *ADDRESSES$" "$tmp/text" \
        && grep -q "^NAME  *PORT  *STATE  *LINK_LAYER  *MTU  *GUID  *NETDEV  *LINKS  *PNET_ID  *GIDS$" "$tmp/text" \
        && grep -q "^lo .* 00:00:00:00:00:00 " "$tmp/text" \
        && ok "devices -d: more columns (GIDs, MAC ...)" || nok "devices -d: $(cat "$tmp/text")"
"$smcctl" -j -p devices | python3 -c 'import json,sys; json.load(sys.stdin)' && ok "devices -j -p is JSON" || nok "devices -j -p"
"$smcctl" dev sh >/dev/null 2>&1 && ok "devices prefixes (dev sh)" || nok "devices prefixes"
v=$("$smcctl" -j devices | python3 -c 'import json,sys; print(json.load(sys.stdin)["ism"][0]["gid"])')
[ "$v" = "$gid1" ] && ok "loopback-ism gid stable within a run" || nok "gid changed: $gid1 -> $v"

# ---- linkgroups: empty but well-formed ----
out=$("$smcctl" linkgroups 2>&1); rc=$?
[ $rc -eq 0 ] && [ "$(echo "$out" | wc -l)" = 1 ] && echo "$out" | grep -q "^ID  *ROLE  *PEER  *TYPE  *DEVICE  *PORT  *LINKS  *CONNS$" \
        && ok "linkgroups: a header, no rows: $out" || nok "linkgroups text: rc $rc: $out"
out=$("$smcctl" -j linkgroups 2>&1)
[ "$out" = "[]" ] && ok "linkgroups -j: []" || nok "linkgroups -j: $out"
out=$("$smcctl" -d link show 2>&1)
echo "$out" | grep -q "PEER_SYSTEM_ID" && ok "linkgroups -d: more columns" || nok "linkgroups -d: $out"

# ---- bad arguments ----
"$smcctl" devices bogus >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -ne 0 ] && grep -q 'unknown command "bogus" for devices' "$tmp/err" \
        && ok "devices bogus: exit $rc: $(cat "$tmp/err")" || nok "devices bogus: exit $rc $(cat "$tmp/err")"
"$smcctl" devices show extra >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && grep -q "unexpected argument: extra" "$tmp/err" && ok "devices show extra: exit 2" \
        || nok "devices show extra: exit $rc $(cat "$tmp/err")"
"$smcctl" linkgroups bogus >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -ne 0 ] && grep -q 'unknown command' "$tmp/err" && ok "linkgroups bogus: exit $rc" || nok "linkgroups bogus: exit $rc"
"$smcctl" linkgroups show x >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && ok "linkgroups show x: exit 2" || nok "linkgroups show x: exit $rc"

# ---- D-Bus properties and introspection ----
if command -v busctl >/dev/null; then
        bc() { busctl --address="$DBUS_SYSTEM_BUS_ADDRESS" "$@"; }
        nd=$(bc get-property org.smcd.smcd1 /org/smcd/smcd1/devices org.smcd.smcd1.Devices NetdevCount)
        ism=$(bc get-property org.smcd.smcd1 /org/smcd/smcd1/devices org.smcd.smcd1.Devices IsmCount)
        lg=$(bc get-property org.smcd.smcd1 /org/smcd/smcd1/linkgroups org.smcd.smcd1.LinkGroups Count)
        ae=$(bc get-property org.smcd.smcd1 /org/smcd/smcd1/devices org.smcd.smcd1.Devices AddressEvents)
        [ "$nd" = "u 1" ] && [ "$ism" = "u 1" ] && [ "$lg" = "u 0" ] && [ "${ae%% *}" = t ] && [ "${ae#t }" -gt 6000 ] \
                && ok "properties: NetdevCount $nd, IsmCount $ism, LinkGroups.Count $lg, AddressEvents $ae" \
                || nok "properties: NetdevCount '$nd' IsmCount '$ism' Count '$lg' AddressEvents '$ae'"
        out=$(bc introspect org.smcd.smcd1 /org/smcd/smcd1/devices 2>&1)
        echo "$out" | grep -q "org.smcd.smcd1.Devices" && echo "$out" | grep -q "\.List  *method  *-  *s" \
                && ok "introspect Devices" || nok "introspect Devices: $out"
        out=$(bc introspect org.smcd.smcd1 /org/smcd/smcd1/linkgroups 2>&1)
        echo "$out" | grep -q "org.smcd.smcd1.LinkGroups" && ok "introspect LinkGroups" || nok "introspect LinkGroups: $out"
else
        skip "busctl not installed"
fi

kill "$spid"; wait "$spid"; rc=$?; spid=
[ $rc -eq 0 ] && ok "smcd exits cleanly" || nok "smcd exit $rc"
grep -E "^<[0-3]>" "$tmp/smcd.log" && nok "errors in smcd's log" || ok "no errors in smcd's log"

# --roce-dev naming no RoCE port of this host: a warning, and smcd serves on (SMC-D)
mkdir "$tmp/run2"
"$smcd" --runtime-dir "$tmp/run2" --no-bus --roce-dev nosuch0:9 >"$tmp/smcd2.log" 2>&1 &
spid=$!
for _ in $(seq 100); do grep -q " ready " "$tmp/smcd2.log" && break; sleep 0.05; done
if grep -q "^<4>.*--roce-dev nosuch0:9: no RoCE (Ethernet) port" "$tmp/smcd2.log" && grep -q " ready " "$tmp/smcd2.log"; then
        ok "--roce-dev of no port: warned, smcd ready"
else
        nok "--roce-dev of no port: $(cat "$tmp/smcd2.log")"
fi
kill "$spid"; wait "$spid"; spid=
# ... but a malformed one is a usage error (helper 121: ":abc" and ":0" only warned)
for v in nosuch0:abc nosuch0:0 nosuch0: :1 nosuch0:1:2 nosuch0:256; do
        out=$("$smcd" --runtime-dir "$tmp/run3" --no-bus --roce-dev "$v" 2>&1); rc=$?
        if [ $rc -eq 2 ] && echo "$out" | grep -q "roce-dev: expected an RDMA device name"; then
                ok "--roce-dev $v: exit 2"
        else
                nok "--roce-dev $v: exit $rc: $out"
        fi
done
[ $failed -eq 0 ] || { echo "--- smcd log (tail)"; tail -40 "$tmp/smcd.log"; }
exit $failed
