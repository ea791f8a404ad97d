/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * Latency histograms of smcd's counters (stats.h) and of the buffer pool (pool.h):
 * SMC_HIST_BUCKETS fixed log2 buckets of nanoseconds. Bucket 0 holds values <= 1 ns,
 * bucket i (1 <= i <= SMC_HIST_BUCKETS - 2) values in (2^(i-1), 2^i] ns, the last
 * bucket everything above 2^(SMC_HIST_BUCKETS - 2) ns (~1.07 s): its upper bound is
 * UINT64_MAX ("no bound"). The number of samples is the sum of the buckets, so a
 * snapshot's count always agrees with its buckets; "sum" is the total of the samples
 * in ns (for the mean).
 *
 * struct smc_hist is a plain value for one thread (smcd's event loop, snapshots);
 * the pool keeps its own atomic copy and fills one of these in smc_pool_get_stats().
 */

#include <stdint.h>

#define SMC_HIST_BUCKETS 32

struct smc_hist {
        uint64_t bucket[SMC_HIST_BUCKETS]; /* samples per bucket */
        uint64_t sum;                      /* ns, all samples */
};

/* The bucket of a sample of @ns nanoseconds. */
static inline unsigned smc_hist_bucket(uint64_t ns) {
        unsigned b;

        if (ns <= 1)
                return 0;
        b = 64u - (unsigned) __builtin_clzll(ns - 1); /* ceil(log2(ns)) */
        return b < SMC_HIST_BUCKETS - 1 ? b : SMC_HIST_BUCKETS - 1;
}

/* The inclusive upper bound of bucket @i in ns (UINT64_MAX for the last one). */
static inline uint64_t smc_hist_le(unsigned i) {
        return i < SMC_HIST_BUCKETS - 1 ? UINT64_C(1) << i : UINT64_MAX;
}

/* Add one sample of @ns nanoseconds (not thread-safe). */
static inline void smc_hist_add(struct smc_hist *h, uint64_t ns) {
        h->bucket[smc_hist_bucket(ns)]++;
        h->sum += ns;
}

/* Number of samples in @h. */
static inline uint64_t smc_hist_count(const struct smc_hist *h) {
        uint64_t n = 0;

        for (unsigned i = 0; i < SMC_HIST_BUCKETS; i++)
                n += h->bucket[i];
        return n;
}
