/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * /org/smcd/smcd1/policy, interface org.smcd.smcd1.Policy (the rules: policy.h):
 *   property Count u          rules in the table
 *   method   List () -> s     the rules as a JSON array in evaluation order (keys: id,
 *                             scope, local_port, peer_port, prefix, action, hits, rule;
 *                             policy_to_json()). Everybody.
 *   method   Add (s rule) -> u id
 *                             parse the rule (policy.h's grammar, "position N" to
 *                             insert), save policy.json atomically, then apply: new
 *                             connects and listens see it. Root or the admin group,
 *                             else org.smcd.smcd1.Error.AccessDenied; a bad rule (or
 *                             position, a duplicate, a full table) gives
 *                             InvalidArgument naming the bad word; a failed save the
 *                             errno's error. On any error nothing changed.
 *   method   Del (u id)       remove a rule (saved first); NotFound if there is no
 *                             such id. Root or the admin group.
 * Count changes are signalled (PropertiesChanged).
 */

#include <errno.h>
#include <inttypes.h>

#include "bus-util.h"
#include "log.h"
#include "policy.h"

#define POLICY_PATH SMCD_BUS_PATH "/policy"
#define POLICY_INTERFACE "org.smcd.smcd1.Policy"

static int method_list(sd_bus_message *msg, void *userdata, sd_bus_error *error) {
        Manager *m = userdata;

        return bus_reply_json(msg, policy_to_json(&m->policy));
}

static int method_add(sd_bus_message *msg, void *userdata, sd_bus_error *error) {
        Manager *m = userdata;
        char err[300], text[POLICY_RULE_MAX];
        const char *rule;
        uint32_t id;
        int r;

        r = sd_bus_message_read(msg, "s", &rule);
        if (r < 0)
                return r;
        r = bus_check_change(m, msg, m->policy.load_error, m->policy.path, error);
        if (r < 0)
                return r;
        r = policy_add(&m->policy, rule, &id, err, sizeof(err));
        if (r == -EINVAL)
                return sd_bus_error_setf(error, SMCD_BUS_ERROR_INVALID_ARGUMENT, "%s", err);
        if (r < 0) {
                log_error_errno(r, "Cannot save the policy to %s: %m", m->policy.path);
                return bus_error_state_file(error, r, "Cannot save the policy to %s", m->policy.path);
        }
        for (size_t i = 0; i < m->policy.n; i++)
                if (m->policy.rules[i].id == id) {
                        log_info("Policy rule %" PRIu32 " added as rule %zu of %zu over D-Bus: %s", id, i + 1,
                                 m->policy.n, policy_rule_format(&m->policy.rules[i], text, sizeof(text)));
                        break;
                }
        (void) sd_bus_emit_properties_changed(sd_bus_message_get_bus(msg), POLICY_PATH, POLICY_INTERFACE,
                                              "Count", NULL);
        return sd_bus_reply_method_return(msg, "u", id);
}

static int method_del(sd_bus_message *msg, void *userdata, sd_bus_error *error) {
        Manager *m = userdata;
        uint32_t id;
        int r;

        r = sd_bus_message_read(msg, "u", &id);
        if (r < 0)
                return r;
        r = bus_check_change(m, msg, m->policy.load_error, m->policy.path, error);
        if (r < 0)
                return r;
        r = policy_del(&m->policy, id);
        if (r == -ENOENT)
                return sd_bus_error_setf(error, SMCD_BUS_ERROR_NOT_FOUND, "No policy rule with id %" PRIu32 ".", id);
        if (r < 0) {
                log_error_errno(r, "Cannot save the policy to %s: %m", m->policy.path);
                return bus_error_state_file(error, r, "Cannot save the policy to %s", m->policy.path);
        }
        log_info("Policy rule %" PRIu32 " deleted over D-Bus.", id);
        (void) sd_bus_emit_properties_changed(sd_bus_message_get_bus(msg), POLICY_PATH, POLICY_INTERFACE,
                                              "Count", NULL);
        return sd_bus_reply_method_return(msg, NULL);
}

static int property_get_count(sd_bus *bus, const char *path, const char *interface, const char *property,
                              sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        Manager *m = userdata;

        return sd_bus_message_append(reply, "u", (uint32_t) m->policy.n);
}

/* SD_BUS_VTABLE_UNPRIVILEGED: Add and Del check the caller themselves (bus_check_admin)
 * so that it gets our named error rather than sd-bus's generic one. */
static const sd_bus_vtable policy_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_PROPERTY("Count", "u", property_get_count, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_METHOD_WITH_ARGS("List", SD_BUS_NO_ARGS, SD_BUS_RESULT("s", json), method_list,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("Add", SD_BUS_ARGS("s", rule), SD_BUS_RESULT("u", id), method_add,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("Del", SD_BUS_ARGS("u", id), SD_BUS_NO_RESULT, method_del,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_VTABLE_END
};

int policy_bus_add(Manager *m, sd_bus *bus) {
        return sd_bus_add_object_vtable(bus, NULL, POLICY_PATH, POLICY_INTERFACE, policy_vtable, m);
}
