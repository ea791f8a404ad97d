/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Shared by smcd's D-Bus objects. See bus-util.h. */

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "bus-util.h"

int bus_reply_json(sd_bus_message *msg, json_object *root) {
        int r;

        if (!root)
                return -ENOMEM;
        r = sd_bus_reply_method_return(msg, "s",
                                       json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN |
                                                                      JSON_C_TO_STRING_NOSLASHESCAPE));
        json_object_put(root);
        return r;
}

int json_add_u64(json_object *o, const char *key, uint64_t v) {
        json_object *n = json_object_new_uint64(v);

        if (!n || json_object_object_add(o, key, n) < 0) {
                json_object_put(n);
                return -ENOMEM;
        }
        return 0;
}

int json_add_str(json_object *o, const char *key, const char *v) {
        json_object *n = json_object_new_string(v);

        if (!n || json_object_object_add(o, key, n) < 0) {
                json_object_put(n);
                return -ENOMEM;
        }
        return 0;
}

/* Whether @creds carry @gid as effective or supplementary group. */
static bool creds_in_group(sd_bus_creds *creds, gid_t gid) {
        const gid_t *gids;
        gid_t g;
        int n;

        if (sd_bus_creds_get_egid(creds, &g) >= 0 && g == gid)
                return true;
        if (sd_bus_creds_get_gid(creds, &g) >= 0 && g == gid)
                return true;
        n = sd_bus_creds_get_supplementary_gids(creds, &gids);
        for (int i = 0; i < n; i++)
                if (gids[i] == gid)
                        return true;
        return false;
}

int bus_error_state_file(sd_bus_error *error, int r, const char *fmt, ...) {
        char *msg = NULL;
        va_list ap;
        int k;

        va_start(ap, fmt);
        k = vasprintf(&msg, fmt, ap);
        va_end(ap);
        k = sd_bus_error_setf(error, SMCD_BUS_ERROR_STATE_FILE, "%s: %s", k >= 0 ? msg : fmt,
                              strerror(r < 0 ? -r : r));
        free(msg);
        return k;
}

int bus_check_state_writable(int load_error, const char *path, sd_bus_error *error) {
        if (load_error >= 0)
                return 0;
        return sd_bus_error_setf(error, SMCD_BUS_ERROR_STATE_FILE,
                                 "The state file %s could not be read when smcd started (%s): it is "
                                 "left as it is and nothing was changed; fix it and restart smcd.",
                                 path, load_error == -EINVAL ? "not a regular file" : strerror(-load_error));
}

int bus_check_admin(Manager *m, sd_bus_message *msg, sd_bus_error *error) {
        sd_bus_creds *creds = NULL;
        bool ok = false;
        uid_t uid;
        int r;

        /* dbus-daemon vouches for the uid and pid only; the groups are read from
         * /proc/<pid> (SD_BUS_CREDS_AUGMENT), as systemd's own services do. The uid
         * check does not depend on that. */
        r = sd_bus_query_sender_creds(msg, SD_BUS_CREDS_EUID | SD_BUS_CREDS_UID | SD_BUS_CREDS_EGID |
                                      SD_BUS_CREDS_GID | SD_BUS_CREDS_SUPPLEMENTARY_GIDS | SD_BUS_CREDS_PID |
                                      SD_BUS_CREDS_AUGMENT, &creds);
        if (r < 0)
                return r;
        r = sd_bus_creds_get_euid(creds, &uid);
        if (r == -ENODATA) /* the bus driver vouches only for the uid */
                r = sd_bus_creds_get_uid(creds, &uid);
        if (r >= 0) {
                ok = uid == 0;
                if (!ok && m->config.admin_gid != (gid_t) -1)
                        ok = creds_in_group(creds, m->config.admin_gid);
        }
        sd_bus_creds_unref(creds);
        if (r < 0)
                return r;
        if (!ok)
                return sd_bus_error_setf(error, SMCD_BUS_ERROR_ACCESS_DENIED,
                                         "Only root or the admin group may do this (caller uid %u).",
                                         (unsigned) uid);
        return 0;
}

int bus_check_change(Manager *m, sd_bus_message *msg, int load_error, const char *path, sd_bus_error *error) {
        int r;

        r = bus_check_admin(m, msg, error);
        if (r < 0)
                return r;
        return bus_check_state_writable(load_error, path, error);
}
