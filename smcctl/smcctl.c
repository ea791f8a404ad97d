/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * smcctl: inspect and control smcd over D-Bus (org.smcd.smcd1 on the system bus, or
 * $DBUS_SYSTEM_BUS_ADDRESS). ip(8)-style: smcctl [OPTIONS] OBJECT [COMMAND]; objects
 * and commands abbreviate to a unique prefix, "show" is the default command. A verb
 * table (networkctl); each field is printed once through one helper that renders text
 * or JSON (rdma -j). smcctl speaks only D-Bus, never smcd's control socket.
 *
 * Exit: 0 ok, 1 failure (bus, smcd, unknown object or command), 2 usage.
 */

#include <errno.h>
#include <getopt.h>
#include <json-c/json.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-bus.h>

#include "config.h"

#define BUS_NAME "org.smcd.smcd1"
#define BUS_PATH "/org/smcd/smcd1"
#define BUS_MANAGER_INTERFACE "org.smcd.smcd1.Manager"

#define EXIT_USAGE 2

typedef struct Args {
        bool json;
        bool pretty;
} Args;

typedef struct Verb {
        const char *name;
        int (*run)(sd_bus *bus, const Args *a, int argc, char **argv); /* returns an exit code */
} Verb;

typedef struct Object {
        const char *name;
        const Verb *verbs; /* the first is the default */
} Object;

/* The entry of @table (NULL-name terminated, stride @size) that @word names exactly or
 * is the only one to start with. Returns NULL and sets *ret_ambiguous if several do. */
static const void *lookup_prefix(const void *table, size_t size, const char *word, bool *ret_ambiguous) {
        const void *found = NULL;
        size_t len = strlen(word);

        *ret_ambiguous = false;
        for (const char *p = table; *(const char *const *) p; p += size) {
                const char *name = *(const char *const *) p;

                if (strcmp(name, word) == 0) {
                        *ret_ambiguous = false;
                        return p;
                }
                if (len > 0 && strncmp(name, word, len) == 0) {
                        if (found)
                                *ret_ambiguous = true;
                        found = p;
                }
        }
        return *ret_ambiguous ? NULL : found;
}

static int bus_error(const char *what, const sd_bus_error *e, int r) {
        fprintf(stderr, "smcctl: %s: %s\n", what,
                sd_bus_error_is_set(e) && e->message ? e->message : strerror(-r));
        if (sd_bus_error_is_set(e) &&
            (sd_bus_error_has_name(e, SD_BUS_ERROR_SERVICE_UNKNOWN) ||
             sd_bus_error_has_name(e, SD_BUS_ERROR_NAME_HAS_NO_OWNER)))
                fprintf(stderr, "smcctl: is smcd running (with D-Bus)?\n");
        return EXIT_FAILURE;
}

/* Text rendering of the stats JSON: one "key value" row per leaf, nested keys joined
 * with dots, arrays as space-separated values; keys padded to one column. */
struct row {
        char *key;
        char *value;
};

struct rows {
        struct row *v;
        size_t n;
};

static int rows_add(struct rows *t, const char *key, const char *value) {
        struct row *v = realloc(t->v, (t->n + 1) * sizeof(*v));

        if (!v)
                return -ENOMEM;
        t->v = v;
        v[t->n].key = strdup(key);
        v[t->n].value = strdup(value);
        if (!v[t->n].key || !v[t->n].value) {
                free(v[t->n].key);
                free(v[t->n].value);
                return -ENOMEM;
        }
        t->n++;
        return 0;
}

static void rows_done(struct rows *t) {
        for (size_t i = 0; i < t->n; i++) {
                free(t->v[i].key);
                free(t->v[i].value);
        }
        free(t->v);
}

static int flatten(struct rows *t, const char *prefix, json_object *o) {
        int r = 0;

        if (json_object_is_type(o, json_type_object)) {
                json_object_object_foreach(o, k, v) {
                        char *key = NULL;

                        if (asprintf(&key, "%s%s%s", prefix, *prefix ? "." : "", k) < 0)
                                return -ENOMEM;
                        r = flatten(t, key, v);
                        free(key);
                        if (r < 0)
                                return r;
                }
                return 0;
        }
        if (json_object_is_type(o, json_type_array)) {
                char *s = NULL;
                size_t len = 0;
                FILE *f = open_memstream(&s, &len);

                if (!f)
                        return -ENOMEM;
                for (size_t i = 0; i < json_object_array_length(o); i++)
                        fprintf(f, "%s%s", i ? " " : "",
                                json_object_get_string(json_object_array_get_idx(o, i)));
                fclose(f);
                r = rows_add(t, prefix, s ? s : "");
                free(s);
                return r;
        }
        return rows_add(t, prefix, json_object_get_string(o));
}

static int print_json_or_table(const Args *a, json_object *root) {
        struct rows t = {};
        size_t width = 0;
        int r;

        if (a->json) {
                int flags = JSON_C_TO_STRING_NOSLASHESCAPE |
                            (a->pretty ? JSON_C_TO_STRING_PRETTY : JSON_C_TO_STRING_PLAIN);
                puts(json_object_to_json_string_ext(root, flags));
                return EXIT_SUCCESS;
        }
        r = flatten(&t, "", root);
        if (r < 0) {
                rows_done(&t);
                fprintf(stderr, "smcctl: out of memory\n");
                return EXIT_FAILURE;
        }
        for (size_t i = 0; i < t.n; i++)
                if (strlen(t.v[i].key) > width)
                        width = strlen(t.v[i].key);
        for (size_t i = 0; i < t.n; i++)
                printf("%-*s  %s\n", (int) width, t.v[i].key, t.v[i].value);
        rows_done(&t);
        return EXIT_SUCCESS;
}

/* ---- stats ---- */

static int stats_show(sd_bus *bus, const Args *a, int argc, char **argv) {
        sd_bus_error e = SD_BUS_ERROR_NULL;
        sd_bus_message *reply = NULL;
        json_object *root;
        const char *text;
        int r;

        if (argc > 0) {
                fprintf(stderr, "smcctl: stats show: unexpected argument: %s\n", argv[0]);
                return EXIT_USAGE;
        }
        r = sd_bus_call_method(bus, BUS_NAME, BUS_PATH, BUS_MANAGER_INTERFACE, "GetStats", &e, &reply, "");
        if (r < 0) {
                r = bus_error("GetStats", &e, r);
                sd_bus_error_free(&e);
                return r;
        }
        r = sd_bus_message_read(reply, "s", &text);
        if (r < 0) {
                sd_bus_message_unref(reply);
                fprintf(stderr, "smcctl: GetStats: bad reply: %s\n", strerror(-r));
                return EXIT_FAILURE;
        }
        root = json_tokener_parse(text);
        sd_bus_message_unref(reply);
        if (!root) {
                fprintf(stderr, "smcctl: GetStats: smcd sent invalid JSON\n");
                return EXIT_FAILURE;
        }
        r = print_json_or_table(a, root);
        json_object_put(root);
        return r;
}

static int stats_reset(sd_bus *bus, const Args *a, int argc, char **argv) {
        sd_bus_error e = SD_BUS_ERROR_NULL;
        int r;

        if (argc > 0) {
                fprintf(stderr, "smcctl: stats reset: unexpected argument: %s\n", argv[0]);
                return EXIT_USAGE;
        }
        r = sd_bus_call_method(bus, BUS_NAME, BUS_PATH, BUS_MANAGER_INTERFACE, "ResetStats", &e, NULL, "");
        if (r < 0) {
                r = bus_error("ResetStats", &e, r);
                sd_bus_error_free(&e);
                return r;
        }
        return EXIT_SUCCESS;
}

/* ---- connections ---- */

/* smcd's ListConnections reply as a JSON array in *ret. Returns an exit code. */
static int list_connections(sd_bus *bus, json_object **ret) {
        sd_bus_error e = SD_BUS_ERROR_NULL;
        sd_bus_message *reply = NULL;
        json_object *root;
        const char *text;
        int r;

        r = sd_bus_call_method(bus, BUS_NAME, BUS_PATH, BUS_MANAGER_INTERFACE, "ListConnections", &e, &reply,
                               "");
        if (r < 0) {
                r = bus_error("ListConnections", &e, r);
                sd_bus_error_free(&e);
                return r;
        }
        r = sd_bus_message_read(reply, "s", &text);
        if (r < 0) {
                sd_bus_message_unref(reply);
                fprintf(stderr, "smcctl: ListConnections: bad reply: %s\n", strerror(-r));
                return EXIT_FAILURE;
        }
        root = json_tokener_parse(text);
        sd_bus_message_unref(reply);
        if (!root || !json_object_is_type(root, json_type_array)) {
                json_object_put(root);
                fprintf(stderr, "smcctl: ListConnections: smcd sent invalid JSON\n");
                return EXIT_FAILURE;
        }
        *ret = root;
        return EXIT_SUCCESS;
}

typedef struct ConnFilter {
        bool tcp_only; /* --mode tcp: smcd knows no TCP connections */
        int port;      /* -1 = any; else the local or the peer port */
} ConnFilter;

/* The value of option @name ("--port") in argv[*i], as "--port=V" or "--port V"
 * (consuming the next word). NULL if argv[*i] is not this option; *ret_missing if it
 * is but has no value. */
static const char *option_value(int argc, char **argv, int *i, const char *name, bool *ret_missing) {
        size_t len = strlen(name);

        *ret_missing = false;
        if (strncmp(argv[*i], name, len) != 0)
                return NULL;
        if (argv[*i][len] == '=')
                return argv[*i] + len + 1;
        if (argv[*i][len] != '\0')
                return NULL;
        if (*i + 1 >= argc) {
                *ret_missing = true;
                return NULL;
        }
        return argv[++*i];
}

static int parse_conn_filter(int argc, char **argv, ConnFilter *f) {
        f->tcp_only = false;
        f->port = -1;
        for (int i = 0; i < argc; i++) {
                const char *v;
                bool missing;

                if ((v = option_value(argc, argv, &i, "--mode", &missing))) {
                        if (strcmp(v, "smcd") == 0)
                                f->tcp_only = false;
                        else if (strcmp(v, "tcp") == 0)
                                f->tcp_only = true;
                        else {
                                fprintf(stderr, "smcctl: connections: unknown mode \"%s\" (smcd or tcp)\n", v);
                                return -EINVAL;
                        }
                } else if ((v = option_value(argc, argv, &i, "--port", &missing))) {
                        char *end;
                        unsigned long p;

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

static const char *json_str(json_object *o, const char *key) {
        json_object *v;

        if (!json_object_object_get_ex(o, key, &v) || json_object_is_type(v, json_type_null))
                return "-";
        return json_object_get_string(v);
}

/* The port of "ip:port" / "[ip6]:port", or -1. */
static int addr_port(const char *a) {
        const char *c = strrchr(a, ':');

        return c && c[1] ? atoi(c + 1) : -1;
}

static bool conn_matches(const ConnFilter *f, json_object *o) {
        if (f->tcp_only)
                return false;
        if (f->port >= 0 && addr_port(json_str(o, "local")) != f->port &&
            addr_port(json_str(o, "peer")) != f->port)
                return false;
        return true;
}

#define N_CONN_COLUMNS 12

static int connections_show(sd_bus *bus, const Args *a, int argc, char **argv) {
        static const struct {
                const char *key, *title;
                bool right; /* numbers */
        } cols[N_CONN_COLUMNS] = {
                { "id", "ID", false },          { "role", "ROLE", false },
                { "state", "STATE", false },    { "local", "LOCAL", false },
                { "peer", "PEER", false },      { "mode", "MODE", false },
                { "sndbuf", "SNDBUF", true },   { "rmb", "RMB", true },
                { "bytes_tx", "TX", true },     { "bytes_rx", "RX", true },
                { "pid", "PID", true },         { "uid", "UID", true },
        };
        size_t width[N_CONN_COLUMNS];
        json_object *all = NULL, *sel;
        ConnFilter f;
        int r;

        if (parse_conn_filter(argc, argv, &f) < 0)
                return EXIT_USAGE;
        r = list_connections(bus, &all);
        if (r != EXIT_SUCCESS)
                return r;
        sel = json_object_new_array();
        if (!sel) {
                json_object_put(all);
                fprintf(stderr, "smcctl: out of memory\n");
                return EXIT_FAILURE;
        }
        for (size_t i = 0; i < json_object_array_length(all); i++) {
                json_object *o = json_object_array_get_idx(all, i);

                if (conn_matches(&f, o))
                        json_object_array_add(sel, json_object_get(o));
        }
        json_object_put(all);

        if (a->json) {
                r = print_json_or_table(a, sel);
                json_object_put(sel);
                return r;
        }
        for (size_t c = 0; c < N_CONN_COLUMNS; c++)
                width[c] = strlen(cols[c].title);
        for (size_t i = 0; i < json_object_array_length(sel); i++)
                for (size_t c = 0; c < N_CONN_COLUMNS; c++) {
                        size_t l = strlen(json_str(json_object_array_get_idx(sel, i), cols[c].key));
                        if (l > width[c])
                                width[c] = l;
                }
        for (size_t c = 0; c < N_CONN_COLUMNS; c++)
                printf("%s%*s%s", c ? "  " : "", cols[c].right ? (int) width[c] : -(int) width[c], cols[c].title,
                       c + 1 == N_CONN_COLUMNS ? "\n" : "");
        for (size_t i = 0; i < json_object_array_length(sel); i++)
                for (size_t c = 0; c < N_CONN_COLUMNS; c++)
                        printf("%s%*s%s", c ? "  " : "", cols[c].right ? (int) width[c] : -(int) width[c],
                               json_str(json_object_array_get_idx(sel, i), cols[c].key),
                               c + 1 == N_CONN_COLUMNS ? "\n" : "");
        json_object_put(sel);
        return EXIT_SUCCESS;
}

/* ---- tunables ---- */

/* Call @method with the string arguments of @sig and read a string reply into *ret
 * (newly allocated). Returns an exit code; errors are printed. */
static int call_string(sd_bus *bus, const char *method, char **ret, const char *sig, ...) {
        sd_bus_error e = SD_BUS_ERROR_NULL;
        sd_bus_message *m = NULL, *reply = NULL;
        const char *text;
        va_list ap;
        int r;

        r = sd_bus_message_new_method_call(bus, &m, BUS_NAME, BUS_PATH, BUS_MANAGER_INTERFACE, method);
        if (r >= 0) {
                va_start(ap, sig);
                r = sd_bus_message_appendv(m, sig, ap);
                va_end(ap);
        }
        if (r < 0) {
                sd_bus_message_unref(m);
                fprintf(stderr, "smcctl: %s: %s\n", method, strerror(-r));
                return EXIT_FAILURE;
        }
        r = sd_bus_call(bus, m, 0, &e, &reply);
        sd_bus_message_unref(m);
        if (r < 0) {
                r = bus_error(method, &e, r);
                sd_bus_error_free(&e);
                return r;
        }
        if (!ret) {
                sd_bus_message_unref(reply);
                return EXIT_SUCCESS;
        }
        r = sd_bus_message_read(reply, "s", &text);
        if (r >= 0 && !(*ret = strdup(text)))
                r = -ENOMEM;
        sd_bus_message_unref(reply);
        if (r < 0) {
                fprintf(stderr, "smcctl: %s: bad reply: %s\n", method, strerror(-r));
                return EXIT_FAILURE;
        }
        return EXIT_SUCCESS;
}

/* ListTunables as a JSON object in *ret. Returns an exit code. */
static int list_tunables(sd_bus *bus, json_object **ret) {
        char *text = NULL;
        json_object *root;
        int r;

        r = call_string(bus, "ListTunables", &text, "");
        if (r != EXIT_SUCCESS)
                return r;
        root = json_tokener_parse(text);
        free(text);
        if (!root || !json_object_is_type(root, json_type_object)) {
                json_object_put(root);
                fprintf(stderr, "smcctl: ListTunables: smcd sent invalid JSON\n");
                return EXIT_FAILURE;
        }
        *ret = root;
        return EXIT_SUCCESS;
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
        r = call_string(bus, "GetTunable", &v, "s", argv[0]);
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
                r = call_string(bus, "SetTunable", NULL, "ss", key, argv[i] + strlen(key) + 1);
                free(key);
                if (r != EXIT_SUCCESS)
                        break;
        }
        /* roll back what this command set before the failure */
        for (int j = i - 1; r != EXIT_SUCCESS && old && j >= 0; j--) {
                char *key = strndup(argv[j], strcspn(argv[j], "="));
                json_object *v;

                if (key && json_object_object_get_ex(old, key, &v))
                        (void) call_string(bus, "SetTunable", NULL, "ss", key, json_object_get_string(v));
                free(key);
        }
        json_object_put(old);
        return r;
}

static const Verb tunables_verbs[] = {
        { "show", tunables_show },
        { "get", tunables_get },
        { "set", tunables_set },
        {}
};

static const Verb connections_verbs[] = {
        { "show", connections_show },
        {}
};

static const Verb stats_verbs[] = {
        { "show", stats_show },
        { "reset", stats_reset },
        {}
};

static const Object objects[] = {
        { "stats", stats_verbs },
        { "connections", connections_verbs },
        { "tunables", tunables_verbs },
        {}
};

static void help(void) {
        printf("Usage: smcctl [OPTIONS] OBJECT [COMMAND]\n\n"
               "Inspect and control smcd over D-Bus (" BUS_NAME ").\n\n"
               "Objects and commands (unique prefixes are enough; show is the default):\n"
               "  stats [show]     Show smcd's counters\n"
               "  stats reset      Zero smcd's counters (root)\n"
               "  connections [show] [--mode smcd|tcp] [--port N]\n"
               "                   List the SMC-D connection endpoints smcd set up\n"
               "  tunables [show]  Show smcd's tunables\n"
               "  tunables get KEY Show one tunable\n"
               "  tunables set KEY=VALUE...\n"
               "                   Change and persist tunables (root)\n\n"
               "Options:\n"
               "  -j --json        JSON output\n"
               "  -p --pretty      Indent the JSON output\n"
               "  -h --help        Show this help\n"
               "     --version     Show the version\n");
}

static int parse_argv(int argc, char *argv[], Args *a) {
        enum { ARG_VERSION = 0x100 };
        static const struct option options[] = {
                { "help", no_argument, NULL, 'h' },
                { "version", no_argument, NULL, ARG_VERSION },
                { "json", no_argument, NULL, 'j' },
                { "pretty", no_argument, NULL, 'p' },
                {}
        };
        int c;

        /* "+": options only before OBJECT, as ip(8) */
        while ((c = getopt_long(argc, argv, "+hjp", options, NULL)) >= 0)
                switch (c) {
                case 'h':
                        help();
                        return 0;
                case ARG_VERSION:
                        printf("smcctl " SMCD_VERSION "\n");
                        return 0;
                case 'j':
                        a->json = true;
                        break;
                case 'p':
                        a->pretty = true;
                        break;
                default:
                        return -EINVAL; /* getopt printed the reason */
                }
        return 1;
}

int main(int argc, char *argv[]) {
        const Object *obj;
        const Verb *verb;
        sd_bus *bus = NULL;
        Args a = {};
        bool ambiguous;
        int r;

        r = parse_argv(argc, argv, &a);
        if (r <= 0)
                return r < 0 ? EXIT_USAGE : EXIT_SUCCESS;
        if (optind >= argc) {
                fprintf(stderr, "smcctl: missing OBJECT (try: smcctl stats); see smcctl --help\n");
                return EXIT_USAGE;
        }
        obj = lookup_prefix(objects, sizeof(*objects), argv[optind], &ambiguous);
        if (!obj) {
                fprintf(stderr, "smcctl: %s object \"%s\"; objects: stats connections tunables\n",
                        ambiguous ? "ambiguous" : "unknown", argv[optind]);
                return EXIT_FAILURE;
        }
        optind++;
        verb = obj->verbs;
        /* "smcctl connections --port 80": a filter option after OBJECT means the default command */
        if (optind < argc && argv[optind][0] != '-') {
                verb = lookup_prefix(obj->verbs, sizeof(*obj->verbs), argv[optind], &ambiguous);
                if (!verb) {
                        fprintf(stderr, "smcctl: %s command \"%s\" for %s; commands:",
                                ambiguous ? "ambiguous" : "unknown", argv[optind], obj->name);
                        for (const Verb *v = obj->verbs; v->name; v++)
                                fprintf(stderr, " %s", v->name);
                        fputc('\n', stderr);
                        return EXIT_FAILURE;
                }
                optind++;
        }

        r = sd_bus_open_system(&bus);
        if (r < 0) {
                fprintf(stderr, "smcctl: cannot connect to the system bus: %s\n", strerror(-r));
                return EXIT_FAILURE;
        }
        r = verb->run(bus, &a, argc - optind, argv + optind);
        sd_bus_flush_close_unref(bus);
        return r;
}
