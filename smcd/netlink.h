/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * The netlink monitor: this host's links and addresses, kept live through libnl-route-3
 * in smcd's sd-event loop (no thread, no polling).
 *
 * How: one libnl cache manager (NETLINK_ROUTE; caches "route/link" and "route/addr",
 * subscribed to RTNLGRP_LINK, RTNLGRP_IPV4_IFADDR and RTNLGRP_IPV6_IFADDR) whose socket
 * is an sd-event I/O source. Each wakeup reads every queued RTM_NEWLINK / DELLINK /
 * NEWADDR / DELADDR into the caches; then the monitor rebuilds its own view from them:
 * the links (sorted by ifindex, each with its addresses) and the sorted set of local
 * addresses that netlink_addr_is_local() searches. The source runs at a higher
 * priority than the control socket, so a CONNECT that arrives together with an
 * address change is decided on the new set.
 *
 * Overrun: when the kernel drops notifications (the socket's receive buffer is full:
 * recvmsg fails with ENOBUFS, which libnl reports as -NLE_NOMEM), the monitor reads
 * what is still queued and then re-dumps both caches (nl_cache_resync() on a second,
 * blocking socket), so the view is the kernel's again. A message libnl cannot parse is
 * counted, logged at debug level and answered by the same resync; it never stops the
 * monitor. A failed resync is retried after a second. Messages that do not come from
 * the kernel (another process with CAP_NET_ADMIN can unicast to the socket) are counted
 * as bad and dropped unparsed.
 *
 * Link "up" means IFF_UP and IFF_RUNNING (administratively up and operationally up
 * or unknown, i.e. carrier). Transitions are logged at info level.
 *
 * Everything here runs in the event loop's thread; nothing is thread-safe.
 */

#include <net/if.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "ctl-proto.h"
#include "list.h"

typedef struct NetlinkMonitor NetlinkMonitor;
typedef struct NetlinkHook NetlinkHook;

/* One address of a link. IPv4 addresses are stored as IPv4-mapped IPv6 (::ffff:a.b.c.d)
 * in @addr, with @family AF_INET. */
typedef struct NetlinkAddr {
        int family;          /* AF_INET or AF_INET6 */
        uint8_t addr[16];    /* IFA_LOCAL (IPv4: ::ffff:a.b.c.d) */
        uint8_t prefixlen;
        uint32_t flags;      /* IFA_F_* */
        int ifindex;
} NetlinkAddr;

typedef struct NetlinkLink {
        int ifindex;
        char name[IF_NAMESIZE];
        unsigned flags;      /* IFF_* */
        uint8_t operstate;   /* IF_OPER_* (RFC 2863) */
        bool carrier;
        bool up;             /* IFF_UP && IFF_RUNNING */
        uint32_t mtu;        /* bytes */
        uint8_t mac[32];     /* link-layer address, @mac_len bytes (0 for none) */
        size_t mac_len;
        const NetlinkAddr *addrs; /* its addresses, @n_addrs, owned by the monitor */
        size_t n_addrs;
} NetlinkLink;

/* Counters since start. */
typedef struct NetlinkCounters {
        uint64_t addr_events; /* address objects added, changed or removed (also by a resync) */
        uint64_t link_events; /* link objects added, changed or removed (also by a resync) */
        uint64_t link_up;     /* transitions to up (and links that appear up) */
        uint64_t link_down;   /* transitions to down (and links removed while up) */
        uint64_t overruns;    /* ENOBUFS: the kernel dropped notifications */
        uint64_t bad_messages; /* read or parse errors other than ENOBUFS, and messages
                                * not from the kernel (dropped) */
        uint64_t resyncs;     /* full re-dumps after an overrun or a bad message */
} NetlinkCounters;

/* Open the monitor in @event: subscribe, dump links and addresses, watch the socket.
 * Returns 0 and *ret (free with netlink_free()), -ENOMEM, or the negative errno of the
 * failing netlink step (e.g. -EPROTONOSUPPORT without netlink, -EACCES). */
int netlink_new(sd_event *event, NetlinkMonitor **ret);
/* Close the socket, remove the event source, free the hooks' records. NULL is ok.
 * Returns NULL. */
NetlinkMonitor *netlink_free(NetlinkMonitor *nl);

/* Is @a an address of this host: loopback (127/8, ::1, ::ffff:127/104), any (0.0.0.0,
 * ::) or an address configured on one of its interfaces (of any state: the kernel
 * delivers to a local address on a link that is down, too) other than a tentative or
 * duplicate IPv6 one. IPv4-mapped IPv6 matches its IPv4 address; the scope id is
 * ignored. O(log n) in the addresses. */
bool netlink_addr_is_local(const NetlinkMonitor *nl, const struct smc_ctl_addr *a);

/* The links, sorted by ifindex, with their addresses: *ret points at @nl's own array
 * of @*ret_n entries, valid until the event loop next runs the monitor (so do not keep
 * it across a return to the loop). Returns the number of links. */
size_t netlink_get_links(const NetlinkMonitor *nl, const NetlinkLink **ret);
/* The link with @ifindex or NULL (same lifetime as above). */
const NetlinkLink *netlink_get_link(const NetlinkMonitor *nl, int ifindex);
void netlink_get_counters(const NetlinkMonitor *nl, NetlinkCounters *ret);

/* "127.0.0.1/8" / "::1/128" into @buf (NETLINK_ADDR_STRLEN bytes); returns @buf. */
#define NETLINK_ADDR_STRLEN 64
const char *netlink_addr_to_string(const NetlinkAddr *a, char *buf);
/* "aa:bb:cc:dd:ee:ff" into @buf (NETLINK_MAC_STRLEN bytes); "" without an address.
 * Returns @buf. */
#define NETLINK_MAC_STRLEN 96
const char *netlink_mac_to_string(const NetlinkLink *l, char *buf);
/* "UP", "DOWN", "LOWERLAYERDOWN", "UNKNOWN", ... (RFC 2863 names). */
const char *netlink_operstate_to_string(uint8_t operstate);

/*
 * Link hooks: called after the monitor's view was updated (so netlink_get_link() and
 * netlink_addr_is_local() already answer with the new state), once per link whose
 * state changed, in ifindex order:
 *   NETLINK_LINK_NEW   a link appeared (l->up says whether it is up)
 *   NETLINK_LINK_UP    a known link went up
 *   NETLINK_LINK_DOWN  a known link went down
 *   NETLINK_LINK_GONE  a link was removed (@l is its last state; l->up is false)
 * A resync reports the difference between the old and the new view the same way, so
 * a hook sees every transition that survived an overrun (not the ones that were undone
 * before it, e.g. a down and up again while notifications were lost).
 * Intended users: RoCE device rescans (devices) and, once SMC-R exists, link-group
 * failover (move the links of a RoCE port whose netdev went down). A hook must not
 * free the monitor; it may remove itself (netlink_hook_free()) but no other hook.
 */
typedef enum NetlinkLinkChange {
        NETLINK_LINK_NEW,
        NETLINK_LINK_UP,
        NETLINK_LINK_DOWN,
        NETLINK_LINK_GONE,
} NetlinkLinkChange;

typedef void (*netlink_link_hook_t)(NetlinkMonitor *nl, const NetlinkLink *l, NetlinkLinkChange change,
                                    void *userdata);

/* Add @cb(@userdata) to the hook list. Returns 0 and *ret (remove it with
 * netlink_hook_free(); netlink_free() frees hooks still registered) or -ENOMEM. */
int netlink_add_link_hook(NetlinkMonitor *nl, netlink_link_hook_t cb, void *userdata, NetlinkHook **ret);
/* Remove and free a hook. NULL is ok. Returns NULL. */
NetlinkHook *netlink_hook_free(NetlinkHook *h);

/* Re-dump links and addresses now (what an overrun or a bad message triggers) and
 * report the differences (hooks, log). Blocks for the dump (milliseconds: 88 ms for
 * 3000 addresses). Returns 0 or a negative errno; on error what was re-read so far is
 * shown and a retry is scheduled in a second. */
int netlink_resync(NetlinkMonitor *nl);
