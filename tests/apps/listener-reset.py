#!/usr/bin/env python3
# Connections queued on a listener that goes away, under smcrun as over TCP: their
# clients get ECONNRESET (whether they sent data or not), not end of file: the
# listener closed in a process that forked since listen(), the listening process
# exiting, and killed (SIGKILL). A connection the server accepted and closed still
# reads end of file. Before, only a client whose bytes were left unread got the
# reset; the others read EOF, as if served and closed.
# Prints one line; exit status 0 only if every case held.
import os
import signal
import socket
import sys
import time


def run(mode):
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(8)
    addr = ls.getsockname()
    r, w = os.pipe()  # the server tells the parent: done with accepting
    go_r, go_w = os.pipe()  # the parent tells the server: clients connected
    server = os.fork()
    if server == 0:  # the listener's process; the parent makes the clients
        os.close(r)
        os.close(go_w)
        os.read(go_r, 1)  # the clients' connections are queued by now
        if mode == "accepted":
            s, _ = ls.accept()
            s.close()
        os.write(w, b"1")
        if mode == "close":
            ls.close()
            time.sleep(0.5)
            os._exit(0)
        if mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        os._exit(0)  # "exit", "accepted"
    os.close(w)
    os.close(go_r)
    ls.close()
    cs = [socket.create_connection(addr) for _ in range(1 if mode == "accepted" else 3)]
    if mode != "accepted":
        cs[0].sendall(b"unread")
    os.write(go_w, b"1")
    os.close(go_w)
    os.read(r, 1)
    os.waitpid(server, 0)
    got = []
    for c in cs:
        c.settimeout(5)
        try:
            got.append("EOF" if c.recv(10) == b"" else "data")
        except ConnectionResetError:
            got.append("ECONNRESET")
        except OSError as e:
            got.append(os.strerror(e.errno) if e.errno else repr(e))
        c.close()
    os.close(r)
    return got


fails = []
for mode in ("close", "exit", "kill"):
    got = run(mode)
    if got != ["ECONNRESET"] * 3:
        fails.append("%s: %s" % (mode, got))
got = run("accepted")
if got != ["EOF"]:
    fails.append("accepted and closed: %s" % got)
if fails:
    print("listener-reset: " + "; ".join(fails))
    sys.exit(1)
print("listener-reset: queued connections reset when the listener is closed after a fork, its process exits "
      "or is killed; an accepted one reads EOF")
