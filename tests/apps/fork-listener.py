#!/usr/bin/env python3
# A server that forks a child per connection and blocks in accept() again at once, as
# inetd-style servers do; each child serves its connection (echo) and exits. What the
# child does with its copy of the listening socket:
#   close  closes it first (as PostgreSQL's backends do)
#   dup    keeps a duplicate of it and closes the original
#   exec   (the server) first execs itself with the listening socket, as nginx's
#          binary upgrade hands its listeners to the new binary; then as close
#   usr1   as close, and the server execs itself so at SIGUSR1 (after an smcd restart:
#          the new image holds an earlier smcd's channel); the new image writes
#          PORTFILE again
# tests/test-smcd-restart.sh: after an smcd restart each server's listener comes
# back to SMC-D by itself (its accept channel outlives smcd: LISTEN F_REVIVE).
# usage: fork-listener.py MODE PORTFILE
import os
import signal
import socket
import sys

mode, portfile = sys.argv[1], sys.argv[2]
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
if mode == "exec-image":  # the image exec'd by "exec", with the listener at argv[3]
    ls = socket.socket(fileno=int(sys.argv[3]))
    mode = "close"
    print("exec'd image", os.getpid(), flush=True)
else:
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(16)
    def exec_image(*_):
        os.set_inheritable(ls.fileno(), True)
        os.execv(sys.executable, [sys.executable, sys.argv[0], "exec-image", portfile, str(ls.fileno())])
    if mode == "exec":
        exec_image()
    if mode == "usr1":
        signal.signal(signal.SIGUSR1, exec_image)
        mode = "close"
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
