/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * smcctl linkgroups [show]: org.smcd.smcd1.LinkGroups (SMC-R link groups; the row schema
 * is in smcd/linkgroups-bus.c). Text: one aligned row per link group under a header (just
 * the header while there are none); -d adds columns; -j prints smcd's JSON array.
 */

#include <stdio.h>
#include <stdlib.h>

#include "smcctl.h"

#define LINKGROUPS_PATH BUS_PATH "/linkgroups"
#define LINKGROUPS_INTERFACE "org.smcd.smcd1.LinkGroups"

/* A value for the text table: an array ("links") as its length (rows_map). */
static json_object *value_for_text(json_object *v) {
        return json_object_is_type(v, json_type_array) ? json_object_new_int64((int64_t) json_object_array_length(v))
                                                       : json_object_get(v);
}

static int linkgroups_show(sd_bus *bus, const Args *a, int argc, char **argv) {
        static const Column cols[] = {
                { "id", "ID", false, false },
                { "role", "ROLE", false, false },
                { "peer", "PEER", false, false },
                { "peer_system_id", "PEER_SYSTEM_ID", false, true },
                { "type", "TYPE", false, false },
                { "local_device", "DEVICE", false, false },
                { "local_port", "PORT", true, false },
                { "peer_gid", "PEER_GID", false, true },
                { "vlan", "VLAN", true, true },
                { "pnet_id", "PNET_ID", false, true },
                { "links", "LINKS", true, false },
                { "connections", "CONNS", true, false },
        };
        json_object *rows = NULL, *text;
        int r;

        r = expect_no_args("linkgroups", argc, argv);
        if (r != EXIT_SUCCESS)
                return r;
        r = call_json(bus, LINKGROUPS_PATH, LINKGROUPS_INTERFACE, "List", json_type_array, &rows, "");
        if (r != EXIT_SUCCESS)
                return r;
        if (a->json) {
                r = print_json_or_table(a, rows);
                json_object_put(rows);
                return r;
        }
        text = rows_map(rows, value_for_text);
        json_object_put(rows);
        if (!text)
                return oom();
        r = print_rows(a, text, cols, sizeof(cols) / sizeof(cols[0]));
        json_object_put(text);
        return r;
}

const Verb linkgroups_verbs[] = {
        { "show", linkgroups_show },
        {}
};
