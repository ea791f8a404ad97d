# An HTTP/1.0-style server whose response ends at connection close, and which exits
# without calling close() (os._exit): the client must see all data and then EOF, as
# over TCP (the kernel closes a dead process's sockets orderly), not ECONNRESET.
import os, socket, sys

srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(1)
port = srv.getsockname()[1]
body = b"x" * 100000
pid = os.fork()
if pid == 0:
    c, _ = srv.accept()
    c.recv(100)
    c.sendall(b"HTTP/1.0 200 OK\r\n\r\n" + body)
    os._exit(0)
srv.close()
cl = socket.create_connection(("127.0.0.1", port))
cl.sendall(b"GET / HTTP/1.0\r\n\r\n")
got = b""
try:
    while True:
        d = cl.recv(65536)
        if not d:
            break
        got += d
except ConnectionResetError:
    print("FAIL: ECONNRESET after %d bytes" % len(got))
    sys.exit(1)
os.waitpid(pid, 0)
ok = got.endswith(body) and got.startswith(b"HTTP/1.0 200 OK")
print("exit-without-close:", "ok" if ok else "FAIL %d bytes" % len(got))
sys.exit(0 if ok else 1)
