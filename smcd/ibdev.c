/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* RoCE device discovery through libibverbs. See ibdev.h. */

#include <endian.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if SMCD_HAVE_IBVERBS
#include <infiniband/verbs.h>
#endif

#include "fileio.h"
#include "ibdev.h"
#include "log.h"

#define IBDEV_MAX_AGE_USEC 1000000u

struct IbDevices {
        sd_event *event;
        NetlinkMonitor *nl;
        NetlinkHook *hook;
        sd_event_source *rescan;   /* coalesces the rescans of one batch of link changes */
        IbPort *ports;
        size_t n_ports;
        uint64_t scanned_usec;     /* CLOCK_MONOTONIC of the last scan, 0 = never */
        char why[256];             /* why there are no ports; "" if there are */
        bool logged;
};

static void ports_free(IbPort *p, size_t n) {
        for (size_t i = 0; i < n; i++)
                free(p[i].gids);
        free(p);
}

const char *ibdev_gid_to_string(const uint8_t gid[16], char *buf) {
        for (int i = 0; i < 8; i++)
                sprintf(buf + (i ? 5 * i - 1 : 0), "%s%02x%02x", i ? ":" : "", gid[2 * i], gid[2 * i + 1]);
        return buf;
}

static int cmp_port(const void *x, const void *y) {
        const IbPort *a = x, *b = y;
        int c = strcmp(a->device, b->device);

        return c ? c : (int) a->port - (int) b->port;
}

static int cmp_gid(const void *x, const void *y) {
        const IbGid *a = x, *b = y;

        return a->index < b->index ? -1 : a->index > b->index;
}

#if SMCD_HAVE_IBVERBS
static const char *port_state_name(enum ibv_port_state s) {
        switch (s) {
        case IBV_PORT_NOP:
                return "NOP";
        case IBV_PORT_DOWN:
                return "DOWN";
        case IBV_PORT_INIT:
                return "INIT";
        case IBV_PORT_ARMED:
                return "ARMED";
        case IBV_PORT_ACTIVE:
                return "ACTIVE";
        case IBV_PORT_ACTIVE_DEFER:
                return "ACTIVE_DEFER";
        default:
                return "UNKNOWN";
        }
}

static const char *link_layer_name(uint8_t l) {
        return l == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : l == IBV_LINK_LAYER_INFINIBAND ? "InfiniBand" : "unspecified";
}

static const char *gid_type_name(unsigned t) {
        return t == IBV_GID_TYPE_ROCE_V2 ? "RoCE v2" : t == IBV_GID_TYPE_ROCE_V1 ? "RoCE v1" : "IB";
}

static bool gid_is_zero(const uint8_t g[16]) {
        static const uint8_t zero[16];

        return memcmp(g, zero, 16) == 0;
}

/* The GID entries of @port without ibv_query_gid_table() (old kernels): ibv_query_gid()
 * and the type and netdev from sysfs (ports/<p>/gid_attrs/{types,ndevs}/<index>). */
static int query_gids_sysfs(struct ibv_context *ctx, const char *dev, uint8_t port, int tbl_len, IbPort *p) {
        IbGid *gids = calloc(tbl_len > 0 ? (size_t) tbl_len : 1, sizeof(*gids));
        size_t n = 0;

        if (!gids)
                return -ENOMEM;
        for (int i = 0; i < tbl_len; i++) {
                union ibv_gid g;
                char path[256], *s = NULL;

                if (ibv_query_gid(ctx, port, i, &g) != 0 || gid_is_zero(g.raw))
                        continue;
                gids[n].index = (uint32_t) i;
                memcpy(gids[n].gid, g.raw, 16);
                gids[n].type = "IB";
                snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/%u/gid_attrs/types/%d", dev, port, i);
                if (read_regular_file(path, 64, &s, NULL) >= 0) {
                        gids[n].type = strstr(s, "v2") ? "RoCE v2" : strstr(s, "RoCE") ? "RoCE v1" : "IB";
                        free(s);
                        s = NULL;
                }
                snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/%u/gid_attrs/ndevs/%d", dev, port, i);
                if (read_regular_file(path, 64, &s, NULL) >= 0) {
                        s[strcspn(s, "\n")] = '\0';
                        snprintf(gids[n].netdev, sizeof(gids[n].netdev), "%s", s);
                        free(s);
                }
                n++;
        }
        p->gids = gids;
        p->n_gids = n;
        return 0;
}

/* Append the ports of @dev to *ports. Returns 0, or -errno (the device is skipped). */
static int scan_device(struct ibv_device *dev, IbPort **ports, size_t *n_ports) {
        const char *name = ibv_get_device_name(dev);
        struct ibv_context *ctx = ibv_open_device(dev);
        struct ibv_device_attr attr;
        struct ibv_gid_entry *entries = NULL;
        size_t total = 0, first = *n_ports;
        ssize_t ne = -1;
        IbPort *v;
        int r = 0;

        if (!ctx)
                return -(errno ? errno : ENODEV);
        if (ibv_query_device(ctx, &attr) != 0) {
                r = -(errno ? errno : EIO);
                goto out;
        }
        v = realloc(*ports, (*n_ports + attr.phys_port_cnt + 1) * sizeof(*v));
        if (!v) {
                r = -ENOMEM;
                goto out;
        }
        *ports = v;
        for (uint8_t p = 1; p <= attr.phys_port_cnt; p++) {
                struct ibv_port_attr pa;
                IbPort *ip = &v[*n_ports];

                if (ibv_query_port(ctx, p, &pa) != 0)
                        continue;
                *ip = (IbPort) {
                        .port = p,
                        .state = port_state_name(pa.state),
                        .link_layer = link_layer_name(pa.link_layer),
                        .active_mtu = pa.active_mtu >= IBV_MTU_256 && pa.active_mtu <= IBV_MTU_4096
                                              ? 128u << pa.active_mtu : 0,
                        .node_guid = be64toh(attr.node_guid),
                };
                snprintf(ip->device, sizeof(ip->device), "%s", name ? name : "?");
                if (pa.gid_tbl_len > 0)
                        total += (size_t) pa.gid_tbl_len;
                /* keep the table length until the GIDs are read */
                ip->n_gids = pa.gid_tbl_len > 0 ? (size_t) pa.gid_tbl_len : 0;
                (*n_ports)++;
        }
        if (total > 0 && (entries = calloc(total, sizeof(*entries))))
                ne = ibv_query_gid_table(ctx, entries, total, 0);
        for (size_t i = first; i < *n_ports; i++) {
                IbPort *ip = &v[i];
                size_t tbl = ip->n_gids, n = 0;

                ip->n_gids = 0;
                if (ne < 0) {
                        /* no ibv_query_gid_table (ENOMEM, or an old kernel) */
                        r = query_gids_sysfs(ctx, ip->device, ip->port, (int) tbl, ip);
                        if (r < 0)
                                goto out;
                } else {
                        ip->gids = calloc(tbl ? tbl : 1, sizeof(*ip->gids));
                        if (!ip->gids) {
                                r = -ENOMEM;
                                goto out;
                        }
                        for (ssize_t k = 0; k < ne && n < tbl; k++) {
                                const struct ibv_gid_entry *e = &entries[k];

                                if (e->port_num != ip->port || gid_is_zero(e->gid.raw))
                                        continue;
                                ip->gids[n].index = e->gid_index;
                                memcpy(ip->gids[n].gid, e->gid.raw, 16);
                                ip->gids[n].type = gid_type_name(e->gid_type);
                                if (e->ndev_ifindex == 0 || !if_indextoname(e->ndev_ifindex, ip->gids[n].netdev))
                                        ip->gids[n].netdev[0] = '\0';
                                n++;
                        }
                        ip->n_gids = n;
                }
                if (ip->n_gids > 1)
                        qsort(ip->gids, ip->n_gids, sizeof(*ip->gids), cmp_gid);
                for (size_t k = 0; k < ip->n_gids && !ip->netdev[0]; k++)
                        memcpy(ip->netdev, ip->gids[k].netdev, sizeof(ip->netdev));
        }
out:
        if (r < 0) {
                /* drop this device's ports (their GID arrays, if any) */
                for (size_t i = first; i < *n_ports; i++)
                        free((*ports)[i].gids);
                *n_ports = first;
        }
        free(entries);
        ibv_close_device(ctx);
        return r;
}
#endif

/* Take a new snapshot into @d (the old one stays on ENOMEM). */
static void scan(IbDevices *d) {
        IbPort *ports = NULL;
        size_t n = 0;
        char why[sizeof(d->why)] = "";

        (void) sd_event_now(d->event, CLOCK_MONOTONIC, &d->scanned_usec);
        if (d->scanned_usec == 0)
                d->scanned_usec = 1;
#if SMCD_HAVE_IBVERBS
        struct ibv_device **list;
        int n_dev = 0;

        errno = 0;
        list = ibv_get_device_list(&n_dev);
        if (!list) {
                if (errno == ENOSYS)
                        snprintf(why, sizeof(why), "the kernel has no RDMA support: no /sys/class/infiniband_verbs");
                else
                        snprintf(why, sizeof(why), "ibv_get_device_list() failed: %s", strerror(errno ? errno : EIO));
        } else {
                for (int i = 0; i < n_dev; i++) {
                        int r = scan_device(list[i], &ports, &n);

                        if (r == -ENOMEM) {
                                ibv_free_device_list(list);
                                ports_free(ports, n);
                                log_warning("RDMA device scan: out of memory; keeping the previous snapshot.");
                                return;
                        }
                        if (r < 0)
                                log_debug_errno(r, "RDMA device %s skipped: %m", ibv_get_device_name(list[i]));
                }
                ibv_free_device_list(list);
                if (n == 0)
                        snprintf(why, sizeof(why), n_dev ? "no usable RDMA device port: %d device(s) could not be "
                                                          "queried" : "no RDMA device found", n_dev);
        }
        if (n > 1)
                qsort(ports, n, sizeof(*ports), cmp_port);
#else
        snprintf(why, sizeof(why), "smcd was built without libibverbs");
#endif
        if (!d->logged || strcmp(why, d->why) != 0 || n != d->n_ports) {
                if (n == 0)
                        log_info("RoCE devices: none (%s).", why);
                else
                        log_info("RoCE devices: %zu port(s), the first %s port %u (%s, netdev %s).", n,
                                 ports[0].device, ports[0].port, ports[0].state,
                                 ports[0].netdev[0] ? ports[0].netdev : "none");
                d->logged = true;
        }
        ports_free(d->ports, d->n_ports);
        d->ports = ports;
        d->n_ports = n;
        memcpy(d->why, why, sizeof(why));
}

static int on_rescan(sd_event_source *s, void *userdata) {
        IbDevices *d = userdata;

        d->rescan = sd_event_source_unref(d->rescan);
        scan(d);
        return 0;
}

static void on_link_change(NetlinkMonitor *nl, const NetlinkLink *l, NetlinkLinkChange change, void *userdata) {
        IbDevices *d = userdata;

        /* one rescan after the whole batch of link changes */
        if (!d->rescan && sd_event_add_defer(d->event, &d->rescan, on_rescan, d) < 0)
                scan(d);
}

int ibdevs_new(sd_event *event, NetlinkMonitor *nl, IbDevices **ret) {
        IbDevices *d = calloc(1, sizeof(*d));
        int r;

        if (!d)
                return -ENOMEM;
        d->event = sd_event_ref(event);
        d->nl = nl;
        if (nl) {
                r = netlink_add_link_hook(nl, on_link_change, d, &d->hook);
                if (r < 0) {
                        ibdevs_free(d);
                        return r;
                }
        }
        scan(d);
        *ret = d;
        return 0;
}

IbDevices *ibdevs_free(IbDevices *d) {
        if (!d)
                return NULL;
        netlink_hook_free(d->hook);
        sd_event_source_disable_unref(d->rescan);
        ports_free(d->ports, d->n_ports);
        sd_event_unref(d->event);
        free(d);
        return NULL;
}

size_t ibdevs_get_ports(IbDevices *d, const IbPort **ret) {
        uint64_t now = 0;

        (void) sd_event_now(d->event, CLOCK_MONOTONIC, &now);
        if (d->scanned_usec == 0 || now >= d->scanned_usec + IBDEV_MAX_AGE_USEC)
                scan(d);
        *ret = d->ports;
        return d->n_ports;
}

const char *ibdevs_why_empty(const IbDevices *d) {
        return d->n_ports > 0 ? NULL : d->why;
}
