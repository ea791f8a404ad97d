/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * The client side of the smcd control connection (internal to libsmcproto).
 *
 * One connection per process, to $SMCD_RUNTIME_DIR/smcd.sock (see ctl-proto.h),
 * opened lazily by the first request and HELLO exchanged (which negotiates the
 * protocol version: ctl-proto.h; every request is re-stamped for it, and a reply
 * of another version breaks the connection). Requests are serialised
 * by a process-wide mutex; the reply is matched by seq (any other message read
 * meanwhile, e.g. the ERROR answer to an earlier fire-and-forget CLOSE, is
 * discarded with its fds). Every reply wait is bounded by SMC_CTL_CLIENT_TIMEOUT_MS.
 *
 * When smcd is unreachable, or the connection breaks (EOF, send error, a message
 * that does not decode), the connection is dropped and the request fails with
 * -ENOTCONN; the next request tries to connect again (a failed connect to a unix
 * socket costs microseconds). After fork() the child notices the new pid and opens
 * its own connection (closing its inherited copy of the parent's).
 */

#include <stddef.h>
#include <stdint.h>

#include "ctl-proto.h"

#define SMC_CTL_CLIENT_TIMEOUT_MS 2000

/* Send @req (built with smc_ctl_init(); its seq and version are assigned here) with
 * @nfds fds (still owned by the caller) and wait for the reply with the same seq.
 * On success returns the number of fds received (>= 0) into @ret_fds (room for
 * SMC_CTL_MAX_FDS; the caller owns them, they are O_CLOEXEC) and the reply in
 * @ret_reply; an ERROR reply is a success here: check ret_reply->hdr.type.
 * Errors: -ENOTCONN (smcd unreachable or the connection broke), -ETIMEDOUT (no
 * reply within SMC_CTL_CLIENT_TIMEOUT_MS; the connection is kept), -EINVAL. */
int smc_ctl_client_call(union smc_ctl_msg *req, const int *fds, size_t nfds, union smc_ctl_msg *ret_reply,
                        int *ret_fds);

/* Send @req (seq assigned here) without waiting for a reply (CLOSE). Returns 0,
 * -ENOTCONN, or another negative errno from sending. */
int smc_ctl_client_send(union smc_ctl_msg *req);

/* Drop the connection (e.g. in tests). Safe to call at any time. */
void smc_ctl_client_reset(void);
