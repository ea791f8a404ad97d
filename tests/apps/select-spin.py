#!/usr/bin/env python3
# select() and pselect() on SMC-D connections (run under smcrun): the library looks at
# every descriptor once and busy-polls the rings before the real call sleeps
# (preload.c, smc_select_spin). Whatever the path, the answers must be select's:
#   - readable exactly when data or EOF is there, writable when half the peer's
#     buffer is free; a timeout that expires returns nothing, not early;
#   - SMC sockets mixed with a pipe: the pipe's readiness is reported;
#   - a closed descriptor in the set: EBADF;
#   - a stream of 32 MiB between two processes, both nonblocking and waiting in
#     select (iperf3's pattern) and in pselect through ctypes: every byte right;
#   - Linux's select leaves the time not slept in the timeval, and writes only the
#     words of the sets below nfds;
#   - a signal that comes during the busy-poll interrupts select, pselect and poll
#     with EINTR (it did not, found by a fresh tester), and poll never returns
#     before its timeout.
import ctypes
import errno
import hashlib
import os
import select
import sys
import time

import smcapp

libc = ctypes.CDLL(None, use_errno=True)
fails = []


def check(ok, what):
    if not ok:
        fails.append(what)


def case_readiness():
    c, s = smcapp.pair(check=False)
    r, w, _ = select.select([s], [c], [], 1.0)
    check(r == [] and w == [c], "fresh connection: readable %s writable %s" % (r, w))
    t0 = time.monotonic()
    r, _, _ = select.select([s], [], [], 0.2)
    dt = time.monotonic() - t0
    check(r == [] and dt >= 0.19, "empty: select returned %s after %.3f s" % (r, dt))
    # data from another process after 20 ms: select wakes with it
    pid = os.fork()
    if pid == 0:
        time.sleep(0.02)
        c.send(b"x" * 100)
        os._exit(0)
    r, _, _ = select.select([s], [], [], 5.0)
    check(r == [s], "data after 20 ms: %s" % r)
    check(s.recv(1000) == b"x" * 100, "the 100 bytes")
    os.waitpid(pid, 0)
    r, _, _ = select.select([s], [], [], 0.05)
    check(r == [], "drained: still readable %s" % r)
    # a pipe in the set with the SMC socket: the pipe is reported
    pr, pw = os.pipe()
    os.write(pw, b"p")
    r, _, _ = select.select([s, pr], [], [], 1.0)
    check(r == [pr], "pipe ready, socket not: %s" % r)
    os.read(pr, 1)
    # a closed descriptor: EBADF
    os.close(pw)
    bad = os.dup(pr)
    os.close(bad)
    try:
        select.select([s, bad], [], [], 0.1)
        check(False, "closed fd in the set: no error")
    except OSError as e:
        check(e.errno == errno.EBADF, "closed fd in the set: %s" % e)
    os.close(pr)
    # full buffer: not writable until the peer reads
    c.setblocking(False)
    sent = 0
    try:
        while True:
            sent += c.send(b"f" * 65536)
    except BlockingIOError:
        pass
    _, w, _ = select.select([], [c], [], 0.1)
    check(w == [], "full buffer: writable %s" % w)
    got = 0
    s.setblocking(False)
    while got < sent:
        try:
            got += len(s.recv(1 << 20))
        except BlockingIOError:
            select.select([s], [], [], 1.0)
    _, w, _ = select.select([], [c], [], 1.0)
    check(w == [c], "drained by the peer: writable %s" % w)
    # EOF: readable, recv gives b""
    c.close()
    r, _, _ = select.select([s], [], [], 1.0)
    s.setblocking(True)
    check(r == [s] and s.recv(10) == b"", "EOF: readable %s" % r)
    s.close()


class Timeval(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_usec", ctypes.c_long)]


class Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


FDSET_WORDS = 1024 // 64


def fdset(*fds):
    a = (ctypes.c_ulong * FDSET_WORDS)()
    for fd in fds:
        a[fd // 64] |= 1 << (fd % 64)
    return a


def isset(a, fd):
    return bool(a[fd // 64] & (1 << (fd % 64)))


def case_timeval_left():
    """select (C, through ctypes) leaves the time not slept in the timeval"""
    c, s = smcapp.pair(check=False)
    c.send(b"y")
    time.sleep(0.01)
    rd = fdset(s.fileno())
    tv = Timeval(5, 0)
    n = libc.select(s.fileno() + 1, rd, None, None, ctypes.byref(tv))
    left = tv.tv_sec + tv.tv_usec / 1e6
    check(n == 1 and isset(rd, s.fileno()) and 4.5 < left <= 5.0,
          "select timeval: n %d left %.6f" % (n, left))
    c.close()
    s.close()


def case_small_set():
    """select writes only the words below nfds (a set sized for nfds, not 128 bytes)"""
    c, s = smcapp.pair(check=False)
    c.send(b"z")
    time.sleep(0.01)
    fd = s.fileno()
    if fd >= 64:
        return
    buf = (ctypes.c_ubyte * 128)(*([0] * 8 + [0xAA] * 120))
    buf[fd // 8] |= 1 << (fd % 8)
    tv = Timeval(1, 0)
    n = libc.select(fd + 1, buf, None, None, ctypes.byref(tv))
    guard = bytes(buf[8:])
    check(n == 1 and buf[fd // 8] & (1 << (fd % 8)) and guard == b"\xaa" * 120,
          "8-byte fd_set: n %d, guard bytes changed %d" % (n, sum(1 for b in guard if b != 0xAA)))
    c.close()
    s.close()


class Pollfd(ctypes.Structure):
    _fields_ = [("fd", ctypes.c_int), ("events", ctypes.c_short), ("revents", ctypes.c_short)]


def case_signals():
    """run in a child with SMC_BUSY_POLL_US=1000000 (a 1 s spin): a signal 0.1 s into
    select, pselect or poll comes during the spin and must end the call with EINTR at
    once, as it ends the kernel's wait (before the fix the handler ran and the call
    slept on to its timeout)"""
    import signal
    c, s = smcapp.pair(check=False)
    fd = s.fileno()
    signal.signal(signal.SIGALRM, lambda *a: None)
    bad = []
    for call in ("select", "pselect", "poll"):
        for _ in range(3):
            signal.setitimer(signal.ITIMER_REAL, 0.1)
            t0 = time.monotonic()
            if call == "select":
                tv = Timeval(5, 0)
                r = libc.select(fd + 1, fdset(fd), None, None, ctypes.byref(tv))
            elif call == "pselect":
                ts = Timespec(5, 0)
                r = libc.pselect(fd + 1, fdset(fd), None, None, ctypes.byref(ts), None)
            else:
                p = Pollfd(fd, 1, 0)
                r = libc.poll(ctypes.byref(p), 1, 5000)
            e = ctypes.get_errno()
            dt = time.monotonic() - t0
            if not (r == -1 and e == errno.EINTR and dt < 1.0):
                bad.append("%s: r %d errno %d after %.2f s" % (call, r, e, dt))
    signal.setitimer(signal.ITIMER_REAL, 0)
    c.close()
    s.close()
    sys.stderr.write("; ".join(bad) + "\n" if bad else "")
    sys.exit(1 if bad else 0)


def case_timeouts():
    """poll, select and pselect never return before their timeout (the spin's time is
    taken off exactly, not in whole milliseconds)"""
    c, s = smcapp.pair(check=False)
    fd = s.fileno()
    early = 0
    for ms in (1, 2, 5):
        for _ in range(30):
            p = Pollfd(fd, 1, 0)
            t0 = time.monotonic()
            r = libc.poll(ctypes.byref(p), 1, ms)
            if r == 0 and time.monotonic() - t0 < ms / 1000.0:
                early += 1
            tv = Timeval(0, ms * 1000)
            t0 = time.monotonic()
            r = libc.select(fd + 1, fdset(fd), None, None, ctypes.byref(tv))
            if r == 0 and time.monotonic() - t0 < ms / 1000.0:
                early += 1
    check(early == 0, "poll/select returned before the timeout %d of 180 times" % early)
    c.close()
    s.close()


def stream(use_pselect, total=32 << 20):
    """iperf3's pattern: nonblocking sockets, a select before every read and write"""
    c, s = smcapp.pair(check=False)
    pid = os.fork()
    if pid == 0:
        s.close()
        c.setblocking(False)
        block = bytes(range(256)) * 512  # 128 KiB, as iperf3 writes
        h = hashlib.sha256()
        off = sent = 0
        while sent < total:
            if use_pselect:
                wr = fdset(c.fileno())
                ts = Timespec(5, 0)
                if libc.pselect(c.fileno() + 1, None, wr, None, ctypes.byref(ts), None) != 1:
                    os._exit(3)
            else:
                _, w, _ = select.select([], [c], [], 5.0)
                if not w:
                    os._exit(2)
            want = min(len(block) - off, total - sent)
            try:
                n = c.send(block[off:off + want])
            except BlockingIOError:
                continue
            h.update(block[off:off + n])
            off = (off + n) % len(block)
            sent += n
        c.close()
        os.write(1, h.hexdigest().encode() + b"\n")
        os._exit(0)
    c.close()
    s.setblocking(False)
    h = hashlib.sha256()
    got = 0
    while True:
        if use_pselect:
            rd = fdset(s.fileno())
            ts = Timespec(5, 0)
            if libc.pselect(s.fileno() + 1, rd, None, None, ctypes.byref(ts), None) != 1:
                check(False, "stream pselect: timed out at %d" % got)
                break
        else:
            r, _, _ = select.select([s], [], [], 5.0)
            if not r:
                check(False, "stream select: timed out at %d" % got)
                break
        try:
            d = s.recv(131072)
        except BlockingIOError:
            continue
        if not d:
            break
        h.update(d)
        got += len(d)
    _, st = os.waitpid(pid, 0)
    s.close()
    check(os.WIFEXITED(st) and os.WEXITSTATUS(st) == 0, "stream writer exit %r" % st)
    check(got == total, "stream: %d of %d bytes" % (got, total))
    return h.hexdigest()


def main():
    case_readiness()
    case_timeval_left()
    case_small_set()
    case_timeouts()
    import subprocess
    env = dict(os.environ, SMC_BUSY_POLL_US="1000000")
    p = subprocess.run([sys.executable, sys.argv[0], "signals"], env=env, stderr=subprocess.PIPE)
    check(p.returncode == 0, "signals during a 1 s spin: %s" % p.stderr.decode().strip())
    r, w = os.pipe()  # the children print their digests here
    os.dup2(w, 1)
    os.close(w)
    d1 = stream(False)
    d2 = stream(True)
    out = os.read(r, 1000).decode().split()
    check(out == [d1, d2], "stream digests: writers %s readers %s" % (out, [d1, d2]))
    sys.stderr.write("select/pselect cases, 2 x 32 MiB streams; failed: %s\n" % ("; ".join(fails) or "none"))
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "signals":
        case_signals()
    main()
