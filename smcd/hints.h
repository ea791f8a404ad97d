/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * smcd's side of the connection hints (libsmcproto/smc-hints.h: the page's layout and its
 * readers' rules): the file $RUNTIME_DIR/hints, written here only, read by every
 * client. Library-style: returns -errno, never logs. Not thread-safe (the event loop
 * only).
 */

#include <stdbool.h>
#include <stdint.h>

#include "ctl-proto.h"
#include "smc-hints.h"

typedef struct Hints Hints;

/* Make $@dir/hints anew (written as hints.tmp, then renamed over an older one), mode
 * 0644, all slots free. smcd keeps its own copy of the page and writes each change
 * with pwrite(2) (no mapping: a truncated file would kill smcd with SIGBUS); a write
 * that fails leaves readers an older or a torn slot, which they ignore. Returns 0 with
 * *@ret owned by the caller (hints_free), or -errno of open(2), pwrite(2), rename(2),
 * or -ENOMEM. */
int hints_create(const char *dir, Hints **ret);

/* Mark the file closed (a reader that still has it open then ignores it), remove it
 * if the path still names it, and free @h. NULL is fine. */
void hints_free(Hints *h);

/* Publish (or renew) a hint: connections to @dst (the address the clients connect to,
 * port != 0) for listener @listener_id fall back with @reason until @until_ns
 * (CLOCK_REALTIME ns, smc-hints.h). Takes the slot of the same destination, else a free
 * one or one that expired SMC_HINT_HOLD_NS ago or longer (by @now_ns), else the one that
 * expires first. If the path no longer names smcd's file, whole (removed, replaced or
 * truncated by hand), the page is first written anew (as hints_create()), so readers see
 * hints again; a failure there leaves the old file. Returns the slot index, or -EINVAL
 * for a destination without a port or family, or -EBADF for NULL @h. */
int hints_publish(Hints *h, const struct smc_ctl_addr *dst, uint64_t listener_id, uint32_t reason,
                  uint64_t until_ns, uint64_t now_ns);

/* Take back every hint (short_conn_rate set to 0): readers fall back no more. */
void hints_clear(Hints *h);

/* Take back the hints of listener @listener_id (it was closed). */
void hints_forget_listener(Hints *h, uint64_t listener_id);
