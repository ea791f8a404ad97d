#!/usr/bin/env python3
# close(2) racing another thread's calls on the same connection (a race in the program,
# but TCP never returns a byte the peer did not send): a forked peer sends a counting
# pattern (byte i = i % 251) as fast as it can; a thread reads it with nonblocking
# read(2) calls on the raw descriptor, and another thread writes to the peer in the
# other direction; the main thread closes the descriptor 1-20 ms in. Every byte a read
# returned must be the pattern's next one, and reads and writes end with EBADF (or the
# write with EPIPE / ECONNRESET). Run for 30 connections. Before 2026-12-05, under
# smcrun a read racing the close returned bytes of a ring smcd had already cleared (up
# to its whole 20 MB buffer), or a doorbell byte from the descriptor's unix socket.
# Prints one line; exit status 0 only if every case held. SMC_EXPECT=1: the
# connections must be SMC-D.
import errno
import os
import random
import select
import socket
import sys
import threading
import time

ROUNDS = 30
CHUNK = 1 << 20
PATTERN = bytes(range(251)) * 16800  # > READ + 251 bytes
READ = 4 << 20
fails = []
expect_smc = os.environ.get("SMC_EXPECT") == "1"

ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", 0))
ls.listen(4)
port = ls.getsockname()[1]

for rnd in range(ROUNDS):
    pid = os.fork()
    if pid == 0:
        ls.close()
        c = socket.create_connection(("127.0.0.1", port))
        off = 0
        try:
            while True:
                o = off % 251
                off += c.send(PATTERN[o:o + CHUNK])
        except OSError:
            pass
        os._exit(0)
    s, _ = ls.accept()
    if expect_smc and s.getsockopt(286, 0x5301) != 1:
        fails.append("round %d: not SMC-D" % rnd)
    fd = s.detach()
    os.set_blocking(fd, False)
    res = {}

    def reader():
        off = 0
        while True:
            try:
                b = os.read(fd, READ)
            except BlockingIOError:
                try:
                    select.select([fd], [], [], 0.05)
                except (OSError, ValueError):
                    pass
                continue
            except OSError as e:
                res["read_end"] = e.errno
                break
            if not b:
                res["read_end"] = 0
                break
            o = off % 251
            if b != PATTERN[o:o + len(b)]:
                bad = sum(1 for i, x in enumerate(b) if x != (off + i) % 251)
                res.setdefault("bad", []).append("%d of %d bytes wrong at offset %d" % (bad, len(b), off))
            off += len(b)

    def writer():
        while True:
            try:
                os.write(fd, b"w" * 4096)
            except BlockingIOError:
                time.sleep(0.001)
            except OSError as e:
                res["write_end"] = e.errno
                break

    tr = threading.Thread(target=reader)
    tw = threading.Thread(target=writer)
    tr.start()
    tw.start()
    time.sleep(random.uniform(0.001, 0.02))
    os.close(fd)
    tr.join(10)
    tw.join(10)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    if tr.is_alive() or tw.is_alive():
        fails.append("round %d: a thread did not end after the close" % rnd)
        break
    if "bad" in res:
        fails.append("round %d: %s" % (rnd, "; ".join(res["bad"][:3])))
    if res.get("read_end") not in (errno.EBADF,):
        fails.append("round %d: read ended with %r" % (rnd, res.get("read_end")))
    if res.get("write_end") not in (errno.EBADF, errno.EPIPE, errno.ECONNRESET):
        fails.append("round %d: write ended with %r" % (rnd, res.get("write_end")))

if fails:
    print("close-race: " + "; ".join(fails[:5]))
    sys.exit(1)
print("close-race: %d connections closed under a reading and a writing thread, every byte read right" % ROUNDS)
