/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * The client side of the smcd control connection (internal to libsmcproto).
 *
 * One connection per process, to $SMCD_RUNTIME_DIR/smcd.sock (see ctl-proto.h),
 * opened lazily by the first request and HELLO exchanged (which negotiates the
 * protocol version: ctl-proto.h; every request is re-stamped for it, and a reply
 * of another version breaks the connection). Requests of many threads may be under
 * way at once: a process-wide mutex is held to send, not while waiting; each reply is
 * handed to the thread waiting for its seq (a message nobody waits for, e.g. the
 * ERROR answer to an earlier fire-and-forget CLOSE, is discarded with its fds). A
 * request made while another thread's HELLO is under way waits for that HELLO's
 * outcome first. Every reply wait is bounded (SMC_CTL_CLIENT_TIMEOUT_MS unless said).
 *
 * When smcd is unreachable, or the connection breaks (EOF, send error, a message
 * that does not decode), the connection is dropped and the request fails with
 * -ENOTCONN; the next request tries to connect again (a failed connect to a unix
 * socket costs microseconds). When smcd does not accept, or does not answer HELLO or
 * a request (of a timeout up to 10 s: not an SMCR handshake, which waits for a peer)
 * within its timeout (stopped, hung), no CONNECT or REREG (which have a way on
 * without smcd: TCP, a later try), nor the connect and HELLO for them, is tried for a
 * hold-off of 1 s, doubling with every such failure up to 16 s, and at least as long
 * as the wait that failed, ended by the first answer: requests fail at once with -ENOTCONN meanwhile (a connect() falls back to
 * TCP without waiting). After fork() the child notices the new pid and opens
 * its own connection (closing its inherited copy of the parent's).
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

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

/* The same, waiting up to @timeout_ms for the reply (the SMCR handshake: CLC and
 * LLC round trips to another host). The control connection is held meanwhile. */
int smc_ctl_client_call_timeout(union smc_ctl_msg *req, const int *fds, size_t nfds, union smc_ctl_msg *ret_reply,
                                int *ret_fds, unsigned timeout_ms);

/* The same, and the instance (HELLO_REPLY.instance) of the smcd that answered into
 * @ret_instance (may be NULL): 0 on an error, or when that smcd is older than REREG.
 * Unlike smc_ctl_client_instance() before the call, also right for a process's first
 * request (no control connection yet) and for one that reconnected on the way. */
int smc_ctl_client_call_instance(union smc_ctl_msg *req, const int *fds, size_t nfds, union smc_ctl_msg *ret_reply,
                                 int *ret_fds, unsigned timeout_ms, uint32_t *ret_instance);

/* The protocol version of the established control connection, 0 if there is none. */
uint16_t smc_ctl_client_version(void);

/* The instance (HELLO_REPLY.instance) of the smcd the established control
 * connection goes to: 0 if there is none, or if that smcd is older than REREG.
 * Another value than a connection's was set up under means smcd restarted since. */
uint32_t smc_ctl_client_instance(void);

/* The same, connecting to smcd first if there is no control connection (as a
 * request would), and finding out first whether the one there is was hung up by smcd
 * (1 poll(2)): waits up to @timeout_ms (ms) for a HELLO. 0 if smcd cannot be reached
 * in that time. */
uint32_t smc_ctl_client_ensure_instance(unsigned timeout_ms);

/* The credentials of the smcd at the other end of the control connection (its
 * SO_PEERCRED), connecting first if there is none (waiting up to @timeout_ms, ms).
 * Returns 0 with smcd's pid in *@ret_pid and its uid in *@ret_uid (either may be
 * NULL), or -ENOTCONN if smcd cannot be reached (both then 0). The pid is 0 when smcd
 * runs outside this process's pid namespace (a container's): the doorbell pairs of
 * SMC-D connections then say pid 0 too, as any socket made outside the namespace, so
 * smcd must be asked which are its own; otherwise they name smcd's pid, and
 * smc_fds_received() asks smcd only about such descriptors. */
int smc_ctl_client_daemon(unsigned timeout_ms, pid_t *ret_pid, uid_t *ret_uid);

/* Was @pid one of the last smcd processes that served the runtime directory (the
 * pids in its instance file, ctl-proto.h SMC_CTL_INSTANCE_PIDS_OFF)? false if not, or
 * if the file cannot be read. One open and pread(2), no smcd round trip. */
bool smc_ctl_client_was_daemon(pid_t pid);

/* The path of file @name in smcd's runtime directory (beside its socket) into @path
 * (@size bytes). Returns 0, or -ENAMETOOLONG when it does not fit. */
int smc_ctl_client_file_path(const char *name, char *path, size_t size);

/* The instance smcd wrote into "instance" in its runtime directory (4 bytes, host
 * order, at offset 0; smcd rewrites the file in place at every start), or 0 if there
 * is none. An open, a pread and a close: for an occasional check, not per call. */
uint32_t smc_ctl_client_instance_file(void);

/* Send @req (seq assigned here) without waiting for a reply (CLOSE). Returns 0,
 * -ENOTCONN, or another negative errno from sending. */
int smc_ctl_client_send(union smc_ctl_msg *req);

/* Send @req (seq assigned here) without waiting for a reply, only over an established
 * control connection to smcd instance @instance (just checked with
 * smc_ctl_client_ensure_instance(): no second poll(2), no connect, no second try on
 * another connection, whose smcd would not know the endpoint @req names). Returns 0,
 * -ENOTCONN (no such connection, or it broke: it is dropped), -EINVAL (@instance 0),
 * another negative errno from encoding. */
int smc_ctl_client_send_instance(union smc_ctl_msg *req, uint32_t instance);

/* Send the one-way notice @req (FALLBACK; seq assigned here) if this process has an
 * established control connection of protocol version @min_version or later. Never
 * connects, except to replace a connection inherited over fork() (as the child's
 * first request would); never waits for room (MSG_DONTWAIT) nor for a reply. The lock
 * is the one every request takes (a CONNECT of the same thread has just held it).
 * Returns 0, or -ENOTCONN (no connection, or one of an older version), -EAGAIN (the
 * socket is full: the notice is dropped, the connection kept), another negative errno
 * from sending (the connection is dropped if it broke). */
int smc_ctl_client_notify(union smc_ctl_msg *req, uint16_t min_version);

/* As smc_ctl_client_notify(), but connects first when there is no control connection
 * (a notice about a decision the library made without asking smcd). Errors as there,
 * and those of connecting (-ENOENT, -ECONNREFUSED ... : smcd not running). */
int smc_ctl_client_notify_connect(union smc_ctl_msg *req, uint16_t min_version);

/* The control connection's descriptors at this moment (the socket, and one being
 * dropped while another thread reads it), for close_range() in the shim, which must
 * leave them open. Returns how many it stored in @ret (0..2). Takes the lock. */
size_t smc_ctl_client_fds(int ret[2]);

/* The phases of fork(2) as pthread_atfork(3) names them, for a process copy made
 * past the C library (a clone without CLONE_VM: smc_fork_emulate(), socket.c). */
enum { SMC_FORK_PREPARE, SMC_FORK_PARENT, SMC_FORK_CHILD };

/* This file's fork handlers (registered with pthread_atfork() too), by hand. */
void smc_ctl_client_fork(int phase);

/* Drop the connection (e.g. in tests). Safe to call at any time. */
void smc_ctl_client_reset(void);
