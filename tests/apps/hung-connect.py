#!/usr/bin/env python3
# Helper of tests/test-smcd-restart.sh (run under smcrun): a connect while smcd is
# stopped, from a process whose control connection is established.
#   hung-connect.py STOPPED RESUMED
# Makes one SMC-D connection to its own listener on 127.0.0.1, creates the file
# STOPPED and waits a second (the test stops smcd meanwhile), then connects again:
# that connect must go on over TCP after CONNECT's timeout (10 s: 9 to 14 s, smcd is
# stopped 15 s), with 64 KiB checked both ways; once the file RESUMED exists (smcd
# goes on, reads the CONNECT late) the listener must have nothing more to accept (a
# connection smcd set up for the late CONNECT would be queued there with nobody at
# its client's end). Prints one line; exit status 0 only if all held.
import os
import socket
import sys
import time

import smcapp

stopped, resumed = sys.argv[1], sys.argv[2]
fails = []
ls = socket.socket()
ls.bind(("127.0.0.1", 0))
ls.listen(8)
port = ls.getsockname()[1]
c = socket.create_connection(("127.0.0.1", port))
s, _ = ls.accept()
if not smcapp.is_smcd(c):
    fails.append("the first connection is not SMC-D")
open(stopped, "w").close()
time.sleep(1)
t = time.monotonic()
c2 = socket.create_connection(("127.0.0.1", port))
took = time.monotonic() - t
mode = c2.getsockopt(smcapp.SOL_SMC, smcapp.SMC_PROTO_MODE)
if not 9 <= took < 14 or mode != 2:
    fails.append("connect while smcd is stopped: %.2f s, mode %d (want 9-14 s, TCP: 2)" % (took, mode))
s2, _ = ls.accept()
d = os.urandom(65536)
c2.sendall(d)
s2.sendall(d)
for a, b in ((s2, c2), (c2, s2)):
    g = b""
    while len(g) < len(d):
        x = a.recv(len(d) - len(g))
        if not x:
            break
        g += x
    if g != d:
        fails.append("the TCP connection's bytes differ")
end = time.monotonic() + 30
while not os.path.exists(resumed) and time.monotonic() < end:
    time.sleep(0.05)
time.sleep(1.5)  # (smcd reads the late CONNECT)
ls.setblocking(False)
try:
    ls.accept()
    fails.append("a connection nobody made was accepted after smcd went on")
except BlockingIOError:
    pass
smcapp.finish("hung-connect", fails,
              "a connect while smcd is stopped goes on over TCP after %.1f s, bytes checked, "
              "and nothing is queued to the listener when smcd reads it late" % took, c, s, c2, s2, ls)
