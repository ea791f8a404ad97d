#!/usr/bin/env python3
# connect(2) with AF_UNSPEC on a connected socket, under smcrun as over TCP (Linux's
# tcp_disconnect(): the connection is reset, the socket stays, unconnected):
#  1. client side, data unread on both sides: connect(AF_UNSPEC) returns 0; the peer's
#     recv gets ECONNRESET; SO_ERROR is ECONNRESET once; poll gives
#     POLLOUT|POLLERR|POLLHUP, then recv ENOTCONN, send EPIPE, shutdown ENOTCONN,
#     getpeername ENOTCONN; the options set before stay (TCP_NODELAY, SO_KEEPALIVE);
#     a second connect(AF_UNSPEC) returns 0; connect() again gives a working connection
#     (SMC-D again under smcrun).
#  2. server side (an accepted socket): the same; the client reads what was sent
#     before, then ECONNRESET.
#  3. a blocking receive in another thread ends (EPIPE, as TCP's).
#  4. a nonblocking socket stays nonblocking: its new connect says EINPROGRESS.
#  5. an address shorter than sa_family: EINVAL.
# Prints one line; exit status 0 only if every case held.
# SMC_EXPECT=1: every connection (before and after) must be SMC-D.
import ctypes
import errno
import os
import select
import socket
import struct
import sys
import threading
import time

fails = []
expect_smc = os.environ.get("SMC_EXPECT") == "1"
libc = ctypes.CDLL(None, use_errno=True)


def check(what, got, want):
    if got != want:
        fails.append("%s: got %r, want %r" % (what, got, want))


def smc_check(what, *socks):
    if expect_smc:
        for x in socks:
            if x.getsockopt(286, 0x5301) != 1:
                fails.append("%s: not SMC-D" % what)


def unspec(sock, alen=16):
    addr = struct.pack("H", socket.AF_UNSPEC) + bytes(14)
    r = libc.connect(sock.fileno(), ctypes.c_char_p(addr), alen)
    return 0 if r == 0 else ctypes.get_errno()


def err(fn):
    try:
        fn()
        return 0
    except OSError as e:
        return e.errno


ls = socket.socket()
ls.bind(("127.0.0.1", 0))
ls.listen(8)


def pair():
    c = socket.socket()
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    c.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    c.connect(ls.getsockname())
    s, _ = ls.accept()
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    smc_check("pair", c, s)
    return c, s


def after_disconnect(what, a, b, unread=None):
    check(what + " connect(AF_UNSPEC)", unspec(a), 0)
    if unread:
        check(what + " peer reads what was sent before", b.recv(100), unread)
    check(what + " peer recv", err(lambda: b.recv(10)), errno.ECONNRESET)
    p = select.poll()
    p.register(a, select.POLLIN | select.POLLOUT)
    check(what + " poll", p.poll(0), [(a.fileno(), select.POLLOUT | select.POLLERR | select.POLLHUP)])
    check(what + " SO_ERROR", a.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR), errno.ECONNRESET)
    check(what + " SO_ERROR again", a.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR), 0)
    check(what + " recv", err(lambda: a.recv(10)), errno.ENOTCONN)
    check(what + " send", err(lambda: a.send(b"x", socket.MSG_NOSIGNAL)), errno.EPIPE)
    check(what + " shutdown", err(lambda: a.shutdown(socket.SHUT_WR)), errno.ENOTCONN)
    check(what + " getpeername", err(lambda: a.getpeername()), errno.ENOTCONN)
    check(what + " second connect(AF_UNSPEC)", unspec(a), 0)
    check(what + " TCP_NODELAY kept", a.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0, True)
    check(what + " SO_KEEPALIVE kept", a.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) != 0, True)
    # connect again: a new connection, working
    a.connect(ls.getsockname())
    s2, _ = ls.accept()
    smc_check(what + " reconnect", a, s2)
    a.sendall(b"again")
    check(what + " reconnect data", s2.recv(10), b"again")
    s2.sendall(b"back")
    check(what + " reconnect data back", a.recv(10), b"back")
    s2.close()
    a.close()
    b.close()


# 1. client side
c, s = pair()
c.sendall(b"hello")
s.sendall(b"unread")
check("1 data", s.recv(10), b"hello")
time.sleep(0.05)
after_disconnect("1", c, s)

# 2. server side
c, s = pair()
s.sendall(b"unread")
after_disconnect("2", s, c, b"unread")

# 3. a blocking receive in another thread
c, s = pair()
got = []


def reader():
    got.append(err(lambda: c.recv(10)))


t = threading.Thread(target=reader)
t.start()
time.sleep(0.2)
check("3 connect(AF_UNSPEC)", unspec(c), 0)
t.join(5)
check("3 reader ended", t.is_alive(), False)
check("3 reader", got, [errno.EPIPE])
check("3 peer recv", err(lambda: s.recv(10)), errno.ECONNRESET)
c.close()
s.close()

# 4. nonblocking
c, s = pair()
c.setblocking(False)
check("4 connect(AF_UNSPEC)", unspec(c), 0)
r = c.connect_ex(ls.getsockname())
check("4 connect again", r in (0, errno.EINPROGRESS), True)
select.select([], [c], [], 5)
check("4 SO_ERROR", c.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR), 0)
s2, _ = ls.accept()
c.send(b"nb")
s2.settimeout(5)
check("4 data", s2.recv(10), b"nb")
for x in (c, s, s2):
    x.close()

# 5. too short an address
c, s = pair()
check("5 connect(1 byte)", unspec(c, 1), errno.EINVAL)
c.sendall(b"still")
check("5 still connected", s.recv(10), b"still")
c.close()
s.close()

ls.close()
if fails:
    print("disconnect: FAIL: " + "; ".join(fails))
    sys.exit(1)
print("disconnect: connect(AF_UNSPEC) resets and leaves an unconnected socket that connects again (client, server, "
      "a blocked reader, nonblocking)")
