/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * smcctl pnet [show | add NETDEV IBDEV [PORT] [pnetid ID] | del NETDEV]:
 * org.smcd.smcd1.Pnet. smcd validates the fields (smcctl(8)); PORT defaults to 1.
 */

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "smcctl.h"

#define PNET_PATH BUS_PATH "/pnet"
#define PNET_INTERFACE "org.smcd.smcd1.Pnet"

/* Call @method with the arguments of @sig; errors printed as "smcctl: @what: ...".
 * Returns an exit code. */
static int pnet_call(sd_bus *bus, const char *what, const char *method, const char *sig, ...) {
        sd_bus_error e = SD_BUS_ERROR_NULL;
        sd_bus_message *m = NULL;
        va_list ap;
        int r;

        if (bus_check(bus) != 0)
                return EXIT_FAILURE;
        r = sd_bus_message_new_method_call(bus, &m, BUS_NAME, PNET_PATH, PNET_INTERFACE, method);
        if (r >= 0) {
                va_start(ap, sig);
                r = sd_bus_message_appendv(m, sig, ap);
                va_end(ap);
        }
        if (r >= 0)
                r = sd_bus_call(bus, m, 0, &e, NULL);
        sd_bus_message_unref(m);
        if (r < 0) {
                r = bus_error(what, &e, r);
                sd_bus_error_free(&e);
                return r;
        }
        return EXIT_SUCCESS;
}

static int pnet_show(sd_bus *bus, const Args *a, int argc, char **argv) {
        static const Column cols[] = {
                { "netdev", "NETDEV", false, false },
                { "ibdev", "IBDEV", false, false },
                { "port", "PORT", true, false },
                { "pnetid", "PNETID", false, false },
        };
        json_object *rows;
        int r;

        r = expect_no_args("pnet show", argc, argv);
        if (r != EXIT_SUCCESS)
                return r;
        r = call_json(bus, PNET_PATH, PNET_INTERFACE, "List", json_type_array, &rows, "");
        if (r != EXIT_SUCCESS)
                return r;
        r = print_rows(a, rows, cols, sizeof(cols) / sizeof(cols[0]));
        json_object_put(rows);
        return r;
}

static int pnet_add(sd_bus *bus, const Args *a, int argc, char **argv) {
        static const char usage[] = "NETDEV IBDEV [PORT] [pnetid ID]";
        const char *pnetid = "";
        unsigned long port = 1;
        int i = 2;

        if (argc < 2) {
                fprintf(stderr, "smcctl: pnet add: expected %s\n", usage);
                return EXIT_USAGE;
        }
        if (i < argc && strcmp(argv[i], "pnetid") != 0) {
                char *end;

                errno = 0;
                port = strtoul(argv[i], &end, 10);
                if (errno || end == argv[i] || *end || argv[i][0] < '0' || argv[i][0] > '9' || port > UINT32_MAX) {
                        fprintf(stderr, "smcctl: pnet add: bad PORT \"%s\" (1..255); expected %s\n", argv[i], usage);
                        return EXIT_USAGE;
                }
                i++;
        }
        if (i < argc && strcmp(argv[i], "pnetid") == 0) {
                if (i + 1 >= argc) {
                        fprintf(stderr, "smcctl: pnet add: \"pnetid\" needs a value\n");
                        return EXIT_USAGE;
                }
                pnetid = argv[i + 1];
                if (!pnetid[0]) {
                        fprintf(stderr, "smcctl: pnet add: empty pnetid (leave \"pnetid\" out for none)\n");
                        return EXIT_USAGE;
                }
                i += 2;
        }
        if (i < argc) {
                fprintf(stderr, "smcctl: pnet add: unexpected argument \"%s\"; expected %s\n", argv[i], usage);
                return EXIT_USAGE;
        }
        return pnet_call(bus, "pnet add", "Add", "ssus", argv[0], argv[1], (uint32_t) port, pnetid);
}

static int pnet_del(sd_bus *bus, const Args *a, int argc, char **argv) {
        if (argc != 1) {
                fprintf(stderr, "smcctl: pnet del: expected one NETDEV\n");
                return EXIT_USAGE;
        }
        return pnet_call(bus, "pnet del", "Del", "s", argv[0]);
}

const Verb pnet_verbs[] = {
        { "show", pnet_show },
        { "add", pnet_add },
        { "del", pnet_del },
        {}
};
