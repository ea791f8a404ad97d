/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Unit test of the DMB buffer pool (smcd/pool.h): single-threaded API checks, the
 * max_bytes limit, clearing modes, and an 8-thread stress test that checks that no
 * buffer is ever held twice, every acquired buffer reads zero and trust domains
 * never mix. SMC_TEST_POOL_SECONDS sets the stress duration (default 3).
 *
 * Built twice: test-pool links the smcd-pool library; test-pool-hooks compiles
 * pool.c with SMC_POOL_TEST_HOOKS to replay the ABA interleaving of a pop
 * deterministically, and runs the quick tests on that build.
 */

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "pool.h"

#define ASSERT(expr)                                                                    \
        do {                                                                            \
                if (!(expr)) {                                                          \
                        fprintf(stderr, "%s:%d: assertion failed: %s\n", __FILE__,      \
                                __LINE__, #expr);                                       \
                        abort();                                                        \
                }                                                                       \
        } while (0)
#define ASSERT_OK(expr) ASSERT((expr) == 0)
#define ASSERT_EQ(a, b)                                                                 \
        do {                                                                            \
                long long _a = (long long) (a), _b = (long long) (b);                   \
                if (_a != _b) {                                                         \
                        fprintf(stderr, "%s:%d: %s == %s failed: %lld != %lld\n",       \
                                __FILE__, __LINE__, #a, #b, _a, _b);                    \
                        abort();                                                        \
                }                                                                       \
        } while (0)

#define PAGE 4096u

static uint64_t buf_bytes(unsigned c) {
        return SMC_DMB_HDR_LEN + (uint64_t) smc_dmb_class_size(c);
}

static bool range_zero(const uint8_t *p, size_t n) {
        const uint64_t *w = (const uint64_t *) p;

        for (size_t i = 0; i < n / 8; i++)
                if (w[i])
                        return false;
        return true;
}

/* All of the header and payload. */
static bool buf_zero_full(const struct smc_buf *b) {
        return range_zero(b->base, SMC_DMB_HDR_LEN + (size_t) b->size);
}

#ifndef SMC_POOL_TEST_HOOKS
/* Header, first and last page of the payload, and one word per page between. */
static bool buf_zero_sample(const struct smc_buf *b) {
        const uint8_t *data = smc_dmb_data(b->base);

        if (!range_zero(b->base, SMC_DMB_HDR_LEN) || !range_zero(data, PAGE) ||
            !range_zero(data + b->size - PAGE, PAGE))
                return false;
        for (size_t off = PAGE; off < b->size - PAGE; off += PAGE) {
                const uint64_t *w = (const uint64_t *) (data + off + ((off / PAGE * 72) & (PAGE - 1)));
                if (*w)
                        return false;
        }
        return true;
}
#endif

/* Dirty everything a client may write: the first SMC_DMB_HDR_CLEAR_LEN bytes of the
 * header and the whole ring. */
static void buf_scribble(struct smc_buf *b, uint8_t v) {
        memset(b->base, v, SMC_DMB_HDR_CLEAR_LEN);
        memset(smc_dmb_data(b->base), v, b->size);
}

static void test_basic(void) {
        struct smc_pool_config cfg = { .prepopulate = { 2, 0, 1 } };
        struct smc_pool_stats st;
        struct smc_pool *p;
        struct smc_buf *a, *b, *c;
        struct stat sb;
        int seals;

        ASSERT_OK(smc_pool_new(&cfg, &p));
        smc_pool_get_stats(p, &st);
        ASSERT_EQ(st.alloc, 3);
        ASSERT_EQ(st.free_count[0], 2);
        ASSERT_EQ(st.free_count[2], 1);
        ASSERT_EQ(st.bytes_total, 2 * buf_bytes(0) + buf_bytes(2));

        ASSERT_EQ(smc_pool_acquire(p, 1, 2, SMC_DMB_NCLASSES, &a), -EINVAL);
        ASSERT(smc_pool_lookup(p, 0) == NULL);
        ASSERT(smc_pool_lookup(p, 12345) == NULL);

        /* served from the fresh list */
        ASSERT_OK(smc_pool_acquire(p, 1000, 1001, 0, &a));
        ASSERT(a->id != 0);
        ASSERT_EQ(a->class, 0);
        ASSERT_EQ(a->size, SMC_DMB_MIN_SIZE);
        ASSERT(buf_zero_full(a));
        ASSERT(fstat(a->memfd, &sb) == 0);
        ASSERT_EQ(sb.st_size, buf_bytes(0));
        seals = fcntl(a->memfd, F_GET_SEALS);
        ASSERT(seals >= 0 && (seals & F_SEAL_SHRINK) && !(seals & F_SEAL_WRITE));
        ASSERT(smc_pool_lookup(p, a->id) == a);
        smc_pool_get_stats(p, &st);
        ASSERT_EQ(st.alloc, 3);
        ASSERT_EQ(st.reuse, 1);
        ASSERT_EQ(st.in_use[0], 1);
        ASSERT_EQ(st.free_count[0], 1);

        /* a new memfd: class 6 has no free buffer */
        ASSERT_OK(smc_pool_acquire(p, 1001, 1000, 6, &b));
        ASSERT_EQ(b->size, SMC_DMB_MAX_SIZE);
        ASSERT(buf_zero_full(b));
        ASSERT(b->id != a->id);
        smc_pool_get_stats(p, &st);
        ASSERT_EQ(st.alloc, 4);
        ASSERT_EQ(st.in_use[6], 1);

        /* release: cleared by the worker, reused in the same domain (either uid order) */
        buf_scribble(a, 0xa5);
        smc_pool_release(p, a);
        ASSERT(smc_pool_lookup(p, a->id) == NULL);
        smc_pool_release(p, a); /* double release is ignored */
        smc_pool_flush(p);
        smc_pool_get_stats(p, &st);
        ASSERT_EQ(st.pending_clear, 0);
        ASSERT_EQ(st.clear, 1);
        ASSERT_EQ(st.bytes_cleared, SMC_DMB_HDR_CLEAR_LEN + SMC_DMB_MIN_SIZE);
        ASSERT_EQ(st.in_use[0], 0);
        ASSERT_EQ(st.free_count[0], 2);
        uint64_t id = a->id;
        ASSERT_OK(smc_pool_acquire(p, 1001, 1000, 0, &c));
        ASSERT_EQ(c->id, id);
        ASSERT(buf_zero_full(c));

        /* another domain never gets it: it takes the last fresh one, then a new one */
        buf_scribble(c, 0x5a);
        smc_pool_release(p, c);
        smc_pool_flush(p);
        ASSERT_OK(smc_pool_acquire(p, 7, 7, 0, &a));
        ASSERT(a->id != id);
        struct smc_buf *d;
        ASSERT_OK(smc_pool_acquire(p, 7, 7, 0, &d));
        ASSERT(d->id != id);
        smc_pool_get_stats(p, &st);
        ASSERT_EQ(st.alloc, 5);
        ASSERT_EQ(st.free_count[0], 1); /* c, in domain {1000, 1001} */

        smc_pool_release(p, a);
        smc_pool_release(p, d);
        smc_pool_release(p, b);
        smc_pool_flush(p);
        smc_pool_get_stats(p, &st);
        for (unsigned k = 0; k < SMC_DMB_NCLASSES; k++)
                ASSERT_EQ(st.in_use[k], 0);
        ASSERT_EQ(st.free_count[0], 3);
        ASSERT_EQ(st.free_count[2], 1);
        ASSERT_EQ(st.free_count[6], 1);

        ASSERT(smc_pool_free(p) == NULL);
        ASSERT(smc_pool_free(NULL) == NULL);
        printf("basic: ok\n");
}

/* smc_pool_trim_idle(): buffers that stayed free for a whole interval go (the domains'
 * before the fresh ones), those taken in between and the kept ones stay. */
static void test_trim_idle(void) {
        struct smc_pool_config cfg = { .prepopulate = { 2 } };
        unsigned keep[SMC_DMB_NCLASSES] = { 1 };
        struct smc_pool_stats st;
        struct smc_buf *b[8];
        struct smc_pool *p;

        ASSERT_OK(smc_pool_new(&cfg, &p));
        /* a burst: 8 buffers of class 0 (2 from the fresh list, 6 new), and one class 2 */
        for (int i = 0; i < 8; i++)
                ASSERT_OK(smc_pool_acquire(p, 1, 2, 0, &b[i]));
        /* within the interval the free list ran empty: nothing is idle yet */
        for (int i = 0; i < 8; i++)
                smc_pool_release(p, b[i]);
        smc_pool_flush(p);
        ASSERT_EQ(smc_pool_trim_idle(p, keep), 0);
        smc_pool_get_stats(p, &st);
        ASSERT_EQ(st.free_count[0], 8);
        /* the next interval: 3 taken and given back, so at least 5 stayed free all along */
        for (int i = 0; i < 3; i++)
                ASSERT_OK(smc_pool_acquire(p, 1, 2, 0, &b[i]));
        for (int i = 0; i < 3; i++)
                smc_pool_release(p, b[i]);
        smc_pool_flush(p);
        ASSERT_EQ(smc_pool_trim_idle(p, keep), 4); /* 5 idle, keep 1 */
        smc_pool_get_stats(p, &st);
        ASSERT_EQ(st.free_count[0], 4);
        ASSERT_EQ(st.idle_trimmed, 4);
        ASSERT_EQ(st.bytes_total, 4 * buf_bytes(0));
        /* an interval without use: all but the kept one go */
        ASSERT_EQ(smc_pool_trim_idle(p, keep), 3);
        ASSERT_EQ(smc_pool_trim_idle(p, keep), 0);
        smc_pool_get_stats(p, &st);
        ASSERT_EQ(st.free_count[0], 1);
        ASSERT_EQ(st.bytes_total, buf_bytes(0));
        /* what is left still serves, zeroed */
        ASSERT_OK(smc_pool_acquire(p, 2, 1, 0, &b[0]));
        smc_pool_get_stats(p, &st);
        ASSERT_EQ(st.alloc, 8); /* 2 pre-populated + 6: the kept one was reused */
        ASSERT(buf_zero_full(b[0]));
        smc_pool_release(p, b[0]);
        smc_pool_flush(p);
        ASSERT_EQ(smc_pool_trim_idle(NULL, keep), 0);
        ASSERT_EQ(smc_pool_trim_idle(p, NULL), 0); /* the acquire emptied the list */
        ASSERT_EQ(smc_pool_trim_idle(p, NULL), 1);
        smc_pool_get_stats(p, &st);
        ASSERT_EQ(st.bytes_total, 0);
        smc_pool_free(p);
        printf("trim idle: ok\n");
}

static void test_limit(void) {
        struct smc_pool_config cfg = { .max_bytes = 3 * buf_bytes(0) };
        struct smc_pool_stats st;
        struct smc_buf *b[4];
        struct smc_pool *p;
        uint64_t id;

        ASSERT_OK(smc_pool_new(&cfg, &p));
        for (int i = 0; i < 3; i++)
                ASSERT_OK(smc_pool_acquire(p, 1, 2, 0, &b[i]));
        ASSERT_EQ(smc_pool_acquire(p, 1, 2, 0, &b[3]), -ENOBUFS);
        ASSERT_EQ(smc_pool_acquire(p, 3, 4, 0, &b[3]), -ENOBUFS);
        smc_pool_get_stats(p, &st);
        ASSERT_EQ(st.bytes_total, 3 * buf_bytes(0));
        ASSERT_EQ(st.alloc, 3);

        /* a free buffer of domain {1,2} is destroyed to make room for domain {3,4} */
        id = b[0]->id;
        smc_pool_release(p, b[0]);
        smc_pool_flush(p);
        ASSERT_OK(smc_pool_acquire(p, 4, 3, 0, &b[3]));
        ASSERT(b[3]->id != id);
        ASSERT(smc_pool_lookup(p, id) == NULL);
        ASSERT(buf_zero_full(b[3]));
        smc_pool_get_stats(p, &st);
        ASSERT_EQ(st.free, 1);
        ASSERT_EQ(st.alloc, 4);
        ASSERT_EQ(st.bytes_total, 3 * buf_bytes(0));
        ASSERT_EQ(st.free_count[0], 0);

        /* class 1 (2 x 16 KiB ring) does not fit while three class-0 buffers are held */
        ASSERT_EQ(smc_pool_acquire(p, 1, 2, 1, &b[0]), -ENOBUFS);
        /* free two in {1,2}: class 1 for {3,4} fits after destroying both */
        smc_pool_release(p, b[1]);
        smc_pool_release(p, b[2]);
        smc_pool_flush(p);
        ASSERT_OK(smc_pool_acquire(p, 3, 4, 1, &b[0]));
        smc_pool_get_stats(p, &st);
        ASSERT_EQ(st.free, 3);
        ASSERT_EQ(st.bytes_total, buf_bytes(0) + buf_bytes(1));
        ASSERT(st.bytes_total <= cfg.max_bytes);
        smc_pool_release(p, b[0]);
        smc_pool_release(p, b[3]);
        smc_pool_flush(p);

        smc_pool_free(p);

        /* pre-population beyond the limit is refused */
        struct smc_pool_config bad = { .max_bytes = buf_bytes(0), .prepopulate = { 2 } };
        ASSERT_EQ(smc_pool_new(&bad, &p), -ENOBUFS);
        printf("limit: ok\n");
}

static void test_set_clear(void) {
        struct smc_pool_config cfg = { .buf_clear = SMC_POOL_CLEAR_CREATE };
        struct smc_pool_stats st;
        struct smc_buf *b;
        struct smc_pool *p;

        ASSERT_OK(smc_pool_new(&cfg, &p));
        ASSERT_OK(smc_pool_acquire(p, 5, 6, 2, &b));
        buf_scribble(b, 0x11);
        smc_pool_release(p, b);
        smc_pool_get_stats(p, &st);
        ASSERT_EQ(st.clear, 0);          /* pushed uncleared */
        ASSERT_EQ(st.pending_clear, 0);
        ASSERT_EQ(st.free_count[2], 1);
        ASSERT_OK(smc_pool_acquire(p, 5, 6, 2, &b));
        ASSERT(buf_zero_full(b));        /* cleared at acquire */
        smc_pool_get_stats(p, &st);
        ASSERT_EQ(st.clear, 1);

        /* released in create mode, acquired after switching to release mode: still
         * cleared at acquire */
        buf_scribble(b, 0x22);
        smc_pool_release(p, b);
        smc_pool_set_clear(p, SMC_POOL_CLEAR_RELEASE);
        ASSERT_OK(smc_pool_acquire(p, 5, 6, 2, &b));
        ASSERT(buf_zero_full(b));
        smc_pool_get_stats(p, &st);
        ASSERT_EQ(st.clear, 2);

        /* release mode: the worker clears, acquire does not */
        buf_scribble(b, 0x33);
        smc_pool_release(p, b);
        smc_pool_flush(p);
        smc_pool_get_stats(p, &st);
        ASSERT_EQ(st.clear, 3);
        ASSERT_OK(smc_pool_acquire(p, 6, 5, 2, &b));
        ASSERT(buf_zero_full(b));
        smc_pool_get_stats(p, &st);
        ASSERT_EQ(st.clear, 3);
        ASSERT(st.clear_ns > 0);
        ASSERT_EQ(st.bytes_cleared, 3 * (SMC_DMB_HDR_CLEAR_LEN + (uint64_t) smc_dmb_class_size(2)));

        /* released in release mode, switched to create mode while queued */
        buf_scribble(b, 0x44);
        smc_pool_release(p, b);
        smc_pool_set_clear(p, SMC_POOL_CLEAR_CREATE);
        smc_pool_flush(p);
        ASSERT_OK(smc_pool_acquire(p, 6, 5, 2, &b));
        ASSERT(buf_zero_full(b));
        smc_pool_release(p, b);

        smc_pool_free(p);   /* with one buffer in use and one free uncleared */
        printf("set_clear: ok\n");
}

#define NTHREADS 8

#ifndef SMC_POOL_TEST_HOOKS
/* --- stress --- */

#define NDOMAINS 4
#define MAX_IDS (1u << 20)
#define HOLD 12

/* Per buffer, keyed by the low 32 bits of its id (the pool's slot index; a slot
 * whose buffer was destroyed by trimming gets a new buffer with a new id). */
struct stress {
        struct smc_pool *pool;
        bool limited;                      /* max_bytes set: -ENOBUFS is expected */
        _Atomic bool stop;
        _Atomic uint32_t owner[MAX_IDS];   /* thread + 1 holding the buffer, 0 = none */
        _Atomic uint64_t seen_id[MAX_IDS]; /* id of the buffer the records are about */
        _Atomic int8_t domain[MAX_IDS];    /* domain first served */
        _Atomic uint64_t acquires, full_checks, nobufs;
};

static const uid_t domain_uids[NDOMAINS][2] = {
        { 1000, 1001 }, { 1000, 1000 }, { 0, 1000 }, { 1002, 5 },
};

struct worker_arg {
        struct stress *s;
        unsigned n;
        unsigned seed;
};

static unsigned rnd(unsigned *seed) {
        *seed = *seed * 1103515245u + 12345u;
        return *seed >> 8;
}

static void *stress_thread(void *arg) {
        struct worker_arg *w = arg;
        struct stress *s = w->s;
        struct smc_buf *held[HOLD] = {};
        uint64_t n = 0, full = 0, nobufs = 0;

        while (!atomic_load_explicit(&s->stop, memory_order_relaxed)) {
                unsigned slot = rnd(&w->seed) % HOLD;
                struct smc_buf *b = held[slot];

                if (b) {
                        ASSERT_EQ(atomic_load(&s->owner[(uint32_t) b->id]), w->n + 1);
                        ASSERT(smc_pool_lookup(s->pool, b->id) == b);
                        buf_scribble(b, (uint8_t) (w->n * 16 + 1));
                        atomic_store(&s->owner[(uint32_t) b->id], 0);
                        smc_pool_release(s->pool, b);
                        held[slot] = NULL;
                        continue;
                }

                /* mostly small classes, sometimes up to 1 MiB */
                unsigned r = rnd(&w->seed);
                unsigned c = r % 8 < 6 ? r % 3 : (r >> 4) % SMC_DMB_NCLASSES;
                int d = (int) ((r >> 8) % NDOMAINS);
                bool swap = (r >> 12) & 1;
                uint32_t expected = 0, idx;
                int8_t dom;
                int k;

                k = smc_pool_acquire(s->pool, domain_uids[d][swap], domain_uids[d][!swap], c, &b);
                if (k == -ENOBUFS && s->limited) {
                        nobufs++;
                        continue;
                }
                ASSERT_OK(k);
                idx = (uint32_t) b->id;
                ASSERT(idx > 0 && idx < MAX_IDS);
                ASSERT_EQ(b->class, c);
                ASSERT_EQ(b->size, smc_dmb_class_size(c));
                if (!atomic_compare_exchange_strong(&s->owner[idx], &expected, w->n + 1)) {
                        fprintf(stderr, "buffer %llu held by thread %u and %u\n",
                                (unsigned long long) b->id, expected - 1, w->n);
                        abort();
                }
                /* we own the slot now: nobody else touches its records */
                if (atomic_load(&s->seen_id[idx]) != b->id) {
                        /* first served: a fresh buffer may go to any domain */
                        atomic_store(&s->seen_id[idx], b->id);
                        atomic_store(&s->domain[idx], (int8_t) d);
                } else if ((dom = atomic_load(&s->domain[idx])) != d) {
                        fprintf(stderr, "buffer %llu of domain %d served to domain %d\n",
                                (unsigned long long) b->id, dom, d);
                        abort();
                }
                if (++n % 16 == 0) {
                        ASSERT(buf_zero_full(b));
                        full++;
                } else
                        ASSERT(buf_zero_sample(b));
                held[slot] = b;

                /* thread 0 flips the clearing mode now and then */
                if (w->n == 0 && n % 500 == 0)
                        smc_pool_set_clear(s->pool, (n / 500) % 2 ? SMC_POOL_CLEAR_CREATE : SMC_POOL_CLEAR_RELEASE);
        }

        for (unsigned i = 0; i < HOLD; i++)
                if (held[i]) {
                        buf_scribble(held[i], 0xff);
                        atomic_store(&s->owner[(uint32_t) held[i]->id], 0);
                        smc_pool_release(s->pool, held[i]);
                }
        atomic_fetch_add(&s->acquires, n);
        atomic_fetch_add(&s->full_checks, full);
        atomic_fetch_add(&s->nobufs, nobufs);
        return NULL;
}

static void test_stress(uint64_t max_bytes) {
        struct smc_pool_config cfg = { .prepopulate = { 8, 8, 4, 2, 1, 1, 1 }, .max_bytes = max_bytes };
        struct worker_arg args[NTHREADS];
        pthread_t t[NTHREADS];
        struct smc_pool_stats st;
        struct stress *s;
        unsigned seconds = 3, prepop = 0;
        const char *e = getenv("SMC_TEST_POOL_SECONDS");

        if (e)
                seconds = (unsigned) atoi(e);
        for (unsigned c = 0; c < SMC_DMB_NCLASSES; c++)
                prepop += cfg.prepopulate[c];

        s = calloc(1, sizeof(*s));
        ASSERT(s);
        s->limited = max_bytes > 0;
        ASSERT_OK(smc_pool_new(&cfg, &s->pool));

        for (unsigned i = 0; i < NTHREADS; i++) {
                args[i] = (struct worker_arg) { .s = s, .n = i, .seed = 0x9e3779b9u * (i + 1) + (unsigned) max_bytes };
                ASSERT_OK(pthread_create(&t[i], NULL, stress_thread, &args[i]));
        }
        sleep(seconds);
        atomic_store(&s->stop, true);
        for (unsigned i = 0; i < NTHREADS; i++)
                ASSERT_OK(pthread_join(t[i], NULL));

        smc_pool_flush(s->pool);
        smc_pool_get_stats(s->pool, &st);
        uint64_t nfree = 0;
        for (unsigned c = 0; c < SMC_DMB_NCLASSES; c++) {
                ASSERT_EQ(st.in_use[c], 0);
                nfree += st.free_count[c];
        }
        ASSERT_EQ(st.pending_clear, 0);
        ASSERT_EQ(nfree, st.alloc - st.free);
        if (max_bytes) {
                ASSERT(st.bytes_total <= max_bytes);
                ASSERT(st.free > 0); /* trimming happened */
        } else {
                ASSERT_EQ(st.free, 0);
                ASSERT_EQ(s->nobufs, 0);
        }
        /* every acquire was either a reuse or a new buffer */
        ASSERT_EQ(st.reuse + (st.alloc - prepop), s->acquires);
        /* every release went through at most one clear */
        ASSERT(st.clear <= s->acquires);
        printf("stress%s: %u threads, %us, %llu acquires (%llu fully checked), %llu ENOBUFS, "
               "%llu buffers created, %llu destroyed, %llu reused, %llu cleared (%.1f MB, %.1f ms)\n",
               max_bytes ? " (max_bytes 6 MiB)" : "", NTHREADS, seconds, (unsigned long long) s->acquires,
               (unsigned long long) s->full_checks, (unsigned long long) s->nobufs,
               (unsigned long long) st.alloc, (unsigned long long) st.free,
               (unsigned long long) st.reuse, (unsigned long long) st.clear,
               st.bytes_cleared / 1e6, st.clear_ns / 1e6);

        /* one more round: every buffer still reads zero and stays in its domain */
        for (int d = 0; d < NDOMAINS; d++)
                for (unsigned c = 0; c < SMC_DMB_NCLASSES; c++) {
                        struct smc_buf *b;
                        uint32_t idx;

                        ASSERT_OK(smc_pool_acquire(s->pool, domain_uids[d][0], domain_uids[d][1], c, &b));
                        ASSERT(buf_zero_full(b));
                        idx = (uint32_t) b->id;
                        ASSERT(atomic_load(&s->seen_id[idx]) != b->id || atomic_load(&s->domain[idx]) == d);
                        smc_pool_release(s->pool, b);
                        /* (the released buffer is pending until the worker cleared
                         * it, its bytes counted and not trimmable: under max_bytes the
                         * next acquire may need them; a loaded machine's worker may
                         * not have run yet) */
                        smc_pool_flush(s->pool);
                }
        smc_pool_free(s->pool);
        free(s);
}

#endif /* !SMC_POOL_TEST_HOOKS */

/* --- ABA: a hot free list of three buffers, popped and pushed by 8 threads in
 * create mode (no worker in between). Without the head tag, a pop that is preempted
 * between reading the next link and its CAS installs a buffer that another thread
 * holds, and two threads own one buffer. --- */

#define ABA_BUFS 3

struct aba {
        struct smc_pool *pool;
        _Atomic bool stop;
        _Atomic uint32_t owner[64];
        _Atomic uint64_t ops;
};

struct aba_arg {
        struct aba *a;
        unsigned n;
};

static void *aba_thread(void *arg) {
        struct aba_arg *w = arg;
        struct aba *a = w->a;
        uint64_t ops = 0;

        while (!atomic_load_explicit(&a->stop, memory_order_relaxed)) {
                struct smc_buf *b[2] = {};
                uint32_t expected;

                /* take two (pop, pop), give back in reverse (push, push): the
                 * interleaving that breaks an untagged stack */
                for (int i = 0; i < 2; i++) {
                        int r = smc_pool_acquire(a->pool, 42, 43, 0, &b[i]);

                        if (r == -ENOBUFS)
                                break;
                        ASSERT_OK(r);
                        ASSERT((uint32_t) b[i]->id < 64);
                        expected = 0;
                        if (!atomic_compare_exchange_strong(&a->owner[(uint32_t) b[i]->id], &expected, w->n + 1)) {
                                fprintf(stderr, "aba: buffer %llu held by thread %u and %u\n",
                                        (unsigned long long) b[i]->id, expected - 1, w->n);
                                abort();
                        }
                        ops++;
                }
                for (int i = 1; i >= 0; i--)
                        if (b[i]) {
                                atomic_store(&a->owner[(uint32_t) b[i]->id], 0);
                                smc_pool_release(a->pool, b[i]);
                        }
        }
        atomic_fetch_add(&a->ops, ops);
        return NULL;
}

static void test_aba(void) {
        struct smc_pool_config cfg = {
                .buf_clear = SMC_POOL_CLEAR_CREATE,
                .prepopulate = { ABA_BUFS },
                .max_bytes = ABA_BUFS * buf_bytes(0),
        };
        struct aba_arg args[NTHREADS];
        pthread_t t[NTHREADS];
        struct smc_pool_stats st;
        struct aba *a;

        a = calloc(1, sizeof(*a));
        ASSERT(a);
        ASSERT_OK(smc_pool_new(&cfg, &a->pool));
        for (unsigned i = 0; i < NTHREADS; i++) {
                args[i] = (struct aba_arg) { .a = a, .n = i };
                ASSERT_OK(pthread_create(&t[i], NULL, aba_thread, &args[i]));
        }
        sleep(1);
        atomic_store(&a->stop, true);
        for (unsigned i = 0; i < NTHREADS; i++)
                ASSERT_OK(pthread_join(t[i], NULL));
        smc_pool_get_stats(a->pool, &st);
        ASSERT_EQ(st.alloc, ABA_BUFS);
        ASSERT_EQ(st.free_count[0], ABA_BUFS);
        ASSERT_EQ(st.in_use[0], 0);
        printf("aba: %llu acquires on a %u-buffer free list\n", (unsigned long long) a->ops, ABA_BUFS);
        smc_pool_free(a->pool);
        free(a);
}

#ifdef SMC_POOL_TEST_HOOKS
/* Deterministic ABA replay (only in test-pool-hooks, which compiles pool.c with
 * SMC_POOL_TEST_HOOKS): thread A reads head X and next Y, then stops before its CAS;
 * meanwhile main pops X and Y and pushes X back. An untagged head would let A's CAS
 * succeed and install Y, which main holds. */
#include <semaphore.h>

extern void (*smc_pool_test_pop_hook)(void);

static sem_t hook_paused, hook_go;
static _Thread_local bool hook_armed;

static void pop_hook(void) {
        if (!hook_armed)
                return;
        hook_armed = false;
        sem_post(&hook_paused);
        sem_wait(&hook_go);
}

static void *hook_thread(void *arg) {
        struct smc_pool *p = arg;
        struct smc_buf *b;

        hook_armed = true;
        ASSERT_OK(smc_pool_acquire(p, 42, 43, 0, &b));
        return b;
}

static void test_aba_replay(void) {
        struct smc_pool_config cfg = { .buf_clear = SMC_POOL_CLEAR_CREATE, .prepopulate = { 3 } };
        struct smc_buf *x, *y, *z, *ba, *bm;
        struct smc_pool *p;
        pthread_t t;
        void *ret;

        ASSERT_OK(sem_init(&hook_paused, 0, 0));
        ASSERT_OK(sem_init(&hook_go, 0, 0));
        ASSERT_OK(smc_pool_new(&cfg, &p));
        ASSERT_OK(smc_pool_acquire(p, 42, 43, 0, &x));
        ASSERT_OK(smc_pool_acquire(p, 42, 43, 0, &y));
        ASSERT_OK(smc_pool_acquire(p, 42, 43, 0, &z));
        /* domain list: x -> y -> z */
        smc_pool_release(p, z);
        smc_pool_release(p, y);
        smc_pool_release(p, x);

        smc_pool_test_pop_hook = pop_hook;
        ASSERT_OK(pthread_create(&t, NULL, hook_thread, p));
        ASSERT_OK(sem_wait(&hook_paused));     /* A saw head x, next y */
        ASSERT_OK(smc_pool_acquire(p, 42, 43, 0, &bm));
        ASSERT(bm == x);
        ASSERT_OK(smc_pool_acquire(p, 42, 43, 0, &bm));
        ASSERT(bm == y);                       /* main holds y */
        smc_pool_release(p, x);                /* list: x -> z, same head index */
        ASSERT_OK(sem_post(&hook_go));
        ASSERT_OK(pthread_join(t, &ret));
        ba = ret;
        ASSERT(ba == x);                       /* A's first CAS failed, the retry got x */
        ASSERT_OK(smc_pool_acquire(p, 42, 43, 0, &bm));
        ASSERT(bm == z);                       /* not y: y is still held */
        smc_pool_test_pop_hook = NULL;
        smc_pool_free(p);
        sem_destroy(&hook_paused);
        sem_destroy(&hook_go);
        printf("aba replay: ok\n");
}

#endif /* SMC_POOL_TEST_HOOKS */

/* smc_pool_release_len(): only the header and the first @dirty ring bytes are
 * cleared (the writer wrote no further), in both clearing modes; a larger value is
 * clamped to the size. */
static void test_release_len(void) {
        struct smc_pool_config cfg = {};
        struct smc_pool_stats st;
        struct smc_buf *b;
        struct smc_pool *p;
        uint64_t id;

        ASSERT_OK(smc_pool_new(&cfg, &p));
        ASSERT_OK(smc_pool_acquire(p, 9, 10, 1, &b)); /* 32 KiB */
        id = b->id;
        memset(b->base, 0x66, SMC_DMB_HDR_CLEAR_LEN);
        memset(smc_dmb_data(b->base), 0x66, 5000);
        smc_pool_release_len(p, b, 5000);
        smc_pool_flush(p);
        smc_pool_get_stats(p, &st);
        ASSERT_EQ(st.clear, 1);
        ASSERT_EQ(st.bytes_cleared, SMC_DMB_HDR_CLEAR_LEN + 5000);
        ASSERT_OK(smc_pool_acquire(p, 10, 9, 1, &b));
        ASSERT_EQ(b->id, id);
        ASSERT(buf_zero_full(b));

        /* clamped: all of it */
        buf_scribble(b, 0x67);
        smc_pool_release_len(p, b, UINT32_MAX);
        smc_pool_flush(p);
        smc_pool_get_stats(p, &st);
        ASSERT_EQ(st.bytes_cleared, 2 * SMC_DMB_HDR_CLEAR_LEN + 5000 + (uint64_t) b->size);
        ASSERT_OK(smc_pool_acquire(p, 10, 9, 1, &b));
        ASSERT(buf_zero_full(b));

        /* nothing written: the header only */
        memset(b->base, 0x68, SMC_DMB_HDR_CLEAR_LEN);
        smc_pool_release_len(p, b, 0);
        smc_pool_flush(p);
        ASSERT_OK(smc_pool_acquire(p, 10, 9, 1, &b));
        ASSERT(buf_zero_full(b));

        /* create mode: acquire clears the same extent */
        smc_pool_set_clear(p, SMC_POOL_CLEAR_CREATE);
        memset(b->base, 0x69, SMC_DMB_HDR_CLEAR_LEN);
        memset(smc_dmb_data(b->base), 0x69, 1);
        smc_pool_release_len(p, b, 1);
        smc_pool_get_stats(p, &st);
        uint64_t before = st.bytes_cleared;
        ASSERT_OK(smc_pool_acquire(p, 10, 9, 1, &b));
        ASSERT(buf_zero_full(b));
        smc_pool_get_stats(p, &st);
        ASSERT_EQ(st.bytes_cleared - before, SMC_DMB_HDR_CLEAR_LEN + 1);
        smc_pool_release(p, b);
        p = smc_pool_free(p);
}

int main(void) {
#ifdef SMC_POOL_TEST_HOOKS
        /* test-pool-hooks: the replay, then the quick tests on the hooked build */
        test_aba_replay();
        test_basic();
        test_limit();
        test_trim_idle();
        test_set_clear();
        test_release_len();
        test_aba();
#else
        test_basic();
        test_limit();
        test_trim_idle();
        test_set_clear();
        test_release_len();
        test_aba();
        test_stress(0);
        test_stress(6u << 20);
#endif
        return 0;
}
