# What the tests/apps scripts share: a loopback TCP connection, and the check that it
# runs over SMC-D when they are run under smcrun with SMC_EXPECT=1
# (tests/test-smcrun-apps.sh). A script imports it as `import smcapp` (Python puts
# the script's own directory first on sys.path).
import os
import socket
import sys

# libsmcproto/smcproto.h: SOL_SMC, and its read-only SMC_PROTO_MODE (int): 1 on an
# SMC-D connection; a socket without the library gives ENOPROTOOPT
SOL_SMC = 286
SMC_PROTO_MODE = 0x5301

EXPECT_SMC = os.environ.get("SMC_EXPECT") == "1"


def is_smcd(sock):
    """True when @sock is an SMC-D connection of the library."""
    try:
        return sock.getsockopt(SOL_SMC, SMC_PROTO_MODE) == 1
    except OSError:
        return False


def not_smcd(*socks):
    """True when SMC-D is expected (SMC_EXPECT=1) and one of @socks is not."""
    return EXPECT_SMC and not all(is_smcd(x) for x in socks)


def pair(backlog=1, check=True):
    """A connected (client, server) socket pair over 127.0.0.1, its listener closed.
    With @check and SMC_EXPECT=1 both ends must be SMC-D (AssertionError)."""
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(backlog)
    c = socket.create_connection(ls.getsockname())
    s, _ = ls.accept()
    ls.close()
    if check:
        assert not not_smcd(c, s), "not SMC-D"
    return c, s


def recv_exact(sock, n, short_ok=False):
    """Exactly @n bytes from @sock (received in pieces of at most 1 MiB). At EOF
    before that: EOFError, or with @short_ok the bytes that came (b"" at once)."""
    buf = bytearray()
    while len(buf) < n:
        d = sock.recv(min(n - len(buf), 1 << 20))
        if not d:
            if short_ok:
                break
            raise EOFError("EOF after %d of %d bytes" % (len(buf), n))
        buf += d
    return bytes(buf)


def finish(name, fails, done, *socks):
    """Close @socks, then print the script's one line: "NAME: FAIL: ..." with the
    failures (exit status 1), else "NAME: DONE" (exit status 0)."""
    for x in socks:
        x.close()
    if fails:
        print("%s: FAIL: %s" % (name, "; ".join(fails)))
        sys.exit(1)
    print("%s: %s" % (name, done))
    sys.exit(0)
