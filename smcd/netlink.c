/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The netlink monitor: links and addresses through libnl-route-3. See netlink.h. */

#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <inttypes.h>
#include <linux/if_addr.h>
#include <netinet/in.h>
#include <netlink/addr.h>
#include <netlink/cache.h>
#include <netlink/errno.h>
#include <netlink/netlink.h>
#include <netlink/route/addr.h>
#include <netlink/route/link.h>
#include <netlink/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "addr.h"
#include "log.h"
#include "netlink.h"

#define NETLINK_RCVBUF (1 << 20)         /* asked for; the kernel caps it at rmem_max */
#define NETLINK_READS_PER_WAKEUP 64      /* data_ready calls per wakeup (each drains) */
#define NETLINK_RETRY_USEC 1000000u      /* failed resync / persistent read errors */
#define NETLINK_PRIORITY (SD_EVENT_PRIORITY_NORMAL - 10) /* before the control socket */

struct NetlinkHook {
        NetlinkMonitor *nl;
        netlink_link_hook_t cb;
        void *userdata;
        LIST_FIELDS(NetlinkHook, hooks);
};

struct NetlinkMonitor {
        sd_event *event;
        sd_event_source *io;
        sd_event_source *retry;    /* resync again / re-enable io after errors */
        struct nl_sock *sock;      /* the cache manager's (ours: we set its buffer size) */
        struct nl_sock *sync_sock; /* blocking, for resync dumps */
        struct nl_cache_mngr *mngr;
        struct nl_cache *links, *addrs; /* owned by mngr */

        /* the view, rebuilt from the caches after each batch of changes */
        NetlinkLink *view;         /* sorted by ifindex */
        size_t n_view;
        NetlinkAddr *view_addrs;   /* sorted by ifindex, family, address; sliced per link */
        size_t n_view_addrs;
        uint8_t (*local)[16];      /* sorted, unique; IPv4 as ::ffff:a.b.c.d */
        size_t n_local;
        bool built;                /* the view exists (the first build reports nothing) */
        bool dirty;                /* the caches changed since the last build */

        LIST_HEAD(NetlinkHook, hooks);
        NetlinkHook *hook_next;    /* the hook after the one running (removal-safe walk) */
        NetlinkCounters counters;
};

static int nlerr_to_errno(int e) {
        switch (abs(e)) {
        case 0:
                return 0;
        case NLE_NOMEM:
                return -ENOMEM;
        case NLE_NOACCESS:
                return -EACCES;
        case NLE_PERM:
                return -EPERM;
        case NLE_AGAIN:
                return -EAGAIN;
        case NLE_INTR:
                return -EINTR;
        case NLE_BAD_SOCK:
                return -EBADF;
        case NLE_PROTO_MISMATCH:
        case NLE_AF_NOSUPPORT:
                return -EPROTONOSUPPORT;
        case NLE_OPNOTSUPP:
                return -EOPNOTSUPP;
        case NLE_INVAL:
        case NLE_RANGE:
                return -EINVAL;
        case NLE_NODEV:
                return -ENODEV;
        case NLE_FAILURE:
                /* libnl's word for a system error it has no code of its own for
                 * (nl_syserr2nlerr()): socket()'s EMFILE at a low RLIMIT_NOFILE
                 * (helper 121: logged as "Input/output error"); errno still says it */
                if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS)
                        return -errno;
                return -EIO;
        default:
                return -EIO;
        }
}

static void change_cb(struct nl_cache *cache, struct nl_object *obj, int action, void *data) {
        NetlinkMonitor *nl = data;

        if (cache == nl->links)
                nl->counters.link_events++;
        else
                nl->counters.addr_events++;
        nl->dirty = true;
}

/* Every message before it is parsed: only the kernel's count. Another process with
 * CAP_NET_ADMIN can unicast to our socket; what it sends is dropped. */
static int msg_in_cb(struct nl_msg *msg, void *data) {
        NetlinkMonitor *nl = data;
        struct sockaddr_nl *src = nlmsg_get_src(msg);

        if (src && src->nl_pid == 0)
                return NL_OK;
        nl->counters.bad_messages++;
        log_debug("Dropped a netlink message from port %u (not the kernel).", src ? src->nl_pid : 0);
        return NL_SKIP;
}

/* ---- the view ---- */

static int cmp_addr(const void *x, const void *y) {
        const NetlinkAddr *a = x, *b = y;
        int c;

        if (a->ifindex != b->ifindex)
                return a->ifindex < b->ifindex ? -1 : 1;
        if (a->family != b->family)
                return a->family == AF_INET ? -1 : 1;
        c = memcmp(a->addr, b->addr, 16);
        if (c)
                return c;
        return (int) a->prefixlen - (int) b->prefixlen;
}

#define ELEMENTS(a) (sizeof(a) / sizeof((a)[0]))

static int cmp_link(const void *x, const void *y) {
        const NetlinkLink *a = x, *b = y;

        return a->ifindex < b->ifindex ? -1 : a->ifindex > b->ifindex;
}

static int cmp16(const void *x, const void *y) {
        return memcmp(x, y, 16);
}

static void to16(int family, const void *bin, uint8_t ret[16]) {
        static const uint8_t v4mapped[12] = { [10] = 0xff, [11] = 0xff };

        if (family == AF_INET) {
                memcpy(ret, v4mapped, 12);
                memcpy(ret + 12, bin, 4);
        } else
                memcpy(ret, bin, 16);
}

/* Snapshot the caches into new arrays; the old ones are untouched on error. */
static int build(NetlinkMonitor *nl, NetlinkLink **ret_links, size_t *ret_n_links, NetlinkAddr **ret_addrs,
                 size_t *ret_n_addrs, uint8_t (**ret_local)[16], size_t *ret_n_local) {
        size_t n_links = (size_t) nl_cache_nitems(nl->links), n_addrs = (size_t) nl_cache_nitems(nl->addrs);
        NetlinkLink *links = calloc(n_links ? n_links : 1, sizeof(*links));
        NetlinkAddr *addrs = calloc(n_addrs ? n_addrs : 1, sizeof(*addrs));
        uint8_t (*local)[16] = calloc(n_addrs ? n_addrs : 1, 16);
        struct nl_object *o, *stale[64];
        size_t nl_ = 0, na = 0, nloc = 0, j = 0, n_stale = 0;

        if (!links || !addrs || !local) {
                free(links);
                free(addrs);
                free(local);
                return -ENOMEM;
        }
        /* Pass 0 takes the generic (AF_UNSPEC) link objects. AF_BRIDGE ones describe
         * an interface again and are skipped then, except that libnl files a bridge
         * master under AF_BRIDGE only: pass 1 takes the interfaces pass 0 did not see. */
        for (int pass = 0; pass < 2; pass++) {
                size_t n_generic = nl_; /* pass 1: links[0..n_generic) sorted by ifindex */

                if (pass == 1)
                        qsort(links, nl_, sizeof(*links), cmp_link);
                for (o = nl_cache_get_first(nl->links); o && nl_ < n_links; o = nl_cache_get_next(o)) {
                        struct rtnl_link *rl = (struct rtnl_link *) o;
                        NetlinkLink *l = &links[nl_], key = { .ifindex = rtnl_link_get_ifindex(rl) };
                        struct nl_addr *mac;
                        const char *name;
                        bool seen = false;

                        if (key.ifindex <= 0 || (pass == 0) != (rtnl_link_get_family(rl) == AF_UNSPEC))
                                continue;
                        if (pass == 1) {
                                char kname[IF_NAMESIZE];

                                seen = bsearch(&key, links, n_generic, sizeof(*links), cmp_link) != NULL;
                                for (size_t k = n_generic; k < nl_ && !seen; k++) /* the few added here */
                                        seen = links[k].ifindex == key.ifindex;
                                /* libnl does not always drop such objects when the link
                                 * goes (the RTM_DELLINK is filed under AF_UNSPEC): ask the
                                 * kernel whether the interface still exists */
                                name = rtnl_link_get_name(rl);
                                if (!seen && (!if_indextoname((unsigned) key.ifindex, kname) || !name ||
                                              strcmp(kname, name) != 0)) {
                                        /* stale: dropped from the cache below, so that
                                         * link churn does not grow it */
                                        if (n_stale < ELEMENTS(stale))
                                                stale[n_stale++] = o;
                                        continue;
                                }
                        }
                        if (seen)
                                continue;
                        l->ifindex = rtnl_link_get_ifindex(rl);
                        name = rtnl_link_get_name(rl);
                        snprintf(l->name, sizeof(l->name), "%s", name ? name : "");
                        l->flags = rtnl_link_get_flags(rl);
                        l->operstate = rtnl_link_get_operstate(rl);
                        l->carrier = rtnl_link_get_carrier(rl) != 0;
                        l->up = (l->flags & IFF_UP) && (l->flags & IFF_RUNNING);
                        l->mtu = rtnl_link_get_mtu(rl);
                        mac = rtnl_link_get_addr(rl);
                        if (mac && nl_addr_get_len(mac) <= sizeof(l->mac)) {
                                l->mac_len = nl_addr_get_len(mac);
                                memcpy(l->mac, nl_addr_get_binary_addr(mac), l->mac_len);
                        }
                        nl_++;
                }
        }
        for (size_t k = 0; k < n_stale; k++) /* the cache's reference goes with it */
                nl_cache_remove(stale[k]);
        for (o = nl_cache_get_first(nl->addrs); o && na < n_addrs; o = nl_cache_get_next(o)) {
                struct rtnl_addr *ra = (struct rtnl_addr *) o;
                struct nl_addr *local_addr = rtnl_addr_get_local(ra);
                NetlinkAddr *a = &addrs[na];
                int family;

                if (!local_addr)
                        continue;
                family = nl_addr_get_family(local_addr);
                if (!((family == AF_INET && nl_addr_get_len(local_addr) == 4) ||
                      (family == AF_INET6 && nl_addr_get_len(local_addr) == 16)))
                        continue;
                a->family = family;
                to16(family, nl_addr_get_binary_addr(local_addr), a->addr);
                a->prefixlen = (uint8_t) rtnl_addr_get_prefixlen(ra);
                a->flags = rtnl_addr_get_flags(ra);
                a->ifindex = rtnl_addr_get_ifindex(ra);
                /* not (yet) usable: DAD running (unless optimistic) or failed */
                if (!(a->flags & IFA_F_DADFAILED) &&
                    !((a->flags & IFA_F_TENTATIVE) && !(a->flags & IFA_F_OPTIMISTIC)))
                        memcpy(local[nloc++], a->addr, 16);
                na++;
        }
        qsort(links, nl_, sizeof(*links), cmp_link);
        qsort(addrs, na, sizeof(*addrs), cmp_addr);
        qsort(local, nloc, 16, cmp16);
        if (nloc > 1) {
                size_t u = 1;

                for (size_t i = 1; i < nloc; i++)
                        if (memcmp(local[i], local[u - 1], 16) != 0)
                                memcpy(local[u++], local[i], 16);
                nloc = u;
        }
        /* slice the addresses per link (both sorted by ifindex) */
        for (size_t i = 0; i < nl_; i++) {
                while (j < na && addrs[j].ifindex < links[i].ifindex)
                        j++;
                links[i].addrs = &addrs[j];
                while (j < na && addrs[j].ifindex == links[i].ifindex) {
                        links[i].n_addrs++;
                        j++;
                }
        }
        *ret_links = links;
        *ret_n_links = nl_;
        *ret_addrs = addrs;
        *ret_n_addrs = na;
        *ret_local = local;
        *ret_n_local = nloc;
        return 0;
}

static void run_hooks(NetlinkMonitor *nl, const NetlinkLink *l, NetlinkLinkChange change) {
        NetlinkHook *h;

        for (h = nl->hooks; h; h = nl->hook_next) {
                nl->hook_next = h->hooks_next;
                h->cb(nl, l, change, h->userdata);
        }
        nl->hook_next = NULL;
}

static void report(NetlinkMonitor *nl, const NetlinkLink *l, NetlinkLinkChange change) {
        switch (change) {
        case NETLINK_LINK_NEW:
                log_info("Link %s (ifindex %d) appeared, %s (operstate %s, mtu %u).", l->name, l->ifindex,
                         l->up ? "up" : "down", netlink_operstate_to_string(l->operstate), l->mtu);
                if (l->up)
                        nl->counters.link_up++;
                break;
        case NETLINK_LINK_UP:
                log_info("Link %s (ifindex %d) is up (operstate %s).", l->name, l->ifindex,
                         netlink_operstate_to_string(l->operstate));
                nl->counters.link_up++;
                break;
        case NETLINK_LINK_DOWN:
                log_info("Link %s (ifindex %d) is down (%s, operstate %s, carrier %s).", l->name, l->ifindex,
                         l->flags & IFF_UP ? "admin up" : "admin down", netlink_operstate_to_string(l->operstate),
                         l->carrier ? "on" : "off");
                nl->counters.link_down++;
                break;
        case NETLINK_LINK_GONE:
                log_info("Link %s (ifindex %d) was removed%s.", l->name, l->ifindex, l->up ? " while up" : "");
                if (l->up)
                        nl->counters.link_down++;
                break;
        }
        run_hooks(nl, l, change);
}

/* Rebuild the view from the caches and report link changes against the old one. */
static int rebuild(NetlinkMonitor *nl) {
        NetlinkLink *old = nl->view, *links;
        NetlinkAddr *old_addrs = nl->view_addrs, *addrs;
        uint8_t (*local)[16];
        size_t n_old = nl->n_view, n_links, n_addrs, n_local, i = 0, j = 0;
        bool first = !nl->built;
        int r;

        r = build(nl, &links, &n_links, &addrs, &n_addrs, &local, &n_local);
        if (r < 0)
                return r; /* stays dirty; the retry timer tries again */
        free(nl->local);
        nl->view = links;
        nl->n_view = n_links;
        nl->view_addrs = addrs;
        nl->n_view_addrs = n_addrs;
        nl->local = local;
        nl->n_local = n_local;
        nl->built = true;
        nl->dirty = false;

        /* merge walk, both sorted by ifindex; the old arrays live until the end */
        while (!first && (i < n_old || j < n_links)) {
                if (j >= n_links || (i < n_old && old[i].ifindex < links[j].ifindex)) {
                        NetlinkLink gone = old[i++];

                        gone.addrs = NULL;
                        gone.n_addrs = 0;
                        report(nl, &gone, NETLINK_LINK_GONE);
                } else if (i >= n_old || links[j].ifindex < old[i].ifindex)
                        report(nl, &links[j++], NETLINK_LINK_NEW);
                else {
                        if (old[i].up != links[j].up)
                                report(nl, &links[j], links[j].up ? NETLINK_LINK_UP : NETLINK_LINK_DOWN);
                        else if (strcmp(old[i].name, links[j].name) != 0)
                                log_info("Link %s (ifindex %d) is now called %s.", old[i].name, links[j].ifindex,
                                         links[j].name);
                        i++;
                        j++;
                }
                /* a hook may not free the monitor, so links / old stay valid */
        }
        free(old);
        free(old_addrs);
        return 0;
}

/* ---- reading, resync, retry ---- */

static int arm_retry(NetlinkMonitor *nl);

static uint64_t now_usec(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000u + (uint64_t) ts.tv_nsec / 1000u;
}

int netlink_resync(NetlinkMonitor *nl) {
        uint64_t t0 = now_usec();
        int r;

        nl->counters.resyncs++;
        r = nl_cache_resync(nl->sync_sock, nl->links, change_cb, nl);
        if (r >= 0)
                r = nl_cache_resync(nl->sync_sock, nl->addrs, change_cb, nl);
        if (r < 0) {
                r = nlerr_to_errno(r);
                log_warning_errno(r, "Netlink resync failed (%s); retrying in a second.", nl_geterror(r));
                (void) arm_retry(nl);
                /* what was re-read so far is in the caches: show it */
                if (nl->dirty)
                        (void) rebuild(nl);
                return r;
        }
        r = rebuild(nl);
        if (r < 0) {
                (void) arm_retry(nl);
                return log_warning_errno(r, "Cannot rebuild the link view: %m; retrying in a second.");
        }
        log_debug("Netlink resync done: %zu links, %zu addresses in %" PRIu64 " us.", nl->n_view, nl->n_view_addrs,
                  now_usec() - t0);
        return 0;
}

static int on_retry(sd_event_source *s, uint64_t usec, void *userdata) {
        NetlinkMonitor *nl = userdata;

        nl->retry = sd_event_source_unref(nl->retry);
        (void) sd_event_source_set_enabled(nl->io, SD_EVENT_ON);
        (void) netlink_resync(nl);
        return 0;
}

static int arm_retry(NetlinkMonitor *nl) {
        if (nl->retry)
                return 0;
        return sd_event_add_time_relative(nl->event, &nl->retry, CLOCK_MONOTONIC, NETLINK_RETRY_USEC, 0,
                                          on_retry, nl);
}

static int on_io(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        NetlinkMonitor *nl = userdata;
        bool resync = false, progress = false, failed = false;

        for (int i = 0; i < NETLINK_READS_PER_WAKEUP; i++) {
                int r = nl_cache_mngr_data_ready(nl->mngr);

                if (r > 0)
                        progress = true;
                if (r >= 0 || r == -NLE_AGAIN)
                        break; /* drained */
                if (r == -NLE_NOMEM) {
                        /* ENOBUFS: notifications were dropped. Read what is still
                         * queued (it is older than a dump would be), then dump. */
                        nl->counters.overruns++;
                        log_info("Netlink receive buffer overrun: notifications lost; resyncing.");
                        resync = true;
                        continue;
                }
                /* an unparsable message (or a read error): the rest of its datagram
                 * is lost, so resync as well */
                nl->counters.bad_messages++;
                log_debug("Bad netlink message or read error: %s; resyncing.", nl_geterror(r));
                resync = true;
                failed = true;
        }
        if (failed && !progress) {
                /* nothing but errors: do not spin on a socket that keeps failing */
                (void) sd_event_source_set_enabled(nl->io, SD_EVENT_OFF);
                if (arm_retry(nl) < 0)
                        (void) sd_event_source_set_enabled(nl->io, SD_EVENT_ON);
                return 0;
        }
        if (resync)
                (void) netlink_resync(nl);
        else if (nl->dirty && rebuild(nl) < 0) {
                log_warning("Cannot rebuild the link view: out of memory; retrying in a second.");
                (void) arm_retry(nl);
        }
        return 0;
}

/* ---- public ---- */

int netlink_new(sd_event *event, NetlinkMonitor **ret) {
        NetlinkMonitor *nl;
        int r;

        nl = calloc(1, sizeof(*nl));
        if (!nl)
                return -ENOMEM;
        nl->event = sd_event_ref(event);
        nl->sock = nl_socket_alloc();
        nl->sync_sock = nl_socket_alloc();
        if (!nl->sock || !nl->sync_sock) {
                netlink_free(nl);
                return -ENOMEM;
        }
        r = nl_connect(nl->sync_sock, NETLINK_ROUTE);
        if (r >= 0)
                r = nl_cache_mngr_alloc(nl->sock, NETLINK_ROUTE, 0, &nl->mngr);
        if (r >= 0)
                /* fewer overruns under bursts (the kernel caps it at net.core.rmem_max) */
                (void) nl_socket_set_buffer_size(nl->sock, NETLINK_RCVBUF, 0);
        if (r >= 0)
                r = nl_socket_modify_cb(nl->sock, NL_CB_MSG_IN, NL_CB_CUSTOM, msg_in_cb, nl);
        if (r >= 0)
                r = nl_cache_mngr_add(nl->mngr, "route/link", change_cb, nl, &nl->links);
        if (r >= 0)
                r = nl_cache_mngr_add(nl->mngr, "route/addr", change_cb, nl, &nl->addrs);
        if (r < 0) {
                r = nlerr_to_errno(r);
                netlink_free(nl);
                return r;
        }
        r = rebuild(nl);
        if (r >= 0)
                r = sd_event_add_io(event, &nl->io, nl_cache_mngr_get_fd(nl->mngr), EPOLLIN, on_io, nl);
        if (r >= 0)
                r = sd_event_source_set_priority(nl->io, NETLINK_PRIORITY);
        if (r >= 0)
                (void) sd_event_source_set_description(nl->io, "netlink");
        if (r < 0) {
                netlink_free(nl);
                return r;
        }
        /* what was counted during the initial dumps is not an event */
        nl->counters = (NetlinkCounters) {};
        *ret = nl;
        return 0;
}

NetlinkMonitor *netlink_free(NetlinkMonitor *nl) {
        NetlinkHook *h, *hn;

        if (!nl)
                return NULL;
        LIST_FOREACH_SAFE(hooks, h, hn, nl->hooks)
                free(h);
        sd_event_source_disable_unref(nl->io);
        sd_event_source_disable_unref(nl->retry);
        if (nl->mngr)
                nl_cache_mngr_free(nl->mngr); /* and its caches; closes nl->sock */
        nl_socket_free(nl->sock);
        nl_socket_free(nl->sync_sock);
        sd_event_unref(nl->event);
        free(nl->view);
        free(nl->view_addrs);
        free(nl->local);
        free(nl);
        return NULL;
}

bool netlink_addr_is_local(const NetlinkMonitor *nl, const struct smc_ctl_addr *a) {
        uint8_t key[16], v4[4];

        if (smcd_addr_is_loopback(a) || smcd_addr_is_any(a))
                return true;
        if (smcd_addr_get_v4(a, v4))
                to16(AF_INET, v4, key);
        else if (a->family == AF_INET6)
                memcpy(key, a->addr, 16);
        else
                return false;
        return nl->n_local > 0 && bsearch(key, nl->local, nl->n_local, 16, cmp16) != NULL;
}

size_t netlink_get_links(const NetlinkMonitor *nl, const NetlinkLink **ret) {
        *ret = nl->view;
        return nl->n_view;
}

const NetlinkLink *netlink_get_link(const NetlinkMonitor *nl, int ifindex) {
        NetlinkLink key = { .ifindex = ifindex };

        if (nl->n_view == 0)
                return NULL;
        return bsearch(&key, nl->view, nl->n_view, sizeof(key), cmp_link);
}

void netlink_get_counters(const NetlinkMonitor *nl, NetlinkCounters *ret) {
        *ret = nl->counters;
}

const char *netlink_addr_to_string(const NetlinkAddr *a, char *buf) {
        char s[INET6_ADDRSTRLEN];

        if (a->family == AF_INET)
                inet_ntop(AF_INET, a->addr + 12, s, sizeof(s));
        else
                inet_ntop(AF_INET6, a->addr, s, sizeof(s));
        snprintf(buf, NETLINK_ADDR_STRLEN, "%s/%u", s, a->prefixlen);
        return buf;
}

const char *netlink_mac_to_string(const NetlinkLink *l, char *buf) {
        buf[0] = '\0';
        for (size_t i = 0; i < l->mac_len; i++)
                sprintf(buf + (i ? 3 * i - 1 : 0), "%s%02x", i ? ":" : "", l->mac[i]);
        return buf;
}

const char *netlink_operstate_to_string(uint8_t operstate) {
        /* IF_OPER_UNKNOWN (0) .. IF_OPER_UP (6) of <linux/if.h>, which clashes with
         * <net/if.h> */
        static const char *const names[] = {
                "UNKNOWN", "NOTPRESENT", "DOWN", "LOWERLAYERDOWN", "TESTING", "DORMANT", "UP",
        };

        return operstate < sizeof(names) / sizeof(names[0]) && names[operstate] ? names[operstate] : "UNKNOWN";
}

int netlink_add_link_hook(NetlinkMonitor *nl, netlink_link_hook_t cb, void *userdata, NetlinkHook **ret) {
        NetlinkHook *h = calloc(1, sizeof(*h));

        if (!h)
                return -ENOMEM;
        h->nl = nl;
        h->cb = cb;
        h->userdata = userdata;
        LIST_PREPEND(hooks, nl->hooks, h);
        *ret = h;
        return 0;
}

NetlinkHook *netlink_hook_free(NetlinkHook *h) {
        if (!h)
                return NULL;
        if (h->nl->hook_next == h)
                h->nl->hook_next = h->hooks_next;
        LIST_REMOVE(hooks, h->nl->hooks, h);
        free(h);
        return NULL;
}
