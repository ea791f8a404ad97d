#!/usr/bin/env python3
# The epoll watch (libsmcproto socket.c): while an epoll set (level- or edge-triggered)
# watches an SMC-D connection, its writer publishes without a doorbell byte and the set's
# epoll_wait looks at the ring itself. Every other way of waiting must still see such
# data. A transcript of what the calls say, in many orders: level-triggered partial
# reads, EPOLLIN|EPOLLOUT merged, poll / select / pselect (also with a zero timeout) /
# blocking recv after a watch, a MOD to EPOLLET or EPOLLONESHOT with data waiting, DEL
# and ADD again, edge-triggered sets
# (nginx's registration: one event per arrival), the set polled and
# nested into another (also edge-triggered: an edge per arrival for the outer set), fork (the child reads), a second thread in the same set, the
# peer's close, many connections with idle ones, and a ping-pong of odd sizes checked
# byte by byte. tests/test-smcrun-apps.sh runs it over plain TCP and under smcrun and
# compares the transcripts line by line; with SMC_EXPECT=1 it also checks that the
# connections are SMC-D.
import os
import select
import socket
import struct
import threading
import time

import smcapp

E = select
W = 1.0  # s: how long a wait that must report something may take at most
SHORT = 0.2  # s: a wait that must report nothing


def out(*a):
    print(*a, flush=True)


def names(evs, fds):
    r = []
    for fd, ev in sorted(evs):
        bits = [n for n, b in (("IN", E.EPOLLIN), ("OUT", E.EPOLLOUT), ("RDHUP", E.EPOLLRDHUP),
                                ("HUP", E.EPOLLHUP), ("ERR", E.EPOLLERR)) if ev & b]
        r.append("%s:%s" % (fds.get(fd, fd), "|".join(bits)))
    return " ".join(r) or "-"


def wait(ep, fds, t=W):
    t0 = time.monotonic()
    evs = ep.poll(t)
    dt = time.monotonic() - t0
    return names(evs, fds) + (" (late)" if evs and dt > t / 2 and t >= W else "")


def case_lt_partial():
    out("# level-triggered, partial reads")
    a, b = smcapp.pair()
    b.setblocking(False)
    ep = E.epoll()
    ep.register(b.fileno(), E.EPOLLIN)
    fds = {b.fileno(): "b"}
    out("empty:", wait(ep, fds, SHORT))
    a.sendall(b"x" * 100)
    for k in range(4):
        out("wait", k, wait(ep, fds))
        out("read", len(b.recv(30)))
    out("empty again:", wait(ep, fds, SHORT))
    a.sendall(b"y" * 7)
    out("after more:", wait(ep, fds), len(b.recv(100)))
    ep.close()
    a.close()
    b.close()


def case_in_out():
    out("# EPOLLIN|EPOLLOUT")
    a, b = smcapp.pair()
    b.setblocking(False)
    ep = E.epoll()
    ep.register(b.fileno(), E.EPOLLIN | E.EPOLLOUT)
    fds = {b.fileno(): "b"}
    out("idle:", wait(ep, fds))
    a.sendall(b"z" * 10)
    time.sleep(0.05)
    out("data:", wait(ep, fds))
    out("read", len(b.recv(100)))
    out("after:", wait(ep, fds))
    ep.close()
    a.close()
    b.close()


def watched(a, b, reg=E.EPOLLIN):
    """b in a level-triggered set that has waited once (watched), then data from a"""
    ep = E.epoll()
    ep.register(b.fileno(), reg)
    ep.poll(0.05)
    a.sendall(b"w" * 50)
    time.sleep(0.05)
    return ep


def case_other_waits():
    out("# other waits after a watch")
    a, b = smcapp.pair()
    ep = watched(a, b)
    p = select.poll()
    p.register(b.fileno(), select.POLLIN)
    t0 = time.monotonic()
    r = p.poll(W * 1000)
    out("poll:", [e & select.POLLIN for _, e in r], "late" if time.monotonic() - t0 > W / 2 else "")
    out("read", len(b.recv(100)))
    a.sendall(b"v" * 5)
    time.sleep(0.05)
    r = select.select([b], [], [], W)
    out("select:", len(r[0]))
    out("read", len(b.recv(100)))
    ep.poll(0.05)  # watched again
    a.sendall(b"u" * 3)
    b.settimeout(W)
    out("blocking recv:", len(b.recv(100)))
    # a blocking recv that sleeps first, then data
    ep.poll(0.05)
    t = threading.Timer(0.1, lambda: a.sendall(b"t" * 9))
    t.start()
    out("blocking recv (sleeps):", len(b.recv(100)))
    t.join()
    # poll and select that sleep first, then data
    for name in ("poll", "select", "ppoll-like poll(-1)"):
        ep.poll(0.05)
        t = threading.Timer(0.1, lambda: a.sendall(b"p" * 4))
        t.start()
        t0 = time.monotonic()
        if name == "select":
            n = len(select.select([b], [], [], W)[0])
        else:
            p = select.poll()
            p.register(b.fileno(), select.POLLIN)
            n = len(p.poll(W * 1000 if name == "poll" else -1))
        t.join()
        out(name, "(sleeps):", n, "late" if time.monotonic() - t0 > W / 2 else "", len(b.recv(100)))
    ep.close()
    a.close()
    b.close()


def case_select_zero():
    out("# select, pselect, poll with a zero and a non-zero timeout, each first after a watch")
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)

    class Ts(ctypes.Structure):
        _fields_ = [("s", ctypes.c_long), ("ns", ctypes.c_long)]

    def pselect(fd, secs):
        rd = (ctypes.c_ulong * 16)()
        bits = ctypes.sizeof(ctypes.c_ulong) * 8
        rd[fd // bits] = 1 << (fd % bits)
        n = libc.pselect(fd + 1, ctypes.byref(rd), None, None, ctypes.byref(Ts(secs, 0)), None)
        return n, (rd[fd // bits] >> (fd % bits)) & 1

    for name in ("select 0", "select W", "pselect 0", "pselect W", "poll 0", "poll W", "select 0 after poll 0"):
        a, b = smcapp.pair()
        ep = watched(a, b)  # (50 bytes of "w")
        if name.startswith("select 0 after"):
            p = select.poll()
            p.register(b.fileno(), select.POLLIN)
            p.poll(0)
        if name.startswith("select"):
            r = len(select.select([b], [], [], 0 if name.startswith("select 0") else W)[0])
        elif name.startswith("pselect"):
            r = pselect(b.fileno(), 0 if name == "pselect 0" else 1)
        else:
            p = select.poll()
            p.register(b.fileno(), select.POLLIN)
            r = [e & select.POLLIN for _, e in p.poll(0 if name == "poll 0" else W * 1000)]
        out(name + ":", r, "again:", len(select.select([b], [], [], 0)[0]), "data:", b.recv(100) == b"w" * 50)
        ep.close()
        a.close()
        b.close()


def case_ctypes_waits():
    out("# ppoll, epoll_pwait, epoll_pwait2 (through libc, as a C program calls them)")
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)

    class PollFd(ctypes.Structure):
        _fields_ = [("fd", ctypes.c_int), ("events", ctypes.c_short), ("revents", ctypes.c_short)]

    class Ts(ctypes.Structure):
        _fields_ = [("s", ctypes.c_long), ("ns", ctypes.c_long)]

    class Ev(ctypes.Structure):
        _pack_ = 1 if os.uname().machine == "x86_64" else 0
        _fields_ = [("events", ctypes.c_uint32), ("data", ctypes.c_uint64)]

    a, b = smcapp.pair()
    b.setblocking(False)
    ep = watched(a, b)
    pf = PollFd(b.fileno(), select.POLLIN, 0)
    out("ppoll (data waiting):", libc.ppoll(ctypes.byref(pf), 1, ctypes.byref(Ts(1, 0)), None), pf.revents & 1)
    out("read", len(b.recv(100)))
    for name in ("ppoll", "epoll_pwait", "epoll_pwait2"):
        ep.poll(0.05)  # watched again
        t = threading.Timer(0.1, lambda: a.sendall(b"k" * 3))
        t.start()
        evs = (Ev * 4)()
        if name == "ppoll":
            pf = PollFd(b.fileno(), select.POLLIN, 0)
            n = libc.ppoll(ctypes.byref(pf), 1, ctypes.byref(Ts(2, 0)), None)
        elif name == "epoll_pwait":
            n = libc.epoll_pwait(ep.fileno(), evs, 4, 2000, None)
        else:
            n = libc.epoll_pwait2(ep.fileno(), evs, 4, ctypes.byref(Ts(2, 0)), None)
        t.join()
        out(name, "(sleeps):", n, len(b.recv(100)))
    ep.poll(0.05)
    a.sendall(b"j" * 2)
    time.sleep(0.05)
    evs = (Ev * 4)()
    out("epoll_pwait2 (data waiting):", libc.epoll_pwait2(ep.fileno(), evs, 4, ctypes.byref(Ts(1, 0)), None),
        evs[0].events & 1)
    out("read", len(b.recv(100)))
    ep.close()
    a.close()
    b.close()


def case_mod_et():
    out("# MOD to EPOLLET with data waiting")
    a, b = smcapp.pair()
    b.setblocking(False)
    ep = watched(a, b)
    fds = {b.fileno(): "b"}
    ep.modify(b.fileno(), E.EPOLLIN | E.EPOLLET)
    out("edge:", wait(ep, fds))
    out("no second edge:", wait(ep, fds, SHORT))
    a.sendall(b"s" * 4)
    out("new data, edge:", wait(ep, fds))
    out("read", len(b.recv(1000)))
    ep.modify(b.fileno(), E.EPOLLIN)
    out("LT again, empty:", wait(ep, fds, SHORT))
    a.sendall(b"r")
    out("LT data:", wait(ep, fds))
    out("read", len(b.recv(1000)))
    ep.close()
    a.close()
    b.close()


def case_mod_oneshot():
    out("# MOD to EPOLLONESHOT with data waiting")
    a, b = smcapp.pair()
    b.setblocking(False)
    ep = watched(a, b)
    fds = {b.fileno(): "b"}
    ep.modify(b.fileno(), E.EPOLLIN | E.EPOLLONESHOT)
    out("fires:", wait(ep, fds))
    out("disarmed:", wait(ep, fds, SHORT))
    a.sendall(b"q" * 2)
    out("still disarmed:", wait(ep, fds, SHORT))
    ep.modify(b.fileno(), E.EPOLLIN | E.EPOLLONESHOT)
    out("re-armed:", wait(ep, fds))
    out("read", len(b.recv(1000)))
    ep.close()
    a.close()
    b.close()


def case_del_add():
    out("# DEL and ADD again")
    a, b = smcapp.pair()
    b.setblocking(False)
    ep = watched(a, b)
    fds = {b.fileno(): "b"}
    ep.unregister(b.fileno())
    out("deleted:", wait(ep, fds, SHORT))
    ep.register(b.fileno(), E.EPOLLIN)
    out("added:", wait(ep, fds))
    ep.unregister(b.fileno())
    ep2 = E.epoll()
    ep2.register(b.fileno(), E.EPOLLIN | E.EPOLLET)
    out("other set, ET:", wait(ep2, fds))
    out("read", len(b.recv(1000)))
    ep2.close()
    ep.close()
    a.close()
    b.close()


def case_set_polled():
    out("# the set itself polled, selected, nested")
    a, b = smcapp.pair()
    b.setblocking(False)
    ep = watched(a, b)
    p = select.poll()
    p.register(ep.fileno(), select.POLLIN)
    out("poll(set):", [e & select.POLLIN for _, e in p.poll(W * 1000)])
    out("select(set):", len(select.select([ep.fileno()], [], [], W)[0]))
    out("read", len(b.recv(1000)))
    outer = E.epoll()
    outer.register(ep.fileno(), E.EPOLLIN)
    out("outer empty:", wait(outer, {ep.fileno(): "inner"}, SHORT))
    a.sendall(b"n" * 6)
    out("outer:", wait(outer, {ep.fileno(): "inner"}))
    out("inner:", wait(ep, {b.fileno(): "b"}))
    out("read", len(b.recv(1000)))
    outer.close()
    ep.close()
    a.close()
    b.close()


def case_nested_et():
    out("# a set nested edge-triggered into another: an edge per arrival, data unread or not")
    for inner_et in (False, True):
        a, b = smcapp.pair()
        b.setblocking(False)
        inner = E.epoll()
        inner.register(b.fileno(), E.EPOLLIN | (E.EPOLLET if inner_et else 0))
        outer = E.epoll()
        outer.register(inner.fileno(), E.EPOLLIN | E.EPOLLET)
        fds = {inner.fileno(): "inner"}
        out("inner et %s, empty:" % inner_et, wait(outer, fds, SHORT))
        for i in range(3):
            a.sendall(b"e" * (i + 1))
            out("arrival %d, unread:" % i, wait(outer, fds), "again:", wait(outer, fds, SHORT))
        out("inner:", wait(inner, {b.fileno(): "b"}), "read", len(b.recv(1000)))
        a.sendall(b"f")
        out("after the read, arrival:", wait(outer, fds), "read", len(b.recv(1000)))
        outer.close()
        inner.close()
        a.close()
        b.close()
    # three levels (top over mid over inner), beside 9 more inner sets in one outer
    # set (more than the library records one by one: helper 131's missed wakeup)
    pairs = [smcapp.pair() for _ in range(10)]
    inners = []
    outer = E.epoll()
    for a, b in pairs:
        b.setblocking(False)
        i = E.epoll()
        i.register(b.fileno(), E.EPOLLIN)
        outer.register(i.fileno(), E.EPOLLIN | E.EPOLLET)
        inners.append(i)
    a, b = pairs[9]
    a.sendall(b"g")
    out("10 inner sets, the last one's arrival: outer", wait(outer, {inners[9].fileno(): "inner9"}))
    mid = E.epoll()
    mid.register(inners[9].fileno(), E.EPOLLIN | E.EPOLLET)
    top = E.epoll()
    top.register(mid.fileno(), E.EPOLLIN | E.EPOLLET)
    out("3 levels built: top", wait(top, {mid.fileno(): "mid"}))
    for i in range(3):
        a.sendall(b"g")
        out("10 inner sets, 3 levels, arrival %d unread: top" % i, wait(top, {mid.fileno(): "mid"}),
            "outer", wait(outer, {inners[9].fileno(): "inner9"}))
    a, b = pairs[2]
    a.sendall(b"h")
    out("another inner set's arrival: outer", wait(outer, {inners[2].fileno(): "inner2"}), "top",
        wait(top, {mid.fileno(): "mid"}, SHORT))
    for x in [top, mid, outer] + inners:
        x.close()
    for a, b in pairs:
        a.close()
        b.close()


def case_fork():
    out("# fork: the child reads")
    a, b = smcapp.pair()
    ep = watched(a, b)
    out("parent sees:", wait(ep, {b.fileno(): "b"}))
    out("parent read", len(b.recv(1000)))
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        b.settimeout(3)
        try:
            n = len(b.recv(1000))
        except Exception as e:  # noqa: BLE001
            n = repr(e)
        os.write(w, ("%s\n" % n).encode())
        os._exit(0)
    os.close(w)
    time.sleep(0.1)
    a.sendall(b"f" * 11)
    res = os.read(r, 100).decode().strip()
    os.waitpid(pid, 0)
    out("child read", res)
    os.close(r)
    ep.close()
    a.close()
    b.close()


def case_fork_shared_set():
    out("# a set made before fork, waited in by the child; the parent adds a new connection (helper 86)")
    ep = E.epoll()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        t0 = time.monotonic()
        evs = ep.poll(3)
        os.write(w, ("%d %s\n" % (len(evs), "late" if time.monotonic() - t0 > 1.5 else "")).encode())
        os._exit(0)
    os.close(w)
    a, b = smcapp.pair()
    ep.register(b.fileno(), E.EPOLLIN)
    for _ in range(3):
        ep.poll(0)
    time.sleep(0.2)
    a.sendall(b"x")
    for _ in range(3):
        ep.poll(0)
    res = os.read(r, 100).decode().strip()
    os.waitpid(pid, 0)
    os.close(r)
    out("child woke:", res)
    ep.close()
    a.close()
    b.close()


def case_threads():
    out("# two threads in one set")
    a, b = smcapp.pair()
    b.setblocking(False)
    ep = E.epoll()
    ep.register(b.fileno(), E.EPOLLIN)
    got = []

    def waiter():
        got.append(names(ep.poll(3), {b.fileno(): "b"}))

    ts = [threading.Thread(target=waiter) for _ in range(2)]
    for t in ts:
        t.start()
    time.sleep(0.2)
    a.sendall(b"m" * 8)
    time.sleep(0.3)
    out("woken within 0.3 s:", len(got) >= 1, got[:1])
    out("read", len(b.recv(100)))
    for t in ts:
        t.join()
    ep.close()
    a.close()
    b.close()


def case_thread_recv():
    out("# one thread loops in epoll_wait, another blocks in recv on the same connection")
    a, b = smcapp.pair()
    ep = E.epoll()
    ep.register(b.fileno(), E.EPOLLIN)
    stop = []

    def loop():
        # (each call sleeps in the kernel and watches again after waking; the
        # connection then stays watched during the sleep outside epoll)
        while not stop:
            ep.poll(0.001)
            time.sleep(0.002)

    t = threading.Thread(target=loop)
    t.start()
    time.sleep(0.1)
    res = []
    for k in range(10):
        if k < 5:
            b.settimeout(3)  # (Python polls, then reads)
        else:
            # a blocking recv(2), bounded by SO_RCVTIMEO
            b.settimeout(None)
            b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 3, 0))
        tm = threading.Timer(0.05, lambda: a.sendall(b"h" * 7))
        tm.start()
        t0 = time.monotonic()
        try:
            n = len(b.recv(100))
        except (socket.timeout, BlockingIOError):
            n = "timeout"
        tm.join()
        res.append("%s%s" % (n, " late" if time.monotonic() - t0 > 1 else ""))
    stop.append(1)
    t.join()
    out("recv:", " ".join(res))
    ep.close()
    a.close()
    b.close()


def case_cross_thread():
    out("# other threads change the set while one sleeps in it (helper 85's cases)")
    # a connection added to a set in which a thread already sleeps
    ep = E.epoll()
    got = []
    t = threading.Thread(target=lambda: got.append(ep.poll(5)))
    t.start()
    time.sleep(0.1)
    a, b = smcapp.pair()
    ep.register(b.fileno(), E.EPOLLIN)
    time.sleep(0.05)
    t0 = time.monotonic()
    a.sendall(b"1")
    t.join()
    out("added while asleep: woke", bool(got and got[0]), "late" if time.monotonic() - t0 > 1 else "")
    b.recv(10)
    # moved from a watched set into one where a thread sleeps
    ep1 = E.epoll()
    ep1.register(b.fileno(), E.EPOLLIN)
    ep1.poll(0.05)
    c, d = smcapp.pair()
    ep2 = E.epoll()
    ep2.register(d.fileno(), E.EPOLLIN)
    got = []
    t = threading.Thread(target=lambda: got.append(ep2.poll(5)))
    t.start()
    time.sleep(0.1)
    ep1.unregister(b.fileno())
    ep2.register(b.fileno(), E.EPOLLIN)
    time.sleep(0.05)
    t0 = time.monotonic()
    a.sendall(b"2")
    t.join()
    out("moved while asleep: woke", bool(got and got[0]), "late" if time.monotonic() - t0 > 1 else "")
    b.recv(10)
    # EPOLL_CTL_MOD from another thread while one waits and reads
    b.setblocking(False)
    ep3 = E.epoll()
    ep3.register(b.fileno(), E.EPOLLIN)
    stop, seen, slow = [], [0], [0]

    def waiter():
        while not stop:
            if ep3.poll(3):
                try:
                    seen[0] += len(b.recv(100))
                except BlockingIOError:
                    pass

    def modder():
        while not stop:
            ep3.modify(b.fileno(), E.EPOLLIN)

    ts = [threading.Thread(target=waiter), threading.Thread(target=modder)]
    for x in ts:
        x.start()
    for k in range(300):
        t0 = time.monotonic()
        a.sendall(b"m")
        while seen[0] < k + 1 and time.monotonic() - t0 < 5:
            time.sleep(0.0002)
        if time.monotonic() - t0 > 0.5:
            slow[0] += 1
    stop.append(1)
    a.sendall(b"e")
    for x in ts:
        x.join()
    out("MOD from another thread: 300 messages, late", slow[0])
    # a dup of a set that watched a connection with data waiting
    ep4 = E.epoll()
    ep4.register(b.fileno(), E.EPOLLIN)
    ep4.poll(0.05)
    a.sendall(b"dup")
    time.sleep(0.05)
    epd = E.epoll.fromfd(os.dup(ep4.fileno()))
    out("dup of the set:", len(epd.poll(W)), "event(s)")
    while True:
        try:
            b.recv(100)
        except BlockingIOError:
            break
    # fairness with maxevents 1: two busy connections both served
    conns = [smcapp.pair() for _ in range(2)]
    ep5 = E.epoll()
    for i, (x, y) in enumerate(conns):
        y.setblocking(False)
        ep5.register(y.fileno(), E.EPOLLIN)
    fds = {y.fileno(): i for i, (x, y) in enumerate(conns)}
    for x, y in conns:
        x.sendall(b"f" * 60000)
    count = [0, 0]
    for _ in range(20):
        for fd, ev in ep5.poll(W, 1):
            conns[fds[fd]][1].recv(1000)
            count[fds[fd]] += 1
    out("maxevents 1: both served:", min(count) >= 5)
    for e in (ep, ep1, ep2, ep3, ep4, epd, ep5):
        e.close()
    for x in (a, b, c, d):
        x.close()
    for x, y in conns:
        x.close()
        y.close()


def case_close():
    out("# the peer's close while watched")
    a, b = smcapp.pair()
    b.setblocking(False)
    ep = E.epoll()
    ep.register(b.fileno(), E.EPOLLIN | E.EPOLLRDHUP)
    fds = {b.fileno(): "b"}
    ep.poll(0.05)
    a.sendall(b"c" * 5)
    a.close()
    time.sleep(0.1)
    out("after close:", wait(ep, fds))
    out("read", len(b.recv(100)), len(b.recv(100)))
    ep.close()
    b.close()


def read_some(s, ev, r):
    try:
        return s.recv(65536)
    except BlockingIOError:
        return b""


def read_until_eagain(s, ev, r):
    d = b""
    if ev & E.EPOLLIN:
        while True:  # (until EAGAIN: an edge is not repeated)
            try:
                d += s.recv(1000 + r)
            except BlockingIOError:
                return d
    return d


def busy_rounds(ep, conns, srv, rounds, pick, size, shift, read, back, tag):
    """each round: odd-sized, numbered bytes to the connections pick(r) chose, read
    back through the set (read(s, ev, r) per event) and compared; then one message the
    other way on conns[back(busy)]. Returns (bad, stalls)."""
    bad = stalls = 0
    for r in range(rounds):
        busy = pick(r)
        want = {}
        for i in busy:
            data = bytes(((r * shift + i + j) & 0xFF) for j in range(size(r, i)))
            conns[i][0].sendall(data)
            want[i] = want.get(i, b"") + data
        got = {i: b"" for i in want}
        t0 = time.monotonic()
        while any(len(got[i]) < len(want[i]) for i in want):
            evs = ep.poll(W)
            if not evs:
                stalls += 1
                break
            for fd, ev in evs:
                i, s = srv[fd]
                got[i] = got.get(i, b"") + read(s, ev, r)
            if time.monotonic() - t0 > 5:
                stalls += 1
                break
        bad += sum(got.get(i) != want[i] for i in want)
        c, s = conns[back(busy)]
        s.sendall(b"%s%d" % (tag, r))
        c.settimeout(W)
        if c.recv(100) != b"%s%d" % (tag, r):
            bad += 1
    return bad, stalls


def case_many():
    out("# 40 connections, 10 busy, the rest idle, odd sizes checked")
    conns = [smcapp.pair() for _ in range(40)]
    ep = E.epoll()
    srv = {}
    for i, (c, s) in enumerate(conns):
        s.setblocking(False)
        ep.register(s.fileno(), E.EPOLLIN)
        srv[s.fileno()] = (i, s)
    rounds = 400
    bad, stalls = busy_rounds(ep, conns, srv, rounds, lambda r: [(r * 7 + k * 3) % 40 for k in range(10)],
                              lambda r, i: 1 + (r * 131 + i * 17) % 3000, 1, read_some, lambda busy: busy[0], b"ack")
    out("rounds", rounds, "bad", bad, "stalls", stalls)
    out("idle sets empty:", names(ep.poll(SHORT), {}))
    ep.close()
    for c, s in conns:
        c.close()
        s.close()


ET = E.EPOLLIN | E.EPOLLOUT | E.EPOLLRDHUP | E.EPOLLET  # nginx's registration


def drain(s):
    n = 0
    while True:
        try:
            d = s.recv(65536)
        except BlockingIOError:
            return n
        if not d:
            return "%d+eof" % n
        n += len(d)


def case_et(shared=False):
    out("# edge-triggered: one event per arrival, none for data already reported,",
        "a dup held (never watched)" if shared else "watched")
    a, b = smcapp.pair()
    b.setblocking(False)
    copy = b.dup() if shared else None
    ep = E.epoll()
    ep.register(b.fileno(), ET)
    fds = {b.fileno(): "b"}
    out("registered:", wait(ep, fds))
    out("idle:", wait(ep, fds, SHORT))
    for k in range(3):  # nginx: read until EAGAIN, then wait
        a.sendall(b"r" * (10 + k))
        out("request", k, wait(ep, fds), "read", drain(b))
        out("then:", wait(ep, fds, SHORT))
    a.sendall(b"p" * 100)
    out("partial:", wait(ep, fds), "read", len(b.recv(30)))
    out("no new data, no edge:", wait(ep, fds, SHORT))
    a.sendall(b"q" * 5)
    out("new data, edge:", wait(ep, fds), "read", drain(b))
    # an arrival while the waiter sleeps in the kernel
    tm = threading.Timer(0.1, lambda: a.sendall(b"s" * 3))
    tm.start()
    out("asleep:", wait(ep, fds), "read", drain(b))
    tm.join()
    # a partial read, then an arrival while the waiter sleeps: still an edge
    tm = threading.Timer(0.1, lambda: a.sendall(b"v" * 60))
    tm.start()
    out("asleep:", wait(ep, fds), "read", len(b.recv(20)))
    tm.join()
    tm = threading.Timer(0.1, lambda: a.sendall(b"w" * 6))
    tm.start()
    out("asleep, partly read before:", wait(ep, fds), "read", drain(b))
    tm.join()
    # MOD to level-triggered with data reported already: the kernel reports it again
    a.sendall(b"t" * 4)
    out("ET:", wait(ep, fds), "read", len(b.recv(1)))
    ep.modify(b.fileno(), E.EPOLLIN)
    out("LT:", wait(ep, fds), wait(ep, fds), "read", drain(b))
    ep.modify(b.fileno(), ET)
    out("ET again, empty:", wait(ep, fds))
    a.sendall(b"u")
    out("ET data:", wait(ep, fds), "read", drain(b))
    a.close()
    out("peer closed:", wait(ep, fds), "read", drain(b))
    # (one edge, as TCP's FIN: smcd, which learns of the close from its copy of Y, does
    # not shut Y's writing side again after the peer's library did)
    out("after close:", wait(ep, fds, SHORT))
    ep.close()
    b.close()
    if copy:
        copy.close()


def case_et_shared():
    case_et(shared=True)


def case_et_many():
    out("# 30 edge-triggered connections, read until EAGAIN, odd sizes checked")
    conns = [smcapp.pair() for _ in range(30)]
    ep = E.epoll()
    srv = {}
    for i, (c, s) in enumerate(conns):
        s.setblocking(False)
        ep.register(s.fileno(), ET)
        srv[s.fileno()] = (i, s)
    ep.poll(0.05)  # (EPOLLOUT of each)
    rounds = 300
    bad, stalls = busy_rounds(ep, conns, srv, rounds, lambda r: [(r * 11 + k * 7) % 30 for k in range(6)],
                              lambda r, i: 1 + (r * 173 + i * 29) % 5000, 3, read_until_eagain, lambda busy: busy[-1],
                              b"ok")
    out("rounds", rounds, "bad", bad, "stalls", stalls)
    ep.close()
    for c, s in conns:
        c.close()
        s.close()


def case_et_unread():
    out("# edge-triggered, data reported and left unread (or only peeked), then more: an edge (helper 87)")
    for pre, idle, dup, peek in ((300, 300, False, False), (0, 0, False, False), (300, 0, True, False),
                                 (300, 300, False, True), (0, 300, False, False)):
        a, b = smcapp.pair()
        b.setblocking(False)
        copy = b.dup() if dup else None
        ep = E.epoll()
        ep.register(b.fileno(), E.EPOLLIN | E.EPOLLET)
        fds = {b.fileno(): "b"}
        for _ in range(pre):  # (idle: no longer looked at, its writer rings)
            ep.poll(0)
        a.sendall(b"x" * 5)
        first = wait(ep, fds)
        if peek:
            b.recv(3, socket.MSG_PEEK)
        for _ in range(idle):
            ep.poll(0)
        a.sendall(b"y")
        out(pre, idle, "dup" if dup else "-", "peek" if peek else "-", "first:", first, "new data:", wait(ep, fds),
            "read", drain(b))
        ep.close()
        a.close()
        b.close()
        if copy:
            copy.close()


def case_fair():
    out("# maxevents smaller than the ready connections: every one gets its turn (helper 87)")
    for nc, mx, it, lt in ((6, 1, 30, False), (6, 1, 30, True), (20, 4, 50, False), (20, 19, 20, True)):
        conns = [smcapp.pair() for _ in range(nc)]
        ep = E.epoll()
        idx = {}
        for i, (a, b) in enumerate(conns):
            b.setblocking(False)
            ep.register(b.fileno(), E.EPOLLIN if lt else E.EPOLLIN | E.EPOLLET)
            idx[b.fileno()] = i
        for a, b in conns:
            a.sendall(b"x" * 100)
        served = [0] * nc
        for _ in range(it):
            for fd, ev in ep.poll(W, mx):
                i = idx[fd]
                served[i] += 1
                drain(conns[i][1])
                conns[i][0].sendall(b"y" * 100)  # (at once: its peer has not waited again)
        # (the kernel serves them in strict turn; the rings and the kernel take turns
        # here, so the shares differ a little: none may starve nor get double)
        fair = it * mx / nc
        out(nc, "connections, maxevents", mx, "LT" if lt else "ET", "every share within half and twice the fair one:",
            all(fair / 2 <= k <= fair * 2 for k in served), sum(served))
        ep.close()
        for a, b in conns:
            a.close()
            b.close()


def case_fork_rearm():
    out("# a child that exited (reaped, or a zombie): the parent's set watches again; one that",
        "forked a grandchild first: never (the grandchild waits in the set)")
    a, b = smcapp.pair()
    b.setblocking(False)
    ep = E.epoll()
    ep.register(b.fileno(), E.EPOLLIN)
    fds = {b.fileno(): "b"}
    for reap in (True, False):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        if reap:
            os.waitpid(pid, 0)
        else:
            time.sleep(0.1)  # (a zombie until the end of the round)
        for k in range(3):
            for _ in range(3):
                ep.poll(0.03)  # (the parent looks for gone children now and then)
            a.sendall(b"r" * (5 + k))
            out("reaped" if reap else "zombie", k, wait(ep, fds), "read", len(b.recv(100)), "then", wait(ep, fds, SHORT))
        if not reap:
            os.waitpid(pid, 0)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        if os.fork() == 0:
            os.close(r)
            ev = ep.poll(5)  # (the grandchild sleeps in the set it inherited)
            os.write(w, names(ev, fds).encode())
            os._exit(0)
        os._exit(0)
    os.waitpid(pid, 0)
    os.close(w)
    for _ in range(10):
        ep.poll(0.03)  # (the parent: its child is gone, the grandchild is not)
    a.sendall(b"g" * 3)
    out("grandchild:", os.read(r, 100).decode())
    os.close(r)
    out("parent:", wait(ep, fds), "read", len(b.recv(100)))
    ep.close()
    a.close()
    b.close()


def case_fair_mixed():
    out("# connections with data sent before the ADD, and always-ready pipes, small maxevents:",
        "no descriptor twice in one result, none starves (helper 88)")
    for lt in (True, False):
        conns = [smcapp.pair() for _ in range(2)]
        for c, s in conns:
            c.sendall(b"x" * 10)
        ep = E.epoll()
        fl = E.EPOLLIN if lt else E.EPOLLIN | E.EPOLLET
        for i, (c, s) in enumerate(conns):
            s.setblocking(False)
            ep.register(s.fileno(), fl)
        r1 = ep.poll(W, 1)
        r2 = ep.poll(W, 3)
        out("LT" if lt else "ET", "max 1:", len(r1), "max 3:", len(r2), "distinct:", len(set(fd for fd, _ in r2)))
        ep.close()
        for c, s in conns:
            c.close()
            s.close()
    conns = [smcapp.pair() for _ in range(2)]
    rp, wp = os.pipe()
    os.write(wp, b"p")
    ep = E.epoll()
    name = {rp: "pipe"}
    for i, (c, s) in enumerate(conns):
        s.setblocking(False)
        c.sendall(b"y" * 10)
        ep.register(s.fileno(), E.EPOLLIN)
        name[s.fileno()] = "c%d" % i
    ep.register(rp, E.EPOLLIN)
    served = {n: 0 for n in name.values()}
    dups = 0
    for _ in range(60):
        r = ep.poll(W, 1 + _ % 2)
        dups += len(r) != len(set(fd for fd, _ in r))
        for fd, _ in r:
            served[name[fd]] += 1
    out("pipe and 2 LT connections, maxevents 1 and 2:", "duplicates", dups, "every one served at least a fifth:",
        all(k >= sum(served.values()) / 5 for k in served.values()))
    ep.close()
    os.close(rp)
    os.close(wp)
    for c, s in conns:
        c.close()
        s.close()


for f in (case_lt_partial, case_in_out, case_other_waits, case_select_zero, case_ctypes_waits, case_mod_et, case_mod_oneshot, case_del_add,
          case_set_polled, case_nested_et, case_fork, case_fork_shared_set, case_threads, case_thread_recv, case_cross_thread, case_close, case_many,
          case_et, case_et_shared, case_et_many, case_et_unread, case_fair,
          case_fair_mixed, case_fork_rearm):
    f()
out("done")
