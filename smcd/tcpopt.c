/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The SMC TCP option through a BPF sock_ops program: the loader (see tcpopt.h). */

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "bpf/smc-tcpopt-abi.h"
#include "smc-tcpopt.skel.h"
#include "sockdiag.h"
#include "tcpopt.h"

#ifndef SO_COOKIE
#define SO_COOKIE 57
#endif
#ifndef SO_NETNS_COOKIE
#define SO_NETNS_COOKIE 71
#endif

struct TcpOpt {
        struct smc_tcpopt_bpf *skel;
        struct bpf_link *link;
        int cgroup_fd;
        int marks_fd;   /* smc_marks: sk storage, keyed by a socket fd */
        int listen_fd;  /* smc_listen: marked listeners */
        int flagged_fd; /* smc_flagged: listeners whose header-option callbacks are on */
        int members_fd; /* smc_members: marked listeners by socket cookie */
        bool netns_key; /* the keys carry the namespace cookie (smc_netns_key) */
        bool flagged_reused, flagged_reuse_failed; /* tcpopt_new()'s @flagged_fd */
};

static int libbpf_print(enum libbpf_print_level level, const char *format, va_list args) {
        static int debug = -1;

        if (debug < 0)
                debug = getenv("SMCD_TCPOPT_DEBUG") != NULL;
        if (!debug)
                return 0;
        return vfprintf(stderr, format, args);
}

static pthread_once_t libbpf_once = PTHREAD_ONCE_INIT;

static void libbpf_setup(void) {
        (void) libbpf_set_print(libbpf_print);
}

/* Does the kernel have what the program needs? 0, -ENOTSUP, or -EPERM etc. */
static int tcpopt_probe(void) {
        static const enum bpf_func_id helpers[] = {
                BPF_FUNC_load_hdr_opt, BPF_FUNC_store_hdr_opt, BPF_FUNC_reserve_hdr_opt,
                BPF_FUNC_sk_storage_get, BPF_FUNC_sock_ops_cb_flags_set,
                BPF_FUNC_for_each_map_elem,
        };
        int r;

        r = libbpf_probe_bpf_prog_type(BPF_PROG_TYPE_SOCK_OPS, NULL);
        if (r == 0 || r == -ENOSYS || r == -EOPNOTSUPP)
                return -ENOTSUP;
        if (r < 0)
                return r;
        r = libbpf_probe_bpf_map_type(BPF_MAP_TYPE_SK_STORAGE, NULL);
        if (r == 0)
                return -ENOTSUP;
        if (r < 0)
                return r;
        for (size_t i = 0; i < sizeof(helpers) / sizeof(helpers[0]); i++) {
                r = libbpf_probe_bpf_helper(BPF_PROG_TYPE_SOCK_OPS, helpers[i], NULL);
                if (r == 0)
                        return -ENOTSUP;
                if (r < 0)
                        return r;
        }
        return 0;
}

TcpOpt *tcpopt_free(TcpOpt *t) {
        if (!t)
                return NULL;
        if (t->link)
                (void) bpf_link__destroy(t->link);
        if (t->skel)
                smc_tcpopt_bpf__destroy(t->skel);
        if (t->cgroup_fd >= 0)
                (void) close(t->cgroup_fd);
        free(t);
        return NULL;
}

/* Is @fd a smc_flagged map of this program's layout (made by an earlier smcd)? */
static bool flagged_map_compatible(int fd) {
        struct bpf_map_info info = {};
        uint32_t len = sizeof(info);

        if (bpf_obj_get_info_by_fd(fd, &info, &len) < 0)
                return false;
        return info.type == BPF_MAP_TYPE_LRU_HASH && info.key_size == sizeof(struct smc_tcpopt_lkey) &&
               info.value_size == sizeof(struct smc_tcpopt_lval) && info.max_entries == SMC_TCPOPT_FLAGGED_MAX &&
               strcmp(info.name, "smc_flagged") == 0;
}

int tcpopt_new(const char *cgroup_path, int flagged_fd, TcpOpt **ret) {
        struct statfs sfs;
        TcpOpt *t;
        int r;

        if (!cgroup_path || !ret)
                return -EINVAL;
        t = calloc(1, sizeof(*t));
        if (!t)
                return -ENOMEM;
        t->cgroup_fd = open(cgroup_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (t->cgroup_fd < 0) {
                r = -errno;
                goto fail;
        }
        if (fstatfs(t->cgroup_fd, &sfs) < 0) {
                r = -errno;
                goto fail;
        }
        if (sfs.f_type != CGROUP2_SUPER_MAGIC) {
                r = -EINVAL;
                goto fail;
        }

        (void) pthread_once(&libbpf_once, libbpf_setup);
        t->skel = smc_tcpopt_bpf__open();
        if (!t->skel) {
                r = errno > 0 ? -errno : -ENOMEM;
                goto fail;
        }
        /* listeners of different namespaces on the same address and port are told
         * apart by the namespace's cookie where sock_ops programs can read it (Linux
         * 5.15; SO_NETNS_COOKIE is 5.14); before that they share one entry */
        t->netns_key = libbpf_probe_bpf_helper(BPF_PROG_TYPE_SOCK_OPS, BPF_FUNC_get_netns_cookie, NULL) > 0;
        t->skel->rodata->smc_netns_key = t->netns_key;
        /* an earlier instance's record of the listeners whose callbacks are on: the
         * listeners that were listening before this load can then be marked */
        if (flagged_fd >= 0) {
                if (flagged_map_compatible(flagged_fd) &&
                    bpf_map__reuse_fd(t->skel->maps.smc_flagged, flagged_fd) == 0)
                        t->flagged_reused = true;
                else
                        t->flagged_reuse_failed = true;
        }
        r = smc_tcpopt_bpf__load(t->skel);
        if (r < 0) {
                /* -EPERM: not privileged (the probes cannot tell that case apart: they
                 * fail the same way). Otherwise ask whether the kernel has it at all. */
                if (r != -EPERM && tcpopt_probe() == -ENOTSUP)
                        r = -ENOTSUP;
                goto fail;
        }
        t->marks_fd = bpf_map__fd(t->skel->maps.smc_marks);
        t->listen_fd = bpf_map__fd(t->skel->maps.smc_listen);
        t->flagged_fd = bpf_map__fd(t->skel->maps.smc_flagged);
        t->members_fd = bpf_map__fd(t->skel->maps.smc_members);

        /* a cgroup BPF link: multi-attach (as BPF_F_ALLOW_MULTI), detached when the link
         * is destroyed or its last fd closed (also when smcd dies) */
        t->link = bpf_program__attach_cgroup(t->skel->progs.smc_tcpopt, t->cgroup_fd);
        if (!t->link) {
                r = errno > 0 ? -errno : -EINVAL;
                goto fail;
        }
        *ret = t;
        return 0;

fail:
        tcpopt_free(t);
        return r;
}

/* An IPv4 / IPv6 TCP stream socket? Its TCP state (TCP_INFO takes the socket lock,
 * so it also waits out a packet being processed for it right now) in *@ret_state. */
static int tcp_socket_state(int fd, int *ret_state) {
        struct tcp_info ti;
        socklen_t len;
        int v;

        if (fd < 0)
                return -EBADF;
        len = sizeof(v);
        if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &v, &len) < 0)
                return -errno; /* EBADF, ENOTSOCK */
        if (v != AF_INET && v != AF_INET6)
                return -EPROTONOSUPPORT;
        len = sizeof(v);
        if (getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &v, &len) < 0)
                return -errno;
        if (v != IPPROTO_TCP)
                return -EPROTONOSUPPORT;
        len = sizeof(ti);
        if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0)
                return -errno;
        *ret_state = ti.tcpi_state;
        return 0;
}

/* The smc_listen / smc_flagged key of a listener, as the program builds it, and its
 * socket cookie. */
static int listener_key(const TcpOpt *t, int fd, struct smc_tcpopt_lkey *k, uint64_t *ret_cookie) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof(ss);
        uint64_t cookie;

        memset(k, 0, sizeof(*k));
        if (t->netns_key) {
                len = sizeof(k->netns);
                if (getsockopt(fd, SOL_SOCKET, SO_NETNS_COOKIE, &k->netns, &len) < 0)
                        return -errno;
                len = sizeof(ss);
        }
        if (getsockname(fd, (struct sockaddr *) &ss, &len) < 0)
                return -errno;
        if (ss.ss_family == AF_INET) {
                const struct sockaddr_in *sin = (const struct sockaddr_in *) &ss;

                k->port = ntohs(sin->sin_port);
                if (sin->sin_addr.s_addr == htonl(INADDR_ANY))
                        k->wild = 4;
                else {
                        k->addr[2] = htonl(0xffff);
                        k->addr[3] = sin->sin_addr.s_addr;
                }
        } else if (ss.ss_family == AF_INET6) {
                const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *) &ss;

                k->port = ntohs(sin6->sin6_port);
                memcpy(k->addr, &sin6->sin6_addr, sizeof(k->addr));
                if (IN6_IS_ADDR_UNSPECIFIED(&sin6->sin6_addr))
                        k->wild = 6;
        } else
                return -EPROTONOSUPPORT;
        len = sizeof(cookie);
        if (getsockopt(fd, SOL_SOCKET, SO_COOKIE, &cookie, &len) < 0)
                return -errno;
        *ret_cookie = cookie;
        return 0;
}

/* May other listeners have the same namespace, address and port as @fd? 1 if it has
 * SO_REUSEPORT or SO_BINDTODEVICE set, 0 if not, -errno. */
static int shares_address(int fd) {
        char dev[IFNAMSIZ + 1] = "";
        socklen_t len = sizeof(int);
        int v = 0;

        if (getsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &v, &len) < 0)
                return -errno;
        if (v)
                return 1;
        len = sizeof(dev);
        if (getsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, dev, &len) < 0)
                return -errno;
        return len > 0 && dev[0] != 0;
}

int tcpopt_flagged_fd(const TcpOpt *t, int *ret_reused) {
        if (!t)
                return -EINVAL;
        if (ret_reused)
                *ret_reused = t->flagged_reused ? 1 : t->flagged_reuse_failed ? -1 : 0;
        return t->flagged_fd;
}

/* Do two listener keys overlap: the same namespace and port, and the same address or
 * either a wildcard (conservative: a wildcard of one family is taken to overlap the
 * other family's addresses too)? */
static bool lkey_overlap(const struct smc_tcpopt_lkey *a, const struct smc_tcpopt_lkey *b) {
        if (a->netns != b->netns || a->port != b->port)
                return false;
        return a->wild || b->wild || memcmp(a->addr, b->addr, sizeof(a->addr)) == 0;
}

struct group_check {
        const TcpOpt *t;
        struct smc_tcpopt_lkey key;
        uint64_t self;
        int unmarked; /* overlapping listeners not in smc_members */
};

static int group_check_cb(const SockDiagInfo *i, void *userdata) {
        struct group_check *g = userdata;
        struct smc_tcpopt_lkey k = { .netns = g->key.netns, .port = i->local.port }, mk;
        static const uint8_t zero[16];

        if (i->state != SOCKDIAG_TCP_LISTEN || i->cookie == g->self || i->local.port != g->key.port)
                return 0;
        if (i->local.family == AF_INET) {
                if (memcmp(i->local.addr, zero, 4) == 0)
                        k.wild = 4;
                else {
                        k.addr[2] = htonl(0xffff);
                        memcpy(&k.addr[3], i->local.addr, 4);
                }
        } else {
                memcpy(k.addr, i->local.addr, sizeof(k.addr));
                if (memcmp(i->local.addr, zero, 16) == 0)
                        k.wild = 6;
        }
        if (!lkey_overlap(&k, &g->key))
                return 0;
        if (bpf_map_lookup_elem(g->t->members_fd, &i->cookie, &mk) < 0)
                g->unmarked++;
        return 0;
}

/* Is every other listener that the kernel shows on an address and port overlapping
 * listener @fd's (@k, cookie @self) in smc_members? Listeners are read from sock_diag
 * in @fd's network namespace: all of them, also those that started before this
 * TcpOpt or outside its cgroup. Returns 1 (yes), 0 (an unmarked one), -errno (cannot
 * tell: the caller must not mark). */
static int group_all_marked(const TcpOpt *t, int fd, const struct smc_tcpopt_lkey *k, uint64_t self) {
        struct group_check g = { .t = t, .key = *k, .self = self };
        static const int families[] = { AF_INET, AF_INET6 };
        SockDiag *d = NULL;
        int r;

        r = sockdiag_open_netns(fd, &d);
        if (r < 0)
                return r;
        for (size_t f = 0; f < 2; f++) {
                /* a dump the kernel reports inconsistent (the tables changed) may have
                 * missed one: again, a few times */
                for (int tries = 0; tries < 5; tries++) {
                        g.unmarked = 0;
                        r = sockdiag_dump(d, families[f], 1u << SOCKDIAG_TCP_LISTEN, false, group_check_cb, &g);
                        if (r != -EAGAIN)
                                break;
                }
                if (r < 0 || g.unmarked)
                        break;
        }
        sockdiag_free(d);
        if (r < 0)
                return r;
        return g.unmarked == 0;
}

int tcpopt_mark(TcpOpt *t, int fd) {
        struct smc_tcpopt_sk mark = { .flags = SMC_TCPOPT_F_MARKED }, cur;
        struct smc_tcpopt_lval fv, lv = {};
        struct smc_tcpopt_lkey k;
        uint64_t cookie;
        int r, state, shared;

        if (!t)
                return -EINVAL;
        r = tcp_socket_state(fd, &state);
        if (r < 0)
                return r;
        /* keep the record of callback flags the program turned on (a connect() that
         * failed before it was established leaves them on, to be turned off later) */
        if (bpf_map_lookup_elem(t->marks_fd, &fd, &cur) == 0)
                mark.cb_added = cur.cb_added;
        if (state == TCP_CLOSE)
                return bpf_map_update_elem(t->marks_fd, &fd, &mark, BPF_ANY) < 0 ? -errno : 0;
        if (state != TCP_LISTEN)
                return -EISCONN;
        shared = shares_address(fd);
        if (shared < 0)
                return shared;
        r = listener_key(t, fd, &k, &cookie);
        if (r < 0)
                return r;
        /* already listening: it works if the program saw it start listening (and so
         * turned on its header-option callbacks). A member of a group may have started
         * before the one that the record names: marked without its callbacks on, it
         * would never echo (its clients use TCP), which is safe; one marked before (in
         * smc_members) was seen already. */
        if (bpf_map_lookup_elem(t->flagged_fd, &k, &fv) < 0 || (!shared && fv.cookie != cookie)) {
                struct smc_tcpopt_lkey mk;

                if (!shared || bpf_map_lookup_elem(t->members_fd, &cookie, &mk) < 0)
                        return -EBUSY;
        }
        if (bpf_map_update_elem(t->marks_fd, &fd, &mark, BPF_ANY) < 0)
                return -errno;
        if (bpf_map_update_elem(t->members_fd, &cookie, &k, BPF_ANY) < 0) {
                r = -errno; /* -E2BIG: full */
                goto unmark;
        }
        /* a listener that may share its namespace, address and port with others (an
         * SO_REUSEPORT group, or listeners bound to different devices): the SYN-ACK side
         * finds the listener by those only, so a plain member would echo for a marked
         * one and its client would send CLC to a plain server. Its entry is written only
         * when every overlapping listener is marked (it is a member now, so the last
         * member to be marked writes it, in whatever order they listened); one that
         * starts later drops the entry (listen_purge_cb), one that started between the
         * check and the entry is seen by the second check. */
        if (shared) {
                r = group_all_marked(t, fd, &k, cookie);
                if (r < 0)
                        goto unmember;
                if (r == 0)
                        return 1;
                lv.flags = SMC_TCPOPT_L_GROUP;
        }
        if (k.wild == 6) {
                int v6only = 1;
                socklen_t ol = sizeof(v6only);

                /* IPv4 connections find a :: listener only if it takes them: with
                 * IPV6_V6ONLY they go to another listener, maybe a plain one */
                if (getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &ol) == 0 && !v6only)
                        lv.flags |= SMC_TCPOPT_L_DUALSTACK;
        }
        lv.cookie = cookie;
        if (bpf_map_update_elem(t->listen_fd, &k, &lv, BPF_ANY) < 0) {
                r = errno == ENOSPC ? -E2BIG : -errno;
                goto unmember;
        }
        if (shared) {
                r = group_all_marked(t, fd, &k, cookie);
                if (r <= 0) {
                        struct smc_tcpopt_lval cv;

                        if (bpf_map_lookup_elem(t->listen_fd, &k, &cv) == 0 && cv.cookie == cookie)
                                (void) bpf_map_delete_elem(t->listen_fd, &k);
                        if (r == 0)
                                return 1;
                        goto unmember;
                }
        }
        return 0;

unmember:
        (void) bpf_map_delete_elem(t->members_fd, &cookie);
unmark:
        mark.flags = 0; /* a listener not in smc_listen never echoes */
        (void) bpf_map_update_elem(t->marks_fd, &fd, &mark, BPF_ANY);
        return r;
}

int tcpopt_unmark(TcpOpt *t, int fd) {
        struct smc_tcpopt_sk cur, none = {};
        struct smc_tcpopt_lval lv;
        struct smc_tcpopt_lkey k, mk;
        uint64_t cookie;
        int r, state;

        if (!t)
                return -EINVAL;
        r = tcp_socket_state(fd, &state);
        if (r < 0)
                return r;
        /* a group's entry goes whichever member it names: this one is not marked any
         * more but still listens (and echoes while the entry is there) */
        if (state == TCP_LISTEN && listener_key(t, fd, &k, &cookie) == 0) {
                if (bpf_map_lookup_elem(t->listen_fd, &k, &lv) == 0 &&
                    (lv.cookie == cookie ||
                     ((lv.flags & SMC_TCPOPT_L_GROUP) && bpf_map_lookup_elem(t->members_fd, &cookie, &mk) == 0)))
                        (void) bpf_map_delete_elem(t->listen_fd, &k);
                (void) bpf_map_delete_elem(t->members_fd, &cookie);
        }
        if (bpf_map_lookup_elem(t->marks_fd, &fd, &cur) < 0)
                return errno == ENOENT ? 0 : -errno;
        if (!(cur.flags & SMC_TCPOPT_F_MARKED))
                return 0;
        /* keep the entry (flags 0): children cloned from it still report their echo */
        none.flags = cur.flags & ~SMC_TCPOPT_F_MARKED;
        none.cb_added = cur.cb_added;
        return bpf_map_update_elem(t->marks_fd, &fd, &none, BPF_ANY) < 0 ? -errno : 0;
}

int tcpopt_peer_has(TcpOpt *t, int fd) {
        struct smc_tcpopt_sk st;
        int r, state;

        if (!t)
                return -EINVAL;
        r = tcp_socket_state(fd, &state);
        if (r < 0)
                return r;
        if (state == TCP_SYN_SENT || state == TCP_SYN_RECV) {
                /* an accepted socket is in SYN_RECV only while its final ACK waits in
                 * the socket's backlog (the socket was locked by us): the lock taken
                 * by TCP_INFO released it, so look once more */
                r = tcp_socket_state(fd, &state);
                if (r < 0)
                        return r;
                if (state == TCP_SYN_SENT || state == TCP_SYN_RECV)
                        return -EAGAIN;
        }
        if (bpf_map_lookup_elem(t->marks_fd, &fd, &st) < 0)
                return errno == ENOENT ? 0 : -errno;
        if (st.flags & SMC_TCPOPT_F_DONE)
                return !!(st.flags & SMC_TCPOPT_F_PEER);
        if (!(st.flags & SMC_TCPOPT_F_MARKED))
                return 0; /* unmarked again */
        if (state == TCP_LISTEN)
                return -EINVAL;
        if (state == TCP_CLOSE)
                return -ENOTCONN;
        return 0; /* marked after its handshake: no option was sent */
}

bool tcpopt_has_record(TcpOpt *t, int fd) {
        struct smc_tcpopt_sk st;

        return t && bpf_map_lookup_elem(t->marks_fd, &fd, &st) == 0;
}

/* Undo the octal escapes (\040 etc.) of a /proc/self/mountinfo field, in place. */
static void unoctal(char *s) {
        char *w = s;

        for (char *p = s; *p; p++) {
                if (p[0] == '\\' && p[1] >= '0' && p[1] <= '3' && p[2] >= '0' && p[2] <= '7' &&
                    p[3] >= '0' && p[3] <= '7') {
                        *w++ = (char) (((p[1] - '0') << 6) | ((p[2] - '0') << 3) | (p[3] - '0'));
                        p += 3;
                } else
                        *w++ = *p;
        }
        *w = 0;
}

static char default_cgroup[4096];
static pthread_once_t default_cgroup_once = PTHREAD_ONCE_INIT;

static void default_cgroup_find(void) {
        char *line = NULL, *fields[10], *sep, *save, *p;
        size_t n = 0;
        bool found = false;
        FILE *f;

        f = fopen("/proc/self/mountinfo", "re");
        if (!f)
                return;
        /* "36 35 0:30 / /sys/fs/cgroup/unified rw,relatime shared:9 - cgroup2 cgroup2 rw":
         * the mount whose file system type (after " - ") is cgroup2; prefer one that
         * shows the hierarchy's root ("/") */
        while (getline(&line, &n, f) > 0) {
                int i = 0;

                sep = strstr(line, " - ");
                if (!sep)
                        continue;
                *sep = 0;
                for (p = strtok_r(line, " ", &save); p && i < 10; p = strtok_r(NULL, " ", &save))
                        fields[i++] = p;
                if (i < 5)
                        continue;
                p = strtok_r(sep + 3, " \n", &save);
                if (!p || strcmp(p, "cgroup2") != 0)
                        continue;
                if (found && strcmp(fields[3], "/") != 0)
                        continue;
                unoctal(fields[4]);
                if (strlen(fields[4]) >= sizeof(default_cgroup))
                        continue;
                strcpy(default_cgroup, fields[4]);
                found = true;
                if (strcmp(fields[3], "/") == 0)
                        break;
        }
        free(line);
        fclose(f);
}

const char *tcpopt_default_cgroup(void) {
        (void) pthread_once(&default_cgroup_once, default_cgroup_find);
        return default_cgroup[0] ? default_cgroup : NULL;
}
