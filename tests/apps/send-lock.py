#!/usr/bin/env python3
# Calls from a second thread while the first sleeps in a blocking send for room, under
# smcrun as over TCP (whose sender sleeps without the socket lock,
# sk_stream_wait_memory()): thread A sends 8 MB blocking to a reader that waits 1.5 s
# before it reads; 0.3 s later thread B makes each of these calls, which must return
# within 0.5 s:
#  - send(10 bytes, MSG_DONTWAIT): the bytes taken (TCP may still have room) or EAGAIN
#  - a send on a dup() of the socket with O_NONBLOCK set: the same
#  - setsockopt TCP_CORK 1, then 0; TCP_NODELAY 1
# Then the reader reads everything: A's 8 MB and every byte B's sends took, nothing
# else, and A's sendall() returns. Prints one line; exit status 0 only if every case
# held. SMC_EXPECT=1: the connection must be SMC-D.
import errno
import fcntl
import os
import socket
import sys
import threading
import time

import smcapp

A_LEN = 8 << 20
fails = []

c, s = smcapp.pair(check=False)
if smcapp.not_smcd(s):
    fails.append("not SMC-D")

got = bytearray()


def reader():
    time.sleep(1.5)
    while True:
        b = c.recv(1 << 20)
        if not b:
            break
        got.extend(b)


a_err = []


def sender():
    try:
        s.sendall(b"A" * A_LEN)
    except OSError as e:
        a_err.append(e)


tr = threading.Thread(target=reader)
ta = threading.Thread(target=sender)
tr.start()
ta.start()
time.sleep(0.3)

b_taken = 0


def timed(what, fn):
    t = time.monotonic()
    try:
        r = fn()
    except OSError as e:
        r = e
    dt = time.monotonic() - t
    if dt > 0.5:
        fails.append("%s took %.2f s while another thread sleeps in send" % (what, dt))
    return r


def nb_send(what, fn):
    global b_taken
    r = timed(what, fn)
    if isinstance(r, int):
        b_taken += r
    elif not (isinstance(r, OSError) and r.errno == errno.EAGAIN):
        fails.append("%s: %r (want a count or EAGAIN)" % (what, r))


nb_send("send(MSG_DONTWAIT)", lambda: s.send(b"B" * 10, socket.MSG_DONTWAIT))
d = os.dup(s.fileno())
fl = fcntl.fcntl(d, fcntl.F_GETFL)
fcntl.fcntl(d, fcntl.F_SETFL, fl | os.O_NONBLOCK)
nb_send("send on an O_NONBLOCK dup", lambda: os.write(d, b"B" * 10))
for what, opt, val in (("TCP_CORK 1", socket.TCP_CORK, 1), ("TCP_CORK 0", socket.TCP_CORK, 0),
                       ("TCP_NODELAY 1", socket.TCP_NODELAY, 1)):
    r = timed("setsockopt " + what, lambda: s.setsockopt(socket.IPPROTO_TCP, opt, val))
    if r is not None:
        fails.append("setsockopt %s: %r" % (what, r))
# (the shared O_NONBLOCK flag: A is blocking, as it began)
fcntl.fcntl(d, fcntl.F_SETFL, fl)
os.close(d)

ta.join(30)
if ta.is_alive() or a_err:
    fails.append("A's sendall: %s" % (a_err or "still blocked after 30 s"))
s.close()
tr.join(30)
if tr.is_alive():
    fails.append("the reader did not see EOF")
c.close()
na, nb = got.count(b"A"), got.count(b"B")
if na != A_LEN or nb != b_taken or len(got) != A_LEN + b_taken:
    fails.append("read %d bytes: %d A (want %d), %d B (want %d)" % (len(got), na, A_LEN, nb, b_taken))

if fails:
    print("send-lock: " + "; ".join(fails))
    sys.exit(1)
print("send-lock: 5 calls from another thread returned at once, every byte read")
