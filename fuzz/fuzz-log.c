/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * smcd/log.h for the fuzz targets in place of smcd/log.c: every line is formatted
 * (at LOG_DEBUG, so that all the loaders' messages and their arguments are built and
 * checked by the sanitizers) but not written, so that millions of runs do not flood
 * the fuzzer's output. Set SMCD_FUZZ_LOG=1 to see the lines on stderr.
 */

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include "log.h"

static int log_max_level = LOG_DEBUG;

void log_set_max_level(int level) {
        log_max_level = level;
}

int log_get_max_level(void) {
        return log_max_level;
}

int log_internal(int level, int error, const char *format, ...) {
        static int show = -1;
        char buf[1024];
        int saved = errno, n;
        va_list ap;

        if (show < 0)
                show = getenv("SMCD_FUZZ_LOG") != NULL;
        n = snprintf(buf, sizeof(buf), "<%d>smcd: ", level);
        errno = abs(error);
        va_start(ap, format);
        (void) vsnprintf(buf + n, sizeof(buf) - (size_t) n - 1, format, ap);
        va_end(ap);
        if (show) {
                size_t l = strlen(buf);
                buf[l++] = '\n';
                (void) !write(STDERR_FILENO, buf, l);
        }
        errno = saved;
        return -abs(error);
}
