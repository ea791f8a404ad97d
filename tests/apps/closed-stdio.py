"""A program that runs with stdin, stdout and stderr closed (a daemon started with
`<&- >&- 2>&-`, or one that closed them): its sockets take the numbers 0, 1, 2 as
over TCP (the kernel gives the lowest free number), and the library's own descriptors
(a listener's TCP socket and channels, a connection's Y, the control connection, an
async connect's copy, an accepted connection's option socket, a splice's pipe) never
sit there. Before, they took 0..2 first: the program's sockets got other numbers, and a daemon's usual check (open /dev/null where 0..2 are
not open) found them open, so its writes to stdout went into the library's sockets,
and a dup2() onto them closed them under the library. Also passes over plain TCP."""
import hashlib
import os
import select
import socket
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import smcapp  # noqa: E402

fails = []
report = os.dup(1)  # (the result line goes there at the end)
os.set_inheritable(report, False)
for k in (0, 1, 2):
    os.close(k)


def check(cond, what):
    if not cond:
        fails.append(what)


def echo_ok(c, a, size, seed):
    """@size bytes c -> a, and back: the sender in a thread (more than a ring holds)."""
    data = hashlib.sha256(seed).digest() * (size // 32)

    def recv_n(s, n):
        got = bytearray()
        while len(got) < n:
            b = s.recv(1 << 16)
            if not b:
                break
            got += b
        return bytes(got)

    t = threading.Thread(target=c.sendall, args=(data,))
    t.start()
    got = recv_n(a, len(data))
    t.join()
    t = threading.Thread(target=a.sendall, args=(got,))
    t.start()
    back = recv_n(c, len(data))
    t.join()
    return back == data


# 1. listen, connect, accept: 0, 1, 2
ls = socket.socket()
ls.bind(("127.0.0.1", 0))
ls.listen(8)
c = socket.create_connection(ls.getsockname())
a, _ = ls.accept()
check((ls.fileno(), c.fileno(), a.fileno()) == (0, 1, 2),
      "listener, connected and accepted sockets are fds %d, %d, %d (TCP: 0, 1, 2)"
      % (ls.fileno(), c.fileno(), a.fileno()))
check(not smcapp.not_smcd(c, a), "first pair not SMC-D")
check(echo_ok(c, a, 1 << 20, b"first"), "first pair: echo of 1 MiB wrong")
c.close()
a.close()

# 2. a nonblocking connect (its wait runs beside the program): 1, then accept: 2
c = socket.socket()
c.setblocking(False)
err = c.connect_ex(ls.getsockname())
check(err in (0, 115), "nonblocking connect: %s" % os.strerror(err))
a, _ = ls.accept()
select.select([], [c], [], 10)
c.setblocking(True)
check((c.fileno(), a.fileno()) == (1, 2),
      "nonblocking connect, accept: fds %d, %d (TCP: 1, 2)" % (c.fileno(), a.fileno()))
check(not smcapp.not_smcd(c, a), "second pair not SMC-D")
check(echo_ok(c, a, 1 << 18, b"second"), "second pair: echo wrong")
c.close()
a.close()

# 3. a daemon's check: 1 and 2 are not open, so they get /dev/null; its writes to
# stdout and stderr go there, and later connections are unharmed
for k in (0, 1, 2):
    try:
        os.fstat(k)
    except OSError:
        n = os.open("/dev/null", os.O_RDWR)
        check(n == k, "/dev/null opened for fd %d got %d" % (k, n))
        if n != k:
            os.dup2(n, k)
            os.close(n)
for k in (1, 2):
    check(os.readlink("/proc/self/fd/%d" % k) == "/dev/null",
          "fd %d is %s, not /dev/null" % (k, os.readlink("/proc/self/fd/%d" % k)))
    os.write(k, b"x" * 4096)
for i in range(3):
    c = socket.create_connection(ls.getsockname())
    a, _ = ls.accept()
    check(not smcapp.not_smcd(c, a), "connection %d after /dev/null not SMC-D" % i)
    check(echo_ok(c, a, 1 << 16, b"after%d" % i), "connection %d after /dev/null: echo wrong" % i)
    c.close()
    a.close()

# 4. an option set on an accepted connection (the library keeps it on a socket of
# its own, made then) once the listener's 0 is free: 0 stays the program's
c = socket.create_connection(ls.getsockname())
a, _ = ls.accept()
ls.close()
a.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
n = os.open("/dev/null", os.O_RDONLY)
check(n == 0, "open() after SO_KEEPALIVE on the accepted connection got fd %d (TCP: 0)" % n)
try:
    check(a.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1, "SO_KEEPALIVE not kept")
except OSError as e:
    fails.append("getsockopt(SO_KEEPALIVE) on the accepted connection: %s" % e)
check(echo_ok(c, a, 1 << 16, b"keepalive"), "connection with SO_KEEPALIVE: echo wrong")
c.close()
a.close()
try:
    fd0 = os.readlink("/proc/self/fd/0")
except OSError:
    fd0 = "closed"
check(fd0 == "/dev/null", "fd 0 after the close: %s (TCP: /dev/null)" % fd0)

# 5. a blocking splice() from a connection into a pipe (the library's own pipe for
# the call lives while it waits) with 0 free: another thread's open() gets 0
ls = socket.socket()
ls.bind(("127.0.0.1", 0))
ls.listen(8)
c = socket.create_connection(ls.getsockname())
a, _ = ls.accept()
pr, pw = os.pipe()
os.close(0)
spliced = []
t = threading.Thread(target=lambda: spliced.append(os.splice(a.fileno(), pw, 100)))
t.start()
t.join(0.3)  # (in the splice's wait by then, or the open below proves nothing)
n = os.open("/dev/null", os.O_RDONLY)
check(n == 0, "open() during a splice from the connection got fd %d (TCP: 0)" % n)
c.sendall(b"spliced")
t.join()
check(spliced == [7] and os.read(pr, 100) == b"spliced", "splice moved %s" % spliced)
for f in (c, a, ls):
    f.close()
os.close(pr)
os.close(pw)

os.dup2(report, 1)
smcapp.finish("closed-stdio", fails, "sockets on 0..2 as over TCP, 7 connections right")
