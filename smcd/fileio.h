/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stddef.h>

/* Read the whole regular file @path, at most @max bytes, into a NUL-terminated buffer
 * (*ret, owned by the caller; *ret_len bytes before the NUL if @ret_len is not NULL).
 * Opened O_NONBLOCK so that a FIFO or device cannot hang the caller. Returns 0,
 * -EINVAL (not a regular file), -EFBIG (larger than @max), -ENOMEM or -errno of
 * open/fstat/read. Never logs. */
int read_regular_file(const char *path, size_t max, char **ret, size_t *ret_len);
