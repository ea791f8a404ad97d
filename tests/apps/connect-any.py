#!/usr/bin/env python3
# connect(2) to INADDR_ANY / in6addr_any, under smcrun as over TCP: Linux connects to
# loopback (or the socket's bound address), and every address the two ends report
# (getsockname, getpeername, accept) is 127.0.0.1 / ::1, and a client bound to
# 127.0.0.1 connects to 127.0.0.1. Under smcrun they were all 0.0.0.0 / :: (helper 107).
# Prints one line; exit status 0 only if every case held.
# SMC_EXPECT=1: every connection must be SMC-D.
import os
import socket
import sys

fails = []
expect_smc = os.environ.get("SMC_EXPECT") == "1"
for fam, any_, lo, bind in ((socket.AF_INET, "0.0.0.0", "127.0.0.1", False),
                            (socket.AF_INET6, "::", "::1", False),
                            (socket.AF_INET, "0.0.0.0", "127.0.0.1", True)):
    ls = socket.socket(fam)
    ls.bind((any_, 0))
    ls.listen(1)
    port = ls.getsockname()[1]
    c = socket.socket(fam)
    if bind:
        c.bind((lo, 0))
    c.connect((any_, port))
    s, addr = ls.accept()
    what = "%s%s" % (any_, " (client bound)" if bind else "")
    if expect_smc and (c.getsockopt(286, 0x5301) != 1 or s.getsockopt(286, 0x5301) != 1):
        fails.append("%s: not SMC-D" % what)
    got = [c.getsockname()[0], c.getpeername()[:2], addr[0], s.getpeername()[0], s.getsockname()[0]]
    want = [lo, (lo, port), lo, lo, lo]
    if got != want:
        fails.append("%s: addresses %r, want %r" % (what, got, want))
    c.sendall(b"x")
    if s.recv(1) != b"x":
        fails.append("%s: no data" % what)
    for x in (c, s, ls):
        x.close()
if fails:
    print("connect-any: FAIL: " + "; ".join(fails))
    sys.exit(1)
print("connect-any: a connect to 0.0.0.0 and :: reaches loopback, with loopback's addresses at both ends")
