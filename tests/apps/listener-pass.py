#!/usr/bin/env python3
# A listening socket handed to other processes, as Python's multiprocessing (spawn),
# uvicorn --workers and similar pre-forked servers do, under smcrun as over TCP: every
# holder shares ONE accept queue; a connection queued before the hand-over is accepted
# by whoever accepts first; the listener outlives the parent's copy in the workers; it
# is gone (connect refused) once the last copy is closed. Under smcrun every connection
# the workers accept is SMC-D.
#  1. multiprocessing, spawn: the parent listens and one client connects and sends
#     before any worker exists (queued, not accepted); 3 workers get the listener as a
#     Process argument and accept; the parent never accepts. (spawn pickles the socket
#     while it starts the worker: the descriptor is kept across the worker's exec by
#     _posixsubprocess's fds_to_keep, every other one closed.) The early client gets
#     its echo; 60 clients, 10 at a time, each get their exact echo, served by at
#     least 2 workers. Under smcrun the worker got a descriptor that was no socket
#     (socket() on it in multiprocessing's _rebuild_socket: ENOTSOCK): the workers
#     died, and every client timed out.
#  2. The parent closes its copy: 10 more clients get their echoes from the workers.
#  3. Each worker takes one "stop" and exits; once all are gone, connect is refused
#     within 2 s (the listener vanishes with its last copy).
#  4. socket.send_fds to a subprocess (SCM_RIGHTS over an AF_UNIX socketpair): a
#     client is queued before the pass, the parent closes its copy right after sending
#     and connects again at once; the child accepts both and echoes each; the second
#     has the option set on the listener before the pass (TCP_KEEPIDLE).
#  5. Cases 1-3 with the listener sent to 3 running spawn workers through a
#     multiprocessing Pipe (multiprocessing.reduction's resource_sharer: SCM_RIGHTS,
#     as when a socket is put on a Pipe or Queue): the queued client, 30 clients over
#     at least 2 workers, 10 after the parent's close, refused at the end.
#  6. The received listener has the sender's O_NONBLOCK, set and clear, and accepts
#     by it (it arrived blocking: libuv, which never sets the flag on a handle it
#     receives, blocked in accept with connections waiting).
#  7. A blocking listener handed to several processes at once is blocking in each:
#     2 children by pass_fds that accept in a loop both live and serve; 3 receivers
#     by send_fds, 10 rounds, none sees O_NONBLOCK (each receiver's library set the
#     shared file's flag, and the next read it as the program's: 31 of 60 saw it,
#     and blocking accepts failed with EAGAIN).
#  8. A send_fds of the listener that fails (the peer is gone: EPIPE; the socket is
#     full: EAGAIN) hands nothing on: once the parent closes its copy, connect is
#     refused at once (the library's deposit with smcd, made before the sendmsg,
#     kept the listener for 3 s, and SMC clients connected meanwhile into a queue
#     nobody read, reset when the deposit expired).
#  9. One listener of 70 given to a subprocess by pass_fds: the child accepts from it
#     (over SMC-D under smcrun). CPython's close_range() between vfork and exec kept
#     only up to 128 listener descriptors open (64 listeners), and with more closed
#     them all: the child got the epoll descriptor (ENOTSOCK).
# 10. Case 4's pass by sendmmsg(2) (through libc, as a C program calls it: ctypes),
#     and by a sendmsg(2) whose control data is over 4 KiB (the listener's SCM_RIGHTS
#     after 130 SCM_CREDENTIALS): the listener went as its epoll descriptor
#     (ENOTSOCK in the receiver).
# In 4 and 5 the receiving process registered the listener with smcd again, and the
# newest registration took every SMC connection (library before protocol version 5):
# the client queued before the pass was reset when the parent closed its copy (4) or
# waited in the parent's queue, which nobody accepts from (5), and one worker, the
# last to receive the socket, served all 30 clients.
# Prints one line; exit status 0 only if every case held (the whole within 50 s).
import ctypes
import fcntl
import multiprocessing
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

SOL_SMC, SMC_PROTO_MODE, MODE_SMCD = 286, 0x5301, 1
ME = os.path.abspath(__file__)
UNDER_SMCRUN = "libsmcrun" in os.environ.get("LD_PRELOAD", "")
NWORKERS = 3


def mode(s):
    """SMC_PROTO_MODE (smcrun's option), -1 where it is unknown (plain TCP)"""
    try:
        return s.getsockopt(SOL_SMC, SMC_PROTO_MODE)
    except OSError:
        return -1


def read_line(s):
    """bytes up to and including the first newline (or to EOF)"""
    buf = b""
    while not buf.endswith(b"\n"):
        b = s.recv(256)
        if not b:
            break
        buf += b
    return buf


def read_to_eof(s):
    """everything to EOF, or what went wrong"""
    buf = b""
    try:
        while True:
            b = s.recv(256)
            if not b:
                return buf
            buf += b
    except OSError as e:
        return buf + repr(e).encode()


def worker(idx, ls, chan, results):
    """accept, read a line, wait 30 ms, answer b"w<idx>:" + the line, close; until a
    line b"stop" or 15 s without a connection. Reports (idx, count, [(tag, mode)], why)
    on results. With ls None the listener comes through chan (a multiprocessing Pipe)."""
    seen = []
    why = "stop"
    try:
        if ls is None:
            if not chan.poll(10):
                results.put((idx, 0, seen, "no listener through the pipe within 10 s"))
                return
            ls = chan.recv()  # resource_sharer: the descriptor by SCM_RIGHTS
            chan.send(b"got")
        ls.settimeout(15)
        while True:
            try:
                s, _ = ls.accept()
            except socket.timeout:
                why = "no connection for 15 s"
                break
            s.settimeout(5)
            line = read_line(s)
            m = mode(s)
            time.sleep(0.03)  # so that concurrent clients go to the other workers too
            s.sendall(b"w%d:" % idx + line)
            s.close()
            seen.append((line.split(b"-")[0].strip().decode(errors="replace"), m))
            if line == b"stop\n":
                break
        ls.close()
    except Exception as e:  # reported, not a traceback on stderr
        why = "error %r" % e
    results.put((idx, len(seen), seen, why))


def client(port, msg, timeout=5.0):
    """connect, send msg and a newline, read the answer to EOF: the answer, or an error"""
    try:
        c = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    except OSError as e:
        return repr(e).encode()
    try:
        c.sendall(msg + b"\n")
        return read_to_eof(c)
    except OSError as e:
        return repr(e).encode()
    finally:
        c.close()


def served_by(answer, msg):
    """the worker index in answer b"w<i>:msg\n", None if answer is not that"""
    head, sep, rest = answer.partition(b":")
    if sep and rest == msg + b"\n" and head[:1] == b"w" and head[1:].isdigit():
        return int(head[1:])
    return None


def clients(fails, port, what, tags, batch=10):
    """a client per tag, batch at a time in threads, each wanting its exact echo: the
    workers that answered. Stops after a batch with a failure. False if one failed."""
    who = set()
    for i in range(0, len(tags), batch):
        answers = {}

        def one(tag):
            answers[tag] = client(port, tag)
        ts = [threading.Thread(target=one, args=(t,)) for t in tags[i:i + batch]]
        for t in ts:
            t.start()
        for t in ts:
            t.join(15)
        bad = [(t, answers.get(t, b"(no answer)")) for t in tags[i:i + batch]
               if served_by(answers.get(t, b""), t) is None]
        who |= {served_by(a, t) for t, a in answers.items()} - {None}
        if bad:
            rest = len(tags) - i - batch
            fails.append("%s: %d of %d clients without their echo (%r read %r)%s" %
                         (what, len(bad), len(tags[i:i + batch]), bad[0][0], bad[0][1],
                          "; the other %d not tried" % rest if rest > 0 else ""))
            return who, False
    return who, True


def refused_within(port, secs=2.0):
    """True once a connect to port is refused (retried for secs); else what happened"""
    end = time.monotonic() + secs
    while True:
        try:
            c = socket.create_connection(("127.0.0.1", port), timeout=1)
        except ConnectionRefusedError:
            return True
        except OSError as e:
            last = repr(e)
        else:
            last = "connected" if c.getsockname() != c.getpeername() else "self-connected"
            c.close()
        if time.monotonic() > end:
            return last
        time.sleep(0.05)


def listener_with_queued(backlog, msg):
    """a listener on 127.0.0.1, its port, and a client that connected and sent @msg:
    queued on the parent's listener, nobody accepts yet"""
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(backlog)
    port = ls.getsockname()[1]
    c = socket.create_connection(("127.0.0.1", port), timeout=10)
    c.sendall(msg)
    time.sleep(0.1)
    return ls, port, c


def case_pool(fails, how, nclients):
    """cases 1-3 (how "args") and 5 (how "pipe")"""
    what = "spawn workers (%s)" % ("listener as a Process argument" if how == "args" else
                                    "listener through a multiprocessing Pipe")
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    ls, port, early = listener_with_queued(128, b"early\n")
    procs, pipes = [], []
    try:
        for i in range(NWORKERS):
            if how == "args":
                p = ctx.Process(target=worker, args=(i, ls, None, results), daemon=True)
            else:
                mine, theirs = ctx.Pipe()
                pipes.append(mine)
                p = ctx.Process(target=worker, args=(i, None, theirs, results), daemon=True)
            p.start()
            procs.append(p)
        end = time.monotonic() + 10
        for i, mine in enumerate(pipes):
            mine.send(ls)
            if not (mine.poll(max(0.1, end - time.monotonic())) and mine.recv() == b"got"):
                fails.append("%s: worker %d did not take the listener from the pipe" % (what, i))
        # 1. the connection queued before the workers existed; 60 (30) more
        got = read_to_eof(early)
        early.close()
        if served_by(got, b"early") is None:
            fails.append("%s: the client queued before the hand-over read %r, not w<i>:early" % (what, got))
        who, ok = clients(fails, port, what, [b"c%02d-%s" % (i, os.urandom(4).hex().encode())
                                              for i in range(nclients)])
        if ok and len(who) < 2:
            fails.append("%s: %d concurrent clients all served by worker %s, want at least 2 workers" %
                         (what, nclients, sorted(who)))
        # 2. the workers hold the only copies
        ls.close()
        clients(fails, port, what + " after the parent's close", [b"after-%d" % i for i in range(10)])
        # 3. a stop for each worker; when they are gone the port is closed
        stopped = []
        for i in range(NWORKERS):
            a = client(port, b"stop", 3)
            if served_by(a, b"stop") is None:
                fails.append("%s: stop %d read %r (stopped so far: %s)" % (what, i, a, stopped))
                break
            stopped.append(served_by(a, b"stop"))
        reports = {}
        end = time.monotonic() + 5
        while len(reports) < NWORKERS and time.monotonic() < end:
            try:
                r = results.get(timeout=max(0.1, end - time.monotonic()))
            except Exception:  # queue.Empty
                break
            reports[r[0]] = r
        for p in procs:
            p.join(max(0.1, end - time.monotonic()))
        alive = [i for i, p in enumerate(procs) if p.is_alive()]
        if alive:
            fails.append("%s: workers %s still running after the stops, killed" % (what, alive))
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(2)
        missing = [i for i in range(NWORKERS) if i not in reports]
        if missing:
            fails.append("%s: no report from workers %s (exit status %s)" %
                         (what, missing, ", ".join(str(procs[i].exitcode) for i in missing)))
        for i in sorted(reports):
            if reports[i][3] != "stop":
                fails.append("%s: worker %d ended: %s" % (what, i, reports[i][3]))
        if UNDER_SMCRUN:
            tally = {}  # kind of connection: [not SMC-D, SMC-D]
            for _, _, seen, _ in reports.values():
                for tag, m in seen:
                    kind = "clients" if tag.startswith("c") else tag
                    tally.setdefault(kind, [0, 0])[m == MODE_SMCD] += 1
            notsmc = ["%s %d of %d" % (k, v[0], sum(v)) for k, v in sorted(tally.items()) if v[0]]
            if notsmc:
                fails.append("%s: accepted connections not SMC-D: %s" % (what, ", ".join(notsmc)))
        r = refused_within(port)
        if r is not True:
            fails.append("%s: with every copy closed a connect to the port was not refused within 2 s (%s)" %
                         (what, r))
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(2)
        ls.close()
        early.close()


def child(fd):
    """case 4, the subprocess: the listener by recv_fds, two accepts, each echoed with
    b"child:" in front; b"modes A B" (or b"error ...") back over the socketpair"""
    chan = socket.socket(fileno=fd)
    try:
        chan.settimeout(10)
        # (a stream socket: sendmmsg's first message, which carries no descriptor,
        # may be read alone, before the second one is sent, with the kernel's
        # sendmmsg as with smcrun's)
        fds = []
        while not fds:
            data, fds, _, _ = socket.recv_fds(chan, 16, 1)
            if not data:
                raise EOFError("the channel ended before the listener came")
        ls = socket.socket(fileno=fds[0])
        ls.settimeout(8)
        modes = []
        for _ in range(2):
            s, _ = ls.accept()
            s.settimeout(5)
            line = read_line(s)
            modes.append(mode(s))
            idle = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE)
            s.sendall(b"child:" + line)
            s.close()
        ls.close()
        chan.sendall(b"modes %d %d idle %d" % (modes[0], modes[1], idle))
    except Exception as e:
        chan.sendall(b"error %r" % e)
    chan.close()
    return 0


def case_send_fds(fails, how="send_fds"):
    what = how + " to a subprocess"
    ls, port, c1 = listener_with_queued(8, b"queued\n")
    # (for the connections queued from now on, as TCP's, which takes the listener's
    # options when the handshake completes)
    ls.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 77)
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    p = subprocess.Popen([sys.executable, ME, "--child", str(b.fileno())], pass_fds=[b.fileno()])
    b.close()
    c2 = None
    try:
        if how == "send_fds":
            socket.send_fds(a, [b"L"], [ls.fileno()])
        else:
            send_listener_odd(a, ls.fileno(), how)
        ls.close()
        c2 = socket.create_connection(("127.0.0.1", port), timeout=5)
        c2.sendall(b"after-pass\n")
        for c, msg, when in ((c1, b"queued", "before"), (c2, b"after-pass", "after")):
            got = read_to_eof(c)
            if got != b"child:" + msg + b"\n":
                fails.append("%s: the client made %s the pass read %r" % (what, when, got))
        a.settimeout(5)
        rep = read_to_eof(a)
        if not rep.startswith(b"modes "):
            fails.append("%s: the child reported %r" % (what, rep))
        elif UNDER_SMCRUN and not rep.startswith(b"modes %d %d " % (MODE_SMCD, MODE_SMCD)):
            fails.append("%s: the child's accepted connections' modes %s, not SMC-D (1)" % (what, rep[6:].decode()))
        elif not rep.endswith(b" idle 77"):
            fails.append("%s: the connection made after the pass has not the listener's TCP_KEEPIDLE 77: %s" %
                         (what, rep.decode()))
        try:
            rc = p.wait(5)
            if rc != 0:
                fails.append("%s: the child exited %d" % (what, rc))
        except subprocess.TimeoutExpired:
            fails.append("%s: the child still running after its report, killed" % what)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        for s in (a, ls, c1, c2):
            if s is not None:
                s.close()


class IOVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class MsgHdr(ctypes.Structure):
    _fields_ = [("name", ctypes.c_void_p), ("namelen", ctypes.c_uint32), ("iov", ctypes.POINTER(IOVec)),
                ("iovlen", ctypes.c_size_t), ("control", ctypes.c_void_p), ("controllen", ctypes.c_size_t),
                ("flags", ctypes.c_int)]


class MMsgHdr(ctypes.Structure):
    _fields_ = [("hdr", MsgHdr), ("len", ctypes.c_uint)]


def cmsg(level, typ, data):
    """one control message, padded to CMSG_SPACE"""
    n = 16 + len(data)
    return struct.pack("=Qii", n, level, typ) + data + b"\0" * (-n % 8)


def send_listener_odd(sock, fd, how):
    """the listener @fd over @sock by sendmmsg (2 messages, it in the second), or by a
    sendmsg with > 4 KiB of control data; raises OSError"""
    if how == "sendmsg":
        creds = (socket.SOL_SOCKET, socket.SCM_CREDENTIALS, struct.pack("iII", os.getpid(), os.getuid(), os.getgid()))
        sock.sendmsg([b"L"], [creds] * 130 + [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", fd))])
        return
    libc = ctypes.CDLL(None, use_errno=True)
    ctl = cmsg(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", fd))
    bufs = [ctypes.create_string_buffer(b"L", 1), ctypes.create_string_buffer(b"M", 1)]
    iovs = [IOVec(ctypes.cast(b, ctypes.c_void_p), 1) for b in bufs]
    cbuf = ctypes.create_string_buffer(ctl, len(ctl))
    vec = (MMsgHdr * 2)()
    vec[0].hdr = MsgHdr(None, 0, ctypes.pointer(iovs[1]), 1, None, 0, 0)
    vec[1].hdr = MsgHdr(None, 0, ctypes.pointer(iovs[0]), 1, ctypes.cast(cbuf, ctypes.c_void_p), len(ctl), 0)
    r = libc.sendmmsg(sock.fileno(), vec, 2, 0)
    if r != 2:
        raise OSError(ctypes.get_errno(), "sendmmsg returned %d" % r)


def case_flag(fails):
    """case 6: the received listener has the sender's O_NONBLOCK, both ways, and
    accepts accordingly"""
    for nonblock in (True, False):
        ls = socket.socket()
        ls.bind(("127.0.0.1", 0))
        ls.listen(8)
        ls.setblocking(not nonblock)
        a, b = socket.socketpair()
        socket.send_fds(a, [b"L"], [ls.fileno()])
        _, fds, _, _ = socket.recv_fds(b, 1, 1)
        got = bool(fcntl.fcntl(fds[0], fcntl.F_GETFL) & os.O_NONBLOCK)
        r = socket.socket(fileno=fds[0])
        if got != nonblock:
            fails.append("a listener sent with O_NONBLOCK %s arrived with %s" % (nonblock, got))
        elif nonblock:
            try:
                r.accept()
                fails.append("accept on the received nonblocking listener with nothing queued returned")
            except BlockingIOError:
                pass
        c = socket.create_connection(ls.getsockname(), timeout=5)
        if nonblock:
            select_ok = select.select([r], [], [], 5)[0]
            if not select_ok:
                fails.append("the received nonblocking listener never became readable")
        try:
            s2, _ = r.accept()
            if UNDER_SMCRUN and mode(s2) != MODE_SMCD:
                fails.append("received listener (O_NONBLOCK %s): accepted mode %d" % (nonblock, mode(s2)))
            s2.close()
        except OSError as e:
            fails.append("received listener (O_NONBLOCK %s): accept: %r" % (nonblock, e))
        for x in (c, r, ls, a, b):
            x.close()


SIBLING = """
import fcntl, os, socket, sys
fd = int(sys.argv[1])
ls = socket.socket(fileno=fd)
print(int(bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_NONBLOCK)), flush=True)
try:
    while True:
        c, _ = ls.accept()
        c.sendall(b"%d" % os.getpid())
        c.close()
except OSError as e:
    print("accept: %r" % e, flush=True)
"""


def case_siblings(fails):
    """case 7: a blocking listener handed to several processes at once is blocking
    in each (pass_fds to 2 children that accept in a loop; send_fds to 3 forked
    children, 10 rounds)"""
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(64)
    kids = [subprocess.Popen([sys.executable, "-c", SIBLING, str(ls.fileno())], pass_fds=[ls.fileno()],
                             stdout=subprocess.PIPE) for _ in range(2)]
    flags = [k.stdout.readline().strip() for k in kids]
    pids = set()
    for _ in range(8):
        try:
            c = socket.create_connection(ls.getsockname(), timeout=5)
            pids.add(c.recv(16))
            c.close()
        except OSError as e:
            fails.append("pass_fds siblings: a client got %r" % e)
            break
    alive = sum(k.poll() is None for k in kids)
    for k in kids:
        k.kill()
        k.wait()
        k.stdout.close()
    ls.close()
    if flags != [b"0", b"0"] or alive != 2:
        fails.append("a blocking listener given to 2 children with pass_fds: O_NONBLOCK %s in them, %d of 2 alive "
                     "(a blocking accept failed with EAGAIN)" % (flags, alive))
    bad = 0
    for _ in range(10):
        ls = socket.socket()
        ls.bind(("127.0.0.1", 0))
        ls.listen(16)
        kids = []
        for _ in range(3):
            a, b = socket.socketpair()
            pid = os.fork()
            if pid == 0:
                a.close()
                ls.close()
                _, fds, _, _ = socket.recv_fds(b, 10, 1)
                b.send(b"1" if fcntl.fcntl(fds[0], fcntl.F_GETFL) & os.O_NONBLOCK else b"0")
                os._exit(0)
            b.close()
            kids.append((pid, a))
        for _, a in kids:
            socket.send_fds(a, [b"x"], [ls.fileno()])
        bad += [a.recv(1) for _, a in kids].count(b"1")
        for pid, a in kids:
            os.waitpid(pid, 0)
            a.close()
        ls.close()
    if bad:
        fails.append("a blocking listener sent to 3 processes at once: %d of 30 receivers saw O_NONBLOCK" % bad)


def case_send_fails(fails):
    """case 8: a failed send_fds keeps no copy of the listener anywhere"""
    for why in ("EPIPE", "EAGAIN"):
        what = "send_fds that failed with " + why
        ls = socket.socket()
        ls.bind(("127.0.0.1", 0))
        ls.listen(8)
        port = ls.getsockname()[1]
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            if why == "EPIPE":
                b.close()
            else:
                a.setblocking(False)
                try:
                    while True:
                        a.send(b"x" * 65536)
                except BlockingIOError:
                    pass
            try:
                socket.send_fds(a, [b"L"], [ls.fileno()], socket.MSG_NOSIGNAL)
                fails.append("%s: it did not fail" % what)
                continue
            except (BrokenPipeError, BlockingIOError):
                pass
            ls.close()
            got = refused_within(port, 0)
            if got is not True:
                fails.append("%s: the first connect after the close was not refused: %s" % (what, got))
        finally:
            for s in (a, b, ls):
                s.close()


MANY_CHILD = r'''
import socket, sys
ls = socket.socket(fileno=int(sys.argv[1]))
ls.settimeout(8)
s, _ = ls.accept()
s.settimeout(5)
line = s.recv(100)
try:
    m = s.getsockopt(286, 0x5301)  # SMC-D: 1 (smcrun)
except OSError:
    m = 0  # (a TCP socket without smcrun)
s.sendall(b"child %d " % m + line)
s.close()
'''


def case_many(fails):
    """case 9: one of 70 listeners to a subprocess by pass_fds"""
    what = "one of 70 listeners by pass_fds"
    lss = []
    p = None
    try:
        for _ in range(70):
            ls = socket.socket()
            ls.bind(("127.0.0.1", 0))
            ls.listen(4)
            lss.append(ls)
        ls = lss[35]
        port = ls.getsockname()[1]
        p = subprocess.Popen([sys.executable, "-c", MANY_CHILD, str(ls.fileno())], pass_fds=[ls.fileno()])
        for x in lss:
            x.close()
        c = socket.create_connection(("127.0.0.1", port), timeout=5)
        c.sendall(b"hello")
        got = read_to_eof(c)
        c.close()
        want = b"child %d hello" % (MODE_SMCD if UNDER_SMCRUN else 0)
        if got != want:
            fails.append("%s: the client read %r, not %r" % (what, got, want))
        if p.wait(5) != 0:
            fails.append("%s: the child exited %d" % (what, p.returncode))
    except Exception as e:
        fails.append("%s: %r" % (what, e))
    finally:
        if p and p.poll() is None:
            p.kill()
            p.wait()
        for x in lss:
            x.close()


class Overtime(BaseException):
    pass


def overtime(*_):
    raise Overtime()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        sys.exit(child(int(sys.argv[2])))
    t0 = time.monotonic()
    fails = []
    signal.signal(signal.SIGALRM, overtime)
    signal.alarm(50)  # (the cases' own timeouts add up to more than that)
    try:
        case_pool(fails, "args", 60)
        case_send_fds(fails)
        case_pool(fails, "pipe", 30)
        case_flag(fails)
        case_siblings(fails)
        case_send_fails(fails)
        case_many(fails)
        case_send_fds(fails, "sendmmsg")
        case_send_fds(fails, "sendmsg")
    except Overtime:
        fails.append("stopped after 50 s")
    signal.alarm(0)
    took = time.monotonic() - t0
    if fails:
        print("listener-pass: " + "; ".join(fails))
        sys.exit(1)
    print("listener-pass: a listener passed to 3 spawn workers (as a Process argument and through a "
          "multiprocessing Pipe) and by send_fds: the connection queued before the pass is served, "
          "clients spread over the workers and are served after the parent's close, connect refused "
          "after the last close and after a failed pass; one of 70 listeners by pass_fds; by sendmmsg and with 4 KiB of control data; it arrives with the sender's O_NONBLOCK, also in siblings%s (%.1f s)" % (", all over SMC-D" if UNDER_SMCRUN else "", took))
