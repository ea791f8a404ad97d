/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * /org/smcd/smcd1/stats, interface org.smcd.smcd1.Stats:
 *   method Get () -> s      every counter as JSON (stats.h's layout, stable keys; "pool"
 *                           also carries "buf_clear", the live clearing mode, as
 *                           stats.json does). Everybody.
 *   method Reset ()         zero the counters in smcd and in its buffer pool (gauges such
 *                           as current connections or buffers in use stay; open
 *                           connections' counters so far are taken as their new zero);
 *                           root or the admin group, else org.smcd.smcd1.Error.AccessDenied.
 *   properties (read-only, no change signals: read them when needed), the headline
 *   numbers of Get (stats.h says what each counts):
 *     SmcdClientConnections t   smcd.conns_client
 *     SmcdServerConnections t   smcd.conns_server
 *     SmcrClientConnections t   smcr.conns_client
 *     SmcrServerConnections t   smcr.conns_server
 *     ConnectionsCurrent t      smcd.conns_current + smcr.conns_current
 *     FallbackTotal t           fallback.client (= smcd.fallback_total)
 *     FallbackServer t          fallback.server
 *     HandshakeErrors t         smcd.handshake_errors
 *     BytesTx t, BytesRx t      smcd.bytes_tx, smcd.bytes_rx
 *     MessagesTx t, MessagesRx t  smcd.msgs_tx, smcd.msgs_rx
 *     CorkFlushes t             smcd.cork_flushes
 *     SendfileCalls t           smcd.sendfile_calls
 *     PoolBuffersInUse t        pool.in_use
 *     PoolBytesInUse t          pool.bytes_in_use
 *     PoolDowngrades t          pool.downgrade
 *     ConnectCount t            histograms.connect.count
 *     ResetTimestamp t          reset_usec (CLOCK_REALTIME, us; 0 = never reset)
 */

#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "bus-util.h"
#include "log.h"
#include "stats.h"

#define STATS_PATH SMCD_BUS_PATH "/stats"
#define STATS_INTERFACE "org.smcd.smcd1.Stats"

static int method_get(sd_bus_message *msg, void *userdata, sd_bus_error *error) {
        Manager *m = userdata;
        struct smc_pool_stats ps;
        json_object *root;

        if (m->pool)
                smc_pool_get_stats(m->pool, &ps);
        root = smcd_stats_to_json(&m->stats, m->pool ? &ps : NULL);
        if (!root)
                return -ENOMEM;
        return bus_reply_json(msg, root);
}

/* Zero smcd's and the pool's counters. An open connection's DMB counters so far
 * become its new zero (Conn.stats_base), so that what it adds when it ends is what
 * happened after the reset. */
static void stats_reset_all(Manager *m) {
        size_t st = 0;
        void *v;

        while (m->endpoints && u64map_iterate(m->endpoints, &st, NULL, &v)) {
                Conn *conn = ((Endpoint *) v)->conn;

                if (!conn || conn->restored)
                        continue; /* SMC-R: smcd counts its bytes itself; restored: no DMBs */
                /* both of a connection's endpoints may be listed: the same values twice */
                for (unsigned i = 0; i < 2; i++)
                        smcd_dmb_counters_read(conn->buf[i]->base, NULL, &conn->stats_base[i]);
        }
        smcd_stats_reset(&m->stats);
        if (m->pool)
                smc_pool_reset_stats(m->pool);
}

static int method_reset(sd_bus_message *msg, void *userdata, sd_bus_error *error) {
        Manager *m = userdata;
        int r;

        r = bus_check_admin(m, msg, error);
        if (r < 0)
                return r;
        stats_reset_all(m);
        log_info("Counters reset over D-Bus.");
        return sd_bus_reply_method_return(msg, NULL);
}

/* Properties computed from several counters or from the pool. */
static int property_get(sd_bus *bus, const char *path, const char *interface, const char *property,
                        sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        Manager *m = userdata;
        struct smc_pool_stats ps = {};
        uint64_t v = 0;

        if (m->pool)
                smc_pool_get_stats(m->pool, &ps);
        if (strcmp(property, "ConnectionsCurrent") == 0)
                v = m->stats.conns_current + m->stats.smcr.conns_current;
        else if (strcmp(property, "SmcrClientConnections") == 0)
                v = m->stats.smcr.conns_client;
        else if (strcmp(property, "SmcrServerConnections") == 0)
                v = m->stats.smcr.conns_server;
        else if (strcmp(property, "PoolBuffersInUse") == 0) {
                for (unsigned c = 0; c < SMC_DMB_NCLASSES; c++)
                        v += ps.in_use[c];
        } else if (strcmp(property, "PoolBytesInUse") == 0) {
                for (unsigned c = 0; c < SMC_DMB_NCLASSES; c++)
                        v += ps.in_use[c] * (SMC_DMB_HDR_LEN + (uint64_t) smc_dmb_class_size(c));
        } else if (strcmp(property, "PoolDowngrades") == 0)
                v = ps.downgrade;
        else if (strcmp(property, "ConnectCount") == 0)
                v = smc_hist_count(&m->stats.connect);
        return sd_bus_message_append(reply, "t", v);
}

#define STAT_PROPERTY(name, field) \
        SD_BUS_PROPERTY(name, "t", NULL, offsetof(Manager, stats.field), 0)
#define COMPUTED_PROPERTY(name) SD_BUS_PROPERTY(name, "t", property_get, 0, 0)

/* SD_BUS_VTABLE_UNPRIVILEGED: sd-bus would otherwise refuse callers of another uid
 * without CAP_SYS_ADMIN with a generic error; Reset checks for itself so that the
 * caller gets our named error. */
static const sd_bus_vtable stats_vtable[] = {
        SD_BUS_VTABLE_START(0),
        STAT_PROPERTY("SmcdClientConnections", conns_client),
        STAT_PROPERTY("SmcdServerConnections", conns_server),
        COMPUTED_PROPERTY("SmcrClientConnections"),
        COMPUTED_PROPERTY("SmcrServerConnections"),
        COMPUTED_PROPERTY("ConnectionsCurrent"),
        STAT_PROPERTY("FallbackTotal", fallback_total),
        STAT_PROPERTY("FallbackServer", fallback_server),
        STAT_PROPERTY("HandshakeErrors", handshake_errors),
        STAT_PROPERTY("BytesTx", bytes_tx),
        STAT_PROPERTY("BytesRx", bytes_rx),
        STAT_PROPERTY("MessagesTx", msgs_tx),
        STAT_PROPERTY("MessagesRx", msgs_rx),
        STAT_PROPERTY("CorkFlushes", cork_flushes),
        STAT_PROPERTY("SendfileCalls", sendfile_calls),
        COMPUTED_PROPERTY("PoolBuffersInUse"),
        COMPUTED_PROPERTY("PoolBytesInUse"),
        COMPUTED_PROPERTY("PoolDowngrades"),
        COMPUTED_PROPERTY("ConnectCount"),
        STAT_PROPERTY("ResetTimestamp", reset_usec),
        SD_BUS_METHOD_WITH_ARGS("Get", SD_BUS_NO_ARGS, SD_BUS_RESULT("s", json), method_get,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("Reset", SD_BUS_NO_ARGS, SD_BUS_NO_RESULT, method_reset,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_VTABLE_END
};

int stats_bus_add(Manager *m, sd_bus *bus) {
        return sd_bus_add_object_vtable(bus, NULL, STATS_PATH, STATS_INTERFACE, stats_vtable, m);
}
