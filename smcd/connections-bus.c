/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * /org/smcd/smcd1/connections, interface org.smcd.smcd1.Connections:
 *   property Count u        open SMC endpoints smcd set up
 *   property FallbackCount u  TCP fallback connections tracked (fallback.h; those
 *                           found gone are dropped at the next List)
 *   property FallbackEvicted t  tracked ones dropped for room (the bounds), total
 *   method   List () -> s   the open endpoints as a JSON array, one object per endpoint:
 *                           id (hex string), role (client|server), state, local, peer
 *                           ("ip:port" / "[ip6]:port"), mode ("SMCD"), fallback_reason,
 *                           fallback_code (null), sndbuf, rmb (ring bytes), bytes_tx,
 *                           bytes_rx (published so far), msgs_tx, msgs_rx (its send
 *                           calls that moved data, its recv calls that returned data,
 *                           so far: dmb.h "Counters"), pid, uid (of its owner);
 *                           an endpoint an earlier smcd set up and its process
 *                           re-registered after a restart (REREG) has state
 *                           "restored" (or closed-by-peer / aborted-by-peer once its
 *                           re-registered peer closed) and null byte and message
 *                           counters (this smcd does not map its DMBs);
 *                           then the TCP fallback connections the clients told smcd of
 *                           (fallback.h), looked up in the kernel first, with the same
 *                           keys: id (the kernel's socket cookie, as ss -e shows it),
 *                           state (the kernel's TCP state: "ESTABLISHED", ...), mode
 *                           "TCP", fallback_reason (SMC_CLC_DECL_* name),
 *                           fallback_code ("0x03010000"), sndbuf and rmb (the socket's
 *                           SO_SNDBUF / SO_RCVBUF bytes, INET_DIAG_SKMEMINFO), bytes_tx
 *                           and bytes_rx (payload bytes acknowledged by the peer /
 *                           received: tcp_info's tcpi_bytes_acked less SYN and FIN,
 *                           tcpi_bytes_received less FIN), msgs_tx and msgs_rx null; null
 *                           where the kernel gave nothing. Everybody may call it (as
 *                           ss(8) shows every socket).
 */

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "addr.h"
#include "bus-util.h"
#include "dmb.h"
#include "fallback.h"
#include "log.h"
#include "smc-clc.h"
#include "smcr.h"
#include "sockdiag.h"

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



static int json_add_null(json_object *o, const char *key) {
        return json_object_object_add(o, key, NULL) < 0 ? -ENOMEM : 0;
}

static int json_add_u64_or_null(json_object *o, const char *key, bool have, uint64_t v) {
        return have ? json_add_u64(o, key, v) : json_add_null(o, key);
}

/* One TCP fallback connection as a JSON object (the caller owns it), or NULL. */
static json_object *fallback_to_json(const FallbackConn *f) {
        char id[17], code[11], a[SMCD_ADDR_STRLEN], b[SMCD_ADDR_STRLEN];
        json_object *o = json_object_new_object();

        if (!o)
                return NULL;
        snprintf(id, sizeof(id), "%016" PRIx64, f->cookie);
        snprintf(code, sizeof(code), "0x%08x", f->reason);
        if (json_add_str(o, "id", id) < 0 ||
            json_add_str(o, "role", f->role == SMC_CTL_ROLE_CLIENT ? "client" : "server") < 0 ||
            json_add_str(o, "state", sockdiag_state_name(f->state)) < 0 ||
            json_add_str(o, "local", smcd_addr_to_string(&f->local, a)) < 0 ||
            json_add_str(o, "peer", smcd_addr_to_string(&f->peer, b)) < 0 ||
            json_add_str(o, "mode", "TCP") < 0 ||
            json_add_str(o, "fallback_reason", smc_clc_decl_name(f->reason)) < 0 ||
            json_add_str(o, "fallback_code", code) < 0 ||
            json_add_u64_or_null(o, "sndbuf", f->have_mem, f->sndbuf) < 0 ||
            json_add_u64_or_null(o, "rmb", f->have_mem, f->rcvbuf) < 0 ||
            json_add_u64_or_null(o, "bytes_tx", f->have_bytes, f->bytes_acked) < 0 ||
            json_add_u64_or_null(o, "bytes_rx", f->have_bytes, f->bytes_received) < 0 ||
            json_add_null(o, "msgs_tx") < 0 || json_add_null(o, "msgs_rx") < 0 ||
            json_add_u64(o, "pid", f->owner ? (uint64_t) f->owner->pid : 0) < 0 ||
            json_add_u64(o, "uid", f->owner ? (uint64_t) f->owner->uid : 0) < 0) {
                json_object_put(o);
                return NULL;
        }
        return o;
}

/* What List shows of one open SMC endpoint besides its id, addresses, owner and the
 * null fallback keys; a counter of ROW_NULL is null (not known). */
struct ep_row {
        const char *state;
        const char *mode; /* "SMCD" or "SMCR" */
        uint64_t sndbuf, rmb, bytes_tx, bytes_rx, msgs_tx, msgs_rx;
};
#define ROW_NULL UINT64_MAX

/* One open endpoint as a JSON object (the caller owns it), or NULL on ENOMEM. */
static json_object *ep_row_to_json(const Endpoint *e, bool server, const struct ep_row *r) {
        char id[17], a[SMCD_ADDR_STRLEN], b[SMCD_ADDR_STRLEN];
        json_object *o = json_object_new_object();

        if (!o)
                return NULL;
        snprintf(id, sizeof(id), "%016" PRIx64, e->id);
        if (json_add_str(o, "id", id) < 0 || json_add_str(o, "role", server ? "server" : "client") < 0 ||
            json_add_str(o, "state", r->state) < 0 || json_add_str(o, "local", smcd_addr_to_string(&e->local, a)) < 0 ||
            json_add_str(o, "peer", smcd_addr_to_string(&e->peer, b)) < 0 || json_add_str(o, "mode", r->mode) < 0 ||
            json_add_null(o, "fallback_reason") < 0 || json_add_null(o, "fallback_code") < 0 ||
            json_add_u64(o, "sndbuf", r->sndbuf) < 0 || json_add_u64(o, "rmb", r->rmb) < 0 ||
            json_add_u64_or_null(o, "bytes_tx", r->bytes_tx != ROW_NULL, r->bytes_tx) < 0 ||
            json_add_u64_or_null(o, "bytes_rx", r->bytes_rx != ROW_NULL, r->bytes_rx) < 0 ||
            json_add_u64_or_null(o, "msgs_tx", r->msgs_tx != ROW_NULL, r->msgs_tx) < 0 ||
            json_add_u64_or_null(o, "msgs_rx", r->msgs_rx != ROW_NULL, r->msgs_rx) < 0 ||
            json_add_u64(o, "pid", e->owner ? (uint64_t) e->owner->pid : e->loaded ? (uint64_t) e->table_pid : 0) < 0 ||
            json_add_u64(o, "uid", e->uid) < 0) {
                json_object_put(o);
                return NULL;
        }
        return o;
}

/* One open endpoint as a JSON object (the caller owns it), or NULL on ENOMEM:
 *   - SMC-R (smcr.h): smcd counts its bytes itself; no message counters;
 *   - SMC-D restored (an earlier smcd set it up, REREG): state "restored" (or how its
 *     re-registered peer ended), the ring sizes its process told, null counters (this
 *     smcd does not map its DMBs);
 *   - SMC-D: the counters from the DMB headers, live. */
static json_object *endpoint_to_json(const Endpoint *e) {
        const Conn *conn = e->conn;
        struct ep_row r = { .mode = "SMCD" };
        unsigned side;

        if (e->smcr) {
                SmcrEndpointInfo info;

                smcr_endpoint_info(e, &info);
                r = (struct ep_row) { .state = info.state, .mode = "SMCR", .sndbuf = info.sndbuf, .rmb = info.rmb,
                                      .bytes_tx = info.bytes_tx, .bytes_rx = info.bytes_rx, .msgs_tx = ROW_NULL,
                                      .msgs_rx = ROW_NULL };
                return ep_row_to_json(e, e->role_server, &r);
        }
        side = (unsigned) (e - conn->ep);
        if (conn->restored) {
                const Endpoint *peer = &conn->ep[!side];

                r.state = !(peer->id && peer->closed) ? "restored" : peer->aborted ? "aborted-by-peer" : "closed-by-peer";
                r.sndbuf = conn->rsize[!side];
                r.rmb = conn->rsize[side];
                r.bytes_tx = r.bytes_rx = r.msgs_tx = r.msgs_rx = ROW_NULL;
                return ep_row_to_json(e, side == EP_SERVER, &r);
        }
        /* tx ring = the peer's DMB, rx ring (RMB) = its own */
        r.state = endpoint_state(e);
        r.sndbuf = conn->buf[!side]->size;
        r.rmb = conn->buf[side]->size;
        r.bytes_tx = dmb_prod_bytes(conn->buf[!side]);
        r.bytes_rx = dmb_prod_bytes(conn->buf[side]);
        r.msgs_tx = dmb_prod_msgs(conn->buf[!side]);
        r.msgs_rx = dmb_cons_msgs(conn->buf[side]);
        return ep_row_to_json(e, side == EP_SERVER, &r);
}

static int method_list(sd_bus_message *msg, void *userdata, sd_bus_error *error) {
        Manager *m = userdata;
        json_object *root = json_object_new_array();
        size_t st = 0;
        void *v;
        int r;

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
        /* the fallbacks as the kernel sees them now; if it cannot be asked, as it
         * saw them last */
        r = fallback_refresh(m, true);
        if (r < 0)
                log_warning_errno(r, "Cannot ask the kernel about the TCP fallback connections: %m");
        for (FallbackConn *f = m->fallbacks ? m->fallbacks->oldest : NULL; f; f = f->age_prev) {
                json_object *o = fallback_to_json(f);

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

static int property_get_fallback(sd_bus *bus, const char *path, const char *interface, const char *property,
                                 sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        Manager *m = userdata;
        FallbackTable *t = m->fallbacks;

        if (strcmp(property, "FallbackCount") == 0)
                return sd_bus_message_append(reply, "u", (uint32_t) (t ? t->n : 0));
        return sd_bus_message_append(reply, "t", (uint64_t) (t ? t->evicted : 0));
}

static const sd_bus_vtable connections_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_PROPERTY("Count", "u", property_get_count, 0, 0),
        SD_BUS_PROPERTY("FallbackCount", "u", property_get_fallback, 0, 0),
        SD_BUS_PROPERTY("FallbackEvicted", "t", property_get_fallback, 0, 0),
        SD_BUS_METHOD_WITH_ARGS("List", SD_BUS_NO_ARGS, SD_BUS_RESULT("s", json), method_list,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_VTABLE_END
};

int connections_bus_add(Manager *m, sd_bus *bus) {
        return sd_bus_add_object_vtable(bus, NULL, CONNECTIONS_PATH, CONNECTIONS_INTERFACE, connections_vtable, m);
}
