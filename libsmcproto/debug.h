/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * The library's opt-in debug trace (internal to libsmcproto).
 *
 * The library never logs, except when the environment variable SMC_DEBUG is set to a
 * value other than empty or "0" (read once, with the other variables, at the first
 * socket: socket.c). Then every fallback or error decision of connect and accept, and
 * of the control connection to smcd under them, writes one line to stderr:
 *
 *   libsmcproto[PID.TID] MS: WHAT
 *
 * MS is CLOCK_MONOTONIC in milliseconds (comparable with other processes' lines).
 * Each line is one write(2) of at most 512 bytes, so the lines of concurrent threads
 * never interleave. Off, a trace point costs one load and one predicted branch.
 */

#include <stdbool.h>

/* Set once by socket.c's environment loading; read-only afterwards. */
extern bool smcproto_debug_on;

/* Format one line (printf(3) style, no trailing newline needed) and write it to
 * stderr. errno is kept. */
void smcproto_debug_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define smc_debug(...)                                                  \
        do {                                                            \
                if (__builtin_expect(smcproto_debug_on, 0))             \
                        smcproto_debug_log(__VA_ARGS__);                \
        } while (0)
