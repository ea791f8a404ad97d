#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# Real programs, unmodified, under smcrun over a private smcd (issue 5 item 6): qperf,
# iperf3 (1 and 4 streams), redis-server with redis-benchmark (pipelining off and on) and
# redis-cli, nginx (2 workers, master process, sendfile on and off) with wrk (keep-alive
# and "Connection: close") and curl, nginx's reload and binary upgrade under wrk,
# PostgreSQL with pgbench and psql, python3 socket and asyncio echo servers, socat (a
# select-then-blocking-write relay, both ways at once, with a C stdio filter on the
# connection: base64, and cat). sockperf has its own test (test-sockperf.sh).
#
# Each run is bounded in time and checked: exit status, the errors the program reports
# (0), response bodies (sha256), and smcd's counters (stats.json, SIGUSR1): SMC-D
# connections made, no fallback, sendfile used when nginx has it on, and smcd's
# conns_current back to 0 after each program (nothing leaked in smcd).
# One line per check: "ok - ..." or "not ok - ..." (TAP-like; "ok - ... # SKIP" when a
# program is not installed). Exit: 0 all passed, 1 a check failed, 77 (skip) when a
# program is missing and nothing failed.
#
# usage: test-real-apps.sh SMCD LIBSMCRUN SMCRUN
# Environment: APPS_KEEP=1 keeps the temporary directory (logs) for a look afterwards.

set -u

if [ $# -ne 3 ]; then
        echo "usage: $0 SMCD LIBSMCRUN SMCRUN" >&2
        exit 2
fi
here=$(dirname "$(realpath "$0")")
# shellcheck source=tests/apps/lib.sh
. "$here/apps/lib.sh"

for tool in jq python3 sha256sum; do
        command -v "$tool" >/dev/null || { echo "SKIP: $tool is not installed"; exit 77; }
done

apps_init "$1" "$2" "$3" smcd-test-apps || exit 1
apps_smcd_start || exit 1
[ -n "$APPS_SANITIZER" ] && echo "# sanitizer build: preloading $APPS_SANITIZER"

failed=0
n_ok=0
n_fail=0
n_skip=0
ok() { echo "ok - $*"; n_ok=$((n_ok + 1)); }
nok() { echo "not ok - $*"; n_fail=$((n_fail + 1)); failed=1; }
# check COND-STATUS MESSAGE: ok when the status is 0
check() { if [ "$1" = 0 ]; then ok "$2"; else nok "$2"; fi; }
skip() { echo "ok - $* # SKIP"; n_skip=$((n_skip + 1)); }
# have PROG...: all installed, else a SKIP line
have() {
        local p missing=()
        for p in "$@"; do command -v "$p" >/dev/null || missing+=("$p"); done
        [ ${#missing[@]} -eq 0 ] && return 0
        skip "${missing[*]} not installed"
        return 1
}
# log NAME [LINES]: indented tail of a log, after a failure
log() {
        [ -s "$APPS_DIR/$1" ] || return 0
        echo "#   --- $1 (last ${2:-10} lines)"
        tail -n "${2:-10}" "$APPS_DIR/$1" | sed 's/\x1b\[[0-9;]*m//g; s/^/#   /'
}
# smc_used WHAT MIN [hinted]: at least MIN SMC-D connections each side since the mark, no
# fallback; with "hinted", none but the SMCD_DECL_SHORTCONN ones of smcd's hints for
# short-lived connections (smcd-tunables(5) short_conn_rate: wrk's Connection: close
# runs), and those must have come (a hint published, hinted connections counted; not
# asked of a sanitizer build, whose rate may stay below the tunable)
smc_used() {
        local what=$1 min=$2 c s f h n ok=0
        apps_stats
        c=$(apps_delta conns_client)
        s=$(apps_delta conns_server)
        f=$(apps_delta fallback_total)
        if [ "${3:-}" = hinted ]; then
                h=$(apps_delta fallback.SMCD_DECL_SHORTCONN)
                n=$(apps_delta short_conn_hints)
                [ "$c" -ge "$min" ] && [ "$s" -ge "$min" ] && [ $((f - h)) = 0 ] &&
                        { [ -n "$APPS_SANITIZER" ] || { [ "$h" -ge 1 ] && [ "$n" -ge 1 ]; }; } || ok=1
                check $ok "$what: SMC-D used (smcd: conns_client +$c, conns_server +$s, want >= $min; fallback_total +$f, all but $((f - h)) hinted to TCP (SMCD_DECL_SHORTCONN) by $n hint(s))"
                return
        fi
        [ "$c" -ge "$min" ] && [ "$s" -ge "$min" ] && [ "$f" = 0 ]
        check $? "$what: SMC-D used (smcd: conns_client +$c, conns_server +$s, want >= $min; fallback_total +$f)"
}
# idle WHAT: smcd's conns_current back to 0 within 5 s
idle() {
        apps_wait_idle 5
        check $? "$1: smcd conns_current back to 0 (now ${APPS_CONNS_CURRENT:-?}, close_unknown $(apps_stat close_unknown))"
}
T() { timeout -k 5 "$@"; }

# --- qperf --------------------------------------------------------------------------------
# qperf's server forks after accepting the control connection; the child listens on an
# ephemeral port for the data connection (pselect on the control fd, blocking data).
test_qperf() {
        have qperf || return
        local port pid rc out
        port=$(apps_free_port)
        apps_mark
        apps_bg qperf-server "${SMCRUN[@]}" qperf -lp "$port"
        pid=$APPS_BG_PID
        if ! apps_wait_port "$port" 10 "$pid"; then
                nok "qperf server did not listen on port $port"
                log qperf-server.log
                apps_stop "$pid"
                return
        fi
        T 30 "${SMCRUN[@]}" qperf -lp "$port" -t 2 127.0.0.1 tcp_lat tcp_bw >"$APPS_DIR/qperf.log" 2>&1
        rc=$?
        out=$(tr -s ' \n' ' ' <"$APPS_DIR/qperf.log")
        if [ $rc = 0 ] && grep -q 'latency *= *[0-9.]' "$APPS_DIR/qperf.log" &&
                grep -q 'bw *= *[0-9.]' "$APPS_DIR/qperf.log"; then
                ok "qperf tcp_lat tcp_bw: $out"
        else
                nok "qperf tcp_lat tcp_bw: exit $rc: $out"
                log qperf-server.log 5
        fi
        # each test: a control connection and a data connection
        smc_used "qperf" 2
        # a forked child left behind by a failed test, then the server
        pkill -TERM -P "$pid" 2>/dev/null
        apps_stop "$pid"
        idle "qperf"
}

# --- iperf3 -------------------------------------------------------------------------------
test_iperf3() {
        have iperf3 || return
        local streams port pid rc src
        for streams in 1 4; do
                port=$(apps_free_port)
                apps_mark
                apps_bg "iperf3-P$streams-server" "${SMCRUN[@]}" iperf3 -s -1 -J -p "$port" \
                        -B 127.0.0.1
                pid=$APPS_BG_PID
                if ! apps_wait_port "$port" 10 "$pid"; then
                        nok "iperf3 -P$streams: the server did not listen on port $port"
                        log "iperf3-P$streams-server.log"
                        apps_stop "$pid"
                        continue
                fi
                T 30 "${SMCRUN[@]}" iperf3 -c 127.0.0.1 -p "$port" -t 2 -P "$streams" -J \
                        >"$APPS_DIR/iperf3-P$streams.log" 2>&1
                rc=$?
                # the server exits by itself after one test (-1)
                apps_stop "$pid" 0 10
                src=$?
                # the JSON of both ends: no error, bytes both ways of the data streams
                python3 - "$APPS_DIR/iperf3-P$streams.log" "$APPS_DIR/iperf3-P$streams-server.log" \
                        "$rc" "$src" "$streams" <<'PY'
import json, sys
cli, srv, rc, src, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
def load(p):
    try:
        return json.load(open(p))
    except Exception as e:
        return {"error": "no JSON (%s)" % e}
c, s = load(cli), load(srv)
def end(j, k):
    return j.get("end", {}).get(k, {}).get("bytes", 0)
streams = len(c.get("end", {}).get("streams", []))
good = rc == 0 and src == 0 and "error" not in c and "error" not in s and streams == n and \
    end(c, "sum_sent") > 0 and end(c, "sum_received") > 0 and end(s, "sum_received") > 0
gbit = c.get("end", {}).get("sum_received", {}).get("bits_per_second", 0) / 1e9
print("%s - iperf3 -P%d -t 2: client exit %d, server exit %d, errors %s / %s, %d streams, "
      "sent %d B, received %d B (client) %d B (server), %.2f Gbit/s" % (
          "ok" if good else "not ok", n, rc, src, c.get("error"), s.get("error"), streams,
          end(c, "sum_sent"), end(c, "sum_received"), end(s, "sum_received"), gbit))
sys.exit(0 if good else 1)
PY
                if [ $? = 0 ]; then
                        n_ok=$((n_ok + 1))
                else
                        n_fail=$((n_fail + 1))
                        failed=1
                        log "iperf3-P$streams.log" 5
                        log "iperf3-P$streams-server.log" 5
                fi
                # the control connection and the data streams
                smc_used "iperf3 -P$streams" $((streams + 1))
                idle "iperf3 -P$streams"
        done
}

# --- redis --------------------------------------------------------------------------------
test_redis() {
        have redis-server redis-cli redis-benchmark || return
        local port pid rc p out bad len
        port=$(apps_free_port)
        mkdir -p "$APPS_DIR/redis"
        apps_mark
        if ! apps_redis_start redis-server "$port" "$APPS_DIR/redis" "${SMCRUN[@]}"; then
                nok "redis-server did not listen on port $port"
                log redis-server.log
                apps_stop "$APPS_BG_PID"
                return
        fi
        pid=$APPS_BG_PID
        rcli() { T 10 "${SMCRUN[@]}" redis-cli -p "$port" "$@"; }
        out=$(rcli PING 2>&1)
        [ "$out" = PONG ]
        check $? "redis-cli PING: $out"

        for p in 1 16; do
                T 60 "${SMCRUN[@]}" redis-benchmark -p "$port" -t set,get,lpush -n 20000 -P "$p" --csv \
                        >"$APPS_DIR/redis-bench-P$p.log" 2>&1
                rc=$?
                # --csv: "SET","74349.45",...; errors would be "Error from server: ..."
                out=$(awk -F '"' '$2 ~ /^(SET|GET|LPUSH)$/ && $4 > 0 { printf "%s %.0f/s ", $2, $4; n++ }
                        END { exit n != 3 }' "$APPS_DIR/redis-bench-P$p.log")
                bad=$?
                if [ $rc = 0 ] && [ $bad = 0 ] && ! grep -qi 'error' "$APPS_DIR/redis-bench-P$p.log"; then
                        ok "redis-benchmark -t set,get,lpush -n 20000 -P $p: $out"
                else
                        nok "redis-benchmark -P $p: exit $rc, results: ${out:-none}"
                        log "redis-bench-P$p.log" 5
                fi
        done
        # every LPUSH arrived: 20000 per run
        len=$(rcli LLEN mylist 2>&1)
        [ "$len" = 40000 ]
        check $? "redis LLEN mylist after two benchmark runs: $len (want 40000)"

        # a 300 KiB binary value (larger than the 128 KiB ring) in and out, three times
        head -c 307200 /dev/urandom >"$APPS_DIR/redis-value"
        local want got i good=0
        want=$(sha256sum <"$APPS_DIR/redis-value" | cut -d ' ' -f 1)
        for i in 1 2 3; do
                rcli -x SET "big$i" <"$APPS_DIR/redis-value" >/dev/null 2>&1
                # --raw prints the value and a newline
                got=$(rcli --raw GET "big$i" 2>/dev/null | head -c -1 | sha256sum | cut -d ' ' -f 1)
                [ "$got" = "$want" ] && good=$((good + 1))
        done
        [ $good = 3 ]
        check $? "redis SET/GET of a 300 KiB value: $good/3 sha256 match"

        # pipelined large values: 16 SETs of 300 000 bytes per batch (4.8 MB) through
        # a 128 KiB ring, each nonblocking write partial (hiredis moves the rest of its
        # buffer after each one): every request answered, the value whole
        T 60 "${SMCRUN[@]}" redis-benchmark -p "$port" -t set -n 96 -d 300000 -P 16 -c 2 --csv \
                >"$APPS_DIR/redis-bench-big.log" 2>&1
        rc=$?
        # redis-benchmark's value: its genBenchmarkRandomData(), an LCG seeded with 1234
        want=$(python3 -c 'import hashlib,sys
s, b = 1234, bytearray()
for _ in range(300000):
    s = (s * 1103515245 + 12345) & 0xffffffff
    b.append(48 + ((s >> 16) & 63))
print(hashlib.sha256(b).hexdigest())')
        got=$(rcli --raw GET key:__rand_int__ 2>/dev/null | head -c -1 | sha256sum | cut -d ' ' -f 1)
        [ $rc = 0 ] && [ "$got" = "$want" ] && ! grep -qi 'error' "$APPS_DIR/redis-bench-big.log" &&
                grep -q '^"SET"' "$APPS_DIR/redis-bench-big.log"
        check $? "redis-benchmark SET -d 300000 -P 16: exit $rc, the value ${got:0:12}... (want ${want:0:12}...)"
        want=$(sha256sum <"$APPS_DIR/redis-value" | cut -d ' ' -f 1)

        # BGSAVE forks a child that inherits every SMC socket and exits without closing
        # them: the parent's connections must not notice
        rcli BGSAVE >/dev/null 2>&1
        for _ in $(seq 50); do
                rcli INFO persistence 2>/dev/null | grep -q '^rdb_bgsave_in_progress:0' && break
                sleep 0.1
        done
        out=$(rcli INFO persistence 2>/dev/null | tr -d '\r' | grep '^rdb_last_bgsave_status:')
        got=$(rcli --raw GET big1 2>/dev/null | head -c -1 | sha256sum | cut -d ' ' -f 1)
        [ "$out" = "rdb_last_bgsave_status:ok" ] && [ "$got" = "$want" ]
        check $? "redis BGSAVE (a forked child): ${out:-no status}, GET after it ${got:0:12}... (want ${want:0:12}...)"

        # redis-benchmark: 50 connections per test
        smc_used "redis" 100
        rcli SHUTDOWN NOSAVE >/dev/null 2>&1
        apps_stop "$pid" TERM 10
        rc=$?
        check $rc "redis-server exit status $rc after SHUTDOWN"
        idle "redis"
}

# --- nginx --------------------------------------------------------------------------------
# nginx_conf DIR PORT SENDFILE [EVENTS]: apps_nginx_conf with 1024 connections a worker
# and error_log at info
nginx_conf() {
        apps_nginx_conf "$1" "$2" "$3" 1024 info "${4:-}"
}

# nginx_start DIR PORT: apps_nginx_start under smcrun (DIR/nginx.conf, log nginx.log);
# 0 when both workers are up and serve. APPS_NGINX_PID: the master.
nginx_start() {
        apps_nginx_start "$1" "$2" nginx "${SMCRUN[@]}"
}

nginx_alerts() {
        grep -E '\[(alert|emerg|crit)\]' "$1/error.log" | head -n "${2:-3}" | cut -d ' ' -f 4- | paste -sd '|'
}

# wrk's summary as JSON (done() of a wrk Lua script)
WRK_LUA='done = function(s, l, r)
  io.write(string.format("{\"requests\": %d, \"bytes\": %d, \"connect\": %d, \"read\": %d, " ..
    "\"write\": %d, \"status\": %d, \"timeout\": %d, \"duration_us\": %d}\n", s.requests, s.bytes,
    s.errors.connect, s.errors.read, s.errors.write, s.errors.status, s.errors.timeout, s.duration))
end'

# nginx_bodies DIR PORT LABEL: both files from a running nginx, clients under smcrun,
# every body checked: curl 3 times each (a connection each; curl deadlocks in a futex
# at start with a sanitizer runtime preloaded, with or without us), then ten
# responses on one keep-alive connection (python http.client)
nginx_bodies() {
        local d=$1 port=$2 label=$3 f i good want got size out
        for f in 4k 1m; do
                want=$(sha256sum <"$d/www/$f.bin" | cut -d ' ' -f 1)
                size=$(stat -c %s "$d/www/$f.bin")
                if [ -z "$APPS_SANITIZER" ]; then
                        good=0
                        for i in 1 2 3; do
                                got=$(T 10 "${SMCRUN[@]}" curl -sf "http://127.0.0.1:$port/$f.bin" |
                                        sha256sum | cut -d ' ' -f 1)
                                [ "$got" = "$want" ] && good=$((good + 1))
                        done
                        [ $good = 3 ]
                        check $? "$label: curl $f.bin 3 times, $good/3 sha256 match"
                fi
                out=$(T 30 "${SMCRUN[@]}" python3 "$here/apps/http-get.py" "$port" "/$f.bin" 10 2>&1)
                good=$(grep -c "^200 $size $want\$" <<<"$out")
                [ "$good" = 10 ]
                check $? "$label: $f.bin 10 times on one keep-alive connection (python http.client), $good/10 sha256 match${out:+$([ "$good" = 10 ] || echo ": $(tail -n 1 <<<"$out")")}"
        done
}

# nginx_clients DIR PORT MODE: curl, python and wrk against a running nginx
nginx_clients() {
        local d=$1 port=$2 mode=$3 f size conn name rc out hdr
        nginx_bodies "$d" "$port" "nginx sendfile $mode"
        # wrk, 4 connections: keep-alive and Connection: close, both files. Requests > 0, no
        # error of any kind, each response the file plus headers (< 1 KiB); wrk also
        # counts the bytes of the responses still in flight when it stops. wrk counts a
        # read() that fails with EAGAIN after EPOLLIN as an error: this catches a
        # doorbell byte left in X on an empty ring (ring.c tx_resolve, W3/W4).
        for f in 4k 1m; do
                size=$(stat -c %s "$d/www/$f.bin")
                nconn=4
                for conn in keep-alive close; do
                        name=wrk-$mode-$f-$conn
                        hdr=()
                        [ $conn = close ] && hdr=(-H 'Connection: close')
                        T 20 "${SMCRUN[@]}" wrk -t 1 -c $nconn -d 2 "${hdr[@]}" -s "$d/summary.lua" \
                                "http://127.0.0.1:$port/$f.bin" >"$APPS_DIR/$name.log" 2>&1
                        rc=$?
                        out=$(grep '^{' "$APPS_DIR/$name.log" | tail -n 1)
                        if [ $rc = 0 ] && [ -n "$out" ] && jq -e --argjson size "$size" '
                                .requests > 0 and .connect == 0 and .read == 0 and .write == 0
                                and .status == 0 and .timeout == 0
                                and .bytes >= .requests * $size
                                and .bytes <= (.requests + 4) * ($size + 1024)' <<<"$out" >/dev/null; then
                                ok "nginx sendfile $mode: wrk $f.bin $conn: $(jq -r '"\(.requests) requests, \(.requests * 1000000 / .duration_us | floor)/s, errors 0, non-2xx 0, \(.bytes) bytes"' <<<"$out")"
                        else
                                nok "nginx sendfile $mode: wrk $f.bin $conn: exit $rc, ${out:-no summary}"
                                log "$name.log" 5
                        fi
                done
        done
}

test_nginx() {
        have nginx wrk curl || return
        local d=$APPS_DIR/nginx mode port events="" rc out sf
        apps_nginx_www "$d"
        echo "$WRK_LUA" >"$d/summary.lua"

        for mode in on off; do
                port=$(apps_free_port)
                apps_mark
                nginx_conf "$d" "$port" "$mode" "$events" >"$d/nginx.conf"
                if [ $mode = on ]; then
                        # nginx's defaults: accept_mutex off, so the 2 workers add the
                        # shared listener to their epoll sets with EPOLLEXCLUSIVE
                        if nginx_start "$d" "$port"; then
                                ok "nginx (2 workers, accept_mutex off: EPOLLEXCLUSIVE) serves under smcrun"
                        else
                                nok "nginx (2 workers, accept_mutex off: EPOLLEXCLUSIVE) serves under smcrun:" \
                                        "$(nginx_alerts "$d" 1)"
                                log nginx.log 5
                                apps_stop "$APPS_NGINX_PID" QUIT 5
                                # the rest with the accept mutex (no EPOLLEXCLUSIVE)
                                echo "# nginx: the rest with 'accept_mutex on'"
                                events="accept_mutex on;"
                                nginx_conf "$d" "$port" "$mode" "$events" >"$d/nginx.conf"
                        fi
                fi
                if ! kill -0 "$APPS_NGINX_PID" 2>/dev/null && ! nginx_start "$d" "$port"; then
                        nok "nginx sendfile $mode ($events) serves under smcrun: $(nginx_alerts "$d" 1)"
                        log nginx.log 5
                        apps_stop "$APPS_NGINX_PID" QUIT 5
                        continue
                fi
                [ "$(id -u)" = 0 ] && [ $mode = on ] &&
                        echo "# nginx workers run as: $(ps -o user= --ppid "$APPS_NGINX_PID" | sort -u | paste -sd ,)"
                nginx_clients "$d" "$port" "$mode"
                # the clients are gone: nginx closed its side of every connection (a
                # worker, running as nobody, closes what the root master's listener got)
                idle "nginx sendfile $mode (running, after its clients)"
                apps_stop "$APPS_NGINX_PID" QUIT 10
                rc=$?
                check $rc "nginx sendfile $mode: exit status $rc after SIGQUIT (graceful)"
                out=$(nginx_alerts "$d")
                [ -z "$out" ]
                check $? "nginx sendfile $mode: error.log has no alert/crit/emerg${out:+: $out}"
                idle "nginx sendfile $mode (stopped)"
                # 6 curl and 4 wrk runs (4 connections each, and many with Connection: close)
                smc_used "nginx sendfile $mode" 22 hinted
                sf=$(apps_delta sendfile_calls)
                if [ $mode = on ]; then
                        [ "$sf" -gt 0 ]
                        check $? "nginx sendfile on: smcd sendfile_calls +$sf (want > 0), sendfile_bytes +$(apps_delta sendfile_bytes), cork_flushes +$(apps_delta cork_flushes)"
                else
                        [ "$sf" = 0 ]
                        check $? "nginx sendfile off: smcd sendfile_calls +$sf (want 0), cork_flushes +$(apps_delta cork_flushes)"
                fi
        done
}

# nginx with its default `daemon on;`: the process that listens forks and exits, the
# daemon's workers accept on the inherited listener, which smcd keeps (smcd(8))
test_nginx_daemon() {
        have nginx curl sha256sum || return
        local d=$APPS_DIR/nginx-daemon port pid="" rc
        apps_nginx_www "$d"
        port=$(apps_free_port)
        apps_mark
        nginx_conf "$d" "$port" on | sed 's/^daemon off;/daemon on;/' >"$d/nginx.conf"
        : >"$d/error.log"
        T 20 "${SMCRUN[@]}" nginx -p "$d" -c "$d/nginx.conf" -e "$d/error.log" >"$APPS_DIR/nginx-daemon.log" 2>&1
        rc=$?
        for _ in $(seq 50); do pid=$(cat "$d/nginx.pid" 2>/dev/null) && [ -n "$pid" ] && break; sleep 0.1; done
        if [ $rc != 0 ] || [ -z "$pid" ] || ! apps_wait_port "$port" 10 "$pid"; then
                nok "nginx daemon on: did not start under smcrun (exit $rc): $(nginx_alerts "$d" 1)"
                log nginx-daemon.log 5
                [ -n "$pid" ] && apps_stop "$pid" QUIT 5
                return
        fi
        # every connection from a client under smcrun
        nginx_bodies "$d" "$port" "nginx daemon on (its listening process exited)"
        smc_used "nginx daemon on" 2
        # smcd restarts (a package upgrade's): the listener's holders are the master
        # and two workers (the process that listened is gone), and they keep its
        # accept channel open at both ends, so the worker that accepts the first
        # connection after the restart (TCP) gives the channel to the new smcd, and
        # the later connections are SMC-D again, in whichever worker takes them
        local want size out good=0 s
        want=$(sha256sum <"$d/www/4k.bin" | cut -d ' ' -f 1)
        size=$(stat -c %s "$d/www/4k.bin")
        apps_smcd_stop
        rc=$?
        if ! apps_smcd_start; then
                nok "nginx daemon on: smcd did not start again"
                apps_stop "$pid" QUIT 5
                return
        fi
        apps_mark
        for _ in 1 2 3 4 5; do
                out=$(T 30 "${SMCRUN[@]}" python3 "$here/apps/http-get.py" "$port" /4k.bin 2 2>&1)
                [ "$(grep -c "^200 $size $want\$" <<<"$out")" = 2 ] && good=$((good + 1))
                sleep 1.1 # (a listener looks at smcd's instance at most once a second)
        done
        apps_stats
        s=$(apps_delta conns_server)
        [ "$good" = 5 ] && [ "$s" -ge 3 ]
        check $? "nginx daemon on: after an smcd restart (its exit status $rc) the workers register the listener again: 5 connections, $good with both bodies right, $s of them over SMC-D (want >= 3)"
        kill -QUIT "$pid" 2>/dev/null
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        ! kill -0 "$pid" 2>/dev/null
        check $? "nginx daemon on: gone after SIGQUIT"
        kill -KILL "$pid" 2>/dev/null
        idle "nginx daemon on (stopped)"
        apps_stats
        [ "$(apps_stat listeners)" = 0 ]
        check $? "nginx daemon on: smcd's listener gone with nginx (listeners $(apps_stat listeners))"
}

# nginx_wait_workers MASTER OLD: MASTER has 2 workers and none of them is in OLD (a
# list of pids): 0 within 10 s
nginx_wait_workers() {
        local m=$1 old=" $2 " w n stale
        for _ in $(seq 100); do
                n=0 stale=0
                for w in $(pgrep -P "$m"); do
                        n=$((n + 1))
                        case "$old" in *" $w "*) stale=1 ;; esac
                done
                [ "$n" = 2 ] && [ $stale = 0 ] && return 0
                sleep 0.1
        done
        return 1
}

# nginx's live operations under load, under smcrun: a reload (SIGHUP: new workers, the
# old ones finish gracefully) and a binary upgrade (SIGUSR2: the master execs a new
# master that inherits the SMC listener, SIGWINCH and SIGQUIT end the old one), with
# `env LD_PRELOAD; ...` in nginx.conf so that the new binary runs under smcrun too
# (nginx clears its environment at exec: smcrun(1)). wrk (keep-alive, under smcrun)
# runs throughout; as over TCP, the only errors are reads of keep-alive connections a
# worker closed on its graceful exit (at most one per connection per exit). The new
# master's workers have the library and their connections are SMC-D.
test_nginx_upgrade() {
        have nginx wrk sha256sum || return
        local d=$APPS_DIR/nginx-upgrade port old new w ws rc out nconn=8 lib ngx
        ngx=$(command -v nginx) # nginx execs its argv[0]: a path
        apps_nginx_www "$d"
        echo "$WRK_LUA" >"$d/summary.lua"
        port=$(apps_free_port)
        {
                echo "env LD_PRELOAD; env SMCD_RUNTIME_DIR; env SMCRUN_LIB; env ASAN_OPTIONS;"
                nginx_conf "$d" "$port" on | sed 's/^daemon off;/daemon on;/'
        } >"$d/nginx.conf"
        : >"$d/error.log"
        T 20 "${SMCRUN[@]}" "$ngx" -p "$d" -c "$d/nginx.conf" -e "$d/error.log" >"$APPS_DIR/nginx-upgrade.log" 2>&1
        rc=$?
        old=""
        for _ in $(seq 50); do old=$(cat "$d/nginx.pid" 2>/dev/null) && [ -n "$old" ] && break; sleep 0.1; done
        if [ $rc != 0 ] || [ -z "$old" ] || ! apps_wait_port "$port" 10 "$old" || ! nginx_wait_workers "$old" ""; then
                nok "nginx upgrade: did not start under smcrun (exit $rc): $(nginx_alerts "$d" 1)"
                [ -n "$old" ] && apps_stop "$old" QUIT 5
                return
        fi
        APPS_PIDS+=("$old") # stopped at exit if a check below fails
        T 30 "${SMCRUN[@]}" wrk -t 1 -c $nconn -d 8 -s "$d/summary.lua" "http://127.0.0.1:$port/4k.bin" \
                >"$APPS_DIR/wrk-upgrade.log" 2>&1 &
        w=$!
        sleep 1
        ws=$(pgrep -P "$old" | paste -sd ' ')
        kill -HUP "$old"
        nginx_wait_workers "$old" "$ws"
        check $? "nginx reload (SIGHUP) under wrk: 2 new workers (were $ws, now $(pgrep -P "$old" | paste -sd ' '))"
        sleep 1
        kill -USR2 "$old"
        new=""
        for _ in $(seq 100); do
                new=$(cat "$d/nginx.pid" 2>/dev/null)
                [ -n "$new" ] && [ "$new" != "$old" ] && [ -s "$d/nginx.pid.oldbin" ] && nginx_wait_workers "$new" "" && break
                new=""
                sleep 0.1
        done
        if [ -z "$new" ]; then
                nok "nginx binary upgrade (SIGUSR2) under wrk: no new master with 2 workers: $(nginx_alerts "$d" 1)"
                wait $w
                apps_stop "$old" QUIT 5
                return
        fi
        APPS_PIDS+=("$new")
        lib=0
        for ws in $(pgrep -P "$new"); do grep -q libsmcrun "/proc/$ws/maps" 2>/dev/null && lib=$((lib + 1)); done
        [ $lib = 2 ]
        check $? "nginx binary upgrade (SIGUSR2) under wrk: new master $new, its workers under smcrun ($lib of 2 with libsmcrun)"
        sleep 1
        kill -WINCH "$old" # the old workers finish and exit
        for _ in $(seq 100); do [ -z "$(pgrep -P "$old")" ] && break; sleep 0.1; done
        kill -QUIT "$old"
        for _ in $(seq 100); do kill -0 "$old" 2>/dev/null || break; sleep 0.1; done
        ! kill -0 "$old" 2>/dev/null
        check $? "nginx binary upgrade: the old master gone after SIGWINCH, SIGQUIT"
        wait $w
        rc=$?
        out=$(grep '^{' "$APPS_DIR/wrk-upgrade.log" | tail -n 1)
        [ $rc = 0 ] && [ -n "$out" ] && jq -e --argjson c $nconn '.requests > 0 and .connect == 0 and .write == 0
                and .status == 0 and .timeout == 0 and .read <= 2 * $c and .bytes >= .requests * 4096' <<<"$out" >/dev/null
        check $? "nginx reload and upgrade: wrk throughout, exit $rc: ${out:-no summary} (read errors: at most one per connection and graceful exit, as over TCP)"
        apps_mark
        nginx_bodies "$d" "$port" "nginx after the upgrade"
        smc_used "nginx after the upgrade" 2
        apps_stop "$new" QUIT 10
        ! kill -0 "$new" 2>/dev/null
        check $? "nginx after the upgrade: gone after SIGQUIT"
        out=$(nginx_alerts "$d")
        [ -z "$out" ]
        check $? "nginx reload and upgrade: error.log has no alert/crit/emerg${out:+: $out}"
        idle "nginx reload and upgrade (stopped)"
        apps_stats
        [ "$(apps_stat listeners)" = 0 ]
        check $? "nginx reload and upgrade: smcd's listener gone with nginx (listeners $(apps_stat listeners))"
}

# --- PostgreSQL ---------------------------------------------------------------------------
# A process-per-connection database: the postmaster forks a backend for each accepted
# connection (the child closes its copy of the listener, the parent its copy of the
# connection). postgres, pgbench and psql under smcrun (a cluster of its own in the
# temporary directory, fsync off; as the postgres user when we are root): pgbench's
# initialisation, select-only and TPC-B-like runs with 4 clients (no failed
# transaction), TPC-B's invariant read back (the balances of accounts, tellers and
# branches each sum to the history's deltas), then a connection per transaction
# (pgbench -C: smcd's hints may send those to TCP) and a fast shutdown.
# pgbench_ok LOG: pgbench's transaction counts and rate from LOG on one line in $out;
# 0 when no transaction failed
pgbench_ok() {
        out=$(grep -E '^(number of transactions actually processed|number of failed transactions|tps)' "$1" |
                sed 's/ (without.*//; s/ (including.*//' | paste -sd ',')
        grep -q '^number of failed transactions: 0 ' "$1"
}

test_postgres() {
        local d=$APPS_DIR/pg port pid rc out mode sums n a h c f k s
        if ! apps_pg_bindir >/dev/null || ! command -v psql >/dev/null; then
                skip "postgresql (server and psql) not installed"
                return
        fi
        have pgbench || return
        if [ -n "$APPS_SANITIZER" ]; then
                # postgres never starts with a sanitizer runtime preloaded, with or
                # without smcrun (it hangs silently before it listens)
                echo "# postgresql: not run with a sanitizer runtime preloaded (postgres hangs at start)"
                return
        fi
        if ! apps_pg_init "$d"; then
                nok "postgresql: initdb failed: $(tail -n 1 "$d/initdb.log")"
                return
        fi
        port=$(apps_free_port)
        if ! apps_pg_start postgres "$d" "$port" "${SMCRUN[@]}"; then
                nok "postgresql did not listen on port $port under smcrun"
                log postgres.log 5
                apps_stop "$APPS_BG_PID" INT 10
                return
        fi
        pid=$APPS_BG_PID
        ok "postgresql $(basename "$(dirname "$(apps_pg_bindir)")") serves under smcrun (a process per connection)"
        apps_mark
        T 60 "${SMCRUN[@]}" pgbench -h 127.0.0.1 -p "$port" -U postgres -i -s 2 -q postgres \
                >"$APPS_DIR/pgbench-init.log" 2>&1
        rc=$?
        check $rc "postgresql: pgbench -i -s 2 (200000 accounts) under smcrun: exit $rc"
        [ $rc = 0 ] || log pgbench-init.log 5
        for mode in -S -N; do
                # -S select-only; -N TPC-B-like without the teller and branch updates
                # (no contention among 4 clients; the history rows still carry deltas)
                T 60 "${SMCRUN[@]}" pgbench -h 127.0.0.1 -p "$port" -U postgres -c 4 -j 2 -T 3 $mode postgres \
                        >"$APPS_DIR/pgbench$mode.log" 2>&1
                rc=$?
                pgbench_ok "$APPS_DIR/pgbench$mode.log" && [ $rc = 0 ] && grep -q '^tps = [1-9]' "$APPS_DIR/pgbench$mode.log"
                check $? "postgresql: pgbench -c 4 -j 2 -T 3 $mode: exit $rc, $out"
                [ $rc = 0 ] || log "pgbench$mode.log" 5
        done
        sums=$(T 30 "${SMCRUN[@]}" psql -h 127.0.0.1 -p "$port" -U postgres -d postgres -tAc \
                "select (select count(*) from pgbench_accounts), (select sum(abalance) from pgbench_accounts),
                        (select count(*) from pgbench_history), (select sum(delta) from pgbench_history)" 2>&1)
        IFS='|' read -r n a c h <<<"$sums"
        [ "$n" = 200000 ] && [ "${c:-0}" -gt 0 ] 2>/dev/null && [ -n "$a" ] && [ "$a" = "$h" ]
        check $? "postgresql: read back through psql: 200000 accounts, $c transactions in the history, the accounts' balances sum to its deltas ($sums)"
        smc_used "postgresql" 10
        apps_mark
        T 60 "${SMCRUN[@]}" pgbench -h 127.0.0.1 -p "$port" -U postgres -C -c 2 -j 2 -T 2 -S postgres \
                >"$APPS_DIR/pgbench-C.log" 2>&1
        rc=$?
        pgbench_ok "$APPS_DIR/pgbench-C.log" && [ $rc = 0 ]
        check $? "postgresql: pgbench -C -S (a connection and a backend per transaction): exit $rc, $out"
        apps_stats
        f=$(apps_delta fallback_total)
        k=$(apps_delta fallback.SMCD_DECL_SHORTCONN)
        [ $((f - k)) = 0 ] && [ "$(apps_delta conns_client)" -ge 1 ]
        check $? "postgresql: pgbench -C: SMC-D, or TCP for smcd's hints only (smcd: conns_client +$(apps_delta conns_client), fallback_total +$f, of them SMCD_DECL_SHORTCONN $k)"
        # smcd restarts (a package upgrade's): the postmaster forked a backend per
        # connection, each of which closed its copy of the listener at once, so the
        # postmaster holds it alone again and registers it with the new smcd by itself
        # (the accept after the first TCP one): the later connections are SMC-D
        apps_smcd_stop
        rc=$?
        if ! apps_smcd_start; then
                nok "postgresql: smcd did not start again"
                return
        fi
        apps_mark
        for k in 1 2 3 4 5; do
                out=$(T 30 "${SMCRUN[@]}" psql -h 127.0.0.1 -p "$port" -U postgres -d postgres -tAc "select $k" 2>&1)
                [ "$out" = "$k" ] || break
                sleep 1.1 # (a listener registers again at most once a second)
        done
        apps_stats
        s=$(apps_delta conns_server)
        [ "$out" = 5 ] && [ "$s" -ge 2 ]
        check $? "postgresql: after an smcd restart (its exit status $rc) the postmaster registers its listener again: 5 queries answered (last: $out), $s of them over SMC-D (want >= 2)"
        apps_stop "$pid" INT 20 # fast shutdown
        rc=$?
        check $rc "postgresql: exit status $rc after SIGINT (fast shutdown)"
        idle "postgresql (stopped)"
        apps_stats
        [ "$(apps_stat listeners)" = 0 ]
        check $? "postgresql: smcd's listener gone with the postmaster (listeners $(apps_stat listeners))"
}

# --- python echo servers ------------------------------------------------------------------
test_python() {
        local kind pid port out rc
        for kind in socket asyncio; do
                apps_mark
                apps_echo_start "echo-$kind-server" "$kind" "$APPS_DIR/echo-$kind.port" "${SMCRUN[@]}"
                pid=$APPS_BG_PID
                port=$APPS_ECHO_PORT
                if [ -z "$port" ]; then
                        nok "python $kind echo server did not start"
                        log "echo-$kind-server.log"
                        apps_stop "$pid"
                        continue
                fi
                out=$(T 60 "${SMCRUN[@]}" python3 "$here/apps/echo.py" client --port "$port" --conns 4 \
                        --rounds 100 2>&1)
                rc=$?
                check $rc "python $kind echo server, 4 connections x 100 messages of 1 B..256 KiB: exit $rc, $out"
                smc_used "python $kind echo" 4
                apps_stop "$pid" TERM 5
                rc=$?
                check $rc "python $kind echo server exit status $rc after SIGTERM"
                [ $rc = 0 ] || log "echo-$kind-server.log"
                idle "python $kind echo"
        done
}

# --- socat ----------------------------------------------------------------------------------
# socat waits for POLLOUT, then writes 8 KiB blocking, on both connections at once: it
# needs TCP's POLLOUT (room for such a write), else both sides block writing and
# neither reads again. The server runs the filter on the connection (EXEC, nofork:
# inetd's pattern, C stdio). The client waits up to 30 s (-t) for the filter's output
# after its input ended (socat's default 0.5 s cut the output short in a slow ASan run).
test_socat() {
        local filter port pid want got in=$APPS_DIR/socat.in
        have socat base64 || return 0
        head -c 3000000 /dev/urandom >"$in"
        for filter in base64 cat; do
                apps_mark
                port=$(apps_free_port)
                apps_bg "socat-$filter" "${SMCRUN[@]}" socat "TCP-LISTEN:$port,bind=127.0.0.1,reuseaddr"                         "EXEC:$(command -v $filter),nofork"
                pid=$APPS_BG_PID
                if ! apps_wait_port "$port" 10 "$pid"; then
                        nok "socat $filter server did not start"
                        log "socat-$filter.log"
                        apps_stop "$pid"
                        continue
                fi
                want=$($filter <"$in" | sha256sum | cut -d ' ' -f 1)
                got=$(T 60 "${SMCRUN[@]}" socat -t 30 - "TCP:127.0.0.1:$port" <"$in" | sha256sum | cut -d ' ' -f 1)
                [ "$got" = "$want" ]
                check $? "socat relay with $filter on the connection, 3 MB both ways at once: every byte ($got)"
                smc_used "socat $filter" 1
                apps_stop "$pid" TERM 5 >/dev/null
                idle "socat $filter"
        done
}

# The same relay while two busy loops compete for the two CPUs: a reader preempted in
# the middle of draining a writer's plug used to eat the writer's next plug too, so the
# writer's socket stayed writable over a full ring and socat deadlocked with base64
# (ring.c, D0..D3 and Q3). Five relays, each must finish with every byte.
test_socat_contended() {
        local port pid want got i bad=0 hogs=() in=$APPS_DIR/socat.in
        have socat base64 || return 0
        want=$(base64 <"$in" | sha256sum | cut -d ' ' -f 1)
        yes >/dev/null & hogs+=($!)
        yes >/dev/null & hogs+=($!)
        for i in 1 2 3 4 5; do
                port=$(apps_free_port)
                apps_bg "socat-hog-$i" "${SMCRUN[@]}" socat "TCP-LISTEN:$port,bind=127.0.0.1,reuseaddr" \
                        "EXEC:$(command -v base64),nofork"
                pid=$APPS_BG_PID
                if ! apps_wait_port "$port" 10 "$pid"; then
                        bad=$((bad + 1))
                        apps_stop "$pid"
                        continue
                fi
                got=$(T 60 "${SMCRUN[@]}" socat -t 30 - "TCP:127.0.0.1:$port" <"$in" | sha256sum | cut -d ' ' -f 1)
                [ "$got" = "$want" ] || bad=$((bad + 1))
                apps_stop "$pid" TERM 5 >/dev/null
        done
        kill "${hogs[@]}" 2>/dev/null
        wait "${hogs[@]}" 2>/dev/null
        [ $bad = 0 ]
        check $? "socat relay with base64 under CPU contention: 5 of 5 complete and right ($bad failed)"
}

test_qperf
test_iperf3
test_redis
test_nginx
test_nginx_daemon
test_nginx_upgrade
test_postgres
test_python
test_socat
test_socat_contended

apps_stats
echo "# smcd: $(jq -c '.smcd | {conns_client, conns_server, conns_current, conns_aborted, fallback_total,
        close_unknown, sendfile_calls, sendfile_bytes, cork_flushes}' "$APPS_DIR/stats.json")"
apps_smcd_stop
rc=$?
check $rc "smcd exit status $rc after SIGTERM"
[ $rc = 0 ] || log smcd.log

echo "1..$((n_ok + n_fail + n_skip))"
echo "# $n_ok passed, $n_fail failed, $n_skip skipped"
# a program missing: SKIP (77) unless something failed, so that a partial run does not
# pass as a whole one
if [ $failed = 0 ] && [ $n_skip -gt 0 ]; then
        exit 77
fi
exit $failed
