/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The DMB buffer pool of smcd: see pool.h for the model.
 *
 * Data structures
 *  - struct pool_slot wraps the public struct smc_buf with private state. Slots live
 *    in a segmented array (segments of SLOT_SEG_SIZE slots, allocated on demand,
 *    freed only by smc_pool_free()), so a slot pointer stays valid while the pool
 *    lives. A slot whose buffer was destroyed (max_bytes trimming) is "dead" and may
 *    be reinitialised for a new buffer; its generation then increases, so the
 *    buffer id = generation << 32 | (index + 1) is never reused and lookup is O(1).
 *  - Free lists are Treiber stacks of slot indices. A head is a 64-bit word
 *    tag << 32 | (index + 1) (0 = empty); every successful push or pop increments
 *    the tag, so a CAS with a stale head fails (ABA-safe). A pop may read the next
 *    link of a slot that another thread just took: the link is atomic and the CAS
 *    then fails.
 *  - Trust domains (unordered uid pairs) are kept in a fixed hash table whose chains
 *    are only ever prepended to (release store) and never shrink while the pool
 *    lives, so lookups are lock-free: an acquire is a hash, a chain walk, one CAS and
 *    a few counter increments. Creating a domain takes domain_lock.
 *  - Release hands the buffer to the reclaim worker through a mutex-protected list
 *    (the mutex is only held to link the buffer in); the worker zeroes it outside
 *    the lock and pushes it onto its domain's free list.
 *
 * Lock order: domain_lock and alloc_lock are leaves, queue_lock is a leaf; none is
 * held while another is taken.
 */

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "pool.h"

#define SLOT_SEG_SHIFT 10u
#define SLOT_SEG_SIZE (1u << SLOT_SEG_SHIFT)
#define SLOT_SEG_MAX (1u << 16)                 /* 64 Mi slots */
#define DOMAIN_HASH_SIZE 4096u

enum {
        SLOT_DEAD = 0,    /* no buffer (never created or destroyed) */
        SLOT_FREE = 1,    /* on a free list, or popped and about to change state */
        SLOT_IN_USE = 2,  /* acquired */
        SLOT_PENDING = 3, /* released, queued for the reclaim worker */
};

/* One cache line holds everything acquire and release touch (state, dirty, the
 * public fields up to domain, next), so taking a buffer that the worker pushed from
 * the other core costs one line transfer. */
struct pool_slot {
        _Atomic uint32_t state;  /* SLOT_* */
        uint32_t gen;            /* times this slot was (re)initialised - 1 */
        bool dirty;              /* released uncleared (CLEAR_CREATE): acquire clears */
        uint32_t clear_len;      /* ring bytes from offset 0 to zero at the next clear
                                  * (<= buf.size; set at release) */
        struct smc_buf buf;
        _Atomic uint64_t id;     /* copy of buf.id for lock-free lookup; 0 if dead */
        struct pool_slot *dead_next; /* alloc_lock: list of dead slots */
} __attribute__((aligned(64)));

_Static_assert(offsetof(struct pool_slot, buf.clear_next) <= 64, "hot fields in one cache line");

struct pool_domain {
        _Atomic uint64_t head[SMC_DMB_NCLASSES]; /* Treiber stacks */
        uid_t lo, hi;
        struct pool_domain *_Atomic hash_next;
        struct pool_domain *_Atomic all_next;
} __attribute__((aligned(64)));

struct smc_pool {
        struct smc_pool_config cfg;
        _Atomic int clear_mode;

        /* slots */
        pthread_mutex_t alloc_lock;
        struct pool_slot *_Atomic *segs; /* SLOT_SEG_MAX entries */
        _Atomic uint32_t nslots;         /* slots ever initialised (indices < nslots) */
        struct pool_slot *dead;          /* alloc_lock */

        /* domains */
        pthread_mutex_t domain_lock;
        struct pool_domain *_Atomic *hash; /* DOMAIN_HASH_SIZE chains */
        struct pool_domain *_Atomic all;   /* every domain, for trimming */
        struct pool_domain fresh;          /* buffers that never served anybody */

        /* reclaim worker */
        pthread_mutex_t queue_lock;
        pthread_cond_t queue_cond;  /* worker waits for work */
        pthread_cond_t done_cond;   /* flush waits for the worker */
        struct smc_buf *queue;      /* queue_lock: LIFO list via clear_next */
        uint64_t queued_seq;        /* queue_lock: buffers ever queued */
        uint64_t done_seq;          /* queue_lock: buffers ever cleared (worker or inline) */
        unsigned queue_len;         /* queue_lock: buffers on the queue */
        bool stop;                  /* queue_lock */
        bool worker_started;
        pthread_t worker;

        /* counters */
        _Atomic uint64_t alloc, reuse, free, clear, bytes_cleared, clear_ns;
        _Atomic uint64_t in_use[SMC_DMB_NCLASSES];
        _Atomic uint64_t free_count[SMC_DMB_NCLASSES];
        _Atomic uint64_t free_low[SMC_DMB_NCLASSES]; /* least free_count since the last
                                                      * smc_pool_trim_idle() */
        _Atomic uint64_t idle_trimmed;
        _Atomic uint64_t pending_clear;
        _Atomic uint64_t bytes_total;
        _Atomic uint64_t downgrade;
        _Atomic uint64_t acquire_hist[SMC_HIST_BUCKETS]; /* cfg.time_acquire */
        _Atomic uint64_t acquire_ns;                     /* sum of the samples */
};

static inline uint64_t now_ns(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
}

static inline uint64_t buf_bytes(unsigned class) {
        return SMC_DMB_HDR_LEN + (uint64_t) smc_dmb_class_size(class);
}

static inline struct pool_slot *slot_of(struct smc_buf *b) {
        return (struct pool_slot *) ((char *) b - offsetof(struct pool_slot, buf));
}

/* Slot @index, which must be < nslots. */
static inline struct pool_slot *slot_get(struct smc_pool *p, uint32_t index) {
        struct pool_slot *seg = atomic_load_explicit(&p->segs[index >> SLOT_SEG_SHIFT], memory_order_acquire);

        return &seg[index & (SLOT_SEG_SIZE - 1)];
}

/* --- Treiber stacks --- */

#ifdef SMC_POOL_TEST_HOOKS
/* Test builds only (tests/test-pool-hooks): called in a pop between reading the
 * next link and the CAS, to replay the ABA interleaving deterministically. */
void (*smc_pool_test_pop_hook)(void);
void (*smc_pool_test_pop_hook)(void) = NULL;
#  define POP_HOOK() do { if (smc_pool_test_pop_hook) smc_pool_test_pop_hook(); } while (0)
#else
#  define POP_HOOK() do { } while (0)
#endif

static inline uint64_t head_make(uint32_t tag, uint32_t idx1) {
        return (uint64_t) tag << 32 | idx1;
}

static void stack_push(struct smc_pool *p, _Atomic uint64_t *head, struct pool_slot *s) {
        uint64_t old = atomic_load_explicit(head, memory_order_relaxed), new;

        do {
                atomic_store_explicit(&s->buf.next, (uint32_t) old, memory_order_relaxed);
                new = head_make((uint32_t) (old >> 32) + 1, s->buf.index + 1);
        } while (!atomic_compare_exchange_weak_explicit(head, &old, new,
                                                        memory_order_release, memory_order_relaxed));
}

static struct pool_slot *stack_pop(struct smc_pool *p, _Atomic uint64_t *head) {
        uint64_t old = atomic_load_explicit(head, memory_order_acquire), new;
        struct pool_slot *s;

        do {
                uint32_t idx1 = (uint32_t) old;

                if (idx1 == 0)
                        return NULL;
                s = slot_get(p, idx1 - 1);
                new = head_make((uint32_t) (old >> 32) + 1,
                                atomic_load_explicit(&s->buf.next, memory_order_relaxed));
                POP_HOOK();
        } while (!atomic_compare_exchange_weak_explicit(head, &old, new,
                                                        memory_order_acquire, memory_order_acquire));
        return s;
}

/* --- domains --- */

static inline uint32_t domain_hash(uid_t lo, uid_t hi) {
        uint64_t k = ((uint64_t) lo << 32 | hi) * UINT64_C(0x9E3779B97F4A7C15);

        return (uint32_t) (k >> 52) & (DOMAIN_HASH_SIZE - 1);
}

static struct pool_domain *domain_find(struct smc_pool *p, uint32_t h, uid_t lo, uid_t hi) {
        for (struct pool_domain *d = atomic_load_explicit(&p->hash[h], memory_order_acquire); d;
             d = atomic_load_explicit(&d->hash_next, memory_order_acquire))
                if (d->lo == lo && d->hi == hi)
                        return d;
        return NULL;
}

static int domain_get(struct smc_pool *p, uid_t a, uid_t b, struct pool_domain **ret) {
        uid_t lo = a < b ? a : b, hi = a < b ? b : a;
        uint32_t h = domain_hash(lo, hi);
        struct pool_domain *d;

        d = domain_find(p, h, lo, hi);
        if (d) {
                *ret = d;
                return 0;
        }

        pthread_mutex_lock(&p->domain_lock);
        d = domain_find(p, h, lo, hi);
        if (!d) {
                d = aligned_alloc(_Alignof(struct pool_domain), sizeof(*d));
                if (!d) {
                        pthread_mutex_unlock(&p->domain_lock);
                        return -ENOMEM;
                }
                memset(d, 0, sizeof(*d));
                d->lo = lo;
                d->hi = hi;
                atomic_store_explicit(&d->hash_next, atomic_load_explicit(&p->hash[h], memory_order_relaxed),
                                      memory_order_relaxed);
                atomic_store_explicit(&d->all_next, atomic_load_explicit(&p->all, memory_order_relaxed),
                                      memory_order_relaxed);
                atomic_store_explicit(&p->hash[h], d, memory_order_release);
                atomic_store_explicit(&p->all, d, memory_order_release);
        }
        pthread_mutex_unlock(&p->domain_lock);
        *ret = d;
        return 0;
}

/* --- buffer creation and destruction --- */

static bool bytes_reserve(struct smc_pool *p, uint64_t n) {
        uint64_t cur = atomic_load_explicit(&p->bytes_total, memory_order_relaxed);

        if (p->cfg.max_bytes == 0) {
                atomic_fetch_add_explicit(&p->bytes_total, n, memory_order_relaxed);
                return true;
        }
        do {
                if (cur + n > p->cfg.max_bytes)
                        return false;
        } while (!atomic_compare_exchange_weak_explicit(&p->bytes_total, &cur, cur + n,
                                                        memory_order_relaxed, memory_order_relaxed));
        return true;
}

/* Take a dead slot or a new one. */
static int slot_alloc(struct smc_pool *p, struct pool_slot **ret) {
        struct pool_slot *s;

        pthread_mutex_lock(&p->alloc_lock);
        s = p->dead;
        if (s) {
                p->dead = s->dead_next;
                s->gen++;
        } else {
                uint32_t n = atomic_load_explicit(&p->nslots, memory_order_relaxed);
                uint32_t seg = n >> SLOT_SEG_SHIFT;

                if (seg >= SLOT_SEG_MAX) {
                        pthread_mutex_unlock(&p->alloc_lock);
                        return -ENOBUFS;
                }
                if (!atomic_load_explicit(&p->segs[seg], memory_order_relaxed)) {
                        struct pool_slot *a = aligned_alloc(_Alignof(struct pool_slot),
                                                            SLOT_SEG_SIZE * sizeof(struct pool_slot));

                        if (!a) {
                                pthread_mutex_unlock(&p->alloc_lock);
                                return -ENOMEM;
                        }
                        memset(a, 0, SLOT_SEG_SIZE * sizeof(struct pool_slot));
                        atomic_store_explicit(&p->segs[seg], a, memory_order_release);
                }
                s = slot_get(p, n);
                s->buf.index = n;
                s->gen = 0;
                atomic_store_explicit(&p->nslots, n + 1, memory_order_release);
        }
        s->dead_next = NULL;
        pthread_mutex_unlock(&p->alloc_lock);
        *ret = s;
        return 0;
}

static void slot_release_dead(struct smc_pool *p, struct pool_slot *s) {
        pthread_mutex_lock(&p->alloc_lock);
        s->dead_next = p->dead;
        p->dead = s;
        pthread_mutex_unlock(&p->alloc_lock);
}

/* Create a new zeroed buffer of @class; bytes must already be reserved. The slot is
 * returned in state SLOT_FREE, domain NULL. */
static int buf_create(struct smc_pool *p, unsigned class, struct pool_slot **ret) {
        uint64_t len = buf_bytes(class);
        struct pool_slot *s;
        char name[32];
        void *base;
        int fd, r;

        snprintf(name, sizeof(name), "smcd-dmb-%u", class);
        fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (fd < 0)
                return -errno;
        if (ftruncate(fd, (off_t) len) < 0) {
                r = -errno;
                close(fd);
                return r;
        }
        /* Clients get this fd: they must not be able to shrink it under smcd's mapping
         * (SIGBUS when clearing) nor grow it. */
        if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
                r = -errno;
                close(fd);
                return r;
        }
        base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
        if (base == MAP_FAILED) {
                r = -errno;
                close(fd);
                return r;
        }
        r = slot_alloc(p, &s);
        if (r < 0) {
                munmap(base, len);
                close(fd);
                return r;
        }

        s->buf.id = (uint64_t) s->gen << 32 | (s->buf.index + 1);
        s->buf.memfd = fd;
        s->buf.base = base;
        s->buf.size = smc_dmb_class_size(class);
        s->buf.class = (uint8_t) class;
        s->buf.domain = NULL;
        s->buf.clear_next = NULL;
        s->dirty = false;
        atomic_store_explicit(&s->buf.next, 0, memory_order_relaxed);
        atomic_store_explicit(&s->state, SLOT_FREE, memory_order_relaxed);
        atomic_store_explicit(&s->id, s->buf.id, memory_order_release);
        atomic_fetch_add_explicit(&p->alloc, 1, memory_order_relaxed);
        *ret = s;
        return 0;
}

/* Destroy the buffer of slot @s, which the caller owns (popped, or pool teardown). */
static void buf_destroy(struct smc_pool *p, struct pool_slot *s, bool recycle_slot) {
        atomic_store_explicit(&s->id, 0, memory_order_relaxed);
        atomic_store_explicit(&s->state, SLOT_DEAD, memory_order_release);
        munmap(s->buf.base, buf_bytes(s->buf.class));
        close(s->buf.memfd);
        s->buf.base = NULL;
        s->buf.memfd = -1;
        atomic_fetch_sub_explicit(&p->bytes_total, buf_bytes(s->buf.class), memory_order_relaxed);
        atomic_fetch_add_explicit(&p->free, 1, memory_order_relaxed);
        if (recycle_slot)
                slot_release_dead(p, s);
}

/* A free buffer of @class was taken, leaving @left: keep the low-water mark that
 * smc_pool_trim_idle() reads. A race with the trim's reset can only lose a lower
 * value for one interval (the trim then frees less). */
static void note_low(struct smc_pool *p, unsigned class, uint64_t left) {
        uint64_t low = atomic_load_explicit(&p->free_low[class], memory_order_relaxed);

        while (left < low && !atomic_compare_exchange_weak_explicit(&p->free_low[class], &low, left,
                                                                    memory_order_relaxed,
                                                                    memory_order_relaxed))
                ;
}

/* Destroy one free buffer to make room: fresh buffers first, then other domains'
 * buffers, then @own's buffers of other classes than @class. Returns true if one
 * was destroyed. */
static bool trim_one(struct smc_pool *p, struct pool_domain *own, unsigned class) {
        for (int pass = 0; pass < 3; pass++) {
                struct pool_domain *d = pass == 0 ? &p->fresh : atomic_load_explicit(&p->all, memory_order_acquire);

                for (; d; d = pass == 0 ? NULL : atomic_load_explicit(&d->all_next, memory_order_acquire)) {
                        if ((pass == 1 && d == own) || (pass == 2 && d != own))
                                continue;
                        /* largest classes first: fewest destructions */
                        for (int c = SMC_DMB_NCLASSES - 1; c >= 0; c--) {
                                struct pool_slot *s;

                                /* a free buffer of @class in the own or fresh list
                                 * would be used rather than trimmed */
                                if ((d == own || d == &p->fresh) && (unsigned) c == class)
                                        continue;
                                s = stack_pop(p, &d->head[c]);
                                if (!s)
                                        continue;
                                note_low(p, (unsigned) c,
                                         atomic_fetch_sub_explicit(&p->free_count[c], 1, memory_order_relaxed) - 1);
                                buf_destroy(p, s, true);
                                return true;
                        }
                }
        }
        return false;
}

static void buf_clear(struct smc_pool *p, struct pool_slot *s) {
        uint64_t t0 = now_ns();

        memset(s->buf.base, 0, SMC_DMB_HDR_CLEAR_LEN);
        memset(smc_dmb_data(s->buf.base), 0, s->clear_len);
        atomic_fetch_add_explicit(&p->clear_ns, now_ns() - t0, memory_order_relaxed);
        atomic_fetch_add_explicit(&p->clear, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&p->bytes_cleared, SMC_DMB_HDR_CLEAR_LEN + (uint64_t) s->clear_len,
                                  memory_order_relaxed);
}

/* --- reclaim worker --- */

/* Clear one released buffer and push it on its domain's free list. */
static void reclaim_one(struct smc_pool *p, struct smc_buf *b) {
        struct pool_slot *s = slot_of(b);
        struct pool_domain *d = b->domain;

        b->clear_next = NULL;
        buf_clear(p, s);
        s->dirty = false;
        atomic_store_explicit(&s->state, SLOT_FREE, memory_order_relaxed);
        atomic_fetch_sub_explicit(&p->pending_clear, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&p->free_count[b->class], 1, memory_order_relaxed);
        stack_push(p, &d->head[b->class], s);
}

static void *reclaim_worker(void *arg) {
        struct smc_pool *p = arg;

        pthread_mutex_lock(&p->queue_lock);
        for (;;) {
                struct smc_buf *list;
                uint64_t n = 0;

                while (!p->queue && !p->stop)
                        pthread_cond_wait(&p->queue_cond, &p->queue_lock);
                if (!p->queue && p->stop)
                        break;
                list = p->queue;
                p->queue = NULL;
                p->queue_len = 0;
                pthread_mutex_unlock(&p->queue_lock);

                while (list) {
                        struct smc_buf *b = list;

                        list = b->clear_next;
                        reclaim_one(p, b);
                        n++;
                }

                pthread_mutex_lock(&p->queue_lock);
                p->done_seq += n;
                pthread_cond_broadcast(&p->done_cond);
        }
        pthread_mutex_unlock(&p->queue_lock);
        return NULL;
}

unsigned smc_pool_reclaim(struct smc_pool *p, unsigned max) {
        unsigned left;

        while (max-- > 0) {
                struct smc_buf *b;

                pthread_mutex_lock(&p->queue_lock);
                b = p->queue;
                if (b) {
                        p->queue = b->clear_next;
                        p->queue_len--;
                }
                pthread_mutex_unlock(&p->queue_lock);
                if (!b)
                        break;
                reclaim_one(p, b);
                pthread_mutex_lock(&p->queue_lock);
                p->done_seq++;
                pthread_cond_broadcast(&p->done_cond);
                pthread_mutex_unlock(&p->queue_lock);
        }
        pthread_mutex_lock(&p->queue_lock);
        left = p->queue_len;
        pthread_mutex_unlock(&p->queue_lock);
        return left;
}

/* --- public API --- */

int smc_pool_new(const struct smc_pool_config *cfg, struct smc_pool **ret) {
        struct smc_pool *p;
        sigset_t all, old;
        int r;

        if (!ret)
                return -EINVAL;

        p = aligned_alloc(_Alignof(struct smc_pool), (sizeof(*p) + 63) & ~(size_t) 63);
        if (!p)
                return -ENOMEM;
        memset(p, 0, sizeof(*p));
        if (cfg)
                p->cfg = *cfg;
        atomic_store(&p->clear_mode, p->cfg.buf_clear == SMC_POOL_CLEAR_CREATE ? SMC_POOL_CLEAR_CREATE
                                                                                : SMC_POOL_CLEAR_RELEASE);
        p->segs = calloc(SLOT_SEG_MAX, sizeof(*p->segs));
        p->hash = calloc(DOMAIN_HASH_SIZE, sizeof(*p->hash));
        if (!p->segs || !p->hash) {
                free(p->segs);
                free(p->hash);
                free(p);
                return -ENOMEM;
        }
        pthread_mutex_init(&p->alloc_lock, NULL);
        pthread_mutex_init(&p->domain_lock, NULL);
        pthread_mutex_init(&p->queue_lock, NULL);
        pthread_cond_init(&p->queue_cond, NULL);
        pthread_cond_init(&p->done_cond, NULL);
        p->fresh.lo = p->fresh.hi = (uid_t) -1;

        /* The worker must not take the daemon's signals. */
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        r = -pthread_create(&p->worker, NULL, reclaim_worker, p);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (r < 0) {
                smc_pool_free(p);
                return r;
        }
        p->worker_started = true;

        for (unsigned c = 0; c < SMC_DMB_NCLASSES; c++)
                for (unsigned i = 0; i < p->cfg.prepopulate[c]; i++) {
                        struct pool_slot *s;

                        if (!bytes_reserve(p, buf_bytes(c))) {
                                smc_pool_free(p);
                                return -ENOBUFS;
                        }
                        r = buf_create(p, c, &s);
                        if (r < 0) {
                                atomic_fetch_sub(&p->bytes_total, buf_bytes(c));
                                smc_pool_free(p);
                                return r;
                        }
                        atomic_fetch_add_explicit(&p->free_count[c], 1, memory_order_relaxed);
                        atomic_fetch_add_explicit(&p->free_low[c], 1, memory_order_relaxed);
                        stack_push(p, &p->fresh.head[c], s);
                }

        *ret = p;
        return 0;
}

struct smc_pool *smc_pool_free(struct smc_pool *p) {
        uint32_t n;

        if (!p)
                return NULL;

        if (p->worker_started) {
                pthread_mutex_lock(&p->queue_lock);
                p->stop = true;
                pthread_cond_signal(&p->queue_cond);
                pthread_mutex_unlock(&p->queue_lock);
                pthread_join(p->worker, NULL);
        }

        n = atomic_load(&p->nslots);
        for (uint32_t i = 0; i < n; i++) {
                struct pool_slot *s = slot_get(p, i);

                if (atomic_load(&s->state) != SLOT_DEAD)
                        buf_destroy(p, s, false);
        }
        for (uint32_t i = 0; i < SLOT_SEG_MAX; i++)
                free(atomic_load_explicit(&p->segs[i], memory_order_relaxed));
        for (struct pool_domain *d = atomic_load(&p->all), *next; d; d = next) {
                next = atomic_load(&d->all_next);
                free(d);
        }
        free(p->segs);
        free(p->hash);
        pthread_cond_destroy(&p->done_cond);
        pthread_cond_destroy(&p->queue_cond);
        pthread_mutex_destroy(&p->queue_lock);
        pthread_mutex_destroy(&p->domain_lock);
        pthread_mutex_destroy(&p->alloc_lock);
        free(p);
        return NULL;
}

/* With max_bytes: could a new buffer of @class fit if every free buffer were trimmed?
 * (Relaxed reads: a hint that spares trimming the pool for nothing.) */
static bool could_fit(struct smc_pool *p, unsigned class) {
        uint64_t total, freeb = 0;

        if (p->cfg.max_bytes == 0)
                return true;
        for (unsigned c = 0; c < SMC_DMB_NCLASSES; c++)
                freeb += atomic_load_explicit(&p->free_count[c], memory_order_relaxed) * buf_bytes(c);
        total = atomic_load_explicit(&p->bytes_total, memory_order_relaxed);
        return total - (freeb < total ? freeb : total) + buf_bytes(class) <= p->cfg.max_bytes;
}

/* Take a buffer of @class for domain @d: pop, else create (trimming free buffers
 * under max_bytes). With @hint, give up early (-ENOBUFS) when could_fit() says that
 * even trimming every free buffer would not make room: that spares a downgrading
 * acquire from trimming the pool for a class it then does not get. The hint can be
 * wrong for a moment (a buffer the clearing worker is moving is counted nowhere), so
 * the last class tried never uses it. 0, -ENOBUFS or -errno. */
static int acquire_class(struct smc_pool *p, struct pool_domain *d, unsigned class, bool hint,
                         struct smc_buf **ret) {
        struct pool_slot *s;
        int r;

        s = stack_pop(p, &d->head[class]);
        if (!s)
                s = stack_pop(p, &p->fresh.head[class]);
        if (s) {
                note_low(p, class, atomic_fetch_sub_explicit(&p->free_count[class], 1, memory_order_relaxed) - 1);
                atomic_fetch_add_explicit(&p->reuse, 1, memory_order_relaxed);
                if (s->dirty) {
                        buf_clear(p, s);
                        s->dirty = false;
                }
        } else {
                if (hint && !could_fit(p, class))
                        return -ENOBUFS;
                while (!bytes_reserve(p, buf_bytes(class)))
                        if (!trim_one(p, d, class))
                                return -ENOBUFS;
                r = buf_create(p, class, &s);
                if (r < 0) {
                        atomic_fetch_sub_explicit(&p->bytes_total, buf_bytes(class), memory_order_relaxed);
                        return r;
                }
        }

        s->buf.domain = d;
        atomic_store_explicit(&s->state, SLOT_IN_USE, memory_order_release);
        atomic_fetch_add_explicit(&p->in_use[class], 1, memory_order_relaxed);
        *ret = &s->buf;
        return 0;
}

/* Acquire of class @max, or with @fit of a smaller one when max_bytes leaves no room;
 * counts the downgrade (below @want) and times it. */
static int acquire(struct smc_pool *p, uid_t uid_a, uid_t uid_b, unsigned want, unsigned max, bool fit,
                   struct smc_buf **ret) {
        struct pool_domain *d;
        uint64_t t0 = 0;
        unsigned c;
        int r;

        if (!p || !ret || want >= SMC_DMB_NCLASSES || max > want)
                return -EINVAL;
        if (p->cfg.time_acquire)
                t0 = now_ns();

        r = domain_get(p, uid_a, uid_b, &d);
        if (r < 0)
                return r;
        for (c = max;; c--) {
                r = acquire_class(p, d, c, fit && c > 0, ret);
                if (r != -ENOBUFS || c == 0 || !fit)
                        break;
        }
        if (r < 0)
                return r;

        if (c < want)
                atomic_fetch_add_explicit(&p->downgrade, 1, memory_order_relaxed);
        if (p->cfg.time_acquire) {
                uint64_t dt = now_ns() - t0;

                atomic_fetch_add_explicit(&p->acquire_hist[smc_hist_bucket(dt)], 1, memory_order_relaxed);
                atomic_fetch_add_explicit(&p->acquire_ns, dt, memory_order_relaxed);
        }
        return 0;
}

int smc_pool_acquire_fit(struct smc_pool *p, uid_t uid_a, uid_t uid_b, unsigned want, unsigned max,
                         struct smc_buf **ret) {
        return acquire(p, uid_a, uid_b, want, max, true, ret);
}

int smc_pool_acquire(struct smc_pool *p, uid_t uid_a, uid_t uid_b, unsigned class, struct smc_buf **ret) {
        return acquire(p, uid_a, uid_b, class, class, false, ret);
}

void smc_pool_release(struct smc_pool *p, struct smc_buf *b) {
        if (b)
                smc_pool_release_len(p, b, b->size);
}

void smc_pool_release_len(struct smc_pool *p, struct smc_buf *b, uint32_t dirty) {
        struct pool_slot *s;
        uint32_t expected = SLOT_IN_USE;

        if (!p || !b)
                return;
        s = slot_of(b);
        if (dirty > b->size)
                dirty = b->size;

        if (atomic_load_explicit(&p->clear_mode, memory_order_relaxed) == SMC_POOL_CLEAR_CREATE) {
                if (!atomic_compare_exchange_strong(&s->state, &expected, SLOT_FREE))
                        return; /* not acquired: double release, ignore */
                s->dirty = true;
                s->clear_len = dirty; /* published by the push */
                atomic_fetch_sub_explicit(&p->in_use[b->class], 1, memory_order_relaxed);
                atomic_fetch_add_explicit(&p->free_count[b->class], 1, memory_order_relaxed);
                stack_push(p, &((struct pool_domain *) b->domain)->head[b->class], s);
                return;
        }

        if (!atomic_compare_exchange_strong(&s->state, &expected, SLOT_PENDING))
                return;
        s->clear_len = dirty; /* published to the clearing side by queue_lock */
        atomic_fetch_sub_explicit(&p->in_use[b->class], 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&p->pending_clear, 1, memory_order_relaxed);

        pthread_mutex_lock(&p->queue_lock);
        b->clear_next = p->queue;
        p->queue = b;
        p->queued_seq++;
        p->queue_len++;
        /* With inline reclaim the owner clears when idle; the worker only takes a
         * backlog the owner has not caught up with (waking it per buffer costs a
         * context switch on a CPU the connection's processes need). */
        if (!p->cfg.inline_reclaim || p->queue_len >= SMC_POOL_WAKE_BATCH)
                pthread_cond_signal(&p->queue_cond);
        pthread_mutex_unlock(&p->queue_lock);
}

void smc_pool_flush(struct smc_pool *p) {
        if (!p)
                return;
        pthread_mutex_lock(&p->queue_lock);
        uint64_t target = p->queued_seq;
        if (p->queue)
                pthread_cond_signal(&p->queue_cond);
        while (p->done_seq < target)
                pthread_cond_wait(&p->done_cond, &p->queue_lock);
        pthread_mutex_unlock(&p->queue_lock);
}

void smc_pool_set_clear(struct smc_pool *p, enum smc_pool_clear mode) {
        if (!p)
                return;
        atomic_store(&p->clear_mode, mode == SMC_POOL_CLEAR_CREATE ? SMC_POOL_CLEAR_CREATE : SMC_POOL_CLEAR_RELEASE);
}

void smc_pool_get_stats(struct smc_pool *p, struct smc_pool_stats *ret) {
        if (!p || !ret)
                return;
        memset(ret, 0, sizeof(*ret));
        ret->buf_clear = atomic_load_explicit(&p->clear_mode, memory_order_relaxed) == SMC_POOL_CLEAR_CREATE
                                 ? SMC_POOL_CLEAR_CREATE
                                 : SMC_POOL_CLEAR_RELEASE;
        ret->alloc = atomic_load_explicit(&p->alloc, memory_order_relaxed);
        ret->reuse = atomic_load_explicit(&p->reuse, memory_order_relaxed);
        ret->free = atomic_load_explicit(&p->free, memory_order_relaxed);
        ret->clear = atomic_load_explicit(&p->clear, memory_order_relaxed);
        ret->bytes_cleared = atomic_load_explicit(&p->bytes_cleared, memory_order_relaxed);
        ret->clear_ns = atomic_load_explicit(&p->clear_ns, memory_order_relaxed);
        for (unsigned c = 0; c < SMC_DMB_NCLASSES; c++) {
                ret->in_use[c] = atomic_load_explicit(&p->in_use[c], memory_order_relaxed);
                ret->free_count[c] = atomic_load_explicit(&p->free_count[c], memory_order_relaxed);
        }
        ret->pending_clear = atomic_load_explicit(&p->pending_clear, memory_order_relaxed);
        ret->bytes_total = atomic_load_explicit(&p->bytes_total, memory_order_relaxed);
        ret->downgrade = atomic_load_explicit(&p->downgrade, memory_order_relaxed);
        ret->idle_trimmed = atomic_load_explicit(&p->idle_trimmed, memory_order_relaxed);
        for (unsigned i = 0; i < SMC_HIST_BUCKETS; i++)
                ret->acquire.bucket[i] = atomic_load_explicit(&p->acquire_hist[i], memory_order_relaxed);
        ret->acquire.sum = atomic_load_explicit(&p->acquire_ns, memory_order_relaxed);
}

void smc_pool_reset_stats(struct smc_pool *p) {
        if (!p)
                return;
        atomic_store_explicit(&p->alloc, 0, memory_order_relaxed);
        atomic_store_explicit(&p->reuse, 0, memory_order_relaxed);
        atomic_store_explicit(&p->free, 0, memory_order_relaxed);
        atomic_store_explicit(&p->clear, 0, memory_order_relaxed);
        atomic_store_explicit(&p->bytes_cleared, 0, memory_order_relaxed);
        atomic_store_explicit(&p->clear_ns, 0, memory_order_relaxed);
        atomic_store_explicit(&p->downgrade, 0, memory_order_relaxed);
        atomic_store_explicit(&p->idle_trimmed, 0, memory_order_relaxed);
        for (unsigned i = 0; i < SMC_HIST_BUCKETS; i++)
                atomic_store_explicit(&p->acquire_hist[i], 0, memory_order_relaxed);
        atomic_store_explicit(&p->acquire_ns, 0, memory_order_relaxed);
}

/* Only acquired buffers are found: a free or pending buffer is nobody's to name. */
struct smc_buf *smc_pool_lookup(struct smc_pool *p, uint64_t id) {
        uint32_t idx1 = (uint32_t) id;
        struct pool_slot *s;

        if (!p || idx1 == 0 || idx1 - 1 >= atomic_load_explicit(&p->nslots, memory_order_acquire))
                return NULL;
        s = slot_get(p, idx1 - 1);
        if (atomic_load_explicit(&s->id, memory_order_acquire) != id ||
            atomic_load_explicit(&s->state, memory_order_acquire) != SLOT_IN_USE)
                return NULL;
        return &s->buf;
}

/* One free buffer of @class: the domains' first (they serve one pair of uids), the
 * fresh ones (any domain) last. NULL if there is none. */
static struct pool_slot *pop_free_of_class(struct smc_pool *p, unsigned class) {
        struct pool_slot *s;

        for (struct pool_domain *d = atomic_load_explicit(&p->all, memory_order_acquire); d;
             d = atomic_load_explicit(&d->all_next, memory_order_acquire)) {
                s = stack_pop(p, &d->head[class]);
                if (s)
                        return s;
        }
        return stack_pop(p, &p->fresh.head[class]);
}

unsigned smc_pool_trim_idle(struct smc_pool *p, const unsigned keep[SMC_DMB_NCLASSES]) {
        unsigned n = 0;

        if (!p)
                return 0;
        for (unsigned c = 0; c < SMC_DMB_NCLASSES; c++) {
                uint64_t low = atomic_load_explicit(&p->free_low[c], memory_order_relaxed);
                uint64_t k = keep ? keep[c] : 0;

                for (uint64_t surplus = low > k ? low - k : 0; surplus > 0; surplus--) {
                        struct pool_slot *s = pop_free_of_class(p, c);

                        if (!s)
                                break;
                        atomic_fetch_sub_explicit(&p->free_count[c], 1, memory_order_relaxed);
                        buf_destroy(p, s, true);
                        n++;
                }
                /* the next interval starts from what is free now */
                atomic_store_explicit(&p->free_low[c], atomic_load_explicit(&p->free_count[c], memory_order_relaxed),
                                      memory_order_relaxed);
        }
        atomic_fetch_add_explicit(&p->idle_trimmed, n, memory_order_relaxed);
        return n;
}
