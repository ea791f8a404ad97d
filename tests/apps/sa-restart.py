#!/usr/bin/env python3
# Signals during a blocking send and accept, as over TCP (signal(7)): with SA_RESTART
# the call goes on; without it, a send that moved nothing yet and an accept fail with
# EINTR. Called through ctypes so that Python's own EINTR retry (PEP 475) is not in
# the way. A send that moved some bytes returns their count, as TCP's does.
# The library restarts when every signal that has a handler has SA_RESTART (it cannot
# tell which one came: smcrun(1)), so Python's SIGINT handler (no SA_RESTART) is
# set back to the default here; handlers of signals the waiting thread blocks do not
# count. Also: SO_SNDTIMEO bounds a blocking send (EAGAIN).
import ctypes
import errno
import os
import signal
import socket
import struct
import sys
import threading
import time

libc = ctypes.CDLL(None, use_errno=True)


def pair():
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    ls.listen(8)
    c = socket.socket()
    c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    c.connect(ls.getsockname())
    s, _ = ls.accept()
    ls.close()
    return c, s


def fill(c):
    """fill the connection (the peer does not read) so that the next send blocks"""
    c.setblocking(False)
    for _ in range(5):  # TCP opens its window a little later
        try:
            while True:
                c.send(b"f" * 65536)
        except BlockingIOError:
            time.sleep(0.05)
    c.setblocking(True)


def blocking_call_with_signal(call, restart, block=()):
    signal.signal(signal.SIGUSR1, lambda *a: None)
    signal.siginterrupt(signal.SIGUSR1, not restart)
    res = {}

    def run():
        if block:
            signal.pthread_sigmask(signal.SIG_BLOCK, block)
        r = call()
        res["r"] = r
        res["errno"] = ctypes.get_errno()

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.3)
    signal.pthread_kill(t.ident, signal.SIGUSR1)
    time.sleep(0.3)
    return t, res


def case_send(restart, block=()):
    c, s = pair()
    fill(c)
    buf = ctypes.create_string_buffer(b"x" * 1000, 1000)
    t, res = blocking_call_with_signal(lambda: libc.send(c.fileno(), buf, 1000, 0), restart, block)
    still_blocked = t.is_alive()
    # drain so that a restarted send can finish
    s.setblocking(False)
    deadline = time.time() + 10
    while t.is_alive() and time.time() < deadline:
        try:
            s.recv(1 << 20)
        except BlockingIOError:
            time.sleep(0.01)
    t.join(5)
    c.close()
    s.close()
    if restart:
        return still_blocked and res.get("r") == 1000, "send SA_RESTART%s: %s" % (
            " (SIGUSR2 without SA_RESTART, blocked in the sender)" if block else "", res)
    return res.get("r") == -1 and res.get("errno") == errno.EINTR, "send no SA_RESTART: %s" % res


def case_accept(restart):
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(8)
    t, res = blocking_call_with_signal(lambda: libc.accept(ls.fileno(), None, None), restart)
    still_blocked = t.is_alive()
    c = socket.create_connection(ls.getsockname()) if restart else None
    t.join(5)
    if res.get("r", -1) >= 0:
        os.close(res["r"])
    if c:
        c.close()
    ls.close()
    if restart:
        return still_blocked and res.get("r", -1) >= 0, "accept SA_RESTART: %s" % res
    return res.get("r") == -1 and res.get("errno") == errno.EINTR, "accept no SA_RESTART: %s" % res


def case_sndtimeo():
    """SO_SNDTIMEO bounds a blocking send: EAGAIN after about the timeout, as TCP"""
    c, s = pair()
    fill(c)
    c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", 0, 300000))
    buf = ctypes.create_string_buffer(b"x" * 1000, 1000)
    t0 = time.monotonic()
    r = libc.send(c.fileno(), buf, 1000, 0)
    e = ctypes.get_errno()
    dt = time.monotonic() - t0
    c.close()
    s.close()
    return r == -1 and e == errno.EAGAIN and 0.25 <= dt < 3, "send SO_SNDTIMEO: r %d errno %d after %.2f s" % (r, e, dt)


def main():
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    results = [case_send(True), case_send(False), case_accept(True), case_accept(False), case_sndtimeo()]
    # a handler without SA_RESTART for a signal the sending thread blocks does not
    # count: that signal cannot have interrupted it
    signal.signal(signal.SIGUSR2, lambda *a: None)
    signal.siginterrupt(signal.SIGUSR2, True)
    results.append(case_send(True, {signal.SIGUSR2}))
    signal.signal(signal.SIGUSR2, signal.SIG_DFL)
    bad = [name for ok, name in results if not ok]
    print("%d signal cases, failed: %s" % (len(results), "; ".join(bad) or "none"))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
