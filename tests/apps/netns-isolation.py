#!/usr/bin/env python3
# Network namespaces (containers) on one host share one smcd: a connection must reach
# the listener TCP would reach, in the client's own namespace, never one of the same
# port in another namespace. Before, smcd matched listeners by address and port alone:
# a client connecting to its own 127.0.0.1:P reached a server listening on P in
# another namespace (where TCP was refused), and with a listener on P in both, the
# connections went to either in turn (2026-12-06).
# Under smcrun, as root with unshare(1) and ip(8) (else it says so and passes):
#   1. a server in a new namespace B on 0.0.0.0:P; a client here connects to
#      127.0.0.1:P: ECONNREFUSED, as TCP, and B's server gets nothing;
#   2. a listener on P here too: 6 connections, all accepted here, SMC-D, none in B;
#   3. client and server both in another new namespace: SMC-D, the bytes arrive.
# Prints one line; exit status 0 only if all that held.
import os
import shutil
import socket
import subprocess
import sys

UNDER_SMCRUN = "libsmcrun" in os.environ.get("LD_PRELOAD", "")
SERVER = r"""
import socket, sys
ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("0.0.0.0", int(sys.argv[1]))); ls.listen(16); ls.settimeout(4)
print("ready", flush=True)
n = 0
try:
    while True:
        s, _ = ls.accept(); n += 1; s.close()
except socket.timeout:
    pass
print(n, flush=True)
"""

BOTH = r"""
import socket
ls = socket.socket(); ls.bind(("127.0.0.1", 0)); ls.listen(4)
c = socket.create_connection(ls.getsockname()); s, _ = ls.accept()
c.sendall(b"inside"); got = s.recv(100)
print(c.getsockopt(286, 0x5301), s.getsockopt(286, 0x5301), got.decode())
"""


def in_new_ns(code, *args, **kw):
    return subprocess.Popen(["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$0" "$@"',
                             sys.executable, "-c", code] + [str(a) for a in args],
                            stdout=subprocess.PIPE, text=True, **kw)


def main():
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip") or \
            subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode != 0:
        print("netns-isolation: skipped (needs root, unshare and ip)")
        return 0
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    bad = []
    b = in_new_ns(SERVER, port)
    if b.stdout.readline().strip() != "ready":
        print("netns-isolation: the server in namespace B did not start")
        return 1
    c = socket.socket()
    try:
        c.connect(("127.0.0.1", port))
        bad.append("1: connected to 127.0.0.1:%d, where only another namespace listens (TCP: refused)" % port)
    except ConnectionRefusedError:
        pass
    c.close()
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("0.0.0.0", port))
    ls.listen(16)
    ls.settimeout(3)
    here = 0
    for i in range(6):
        c = socket.create_connection(("127.0.0.1", port), timeout=3)
        try:
            mode = c.getsockopt(286, 0x5301)
        except OSError:
            mode = 1 if not UNDER_SMCRUN else -1  # (plain TCP: no such option)
        try:
            s, _ = ls.accept()
            here += 1
            s.close()
        except socket.timeout:
            pass
        if mode != 1:
            bad.append("2: connection %d mode %d, not SMC-D" % (i, mode))
        c.close()
    if here != 6:
        bad.append("2: %d of 6 connections accepted here" % here)
    out = b.communicate(timeout=20)[0].split()
    if out != ["0"]:
        bad.append("1, 2: the server in namespace B accepted %s" % out)
    both = in_new_ns(BOTH)
    got = both.communicate(timeout=20)[0].split()
    if UNDER_SMCRUN and got != ["1", "1", "inside"] or not UNDER_SMCRUN and both.returncode != 1:
        bad.append("3: client and server in one new namespace: modes and bytes %r (want SMC-D both)" % got)
    if bad:
        print("netns-isolation: " + "; ".join(bad))
        return 1
    print("netns-isolation: 127.0.0.1:%d refused where only another namespace listens; 6 of 6 to this namespace's "
          "listener (SMC-D), none to the other's; SMC-D inside a new namespace" % port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
