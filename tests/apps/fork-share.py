#!/usr/bin/env python3
# Connections shared by fork(), under smcrun, as over TCP: a connection ends only when
# the last process holding it closes it (or exits).
#  1. qperf's pattern: the server forks after accept; the parent closes its copy at
#     once; the child serves the connection (echo) and closes: the client gets every
#     byte back, then EOF.
#  2. redis BGSAVE's pattern: the server forks a child that exits without closing
#     anything (os._exit); the parent goes on serving the connection, then closes:
#     the client sees no EOF before the parent's close, and EOF after it.
#  3. The parent closes, the child exits without closing: the client gets EOF.
#  4. The child closes, the parent goes on, then exits without closing (EOF).
#  6. Both write in turn: the parent, then its child, then the parent again; the
#     client reads the three parts in that order.
#  5. The connecting side forks: the child sends, the parent waits and closes its
#     copy after the child exited; the server gets the child's bytes, then EOF.
#  8. After the peer's orderly close, one send is taken (TCP sends it, the peer answers
#     RST) and later ones fail with EPIPE, whichever process sends: the child's send
#     succeeds, the parent's next one fails.
#  9. The parent shuts the connection down for writing: the child's later send fails
#     with EPIPE and the peer reads the parent's bytes, then EOF, nothing after it.
# 11. A child shuts down both ways: the parent reads EOF, then every send gets EPIPE.
# 10. (no fork) Bytes held by TCP_CORK when the peer closes: uncorking succeeds, as
#     TCP's; held bytes for a peer that shut down both ways reset it (ECONNRESET).
#  7. Writers at the same time: three processes (the parent and two children) send
#     small records (90 bytes, one sendall each; one writer with nonblocking sends and
#     select) and 64 KiB blocks concurrently; the reader gets every byte, every small
#     record whole, each writer's in order.
# Prints one line; exit status 0 only if every case held.
import os
import select
import socket
import sys
import threading
import time

from streams import expect_eof, listener, recv_all

PAYLOAD = bytes(range(256)) * 1024  # 256 KiB: more than one ring of the default size






def send_and_read(s):
    """send PAYLOAD from a thread while reading its echo (the rings are smaller than
    the payload)"""
    t = threading.Thread(target=s.sendall, args=(PAYLOAD,))
    t.start()
    back = recv_all(s, len(PAYLOAD))
    t.join()
    return back


def echo(c, n):
    got = 0
    while got < n:
        b = c.recv(65536)
        if not b:
            break
        c.sendall(b)
        got += len(b)




def reap(pid):
    _, st = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(st)


def case_fork_after_accept():
    ls, addr = listener()
    srv = os.fork()
    if srv == 0:
        c, _ = ls.accept()
        ls.close()
        ch = os.fork()
        if ch == 0:
            echo(c, len(PAYLOAD))
            c.close()
            os._exit(0)
        c.close()  # the parent's copy: ends nothing
        os._exit(reap(ch))
    ls.close()
    s = socket.create_connection(addr)
    back = send_and_read(s)
    eof = expect_eof(s)
    s.close()
    return back == PAYLOAD and eof and reap(srv) == 0, "fork-after-accept"


def case_child_exits_silently():
    ls, addr = listener()
    srv = os.fork()
    if srv == 0:
        c, _ = ls.accept()
        ls.close()
        ch = os.fork()
        if ch == 0:
            os._exit(0)  # exits holding a copy of c: no close(2)
        reap(ch)
        echo(c, len(PAYLOAD))  # the connection must still work
        time.sleep(0.3)
        c.close()
        os._exit(0)
    ls.close()
    s = socket.create_connection(addr)
    back = send_and_read(s)
    # no EOF while the parent holds it (it closes 0.3 s after echoing)
    s.settimeout(0.1)
    early = True
    try:
        early = s.recv(1) == b""
    except socket.timeout:
        early = False
    eof = expect_eof(s)
    s.close()
    return back == PAYLOAD and not early and eof and reap(srv) == 0, "child-exits-silently"


def case_parent_closes_child_exits():
    ls, addr = listener()
    srv = os.fork()
    if srv == 0:
        c, _ = ls.accept()
        ls.close()
        ch = os.fork()
        if ch == 0:
            c.sendall(b"x" * 1000)
            time.sleep(0.2)
            os._exit(0)  # the last copy goes with the process
        c.close()
        os._exit(reap(ch))
    ls.close()
    s = socket.create_connection(addr)
    data = recv_all(s, 1001)
    s.close()
    return data == b"x" * 1000 and reap(srv) == 0, "parent-closes-child-exits"


def case_child_closes_parent_exits():
    ls, addr = listener()
    srv = os.fork()
    if srv == 0:
        c, _ = ls.accept()
        ls.close()
        ch = os.fork()
        if ch == 0:
            c.close()
            os._exit(0)
        reap(ch)
        c.sendall(b"y" * 5000)
        os._exit(0)  # no close: the kernel's, as for TCP
    ls.close()
    s = socket.create_connection(addr)
    data = recv_all(s, 5001)
    s.close()
    return data == b"y" * 5000 and reap(srv) == 0, "child-closes-parent-exits"


def case_client_forks():
    ls, addr = listener()
    s = socket.create_connection(addr)
    c, _ = ls.accept()
    ls.close()
    ch = os.fork()
    if ch == 0:
        s.sendall(PAYLOAD)
        os._exit(0)
    data = recv_all(c, len(PAYLOAD))
    rc = reap(ch)
    # the child is gone, the parent still holds s: no EOF yet
    c.settimeout(0.1)
    try:
        early = c.recv(1) == b""
    except socket.timeout:
        early = False
    s.close()  # the last copy: EOF now
    eof = expect_eof(c)
    c.close()
    return rc == 0 and data == PAYLOAD and not early and eof, "client-forks"


def case_write_in_turn():
    n = 100000
    ls, addr = listener()
    srv = os.fork()
    if srv == 0:
        c, _ = ls.accept()
        ls.close()
        c.sendall(b"A" * n)
        ch = os.fork()
        if ch == 0:
            c.sendall(b"B" * n)
            os._exit(0)
        rc = reap(ch)
        c.sendall(b"C" * n)
        c.close()
        os._exit(rc)
    ls.close()
    s = socket.create_connection(addr)
    data = recv_all(s, 3 * n + 1)
    s.close()
    return data == b"A" * n + b"B" * n + b"C" * n and reap(srv) == 0, "write-in-turn"


def case_send_after_peer_close():
    ls, addr = listener()
    s = socket.create_connection(addr)
    c, _ = ls.accept()
    ls.close()
    c.close()  # the peer's FIN
    if s.recv(1) != b"":
        return False, "send-after-peer-close"
    ch = os.fork()
    if ch == 0:
        try:
            ok = s.send(b"taken") == 5
        except OSError:
            ok = False
        os._exit(0 if ok else 1)
    rc = reap(ch)
    time.sleep(0.05)  # TCP: the peer's RST comes back
    try:
        s.send(b"x")
        second = "sent"
    except BrokenPipeError:
        second = "EPIPE"
    except OSError as e:
        second = str(e)
    s.close()
    if rc != 0 or second != "EPIPE":
        print("send after the peer's close: child's send %s, parent's %s (want ok, EPIPE)" %
              ("ok" if rc == 0 else "failed", second), file=sys.stderr)
    return rc == 0 and second == "EPIPE", "send-after-peer-close"


def case_shutdown_by_other_process():
    ls, addr = listener()
    a = socket.create_connection(addr)
    b, _ = ls.accept()
    ls.close()
    r, w = os.pipe()
    ch = os.fork()
    if ch == 0:
        os.read(r, 1)
        try:
            a.send(b"AFTER-EOF")
            os._exit(1)
        except BrokenPipeError:
            os._exit(0)
        except OSError:
            os._exit(2)
    a.send(b"before")
    a.shutdown(socket.SHUT_WR)
    got = recv_all(b, 6)
    eof1 = b.recv(100) == b""
    os.write(w, b"g")
    rc = reap(ch)
    b.settimeout(0.3)
    try:
        after = b.recv(100)
    except socket.timeout:
        after = b"(timeout)"
    for x in (a, b):
        x.close()
    os.close(r)
    os.close(w)
    ok = got == b"before" and eof1 and rc == 0 and after == b""
    if not ok:
        print("shutdown by the other process: peer got %r eof %s, child rc %d, then %r" % (got, eof1, rc, after),
              file=sys.stderr)
    return ok, "shutdown-by-other-process"


def case_shut_both_by_other_process():
    """11. A child shuts the connection down both ways; the parent reads end of file,
    then each send fails with EPIPE (the first one too: it is our own shutdown, not the
    peer's close, whose first send TCP takes); the peer gets end of file, nothing else."""
    ls, addr = listener()
    a = socket.create_connection(addr)
    b, _ = ls.accept()
    ls.close()
    ch = os.fork()
    if ch == 0:
        a.shutdown(socket.SHUT_RDWR)
        os._exit(0)
    rc = reap(ch)
    eof = a.recv(10) == b""
    sends = []
    for _ in range(2):
        try:
            sends.append(a.send(b"hello"))
        except BrokenPipeError:
            sends.append("EPIPE")
    b.settimeout(2)
    peer = b.recv(10)
    for x in (a, b):
        x.close()
    ok = rc == 0 and eof and sends == ["EPIPE", "EPIPE"] and peer == b""
    if not ok:
        print("shut both by the other process: eof %s, sends %r, peer %r" % (eof, sends, peer), file=sys.stderr)
    return ok, "shut-both-by-other-process"


def case_uncork_after_peer_close():
    ls, addr = listener()
    a = socket.create_connection(addr)
    b, _ = ls.accept()
    a.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
    a.send(b"c" * 100)
    b.close()
    time.sleep(0.05)
    try:
        a.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)
        uncork = "ok"
    except OSError as e:
        uncork = e.strerror
    a.close()
    a = socket.create_connection(addr)
    b, _ = ls.accept()
    ls.close()
    a.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
    a.send(b"c" * 100)
    b.shutdown(socket.SHUT_RDWR)
    time.sleep(0.05)
    a.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)
    time.sleep(0.05)
    try:
        peer = b.recv(1000)
    except ConnectionResetError:
        peer = "ECONNRESET"
    a.close()
    b.close()
    ok = uncork == "ok" and peer == "ECONNRESET"
    if not ok:
        print("uncork after the peer's close: %s; peer after SHUT_RDWR: %r" % (uncork, peer), file=sys.stderr)
    return ok, "uncork-after-peer-close"


def case_concurrent_writers():
    n, blocks, rec = 20000, 8, 90
    ls, addr = listener()
    c = socket.create_connection(addr)
    s, _ = ls.accept()
    ls.close()
    pids = []
    for w in range(3):
        pid = os.fork()
        if pid == 0:
            s.close()
            for i in range(n):
                r = b"%d:%06d:%s\n" % (w, i, b"x" * (rec - 10))
                if w == 2:
                    # nonblocking sends (MSG_DONTWAIT), select for room: as whole
                    while r:
                        try:
                            r = r[c.send(r, socket.MSG_DONTWAIT):]
                        except BlockingIOError:
                            select.select([], [c], [], 5)
                else:
                    c.sendall(r)
                if i % (n // blocks) == 0:
                    c.sendall(b"%d:BLOCK:" % w + b"b" * (65536 - 8))  # may be split, as on TCP
            os._exit(0)
        pids.append(pid)
    c.close()
    data = recv_all(s, 1 << 30)
    s.close()
    rcs = [reap(p) for p in pids]
    want = 3 * (n * rec + blocks * 65536)
    # take the blocks' bytes out (they may have been split around other records)
    small = data.replace(b"b", b"")
    for w in range(3):
        small = small.replace(b"%d:BLOCK:" % w, b"")
    recs = small.split(b"\n")[:-1]
    seen = {0: [], 1: [], 2: []}
    whole = 0
    for r in recs:
        if len(r) == rec - 1 and r[1:2] == b":" and r.endswith(b"x" * (rec - 10)):
            whole += 1
            seen[int(r[0:1])].append(int(r[2:8]))
    ok = len(data) == want and whole == 3 * n and all(seen[w] == list(range(n)) for w in seen) and rcs == [0, 0, 0]
    if not ok:
        print("concurrent writers: %d bytes (want %d), %d whole records (want %d)" % (len(data), want, whole, 3 * n),
              file=sys.stderr)
    return ok, "concurrent-writers"


def main():
    results = [case_write_in_turn(), case_concurrent_writers(), case_fork_after_accept(), case_child_exits_silently(), case_parent_closes_child_exits(),
               case_child_closes_parent_exits(), case_client_forks(), case_send_after_peer_close(),
               case_shutdown_by_other_process(), case_uncork_after_peer_close(), case_shut_both_by_other_process()]
    bad = [name for ok, name in results if not ok]
    print("%d fork cases, failed: %s" % (len(results), ", ".join(bad) or "none"))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
