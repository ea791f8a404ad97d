/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * What smcctl's object files share: the options, the verb table types, D-Bus calls that
 * return JSON, and the print-once helpers that render a result as text or as JSON
 * (rdma -j). Every verb returns a process exit code: EXIT_SUCCESS, EXIT_FAILURE (bus,
 * smcd, refused) or EXIT_USAGE (bad arguments; the message is printed).
 */

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <systemd/sd-bus.h>

#define BUS_NAME "org.smcd.smcd1"
#define BUS_PATH "/org/smcd/smcd1"
#define BUS_MANAGER_INTERFACE "org.smcd.smcd1.Manager"

#define EXIT_USAGE 2

typedef struct Args {
        bool json;    /* -j: JSON output */
        bool pretty;  /* -p: indented JSON */
        bool details; /* -d: more columns / fields */
} Args;

typedef struct Verb {
        const char *name;
        int (*run)(sd_bus *bus, const Args *a, int argc, char **argv); /* returns an exit code */
} Verb;

/* The verb tables, one per object file (smcctl-<object>.c); the first verb of each is
 * the default; NULL-name terminated. */
extern const Verb stats_verbs[];
extern const Verb connections_verbs[];
extern const Verb devices_verbs[];
extern const Verb linkgroups_verbs[];
extern const Verb tunables_verbs[];
extern const Verb policy_verbs[];
extern const Verb pnet_verbs[];
extern const Verb tunables_set_verbs[]; /* "smcctl set": tunables set alone */
extern const Verb tunables_get_verbs[]; /* "smcctl get": tunables get alone */

/* The entry of @table (NULL-name terminated, stride @size, name pointer first) that
 * @word names exactly or is the only one to start with. Returns NULL and sets
 * *ret_ambiguous if several do. */
const void *lookup_prefix(const void *table, size_t size, const char *word, bool *ret_ambiguous);

/* Print "smcctl: WHAT: reason" for a failed call (the D-Bus error's message, else
 * strerror(-r)) and a hint when smcd is not on the bus. Returns EXIT_FAILURE. */
int bus_error(const char *what, const sd_bus_error *e, int r);
/* The system bus could not be opened (main() goes on without it, so that a verb
 * checks its arguments first): @bus NULL prints why and gives EXIT_FAILURE; else 0.
 * Call before the first use of @bus. */
int bus_check(sd_bus *bus);
extern int bus_open_error; /* the negative errno of sd_bus_open_system(), or 0 */

/* Call @path @interface.@method with the arguments of @sig (sd_bus_message_append
 * types). With @ret, read a string reply into *ret (newly allocated, the caller frees
 * it). Returns an exit code; errors are printed. */
int call_string(sd_bus *bus, const char *path, const char *interface, const char *method, char **ret,
                const char *sig, ...);

/* Like call_string(), and parse the string reply as JSON of @type
 * (json_type_object or json_type_array) into *ret (the caller puts it). */
int call_json(sd_bus *bus, const char *path, const char *interface, const char *method, json_type type,
              json_object **ret, const char *sig, ...);

/* Print @root as JSON (-j, -p), or as text: one "key  value" row per leaf, nested keys
 * joined with dots, arrays as space-separated values, keys padded to one column.
 * Returns an exit code. */
int print_json_or_table(const Args *a, json_object *root);

/* One column of a table: JSON key, title, right-aligned (numbers), shown only with -d. */
typedef struct Column {
        const char *key;
        const char *title;
        bool right;
        bool detail;
} Column;

/* Print the JSON array @rows of objects as an aligned table of @cols (a missing or null
 * value shows as "-"), or as JSON with -j (all keys of each object). Returns an exit code. */
int print_rows(const Args *a, json_object *rows, const Column *cols, size_t n_cols);

/* A copy of the JSON array of objects @rows in which every value v of every object is
 * replaced by @map(v) (a new reference; NULL means ENOMEM), for text tables that show
 * a value differently from the JSON. Returns the copy (the caller puts it) or NULL. */
json_object *rows_map(json_object *rows, json_object *(*map)(json_object *v));

/* The string value of @key in object @o, or "-" if missing or null. */
const char *json_str(json_object *o, const char *key);

/* The value of option @name ("--port") in argv[*i], as "--port=V" or "--port V"
 * (consuming the next word). NULL if argv[*i] is not this option; *ret_missing if it
 * is but has no value. */
const char *option_value(int argc, char **argv, int *i, const char *name, bool *ret_missing);

/* EXIT_USAGE with "smcctl: WHAT: unexpected argument: X" if argc > 0, else EXIT_SUCCESS. */
int expect_no_args(const char *what, int argc, char **argv);

/* "out of memory" printed; returns EXIT_FAILURE. */
int oom(void);
