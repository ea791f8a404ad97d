/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * smcd's run-time tunables: validated key=value settings that live in ManagerConfig,
 * are changed over D-Bus (SetTunable, manager-bus.h) and persist in a json-c state
 * file (a JSON object, key -> value string, every key present).
 *
 *   buf_clear            release|create   when DMBs are zeroed; applied live
 *                                         (smc_pool_set_clear: buffers released from now on)
 *   max_conns_per_uid    N (0 = unlimited)  endpoints per uid; new connections
 *   max_buf_per_uid      bytes, K/M/G suffixes (0 = unlimited); new connections
 *   max_clients_per_uid  N (0 = unlimited)  control connections per uid; new clients
 *   rmem                 bytes 16K..1M, rounded up to a DMB size class: the RMB of a
 *                        CONNECT without SO_RCVBUF; new connections
 *   inline               auto|on|off      stored and shown only; for SMC-R (not yet)
 *
 * Values are shown normalized: numbers in decimal bytes/counts, rmem as the class size.
 * Start-up order: command line / config file give the defaults, the state file
 * overrides them; a corrupt state file (bad JSON, unknown key, bad value) is renamed
 * to <path>.corrupt-<unix time> and smcd starts on the defaults.
 */

#include <json-c/json.h>
#include <stddef.h>

#include "manager.h"

#define SMCD_DEFAULT_STATE_FILE "/var/lib/smcd/tunables.json"

/* The keys, NULL terminated, in display order. */
extern const char *const smcd_tunable_keys[];

/* Validate @value for tunable @key and store it in @cfg (nothing else is touched, and
 * nothing at all on error). On error returns -EINVAL (unknown key or bad value) and
 * writes a one-line human-readable reason ("unknown tunable "x"; known: ..." or
 * "rmem: expected bytes 16K..1M, not "2M"") into @err (@errlen bytes). */
int tunable_parse(ManagerConfig *cfg, const char *key, const char *value, char *err, size_t errlen);

/* The normalized value of @key in @cfg as a newly allocated string in *ret (the caller
 * frees it). Returns 0, -EINVAL (unknown key) or -ENOMEM. */
int tunable_format(const ManagerConfig *cfg, const char *key, char **ret);

/* Every tunable of @cfg as a JSON object key -> value string (the caller owns it), or
 * NULL on ENOMEM. */
json_object *tunables_to_json(const ManagerConfig *cfg);

/* Write the tunables of @cfg to @path atomically: <path>.tmp-XXXXXX in the same
 * directory (created 0755 if missing, one level), fsync, rename over @path, fsync the
 * directory. Returns 0 or -errno (not logged; *the caller* logs or replies). */
int tunables_save(const ManagerConfig *cfg, const char *path);

/* Apply the state file @path on top of @cfg. A missing file is fine (returns 0,
 * @cfg unchanged). A corrupt one is logged in one line, renamed to
 * <path>.corrupt-<unix time>, and @cfg stays unchanged; returns 0 as well. Returns
 * -errno only if the file exists but cannot be read (logged; @cfg unchanged). */
int tunables_load(ManagerConfig *cfg, const char *path);

/* The default state file: $STATE_DIRECTORY (its first entry)/tunables.json if set,
 * else SMCD_DEFAULT_STATE_FILE. Writes it into @buf (@len bytes); returns @buf. */
const char *tunables_default_path(char *buf, size_t len);
