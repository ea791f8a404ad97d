#!/usr/bin/env python3
# A nonblocking connect that fails (ECONNREFUSED) leaves a socket that may connect
# again, as TCP's: the next connect() reports ECONNABORTED (the kernel makes the
# socket unconnected), and the one after goes on (EINPROGRESS, then connected). Under
# smcrun that retry to an SMC listener gets SMC-D, as after a blocking connect that
# failed; before, it stayed TCP with the first attempt's reason (helper 113).
# Prints one line; exit status 0 only if all that held.
import errno
import os
import select
import socket
import struct
import sys


def main():
    under = "libsmcrun" in os.environ.get("LD_PRELOAD", "")
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    dead_port = dead.getsockname()[1]
    dead.close()  # nothing listens there now
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(4)
    s = socket.socket()
    s.setblocking(False)
    seen = [errno.errorcode.get(s.connect_ex(("127.0.0.1", dead_port)), "0")]
    select.select([], [s], [], 5)
    seen.append(errno.errorcode.get(s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR), "0"))
    seen.append(errno.errorcode.get(s.connect_ex(ls.getsockname()), "0"))
    seen.append(errno.errorcode.get(s.connect_ex(ls.getsockname()), "0"))
    select.select([], [s], [], 5)
    seen.append(errno.errorcode.get(s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR), "0"))
    a, _ = ls.accept()
    s.setblocking(True)
    s.sendall(b"after a refusal")
    a.settimeout(5)
    got = a.recv(100)
    want = ["EINPROGRESS", "ECONNREFUSED", "ECONNABORTED", "EINPROGRESS", "0"]
    mode = struct.unpack("i", s.getsockopt(286, 0x5301, 4))[0] if under else 1
    if seen != want or got != b"after a refusal" or mode != 1:
        print("reconnect: calls gave %s (TCP: %s), peer got %r, mode %d (want 1, SMC-D)" % (seen, want, got, mode))
        return 1
    print("reconnect: a refused nonblocking connect, then %s as TCP, and the retry is %s" %
          (" ".join(seen[2:4]), "SMC-D" if under else "connected"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
