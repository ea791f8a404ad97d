#!/usr/bin/env python3
# Other threads make and close listeners and connections, under smcrun as over TCP:
#  1. the main thread opens and closes a file, again and again for 1.5 s: every
#     close succeeds. Under smcrun a close of a number that another thread's close of
#     a socket had just given up returned EBADF, and left the new file open (23 in
#     320000, 2026-12-06).
#  2. it forks 200 times: every child, which only closes a file and exits, exits at
#     once. Under smcrun a socket's lock that another thread held at the fork stayed
#     held in the child, and a close(2) of a number that was once a listener's
#     descriptor waited for it for ever (helper 107: 2 of 100 children hung).
# Prints one line; exit status 0 only if every case held.
import os
import signal
import sys
import threading
import time

import smcapp

N = 200
stop = False


def churn():
    while not stop:
        c, s = smcapp.pair(check=False)
        c.close()
        s.close()


threads = [threading.Thread(target=churn, daemon=True) for _ in range(2)]
for t in threads:
    t.start()
bad = closes = 0
t0 = time.monotonic()
while time.monotonic() - t0 < 1.5:
    fd = os.open("/dev/null", os.O_RDONLY)
    try:
        os.close(fd)
    except OSError:
        bad += 1
    closes += 1
hung = 0
for i in range(N):
    fd = os.open("/dev/null", os.O_RDONLY)
    pid = os.fork()
    if pid == 0:
        os.close(fd)
        os._exit(0)
    os.close(fd)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 5:
        r, _ = os.waitpid(pid, os.WNOHANG)
        if r:
            break
        time.sleep(0.002)
    else:
        hung += 1
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
stop = True
for t in threads:
    t.join(5)
if hung or bad:
    print("fork-locks: FAIL: %d of %d closes of a file failed; %d of %d children hung in close()" %
          (bad, closes, hung, N))
    sys.exit(1)
print("fork-locks: beside threads making connections, %d closes of a file succeeded and %d children forked "
      "each exited at once" % (closes, N))
