"""A program's own unix stream socket pair with the smallest send buffer (what an SMC-D
connection's doorbell end looks like), one end passed over SCM_RIGHTS to an exec'd
worker: it arrives as it is, bytes both ways, as without the library (smcd, asked,
says it is none of its own). With no smcd to ask it is reset instead: nothing else can
tell it from a connection's doorbell end, whose bytes must never be read as data
(helpers 127, 128). Also passes without smcrun."""
import array
import os
import socket
import sys

if len(sys.argv) > 1:  # the worker: the end arrives on the channel named by argv[1]
    u = socket.socket(fileno=int(sys.argv[1]))
    msg, anc, _, _ = u.recvmsg(10, socket.CMSG_SPACE(4))
    fd = array.array("i", anc[0][2])[0]
    s = socket.socket(fileno=fd)
    s.settimeout(10)
    try:
        s.sendall(b"hi-from-worker")
        d = s.recv(100)
        print("family %d, got %r" % (s.family, d))
    except OSError as e:
        print("family %d, error %s" % (s.family, e))
    sys.exit(0)

ls = socket.socket()  # (a socket of the library's first: its control connection is up)
ls.bind(("127.0.0.1", 0))
ls.listen(1)
x, y = socket.socketpair()
for k in (x, y):
    k.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1)
p, q = socket.socketpair()
os.set_inheritable(q.fileno(), True)
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.dup2(w, 1)
    os.execv(sys.executable, [sys.executable, sys.argv[0], str(q.fileno())])
os.close(w)
q.close()
p.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [x.fileno()]))])
x.close()
y.settimeout(10)
fails = []
try:
    got = y.recv(100)
    if got != b"hi-from-worker":
        fails.append("master got %r" % got)
    y.sendall(b"hi-from-master")
except OSError as e:
    fails.append("master: %s" % e)
worker = b""
while True:
    b = os.read(r, 4096)
    if not b:
        break
    worker += b
os.waitpid(pid, 0)
if worker.decode().strip() != "family %d, got %r" % (socket.AF_UNIX, b"hi-from-master"):
    fails.append("worker: %s" % worker.decode().strip())
if fails:
    print("own-pair-pass: FAIL: " + "; ".join(fails))
    sys.exit(1)
print("own-pair-pass: the pair end arrived as it is, bytes both ways")
