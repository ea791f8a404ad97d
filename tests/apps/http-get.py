# SPDX-License-Identifier: LGPL-2.1-or-later
# http-get.py PORT PATH COUNT: COUNT GET requests for PATH on one keep-alive connection
# to 127.0.0.1:PORT (http.client); prints one line per response: STATUS LENGTH SHA256.
# Exit 1 on a connection error. Used by tests/test-real-apps.sh to check bodies
# response after response on one connection (wrk checks no bodies).
import hashlib, http.client, sys

port, path, count = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
for _ in range(count):
    c.request("GET", path)
    r = c.getresponse()
    body = r.read()
    print(r.status, len(body), hashlib.sha256(body).hexdigest())
c.close()
