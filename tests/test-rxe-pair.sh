#!/bin/bash
# Soft-RoCE for real between two "hosts" in a throw-away qemu VM (tests/vm/run-vm, TCG):
# tests/vm/rxe-pair-setup.sh makes rxe0 on smc0a (10.77.0.1) and rxe1 on smc0b
# (10.77.0.2), the two ends of one veth pair; then real RDMA traffic between them:
# ibv_rc_pingpong (RC SEND/RECV, TCP rendezvous over the veth addresses), ib_write_bw
# (RDMA WRITE bandwidth), ib_send_lat (SEND latency), rping (rdma_cm connection
# set-up and RDMA READ/WRITE). Checks exit statuses, the peers' GIDs in the outputs, and
# that the packets crossed the veth and the rxe devices (counters); prints timings.
# Then two paths (RXE_PAIR_LINKS=2: also rxe2 on smc1a 10.78.0.1 / rxe3 on smc1b
# 10.78.0.2): ibv_rc_pingpong over each, each path's traffic on its own veth and rxe;
# `ip link set smc1a down` takes rxe2's port out of ACTIVE while rxe0 <-> rxe1 still
# works; a one-path set-up after that removes the second path again.
# Args: RUN_VM [KERNEL] (KERNEL: a run-vm --kernel VERSION or series, e.g. 6.12).
# Skips (77) without qemu or the kernel (run-vm's 77), or without the RDMA user-space
# tools (scripts/install-vm-deps.sh installs all of them). TAP-ish output.
set -u

if [ -z "${SMCD_TEST_IN_VM:-}" ]; then
        runvm=$1 kernel=${2:-}
        [ -x "$runvm" ] || { echo "SKIP: $runvm missing"; exit 77; }
        # the VM's root is this machine's: check the tools here, before a boot
        for p in ibv_rc_pingpong ib_write_bw ib_send_lat rping rdma ip; do
                command -v $p >/dev/null || {
                        echo "SKIP: $p not installed (scripts/install-vm-deps.sh)"; exit 77; }
        done
        kargs=()
        [ -n "$kernel" ] && kargs=(--kernel "$kernel")
        "$runvm" "${kargs[@]}" --check || exit 77
        # run-vm copies this script into the VM: the setup script's path comes by --env;
        # booted again (up to 3 boots) only when the guest kernel crashed (6.12 under TCG)
        exec "$(dirname "$0")/vm/retry-crashed" 3 \
                "$runvm" "${kargs[@]}" --timeout 240 --env SMCD_TEST_IN_VM=1 \
                --env RXE_PAIR_SETUP="$(realpath "$(dirname "$0")")/vm/rxe-pair-setup.sh" "$0"
fi

failed=0
ok() { echo "ok - $*"; }
nok() { echo "not ok - $*"; failed=1; }
now() { read -r up _ </proc/uptime; echo "$up"; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f s", b - a }'; }
tmp=$(mktemp -d /tmp/rxe-pair.XXXXXX)
bg=()
cleanup() {
        for p in "${bg[@]}"; do kill "$p" 2>/dev/null; done
        rm -rf "$tmp"
}
trap cleanup EXIT

echo "# kernel $(uname -r)"
t=$(now)
if ! vars=$(sh "$RXE_PAIR_SETUP"); then
        nok "rxe-pair-setup.sh failed"
        exit 1
fi
eval "$vars"
ok "rxe-pair-setup: $RXE_A_DEV/$RXE_A_NETDEV GID index $RXE_A_GID_INDEX," \
        "$RXE_B_DEV/$RXE_B_NETDEV GID index $RXE_B_GID_INDEX ($(since "$t"))"

# wait_tcp_listen PORT: until something listens on TCP PORT (10 s at most)
wait_tcp_listen() {
        local hex i
        hex=$(printf '%04X' "$1")
        for ((i = 0; i < 100; i++)); do
                grep -q "^ *[0-9]*: [0-9A-F]*:$hex [0-9A-F]*:0000 0A" /proc/net/tcp && return 0
                sleep 0.1
        done
        return 1
}

# counters: the veth's and the rxe ports' packets; snap [A_NETDEV B_NETDEV A_DEV B_DEV]
# (default: the first path)
counter() { cat "$1" 2>/dev/null || echo 0; }
snap() {
        echo "$(counter /sys/class/net/"${1:-$RXE_A_NETDEV}"/statistics/tx_packets)" \
                "$(counter /sys/class/net/"${2:-$RXE_B_NETDEV}"/statistics/rx_packets)" \
                "$(counter /sys/class/infiniband/"${3:-$RXE_A_DEV}"/ports/1/hw_counters/sent_pkts)" \
                "$(counter /sys/class/infiniband/"${4:-$RXE_B_DEV}"/ports/1/hw_counters/rcvd_pkts)"
}
# port_state DEV: 4 for ACTIVE (sysfs "4: ACTIVE"), 1 for DOWN, ...
port_state() {
        local s=
        read -r s _ <"/sys/class/infiniband/$1/ports/1/state" 2>/dev/null
        echo "${s%:}"
}

# server_client NAME SERVER-CMD... -- CLIENT-CMD...: the server in the background (on
# host B), the client once its TCP port 18515 listens (host A); both must exit 0 within
# 60 s. Outputs in $tmp/NAME.server / $tmp/NAME.client.
server_client() {
        local name=$1 s=() c=() spid rc src
        shift
        while [ "$1" != -- ]; do s+=("$1"); shift; done
        shift
        c=("$@")
        timeout 60 "${s[@]}" >"$tmp/$name.server" 2>&1 &
        spid=$!
        bg+=("$spid")
        if ! wait_tcp_listen 18515; then
                echo "# $name: the server did not listen on 18515"
                kill "$spid" 2>/dev/null
                wait "$spid"
                return 1
        fi
        timeout 60 "${c[@]}" >"$tmp/$name.client" 2>&1
        rc=$?
        wait "$spid"
        src=$?
        [ $rc -eq 0 ] && [ $src -eq 0 ] && return 0
        echo "# $name: client exit $rc, server exit $src"
        sed 's/^/#   client: /' "$tmp/$name.client"
        sed 's/^/#   server: /' "$tmp/$name.server"
        return 1
}

# pingpong NAME ITERS A_DEV A_GID_INDEX A_IP B_DEV B_GID_INDEX B_IP: ibv_rc_pingpong
# (4 KiB, buffers validated) from host A's A_DEV to host B's B_DEV; each side must see
# the other's IPv4-mapped GID and ITERS iterations. ok/nok line; 0 if ok.
pingpong() {
        local name=$1 n=$2 ad=$3 ag=$4 ai=$5 bd=$6 bg_=$7 bi=$8 t el
        t=$(now)
        if ! server_client "$name" ibv_rc_pingpong -d "$bd" -g "$bg_" -n "$n" -c -- \
                ibv_rc_pingpong -d "$ad" -g "$ag" -n "$n" -c "$bi"; then
                nok "ibv_rc_pingpong $ad -> $bd ($name)"
                return 1
        fi
        el=$(since "$t")
        if grep -q "remote address: .*GID ::ffff:$bi\$" "$tmp/$name.client" &&
                grep -q "remote address: .*GID ::ffff:$ai\$" "$tmp/$name.server" &&
                grep -q "^$n iters in" "$tmp/$name.client" &&
                grep -q "^$n iters in" "$tmp/$name.server"; then
                ok "ibv_rc_pingpong $ad -> $bd ($ai -> $bi): $(grep iters "$tmp/$name.client") ($el)"
                return 0
        fi
        nok "ibv_rc_pingpong $ad -> $bd output: $(cat "$tmp/$name.client" "$tmp/$name.server")"
        return 1
}

# 1. ibv_rc_pingpong: RC QPs, SEND/RECV, 4 KiB x 500 both ways, buffers validated
read -r a_tx0 b_rx0 a_sent0 b_rcvd0 <<<"$(snap)"
t=$(now)
iters=500
if server_client pingpong \
        ibv_rc_pingpong -d "$RXE_B_DEV" -g "$RXE_B_GID_INDEX" -n $iters -c -- \
        ibv_rc_pingpong -d "$RXE_A_DEV" -g "$RXE_A_GID_INDEX" -n $iters -c "$RXE_B_IP"; then
        el=$(since "$t")
        if grep -q "remote address: .*GID ::ffff:$RXE_B_IP\$" "$tmp/pingpong.client" &&
                grep -q "remote address: .*GID ::ffff:$RXE_A_IP\$" "$tmp/pingpong.server" &&
                grep -q "^$iters iters in" "$tmp/pingpong.client" &&
                grep -q "^$iters iters in" "$tmp/pingpong.server"; then
                ok "ibv_rc_pingpong rxe0 -> rxe1: $(grep iters "$tmp/pingpong.client") ($el)"
        else
                nok "ibv_rc_pingpong output: $(cat "$tmp/pingpong.client" "$tmp/pingpong.server")"
        fi
else
        nok "ibv_rc_pingpong"
fi
read -r a_tx1 b_rx1 a_sent1 b_rcvd1 <<<"$(snap)"
# 500 SENDs of 4 KiB at MTU 1024: >= 2000 RoCE packets each way
d_tx=$((a_tx1 - a_tx0)) d_rx=$((b_rx1 - b_rx0)) d_sent=$((a_sent1 - a_sent0)) d_rcvd=$((b_rcvd1 - b_rcvd0))
if [ $d_tx -ge $((iters * 4)) ] && [ $d_rx -ge $((iters * 4)) ] &&
        [ $d_sent -ge $((iters * 4)) ] && [ $d_rcvd -ge $((iters * 4)) ]; then
        ok "traffic crossed the veth: $RXE_A_NETDEV tx +$d_tx, $RXE_B_NETDEV rx +$d_rx packets;" \
                "$RXE_A_DEV sent_pkts +$d_sent, $RXE_B_DEV rcvd_pkts +$d_rcvd"
else
        nok "counters: $RXE_A_NETDEV tx +$d_tx, $RXE_B_NETDEV rx +$d_rx, $RXE_A_DEV sent +$d_sent," \
                "$RXE_B_DEV rcvd +$d_rcvd (want >= $((iters * 4)) each)"
fi

# 2. ib_write_bw: RDMA WRITE, 64 KiB x 300
t=$(now)
if server_client write_bw \
        ib_write_bw -d "$RXE_B_DEV" -x "$RXE_B_GID_INDEX" -s 65536 -n 300 -F -- \
        ib_write_bw -d "$RXE_A_DEV" -x "$RXE_A_GID_INDEX" -s 65536 -n 300 -F "$RXE_B_IP"; then
        el=$(since "$t")
        # the result row: #bytes #iterations BW-peak BW-average MsgRate
        row=$(awk '$1 == 65536 && $2 == 300 { print }' "$tmp/write_bw.client")
        bw=$(echo "$row" | awk '{ print $4 }')
        if [ -n "$row" ] && awk -v b="$bw" 'BEGIN { exit !(b > 0) }'; then
                ok "ib_write_bw rxe0 -> rxe1: 64 KiB x 300, average $bw MB/s ($el)"
        else
                nok "ib_write_bw: no result row: $(cat "$tmp/write_bw.client")"
        fi
else
        nok "ib_write_bw"
fi

# 3. ib_send_lat: SEND ping-pong, 64 B x 1000
t=$(now)
if server_client send_lat \
        ib_send_lat -d "$RXE_B_DEV" -x "$RXE_B_GID_INDEX" -s 64 -n 1000 -F -- \
        ib_send_lat -d "$RXE_A_DEV" -x "$RXE_A_GID_INDEX" -s 64 -n 1000 -F "$RXE_B_IP"; then
        el=$(since "$t")
        # #bytes #iterations t_min t_max t_typical t_avg ...
        row=$(awk '$1 == 64 && $2 == 1000 { print }' "$tmp/send_lat.client")
        if [ -n "$row" ]; then
                ok "ib_send_lat rxe0 -> rxe1: 64 B x 1000, typical $(echo "$row" | awk '{ print $5 }') us," \
                        "average $(echo "$row" | awk '{ print $6 }') us ($el)"
        else
                nok "ib_send_lat: no result row: $(cat "$tmp/send_lat.client")"
        fi
else
        nok "ib_send_lat"
fi

# 4. rping: rdma_cm address/route resolution and connection (its reverse-route check
# needs the oif rules), then RDMA READ/WRITE + SEND, 10 pings of 64 B
t=$(now)
timeout 60 rping -s -a "$RXE_B_IP" -C 10 -S 64 -v >"$tmp/rping.server" 2>&1 &
spid=$!
bg+=("$spid")
crc=1
for ((i = 0; i < 50; i++)); do
        # the listener is ready when its cm_id shows up; else retry the refused client
        timeout 60 rping -c -a "$RXE_B_IP" -I "$RXE_A_IP" -C 10 -S 64 -v >"$tmp/rping.client" 2>&1
        crc=$?
        [ $crc -eq 0 ] && break
        grep -q "ping data" "$tmp/rping.client" && break
        sleep 0.2
done
wait "$spid"
src=$?
n=$(grep -c "ping data: rdma-ping-" "$tmp/rping.client")
if [ $crc -eq 0 ] && [ $src -eq 0 ] && [ "$n" -eq 10 ]; then
        ok "rping (rdma_cm) $RXE_A_IP -> $RXE_B_IP: 10 pings, $i retries ($(since "$t"))"
else
        nok "rping: client exit $crc ($n pings), server exit $src:" \
                "$(cat "$tmp/rping.client" "$tmp/rping.server" | tail -20)"
fi

# 5. two paths (RXE_PAIR_LINKS=2), set up over the first one's state: rxe0 <-> rxe1
# over 10.77 and rxe2 <-> rxe3 over 10.78, each path's RoCE traffic on its own devices
t=$(now)
if vars=$(RXE_PAIR_LINKS=2 sh "$RXE_PAIR_SETUP" 2>"$tmp/setup-2") && eval "$vars" &&
        [ "$(echo "$vars" | wc -l)" -eq 3 ] && [ "${RXE_A2_DEV:-}" = rxe2 ] &&
        [ "${RXE_B2_DEV:-}" = rxe3 ] && [ "$RXE_A2_NETDEV" = smc1a ] &&
        [ "$RXE_B2_NETDEV" = smc1b ] && [ -n "$RXE_A2_GID_INDEX" ] &&
        [ -n "$RXE_B2_GID_INDEX" ] && [ "$(rdma link show | grep -c 'state ACTIVE')" -eq 4 ]; then
        ok "rxe-pair-setup.sh with RXE_PAIR_LINKS=2: 4 ports ACTIVE, $RXE_A2_DEV/$RXE_A2_NETDEV" \
                "GID index $RXE_A2_GID_INDEX, $RXE_B2_DEV/$RXE_B2_NETDEV GID index" \
                "$RXE_B2_GID_INDEX ($(since "$t"))"
        iters=200
        pingpong pp1 $iters "$RXE_A_DEV" "$RXE_A_GID_INDEX" "$RXE_A_IP" \
                "$RXE_B_DEV" "$RXE_B_GID_INDEX" "$RXE_B_IP"
        read -r a_tx0 b_rx0 a_sent0 b_rcvd0 <<<"$(snap "$RXE_A2_NETDEV" "$RXE_B2_NETDEV" \
                "$RXE_A2_DEV" "$RXE_B2_DEV")"
        read -r _ _ p1_sent0 p1_rcvd0 <<<"$(snap)"
        if pingpong pp2 $iters "$RXE_A2_DEV" "$RXE_A2_GID_INDEX" "$RXE_A2_IP" \
                "$RXE_B2_DEV" "$RXE_B2_GID_INDEX" "$RXE_B2_IP"; then
                read -r a_tx1 b_rx1 a_sent1 b_rcvd1 <<<"$(snap "$RXE_A2_NETDEV" "$RXE_B2_NETDEV" \
                        "$RXE_A2_DEV" "$RXE_B2_DEV")"
                read -r _ _ p1_sent1 p1_rcvd1 <<<"$(snap)"
                d_tx=$((a_tx1 - a_tx0)) d_rx=$((b_rx1 - b_rx0))
                d_sent=$((a_sent1 - a_sent0)) d_rcvd=$((b_rcvd1 - b_rcvd0))
                d1=$((p1_sent1 - p1_sent0 + p1_rcvd1 - p1_rcvd0))
                if [ $d_tx -ge $((iters * 4)) ] && [ $d_rx -ge $((iters * 4)) ] &&
                        [ $d_sent -ge $((iters * 4)) ] && [ $d_rcvd -ge $((iters * 4)) ] &&
                        [ $d1 -eq 0 ]; then
                        ok "second path's traffic on its own: $RXE_A2_NETDEV tx +$d_tx," \
                                "$RXE_B2_NETDEV rx +$d_rx packets; $RXE_A2_DEV sent_pkts +$d_sent," \
                                "$RXE_B2_DEV rcvd_pkts +$d_rcvd; $RXE_A_DEV/$RXE_B_DEV +$d1"
                else
                        nok "second path counters: $RXE_A2_NETDEV tx +$d_tx, $RXE_B2_NETDEV rx" \
                                "+$d_rx, $RXE_A2_DEV sent +$d_sent, $RXE_B2_DEV rcvd +$d_rcvd (want" \
                                ">= $((iters * 4)) each); $RXE_A_DEV/$RXE_B_DEV +$d1 (want 0)"
                fi
        fi

        # 6. the second path fails alone: smc1a down takes rxe2's port out of ACTIVE
        # (rxe3's follows when the veth peer loses its carrier); rxe0 <-> rxe1 still works
        t=$(now)
        ip link set "$RXE_A2_NETDEV" down
        for ((i = 0; i < 50; i++)); do
                [ "$(port_state "$RXE_A2_DEV")" != 4 ] && break
                sleep 0.1
        done
        s2=$(port_state "$RXE_A2_DEV") s3=$(port_state "$RXE_B2_DEV")
        s0=$(port_state "$RXE_A_DEV") s1=$(port_state "$RXE_B_DEV")
        if [ "$s2" != 4 ] && [ "$s0" = 4 ] && [ "$s1" = 4 ]; then
                ok "$RXE_A2_NETDEV down: $RXE_A2_DEV port state $s2, $RXE_B2_DEV $s3;" \
                        "$RXE_A_DEV/$RXE_B_DEV still ACTIVE (4) ($(since "$t"))"
        else
                nok "$RXE_A2_NETDEV down: $RXE_A2_DEV port state $s2 (want not 4 = ACTIVE)," \
                        "$RXE_A_DEV $s0, $RXE_B_DEV $s1 (want 4)"
        fi
        pingpong pp1-after $iters "$RXE_A_DEV" "$RXE_A_GID_INDEX" "$RXE_A_IP" \
                "$RXE_B_DEV" "$RXE_B_GID_INDEX" "$RXE_B_IP"
else
        nok "rxe-pair-setup.sh with RXE_PAIR_LINKS=2: ${vars:-no output} $(cat "$tmp/setup-2")" \
                "$(rdma link show 2>&1)"
fi

# 7. and once more from scratch, with one path: the setup is idempotent and removes the
# second path of the run before
t=$(now)
unset RXE_A2_DEV RXE_B2_DEV
if vars=$(sh "$RXE_PAIR_SETUP" 2>"$tmp/setup2") && eval "$vars" &&
        [ "$(echo "$vars" | wc -l)" -eq 2 ] && [ -z "${RXE_A2_DEV:-}" ] &&
        [ "$(rdma link show | grep -c 'state ACTIVE')" -eq 2 ] && [ ! -e /sys/class/net/smc1a ] &&
        [ ! -e /sys/class/net/smc1b ] && ! ip rule show | grep -q '^780[1-4]:'; then
        ok "rxe-pair-setup.sh again: both ports ACTIVE, the second path gone ($(since "$t"))"
else
        nok "rxe-pair-setup.sh again: $(cat "$tmp/setup2") $(rdma link show 2>&1)"
fi
sh "$RXE_PAIR_SETUP" down 2>/dev/null && ! ip link show "$RXE_A_NETDEV" >/dev/null 2>&1 &&
        [ -z "$(rdma link show)" ] && ip rule show | grep -q "^0:.*lookup local" &&
        ok "rxe-pair-setup.sh down: links, devices and rules gone" || nok "rxe-pair-setup.sh down"
exit $failed
