/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * A bounded single-producer / single-consumer lock-free ring of work completions, each
 * tagged with the id of the link it belongs to: the hand-off from roce.c's CQ polling
 * thread (the producer) to the sd-event loop thread (the consumer). C11 atomics only.
 *
 * Indexes: @tail (next slot to write) is written by the producer only, @head (next slot
 * to read) by the consumer only; both count up forever (64 bits never wrap) and are
 * reduced modulo the capacity, a power of two. A push publishes its entry with a
 * release store of @tail (paired with the consumer's acquire load), a pop gives the
 * slot back with a release store of @head (paired with the producer's acquire load).
 *
 * Sleep / wake protocol (no lost wake-up): the consumer, out of entries, calls
 * wc_ring_prepare_sleep(), which raises @sleeping and then looks at @tail again; only
 * if that is still empty may it sleep (e.g. in epoll on an eventfd). The producer,
 * after pushing, calls wc_ring_wake_needed(), which orders its pushes before reading
 * @sleeping (all sequentially consistent) and takes the flag down; when that returns
 * true the producer must wake the consumer (write the eventfd). Either the consumer's
 * re-check sees the entry, or the producer sees the flag: both can happen (a spurious
 * wake-up, harmless), neither cannot. The consumer must consume its wake-up (read the
 * eventfd) BEFORE it drains the ring, never after.
 *
 * Not a general queue: one producer thread and one consumer thread at a time. All
 * functions are inline; no allocation after wc_ring_init().
 */

#include <errno.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <infiniband/verbs.h>

struct wc_ring_entry {
        uint64_t link_id;   /* the link's unique id (never reused) */
        struct ibv_wc wc;
};

typedef struct WcRing {
        /* the producer's cache line */
        alignas(64) _Atomic uint64_t tail;
        uint64_t head_cache;         /* the producer's last view of @head */
        /* the consumer's cache line */
        alignas(64) _Atomic uint64_t head;
        uint64_t tail_cache;         /* the consumer's last view of @tail */
        /* shared, rarely written */
        alignas(64) atomic_bool sleeping; /* the consumer sleeps or is about to */
        uint64_t mask;               /* capacity - 1 */
        struct wc_ring_entry *e;
} WcRing;

/* Set up @r for @capacity entries (a power of two, 2 .. 2^24). The consumer starts
 * out asleep (the first push asks for a wake-up). Returns 0, -EINVAL or -ENOMEM. */
static inline int wc_ring_init(WcRing *r, uint32_t capacity) {
        if (!r || capacity < 2 || capacity > (UINT32_C(1) << 24) || (capacity & (capacity - 1)) != 0)
                return -EINVAL;
        r->e = calloc(capacity, sizeof(*r->e));
        if (!r->e)
                return -ENOMEM;
        atomic_init(&r->tail, 0);
        atomic_init(&r->head, 0);
        atomic_init(&r->sleeping, true);
        r->head_cache = r->tail_cache = 0;
        r->mask = capacity - 1;
        return 0;
}

/* Free the entries (neither thread may use @r any more). NULL and repeats are ok. */
static inline void wc_ring_done(WcRing *r) {
        if (!r)
                return;
        free(r->e);
        r->e = NULL;
}

static inline uint64_t wc_ring_capacity(const WcRing *r) {
        return r->mask + 1;
}

/* Producer: append one entry. Returns false (nothing done) when the ring is full. */
static inline bool wc_ring_push(WcRing *r, uint64_t link_id, const struct ibv_wc *wc) {
        uint64_t t = atomic_load_explicit(&r->tail, memory_order_relaxed);

        if (t - r->head_cache > r->mask) {
                r->head_cache = atomic_load_explicit(&r->head, memory_order_acquire);
                if (t - r->head_cache > r->mask)
                        return false;
        }
        r->e[t & r->mask].link_id = link_id;
        r->e[t & r->mask].wc = *wc;
        atomic_store_explicit(&r->tail, t + 1, memory_order_release);
        return true;
}

/* Producer, after one or more pushes (and while waiting for room in a full ring):
 * returns true when the consumer has said it sleeps; the flag is then taken down and
 * the caller must wake the consumer. */
static inline bool wc_ring_wake_needed(WcRing *r) {
        /* a sequentially consistent read-modify-write of tail: the pushes come before
         * the flag read in the single total order the consumer's store of the flag and
         * its re-read of tail are part of (no standalone fences: TSan understands this) */
        (void) atomic_fetch_add_explicit(&r->tail, 0, memory_order_seq_cst);
        if (!atomic_load_explicit(&r->sleeping, memory_order_seq_cst))
                return false;
        return atomic_exchange_explicit(&r->sleeping, false, memory_order_seq_cst);
}

/* Consumer: take the oldest entry. Returns false when the ring is empty. */
static inline bool wc_ring_pop(WcRing *r, struct wc_ring_entry *ret) {
        uint64_t h = atomic_load_explicit(&r->head, memory_order_relaxed);

        if (h == r->tail_cache) {
                r->tail_cache = atomic_load_explicit(&r->tail, memory_order_acquire);
                if (h == r->tail_cache)
                        return false;
        }
        *ret = r->e[h & r->mask];
        atomic_store_explicit(&r->head, h + 1, memory_order_release);
        return true;
}

/* Consumer, found the ring empty: announce sleep, then look again. Returns true if
 * the consumer may now sleep until woken, false if entries arrived meanwhile (the
 * flag is down again; drain them and call this again). */
static inline bool wc_ring_prepare_sleep(WcRing *r) {
        uint64_t h = atomic_load_explicit(&r->head, memory_order_relaxed);

        atomic_store_explicit(&r->sleeping, true, memory_order_seq_cst);
        if (atomic_load_explicit(&r->tail, memory_order_seq_cst) == h)
                return true;
        atomic_store_explicit(&r->sleeping, false, memory_order_relaxed);
        return false;
}
