#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# bench/smcr-vm-bench.sh [BUILDDIR]   (also: bench/run smcr-vm [BUILDDIR])
#
# Issue 4 item 8: sockperf over SMC-R with inline CDC sends on vs off vs plain TCP, in
# ONE boot of the throw-away qemu VM (tests/vm/run-vm, TCG). Timings under TCG mean
# nothing in absolute terms: the table reports ratios between cases measured in the
# same run (TCP over the same veth, and inline=on vs inline=off).
#
# Inside the VM: tests/vm/rxe-pair-setup.sh makes rxe0 (10.77.0.1, smc0a) and rxe1
# (10.77.0.2, smc0b); cgroup2 is mounted for smcd's TCP-option program. Per case:
#   tcp         plain sockperf server on 10.77.0.2 and client, no smcrun, no smcd
#   smcr-on     smcd A (--roce-dev rxe0) and smcd B (rxe1) with --inline on; sockperf
#               server under smcrun with B's runtime dir, client under smcrun with A's
#   smcr-off    the same after restarting both smcd with --inline off
# each with sockperf ping-pong (pp) per message size for SMCR_BENCH_TIME seconds and
# throughput (tp, 65507 B = sockperf's largest message, "64 KiB") for
# SMCR_BENCH_TP_TIME seconds. Around every SMC-R client run both smcd write stats.json
# (SIGUSR1); the run counts as SMC-R only if, in that run, A made a new SMC-R client
# connection, B a server one, A's CDC sends grew, no fallback was counted, and A's
# inline CDC sends grew with inline=on and stayed put with inline=off. A run that fell
# back to TCP is reported as "FALLBACK", never as an SMC-R number. Each case listens on
# a port of its own. After each SMC-R case (client and server gone) both smcd must hold
# no SMC-R connection any more, and after smcd stopped no socket may stay on the port:
# what is left is listed under "problems seen" (it does not change the exit status).
# About 4-5 minutes in all (boot ~20 s; each sockperf run takes its time plus ~5-10 s
# of start-up and checks under TCG).
#
# Environment (host side; passed into the VM):
#   SMCR_BENCH_TIME       seconds per ping-pong run (default 10)
#   SMCR_BENCH_TP_TIME    seconds per throughput run (default 6; 0 = no throughput)
#   SMCR_BENCH_SIZES      ping-pong message sizes in bytes (default "14 1024")
#   SMCR_BENCH_ROUNDS     repeat the three cases this many times, alternating the order;
#                         the table shows the median per case (default 1)
#   SMCR_BENCH_RESULTS    host directory to keep the raw sockperf and smcd logs in
#   SMCR_BENCH_SMP        guest vCPUs (default 1: one vCPU needs one host thread, so the
#                         numbers suffer less from a busy host; with 2 the ping-pongs also
#                         pay cross-vCPU wakeups, which TCG makes slow and erratic)
#   SMCR_BENCH_APPEND     guest kernel command line (default idle=halt: with the default
#                         MWAIT idle, TCG wakes a vCPU only at its next timer tick, so every
#                         wakeup across vCPUs costs up to 4 ms (HZ=250) and ping-pong
#                         measures the tick: sockperf TCP p50 2.4-3.2 ms instead of ~0.25 ms)
#   SMCR_BENCH_SMCD_OPTS  extra options for both smcd in the SMC-R cases (e.g.
#                         "--sndbuf 256K --rmem 256K"; default none)
#   SMCR_VM_TIMEOUT       run-vm --timeout (default 600)
# Needs (host): qemu + a Debian kernel (scripts/install-vm-deps.sh), sockperf, jq, python3,
# rdma, ip.
# Exit status: 0 all cases ran and every SMC-R run was verified SMC-R; 1 a case failed
# or fell back; 2 bad usage / not built; 77 the VM cannot run here.

set -u

if [ -z "${SMCR_BENCH_IN_VM:-}" ]; then
        src=$(realpath "$(dirname "$0")/..")
        BUILD=${1:-./build}
        if [ ! -d "$BUILD" ]; then
                echo "usage: $0 [BUILDDIR]   ($BUILD is not a directory)" >&2
                exit 2
        fi
        BUILD=$(realpath "$BUILD")
        for v in "${SMCR_BENCH_TIME:-10}" "${SMCR_BENCH_TP_TIME:-6}" "${SMCR_BENCH_ROUNDS:-1}" "${SMCR_BENCH_SMP:-1}" \
                ${SMCR_BENCH_SIZES:-14 1024}; do
                case $v in
                '' | *[!0-9]*) echo "smcr-vm-bench: not a number: '$v' (SMCR_BENCH_TIME, _TP_TIME, _ROUNDS, _SMP, _SIZES)" >&2
                        exit 2 ;;
                esac
        done
        if [ "${SMCR_BENCH_TIME:-10}" -lt 1 ] || [ "${SMCR_BENCH_ROUNDS:-1}" -lt 1 ] || [ "${SMCR_BENCH_SMP:-1}" -lt 1 ]; then
                echo "smcr-vm-bench: SMCR_BENCH_TIME, SMCR_BENCH_ROUNDS and SMCR_BENCH_SMP must be at least 1" >&2
                exit 2
        fi
        for f in "$BUILD/smcd/smcd" "$BUILD/libsmcproto/smcrun" "$BUILD/libsmcproto/libsmcrun.so"; do
                [ -r "$f" ] || { echo "smcr-vm-bench: $f is missing: build first (ninja -C $BUILD)" >&2; exit 2; }
        done
        if ldd "$BUILD/libsmcproto/libsmcrun.so" 2>/dev/null | grep -Eq 'lib(a|t|ub|hwa)san\.so'; then
                echo "smcr-vm-bench: $BUILD is a sanitizer build: its numbers mean nothing; use a plain build" >&2
                exit 2
        fi
        runvm=$src/tests/vm/run-vm
        for p in sockperf rdma ip jq python3; do
                command -v $p >/dev/null ||
                        { echo "smcr-vm-bench: $p not installed (apt-get install sockperf jq; scripts/install-vm-deps.sh)" >&2; exit 77; }
        done
        "$runvm" --check || exit 77
        results=()
        if [ -n "${SMCR_BENCH_RESULTS:-}" ]; then
                mkdir -p "$SMCR_BENCH_RESULTS" || exit 2
                results=(--results "$(realpath "$SMCR_BENCH_RESULTS")")
        fi
        buildtype=$(jq -r '.[] | select(.name == "buildtype") | .value' "$BUILD/meson-info/intro-buildoptions.json" 2>/dev/null)
        # TCG timings follow the host's load: say what it was
        echo "# host: $(nproc) CPU(s), load average before the run $(cut -d ' ' -f 1-3 /proc/loadavg)"
        if awk '{ exit !($1 >= 1.0) }' /proc/loadavg; then
                echo "# warning: the host is busy: TCG timings follow the host's load (every vCPU is a host" \
                        "thread), so even the ratios are noisy; rerun on a quiet host"
        fi
        "$runvm" --timeout "${SMCR_VM_TIMEOUT:-600}" --mem 2048 --smp "${SMCR_BENCH_SMP:-1}" "${results[@]}" \
                --append "${SMCR_BENCH_APPEND-idle=halt}" \
                --env SMCR_BENCH_IN_VM=1 \
                --env RXE_PAIR_SETUP="$src/tests/vm/rxe-pair-setup.sh" \
                --env SMCR_BENCH_TIME="${SMCR_BENCH_TIME:-10}" \
                --env SMCR_BENCH_TP_TIME="${SMCR_BENCH_TP_TIME:-6}" \
                --env SMCR_BENCH_SIZES="${SMCR_BENCH_SIZES:-14 1024}" \
                --env SMCR_BENCH_ROUNDS="${SMCR_BENCH_ROUNDS:-1}" \
                --env SMCR_BENCH_KEEP="${SMCR_BENCH_RESULTS:+1}" \
                --env SMCR_BENCH_BUILDTYPE="${buildtype:-unknown}" \
                --env SMCR_BENCH_SMCD_OPTS="${SMCR_BENCH_SMCD_OPTS:-}" \
                "$0" "$BUILD/smcd/smcd" "$BUILD/libsmcproto/smcrun" "$BUILD/libsmcproto/libsmcrun.so"
        rc=$?
        echo "# host: load average after the run $(cut -d ' ' -f 1-3 /proc/loadavg)"
        exit $rc
fi

# ---- inside the VM --------------------------------------------------------------------
smcd=$1 smcrun=$2
export SMCRUN_LIB=$3
T=$SMCR_BENCH_TIME
TP_T=$SMCR_BENCH_TP_TIME
SIZES=$SMCR_BENCH_SIZES
ROUNDS=$SMCR_BENCH_ROUNDS
TP_SIZE=65507
PORT_BASE=7700 # each case listens on a port of its own: PORT_BASE + case number
port=$PORT_BASE
for v in "$T" "$TP_T" "$ROUNDS" $SIZES; do
        case $v in '' | *[!0-9]*) echo "smcr-vm-bench: not a number: '$v'" >&2; exit 2 ;; esac
done

tmp=$(mktemp -d /tmp/smcr-bench.XXXXXX)
pid_a='' pid_b='' server_pid=''
failed=0
now() { read -r up _ </proc/uptime; echo "$up"; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.0f s", b - a }'; }
say() { echo "# $*"; }
warn() { echo "smcr-vm-bench: $*" >&2; }

stop_pid() { # PID SIGNAL: signal, wait up to 5 s, then SIGKILL
        [ -n "$1" ] || return 0
        kill "-$2" "$1" 2>/dev/null
        for _ in $(seq 50); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$1" 2>/dev/null
        wait "$1" 2>/dev/null
}
cleanup() {
        stop_pid "$server_pid" INT
        stop_pid "$pid_a" TERM
        stop_pid "$pid_b" TERM
        if [ "${SMCR_BENCH_KEEP:-}" = 1 ] && [ -n "${VM_RESULTS:-}" ]; then
                cp -r "$tmp" "$VM_RESULTS/smcr-bench" 2>/dev/null
        fi
}
trap cleanup EXIT

t0=$(now)
machine="kernel $(uname -r), $(nproc) vCPU(s) (TCG), $(grep -o 'idle=[a-z]*' /proc/cmdline || echo 'default idle'), smcd buildtype $SMCR_BENCH_BUILDTYPE${SMCR_BENCH_SMCD_OPTS:+, smcd options $SMCR_BENCH_SMCD_OPTS}"
say "$machine"
vars=$(sh "$RXE_PAIR_SETUP") || { warn "rxe-pair-setup failed"; exit 1; }
eval "$vars"
say "rxe pair: $RXE_A_DEV ($RXE_A_IP) <-> $RXE_B_DEV ($RXE_B_IP), ready after $(since "$t0")"
if ! grep -q " cgroup2 " /proc/mounts; then
        mkdir -p /sys/fs/cgroup && mount -t cgroup2 none /sys/fs/cgroup || { warn "cannot mount cgroup2"; exit 1; }
fi

# ---- smcd ----
read -r -a smcd_opts <<<"${SMCR_BENCH_SMCD_OPTS:-}" # words, no globbing
start_smcd() { # NAME DEV INLINE: a fresh runtime dir and state file (no tunables carried over)
        local name=$1 dev=$2 inl=$3 p
        rm -rf "${tmp:?}/$name"
        mkdir -p "$tmp/$name"
        "$smcd" -v --no-bus --runtime-dir "$tmp/$name" --state-file "$tmp/$name/tunables.json" \
                --roce-dev "$dev" --inline "$inl" "${smcd_opts[@]}" >>"$tmp/smcd-$name.log" 2>&1 &
        p=$!
        eval "pid_$name=$p"
        for _ in $(seq 300); do
                [ -S "$tmp/$name/smcd.sock" ] && return 0
                kill -0 "$p" 2>/dev/null || break
                sleep 0.1
        done
        warn "smcd $name did not start; its log:"
        tail -20 "$tmp/smcd-$name.log" >&2
        return 1
}
stop_smcds() {
        stop_pid "$pid_a" TERM
        stop_pid "$pid_b" TERM
        pid_a='' pid_b=''
}
# snap NAME OUT: have smcd NAME write stats.json (SIGUSR1), copy it to OUT
snap() {
        local p f=$tmp/$1/stats.json
        eval "p=\$pid_$1"
        rm -f "$f"
        kill -USR1 "$p" 2>/dev/null || return 1
        for _ in $(seq 100); do # smcd writes it atomically (rename)
                [ -s "$f" ] && { cp "$f" "$2"; return 0; }
                sleep 0.1
        done
        return 1
}
# deltas A0 A1 B0 B1: what one run moved in smcd A's (A0 before, A1 after) and B's
# stats.json: "A.smcr.conns_client B.smcr.conns_server A.smcr.cdc_sends
# A.smcr.inline_sends A.smcd.fallback_total" (jq: a python3 start costs seconds under TCG)
deltas() {
        jq -rs '"\(.[1].smcr.conns_client - .[0].smcr.conns_client) \(.[3].smcr.conns_server - .[2].smcr.conns_server)"
                + " \(.[1].smcr.cdc_sends - .[0].smcr.cdc_sends) \(.[1].smcr.inline_sends - .[0].smcr.inline_sends)"
                + " \(.[1].smcd.fallback_total - .[0].smcd.fallback_total)"' "$@" 2>/dev/null | grep -E '^-?[0-9]+( -?[0-9]+){4}$' ||
                echo "x x x x x"
}

# ---- sockperf ----
# start_server MODE(tcp|smcr) LOG: sockperf server on B's address (under smcrun with B's smcd)
start_server() {
        local w=() log=$tmp/$2
        [ "$1" = smcr ] && w=(env SMCD_RUNTIME_DIR="$tmp/b" sh "$smcrun")
        "${w[@]}" sockperf sr --tcp -i "$RXE_B_IP" -p $port >"$log" 2>&1 &
        server_pid=$!
        for _ in $(seq 300); do
                grep -q "listen on" "$log" 2>/dev/null && return 0
                kill -0 "$server_pid" 2>/dev/null || break
                sleep 0.1
        done
        warn "sockperf server ($1) did not start:"
        tail -20 "$log" >&2
        ss -tanpo "( sport = :$port or dport = :$port )" >&2
        stop_pid "$server_pid" INT
        server_pid=
        return 1
}
stop_server() {
        stop_pid "$server_pid" INT
        server_pid=
}
# client MODE NAME SECONDS SOCKPERF-ARGS...: run a client from A's address; log NAME.log
client() {
        local mode=$1 name=$2 secs=$3 w=() rc
        shift 3
        [ "$mode" = smcr ] && w=(env SMCD_RUNTIME_DIR="$tmp/a" sh "$smcrun")
        timeout -k 5 $((secs + 90)) "${w[@]}" sockperf "$@" --tcp -i "$RXE_B_IP" -p $port -t "$secs" \
                >"$tmp/$name.log" 2>&1
        rc=$?
        sed -i 's/\x1b\[[0-9;]*m//g' "$tmp/$name.log"
        if [ $rc -ne 0 ]; then
                warn "$name: sockperf exited with status $rc; its output:"
                tail -15 "$tmp/$name.log" >&2
                return 1
        fi
}
# field NAME WHAT: a number from a sockperf log
field() {
        local f=$tmp/$1.log
        case $2 in
        avg) sed -n 's/.*avg-latency=\([0-9.]*\).*/\1/p' "$f" | head -n 1 ;;
        p50) sed -n 's/.*percentile 50\.000 = *\([0-9.]*\).*/\1/p' "$f" | head -n 1 ;;
        p99) sed -n 's/.*percentile 99\.000 = *\([0-9.]*\).*/\1/p' "$f" | head -n 1 ;;
        n) sed -n 's/.*Valid Duration\].*ReceivedMessages=\([0-9]*\).*/\1/p' "$f" | head -n 1 ;;
        rate) sed -n 's/.*Message Rate is \([0-9.]*\).*/\1/p' "$f" | head -n 1 ;;
        mbps) sed -n 's/.*BandWidth is \([0-9.]*\) MBps.*/\1/p' "$f" | head -n 1 ;;
        esac
}

# results: one line per run in $tmp/runs: ROUND CASE TEST VERDICT AVG P50 P99 RATE MBPS NOTE
runs=$tmp/runs
: >"$runs"

# run_one ROUND CASE TEST NAME SECONDS SOCKPERF-ARGS...
run_one() {
        local round=$1 cas=$2 test=$3 name=$4 secs=$5 mode=tcp verdict=ok note=- t tc cl
        shift 5
        t=$(now)
        [ "$cas" != tcp ] && mode=smcr
        if [ $mode = smcr ]; then
                snap a "$tmp/$name.a0.json" && snap b "$tmp/$name.b0.json" ||
                        { warn "$name: no stats.json from smcd before the run"; verdict=nostats; }
        fi
        tc=$(now)
        if ! client $mode "$name" "$secs" "$@"; then
                verdict=FAILED
                failed=1
        fi
        cl=$(since "$tc")
        if [ $mode = smcr ] && [ $verdict != nostats ]; then
                if snap a "$tmp/$name.a1.json" && snap b "$tmp/$name.b1.json"; then
                        local cc cs cdc inl fb
                        read -r cc cs cdc inl fb < <(deltas "$tmp/$name.a0.json" "$tmp/$name.a1.json" \
                                "$tmp/$name.b0.json" "$tmp/$name.b1.json")
                        note="conns=$cc/$cs,cdc=$cdc,inline=$inl,fallback=$fb"
                        if [ "$cc" = x ] || [ "$cs" = x ] || [ "$cdc" = x ] || [ "$inl" = x ] || [ "$fb" = x ]; then
                                verdict=nostats
                        elif [ "$cc" -lt 1 ] || [ "$cs" -lt 1 ] || [ "$cdc" -lt 1 ] || [ "$fb" -gt 0 ]; then
                                [ $verdict = ok ] && verdict=FALLBACK
                        elif [ "$cas" = smcr-on ] && [ "$inl" -lt 1 ]; then
                                [ $verdict = ok ] && verdict=NOINLINE
                        elif [ "$cas" = smcr-off ] && [ "$inl" -ne 0 ]; then
                                [ $verdict = ok ] && verdict=INLINE
                        fi
                else
                        verdict=nostats
                fi
                [ $verdict = ok ] || failed=1
        fi
        local w v vals=()
        for w in avg p50 p99 rate mbps; do
                v=$(field "$name" $w)
                vals+=("${v:--}")
        done
        echo "$round $cas $test $verdict ${vals[*]} $note" >>"$runs"
        say "$name: $verdict, client $cl, with checks $(since "$t") ($(grep -h 'Summary:' "$tmp/$name.log" | sed 's/^sockperf: Summary: //' |
                paste -sd ';')) $note"
}

# open_conns: "A B", the SMC-R connections smcd A and B still hold (stats.json)
open_conns() {
        snap a "$tmp/open.a.json" && snap b "$tmp/open.b.json" || { echo "? ?"; return; }
        jq -rs '"\(.[0].smcr.conns_current) \(.[1].smcr.conns_current)"' "$tmp/open.a.json" "$tmp/open.b.json" 2>/dev/null ||
                echo "? ?"
}

ncase=0
run_case() { # ROUND CASE
        local round=$1 cas=$2 mode=smcr s t oa ob left
        t=$(now)
        ncase=$((ncase + 1))
        port=$((PORT_BASE + ncase))
        if [ "$cas" = tcp ]; then
                mode=tcp
        else
                start_smcd a "$RXE_A_DEV" "${cas#smcr-}" && start_smcd b "$RXE_B_DEV" "${cas#smcr-}" ||
                        { failed=1; stop_smcds; return 1; }
                if grep -q "SMC-R unavailable" "$tmp/smcd-a.log" "$tmp/smcd-b.log"; then
                        warn "$(grep -h 'SMC-R unavailable' "$tmp/smcd-a.log" "$tmp/smcd-b.log" | head -2)"
                        failed=1
                        stop_smcds
                        return 1
                fi
        fi
        if start_server $mode "r$round-$cas-server.log"; then
                for s in $SIZES; do
                        run_one "$round" "$cas" "pp$s" "r$round-$cas-pp$s" "$T" pp -m "$s"
                done
                if [ "$TP_T" -gt 0 ]; then
                        run_one "$round" "$cas" tp "r$round-$cas-tp" "$TP_T" tp -m $TP_SIZE
                fi
                stop_server
        else
                failed=1
        fi
        if [ $mode = smcr ]; then
                # both ends closed: smcd should have freed every SMC-R connection
                sleep 1
                read -r oa ob < <(open_conns)
                if [ "$oa" != 0 ] || [ "$ob" != 0 ]; then
                        warn "case $cas: after client and server exited, smcd A still holds $oa and smcd B $ob" \
                                "SMC-R connection(s) (stats.json smcr.conns_current); sockets on port $port:"
                        ss -tanpo "( sport = :$port or dport = :$port )" >&2
                        echo "r$round $cas: smcd A $oa, smcd B $ob SMC-R connections left open" >>"$tmp/problems"
                fi
                stop_smcds
                say "smcd A: $(grep -h 'SMC-R totals' "$tmp/smcd-a.log" | tail -1 | sed 's/.*SMC-R totals: //')"
        fi
        left=$(ss -tan "( sport = :$port )" | grep -c "$RXE_B_IP:$port ")
        if [ "$left" -gt 0 ]; then
                warn "case $cas: $left socket(s) still on $RXE_B_IP:$port after the server and smcd exited:"
                ss -tanpo "( sport = :$port or dport = :$port )" >&2
                echo "r$round $cas: $left socket(s) left on $RXE_B_IP:$port (a server restarted on it without SO_REUSEADDR gets EADDRINUSE)" \
                        >>"$tmp/problems"
        fi
        say "case $cas (round $round) took $(since "$t")"
}

say "sockperf pp ${T} s per size ($SIZES B), tp ${TP_T} s (${TP_SIZE} B); $ROUNDS round(s)"
for r in $(seq "$ROUNDS"); do
        if [ $((r % 2)) = 1 ]; then order="tcp smcr-on smcr-off"; else order="smcr-off smcr-on tcp"; fi
        for c in $order; do
                run_case "$r" "$c"
        done
done

# ---- the tables ----
python3 - "$runs" "$SIZES" "$T" "$TP_T" "$ROUNDS" "$machine" <<'PY'
import statistics, sys
runs, sizes, T, TP_T, rounds, machine = sys.argv[1], sys.argv[2].split(), sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6]
R = {}  # (case, test) -> list of dicts (verified runs only)
bad = {}  # (case, test) -> verdicts of the runs that do not count
for line in open(runs):
    f = line.split()
    if len(f) < 10:
        continue
    rnd, case, test, verdict, avg, p50, p99, rate, mbps, note = f[:10]
    num = lambda v: float(v) if v not in ("-", "") else None
    if verdict == "ok":
        R.setdefault((case, test), []).append(dict(avg=num(avg), p50=num(p50), p99=num(p99),
                                                  rate=num(rate), mbps=num(mbps), note=note))
    else:
        bad.setdefault((case, test), []).append(verdict)

def med(case, test, k):
    v = [r[k] for r in R.get((case, test), []) if r[k] is not None]
    return statistics.median(v) if v else None

def fmt(v, d=1):
    return "-" if v is None else f"{v:.{d}f}"

def ratio(a, b):
    return "-" if a is None or b is None or b == 0 else f"{a / b:.2f}x"

def status(case, test):
    n = len(R.get((case, test), []))
    b = bad.get((case, test), [])
    if not n and not b:
        return "not run"
    s = "ok" if case == "tcp" else "SMC-R ok"
    if b:
        s = f"{n} ok, " + ",".join(b) if n else ",".join(b)
    return s

def table(head, rows):
    w = [max(len(str(r[i])) for r in [head] + rows) for i in range(len(head))]
    line = lambda r: "| " + " | ".join(str(c).ljust(w[i]) if i < 2 else str(c).rjust(w[i])
                                       for i, c in enumerate(r)) + " |"
    print(line(head))
    print("|" + "|".join("-" * (x + 2) for x in w) + "|")
    for r in rows:
        print(line(r))

names = {"tcp": "TCP (same veth)", "smcr-on": "SMC-R inline=on", "smcr-off": "SMC-R inline=off"}
print()
print(f"SMC-R over soft-RoCE (rxe, qemu TCG) vs TCP over the same veth, one VM boot, {rounds} round(s)")
print(machine)
print(f"sockperf ping-pong, {T} s per run; latency one-way (RTT/2) in us; ratios < 1 = faster than TCP")
rows = []
for s in sizes:
    t = "pp" + s
    for c in ("tcp", "smcr-on", "smcr-off"):
        rows.append([f"{s} B", names[c], fmt(med(c, t, "avg")), fmt(med(c, t, "p50")), fmt(med(c, t, "p99")),
                     ratio(med(c, t, "p50"), med("tcp", t, "p50")), ratio(med(c, t, "avg"), med("tcp", t, "avg")),
                     status(c, t)])
    rows.append([f"{s} B", "inline on / off", "", "", "",
                 ratio(med("smcr-on", t, "p50"), med("smcr-off", t, "p50")),
                 ratio(med("smcr-on", t, "avg"), med("smcr-off", t, "avg")), ""])
table(["size", "case", "avg", "p50", "p99", "p50/TCP", "avg/TCP", "verified"], rows)
if TP_T > 0:
    print()
    print(f"sockperf throughput, 65507 B messages, {TP_T} s per run (client-side rate); ratios > 1 = more than TCP")
    rows = []
    for c in ("tcp", "smcr-on", "smcr-off"):
        rows.append(["65507 B", names[c], fmt(med(c, "tp", "mbps")), fmt(med(c, "tp", "rate"), 0),
                     ratio(med(c, "tp", "mbps"), med("tcp", "tp", "mbps")), status(c, "tp")])
    table(["size", "case", "MB/s", "msg/s", "vs TCP", "verified"], rows)
print()
print("verified: SMC-R ok = in that run smcd A made an SMC-R client connection and B a server one,")
print("  CDC sends grew, no fallback, inline sends grew only with inline=on (smcd stats.json, SIGUSR1).")
print("  FALLBACK / NOINLINE / INLINE / FAILED runs are left out of the numbers.")
PY

say "total $(since "$t0")"
if [ -s "$tmp/problems" ]; then
        echo "problems seen (they do not change the numbers above):"
        sed 's/^/  /' "$tmp/problems"
fi
if [ $failed != 0 ]; then
        warn "some runs failed or were not SMC-R; per-run verdicts:"
        cat "$runs" >&2
        for n in a b; do
                [ -s "$tmp/smcd-$n.log" ] || continue
                echo "---- smcd $n log (warnings, errors, last 15 lines)" >&2
                grep -Ei 'warn|error|fail|declin|fallback' "$tmp/smcd-$n.log" | tail -15 >&2
                tail -15 "$tmp/smcd-$n.log" >&2
        done
fi
exit $failed
