/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * All counters of smcd in one place, exposed as JSON by org.smcd.smcd1.Stats.Get
 * (stats-bus.c, `smcctl stats`) and written to $RUNTIME_DIR/stats.json on SIGUSR1.
 * Only the main loop thread updates them; the pool keeps its own counters (struct
 * smc_pool_stats), which are written next to these under "pool".
 *
 * JSON layout. Key names and meanings are stable: keys are only ever added. All
 * numbers are unsigned 64-bit integers; "total" counters count since smcd started or
 * since the last reset (Stats.Reset, `smcctl stats reset`), gauges ("current", "now")
 * describe the present and are never reset.
 *
 *   "smcd": SMC-D connections (loopback ISM), counted by smcd, which sets up each one:
 *     "conns_client", "conns_server"   connections set up (total), counted once per
 *                                      side: client = the connecting endpoint, server =
 *                                      the accepted one (a local connection counts one
 *                                      of each)
 *     "conns_client_current", "conns_server_current"  endpoints not yet closed (gauges)
 *     "conns_current"        connections whose buffers are still held (gauge)
 *     "conns_closed"         connections ended, both ends closed, neither aborted
 *     "conns_aborted"        connections ended with an abort (RST) or a dead owner
 *     "handshake_errors"     malformed or out-of-order control messages (any client)
 *     "bytes_tx", "bytes_rx" bytes written by the connecting side / written to it,
 *                            from the DMB headers' prod_bytes, of ended connections
 *     "msgs_tx", "msgs_rx"   send calls that moved data / recv calls (without
 *                            MSG_PEEK) that returned data, of both endpoints, of ended
 *                            connections (dmb.h "Counters": the clients count them,
 *                            smcd adds them up when a connection ends)
 *     "cork_flushes"         batches held back by TCP_CORK / MSG_MORE that went out
 *                            (cork off, a send without MSG_MORE, TCP_NODELAY, the
 *                            autocork size, a full ring, shutdown, close), both ends
 *     "sendfile_calls", "sendfile_bytes"  sendfile calls over SMC-D and their bytes
 *     "inline_sends"         always 0: inline sends are an SMC-R (RDMA) send mode
 *     "fallback": {"SMC_CLC_DECL_...": n}  CONNECTs answered with TCP, by reason
 *                            (a code without a name as "0x%08x"); see "fallback"
 *     "fallback_total"       CONNECTs answered with TCP (= fallback.client)
 *     "short_conn_hints"     hints published (tunable short_conn_rate, smcd-tunables(5)):
 *                            a listener's SMC-D connections were short-lived at a high
 *                            rate, so for a second the clients connect to it over TCP
 *                            (SMCD_DECL_SHORTCONN, counted in "fallback" as the clients
 *                            report them, in batches)
 *     "close_unknown"        CLOSE of an unknown id or another uid's endpoint
 *     "rereg_total"          endpoints set up by an earlier smcd (before a restart)
 *                            that their processes re-registered (REREG, smcd(8)
 *                            RESTARTS); they count in the "current" gauges and, when
 *                            they end, in conns_closed / conns_aborted, not in the
 *                            bytes and message counters (this smcd cannot read them)
 *     "restored_loaded"      endpoints this smcd read at its start from the endpoint
 *                            table an earlier one left, whose process was alive:
 *                            listed and counted at once, before any REREG (their
 *                            REREG then counts in rereg_total)
 *     "restored_swept"       of the loaded ones, those ended by their process's
 *                            REREG_DONE: it re-registered all it holds, not them
 *                            (closed while no smcd heard it)
 *     "restored_current"     restored endpoints (loaded or re-registered) not yet
 *                            closed (gauge)
 *     "clients", "clients_total", "clients_rejected", "clients_over_limit"
 *                            control connections now (gauge) / accepted / refused by
 *                            the allow list / refused by the per-uid or total limit
 *     "listeners", "listeners_total"  SMC listeners now (gauge) / registered
 *     "conns_netns"          of conns_client, those between two network namespaces
 *                            (smcd --cross-netns: set up after a CLC handshake on
 *                            the TCP connection; smcd(8), Network namespaces)
 *     "conns_requeued"       connections queued to a listener when it was closed,
 *                            moved to another listener of its SO_REUSEPORT group
 *                            (REQUEUE; smcd(8), SO_REUSEPORT hand-over)
 *   Counters of connections that are still open are added when they end, so bytes,
 *   messages and flushes lag the live figures of `smcctl connections`; a reset
 *   takes the open connections' counters as their new zero.
 *
 *   "smcr": SMC-R connections (smcr.h), with the keys of "smcd" from "conns_client" to
 *           "inline_sends" (bytes and inline sends counted live by smcd, which is on
 *           the SMC-R data path; messages, cork flushes and sendfile from the buffer
 *           headers when a connection ends), and:
 *     "cdc_sends"            CDC messages posted (inline_sends of them with IBV_SEND_INLINE,
 *                            the "inline" tunable, seed 002)
 *     "llc_sends", "rdma_writes"  LLC messages posted, RDMA WRITE work requests posted
 *     "link_groups", "link_groups_total", "links_failed"  now (gauge) / created / lost
 *     "links_added", "failovers"  links added to a group (ADD LINK) / connections moved
 *                            to another link of their group when theirs was lost
 *     "handshakes_ok", "handshakes_declined", "handshakes_failed"  SMCR requests ended
 *                            with SMC-R / a TCP fallback (DECLINE sent or received, or
 *                            no SMC peer) / an error (connection broken, timeout)
 *     "decline_sent", "decline_rcvd"  CLC DECLINE messages
 *
 *   "fallback": TCP fallbacks that smcd decided (a CONNECT answered with TCP):
 *     "client"     CONNECTs answered with TCP
 *     "server"     of those, the ones whose destination was a local SMC listener,
 *                  which then accepts the connection over TCP (limits, accept queue
 *                  full, policy, handshake rate, no memory)
 *     "by_reason": [{"name": "SMC_CLC_DECL_PEERNOSMC", "code": "0x03010000",
 *                   "count": n (client), "server": n}, ...] sorted by code, only
 *                  reasons that occurred
 *     Fallbacks smcd never sees are not counted: a library that cannot reach smcd
 *     (NOSMCDDEV) or refuses an option (OPTUNSUPP) connects over TCP by itself, and a
 *     TCP connection that a listener accepts from a peer that did not ask smcd is not
 *     smcd's to count.
 *
 *   "pool": the DMB buffer pool (pool.h):
 *     "alloc", "reuse", "free"   buffers created / acquires served from a free list /
 *                                buffers destroyed (totals)
 *     "clear", "bytes_cleared", "clear_ns"  buffers zeroed, bytes zeroed, ns spent
 *     "downgrade"                acquires that got a smaller class than the connection
 *                                asked for (per-uid buffer limit or pool size), as
 *                                the kernel's RMB downsizing (total)
 *     "in_use", "in_use_by_class": [7]   buffers acquired now, per class 16K..1M
 *     "bytes_in_use"             memfd bytes of the buffers in use (header + ring)
 *     "free_count", "free_count_by_class": [7]  buffers on free lists now
 *     "pending_clear"            released, not yet cleared (gauge)
 *     "bytes_total"              memfd bytes that exist (gauge)
 *     "buf_clear"                "release" or "create": the clearing mode now
 *
 *   "histograms": {"connect": H, "buffer_acquire": H}, each
 *     H = {"unit": "ns", "count": n, "sum": ns, "buckets": [{"le": bound, "count": n},
 *          ... SMC_HIST_BUCKETS entries]}: log2 buckets (hist.h), bucket i counts
 *          samples in (le of bucket i-1, le]; le = 1, 2, 4 .. 2^30 ns, the last
 *          le = 18446744073709551615 (no bound); count = the sum of the buckets.
 *     "connect"         smcd's time for one CONNECT request: from the decoded
 *                       request to the reply (CONNECT_REPLY, SMC-D or TCP fallback,
 *                       or an ERROR) handed to the kernel, so it includes the listener
 *                       lookup, the limits, both buffer acquires, the socketpairs and
 *                       the NEW_CONN to the listener, but not the client's time to
 *                       send or read; one sample per answered CONNECT
 *     "buffer_acquire"  the pool's time for one successful buffer acquire (two per
 *                       SMC-D connection): a pop from a free list, or a memfd creation
 *
 *   "seq": stats.json writes, "time_usec": CLOCK_REALTIME of this snapshot,
 *   "reset_usec": CLOCK_REALTIME of the last reset (0: never)
 */

#include <json-c/json.h>
#include <stdint.h>

#include "hist.h"
#include "pool.h"

#define SMCD_STATS_MAX_FALLBACK 32

struct smcd_fallback_count {
        uint32_t code; /* SMC_CLC_DECL_* */
        uint64_t count;  /* CONNECTs answered with TCP for this reason */
        uint64_t server; /* of those, to a local SMC listener */
};

/* The counters one DMB header carries (dmb.h, "Counters"). */
struct smcd_dmb_counters {
        uint64_t prod_bytes, prod_msgs, cons_msgs, cork_flushes, sendfile_calls, sendfile_bytes, inline_sends;
};

/* SMC-R (smcr.h): its connections and link groups, the "smcr" section. */
struct smcd_smcr_stats {
        uint64_t conns_client, conns_server;                 /* set up, per side (total) */
        uint64_t conns_client_current, conns_server_current; /* endpoints not yet closed */
        uint64_t conns_current;                              /* connections not yet freed */
        uint64_t conns_closed, conns_aborted;                /* freed, orderly / aborted */
        uint64_t bytes_tx, bytes_rx;          /* bytes RDMA-written to peers / received */
        uint64_t msgs_tx, msgs_rx, cork_flushes, sendfile_calls, sendfile_bytes; /* from the
                                               * buffer headers (dmb.h), of ended connections */
        uint64_t cdc_sends, inline_sends;     /* CDC messages posted; of them inline */
        uint64_t llc_sends, rdma_writes;
        uint64_t lgrs, lgrs_total, links_failed; /* link groups now (gauge) / ever; links lost */
        uint64_t links_added, failovers;      /* second links made (ADD LINK); connections
                                               * moved to another link of their group */
        uint64_t handshakes_ok, handshakes_declined, handshakes_failed;
        uint64_t decline_sent, decline_rcvd;
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
        uint64_t fallback_server; /* ... whose destination was a local SMC listener */
        struct smcd_fallback_count fallback[SMCD_STATS_MAX_FALLBACK];
        unsigned n_fallback;

        uint64_t handshake_errors; /* malformed or out-of-order control messages */
        uint64_t short_conn_hints; /* hints published for destinations whose SMC-D
                                    * connections were short-lived (hints.h) */
        uint64_t close_unknown;    /* CLOSE of an id unknown to smcd, or of an endpoint of
                                    * another uid (answered ERROR -ENOENT) */
        uint64_t rereg_total;      /* endpoints of an earlier smcd re-registered (REREG) */
        uint64_t restored_loaded;  /* endpoints read from the endpoint table at start */
        uint64_t restored_swept;   /* ... of them ended by their process's REREG_DONE */
        uint64_t restored_current; /* restored endpoints not yet closed (gauge) */

        /* bytes moved by finished connections, read from the final producer cursors
         * (wrap * size + count, so modulo 65536 rings): tx = written by the connecting
         * side, rx = written to the connecting side */
        uint64_t bytes_tx;
        uint64_t bytes_rx;
        /* ... and the other DMB counters of both ends (the JSON keys of the same names) */
        uint64_t msgs_tx;
        uint64_t msgs_rx;
        uint64_t cork_flushes;
        uint64_t sendfile_calls;
        uint64_t sendfile_bytes;
        uint64_t inline_sends;

        struct smc_hist connect; /* time to answer a CONNECT, ns */

        uint64_t clients;          /* control connections now */
        uint64_t clients_total;    /* accepted ever */
        uint64_t clients_rejected; /* refused by the allow list */
        uint64_t clients_over_limit; /* refused: too many control connections (per uid
                                      * or in all) */
        uint64_t listeners;        /* SMC listeners now */
        uint64_t listeners_total;
        uint64_t conns_netns;      /* SMC-D connections between two network namespaces
                                    * (--cross-netns: CLC on the TCP connection) */
        uint64_t conns_requeued;   /* SMC-D connections queued to a listener that was
                                    * closed, moved to another of its SO_REUSEPORT
                                    * group (REQUEUE) */
        uint64_t spare_pairs;      /* doorbell socketpairs made ahead, now (two fds
                                    * each; manager_take_pair()) */

        uint64_t seq; /* number of stats.json writes */
        uint64_t reset_usec; /* CLOCK_REALTIME of the last reset, 0 = never */

        struct smcd_smcr_stats smcr;
};

/* Count one fallback (a CONNECT answered with TCP) with reason @code. */
void smcd_stats_count_fallback(struct smcd_stats *s, uint32_t code);
/* Count @n client fallbacks of @code at once (FALLBACK_COUNT, ctl-proto.h). */
void smcd_stats_count_fallback_n(struct smcd_stats *s, uint32_t code, uint64_t n);
/* Count @n connections accepted over TCP on an SMC listener for @code that no CONNECT
 * told smcd of (FALLBACK_COUNT role server): in "server" only. */
void smcd_stats_count_server_fallback_n(struct smcd_stats *s, uint32_t code, uint64_t n);

/* Count that the fallback just counted with smcd_stats_count_fallback(@code) had a
 * local SMC listener as its destination (a server-side fallback too). */
void smcd_stats_count_server_fallback(struct smcd_stats *s, uint32_t code);

/* The counters in the DMB header at @dmb_base (relaxed loads; the writers may still
 * be running), minus @base if not NULL (the values at the last reset). */
void smcd_dmb_counters_read(const void *dmb_base, const struct smcd_dmb_counters *base,
                            struct smcd_dmb_counters *ret);

/* Add an ended SMC-D connection's DMB counters: @client_rx from the connecting
 * endpoint's DMB (written by the server), @server_rx from the accepted one's. */
void smcd_stats_count_ended(struct smcd_stats *s, const struct smcd_dmb_counters *client_rx,
                            const struct smcd_dmb_counters *server_rx);

/* Zero the counters of @s (totals, fallbacks, errors, bytes, messages, the connect
 * histogram) and note the time; the gauges of what exists now (conns_*_current,
 * conns_current, clients, listeners) and seq stay. The pool's counters are not
 * touched (smc_pool_reset_stats), nor open connections' bases (the caller's). */
void smcd_stats_reset(struct smcd_stats *s);

/* @s and @pool (may be NULL) as a new JSON object in the layout above (the caller
 * owns the reference; json_object_put() it). Does not change s->seq. */
json_object *smcd_stats_to_json(const struct smcd_stats *s, const struct smc_pool_stats *pool);

/* Histogram @h in the layout above, {"unit", "count", "sum", "buckets"} (the caller
 * owns the reference). */
json_object *smcd_hist_to_json(const struct smc_hist *h);

/* Write @s and @pool (may be NULL) as JSON to @path atomically: a temporary file in
 * the same directory, fsync, rename. Increments s->seq. Returns 0 or -errno. */
int smcd_stats_write_json(struct smcd_stats *s, const struct smc_pool_stats *pool, const char *path);
