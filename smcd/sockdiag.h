/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * TCP sockets as the kernel sees them, through sock_diag (NETLINK_SOCK_DIAG,
 * SOCK_DIAG_BY_FAMILY with struct inet_diag_req_v2): one socket by its exact 4-tuple
 * (and cookie), or a dump of all TCP sockets of a family in given states. For the
 * TCP fallback connections smcd lists (fallback.h). And whether a unix socket is
 * still open (unix_diag, struct unix_diag_req): the X ends of SMC-D doorbell pairs
 * (conn.c).
 *
 * A plain netlink socket, not libnl-idiag: that library only sends the old
 * TCPDIAG_GETSOCK dump of a whole family (no lookup of one socket by its 4-tuple, no
 * socket cookie), and its struct tcp_info is glibc's, which has no tcpi_bytes_acked /
 * tcpi_bytes_received. Requests are synchronous (the kernel answers from within
 * send / recv; every wait is bounded by SOCKDIAG_TIMEOUT_MS); only messages from the
 * kernel with the request's sequence number are read. No logging.
 */

#include <stdbool.h>
#include <stdint.h>

#include "ctl-proto.h"

#define SOCKDIAG_TIMEOUT_MS 1000

typedef struct SockDiag SockDiag;

/* The kernel's TCP states (include/net/tcp_states.h; not in the uapi headers). */
enum {
        SOCKDIAG_TCP_ESTABLISHED = 1,
        SOCKDIAG_TCP_SYN_SENT,
        SOCKDIAG_TCP_SYN_RECV,
        SOCKDIAG_TCP_FIN_WAIT1,
        SOCKDIAG_TCP_FIN_WAIT2,
        SOCKDIAG_TCP_TIME_WAIT,
        SOCKDIAG_TCP_CLOSE,
        SOCKDIAG_TCP_CLOSE_WAIT,
        SOCKDIAG_TCP_LAST_ACK,
        SOCKDIAG_TCP_LISTEN,
        SOCKDIAG_TCP_CLOSING,
        SOCKDIAG_TCP_NEW_SYN_RECV,
        _SOCKDIAG_TCP_MAX,
};

/* One TCP socket. */
typedef struct SockDiagInfo {
        uint16_t family;              /* AF_INET or AF_INET6 */
        uint8_t state;                /* SOCKDIAG_TCP_* */
        uint32_t uid;                 /* the socket's owner (sk_uid) */
        uint32_t inode;               /* 0: no process holds it any more (orphaned) */
        uint64_t cookie;              /* the kernel's socket cookie, unique per boot */
        struct smc_ctl_addr local, peer;
        bool have_mem;                /* INET_DIAG_SKMEMINFO was asked for and came */
        uint32_t sndbuf, rcvbuf;      /* sk_sndbuf, sk_rcvbuf (bytes) */
        bool have_bytes;              /* INET_DIAG_INFO with the byte counters came */
        uint64_t bytes_acked;         /* tcpi_bytes_acked: sequence space the peer
                                       * acknowledged, an active open's SYN and an
                                       * acknowledged FIN included */
        uint64_t bytes_received;      /* tcpi_bytes_received: a received FIN included */
} SockDiagInfo;

/* Open the netlink socket and check that the kernel answers for TCP. Returns 0, or
 * -EPROTONOSUPPORT (no TCP sock_diag: tcp_diag not built or not loadable), -errno. */
int sockdiag_open(SockDiag **ret);

/* As sockdiag_open(), in the network namespace of the socket @sock_fd (borrowed; its
 * SIOCGSKNS): the socket is created by a short-lived thread that joins that namespace
 * (setns(2), CAP_SYS_ADMIN), so the caller's threads stay where they are. Dumps then
 * show that namespace's sockets. Returns 0, or sockdiag_open()'s errors, the errno of
 * ioctl(SIOCGSKNS) / setns(2) / pthread_create(3). */
int sockdiag_open_netns(int sock_fd, SockDiag **ret);

/* Close it. NULL is ok. Returns NULL. */
SockDiag *sockdiag_free(SockDiag *d);

/* The TCP socket with local address @local and peer @peer (one family; the kernel
 * finds an IPv6 socket with v4-mapped addresses too) and, if @cookie is not 0, that
 * cookie. @ext: also the buffer sizes and byte counters. Returns 0 with *ret filled,
 * -ENOENT if there is no such socket (or only one with another cookie), -ETIMEDOUT,
 * -EINVAL (bad address) or another negative errno. */
int sockdiag_lookup(SockDiag *d, const struct smc_ctl_addr *local, const struct smc_ctl_addr *peer, uint64_t cookie,
                    bool ext, SockDiagInfo *ret);

/* Call @cb for every TCP socket of @family (AF_INET or AF_INET6) whose state is in
 * the bit mask @states (1 << SOCKDIAG_TCP_ESTABLISHED | ...); @ext as above. A negative return
 * of @cb stops the dump and is returned. Returns 0 when the dump completed, -EAGAIN if
 * the kernel reports it inconsistent (the socket tables changed during it: the caller
 * must not conclude that a socket is absent), -ETIMEDOUT, -errno. */
int sockdiag_dump(SockDiag *d, int family, uint32_t states, bool ext, int (*cb)(const SockDiagInfo *i, void *userdata),
                  void *userdata);

/* Unix sockets (unix_diag): the same netlink socket type, opened apart (a kernel may
 * have one handler and not the other). Open one and check that the kernel finds a
 * unix socket by its inode number, and no longer once it is closed. Returns 0, or
 * -EPROTONOSUPPORT (no unix_diag), -errno. */
int sockdiag_unix_open(SockDiag **ret);

/* Is the unix socket with inode number @ino (st_ino of its descriptor) still open in
 * some process? A socket is found from its creation until its last descriptor is
 * closed (unix_release_sock() unhashes it before it wakes its peer), also while it
 * is in flight in an SCM_RIGHTS message. Returns 1 (open), 0 (gone), -EINVAL (@ino 0
 * or wider than the kernel's 32-bit request field), -ETIMEDOUT or another -errno. */
int sockdiag_unix_exists(SockDiag *d, uint64_t ino);

/* The inode number of the peer of the unix socket with inode number @ino
 * (UDIAG_SHOW_PEER, UNIX_DIAG_PEER: a look-up that sends nothing to either socket).
 * Returns 0 with *@ret_peer the peer's inode, or 0 if the socket has no peer (not
 * connected, or its peer is closed); -ENOENT (no such socket), -EINVAL (@ino 0 or
 * wider than 32 bits), -EBADMSG, -ETIMEDOUT or another -errno. */
int sockdiag_unix_peer(SockDiag *d, uint64_t ino, uint64_t *ret_peer);

/* "ESTABLISHED", "SYN_SENT", ... (the kernel's and netstat's names of a TCP state), or
 * "UNKNOWN". */
const char *sockdiag_state_name(uint8_t state);
