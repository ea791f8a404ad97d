#!/usr/bin/env python3
# preadv2(2) / pwritev2(2) on an SMC-D connection, as on TCP (Python's os.preadv and
# os.pwritev call them): with offset -1 they are readv / writev (RWF_NOWAIT: a
# nonblocking call, EAGAIN when nothing is there); any other offset gives ESPIPE
# (EINVAL below -1), an unknown flag EOPNOTSUPP, and no byte moves. Before, they went
# to the socket pair under the connection: pwritev's bytes were lost and preadv read
# doorbell bytes as data (helper 113, 2026-12-06).
# Prints one line; exit status 0 only if all that held.
import errno
import os
import socket
import struct
import sys


def err(fn):
    try:
        fn()
        return "no error"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))


def main():
    if not hasattr(os, "preadv") or not hasattr(os, "RWF_NOWAIT"):
        print("preadv2: not in this Python: skipped")
        return 0
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    c = socket.create_connection(ls.getsockname())
    a, _ = ls.accept()
    a.settimeout(5)
    bad = []
    under = "libsmcrun" in os.environ.get("LD_PRELOAD", "")
    if under and struct.unpack("i", c.getsockopt(286, 0x5301, 4))[0] != 1:
        bad.append("not SMC-D")
    n = os.pwritev(c.fileno(), [b"abc", b"", b"defg"], -1)
    got = a.recv(100)
    if n != 7 or got != b"abcdefg":
        bad.append("pwritev -1: %r, peer got %r" % (n, got))
    c.sendall(b"more")
    b1, b2 = bytearray(2), bytearray(10)
    a.setblocking(True)
    n = os.preadv(a.fileno(), [b1, b2], -1)
    if n != 4 or bytes(b1) + bytes(b2[:2]) != b"more":
        bad.append("preadv -1: %r %r %r" % (n, bytes(b1), bytes(b2)))
    e = err(lambda: os.preadv(a.fileno(), [b2], -1, os.RWF_NOWAIT))
    if e != "EAGAIN":
        bad.append("preadv RWF_NOWAIT on nothing: %s" % e)
    for off, want in ((0, "ESPIPE"), (9, "ESPIPE"), (-2, "EINVAL")):
        for name, fn in (("pwritev", lambda: os.pwritev(c.fileno(), [b"x"], off)),
                         ("preadv", lambda: os.preadv(a.fileno(), [b2], off))):
            e = err(fn)
            if e != want:
                bad.append("%s offset %d: %s, not %s" % (name, off, e, want))
    e = err(lambda: os.pwritev(c.fileno(), [b"x"], -1, 0x40000000))
    if e not in ("EOPNOTSUPP", "ENOTSUP"):
        bad.append("unknown flag: %s" % e)
    c.sendall(b"end")
    got = a.recv(100)
    if got != b"end":
        bad.append("after the refused calls the peer got %r, not b'end' (a byte moved)" % got)
    if bad:
        print("preadv2: " + "; ".join(bad))
        return 1
    print("preadv2: pwritev/preadv at offset -1 are writev/readv (RWF_NOWAIT: EAGAIN), other offsets "
          "ESPIPE/EINVAL, unknown flags EOPNOTSUPP, no byte moved by them")
    return 0


if __name__ == "__main__":
    sys.exit(main())
