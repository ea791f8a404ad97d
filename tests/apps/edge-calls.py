#!/usr/bin/env python3
# Calls at the edges, printed as a transcript that test-smcrun-apps.sh compares line by
# line with TCP's (found by a differential tester; each differed before its fix):
#  1. zero-length receives through libc (recv, recvfrom, recvmsg with no or only empty
#     vectors, MSG_DONTWAIT or a nonblocking socket): EAGAIN with nothing to read, 0
#     with data (none taken), 0 at EOF, ECONNRESET after a reset; a blocking one waits
#     for data, then says 0 (it said 0 at once, as at EOF); read(2) and readv(2) of
#     zero bytes say 0 at once (the kernel does not look at the socket).
#  2. splice from a connection into a full pipe whose write end is O_NONBLOCK:
#     EAGAIN (it waited for room for good), then the bytes once there is room.
#  3. splice with an offset: ESPIPE for the pipe's, EINVAL for the socket's, EINVAL
#     when the other end is no pipe (a file) whatever the offsets.
#  4. EPOLLOUT after our own shutdown(SHUT_WR) on a connection whose peer's ring (or
#     TCP's buffers) we filled, the peer not reading: level- and edge-triggered epoll
#     and poll report it at once (a plug in the doorbell socket kept it away), and the
#     next send fails with EPIPE.
#  5. a blocking zero-length receive that SO_RCVTIMEO ends: 0 (it said EAGAIN).
#  6. writev/readv with only empty vectors after our SHUT_WR or the peer's reset: 0,
#     and the reset stays pending in SO_ERROR (they sent EPIPE, or took the reset).
#  7. TCP_INFO's state after shutdown(SHUT_RDWR) through a dup: FIN_WAIT2 for the
#     original too (it said ESTABLISHED: the flag was the copy's own).
#  8. SIOCOUTQ through the original after a dup sent: the same as through the dup
#     (the original said 0: its own cursor was stale).
# SMC_EXPECT=1: every connection must be SMC-D.
import ctypes
import errno
import fcntl
import os
import socket
import struct
import sys
import tempfile
import termios
import threading
import time

import smcapp

libc = ctypes.CDLL(None, use_errno=True)
buf = ctypes.create_string_buffer(16)


def out(*a):
    print(*a, flush=True)


def res(r):
    if r < 0:
        return errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
    return str(r)


class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class msghdr(ctypes.Structure):
    _fields_ = [("name", ctypes.c_void_p), ("namelen", ctypes.c_uint32), ("iov", ctypes.POINTER(iovec)),
                ("iovlen", ctypes.c_size_t), ("control", ctypes.c_void_p), ("controllen", ctypes.c_size_t),
                ("flags", ctypes.c_int)]


def zero_calls(fd, flags):
    iovs = (iovec * 2)((ctypes.cast(buf, ctypes.c_void_p).value, 0), (None, 0))
    m0 = msghdr(None, 0, None, 0, None, 0, 0)
    m2 = msghdr(None, 0, iovs, 2, None, 0, 0)
    return [("recv", res(libc.recv(fd, buf, 0, flags))),
            ("recv NULL", res(libc.recv(fd, None, 0, flags))),
            ("recvfrom", res(libc.recvfrom(fd, buf, 0, flags, None, None))),
            ("recvmsg no iov", res(libc.recvmsg(fd, ctypes.byref(m0), flags))),
            ("recvmsg 2 empty", res(libc.recvmsg(fd, ctypes.byref(m2), flags)))]


def case1():
    out("case 1: zero-length receives")
    c, s = smcapp.pair()
    fd = s.fileno()
    for name, r in zero_calls(fd, socket.MSG_DONTWAIT):
        out("  nothing to read, %s MSG_DONTWAIT: %s" % (name, r))
    s.setblocking(False)
    out("  nothing to read, nonblocking socket, recv: %s" % res(libc.recv(fd, buf, 0, 0)))
    out("  read 0: %s, readv 0: %s" % (res(libc.read(fd, buf, 0)), res(libc.readv(fd, None, 0))))
    s.setblocking(True)
    out("  blocking, read 0: %s" % res(libc.read(fd, buf, 0)))
    threading.Timer(0.3, lambda: c.send(b"x")).start()
    t = time.monotonic()
    r = libc.recv(fd, buf, 0, 0)
    out("  blocking recv 0, data 0.3 s later: %s, %s" % (res(r), "waited" if time.monotonic() - t > 0.2 else "at once"))
    for name, r in zero_calls(fd, socket.MSG_DONTWAIT):
        out("  1 byte there, %s: %s" % (name, r))
    out("  then recv(16): %r" % s.recv(16))
    c.shutdown(socket.SHUT_WR)
    time.sleep(0.1)
    for name, r in zero_calls(fd, 0):
        out("  at EOF, blocking %s: %s" % (name, r))
    c.close()
    s.close()
    c, s = smcapp.pair()
    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    c.close()
    time.sleep(0.1)
    out("  after a reset, recv 0: %s, then: %s" % (res(libc.recv(s.fileno(), buf, 0, 0)),
                                                   res(libc.recv(s.fileno(), buf, 0, 0))))
    s.close()


def fill_pipe(pw):
    try:
        while True:
            os.write(pw, b"f" * 4096)
    except BlockingIOError:
        pass


def case2():
    out("case 2: splice into a full O_NONBLOCK pipe")
    for sock_nb in (False, True):
        c, s = smcapp.pair()
        pr, pw = os.pipe()
        os.set_blocking(pw, False)
        fill_pipe(pw)
        c.send(b"q" * 100)
        time.sleep(0.1)
        s.setblocking(not sock_nb)
        try:
            r = str(os.splice(s.fileno(), pw, 100))
        except OSError as e:
            r = errno.errorcode.get(e.errno, str(e.errno))
        os.set_blocking(pr, False)
        try:
            while os.read(pr, 1 << 20):
                pass
        except BlockingIOError:
            pass
        out("  %s socket: %s, then with room: %d" % ("nonblocking" if sock_nb else "blocking", r,
                                                   os.splice(s.fileno(), pw, 100)))
        for f in (pr, pw):
            os.close(f)
        c.close()
        s.close()


def case3():
    out("case 3: splice offsets")
    c, s = smcapp.pair()
    pr, pw = os.pipe()
    f = tempfile.TemporaryFile()
    f.write(b"z" * 100)
    f.flush()
    c.send(b"q" * 10)
    time.sleep(0.1)
    tries = [("socket -> pipe, offset_src", lambda: os.splice(s.fileno(), pw, 10, offset_src=0)),
             ("socket -> pipe, offset_dst", lambda: os.splice(s.fileno(), pw, 10, offset_dst=0)),
             ("socket -> pipe, both", lambda: os.splice(s.fileno(), pw, 10, offset_src=0, offset_dst=0)),
             ("pipe -> socket, offset_src", lambda: os.splice(pr, c.fileno(), 10, offset_src=0)),
             ("pipe -> socket, offset_dst", lambda: os.splice(pr, c.fileno(), 10, offset_dst=0)),
             ("file -> socket, offset_src", lambda: os.splice(f.fileno(), c.fileno(), 10, offset_src=0)),
             ("file -> socket", lambda: os.splice(f.fileno(), c.fileno(), 10)),
             ("socket -> file, offset_dst", lambda: os.splice(s.fileno(), f.fileno(), 10, offset_dst=0)),
             ("socket -> socket", lambda: os.splice(s.fileno(), c.fileno(), 10))]
    for name, fn in tries:
        try:
            r = str(fn())
        except OSError as e:
            r = errno.errorcode.get(e.errno, str(e.errno))
        out("  %s: %s" % (name, r))
    out("  then recv: %r" % s.recv(100))
    for x in (pr, pw):
        os.close(x)
    f.close()
    c.close()
    s.close()


def case4():
    import select
    out("4. EPOLLOUT after our own SHUT_WR, the peer's buffers full")
    for how in ("epoll", "epoll-et", "poll"):
        c, s = smcapp.pair()
        s.setblocking(False)
        n = 0
        try:
            while True:
                n += s.send(b"x" * 65536)
        except BlockingIOError:
            pass
        ep = select.epoll()
        ep.register(s.fileno(), select.EPOLLOUT | (select.EPOLLET if how == "epoll-et" else 0))
        before = ep.poll(0)
        s.shutdown(socket.SHUT_WR)
        if how == "poll":
            p = select.poll()
            p.register(s.fileno(), select.POLLOUT)
            after = [e for _, e in p.poll(2000)]
        else:
            after = [e for _, e in ep.poll(2)]
        try:
            s.send(b"y")
            sr = "sent"
        except OSError as e:
            sr = errno.errorcode.get(e.errno, str(e.errno))
        out("  %s: filled (%s), before the shutdown %s, after it %s, then send: %s" %
            (how, n > 0, [e for _, e in before], after, sr))
        ep.close()
        c.close()
        s.close()


def case5():
    out("5. a blocking zero-length receive whose SO_RCVTIMEO ends the wait: 0, as TCP's")
    c, s = smcapp.pair()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 0, 50000))
    for name, r in zero_calls(s.fileno(), 0):
        out("  nothing to read, blocking, %s: %s" % (name, r))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 0, 0))
    c.close()
    s.close()


def case6():
    out("6. writev/readv with only empty vectors: 0, the socket's state and error untouched")
    for state in ("own SHUT_WR", "peer reset"):
        c, s = smcapp.pair()
        if state == "own SHUT_WR":
            s.shutdown(socket.SHUT_WR)
        else:
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            c.close()
        time.sleep(0.05)
        iovs = (iovec * 2)((ctypes.cast(buf, ctypes.c_void_p).value, 0), (None, 0))
        w = res(libc.writev(s.fileno(), iovs, 2))
        r = res(libc.readv(s.fileno(), iovs, 2))
        w0 = res(libc.writev(s.fileno(), None, 0))
        out("  %s: writev %s, readv %s, writev of none %s; then SO_ERROR %d" %
            (state, w, r, w0, s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)))
        if state == "own SHUT_WR":
            c.close()
        s.close()


def case7():
    out("7. TCP_INFO's state after shutdown(SHUT_RDWR) through a dup: for the original too")
    c, s = smcapp.pair()
    d = s.dup()
    d.shutdown(socket.SHUT_RDWR)
    time.sleep(0.05)  # (TCP: the FIN's ACK)
    states = {1: "ESTABLISHED", 4: "FIN_WAIT1", 5: "FIN_WAIT2", 7: "CLOSE", 8: "CLOSE_WAIT"}
    st = [states.get(x.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)[0], "?") for x in (s, d, c)]
    out("  the original %s, the dup %s, the peer %s" % tuple(st))
    d.close()
    s.close()
    c.close()


def outq(sock):
    b = bytearray(4)
    fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b)  # (= SIOCOUTQ)
    return struct.unpack("i", b)[0]


def case8():
    out("8. SIOCOUTQ through the original and a dup after the dup sent (one socket, one queue)")
    c, s = smcapp.pair()
    d = s.dup()
    d.send(b"x" * 1000)
    time.sleep(0.05)
    out("  1000 bytes unread: the same through both: %s" % (outq(s) == outq(d)))
    d.setblocking(False)
    try:
        while True:
            d.send(b"x" * 65536)
    except BlockingIOError:
        pass
    time.sleep(0.05)
    out("  the peer's buffer full: the same through both: %s, more than 0: %s" % (outq(s) == outq(d), outq(s) > 0))
    c.setblocking(False)
    try:
        while True:
            if not c.recv(1 << 20):
                break
    except BlockingIOError:
        pass
    time.sleep(0.05)
    try:
        while c.recv(1 << 20):
            pass
    except BlockingIOError:
        pass
    time.sleep(0.05)
    out("  all read: the original %d, the dup %d" % (outq(s), outq(d)))
    d.close()
    s.close()
    c.close()


for fn in (case1, case2, case3, case4, case5, case6, case7, case8):
    fn()
sys.exit(0)
