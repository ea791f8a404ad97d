/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libFuzzer target: smcd's policy and pnet tables (smcd/policy.c): the state file
 * loaders policy_load() and pnet_load(), the rule parser policy_rule_parse() (the
 * text of "smcctl policy add" over D-Bus and of every rule in policy.json) and the
 * pnet entry validator pnet_entry_parse().
 *
 * Input: byte 0 % 4 selects
 *   0  policy.json: written to a private temporary directory and loaded. Refused: the
 *      table is empty and the file was moved aside. Accepted: every rule formats to a
 *      text that parses to the same rule; the JSON view is built; deleting the first
 *      rule saves the file, and loading it again gives the same rules.
 *   1  pnet.json: the same with pnet_load() and pnet_del().
 *   2  a rule (the rest, as a C string): policy_rule_parse(); accepted: its canonical
 *      text parses to the same rule, policy_add() to an empty table takes it (at
 *      position 1 if it had one), and a few addresses go through policy_match().
 *   3  a pnet entry: netdev, ibdev, pnetid separated by NUL bytes, port = the byte
 *      after byte 0; pnet_entry_parse(), then pnet_add() to an empty table.
 * LeakSanitizer (on in libFuzzer) reports any leak of rules, entries or json-c objects.
 */

#include <arpa/inet.h>
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz.h"
#include "policy.h"

static bool rule_eq(const PolicyRule *a, const PolicyRule *b) {
        char x[POLICY_RULE_MAX], y[POLICY_RULE_MAX];

        return a->id == b->id && strcmp(policy_rule_format(a, x, sizeof(x)), policy_rule_format(b, y, sizeof(y))) == 0;
}

static void check_rule_roundtrip(const PolicyRule *r) {
        char text[POLICY_RULE_MAX], err[512];
        PolicyRule again;

        policy_rule_format(r, text, sizeof(text));
        if (policy_rule_parse(text, &again, NULL, err, sizeof(err)) < 0) {
                fprintf(stderr, "the canonical text \"%s\" is refused: %s\n", text, err);
                abort();
        }
        FUZZ_CHECK(again.scope == r->scope && again.action == r->action && again.has_local_port == r->has_local_port &&
                   again.has_peer_port == r->has_peer_port && again.has_prefix == r->has_prefix);
        if (r->has_local_port)
                FUZZ_CHECK(memcmp(again.local_port, r->local_port, sizeof(r->local_port)) == 0);
        if (r->has_peer_port)
                FUZZ_CHECK(memcmp(again.peer_port, r->peer_port, sizeof(r->peer_port)) == 0);
        if (r->has_prefix)
                FUZZ_CHECK(again.family == r->family && again.prefix_len == r->prefix_len &&
                           memcmp(again.prefix, r->prefix, sizeof(r->prefix)) == 0);
}

static void fuzz_policy_file(const uint8_t *data, size_t size) {
        PolicyTable t = {}, t2 = {};
        char p[4096];
        json_object *j;

        snprintf(p, sizeof(p), "%s", fuzz_write_file(POLICY_STATE_NAME, data, size));
        FUZZ_CHECK(policy_load(&t, p) == 0);
        FUZZ_CHECK(strcmp(t.path, p) == 0 && t.load_error == 0);
        if (access(p, F_OK) < 0) {
                FUZZ_CHECK(t.n == 0 && t.next_id == 1);
                goto out;
        }
        FUZZ_CHECK(t.n <= POLICY_MAX_RULES);
        for (size_t i = 0; i < t.n; i++) {
                FUZZ_CHECK(t.rules[i].id != 0 && t.rules[i].id < t.next_id);
                check_rule_roundtrip(&t.rules[i]);
        }
        j = policy_to_json(&t);
        FUZZ_CHECK(j);
        (void) json_object_to_json_string(j);
        json_object_put(j);
        if (t.n > 0) {
                FUZZ_CHECK(policy_del(&t, t.rules[0].id) == 0);
                FUZZ_CHECK(policy_load(&t2, p) == 0);
                FUZZ_CHECK(access(p, F_OK) == 0);
                FUZZ_CHECK(t2.n == t.n && t2.next_id == t.next_id);
                for (size_t i = 0; i < t.n; i++)
                        FUZZ_CHECK(rule_eq(&t.rules[i], &t2.rules[i]));
        }
out:
        policy_done(&t);
        policy_done(&t2);
        fuzz_clean_tmpdir();
}

static void fuzz_pnet_file(const uint8_t *data, size_t size) {
        PnetTable t = {}, t2 = {};
        char p[4096];
        json_object *j;

        snprintf(p, sizeof(p), "%s", fuzz_write_file(PNET_STATE_NAME, data, size));
        FUZZ_CHECK(pnet_load(&t, p) == 0);
        FUZZ_CHECK(strcmp(t.path, p) == 0 && t.load_error == 0);
        if (access(p, F_OK) < 0) {
                FUZZ_CHECK(t.n == 0);
                goto out;
        }
        FUZZ_CHECK(t.n <= PNET_MAX_ENTRIES);
        for (size_t i = 0; i < t.n; i++) {
                PnetEntry e;
                char err[512];

                FUZZ_CHECK(i == 0 || strcmp(t.v[i - 1].netdev, t.v[i].netdev) < 0);
                FUZZ_CHECK(pnet_entry_parse(t.v[i].netdev, t.v[i].ibdev, t.v[i].port, t.v[i].pnetid, &e, err,
                                            sizeof(err)) == 0);
                FUZZ_CHECK(memcmp(&e, &t.v[i], sizeof(e)) == 0 ||
                           (strcmp(e.netdev, t.v[i].netdev) == 0 && strcmp(e.ibdev, t.v[i].ibdev) == 0 &&
                            e.port == t.v[i].port && strcmp(e.pnetid, t.v[i].pnetid) == 0));
        }
        j = pnet_to_json(&t);
        FUZZ_CHECK(j);
        (void) json_object_to_json_string(j);
        json_object_put(j);
        if (t.n > 0) {
                char netdev[PNET_NETDEV_MAX];

                snprintf(netdev, sizeof(netdev), "%s", t.v[0].netdev);
                FUZZ_CHECK(pnet_del(&t, netdev) == 0);
                FUZZ_CHECK(pnet_load(&t2, p) == 0);
                FUZZ_CHECK(access(p, F_OK) == 0);
                FUZZ_CHECK(t2.n == t.n);
                for (size_t i = 0; i < t.n; i++)
                        FUZZ_CHECK(strcmp(t.v[i].netdev, t2.v[i].netdev) == 0 &&
                                   strcmp(t.v[i].ibdev, t2.v[i].ibdev) == 0 && t.v[i].port == t2.v[i].port &&
                                   strcmp(t.v[i].pnetid, t2.v[i].pnetid) == 0);
        }
out:
        pnet_done(&t);
        pnet_done(&t2);
        fuzz_clean_tmpdir();
}

static void addr(struct smc_ctl_addr *a, int family, const char *text, uint16_t port) {
        memset(a, 0, sizeof(*a));
        a->family = (uint16_t) family;
        a->port = port;
        FUZZ_CHECK(inet_pton(family, text, a->addr) == 1);
}

static void fuzz_rule(const char *text) {
        PolicyTable t = { .next_id = 1 };
        char err[512] = "", canon[POLICY_RULE_MAX];
        struct smc_ctl_addr l4, p4, l6, p6, pm;
        size_t pos = 0;
        PolicyRule r;
        uint32_t id = 0;
        int q;

        q = policy_rule_parse(text, &r, &pos, err, sizeof(err));
        FUZZ_CHECK(q == 0 || q == -EINVAL);
        if (q < 0) {
                FUZZ_CHECK(err[0] != 0);
                FUZZ_CHECK(policy_add(&t, text, &id, err, sizeof(err)) == -EINVAL && t.n == 0);
                return;
        }
        FUZZ_CHECK(pos <= POLICY_MAX_RULES);
        check_rule_roundtrip(&r);
        /* the canonical text is what policy.json stores: no position in it */
        policy_rule_format(&r, canon, sizeof(canon));
        q = policy_add(&t, text, &id, err, sizeof(err));
        FUZZ_CHECK(pos > 1 ? q == -EINVAL : (q == 0 && id == 1 && t.n == 1));
        if (q == 0) {
                addr(&l4, AF_INET, "10.0.0.1", 40000);
                addr(&p4, AF_INET, "192.168.1.2", 80);
                addr(&l6, AF_INET6, "fd00::1", 0);
                addr(&p6, AF_INET6, "2001:db8::2", 443);
                addr(&pm, AF_INET6, "::ffff:192.168.1.2", 8080);
                (void) policy_match(&t, POLICY_SCOPE_CONNECT, &l4, &p4);
                (void) policy_match(&t, POLICY_SCOPE_CONNECT, &l6, &p6);
                (void) policy_match(&t, POLICY_SCOPE_CONNECT, &l6, &pm);
                (void) policy_match(&t, POLICY_SCOPE_LISTEN, &l4, NULL);
                (void) policy_match(&t, POLICY_SCOPE_LISTEN, &l6, NULL);
                /* the same rule again is refused */
                FUZZ_CHECK(policy_add(&t, canon, &id, err, sizeof(err)) == -EINVAL && t.n == 1);
        }
        policy_done(&t);
}

static void fuzz_pnet_entry(uint8_t port, const char *s, size_t n) {
        const char *netdev = s, *ibdev = "", *pnetid = NULL;
        PnetTable t = {};
        char err[512] = "";
        PnetEntry e;
        int q;

        if (strlen(netdev) < n) {
                ibdev = netdev + strlen(netdev) + 1;
                if ((size_t) (ibdev - s) + strlen(ibdev) < n)
                        pnetid = ibdev + strlen(ibdev) + 1;
        }
        q = pnet_entry_parse(netdev, ibdev, port, pnetid, &e, err, sizeof(err));
        FUZZ_CHECK(q == 0 || q == -EINVAL);
        if (q < 0) {
                FUZZ_CHECK(err[0] != 0);
                return;
        }
        FUZZ_CHECK(pnet_add(&t, netdev, ibdev, port, pnetid, err, sizeof(err)) == 0 && t.n == 1);
        FUZZ_CHECK(pnet_add(&t, netdev, ibdev, port, pnetid, err, sizeof(err)) == -EINVAL && t.n == 1);
        FUZZ_CHECK(pnet_del(&t, e.netdev) == 0 && t.n == 0);
        pnet_done(&t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        char *s;

        if (size < 1)
                return 0;
        switch (data[0] % 4) {
        case 0:
                fuzz_policy_file(data + 1, size - 1);
                return 0;
        case 1:
                fuzz_pnet_file(data + 1, size - 1);
                return 0;
        case 2:
                s = fuzz_cstring(data + 1, size - 1);
                fuzz_rule(s);
                free(s);
                return 0;
        default:
                if (size < 2)
                        return 0;
                s = fuzz_cstring(data + 2, size - 2);
                fuzz_pnet_entry(data[1], s, size - 2);
                free(s);
                return 0;
        }
}
