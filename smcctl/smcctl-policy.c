/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * smcctl policy [show | add RULE... | del ID]: org.smcd.smcd1.Policy. The RULE words
 * are joined with spaces and parsed by smcd (smcctl(8) has the grammar); a bad rule
 * comes back as smcd's InvalidArgument naming the bad word.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "smcctl.h"

#define POLICY_PATH BUS_PATH "/policy"
#define POLICY_INTERFACE "org.smcd.smcd1.Policy"

static int policy_show(sd_bus *bus, const Args *a, int argc, char **argv) {
        static const Column cols[] = {
                { "id", "ID", true, false },
                { "scope", "SCOPE", false, false },
                { "local_port", "LOCAL-PORT", false, false },
                { "peer_port", "PEER-PORT", false, false },
                { "prefix", "PREFIX", false, false },
                { "action", "ACTION", false, false },
                { "hits", "HITS", true, false },
                { "rule", "RULE", false, true },
        };
        json_object *rows;
        int r;

        r = expect_no_args("policy show", argc, argv);
        if (r != EXIT_SUCCESS)
                return r;
        r = call_json(bus, POLICY_PATH, POLICY_INTERFACE, "List", json_type_array, &rows, "");
        if (r != EXIT_SUCCESS)
                return r;
        r = print_rows(a, rows, cols, sizeof(cols) / sizeof(cols[0]));
        json_object_put(rows);
        return r;
}

/* Prints the new rule's id: "3", or {"id":3} with -j. */
static int policy_add(sd_bus *bus, const Args *a, int argc, char **argv) {
        sd_bus_error e = SD_BUS_ERROR_NULL;
        sd_bus_message *reply = NULL;
        char *rule = NULL;
        size_t len = 0;
        FILE *f;
        uint32_t id;
        int r;

        if (argc < 1) {
                fprintf(stderr, "smcctl: policy add: expected a RULE: [connect|listen|both] [local-port P[-Q]] "
                        "[peer-port P[-Q]] [prefix CIDR] [position N] action smc|tcp\n");
                return EXIT_USAGE;
        }
        f = open_memstream(&rule, &len);
        if (!f)
                return oom();
        for (int i = 0; i < argc; i++)
                fprintf(f, "%s%s", i ? " " : "", argv[i]);
        if (fclose(f) != 0 || !rule) {
                free(rule);
                return oom();
        }
        if (bus_check(bus) != 0) {
                free(rule);
                return EXIT_FAILURE;
        }
        r = sd_bus_call_method(bus, BUS_NAME, POLICY_PATH, POLICY_INTERFACE, "Add", &e, &reply, "s", rule);
        free(rule);
        if (r < 0) {
                r = bus_error("policy add", &e, r);
                sd_bus_error_free(&e);
                return r;
        }
        r = sd_bus_message_read(reply, "u", &id);
        sd_bus_message_unref(reply);
        if (r < 0) {
                fprintf(stderr, "smcctl: policy add: bad reply: %s\n", strerror(-r));
                return EXIT_FAILURE;
        }
        if (a->json)
                printf("{\"id\":%u}\n", (unsigned) id);
        else
                printf("%u\n", (unsigned) id);
        return EXIT_SUCCESS;
}

static int policy_del(sd_bus *bus, const Args *a, int argc, char **argv) {
        sd_bus_error e = SD_BUS_ERROR_NULL;
        unsigned long id;
        char *end;
        int r;

        if (argc != 1) {
                fprintf(stderr, "smcctl: policy del: expected one rule ID (see smcctl policy show)\n");
                return EXIT_USAGE;
        }
        errno = 0;
        id = strtoul(argv[0], &end, 10);
        if (errno || end == argv[0] || *end || argv[0][0] < '0' || argv[0][0] > '9' || id == 0 || id > UINT32_MAX) {
                fprintf(stderr, "smcctl: policy del: bad rule ID \"%s\" (a number from smcctl policy show)\n",
                        argv[0]);
                return EXIT_USAGE;
        }
        if (bus_check(bus) != 0)
                return EXIT_FAILURE;
        r = sd_bus_call_method(bus, BUS_NAME, POLICY_PATH, POLICY_INTERFACE, "Del", &e, NULL, "u", (uint32_t) id);
        if (r < 0) {
                r = bus_error("policy del", &e, r);
                sd_bus_error_free(&e);
                return r;
        }
        return EXIT_SUCCESS;
}

const Verb policy_verbs[] = {
        { "show", policy_show },
        { "add", policy_add },
        { "del", policy_del },
        {}
};
