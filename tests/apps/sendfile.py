# sendfile(2) onto SMC sockets (smcrun intercepts it): every byte arrives, in order,
# with the file position or offset moved by exactly what was sent. Cases: an offset,
# the file position (offset None), a nonblocking socket with a file larger than the
# ring (short sends, EAGAIN), a count past the end of the file, a pipe (EINVAL, as TCP),
# TCP_CORK around writev + sendfile (nginx), SO_SNDTIMEO against a peer that does not read,
# the first sendfile after the peer's close or shutdown(SHUT_RDWR) (taken, as TCP's).
# The server (a thread) answers each connection with "LENGTH SHA256" after EOF.
import hashlib, os, select, socket, struct, sys, tempfile, threading

srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(8)
port = srv.getsockname()[1]


def serve():
    while True:
        c, _ = srv.accept()
        h, n = hashlib.sha256(), 0
        while True:
            d = c.recv(1 << 16)
            if not d:
                break
            h.update(d)
            n += len(d)
        c.sendall(b"%d %s" % (n, h.hexdigest().encode()))
        c.close()


threading.Thread(target=serve, daemon=True).start()
data = os.urandom(4 << 20) + bytes(range(256)) * 7  # 4 MiB + 1792: no size class
tmp = tempfile.NamedTemporaryFile()
tmp.write(data)
tmp.flush()
failed = 0


def check(label, conn, want):
    global failed
    conn.shutdown(socket.SHUT_WR)
    got = b""
    while True:
        d = conn.recv(200)
        if not d:
            break
        got += d
    conn.close()
    exp = b"%d %s" % (len(want), hashlib.sha256(want).hexdigest().encode())
    if got == exp:
        print("ok - %s: %d bytes" % (label, len(want)))
    else:
        print("not ok - %s: server saw %r, want %r" % (label, got, exp))
        failed += 1


def connect():
    return socket.create_connection(("127.0.0.1", port))


# 1. an offset, blocking; the file position stays where it was
with open(tmp.name, "rb") as f:
    f.seek(123)
    c, off = connect(), 0
    while off < len(data):
        off += os.sendfile(c.fileno(), f.fileno(), off, len(data) - off)
    pos = os.lseek(f.fileno(), 0, os.SEEK_CUR)
    check("offset, blocking (file position untouched: %d)" % pos, c, data)
    if pos != 123:
        print("not ok - sendfile with an offset moved the file position to %d" % pos)
        failed += 1

# 2. the file position (offset None), from 1000 on; it ends at the end of the file
with open(tmp.name, "rb") as f:
    os.lseek(f.fileno(), 1000, os.SEEK_SET)
    c = connect()
    while os.sendfile(c.fileno(), f.fileno(), None, 1 << 20) > 0:
        pass
    pos = os.lseek(f.fileno(), 0, os.SEEK_CUR)
    check("file position, blocking, from 1000", c, data[1000:])
    if pos != len(data):
        print("not ok - file position %d after sendfile, want %d" % (pos, len(data)))
        failed += 1

# 3. nonblocking: short sends and EAGAIN, the file position counting only what was sent
with open(tmp.name, "rb") as f:
    c = connect()
    c.setblocking(False)
    eagain = short = 0
    while True:
        try:
            k = os.sendfile(c.fileno(), f.fileno(), None, 3 << 20)
        except BlockingIOError:
            eagain += 1
            select.select([], [c], [])
            continue
        if k == 0:
            break
        if k < 3 << 20 and os.lseek(f.fileno(), 0, os.SEEK_CUR) < len(data):
            short += 1
    c.setblocking(True)
    check("file position, nonblocking (%d short, %d EAGAIN)" % (short, eagain), c, data)

# 4. a count past the end of the file: what is there, then 0
with open(tmp.name, "rb") as f:
    c = connect()
    a = os.sendfile(c.fileno(), f.fileno(), len(data) - 10, 1000)
    b = os.sendfile(c.fileno(), f.fileno(), len(data), 1000)
    check("count past the end (%d then %d)" % (a, b), c, data[-10:])
    if (a, b) != (10, 0):
        print("not ok - past the end: %d then %d, want 10 then 0" % (a, b))
        failed += 1

# 4b. a count above SSIZE_MAX: EINVAL, as the kernel answers (rw_verify_area()); nothing
# sent (helper 110: the library sent the file). Through the C library's symbol (ctypes,
# global lookup: the preload's), as Python's os.sendfile takes no such count.
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.sendfile.restype = ctypes.c_ssize_t
libc.sendfile.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t)
with open(tmp.name, "rb") as f:
    c = connect()
    off = ctypes.c_int64(0)
    k = libc.sendfile(c.fileno(), f.fileno(), ctypes.byref(off), (1 << 64) - 1)
    if k != -1 or ctypes.get_errno() != 22:
        print("not ok - sendfile with count 2^64-1: %d, errno %d, want -1 EINVAL" % (k, ctypes.get_errno()))
        failed += 1
    check("a count above SSIZE_MAX: EINVAL, as over TCP", c, b"")
    # offset + count past the largest offset (helper 111: sent the rest of the file)
    c = connect()
    try:
        k = os.sendfile(c.fileno(), f.fileno(), 7, (1 << 63) - 1)
        print("not ok - sendfile with offset 7 and count 2^63-1 sent %d, want EINVAL" % k)
        failed += 1
    except OSError as e:
        if e.errno != 22:
            print("not ok - sendfile with offset 7 and count 2^63-1: %s, want EINVAL" % e)
            failed += 1
    check("offset + count past the largest offset: EINVAL, as over TCP", c, b"")

# 5. a pipe as the source: EINVAL, as the kernel answers for a TCP socket; nothing sent
r, w = os.pipe()
os.write(w, b"y" * 1000)
c = connect()
try:
    os.sendfile(c.fileno(), r, None, 1000)
    print("not ok - sendfile from a pipe did not fail")
    failed += 1
except OSError as e:
    if e.errno != 22:
        print("not ok - sendfile from a pipe: %s, want EINVAL" % e)
        failed += 1
os.close(r)
os.close(w)
check("a pipe as the source: EINVAL, as over TCP", c, b"")

# 6. nginx's pattern: TCP_CORK, the header by writev, the body by sendfile, uncork
with open(tmp.name, "rb") as f:
    c = connect()
    hdr = b"HTTP/1.1 200 OK\r\nContent-Length: 4096\r\n\r\n"
    for i in range(3):
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
        os.writev(c.fileno(), [hdr])
        k = os.sendfile(c.fileno(), f.fileno(), 4096 * i, 4096)
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)
        if k != 4096:
            print("not ok - corked sendfile sent %d of 4096" % k)
            failed += 1
    check("TCP_CORK + writev + sendfile + uncork, 3 times", c,
          b"".join(hdr + data[4096 * i:4096 * (i + 1)] for i in range(3)))

# 7. SO_SNDTIMEO: a peer that does not read; a blocking sendfile returns what went out
# before the timeout, the next one fails with EAGAIN after it (as over TCP)
import time
quiet = socket.socket()
quiet.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
quiet.bind(("127.0.0.1", 0))
quiet.listen(1)
with open(tmp.name, "rb") as f:
    c = socket.socket()
    c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 << 10)
    c.connect(("127.0.0.1", quiet.getsockname()[1]))
    q, _ = quiet.accept()
    c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", 0, 300000))
    off, eagain, t0 = 0, False, time.monotonic()
    try:
        for _ in range(100):  # TCP may take a few calls to fill its buffers
            off += os.sendfile(c.fileno(), f.fileno(), off, len(data) - off)
    except BlockingIOError:
        eagain = True
    dt = time.monotonic() - t0
    if eagain and 0 < off < len(data) and 0.25 < dt < 60:
        print("ok - SO_SNDTIMEO: %d bytes, then EAGAIN after %.2f s" % (off, dt))
    else:
        print("not ok - SO_SNDTIMEO: sent %d, EAGAIN %s, %.2f s" % (off, eagain, dt))
        failed += 1
    got = b""
    c.shutdown(socket.SHUT_WR)
    while True:
        d = q.recv(1 << 16)
        if not d:
            break
        got += d
    if got != data[:off]:
        print("not ok - SO_SNDTIMEO: the peer got %d bytes, want the %d sent" % (len(got), off))
        failed += 1
    c.close()
    q.close()
quiet.close()

# 8. the first send after the peer's close or shutdown(SHUT_RDWR) is taken, as TCP's
# (tcp_rcv_state_process() answers it with RST): sendfile too (before, it failed with
# EPIPE after a close and went into the ring of a peer that had shut down both ways):
# what the file gives is counted and dropped, the position moves, the peer that holds
# the socket gets ECONNRESET with its unread bytes left as they were, an empty file
# gives 0 and takes nothing
import errno
ls = socket.socket()
ls.bind(("127.0.0.1", 0))
ls.listen(4)
empty = tempfile.NamedTemporaryFile()
with open("/proc/version", "rb") as f:
    proc_len = len(f.read())


def after_peer_end(how, path, start, count):
    c = socket.create_connection(ls.getsockname())
    p, _ = ls.accept()
    if how == "close":
        p.close()  # (in order: nothing of ours unread)
    else:
        c.sendall(b"u" * 86)  # (left unread)
        time.sleep(0.02)
        p.shutdown(socket.SHUT_RDWR)
    time.sleep(0.02)
    fd = os.open(path, os.O_RDONLY)
    os.lseek(fd, start, os.SEEK_SET)
    out = []
    for _ in range(2):
        try:
            out.append(os.sendfile(c.fileno(), fd, None, count) if not out else c.send(b"y"))
        except OSError as e:
            out.append(errno.errorcode[e.errno])
    out.append(os.lseek(fd, 0, os.SEEK_CUR))
    os.close(fd)
    if how != "close":
        time.sleep(0.02)
        out.append(c.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR))
        out.append(p.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR))
        out.append(len(p.recv(200, socket.MSG_DONTWAIT)))
        p.close()
    c.close()
    return out


for how, path, start, count, want in (
        ("close", tmp.name, 0, 4096, [4096, "EPIPE", 4096]),
        ("close", tmp.name, len(data) - 1000, 4096, [1000, "EPIPE", len(data)]),
        ("close", empty.name, 0, 4096, [0, 1, 0]),
        # (a /proc file says size 0: what reading gives, helper 131)
        ("close", "/proc/version", 0, 4096, [proc_len, "EPIPE", proc_len]),
        ("shut", tmp.name, 0, 4096, [4096, "EPIPE", 4096, 0, errno.ECONNRESET, 86])):
    got = after_peer_end(how, path, start, count)
    if got == want:
        print("ok - sendfile after the peer's %s (%d of the file at %d): %s" % (how, count, start, got))
    else:
        print("not ok - sendfile after the peer's %s (%d at %d): %s, want %s (as TCP)" % (how, count, start,
                                                                                      got, want))
        failed += 1


def at_end_after(how):
    """A sendfile with nothing left in the file (at its end, past it) on a connection
    that fails sends (after EPIPE, after our SHUT_WR): 0, as the kernel's, which reads
    the file before the socket is touched (helper 132: EPIPE under smcrun)."""
    c = socket.create_connection(ls.getsockname())
    p, _ = ls.accept()
    if how == "EPIPE":
        p.close()
        time.sleep(0.02)
        for _ in range(2):
            try:
                c.send(b"y")
            except OSError:
                pass
            time.sleep(0.02)
    else:
        c.shutdown(socket.SHUT_WR)
    fd = os.open(tmp.name, os.O_RDONLY)
    out = []
    for off in (len(data), len(data) + 1000):
        try:
            out.append(os.sendfile(c.fileno(), fd, off, 100))
        except OSError as e:
            out.append(errno.errorcode[e.errno])
    try:
        out.append(os.sendfile(c.fileno(), fd, 0, 100))  # (bytes to send: the error)
    except OSError as e:
        out.append(errno.errorcode[e.errno])
    os.close(fd)
    p.close()
    c.close()
    return out


for how in ("EPIPE", "SHUT_WR"):
    got = at_end_after(how)
    if got == [0, 0, "EPIPE"]:
        print("ok - sendfile at the file's end after %s: %s" % (how, got))
    else:
        print("not ok - sendfile at the file's end after %s: %s, want [0, 0, 'EPIPE'] (as TCP)" % (how, got))
        failed += 1
ls.close()
empty.close()
tmp.close()  # (deletes it: left to the interpreter's exit it stayed in /tmp, 4 MB a run)
sys.exit(1 if failed else 0)
