/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * /org/smcd/smcd1/devices, interface org.smcd.smcd1.Devices (everybody may read it):
 *   property NetdevCount u         links the netlink monitor knows (0 without netlink)
 *   property IsmCount u            ISM devices: 1 (smcd's loopback ISM)
 *   property RoceCount u           RoCE device ports (rows of "roce")
 *   property AddressEvents t       netlink address changes seen since start
 *   property LinkEvents t          netlink link changes seen since start
 *   method   List () -> s          JSON object, stable keys:
 *     "ism":     [ { name ("loopback-ism"), type ("ISM"), state ("up"), gid (16 hex
 *                  digits: this host's loopback ISM, stable per machine id), chid
 *                  ("ffff", as the kernel's loopback-ism), dmbs_in_use, dmb_bytes_in_use
 *                  (ring bytes of the DMBs acquired from the pool), connections (open
 *                  SMC-D connections) } ]
 *     "roce":    [ one per RDMA device port: { name, port, state (ACTIVE, DOWN, INIT,
 *                  ARMED, ...), link_layer, mtu, guid (node GUID, 16 hex digits), netdev,
 *                  gids ([ { index, gid, type ("RoCE v2", "RoCE v1", "IB"), netdev } ]),
 *                  links (SMC-R links of live link groups on the port), pnet_id ("" for
 *                  now) } ]
 *     "roce_note": "" or why "roce" is empty (no RDMA devices, built without libibverbs)
 *     "netdevs": [ one per link, by ifindex: { name, ifindex, state ("up": IFF_UP and
 *                  IFF_RUNNING, else "down"), admin ("up"/"down": IFF_UP), operstate
 *                  (RFC 2863: "UP", "DOWN", "LOWERLAYERDOWN", "UNKNOWN", ...), carrier
 *                  (bool), mtu, mac ("aa:bb:..", "" if none), addresses (["ip/prefix"]) } ]
 *     "netlink": { source ("netlink", or "getifaddrs" when netlink could not be opened at
 *                  start: then "netdevs" is empty), addr_events, link_events, link_up,
 *                  link_down, overruns, bad_messages, resyncs }
 */

#include <errno.h>
#include <inttypes.h>
#include <net/if.h>
#include <stdio.h>
#include <systemd/sd-id128.h>

#include "bus-util.h"
#include "smcr.h"
#include "dmb.h"
#include "ibdev.h"
#include "netlink.h"

#define DEVICES_PATH SMCD_BUS_PATH "/devices"
#define DEVICES_INTERFACE "org.smcd.smcd1.Devices"

/* smcd's loopback ISM GID: 64 bits of an app-specific hash of the machine id (the boot
 * id if there is none), so stable across restarts and different between hosts. */
#define ISM_GID_APP SD_ID128_MAKE(6e, 3a, 51, 0c, 2b, 94, 4f, 17, 8d, 41, c5, 0e, 93, 7a, 2f, 60)
#define ISM_LOOPBACK_CHID "ffff"

static uint64_t ism_gid(void) {
        sd_id128_t id;
        uint64_t g = 0;

        if (sd_id128_get_machine_app_specific(ISM_GID_APP, &id) < 0 &&
            sd_id128_get_boot_app_specific(ISM_GID_APP, &id) < 0)
                return 0;
        for (int i = 0; i < 8; i++)
                g = g << 8 | id.bytes[i];
        return g;
}

static int add_obj(json_object *parent, const char *key, json_object *v) {
        if (!v || json_object_object_add(parent, key, v) < 0) {
                json_object_put(v);
                return -ENOMEM;
        }
        return 0;
}

static int array_add(json_object *a, json_object *v) {
        if (!v || json_object_array_add(a, v) < 0) {
                json_object_put(v);
                return -ENOMEM;
        }
        return 0;
}

static json_object *ism_to_json(Manager *m) {
        json_object *a = json_object_new_array(), *o = json_object_new_object();
        uint64_t dmbs = 0, bytes = 0, conns = 0;
        char gid[17];
        size_t st = 0;
        void *v;

        if (!a || !o) {
                json_object_put(a);
                json_object_put(o);
                return NULL;
        }
        if (m->pool) {
                struct smc_pool_stats ps;

                smc_pool_get_stats(m->pool, &ps);
                for (unsigned c = 0; c < SMC_DMB_NCLASSES; c++) {
                        dmbs += ps.in_use[c];
                        bytes += ps.in_use[c] * smc_dmb_class_size(c);
                }
        }
        /* one per Conn: its client endpoint, or its server one once the client closed */
        while (m->endpoints && u64map_iterate(m->endpoints, &st, NULL, &v)) {
                const Endpoint *e = v;

                if (e->smcr)
                        continue; /* SMC-R: listed with its RoCE device's link group */
                if (e == &e->conn->ep[EP_CLIENT] || e->conn->ep[EP_CLIENT].closed)
                        conns++;
        }
        snprintf(gid, sizeof(gid), "%016" PRIx64, ism_gid());
        if (json_add_str(o, "name", "loopback-ism") < 0 || json_add_str(o, "type", "ISM") < 0 ||
            json_add_str(o, "state", "up") < 0 || json_add_str(o, "gid", gid) < 0 ||
            json_add_str(o, "chid", ISM_LOOPBACK_CHID) < 0 || json_add_u64(o, "dmbs_in_use", dmbs) < 0 ||
            json_add_u64(o, "dmb_bytes_in_use", bytes) < 0 || json_add_u64(o, "connections", conns) < 0 ||
            array_add(a, o) < 0) {
                json_object_put(a);
                return NULL;
        }
        return a;
}

static json_object *gids_to_json(const IbPort *p) {
        json_object *a = json_object_new_array();

        if (!a)
                return NULL;
        for (size_t i = 0; i < p->n_gids; i++) {
                json_object *g = json_object_new_object();
                char s[IBDEV_GID_STRLEN];

                if (!g || json_add_u64(g, "index", p->gids[i].index) < 0 ||
                    json_add_str(g, "gid", ibdev_gid_to_string(p->gids[i].gid, s)) < 0 ||
                    json_add_str(g, "type", p->gids[i].type) < 0 ||
                    json_add_str(g, "netdev", p->gids[i].netdev) < 0 || array_add(a, g) < 0) {
                        json_object_put(g);
                        json_object_put(a);
                        return NULL;
                }
        }
        return a;
}

static json_object *roce_to_json(Manager *m) {
        json_object *a = json_object_new_array();
        const IbPort *ports = NULL;
        size_t n = m->ibdevs ? ibdevs_get_ports(m->ibdevs, &ports) : 0;

        if (!a)
                return NULL;
        for (size_t i = 0; i < n; i++) {
                json_object *o = json_object_new_object();
                char guid[17];

                snprintf(guid, sizeof(guid), "%016" PRIx64, ports[i].node_guid);
                if (!o || json_add_str(o, "name", ports[i].device) < 0 || json_add_u64(o, "port", ports[i].port) < 0 ||
                    json_add_str(o, "state", ports[i].state) < 0 ||
                    json_add_str(o, "link_layer", ports[i].link_layer) < 0 ||
                    json_add_u64(o, "mtu", ports[i].active_mtu) < 0 || json_add_str(o, "guid", guid) < 0 ||
                    json_add_str(o, "netdev", ports[i].netdev) < 0 || add_obj(o, "gids", gids_to_json(&ports[i])) < 0 ||
                    json_add_u64(o, "links", smcr_links_on(m->smcr, ports[i].device, ports[i].port)) < 0 ||
                    json_add_str(o, "pnet_id", "") < 0 || array_add(a, o) < 0) {
                        json_object_put(o);
                        json_object_put(a);
                        return NULL;
                }
        }
        return a;
}

static json_object *netdev_to_json(const NetlinkLink *l) {
        json_object *o = json_object_new_object(), *addrs = json_object_new_array();
        char mac[NETLINK_MAC_STRLEN];

        if (!o || !addrs)
                goto fail;
        for (size_t i = 0; i < l->n_addrs; i++) {
                char s[NETLINK_ADDR_STRLEN];

                if (array_add(addrs, json_object_new_string(netlink_addr_to_string(&l->addrs[i], s))) < 0)
                        goto fail;
        }
        if (json_add_str(o, "name", l->name) < 0 || json_add_u64(o, "ifindex", (uint64_t) l->ifindex) < 0 ||
            json_add_str(o, "state", l->up ? "up" : "down") < 0 ||
            json_add_str(o, "admin", l->flags & IFF_UP ? "up" : "down") < 0 ||
            json_add_str(o, "operstate", netlink_operstate_to_string(l->operstate)) < 0 ||
            add_obj(o, "carrier", json_object_new_boolean(l->carrier)) < 0 || json_add_u64(o, "mtu", l->mtu) < 0 ||
            json_add_str(o, "mac", netlink_mac_to_string(l, mac)) < 0)
                goto fail;
        if (add_obj(o, "addresses", addrs) < 0) {
                addrs = NULL; /* add_obj put it */
                goto fail;
        }
        return o;
fail:
        json_object_put(addrs);
        json_object_put(o);
        return NULL;
}

static json_object *netdevs_to_json(Manager *m) {
        json_object *a = json_object_new_array();
        const NetlinkLink *links = NULL;
        size_t n = m->netlink ? netlink_get_links(m->netlink, &links) : 0;

        if (!a)
                return NULL;
        for (size_t i = 0; i < n; i++)
                if (array_add(a, netdev_to_json(&links[i])) < 0) {
                        json_object_put(a);
                        return NULL;
                }
        return a;
}

static json_object *netlink_to_json(Manager *m) {
        json_object *o = json_object_new_object();
        NetlinkCounters c = {};

        if (!o)
                return NULL;
        if (m->netlink)
                netlink_get_counters(m->netlink, &c);
        if (json_add_str(o, "source", m->netlink ? "netlink" : "getifaddrs") < 0 ||
            json_add_u64(o, "addr_events", c.addr_events) < 0 || json_add_u64(o, "link_events", c.link_events) < 0 ||
            json_add_u64(o, "link_up", c.link_up) < 0 || json_add_u64(o, "link_down", c.link_down) < 0 ||
            json_add_u64(o, "overruns", c.overruns) < 0 || json_add_u64(o, "bad_messages", c.bad_messages) < 0 ||
            json_add_u64(o, "resyncs", c.resyncs) < 0) {
                json_object_put(o);
                return NULL;
        }
        return o;
}

static int method_list(sd_bus_message *msg, void *userdata, sd_bus_error *error) {
        Manager *m = userdata;
        json_object *root = json_object_new_object();
        const char *why = m->ibdevs ? ibdevs_why_empty(m->ibdevs) : "RDMA device discovery is off";

        if (!root)
                return -ENOMEM;
        if (add_obj(root, "ism", ism_to_json(m)) < 0 || add_obj(root, "roce", roce_to_json(m)) < 0 ||
            json_add_str(root, "roce_note", why ? why : "") < 0 || add_obj(root, "netdevs", netdevs_to_json(m)) < 0 ||
            add_obj(root, "netlink", netlink_to_json(m)) < 0) {
                json_object_put(root);
                return -ENOMEM;
        }
        return bus_reply_json(msg, root);
}

static int property_get_count(sd_bus *bus, const char *path, const char *interface, const char *property,
                              sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        Manager *m = userdata;
        const NetlinkLink *links;
        const IbPort *ports;
        uint32_t n = 0;

        if (property[0] == 'N')
                n = m->netlink ? (uint32_t) netlink_get_links(m->netlink, &links) : 0;
        else if (property[0] == 'I')
                n = 1;
        else
                n = m->ibdevs ? (uint32_t) ibdevs_get_ports(m->ibdevs, &ports) : 0;
        return sd_bus_message_append(reply, "u", n);
}

static int property_get_events(sd_bus *bus, const char *path, const char *interface, const char *property,
                               sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        Manager *m = userdata;
        NetlinkCounters c = {};

        if (m->netlink)
                netlink_get_counters(m->netlink, &c);
        return sd_bus_message_append(reply, "t", property[0] == 'A' ? c.addr_events : c.link_events);
}

static const sd_bus_vtable devices_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_PROPERTY("NetdevCount", "u", property_get_count, 0, 0),
        SD_BUS_PROPERTY("IsmCount", "u", property_get_count, 0, 0),
        SD_BUS_PROPERTY("RoceCount", "u", property_get_count, 0, 0),
        SD_BUS_PROPERTY("AddressEvents", "t", property_get_events, 0, 0),
        SD_BUS_PROPERTY("LinkEvents", "t", property_get_events, 0, 0),
        SD_BUS_METHOD_WITH_ARGS("List", SD_BUS_NO_ARGS, SD_BUS_RESULT("s", json), method_list,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_VTABLE_END
};

int devices_bus_add(Manager *m, sd_bus *bus) {
        return sd_bus_add_object_vtable(bus, NULL, DEVICES_PATH, DEVICES_INTERFACE, devices_vtable, m);
}
