/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * smcctl stats [show|reset]: org.smcd.smcd1.Stats at /org/smcd/smcd1/stats.
 *
 * -j prints smcd's JSON (Stats.Get) unchanged. The text is a set of aligned tables
 * rendered from that same JSON object, each value printed once as the JSON has it
 * (rows are named by their JSON keys, so `smcctl -j stats` and the man page explain
 * them):
 *   MODE        the connection keys per mode: SMC-D ("smcd"), SMC-R ("smcr"), and
 *               the TCP fallbacks smcd decided ("fallback": client and server; "-"
 *               where smcd cannot know a TCP figure)
 *   FALLBACK    fallback.by_reason: NAME, CODE, COUNT, SERVER
 *   SMCD        smcd's control-plane counters (clients, listeners, close_unknown)
 *   POOL        the buffer pool's scalars; CLASS: in use (and with -d free) by size
 *   HISTOGRAM   connect and buffer_acquire: count, sum, mean, then one row per bucket
 *               with samples (-d: every bucket); the last bucket's bound prints "inf"
 * -d adds the free counts per class, the empty buckets and the snapshot's seq /
 * time_usec / reset_usec.
 */

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "smcctl.h"

#define STATS_PATH BUS_PATH "/stats"
#define STATS_INTERFACE "org.smcd.smcd1.Stats"

/* The connection keys of a mode, in table order (stats.h); @tcp: the key in
 * "fallback" for the TCP column, NULL = "-". */
static const struct {
        const char *key;
        const char *tcp;
} mode_rows[] = {
        { "conns_client", "client" },
        { "conns_server", "server" },
        { "conns_client_current", NULL },
        { "conns_server_current", NULL },
        { "conns_current", NULL },
        { "conns_closed", NULL },
        { "conns_aborted", NULL },
        { "handshake_errors", NULL },
        { "bytes_tx", NULL },
        { "bytes_rx", NULL },
        { "msgs_tx", NULL },
        { "msgs_rx", NULL },
        { "cork_flushes", NULL },
        { "sendfile_calls", NULL },
        { "sendfile_bytes", NULL },
        { "inline_sends", NULL },
};

static const char *const smcd_rows[] = {
        "clients", "clients_total", "clients_rejected", "clients_over_limit", "listeners", "listeners_total",
        "close_unknown", "rereg_total", "restored_loaded", "restored_swept", "restored_current", "conns_netns",
        "conns_requeued", "spare_pairs",
};

/* the SMC-R section's own keys (the connection keys are in the MODE table) */
static const char *const smcr_rows[] = {
        "cdc_sends", "llc_sends", "rdma_writes", "link_groups", "link_groups_total", "links_failed", "links_added", "failovers",
        "handshakes_ok", "handshakes_declined", "handshakes_failed", "decline_sent", "decline_rcvd",
};

static const char *const pool_rows[] = {
        "buf_clear", "alloc", "reuse", "free", "clear", "bytes_cleared", "clear_ns", "downgrade", "idle_trimmed", "in_use",
        "bytes_in_use", "free_count", "pending_clear", "bytes_total",
};

static const char *const snapshot_rows[] = { "seq", "time_usec", "reset_usec" };

static json_object *obj(json_object *o, const char *key) {
        json_object *v = NULL;

        if (!o || !json_object_object_get_ex(o, key, &v))
                return NULL;
        return v;
}

/* A new row object {"c0": @c0, "c1": v1, ...} with the values of @vals (NULL: "-"). */
static json_object *row(size_t n, const char *const *vals) {
        json_object *r = json_object_new_object();

        if (!r)
                return NULL;
        for (size_t i = 0; i < n; i++) {
                char key[8];

                snprintf(key, sizeof(key), "c%zu", i);
                if (json_object_object_add(r, key, json_object_new_string(vals[i] ? vals[i] : "-")) < 0) {
                        json_object_put(r);
                        return NULL;
                }
        }
        return r;
}

static int add_row(json_object *rows, size_t n, const char *const *vals) {
        json_object *r = row(n, vals);

        if (!r || json_object_array_add(rows, r) < 0) {
                json_object_put(r);
                return -ENOMEM;
        }
        return 0;
}

/* The text of a JSON leaf (numbers and strings as json-c prints them), NULL if absent. */
static const char *leaf(json_object *o, const char *key) {
        json_object *v = obj(o, key);

        return v && !json_object_is_type(v, json_type_null) ? json_object_get_string(v) : NULL;
}

/* Print @rows (the caller's) as a text table of @n columns titled @titles; the columns
 * in @right_mask (bit i for column i: numbers) right-aligned, the others left-aligned;
 * columns in @detail_mask only with -d. */
static int print_table(const Args *a, json_object *rows, size_t n, const char *const *titles, unsigned right_mask,
                       unsigned detail_mask) {
        static const char *const keys[] = { "c0", "c1", "c2", "c3", "c4", "c5" };
        Column cols[6];
        Args text = *a;

        text.json = false;
        for (size_t i = 0; i < n && i < 6; i++)
                cols[i] = (Column) { keys[i], titles[i], (right_mask & (1u << i)) != 0, (detail_mask & (1u << i)) != 0 };
        return print_rows(&text, rows, cols, n < 6 ? n : 6);
}

static int print_mode(const Args *a, json_object *root) {
        static const char *const titles[] = { "MODE", "SMC-D", "SMC-R", "TCP" };
        json_object *rows = json_object_new_array(), *smcd = obj(root, "smcd"), *smcr = obj(root, "smcr"),
                    *fb = obj(root, "fallback");
        int r = 0;

        if (!rows)
                return oom();
        for (size_t i = 0; i < sizeof(mode_rows) / sizeof(mode_rows[0]) && r >= 0; i++) {
                const char *v[] = { mode_rows[i].key, leaf(smcd, mode_rows[i].key), leaf(smcr, mode_rows[i].key),
                                    mode_rows[i].tcp ? leaf(fb, mode_rows[i].tcp) : NULL };

                r = add_row(rows, 4, v);
        }
        r = r < 0 ? oom() : print_table(a, rows, 4, titles, 0xe, 0);
        json_object_put(rows);
        return r;
}

static int print_fallback(const Args *a, json_object *root) {
        static const char *const titles[] = { "FALLBACK", "CODE", "COUNT", "SERVER" };
        json_object *rows = json_object_new_array(), *by = obj(obj(root, "fallback"), "by_reason");
        int r = 0;

        if (!rows)
                return oom();
        for (size_t i = 0; by && i < json_object_array_length(by) && r >= 0; i++) {
                json_object *e = json_object_array_get_idx(by, i);
                const char *v[] = { leaf(e, "name"), leaf(e, "code"), leaf(e, "count"), leaf(e, "server") };

                r = add_row(rows, 4, v);
        }
        r = r < 0 ? oom() : print_table(a, rows, 4, titles, 0xc, 0);
        json_object_put(rows);
        return r;
}

/* A two-column table KEY VALUE of @keys in object @o, titled @title. */
static int print_keys(const Args *a, const char *title, json_object *o, const char *const *keys, size_t n) {
        const char *const titles[] = { title, "VALUE" };
        json_object *rows = json_object_new_array();
        int r = 0;

        if (!rows)
                return oom();
        for (size_t i = 0; i < n && r >= 0; i++) {
                const char *v[] = { keys[i], leaf(o, keys[i]) };

                if (v[1])
                        r = add_row(rows, 2, v);
        }
        r = r < 0 ? oom() : print_table(a, rows, 2, titles, 0x2, 0);
        json_object_put(rows);
        return r;
}

static int print_classes(const Args *a, json_object *pool) {
        static const char *const titles[] = { "CLASS", "SIZE", "IN_USE", "FREE" };
        json_object *rows = json_object_new_array(), *in_use = obj(pool, "in_use_by_class"),
                    *free_count = obj(pool, "free_count_by_class");
        int r = 0;

        if (!rows)
                return oom();
        for (size_t c = 0; in_use && c < json_object_array_length(in_use) && r >= 0; c++) {
                json_object *f = free_count ? json_object_array_get_idx(free_count, c) : NULL;
                char cls[24], size[24];
                const char *v[] = { cls, size, json_object_get_string(json_object_array_get_idx(in_use, c)),
                                    f ? json_object_get_string(f) : NULL };

                snprintf(cls, sizeof(cls), "%zu", c);
                if (c < 6)
                        snprintf(size, sizeof(size), "%uK", 16u << c);
                else
                        snprintf(size, sizeof(size), "%uM", 1u << (c - 6));
                r = add_row(rows, 4, v);
        }
        r = r < 0 ? oom() : print_table(a, rows, 4, titles, 0xf, 1u << 3);
        json_object_put(rows);
        return r;
}

static int print_hist(const Args *a, const char *name, json_object *h) {
        static const char *const titles[] = { "LE_NS", "COUNT" };
        json_object *rows, *buckets = obj(h, "buckets");
        uint64_t count, sum;
        size_t n;
        int r = 0;

        if (!h)
                return EXIT_SUCCESS;
        count = (uint64_t) json_object_get_uint64(obj(h, "count"));
        sum = (uint64_t) json_object_get_uint64(obj(h, "sum"));
        printf("HISTOGRAM %s: count %" PRIu64 " sum_ns %" PRIu64 " mean_ns %" PRIu64 "\n", name, count, sum,
               count ? sum / count : 0);
        rows = json_object_new_array();
        if (!rows)
                return oom();
        n = buckets ? json_object_array_length(buckets) : 0;
        for (size_t i = 0; i < n && r >= 0; i++) {
                json_object *b = json_object_array_get_idx(buckets, i);
                const char *v[] = { i + 1 == n ? "inf" : leaf(b, "le"), leaf(b, "count") };

                if (a->details || json_object_get_uint64(obj(b, "count")) > 0)
                        r = add_row(rows, 2, v);
        }
        r = r < 0 ? oom() : print_table(a, rows, 2, titles, 0x3, 0);
        json_object_put(rows);
        return r;
}

static int print_stats_text(const Args *a, json_object *root) {
        json_object *pool = obj(root, "pool"), *hist = obj(root, "histograms");
        int r;

        r = print_mode(a, root);
        if (r == EXIT_SUCCESS) {
                putchar('\n');
                r = print_fallback(a, root);
        }
        if (r == EXIT_SUCCESS) {
                putchar('\n');
                r = print_keys(a, "SMCD", obj(root, "smcd"), smcd_rows, sizeof(smcd_rows) / sizeof(smcd_rows[0]));
        }
        if (r == EXIT_SUCCESS && obj(obj(root, "smcr"), "cdc_sends")) {
                putchar('\n');
                r = print_keys(a, "SMCR", obj(root, "smcr"), smcr_rows, sizeof(smcr_rows) / sizeof(smcr_rows[0]));
        }
        if (r == EXIT_SUCCESS && pool) {
                putchar('\n');
                r = print_keys(a, "POOL", pool, pool_rows, sizeof(pool_rows) / sizeof(pool_rows[0]));
                if (r == EXIT_SUCCESS) {
                        putchar('\n');
                        r = print_classes(a, pool);
                }
        }
        if (r == EXIT_SUCCESS && obj(hist, "connect")) {
                putchar('\n');
                r = print_hist(a, "connect", obj(hist, "connect"));
        }
        if (r == EXIT_SUCCESS && obj(hist, "buffer_acquire")) {
                putchar('\n');
                r = print_hist(a, "buffer_acquire", obj(hist, "buffer_acquire"));
        }
        if (r == EXIT_SUCCESS && a->details) {
                putchar('\n');
                r = print_keys(a, "SNAPSHOT", root, snapshot_rows, sizeof(snapshot_rows) / sizeof(snapshot_rows[0]));
        }
        return r;
}

static int stats_show(sd_bus *bus, const Args *a, int argc, char **argv) {
        json_object *root;
        char *text = NULL;
        int r;

        r = expect_no_args("stats show", argc, argv);
        if (r != EXIT_SUCCESS)
                return r;
        if (a->json && !a->pretty) {
                /* unchanged: what smcd sent, byte for byte */
                r = call_string(bus, STATS_PATH, STATS_INTERFACE, "Get", &text, "");
                if (r != EXIT_SUCCESS)
                        return r;
                root = json_tokener_parse(text);
                if (!root || !json_object_is_type(root, json_type_object)) {
                        json_object_put(root);
                        free(text);
                        fprintf(stderr, "smcctl: Get: smcd sent invalid JSON\n");
                        return EXIT_FAILURE;
                }
                json_object_put(root);
                puts(text);
                free(text);
                return EXIT_SUCCESS;
        }
        r = call_json(bus, STATS_PATH, STATS_INTERFACE, "Get", json_type_object, &root, "");
        if (r != EXIT_SUCCESS)
                return r;
        r = a->json ? print_json_or_table(a, root) : print_stats_text(a, root);
        json_object_put(root);
        return r;
}

static int stats_reset(sd_bus *bus, const Args *a, int argc, char **argv) {
        int r;

        r = expect_no_args("stats reset", argc, argv);
        if (r != EXIT_SUCCESS)
                return r;
        return call_string(bus, STATS_PATH, STATS_INTERFACE, "Reset", NULL, "");
}

const Verb stats_verbs[] = {
        { "show", stats_show },
        { "reset", stats_reset },
        {}
};
