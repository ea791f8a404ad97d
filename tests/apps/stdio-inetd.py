"""inetd's pattern: a forked child puts the accepted connection on its stdin and stdout
(and stderr) and execs a C stdio filter: tr, sed, grep, sort, sha256sum, base64, awk, wc.
glibc's stdio reads and writes through calls no preload sees, so under smcrun the new
image's stdin/stdout must be SMC streams (libsmcproto/preload.c, "C stdio"). Each reply
is compared with the same command run over pipes. Also passes over plain TCP."""
import hashlib
import os
import random
import socket
import subprocess
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from streams import listener, recv_all  # noqa: E402

rng = random.Random(7)
words = ["alpha", "beta", "gamma", "delta", "smc", "dmb", "cursor", "rkey", "x" * 300]


def text(nlines):
    return "".join(" ".join(rng.choice(words) for _ in range(rng.randint(1, 12))) + "\n"
                   for _ in range(nlines)).encode()


cases = [
    (["tr", "a-z", "A-Z"], text(40000)),            # about 1.5 MB, several rings' worth
    (["sed", "-e", "s/gamma/GAMMA/g"], text(20000)),
    (["grep", "-n", "cursor"], text(20000)),
    (["sort"], text(20000)),
    (["sha256sum"], os.urandom(3 << 20)),           # binary, 3 MiB
    (["base64"], os.urandom(1 << 20)),
    (["awk", "{ n += NF } END { print n, NR }"], text(10000)),
    (["wc", "-l"], text(5000)),
    (["tr", "a-z", "A-Z"], b""),                    # empty request
    (["sh", "-c", "echo to-stderr >&2; cat"], b"and the body\n"),  # stderr too
]


def serve_one(ls, argv):
    conn, _ = ls.accept()
    pid = os.fork()
    if pid == 0:
        try:
            os.dup2(conn.fileno(), 0)
            os.dup2(conn.fileno(), 1)
            os.dup2(conn.fileno(), 2)
            conn.close()
            ls.close()
            os.execvp(argv[0], argv)
        finally:
            os._exit(127)
    conn.close()
    return pid


def main():
    ls, addr = listener()
    fails = 0
    for argv, req in cases:
        if argv[0] == "sh":
            want = subprocess.run(argv, input=req, stdout=subprocess.PIPE, stderr=subprocess.STDOUT).stdout
        else:
            want = subprocess.run(argv, input=req, stdout=subprocess.PIPE).stdout
        c = socket.create_connection(addr)
        pid = serve_one(ls, argv)

        def send():
            c.sendall(req)
            c.shutdown(socket.SHUT_WR)

        t = threading.Thread(target=send)
        t.start()
        got = recv_all(c, 1 << 30)
        t.join()
        c.close()
        _, st = os.waitpid(pid, 0)
        ok = got == want and os.WIFEXITED(st) and os.WEXITSTATUS(st) in (0, 1)
        if not ok:
            fails += 1
            print("FAIL %s: %d bytes in, got %d bytes (sha %s), want %d (sha %s), status %#x" %
                  (argv[0], len(req), len(got), hashlib.sha256(got).hexdigest()[:12],
                   len(want), hashlib.sha256(want).hexdigest()[:12], st))
    ls.close()
    if fails:
        sys.exit(1)
    print("%d filters on stdin/stdout, every reply as over pipes" % len(cases))


main()
