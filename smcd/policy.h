/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * smcd's policy table (which connections and listeners use SMC) and its pnet table
 * (netdev <-> RoCE device grouping), both changed over D-Bus (policy-bus.c,
 * pnet-bus.c; smcctl policy / smcctl pnet) and persisted in json-c state files beside
 * the tunables state file (policy.json, pnet.json; written atomically through
 * write_file_atomic(), fileio.h).
 *
 * Policy rules. A rule is one line of words, in any order, each at most once:
 *
 *   [connect | listen | both] [local-port P[-Q]] [peer-port P[-Q]] [prefix CIDR]
 *   [position N] action smc|tcp
 *
 *   connect | listen | both   where the rule applies (absent = both)
 *   local-port P[-Q]          ports 1..65535, P <= Q. At connect: the port the
 *                             application bound its socket to (an unbound socket has
 *                             none and never matches); at listen: the listening port
 *   peer-port P[-Q]           at connect: the destination port. A listener has no
 *                             peer: a rule with peer-port never matches a listen (and
 *                             "listen peer-port ..." is refused as it never matches)
 *   prefix CIDR               a.b.c.d/len or ipv6/len (a bare address is /32, /128);
 *                             no bits set beyond len. At connect: the destination
 *                             address as the application gave it; at listen: the
 *                             address the listener is bound to (0.0.0.0 / :: for a
 *                             wildcard listener, which only 0.0.0.0/0 / ::/0 contain).
 *                             IPv4 prefixes match IPv4 and IPv4-mapped IPv6 addresses;
 *                             IPv6 prefixes match real IPv6 addresses only
 *                             (IPv4-mapped prefixes are refused: write the IPv4 one)
 *   position N                (only when adding) insert as the N-th rule (1 = first;
 *                             at most count + 1); absent = append
 *   action smc|tcp            required
 *
 * Evaluation: in table order, the first rule whose every given field matches decides
 * (as a firewall); no match = smc. At CONNECT a tcp decision makes the connection fall
 * back with SMCD_DECL_POLICY (counted as any fallback). At LISTEN a tcp decision
 * means smcd does not register the listener: the client gets ERROR -EPERM with
 * detail SMCD_DECL_POLICY and its listener stays plain TCP; connections to it then
 * fall back with SMC_CLC_DECL_PEERNOSMC (there is no SMC listener, as with a kernel
 * SMC peer whose listener is not SMC: the connecting side is not what a rule
 * selected). Changes apply to new connects and listens; listeners registered before
 * stay registered (the application may listen() again to be evaluated anew).
 * Identical rules (same fields and action) are refused. Each rule has an id that smcd
 * assigns (1, 2, ...; never reused: next_id is persisted) and a hit counter (connects
 * and listens it decided since smcd started; not persisted).
 *
 * Pnet table: entries netdev -> RoCE (IB) device and port, with an optional pnet id,
 * as the kernel's smc_pnet table. Validation: netdev 1..15 bytes (IFNAMSIZ - 1),
 * printable ASCII without '/', ':' or space, not "." or ".."; ibdev 1..63 bytes, the
 * same characters; port 1..255; pnetid 1..16 letters and digits, stored upper case (as
 * the kernel does), or "" for none. One entry per netdev; an ibdev port belongs to one
 * pnetid at most. SMC-R (smcr.c) uses it to pick the RoCE device: a connection whose
 * local address is on a netdev with an entry uses only that entry's device and port.
 *
 * State files (the corrupt ones — bad JSON, unknown keys, a bad rule or entry,
 * duplicates — are renamed to <path>.corrupt-<unix time>, logged in one line, and
 * smcd starts with an empty table):
 *   policy.json  {"next_id": N, "rules": [{"id": 1, "rule": "<canonical rule>"}, ...]}
 *   pnet.json    {"entries": [{"netdev": "eth0", "ibdev": "mlx5_0", "port": 1,
 *                 "pnetid": "NET1" | null}, ...]}
 */

#include <json-c/json.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ctl-proto.h"

#define POLICY_MAX_RULES 1024
#define POLICY_RULE_MAX 512       /* bytes of a rule's text */
#define PNET_MAX_ENTRIES 1024
#define PNET_NETDEV_MAX 16        /* IFNAMSIZ, NUL included (no <net/if.h> here: it
                                   * clashes with <linux/if.h> in includers) */
#define PNET_IBDEV_MAX 64         /* IB_DEVICE_NAME_MAX, NUL included */
#define PNET_ID_MAX 16            /* SMC_MAX_PNETID_LEN */
#define POLICY_STATE_NAME "policy.json"
#define PNET_STATE_NAME "pnet.json"

typedef enum PolicyScope {
        POLICY_SCOPE_BOTH = 0,
        POLICY_SCOPE_CONNECT,
        POLICY_SCOPE_LISTEN,
} PolicyScope;

typedef enum PolicyAction {
        POLICY_ACTION_SMC = 0,
        POLICY_ACTION_TCP,
} PolicyAction;

typedef struct PolicyRule {
        uint32_t id;              /* 0 until added */
        PolicyScope scope;
        PolicyAction action;
        bool has_local_port;
        bool has_peer_port;
        bool has_prefix;
        uint16_t local_port[2];   /* first, last (inclusive) */
        uint16_t peer_port[2];
        uint16_t family;          /* of the prefix: AF_INET or AF_INET6 */
        uint8_t prefix[16];       /* network byte order; bits beyond prefix_len are 0 */
        uint8_t prefix_len;
        uint64_t hits;            /* decisions since smcd started */
} PolicyRule;

typedef struct PolicyTable {
        PolicyRule *rules;        /* evaluation order */
        size_t n;
        uint32_t next_id;         /* 0 is read as 1 */
        char path[PATH_MAX];      /* state file; "" = not persisted */
        int load_error;           /* -errno: the file exists but could not be read at
                                   * start; it is left alone and changes are refused */
} PolicyTable;

typedef struct PnetEntry {
        char netdev[PNET_NETDEV_MAX];
        char ibdev[PNET_IBDEV_MAX];
        uint8_t port;             /* 1..255 */
        char pnetid[PNET_ID_MAX + 1]; /* "" = none */
} PnetEntry;

typedef struct PnetTable {
        PnetEntry *v;             /* sorted by netdev */
        size_t n;
        char path[PATH_MAX];      /* state file; "" = not persisted */
        int load_error;           /* as PolicyTable.load_error */
} PnetTable;

/* ---- policy ---- */

/* Parse the rule @text (the grammar above) into *ret (id 0, hits 0). @ret_position:
 * where "position N" may be given (N into *ret_position, 0 = absent); NULL: the word
 * is refused. On error returns -EINVAL and writes a one-line reason that names the bad
 * word into @err (@errlen bytes); *ret is then unspecified. */
int policy_rule_parse(const char *text, PolicyRule *ret, size_t *ret_position, char *err, size_t errlen);

/* The canonical text of @r (the grammar above, fields in grammar order, "both" and
 * absent fields left out, no position) into @buf (@len bytes, POLICY_RULE_MAX is
 * enough). Returns @buf. */
const char *policy_rule_format(const PolicyRule *r, char *buf, size_t len);

/* The first rule of @t that matches, or NULL (= smc); counts a hit on it.
 * @where: POLICY_SCOPE_CONNECT (@local: the connecting socket's bound address, family
 * AF_UNSPEC or port 0 if unbound; @peer: the destination) or POLICY_SCOPE_LISTEN
 * (@local: the bound address of the listener; @peer: NULL). */
const PolicyRule *policy_match(PolicyTable *t, PolicyScope where, const struct smc_ctl_addr *local,
                               const struct smc_ctl_addr *peer);

/* Parse @text, insert it (at its "position", else at the end) with the next id, save
 * the table (if t->path is set), then commit. Returns 0 and the id in *ret_id;
 * -EINVAL (bad rule, position beyond the end, an identical rule exists, the table is
 * full, no ids left) with the reason in @err; -ENOMEM; or the -errno of the save. On
 * any error @t and its file are unchanged. */
int policy_add(PolicyTable *t, const char *text, uint32_t *ret_id, char *err, size_t errlen);

/* Remove the rule with @id, saving first. Returns 0, -ENOENT (no such rule), -ENOMEM
 * or the -errno of the save; on error @t and its file are unchanged. */
int policy_del(PolicyTable *t, uint32_t id);

/* The rules as a JSON array in evaluation order, one object per rule with the keys
 * id, scope ("connect"|"listen"|"both"), local_port, peer_port ("P" or "P-Q", or null),
 * prefix ("CIDR" or null), action ("smc"|"tcp"), hits, rule (the canonical text).
 * The caller owns it; NULL on ENOMEM. */
json_object *policy_to_json(const PolicyTable *t);

/* Load the table from @path (which becomes t->path; NULL or "" = not persisted) into
 * the empty @t. A missing file is an empty table. A corrupt one is moved aside
 * (move_aside_corrupt()) and logged in one line; @t stays empty. An unreadable one is
 * logged; @t stays empty but keeps the path. Returns 0, or -ENOMEM. */
int policy_load(PolicyTable *t, const char *path);

/* Free the rules; @t is empty afterwards. */
void policy_done(PolicyTable *t);

/* ---- pnet ---- */

/* Validate an entry (rules above) into *ret. @pnetid may be NULL or "" (none). On error
 * returns -EINVAL with the reason in @err, naming the bad field and value. */
int pnet_entry_parse(const char *netdev, const char *ibdev, uint32_t port, const char *pnetid, PnetEntry *ret,
                     char *err, size_t errlen);

/* Validate and add an entry, saving first. Returns 0; -EINVAL (bad field, the netdev
 * has an entry already, the ibdev port belongs to another pnetid, the table is full)
 * with the reason in @err; -ENOMEM; or the -errno of the save (then @t and its file
 * are unchanged). */
int pnet_add(PnetTable *t, const char *netdev, const char *ibdev, uint32_t port, const char *pnetid, char *err,
             size_t errlen);

/* Remove the entry of @netdev, saving first. Returns 0, -ENOENT, -ENOMEM or the
 * -errno of the save (then unchanged). */
int pnet_del(PnetTable *t, const char *netdev);

/* The entries as a JSON array sorted by netdev: objects with the keys netdev, ibdev,
 * port (number), pnetid (string or null). The caller owns it; NULL on ENOMEM. */
json_object *pnet_to_json(const PnetTable *t);

/* As policy_load(), for the pnet table. */
int pnet_load(PnetTable *t, const char *path);

void pnet_done(PnetTable *t);

/* ---- both ---- */

/* The state file @name (POLICY_STATE_NAME, PNET_STATE_NAME) in the directory of the
 * tunables state file @state_file, into @buf (@len bytes); "" if @state_file is
 * empty. Returns 0 or -ENAMETOOLONG. */
int policy_state_path(const char *state_file, const char *name, char *buf, size_t len);
