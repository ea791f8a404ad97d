/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Helpers on struct smc_ctl_addr (IPv4 / IPv6 socket addresses of the control
 * protocol) and the cache of this host's addresses. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ctl-proto.h"

#define SMCD_ADDR_STRLEN 80 /* "[ffff:...]:65535%4294967295" fits */

/* Same family, port and address bytes (scope id ignored). */
bool smcd_addr_equal(const struct smc_ctl_addr *a, const struct smc_ctl_addr *b);
/* 0.0.0.0 or :: */
bool smcd_addr_is_any(const struct smc_ctl_addr *a);
/* ::ffff:a.b.c.d */
bool smcd_addr_is_v4mapped(const struct smc_ctl_addr *a);
/* 127.0.0.0/8, ::1 or ::ffff:127.0.0.0/104 */
bool smcd_addr_is_loopback(const struct smc_ctl_addr *a);
/* If @a is IPv4 or IPv4-mapped IPv6, store its 4 address bytes and return true. */
bool smcd_addr_get_v4(const struct smc_ctl_addr *a, uint8_t ret[4]);
/* Convert @a to @family (AF_INET <-> IPv4-mapped AF_INET6). Returns false if not
 * representable (a real IPv6 address as AF_INET). */
bool smcd_addr_convert(const struct smc_ctl_addr *a, uint16_t family, struct smc_ctl_addr *ret);
/* "1.2.3.4:80" or "[::1]:80" into @buf (SMCD_ADDR_STRLEN bytes); returns buf. */
const char *smcd_addr_to_string(const struct smc_ctl_addr *a, char *buf);

/* Addresses of this host's interfaces (getifaddrs), refreshed at most once per
 * second on demand. Only the fallback when the netlink monitor (netlink.h, live) could
 * not be opened at start. */
typedef struct LocalAddrs {
        struct smc_ctl_addr *addrs; /* port 0 */
        size_t n;
        uint64_t refreshed_usec; /* CLOCK_MONOTONIC, 0 = never */
} LocalAddrs;

/* Is @a an address of this host: loopback, any, or an interface address.
 * @now_usec is CLOCK_MONOTONIC. */
bool smcd_addr_is_local(LocalAddrs *cache, const struct smc_ctl_addr *a, uint64_t now_usec);
void local_addrs_done(LocalAddrs *cache);

/* The network namespace a socket @fd belongs to (ioctl SIOCGSKNS, Linux 4.9): the
 * inode number of its nsfs file, as stat(2) of /proc/PID/ns/net gives; 0 if it
 * cannot be found (a CONNECT from such a socket goes to TCP). Three system calls. */
uint64_t smcd_sock_netns(int fd);
/* The same namespace's cookie (SO_NETNS_COOKIE, Linux 5.14): one system call, no
 * descriptor made; 0 if the kernel has none. */
uint64_t smcd_sock_netns_cookie(int fd);
/* The network namespace of process @pid (/proc/PID/ns/net), as smcd_sock_netns();
 * 0 if unknown. */
uint64_t smcd_pid_netns(pid_t pid);

/* At most SMCD_NS_V4_MAX IPv4 interface addresses (network order), of the network
 * namespace a socket belongs to: smcd_sock_ns_v4() fills one from socket @fd
 * (borrowed) with SIOCGIFCONF, which the kernel answers in the socket's namespace,
 * so smcd learns another namespace's addresses without entering it. IPv6 has no
 * such call: IPv6 interface addresses of other namespaces stay unknown. */
#define SMCD_NS_V4_MAX 16
typedef struct NsV4 {
        uint8_t n;
        uint8_t a[SMCD_NS_V4_MAX][4];
} NsV4;
/* Returns the count (also in @out->n; 0 when the call failed: nothing known). */
unsigned smcd_sock_ns_v4(int fd, NsV4 *out);
/* Whether @v4 (network order) is one of @s's addresses. */
bool smcd_ns_v4_has(const NsV4 *s, const uint8_t v4[4]);
