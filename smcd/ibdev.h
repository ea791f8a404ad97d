/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * RoCE device discovery through libibverbs: one IbPort per (RDMA device, port) with its
 * port state and its GID table (type and netdev of each entry). A snapshot, taken at
 * start, again (coalesced, in the event loop) after every link change the netlink
 * monitor reports, and on a read when the snapshot is more than a second old (creating
 * an RDMA device, e.g. `rdma link add rxe0 type rxe netdev eth0`, sends no route
 * netlink event).
 *
 * Built without libibverbs (meson: dependency 'libibverbs' not found), or on a kernel
 * without RDMA, the snapshot is empty and ibdevs_why_empty() says why (logged once at
 * start and whenever the reason changes).
 *
 * Single-threaded: the event loop's thread.
 */

#include <net/if.h>
#include <stddef.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "netlink.h"

#define IBDEV_NAME_MAX 64 /* IBV_SYSFS_NAME_MAX */

typedef struct IbGid {
        uint32_t index;            /* in the port's GID table */
        uint8_t gid[16];
        const char *type;          /* "IB", "RoCE v1" or "RoCE v2" (static) */
        char netdev[IF_NAMESIZE];  /* "" if none */
} IbGid;

typedef struct IbPort {
        char device[IBDEV_NAME_MAX]; /* "mlx5_0", "rxe0" */
        uint8_t port;                /* 1-based */
        const char *state;           /* "ACTIVE", "DOWN", "INIT", "ARMED", "ACTIVE_DEFER",
                                      * "NOP" (static) */
        const char *link_layer;      /* "Ethernet", "InfiniBand", "unspecified" (static) */
        uint32_t active_mtu;         /* bytes (256..4096), 0 if unknown */
        uint64_t node_guid;          /* host byte order */
        char netdev[IF_NAMESIZE];    /* of its first GID entry with one; "" if none */
        IbGid *gids;                 /* the valid entries, @n_gids, sorted by index */
        size_t n_gids;
} IbPort;

typedef struct IbDevices IbDevices;

/* Scan now and rescan on @nl's link changes (@nl may be NULL: then only on reads).
 * Returns 0 and *ret (free with ibdevs_free()) or -ENOMEM. A failed scan is not an
 * error: the snapshot is empty and ibdevs_why_empty() tells why. */
int ibdevs_new(sd_event *event, NetlinkMonitor *nl, IbDevices **ret);
/* Unhook from the monitor (which must still exist) and free. NULL is ok. Returns NULL. */
IbDevices *ibdevs_free(IbDevices *d);

/* The ports, sorted by device name and port; rescans first if the snapshot is older
 * than a second. *ret points into @d, valid until the next call or return to the event
 * loop. Returns their number. */
size_t ibdevs_get_ports(IbDevices *d, const IbPort **ret);
/* Why there are no ports ("smcd was built without libibverbs", "no RDMA device found",
 * "the kernel has no RDMA support: ..."), or NULL if there are some. Owned by @d. */
const char *ibdevs_why_empty(const IbDevices *d);
/* "fe80:0000:...": a GID as 8 groups of 4 hex digits, as ibv_devinfo and sysfs show it,
 * into @buf (IBDEV_GID_STRLEN bytes); returns @buf. */
#define IBDEV_GID_STRLEN 40
const char *ibdev_gid_to_string(const uint8_t gid[16], char *buf);
