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
#include "dmb.h"
#include "log.h"
#include "manager-bus.h"
#include "tunables.h"

static int property_get_version(sd_bus *bus, const char *path, const char *interface,
                                const char *property, sd_bus_message *reply, void *userdata,
                                sd_bus_error *error) {
        return sd_bus_message_append(reply, "s", SMCD_VERSION);
}

static int add_str(json_object *o, const char *key, const char *v);

/* Reply to @msg with @root as a compact JSON string; takes ownership of @root (NULL:
 * -ENOMEM). Returns what sd_bus_reply_method_return() returns. */
static int reply_json(sd_bus_message *msg, json_object *root) {
        int r;

        if (!root)
                return -ENOMEM;
        r = sd_bus_reply_method_return(msg, "s",
                                       json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN |
                                                                      JSON_C_TO_STRING_NOSLASHESCAPE));
        json_object_put(root);
        return r;
}

static int method_get_stats(sd_bus_message *msg, void *userdata, sd_bus_error *error) {
        Manager *m = userdata;
        struct smc_pool_stats ps;
        json_object *root;

        if (m->pool)
                smc_pool_get_stats(m->pool, &ps);
        root = smcd_stats_to_json(&m->stats, m->pool ? &ps : NULL);
        if (!root)
                return -ENOMEM;
        if (m->pool) { /* the live clearing mode next to the clearing counters */
                json_object *pool;

                if (json_object_object_get_ex(root, "pool", &pool) &&
                    add_str(pool, "buf_clear", m->config.buf_clear == SMC_POOL_CLEAR_CREATE ? "create"
                                                                                              : "release") < 0) {
                        json_object_put(root);
                        return -ENOMEM;
                }
        }
        return reply_json(msg, root);
}

/* What smcd knows of an open endpoint's state: its peer's CLOSE (or death), and the
 * connection flags both sides publish in the DMB headers (dmb.h). */
static const char *endpoint_state(const Endpoint *e) {
        const Conn *conn = e->conn;
        unsigned side = (unsigned) (e - conn->ep);
        const Endpoint *peer = &conn->ep[!side];
        struct smc_dmb_hdr *own_rx = conn->buf[side]->base, *peer_rx = conn->buf[!side]->base;
        uint32_t theirs, mine;

        /* the peer's state as writer (in our rx DMB) and as reader (in its own) */
        theirs = atomic_load_explicit(&own_rx->conn_flags, memory_order_acquire) |
                 atomic_load_explicit(&peer_rx->reader_flags, memory_order_acquire);
        mine = atomic_load_explicit(&peer_rx->conn_flags, memory_order_acquire);
        if ((peer->closed && peer->aborted) || (theirs & SMC_DMB_CONN_ABORT))
                return "aborted-by-peer";
        if (peer->closed || (theirs & SMC_DMB_CONN_CLOSED))
                return "closed-by-peer";
        if ((theirs & SMC_DMB_CONN_DONE_WRITING) && (mine & SMC_DMB_CONN_DONE_WRITING))
                return "both-done-writing";
        if (theirs & SMC_DMB_CONN_DONE_WRITING)
                return "peer-done-writing";
        if (mine & SMC_DMB_CONN_DONE_WRITING)
                return "done-writing";
        return "open";
}

static uint64_t dmb_prod_bytes(const struct smc_buf *b) {
        struct smc_dmb_hdr *h = b->base;

        return atomic_load_explicit(&h->prod_bytes, memory_order_acquire);
}

static int add_u64(json_object *o, const char *key, uint64_t v) {
        json_object *n = json_object_new_uint64(v);

        if (!n || json_object_object_add(o, key, n) < 0) {
                json_object_put(n);
                return -ENOMEM;
        }
        return 0;
}

static int add_str(json_object *o, const char *key, const char *v) {
        json_object *n = json_object_new_string(v);

        if (!n || json_object_object_add(o, key, n) < 0) {
                json_object_put(n);
                return -ENOMEM;
        }
        return 0;
}

/* One open endpoint as a JSON object (the caller owns it), or NULL on ENOMEM. */
static json_object *endpoint_to_json(const Endpoint *e) {
        const Conn *conn = e->conn;
        unsigned side = (unsigned) (e - conn->ep);
        char id[17], a[SMCD_ADDR_STRLEN], b[SMCD_ADDR_STRLEN];
        json_object *o = json_object_new_object();

        if (!o)
                return NULL;
        snprintf(id, sizeof(id), "%016" PRIx64, e->id);
        if (add_str(o, "id", id) < 0 ||
            add_str(o, "role", side == EP_CLIENT ? "client" : "server") < 0 ||
            add_str(o, "state", endpoint_state(e)) < 0 ||
            add_str(o, "local", smcd_addr_to_string(&e->local, a)) < 0 ||
            add_str(o, "peer", smcd_addr_to_string(&e->peer, b)) < 0 ||
            add_str(o, "mode", "SMCD") < 0 ||
            /* tx ring = the peer's DMB, rx ring (RMB) = its own */
            add_u64(o, "sndbuf", conn->buf[!side]->size) < 0 ||
            add_u64(o, "rmb", conn->buf[side]->size) < 0 ||
            add_u64(o, "bytes_tx", dmb_prod_bytes(conn->buf[!side])) < 0 ||
            add_u64(o, "bytes_rx", dmb_prod_bytes(conn->buf[side])) < 0 ||
            add_u64(o, "pid", e->owner ? (uint64_t) e->owner->pid : 0) < 0 ||
            add_u64(o, "uid", e->uid) < 0) {
                json_object_put(o);
                return NULL;
        }
        return o;
}

static int method_list_connections(sd_bus_message *msg, void *userdata, sd_bus_error *error) {
        Manager *m = userdata;
        json_object *root = json_object_new_array();
        size_t st = 0;
        void *v;

        if (!root)
                return -ENOMEM;
        while (m->endpoints && u64map_iterate(m->endpoints, &st, NULL, &v)) {
                json_object *o = endpoint_to_json(v);

                if (!o || json_object_array_add(root, o) < 0) {
                        json_object_put(o);
                        json_object_put(root);
                        return -ENOMEM;
                }
        }
        return reply_json(msg, root);
}

/* 0 if the caller of @msg has effective uid 0, else a named error in @error. */
static int check_root(sd_bus_message *msg, sd_bus_error *error) {
        sd_bus_creds *creds = NULL;
        uid_t uid;
        int r;

        r = sd_bus_query_sender_creds(msg, SD_BUS_CREDS_EUID | SD_BUS_CREDS_UID, &creds);
        if (r < 0)
                return r;
        r = sd_bus_creds_get_euid(creds, &uid);
        if (r == -ENODATA) /* the bus driver vouches only for the uid */
                r = sd_bus_creds_get_uid(creds, &uid);
        sd_bus_creds_unref(creds);
        if (r < 0)
                return r;
        if (uid != 0)
                return sd_bus_error_setf(error, SMCD_BUS_ERROR_ACCESS_DENIED,
                                         "Only root may do this (caller uid %u).", (unsigned) uid);
        return 0;
}

static int method_reset_stats(sd_bus_message *msg, void *userdata, sd_bus_error *error) {
        Manager *m = userdata;
        int r;

        r = check_root(msg, error);
        if (r < 0)
                return r;
        smcd_stats_reset(&m->stats);
        log_info("Counters reset over D-Bus.");
        return sd_bus_reply_method_return(msg, NULL);
}

static int method_list_tunables(sd_bus_message *msg, void *userdata, sd_bus_error *error) {
        Manager *m = userdata;

        return reply_json(msg, tunables_to_json(&m->config));
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
                                         "Unknown tunable \"%s\" (see ListTunables).", key);
        if (r < 0)
                return r;
        r = sd_bus_reply_method_return(msg, "s", v);
        free(v);
        return r;
}

static int method_set_tunable(sd_bus_message *msg, void *userdata, sd_bus_error *error) {
        Manager *m = userdata;
        ManagerConfig next = m->config;
        const char *key, *value;
        char err[300], *shown = NULL;
        int r;

        r = sd_bus_message_read(msg, "ss", &key, &value);
        if (r < 0)
                return r;
        r = check_root(msg, error);
        if (r < 0)
                return r;
        if (tunable_parse(&next, key, value, err, sizeof(err)) < 0)
                return sd_bus_error_setf(error, SMCD_BUS_ERROR_INVALID_ARGUMENT, "%s", err);
        /* persist first: a value that could not be saved is not applied either */
        if (m->config.state_file[0]) {
                r = tunables_save(&next, m->config.state_file);
                if (r < 0) {
                        log_error_errno(r, "Cannot save tunables to %s: %m", m->config.state_file);
                        return sd_bus_error_set_errnof(error, r, "Cannot save tunables to %s: %m",
                                                       m->config.state_file);
                }
        }
        /* the limits and rmem are read at each new client / connection; buf_clear is
         * the pool's (live); inline is stored only */
        m->config.buf_clear = next.buf_clear;
        m->config.max_conns_per_uid = next.max_conns_per_uid;
        m->config.max_buf_per_uid = next.max_buf_per_uid;
        m->config.max_clients_per_uid = next.max_clients_per_uid;
        m->config.rmem = next.rmem;
        m->config.inline_mode = next.inline_mode;
        if (strcmp(key, "buf_clear") == 0)
                smc_pool_set_clear(m->pool, m->config.buf_clear);
        (void) tunable_format(&m->config, key, &shown);
        log_info("Tunable %s set to %s over D-Bus.", key, shown ? shown : value);
        free(shown);
        return sd_bus_reply_method_return(msg, NULL);
}

/* SD_BUS_VTABLE_UNPRIVILEGED: sd-bus would otherwise refuse callers of another uid
 * without CAP_SYS_ADMIN with a generic AccessDenied; ResetStats checks for itself so
 * that the caller gets our named error. */
static const sd_bus_vtable manager_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_PROPERTY("Version", "s", property_get_version, 0, SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_METHOD_WITH_ARGS("GetStats", SD_BUS_NO_ARGS, SD_BUS_RESULT("s", json),
                                method_get_stats, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("ListConnections", SD_BUS_NO_ARGS, SD_BUS_RESULT("s", json),
                                method_list_connections, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("ResetStats", SD_BUS_NO_ARGS, SD_BUS_NO_RESULT,
                                method_reset_stats, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("ListTunables", SD_BUS_NO_ARGS, SD_BUS_RESULT("s", json),
                                method_list_tunables, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("GetTunable", SD_BUS_ARGS("s", key), SD_BUS_RESULT("s", value),
                                method_get_tunable, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("SetTunable", SD_BUS_ARGS("s", key, "s", value), SD_BUS_NO_RESULT,
                                method_set_tunable, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_VTABLE_END
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
