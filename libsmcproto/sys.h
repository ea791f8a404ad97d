/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * Raw system calls for everything in libsmcproto (and the codec shared with smcd).
 * Under smcrun, the preload library defines socket(), close(), read(), ... itself;
 * code that implements those must never call the libc symbols, or it would call
 * back into the shim. These wrappers enter the kernel directly (syscall(2)); they
 * return like the libc calls: -1 with errno set.
 */

#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static inline ssize_t sys_read(int fd, void *b, size_t n) { return syscall(SYS_read, fd, b, n); }
static inline ssize_t sys_write(int fd, const void *b, size_t n) { return syscall(SYS_write, fd, b, n); }
static inline ssize_t sys_readv(int fd, const struct iovec *v, int n) { return syscall(SYS_readv, fd, v, n); }
static inline ssize_t sys_pread(int fd, void *b, size_t n, int64_t off) { return syscall(SYS_pread64, fd, b, n, off); }
/* preadv(2): the offset goes to the kernel as two longs (low, high), as glibc passes it */
static inline ssize_t sys_preadv(int fd, const struct iovec *v, int n, int64_t off) {
        return syscall(SYS_preadv, fd, v, n, (unsigned long) off,
                       (unsigned long) (sizeof(long) >= 8 ? 0 : (uint64_t) off >> 32));
}
static inline int64_t sys_lseek(int fd, int64_t off, int whence) { return syscall(SYS_lseek, fd, off, whence); }
static inline ssize_t sys_sendfile(int out, int in, int64_t *off, size_t n) { return syscall(SYS_sendfile, out, in, off, n); }
static inline ssize_t sys_writev(int fd, const struct iovec *v, int n) { return syscall(SYS_writev, fd, v, n); }
static inline int sys_close(int fd) { return (int) syscall(SYS_close, fd); }
static inline int sys_socket(int d, int t, int p) { return (int) syscall(SYS_socket, d, t, p); }
static inline int sys_socketpair(int d, int t, int p, int sv[2]) { return (int) syscall(SYS_socketpair, d, t, p, sv); }
static inline int sys_bind(int fd, const struct sockaddr *a, socklen_t l) { return (int) syscall(SYS_bind, fd, a, l); }
static inline int sys_listen(int fd, int b) { return (int) syscall(SYS_listen, fd, b); }
static inline int sys_accept4(int fd, struct sockaddr *a, socklen_t *l, int f) { return (int) syscall(SYS_accept4, fd, a, l, f); }
static inline int sys_connect(int fd, const struct sockaddr *a, socklen_t l) { return (int) syscall(SYS_connect, fd, a, l); }
static inline ssize_t sys_sendmsg(int fd, const struct msghdr *m, int f) { return syscall(SYS_sendmsg, fd, m, f); }
static inline ssize_t sys_recvmsg(int fd, struct msghdr *m, int f) { return syscall(SYS_recvmsg, fd, m, f); }
static inline ssize_t sys_sendto(int fd, const void *b, size_t n, int f, const struct sockaddr *a, socklen_t l) {
        return syscall(SYS_sendto, fd, b, n, f, a, l);
}
static inline ssize_t sys_recvfrom(int fd, void *b, size_t n, int f, struct sockaddr *a, socklen_t *l) {
        return syscall(SYS_recvfrom, fd, b, n, f, a, l);
}
static inline int sys_shutdown(int fd, int how) { return (int) syscall(SYS_shutdown, fd, how); }
static inline int sys_getsockopt(int fd, int lv, int nm, void *v, socklen_t *l) { return (int) syscall(SYS_getsockopt, fd, lv, nm, v, l); }
static inline int sys_setsockopt(int fd, int lv, int nm, const void *v, socklen_t l) { return (int) syscall(SYS_setsockopt, fd, lv, nm, v, l); }
static inline int sys_getsockname(int fd, struct sockaddr *a, socklen_t *l) { return (int) syscall(SYS_getsockname, fd, a, l); }
static inline int sys_getpeername(int fd, struct sockaddr *a, socklen_t *l) { return (int) syscall(SYS_getpeername, fd, a, l); }
static inline int sys_fcntl(int fd, int cmd, long arg) { return (int) syscall(SYS_fcntl, fd, cmd, arg); }
static inline int sys_ioctl(int fd, unsigned long req, void *arg) { return (int) syscall(SYS_ioctl, fd, req, arg); }
static inline int sys_dup3(int o, int n, int f) { return (int) syscall(SYS_dup3, o, n, f); }
static inline int sys_ppoll(struct pollfd *p, nfds_t n, const struct timespec *t, const sigset_t *s) {
        return (int) syscall(SYS_ppoll, p, n, t, s, s ? _NSIG / 8 : 0);
}
/* poll(2) with a timeout in ms (< 0: infinite) */
static inline int sys_poll(struct pollfd *p, nfds_t n, int timeout_ms) {
        struct timespec ts = { .tv_sec = timeout_ms / 1000, .tv_nsec = (long) (timeout_ms % 1000) * 1000000L };
        return sys_ppoll(p, n, timeout_ms < 0 ? NULL : &ts, NULL);
}
static inline int sys_epoll_create1(int f) { return (int) syscall(SYS_epoll_create1, f); }
static inline int sys_epoll_ctl(int ep, int op, int fd, struct epoll_event *e) { return (int) syscall(SYS_epoll_ctl, ep, op, fd, e); }
static inline int sys_epoll_wait(int ep, struct epoll_event *e, int n, int t) { return (int) syscall(SYS_epoll_pwait, ep, e, n, t, NULL, 0); }
