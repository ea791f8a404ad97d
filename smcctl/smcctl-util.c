/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* smcctl's shared helpers: prefix lookup, D-Bus calls, text/JSON printing. See smcctl.h. */

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "smcctl.h"

/* The entry of @table (NULL-name terminated, stride @size) that @word names exactly or
 * is the only one to start with. Returns NULL and sets *ret_ambiguous if several do. */
const void *lookup_prefix(const void *table, size_t size, const char *word, bool *ret_ambiguous) {
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

int bus_error(const char *what, const sd_bus_error *e, int r) {
        fprintf(stderr, "smcctl: %s: %s\n", what,
                sd_bus_error_is_set(e) && e->message ? e->message : strerror(-r));
        if (sd_bus_error_is_set(e) &&
            (sd_bus_error_has_name(e, SD_BUS_ERROR_SERVICE_UNKNOWN) ||
             sd_bus_error_has_name(e, SD_BUS_ERROR_NAME_HAS_NO_OWNER)))
                fprintf(stderr, "smcctl: is smcd running (with D-Bus)?\n");
        if (sd_bus_error_is_set(e) && sd_bus_error_has_name(e, SD_BUS_ERROR_ACCESS_DENIED))
                /* the bus policy refused it before smcd saw it */
                fprintf(stderr, "smcctl: changing smcd's state is for root and smcd's admin group only\n");
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

int print_json_or_table(const Args *a, json_object *root) {
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

int bus_open_error;

int bus_check(sd_bus *bus) {
        if (bus)
                return 0;
        fprintf(stderr, "smcctl: cannot connect to the system bus: %s\n",
                strerror(bus_open_error < 0 ? -bus_open_error : ENOTCONN));
        return EXIT_FAILURE;
}

static int call_stringv(sd_bus *bus, const char *path, const char *interface, const char *method, char **ret,
                        const char *sig, va_list ap) {
        sd_bus_error e = SD_BUS_ERROR_NULL;
        sd_bus_message *m = NULL, *reply = NULL;
        const char *text;
        int r;

        if (bus_check(bus) != 0)
                return EXIT_FAILURE;
        r = sd_bus_message_new_method_call(bus, &m, BUS_NAME, path, interface, method);
        if (r >= 0)
                r = sd_bus_message_appendv(m, sig, ap);
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

int call_string(sd_bus *bus, const char *path, const char *interface, const char *method, char **ret,
                const char *sig, ...) {
        va_list ap;
        int r;

        va_start(ap, sig);
        r = call_stringv(bus, path, interface, method, ret, sig, ap);
        va_end(ap);
        return r;
}

int call_json(sd_bus *bus, const char *path, const char *interface, const char *method, json_type type,
              json_object **ret, const char *sig, ...) {
        json_object *root;
        char *text = NULL;
        va_list ap;
        int r;

        va_start(ap, sig);
        r = call_stringv(bus, path, interface, method, &text, sig, ap);
        va_end(ap);
        if (r != EXIT_SUCCESS)
                return r;
        root = json_tokener_parse(text);
        free(text);
        if (!root || !json_object_is_type(root, type)) {
                json_object_put(root);
                fprintf(stderr, "smcctl: %s: smcd sent invalid JSON\n", method);
                return EXIT_FAILURE;
        }
        *ret = root;
        return EXIT_SUCCESS;
}

/* The value of option @name ("--port") in argv[*i], as "--port=V" or "--port V"
 * (consuming the next word). NULL if argv[*i] is not this option; *ret_missing if it
 * is but has no value. */
const char *option_value(int argc, char **argv, int *i, const char *name, bool *ret_missing) {
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

const char *json_str(json_object *o, const char *key) {
        json_object *v;

        if (!json_object_object_get_ex(o, key, &v) || json_object_is_type(v, json_type_null))
                return "-";
        return json_object_get_string(v);
}

int print_rows(const Args *a, json_object *rows, const Column *cols, size_t n_cols) {
        size_t *width;
        bool first;

        if (a->json)
                return print_json_or_table(a, rows);
        width = calloc(n_cols, sizeof(*width));
        if (!width)
                return oom();
        for (size_t c = 0; c < n_cols; c++)
                width[c] = strlen(cols[c].title);
        for (size_t i = 0; i < json_object_array_length(rows); i++)
                for (size_t c = 0; c < n_cols; c++) {
                        size_t l = strlen(json_str(json_object_array_get_idx(rows, i), cols[c].key));
                        if (l > width[c])
                                width[c] = l;
                }
        for (size_t i = 0; i <= json_object_array_length(rows); i++) {
                json_object *o = i ? json_object_array_get_idx(rows, i - 1) : NULL;

                first = true;
                for (size_t c = 0; c < n_cols; c++) {
                        const char *s = o ? json_str(o, cols[c].key) : cols[c].title;
                        bool last = true;

                        if (cols[c].detail && !a->details)
                                continue;
                        for (size_t d = c + 1; d < n_cols; d++)
                                if (!cols[d].detail || a->details)
                                        last = false;
                        /* no padding after the last column */
                        printf("%s%*s", first ? "" : "  ",
                               cols[c].right ? (int) width[c] : last ? 0 : -(int) width[c], s);
                        first = false;
                }
                putchar('\n');
        }
        free(width);
        return EXIT_SUCCESS;
}

json_object *rows_map(json_object *rows, json_object *(*map)(json_object *v)) {
        json_object *out = json_object_new_array();

        if (!out)
                return NULL;
        for (size_t i = 0; i < json_object_array_length(rows); i++) {
                json_object *row = json_object_array_get_idx(rows, i), *o = json_object_new_object();

                if (!o || json_object_array_add(out, o) < 0) {
                        json_object_put(o);
                        json_object_put(out);
                        return NULL;
                }
                if (!json_object_is_type(row, json_type_object))
                        continue;
                json_object_object_foreach(row, k, v) {
                        json_object *nv = map(v);

                        if (!nv || json_object_object_add(o, k, nv) < 0) {
                                json_object_put(nv);
                                json_object_put(out);
                                return NULL;
                        }
                }
        }
        return out;
}

int expect_no_args(const char *what, int argc, char **argv) {
        if (argc > 0) {
                fprintf(stderr, "smcctl: %s: unexpected argument: %s\n", what, argv[0]);
                return EXIT_USAGE;
        }
        return EXIT_SUCCESS;
}

int oom(void) {
        fprintf(stderr, "smcctl: out of memory\n");
        return EXIT_FAILURE;
}
