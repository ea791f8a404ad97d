/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * smcr-xfer: a checked transfer over the client library, both directions, for the
 * SMC-R tests (tests/test-smcr-vm.sh). Each connection: the client sends a 16-byte
 * header {size, seed} (little endian) and @size bytes of a xorshift stream seeded with
 * seed; the server checks every byte and answers with @size bytes of the stream of
 * seed ^ 0x5a5a, which the client checks. Both print one line per connection:
 *   "ok <role> size=N mode=SMCR|SMCD|TCP reason=0x..."  or  "FAIL <role> ...".
 *
 *   smcr-xfer server ADDR PORT COUNT              accept COUNT connections (threads)
 *   smcr-xfer client ADDR PORT SIZE[,SIZE...] [PARALLEL]
 *        one connection per size; PARALLEL connections at a time (threads)
 *   smcr-xfer hold ADDR PORT SIZE                 connect, send SIZE bytes slowly
 *        (1 KiB per 10 ms) and never finish: for kill -9 / link-down tests
 * Exit status 0 when every connection was ok and (env SMCR_XFER_MODE=SMCR) in that mode.
 * SMCR_XFER_SHUTDOWN=1: the client half-closes (SHUT_WR) after sending, and after the
 *   reply checks end of stream and the kernel's POLLHUP (both directions shut).
 * SMCR_XFER_TOGETHER=1: the connections of a batch all connect before transferring.
 * SMCR_XFER_REUSEPORT=1: the server's socket has SO_REUSEPORT (several servers on one
 *   port, each accepting its share: COUNT is then an upper bound, stop it with a signal).
 * SMCR_XFER_ACCEPT_AFTER=FILE: the server accepts once FILE exists (at most 60 s; the
 *   connections wait in the backlog, their handshakes for the accept).
 */

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "smcproto.h"

static const char *want_mode;
static atomic_int failures;
/* SMCR_XFER_TOGETHER=1: the connections of one batch all connect before any transfers,
 * so that they are open at the same time (300 at once: more than one link group) */
static bool together;
static pthread_barrier_t batch_barrier;

#define XFER_SEND smc_send
#define XFER_RECV smc_recv
#include "xfer-stream.h"

static const char *mode_name(int fd, unsigned *reason) {
        int mode = -1, rsn = 0;
        socklen_t l = sizeof(mode);

        (void) smc_getsockopt(fd, SOL_SMC, SMC_PROTO_MODE, &mode, &l);
        l = sizeof(rsn);
        (void) smc_getsockopt(fd, SOL_SMC, SMC_PROTO_FALLBACK_REASON, &rsn, &l);
        *reason = (unsigned) rsn;
        return mode == SMC_PROTO_MODE_SMCR ? "SMCR" : mode == SMC_PROTO_MODE_SMCD ? "SMCD"
                                                    : mode == SMC_PROTO_MODE_TCP  ? "TCP"
                                                                                  : "NONE";
}

static void report(const char *role, uint64_t size, int fd, int err, uint64_t bad_at) {
        unsigned reason = 0;
        const char *mode = fd >= 0 ? mode_name(fd, &reason) : "NONE";
        bool ok = err == 0 && (!want_mode || !strcmp(want_mode, mode));
        char line[256], extra[64] = "";

        if (!ok)
                atomic_fetch_add(&failures, 1);
        if (err == -EBADMSG)
                snprintf(extra, sizeof(extra), " first-bad-byte=%llu", (unsigned long long) bad_at);
        /* one write per line: the threads' lines never interleave */
        snprintf(line, sizeof(line), "%s %s size=%llu mode=%s reason=0x%08x%s%s%s\n", ok ? "ok" : "FAIL", role,
                 (unsigned long long) size, mode, reason, err ? " error=" : "", err ? strerror(-err) : "", extra);
        fputs(line, stdout);
        fflush(stdout);
}

static void *serve(void *arg) {
        int fd = (int) (intptr_t) arg, r;
        uint8_t hdr[16];
        uint64_t size = 0, seed = 0, bad = 0;

        r = recv_all(fd, hdr, sizeof(hdr));
        if (r == 0) {
                memcpy(&size, hdr, 8);
                memcpy(&seed, hdr + 8, 8);
                r = stream(fd, size, seed, false, &bad);
        }
        if (r == 0)
                r = stream(fd, size, seed ^ 0x5a5a, true, &bad);
        report("server", size, fd, r, bad);
        smc_close(fd);
        return NULL;
}

/* After our SHUT_WR and the server's close: end of stream, and the kernel's own
 * readiness of the descriptor (poll(2), not smc_poll()) says POLLHUP, as TCP's does
 * once both directions are shut (epoll(7) users see it). Returns 0 or -EPROTO. */
static int hup_check(int fd) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        uint8_t b;
        ssize_t n = smc_recv(fd, &b, 1, 0);

        if (n != 0) {
                fprintf(stderr, "client: no end of stream after the reply (%zd)\n", n);
                return -EPROTO;
        }
        for (int i = 0; i < 200 && !(p.revents & POLLHUP); i++)
                if (poll(&p, 1, 10) < 0)
                        return -errno;
        if (!(p.revents & POLLHUP)) {
                fprintf(stderr, "client: shut down both ways, but poll(2) says 0x%x, no POLLHUP\n", p.revents);
                return -EPROTO;
        }
        return 0;
}

static int make_addr(const char *a, const char *p, struct sockaddr_in *sin) {
        memset(sin, 0, sizeof(*sin));
        sin->sin_family = AF_INET;
        sin->sin_port = htons((uint16_t) atoi(p));
        return inet_pton(AF_INET, a, &sin->sin_addr) == 1 ? 0 : -EINVAL;
}

struct job {
        struct sockaddr_in sin;
        uint64_t size, seed;
        bool hold;
};

static void *client(void *arg) {
        struct job *j = arg;
        uint8_t hdr[16];
        uint64_t bad = 0;
        int fd, r;

        fd = smc_socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0) {
                report("client", j->size, -1, -errno, 0);
                return NULL;
        }
        r = smc_connect(fd, (struct sockaddr *) &j->sin, sizeof(j->sin)) < 0 ? -errno : 0;
        if (together)
                pthread_barrier_wait(&batch_barrier);
        if (r == 0 && j->hold) {
                /* a real header and the real stream, 1 KiB per 10 ms, never finishing in
                 * time: the server is in the middle of checking when we are killed */
                uint64_t rr = j->seed ? j->seed : 1;
                unsigned reason;
                uint8_t buf[1024];

                memcpy(hdr, &j->size, 8);
                memcpy(hdr + 8, &j->seed, 8);
                printf("connected mode=%s\n", mode_name(fd, &reason));
                fflush(stdout);
                r = send_all(fd, hdr, sizeof(hdr));
                while (r == 0) {
                        rng_fill(&rr, buf, sizeof(buf));
                        r = send_all(fd, buf, sizeof(buf));
                        usleep(10000);
                }
                report("client", j->size, fd, r, 0);
                return NULL;
        }
        if (r == 0) {
                memcpy(hdr, &j->size, 8);
                memcpy(hdr + 8, &j->seed, 8);
                r = send_all(fd, hdr, sizeof(hdr));
        }
        if (r == 0)
                r = stream(fd, j->size, j->seed, true, &bad);
        /* SMCR_XFER_SHUTDOWN=1: half-close after sending, as many clients do (the
         * peer sees EOF after the data, the reply still flows) */
        if (r == 0 && getenv("SMCR_XFER_SHUTDOWN") && *getenv("SMCR_XFER_SHUTDOWN") && smc_shutdown(fd, SHUT_WR) < 0)
                r = -errno;
        if (r == 0)
                r = stream(fd, j->size, j->seed ^ 0x5a5a, false, &bad);
        if (r == 0 && getenv("SMCR_XFER_SHUTDOWN") && *getenv("SMCR_XFER_SHUTDOWN"))
                r = hup_check(fd);
        report("client", j->size, fd, r, bad);
        smc_close(fd);
        return NULL;
}

int main(int argc, char **argv) {
        struct sockaddr_in sin;

        want_mode = getenv("SMCR_XFER_MODE");
        if (argc < 5 || make_addr(argv[2], argv[3], &sin) < 0) {
                fprintf(stderr, "usage: smcr-xfer server|client|hold ADDR PORT COUNT|SIZES [PARALLEL]\n");
                return 2;
        }
        if (!strcmp(argv[1], "server")) {
                int l = smc_socket(AF_INET, SOCK_STREAM, 0), one = 1, n = atoi(argv[4]);
                pthread_t *t = calloc((size_t) n, sizeof(*t));

                (void) smc_setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
                if (getenv("SMCR_XFER_REUSEPORT") && *getenv("SMCR_XFER_REUSEPORT") &&
                    smc_setsockopt(l, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0) {
                        perror("SO_REUSEPORT");
                        return 1;
                }
                if (l < 0 || smc_bind(l, (struct sockaddr *) &sin, sizeof(sin)) < 0 || smc_listen(l, 512) < 0) {
                        perror("listen");
                        return 1;
                }
                printf("listening\n");
                fflush(stdout);
                if (getenv("SMCR_XFER_ACCEPT_AFTER") && *getenv("SMCR_XFER_ACCEPT_AFTER"))
                        for (int w = 0; w < 1200 && access(getenv("SMCR_XFER_ACCEPT_AFTER"), F_OK) < 0; w++)
                                usleep(50000);
                for (int i = 0; i < n; i++) {
                        int fd = smc_accept(l, NULL, NULL);
                        if (fd < 0) {
                                perror("accept");
                                atomic_fetch_add(&failures, 1);
                                i--;
                                if (errno == ECONNABORTED)
                                        continue;
                                break;
                        }
                        pthread_create(&t[i], NULL, serve, (void *) (intptr_t) fd);
                }
                for (int i = 0; i < n; i++)
                        if (t[i])
                                pthread_join(t[i], NULL);
                smc_close(l);
                free(t);
        } else if (!strcmp(argv[1], "client") || !strcmp(argv[1], "hold")) {
                int par = argc > 5 ? atoi(argv[5]) : 1, n = 0;
                struct job jobs[1024];
                pthread_t t[1024];
                char *list = strdup(argv[4]), *save = NULL;

                for (char *s = strtok_r(list, ",", &save); s && n < 1024; s = strtok_r(NULL, ",", &save)) {
                        char *mul = strchr(s, 'x'); /* "300x4096": 300 connections of 4096 bytes */
                        int times = 1;
                        if (mul) {
                                times = atoi(s);
                                s = mul + 1;
                        }
                        for (int k = 0; k < times && n < 1024; k++, n++)
                                jobs[n] = (struct job) { .sin = sin, .size = strtoull(s, NULL, 0),
                                                         .seed = 0x9e3779b97f4a7c15ULL * (uint64_t) (n + 1),
                                                         .hold = !strcmp(argv[1], "hold") };
                }
                free(list);
                if (par < 1)
                        par = 1;
                together = getenv("SMCR_XFER_TOGETHER") && *getenv("SMCR_XFER_TOGETHER");
                for (int i = 0; i < n; i += par) {
                        int m = n - i < par ? n - i : par;
                        if (together)
                                pthread_barrier_init(&batch_barrier, NULL, (unsigned) m);
                        for (int k = 0; k < m; k++)
                                pthread_create(&t[k], NULL, client, &jobs[i + k]);
                        for (int k = 0; k < m; k++)
                                pthread_join(t[k], NULL);
                        if (together)
                                pthread_barrier_destroy(&batch_barrier);
                }
        } else
                return 2;
        return atomic_load(&failures) ? 1 : 0;
}
