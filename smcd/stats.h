/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * All counters of smcd in one place (the management issue exposes them over D-Bus;
 * today SIGUSR1 writes them to $RUNTIME_DIR/stats.json). Only the main loop thread
 * updates them; the pool keeps its own counters (struct smc_pool_stats), which are
 * written next to these under "pool".
 *
 * JSON layout (key names are stable):
 *   {"smcd": {"conns_client", "conns_server", "conns_client_current",
 *             "conns_server_current", "conns_current", "conns_closed", "conns_aborted",
 *             "fallback": {"SMC_CLC_DECL_...": n, ...}, "fallback_total",
 *             "handshake_errors", "close_unknown", "bytes_tx", "bytes_rx", "clients",
 *             "clients_total", "clients_rejected", "clients_over_limit", "listeners",
 *             "listeners_total"},
 *    "pool": {"alloc", "reuse", "free", "clear", "bytes_cleared", "clear_ns", "in_use",
 *             "in_use_by_class": [7], "free_count", "free_count_by_class": [7],
 *             "pending_clear", "bytes_total"},
 *    "seq": n (incremented on each write), "time_usec": CLOCK_REALTIME of the write}
 */

#include <json-c/json.h>
#include <stdint.h>

#include "pool.h"

#define SMCD_STATS_MAX_FALLBACK 32

struct smcd_fallback_count {
        uint32_t code; /* SMC_CLC_DECL_* */
        uint64_t count;
};

struct smcd_stats {
        /* SMC-D connections set up, counted once per side: "client" is the connecting
         * endpoint, "server" the accepted one. A local connection counts one each. */
        uint64_t conns_client;         /* total */
        uint64_t conns_server;         /* total */
        uint64_t conns_client_current; /* connecting endpoints not yet closed */
        uint64_t conns_server_current; /* accepted endpoints not yet closed */
        uint64_t conns_current;        /* connections whose buffers are still held */
        uint64_t conns_closed;         /* both ends closed, neither aborted */
        uint64_t conns_aborted;        /* both ends closed, at least one aborted / died */

        /* CONNECT requests answered with TCP fallback, by SMC_CLC_DECL_* reason */
        uint64_t fallback_total;
        struct smcd_fallback_count fallback[SMCD_STATS_MAX_FALLBACK];
        unsigned n_fallback;

        uint64_t handshake_errors; /* malformed or out-of-order control messages */
        uint64_t close_unknown;    /* CLOSE of an id unknown to smcd, or of an endpoint of
                                    * another uid (answered ERROR -ENOENT) */

        /* bytes moved by finished connections, read from the final producer cursors
         * (wrap * size + count, so modulo 65536 rings): tx = written by the connecting
         * side, rx = written to the connecting side */
        uint64_t bytes_tx;
        uint64_t bytes_rx;

        uint64_t clients;          /* control connections now */
        uint64_t clients_total;    /* accepted ever */
        uint64_t clients_rejected; /* refused by the allow list */
        uint64_t clients_over_limit; /* refused: too many control connections (per uid
                                      * or in all) */
        uint64_t listeners;        /* SMC listeners now */
        uint64_t listeners_total;

        uint64_t seq; /* number of stats.json writes */
};

/* Count one fallback with reason @code. */
void smcd_stats_count_fallback(struct smcd_stats *s, uint32_t code);

/* Zero the counters of @s (totals, fallbacks, errors, bytes); the gauges of what
 * exists now (conns_*_current, conns_current, clients, listeners) and seq stay. The
 * pool's counters are not touched. */
void smcd_stats_reset(struct smcd_stats *s);

/* @s and @pool (may be NULL) as a new JSON object in the layout above (the caller
 * owns the reference; json_object_put() it). Does not change s->seq. */
json_object *smcd_stats_to_json(const struct smcd_stats *s, const struct smc_pool_stats *pool);

/* Write @s and @pool (may be NULL) as JSON to @path atomically: a temporary file in
 * the same directory, fsync, rename. Increments s->seq. Returns 0 or -errno. */
int smcd_stats_write_json(struct smcd_stats *s, const struct smc_pool_stats *pool, const char *path);
