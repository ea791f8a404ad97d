/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * smcd's D-Bus API on the system bus (sd-bus, attached to the manager's sd-event loop).
 *
 *   well-known name  org.smcd.smcd1
 *   object           /org/smcd/smcd1
 *   interface        org.smcd.smcd1.Manager
 *     property Version  s    smcd's version (constant)
 *     method   GetStats () -> s   the counters as JSON, the stats.json layout of stats.h
 *     method   ListConnections () -> s   the open SMC-D endpoints as a JSON array, one
 *                                 object per endpoint: id (hex string), role (client|
 *                                 server), state, local, peer ("ip:port" / "[ip6]:port"),
 *                                 mode ("SMCD"), sndbuf, rmb (ring bytes), bytes_tx,
 *                                 bytes_rx (published so far), pid, uid (of its owner).
 *                                 Everybody may call it (as ss(8) shows every socket).
 *                                 TCP fallbacks are not smcd's and are not listed.
 *     method   ResetStats ()      zero smcd's counters (gauges and pool stay); root only,
 *                                 else org.smcd.smcd1.Error.AccessDenied
 *     method   ListTunables () -> s   the tunables (tunables.h) as a JSON object,
 *                                 key -> value string (normalized). Everybody.
 *     method   GetTunable (s key) -> s   one value; an unknown key gives
 *                                 org.smcd.smcd1.Error.InvalidArgument. Everybody.
 *     method   SetTunable (s key, s value)   validate, save the state file
 *                                 atomically, then apply (see tunables.h for which act
 *                                 live and which on new connections). Root only, else
 *                                 AccessDenied; a bad key or value gives InvalidArgument
 *                                 with the reason and changes nothing; a failed save
 *                                 gives the errno's error and changes nothing.
 *     (GetStats's "pool" object also carries "buf_clear": the live clearing mode.)
 *
 * The bus is optional: smcd works without it (no bus reachable, the name taken, or
 * --no-bus), it only loses this API. units/org.smcd.smcd1.conf is the bus policy.
 */

#include "manager.h"

#define SMCD_BUS_NAME "org.smcd.smcd1"
#define SMCD_BUS_PATH "/org/smcd/smcd1"
#define SMCD_BUS_MANAGER_INTERFACE "org.smcd.smcd1.Manager"
#define SMCD_BUS_ERROR_ACCESS_DENIED "org.smcd.smcd1.Error.AccessDenied"
#define SMCD_BUS_ERROR_INVALID_ARGUMENT "org.smcd.smcd1.Error.InvalidArgument"

/* Connect to the system bus (sd_bus_open_system(), so $DBUS_SYSTEM_BUS_ADDRESS is
 * honoured), export the Manager object, request SMCD_BUS_NAME and attach the bus to
 * m->event; sets m->bus. Returns 0 on success, or -errno (logged once at notice level:
 * the caller goes on without D-Bus and m->bus stays NULL). */
int manager_bus_connect(Manager *m);

/* Drop the bus connection (flush, close, unref). m->bus may be NULL. */
void manager_bus_disconnect(Manager *m);
