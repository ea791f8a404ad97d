/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * smcctl devices [show]: org.smcd.smcd1.Devices. Text: three aligned tables (ISM, RoCE,
 * netdevs), each under a title line and with a column header; -d adds columns (GIDs,
 * MACs, link details); -j prints smcd's JSON object as it is.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "smcctl.h"

#define DEVICES_PATH BUS_PATH "/devices"
#define DEVICES_INTERFACE "org.smcd.smcd1.Devices"

/* One value of an array as text: a string or number as is; a GID entry (object) as
 * "gid(type)" with the type's space dropped ("RoCEv2"). */
static void print_item(FILE *f, json_object *v) {
        if (json_object_is_type(v, json_type_object)) {
                char type[32];
                size_t k = 0;

                for (const char *t = json_str(v, "type"); *t && k < sizeof(type) - 1; t++)
                        if (*t != ' ')
                                type[k++] = *t;
                type[k] = '\0';
                fprintf(f, "%s(%s)", json_str(v, "gid"), type);
        } else
                fputs(json_object_get_string(v), f);
}

/* A value for the text tables: an array's items joined with "," ("-" if empty), ""
 * as "-", everything else as is (rows_map). NULL on ENOMEM. */
static json_object *value_for_text(json_object *v) {
        json_object *nv;
        char *s = NULL;
        size_t len = 0;
        FILE *f;

        if (json_object_is_type(v, json_type_string) && json_object_get_string_len(v) == 0)
                return json_object_new_string("-");
        if (!json_object_is_type(v, json_type_array))
                return json_object_get(v);
        f = open_memstream(&s, &len);
        if (!f)
                return NULL;
        for (size_t j = 0; j < json_object_array_length(v); j++) {
                if (j)
                        fputc(',', f);
                print_item(f, json_object_array_get_idx(v, j));
        }
        fclose(f);
        nv = json_object_new_string(s && *s ? s : "-");
        free(s);
        return nv;
}

/* "Title:" and the table of @root's array @key. Returns an exit code. */
static int print_section(const Args *a, json_object *root, const char *key, const char *title, const char *note,
                         const Column *cols, size_t n_cols) {
        json_object *rows, *text;
        int r;

        if (!json_object_object_get_ex(root, key, &rows) || !json_object_is_type(rows, json_type_array)) {
                fprintf(stderr, "smcctl: devices: smcd sent no \"%s\" list\n", key);
                return EXIT_FAILURE;
        }
        text = rows_map(rows, value_for_text);
        if (!text)
                return oom();
        if (note && *note)
                printf("%s: none (%s)\n", title, note);
        else
                printf("%s:\n", title);
        r = print_rows(a, text, cols, n_cols);
        json_object_put(text);
        return r;
}

static int devices_show(sd_bus *bus, const Args *a, int argc, char **argv) {
        static const Column ism_cols[] = {
                { "name", "NAME", false, false },      { "type", "TYPE", false, false },
                { "state", "STATE", false, false },    { "gid", "GID", false, false },
                { "chid", "CHID", false, false },      { "dmbs_in_use", "DMBS", true, false },
                { "dmb_bytes_in_use", "DMB_BYTES", true, false },
                { "connections", "CONNS", true, false },
        };
        static const Column roce_cols[] = {
                { "name", "NAME", false, false },      { "port", "PORT", true, false },
                { "state", "STATE", false, false },    { "link_layer", "LINK_LAYER", false, true },
                { "mtu", "MTU", true, true },          { "guid", "GUID", false, true },
                { "netdev", "NETDEV", false, false },  { "links", "LINKS", true, false },
                { "pnet_id", "PNET_ID", false, false }, { "gids", "GIDS", false, true },
        };
        static const Column netdev_cols[] = {
                { "name", "NAME", false, false },      { "ifindex", "IFINDEX", true, false },
                { "state", "STATE", false, false },    { "admin", "ADMIN", false, true },
                { "operstate", "OPERSTATE", false, true }, { "carrier", "CARRIER", false, true },
                { "mtu", "MTU", true, false },         { "mac", "MAC", false, true },
                { "addresses", "ADDRESSES", false, false },
        };
        json_object *root = NULL, *v;
        const char *note = NULL;
        int r;

        r = expect_no_args("devices", argc, argv);
        if (r != EXIT_SUCCESS)
                return r;
        r = call_json(bus, DEVICES_PATH, DEVICES_INTERFACE, "List", json_type_object, &root, "");
        if (r != EXIT_SUCCESS)
                return r;
        if (a->json) {
                r = print_json_or_table(a, root);
                json_object_put(root);
                return r;
        }
        if (json_object_object_get_ex(root, "roce_note", &v) && json_object_is_type(v, json_type_string))
                note = json_object_get_string(v);
        r = print_section(a, root, "ism", "ISM devices", NULL, ism_cols, sizeof(ism_cols) / sizeof(ism_cols[0]));
        if (r == EXIT_SUCCESS) {
                putchar('\n');
                r = print_section(a, root, "roce", "RoCE devices", note, roce_cols,
                                  sizeof(roce_cols) / sizeof(roce_cols[0]));
        }
        if (r == EXIT_SUCCESS) {
                putchar('\n');
                r = print_section(a, root, "netdevs", "Netdevs", NULL, netdev_cols,
                                  sizeof(netdev_cols) / sizeof(netdev_cols[0]));
        }
        json_object_put(root);
        return r;
}

const Verb devices_verbs[] = {
        { "show", devices_show },
        {}
};
