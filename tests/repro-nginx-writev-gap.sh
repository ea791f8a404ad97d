#!/bin/bash
# Reproducer of an OPEN data bug (README "Known bugs"; not run by CI): nginx under
# smcrun, sendfile off (the body written with writev), serving a 1 MiB file over
# keep-alive to wrk under smcrun with 2 connections in one wrk thread, with the CPUs
# busy. Now and then a response reaches wrk with a gap: a header "HTTP/1.1 200" where
# the body should go on (wrk counts it as a read error). A preloaded checker
# (/tmp/rdchk.so, built here) compares every body with the file and prints MISMATCH.
# Seen since before issue 5 (commit 3dacaea too); not seen with sendfile on, with one
# connection per wrk process, nor with python clients.
# Usage: [BUSY=N] tests/repro-nginx-writev-gap.sh BUILD_DIR [ROUNDS]   (root; nginx, wrk,
# gcc; BUSY: CPU-burning loops beside it, default 3: how often it shows depends on load)
set -u
b=$(realpath "$1") rounds=${2:-5}
d=$(mktemp -d /tmp/smcd-repro.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$d"' EXIT
chmod 755 "$d"
mkdir -p "$d/www" "$d/logs" "$d/tmp"
head -c 1048576 /dev/urandom >"$d/www/1m"
chmod 644 "$d/www/1m"
cat >"$d/chk.c" <<C
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
static unsigned char *want; static size_t wl;
struct st { int body_on; size_t body; char hdr[4096]; size_t hl; long resp; } S[4096];
ssize_t read(int fd, void *b, size_t n) {
        static ssize_t (*r)(int, void *, size_t);
        if (!r) { int f = open("$d/www/1m", O_RDONLY); want = malloc(1 << 20); wl = pread(f, want, 1 << 20, 0); close(f);
                  r = dlsym(RTLD_NEXT, "read"); }
        ssize_t x = r(fd, b, n); int e = errno;
        if (fd > 2 && fd < 4096 && x > 0) {
                struct st *s = &S[fd]; unsigned char *p = b; size_t k = 0;
                while (k < (size_t) x) {
                        if (!s->body_on) {
                                s->hdr[s->hl++] = p[k++];
                                if (s->hl >= 4 && !memcmp(s->hdr + s->hl - 4, "\r\n\r\n", 4)) { s->body_on = 1; s->body = 0; s->hl = 0; }
                                else if (s->hl >= 4000) s->hl = 0;
                        } else {
                                size_t m = x - k; if (m > wl - s->body) m = wl - s->body;
                                if (memcmp(p + k, want + s->body, m)) {
                                        fprintf(stderr, "MISMATCH fd %d response %ld at body byte %zu: %.12s\n", fd, s->resp, s->body, (char *) p + k);
                                        s->body_on = 0; s->hl = 0; s->resp++; break;
                                }
                                s->body += m; k += m;
                                if (s->body == wl) { s->body_on = 0; s->resp++; }
                        }
                }
        }
        errno = e; return x;
}
C
gcc -shared -fPIC -O2 -o "$d/chk.so" "$d/chk.c" -ldl || exit 1
export SMCD_RUNTIME_DIR=$d
"$b/smcd/smcd" --no-bus --runtime-dir "$d" --state-file "$d/t.json" >"$d/smcd.log" 2>&1 &
for _ in $(seq 100); do [ -S "$d/smcd.sock" ] && break; sleep 0.05; done
port=$((20000 + RANDOM % 20000))
cat >"$d/nginx.conf" <<C
daemon off; master_process on; worker_processes 2; pid $d/nginx.pid; error_log $d/logs/error.log;
events { worker_connections 1024; }
http { access_log off; sendfile off; tcp_nopush on; client_body_temp_path $d/tmp;
       server { listen 127.0.0.1:$port; root $d/www; } }
C
LD_PRELOAD=$b/libsmcproto/libsmcrun.so nginx -c "$d/nginx.conf" -p "$d" >/dev/null 2>&1 &
sleep 1
for _ in $(seq "${BUSY:-3}"); do timeout $((rounds * 3 + 5)) sh -c 'while :; do :; done' & done
bad=0
for i in $(seq "$rounds"); do
        n=$(LD_PRELOAD=$d/chk.so:$b/libsmcproto/libsmcrun.so wrk -t1 -c2 -d2s "http://127.0.0.1:$port/1m" 2>&1 |
            tee "$d/wrk.$i" | grep -a -c MISMATCH)
        echo "round $i: $n mismatching responses; $(grep -a -E 'Requests/sec|errors' "$d/wrk.$i" | tr -s ' ' | tr '\n' ' ')"
        bad=$((bad + n))
done
echo "total: $bad mismatching responses"
[ "$bad" = 0 ]
