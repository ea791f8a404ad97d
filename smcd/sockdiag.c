/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* TCP and unix sockets through sock_diag: see sockdiag.h. */

#include <arpa/inet.h>
#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <linux/tcp.h>
#include <linux/sockios.h>
#include <linux/unix_diag.h>
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "sockdiag.h"

/* The kernel sizes a dump's messages by what we read with (at most 32 KiB of data):
 * a larger buffer never sees a truncated one. */
#define SOCKDIAG_BUF (64 * 1024)

struct SockDiag {
        int fd;
        uint32_t seq;
        uint8_t *buf; /* SOCKDIAG_BUF bytes, aligned for struct nlmsghdr */
};

static int probe_cb(const SockDiagInfo *i, void *userdata) {
        return 0;
}

/* A bound NETLINK_SOCK_DIAG socket with bounded waits. */
static int diag_new(SockDiag **ret) {
        struct timeval tv = { .tv_sec = SOCKDIAG_TIMEOUT_MS / 1000, .tv_usec = (SOCKDIAG_TIMEOUT_MS % 1000) * 1000 };
        struct sockaddr_nl sa = { .nl_family = AF_NETLINK };
        SockDiag *d = calloc(1, sizeof(*d));
        int r;

        if (!d)
                return -ENOMEM;
        d->buf = malloc(SOCKDIAG_BUF);
        d->fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
        if (!d->buf || d->fd < 0) {
                r = d->buf ? -errno : -ENOMEM;
                sockdiag_free(d);
                return r;
        }
        if (setsockopt(d->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0 ||
            setsockopt(d->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0 ||
            bind(d->fd, (struct sockaddr *) &sa, sizeof(sa)) < 0) {
                r = -errno;
                sockdiag_free(d);
                return r;
        }
        *ret = d;
        return 0;
}

/* Is there a TCP handler (tcp_diag) where @d was made? Without one every lookup would
 * say ENOENT, like a socket that is gone. A dump of no states walks no socket. Takes
 * @d: *ret = @d, or @d freed and -EPROTONOSUPPORT or the dump's error. */
static int diag_probe(SockDiag *d, SockDiag **ret) {
        int r;

        r = sockdiag_dump(d, AF_INET, 0, false, probe_cb, NULL);
        if (r < 0) {
                sockdiag_free(d);
                return r == -ENOENT ? -EPROTONOSUPPORT : r;
        }
        *ret = d;
        return 0;
}

int sockdiag_open(SockDiag **ret) {
        SockDiag *d;
        int r;

        r = diag_new(&d);
        if (r < 0)
                return r;
        return diag_probe(d, ret);
}

struct netns_open {
        int ns_fd;
        int r;
        SockDiag *d;
};

static void *netns_open_thread(void *userdata) {
        struct netns_open *o = userdata;

        if (setns(o->ns_fd, CLONE_NEWNET) < 0) {
                o->r = -errno;
                return NULL;
        }
        o->r = diag_new(&o->d); /* the socket stays in the namespace it was made in */
        return NULL;
}

int sockdiag_open_netns(int sock_fd, SockDiag **ret) {
        struct netns_open o = { .ns_fd = -1, .r = 0, .d = NULL };
        struct stat mine, theirs;
        pthread_t th;
        int r;

        o.ns_fd = ioctl(sock_fd, SIOCGSKNS);
        if (o.ns_fd < 0)
                return -errno;
        if (fstat(o.ns_fd, &theirs) == 0 && stat("/proc/thread-self/ns/net", &mine) == 0 &&
            mine.st_dev == theirs.st_dev && mine.st_ino == theirs.st_ino) {
                close(o.ns_fd);
                return sockdiag_open(ret); /* our own namespace */
        }
        r = -pthread_create(&th, NULL, netns_open_thread, &o);
        if (r == 0)
                (void) pthread_join(th, NULL);
        close(o.ns_fd);
        if (r < 0)
                return r;
        if (o.r < 0)
                return o.r;
        return diag_probe(o.d, ret);
}

SockDiag *sockdiag_free(SockDiag *d) {
        if (!d)
                return NULL;
        if (d->fd >= 0)
                close(d->fd);
        free(d->buf);
        free(d);
        return NULL;
}

const char *sockdiag_state_name(uint8_t state) {
        static const char *const names[_SOCKDIAG_TCP_MAX] = {
                [SOCKDIAG_TCP_ESTABLISHED] = "ESTABLISHED", [SOCKDIAG_TCP_SYN_SENT] = "SYN_SENT",
                [SOCKDIAG_TCP_SYN_RECV] = "SYN_RECV",       [SOCKDIAG_TCP_FIN_WAIT1] = "FIN_WAIT1",
                [SOCKDIAG_TCP_FIN_WAIT2] = "FIN_WAIT2",     [SOCKDIAG_TCP_TIME_WAIT] = "TIME_WAIT",
                [SOCKDIAG_TCP_CLOSE] = "CLOSE",             [SOCKDIAG_TCP_CLOSE_WAIT] = "CLOSE_WAIT",
                [SOCKDIAG_TCP_LAST_ACK] = "LAST_ACK",       [SOCKDIAG_TCP_LISTEN] = "LISTEN",
                [SOCKDIAG_TCP_CLOSING] = "CLOSING",         [SOCKDIAG_TCP_NEW_SYN_RECV] = "NEW_SYN_RECV",
        };

        if (state < sizeof(names) / sizeof(names[0]) && names[state])
                return names[state];
        return "UNKNOWN";
}

static int addr_to_id(const struct smc_ctl_addr *a, __be32 id[4], __be16 *port) {
        if (a->family == AF_INET)
                memcpy(id, a->addr, 4);
        else if (a->family == AF_INET6)
                memcpy(id, a->addr, 16);
        else
                return -EINVAL;
        *port = htons(a->port);
        return 0;
}

static void addr_from_id(uint16_t family, const __be32 id[4], __be16 port, uint32_t scope_id, struct smc_ctl_addr *a) {
        memset(a, 0, sizeof(*a));
        a->family = family;
        a->port = ntohs(port);
        memcpy(a->addr, id, family == AF_INET ? 4 : 16);
        if (family == AF_INET6)
                a->scope_id = scope_id;
}

static uint8_t ext_bits(bool ext) {
        return ext ? (uint8_t) ((1u << (INET_DIAG_INFO - 1)) | (1u << (INET_DIAG_SKMEMINFO - 1))) : 0;
}

/* One SOCK_DIAG_BY_FAMILY request (@req, @len bytes: an inet_diag_req_v2 or a
 * unix_diag_req) under a new sequence number. */
static int send_req_raw(SockDiag *d, const void *req, size_t len, uint16_t flags) {
        struct {
                struct nlmsghdr nlh;
                union {
                        struct inet_diag_req_v2 in;
                        struct unix_diag_req un;
                } req;
        } msg = {
                .nlh = {
                        .nlmsg_len = (uint32_t) NLMSG_LENGTH(len),
                        .nlmsg_type = SOCK_DIAG_BY_FAMILY,
                        .nlmsg_flags = NLM_F_REQUEST | flags,
                        .nlmsg_seq = ++d->seq,
                },
        };
        struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
        ssize_t n;

        if (len > sizeof(msg.req))
                return -EINVAL;
        memcpy(&msg.req, req, len);
        do
                n = sendto(d->fd, &msg, msg.nlh.nlmsg_len, 0, (struct sockaddr *) &kernel, sizeof(kernel));
        while (n < 0 && errno == EINTR);
        if (n < 0)
                return errno == EAGAIN ? -ETIMEDOUT : -errno;
        return n == (ssize_t) msg.nlh.nlmsg_len ? 0 : -EIO;
}

static int send_req(SockDiag *d, const struct inet_diag_req_v2 *req, uint16_t flags) {
        return send_req_raw(d, req, sizeof(*req), flags);
}

/* One datagram from the kernel into d->buf. Returns its length or -errno. */
static ssize_t recv_batch(SockDiag *d) {
        struct sockaddr_nl from;
        struct iovec iov = { .iov_base = d->buf, .iov_len = SOCKDIAG_BUF };
        struct msghdr mh = { .msg_name = &from, .msg_namelen = sizeof(from), .msg_iov = &iov, .msg_iovlen = 1 };
        ssize_t n;

        for (;;) {
                n = recvmsg(d->fd, &mh, 0);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return errno == EAGAIN ? -ETIMEDOUT : -errno;
                if (mh.msg_flags & MSG_TRUNC)
                        return -EMSGSIZE;
                if (mh.msg_namelen >= sizeof(from) && from.nl_pid != 0)
                        continue; /* not from the kernel: ignore */
                return n;
        }
}

/* Call @cb(type, payload, payload length, @userdata) for each attribute of the
 * netlink message @h after its family header of @hdr bytes; a truncated attribute
 * ends the walk. */
static void for_each_attr(const struct nlmsghdr *h, size_t hdr,
                          void (*cb)(uint16_t type, const void *p, size_t len, void *userdata), void *userdata) {
        size_t hl = NLMSG_ALIGN(hdr);
        int len = (int) h->nlmsg_len - (int) NLMSG_LENGTH(hl);
        const struct nlattr *a = (const struct nlattr *) ((const uint8_t *) NLMSG_DATA(h) + hl);

        while (len >= (int) sizeof(*a) && a->nla_len >= sizeof(*a) && a->nla_len <= len) {
                cb(a->nla_type & NLA_TYPE_MASK, (const uint8_t *) a + NLA_HDRLEN, a->nla_len - NLA_HDRLEN, userdata);
                len -= (int) NLA_ALIGN(a->nla_len);
                a = (const struct nlattr *) ((const uint8_t *) a + NLA_ALIGN(a->nla_len));
        }
}

/* An inet_diag attribute into the SockDiagInfo @userdata. */
static void inet_attr(uint16_t type, const void *p, size_t pl, void *userdata) {
        SockDiagInfo *ret = userdata;

        switch (type) {
        case INET_DIAG_SKMEMINFO:
                if (pl >= sizeof(uint32_t) * (SK_MEMINFO_SNDBUF + 1)) {
                        const uint32_t *v = p;

                        ret->have_mem = true;
                        ret->rcvbuf = v[SK_MEMINFO_RCVBUF];
                        ret->sndbuf = v[SK_MEMINFO_SNDBUF];
                }
                break;
        case INET_DIAG_INFO:
                if (pl >= offsetof(struct tcp_info, tcpi_bytes_received) + sizeof(uint64_t)) {
                        struct tcp_info ti = {};

                        memcpy(&ti, p, pl < sizeof(ti) ? pl : sizeof(ti));
                        ret->have_bytes = true;
                        ret->bytes_acked = ti.tcpi_bytes_acked;
                        ret->bytes_received = ti.tcpi_bytes_received;
                }
                break;
        default:
                break;
        }
}

/* Parse one SOCK_DIAG_BY_FAMILY answer. Returns 0 or -EBADMSG. */
static int parse_msg(const struct nlmsghdr *h, SockDiagInfo *ret) {
        const struct inet_diag_msg *m = NLMSG_DATA(h);

        if (h->nlmsg_len < NLMSG_LENGTH(sizeof(*m)) || (m->idiag_family != AF_INET && m->idiag_family != AF_INET6))
                return -EBADMSG;
        memset(ret, 0, sizeof(*ret));
        ret->family = m->idiag_family;
        ret->state = m->idiag_state;
        ret->uid = m->idiag_uid;
        ret->inode = m->idiag_inode;
        ret->cookie = (uint64_t) m->id.idiag_cookie[0] | (uint64_t) m->id.idiag_cookie[1] << 32;
        addr_from_id(m->idiag_family, m->id.idiag_src, m->id.idiag_sport, m->id.idiag_if, &ret->local);
        addr_from_id(m->idiag_family, m->id.idiag_dst, m->id.idiag_dport, m->id.idiag_if, &ret->peer);
        for_each_attr(h, sizeof(*m), inet_attr, ret);
        return 0;
}

/* The answer to the exact (not dump) request just sent: 0 with *@ret its message
 * (in d->buf), or the kernel's error (-ENOENT: no such socket), -EBADMSG, -errno. */
static int exact_reply(SockDiag *d, const struct nlmsghdr **ret) {
        for (;;) {
                ssize_t n = recv_batch(d);

                if (n < 0)
                        return (int) n;
                int len = (int) n;

                for (struct nlmsghdr *h = (struct nlmsghdr *) d->buf; NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
                        if (h->nlmsg_seq != d->seq)
                                continue; /* a late answer to an earlier request */
                        if (h->nlmsg_type == NLMSG_ERROR) {
                                const struct nlmsgerr *e = NLMSG_DATA(h);

                                if (h->nlmsg_len < NLMSG_LENGTH(sizeof(*e)))
                                        return -EBADMSG;
                                return e->error < 0 ? e->error : -EBADMSG;
                        }
                        if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY)
                                return -EBADMSG;
                        *ret = h;
                        return 0;
                }
        }
}

int sockdiag_lookup(SockDiag *d, const struct smc_ctl_addr *local, const struct smc_ctl_addr *peer, uint64_t cookie,
                    bool ext, SockDiagInfo *ret) {
        struct inet_diag_req_v2 req = {
                .sdiag_family = (uint8_t) local->family,
                .sdiag_protocol = IPPROTO_TCP,
                .idiag_ext = ext_bits(ext),
                .idiag_states = ~0u,
                .id.idiag_if = local->scope_id,
                .id.idiag_cookie = { INET_DIAG_NOCOOKIE, INET_DIAG_NOCOOKIE },
        };
        const struct nlmsghdr *h = NULL;
        int r;

        if (local->family != peer->family || addr_to_id(local, req.id.idiag_src, &req.id.idiag_sport) < 0 ||
            addr_to_id(peer, req.id.idiag_dst, &req.id.idiag_dport) < 0)
                return -EINVAL;
        if (cookie) {
                req.id.idiag_cookie[0] = (uint32_t) cookie;
                req.id.idiag_cookie[1] = (uint32_t) (cookie >> 32);
        }
        r = send_req(d, &req, 0);
        if (r >= 0)
                r = exact_reply(d, &h);
        if (r == -ESTALE) /* a socket with that 4-tuple, another cookie */
                return -ENOENT;
        return r < 0 ? r : parse_msg(h, ret);
}

int sockdiag_dump(SockDiag *d, int family, uint32_t states, bool ext, int (*cb)(const SockDiagInfo *i, void *userdata),
                  void *userdata) {
        struct inet_diag_req_v2 req = {
                .sdiag_family = (uint8_t) family,
                .sdiag_protocol = IPPROTO_TCP,
                .idiag_ext = ext_bits(ext),
                .idiag_states = states,
        };
        bool inconsistent = false;
        int r;

        if (family != AF_INET && family != AF_INET6)
                return -EINVAL;
        r = send_req(d, &req, NLM_F_DUMP);
        if (r < 0)
                return r;
        for (;;) {
                ssize_t n = recv_batch(d);

                if (n < 0)
                        return (int) n;
                int len = (int) n;

                for (struct nlmsghdr *h = (struct nlmsghdr *) d->buf; NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
                        SockDiagInfo i;

                        if (h->nlmsg_seq != d->seq)
                                continue;
                        if (h->nlmsg_flags & NLM_F_DUMP_INTR)
                                inconsistent = true;
                        if (h->nlmsg_type == NLMSG_DONE)
                                return inconsistent ? -EAGAIN : 0;
                        if (h->nlmsg_type == NLMSG_ERROR) {
                                const struct nlmsgerr *e = NLMSG_DATA(h);

                                return h->nlmsg_len >= NLMSG_LENGTH(sizeof(*e)) && e->error < 0 ? e->error : -EBADMSG;
                        }
                        if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY || parse_msg(h, &i) < 0)
                                continue;
                        r = cb(&i, userdata);
                        if (r < 0) {
                                /* the rest of the dump is still queued: drain it, or the
                                 * next request would read it first (seq tells them
                                 * apart, but this keeps the socket's queue short) */
                                for (;;) {
                                        ssize_t k = recv(d->fd, d->buf, SOCKDIAG_BUF, MSG_DONTWAIT);
                                        if (k <= 0)
                                                break;
                                }
                                return r;
                        }
                }
        }
}

/* The unix_diag answer for the socket of inode @ino (@show: UDIAG_SHOW_* attributes
 * asked for): 0 with *@ret its message (in d->buf), -ENOENT (no such socket), -EINVAL
 * (@ino 0 or wider than 32 bits), -EBADMSG, -ETIMEDOUT, -errno. */
static int unix_lookup(SockDiag *d, uint64_t ino, uint32_t show, const struct nlmsghdr **ret) {
        struct unix_diag_req req = {
                .sdiag_family = AF_UNIX,
                .udiag_states = ~0u,
                .udiag_ino = (uint32_t) ino,
                .udiag_show = show,
                .udiag_cookie = { INET_DIAG_NOCOOKIE, INET_DIAG_NOCOOKIE },
        };
        const struct unix_diag_msg *um;
        int r;

        if (ino == 0 || ino > UINT32_MAX)
                return -EINVAL;
        r = send_req_raw(d, &req, sizeof(req), 0);
        if (r >= 0)
                r = exact_reply(d, ret);
        if (r < 0)
                return r;
        um = NLMSG_DATA(*ret);
        if ((*ret)->nlmsg_len < NLMSG_LENGTH(sizeof(*um)) || um->udiag_family != AF_UNIX ||
            um->udiag_ino != (uint32_t) ino)
                return -EBADMSG;
        return 0;
}

int sockdiag_unix_exists(SockDiag *d, uint64_t ino) {
        const struct nlmsghdr *h;
        int r = unix_lookup(d, ino, 0, &h);

        return r == 0 ? 1 : r == -ENOENT ? 0 : r;
}

/* UNIX_DIAG_PEER into the uint64_t @userdata. */
static void peer_attr(uint16_t type, const void *p, size_t len, void *userdata) {
        if (type == UNIX_DIAG_PEER && len >= sizeof(uint32_t)) {
                uint32_t peer;

                memcpy(&peer, p, sizeof(peer));
                *(uint64_t *) userdata = peer;
        }
}

int sockdiag_unix_peer(SockDiag *d, uint64_t ino, uint64_t *ret_peer) {
        const struct nlmsghdr *h;
        int r = unix_lookup(d, ino, UDIAG_SHOW_PEER, &h);

        if (r < 0)
                return r;
        *ret_peer = 0;
        for_each_attr(h, sizeof(struct unix_diag_msg), peer_attr, ret_peer);
        return 0;
}

int sockdiag_unix_open(SockDiag **ret) {
        struct stat st;
        SockDiag *d;
        int p[2], r;

        r = diag_new(&d);
        if (r < 0)
                return r;
        /* Does the kernel find a socket we hold, and no longer once it is closed?
         * (unix_diag may be missing: then every socket would look gone.) */
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p) < 0) {
                r = -errno;
                sockdiag_free(d);
                return r;
        }
        r = fstat(p[0], &st) < 0 ? -errno : sockdiag_unix_exists(d, (uint64_t) st.st_ino);
        close(p[0]);
        if (r == 1)
                r = sockdiag_unix_exists(d, (uint64_t) st.st_ino) == 0 ? 0 : -EPROTONOSUPPORT;
        else if (r == 0)
                r = -EPROTONOSUPPORT;
        close(p[1]);
        if (r < 0) {
                sockdiag_free(d);
                return r;
        }
        *ret = d;
        return 0;
}
