/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Unit test of smcd's tunables (smcd/tunables.c, linked in): every key with good values
 * (and how they are shown), bad values (the error text, and nothing changed), the
 * defaults, tunables_copy(), and the state file: save, load, an old file with fewer
 * keys, corrupt files moved aside. */

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dmb.h"
#include "log.h"
#include "tunables.h"

#include "check.h"

static void defaults(ManagerConfig *cfg) {
        memset(cfg, 0, sizeof(*cfg));
        tunables_set_defaults(cfg);
}

/* The value of @key in @cfg as shown ("?" on error; static buffer). */
static const char *shown(const ManagerConfig *cfg, const char *key) {
        static char buf[160];
        char *v = NULL;

        if (tunable_format(cfg, key, &v) < 0)
                return "?";
        snprintf(buf, sizeof(buf), "%s", v);
        free(v);
        return buf;
}

/* @key=@value is accepted and shown as @want. */
static void good(const char *key, const char *value, const char *want) {
        ManagerConfig cfg;
        char err[300] = "";
        int r;

        defaults(&cfg);
        r = tunable_parse(&cfg, key, value, err, sizeof(err));
        CHECK(r == 0, "%s=%s: %d %s", key, value, r, err);
        CHECK(strcmp(shown(&cfg, key), want) == 0, "%s=%s shown as %s, want %s", key, value, shown(&cfg, key), want);
}

/* @key=@value is refused with a message that starts with @msg, and @cfg is untouched. */
static void bad(const char *key, const char *value, const char *msg) {
        ManagerConfig cfg, before;
        char err[300] = "";
        int r;

        defaults(&cfg);
        before = cfg;
        r = tunable_parse(&cfg, key, value, err, sizeof(err));
        CHECK(r == -EINVAL, "%s=%s accepted (%d)", key, value ? value : "(null)", r);
        CHECK(strncmp(err, msg, strlen(msg)) == 0, "%s=%s: message \"%s\", want \"%s...\"", key,
              value ? value : "(null)", err, msg);
        CHECK(memcmp(&cfg, &before, sizeof(cfg)) == 0, "%s=%s changed the config", key, value ? value : "(null)");
}

static void test_keys(void) {
        static const char *const want[] = {
                "autocork_size", "buf_clear", "busy_poll", "cq_poll", "inline", "max_buf_per_uid", "max_clients_per_uid",
                "max_conns_per_lgr", "max_conns_per_uid", "max_handshakes_per_uid", "max_links_per_lgr",
                "max_listeners_per_uid", "rmem",
                "short_conn_rate", "sndbuf", "test_link_time", "ueid",
        };
        size_t n = sizeof(want) / sizeof(want[0]);

        CHECK(tunables_count() == n, "%zu tunables, want %zu", tunables_count(), n);
        for (size_t i = 0; i < n; i++) {
                const char *metavar = NULL;

                CHECK(tunable_key(i) && strcmp(tunable_key(i), want[i]) == 0, "key %zu: %s", i, tunable_key(i));
                CHECK(tunable_known(want[i]), "%s known", want[i]);
                CHECK(tunable_help(want[i], &metavar) && metavar && *metavar, "%s has help", want[i]);
        }
        CHECK(tunable_key(n) == NULL, "key past the end");
        CHECK(!tunable_known("bogus") && !tunable_known(NULL) && !tunable_known(""), "unknown keys");
        CHECK(tunable_help("bogus", NULL) == NULL, "no help for bogus");
}

static void test_defaults(void) {
        static const struct { const char *key, *value; } want[] = {
                { "autocork_size", "65536" }, { "buf_clear", "release" }, { "busy_poll", "50" },
                { "cq_poll", "event" }, { "inline", "auto" }, { "max_buf_per_uid", "0" }, { "max_clients_per_uid", "256" },
                { "max_conns_per_lgr", "255" }, { "max_conns_per_uid", "0" }, { "max_handshakes_per_uid", "0" },
                { "max_links_per_lgr", "2" }, { "max_listeners_per_uid", "1024" }, { "rmem", "131072" }, { "short_conn_rate", "1000" }, { "sndbuf", "16384" },
                { "test_link_time", "30" },
                { "ueid", "SMCD-USERSPACE" },
        };
        ManagerConfig cfg;
        json_object *o, *v;

        defaults(&cfg);
        for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
                CHECK(strcmp(shown(&cfg, want[i].key), want[i].value) == 0, "default %s = %s, want %s", want[i].key,
                      shown(&cfg, want[i].key), want[i].value);
        CHECK(cfg.rmem == SMC_DMB_DEFAULT_SIZE && cfg.sndbuf == SMC_DMB_MIN_SIZE && cfg.busy_poll_us == 50 &&
              cfg.max_conns_per_lgr == 255 && cfg.test_link_time == 30, "default fields");
        o = tunables_to_json(&cfg);
        CHECK(o && json_object_object_length(o) == (int) tunables_count(), "JSON has every key");
        CHECK(o && json_object_object_get_ex(o, "sndbuf", &v) && !strcmp(json_object_get_string(v), "16384"),
              "JSON sndbuf");
        json_object_put(o);
        {
                char *s = NULL;
                CHECK(tunable_format(&cfg, "nope", &s) == -EINVAL && !s, "format of an unknown key");
        }
}

static void test_values(void) {
        /* autocork_size: bytes 1K..1M, not rounded */
        good("autocork_size", "1K", "1024");
        good("autocork_size", "1024", "1024");
        good("autocork_size", "100000", "100000");
        good("autocork_size", "1M", "1048576");
        good("autocork_size", "64KiB", "65536");
        bad("autocork_size", "1023", "autocork_size: expected bytes 1K..1M (K/M suffixes), not \"1023\"");
        bad("autocork_size", "0", "autocork_size: expected bytes 1K..1M");
        bad("autocork_size", "2M", "autocork_size: expected bytes 1K..1M");
        bad("autocork_size", "-1", "autocork_size: expected bytes 1K..1M");
        bad("autocork_size", "lots", "autocork_size: expected bytes 1K..1M");

        good("buf_clear", "release", "release");
        good("buf_clear", "create", "create");
        bad("buf_clear", "Create", "buf_clear: expected release or create, not \"Create\"");
        bad("buf_clear", "", "buf_clear: expected release or create");

        /* busy_poll: microseconds 0..10000 */
        good("busy_poll", "0", "0");
        good("busy_poll", "10000", "10000");
        good("busy_poll", "007", "7");
        bad("busy_poll", "10001", "busy_poll: expected microseconds 0..10000, not \"10001\"");
        bad("busy_poll", "5us", "busy_poll: expected microseconds 0..10000");
        bad("busy_poll", "1K", "busy_poll: expected microseconds 0..10000"); /* no size suffixes */
        bad("busy_poll", " 5", "busy_poll: expected microseconds 0..10000");

        good("inline", "auto", "auto");
        good("inline", "on", "on");
        good("inline", "off", "off");
        bad("inline", "maybe", "inline: expected auto, on or off, not \"maybe\"");
        good("cq_poll", "event", "event");
        good("cq_poll", "thread", "thread");
        bad("cq_poll", "poll", "cq_poll: expected event or thread, not \"poll\"");
        bad("cq_poll", "Thread", "cq_poll: expected event or thread");

        good("max_buf_per_uid", "0", "0");
        good("max_buf_per_uid", "64M", "67108864");
        good("max_buf_per_uid", "1G", "1073741824");
        good("max_buf_per_uid", "2TB", "2199023255552");
        good("max_buf_per_uid", "18446744073709551615", "18446744073709551615");
        bad("max_buf_per_uid", "12X", "max_buf_per_uid: expected bytes with an optional K/M/G/T suffix (0 = unlimited)");
        bad("max_buf_per_uid", "18446744073709551616", "max_buf_per_uid: expected bytes");
        bad("max_buf_per_uid", "16777216T", "max_buf_per_uid: expected bytes"); /* overflows */

        good("max_clients_per_uid", "0", "0");
        good("max_clients_per_uid", "3", "3");
        bad("max_clients_per_uid", "x", "max_clients_per_uid: expected a number (0 = unlimited), not \"x\"");
        bad("max_clients_per_uid", "1K", "max_clients_per_uid: expected a number");

        /* max_conns_per_lgr: 16..255 */
        good("max_conns_per_lgr", "16", "16");
        good("max_conns_per_lgr", "255", "255");
        bad("max_conns_per_lgr", "15", "max_conns_per_lgr: expected a number 16..255, not \"15\"");
        bad("max_conns_per_lgr", "256", "max_conns_per_lgr: expected a number 16..255");
        bad("max_conns_per_lgr", "0", "max_conns_per_lgr: expected a number 16..255");

        good("max_conns_per_uid", "100", "100");
        bad("max_conns_per_uid", "-1", "max_conns_per_uid: expected a number (0 = unlimited), not \"-1\"");
        bad("max_conns_per_uid", "+1", "max_conns_per_uid: expected a number");

        /* max_listeners_per_uid: a number, 0 = unlimited */
        good("max_listeners_per_uid", "0", "0");
        good("max_listeners_per_uid", "1", "1");
        good("max_listeners_per_uid", "100000", "100000");
        bad("max_listeners_per_uid", "-1", "max_listeners_per_uid: expected a number (0 = unlimited)");
        bad("max_listeners_per_uid", "many", "max_listeners_per_uid: expected a number (0 = unlimited)");
        /* max_handshakes_per_uid: 0..1000000 per second */
        good("max_handshakes_per_uid", "0", "0");
        good("max_handshakes_per_uid", "5", "5");
        good("max_handshakes_per_uid", "1000000", "1000000");
        bad("max_handshakes_per_uid", "1000001",
            "max_handshakes_per_uid: expected handshakes per second 0..1000000 (0 = unlimited), not \"1000001\"");
        bad("max_handshakes_per_uid", "1.5", "max_handshakes_per_uid: expected handshakes per second");

        /* rmem and sndbuf: 16K..1M, rounded up to a size class */
        good("rmem", "16K", "16384");
        good("rmem", "100K", "131072");
        good("rmem", "65537", "131072");
        good("rmem", "1M", "1048576");
        bad("rmem", "2M", "rmem: expected bytes 16K..1M (K/M suffixes), not \"2M\"");
        bad("rmem", "1K", "rmem: expected bytes 16K..1M");
        bad("rmem", "16383", "rmem: expected bytes 16K..1M");
        good("sndbuf", "16K", "16384");
        good("sndbuf", "16385", "32768");
        good("sndbuf", "200K", "262144");
        good("sndbuf", "1MiB", "1048576");
        bad("sndbuf", "1048577", "sndbuf: expected bytes 16K..1M (K/M suffixes), not \"1048577\"");
        bad("sndbuf", "8K", "sndbuf: expected bytes 16K..1M");
        bad("sndbuf", "", "sndbuf: expected bytes 16K..1M");

        /* short_conn_rate: connections per second 0..10000000 */
        good("short_conn_rate", "0", "0");
        good("short_conn_rate", "10000000", "10000000");
        bad("short_conn_rate", "10000001", "short_conn_rate: expected connections per second 0..10000000 (0 = off), not");
        bad("short_conn_rate", "-1", "short_conn_rate: expected connections per second");
        bad("short_conn_rate", "1k", "short_conn_rate: expected connections per second");
        /* test_link_time: seconds 0..3600 */
        good("test_link_time", "0", "0");
        good("test_link_time", "3600", "3600");
        bad("test_link_time", "3601", "test_link_time: expected seconds 0..3600 (0 = off), not \"3601\"");
        bad("test_link_time", "30s", "test_link_time: expected seconds 0..3600");

        /* ueid: up to 4 User EIDs as the kernel's smc_clc_ueid_valid, upper-cased; "" = none */
        good("ueid", "SMCD-USERSPACE", "SMCD-USERSPACE");
        good("ueid", " abc.1-x , B2", "ABC.1-X,B2");
        good("ueid", "", "");
        bad("ueid", "  ", "ueid: bad User EID \"\""); /* blanks alone: a typo, not "none" */
        good("ueid", "A,B,C,D", "A,B,C,D");
        good("ueid", "0123456789ABCDEF0123456789ABCDEF", "0123456789ABCDEF0123456789ABCDEF");
        bad("ueid", "A,B,C,D,E", "ueid: at most 4 User EIDs, not \"A,B,C,D,E\"");
        bad("ueid", "-A", "ueid: bad User EID \"-A\": expected up to 4 comma separated");
        bad("ueid", ".A", "ueid: bad User EID \".A\"");
        bad("ueid", "0123456789ABCDEF0123456789ABCDEF0", "ueid: bad User EID \"0123456789ABCDEF0123456789ABCDEF0\"");
        bad("ueid", "A B", "ueid: bad User EID \"A B\"");
        bad("ueid", "A,,B", "ueid: bad User EID \"\"");
        bad("ueid", "A,", "ueid: bad User EID \"\"");
        bad("ueid", "A_B", "ueid: bad User EID \"A_B\"");
        bad("ueid", "\xc3\x89T\xc3\x89", "ueid: bad User EID");
        bad("ueid", "abc,ABC", "ueid: User EID \"ABC\" given twice");
        {
                ManagerConfig cfg;
                char err[300];

                defaults(&cfg);
                CHECK(cfg.n_ueids == 1 && !memcmp(cfg.ueids[0], "SMCD-USERSPACE                  ", 32), "default UEID");
                CHECK(tunable_parse(&cfg, "ueid", "x1,y2", err, sizeof(err)) == 0 && cfg.n_ueids == 2 &&
                              !memcmp(cfg.ueids[0], "X1                              ", 32) &&
                              !memcmp(cfg.ueids[1], "Y2                              ", 32),
                      "two UEIDs, blank padded, upper case");
                CHECK(tunable_parse(&cfg, "ueid", "", err, sizeof(err)) == 0 && cfg.n_ueids == 0, "no UEID");
        }

        /* every key refuses a missing value (ueid: none is a value) */
        for (size_t i = 0; i < tunables_count(); i++) {
                char want[64];

                if (!strcmp(tunable_key(i), "ueid"))
                        continue;
                snprintf(want, sizeof(want), "%s: expected ", tunable_key(i));
                bad(tunable_key(i), NULL, want);
                bad(tunable_key(i), "garbage", want);
        }

        bad("bogus", "1", "unknown tunable \"bogus\" (known: autocork_size, buf_clear, busy_poll, cq_poll, inline,");
        bad(NULL, "1", "unknown tunable \"\"");
        bad("RMEM", "64K", "unknown tunable \"RMEM\"");

        /* tunable_parse_as names the option */
        {
                ManagerConfig cfg;
                char err[300];

                defaults(&cfg);
                CHECK(tunable_parse_as(&cfg, "max_buf_per_uid", "12Q", "max-buf-per-uid", err, sizeof(err)) == -EINVAL &&
                              !strncmp(err, "max-buf-per-uid: expected bytes", 31),
                      "parse_as: %s", err);
                CHECK(tunable_parse_as(&cfg, "rmem", "32K", "rmem", err, sizeof(err)) == 0 && cfg.rmem == 32768,
                      "parse_as good");
                /* a tiny error buffer is fine */
                CHECK(tunable_parse(&cfg, "rmem", "x", err, 4) == -EINVAL && strlen(err) == 3, "short err buffer");
                CHECK(tunable_parse(&cfg, "rmem", "x", NULL, 0) == -EINVAL, "no err buffer");
        }
}

static void test_copy(void) {
        ManagerConfig a, b;
        char err[300];

        defaults(&a);
        defaults(&b);
        a.prepopulate = 7;
        a.no_bus = true;
        CHECK(tunable_parse(&b, "sndbuf", "256K", err, sizeof(err)) == 0, "sndbuf");
        CHECK(tunable_parse(&b, "busy_poll", "9", err, sizeof(err)) == 0, "busy_poll");
        CHECK(tunable_parse(&b, "buf_clear", "create", err, sizeof(err)) == 0, "buf_clear");
        CHECK(tunable_parse(&b, "max_handshakes_per_uid", "12", err, sizeof(err)) == 0, "hs");
        CHECK(tunable_parse(&b, "test_link_time", "0", err, sizeof(err)) == 0, "tlt");
        CHECK(tunable_parse(&b, "ueid", "K1,K2", err, sizeof(err)) == 0, "ueid");
        tunables_copy(&a, &b);
        CHECK(a.sndbuf == 262144 && a.busy_poll_us == 9 && a.buf_clear == SMC_POOL_CLEAR_CREATE &&
              a.max_handshakes_per_uid == 12 && a.test_link_time == 0, "copied");
        CHECK(a.n_ueids == 2 && !memcmp(a.ueids[1], "K2 ", 3), "ueid copied");
        CHECK(a.prepopulate == 7 && a.no_bus, "the rest not touched");
}

static int count_aside(const char *path) {
        char pat[PATH_MAX + 16];
        glob_t g;
        int n;

        snprintf(pat, sizeof(pat), "%s.corrupt-*", path);
        if (glob(pat, 0, NULL, &g) != 0)
                return 0;
        n = (int) g.gl_pathc;
        for (size_t i = 0; i < g.gl_pathc; i++)
                unlink(g.gl_pathv[i]);
        globfree(&g);
        return n;
}

static void write_text(const char *path, const char *text) {
        FILE *f = fopen(path, "w");

        if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
                perror(path);
                exit(2);
        }
}

static void test_state_file(void) {
        char dir[] = "/tmp/test-tunables.XXXXXX", path[PATH_MAX], err[300];
        static const char *const corrupt[] = {
                "{\"sndbuf\": \"64K\", ",                 /* truncated */
                "{\"busy_poll\": 5}",                     /* not a string */
                "{\"sndbuf\": \"64K\", \"busy_poll\": 5}", /* one not a string: nothing applied */
                "[\"sndbuf\"]",                           /* not an object */
                "{\"sndbuf\": \"64K\"} {}",               /* trailing data */
                "{\"sndbuf\": \"32K\", \"sndbuf\": \"64K\"}", /* a key twice (helper 121: last won) */
        };
        ManagerConfig cfg, loaded, want;

        if (!mkdtemp(dir)) {
                perror("mkdtemp");
                exit(2);
        }
        snprintf(path, sizeof(path), "%s/state/tunables.json", dir);

        /* missing: fine, nothing changes */
        defaults(&loaded);
        want = loaded;
        CHECK(tunables_load(&loaded, path) == 0 && memcmp(&loaded, &want, sizeof(want)) == 0, "missing file");

        /* save (creates the directory) and load back every new key */
        defaults(&cfg);
        CHECK(tunable_parse(&cfg, "sndbuf", "100K", err, sizeof(err)) == 0, "sndbuf");
        CHECK(tunable_parse(&cfg, "busy_poll", "0", err, sizeof(err)) == 0, "busy_poll");
        CHECK(tunable_parse(&cfg, "autocork_size", "8K", err, sizeof(err)) == 0, "autocork");
        CHECK(tunable_parse(&cfg, "max_handshakes_per_uid", "20", err, sizeof(err)) == 0, "hs");
        CHECK(tunable_parse(&cfg, "max_conns_per_lgr", "16", err, sizeof(err)) == 0, "lgr");
        CHECK(tunable_parse(&cfg, "test_link_time", "0", err, sizeof(err)) == 0, "tlt");
        CHECK(tunables_save(&cfg, path) == 0, "save");
        defaults(&loaded);
        CHECK(tunables_load(&loaded, path) == 0, "load");
        CHECK(memcmp(&loaded, &cfg, sizeof(cfg)) == 0, "loaded == saved");
        CHECK(count_aside(path) == 0, "nothing moved aside");

        /* json-c's lenient forms, whose ':' are not members: comments, single quotes */
        write_text(path, "/* a: b */ {\"rmem\": \"262144\", // c: d\n 'sndbuf': '64K'}\n");
        defaults(&loaded);
        CHECK(tunables_load(&loaded, path) == 0 && count_aside(path) == 0 && loaded.rmem == 262144 &&
              loaded.sndbuf == 65536, "comments with ':' and single-quoted strings are not taken for keys given twice");
        (void) unlink(path);

        /* a state file of an older smcd (fewer keys): the rest keep their defaults */
        write_text(path, "{\"buf_clear\": \"create\", \"rmem\": \"131072\"}\n");
        defaults(&loaded);
        loaded.sndbuf = 32768; /* as an option would set it */
        CHECK(tunables_load(&loaded, path) == 0 && loaded.buf_clear == SMC_POOL_CLEAR_CREATE &&
              loaded.rmem == 131072 && loaded.sndbuf == 32768 && loaded.busy_poll_us == 50,
              "old state file: its keys applied, the others kept");

        /* a state file of a newer smcd (a downgrade): keys this one does not know and
         * values it refuses are skipped, the rest applied, nothing moved aside; the
         * unknown keys are kept by the next save (before: the whole file was taken
         * as corrupt, every saved tunable lost) */
        {
                int saved_level = log_get_max_level();
                char text[4096] = "";
                FILE *f;
                size_t n;

                write_text(path, "{\"frobnicate\": \"1\", \"sndbuf\": \"3M\", \"rmem\": \"131072\", "
                                 "\"max_conns_per_lgr\": \"8\", \"zz_new\": \"x y\"}\n");
                defaults(&loaded);
                want = loaded;
                want.rmem = 131072;
                log_set_max_level(LOG_CRIT); /* the expected warnings */
                CHECK(tunables_load(&loaded, path) == 0, "newer state file loads");
                log_set_max_level(saved_level);
                CHECK(memcmp(&loaded, &want, sizeof(want)) == 0,
                      "newer state file: rmem applied; unknown keys, a value out of range skipped");
                CHECK(access(path, F_OK) == 0 && count_aside(path) == 0, "newer state file: left in place");
                CHECK(tunable_parse(&loaded, "sndbuf", "128K", err, sizeof(err)) == 0 && tunables_save(&loaded, path) == 0,
                      "a change saved");
                f = fopen(path, "r");
                n = f ? fread(text, 1, sizeof(text) - 1, f) : 0;
                if (f)
                        fclose(f);
                text[n] = 0;
                CHECK(strstr(text, "\"frobnicate\":\"1\"") && strstr(text, "\"zz_new\":\"x y\"") &&
                              strstr(text, "\"sndbuf\":\"131072\"") && strstr(text, "\"max_conns_per_lgr\""),
                      "the save keeps the unknown keys and writes every tunable: %s", text);
                defaults(&loaded);
                log_set_max_level(LOG_CRIT);
                CHECK(tunables_load(&loaded, path) == 0 && loaded.sndbuf == 131072 && loaded.rmem == 131072 &&
                              count_aside(path) == 0,
                      "and loads again");
                log_set_max_level(saved_level);
                (void) unlink(path);
        }

        /* corrupt ones: nothing applied, moved aside */
        for (size_t i = 0; i < sizeof(corrupt) / sizeof(corrupt[0]); i++) {
                int saved_level = log_get_max_level();

                write_text(path, corrupt[i]);
                defaults(&loaded);
                want = loaded;
                log_set_max_level(LOG_CRIT); /* the expected error line */
                CHECK(tunables_load(&loaded, path) == 0, "corrupt %zu loads", i);
                log_set_max_level(saved_level);
                CHECK(memcmp(&loaded, &want, sizeof(want)) == 0, "corrupt %zu (%s): nothing applied", i, corrupt[i]);
                CHECK(access(path, F_OK) < 0 && count_aside(path) == 1, "corrupt %zu moved aside", i);
        }
        snprintf(err, sizeof(err), "%s/state", dir);
        (void) rmdir(err);
        (void) rmdir(dir);
}

int main(void) {
        test_keys();
        test_defaults();
        test_values();
        test_copy();
        test_state_file();
        printf("%d checks, %d failed\n", checks, failures);
        return failures ? 1 : 0;
}
