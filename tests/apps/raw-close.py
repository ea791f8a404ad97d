#!/usr/bin/env python3
# Descriptors closed or replaced past close(2)/dup2(2) under smcrun, as over TCP. node's
# libuv closes every descriptor with syscall(SYS_close, fd), CPython's os.closerange()
# uses close_range(2): before, the library never saw those closes, kept the number as an
# SMC connection, and the writes to a file opened later on that number went into the old
# connection's ring.
#  1. syscall(SYS_close, fd): the peer reads EOF; a file opened next on the same number
#     gets the bytes written to it.
#  2. os.closerange() around two live connections (everything from 3 up but their
#     descriptors): the third, inside the range, is closed (EOF at its peer); the two
#     keep working both ways, although the library's own descriptors they need lie in
#     the range; a file opened on the closed one's number gets its bytes.
#  3. close_range(fd, fd, CLOSE_RANGE_CLOEXEC): the connection stays open, with
#     FD_CLOEXEC set.
#  4. syscall(SYS_dup3, file, fd, 0) onto a connection: the peer reads EOF, the number
#     is the file.
#  5. a connection on fd 1 while subprocess runs a program (its vfork child dup2()s a
#     pipe onto fd 1): the parent's connection goes on.
# Prints one line; exit status 0 only if every case held.
import ctypes
import fcntl
import os
import platform
import subprocess
import sys
import tempfile

from streams import expect_eof as eof, pair, recv_all

NR = {"x86_64": {"close": 3, "dup3": 292}, "aarch64": {"close": 57, "dup3": 24}}.get(platform.machine())
CLOSE_RANGE_CLOEXEC = 4
libc = ctypes.CDLL(None, use_errno=True)


def open_at(fd, path):
    """open @path until the descriptor is number @fd (the lowest free ones are taken
    first); None if the number is not free"""
    extra = []
    try:
        while True:
            f = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
            if f == fd:
                return f
            extra.append(f)
            if f > fd:
                return None
    finally:
        for f in extra:
            if f != fd:
                os.close(f)


def file_gets(f, data):
    """write @data to file @f through its number and read it back"""
    os.write(f, data)
    os.lseek(f, 0, os.SEEK_SET)
    return os.read(f, 100) == data


def echo(a, b, data):
    a.sendall(data)
    b.sendall(recv_all(b, len(data)))
    return recv_all(a, len(data)) == data


def case_syscall_close(path):
    c, s = pair()
    fd = c.detach()
    ok = libc.syscall(NR["close"], fd) == 0
    ok = ok and eof(s)
    f = open_at(fd, path)
    ok = ok and f is not None and file_gets(f, b"FILEDATA")
    if f is not None:
        os.close(f)
    s.close()
    return ok, "syscall(SYS_close)"


def case_closerange(path):
    c1, s1 = pair()
    c2, s2 = pair()
    c3, s3 = pair()
    keep = sorted({c1.fileno(), s1.fileno(), c2.fileno(), s2.fileno(), s3.fileno()})
    fd = c3.detach()
    lo = 3
    for k in keep + [65536]:
        if k > lo:
            os.closerange(lo, k)  # [lo, k)
        lo = k + 1
    ok = eof(s3)
    ok = ok and echo(c1, s1, b"one" * 1000) and echo(s2, c2, b"two" * 1000)
    f = open_at(fd, path)
    ok = ok and f is not None and file_gets(f, b"RANGE")
    if f is not None:
        os.close(f)
    c1.close()
    ok = ok and eof(s1)
    for x in (s1, c2, s2, s3):
        x.close()
    return ok, "close_range"


def case_cloexec():
    c, s = pair()
    ok = libc.close_range(c.fileno(), c.fileno(), CLOSE_RANGE_CLOEXEC) == 0
    ok = ok and (fcntl.fcntl(c.fileno(), fcntl.F_GETFD) & fcntl.FD_CLOEXEC) != 0
    ok = ok and echo(c, s, b"still open")
    c.close()
    ok = ok and eof(s)
    s.close()
    return ok, "close_range(CLOSE_RANGE_CLOEXEC)"


def case_syscall_dup3(path):
    c, s = pair()
    f = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    fd = c.detach()
    ok = libc.syscall(NR["dup3"], f, fd, 0) == fd
    os.close(f)
    ok = ok and eof(s) and file_gets(fd, b"DUP3")
    os.close(fd)
    s.close()
    return ok, "syscall(SYS_dup3)"


def case_vfork_dup2_over():
    """a connection on fd 1 while subprocess (vfork, then dup2 of a pipe onto fd 1 in
    the child) runs a program: the parent's connection goes on (before: the child's
    dup2 made the library forget the parent's socket)"""
    c, s = pair()
    saved = os.dup(1)
    try:
        os.dup2(c.fileno(), 1)
        out = subprocess.run(["echo", "child"], stdout=subprocess.PIPE, check=False).stdout
        os.write(1, b"after")
        ok = out == b"child\n" and recv_all(s, 5) == b"after"
        s.sendall(b"back")
        ok = ok and os.read(1, 4) == b"back"
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    c.close()
    ok = ok and eof(s)
    s.close()
    return ok, "vfork-dup2-over-connection"


def main():
    if NR is None:
        print("skipped: no system call numbers for %s" % platform.machine())
        sys.exit(0)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "file")
        results = [case_syscall_close(path), case_closerange(path), case_cloexec(), case_syscall_dup3(path),
                   case_vfork_dup2_over()]
    bad = [name for ok, name in results if not ok]
    print("%d raw close cases, failed: %s" % (len(results), ", ".join(bad) or "none"))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
