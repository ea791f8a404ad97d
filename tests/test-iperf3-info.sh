#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# Integration test: iperf3, which reads TCP_INFO (snd_cwnd, rtt, rttvar, pmtu),
# TCP_MAXSEG and TCP_CONGESTION of its sockets, runs for 1 s under smcrun on both ends
# (`smcrun iperf3 -s` / `smcrun iperf3 -c ... -J`) over a private smcd, then once over
# plain TCP; the smcrun run's JSON must carry sane values (an MSS above TCP's unconnected
# 536 and within the loopback MTU, the kernel's default congestion control as TCP's
# run reports it, snd_cwnd / rtt / pmtu in every interval), and smcd's counters must
# show SMC-D connections.
#
# usage: test-iperf3-info.sh SMCD LIBSMCRUN SMCRUN
# Exit: 0 pass, 1 fail, 77 skip (iperf3 not installed).

set -u

if [ $# -ne 3 ]; then
        echo "usage: $0 SMCD LIBSMCRUN SMCRUN" >&2
        exit 2
fi
if ! command -v iperf3 >/dev/null; then
        echo "SKIP: iperf3 is not installed (apt-get install iperf3)"
        exit 77
fi
smcd=$(realpath "$1")
export SMCRUN_LIB=$(realpath "$2")
smcrun_sh=$(realpath "$3") # run with sh: the build-tree copy is not executable

# A sanitizer build of libsmcrun.so needs its runtime preloaded ahead of it (iperf3 is
# not instrumented); leak checking is off for iperf3's own allocations.
smcrun_env=()
san=$(ldd "$SMCRUN_LIB" | awk '$1 ~ /^lib(a|ub|t|hwa)san\.so/ { print $3 }' | paste -sd:)
if [ -n "$san" ]; then
        smcrun_env=(LD_PRELOAD="$san${LD_PRELOAD:+:$LD_PRELOAD}"
                    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0")
fi
smcrun=(env "${smcrun_env[@]}" sh "$smcrun_sh")

rundir=$(mktemp -d /tmp/smcd-test-iperf3.XXXXXX) || exit 1
export SMCD_RUNTIME_DIR=$rundir
smcd_pid= srv_pid=
cleanup() {
        [ -n "$srv_pid" ] && kill "$srv_pid" 2>/dev/null && wait "$srv_pid" 2>/dev/null
        [ -n "$smcd_pid" ] && kill "$smcd_pid" 2>/dev/null && wait "$smcd_pid" 2>/dev/null
        rm -rf "$rundir"
}
trap cleanup EXIT

"$smcd" --runtime-dir "$rundir" >"$rundir/smcd.log" 2>&1 &
smcd_pid=$!
for _ in $(seq 100); do [ -S "$rundir/smcd.sock" ] && break; sleep 0.05; done
[ -S "$rundir/smcd.sock" ] || { echo "not ok - smcd did not start"; cat "$rundir/smcd.log"; exit 1; }

# one iperf3 run: $1 = smc | tcp; the client's JSON in $rundir/$1.json. A port of its
# own each (the one the first run's server left could be taken meanwhile, e.g. as a
# client's ephemeral port: "Address already in use" once, 2026-12-03)
run() {
        local how=$1 pre=() port
        port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
        [ "$how" = smc ] && pre=("${smcrun[@]}")
        timeout 30 "${pre[@]}" iperf3 -s -1 --forceflush -p "$port" >"$rundir/$how-server.log" 2>&1 &
        srv_pid=$!
        for _ in $(seq 200); do
                grep -q "listening" "$rundir/$how-server.log" 2>/dev/null && break
                sleep 0.05
        done
        timeout 30 "${pre[@]}" iperf3 -c 127.0.0.1 -p "$port" -t 1 -J >"$rundir/$how.json" 2>"$rundir/$how.err"
        local rc=$?
        wait "$srv_pid"
        local src=$?
        srv_pid=
        if [ $rc -ne 0 ] || [ $src -ne 0 ]; then
                echo "not ok - iperf3 over $how: client $rc, server $src"
                sed 's/^/# /' "$rundir/$how.err" "$rundir/$how-server.log" | head -20
                return 1
        fi
        echo "ok - iperf3 over $how ran"
}

failed=0
run smc || failed=1
run tcp || failed=1
[ $failed -eq 0 ] || exit 1

kill -USR1 "$smcd_pid"
sleep 0.5
python3 - "$rundir/smc.json" "$rundir/tcp.json" "$rundir/stats.json" \
        "$(cat /proc/sys/net/ipv4/tcp_congestion_control)" <<'PY' || failed=1
import json, sys
smc, tcp, stats = (json.load(open(p)) for p in sys.argv[1:4])
default_cc = sys.argv[4]
ok = True
def check(cond, what):
    global ok
    print("%s - %s" % ("ok" if cond else "not ok", what))
    ok = ok and bool(cond)

for name, d in (("smcrun", smc), ("tcp", tcp)):
    check("error" not in d, "%s: no error (%s)" % (name, d.get("error")))
mss, tmss = smc["start"]["tcp_mss_default"], tcp["start"]["tcp_mss_default"]
# TCP's own is half the window at first (32741 on lo); SMC-D's half its ring, capped at
# the loopback advmss
check(536 < mss <= 65483, "TCP_MAXSEG %d (plain TCP: %d)" % (mss, tmss))
for side in ("sender_tcp_congestion", "receiver_tcp_congestion"):
    check(smc["end"].get(side) == tcp["end"].get(side) == default_cc,
          "%s %s (plain TCP: %s, kernel default %s)" % (side, smc["end"].get(side), tcp["end"].get(side), default_cc))
iv = [i["streams"][0] for i in smc["intervals"]]
check(len(iv) >= 1, "%d interval(s)" % len(iv))
for i, s in enumerate(iv):
    check(s["snd_cwnd"] >= 16384 and 0 < s["rtt"] < 1000000 and 0 <= s["rttvar"] < 1000000 and
          1280 <= s["pmtu"] <= 65536 and s["retransmits"] == 0,
          "interval %d: snd_cwnd %d B, rtt %d us, rttvar %d, pmtu %d, retransmits %d (plain TCP: %s)" %
          (i, s["snd_cwnd"], s["rtt"], s["rttvar"], s["pmtu"], s["retransmits"],
           {k: tcp["intervals"][0]["streams"][0].get(k) for k in ("snd_cwnd", "rtt", "pmtu")}))
snd = smc["end"]["streams"][0]["sender"]
check(snd["bytes"] > 0 and snd["max_snd_cwnd"] >= 16384 and 0 < snd["mean_rtt"] < 1000000,
      "sender: %d bytes, max_snd_cwnd %d, mean_rtt %d us; %.2f Gbit/s (plain TCP %.2f)" %
      (snd["bytes"], snd["max_snd_cwnd"], snd["mean_rtt"], smc["end"]["sum_sent"]["bits_per_second"] / 1e9,
       tcp["end"]["sum_sent"]["bits_per_second"] / 1e9))
s = stats["smcd"]
# iperf3's control and data connections, both ends under smcrun
check(s["conns_client"] >= 2 and s["conns_server"] >= 2,
      "smcd: conns_client %d, conns_server %d (SMC-D)" % (s["conns_client"], s["conns_server"]))
sys.exit(0 if ok else 1)
PY
exit $failed
