/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* smcd's org.smcd.smcd1.Manager object on the system bus. See manager-bus.h. */

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-bus.h>

#include "config.h"
#include "bus-util.h"
#include "log.h"
#include "manager-bus.h"
#include "tunables.h"

static int property_get_version(sd_bus *bus, const char *path, const char *interface,
                                const char *property, sd_bus_message *reply, void *userdata,
                                sd_bus_error *error) {
        return sd_bus_message_append(reply, "s", SMCD_VERSION);
}

static int method_list_tunables(sd_bus_message *msg, void *userdata, sd_bus_error *error) {
        Manager *m = userdata;

        return bus_reply_json(msg, tunables_to_json(&m->config));
}

static int method_get_tunable(sd_bus_message *msg, void *userdata, sd_bus_error *error) {
        Manager *m = userdata;
        const char *key;
        char *v = NULL;
        int r;

        r = sd_bus_message_read(msg, "s", &key);
        if (r < 0)
                return r;
        r = tunable_format(&m->config, key, &v);
        if (r == -EINVAL)
                return sd_bus_error_setf(error, SMCD_BUS_ERROR_INVALID_ARGUMENT,
                                         "Unknown tunable \"%s\" (smcctl tunables lists them).", key);
        if (r < 0)
                return r;
        r = sd_bus_reply_method_return(msg, "s", v);
        free(v);
        return r;
}

#define SET_TUNABLES_MAX 64 /* pairs in one SetTunables call */

/* Set the @n tunables @keys to @values as one change: all are validated first (a bad
 * key or value, or a key twice: InvalidArgument naming it, nothing changed), then the
 * state file is saved once (failure: nothing changed), then all are applied. */
static int set_tunables(Manager *m, sd_bus_message *msg, sd_bus_error *error, size_t n, const char *const *keys,
                        const char *const *values) {
        ManagerConfig next = m->config;
        char err[300];
        int r;

        r = bus_check_change(m, msg, m->config.state_load_error, m->config.state_file, error);
        if (r < 0)
                return r;
        if (n == 0)
                return sd_bus_error_setf(error, SMCD_BUS_ERROR_INVALID_ARGUMENT, "No tunable to set.");
        for (size_t i = 0; i < n; i++) {
                for (size_t j = 0; j < i; j++)
                        if (strcmp(keys[i], keys[j]) == 0)
                                return sd_bus_error_setf(error, SMCD_BUS_ERROR_INVALID_ARGUMENT,
                                                         "%s: given twice; nothing was changed", keys[i]);
                if (tunable_parse(&next, keys[i], values[i], err, sizeof(err)) < 0)
                        return sd_bus_error_setf(error, SMCD_BUS_ERROR_INVALID_ARGUMENT,
                                                 n > 1 ? "%s; nothing was changed" : "%s", err);
        }
        /* persist first: values that could not be saved are not applied either */
        if (m->config.state_file[0]) {
                r = tunables_save(&next, m->config.state_file);
                if (r < 0) {
                        log_error_errno(r, "Cannot save tunables to %s: %m", m->config.state_file);
                        return bus_error_state_file(error, r, "Cannot save tunables to %s", m->config.state_file);
                }
        }
        /* the limits, sizes, busy_poll and autocork_size are read at each new client /
         * connection, the handshake bucket at each CONNECT; buf_clear is the pool's
         * (live); inline, max_conns_per_lgr and test_link_time act on SMC-R (smcd-tunables(5)) */
        tunables_copy(&m->config, &next);
        if (!m->config.short_conn_rate)
                hints_clear(m->hints); /* off: no destination stays hinted */
        for (size_t i = 0; i < n; i++) {
                char *shown = NULL;

                if (strcmp(keys[i], "buf_clear") == 0)
                        smc_pool_set_clear(m->pool, m->config.buf_clear);
                (void) tunable_format(&m->config, keys[i], &shown);
                log_info("Tunable %s set to \"%s\" over D-Bus.", keys[i], shown ? shown : values[i]);
                free(shown);
        }
        return sd_bus_reply_method_return(msg, NULL);
}

static int method_set_tunable(sd_bus_message *msg, void *userdata, sd_bus_error *error) {
        const char *key, *value;
        int r;

        r = sd_bus_message_read(msg, "ss", &key, &value);
        if (r < 0)
                return r;
        return set_tunables(userdata, msg, error, 1, &key, &value);
}

static int method_set_tunables(sd_bus_message *msg, void *userdata, sd_bus_error *error) {
        const char *keys[SET_TUNABLES_MAX], *values[SET_TUNABLES_MAX];
        size_t n = 0;
        int r;

        r = sd_bus_message_enter_container(msg, 'a', "{ss}");
        if (r < 0)
                return r;
        while ((r = sd_bus_message_read(msg, "{ss}", &keys[n], &values[n])) > 0)
                if (++n == SET_TUNABLES_MAX && !sd_bus_message_at_end(msg, false))
                        return sd_bus_error_setf(error, SMCD_BUS_ERROR_INVALID_ARGUMENT,
                                                 "More than %d tunables in one call.", SET_TUNABLES_MAX);
        if (r < 0)
                return r;
        r = sd_bus_message_exit_container(msg);
        if (r < 0)
                return r;
        return set_tunables(userdata, msg, error, n, keys, values);
}

/* SD_BUS_VTABLE_UNPRIVILEGED: sd-bus would otherwise refuse callers of another uid
 * without CAP_SYS_ADMIN with a generic AccessDenied; SetTunable checks for itself so
 * that the caller gets our named error. */
static const sd_bus_vtable manager_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_PROPERTY("Version", "s", property_get_version, 0, SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_METHOD_WITH_ARGS("ListTunables", SD_BUS_NO_ARGS, SD_BUS_RESULT("s", json),
                                method_list_tunables, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("GetTunable", SD_BUS_ARGS("s", key), SD_BUS_RESULT("s", value),
                                method_get_tunable, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("SetTunable", SD_BUS_ARGS("s", key, "s", value), SD_BUS_NO_RESULT,
                                method_set_tunable, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("SetTunables", SD_BUS_ARGS("a{ss}", settings), SD_BUS_NO_RESULT,
                                method_set_tunables, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_VTABLE_END
};

/* The other objects (bus-util.h), exported after the Manager. */
static int (*const bus_objects[])(Manager *m, sd_bus *bus) = {
        stats_bus_add,
        connections_bus_add,
        policy_bus_add,
        pnet_bus_add,
        devices_bus_add,
        linkgroups_bus_add,
};

int manager_bus_connect(Manager *m) {
        sd_bus *bus = NULL;
        int r;

        r = sd_bus_open_system(&bus);
        if (r < 0) {
                log_full_errno(LOG_NOTICE, r, "No system bus (%m): running without D-Bus.");
                return r;
        }
        (void) sd_bus_set_description(bus, "smcd");
        r = sd_bus_add_object_vtable(bus, NULL, SMCD_BUS_PATH, SMCD_BUS_MANAGER_INTERFACE,
                                     manager_vtable, m);
        for (size_t i = 0; r >= 0 && i < sizeof(bus_objects) / sizeof(bus_objects[0]); i++)
                r = bus_objects[i](m, bus);
        if (r < 0) {
                log_full_errno(LOG_NOTICE, r, "Failed to export %s: %m; running without D-Bus.", SMCD_BUS_PATH);
                goto fail;
        }
        r = sd_bus_request_name(bus, SMCD_BUS_NAME, 0);
        if (r < 0) {
                log_full_errno(LOG_NOTICE, r, "Cannot own %s on the system bus (%m): running without D-Bus.",
                                 SMCD_BUS_NAME);
                goto fail;
        }
        r = sd_bus_attach_event(bus, m->event, SD_EVENT_PRIORITY_NORMAL);
        if (r < 0) {
                log_full_errno(LOG_NOTICE, r, "Failed to attach the bus to the event loop: %m; running without D-Bus.");
                goto fail;
        }
        m->bus = bus;
        log_debug("Owning %s on the system bus.", SMCD_BUS_NAME);
        return 0;
fail:
        sd_bus_flush_close_unref(bus);
        return r;
}

void manager_bus_disconnect(Manager *m) {
        if (!m->bus)
                return;
        (void) sd_bus_detach_event(m->bus);
        m->bus = sd_bus_flush_close_unref(m->bus);
}
