#!/usr/bin/env python3
# A process that changes its root before its first SMC call (vsftpd's session process
# listens for each passive data connection inside its chroot): its connections must
# still be SMC-D (smcd's socket is a path outside the new root: the library connects
# to smcd at chroot(2)). Listens, connects and echoes 1 MiB + 3 inside an empty
# chroot. Root only (chroot needs CAP_SYS_CHROOT). tests/test-smcrun-apps.sh runs it
# under smcrun and checks smcd's counter.
import encodings.idna  # noqa: F401 (name lookups inside the chroot need it loaded)
import hashlib
import os
import socket
import sys
import tempfile
import threading

if os.geteuid() != 0:
    print("skipped: not root")
    sys.exit(77)
root = tempfile.mkdtemp(prefix="smcd-test-chroot-")
pid = os.fork()
if pid:  # the parent stays outside, to remove the directory
    _, st = os.waitpid(pid, 0)
    os.rmdir(root)
    sys.exit(os.waitstatus_to_exitcode(st))
data = os.urandom(1024 * 1024 + 3)
want = hashlib.sha256(data).hexdigest()
os.chroot(root)
os.chdir("/")
ls = socket.socket()
ls.bind(("127.0.0.1", 0))
ls.listen(4)
c = socket.socket()
c.connect(ls.getsockname())
s, _ = ls.accept()
t = threading.Thread(target=lambda: (c.sendall(data), c.shutdown(socket.SHUT_WR)))
t.start()
got = bytearray()
while True:
    b = s.recv(65536)
    if not b:
        break
    got += b
t.join()
ok = hashlib.sha256(got).hexdigest() == want
print("inside a chroot: %d bytes, %s" % (len(got), "intact" if ok else "CORRUPT"))
sys.exit(0 if ok else 1)
