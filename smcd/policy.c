/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* smcd's policy and pnet tables and their state files. See policy.h. */

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "addr.h"
#include "fileio.h"
#include "log.h"
#include "policy.h"

#define STATE_MAX_SIZE (512u << 10) /* bytes of a policy or pnet state file */

static int set_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int set_err(char *err, size_t errlen, const char *fmt, ...) {
        va_list ap;

        if (err && errlen) {
                va_start(ap, fmt);
                vsnprintf(err, errlen, fmt, ap);
                va_end(ap);
        }
        return -EINVAL;
}

/* @s for an error message: at most 40 bytes, other than printable ASCII as '?'. */
static const char *shown(const char *s, char buf[static 48]) {
        size_t i;

        for (i = 0; s[i] && i < 40; i++)
                buf[i] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
        if (s[i]) {
                memcpy(buf + i, "...", 3);
                i += 3;
        }
        buf[i] = 0;
        return buf;
}

/* Decimal digits only, at most @max; no sign, no space, no leading "0x". */
static int parse_uint(const char *s, size_t n, uint32_t max, uint32_t *ret) {
        uint64_t v = 0;

        if (n == 0 || n > 10)
                return -EINVAL;
        for (size_t i = 0; i < n; i++) {
                if (!isdigit((unsigned char) s[i]))
                        return -EINVAL;
                v = v * 10 + (uint64_t) (s[i] - '0');
        }
        if (v > max)
                return -ERANGE;
        *ret = (uint32_t) v;
        return 0;
}

/* ---- policy rules ---- */

static const char *const scope_names[] = {
        [POLICY_SCOPE_BOTH] = "both",
        [POLICY_SCOPE_CONNECT] = "connect",
        [POLICY_SCOPE_LISTEN] = "listen",
};

static const char *const action_names[] = {
        [POLICY_ACTION_SMC] = "smc",
        [POLICY_ACTION_TCP] = "tcp",
};

/* "P" or "P-Q", 1..65535, P <= Q. */
static int parse_port_range(const char *word, const char *s, uint16_t ret[2], char *err, size_t errlen) {
        const char *dash = strchr(s, '-');
        uint32_t a, b;
        char buf[48];

        if (parse_uint(s, dash ? (size_t) (dash - s) : strlen(s), 65535, &a) < 0 || a == 0 ||
            (dash && (parse_uint(dash + 1, strlen(dash + 1), 65535, &b) < 0 || b == 0)))
                return set_err(err, errlen, "%s: bad port \"%s\" (expected P or P-Q, ports 1..65535)", word,
                               shown(s, buf));
        if (!dash)
                b = a;
        if (a > b)
                return set_err(err, errlen, "%s: bad range \"%s\" (the first port is above the last)", word,
                               shown(s, buf));
        ret[0] = (uint16_t) a;
        ret[1] = (uint16_t) b;
        return 0;
}

/* Does @a (of @family) have bits set beyond @len? Also clears them in @masked. */
static bool host_bits_set(const uint8_t *a, unsigned alen, unsigned len, uint8_t *masked) {
        bool set = false;

        for (unsigned i = 0; i < alen; i++) {
                unsigned keep = len >= (i + 1) * 8 ? 8 : len > i * 8 ? len - i * 8 : 0;
                uint8_t mask = keep ? (uint8_t) (0xff << (8 - keep)) : 0;

                masked[i] = a[i] & mask;
                if (masked[i] != a[i])
                        set = true;
        }
        return set;
}

static int parse_prefix(const char *s, PolicyRule *r, char *err, size_t errlen) {
        static const uint8_t v4mapped[12] = { [10] = 0xff, [11] = 0xff };
        const char *slash = strchr(s, '/');
        size_t alen = slash ? (size_t) (slash - s) : strlen(s);
        char addr[INET6_ADDRSTRLEN + 1], buf[48], net[INET6_ADDRSTRLEN];
        uint8_t masked[16];
        uint32_t len, max;

        if (alen == 0 || alen >= sizeof(addr))
                return set_err(err, errlen, "prefix: bad address in \"%s\" (expected a.b.c.d/len or ipv6/len)",
                               shown(s, buf));
        memcpy(addr, s, alen);
        addr[alen] = 0;
        memset(r->prefix, 0, sizeof(r->prefix));
        if (inet_pton(AF_INET, addr, r->prefix) == 1) {
                r->family = AF_INET;
                max = 32;
        } else if (inet_pton(AF_INET6, addr, r->prefix) == 1) {
                r->family = AF_INET6;
                max = 128;
        } else
                return set_err(err, errlen, "prefix: bad address \"%s\" (expected a.b.c.d/len or ipv6/len)",
                               shown(addr, buf));
        if (!slash)
                len = max;
        else if (parse_uint(slash + 1, strlen(slash + 1), max, &len) < 0 || (slash[1] == '0' && slash[2]))
                return set_err(err, errlen, "prefix: bad length in \"%s\" (expected 0..%u)", shown(s, buf),
                               (unsigned) max);
        if (r->family == AF_INET6 && len >= 96 && memcmp(r->prefix, v4mapped, 12) == 0)
                return set_err(err, errlen, "prefix: \"%s\" is IPv4-mapped: write the IPv4 prefix, which matches "
                               "IPv4-mapped addresses too", shown(s, buf));
        if (host_bits_set(r->prefix, max / 8, len, masked)) {
                inet_ntop(r->family, masked, net, sizeof(net));
                return set_err(err, errlen, "prefix: \"%s\" has bits set beyond /%u (did you mean %s/%u?)",
                               shown(s, buf), (unsigned) len, net, (unsigned) len);
        }
        r->prefix_len = (uint8_t) len;
        r->has_prefix = true;
        return 0;
}

int policy_rule_parse(const char *text, PolicyRule *ret, size_t *ret_position, char *err, size_t errlen) {
        static const char grammar[] = "[connect|listen|both] [local-port P[-Q]] [peer-port P[-Q]] "
                                      "[prefix CIDR] action smc|tcp";
        char words[POLICY_RULE_MAX], buf[48], *save = NULL, *w;
        bool have_scope = false, have_action = false, have_position = false;
        PolicyRule r = {};
        const char *scope_word = NULL;
        size_t len = strlen(text);

        if (len >= sizeof(words))
                return set_err(err, errlen, "rule too long (%zu bytes, at most %d)", len, POLICY_RULE_MAX - 1);
        for (size_t i = 0; i < len; i++)
                if ((text[i] < 0x20 || text[i] >= 0x7f) && text[i] != '\t')
                        return set_err(err, errlen, "rule: byte %zu (0x%02x) is not printable ASCII", i + 1,
                                       (unsigned char) text[i]);
        memcpy(words, text, len + 1);
        if (ret_position)
                *ret_position = 0;
        for (w = strtok_r(words, " \t", &save); w; w = strtok_r(NULL, " \t", &save)) {
                bool is_scope = false;
                PolicyScope scope = POLICY_SCOPE_BOTH;
                const char *v;
                int q;

                for (unsigned s = 0; s < sizeof(scope_names) / sizeof(scope_names[0]); s++)
                        if (strcmp(w, scope_names[s]) == 0) {
                                is_scope = true;
                                scope = (PolicyScope) s;
                        }
                if (is_scope) {
                        if (have_scope)
                                return set_err(err, errlen, "\"%s\": the scope is given twice (\"%s\" before)",
                                               w, scope_word);
                        have_scope = true;
                        scope_word = w;
                        r.scope = scope;
                        continue;
                }
                if (strcmp(w, "local-port") != 0 && strcmp(w, "peer-port") != 0 && strcmp(w, "prefix") != 0 &&
                    strcmp(w, "position") != 0 && strcmp(w, "action") != 0)
                        return set_err(err, errlen, "unknown word \"%s\" (expected connect, listen, both, "
                                       "local-port, peer-port, prefix, position or action)", shown(w, buf));
                v = strtok_r(NULL, " \t", &save);
                if (!v)
                        return set_err(err, errlen, "\"%s\" needs a value", w);
                if (strcmp(w, "local-port") == 0) {
                        if (r.has_local_port)
                                return set_err(err, errlen, "\"local-port\" is given twice");
                        q = parse_port_range(w, v, r.local_port, err, errlen);
                        if (q < 0)
                                return q;
                        r.has_local_port = true;
                } else if (strcmp(w, "peer-port") == 0) {
                        if (r.has_peer_port)
                                return set_err(err, errlen, "\"peer-port\" is given twice");
                        q = parse_port_range(w, v, r.peer_port, err, errlen);
                        if (q < 0)
                                return q;
                        r.has_peer_port = true;
                } else if (strcmp(w, "prefix") == 0) {
                        if (r.has_prefix)
                                return set_err(err, errlen, "\"prefix\" is given twice");
                        q = parse_prefix(v, &r, err, errlen);
                        if (q < 0)
                                return q;
                } else if (strcmp(w, "position") == 0) {
                        uint32_t pos;

                        if (!ret_position)
                                return set_err(err, errlen, "\"position\" is not part of a stored rule");
                        if (have_position)
                                return set_err(err, errlen, "\"position\" is given twice");
                        if (parse_uint(v, strlen(v), POLICY_MAX_RULES, &pos) < 0 || pos == 0)
                                return set_err(err, errlen, "position: bad number \"%s\" (expected 1..%d)",
                                               shown(v, buf), POLICY_MAX_RULES);
                        have_position = true;
                        *ret_position = pos;
                } else { /* action */
                        if (have_action)
                                return set_err(err, errlen, "\"action\" is given twice");
                        if (strcmp(v, "smc") == 0)
                                r.action = POLICY_ACTION_SMC;
                        else if (strcmp(v, "tcp") == 0)
                                r.action = POLICY_ACTION_TCP;
                        else
                                return set_err(err, errlen, "action: expected smc or tcp, not \"%s\"", shown(v, buf));
                        have_action = true;
                }
        }
        if (!have_action)
                return set_err(err, errlen, "missing \"action smc|tcp\" (rule: %s)", grammar);
        if (r.scope == POLICY_SCOPE_LISTEN && r.has_peer_port)
                return set_err(err, errlen, "\"peer-port\" never matches a listen (a listener has no peer): drop "
                               "\"listen\" or \"peer-port\"");
        *ret = r;
        return 0;
}

static const char *port_range_format(const uint16_t p[2], char *buf, size_t len) {
        if (p[0] == p[1])
                snprintf(buf, len, "%u", (unsigned) p[0]);
        else
                snprintf(buf, len, "%u-%u", (unsigned) p[0], (unsigned) p[1]);
        return buf;
}

static const char *prefix_format(const PolicyRule *r, char *buf, size_t len) {
        char a[INET6_ADDRSTRLEN];

        if (!inet_ntop(r->family, r->prefix, a, sizeof(a)))
                snprintf(a, sizeof(a), "?");
        snprintf(buf, len, "%s/%u", a, (unsigned) r->prefix_len);
        return buf;
}

const char *policy_rule_format(const PolicyRule *r, char *buf, size_t len) {
        char a[16], b[16], p[INET6_ADDRSTRLEN + 8];

        snprintf(buf, len, "%s%s%s%s%s%s%s%s%s%s%saction %s",
                 r->scope != POLICY_SCOPE_BOTH ? scope_names[r->scope] : "",
                 r->scope != POLICY_SCOPE_BOTH ? " " : "",
                 r->has_local_port ? "local-port " : "",
                 r->has_local_port ? port_range_format(r->local_port, a, sizeof(a)) : "",
                 r->has_local_port ? " " : "",
                 r->has_peer_port ? "peer-port " : "",
                 r->has_peer_port ? port_range_format(r->peer_port, b, sizeof(b)) : "",
                 r->has_peer_port ? " " : "",
                 r->has_prefix ? "prefix " : "",
                 r->has_prefix ? prefix_format(r, p, sizeof(p)) : "",
                 r->has_prefix ? " " : "",
                 action_names[r->action]);
        return buf;
}

/* Same match fields and action (id and hits aside). */
static bool rule_same(const PolicyRule *a, const PolicyRule *b) {
        return a->scope == b->scope && a->action == b->action && a->has_local_port == b->has_local_port &&
               (!a->has_local_port || (a->local_port[0] == b->local_port[0] && a->local_port[1] == b->local_port[1])) &&
               a->has_peer_port == b->has_peer_port &&
               (!a->has_peer_port || (a->peer_port[0] == b->peer_port[0] && a->peer_port[1] == b->peer_port[1])) &&
               a->has_prefix == b->has_prefix &&
               (!a->has_prefix || (a->family == b->family && a->prefix_len == b->prefix_len &&
                                   memcmp(a->prefix, b->prefix, sizeof(a->prefix)) == 0));
}

static bool prefix_contains(const PolicyRule *r, const struct smc_ctl_addr *a) {
        uint8_t v4[4];
        const uint8_t *bytes;
        unsigned full = r->prefix_len / 8, rest = r->prefix_len % 8;

        if (!a)
                return false;
        if (r->family == AF_INET) {
                if (!smcd_addr_get_v4(a, v4))
                        return false;
                bytes = v4;
        } else {
                if (a->family != AF_INET6 || smcd_addr_is_v4mapped(a))
                        return false;
                bytes = a->addr;
        }
        if (memcmp(bytes, r->prefix, full) != 0)
                return false;
        return rest == 0 || ((bytes[full] ^ r->prefix[full]) & (uint8_t) (0xff << (8 - rest))) == 0;
}

static bool port_in(const uint16_t range[2], uint16_t port) {
        return port >= range[0] && port <= range[1];
}

static bool rule_matches(const PolicyRule *r, PolicyScope where, const struct smc_ctl_addr *local,
                         const struct smc_ctl_addr *peer) {
        bool local_known = local && (local->family == AF_INET || local->family == AF_INET6);

        if (r->scope != POLICY_SCOPE_BOTH && r->scope != where)
                return false;
        if (r->has_local_port && (!local_known || local->port == 0 || !port_in(r->local_port, local->port)))
                return false;
        if (r->has_peer_port && (where != POLICY_SCOPE_CONNECT || !peer || !port_in(r->peer_port, peer->port)))
                return false;
        if (r->has_prefix && !prefix_contains(r, where == POLICY_SCOPE_CONNECT ? peer : local_known ? local : NULL))
                return false;
        return true;
}

const PolicyRule *policy_match(PolicyTable *t, PolicyScope where, const struct smc_ctl_addr *local,
                               const struct smc_ctl_addr *peer) {
        for (size_t i = 0; i < t->n; i++)
                if (rule_matches(&t->rules[i], where, local, peer)) {
                        t->rules[i].hits++;
                        return &t->rules[i];
                }
        return NULL;
}

static int json_add(json_object *o, const char *key, json_object *v) {
        if (!v || json_object_object_add(o, key, v) < 0) {
                json_object_put(v);
                return -ENOMEM;
        }
        return 0;
}

/* A string, or JSON null if @s is NULL. */
static int json_add_str_or_null(json_object *o, const char *key, const char *s) {
        if (!s)
                return json_object_object_add(o, key, NULL) < 0 ? -ENOMEM : 0;
        return json_add(o, key, json_object_new_string(s));
}

static json_object *rule_to_json(const PolicyRule *r) {
        char a[16], b[16], p[INET6_ADDRSTRLEN + 8], text[POLICY_RULE_MAX];
        json_object *o = json_object_new_object();

        if (!o)
                return NULL;
        if (json_add(o, "id", json_object_new_uint64(r->id)) < 0 ||
            json_add(o, "scope", json_object_new_string(scope_names[r->scope])) < 0 ||
            json_add_str_or_null(o, "local_port", r->has_local_port ? port_range_format(r->local_port, a, sizeof(a)) : NULL) < 0 ||
            json_add_str_or_null(o, "peer_port", r->has_peer_port ? port_range_format(r->peer_port, b, sizeof(b)) : NULL) < 0 ||
            json_add_str_or_null(o, "prefix", r->has_prefix ? prefix_format(r, p, sizeof(p)) : NULL) < 0 ||
            json_add(o, "action", json_object_new_string(action_names[r->action])) < 0 ||
            json_add(o, "hits", json_object_new_uint64(r->hits)) < 0 ||
            json_add(o, "rule", json_object_new_string(policy_rule_format(r, text, sizeof(text)))) < 0) {
                json_object_put(o);
                return NULL;
        }
        return o;
}

json_object *policy_to_json(const PolicyTable *t) {
        json_object *a = json_object_new_array();

        if (!a)
                return NULL;
        for (size_t i = 0; i < t->n; i++) {
                json_object *o = rule_to_json(&t->rules[i]);

                if (!o || json_object_array_add(a, o) < 0) {
                        json_object_put(o);
                        json_object_put(a);
                        return NULL;
                }
        }
        return a;
}

/* Write @root (pretty, one trailing newline) to @path atomically; takes @root. */
static int save_json(const char *path, json_object *root) {
        const char *text;
        char *data = NULL;
        int r;

        if (!root)
                return -ENOMEM;
        text = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
                                                    JSON_C_TO_STRING_NOSLASHESCAPE);
        r = text && asprintf(&data, "%s\n", text) >= 0 ? 0 : -ENOMEM;
        json_object_put(root);
        if (r < 0)
                return r;
        r = write_file_atomic(path, data, strlen(data), 0644);
        free(data);
        return r;
}

static int policy_save(const char *path, const PolicyRule *rules, size_t n, uint32_t next_id) {
        json_object *root, *a;
        char text[POLICY_RULE_MAX];

        if (!path[0])
                return 0;
        root = json_object_new_object();
        a = json_object_new_array();
        if (!root || !a || json_add(root, "next_id", json_object_new_uint64(next_id)) < 0 ||
            json_object_object_add(root, "rules", a) < 0) {
                json_object_put(root);
                json_object_put(a);
                return -ENOMEM;
        }
        for (size_t i = 0; i < n; i++) {
                json_object *o = json_object_new_object();

                if (!o || json_add(o, "id", json_object_new_uint64(rules[i].id)) < 0 ||
                    json_add(o, "rule", json_object_new_string(policy_rule_format(&rules[i], text, sizeof(text)))) < 0 ||
                    json_object_array_add(a, o) < 0) {
                        json_object_put(o);
                        json_object_put(root);
                        return -ENOMEM;
                }
        }
        return save_json(path, root);
}

/* Copy-on-write for the two tables (the new array is saved first and only then
 * replaces the old one, so a failed save changes nothing). */

/* A new array: the @n elements of @size bytes at @base with @item inserted at index
 * @pos (0..@n). NULL on ENOMEM. */
static void *array_with(const void *base, size_t n, size_t size, size_t pos, const void *item) {
        char *v = malloc((n + 1) * size);

        if (!v)
                return NULL;
        if (pos) /* base may be NULL when n is 0 */
                memcpy(v, base, pos * size);
        memcpy(v + pos * size, item, size);
        if (n > pos)
                memcpy(v + (pos + 1) * size, (const char *) base + pos * size, (n - pos) * size);
        return v;
}

/* A new array in *ret: the @n (>= 1) elements at @base without index @i; NULL when
 * nothing is left. Returns 0 or -ENOMEM. */
static int array_without(const void *base, size_t n, size_t size, size_t i, void **ret) {
        char *v = NULL;

        if (n > 1) {
                v = malloc((n - 1) * size);
                if (!v)
                        return -ENOMEM;
                memcpy(v, base, i * size);
                memcpy(v + i * size, (const char *) base + (i + 1) * size, (n - i - 1) * size);
        }
        *ret = v;
        return 0;
}

int policy_add(PolicyTable *t, const char *text, uint32_t *ret_id, char *err, size_t errlen) {
        uint32_t id = t->next_id ? t->next_id : 1;
        char shown_rule[POLICY_RULE_MAX];
        PolicyRule rule, *v;
        size_t pos;
        int r;

        r = policy_rule_parse(text, &rule, &pos, err, errlen);
        if (r < 0)
                return r;
        if (t->n >= POLICY_MAX_RULES)
                return set_err(err, errlen, "the policy table is full (%d rules)", POLICY_MAX_RULES);
        if (pos > t->n + 1)
                return set_err(err, errlen, "position %zu is beyond the end (%zu rule%s: at most %zu)", pos, t->n,
                               t->n == 1 ? "" : "s", t->n + 1);
        if (id == UINT32_MAX)
                return set_err(err, errlen, "no rule ids left");
        for (size_t i = 0; i < t->n; i++)
                if (rule_same(&t->rules[i], &rule))
                        return set_err(err, errlen, "the same as rule %" PRIu32 " (%s)", t->rules[i].id,
                                       policy_rule_format(&t->rules[i], shown_rule, sizeof(shown_rule)));
        if (pos == 0)
                pos = t->n + 1;
        rule.id = id;
        v = array_with(t->rules, t->n, sizeof(*v), pos - 1, &rule);
        if (!v)
                return -ENOMEM;
        r = policy_save(t->path, v, t->n + 1, id + 1);
        if (r < 0) {
                free(v);
                return r;
        }
        free(t->rules);
        t->rules = v;
        t->n++;
        t->next_id = id + 1;
        *ret_id = id;
        return 0;
}

int policy_del(PolicyTable *t, uint32_t id) {
        PolicyRule *v = NULL;
        size_t i;
        int r;

        for (i = 0; i < t->n && t->rules[i].id != id; i++)
                ;
        if (i == t->n)
                return -ENOENT;
        r = array_without(t->rules, t->n, sizeof(*v), i, (void **) &v);
        if (r < 0)
                return r;
        r = policy_save(t->path, v, t->n - 1, t->next_id ? t->next_id : 1);
        if (r < 0) {
                free(v);
                return r;
        }
        free(t->rules);
        t->rules = v;
        t->n--;
        return 0;
}

void policy_done(PolicyTable *t) {
        free(t->rules);
        t->rules = NULL;
        t->n = 0;
}

/* ---- state files ---- */

int policy_state_path(const char *state_file, const char *name, char *buf, size_t len) {
        char dir[PATH_MAX];

        if (!state_file || !state_file[0]) {
                if (len)
                        buf[0] = 0;
                return 0;
        }
        if ((size_t) snprintf(dir, sizeof(dir), "%s", state_file) >= sizeof(dir) ||
            (size_t) snprintf(buf, len, "%s/%s", dirname(dir), name) >= len)
                return -ENAMETOOLONG;
        return 0;
}

/* An integer member of @o in 1..@max into *ret. */
static int get_uint(json_object *o, const char *key, uint32_t max, uint32_t *ret, char *err, size_t errlen) {
        json_object *v;
        int64_t n;

        if (!json_object_object_get_ex(o, key, &v))
                return set_err(err, errlen, "\"%s\" is missing", key);
        if (!json_object_is_type(v, json_type_int))
                return set_err(err, errlen, "\"%s\" is not an integer", key);
        n = json_object_get_int64(v);
        if (n < 1 || (uint64_t) n > max)
                return set_err(err, errlen, "\"%s\" is out of range (1..%" PRIu32 ")", key, max);
        *ret = (uint32_t) n;
        return 0;
}

/* Only the keys @keys (NULL terminated) in @o. */
static int only_keys(json_object *o, const char *const *keys, const char *what, char *err, size_t errlen) {
        json_object_object_foreach(o, k, v) {
                bool known = false;
                char buf[48];

                (void) v;
                for (size_t i = 0; keys[i]; i++)
                        if (strcmp(k, keys[i]) == 0)
                                known = true;
                if (!known)
                        return set_err(err, errlen, "unknown key \"%s\" in %s", shown(k, buf), what);
        }
        return 0;
}

static int parse_policy_state(json_object *root, PolicyTable *t, char *err, size_t errlen) {
        static const char *const top_keys[] = { "next_id", "rules", NULL };
        static const char *const rule_keys[] = { "id", "rule", NULL };
        json_object *rules;
        uint32_t next_id;
        size_t n;
        int r;

        if (!json_object_is_type(root, json_type_object))
                return set_err(err, errlen, "not a JSON object");
        if ((r = only_keys(root, top_keys, "the file", err, errlen)) < 0 ||
            (r = get_uint(root, "next_id", UINT32_MAX, &next_id, err, errlen)) < 0)
                return r;
        if (!json_object_object_get_ex(root, "rules", &rules) || !json_object_is_type(rules, json_type_array))
                return set_err(err, errlen, "\"rules\" is missing or not an array");
        n = json_object_array_length(rules);
        if (n > POLICY_MAX_RULES)
                return set_err(err, errlen, "more than %d rules", POLICY_MAX_RULES);
        t->rules = calloc(n ? n : 1, sizeof(*t->rules));
        if (!t->rules)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                json_object *o = json_object_array_get_idx(rules, i), *text;
                char e[256];
                uint32_t id;

                if (!json_object_is_type(o, json_type_object))
                        return set_err(err, errlen, "rule %zu is not an object", i + 1);
                if ((r = only_keys(o, rule_keys, "a rule", err, errlen)) < 0 ||
                    (r = get_uint(o, "id", UINT32_MAX - 1, &id, err, errlen)) < 0)
                        return r;
                if (id >= next_id)
                        return set_err(err, errlen, "rule id %" PRIu32 " is not below next_id %" PRIu32, id, next_id);
                if (!json_object_object_get_ex(o, "rule", &text) || !json_object_is_type(text, json_type_string))
                        return set_err(err, errlen, "rule %" PRIu32 ": \"rule\" is missing or not a string", id);
                if (policy_rule_parse(json_object_get_string(text), &t->rules[i], NULL, e, sizeof(e)) < 0)
                        return set_err(err, errlen, "rule %" PRIu32 ": %s", id, e);
                t->rules[i].id = id;
                for (size_t j = 0; j < i; j++) {
                        if (t->rules[j].id == id)
                                return set_err(err, errlen, "rule id %" PRIu32 " twice", id);
                        if (rule_same(&t->rules[j], &t->rules[i]))
                                return set_err(err, errlen, "rules %" PRIu32 " and %" PRIu32 " are the same",
                                               t->rules[j].id, id);
                }
                t->n = i + 1;
        }
        t->next_id = next_id;
        return 0;
}

/* Read @path as JSON and hand it to @parse; the shared part of policy_load() and
 * pnet_load(). @what names the table in the log ("policy rules", "pnet entries"). */
static int load_state(const char *path, const char *what, void *t,
                      int (*parse)(json_object *root, void *t, char *err, size_t errlen),
                      void (*done)(void *t), int *ret_load_error) {
        char err[300], aside[PATH_MAX + 48];
        json_object *root = NULL;
        int r;

        r = read_json_file(path, STATE_MAX_SIZE, &root, err, sizeof(err));
        if (r == -ENOENT)
                return 0;
        if (r == -ENOMEM)
                return log_error_errno(r, "Out of memory.");
        if (r < 0 && r != -EBADMSG) {
                log_error_errno(r, "Cannot read state file %s: %s; starting with no %s, leaving the file "
                                "alone and refusing changes until smcd restarts.", path,
                                r == -EINVAL ? "not a regular file" : strerror(-r), what);
                *ret_load_error = r;
                return 0;
        }
        if (r == 0) {
                r = parse(root, t, err, sizeof(err));
                json_object_put(root);
                if (r == 0) {
                        log_debug("Loaded %s from %s.", what, path);
                        return 0;
                }
                done(t);
                if (r == -ENOMEM)
                        return log_error_errno(r, "Out of memory.");
        }
        r = move_aside_corrupt(path, aside, sizeof(aside));
        if (r < 0)
                log_error_errno(r, "Corrupt state file %s (%s): starting with no %s; cannot move it aside: %m",
                                path, err, what);
        else
                log_error("Corrupt state file %s (%s): starting with no %s; moved it to %s.", path, err, what, aside);
        return 0;
}

static int policy_parse_cb(json_object *root, void *t, char *err, size_t errlen) {
        return parse_policy_state(root, t, err, errlen);
}

static void policy_done_cb(void *t) {
        policy_done(t);
        ((PolicyTable *) t)->next_id = 1;
}

int policy_load(PolicyTable *t, const char *path) {
        t->next_id = 1;
        snprintf(t->path, sizeof(t->path), "%s", path ? path : "");
        if (!t->path[0])
                return 0;
        return load_state(t->path, "policy rules", t, policy_parse_cb, policy_done_cb, &t->load_error);
}

/* ---- pnet ---- */

/* A device name: 1..@max bytes of printable ASCII without '/', ':' or space, not "."
 * or "..". */
static bool devname_valid(const char *s, size_t max) {
        size_t n = strlen(s);

        if (n == 0 || n > max || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
                return false;
        for (size_t i = 0; i < n; i++)
                if (s[i] <= 0x20 || s[i] >= 0x7f || s[i] == '/' || s[i] == ':')
                        return false;
        return true;
}

int pnet_entry_parse(const char *netdev, const char *ibdev, uint32_t port, const char *pnetid, PnetEntry *ret,
                     char *err, size_t errlen) {
        PnetEntry e = {};
        char buf[48];
        size_t n;

        if (!devname_valid(netdev, PNET_NETDEV_MAX - 1))
                return set_err(err, errlen, "netdev: bad name \"%s\" (1..%d bytes of printable ASCII without '/', "
                               "':' or space, not \".\" or \"..\")", shown(netdev, buf), PNET_NETDEV_MAX - 1);
        if (!devname_valid(ibdev, PNET_IBDEV_MAX - 1))
                return set_err(err, errlen, "ibdev: bad name \"%s\" (1..%d bytes of printable ASCII without '/', "
                               "':' or space, not \".\" or \"..\")", shown(ibdev, buf), PNET_IBDEV_MAX - 1);
        if (port < 1 || port > 255)
                return set_err(err, errlen, "port: expected 1..255, not %" PRIu32, port);
        n = pnetid ? strlen(pnetid) : 0;
        if (n > PNET_ID_MAX)
                return set_err(err, errlen, "pnetid: \"%s\" is longer than %d characters", shown(pnetid, buf),
                               PNET_ID_MAX);
        for (size_t i = 0; i < n; i++) {
                if (!isascii((unsigned char) pnetid[i]) || !isalnum((unsigned char) pnetid[i]))
                        return set_err(err, errlen, "pnetid: \"%s\" has a character other than A-Z and 0-9",
                                       shown(pnetid, buf));
                e.pnetid[i] = (char) toupper((unsigned char) pnetid[i]);
        }
        snprintf(e.netdev, sizeof(e.netdev), "%s", netdev);
        snprintf(e.ibdev, sizeof(e.ibdev), "%s", ibdev);
        e.port = (uint8_t) port;
        *ret = e;
        return 0;
}

/* Can @e join @t (not its own netdev's entry)? -EINVAL with the reason if not. */
static int pnet_check(const PnetEntry *v, size_t n, const PnetEntry *e, char *err, size_t errlen) {
        for (size_t i = 0; i < n; i++) {
                if (strcmp(v[i].netdev, e->netdev) == 0)
                        return set_err(err, errlen, "netdev %s has an entry already (%s port %u): del it first",
                                       e->netdev, v[i].ibdev, (unsigned) v[i].port);
                if (strcmp(v[i].ibdev, e->ibdev) == 0 && v[i].port == e->port && v[i].pnetid[0] && e->pnetid[0] &&
                    strcmp(v[i].pnetid, e->pnetid) != 0)
                        return set_err(err, errlen, "%s port %u belongs to pnetid %s already (netdev %s), not %s",
                                       e->ibdev, (unsigned) e->port, v[i].pnetid, v[i].netdev, e->pnetid);
        }
        return 0;
}

static json_object *pnet_array(const PnetEntry *v, size_t n) {
        json_object *a = json_object_new_array();

        if (!a)
                return NULL;
        for (size_t i = 0; i < n; i++) {
                json_object *o = json_object_new_object();

                if (!o || json_add(o, "netdev", json_object_new_string(v[i].netdev)) < 0 ||
                    json_add(o, "ibdev", json_object_new_string(v[i].ibdev)) < 0 ||
                    json_add(o, "port", json_object_new_uint64(v[i].port)) < 0 ||
                    json_add_str_or_null(o, "pnetid", v[i].pnetid[0] ? v[i].pnetid : NULL) < 0 ||
                    json_object_array_add(a, o) < 0) {
                        json_object_put(o);
                        json_object_put(a);
                        return NULL;
                }
        }
        return a;
}

json_object *pnet_to_json(const PnetTable *t) {
        return pnet_array(t->v, t->n);
}

static int pnet_save(const char *path, const PnetEntry *v, size_t n) {
        json_object *root, *a;

        if (!path[0])
                return 0;
        root = json_object_new_object();
        a = pnet_array(v, n);
        if (!root || !a || json_object_object_add(root, "entries", a) < 0) {
                json_object_put(root);
                json_object_put(a);
                return -ENOMEM;
        }
        return save_json(path, root);
}

int pnet_add(PnetTable *t, const char *netdev, const char *ibdev, uint32_t port, const char *pnetid, char *err,
             size_t errlen) {
        PnetEntry e, *v;
        size_t pos;
        int r;

        r = pnet_entry_parse(netdev, ibdev, port, pnetid, &e, err, errlen);
        if (r < 0)
                return r;
        r = pnet_check(t->v, t->n, &e, err, errlen);
        if (r < 0)
                return r;
        if (t->n >= PNET_MAX_ENTRIES)
                return set_err(err, errlen, "the pnet table is full (%d entries)", PNET_MAX_ENTRIES);
        for (pos = 0; pos < t->n && strcmp(t->v[pos].netdev, e.netdev) < 0; pos++)
                ;
        v = array_with(t->v, t->n, sizeof(*v), pos, &e);
        if (!v)
                return -ENOMEM;
        r = pnet_save(t->path, v, t->n + 1);
        if (r < 0) {
                free(v);
                return r;
        }
        free(t->v);
        t->v = v;
        t->n++;
        return 0;
}

int pnet_del(PnetTable *t, const char *netdev) {
        PnetEntry *v = NULL;
        size_t i;
        int r;

        for (i = 0; i < t->n && strcmp(t->v[i].netdev, netdev) != 0; i++)
                ;
        if (i == t->n)
                return -ENOENT;
        r = array_without(t->v, t->n, sizeof(*v), i, (void **) &v);
        if (r < 0)
                return r;
        r = pnet_save(t->path, v, t->n - 1);
        if (r < 0) {
                free(v);
                return r;
        }
        free(t->v);
        t->v = v;
        t->n--;
        return 0;
}

void pnet_done(PnetTable *t) {
        free(t->v);
        t->v = NULL;
        t->n = 0;
}

static int parse_pnet_state(json_object *root, PnetTable *t, char *err, size_t errlen) {
        static const char *const top_keys[] = { "entries", NULL };
        static const char *const entry_keys[] = { "netdev", "ibdev", "port", "pnetid", NULL };
        json_object *entries;
        size_t n;
        int r;

        if (!json_object_is_type(root, json_type_object))
                return set_err(err, errlen, "not a JSON object");
        if ((r = only_keys(root, top_keys, "the file", err, errlen)) < 0)
                return r;
        if (!json_object_object_get_ex(root, "entries", &entries) || !json_object_is_type(entries, json_type_array))
                return set_err(err, errlen, "\"entries\" is missing or not an array");
        n = json_object_array_length(entries);
        if (n > PNET_MAX_ENTRIES)
                return set_err(err, errlen, "more than %d entries", PNET_MAX_ENTRIES);
        t->v = calloc(n ? n : 1, sizeof(*t->v));
        if (!t->v)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                json_object *o = json_object_array_get_idx(entries, i), *nd, *ib, *pid;
                char e[256];
                uint32_t port;
                PnetEntry entry;
                size_t pos;

                if (!json_object_is_type(o, json_type_object))
                        return set_err(err, errlen, "entry %zu is not an object", i + 1);
                if ((r = only_keys(o, entry_keys, "an entry", err, errlen)) < 0)
                        return r;
                if (!json_object_object_get_ex(o, "netdev", &nd) || !json_object_is_type(nd, json_type_string) ||
                    !json_object_object_get_ex(o, "ibdev", &ib) || !json_object_is_type(ib, json_type_string))
                        return set_err(err, errlen, "entry %zu: \"netdev\" or \"ibdev\" is missing or not a string",
                                       i + 1);
                if ((r = get_uint(o, "port", 255, &port, err, errlen)) < 0)
                        return r;
                if (!json_object_object_get_ex(o, "pnetid", &pid) ||
                    !(json_object_is_type(pid, json_type_null) || json_object_is_type(pid, json_type_string)))
                        return set_err(err, errlen, "entry %zu: \"pnetid\" is missing or not a string or null", i + 1);
                if (pnet_entry_parse(json_object_get_string(nd), json_object_get_string(ib), port,
                                     pid ? json_object_get_string(pid) : NULL, &entry, e, sizeof(e)) < 0)
                        return set_err(err, errlen, "entry %zu: %s", i + 1, e);
                if (json_object_is_type(pid, json_type_string) && !entry.pnetid[0])
                        return set_err(err, errlen, "entry %zu: \"pnetid\" is empty (null for none)", i + 1);
                if (pnet_check(t->v, t->n, &entry, e, sizeof(e)) < 0)
                        return set_err(err, errlen, "entry %zu: %s", i + 1, e);
                /* sorted, whatever the file's order */
                for (pos = 0; pos < t->n && strcmp(t->v[pos].netdev, entry.netdev) < 0; pos++)
                        ;
                memmove(t->v + pos + 1, t->v + pos, (t->n - pos) * sizeof(*t->v));
                t->v[pos] = entry;
                t->n++;
        }
        return 0;
}

static int pnet_parse_cb(json_object *root, void *t, char *err, size_t errlen) {
        return parse_pnet_state(root, t, err, errlen);
}

static void pnet_done_cb(void *t) {
        pnet_done(t);
}

int pnet_load(PnetTable *t, const char *path) {
        snprintf(t->path, sizeof(t->path), "%s", path ? path : "");
        if (!t->path[0])
                return 0;
        return load_state(t->path, "pnet entries", t, pnet_parse_cb, pnet_done_cb, &t->load_error);
}
