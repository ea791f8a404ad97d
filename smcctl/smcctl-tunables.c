/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* smcctl tunables [show | get KEY | set KEY=VALUE...]: the Manager's *Tunable* methods. */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "smcctl.h"


/* ListTunables as a JSON object in *ret. Returns an exit code. */
static int list_tunables(sd_bus *bus, json_object **ret) {
        return call_json(bus, BUS_PATH, BUS_MANAGER_INTERFACE, "ListTunables", json_type_object, ret, "");
}

static int tunables_show(sd_bus *bus, const Args *a, int argc, char **argv) {
        json_object *root;
        int r;

        if (argc > 0) {
                fprintf(stderr, "smcctl: tunables show: unexpected argument: %s\n", argv[0]);
                return EXIT_USAGE;
        }
        r = list_tunables(bus, &root);
        if (r != EXIT_SUCCESS)
                return r;
        r = print_json_or_table(a, root);
        json_object_put(root);
        return r;
}

static int tunables_get(sd_bus *bus, const Args *a, int argc, char **argv) {
        json_object *root;
        char *v = NULL;
        int r;

        if (argc != 1) {
                fprintf(stderr, "smcctl: tunables get: expected one KEY\n");
                return EXIT_USAGE;
        }
        r = call_string(bus, BUS_PATH, BUS_MANAGER_INTERFACE, "GetTunable", &v, "s", argv[0]);
        if (r != EXIT_SUCCESS)
                return r;
        if (!a->json) {
                puts(v);
                free(v);
                return EXIT_SUCCESS;
        }
        root = json_object_new_object();
        if (!root || json_object_object_add(root, argv[0], json_object_new_string(v)) < 0) {
                json_object_put(root);
                free(v);
                fprintf(stderr, "smcctl: out of memory\n");
                return EXIT_FAILURE;
        }
        free(v);
        r = print_json_or_table(a, root);
        json_object_put(root);
        return r;
}

/* Each KEY=VALUE in order; on the first failure the ones already set go back to their
 * old values, so that a refused command changes nothing. */
/* All KEY=VALUE pairs in one SetTunables call: smcd validates them all, saves once and
 * applies them together, so a refused command changes nothing. */
static int tunables_set(sd_bus *bus, const Args *a, int argc, char **argv) {
        sd_bus_error e = SD_BUS_ERROR_NULL;
        sd_bus_message *m = NULL;
        int r;

        if (argc < 1) {
                fprintf(stderr, "smcctl: tunables set: expected KEY=VALUE ...\n");
                return EXIT_USAGE;
        }
        for (int i = 0; i < argc; i++) {
                const char *eq = strchr(argv[i], '=');

                if (!eq || eq == argv[i]) {
                        fprintf(stderr, "smcctl: tunables set: expected KEY=VALUE, not \"%s\"\n", argv[i]);
                        return EXIT_USAGE;
                }
        }
        if (bus_check(bus) != 0)
                return EXIT_FAILURE;
        r = sd_bus_message_new_method_call(bus, &m, BUS_NAME, BUS_PATH, BUS_MANAGER_INTERFACE, "SetTunables");
        if (r >= 0)
                r = sd_bus_message_open_container(m, 'a', "{ss}");
        for (int i = 0; r >= 0 && i < argc; i++) {
                char *key = strndup(argv[i], strcspn(argv[i], "="));

                r = key ? sd_bus_message_append(m, "{ss}", key, argv[i] + strlen(key) + 1) : -ENOMEM;
                free(key);
        }
        if (r >= 0)
                r = sd_bus_message_close_container(m);
        if (r < 0) {
                sd_bus_message_unref(m);
                fprintf(stderr, "smcctl: SetTunables: %s\n", strerror(-r));
                return EXIT_FAILURE;
        }
        r = sd_bus_call(bus, m, 0, &e, NULL);
        sd_bus_message_unref(m);
        if (r < 0) {
                r = bus_error("SetTunables", &e, r);
                sd_bus_error_free(&e);
                return r;
        }
        return EXIT_SUCCESS;
}

const Verb tunables_set_verbs[] = {
        { "set", tunables_set },
        {}
};

const Verb tunables_get_verbs[] = {
        { "get", tunables_get },
        {}
};

const Verb tunables_verbs[] = {
        { "show", tunables_show },
        { "get", tunables_get },
        { "set", tunables_set },
        {}
};
