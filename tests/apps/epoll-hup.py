#!/usr/bin/env python3
# A transcript of the readiness a connection reports once its directions are shut:
# epoll (level- and edge-triggered, and a registration with no events, which sees
# only EPOLLHUP / EPOLLERR) and poll, in each state on the way: one side's
# shutdown(SHUT_WR), then the other's; shutdown(SHUT_RDWR); SHUT_RD then SHUT_WR; a
# close of the peer after our SHUT_WR; the peer's abort (close with data unread, and
# kill -9 with data unread); data still readable in the hung-up state; a hung-up
# connection shared with a child process that reads on after the parent closed its
# copy; the one send TCP takes after the peer's close or SHUT_RDWR (answered with a
# reset: EPOLLHUP with a new edge, EPIPE in SO_ERROR once); the error of an abort taken
# through a dup of the socket, or by a forked child: then gone for the original too
# (one error per socket, as TCP's sk_err); a reset after our own shutdown: reported
# first (ECONNRESET, no SIGPIPE), also after a send that failed with EPIPE; a close with
# SO_LINGER {1, 0} or data unread after both sides shut down writing: no reset (TCP's
# connection is closed then), also when the last copy goes with a process's exit
# (smcd decides); bytes held by TCP_CORK or MSG_MORE when the sender's process exits
# or is killed (sent, then EOF) or closes with SO_LINGER {1, 0} (dropped: ECONNRESET);
# the reset seen through a registration whose descriptor was closed while a dup lives;
# an edge at every shutdown(2), a repeated one and one that fails with ENOTCONN;
# these also checked against TCP's results. tests/test-smcrun-apps.sh
# runs it over plain TCP and under smcrun and compares the two transcripts line by
# line; with SMC_EXPECT=1 it also checks that every connection is SMC-D.
#
# After the peer's abort, or after that send, EPOLLERR too, until a call returns the
# error (smcrun's epoll_wait adds it to the kernel's EPOLLHUP on X: smcrun(1)).
import errno
import hashlib
import os
import select
import signal
import socket
import struct
import sys
import time

import smcapp

SETTLE = 0.2  # s for a FIN or a close to reach the other side
ALL = select.EPOLLIN | select.EPOLLOUT | select.EPOLLRDHUP
NAMES = [(select.EPOLLIN, "IN"), (select.EPOLLOUT, "OUT"), (select.EPOLLRDHUP, "RDHUP"),
         (select.EPOLLHUP, "HUP"), (select.EPOLLERR, "ERR")]
failed = False


def out(*a):
    print(*a, flush=True)


def names(m):
    return "|".join(n for b, n in NAMES if m & b) or "-"


def masks(sock):
    """level-triggered epoll with IN|OUT|RDHUP, epoll with no events, poll"""
    ep = select.epoll()
    ep.register(sock.fileno(), ALL)
    lv = ep.poll(0)
    ep.close()
    ep = select.epoll()
    ep.register(sock.fileno(), 0)
    zero = ep.poll(0)
    ep.close()
    p = select.poll()
    p.register(sock.fileno(), select.POLLIN | select.POLLOUT | select.POLLRDHUP)
    pl = p.poll(0)
    return "epoll %s, epoll(0) %s, poll %s" % (names(lv[0][1] if lv else 0),
                                                names(zero[0][1] if zero else 0),
                                                names(pl[0][1] if pl else 0))


def raw_masks(sock):
    """what the kernel itself says, through epoll_wait(2) and poll(2) system calls
    that bypass smcrun's wrappers (a program on the libsmcproto API, or one that
    makes raw system calls): EPOLLERR left out, which only smcrun's epoll_wait and
    poll add for an SMC socket (smcrun(1)); the rest as TCP's"""
    import ctypes
    import platform
    import struct
    if platform.machine() != "x86_64":
        return "raw (not on %s)" % platform.machine()
    libc = ctypes.CDLL(None, use_errno=True)
    ep = select.epoll()
    ep.register(sock.fileno(), ALL)
    buf = ctypes.create_string_buffer(12 * 2)
    n = libc.syscall(232, ep.fileno(), buf, 2, 0)  # SYS_epoll_wait
    lv = struct.unpack_from("=I", buf, 0)[0] if n > 0 else 0
    ep.close()
    pfd = ctypes.create_string_buffer(struct.pack("=ihh", sock.fileno(),
                                                  select.POLLIN | select.POLLOUT | select.POLLRDHUP, 0))
    n = libc.syscall(7, pfd, 1, 0)  # SYS_poll
    pl = struct.unpack_from("=ihh", pfd.raw, 0)[2] if n > 0 else 0
    return "raw epoll %s, raw poll %s" % (names(lv & ~select.EPOLLERR), names(pl & ~select.POLLERR))


def show(label, c, s):
    time.sleep(SETTLE)
    out("%s: c %s; s %s" % (label, masks(c), masks(s)))


def recv_result(sock):
    try:
        return "recv %r" % sock.recv(10)
    except OSError as e:
        return "recv %s" % os.strerror(e.errno)


def case1():
    out("case 1: c SHUT_WR, then s SHUT_WR")
    c, s = smcapp.pair()
    show("  fresh", c, s)
    c.shutdown(socket.SHUT_WR)
    show("  c SHUT_WR", c, s)
    s.shutdown(socket.SHUT_WR)
    show("  s SHUT_WR", c, s)
    out("  c %s, s %s" % (recv_result(c), recv_result(s)))
    c.close()
    s.close()


def case2():
    out("case 2: c SHUT_RDWR")
    c, s = smcapp.pair()
    c.shutdown(socket.SHUT_RDWR)
    show("  c SHUT_RDWR", c, s)
    c.close()
    s.close()


def case3():
    out("case 3: c SHUT_RD, then c SHUT_WR")
    c, s = smcapp.pair()
    c.shutdown(socket.SHUT_RD)
    show("  c SHUT_RD", c, s)
    c.shutdown(socket.SHUT_WR)
    show("  c SHUT_WR", c, s)
    c.close()
    s.close()


def case4():
    out("case 4: s SHUT_WR, then c closes (nothing unread)")
    c, s = smcapp.pair()
    s.shutdown(socket.SHUT_WR)
    show("  s SHUT_WR", c, s)
    c.recv(10)
    c.close()
    time.sleep(SETTLE)
    out("  c closed: s %s" % masks(s))
    out("  s %s" % recv_result(s))
    s.close()


def case5():
    out("case 5: s closes with data unread (abort)")
    c, s = smcapp.pair()
    c.sendall(b"unread")
    time.sleep(SETTLE)
    s.close()
    time.sleep(SETTLE)
    out("  s closed: c %s" % masks(c))
    out("  s closed: c %s" % raw_masks(c))
    out("  c %s" % recv_result(c))
    out("  after the error: c %s" % masks(c))
    c.close()


def case6():
    out("case 6: the process that holds s is killed with data unread")
    c, s = smcapp.pair()
    pid = os.fork()
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    s.close()  # the child holds the only copy
    c.sendall(b"unread")
    time.sleep(SETTLE)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    time.sleep(SETTLE)
    out("  s killed: c %s" % masks(c))
    out("  s killed: c %s" % raw_masks(c))
    out("  c %s" % recv_result(c))
    c.close()


def case7():
    out("case 7: c SHUT_WR, the process that holds s is killed (nothing unread)")
    c, s = smcapp.pair()
    c.shutdown(socket.SHUT_WR)
    pid = os.fork()
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    s.close()
    time.sleep(SETTLE)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    time.sleep(SETTLE)
    out("  s killed: c %s" % masks(c))
    out("  c %s" % recv_result(c))
    c.close()


def et_pair():
    """a connection, with c in an edge-triggered epoll set"""
    c, s = smcapp.pair()
    ep = select.epoll()
    ep.register(c.fileno(), ALL | select.EPOLLET)
    return c, s, ep


def case8():
    out("case 8: edge-triggered epoll across c SHUT_WR, then s sends and shuts")
    c, s, ep = et_pair()
    out("  fresh: %s" % [names(m) for _, m in ep.poll(SETTLE)])
    c.shutdown(socket.SHUT_WR)
    time.sleep(SETTLE)
    out("  c SHUT_WR: %s" % [names(m) for _, m in ep.poll(0)])
    s.sendall(b"x" * 1000)
    time.sleep(SETTLE)
    out("  s sends: %s" % [names(m) for _, m in ep.poll(0)])
    s.shutdown(socket.SHUT_WR)
    time.sleep(SETTLE)
    out("  s SHUT_WR: %s" % [names(m) for _, m in ep.poll(0)])
    n = 0
    while True:
        b = c.recv(65536)
        if not b:
            break
        n += len(b)
    out("  c read %d bytes, then EOF; again: %s" % (n, [names(m) for _, m in ep.poll(0)]))
    ep.close()
    c.close()
    s.close()


def case9():
    out("case 9: hung up with 3 MiB+5 still to read")
    c, s = smcapp.pair()
    c.shutdown(socket.SHUT_WR)
    data = os.urandom(3 * 1024 * 1024 + 5)
    pid = os.fork()
    if pid == 0:
        c.close()
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        s.close()
        os._exit(0)
    s.close()
    time.sleep(SETTLE)
    got = bytearray()
    ep = select.epoll()
    ep.register(c.fileno(), 0)
    while True:
        b = c.recv(65536)
        if not b:
            break
        got += b
    os.waitpid(pid, 0)
    ok = bytes(got) == data
    out("  read %d bytes, %s; epoll(0) %s" % (len(got), "intact" if ok else "CORRUPT",
                                             [names(m) for _, m in ep.poll(SETTLE)]))
    ep.close()
    c.close()


def case10():
    out("case 10: hung up with data unread, shared with a child that reads on after the parent closed")
    c, s = smcapp.pair()
    data = os.urandom(100 * 1000 + 3)  # fits in the ring and in TCP's buffers
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        s.close()
        time.sleep(3 * SETTLE)  # the parent closes its copy meanwhile
        h = hashlib.sha256()
        n = 0
        while True:
            b = c.recv(65536)
            if not b:
                break
            h.update(b)
            n += len(b)
        os.write(w, ("%d %s\n" % (n, h.hexdigest())).encode())
        c.close()
        os._exit(0)
    os.close(w)
    c.shutdown(socket.SHUT_WR)
    time.sleep(SETTLE)
    # s sends, then its FIN: c is hung up with data unread
    th = os.fork()
    if th == 0:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        os._exit(0)
    time.sleep(SETTLE)
    out("  c %s" % masks(c))
    c.close()
    res = os.read(r, 200).decode().split()
    os.waitpid(pid, 0)
    os.waitpid(th, 0)
    ok = res == [str(len(data)), hashlib.sha256(data).hexdigest()]
    out("  the child read %s bytes, %s" % (res[0] if res else "?", "intact" if ok else "CORRUPT"))
    s.close()


def so_error(sock):
    e = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    return os.strerror(e) if e else "0"


def send_result(sock, data):
    try:
        return "send %d" % sock.send(data)
    except OSError as e:
        return "send %s" % os.strerror(e.errno)


def case11():
    out("case 11: s closes; c sends once (TCP takes it and the peer answers with RST), then again")
    c, s, ep = et_pair()
    ep.poll(SETTLE)
    s.close()
    time.sleep(SETTLE)
    out("  s closed: c %s; edge %s" % (masks(c), [names(m) for _, m in ep.poll(0)]))
    out("  c %s" % send_result(c, b"after close"))
    time.sleep(SETTLE)
    out("  after the send: c %s; edge %s" % (masks(c),
                                             [names(m) for _, m in ep.poll(0)]))
    out("  c SO_ERROR %s, %s, %s, SO_ERROR %s" % (so_error(c), recv_result(c), send_result(c, b"again"),
                                                 so_error(c)))
    out("  then: c %s" % masks(c))
    ep.close()
    c.close()


def case12():
    out("case 12: s shuts down both ways but keeps its socket; c sends once, then again")
    c, s, ep = et_pair()
    eps = select.epoll()  # (s's reset is a new edge too: helper 129 found none)
    eps.register(s.fileno(), ALL | select.EPOLLET)
    ep.poll(SETTLE)
    eps.poll(SETTLE)
    s.shutdown(socket.SHUT_RDWR)
    time.sleep(SETTLE)
    out("  s SHUT_RDWR: c %s; edge %s; s's edge %s" % (masks(c), [names(m) for _, m in ep.poll(0)],
                                                        [names(m) for _, m in eps.poll(0)]))
    out("  c %s" % send_result(c, b"after shutdown"))
    time.sleep(SETTLE)
    out("  after the send: c %s; edge %s; s %s; s's edge %s" % (masks(c),
                                                                [names(m) for _, m in ep.poll(0)],
                                                                masks(s),
                                                                [names(m) for _, m in eps.poll(0)]))
    eps.close()
    out("  c %s, SO_ERROR %s, %s; s %s" % (recv_result(c), so_error(c), send_result(c, b"again"),
                                          recv_result(s)))
    ep.close()
    c.close()
    s.close()


def case13():
    out("case 13: s closes with data unread (abort); the error taken through a dup of c, then through a child")
    c, s = smcapp.pair()
    c.sendall(b"unread")
    time.sleep(SETTLE)
    s.close()
    time.sleep(SETTLE)
    d = socket.socket(fileno=os.dup(c.fileno()))
    out("  dup SO_ERROR %s; then c %s, SO_ERROR %s, %s" % (so_error(d), masks(c), so_error(c), recv_result(c)))
    d.close()
    c.close()
    c, s = smcapp.pair()
    c.sendall(b"unread")
    time.sleep(SETTLE)
    s.close()
    time.sleep(SETTLE)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.write(w, ("%s\n" % recv_result(c)).encode())
        os._exit(0)
    os.close(w)
    child = os.read(r, 100).decode().strip()
    os.close(r)
    os.waitpid(pid, 0)
    out("  child %s; then c %s, SO_ERROR %s, %s" % (child, masks(c), so_error(c), recv_result(c)))
    c.close()


def expect(label, got, want):
    """TCP's result on Linux (the reference), checked explicitly too"""
    global failed
    if got != want:
        failed = True
        out("  MISMATCH %s: %r, TCP gives %r" % (label, got, want))


def rst_close(sock):
    """close with SO_LINGER {1, 0}: TCP's close sends RST"""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def send_sigpipe(sock, data):
    """send, and whether it raised SIGPIPE (blocked meanwhile: it stays pending)"""
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGPIPE])
    try:
        r = send_result(sock, data)
        return r, signal.sigtimedwait([signal.SIGPIPE], 0) is not None
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGPIPE])


def case14():
    out("case 14: a reset after our own shutdown: reported before EPIPE (tcp_sendmsg: sk_err first)")
    c, s = smcapp.pair()
    s.shutdown(socket.SHUT_WR)
    time.sleep(SETTLE)
    rst_close(c)
    time.sleep(SETTLE)
    r0, p0 = send_sigpipe(s, b"")
    r1, p1 = send_sigpipe(s, b"x")
    out("  s SHUT_WR, c closes with SO_LINGER {1, 0}: s %s (SIGPIPE %s), then %s (SIGPIPE %s)" % (r0, p0, r1, p1))
    expect("send after SHUT_WR and the peer's reset", (r0, p0), ("send %s" % os.strerror(errno.ECONNRESET), False))
    expect("the send after it", (r1, p1), ("send %s" % os.strerror(errno.EPIPE), True))
    s.close()
    c, s = smcapp.pair()
    s.shutdown(socket.SHUT_RDWR)
    time.sleep(SETTLE)
    r = send_result(c, b"x")  # taken; TCP's answer is a RST
    time.sleep(SETTLE)
    r1, p1 = send_sigpipe(s, b"x")
    out("  s SHUT_RDWR, c %s: s %s (SIGPIPE %s), SO_ERROR %s" % (r, r1, p1, so_error(s)))
    expect("send after SHUT_RDWR and the peer's RST", (r1, p1), ("send %s" % os.strerror(errno.ECONNRESET), False))
    c.close()
    s.close()


def case15():
    out("case 15: a send that failed with EPIPE after our SHUT_WR takes no later reset")
    c, s = smcapp.pair()
    s.shutdown(socket.SHUT_WR)
    r = send_result(s, b"x")
    rst_close(c)
    time.sleep(SETTLE)
    m = masks(s)
    out("  s SHUT_WR, %s, c closes with SO_LINGER {1, 0}: s %s" % (r, m))
    expect("readiness after the reset", "ERR" in m, True)
    r1, r2 = recv_result(s), recv_result(s)
    out("  s %s, then %s" % (r1, r2))
    expect("recv after the reset", (r1, r2), ("recv %s" % os.strerror(errno.ECONNRESET), "recv b''"))
    s.close()


def both_shut(unread):
    c, s = smcapp.pair()
    if unread:
        c.sendall(b"unread")
    c.shutdown(socket.SHUT_WR)
    s.shutdown(socket.SHUT_WR)
    time.sleep(SETTLE)
    return c, s


def case16():
    out("case 16: both sides SHUT_WR (TCP: closed), then s closes: no reset")
    for how in ("SO_LINGER {1, 0}", "data unread", "SO_LINGER {1, 0}, in a child that exits",
                "data unread, in a child that exits"):
        c, s = both_shut("unread" in how)
        if "child" in how:
            # the last copy goes without a close of the library: smcd decides
            pid = os.fork()
            if pid == 0:
                if "LINGER" in how:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                os._exit(0)
            s.close()
            os.waitpid(pid, 0)
        elif "LINGER" in how:
            rst_close(s)
        else:
            s.close()
        time.sleep(SETTLE)
        p = select.poll()
        p.register(c.fileno(), select.POLLIN | select.POLLOUT | select.POLLRDHUP)
        pl = p.poll(0)
        ev = pl[0][1] if pl else 0
        e = so_error(c)
        out("  %s: c %s, poll %#x, SO_ERROR %s, %s" % (how, masks(c), ev, e, recv_result(c)))
        expect(how + ": poll", ev, select.POLLIN | select.POLLOUT | select.POLLHUP | select.POLLRDHUP)
        expect(how + ": SO_ERROR", e, "0")
        c.close()


def case17():
    out("case 17: bytes a cork or MSG_MORE held when the sender's process ends")
    for how in ("MSG_MORE, _exit", "TCP_CORK, _exit", "MSG_MORE, SIGKILL", "MSG_MORE, SO_LINGER {1, 0} close"):
        ls = socket.socket()
        ls.bind(("127.0.0.1", 0))
        ls.listen(1)
        pid = os.fork()
        if pid == 0:
            # its own connection (a forked copy would be shared: no holding)
            c = socket.create_connection(ls.getsockname())
            assert not smcapp.not_smcd(c), "not SMC-D"
            if "CORK" in how:
                c.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
                c.send(b"HELLO")
            else:
                c.send(b"HELLO", socket.MSG_MORE)
            if "LINGER" in how:
                rst_close(c)
                os._exit(0)
            if "SIGKILL" in how:
                os.kill(os.getpid(), signal.SIGKILL)
            os._exit(0)
        s, _ = ls.accept()
        ls.close()
        os.waitpid(pid, 0)
        s.settimeout(3)
        got = b""
        try:
            while True:
                d = s.recv(100)
                if not d:
                    end = "EOF"
                    break
                got += d
        except OSError as e:
            end = errno.errorcode.get(e.errno, str(e)) if e.errno else type(e).__name__
        out("  %s: %r, then %s" % (how, got, end))
        # TCP: the kernel sends a dead process's corked data before its FIN; an RST
        # drops it
        expect(how, (got, end), (b"", "ECONNRESET") if "LINGER" in how else (b"HELLO", "EOF"))
        s.close()


def case18():
    out("case 18: the peer's reset seen through a registration whose number was closed, a dup living")
    # closing one descriptor of a file leaves the epoll registration made through it:
    # it reports the file's events until the file's last close (helper 132: no
    # EPOLLERR here under smcrun once the registered number was closed)
    for close_first, et in ((False, 0), (True, 0), (True, select.EPOLLET)):
        a, b = smcapp.pair()
        d = b.dup()
        ep = select.epoll()
        ep.register(b.fileno(), select.EPOLLIN | et)
        if close_first:
            b.close()
        rst_close(a)
        time.sleep(SETTLE)
        got = [names(m) for _, m in ep.poll(0)]
        label = "%s, %s closed" % ("ET" if et else "LT", "that number" if close_first else "nothing")
        out("  %s: %s" % (label, got))
        expect(label, got, ["IN|HUP|ERR"])
        d.close()
        ep.close()
        if not close_first:
            b.close()


def case19():
    out("case 19: every shutdown(2) wakes edge-triggered epoll, a repeated one and one that fails too")
    # TCP's inet_shutdown() calls sk_state_change at every call, also before it fails
    # with ENOTCONN (helper 132: no edge here for a second SHUT_WR nor after a reset)
    ET = select.EPOLLIN | select.EPOLLOUT | select.EPOLLRDHUP | select.EPOLLET
    for case in ("SHUT_WR twice", "SHUT_RD twice", "SHUT_RDWR twice", "SHUT_RD after the peer's reset"):
        a, b = smcapp.pair()
        ep = select.epoll()
        ep.register(b.fileno(), ET)
        how = getattr(socket, case.split()[0])
        if case.endswith("reset"):
            rst_close(a)
            a = None
            time.sleep(SETTLE)
            b.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        else:
            b.shutdown(how)
        time.sleep(SETTLE)
        before = [names(m) for _, m in ep.poll(0)]
        try:
            b.shutdown(how)
            r = "0"
        except OSError as e:
            r = errno.errorcode.get(e.errno, str(e.errno))
        time.sleep(SETTLE)
        out("  %s: before %s; shutdown %s; then %s" % (case, before, r, [names(m) for _, m in ep.poll(0)]))
        ep.close()
        b.close()
        if a:
            a.close()


signal.signal(signal.SIGPIPE, signal.SIG_IGN)
for f in (case1, case2, case3, case4, case5, case6, case7, case8, case9, case10, case11, case12,
          case13, case14, case15, case16, case17, case18, case19):
    f()
sys.exit(1 if failed else 0)
