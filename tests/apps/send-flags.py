#!/usr/bin/env python3
# send(2) flags on a connected socket, under smcrun as over TCP (helper 108):
# MSG_FASTOPEN gives EISCONN (its connect on a connected socket); a flag TCP does not
# know (0x80000) is ignored; MSG_ZEROCOPY without SO_ZEROCOPY is a plain send, as
# TCP's; MSG_EOR, MSG_CONFIRM, MSG_DONTROUTE are accepted; every byte sent arrives,
# in order, read with flags TCP ignores (0x80000, MSG_EOR); a receive with MSG_OOB
# gives EINVAL (no urgent byte came). Under smcrun the fast-open and the unknown
# flags gave EOPNOTSUPP, also MSG_OOB on a receive.
# Prints one line; exit status 0 only if every case held. SMC_EXPECT=1: the
# connection must be SMC-D.
import errno
import socket
import sys

import smcapp

MSG_FASTOPEN, MSG_ZEROCOPY, UNKNOWN = 0x20000000, 0x4000000, 0x80000
fails = []
c, s = smcapp.pair(check=False)
if smcapp.not_smcd(c):
    fails.append("not SMC-D")
want = b""
for name, flag, data, err in (("MSG_FASTOPEN", MSG_FASTOPEN, b"F", errno.EISCONN),
                              ("unknown flag 0x80000", UNKNOWN, b"u", 0),
                              ("MSG_ZEROCOPY without SO_ZEROCOPY", MSG_ZEROCOPY, b"z" * 5000, 0),
                              ("MSG_EOR", socket.MSG_EOR, b"e", 0),
                              ("MSG_CONFIRM", socket.MSG_CONFIRM, b"c", 0),
                              ("MSG_DONTROUTE", socket.MSG_DONTROUTE, b"d", 0)):
    try:
        n = c.send(data, flag)
        if err:
            fails.append("%s: sent %d, want %s" % (name, n, errno.errorcode[err]))
        else:
            want += data[:n]
            if n != len(data):
                fails.append("%s: sent %d of %d" % (name, n, len(data)))
    except OSError as e:
        if e.errno != err:
            fails.append("%s: %s, want %s" % (name, errno.errorcode.get(e.errno, e.errno),
                                                errno.errorcode[err] if err else "a send"))
try:
    s.recv(1, socket.MSG_OOB | socket.MSG_DONTWAIT)
    fails.append("recv MSG_OOB (no urgent byte came) returned")
except OSError as e:
    if e.errno != errno.EINVAL:
        fails.append("recv MSG_OOB: %s, want EINVAL" % errno.errorcode.get(e.errno, e.errno))
c.shutdown(socket.SHUT_WR)
got = b""
s.settimeout(5)
while True:
    b = s.recv(65536, UNKNOWN | socket.MSG_EOR)  # (ignored, as by TCP)
    if not b:
        break
    got += b
if got != want:
    fails.append("the peer read %d bytes, not the %d sent" % (len(got), len(want)))
for x in (c, s):
    x.close()
if fails:
    print("send-flags: FAIL: " + "; ".join(fails))
    sys.exit(1)
print("send-flags: MSG_FASTOPEN on a connected socket EISCONN; an unknown flag, MSG_ZEROCOPY without "
      "SO_ZEROCOPY, MSG_EOR, MSG_CONFIRM and MSG_DONTROUTE send, every byte arrives (read with "
      "ignored flags); recv MSG_OOB EINVAL")
