/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The unit tests' non-fatal check: count it, and on failure count that too and print
 * file:line, the condition and a printf-style message; the test goes on. main()
 * reports `failures` (of `checks`) at the end. */

#include <stdio.h>

static int failures, checks;

#define CHECK(cond, ...)                                                                   \
        do {                                                                               \
                checks++;                                                                  \
                if (!(cond)) {                                                             \
                        failures++;                                                        \
                        fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);    \
                        fprintf(stderr, __VA_ARGS__);                                      \
                        fputc('\n', stderr);                                               \
                }                                                                          \
        } while (0)
