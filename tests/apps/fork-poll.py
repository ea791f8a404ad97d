#!/usr/bin/env python3
# poll(2) on a connection shared by fork, under smcrun as over TCP (helper 108):
#  1. the child sends in a loop while a parent thread reads; the parent calls
#     poll(POLLOUT) with an infinite timeout 2000 times: it never returns 0 (under
#     smcrun it did, up to 1901 times in 2000);
#  2. the child is killed in the middle of its loop; the reader goes on; the parent's
#     poll(POLLOUT, 3 s) reports the socket writable, and a send with a timeout
#     (poll, then send) goes through (under smcrun poll never did, 21 of 45 runs: the
#     parent's view of the producer cursor was its own, from before the fork).
# Prints one line; exit status 0 only if every case held. SMC_EXPECT=1: the
# connection must be SMC-D.
import ctypes
import os
import select
import signal
import socket
import sys
import threading
import time

import smcapp

libc = ctypes.CDLL(None, use_errno=True)
fails = []


class PollFd(ctypes.Structure):
    _fields_ = [("fd", ctypes.c_int), ("events", ctypes.c_short), ("revents", ctypes.c_short)]


def raw_poll(fd, events, timeout_ms):
    """libc's poll (Python's select.poll retries EINTR and hides nothing else; this
    is the call a C program makes)"""
    pf = PollFd(fd, events, 0)
    return libc.poll(ctypes.byref(pf), 1, timeout_ms), pf.revents


def round_(kill_delay):
    c, s = smcapp.pair(check=False)
    if smcapp.not_smcd(c):
        fails.append("the connection is not SMC-D")
    pid = os.fork()
    if pid == 0:
        s.close()
        try:
            while True:
                c.sendall(b"C" * 3000)
        finally:
            os._exit(0)
    got = {"P": 0}

    def reader():
        while True:
            b = s.recv(1 << 20)
            if not b:
                return
            got["P"] += b.count(b"P")

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    zero = 0
    if kill_delay is None:
        for _ in range(2000):
            r, _ = raw_poll(c.fileno(), select.POLLOUT, -1)
            zero += r == 0
    else:
        time.sleep(kill_delay)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    time.sleep(0.1)
    t0 = time.monotonic()
    r, rev = raw_poll(c.fileno(), select.POLLOUT, 3000)
    took = time.monotonic() - t0
    res = None
    if r != 1 or not rev & select.POLLOUT:
        res = "after the child's kill: poll(POLLOUT, 3 s) returned %d (revents %#x) after %.1f s" % (r, rev, took)
    else:
        c.settimeout(3)
        try:
            c.sendall(b"P" * 1000)
            c.shutdown(socket.SHUT_WR)
            t.join(5)
            if got["P"] != 1000:
                res = "after the child's kill: the reader saw %d of the parent's 1000 bytes" % got["P"]
        except OSError as e:
            res = "after the child's kill: sendall with a timeout: %r" % e
    for x in (c, s):
        x.close()
    return zero, res


zero, res = round_(None)
if zero:
    fails.append("poll(POLLOUT, -1) returned 0 %d times in 2000 while the child sent" % zero)
if res:
    fails.append(res)
for i in range(8):
    _, res = round_(0.02 + 0.03 * i)
    if res:
        fails.append("kill after %.2f s: %s" % (0.02 + 0.03 * i, res))
        break
if fails:
    print("fork-poll: FAIL: " + "; ".join(fails))
    sys.exit(1)
print("fork-poll: a connection shared by fork: poll(POLLOUT, -1) never 0 in 2000 calls while the child "
      "sends; after the child's kill mid-send (9 rounds) poll reports POLLOUT and a send with a timeout "
      "goes through, every byte read")
