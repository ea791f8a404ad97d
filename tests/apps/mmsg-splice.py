#!/usr/bin/env python3
# sendmmsg(2), recvmmsg(2) and splice(2) on SMC sockets under smcrun: the bytes go
# through the connection's data stream, in order, as over TCP (without the shim's
# wrappers they would act on the bare socketpair end and the data would be lost).
#  1. sendmmsg of 3 messages (scatter lists), read back in order; its return value.
#  2. recvmmsg with MSG_WAITFORONE: one message at least, no blocking after it; a
#     message of 0 bytes (an empty buffer, end of file) does not end the batch.
#  3. splice socket -> pipe -> socket (a relay), 1 MiB checked; an offset for
#     the socket: EINVAL, as the kernel.
#  4. splice pipe -> a full nonblocking socket (haproxy's pattern): EAGAIN takes
#     nothing from the pipe, 4 MiB arrive in order; socket -> a pipe full by pages
#     but not by bytes: EAGAIN, the bytes stay in the ring.
#  5. more than 1024 vectors: sendmsg/recvmsg EMSGSIZE, writev/readv EINVAL, as
#     the kernel, and the connection goes on.
#  6. pipe -> a full blocking socket: SO_SNDTIMEO ends the wait with EAGAIN, a
#     signal with EINTR, nothing taken from the pipe.
# Prints one line; exit status 0 only if every case held.
import ctypes
import errno
import fcntl
import hashlib
import os
import signal
import socket
import struct
import sys
import termios
import threading
import time

from streams import pair, recv_all

libc = ctypes.CDLL(None, use_errno=True)


class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class msghdr(ctypes.Structure):
    _fields_ = [("name", ctypes.c_void_p), ("namelen", ctypes.c_uint32), ("iov", ctypes.POINTER(iovec)),
                ("iovlen", ctypes.c_size_t), ("control", ctypes.c_void_p), ("controllen", ctypes.c_size_t),
                ("flags", ctypes.c_int)]


class mmsghdr(ctypes.Structure):
    _fields_ = [("hdr", msghdr), ("len", ctypes.c_uint)]


MSG_WAITFORONE = 0x10000






def make_msgs(parts_list, keep):
    vec = (mmsghdr * len(parts_list))()
    for i, parts in enumerate(parts_list):
        iovs = (iovec * len(parts))()
        for k, p in enumerate(parts):
            b = ctypes.create_string_buffer(p, len(p)) if isinstance(p, bytes) else ctypes.create_string_buffer(p)
            keep.append(b)
            iovs[k].base = ctypes.cast(b, ctypes.c_void_p)
            iovs[k].len = len(p) if isinstance(p, bytes) else p
        keep.append(iovs)
        vec[i].hdr.iov = iovs
        vec[i].hdr.iovlen = len(parts)
    return vec


def case_sendmmsg():
    c, s = pair()
    keep = []
    vec = make_msgs([[b"alpha-", b"beta-"], [b"gamma-"], [b"delta", b"-", b"end"]], keep)
    n = libc.sendmmsg(c.fileno(), vec, 3, 0)
    want = b"alpha-beta-gamma-delta-end"
    got = recv_all(s, len(want))
    ok = n == 3 and [vec[i].len for i in range(3)] == [11, 6, 9] and got == want
    c.close()
    s.close()
    return ok, "sendmmsg"


def case_recvmmsg():
    c, s = pair()
    c.sendall(b"0123456789")
    import time
    time.sleep(0.1)
    keep = []
    vec = make_msgs([[4], [4], [4]], keep)
    n = libc.recvmmsg(s.fileno(), vec, 3, MSG_WAITFORONE, None)
    lens = [vec[i].len for i in range(max(n, 0))]
    data = b"".join(keep[2 * i].raw[:lens[i]] for i in range(len(lens)))
    # all 10 bytes were there: 4 + 4 + 2; then nothing more: the next call would block,
    # MSG_WAITFORONE with MSG_DONTWAIT gives EAGAIN
    ok = n == 3 and lens == [4, 4, 2] and data == b"0123456789"
    vec2 = make_msgs([[4]], keep)
    n2 = libc.recvmmsg(s.fileno(), vec2, 1, socket.MSG_DONTWAIT, None)
    ok = ok and n2 == -1 and ctypes.get_errno() == errno.EAGAIN
    # a message of 0 bytes ends no batch, as the kernel's loop (it stopped the batch,
    # and the third buffer stayed empty): an empty buffer, then end of file
    c.sendall(b"abcdefghijklmnopqrst")
    time.sleep(0.1)
    vec3 = make_msgs([[10], [0], [10]], keep)
    n3 = libc.recvmmsg(s.fileno(), vec3, 3, socket.MSG_DONTWAIT, None)
    ok = ok and n3 == 3 and [vec3[i].len for i in range(3)] == [10, 0, 10]
    c.close()
    time.sleep(0.1)
    vec4 = make_msgs([[4], [4], [4]], keep)
    n4 = libc.recvmmsg(s.fileno(), vec4, 3, socket.MSG_DONTWAIT, None)
    ok = ok and n4 == 3 and [vec4[i].len for i in range(3)] == [0, 0, 0]
    s.close()
    return ok, "recvmmsg"


def case_splice():
    a, b = pair()   # a -> b: the source
    c, d = pair()   # c -> d: the relay's output
    r, w = os.pipe()
    data = os.urandom(1 << 20)
    t = threading.Thread(target=a.sendall, args=(data,))
    t.start()
    out = {}
    rd = threading.Thread(target=lambda: out.setdefault("d", recv_all(d, len(data))))
    rd.start()
    moved = 0
    while moved < len(data):
        n = os.splice(b.fileno(), w, 1 << 16)
        if n <= 0:
            break
        left = n
        while left:
            left -= os.splice(r, c.fileno(), left)
        moved += n
    t.join()
    rd.join()
    ok = hashlib.sha256(out["d"]).digest() == hashlib.sha256(data).digest()
    try:
        os.splice(b.fileno(), w, 10, offset_src=0)
        ok = False
    except OSError as e:
        ok = ok and e.errno == errno.EINVAL
    for x in (a, b, c, d):
        x.close()
    os.close(r)
    os.close(w)
    return ok, "splice-relay"


def pipe_fill(fd):
    n = ctypes.c_int(0)
    fcntl.ioctl(fd, termios.FIONREAD, n)
    return n.value


def case_splice_full_socket():
    """pipe -> a full nonblocking socket with SPLICE_F_NONBLOCK (haproxy's pattern): an
    EAGAIN takes nothing from the pipe, a count takes exactly that many; 4 MiB arrive
    in order (before: the bytes of a send that found the ring full were lost)."""
    c, s = pair()
    c.setblocking(False)
    r, w = os.pipe()
    data = os.urandom(4 << 20)
    def feed():
        try:
            for i in range(0, len(data), 65536):
                os.write(w, data[i:i + 65536])
        except OSError:
            pass

    feeder = threading.Thread(target=feed)
    feeder.start()
    out = {}

    def drain():
        s.settimeout(20)  # bytes lost: fail, not hang
        try:
            out["d"] = recv_all(s, len(data))
        except OSError:
            pass

    sink = threading.Thread(target=drain)
    moved, ok, eagain = 0, True, 0
    while moved < len(data) and ok:
        before = pipe_fill(r)
        try:
            n = os.splice(r, c.fileno(), 65536, flags=os.SPLICE_F_NONBLOCK | os.SPLICE_F_MOVE)
        except BlockingIOError:
            n = 0
            eagain += 1
            if eagain == 1:
                sink.start()  # the ring was full: start reading
            threading.Event().wait(0.0005)
        after = pipe_fill(r)
        # (the feeder may add bytes meanwhile: more, never fewer)
        if after < before - n:
            ok = False  # more left the pipe than the call reported
        moved += n
    if eagain == 0:
        sink.start()
    if not ok:  # unblock the feeder and the sink
        os.close(r)
        c.close()
    feeder.join()
    sink.join()
    ok = ok and eagain > 0 and out.get("d") == data
    for x in (c, s):
        x.close()
    if ok:
        os.close(r)
    os.close(w)
    return ok, "splice-to-full-socket"


def case_splice_full_pipe():
    """socket -> a pipe that is full by pages though not by bytes (16 one-byte packets,
    O_DIRECT): SPLICE_F_NONBLOCK gives EAGAIN and leaves the bytes in the ring, as the
    kernel's splice (before: a write into the pipe blocked for good, or spun, with the
    bytes already taken)."""
    c, s = pair()
    r, w = os.pipe2(os.O_DIRECT | os.O_NONBLOCK)
    for _ in range(16):
        try:
            os.write(w, b"p")
        except BlockingIOError:
            break
    c.sendall(b"ring bytes")
    threading.Event().wait(0.05)
    try:
        os.splice(s.fileno(), w, 100, flags=os.SPLICE_F_NONBLOCK)
        ok = False
    except BlockingIOError:
        ok = True
    while True:  # drain the packets, then the bytes move
        try:
            os.read(r, 1)
        except BlockingIOError:
            break
    ok = ok and os.splice(s.fileno(), w, 100, flags=os.SPLICE_F_NONBLOCK) == 10 and os.read(r, 100) == b"ring bytes"
    for x in (c, s):
        x.close()
    os.close(r)
    os.close(w)
    return ok, "splice-to-full-pipe"


def case_splice_closed_and_packets():
    """pipe -> socket as the kernel's: a peer that is gone gives EPIPE (and SIGPIPE)
    with the bytes left in the pipe; from a packet (O_DIRECT) pipe a splice of part of
    a packet moves that part and leaves the rest (before: the bytes were taken and
    lost, and the rest of the packet was dropped)"""
    c, s = pair()
    r, w = os.pipe2(os.O_DIRECT)
    os.write(w, b"P" * 4096)
    ok = os.splice(r, c.fileno(), 1000) == 1000 and recv_all(s, 1000) == b"P" * 1000
    ok = ok and pipe_fill(r) == 3096
    while pipe_fill(r):
        os.read(r, 4096)
    s.close()
    old = signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    try:
        results = []
        for _ in range(3):
            os.write(w, b"xyz")
            try:
                results.append(os.splice(r, c.fileno(), 100))
            except BrokenPipeError:
                results.append("EPIPE")
            except ConnectionResetError:
                results.append("ECONNRESET")
        # the first send after the peer's close is taken (TCP: its peer answers RST),
        # then EPIPE, each time leaving the new bytes in the pipe
        ok = ok and results[0] == 3 and results[1] in ("EPIPE", "ECONNRESET") and results[2] == "EPIPE"
        ok = ok and pipe_fill(r) == 6
    finally:
        signal.signal(signal.SIGPIPE, old)
    c.close()
    os.close(r)
    os.close(w)
    return ok, "splice-closed-peer-and-packets"


def case_iov_limits():
    """More than UIO_MAXIOV (1024) vectors: sendmsg/recvmsg fail with EMSGSIZE,
    writev/readv with EINVAL, as the kernel's; nothing moves, the connection goes on."""
    c, s = pair()
    calls = [("sendmsg", errno.EMSGSIZE, lambda: c.sendmsg([b"x"] * 1025)),
             ("recvmsg_into", errno.EMSGSIZE, lambda: s.recvmsg_into([bytearray(1)] * 1025)),
             ("writev", errno.EINVAL, lambda: os.writev(c.fileno(), [b"x"] * 1025)),
             ("readv", errno.EINVAL, lambda: os.readv(s.fileno(), [bytearray(1)] * 1025))]
    ok = True
    for name, want, call in calls:
        try:
            call()
            got = 0
        except OSError as e:
            got = e.errno
        if got != want:
            print("iov limits: %s: errno %d, want %d" % (name, got, want), file=sys.stderr)
            ok = False
    c.sendall(b"after")
    ok = ok and recv_all(s, 5) == b"after"
    c.close()
    s.close()
    return ok, "iov-limits"


def case_splice_sndtimeo():
    """pipe -> a full blocking socket with SO_SNDTIMEO 100 ms: EAGAIN after about
    that long, nothing taken from the pipe, as a blocking send (helper 132: the
    library waited for good); a signal handler without SA_RESTART: EINTR."""
    c, s = pair()
    c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", 0, 100000))
    c.setblocking(False)
    for _ in range(50):  # (TCP's buffers grow as the bytes move: full when it stays so)
        n = 0
        try:
            while True:
                n += c.send(b"x" * 65536)
        except BlockingIOError:
            pass
        if n == 0:
            break
        time.sleep(0.05)
    c.setblocking(True)
    c.settimeout(None)  # (Python's blocking mode; SO_SNDTIMEO stays)
    c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", 0, 100000))
    r, w = os.pipe()
    os.write(w, b"y")
    t = time.monotonic()
    try:
        os.splice(r, c.fileno(), 1)
        res = "moved"
    except OSError as e:
        res = errno.errorcode.get(e.errno, str(e.errno))
    took = time.monotonic() - t
    ok = res == "EAGAIN" and 0.05 <= took < 5 and pipe_fill(r) == 1
    # no timeout: a signal whose handler lacks SA_RESTART ends the wait (EINTR; Python
    # retries EINTR itself unless the handler raises)
    c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", 0, 0))

    class Alarm(Exception):
        pass

    def on_alarm(sig, frame):
        raise Alarm()
    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.siginterrupt(signal.SIGALRM, True)
    signal.setitimer(signal.ITIMER_REAL, 0.2)
    try:
        os.splice(r, c.fileno(), 1)
        res2 = "moved"
    except Alarm:
        res2 = "interrupted"
    except OSError as e:
        res2 = errno.errorcode.get(e.errno, str(e.errno))
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, old)
    ok = ok and res2 == "interrupted" and pipe_fill(r) == 1
    if not ok:
        print("splice-sndtimeo: %s after %.2f s, then %s, pipe holds %d" % (res, took, res2, pipe_fill(r)))
    for x in (c, s):
        x.close()
    os.close(r)
    os.close(w)
    return ok, "splice-sndtimeo"


def main():
    results = [case_sendmmsg(), case_recvmmsg(), case_splice(), case_splice_full_socket(), case_splice_full_pipe(),
               case_splice_closed_and_packets(), case_iov_limits(), case_splice_sndtimeo()]
    bad = [name for ok, name in results if not ok]
    print("%d cases, failed: %s" % (len(results), ", ".join(bad) or "none"))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
