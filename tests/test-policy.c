/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Unit test of smcd's policy and pnet tables (smcd/policy.c): the rule parser (good
 * rules and their canonical text; bad input of every kind refused with a reason that
 * names the bad word), the matcher (scope, port ranges, IPv4/IPv6/IPv4-mapped
 * prefixes, first match wins, hit counters), add/del with positions, ids and
 * duplicates, the pnet validator, and both state files: save, load, a failed save
 * changing nothing, corrupt files moved aside.
 */

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fileio.h"
#include "log.h"
#include "policy.h"

#include "check.h"

/* ---- parser ---- */

static void good(const char *text, const char *canonical) {
        char err[300] = "", buf[POLICY_RULE_MAX];
        PolicyRule r, again;
        size_t pos;
        int q;

        q = policy_rule_parse(text, &r, &pos, err, sizeof(err));
        CHECK(q == 0, "\"%s\" refused: %s", text, err);
        if (q < 0)
                return;
        CHECK(strcmp(policy_rule_format(&r, buf, sizeof(buf)), canonical) == 0, "\"%s\" -> \"%s\", want \"%s\"",
              text, buf, canonical);
        /* the canonical text parses to the same rule (what the state file relies on) */
        q = policy_rule_parse(buf, &again, NULL, err, sizeof(err));
        CHECK(q == 0 && memcmp(&r, &again, sizeof(r)) == 0, "canonical \"%s\" does not round-trip: %s", buf, err);
}

/* @text is refused with -EINVAL and a reason containing @want. */
static void bad(const char *text, const char *want) {
        char err[300] = "";
        PolicyRule r;
        size_t pos;
        int q;

        q = policy_rule_parse(text, &r, &pos, err, sizeof(err));
        CHECK(q == -EINVAL, "\"%s\" accepted (%d)", text, q);
        CHECK(strstr(err, want), "\"%s\": reason \"%s\" lacks \"%s\"", text, err, want);
}

static void test_parser(void) {
        char err[300], longrule[POLICY_RULE_MAX + 10];
        PolicyRule r;
        size_t pos = 99;

        good("action tcp", "action tcp");
        good("action smc", "action smc");
        good("both action smc", "action smc");
        good("connect peer-port 5000 action tcp", "connect peer-port 5000 action tcp");
        good("  action tcp \t peer-port 80-90   connect  ", "connect peer-port 80-90 action tcp");
        good("listen local-port 1-65535 prefix 0.0.0.0/0 action tcp",
             "listen local-port 1-65535 prefix 0.0.0.0/0 action tcp");
        good("prefix 10.0.0.0/8 action tcp local-port 22", "local-port 22 prefix 10.0.0.0/8 action tcp");
        good("prefix 10.1.2.3 action tcp", "prefix 10.1.2.3/32 action tcp");
        good("prefix fd00::/8 action tcp", "prefix fd00::/8 action tcp");
        good("prefix FD00:0::/8 action tcp", "prefix fd00::/8 action tcp");
        good("prefix ::1 action smc", "prefix ::1/128 action smc");
        good("prefix ::/0 action tcp", "prefix ::/0 action tcp");
        good("prefix 172.16.0.0/12 action tcp", "prefix 172.16.0.0/12 action tcp");
        good("connect local-port 1000-2000 peer-port 3000 prefix 192.168.1.0/24 action tcp",
             "connect local-port 1000-2000 peer-port 3000 prefix 192.168.1.0/24 action tcp");
        good("peer-port 7-7 action tcp", "peer-port 7 action tcp");

        CHECK(policy_rule_parse("position 3 action tcp", &r, &pos, err, sizeof(err)) == 0 && pos == 3,
              "position 3: %zu", pos);
        CHECK(policy_rule_parse("action tcp", &r, &pos, err, sizeof(err)) == 0 && pos == 0, "no position: %zu", pos);

        bad("", "missing \"action smc|tcp\"");
        bad("   ", "missing \"action smc|tcp\"");
        bad("connect peer-port 80", "missing \"action smc|tcp\"");
        bad("action", "\"action\" needs a value");
        bad("action udp", "action: expected smc or tcp, not \"udp\"");
        bad("action TCP", "not \"TCP\"");
        bad("action tcp action smc", "\"action\" is given twice");
        bad("frobnicate action tcp", "unknown word \"frobnicate\"");
        bad("action tcp port 80", "unknown word \"port\"");
        bad("Connect action tcp", "unknown word \"Connect\"");
        bad("connect listen action tcp", "\"listen\": the scope is given twice (\"connect\" before)");
        bad("connect connect action tcp", "the scope is given twice");
        bad("local-port 80 local-port 81 action tcp", "\"local-port\" is given twice");
        bad("peer-port 80 peer-port 80 action tcp", "\"peer-port\" is given twice");
        bad("prefix 10.0.0.0/8 prefix 11.0.0.0/8 action tcp", "\"prefix\" is given twice");
        bad("local-port", "\"local-port\" needs a value");
        bad("action tcp peer-port", "\"peer-port\" needs a value");
        bad("action tcp prefix", "\"prefix\" needs a value");
        bad("local-port 0 action tcp", "local-port: bad port \"0\"");
        bad("local-port 65536 action tcp", "local-port: bad port \"65536\"");
        bad("local-port 99999999999 action tcp", "local-port: bad port");
        bad("peer-port http action tcp", "peer-port: bad port \"http\"");
        bad("peer-port -5 action tcp", "peer-port: bad port \"-5\"");
        bad("peer-port 5- action tcp", "peer-port: bad port \"5-\"");
        bad("peer-port 1-2-3 action tcp", "peer-port: bad port \"1-2-3\"");
        bad("peer-port +5 action tcp", "peer-port: bad port \"+5\"");
        bad("peer-port 0-5 action tcp", "peer-port: bad port \"0-5\"");
        bad("peer-port 90-80 action tcp", "peer-port: bad range \"90-80\"");
        bad("prefix 10.0.0.0/33 action tcp", "prefix: bad length in \"10.0.0.0/33\"");
        bad("prefix fd00::/129 action tcp", "prefix: bad length in \"fd00::/129\"");
        bad("prefix 10.0.0.0/ action tcp", "prefix: bad length");
        bad("prefix 10.0.0.0/08 action tcp", "prefix: bad length");
        bad("prefix 10.0.0.0/-1 action tcp", "prefix: bad length");
        bad("prefix 10.0.0/8 action tcp", "prefix: bad address \"10.0.0\"");
        bad("prefix 10.0.0.256/32 action tcp", "prefix: bad address \"10.0.0.256\"");
        bad("prefix example.com/8 action tcp", "prefix: bad address \"example.com\"");
        bad("prefix /8 action tcp", "prefix: bad address in \"/8\"");
        bad("prefix fd00:::1/64 action tcp", "prefix: bad address \"fd00:::1\"");
        bad("prefix 10.1.0.0/8 action tcp", "\"10.1.0.0/8\" has bits set beyond /8 (did you mean 10.0.0.0/8?)");
        bad("prefix 192.168.1.1/24 action tcp", "did you mean 192.168.1.0/24?");
        bad("prefix fd00::1/8 action tcp", "did you mean fd00::/8?");
        bad("prefix ::ffff:10.0.0.0/104 action tcp", "is IPv4-mapped: write the IPv4 prefix");
        bad("listen peer-port 80 action tcp", "\"peer-port\" never matches a listen");
        bad("position 0 action tcp", "position: bad number \"0\"");
        bad("position x action tcp", "position: bad number \"x\"");
        bad("position 1 position 2 action tcp", "\"position\" is given twice");
        bad("position 99999 action tcp", "position: bad number \"99999\"");
        bad("action tcp\n", "byte 11 (0x0a) is not printable ASCII");
        bad("action tcp \xc3\xa9", "is not printable ASCII");
        memset(longrule, 'a', sizeof(longrule) - 1);
        longrule[sizeof(longrule) - 1] = 0;
        bad(longrule, "rule too long");
        /* a long unknown word is shown shortened */
        memset(longrule, 'x', 100);
        strcpy(longrule + 100, " action tcp");
        bad(longrule, "unknown word \"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...\"");

        /* "position" is refused where it has no meaning (the state file) */
        CHECK(policy_rule_parse("position 1 action tcp", &r, NULL, err, sizeof(err)) == -EINVAL &&
              strstr(err, "\"position\" is not part of a stored rule"), "position without ret_position: %s", err);
}

/* ---- matcher ---- */

static struct smc_ctl_addr addr(const char *ip, uint16_t port) {
        struct smc_ctl_addr a = {};

        if (inet_pton(AF_INET, ip, a.addr) == 1)
                a.family = AF_INET;
        else if (inet_pton(AF_INET6, ip, a.addr) == 1)
                a.family = AF_INET6;
        else
                abort();
        a.port = port;
        return a;
}

static void add_ok(PolicyTable *t, const char *text, uint32_t want_id) {
        char err[300] = "";
        uint32_t id = 0;
        int q = policy_add(t, text, &id, err, sizeof(err));

        CHECK(q == 0 && id == want_id, "add \"%s\": %d (%s), id %u want %u", text, q, err, id, want_id);
}

/* The id of the rule that decides, 0 for none. */
static uint32_t decide(PolicyTable *t, PolicyScope where, const struct smc_ctl_addr *local,
                       const struct smc_ctl_addr *peer) {
        const PolicyRule *r = policy_match(t, where, local, peer);

        return r ? r->id : 0;
}

static void test_matcher(void) {
        PolicyTable t = {};
        struct smc_ctl_addr unbound = {}, lo = addr("127.0.0.1", 0), any4 = addr("0.0.0.0", 5000),
                            any6 = addr("::", 5000);
        struct smc_ctl_addr p;

        policy_load(&t, NULL); /* not persisted */
        CHECK(decide(&t, POLICY_SCOPE_CONNECT, &unbound, &lo) == 0, "empty table matches");

        add_ok(&t, "connect peer-port 5000 action tcp", 1);                 /* 1 */
        add_ok(&t, "listen local-port 6000-6010 action tcp", 2);            /* 2 */
        add_ok(&t, "local-port 7000 action tcp", 3);                        /* 3: both */
        add_ok(&t, "connect prefix 10.0.0.0/8 action tcp", 4);              /* 4 */
        add_ok(&t, "connect prefix fd00::/8 action tcp", 5);                /* 5 */
        add_ok(&t, "connect prefix 172.16.0.0/12 peer-port 80 action tcp", 6);
        add_ok(&t, "prefix 192.168.0.0/16 action smc", 7);
        add_ok(&t, "prefix 192.168.0.0/16 peer-port 22 action tcp", 8);     /* shadowed by 7 */

        p = addr("127.0.0.1", 5000);
        CHECK(decide(&t, POLICY_SCOPE_CONNECT, &unbound, &p) == 1, "connect to :5000");
        p.port = 5001;
        CHECK(decide(&t, POLICY_SCOPE_CONNECT, &unbound, &p) == 0, "connect to :5001");
        /* a connect rule does not apply at listen; a listener has no peer port */
        p = addr("127.0.0.1", 5000);
        CHECK(decide(&t, POLICY_SCOPE_LISTEN, &p, NULL) == 0, "listen on :5000");

        /* listen rule: bound port in range; at connect it does not apply */
        p = addr("0.0.0.0", 6005);
        CHECK(decide(&t, POLICY_SCOPE_LISTEN, &p, NULL) == 2, "listen on :6005");
        p.port = 6011;
        CHECK(decide(&t, POLICY_SCOPE_LISTEN, &p, NULL) == 0, "listen on :6011");
        p = addr("127.0.0.1", 6005);
        CHECK(decide(&t, POLICY_SCOPE_CONNECT, &unbound, &p) == 0, "connect to :6005");
        CHECK(decide(&t, POLICY_SCOPE_CONNECT, &p, &lo) == 0, "connect from :6005");

        /* local-port at connect: the bound source port; unbound never matches */
        p = addr("127.0.0.1", 7000);
        CHECK(decide(&t, POLICY_SCOPE_CONNECT, &p, &lo) == 3, "connect from :7000");
        CHECK(decide(&t, POLICY_SCOPE_CONNECT, &unbound, &p) == 0, "connect to :7000 unbound");
        CHECK(decide(&t, POLICY_SCOPE_LISTEN, &p, NULL) == 3, "listen on :7000 (both)");
        p.port = 0;
        CHECK(decide(&t, POLICY_SCOPE_CONNECT, &p, &lo) == 0, "bound to port 0");

        /* prefixes: IPv4, IPv4-mapped, IPv6 */
        p = addr("10.200.3.4", 1);
        CHECK(decide(&t, POLICY_SCOPE_CONNECT, &unbound, &p) == 4, "10.200.3.4");
        p = addr("::ffff:10.200.3.4", 1);
        CHECK(decide(&t, POLICY_SCOPE_CONNECT, &unbound, &p) == 4, "::ffff:10.200.3.4");
        p = addr("11.0.0.1", 1);
        CHECK(decide(&t, POLICY_SCOPE_CONNECT, &unbound, &p) == 0, "11.0.0.1");
        p = addr("fdab::1", 1);
        CHECK(decide(&t, POLICY_SCOPE_CONNECT, &unbound, &p) == 5, "fdab::1");
        p = addr("fe80::1", 1);
        CHECK(decide(&t, POLICY_SCOPE_CONNECT, &unbound, &p) == 0, "fe80::1");
        /* /12: 172.16.0.0 .. 172.31.255.255 */
        p = addr("172.31.255.255", 80);
        CHECK(decide(&t, POLICY_SCOPE_CONNECT, &unbound, &p) == 6, "172.31.255.255:80");
        p = addr("172.32.0.1", 80);
        CHECK(decide(&t, POLICY_SCOPE_CONNECT, &unbound, &p) == 0, "172.32.0.1:80");
        p = addr("172.16.0.1", 81);
        CHECK(decide(&t, POLICY_SCOPE_CONNECT, &unbound, &p) == 0, "172.16.0.1:81 (port field)");
        /* first match wins */
        p = addr("192.168.7.7", 22);
        CHECK(decide(&t, POLICY_SCOPE_CONNECT, &unbound, &p) == 7, "192.168.7.7:22: rule 7 first");

        /* at listen the prefix is matched against the bound address */
        p = addr("192.168.1.1", 9999);
        CHECK(decide(&t, POLICY_SCOPE_LISTEN, &p, NULL) == 7, "listen on 192.168.1.1");
        CHECK(decide(&t, POLICY_SCOPE_LISTEN, &any4, NULL) == 0, "listen on 0.0.0.0:5000");
        CHECK(decide(&t, POLICY_SCOPE_LISTEN, &any6, NULL) == 0, "listen on [::]:5000");

        /* hit counters */
        CHECK(t.rules[0].hits == 1 && t.rules[6].hits == 2 && t.rules[7].hits == 0,
              "hits %llu %llu %llu", (unsigned long long) t.rules[0].hits, (unsigned long long) t.rules[6].hits,
              (unsigned long long) t.rules[7].hits);

        /* wildcard listeners: 0.0.0.0/0 and ::/0 contain them */
        add_ok(&t, "position 1 listen prefix 0.0.0.0/0 local-port 5000 action tcp", 9);
        CHECK(decide(&t, POLICY_SCOPE_LISTEN, &any4, NULL) == 9, "0.0.0.0/0 holds 0.0.0.0");
        CHECK(decide(&t, POLICY_SCOPE_LISTEN, &any6, NULL) == 0, "0.0.0.0/0 does not hold ::");
        policy_done(&t);
}

/* ---- table operations and the state file ---- */

static char *slurp(const char *path) {
        char *text = NULL;

        if (read_regular_file(path, 1 << 20, &text, NULL) < 0)
                return NULL;
        return text;
}

static char *list(const PolicyTable *t) {
        json_object *o = policy_to_json(t);
        char *s = strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));

        json_object_put(o);
        return s;
}

static int count_aside(const char *dir, const char *name) {
        char prefix[64];
        struct dirent *de;
        DIR *d = opendir(dir);
        int n = 0;

        snprintf(prefix, sizeof(prefix), "%s.corrupt-", name);
        while (d && (de = readdir(d)))
                if (strncmp(de->d_name, prefix, strlen(prefix)) == 0)
                        n++;
        if (d)
                closedir(d);
        return n;
}

static void remove_aside(const char *dir) {
        struct dirent *de;
        DIR *d = opendir(dir);
        char p[PATH_MAX];

        while (d && (de = readdir(d)))
                if (strstr(de->d_name, ".corrupt-")) {
                        snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
                        unlink(p);
                }
        if (d)
                closedir(d);
}

static void write_text(const char *path, const char *text) {
        FILE *f = fopen(path, "w");

        fputs(text, f);
        fclose(f);
}

static void test_policy_table(const char *dir) {
        char path[PATH_MAX], err[300], *before, *file_before, *s;
        PolicyTable t = {}, u = {};
        uint32_t id;
        int q;

        CHECK(policy_state_path("/var/lib/smcd/tunables.json", POLICY_STATE_NAME, path, sizeof(path)) == 0 &&
              strcmp(path, "/var/lib/smcd/policy.json") == 0, "state path: %s", path);
        CHECK(policy_state_path("", POLICY_STATE_NAME, path, sizeof(path)) == 0 && path[0] == 0, "empty state path");
        snprintf(path, sizeof(path), "%s/tunables.json", dir);
        CHECK(policy_state_path(path, POLICY_STATE_NAME, path, sizeof(path)) == 0, "state path");

        CHECK(policy_load(&t, path) == 0 && t.n == 0, "load of a missing file");
        CHECK(access(path, F_OK) < 0, "nothing written by a load");
        add_ok(&t, "connect peer-port 5000 action tcp", 1);
        add_ok(&t, "listen local-port 6000 action tcp", 2);
        add_ok(&t, "position 1 prefix 10.0.0.0/8 action smc", 3);
        add_ok(&t, "position 4 action smc", 4); /* position count + 1 = append */
        CHECK(t.n == 4 && t.rules[0].id == 3 && t.rules[1].id == 1 && t.rules[2].id == 2 && t.rules[3].id == 4,
              "order 3 1 2 4");

        /* refused adds change nothing, neither the table nor the file */
        before = list(&t);
        file_before = slurp(path);
        CHECK(file_before && strstr(file_before, "\"next_id\": 5"), "file: %s", file_before);
        q = policy_add(&t, "position 6 action tcp", &id, err, sizeof(err));
        CHECK(q == -EINVAL && strstr(err, "position 6 is beyond the end (4 rules: at most 5)"), "position 6: %s", err);
        q = policy_add(&t, "peer-port 5000 connect action tcp", &id, err, sizeof(err));
        CHECK(q == -EINVAL && strstr(err, "the same as rule 1 (connect peer-port 5000 action tcp)"), "dup: %s", err);
        q = policy_add(&t, "peer-port 5000 action bogus", &id, err, sizeof(err));
        CHECK(q == -EINVAL && strstr(err, "\"bogus\""), "bad action: %s", err);
        s = list(&t);
        CHECK(strcmp(s, before) == 0, "table changed: %s", s);
        free(s);
        s = slurp(path);
        CHECK(s && strcmp(s, file_before) == 0, "file changed: %s", s);
        free(s);

        /* del: ids are never reused */
        CHECK(policy_del(&t, 4) == 0 && t.n == 3, "del 4");
        CHECK(policy_del(&t, 4) == -ENOENT, "del 4 again");
        CHECK(policy_del(&t, 0) == -ENOENT, "del 0");
        add_ok(&t, "peer-port 1 action tcp", 5);

        /* reload: same rules, same order, same next id */
        free(before);
        before = list(&t);
        CHECK(policy_load(&u, path) == 0 && u.n == 4 && u.next_id == 6, "reload: %zu rules, next %u", u.n, u.next_id);
        s = list(&u);
        CHECK(strcmp(s, before) == 0, "reloaded %s, want %s", s, before);
        free(s);
        policy_done(&u);

        /* a failed save changes nothing: the directory is a regular file */
        {
                char saved[PATH_MAX];

                memcpy(saved, t.path, sizeof(saved));
                snprintf(t.path, sizeof(t.path), "%s/afile", dir);
                write_text(t.path, "x");
                strcat(t.path, "/policy.json");
                q = policy_add(&t, "action tcp", &id, err, sizeof(err));
                CHECK(q == -ENOTDIR, "add with a failing save: %d", q);
                CHECK(policy_del(&t, 1) == -ENOTDIR, "del with a failing save");
                s = list(&t);
                CHECK(strcmp(s, before) == 0 && t.next_id == 6, "failed saves changed the table: %s", s);
                free(s);
                memcpy(t.path, saved, sizeof(saved));
                add_ok(&t, "action tcp", 6); /* the id the failed add did not take */
        }
        free(before);
        free(file_before);
        policy_done(&t);
}

static void test_policy_save_failure(const char *dir) {
        char path[PATH_MAX], err[300] = "";
        PolicyTable t = {};
        uint32_t id = 0;
        int q;

        snprintf(path, sizeof(path), "%s/notadir", dir);
        write_text(path, "x");
        strcat(path, "/policy.json");
        CHECK(policy_load(&t, path) == 0 && t.n == 0, "load below a file");
        q = policy_add(&t, "action tcp", &id, err, sizeof(err));
        CHECK(q == -ENOTDIR && t.n == 0 && t.next_id == 1, "add with a failing save: %d, %zu rules", q, t.n);
        policy_done(&t);
}

static void test_policy_corrupt(const char *dir) {
        static const char *const bad_files[] = {
                "{\"next_id\": 2, \"rules\": [",
                "{\"next_id\": 2, \"rules\": []} x",
                "[1, 2]",
                "{\"rules\": []}",
                "{\"next_id\": 0, \"rules\": []}",
                "{\"next_id\": 2, \"rules\": {}}",
                "{\"next_id\": 2, \"rules\": [], \"extra\": 1}",
                "{\"next_id\": 2, \"rules\": [{\"id\": 1, \"rule\": \"action maybe\"}]}",
                "{\"next_id\": 2, \"rules\": [{\"id\": 1, \"rule\": \"position 1 action tcp\"}]}",
                "{\"next_id\": 2, \"rules\": [{\"id\": 2, \"rule\": \"action tcp\"}]}",
                "{\"next_id\": 3, \"rules\": [{\"id\": 1, \"rule\": \"action tcp\"}, {\"id\": 1, \"rule\": \"action smc\"}]}",
                "{\"next_id\": 3, \"rules\": [{\"id\": 1, \"rule\": \"action tcp\"}, {\"id\": 2, \"rule\": \"action tcp\"}]}",
                "{\"next_id\": 2, \"rules\": [{\"id\": \"1\", \"rule\": \"action tcp\"}]}",
                "{\"next_id\": 2, \"rules\": [{\"id\": 1, \"rule\": \"action tcp\", \"hits\": 3}]}",
                "{\"next_id\": 2, \"rules\": [{\"id\": 1}]}",
                "{\"next_id\": 2, \"rules\": [7]}",
                "",
        };
        char path[PATH_MAX], aside[PATH_MAX + 64];
        PolicyTable t = {};

        snprintf(path, sizeof(path), "%s/policy.json", dir);
        for (size_t i = 0; i < sizeof(bad_files) / sizeof(bad_files[0]); i++) {
                char *s;

                remove_aside(dir);
                write_text(path, bad_files[i]);
                CHECK(policy_load(&t, path) == 0 && t.n == 0 && t.next_id == 1, "corrupt %zu: %zu rules", i, t.n);
                CHECK(access(path, F_OK) < 0 && count_aside(dir, "policy.json") == 1, "corrupt %zu not moved aside", i);
                snprintf(aside, sizeof(aside), "%s/policy.json.corrupt-", dir);
                {
                        DIR *d = opendir(dir);
                        struct dirent *de;

                        while ((de = readdir(d)))
                                if (strncmp(de->d_name, "policy.json.corrupt-", 20) == 0)
                                        snprintf(aside, sizeof(aside), "%s/%s", dir, de->d_name);
                        closedir(d);
                }
                s = slurp(aside);
                CHECK(s && strcmp(s, bad_files[i]) == 0, "corrupt %zu: aside holds \"%s\"", i, s ? s : "(none)");
                free(s);
                policy_done(&t);
        }
        remove_aside(dir);
        /* a good file with whitespace and an unusual order loads */
        write_text(path, "\n { \"rules\": [ {\"rule\": \"action tcp  peer-port 9\", \"id\": 7} ], \"next_id\": 9 }\n\n");
        CHECK(policy_load(&t, path) == 0 && t.n == 1 && t.rules[0].id == 7 && t.next_id == 9 && t.rules[0].has_peer_port,
              "good file: %zu rules", t.n);
        CHECK(count_aside(dir, "policy.json") == 0, "good file moved aside");
        policy_done(&t);
        unlink(path);
}

/* ---- pnet ---- */

static void pnet_bad(const char *netdev, const char *ibdev, uint32_t port, const char *pnetid, const char *want) {
        char err[300] = "";
        PnetEntry e;
        int q = pnet_entry_parse(netdev, ibdev, port, pnetid, &e, err, sizeof(err));

        CHECK(q == -EINVAL && strstr(err, want), "pnet %s %s %u %s: %d \"%s\", want \"%s\"", netdev, ibdev, port,
              pnetid ? pnetid : "(null)", q, err, want);
}

static void test_pnet(const char *dir) {
        char path[PATH_MAX], err[300] = "", *before, *file_before, *s;
        PnetTable t = {}, u = {};
        PnetEntry e;
        json_object *o;

        CHECK(pnet_entry_parse("eth0", "mlx5_0", 1, NULL, &e, err, sizeof(err)) == 0 && e.port == 1 && !e.pnetid[0],
              "eth0: %s", err);
        CHECK(pnet_entry_parse("enp1s0f0.100", "mlx5_0", 255, "net1", &e, err, sizeof(err)) == 0 &&
              strcmp(e.pnetid, "NET1") == 0, "pnetid upper case: %s", e.pnetid);
        CHECK(pnet_entry_parse("a23456789012345", "roce", 2, "ABCDEFGHIJ123456", &e, err, sizeof(err)) == 0,
              "15-byte netdev, 16-char pnetid: %s", err);
        pnet_bad("", "mlx5_0", 1, NULL, "netdev: bad name \"\"");
        pnet_bad("a234567890123456", "mlx5_0", 1, NULL, "netdev: bad name \"a234567890123456\" (1..15 bytes");
        pnet_bad(".", "mlx5_0", 1, NULL, "netdev: bad name \".\"");
        pnet_bad("..", "mlx5_0", 1, NULL, "netdev: bad name \"..\"");
        pnet_bad("eth/0", "mlx5_0", 1, NULL, "netdev: bad name \"eth/0\"");
        pnet_bad("eth:0", "mlx5_0", 1, NULL, "netdev: bad name \"eth:0\"");
        pnet_bad("eth 0", "mlx5_0", 1, NULL, "netdev: bad name \"eth 0\"");
        pnet_bad("eth\t0", "mlx5_0", 1, NULL, "netdev: bad name \"eth?0\"");
        pnet_bad("\xc3\xa9th0", "mlx5_0", 1, NULL, "netdev: bad name \"??th0\"");
        pnet_bad("eth0", "", 1, NULL, "ibdev: bad name \"\"");
        pnet_bad("eth0", "mlx/5", 1, NULL, "ibdev: bad name \"mlx/5\"");
        pnet_bad("eth0", "1234567890123456789012345678901234567890123456789012345678901234", 1, NULL,
                 "ibdev: bad name \"1234567890123456789012345678901234567890...\" (1..63 bytes");
        pnet_bad("eth0", "mlx5_0", 0, NULL, "port: expected 1..255, not 0");
        pnet_bad("eth0", "mlx5_0", 256, NULL, "port: expected 1..255, not 256");
        pnet_bad("eth0", "mlx5_0", 4294967295u, NULL, "port: expected 1..255, not 4294967295");
        pnet_bad("eth0", "mlx5_0", 1, "ABCDEFGHIJ1234567", "pnetid: \"ABCDEFGHIJ1234567\" is longer than 16");
        pnet_bad("eth0", "mlx5_0", 1, "NET-1", "pnetid: \"NET-1\" has a character other than A-Z and 0-9");
        pnet_bad("eth0", "mlx5_0", 1, "NET 1", "pnetid: \"NET 1\" has a character");
        pnet_bad("eth0", "mlx5_0", 1, "N\xc3\x89T", "pnetid: \"N??T\" has a character");

        snprintf(path, sizeof(path), "%s/pnet.json", dir);
        CHECK(pnet_load(&t, path) == 0 && t.n == 0, "pnet load missing");
        CHECK(pnet_add(&t, "eth1", "mlx5_1", 1, "", err, sizeof(err)) == 0, "add eth1: %s", err);
        CHECK(pnet_add(&t, "eth0", "mlx5_0", 1, "net1", err, sizeof(err)) == 0, "add eth0: %s", err);
        CHECK(pnet_add(&t, "eth0.5", "mlx5_0", 1, "NET1", err, sizeof(err)) == 0, "add eth0.5: %s", err);
        CHECK(t.n == 3 && strcmp(t.v[0].netdev, "eth0") == 0 && strcmp(t.v[1].netdev, "eth0.5") == 0 &&
              strcmp(t.v[2].netdev, "eth1") == 0, "sorted by netdev");
        before = strdup(json_object_to_json_string_ext(o = pnet_to_json(&t), JSON_C_TO_STRING_PLAIN));
        json_object_put(o);
        CHECK(strcmp(before, "[{\"netdev\":\"eth0\",\"ibdev\":\"mlx5_0\",\"port\":1,\"pnetid\":\"NET1\"},"
                             "{\"netdev\":\"eth0.5\",\"ibdev\":\"mlx5_0\",\"port\":1,\"pnetid\":\"NET1\"},"
                             "{\"netdev\":\"eth1\",\"ibdev\":\"mlx5_1\",\"port\":1,\"pnetid\":null}]") == 0,
              "pnet JSON: %s", before);
        file_before = slurp(path);
        CHECK(pnet_add(&t, "eth0", "mlx5_9", 2, "", err, sizeof(err)) == -EINVAL &&
              strstr(err, "netdev eth0 has an entry already (mlx5_0 port 1): del it first"), "dup netdev: %s", err);
        CHECK(pnet_add(&t, "eth2", "mlx5_0", 1, "NET2", err, sizeof(err)) == -EINVAL &&
              strstr(err, "mlx5_0 port 1 belongs to pnetid NET1 already (netdev eth0), not NET2"), "pnetid: %s", err);
        CHECK(pnet_add(&t, "eth2", "mlx5_0", 0, "", err, sizeof(err)) == -EINVAL && strstr(err, "port:"), "port 0");
        CHECK(pnet_del(&t, "eth9") == -ENOENT, "del missing");
        s = strdup(json_object_to_json_string_ext(o = pnet_to_json(&t), JSON_C_TO_STRING_PLAIN));
        json_object_put(o);
        CHECK(strcmp(s, before) == 0, "table changed by refused adds: %s", s);
        free(s);
        s = slurp(path);
        CHECK(s && file_before && strcmp(s, file_before) == 0, "file changed by refused adds");
        free(s);

        CHECK(pnet_load(&u, path) == 0 && u.n == 3, "pnet reload: %zu", u.n);
        s = strdup(json_object_to_json_string_ext(o = pnet_to_json(&u), JSON_C_TO_STRING_PLAIN));
        json_object_put(o);
        CHECK(strcmp(s, before) == 0, "pnet reloaded: %s", s);
        free(s);
        pnet_done(&u);

        CHECK(pnet_del(&t, "eth0.5") == 0 && t.n == 2, "del eth0.5");
        CHECK(pnet_load(&u, path) == 0 && u.n == 2, "pnet reload after del: %zu", u.n);
        pnet_done(&u);
        free(before);
        free(file_before);
        pnet_done(&t);

        /* corrupt pnet files */
        {
                static const char *const bad_files[] = {
                        "{\"entries\": [",
                        "{}",
                        "{\"entries\": [], \"x\": 1}",
                        "{\"entries\": [{\"netdev\": \"eth0\", \"ibdev\": \"m\", \"port\": 0, \"pnetid\": null}]}",
                        "{\"entries\": [{\"netdev\": \"eth0\", \"ibdev\": \"m\", \"port\": 1}]}",
                        "{\"entries\": [{\"netdev\": \"eth0\", \"ibdev\": \"m\", \"port\": 1, \"pnetid\": \"\"}]}",
                        "{\"entries\": [{\"netdev\": \"eth/0\", \"ibdev\": \"m\", \"port\": 1, \"pnetid\": null}]}",
                        "{\"entries\": [{\"netdev\": \"eth0\", \"ibdev\": \"m\", \"port\": 1, \"pnetid\": null},"
                        " {\"netdev\": \"eth0\", \"ibdev\": \"n\", \"port\": 1, \"pnetid\": null}]}",
                        "{\"entries\": [{\"netdev\": \"eth0\", \"ibdev\": \"m\", \"port\": 1, \"pnetid\": \"A\"},"
                        " {\"netdev\": \"eth1\", \"ibdev\": \"m\", \"port\": 1, \"pnetid\": \"B\"}]}",
                        "{\"entries\": [{\"netdev\": \"eth0\", \"ibdev\": \"m\", \"port\": \"1\", \"pnetid\": null}]}",
                };

                for (size_t i = 0; i < sizeof(bad_files) / sizeof(bad_files[0]); i++) {
                        remove_aside(dir);
                        write_text(path, bad_files[i]);
                        CHECK(pnet_load(&t, path) == 0 && t.n == 0, "pnet corrupt %zu: %zu entries", i, t.n);
                        CHECK(access(path, F_OK) < 0 && count_aside(dir, "pnet.json") == 1,
                              "pnet corrupt %zu not moved aside", i);
                        pnet_done(&t);
                }
                remove_aside(dir);
        }
}

int main(void) {
        char dir[] = "/tmp/smcd-test-policy.XXXXXX";
        char cmd[64];

        log_set_max_level(LOG_WARNING);
        if (!mkdtemp(dir)) {
                perror("mkdtemp");
                return 1;
        }
        test_parser();
        test_matcher();
        test_policy_table(dir);
        test_policy_save_failure(dir);
        test_policy_corrupt(dir);
        test_pnet(dir);
        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        if (system(cmd) != 0)
                fprintf(stderr, "cannot remove %s\n", dir);
        printf("%d checks, %d failed\n", checks, failures);
        return failures ? 1 : 0;
}
