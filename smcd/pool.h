/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * The DMB buffer pool of smcd (seeds 000, 003, 004 in ../shared/seeds).
 *
 * - Size classes: SMC-D compressed sizes 0..6 = 16 KiB .. 1 MiB of ring data; each
 *   buffer is its own memfd of SMC_DMB_HDR_LEN + ring bytes, mapped in smcd.
 * - Trust domains: a buffer that served a connection between uids A and B is only
 *   ever reused for a connection between the same unordered pair {A, B} (an mmap in
 *   a client cannot be revoked). A buffer that never served anybody ("fresh", from
 *   pre-population or a released buffer of a domain that was trimmed) can go to any
 *   domain.
 * - Lock-less free lists: one Treiber stack per (domain, class), plus one fresh stack
 *   per class. The head is a 64-bit word {index + 1, tag}; every successful pop or
 *   push increments the tag, so a stale head can never be CAS'ed back in (ABA-safe).
 *   Buffers live in a segmented array that is never freed while the pool exists, so
 *   a concurrent pop may read a next index of a buffer that another thread already
 *   took (the CAS then fails). Acquire is O(1) whatever the number of buffers in use.
 * - Release-time clearing: smc_pool_release() queues the buffer to a reclaim worker
 *   thread, which zeroes header (SMC_DMB_HDR_CLEAR_LEN) and payload and only then
 *   pushes it onto its domain's free list, so neither the connect path (acquire =
 *   pop) nor the close path (release = enqueue) pays for the memset. With
 *   cfg.inline_reclaim (smcd) the owner clears instead, from smc_pool_reclaim() when
 *   its event loop is idle, and the worker is woken only for a backlog. With
 *   buf_clear = SMC_POOL_CLEAR_CREATE (the old kernel behaviour, for comparison),
 *   release pushes the buffer uncleared and acquire clears it.
 * A buffer handed out by acquire reads as zero, except, after
 * smc_pool_release_len(), for bytes beyond @dirty that a process wrote although it
 * said it did not: only a process of the buffer's trust domain can (the pair of uids
 * it is reused for), and it could read them anyway.
 *
 * Thread safety: every function may be called from any thread concurrently, except
 * smc_pool_new() / smc_pool_free().
 */

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "dmb.h"
#include "hist.h"

enum smc_pool_clear {
        SMC_POOL_CLEAR_RELEASE = 0, /* zero on release, in the reclaim worker (default) */
        SMC_POOL_CLEAR_CREATE = 1,  /* zero on acquire (old behaviour) */
};

struct smc_pool_config {
        enum smc_pool_clear buf_clear;
        unsigned prepopulate[SMC_DMB_NCLASSES]; /* fresh buffers to create per class */
        uint64_t max_bytes;                     /* 0 = unlimited; total memfd bytes */
        bool inline_reclaim; /* the owner calls smc_pool_reclaim() when idle; the worker
                              * only takes backlogs of SMC_POOL_WAKE_BATCH buffers */
        bool time_acquire;   /* time every successful acquire into the "acquire"
                              * histogram: two clock_gettime(CLOCK_MONOTONIC) per
                              * acquire (+~65 ns on this KVM guest). smcd sets it; off, the
                              * histogram stays empty */
};

#define SMC_POOL_WAKE_BATCH 32 /* released buffers that wake the worker (inline mode) */

struct smc_pool_stats {
        enum smc_pool_clear buf_clear; /* the clearing mode now (smc_pool_set_clear()) */
        uint64_t alloc;           /* buffers created (memfd_create) */
        uint64_t reuse;           /* acquires served from a free list */
        uint64_t free;            /* buffers destroyed */
        uint64_t clear;           /* buffers cleared */
        uint64_t bytes_cleared;   /* bytes zeroed */
        uint64_t clear_ns;        /* time spent clearing, ns */
        uint64_t in_use[SMC_DMB_NCLASSES]; /* buffers acquired and not released */
        uint64_t free_count[SMC_DMB_NCLASSES]; /* buffers on free lists (incl. fresh) */
        uint64_t pending_clear;   /* released, waiting for the reclaim worker */
        uint64_t bytes_total;     /* memfd bytes that exist */
        uint64_t downgrade;       /* acquires that handed out a smaller class than
                                   * wanted (smc_pool_acquire_fit) */
        uint64_t idle_trimmed;    /* free buffers destroyed by smc_pool_trim_idle() */
        struct smc_hist acquire;  /* duration of each successful acquire, ns (with
                                   * cfg.time_acquire): from entry to return, so a
                                   * new memfd's creation or a CLEAR_CREATE clear is
                                   * in it */
};

struct smc_buf {
        uint64_t id;        /* pool-wide id, never reused, never 0 */
        int memfd;          /* owned by the pool */
        void *base;         /* smcd's mapping: SMC_DMB_HDR_LEN + size bytes */
        uint32_t size;      /* ring bytes */
        uint8_t class;      /* compressed size 0..6 */
        /* private to pool.c from here on */
        uint32_t index;
        _Atomic uint32_t next;
        void *domain;
        struct smc_buf *clear_next;
};

struct smc_pool;

/* Create a pool and its reclaim worker thread, and pre-populate it. Returns 0 and
 * *ret (owned by the caller, free with smc_pool_free()) or -ENOMEM / -errno of
 * memfd_create, mmap or pthread_create. */
int smc_pool_new(const struct smc_pool_config *cfg, struct smc_pool **ret);

/* Stop the worker and destroy all buffers (also those still acquired). NULL is ok.
 * Returns NULL. */
struct smc_pool *smc_pool_free(struct smc_pool *p);

/* Take a zeroed buffer of compressed size @class (0..6) for a connection between
 * @uid_a and @uid_b (order does not matter): from the domain's free list, else the
 * fresh list, else a new memfd. *ret stays owned by the pool.
 * Returns 0, -EINVAL (bad class), -ENOBUFS (max_bytes reached) or -errno. */
int smc_pool_acquire(struct smc_pool *p, uid_t uid_a, uid_t uid_b, unsigned class, struct smc_buf **ret);

/* As smc_pool_acquire() for a connection that wants class @want but may have at
 * most class @max (<= @want; e.g. what the caller's per-uid buffer limit leaves):
 * a buffer of class @max, or, when max_bytes leaves no room for one even after
 * trimming free buffers, of the largest smaller class that fits (as the kernel's
 * smc_buf_create() downsizes an RMB). A buffer smaller than @want counts one
 * "downgrade". Returns 0, -EINVAL (@want > 6 or @max > @want), -ENOBUFS (not even
 * class 0 fits) or -errno. */
int smc_pool_acquire_fit(struct smc_pool *p, uid_t uid_a, uid_t uid_b, unsigned want, unsigned max,
                         struct smc_buf **ret);

/* Give back a buffer that no process writes any more. It is cleared (header and
 * payload) before anyone gets it again. Never blocks on clearing. */
void smc_pool_release(struct smc_pool *p, struct smc_buf *b);

/* As smc_pool_release() when only the first @dirty bytes of the ring data (from
 * offset 0; clamped to the buffer's size) can be non-zero: the clear zeroes the
 * header and those bytes only. For an SMC-D DMB whose writer's library recorded how
 * far it wrote (dmb.h, data_dirty); anything else uses smc_pool_release(). */
void smc_pool_release_len(struct smc_pool *p, struct smc_buf *b, uint32_t dirty);

/* Clear up to @max released buffers in the calling thread and put them back on
 * their free lists (the owner's idle-time reclaim, with cfg.inline_reclaim). Returns
 * how many are still waiting. Thread-safe with the worker and with releases. */
unsigned smc_pool_reclaim(struct smc_pool *p, unsigned max);

/* Wait until every buffer released so far has been cleared (tests, benchmarks,
 * orderly shutdown); wakes the worker if needed. */
void smc_pool_flush(struct smc_pool *p);

/* Change the clearing mode at run time (applies to buffers released after the call). */
void smc_pool_set_clear(struct smc_pool *p, enum smc_pool_clear mode);

/* Snapshot of the counters (each read atomically; the set is not a snapshot). */
void smc_pool_get_stats(struct smc_pool *p, struct smc_pool_stats *ret);

/* Zero the counters of events (alloc, reuse, free, clear, bytes_cleared, clear_ns,
 * downgrade, the acquire histogram); the gauges of what exists now (in_use,
 * free_count, pending_clear, bytes_total) stay. Events that race with the reset may
 * land on either side of it. */
void smc_pool_reset_stats(struct smc_pool *p);

/* Give idle memory back: destroy the free buffers of each class that stayed free
 * since the previous call (the least number free in between, less @keep[class]; @keep
 * may be NULL: keep none), the domains' buffers before the fresh ones, and start a
 * new interval. So after a burst, buffers nobody took for one to two intervals are
 * freed (their memfd closed, smcd's mapping unmapped; clients' mappings go when they
 * unmap). Called periodically by the owner (smcd: every SMCD_POOL_TRIM_USEC). Returns
 * the number destroyed (also counted in idle_trimmed and free). */
unsigned smc_pool_trim_idle(struct smc_pool *p, const unsigned keep[SMC_DMB_NCLASSES]);

/* Look up a buffer by id (for validating client requests). Returns NULL if unknown. */
struct smc_buf *smc_pool_lookup(struct smc_pool *p, uint64_t id);
