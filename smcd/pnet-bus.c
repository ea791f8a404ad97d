/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * /org/smcd/smcd1/pnet, interface org.smcd.smcd1.Pnet (netdev <-> RoCE device
 * grouping, policy.h; SMC-R picks its RoCE device by it):
 *   property Count u          entries in the table
 *   method   List () -> s     the entries as a JSON array sorted by netdev (keys:
 *                             netdev, ibdev, port, pnetid; pnet_to_json()). Everybody.
 *   method   Add (s netdev, s ibdev, u port, s pnetid)
 *                             validate, save pnet.json atomically, then apply ("" =
 *                             no pnetid). Root or the admin group, else
 *                             org.smcd.smcd1.Error.AccessDenied; a bad field, a netdev
 *                             that has an entry, an ibdev port of another pnetid give
 *                             InvalidArgument with the reason; a failed save the errno's
 *                             error. On any error nothing changed.
 *   method   Del (s netdev)   remove the netdev's entry (saved first); NotFound if it
 *                             has none. Root or the admin group.
 * Count changes are signalled (PropertiesChanged).
 */

#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "bus-util.h"
#include "log.h"
#include "policy.h"

#define PNET_PATH SMCD_BUS_PATH "/pnet"
#define PNET_INTERFACE "org.smcd.smcd1.Pnet"

static int method_list(sd_bus_message *msg, void *userdata, sd_bus_error *error) {
        Manager *m = userdata;

        return bus_reply_json(msg, pnet_to_json(&m->pnet));
}

static int method_add(sd_bus_message *msg, void *userdata, sd_bus_error *error) {
        Manager *m = userdata;
        const char *netdev, *ibdev, *pnetid;
        char err[300];
        uint32_t port;
        int r;

        r = sd_bus_message_read(msg, "ssus", &netdev, &ibdev, &port, &pnetid);
        if (r < 0)
                return r;
        r = bus_check_change(m, msg, m->pnet.load_error, m->pnet.path, error);
        if (r < 0)
                return r;
        r = pnet_add(&m->pnet, netdev, ibdev, port, pnetid, err, sizeof(err));
        if (r == -EINVAL)
                return sd_bus_error_setf(error, SMCD_BUS_ERROR_INVALID_ARGUMENT, "%s", err);
        if (r < 0) {
                log_error_errno(r, "Cannot save the pnet table to %s: %m", m->pnet.path);
                return bus_error_state_file(error, r, "Cannot save the pnet table to %s", m->pnet.path);
        }
        for (size_t i = 0; i < m->pnet.n; i++)
                if (strcmp(m->pnet.v[i].netdev, netdev) == 0)
                        log_info("Pnet entry added over D-Bus: %s -> %s port %u%s%s.", netdev, ibdev,
                                 (unsigned) m->pnet.v[i].port, m->pnet.v[i].pnetid[0] ? ", pnetid " : "",
                                 m->pnet.v[i].pnetid);
        (void) sd_bus_emit_properties_changed(sd_bus_message_get_bus(msg), PNET_PATH, PNET_INTERFACE, "Count", NULL);
        return sd_bus_reply_method_return(msg, NULL);
}

static int method_del(sd_bus_message *msg, void *userdata, sd_bus_error *error) {
        Manager *m = userdata;
        const char *netdev;
        int r;

        r = sd_bus_message_read(msg, "s", &netdev);
        if (r < 0)
                return r;
        r = bus_check_change(m, msg, m->pnet.load_error, m->pnet.path, error);
        if (r < 0)
                return r;
        r = pnet_del(&m->pnet, netdev);
        if (r == -ENOENT)
                return sd_bus_error_setf(error, SMCD_BUS_ERROR_NOT_FOUND, "No pnet entry for netdev \"%s\".", netdev);
        if (r < 0) {
                log_error_errno(r, "Cannot save the pnet table to %s: %m", m->pnet.path);
                return bus_error_state_file(error, r, "Cannot save the pnet table to %s", m->pnet.path);
        }
        log_info("Pnet entry of %s deleted over D-Bus.", netdev);
        (void) sd_bus_emit_properties_changed(sd_bus_message_get_bus(msg), PNET_PATH, PNET_INTERFACE, "Count", NULL);
        return sd_bus_reply_method_return(msg, NULL);
}

static int property_get_count(sd_bus *bus, const char *path, const char *interface, const char *property,
                              sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        Manager *m = userdata;

        return sd_bus_message_append(reply, "u", (uint32_t) m->pnet.n);
}

/* SD_BUS_VTABLE_UNPRIVILEGED: Add and Del check the caller themselves (bus_check_admin). */
static const sd_bus_vtable pnet_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_PROPERTY("Count", "u", property_get_count, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_METHOD_WITH_ARGS("List", SD_BUS_NO_ARGS, SD_BUS_RESULT("s", json), method_list,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("Add", SD_BUS_ARGS("s", netdev, "s", ibdev, "u", port, "s", pnetid),
                                SD_BUS_NO_RESULT, method_add, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("Del", SD_BUS_ARGS("s", netdev), SD_BUS_NO_RESULT, method_del,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_VTABLE_END
};

int pnet_bus_add(Manager *m, sd_bus *bus) {
        return sd_bus_add_object_vtable(bus, NULL, PNET_PATH, PNET_INTERFACE, pnet_vtable, m);
}
