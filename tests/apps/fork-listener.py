#!/usr/bin/env python3
# A server that forks a child per connection and blocks in accept() again at once, as
# inetd-style servers do; each child serves its connection (echo) and exits. What the
# child does with its copy of the listening socket:
#   close  closes it first (as PostgreSQL's backends do)
#   dup    keeps a duplicate of it and closes the original
# tests/test-smcd-restart.sh: after an smcd restart either server's listener comes
# back to SMC-D by itself (its accept channel outlives smcd: LISTEN F_REVIVE).
# usage: fork-listener.py MODE PORTFILE
import os
import signal
import socket
import sys

mode, portfile = sys.argv[1], sys.argv[2]
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
ls = socket.socket()
ls.bind(("127.0.0.1", 0))
ls.listen(16)
with open(portfile + ".tmp", "w") as f:
    f.write("%d\n" % ls.getsockname()[1])
os.rename(portfile + ".tmp", portfile)
while True:
    c, _ = ls.accept()
    if os.fork() == 0:
        try:
            if mode == "close":
                ls.close()
            else:
                d = os.dup(ls.fileno())
                ls.close()
            while True:
                b = c.recv(65536)
                if not b:
                    break
                c.sendall(b)
            c.close()
        finally:
            os._exit(0)
    c.close()
