/* SPDX-License-Identifier: LGPL-2.1-or-later */

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "addr.h"

uint64_t smcd_sock_netns(int fd) {
        struct stat st;
        int ns;

        if (fd < 0)
                return 0;
        ns = ioctl(fd, SIOCGSKNS);
        if (ns < 0)
                return 0;
        if (fstat(ns, &st) < 0)
                st.st_ino = 0;
        close(ns);
        return (uint64_t) st.st_ino;
}

uint64_t smcd_sock_netns_cookie(int fd) {
        uint64_t cookie = 0;
        socklen_t len = sizeof(cookie);

        if (fd < 0 || getsockopt(fd, SOL_SOCKET, SO_NETNS_COOKIE, &cookie, &len) < 0 || len != sizeof(cookie))
                return 0;
        return cookie;
}

uint64_t smcd_pid_netns(pid_t pid) {
        char path[64];
        struct stat st;

        if (pid <= 0)
                return 0;
        snprintf(path, sizeof(path), "/proc/%d/ns/net", (int) pid);
        return stat(path, &st) == 0 ? (uint64_t) st.st_ino : 0;
}

unsigned smcd_sock_ns_v4(int fd, NsV4 *out) {
        struct ifreq reqs[64];
        struct ifconf ifc = { .ifc_len = sizeof(reqs), .ifc_req = reqs };

        out->n = 0;
        if (fd < 0 || ioctl(fd, SIOCGIFCONF, &ifc) < 0)
                return 0;
        for (size_t i = 0; i < (size_t) ifc.ifc_len / sizeof(reqs[0]) && out->n < SMCD_NS_V4_MAX; i++) {
                const struct sockaddr_in *sin = (const struct sockaddr_in *) &reqs[i].ifr_addr;

                if (sin->sin_family == AF_INET)
                        memcpy(out->a[out->n++], &sin->sin_addr, 4);
        }
        return out->n;
}

bool smcd_ns_v4_has(const NsV4 *s, const uint8_t v4[4]) {
        for (unsigned i = 0; i < s->n; i++)
                if (!memcmp(s->a[i], v4, 4))
                        return true;
        return false;
}

static const uint8_t v4mapped_prefix[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

bool smcd_addr_equal(const struct smc_ctl_addr *a, const struct smc_ctl_addr *b) {
        return a->family == b->family && a->port == b->port && memcmp(a->addr, b->addr, sizeof(a->addr)) == 0;
}

bool smcd_addr_is_any(const struct smc_ctl_addr *a) {
        static const uint8_t zero[16];

        if (a->family == AF_INET)
                return memcmp(a->addr, zero, 4) == 0;
        if (a->family == AF_INET6)
                return memcmp(a->addr, zero, 16) == 0;
        return false;
}

bool smcd_addr_is_v4mapped(const struct smc_ctl_addr *a) {
        return a->family == AF_INET6 && memcmp(a->addr, v4mapped_prefix, 12) == 0;
}

bool smcd_addr_get_v4(const struct smc_ctl_addr *a, uint8_t ret[4]) {
        if (a->family == AF_INET) {
                memcpy(ret, a->addr, 4);
                return true;
        }
        if (smcd_addr_is_v4mapped(a)) {
                memcpy(ret, a->addr + 12, 4);
                return true;
        }
        return false;
}

bool smcd_addr_is_loopback(const struct smc_ctl_addr *a) {
        static const uint8_t lo6[16] = { [15] = 1 };
        uint8_t v4[4];

        if (smcd_addr_get_v4(a, v4))
                return v4[0] == 127;
        return a->family == AF_INET6 && memcmp(a->addr, lo6, 16) == 0;
}

bool smcd_addr_convert(const struct smc_ctl_addr *a, uint16_t family, struct smc_ctl_addr *ret) {
        struct smc_ctl_addr r = *a;
        uint8_t v4[4];

        if (a->family == family) {
                *ret = r;
                return true;
        }
        if (family == AF_INET6 && a->family == AF_INET) {
                memset(r.addr, 0, sizeof(r.addr));
                memcpy(r.addr, v4mapped_prefix, 12);
                memcpy(r.addr + 12, a->addr, 4);
                r.family = AF_INET6;
                r.scope_id = 0;
                *ret = r;
                return true;
        }
        if (family == AF_INET && smcd_addr_get_v4(a, v4)) {
                memset(r.addr, 0, sizeof(r.addr));
                memcpy(r.addr, v4, 4);
                r.family = AF_INET;
                r.scope_id = 0;
                *ret = r;
                return true;
        }
        return false;
}

const char *smcd_addr_to_string(const struct smc_ctl_addr *a, char *buf) {
        char s[INET6_ADDRSTRLEN];

        if (a->family == AF_INET) {
                inet_ntop(AF_INET, a->addr, s, sizeof(s));
                snprintf(buf, SMCD_ADDR_STRLEN, "%s:%u", s, a->port);
        } else if (a->family == AF_INET6) {
                inet_ntop(AF_INET6, a->addr, s, sizeof(s));
                if (a->scope_id)
                        snprintf(buf, SMCD_ADDR_STRLEN, "[%s%%%u]:%u", s, a->scope_id, a->port);
                else
                        snprintf(buf, SMCD_ADDR_STRLEN, "[%s]:%u", s, a->port);
        } else
                snprintf(buf, SMCD_ADDR_STRLEN, "(family %u)", a->family);
        return buf;
}

static int refresh(LocalAddrs *c) {
        struct ifaddrs *ifa, *i;
        struct smc_ctl_addr *v;
        size_t n = 0;

        if (getifaddrs(&ifa) < 0)
                return -errno;
        for (i = ifa; i; i = i->ifa_next)
                n++;
        v = calloc(n ? n : 1, sizeof(*v));
        if (!v) {
                freeifaddrs(ifa);
                return -ENOMEM;
        }
        n = 0;
        for (i = ifa; i; i = i->ifa_next) {
                if (!i->ifa_addr)
                        continue;
                socklen_t len = i->ifa_addr->sa_family == AF_INET ? sizeof(struct sockaddr_in)
                                                                  : sizeof(struct sockaddr_in6);
                if (smc_ctl_addr_from_sockaddr(&v[n], i->ifa_addr, len) == 0)
                        n++;
        }
        freeifaddrs(ifa);
        free(c->addrs);
        c->addrs = v;
        c->n = n;
        return 0;
}

bool smcd_addr_is_local(LocalAddrs *c, const struct smc_ctl_addr *a, uint64_t now_usec) {
        uint8_t v4[4], w4[4];

        if (smcd_addr_is_loopback(a) || smcd_addr_is_any(a))
                return true;
        if (c->refreshed_usec == 0 || now_usec >= c->refreshed_usec + 1000000u) {
                if (refresh(c) == 0)
                        c->refreshed_usec = now_usec ? now_usec : 1;
        }
        bool is_v4 = smcd_addr_get_v4(a, v4);
        for (size_t i = 0; i < c->n; i++) {
                if (is_v4) {
                        if (smcd_addr_get_v4(&c->addrs[i], w4) && memcmp(v4, w4, 4) == 0)
                                return true;
                } else if (c->addrs[i].family == AF_INET6 && memcmp(c->addrs[i].addr, a->addr, 16) == 0)
                        return true;
        }
        return false;
}

void local_addrs_done(LocalAddrs *c) {
        free(c->addrs);
        *c = (LocalAddrs) {};
}
