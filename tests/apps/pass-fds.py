#!/usr/bin/env python3
# Connections passed to another process over a unix socket (SCM_RIGHTS), as node's
# cluster module, a master that accepts for its workers, or multiprocessing do. Under
# smcrun the connection stays SMC-D in the receiving process; every case also holds
# over plain TCP. The worker is a new process (exec of this script), not a fork: it
# knows nothing of the connection but the descriptor it receives.
#  1. accept-and-pass: the master accepts, passes the connection and closes its copy;
#     the worker echoes 256 KiB + 7 bytes and closes: the client gets every byte, in
#     order, then EOF.
#  2. pass-connecting-side: the master connects, passes its client socket and closes
#     it; the worker sends 1 MiB + 3 bytes and half-closes: the accepted side reads
#     them and EOF, answers, and the worker reads the answer.
#  3. shared-after-pass: the master keeps its copy; the worker writes, then the master
#     writes: the peer reads both in that order; the worker's close ends nothing (no
#     EOF), the master's close then gives EOF.
#  4. corked-before-pass: TCP_CORK holds 100 bytes when the master passes the
#     connection and closes it; the worker uncorked sends more: the peer gets the 100
#     bytes first, then the worker's.
#  5. other-descriptors: a pipe and a unix socket passed in the same message as a
#     connection arrive unchanged, and the connection works.
#  6. addresses: getsockname/getpeername in the worker are the master's.
#  7. listener: the master passes its listening socket and closes it; the worker
#     accepts two connections the master makes, blocking, and echoes 64 KiB + 3 on
#     each (under smcrun the listener arrives as a TCP listener and is an SMC
#     listener in the worker: its connections are SMC-D); fstat() says socket on
#     both sides.
#  8. named-channel: a worker (under smcrun too) connected to the master over a named
#     unix socket gets the connection (the client sent "ping" first) and reads "ping"
#     from it; the master answers on its copy.
# Prints one line; exit status 0 only if every case held.
import os
import socket
import stat
import subprocess
import sys
import tempfile

from smcapp import is_smcd
from streams import expect_eof, listener, recv_all

ECHO = bytes(range(256)) * 1024 + b"1234567"


def worker(chan_fd):
    chan = socket.socket(fileno=chan_fd)
    while True:
        msg, fds, _, _ = socket.recv_fds(chan, 64, 4)
        if not msg:
            return
        cmd = msg.decode()
        if cmd == "echo":
            c = socket.socket(fileno=fds[0])
            n = len(ECHO)
            got = 0
            while got < n:
                b = c.recv(65536)
                if not b:
                    break
                c.sendall(b)
                got += len(b)
            c.close()
            chan.sendall(b"done")
        elif cmd == "send":
            c = socket.socket(fileno=fds[0])
            c.sendall(b"w" * (1 << 20) + b"xyz")
            c.shutdown(socket.SHUT_WR)
            ans = recv_all(c, 6)
            c.close()
            chan.sendall(ans)
        elif cmd == "write-close":
            c = socket.socket(fileno=fds[0])
            c.sendall(b"from-worker;")
            c.close()
            chan.sendall(b"done")
        elif cmd == "more":
            c = socket.socket(fileno=fds[0])
            c.sendall(b"B" * 50)
            c.close()
            chan.sendall(b"done")
        elif cmd == "mixed":
            r, u, conn = fds
            data = os.read(r, 5)
            os.close(r)
            u = socket.socket(fileno=u)
            u.sendall(b"unix")
            u.close()
            c = socket.socket(fileno=conn)
            c.sendall(data)
            c.close()
            chan.sendall(b"done")
        elif cmd == "listen":
            is_sock = stat.S_ISSOCK(os.fstat(fds[0]).st_mode)
            ls = socket.socket(fileno=fds[0])
            for _ in range(2):
                c, _ = ls.accept()
                data = recv_all(c, 65539)
                c.sendall(data)
                c.close()
            ls.close()
            chan.sendall(b"done" if is_sock else b"nost")
        elif cmd == "probe":
            with open("/proc/self/maps") as f:
                lib = "lib" if "libsmcrun.so" in f.read() else "nolib"
            c = socket.socket(fileno=fds[0])
            c.settimeout(5)
            try:
                got = "data %r" % c.recv(100)
            except ConnectionResetError:
                got = "ECONNRESET"
            except OSError as ex:
                got = type(ex).__name__
            c.close()
            chan.sendall(("%s|%s" % (lib, got)).encode().ljust(64))
        elif cmd == "addrs":
            c = socket.socket(fileno=fds[0])
            chan.sendall(("%s|%s" % (c.getsockname(), c.getpeername())).encode())
            c.close()
        else:
            return


def start_worker():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "worker", str(b.fileno())],
                         pass_fds=[b.fileno()])
    b.close()
    return a, p


def reply(chan, n):
    return recv_all(chan, n)


def case_accept_and_pass(chan):
    ls, addr = listener()
    c = socket.create_connection(addr)
    s, _ = ls.accept()
    ls.close()
    socket.send_fds(chan, [b"echo"], [s.fileno()])
    s.close()
    import threading
    t = threading.Thread(target=c.sendall, args=(ECHO,))
    t.start()
    back = recv_all(c, len(ECHO))
    t.join()
    ok = back == ECHO and reply(chan, 4) == b"done" and expect_eof(c)
    c.close()
    return ok, "accept-and-pass"


def case_pass_connecting_side(chan):
    ls, addr = listener()
    c = socket.create_connection(addr)
    s, _ = ls.accept()
    ls.close()
    socket.send_fds(chan, [b"send"], [c.fileno()])
    c.close()
    got = recv_all(s, (1 << 20) + 3)
    ok = got == b"w" * (1 << 20) + b"xyz" and expect_eof(s)
    s.sendall(b"answer")
    ok = ok and reply(chan, 6) == b"answer"
    s.close()
    return ok, "pass-connecting-side"


def case_shared_after_pass(chan):
    ls, addr = listener()
    c = socket.create_connection(addr)
    s, _ = ls.accept()
    ls.close()
    socket.send_fds(chan, [b"write-close"], [s.fileno()])
    ok = reply(chan, 4) == b"done"
    s.sendall(b"from-master")
    want = b"from-worker;from-master"
    ok = ok and recv_all(c, len(want)) == want
    # the worker closed its copy: no end of stream while the master holds one
    ok = ok and not expect_eof(c, 0.5)
    s.close()
    ok = ok and expect_eof(c)
    c.close()
    return ok, "shared-after-pass"


def case_corked_before_pass(chan):
    ls, addr = listener()
    c = socket.create_connection(addr)
    s, _ = ls.accept()
    ls.close()
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
    s.sendall(b"A" * 100)
    socket.send_fds(chan, [b"more"], [s.fileno()])
    s.close()
    ok = reply(chan, 4) == b"done"
    ok = ok and recv_all(c, 150) == b"A" * 100 + b"B" * 50 and expect_eof(c)
    c.close()
    return ok, "corked-before-pass"


def case_other_descriptors(chan):
    ls, addr = listener()
    c = socket.create_connection(addr)
    s, _ = ls.accept()
    ls.close()
    r, w = os.pipe()
    os.write(w, b"piped")
    os.close(w)
    u1, u2 = socket.socketpair()
    socket.send_fds(chan, [b"mixed"], [r, u2.fileno(), s.fileno()])
    os.close(r)
    u2.close()
    s.close()
    ok = reply(chan, 4) == b"done"
    ok = ok and recv_all(u1, 4) == b"unix" and recv_all(c, 5) == b"piped" and expect_eof(c)
    u1.close()
    c.close()
    return ok, "other-descriptors"


def case_addresses(chan):
    ls, addr = listener()
    c = socket.create_connection(addr)
    s, _ = ls.accept()
    ls.close()
    want = "%s|%s" % (s.getsockname(), s.getpeername())
    socket.send_fds(chan, [b"addrs"], [s.fileno()])
    s.close()
    got = chan.recv(200).decode()
    ok = got == want and expect_eof(c)
    c.close()
    return ok, "addresses"


def case_listener(chan):
    ls, addr = listener()
    ok = stat.S_ISSOCK(os.fstat(ls.fileno()).st_mode)  # (an SMC listener too)
    socket.send_fds(chan, [b"listen"], [ls.fileno()])
    ls.close()
    data = os.urandom(65539)
    for _ in range(2):
        c = socket.create_connection(addr)
        c.sendall(data)
        ok = ok and recv_all(c, len(data)) == data and expect_eof(c)
        c.close()
    ok = ok and reply(chan, 4) == b"done"
    return ok, "listener"


def case_named_channel(_chan):
    d = tempfile.mkdtemp()
    path = os.path.join(d, "chan")
    ul = socket.socket(socket.AF_UNIX)
    ul.bind(path)
    ul.listen(1)
    p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "worker-at", path])
    ul.settimeout(30)
    chan, _ = ul.accept()
    ul.close()
    os.unlink(path)
    os.rmdir(d)
    lib, got, smc = "?", "?", False
    try:
        ls, addr = listener()
        c = socket.create_connection(addr)
        s, _ = ls.accept()
        ls.close()
        smc = is_smcd(s)
        c.sendall(b"ping")
        socket.send_fds(chan, [b"probe"], [s.fileno()])
        lib, got = recv_all(chan, 64).decode().strip().split("|")
        ok = lib == ("lib" if smc else "nolib") and got == "data b'ping'"
        s.sendall(b"pong")
        ok = ok and recv_all(c, 4) == b"pong"
        s.close()
        ok = ok and expect_eof(c)
        c.close()
    finally:
        chan.close()
        p.wait(timeout=30)
    return ok, "named-channel (worker %s: %s%s)" % (lib, got, ", SMC-D" if smc else "")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "worker":
        worker(int(sys.argv[2]))
        return
    if len(sys.argv) == 3 and sys.argv[1] == "worker-at":
        u = socket.socket(socket.AF_UNIX)
        u.connect(sys.argv[2])
        worker(u.detach())
        return
    chan, p = start_worker()
    results = []
    try:
        for case in (case_accept_and_pass, case_pass_connecting_side, case_shared_after_pass,
                     case_corked_before_pass, case_other_descriptors, case_addresses, case_listener,
                     case_named_channel):
            results.append(case(chan))
    finally:
        chan.close()
        p.wait(timeout=30)
    bad = [name for ok, name in results if not ok]
    print("%d passed-connection cases, failed: %s; %s" % (len(results), ", ".join(bad) or "none", results[-1][1]))
    sys.exit(1 if bad or p.returncode != 0 else 0)


if __name__ == "__main__":
    main()
