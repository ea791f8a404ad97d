#!/usr/bin/env python3
# SMCRUN_INHERIT entries that name the program's own descriptors (set by hand: the
# library sets it only for its own sockets, and smcrun unsets it) must leave them as
# they are (helper 98 found a listener entry that closed or took over the program's
# own socketpair). Run without the preload: this script makes, at fixed numbers, a TCP
# listener (3), a SOCK_SEQPACKET pair with the second end nonblocking (4, 5), a
# SOCK_STREAM pair (6, 7) and an AF_INET listener (8), then execs itself under the
# library (LD_PRELOAD=$SMCRUN_LIB) with each forged value; the new image checks that
# 4..7 are open with their flags unchanged and still carry data between them, and that
# listener 8 accepts with a right IPv4 peer address, and listener 3 stays blocking.
# Pairs made here, and pairs made by a process of this uid that is gone since. Prints
# one line; exit 0 if all held.
import fcntl
import os
import socket
import sys

FORGED = [
    ("L:3:0:4:1:5", {}),                          # a listener with "its" channel and copy
    ("L:3:0:4:1:5", {"SMCPROTO_DISABLE": "1"}),   # the same in an image that takes no SMC
    ("L:3:4:4:ffffffffffffffff:5", {}),
    ("L:8:0:4:1:5,L:3:0:4:2:5", {}),              # two entries naming one pair
    ("L:3:0:6:1:7", {}),                          # a stream pair as the channel
    ("L:8:1", {}),                                # an INET6 flag on an AF_INET listener
    ("6:-1:1:2:16384:3:16384:0:0:0", {}),         # a connection entry naming 6
    ("L:3:4:4:1:5,6:-1:1:2:16384:3:16384:0:0:0", {"SMCD_RUNTIME_DIR": "/nonexistent"}),  # no smcd
    ("L:3:4:4:1", {}),                            # the nonblocking flag, no copy
    # the pairs made by a process of this uid (smcd's, when both run as root) that is
    # gone: only an smcd listed in the instance file counts
    ("L:3:0:4:1:5", {"GONE": "1"}),
    ("L:3:4:4:ffffffffffffffff:5,6:-1:1:2:16384:3:16384:0:0:0", {"GONE": "1"}),
]


def child(case):
    bad = []
    for fd in (4, 5, 6, 7):
        try:
            fl = fcntl.fcntl(fd, fcntl.F_GETFD)
        except OSError as e:
            bad.append("fd %d: %s" % (fd, e.strerror))
            continue
        if fl & fcntl.FD_CLOEXEC:
            bad.append("fd %d got close-on-exec" % fd)
    if fcntl.fcntl(3, fcntl.F_GETFL) & os.O_NONBLOCK:
        bad.append("listener 3 turned nonblocking")
    if not bad:
        nb = fcntl.fcntl(5, fcntl.F_GETFL) & os.O_NONBLOCK
        if not nb or fcntl.fcntl(4, fcntl.F_GETFL) & os.O_NONBLOCK:
            bad.append("the pair's O_NONBLOCK changed")
        for a, b in ((5, 4), (4, 5), (7, 6), (6, 7)):
            sa, sb = socket.socket(fileno=os.dup(a)), socket.socket(fileno=os.dup(b))
            sb.settimeout(2)
            try:
                sa.send(b"hello %d" % a)
                got = sb.recv(64)
                if got != b"hello %d" % a:
                    bad.append("%d -> %d: %r" % (a, b, got))
            except OSError as e:
                bad.append("%d -> %d: %s" % (a, b, e))
            sa.close()
            sb.close()
    ls = socket.socket(fileno=8)
    c = socket.create_connection(ls.getsockname(), timeout=5)
    a, peer = ls.accept()
    if a.family != socket.AF_INET or peer[0] != "127.0.0.1" or peer[1] != c.getsockname()[1]:
        bad.append("accept on 8: %s %r" % (a.family, peer))
    a.sendall(b"x" * 1000)
    got = b""
    while len(got) < 1000:
        got += c.recv(1000)
    if got != b"x" * 1000:
        bad.append("bytes on 8's connection")
    print("case %d: %s" % (case, "; ".join(bad) if bad else "ok"))
    sys.exit(1 if bad else 0)


if len(sys.argv) > 2 and sys.argv[1] == "child":
    child(int(sys.argv[2]))

lib = os.environ["SMCRUN_LIB"]
results, failed = [], 0
for i, (val, extra) in enumerate(FORGED):
    t = socket.socket()
    t.bind(("127.0.0.1", 0))
    t.listen(8)
    if extra.get("GONE"):
        # made by a child that passes them here and exits
        r, w = socket.socketpair()
        if os.fork() == 0:
            a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            c, d = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            socket.send_fds(w, [b"x"], [a.fileno(), b.fileno(), c.fileno(), d.fileno()])
            os._exit(0)
        _, fds, _, _ = socket.recv_fds(r, 1, 4)
        os.wait()
        r.close()
        w.close()
        p4, p5, p6, p7 = (socket.socket(fileno=f) for f in fds)
    else:
        p4, p5 = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        p6, p7 = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    l8 = socket.socket()
    l8.bind(("127.0.0.1", 0))
    l8.listen(8)
    p5.setblocking(False)
    pid = os.fork()
    if pid == 0:
        high = [(fcntl.fcntl(s.fileno(), fcntl.F_DUPFD, 100), fd)
                for s, fd in ((t, 3), (p4, 4), (p5, 5), (p6, 6), (p7, 7), (l8, 8))]
        for h, fd in high:
            os.dup2(h, fd)  # (inheritable)
        env = dict(os.environ)
        env.update(extra)
        env["SMCRUN_INHERIT"] = val
        # (after a sanitizer runtime the test preloads, if any)
        env["LD_PRELOAD"] = (env.get("LD_PRELOAD", "") + ":" + lib).strip(":")
        os.closerange(9, 4096)
        os.execve(sys.executable, [sys.executable, sys.argv[0], "child", str(i)], env)
    _, st = os.waitpid(pid, 0)
    for s in (t, p4, p5, p6, p7, l8):
        s.close()
    if os.waitstatus_to_exitcode(st) != 0:
        failed += 1
        results.append("%r: failed" % val)
print("%d forged entries, %d left the program's descriptors as they were%s" %
      (len(FORGED), len(FORGED) - failed, (": " + ", ".join(results)) if results else ""))
sys.exit(1 if failed else 0)
