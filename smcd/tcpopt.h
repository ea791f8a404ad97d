/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * The SMC capability signal on TCP (RFC 7609; Linux net/smc): the experimental option
 * kind 254, length 6, ExID 0xE2D4C3D9 in SYN and SYN-ACK. A client offers SMC by
 * putting it into its SYN; a server agrees by echoing it in the SYN-ACK, only if the
 * SYN had it. Only when both happened may CLC bytes flow on the connection; otherwise
 * both sides use plain TCP (Linux's reason PEERNOSMC).
 *
 * smcd cannot write TCP options itself, so a TcpOpt loads a BPF sock_ops program
 * (smcd/bpf/smc-tcpopt.bpf.c, compiled by clang at build time and embedded in smcd)
 * and attaches it to a cgroup v2 directory. The program acts only on the sockets this
 * TcpOpt marked:
 *   - a marked socket that connects sends the option in its SYN (and SYN
 *     retransmissions) and records whether the SYN-ACK carried it;
 *   - a marked listener echoes it in the SYN-ACK to each SYN that carried it, unless
 *     the SYN-ACK is a syncookie one (nothing of the request survives it, so it never
 *     advertises then); each accepted socket records whether its SYN-ACK had the echo.
 * tcpopt_peer_has() then answers, per TCP connection, whether SMC may be spoken.
 *
 * On the wire the option is the 8 bytes FE 06 E2 D4 C3 D9 01 01 at the end of the
 * option list: BPF can only append options after the kernel's own and the kernel pads
 * the reserved space with NOPs after them (Linux's own SMC code emits 01 01 FE 06 E2 D4
 * C3 D9). Both forms are the same option list to every TCP parser (Linux included).
 *
 * Scope and limits:
 *   - Only sockets created by processes in the cgroup (or its descendants) are seen;
 *     attach to the cgroup2 root (tcpopt_default_cgroup()) to see all. Accepted sockets
 *     belong to their listener's cgroup.
 *   - Linux >= 5.13 (BPF TCP header options 5.10, bpf_for_each_map_elem 5.13), with
 *     BPF, cgroup BPF and BPF sk storage;
 *     loading needs root or CAP_BPF + CAP_NET_ADMIN.
 *   - The attachment is a BPF link (multi-attach semantics, as BPF_F_ALLOW_MULTI):
 *     other programs and other smcd instances on the same or parent cgroups keep
 *     running; each TcpOpt has its own maps and acts only on the sockets it marked.
 *     The link goes away with the TcpOpt or with the process.
 *   - A listener gets the header-option callbacks when it starts listening (every
 *     listener in the cgroup does, while a TcpOpt is attached, so that it can be
 *     marked later). A socket that was already listening before any TcpOpt was
 *     attached cannot be marked (-EBUSY): the kernel offers no way to enable the
 *     callbacks afterwards (Linux 6.1). The callbacks stay on when the TcpOpt goes:
 *     a TcpOpt loaded with the previous one's smc_flagged map (tcpopt_new()'s
 *     @flagged_fd) can mark the listeners the previous one saw start.
 *   - SYN-ACK space: the echo needs 8 bytes of the 40; it is left out (and the
 *     connection is plain TCP on both sides) when TCP-MD5/AO and the usual options
 *     leave less. Likewise the SYN.
 *   - The SYN-ACK side finds the listener by its network namespace (the namespace's
 *     cookie; Linux >= 5.15, before that namespace 0 for all), bound address and port:
 *     listeners of different namespaces on the same address and port (containers, all
 *     on 0.0.0.0:80) are told apart, and a plain listener never echoes because another
 *     namespace has a marked one on its address and port.
 *   - Listeners that may share their namespace, address and port with others (an
 *     SO_REUSEPORT group, or listeners bound to different devices, SO_BINDTODEVICE):
 *     the SYN-ACK side cannot tell the members apart, and a plain member would echo
 *     for a marked one (its client would then send CLC to a plain server). Such a
 *     listener is marked, but its group echoes only once every listener that the
 *     kernel shows (sock_diag, in the listener's namespace) on an overlapping address
 *     and port is marked by this TcpOpt: the mark that completes the group turns the
 *     echo on (checked before and after), in whatever order the members listened and
 *     were marked (e.g. again after an smcd restart). A listener that starts later on
 *     an overlapping address turns it off (the group is plain TCP from then on, until
 *     a member is marked again); when the member the echo was turned on for stops
 *     listening, it passes to another marked member. Without sock_diag (tcp_diag), or for a listener in
 *     another network namespace without the right to enter it (setns(2):
 *     CAP_SYS_ADMIN), such listeners are not marked.
 *
 * All functions return negative errno on failure; nothing here logs or is thread-safe
 * with respect to the same TcpOpt (smcd calls it from its event loop). Set
 * SMCD_TCPOPT_DEBUG=1 in the environment to get libbpf's messages (verifier log on a
 * failed load) on stderr.
 */

#include <errno.h>
#include <stddef.h>

#ifndef SMCD_HAVE_TCPOPT
#define SMCD_HAVE_TCPOPT 0
#endif

typedef struct TcpOpt TcpOpt;

#if SMCD_HAVE_TCPOPT

/* Load the program and attach it to the cgroup v2 directory @cgroup_path (e.g.
 * tcpopt_default_cgroup()). @flagged_fd (borrowed; -1: none) is an earlier
 * instance's smc_flagged map (tcpopt_flagged_fd(), kept across a restart, e.g. in
 * systemd's file descriptor store): used if its layout matches, so that sockets that
 * started listening under that instance can be marked (a map of another layout is
 * left alone: tcpopt_flagged_fd() says so). On success *@ret owns the TcpOpt (free
 * with tcpopt_free()). Errors: -EINVAL (NULL argument, or @cgroup_path is not a cgroup v2
 * directory), -ENOENT / -ENOTDIR / -EACCES (opening it), -ENOTSUP (the kernel lacks
 * BPF sock_ops header options or sk storage, or BPF at all), -EPERM (not privileged),
 * -ENOMEM, other -errno from loading or attaching. */
int tcpopt_new(const char *cgroup_path, int flagged_fd, TcpOpt **ret);

/* The descriptor of the smc_flagged map (owned by @t: dup it to keep it), for the next
 * instance's tcpopt_new(). *@ret_reused (may be NULL): 1 if it is tcpopt_new()'s
 * @flagged_fd, -1 if that one was refused (another layout), 0 if none was given.
 * -EINVAL for NULL @t. */
int tcpopt_flagged_fd(const TcpOpt *t, int *ret_reused);

/* Detach and unload; the marks of this TcpOpt are gone with its maps (marked sockets
 * then behave as unmarked; connections in the middle of a handshake may have sent the
 * option already). NULL is fine. Returns NULL. */
TcpOpt *tcpopt_free(TcpOpt *t);

/* Mark the TCP socket @fd (borrowed; any descriptor of the socket, e.g. one received
 * over SCM_RIGHTS) for SMC:
 *   - a socket that has not connected yet (fresh or bound): call it before connect();
 *     its SYN then carries the option;
 *   - a listener (before or after listen()): its SYN-ACKs echo the option to SYNs that
 *     carried it, for the connections whose SYN arrives after this call.
 * Idempotent. Returns 0, or 1 for a listener with SO_REUSEPORT or SO_BINDTODEVICE
 * that is marked but does not echo yet: another listener on an overlapping address
 * and port is not marked (see above; the mark of the last one turns the echo on).
 * Errors: -EBADF, -ENOTSOCK, -EPROTONOSUPPORT (not an IPv4/IPv6 TCP
 * socket), -EISCONN (connecting, connected or closing: too late for the SYN), -EBUSY
 * (listening since before any TcpOpt was attached: see above), -E2BIG (too many
 * marked listeners: 4096), -EINVAL (NULL @t); for SO_REUSEPORT / SO_BINDTODEVICE
 * listeners also sock_diag's errors (-EPROTONOSUPPORT: no tcp_diag; -EPERM: no
 * CAP_SYS_ADMIN to enter another namespace; -ETIMEDOUT). Nothing is marked then. */
int tcpopt_mark(TcpOpt *t, int fd);

/* Has TCP socket @fd (borrowed) a record of this TcpOpt: marked by it, or accepted
 * from a listener it had marked when the SYN came? An accepted socket without one
 * came before this TcpOpt marked its listener: tcpopt_peer_has() then says 0, but an
 * earlier smcd's program may have echoed the option (a restart). false for NULL @t. */
bool tcpopt_has_record(TcpOpt *t, int fd);

/* Undo tcpopt_mark(): no new SYN / SYN-ACK of @fd carries the option. Connections
 * whose SYN-ACK already carried the echo still report it (tcpopt_peer_has() tells the
 * truth of the wire). Not marked: 0. Errors as tcpopt_mark() (no -EISCONN/-EBUSY). */
int tcpopt_unmark(TcpOpt *t, int fd);

/* Did the handshake of the connected TCP socket @fd exchange the option both ways?
 * For a socket that connect()ed: its SYN carried it (marked before connect()) and
 * the SYN-ACK carried it. For an accepted socket: its listener was marked, the SYN
 * carried it and our SYN-ACK echoed it. Returns 1 (speak CLC), 0 (plain TCP; also for
 * a socket this TcpOpt never marked, or marked after its handshake), or -EAGAIN (the
 * handshake has not completed: a non-blocking connect() in progress), -ENOTCONN (a
 * marked socket that never connected, or whose connect failed), -EINVAL (a listener,
 * or NULL @t), -EBADF, -ENOTSOCK, -EPROTONOSUPPORT. */
int tcpopt_peer_has(TcpOpt *t, int fd);

/* The mount point of the cgroup v2 hierarchy, from /proc/self/mountinfo (on a hybrid
 * host /sys/fs/cgroup/unified, with systemd's unified layout /sys/fs/cgroup), or NULL
 * if none is mounted. Static storage, computed on first use. */
const char *tcpopt_default_cgroup(void);

#else /* !SMCD_HAVE_TCPOPT: built without libbpf / clang / bpftool */

static inline int tcpopt_new(const char *cgroup_path, int flagged_fd, TcpOpt **ret) {
        (void) cgroup_path;
        (void) flagged_fd;
        (void) ret;
        return -ENOTSUP;
}
static inline int tcpopt_flagged_fd(const TcpOpt *t, int *ret_reused) {
        (void) t;
        (void) ret_reused;
        return -ENOTSUP;
}
static inline TcpOpt *tcpopt_free(TcpOpt *t) {
        (void) t;
        return NULL;
}
static inline int tcpopt_mark(TcpOpt *t, int fd) {
        (void) t;
        (void) fd;
        return -ENOTSUP;
}
static inline int tcpopt_unmark(TcpOpt *t, int fd) {
        (void) t;
        (void) fd;
        return -ENOTSUP;
}
static inline int tcpopt_peer_has(TcpOpt *t, int fd) {
        (void) t;
        (void) fd;
        return -ENOTSUP;
}
static inline const char *tcpopt_default_cgroup(void) {
        return NULL;
}

#endif
