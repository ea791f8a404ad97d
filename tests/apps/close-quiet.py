#!/usr/bin/env python3
# Once both directions of a connection are shut (both FINs went, in either order),
# the peer's close sends nothing on TCP (TIME_WAIT / LAST_ACK): the surviving socket
# gets no new epoll edge and no SIGIO (O_ASYNC). Checked for a plain close and for
# the last close of a copy a forked child held. Before, the close shut the doorbell
# pair again and queued a byte on it: one more edge and a SIGIO (helper 113: a Python
# program whose SIGIO handler was reset died at exit with status 157).
# Prints one line; exit status 0 only if all that held.
import fcntl
import os
import select
import signal
import socket
import sys
import time

sigs = []


def pair():
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    b = socket.create_connection(ls.getsockname())
    a, _ = ls.accept()
    ls.close()
    return a, b


def mode(s):
    try:
        return {1: "SMC-D", 2: "TCP"}.get(s.getsockopt(286, 0x5301), "?")
    except OSError:
        return "TCP"


def case(order, fork):
    a, b = pair()
    m = mode(a)
    first, second = (b, a) if order == "b-first" else (a, b)
    first.shutdown(socket.SHUT_WR)
    assert second.recv(10) == b""
    second.shutdown(socket.SHUT_WR)
    assert first.recv(10) == b""
    time.sleep(0.05)
    fcntl.fcntl(a.fileno(), fcntl.F_SETOWN, os.getpid())
    fcntl.fcntl(a.fileno(), fcntl.F_SETFL, fcntl.fcntl(a.fileno(), fcntl.F_GETFL) | os.O_ASYNC)
    ep = select.epoll()
    ep.register(a.fileno(), select.EPOLLIN | select.EPOLLOUT | select.EPOLLRDHUP | select.EPOLLET)
    ev0 = ep.poll(1)
    del sigs[:]
    if fork:
        pid = os.fork()
        if pid == 0:
            time.sleep(0.2)
            os._exit(0)
        b.close()
        os.waitpid(pid, 0)
    else:
        b.close()
    time.sleep(0.2)
    ev1 = ep.poll(0.1)
    n = len(sigs)
    fcntl.fcntl(a.fileno(), fcntl.F_SETFL, fcntl.fcntl(a.fileno(), fcntl.F_GETFL) & ~os.O_ASYNC)
    ep.close()
    a.close()
    ok = len(ev0) == 1 and ev0[0][1] & select.EPOLLHUP and not ev1 and n == 0
    return ok, m, f"{order}{' fork' if fork else ''}: {m}, before {ev0}, after the close {ev1}, SIGIO {n}"


def main():
    signal.signal(signal.SIGIO, lambda *a: sigs.append(1))
    bad, modes = [], set()
    for order in ("b-first", "a-first"):
        for fork in (False, True):
            ok, m, what = case(order, fork)
            modes.add(m)
            if not ok:
                bad.append(what)
    want = os.environ.get("CLOSE_QUIET_MODE", "SMC-D" if os.environ.get("LD_PRELOAD") else "TCP")
    if bad or modes != {want}:
        print("close-quiet: %s (modes %s, want %s)" % ("; ".join(bad) or "all quiet", sorted(modes), want))
        return 1
    print("close-quiet: after both FINs the peer's close gave no edge and no SIGIO, 4 cases, %s" % want)
    return 0


if __name__ == "__main__":
    sys.exit(main())
