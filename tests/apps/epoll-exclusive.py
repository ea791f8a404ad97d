#!/usr/bin/env python3
# EPOLLEXCLUSIVE on a listener (nginx's workers, accept_mutex off), run under smcrun:
#   - two worker processes, each with its own epoll set holding the shared listener
#     with EPOLLIN | EPOLLEXCLUSIVE: each of 60 SMC-D connections wakes one worker,
#     as on TCP (before, both woke for each and the loser's accept said EAGAIN);
#     without the flag both wake and the connections are spread: every one accepted
#     and served (smcd left the memfds of buffers the parent had mapped after the
#     fork out of NEW_CONN: the other worker could not map them and reset it);
#   - what epoll_ctl(2) says for that registration, as TCP's: a second ADD EEXIST,
#     MOD EINVAL, DEL 0, a second DEL ENOENT; after DEL no event, accept still works;
#     the event carries the listener's own descriptor (the app's data);
#   - a listener closed while registered leaves no event behind;
#   - two processes forked before their parent (the listener's owner) connected echo
#     21 connections between them, one after the other, every byte right.
# With "tcp" as argument it checks that the connections are not SMC (the same cases
# run without smcrun as the reference).
import errno
import os
import select
import socket
import sys
import time

SOL_SMC, SMC_MODE = 286, 0x5301
tcp_ref = len(sys.argv) > 1 and sys.argv[1] == "tcp"
fails = []
N = 60


def check(ok, what):
    if not ok:
        fails.append(what)


def is_smc(s):
    try:
        return s.getsockopt(SOL_SMC, SMC_MODE) == 1
    except OSError:
        return False


def listener():
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(64)
    ls.setblocking(False)
    return ls


def worker(ls, stop_r, report_w, flags):
    ep = select.epoll()
    ep.register(ls, flags)
    ep.register(stop_r, select.EPOLLIN)
    ok = again = wrong = 0
    while True:
        evs = ep.poll(1.0)
        if any(fd == stop_r for fd, _ in evs):
            break
        for fd, _ in evs:
            if fd != ls.fileno():
                wrong += 1
                continue
            try:
                s, _ = ls.accept()
            except BlockingIOError:
                again += 1
                continue
            ok += 1
            if is_smc(s) == tcp_ref:
                wrong += 1
            s.setblocking(True)
            s.recv(1)
            s.close()
    os.write(report_w, ("%d %d %d\n" % (ok, again, wrong)).encode())
    os._exit(0)


def case_one_wakeup(flags):
    ls = listener()
    stop_r, stop_w = os.pipe()
    rep_r, rep_w = os.pipe()
    pids = []
    for _ in range(2):
        pid = os.fork()
        if pid == 0:
            os.close(stop_w)
            os.close(rep_r)
            worker(ls, stop_r, rep_w, flags)
        pids.append(pid)
    os.close(rep_w)
    time.sleep(0.3)  # both workers in epoll_wait
    for i in range(N):
        try:
            c = socket.create_connection(ls.getsockname())
            c.sendall(b"x")
            c.settimeout(10)
            check(c.recv(1) == b"", "the worker closes the connection")
            c.close()
        except OSError as e:
            check(False, "connection %d (flags %#x): %s" % (i, flags, e))
        time.sleep(0.002)
    os.write(stop_w, b"x")
    out = b""
    for pid in pids:
        _, st = os.waitpid(pid, 0)
        check(os.WIFEXITED(st) and os.WEXITSTATUS(st) == 0, "worker exit %r" % st)
    while True:
        d = os.read(rep_r, 100)
        if not d:
            break
        out += d
    rows = [tuple(map(int, line.split())) for line in out.decode().split("\n") if line]
    ok = sum(r[0] for r in rows)
    again = sum(r[1] for r in rows)
    wrong = sum(r[2] for r in rows)
    check(len(rows) == 2 and ok == N and wrong == 0,
          "accepted %d of %d, %d wrong (fd or mode): %s" % (ok, N, wrong, rows))
    # one wakeup per connection; a few EAGAIN can be a worker woken while the other
    # one was not yet back in epoll_wait
    check(not (flags & select.EPOLLEXCLUSIVE) or again <= N // 10,
          "%d wakeups found nothing to accept (of %d connections): %s" % (again, N, rows))
    ls.close()
    return rows


def case_ctl_semantics():
    ls = listener()
    ep = select.epoll()
    ev = select.EPOLLIN | select.EPOLLEXCLUSIVE
    ep.register(ls, ev)
    try:
        ep.register(ls, ev)
        check(False, "second ADD succeeded")
    except OSError as e:
        check(e.errno == errno.EEXIST, "second ADD: %s (want EEXIST)" % e)
    try:
        ep.modify(ls, select.EPOLLIN)
        check(False, "MOD of an exclusive registration succeeded")
    except OSError as e:
        check(e.errno == errno.EINVAL, "MOD: %s (want EINVAL)" % e)
    c = socket.create_connection(ls.getsockname())
    evs = ep.poll(5)
    check(evs and evs[0][0] == ls.fileno() and evs[0][1] & select.EPOLLIN,
          "a connection: EPOLLIN with the listener's fd (%s, fd %d)" % (evs, ls.fileno()))
    s, _ = ls.accept()
    check(is_smc(s) != tcp_ref, "accepted connection SMC: %s" % is_smc(s))
    s.close()
    c.close()
    ep.unregister(ls)
    try:
        ep.unregister(ls)
        check(False, "second DEL succeeded")
    except OSError as e:
        check(e.errno == errno.ENOENT, "second DEL: %s (want ENOENT)" % e)
    c = socket.create_connection(ls.getsockname())
    evs = ep.poll(0.3)
    check(evs == [], "after DEL no event: %s" % evs)
    for _ in range(50):
        try:
            s, _ = ls.accept()
            break
        except BlockingIOError:
            time.sleep(0.02)
    else:
        s = None
    check(s is not None, "accept after DEL")
    if s:
        s.close()
    c.close()
    # registered again, then closed while registered: nothing left in the set
    ep.register(ls, ev)
    ls.close()
    evs = ep.poll(0.3)
    check(evs == [], "after close of the registered listener no event: %s" % evs)
    ep.close()


def recv_all(s):
    """Everything @s receives until EOF."""
    got = []
    while True:
        d = s.recv(65536)
        if not d:
            return b"".join(got)
        got.append(d)


def echo_once(addr, payload):
    c = socket.create_connection(addr)
    c.settimeout(10)
    c.sendall(payload)
    c.shutdown(socket.SHUT_WR)
    got = recv_all(c)
    c.close()
    return got


def serve(ls, n, go_r):
    """A forked accepter: waits for a byte on @go_r, then echoes @n connections."""
    os.read(go_r, 1)
    bad = 0
    for _ in range(n):
        s, _ = ls.accept()
        if is_smc(s) == tcp_ref:
            bad += 1
        s.sendall(recv_all(s))
        s.close()
    os._exit(1 if bad else 0)


def case_forked_accepter():
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(64)
    kids = []
    for n in (1, 20):  # both forked before any connection
        go_r, go_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(go_w)
            serve(ls, n, go_r)
        os.close(go_r)
        kids.append((pid, go_w))
    good = 0
    # the first child takes one connection (the parent, the listener's owner, maps
    # its buffers as the connecting side), then the second takes 20, which reuse them
    for k, (pid, go_w) in enumerate(kids):
        os.write(go_w, b"x")
        for i in range(1 if k == 0 else 20):
            payload = os.urandom(1000 + 997 * i)
            try:
                if echo_once(ls.getsockname(), payload) == payload:
                    good += 1
            except OSError as e:
                check(False, "connection %d to forked accepter %d: %s" % (i, k, e))
        _, st = os.waitpid(pid, 0)
        check(os.WIFEXITED(st) and os.WEXITSTATUS(st) == 0, "forked accepter %d exit %r" % (k, st))
    check(good == 21, "forked accepters echoed %d of 21 right" % good)
    ls.close()
    return good


def main():
    # without the flag both wake and either accepts: connections whose buffers the
    # parent mapped (as the connecting side) after the fork reach both workers. First,
    # while no buffer is mapped yet (later workers inherit the parent's mappings).
    rows_both = case_one_wakeup(select.EPOLLIN)
    rows = case_one_wakeup(select.EPOLLIN | select.EPOLLEXCLUSIVE)
    case_ctl_semantics()
    good = case_forked_accepter()
    sys.stderr.write("EPOLLEXCLUSIVE: 2 workers, %d connections (accepted, EAGAIN wakeups, wrong) %s, "
                     "without the flag %s; ADD/MOD/DEL/close answers; forked accepters %d/21 echoes right; "
                     "failed: %s\n" % (N, rows, rows_both, good, "; ".join(fails) or "none"))
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
