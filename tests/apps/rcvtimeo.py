#!/usr/bin/env python3
# SO_RCVTIMEO where a call waits for more than the ring shows, under smcrun as over
# TCP:
#  1. accept(2) with no connection fails with EAGAIN once the timeout passed (set
#     after listen(), and before it); a connection that comes within the timeout is
#     accepted. The SMC listener ignored the option and blocked for good.
#  2. recv(MSG_PEEK|MSG_WAITALL) with fewer bytes there than asked returns them once
#     the timeout passed (it waited until the peer closed), and leaves them to read.
#  3. recv(MSG_WAITALL) with fewer bytes there than asked returns them once the timeout
#     passed, or once a signal handler ran, also one installed with SA_RESTART (the
#     library restarted its wait and returned only when the peer closed).
#  4. a timeout long enough to wrap a 64-bit count of ns or ms waits as none does.
# Prints one line; exit status 0 only if every case held.
import errno
import signal
import socket
import struct
import sys
import threading
import time


def timed_accept(ls, timeout_s):
    t = time.monotonic()
    try:
        ls.accept()
        return "accepted", time.monotonic() - t
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno)), time.monotonic() - t


def rcvtimeo(sock, secs):
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", int(secs), int(secs % 1 * 1e6)))


fails = []
ls = socket.socket()
ls.bind(("127.0.0.1", 0))
ls.listen(4)
rcvtimeo(ls, 0.3)
what, took = timed_accept(ls, 0.3)
if what != "EAGAIN" or not 0.25 <= took < 10:
    fails.append("after listen(): %s after %.2f s" % (what, took))

early = socket.socket()
rcvtimeo(early, 0.2)
early.bind(("127.0.0.1", 0))
early.listen(4)
what, took = timed_accept(early, 0.2)
if what != "EAGAIN" or not 0.15 <= took < 10:
    fails.append("set before listen(): %s after %.2f s" % (what, took))
early.close()

rcvtimeo(ls, 5)
c = socket.create_connection(ls.getsockname())
s, _ = ls.accept()
c.sendall(b"ping")
if s.recv(4) != b"ping":
    fails.append("the connection accepted within the timeout does not carry data")
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 0, 300000))
c.sendall(b"12345")
time.sleep(0.05)
t = time.monotonic()
got = s.recv(10, socket.MSG_PEEK | socket.MSG_WAITALL)
took = time.monotonic() - t
if got != b"12345" or not 0.2 <= took < 10 or s.recv(10) != b"12345":
    fails.append("recv(MSG_PEEK|MSG_WAITALL) of 10 with 5 there: %r after %.2f s" % (got, took))
c.sendall(b"12345")
time.sleep(0.05)
t = time.monotonic()
got = s.recv(10, socket.MSG_WAITALL)
took = time.monotonic() - t
if got != b"12345" or not 0.2 <= took < 10:
    fails.append("recv(MSG_WAITALL) of 10 with 5 there, SO_RCVTIMEO 0.3 s: %r after %.2f s" % (got, took))
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 0, 0))
signal.signal(signal.SIGALRM, lambda *a: None)
signal.siginterrupt(signal.SIGALRM, False)  # SA_RESTART
c.sendall(b"abcde")
time.sleep(0.05)
# bounds the test if the call ignores the signal: the peer closes after 8 s
closer = threading.Timer(8, lambda: c.shutdown(socket.SHUT_WR))
closer.start()
signal.setitimer(signal.ITIMER_REAL, 0.3)
t = time.monotonic()
got = s.recv(10, socket.MSG_WAITALL)
took = time.monotonic() - t
closer.cancel()
if got != b"abcde" or not 0.2 <= took < 5:
    fails.append("recv(MSG_WAITALL) of 10 with 5 there, SA_RESTART signal after 0.3 s: %r after %.2f s" % (got, took))
# 4. a timeout so long that it wraps a 64-bit count of ns (recv) or ms (accept): the
#    calls wait as for no timeout (the library returned after 0.26 s, or at once)
signal.setitimer(signal.ITIMER_REAL, 0)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 18446744074, 0))
c.sendall(b"fghij")
time.sleep(0.05)
feeder = threading.Timer(1.0, lambda: c.sendall(b"klmno"))
feeder.start()
t = time.monotonic()
got = s.recv(10, socket.MSG_WAITALL)
took = time.monotonic() - t
feeder.join()
if got != b"fghijklmno" or not 0.8 <= took < 8:
    fails.append("recv(MSG_WAITALL) of 10 with 5 there, SO_RCVTIMEO 2^64 ns: %r after %.2f s" % (got, took))
rcvtimeo(ls, 18446744073709552)
late = threading.Timer(1.0, lambda: socket.create_connection(ls.getsockname()).close())
late.start()
what, took = timed_accept(ls, 0)
late.join()
if what != "accepted" or not 0.8 <= took < 8:
    fails.append("accept with SO_RCVTIMEO 2^64 ms: %s after %.2f s" % (what, took))
for x in (c, s, ls):
    x.close()
if fails:
    print("rcvtimeo: " + "; ".join(fails))
    sys.exit(1)
print("rcvtimeo: accept EAGAIN after SO_RCVTIMEO (set after and before listen), a connection within it "
      "accepted; MSG_PEEK|MSG_WAITALL and MSG_WAITALL return the partial data after it, MSG_WAITALL also "
      "after an SA_RESTART signal; timeouts of centuries wait")
