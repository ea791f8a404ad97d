#!/usr/bin/env python3
# A server at its descriptor limit (RLIMIT_NOFILE), as over TCP: accept fails with
# EMFILE and the connections stay queued; once the server closes some, it accepts
# them, and every client gets its echo.
# 12 clients connect and send a line before the server accepts any; the server, with
# room for a few descriptors only, accepts (keeping each connection open) until
# EMFILE, tries again 20 times (EMFILE each time), then answers and closes what it
# has, and accepts the rest the same way until all are served.
# Under smcrun a connection's descriptors arrive with its message (the kernel closes
# what does not fit, and the client is reset), so the library looks for room before
# it receives once the table is nearly full (libsmcproto(3)); one connection may
# still be lost when nothing showed that first, so 1 is allowed. Before, every
# accept at the limit lost one (an asyncio echo server with ulimit -n 64 reset 150 of
# 200 clients, 175 when one accept call went on receiving into the full table; 9 of
# these 12). Over TCP none is lost.
# Prints one line; exit status 0 only if that held (within 30 s).
import errno
import os
import resource
import socket
import sys
import threading
import time

N = 12
UNDER_SMCRUN = "libsmcrun" in os.environ.get("LD_PRELOAD", "")


def client(port, i, results):
    try:
        c = socket.create_connection(("127.0.0.1", port), timeout=20)
        c.sendall(b"line-%d\n" % i)
        buf = b""
        while not buf.endswith(b"\n"):
            b = c.recv(100)
            if not b:
                break
            buf += b
        c.close()
        results[i] = buf
    except OSError as e:
        results[i] = e


def main():
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(64)
    ls.setblocking(False)
    port = ls.getsockname()[1]
    results = [None] * N
    threads = [threading.Thread(target=client, args=(port, i, results)) for i in range(N)]
    for t in threads:
        t.start()
    time.sleep(0.5)  # all queued, none accepted
    # room for a few more descriptors only (the clients' threads hold theirs too)
    used = len(os.listdir("/proc/self/fd"))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (used + 7, hard))
    emfile = served = rounds = 0
    deadline = time.monotonic() + 25
    while served < N and time.monotonic() < deadline:
        rounds += 1
        held = []
        while True:
            try:
                s, _ = ls.accept()
                held.append(s)
            except BlockingIOError:
                break
            except OSError as e:
                if e.errno != errno.EMFILE:
                    raise
                emfile += 1
                for _ in range(20):  # at the limit: EMFILE, nothing taken
                    try:
                        held.append(ls.accept()[0])
                    except OSError as e2:
                        if e2.errno not in (errno.EMFILE, errno.EAGAIN):
                            raise
                        if e2.errno == errno.EMFILE:
                            emfile += 1
                break
        for s in held:
            s.settimeout(5)
            try:
                line = b""
                while not line.endswith(b"\n"):
                    b = s.recv(100)
                    if not b:
                        break
                    line += b
                if line:
                    s.sendall(b"echo:" + line)
                    served += 1
            except OSError:
                pass
            s.close()
        if not held:
            time.sleep(0.05)
        if all(r is not None for r in results) and not held:
            break
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    for t in threads:
        t.join(10)
    ok = sum(1 for i, r in enumerate(results) if r == b"echo:line-%d\n" % i)
    lost = N - ok
    bad = [r for i, r in enumerate(results) if isinstance(r, bytes) and r != b"echo:line-%d\n" % i]
    allowed = 1 if UNDER_SMCRUN else 0
    if emfile == 0 or lost > allowed or bad:
        print("accept-emfile: %d of %d echoed (lost %d, at most %d allowed), %d EMFILE, wrong answers %r; %r"
              % (ok, N, lost, allowed, emfile, bad, [r for r in results if not isinstance(r, bytes)]))
        return 1
    print("accept-emfile: at the descriptor limit accept said EMFILE %d times, and %d of %d clients got their "
          "echo (%d lost)" % (emfile, ok, N, lost))
    return 0


if __name__ == "__main__":
    sys.exit(main())
