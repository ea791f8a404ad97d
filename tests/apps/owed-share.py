"""Readiness after one copy of a socket looked at the data and another read it
(helper 129): B is in a level-triggered epoll set, FIONREAD on B sees A's bytes,
then a dup(2) of B, or a forked child's copy, reads them all. Over TCP the set then
reports nothing and poll(B) says only POLLOUT. Before, smcrun's set reported EPOLLIN
once more (X kept the doorbell byte whose bell B's FIONREAD had taken: the count of
such bytes was B's own, so the copy that emptied the ring did not read it), and a
blocking receive after that report would wait for nothing. Also passes over plain
TCP."""
import fcntl
import os
import select
import socket
import struct
import sys
import termios
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import smcapp  # noqa: E402

fails = []


def inq(s):
    b = bytearray(4)
    fcntl.ioctl(s.fileno(), termios.FIONREAD, b)
    return struct.unpack("i", b)[0]


def reader_dup(b, n):
    b2 = b.dup()
    got = smcapp.recv_exact(b2, n, short_ok=True)
    b2.close()
    return got


def reader_fork(b, n):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.write(w, smcapp.recv_exact(b, n, short_ok=True))
        os._exit(0)
    os.close(w)
    got = b""
    while True:
        d = os.read(r, 1 << 16)
        if not d:
            break
        got += d
    os.close(r)
    os.waitpid(pid, 0)
    return got


for name, reader in (("dup", reader_dup), ("fork", reader_fork)):
    for rounds in (1, 3):
        a, b = smcapp.pair()
        ep = select.epoll()
        ep.register(b.fileno(), select.EPOLLIN)
        for i in range(rounds):
            data = bytes([65 + i]) * (100 + i)
            a.sendall(data)
            time.sleep(0.01)
            n = inq(b)
            if n != len(data):
                fails.append("%s, round %d: FIONREAD %d, want %d" % (name, i, n, len(data)))
            got = reader(b, len(data))
            if got != data:
                fails.append("%s, round %d: the copy read %d bytes wrong" % (name, i, len(got)))
            time.sleep(0.01)
            ev = ep.poll(0)
            p = select.poll()
            p.register(b.fileno(), select.POLLIN | select.POLLOUT)
            pv = p.poll(0)
            if ev or pv != [(b.fileno(), select.POLLOUT)] or inq(b) != 0:
                fails.append("%s, round %d: after the copy read all: epoll %s, poll %s, FIONREAD %d "
                             "(TCP: nothing, POLLOUT, 0)" % (name, i, ev, pv, inq(b)))
        # B itself still reads what comes next, and sees the peer's close
        a.sendall(b"tail")
        if smcapp.recv_exact(b, 4, short_ok=True) != b"tail":
            fails.append("%s: B's own read after the copy's wrong" % name)
        a.close()
        if b.recv(10) != b"":
            fails.append("%s: no EOF after the peer's close" % name)
        ep.close()
        b.close()

smcapp.finish("owed-share", fails, "a dup's and a child's reads leave no stale EPOLLIN, as over TCP")
