#!/usr/bin/env python3
# Duplicates of a connection (dup, dup2, dup3, F_DUPFD_CLOEXEC) under smcrun, as over
# TCP: every copy is the same connection; it ends at the last copy's close.
#  1. dup(2): write through the copy, read through the original; close the original,
#     go on through the copy; then close it: the peer reads every byte, then EOF.
#  2. dup2(2) onto another number, F_DUPFD_CLOEXEC: the same, in a chain.
#  3. A reader thread on one copy and a writer thread on another, at once (1 MiB each
#     way, checked).
#  4. A duplicate of a listener accepts, its connections with the listener's options
#     (SO_KEEPALIVE, TCP_KEEPIDLE); closing the original listener leaves the copy
#     listening.
#  5. dup2 onto the number of another connection: that one is closed (its peer reads
#     EOF), the number is now the first connection.
#  6. O_NONBLOCK is the open file's flag, shared by the copies: set through one copy
#     (F_SETFL, FIONBIO), a read, a send into a full ring and an accept through another
#     copy (dup, or after fork) return EAGAIN instead of blocking; made blocking again
#     through one copy, a read through the other waits for data.
#  7. TCP_NODELAY and TCP_CORK set through one copy read back through the other.
#  8. SO_RCVLOWAT set in a forked child reads back in the parent (capped as TCP's);
#     SIOCGSTAMP on an accepted connection: ENOENT, as TCP.
# Prints one line; exit status 0 only if every case held.
import errno
import fcntl
import hashlib
import os
import socket
import struct
import sys
import termios
import threading

from streams import expect_eof as eof, pair, recv_all








def case_dup():
    c, s = pair()
    d = socket.socket(fileno=os.dup(c.fileno()))
    d.sendall(b"one")
    s.sendall(b"two")
    ok = recv_all(s, 3) == b"one" and recv_all(c, 3) == b"two"
    c.close()  # the copy goes on
    d.sendall(b"three")
    s.sendall(b"four")
    ok = ok and recv_all(s, 5) == b"three" and recv_all(d, 4) == b"four"
    d.close()  # the last copy
    ok = ok and eof(s)
    s.close()
    return ok, "dup"


def case_dup2_chain():
    c, s = pair()
    n = os.dup2(c.fileno(), 200)
    m = fcntl.fcntl(n, fcntl.F_DUPFD_CLOEXEC, 300)
    ok = n == 200 and m >= 300 and (fcntl.fcntl(m, fcntl.F_GETFD) & fcntl.FD_CLOEXEC) != 0
    c.close()
    os.write(n, b"x" * 1000)
    os.close(n)
    os.write(m, b"y" * 1000)
    ok = ok and recv_all(s, 2000) == b"x" * 1000 + b"y" * 1000
    s.sendall(b"back")
    ok = ok and os.read(m, 4) == b"back"
    os.close(m)
    ok = ok and eof(s)
    s.close()
    return ok, "dup2-chain"


def case_threads():
    c, s = pair()
    d = socket.socket(fileno=os.dup(c.fileno()))
    out = os.urandom(1 << 20)
    back = os.urandom(1 << 20)
    got = {}

    def reader():
        got["c"] = recv_all(c, len(back))

    def writer():
        d.sendall(out)

    def peer():
        got["s"] = recv_all(s, len(out))

    ts = [threading.Thread(target=f) for f in (reader, writer, peer)]
    for t in ts:
        t.start()
    s.sendall(back)
    for t in ts:
        t.join()
    ok = hashlib.sha256(got["c"]).digest() == hashlib.sha256(back).digest() and got["s"] == out
    c.close()
    d.close()
    ok = ok and eof(s)
    s.close()
    return ok, "reader-and-writer-copies"


def case_listener():
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    ls.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 77)
    ls.bind(("127.0.0.1", 0))
    ls.listen(8)
    addr = ls.getsockname()
    ld = socket.socket(fileno=os.dup(ls.fileno()))
    c1 = socket.create_connection(addr)
    s1, _ = ld.accept()
    ls.close()
    c2 = socket.create_connection(addr)
    s2, _ = ld.accept()
    c1.sendall(b"a")
    c2.sendall(b"b")
    ok = s1.recv(1) == b"a" and s2.recv(1) == b"b"
    # the listener's options, inherited through the copy as from the original
    for x in (s1, s2):
        ok = ok and x.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) != 0
        ok = ok and x.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 77
    for x in (c1, c2, s1, s2, ld):
        x.close()
    return ok, "listener-copy"


def case_dup2_over_connection():
    c1, s1 = pair()
    c2, s2 = pair()
    os.dup2(c1.fileno(), c2.fileno())  # c2's connection is closed here
    ok = eof(s2)
    os.write(c2.fileno(), b"via-number")
    ok = ok and recv_all(s1, 10) == b"via-number"
    c2.close()
    c1.close()
    ok = ok and eof(s1)
    s1.close()
    s2.close()
    return ok, "dup2-over-connection"


def nonblocking(fd):
    return bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_NONBLOCK)


def set_nonblocking(fd, on, how="F_SETFL"):
    if how == "FIONBIO":
        fcntl.ioctl(fd, termios.FIONBIO, struct.pack("i", int(on)))
        return
    fl = fcntl.fcntl(fd, fcntl.F_GETFL)
    fcntl.fcntl(fd, fcntl.F_SETFL, (fl | os.O_NONBLOCK) if on else (fl & ~os.O_NONBLOCK))


def read_result(fd, wake=None):
    """os.read(fd) with a watchdog: @wake() after 2 s ends a read that blocks"""
    t = threading.Timer(2.0, wake) if wake else None
    if t:
        t.start()
    try:
        r = os.read(fd, 100)
    except BlockingIOError:
        r = "EAGAIN"
    if t:
        t.cancel()
    return r


def case_shared_mode():
    ok = True
    for how in ("F_SETFL", "FIONBIO"):
        c, s = pair()
        d = os.dup(s.fileno())
        set_nonblocking(s.fileno(), True, how)
        ok = ok and nonblocking(d) and read_result(d, lambda: c.send(b"w")) == "EAGAIN"
        set_nonblocking(d, False, how)
        c.send(b"late")
        ok = ok and read_result(s.fileno()) == b"late"  # blocking again: the data
        # a send that would block: EAGAIN through the copy once the original is nonblocking
        c.setblocking(False)
        cd = os.dup(c.fileno())
        try:
            while True:
                os.write(cd, b"x" * 65536)
        except BlockingIOError:
            pass
        os.close(cd)
        os.close(d)
        c.close()
        s.close()
    # fork: the parent makes it nonblocking after the fork, the child reads
    c, s = pair()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.read(r, 1)
        res = read_result(s.fileno(), lambda: c.send(b"w"))
        os._exit(0 if res == "EAGAIN" else 1)
    s.setblocking(False)
    os.write(w, b"x")
    _, st = os.waitpid(pid, 0)
    ok = ok and os.waitstatus_to_exitcode(st) == 0
    os.close(r)
    os.close(w)
    c.close()
    s.close()
    # a listener's copy
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(8)
    ld = os.dup(ls.fileno())
    ls.setblocking(False)
    pid = os.fork()
    if pid == 0:
        try:
            os._exit(0 if socket.socket(fileno=ld).accept() is None else 1)
        except BlockingIOError:
            os._exit(0)
        except BaseException:
            os._exit(2)
    done = False
    for _ in range(30):
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            done = True
            break
        threading.Event().wait(0.1)
    if not done:  # blocked in accept: let it return, then count the case failed
        socket.create_connection(ls.getsockname()).close()
        os.waitpid(pid, 0)
    ok = ok and done
    os.close(ld)
    ls.close()
    return ok, "shared-nonblock-mode"


def case_shared_options():
    """TCP_NODELAY and TCP_CORK (kept by the library) set through a dup read back
    through the original, as on TCP's one socket; and off again through the original,
    through the copy; the bytes still arrive in order"""
    c, s = pair()
    d = socket.socket(fileno=os.dup(c.fileno()))
    ok = True
    for opt in (socket.TCP_NODELAY, socket.TCP_CORK):
        d.setsockopt(socket.IPPROTO_TCP, opt, 1)
        ok = ok and c.getsockopt(socket.IPPROTO_TCP, opt) == 1 and d.getsockopt(socket.IPPROTO_TCP, opt) == 1
    c.sendall(b"one ")
    d.sendall(b"two")
    for opt in (socket.TCP_NODELAY, socket.TCP_CORK):
        c.setsockopt(socket.IPPROTO_TCP, opt, 0)
        ok = ok and c.getsockopt(socket.IPPROTO_TCP, opt) == 0 and d.getsockopt(socket.IPPROTO_TCP, opt) == 0
    d.close()
    c.close()
    ok = ok and recv_all(s, 100) == b"one two"
    s.close()
    return ok, "shared-options"


def case_rcvlowat_fork():
    """SO_RCVLOWAT is the socket's: set in a forked child, it reads back in the parent,
    capped as the kernel caps TCP's (a negative value); SIOCGSTAMP on an accepted
    connection is ENOENT (no packet time), as on TCP, not the socket pair's ENOTTY"""
    c, s = pair()
    plain = socket.socket()  # unconnected: the kernel's own answer
    plain.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, -5)
    cap = plain.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT)
    plain.close()
    pid = os.fork()
    if pid == 0:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, 9)
        os._exit(0)
    os.waitpid(pid, 0)
    ok = s.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT) == 9
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, -5)
    ok = ok and s.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT) == cap
    try:
        fcntl.ioctl(s.fileno(), 0x8906, bytes(16))  # SIOCGSTAMP
        ok = False
    except OSError as e:
        ok = ok and e.errno == errno.ENOENT
    c.close()
    s.close()
    return ok, "rcvlowat-fork"


def main():
    results = [case_dup(), case_dup2_chain(), case_threads(), case_listener(), case_dup2_over_connection(),
               case_shared_mode(), case_shared_options(), case_rcvlowat_fork()]
    bad = [name for ok, name in results if not ok]
    print("%d dup cases, failed: %s" % (len(results), ", ".join(bad) or "none"))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
