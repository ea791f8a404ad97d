#!/usr/bin/env python3
# Writability after a send that was whole but left less than half of the peer's ring
# free: the library does not plug X at that send (a client that sends a request and
# waits for the reply never asks for POLLOUT), the first wait for POLLOUT does
# (libsmcproto/ring.h smc_ring_plug_owed). Checked under smcrun (SMC_EXPECT=1):
#   - poll, select, ppoll-free epoll (level-triggered, edge-triggered with EPOLLIN,
#     one-shot) do not report the socket writable then, with a zero timeout and with
#     one of 200 ms, which they wait out without spinning (CPU time);
#   - once the peer has read everything, each of them reports it writable: a poll
#     already asleep wakes, the level-triggered set reports EPOLLOUT, the
#     edge-triggered one an edge, the one-shot one (armed again after the event it
#     had no right to) its event; every byte arrives.
# Over TCP (no SMC_EXPECT) the sizes of its buffers are not the ring's: only the
# second part (everything writable once the peer read all) is checked.
# Prints one line; exit status 0 only if every case held.
import os
import resource
import select
import socket
import threading
import time

import smcapp

fails = []
smc = smcapp.EXPECT_SMC


def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def loaded():
    """a fresh connection and a whole send of 3/4 of the ring (TCP: 32 KiB)"""
    c, s = smcapp.pair()
    c.setblocking(False)
    if smc:
        n = c.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) // 2 * 3 // 4  # (twice the ring)
    else:
        n = 32 << 10
    data = bytes(range(256)) * (n // 256)
    sent = c.send(data)
    if sent != len(data):
        fails.append("the send was not whole: %d of %d" % (sent, len(data)))
    return c, s, data[:sent]


def drain(s, want):
    got = bytearray()
    while len(got) < len(want):
        got += s.recv(1 << 20)
    if got != want:
        fails.append("the bytes read differ from those sent")


def epoll_of(c, ev):
    ep = select.epoll()
    ep.register(c.fileno(), ev)
    return ep


def poll_of(c):
    p = select.poll()
    p.register(c.fileno(), select.POLLOUT)
    return p


# each wait first on a fresh connection: the first one after the send plugs X
WAITS = (("poll", lambda c, t: poll_of(c).poll(t * 1000)),
         ("select", lambda c, t: select.select([], [c], [], t)[1]),
         ("epoll level-triggered", lambda c, t: [e for _, e in epoll_of(c, select.EPOLLOUT).poll(t)]),
         ("epoll edge-triggered", lambda c, t: [e for _, e in epoll_of(
             c, select.EPOLLIN | select.EPOLLOUT | select.EPOLLET).poll(t) if e & select.EPOLLOUT]),
         ("epoll one-shot", lambda c, t: [e for _, e in epoll_of(
             c, select.EPOLLOUT | select.EPOLLONESHOT).poll(t)]))
if smc:
    c0, t0 = cpu(), time.monotonic()
    for name, wait in WAITS:
        for tmo in (0, 0.2):
            c, s, data = loaded()
            if wait(c, tmo):
                fails.append("%s (timeout %g s) reports writable" % (name, tmo))
            drain(s, data)
            c.close()
            s.close()
    took, used = time.monotonic() - t0, cpu() - c0
    if took < 0.9:
        fails.append("the 200 ms waits ended early: %.2f s for five" % took)
    if used > 0.4:
        fails.append("the waits spun: %.2f s of CPU in %.2f s" % (used, took))

c, s, data = loaded()
lt = epoll_of(c, select.EPOLLOUT)
et = epoll_of(c, select.EPOLLIN | select.EPOLLOUT | select.EPOLLET)
one = epoll_of(c, select.EPOLLOUT | select.EPOLLONESHOT)
if smc:
    for name, ep in (("level-triggered", lt), ("edge-triggered", et), ("one-shot", one)):
        if [e for _, e in ep.poll(0.1) if e & select.EPOLLOUT]:
            fails.append("epoll %s, registered before: reports EPOLLOUT" % name)

# a poll asleep in another thread wakes once the peer reads everything
woke = []


def sleeper():
    q = select.poll()
    q.register(c.fileno(), select.POLLOUT)
    t = time.monotonic()
    r = q.poll(5000)
    woke.append((r, time.monotonic() - t))


th = threading.Thread(target=sleeper)
th.start()
time.sleep(0.1)
drain(s, data)
th.join()
if not woke or not woke[0][0] or woke[0][1] > 4:
    fails.append("the sleeping poll did not wake for POLLOUT: %s" % (woke,))
for name, ep in (("level-triggered", lt), ("edge-triggered", et), ("one-shot", one)):
    evs = ep.poll(2)
    if not any(e & select.EPOLLOUT for _, e in evs):
        fails.append("epoll %s: no EPOLLOUT after the peer read all (%s)" % (name, evs))
if not select.select([], [c], [], 2)[1]:
    fails.append("select: not writable after the peer read all")
smcapp.finish("pollout-owed", fails,
              "%s; after the peer read all, poll (asleep), epoll (level, edge, one-shot) and "
              "select report it writable, every byte read"
              % ("a whole send of 3/4 of the ring: poll, select, epoll (level, edge, one-shot) "
                 "not writable, each the first wait after it, 200 ms waits without spinning"
                 if smc else "TCP"), lt, et, one, c, s)
