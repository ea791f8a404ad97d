/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * /org/smcd/smcd1/linkgroups, interface org.smcd.smcd1.LinkGroups (everybody may read it):
 *   property Count u        SMC-R link groups now
 *   method   List () -> s   the link groups as a JSON array ("[]" without SMC-R;
 *                           exists. The row schema, fixed now so that smcctl and scripts
 *                           can rely on it (keys as in smc-tools' `smcr linkgroup`):
 *     {
 *       "id":          "0000002a"           link group id (hex, as the kernel's lgr id)
 *       "role":        "client" | "server"  who created it (the CLC first contact)
 *       "peer":        "1.2.3.4"            the peer host (its IP as seen at first contact)
 *       "peer_system_id": "..."             the peer's SMC system id (hex)
 *       "vlan":        0                    VLAN id (0 = none)
 *       "pnet_id":     ""                   the PNET id of the group's devices
 *       "local_device": "mlx5_0", "local_port": 1
 *       "peer_gid":    "fe80:...:0001"      the peer's RoCE GID of the first link
 *       "type":        "single" | "symmetric" | "asymmetric-local" | "asymmetric-peer"
 *       "links": [ {
 *           "id": 1, "state": "active" | "activating" | "inactive" | "deleting",
 *           "local_device": "mlx5_0", "local_port": 1, "netdev": "eth0",
 *           "local_gid": "...", "peer_gid": "...", "local_qp": 123, "peer_qp": 456,
 *           "connections": 3
 *       } ],
 *       "connections": 3                    SMC-R connections on the group
 *     }
 *   Added keys: "version" (CLC version of the first contact, 1 or 2), "max_conns",
 *   "max_links" (negotiated), and per link "max_inline" (bytes of inline data its QP
 *   got: seed 002). A group has one link, or two ("symmetric": on two local devices;
 *   "asymmetric-local": both on one local device, to two of the peer's); "vlan" is 0 and
 *   "pnet_id" "" (no VLAN or PNET id support yet). "peer" is the IPv4 address of the
 *   peer's RoCE v2 GID.
 */

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "bus-util.h"
#include "ibdev.h"
#include "smcr.h"

#define LINKGROUPS_PATH SMCD_BUS_PATH "/linkgroups"
#define LINKGROUPS_INTERFACE "org.smcd.smcd1.LinkGroups"

static json_object *lgr_to_json(const SmcrLgrInfo *i) {
        json_object *o = json_object_new_object(), *links = json_object_new_array();
        char id[9], peer[16], sysid[17], pg[IBDEV_GID_STRLEN];

        if (!o || !links) {
                json_object_put(o);
                json_object_put(links);
                return NULL;
        }
        snprintf(id, sizeof(id), "%08x", i->id);
        snprintf(peer, sizeof(peer), "%u.%u.%u.%u", i->peer_gid[12], i->peer_gid[13], i->peer_gid[14], i->peer_gid[15]);
        for (int k = 0; k < 8; k++)
                snprintf(sysid + 2 * k, 3, "%02x", i->peer_id[k]);
        for (unsigned k = 0; k < i->n_links; k++) {
                json_object *l = json_object_new_object();
                char lg[IBDEV_GID_STRLEN], lpg[IBDEV_GID_STRLEN];

                if (!l || json_add_str(l, "state", i->links[k].state) < 0 || json_add_u64(l, "id", i->links[k].link_num) < 0 ||
                    json_add_str(l, "local_device", i->links[k].device) < 0 ||
                    json_add_u64(l, "local_port", i->links[k].port) < 0 ||
                    json_add_str(l, "netdev", i->links[k].netdev) < 0 ||
                    json_add_str(l, "local_gid", ibdev_gid_to_string(i->links[k].local_gid, lg)) < 0 ||
                    json_add_str(l, "peer_gid", ibdev_gid_to_string(i->links[k].peer_gid, lpg)) < 0 ||
                    json_add_u64(l, "local_qp", i->links[k].local_qp) < 0 ||
                    json_add_u64(l, "peer_qp", i->links[k].peer_qp) < 0 ||
                    json_add_u64(l, "connections", i->links[k].conns) < 0 ||
                    json_add_u64(l, "max_inline", i->links[k].max_inline) < 0 || json_object_array_add(links, l) < 0) {
                        json_object_put(l);
                        json_object_put(links);
                        json_object_put(o);
                        return NULL;
                }
        }
        if (json_add_str(o, "id", id) < 0 || json_add_str(o, "role", i->server ? "server" : "client") < 0 ||
            json_add_str(o, "peer", peer) < 0 || json_add_str(o, "peer_system_id", sysid) < 0 ||
            json_add_u64(o, "vlan", 0) < 0 || json_add_str(o, "pnet_id", "") < 0 ||
            json_add_str(o, "local_device", i->device) < 0 || json_add_u64(o, "local_port", i->port) < 0 ||
            json_add_str(o, "peer_gid", ibdev_gid_to_string(i->peer_gid, pg)) < 0 ||
            json_add_str(o, "type", i->type) < 0 || json_add_u64(o, "version", i->version) < 0 ||
            json_add_u64(o, "max_conns", i->max_conns) < 0 || json_add_u64(o, "max_links", i->max_links) < 0 ||
            json_object_object_add(o, "links", links) < 0 || json_add_u64(o, "connections", i->conns) < 0) {
                json_object_put(o);
                return NULL;
        }
        return o;
}

static int method_list(sd_bus_message *msg, void *userdata, sd_bus_error *error) {
        Manager *m = userdata;
        size_t n = smcr_get_lgrs(m->smcr, NULL, 0), got;
        SmcrLgrInfo *v = n ? calloc(n, sizeof(*v)) : NULL;
        json_object *a = json_object_new_array();

        if (!a || (n && !v)) {
                free(v);
                json_object_put(a);
                return -ENOMEM;
        }
        got = smcr_get_lgrs(m->smcr, v, n);
        for (size_t i = 0; i < got && i < n; i++) {
                json_object *o = lgr_to_json(&v[i]);

                if (!o || json_object_array_add(a, o) < 0) {
                        json_object_put(o);
                        json_object_put(a);
                        free(v);
                        return -ENOMEM;
                }
        }
        free(v);
        return bus_reply_json(msg, a);
}

static int property_get_count(sd_bus *bus, const char *path, const char *interface, const char *property,
                              sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        Manager *m = userdata;

        return sd_bus_message_append(reply, "u", (uint32_t) smcr_get_lgrs(m->smcr, NULL, 0));
}

static const sd_bus_vtable linkgroups_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_PROPERTY("Count", "u", property_get_count, 0, 0),
        SD_BUS_METHOD_WITH_ARGS("List", SD_BUS_NO_ARGS, SD_BUS_RESULT("s", json), method_list,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_VTABLE_END
};

int linkgroups_bus_add(Manager *m, sd_bus *bus) {
        return sd_bus_add_object_vtable(bus, NULL, LINKGROUPS_PATH, LINKGROUPS_INTERFACE, linkgroups_vtable, m);
}
