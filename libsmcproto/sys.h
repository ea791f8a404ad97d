/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * Raw system calls for everything in libsmcproto (and the codec shared with smcd).
 * Under smcrun, the preload library defines socket(), close(), read(), ... itself;
 * code that implements those must never call the libc symbols, or it would call
 * back into the shim. These wrappers enter the kernel directly; they return like the
 * libc calls: -1 with errno set.
 *
 * Not even through libc's syscall(): the shim defines syscall() too (programs such as
 * node, whose libuv closes descriptors with smc_syscall(SYS_close, fd), must not bypass
 * it), so the library has its own entry, smc_syscall(), with syscall()'s contract: up
 * to six arguments (each passed as a long), -1 and errno on failure. On architectures
 * without one here it is libc's syscall(), and the shim does not define syscall().
 */

#include <poll.h>
#include <stdbool.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include <errno.h>
#include <fcntl.h>

#if defined(__x86_64__) || defined(__aarch64__)
#define SMC_RAW_SYSCALL 1
static inline long smc_syscall6(long n, long a1, long a2, long a3, long a4, long a5, long a6) {
        long r;
#if defined(__x86_64__)
        register long r10 __asm__("r10") = a4;
        register long r8 __asm__("r8") = a5;
        register long r9 __asm__("r9") = a6;

        __asm__ volatile("syscall"
                         : "=a"(r)
                         : "a"(n), "D"(a1), "S"(a2), "d"(a3), "r"(r10), "r"(r8), "r"(r9)
                         : "rcx", "r11", "memory");
#else
        register long x8 __asm__("x8") = n;
        register long x0 __asm__("x0") = a1;
        register long x1 __asm__("x1") = a2;
        register long x2 __asm__("x2") = a3;
        register long x3 __asm__("x3") = a4;
        register long x4 __asm__("x4") = a5;
        register long x5 __asm__("x5") = a6;

        __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5) : "memory", "cc");
        r = x0;
#endif
        if (r < 0 && r > -4096) {
                errno = (int) -r;
                return -1;
        }
        return r;
}
#else
static inline long smc_syscall6(long n, long a1, long a2, long a3, long a4, long a5, long a6) {
        return syscall(n, a1, a2, a3, a4, a5, a6);
}
#endif
/* smc_syscall(SYS_x, args...): up to six arguments, the missing ones passed as 0 */
#define SMC_SYSCALL_(n, a1, a2, a3, a4, a5, a6, ...) \
        smc_syscall6((long) (n), (long) (a1), (long) (a2), (long) (a3), (long) (a4), (long) (a5), (long) (a6))
#define smc_syscall(...) SMC_SYSCALL_(__VA_ARGS__, 0, 0, 0, 0, 0, 0, 0)

static inline ssize_t sys_read(int fd, void *b, size_t n) { return smc_syscall(SYS_read, fd, b, n); }
static inline ssize_t sys_write(int fd, const void *b, size_t n) { return smc_syscall(SYS_write, fd, b, n); }
static inline ssize_t sys_readv(int fd, const struct iovec *v, int n) { return smc_syscall(SYS_readv, fd, v, n); }
static inline ssize_t sys_pread(int fd, void *b, size_t n, int64_t off) { return smc_syscall(SYS_pread64, fd, b, n, off); }
/* preadv(2): the offset goes to the kernel as two longs (low, high), as glibc passes it */
static inline ssize_t sys_preadv(int fd, const struct iovec *v, int n, int64_t off) {
        return smc_syscall(SYS_preadv, fd, v, n, (unsigned long) off,
                       (unsigned long) (sizeof(long) >= 8 ? 0 : (uint64_t) off >> 32));
}
/* preadv2(2) / pwritev2(2): the same, and the RWF_* flags */
static inline ssize_t sys_preadv2(int fd, const struct iovec *v, int n, int64_t off, int flags) {
        return smc_syscall(SYS_preadv2, fd, v, n, (unsigned long) off,
                           (unsigned long) (sizeof(long) >= 8 ? 0 : (uint64_t) off >> 32), flags);
}
static inline ssize_t sys_pwritev2(int fd, const struct iovec *v, int n, int64_t off, int flags) {
        return smc_syscall(SYS_pwritev2, fd, v, n, (unsigned long) off,
                           (unsigned long) (sizeof(long) >= 8 ? 0 : (uint64_t) off >> 32), flags);
}
static inline int64_t sys_lseek(int fd, int64_t off, int whence) { return smc_syscall(SYS_lseek, fd, off, whence); }
static inline int sys_fstat(int fd, struct stat *st) { return (int) smc_syscall(SYS_fstat, fd, st); }
static inline ssize_t sys_sendfile(int out, int in, int64_t *off, size_t n) { return smc_syscall(SYS_sendfile, out, in, off, n); }
static inline ssize_t sys_writev(int fd, const struct iovec *v, int n) { return smc_syscall(SYS_writev, fd, v, n); }
static inline int sys_close(int fd) { return (int) smc_syscall(SYS_close, fd); }
static inline int sys_socket(int d, int t, int p) { return (int) smc_syscall(SYS_socket, d, t, p); }
static inline int sys_socketpair(int d, int t, int p, int sv[2]) { return (int) smc_syscall(SYS_socketpair, d, t, p, sv); }
static inline int sys_bind(int fd, const struct sockaddr *a, socklen_t l) { return (int) smc_syscall(SYS_bind, fd, a, l); }
static inline int sys_listen(int fd, int b) { return (int) smc_syscall(SYS_listen, fd, b); }
static inline int sys_accept4(int fd, struct sockaddr *a, socklen_t *l, int f) { return (int) smc_syscall(SYS_accept4, fd, a, l, f); }
static inline int sys_connect(int fd, const struct sockaddr *a, socklen_t l) { return (int) smc_syscall(SYS_connect, fd, a, l); }
static inline ssize_t sys_sendmsg(int fd, const struct msghdr *m, int f) { return smc_syscall(SYS_sendmsg, fd, m, f); }
static inline ssize_t sys_recvmsg(int fd, struct msghdr *m, int f) { return smc_syscall(SYS_recvmsg, fd, m, f); }
static inline ssize_t sys_sendto(int fd, const void *b, size_t n, int f, const struct sockaddr *a, socklen_t l) {
        return smc_syscall(SYS_sendto, fd, b, n, f, a, l);
}
static inline ssize_t sys_recvfrom(int fd, void *b, size_t n, int f, struct sockaddr *a, socklen_t *l) {
        return smc_syscall(SYS_recvfrom, fd, b, n, f, a, l);
}
static inline int sys_shutdown(int fd, int how) { return (int) smc_syscall(SYS_shutdown, fd, how); }
static inline int sys_getsockopt(int fd, int lv, int nm, void *v, socklen_t *l) { return (int) smc_syscall(SYS_getsockopt, fd, lv, nm, v, l); }
static inline int sys_setsockopt(int fd, int lv, int nm, const void *v, socklen_t l) { return (int) smc_syscall(SYS_setsockopt, fd, lv, nm, v, l); }
static inline int sys_getsockname(int fd, struct sockaddr *a, socklen_t *l) { return (int) smc_syscall(SYS_getsockname, fd, a, l); }
static inline int sys_getpeername(int fd, struct sockaddr *a, socklen_t *l) { return (int) smc_syscall(SYS_getpeername, fd, a, l); }
static inline int sys_fcntl(int fd, int cmd, long arg) { return (int) smc_syscall(SYS_fcntl, fd, cmd, arg); }
static inline int sys_ioctl(int fd, unsigned long req, void *arg) { return (int) smc_syscall(SYS_ioctl, fd, req, arg); }
static inline int sys_dup3(int o, int n, int f) { return (int) smc_syscall(SYS_dup3, o, n, f); }
/* The library's own descriptors (a connection's Y, hidden TCP socket and option
 * socket, a listener's channels, the control connection, the memfds it maps, and the
 * temporaries of one call: probe and stub sockets, a splice's pipe, files it reads)
 * never keep the numbers 0..2: a program started with stdio closed takes open()'s 0 for
 * its stdin, or dup2()s /dev/null onto 0..2, which would close one of ours under us
 * (a daemon's usual start; the kernel gives the lowest free number). @fd moved to the lowest free
 * number >= 3, close-on-exec, if it is one of them; kept where it is if that fails
 * (EMFILE). Returns the descriptor; errno kept. */
static inline int sys_fd_off_stdio(int fd) {
        int n, e;

        if (fd < 0 || fd > 2)
                return fd;
        e = errno;
        n = sys_fcntl(fd, F_DUPFD_CLOEXEC, 3);
        if (n >= 0)
                (void) sys_close(fd);
        errno = e;
        return n >= 0 ? n : fd;
}
/* The same for each of the @n descriptors in @fds (replaced by their new numbers);
 * false if one could not be moved (no number above 2 free). */
static inline bool sys_fds_off_stdio(int *fds, int n) {
        bool ok = true;

        for (int i = 0; i < n; i++) {
                fds[i] = sys_fd_off_stdio(fds[i]);
                ok = ok && fds[i] > 2;
        }
        return ok;
}
static inline int sys_ppoll(struct pollfd *p, nfds_t n, const struct timespec *t, const sigset_t *s) {
        return (int) smc_syscall(SYS_ppoll, p, n, t, s, s ? _NSIG / 8 : 0);
}
/* poll(2) with a timeout in ms (< 0: infinite) */
static inline int sys_poll(struct pollfd *p, nfds_t n, int timeout_ms) {
        struct timespec ts = { .tv_sec = timeout_ms / 1000, .tv_nsec = (long) (timeout_ms % 1000) * 1000000L };
        return sys_ppoll(p, n, timeout_ms < 0 ? NULL : &ts, NULL);
}
static inline int sys_epoll_create1(int f) { return (int) smc_syscall(SYS_epoll_create1, f); }
static inline int sys_epoll_ctl(int ep, int op, int fd, struct epoll_event *e) { return (int) smc_syscall(SYS_epoll_ctl, ep, op, fd, e); }
static inline int sys_epoll_wait(int ep, struct epoll_event *e, int n, int t) { return (int) smc_syscall(SYS_epoll_pwait, ep, e, n, t, NULL, 0); }

/* A pointer the kernel would refuse with EFAULT, as far as can be told without a
 * system call: one into the first page (NULL and small offsets from it; nothing is
 * mapped there, vm.mmap_min_addr). The library checks the pointers it reads or writes
 * itself with this, so that a program's bad pointer gives the kernel's EFAULT, not a
 * crash in the library. */
static inline bool smc_uptr_bad(const void *p) {
        return (uintptr_t) p < 4096u;
}
