#!/usr/bin/env python3
# A connection given to a child by subprocess, which forks with vfork() (CPython >=
# 3.10 without preexec_fn) and dup2()s between vfork and exec, under smcrun as over
# TCP. The vfork child runs in its parent's memory: its dup2 must not make the parent
# take a number of its own for the connection.
#  1. stdout=conn: the child's output reaches the peer; the parent's own stdout (a
#     pipe here) still gets what the parent writes there, and nothing of it reaches
#     the peer (it did: the parent's stdout went to the peer).
#  2. The parent's fd 1 is the connection (inetd style), the child's stdout a pipe:
#     the child's output goes to the pipe, the parent's writes to fd 1 to the peer.
#  3. stdin=conn, stdout=conn: the child (sha256sum) reads the peer's bytes and
#     answers over the same connection; the parent's stdout stays its own.
#  4. The parent's fd 1 is the connection and the child's stderr=STDOUT: CPython's
#     child copies a copy (errwrite = dup(1), then dup2(errwrite, 2)); the child's
#     stderr reaches the peer.
# Prints one line; exit status 0 only if every case held.
import hashlib
import os
import subprocess
import sys

from streams import expect_eof, pair, recv_all


def check(what, cond):
    if not cond:
        print("vfork-dup: %s failed" % what)
        sys.exit(1)


def parent_stdout_to_pipe():
    """fd 1 of this process becomes a pipe; returns (read end, saved fd 1)"""
    r, w = os.pipe()
    saved = os.dup(1)
    os.dup2(w, 1)
    os.close(w)
    return r, saved


def restore_stdout(r, saved):
    os.dup2(saved, 1)
    os.close(saved)
    data = b""
    os.set_blocking(r, False)
    try:
        data = os.read(r, 4096)
    except BlockingIOError:
        pass
    os.close(r)
    return data


# 1
c, s = pair()
r, saved = parent_stdout_to_pipe()
subprocess.run(["echo", "from-child"], stdout=s.fileno(), check=True)
os.write(1, b"parent-line\n")
out = restore_stdout(r, saved)
s.close()
got = recv_all(c, 4096)
check("case 1: the peer got %r, the parent's stdout %r" % (got, out),
      got == b"from-child\n" and out == b"parent-line\n")
c.close()

# 2
c, s = pair()
saved = os.dup(1)
os.dup2(s.fileno(), 1)
res = subprocess.run(["echo", "to-pipe"], stdout=subprocess.PIPE, check=True)
os.write(1, b"parent-via-fd1\n")
os.dup2(saved, 1)
os.close(saved)
s.close()
got = recv_all(c, 4096)
check("case 2: the child's pipe got %r, the peer %r" % (res.stdout, got),
      res.stdout == b"to-pipe\n" and got == b"parent-via-fd1\n")
c.close()

# 3
c, s = pair()
data = os.urandom(300 * 1000 + 7)
r, saved = parent_stdout_to_pipe()
p = subprocess.Popen(["sha256sum"], stdin=s.fileno(), stdout=s.fileno())
os.write(1, b"parent-line\n")
s.close()
c.sendall(data)
c.shutdown(1)
answer = recv_all(c, 4096)
p.wait()
out = restore_stdout(r, saved)
check("case 3: the peer got %r, the parent's stdout %r" % (answer[:80], out),
      answer.split()[:1] == [hashlib.sha256(data).hexdigest().encode()] and out == b"parent-line\n"
      and expect_eof(c))
c.close()
# 4
c, s = pair()
saved = os.dup(1)
os.dup2(s.fileno(), 1)
subprocess.run(["sh", "-c", "echo to-stdout; echo to-stderr >&2"], stderr=subprocess.STDOUT, check=True)
os.dup2(saved, 1)
os.close(saved)
s.close()
got = recv_all(c, 4096)
check("case 4: the peer got %r" % got, got == b"to-stdout\nto-stderr\n")
c.close()
print("vfork-dup: 4 cases as over TCP (child output to the peer, inetd-style parent, "
      "a child serving a connection, a copy of a copy)")
