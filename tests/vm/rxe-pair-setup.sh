#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# rxe-pair-setup.sh: two soft-RoCE "hosts" in ONE network namespace of a throw-away VM
# (tests/vm/run-vm; as root; needs rdma_rxe, ip and rdma from iproute2).
#
#   host A: 10.77.0.1/32 on veth smc0a (02:00:0a:4d:00:01), RDMA device rxe0
#   host B: 10.77.0.2/32 on veth smc0b (02:00:0a:4d:00:02), RDMA device rxe1
#
# smc0a and smc0b are the two ends of one veth pair. Both addresses are local, so by
# default the kernel would deliver A -> B over lo (where rxe never sees it). Instead
# (see /work/shared/vm-softroce-notes.md; rxe between two namespaces fails on 6.1):
#   - a routing table per direction: table 7701 "10.77.0.2 dev smc0a src 10.77.0.1",
#     table 7702 "10.77.0.1 dev smc0b src 10.77.0.2";
#   - ip rules by destination, for locally sent packets (iif lo) and for lookups bound
#     to the outgoing interface (oif; rdma_cm's reverse-route check does those: without
#     them rping's connect gets RDMA_CM_EVENT_REJECTED), at prefs 7701-7704;
#   - the local table moved below them (pref 0 -> pref 32000), so those rules win;
#   - rp_filter=0 and accept_local=1 (the peer's source address is local too);
#   - static (permanent) neighbour entries: ARP between two local addresses is refused.
# Traffic between 10.77.0.1 and 10.77.0.2 (TCP and RoCE v2 over UDP 4791) then crosses
# the veth, and the packet arrives on the device whose rxe owns the destination.
#
# With RXE_PAIR_LINKS=2 (default 1) a second, independent path joins the same two hosts,
# built exactly like the first (same sysctls, route checks and waits):
#
#   host A: 10.78.0.1/32 on veth smc1a (02:00:0a:4e:00:01), RDMA device rxe2
#   host B: 10.78.0.2/32 on veth smc1b (02:00:0a:4e:00:02), RDMA device rxe3
#
# with tables 7801 (A -> B over smc1a) and 7802 (B -> A over smc1b) and rules at prefs
# 7801-7804. Each path can fail on its own (`ip link set smc1a down` takes rxe2's port
# out of ACTIVE; rxe0/rxe1 keep working). Without RXE_PAIR_LINKS=2 the second path is
# not set up and the output is the one-path output below.
#
# Usage inside the VM:
#   sh rxe-pair-setup.sh [up]   set up (idempotent: tears down its own state first),
#                               wait until both ports are ACTIVE and the IPv4-mapped
#                               RoCE v2 GIDs (::ffff:10.77.0.x) exist
#   sh rxe-pair-setup.sh down   remove everything it set up (rules, tables, links)
# Both always remove the second path's state too (when present), whatever
# RXE_PAIR_LINKS says: a one-path `up` after a two-path run leaves only the first path.
# Progress and errors go to stderr; on success `up` prints shell assignments on stdout:
#   RXE_A_DEV=rxe0 RXE_A_NETDEV=smc0a RXE_A_IP=10.77.0.1 RXE_A_GID_INDEX=<n>
#   RXE_A_GID=0000:...:ffff:0a4d:0001   and the same for RXE_B_* (rxe1, smc0b, 10.77.0.2)
# (two lines: A, then B); with RXE_PAIR_LINKS=2 a third line for the second path,
#   RXE_A2_DEV=rxe2 RXE_A2_NETDEV=smc1a RXE_A2_IP=10.78.0.1 RXE_A2_GID_INDEX=<n>
#   RXE_A2_GID=0000:...:ffff:0a4e:0001 RXE_B2_DEV=rxe3 ... RXE_B2_GID=...:0a4e:0002
# Exit status 0, or 1 with an "rxe-pair-setup: FAILED: ..." line (also for an
# RXE_PAIR_LINKS other than 1 or 2; nothing is changed then). It refuses to run
# outside run-vm's VM (no $VM_RESULTS) unless RXE_PAIR_FORCE=1 (e.g. in a netns of one's
# own: `unshare -n`). RXE_PAIR_WAIT: seconds to wait for the ports and GIDs (default 30).
#
# How a test uses it: run-vm copies the test script into the VM, so it cannot find this
# file through $(dirname "$0"); pass the host path (the host root is the VM's root):
#   run-vm --env RXE_PAIR_SETUP="$(realpath tests/vm/rxe-pair-setup.sh)" test.sh
# and inside:
#   vars=$(sh "$RXE_PAIR_SETUP") || exit 1
#   eval "$vars"
#   ibv_rc_pingpong -d "$RXE_B_DEV" -g "$RXE_B_GID_INDEX" &            # server, host B
#   ibv_rc_pingpong -d "$RXE_A_DEV" -g "$RXE_A_GID_INDEX" "$RXE_B_IP"   # client, host A
# A server on host B binds 10.77.0.2 (or a wildcard) and uses rxe1; a client on host A
# connects to 10.77.0.2 (its source is 10.77.0.1) and uses rxe0. See tests/test-rxe-pair.sh.

A_NETDEV=smc0a A_IP=10.77.0.1 A_MAC=02:00:0a:4d:00:01 A_DEV=rxe0 A_TABLE=7701
B_NETDEV=smc0b B_IP=10.77.0.2 B_MAC=02:00:0a:4d:00:02 B_DEV=rxe1 B_TABLE=7702
RULE_PREFS="7701 7702 7703 7704"
# the second path (RXE_PAIR_LINKS=2)
A2_NETDEV=smc1a A2_IP=10.78.0.1 A2_MAC=02:00:0a:4e:00:01 A2_DEV=rxe2 A2_TABLE=7801
B2_NETDEV=smc1b B2_IP=10.78.0.2 B2_MAC=02:00:0a:4e:00:02 B2_DEV=rxe3 B2_TABLE=7802
RULE_PREFS2="7801 7802 7803 7804"
LINKS=${RXE_PAIR_LINKS:-1}
LOCAL_PREF=32000
WAIT_SECS=${RXE_PAIR_WAIT:-30}

msg() { echo "rxe-pair-setup: $*" >&2; }
fail() { echo "rxe-pair-setup: FAILED: $*" >&2; exit 1; }

for p in ip rdma modprobe; do
        command -v $p >/dev/null 2>&1 || fail "$p not found (iproute2 / kmod in the VM's root)"
done
[ "$(id -u)" = 0 ] || fail "must run as root (inside the VM)"
# it rewires the routing of the whole network namespace (the local table moves):
# only in run-vm's VM (which exports VM_RESULTS), unless forced
[ -n "${VM_RESULTS:-}" ] || [ "${RXE_PAIR_FORCE:-0}" = 1 ] ||
        fail "meant for run-vm's throw-away VM (no VM_RESULTS); RXE_PAIR_FORCE=1 runs it here anyway"

uptime_s() { read -r up _ </proc/uptime; echo "$up"; }
T0=$(uptime_s)

# Each exec costs 0.1-0.4 s under TCG: ip and rdma get their commands in batches.

# the ip commands that remove what an earlier run set up, both paths (run with
# ip -force: errors about missing objects are ignored); $1 is the output of `ip rule show`
teardown_batch() {
        echo "link del $A_NETDEV"
        echo "link del $B_NETDEV"
        echo "link del $A2_NETDEV"
        echo "link del $B2_NETDEV"
        for p in $RULE_PREFS $RULE_PREFS2; do
                case $1 in
                *"$p:"*) echo "rule del pref $p"; echo "rule del pref $p" ;;
                esac
        done
        echo "route flush table $A_TABLE"
        echo "route flush table $B_TABLE"
        echo "route flush table $A2_TABLE"
        echo "route flush table $B2_TABLE"
}

# remove what an earlier run set up (the local table stays where it is); never fails
teardown() {
        for d in $A_DEV $B_DEV $A2_DEV $B2_DEV; do
                [ -e /sys/class/infiniband/$d ] && rdma link delete $d 2>/dev/null
        done
        teardown_batch "$(ip rule show 2>/dev/null)" | ip -force -batch - >/dev/null 2>&1
        # RDMA devices are unregistered asynchronously: wait (5 s at most) until the
        # names are free again
        i=0
        while [ -e /sys/class/infiniband/$A_DEV ] || [ -e /sys/class/infiniband/$B_DEV ] ||
                [ -e /sys/class/infiniband/$A2_DEV ] || [ -e /sys/class/infiniband/$B2_DEV ]; do
                i=$((i + 1))
                [ $i -le 50 ] || break
                sleep 0.1
        done
}

# the ip commands that put the local table at pref 0 ($1 = default) or LOCAL_PREF
# ($1 = moved); $2 is the output of `ip rule show`
local_table_batch() {
        rules=$2
        if [ "$1" = moved ]; then
                case $rules in
                *"$LOCAL_PREF:	from all lookup local"*) ;;
                *) echo "rule add pref $LOCAL_PREF lookup local" ;;
                esac
                case $rules in
                "0:	from all lookup local"*) echo "rule del pref 0 lookup local" ;;
                esac
        else
                case $rules in
                "0:	from all lookup local"*) ;;
                *) echo "rule add pref 0 lookup local" ;;
                esac
                case $rules in
                *"$LOCAL_PREF:	from all lookup local"*) echo "rule del pref $LOCAL_PREF lookup local" ;;
                esac
        fi
}

# pair_batch A_NETDEV A_IP A_MAC A_TABLE B_NETDEV B_IP B_MAC B_TABLE PREF: the ip
# commands for one path: the veth pair, its addresses and static neighbours, a table per
# direction (A -> B leaves through A_NETDEV, B -> A through B_NETDEV) and the four
# rules at prefs PREF..PREF+3
pair_batch() {
        cat <<EOF
link add $1 address $3 type veth peer name $5 address $7
addr add $2/32 dev $1
addr add $6/32 dev $5
link set $1 up
link set $5 up
neigh replace $6 lladdr $7 dev $1 nud permanent
neigh replace $2 lladdr $3 dev $5 nud permanent
route add $6 dev $1 src $2 table $4
route add $2 dev $5 src $6 table $8
rule add pref $9 to $6 iif lo lookup $4
rule add pref $(($9 + 1)) to $6 oif $1 lookup $4
rule add pref $(($9 + 2)) to $2 iif lo lookup $8
rule add pref $(($9 + 3)) to $2 oif $5 lookup $8
EOF
}

# check_routes A_IP B_IP A_NETDEV B_NETDEV ROUTES: ROUTES (`ip route get` output) sends
# A -> B through A_NETDEV and B -> A through B_NETDEV (not lo); else fails
check_routes() {
        case $5 in
        *"$2 from $1 dev $3 "*) ;;
        *) fail "route $1 -> $2 does not use $3: $5" ;;
        esac
        case $5 in
        *"$1 from $2 dev $4 "*) ;;
        *) fail "route $2 -> $1 does not use $4: $5" ;;
        esac
}

sysctl_set() {
        [ -w "/proc/sys/$1" ] || fail "no /proc/sys/$1"
        echo "$2" >"/proc/sys/$1" || fail "cannot set $1=$2"
}

# "0000:0000:0000:0000:0000:ffff:0a4d:0001" for 10.77.0.1 (sysfs GID format)
mapped_gid() {
        ifs=$IFS IFS=.
        # shellcheck disable=SC2086 # split the dotted quad
        set -- $1
        IFS=$ifs
        printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' "$1" "$2" "$3" "$4"
}

# gid_index DEV GID NETDEV: the index of GID as a RoCE v2 entry on NETDEV, or nothing.
# Builtin reads only (no fork per entry: the table has up to 1024 entries).
gid_index() {
        dir=/sys/class/infiniband/$1/ports/1
        i=0
        while [ -e "$dir/gids/$i" ]; do
                g=
                read -r g <"$dir/gids/$i" 2>/dev/null
                if [ "$g" = "$2" ]; then
                        t='' n=''
                        read -r t <"$dir/gid_attrs/types/$i" 2>/dev/null
                        read -r n <"$dir/gid_attrs/ndevs/$i" 2>/dev/null
                        if [ "$t" = "RoCE v2" ] && [ "$n" = "$3" ]; then
                                echo $i
                                return 0
                        fi
                fi
                i=$((i + 1))
        done
        return 1
}

port_state() {
        s=
        read -r s _ <"/sys/class/infiniband/$1/ports/1/state" 2>/dev/null
        echo "${s%:}"
}

case ${1:-up} in
down)
        had2=0
        [ -e /sys/class/net/$A2_NETDEV ] || [ -e /sys/class/net/$B2_NETDEV ] && had2=1
        teardown
        out=$(local_table_batch default "$(ip rule show)" | ip -batch - 2>&1) ||
                fail "cannot put the local table back at pref 0: $out"
        msg "removed $A_DEV/$B_DEV, $A_NETDEV/$B_NETDEV, rules and tables"
        [ $had2 = 0 ] || msg "removed the second path too: $A2_DEV/$B2_DEV, $A2_NETDEV/$B2_NETDEV"
        exit 0
        ;;
up) ;;
*) fail "usage: rxe-pair-setup.sh [up|down]" ;;
esac
case $LINKS in
1 | 2) ;;
*) fail "RXE_PAIR_LINKS=$LINKS: must be 1 or 2 (paths between host A and host B)" ;;
esac

modprobe rdma_rxe 2>/dev/null || fail "modprobe rdma_rxe failed: no soft-RoCE module for $(uname -r)"
teardown

# A -> B leaves through smc0a (table A), B -> A through smc0b (table B); the second
# path likewise through smc1a (table A2) and smc1b (table B2)
netdevs="$A_NETDEV $B_NETDEV"
[ $LINKS = 1 ] || netdevs="$netdevs $A2_NETDEV $B2_NETDEV"
batch="link set lo up
$(pair_batch $A_NETDEV $A_IP $A_MAC $A_TABLE $B_NETDEV $B_IP $B_MAC $B_TABLE 7701)"
[ $LINKS = 1 ] || batch="$batch
$(pair_batch $A2_NETDEV $A2_IP $A2_MAC $A2_TABLE $B2_NETDEV $B2_IP $B2_MAC $B2_TABLE 7801)"
batch="$batch
$(local_table_batch moved "$(ip rule show)")"
out=$(echo "$batch" | ip -batch - 2>&1) || fail "ip: ${out:-exit status $?}"
for d in all default $netdevs; do
        sysctl_set net/ipv4/conf/$d/rp_filter 0
done
for d in all $netdevs; do
        sysctl_set net/ipv4/conf/$d/accept_local 1
done

# the routes really take the veth (not lo)
routes="route get $B_IP from $A_IP
route get $A_IP from $B_IP"
[ $LINKS = 1 ] || routes="$routes
route get $B2_IP from $A2_IP
route get $A2_IP from $B2_IP"
r=$(echo "$routes" | ip -batch - 2>&1)
check_routes $A_IP $B_IP $A_NETDEV $B_NETDEV "$r"
[ $LINKS = 1 ] || check_routes $A2_IP $B2_IP $A2_NETDEV $B2_NETDEV "$r"

links="link add $A_DEV type rxe netdev $A_NETDEV
link add $B_DEV type rxe netdev $B_NETDEV"
devs="$A_DEV/$B_DEV"
[ $LINKS = 1 ] || links="$links
link add $A2_DEV type rxe netdev $A2_NETDEV
link add $B2_DEV type rxe netdev $B2_NETDEV" devs="$devs/$A2_DEV/$B2_DEV"
out=$(echo "$links" | rdma -b - 2>&1) || fail "rdma link add $devs: ${out:-exit status $?}"

A_GID=$(mapped_gid $A_IP)
B_GID=$(mapped_gid $B_IP)
A2_GID=$(mapped_gid $A2_IP)
B2_GID=$(mapped_gid $B2_IP)
end=$(( ${T0%.*} + WAIT_SECS ))
while :; do
        sa=$(port_state $A_DEV) sb=$(port_state $B_DEV)
        ia='' ib='' ia2='' ib2=''
        if [ "$sa" = 4 ] && [ "$sb" = 4 ]; then
                ia=$(gid_index $A_DEV "$A_GID" $A_NETDEV)
                ib=$(gid_index $B_DEV "$B_GID" $B_NETDEV)
        fi
        if [ $LINKS = 1 ]; then
                [ -n "$ia" ] && [ -n "$ib" ] && break
        else
                sa2=$(port_state $A2_DEV) sb2=$(port_state $B2_DEV)
                if [ "$sa2" = 4 ] && [ "$sb2" = 4 ]; then
                        ia2=$(gid_index $A2_DEV "$A2_GID" $A2_NETDEV)
                        ib2=$(gid_index $B2_DEV "$B2_GID" $B2_NETDEV)
                fi
                [ -n "$ia" ] && [ -n "$ib" ] && [ -n "$ia2" ] && [ -n "$ib2" ] && break
        fi
        now=$(uptime_s)
        if [ "${now%.*}" -ge $end ]; then
                more=
                [ $LINKS = 1 ] || more="$A2_DEV port state ${sa2:-?}, GID index ${ia2:-none}; "
                [ $LINKS = 1 ] || more="$more$B2_DEV port state ${sb2:-?}, GID index ${ib2:-none}; "
                fail "after ${WAIT_SECS} s: $A_DEV port state ${sa:-?} (4 = ACTIVE), GID index ${ia:-none};" \
                        "$B_DEV port state ${sb:-?}, GID index ${ib:-none}; $more$(rdma link show 2>&1 | tr '\n' ' ')"
        fi
        sleep 0.1
done

T1=$(uptime_s)
msg "$A_DEV on $A_NETDEV $A_IP: port ACTIVE, RoCE v2 GID index $ia ($A_GID)"
msg "$B_DEV on $B_NETDEV $B_IP: port ACTIVE, RoCE v2 GID index $ib ($B_GID)"
if [ $LINKS = 2 ]; then
        msg "$A2_DEV on $A2_NETDEV $A2_IP: port ACTIVE, RoCE v2 GID index $ia2 ($A2_GID)"
        msg "$B2_DEV on $B2_NETDEV $B2_IP: port ACTIVE, RoCE v2 GID index $ib2 ($B2_GID)"
fi
msg "ready in $(echo "$T0 $T1" | awk '{printf "%.2f", $2 - $1}') s (kernel $(uname -r))"
cat <<EOF
RXE_A_DEV=$A_DEV RXE_A_NETDEV=$A_NETDEV RXE_A_IP=$A_IP RXE_A_GID_INDEX=$ia RXE_A_GID=$A_GID
RXE_B_DEV=$B_DEV RXE_B_NETDEV=$B_NETDEV RXE_B_IP=$B_IP RXE_B_GID_INDEX=$ib RXE_B_GID=$B_GID
EOF
[ $LINKS = 1 ] || echo "RXE_A2_DEV=$A2_DEV RXE_A2_NETDEV=$A2_NETDEV RXE_A2_IP=$A2_IP" \
        "RXE_A2_GID_INDEX=$ia2 RXE_A2_GID=$A2_GID RXE_B2_DEV=$B2_DEV RXE_B2_NETDEV=$B2_NETDEV" \
        "RXE_B2_IP=$B2_IP RXE_B2_GID_INDEX=$ib2 RXE_B2_GID=$B2_GID"
