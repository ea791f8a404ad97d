#!/usr/bin/env python3
# shutdown(SHUT_RDWR) wakes a thread already waiting in epoll_wait once, with EPOLLHUP
# (and EPOLLIN, EPOLLRDHUP), as TCP's: 30 times, on either end of the connection.
# Before, the read side's shutdown of the socket pair woke the waiter first, and it
# could return with EPOLLIN|EPOLLRDHUP only (helper 113: 3 of 5; 2-4 of 30 here).
# Prints one line; exit status 0 only if all that held.
import select
import socket
import sys
import threading
import time


def pair():
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    c = socket.create_connection(ls.getsockname())
    a, _ = ls.accept()
    ls.close()
    return c, a


def main():
    n, hup = 30, 0
    for i in range(n):
        c, a = pair()
        s = c if i % 2 else a
        ep = select.epoll()
        ep.register(s.fileno(), select.EPOLLIN | select.EPOLLRDHUP)
        out = []
        t = threading.Thread(target=lambda: out.append(ep.poll(5)))
        t.start()
        time.sleep(0.05)
        s.shutdown(socket.SHUT_RDWR)
        t.join()
        ev = out[0][0][1] if out and out[0] else 0
        hup += bool(ev & select.EPOLLHUP) and bool(ev & select.EPOLLIN) and bool(ev & select.EPOLLRDHUP)
        ep.close()
        c.close()
        a.close()
    if hup != n:
        print("shutdown-wake: EPOLLIN|EPOLLRDHUP|EPOLLHUP in the first wakeup %d of %d times" % (hup, n))
        return 1
    print("shutdown-wake: shutdown(SHUT_RDWR) woke the epoll waiter with EPOLLHUP at once, %d of %d" % (hup, n))
    return 0


if __name__ == "__main__":
    sys.exit(main())
