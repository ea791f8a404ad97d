/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * /org/smcd/smcd1/connections, interface org.smcd.smcd1.Connections:
 *   property Count u        open SMC endpoints smcd set up
 *   method   List () -> s   the open endpoints as a JSON array, one object per endpoint:
 *                           id (hex string), role (client|server), state, local, peer
 *                           ("ip:port" / "[ip6]:port"), mode ("SMCD"), sndbuf, rmb (ring
 *                           bytes), bytes_tx, bytes_rx (published so far), msgs_tx,
 *                           msgs_rx (its send calls that moved data, its recv calls
 *                           that returned data, so far: dmb.h "Counters"), pid, uid (of
 *                           its owner). Everybody may call it (as ss(8) shows every
 *                           socket). TCP fallbacks are not smcd's and are not listed.
 */

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>

#include "addr.h"
#include "bus-util.h"
#include "dmb.h"

#define CONNECTIONS_PATH SMCD_BUS_PATH "/connections"
#define CONNECTIONS_INTERFACE "org.smcd.smcd1.Connections"

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

/* Send calls of the writer into @b / recv calls of its owner (dmb.h, "Counters"). */
static uint64_t dmb_prod_msgs(const struct smc_buf *b) {
        struct smc_dmb_hdr *h = b->base;

        return atomic_load_explicit(&h->prod_msgs, memory_order_relaxed);
}

static uint64_t dmb_cons_msgs(const struct smc_buf *b) {
        struct smc_dmb_hdr *h = b->base;

        return atomic_load_explicit(&h->cons_msgs, memory_order_relaxed);
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
        if (json_add_str(o, "id", id) < 0 ||
            json_add_str(o, "role", side == EP_CLIENT ? "client" : "server") < 0 ||
            json_add_str(o, "state", endpoint_state(e)) < 0 ||
            json_add_str(o, "local", smcd_addr_to_string(&e->local, a)) < 0 ||
            json_add_str(o, "peer", smcd_addr_to_string(&e->peer, b)) < 0 ||
            json_add_str(o, "mode", "SMCD") < 0 ||
            /* tx ring = the peer's DMB, rx ring (RMB) = its own */
            json_add_u64(o, "sndbuf", conn->buf[!side]->size) < 0 ||
            json_add_u64(o, "rmb", conn->buf[side]->size) < 0 ||
            json_add_u64(o, "bytes_tx", dmb_prod_bytes(conn->buf[!side])) < 0 ||
            json_add_u64(o, "bytes_rx", dmb_prod_bytes(conn->buf[side])) < 0 ||
            json_add_u64(o, "msgs_tx", dmb_prod_msgs(conn->buf[!side])) < 0 ||
            json_add_u64(o, "msgs_rx", dmb_cons_msgs(conn->buf[side])) < 0 ||
            json_add_u64(o, "pid", e->owner ? (uint64_t) e->owner->pid : 0) < 0 ||
            json_add_u64(o, "uid", e->uid) < 0) {
                json_object_put(o);
                return NULL;
        }
        return o;
}

static int method_list(sd_bus_message *msg, void *userdata, sd_bus_error *error) {
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
        return bus_reply_json(msg, root);
}

static int property_get_count(sd_bus *bus, const char *path, const char *interface, const char *property,
                              sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        Manager *m = userdata;

        return sd_bus_message_append(reply, "u", (uint32_t) (m->endpoints ? u64map_size(m->endpoints) : 0));
}

static const sd_bus_vtable connections_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_PROPERTY("Count", "u", property_get_count, 0, 0),
        SD_BUS_METHOD_WITH_ARGS("List", SD_BUS_NO_ARGS, SD_BUS_RESULT("s", json), method_list,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_VTABLE_END
};

int connections_bus_add(Manager *m, sd_bus *bus) {
        return sd_bus_add_object_vtable(bus, NULL, CONNECTIONS_PATH, CONNECTIONS_INTERFACE, connections_vtable, m);
}
