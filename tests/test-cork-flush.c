/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The 200 ms push of bytes held back by TCP_CORK or MSG_MORE (socket.c, "The 200 ms
 * ceiling of a cork"), under concurrency, against a private smcd (argv[1]): THREADS
 * threads each make SMC-D connections over the library's API and, per round, send a
 * random number of pieces of random sizes with MSG_MORE (or under TCP_CORK), then
 * either
 *   - wait for the peer to see every byte with no further call on the sending
 *     socket (only the library's push thread can publish the last batch),
 *   - uncork / send a last piece without MSG_MORE at once (the queued push then
 *     finds nothing), or
 *   - close the sending socket while bytes are held and the push is queued (the
 *     close must take the entry away before the thread pushes a closed ring; the
 *     peer then sees the bytes sent, as at a close after an uncork, and EOF),
 * and checks every byte of the stream (pattern_check); then a fork child does the
 * same with connections of its own. Run in the ThreadSanitizer
 * build too (suite tsan): the push thread, the senders and the closes race on the
 * queue and the ring's tx_lock. TAP output.
 *
 *   test-cork-flush SMCD_BINARY
 */

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "smcproto.h"

#define THREADS 4
#define ROUNDS 24
#define PIECE_MAX 3000

static _Atomic int n_fail;
static _Atomic int n_waited, n_pushed_early, n_closed_held;

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...) {
        va_list ap;

        va_start(ap, fmt);
        printf("# ");
        vprintf(fmt, ap);
        printf("\n");
        va_end(ap);
        atomic_fetch_add(&n_fail, 1);
}

static int mode(int fd) {
        int m = -1;
        socklen_t l = sizeof(m);

        (void) smc_getsockopt(fd, SOL_SMC, SMC_PROTO_MODE, &m, &l);
        return m;
}

static int listener(uint16_t *port) {
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t sl = sizeof(sa);
        int l = smc_socket(AF_INET, SOCK_STREAM, 0);

        if (l < 0 || smc_bind(l, (struct sockaddr *) &sa, sizeof(sa)) < 0 || smc_listen(l, 16) < 0 ||
            smc_getsockname(l, (struct sockaddr *) &sa, &sl) < 0)
                return -1;
        *port = ntohs(sa.sin_port);
        return l;
}

/* Read @n bytes of stream @seed from offset @off on @fd, each poll waiting up to 3 s
 * (then: fail). Returns the bytes read. */
static size_t read_check(int fd, uint64_t seed, uint64_t off, size_t n, const char *what) {
        char buf[8192];
        size_t got = 0;

        while (got < n) {
                struct pollfd p = { .fd = fd, .events = POLLIN };
                ssize_t r;

                if (smc_poll(&p, 1, 3000) != 1) {
                        fail("%s: %zu of %zu bytes after 3 s", what, got, n);
                        break;
                }
                r = smc_recv(fd, buf, n - got < sizeof(buf) ? n - got : sizeof(buf), MSG_DONTWAIT);
                if (r <= 0) {
                        fail("%s: recv %zd (%s) at %zu of %zu", what, r, r < 0 ? strerror(errno) : "EOF", got, n);
                        break;
                }
                if (pattern_check(seed, off + got, buf, (size_t) r) >= 0) {
                        fail("%s: wrong bytes at %zu", what, (size_t) (off + got));
                        break;
                }
                got += (size_t) r;
        }
        return got;
}

static void *worker(void *arg) {
        uint64_t rnd = 0x9e3779b97f4a7c15ull * (uint64_t) (uintptr_t) arg + 1;
        uint16_t port;
        int l = listener(&port);
        char buf[PIECE_MAX];

        if (l < 0) {
                fail("thread %d: listener: %s", (int) (uintptr_t) arg, strerror(errno));
                return NULL;
        }
        for (int round = 0; round < ROUNDS; round++) {
                struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port),
                                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
                uint64_t seed = xorshift64s(&rnd), off = 0;
                int c = smc_socket(AF_INET, SOCK_STREAM, 0), a, one = 1, zero = 0;
                unsigned pieces = 1 + (unsigned) (xorshift64s(&rnd) % 6), how = (unsigned) (xorshift64s(&rnd) % 3);
                bool cork = xorshift64s(&rnd) & 1;
                char what[64];

                snprintf(what, sizeof(what), "thread %d round %d (%s, end %u)", (int) (uintptr_t) arg, round,
                         cork ? "TCP_CORK" : "MSG_MORE", how);
                if (c < 0 || smc_connect(c, (struct sockaddr *) &sa, sizeof(sa)) < 0 ||
                    (a = smc_accept(l, NULL, NULL)) < 0) {
                        fail("%s: connection: %s", what, strerror(errno));
                        if (c >= 0)
                                smc_close(c);
                        continue;
                }
                if (mode(c) != SMC_PROTO_MODE_SMCD)
                        fail("%s: not SMC-D (mode %d)", what, mode(c));
                if (cork)
                        (void) smc_setsockopt(c, IPPROTO_TCP, TCP_CORK, &one, sizeof(one));
                for (unsigned i = 0; i < pieces; i++) {
                        size_t n = 1 + (size_t) (xorshift64s(&rnd) % PIECE_MAX);

                        pattern_fill(seed, off, buf, n);
                        if (smc_send(c, buf, n, MSG_NOSIGNAL | (cork ? 0 : MSG_MORE)) != (ssize_t) n) {
                                fail("%s: send %zu: %s", what, n, strerror(errno));
                                break;
                        }
                        off += n;
                }
                switch (how) {
                case 0: /* nothing more: the push thread must publish the batch */
                        (void) read_check(a, seed, 0, off, what);
                        atomic_fetch_add(&n_waited, 1);
                        break;
                case 1: /* pushed at once (uncork, TCP_NODELAY); the queued push then
                         * finds nothing */
                        if (cork)
                                (void) smc_setsockopt(c, IPPROTO_TCP, TCP_CORK, &zero, sizeof(zero));
                        else
                                (void) smc_setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
                        (void) read_check(a, seed, 0, off, what);
                        atomic_fetch_add(&n_pushed_early, 1);
                        break;
                default: /* closed while held, at a random moment around the push */
                        sleep_ms((unsigned) (xorshift64s(&rnd) % 260));
                        smc_close(c);
                        c = -1;
                        if (read_check(a, seed, 0, off, what) == off) {
                                ssize_t r = smc_recv(a, buf, 1, 0);

                                if (r != 0)
                                        fail("%s: after the bytes: recv %zd, not EOF", what, r);
                        }
                        atomic_fetch_add(&n_closed_held, 1);
                        break;
                }
                if (c >= 0)
                        smc_close(c);
                smc_close(a);
        }
        smc_close(l);
        return NULL;
}

int main(int argc, char **argv) {
        struct smcd_instance smcd;
        pthread_t t[THREADS];

        if (argc < 2) {
                fprintf(stderr, "usage: %s SMCD_BINARY\n", argv[0]);
                return 2;
        }
        signal(SIGPIPE, SIG_IGN);
        if (smcd_start_for_api(&smcd, argv[1]) < 0)
                return 1;
        for (uintptr_t i = 0; i < THREADS; i++)
                if (pthread_create(&t[i], NULL, worker, (void *) i) != 0)
                        fail("pthread_create");
        for (int i = 0; i < THREADS; i++)
                pthread_join(t[i], NULL);
        /* a fork child (of a process whose push thread runs, with sockets that were
         * queued): it starts with no thread and an empty queue, and its own held
         * bytes are pushed by a thread of its own */
        {
                pid_t pid = fork();
                int st = 0;

                if (pid == 0) {
                        atomic_store(&n_fail, 0);
                        worker((void *) (uintptr_t) THREADS);
                        _exit(atomic_load(&n_fail) ? 1 : 0);
                }
                if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
                        fail("fork child: status %#x", st);
        }
        printf("%s 1 - %d threads x %d rounds and a fork child: %d waited for the push, %d pushed at once, %d closed while held, "
               "every byte right\n",
               atomic_load(&n_fail) ? "not ok" : "ok", THREADS, ROUNDS, atomic_load(&n_waited),
               atomic_load(&n_pushed_early), atomic_load(&n_closed_held));
        printf("1..1\n");
        (void) smcd_stop(&smcd, 5000, NULL);
        smcd_instance_cleanup(&smcd);
        return atomic_load(&n_fail) ? 1 : 0;
}
