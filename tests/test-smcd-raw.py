#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Raw control-protocol checks against a private smcd.

Usage: test-smcd-raw.py PATH/TO/smcd

Starts smcd in a temporary runtime directory, speaks the protocol of
libsmcproto/ctl-proto.h with hand-packed messages (no client library), and checks:
HELLO and the negotiation of protocol versions 1..6, LISTEN (with a real listening
TCP socket), CONNECT (fds, buffer ids, shared memory, doorbells; in version 3 with the
client's TCP socket), the SMCR request (version 3) on TCP connections without SMC,
CLOSE, buffer reuse without fds, zeroed reused buffers, client
death (as TCP: orderly close if the dead one had read everything, abort if data was
left unread; buffers back), fallbacks (no listener, backlog full, limits),
wildcard listeners, malformed messages (each answered with ERROR, smcd keeps
serving), the allow list, option errors, SIGUSR1 stats and a clean SIGTERM exit,
the per-uid limit on control connections, fast teardown of many clients that exit at
once, no busy loop when accept4 runs out of fds, config file / runtime directory
errors, and HELLO_REPLY.instance with REREG (version 3: the endpoints of a connection
set up by an earlier smcd re-registered with a restarted one, joined by their DMB
tokens; errors, the per-uid limit, client death, values no library sends).
"""

import array
import errno
import json
import mmap
import os
import resource
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import time

MAGIC = 0x64434D53
VERSION_MIN, VERSION_MAX = 1, 6  # SMC_CTL_VERSION_MIN, SMC_CTL_VERSION (ctl-proto.h)
VERSION_UNSUPPORTED = VERSION_MAX + 1
VERSION = VERSION_MIN  # of a message unless told, and of smcd's messages before HELLO
(HELLO, HELLO_REPLY, LISTEN, LISTEN_REPLY, UNLISTEN, CONNECT, CONNECT_REPLY,
 NEW_CONN, CLOSE, OK, ERROR, FALLBACK, SMCR) = range(1, 14)
REREG, REREG_REPLY = 16, 17  # (v3) after ADOPT (14), ADOPT_REPLY (15)
REREG_DONE = 18  # (v3) after REREG_REPLY
ADOPT, ADOPT_REPLY = 14, 15
ADOPT_FD = 19  # (v3) after REREG_DONE
LISTEN_DEPOSIT = 20  # (v5)
REQUEUE = 22  # (v6) after FALLBACK_COUNT (21)
LISTEN_F_JOIN, LISTEN_JOINED = 0x1, 0x2  # (v5) LISTEN.flags, LISTEN_REPLY.flags
LISTEN_NB_KNOWN, LISTEN_NONBLOCK, DEPOSIT_NONBLOCK = 0x4, 0x8, 0x1  # (v5) the sender's O_NONBLOCK
DEPOSIT_WITHDRAW = 0x2  # (v5) LISTEN_DEPOSIT: take the newest deposit back
LISTEN_F_REVIVE, LISTEN_REVIVED = 0x2, 0x10  # (v6) LISTEN.flags, LISTEN_REPLY.flags
DONE_ALL, DONE_SERVERS = 1, 2
MODE_TCP, MODE_SMCD, MODE_SMCR_PENDING, MODE_SMCR = 0, 1, 2, 3
ROLE_CLIENT, ROLE_SERVER = 0, 1
LISTEN_SMCR = 1
BUF_FD = 1
CLOSE_ABORT = 1
DMB_HDR_LEN = 4096
EYECATCHER = 0xFE
CONN_DONE_WRITING, CONN_CLOSED, CONN_ABORT = 0x80, 0x40, 0x20

DECL_PEERNOSMC = 0x03010000
DECL_NOSMCRDEV = 0x03030002
DECL_PEERDECL = 0x05000000
DECL_MAXCONNERR = 0x0303000A
DECL_MAX_DMB = 0x030D0000

HDR = struct.Struct("<IHHII")
ADDR = struct.Struct("<HHI16s")
BUF = struct.Struct("<QII")
SIZES = {HELLO: 32, HELLO_REPLY: 32, LISTEN: 48, LISTEN_REPLY: 24, UNLISTEN: 24,
         CONNECT: 72, CONNECT_REPLY: 112, NEW_CONN: 112, CLOSE: 32, OK: 16, ERROR: 120}
# message sizes by protocol version (ctl-proto.h, Versions)
SIZES_V = {1: SIZES, 2: dict(SIZES), 3: None, 4: None, 5: None, 6: None}
SIZES_V[2].update({LISTEN: 56, CONNECT_REPLY: 120, NEW_CONN: 120, FALLBACK: 72})
SIZES_V[3] = dict(SIZES_V[2])
SIZES_V[3].update({LISTEN_REPLY: 32, SMCR: 40, REREG: 104, REREG_REPLY: 24, REREG_DONE: 24, ADOPT: 24,
                   ADOPT_REPLY: 120, ADOPT_FD: 24})
SIZES_V[4] = dict(SIZES_V[3])  # version 4: no new layout (listeners mark what they accept)
SIZES_V[5] = dict(SIZES_V[4])  # version 5: LISTEN.flags (was reserved), LISTEN_DEPOSIT
SIZES_V[5].update({LISTEN_DEPOSIT: 32})
SIZES_V[6] = dict(SIZES_V[5])  # version 6: LISTEN_REPLY's 2 fds (C, D), F_REVIVE, NEW_CONN.seq
SIZES_V[6].update({REQUEUE: 32})

# struct smc_dmb_hdr offsets (dmb.h)
OFF_TYPE, OFF_PROD, OFF_CONN_FLAGS, OFF_CONS, OFF_READER_FLAGS = 0, 8, 20, 64, 76
OFF_PROD_BYTES = 32  # struct smc_dmb_hdr.prod_bytes (64-bit byte count)
OFF_TOKEN = 152  # struct smc_dmb_hdr.token (u64, written by smcd at set-up; REREG)
OFF_DATA_DIRTY = 160  # struct smc_dmb_hdr.data_dirty (u32): how far the writer wrote the ring
DIRTY_UNKNOWN = 0xFFFFFFFF

failures = 0
checks = 0
tmpdirs = []


def check(cond, what):
    global failures, checks
    checks += 1
    if cond:
        print(f"ok   {what}")
    else:
        failures += 1
        print(f"FAIL {what}")
    return cond


def hdr(mtype, seq, length=None, version=VERSION, magic=MAGIC):
    sizes = SIZES_V.get(version, SIZES_V[VERSION_MAX])
    return HDR.pack(magic, version, mtype, sizes.get(mtype, 16) if length is None else length, seq)


def listen_body(host, port, backlog, version, sndbuf=0, rcvbuf=0, flags=0):
    """LISTEN's body: (v2) sndbuf, rcvbuf; (v5) flags (reserved before)."""
    v2 = struct.pack("<II", sndbuf, rcvbuf) if version >= 2 else b""
    return addr(host, port) + struct.pack("<II", backlog, flags) + v2


def addr(host, port):
    if ":" in host:
        return ADDR.pack(socket.AF_INET6, port, 0, socket.inet_pton(socket.AF_INET6, host))
    return ADDR.pack(socket.AF_INET, port, 0, socket.inet_pton(socket.AF_INET, host) + bytes(12))


def unpack_addr(b):
    fam, port, scope, a = ADDR.unpack(b)
    if fam == socket.AF_INET:
        return (fam, socket.inet_ntop(socket.AF_INET, a[:4]), port)
    if fam == socket.AF_INET6:
        return (fam, socket.inet_ntop(socket.AF_INET6, a), port)
    return (fam, None, port)


def msg_version(data):
    return HDR.unpack_from(data)[1]


def recv_msg(sock, timeout=5.0, version=None):
    """One datagram: (type, seq, body bytes, fds). Its length must be that of its type
    in its version, and its version @version if given."""
    sock.settimeout(timeout)
    fds = array.array("i")
    data, anc, flags, _ = sock.recvmsg(512, socket.CMSG_SPACE(16 * fds.itemsize))
    for level, typ, cdata in anc:
        if level == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
            fds.frombytes(cdata[:len(cdata) - (len(cdata) % fds.itemsize)])
    if not data:
        raise EOFError("smcd closed the connection")
    magic, ver, mtype, length, seq = HDR.unpack_from(data)
    assert magic == MAGIC and length == len(data) and ver in SIZES_V and length == SIZES_V[ver].get(mtype), \
        (magic, ver, mtype, length, len(data))
    assert version is None or ver == version, f"message type {mtype} of version {ver}, expected {version}"
    return mtype, seq, data, list(fds)


def send(sock, data, fds=()):
    if fds:
        sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
    else:
        sock.send(data)


def parse_error(data):
    err, detail, msg = struct.unpack_from("<iI96s", data, 16)
    return err, detail, msg.split(b"\0")[0].decode()


def parse_conn(data):
    conn_id, mode, reason = struct.unpack_from("<QII", data, 16)
    rx = BUF.unpack_from(data, 32)
    tx = BUF.unpack_from(data, 48)
    local = unpack_addr(data[64:88])
    peer = unpack_addr(data[88:112])
    params = struct.unpack_from("<II", data, 112) if len(data) >= 120 else None  # (v2) busy_poll, autocork
    return dict(id=conn_id, mode=mode, reason=reason, rx=rx, tx=tx, local=local, peer=peer, params=params,
                version=msg_version(data), len=len(data))


def tcp_for(dst):
    """A fresh TCP socket, not connected: what a version-3 CONNECT carries."""
    return socket.socket(socket.AF_INET6 if ":" in dst[0] else socket.AF_INET, socket.SOCK_STREAM)


def no_smc_ok(info, version):
    """A CONNECT to a destination without a local SMC listener: TCP with PEERNOSMC;
    in version 3 (smcd got the TCP socket) NOSMCRDEV when smcd has no RoCE device, or
    SMCR_PENDING when it has one (connect over TCP, then SMCR)."""
    if info["mode"] == MODE_TCP:
        return info["reason"] == DECL_PEERNOSMC or (version >= 3 and info["reason"] == DECL_NOSMCRDEV)
    return version >= 3 and info["mode"] == MODE_SMCR_PENDING

class Client:
    """A control connection speaking protocol version @version (HELLO offers
    VERSION_MIN..@version): its requests are built, and smcd's replies checked, in
    that version."""
    seq = 100

    def __init__(self, path, do_hello=True, version=VERSION):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.s.connect(path)
        self.id = None
        self.instance = None  # HELLO_REPLY.instance (formerly reserved): which smcd
        self.version = VERSION_MIN  # smcd's messages before HELLO
        self.listen_flags = None
        self.dchan = None  # (v6) the copy of smcd's end of the last listener's channel
        if do_hello:
            t, data = self.hello(VERSION_MIN, version)
            assert t == HELLO_REPLY and self.version == version, (t, self.version, version)

    def next(self):
        Client.seq += 1
        return Client.seq

    def hello(self, lo, hi, seq=None):
        """HELLO (sent as the oldest version) offering @lo..@hi: (type, reply). A
        HELLO_REPLY sets the version and the id."""
        send(self.s, hdr(HELLO, seq or self.next(), version=VERSION_MIN) + struct.pack("<IIII", lo, hi, 0, 0))
        t, rseq, data, fds = recv_msg(self.s)
        assert not fds
        if t == HELLO_REPLY:
            ver, self.instance, self.id = struct.unpack_from("<IIQ", data, 16)
            assert ver == msg_version(data), (ver, msg_version(data))
            self.version = ver
        else:
            assert msg_version(data) == VERSION_MIN
        return t, data

    def hdr(self, mtype, seq, **kw):
        return hdr(mtype, seq, version=self.version, **kw)

    def request(self, data, fds=()):
        send(self.s, data, fds)
        return recv_msg(self.s, version=self.version)

    def listen(self, tcp, backlog=16, sndbuf=0, rcvbuf=0, flags=0):
        host, port = tcp.getsockname()[:2]
        seq = self.next()
        t, rseq, data, fds = self.request(self.hdr(LISTEN, seq) + listen_body(host, port, backlog, self.version,
                                                                           sndbuf, rcvbuf, flags), [tcp.fileno()])
        if t != LISTEN_REPLY:
            return None, None, parse_error(data) if t == ERROR else t
        lid = struct.unpack_from("<Q", data, 16)[0]
        # (v3) flags, reserved
        self.listen_flags = struct.unpack_from("<II", data, 24) if self.version >= 3 else None
        # (v6) and a copy of smcd's end D, kept in self.dchan (the library keeps it)
        assert rseq == seq and len(fds) == (2 if self.version >= 6 else 1), (self.version, len(fds))
        self.dchan = socket.socket(fileno=fds[1]) if len(fds) == 2 else None
        return lid, socket.socket(fileno=fds[0]), None

    def revive(self, tcp, chan_fd, dchan_fd, backlog=16, version=None, fds=None):
        """LISTEN with F_REVIVE (v6): ("revived", listener id, flags, nfds) or ("error", errno)
        or ("type", t)."""
        host, port = tcp.getsockname()[:2]
        seq = self.next()
        v = version or self.version
        send(self.s, hdr(LISTEN, seq, version=v) + listen_body(host, port, backlog, v, flags=LISTEN_F_REVIVE),
             [tcp.fileno(), chan_fd, dchan_fd] if fds is None else fds)
        t, rseq, data, rfds = recv_msg(self.s, version=self.version)
        for f in rfds:
            os.close(f)
        if t == LISTEN_REPLY and rseq == seq:
            return ("revived", struct.unpack_from("<Q", data, 16)[0], struct.unpack_from("<I", data, 24)[0], len(rfds))
        return ("error", parse_error(data)[0]) if t == ERROR else ("type", t)

    def connect(self, dst, src=("127.0.0.1", 40000), rcvbuf=0, sndbuf=0, fds=None):
        """CONNECT; in version 3 with a fresh unconnected TCP socket (unless @fds says
        what to send), closed again after the reply."""
        seq = self.next()
        body = addr(*dst) + (addr(*src) if src else bytes(ADDR.size)) + struct.pack("<II", sndbuf, rcvbuf)
        own = tcp_for(dst) if fds is None and self.version >= 3 else None
        try:
            t, rseq, data, rfds = self.request(self.hdr(CONNECT, seq) + body,
                                               [own.fileno()] if own else (fds or ()))
        finally:
            if own:
                own.close()
        assert t == CONNECT_REPLY and rseq == seq, (t, rseq, seq, parse_error(data) if t == ERROR else None)
        return parse_conn(data), rfds

    def close_conn(self, conn_id, flags=0):
        send(self.s, self.hdr(CLOSE, self.next()) + struct.pack("<QII", conn_id, flags, 0))

    def expect_error(self, data, fds=(), what=""):
        seq = HDR.unpack_from(data)[4] if len(data) >= 16 else None
        send(self.s, data, fds)
        t, rseq, rdata, rfds = recv_msg(self.s, version=self.version)
        if t != ERROR:
            return None
        err, detail, msg = parse_error(rdata)
        if seq is not None and rseq != seq:
            print(f"     seq {rseq} != {seq}")
            return None
        return err, msg


class Smcd:
    def __init__(self, binary, rundir, extra=(), preexec=None):
        self.rundir = rundir
        self.sock = os.path.join(rundir, "smcd.sock")
        self.stats_path = os.path.join(rundir, "stats.json")
        self.log = open(os.path.join(rundir, "smcd.log"), "w")
        try:  # a socket left by a killed smcd is not this one's
            stale = os.stat(self.sock).st_ino
        except OSError:
            stale = None
        env = dict(os.environ, SMCD_RUNTIME_DIR=rundir)
        env.pop("LISTEN_FDS", None)
        self.p = subprocess.Popen([binary] + (["-v"] if os.environ.get("SMCD_TEST_VERBOSE", "1") == "1" else []) + ["--runtime-dir", rundir] + list(extra),
                                  stdout=self.log, stderr=subprocess.STDOUT, env=env, preexec_fn=preexec)
        for _ in range(500):
            try:
                ours = os.stat(self.sock).st_ino != stale
            except OSError:
                ours = False
            if ours and os.path.exists(self.stats_path):
                break
            if self.p.poll() is not None:
                raise RuntimeError(f"smcd exited with {self.p.returncode}")
            time.sleep(0.01)
        else:
            raise RuntimeError("smcd did not create its socket")

    def stats(self, cond=lambda s: True, timeout=5.0):
        """SIGUSR1 and read stats.json until @cond holds (or the timeout)."""
        deadline = time.time() + timeout
        s = None
        while True:
            try:
                with open(self.stats_path) as f:
                    old = json.load(f)["seq"]
            except (OSError, ValueError):
                old = -1
            self.p.send_signal(signal.SIGUSR1)
            while time.time() < deadline:
                try:
                    with open(self.stats_path) as f:
                        new = json.load(f)
                    if new["seq"] != old:
                        s = new
                        break
                except (OSError, ValueError):
                    pass
                time.sleep(0.005)
            if (s and cond(s)) or time.time() >= deadline:
                return s
            time.sleep(0.02)

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.log.close()
        return self.p.returncode


def as_uid(fn, uid=65534):
    """Run fn() in a forked child switched to @uid (and gid); return the bytes it
    returned, or the repr of what it raised."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        res = b"?"
        try:
            os.setgid(uid)
            os.setuid(uid)
            res = fn()
        except Exception as e:
            res = repr(e).encode()
        os.write(w, res)
        os._exit(0)
    os.close(w)
    res = os.read(r, 300)
    os.close(r)
    os.waitpid(pid, 0)
    return res


def tcp_listener(host="127.0.0.1", backlog=16, v6only=None):
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    t = socket.socket(fam, socket.SOCK_STREAM)
    t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if v6only is not None:
        t.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1 if v6only else 0)
    t.bind((host, 0))
    t.listen(backlog)
    return t


def map_fd(fd):
    size = os.fstat(fd).st_size
    mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    os.close(fd)
    return mm


def u32(mm, off):
    return struct.unpack_from("<I", mm, off)[0]


class Conn:
    """The fds and mappings one side got for one connection."""

    def __init__(self, info, fds, maps):
        self.info = info
        self.x = socket.socket(fileno=fds[0])
        self.y = socket.socket(fileno=fds[1])
        rest = fds[2:]
        for which in ("rx", "tx"):
            bid, size, flags = info[which]
            if flags & BUF_FD:
                maps[bid] = map_fd(rest.pop(0))
        assert not rest
        self.rx = maps[info["rx"][0]]
        self.tx = maps[info["tx"][0]]

    def close(self):
        self.x.close()
        self.y.close()


def main():
    if len(sys.argv) != 2:
        print("usage: test-smcd-raw.py PATH/TO/smcd", file=sys.stderr)
        return 2
    binary = os.path.abspath(sys.argv[1])
    # the same checks with clients of every protocol version, each against a fresh smcd
    for version in range(VERSION_MIN, VERSION_MAX + 1):
        print(f"---- main checks, protocol version {version}")
        rundir = tempfile.mkdtemp(prefix=f"smcd-raw-v{version}-")
        tmpdirs.append(rundir)
        d = Smcd(binary, rundir)
        check(not os.path.exists(d.sock + ".new"), "smcd's socket was renamed into place listening (no .new left)")
        try:
            run_main_checks(d, binary, version)
        finally:
            rc = d.stop()
        check(rc == 0, f"smcd exits 0 on SIGTERM (got {rc})")
        check(not os.path.exists(d.sock), "smcd removed its socket at exit")
        with open(d.stats_path) as f:
            check(json.load(f)["smcd"]["clients"] == 0, "stats.json written at exit")
    print("---- versions")
    run_version_checks(binary)

    run_limit_checks(binary)
    run_shared_checks(binary)
    run_client_limit_checks(binary)
    run_accept_emfile_check(binary)
    run_prepopulate_check(binary)
    run_stall_check(binary)
    run_option_checks(binary)
    run_rereg_checks(binary)
    run_eptable_checks(binary)
    run_adopt_fd_checks(binary)
    run_requeue_checks(binary)
    run_deposit_checks(binary)
    run_revive_checks(binary)
    run_x_hup_checks(binary)
    if os.getuid() == 0:
        run_allow_checks(binary)
        run_domain_check(binary)
        run_netns_fallback_check(binary)
    else:
        print("skip allow-list check (needs root to switch uid)")

    print(f"{checks - failures} passed, {failures} failed")
    if failures:
        print(f"smcd logs kept in: {' '.join(tmpdirs)}")
    else:
        for t in tmpdirs:
            shutil.rmtree(t, ignore_errors=True)
    return 1 if failures else 0


def run_netns_fallback_check(binary):
    """A CONNECT that finds no listener in its own network namespace falls back
    (PEERNOSMC) and counts as a client fallback only: a listener on that port in
    another namespace never sees it, so it is no server fallback (it was counted as one
    while the server-side count looked in every namespace)."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    rundir = tempfile.mkdtemp(prefix="smcd-raw-netns-")
    tmpdirs.append(rundir)
    d = Smcd(binary, rundir)
    r, w = os.pipe()
    r2, w2 = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(r)
            os.close(w2)
            if libc.unshare(0x40000000) != 0:  # CLONE_NEWNET
                os.write(w, b"unshare")
            else:
                tcp = socket.socket()
                tcp.bind(("0.0.0.0", 0))
                tcp.listen(4)
                c = Client(d.sock, version=VERSION_MAX)
                lid, ch, err = c.listen(tcp)
                os.write(w, b"%d" % (tcp.getsockname()[1] if lid else 0))
                os.read(r2, 1)
                code = 0
        finally:
            os._exit(code)
    os.close(w)
    os.close(r2)
    try:
        got = os.read(r, 20)
        if got == b"unshare" or not got:
            print("skip netns fallback check: cannot unshare a network namespace")
            return
        port = int(got)
        check(port != 0, "a listener in another network namespace")
        if not port:
            return
        s0 = d.stats()["fallback"]
        c = Client(d.sock, version=VERSION_MAX)
        info, fds = c.connect(("127.0.0.1", port))
        for fd in fds:
            os.close(fd)
        s1 = d.stats(lambda s: s["fallback"]["client"] > s0["client"])["fallback"]
        check(info["mode"] == MODE_TCP and info["reason"] == DECL_PEERNOSMC and
              s1["client"] == s0["client"] + 1 and s1["server"] == s0["server"],
              f"... a CONNECT to its port from here: TCP, PEERNOSMC ({info['mode']}, {info['reason']:#x}), "
              f"a client fallback ({s0['client']} -> {s1['client']}), no server fallback "
              f"({s0['server']} -> {s1['server']})")
        c.s.close()
    finally:
        os.close(w2)
        os.waitpid(pid, 0)
        os.close(r)
        d.stop()


def connect_n(client, addr, n, keep=None):
    """@n CONNECTs of @client to @addr: their modes. Their fds are closed at once, or
    appended to the list @keep."""
    modes = []
    for _ in range(n):
        info, fds = client.connect(addr)
        modes.append(info["mode"])
        if keep is not None:
            keep += fds
        else:
            for fd in fds:
                os.close(fd)
    return modes


def drain_queue(ch):
    """Read every NEW_CONN queued on accept channel @ch (closing its fds): how many."""
    n = 0
    while True:
        try:
            _, _, _, sfds = recv_msg(ch, timeout=0.2)
        except (BlockingIOError, TimeoutError):
            return n
        n += 1
        for fd in sfds:
            os.close(fd)


def run_main_checks(d, binary, version):
    """SMC-D set-up, data, close, death, fallbacks, listeners, malformed messages, with
    clients of protocol @version (in version 3 each CONNECT carries a fresh TCP socket)."""
    maps_a, maps_b = {}, {}  # buffer id -> mmap, per "process"

    a = Client(d.sock, version=version)
    b = Client(d.sock, version=version)
    check(a.id and b.id and a.id != b.id and a.version == b.version == version,
          f"HELLO offering {VERSION_MIN}..{version} gives version {a.version} and client ids ({a.id}, {b.id})")

    tcp = tcp_listener()
    port = tcp.getsockname()[1]
    lid, chan, err = a.listen(tcp, backlog=8)
    check(lid, f"LISTEN 127.0.0.1:{port} -> listener {lid} {err or ''}")

    info, fds = b.connect(("127.0.0.1", port))
    check(info["mode"] == MODE_SMCD and len(fds) == 4,
          f"CONNECT{' with its TCP socket' if version >= 3 else ''} gives SMC-D with 4 fds ({info['mode']}, {len(fds)})")
    t, _, data, sfds = recv_msg(chan, version=version)
    srv = parse_conn(data)
    check(t == NEW_CONN and srv["mode"] == MODE_SMCD and len(sfds) == 4, "NEW_CONN on the accept channel with 4 fds")
    want_len = SIZES_V[version][CONNECT_REPLY]
    check(info["version"] == srv["version"] == version and info["len"] == srv["len"] == want_len and
          (version < 2 or info["params"] is not None),
          f"CONNECT_REPLY and NEW_CONN of version {version}, {want_len} bytes (params {info['params']}, {srv['params']})")
    check(info["rx"][0] == srv["tx"][0] and info["tx"][0] == srv["rx"][0] and info["rx"][0] != info["tx"][0],
          "buffer ids cross over (client rx = server tx)")
    # the default rmem (128 KiB); a version-1 LISTEN sizes the server's from the
    # listening socket's SO_RCVBUF / 2 (tcp_rmem[1] / 2 = 64 KiB here)
    want_srv = 65536 if version < 2 else 131072
    check(info["rx"][1] == 131072 and srv["rx"][1] == want_srv,
          f"default DMB 128 KiB, version 1 server SO_RCVBUF / 2 ({info['rx'][1]}, {srv['rx'][1]})")
    check(info["id"] != srv["id"] and info["id"] and srv["id"], "distinct endpoint ids")
    check(info["local"] == (socket.AF_INET, "127.0.0.1", 40000) and info["peer"] == (socket.AF_INET, "127.0.0.1", port),
          f"client addresses {info['local']} {info['peer']}")
    check(srv["local"] == (socket.AF_INET, "127.0.0.1", port) and srv["peer"] == (socket.AF_INET, "127.0.0.1", 40000),
          f"server addresses {srv['local']} {srv['peer']}")

    cc = Conn(info, fds, maps_b)
    sc = Conn(srv, sfds, maps_a)
    check(cc.rx[OFF_TYPE] == EYECATCHER and cc.tx[OFF_TYPE] == EYECATCHER, "DMB eyecatcher set")
    check(u32(cc.rx, OFF_DATA_DIRTY) == u32(cc.tx, OFF_DATA_DIRTY) == DIRTY_UNKNOWN,
          "data_dirty UNKNOWN at hand-out (a writer that never says how far it wrote gets the whole ring cleared)")
    # data: the client writes into its tx (= the server's rx) and rings Y; it does
    # not say how far (data_dirty stays UNKNOWN), and scribbles the ring's last byte
    # too: the release must clear all of it
    payload = b"hello over loopback ISM"
    cc.tx[DMB_HDR_LEN:DMB_HDR_LEN + len(payload)] = payload
    cc.tx[len(cc.tx) - 1] = 0x5A
    struct.pack_into("<Q", cc.tx, OFF_PROD, len(payload))
    struct.pack_into("<Q", cc.tx, OFF_PROD_BYTES, len(payload))
    cc.y.send(b"\1")
    sc.x.settimeout(2)
    check(sc.x.recv(1) == b"\1", "doorbell: Y of the client reaches X of the server")
    check(bytes(sc.rx[DMB_HDR_LEN:DMB_HDR_LEN + len(payload)]) == payload and
          struct.unpack_from("<Q", sc.rx, OFF_PROD)[0] == len(payload), "shared memory: server reads what the client wrote")
    sc.y.send(b"\1")
    cc.x.settimeout(2)
    check(cc.x.recv(1) == b"\1", "doorbell: Y of the server reaches X of the client")

    s = d.stats(lambda s: s["smcd"]["conns_current"] == 1)
    check(s["smcd"]["conns_client"] == 1 and s["smcd"]["conns_server"] == 1 and s["pool"]["in_use"] == 2,
          f"stats: 1 SMC-D connection, 2 buffers in use ({s['smcd']['conns_client']}, {s['pool']['in_use']})")

    # orderly close of both ends
    old_ids = {info["rx"][0], info["tx"][0]}
    b.close_conn(info["id"])
    a.close_conn(srv["id"])
    cc.close()
    sc.close()
    s = d.stats(lambda s: s["pool"]["in_use"] == 0 and s["pool"]["pending_clear"] == 0)
    check(s["pool"]["in_use"] == 0 and s["pool"]["pending_clear"] == 0 and s["pool"]["clear"] >= 2,
          f"CLOSE of both ends: buffers back and cleared (in_use {s['pool']['in_use']}, clear {s['pool']['clear']})")
    check(s["smcd"]["conns_closed"] == 1 and s["smcd"]["bytes_tx"] == len(payload),
          f"stats: conns_closed 1, bytes_tx {s['smcd']['bytes_tx']}")

    # reuse within the trust domain: both clients have these buffers mapped
    info, fds = b.connect(("127.0.0.1", port))
    t, _, data, sfds = recv_msg(chan)
    srv = parse_conn(data)
    reused = {info["rx"][0], info["tx"][0]} == old_ids
    check(reused, "buffers reused in the same trust domain")
    if reused:
        check(len(fds) == 2 and not (info["rx"][2] | info["tx"][2]) & BUF_FD,
              f"CONNECT_REPLY of reused buffers carries no memfds ({len(fds)} fds)")
        # a NEW_CONN may be read by any process holding the channel, also one forked
        # before the listener's client mapped these: always both memfds
        check(len(sfds) == 4 and srv["rx"][2] & srv["tx"][2] & BUF_FD,
              f"NEW_CONN of buffers the listener's client mapped carries both memfds all the same ({len(sfds)} fds)")
    cc = Conn(info, fds, maps_b)
    sc = Conn(srv, sfds, maps_a)
    check(cc.tx[OFF_TYPE] == EYECATCHER and struct.unpack_from("<Q", cc.tx, OFF_PROD)[0] == 0 and
          not any(cc.tx[DMB_HDR_LEN:DMB_HDR_LEN + 4096]) and cc.tx[len(cc.tx) - 1] == 0 and
          cc.rx[len(cc.rx) - 1] == 0,
          "a reused buffer reads zero (header and data, also the last byte of the ring)")

    # client death, nothing unread: b goes away with the connection open after it
    # shut down writing (DONE_WRITING) and read all the server sent -> orderly close
    # (TCP: FIN), and DONE_WRITING stays
    struct.pack_into("<I", cc.tx, OFF_CONN_FLAGS, CONN_DONE_WRITING)
    b.s.close()
    cc.close()
    s = d.stats(lambda s: s["smcd"]["clients"] == 1)
    f_conn, f_reader = u32(sc.rx, OFF_CONN_FLAGS), u32(sc.tx, OFF_READER_FLAGS)
    check(f_conn == CONN_DONE_WRITING | CONN_CLOSED,
          f"death with nothing unread: CLOSED (no ABORT) added to conn_flags of the survivor's rx DMB ({f_conn:#x})")
    check(f_reader == CONN_CLOSED, f"death with nothing unread: CLOSED in reader_flags of the dead one's rx DMB ({f_reader:#x})")
    sc.x.settimeout(2)
    try:
        hup = sc.x.recv(1) == b""
    except OSError:
        hup = True
    check(hup, "death: the survivor's X sees EOF/HUP")
    a.close_conn(srv["id"])
    sc.close()
    s = d.stats(lambda s: s["pool"]["in_use"] == 0 and s["pool"]["pending_clear"] == 0)
    check(s["pool"]["in_use"] == 0 and s["smcd"]["conns_closed"] == 2 and s["smcd"]["conns_aborted"] == 0 and
          s["smcd"]["conns_current"] == 0,
          f"death with nothing unread: buffers back (in_use {s['pool']['in_use']}), counted closed "
          f"({s['smcd']['conns_closed']}/{s['smcd']['conns_aborted']})")

    # client death with data unread (TCP: RST): the server wrote, b2 never read
    b2 = Client(d.sock, version=version)
    info, fds = b2.connect(("127.0.0.1", port))
    t, _, data, sfds = recv_msg(chan)
    srv = parse_conn(data)
    cc = Conn(info, fds, {})
    sc = Conn(srv, sfds, maps_a)
    sc.tx[DMB_HDR_LEN:DMB_HDR_LEN + 5] = b"unrd!"
    struct.pack_into("<Q", sc.tx, OFF_PROD, 5)
    b2.s.close()
    cc.close()
    s = d.stats(lambda s: s["smcd"]["clients"] == 1)
    check(u32(sc.rx, OFF_CONN_FLAGS) == CONN_ABORT,
          f"death with data unread: ABORT in conn_flags of the survivor's rx DMB ({u32(sc.rx, OFF_CONN_FLAGS):#x})")
    check(u32(sc.tx, OFF_READER_FLAGS) == CONN_ABORT, "death with data unread: ABORT in reader_flags of the dead one's rx DMB")
    a.close_conn(srv["id"])
    sc.close()
    s = d.stats(lambda s: s["pool"]["in_use"] == 0 and s["pool"]["pending_clear"] == 0)
    check(s["pool"]["in_use"] == 0 and s["smcd"]["conns_aborted"] == 1 and s["smcd"]["conns_current"] == 0,
          f"death with data unread: buffers back (in_use {s['pool']['in_use']}), conns_aborted {s['smcd']['conns_aborted']}")

    # fallbacks (no local SMC listener: see no_smc_ok)
    nosmc = []  # the TCP fallbacks of CONNECTs without a listener, for the stats

    def no_listener(info, what):
        check(no_smc_ok(info, version), f"{what}: mode {info['mode']}, reason {info['reason']:#x}")
        if info["mode"] == MODE_TCP:
            nosmc.append(info["reason"])

    b = Client(d.sock, version=version)
    free_port = tcp_listener().getsockname()[1]
    info, fds = b.connect(("127.0.0.1", free_port))
    check(not fds, f"no listener: no fds ({len(fds)})")
    no_listener(info, "no listener: TCP fallback PEERNOSMC")
    info, fds = b.connect(("192.0.2.1", port))
    no_listener(info, "other host's address: PEERNOSMC")

    # backlog: 1 -> 2 queued (Linux: full when more than backlog are queued)
    tcp2 = tcp_listener()
    lid2, chan2, _ = a.listen(tcp2, backlog=1)
    port2 = tcp2.getsockname()[1]
    got = [b.connect(("127.0.0.1", port2)) for _ in range(3)]
    modes = [(i["mode"], i["reason"]) for i, _ in got]
    check(modes[0][0] == MODE_SMCD and modes[1][0] == MODE_SMCD and modes[2] == (MODE_TCP, DECL_PEERDECL),
          f"accept queue full: PEERDECL ({modes})")
    for i, f in got:
        for fd in f:
            os.close(fd)
    t, _, data, sfds = recv_msg(chan2)  # accept one
    for fd in sfds:
        os.close(fd)
    info, fds = b.connect(("127.0.0.1", port2))
    check(info["mode"] == MODE_SMCD, "after one accept there is room again")
    for fd in fds:
        os.close(fd)

    # UNLISTEN
    seq = a.next()
    t, rseq, _, _ = a.request(a.hdr(UNLISTEN, seq) + struct.pack("<Q", lid2))
    check(t == OK and rseq == seq, "UNLISTEN -> OK")
    info, fds = b.connect(("127.0.0.1", port2))
    no_listener(info, "after UNLISTEN: PEERNOSMC")
    chan2.close()

    # wildcard listeners
    tcp3 = tcp_listener("0.0.0.0")
    lid3, chan3, _ = a.listen(tcp3)
    port3 = tcp3.getsockname()[1]
    info, fds = b.connect(("127.0.0.2", port3))
    check(info["mode"] == MODE_SMCD, "0.0.0.0 listener serves 127.0.0.2")
    t, _, data, sfds = recv_msg(chan3)
    check(parse_conn(data)["local"] == (socket.AF_INET, "127.0.0.2", port3), "NEW_CONN local = the address dialled")
    for fd in fds + sfds:
        os.close(fd)
    try:
        tcp6 = tcp_listener("::", v6only=False)
        lid6, chan6, _ = a.listen(tcp6)
        port6 = tcp6.getsockname()[1]
        info, fds = b.connect(("127.0.0.1", port6))
        t, _, data, sfds = recv_msg(chan6)
        n6 = parse_conn(data)
        check(info["mode"] == MODE_SMCD and n6["local"] == (socket.AF_INET6, "::ffff:127.0.0.1", port6),
              f"[::] listener serves IPv4 as v4-mapped ({n6['local']})")
        for fd in fds + sfds:
            os.close(fd)
        info, fds = b.connect(("::1", port6), src=("::1", 40001))
        check(info["mode"] == MODE_SMCD, "[::] listener serves ::1")
        t, _, data, sfds = recv_msg(chan6)
        for fd in fds + sfds:
            os.close(fd)
        tcp7 = tcp_listener("::", v6only=True)
        lid7, chan7, _ = a.listen(tcp7)
        info, fds = b.connect(("127.0.0.1", tcp7.getsockname()[1]))
        no_listener(info, "v6only [::] listener does not serve IPv4")
    except OSError as e:
        print(f"skip IPv6 checks: {e}")

    # SO_REUSEPORT: several listeners on one address share connections round robin
    r1 = socket.socket()
    r1.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    r1.bind(("127.0.0.1", 0))
    r1.listen(8)
    r2 = socket.socket()
    r2.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    r2.bind(r1.getsockname())
    r2.listen(8)
    _, rc1, _ = a.listen(r1)
    _, rc2, _ = a.listen(r2)
    connect_n(b, r1.getsockname(), 4)
    counts = [drain_queue(ch) for ch in (rc1, rc2)]
    check(counts == [2, 2], f"SO_REUSEPORT listeners get connections round robin ({counts})")

    # the same socket registered again (a new image after an exec, nginx's binary
    # upgrade): the newest registration gets the connections; the older one, whose
    # holders may never accept again, gets none (but stays until its channel closes)
    tcp5 = tcp_listener()
    _, ch5a, _ = a.listen(tcp5)
    _, ch5b, _ = b.listen(tcp5)
    connect_n(a, tcp5.getsockname(), 3)
    counts = [drain_queue(ch) for ch in (ch5a, ch5b)]
    check(counts == [0, 3], f"a socket registered again: the new listener gets every connection ({counts})")
    # the newer registration goes (its process exited): the older one, still held,
    # gets the connections again (not TCP)
    ch5b.close()
    time.sleep(0.2)
    info, fds = a.connect(tcp5.getsockname())
    for fd in fds:
        os.close(fd)
    check(info["mode"] == MODE_SMCD and drain_queue(ch5a) == 1,
          f"... and when it goes, the older registration gets them again (mode {info['mode']})")

    # listener channel HUP removes the listener
    tcp4 = tcp_listener()
    lid4, chan4, _ = a.listen(tcp4)
    chan4.close()
    time.sleep(0.1)
    info, fds = b.connect(("127.0.0.1", tcp4.getsockname()[1]))
    no_listener(info, "closing the accept channel removes the listener")

    # ---- malformed messages ----
    hs0 = d.stats()["smcd"]["handshake_errors"]
    devnull = os.open("/dev/null", os.O_RDONLY)
    csock = tcp_for(("127.0.0.1", port))  # what a version-3 CONNECT carries
    cfds = [csock.fileno()] if version >= 3 else []
    conn_body = addr("127.0.0.1", port) + addr("127.0.0.1", 1) + bytes(8)
    c = Client(d.sock, do_hello=False)
    r = c.expect_error(hdr(CONNECT, 7, version=version) + conn_body, cfds)
    check(r and r[0] == -errno.EPROTO, f"CONNECT (version {version}) before HELLO -> ERROR EPROTO {r}")
    # smcd speaks versions VERSION_MIN..VERSION_MAX (ctl-proto.h)
    r = c.expect_error(hdr(HELLO, 8, version=VERSION_UNSUPPORTED) + struct.pack("<IIII", 1, VERSION_UNSUPPORTED, 0, 0))
    check(r and r[0] == -errno.EPROTONOSUPPORT, f"HELLO of version {VERSION_UNSUPPORTED} -> ERROR EPROTONOSUPPORT {r}")
    r = c.expect_error(hdr(HELLO, 9) + struct.pack("<IIII", VERSION_UNSUPPORTED, VERSION_UNSUPPORTED + 1, 0, 0))
    check(r and r[0] == -errno.EPROTONOSUPPORT,
          f"HELLO offering only versions {VERSION_UNSUPPORTED}..{VERSION_UNSUPPORTED + 1} -> EPROTONOSUPPORT {r}")
    t, _ = c.hello(VERSION_MIN, version, seq=10)
    check(t == HELLO_REPLY and c.version == version, f"HELLO after errors still works (version {c.version})")
    r = c.expect_error(hdr(HELLO, 11) + struct.pack("<IIII", 1, 1, 0, 0))
    check(r and r[0] == -errno.EALREADY, f"second HELLO -> ERROR {r}")
    other = 2 if version == 1 else 1
    r = c.expect_error(hdr(CONNECT, 12, version=other) + conn_body)
    check(r and r[0] == -errno.EPROTONOSUPPORT,
          f"version {other} message on a version-{version} connection -> ERROR EPROTONOSUPPORT {r}")
    r = c.expect_error(c.hdr(CONNECT, 13)[:8])
    check(r and r[0] == -errno.EBADMSG, f"short message (8 bytes) -> ERROR EBADMSG {r}")
    r = c.expect_error(c.hdr(CONNECT, 14, length=300) + bytes(284))
    check(r and r[0] == -errno.EBADMSG, f"oversized message (300 bytes) -> ERROR EBADMSG {r}")
    r = c.expect_error(c.hdr(99, 15, length=16))
    check(r and r[0] == -errno.EOPNOTSUPP, f"unknown type -> ERROR EOPNOTSUPP {r}")
    r = c.expect_error(c.hdr(HELLO_REPLY, 16) + bytes(16))
    check(r and r[0] == -errno.EOPNOTSUPP, f"reply type sent to smcd -> ERROR EOPNOTSUPP {r}")
    r = c.expect_error(c.hdr(CONNECT, 17, magic=0x12345678) + conn_body, cfds)
    check(r and r[0] == -errno.EBADMSG, f"bad magic -> ERROR EBADMSG {r}")
    r = c.expect_error(c.hdr(CONNECT, 18, length=SIZES[CONNECT] + 4) + conn_body + bytes(4), cfds)
    check(r and r[0] == -errno.EBADMSG, f"wrong length -> ERROR EBADMSG {r}")
    if version >= 3:
        r = c.expect_error(c.hdr(CONNECT, 19) + conn_body)
        check(r and r[0] == -errno.EBADF, f"version-3 CONNECT without its TCP socket -> ERROR EBADF {r}")
    else:
        r = c.expect_error(c.hdr(CONNECT, 19) + conn_body, [devnull])
        check(r and r[0] == -errno.EBADF, f"CONNECT with an fd -> ERROR EBADF {r}")
    r = c.expect_error(c.hdr(LISTEN, 20) + listen_body("127.0.0.1", port, 1, version))
    check(r and r[0] == -errno.EBADF, f"LISTEN without fd -> ERROR EBADF {r}")
    r = c.expect_error(c.hdr(LISTEN, 21) + listen_body("127.0.0.1", port, 1, version), [devnull])
    check(r and r[0] == -errno.ENOTSOCK, f"LISTEN with /dev/null -> ERROR ENOTSOCK {r}")
    plain = socket.socket()
    plain.bind(("127.0.0.1", 0))
    r = c.expect_error(c.hdr(LISTEN, 22) + listen_body("127.0.0.1", plain.getsockname()[1], 1, version),
                       [plain.fileno()])
    check(r and r[0] == -errno.EINVAL, f"LISTEN with a non-listening socket -> ERROR EINVAL {r}")
    r = c.expect_error(c.hdr(LISTEN, 23) + listen_body("127.0.0.1", port + 1 if port < 65535 else 1, 1, version),
                       [tcp.fileno()])
    check(r and r[0] == -errno.EADDRNOTAVAIL, f"LISTEN claiming another port -> ERROR EADDRNOTAVAIL {r}")
    r = c.expect_error(c.hdr(CLOSE, 24) + struct.pack("<QII", 0x1234567890, 0, 0))
    check(r and r[0] == -errno.ENOENT, f"CLOSE of an unknown id -> ERROR ENOENT {r}")
    r = c.expect_error(c.hdr(CLOSE, 25) + struct.pack("<QII", 0, 0, 0))
    check(r and r[0] == -errno.EBADMSG, f"CLOSE of id 0 -> ERROR EBADMSG {r}")
    r = c.expect_error(c.hdr(UNLISTEN, 26) + struct.pack("<Q", lid))
    check(r and r[0] == -errno.ENOENT, f"UNLISTEN of another client's listener -> ERROR ENOENT {r}")
    # another client's endpoint, same uid: allowed (a forked child closes what it
    # accepted from an inherited accept channel); the owner's CLOSE then is unknown
    info, fds = b.connect(("127.0.0.1", port))
    t, _, data, sfds = recv_msg(chan)
    c.close_conn(info["id"])
    r = c.expect_error(c.hdr(UNLISTEN, 27) + struct.pack("<Q", 99))  # a round trip: CLOSE is processed
    check(r and r[0] == -errno.ENOENT, f"CLOSE of a same-uid client's connection: no ERROR, next reply is the UNLISTEN's {r}")
    r = b.expect_error(b.hdr(CLOSE, 29) + struct.pack("<QII", info["id"], 0, 0))
    check(r and r[0] == -errno.ENOENT, f"... it is closed: the owner's own CLOSE -> ERROR ENOENT {r}")
    a.close_conn(parse_conn(data)["id"])
    for fd in fds + sfds:
        os.close(fd)
    os.close(devnull)
    csock.close()
    # still serving: the malformed client and the others
    info, fds = c.connect(("127.0.0.1", port))
    check(info["mode"] == MODE_SMCD, "after malformed messages the same client still gets SMC-D")
    t, _, data, sfds = recv_msg(chan)
    c.close_conn(info["id"])
    a.close_conn(parse_conn(data)["id"])
    for fd in fds + sfds:
        os.close(fd)
    r = c.expect_error(c.hdr(CLOSE, 28) + struct.pack("<QII", info["id"], 0, 0))
    check(r and r[0] == -errno.ENOENT, f"CLOSE of an already closed id -> ERROR ENOENT {r}")
    s = d.stats()
    check(s["smcd"]["handshake_errors"] - hs0 == 17, f"handshake_errors counted ({s['smcd']['handshake_errors'] - hs0})")
    check(s["smcd"]["close_unknown"] == 3,
          f"CLOSE of unknown / closed ids counted in close_unknown, not handshake_errors ({s['smcd']['close_unknown']})")
    fb = s["smcd"]["fallback"]
    check(fb.get("SMC_CLC_DECL_PEERNOSMC", 0) + fb.get("SMC_CLC_DECL_NOSMCRDEV", 0) >= len(nosmc) and
          (version >= 3 or len(nosmc) >= 4) and fb.get("SMC_CLC_DECL_PEERDECL", 0) == 1,
          f"fallbacks by reason {fb} (no-listener fallbacks seen: {len(nosmc)})")

    # a client that never reads its replies is disconnected, smcd does not block
    hog = Client(d.sock, version=version)
    hog.s.setblocking(False)
    sent, gone = 0, False
    deadline = time.time() + 10
    while not gone and time.time() < deadline:
        try:
            hog.s.send(hog.hdr(CLOSE, 1) + struct.pack("<QII", 1, 0, 0))
            sent += 1
        except BlockingIOError:
            time.sleep(0.001)
        except (BrokenPipeError, ConnectionResetError):
            gone = True
    check(gone, f"a client that floods requests and never reads replies is disconnected ({sent} requests)")
    c2 = Client(d.sock, version=version)
    check(c2.id is not None, "smcd still serves others")
    p2 = subprocess.run([binary, "--runtime-dir", d.rundir], capture_output=True, text=True, timeout=10)
    check(p2.returncode == 1 and "Another smcd" in p2.stderr, "a second smcd does not steal a live socket")
    s = d.stats(lambda s: s["smcd"]["clients"] == 4)
    check(s["smcd"]["clients"] == 4, f"clients counted right after the disconnect ({s['smcd']['clients']})")
    hog.s.close()

    # the clients go; the listeners of a stay while their accept channels are held
    # elsewhere (a daemonized server: listener_orphan), and go with the channels
    held = [ch for ch in (chan, chan3, locals().get("chan6"), locals().get("chan7"), rc1, rc2, ch5a)
            if ch is not None]
    for cl in (a, b, c, c2):
        cl.s.close()
    s = d.stats(lambda s: s["smcd"]["clients"] == 0)
    check(s["smcd"]["listeners"] == len(held),
          f"a gone client's listeners stay while their accept channels are open ({s['smcd']['listeners']} of {len(held)})")
    for ch in held:
        ch.close()
    # everything closed: no buffer left in use
    s = d.stats(lambda s: s["smcd"]["clients"] == 0 and s["smcd"]["listeners"] == 0 and s["pool"]["in_use"] == 0 and
                s["pool"]["pending_clear"] == 0)
    check(s["smcd"]["clients"] == 0 and s["smcd"]["listeners"] == 0 and s["pool"]["in_use"] == 0 and
          s["smcd"]["conns_current"] == 0,
          f"all clients gone: 0 listeners, 0 buffers in use ({s['smcd']['listeners']}, {s['pool']['in_use']}, "
          f"{s['smcd']['conns_current']})")


def smcr_msg(c, seq, role, reserved=0, sndbuf=0, rcvbuf=0, version=None, listener_id=None):
    """SMCR (v3, 40 bytes): role, reserved, sndbuf, rcvbuf, listener_id (role server:
    the SMC-R listener it accepted from, != 0; role client: 0). @listener_id None:
    0 for a client, a made-up id for a server (that no listener has)."""
    if listener_id is None:
        listener_id = 0 if role == ROLE_CLIENT else 0x5EC0DE0000000001
    return (hdr(SMCR, seq, version=version or c.version) +
            struct.pack("<IIIIQ", role, reserved, sndbuf, rcvbuf, listener_id))


def tcp_pair():
    """A plain TCP connection on 127.0.0.1 that no smcd knows: (client, server)."""
    lsn = tcp_listener()
    cl = socket.create_connection(lsn.getsockname())
    sv, _ = lsn.accept()
    lsn.close()
    return cl, sv


def nothing_to_read(sock, wait=0.2):
    sock.settimeout(wait)
    try:
        sock.recv(64, socket.MSG_PEEK)  # data, or b"" at EOF
    except (BlockingIOError, TimeoutError, socket.timeout):
        return True
    return False


def nfds_ok(info, fds):
    """X, Y, then a memfd for each buffer with BUF_FD (ctl-proto.h)."""
    return len(fds) == 2 + bool(info["rx"][2] & BUF_FD) + bool(info["tx"][2] & BUF_FD)


def run_version_checks(binary):
    """HELLO's negotiation of versions 1..6, what is new in each version (LISTEN with
    buffer sizes and a 24-byte LISTEN_REPLY in v2, CONNECT with its TCP socket and a
    32-byte LISTEN_REPLY in v3), clients of different versions connecting to each other,
    and the SMCR request (v3) on TCP connections whose peer sent no SMC option."""
    rundir = tempfile.mkdtemp(prefix="smcd-raw-versions-")
    tmpdirs.append(rundir)
    d = Smcd(binary, rundir)
    try:
        _run_version_checks(d)
    finally:
        rc = d.stop()
    check(rc == 0, f"version checks: smcd exits 0 ({rc})")


def _run_version_checks(d):
    devnull = os.open("/dev/null", os.O_RDONLY)

    # HELLO: the highest version both speak, in the body and in hdr.version
    for lo, hi, want in ((1, 1, 1), (1, 2, 2), (1, 3, 3), (2, 3, 3), (3, 3, 3), (3, 4, 4), (4, 4, 4),
                         (2, 9, VERSION_MAX), (1, 0xFFFFFFFF, VERSION_MAX),
                         (VERSION_UNSUPPORTED, VERSION_UNSUPPORTED, None), (VERSION_UNSUPPORTED, 9, None),
                         (0, 0, None)):
        c = Client(d.sock, do_hello=False)
        t, data = c.hello(lo, hi)
        if want:
            check(t == HELLO_REPLY and c.version == want and msg_version(data) == want,
                  f"HELLO {lo}..{hi} -> HELLO_REPLY version {c.version if t == HELLO_REPLY else t}")
        else:
            err = parse_error(data) if t == ERROR else t
            check(t == ERROR and err[0] == -errno.EPROTONOSUPPORT and msg_version(data) == VERSION_MIN,
                  f"HELLO {lo}..{hi} -> ERROR EPROTONOSUPPORT of version {VERSION_MIN} ({err})")
        c.s.close()

    c1 = Client(d.sock, version=1)
    c2 = Client(d.sock, version=2)
    c3 = Client(d.sock, version=3)

    # LISTEN_REPLY: 24 bytes in v1 and v2, 32 in v3 with flags (SMC_CTL_LISTEN_SMCR
    # when smcd has a RoCE device and marked the listening socket) and reserved 0
    chans, lids, ports, tcps = {}, {}, {}, {}
    for c in (c1, c2, c3):
        tcp = tcp_listener()
        seq = c.next()
        send(c.s, c.hdr(LISTEN, seq) + listen_body("127.0.0.1", tcp.getsockname()[1], 8, c.version,
                                                   131072 if c.version >= 2 else 0, 0), [tcp.fileno()])
        t, rseq, data, fds = recv_msg(c.s, version=c.version)
        want = SIZES_V[c.version][LISTEN_REPLY]
        check(t == LISTEN_REPLY and rseq == seq and len(data) == want and len(fds) == 1,
              f"v{c.version} LISTEN -> LISTEN_REPLY of {len(data)} bytes (want {want}), {len(fds)} fd")
        if c.version >= 3:
            flags, reserved = struct.unpack_from("<II", data, 24)
            why = "SMC_CTL_LISTEN_SMCR: smcd has a RoCE device" if flags else "no SMC-R: this host has no RoCE device"
            check(flags in (0, LISTEN_SMCR) and reserved == 0, f"v3 LISTEN_REPLY flags {flags:#x} ({why}), reserved {reserved}")
        lids[c.version] = struct.unpack_from("<Q", data, 16)[0]
        chans[c.version] = socket.socket(fileno=fds[0])
        ports[c.version] = tcp.getsockname()[1]
        tcps[c.version] = tcp  # keep the listening socket open

    # every client version connects to every listener version: CONNECT_REPLY in the
    # connecting client's version, NEW_CONN in the listener's (v3: with its TCP socket)
    for c in (c1, c2, c3):
        for lv in (1, 2, 3):
            info, fds = c.connect(("127.0.0.1", ports[lv]))
            t, _, data, sfds = recv_msg(chans[lv], version=lv)
            srv = parse_conn(data)
            ok = (info["mode"] == MODE_SMCD and info["version"] == c.version and
                  info["len"] == SIZES_V[c.version][CONNECT_REPLY] and nfds_ok(info, fds) and
                  t == NEW_CONN and srv["mode"] == MODE_SMCD and srv["len"] == SIZES_V[lv][NEW_CONN] and
                  nfds_ok(srv, sfds) and srv["tx"][0] == info["rx"][0] and
                  (c.version < 2 or info["params"] is not None) and (lv < 2 or srv["params"] is not None))
            check(ok, f"v{c.version} CONNECT to a v{lv} listener: SMC-D, CONNECT_REPLY v{info['version']} "
                      f"{info['len']} bytes, NEW_CONN v{srv['version']} {srv['len']} bytes")
            c.close_conn(info["id"])
            [x for x in (c1, c2, c3) if x.version == lv][0].close_conn(srv["id"])
            for fd in fds + sfds:
                os.close(fd)

    # v3 CONNECT: exactly its one TCP socket
    port = ports[3]
    body = addr("127.0.0.1", port) + addr("127.0.0.1", 0) + bytes(8)
    r = c3.expect_error(c3.hdr(CONNECT, c3.next()) + body)
    check(r and r[0] == -errno.EBADF, f"v3 CONNECT without its TCP socket -> ERROR EBADF {r}")
    t1, t2 = socket.socket(), socket.socket()
    r = c3.expect_error(c3.hdr(CONNECT, c3.next()) + body, [t1.fileno(), t2.fileno()])
    check(r and r[0] == -errno.EBADF, f"v3 CONNECT with two sockets -> ERROR EBADF {r}")
    # v1 / v2 CONNECT: no fd
    r = c2.expect_error(c2.hdr(CONNECT, c2.next()) + body, [t1.fileno()])
    check(r and r[0] == -errno.EBADF, f"v2 CONNECT with a TCP socket -> ERROR EBADF {r}")
    t1.close()
    t2.close()
    # a v3 CONNECT with its socket to a local port without an SMC listener
    free = tcp_listener()
    info, fds = c3.connect(free.getsockname())
    name = {DECL_PEERNOSMC: "PEERNOSMC", DECL_NOSMCRDEV: "NOSMCRDEV"}.get(info["reason"], "?")
    check(no_smc_ok(info, 3) and not fds,
          f"v3 CONNECT to a port without an SMC listener: mode {info['mode']} reason {info['reason']:#x} ({name}), "
          f"params {info['params']}")
    free.close()

    # SMCR on a v1 / v2 connection: a type those versions do not have
    cl, sv = tcp_pair()
    r = c2.expect_error(smcr_msg(c2, c2.next(), ROLE_CLIENT, version=2), [cl.fileno()])
    check(r and r[0] == -errno.EOPNOTSUPP, f"SMCR of version 2 -> ERROR EOPNOTSUPP {r}")
    r = c1.expect_error(smcr_msg(c1, c1.next(), ROLE_CLIENT, version=1), [cl.fileno()])
    check(r and r[0] == -errno.EOPNOTSUPP, f"SMCR of version 1 -> ERROR EOPNOTSUPP {r}")
    r = c2.expect_error(smcr_msg(c2, c2.next(), ROLE_CLIENT, version=3), [cl.fileno()])
    check(r and r[0] == -errno.EPROTONOSUPPORT, f"version-3 SMCR on a version-2 connection -> ERROR EPROTONOSUPPORT {r}")
    # malformed SMCR
    def old_layout(seq):
        """The 32-byte SMCR of before listener_id, its header saying 32."""
        return HDR.pack(MAGIC, 3, SMCR, 32, seq) + struct.pack("<IIII", ROLE_CLIENT, 0, 0, 0)

    for what, msg, fds, want in (
            ("role 2", smcr_msg(c3, c3.next(), 2), [cl.fileno()], errno.EBADMSG),
            ("role 2 with a listener id", smcr_msg(c3, c3.next(), 2, listener_id=lids[3]), [cl.fileno()],
             errno.EBADMSG),
            ("reserved 1", smcr_msg(c3, c3.next(), ROLE_CLIENT, reserved=1), [cl.fileno()], errno.EBADMSG),
            ("(server) reserved 1", smcr_msg(c3, c3.next(), ROLE_SERVER, reserved=1, listener_id=lids[3]),
             [sv.fileno()], errno.EBADMSG),
            ("(server) without a listener id", smcr_msg(c3, c3.next(), ROLE_SERVER, listener_id=0), [sv.fileno()],
             errno.EBADMSG),
            ("(client) with a listener id", smcr_msg(c3, c3.next(), ROLE_CLIENT, listener_id=lids[3]),
             [cl.fileno()], errno.EBADMSG),
            ("without its socket", smcr_msg(c3, c3.next(), ROLE_CLIENT), [], errno.EBADF),
            ("(server) without its socket", smcr_msg(c3, c3.next(), ROLE_SERVER, listener_id=lids[3]), [],
             errno.EBADF),
            ("with two sockets", smcr_msg(c3, c3.next(), ROLE_CLIENT), [cl.fileno(), sv.fileno()], errno.EBADF),
            ("short", smcr_msg(c3, c3.next(), ROLE_CLIENT)[:36], [cl.fileno()], errno.EBADMSG),
            ("of the old 32-byte layout", old_layout(c3.next()), [cl.fileno()], errno.EBADMSG),
            ("with /dev/null", smcr_msg(c3, c3.next(), ROLE_CLIENT), [devnull], errno.EINVAL),
            ("(server) with /dev/null", smcr_msg(c3, c3.next(), ROLE_SERVER, listener_id=lids[3]), [devnull],
             errno.EINVAL)):
        r = c3.expect_error(msg, fds)
        check(r and r[0] == -want, f"SMCR {what} -> ERROR {errno.errorcode[want]} {r}")
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    r = c3.expect_error(smcr_msg(c3, c3.next(), ROLE_CLIENT), [u.fileno()])
    check(r and r[0] == -errno.EINVAL, f"SMCR with a UDP socket -> ERROR EINVAL {r}")
    u.close()
    check(nothing_to_read(sv) and nothing_to_read(cl), "... no byte reached either end of the TCP connection")

    # SMCR on a connection whose peer sent no SMC TCP option, as the client and as the
    # server: CONNECT_REPLY mode TCP, PEERNOSMC (or NOSMCRDEV: smcd has no RoCE device),
    # no fds, not a byte written; smcd closed its copy of the socket. smcd looks at
    # the peer's option before the server's listener id (smcd/smcr.c client_handle_smcr):
    # the same answer for c3's own v3 listener, for a listener id nobody has and for
    # the listener of a v2 client (not SMC-R, not c3's). The ERROR ENOENT of an id that
    # is not an SMC-R listener of the uid needs a peer that sent the option (RoCE):
    # not reachable here.
    for role, mine, peer, lid, lname in ((ROLE_CLIENT, cl, sv, 0, ""),
                                         (ROLE_SERVER, sv, cl, lids[3], ", c3's listener"),
                                         (ROLE_SERVER, sv, cl, 0x5EC0DE0000000001, ", no such listener"),
                                         (ROLE_SERVER, sv, cl, lids[2], ", a v2 client's listener")):
        name = ("client" if role == ROLE_CLIENT else "server") + lname
        seq = c3.next()
        t, rseq, data, fds = c3.request(smcr_msg(c3, seq, role, sndbuf=65536, rcvbuf=65536, listener_id=lid),
                                        [mine.fileno()])
        info = parse_conn(data) if t == CONNECT_REPLY else None
        why = {DECL_PEERNOSMC: "PEERNOSMC", DECL_NOSMCRDEV: "NOSMCRDEV (this host has no RoCE device)"}
        check(info and rseq == seq and info["mode"] == MODE_TCP and info["reason"] in why and not fds and
              info["id"] == 0 and info["params"] == (0, 0) and info["version"] == 3,
              f"SMCR ({name}) without the peer's SMC option -> CONNECT_REPLY TCP "
              f"{why.get(info['reason'], hex(info['reason'])) if info else parse_error(data) if t == ERROR else t}")
        check(nothing_to_read(peer), f"SMCR ({name}): no CLC byte reached the peer")
        mine.sendall(b"ping")
        peer.settimeout(2)
        check(peer.recv(4) == b"ping", f"SMCR ({name}): the TCP connection still carries data")
    cl.close()
    sv.settimeout(2)
    try:
        eof = sv.recv(1) == b""
    except OSError:
        eof = False
    check(eof, "SMCR: smcd kept no copy of the socket (closing it ends the TCP connection)")
    sv.close()

    # still serving after all that
    info, fds = c3.connect(("127.0.0.1", port))
    t, _, data, sfds = recv_msg(chans[3], version=3)
    check(info["mode"] == MODE_SMCD and t == NEW_CONN, "after the version checks: SMC-D as before")
    c3.close_conn(info["id"])
    c3.close_conn(parse_conn(data)["id"])
    for fd in fds + sfds:
        os.close(fd)
    os.close(devnull)
    for c in (c1, c2, c3):
        c.s.close()
    for v in chans:
        tcps[v].close()
        chans[v].close()
    s = d.stats(lambda s: s["smcd"]["clients"] == 0 and s["pool"]["in_use"] == 0)
    check(s["smcd"]["clients"] == 0 and s["smcd"]["conns_current"] == 0 and s["pool"]["in_use"] == 0,
          f"version checks: nothing left ({s['smcd']['clients']}, {s['smcd']['conns_current']}, {s['pool']['in_use']})")


def run_limit_checks(binary):
    conf = os.path.join(tempfile.mkdtemp(prefix="smcd-raw-conf-"), "smcd.conf")
    tmpdirs.append(os.path.dirname(conf))
    with open(conf, "w") as f:
        f.write("# limits\n  max-conns-per-uid = 3  \nbuf-clear=create\n")
    for opt, reason, name in ((["--config", conf], DECL_MAXCONNERR, "MAXCONNERR"),
                              (["--max-buf-per-uid", "128K"], DECL_MAX_DMB, "MAX_DMB")):
        rundir = tempfile.mkdtemp(prefix="smcd-raw-limit-")
        tmpdirs.append(rundir)
        d = Smcd(binary, rundir, opt)
        try:
            a = Client(d.sock)
            tcp = tcp_listener()
            lid, chan, _ = a.listen(tcp)
            port = tcp.getsockname()[1]
            # one local connection of this uid = 2 endpoints, 2 x 64 KiB
            i1, f1 = a.connect(("127.0.0.1", port))
            i2, f2 = a.connect(("127.0.0.1", port))
            check(i1["mode"] == MODE_SMCD and i2["mode"] == MODE_TCP and i2["reason"] == reason,
                  f"{' '.join(opt)}: second connection falls back with {name} ({i2['reason']:#x})")
            t, _, data, sfds = recv_msg(chan)
            a.close_conn(i1["id"])
            a.close_conn(parse_conn(data)["id"])
            for fd in f1 + sfds:
                os.close(fd)
            i3, f3 = a.connect(("127.0.0.1", port))
            check(i3["mode"] == MODE_SMCD, f"{' '.join(opt)}: after closing, SMC-D again")
            for fd in f3:
                os.close(fd)
            a.s.close()
        finally:
            d.stop()


def run_shared_checks(binary):
    """Pre-forking servers: a CLOSE from another client of the owner's uid is
    accepted (a forked child closes what it accepted from the inherited accept
    channel), one of another uid is not; after a CLOSE by a non-owner the
    listener's NEW_CONNs always carry memfds."""
    rundir = tempfile.mkdtemp(prefix="smcd-raw-shared-")
    tmpdirs.append(rundir)
    os.chmod(rundir, 0o755)
    d = Smcd(binary, rundir)
    try:
        a = Client(d.sock)   # the listening "parent"
        b = Client(d.sock)   # the connecting side
        a2 = Client(d.sock)  # a "forked child" of a: same uid, own control connection
        tcp = tcp_listener()
        port = tcp.getsockname()[1]
        lid, chan, _ = a.listen(tcp)
        hs0 = d.stats()["smcd"]["handshake_errors"]

        # a2 closes both endpoints of a connection it does not own
        info, fds = b.connect(("127.0.0.1", port))
        t, _, data, sfds = recv_msg(chan)
        srv = parse_conn(data)
        s = d.stats(lambda s: s["smcd"]["conns_current"] == 1)
        check(s["smcd"]["conns_current"] == 1 and s["pool"]["in_use"] == 2, "one connection open")
        a2.close_conn(srv["id"])
        a2.close_conn(info["id"])
        r = a2.expect_error(hdr(UNLISTEN, 1) + struct.pack("<Q", 99))  # a round trip: CLOSEs processed
        check(r and r[0] == -errno.ENOENT, f"same uid, other client: CLOSE of both endpoints gets no ERROR {r}")
        s = d.stats(lambda s: s["pool"]["in_use"] == 0 and s["pool"]["pending_clear"] == 0)
        sd = s["smcd"]
        check(sd["conns_current"] == 0 and sd["conns_client_current"] == 0 and sd["conns_server_current"] == 0 and
              s["pool"]["in_use"] == 0 and sd["conns_closed"] == 1,
              f"... counters back to 0 (conns_current {sd['conns_current']}, in_use {s['pool']['in_use']}, "
              f"conns_closed {sd['conns_closed']})")
        check(sd["handshake_errors"] == hs0 and sd["close_unknown"] == 0,
              f"... no handshake error, no close_unknown ({sd['handshake_errors'] - hs0}, {sd['close_unknown']})")
        for fd in fds + sfds:
            os.close(fd)

        # another uid cannot close it
        if os.getuid() == 0:
            info, fds = b.connect(("127.0.0.1", port))
            t, _, data, sfds = recv_msg(chan)
            srv = parse_conn(data)
            def close_theirs():
                c = Client(d.sock)
                out = []
                for cid in (srv["id"], info["id"]):
                    e = c.expect_error(hdr(CLOSE, c.next()) + struct.pack("<QII", cid, CLOSE_ABORT, 0))
                    out.append(b"%d" % e[0] if e else b"none")
                return b" ".join(out)
            res = as_uid(close_theirs)
            want = b"%d %d" % (-errno.ENOENT, -errno.ENOENT)
            check(res == want, f"uid 65534 cannot CLOSE root's endpoints: ERROR ENOENT ({res})")
            s = d.stats(lambda s: s["smcd"]["clients"] == 3)
            sd = s["smcd"]
            check(sd["conns_current"] == 1 and sd["conns_client_current"] == 1 and sd["conns_server_current"] == 1 and
                  s["pool"]["in_use"] == 2,
                  f"... the connection stays open (conns_current {sd['conns_current']}, in_use {s['pool']['in_use']})")
            check(sd["close_unknown"] == 2 and sd["handshake_errors"] == hs0,
                  f"... counted in close_unknown ({sd['close_unknown']}), not handshake_errors")
            a.close_conn(srv["id"])
            b.close_conn(info["id"])
            for fd in fds + sfds:
                os.close(fd)
            d.stats(lambda s: s["pool"]["in_use"] == 0 and s["pool"]["pending_clear"] == 0)
        else:
            print("skip other-uid CLOSE check (needs root to switch uid)")

        # NEW_CONN memfds: the owner closes its server endpoint -> it has the buffers
        # mapped, and a NEW_CONN of reused buffers still carries both memfds (any
        # process holding the channel may read it) ...
        tcp = tcp_listener()
        port = tcp.getsockname()[1]
        lid, chan, _ = a.listen(tcp)
        info, fds = b.connect(("127.0.0.1", port))
        t, _, data, sfds = recv_msg(chan)
        srv = parse_conn(data)
        owned = {srv["rx"][0], srv["tx"][0]}
        a.close_conn(srv["id"])
        b.close_conn(info["id"])
        for fd in fds + sfds:
            os.close(fd)
        d.stats(lambda s: s["pool"]["in_use"] == 0 and s["pool"]["pending_clear"] == 0)
        info, fds = b.connect(("127.0.0.1", port))
        t, _, data, sfds = recv_msg(chan)
        srv = parse_conn(data)
        reused = {srv["rx"][0], srv["tx"][0]} == owned
        check(reused and len(sfds) == 4,
              f"owner-only listener: NEW_CONN of buffers its client mapped has both memfds (reused {reused}, {len(sfds)} fds)")
        # ... also after another client (a "child" that read this NEW_CONN) closes it
        a2.close_conn(srv["id"])
        b.close_conn(info["id"])
        for fd in fds + sfds:
            os.close(fd)
        d.stats(lambda s: s["pool"]["in_use"] == 0 and s["pool"]["pending_clear"] == 0)
        for i in range(2):
            info, fds = b.connect(("127.0.0.1", port))
            t, _, data, sfds = recv_msg(chan)
            srv = parse_conn(data)
            reused = {srv["rx"][0], srv["tx"][0]} == owned
            flags = srv["rx"][2] & srv["tx"][2] & BUF_FD
            check(reused and len(sfds) == 4 and flags,
                  f"shared listener: NEW_CONN #{i + 1} carries both memfds although its owner has them mapped "
                  f"(reused {reused}, {len(sfds)} fds)")
            (a if i else a2).close_conn(srv["id"])
            b.close_conn(info["id"])
            for fd in fds + sfds:
                os.close(fd)
            d.stats(lambda s: s["pool"]["in_use"] == 0 and s["pool"]["pending_clear"] == 0)
        # a client's own CONNECT_REPLY still skips buffers it has mapped
        info, fds = a2.connect(("127.0.0.1", port))
        t, _, data, sfds = recv_msg(chan)
        check(info["mode"] == MODE_SMCD and len(fds) == 2,
              f"CONNECT_REPLY to the closing client skips the buffers it proved mapped ({len(fds)} fds)")
        a2.close_conn(info["id"])
        a.close_conn(parse_conn(data)["id"])
        for fd in fds + sfds:
            os.close(fd)
        for cl in (a, b, a2):
            cl.s.close()
        s = d.stats(lambda s: s["smcd"]["clients"] == 0 and s["pool"]["in_use"] == 0)
        check(s["smcd"]["conns_current"] == 0 and s["pool"]["in_use"] == 0 and s["smcd"]["conns_aborted"] == 0,
              f"shared checks: nothing left ({s['smcd']['conns_current']}, {s['pool']['in_use']}, "
              f"aborted {s['smcd']['conns_aborted']})")
    finally:
        d.stop()


def run_prepopulate_check(binary):
    rundir = tempfile.mkdtemp(prefix="smcd-raw-prepop-")
    tmpdirs.append(rundir)
    d = Smcd(binary, rundir, ["--prepopulate", "8"])
    try:
        s = d.stats()
        check(s["pool"]["alloc"] == 8 and s["pool"]["free_count_by_class"][3] == 8,
              f"--prepopulate 8: 8 fresh 128 KiB buffers ({s['pool']['alloc']}, {s['pool']['free_count_by_class']})")
        # (version 2 and later: both ends get the default rmem, the pre-populated class)
        a = Client(d.sock, version=VERSION_MAX)
        tcp = tcp_listener()
        lid, chan, _ = a.listen(tcp)
        info, fds = a.connect(tcp.getsockname())
        for fd in fds:
            os.close(fd)
        s = d.stats()
        check(s["pool"]["alloc"] == 8 and s["pool"]["in_use"] == 2, f"a connection takes pre-populated buffers ({s['pool']})")
        a.s.close()
    finally:
        d.stop()


def run_stall_check(binary):
    """A listener whose queue does not move for 3 s (its holders do not accept from
    it): new connections go over TCP (PEERDECL) until one is accepted."""
    print("---- a listener nobody accepts from")
    rundir = tempfile.mkdtemp(prefix="smcd-raw-stall-")
    tmpdirs.append(rundir)
    d = Smcd(binary, rundir)
    try:
        a = Client(d.sock)
        tcp = tcp_listener()
        lid, chan, _ = a.listen(tcp, backlog=64)
        keep = []
        modes = connect_n(a, tcp.getsockname(), 2, keep)
        check(modes == [MODE_SMCD, MODE_SMCD], f"queued while the queue is young: SMC-D ({modes})")
        time.sleep(3.3)
        info, fds = a.connect(tcp.getsockname())
        keep += fds
        check(info["mode"] == MODE_TCP and info["reason"] == DECL_PEERDECL,
              f"nothing accepted for 3 s: the next connection is TCP, PEERDECL ({info['mode']}, {info['reason']:#x})")
        t, _, data, sfds = recv_msg(chan)  # one accept
        for fd in sfds:
            os.close(fd)
        info, fds = a.connect(tcp.getsockname())
        keep += fds
        check(info["mode"] == MODE_SMCD, f"after an accept the listener is SMC again ({info['mode']})")
        for fd in keep:
            os.close(fd)
        chan.close()
        a.s.close()
    finally:
        d.stop()


def run_option_checks(binary):
    def run(args):
        p = subprocess.run([binary] + args, capture_output=True, text=True, timeout=10)
        return p.returncode, p.stderr

    rc, err = run(["--max-buf-per-uid", "12Q"])
    check(rc == 2 and "max-buf-per-uid" in err, f"bad size -> exit 2 ({rc}: {err.strip()})")
    rc, err = run(["--buf-clear", "never"])
    check(rc == 2 and "buf-clear" in err, f"bad buf-clear -> exit 2 ({rc})")
    rc, err = run(["--bogus"])
    check(rc == 2, f"unknown option -> exit 2 ({rc})")
    rc, out = subprocess.run([binary, "--version"], capture_output=True, text=True).returncode, None
    check(rc == 0, "--version")
    with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as f:
        f.write("# comment\nmax-conns-per-uid = 10\n\nprepopulate=oops\n")
    rc, err = run(["--config", f.name])
    check(rc == 2 and f"{f.name}:4" in err, f"bad config line -> exit 2 naming file:line ({err.strip()})")
    os.unlink(f.name)
    rc, err = run(["--config", tempfile.gettempdir()])
    check(rc == 2 and "not a regular file" in err, f"--config on a directory -> exit 2 ({rc}: {err.strip()})")
    t0 = time.time()
    rc, err = run(["--config", "/dev/zero"])
    check(rc == 2 and time.time() - t0 < 5, f"--config /dev/zero fails fast, exit 2 ({rc}: {err.strip()})")
    for name, content, want in (("long", b"# " + b"x" * 2000 + b"\n", ":1: line too long"),
                                ("nul", b"verbose = no\nbuf-clear = rel\0ease\n", ":2: line contains a NUL"),
                                ("big", b"\n" * (65 << 10), "larger than")):
        with tempfile.NamedTemporaryFile("wb", suffix=".conf", delete=False) as f:
            f.write(content)
        rc, err = run(["--config", f.name])
        check(rc == 2 and want in err, f"config file {name}: exit 2 with '{want}' ({rc}: {err.strip()})")
        os.unlink(f.name)
    with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as f:
        f.write("max-clients-per-uid = x\n")
    rc, err = run(["--config", f.name])
    check(rc == 2 and "max-clients-per-uid" in err, f"bad max-clients-per-uid -> exit 2 ({rc})")
    os.unlink(f.name)

    # runtime directory errors: one clear line, no stats.json attempt
    for rdir, want in (("/proc/smcd-raw-nonexistent", "Cannot create runtime directory /proc/smcd-raw-nonexistent"),
                       ("/dev/null", "Cannot use runtime directory /dev/null: Not a directory")):
        rc, err = run(["--runtime-dir", rdir])
        lines = [ln for ln in err.splitlines() if ln.strip()]
        check(rc == 1 and len(lines) == 1 and want in lines[0],
              f"--runtime-dir {rdir}: exit 1 with one line ({rc}: {lines})")


def cpu_seconds(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def run_client_limit_checks(binary):
    """--max-clients-per-uid, and many clients that exit at once are torn down fast."""
    rundir = tempfile.mkdtemp(prefix="smcd-raw-clients-")
    tmpdirs.append(rundir)
    d = Smcd(binary, rundir, ["--max-clients-per-uid", "3"])
    try:
        cl = [Client(d.sock) for _ in range(3)]
        # the 4th is admitted for adopting only (smcd(8)): HELLO, then a CONNECT goes
        # to TCP (SMCD_DECL_MAXCLIENTS, a fallback), and it is closed, having adopted
        # nothing
        c4 = Client(d.sock)
        check(c4.id is not None, "--max-clients-per-uid 3: a 4th control connection is admitted (to adopt)")
        info, fds4 = c4.connect(("127.0.0.1", 9))
        for fd in fds4:
            os.close(fd)
        check(info["mode"] == MODE_TCP and info["reason"] == 0x0B050000 and not fds4,
              f"... its CONNECT goes to TCP, reason SMCD_DECL_MAXCLIENTS ({info['mode']}, {info['reason']:#x})")
        try:
            recv_msg(c4.s, timeout=2)
            closed = False
        except EOFError:
            closed = True
        check(closed, "... and it is closed then")
        # at most 32 such connections that adopted nothing at a time: the 33rd is
        # refused at once, with ERROR EUSERS, and closed
        extra = [Client(d.sock) for _ in range(32)]
        s4 = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s4.connect(d.sock)
        t, seq, data, fds = recv_msg(s4)
        err = parse_error(data) if t == ERROR else None
        check(err and err[0] == -errno.EUSERS and "too many control connections for uid" in err[2],
              f"32 admitted beyond the limit, none adopting: the next gets ERROR EUSERS ({err})")
        try:
            recv_msg(s4, timeout=2)
            closed = False
        except EOFError:
            closed = True
        check(closed, "... and is closed")
        for c in extra:
            c.s.close()
        s4.close()
        d.stats(lambda s: s["smcd"]["clients"] == 3)
        cl[0].s.close()
        d.stats(lambda s: s["smcd"]["clients"] == 2)
        c5 = Client(d.sock)
        check(c5.id is not None, "after one client left, a new one is served")
        s = d.stats()
        check(s["smcd"]["clients_over_limit"] == 2 and s["fallback"]["client"] >= 1,
              f"stats: clients_over_limit {s['smcd']['clients_over_limit']} (the CONNECT and the 33rd), "
              f"fallbacks {s['fallback']['client']}")
    finally:
        d.stop()

    # beyond the limit, adopting takes the endpoint over (an inetd-style parent keeps
    # its control connection after handing the connection to the exec'd child), so
    # the adopter no longer counts against the 32 pending; once what it adopted is
    # closed it counts again (before: 48 concurrent exec'd children of one uid had
    # resets; and adopt-then-close piled up connections beyond the limit unbounded)
    rundir = tempfile.mkdtemp(prefix="smcd-raw-adopt-")
    tmpdirs.append(rundir)
    d = Smcd(binary, rundir, ["--max-clients-per-uid", "2"])
    held = []
    try:
        srv = Client(d.sock, version=VERSION_MAX)
        cli = Client(d.sock, version=VERSION_MAX)
        tcp = tcp_listener()
        lid, ch, err = srv.listen(tcp)
        info, cfds = cli.connect(tcp.getsockname()[:2])
        held += cfds  # (its X: the endpoint lives while a copy is open)
        check(lid and info["mode"] == MODE_SMCD, f"adopt beyond the limit: an SMC-D connection ({info['mode']})")

        def refused():
            x = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            x.connect(d.sock)
            try:
                t, _, data, _ = recv_msg(x, timeout=0.5)
                return t == ERROR and parse_error(data)[0] == -errno.EUSERS
            except (TimeoutError, BlockingIOError, EOFError):
                return False
            finally:
                x.close()

        pend = [Client(d.sock, version=VERSION_MAX) for _ in range(32)]
        check(refused(), "... 32 connections beyond the limit adopting nothing: the next is refused")
        t, rseq, data, afds = pend[0].request(pend[0].hdr(ADOPT, pend[0].next()) + struct.pack("<Q", info["id"]))
        for fd in afds:
            os.close(fd)
        check(t == ADOPT_REPLY and len(afds) == 3, f"... one of them adopts the parent's connection ({t}, {len(afds)})")
        try:
            extra = Client(d.sock, version=VERSION_MAX)
        except (AssertionError, OSError, EOFError):
            extra = None  # refused
        check(extra and extra.id is not None, "... it holds the endpoint now: another one beyond the limit is admitted")
        check(refused(), "... and the next is refused")
        pend[0].close_conn(info["id"])
        if extra:
            extra.s.close()
        d.stats(lambda s: s["smcd"]["clients"] == 2 + 32 and s["smcd"]["conns_client_current"] == 0)
        check(refused(), "... the adopter closed what it held (pending again), one left: still refused")
        pend[1].s.close()
        d.stats(lambda s: s["smcd"]["clients"] == 2 + 31)
        check(not refused(), "... one pending less: admitted again")
        for c in pend:
            c.s.close()
    finally:
        for fd in held:
            os.close(fd)
        d.stop()

    # N control connections held, then the process exits: smcd must not need O(N^2)
    # (was 1.6 s of CPU for 4000; now a few ms)
    n = 4000
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < n + 200:
        print(f"skip teardown check: RLIMIT_NOFILE hard limit {hard}")
        return
    rundir = tempfile.mkdtemp(prefix="smcd-raw-drain-")
    tmpdirs.append(rundir)
    d = Smcd(binary, rundir, ["--max-clients-per-uid", "0"])
    try:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(r)
                resource.setrlimit(resource.RLIMIT_NOFILE, (n + 100, hard))
                ss = []
                for i in range(n):
                    x = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                    x.connect(d.sock)
                    x.send(hdr(HELLO, i) + struct.pack("<IIII", 1, 1, 0, 0))
                    ss.append(x)
                for x in ss:
                    x.recv(512)
                os.write(w, b"%d" % len(ss))
            finally:
                os._exit(0)  # all n control sockets hang up at once
        os.close(w)
        held = os.read(r, 20)
        os.waitpid(pid, 0)
        t0, c0 = time.time(), cpu_seconds(d.p.pid)
        s = d.stats(lambda s: s["smcd"]["clients"] == 0, timeout=20)
        dt, dc = time.time() - t0, cpu_seconds(d.p.pid) - c0
        check(held == b"%d" % n and s["smcd"]["clients"] == 0 and dc < 0.5,
              f"{n} clients that exit at once are gone in {dt:.3f} s, {dc:.2f} s of CPU (held {held})")
    finally:
        d.stop()


def run_accept_emfile_check(binary):
    """accept4 failing with EMFILE does not make smcd spin."""
    rundir = tempfile.mkdtemp(prefix="smcd-raw-emfile-")
    tmpdirs.append(rundir)
    limit = 50
    # pre-populated buffers hold memfds: few fds are left for control connections
    # (50: smcd's start needs 48 since its runtime directory watch, an inotify fd)
    d = Smcd(binary, rundir, ["--prepopulate", "30", "--max-clients-per-uid", "0"],
             preexec=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit)))
    try:
        held = []
        for _ in range(limit):
            x = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            x.connect(d.sock)
            held.append(x)
        time.sleep(0.2)
        c0 = cpu_seconds(d.p.pid)
        time.sleep(1.0)
        dc = cpu_seconds(d.p.pid) - c0
        with open(d.log.name) as f:
            pauses = f.read().count("pausing accepts")
        check(pauses >= 1 and dc < 0.3, f"accept4 EMFILE: accepts paused, {dc:.2f} s CPU in 1 s, {pauses} pauses logged")
        check(pauses <= 20, f"... logged once per pause, not per attempt ({pauses})")
        for x in held:
            x.close()
        s = d.stats(lambda s: s["smcd"]["clients"] == 0)
        c = Client(d.sock)
        check(c.id is not None and s["smcd"]["clients"] == 0, "after the fds are back, clients are served again")
        c.s.close()
    finally:
        d.stop()


def run_domain_check(binary):
    """Buffers of a {0, 65534} connection never serve a {0, 0} connection."""
    rundir = tempfile.mkdtemp(prefix="smcd-raw-domain-")
    tmpdirs.append(rundir)
    os.chmod(rundir, 0o755)
    d = Smcd(binary, rundir)
    try:
        a = Client(d.sock)
        tcp = tcp_listener()
        lid, chan, _ = a.listen(tcp)
        port = tcp.getsockname()[1]
        def connect_close():
            c = Client(d.sock)
            info, fds = c.connect(("127.0.0.1", port))
            res = b"%d %d %d %d" % (info["mode"], info["id"], info["rx"][0], info["tx"][0])
            c.close_conn(info["id"])
            c.request(hdr(UNLISTEN, 1) + struct.pack("<Q", 99))  # a round trip: CLOSE is processed
            return res
        res = as_uid(connect_close).split()
        t, _, data, sfds = recv_msg(chan)
        srv = parse_conn(data)
        ok = len(res) == 4 and int(res[0]) == MODE_SMCD
        check(ok, f"uid 65534 connects to root's listener over SMC-D ({res})")
        foreign = {int(res[2]), int(res[3])} if ok else set()
        # as the library does: CLOSE, then close X (its last copy would close the
        # endpoint by itself, and a CLOSE after that gets ENOENT)
        a.close_conn(srv["id"])
        for fd in sfds:
            os.close(fd)
        d.stats(lambda s: s["pool"]["in_use"] == 0 and s["pool"]["pending_clear"] == 0)
        seen = set()
        for _ in range(4):
            info, fds = a.connect(("127.0.0.1", port))
            t, _, data, sfds = recv_msg(chan)
            seen |= {info["rx"][0], info["tx"][0]}
            for fd in fds + sfds:
                os.close(fd)
        check(foreign and not (seen & foreign), "buffers of domain {0, 65534} are not reused for {0, 0}")
        a.s.close()
    finally:
        d.stop()


def run_allow_checks(binary):
    rundir = tempfile.mkdtemp(prefix="smcd-raw-allow-")
    tmpdirs.append(rundir)
    os.chmod(rundir, 0o755)
    d = Smcd(binary, rundir, ["--allow-uid", "4242"])
    try:
        def refused():
            s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            s.connect(d.sock)
            t, seq, data, fds = recv_msg(s)
            return b"%d" % parse_error(data)[0] if t == ERROR else b"no error"
        res = as_uid(refused)
        check(res == b"%d" % -errno.EACCES, f"uid 65534 not in the allow list -> ERROR EACCES ({res})")
        a = Client(d.sock)
        check(a.id is not None, "root is always allowed")
        a.s.close()
    finally:
        d.stop()


# ---- REREG (v3): re-registration of SMC-D endpoints after an smcd restart ----

def rereg_body(conn_id, rx_token, tx_token, role, instance, rx_size=65536, tx_size=65536,
               local=("127.0.0.1", 40000), peer=("127.0.0.1", 8080)):
    """struct smc_ctl_rereg after the header (88 bytes): conn_id, rx_token, tx_token,
    role, instance, rx_size, tx_size, local, peer (addresses as (host, port))."""
    return (struct.pack("<QQQIIII", conn_id, rx_token, tx_token, role, instance, rx_size, tx_size) +
            addr(*local) + addr(*peer))


def rereg(c, fds=(), version=None, length=None, extra=b"", **ep):
    """REREG on control connection @c: ('reply', new id), ('error', errno, detail,
    text) or ('type', t). @version / @length / @extra forge the header and the size."""
    seq = c.next()
    ver = c.version if version is None else version
    if length is None:
        length = SIZES_V[VERSION_MAX][REREG] + len(extra)
    send(c.s, hdr(REREG, seq, length=length, version=ver) + rereg_body(**ep) + extra, fds)
    t, rseq, data, rfds = recv_msg(c.s, version=c.version)
    for fd in rfds:
        os.close(fd)
    if rseq != seq:
        return ("seq", rseq, seq)
    if t == REREG_REPLY:
        return ("reply", struct.unpack_from("<Q", data, 16)[0])
    if t == ERROR:
        return ("error",) + parse_error(data)
    return ("type", t)


def is_err(r, want):
    return r[0] == "error" and r[1] == -want


def round_trip_clean(c):
    """After fire-and-forget CLOSEs: an UNLISTEN of a made-up id must be answered
    ENOENT as the very next reply (no ERROR queued for the CLOSEs)."""
    r = c.expect_error(c.hdr(UNLISTEN, c.next()) + struct.pack("<Q", 99))
    return r is not None and r[0] == -errno.ENOENT


def token(mm):
    return struct.unpack_from("<Q", mm, OFF_TOKEN)[0]


def run_eptable_checks(binary):
    """The endpoint table: an smcd restarted in the same runtime directory knows the
    SMC-D endpoints of the one before at once, from $RUNTIME_DIR/endpoints, if their
    processes still run (an endpoint of a process that died meanwhile is dropped); the
    process's REREG confirms one (the same id, rereg_total), a wrong claim is refused;
    the exit of the process the table names ends its endpoint; a table that is not
    trusted (mode, owner, symlink) or does not parse is ignored, and smcd serves."""
    print("---- the endpoint table")
    daemons = []
    rdir = tempfile.mkdtemp(prefix="smcd-raw-ept-")
    tmpdirs.append(rdir)
    os.chmod(rdir, 0o755)
    try:
        _run_eptable_checks(binary, rdir, daemons)
    finally:
        for d in daemons:
            d.stop()


def _run_eptable_checks(binary, rdir, daemons):
    ept = os.path.join(rdir, "endpoints")
    C = Smcd(binary, rdir)
    daemons.append(C)
    sc_ = Client(C.sock, version=3)
    cc_ = Client(C.sock, version=3)
    tcp = tcp_listener()
    port = tcp.getsockname()[1]
    lid, chan, _ = sc_.listen(tcp)
    # conn 1: both ends in this process
    info, fds = cc_.connect(("127.0.0.1", port), src=("127.0.0.1", 40100))
    t, _, data, sfds = recv_msg(chan, version=3)
    srv = parse_conn(data)
    c1, s1 = Conn(info, fds, {}), Conn(srv, sfds, {})
    # conn 2: its client end in a child that exits while no smcd runs
    r_, w_ = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            os.close(r_)
            k = Client(C.sock, version=3)
            kinfo, kfds = k.connect(("127.0.0.1", port), src=("127.0.0.1", 40101))
            os.write(w_, b"1" if kinfo["mode"] == MODE_SMCD else b"0")
            time.sleep(60)
        finally:
            os._exit(0)
    os.close(w_)
    ok_child = os.read(r_, 1) == b"1"
    os.close(r_)
    t2, _, data2, sfds2 = recv_msg(chan, version=3)
    srv2 = parse_conn(data2)
    s2 = Conn(srv2, sfds2, {})
    s = C.stats(lambda s: s["smcd"]["conns_current"] == 2)["smcd"]
    check(ok_child and t2 == NEW_CONN and s["conns_current"] == 2, f"smcd C: 2 SMC-D connections ({s['conns_current']})")
    c_inst = cc_.instance
    rc = C.stop()
    check(rc == 0, f"smcd C exits 0 with them open ({rc})")
    for c in (sc_, cc_):
        c.s.close()
    chan.close()
    os.kill(child, signal.SIGKILL)
    os.waitpid(child, 0)
    os.rename(os.path.join(rdir, "smcd.log"), os.path.join(rdir, "smcd-C.log"))

    D = Smcd(binary, rdir)
    daemons.append(D)
    D.p.send_signal(signal.SIGHUP)  # (logged and ignored)
    s = D.stats()["smcd"]
    # the SIGHUP and the stats' SIGUSR1 are separate event sources: either may come
    # first, so the log line may follow the stats
    for _ in range(100):
        if "SIGHUP" in open(os.path.join(rdir, "smcd.log")).read():
            break
        time.sleep(0.05)
    check(D.p.poll() is None and "SIGHUP" in open(os.path.join(rdir, "smcd.log")).read(),
          "SIGHUP: logged, smcd goes on")
    check(s["restored_loaded"] == 3 and s["restored_current"] == 3 and s["conns_current"] == 2 and
          s["rereg_total"] == 0,
          f"smcd D at start, before any request: restored_loaded {s['restored_loaded']} (3: conn 1's two ends, "
          f"conn 2's server end; its client's process is gone), restored_current {s['restored_current']} (3), "
          f"conns_current {s['conns_current']} (2), rereg_total {s['rereg_total']} (0)")
    st = os.lstat(ept)
    check(stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.geteuid() and
          not os.path.exists(ept + ".tmp"), f"smcd D installed a new table, mode 0600 ({oct(st.st_mode)})")
    dc = Client(D.sock, version=3)
    cli_ep = dict(conn_id=info["id"], rx_token=token(c1.rx), tx_token=token(c1.tx), role=ROLE_CLIENT,
                  instance=c_inst, rx_size=info["rx"][1], tx_size=info["tx"][1], local=("127.0.0.1", 40100),
                  peer=("127.0.0.1", port))
    srv_ep = dict(conn_id=srv["id"], rx_token=token(s1.rx), tx_token=token(s1.tx), role=ROLE_SERVER,
                  instance=c_inst, rx_size=srv["rx"][1], tx_size=srv["tx"][1], local=("127.0.0.1", port),
                  peer=("127.0.0.1", 40100))
    r = rereg(dc, **dict(cli_ep, tx_token=0x5EC0DE0000000A01))
    check(is_err(r, errno.EEXIST), f"a REREG of a recorded rx_token with another tx_token -> ERROR EEXIST {r[:2]}")
    r = rereg(dc, **dict(cli_ep, role=ROLE_SERVER))
    check(is_err(r, errno.EEXIST), f"... with the other role -> ERROR EEXIST {r[:2]}")
    if os.getuid() == 0:
        res = as_uid(lambda: repr(rereg(Client(D.sock, version=3), **cli_ep)[:2]).encode())
        check(res == repr(("error", -errno.EEXIST)).encode(),
              f"uid 65534 claims root's recorded endpoint by its tokens -> ERROR EEXIST ({res.decode()})")
    rc_ = rereg(dc, **cli_ep)
    rs_ = rereg(dc, **srv_ep)
    r2 = rereg(dc, **cli_ep)
    # (the library may write the addresses otherwise than the table: 0.0.0.0 dialed,
    # v4-mapped; the tokens prove the endpoint)
    r3 = rereg(dc, **dict(cli_ep, local=("127.0.0.2", 40100)))
    check(r3 == rc_, f"a repeated REREG of a confirmed table endpoint with other addresses: the same id ({r3[:2]})")
    s = D.stats()["smcd"]
    check(rc_[0] == rs_[0] == "reply" and r2 == rc_ and s["rereg_total"] == 2 and s["restored_current"] == 3 and
          s["conns_current"] == 2,
          f"the process confirms conn 1's two ends: REREG_REPLY ({rc_[:2]}, {rs_[:2]}; again: the same id), "
          f"rereg_total {s['rereg_total']} (2), restored_current {s['restored_current']} (3), conns_current "
          f"{s['conns_current']} (2)")
    dc.close_conn(rc_[1])
    dc.close_conn(rs_[1])
    s = D.stats(lambda s: s["smcd"]["restored_current"] == 1)["smcd"]
    check(round_trip_clean(dc) and s["restored_current"] == 1 and s["conns_current"] == 1 and
          s["conns_closed"] == 1 and s["close_unknown"] == 0,
          f"CLOSE of both: conn 1 ends, counted closed (restored_current {s['restored_current']}, conns_closed "
          f"{s['conns_closed']}, close_unknown {s['close_unknown']})")
    dc.s.close()
    c1.close()
    s1.close()

    # a second restart: the table D wrote names conn 2's server end (this process);
    # an endpoint of a process that exits ends with it
    rc = D.stop()
    check(rc == 0, f"smcd D exits 0 ({rc})")
    os.rename(os.path.join(rdir, "smcd.log"), os.path.join(rdir, "smcd-D.log"))
    pr, pw = os.pipe()
    holder = os.fork()
    if holder == 0:
        # a process that holds nothing but is named by a forged record: the table is
        # smcd's (0600), so only root could forge it; this checks the exit watch
        os.close(pw)
        os.read(pr, 1)
        os._exit(0)
    os.close(pr)
    E = Smcd(binary, rdir)
    daemons.append(E)
    s = E.stats()["smcd"]
    check(s["restored_loaded"] == 1 and s["restored_current"] == 1,
          f"smcd E (second restart) knows conn 2's server end from D's table (restored_loaded "
          f"{s['restored_loaded']}, restored_current {s['restored_current']})")
    rc = E.stop()
    os.rename(os.path.join(rdir, "smcd.log"), os.path.join(rdir, "smcd-E.log"))
    good = open(ept, "rb").read()  # E's table: conn 2's server end, this process's
    # forge: the record names the child (its start time as /proc says)
    with open(ept, "r+b") as f:
        hdr_ = f.read(64)
        nslots = struct.unpack_from("<I", hdr_, 16)[0]
        for i in range(nslots):
            f.seek(64 + 128 * i)
            rec = f.read(128)
            if struct.unpack_from("<I", rec, 0)[0] == 0x4556494C:
                with open(f"/proc/{holder}/stat") as ps:
                    start_ = int(ps.read().rsplit(")", 1)[1].split()[19])
                f.seek(64 + 128 * i + 44)
                f.write(struct.pack("<iQ", holder, start_))
                break
    F = Smcd(binary, rdir)
    daemons.append(F)
    s = F.stats()["smcd"]
    loaded = s["restored_current"]
    os.close(pw)  # the holder exits
    os.waitpid(holder, 0)
    s = F.stats(lambda s: s["smcd"]["restored_current"] == 0)["smcd"]
    check(loaded == 1 and s["restored_current"] == 0 and s["conns_current"] == 0 and s["conns_aborted"] == 1,
          f"the process a record names exits: its endpoint ends with it (restored_current {loaded} -> "
          f"{s['restored_current']}, conns_aborted {s['conns_aborted']})")
    rc = F.stop()
    s2.close()
    tcp.close()

    # REREG_DONE: the process re-registered all it holds: its loaded endpoints left
    # are closed ones (their CLOSE unread when the old smcd died): they end
    fd = os.open(ept, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, good)
    os.close(fd)
    K = Smcd(binary, rdir)
    daemons.append(K)
    kc = Client(K.sock, version=3)

    def done(inst, flags, length=24):
        seq = kc.next()
        send(kc.s, hdr(REREG_DONE, seq, length=length, version=3) + struct.pack("<II", inst, flags)[:length - 16])

    done(kc.instance ^ 1, DONE_ALL | DONE_SERVERS)
    t, _, data, _ = recv_msg(kc.s, version=3)
    check(t == ERROR and parse_error(data)[0] == -errno.EPROTO, "REREG_DONE naming another smcd -> ERROR EPROTO")
    for what, args in (("instance 0", (0, DONE_ALL)), ("unknown flags", (kc.instance, 4)),
                       ("8 bytes short", (kc.instance, DONE_ALL, 16))):
        done(*args)
        t, _, data, _ = recv_msg(kc.s, version=3)
        check(t == ERROR and parse_error(data)[0] == -errno.EBADMSG, f"REREG_DONE with {what} -> ERROR EBADMSG")
    done(kc.instance, 0)
    done(kc.instance, DONE_ALL)  # (the loaded endpoint is a server end: kept)
    s = K.stats()["smcd"]
    check(round_trip_clean(kc) and s["restored_current"] == 1 and s["restored_swept"] == 0,
          f"REREG_DONE without ALL, or without SERVERS for a server end: it stays (restored_current "
          f"{s['restored_current']}, restored_swept {s['restored_swept']})")
    if os.getuid() == 0:
        res = as_uid(lambda: (lambda c2: (send(c2.s, hdr(REREG_DONE, c2.next(), length=24, version=3) +
                                                struct.pack("<II", c2.instance, DONE_ALL | DONE_SERVERS)),
                                           repr(round_trip_clean(c2)).encode())[1])(Client(K.sock, version=3)))
        s = K.stats()["smcd"]
        check(res == b"True" and s["restored_current"] == 1,
              f"REREG_DONE by another uid's process: nothing of ours ends (restored_current {s['restored_current']})")
    done(kc.instance, DONE_ALL | DONE_SERVERS)
    s = K.stats(lambda s: s["smcd"]["restored_current"] == 0)["smcd"]
    check(round_trip_clean(kc) and s["restored_current"] == 0 and s["restored_swept"] == 1 and
          s["conns_current"] == 0 and s["conns_closed"] == 1,
          f"REREG_DONE with ALL and SERVERS: the loaded server end of this process ends, counted closed "
          f"(restored_current {s['restored_current']}, restored_swept {s['restored_swept']}, conns_closed "
          f"{s['conns_closed']})")
    kc.s.close()
    K.stop()

    # tables not to be trusted or read: ignored with a warning, smcd serves
    for what, prep in (
            ("as E left it (the control)", lambda: None),
            ("mode 0644", lambda: os.chmod(ept, 0o644)),
            ("owned by uid 65534", lambda: os.chown(ept, 65534, 65534) if os.getuid() == 0 else None),
            ("a symlink", lambda: (os.rename(ept, ept + ".real"), os.symlink(ept + ".real", ept))),
            ("garbage", lambda: open(ept, "wb").write(os.urandom(64 + 128 * 4096))),
            ("a wrong size", lambda: open(ept, "wb").write(good[:64 + 100])),
            ("empty", lambda: open(ept, "wb").close()),
            ("a directory", lambda: os.mkdir(ept))):
        if what == "owned by uid 65534" and os.getuid() != 0:
            continue
        for p_ in (ept, ept + ".real"):
            if os.path.isdir(p_) and not os.path.islink(p_):
                os.rmdir(p_)
            elif os.path.lexists(p_):
                os.unlink(p_)
        fd = os.open(ept, os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(fd, good)
        os.close(fd)
        if what == "a directory":
            os.unlink(ept)
        prep()
        G = Smcd(binary, rdir)
        daemons.append(G)
        s = G.stats()["smcd"]
        g = Client(G.sock, version=3)  # (HELLO answered)
        g.s.close()
        rc = G.stop()
        log = open(os.path.join(rdir, "smcd.log")).read()
        if prep is None or what.startswith("as E"):
            check(rc == 0 and s["restored_loaded"] == 1, f"the endpoint table {what}: restored_loaded "
                                                         f"{s['restored_loaded']} (1)")
            continue
        check(rc == 0 and s["restored_loaded"] == 0 and "endpoint table" in log,
              f"an endpoint table that is {what}: ignored with a warning, smcd serves (restored_loaded "
              f"{s['restored_loaded']}, exit {rc})")

    # a full runtime file system: no table (no SIGBUS: its pages are allocated up
    # front), the old one removed (it would name connections that end meanwhile)
    if os.getuid() == 0:
        small = tempfile.mkdtemp(prefix="smcd-raw-ept-small-")
        tmpdirs.append(small)
        if subprocess.call(["mount", "-t", "tmpfs", "-o", "size=700k,mode=0755", "tmpfs", small]) == 0:
            try:
                fd = os.open(os.path.join(small, "endpoints"), os.O_WRONLY | os.O_CREAT, 0o600)
                os.write(fd, good)
                os.close(fd)
                H = Smcd(binary, small)
                daemons.append(H)
                s = H.stats()["smcd"]
                hc = Client(H.sock, version=3)
                tcp2 = tcp_listener()
                lid2, chan2, _ = hc.listen(tcp2)
                info2, fds2 = hc.connect(tcp2.getsockname())
                log = open(os.path.join(small, "smcd.log")).read()
                check(s["restored_loaded"] == 1 and info2["mode"] == MODE_SMCD and
                      "Cannot create the endpoint table" in log and
                      not os.path.exists(os.path.join(small, "endpoints")),
                      f"a full runtime file system: no new table, a warning, the old table removed, SMC-D "
                      f"connections as usual (restored_loaded {s['restored_loaded']}, mode {info2['mode']})")
                for fd in fds2:
                    os.close(fd)
                hc.s.close()
                chan2.close()
                tcp2.close()
                rc = H.stop()
                check(rc == 0, f"... and smcd exits 0 ({rc})")
            finally:
                subprocess.call(["umount", small])
        else:
            print("skip full runtime file system check (mount tmpfs failed)")


def run_rereg_checks(binary):
    """HELLO_REPLY.instance, and REREG: after a restart of smcd, the processes of an
    SMC-D connection set up by the old smcd re-register both endpoints with the new
    one, which joins them by their DMB tokens, counts them and closes them (CLOSE,
    client death); malformed, foreign and over-limit REREGs are refused."""
    print("---- REREG (re-registration after an smcd restart)")
    daemons = []

    def start(prefix, extra=()):
        rdir = tempfile.mkdtemp(prefix=prefix)
        tmpdirs.append(rdir)
        os.chmod(rdir, 0o755)  # another uid's client must reach the socket
        d = Smcd(binary, rdir, extra)
        daemons.append(d)
        return d

    try:
        _run_rereg_checks(binary, start, daemons)
    finally:
        for d in daemons:
            d.stop()


def _run_rereg_checks(binary, start, daemons):
    # ---- 1. HELLO_REPLY.instance
    A = start("smcd-raw-rereg-")
    a3 = Client(A.sock, version=3)
    a1 = Client(A.sock, version=1)
    check(a3.instance and a1.instance == a3.instance,
          f"HELLO_REPLY.instance is not 0 ({a3.instance:#010x}) and the same on a v1 and a v3 connection "
          f"({a1.instance:#010x})")
    X = start("smcd-raw-rereg-other-")
    x3 = Client(X.sock, version=3)
    check(x3.instance and x3.instance != a3.instance,
          f"another smcd (other runtime dir) has another instance ({x3.instance:#010x} != {a3.instance:#010x})")
    x3.s.close()
    X.stop()
    a1.s.close()

    # ---- 2. a real connection set up by smcd A, then a restart
    srv_c = a3  # the listening process's control connection
    cli_c = Client(A.sock, version=3)
    tcp = tcp_listener()
    port = tcp.getsockname()[1]
    lid, chan, err = srv_c.listen(tcp)
    info, fds = cli_c.connect(("127.0.0.1", port), src=("127.0.0.1", 40000))
    t, _, data, sfds = recv_msg(chan, version=3)
    srv = parse_conn(data)
    check(lid and info["mode"] == MODE_SMCD and len(fds) == 4 and t == NEW_CONN and len(sfds) == 4,
          f"smcd A: LISTEN + CONNECT (v3) gives an SMC-D connection with both memfds on each side "
          f"({info['mode']}, {len(fds)}, {len(sfds)})")
    cc = Conn(info, fds, {})
    sc = Conn(srv, sfds, {})
    crx, ctx = token(cc.rx), token(cc.tx)
    check(crx and ctx and crx != ctx, f"DMB tokens (u64 at offset {OFF_TOKEN}) of both DMBs: not 0 and different "
                                      f"({crx:#018x}, {ctx:#018x})")
    check(token(sc.rx) == ctx and token(sc.tx) == crx, "the server reads the same tokens crosswise (its rx = client's tx)")
    a_inst = cli_c.instance
    rc = A.stop()
    check(rc == 0, f"smcd A exits 0 on SIGTERM with the connection open ({rc})")
    # REREG as without an endpoint table (run_eptable_checks checks the table): take
    # the one A left away
    ept = os.path.join(A.rundir, "endpoints")
    st = os.lstat(ept) if os.path.exists(ept) else None
    check(st and stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.geteuid(),
          f"smcd A left its endpoint table: a regular file of its uid, mode 0600 ({st and oct(st.st_mode)})")
    os.unlink(ept)
    os.rename(os.path.join(A.rundir, "smcd.log"), os.path.join(A.rundir, "smcd-A.log"))
    for c in (srv_c, cli_c):
        c.s.close()
    chan.close()
    cc.y.send(b"\1")
    sc.x.settimeout(2)
    check(sc.x.recv(1) == b"\1", "the connection outlives smcd A (doorbell client Y -> server X)")

    B = Smcd(binary, A.rundir)  # the restart: same runtime directory
    daemons.append(B)
    bc = Client(B.sock, version=3)
    b_inst = bc.instance
    check(b_inst and b_inst != a_inst, f"smcd B (restart, same runtime dir): another instance ({b_inst:#010x} != {a_inst:#010x})")
    cli_ep = dict(conn_id=info["id"], rx_token=crx, tx_token=ctx, role=ROLE_CLIENT, instance=a_inst,
                  rx_size=info["rx"][1], tx_size=info["tx"][1], local=("127.0.0.1", 40000), peer=("127.0.0.1", port))
    srv_ep = dict(conn_id=srv["id"], rx_token=ctx, tx_token=crx, role=ROLE_SERVER, instance=a_inst,
                  rx_size=srv["rx"][1], tx_size=srv["tx"][1], local=("127.0.0.1", port), peer=("127.0.0.1", 40000))
    r = rereg(bc, **cli_ep)
    cid = r[1] if r[0] == "reply" else None
    check(cid, f"REREG of the client endpoint (role client, A's instance, its tokens) -> REREG_REPLY id {r}")
    s = B.stats(lambda s: s["smcd"]["restored_current"] == 1)["smcd"]
    check(s["rereg_total"] == 1 and s["restored_current"] == 1 and s["conns_current"] == 1 and
          s["conns_client_current"] == 1 and s["conns_server_current"] == 0,
          f"stats: rereg_total {s['rereg_total']}, restored_current {s['restored_current']}, conns_current "
          f"{s['conns_current']}, conns_client_current {s['conns_client_current']} (want 1 1 1 1)")
    r = rereg(bc, **cli_ep)
    check(r == ("reply", cid), f"the same REREG again -> REREG_REPLY with the same id {r}")
    bc2 = Client(B.sock, version=3)  # a forked copy of the process: same uid, own control connection
    r = rereg(bc2, **cli_ep)
    check(r == ("reply", cid), f"the same REREG from another control connection of the uid -> the same id {r}")
    s = B.stats()["smcd"]
    check(s["rereg_total"] == 1 and s["restored_current"] == 1 and s["conns_current"] == 1,
          f"... counted once (rereg_total {s['rereg_total']}, restored_current {s['restored_current']}, "
          f"conns_current {s['conns_current']})")
    bs = Client(B.sock, version=3)
    r = rereg(bs, **srv_ep)
    sid = r[1] if r[0] == "reply" else None
    check(sid and sid != cid, f"REREG of the server endpoint (role server, tokens crosswise) -> REREG_REPLY {r}")
    s = B.stats(lambda s: s["smcd"]["restored_current"] == 2)["smcd"]
    check(s["conns_current"] == 1 and s["restored_current"] == 2 and s["conns_server_current"] == 1 and
          s["conns_client_current"] == 1 and s["rereg_total"] == 2,
          f"joined with its peer: conns_current {s['conns_current']} (1), restored_current {s['restored_current']} (2), "
          f"conns_server_current {s['conns_server_current']} (1), rereg_total {s['rereg_total']} (2)")
    bc.close_conn(cid)
    bs.close_conn(sid)
    check(round_trip_clean(bc) and round_trip_clean(bs), "CLOSE of both new ids: no ERROR")
    s = B.stats(lambda s: s["smcd"]["restored_current"] == 0 and s["smcd"]["conns_current"] == 0)["smcd"]
    check(s["restored_current"] == 0 and s["conns_current"] == 0 and s["conns_client_current"] == 0 and
          s["conns_server_current"] == 0 and s["conns_closed"] == 1 and s["conns_aborted"] == 0 and
          s["close_unknown"] == 0,
          f"... restored_current {s['restored_current']}, conns_current {s['conns_current']}, conns_closed "
          f"{s['conns_closed']} (1), conns_aborted {s['conns_aborted']}, close_unknown {s['close_unknown']}")
    r = bc.expect_error(bc.hdr(CLOSE, bc.next()) + struct.pack("<QII", cid, 0, 0))
    check(r and r[0] == -errno.ENOENT, f"CLOSE of the closed restored endpoint again -> ERROR ENOENT {r}")
    r = rereg(bc, **cli_ep)
    rid = r[1] if r[0] == "reply" else None
    check(rid and rid != cid, f"a REREG of the closed endpoint's tokens makes a new endpoint {r}")
    bc.close_conn(rid)
    check(round_trip_clean(bc), "... CLOSEd")
    cc.close()
    sc.close()
    for c in (bc2, bs):
        c.s.close()

    # ---- 3. malformed and refused REREGs: ERROR, and smcd keeps serving
    e = Client(B.sock, version=3)
    base = dict(conn_id=0x0123456789ABCDEF, rx_token=0x5EC0DE0000000101, tx_token=0x5EC0DE0000000102,
                role=ROLE_CLIENT, instance=a_inst, rx_size=65536, tx_size=65536,
                local=("127.0.0.1", 40010), peer=("127.0.0.1", 8080))
    devnull = os.open("/dev/null", os.O_RDONLY)
    for what, kw, want in (
            ("with this smcd's own instance", dict(instance=b_inst), errno.EPROTO),
            ("role 2", dict(role=2), errno.EBADMSG),
            ("role 0xffffffff", dict(role=0xFFFFFFFF), errno.EBADMSG),
            ("rx_size 65537 (not a power of two)", dict(rx_size=65537), errno.EBADMSG),
            ("rx_size 98304 (not a power of two)", dict(rx_size=98304), errno.EBADMSG),
            ("rx_size 8192 (< 16 KiB)", dict(rx_size=8192), errno.EBADMSG),
            ("rx_size 0", dict(rx_size=0), errno.EBADMSG),
            ("rx_size 2 MiB (> 1 MiB)", dict(rx_size=2 << 20), errno.EBADMSG),
            ("tx_size 12345", dict(tx_size=12345), errno.EBADMSG),
            ("tx_size 2 MiB", dict(tx_size=2 << 20), errno.EBADMSG),
            ("conn_id 0", dict(conn_id=0), errno.EBADMSG),
            ("instance 0", dict(instance=0), errno.EBADMSG),
            ("8 bytes too long (len 112)", dict(extra=bytes(8)), errno.EBADMSG),
            ("8 bytes short (len 96)", dict(length=96, extra=b"", _cut=8), errno.EBADMSG),
            ("with an fd", dict(fds=[devnull]), errno.EBADF)):
        kw = dict(kw)
        cut = kw.pop("_cut", 0)
        ep = dict(base)
        ep.update({k: v for k, v in kw.items() if k in ep})
        extra = {k: v for k, v in kw.items() if k not in ep}
        if cut:
            seq = e.next()
            msg = (hdr(REREG, seq, length=SIZES_V[3][REREG] - cut, version=3) + rereg_body(**ep))[:-cut]
            r = e.expect_error(msg)
            r = ("error", r[0], 0, r[1]) if r else ("none",)
        else:
            r = rereg(e, **extra, **ep)
        check(is_err(r, want), f"REREG {what} -> ERROR {errno.errorcode[want]} {r[:2]}")
    # smcd_ctl_decode: REREG is v3 only (size 0 in v1 / v2: unknown type there)
    e2 = Client(B.sock, version=2)
    r = rereg(e2, version=2, **base)
    check(is_err(r, errno.EOPNOTSUPP), f"REREG of version 2 on a v2 connection -> ERROR EOPNOTSUPP {r[:2]}")
    r = rereg(e2, version=3, **base)
    check(is_err(r, errno.EPROTONOSUPPORT), f"REREG of version 3 on a v2 connection -> ERROR EPROTONOSUPPORT {r[:2]}")
    e1 = Client(B.sock, version=1)
    r = rereg(e1, version=1, **base)
    check(is_err(r, errno.EOPNOTSUPP), f"REREG of version 1 on a v1 connection -> ERROR EOPNOTSUPP {r[:2]}")
    r = e.expect_error(e.hdr(REREG_REPLY, e.next()) + struct.pack("<Q", 5))
    check(r and r[0] == -errno.EOPNOTSUPP, f"REREG_REPLY sent to smcd -> ERROR EOPNOTSUPP {r}")
    e0 = Client(B.sock, do_hello=False)
    r = e0.expect_error(hdr(REREG, 3, version=3) + rereg_body(**base))
    check(r and r[0] == -errno.EPROTO, f"REREG before HELLO -> ERROR EPROTO {r}")
    os.close(devnull)
    s = B.stats()["smcd"]
    check(s["restored_current"] == 0 and s["conns_current"] == 0 and s["rereg_total"] == 3,
          f"refused REREGs registered nothing (restored_current {s['restored_current']}, conns_current "
          f"{s['conns_current']}, rereg_total {s['rereg_total']})")
    t, _ = e0.hello(VERSION_MIN, 3)
    check(t == HELLO_REPLY and e0.instance == b_inst, "after the errors a HELLO still works")
    r = rereg(e, **base)
    held = r[1] if r[0] == "reply" else None
    check(held, f"after the errors the same connection's valid REREG -> REREG_REPLY {r}")
    # the same rx_token by the same uid, but not the same endpoint
    r = rereg(e, **dict(base, tx_token=0x5EC0DE0000000999))
    check(is_err(r, errno.EEXIST), f"REREG of the same rx_token with another tx_token -> ERROR EEXIST {r[:2]}")
    r = rereg(e, **dict(base, role=ROLE_SERVER))
    check(is_err(r, errno.EEXIST), f"REREG of the same tokens with the other role -> ERROR EEXIST {r[:2]}")
    # another uid cannot claim (nor learn the id of) a restored endpoint by its token
    if os.getuid() == 0:
        res = as_uid(lambda: repr(rereg(Client(B.sock, version=3), **base)[:2]).encode())
        want = repr(("error", -errno.EEXIST)).encode()
        check(res == want, f"uid 65534 REREGs root's restored rx_token -> ERROR EEXIST ({res.decode()})")
    else:
        print("skip other-uid REREG check (needs root to switch uid)")
    s = B.stats()["smcd"]
    check(s["restored_current"] == 1 and s["conns_current"] == 1 and s["rereg_total"] == 4,
          f"... only the valid one is registered (restored_current {s['restored_current']}, conns_current "
          f"{s['conns_current']}, rereg_total {s['rereg_total']})")
    e.close_conn(held)
    check(round_trip_clean(e), "CLOSE of it: no ERROR")
    for c in (e, e1, e2, e0):
        c.s.close()

    # ---- 5. client death: its restored endpoints close with it (abort)
    s0 = B.stats(lambda s: s["smcd"]["restored_current"] == 0)["smcd"]
    f = Client(B.sock, version=3)
    r = rereg(f, **dict(base, rx_token=0x5EC0DE0000000201, tx_token=0x5EC0DE0000000202, local=("127.0.0.1", 40011)))
    check(r[0] == "reply", f"REREG by a client that then dies -> REREG_REPLY {r}")
    f.s.close()
    s = B.stats(lambda s: s["smcd"]["restored_current"] == 0 and s["smcd"]["clients"] == 0)["smcd"]
    check(s["restored_current"] == 0 and s["conns_current"] == 0 and s["conns_client_current"] == 0 and
          s["conns_aborted"] == s0["conns_aborted"] + 1 and s["conns_closed"] == s0["conns_closed"],
          f"its death closes the endpoint: restored_current {s['restored_current']}, conns_aborted "
          f"+{s['conns_aborted'] - s0['conns_aborted']} (+1), conns_closed +{s['conns_closed'] - s0['conns_closed']}")
    # a joined pair: the server's owner dies, the client's endpoint stays until CLOSE
    fc, fs = Client(B.sock, version=3), Client(B.sock, version=3)
    t1, t2 = 0x5EC0DE0000000301, 0x5EC0DE0000000302
    rc_ = rereg(fc, **dict(base, rx_token=t1, tx_token=t2, local=("127.0.0.1", 40012), peer=("127.0.0.1", 8080)))
    rs_ = rereg(fs, **dict(base, rx_token=t2, tx_token=t1, role=ROLE_SERVER, local=("127.0.0.1", 8080),
                           peer=("127.0.0.1", 40012)))
    s = B.stats(lambda s: s["smcd"]["restored_current"] == 2)["smcd"]
    check(rc_[0] == rs_[0] == "reply" and s["conns_current"] == 1,
          f"a second joined pair ({rc_}, {rs_}, conns_current {s['conns_current']})")
    fs.s.close()
    s = B.stats(lambda s: s["smcd"]["restored_current"] == 1)["smcd"]
    check(s["restored_current"] == 1 and s["conns_current"] == 1 and s["conns_server_current"] == 0 and
          s["conns_aborted"] == s0["conns_aborted"] + 1,
          f"the server's owner dies: its endpoint closes, the connection stays (restored_current "
          f"{s['restored_current']}, conns_current {s['conns_current']})")
    fc.close_conn(rc_[1])
    check(round_trip_clean(fc), "the client CLOSEs its endpoint: no ERROR")
    s = B.stats(lambda s: s["smcd"]["restored_current"] == 0)["smcd"]
    check(s["conns_current"] == 0 and s["conns_aborted"] == s0["conns_aborted"] + 2,
          f"... the connection ends, counted aborted (its server died) (conns_aborted "
          f"+{s['conns_aborted'] - s0['conns_aborted']})")
    fc.s.close()

    # ---- 6. what no library sends: tokens 0 or equal, port 0, mixed families; the same
    # endpoint again with other sizes
    s0 = B.stats()["smcd"]
    g = Client(B.sock, version=3)
    for what, kw in (("rx_token 0", dict(rx_token=0)), ("tx_token 0", dict(tx_token=0)),
                     ("equal tokens", dict(tx_token=base["rx_token"])),
                     ("local port 0", dict(local=("127.0.0.1", 0))), ("peer port 0", dict(peer=("127.0.0.1", 0))),
                     ("IPv6 local, IPv4 peer", dict(local=("::1", 40013)))):
        r = rereg(g, **dict(base, **kw))
        check(is_err(r, errno.EBADMSG), f"REREG with {what} -> ERROR EBADMSG {r[:2]}")
    r = rereg(g, **dict(base, rx_token=0x5EC0DE0000000301, tx_token=0x5EC0DE0000000302, local=("127.0.0.1", 40013)))
    check(r[0] == "reply", f"a valid REREG after them -> REREG_REPLY {r[:2]}")
    r2 = rereg(g, **dict(base, rx_token=0x5EC0DE0000000301, tx_token=0x5EC0DE0000000302, local=("127.0.0.1", 40013),
                         rx_size=16384))
    check(is_err(r2, errno.EEXIST), f"the same tokens with another ring size -> ERROR EEXIST {r2[:2]}")
    s = B.stats()["smcd"]
    check(s["rereg_total"] == s0["rereg_total"] + 1 and s["restored_current"] == s0["restored_current"] + 1,
          f"... one endpoint registered (rereg_total +{s['rereg_total'] - s0['rereg_total']})")
    if r[0] == "reply":
        g.close_conn(r[1])
    check(round_trip_clean(g), "... its CLOSE: no ERROR")
    g.s.close()

    # ---- 7. one end re-registers and closes before the other re-registers (it learns
    # of the close from EOF, and its close re-registers it first): one connection,
    # counted once
    s0 = B.stats()["smcd"]
    k = Client(B.sock, version=3)
    t1, t2 = 0x5EC0DE0000000701, 0x5EC0DE0000000702
    rc_ = rereg(k, **dict(base, rx_token=t1, tx_token=t2, local=("127.0.0.1", 40017), peer=("127.0.0.1", 8080)))
    k.close_conn(rc_[1])
    check(rc_[0] == "reply" and round_trip_clean(k), f"the client's end: REREG, CLOSE {rc_[:2]}")
    s = B.stats()["smcd"]
    check(s["conns_closed"] == s0["conns_closed"] + 1 and s["conns_current"] == s0["conns_current"],
          f"... counted as ended at its close (conns_closed +{s['conns_closed'] - s0['conns_closed']})")
    rs_ = rereg(k, **dict(base, rx_token=t2, tx_token=t1, role=ROLE_SERVER, local=("127.0.0.1", 8080),
                          peer=("127.0.0.1", 40017)))
    s = B.stats()["smcd"]
    check(rs_[0] == "reply" and s["conns_current"] == s0["conns_current"] + 1 and
          s["restored_current"] == s0["restored_current"] + 1,
          f"the server's end re-registers after it: joined to the ended connection ({rs_[:2]}, conns_current "
          f"+{s['conns_current'] - s0['conns_current']})")
    k.close_conn(rs_[1])
    check(round_trip_clean(k), "... its CLOSE: no ERROR")
    s = B.stats()["smcd"]
    check(s["conns_closed"] == s0["conns_closed"] + 1 and s["conns_current"] == s0["conns_current"] and
          s["restored_current"] == s0["restored_current"] and s["close_unknown"] == s0["close_unknown"],
          f"... the connection is counted once (conns_closed +{s['conns_closed'] - s0['conns_closed']}, "
          f"conns_current +{s['conns_current'] - s0['conns_current']})")
    # a writer of that DMB is registered: another endpoint that claims to write it
    r = rereg(k, **dict(base, rx_token=0x5EC0DE0000000703, tx_token=0x5EC0DE0000000801, local=("127.0.0.1", 40018)))
    r2 = rereg(k, **dict(base, rx_token=0x5EC0DE0000000801, tx_token=0x5EC0DE0000000703, role=ROLE_SERVER,
                         local=("127.0.0.1", 8080), peer=("127.0.0.1", 40018)))
    r3 = rereg(k, **dict(base, rx_token=0x5EC0DE0000000704, tx_token=0x5EC0DE0000000801, local=("127.0.0.1", 40019)))
    check(r[0] == r2[0] == "reply" and is_err(r3, errno.EEXIST),
          f"a second client end for a DMB whose writer is joined -> ERROR EEXIST {r3[:2]}")
    # ports not crosswise: not joined
    r4 = rereg(k, **dict(base, rx_token=0x5EC0DE0000000901, tx_token=0x5EC0DE0000000902, local=("127.0.0.1", 40020)))
    s1 = B.stats()["smcd"]
    r5 = rereg(k, **dict(base, rx_token=0x5EC0DE0000000902, tx_token=0x5EC0DE0000000901, role=ROLE_SERVER,
                         local=("127.0.0.1", 8081), peer=("127.0.0.1", 40020)))
    s = B.stats()["smcd"]
    check(r4[0] == r5[0] == "reply" and s["conns_current"] == s1["conns_current"] + 1,
          "an end whose ports do not mirror its would-be peer's is not joined")
    for x in (r, r2, r4, r5):
        if x[0] == "reply":
            k.close_conn(x[1])
    check(round_trip_clean(k), "... CLOSE of all: no ERROR")
    k.s.close()

    # B still serves SMC-D set-ups of its own (its own endpoints carry tokens, too)
    h = Client(B.sock, version=3)
    tcp = tcp_listener()
    lid, chan, _ = h.listen(tcp)
    info, fds = h.connect(tcp.getsockname())
    t, _, data, sfds = recv_msg(chan, version=3)
    check(info["mode"] == MODE_SMCD and t == NEW_CONN, "smcd B sets up new SMC-D connections as usual")
    h.close_conn(info["id"])
    h.close_conn(parse_conn(data)["id"])
    for fd in fds + sfds:
        os.close(fd)
    h.s.close()
    chan.close()
    tcp.close()
    s = B.stats(lambda s: s["smcd"]["clients"] == 0 and s["pool"]["in_use"] == 0)["smcd"]
    check(s["conns_current"] == 0 and s["restored_current"] == 0 and s["close_unknown"] == 1,
          f"REREG checks on smcd B: nothing left (conns_current {s['conns_current']}, restored_current "
          f"{s['restored_current']}, close_unknown {s['close_unknown']})")
    rc = B.stop()
    check(rc == 0, f"smcd B exits 0 ({rc})")

    # ---- 4. the per-uid endpoint limit
    L = start("smcd-raw-rereg-limit-", ["--max-conns-per-uid", "1"])
    c = Client(L.sock, version=3)
    ep1 = dict(base, rx_token=0x5EC0DE0000000401, tx_token=0x5EC0DE0000000402)
    ep2 = dict(base, rx_token=0x5EC0DE0000000403, tx_token=0x5EC0DE0000000404, local=("127.0.0.1", 40014))
    r1 = rereg(c, **ep1)
    check(r1[0] == "reply", f"--max-conns-per-uid 1: a first REREG -> REREG_REPLY {r1}")
    r = rereg(c, **ep2)
    check(is_err(r, errno.EMFILE) and r[2] == DECL_MAXCONNERR,
          f"... a second one (other tokens) -> ERROR EMFILE, detail MAXCONNERR {r[:3]}")
    r = rereg(c, **ep1)
    check(r == r1, f"... the first one again (same tokens) -> its id, not refused {r}")
    c.close_conn(r1[1])
    r = rereg(c, **ep2)
    check(r[0] == "reply", f"... after its CLOSE the second REREG -> REREG_REPLY {r}")
    s = L.stats()["smcd"]
    check(s["rereg_total"] == 2 and s["restored_current"] == 1 and s["conns_current"] == 1,
          f"... rereg_total {s['rereg_total']} (2), restored_current {s['restored_current']} (1)")
    c.s.close()

    # ---- sizes: each endpoint is accounted (max_buf_per_uid) with the sizes it gave
    # itself, also when it is joined with a peer that gave other sizes
    M = start("smcd-raw-rereg-bytes-", ["--max-buf-per-uid", "256K"])
    c = Client(M.sock, version=3)
    t1, t2 = 0x5EC0DE0000000501, 0x5EC0DE0000000502
    r1 = rereg(c, **dict(base, rx_token=t1, tx_token=t2, rx_size=16384, tx_size=1 << 20))
    r2 = rereg(c, **dict(base, rx_token=t2, tx_token=t1, role=ROLE_SERVER, rx_size=16384, tx_size=16384,
                         local=("127.0.0.1", 8080), peer=("127.0.0.1", 40000)))
    check(r1[0] == r2[0] == "reply", f"two REREGs with crosswise tokens but disagreeing sizes ({r1}, {r2})")
    s = M.stats(lambda s: s["smcd"]["restored_current"] == 2)["smcd"]
    check(s["conns_current"] == 2, f"... not joined: not one connection (conns_current {s['conns_current']})")
    c.close_conn(r1[1])
    c.close_conn(r2[1])
    check(round_trip_clean(c), "... both CLOSEd")
    s = M.stats(lambda s: s["smcd"]["restored_current"] == 0)["smcd"]
    tcp = tcp_listener()
    lid, chan, _ = c.listen(tcp)
    info, fds = c.connect(tcp.getsockname())
    check(info["mode"] == MODE_SMCD,
          f"--max-buf-per-uid 256K: afterwards the uid still gets SMC-D (its byte count went back to 0) "
          f"(mode {info['mode']}, reason {info['reason']:#x})")
    for fd in fds:
        os.close(fd)
    c.s.close()


def run_adopt_fd_checks(binary):
    """ADOPT_FD (v3): a process that received the X of an SMC-D connection over a
    unix socket (SCM_RIGHTS) gets the connection's buffers and Y; anything else, and
    another uid, gets ERROR ENOENT; malformed requests are refused; smcd keeps serving
    and the connection ends when the last copy of its X is closed."""
    print("---- ADOPT_FD (connections passed between processes)")
    run_with_smcd(binary, "smcd-raw-adopt-fd-", _run_adopt_fd_checks, "ADOPT_FD")


def run_with_smcd(binary, prefix, fn, what):
    """fn(d) with an smcd of its own, in a runtime directory other uids reach; then
    that smcd must exit 0."""
    rdir = tempfile.mkdtemp(prefix=prefix)
    tmpdirs.append(rdir)
    os.chmod(rdir, 0o755)  # another uid's client must reach the socket
    d = Smcd(binary, rdir)
    try:
        fn(d)
    finally:
        rc = d.stop()
    check(rc == 0, f"{what} checks: smcd exits 0 ({rc})")


def _run_adopt_fd_checks(d):
    srv_c, cli_c, other = Client(d.sock, version=3), Client(d.sock, version=3), Client(d.sock, version=3)
    tcp = tcp_listener()
    lid, chan, _ = srv_c.listen(tcp)
    info, fds = cli_c.connect(tcp.getsockname())
    t, _, data, sfds = recv_msg(chan, version=3)
    srv = parse_conn(data)
    check(info["mode"] == MODE_SMCD and t == NEW_CONN, f"an SMC-D connection ({info['mode']}, {t})")

    def adopt_fd(c, fd, reserved=0, nfds=None, version=3, length=24):
        seq = c.next()
        send(c.s, hdr(ADOPT_FD, seq, length=length, version=version) + struct.pack("<Q", reserved)[:length - 16],
             [fd] if nfds is None else [fd] * nfds)
        t, rseq, data, rfds = recv_msg(c.s, version=c.version)
        if t == ADOPT_REPLY:
            r = ("reply", parse_conn(data), len(rfds))
        elif t == ERROR:
            r = ("error", parse_error(data)[0])
        else:
            r = ("type", t)
        for f in rfds:
            os.close(f)
        return r

    r = adopt_fd(other, fds[0])
    check(r[0] == "reply" and r[1]["id"] == info["id"] and r[1]["rx"] == info["rx"] and r[1]["tx"] == info["tx"]
          and r[1]["local"] == info["local"] and r[1]["peer"] == info["peer"] and r[2] == 3,
          f"ADOPT_FD with the client's X, from another control connection of the uid -> ADOPT_REPLY with its id, "
          f"buffers and addresses, 3 fds ({r[0]}, {r[2] if r[0] == 'reply' else r[1]})")
    r = adopt_fd(other, sfds[0])
    check(r[0] == "reply" and r[1]["id"] == srv["id"] and r[1]["rx"] == srv["rx"],
          f"ADOPT_FD with the server's X -> the server endpoint ({r[0]})")
    r = adopt_fd(other, fds[1])
    check(r == ("error", -errno.ENOENT), f"ADOPT_FD with a Y (not an app's end) -> ERROR ENOENT {r}")
    pr, pw = os.pipe()
    sp1, sp2 = socket.socketpair()
    r1, r2 = adopt_fd(other, pr), adopt_fd(other, sp1.fileno())
    check(r1 == r2 == ("error", -errno.ENOENT), f"ADOPT_FD with a pipe, another socket pair -> ERROR ENOENT {r1} {r2}")
    res = as_uid(lambda: repr(adopt_fd(Client(d.sock, version=3), fds[0])).encode())
    check(res == repr(("error", -errno.ENOENT)).encode(), f"ADOPT_FD with the X by another uid -> ERROR ENOENT ({res})")
    r = adopt_fd(other, fds[0], reserved=1)
    check(r == ("error", -errno.EBADMSG), f"ADOPT_FD with reserved 1 -> ERROR EBADMSG {r}")
    r = adopt_fd(other, fds[0], nfds=2)
    check(r[0] == "error", f"ADOPT_FD with 2 fds -> ERROR {r}")
    r = adopt_fd(other, fds[0], length=16)
    check(r == ("error", -errno.EBADMSG), f"ADOPT_FD without its body -> ERROR EBADMSG {r}")
    v1 = Client(d.sock, version=1)
    r = adopt_fd(v1, fds[0], version=1)
    check(r[0] == "error", f"ADOPT_FD in version 1 -> ERROR {r}")
    for f in (pr, pw):
        os.close(f)
    sp1.close()
    sp2.close()
    # smcd serves on, and the connection ends with the last close of its X copies
    info2, fds2 = cli_c.connect(tcp.getsockname())
    check(info2["mode"] == MODE_SMCD, f"after these, smcd still sets up SMC-D connections ({info2['mode']})")
    for f in fds + sfds + fds2:
        os.close(f)
    drain_queue(chan)
    s = d.stats(lambda s: s["smcd"]["conns_current"] == 0)["smcd"]
    check(s["conns_current"] == 0, f"every copy closed: no connection left (conns_current {s['conns_current']})")
    for c in (srv_c, cli_c, other, v1):
        c.s.close()
    chan.close()
    tcp.close()


def run_requeue_checks(binary):
    """REQUEUE (v6): after UNLISTEN of one SO_REUSEPORT listener, the SMC-D
    connections found on its channel go to the other listener of the address (same
    id, buffers, data); every wrong request (not given up, not its X, another
    listener's connection, another uid, a second time, no other listener, malformed)
    gets an ERROR and changes nothing."""
    print("---- REQUEUE (connections queued on a closed SO_REUSEPORT listener)")
    run_with_smcd(binary, "smcd-raw-requeue-", _run_requeue_checks, "REQUEUE")


def _run_requeue_checks(d):
    srv, cli = Client(d.sock, version=6), Client(d.sock, version=6)

    def reuse_listener(port=0):
        t = socket.socket()
        t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        t.bind(("127.0.0.1", port))
        t.listen(16)
        return t

    def requeue(c, lid, conn_id, fds, version=6, length=32):
        seq = c.next()
        send(c.s, hdr(REQUEUE, seq, length=length, version=version) + struct.pack("<QQ", lid, conn_id)[:length - 16],
             fds)
        return ok_or_error(c, seq)

    ta = reuse_listener()
    tb = reuse_listener(ta.getsockname()[1])
    la, cha, _ = srv.listen(ta)
    lb, chb, _ = srv.listen(tb)
    conns = [cli.connect(ta.getsockname()) for _ in range(4)]  # two to each, in turn
    check(all(i["mode"] == MODE_SMCD for i, _ in conns), "4 SMC-D connections to the two listeners of one address")
    # before the UNLISTEN: nothing to requeue
    t, _, data, qa = recv_msg(cha, version=6)
    qa_id = parse_conn(data)["id"]
    r = requeue(srv, la, qa_id, qa[:2])
    check(r == ("error", -errno.ENOENT), f"REQUEUE before the UNLISTEN -> ERROR ENOENT {r}")
    seq = srv.next()
    t, rseq, _, _ = srv.request(srv.hdr(UNLISTEN, seq) + struct.pack("<Q", la))
    check(t == OK and rseq == seq, "UNLISTEN of A with a connection still queued -> OK")
    t, _, data, qa2 = recv_msg(cha, version=6)
    qa2_id = parse_conn(data)["id"]
    check(t == NEW_CONN and len(qa2) == 4, f"A's channel still holds its second connection ({t}, {len(qa2)} fds)")
    r = requeue(srv, la, qa_id, [qa[1], qa[0]])
    check(r == ("error", -errno.EINVAL), f"REQUEUE with Y and X swapped -> ERROR EINVAL {r}")
    pr, pw = os.pipe()
    r = requeue(srv, la, qa_id, [pr, qa[1]])
    check(r == ("error", -errno.EINVAL), f"REQUEUE with a pipe -> ERROR EINVAL {r}")
    r = requeue(srv, la, qa_id, qa2[:2])
    check(r == ("error", -errno.EINVAL), f"REQUEUE with another connection's X -> ERROR EINVAL {r}")
    r = requeue(srv, lb, qa_id, qa[:2])
    check(r == ("error", -errno.ENOENT), f"REQUEUE naming the live listener B -> ERROR ENOENT {r}")
    res = as_uid(lambda: repr(requeue(Client(d.sock, version=6), la, qa_id, qa[:2])).encode())
    check(res == repr(("error", -errno.ENOENT)).encode(), f"REQUEUE by another uid -> ERROR ENOENT ({res})")
    r = requeue(srv, la, qa_id, qa[:2], version=5, length=32)
    check(r[0] == "error", f"REQUEUE in version 5 -> ERROR {r}")
    r = requeue(srv, la, qa_id, qa[:2], length=24)
    check(r == ("error", -errno.EBADMSG), f"REQUEUE without its conn id -> ERROR EBADMSG {r}")
    r = requeue(srv, la, qa_id, qa[:1])
    check(r[0] == "error", f"REQUEUE with X only -> ERROR {r}")
    r = requeue(srv, la, qa_id, qa[:2], length=24)
    check(r == ("error", -errno.EBADMSG), f"REQUEUE without its conn id -> ERROR EBADMSG {r}")
    r = requeue(srv, la, qa_id, qa[:2])
    check(r == ("ok",), f"REQUEUE of A's connection with its X -> OK {r}")
    r = requeue(srv, la, qa_id, qa[:2])
    check(r == ("error", -errno.ENOENT), f"the same REQUEUE again (the connection is B's now) -> ERROR ENOENT {r}")
    got = {}
    while True:
        try:
            t, _, data, f = recv_msg(chb, timeout=0.3, version=6)
        except (BlockingIOError, TimeoutError):
            break
        got[parse_conn(data)["id"]] = f
    check(qa_id in got and len(got[qa_id]) == 4 and len(got) == 3,
          f"B's channel: its two connections and the moved one with X, Y and both memfds ({len(got)}, "
          f"{len(got.get(qa_id, ()))} fds)")
    if qa_id in got:
        st1, st2 = os.fstat(qa[0]), os.fstat(got[qa_id][0])
        check((st1.st_dev, st1.st_ino) == (st2.st_dev, st2.st_ino), "the moved connection's X is the same socket")
    s = d.stats()["smcd"]
    check(s.get("conns_requeued") == 1, f"stats: conns_requeued 1 ({s.get('conns_requeued')})")
    # no other listener: B given up too
    seq = srv.next()
    t, _, _, _ = srv.request(srv.hdr(UNLISTEN, seq) + struct.pack("<Q", lb))
    r = requeue(srv, lb, qa_id, got[qa_id][:2]) if qa_id in got else None
    check(r == ("error", -errno.ENOENT), f"REQUEUE with no other listener left -> ERROR ENOENT {r}")
    for f in [pr, pw] + qa + qa2 + [fd for v in got.values() for fd in v] + [fd for _, fs in conns for fd in fs]:
        os.close(f)
    cha.close()
    chb.close()
    s = d.stats(lambda s: s["smcd"]["listeners"] == 0 and s["smcd"]["conns_current"] == 0)["smcd"]
    check(s["listeners"] == 0 and s["conns_current"] == 0,
          f"channels and connections closed: no listener, no connection left ({s['listeners']}, {s['conns_current']})")
    info, fds = cli.connect(ta.getsockname())
    check(info["mode"] == MODE_TCP, f"smcd serves on: a CONNECT now finds no listener ({info['mode']})")
    for f in fds:
        os.close(f)
    for c in (srv, cli):
        c.s.close()
    ta.close()
    tb.close()


def run_deposit_checks(binary):
    """LISTEN_DEPOSIT and LISTEN with SMC_CTL_LISTEN_F_JOIN (v5): a listening socket
    passed to another process keeps one accept queue. The receiver's LISTEN takes the
    deposited channel (same listener id, JOINED) and accepts what was queued; without
    a deposit it is a new registration; deposits of the wrong fds, listener or uid are
    refused and change nothing; an unclaimed deposit is closed after 3 s, and the
    listener then ends with its last holder."""
    print("---- LISTEN_DEPOSIT (listening sockets passed between processes)")
    run_with_smcd(binary, "smcd-raw-deposit-", _run_deposit_checks, "LISTEN_DEPOSIT")


def ok_or_error(c, seq):
    """The reply to request @seq of @c: ("ok",) or ("error", errno) or ("type", t)."""
    t, rseq, data, rfds = recv_msg(c.s, version=c.version)
    for f in rfds:
        os.close(f)
    if t == OK and rseq == seq:
        return ("ok",)
    return ("error", parse_error(data)[0]) if t == ERROR else ("type", t)


def deposit(c, lid, fds, version=None, length=32, flags=0, reserved=0):
    """LISTEN_DEPOSIT of listener @lid with @fds: ("ok",) or ("error", errno) or ("type", t)."""
    seq = c.next()
    send(c.s, hdr(LISTEN_DEPOSIT, seq, length=length, version=version or c.version) +
         struct.pack("<QII", lid, flags, reserved)[:length - 16], fds)
    return ok_or_error(c, seq)


def _run_deposit_checks(d):
    srv, rcv, cli = (Client(d.sock, version=5) for _ in range(3))
    tcp = tcp_listener()
    lid, chan, _ = srv.listen(tcp)
    info, cfds = cli.connect(tcp.getsockname())  # queued before the pass
    check(info["mode"] == MODE_SMCD, f"a connection queued on the listener ({info['mode']})")
    r = deposit(srv, lid, [chan.fileno(), tcp.fileno()], flags=DEPOSIT_NONBLOCK)
    check(r == ("ok",), f"LISTEN_DEPOSIT of the listener's channel and socket -> OK {r}")
    # the receiver holds the same socket (a dup stands for one received over SCM_RIGHTS)
    got = socket.socket(fileno=os.dup(tcp.fileno()))
    lid2, chan2, err = rcv.listen(got, flags=LISTEN_F_JOIN)
    check(lid2 == lid and rcv.listen_flags is not None and rcv.listen_flags[0] & LISTEN_JOINED and
          rcv.listen_flags[0] & (LISTEN_NB_KNOWN | LISTEN_NONBLOCK) == LISTEN_NB_KNOWN | LISTEN_NONBLOCK,
          f"LISTEN with F_JOIN of that socket -> the same listener {lid2}/{lid}, JOINED, the depositor's "
          f"O_NONBLOCK ({rcv.listen_flags}, {err})")
    if chan2:
        t, _, data, sfds = recv_msg(chan2, version=srv.version)
        check(t == NEW_CONN and parse_conn(data)["id"] != 0 and len(sfds) == 4,
              f"the joined channel delivers the connection queued before the pass ({t}, {len(sfds)} fds)")
        for f in sfds:
            os.close(f)
    lid3, chan3, _ = rcv.listen(got, flags=LISTEN_F_JOIN)
    check(lid3 and lid3 != lid and not rcv.listen_flags[0] & LISTEN_JOINED,
          f"a second LISTEN with F_JOIN, the deposit used up -> a new registration ({lid3}, {rcv.listen_flags})")
    # (that one now takes the socket's connections, as any new registration)
    r = deposit(rcv, lid3, [chan3.fileno(), tcp.fileno()]) if chan3 else None
    check(r == ("ok",), f"a deposit by the new registration's client {r}")

    # refused deposits change nothing
    other_tcp = tcp_listener()
    other_lid, other_chan, _ = srv.listen(other_tcp)
    sp1, sp2 = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pr, pw = os.pipe()
    for what, args, want in (
            ("an unknown listener id", (999999, [chan3.fileno(), tcp.fileno()]), -errno.ENOENT),
            ("another socket pair as the channel", (lid3, [sp1.fileno(), tcp.fileno()]), -errno.EINVAL),
            ("a pipe as the channel", (lid3, [pr, tcp.fileno()]), -errno.EINVAL),
            ("another listener's channel", (lid3, [other_chan.fileno(), tcp.fileno()]), -errno.EINVAL),
            ("another listening socket", (lid3, [chan3.fileno(), other_tcp.fileno()]), -errno.EINVAL),
            ("the fds swapped", (lid3, [tcp.fileno(), chan3.fileno()]), -errno.EINVAL)):
        r = deposit(rcv, *args)
        check(r == ("error", want), f"LISTEN_DEPOSIT with {what} -> ERROR {want} {r}")
    r = deposit(rcv, lid3, [chan3.fileno()])
    check(r[0] == "error", f"LISTEN_DEPOSIT with one fd -> ERROR {r}")
    r = deposit(rcv, lid3, [chan3.fileno(), tcp.fileno()], length=16)
    check(r == ("error", -errno.EBADMSG), f"LISTEN_DEPOSIT without its body -> ERROR EBADMSG {r}")
    r = deposit(rcv, lid3, [chan3.fileno(), tcp.fileno()], length=24)
    check(r == ("error", -errno.EBADMSG), f"LISTEN_DEPOSIT without its flags -> ERROR EBADMSG {r}")
    r1 = deposit(rcv, lid3, [chan3.fileno(), tcp.fileno()], flags=4)
    r2 = deposit(rcv, lid3, [chan3.fileno(), tcp.fileno()], reserved=1)
    check(r1 == r2 == ("error", -errno.EBADMSG), f"LISTEN_DEPOSIT with an unknown flag, reserved set -> EBADMSG {r1} {r2}")
    v4 = Client(d.sock, version=4)
    r = deposit(v4, lid3, [chan3.fileno(), tcp.fileno()])
    check(r[0] == "error", f"LISTEN_DEPOSIT in version 4 -> ERROR {r}")
    lid4, chan4, err = v4.listen(got, flags=LISTEN_F_JOIN)
    check(lid4 is None and err and err[0] == -errno.EBADMSG, f"a version-4 LISTEN with flags set -> EBADMSG ({err})")
    chan3_fd = chan3.fileno()
    res = as_uid(lambda: repr(deposit(Client(d.sock, version=5), lid3, [chan3_fd, tcp.fileno()])).encode())
    check(res == repr(("error", -errno.ENOENT)).encode(), f"LISTEN_DEPOSIT by another uid -> ERROR ENOENT ({res})")
    res = as_uid(lambda: repr(Client(d.sock, version=5).listen(got, flags=LISTEN_F_JOIN)[0] != lid3).encode())
    check(res == b"True", f"another uid's LISTEN with F_JOIN does not get the deposit ({res})")
    # the deposit by rcv is still there for a LISTEN of its uid
    lid5, chan5, _ = cli.listen(got, flags=LISTEN_F_JOIN)
    check(lid5 == lid3 and cli.listen_flags[0] & LISTEN_JOINED and
          cli.listen_flags[0] & (LISTEN_NB_KNOWN | LISTEN_NONBLOCK) == LISTEN_NB_KNOWN,
          f"after the refused requests the good deposit is still there, blocking ({lid5}/{lid3}, {cli.listen_flags})")

    # a sender whose sendmsg(2) failed takes its deposit back (DEPOSIT_WITHDRAW)
    r = deposit(rcv, lid3, [chan3.fileno(), tcp.fileno()], flags=DEPOSIT_WITHDRAW)
    check(r == ("error", -errno.ENOENT), f"WITHDRAW with no deposit of a client waiting -> ERROR ENOENT {r}")
    r = deposit(rcv, lid3, [chan3.fileno(), tcp.fileno()])
    check(r == ("ok",), f"a deposit to withdraw {r}")
    r = deposit(rcv, lid3, [sp1.fileno(), tcp.fileno()], flags=DEPOSIT_WITHDRAW)
    check(r == ("error", -errno.EINVAL), f"WITHDRAW with another socket pair as the channel -> ERROR EINVAL {r}")
    res = as_uid(lambda: repr(deposit(Client(d.sock, version=5), lid3, [chan3_fd, tcp.fileno()],
                                      flags=DEPOSIT_WITHDRAW)).encode())
    check(res == repr(("error", -errno.ENOENT)).encode(), f"WITHDRAW by another uid -> ERROR ENOENT ({res})")
    r = deposit(rcv, lid3, [chan3.fileno(), tcp.fileno()], flags=DEPOSIT_WITHDRAW)
    check(r == ("ok",), f"WITHDRAW of it -> OK {r}")
    r = deposit(rcv, lid3, [chan3.fileno(), tcp.fileno()], flags=DEPOSIT_WITHDRAW)
    check(r == ("error", -errno.ENOENT), f"a second WITHDRAW -> ERROR ENOENT (one deposit, one withdrawal) {r}")

    for f in (pr, pw):
        os.close(f)
    for x in (sp1, sp2, other_chan, other_tcp):
        x.close()

    # an unclaimed deposit keeps the listener for 3 s, then it ends with its holders
    r = deposit(rcv, lid3, [chan3.fileno(), tcp.fileno()])
    check(r == ("ok",), f"one more deposit {r}")
    for x in (chan3, chan5):
        if x:
            x.close()
    time.sleep(0.3)
    info2, cfds2 = cli.connect(tcp.getsockname())
    check(info2["mode"] == MODE_SMCD, f"all holders closed, a deposit waiting: still an SMC listener ({info2['mode']})")
    for f in cfds2:
        os.close(f)
    t0 = time.time()
    st = d.stats(lambda s: s["smcd"]["listeners"] == 1, timeout=15)["smcd"]
    took = time.time() - t0
    check(st["listeners"] == 1 and 2 <= took + 0.3 <= 6,
          f"the deposit closed after about 3 s: listener {lid3} gone ({st['listeners']} left, {took + 0.3:.1f} s)")
    for x in (chan, chan2):
        if x:
            x.close()
    st = d.stats(lambda s: s["smcd"]["listeners"] == 0)["smcd"]
    check(st["listeners"] == 0, f"every holder closed: no listener left ({st['listeners']})")
    for f in cfds:
        os.close(f)
    for c in (srv, rcv, cli, v4):
        c.s.close()
    got.close()
    tcp.close()


DMB_READER_FLAGS, DMB_FEATURES = 76, 164  # offsets in struct smc_dmb_hdr (dmb.h)
READER_X_HUP, FEAT_X_HUP = 0x04, 0x01


def run_revive_checks(binary):
    """Version 6: a listener's channel outlives smcd. LISTEN_REPLY gives C and a copy
    of smcd's end D; after a restart, a holder's LISTEN with F_REVIVE (T, C, D) makes
    the new smcd send on the same channel (REVIVED, no fds), a second holder's finds
    it registered, and every NEW_CONN names its smcd's instance in hdr.seq, so one
    queued by the old smcd is told apart. Bad fds are refused and change nothing; the
    listener still ends when the last C goes."""
    print("---- LISTEN F_REVIVE (a listener's channel after an smcd restart)")
    daemons = []

    def start(prefix):
        rdir = tempfile.mkdtemp(prefix=prefix)
        tmpdirs.append(rdir)
        d = Smcd(binary, rdir)
        daemons.append(d)
        return d

    try:
        _run_revive_checks(start)
    finally:
        for d in daemons:
            d.stop()


def _run_revive_checks(start):
    A = start("smcd-raw-revive-a-")
    srv, cli = Client(A.sock, version=6), Client(A.sock, version=6)
    tcp = tcp_listener()
    lid, chan, _ = srv.listen(tcp)
    dchan = srv.dchan
    check(lid and chan and dchan is not None, f"v6 LISTEN -> LISTEN_REPLY with C and D ({lid})")
    # the ends swapped, or of two channels: refused, and no listener or fd is left
    # behind (smcd would hold both ends of one channel, which then never hangs up;
    # helper 95 made 300 such, 600 fds, from an unprivileged uid)
    tcp2 = tcp_listener()
    lid2, chan2, _ = srv.listen(tcp2)
    dchan2 = srv.dchan
    before = len(os.listdir(f"/proc/{A.p.pid}/fd"))
    for what, t, fdl, want in (
            ("the ends swapped", tcp, [dchan.fileno(), chan.fileno()], ("error", -errno.EINVAL)),
            ("C2 and D of the other channel", tcp2, [chan2.fileno(), dchan.fileno()], ("revived", lid2)),
            ("another listener's channel", tcp2, [chan.fileno(), dchan.fileno()], ("error", -errno.EINVAL)),
            ("another listener's channel, swapped", tcp2, [dchan.fileno(), chan.fileno()], ("error", -errno.EINVAL)),
            # (C names its registration: that one is the answer, and nothing changes)
            ("C of one channel, D of another", tcp, [chan.fileno(), dchan2.fileno()], ("revived", lid))):
        for _ in range(20):
            r = srv.revive(t, *fdl)
        check(r[:len(want)] == want, f"F_REVIVE with {what} -> {want} {r}")
    st = A.stats()["smcd"]
    after = len(os.listdir(f"/proc/{A.p.pid}/fd"))
    check(st["listeners"] == 2 and after <= before + 64,  # (+ up to 64: the pool's spare pairs)
          f"after 100 such revives: 2 listeners ({st['listeners']}), smcd's fds {before} -> {after}")
    for x in (chan2, dchan2, tcp2):
        x.close()
    r = srv.revive(tcp, chan.fileno(), dchan.fileno())
    check(r[0] == "revived" and r[1] == lid and r[2] & LISTEN_REVIVED and r[3] == 0,
          f"F_REVIVE of a listener this smcd registered -> REVIVED, the same listener, no fds {r}")
    info, cfds = cli.connect(tcp.getsockname())
    t, seq, data, sfds = recv_msg(chan, version=6)
    check(info["mode"] == MODE_SMCD and t == NEW_CONN and seq == srv.instance,
          f"NEW_CONN's seq is smcd's instance ({seq:#x} == {srv.instance:#x})")
    for f in sfds + cfds:
        os.close(f)
    old_info, old_cfds = cli.connect(tcp.getsockname())  # queued, not accepted
    a_inst = srv.instance
    srv.s.close()
    cli.s.close()
    A.stop()

    B = start("smcd-raw-revive-b-")
    b1, b2, bc = Client(B.sock, version=6), Client(B.sock, version=6), Client(B.sock, version=6)
    info, fds = bc.connect(tcp.getsockname())
    check(info["mode"] == MODE_TCP, f"the new smcd does not know the listener yet: TCP ({info['mode']})")
    for f in fds:
        os.close(f)
    # bad input first: refused, nothing registered
    pr, pw = os.pipe()
    sp1, sp2 = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    other_tcp = tcp_listener()
    sp3, sp4 = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    for what, fdl, want in (
            ("a pipe as C", [tcp.fileno(), pr, dchan.fileno()], ("error", -errno.EINVAL)),
            ("the ends swapped", [tcp.fileno(), dchan.fileno(), chan.fileno()], ("error", -errno.EINVAL)),
            ("C and another pair's end as D", [tcp.fileno(), chan.fileno(), sp4.fileno()], ("error", -errno.EINVAL)),
            ("C twice", [tcp.fileno(), chan.fileno(), chan.fileno()], ("error", -errno.EINVAL)),
            ("a stream socket pair as C and D", [tcp.fileno(), sp1.fileno(), sp2.fileno()], ("error", -errno.EINVAL)),
            ("C and D but another socket's address", [other_tcp.fileno(), chan.fileno(), dchan.fileno()], None),
            ("a pipe as the TCP socket", [pr, chan.fileno(), dchan.fileno()], None),
            ("2 fds", [tcp.fileno(), chan.fileno()], ("error", -errno.EBADF))):
        r = b1.revive(tcp, 0, 0, fds=fdl)
        check(r[0] == "error" and (want is None or r == want), f"F_REVIVE with {what} -> ERROR {r}")
    r = Client(B.sock, version=5).revive(tcp, chan.fileno(), dchan.fileno(), version=5)
    check(r == ("error", -errno.EBADMSG), f"F_REVIVE in version 5 -> ERROR EBADMSG {r}")
    st = B.stats()["smcd"]
    check(st["listeners"] == 0, f"after the refused requests: no listener ({st['listeners']})")
    for f in (pr, pw):
        os.close(f)
    for x in (sp1, sp2, sp3, sp4, other_tcp):
        x.close()

    # (C blocking, as the library leaves it, while recv_msg's timeout made it
    # nonblocking: smcd tells the two ends apart by that flag, D being its own)
    os.set_blocking(chan.fileno(), True)
    r1 = b1.revive(tcp, chan.fileno(), dchan.fileno())
    r2 = b2.revive(tcp, chan.fileno(), dchan.fileno())
    check(r1[0] == "revived" and r1[2] & LISTEN_REVIVED and r1[3] == 0 and r2[0] == "revived" and r2[1] == r1[1],
          f"F_REVIVE with T, C, D -> REVIVED; a second holder's -> the same listener {r1} {r2}")
    st = B.stats()["smcd"]
    check(st["listeners"] == 1, f"one listener ({st['listeners']})")
    info, cfds = bc.connect(tcp.getsockname())
    check(info["mode"] == MODE_SMCD, f"a connection to the revived listener: SMC-D ({info['mode']})")
    t1, seq1, d1, f1 = recv_msg(chan, version=6)
    t2, seq2, d2, f2 = recv_msg(chan, version=6)
    check(t1 == NEW_CONN and seq1 == a_inst and parse_conn(d1)["id"] != 0 and len(f1) == 4 and
          t2 == NEW_CONN and seq2 == b1.instance and seq2 != a_inst,
          f"on the same channel: the old smcd's queued NEW_CONN (seq {seq1:#x}), then the new one's "
          f"(seq {seq2:#x} == {b1.instance:#x})")
    for f in f1 + f2 + cfds + old_cfds:
        os.close(f)
    chan.close()
    st = B.stats(lambda s: s["smcd"]["listeners"] == 0)["smcd"]
    check(st["listeners"] == 0, f"the last C closed (D still held): the listener is gone ({st['listeners']})")
    dchan.close()
    tcp.close()

    # a client end sent into its own channel (SCM_RIGHTS) is dropped with the
    # message, so the channel still hangs up when its holders close it (it kept
    # itself open inside smcd's end: one fd and a listener per request, from any
    # uid, until smcd's table was full: helper 96); by a LISTEN, and by a revive of
    # a socket pair of the client's own (a channel as good as any to smcd)
    before = len(os.listdir(f"/proc/{B.p.pid}/fd"))
    revived = 0
    for k in range(40):
        t = tcp_listener()
        if k % 2:
            a_, b_ = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            b_.setblocking(False)
            r = b1.revive(t, a_.fileno(), b_.fileno())
            revived += r[0] == "revived"
            cx, dx = a_, b_
        else:
            _, cx, _ = b1.listen(t)
            dx = b1.dchan
        try:  # (refused where the kernel has SO_PASSRIGHTS: see below)
            cx.sendmsg([b"Z" * 24], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [cx.fileno()]))])
        except PermissionError:
            pass
        cx.send(b"junk" * 8)  # (dropped at smcd's end)
        for x in (cx, dx, t):
            x.close()
    st = B.stats(lambda s: s["smcd"]["listeners"] == 0)["smcd"]
    after = len(os.listdir(f"/proc/{B.p.pid}/fd"))
    # (each kept channel was a listener and an fd: the listener count says it; smcd's
    # fd count also follows its buffer pool's spare pairs, up to 64 more)
    check(revived == 20 and st["listeners"] == 0,
          f"40 listeners whose client end was sent into their own channel (20 of them revived from the "
          f"client's own socket pair: {revived}) are gone with their holders: {st['listeners']} left, "
          f"smcd's fds {before} -> {after}")

    # the same with a connection: each X sent through itself into the queue of the Y
    # smcd holds (with C and D along) kept a listener, a connection and its DMBs for
    # good (helper 97); smcd's held ends refuse descriptors (SO_PASSRIGHTS, Linux
    # 6.16; older kernels let them through: smcd(8) BUGS)
    def sendfds(s_, fdl):
        try:
            s_.sendmsg([b"Z"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fdl))])
            return 0
        except OSError as e:
            return e.errno
    refused = 0
    for _ in range(10):
        t = tcp_listener()
        _, cx, _ = b1.listen(t)
        dx = b1.dchan
        info, cf = bc.connect(t.getsockname())
        _, _, _, sf = recv_msg(cx, version=6)
        xa, xb = socket.socket(fileno=cf[0]), socket.socket(fileno=sf[0])
        got = (sendfds(xa, [xa.fileno(), cx.fileno(), dx.fileno()]), sendfds(xb, [xb.fileno()]),
               sendfds(cx, [cx.fileno()]))
        refused += got == (errno.EPERM,) * 3
        for f in cf[1:] + sf[1:]:
            os.close(f)
        for x in (xa, xb, cx, dx, t):
            x.close()
    st = B.stats(lambda s: s["smcd"]["listeners"] == 0 and s["smcd"]["conns_current"] == 0)["smcd"]
    if refused == 0 and st["listeners"] > 0:
        print(f"skip connections sent through themselves: this kernel has no SO_PASSRIGHTS ({os.uname().release})")
    else:
        check(refused == 10 and st["listeners"] == 0 and st["conns_current"] == 0,
              f"10 connections whose X (with C and D) was sent through itself: refused (EPERM) {refused} of 10, "
              f"gone with their holders: {st['listeners']} listeners, {st['conns_current']} connections left")
    for c in (b1, b2, bc):
        c.s.close()


def run_x_hup_checks(binary):
    """A doorbell pair shut down both ways while its X is still open (what the library
    does so that epoll reports EPOLLHUP, as TCP): with SMC_DMB_READER_X_HUP in the
    endpoint's rx DMB, smcd asks the kernel whether X still exists and keeps the
    endpoint until X's last close; without the mark the hang-up is that close."""
    print("---- X_HUP (both directions shut, the socket still open)")
    rdir = tempfile.mkdtemp(prefix="smcd-raw-x-hup-")
    tmpdirs.append(rdir)
    d = Smcd(binary, rdir)
    try:
        srv_c, cli_c = Client(d.sock), Client(d.sock)
        tcp = tcp_listener()
        lid, chan, _ = srv_c.listen(tcp)

        cmaps, smaps = {}, {}  # (smcd sends a buffer's fd to a client once: reused ids come bare)

        def one():
            info, fds = cli_c.connect(tcp.getsockname())
            t, _, data, sfds = recv_msg(chan)
            return Conn(info, fds, cmaps), Conn(parse_conn(data), sfds, smaps)

        def current(n, what):
            s = d.stats(lambda s: s["smcd"]["conns_client_current"] == n, timeout=2.0)["smcd"]
            check(s["conns_client_current"] == n, f"{what} (conns_client_current {s['conns_client_current']})")

        cc, sc = one()
        check(u32(cc.rx, DMB_FEATURES) == FEAT_X_HUP and u32(sc.rx, DMB_FEATURES) == FEAT_X_HUP,
              f"smcd offers SMC_DMB_FEAT_X_HUP in both DMBs ({u32(cc.rx, DMB_FEATURES)}, "
              f"{u32(sc.rx, DMB_FEATURES)}): this kernel has unix_diag")
        struct.pack_into("<I", cc.rx, DMB_READER_FLAGS, u32(cc.rx, DMB_READER_FLAGS) | READER_X_HUP)
        cc.x.shutdown(socket.SHUT_RDWR)
        time.sleep(0.3)
        current(1, "marked, shut both ways, X open: the client endpoint stays")
        dup = os.dup(cc.x.fileno())
        cc.x.close()
        time.sleep(0.3)
        current(1, "... also after one of two copies of X is closed")
        os.close(dup)
        current(0, "... and ends with the last copy of X")
        cc.y.close()
        sc.close()

        cc, sc = one()
        current(1, "a second connection")
        cc.x.shutdown(socket.SHUT_RDWR)
        current(0, "not marked: the hang-up of Y ends the endpoint, X open or not")
        cc.close()
        sc.close()
        drain_queue(chan)
        s = d.stats(lambda s: s["smcd"]["conns_current"] == 0)["smcd"]
        check(s["conns_current"] == 0, f"no connection left (conns_current {s['conns_current']})")
        for c in (srv_c, cli_c):
            c.s.close()
        chan.close()
        tcp.close()
    finally:
        rc = d.stop()
    check(rc == 0, f"X_HUP checks: smcd exits 0 ({rc})")


if __name__ == "__main__":
    sys.exit(main())
