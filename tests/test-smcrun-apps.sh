#!/bin/bash
# Real programs patterns under smcrun over a private smcd: asyncio (nonblocking sockets
# set with ioctl(FIONBIO), epoll, many connections), a server that exits without
# closing (EOF, as over TCP), sendfile(2) (offset / file position, nonblocking, past
# the end, a pipe: tests/apps/sendfile.py; counted in smcd's sendfile_calls),
# connections shared by fork (fork-share.py) and by dup (dup-share.py), a connection
# dup2()ed between vfork and exec by CPython's subprocess (vfork-dup.py), accept(2)
# with SO_RCVTIMEO and recv(MSG_PEEK|MSG_WAITALL) on partial data with it (rcvtimeo.py),
# SO_RCVLOWAT on blocking receives (rcvlowat.py), calls from a thread while another
# sleeps in a blocking send (send-lock.py), close(2) racing other threads' calls
# (close-race.py), zero-length receives and splice's
# edges compared with TCP (edge-calls.py),
# connections queued on a listener that goes away are reset (listener-reset.py),
# but those queued on a closed SO_REUSEPORT listener go to another one of its group
# (reuseport-handoff.py), an IPv4 connection reaches an AF_INET listener before a
# dual-stack [::] one of the same port, as the kernel's (listener-score.py),
# a listener inherited across exec shares its queue with the old holders (listener-exec.py),
# posix_spawn file actions that dup2 a connection onto the child's stdin/stdout (spawn-actions.py),
# a listener handed to workers (multiprocessing spawn, send_fds, node child.send) keeps one queue
# (listener-pass.py, node-send-server.js), a server at its descriptor limit gets EMFILE
# and its clients stay queued (accept-emfile.py), a process that connects and
# accepts until EMFILE makes one connection per connect (connect-emfile.py),
# connections reach listeners of their own network namespace only (netns-isolation.py),
# an exec'd image takes its inherited connection over beyond max_clients_per_uid
# (exec-over-limit.py, under a second smcd with a limit of 1),
# sendmmsg/recvmmsg/splice (mmsg-splice.py), preadv2/pwritev2 at offset -1 (preadv2.py), a connect again after a refused nonblocking one (reconnect.py), one wakeup for shutdown(SHUT_RDWR) (shutdown-wake.py), no edge nor SIGIO at a close after both FINs (close-quiet.py), signals and SA_RESTART (sa-restart.py),
# plain TCP peers on either side with the reason recorded (mixed-worlds.py),
# SMC-D sockets inherited across execve() (tests/apps/exec-inherit.py; it and
# pass-fds.py also in a pid namespace of their own, smcd outside), C stdio on SMC
# connections: inetd's pattern with tr/sed/grep/sort/sha256sum/... (stdio-inetd.py) and
# fdopen/dprintf/dup2 onto stdin/stdout/stderr (tests/stdio-smc.c); programs that use
# io_uring get TCP (SMCD_DECL_IOURING), every byte right (tests/iouring-smc.c; liburing
# loaded into python); select/pselect with the library's busy-poll in front of the
# real call: readiness, timeouts, EBADF, pipes mixed in, 2 x 32 MiB streams
# (select-spin.py); EPOLLEXCLUSIVE on a listener shared by two worker processes: one
# wakeup per connection, epoll_ctl answers as for TCP (epoll-exclusive.py), and a
# transcript of epoll_ctl / epoll_wait on listeners compared with TCP's line by line
# (epoll-transcript.py); descriptors closed through syscall(SYS_close), close_range(2)
# and syscall(SYS_dup3) (raw-close.py), and node's libuv, which closes every descriptor
# that way (node-echo.js); connections passed to another process over a unix socket
# (SCM_RIGHTS: pass-fds.py, and node's cluster module, whose primary accepts and passes
# every connection to a worker, or passes its listener: node-cluster.js); sockets added
# to epoll sets before connect() (epoll-preconnect.py, and nginx's proxy_pass, whose
# requests hung before); readiness of connections shut down both ways, EPOLLHUP
# included, compared with TCP's line by line (epoll-hup.py).
# A child that confines itself with OpenSSH's seccomp allow-list before it serves an
# SMC connection (seccomp-smc.c, installed through prctl(2) and through seccomp(2)),
# and OpenSSH's sshd itself with ssh, 10 MB through a session.
# Copies of the process made past fork(3) (a raw clone, as vsftpd makes its sessions,
# and glibc's clone() without CLONE_VM: clone-smc.c); SMC-D inside a chroot
# (chroot-smc.py).
# Bad pointers (in the first page) given to every intercepted call: the kernel's
# EFAULT, never a crash in the library; the transcript compared with TCP's line by
# line (bad-pointers.c).
# Programs and an smcd run with stdin, stdout and stderr closed: the programs' sockets
# on 0..2 as over TCP, never the library's own (closed-stdio.py), smcd's 0..2 on
# /dev/null; a program's own socket pair that looks like a doorbell, passed on, arrives
# as it is (own-pair-pass.py).
# Args: SMCD LIBSMCRUN SMCRUN STDIO_SMC IOURING_SMC SECCOMP_SMC CLONE_SMC BAD_POINTERS
set -u
smcd=$1 lib=$2 smcrun=$3 stdio_smc=$4 iouring_smc=$5 seccomp_smc=$6 clone_smc=$7 bad_pointers=$8
here=$(dirname "$0")
# shellcheck source=tests/apps/smcrun-env.sh
. "$here/apps/smcrun-env.sh"
# private smcd in $rundir (PID $spid); a sanitizer build: its runtime preloaded
# (--short-conn-rate=0: these programs' loops of short connections test SMC-D itself;
# smcd's hints for them are tests/test-short-conn.sh's)
smcrun_env "$smcd" "$lib" smcd-test-apps --short-conn-rate=0 || exit 1
failed=0
# a preload library that is not one: smcrun refuses (125) instead of running the
# program without it
for bad in /etc/passwd /nonexistent/libsmcrun.so /tmp; do
        out=$(SMCRUN_LIB=$bad sh "$smcrun" true 2>&1); rc=$?
        if [ $rc = 125 ] && echo "$out" | grep -q "^smcrun: .*preload library"; then
                echo "ok - SMCRUN_LIB=$bad: exit 125"
        else
                echo "not ok - SMCRUN_LIB=$bad: exit $rc: $out"
                failed=1
        fi
done
for app in asyncio-echo exit-without-close sendfile fork-share dup-share mmsg-splice sa-restart mixed-worlds exec-inherit stdio-inetd select-spin epoll-exclusive raw-close pass-fds epoll-preconnect vfork-dup rcvtimeo listener-reset listener-exec spawn-actions listener-pass accept-emfile connect-emfile netns-isolation preadv2 reconnect shutdown-wake close-quiet reuseport-handoff listener-score; do
        if out=$(timeout 60 sh "$smcrun" python3 "$here/apps/$app.py" 2>&1); then
                echo "ok - $app: $out"
        else
                echo "not ok - $app: $out"
                failed=1
        fi
done
# in a pid namespace of their own with smcd outside it (a container's view: the
# doorbell pairs' SO_PEERCRED says pid 0, as smcd's own does): connections passed
# over unix sockets and inherited across exec are still recognised (helper 126: they
# arrived bare, their doorbell bytes read as data)
if unshare --pid --fork --mount-proc true 2>/dev/null; then
        for app in pass-fds exec-inherit; do
                if out=$(timeout 60 unshare --pid --fork --mount-proc sh "$smcrun" python3 "$here/apps/$app.py" 2>&1); then
                        echo "ok - $app in a pid namespace: $out"
                else
                        echo "not ok - $app in a pid namespace: $out"
                        failed=1
                fi
        done
else
        echo "ok - pid namespace: skipped: unshare --pid --mount-proc not permitted"
fi
# node (libuv closes descriptors with syscall(SYS_close)): its connections over SMC-D
# (smcd's client connection counter grows by all 120), as over TCP
smcd_stat() { # NAME: smcd's counter NAME now
        kill -USR1 "$spid"
        sleep 0.5
        python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["smcd"][sys.argv[2]])' "$rundir/stats.json" "$1"
}
node_app() { # NAME MIN SCRIPT [ARG]: SCRIPT under smcrun, at least MIN SMC-D connections
        local name=$1 min=$2 before after out
        shift 2
        before=$(smcd_stat conns_client)
        # (SMCPROTO_HINTS=0: 200 one-request clients, 20 at a time, end short at more
        # than short_conn_rate on a fast host, and smcd's hint would send about half
        # of them over TCP: a count of SMC-D connections needs them all asked)
        if out=$(SMCPROTO_HINTS=0 timeout 120 sh "$smcrun" node "$@" 2>&1) &&
                after=$(smcd_stat conns_client) && [ $((after - before)) -ge "$min" ]; then
                echo "ok - $name: $out ($((after - before)) SMC-D connections)"
        else
                echo "not ok - $name: $out (SMC-D connections: ${before:-?} -> ${after:-?})"
                failed=1
        fi
}
if command -v node >/dev/null; then
        node_app node-echo 120 "$here/apps/node-echo.js"
        # node's cluster: the primary passes each accepted connection to a worker
        # (SCHED_RR), or a bound socket to each worker, which listens on it
        # (SCHED_NONE) (SCM_RIGHTS); all 140 over SMC-D
        node_app "node-cluster rr" 140 "$here/apps/node-cluster.js" rr
        node_app "node-cluster none" 140 "$here/apps/node-cluster.js" none
        # node's child.send('server', server): the listening socket goes to 3
        # children over the IPC channel and they share its queue; all 200 over SMC-D
        node_app node-send-server 200 "$here/apps/node-send-server.js"
else
        echo "ok - node: skipped: no node (scripts/install-deps.sh installs nodejs)"
fi
# nginx as a reverse proxy, with its backend (python's http.server) and curl under
# smcrun too: nginx adds each upstream socket to epoll before connect(); 20 requests
# of a 1 MiB + 7 file, each body checked, over SMC-D on both hops (nginx reads exactly
# what FIONREAD said and then waits for an edge: epoll-preconnect.py case 6)
if [ -n "${LD_PRELOAD:-}" ]; then
        # (a sanitizer build: curl with the sanitizer runtime preloaded deadlocks at
        # start, before any socket; epoll-preconnect.py covers the library's part)
        echo "ok - nginx proxy_pass: skipped under a sanitizer build"
elif command -v nginx >/dev/null && command -v curl >/dev/null; then
        pd=$rundir/proxy
        mkdir -p "$pd/www"
        head -c $((1048576 + 7)) /dev/urandom >"$pd/www/f.bin"
        want=$(sha256sum <"$pd/www/f.bin" | cut -d' ' -f1)
        read -r p1 p2 < <(python3 -c 'import socket
s = [socket.socket() for _ in range(2)]
for x in s:
    x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
        printf '%s\n' "daemon off; master_process off; pid $pd/nginx.pid; error_log $pd/error.log;" \
                "events {}" \
                "http { access_log off; server { listen 127.0.0.1:$p2; location / { proxy_pass http://127.0.0.1:$p1; } } }" \
                >"$pd/nginx.conf"
        sh "$smcrun" python3 -m http.server -d "$pd/www" -b 127.0.0.1 "$p1" >"$pd/backend.log" 2>&1 &
        bpid=$!
        sh "$smcrun" nginx -p "$pd" -c "$pd/nginx.conf" >/dev/null 2>&1 &
        npid=$!
        for _ in $(seq 50); do
                curl -sf -o /dev/null "http://127.0.0.1:$p2/f.bin" && break
                sleep 0.1
        done
        before=$(smcd_stat conns_client)
        good=0
        for _ in $(seq 20); do
                got=$(timeout 10 sh "$smcrun" curl -s "http://127.0.0.1:$p2/f.bin" | sha256sum | cut -d' ' -f1)
                [ "$got" = "$want" ] && good=$((good + 1))
        done
        after=$(smcd_stat conns_client)
        kill "$npid" "$bpid" 2>/dev/null
        wait "$npid" "$bpid" 2>/dev/null
        if [ $good = 20 ] && [ $((after - before)) -ge 40 ]; then
                echo "ok - nginx proxy_pass: 20 of 20 bodies right ($((after - before)) SMC-D connections)"
        else
                echo "not ok - nginx proxy_pass: $good of 20 bodies right (SMC-D connections: $before -> $after)"
                tail -3 "$pd/error.log" "$pd/backend.log" | sed "s/^/    /"
                failed=1
        fi
else
        echo "ok - nginx proxy_pass: skipped: no nginx or curl"
fi
# same_as_tcp NAME: tests/apps/NAME.py over TCP, then under smcrun (with SMC_EXPECT
# from the caller's environment: =1 asks the script to check every connection is
# SMC-D); both must succeed and print the same transcript, line by line
same_as_tcp() {
        local tcp_t smc_t
        if tcp_t=$(SMC_EXPECT= timeout 120 python3 "$here/apps/$1.py" 2>&1) &&
                smc_t=$(timeout 120 sh "$smcrun" python3 "$here/apps/$1.py" 2>&1) &&
                [ "$tcp_t" = "$smc_t" ]; then
                echo "ok - $1: $(echo "$smc_t" | grep -c .) lines as over TCP"
        else
                echo "not ok - $1: differs from TCP's (< TCP, > smcrun):"
                diff <(echo "$tcp_t") <(echo "$smc_t") | sed 's/^/    /'
                failed=1
        fi
}
# epoll_ctl / epoll_wait on listeners with EPOLLEXCLUSIVE: the transcript under smcrun
# must be TCP's, line by line
same_as_tcp epoll-transcript
# the epoll watch (data published without a doorbell byte while a level-triggered set
# watches the connection): every other way of waiting must still see it; the
# transcript under smcrun must be TCP's, on SMC-D connections
SMC_EXPECT=1 same_as_tcp epoll-watch
# readiness once a connection's directions are shut (EPOLLHUP from epoll as on TCP,
# also for a registration with no events), the abort, data read on after the hang-up,
# a hung-up connection shared with a child, a reset after our own shutdown (reported
# first), a close with SO_LINGER {1, 0} or data unread after both SHUT_WR (no reset):
# the transcript under smcrun must be TCP's (and its own checks of TCP's results
# pass, all connections SMC-D), and every connection it made must end in smcd (none
# kept, none ended early)
before=$(smcd_stat conns_current)
if tcp_t=$(timeout 120 python3 "$here/apps/epoll-hup.py" 2>&1) &&
        smc_t=$(SMC_EXPECT=1 timeout 120 sh "$smcrun" python3 "$here/apps/epoll-hup.py" 2>&1) &&
        [ "$tcp_t" = "$smc_t" ]; then
        for _ in 1 2 3 4 5; do after=$(smcd_stat conns_current); [ "$after" = "$before" ] && break; sleep 1; done
        if [ "$after" = "$before" ]; then
                echo "ok - epoll-hup: $(echo "$smc_t" | grep -c .) lines as over TCP; smcd's current connections back to $after"
        else
                echo "not ok - epoll-hup: smcd's current connections $before before, $after after"
                failed=1
        fi
else
        echo "not ok - epoll-hup: differs from TCP's (< TCP, > smcrun):"
        diff <(echo "$tcp_t") <(echo "$smc_t") | sed 's/^/    /'
        failed=1
fi
# calls at the edges (edge-calls.py: zero-length receives, splice into a full
# nonblocking pipe, splice offsets): the transcript under smcrun must be TCP's
SMC_EXPECT=1 same_as_tcp edge-calls
# over_both NAME: tests/apps/NAME.py (its own checks, one line) over TCP, then under
# smcrun with every connection SMC-D
over_both() {
        local out
        if out=$(timeout 60 python3 "$here/apps/$1.py" 2>&1) &&
                out=$(SMC_EXPECT=1 timeout 60 sh "$smcrun" python3 "$here/apps/$1.py" 2>&1); then
                echo "ok - $1: ${out#"$1: "}, over TCP and SMC-D"
        else
                echo "not ok - $1: ${out#"$1: "}"
                failed=1
        fi
}
# SO_RCVLOWAT on blocking receives (rcvlowat.py: its checks are TCP's results)
over_both rcvlowat
# FIONREAD through one copy, the read through another (a dup, a forked child): no
# stale EPOLLIN after it (owed-share.py; helper 129)
over_both owed-share
# calls from a second thread while the first sleeps in a blocking send for room
# (send-lock.py: a nonblocking send, TCP_CORK, TCP_NODELAY return at once, as TCP's;
# every byte read)
over_both send-lock
# close(2) racing a reading and a writing thread (close-race.py: every byte a read
# returns is the peer's, the calls end with EBADF)
over_both close-race
# connect(AF_UNSPEC) on a connection (disconnect.py: the peer gets ECONNRESET, the
# socket is unconnected with SO_ERROR ECONNRESET, keeps its options and connects
# again; a blocked reader ends with EPIPE)
over_both disconnect
# fork(2) while other threads make listeners and connections (fork-locks.py: every
# child, which closes a file and exits, exits at once; a lock another thread held at
# the fork made it hang)
over_both fork-locks
# connect(2) to 0.0.0.0 and :: (connect-any.py: loopback's addresses at both ends)
over_both connect-any
# signal-driven I/O (sigio.py: SIGIO per arrival on a connection; on a listener at a
# connect, with O_ASYNC set after or before listen() or by FIOASYNC, F_SETSIG's signal,
# F_GETFL / F_GETOWN / SIOCGPGRP read back; the listener raised none)
over_both sigio
# poll(2) on a connection shared by fork (fork-poll.py: POLLOUT with an infinite
# timeout never returns 0 while the child sends; after the child's kill mid-send, poll
# reports POLLOUT and a send with a timeout goes through)
over_both fork-poll
# send(2) flags on a connection (send-flags.py: MSG_FASTOPEN EISCONN, an unknown flag
# and MSG_ZEROCOPY without SO_ZEROCOPY ignored, as TCP's)
over_both send-flags
# writability after a whole send that left less than half of the ring free, whose plug
# the first wait for POLLOUT makes (pollout-owed.py: poll, select and epoll level,
# edge and one-shot do not report it writable, and wait without spinning; all report
# it once the peer read everything)
over_both pollout-owed
# TCP_INQ's control message on recvmsg(2) (recv-inq.py: the bytes left, 1 at EOF, cut
# with MSG_CTRUNC to a small buffer, inherited from the listener: TCP's results)
over_both recv-inq
# a program run with stdin, stdout and stderr closed: its sockets take 0, 1, 2 as
# over TCP, never the library's own descriptors, so a daemon's /dev/null check and its
# writes to stdout do not land in them (closed-stdio.py)
over_both closed-stdio
# the program's own socket pair with a doorbell's send buffer (1 byte), an end passed
# to an exec'd worker: it arrives as it is (own-pair-pass.py; smcd says it is none of
# its own; with no smcd to ask it is reset, as nothing else can tell it from one)
if out=$(timeout 60 sh "$smcrun" python3 "$here/apps/own-pair-pass.py" 2>&1); then
        echo "ok - $out"
else
        echo "not ok - $out"
        failed=1
fi
# a process that changes its root before its first SMC call: still SMC-D (root only)
before=$(smcd_stat conns_client)
out=$(timeout 60 sh "$smcrun" python3 "$here/apps/chroot-smc.py" 2>&1); rc=$?
after=$(smcd_stat conns_client)
if [ $rc = 77 ]; then
        echo "ok - chroot-smc: $out"
elif [ $rc = 0 ] && [ $((after - before)) -ge 1 ]; then
        echo "ok - chroot-smc: $out ($((after - before)) SMC-D connection)"
else
        echo "not ok - chroot-smc: exit $rc, $((after - before)) SMC-D connections: $out"
        failed=1
fi
# copies of the process made past fork(3): over TCP and under smcrun, all SMC-D
before=$(smcd_stat conns_client)
if out=$(timeout 60 "$clone_smc" 2>&1) && out2=$(timeout 120 sh "$smcrun" "$clone_smc" 2>&1); then
        after=$(smcd_stat conns_client)
        if [ $((after - before)) -ge 42 ]; then
                echo "ok - clone-smc: $out2 ($((after - before)) SMC-D connections)"
        else
                echo "not ok - clone-smc: $out2, but $((after - before)) SMC-D connections, want 42"
                failed=1
        fi
else
        echo "not ok - clone-smc: TCP: $out; smcrun: ${out2:-}"
        failed=1
fi
out2=
# bad pointers: the same answers as TCP's, call by call (not under a sanitizer: its
# interceptors read the program's arrays themselves)
if [ -n "${LD_PRELOAD:-}" ]; then
        echo "ok - bad-pointers: skipped: a sanitizer runtime is preloaded"
elif tcp=$(timeout 60 "$bad_pointers" 2>/dev/null) &&
        smc=$(timeout 60 sh "$smcrun" "$bad_pointers" 2>"$rundir/bad-pointers.err"); then
        if [ "$tcp" = "$smc" ] && grep -q "mode 1 " "$rundir/bad-pointers.err"; then
                echo "ok - bad-pointers: $(echo "$smc" | wc -l) calls with pointers 16 and NULL answer as over TCP, over SMC-D"
        else
                echo "not ok - bad-pointers: $(cat "$rundir/bad-pointers.err")"
                diff <(echo "$tcp") <(echo "$smc") | sed 's/^/#   /'
                failed=1
        fi
else
        echo "not ok - bad-pointers: TCP: ${tcp:-?}; smcrun: ${smc:-?}"
        failed=1
fi
# a sandboxed child (seccomp): its SMC connection keeps working, its filter refuses
# what it refused; not under a sanitizer (its runtime makes calls of its own there)
if [ -n "${LD_PRELOAD:-}" ]; then
        echo "ok - seccomp-smc: skipped: a sanitizer runtime is preloaded"
else
        before=$(smcd_stat conns_client)
        for how in prctl seccomp; do
                if out=$(timeout 60 "$seccomp_smc" $how 3000007 2>&1) &&
                        out2=$(timeout 60 sh "$smcrun" "$seccomp_smc" $how 3000007 2>&1); then
                        echo "ok - seccomp-smc $how: TCP: $out; smcrun: $out2"
                else
                        echo "not ok - seccomp-smc $how: TCP: $out; smcrun: ${out2:-}"
                        failed=1
                fi
                out2=
        done
        after=$(smcd_stat conns_client)
        if [ $((after - before)) -ge 2 ]; then
                echo "ok - seccomp-smc: $((after - before)) SMC-D connections"
        else
                echo "not ok - seccomp-smc: $((after - before)) SMC-D connections, want 2"
                failed=1
        fi
fi
# OpenSSH's sshd under smcrun (it re-execs itself with each connection, whose
# pre-authentication child then serves it in a seccomp sandbox), ssh under smcrun too:
# 10 MB + 3 through the session, checksummed at the far end, over SMC-D. Its own
# sshd on a free port with its own keys and config; root only (privilege separation)
sshd_bin=$(command -v sshd || echo /usr/sbin/sshd)
if [ -n "${LD_PRELOAD:-}" ] || [ "$(id -u)" != 0 ] || [ ! -x "$sshd_bin" ] || ! command -v ssh >/dev/null; then
        echo "ok - sshd: skipped: ${LD_PRELOAD:+a sanitizer runtime is preloaded}$([ "$(id -u)" != 0 ] && echo " not root")$([ -x "$sshd_bin" ] || echo " no sshd")"
else
        sd=$(mktemp -d /tmp/smcd-test-sshd.XXXXXX)
        ssh-keygen -q -t ed25519 -N "" -f "$sd/host" && ssh-keygen -q -t ed25519 -N "" -f "$sd/user" &&
                cp "$sd/user.pub" "$sd/authorized_keys"
        mkdir -p /run/sshd
        head -c 10000003 /dev/urandom >"$sd/data"
        want=$(sha256sum <"$sd/data" | cut -d' ' -f1)
        before=$(smcd_stat conns_client)
        # a free port can be taken by another test between the pick and sshd's bind:
        # then sshd exits at once, and another port is tried
        for _ in 1 2 3; do
                port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
                printf '%s\n' "Port $port" "ListenAddress 127.0.0.1" "HostKey $sd/host" \
                        "AuthorizedKeysFile $sd/authorized_keys" "StrictModes no" "UsePAM no" "PermitRootLogin yes" \
                        "PidFile $sd/sshd.pid" >"$sd/sshd_config"
                sh "$smcrun" "$sshd_bin" -f "$sd/sshd_config" -D -e >"$sd/sshd.log" 2>&1 &
                sshd_pid=$!
                for _ in $(seq 50); do
                        python3 -c "import socket; socket.create_connection(('127.0.0.1', $port)).close()" 2>/dev/null &&
                                break
                        kill -0 "$sshd_pid" 2>/dev/null || break
                        sleep 0.1
                done
                kill -0 "$sshd_pid" 2>/dev/null && break
        done
        got=$(timeout 60 sh "$smcrun" ssh -i "$sd/user" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null \
                -o BatchMode=yes -p "$port" root@127.0.0.1 "sha256sum | cut -d' ' -f1" <"$sd/data" 2>"$sd/ssh.err")
        after=$(smcd_stat conns_client)
        kill "$sshd_pid" 2>/dev/null
        wait "$sshd_pid" 2>/dev/null
        # (the readiness probe above is plain TCP)
        if [ "$got" = "$want" ] && [ $((after - before)) -ge 1 ]; then
                echo "ok - sshd: 10 MB + 3 through an ssh session, checksum right, $((after - before)) SMC-D connections"
        else
                echo "not ok - sshd: checksum '$got' (want $want), $((after - before)) SMC-D connections"
                sed 's/^/    ssh: /' "$sd/ssh.err"
                tail -n 20 "$sd/sshd.log" | sed 's/^/    sshd: /'
                failed=1
        fi
        rm -rf "$sd"
fi
if out=$(printf 'first\nsecond\n' | timeout 60 sh "$smcrun" "$stdio_smc" 2>&1); then
        echo "ok - stdio-smc:"
else
        echo "not ok - stdio-smc:"
        failed=1
fi
echo "$out" | sed 's/^/    /'
# io_uring: a ring (raw system calls), then liburing loaded (no ring): both TCP
uring=0
out=$(timeout 60 sh "$smcrun" "$iouring_smc" 2>&1); rc=$?
case $rc in
0) echo "ok - iouring-smc: $out"; uring=$((uring + 1)) ;;
77) echo "ok - iouring-smc: skipped: $out" ;;
*) echo "not ok - iouring-smc: exit $rc: $out"; failed=1 ;;
esac
liburing=$(ls /usr/lib/*/liburing.so.2 /usr/lib/liburing.so.2 2>/dev/null | head -n 1)
if [ -n "$liburing" ]; then
        if out=$(LD_PRELOAD="${LD_PRELOAD:+$LD_PRELOAD:}$liburing" timeout 60 sh "$smcrun" python3 -c '
import socket
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(1)
c = socket.create_connection(l.getsockname()); s, _ = l.accept()
c.sendall(b"uring" * 1000); c.close()
b = b""
while len(b) < 5000:
    d = s.recv(65536)
    if not d: break
    b += d
assert b == b"uring" * 1000, len(b)
print("liburing loaded: 5000 bytes over TCP")' 2>&1); then
                echo "ok - liburing: $out"; uring=$((uring + 1))
        else
                echo "not ok - liburing: $out"; failed=1
        fi
fi
# a statically linked program: smcrun warns on a terminal (script(1) gives it one)
busybox=$(command -v busybox)
if [ -n "$busybox" ] && command -v script >/dev/null && ! head -c 8192 "$busybox" | grep -q ld-linux; then
        out=$(SMCRUN_LIB=$SMCRUN_LIB script -qec "sh $smcrun $busybox true" /dev/null 2>&1)
        if echo "$out" | grep -q "statically linked"; then
                echo "ok - static program: smcrun warns on a terminal"
        else
                echo "not ok - static program: no warning: $out"; failed=1
        fi
fi
# beyond max_clients_per_uid: an exec'd image still takes its inherited connection over,
# a new connection goes to TCP with its reason (exec-over-limit.py), under a second
# private smcd that allows one control connection per uid
# side_smcd DIR STDIO ARGS...: another private smcd on DIR (made here, mode 755; pid
# $side_pid), its log in DIR/smcd.log, or (STDIO=closed) with stdin, stdout and
# stderr closed; side_smcd_stop DIR: stop it and remove DIR
side_smcd() {
        local dir=$1 stdio=$2
        shift 2
        chmod 755 "$dir"
        if [ "$stdio" = closed ]; then
                "$smcd" "$@" --runtime-dir "$dir" <&- >&- 2>&- &
        else
                "$smcd" "$@" --runtime-dir "$dir" >"$dir/smcd.log" 2>&1 &
        fi
        side_pid=$!
        for _ in $(seq 100); do [ -S "$dir/smcd.sock" ] && break; sleep 0.05; done
}
side_smcd_stop() {
        kill "$side_pid" 2>/dev/null
        wait "$side_pid" 2>/dev/null
        rm -rf "$1"
}
lim=$(mktemp -d /tmp/smcd-test-limit.XXXXXX)
side_smcd "$lim" log --short-conn-rate=0 --max-clients-per-uid 1
if out=$(SMCD_RUNTIME_DIR=$lim timeout 60 sh "$smcrun" python3 "$here/apps/exec-over-limit.py" 2>&1); then
        echo "ok - exec-over-limit: $out"
else
        echo "not ok - exec-over-limit: $out"
        failed=1
fi
side_smcd_stop "$lim"
# smcd started with stdin, stdout and stderr closed (`<&- >&- 2>&-`): /dev/null in
# their place (before, its runtime directory, control socket and event loop took
# 0..2, and its log went into them); a program with its own stdio closed then gets
# SMC-D through it, its sockets on 0..2 (closed-stdio.py)
cl=$(mktemp -d /tmp/smcd-test-stdio.XXXXXX)
side_smcd "$cl" closed --no-bus --short-conn-rate=0 --state-file "$cl/state.json"
std=$(for k in 0 1 2; do readlink "/proc/$side_pid/fd/$k"; done | paste -sd' ')
if [ "$std" = "/dev/null /dev/null /dev/null" ] &&
        out=$(SMCD_RUNTIME_DIR=$cl SMC_EXPECT=1 timeout 60 sh "$smcrun" python3 "$here/apps/closed-stdio.py" 2>&1); then
        echo "ok - smcd with stdio closed: fds 0..2 $std; $out"
else
        echo "not ok - smcd with stdio closed: fds 0..2 '$std'; ${out:-}"
        failed=1
fi
side_smcd_stop "$cl"
out=
kill -USR1 $spid
sleep 0.5
python3 - "$rundir/stats.json" <<'PY' || failed=1
import json, sys
s = json.load(open(sys.argv[1]))["smcd"]
# asyncio: 5 connections; exit-without-close: 1; sendfile: 5 (4 of them sendfile data)
ok = s["conns_client"] >= 11 and s["conns_server"] >= 11 and s["sendfile_calls"] >= 4 and \
    s["sendfile_bytes"] >= 3 * (4 << 20)
print("%s - stats: conns_client %d, conns_server %d (SMC-D), sendfile_calls %d, sendfile_bytes %d" %
      ("ok" if ok else "not ok", s["conns_client"], s["conns_server"], s["sendfile_calls"], s["sendfile_bytes"]))
sys.exit(0 if ok else 1)
PY
python3 - "$rundir/stats.json" "$uring" <<'PY' || failed=1
import json, sys
f = json.load(open(sys.argv[1]))["fallback"]
n = sum(e["count"] for e in f["by_reason"] if e["name"] == "SMCD_DECL_IOURING")
want = int(sys.argv[2])
ok = n == want
print("%s - io_uring fallbacks recorded as SMCD_DECL_IOURING: %d (want %d)" % ("ok" if ok else "not ok", n, want))
sys.exit(0 if ok else 1)
PY
exit $failed
