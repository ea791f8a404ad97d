/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Unit tests for the SMC-D data path (libsmcproto/ring.c): two endpoints in one
 * process, wired as smcd wires them (two memfd DMBs, two AF_UNIX socketpairs).
 *
 * Usage: test-ring [--bench [BUSY_POLL_NS...]]. SMC_TEST_STRESS_MB sets the stress volume per
 * direction (default 64). --bench measures the one-way latency of 64-byte
 * ping-pong over the ring for several busy_poll_ns values instead of testing.
 */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ring.h"
#include "sys.h"

#define CHECK(cond, ...)                                                                         \
        do {                                                                                     \
                if (!(cond)) {                                                                   \
                        fprintf(stderr, "%s:%d: %s: check failed: %s: ", __FILE__, __LINE__, __func__, \
                                #cond);                                                          \
                        fprintf(stderr, __VA_ARGS__);                                            \
                        fputc('\n', stderr);                                                     \
                        exit(EXIT_FAILURE);                                                      \
                }                                                                                \
        } while (0)

#define ERRSTR(r) ((r) < 0 ? strerror((int) -(r)) : "ok")

/* ---- a connection: A <-> B ------------------------------------------------------- */

struct conn {
        void *dmb_a, *dmb_b; /* A's rx (B writes it), B's rx (A writes it) */
        uint32_t size_a, size_b;
        int xa, xb;
        struct smc_ring_ep a, b;
};

static uint32_t dmb_new_dirty; /* data_dirty of new DMBs (smcd: SMC_DMB_DIRTY_UNKNOWN) */

static void *dmb_new(uint32_t size) {
        int fd = memfd_create("test-dmb", MFD_CLOEXEC);
        void *p;

        CHECK(fd >= 0, "memfd_create: %m");
        CHECK(ftruncate(fd, SMC_DMB_HDR_LEN + size) == 0, "ftruncate: %m");
        /* mapped once: each endpoint's accesses alias the same addresses, so TSan
         * checks the cross-endpoint ordering as it would across processes */
        p = mmap(NULL, SMC_DMB_HDR_LEN + size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        CHECK(p != MAP_FAILED, "mmap: %m");
        close(fd);
        ((struct smc_dmb_hdr *) p)->type = SMC_DMB_EYECATCHER;
        atomic_store(&((struct smc_dmb_hdr *) p)->data_dirty, dmb_new_dirty);
        return p;
}

static void conn_open(struct conn *c, uint32_t size_a, uint32_t size_b) {
        int pa[2], pb[2], r;

        memset(c, 0, sizeof(*c));
        c->size_a = size_a;
        c->size_b = size_b;
        c->dmb_a = dmb_new(size_a);
        c->dmb_b = dmb_new(size_b);
        CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pa) == 0, "socketpair: %m");
        CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pb) == 0, "socketpair: %m");
        {
                /* as smcd does: the smallest send buffer on X keeps a plug small */
                int one = 1;

                (void) setsockopt(pa[0], SOL_SOCKET, SO_SNDBUF, &one, sizeof(one));
                (void) setsockopt(pb[0], SOL_SOCKET, SO_SNDBUF, &one, sizeof(one));
        }
        c->xa = pa[0];
        c->xb = pb[0];
        /* A holds X_a and Y_b; B holds X_b and Y_a */
        r = smc_ring_init(&c->a, c->dmb_a, size_a, c->dmb_b, size_b, pa[0], pb[1]);
        CHECK(r == 0, "smc_ring_init(a): %s", ERRSTR(r));
        r = smc_ring_init(&c->b, c->dmb_b, size_b, c->dmb_a, size_a, pb[0], pa[1]);
        CHECK(r == 0, "smc_ring_init(b): %s", ERRSTR(r));
        smc_ring_track_dirty(&c->a);
        smc_ring_track_dirty(&c->b);
}

static void conn_close(struct conn *c) {
        if (c->a.y_peer >= 0)
                smc_ring_close(&c->a);
        if (c->b.y_peer >= 0)
                smc_ring_close(&c->b);
        if (c->xa >= 0)
                close(c->xa);
        if (c->xb >= 0)
                close(c->xb);
        pthread_mutex_destroy(&c->a.tx_lock);
        pthread_mutex_destroy(&c->a.rx_lock);
        pthread_mutex_destroy(&c->b.tx_lock);
        pthread_mutex_destroy(&c->b.rx_lock);
        munmap(c->dmb_a, SMC_DMB_HDR_LEN + c->size_a);
        munmap(c->dmb_b, SMC_DMB_HDR_LEN + c->size_b);
}

static ssize_t xsend(struct smc_ring_ep *ep, const void *buf, size_t len, int flags, bool nonblock) {
        struct iovec iov = { (void *) buf, len };
        return smc_ring_send(ep, &iov, 1, flags, nonblock);
}

static ssize_t xrecv(struct smc_ring_ep *ep, void *buf, size_t len, int flags, bool nonblock) {
        struct iovec iov = { buf, len };
        return smc_ring_recv(ep, &iov, 1, flags, nonblock);
}

/* kernel readiness of fd right now */
static short kpoll(int fd, short events) {
        struct pollfd p = { .fd = fd, .events = events };
        int r = poll(&p, 1, 0);

        CHECK(r >= 0, "poll: %m");
        return p.revents;
}

static void sleep_ms(int ms) {
        struct timespec ts = { ms / 1000, (long) (ms % 1000) * 1000000L };
        nanosleep(&ts, NULL);
}

/* The byte at stream position @pos of stream @seed: splitmix64 of the 8-byte word. */
static inline uint8_t pattern(uint64_t seed, uint64_t pos) {
        uint64_t z = seed + (pos >> 3) * 0x9e3779b97f4a7c15ull;

        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        return (uint8_t) (z >> ((pos & 7) * 8));
}

static void fill(uint8_t *b, size_t n, uint64_t seed, uint64_t pos) {
        for (size_t i = 0; i < n; i++)
                b[i] = pattern(seed, pos + i);
}

static void verify(const uint8_t *b, size_t n, uint64_t seed, uint64_t pos, const char *what) {
        for (size_t i = 0; i < n; i++)
                CHECK(b[i] == pattern(seed, pos + i), "%s: byte %" PRIu64 " is 0x%02x, want 0x%02x", what, pos + i,
                      b[i], pattern(seed, pos + i));
}

static uint64_t xorshift(uint64_t *s) {
        uint64_t x = *s;

        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        return *s = x;
}

/* a random size in 1..max, biased towards small sizes half of the time */
static size_t rand_size(uint64_t *s, size_t max) {
        uint64_t r = xorshift(s);

        if (r & 1)
                return 1 + (r >> 8) % (max < 256 ? max : 256);
        return 1 + (r >> 8) % max;
}

/* ---- tests ----------------------------------------------------------------------- */

static void test_echo(void) {
        struct conn c;
        char buf[64];
        ssize_t n;

        conn_open(&c, SMC_DMB_DEFAULT_SIZE, SMC_DMB_DEFAULT_SIZE);
        n = xsend(&c.a, "hello", 5, 0, false);
        CHECK(n == 5, "send: %zd %s", n, ERRSTR(n));
        CHECK(kpoll(c.xb, POLLIN) & POLLIN, "X_b not readable after a send");
        CHECK(smc_ring_readable(&c.b) == 5, "readable %u", smc_ring_readable(&c.b));
        n = xrecv(&c.b, buf, sizeof(buf), 0, false);
        CHECK(n == 5 && memcmp(buf, "hello", 5) == 0, "recv: %zd", n);
        CHECK(!(kpoll(c.xb, POLLIN) & POLLIN), "X_b still readable after the ring was emptied");
        n = xsend(&c.b, buf, 5, 0, false);
        CHECK(n == 5, "echo send: %zd", n);
        memset(buf, 0, sizeof(buf));
        n = xrecv(&c.a, buf, sizeof(buf), 0, false);
        CHECK(n == 5 && memcmp(buf, "hello", 5) == 0, "echo recv: %zd", n);
        CHECK(!(kpoll(c.xa, POLLIN) & POLLIN), "X_a still readable");

        /* scatter/gather both ways */
        {
                struct iovec v[3] = { { "ab", 2 }, { "", 0 }, { "cdef", 4 } };
                char p1[3] = { 0 }, p2[10] = { 0 };
                struct iovec w[2] = { { p1, 3 }, { p2, 10 } };

                n = smc_ring_send(&c.a, v, 3, 0, false);
                CHECK(n == 6, "sendv: %zd", n);
                n = smc_ring_recv(&c.b, w, 2, 0, false);
                CHECK(n == 6 && memcmp(p1, "abc", 3) == 0 && memcmp(p2, "def", 3) == 0, "recvv: %zd", n);
        }
        conn_close(&c);
        printf("ok echo\n");
}

/* every copy (ring.c copy_bytes: memcpy, and the SSE2 / AVX2 loops used when the
 * destination sits 1..63 bytes past the source modulo 4 KiB: always on AMD CPUs, from
 * 64 KiB on others) with app buffers at odd
 * offsets from a page, at ring positions that move by odd sizes (so that sends and
 * receives meet the aliasing case), across the wrap: the bytes arrive intact and in
 * order, nothing is written past the buffer */
static void test_copy_offsets(void) {
        static const size_t sizes[] = { 1, 63, 511, 512, 513, 700, 4096 + 37, 65536 + 5 };
        static const size_t offs[] = { 0, 1, 15, 16, 17, 48, 63, 64, 100, 4095 };
        const size_t noffs = sizeof(offs) / sizeof(offs[0]);
        uint8_t *tx = NULL, *rx = NULL;
        uint64_t seq_tx = 0, seq_rx = 0;
        unsigned checks = 0;
        struct conn c;

        CHECK(posix_memalign((void **) &tx, 4096, 2 * 65536 + 8192) == 0, "posix_memalign");
        CHECK(posix_memalign((void **) &rx, 4096, 2 * 65536 + 8192) == 0, "posix_memalign");
        for (int isa = 1; isa <= 4; isa++) {
                if (smc_ring_copy_isa(isa) != isa)
                        continue; /* no AVX2 on this CPU (or not x86-64) */
                conn_open(&c, SMC_DMB_DEFAULT_SIZE, SMC_DMB_DEFAULT_SIZE);
                for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
                        for (size_t j = 0; j < noffs; j++)
                                for (size_t k = 0; k < noffs; k += 3) {
                                        size_t n = sizes[i], to = offs[j], ro = offs[(j + k) % noffs];
                                        ssize_t r;

                                        for (size_t b = 0; b < n; b++)
                                                tx[to + b] = (uint8_t) ((seq_tx + b) * 2654435761u >> 13);
                                        seq_tx += n;
                                        r = xsend(&c.a, tx + to, n, 0, true);
                                        CHECK(r == (ssize_t) n, "send %zu at +%zu: %zd %s", n, to, r, ERRSTR(r));
                                        memset(rx, 0xee, ro + n + 64);
                                        r = xrecv(&c.b, rx + ro, n, MSG_WAITALL, false);
                                        CHECK(r == (ssize_t) n, "recv %zu at +%zu: %zd %s", n, ro, r, ERRSTR(r));
                                        for (size_t b = 0; b < n; b++)
                                                CHECK(rx[ro + b] == (uint8_t) ((seq_rx + b) * 2654435761u >> 13),
                                                      "isa %d: %zu bytes, tx +%zu rx +%zu: byte %zu wrong", isa, n,
                                                      to, ro, b);
                                        CHECK(rx[ro + n] == 0xee, "isa %d: wrote past the buffer", isa);
                                        seq_rx += n;
                                        checks++;
                                }
                conn_close(&c);
        }
        smc_ring_copy_isa(0);
        free(tx);
        free(rx);
        printf("ok copy offsets (%u transfers)\n", checks);
}

/* single thread, nonblocking, random sizes up to 3x the ring, many wraps */
static void test_random_sizes(void) {
        const uint32_t size = SMC_DMB_MIN_SIZE;
        struct conn c;
        uint8_t *sb = malloc(3 * size), *rb = malloc(3 * size);
        uint64_t spos = 0, rpos = 0, rnd = 0x1234567;
        const uint64_t seed = 77;

        CHECK(sb && rb, "malloc");
        conn_open(&c, size, size);
        while (rpos < 64ull * size) {
                size_t ns = rand_size(&rnd, 3 * size), nr = rand_size(&rnd, 3 * size);
                uint32_t inflight = (uint32_t) (spos - rpos);
                ssize_t n;

                fill(sb, ns, seed, spos);
                n = xsend(&c.a, sb, ns, 0, true);
                if (inflight == size)
                        CHECK(n == -EAGAIN, "send into a full ring: %zd", n);
                else
                        CHECK(n == (ssize_t) (ns < size - inflight ? ns : size - inflight),
                              "send %zu with %u in flight: %zd %s", ns, inflight, n, ERRSTR(n));
                if (n > 0)
                        spos += (uint64_t) n;
                CHECK(smc_ring_readable(&c.b) == spos - rpos, "readable %u, want %" PRIu64,
                      smc_ring_readable(&c.b), spos - rpos);

                n = xrecv(&c.b, rb, nr, 0, true);
                if (spos == rpos) {
                        CHECK(n == -EAGAIN, "recv on empty: %zd", n);
                } else {
                        CHECK(n == (ssize_t) (nr < spos - rpos ? nr : spos - rpos), "recv %zu: %zd %s", nr, n,
                              ERRSTR(n));
                        verify(rb, (size_t) n, seed, rpos, "random sizes");
                        rpos += (uint64_t) n;
                }
                /* the kernel readiness matches the ring after every call */
                CHECK(!!(kpoll(c.xb, POLLIN) & POLLIN) == (spos != rpos), "POLLIN on X_b %d with %" PRIu64 " queued",
                      !!(kpoll(c.xb, POLLIN) & POLLIN), spos - rpos);
        }
        CHECK(smc_curs_wrap(atomic_load(&((struct smc_dmb_hdr *) c.dmb_b)->cons)) >= 60, "did not wrap enough");
        conn_close(&c);
        free(sb);
        free(rb);
        printf("ok random sizes (%" PRIu64 " bytes, 1 B..3x ring, nonblocking)\n", rpos);
}

/* -- threaded stress -- */

struct stream_arg {
        struct smc_ring_ep *ep;
        uint64_t total, seed, rnd;
        size_t max_io;
        uint64_t sum; /* Fletcher-like checksum of what went through */
        bool nonblock;
        uint64_t start; /* receiver: first stream position expected (total is the end) */
        bool owed_waits; /* nonblocking sender: after some whole sends, wait for POLLOUT as
                          * poll() does: the owed plug (smc_ring_plug_owed), then X */
};

static uint64_t sum_update(uint64_t s, const uint8_t *b, size_t n) {
        uint32_t lo = (uint32_t) s, hi = (uint32_t) (s >> 32);

        for (size_t i = 0; i < n; i++) {
                lo = (lo + b[i]) % 65521;
                hi = (hi + lo) % 65521;
        }
        return ((uint64_t) hi << 32) | lo;
}

/* Wait for @events on @fd with the kernel's poll, as an application would; a
 * readiness that never comes (a lost doorbell or a plug never drained) fails. */
static void wait_fd(int fd, short events, const char *who) {
        struct pollfd p = { .fd = fd, .events = events };
        int r;

        do
                r = poll(&p, 1, 10000);
        while (r < 0 && errno == EINTR);
        CHECK(r == 1, "%s: poll(X, %s) timed out after 10 s: lost wakeup", who, events == POLLIN ? "POLLIN" : "POLLOUT");
}

static void *sender(void *p) {
        struct stream_arg *a = p;
        uint8_t *b = malloc(a->max_io);
        uint64_t pos = 0;

        CHECK(b, "malloc");
        a->sum = 1;
        while (pos < a->total) {
                size_t n = rand_size(&a->rnd, a->max_io);
                ssize_t k;

                if (n > a->total - pos)
                        n = (size_t) (a->total - pos);
                fill(b, n, a->seed, pos);
                if (a->nonblock) {
                        /* an event-loop app: EAGAIN, then the kernel's poll on X */
                        k = xsend(a->ep, b, n, 0, true);
                        if (k == -EAGAIN) {
                                wait_fd(a->ep->x, POLLOUT, "sender");
                                continue;
                        }
                        CHECK(k > 0 && (size_t) k <= n, "nonblocking send %zu: %zd %s", n, k, ERRSTR(k));
                        if (a->owed_waits && xorshift(&a->rnd) % 4 == 0 && !smc_ring_ready_quick(a->ep, POLLOUT)) {
                                while (!smc_ring_plug_owed(a->ep, false))
                                        sched_yield(); /* (the poller thread holds tx_lock) */
                                wait_fd(a->ep->x, POLLOUT, "sender (owed plug)");
                        }
                        n = (size_t) k;
                } else {
                        k = xsend(a->ep, b, n, (xorshift(&a->rnd) % 8 == 0) ? MSG_MORE : 0, false);
                        CHECK(k > 0 && (size_t) k == n, "blocking send %zu at %" PRIu64 ": %zd %s", n, pos, k,
                              ERRSTR(k));
                }
                a->sum = sum_update(a->sum, b, n);
                pos += n;
        }
        CHECK(smc_ring_flush(a->ep) == 0, "flush");
        free(b);
        return NULL;
}

static void *receiver(void *p) {
        struct stream_arg *a = p;
        uint8_t *b = malloc(a->max_io);
        uint64_t pos = a->start;

        CHECK(b, "malloc");
        a->sum = 1;
        while (pos < a->total) {
                size_t n = rand_size(&a->rnd, a->max_io);
                int fl = (xorshift(&a->rnd) % 16 == 0) ? MSG_WAITALL : 0;
                ssize_t k;

                if (n > a->total - pos)
                        n = (size_t) (a->total - pos);
                if (a->nonblock) {
                        k = xrecv(a->ep, b, n, 0, true);
                        if (k == -EAGAIN) {
                                wait_fd(a->ep->x, POLLIN, "receiver");
                                continue;
                        }
                        fl = 0;
                } else
                        k = xrecv(a->ep, b, n, fl, false);
                CHECK(k > 0 && (size_t) k <= n, "blocking recv %zu at %" PRIu64 ": %zd %s", n, pos, k, ERRSTR(k));
                CHECK(!(fl & MSG_WAITALL) || (size_t) k == n, "MSG_WAITALL returned %zd of %zu", k, n);
                verify(b, (size_t) k, a->seed, pos, "stress");
                a->sum = sum_update(a->sum, b, (size_t) k);
                pos += (uint64_t) k;
        }
        free(b);
        return NULL;
}

/* A receiver as smcrun's epoll watch runs one (libsmcproto socket.c "epoll watch",
 * ring.c (6)): nonblocking receives; on EAGAIN the endpoint is watched and the ring
 * looked at a few times (the writer rings no doorbell meanwhile), then, before
 * sleeping in poll(X), the watch ends and the ring is looked at once more. A lost
 * wakeup shows as wait_fd's 10 s timeout. */
static void *receiver_watched(void *p) {
        struct stream_arg *a = p;
        uint8_t *b = malloc(a->max_io);
        uint64_t pos = a->start;

        CHECK(b, "malloc");
        a->sum = 1;
        smc_ring_watch(a->ep, true);
        while (pos < a->total) {
                size_t n = rand_size(&a->rnd, a->max_io);
                ssize_t k;
                bool ready = false;

                if (n > a->total - pos)
                        n = (size_t) (a->total - pos);
                k = xrecv(a->ep, b, n, 0, true);
                if (k == -EAGAIN) {
                        smc_ring_watch(a->ep, true);
                        for (unsigned i = xorshift(&a->rnd) % 64; i > 0 && !ready; i--)
                                ready = smc_ring_ready_quick(a->ep, POLLIN);
                        if (ready)
                                continue;
                        smc_ring_watch(a->ep, false);
                        if (smc_ring_ready_quick(a->ep, POLLIN))
                                continue;
                        wait_fd(a->ep->x, POLLIN, "watched receiver");
                        continue;
                }
                CHECK(k > 0 && (size_t) k <= n, "recv %zu at %" PRIu64 ": %zd %s", n, pos, k, ERRSTR(k));
                verify(b, (size_t) k, a->seed, pos, "stress (watched)");
                a->sum = sum_update(a->sum, b, (size_t) k);
                pos += (uint64_t) k;
        }
        smc_ring_watch(a->ep, false);
        free(b);
        return NULL;
}

static void test_stress_watched(uint64_t total, uint32_t ring) {
        struct conn c;
        struct stream_arg as, br, bs, ar;
        pthread_t t[4];

        conn_open(&c, ring, ring);
        as = (struct stream_arg) { &c.a, total, 1, 21, 3 * ring, 0, false, 0, false };
        br = (struct stream_arg) { &c.b, total, 1, 22, 3 * ring, 0, true, 0, false };
        bs = (struct stream_arg) { &c.b, total, 2, 23, 3 * ring, 0, true, 0, false };
        ar = (struct stream_arg) { &c.a, total, 2, 24, 3 * ring, 0, true, 0, false };
        CHECK(pthread_create(&t[0], NULL, sender, &as) == 0, "pthread_create");
        CHECK(pthread_create(&t[1], NULL, receiver_watched, &br) == 0, "pthread_create");
        CHECK(pthread_create(&t[2], NULL, sender, &bs) == 0, "pthread_create");
        CHECK(pthread_create(&t[3], NULL, receiver_watched, &ar) == 0, "pthread_create");
        for (int i = 0; i < 4; i++)
                pthread_join(t[i], NULL);
        CHECK(as.sum == br.sum, "A->B checksum %" PRIx64 " != %" PRIx64, as.sum, br.sum);
        CHECK(bs.sum == ar.sum, "B->A checksum %" PRIx64 " != %" PRIx64, bs.sum, ar.sum);
        CHECK(smc_ring_readable(&c.a) == 0 && smc_ring_readable(&c.b) == 0, "leftover data");
        CHECK(!(kpoll(c.xa, POLLIN) & POLLIN) && !(kpoll(c.xb, POLLIN) & POLLIN), "X readable after the stream");
        conn_close(&c);
        printf("ok stress, epoll-watched receivers: %" PRIu64 " MiB each way, ring %u KiB\n", total >> 20, ring >> 10);
}

/* Another thread's readiness checks while the connection streams: smc_ring_poll()
 * and smc_ring_plug_owed() (spinning for the reader, or not) race the
 * sender's sends and owed plugs (TSan), and no plug may be left that no drain ends
 * (wait_fd's 10 s timeout). */
struct poller_arg {
        struct smc_ring_ep *ep;
        _Atomic bool stop;
        uint64_t rnd, calls;
};

static void *poller(void *p) {
        struct poller_arg *a = p;

        while (!atomic_load(&a->stop)) {
                (void) smc_ring_plug_owed(a->ep, xorshift(&a->rnd) % 2 == 0);
                (void) smc_ring_poll(a->ep);
                a->calls++;
                if (xorshift(&a->rnd) % 4 == 0)
                        usleep((useconds_t) (xorshift(&a->rnd) % 50));
        }
        return NULL;
}

static void test_stress_owed(uint64_t total, uint32_t ring) {
        struct conn c;
        struct stream_arg as, br;
        struct poller_arg pa;
        pthread_t t[3];

        conn_open(&c, ring, ring);
        as = (struct stream_arg) { &c.a, total, 1, 31, 3 * ring / 4, 0, true, 0, true };
        br = (struct stream_arg) { &c.b, total, 1, 32, 3 * ring, 0, false, 0, false };
        pa = (struct poller_arg) { .ep = &c.a, .rnd = 33 };
        CHECK(pthread_create(&t[0], NULL, sender, &as) == 0, "pthread_create");
        CHECK(pthread_create(&t[1], NULL, receiver, &br) == 0, "pthread_create");
        CHECK(pthread_create(&t[2], NULL, poller, &pa) == 0, "pthread_create");
        pthread_join(t[0], NULL);
        pthread_join(t[1], NULL);
        atomic_store(&pa.stop, true);
        pthread_join(t[2], NULL);
        CHECK(as.sum == br.sum, "A->B checksum %" PRIx64 " != %" PRIx64, as.sum, br.sum);
        CHECK(smc_ring_readable(&c.b) == 0, "leftover data");
        CHECK(smc_ring_plug_owed(&c.a, false), "smc_ring_plug_owed at the end");
        CHECK(kpoll(c.xa, POLLOUT) & POLLOUT, "X_a still plugged after the stream (empty ring)");
        conn_close(&c);
        printf("ok stress, owed plugs and another thread's readiness checks: %" PRIu64 " MiB, ring %u KiB, "
               "%" PRIu64 " checks\n", total >> 20, ring >> 10, pa.calls);
}

static void test_stress(uint64_t total, uint32_t busy_ns, uint32_t ring, bool nonblock) {
        struct conn c;
        struct stream_arg as, ar, bs, br;
        pthread_t t[4];
        struct timespec t0, t1;
        double s;

        conn_open(&c, ring, ring);
        c.a.busy_poll_ns = c.b.busy_poll_ns = busy_ns;
        as = (struct stream_arg) { &c.a, total, 1, 11, 3 * ring, 0, nonblock, 0, false };
        br = (struct stream_arg) { &c.b, total, 1, 12, 3 * ring, 0, nonblock, 0, false };
        bs = (struct stream_arg) { &c.b, total, 2, 13, 3 * ring, 0, nonblock, 0, false };
        ar = (struct stream_arg) { &c.a, total, 2, 14, 3 * ring, 0, nonblock, 0, false };
        clock_gettime(CLOCK_MONOTONIC, &t0);
        CHECK(pthread_create(&t[0], NULL, sender, &as) == 0, "pthread_create");
        CHECK(pthread_create(&t[1], NULL, receiver, &br) == 0, "pthread_create");
        CHECK(pthread_create(&t[2], NULL, sender, &bs) == 0, "pthread_create");
        CHECK(pthread_create(&t[3], NULL, receiver, &ar) == 0, "pthread_create");
        for (int i = 0; i < 4; i++)
                pthread_join(t[i], NULL);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        CHECK(as.sum == br.sum, "A->B checksum %" PRIx64 " != %" PRIx64, as.sum, br.sum);
        CHECK(bs.sum == ar.sum, "B->A checksum %" PRIx64 " != %" PRIx64, bs.sum, ar.sum);
        CHECK(smc_ring_readable(&c.a) == 0 && smc_ring_readable(&c.b) == 0, "leftover data");
        CHECK(!(kpoll(c.xa, POLLIN) & POLLIN) && !(kpoll(c.xb, POLLIN) & POLLIN), "X readable after the stream");
        CHECK((kpoll(c.xa, POLLOUT) & POLLOUT) && (kpoll(c.xb, POLLOUT) & POLLOUT), "X still plugged after the stream");
        conn_close(&c);
        s = (double) (t1.tv_sec - t0.tv_sec) + (double) (t1.tv_nsec - t0.tv_nsec) / 1e9;
        printf("ok stress%s %" PRIu64 " MiB each way, ring %u KiB, busy_poll %u ns: %.2f s, %.0f MiB/s per direction\n",
               nonblock ? " (nonblocking + poll(X))" : "", total >> 20, ring >> 10, busy_ns, s,
               (double) (total >> 20) / s);
}

static void test_peek(void) {
        struct conn c;
        char buf[200];
        ssize_t n;

        conn_open(&c, SMC_DMB_MIN_SIZE, SMC_DMB_MIN_SIZE);
        n = xrecv(&c.b, buf, sizeof(buf), MSG_PEEK, true);
        CHECK(n == -EAGAIN, "peek on empty: %zd", n);
        fill((uint8_t *) buf, 100, 5, 0);
        CHECK(xsend(&c.a, buf, 100, 0, false) == 100, "send");
        memset(buf, 0, sizeof(buf));
        n = xrecv(&c.b, buf, 50, MSG_PEEK, false);
        CHECK(n == 50, "peek 50: %zd", n);
        verify((uint8_t *) buf, 50, 5, 0, "peek");
        CHECK(smc_ring_readable(&c.b) == 100, "peek consumed data: %u left", smc_ring_readable(&c.b));
        CHECK(kpoll(c.xb, POLLIN) & POLLIN, "X_b not readable after peek");
        n = xrecv(&c.b, buf, sizeof(buf), MSG_PEEK, false);
        CHECK(n == 100, "peek all: %zd", n);
        n = xrecv(&c.b, buf, sizeof(buf), 0, false);
        CHECK(n == 100, "recv after peek: %zd", n);
        verify((uint8_t *) buf, 100, 5, 0, "recv after peek");
        CHECK(!(kpoll(c.xb, POLLIN) & POLLIN), "X_b readable after all read");

        /* wrap: peek across the end of the ring */
        {
                uint8_t *big = malloc(SMC_DMB_MIN_SIZE);
                CHECK(big, "malloc");
                fill(big, SMC_DMB_MIN_SIZE - 100 - 10, 6, 0);
                CHECK(xsend(&c.a, big, SMC_DMB_MIN_SIZE - 110, 0, false) == SMC_DMB_MIN_SIZE - 110, "send");
                CHECK(xrecv(&c.b, big, SMC_DMB_MIN_SIZE, 0, false) == SMC_DMB_MIN_SIZE - 110, "recv");
                fill(big, 40, 7, 0);
                CHECK(xsend(&c.a, big, 40, 0, false) == 40, "send wrapping");
                memset(big, 0, 40);
                CHECK(xrecv(&c.b, big, 40, MSG_PEEK, false) == 40, "peek wrapping");
                verify(big, 40, 7, 0, "peek across wrap");
                memset(big, 0, 40);
                CHECK(xrecv(&c.b, big, 40, 0, false) == 40, "recv wrapping");
                verify(big, 40, 7, 0, "recv across wrap");
                free(big);
        }
        conn_close(&c);
        printf("ok MSG_PEEK\n");
}

struct delayed_send {
        struct smc_ring_ep *ep;
        int pieces, piece_len, delay_ms;
        bool shut_after;
};

static void *delayed_sender(void *p) {
        struct delayed_send *d = p;
        uint8_t buf[4096];

        for (int i = 0; i < d->pieces; i++) {
                sleep_ms(d->delay_ms);
                fill(buf, (size_t) d->piece_len, 9, (uint64_t) i * (uint64_t) d->piece_len);
                CHECK(xsend(d->ep, buf, (size_t) d->piece_len, 0, false) == d->piece_len, "delayed send");
        }
        if (d->shut_after)
                CHECK(smc_ring_shutdown(d->ep, SHUT_WR) == 0, "shutdown");
        return NULL;
}

static void test_waitall(void) {
        struct conn c;
        uint8_t buf[4096];
        pthread_t t;
        ssize_t n;
        struct delayed_send d;

        conn_open(&c, SMC_DMB_MIN_SIZE, SMC_DMB_MIN_SIZE);
        d = (struct delayed_send) { &c.a, 10, 100, 5, false };
        CHECK(pthread_create(&t, NULL, delayed_sender, &d) == 0, "pthread_create");
        n = xrecv(&c.b, buf, 1000, MSG_WAITALL, false);
        CHECK(n == 1000, "MSG_WAITALL: %zd %s", n, ERRSTR(n));
        verify(buf, 1000, 9, 0, "waitall");
        pthread_join(t, NULL);

        /* MSG_PEEK|MSG_WAITALL waits for the full length without consuming */
        d = (struct delayed_send) { &c.a, 4, 100, 5, false };
        CHECK(pthread_create(&t, NULL, delayed_sender, &d) == 0, "pthread_create");
        n = xrecv(&c.b, buf, 400, MSG_WAITALL | MSG_PEEK, false);
        CHECK(n == 400, "MSG_PEEK|MSG_WAITALL: %zd %s", n, ERRSTR(n));
        pthread_join(t, NULL);
        n = xrecv(&c.b, buf, 400, 0, false);
        CHECK(n == 400, "recv after peek-waitall: %zd", n);
        verify(buf, 400, 9, 0, "peek waitall");

        /* MSG_WAITALL stopped by EOF returns the partial count, then 0 */
        d = (struct delayed_send) { &c.a, 3, 100, 5, true };
        CHECK(pthread_create(&t, NULL, delayed_sender, &d) == 0, "pthread_create");
        n = xrecv(&c.b, buf, 1000, MSG_WAITALL, false);
        CHECK(n == 300, "MSG_WAITALL at EOF: %zd %s", n, ERRSTR(n));
        pthread_join(t, NULL);
        n = xrecv(&c.b, buf, 1000, MSG_WAITALL, false);
        CHECK(n == 0, "after EOF: %zd", n);
        conn_close(&c);
        printf("ok MSG_WAITALL\n");
}

/* POLLOUT as TCP reports it: only with half the ring free, so that poll-then-write
 * programs (socat: 8 KiB blocking writes) never block writing to each other. A whole
 * send that leaves less than that owes the plug of X, made by the first wait for
 * POLLOUT (smc_ring_plug_owed); the reader's read that frees half drains it. */
static void test_pollout_threshold(void) {
        const uint32_t size = SMC_DMB_MIN_SIZE;
        struct conn c;
        uint8_t *buf = malloc(size);
        ssize_t n;

        CHECK(buf, "malloc");
        conn_open(&c, size, size);
        fill(buf, size, 9, 0);
        n = xsend(&c.a, buf, size / 2 - 1, 0, true);
        CHECK(n == (ssize_t) size / 2 - 1, "send: %zd", n);
        CHECK(kpoll(c.xa, POLLOUT) & POLLOUT, "X_a not writable with more than half free");
        n = xsend(&c.a, buf + size / 2 - 1, size / 4, 0, true);
        CHECK(n == (ssize_t) size / 4, "send: %zd", n);
        CHECK(!(smc_ring_poll(&c.a) & POLLOUT), "smc_ring_poll(a) POLLOUT with a quarter free");
        CHECK(kpoll(c.xa, POLLOUT) & POLLOUT, "X_a already plugged after a whole send (the wait for POLLOUT plugs)");
        CHECK(smc_ring_plug_owed(&c.a, false), "smc_ring_plug_owed(a): lock busy");
        CHECK(!(kpoll(c.xa, POLLOUT) & POLLOUT), "X_a writable with a quarter of the ring free");
        CHECK(smc_ring_plug_owed(&c.a, false), "smc_ring_plug_owed(a) again");
        CHECK(!(kpoll(c.xa, POLLOUT) & POLLOUT), "X_a writable after a second smc_ring_plug_owed");
        n = xrecv(&c.b, buf, 100, 0, false);
        CHECK(n == 100, "recv: %zd", n);
        CHECK(!(kpoll(c.xa, POLLOUT) & POLLOUT), "X_a writable after a 100-byte read");
        n = xrecv(&c.b, buf, size, 0, false);
        CHECK(n == (ssize_t) (size / 2 - 1 + size / 4 - 100), "recv the rest: %zd", n);
        CHECK(kpoll(c.xa, POLLOUT) & POLLOUT, "X_a not writable on an empty ring (plug not drained)");
        CHECK(smc_ring_poll(&c.a) & POLLOUT, "smc_ring_poll(a) no POLLOUT on an empty ring");
        CHECK(!(kpoll(c.xb, POLLIN) & POLLIN), "X_b readable on an empty ring");
        conn_close(&c);
        free(buf);
        printf("ok POLLOUT at half the ring free\n");
}

static void test_nonblock_and_poll(void) {
        const uint32_t size = SMC_DMB_MIN_SIZE;
        struct conn c;
        uint8_t *buf = malloc(4 * size);
        uint64_t sent = 0;
        ssize_t n;
        short m;

        CHECK(buf, "malloc");
        conn_open(&c, size, size);
        CHECK(xrecv(&c.b, buf, 10, 0, true) == -EAGAIN, "recv on empty is not EAGAIN");
        CHECK(!(kpoll(c.xb, POLLIN) & POLLIN), "X_b readable on empty");
        m = smc_ring_poll(&c.b);
        CHECK(!(m & POLLIN) && (m & POLLOUT), "smc_ring_poll(b) = %#x on an idle connection", (unsigned) m);
        CHECK(kpoll(c.xa, POLLOUT) & POLLOUT, "X_a not writable on an empty ring");

        /* fill A->B completely */
        fill(buf, 4 * size, 3, 0);
        for (;;) {
                n = xsend(&c.a, buf + sent, 4 * size - sent, 0, true);
                if (n == -EAGAIN)
                        break;
                CHECK(n > 0, "nonblocking send: %zd %s", n, ERRSTR(n));
                sent += (uint64_t) n;
        }
        CHECK(sent == size, "filled %" PRIu64 " bytes, want the ring size %u", sent, size);
        CHECK(!(kpoll(c.xa, POLLOUT) & POLLOUT), "X_a writable while B's ring is full (not plugged)");
        CHECK(!(smc_ring_poll(&c.a) & POLLOUT), "smc_ring_poll(a) says POLLOUT on a full ring");
        CHECK(kpoll(c.xb, POLLIN) & POLLIN, "X_b not readable with a full ring");
        CHECK(smc_ring_poll(&c.b) & POLLIN, "smc_ring_poll(b) no POLLIN");
        CHECK(xsend(&c.a, buf, 1, 0, true) == -EAGAIN, "send to full ring is not EAGAIN");

        /* the peer reads a little: A is not writable yet (as TCP, POLLOUT waits for
         * half the ring to be free), though a send takes what fits */
        n = xrecv(&c.b, buf + 4 * size - 100, 100, 0, false);
        CHECK(n == 100, "recv: %zd", n);
        verify(buf + 4 * size - 100, 100, 3, 0, "partial read");
        CHECK(!(kpoll(c.xa, POLLOUT) & POLLOUT), "X_a writable with 100 bytes free (plug drained too early)");
        CHECK(!(smc_ring_poll(&c.a) & POLLOUT), "smc_ring_poll(a) POLLOUT with 100 bytes free");
        n = xsend(&c.a, buf + sent, 1000, 0, true);
        CHECK(n == 100, "send into 100 free bytes: %zd", n);

        /* blocking send waits for space, the peer frees it from another thread */
        {
                struct stream_arg r = { &c.b, 4 * (uint64_t) size + 100, 3, 5, 777, 0, false, 100, false };
                pthread_t t;
                uint8_t *more = malloc(3 * size);

                CHECK(more, "malloc");
                fill(more, 3 * size, 3, size + 100);
                /* the receiver restarts at stream position 100 */
                CHECK(pthread_create(&t, NULL, receiver, &r) == 0, "pthread_create");
                n = xsend(&c.a, more, 3 * size, 0, false);
                CHECK(n == 3 * (ssize_t) size, "blocking send with a full ring: %zd %s", n, ERRSTR(n));
                pthread_join(t, NULL);
                free(more);
        }
        conn_close(&c);
        free(buf);
        printf("ok nonblocking EAGAIN, poll(X) POLLIN/POLLOUT\n");
}

static void test_cork(void) {
        struct conn c;
        uint8_t buf[2048];
        ssize_t n;

        conn_open(&c, SMC_DMB_MIN_SIZE, SMC_DMB_MIN_SIZE);
        CHECK(smc_ring_set_cork(&c.a, true) == 0, "cork");
        CHECK(xsend(&c.a, "abc", 3, 0, false) == 3, "corked send");
        CHECK(xrecv(&c.b, buf, sizeof(buf), 0, true) == -EAGAIN, "corked data visible");
        CHECK(!(kpoll(c.xb, POLLIN) & POLLIN), "peer rung while corked");
        CHECK(smc_ring_set_cork(&c.a, false) == 0, "uncork");
        n = xrecv(&c.b, buf, sizeof(buf), 0, true);
        CHECK(n == 3 && memcmp(buf, "abc", 3) == 0, "after uncork: %zd", n);

        CHECK(xsend(&c.a, "de", 2, MSG_MORE, false) == 2, "MSG_MORE");
        CHECK(xrecv(&c.b, buf, sizeof(buf), 0, true) == -EAGAIN, "MSG_MORE data visible");
        CHECK(xsend(&c.a, "f", 1, 0, false) == 1, "send after MSG_MORE");
        n = xrecv(&c.b, buf, sizeof(buf), 0, true);
        CHECK(n == 3 && memcmp(buf, "def", 3) == 0, "after MSG_MORE batch: %zd", n);

        /* autocork: a corked batch goes out at autocork_size */
        c.a.autocork_size = 1000;
        CHECK(smc_ring_set_cork(&c.a, true) == 0, "cork");
        for (int i = 0; i < 5; i++)
                CHECK(xsend(&c.a, buf, 300, 0, false) == 300, "corked send");
        n = xrecv(&c.b, buf, sizeof(buf), 0, true);
        CHECK(n == 1200, "autocork published %zd, want 1200", n);
        CHECK(smc_ring_flush(&c.a) == 0, "flush");
        n = xrecv(&c.b, buf, sizeof(buf), 0, true);
        CHECK(n == 300, "flush published %zd", n);
        CHECK(smc_ring_set_cork(&c.a, false) == 0, "uncork");
        conn_close(&c);
        printf("ok cork, MSG_MORE, autocork\n");
}

/* data_dirty (dmb.h): the writer replaces smcd's UNKNOWN by 0 at init and raises it
 * before every write to how far it wrote, also for corked (unpublished) bytes and
 * sendfile; a write that wraps makes it the ring size. A value already set (an
 * adopted connection) is kept. */
static int pattern_file(size_t n, uint64_t seed);
static void recv_check(struct smc_ring_ep *ep, size_t n, uint64_t seed, uint64_t pos, const char *what);

static void test_data_dirty(void) {
        struct smc_dmb_hdr *hb;
        struct conn c;
        uint8_t buf[4096];
        ssize_t n;

        dmb_new_dirty = SMC_DMB_DIRTY_UNKNOWN;
        conn_open(&c, SMC_DMB_MIN_SIZE, SMC_DMB_MIN_SIZE);
        dmb_new_dirty = 0;
        hb = c.dmb_b; /* A writes it */
        CHECK(atomic_load(&hb->data_dirty) == 0, "after init: %u", atomic_load(&hb->data_dirty));
        CHECK(atomic_load(&((struct smc_dmb_hdr *) c.dmb_a)->data_dirty) == 0, "B's tx after init");
        memset(buf, 0x3c, sizeof(buf));
        CHECK(xsend(&c.a, buf, 100, 0, false) == 100, "send");
        CHECK(atomic_load(&hb->data_dirty) == 100, "after 100 B: %u", atomic_load(&hb->data_dirty));
        CHECK(smc_ring_set_cork(&c.a, true) == 0, "cork");
        CHECK(xsend(&c.a, buf, 50, 0, false) == 50, "corked send");
        CHECK(atomic_load(&hb->data_dirty) == 150, "corked bytes count before publication: %u",
              atomic_load(&hb->data_dirty));
        CHECK(smc_ring_set_cork(&c.a, false) == 0, "uncork");
        n = xrecv(&c.b, buf, sizeof(buf), 0, true);
        CHECK(n == 150, "recv %zd", n);

        int fd = pattern_file(3000, 7);
        int64_t off = 0;
        n = smc_ring_sendfile(&c.a, fd, &off, 3000, 0, false, -1);
        CHECK(n == 3000, "sendfile %zd", n);
        close(fd);
        CHECK(atomic_load(&hb->data_dirty) == 3150, "after sendfile: %u", atomic_load(&hb->data_dirty));
        recv_check(&c.b, 3000, 7, 0, "sendfile bytes");

        /* fill to the end and wrap */
        uint32_t left = SMC_DMB_MIN_SIZE - 3150;
        while (left) {
                size_t k = left < sizeof(buf) ? left : sizeof(buf);
                CHECK(xsend(&c.a, buf, k, 0, false) == (ssize_t) k, "send to the end");
                CHECK(xrecv(&c.b, buf, sizeof(buf), 0, true) == (ssize_t) k, "recv to the end");
                left -= k;
        }
        CHECK(atomic_load(&hb->data_dirty) == SMC_DMB_MIN_SIZE, "at the end: %u", atomic_load(&hb->data_dirty));
        CHECK(xsend(&c.a, buf, 10, 0, false) == 10, "send after the wrap");
        CHECK(atomic_load(&hb->data_dirty) == SMC_DMB_MIN_SIZE, "after a wrap: %u", atomic_load(&hb->data_dirty));
        conn_close(&c);

        /* an adopted connection (smc_ring_init without smc_ring_track_dirty) keeps
         * UNKNOWN */
        dmb_new_dirty = SMC_DMB_DIRTY_UNKNOWN;
        c.dmb_a = dmb_new(SMC_DMB_MIN_SIZE);
        c.dmb_b = dmb_new(SMC_DMB_MIN_SIZE);
        dmb_new_dirty = 0;
        {
                int pa[2], pb[2];
                struct smc_ring_ep ea;

                CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pa) == 0, "socketpair: %m");
                CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pb) == 0, "socketpair: %m");
                CHECK(smc_ring_init(&ea, c.dmb_a, SMC_DMB_MIN_SIZE, c.dmb_b, SMC_DMB_MIN_SIZE, pa[0], pb[1]) == 0,
                      "init");
                CHECK(xsend(&ea, buf, 10, 0, false) == 10, "send");
                CHECK(atomic_load(&((struct smc_dmb_hdr *) c.dmb_b)->data_dirty) == SMC_DMB_DIRTY_UNKNOWN,
                      "adopted: UNKNOWN kept");
                smc_ring_fini(&ea);
                close(pa[0]); close(pa[1]); close(pb[0]); close(pb[1]);
        }
        munmap(c.dmb_a, SMC_DMB_HDR_LEN + SMC_DMB_MIN_SIZE);
        munmap(c.dmb_b, SMC_DMB_HDR_LEN + SMC_DMB_MIN_SIZE);

        /* an adopted connection's value stays; UNKNOWN stays UNKNOWN when set later */
        dmb_new_dirty = 777;
        conn_open(&c, SMC_DMB_MIN_SIZE, SMC_DMB_MIN_SIZE);
        dmb_new_dirty = 0;
        hb = c.dmb_b;
        CHECK(atomic_load(&hb->data_dirty) == 777, "adopted: %u", atomic_load(&hb->data_dirty));
        CHECK(xsend(&c.a, buf, 10, 0, false) == 10, "send");
        CHECK(atomic_load(&hb->data_dirty) == 777, "below the mark: %u", atomic_load(&hb->data_dirty));
        atomic_store(&hb->data_dirty, SMC_DMB_DIRTY_UNKNOWN);
        CHECK(xsend(&c.a, buf, 1000, 0, false) == 1000, "send");
        CHECK(atomic_load(&hb->data_dirty) == SMC_DMB_DIRTY_UNKNOWN, "UNKNOWN lowered");
        conn_close(&c);
        printf("ok data_dirty\n");
}

static void test_shutdown(void) {
        struct conn c;
        uint8_t buf[20000];
        ssize_t n;
        uint64_t got = 0;

        conn_open(&c, SMC_DMB_MIN_SIZE, SMC_DMB_MIN_SIZE);
        fill(buf, 10000, 4, 0);
        CHECK(xsend(&c.a, buf, 10000, 0, false) == 10000, "send");
        CHECK(smc_ring_shutdown(&c.a, SHUT_WR) == 0, "shutdown");
        CHECK(xsend(&c.a, buf, 1, 0, false) == -EPIPE, "send after SHUT_WR is not EPIPE");
        CHECK(kpoll(c.xb, POLLIN) & POLLIN, "X_b not readable");
        while ((n = xrecv(&c.b, buf, 3000, 0, false)) > 0) {
                verify(buf, (size_t) n, 4, got, "before EOF");
                got += (uint64_t) n;
        }
        CHECK(n == 0 && got == 10000, "EOF after %" PRIu64 " bytes: %zd %s", got, n, ERRSTR(n));
        CHECK(xrecv(&c.b, buf, 10, 0, false) == 0, "second EOF");
        CHECK(xrecv(&c.b, buf, 10, 0, true) == 0, "nonblocking EOF");
        CHECK(kpoll(c.xb, POLLIN | POLLRDHUP) & POLLRDHUP, "X_b no POLLRDHUP at EOF");
        CHECK(smc_ring_poll(&c.b) & POLLRDHUP, "smc_ring_poll(b) no POLLRDHUP");
        /* half close: B can still send to A */
        CHECK(xsend(&c.b, "back", 4, 0, false) == 4, "send on the half-closed connection");
        n = xrecv(&c.a, buf, sizeof(buf), 0, false);
        CHECK(n == 4 && memcmp(buf, "back", 4) == 0, "recv on the half-closed connection: %zd", n);
        CHECK(smc_ring_close(&c.b) == false, "orderly close reported an abort");
        n = xrecv(&c.a, buf, sizeof(buf), 0, false);
        CHECK(n == 0, "EOF after the peer's close: %zd %s", n, ERRSTR(n));
        conn_close(&c);

        /* a reader blocked in recv wakes up at the peer's shutdown */
        {
                struct delayed_send d;
                pthread_t t;

                conn_open(&c, SMC_DMB_MIN_SIZE, SMC_DMB_MIN_SIZE);
                d = (struct delayed_send) { &c.a, 1, 10, 20, true };
                CHECK(pthread_create(&t, NULL, delayed_sender, &d) == 0, "pthread_create");
                CHECK(xrecv(&c.b, buf, 100, 0, false) == 10, "blocking recv");
                CHECK(xrecv(&c.b, buf, 100, 0, false) == 0, "blocking recv at EOF");
                pthread_join(t, NULL);
                conn_close(&c);
        }
        printf("ok shutdown(SHUT_WR): data, then EOF\n");
}

/* Readiness once both directions are shut (dmb.h SMC_DMB_READER_X_HUP): with smcd's
 * SMC_DMB_FEAT_X_HUP the doorbell pair mirrors the socket's shutdown state and the
 * kernel reports POLLHUP on X, as tcp_poll() does; the mark is in the reader's rx
 * DMB before the shutdown that completes it. Without the feature (an older smcd) X's
 * write side is never shut: no POLLHUP, no mark. */
static uint32_t x_hup_flag(void *rx_dmb) {
        return atomic_load(&((struct smc_dmb_hdr *) rx_dmb)->reader_flags) & SMC_DMB_READER_X_HUP;
}

static void conn_open_hup(struct conn *c, bool feature) {
        conn_open(c, SMC_DMB_MIN_SIZE, SMC_DMB_MIN_SIZE);
        ((struct smc_dmb_hdr *) c->dmb_a)->features = feature ? SMC_DMB_FEAT_X_HUP : 0;
        ((struct smc_dmb_hdr *) c->dmb_b)->features = feature ? SMC_DMB_FEAT_X_HUP : 0;
}

static void test_hup(void) {
        struct conn c;
        uint8_t buf[64];

        for (int feature = 0; feature < 2; feature++) {
                /* A's SHUT_WR, then B's: both hang up */
                conn_open_hup(&c, feature);
                CHECK(smc_ring_shutdown(&c.a, SHUT_WR) == 0, "shutdown(a, SHUT_WR)");
                CHECK(!(kpoll(c.xa, POLLIN) & (POLLHUP | POLLIN)), "X_a after its own SHUT_WR: 0x%x",
                      kpoll(c.xa, POLLIN));
                CHECK(smc_ring_shutdown(&c.b, SHUT_WR) == 0, "shutdown(b, SHUT_WR)");
                CHECK(!!(kpoll(c.xa, POLLIN) & POLLHUP) == feature && !!(kpoll(c.xb, POLLIN) & POLLHUP) == feature,
                      "feature %d: POLLHUP on X_a 0x%x, X_b 0x%x", feature, kpoll(c.xa, POLLIN), kpoll(c.xb, POLLIN));
                CHECK(!!x_hup_flag(c.dmb_a) == feature && !!x_hup_flag(c.dmb_b) == feature,
                      "feature %d: X_HUP marks %x %x", feature, x_hup_flag(c.dmb_a), x_hup_flag(c.dmb_b));
                CHECK(smc_ring_poll(&c.a) & POLLHUP && smc_ring_poll(&c.b) & POLLHUP, "smc_ring_poll: no POLLHUP");
                CHECK(xrecv(&c.a, buf, sizeof(buf), 0, true) == 0 && xrecv(&c.b, buf, sizeof(buf), 0, true) == 0,
                      "EOF both ways");
                conn_close(&c);

                /* SHUT_RD then SHUT_WR on A: A hangs up, B only sees A's EOF */
                conn_open_hup(&c, feature);
                CHECK(xsend(&c.b, "data", 4, 0, false) == 4, "send");
                CHECK(smc_ring_shutdown(&c.a, SHUT_RD) == 0, "shutdown(a, SHUT_RD)");
                CHECK(!(kpoll(c.xa, POLLIN) & POLLHUP) && !x_hup_flag(c.dmb_a), "X_a hung up after SHUT_RD alone");
                CHECK(smc_ring_shutdown(&c.a, SHUT_WR) == 0, "shutdown(a, SHUT_WR)");
                CHECK(!!(kpoll(c.xa, POLLIN) & POLLHUP) == feature && !!x_hup_flag(c.dmb_a) == feature,
                      "feature %d: SHUT_RD + SHUT_WR: X_a 0x%x, mark %x", feature, kpoll(c.xa, POLLIN),
                      x_hup_flag(c.dmb_a));
                CHECK(!(kpoll(c.xb, POLLIN) & POLLHUP) && (kpoll(c.xb, POLLIN | POLLRDHUP) & POLLRDHUP) &&
                              !x_hup_flag(c.dmb_b),
                      "X_b after A's SHUT_RD + SHUT_WR: 0x%x", kpoll(c.xb, POLLIN | POLLRDHUP));
                /* B still sends (its data is dropped, as TCP's after SHUT_RD) */
                CHECK(xsend(&c.b, "more", 4, 0, false) == 4, "send to a socket shut for reading");
                conn_close(&c);

                /* A's SHUT_WR, then B closes: A hangs up (B's close marks it first). smcd
                 * holds a copy of Y_a: without one, B's close would end the pair */
                conn_open_hup(&c, feature);
                int smcd_ya = dup(c.b.y_peer);
                CHECK(smcd_ya >= 0, "dup: %m");
                CHECK(smc_ring_shutdown(&c.a, SHUT_WR) == 0, "shutdown(a, SHUT_WR)");
                CHECK(xrecv(&c.b, buf, sizeof(buf), 0, false) == 0, "B reads A's EOF");
                CHECK(smc_ring_close(&c.b) == false, "B's orderly close");
                CHECK(!!(kpoll(c.xa, POLLIN) & POLLHUP) == feature && !!x_hup_flag(c.dmb_a) == feature,
                      "feature %d: after the peer's close: X_a 0x%x, mark %x", feature, kpoll(c.xa, POLLIN),
                      x_hup_flag(c.dmb_a));
                CHECK(xrecv(&c.a, buf, sizeof(buf), 0, false) == 0, "A reads B's EOF");
                conn_close(&c);
                close(smcd_ya);

                /* B closes; A sends once (TCP takes it, B's kernel answers with RST): A
                 * hangs up (its own mark: it shuts X_a's writing side), EPIPE once */
                for (int cork = 0; cork < 2; cork++) {
                        conn_open_hup(&c, feature);
                        smcd_ya = dup(c.b.y_peer);
                        CHECK(smcd_ya >= 0, "dup: %m");
                        CHECK(smc_ring_close(&c.b) == false, "B's orderly close");
                        CHECK(!(kpoll(c.xa, POLLIN) & POLLHUP) && !x_hup_flag(c.dmb_a),
                              "X_a hung up by the peer's close alone: 0x%x", kpoll(c.xa, POLLIN));
                        CHECK(smc_ring_error(&c.a) == 0, "SO_ERROR before the send");
                        CHECK(xsend(&c.a, "late", 4, cork ? MSG_MORE : 0, false) == 4, "the send taken after the close");
                        if (cork)
                                CHECK(smc_ring_flush(&c.a) == 0, "push");
                        CHECK(!!(kpoll(c.xa, POLLIN) & POLLHUP) == feature && !!x_hup_flag(c.dmb_a) == feature,
                              "feature %d cork %d: after the taken send: X_a 0x%x, mark %x", feature, cork,
                              kpoll(c.xa, POLLIN), x_hup_flag(c.dmb_a));
                        CHECK((smc_ring_poll(&c.a) & (POLLHUP | POLLERR)) == (POLLHUP | POLLERR),
                              "smc_ring_poll after the taken send: 0x%x", smc_ring_poll(&c.a));
                        CHECK(xrecv(&c.a, buf, sizeof(buf), 0, false) == 0, "A reads EOF");
                        if (cork) {
                                CHECK(xsend(&c.a, "x", 1, 0, false) == -EPIPE, "the next send");
                                CHECK(smc_ring_error(&c.a) == 0, "SO_ERROR after the send reported EPIPE");
                        } else {
                                CHECK(smc_ring_error(&c.a) == EPIPE, "SO_ERROR after the taken send");
                                CHECK(smc_ring_error(&c.a) == 0, "SO_ERROR twice");
                                CHECK(xsend(&c.a, "x", 1, 0, false) == -EPIPE, "the next send");
                        }
                        CHECK(!(smc_ring_poll(&c.a) & POLLERR), "POLLERR after the error was reported");
                        conn_close(&c);
                        close(smcd_ya);
                }
        }
        printf("ok EPOLLHUP once both directions are shut, or after the send taken after the peer's close "
               "(with smcd's X_HUP feature; none without)\n");
}

/* Bad buffers: EFAULT before a byte moves, as the kernel's copy_from/to_user */
static void test_efault(void) {
        struct conn c;
        uint8_t buf[16];
        struct iovec bad[2] = { { .iov_base = NULL, .iov_len = 5 }, { .iov_base = (void *) 0x10, .iov_len = 5 } };
        struct iovec wrap = { .iov_base = (void *) (UINTPTR_MAX - 8), .iov_len = 64 };

        conn_open(&c, SMC_DMB_MIN_SIZE, SMC_DMB_MIN_SIZE);
        CHECK(smc_ring_send(&c.a, &bad[0], 1, 0, false) == -EFAULT, "send from NULL");
        CHECK(smc_ring_send(&c.a, &bad[1], 1, 0, false) == -EFAULT, "send from 0x10");
        CHECK(smc_ring_send(&c.a, &wrap, 1, 0, false) == -EFAULT, "send from a wrapping buffer");
        CHECK(smc_ring_send(&c.a, (const struct iovec *) 8, 1, 0, false) == -EFAULT, "send with a bad iovec array");
        CHECK(smc_ring_send(&c.a, &(struct iovec) { NULL, 0 }, 1, 0, false) == 0, "zero-length send from NULL");
        /* as the kernel's: the fault only where there is data to copy */
        CHECK(smc_ring_recv(&c.b, &bad[0], 1, 0, true) == -EAGAIN, "nonblocking recv into NULL, no data");
        CHECK(xsend(&c.a, "hello", 5, 0, false) == 5, "send");
        CHECK(smc_ring_recv(&c.b, &bad[0], 1, 0, false) == -EFAULT, "recv into NULL");
        CHECK(smc_ring_recv(&c.b, bad, 2, MSG_PEEK, false) == -EFAULT, "peek into NULL");
        CHECK(xrecv(&c.b, buf, sizeof(buf), 0, false) == 5 && memcmp(buf, "hello", 5) == 0,
              "the data after the EFAULTs");
        CHECK(smc_ring_close(&c.a) == false, "orderly close");
        CHECK(smc_ring_recv(&c.b, &bad[0], 1, 0, false) == 0, "recv into NULL after the peer's close: EOF");
        conn_close(&c);
        printf("ok EFAULT for NULL, first-page and wrapping buffers, nothing moved\n");
}

static void test_close_abort(void) {
        struct conn c;
        uint8_t buf[256];
        ssize_t n;

        /* B closes with unread data from A: A sees ECONNRESET once */
        conn_open(&c, SMC_DMB_MIN_SIZE, SMC_DMB_MIN_SIZE);
        CHECK(xsend(&c.b, "to-a", 4, 0, false) == 4, "send");
        CHECK(xsend(&c.a, "unread", 6, 0, false) == 6, "send");
        CHECK(smc_ring_close(&c.b) == true, "close with unread data did not abort");
        CHECK(smc_ring_poll(&c.a) & POLLERR, "no POLLERR after the abort");
        n = xrecv(&c.a, buf, sizeof(buf), 0, false);
        CHECK(n == 4, "data before the abort not delivered first: %zd %s", n, ERRSTR(n));
        n = xrecv(&c.a, buf, sizeof(buf), 0, false);
        CHECK(n == -ECONNRESET, "recv after the abort: %zd %s", n, ERRSTR(n));
        n = xrecv(&c.a, buf, sizeof(buf), 0, false);
        CHECK(n == 0, "recv after ECONNRESET: %zd %s", n, ERRSTR(n));
        n = xsend(&c.a, "x", 1, 0, false);
        CHECK(n == -EPIPE, "send after the reset was reported: %zd %s", n, ERRSTR(n));
        CHECK(smc_ring_error(&c.a) == 0, "SO_ERROR after it was reported");
        conn_close(&c);

        /* send first after an abort: ECONNRESET, then EPIPE */
        conn_open(&c, SMC_DMB_MIN_SIZE, SMC_DMB_MIN_SIZE);
        CHECK(xsend(&c.a, "unread", 6, 0, false) == 6, "send");
        CHECK(smc_ring_close(&c.b) == true, "no abort");
        n = xsend(&c.a, "x", 1, 0, false);
        CHECK(n == -ECONNRESET, "send after abort: %zd %s", n, ERRSTR(n));
        n = xsend(&c.a, "x", 1, 0, false);
        CHECK(n == -EPIPE, "second send after abort: %zd %s", n, ERRSTR(n));
        conn_close(&c);

        /* SO_ERROR reports the abort once */
        conn_open(&c, SMC_DMB_MIN_SIZE, SMC_DMB_MIN_SIZE);
        CHECK(xsend(&c.a, "unread", 6, 0, false) == 6, "send");
        CHECK(smc_ring_close(&c.b) == true, "no abort");
        CHECK(smc_ring_error(&c.a) == ECONNRESET, "SO_ERROR");
        CHECK(smc_ring_error(&c.a) == 0, "SO_ERROR twice");
        conn_close(&c);

        /* orderly close, then send: the first is taken (TCP sends it, the peer
         * answers RST), the next ones fail with EPIPE; nothing reaches the ring */
        conn_open(&c, SMC_DMB_MIN_SIZE, SMC_DMB_MIN_SIZE);
        CHECK(smc_ring_close(&c.b) == false, "orderly close aborted");
        CHECK(!smc_ring_tcp_closed(&c.a), "CLOSE before the send (TCP: CLOSE_WAIT)");
        n = xsend(&c.a, "xyz", 3, 0, false);
        CHECK(n == 3, "first send after the peer closed: %zd %s, want 3 as TCP", n, ERRSTR(n));
        CHECK(smc_ring_tcp_closed(&c.a), "not CLOSE after the send (TCP: the peer's RST)");
        /* TCP: the RST set EPIPE (tcp_reset() in CLOSE_WAIT), reported once */
        CHECK(smc_ring_error(&c.a) == EPIPE, "SO_ERROR after the dropped send");
        CHECK(smc_ring_error(&c.a) == 0, "SO_ERROR twice after the dropped send");
        n = xsend(&c.a, "x", 1, 0, false);
        CHECK(n == -EPIPE, "second send after the peer closed: %zd %s", n, ERRSTR(n));
        n = xsend(&c.a, "x", 1, MSG_MORE, true);
        CHECK(n == -EPIPE, "third send after the peer closed: %zd %s", n, ERRSTR(n));
        CHECK(xrecv(&c.a, buf, sizeof(buf), 0, false) == 0, "recv after the peer closed");
        CHECK(smc_curs_count(c.a.tx_prod) == 0, "the dropped send moved the producer cursor");
        conn_close(&c);

        /* a send held back (MSG_MORE) after the peer closed is accepted, as TCP holds
         * it; the push after it is the taken send, then EPIPE */
        conn_open(&c, SMC_DMB_MIN_SIZE, SMC_DMB_MIN_SIZE);
        CHECK(smc_ring_close(&c.b) == false, "orderly close aborted");
        n = xsend(&c.a, "held", 4, MSG_MORE, false);
        CHECK(n == 4, "MSG_MORE send after the peer closed: %zd %s, want 4 as TCP", n, ERRSTR(n));
        CHECK(!smc_ring_tcp_closed(&c.a), "CLOSE after a held send (TCP: nothing went out yet)");
        n = xsend(&c.a, "x", 1, 0, false);
        CHECK(n == 1, "the push after a held send: %zd %s, want 1 as TCP", n, ERRSTR(n));
        n = xsend(&c.a, "x", 1, 0, false);
        CHECK(n == -EPIPE, "send after the push: %zd %s", n, ERRSTR(n));
        conn_close(&c);

        /* ... and TCP_NODELAY's push (smc_ring_flush) is that send too, as uncork */
        conn_open(&c, SMC_DMB_MIN_SIZE, SMC_DMB_MIN_SIZE);
        CHECK(smc_ring_close(&c.b) == false, "orderly close aborted");
        n = xsend(&c.a, "held", 4, MSG_MORE, false);
        CHECK(n == 4, "MSG_MORE send after the peer closed: %zd %s, want 4 as TCP", n, ERRSTR(n));
        CHECK(smc_ring_flush(&c.a) == 0, "the push (TCP_NODELAY) failed");
        CHECK(smc_ring_tcp_closed(&c.a), "not CLOSE after the push (TCP: the peer's RST)");
        n = xsend(&c.a, "x", 1, 0, false);
        CHECK(n == -EPIPE, "send after the push: %zd %s, want EPIPE as TCP", n, ERRSTR(n));
        CHECK(smc_curs_count(c.a.tx_prod) == 0, "the dropped send moved the producer cursor");
        conn_close(&c);

        /* ... but not after our own shutdown(SHUT_WR): EPIPE at once, as TCP */
        conn_open(&c, SMC_DMB_MIN_SIZE, SMC_DMB_MIN_SIZE);
        CHECK(smc_ring_shutdown(&c.a, SHUT_WR) == 0, "shutdown");
        CHECK(!smc_ring_tcp_closed(&c.a), "CLOSE after SHUT_WR alone (TCP: FIN_WAIT2)");
        CHECK(smc_ring_close(&c.b) == false, "orderly close aborted");
        CHECK(smc_ring_tcp_closed(&c.a), "not CLOSE after FINs both ways");
        n = xsend(&c.a, "x", 1, 0, false);
        CHECK(n == -EPIPE, "send after SHUT_WR and the peer's close: %zd %s", n, ERRSTR(n));
        conn_close(&c);
        /* a peer that shut both directions but holds the socket: as TCP (RST from a
         * socket in FIN_WAIT with its receive side shut), the first send is taken,
         * the peer gets the reset, later sends fail */
        conn_open(&c, SMC_DMB_MIN_SIZE, SMC_DMB_MIN_SIZE);
        CHECK(smc_ring_shutdown(&c.b, SHUT_RDWR) == 0, "shutdown(SHUT_RDWR)");
        CHECK(xrecv(&c.a, buf, sizeof(buf), 0, false) == 0, "EOF after the peer's SHUT_RDWR");
        n = xsend(&c.a, "xy", 2, 0, false);
        CHECK(n == 2, "first send to a peer that shut both ways: %zd %s", n, ERRSTR(n));
        CHECK(smc_ring_tcp_closed(&c.a) && smc_ring_tcp_closed(&c.b), "not CLOSE on both sides after the reset");
        n = xsend(&c.a, "x", 1, 0, false);
        CHECK(n == -EPIPE, "second send to a peer that shut both ways: %zd %s", n, ERRSTR(n));
        CHECK(smc_ring_error(&c.b) == ECONNRESET, "the peer's SO_ERROR after the reset");
        n = xrecv(&c.b, buf, sizeof(buf), 0, true);
        CHECK(n == 0, "the peer's recv after the reset: %zd %s (nothing was queued)", n, ERRSTR(n));
        CHECK(smc_curs_count(c.a.tx_prod) == 0, "the dropped send moved the producer cursor");
        conn_close(&c);

        /* ... but only SHUT_RD: data goes on to be queued, as Linux TCP does */
        conn_open(&c, SMC_DMB_MIN_SIZE, SMC_DMB_MIN_SIZE);
        CHECK(smc_ring_shutdown(&c.b, SHUT_RD) == 0, "shutdown(SHUT_RD)");
        CHECK(xsend(&c.a, "xy", 2, 0, false) == 2, "send to a peer that shut reading");
        CHECK(xsend(&c.a, "z", 1, 0, false) == 1, "second send to a peer that shut reading");
        CHECK(!smc_ring_tcp_closed(&c.a), "CLOSE after the peer's SHUT_RD alone");
        conn_close(&c);
        printf("ok close: abort -> ECONNRESET once, closed -> one send taken, then EPIPE\n");
}

struct blocked_op {
        struct smc_ring_ep *ep;
        bool send;
        size_t len;
        _Atomic ssize_t result;
        _Atomic bool done;
};

static void *blocked_op_run(void *p) {
        struct blocked_op *o = p;
        uint8_t *buf = calloc(1, o->len);
        ssize_t n;

        CHECK(buf, "calloc");
        n = o->send ? xsend(o->ep, buf, o->len, 0, false) : xrecv(o->ep, buf, o->len, 0, false);
        atomic_store(&o->result, n);
        atomic_store(&o->done, true);
        free(buf);
        return NULL;
}

static uint64_t mono_ns(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000000ull + (uint64_t) ts.tv_nsec;
}

/* shutdown() from another thread, as TCP: SHUT_WR does not wait for a sender blocked
 * on a full ring (the send returns what it sent, the peer reads it, then EOF); SHUT_RD
 * wakes a blocked reader with EOF and makes X readable for poll(). */
static void test_shutdown_other_thread(void) {
        struct conn c;
        uint8_t buf[256];
        uint64_t t0;
        ssize_t n, got = 0;

        {
                struct blocked_op o = { .send = true, .len = 3 * SMC_DMB_MIN_SIZE };
                pthread_t t;

                conn_open(&c, SMC_DMB_MIN_SIZE, SMC_DMB_MIN_SIZE);
                o.ep = &c.a;
                CHECK(pthread_create(&t, NULL, blocked_op_run, &o) == 0, "pthread_create");
                sleep_ms(20);
                CHECK(!atomic_load(&o.done), "send did not block");
                t0 = mono_ns();
                CHECK(smc_ring_shutdown(&c.a, SHUT_WR) == 0, "shutdown(SHUT_WR) with a blocked sender");
                CHECK(mono_ns() - t0 < 50000000ull, "shutdown(SHUT_WR) waited %.1f ms", (mono_ns() - t0) / 1e6);
                pthread_join(t, NULL);
                CHECK(atomic_load(&o.result) == SMC_DMB_MIN_SIZE, "blocked send returned %zd",
                      (ssize_t) atomic_load(&o.result));
                for (;;) {
                        n = xrecv(&c.b, buf, sizeof(buf), 0, false);
                        if (n <= 0)
                                break;
                        got += n;
                }
                CHECK(n == 0 && got == SMC_DMB_MIN_SIZE, "peer read %zd bytes then %zd %s", got, n, ERRSTR(n));
                conn_close(&c);
        }
        {
                struct blocked_op o = { .send = false, .len = 64 };
                struct pollfd p;
                pthread_t t;

                conn_open(&c, SMC_DMB_MIN_SIZE, SMC_DMB_MIN_SIZE);
                o.ep = &c.a;
                CHECK(pthread_create(&t, NULL, blocked_op_run, &o) == 0, "pthread_create");
                sleep_ms(20);
                CHECK(!atomic_load(&o.done), "recv did not block");
                CHECK(smc_ring_shutdown(&c.a, SHUT_RD) == 0, "shutdown(SHUT_RD)");
                pthread_join(t, NULL);
                CHECK(atomic_load(&o.result) == 0, "blocked recv after SHUT_RD: %zd", (ssize_t) atomic_load(&o.result));
                p = (struct pollfd) { .fd = c.a.x, .events = POLLIN | POLLRDHUP };
                CHECK(poll(&p, 1, 0) == 1 && (p.revents & (POLLIN | POLLRDHUP)) == (POLLIN | POLLRDHUP),
                      "poll(X) after SHUT_RD: %#x", (unsigned) p.revents);
                /* the writer is not told anything, as with TCP: its sends still work */
                n = xsend(&c.b, "after", 5, 0, false);
                CHECK(n == 5, "peer's send after our SHUT_RD: %zd %s", n, ERRSTR(n));
                n = xsend(&c.b, "again", 5, 0, false);
                CHECK(n == 5, "peer's second send after our SHUT_RD: %zd %s", n, ERRSTR(n));
                conn_close(&c);
        }
        printf("ok shutdown from another thread: SHUT_WR with a blocked sender, SHUT_RD wakes a reader\n");
}

/* shutdown(SHUT_WR) while another thread holds the send lock for a moment (a push of
 * held bytes, a poll making an owed plug): the EOF still goes out. It used to be left
 * to that holder, which never did it: the peer saw no EOF until the next send. */
struct lock_taker {
        struct smc_ring_ep *ep;
        _Atomic bool stop;
        _Atomic unsigned laps;
};

static void *lock_taker_run(void *p) {
        struct lock_taker *k = p;

        while (!atomic_load(&k->stop)) {
                (void) smc_ring_flush(k->ep);
                (void) smc_ring_plug_owed(k->ep, false);
                atomic_fetch_add(&k->laps, 1);
        }
        return NULL;
}

static void test_shutdown_busy_lock(void) {
        unsigned lost = 0, rounds = 300;

        for (unsigned i = 0; i < rounds; i++) {
                struct lock_taker k = { .stop = false };
                struct conn c;
                uint8_t buf[16];
                pthread_t t;
                ssize_t n;

                conn_open(&c, SMC_DMB_MIN_SIZE, SMC_DMB_MIN_SIZE);
                k.ep = &c.a;
                CHECK(pthread_create(&t, NULL, lock_taker_run, &k) == 0, "pthread_create");
                CHECK(xsend(&c.a, "x", 1, 0, false) == 1, "send");
                while (atomic_load(&k.laps) < 100)
                        ; /* (the other thread runs) */
                CHECK(smc_ring_shutdown(&c.a, SHUT_WR) == 0, "shutdown(SHUT_WR)");
                atomic_store(&k.stop, true);
                pthread_join(t, NULL);
                CHECK(xrecv(&c.b, buf, sizeof(buf), 0, false) == 1, "recv the byte");
                {
                        struct pollfd p = { .fd = c.xb, .events = POLLIN };

                        (void) poll(&p, 1, 1000);
                }
                n = xrecv(&c.b, buf, sizeof(buf), 0, true);
                if (n != 0)
                        lost++;
                conn_close(&c);
        }
        CHECK(lost == 0, "SHUT_WR beside another thread's short hold of the send lock: no EOF in %u of %u", lost,
              rounds);
        printf("ok SHUT_WR while another thread holds the send lock a moment: EOF in %u of %u\n", rounds, rounds);
}

/* B dies: its ends close without any flag */
static void kill_b(struct conn *c) {
        close(c->b.y_peer);
        c->b.y_peer = -1;
        close(c->xb);
        c->xb = -1;
}

static void test_peer_death(void) {
        struct conn c;
        uint8_t buf[64];
        ssize_t n;

        /* a blocked reader */
        {
                struct blocked_op o = { .send = false, .len = 64 };
                pthread_t t;

                conn_open(&c, SMC_DMB_MIN_SIZE, SMC_DMB_MIN_SIZE);
                o.ep = &c.a;
                CHECK(pthread_create(&t, NULL, blocked_op_run, &o) == 0, "pthread_create");
                sleep_ms(20);
                CHECK(!atomic_load(&o.done), "recv did not block");
                kill_b(&c);
                pthread_join(t, NULL);
                /* as TCP: a process that dies having read everything it was sent
                 * closes orderly (FIN), so the reader sees EOF */
                CHECK(o.result == 0, "blocked recv after peer death: %zd %s", (ssize_t) o.result,
                      ERRSTR(o.result));
                n = xrecv(&c.a, buf, sizeof(buf), 0, false);
                CHECK(n == 0, "recv after the EOF: %zd %s", n, ERRSTR(n));
                /* its FIN: one send is taken (the peer's kernel answers RST), then EPIPE */
                n = xsend(&c.a, buf, 1, 0, false);
                CHECK(n == 1, "first send after the peer's death: %zd %s", n, ERRSTR(n));
                n = xsend(&c.a, buf, 1, 0, false);
                CHECK(n == -EPIPE, "send after the peer's death: %zd %s", n, ERRSTR(n));
                conn_close(&c);
        }

        /* a nonblocking reader, and the data sent before the death still arrives */
        conn_open(&c, SMC_DMB_MIN_SIZE, SMC_DMB_MIN_SIZE);
        CHECK(xsend(&c.b, "last", 4, 0, false) == 4, "send");
        kill_b(&c);
        n = xrecv(&c.a, buf, sizeof(buf), 0, true);
        CHECK(n == 4, "data before the death: %zd %s", n, ERRSTR(n));
        n = xrecv(&c.a, buf, sizeof(buf), 0, true);
        CHECK(n == 0, "nonblocking recv after death: %zd %s", n, ERRSTR(n));
        conn_close(&c);

        /* a peer that dies with our data unread resets the connection (TCP: RST) */
        conn_open(&c, SMC_DMB_MIN_SIZE, SMC_DMB_MIN_SIZE);
        CHECK(xsend(&c.a, "unread", 6, 0, false) == 6, "send");
        kill_b(&c);
        n = xrecv(&c.a, buf, sizeof(buf), 0, false);
        CHECK(n == -ECONNRESET, "recv after death with unread data: %zd %s", n, ERRSTR(n));
        conn_close(&c);

        /* smc_ring_poll notices: EOF after an orderly death, error after a reset */
        conn_open(&c, SMC_DMB_MIN_SIZE, SMC_DMB_MIN_SIZE);
        kill_b(&c);
        CHECK((smc_ring_poll(&c.a) & (POLLIN | POLLRDHUP)) == (POLLIN | POLLRDHUP), "poll after death: %#x",
              (unsigned) smc_ring_poll(&c.a));
        conn_close(&c);
        conn_open(&c, SMC_DMB_MIN_SIZE, SMC_DMB_MIN_SIZE);
        CHECK(xsend(&c.a, "unread", 6, 0, false) == 6, "send");
        kill_b(&c);
        CHECK((smc_ring_poll(&c.a) & (POLLERR | POLLHUP)) == (POLLERR | POLLHUP), "poll after reset: %#x",
              (unsigned) smc_ring_poll(&c.a));
        conn_close(&c);

        /* a writer blocked on a full ring */
        {
                struct blocked_op o = { .send = true, .len = 3 * SMC_DMB_MIN_SIZE };
                pthread_t t;

                conn_open(&c, SMC_DMB_MIN_SIZE, SMC_DMB_MIN_SIZE);
                o.ep = &c.a;
                CHECK(pthread_create(&t, NULL, blocked_op_run, &o) == 0, "pthread_create");
                sleep_ms(20);
                CHECK(!atomic_load(&o.done), "send did not block");
                kill_b(&c);
                pthread_join(t, NULL);
                /* the first ring-full was sent; the error comes with the next call */
                CHECK(o.result == SMC_DMB_MIN_SIZE, "blocked send after peer death: %zd %s", (ssize_t) o.result,
                      ERRSTR(o.result));
                n = xsend(&c.a, buf, 1, 0, false);
                CHECK(n == -ECONNRESET, "send after the death: %zd %s", n, ERRSTR(n));
                n = xsend(&c.a, buf, 1, 0, false);
                CHECK(n == -EPIPE, "second send after the death: %zd %s", n, ERRSTR(n));
                conn_close(&c);
        }

        /* a writer with space: the doorbell write finds the peer gone */
        conn_open(&c, SMC_DMB_MIN_SIZE, SMC_DMB_MIN_SIZE);
        kill_b(&c);
        n = xsend(&c.a, buf, 10, 0, false);
        CHECK(n == -ECONNRESET || n == 10, "send to a dead peer: %zd %s", n, ERRSTR(n));
        if (n == 10)
                n = xsend(&c.a, buf, 10, 0, false);
        CHECK(n == -ECONNRESET, "send to a dead peer: %zd %s", n, ERRSTR(n));
        conn_close(&c);
        printf("ok peer death (close(Y) without flags) -> EOF, or ECONNRESET with data unread\n");
}

static void on_sigusr1(int sig) {
        (void) sig;
}

static void test_eintr(void) {
        struct sigaction sa = { .sa_handler = on_sigusr1 }; /* no SA_RESTART */
        struct blocked_op o = { .send = false, .len = 64 };
        struct conn c;
        pthread_t t;

        CHECK(sigaction(SIGUSR1, &sa, NULL) == 0, "sigaction");
        conn_open(&c, SMC_DMB_MIN_SIZE, SMC_DMB_MIN_SIZE);
        c.a.busy_poll_ns = 1000;
        o.ep = &c.a;
        CHECK(pthread_create(&t, NULL, blocked_op_run, &o) == 0, "pthread_create");
        while (!atomic_load(&o.done)) {
                sleep_ms(5);
                pthread_kill(t, SIGUSR1);
        }
        pthread_join(t, NULL);
        CHECK(o.result == -EINTR, "recv interrupted: %zd %s", (ssize_t) o.result, ERRSTR(o.result));
        /* the connection still works */
        CHECK(xsend(&c.b, "z", 1, 0, false) == 1, "send");
        CHECK(xrecv(&c.a, (char[4]) { 0 }, 4, 0, false) == 1, "recv after EINTR");
        conn_close(&c);
        printf("ok EINTR\n");
}

/* ---- sendfile: one copy from a file into the peer's ring ---------------------------- */

/* A temporary file of @n pattern bytes (stream @seed), unlinked. */
static int pattern_file(size_t n, uint64_t seed) {
        char path[] = "/tmp/test-ring-sendfile-XXXXXX";
        uint8_t *b = malloc(n ? n : 1);
        int fd = mkstemp(path);

        CHECK(b && fd >= 0, "mkstemp: %m");
        CHECK(unlink(path) == 0, "unlink: %m");
        fill(b, n, seed, 0);
        CHECK(pwrite(fd, b, n, 0) == (ssize_t) n, "pwrite: %m");
        free(b);
        return fd;
}

/* Receive exactly @n bytes on @ep (nonblocking: they must be there) and check them
 * against stream @seed from @pos. */
static void recv_check(struct smc_ring_ep *ep, size_t n, uint64_t seed, uint64_t pos, const char *what) {
        uint8_t *b = malloc(n ? n : 1);
        size_t got = 0;

        CHECK(b, "malloc");
        while (got < n) {
                ssize_t k = xrecv(ep, b + got, n - got, 0, true);
                CHECK(k > 0, "%s: recv after %zu of %zu bytes: %zd %s", what, got, n, k, ERRSTR(k));
                got += (size_t) k;
        }
        verify(b, n, seed, pos, what);
        free(b);
}

struct sendfile_arg {
        struct smc_ring_ep *ep;
        int fd;
        size_t len;
        uint64_t seed;
        int64_t off;
        ssize_t result;
};

static void *sendfile_all(void *p) {
        struct sendfile_arg *a = p;
        int64_t off = 0;

        while ((size_t) off < a->len) {
                ssize_t k = smc_ring_sendfile(a->ep, a->fd, &off, a->len - (size_t) off, 0, false, -1);
                CHECK(k > 0, "blocking sendfile at %" PRId64 ": %zd %s", off, k, ERRSTR(k));
        }
        a->off = off;
        return NULL;
}

#define HDR_B(c) ((struct smc_dmb_hdr *) (c)->dmb_b)

static void test_sendfile(void) {
        const size_t flen = 100000;
        const uint64_t seed = 77;
        struct conn c;
        int64_t off;
        ssize_t k;
        int fd;

        conn_open(&c, SMC_DMB_MIN_SIZE, SMC_DMB_MIN_SIZE); /* B's ring (A writes): 16 KiB */
        fd = pattern_file(flen, seed);

        /* an offset: data, offset, the file position untouched, the doorbell rung, one
         * message and one sendfile call counted */
        {
                uint64_t msgs = atomic_load(&HDR_B(&c)->prod_msgs);

                CHECK(lseek(fd, 5, SEEK_SET) == 5, "lseek");
                off = 1000;
                k = smc_ring_sendfile(&c.a, fd, &off, 3000, 0, false, -1);
                CHECK(k == 3000 && off == 4000, "sendfile at 1000: %zd %s, offset %" PRId64, k, ERRSTR(k), off);
                CHECK(lseek(fd, 0, SEEK_CUR) == 5, "the file position moved with an offset given");
                CHECK(kpoll(c.xb, POLLIN) & POLLIN, "X_b not readable after sendfile");
                CHECK(atomic_load(&HDR_B(&c)->prod_msgs) == msgs + 1, "prod_msgs");
                CHECK(atomic_load(&HDR_B(&c)->prod_sendfile_calls) == 1 &&
                      atomic_load(&HDR_B(&c)->prod_sendfile_bytes) == 3000, "sendfile counters");
                recv_check(&c.b, 3000, seed, 1000, "sendfile at an offset");
                CHECK(!(kpoll(c.xb, POLLIN) & POLLIN), "X_b readable on an empty ring");
        }

        /* wrap-around: prod at 10000 of 16384, then 12000 bytes: two pieces in one call */
        {
                uint8_t pad[10000 - 3000];

                memset(pad, 0, sizeof(pad));
                CHECK(xsend(&c.a, pad, sizeof(pad), 0, false) == (ssize_t) sizeof(pad), "send pad");
                CHECK(xrecv(&c.b, pad, sizeof(pad), MSG_WAITALL, false) == (ssize_t) sizeof(pad), "recv pad");
                CHECK(smc_curs_count(atomic_load(&HDR_B(&c)->prod)) == 10000, "prod at 10000");
                off = 20000;
                k = smc_ring_sendfile(&c.a, fd, &off, 12000, 0, true, -1);
                CHECK(k == 12000 && off == 32000, "wrapping sendfile: %zd %s", k, ERRSTR(k));
                CHECK(smc_curs_count(atomic_load(&HDR_B(&c)->prod)) == 10000 + 12000 - SMC_DMB_MIN_SIZE,
                      "prod after the wrap");
                recv_check(&c.b, 12000, seed, 20000, "wrapping sendfile");
        }

        /* the file position (offset NULL): it moves by exactly what was sent */
        {
                CHECK(lseek(fd, 50000, SEEK_SET) == 50000, "lseek");
                k = smc_ring_sendfile(&c.a, fd, NULL, 7000, 0, false, -1);
                CHECK(k == 7000 && lseek(fd, 0, SEEK_CUR) == 57000, "file position: %zd %s", k, ERRSTR(k));
                recv_check(&c.b, 7000, seed, 50000, "sendfile at the file position");
        }

        /* a count past the end of the file: what is there, then 0 (nothing sent) */
        {
                uint64_t calls = atomic_load(&HDR_B(&c)->prod_sendfile_calls);

                off = (int64_t) flen - 10;
                k = smc_ring_sendfile(&c.a, fd, &off, 1000, 0, false, -1);
                CHECK(k == 10 && off == (int64_t) flen, "past the end: %zd %s", k, ERRSTR(k));
                k = smc_ring_sendfile(&c.a, fd, &off, 1000, 0, false, -1);
                CHECK(k == 0 && off == (int64_t) flen, "at the end: %zd %s", k, ERRSTR(k));
                off = (int64_t) flen + 5000;
                k = smc_ring_sendfile(&c.a, fd, &off, 1000, 0, false, -1);
                CHECK(k == 0 && off == (int64_t) flen + 5000, "beyond the end: %zd %s", k, ERRSTR(k));
                recv_check(&c.b, 10, seed, flen - 10, "past the end");
                CHECK(atomic_load(&HDR_B(&c)->prod_sendfile_calls) == calls + 1, "an empty sendfile counted");
                /* the same through the file position */
                CHECK(lseek(fd, (off_t) flen - 3, SEEK_SET) == (off_t) flen - 3, "lseek");
                k = smc_ring_sendfile(&c.a, fd, NULL, 1000, 0, false, -1);
                CHECK(k == 3 && lseek(fd, 0, SEEK_CUR) == (off_t) flen, "past the end (position): %zd", k);
                recv_check(&c.b, 3, seed, flen - 3, "past the end (position)");
        }

        /* nonblocking, more than the ring holds: what fits, the offset counting only
         * that; then EAGAIN with nothing moved; then the rest after draining */
        {
                int64_t sent = 0;

                off = 0;
                k = smc_ring_sendfile(&c.a, fd, &off, 40000, 0, true, -1);
                CHECK(k == SMC_DMB_MIN_SIZE && off == k, "nonblocking, full: %zd %s", k, ERRSTR(k));
                CHECK(smc_ring_readable(&c.b) == SMC_DMB_MIN_SIZE, "ring full: %u", smc_ring_readable(&c.b));
                k = smc_ring_sendfile(&c.a, fd, &off, 40000, MSG_DONTWAIT, false, -1);
                CHECK(k == -EAGAIN && off == SMC_DMB_MIN_SIZE, "full ring: %zd %s, offset %" PRId64, k, ERRSTR(k), off);
                while (sent < 40000) {
                        size_t n = smc_ring_readable(&c.b);

                        recv_check(&c.b, n, seed, (uint64_t) sent, "nonblocking sendfile");
                        sent += (int64_t) n;
                        if (off < 40000) {
                                k = smc_ring_sendfile(&c.a, fd, &off, 40000 - (size_t) off, 0, true, -1);
                                CHECK(k > 0, "nonblocking sendfile after a drain: %zd %s", k, ERRSTR(k));
                        }
                }
                CHECK(off == 40000 && sent == 40000, "nonblocking: %" PRId64 " / %" PRId64, off, sent);
        }

        /* cork, MSG_MORE, autocork: held as a send's bytes are, with the send around it */
        {
                CHECK(smc_ring_set_cork(&c.a, true) == 0, "cork");
                CHECK(xsend(&c.a, "HDR", 3, 0, false) == 3, "corked header");
                off = 100;
                k = smc_ring_sendfile(&c.a, fd, &off, 500, 0, false, -1);
                CHECK(k == 500, "corked sendfile: %zd %s", k, ERRSTR(k));
                CHECK(smc_ring_readable(&c.b) == 0 && !(kpoll(c.xb, POLLIN) & POLLIN), "corked sendfile visible");
                CHECK(smc_ring_set_cork(&c.a, false) == 0, "uncork");
                CHECK(smc_ring_readable(&c.b) == 503, "uncork published %u", smc_ring_readable(&c.b));
                {
                        char h[3];
                        CHECK(xrecv(&c.b, h, 3, 0, true) == 3 && memcmp(h, "HDR", 3) == 0, "header");
                }
                recv_check(&c.b, 500, seed, 100, "corked sendfile");

                off = 0;
                k = smc_ring_sendfile(&c.a, fd, &off, 300, MSG_MORE, false, -1);
                CHECK(k == 300 && smc_ring_readable(&c.b) == 0, "MSG_MORE sendfile: %zd, visible %u", k,
                      smc_ring_readable(&c.b));
                k = smc_ring_sendfile(&c.a, fd, &off, 200, 0, false, -1);
                CHECK(k == 200 && smc_ring_readable(&c.b) == 500, "sendfile after MSG_MORE: %zd, visible %u", k,
                      smc_ring_readable(&c.b));
                recv_check(&c.b, 500, seed, 0, "MSG_MORE sendfile");

                c.a.autocork_size = 1000;
                CHECK(smc_ring_set_cork(&c.a, true) == 0, "cork");
                off = 0;
                for (int i = 0; i < 5; i++)
                        CHECK(smc_ring_sendfile(&c.a, fd, &off, 300, 0, false, -1) == 300, "corked sendfile");
                CHECK(smc_ring_readable(&c.b) == 1200, "autocork published %u, want 1200", smc_ring_readable(&c.b));
                CHECK(smc_ring_set_cork(&c.a, false) == 0, "uncork");
                recv_check(&c.b, 1500, seed, 0, "autocorked sendfile");
                c.a.autocork_size = SMC_DMB_MIN_SIZE / 2;
        }

        /* errors of the file: nothing sent, the offset untouched, the connection fine */
        {
                int p[2], wfd, dfd;
                uint64_t prod = atomic_load(&HDR_B(&c)->prod);

                CHECK(pipe(p) == 0, "pipe");
                CHECK(write(p[1], "xyz", 3) == 3, "write pipe");
                off = 0;
                k = smc_ring_sendfile(&c.a, p[0], &off, 3, 0, false, -1);
                CHECK(k == -ESPIPE && off == 0, "pipe with an offset: %zd %s", k, ERRSTR(k));
                close(p[0]);
                close(p[1]);
                wfd = open("/dev/null", O_WRONLY | O_CLOEXEC);
                CHECK(wfd >= 0, "open /dev/null");
                k = smc_ring_sendfile(&c.a, wfd, &off, 3, 0, false, -1);
                CHECK(k == -EBADF && off == 0, "write-only source: %zd %s", k, ERRSTR(k));
                close(wfd);
                dfd = open("/tmp", O_RDONLY | O_DIRECTORY);
                k = smc_ring_sendfile(&c.a, dfd, &off, 3, 0, false, -1);
                CHECK(k == -EISDIR && off == 0, "directory: %zd %s", k, ERRSTR(k));
                close(dfd);
                k = smc_ring_sendfile(&c.a, 987654, &off, 3, 0, false, -1);
                CHECK(k == -EBADF, "closed descriptor: %zd %s", k, ERRSTR(k));
                off = -1;
                k = smc_ring_sendfile(&c.a, fd, &off, 3, 0, false, -1);
                CHECK(k == -EINVAL && off == -1, "negative offset: %zd %s", k, ERRSTR(k));
                CHECK(atomic_load(&HDR_B(&c)->prod) == prod, "a failed sendfile moved prod");
                off = 0;
                CHECK(smc_ring_sendfile(&c.a, fd, &off, 0, 0, false, -1) == 0 && off == 0, "count 0");
        }

        /* blocking, 100000 bytes through the 16 KiB ring to a receiver thread */
        {
                struct sendfile_arg a = { .ep = &c.a, .fd = fd, .len = flen, .seed = seed };
                uint8_t *b = malloc(flen);
                pthread_t t;

                CHECK(b, "malloc");
                CHECK(pthread_create(&t, NULL, sendfile_all, &a) == 0, "pthread_create");
                CHECK(xrecv(&c.b, b, flen, MSG_WAITALL, false) == (ssize_t) flen, "recv all");
                pthread_join(t, NULL);
                CHECK(a.off == (int64_t) flen, "offset %" PRId64, a.off);
                verify(b, flen, seed, 0, "blocking sendfile");
                free(b);
        }

        /* SO_SNDTIMEO of @timeo_fd: a full ring, nobody reading: what fit, then EAGAIN
         * after the timeout */
        {
                struct timeval tv = { 0, 200000 };
                int sp[2];
                uint64_t t0;

                CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sp) == 0, "socketpair");
                CHECK(setsockopt(sp[0], SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) == 0, "SO_SNDTIMEO");
                off = 0;
                t0 = mono_ns();
                k = smc_ring_sendfile(&c.a, fd, &off, 40000, 0, false, sp[0]);
                CHECK(k == SMC_DMB_MIN_SIZE && off == k, "timed out sendfile: %zd %s", k, ERRSTR(k));
                t0 = mono_ns() - t0;
                CHECK(t0 >= 190000000u && t0 < 2000000000u, "timed out after %" PRIu64 " ms", t0 / 1000000);
                t0 = mono_ns();
                k = smc_ring_sendfile(&c.a, fd, &off, 40000, 0, false, sp[0]);
                CHECK(k == -EAGAIN && off == SMC_DMB_MIN_SIZE, "timed out, nothing sent: %zd %s", k, ERRSTR(k));
                t0 = mono_ns() - t0;
                CHECK(t0 >= 190000000u && t0 < 2000000000u, "timed out after %" PRIu64 " ms", t0 / 1000000);
                /* the same limit on a send */
                {
                        uint8_t z[100] = { 0 };
                        struct iovec v = { z, sizeof(z) };

                        t0 = mono_ns();
                        k = smc_ring_send_timeo(&c.a, &v, 1, 0, false, sp[0]);
                        t0 = mono_ns() - t0;
                        CHECK(k == -EAGAIN && t0 >= 190000000u && t0 < 2000000000u,
                              "timed out send: %zd %s after %" PRIu64 " ms", k, ERRSTR(k), t0 / 1000000);
                        CHECK(smc_ring_send_timeo(&c.a, &v, 1, 0, true, sp[0]) == -EAGAIN, "nonblocking send_timeo");
                }
                recv_check(&c.b, SMC_DMB_MIN_SIZE, seed, 0, "sendfile before the timeout");
                {
                        uint8_t z[100] = { 0 };
                        struct iovec v = { z, sizeof(z) };

                        CHECK(smc_ring_send_timeo(&c.a, &v, 1, 0, false, sp[0]) == 100, "send_timeo with room");
                        CHECK(smc_ring_send_timeo(&c.a, &v, 1, 0, false, -1) == 100, "send_timeo without a limit");
                        recv_check(&c.b, 0, seed, 0, "nothing");
                        CHECK(xrecv(&c.b, z, sizeof(z), MSG_WAITALL, false) == 100 &&
                              xrecv(&c.b, z, sizeof(z), MSG_WAITALL, false) == 100, "recv the sends");
                }
                close(sp[0]);
                close(sp[1]);
        }

        /* the peer closed: the first send is taken as TCP's (the file's bytes counted
         * and dropped, the offset moved), then EPIPE with nothing read */
        {
                smc_ring_close(&c.b);
                off = 0;
                k = smc_ring_sendfile(&c.a, fd, &off, 100, 0, false, -1);
                CHECK(k == 100 && off == 100, "sendfile after the peer closed: %zd %s", k, ERRSTR(k));
                k = smc_ring_sendfile(&c.a, fd, &off, 100, 0, false, -1);
                CHECK(k == -EPIPE && off == 100, "the sendfile after that: %zd %s", k, ERRSTR(k));
        }
        close(fd);
        conn_close(&c);
        printf("ok sendfile (offset, file position, wrap, past the end, nonblocking, cork / MSG_MORE / "
               "autocork, file errors, blocking, SO_SNDTIMEO on sendfile and send, the send taken after the "
               "peer's close, EPIPE)\n");
}

/* A file streamed by sendfile calls of random sizes (some with MSG_MORE, some through
 * the file position) into a thread that checks every byte: the TSan check of the
 * one-copy path (the kernel's writes into the ring, then the prod store). */
struct sendfile_stress {
        struct smc_ring_ep *ep;
        int fd;
        uint64_t total, rnd;
        size_t max_io;
        bool nonblock;
};

static void *sendfile_stress_sender(void *p) {
        struct sendfile_stress *a = p;
        int64_t off = 0;

        while ((uint64_t) off < a->total) {
                size_t n = rand_size(&a->rnd, a->max_io);
                uint64_t r = xorshift(&a->rnd);
                bool by_pos = r % 4 == 0;
                int64_t before = off;
                ssize_t k;

                if (n > a->total - (uint64_t) off)
                        n = (size_t) (a->total - (uint64_t) off);
                if (by_pos)
                        CHECK(lseek(a->fd, off, SEEK_SET) == off, "lseek");
                k = smc_ring_sendfile(a->ep, a->fd, by_pos ? NULL : &off, n, (r >> 8) % 8 == 0 ? MSG_MORE : 0,
                                      a->nonblock, -1);
                if (k == -EAGAIN && a->nonblock) {
                        wait_fd(a->ep->x, POLLOUT, "sendfile sender");
                        continue;
                }
                CHECK(k > 0 && (size_t) k <= n && (a->nonblock || (size_t) k == n),
                      "sendfile %zu at %" PRId64 ": %zd %s", n, before, k, ERRSTR(k));
                if (by_pos) {
                        off += k;
                        CHECK(lseek(a->fd, 0, SEEK_CUR) == off, "file position after sendfile");
                } else
                        CHECK(off == before + k, "offset after sendfile");
        }
        CHECK(smc_ring_flush(a->ep) == 0, "flush");
        return NULL;
}

static void test_sendfile_stress(uint64_t total, uint32_t ring, bool nonblock) {
        struct sendfile_stress s;
        struct stream_arg r;
        struct conn c;
        pthread_t t[2];
        int fd = pattern_file(total, 21);

        conn_open(&c, ring, ring);
        s = (struct sendfile_stress) { &c.a, fd, total, 5, 3 * ring, nonblock };
        r = (struct stream_arg) { &c.b, total, 21, 6, 3 * ring, 0, nonblock, 0, false };
        CHECK(pthread_create(&t[0], NULL, sendfile_stress_sender, &s) == 0, "pthread_create");
        CHECK(pthread_create(&t[1], NULL, receiver, &r) == 0, "pthread_create");
        pthread_join(t[0], NULL);
        pthread_join(t[1], NULL);
        CHECK(smc_ring_readable(&c.b) == 0 && !(kpoll(c.xb, POLLIN) & POLLIN), "leftover data");
        CHECK(atomic_load(&HDR_B(&c)->prod_sendfile_bytes) == total, "sendfile_bytes %" PRIu64,
              (uint64_t) atomic_load(&HDR_B(&c)->prod_sendfile_bytes));
        close(fd);
        conn_close(&c);
        printf("ok sendfile stress%s: %" PRIu64 " MiB, ring %u KiB\n", nonblock ? " (nonblocking + poll(X))" : "",
               total >> 20, ring >> 10);
}

/* ---- latency benchmark ----------------------------------------------------------- */

struct pingpong {
        struct smc_ring_ep *ep;
        int rounds;
};

static void *ponger(void *p) {
        struct pingpong *pp = p;
        uint8_t m[64];

        for (int i = 0; i < pp->rounds; i++) {
                CHECK(xrecv(pp->ep, m, sizeof(m), MSG_WAITALL, false) == 64, "pong recv");
                CHECK(xsend(pp->ep, m, sizeof(m), 0, false) == 64, "pong send");
        }
        return NULL;
}

static double bench_latency(uint32_t busy_ns, int rounds) {
        struct conn c;
        struct pingpong pp;
        uint8_t m[64] = { 1 };
        struct timespec t0, t1;
        pthread_t t;

        conn_open(&c, SMC_DMB_DEFAULT_SIZE, SMC_DMB_DEFAULT_SIZE);
        c.a.busy_poll_ns = c.b.busy_poll_ns = busy_ns;
        pp = (struct pingpong) { &c.b, rounds + 100 };
        CHECK(pthread_create(&t, NULL, ponger, &pp) == 0, "pthread_create");
        for (int i = 0; i < rounds + 100; i++) {
                if (i == 100)
                        clock_gettime(CLOCK_MONOTONIC, &t0); /* 100 rounds of warm-up */
                CHECK(xsend(&c.a, m, sizeof(m), 0, false) == 64, "ping send");
                CHECK(xrecv(&c.a, m, sizeof(m), MSG_WAITALL, false) == 64, "ping recv");
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        pthread_join(t, NULL);
        conn_close(&c);
        return ((double) (t1.tv_sec - t0.tv_sec) * 1e9 + (double) (t1.tv_nsec - t0.tv_nsec)) / rounds / 2 / 1000;
}

/* reference: the same ping-pong over a plain AF_UNIX socketpair */
struct unix_pong {
        int fd, rounds;
};

static void *unix_ponger(void *p) {
        struct unix_pong *u = p;
        uint8_t m[64];

        for (int i = 0; i < u->rounds; i++) {
                CHECK(recv(u->fd, m, sizeof(m), MSG_WAITALL) == 64, "unix pong recv");
                CHECK(send(u->fd, m, sizeof(m), 0) == 64, "unix pong send");
        }
        return NULL;
}

static double bench_unix_latency(int rounds) {
        struct unix_pong u;
        uint8_t m[64] = { 1 };
        struct timespec t0, t1;
        int sv[2];
        pthread_t t;

        CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair");
        u = (struct unix_pong) { sv[1], rounds };
        CHECK(pthread_create(&t, NULL, unix_ponger, &u) == 0, "pthread_create");
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int i = 0; i < rounds; i++) {
                CHECK(send(sv[0], m, sizeof(m), 0) == 64, "unix ping send");
                CHECK(recv(sv[0], m, sizeof(m), MSG_WAITALL) == 64, "unix ping recv");
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        pthread_join(t, NULL);
        close(sv[0]);
        close(sv[1]);
        return ((double) (t1.tv_sec - t0.tv_sec) * 1e9 + (double) (t1.tv_nsec - t0.tv_nsec)) / rounds / 2 / 1000;
}

/* streaming throughput: one sender thread, one receiver thread, @io-byte calls */
struct bulk {
        struct smc_ring_ep *ep;
        uint64_t total;
        size_t io;
};

static void *bulk_recv(void *p) {
        struct bulk *b = p;
        uint8_t *buf = malloc(b->io);
        uint64_t got = 0;

        CHECK(buf, "malloc");
        while (got < b->total) {
                ssize_t n = xrecv(b->ep, buf, b->io, 0, false);
                CHECK(n > 0, "bulk recv: %zd", n);
                got += (uint64_t) n;
        }
        free(buf);
        return NULL;
}

static double bench_stream(uint32_t ring, size_t io, uint64_t total, uint32_t busy_ns) {
        struct conn c;
        struct bulk b;
        uint8_t *buf = calloc(1, io);
        struct timespec t0, t1;
        pthread_t t;

        CHECK(buf, "calloc");
        conn_open(&c, ring, ring);
        c.a.busy_poll_ns = c.b.busy_poll_ns = busy_ns;
        if (getenv("SMC_BENCH_SNDBUF")) {
                /* experiment: a small X send buffer makes the plug cheap */
                int v = atoi(getenv("SMC_BENCH_SNDBUF"));
                CHECK(setsockopt(c.xa, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v)) == 0, "SO_SNDBUF");
                CHECK(setsockopt(c.xb, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v)) == 0, "SO_SNDBUF");
        }
        b = (struct bulk) { &c.b, total, io };
        clock_gettime(CLOCK_MONOTONIC, &t0);
        CHECK(pthread_create(&t, NULL, bulk_recv, &b) == 0, "pthread_create");
        for (uint64_t sent = 0; sent < total; sent += io)
                CHECK(xsend(&c.a, buf, io, 0, false) == (ssize_t) io, "bulk send");
        pthread_join(t, NULL);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        conn_close(&c);
        free(buf);
        return (double) total / ((double) (t1.tv_sec - t0.tv_sec) + (double) (t1.tv_nsec - t0.tv_nsec) / 1e9) / 1e9;
}

static void bench(int argc, char **argv) {
        uint32_t busy[16] = { 0, 5000, 20000, 50000 };
        size_t nbusy = 4;

        if (argc > 0) {
                nbusy = 0;
                for (int i = 0; i < argc && nbusy < 16; i++)
                        busy[nbusy++] = (uint32_t) strtoul(argv[i], NULL, 10);
        }
        printf("one-way latency, 64-byte ping-pong between two threads, blocking recv:\n");
        for (size_t i = 0; i < nbusy; i++) {
                double best = 1e9;

                for (int rep = 0; rep < 3; rep++) {
                        double us = bench_latency(busy[i], 20000);
                        if (us < best)
                                best = us;
                }
                printf("  busy_poll_ns=%-6u %8.2f us (best of 3 x 20000 round trips)\n", busy[i], best);
        }
        printf("  reference AF_UNIX socketpair: %.2f us\n", bench_unix_latency(20000));
        if (getenv("SMC_BENCH_NOSTREAM"))
                return;
        printf("streaming, 1 GiB, one sender and one receiver thread:\n");
        for (size_t i = 0; i < nbusy; i++) {
                printf("  busy_poll_ns=%-6u ring 64 KiB, 16 KiB calls: %5.2f GB/s; ring 1 MiB, 64 KiB calls: %5.2f GB/s\n",
                       busy[i], bench_stream(64u << 10, 16u << 10, 1ull << 30, busy[i]),
                       bench_stream(1u << 20, 64u << 10, 1ull << 30, busy[i]));
        }
}

int main(int argc, char **argv) {
        const char *e = getenv("SMC_TEST_STRESS_MB");
        uint64_t mb = e ? strtoull(e, NULL, 10) : 64;

        if (argc > 1 && strcmp(argv[1], "--bench") == 0) {
                bench(argc - 2, argv + 2); /* optional: busy_poll_ns values */
                return 0;
        }
        signal(SIGPIPE, SIG_IGN); /* a failure must show as a check, not a signal */
        test_echo();
        test_copy_offsets();
        test_random_sizes();
        test_peek();
        test_waitall();
        test_nonblock_and_poll();
        test_pollout_threshold();
        test_cork();
        test_data_dirty();
        test_shutdown();
        test_close_abort();
        test_hup();
        test_efault();
        test_peer_death();
        test_shutdown_other_thread();
        test_shutdown_busy_lock();
        test_eintr();
        test_sendfile();
        test_sendfile_stress((mb / 4 ? mb / 4 : 1) << 20, SMC_DMB_MIN_SIZE, false);
        test_sendfile_stress((mb / 8 ? mb / 8 : 1) << 20, SMC_DMB_DEFAULT_SIZE, true);
        test_stress(mb << 20, 0, SMC_DMB_DEFAULT_SIZE, false);
        test_stress((mb / 4 ? mb / 4 : 1) << 20, 20000, SMC_DMB_MIN_SIZE, false);
        test_stress((mb / 4 ? mb / 4 : 1) << 20, 0, SMC_DMB_MIN_SIZE, true);
        test_stress_watched((mb / 4 ? mb / 4 : 1) << 20, SMC_DMB_MIN_SIZE);
        test_stress_owed((mb / 4 ? mb / 4 : 1) << 20, SMC_DMB_MIN_SIZE);
        printf("test-ring: all passed\n");
        return 0;
}
