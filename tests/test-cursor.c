/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Unit tests for the DMB size classes and SMC cursor arithmetic of dmb.h. */

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "dmb.h"

static unsigned n_checks;

#define CHECK(cond, ...)                                                                    \
        do {                                                                                \
                n_checks++;                                                                 \
                if (!(cond)) {                                                              \
                        fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
                        fprintf(stderr, __VA_ARGS__);                                       \
                        fputc('\n', stderr);                                                \
                        exit(EXIT_FAILURE);                                                 \
                }                                                                           \
        } while (0)

static void test_layout(void) {
        /* 128 bytes, then a cold line of counters appended (dmb.h, "Counters") */
        CHECK(sizeof(struct smc_dmb_hdr) == 192, "header is %zu bytes", sizeof(struct smc_dmb_hdr));
        CHECK(offsetof(struct smc_dmb_hdr, prod) % 8 == 0, "prod misaligned");
        CHECK(offsetof(struct smc_dmb_hdr, cons) == 64, "cons at %zu, want 64 (own cache line)",
              offsetof(struct smc_dmb_hdr, cons));
        CHECK(offsetof(struct smc_dmb_hdr, writer_waiting) < 64, "writer_waiting not on the writer's line");
        CHECK(offsetof(struct smc_dmb_hdr, bell) >= 64, "bell not on the reader's line");
}

static void test_class(void) {
        static const struct {
                uint64_t size;
                unsigned c;
        } t[] = {
                { 0, 0 },
                { 1, 0 },
                { 16384, 0 },
                { 16385, 1 },
                { 32768, 1 },
                { 32769, 2 },
                { 65536, 2 },
                { 65537, 3 },
                { 1u << 20, 6 },
                { (1u << 20) + 1, 6 },
                { 2u << 20, 6 },
                { UINT64_MAX, 6 },
        };

        for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
                unsigned c = smc_dmb_class(t[i].size);

                CHECK(c == t[i].c, "smc_dmb_class(%" PRIu64 ") = %u, want %u", t[i].size, c, t[i].c);
                CHECK(smc_dmb_class_size(c) >= (t[i].size < SMC_DMB_MAX_SIZE ? t[i].size : SMC_DMB_MAX_SIZE),
                      "class size %u < %" PRIu64, smc_dmb_class_size(c), t[i].size);
        }
        for (unsigned c = 0; c < SMC_DMB_NCLASSES; c++) {
                CHECK(smc_dmb_class(smc_dmb_class_size(c)) == c, "class_size(%u) does not map back", c);
                CHECK(smc_dmb_class(smc_dmb_class_size(c) + 1) == (c + 1 < SMC_DMB_NCLASSES ? c + 1 : c),
                      "class_size(%u)+1 does not round up", c);
        }
        CHECK(smc_dmb_class_size(0) == SMC_DMB_MIN_SIZE, "min");
        CHECK(smc_dmb_class_size(SMC_DMB_NCLASSES - 1) == SMC_DMB_MAX_SIZE, "max");
}

static void test_cursor(void) {
        const uint32_t size = 16384;
        uint64_t c = smc_curs_make(3, 100), d;

        CHECK(smc_curs_wrap(c) == 3 && smc_curs_count(c) == 100, "make/split");

        /* no wrap */
        d = smc_curs_add(c, 1000, size);
        CHECK(smc_curs_wrap(d) == 3 && smc_curs_count(d) == 1100, "add without wrap");
        CHECK(smc_curs_diff(size, c, d) == 1000, "diff without wrap: %u", smc_curs_diff(size, c, d));
        CHECK(smc_curs_diff(size, d, c) == 0, "diff backwards clamps to 0");
        CHECK(smc_curs_diff(size, c, c) == 0, "diff of equal cursors");

        /* exactly to the end: count 0 of the next wrap */
        d = smc_curs_add(c, size - 100, size);
        CHECK(smc_curs_wrap(d) == 4 && smc_curs_count(d) == 0, "add to the end: %u/%u", smc_curs_wrap(d),
              smc_curs_count(d));
        CHECK(smc_curs_diff(size, c, d) == size - 100, "diff to the end");

        /* across the wrap */
        d = smc_curs_add(c, size - 1, size);
        CHECK(smc_curs_wrap(d) == 4 && smc_curs_count(d) == 99, "add across wrap");
        CHECK(smc_curs_diff(size, c, d) == size - 1, "diff across wrap: %u", smc_curs_diff(size, c, d));

        /* a full ring: prod one whole ring ahead of cons */
        d = smc_curs_add(c, size, size);
        CHECK(smc_curs_wrap(d) == 4 && smc_curs_count(d) == 100, "add a whole ring");
        CHECK(smc_curs_diff(size, c, d) == size, "full ring diff: %u", smc_curs_diff(size, c, d));

        /* adding 0 */
        CHECK(smc_curs_add(c, 0, size) == c, "add 0");

        /* the 16-bit wrap counter wraps too */
        c = smc_curs_make(UINT16_MAX, size - 10);
        d = smc_curs_add(c, 20, size);
        CHECK(smc_curs_wrap(d) == 0 && smc_curs_count(d) == 10, "wrap counter overflow: %u/%u", smc_curs_wrap(d),
              smc_curs_count(d));
        CHECK(smc_curs_diff(size, c, d) == 20, "diff across wrap counter overflow: %u", smc_curs_diff(size, c, d));
        CHECK((d >> 48) == 0, "wrap overflow leaks into bits 48..63");

        /* walk many wraps with odd steps and check the running distance */
        c = smc_curs_make(UINT16_MAX - 2, 0);
        for (uint32_t i = 0, step = 1; i < 100000; i++, step = (step * 7919 + 13) % size + 1) {
                d = smc_curs_add(c, step > size ? size : step, size);
                CHECK(smc_curs_count(d) < size, "count out of range");
                CHECK(smc_curs_diff(size, c, d) == (step > size ? size : step), "walk diff at %u", i);
                c = d;
        }

        /* max ring size */
        c = smc_curs_make(7, SMC_DMB_MAX_SIZE - 1);
        d = smc_curs_add(c, 1, SMC_DMB_MAX_SIZE);
        CHECK(smc_curs_wrap(d) == 8 && smc_curs_count(d) == 0, "1 MiB ring wrap");
}

int main(void) {
        test_layout();
        test_class();
        test_cursor();
        printf("test-cursor: %u checks passed\n", n_checks);
        return 0;
}
