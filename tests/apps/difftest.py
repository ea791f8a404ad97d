#!/usr/bin/env python3
# A random differential tester: `difftest.py --seed N --steps K` builds a connected
# loopback pair (and, chosen by the seed, keeps its listener, dup's descriptors, forks
# children that act on the connection, makes epoll sets) and performs a deterministic
# random sequence of calls on it, printing one normalised line per step: the call,
# its result or errno name, and whether the bytes were the peer's. Run once over plain
# TCP and once under smcrun, the two transcripts must be identical
# (tests/test-difftest.sh, which runs a fixed list of seeds).
#
# Every byte a side sends is recorded (a per-direction model of the stream), and every
# byte received is checked against it: "ok" or "BAD" in the line, never the bytes.
# What legitimately differs is normalised away:
#  - descriptor numbers and ports are never printed (names: A0, A1 for the client's
#    copies, B0, B1 for the server's; getsockname/getpeername only as "the listener's
#    port" L or another p);
#  - buffer sizes (libsmcproto(3) BUFFER SIZES, smcrun(1) LIMITATIONS: 128 KiB rings,
#    TCP's buffers on lo grow to megabytes): a "fill" sends until EAGAIN; until the
#    reader has drained that direction ("big"), counts print as "+", the writer's
#    sends as "sent?", FIONREAD as ">0", the writer's POLLOUT/EPOLLOUT is masked, edge-
#    triggered registrations of either end are not printed, other receives take at
#    most 32 KiB in all, and a shutdown or last close by the writer, a shutdown for
#    reading by the reader and a fill towards a reader that shut down for reading are
#    skipped (TCP's FIN waits behind the data in its writer's buffers); a drain that
#    ends the state takes the edges it made. Outside it at most 60000 bytes are
#    unread at a time: a ring is writable (POLLOUT) with half of it free (ring.c
#    WRITABLE_MIN), TCP's buffers never fill;
#  - SO_SNDBUF/SO_RCVBUF: twice the rings' sizes, not resized on a connected socket
#    (libsmcproto(3), smc_getsockopt() and DIFFERENCES FROM TCP): only "ok";
#  - SIOCOUTQ: TCP's counts what the peer's kernel has not acknowledged, SMC's what
#    the peer has not read (libsmcproto(3), smc_ioctl()): printed only when the peer
#    has read everything;
#  - SO_RCVLOWAT: poll/select/epoll report an SMC connection readable with any byte,
#    TCP waits for the mark (libsmcproto(3), smc_setsockopt()): POLLIN masked below it;
#  - epoll_wait with maxevents smaller than the ready count reports them in another
#    order (smcrun(1), READINESS): always maxevents 8, printed sorted;
#  - TCP_CORK/MSG_MORE: data held back goes out within 200 ms on both (tcp(7),
#    libsmcproto(3) ENVIRONMENT), and with copies an SMC connection does not hold it
#    (smcrun(1), "only batching differs"): after a send on a corked end the tester
#    settles 250 ms;
#  - TCP_INFO: only its state field;
#  - options set in a forked child are per-process (libsmcproto(3)): children only
#    send, receive, shut down for writing, close or exit.
# Divergences: KNOWN below (found by this tester, fixed since); --avoid NAME,... keeps
# the tester from provoking one while it is open (for runs over many seeds).
# Timing: after every step the tester settles (30 ms; loopback delivery and smcd's
# doorbells are far faster), blocking calls run under SO_RCVTIMEO/SO_SNDTIMEO of
# 100 ms, and a SIGALRM guard (5 s) ends a step that hangs ("TIMEOUT", exit 2).
# SMC_EXPECT=1: every pair must be SMC-D (exit 3 otherwise).
import argparse
import errno
import fcntl
import os
import random
import select
import signal
import socket
import struct
import sys
import tempfile
import time

import smcapp

SIOCINQ = 0x541B      # = FIONREAD
SIOCOUTQ = 0x5411     # = TIOCOUTQ
TCP_STATES = {1: "ESTABLISHED", 2: "SYN_SENT", 3: "SYN_RECV", 4: "FIN_WAIT1", 5: "FIN_WAIT2",
              6: "TIME_WAIT", 7: "CLOSE", 8: "CLOSE_WAIT", 9: "LAST_ACK", 10: "LISTEN", 11: "CLOSING"}
POLLBITS = [(select.POLLIN, "IN"), (select.POLLPRI, "PRI"), (select.POLLOUT, "OUT"),
            (select.POLLERR, "ERR"), (select.POLLHUP, "HUP"), (0x2000, "RDHUP"),
            (select.POLLNVAL, "NVAL")]
EPBITS = [(select.EPOLLIN, "IN"), (select.EPOLLPRI, "PRI"), (select.EPOLLOUT, "OUT"),
          (select.EPOLLERR, "ERR"), (select.EPOLLHUP, "HUP"), (select.EPOLLRDHUP, "RDHUP")]
SIZES = [0, 1, 2, 7, 100, 1000, 4095, 4096, 4097, 8192, 16384, 65535, 65536, 65537]
MAX_UNREAD = 60000
BIG_BUDGET = 32768  # what receives other than a drain may take after a fill
SETTLE = 0.03
TIMEO = struct.pack("ll", 0, 100000)


def ename(e):
    return errno.errorcode.get(e, str(e))


def bits(mask, table):
    s = [n for b, n in table if mask & b]
    rest = mask & ~sum(b for b, _ in table)
    if rest:
        s.append("0x%x" % rest)
    return "|".join(s) or "0"


# Divergences this tester found (helper 132, 2026-12-07; all fixed the same night, the
# tests named in README.md): --avoid NAME keeps it from provoking one, so that a run
# over many seeds can look past a divergence while it is open. The seeds in
# tests/test-difftest.sh run without it.
KNOWN = {
    "outq-dup": "SIOCOUTQ through one copy of a dup'd connection after another copy sent",
    "epoll-closed-err": "EPOLLERR after a reset for an epoll registration whose descriptor was closed "
                        "while a dup keeps the connection",
    "shutdown-edge": "a shutdown that changes nothing (repeated, or ENOTCONN after a reset): "
                     "TCP's wakes its waiters, a new edge for edge-triggered epoll",
    "sendfile-eof": "sendfile at or past the end of the file on a connection shut for writing or broken: "
                    "EPIPE where TCP returns 0",
}


class Timeout(Exception):
    pass


def on_alarm(sig, frame):
    raise Timeout()


class Dir:
    """One direction of the stream: every byte sent, how far the reader got, and
    whether a fill made the counts depend on buffer sizes."""

    def __init__(self, seed):
        self.sent = bytearray()
        self.rpos = 0
        self.big = False
        self.lossy = False  # its writer went away while big: the rest may be lost
        self.bigread = 0    # taken since the fill (receives other than a drain)
        self.rng = random.Random(seed)

    def unread(self):
        return len(self.sent) - self.rpos

    def payload(self, n):
        return self.rng.randbytes(n)

    def check(self, data, peek=False):
        ok = bytes(self.sent[self.rpos:self.rpos + len(data)]) == data
        if not peek:
            self.skip(len(data))
        return "ok" if ok else "BAD"

    def skip(self, n):
        self.rpos += n
        self.bigread += n

    def cap(self, n):
        """@n, or after a fill no more than a ring surely holds: the rest of a fill
        (megabytes over TCP, 128 KiB in a ring) only a drain takes"""
        return min(n, max(0, BIG_BUDGET - self.bigread)) if self.big else n

    def drained(self):
        if self.unread() == 0:
            self.big = False


class End:
    def __init__(self, name, sock):
        self.name = name
        self.socks = [sock]      # open copies (python socket objects)
        self.labels = [name + "0"]
        self.ndup = 1
        self.out = None          # Dir this end writes
        self.inp = None          # Dir this end reads
        self.peer = None
        self.shut_rd = False     # a SHUT_RD or SHUT_RDWR through one of its copies
        self.shut_any = False    # any shutdown through one of its copies
        self.cork = False        # TCP_CORK on (for every copy in the process)
        self.lowat = 1           # SO_RCVLOWAT

    def alive(self):
        return bool(self.socks)


class T:
    def __init__(self, seed, steps, avoid=()):
        self.avoid = set(avoid)
        self.seed = seed
        self.steps = steps
        self.r = random.Random(seed)
        self.step = 0
        self.gen = 0
        self.keep_listener = self.r.random() < 0.5
        self.use_epoll = self.r.random() < 0.7
        self.use_fork = self.r.random() < 0.4
        self.use_dup = self.r.random() < 0.6
        self.ls = None
        self.eps = []
        self.regev = {}   # (set, fd): the events registered
        tf = tempfile.TemporaryFile()
        self.filedata = random.Random(seed * 7 + 1).randbytes(10000)
        tf.write(self.filedata)
        tf.flush()
        self.file = tf
        self.corked = False

    # ---- output
    def line(self, s):
        print("%d %s" % (self.step, s), flush=True)

    # ---- setup
    def new_pair(self):
        self.gen += 1
        ls = socket.socket()
        ls.bind(("127.0.0.1", 0))
        ls.listen(4)
        c = socket.create_connection(ls.getsockname())
        s, _ = ls.accept()
        if smcapp.not_smcd(c, s):
            sys.stderr.write("seed %d: pair %d is not SMC-D\n" % (self.seed, self.gen))
            sys.exit(3)
        if self.ls:
            self.ls.close()
            self.ls = None
        if self.keep_listener:
            self.ls = ls
        else:
            ls.close()
        for x in (c, s):
            x.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, TIMEO)
            x.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, TIMEO)
        self.A = End("A", c)
        self.B = End("B", s)
        ab, ba = Dir(self.seed * 1000 + self.gen * 2), Dir(self.seed * 1000 + self.gen * 2 + 1)
        self.A.out, self.A.inp, self.B.out, self.B.inp = ab, ba, ba, ab
        self.A.peer, self.B.peer = self.B, self.A
        for ep in self.eps:
            ep[1].clear()
        self.regev.clear()
        self.corked = False
        self.line("pair %d listener=%s" % (self.gen, "kept" if self.ls else "closed"))

    def ends(self):
        return [e for e in (self.A, self.B) if e.alive()]

    def pick(self):
        e = self.r.choice(self.ends())
        i = self.r.randrange(len(e.socks))
        return e, e.socks[i], e.labels[i]

    # ---- helpers
    def settle(self, t=SETTLE):
        time.sleep(t)

    def sent_result(self, e, n):
        """the line's text for @n bytes sent by @e"""
        return "+" if e.out.big else str(n)

    def send_size(self, e):
        n = self.r.choice(SIZES)
        if not e.out.big:
            n = min(n, max(0, MAX_UNREAD - e.out.unread()))
        return n

    def do_send(self, e, fn, n, what):
        data = e.out.payload(n)
        try:
            r = fn(data)
        except OSError as x:
            if e.out.big and x.errno == errno.EAGAIN:
                return "%s: sent?" % what
            return "%s: %s" % (what, ename(x.errno))
        e.out.sent += data[:r]
        if e.out.big:
            return "%s: sent?" % what
        return "%s: %d" % (what, r)

    def recv_result(self, e, data, peek=False):
        big = e.inp.big
        st = e.inp.check(data, peek)
        if big:
            return "%s %s" % ("+" if data else "0", st)
        return "%d %s" % (len(data), st)

    # ---- operations: each returns the line's text
    def op_send(self):
        e, s, l = self.pick()
        n = self.send_size(e)
        fl = self.r.choice([0, socket.MSG_DONTWAIT, socket.MSG_NOSIGNAL, socket.MSG_MORE,
                            socket.MSG_DONTWAIT | socket.MSG_MORE])
        if fl & socket.MSG_MORE:
            self.corked = True
        return self.do_send(e, lambda d: s.send(d, fl), n, "send %s %d fl=0x%x" % (l, n, fl))

    def op_sendmsg(self):
        e, s, l = self.pick()
        k = self.r.randint(1, 3)
        n = self.send_size(e)
        cuts = sorted(self.r.randint(0, n) for _ in range(k - 1))
        fl = self.r.choice([0, socket.MSG_DONTWAIT])

        def fn(d):
            parts, p = [], 0
            for c in cuts + [n]:
                parts.append(d[p:c])
                p = c
            return s.sendmsg(parts, [], fl)
        return self.do_send(e, fn, n, "sendmsg %s %d/%d fl=0x%x" % (l, n, k, fl))

    def op_writev(self):
        e, s, l = self.pick()
        n = self.send_size(e)
        h = n // 2
        return self.do_send(e, lambda d: os.writev(s.fileno(), [d[:h], b"", d[h:]]), n, "writev %s %d" % (l, n))

    def op_recv(self):
        e, s, l = self.pick()
        n = self.r.choice(SIZES[1:] + [200000])
        fl = self.r.choice([0, socket.MSG_DONTWAIT, socket.MSG_PEEK | socket.MSG_DONTWAIT,
                            socket.MSG_WAITALL, socket.MSG_TRUNC | socket.MSG_DONTWAIT,
                            socket.MSG_PEEK, socket.MSG_WAITALL | socket.MSG_PEEK])
        if e.inp.big and fl & socket.MSG_WAITALL:
            fl &= ~socket.MSG_WAITALL   # (a short count would depend on the sizes)
        n = e.inp.cap(n)
        what = "recv %s %d fl=0x%x" % (l, n, fl)
        if n == 0 and e.inp.big:
            return "%s: skipped (a fill's rest)" % what
        try:
            d = s.recv(n, fl)
        except OSError as x:
            return "%s: %s" % (what, ename(x.errno))
        if fl & socket.MSG_TRUNC:
            if not fl & socket.MSG_PEEK:
                e.inp.skip(len(d))
            return "%s: %s trunc" % (what, "+" if e.inp.big and d else len(d))
        return "%s: %s" % (what, self.recv_result(e, d, bool(fl & socket.MSG_PEEK)))

    def op_recvmsg(self):
        e, s, l = self.pick()
        sizes = [self.r.choice([0, 1, 10, 1000, 4096, 70000]) for _ in range(self.r.randint(1, 3))]
        fl = self.r.choice([0, socket.MSG_DONTWAIT, socket.MSG_PEEK | socket.MSG_DONTWAIT])
        sizes = self.capped(e, sizes)
        if sizes is None:
            return "recvmsg %s: skipped (a fill's rest)" % l
        what = "recvmsg %s %s fl=0x%x" % (l, "+".join(map(str, sizes)), fl)
        bufs = [bytearray(x) for x in sizes]
        try:
            r, anc, mfl, _ = s.recvmsg_into(bufs, 0, fl)
        except OSError as x:
            return "%s: %s" % (what, ename(x.errno))
        d = b"".join(bytes(b) for b in bufs)[:r]
        return "%s: %s mflags=0x%x" % (what, self.recv_result(e, d, bool(fl & socket.MSG_PEEK)), mfl)

    def capped(self, e, sizes):
        if not e.inp.big:
            return sizes
        left, out = e.inp.cap(1 << 30), []
        for x in sizes:
            out.append(min(x, left))
            left -= out[-1]
        return out if sum(out) else None

    def op_readv(self):
        e, s, l = self.pick()
        sizes = [self.r.choice([0, 1, 10, 1000, 4096, 70000]) for _ in range(self.r.randint(1, 3))]
        sizes = self.capped(e, sizes)
        if sizes is None:
            return "readv %s: skipped (a fill's rest)" % l
        bufs = [bytearray(x) for x in sizes]
        what = "readv %s %s" % (l, "+".join(map(str, sizes)))
        try:
            r = os.readv(s.fileno(), bufs)
        except OSError as x:
            return "%s: %s" % (what, ename(x.errno))
        d = b"".join(bytes(b) for b in bufs)[:r]
        return "%s: %s" % (what, self.recv_result(e, d))

    def op_sendfile(self):
        e, s, l = self.pick()
        off = self.r.choice([0, 1, 5000, 9999, 10000, 20000])
        cnt = self.r.choice([0, 1, 100, 4096, 8192, 20000])
        if not e.out.big:
            cnt = min(cnt, max(0, MAX_UNREAD - e.out.unread()))
        what = "sendfile %s off=%d cnt=%d" % (l, off, cnt)
        if "sendfile-eof" in self.avoid and off >= len(self.filedata) and cnt:
            return "%s: skipped (known: sendfile-eof)" % what
        try:
            r = os.sendfile(s.fileno(), self.file.fileno(), off, cnt)
        except OSError as x:
            if e.out.big and x.errno == errno.EAGAIN:
                return "%s: sent?" % what
            return "%s: %s" % (what, ename(x.errno))
        e.out.sent += self.filedata[off:off + r]
        return "%s: %s" % (what, "sent?" if e.out.big else r)

    def op_splice_out(self):
        """socket -> pipe, then the pipe read"""
        e, s, l = self.pick()
        n = self.r.choice([1, 100, 4096, 65536])
        fl = self.r.choice([0, 2])  # SPLICE_F_NONBLOCK
        n = e.inp.cap(n)
        if n == 0:
            return "splice %s->pipe: skipped (a fill's rest)" % l
        pr, pw = os.pipe()
        what = "splice %s->pipe %d fl=%d" % (l, n, fl)
        try:
            r = os.splice(s.fileno(), pw, n, flags=fl)
        except OSError as x:
            res = "%s: %s" % (what, ename(x.errno))
        else:
            d = os.read(pr, r) if r else b""
            while len(d) < r:
                d += os.read(pr, r - len(d))
            res = "%s: %s" % (what, self.recv_result(e, d))
        os.close(pr)
        os.close(pw)
        return res

    def op_splice_in(self):
        """pipe -> socket"""
        e, s, l = self.pick()
        n = self.r.choice([1, 100, 4096, 30000])
        if not e.out.big:
            n = min(n, max(1, MAX_UNREAD - e.out.unread()))
        pr, pw = os.pipe()
        data = e.out.payload(n)
        os.write(pw, data)
        what = "splice pipe->%s %d" % (l, n)
        try:
            r = os.splice(pr, s.fileno(), n)
        except OSError as x:
            res = "%s: %s" % (what, ename(x.errno))
            if e.out.big and x.errno == errno.EAGAIN:
                res = "%s: sent?" % what
        else:
            e.out.sent += data[:r]
            res = "%s: %s" % (what, "sent?" if e.out.big else r)
        os.close(pr)
        os.close(pw)
        return res

    def op_fill(self):
        e, s, l = self.pick()
        what = "fill %s" % l
        if e.peer.shut_rd:
            # TCP's reader after SHUT_RD: a receive returns 0 whenever its queue is
            # empty, with the rest of a fill still in the writer's buffers; how much
            # is where depends on the sizes
            return "%s: skipped (the reader shut down)" % what
        was = e.out.big
        total = 0
        chunk = e.out.payload(65536)
        for _ in range(2000):
            try:
                r = s.send(chunk, socket.MSG_DONTWAIT)
            except OSError as x:
                if x.errno == errno.EAGAIN:
                    break
                return "%s: %s after %s" % (what, ename(x.errno), "bytes" if total else "none")
            e.out.sent += chunk[:r]
            total += r
            chunk = chunk[r:] + chunk[:r]
        else:
            return "%s: never EAGAIN" % what
        if total:
            if not e.out.big:
                e.out.bigread = 0
            e.out.big = True
        # (a second fill: TCP's buffers may have grown, a ring has not)
        return "%s: EAGAIN reached%s" % (what, "" if total or was else " at once")

    def op_drain(self):
        e, s, l = self.pick()
        what = "drain %s" % l
        got = bytearray()
        quiet = 0
        err = None
        big = e.inp.big
        # after a fill: everything the model says was sent (TCP's writer may wait
        # for a window update), within 2.5 s; else until EAGAIN 3 times in 40 ms
        deadline = time.monotonic() + 2.5
        for _ in range(100000):
            if big and not e.inp.lossy and len(got) < e.inp.unread() and time.monotonic() < deadline:
                quiet = 0
            try:
                d = s.recv(1 << 20, socket.MSG_DONTWAIT)
            except OSError as x:
                if x.errno != errno.EAGAIN:
                    err = ename(x.errno)
                    break
                quiet += 1
                if quiet == 3:
                    break
                time.sleep(0.02)
                continue
            if not d:
                err = "EOF"
                break
            quiet = 0
            got += d
        st = e.inp.check(bytes(got))
        e.inp.drained()
        if big and not e.inp.big:
            # the edges of the drain (data that came meanwhile, room for the writer)
            # came at times that depend on the sizes: taken, not printed
            for ep, _ in self.eps:
                ep.poll(0, 64)
        n = "+" if big and got else str(len(got))
        if e.inp.lossy and err:
            # the writer closed with a fill in flight: TCP drops what its buffers
            # still held (a reset), a ring has it all; the rest is gone either way
            e.inp.skip(e.inp.unread())
            e.inp.drained()
            e.inp.lossy = False
            return "%s: %s %s, then %s (writer gone)" % (what, "+" if got else "0", st, err)
        return "%s: %s %s, then %s, unread %d" % (what, n, st, err or "EAGAIN", e.inp.unread())

    def op_shutdown(self):
        e, s, l = self.pick()
        how = self.r.choice([socket.SHUT_RD, socket.SHUT_WR, socket.SHUT_RDWR])
        what = "shutdown %s %s" % (l, ["RD", "WR", "RDWR"][how])
        if how != socket.SHUT_WR and e.inp.big:
            return "%s: skipped (a fill unread)" % what   # (as in op_fill)
        if how != socket.SHUT_RD and e.out.big:
            # TCP's FIN waits behind the fill in the writer's buffers, an SMC
            # peer learns of the shutdown at once: until the reader drained, its
            # state (and what a send of its own gets) depends on the sizes
            return "%s: skipped (a fill unread by the peer)" % what
        if "shutdown-edge" in self.avoid and (e.shut_any or e.peer.shut_rd or not e.peer.alive()):
            return "%s: skipped (known: shutdown-edge)" % what
        try:
            s.shutdown(how)
        except OSError as x:
            return "%s: %s" % (what, ename(x.errno))
        if how != socket.SHUT_WR:
            e.shut_rd = True
        e.shut_any = True
        return "%s: 0" % what

    def close_sock(self, e, i):
        s = e.socks.pop(i)
        e.labels.pop(i)
        for ep in self.eps:  # (the kernel drops it at the last close of the file)
            if s.fileno() in ep[1] and e.socks:
                ep[1][s.fileno()] = ep[1][s.fileno()][:2] + ("closed",)
        s.close()

    def op_close(self):
        e, s, l = self.pick()
        if len(e.socks) == 1 and e.out.big:
            return "close %s: skipped (a fill unread by the peer)" % l   # (as in op_shutdown)
        linger = self.r.random() < 0.3
        if linger:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_sock(e, e.socks.index(s))
        if not e.socks and e.out.big:
            e.out.lossy = True
        return "close %s%s: 0 (unread %d)" % (l, " linger{1,0}" if linger else "",
                                              e.inp.unread() if not e.inp.big else -1)

    def op_dup(self):
        e, s, l = self.pick()
        if len(e.socks) >= 3:
            return "dup %s: skipped" % l
        d = s.dup()
        e.socks.append(d)
        e.labels.append("%s%d" % (e.name, e.ndup))
        e.ndup += 1
        return "dup %s: %s" % (l, e.labels[-1])

    def op_nonblock(self):
        e, s, l = self.pick()
        on = self.r.random() < 0.5
        fd = s.fileno()
        fl = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, (fl | os.O_NONBLOCK) if on else (fl & ~os.O_NONBLOCK))
        others = ["%s:%d" % (lb, bool(fcntl.fcntl(x.fileno(), fcntl.F_GETFL) & os.O_NONBLOCK))
                  for x, lb in zip(e.socks, e.labels)]
        return "nonblock %s %d: was %d, now %s" % (l, on, bool(fl & os.O_NONBLOCK), " ".join(others))

    def op_sockopt(self):
        e, s, l = self.pick()
        k = self.r.choice(["nodelay", "cork", "rcvlowat", "rcvbuf", "sndbuf", "error", "info",
                           "timeo", "keepalive", "type"])
        what = "opt %s %s" % (l, k)
        try:
            if k == "nodelay":
                v = self.r.randint(0, 1)
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, v)
                return "%s=%d: %d" % (what, v, s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            if k == "cork":
                v = self.r.randint(0, 1)
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, v)
                e.cork = bool(v)
                return "%s=%d: %d" % (what, v, s.getsockopt(socket.IPPROTO_TCP, socket.TCP_CORK))
            if k == "rcvlowat":
                v = self.r.choice([1, 1, 10, 1000, 5000])
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, v)
                e.lowat = v
                return "%s=%d: %d" % (what, v, s.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT))
            if k in ("rcvbuf", "sndbuf"):
                o = socket.SO_RCVBUF if k == "rcvbuf" else socket.SO_SNDBUF
                v = self.r.choice([262144, 1 << 20])
                s.setsockopt(socket.SOL_SOCKET, o, v)
                # the value read back: twice the rings' sizes on an SMC connection,
                # which a connected socket's setting does not resize (libsmcproto(3),
                # BUFFER SIZES and DIFFERENCES FROM TCP): only that it is there
                return "%s=%d: %s" % (what, v, "ok" if s.getsockopt(socket.SOL_SOCKET, o) > 0 else "0")
            if k == "error":
                return "%s: %s" % (what, ename(s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)) or "0")
            if k == "info":
                st = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)[0]
                return "%s: %s" % (what, TCP_STATES.get(st, st))
            if k == "timeo":
                return "%s: %r" % (what, struct.unpack("ll", s.getsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, 16)))
            if k == "keepalive":
                s.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
                return "%s: %d" % (what, s.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE))
            if k == "type":
                return "%s: %d %d" % (what, s.getsockopt(socket.SOL_SOCKET, socket.SO_TYPE),
                                      s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN))
        except OSError as x:
            return "%s: %s" % (what, ename(x.errno))

    def op_ioctl(self):
        e, s, l = self.pick()
        k = self.r.choice([("FIONREAD", SIOCINQ), ("SIOCOUTQ", SIOCOUTQ)])
        what = "ioctl %s %s" % (l, k[0])
        if k[0] == "SIOCOUTQ" and "outq-dup" in self.avoid and e.ndup > 1:
            return "%s: skipped (known: outq-dup)" % what
        try:
            v = struct.unpack("i", fcntl.ioctl(s.fileno(), k[1], b"\0\0\0\0"))[0]
        except OSError as x:
            return "%s: %s" % (what, ename(x.errno))
        big = e.inp.big if k[0] == "FIONREAD" else e.out.big
        if k[0] == "SIOCOUTQ" and (big or e.out.unread()):
            # TCP: bytes its peer's kernel has not acknowledged (0 on lo once they
            # arrived); SMC: bytes the peer has not read (libsmcproto(3), smc_ioctl()):
            # the same only when the peer has read everything
            return "%s: ok" % what
        if big:
            return "%s: %s" % (what, ">0" if v > 0 else v)
        return "%s: %d" % (what, v)

    def mask_out(self, e, m, outbit, inbit=0):
        """@m less what depends on the sizes: the writer's room after a fill, and
        readability below SO_RCVLOWAT: TCP waits for the mark, an SMC connection is
        readable with any byte (libsmcproto(3), smc_setsockopt(), SO_RCVLOWAT)"""
        if e.lowat > 1 and e.inp.unread() < e.lowat and not e.inp.big:
            m &= ~inbit
        return m & ~outbit if e.out.big else m

    def op_poll(self):
        p = select.poll()
        lab = {}
        ev = select.POLLIN | select.POLLOUT | select.POLLPRI | 0x2000
        for e in self.ends():
            for x, lb in zip(e.socks, e.labels):
                p.register(x.fileno(), ev)
                lab[x.fileno()] = (lb, e)
        res = sorted((lab[fd][0], bits(m, POLLBITS)) for fd, m in
                     ((fd, self.mask_out(lab[fd][1], m, select.POLLOUT, select.POLLIN)) for fd, m in p.poll(0)) if m)
        return "poll: %s" % (" ".join("%s=%s" % x for x in res) or "none")

    def op_select(self):
        fds = []
        for e in self.ends():
            for x, lb in zip(e.socks, e.labels):
                fds.append((x.fileno(), lb, e))
        rl, wl, xl = select.select([f for f, _, e in fds if not self.mask_out(e, 1, 0, 1) == 0],
                                   [f for f, _, e in fds if not e.out.big],
                                   [f for f, _, _ in fds], 0)
        lab = {f: lb for f, lb, _ in fds}
        return "select: r=%s w=%s x=%s" % (",".join(sorted(lab[f] for f in rl)), ",".join(sorted(lab[f] for f in wl)),
                                           ",".join(sorted(lab[f] for f in xl)))

    def op_epoll(self):
        if not self.eps or (len(self.eps) < 2 and self.r.random() < 0.2):
            ep = select.epoll()
            self.eps.append((ep, {}))
            return "epoll_create E%d" % (len(self.eps) - 1)
        i = self.r.randrange(len(self.eps))
        ep, reg = self.eps[i]
        k = self.r.choice(["add", "add", "mod", "del", "wait", "wait", "wait"])
        if k == "wait":
            # (maxevents 1 with several ready: the order differs, smcrun(1) READINESS,
            # "the turns go in the set's order of registration"; so always 8)
            n = self.r.choice([1, 8]) and 8
            try:
                evs = ep.poll(0, n)
            except OSError as x:
                return "epoll_wait E%d: %s" % (i, ename(x.errno))
            out = []
            for fd, m in evs:
                lb, e = reg.get(fd, ("?", None))[:2]
                if "epoll-closed-err" in self.avoid and reg.get(fd, ())[2:]:
                    m &= ~select.EPOLLERR
                if e is not None and (self.regev.get((i, fd), 0) & select.EPOLLET) and (e.inp.big or e.out.big):
                    # an edge on either end of a filled direction: whether data came
                    # (TCP's writer's buffers empty into the peer as its window opens,
                    # a ring takes what fits) or room did depends on the sizes
                    continue
                if e is not None:
                    m = self.mask_out(e, m, select.EPOLLOUT, select.EPOLLIN)
                    if not m:
                        continue  # (only a masked EPOLLOUT)
                out.append("%s=%s" % (lb, bits(m, EPBITS)))
            return "epoll_wait E%d max=%d: %s" % (i, n, " ".join(sorted(out)) or "none")
        e, s, l = self.pick()
        evm = self.r.choice([select.EPOLLIN, select.EPOLLOUT, select.EPOLLIN | select.EPOLLOUT,
                             select.EPOLLIN | select.EPOLLRDHUP, select.EPOLLIN | select.EPOLLET,
                             select.EPOLLIN | select.EPOLLOUT | select.EPOLLET,
                             select.EPOLLIN | select.EPOLLONESHOT,
                             select.EPOLLIN | select.EPOLLOUT | select.EPOLLRDHUP | select.EPOLLET])
        what = "epoll_%s E%d %s %s" % (k, i, l, bits(evm, EPBITS + [(select.EPOLLET, "ET"),
                                                                    (select.EPOLLONESHOT, "ONESHOT")]))
        try:
            if k == "add":
                ep.register(s.fileno(), evm)
                reg[s.fileno()] = (l, e)
                self.regev[(i, s.fileno())] = evm
            elif k == "mod":
                ep.modify(s.fileno(), evm)
                self.regev[(i, s.fileno())] = evm
            else:
                what = "epoll_del E%d %s" % (i, l)
                ep.unregister(s.fileno())
        except OSError as x:
            return "%s: %s" % (what, ename(x.errno))
        return "%s: 0" % what

    def op_names(self):
        e, s, l = self.pick()
        try:
            me = s.getsockname()
        except OSError as x:
            me = ename(x.errno)
        try:
            peer = s.getpeername()
        except OSError as x:
            peer = ename(x.errno)
        other = self.ls.getsockname()[1] if self.ls else None
        desc = lambda a: a if isinstance(a, str) else "%s:%s" % (a[0], "L" if a[1] == other else "p")
        return "names %s: %s %s" % (l, desc(me), desc(peer))

    def op_fork(self):
        e, s, l = self.pick()
        k = self.r.choice(["send", "recv", "shutwr", "exit", "close"])
        n = self.send_size(e) if k == "send" else self.r.choice([1, 100, 4096])
        if k == "shutwr" and e.out.big:
            return "fork %s: skipped (a fill unread by the peer)" % l   # (as in op_shutdown)
        if k == "shutwr" and "shutdown-edge" in self.avoid and (e.shut_any or e.peer.shut_rd or not e.peer.alive()):
            return "fork %s: skipped (known: shutdown-edge)" % l
        if k == "shutwr":
            e.shut_any = True
        if k == "recv":
            n = e.inp.cap(n)
            if n == 0:
                return "fork %s: skipped (a fill's rest)" % l
        data = e.out.payload(n) if k == "send" else b""
        rp, wp = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(rp)
            try:
                signal.setitimer(signal.ITIMER_REAL, 5)
                try:
                    if k == "send":
                        r = "%d" % s.send(data, socket.MSG_DONTWAIT)
                    elif k == "recv":
                        d = s.recv(n, socket.MSG_DONTWAIT)
                        ok = bytes(e.inp.sent[e.inp.rpos:e.inp.rpos + len(d)]) == d
                        r = "%d %s" % (len(d), "ok" if ok else "BAD")
                    elif k == "shutwr":
                        s.shutdown(socket.SHUT_WR)
                        r = "0"
                    elif k == "close":
                        s.close()
                        r = "0"
                    else:
                        r = "0"
                except OSError as x:
                    r = ename(x.errno)
                os.write(wp, r.encode())
            finally:
                os._exit(0)
        os.close(wp)
        r = b""
        while True:
            d = os.read(rp, 100)
            if not d:
                break
            r += d
        os.close(rp)
        os.waitpid(pid, 0)
        r = r.decode()
        what = "fork %s child %s %d" % (l, k, n)
        if k == "send" and r.isdigit():
            e.out.sent += data[:int(r)]
            r = "sent?" if e.out.big else r
        elif k == "recv" and r[:1].isdigit():
            c, st = r.split()
            e.inp.skip(int(c))
            if e.inp.big and c != "0":
                r = "+ " + st
        elif k == "send" and r == "EAGAIN" and e.out.big:
            r = "sent?"
        return "%s: %s" % (what, r)

    def op_listener(self):
        if not self.ls:
            return None
        k = self.r.choice(["poll", "accept", "extra"])
        if k == "poll":
            p = select.poll()
            p.register(self.ls.fileno(), select.POLLIN | select.POLLOUT | 0x2000)
            return "listener poll: %s" % " ".join(bits(m, POLLBITS) for _, m in p.poll(0))
        if k == "accept":
            self.ls.setblocking(False)
            try:
                a, _ = self.ls.accept()
                a.close()
                return "listener accept: a connection?"
            except OSError as x:
                return "listener accept: %s" % ename(x.errno)
            finally:
                self.ls.setblocking(True)
        c = socket.create_connection(self.ls.getsockname())
        self.settle()
        p = select.poll()
        p.register(self.ls.fileno(), select.POLLIN)
        pr = " ".join(bits(m, POLLBITS) for _, m in p.poll(0))
        a, _ = self.ls.accept()
        if smcapp.not_smcd(c, a):
            sys.stderr.write("seed %d: extra pair not SMC-D\n" % self.seed)
            sys.exit(3)
        c.sendall(b"hello")
        self.settle()
        d = a.recv(10, socket.MSG_DONTWAIT)
        a.close()
        self.settle()
        try:
            e = c.recv(10, socket.MSG_DONTWAIT)
        except OSError as x:
            e = ename(x.errno)
        c.close()
        return "listener extra: poll %s, %r, then %r" % (pr, d, e)

    def run(self):
        signal.signal(signal.SIGALRM, on_alarm)
        self.new_pair()
        ops = [(self.op_send, 10), (self.op_sendmsg, 4), (self.op_writev, 3), (self.op_recv, 12),
               (self.op_recvmsg, 4), (self.op_readv, 3), (self.op_sendfile, 3), (self.op_splice_out, 2),
               (self.op_splice_in, 2), (self.op_fill, 2), (self.op_drain, 4), (self.op_shutdown, 2),
               (self.op_close, 1), (self.op_nonblock, 3), (self.op_sockopt, 6), (self.op_ioctl, 5),
               (self.op_poll, 8), (self.op_select, 2), (self.op_names, 1)]
        if self.use_dup:
            ops.append((self.op_dup, 2))
        if self.use_epoll:
            ops.append((self.op_epoll, 10))
        if self.use_fork:
            ops.append((self.op_fork, 2))
        if self.ls:
            ops.append((self.op_listener, 2))
        fns = [f for f, _ in ops]
        wts = [w for _, w in ops]
        for self.step in range(1, self.steps + 1):
            if not self.ends():
                self.new_pair()
                continue
            fn = self.r.choices(fns, wts)[0]
            signal.setitimer(signal.ITIMER_REAL, 5)
            try:
                txt = fn()
            except Timeout:
                self.line("TIMEOUT in %s" % fn.__name__)
                sys.exit(2)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            if txt is not None:
                self.line(txt)
            # data held back by a cork (TCP_CORK or MSG_MORE) goes out within 200 ms
            # on both (tcp(7); libsmcproto(3), ENVIRONMENT): wait that out
            # after a send on a corked end, else the line after depends on the time
            if fn in (self.op_send, self.op_sendmsg, self.op_writev, self.op_sendfile, self.op_splice_in,
                      self.op_fill, self.op_fork) and any(e.cork for e in self.ends()):
                self.corked = True
            # (after a FIN TCP's peer may delay its ACK, 40 ms or more: TCP_INFO's
            # FIN_WAIT1 or FIN_WAIT2 would depend on the time)
            if fn in (self.op_shutdown, self.op_close, self.op_fork):
                self.corked = True
            self.settle(0.25 if self.corked else SETTLE)
            self.corked = False
        # the end: every byte the peer sent is still right (drain both ways)
        for e in self.ends():
            self.step += 1
            s = e.socks[0]
            self.line("final %s" % self.op_drain_sock(e, s, e.labels[0]))

    def op_drain_sock(self, e, s, l):
        save = self.pick
        self.pick = lambda: (e, s, l)
        try:
            fcntl.fcntl(s.fileno(), fcntl.F_SETFL, fcntl.fcntl(s.fileno(), fcntl.F_GETFL) | os.O_NONBLOCK)
            return self.op_drain()
        finally:
            self.pick = save


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--mode", default="record", choices=["record"])
    ap.add_argument("--avoid", default="", help="comma-separated divergences not to provoke: " + ", ".join(KNOWN))
    a = ap.parse_args()
    avoid = [x for x in a.avoid.split(",") if x]
    for x in avoid:
        if x not in KNOWN:
            ap.error("--avoid: unknown %r" % x)
    T(a.seed, a.steps, avoid).run()


if __name__ == "__main__":
    main()
