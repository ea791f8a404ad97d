#!/usr/bin/env python3
# Which listener of one port an IPv4 connection reaches, as the kernel's
# compute_score() decides: an AF_INET listener on 0.0.0.0:P and a dual-stack AF_INET6
# one on [::]:P (both SO_REUSEPORT, so both may listen; never one group: the family
# differs) in one process: TCP gives every connection to 127.0.0.1:P to the AF_INET
# one, and so must smcd (helper 123: it spread them over both, 4 and 4 of 8). To
# [::1]:P they all go to the AF_INET6 one.
# Also run without smcrun (plain TCP), where the same must hold.
# Prints one line; exit status 0 only if all that held.
import os
import select
import socket
import sys

UNDER_SMCRUN = "libsmcrun" in os.environ.get("LD_PRELOAD", "")


def listener(family, addr, port):
    s = socket.socket(family)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    if family == socket.AF_INET6:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.bind((addr, port))
    s.listen(16)
    return s


def count(dst, ls, n=8):
    got = {name: 0 for name in ls}
    modes = set()
    for _ in range(n):
        c = socket.create_connection(dst, timeout=5)
        r, _, _ = select.select(list(ls.values()), [], [], 5)
        for name, l in ls.items():
            if l in r:
                s, _ = l.accept()
                got[name] += 1
                try:
                    modes.add(s.getsockopt(286, 0x5301))
                except OSError:
                    modes.add(None)
                s.close()
                break
        c.close()
    return got, modes


v4 = listener(socket.AF_INET, "0.0.0.0", 0)
port = v4.getsockname()[1]
try:
    v6 = listener(socket.AF_INET6, "::", port)
except OSError as e:
    print("no dual-stack listener beside 0.0.0.0 here (%s): nothing to check" % e)
    sys.exit(0)
ls = {"0.0.0.0": v4, "[::]": v6}
got4, modes4 = count(("127.0.0.1", port), ls)
try:
    got6, modes6 = count(("::1", port), ls)
except OSError as e:  # (no IPv6 loopback)
    got6, modes6 = None, set()
want_mode = {1} if UNDER_SMCRUN else {None}
ok = got4 == {"0.0.0.0": 8, "[::]": 0} and modes4 <= want_mode
ok = ok and (got6 is None or (got6 == {"0.0.0.0": 0, "[::]": 8} and modes6 <= want_mode))
print("to 127.0.0.1: %s, to [::1]: %s (modes %s %s)%s" % (got4, got6 if got6 is not None else "no IPv6",
                                                           sorted(map(str, modes4)), sorted(map(str, modes6)),
                                                           "" if ok else " WRONG"))
sys.exit(0 if ok else 1)
