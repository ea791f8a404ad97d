#!/usr/bin/env python3
# Helper of tests/test-smcd-restart.sh (run under smcrun):
#   restart-xfer.py server PORTFILE
#       listen on 127.0.0.1 (one process, no fork: it may register again with a
#       restarted smcd), write the port to PORTFILE; for every connection (a thread
#       each): read to EOF, answer "<bytes> <sha256>\n", close.
#   restart-xfer.py client PORT BYTES SECONDS [MORE [TRIGGER]]
#       send BYTES of a deterministic stream paced over about SECONDS, shut down the
#       write side, read the answer and compare it with its own count and digest;
#       then MORE connections of 2 MiB each, 1.2 s apart, checked the same way (from
#       this process, whose buffer cache dates from before an smcd restart).
#       TRIGGER: once the file TRIGGER exists, a thread makes one more connection of
#       1 MiB while the long one goes on, and writes "ok ..." or the difference to
#       TRIGGER.done (this process's first request to a restarted smcd).
#       Prints "ok <bytes> <sha256> longest-send <s> connect <s>" per connection (the
#       longest sendall() of a 256 KiB block, and the connect, seconds) and exits 0, or prints the difference,
#       exit 1.
#   restart-xfer.py hold PORT GOFILE [LINGER]
#       one connection of 2 MiB: the first half at once, the second half once the
#       file GOFILE exists, then "ok ..." or the difference into GOFILE.done, then
#       LINGER seconds asleep (the process stays, the connection is closed). Between
#       the halves the process asks smcd nothing (after a restart its close is its
#       first request to the new smcd).
import hashlib
import socket
import sys
import threading
import time


def serve(c):
    h = hashlib.sha256()
    n = 0
    while True:
        d = c.recv(1 << 20)
        if not d:
            break
        h.update(d)
        n += len(d)
    c.sendall(b"%d %s\n" % (n, h.hexdigest().encode()))
    c.close()


def server(portfile):
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", 0))
    ls.listen(64)
    with open(portfile + ".tmp", "w") as f:
        f.write("%d\n" % ls.getsockname()[1])
    import os
    os.rename(portfile + ".tmp", portfile)
    while True:
        c, _ = ls.accept()
        threading.Thread(target=serve, args=(c,), daemon=True).start()


def side(port, trigger):
    import os
    while not os.path.exists(trigger):
        time.sleep(0.05)
    out = []
    r = one(port, 1 << 20, 0, out.append)
    with open(trigger + ".done.tmp", "w") as f:
        f.write(("" if r == 0 else "failed: ") + " ".join(out))
    os.rename(trigger + ".done.tmp", trigger + ".done")


def client(port, total, seconds, more=0, trigger=None):
    if trigger:
        threading.Thread(target=side, args=(port, trigger), daemon=True).start()
    r = one(port, total, seconds)
    for _ in range(more):
        if r:
            break
        time.sleep(1.2)
        r = one(port, 2 << 20, 0)
    return r


def hold(port, gofile, linger=0.0):
    import os

    def wait_go():
        while not os.path.exists(gofile):
            time.sleep(0.05)
    out = []
    r = one(port, 2 << 20, 0, out.append, halfway=wait_go)
    with open(gofile + ".done.tmp", "w") as f:
        f.write(("" if r == 0 else "failed: ") + " ".join(out))
    os.rename(gofile + ".done.tmp", gofile + ".done")
    time.sleep(linger)
    return r


def one(port, total, seconds, out=print, halfway=None):
    t = time.monotonic()
    s = socket.create_connection(("127.0.0.1", port))
    conn_time = time.monotonic() - t
    block = hashlib.sha256(b"smcd").digest() * 8192  # 256 KiB
    h = hashlib.sha256()
    sent = 0
    t0 = time.monotonic()
    i = 0
    stall = 0.0  # the longest sendall() of a 256 KiB block, seconds
    while sent < total:
        n = min(len(block), total - sent)
        # vary the bytes: every block is prefixed with its number
        chunk = (b"%016d" % i) + block[16:n]
        t = time.monotonic()
        s.sendall(chunk[:n])
        stall = max(stall, time.monotonic() - t)
        h.update(chunk[:n])
        if halfway and sent < total // 2 <= sent + n:
            halfway()
        sent += n
        i += 1
        # pace: at sent/total of the way, be at that fraction of SECONDS
        ahead = t0 + seconds * sent / total - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
    s.shutdown(socket.SHUT_WR)
    ans = b""
    while not ans.endswith(b"\n"):
        d = s.recv(4096)
        if not d:
            break
        ans += d
    s.close()
    want = b"%d %s\n" % (total, h.hexdigest().encode())
    if ans != want:
        out("server got %r, sent %r" % (ans, want))
        return 1
    out("ok %d %s longest-send %.3f connect %.3f" % (total, h.hexdigest(), stall, conn_time))
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "server":
        server(sys.argv[2])
    elif sys.argv[1] == "hold":
        sys.exit(hold(int(sys.argv[2]), sys.argv[3], float(sys.argv[4]) if len(sys.argv) > 4 else 0.0))
    else:
        sys.exit(client(int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]),
                        int(sys.argv[5]) if len(sys.argv) > 5 else 0,
                        sys.argv[6] if len(sys.argv) > 6 else None))
