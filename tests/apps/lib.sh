# SPDX-License-Identifier: LGPL-2.1-or-later
# shellcheck shell=bash disable=SC2034
# (SC2034: APPS_SANITIZER, SMCRUN ... are set here for the sourcing script)
#
# Shell helpers for running real programs under smcrun against a private smcd: used by
# tests/test-real-apps.sh and bench/apps.sh. Source it from bash, then:
#
#   apps_init SMCD LIBSMCRUN SMCRUN NAME   a private runtime directory $APPS_DIR
#                                          (/tmp/NAME.XXXXXX, mode 0755 so that setuid
#                                          workers such as nginx's reach smcd.sock),
#                                          exports SMCD_RUNTIME_DIR and SMCRUN_LIB, sets
#                                          SMCRUN=(...) the smcrun command (with the
#                                          sanitizer runtime preloaded for a sanitizer
#                                          build) and an EXIT trap that stops everything
#   apps_smcd_start [ARGS...]              start smcd (0, or 1 with its log on stderr)
#   apps_smcd_stop                         SIGTERM smcd, wait up to 5 s; its exit status
#   apps_bg NAME CMD...                    start CMD in the background, output in
#                                          $APPS_DIR/NAME.log; its PID in APPS_BG_PID
#   apps_stop PID [SIGNAL] [SECONDS]       signal (TERM; 0: none, only wait), wait (5 s),
#                                          then SIGKILL; returns the process's exit status
#                                          (137 if it had to be killed)
#   apps_stats                             fresh $APPS_DIR/stats.json (smcd SIGUSR1)
#   apps_stat KEY                          .smcd.KEY of the last apps_stats
#   apps_mark / apps_delta KEY             .smcd.KEY now (last apps_stats) minus at the mark
#   apps_wait_idle [SECONDS]               wait until smcd's conns_current is 0 (5 s);
#                                          status 1 if it is not (APPS_CONNS_CURRENT holds
#                                          the last value)
#   apps_free_port                         a TCP port free on 127.0.0.1 right now
#   apps_wait_port PORT [SECONDS] [PID]    wait until something listens on TCP PORT
#                                          (IPv4 or IPv6, 10 s), giving up if PID exits
#   apps_redis_start NAME PORT DIR [PREFIX...]
#                                          apps_bg NAME PREFIX... redis-server on
#                                          127.0.0.1:PORT (no persistence, files in DIR),
#                                          then wait for its port (10 s): 0, or 1 if it
#                                          does not listen; its PID in APPS_BG_PID
#   apps_echo_start NAME KIND PORTFILE [PREFIX...]
#                                          apps_bg NAME PREFIX... tests/apps/echo.py server
#                                          --kind KIND, wait (10 s) for its PORTFILE: the
#                                          port in APPS_ECHO_PORT (empty and status 1 if it
#                                          did not start); its PID in APPS_BG_PID
#   apps_nginx_www DIR                     DIR/tmp and DIR/www with 4k.bin and 1m.bin
#                                          (random bytes), readable by nginx's workers
#   apps_nginx_conf DIR PORT SENDFILE CONNS LOGLEVEL [EVENTS]
#                                          an nginx.conf on stdout: 2 workers and a master
#                                          process, worker_connections CONNS and EVENTS (more
#                                          'events' directives), sendfile SENDFILE (on|off),
#                                          tcp_nopush on, DIR/www served on 127.0.0.1:PORT,
#                                          error_log DIR/error.log at LOGLEVEL; no 'env'
#                                          lines (libsmcrun.so keeps SMCD_RUNTIME_DIR from
#                                          load time; nginx clears its workers'
#                                          environment). Everything nginx writes goes to
#                                          DIR; as root, the workers run as nobody
#   apps_pg_bindir                         the PostgreSQL server's bin directory (the
#                                          newest /usr/lib/postgresql/*/bin with postgres
#                                          and initdb, else pg_config --bindir) on stdout;
#                                          status 1 if there is none
#   apps_pg_init DIR                       a new cluster in DIR/data (trust, superuser
#                                          postgres, no sync), its sockets in DIR/sock;
#                                          as root DIR belongs to, and everything runs as,
#                                          the postgres user (APPS_PG_AS=(setpriv ...)),
#                                          with copies of libsmcrun.so and smcrun in
#                                          $APPS_DIR/pg-lib if it cannot read the build's;
#                                          0, or 1 (DIR/initdb.log says why)
#   apps_pg_start NAME DIR PORT [PREFIX...]
#                                          apps_bg NAME APPS_PG_AS... PREFIX... postgres on
#                                          127.0.0.1:PORT (fsync off, 20 connections), wait
#                                          for the port (20 s): 0, or 1; PID in APPS_BG_PID
#   apps_nginx_start DIR PORT NAME [PREFIX...]
#                                          apps_bg NAME PREFIX... nginx with DIR/nginx.conf
#                                          (DIR/error.log emptied first), wait for PORT (10
#                                          s): 0 when both workers are up and serve /4k.bin
#                                          (a plain TCP curl) within about 2 s more, else 1;
#                                          the master's PID in APPS_NGINX_PID
#
# Every process started with apps_bg (and smcd) is stopped by PID on exit.

APPS_PIDS=()
APPS_SMCD_PID=
APPS_DIR=
APPS_CONNS_CURRENT=
APPS_ECHO_PORT=
APPS_NGINX_PID=
APPS_LIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

apps_init() {
        local smcd=$1 lib=$2 smcrun=$3 name=$4 san
        APPS_SMCD=$(realpath "$smcd") || return 1
        SMCRUN_LIB=$(realpath "$lib") || return 1
        export SMCRUN_LIB
        APPS_SMCRUN_SCRIPT=$(realpath "$smcrun") || return 1
        APPS_DIR=$(mktemp -d "/tmp/$name.XXXXXX") || return 1
        chmod 0755 "$APPS_DIR"
        export SMCD_RUNTIME_DIR=$APPS_DIR
        # A sanitizer build of libsmcrun.so needs its runtime preloaded ahead of it (the
        # programs are not instrumented; smcrun keeps sanitizer runtimes at the head of
        # LD_PRELOAD). Leak checking is off: the programs' allocations are not ours.
        san=$(ldd "$SMCRUN_LIB" | awk '$1 ~ /^lib(a|ub|t|hwa)san\.so/ { print $3 }' | paste -sd:)
        APPS_SANITIZER=$san
        if [ -n "$san" ]; then
                SMCRUN=(env LD_PRELOAD="$san${LD_PRELOAD:+:$LD_PRELOAD}"
                        ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
                        sh "$APPS_SMCRUN_SCRIPT")
        else
                # the build-tree copy of smcrun is not executable: run it with sh
                SMCRUN=(sh "$APPS_SMCRUN_SCRIPT")
        fi
        trap apps_cleanup EXIT
        trap 'exit 1' INT TERM
}

apps_cleanup() {
        local rc=$? p
        for p in "${APPS_PIDS[@]}"; do
                kill -0 "$p" 2>/dev/null || continue
                kill -TERM "$p" 2>/dev/null
        done
        for p in "${APPS_PIDS[@]}"; do
                for _ in $(seq 30); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
                kill -KILL "$p" 2>/dev/null
                wait "$p" 2>/dev/null
        done
        if [ -n "$APPS_SMCD_PID" ]; then
                kill -TERM "$APPS_SMCD_PID" 2>/dev/null
                for _ in $(seq 50); do kill -0 "$APPS_SMCD_PID" 2>/dev/null || break; sleep 0.1; done
                kill -KILL "$APPS_SMCD_PID" 2>/dev/null
                wait "$APPS_SMCD_PID" 2>/dev/null
        fi
        [ -n "$APPS_DIR" ] && [ -z "${APPS_KEEP:-}" ] && rm -rf "$APPS_DIR"
        exit $rc
}

apps_smcd_start() {
        rm -f "$APPS_DIR/smcd.sock" "$APPS_DIR/stats.json"
        "$APPS_SMCD" --runtime-dir "$APPS_DIR" "$@" >>"$APPS_DIR/smcd.log" 2>&1 &
        APPS_SMCD_PID=$!
        for _ in $(seq 100); do
                [ -S "$APPS_DIR/smcd.sock" ] && return 0
                kill -0 "$APPS_SMCD_PID" 2>/dev/null || break
                sleep 0.1
        done
        echo "smcd did not start (no $APPS_DIR/smcd.sock); its log:" >&2
        cat "$APPS_DIR/smcd.log" >&2
        return 1
}

apps_smcd_stop() {
        local rc
        [ -n "$APPS_SMCD_PID" ] || return 0
        kill -TERM "$APPS_SMCD_PID" 2>/dev/null
        for _ in $(seq 50); do kill -0 "$APPS_SMCD_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$APPS_SMCD_PID" 2>/dev/null
        wait "$APPS_SMCD_PID"
        rc=$?
        APPS_SMCD_PID=
        return $rc
}

apps_bg() {
        local name=$1
        shift
        "$@" >"$APPS_DIR/$name.log" 2>&1 &
        APPS_BG_PID=$!
        APPS_PIDS+=("$APPS_BG_PID")
}

apps_stop() {
        local pid=$1 sig=${2:-TERM} secs=${3:-5} rc i
        kill -"$sig" "$pid" 2>/dev/null
        for ((i = 0; i < secs * 10; i++)); do
                kill -0 "$pid" 2>/dev/null || break
                sleep 0.1
        done
        kill -KILL "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
        rc=$?
        return $rc
}

apps_stats() {
        rm -f "$APPS_DIR/stats.json"
        kill -USR1 "$APPS_SMCD_PID" 2>/dev/null || return 1
        for _ in $(seq 50); do
                [ -s "$APPS_DIR/stats.json" ] && return 0
                sleep 0.05
        done
        echo "smcd wrote no stats.json on SIGUSR1" >&2
        return 1
}

apps_stat() {
        jq -r ".smcd.$1 // empty" "$APPS_DIR/stats.json" 2>/dev/null
}

apps_mark() {
        apps_stats && cp "$APPS_DIR/stats.json" "$APPS_DIR/stats.mark.json"
}

apps_delta() {
        local now before
        now=$(apps_stat "$1")
        before=$(jq -r ".smcd.$1 // empty" "$APPS_DIR/stats.mark.json" 2>/dev/null)
        echo $(( ${now:-0} - ${before:-0} ))
}

apps_wait_idle() {
        local secs=${1:-5} i
        for ((i = 0; i <= secs * 10; i++)); do
                apps_stats || return 1
                APPS_CONNS_CURRENT=$(apps_stat conns_current)
                [ "$APPS_CONNS_CURRENT" = 0 ] && return 0
                sleep 0.1
        done
        return 1
}

apps_free_port() {
        python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

apps_wait_port() {
        local port=$1 secs=${2:-10} pid=${3:-} hex i
        hex=$(printf ':%04X ' "$port")
        for ((i = 0; i < secs * 20; i++)); do
                # local address ":PORT", state 0A (LISTEN)
                if awk -v p="$hex" 'index($2 " ", p) && $4 == "0A" { f = 1 } END { exit !f }' \
                        /proc/net/tcp /proc/net/tcp6 2>/dev/null; then
                        return 0
                fi
                if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
                        return 1
                fi
                sleep 0.05
        done
        return 1
}

apps_redis_start() {
        local name=$1 port=$2 dir=$3
        shift 3
        apps_bg "$name" "$@" redis-server --port "$port" --bind 127.0.0.1 \
                --save "" --appendonly no --daemonize no --dir "$dir" --logfile ""
        apps_wait_port "$port" 10 "$APPS_BG_PID"
}

apps_echo_start() {
        local name=$1 kind=$2 pf=$3
        shift 3
        rm -f "$pf"
        apps_bg "$name" "$@" python3 "$APPS_LIB_DIR/echo.py" server --kind "$kind" --port-file "$pf"
        for _ in $(seq 100); do
                [ -s "$pf" ] && break
                kill -0 "$APPS_BG_PID" 2>/dev/null || break
                sleep 0.1
        done
        APPS_ECHO_PORT=$(cat "$pf" 2>/dev/null)
        [ -n "$APPS_ECHO_PORT" ]
}

apps_nginx_www() {
        local d=$1
        mkdir -p "$d/www" "$d/tmp"
        chmod 0755 "$d" "$d/www"
        head -c 4096 /dev/urandom >"$d/www/4k.bin"
        head -c 1048576 /dev/urandom >"$d/www/1m.bin"
        chmod 0644 "$d/www/"*
}

apps_nginx_conf() {
        cat <<CONF
daemon off;
master_process on;
worker_processes 2;
pid $1/nginx.pid;
error_log $1/error.log $5;
events { worker_connections $4; ${6:-} }
http {
    access_log off;
    sendfile $3;
    tcp_nopush on;
    keepalive_requests 1000000;
    client_body_temp_path $1/tmp/body;
    proxy_temp_path $1/tmp/proxy;
    fastcgi_temp_path $1/tmp/fastcgi;
    uwsgi_temp_path $1/tmp/uwsgi;
    scgi_temp_path $1/tmp/scgi;
    server { listen 127.0.0.1:$2; root $1/www; }
}
CONF
}

APPS_PG_AS=()
APPS_PG_LIBDIR=
apps_pg_bindir() {
        local d
        for d in $(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -name bin 2>/dev/null | sort -V -r); do
                [ -x "$d/postgres" ] && [ -x "$d/initdb" ] && { echo "$d"; return 0; }
        done
        command -v pg_config >/dev/null && d=$(pg_config --bindir 2>/dev/null) && [ -x "$d/postgres" ] &&
                [ -x "$d/initdb" ] && { echo "$d"; return 0; }
        return 1
}

apps_pg_init() {
        local d=$1 bin
        bin=$(apps_pg_bindir) || return 1
        APPS_PG_AS=()
        mkdir -p "$d/sock" || return 1
        if [ "$(id -u)" = 0 ]; then
                id postgres >/dev/null 2>&1 || { echo "no postgres user to run it as" >"$d/initdb.log"; return 1; }
                APPS_PG_AS=(setpriv --reuid=postgres --regid=postgres --init-groups)
                chown -R postgres: "$d" || return 1
                # the postgres user loads libsmcrun.so and reads the smcrun script itself
                # (nginx's workers inherit them from their root master): copies where it
                # can read them, if the build tree is closed to it (a checkout in /root)
                if ! "${APPS_PG_AS[@]}" sh -c 'test -r "$1" && test -r "$2"' sh "$SMCRUN_LIB" "$APPS_SMCRUN_SCRIPT"; then
                        APPS_PG_LIBDIR=$APPS_DIR/pg-lib
                        mkdir -p "$APPS_PG_LIBDIR" && chmod 0755 "$APPS_PG_LIBDIR" &&
                                install -m 0644 "$SMCRUN_LIB" "$APPS_PG_LIBDIR/libsmcrun.so" &&
                                install -m 0644 "$APPS_SMCRUN_SCRIPT" "$APPS_PG_LIBDIR/smcrun" || return 1
                fi
        fi
        "${APPS_PG_AS[@]}" "$bin/initdb" -D "$d/data" -A trust -U postgres --no-sync >"$d/initdb.log" 2>&1
}

apps_pg_start() {
        local name=$1 d=$2 port=$3 bin a pre=()
        shift 3
        bin=$(apps_pg_bindir) || return 1
        for a in "$@"; do
                [ -n "$APPS_PG_LIBDIR" ] && [ "$a" = "$APPS_SMCRUN_SCRIPT" ] && a=$APPS_PG_LIBDIR/smcrun
                pre+=("$a")
        done
        [ -n "$APPS_PG_LIBDIR" ] && pre=(env SMCRUN_LIB="$APPS_PG_LIBDIR/libsmcrun.so" "${pre[@]}")
        apps_bg "$name" "${APPS_PG_AS[@]}" "${pre[@]}" "$bin/postgres" -D "$d/data" -p "$port" -k "$d/sock" \
                -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=20
        apps_wait_port "$port" 20 "$APPS_BG_PID"
}

apps_nginx_start() {
        local d=$1 port=$2 name=$3
        shift 3
        : >"$d/error.log"
        apps_bg "$name" "$@" nginx -p "$d" -c "$d/nginx.conf" -e "$d/error.log"
        APPS_NGINX_PID=$APPS_BG_PID
        apps_wait_port "$port" 10 "$APPS_NGINX_PID" || return 1
        for _ in $(seq 20); do
                [ "$(pgrep -c -P "$APPS_NGINX_PID")" = 2 ] &&
                        timeout -k 5 3 curl -sf -o /dev/null "http://127.0.0.1:$port/4k.bin" && return 0
                kill -0 "$APPS_NGINX_PID" 2>/dev/null || return 1
                sleep 0.1
        done
        return 1
}
