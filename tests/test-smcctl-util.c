/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Unit test of smcctl's shared helpers (smcctl/smcctl-util.c): prefix lookup of
 * objects/commands, option values, and the text / JSON rendering (key-value rows,
 * aligned tables with detail columns, "-" for missing values, JSON unchanged).
 */

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "smcctl.h"

#include "check.h"

/* Run @fn with stdout captured; returns what it printed (malloc'ed). */
static char *capture(int (*fn)(void *), void *arg, int *ret) {
        FILE *f = tmpfile();
        int saved = dup(STDOUT_FILENO);
        char *buf;
        long len;

        assert(f && saved >= 0);
        fflush(stdout);
        dup2(fileno(f), STDOUT_FILENO);
        *ret = fn(arg);
        fflush(stdout);
        dup2(saved, STDOUT_FILENO);
        close(saved);
        len = ftell(f);
        buf = calloc(1, (size_t) len + 1);
        rewind(f);
        assert(fread(buf, 1, (size_t) len, f) == (size_t) len);
        fclose(f);
        return buf;
}

static const Verb verbs[] = {
        { "show", NULL }, { "set", NULL }, { "setup", NULL }, { "reset", NULL }, {}
};

static void test_lookup(void) {
        bool amb;
        const Verb *v;

        v = lookup_prefix(verbs, sizeof(*verbs), "show", &amb);
        CHECK(v == &verbs[0] && !amb, "exact");
        v = lookup_prefix(verbs, sizeof(*verbs), "sh", &amb);
        CHECK(v == &verbs[0] && !amb, "unique prefix");
        v = lookup_prefix(verbs, sizeof(*verbs), "set", &amb);
        CHECK(v == &verbs[1] && !amb, "exact wins over being a prefix of setup");
        v = lookup_prefix(verbs, sizeof(*verbs), "se", &amb);
        CHECK(!v && amb, "ambiguous prefix");
        v = lookup_prefix(verbs, sizeof(*verbs), "bogus", &amb);
        CHECK(!v && !amb, "unknown");
        v = lookup_prefix(verbs, sizeof(*verbs), "", &amb);
        CHECK(!v && !amb, "empty word matches nothing");
        v = lookup_prefix(verbs, sizeof(*verbs), "showx", &amb);
        CHECK(!v, "longer than the name");
}

static void test_option_value(void) {
        char *argv[] = { "--port=80", "--port", "81", "--portx", "--port", NULL };
        bool missing;
        int i = 0;
        const char *v;

        v = option_value(5, argv, &i, "--port", &missing);
        CHECK(v && !strcmp(v, "80") && i == 0 && !missing, "--port=80");
        i = 1;
        v = option_value(5, argv, &i, "--port", &missing);
        CHECK(v && !strcmp(v, "81") && i == 2, "--port 81 consumes the next word");
        i = 3;
        v = option_value(5, argv, &i, "--port", &missing);
        CHECK(!v && !missing, "--portx is another option");
        i = 4;
        v = option_value(5, argv, &i, "--port", &missing);
        CHECK(!v && missing, "--port at the end has no value");
}

struct render {
        Args a;
        json_object *o;
        const Column *cols;
        size_t n;
};

static int do_kv(void *p) {
        struct render *r = p;
        return print_json_or_table(&r->a, r->o);
}

static int do_rows(void *p) {
        struct render *r = p;
        return print_rows(&r->a, r->o, r->cols, r->n);
}

static void test_render(void) {
        static const Column cols[] = {
                { "name", "NAME", false, false },
                { "n", "N", true, false },
                { "gid", "GID", false, true },
                { "state", "STATE", false, false },
        };
        struct render r = {};
        char *out;
        int ret;

        r.o = json_tokener_parse("{\"smcd\": {\"conns\": 3, \"fallback\": {\"SMC_CLC_DECL_MEM\": 1}},"
                                 " \"pool\": {\"in_use_by_class\": [1, 0, 2]}, \"v\": \"x\"}");
        out = capture(do_kv, &r, &ret);
        CHECK(ret == EXIT_SUCCESS && !strcmp(out, "smcd.conns                      3\n"
                                                   "smcd.fallback.SMC_CLC_DECL_MEM  1\n"
                                                   "pool.in_use_by_class            1 0 2\n"
                                                   "v                               x\n"),
              "key-value rows:\n%s", out);
        free(out);
        r.a.json = true;
        out = capture(do_kv, &r, &ret);
        CHECK(!strcmp(out, "{\"smcd\":{\"conns\":3,\"fallback\":{\"SMC_CLC_DECL_MEM\":1}},"
                           "\"pool\":{\"in_use_by_class\":[1,0,2]},\"v\":\"x\"}\n"), "JSON: %s", out);
        free(out);
        json_object_put(r.o);

        r.a = (Args) {};
        r.o = json_tokener_parse("[{\"name\": \"loopback-ism\", \"n\": 12345, \"gid\": \"abcd\", \"state\": \"up\"},"
                                 " {\"name\": \"x\", \"n\": 1, \"state\": null}]");
        r.cols = cols;
        r.n = 4;
        out = capture(do_rows, &r, &ret);
        CHECK(!strcmp(out, "NAME              N  STATE\n"
                           "loopback-ism  12345  up\n"
                           "x                 1  -\n"),
              "table without details:\n%s", out);
        free(out);
        r.a.details = true;
        out = capture(do_rows, &r, &ret);
        CHECK(!strcmp(out, "NAME              N  GID   STATE\n"
                           "loopback-ism  12345  abcd  up\n"
                           "x                 1  -     -\n"),
              "table with details:\n%s", out);
        free(out);
        json_object_put(r.o);

        r.o = json_object_new_array();
        r.a = (Args) {};
        out = capture(do_rows, &r, &ret);
        CHECK(!strcmp(out, "NAME  N  STATE\n"), "empty table is its header: %s", out);
        free(out);
        r.a.json = true;
        out = capture(do_rows, &r, &ret);
        CHECK(!strcmp(out, "[]\n"), "empty JSON array: %s", out);
        free(out);
        json_object_put(r.o);
}

static void test_no_args(void) {
        char *argv[] = { "extra", NULL };

        CHECK(expect_no_args("x", 0, argv) == EXIT_SUCCESS, "no args");
        CHECK(expect_no_args("x", 1, argv) == EXIT_USAGE, "an extra argument is a usage error");
}

int main(void) {
        test_lookup();
        test_option_value();
        test_render();
        test_no_args();
        if (failures) {
                fprintf(stderr, "%d failures\n", failures);
                return EXIT_FAILURE;
        }
        printf("smcctl-util: all checks passed\n");
        return EXIT_SUCCESS;
}
