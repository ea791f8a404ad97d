/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stddef.h>

/* Read the whole regular file @path, at most @max bytes, into a NUL-terminated buffer
 * (*ret, owned by the caller; *ret_len bytes before the NUL if @ret_len is not NULL).
 * Opened O_NONBLOCK so that a FIFO or device cannot hang the caller. Returns 0,
 * -EINVAL (not a regular file), -EFBIG (larger than @max), -ENOMEM or -errno of
 * open/fstat/read. Never logs. */
int read_regular_file(const char *path, size_t max, char **ret, size_t *ret_len);

#include <json-c/json.h>
#include <sys/types.h>

/* Replace the file @path atomically with the @len bytes at @data: they go to a new
 * <path>.tmp-XXXXXX in the same directory (created with mode 0755 if missing, with
 * its parents), which gets @mode, is fsync'd and renamed over @path; then the directory is
 * fsync'd so that the rename survives a crash too. On any error before the rename the
 * temporary file is removed and @path is untouched. Returns 0 or -errno (-ENAMETOOLONG,
 * or of mkdir/mkostemp/write/fsync/rename; an -errno of the final directory fsync means
 * that the new content is in place but perhaps not yet durable). Never logs. */
int write_file_atomic(const char *path, const void *data, size_t len, mode_t mode);

/* Read the regular file @path (at most @max bytes) and parse it as exactly one JSON
 * value (whitespace around it allowed, nothing else) into *ret (the caller puts it).
 * Returns 0; -ENOENT if there is no such file; -EBADMSG if the content is unusable
 * (larger than @max, not valid JSON, trailing data), with a one-line reason in @err
 * (@errlen bytes); -ENOMEM; or another -errno if the file cannot be read (not a
 * regular file: -EINVAL). Never logs. */
int read_json_file(const char *path, size_t max, json_object **ret, char *err, size_t errlen);

/* Rename the unusable file @path to <path>.corrupt-<unix time> (where the caller
 * found it; <path>.corrupt-<unix time>.N if that exists: an earlier corrupt file is
 * never replaced), and write that name into @aside (@len bytes). Returns 0 or -errno. */
int move_aside_corrupt(const char *path, char *aside, size_t len);

/* Remove the temporary files write_file_atomic() leaves behind when the process is
 * killed between creating and renaming one (<path>.tmp-XXXXXX next to @path). Call it
 * only when no other writer of @path can be running. Returns how many were removed,
 * or -errno. Never logs. */
int remove_stale_tmp(const char *path);

/* Create the directory @path and its missing parents with @mode (existing ones are
 * fine). Returns 0 or -errno (-ENOMEM). Never logs. */
int mkdir_p(const char *path, mode_t mode);
