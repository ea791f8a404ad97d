#!/usr/bin/env python3
# A socket added to epoll sets before connect(), as nginx adds its upstream
# connections: the sets report the connection's events afterwards, as over TCP.
# Under smcrun the connection's descriptor changes underneath at connect(); before
# the library moved the registrations, they stayed on the hidden TCP socket, which
# never became readable: nginx's proxy_pass hung on every request.
#  1. edge-triggered, nonblocking connect: EPOLLOUT once connected, then EPOLLIN
#     with the answer.
#  2. level-triggered, blocking connect: EPOLLIN with the answer, and none after it
#     was read.
#  3. two sets, one changed with EPOLL_CTL_MOD before connect() (EPOLLIN only, other
#     data): both report the answer with their own data.
#  4. added and removed again before connect(): the set reports nothing.
#  5. EPOLLONESHOT: one report, then none until EPOLL_CTL_MOD re-arms it.
#  6. nginx's way of reading with EPOLLRDHUP: after an edge, FIONREAD says how much
#     is there; read exactly that much, then wait for the next edge. 4 MiB + 5 from a
#     writer that keeps the buffer from ever running empty: every byte arrives (TCP
#     gives an edge per arrival; the ring stalled here before: nginx's proxy_pass hung
#     on large bodies).
# Prints one line; exit status 0 only if every case held.
import array
import fcntl
import select
import socket
import sys
import termios
import threading

from streams import listener

E = select


def upper_server():
    ls, addr = listener()

    def serve():
        while True:
            try:
                c, _ = ls.accept()
            except OSError:
                return
            data = c.recv(64)
            c.sendall(data.upper())
            c.close()

    threading.Thread(target=serve, daemon=True).start()
    return ls, addr


def events(ep, timeout=2.0):
    return {fd: ev for fd, ev in ep.poll(timeout)}


def case_edge(addr):
    s = socket.socket()
    s.setblocking(False)
    ep = E.epoll()
    ep.register(s.fileno(), E.EPOLLIN | E.EPOLLOUT | E.EPOLLET)
    s.connect_ex(addr)
    ok = events(ep).get(s.fileno(), 0) & E.EPOLLOUT != 0
    s.send(b"edge")
    got = 0
    for _ in range(3):
        got |= events(ep).get(s.fileno(), 0)
        if got & E.EPOLLIN:
            break
    ok = ok and got & E.EPOLLIN != 0 and s.recv(64) == b"EDGE"
    s.close()
    ep.close()
    return ok, "edge-triggered"


def case_level(addr):
    s = socket.socket()
    ep = E.epoll()
    ep.register(s.fileno(), E.EPOLLIN)
    s.connect(addr)
    s.sendall(b"level")
    ok = events(ep).get(s.fileno(), 0) & E.EPOLLIN != 0 and s.recv(64) == b"LEVEL"
    # at end of stream EPOLLIN stays (TCP: readable, recv gives b"")
    ok = ok and s.recv(64) == b""
    s.close()
    ep.close()
    return ok, "level-triggered"


def case_two_sets_mod(addr):
    s = socket.socket()
    a, b = E.epoll(), E.epoll()
    a.register(s.fileno(), E.EPOLLIN | E.EPOLLOUT)
    b.register(s.fileno(), E.EPOLLOUT)
    b.modify(s.fileno(), E.EPOLLIN)
    s.connect(addr)
    ok = events(b, 0.2) == {}  # connected, nothing to read yet: b asks for EPOLLIN only
    s.sendall(b"two")
    eb = events(b)  # (EPOLLIN only: waits for the answer)
    ea = events(a)
    ok = ok and ea.get(s.fileno(), 0) & E.EPOLLIN != 0 and eb.get(s.fileno(), 0) == E.EPOLLIN
    ok = ok and s.recv(64) == b"TWO"
    s.close()
    a.close()
    b.close()
    return ok, "two-sets-and-mod"


def case_removed(addr):
    s = socket.socket()
    ep = E.epoll()
    ep.register(s.fileno(), E.EPOLLIN | E.EPOLLOUT)
    ep.unregister(s.fileno())
    s.connect(addr)
    s.sendall(b"gone")
    ok = events(ep, 0.5) == {}
    ok = ok and s.recv(64) == b"GONE"
    s.close()
    ep.close()
    return ok, "removed-before-connect"


def case_oneshot(addr):
    s = socket.socket()
    ep = E.epoll()
    ep.register(s.fileno(), E.EPOLLIN | E.EPOLLONESHOT)
    s.connect(addr)
    s.sendall(b"once")
    ok = events(ep).get(s.fileno(), 0) & E.EPOLLIN != 0
    ok = ok and events(ep, 0.3) == {}  # disarmed, data still unread
    ep.modify(s.fileno(), E.EPOLLIN | E.EPOLLONESHOT)
    ok = ok and events(ep).get(s.fileno(), 0) & E.EPOLLIN != 0 and s.recv(64) == b"ONCE"
    s.close()
    ep.close()
    return ok, "oneshot"


def case_fionread_countdown(addr):
    ls, a2 = listener()
    total = (4 << 20) + 5

    def writer():
        c, _ = ls.accept()
        chunk = b"z" * 65536
        left = total
        while left > 0:
            n = c.send(chunk[:min(left, len(chunk))])
            left -= n
        c.close()

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    s = socket.create_connection(a2)
    s.setblocking(False)
    ep = E.epoll()
    ep.register(s.fileno(), E.EPOLLIN | E.EPOLLRDHUP | E.EPOLLET)
    got, eof, ok = 0, False, True
    while not eof:
        ev = events(ep, 5.0)
        if not ev:
            ok = False  # stalled
            break
        avail = array.array("i", [0])
        fcntl.ioctl(s.fileno(), termios.FIONREAD, avail)
        n = avail[0]
        if ev.get(s.fileno(), 0) & E.EPOLLRDHUP:
            n = total + 1  # (nginx's pending_eof: read on to the end of stream)
        while n > 0:
            try:
                b = s.recv(min(n, 16384))
            except BlockingIOError:
                break
            if not b:
                eof = True
                break
            got += len(b)
            n -= len(b)
    t.join(5)
    s.close()
    ep.close()
    ls.close()
    if not (ok and got == total):
        print("fionread-countdown: got %d of %d, stalled %s" % (got, total, not ok), file=sys.stderr)
    return ok and got == total, "fionread-countdown"


def main():
    ls, addr = upper_server()
    results = [case(addr) for case in (case_edge, case_level, case_two_sets_mod, case_removed, case_oneshot,
                                         case_fionread_countdown)]
    ls.close()
    bad = [name for ok, name in results if not ok]
    print("%d epoll-before-connect cases, failed: %s" % (len(results), ", ".join(bad) or "none"))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
