/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Internal interface of socket.c for the smcrun preload (preload.c). */

#include <stdbool.h>

/* True if @fd is a socket made by smc_socket() or smc_accept*() of AF_INET/AF_INET6
 * SOCK_STREAM, in any mode (not connected yet, listener, SMC-D, TCP fallback).
 * Lock-free; callable from any thread and from signal handlers. */
bool smc_fd_managed(int fd);

/* Forget the state of @fd without closing anything (the descriptor number was
 * closed or replaced behind the library's back, e.g. by dup2() onto it or a close
 * done by other means). Frees the state; an SMC-D connection is closed as by
 * smc_close() except that @fd itself is not closed. No-op if not managed. */
void smc_fd_forget(int fd);
