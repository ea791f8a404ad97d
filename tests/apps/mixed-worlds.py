#!/usr/bin/env python3
# Mixed worlds under smcrun: a plain TCP client (SMCRUN_DISABLE=1) against an smcrun
# server, and an smcrun client against a plain TCP server. Both work over TCP, with
# the data checked, and each smcrun end records why it is TCP: mode
# SMC_PROTO_MODE_TCP and fallback reason SMC_CLC_DECL_PEERNOSMC (getsockopt SOL_SMC).
import os
import socket
import struct
import subprocess
import sys

SOL_SMC = 286
SMC_PROTO_MODE = 0x5301
SMC_PROTO_FALLBACK_REASON = 0x5302
MODE_TCP = 2
PEERNOSMC = 0x03010000

PLAIN_CLIENT = """
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"from-plain-client")
print(s.recv(100).decode())
"""

PLAIN_SERVER = """
import socket, sys
ls = socket.socket()
ls.bind(("127.0.0.1", 0))
ls.listen(1)
print(ls.getsockname()[1], flush=True)
c, _ = ls.accept()
c.sendall(b"from-plain-server:" + c.recv(100))
c.close()
"""


def smc_info(s):
    mode = struct.unpack("i", s.getsockopt(SOL_SMC, SMC_PROTO_MODE, 4))[0]
    reason = struct.unpack("I", s.getsockopt(SOL_SMC, SMC_PROTO_FALLBACK_REASON, 4))[0]
    return mode, reason


def main():
    plain = dict(os.environ, SMCRUN_DISABLE="1")
    ok = True
    # a plain client against our (smcrun) server
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    p = subprocess.Popen([sys.executable, "-c", PLAIN_CLIENT, str(ls.getsockname()[1])], env=plain,
                         stdout=subprocess.PIPE, text=True)
    c, _ = ls.accept()
    got = c.recv(100)
    c.sendall(b"from-smcrun-server")
    out = p.communicate(timeout=20)[0].strip()
    srv = smc_info(c)
    c.close()
    ls.close()
    ok1 = got == b"from-plain-client" and out == "from-smcrun-server" and srv == (MODE_TCP, PEERNOSMC)
    ok = ok and ok1
    # our (smcrun) client against a plain server
    p = subprocess.Popen([sys.executable, "-c", PLAIN_SERVER], env=plain, stdout=subprocess.PIPE, text=True)
    port = int(p.stdout.readline())
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"x")
    back = s.recv(100)
    cli = smc_info(s)
    s.close()
    p.wait(timeout=20)
    ok2 = back == b"from-plain-server:x" and cli == (MODE_TCP, PEERNOSMC)
    ok = ok and ok2
    print("plain client -> smcrun server: %s mode/reason %d/%#x; smcrun client -> plain server: %s mode/reason %d/%#x"
          % ("ok" if ok1 else "FAILED", srv[0], srv[1], "ok" if ok2 else "FAILED", cli[0], cli[1]))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
