/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * smcd's D-Bus API on the system bus (sd-bus, attached to the manager's sd-event loop).
 * The names and the other objects are in bus-util.h; this is the Manager object and
 * the bus connection.
 *
 *   object           /org/smcd/smcd1
 *   interface        org.smcd.smcd1.Manager
 *     property Version  s    smcd's version (constant)
 *     method   ListTunables () -> s   the tunables (tunables.h) as a JSON object,
 *                                 key -> value string (normalized). Everybody.
 *     method   GetTunable (s key) -> s   one value; an unknown key gives
 *                                 org.smcd.smcd1.Error.InvalidArgument. Everybody.
 *     method   SetTunable (s key, s value)   validate, save the state file
 *                                 atomically, then apply (see tunables.h for which act
 *                                 live and which on new connections). Root or the admin
 *                                 group, else AccessDenied; a bad key or value gives
 *                                 InvalidArgument with the reason and changes nothing; a
 *                                 failed save gives the errno's error and changes nothing.
 *
 * The bus is optional: smcd works without it (no bus reachable, the name taken, or
 * --no-bus), it only loses this API. units/org.smcd.smcd1.conf is the bus policy.
 */

#include "manager.h"

#define SMCD_BUS_MANAGER_INTERFACE "org.smcd.smcd1.Manager"

/* Connect to the system bus (sd_bus_open_system(), so $DBUS_SYSTEM_BUS_ADDRESS is
 * honoured), export the Manager object and the others of bus-util.h, request SMCD_BUS_NAME and attach the bus to
 * m->event; sets m->bus. Returns 0 on success, or -errno (logged once at notice level:
 * the caller goes on without D-Bus and m->bus stays NULL). */
int manager_bus_connect(Manager *m);

/* Drop the bus connection (flush, close, unref). m->bus may be NULL. */
void manager_bus_disconnect(Manager *m);
