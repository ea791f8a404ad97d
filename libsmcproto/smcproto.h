/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * libsmcproto: TCP stream sockets over SMC-D (loopback ISM, set up by smcd), with
 * transparent fallback to plain TCP.
 *
 * Every function mirrors the POSIX/Linux call of the same name without the smc_
 * prefix: same arguments, same return value (-1 with errno set on failure), same
 * errno values as a TCP socket (ECONNREFUSED, ECONNRESET, EPIPE, EAGAIN, EINPROGRESS,
 * EISCONN, ENOTCONN, EADDRINUSE, EBADF, EINVAL ...). A descriptor that is not an
 * AF_INET/AF_INET6 SOCK_STREAM socket made by smc_socket() or smc_accept() is passed
 * to the plain system call.
 *
 * Every socket is a real file descriptor that poll(2), select(2) and epoll(7) report
 * correctly: while a connection is SMC-D it is one end of an AF_UNIX socketpair whose
 * readiness tracks the shared-memory ring; a TCP-fallback connection is the TCP
 * socket itself; a listener is an epoll descriptor watching both its TCP listening
 * socket and its SMC accept channel. Close such a socket only with smc_close().
 *
 * Threads: as for a TCP socket, one thread may send while another receives on the
 * same socket; concurrent senders (or receivers) are serialised.
 *
 * smcd is found at $SMCD_RUNTIME_DIR/smcd.sock (default /run/smcd/smcd.sock).
 * Without it, or when the destination has no SMC listener on this host, connections
 * use TCP and record the reason (SMC_CLC_DECL_*, see smc-clc.h).
 */

#include <poll.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* getsockopt(fd, SOL_SMC, ...) options (SOL_SMC as in Linux). */
#ifndef SOL_SMC
#define SOL_SMC 286
#endif
#define SMC_PROTO_MODE 0x5301            /* int: SMC_PROTO_MODE_* */
#define SMC_PROTO_FALLBACK_REASON 0x5302 /* uint32_t: SMC_CLC_DECL_* or 0 */
/* int, an SMC-D connection only (else ENOTCONN): the settings it runs with, from
 * smcd's tunables busy_poll / autocork_size or the environment (libsmcproto(3)) */
#define SMC_PROTO_BUSY_POLL 0x5303       /* int: microseconds a blocking call spins */
#define SMC_PROTO_AUTOCORK 0x5304        /* int: bytes at which a corked batch goes out */
#define SMC_PROTO_MODE_NONE 0 /* not connected yet, or a listener */
#define SMC_PROTO_MODE_SMCD 1 /* SMC-D over loopback ISM */
#define SMC_PROTO_MODE_TCP 2  /* TCP fallback */
#define SMC_PROTO_MODE_SMCR 3 /* SMC-R over RoCE (a peer on another host) */

int smc_socket(int domain, int type, int protocol);
int smc_bind(int fd, const struct sockaddr *addr, socklen_t len);
int smc_listen(int fd, int backlog);
int smc_accept(int fd, struct sockaddr *addr, socklen_t *len);
int smc_accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags);
int smc_connect(int fd, const struct sockaddr *addr, socklen_t len);

/* Data: flags MSG_DONTWAIT, MSG_PEEK, MSG_WAITALL (recv), MSG_NOSIGNAL, MSG_MORE
 * (send) are honoured; others give EOPNOTSUPP on an SMC-D connection. Without
 * MSG_NOSIGNAL a send on a connection the peer closed raises SIGPIPE. */
ssize_t smc_send(int fd, const void *buf, size_t len, int flags);
ssize_t smc_recv(int fd, void *buf, size_t len, int flags);
ssize_t smc_sendto(int fd, const void *buf, size_t len, int flags, const struct sockaddr *to, socklen_t tolen);
ssize_t smc_recvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *from, socklen_t *fromlen);
ssize_t smc_sendmsg(int fd, const struct msghdr *msg, int flags);
ssize_t smc_recvmsg(int fd, struct msghdr *msg, int flags);
ssize_t smc_read(int fd, void *buf, size_t len);
ssize_t smc_write(int fd, const void *buf, size_t len);
ssize_t smc_readv(int fd, const struct iovec *iov, int iovcnt);
ssize_t smc_writev(int fd, const struct iovec *iov, int iovcnt);
/* preadv2(2) / pwritev2(2): with @offset -1 (the file position) and flags a socket
 * ignores (RWF_HIPRI, RWF_DSYNC, RWF_SYNC, RWF_APPEND; RWF_NOWAIT: nonblocking, as
 * MSG_DONTWAIT) they are readv / writev on the connection, as on a TCP socket; any
 * other @offset or flag gets the kernel's answer for a socket (-1 with ESPIPE,
 * EINVAL or EOPNOTSUPP), no data moved. */
ssize_t smc_preadv2(int fd, const struct iovec *iov, int iovcnt, int64_t offset, int flags);
ssize_t smc_pwritev2(int fd, const struct iovec *iov, int iovcnt, int64_t offset, int flags);

/* sendfile(2) with @out_fd an SMC socket: up to @count bytes of @in_fd (at most
 * 0x7ffff000, as the kernel), from *@offset (then advanced by what was sent; in_fd's
 * position untouched) or, with @offset NULL, from in_fd's file position (advanced
 * likewise), read straight into the peer's receive buffer (one copy) and
 * sent as write() would send them: TCP_CORK holds them, SO_SNDTIMEO bounds a blocking
 * call, a nonblocking socket may take fewer (the file position / *@offset count only
 * those), and a file that ends first ends the call. Returns the bytes sent (0 at end
 * of file), or -1 with errno: EAGAIN, EPIPE (and SIGPIPE), ECONNRESET, EINTR, EINVAL
 * (negative *@offset, or an @in_fd that cannot seek, e.g. a pipe, as the kernel
 * answers for a TCP socket), ESPIPE (the same with @offset), or in_fd's read error
 * (only when nothing was sent). Counted in smcd's stats (sendfile_calls,
 * sendfile_bytes). Any other @out_fd: the system call. (Since 0.2.) */
ssize_t smc_sendfile(int out_fd, int in_fd, int64_t *offset, size_t count);

int smc_shutdown(int fd, int how);
int smc_close(int fd);

/* Options: SO_SNDBUF / SO_RCVBUF (bytes; before connect they pick the DMB size
 * class, rounded up, 16 KiB .. 1 MiB; read on a connection: twice the ring, as Linux
 * doubles), SO_ERROR, SO_TYPE, SO_DOMAIN, TCP_NODELAY, TCP_CORK, TCP_INFO and
 * TCP_MAXSEG (answered as for a TCP connection over lo: libsmcproto(3)), and SOL_SMC
 * SMC_PROTO_MODE / SMC_PROTO_FALLBACK_REASON / SMC_PROTO_BUSY_POLL /
 * SMC_PROTO_AUTOCORK (read-only). Other options go to the TCP socket underneath (an
 * accepted connection's has its listener's options). */
int smc_setsockopt(int fd, int level, int name, const void *val, socklen_t len);
int smc_getsockopt(int fd, int level, int name, void *val, socklen_t *len);
int smc_getsockname(int fd, struct sockaddr *addr, socklen_t *len);
int smc_getpeername(int fd, struct sockaddr *addr, socklen_t *len);

/* poll(2) on any mix of descriptors; for SMC-D sockets it also checks the rings, so
 * it never reports a socket ready that has nothing to read. timeout in ms. */
int smc_poll(struct pollfd *fds, nfds_t nfds, int timeout);

/* fcntl(2) F_GETFL / F_SETFL (O_NONBLOCK) and everything else, passed through. */
int smc_fcntl(int fd, int cmd, ... /* arg */);

/* ioctl(2): FIONBIO (int *: nonblocking on/off), FIONREAD / SIOCINQ (int *: bytes
 * ready to read), SIOCOUTQ (int *: bytes sent and not yet read by the peer); EINVAL
 * for the last two on a listener, as TCP. Other requests go to the TCP socket. Use
 * this (or smc_fcntl) rather than ioctl(2) to change O_NONBLOCK: the library keeps
 * the socket's blocking mode itself. */
int smc_ioctl(int fd, unsigned long req, void *arg);

#ifdef __cplusplus
}
#endif
