/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * smcd's logging: one line per message on stderr with an sd-daemon priority prefix
 * ("<6>smcd: ..."), which journald turns into the priority. Debug messages only at
 * log level LOG_DEBUG (-v). The log_*_errno() forms return -abs(error) so that
 * "return log_error_errno(r, ...);" logs and fails in one line, and set errno for %m.
 */

#include <stdlib.h>
#include <syslog.h>

void log_set_max_level(int level);
int log_get_max_level(void);

/* Write one line at @level. Returns -abs(@error) (0 if @error is 0). */
int log_internal(int level, int error, const char *format, ...) __attribute__((format(printf, 3, 4)));

#define log_full_errno(level, error, ...)                                       \
        ({                                                                      \
                int _level = (level), _e = (error);                             \
                _level <= log_get_max_level() ? log_internal(_level, _e, __VA_ARGS__) \
                                              : -abs(_e);                      \
        })

#define log_debug(...) log_full_errno(LOG_DEBUG, 0, __VA_ARGS__)
#define log_info(...) log_full_errno(LOG_INFO, 0, __VA_ARGS__)
#define log_notice(...) log_full_errno(LOG_NOTICE, 0, __VA_ARGS__)
#define log_warning(...) log_full_errno(LOG_WARNING, 0, __VA_ARGS__)
#define log_error(...) log_full_errno(LOG_ERR, 0, __VA_ARGS__)

#define log_debug_errno(e, ...) log_full_errno(LOG_DEBUG, e, __VA_ARGS__)
#define log_info_errno(e, ...) log_full_errno(LOG_INFO, e, __VA_ARGS__)
#define log_warning_errno(e, ...) log_full_errno(LOG_WARNING, e, __VA_ARGS__)
#define log_error_errno(e, ...) log_full_errno(LOG_ERR, e, __VA_ARGS__)
