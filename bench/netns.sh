#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# bench/run netns [BUILDDIR]: SMC-D between two network namespaces (smcd --cross-netns
# yes, smcd(8) "Network namespaces") against TCP over the same veth pair, in one run:
# two namespaces joined by a veth pair (10.213.N.1/24, 10.213.N.2/24), a private smcd
# in the root namespace, a sockperf server in B and the client in A, first both plain
# (TCP over veth), then both under smcrun: ping-pong 14 B and 64 B (p50, one way) and
# throughput of 65507-byte messages. Prints metric | TCP | smcd | smcd/TCP, then the
# connections smcd made between the namespaces (conns_netns) and its fallbacks.
#
# Root (namespaces); needs sockperf, ip (iproute2), python3. Environment:
#   SOCKPERF_TIME   seconds per sockperf run (default 5)
# Exit status 0 when every run produced a figure and every smcrun connection was
# SMC-D between the namespaces; 1 otherwise; 2 on bad usage or a missing tool.

set -u
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
build=$(cd "$build" 2>/dev/null && pwd) || { echo "bench/netns.sh: no build directory ${1:-}" >&2; exit 2; }
T=${SOCKPERF_TIME:-5}
for tool in sockperf ip python3; do
        command -v $tool >/dev/null || { echo "bench/netns.sh: $tool is missing" >&2; exit 2; }
done
[ "$(id -u)" = 0 ] || { echo "bench/netns.sh: needs root (network namespaces)" >&2; exit 2; }
smcd=$build/smcd/smcd lib=$build/libsmcproto/libsmcrun.so smcrun=$build/libsmcproto/smcrun
[ -x "$smcd" ] && [ -f "$lib" ] || { echo "bench/netns.sh: build $build first" >&2; exit 2; }

NSA=smcbA$$ NSB=smcbB$$ VA=sbA$$ VB=sbB$$ N=$(($$ % 250 + 1))
IPA=10.213.$N.1 IPB=10.213.$N.2 PORT=$((20000 + $$ % 20000))
tmp=$(mktemp -d /tmp/smcd-bench-netns.XXXXXX)
chmod 755 "$tmp"
spid=
cleanup() {
        [ -n "$spid" ] && kill "$spid" 2>/dev/null && wait "$spid" 2>/dev/null
        ip netns pids "$NSA" 2>/dev/null | xargs -r kill 2>/dev/null
        ip netns pids "$NSB" 2>/dev/null | xargs -r kill 2>/dev/null
        ip netns del "$NSA" 2>/dev/null
        ip netns del "$NSB" 2>/dev/null
        rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

ip netns add "$NSA" && ip netns add "$NSB" && ip link add "$VA" type veth peer name "$VB" &&
        ip link set "$VA" netns "$NSA" && ip link set "$VB" netns "$NSB" &&
        ip -n "$NSA" addr add "$IPA/24" dev "$VA" && ip -n "$NSB" addr add "$IPB/24" dev "$VB" &&
        ip -n "$NSA" link set "$VA" up && ip -n "$NSB" link set "$VB" up &&
        ip -n "$NSA" link set lo up && ip -n "$NSB" link set lo up ||
        { echo "bench/netns.sh: cannot make the namespaces" >&2; exit 1; }

"$smcd" --no-bus --runtime-dir "$tmp" --state-file "$tmp/state.json" --cross-netns yes --short-conn-rate=0 \
        >"$tmp/smcd.log" 2>&1 &
spid=$!
for _ in $(seq 100); do [ -S "$tmp/smcd.sock" ] && [ -f "$tmp/stats.json" ] && break; sleep 0.05; done
if ! grep -q "between network namespaces: on" "$tmp/smcd.log"; then
        echo "bench/netns.sh: smcd has no SMC-D between namespaces here:" >&2
        grep -i "namespaces\|option program" "$tmp/smcd.log" >&2
        exit 1
fi
cpus=$(nproc)
pin() { # CPU: taskset when there are two CPUs or more
        [ "$cpus" -ge 2 ] && echo taskset -c "$1"
}

declare -A R
failed=0
run() { # MODE(tcp|smc) KEY SOCKPERF-ARGS...: one sockperf run, its figure in R[KEY]
        local mode=$1 key=$2 pre=() out s
        shift 2
        [ "$mode" = smc ] && pre=(env SMCD_RUNTIME_DIR="$tmp" SMCRUN_LIB="$lib" sh "$smcrun")
        # shellcheck disable=SC2046
        ip netns exec "$NSB" $(pin 1) "${pre[@]}" sockperf server --tcp -i "$IPB" -p "$PORT" >"$tmp/srv.log" 2>&1 &
        s=$!
        sleep 1
        # shellcheck disable=SC2046
        out=$(ip netns exec "$NSA" $(pin 0) "${pre[@]}" timeout $((T + 30)) sockperf "$@" --tcp -i "$IPB" -p "$PORT" \
                -t "$T" 2>&1)
        kill "$s" 2>/dev/null
        wait "$s" 2>/dev/null
        case $1 in
        ping-pong) R[$key]=$(echo "$out" | sed -n 's/.*percentile 50.000 = *\([0-9.]*\).*/\1/p' | head -1) ;;
        *) R[$key]=$(echo "$out" | sed -n 's/.*Message Rate is \([0-9]*\) \[msg\/sec\].*/\1/p' | head -1) ;;
        esac
        if [ -z "${R[$key]}" ]; then
                echo "bench/netns.sh: $mode sockperf $* gave no figure:" >&2
                echo "$out" | tail -3 >&2
                failed=1
        fi
}
stat() { # KEY: smcd's counter (section smcd), or fallback_total
        kill -USR1 "$spid"
        sleep 0.3
        python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["smcd"].get(sys.argv[2], 0))' \
                "$tmp/stats.json" "$1"
}
for mode in tcp smc; do
        # (--mps: sockperf 3.7's default max rate aborts at SMC-D speeds, README)
        run $mode pp14-$mode ping-pong --mps=3000000 -m 14
        run $mode pp64-$mode ping-pong --mps=3000000 -m 64
        run $mode tp-$mode throughput -m 65507
done
netns=$(stat conns_netns)
fb=$(stat fallback_total)

ratio() { python3 -c "import sys; a, b = sys.argv[1:]; print('%.3f' % (float(b) / float(a)) if a and b else '-')" "$1" "$2"; }
printf '%-44s %12s %12s %10s\n' "between two network namespaces (veth)" TCP smcd smcd/TCP
printf '%-44s %12s %12s %10s\n' "sockperf ping-pong 14 B p50 (us, one way)" "${R[pp14-tcp]:--}" "${R[pp14-smc]:--}" \
        "$(ratio "${R[pp14-tcp]:-}" "${R[pp14-smc]:-}")"
printf '%-44s %12s %12s %10s\n' "sockperf ping-pong 64 B p50 (us, one way)" "${R[pp64-tcp]:--}" "${R[pp64-smc]:--}" \
        "$(ratio "${R[pp64-tcp]:-}" "${R[pp64-smc]:-}")"
printf '%-44s %12s %12s %10s\n' "sockperf throughput 65507 B (msg/s)" "${R[tp-tcp]:--}" "${R[tp-smc]:--}" \
        "$(ratio "${R[tp-tcp]:-}" "${R[tp-smc]:-}")"
echo "smcd: $netns SMC-D connections between the namespaces, $fb fallbacks to TCP (machine: $cpus CPUs, $(uname -r))"
# each smcrun run is one data connection (sockperf's), all three SMC-D across
[ "$netns" -ge 3 ] && [ "$fb" = 0 ] || failed=1
exit $failed
