#!/usr/bin/env python3
# A server that hands its port over between SO_REUSEPORT listeners (nginx's binary
# upgrade, haproxy's reload: a new listener, then the old one closed) loses no
# connection that was queued to the old one: smcd moves them to the other listener
# of the group (REQUEUE), as the kernel does with net.ipv4.tcp_migrate_req=1.
# Clients (a forked process) make N connections, each sends a numbered message
# before anyone accepts; then the old listener A is closed, and the new one B
# accepts and answers each with the sha256 of what it read.
#   same-process: A and B in one process;
#   two-processes: B in another process, and A's process exits right after the close;
#   full: all N queued to A alone, then B listens with a backlog of 1 and A is
#         closed: all go to B all the same (the kernel moves them whatever the other
#         member's backlog; helper 123: 26 of 28 were reset);
#   alone: A only, no other listener: A's queued connections are reset (ECONNRESET),
#          as TCP's (nothing to move them to).
# Before REQUEUE, the connections smcd had queued to A (every other one: smcd takes
# the group's listeners in turn) were reset in the first two cases.
# Prints one line; exit status 0 only if every case held.
#
# Between network namespaces (tests/test-netns-smcd.sh; SMC-D after a CLC handshake on
# the TCP connection, which smcd runs once the server's library accepted it):
#   reuseport-handoff.py serve --bind IP --port-file F [--close-after MS]
#       listeners A (nonblocking) and B on IP, the port written to F; once A has a
#       connection: accept from A until EAGAIN (handshakes of those still run then),
#       wait MS milliseconds (0: none; their results then wait on A's accept channel),
#       close A, and serve B until nothing came for 3 s. Prints {"a": n, "b": n}.
#   reuseport-handoff.py connect --addr IP --port P --conns N
#       N connections at once, each sends a numbered message and waits for the
#       sha256 of it. Prints {"ok": n, "reset": n, "wrong": n, "timeout": n}; exit
#       status 0 only if all N were answered.
import argparse
import hashlib
import json
import os
import select
import socket
import struct
import sys
import threading
import time

import smcapp

N = 16


def listener(port, backlog=64):
    return listener_on("127.0.0.1", port, backlog)


def serve(ls, deadline):
    """Accept and answer until nothing came for 2 s (or @deadline)."""
    ls.settimeout(2)
    n = 0
    while time.time() < deadline:
        try:
            c, _ = ls.accept()
        except socket.timeout:
            break
        c.settimeout(5)
        try:
            (size,) = struct.unpack("!I", smcapp.recv_exact(c, 4))
            body = smcapp.recv_exact(c, size)
            c.sendall(hashlib.sha256(body).digest())
            n += 1
        except (OSError, EOFError):
            pass
        c.close()
    return n


def clients(port, go_w, done_r):
    """Connect N times, send, tell the server (go_w), then collect the answers."""
    cs, bodies = [], []
    for i in range(N):
        c = socket.create_connection(("127.0.0.1", port))
        body = (b"%d:" % i) + os.urandom(1000 + 37 * i)
        c.sendall(struct.pack("!I", len(body)) + body)
        cs.append(c)
        bodies.append(body)
    os.write(go_w, b"1")
    got = {"ok": 0, "reset": 0, "wrong": 0, "timeout": 0}
    for c, body in zip(cs, bodies):
        c.settimeout(15)
        try:
            h = smcapp.recv_exact(c, 32)
            got["ok" if h == hashlib.sha256(body).digest() else "wrong"] += 1
        except (ConnectionResetError, EOFError):
            got["reset"] += 1
        except socket.timeout:
            got["timeout"] += 1
        c.close()
    return got


def run(mode):
    # (the other processes are forked before any listener exists: a listener that a
    # fork copied is shared, and its last close happens wherever its last copy is)
    port_r, port_w = os.pipe()  # A's port, to the clients
    bport_r, bport_w = os.pipe()  # ... and to B's process (a pipe of its own: one
    # shared with the clients let them take B's message first, and all waited)
    ready_r, ready_w = os.pipe()  # B's process: B listens
    go_r, go_w = os.pipe()  # the clients: every connection is queued
    res_r, res_w = os.pipe()  # the clients' result
    child = None
    if mode == "two-processes":
        child = os.fork()
        if child == 0:
            port = struct.unpack("!H", os.read(bport_r, 2))[0]
            b = listener(port)
            os.write(ready_w, b"1")
            time.sleep(1.5)  # (A's process closes A and exits meanwhile)
            serve(b, time.time() + 30)
            os._exit(0)
    cl = os.fork()
    if cl == 0:
        port = struct.unpack("!H", os.read(port_r, 2))[0]
        got = clients(port, go_w, None)
        os.write(res_w, repr(got).encode())
        os._exit(0)
    a = listener(0)
    port = a.getsockname()[1]
    b = None
    if mode == "same-process":
        b = listener(port)
    elif mode == "two-processes":
        os.write(bport_w, struct.pack("!H", port))
        os.read(ready_r, 1)
    os.write(port_w, struct.pack("!H", port))  # (the clients')
    os.read(go_r, 1)  # every connection is queued now
    if mode == "full":
        b = listener(port, 1)
    a.close()
    if b is not None:
        serve(b, time.time() + 30)
    got = eval(os.read(res_r, 4096).decode())
    os.waitpid(cl, 0)
    if child:
        os.waitpid(child, 0)
    if b is not None:
        b.close()
    for fd in (port_r, port_w, bport_r, bport_w, ready_r, ready_w, go_r, go_w, res_r, res_w):
        os.close(fd)
    return got


def answer(c):
    c.settimeout(10)
    try:
        (size,) = struct.unpack("!I", smcapp.recv_exact(c, 4))
        body = smcapp.recv_exact(c, size)
        c.sendall(hashlib.sha256(body).digest())
    except (OSError, EOFError):
        pass
    c.close()


def ns_serve(a):
    a_ls = socket.socket()
    a_ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    a_ls.bind((a.bind, 0))
    a_ls.listen(64)
    port = a_ls.getsockname()[1]
    b_ls = listener_on(a.bind, port)
    with open(a.port_file + ".tmp", "w") as f:
        f.write(str(port))
    os.rename(a.port_file + ".tmp", a.port_file)
    n = {"a": 0, "b": 0}
    threads = []
    select.select([a_ls], [], [], 30)
    a_ls.setblocking(False)
    while True:
        try:
            c, _ = a_ls.accept()
        except BlockingIOError:
            break
        c.setblocking(True)
        n["a"] += 1
        t = threading.Thread(target=answer, args=(c,))
        t.start()
        threads.append(t)
    if a.close_after:
        time.sleep(a.close_after / 1000)  # (SMC connections then wait on its channel)
    a_ls.close()  # (with 0: SMC handshakes it started still run)
    b_ls.settimeout(3)
    while True:
        try:
            c, _ = b_ls.accept()
        except socket.timeout:
            break
        n["b"] += 1
        t = threading.Thread(target=answer, args=(c,))
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    print(json.dumps(n), flush=True)
    return 0


def listener_on(host, port, backlog=64):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind((host, port))
    s.listen(backlog)
    return s


def ns_connect(a):
    got = {"ok": 0, "reset": 0, "wrong": 0, "timeout": 0}
    lock = threading.Lock()

    def one(i):
        what = "reset"
        try:
            c = socket.create_connection((a.addr, a.port), timeout=20)
            body = (b"%d:" % i) + os.urandom(1000 + 37 * i)
            c.sendall(struct.pack("!I", len(body)) + body)
            h = smcapp.recv_exact(c, 32)
            what = "ok" if h == hashlib.sha256(body).digest() else "wrong"
            c.close()
        except socket.timeout:
            what = "timeout"
        except (OSError, EOFError):
            what = "reset"
        with lock:
            got[what] += 1

    ts = [threading.Thread(target=one, args=(i,)) for i in range(a.conns)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    print(json.dumps(got), flush=True)
    return 0 if got["ok"] == a.conns else 1


if len(sys.argv) > 1:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    ps = sub.add_parser("serve")
    ps.add_argument("--bind", required=True)
    ps.add_argument("--port-file", required=True)
    ps.add_argument("--close-after", type=int, default=0)
    pc = sub.add_parser("connect")
    pc.add_argument("--addr", required=True)
    pc.add_argument("--port", type=int, required=True)
    pc.add_argument("--conns", type=int, default=32)
    args = p.parse_args()
    sys.exit(ns_serve(args) if args.cmd == "serve" else ns_connect(args))

want = {
    "same-process": {"ok": N, "reset": 0, "wrong": 0, "timeout": 0},
    "two-processes": {"ok": N, "reset": 0, "wrong": 0, "timeout": 0},
    "full": {"ok": N, "reset": 0, "wrong": 0, "timeout": 0},
    "alone": {"ok": 0, "reset": N, "wrong": 0, "timeout": 0},
}
fails = []
for mode in ("same-process", "two-processes", "full", "alone"):
    got = run(mode)
    if got != want[mode]:
        fails.append("%s: %s" % (mode, got))
if fails:
    print("reuseport-handoff: " + "; ".join(fails))
    sys.exit(1)
print("reuseport-handoff: %d connections queued on a closed SO_REUSEPORT listener all answered by the other one "
      "(same process, another process, one with a backlog of 1); without another one, reset" % N)
