/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * The TCP fallback connections smcd lists (smcctl connections --mode tcp), as smcss
 * lists the kernel's fallen-back AF_SMC sockets with their reason.
 *
 * Where they come from: a TCP fallback is a plain kernel socket that smcd never
 * holds. The library sends a FALLBACK notice (ctl-proto.h) once the TCP connect of a
 * fallen-back CONNECT is under way (client role, the reason smcd gave), and once an
 * SMC listener accepted a plain TCP connection (server role). smcd looks the socket
 * up in the kernel by its exact 4-tuple (sockdiag.h) and keeps it by the kernel's
 * socket cookie, which no other socket has during this boot (so a later socket with
 * the same 4-tuple is never taken for it). A notice about a socket that is already
 * gone is ignored (the connection was that short); one about a socket of another uid
 * is refused with ERROR -EPERM (counted in handshake_errors) unless the client is
 * root. Fallbacks decided without smcd (it was not running) cannot be known.
 *
 * Liveness and state come from the kernel: at every List, and before evicting for
 * room (at most once per FALLBACK_SWEEP_USEC), entries are looked up again (one
 * request each while there are at most FALLBACK_EXACT_MAX, else one dump per
 * address family) and dropped when the socket is gone, in TIME_WAIT or CLOSE, or no
 * process holds it any more (its inode is 0: the application closed it and the
 * kernel finishes the close alone). An entry is also freed with its client (the
 * control connection closed: the process exited or was killed).
 *
 * Bounds: at most config.max_fallback_conns entries (default FALLBACK_MAX_DEFAULT),
 * and a quarter of that per client, so that one client's churn cannot push out
 * the others' entries; a new entry beyond a bound evicts the oldest one (of the
 * client, or of all), counted in `evicted`. About 200 bytes per entry (13 MiB
 * at the default bound).
 *
 * A server row's reason is the one of the client row of the same connection if
 * smcd knows it (both ends on this host, the client told smcd: as the stats count
 * server fallbacks), else SMC_CLC_DECL_PEERNOSMC (the peer did not ask smcd: a
 * remote peer, or a local one without libsmcproto).
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ctl-proto.h"
#include "hashmap.h"
#include "sockdiag.h"

#define FALLBACK_MAX_DEFAULT 65536u
#define FALLBACK_MAX_LIMIT (1u << 20)
#define FALLBACK_EXACT_MAX 64u              /* up to this many: lookups, beyond: dumps */
#define FALLBACK_SWEEP_USEC 1000000u        /* a full table is re-checked at most this often */

typedef struct Manager Manager;
typedef struct Client Client;
typedef struct FallbackConn FallbackConn;
typedef struct FallbackTable FallbackTable;

/* A client's fallback connections, newest at the head (Client.fallbacks). */
typedef struct FallbackQueue {
        FallbackConn *head, *tail;
        size_t n;
} FallbackQueue;

struct FallbackConn {
        uint64_t cookie;           /* the kernel's socket cookie: the table key and the
                                    * row's id (ss -e shows it as sk:) */
        Client *owner;
        uint32_t role;             /* SMC_CTL_ROLE_* */
        uint32_t reason;           /* SMC_CLC_DECL_*; a server's is set at each List */
        struct smc_ctl_addr local, peer;
        /* the kernel's view at the last look (SockDiagInfo) */
        uint8_t state;             /* TCP_* */
        bool have_mem, have_bytes;
        uint32_t sndbuf, rcvbuf;
        uint64_t bytes_acked, bytes_received;
        uint64_t seen;             /* refresh generation that found it */
        FallbackConn *age_next, *age_prev;       /* FallbackTable, newest first */
        FallbackConn *client_next, *client_prev; /* owner->fallbacks, newest first */
};

struct FallbackTable {
        U64Map *by_cookie;         /* cookie -> FallbackConn */
        FallbackConn *newest, *oldest;
        size_t n, n_family[2];     /* entries; of them AF_INET, AF_INET6 */
        size_t max, max_per_client;
        SockDiag *diag;            /* opened at the first notice */
        bool diag_failed_logged;
        uint64_t generation;
        uint64_t last_sweep_usec;
        uint64_t evicted;          /* dropped for room while their socket may live */
        uint64_t gone_at_notice;   /* notices about sockets already closed */
};

/* A table of at most @max entries (0: FALLBACK_MAX_DEFAULT). Returns 0 or -ENOMEM. */
int fallback_table_new(size_t max, FallbackTable **ret);

/* Free the table and its entries; the sock_diag socket is closed. Clients must have
 * been freed first (or never had entries). NULL is ok. Returns NULL. */
FallbackTable *fallback_table_free(FallbackTable *t);

/* Handle a decoded FALLBACK notice of @c (no reply but ERROR -EPERM for a socket of
 * another uid). Returns 0, or the negative errno of a failed send (the client is
 * then disconnected, as for any reply). */
int client_handle_fallback(Client *c, const struct smc_ctl_fallback *req);

/* Forget every entry of @c (it disconnected or smcd exits). */
void fallback_client_gone(Manager *m, Client *c);

/* Look every entry up in the kernel again: drop those that are gone, store the state
 * (and with @ext the buffer sizes and byte counters) of the others, and set the
 * servers' reasons. Returns 0, or -errno if the kernel could not be asked (nothing is
 * dropped then, and the stored views stay). */
int fallback_refresh(Manager *m, bool ext);
