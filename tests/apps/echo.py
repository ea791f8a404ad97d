# SPDX-License-Identifier: LGPL-2.1-or-later
# Echo server and client in separate processes, for tests/test-real-apps.sh and
# bench/apps.sh (both run them under smcrun and plain).
#
#   echo.py server --kind socket|asyncio --port-file FILE
#       listens on 127.0.0.1 (an ephemeral port, written to FILE once listening) and
#       echoes every byte back; 'socket' is a plain blocking server (socketserver, a
#       thread per connection, recv/sendall), 'asyncio' the asyncio streams server
#       (nonblocking sockets, epoll). Exits 0 on SIGINT or SIGTERM.
#   echo.py client --port PORT [--conns N] [--rounds R]
#       N connections at once (threads), each sending R messages of sizes cycling
#       through 1 B .. 256 KiB (larger than a ring) and checking that exactly the same
#       bytes come back; prints one JSON line {"conns", "rounds", "bytes", "errors"};
#       exit 0 only when errors is 0.
#   echo.py client --port PORT --pingpong SIZE --time SECONDS
#       one connection, SIZE-byte ping-pong for SECONDS; prints JSON with "rtt_per_s"
#       (round trips per second) and "errors".
import argparse, asyncio, json, os, signal, socket, socketserver, sys, threading, time

import smcapp

SIZES = [1, 100, 1400, 4096, 65536, 65537, 262144, 7]


def serve_socket(port_file):
    class Handler(socketserver.BaseRequestHandler):
        def handle(self):
            while True:
                d = self.request.recv(1 << 16)
                if not d:
                    break
                self.request.sendall(d)

    class Server(socketserver.ThreadingTCPServer):
        daemon_threads = True
        allow_reuse_address = True

    srv = Server(("127.0.0.1", 0), Handler)
    write_port(port_file, srv.server_address[1])
    try:
        srv.serve_forever()
    finally:
        srv.server_close()


def serve_asyncio(port_file):
    async def handle(r, w):
        try:
            while True:
                d = await r.read(1 << 16)
                if not d:
                    break
                w.write(d)
                await w.drain()
        finally:
            w.close()

    async def main():
        srv = await asyncio.start_server(handle, "127.0.0.1", 0)
        write_port(port_file, srv.sockets[0].getsockname()[1])
        async with srv:
            await srv.serve_forever()

    asyncio.run(main())


def write_port(path, port):
    with open(path + ".tmp", "w") as f:
        f.write("%d\n" % port)
    os.rename(path + ".tmp", path)


def client_check(port, conns, rounds):
    errors, total = [], [0]
    lock = threading.Lock()

    def one(i):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=20)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for r in range(rounds):
                n = SIZES[(i + r) % len(SIZES)]
                msg = os.urandom(n)
                # send from a thread: a message larger than both rings would block
                # while the server waits for us to read its echo
                t = threading.Thread(target=s.sendall, args=(msg,))
                t.start()
                got = smcapp.recv_exact(s, n)
                t.join()
                if got != msg:
                    raise ValueError("round %d: %d bytes differ" % (r, n))
                with lock:
                    total[0] += n
            s.shutdown(socket.SHUT_WR)
            if s.recv(1):
                raise ValueError("data after the last echo")
            s.close()
        except Exception as e:  # reported, counted
            with lock:
                errors.append("conn %d: %r" % (i, e))

    ts = [threading.Thread(target=one, args=(i,)) for i in range(conns)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    print(json.dumps({"conns": conns, "rounds": rounds, "bytes": total[0],
                      "errors": len(errors), "first_error": errors[0] if errors else None}))
    return 0 if not errors else 1


def client_pingpong(port, size, secs):
    s = socket.create_connection(("127.0.0.1", port), timeout=20)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    msg = b"x" * size
    n, errors = 0, 0
    t0 = time.monotonic()
    end = t0 + secs
    while True:
        s.sendall(msg)
        if smcapp.recv_exact(s, size) != msg:
            errors += 1
        n += 1
        if n % 64 == 0 and time.monotonic() >= end:
            break
    dt = time.monotonic() - t0
    s.close()
    print(json.dumps({"size": size, "round_trips": n, "seconds": round(dt, 3),
                      "rtt_per_s": round(n / dt, 1), "errors": errors}))
    return 0 if not errors else 1


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["server", "client"])
    p.add_argument("--kind", choices=["socket", "asyncio"], default="socket")
    p.add_argument("--port-file")
    p.add_argument("--port", type=int)
    p.add_argument("--conns", type=int, default=4)
    p.add_argument("--rounds", type=int, default=100)
    p.add_argument("--pingpong", type=int, metavar="SIZE")
    p.add_argument("--time", type=float, default=2.0)
    a = p.parse_args()
    if a.mode == "server":
        if not a.port_file:
            p.error("server needs --port-file")
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        try:
            (serve_socket if a.kind == "socket" else serve_asyncio)(a.port_file)
        except KeyboardInterrupt:
            pass
        return 0
    if not a.port:
        p.error("client needs --port")
    if a.pingpong:
        return client_pingpong(a.port, a.pingpong, a.time)
    return client_check(a.port, a.conns, a.rounds)


sys.exit(main())
