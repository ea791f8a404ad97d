#!/usr/bin/env python3
# posix_spawn file actions that put an SMC connection on the child's stdin/stdout,
# under smcrun as over TCP. CPython's subprocess uses posix_spawn when close_fds=False
# and the program has a path: its adddup2 actions copy the connection onto the child's
# 0 and 1, and glibc runs them in the child past the library. Before, the child got a
# bare socketpair end there: its output never reached the peer.
#  1. printf with stdout=conn: the client reads its output, then EOF.
#  2. cat with stdin=conn and stdout=conn: 1 MiB echoed back intact (SHA-256), the
#     client half-closes to end it.
#     The parent's copy stays usable: it sends a trailer after the child exited.
#  3. Under smcrun, cat without the library (LD_PRELOAD removed) on the connection gets
#     a reset TCP socket there, as after an exec: it ends at once and the client reads
#     only the parent's bytes (it read the bare socketpair end and waited as long as
#     the parent lived). Over TCP it would copy (nothing: the client sends nothing).
# Prints one line; exit status 0 only if every case held.
import hashlib
import os
import socket
import subprocess
import sys
import threading

PRINTF = next(p for p in ("/usr/bin/printf", "/bin/printf") if os.path.exists(p))
CAT = next(p for p in ("/bin/cat", "/usr/bin/cat") if os.path.exists(p))
fails = []
ls = socket.socket()
ls.bind(("127.0.0.1", 0))
ls.listen(4)
addr = ls.getsockname()


def read_all(c, timeout):
    """all the client reads until EOF, or what went wrong, as bytes"""
    out = bytearray()
    c.settimeout(timeout)
    try:
        while True:
            b = c.recv(65536)
            if not b:
                return bytes(out)
            out += b
    except OSError as e:
        return repr(e).encode()


# 1
c = socket.create_connection(addr)
s, _ = ls.accept()
p = subprocess.Popen([PRINTF, "hello-from-child"], stdout=s, close_fds=False)
p.wait(timeout=20)
s.sendall(b"|parent")
s.close()
got = read_all(c, 10)
c.close()
if got != b"hello-from-child|parent" or p.returncode != 0:
    fails.append("printf stdout=conn: the client read %r (exit %s)" % (got[:80], p.returncode))

# 2
data = os.urandom(1 << 20)
c = socket.create_connection(addr)
s, _ = ls.accept()
p = subprocess.Popen([CAT], stdin=s, stdout=s, close_fds=False)
s.close()


def feed():
    try:
        c.sendall(data)
        c.shutdown(socket.SHUT_WR)
    except OSError:
        pass  # (the client's read reports it)


t = threading.Thread(target=feed)
t.start()
got = read_all(c, 20)
t.join()
try:
    p.wait(timeout=20)
except subprocess.TimeoutExpired:
    p.kill()
    p.wait()
c.close()
if hashlib.sha256(got).digest() != hashlib.sha256(data).digest() or p.returncode != 0:
    fails.append("cat stdin=stdout=conn: %d of %d bytes back%s (exit %s)" %
                 (len(got), len(data), "" if len(got) != len(data) else ", different", p.returncode))

# 3: a new program that does not load the library cannot take the connection over: it
# gets a reset TCP socket there (as after an exec), never the bare socketpair end (its
# reads waited as long as the parent lived, its writes vanished)
under_smcrun = "libsmcrun" in os.environ.get("LD_PRELOAD", "")
c = socket.create_connection(addr)
s, _ = ls.accept()
env = dict(os.environ)
env.pop("LD_PRELOAD", None)
if not under_smcrun:  # over TCP cat would wait for the client's data: nothing to test
    s.shutdown(socket.SHUT_RD)
    c.shutdown(socket.SHUT_WR)
p = subprocess.Popen([CAT], stdin=s, stdout=s, close_fds=False, env=env, stderr=subprocess.DEVNULL)
try:
    p.wait(timeout=10)
    ended = True
except subprocess.TimeoutExpired:
    p.kill()
    p.wait()
    ended = False
s.sendall(b"|parent")
s.close()
got = read_all(c, 10)
c.close()
if under_smcrun and (not ended or got != b"|parent"):
    fails.append("cat without the library on the connection: %s, the client read %r" %
                 ("ended" if ended else "killed after 10 s", got[:80]))
ls.close()
if fails:
    print("spawn-actions: " + "; ".join(fails))
    sys.exit(1)
print("spawn-actions: posix_spawn's dup2 of a connection onto the child's stdout (printf) and stdin+stdout "
      "(cat, 1 MiB echoed intact); the parent's copy goes on; a child without the library gets a reset socket")
