/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * What every D-Bus object of smcd shares (one *-bus.c per object, STYLE.md): the
 * names, JSON replies, and the admin check for state-changing methods.
 *
 *   well-known name  org.smcd.smcd1
 *   /org/smcd/smcd1              org.smcd.smcd1.Manager     manager-bus.c
 *   /org/smcd/smcd1/stats        org.smcd.smcd1.Stats       stats-bus.c
 *   /org/smcd/smcd1/connections  org.smcd.smcd1.Connections connections-bus.c
 *   /org/smcd/smcd1/devices      org.smcd.smcd1.Devices     devices-bus.c
 *   /org/smcd/smcd1/linkgroups   org.smcd.smcd1.LinkGroups  linkgroups-bus.c
 *   /org/smcd/smcd1/pnet         org.smcd.smcd1.Pnet        pnet-bus.c
 *   /org/smcd/smcd1/policy       org.smcd.smcd1.Policy      policy-bus.c
 *
 * Errors: org.smcd.smcd1.Error.AccessDenied (a state-changing method called by
 * somebody who is neither root nor in the admin group), .InvalidArgument (a bad key,
 * value or rule: nothing was changed), .NotFound (del of something that is not there),
 * .StateFile (a state file that could not be saved, or read at start: nothing
 * changed), or the errno-mapped standard errors.
 */

#include <json-c/json.h>
#include <stdint.h>
#include <systemd/sd-bus.h>

#include "manager.h"

#define SMCD_BUS_NAME "org.smcd.smcd1"
#define SMCD_BUS_PATH "/org/smcd/smcd1"
#define SMCD_BUS_ERROR_ACCESS_DENIED "org.smcd.smcd1.Error.AccessDenied"
#define SMCD_BUS_ERROR_INVALID_ARGUMENT "org.smcd.smcd1.Error.InvalidArgument"
#define SMCD_BUS_ERROR_NOT_FOUND "org.smcd.smcd1.Error.NotFound"
#define SMCD_BUS_ERROR_STATE_FILE "org.smcd.smcd1.Error.StateFile"

/* Set SMCD_BUS_ERROR_STATE_FILE in @error: a state file could not be read or saved
 * (-@r, a negative errno), with the printf-style message @fmt followed by ": " and
 * strerror. Not the errno's standard name: an EACCES of smcd's own file system is no
 * access refused to the caller (smcctl prints its "root and admin group only" hint
 * for that). Returns what sd_bus_error_set() does (negative). */
int bus_error_state_file(sd_bus_error *error, int r, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Reply to @msg with @root as one compact JSON string ("s"); takes ownership of @root
 * (NULL means it could not be built: -ENOMEM). Returns what
 * sd_bus_reply_method_return() returns (>= 0 or -errno). */
int bus_reply_json(sd_bus_message *msg, json_object *root);

/* Add a key to a JSON object; 0 or -ENOMEM (@o is unchanged then). */
int json_add_u64(json_object *o, const char *key, uint64_t v);
int json_add_str(json_object *o, const char *key, const char *v);

/* 0 if the sender of @msg may change smcd's state: effective uid 0, or
 * m->config.admin_gid (when set, i.e. not (gid_t) -1) among its effective or
 * supplementary groups. Otherwise sets SMCD_BUS_ERROR_ACCESS_DENIED in @error and
 * returns its negative errno (-EACCES); -errno if the credentials cannot be read. */
int bus_check_admin(Manager *m, sd_bus_message *msg, sd_bus_error *error);

/* 0 if the state file @path may be changed; else (@load_error, the -errno with which
 * it could not be read when smcd started) an error in @error that says so and returns
 * @load_error: such a file is left alone rather than overwritten with a table that
 * lacks what it holds. */
int bus_check_state_writable(int load_error, const char *path, sd_bus_error *error);

/* Both checks of a state-changing method: bus_check_admin(), then
 * bus_check_state_writable() of the state file it would change. */
int bus_check_change(Manager *m, sd_bus_message *msg, int load_error, const char *path, sd_bus_error *error);

/* Each object file exports its object on @bus with @m as userdata: 0 or -errno. */
int stats_bus_add(Manager *m, sd_bus *bus);
int connections_bus_add(Manager *m, sd_bus *bus);
int policy_bus_add(Manager *m, sd_bus *bus);
int pnet_bus_add(Manager *m, sd_bus *bus);
int devices_bus_add(Manager *m, sd_bus *bus);
int linkgroups_bus_add(Manager *m, sd_bus *bus);
