#!/usr/bin/env python3
# Short-lived connections and smcd's hints (tunable short_conn_rate, smc-hints.h), run
# under smcrun against an smcd started with a low short_conn_rate (the caller's
# choice). One process, a server thread: each connection carries one request and one
# reply, then both ends close.
#
#   short-conn.py short N      N short connections; prints a JSON line: how many were
#                              SMC-D, TCP for the hint (reason SMCD_DECL_SHORTCONN,
#                              both ends), anything else; the first TCP one's index; every
#                              reply checked. Then waits 1.3 s (the hint's hold, 1 s) and
#                              makes one more: "after_hold" is its mode.
#   short-conn.py long N       N connections of 12 request/reply rounds each (not short)
#   short-conn.py late N       up to N short connections until one is hinted; then, from
#                              the hint's expiry in $SMCD_RUNTIME_DIR/hints, two
#                              connections made 100 ms before it and accepted 100 ms
#                              and 400 ms after it: prints their server ends' reasons
#                              (SMCD_DECL_SHORTCONN within the accept grace of 250 ms,
#                              SMC_CLC_DECL_PEERNOSMC after it)
#
# Exit 0 when every reply was right (the caller checks the counts).
import json
import os
import socket
import struct
import sys
import threading
import time

import smcapp

SOL_SMC = 286
SMC_PROTO_MODE = 0x5301
SMC_PROTO_FALLBACK_REASON = 0x5302
MODE_SMCD = 1
MODE_TCP = 2
SHORTCONN = 0x0B040000


def smc_info(s):
    mode = struct.unpack("i", s.getsockopt(SOL_SMC, SMC_PROTO_MODE, 4))[0]
    reason = struct.unpack("I", s.getsockopt(SOL_SMC, SMC_PROTO_FALLBACK_REASON, 4))[0]
    return mode, reason


def hint_until(port):
    """The expiry (CLOCK_REALTIME ns) of the hint for @port in smcd's hints page."""
    with open(os.path.join(os.environ["SMCD_RUNTIME_DIR"], "hints"), "rb") as f:
        page = f.read(4096)
    used = struct.unpack_from("=I", page, 16)[0]  # struct smc_hints.used
    best = 0
    for i in range(min(used, 63)):
        off = 64 + 64 * i
        # struct smc_hint: seq, reason, until_ns, listener_id, addr[16], family_port
        reason = struct.unpack_from("=I", page, off + 4)[0]
        until = struct.unpack_from("=Q", page, off + 8)[0]
        fp = struct.unpack_from("=I", page, off + 40)[0]
        if reason and fp & 0xFFFF == port:
            best = max(best, until)
    return best


def sleep_until(ns):
    d = (ns - time.time_ns()) / 1e9
    if d > 0:
        time.sleep(d)


def late(n, ls, port):
    """Mode "late": the server end of connections made while a hint held, accepted after
    it expired."""
    def one_short(i):
        s = socket.create_connection(("127.0.0.1", port))
        c, _ = ls.accept()
        info = smc_info(s)
        s.sendall(b"%016d" % i)
        ok = smcapp.recv_exact(c, 16, short_ok=True) == b"%016d" % i
        c.close()
        s.close()
        return info, ok

    for i in range(n):
        info, ok = one_short(i)
        if not ok:
            print(json.dumps({"error": "connection %d: bad data" % i}), flush=True)
            return 1
        if info == (MODE_TCP, SHORTCONN):
            break
    else:
        print(json.dumps({"error": "no hinted connection in %d" % n}), flush=True)
        return 1
    until = hint_until(port)
    left = (until - time.time_ns()) / 1e6
    if left < 200:
        print(json.dumps({"error": "the hint expires too soon: %.0f ms" % left}), flush=True)
        return 1
    sleep_until(until - 100_000_000)
    conns = [socket.create_connection(("127.0.0.1", port)) for _ in range(2)]
    client = [smc_info(c) for c in conns]
    server = []
    for at in (100_000_000, 400_000_000):
        sleep_until(until + at)
        c, _ = ls.accept()
        server.append(smc_info(c))
        c.close()
    for c in conns:
        c.close()
    print(json.dumps({"client": [list(m) for m in client], "server": [list(m) for m in server]}), flush=True)
    return 0


def main():
    kind, n = sys.argv[1], int(sys.argv[2])
    rounds = 1 if kind == "short" else 12
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(128)
    port = ls.getsockname()[1]
    if kind == "late":
        return late(n, ls, port)
    server_modes = []
    bad = []

    def serve(count):
        for _ in range(count):
            c, _ = ls.accept()
            server_modes.append(smc_info(c))
            for r in range(rounds):
                req = smcapp.recv_exact(c, 16, short_ok=True)
                c.sendall(b"reply:" + req)
            c.close()

    total = n + (1 if kind == "short" else 0)
    t = threading.Thread(target=serve, args=(total,))
    t.start()

    def one(i):
        s = socket.create_connection(("127.0.0.1", port))
        info = smc_info(s)
        for r in range(rounds):
            req = b"%08d%08d" % (i, r)
            s.sendall(req)
            got = smcapp.recv_exact(s, 22, short_ok=True)
            if got != b"reply:" + req:
                bad.append((i, r, got))
        s.close()
        return info

    modes = [one(i) for i in range(n)]
    after = None
    if kind == "short":
        time.sleep(1.3)
        after = one(n)[0]
    t.join(60)
    smcd = sum(1 for m in modes if m == (MODE_SMCD, 0))
    hinted = sum(1 for m in modes if m == (MODE_TCP, SHORTCONN))
    srv_hinted = sum(1 for m in server_modes if m == (MODE_TCP, SHORTCONN))
    other = len(modes) - smcd - hinted
    first_tcp = next((i for i, m in enumerate(modes) if m[0] == MODE_TCP), -1)
    print(json.dumps({"smcd": smcd, "hinted": hinted, "server_hinted": srv_hinted, "other": other,
                      "first_tcp": first_tcp, "after_hold": after, "bad": len(bad)}), flush=True)
    return 0 if not bad and not t.is_alive() else 1


if __name__ == "__main__":
    sys.exit(main())
