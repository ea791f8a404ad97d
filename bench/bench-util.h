/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once
/*
 * Small helpers shared by the benchmark programs (bench-net.c, bench-sendfile.c):
 * ordering repeated runs to report their median and spread, and the usage exits of
 * the option parsing. Header only (static inline).
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* qsort_r(3) comparator: the doubles at byte offset *(size_t *) @off of @a and @b,
 * ascending. */
static inline int bench_cmp_double_at(const void *a, const void *b, void *off) {
        double x, y;

        memcpy(&x, (const char *) a + *(const size_t *) off, sizeof(x));
        memcpy(&y, (const char *) b + *(const size_t *) off, sizeof(y));
        return x < y ? -1 : x > y;
}

/* Sorts @n elements of @size bytes at @v in place, ascending by the double at byte
 * @offset of each (offsetof() of a run's measured value; 0 for an array of doubles).
 * After it, v[0] and v[n - 1] are the spread's ends and the middle element the
 * median run. */
static inline void bench_sort_by_double(void *v, size_t n, size_t size, size_t offset) {
        qsort_r(v, n, size, bench_cmp_double_at, &offset);
}

/* Prints the usage with @usage, on stdout for @status 0 (--help), else on stderr, and
 * returns @status: the exit status of main(). */
static inline int bench_usage_exit(void (*usage)(FILE *), int status) {
        usage(status == 0 ? stdout : stderr);
        return status;
}
