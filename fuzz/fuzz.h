/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * Shared by the libFuzzer targets in fuzz/ (fuzz/README.md). Each fuzz-<name>.c defines
 * LLVMFuzzerTestOneInput(); a failed FUZZ_CHECK() aborts, which libFuzzer reports as a
 * crash and saves the input (crash-<sha1>).
 */

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define FUZZ_CHECK(cond)                                                                         \
        do {                                                                                     \
                if (!(cond)) {                                                                   \
                        fprintf(stderr, "FUZZ_CHECK failed: %s (%s:%d)\n", #cond, __FILE__,      \
                                __LINE__);                                                       \
                        abort();                                                                 \
                }                                                                                \
        } while (0)

/* A copy of @n bytes at @p in a heap block of exactly @n bytes (1 if @n is 0), so that
 * AddressSanitizer sees any read past the end. Never NULL (aborts on ENOMEM). */
uint8_t *fuzz_exact_copy(const void *p, size_t n);

/* A NUL-terminated copy of the @n bytes at @p (malloc'd, exactly @n + 1 bytes; an
 * embedded NUL ends the C string early). Never NULL (aborts on ENOMEM). */
char *fuzz_cstring(const void *p, size_t n);

/* A private directory (mkdtemp under $TMPDIR, else /tmp) made on the first call and
 * removed with everything in it at exit. */
const char *fuzz_tmpdir(void);

/* Write @n bytes at @p to the file @name in fuzz_tmpdir() (replacing it); return its
 * path (static storage). Aborts on error. */
const char *fuzz_write_file(const char *name, const void *p, size_t n);

/* Remove every file in fuzz_tmpdir() (the state files and what a loader moved
 * aside). */
void fuzz_clean_tmpdir(void);
