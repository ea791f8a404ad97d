#!/usr/bin/env python3
# A transcript of what epoll_ctl(2) and epoll_wait(2) say for a listener registered with
# EPOLLEXCLUSIVE (and without), in many orders: flags combined with it, ADD / MOD / DEL
# in every order, several sets, sets closed without a DEL and their numbers reused, the
# listener in an exclusive and a normal set, closed while registered, dup / dup2 of it,
# fork (the child closes it, the parent closes it). tests/test-smcrun-apps.sh runs it
# over plain TCP and under smcrun and compares the two transcripts line by line: any
# difference is a bug. (Written by a fresh-user test of 2026-12-02, which found five
# differences this way.)
import ctypes
import errno
import os
import select
import socket
import time

E = select
EX = select.EPOLLEXCLUSIVE
SETTLE = 0.3  # s for a connection to reach the listener


def out(*a):
    print(*a, flush=True)


def L(backlog=64):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    s.listen(backlog)
    s.setblocking(False)
    return s


def ctl(ep, op, fd, ev=0):
    try:
        if op == "add":
            ep.register(fd, ev)
        elif op == "mod":
            ep.modify(fd, ev)
        else:
            ep.unregister(fd)
        return "0"
    except OSError as e:
        return errno.errorcode[e.errno]


def conn(ls):
    c = socket.create_connection(ls.getsockname())
    time.sleep(SETTLE)
    return c


def poll(ep, t=SETTLE):
    return sorted(ep.poll(t))


def acc(ls):
    n = 0
    while True:
        try:
            s, _ = ls.accept()
            s.close()
            n += 1
        except BlockingIOError:
            return n


def case(name):
    out("==", name)


case("flags: ONESHOT|EX, RDHUP|EX, OUT|EX, ET|EX, IN only EX, PRI|EX")
for nm,fl in [("ONESHOT",E.EPOLLIN|E.EPOLLONESHOT|EX),("RDHUP",E.EPOLLIN|E.EPOLLRDHUP|EX),("OUT",E.EPOLLIN|E.EPOLLOUT|EX),("ET",E.EPOLLIN|E.EPOLLET|EX),("EXonly",EX),("PRI",E.EPOLLIN|E.EPOLLPRI|EX)]:
    ls=L(); ep=E.epoll(); r=ctl(ep,"add",ls,fl); out(nm,"add",r)
    fd=ls.fileno()
    out(nm,"idle poll",poll(ep,0.1))
    c=conn(ls); out(nm,"after conn poll",poll(ep)); out(nm,"again poll", poll(ep,0.1)); out(nm,"accepted",acc(ls)); out(nm,"after accept",poll(ep,0.1))
    c.close(); ep.close(); ls.close()

case("ctl ops")
ls=L(); ep=E.epoll(); fd=ls.fileno()
out("add",ctl(ep,"add",ls,E.EPOLLIN|EX)); out("add2",ctl(ep,"add",ls,E.EPOLLIN|EX)); out("add2 nonex",ctl(ep,"add",ls,E.EPOLLIN))
out("mod",ctl(ep,"mod",ls,E.EPOLLIN)); out("mod ex",ctl(ep,"mod",ls,E.EPOLLIN|EX))
out("del",ctl(ep,"del",ls)); out("del2",ctl(ep,"del",ls)); out("mod after del",ctl(ep,"mod",ls,E.EPOLLIN))
out("re-add",ctl(ep,"add",ls,E.EPOLLIN|EX)); c=conn(ls); out("poll",poll(ep)); acc(ls); c.close()
out("del",ctl(ep,"del",ls)); out("add nonex",ctl(ep,"add",ls,E.EPOLLIN)); out("mod nonex->ex",ctl(ep,"mod",ls,E.EPOLLIN|EX)); out("mod nonex",ctl(ep,"mod",ls,E.EPOLLIN|E.EPOLLET))
c=conn(ls); out("poll",poll(ep)); acc(ls); c.close(); ep.close(); ls.close()

case("two events one wait: 2 conns")
ls=L(); ep=E.epoll(); ctl(ep,"add",ls,E.EPOLLIN|EX); c1=conn(ls); c2=conn(ls); out("poll",poll(ep)); out("acc",acc(ls)); out("poll",poll(ep,0.1)); c1.close(); c2.close(); ep.close(); ls.close()

case("ET|EX: 2 conns, accept one")
ls=L(); ep=E.epoll(); ctl(ep,"add",ls,E.EPOLLIN|E.EPOLLET|EX); c1=conn(ls); c2=conn(ls)
out("poll",poll(ep)); s,_=ls.accept(); out("poll after 1 accept",poll(ep,0.1)); c3=conn(ls); out("poll after c3",poll(ep)); out("acc",acc(ls)); 
for c in (c1,c2,c3): c.close()
ep.close(); ls.close()

case("more than 4 sets")
ls=L(); eps=[E.epoll() for i in range(6)]
for i,ep in enumerate(eps): out("add",i,ctl(ep,"add",ls,E.EPOLLIN|EX))
for i,ep in enumerate(eps): out("mod",i,ctl(ep,"mod",ls,E.EPOLLIN))
c=conn(ls)
for i,ep in enumerate(eps): out("poll",i,len(poll(ep,0.1)))
acc(ls); c.close()
for i,ep in enumerate(eps): out("del",i,ctl(ep,"del",ls))
for ep in eps: ep.close()
ls.close()

case("4 sets closed w/o DEL, then new sets (different numbers) ")
ls=L(); keep=[os.open("/dev/null",0) for i in range(1)]
tmp=[E.epoll() for i in range(4)]
for ep in tmp: ctl(ep,"add",ls,E.EPOLLIN|EX)
hold=[os.open("/dev/null",0) for i in range(0)]
nums=[ep.fileno() for ep in tmp]
for ep in tmp: ep.close()
blk=[os.dup(0) for i in range(4)]  # occupy the old numbers
new=E.epoll(); out("new add",ctl(new,"add",ls,E.EPOLLIN|EX)); out("new mod",ctl(new,"mod",ls,E.EPOLLIN))
new.close(); ls.close()
for b in blk: os.close(b)

case("close epfd, reuse number, add again")
ls=L(); ep=E.epoll(); n=ep.fileno(); ctl(ep,"add",ls,E.EPOLLIN|EX); ep.close(); ep2=E.epoll(); out("same number",ep2.fileno()==n)
out("add",ctl(ep2,"add",ls,E.EPOLLIN|EX)); out("mod",ctl(ep2,"mod",ls,E.EPOLLIN)); c=conn(ls); out("poll",poll(ep2)); acc(ls); c.close(); out("del",ctl(ep2,"del",ls)); ep2.close(); ls.close()

case("close epfd, reuse number as non-epoll")
ls=L(); ep=E.epoll(); n=ep.fileno(); ctl(ep,"add",ls,E.EPOLLIN|EX); ep.close(); r,w=os.pipe(); out("reuse",r==n)
import ctypes
libc=ctypes.CDLL(None,use_errno=True)
evb=(ctypes.c_uint8*12)()
rc=libc.epoll_ctl(r,2,ls.fileno(),None); out("DEL on pipe fd", rc, errno.errorcode.get(ctypes.get_errno(),0) if rc else "")
rc=libc.epoll_ctl(r,3,ls.fileno(),ctypes.byref(evb)); out("MOD on pipe fd", rc, errno.errorcode.get(ctypes.get_errno(),0) if rc else "")
os.close(r); os.close(w); ls.close()

case("listener in exclusive set and normal set")
ls=L(); a=E.epoll(); b=E.epoll(); ctl(a,"add",ls,E.EPOLLIN|EX); ctl(b,"add",ls,E.EPOLLIN); c=conn(ls); out("a",poll(a)==[(ls.fileno(),E.EPOLLIN)], "b",poll(b)==[(ls.fileno(),E.EPOLLIN)]); acc(ls); c.close(); out("a",poll(a,0.1),"b",poll(b,0.1)); a.close(); b.close(); ls.close()

case("close listener while registered, then conn attempt")
ls=L(); addr=ls.getsockname(); ep=E.epoll(); ctl(ep,"add",ls,E.EPOLLIN|EX); fd=ls.fileno(); ls.close()
try: c=socket.create_connection(addr,timeout=1); out("connect ok?!"); c.close()
except OSError as e: out("connect", errno.errorcode[e.errno])
out("poll",poll(ep,0.1)); ep.close()

case("dup of listener")
ls=L(); d=ls.dup(); ep=E.epoll()
out("add orig",ctl(ep,"add",ls,E.EPOLLIN|EX)); out("add dup",ctl(ep,"add",d,E.EPOLLIN|EX))
c=conn(ls); out("poll", [ (f==ls.fileno() and "orig" or f==d.fileno() and "dup" or f, e) for f,e in poll(ep)]); acc(ls); c.close()
out("del dup",ctl(ep,"del",d)); out("mod orig",ctl(ep,"mod",ls,E.EPOLLIN))
out("close orig");
fdo=ls.fileno(); ls.detach(); os.close(fdo)
c=conn(d); out("poll after orig closed",[ (f==fdo and "orig" or f==d.fileno() and "dup" or f, e) for f,e in poll(ep)]); acc(d); c.close()
ep.close(); d.close()

case("dup2 listener onto another number, register dup only, close orig")
ls=L(); ep=E.epoll(); nd=os.dup2(ls.fileno(), 50); out("add dup",ctl(ep,"add",50,E.EPOLLIN|EX)); ls.close()
addr=socket.socket(fileno=os.dup(50)); 
c=socket.create_connection(addr.getsockname()); time.sleep(SETTLE); out("poll",poll(ep)); addr.setblocking(False); out("acc",acc(addr)); c.close(); out("del",ctl(ep,"del",50)); os.close(50); addr.close(); ep.close()

case("close listener registered in set, fd number reused by new listener, DEL")
ls=L(); ep=E.epoll(); n=ls.fileno(); ctl(ep,"add",ls,E.EPOLLIN|EX); ls.close(); ls2=L(); out("same",ls2.fileno()==n); out("del new",ctl(ep,"del",ls2)); out("add new",ctl(ep,"add",ls2,E.EPOLLIN|EX)); c=conn(ls2); out("poll",poll(ep)); acc(ls2); c.close(); ep.close(); ls2.close()


out("== register orig, close a dup")
ls=L(); d=ls.dup(); ep=E.epoll(); ep.register(ls,E.EPOLLIN|EX); d.close()
c=conn(ls); out("poll",ep.poll(0.3)); out("acc",acc(ls)); c.close(); ep.close(); ls.close()
out("== fork after registering; child closes listener and exits; parent keeps getting conns")
ls=L(); ep=E.epoll(); ep.register(ls,E.EPOLLIN|EX)
pid=os.fork()
if pid==0:
    ls.close(); ep.close(); os._exit(0)
os.waitpid(pid,0)
c=conn(ls); out("poll",ep.poll(0.3)); out("acc",acc(ls)); c.close()
out("== fork; child closes listener but keeps running; parent DEL then ADD")
pid=os.fork()
if pid==0:
    ls.close(); time.sleep(1.5); os._exit(0)
time.sleep(0.2)
try: ep.unregister(ls); out("del 0")
except OSError as e: out("del",errno.errorcode[e.errno])
try: ep.register(ls,E.EPOLLIN|EX); out("add 0")
except OSError as e: out("add",errno.errorcode[e.errno])
c=conn(ls); out("poll",ep.poll(0.3)); out("acc",acc(ls)); c.close()
os.waitpid(pid,0)
out("== parent closes listener after fork, child keeps it")
ls2=L(); addr=ls2.getsockname(); ep2=E.epoll(); ep2.register(ls2,E.EPOLLIN|EX)
r,w=os.pipe()
pid=os.fork()
if pid==0:
    epc=E.epoll(); epc.register(ls2,E.EPOLLIN|EX); os.write(w,b"r")
    evs=epc.poll(3); n=acc(ls2); os.write(w,("%d %d"%(len(evs),n)).encode()); os._exit(0)
os.read(r,1); ls2.close(); time.sleep(0.1)
c=socket.create_connection(addr); time.sleep(SETTLE)
out("parent poll", [e for f,e in ep2.poll(SETTLE)])
out("child", os.read(r,100)); os.waitpid(pid,0); c.close()
out("== ADD without the flag, then with it; with it, then without")
ls = L()
ep = E.epoll()
out("add", ctl(ep, "add", ls, E.EPOLLIN), "add ex", ctl(ep, "add", ls, E.EPOLLIN | EX))
c = conn(ls)
out("poll", len(poll(ep)), "acc", acc(ls))
c.close()
out("del", ctl(ep, "del", ls), "add ex", ctl(ep, "add", ls, E.EPOLLIN | EX), "add", ctl(ep, "add", ls, E.EPOLLIN))
out("del", ctl(ep, "del", ls), "del", ctl(ep, "del", ls))
ep.close()
ls.close()
out("== a thread waits in epoll_wait while another closes the listener (5 times each)")
import threading
for flags in (E.EPOLLIN | EX, E.EPOLLIN):
    seen = []
    for _ in range(5):
        ls = L()
        ep = E.epoll()
        ep.register(ls, flags)
        res = []
        t = threading.Thread(target=lambda: res.append(ep.poll(SETTLE)))
        t.start()
        time.sleep(0.1)
        ls.close()
        t.join()
        seen.append(len(res[0]))
        ep.close()
    out("exclusive" if flags & EX else "plain", "events seen by the waiter", seen)
out("== a program that closes or replaces descriptors it did not open, then exits")
import subprocess
import sys
child = """
import os, socket
before = set(os.listdir("/proc/self/fd"))
ls = socket.socket(); ls.bind(("127.0.0.1", 0)); ls.listen(8)
new = sorted(int(f) for f in set(os.listdir("/proc/self/fd")) - before if int(f) != ls.fileno())
nul = os.open("/dev/null", os.O_RDONLY)
for f in new:
    if f != nul:
        os.dup2(nul, f)
"""
try:
    p = subprocess.run([sys.executable, "-c", child], timeout=10, capture_output=True)
    out("exit", p.returncode)
except subprocess.TimeoutExpired:
    out("no exit within 10 s")
out("done")
