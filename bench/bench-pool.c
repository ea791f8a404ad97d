/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Benchmark of the DMB buffer pool (smcd/pool.h), seeds 000/003 and 004:
 *
 *  1. acquire latency from a non-empty free list while N = 10 .. 100000 class-0
 *     buffers are in use: must not grow with N (the kernel's list walk took 5-6 us
 *     at 200 and ~30 us at 1000 buffers in use);
 *  2. acquire latency with buf_clear = release (cleared by the reclaim worker before
 *     the acquire) vs create (cleared inside the acquire), per class 16 KiB .. 1 MiB.
 *
 * Each sample is one clock_gettime(CLOCK_MONOTONIC) pair around one call, after a
 * warm-up. Prints an aligned table, or with --json one JSON object per line.
 *
 * 100000 buffers need 100000 memfds and mappings: the benchmark raises
 * RLIMIT_NOFILE itself (as far as the hard limit / CAP_SYS_RESOURCE allow) but does
 * not change vm.max_map_count (default 65530; raise it with sysctl first). A size
 * that does not fit is replaced by the largest that does, marked with '*'.
 *
 * Usage: bench-pool [--json] [--quick]
 */

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "pool.h"

#define BATCH 64u
#define UID_A 1000
#define UID_B 1001

static bool json;

static inline uint64_t now_ns(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;

        return x < y ? -1 : x > y;
}

struct lat {
        uint64_t p50, p99, min;
};

static struct lat percentiles(uint64_t *v, size_t n) {
        qsort(v, n, sizeof(*v), cmp_u64);
        return (struct lat) { .p50 = v[n / 2], .p99 = v[(n * 99) / 100], .min = v[0] };
}

static long read_long(const char *path) {
        FILE *f = fopen(path, "re");
        long v = -1;

        if (!f)
                return -1;
        if (fscanf(f, "%ld", &v) != 1)
                v = -1;
        fclose(f);
        return v;
}

/* Make room for @nbufs memfds and mappings; returns the number that fits. */
static unsigned raise_limits(unsigned nbufs) {
        long nr_open = read_long("/proc/sys/fs/nr_open");
        long maps = read_long("/proc/sys/vm/max_map_count");
        rlim_t want = (rlim_t) nbufs + 4096;
        struct rlimit rl;
        unsigned fit = nbufs;

        if (nr_open > 0 && want > (rlim_t) nr_open)
                want = (rlim_t) nr_open;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < want) {
                rl.rlim_cur = want;
                if (rl.rlim_max < want)
                        rl.rlim_max = want;
                if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
                        getrlimit(RLIMIT_NOFILE, &rl);
                        fprintf(stderr, "bench-pool: RLIMIT_NOFILE stays at %llu: %s\n",
                                (unsigned long long) rl.rlim_cur, strerror(errno));
                }
        }
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t) nbufs + 1024)
                fit = rl.rlim_cur > 1024 ? (unsigned) (rl.rlim_cur - 1024) : 0;

        /* each buffer is one mapping; leave room for the rest of the process */
        if (maps > 0 && (long) fit > maps - 8192) {
                fit = maps > 8192 ? (unsigned) (maps - 8192) : 0;
                fprintf(stderr, "bench-pool: vm.max_map_count is %ld: at most %u buffers\n", maps, fit);
        }
        return fit;
}

/* Acquire BATCH buffers of @class in a row, timing each; then release them and
 * flush so that the next batch is served from the free list again. */
static int timed_batch(struct smc_pool *p, unsigned class, uint64_t *acq, uint64_t *rel, bool scribble) {
        struct smc_buf *b[BATCH];

        for (unsigned i = 0; i < BATCH; i++) {
                uint64_t t0 = now_ns();
                int r = smc_pool_acquire(p, UID_A, UID_B, class, &b[i]);
                uint64_t t1 = now_ns();

                if (r < 0)
                        return r;
                if (acq)
                        acq[i] = t1 - t0;
        }
        for (unsigned i = 0; i < BATCH; i++) {
                if (scribble) {
                        memset(b[i]->base, 0x5a, SMC_DMB_HDR_CLEAR_LEN);
                        memset(smc_dmb_data(b[i]->base), 0x5a, b[i]->size);
                }
                uint64_t t0 = now_ns();
                smc_pool_release(p, b[i]);
                uint64_t t1 = now_ns();
                if (rel)
                        rel[i] = t1 - t0;
        }
        smc_pool_flush(p);
        return 0;
}

static void bench_in_use(const unsigned *sizes, size_t nsizes, unsigned samples) {
        unsigned maxn = 0, fit;
        uint64_t *acq = calloc(samples, sizeof(uint64_t)), *rel = calloc(samples, sizeof(uint64_t));
        struct smc_buf **held;

        for (size_t i = 0; i < nsizes; i++)
                if (sizes[i] > maxn)
                        maxn = sizes[i];
        fit = raise_limits(maxn + BATCH);
        held = calloc(maxn, sizeof(*held));
        if (!acq || !rel || !held) {
                fprintf(stderr, "bench-pool: out of memory\n");
                exit(EXIT_FAILURE);
        }

        if (!json) {
                printf("acquire from a free list, class 0 (16 KiB), %u samples, N class-0 buffers in use\n",
                       samples);
                printf("%10s %12s %12s %12s %12s %10s\n", "in_use", "acq_p50_ns", "acq_p99_ns", "acq_min_ns",
                       "rel_p50_ns", "setup_s");
        }

        for (size_t k = 0; k < nsizes; k++) {
                unsigned n = sizes[k];
                struct smc_pool_config cfg = {};
                struct smc_pool *p;
                uint64_t t0 = now_ns();
                unsigned got = 0;
                int r;

                bool capped = false;

                if (n + BATCH > fit) {
                        if (fit <= BATCH || (k > 0 && sizes[k - 1] + BATCH > fit))
                                continue; /* the previous size already used the maximum */
                        fprintf(stderr, "bench-pool: %u buffers in use do not fit (fds/mappings), "
                                "measuring %u instead\n", n, fit - BATCH);
                        n = fit - BATCH;
                        capped = true;
                }
                r = smc_pool_new(&cfg, &p);
                if (r < 0) {
                        fprintf(stderr, "bench-pool: smc_pool_new: %s\n", strerror(-r));
                        exit(EXIT_FAILURE);
                }
                for (; got < n; got++) {
                        r = smc_pool_acquire(p, UID_A, UID_B, 0, &held[got]);
                        if (r < 0)
                                break;
                }
                if (r >= 0)
                        /* warm-up: creates the BATCH free buffers, then reuses them */
                        for (unsigned w = 0; w < 8 && r >= 0; w++)
                                r = timed_batch(p, 0, NULL, NULL, false);
                double setup = (now_ns() - t0) / 1e9;
                for (unsigned s = 0; s + BATCH <= samples && r >= 0; s += BATCH)
                        r = timed_batch(p, 0, acq + s, rel + s, false);
                if (r < 0) {
                        fprintf(stderr, "bench-pool: acquire with %u in use: %s\n", got, strerror(-r));
                        for (unsigned i = 0; i < got; i++)
                                smc_pool_release(p, held[i]);
                        smc_pool_free(p);
                        continue;
                }

                struct smc_pool_stats st;
                smc_pool_get_stats(p, &st);
                unsigned ns = samples / BATCH * BATCH;
                struct lat a = percentiles(acq, ns), rl = percentiles(rel, ns);

                if (json)
                        printf("{\"bench\":\"pool\",\"test\":\"acquire_in_use\",\"class\":0,\"in_use\":%u,"
                               "\"samples\":%u,\"acquire_p50_ns\":%llu,\"acquire_p99_ns\":%llu,"
                               "\"acquire_min_ns\":%llu,\"release_p50_ns\":%llu,\"release_p99_ns\":%llu,"
                               "\"buffers\":%llu,\"capped\":%s}\n",
                               n, ns, (unsigned long long) a.p50, (unsigned long long) a.p99,
                               (unsigned long long) a.min, (unsigned long long) rl.p50,
                               (unsigned long long) rl.p99, (unsigned long long) st.alloc,
                               capped ? "true" : "false");
                else
                        printf("%9u%c %12llu %12llu %12llu %12llu %10.2f\n", n, capped ? '*' : ' ',
                               (unsigned long long) a.p50,
                               (unsigned long long) a.p99, (unsigned long long) a.min,
                               (unsigned long long) rl.p50, setup);
                fflush(stdout);

                for (unsigned i = 0; i < got; i++)
                        smc_pool_release(p, held[i]);
                smc_pool_flush(p);
                smc_pool_free(p);
        }
        free(held);
        free(acq);
        free(rel);
}

static void bench_clear(unsigned quick) {
        if (!json) {
                printf("\nacquire latency by clearing mode (release: cleared by the worker before; "
                       "create: cleared in acquire)\n");
                printf("%10s %14s %14s %14s %14s %10s\n", "class", "relmode_p50", "relmode_p99", "create_p50",
                       "create_p99", "ratio_p50");
        }
        for (unsigned c = 0; c < SMC_DMB_NCLASSES; c++) {
                /* fewer samples for big buffers: each create-mode sample clears size bytes */
                unsigned samples = (c <= 2 ? 4096 : c <= 4 ? 1024 : 512) / (quick ? 4 : 1);
                struct lat l[2];
                uint64_t *acq;

                if (samples < BATCH)
                        samples = BATCH;
                acq = calloc(samples, sizeof(uint64_t));
                if (!acq)
                        exit(EXIT_FAILURE);
                for (int mode = 0; mode < 2; mode++) {
                        struct smc_pool_config cfg = {
                                .buf_clear = mode ? SMC_POOL_CLEAR_CREATE : SMC_POOL_CLEAR_RELEASE,
                        };
                        struct smc_pool *p;
                        int r;

                        r = smc_pool_new(&cfg, &p);
                        if (r < 0) {
                                fprintf(stderr, "bench-pool: smc_pool_new: %s\n", strerror(-r));
                                exit(EXIT_FAILURE);
                        }
                        for (unsigned w = 0; w < 2 && r >= 0; w++)
                                r = timed_batch(p, c, NULL, NULL, true);
                        for (unsigned s = 0; s + BATCH <= samples && r >= 0; s += BATCH)
                                r = timed_batch(p, c, acq + s, NULL, true);
                        if (r < 0) {
                                fprintf(stderr, "bench-pool: acquire class %u: %s\n", c, strerror(-r));
                                exit(EXIT_FAILURE);
                        }
                        l[mode] = percentiles(acq, samples / BATCH * BATCH);
                        smc_pool_free(p);
                }
                double ratio = (double) l[1].p50 / (double) (l[0].p50 ? l[0].p50 : 1);
                unsigned kib = smc_dmb_class_size(c) >> 10;

                if (json)
                        printf("{\"bench\":\"pool\",\"test\":\"acquire_clear_mode\",\"class\":%u,\"size_kib\":%u,"
                               "\"samples\":%u,\"release_p50_ns\":%llu,\"release_p99_ns\":%llu,"
                               "\"create_p50_ns\":%llu,\"create_p99_ns\":%llu,\"ratio_p50\":%.1f}\n",
                               c, kib, samples / BATCH * BATCH, (unsigned long long) l[0].p50,
                               (unsigned long long) l[0].p99, (unsigned long long) l[1].p50,
                               (unsigned long long) l[1].p99, ratio);
                else {
                        char name[16];

                        snprintf(name, sizeof(name), "%u:%uK", c, kib);
                        printf("%10s %14llu %14llu %14llu %14llu %9.1fx\n", name, (unsigned long long) l[0].p50,
                               (unsigned long long) l[0].p99, (unsigned long long) l[1].p50,
                               (unsigned long long) l[1].p99, ratio);
                }
                fflush(stdout);
                free(acq);
        }
}

int main(int argc, char **argv) {
        static const unsigned sizes[] = { 10, 200, 1000, 10000, 100000 };
        bool quick = false;

        for (int i = 1; i < argc; i++) {
                if (strcmp(argv[i], "--json") == 0)
                        json = true;
                else if (strcmp(argv[i], "--quick") == 0)
                        quick = true;
                else {
                        fprintf(stderr, "usage: %s [--json] [--quick]\n", argv[0]);
                        return EXIT_FAILURE;
                }
        }

        bench_in_use(sizes, quick ? 4 : 5, quick ? 4096 : 32768);
        bench_clear(quick);
        return 0;
}
