#!/bin/bash
# RoCE discovery for real: in a throw-away qemu VM (tests/vm/run-vm), soft-RoCE (rdma_rxe)
# on a veth link, a private dbus-daemon and smcd; `smcctl devices` must list rxe0 with
# its netdev, port state and RoCE v2 GID, follow the netdev going down and up, and show
# a device created after smcd started. Args: SMCD SMCCTL RUN_VM.
# Skips (77) when the VM cannot run (no qemu or kernel: run-vm's 77), or inside it
# without rdma_rxe, the rdma tool or dbus-daemon. TAP-ish output.
set -u
smcd=$1 smcctl=$2 runvm=$3

if [ -z "${SMCD_TEST_IN_VM:-}" ]; then
        [ -x "$runvm" ] || { echo "SKIP: $runvm missing"; exit 77; }
        # run-vm copies the script; the library it sources is read from the host tree
        exec "$runvm" --timeout 300 --env SMCD_TEST_IN_VM=1 \
                --env SMCD_TEST_LIB="$(realpath "$(dirname "$0")")/lib-bus.sh" "$0" "$@"
fi

for p in ip rdma dbus-daemon python3 modprobe; do
        command -v "$p" >/dev/null || { echo "SKIP: $p not installed in the VM"; exit 77; }
done
modprobe rdma_rxe 2>/dev/null || { echo "SKIP: no rdma_rxe module for $(uname -r)"; exit 77; }

tmp=$(mktemp -d /tmp/smcd-test-rxe.XXXXXX)
spid= dpid=
cleanup() {
        [ -n "$spid" ] && kill "$spid" 2>/dev/null && wait "$spid" 2>/dev/null
        [ -n "$dpid" ] && kill "$dpid" 2>/dev/null && wait "$dpid" 2>/dev/null
        rdma link delete rxe0 2>/dev/null
        rdma link delete rxe1 2>/dev/null
        rm -rf "$tmp"
}
trap cleanup EXIT
failed=0
ok() { echo "ok - $*"; }
nok() { echo "not ok - $*"; failed=1; }

ip link set lo up
ip link add rxv0 type veth peer name rxv1 || { echo "SKIP: no veth"; exit 77; }
ip addr add 10.88.0.1/24 dev rxv0
ip addr add 10.88.0.2/24 dev rxv1
ip link set rxv0 up
ip link set rxv1 up
rdma link add rxe0 type rxe netdev rxv0 || { nok "rdma link add rxe0"; exit 1; }

# shellcheck source=tests/lib-bus.sh
. "$SMCD_TEST_LIB"
start_bus "$tmp" bus || exit 1
dpid=$BUS_PID
mkdir "$tmp/run"
"$smcd" -v --runtime-dir "$tmp/run" --state-file "$tmp/state.json" >"$tmp/smcd.log" 2>&1 &
spid=$!
for _ in $(seq 200); do "$smcctl" stats >/dev/null 2>&1 && break; sleep 0.1; done

# wait until the python condition $1 on d (the Devices JSON) holds; 30 s at most (one
# python process polls: under TCG starting python costs about a second)
wait_devices() {
        python3 - "$1" "$smcctl" "$tmp/dev.json" <<'PY'
import json, subprocess, sys, time
cond, smcctl, out = sys.argv[1:4]
end = time.monotonic() + 30
while True:
    p = subprocess.run([smcctl, "-j", "devices"], capture_output=True, text=True)
    open(out, "w").write(p.stdout)
    try:
        d = json.loads(p.stdout)
        if eval(cond):
            sys.exit(0)
    except (ValueError, KeyError, IndexError):
        pass
    if time.monotonic() > end:
        sys.exit(1)
    time.sleep(0.1)
PY
}
rxe='[p for p in d["roce"] if p["name"] == "rxe0"]'
# RoCE v2 GID of 10.88.0.1: ::ffff:10.88.0.1
v2gid="0000:0000:0000:0000:0000:ffff:0a58:0001"
if wait_devices "len($rxe) == 1 and $rxe[0]['netdev'] == 'rxv0' and $rxe[0]['state'] == 'ACTIVE' and any(g['gid'] == '$v2gid' and g['type'] == 'RoCE v2' and g['netdev'] == 'rxv0' for g in $rxe[0]['gids'])"; then
        ok "devices -j: rxe0 port 1 ACTIVE on rxv0 with RoCE v2 GID $v2gid"
else nok "rxe0 in devices: $(cat "$tmp/dev.json")"; grep -i roce "$tmp/smcd.log"; fi
python3 - "$tmp/dev.json" <<'PY' && ok "rxe0 row keys: $(python3 -c 'import json,sys; print(sorted(json.load(open(sys.argv[1]))["roce"][0]))' "$tmp/dev.json")" || nok "rxe0 row keys"
import json, sys
d = json.load(open(sys.argv[1]))
r = [p for p in d["roce"] if p["name"] == "rxe0"][0]
assert set(r) == {"name", "port", "state", "link_layer", "mtu", "guid", "netdev", "gids", "links", "pnet_id"}, r
assert r["port"] == 1 and r["link_layer"] == "Ethernet" and r["links"] == 0 and r["pnet_id"] == "", r
assert d["roce_note"] == "", d
PY
"$smcctl" devices >"$tmp/text" 2>&1
grep -q "^rxe0  *1  *ACTIVE  *rxv0  *0" "$tmp/text" && ok "devices text: $(grep '^rxe0' "$tmp/text")" \
        || nok "devices text: $(cat "$tmp/text")"
"$smcctl" -d devices >"$tmp/text" 2>&1
grep "^rxe0" "$tmp/text" | grep -q "$v2gid(RoCEv2)" && ok "devices -d: rxe0 with its GIDs" || nok "devices -d: $(cat "$tmp/text")"

# the port follows its netdev: rescanned on link events
ip link set rxv0 down
wait_devices "len($rxe) == 1 and $rxe[0]['state'] == 'DOWN'" && ok "rxv0 down: rxe0 port DOWN" \
        || nok "rxv0 down: $(cat "$tmp/dev.json")"
ip link set rxv0 up
wait_devices "len($rxe) == 1 and $rxe[0]['state'] == 'ACTIVE'" && ok "rxv0 up: rxe0 port ACTIVE" \
        || nok "rxv0 up: $(cat "$tmp/dev.json")"

# a device created while smcd runs (no route netlink event): seen on the next read
rdma link add rxe1 type rxe netdev rxv1
wait_devices '[p["netdev"] for p in d["roce"] if p["name"] == "rxe1"] == ["rxv1"]' \
        && ok "rxe1 added later is listed (on rxv1)" || nok "rxe1: $(cat "$tmp/dev.json")"
rdma link delete rxe1
wait_devices 'not any(p["name"] == "rxe1" for p in d["roce"])' && ok "rxe1 deleted: gone" || nok "rxe1 still listed"

kill "$spid"; wait "$spid"; rc=$?; spid=
[ $rc -eq 0 ] && ok "smcd exits cleanly" || nok "smcd exit $rc"
grep "RoCE devices" "$tmp/smcd.log" | head -3
[ $failed -eq 0 ] || tail -30 "$tmp/smcd.log"
exit $failed
