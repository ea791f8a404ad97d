/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* smcctl stats [show|reset]: org.smcd.smcd1.Stats at /org/smcd/smcd1/stats. */

#include <stdlib.h>

#include "smcctl.h"

#define STATS_PATH BUS_PATH "/stats"
#define STATS_INTERFACE "org.smcd.smcd1.Stats"

static int stats_show(sd_bus *bus, const Args *a, int argc, char **argv) {
        json_object *root;
        int r;

        r = expect_no_args("stats show", argc, argv);
        if (r != EXIT_SUCCESS)
                return r;
        r = call_json(bus, STATS_PATH, STATS_INTERFACE, "Get", json_type_object, &root, "");
        if (r != EXIT_SUCCESS)
                return r;
        r = print_json_or_table(a, root);
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
