"""Helpers shared by the tests/apps/*.py checks: a connected pair, reading a count of
bytes, waiting for end of file. Plain socket calls, so that under smcrun they are SMC
sockets and without it TCP (every check also passes over TCP)."""
import socket


def listener():
    """a listening TCP socket on 127.0.0.1 and its address"""
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(8)
    return ls, ls.getsockname()


def pair():
    """a connected (client, accepted) pair; the listener is closed"""
    ls, addr = listener()
    c = socket.create_connection(addr)
    s, _ = ls.accept()
    ls.close()
    return c, s


def recv_all(s, n):
    """up to n bytes, fewer only at end of file"""
    buf = bytearray()
    while len(buf) < n:
        b = s.recv(min(65536, n - len(buf)))
        if not b:
            break
        buf += b
    return bytes(buf)


def expect_eof(s, timeout=5.0):
    """True if the next recv is end of file within timeout seconds"""
    s.settimeout(timeout)
    try:
        return s.recv(1) == b""
    except socket.timeout:
        return False
