#!/usr/bin/env python3
# The programs of tests/test-netns-smcd.sh (SMC-D across network namespaces): servers
# and clients that the script runs inside its namespaces, with or without smcrun.
# Each client checks what it sees itself and prints "ok - ..." / "not ok - ..." lines
# (exit status 1 if one is "not ok"); the script adds smcd's counters.
#
#   server --bind ADDR --port-file FILE [--once]
#       listen on ADDR (port 0), write the port to FILE, serve every connection in a
#       thread. A connection carries requests of 9 bytes (op, 8-byte big-endian size):
#         E: SIZE bytes, echoed as they come; then the trailer
#         S: SIZE bytes, only read (a sink); then the trailer
#         X: the trailer, then the process exits (os._exit, nothing closed) 0.5 s later
#       The trailer (4-byte length, JSON): the bytes' sha256 and count, and the
#       server end's mode, fallback reason, getsockname and getpeername.
#       --once: one connection only; at its end (EOF, reset, timeout) print one JSON
#       line {"outcome": ..., "bytes": N, "mode": M} and exit.
#   client --addr A --port P --label L --expect smcd|tcp|plain [--reason NAME]
#          [--server-expect smcd|tcp|plain|any] [--sizes N,N,...] [--conns N]
#          [--local-ip IP]
#       N connections (1: a blocking connect; more: concurrent threads, each with a
#       nonblocking connect), each echoing every size (random bytes, both directions
#       checked by sha256); the modes of both ends, the fallback reason of the client
#       end when --expect tcp with --reason, and the addresses of both ends (the
#       server end's must mirror the client end's; the client's peer is A:P, its own
#       address IP).
#   refused --addr A --port P --label L
#       a blocking and a nonblocking connect to A:P: both ECONNREFUSED.
#   killme --addr A --port P
#       connect, send a 64 MiB sink request slowly (about 5 s); after the first 4 MiB
#       print {"pid": ..., "mode": ...}; print "finished" if nobody killed it by the end.
#   idle --addr A --port P --label L
#       connect, echo 4097 bytes, ask the server to exit (X), then wait with the
#       connection idle: the client must read EOF (within 10 s).
#   asyncconn --addr A --port P --gated-port G --go FILE --dead-addr D --label L
#             [--want-mode M] [--refused-port R]
#       nonblocking connects as event loops make them (smcrun: SMC-D over CLC). G is a
#       server that accepts only once FILE exists: two connects to it say EINPROGRESS
#       before FILE exists (they used to wait for the server's accept), and until it
#       accepts they are not writable (poll, epoll), send says EAGAIN, SO_ERROR 0,
#       connect EALREADY, none of them waiting; a third one's shutdown(SHUT_WR) returns
#       at once and applies once it accepts (EOF both ways). A connect to D:P (SYNs go
#       nowhere) stays in SYN_SENT: send/recv say EAGAIN, connect EALREADY, SO_ERROR 0,
#       getpeername ENOTCONN (another, blocking, with MSG_DONTWAIT: EAGAIN), and close
#       ends it at once. Blocking recv/send on three more end as TCP's in SYN_SENT:
#       EAGAIN after SO_RCVTIMEO / SO_SNDTIMEO, EINTR at a signal (their connects then
#       complete and echo); a closed fd polled beside one: POLLNVAL (select: EBADF).
#       Then FILE is made (a poll() and a select() sleep on the two queued ones
#       meanwhile: woken by the connection, not polling in slices): the two queued ones
#       end SMC-D with SO_ERROR 0 and echo. To P: epoll (edge-triggered, added before
#       connect; level-triggered, added after), connect() again once writable (hiredis),
#       a blocking send right after EINPROGRESS (curl's pattern after poll), 20 connects
#       at once from one thread, 10 closed right after EINPROGRESS, and (R) a connect
#       refused, then ECONNABORTED, then the same socket to P: every one SMC-D with its
#       echo right (M 3: SMC-R; the test-smcr-vm.sh case async runs it between two
#       soft-RoCE hosts).
import argparse
import errno
import glob
import hashlib
import json
import os
import re
import select
import signal
import socket
import struct
import sys
import threading
import time

SOL_SMC = 286
SMC_PROTO_MODE = 0x5301
SMC_PROTO_FALLBACK_REASON = 0x5302
MODES = {1: "SMC-D", 2: "TCP", 3: "SMC-R", None: "plain (no library)"}
WANT = {"smcd": 1, "tcp": 2, "plain": None}


def reason_names():
    """The SMC_CLC_DECL_* / SMCD_DECL_* codes of libsmcproto/*.h, by value."""
    names = {}
    here = os.path.dirname(os.path.abspath(__file__))
    for h in glob.glob(os.path.join(here, "..", "libsmcproto", "*.h")):
        with open(h) as f:
            for m in re.finditer(r"#define\s+(SMCD?_(?:CLC_)?DECL_\w+)\s+(0x[0-9a-fA-F]+)u?", f.read()):
                names.setdefault(int(m.group(2), 16), m.group(1))
    names.setdefault(0x03010000, "SMC_CLC_DECL_PEERNOSMC")
    return names


REASONS = reason_names()
CODES = {v: k for k, v in REASONS.items()}


def rname(r):
    if r is None:
        return "none"
    if r == 0:
        return "0"
    return REASONS.get(r, "0x%08x" % r)


def end_info(s):
    """(mode, reason) of socket @s: mode 1 SMC-D, 2 TCP, None without the library."""
    try:
        mode = s.getsockopt(SOL_SMC, SMC_PROTO_MODE)
    except OSError:
        return None, None
    try:
        reason = struct.unpack("I", s.getsockopt(SOL_SMC, SMC_PROTO_FALLBACK_REASON, 4))[0]
    except OSError:
        reason = None
    return mode, reason


def addr(a):
    return "%s:%d" % (a[0], a[1])


def recv_exact(s, n):
    buf = bytearray()
    while len(buf) < n:
        b = s.recv(n - len(buf))
        if not b:
            break
        buf += b
    return bytes(buf)


def send_json(s, obj):
    b = json.dumps(obj).encode()
    s.sendall(struct.pack(">I", len(b)) + b)


def recv_json(s):
    h = recv_exact(s, 4)
    if len(h) != 4:
        raise EOFError("EOF instead of the trailer")
    n = struct.unpack(">I", h)[0]
    b = recv_exact(s, n)
    if len(b) != n:
        raise EOFError("EOF in the trailer")
    return json.loads(b)


# ---------------------------------------------------------------- server


def serve(s, once):
    mode, reason = end_info(s)
    total = 0
    outcome = "eof"
    try:
        info = {"mode": mode, "reason": reason, "sockname": list(s.getsockname()[:2]),
                "peername": list(s.getpeername()[:2])}
    except OSError:  # (reset before the accept, as over TCP: ENOTCONN)
        info = {"mode": mode, "reason": reason}
        outcome = "reset"
    s.settimeout(15 if once else 60)
    try:
        while outcome == "eof":
            hdr = recv_exact(s, 9)
            if len(hdr) < 9:
                outcome = "eof" if not hdr else "eof (in a header)"
                break
            op, size = hdr[:1], struct.unpack(">Q", hdr[1:])[0]
            if op == b"X":
                send_json(s, dict(info, bye=True))
                time.sleep(0.5)
                os._exit(0)
            h = hashlib.sha256()
            n = 0
            while n < size:
                b = s.recv(min(1 << 20, size - n))
                if not b:
                    break
                h.update(b)
                n += len(b)
                total += len(b)
                if op == b"E":
                    s.sendall(b)
            if n < size:
                outcome = "eof (after %d of %d bytes)" % (n, size)
                break
            send_json(s, dict(info, sha256=h.hexdigest(), n=n))
    except ConnectionResetError:
        outcome = "reset"
    except socket.timeout:
        outcome = "timeout"
    except OSError as e:
        outcome = "error %s" % e
    s.close()
    if once:
        print(json.dumps({"outcome": outcome, "bytes": total, "mode": mode, "reason": reason}), flush=True)
        os._exit(0)


def server(a):
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if a.reuseport:
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    ls.bind((a.bind, a.port))
    ls.listen(a.backlog)
    with open(a.port_file + ".tmp", "w") as f:
        f.write("%d\n" % ls.getsockname()[1])
    os.rename(a.port_file + ".tmp", a.port_file)
    if a.worker_uid is not None:
        # nginx's way: the master listens, a forked worker drops to another uid and
        # accepts (the listener stays the master's uid's)
        pid = os.fork()
        if pid:
            ls.close()
            os.waitpid(pid, 0)
            return
        os.setgid(a.worker_uid)
        os.setuid(a.worker_uid)
    if a.accept_after:
        # accept only once this file exists (connections wait in the backlog meanwhile)
        for _ in range(1200):
            if os.path.exists(a.accept_after):
                break
            time.sleep(0.05)
    while True:
        s, _ = ls.accept()
        if a.once:
            ls.close()
            serve(s, True)
        threading.Thread(target=serve, args=(s, False), daemon=True).start()


# ---------------------------------------------------------------- clients


class Checks:
    def __init__(self, label):
        self.label = label
        self.failed = False

    def check(self, good, what):
        print("%s - %s: %s" % ("ok" if good else "not ok", self.label, what), flush=True)
        if not good:
            self.failed = True


def connect(dst, nonblock):
    s = socket.socket()
    if not nonblock:
        s.settimeout(10)
        s.connect(dst)
        s.settimeout(30)
        return s
    s.setblocking(False)
    err = s.connect_ex(dst)
    if err == errno.EINPROGRESS:
        _, w, _ = select.select([], [s], [], 10)
        if not w:
            s.close()
            raise TimeoutError("nonblocking connect: not writable in 10 s")
        err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if err:
        s.close()
        raise OSError(err, os.strerror(err))
    s.settimeout(30)
    return s


def echo(s, size):
    """Echo @size random bytes through @s; None if every byte came back and the
    server's sha256 matches, else what went wrong. Also returns the trailer."""
    data = os.urandom(size)
    want = hashlib.sha256(data).hexdigest()
    err = []

    def send():
        try:
            s.sendall(b"E" + struct.pack(">Q", size) + data)
        except OSError as e:
            err.append("send: %s" % e)

    t = threading.Thread(target=send)
    t.start()
    h = hashlib.sha256()
    n = 0
    try:
        while n < size:
            b = s.recv(min(1 << 20, size - n))
            if not b:
                break
            h.update(b)
            n += len(b)
        trailer = recv_json(s) if n == size else None
    except (OSError, EOFError, ValueError) as e:
        err.append("receive: %s" % e)
        trailer = None
    t.join(30)
    if err:
        return "; ".join(err), trailer
    if n != size:
        return "EOF after %d of %d bytes" % (n, size), trailer
    if h.hexdigest() != want:
        return "the echo differs (sha256)", trailer
    if trailer.get("sha256") != want or trailer.get("n") != size:
        return "the server received other bytes (sha256 %s, %s bytes)" % (trailer.get("sha256"), trailer.get("n")), trailer
    return None, trailer


def size_name(n):
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div and n % div == 0:
            return "%d %s" % (n // div, unit)
        if n >= div and n % div == 1:
            return "%d %s+1" % (n // div, unit)
    return "%d B" % n


def one_conn(a, dst, sizes, nonblock):
    """Everything one connection saw, as a dict."""
    r = {"errors": []}
    try:
        s = connect(dst, nonblock)
    except OSError as e:
        r["connect"] = str(e)
        return r
    r["mode"], r["reason"] = end_info(s)
    r["sock"] = s.getsockname()[:2]
    r["peer"] = s.getpeername()[:2]
    r["echo"] = []
    for size in sizes:
        err, trailer = echo(s, size)
        r["echo"].append((size, err))
        if trailer:
            r["server"] = trailer
        if err:
            break
    s.close()
    return r


def client(a):
    c = Checks(a.label)
    dst = (a.addr, a.port)
    sizes = [int(x) for x in a.sizes.split(",")]
    want = WANT[a.expect]
    if a.conns == 1:
        res = [one_conn(a, dst, sizes, False)]
    else:
        res = [None] * a.conns
        go = threading.Barrier(a.conns)

        def run(i):
            try:
                go.wait(10)
            except threading.BrokenBarrierError:
                pass
            res[i] = one_conn(a, dst, sizes, True)

        th = [threading.Thread(target=run, args=(i,)) for i in range(a.conns)]
        for t in th:
            t.start()
        for t in th:
            t.join(90)
        res = [x if x is not None else {"connect": "thread did not finish", "errors": []} for x in res]
    n = len(res)
    conn_err = [x["connect"] for x in res if "connect" in x]
    c.check(not conn_err, "%d connection%s to %s" % (n, "s" if n > 1 else "", addr(dst)) +
            (" (%d failed: %s)" % (len(conn_err), conn_err[0]) if conn_err else ""))
    done = [x for x in res if "connect" not in x]
    if not done:
        return c
    # modes of both ends
    if n == 1:
        x = done[0]
        c.check(x["mode"] == want, "client end %s (mode %s, reason %s)" % (MODES[want], MODES.get(x["mode"], x["mode"]),
                                                                       rname(x["reason"])))
        if a.expect == "tcp" and a.reason:
            c.check(x["reason"] == CODES.get(a.reason, -1), "client end's fallback reason %s (got %s)" %
                    (a.reason, rname(x["reason"])))
        srv = x.get("server")
        if a.server_expect != "any":
            sw = WANT[a.server_expect]
            c.check(srv is not None and srv["mode"] == sw, "server end %s (mode %s, reason %s)" % (
                MODES[sw], MODES.get(srv["mode"], srv["mode"]) if srv else "?", rname(srv["reason"]) if srv else "?"))
        for size, err in x["echo"]:
            c.check(err is None, "echo of %s both ways, sha256 checked%s" % (size_name(size), ": " + err if err else ""))
        for size in sizes[len(x["echo"]):]:
            c.check(False, "echo of %s: not tried after the failure" % size_name(size))
    else:
        bad = [x["echo"] for x in done if any(e for _, e in x["echo"]) or len(x["echo"]) != len(sizes)]
        c.check(not bad and len(done) == n, "%d of %d connections echoed %s both ways, sha256 checked%s" % (
            len(done) - len(bad), n, "+".join(size_name(s) for s in sizes),
            "; first failure: %s" % [e for _, e in bad[0] if e] if bad else ""))
        cm = {}
        for x in done:
            k = "%s/%s" % (MODES.get(x["mode"], x["mode"]), rname(x["reason"]))
            cm[k] = cm.get(k, 0) + 1
        good = sum(1 for x in done if x["mode"] == want)
        c.check(good == n, "%d of %d client ends %s (%s)" % (good, n, MODES[want], cm))
        if a.server_expect != "any":
            sw = WANT[a.server_expect]
            sm = {}
            for x in done:
                k = MODES.get(x["server"]["mode"], x["server"]["mode"]) if x.get("server") else "?"
                sm[k] = sm.get(k, 0) + 1
            good = sum(1 for x in done if x.get("server") and x["server"]["mode"] == sw)
            c.check(good == n, "%d of %d server ends %s (%s)" % (good, n, MODES[sw], sm))
    # addresses: as TCP gives them
    badaddr = []
    for x in done:
        sock, peer = tuple(x["sock"]), tuple(x["peer"])
        if peer != dst:
            badaddr.append("client getpeername %s, not %s" % (addr(peer), addr(dst)))
        if a.local_ip and sock[0] != a.local_ip:
            badaddr.append("client getsockname %s, not %s:port" % (addr(sock), a.local_ip))
        srv = x.get("server")
        if srv:
            if tuple(srv["peername"]) != sock:
                badaddr.append("server getpeername %s, not the client's %s" % (addr(srv["peername"]), addr(sock)))
            if tuple(srv["sockname"]) != peer:
                badaddr.append("server getsockname %s, not the client's peer %s" % (addr(srv["sockname"]), addr(peer)))
        else:
            badaddr.append("no trailer from the server: its addresses unknown")
    x = done[0]
    example = "client %s -> %s" % (addr(x["sock"]), addr(x["peer"]))
    if x.get("server"):
        example += ", server %s <- %s" % (addr(x["server"]["sockname"]), addr(x["server"]["peername"]))
    c.check(not badaddr, "getsockname/getpeername of both ends as over TCP (%s)%s" % (
        example, "; %d wrong, first: %s" % (len(badaddr), badaddr[0]) if badaddr else ""))
    return c


def refused(a):
    c = Checks(a.label)
    dst = (a.addr, a.port)
    s = socket.socket()
    s.settimeout(10)
    try:
        s.connect(dst)
        got = "connected (mode %s)" % MODES.get(end_info(s)[0])
    except ConnectionRefusedError:
        got = "ECONNREFUSED"
    except OSError as e:
        got = str(e)
    s.close()
    c.check(got == "ECONNREFUSED", "blocking connect to %s: %s" % (addr(dst), got))
    s = socket.socket()
    s.setblocking(False)
    err = s.connect_ex(dst)
    if err == errno.EINPROGRESS:
        select.select([], [s], [], 10)
        err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    s.close()
    got = errno.errorcode.get(err, str(err)) if err else "connected"
    c.check(got == "ECONNREFUSED", "nonblocking connect to %s: %s" % (addr(dst), got))
    return c


def killme(a):
    s = connect((a.addr, a.port), False)
    mode, reason = end_info(s)
    size = 64 << 20
    s.sendall(b"S" + struct.pack(">Q", size))
    chunk = os.urandom(64 << 10)
    for i in range(size // len(chunk)):
        s.sendall(chunk)
        if i == 63:  # 4 MiB sent
            print(json.dumps({"pid": os.getpid(), "mode": mode, "reason": reason}), flush=True)
        if i >= 63:
            time.sleep(0.005)
    print("finished", flush=True)
    time.sleep(30)


def idle(a):
    c = Checks(a.label)
    try:
        s = connect((a.addr, a.port), False)
    except OSError as e:
        c.check(False, "connect to %s:%d: %s" % (a.addr, a.port, e))
        return c
    mode, reason = end_info(s)
    err, _ = echo(s, 4097)
    c.check(err is None, "echo of 4 KiB+1 (client mode %s, reason %s)%s" % (MODES.get(mode, mode), rname(reason),
                                                                           ": " + err if err else ""))
    s.sendall(b"X" + struct.pack(">Q", 0))
    try:
        bye = recv_json(s)
        c.check(bye.get("bye"), "the server acknowledged, will exit in 0.5 s (server mode %s)" %
                MODES.get(bye.get("mode"), bye.get("mode")))
    except (OSError, EOFError, ValueError) as e:
        c.check(False, "the server's acknowledgement: %s" % e)
    t0 = time.monotonic()
    s.settimeout(10)
    try:
        b = s.recv(100)
        got = "EOF" if b == b"" else "%d bytes" % len(b)
    except socket.timeout:
        got = "nothing in 10 s (hang)"
    except OSError as e:
        got = str(e)
    c.check(got == "EOF", "idle connection, the server's process exited: the client reads %s after %.1f s" % (
        got, time.monotonic() - t0))
    s.close()
    return c


def asyncconn(a):
    c = Checks(a.label)
    gated = (a.addr, a.gated_port)
    dst = (a.addr, a.port)
    made = threading.Event()

    def go_later():
        # (so that a connect() that waits for the server's accept still ends)
        if not made.wait(20):
            open(a.go, "w").close()
    threading.Thread(target=go_later, daemon=True).start()

    def nb_connect(d):
        s = socket.socket()
        s.setblocking(False)
        return s, s.connect_ex(d)

    def errname(e):
        return errno.errorcode.get(e, str(e)) if e else "0"

    def outcomes(calls):
        """What each (name, call) says: "name ok", "name EAGAIN", "name ERRNO"."""
        got = []
        for name, f in calls:
            try:
                f()
                got.append("%s ok" % name)
            except BlockingIOError:
                got.append("%s EAGAIN" % name)
            except OSError as ex:
                got.append("%s %s" % (name, errname(ex.errno)))
        return got

    def finish(s, timeout=30):
        """Wait until writable (poll), then SO_ERROR; the socket made blocking."""
        p = select.poll()
        p.register(s, select.POLLOUT)
        if not p.poll(timeout * 1000):
            return "not writable in %d s" % timeout
        err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        s.settimeout(30)
        return errname(err)

    def check_echo(s, what, size=65536):
        err, _ = echo(s, size)
        mode, reason = end_info(s)  # (after: a blocking send waits for the connect)
        c.check(mode == a.want_mode and err is None, "%s: mode %s, echo of %s: %s" % (
            what, MODES.get(mode, mode), size_name(size), err or "right"))

    # 1. the gated server: queued connects (their CLC waits for the accept)
    q = []
    for i in range(2):
        s, e = nb_connect(gated)
        c.check(e == errno.EINPROGRESS and not os.path.exists(a.go),
                "connect %d to the gated server says %s before it accepts (go file %s)" % (
                    i + 1, errname(e), "made" if os.path.exists(a.go) else "not made"))
        q.append(s)
    time.sleep(0.3)  # (their TCP handshakes done: queued)
    # their SMC handshakes wait for the server's accept: not writable (as kernel SMC's
    # socket), and no call waits for it (an event loop goes on: helper 124's nginx
    # froze for 30 s in SO_ERROR)
    s1 = q[0]
    t0 = time.monotonic()
    p = select.poll()
    p.register(s1, select.POLLOUT)
    ev_poll = p.poll(200)
    ep = select.epoll()
    ep.register(s1.fileno(), select.EPOLLOUT)
    ev_epoll = ep.poll(0.2)
    ep.close()
    try:
        s1.send(b"x")
        snd = "sent"
    except BlockingIOError:
        snd = "EAGAIN"
    err = errname(s1.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR))
    again = errname(s1.connect_ex(gated))
    took = time.monotonic() - t0
    c.check(not ev_poll and not ev_epoll and snd == "EAGAIN" and err == "0" and again == "EALREADY" and took < 2,
            "while the server has not accepted: poll %s, epoll %s, send %s, SO_ERROR %s, connect %s (%.2f s)" % (
                ev_poll, ev_epoll, snd, err, again, took))
    # a shutdown(SHUT_WR) meanwhile: at once, and for the connection once made (the
    # server reads EOF, and so does the client then)
    s5, e5 = nb_connect(gated)
    time.sleep(0.1)
    t0 = time.monotonic()
    try:
        s5.shutdown(socket.SHUT_WR)
        shut = "0"
    except OSError as ex:
        shut = errname(ex.errno)
    shut_took = time.monotonic() - t0
    dead = (a.dead_addr, a.port)
    s3, e = nb_connect(dead)
    c.check(e == errno.EINPROGRESS, "connect 3 (to %s, whose SYNs go nowhere): %s" % (a.dead_addr, errname(e)))
    got = outcomes((("send", lambda: s3.send(b"x")), ("recv", lambda: s3.recv(1))))
    got.append("connect " + errname(s3.connect_ex(dead)))
    got.append("SO_ERROR " + errname(s3.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)))
    got += outcomes((("getpeername", s3.getpeername),))
    want = ["send EAGAIN", "recv EAGAIN", "connect EALREADY", "SO_ERROR 0", "getpeername ENOTCONN"]
    c.check(got == want, "in SYN_SENT as TCP: %s" % ", ".join(got))
    # a blocking socket (after its nonblocking connect) with MSG_DONTWAIT: EAGAIN too
    s4, e = nb_connect(dead)
    s4.setblocking(True)
    got = outcomes((("send", lambda: s4.send(b"x", socket.MSG_DONTWAIT)),
                    ("recv", lambda: s4.recv(1, socket.MSG_DONTWAIT))))
    c.check(e == errno.EINPROGRESS and got == ["send EAGAIN", "recv EAGAIN"],
            "in SYN_SENT, a blocking socket with MSG_DONTWAIT: connect %s, %s" % (errname(e), ", ".join(got)))
    s4.close()
    t0 = time.monotonic()
    s3.close()
    c.check(time.monotonic() - t0 < 5, "close in SYN_SENT returns (%.3f s)" % (time.monotonic() - t0))
    # blocking calls waiting for a connect under way end as TCP's in SYN_SENT: after
    # SO_RCVTIMEO / SO_SNDTIMEO (EAGAIN), and at a signal whose handler raises
    # (EINTR: Python runs the handler); the connects then complete all the same
    waits = []
    for opt in (socket.SO_RCVTIMEO, socket.SO_SNDTIMEO, None):
        s, e = nb_connect(gated)
        time.sleep(0.1)  # (TCP's handshake done: the SMC one waits for the accept)
        s.setblocking(True)
        if opt is not None:
            s.setsockopt(socket.SOL_SOCKET, opt, struct.pack("ll", 0, 300000))

        class Alarm(Exception):
            pass

        def on_alarm(_sig, _frame):
            raise Alarm()
        old_handler = signal.signal(signal.SIGALRM, on_alarm)
        if opt is None:
            signal.setitimer(signal.ITIMER_REAL, 0.3)
        t0 = time.monotonic()
        try:
            if opt == socket.SO_SNDTIMEO:
                s.send(b"x")
            else:
                s.recv(1)
            got = "returned"
        except Alarm:
            got = "EINTR"
        except BlockingIOError:
            got = "EAGAIN"
        except OSError as ex:
            got = errname(ex.errno)
        took = time.monotonic() - t0
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old_handler)
        what = {socket.SO_RCVTIMEO: "recv with SO_RCVTIMEO 0.3 s", socket.SO_SNDTIMEO: "send with SO_SNDTIMEO 0.3 s",
                None: "recv interrupted by a signal after 0.3 s"}[opt]
        c.check(e == errno.EINPROGRESS and got == ("EINTR" if opt is None else "EAGAIN") and 0.25 <= took < 3,
                "a blocking %s while the server has not accepted: %s after %.2f s (as TCP's in SYN_SENT)" % (
                    what, got, took))
        waits.append(s)
    # a descriptor the program closed, polled beside a connecting socket: POLLNVAL at
    # once (select: EBADF), as the kernel says (helper 125: the library's eventfd took
    # the number, and the poll slept its timeout)
    n = os.open("/dev/null", os.O_RDONLY)
    os.close(n)
    p = select.poll()
    p.register(waits[0], select.POLLOUT)
    p.register(n, select.POLLIN)
    t0 = time.monotonic()
    ev = p.poll(2000)
    took = time.monotonic() - t0
    try:
        select.select([n], [waits[0]], [], 2)
        sel = "returned"
    except OSError as ex:
        sel = errname(ex.errno)
    c.check(ev == [(n, select.POLLNVAL)] and took < 1 and sel == "EBADF",
            "a closed fd %d beside a connecting socket: poll %s after %.3f s, select %s (as the kernel: POLLNVAL, "
            "EBADF)" % (n, ev, took, sel))
    # poll() and select() sleeping on a socket whose connect waits for the accept
    # are woken by the connection (the library's eventfd), not polling in slices of
    # 1-8 ms meanwhile: their thread's voluntary context switches over the wait
    # count the sleeps (slices: ~60 in 0.5 s)
    sleeps = {}

    def switches():
        with open("/proc/self/task/%d/status" % threading.get_native_id()) as f:
            for line in f:
                if line.startswith("voluntary_ctxt_switches:"):
                    return int(line.split()[1])
        return -1

    def sleeper(name, s):
        n0 = switches()
        if name == "poll":
            p = select.poll()
            p.register(s, select.POLLOUT)
            ready = bool(p.poll(30000))
        else:
            ready = bool(select.select([], [s], [], 30)[1])
        sleeps[name] = (ready, switches() - n0)
    waiters = [threading.Thread(target=sleeper, args=(name, s)) for name, s in (("poll", q[0]), ("select", q[1]))]
    for t in waiters:
        t.start()
    time.sleep(0.5)
    open(a.go, "w").close()
    made.set()
    for t in waiters:
        t.join(40)
    for name in ("poll", "select"):
        ready, n = sleeps.get(name, (False, -1))
        c.check(ready and 0 <= n <= 12, "%s() on a connect waiting for the accept: %s, %d sleeps over the 0.5 s "
                "wait (woken by the connection, not in slices)" % (name, "writable" if ready else "not writable", n))
    r5 = finish(s5)
    try:
        got5 = "EOF" if s5.recv(10) == b"" else "data"
    except OSError as ex:
        got5 = errname(ex.errno)
    c.check(e5 == errno.EINPROGRESS and shut == "0" and shut_took < 1 and r5 == "0" and got5 == "EOF",
            "shutdown(SHUT_WR) while the server has not accepted: %s in %.3f s; once it accepts SO_ERROR %s, "
            "then the client reads %s (mode %s)" % (shut, shut_took, r5, got5, MODES.get(end_info(s5)[0])))
    s5.close()
    for s in waits:
        s.settimeout(None)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 0, 0))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", 0, 0))
        check_echo(s, "a connect whose blocking call was ended by a timeout or a signal", 4096)
        s.close()
    for i, s in enumerate(q):
        r = finish(s)
        c.check(r == "0", "connect %d to the gated server, once it accepts: SO_ERROR %s" % (i + 1, r))
        if r == "0":
            check_echo(s, "connect %d to the gated server" % (i + 1))
        s.close()

    # 2. epoll, edge-triggered, added before connect (nginx)
    ep = select.epoll()
    s = socket.socket()
    s.setblocking(False)
    ep.register(s.fileno(), select.EPOLLIN | select.EPOLLOUT | select.EPOLLET)
    e = s.connect_ex(dst)
    ev = ep.poll(10)
    r = errname(s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR))
    c.check(e == errno.EINPROGRESS and ev and (ev[0][1] & select.EPOLLOUT) and r == "0",
            "epoll (ET, added before connect): connect %s, events %s, SO_ERROR %s" % (errname(e), ev, r))
    # the edge of X's registration: a send that fills nothing; then the echo
    s.settimeout(30)
    check_echo(s, "epoll ET")
    ep.unregister(s.fileno())
    s.close()
    ep.close()

    # 2b. EPOLLONESHOT: one event, as TCP's (helper 124: the move to X re-armed it)
    ep = select.epoll()
    s = socket.socket()
    s.setblocking(False)
    ep.register(s.fileno(), select.EPOLLOUT | select.EPOLLONESHOT)
    e = s.connect_ex(dst)
    evs = [ep.poll(0.5) for _ in range(3)]
    c.check(e == errno.EINPROGRESS and [len(x) for x in evs] == [1, 0, 0],
            "epoll EPOLLONESHOT: events %s (one, as TCP's)" % evs)
    s.settimeout(30)
    if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
        check_echo(s, "epoll EPOLLONESHOT")
    ep.close()
    s.close()
    ep = select.epoll()

    # 3. epoll, level-triggered, added after connect; connect() again (hiredis)
    s, e = nb_connect(dst)
    ep.register(s.fileno(), select.EPOLLOUT)
    ev = ep.poll(10)
    again = s.connect_ex(dst)
    c.check(e == errno.EINPROGRESS and ev and again in (0, errno.EISCONN),
            "epoll (LT, added after connect): connect %s, events %s, connect again %s" % (
                errname(e), ev, errname(again)))
    ep.unregister(s.fileno())
    s.settimeout(30)
    check_echo(s, "epoll LT")
    s.close()
    ep.close()

    # 4. blocking right after EINPROGRESS (the send waits for the connect, as TCP's)
    s, e = nb_connect(dst)
    s.settimeout(30)
    c.check(e == errno.EINPROGRESS, "connect then a blocking send at once: connect %s" % errname(e))
    check_echo(s, "a blocking send right after EINPROGRESS", 1 << 20)
    s.close()

    # 5. 20 at once from one thread
    socks = [nb_connect(dst) for _ in range(20)]
    res = [finish(s) for s, _ in socks]
    c.check(all(e == errno.EINPROGRESS for _, e in socks) and res == ["0"] * 20,
            "20 connects at once from one thread: %s / SO_ERROR %s" % (
                sorted(set(errname(e) for _, e in socks)), sorted(set(res))))
    bad = 0
    for s, _ in socks:
        mode, _ = end_info(s)
        err, _ = echo(s, 4096)
        bad += mode != a.want_mode or err is not None
        s.close()
    c.check(bad == 0, "20 connects at once: %d of 20 %s with their echo right" % (20 - bad, MODES[a.want_mode]))

    # 6. refused (a port nobody listens on), then again on the same socket: as TCP's
    # (SO_ERROR ECONNREFUSED, then ECONNABORTED), and a third connect to the live port
    # gets SMC again
    if a.refused_port:
        s, e = nb_connect((a.addr, a.refused_port))
        r = finish(s) if e == errno.EINPROGRESS else errname(e)
        s.setblocking(False)
        e2 = s.connect_ex((a.addr, a.refused_port))
        e3 = s.connect_ex(dst)
        r3 = finish(s) if e3 == errno.EINPROGRESS else errname(e3)
        c.check(r == "ECONNREFUSED" and e2 == errno.ECONNABORTED and r3 == "0",
                "refused, then the same socket again: SO_ERROR %s, connect %s, to the live port %s / %s" % (
                    r, errname(e2), errname(e3), r3))
        if r3 == "0":
            check_echo(s, "the same socket after a refused connect")
        s.close()

    # 7. closed right after EINPROGRESS, then one more that works
    for _ in range(10):
        s, e = nb_connect(dst)
        s.close()
    s, e = nb_connect(dst)
    r = finish(s)
    c.check(r == "0", "after 10 connects closed at once: the next one's SO_ERROR %s" % r)
    if r == "0":
        check_echo(s, "after 10 connects closed at once")
    s.close()
    return c


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    x = sub.add_parser("server")
    x.add_argument("--bind", default="0.0.0.0")
    x.add_argument("--port-file", required=True)
    x.add_argument("--once", action="store_true")
    x.add_argument("--worker-uid", type=int)
    x.add_argument("--port", type=int, default=0)
    x.add_argument("--reuseport", action="store_true")
    x.add_argument("--accept-after", help="a file: accept once it exists (at most 60 s)")
    x.add_argument("--backlog", type=int, default=128)
    for name in ("client", "refused", "killme", "idle", "asyncconn"):
        x = sub.add_parser(name)
        x.add_argument("--addr", required=True)
        x.add_argument("--port", type=int, required=True)
        x.add_argument("--label", default=name)
        if name == "asyncconn":
            x.add_argument("--gated-port", type=int, required=True)
            x.add_argument("--go", required=True)
            x.add_argument("--want-mode", type=int, default=1, help="SMC_PROTO_MODE (1 SMC-D, 3 SMC-R)")
            x.add_argument("--refused-port", type=int, help="a port nobody listens on at --addr")
            x.add_argument("--dead-addr", required=True,
                           help="an address whose SYNs go nowhere, that smcd takes for a listener's of P")
        if name == "client":
            x.add_argument("--expect", choices=WANT, required=True)
            x.add_argument("--reason")
            x.add_argument("--server-expect", choices=list(WANT) + ["any"], default="any")
            x.add_argument("--sizes", default="1")
            x.add_argument("--conns", type=int, default=1)
            x.add_argument("--local-ip")
    a = p.parse_args()
    if a.cmd == "server":
        server(a)
    elif a.cmd == "killme":
        killme(a)
    else:
        c = {"client": client, "refused": refused, "idle": idle, "asyncconn": asyncconn}[a.cmd](a)
        sys.exit(1 if c.failed else 0)


if __name__ == "__main__":
    main()
