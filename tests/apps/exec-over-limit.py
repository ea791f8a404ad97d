#!/usr/bin/env python3
# Run under smcrun against an smcd started with --max-clients-per-uid 1: this process
# takes the uid's one control connection, and each child it forks execs cat(1) with an
# accepted SMC-D connection as its stdin and stdout (inetd's pattern). The new image
# needs a control connection of its own to take the connection over (ADOPT); smcd
# admits one beyond the limit for that (smcd-tunables(5)), so cat echoes every byte.
# Before, smcd refused it and cat got a reset connection ("Connection reset by peer";
# helper 112: socat fork EXEC:cat with 150 clients of one uid, 24 reset).
# Then 48 such cats at once, more than the 32 connections smcd admits beyond the limit
# before they adopt: each takes its connection over from this process (which handed
# it on) and so stops counting against those 32 (before: resets from the 33rd).
# A second process of the uid then connects: beyond the limit it may not make new
# connections, so it goes on over TCP with reason SMCD_DECL_MAXCLIENTS (counted by
# smcd; before, such a client fell back uncounted, as NOSMCDDEV), and its bytes arrive;
# with 32 idle connections beyond the limit held, a further process is refused at
# HELLO and its connect goes to TCP with that reason too (before: NOSMCDDEV).
# Prints one line; exit status 0 only if all that held.
import os
import socket
import struct
import subprocess
import sys
import threading

SOL_SMC = 286
SMC_PROTO_MODE = 0x5301
SMC_PROTO_FALLBACK_REASON = 0x5302
MODE_SMCD = 1
MODE_TCP = 2
MAXCLIENTS = 0x0B050000


def smc_info(s):
    try:
        mode = struct.unpack("i", s.getsockopt(SOL_SMC, SMC_PROTO_MODE, 4))[0]
        reason = struct.unpack("I", s.getsockopt(SOL_SMC, SMC_PROTO_FALLBACK_REASON, 4))[0]
        return mode, reason
    except OSError:
        return 0, 0


def recv_all(s):
    out = bytearray()
    while True:
        b = s.recv(65536)
        if not b:
            return bytes(out)
        out += b


def cat_on(s):
    """fork, and exec cat(1) with accepted connection @s as its stdin and stdout
    (inetd's pattern); @s is closed here. Returns the child's pid."""
    pid = os.fork()
    if pid == 0:
        try:
            os.dup2(s.fileno(), 0)
            os.dup2(s.fileno(), 1)
            os.execvp("cat", ["cat"])
        finally:
            os._exit(127)
    s.close()
    return pid


def second_process(ls, port, what, bad):
    """Run SECOND (another process of the uid) against listener @ls: it must go to TCP
    with reason SMCD_DECL_MAXCLIENTS and its bytes arrive; else a line in @bad."""
    p = subprocess.Popen([sys.executable, "-c", SECOND, str(port)], stdout=subprocess.PIPE, text=True)
    s, _ = ls.accept()
    s.settimeout(10)
    got = recv_all(s)
    out = p.communicate(timeout=20)[0].split()
    if p.returncode != 0 or out != [str(MODE_TCP), str(MAXCLIENTS)] or got != b"second process":
        bad.append("%s: exit %d, mode and reason %r (want %d %d), server got %r" %
                   (what, p.returncode, out, MODE_TCP, MAXCLIENTS, got))


SECOND = r"""
import socket, struct, sys
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
mode = struct.unpack("i", c.getsockopt(286, 0x5301, 4))[0]
reason = struct.unpack("I", c.getsockopt(286, 0x5302, 4))[0]
c.sendall(b"second process")
c.close()
print(mode, reason)
"""


def main():
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(64)
    port = ls.getsockname()[1]
    bad = []
    for i in range(3):
        c = socket.create_connection(("127.0.0.1", port))
        s, _ = ls.accept()
        mode = smc_info(c)[0]
        if mode != MODE_SMCD:
            bad.append("connection %d: mode %d, not SMC-D" % (i, mode))
        pid = cat_on(s)
        data = os.urandom(200000 + 7 * i)  # larger than the ring: cat must keep reading
        t = threading.Thread(target=lambda: (c.sendall(data), c.shutdown(socket.SHUT_WR)))
        t.start()
        c.settimeout(20)
        got = recv_all(c)
        t.join()
        c.close()
        _, st = os.waitpid(pid, 0)
        if got != data or st != 0:
            bad.append("connection %d: cat echoed %d of %d bytes (%s), exit status %d" %
                       (i, len(got), len(data), "same" if got == data else "different", st))
    # many at once (inetd under load): 48 exec'd cats alive together, more than the 32
    # connections smcd admits beyond the limit before they adopt; an adopter takes
    # the connection over from this process, which handed it on (before: resets)
    n = 48
    cl = [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]
    smcd_n = sum(smc_info(c)[0] == MODE_SMCD for c in cl)
    pids = []
    for i in range(n):
        s, _ = ls.accept()
        pid = cat_on(s)
        pids.append(pid)
    msgs = [os.urandom(1000 + i) for i in range(n)]
    for c, m in zip(cl, msgs):
        c.sendall(m)
        c.shutdown(socket.SHUT_WR)
    echoed = 0
    for c, m in zip(cl, msgs):
        c.settimeout(20)
        try:
            echoed += recv_all(c) == m
        except OSError:
            pass
        c.close()
    failed = sum(os.waitpid(pid, 0)[1] != 0 for pid in pids)
    if smcd_n != n or echoed != n or failed:
        bad.append("%d at once: %d SMC-D, %d echoed, %d cat failed" % (n, smcd_n, echoed, failed))
    # a second process of the uid: over the limit, TCP with the reason
    second_process(ls, port, "second process", bad)
    # 32 control connections that adopt nothing fill what smcd admits beyond the
    # limit: the next process's HELLO is refused, and its connect goes over TCP with
    # the same reason (before: SMC_CLC_DECL_NOSMCDDEV, as if there were no smcd)
    held = []
    path = os.path.join(os.environ.get("SMCD_RUNTIME_DIR", "/run/smcd"), "smcd.sock")
    for i in range(32):
        u = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        u.connect(path)
        u.send(struct.pack("<IHHII", 0x64434D53, 1, 1, 32, i + 1) + struct.pack("<IIII", 1, 6, 0, 0))
        u.settimeout(5)
        u.recv(512)  # HELLO_REPLY
        held.append(u)
    second_process(ls, port, "a process refused at HELLO", bad)
    for u in held:
        u.close()
    if bad:
        print("exec-over-limit: " + "; ".join(bad))
        return 1
    print("exec-over-limit: 3 connections handed to exec'd cat beyond max_clients_per_uid 1, every byte "
          "echoed; %d at once, all echoed; a second process went to TCP, reason SMCD_DECL_MAXCLIENTS, "
          "and so did one refused at HELLO" % n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
