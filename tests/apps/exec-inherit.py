#!/usr/bin/env python3
# SMC-D sockets inherited across execve(), under smcrun, as over TCP: a socket that is
# not close-on-exec lives on in the new image (which runs under smcrun too) with every
# byte in order; a close-on-exec one is closed by the exec.
#  1. The accepting side execs: it echoes the first 1000 bytes, leaves the rest of
#     what the client sent unread in its ring and a corked (TCP_CORK) reply
#     unpublished, then os.execv()s this script, which adopts the socket (checked:
#     SMC-D, not TCP), echoes 1 MiB and sends the SHA-256 of all it read.
#  2. The connecting side execs (the same, mirrored).
#     Also through /bin/sh (a C program's execve(): sh adopts the socket and execs
#     python, which adopts it again), with posix_spawn() and with subprocess' pass_fds
#     (a fork or vfork, then an exec: the new process shares the socket; the parent
#     closes its copy, which ends nothing).
#     A copy made by dup2() (inetd's pattern; the original close-on-exec) lives on
#     the same way. A listener inherited across exec accepts SMC-D connections in the
#     new image.
#  3. A socket with close-on-exec set (Python's default) does not survive: the new
#     image has no such fd and the client reads EOF.
#  4. An exec of a program that does not exist fails: the socket goes on working in
#     the old image.
#  5. The new image cannot reach smcd (SMCD_RUNTIME_DIR elsewhere): the inherited
#     socket is a reset connection there (ECONNRESET or EOF), never doorbell bytes.
#  6. The new image does not load libsmcrun.so (LD_PRELOAD removed): the old image put
#     a reset TCP socket in the descriptor's place before the exec: the same.
#     With EXEC_VARIANTS=path of tests/exec-variants (meson test smcrun-exec): the same
#     through a C program for each of execl, execlp, execle, execv, execvp, execvpe,
#     fexecve, execveat and posix_spawnp.
#  7. Bad SMCRUN_INHERIT entries (malformed, naming a descriptor that is no socketpair
#     end or no listener, naming a connection smcd does not know) crash nothing: the first two are
#     ignored (their descriptors untouched), the third descriptor is reset (its bytes
#     never reach the program); the variable is gone from the new image's environment.
#     An SMCRUN_INHERIT the program passes in an environment of its own is dropped by
#     the exec (it would name descriptors that are something else by then).
# Prints one line; exit status 0 only if every case held.
import fcntl
import hashlib
import os
import socket
import subprocess
import sys
import threading

from streams import recv_all

SOL_SMC, SMC_PROTO_MODE, MODE_SMCD = 286, 0x5301, 1
ME = os.path.abspath(__file__)
PY = sys.executable
# a statically linked program (Debian's busybox), "" if there is none
BUSYBOX = next((p for p in ("/bin/busybox", "/usr/bin/busybox") if os.path.exists(p) and
                b"/ld-linux" not in open(p, "rb").read(4096)), "")
# a program that loads liburing must get no SMC socket (smcrun(1), io_uring); "" if absent
LIBURING = next((p for p in ("/usr/lib/x86_64-linux-gnu/liburing.so.2", "/usr/lib/aarch64-linux-gnu/liburing.so.2",
                             "/usr/lib/liburing.so.2") if os.path.exists(p)), "")
FIRST = 1000
EXTRA = 32 << 10  # less than the smallest ring (64 KiB by default)
SIZE = 1 << 20
PAYLOAD = bytes((i * 7 + (i >> 10)) & 0xFF for i in range(SIZE))


def recv_line(s):
    buf = bytearray()
    while not buf.endswith(b"\n"):
        b = s.recv(1)
        if not b:
            break
        buf += b
    return bytes(buf)


# ---- roles run in child processes ---------------------------------------------------


def pre_exec(s):
    """the old image's part: echo FIRST bytes, leave a corked greeting, leave the rest
    of the client's data unread"""
    got = recv_all(s, FIRST)
    s.sendall(got)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
    s.send(b"corked-before-exec\n")  # held back by the cork until the new image flushes


def serve(fd):
    """the new image: adopt fd, uncork, echo the rest, send the digest of all it read"""
    s = socket.socket(fileno=fd)
    mode = s.getsockopt(SOL_SMC, SMC_PROTO_MODE)
    if mode != MODE_SMCD:
        print("serve: fd %d mode %d, not SMC-D" % (fd, mode), file=sys.stderr)
        return 3
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)
    h = hashlib.sha256(PAYLOAD[:FIRST])
    n = 0
    while True:
        b = s.recv(65536)
        if not b:
            break
        h.update(b)
        s.sendall(b)
        n += len(b)
    s.sendall(("%d %s\n" % (FIRST + n, h.hexdigest())).encode())
    s.close()
    return 0


def reexec(s, env=None, target="serve"):
    s.set_inheritable(True)
    args = [PY, ME, target, str(s.fileno())]
    if env is None:
        os.execv(PY, args)
    os.execve(PY, args, env)


def acceptor(kind):
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(4)
    print(ls.getsockname()[1], flush=True)
    s, _ = ls.accept()
    ls.close()
    if kind == "exec":
        pre_exec(s)
        reexec(s)
    if kind.startswith("variant:"):
        # a C program that execs python through one exec function (EXEC_VARIANTS)
        pre_exec(s)
        s.set_inheritable(True)
        helper = os.environ["EXEC_VARIANTS"]
        os.execv(helper, [helper, kind[8:], str(s.fileno()), PY, ME])
    if kind == "popen":
        # subprocess with pass_fds (CPython forks or vforks, then execs): as posix_spawn
        pre_exec(s)
        p = subprocess.Popen([PY, ME, "serve", str(s.fileno())], pass_fds=(s.fileno(),))
        s.close()
        return p.wait()
    if kind == "dup2":
        # inetd's pattern: the connection moved to another number, the original
        # close-on-exec (only the copy lives on)
        pre_exec(s)
        fd = os.dup2(s.fileno(), 20)  # inheritable
        os.execv(PY, [PY, ME, "serve", str(fd)])
    if kind == "shell":
        # a C program's execve() in between: /bin/sh adopts it and execs python
        pre_exec(s)
        s.set_inheritable(True)
        os.execv("/bin/sh", ["sh", "-c", 'exec "$0" "$1" serve "$2"', PY, ME, str(s.fileno())])
    if kind == "spawn":
        # posix_spawn: the new process shares the socket; the parent's close only
        # lets go of its copy
        pre_exec(s)
        s.set_inheritable(True)
        pid = os.posix_spawn(PY, [PY, ME, "serve", str(s.fileno())], os.environ)
        s.close()
        _, st = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(st)
    if kind == "cloexec":
        got = recv_all(s, FIRST)  # all of it: a close then is a FIN, not a RST
        s.sendall(got)
        os.execv(PY, [PY, ME, "check-closed", str(s.fileno())])
    if kind == "enoent":
        got = recv_all(s, FIRST)
        s.sendall(got)
        s.set_inheritable(True)
        l2 = socket.socket()  # an inheritable SMC listener too
        l2.bind(("127.0.0.1", 0))
        l2.listen(1)
        l2.set_inheritable(True)
        try:
            os.execv("/nonexistent/program", ["/nonexistent/program"])
        except OSError:
            pass
        else:
            return 4
        if s.getsockopt(SOL_SMC, SMC_PROTO_MODE) != MODE_SMCD:
            return 8
        with socket.create_connection(l2.getsockname()) as c2:
            a2, _ = l2.accept()
            if a2.getsockopt(SOL_SMC, SMC_PROTO_MODE) != MODE_SMCD:
                print("listener after a failed exec: not SMC-D", file=sys.stderr)
                return 8
            c2.sendall(b"x")
            if a2.recv(1) != b"x":
                return 8
            a2.close()
        l2.close()
        # close-on-exec is back on everything but the socket and stdio (Y, T)
        for name in os.listdir("/proc/self/fd"):
            fd = int(name)
            try:
                if fd > 2 and fd != s.fileno() and not fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC:
                    print("fd %d lost close-on-exec after a failed exec" % fd, file=sys.stderr)
                    return 8
            except OSError:
                pass  # the directory's own fd
        return serve_here(s)
    if kind in ("nosmcd", "nopreload", "iouring"):
        got = recv_all(s, FIRST)
        s.sendall(got)
        env = dict(os.environ)
        if kind == "nosmcd":
            env["SMCD_RUNTIME_DIR"] = "/nonexistent-smcd-dir"
        elif kind == "iouring":
            # the new image loads liburing: it must not adopt an SMC socket
            env["LD_PRELOAD"] = env.get("LD_PRELOAD", "") + ":" + LIBURING
        else:
            env.pop("LD_PRELOAD", None)
        reexec(s, env, "expect-reset")
    if kind == "static":
        # a statically linked program ignores LD_PRELOAD: it must get a reset socket,
        # not the bare socketpair end (its cat would move doorbell bytes, or hang)
        got = recv_all(s, FIRST)
        s.sendall(got)
        s.set_inheritable(True)
        fd = s.fileno()
        os.execv(BUSYBOX, [BUSYBOX, "sh", "-c", "cat <&%d >&%d 2>/dev/null; exit 0" % (fd, fd)])
    return 5


def listen_exec():
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(4)
    print(ls.getsockname()[1], flush=True)
    ls.set_inheritable(True)
    os.execv(PY, [PY, ME, "listen-serve", str(ls.fileno())])


def listen_serve(fd):
    """the new image: accept on the inherited listener (SMC-D again), serve"""
    ls = socket.socket(fileno=fd)
    print("ready", flush=True)
    s, _ = ls.accept()
    ls.close()
    if s.getsockopt(SOL_SMC, SMC_PROTO_MODE) != MODE_SMCD:
        print("listen-serve: accepted connection not SMC-D", file=sys.stderr)
        return 12
    pre_exec(s)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)
    return serve_here(s)


def case_listener():
    p = spawn("listen-exec")
    port = int(p.stdout.readline())
    if p.stdout.readline() != "ready\n":
        return "no ready line"
    with socket.create_connection(("127.0.0.1", port)) as s:
        if s.getsockopt(SOL_SMC, SMC_PROTO_MODE) != MODE_SMCD:
            return "not SMC-D"
        err = client_side(s)
    rc = p.wait(30)
    return err or (rc and "server exit %d" % rc)


def serve_here(s):
    h = hashlib.sha256(PAYLOAD[:FIRST])
    n = 0
    while True:
        b = s.recv(65536)
        if not b:
            break
        h.update(b)
        s.sendall(b)
        n += len(b)
    s.sendall(("%d %s\n" % (FIRST + n, h.hexdigest())).encode())
    s.close()
    return 0


def connector(port):
    s = socket.create_connection(("127.0.0.1", int(port)))
    pre_exec(s)
    reexec(s)


def bogus(x, y, nullfd):
    if "SMCRUN_INHERIT" in os.environ or "ENTRIES" not in os.environ:
        print("bogus: SMCRUN_INHERIT still set", file=sys.stderr)
        return 10
    st = os.fstat(nullfd)
    if st.st_rdev != os.stat("/dev/null").st_rdev:
        print("bogus: fd %d changed" % nullfd, file=sys.stderr)
        return 10
    os.fstat(y)  # not the connection's hidden TCP socket: left alone
    # X is the program's own socketpair end (no smcd made it): left alone too, with
    # what its peer wrote (an X of smcd's whose adoption fails is reset: "no smcd
    # after exec")
    s = socket.socket(fileno=x)
    s.settimeout(5)
    try:
        b = s.recv(64)
    except OSError as e:
        print("bogus: the program's own socket: %s" % e, file=sys.stderr)
        return 7
    if b != b"\x01\x01doorbells":
        print("bogus: the program's own socket gave %r" % b, file=sys.stderr)
        return 7
    return 0


def case_bogus():
    a, b = socket.socketpair()
    ya, yb = socket.socketpair()
    a.sendall(b"\x01\x01doorbells")  # the program's own pair: must arrive unchanged
    nullfd = os.open("/dev/null", os.O_RDONLY)
    x, y = b.fileno(), yb.fileno()
    # the preloaded exec strips an SMCRUN_INHERIT it did not make: set it from a shell
    # that runs without the preload
    env = dict(os.environ)
    env["PRELOAD"] = env.pop("LD_PRELOAD", "")
    env["ENTRIES"] = ",".join([
        "garbage",
        "1:2:3",
        "%d:-1:1:2:65536:3:65536:0:0:0:extra" % x,
        "%d:-1:1:2:65536:3:65536:0:0:0" % nullfd,                 # not a socketpair end
        "%d:%d:7777777:2:65536:3:65536:0:5:0" % (x, y),           # unknown to smcd
        "L", "L:", "L:abc:0", "L:%d:2" % nullfd, "L:%d:0:0" % nullfd,
        "L:%d:0" % nullfd,                                        # not a listener
    ])
    p = subprocess.Popen(["/bin/sh", "-c", 'LD_PRELOAD="$PRELOAD" SMCRUN_INHERIT="$ENTRIES" exec "$@"', "sh",
                          PY, ME, "bogus", str(x), str(y), str(nullfd)], env=env, pass_fds=(x, y, nullfd))
    rc = p.wait(30)
    os.close(nullfd)
    for s in (a, b, ya, yb):
        s.close()
    return rc and "child exit %d" % rc


def check_closed(fd):
    try:
        os.fstat(fd)
    except OSError:
        return 0
    print("fd %d survived an exec with close-on-exec set" % fd, file=sys.stderr)
    return 6


def expect_reset(fd):
    s = socket.socket(fileno=fd)
    try:
        b = s.recv(65536)
    except ConnectionResetError:
        return 0
    except OSError as e:
        print("expect-reset: recv: %s" % e, file=sys.stderr)
        return 7
    if b:
        print("expect-reset: read %d bytes %r from an inherited socket" % (len(b), b[:16]), file=sys.stderr)
        return 7
    return 0


# ---- the test driver -------------------------------------------------------------------


def client_side(s, corked=True):
    """send FIRST bytes and more, check the echo, the corked greeting, the digest"""
    # EXTRA bytes past FIRST wait unread in the peer's ring while it execs
    s.sendall(PAYLOAD[:FIRST + EXTRA])
    if recv_all(s, FIRST) != PAYLOAD[:FIRST]:
        return "first echo wrong"
    # the rest goes while the peer execs, or after
    t = threading.Thread(target=lambda: (s.sendall(PAYLOAD[FIRST + EXTRA:]), s.shutdown(socket.SHUT_WR)))
    t.start()
    if corked:
        line = recv_line(s)
        if line != b"corked-before-exec\n":
            t.join()
            return "greeting %r" % line[:40]
    back = recv_all(s, SIZE - FIRST)
    t.join()
    if back != PAYLOAD[FIRST:]:
        return "echo of %d bytes differs (got %d)" % (SIZE - FIRST, len(back))
    want = "%d %s\n" % (SIZE, hashlib.sha256(PAYLOAD).hexdigest())
    got = recv_line(s).decode(errors="replace")
    if got != want:
        return "digest %r" % got
    if s.recv(1) != b"":
        return "no EOF"
    return None


def spawn(*args):
    return subprocess.Popen([PY, ME] + list(args), stdout=subprocess.PIPE, text=True)


def case_accept_exec():
    p = spawn("acceptor", "exec")
    port = int(p.stdout.readline())
    with socket.create_connection(("127.0.0.1", port)) as s:
        if s.getsockopt(SOL_SMC, SMC_PROTO_MODE) != MODE_SMCD:
            return "not SMC-D"
        err = client_side(s)
    rc = p.wait(30)
    return err or (rc and "exec'd server exit %d" % rc)


def case_accept_other(kind):
    p = spawn("acceptor", kind)
    port = int(p.stdout.readline())
    with socket.create_connection(("127.0.0.1", port)) as s:
        err = client_side(s)
    rc = p.wait(30)
    return err or (rc and "%s: server exit %d" % (kind, rc))


def case_connect_exec():
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    p = spawn("connector", str(ls.getsockname()[1]))
    s, _ = ls.accept()
    ls.close()
    with s:
        err = client_side(s)
    rc = p.wait(30)
    return err or (rc and "exec'd client exit %d" % rc)


def case_simple(kind, expect):
    p = spawn("acceptor", kind)
    port = int(p.stdout.readline())
    err = None
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(PAYLOAD[:FIRST])
        if recv_all(s, FIRST) != PAYLOAD[:FIRST]:
            err = "first echo wrong"
        elif expect == "works":
            t = threading.Thread(target=lambda: (s.sendall(PAYLOAD[FIRST:]), s.shutdown(socket.SHUT_WR)))
            t.start()
            back = recv_all(s, SIZE - FIRST)
            t.join()
            want = "%d %s\n" % (SIZE, hashlib.sha256(PAYLOAD).hexdigest())
            if back != PAYLOAD[FIRST:] or recv_line(s).decode() != want:
                err = "data after the failed exec differ"
        else:
            s.settimeout(20)
            try:
                b = s.recv(1)
            except ConnectionResetError:
                b = b""
            except socket.timeout:
                b = b"(nothing in 20 s)"
            if b != b"":
                err = "read %r instead of EOF" % b
    rc = p.wait(30)
    return err or (rc and "child exit %d" % rc)


def main():
    if len(sys.argv) > 1:
        role = sys.argv[1]
        if role == "serve":
            return serve(int(sys.argv[2]))
        if role == "acceptor":
            return acceptor(sys.argv[2])
        if role == "connector":
            return connector(sys.argv[2])
        if role == "check-closed":
            return check_closed(int(sys.argv[2]))
        if role == "expect-reset":
            return expect_reset(int(sys.argv[2]))
        if role == "listen-exec":
            return listen_exec()
        if role == "listen-serve":
            return listen_serve(int(sys.argv[2]))
        if role == "check-env":
            return 13 if "SMCRUN_INHERIT" in os.environ else 0
        if role == "bogus":
            return bogus(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
        return 9
    results = []
    cases = [
        ("accept-side exec", case_accept_exec),
        ("connect-side exec", case_connect_exec),
        ("exec through /bin/sh", lambda: case_accept_other("shell")),
        ("posix_spawn", lambda: case_accept_other("spawn")),
        ("subprocess pass_fds", lambda: case_accept_other("popen")),
        ("dup2 then exec", lambda: case_accept_other("dup2")),
        ("listener exec", case_listener),
        ("cloexec", lambda: case_simple("cloexec", "eof")),
        ("failed exec", lambda: case_simple("enoent", "works")),
        ("no smcd after exec", lambda: case_simple("nosmcd", "eof")),
        ("no libsmcrun after exec", lambda: case_simple("nopreload", "eof")),
        ("liburing after exec", lambda: LIBURING and case_simple("iouring", "eof")),
        ("static binary after exec", lambda: BUSYBOX and case_simple("static", "eof")),
        ("bad entries", case_bogus),
        ("stale entries not passed on", lambda: subprocess.run(
            [PY, ME, "check-env"], env=dict(os.environ, SMCRUN_INHERIT="3:-1:1:2:65536:3:65536:0:0:0")).returncode
            and "SMCRUN_INHERIT reached the new program"),
    ]
    if os.environ.get("EXEC_VARIANTS"):
        # tests/exec-variants.c: each wrapper of the exec family
        for v in ("execl", "execlp", "execle", "execv", "execvp", "execvpe", "fexecve", "execveat",
                  "posix_spawnp", "system", "popen"):
            cases.append((v, lambda v=v: case_accept_other("variant:" + v)))
    only = os.environ.get("EXEC_CASE")  # debugging: run the cases whose name has this
    if only:
        cases = [c for c in cases if only in c[0]]
    ok = True
    for name, fn in cases:
        try:
            err = fn()
        except Exception as e:  # noqa: BLE001 - report, not crash
            err = "%s: %s" % (type(e).__name__, e)
        results.append("%s %s" % (name, "ok" if not err else "FAILED (%s)" % err))
        ok = ok and not err
    print("; ".join(results))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
