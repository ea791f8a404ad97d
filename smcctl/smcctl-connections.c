/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* smcctl connections [show] [--mode M] [--port N]: org.smcd.smcd1.Connections. SMC-D
 * endpoints and the TCP fallback connections smcd knows of (mode "SMCD" / "TCP"). */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "smcctl.h"

#define CONNECTIONS_PATH BUS_PATH "/connections"
#define CONNECTIONS_INTERFACE "org.smcd.smcd1.Connections"

typedef struct ConnFilter {
        const char *mode; /* NULL = any; else the "mode" value of the rows to show */
        int port;         /* -1 = any; else the local or the peer port */
} ConnFilter;

static int parse_conn_filter(int argc, char **argv, ConnFilter *f) {
        f->mode = NULL;
        f->port = -1;
        for (int i = 0; i < argc; i++) {
                const char *v;
                bool missing;

                if (!(v = option_value(argc, argv, &i, "--mode", &missing)) && missing) {
                        fprintf(stderr, "smcctl: connections: --mode needs a value (smcd or tcp)\n");
                        return -EINVAL;
                } else if (v) {
                        if (f->mode) {
                                fprintf(stderr, "smcctl: connections: --mode given twice\n");
                                return -EINVAL;
                        }
                        if (strcmp(v, "smcd") == 0)
                                f->mode = "SMCD";
                        else if (strcmp(v, "tcp") == 0)
                                f->mode = "TCP";
                        else {
                                fprintf(stderr, "smcctl: connections: unknown mode \"%s\" (smcd or tcp)\n", v);
                                return -EINVAL;
                        }
                } else if ((v = option_value(argc, argv, &i, "--port", &missing))) {
                        char *end;
                        unsigned long p;

                        if (f->port >= 0) {
                                fprintf(stderr, "smcctl: connections: --port given twice\n");
                                return -EINVAL;
                        }
                        errno = 0;
                        p = strtoul(v, &end, 10);
                        if (errno || end == v || *end || *v == '-' || *v == '+' || p > 65535) {
                                fprintf(stderr, "smcctl: connections: bad port \"%s\" (0..65535)\n", v);
                                return -EINVAL;
                        }
                        f->port = (int) p;
                } else {
                        if (missing)
                                fprintf(stderr, "smcctl: connections: %s needs a value\n", argv[i]);
                        else
                                fprintf(stderr, "smcctl: connections: unknown filter \"%s\" "
                                        "(--mode smcd|tcp, --port N)\n", argv[i]);
                        return -EINVAL;
                }
        }
        return 0;
}

/* The port of "ip:port" / "[ip6]:port", or -1. */
static int addr_port(const char *a) {
        const char *c = strrchr(a, ':');

        return c && c[1] ? atoi(c + 1) : -1;
}

static bool conn_matches(const ConnFilter *f, json_object *o) {
        if (f->mode && strcmp(json_str(o, "mode"), f->mode) != 0)
                return false;
        if (f->port >= 0 && addr_port(json_str(o, "local")) != f->port &&
            addr_port(json_str(o, "peer")) != f->port)
                return false;
        return true;
}

static int connections_show(sd_bus *bus, const Args *a, int argc, char **argv) {
        static const Column cols[] = {
                { "id", "ID", false, false },      { "role", "ROLE", false, false },
                { "state", "STATE", false, false }, { "local", "LOCAL", false, false },
                { "peer", "PEER", false, false },  { "mode", "MODE", false, false },
                { "fallback_reason", "REASON", false, false },
                { "sndbuf", "SNDBUF", true, false }, { "rmb", "RMB", true, false },
                { "bytes_tx", "TX", true, false }, { "bytes_rx", "RX", true, false },
                { "msgs_tx", "MSGS_TX", true, true }, { "msgs_rx", "MSGS_RX", true, true },
                { "pid", "PID", true, false },     { "uid", "UID", true, false },
        };
        json_object *all = NULL, *sel;
        ConnFilter f;
        int r;

        if (parse_conn_filter(argc, argv, &f) < 0)
                return EXIT_USAGE;
        r = call_json(bus, CONNECTIONS_PATH, CONNECTIONS_INTERFACE, "List", json_type_array, &all, "");
        if (r != EXIT_SUCCESS)
                return r;
        sel = json_object_new_array();
        if (!sel) {
                json_object_put(all);
                return oom();
        }
        for (size_t i = 0; i < json_object_array_length(all); i++) {
                json_object *o = json_object_array_get_idx(all, i);

                if (conn_matches(&f, o))
                        json_object_array_add(sel, json_object_get(o));
        }
        json_object_put(all);
        r = print_rows(a, sel, cols, sizeof(cols) / sizeof(cols[0]));
        json_object_put(sel);
        return r;
}

const Verb connections_verbs[] = {
        { "show", connections_show },
        {}
};
