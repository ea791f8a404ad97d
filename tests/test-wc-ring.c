/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-wc-ring: smcd/wc-ring.h, the single-producer / single-consumer ring that carries
 * work completions from roce.c's CQ polling thread to the event loop thread.
 *
 *   - single-threaded: capacity checks, full / empty, wrap-around, the sleep flag;
 *   - two threads, millions of entries through small and large rings: every entry
 *     arrives once, in order, with its payload intact; the producer waits for room when
 *     the ring is full and never drops;
 *   - the sleep / wake protocol as roce.c uses it (eventfd, consumer sleeps in poll(2)):
 *     a producer that pauses between bursts so the consumer sleeps thousands of times,
 *     and one in lock step that pushes the moment the consumer has taken everything
 *     (right into the window between its last empty pop and its sleep) and then
 *     waits for it to take that too: a lost wake-up shows as a consumer asleep over
 *     entries (that wait, or the consumer's poll, times out) and fails the test.
 *
 * Also built and run under -Db_sanitize=thread (suite tsan), with fewer entries. */

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "wc-ring.h"

#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#endif
#endif
#ifndef UNDER_TSAN
#define UNDER_TSAN 0
#endif

#define SLEEP_TIMEOUT_MS 10000 /* a consumer asleep this long over entries: lost wake-up */
#define CATCH_UP_MS 2000       /* lock step: the consumer takes a burst in this time */

static uint64_t now_usec(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000u + (uint64_t) ts.tv_nsec / 1000u;
}

static void make_wc(uint64_t i, struct ibv_wc *wc) {
        memset(wc, 0, sizeof(*wc));
        wc->wr_id = i * 3 + 1;
        wc->byte_len = (uint32_t) (i ^ 0x5a5a5a5a);
        wc->qp_num = (uint32_t) (i >> 7) & 0xffffff;
        wc->status = (enum ibv_wc_status) (i % 7 == 0 ? IBV_WC_WR_FLUSH_ERR : IBV_WC_SUCCESS);
        wc->opcode = (enum ibv_wc_opcode) (i & 1 ? IBV_WC_RECV : IBV_WC_SEND);
        wc->imm_data = (uint32_t) (i * 2654435761u);
}

static bool entry_ok(uint64_t i, const struct wc_ring_entry *e) {
        struct ibv_wc want;

        make_wc(i, &want);
        return e->link_id == i + 1000 && memcmp(&e->wc, &want, sizeof(want)) == 0;
}

/* ---- single-threaded ---- */

static void test_basics(void) {
        struct wc_ring_entry e;
        struct ibv_wc wc;
        WcRing r;
        uint64_t next_in = 0, next_out = 0;
        bool all_ok = true;

        CHECK(wc_ring_init(&r, 0) == -EINVAL, "capacity 0");
        CHECK(wc_ring_init(&r, 1) == -EINVAL, "capacity 1");
        CHECK(wc_ring_init(&r, 3) == -EINVAL, "capacity 3");
        CHECK(wc_ring_init(&r, 1000) == -EINVAL, "capacity 1000");
        CHECK(wc_ring_init(&r, (UINT32_C(1) << 24) * 2) == -EINVAL, "capacity 2^25");
        CHECK(wc_ring_init(NULL, 4) == -EINVAL, "NULL ring");
        CHECK(wc_ring_init(&r, 4) == 0, "capacity 4");
        CHECK(wc_ring_capacity(&r) == 4, "capacity %llu", (unsigned long long) wc_ring_capacity(&r));

        /* empty; a consumer may sleep on an empty ring and starts out asleep */
        CHECK(!wc_ring_pop(&r, &e), "pop from an empty ring");
        CHECK(wc_ring_prepare_sleep(&r), "prepare_sleep on an empty ring");
        /* full at 4 */
        for (int i = 0; i < 4; i++) {
                make_wc(next_in, &wc);
                CHECK(wc_ring_push(&r, next_in + 1000, &wc), "push %d of 4", i);
                next_in++;
        }
        make_wc(next_in, &wc);
        CHECK(!wc_ring_push(&r, next_in + 1000, &wc), "push into a full ring");
        /* the sleeping consumer must be woken, exactly once */
        CHECK(wc_ring_wake_needed(&r), "wake after pushes to a sleeping consumer");
        CHECK(!wc_ring_wake_needed(&r), "a second wake");
        /* entries there: the consumer may not sleep, and the flag is down again */
        CHECK(!wc_ring_prepare_sleep(&r), "prepare_sleep over entries");
        CHECK(!wc_ring_wake_needed(&r), "wake after a refused sleep");
        CHECK(wc_ring_pop(&r, &e) && entry_ok(next_out, &e), "first pop");
        next_out++;
        make_wc(next_in, &wc);
        CHECK(wc_ring_push(&r, next_in + 1000, &wc), "push after a pop");
        next_in++;
        /* wrap around many times with varying fill levels */
        for (unsigned round = 0; round < 100000; round++) {
                unsigned k = round % 5;

                for (unsigned j = 0; j < k; j++) {
                        make_wc(next_in, &wc);
                        if (!wc_ring_push(&r, next_in + 1000, &wc))
                                break;
                        next_in++;
                }
                for (unsigned j = 0; j < (round * 7) % 5; j++) {
                        if (!wc_ring_pop(&r, &e))
                                break;
                        if (!entry_ok(next_out, &e))
                                all_ok = false;
                        next_out++;
                }
                if (next_in - next_out > 4)
                        all_ok = false;
        }
        while (wc_ring_pop(&r, &e)) {
                if (!entry_ok(next_out, &e))
                        all_ok = false;
                next_out++;
        }
        CHECK(all_ok && next_in == next_out && next_in > 100000, "wrap-around: %llu in, %llu out",
              (unsigned long long) next_in, (unsigned long long) next_out);
        CHECK(wc_ring_prepare_sleep(&r), "prepare_sleep when drained");
        wc_ring_done(&r);
        wc_ring_done(&r); /* repeat is ok */
        wc_ring_done(NULL);
        printf("ok - basics: capacities, full, empty, wake flag, %llu entries through a ring of 4\n",
               (unsigned long long) next_in);
}

/* ---- two threads ---- */

struct run {
        WcRing ring;
        int efd;
        uint64_t n;
        unsigned max_burst;   /* entries per burst, 1 .. max_burst */
        unsigned pause_usec;  /* producer pause after each burst (0 = none) */
        bool lock_step;       /* the producer waits until the consumer took each burst */
        _Atomic uint64_t taken; /* entries the consumer took (lock step) */
        /* producer's counts */
        uint64_t full_waits, wakes_written, stuck;
        /* consumer's counts */
        uint64_t received, bad, sleeps, wakeups, lost;
        uint64_t first_bad;
};

static void *producer(void *userdata) {
        struct run *R = userdata;
        uint64_t x = 0x9e3779b97f4a7c15ULL, i = 0;

        while (i < R->n) {
                unsigned burst;

                x ^= x >> 12;
                x ^= x << 25;
                x ^= x >> 27;
                burst = 1 + (unsigned) ((x * 2685821657736338717ULL) >> 33) % R->max_burst;
                for (unsigned j = 0; j < burst && i < R->n; j++, i++) {
                        struct ibv_wc wc;

                        make_wc(i, &wc);
                        while (!wc_ring_push(&R->ring, i + 1000, &wc)) {
                                /* full: as roce.c's thread does, make sure the consumer
                                 * is awake, then wait for room */
                                R->full_waits++;
                                if (wc_ring_wake_needed(&R->ring)) {
                                        uint64_t one = 1;

                                        R->wakes_written++;
                                        (void) !write(R->efd, &one, sizeof(one));
                                }
                                sched_yield();
                        }
                }
                if (wc_ring_wake_needed(&R->ring)) {
                        uint64_t one = 1;

                        R->wakes_written++;
                        (void) !write(R->efd, &one, sizeof(one));
                }
                if (R->pause_usec) {
                        struct timespec ts = { .tv_nsec = (long) R->pause_usec * 1000 };

                        nanosleep(&ts, NULL);
                }
                if (R->lock_step) {
                        uint64_t t0 = now_usec();
                        unsigned spins = 0;

                        /* a pure spin (no sched_yield): push the moment the consumer took
                         * the last entry, so the push races with its way to sleep */
                        while (atomic_load_explicit(&R->taken, memory_order_acquire) < i) {
                                if (++spins % 4096 == 0 && now_usec() - t0 > CATCH_UP_MS * 1000u) {
                                        /* the consumer sleeps over entries: a lost wake-up */
                                        uint64_t one = 1;

                                        fprintf(stderr, "lost wake-up: consumer asleep over entry %llu\n",
                                                (unsigned long long) atomic_load(&R->taken));
                                        R->stuck++;
                                        (void) !write(R->efd, &one, sizeof(one));
                                        t0 = now_usec();
                                }
                        }
                }
        }
        return NULL;
}

/* the consumer, as roce.c's wake handler and sd-event's epoll do it */
static void consume(struct run *R) {
        struct wc_ring_entry e;

        while (R->received < R->n) {
                struct pollfd pfd = { .fd = R->efd, .events = POLLIN };
                uint64_t v;
                int r;

                /* asleep: the ring was empty and the flag up; only a wake-up ends it */
                r = poll(&pfd, 1, SLEEP_TIMEOUT_MS);
                if (r == 0) {
                        /* nothing for 10 s: if entries wait, their wake-up was lost */
                        if (wc_ring_pop(&R->ring, &e)) {
                                R->lost++;
                                fprintf(stderr, "lost wake-up: asleep over entry %llu\n",
                                        (unsigned long long) R->received);
                                if (!entry_ok(R->received, &e) && R->bad++ == 0)
                                        R->first_bad = R->received;
                                R->received++;
                        } else {
                                fprintf(stderr, "consumer: nothing for %d ms after %llu entries\n",
                                        SLEEP_TIMEOUT_MS, (unsigned long long) R->received);
                                return;
                        }
                } else {
                        /* take the wake-up first, then drain */
                        (void) !read(R->efd, &v, sizeof(v));
                        R->wakeups++;
                }
                for (;;) {
                        while (wc_ring_pop(&R->ring, &e)) {
                                if (!entry_ok(R->received, &e) && R->bad++ == 0)
                                        R->first_bad = R->received;
                                R->received++;
                                atomic_store_explicit(&R->taken, R->received, memory_order_release);
                        }
                        if (wc_ring_prepare_sleep(&R->ring))
                                break;
                }
                R->sleeps++;
        }
}

static void run_two_threads(const char *what, uint32_t capacity, uint64_t n, unsigned max_burst, unsigned pause_usec,
                            bool lock_step) {
        struct run R = { .n = n, .max_burst = max_burst, .pause_usec = pause_usec, .lock_step = lock_step };
        struct wc_ring_entry e;
        pthread_t t;
        uint64_t t0 = now_usec();
        int r;

        r = wc_ring_init(&R.ring, capacity);
        CHECK(r == 0, "init %u: %d", capacity, r);
        R.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        CHECK(R.efd >= 0, "eventfd: %m");
        if (r < 0 || R.efd < 0)
                return;
        r = pthread_create(&t, NULL, producer, &R);
        CHECK(r == 0, "pthread_create: %s", strerror(r));
        if (r != 0)
                return;
        consume(&R);
        pthread_join(t, NULL);
        CHECK(R.received == n, "%s: %llu of %llu received", what, (unsigned long long) R.received,
              (unsigned long long) n);
        CHECK(R.bad == 0, "%s: %llu bad entries, the first at %llu", what, (unsigned long long) R.bad,
              (unsigned long long) R.first_bad);
        CHECK(R.lost == 0 && R.stuck == 0, "%s: %llu + %llu lost wake-ups", what, (unsigned long long) R.lost,
              (unsigned long long) R.stuck);
        CHECK(!wc_ring_pop(&R.ring, &e), "%s: an entry too many", what);
        printf("ok - %s: %llu entries through a ring of %u in order, none lost or doubled; consumer slept %llu "
               "times, woken %llu times (%llu eventfd writes), producer waited for room %llu times: %.0f ms\n",
               what, (unsigned long long) n, capacity, (unsigned long long) R.sleeps, (unsigned long long) R.wakeups,
               (unsigned long long) R.wakes_written, (unsigned long long) R.full_waits,
               (double) (now_usec() - t0) / 1000.0);
        close(R.efd);
        wc_ring_done(&R.ring);
}

int main(void) {
        uint64_t big = UNDER_TSAN ? 300000 : 4000000;
        uint64_t t0 = now_usec();

        setvbuf(stdout, NULL, _IOLBF, 0);
        test_basics();
        /* a small ring: the producer finds it full all the time */
        run_two_threads("small ring, bursts", 16, big, 64, 0, false);
        /* roce.c's size, bursts of up to a poll batch */
        run_two_threads("roce.c's ring size, bursts", 1024, big, 64, 0, false);
        /* single entries with pauses: the consumer goes to sleep nearly every time */
        run_two_threads("pauses between entries", 64, UNDER_TSAN ? 4000 : 10000, 1, 20, false);
        /* lock step: each push lands while the consumer is on its way to sleep */
        run_two_threads("lock step", 64, UNDER_TSAN ? 50000 : 300000, 3, 0, true);
        /* bursts with pauses: sleep and full ring mixed */
        run_two_threads("bursts with pauses", 8, UNDER_TSAN ? 40000 : 200000, 40, 5, false);
        printf("# %d checks, %d failed, %.1f s%s\n", checks, failures, (double) (now_usec() - t0) / 1e6,
               UNDER_TSAN ? " (TSan: fewer entries)" : "");
        return failures ? 1 : 0;
}
