/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * smcd's run-time tunables: validated key=value settings that live in ManagerConfig,
 * are changed over D-Bus (SetTunable, SetTunables, manager-bus.h), persist in a json-c state file
 * (a JSON object, key -> value string, every key present) and are smcd options too
 * (--KEY with '_' as '-', main.c). One table in tunables.c holds them all. See
 * smcd-tunables(5) for the user's view.
 *
 *   autocork_size        bytes 1K..1M (default 64K): handed to both ends of a new
 *                        connection (control protocol v2, struct smc_ctl_conn_params);
 *                        a corked (TCP_CORK / MSG_MORE) batch is published once it is
 *                        this large, capped at half the peer's RMB. Not the kernel's
 *                        autocorking (we coalesce only what the app corks). The
 *                        client's SMC_AUTOCORK wins. New connections.
 *   buf_clear            release|create   when DMBs are zeroed; applied live
 *                                         (smc_pool_set_clear: buffers released from now on)
 *   busy_poll            microseconds 0..10000 (default 50): handed to both ends of a
 *                        new connection; a blocking send/recv spins this long on the
 *                        ring before it sleeps. The client's SMC_BUSY_POLL_US wins.
 *   cq_poll              event|thread (default event): SMC-R work completions through
 *                        the RoCE device's completion channel in the event loop, or
 *                        polled by a thread per device that spins ROCE_CQ_SPIN_USEC
 *                        after each completion (burns CPU meanwhile); new link groups
 *                        (roce_dev_set_cq_poll before roce_link_new)
 *   inline               auto|on|off      SMC-R CDC sends with IBV_SEND_INLINE (live; on
 *                        also asks inline space for new link groups)
 *   max_buf_per_uid      bytes, K/M/G suffixes (0 = unlimited); new connections
 *   max_clients_per_uid  N (0 = unlimited, default 256)  control connections per uid;
 *                        new clients
 *   max_conns_per_lgr    16..255 (default 255, the kernel's SMC_RMBS_PER_LGR_MAX):
 *                        SMC-R connections per link group; new link groups
 *   max_links_per_lgr    1..2 (default 2, the kernel's smcr_max_links_per_lgr): links
 *                        per SMC-R link group (a second one on another device); new
 *                        link groups
 *   max_conns_per_uid    N (0 = unlimited)  endpoints per uid; new connections
 *   max_listeners_per_uid  N (0 = unlimited, default 1024)  SMC listeners registered
 *                        per uid (each holds a channel end in smcd); over it a LISTEN
 *                        gets EMFILE and the socket stays a TCP listener; new LISTENs
 *   max_handshakes_per_uid  N per second (0 = unlimited): a token bucket per uid
 *                        (UidUsage, burst N) of CONNECTs; over it a CONNECT falls
 *                        back with SMCD_DECL_HSRATE. Live.
 *   rmem                 bytes 16K..1M, rounded up to a DMB size class: what a reader
 *                        without SO_RCVBUF asks for; new connections
 *   sndbuf               bytes 16K..1M, rounded up to a DMB size class (default 16K,
 *                        the minimum, as net.smc.wmem defaults to tcp_wmem[1]): what a
 *                        writer without SO_SNDBUF asks for. In SMC-D the writer writes
 *                        straight into its peer's RMB (our "sndbuf" is the peer's DMB,
 *                        as the kernel's loopback-ism attaches the sndbuf to the peer's
 *                        DMB), so each RMB of a new connection is the larger of its
 *                        reader's SO_RCVBUF (else rmem) and its writer's SO_SNDBUF
 *                        (else sndbuf), as a class size (conn.c; max_buf_per_uid or
 *                        the pool may make it smaller). The default changes nothing.
 *   test_link_time       seconds 0..3600, 0 = off (default 30, the kernel's
 *                        SMC_LLC_TESTLINK_DEFAULT_TIME): SMC-R link tests (live)
 *   ueid                 EID[,EID...]: up to SMCD_MAX_UEIDS SMC-R v2 User EIDs (2.8)
 *                        of 1..32 characters A-Z 0-9 . - (the first A-Z/0-9: the
 *                        kernel's smc_clc_ueid_valid), upper-cased, stored blank padded
 *                        in ManagerConfig.ueids; "" = none (SMC-R v1 only); default
 *                        SMCD_DEFAULT_UEID; new handshakes (smcr.c reads them per
 *                        handshake)
 *
 * Values are shown normalized: numbers in decimal bytes/counts, rmem and sndbuf as
 * the class size. Start-up order: tunables_set_defaults(), then the command line /
 * config file, then the state file overrides them; a corrupt state file (bad JSON,
 * unknown key, bad value) is renamed to <path>.corrupt-<unix time> and smcd starts on
 * the options.
 */

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>

#include "manager.h"

#define SMCD_DEFAULT_STATE_FILE "/var/lib/smcd/tunables.json"

/* The number of tunables, and the @i-th key in display order (NULL if @i is too
 * large). */
size_t tunables_count(void);
const char *tunable_key(size_t i);
bool tunable_known(const char *key);

/* smcd --help text of @key's option, and its argument's name in *@ret_metavar; NULL
 * for an unknown key. Static strings. */
const char *tunable_help(const char *key, const char **ret_metavar);

/* Set every tunable of @cfg to its default (nothing else is touched). */
void tunables_set_defaults(ManagerConfig *cfg);

/* Copy every tunable from @src to @dst (nothing else). */
void tunables_copy(ManagerConfig *dst, const ManagerConfig *src);

/* Validate @value for tunable @key and store it in @cfg (nothing else is touched, and
 * nothing at all on error). On error returns -EINVAL (unknown key or bad value) and
 * writes a one-line human-readable reason ("unknown tunable "x" (known: ...)" or
 * "rmem: expected bytes 16K..1M (K/M suffixes), not "2M"") into @err (@errlen
 * bytes). NULL @value is an empty one. */
int tunable_parse(ManagerConfig *cfg, const char *key, const char *value, char *err, size_t errlen);

/* The same, but a bad value's message names @what (e.g. the option "max-buf-per-uid")
 * instead of @key; @what NULL = @key. */
int tunable_parse_as(ManagerConfig *cfg, const char *key, const char *value, const char *what, char *err,
                     size_t errlen);

/* The normalized value of @key in @cfg as a newly allocated string in *ret (the caller
 * frees it). Returns 0, -EINVAL (unknown key) or -ENOMEM. */
int tunable_format(const ManagerConfig *cfg, const char *key, char **ret);

/* Every tunable of @cfg as a JSON object key -> value string (the caller owns it), or
 * NULL on ENOMEM. */
json_object *tunables_to_json(const ManagerConfig *cfg);

/* Write the tunables of @cfg to @path atomically: <path>.tmp-XXXXXX in the same
 * directory (created 0755 with its parents if missing), fsync, rename over @path, fsync the
 * directory. Returns 0 or -errno (not logged; *the caller* logs or replies). */
int tunables_save(const ManagerConfig *cfg, const char *path);

/* Apply the state file @path on top of @cfg: the keys it holds (a file of an older
 * smcd may lack newer ones, which keep their values; one of a newer smcd may hold keys
 * this one does not know, kept for tunables_save() to write back, and values it
 * refuses: each logged as a warning and skipped). A missing file is fine
 * (returns 0, @cfg unchanged). A corrupt one (not a JSON object of strings, a key
 * twice, larger than 64 KiB) is logged in one line, renamed to
 * <path>.corrupt-<unix time>, and @cfg stays unchanged; returns 0 as well. Returns
 * -errno only if the file exists but cannot be read (logged; @cfg unchanged). */
int tunables_load(ManagerConfig *cfg, const char *path);

/* The default state file: $STATE_DIRECTORY (its first entry)/tunables.json if set,
 * else SMCD_DEFAULT_STATE_FILE. Writes it into @buf (@len bytes); returns @buf. */
const char *tunables_default_path(char *buf, size_t len);
