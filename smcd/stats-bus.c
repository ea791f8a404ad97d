/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * /org/smcd/smcd1/stats, interface org.smcd.smcd1.Stats:
 *   method Get () -> s      the counters as JSON (stats.h's layout; "pool" also carries
 *                           "buf_clear", the live clearing mode). Everybody.
 *   method Reset ()         zero the counters in smcd (gauges stay); root or the admin
 *                           group, else org.smcd.smcd1.Error.AccessDenied.
 */

#include <errno.h>

#include "bus-util.h"
#include "log.h"
#include "stats.h"

#define STATS_PATH SMCD_BUS_PATH "/stats"
#define STATS_INTERFACE "org.smcd.smcd1.Stats"

static int method_get(sd_bus_message *msg, void *userdata, sd_bus_error *error) {
        Manager *m = userdata;
        struct smc_pool_stats ps;
        json_object *root, *pool;

        if (m->pool)
                smc_pool_get_stats(m->pool, &ps);
        root = smcd_stats_to_json(&m->stats, m->pool ? &ps : NULL);
        if (!root)
                return -ENOMEM;
        if (m->pool && json_object_object_get_ex(root, "pool", &pool) &&
            json_add_str(pool, "buf_clear", m->config.buf_clear == SMC_POOL_CLEAR_CREATE ? "create" : "release") < 0) {
                json_object_put(root);
                return -ENOMEM;
        }
        return bus_reply_json(msg, root);
}

static int method_reset(sd_bus_message *msg, void *userdata, sd_bus_error *error) {
        Manager *m = userdata;
        int r;

        r = bus_check_admin(m, msg, error);
        if (r < 0)
                return r;
        smcd_stats_reset(&m->stats);
        log_info("Counters reset over D-Bus.");
        return sd_bus_reply_method_return(msg, NULL);
}

/* SD_BUS_VTABLE_UNPRIVILEGED: sd-bus would otherwise refuse callers of another uid
 * without CAP_SYS_ADMIN with a generic error; Reset checks for itself so that the
 * caller gets our named error. */
static const sd_bus_vtable stats_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_METHOD_WITH_ARGS("Get", SD_BUS_NO_ARGS, SD_BUS_RESULT("s", json), method_get,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("Reset", SD_BUS_NO_ARGS, SD_BUS_NO_RESULT, method_reset,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_VTABLE_END
};

int stats_bus_add(Manager *m, sd_bus *bus) {
        return sd_bus_add_object_vtable(bus, NULL, STATS_PATH, STATS_INTERFACE, stats_vtable, m);
}
