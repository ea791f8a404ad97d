#!/usr/bin/env python3
# One process that connects and accepts (as a proxy does) until its descriptor table
# is full (RLIMIT_NOFILE): every connect() makes exactly one connection, as over TCP.
# Under smcrun an SMC-D connection takes more descriptors than TCP's one (its reply
# brings them), so the table fills sooner; a connect whose reply's descriptors did
# not fit went on over TCP while smcd had queued the SMC-D connection to the
# listener already, and the server accepted it too: a second connection from the
# same address, at EOF at once (helper 112, 3 of 3 runs at ulimit -n 1024). The
# library now looks for room before it asks smcd, once the table is nearly full
# (libsmcproto(3)), and goes on over TCP (reason SMC_CLC_DECL_MEM) without one.
# Checked: after the first EMFILE and a few pairs closed, every connection still
# queued is accepted, each client's address is some server socket's peer exactly
# once, and bytes go both ways on every pair.
# Prints one line; exit status 0 only if that held.
import errno
import os
import resource
import socket
import sys

LIMIT = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
UNDER_SMCRUN = "libsmcrun" in os.environ.get("LD_PRELOAD", "")


def smc_mode(s):
    try:
        return s.getsockopt(286, 0x5301)  # SOL_SMC, SMCPROTO_MODE: 1 SMC-D
    except OSError:
        return 0


def main():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(LIMIT, hard), hard))
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1024)
    port = ls.getsockname()[1]
    cl, sv = [], []
    where = None
    while where is None:
        try:
            c = socket.socket()
        except OSError as e:
            if e.errno != errno.EMFILE:
                raise
            where = "socket"
            break
        try:
            c.connect(("127.0.0.1", port))
        except OSError as e:
            if e.errno != errno.EMFILE:
                raise
            c.close()
            where = "connect"
            break
        cl.append(c)
        try:
            s, _ = ls.accept()
        except OSError as e:
            if e.errno != errno.EMFILE:
                raise
            where = "accept"
            break
        sv.append(s)
    npairs = len(cl)
    smcd = sum(1 for c in cl if smc_mode(c) == 1)
    # room again: close the first 20 pairs, then take what is still queued
    for c in cl[:20]:
        c.close()
    for s in sv[:20]:
        s.close()
    cl, sv = cl[20:], sv[20:]
    ls.settimeout(1.0)
    while True:
        try:
            sv.append(ls.accept()[0])
        except socket.timeout:
            break
    peers = {}
    for s in sv:
        peers.setdefault(s.getpeername(), []).append(s)
    names = [c.getsockname() for c in cl]
    dup = [p for p, ss in peers.items() if len(ss) > 1]
    stray = [p for p in peers if p not in names]
    missing = [n for n in names if n not in peers]
    bad = []
    for i, c in enumerate(cl):
        ss = peers.get(names[i])
        if not ss or len(ss) != 1:
            continue
        s = ss[0]
        s.settimeout(3)
        c.settimeout(3)
        try:
            c.sendall(b"ping-%d" % i)
            got = s.recv(100)
            s.sendall(b"pong-%d" % i)
            back = c.recv(100)
            if got != b"ping-%d" % i or back != b"pong-%d" % i:
                bad.append((i, got, back))
        except OSError as e:
            bad.append((i, repr(e)))
    if dup or stray or missing or bad or where is None or (UNDER_SMCRUN and smcd < npairs // 2):
        print("connect-emfile: %d pairs (%d SMC-D), EMFILE at %s; connections accepted twice %r, from no client %r, "
              "never accepted %r, bytes wrong %r" % (npairs, smcd, where, dup[:3], stray[:3], missing[:3], bad[:3]))
        return 1
    print("connect-emfile: EMFILE at %s after %d pairs (%d SMC-D; limit %d); %d connections, each accepted once, "
          "bytes both ways" % (where, npairs, smcd, LIMIT, len(cl)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
