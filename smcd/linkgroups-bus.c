/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * /org/smcd/smcd1/linkgroups, interface org.smcd.smcd1.LinkGroups (everybody may read it):
 *   property Count u        SMC-R link groups (0 until SMC-R exists)
 *   method   List () -> s   the link groups as a JSON array; empty ("[]") until SMC-R
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
 *   Until SMC-R lands nothing creates a link group; the schema above is what SMC-R's
 *   LinkGroups rows must fill (extend it by adding keys, never by renaming).
 */

#include <errno.h>

#include "bus-util.h"

#define LINKGROUPS_PATH SMCD_BUS_PATH "/linkgroups"
#define LINKGROUPS_INTERFACE "org.smcd.smcd1.LinkGroups"

static int method_list(sd_bus_message *msg, void *userdata, sd_bus_error *error) {
        /* no SMC-R yet: no link groups */
        return bus_reply_json(msg, json_object_new_array());
}

static int property_get_count(sd_bus *bus, const char *path, const char *interface, const char *property,
                              sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        return sd_bus_message_append(reply, "u", (uint32_t) 0);
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
