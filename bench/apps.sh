#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# bench/apps.sh [BUILDDIR]   (also: bench/run apps [BUILDDIR])
#
# The application table of issue 5 item 7: real programs under smcrun (SMC-D over a
# private smcd) and over plain TCP loopback, back to back in the same run, as ratios
# smcrun/TCP, with the issue's targets beside them:
#   - redis-benchmark SET and GET, pipelining off (-P 1) and on (-P 16), 50 clients;
#     and of 100 kB values (-P 1), most of smcd's default ring
#   - nginx (2 workers, master process), 4 KiB file, wrk keep-alive (sendfile on and
#     off), wrk "Connection: close" (as smcrun runs it, where smcd's hints send such
#     short connections to TCP, with SMCPROTO_HINTS=0: every one SMC-D, and with
#     SMCRUN_DISABLE=1: the library loaded but every call passed on), a 1 MiB
#     file, keep-alive again with wrk -t 2; and sendfile on vs off under smcrun
#   - iperf3 -P1 and -P4, with smcd's default ring (128 KiB RMB) and with --rmem 1M
#   - qperf tcp_lat and tcp_bw, and tcp_bw with both ends on CPU 0
#   - python3 echo servers (plain socket and asyncio), 64 B ping-pong
#   - PostgreSQL (its own cluster, fsync off; a process per connection) with pgbench,
#     4 clients: select-only (-S) and TPC-B-like without the teller/branch updates (-N)
# Each measurement runs BENCH_APPS_REPEAT times (default 3), TCP and smcrun
# alternating; the table shows medians. No CPU pinning by default, as a user runs these
# programs: on a 2-vCPU VM a cross-CPU wakeup costs TCP tens of microseconds, so pinning
# client and server apart (BENCH_APPS_PIN=1) inflates the latency-bound ratios.
# smcd's counters after the smcrun runs must show no fallback but the hinted ones of
# the Connection: close run (SMCD_DECL_SHORTCONN), else their numbers are not SMC-D
# numbers (exit 1).
#
# Needs: jq, taskset, python3, and redis-server redis-tools nginx-light iperf3 qperf wrk
# (scripts/install-deps.sh); a missing program's rows are left out. Environment:
#   BENCH_APPS_REPEAT   runs per measurement and transport (default 3)
#   BENCH_APPS_TIME     seconds per wrk / iperf3 / qperf / echo run (default 2)
#   BENCH_APPS_PIN=1    servers of single-threaded programs (redis, iperf3, qperf, python)
#                       on CPU 1, their clients on CPU 0 (nginx and wrk never pinned)
#   BENCH_RAW=1         also print every measured value
#   BENCH_APPS_ONLY     a comma-separated subset of redis,nginx,iperf3,qperf,echo,postgres
#   BENCH_APPS_WRK_THREADS  wrk's threads (default 1; its connections stay 32; the extra
#                       keep-alive row with wrk -t 2 is left out when this is 2)
# Exit: 0 when everything ran (missed targets are reported, not fatal), 1 when a
# measurement failed or smcrun runs fell back to TCP, 2 on bad usage or a missing tool.

set -u

BUILD=${1:-./build}
if [ ! -d "$BUILD" ]; then
        echo "usage: $0 [BUILDDIR]   ($BUILD is not a directory)" >&2
        exit 2
fi
BUILD=$(realpath "$BUILD")
top=$(realpath "$(dirname "$0")/..")
REPEAT=${BENCH_APPS_REPEAT:-3}
DUR=${BENCH_APPS_TIME:-2}
WRK_THREADS=${BENCH_APPS_WRK_THREADS:-1}
case $WRK_THREADS in
''|*[!0-9]*|0) echo "bench/apps: BENCH_APPS_WRK_THREADS must be a number 1..32, not '$WRK_THREADS'" >&2; exit 2 ;;
esac
[ "$WRK_THREADS" -le 32 ] || { echo "bench/apps: BENCH_APPS_WRK_THREADS must be a number 1..32, not '$WRK_THREADS'" >&2; exit 2; }
IFS=, read -r -a only_list <<<"${BENCH_APPS_ONLY:-}"
for g in "${only_list[@]}"; do
        case $g in
        redis | nginx | iperf3 | qperf | echo | postgres) ;;
        *)
                echo "bench/apps: BENCH_APPS_ONLY: unknown program '$g' (redis,nginx,iperf3,qperf,echo,postgres)" >&2
                exit 2
                ;;
        esac
done
for tool in jq taskset python3; do
        if ! command -v "$tool" >/dev/null; then
                echo "bench/apps: $tool is not installed (scripts/install-deps.sh)" >&2
                exit 2
        fi
done
for f in "$BUILD/smcd/smcd" "$BUILD/libsmcproto/libsmcrun.so" "$BUILD/libsmcproto/smcrun"; do
        if [ ! -e "$f" ]; then
                echo "bench/apps: $f is missing: build first (ninja -C $BUILD)" >&2
                exit 2
        fi
done

# shellcheck source=tests/apps/lib.sh
. "$top/tests/apps/lib.sh"
load_before=$(cut -d ' ' -f 1-3 /proc/loadavg)
apps_init "$BUILD/smcd/smcd" "$BUILD/libsmcproto/libsmcrun.so" "$BUILD/libsmcproto/smcrun" \
        smcd-bench-apps || exit 1
[ -n "$APPS_SANITIZER" ] && echo "bench/apps: warning: a sanitizer build ($BUILD): numbers mean little" >&2
apps_smcd_start || exit 1

failed=0
RES=$APPS_DIR/results
: >"$RES"
warn() { echo "bench/apps: $*" >&2; }
note() { echo "bench/apps: $*" >&2; }
T() { timeout -k 5 "$@"; }

if [ "${BENCH_APPS_PIN:-0}" = 1 ] && [ "$(nproc)" -ge 2 ]; then
        CPU_CLIENT=(taskset -c 0)
        CPU_SERVER=(taskset -c 1)
        pin_note="single-threaded servers on CPU 1, their clients on CPU 0 (BENCH_APPS_PIN=1)"
else
        pin_note="no CPU pinning (BENCH_APPS_PIN=1 pins single-threaded servers to CPU 1, clients to CPU 0)"
        CPU_CLIENT=()
        CPU_SERVER=()
fi

# wrap MODE: the command prefix for tcp (nothing) or smc (smcrun)
# wrap MODE: W = the command prefix of MODE: tcp (none), smc (smcrun), smc0 (smcrun
# ignoring smcd's connection hints, SMCPROTO_HINTS=0: SMC-D however short the
# connections are), off (smcrun with SMCRUN_DISABLE=1: the library's cost alone)
wrap() {
        case $1 in
        smc) W=("${SMCRUN[@]}") ;;
        smc0) W=(env SMCPROTO_HINTS=0 "${SMCRUN[@]}") ;;
        off) W=(env SMCRUN_DISABLE=1 "${SMCRUN[@]}") ;;
        *) W=() ;;
        esac
}

# res KEY MODE VALUE: record one measurement (nothing when VALUE is empty)
res() {
        if [ -z "${3:-}" ]; then
                warn "$1 ($2): no result"
                failed=1
                return
        fi
        printf '%s %s %s\n' "$1" "$2" "$3" >>"$RES"
        [ "${BENCH_RAW:-0}" = 1 ] && echo "bench/apps: $1 $2 $3" >&2
        return 0
}

# median KEY MODE: the median of the recorded values
median() {
        awk -v k="$1" -v m="$2" '$1 == k && $2 == m { print $3 }' "$RES" | sort -g |
                awk '{ v[++n] = $1 } END { if (!n) exit; if (n % 2) print v[(n + 1) / 2]; else print (v[n / 2] + v[n / 2 + 1]) / 2 }'
}

# stop_server PID: stop a server started with apps_bg
stop_server() {
        pkill -TERM -P "$1" 2>/dev/null
        apps_stop "$1" TERM 5
}

# --- redis ----------------------------------------------------------------------------------
# redis_run MODE PORT NAME ARGS...: one redis-benchmark SET,GET run; the results as
# redis-set-NAME and redis-get-NAME
redis_run() {
        local mode=$1 port=$2 name=$3 csv
        shift 3
        csv=$APPS_DIR/redis-$mode-$name.csv
        if ! T 120 "${CPU_CLIENT[@]}" "${W[@]}" redis-benchmark -p "$port" -t set,get "$@" --csv >"$csv" 2>&1 ||
                grep -qi error "$csv"; then
                warn "redis-benchmark $* ($mode) failed:"
                tail -n 5 "$csv" >&2
                failed=1
                return
        fi
        res "redis-set-$name" "$mode" "$(awk -F '"' '$2 == "SET" { print $4 }' "$csv")"
        res "redis-get-$name" "$mode" "$(awk -F '"' '$2 == "GET" { print $4 }' "$csv")"
}

bench_redis() {
        local mode=$1 port pid
        wrap "$mode"
        port=$(apps_free_port)
        if ! apps_redis_start "redis-$mode" "$port" "$APPS_DIR" "${CPU_SERVER[@]}" "${W[@]}"; then
                warn "redis-server ($mode) did not start"
                failed=1
                stop_server "$APPS_BG_PID"
                return
        fi
        pid=$APPS_BG_PID
        # about 2 s per test over TCP: -n 100000 (-P 1), 1000000 (-P 16); values of 100 kB,
        # most of the default 128 KiB ring (about 0.5 s)
        redis_run "$mode" "$port" P1 -n 100000 -P 1
        redis_run "$mode" "$port" P16 -n 1000000 -P 16
        redis_run "$mode" "$port" big -n 20000 -d 100000
        stop_server "$pid"
}

# --- nginx ----------------------------------------------------------------------------------
NGINX_EVENTS=""
nginx_setup() {
        local d=$APPS_DIR/nginx
        apps_nginx_www "$d"
        printf '%s\n' 'done = function(s, l, r)' \
                '  io.write(string.format("{\"requests\": %d, \"bytes\": %d, \"errors\": %d, \"duration_us\": %d}\n",' \
                '    s.requests, s.bytes, s.errors.connect + s.errors.read + s.errors.write + s.errors.status' \
                '    + s.errors.timeout, s.duration))' \
                'end' >"$d/summary.lua"
}

# nginx_start MODE PORT SENDFILE: a fresh nginx.conf (4096 connections a worker,
# NGINX_EVENTS), nginx started; APPS_NGINX_PID; 0 when both workers serve
nginx_start() {
        local d=$APPS_DIR/nginx
        wrap "$1"
        apps_nginx_conf "$d" "$2" "$3" 4096 notice "$NGINX_EVENTS" >"$d/nginx.conf"
        apps_nginx_start "$d" "$2" "nginx-$1" "${W[@]}"
}

# bench_nginx MODE KEY SENDFILE FILE [WRK-ARGS...]: one fresh nginx, one wrk run
bench_nginx() {
        local mode=$1 key=$2 sendfile=$3 file=$4 port out d=$APPS_DIR/nginx
        shift 4
        port=$(apps_free_port)
        if ! nginx_start "$mode" "$port" "$sendfile"; then
                warn "nginx ($mode) did not serve:"
                grep -E '\[(alert|emerg|crit)\]' "$d/error.log" | head -n 2 >&2
                failed=1
                apps_stop "$APPS_NGINX_PID" QUIT 5
                return
        fi
        wrap "$mode"
        T $((DUR + 30)) "${W[@]}" wrk -t "${NGINX_WRK_T:-$WRK_THREADS}" -c 32 -d "$DUR" "$@" -s "$d/summary.lua" \
                "http://127.0.0.1:$port/$file" >"$APPS_DIR/wrk-$key-$mode.log" 2>&1
        out=$(grep '^{' "$APPS_DIR/wrk-$key-$mode.log" | tail -n 1)
        apps_stop "$APPS_NGINX_PID" QUIT 10
        if [ -z "$out" ]; then
                warn "wrk $key ($mode) failed:"
                tail -n 5 "$APPS_DIR/wrk-$key-$mode.log" >&2
                failed=1
                return
        fi
        [ "$(jq .errors <<<"$out")" = 0 ] || note "wrk $key ($mode): $(jq .errors <<<"$out") socket errors"
        res "nginx-$key" "$mode" "$(jq '.requests * 1000000 / .duration_us' <<<"$out")"
        res "nginx-$key-MBps" "$mode" "$(jq '.bytes / .duration_us' <<<"$out")"
}

# --- iperf3 ---------------------------------------------------------------------------------
bench_iperf3() { # bench_iperf3 MODE KEY STREAMS
        local mode=$1 key=$2 n=$3 port pid
        wrap "$mode"
        port=$(apps_free_port)
        apps_bg "iperf3-$key-$mode" "${CPU_SERVER[@]}" "${W[@]}" iperf3 -s -1 -p "$port" -B 127.0.0.1
        pid=$APPS_BG_PID
        if ! apps_wait_port "$port" 10 "$pid"; then
                warn "iperf3 server ($mode) did not start"
                failed=1
                stop_server "$pid"
                return
        fi
        T $((DUR + 30)) "${CPU_CLIENT[@]}" "${W[@]}" iperf3 -c 127.0.0.1 -p "$port" -t "$DUR" -P "$n" -J \
                >"$APPS_DIR/iperf3-$key-$mode.json" 2>&1
        apps_stop "$pid" 0 10
        res "iperf3-$key" "$mode" "$(jq -r 'select(.error == null) | .end.sum_received.bits_per_second / 1e9' \
                "$APPS_DIR/iperf3-$key-$mode.json" 2>/dev/null)"
}

# --- qperf ----------------------------------------------------------------------------------
# bench_qperf MODE [1cpu]: with 1cpu, tcp_bw only, both ends on CPU 0 (as two
# containers on one CPU, or a busy machine: the peer runs only when we stop)
bench_qperf() {
        local mode=$1 sfx=${2:+-$2} port pid log=$APPS_DIR/qperf-$1${2:+-$2}.log
        local -a cs=("${CPU_SERVER[@]}") cc=("${CPU_CLIENT[@]}") tests=(tcp_lat tcp_bw)
        [ -n "${2:-}" ] && { cs=(taskset -c 0); cc=(taskset -c 0); tests=(tcp_bw); }
        wrap "$mode"
        port=$(apps_free_port)
        apps_bg "qperf-server-$mode$sfx" "${cs[@]}" "${W[@]}" qperf -lp "$port"
        pid=$APPS_BG_PID
        if ! apps_wait_port "$port" 10 "$pid"; then
                warn "qperf server ($mode) did not start"
                failed=1
                stop_server "$pid"
                return
        fi
        # -uu: latency in ns, bandwidth in bytes/s
        T $((2 * DUR + 30)) "${cc[@]}" "${W[@]}" qperf -lp "$port" -t "$DUR" -uu 127.0.0.1 \
                "${tests[@]}" >"$log" 2>&1
        stop_server "$pid"
        [ -z "$sfx" ] && res qperf-lat "$mode" "$(awk '/latency *=/ { print $3 / 1000 }' "$log")"
        res "qperf-bw$sfx" "$mode" "$(awk '/bw *=/ { print $3 / 1e9 }' "$log")"
        grep -q 'failed' "$log" && warn "qperf ($mode): $(grep -m 1 failed "$log")"
}

# --- python echo ----------------------------------------------------------------------------
bench_echo() { # bench_echo MODE KIND
        local mode=$1 kind=$2 pid port
        wrap "$mode"
        apps_echo_start "echo-$kind-$mode" "$kind" "$APPS_DIR/echo-$kind-$mode.port" "${CPU_SERVER[@]}" "${W[@]}"
        pid=$APPS_BG_PID
        port=$APPS_ECHO_PORT
        if [ -z "$port" ]; then
                warn "python $kind echo server ($mode) did not start"
                failed=1
                stop_server "$pid"
                return
        fi
        res "echo-$kind" "$mode" "$(T $((DUR + 30)) "${CPU_CLIENT[@]}" "${W[@]}" python3 "$top/tests/apps/echo.py" \
                client --port "$port" --pingpong 64 --time "$DUR" 2>/dev/null | jq -r 'select(.errors == 0) | .rtt_per_s')"
        stop_server "$pid"
}

# --- PostgreSQL -----------------------------------------------------------------------------
# bench_postgres MODE: postgres (the cluster of pg_setup) under MODE, pgbench -S and -N
# with 4 clients, DUR seconds each
bench_postgres() {
        local mode=$1 port pid m
        wrap "$mode"
        port=$(apps_free_port)
        if ! apps_pg_start "postgres-$mode" "$APPS_DIR/pg" "$port" "${W[@]}"; then
                warn "postgres ($mode) did not start"
                failed=1
                apps_stop "$APPS_BG_PID" INT 10
                return
        fi
        pid=$APPS_BG_PID
        for m in S N; do
                if ! T $((DUR + 60)) "${W[@]}" pgbench -h 127.0.0.1 -p "$port" -U postgres -c 4 -j 2 -T "$DUR" -$m \
                        postgres >"$APPS_DIR/pgbench-$m-$mode.log" 2>&1 ||
                        ! grep -q '^number of failed transactions: 0 ' "$APPS_DIR/pgbench-$m-$mode.log"; then
                        warn "pgbench -$m ($mode) failed:"
                        tail -n 5 "$APPS_DIR/pgbench-$m-$mode.log" >&2
                        failed=1
                        continue
                fi
                res "pgbench-$m" "$mode" "$(awk '/^tps = / { print $3 }' "$APPS_DIR/pgbench-$m-$mode.log")"
        done
        apps_stop "$pid" INT 20
}

# pg_setup: a cluster in $APPS_DIR/pg with pgbench's tables (scale 2); 1 if it fails
pg_setup() {
        local port pid r=0
        apps_pg_init "$APPS_DIR/pg" || { warn "postgres: initdb failed: $(tail -n 1 "$APPS_DIR/pg/initdb.log")"; return 1; }
        port=$(apps_free_port)
        apps_pg_start postgres-init "$APPS_DIR/pg" "$port" || r=1
        pid=$APPS_BG_PID
        [ $r = 0 ] && { T 120 pgbench -h 127.0.0.1 -p "$port" -U postgres -i -s 2 -q postgres \
                >"$APPS_DIR/pgbench-init.log" 2>&1 || r=1; }
        apps_stop "$pid" INT 20
        [ $r = 0 ] || warn "postgres: the cluster or pgbench's tables could not be made"
        return $r
}

have() { command -v "$1" >/dev/null || { warn "$1 is not installed: no $1 rows"; return 1; }; }

# --- the runs -------------------------------------------------------------------------------
has_redis=0 has_nginx=0 has_iperf3=0 has_qperf=0 has_postgres=0 has_echo=0
# BENCH_APPS_ONLY: a comma-separated subset of redis,nginx,iperf3,qperf,echo,postgres
# (only those are looked for: no warning about a program left out)
want() { [ -z "${BENCH_APPS_ONLY:-}" ] || case ",$BENCH_APPS_ONLY," in *",$1,"*) true ;; *) false ;; esac; }
want redis && have redis-server && have redis-benchmark && has_redis=1
want nginx && have nginx && have wrk && have curl && has_nginx=1
want iperf3 && have iperf3 && has_iperf3=1
want qperf && have qperf && has_qperf=1
if want postgres; then
        if apps_pg_bindir >/dev/null; then
                have pgbench && has_postgres=1
        else
                warn "postgresql is not installed: no postgres rows"
        fi
fi
want echo && has_echo=1

if [ $has_nginx = 1 ]; then
        nginx_setup
        # nginx's default (accept_mutex off: EPOLLEXCLUSIVE on the shared listener) under
        # smcrun; if its workers cannot start, both transports run with the accept mutex
        port=$(apps_free_port)
        if ! nginx_start smc "$port" on; then
                NGINX_EVENTS="accept_mutex on;"
                nginx_note="nginx ran with 'accept_mutex on' (both transports): with nginx's default, its workers fail under smcrun: $(grep -m 1 -E '\[(alert|emerg|crit)\]' "$APPS_DIR/nginx/error.log" | cut -d ' ' -f 4-)"
                warn "$nginx_note"
        fi
        apps_stop "$APPS_NGINX_PID" QUIT 5
fi
[ $has_postgres = 1 ] && { pg_setup || { has_postgres=0; failed=1; }; }

for ((r = 1; r <= REPEAT; r++)); do
        note "round $r of $REPEAT ..."
        for mode in tcp smc; do
                [ $has_redis = 1 ] && bench_redis $mode
                if [ $has_nginx = 1 ]; then
                        bench_nginx $mode 4k-ka-on on 4k.bin
                        bench_nginx $mode 4k-ka-off off 4k.bin
                        bench_nginx $mode 4k-close on 4k.bin -H 'Connection: close'
                        # the same with every connection SMC-D (no hint sends them to TCP)
                        [ $mode = smc ] && bench_nginx smc0 4k-close on 4k.bin -H 'Connection: close'
                        # and with the library loaded but passing every call on: what
                        # the hinted (TCP) connections can reach at best
                        [ $mode = smc ] && bench_nginx off 4k-close on 4k.bin -H 'Connection: close'
                        bench_nginx $mode 1m-ka-on on 1m.bin
                        # the keep-alive run again with a wrk thread per CPU: wrk -t 1
                        # is the limit of the run above (its 4 system calls a request
                        # are as many as over TCP)
                        [ "$WRK_THREADS" = 2 ] || NGINX_WRK_T=2 bench_nginx $mode 4k-ka-t2 on 4k.bin
                fi
                if [ $has_iperf3 = 1 ]; then
                        bench_iperf3 $mode P1 1
                        bench_iperf3 $mode P4 4
                fi
                if [ $has_qperf = 1 ]; then
                        bench_qperf $mode
                        bench_qperf $mode 1cpu
                fi
                [ $has_postgres = 1 ] && bench_postgres $mode
                if [ $has_echo = 1 ]; then
                        bench_echo $mode socket
                        bench_echo $mode asyncio
                fi
        done
done
apps_wait_idle 5 || warn "smcd still has $APPS_CONNS_CURRENT connections after the default-ring runs"
apps_stats
# the Connection: close runs' hinted connections (SMCD_DECL_SHORTCONN, smcd-tunables(5)
# short_conn_rate) are TCP by design; any other fallback spoils the SMC-D numbers
shortconn=$(jq -r '.smcd.fallback.SMCD_DECL_SHORTCONN // 0' "$APPS_DIR/stats.json" 2>/dev/null)
fallbacks=$(( $(apps_stat fallback_total) - ${shortconn:-0} ))
counters="default ring: SMC-D connections client $(apps_stat conns_client) server $(apps_stat conns_server), fallbacks $fallbacks"
counters="$counters, hinted to TCP (Connection: close, SMCD_DECL_SHORTCONN) ${shortconn:-0} in $(apps_stat short_conn_hints) hints"

# iperf3 with a 1 MiB ring (RMB): smcd --rmem 1M
if [ $has_iperf3 = 1 ]; then
        apps_smcd_stop || warn "smcd exited with status $?"
        apps_smcd_start --rmem 1M || exit 1
        for ((r = 1; r <= REPEAT; r++)); do
                bench_iperf3 smc P1-1M 1
                bench_iperf3 smc P4-1M 4
        done
        apps_wait_idle 5 || warn "smcd still has $APPS_CONNS_CURRENT connections after the 1 MiB ring runs"
        apps_stats
        f=$(apps_stat fallback_total)
        fallbacks=$((fallbacks + f))
        counters="$counters; --rmem 1M: client $(apps_stat conns_client) server $(apps_stat conns_server), fallbacks $f"
fi

# --- the table ------------------------------------------------------------------------------
rows=$APPS_DIR/rows
: >"$rows"
met_n=0
miss_n=0
row() { # row METRIC TCP SMC RATIO TARGET MET
        printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$rows"
        case $6 in
        yes) met_n=$((met_n + 1)) ;;
        NO) miss_n=$((miss_n + 1)) ;;
        esac
}
fmt() {
        [ -z "${1:-}" ] && { echo -; return; }
        awk -v v="$1" 'BEGIN { if (v >= 1000) printf "%.0f", v; else if (v >= 100) printf "%.1f", v;
                else if (v >= 10) printf "%.2f", v; else printf "%.3f", v }'
}
ratio() {
        if [ -z "${1:-}" ] || [ -z "${2:-}" ]; then echo -; return; fi
        awk -v a="$1" -v b="$2" 'BEGIN { if (b == 0) print "-"; else printf "%.2f", a / b }'
}
check() { # check VALUE LIMIT: yes / NO / - (>=)
        if [ -z "${1:-}" ] || [ "$1" = - ]; then echo -; return; fi
        awk -v v="$1" -v l="$2" 'BEGIN { print (v >= l) ? "yes" : "NO" }'
}
# pair LABEL KEY [TARGET]: TCP vs smcrun medians of KEY, ratio smcrun/TCP
pair() {
        local t s q
        t=$(median "$2" tcp)
        s=$(median "$2" smc)
        q=$(ratio "$s" "$t")
        if [ -n "${3:-}" ]; then
                row "$1" "$(fmt "$t")" "$(fmt "$s")" "${q}x" ">= ${3}x" "$(check "$q" "$3")"
        else
                row "$1" "$(fmt "$t")" "$(fmt "$s")" "${q}x" "" "-"
        fi
}

if [ $has_redis = 1 ]; then
        pair "redis-benchmark SET -P 1 (req/s)" redis-set-P1 1.5
        pair "redis-benchmark GET -P 1 (req/s)" redis-get-P1 1.5
        pair "redis-benchmark SET -P 16 (req/s)" redis-set-P16 1.5
        pair "redis-benchmark GET -P 16 (req/s)" redis-get-P16 1.5
        pair "redis-benchmark SET 100 kB values -P 1 (req/s)" redis-set-big
        pair "redis-benchmark GET 100 kB values -P 1 (req/s)" redis-get-big
fi
if [ $has_nginx = 1 ]; then
        pair "nginx 4 KiB keep-alive, sendfile on (req/s)" nginx-4k-ka-on 1.5
        pair "nginx 4 KiB keep-alive, sendfile off (req/s)" nginx-4k-ka-off
        [ "$WRK_THREADS" = 2 ] || pair "nginx 4 KiB keep-alive, sendfile on, wrk -t 2 (req/s)" nginx-4k-ka-t2
        pair "nginx 4 KiB Connection: close (req/s)" nginx-4k-close 1.0
        t=$(median nginx-4k-close tcp)
        s=$(median nginx-4k-close smc0)
        row "nginx 4 KiB Connection: close, all SMC-D (SMCPROTO_HINTS=0) (req/s)" "$(fmt "$t")" "$(fmt "$s")" \
                "$(ratio "$s" "$t")x" "" "-"
        s=$(median nginx-4k-close off)
        row "nginx 4 KiB Connection: close, SMCRUN_DISABLE=1 (the library's own cost) (req/s)" "$(fmt "$t")" \
                "$(fmt "$s")" "$(ratio "$s" "$t")x" "" "-"
        pair "nginx 1 MiB keep-alive, sendfile on (MB/s)" nginx-1m-ka-on-MBps
        # seed 001: sendfile on vs off, both under smcrun (TCP's own on/off beside it)
        t=$(ratio "$(median nginx-4k-ka-on tcp)" "$(median nginx-4k-ka-off tcp)")
        s=$(ratio "$(median nginx-4k-ka-on smc)" "$(median nginx-4k-ka-off smc)")
        row "nginx 4 KiB keep-alive sendfile on/off (ratio)" "${t}x" "${s}x" "${s}x" ">= 1.45x" "$(check "$s" 1.45)"
fi
if [ $has_iperf3 = 1 ]; then
        pair "iperf3 -P1 (Gbit/s)" iperf3-P1 3
        pair "iperf3 -P4 (Gbit/s)" iperf3-P4 3
        t=$(median iperf3-P1 tcp)
        s=$(median iperf3-P1-1M smc)
        q=$(ratio "$s" "$t")
        row "iperf3 -P1, smcd --rmem 1M (Gbit/s)" "$(fmt "$t")" "$(fmt "$s")" "${q}x" ">= 3x" "$(check "$q" 3)"
        t=$(median iperf3-P4 tcp)
        s=$(median iperf3-P4-1M smc)
        q=$(ratio "$s" "$t")
        row "iperf3 -P4, smcd --rmem 1M (Gbit/s)" "$(fmt "$t")" "$(fmt "$s")" "${q}x" ">= 3x" "$(check "$q" 3)"
fi
if [ $has_qperf = 1 ]; then
        pair "qperf tcp_lat (us, lower is better)" qperf-lat
        pair "qperf tcp_bw (GB/s)" qperf-bw
        pair "qperf tcp_bw, both ends on one CPU (GB/s)" qperf-bw-1cpu
fi
if [ $has_postgres = 1 ]; then
        pair "pgbench -S, 4 clients (tps)" pgbench-S
        pair "pgbench -N, 4 clients, fsync off (tps)" pgbench-N
fi
pair "python socket echo 64 B ping-pong (round trips/s)" echo-socket
pair "python asyncio echo 64 B ping-pong (round trips/s)" echo-asyncio

echo
echo "smcd application table: each program under smcrun (SMC-D) and over TCP loopback, one run"
echo "machine: $(nproc) CPU(s), $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)," \
        "kernel $(uname -r), $(date -u '+%Y-%m-%d %H:%M UTC'), load average before the run $load_before"
echo
awk -F '\t' '
        BEGIN { h[1] = "metric"; h[2] = "TCP"; h[3] = "smcrun"; h[4] = "smcrun/TCP"; h[5] = "target"; h[6] = "met?" }
        { n++; for (i = 1; i <= 6; i++) { c[n, i] = ($i == "" || $i == "x" || $i == "-x") ? "-" : $i } }
        END {
                for (i = 1; i <= 6; i++) { w[i] = length(h[i]) }
                for (r = 1; r <= n; r++) for (i = 1; i <= 6; i++) if (length(c[r, i]) > w[i]) w[i] = length(c[r, i])
                line = "|"
                for (i = 1; i <= 6; i++) line = line sprintf(i == 1 ? " %-*s |" : " %*s |", w[i], h[i])
                print line
                line = "|"
                for (i = 1; i <= 6; i++) { s = ""; for (k = 0; k < w[i] + 2; k++) s = s "-"; line = line s "|" }
                print line
                for (r = 1; r <= n; r++) {
                        line = "|"
                        for (i = 1; i <= 6; i++) line = line sprintf(i == 1 ? " %-*s |" : " %*s |", w[i], c[r, i])
                        print line
                }
        }' "$rows"
echo
echo "targets met: $met_n, missed: $miss_n"
echo "notes: medians of $REPEAT runs per transport, TCP and smcrun alternating; $DUR s per wrk,"
echo "  iperf3, qperf and echo run. redis-benchmark: 50 clients, -n 100000 (-P 1) or 1000000"
echo "  (-P 16), -n 20000 for 100 kB values (-d 100000). nginx: 2 workers, a fresh nginx per run, wrk -t $WRK_THREADS -c 32, tcp_nopush on;"
echo "  'sendfile on/off' compares 4 KiB keep-alive req/s of the two configurations (TCP column:"
echo "  TCP's own ratio). iperf3: 128 KiB writes; smcd's default RMB is 128 KiB, '--rmem 1M'"
echo "  restarts smcd with 1 MiB RMBs. qperf: -t $DUR, -uu. python: tests/apps/echo.py, one"
echo "  connection, 64 B messages. pgbench: -c 4 -j 2 -T $DUR on a scale-2 database, a"
echo "  postgres (fsync off) started for each run. CPUs: $pin_note."
[ -n "${nginx_note:-}" ] && echo "  $nginx_note"
echo "  smcd counters: $counters"
if [ "${fallbacks:-0}" != 0 ]; then
        warn "$fallbacks smcrun connections fell back to TCP: their numbers are not SMC-D numbers"
        failed=1
fi
apps_smcd_stop || { warn "smcd exited with status $?"; failed=1; }
exit $failed
