/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* smcctl tunables [show | get KEY | set KEY=VALUE...]: the Manager's *Tunable* methods. */

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
static int tunables_set(sd_bus *bus, const Args *a, int argc, char **argv) {
        json_object *old = NULL;
        int r = EXIT_SUCCESS, i;

        if (argc < 1) {
                fprintf(stderr, "smcctl: tunables set: expected KEY=VALUE ...\n");
                return EXIT_USAGE;
        }
        for (i = 0; i < argc; i++) {
                const char *eq = strchr(argv[i], '=');

                if (!eq || eq == argv[i]) {
                        fprintf(stderr, "smcctl: tunables set: expected KEY=VALUE, not \"%s\"\n", argv[i]);
                        return EXIT_USAGE;
                }
        }
        if (argc > 1) {
                r = list_tunables(bus, &old);
                if (r != EXIT_SUCCESS)
                        return r;
        }
        for (i = 0; i < argc; i++) {
                char *key = strndup(argv[i], strcspn(argv[i], "="));

                if (!key) {
                        r = EXIT_FAILURE;
                        break;
                }
                r = call_string(bus, BUS_PATH, BUS_MANAGER_INTERFACE, "SetTunable", NULL, "ss", key, argv[i] + strlen(key) + 1);
                free(key);
                if (r != EXIT_SUCCESS)
                        break;
        }
        /* roll back what this command set before the failure */
        for (int j = i - 1; r != EXIT_SUCCESS && old && j >= 0; j--) {
                char *key = strndup(argv[j], strcspn(argv[j], "="));
                json_object *v;

                if (key && json_object_object_get_ex(old, key, &v))
                        (void) call_string(bus, BUS_PATH, BUS_MANAGER_INTERFACE, "SetTunable", NULL, "ss", key, json_object_get_string(v));
                free(key);
        }
        json_object_put(old);
        return r;
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
