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
#
# Exit 0 when every reply was right (the caller checks the counts).
import json
import socket
import struct
import sys
import threading
import time

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


def recv_exact(s, n):
    b = b""
    while len(b) < n:
        d = s.recv(n - len(b))
        if not d:
            break
        b += d
    return b


def main():
    kind, n = sys.argv[1], int(sys.argv[2])
    rounds = 1 if kind == "short" else 12
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(128)
    port = ls.getsockname()[1]
    server_modes = []
    bad = []

    def serve(count):
        for _ in range(count):
            c, _ = ls.accept()
            server_modes.append(smc_info(c))
            for r in range(rounds):
                req = recv_exact(c, 16)
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
            got = recv_exact(s, 22)
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
