/* SPDX-License-Identifier: LGPL-2.1-or-later */

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

/* The one piece of process-wide state smcd has: the verbosity. */
static int log_max_level = LOG_INFO;

void log_set_max_level(int level) {
        log_max_level = level;
}

int log_get_max_level(void) {
        return log_max_level;
}

int log_internal(int level, int error, const char *format, ...) {
        char buf[1024];
        int saved = errno, n, k;
        va_list ap;

        n = snprintf(buf, sizeof(buf), "<%d>smcd: ", level);
        errno = abs(error);
        va_start(ap, format);
        k = vsnprintf(buf + n, sizeof(buf) - n - 1, format, ap);
        va_end(ap);
        if (k < 0)
                k = 0;
        n += k;
        if ((size_t) n > sizeof(buf) - 2)
                n = sizeof(buf) - 2;
        buf[n++] = '\n';
        /* one write, so that lines of concurrent writers do not interleave */
        (void) !write(STDERR_FILENO, buf, n);
        errno = saved;
        return -abs(error);
}
