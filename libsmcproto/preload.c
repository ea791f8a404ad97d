/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libsmcrun.so: the LD_PRELOAD shim behind smcrun(1).
 *
 * It defines the libc socket and I/O entry points an unmodified program calls and maps
 * its AF_INET / AF_INET6 SOCK_STREAM sockets onto the libsmcproto client API (linked in
 * statically, so the application never sees smc_* symbols; see libsmcrun.map). Every
 * other descriptor goes to the next definition of the same name (libc), found once with
 * dlsym(RTLD_NEXT, ...). The cost for a descriptor that is not ours is one lookup in the
 * library's descriptor table (smc_fd_managed()) plus an indirect call.
 *
 * An SMC socket is a real descriptor whose kernel readiness is exact (an AF_UNIX
 * socketpair end for a connection, an epoll descriptor for a listener; see
 * smcproto.h), except for data that came while an epoll set of this process watched
 * the connection (socket.c "epoll watch": no doorbell byte). So epoll_create*,
 * epoll_ctl, epoll_wait, epoll_pwait and epoll_pwait2 are intercepted for that watch
 * (and epoll_ctl also to take EPOLLEXCLUSIVE off an SMC listener, see there); poll(),
 * ppoll(), select() and pselect() look at the rings of the connections (and of the
 * epoll sets) they wait for; poll() goes through smc_poll(), which also busy-polls
 * the rings before it sleeps, as select() and pselect() do with busy-polling on.
 *
 * dup2/dup3 onto the number of an SMC socket make the library forget that socket (as
 * close would, but the number now names the new file). A duplicate of an SMC socket
 * (dup, dup2, dup3, F_DUPFD, F_DUPFD_CLOEXEC) is an SMC socket too, shared as after a
 * fork (smc_fd_dup).
 *
 * exec: the exec family and posix_spawn are wrapped (at the end of this file) so that
 * SMC sockets that survive the exec are handed to the new image (smc_exec_prepare()).
 *
 * fork needs nothing here: the child has a copy of the library's state, and a socket
 * set up before the last fork is only let go of at close (socket.c sock_teardown).
 *
 * sendfile, splice, sendmmsg and recvmmsg are intercepted for SMC sockets.
 *
 * C stdio (fdopen, stdin/stdout/stderr on an SMC connection, dprintf): see "C stdio" at
 * the end of this file.
 *
 * Environment: SMCRUN_DISABLE=1 (any value but "" and "0") makes socket() always create
 * a plain socket, so everything passes through. SMCD_RUNTIME_DIR is read by the library
 * (where smcd is).
 *
 * The real functions are resolved lazily, each on first use, thread-safely (an atomic
 * pointer; two threads racing both store the same value). A call that comes before
 * resolution can succeed (e.g. from inside dlsym itself, or before libdl works) is
 * served by the raw system call (sys.h), so calls from constructors always work.
 * Nothing in libsmcproto calls the libc names (it uses sys.h), so there is no
 * recursion back into this file.
 */

/* fcntl must keep its own name: with _FILE_OFFSET_BITS=64 (meson's default) glibc's
 * header renames it to fcntl64, and this file defines both. No off_t is used here. */
#undef _FILE_OFFSET_BITS
#undef _TIME_BITS

#include <dlfcn.h>
#include <elf.h>
#include <stdio.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <sys/epoll.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <alloca.h>
#include <limits.h>
#include <pthread.h>
#include <spawn.h>
#include <unistd.h>

#include "ctl-client.h"
#include "debug.h"
#include "seccomp.h"
#include "smc-clc.h"
#include "smcproto.h"
#include "socket-internal.h"
#include "sys.h"

#define _public_ __attribute__((visibility("default")))
#define _likely_(x) __builtin_expect(!!(x), 1)
#define _unlikely_(x) __builtin_expect(!!(x), 0)

/* glibc's fortify failure handler (exported by libc.so.6) */
extern void __chk_fail(void) __attribute__((noreturn));

/* ---- resolution of the real functions ---------------------------------------------- */

/* Set while this thread is inside dlsym(), so a call dlsym makes itself (it should
 * make none of ours, but a malloc replacement might) takes the raw syscall path. */
static __thread bool resolving __attribute__((tls_model("initial-exec")));

static void *resolve_slow(_Atomic(void *) *slot, const char *name) {
        void *p;

        if (resolving)
                return NULL;
        resolving = true;
        p = dlsym(RTLD_NEXT, name);
        resolving = false;
        if (p)
                atomic_store_explicit(slot, p, memory_order_release);
        return p;
}

static inline void *resolve(_Atomic(void *) *slot, const char *name) {
        void *p = atomic_load_explicit(slot, memory_order_acquire);
        return _likely_(p) ? p : resolve_slow(slot, name);
}

/* REAL(name) yields the next definition of name (typed like ours), or NULL if it cannot
 * be resolved (yet): the caller then uses the raw syscall. */
#define DEFINE_REAL(name)                                                                   \
        static _Atomic(void *) real_##name##_slot;                                          \
        static inline __typeof__(name) *real_##name(void) {                                 \
                return (__typeof__(name) *) resolve(&real_##name##_slot, #name);            \
        }

/* Prototypes for glibc's fortified entry points (they are not in the public headers
 * unless _FORTIFY_SOURCE is set, and then under other names). */
ssize_t __read_chk(int fd, void *buf, size_t nbytes, size_t buflen);
ssize_t __recv_chk(int fd, void *buf, size_t len, size_t buflen, int flags);
ssize_t __recvfrom_chk(int fd, void *buf, size_t len, size_t buflen, int flags,
                       struct sockaddr *from, socklen_t *fromlen);
int __poll_chk(struct pollfd *fds, nfds_t nfds, int timeout, size_t fdslen);

DEFINE_REAL(socket)
DEFINE_REAL(bind)
DEFINE_REAL(listen)
DEFINE_REAL(accept)
DEFINE_REAL(accept4)
DEFINE_REAL(connect)
DEFINE_REAL(send)
DEFINE_REAL(recv)
DEFINE_REAL(sendto)
DEFINE_REAL(recvfrom)
DEFINE_REAL(sendmsg)
DEFINE_REAL(recvmsg)
DEFINE_REAL(read)
DEFINE_REAL(write)
DEFINE_REAL(readv)
DEFINE_REAL(writev)
DEFINE_REAL(shutdown)
DEFINE_REAL(close)
DEFINE_REAL(setsockopt)
DEFINE_REAL(getsockopt)
DEFINE_REAL(getsockname)
DEFINE_REAL(getpeername)
DEFINE_REAL(poll)
DEFINE_REAL(fcntl)
DEFINE_REAL(fcntl64)
DEFINE_REAL(ioctl)
DEFINE_REAL(dup)
DEFINE_REAL(dup2)
DEFINE_REAL(dup3)
DEFINE_REAL(__read_chk)
DEFINE_REAL(__recv_chk)
DEFINE_REAL(__recvfrom_chk)

/* ---- SMCRUN_DISABLE ----------------------------------------------------------------- */

/* 0: not read yet, 1: enabled, 2: disabled. Reading the environment twice is harmless. */
static atomic_int disabled_state;

static bool smcrun_disabled(void) {
        int s = atomic_load_explicit(&disabled_state, memory_order_relaxed);

        if (_unlikely_(s == 0)) {
                const char *e = getenv("SMCRUN_DISABLE");

                s = e && *e && strcmp(e, "0") != 0 ? 2 : 1;
                atomic_store_explicit(&disabled_state, s, memory_order_relaxed);
        }
        return s == 2;
}

static void exec_init_self_path(void);
static void stdio_check(int fd);
static void uring_init(void);

/* Resolve everything early (before main), so the hot paths never take the slow path.
 * Calls made before this constructor runs resolve lazily. */
__attribute__((constructor)) static void smcrun_init(void) {
        /* io_uring first: an image that uses it adopts no SMC socket */
        uring_init();
        /* SMC sockets an exec handed over (smc_exec_prepare() in the old image) */
        smc_exec_adopt_inherited();
        for (int fd = 0; fd <= 2; fd++)
                stdio_check(fd); /* inetd's pattern: the connection is stdin/stdout */
        exec_init_self_path();
        (void) smcrun_disabled();
        (void) real_socket();
        (void) real_bind();
        (void) real_listen();
        (void) real_accept();
        (void) real_accept4();
        (void) real_connect();
        (void) real_send();
        (void) real_recv();
        (void) real_sendto();
        (void) real_recvfrom();
        (void) real_sendmsg();
        (void) real_recvmsg();
        (void) real_read();
        (void) real_write();
        (void) real_readv();
        (void) real_writev();
        (void) real_shutdown();
        (void) real_close();
        (void) real_setsockopt();
        (void) real_getsockopt();
        (void) real_getsockname();
        (void) real_getpeername();
        (void) real_poll();
        (void) real_fcntl();
        (void) real_dup();
        (void) real_dup2();
        (void) real_dup3();
}

/* ---- helpers ------------------------------------------------------------------------- */

static inline bool managed(int fd) {
        return fd >= 0 && smc_fd_managed(fd);
}

/* MSG_NOSIGNAL means nothing on receive and TCP ignores it there; programs (sockperf)
 * pass it to recvfrom() anyway. Keep it away from the SMC receive path, which rejects
 * flags it does not know. */
static inline int recv_flags(int flags) {
        return flags & ~MSG_NOSIGNAL;
}

/* ---- io_uring -----------------------------------------------------------------------
 *
 * io_uring reads and writes descriptors in the kernel, past this library: on an SMC
 * connection it would move the socketpair's doorbell bytes, not the data. So a program
 * seen to use io_uring gets plain TCP for every connect and listen from then on
 * (smc_set_tcp_only(SMCD_DECL_IOURING), told to smcd as each fallback's reason), and
 * SMC sockets inherited across exec become reset TCP sockets. Seen: liburing loaded at
 * start (dl_iterate_phdr); a ring descriptor ("anon_inode:[io_uring]" in /proc/self/fd)
 * at every listen(), and at connect() at most every URING_SCAN_NS. liburing issues
 * its system calls itself, so io_uring_setup cannot be intercepted; a ring made after
 * a connection was set up is not seen for that connection (smcrun(1)).
 * SMCRUN_IO_URING=ignore: the program's io_uring never touches its sockets, keep SMC. */

#include <dirent.h>
#include <link.h>

#define URING_SCAN_NS 10000000000ll /* 10 s: a scan reads the link of every descriptor */

static bool uring_ignore;
static atomic_bool uring_seen;
static _Atomic int64_t uring_last_scan;

static void uring_flag(const char *why) {
        if (!atomic_exchange(&uring_seen, true)) {
                smc_set_tcp_only(SMCD_DECL_IOURING);
                smc_debug("smcrun: %s: new connections and listeners are TCP (SMCD_DECL_IOURING)", why);
        }
}

static int uring_lib_cb(struct dl_phdr_info *info, size_t size, void *data) {
        (void) size;
        (void) data;
        return info->dlpi_name && strstr(info->dlpi_name, "/liburing.so") ? 1 : 0;
}

/* Does this process hold an io_uring descriptor? */
static bool uring_fd_present(void) {
        int fd = sys_fd_off_stdio(
                (int) smc_syscall(SYS_openat, AT_FDCWD, "/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
        DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
        struct dirent *de;
        bool found = false;

        if (!d) {
                if (fd >= 0)
                        sys_close(fd);
                return false;
        }
        while (!found && (de = readdir(d))) {
                char link[64];
                ssize_t n;

                if (de->d_name[0] == '.')
                        continue;
                n = readlinkat(dirfd(d), de->d_name, link, sizeof(link) - 1);
                if (n <= 0)
                        continue;
                link[n] = 0;
                found = strcmp(link, "anon_inode:[io_uring]") == 0;
        }
        closedir(d);
        return found;
}

/* Before a listen (@always) or a connect (at most every URING_SCAN_NS). */
static void uring_check(bool always) {
        struct timespec ts;
        int64_t now, last;

        if (uring_ignore || atomic_load_explicit(&uring_seen, memory_order_relaxed))
                return;
        if (!always) {
                clock_gettime(CLOCK_MONOTONIC, &ts);
                now = (int64_t) ts.tv_sec * 1000000000ll + ts.tv_nsec;
                last = atomic_load_explicit(&uring_last_scan, memory_order_relaxed);
                if (last && now - last < URING_SCAN_NS)
                        return;
                atomic_store_explicit(&uring_last_scan, now, memory_order_relaxed);
        }
        if (uring_fd_present())
                uring_flag("the program has an io_uring");
}

static void uring_init(void) {
        const char *e = getenv("SMCRUN_IO_URING");

        uring_ignore = e && strcmp(e, "ignore") == 0;
        if (uring_ignore)
                return;
        if (dl_iterate_phdr(uring_lib_cb, NULL))
                uring_flag("liburing is loaded");
        else if (getenv(SMC_INHERIT_ENV))
                uring_check(true); /* a ring inherited across exec */
}

/* ---- sockets --------------------------------------------------------------------------- */

_public_ int socket(int domain, int type, int protocol) {
        __typeof__(socket) *f;

        if ((domain == AF_INET || domain == AF_INET6) && (type & 0xf) == SOCK_STREAM &&
            (protocol == 0 || protocol == IPPROTO_TCP) && !smcrun_disabled())
                return smc_socket(domain, type, protocol);

        f = real_socket();
        return f ? f(domain, type, protocol) : sys_socket(domain, type, protocol);
}

_public_ int bind(int fd, const struct sockaddr *addr, socklen_t len) {
        __typeof__(bind) *f;

        if (managed(fd))
                return smc_bind(fd, addr, len);
        f = real_bind();
        return f ? f(fd, addr, len) : sys_bind(fd, addr, len);
}

_public_ int listen(int fd, int backlog) {
        __typeof__(listen) *f;

        if (managed(fd)) {
                uring_check(true);
                return smc_listen(fd, backlog);
        }
        f = real_listen();
        return f ? f(fd, backlog) : sys_listen(fd, backlog);
}

_public_ int accept(int fd, struct sockaddr *addr, socklen_t *len) {
        __typeof__(accept) *f;

        if (managed(fd)) {
                int r = smc_accept(fd, addr, len);

                if (_unlikely_(r >= 0 && r <= 2))
                        stdio_check(r);
                return r;
        }
        f = real_accept();
        return f ? f(fd, addr, len) : sys_accept4(fd, addr, len, 0);
}

_public_ int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags) {
        __typeof__(accept4) *f;

        if (managed(fd)) {
                int r = smc_accept4(fd, addr, len, flags);

                if (_unlikely_(r >= 0 && r <= 2))
                        stdio_check(r);
                return r;
        }
        f = real_accept4();
        return f ? f(fd, addr, len, flags) : sys_accept4(fd, addr, len, flags);
}

_public_ int connect(int fd, const struct sockaddr *addr, socklen_t len) {
        __typeof__(connect) *f;

        if (managed(fd)) {
                int r, e;

                uring_check(false);
                r = smc_connect(fd, addr, len);
                e = errno;

                if (_unlikely_(fd <= 2)) {
                        stdio_check(fd);
                        errno = e;
                }
                return r;
        }
        f = real_connect();
        return f ? f(fd, addr, len) : sys_connect(fd, addr, len);
}

_public_ int shutdown(int fd, int how) {
        __typeof__(shutdown) *f;

        if (managed(fd))
                return smc_shutdown(fd, how);
        f = real_shutdown();
        return f ? f(fd, how) : sys_shutdown(fd, how);
}

_public_ int close(int fd) {
        __typeof__(close) *f;

        if (managed(fd) || smc_fd_listener_internal(fd))
                return smc_close(fd);
        if (_unlikely_(smc_ewatch_any()))
                smc_ewatch_fd_event(fd, SMC_EWATCH_CLOSED);
        f = real_close();
        return f ? f(fd) : sys_close(fd);
}

_public_ int setsockopt(int fd, int level, int name, const void *val, socklen_t len) {
        __typeof__(setsockopt) *f;

        if (managed(fd))
                return smc_setsockopt(fd, level, name, val, len);
        f = real_setsockopt();
        return f ? f(fd, level, name, val, len) : sys_setsockopt(fd, level, name, val, len);
}

_public_ int getsockopt(int fd, int level, int name, void *val, socklen_t *len) {
        __typeof__(getsockopt) *f;

        if (managed(fd))
                return smc_getsockopt(fd, level, name, val, len);
        f = real_getsockopt();
        return f ? f(fd, level, name, val, len) : sys_getsockopt(fd, level, name, val, len);
}

_public_ int getsockname(int fd, struct sockaddr *addr, socklen_t *len) {
        __typeof__(getsockname) *f;

        if (managed(fd))
                return smc_getsockname(fd, addr, len);
        f = real_getsockname();
        return f ? f(fd, addr, len) : sys_getsockname(fd, addr, len);
}

_public_ int getpeername(int fd, struct sockaddr *addr, socklen_t *len) {
        __typeof__(getpeername) *f;

        if (managed(fd))
                return smc_getpeername(fd, addr, len);
        f = real_getpeername();
        return f ? f(fd, addr, len) : sys_getpeername(fd, addr, len);
}

/* A duplicate of an SMC socket is an SMC socket too (smc_fd_dup: a shared copy, as
 * after fork). The new descriptor replaces whatever newfd was: if that was an SMC
 * socket, its state must go (smc_fd_forget lets go of it but does not close the
 * number, which dup2 reuses). */
_public_ int dup(int oldfd) {
        __typeof__(dup) *f = real_dup();
        int r = f ? f(oldfd) : sys_fcntl(oldfd, F_DUPFD, 0);

        if (r >= 0 && _unlikely_(smc_ewatch_any()))
                smc_ewatch_fd_dup(oldfd, r);

        if (r >= 0 && (managed(oldfd) || smc_fd_vfork_noted(oldfd))) {
                smc_fd_dup(oldfd, r);
                if (r <= 2)
                        stdio_check(r);
        }
        return r;
}

_public_ int dup2(int oldfd, int newfd) {
        __typeof__(dup2) *f;
        int r;

        if (oldfd != newfd && (managed(newfd) || smc_fd_vfork_noted(newfd)) && fcntl(oldfd, F_GETFD) >= 0)
                smc_fd_forget(newfd);
        f = real_dup2();
        r = f ? f(oldfd, newfd) : sys_dup3(oldfd, newfd, 0);
        if (r >= 0 && oldfd != newfd && _unlikely_(smc_ewatch_any()))
                smc_ewatch_fd_dup(oldfd, r);
        if (r >= 0 && oldfd != newfd && (managed(oldfd) || smc_fd_vfork_noted(oldfd))) {
                smc_fd_dup(oldfd, r);
                if (r <= 2)
                        stdio_check(r);
        }
        return r;
}

_public_ int dup3(int oldfd, int newfd, int flags) {
        __typeof__(dup3) *f;
        int r;

        if (oldfd != newfd && (managed(newfd) || smc_fd_vfork_noted(newfd)) && fcntl(oldfd, F_GETFD) >= 0)
                smc_fd_forget(newfd);
        f = real_dup3();
        r = f ? f(oldfd, newfd, flags) : sys_dup3(oldfd, newfd, flags);
        if (r >= 0 && oldfd != newfd && _unlikely_(smc_ewatch_any()))
                smc_ewatch_fd_dup(oldfd, r);
        if (r >= 0 && (managed(oldfd) || smc_fd_vfork_noted(oldfd))) {
                smc_fd_dup(oldfd, r);
                if (r <= 2)
                        stdio_check(r);
        }
        return r;
}

/* ---- epoll_ctl ----------------------------------------------------------------------- */

/* An SMC listener's descriptor is an epoll instance, and the kernel refuses
 * EPOLLEXCLUSIVE for one (EINVAL), which nginx sets on its shared listener (worker
 * processes, accept_mutex off): socket.c puts the listener's members into the set
 * instead, so that one waiter wakes per connection, as on TCP. And a socket added
 * before connect() (nginx's upstreams) is recorded, to be moved onto the connection's
 * descriptor (smc_sock_epoll_ctl). Everything else goes to the kernel unchanged. */
DEFINE_REAL(epoll_ctl)

_public_ int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev) {
        __typeof__(epoll_ctl) *f = real_epoll_ctl();
        struct epoll_event copy;
        bool handled;
        int r;

        if (ev && smc_uptr_bad(ev)) {
                if (op != EPOLL_CTL_DEL) /* the kernel's EFAULT */
                        return f ? f(epfd, op, fd, ev) : (int) smc_syscall(SYS_epoll_ctl, epfd, op, fd, ev);
                ev = NULL; /* (not read for a DEL) */
        }
        if (ev)
                copy = *ev;
        r = smc_sock_epoll_ctl(epfd, op, fd, ev ? &copy : NULL, &handled);
        if (handled) {
                if (r < 0) {
                        errno = -r;
                        return -1;
                }
                return 0;
        }
        if (ev)
                ev = &copy;
        r = f ? f(epfd, op, fd, ev) : (int) smc_syscall(SYS_epoll_ctl, epfd, op, fd, ev);
        if (r == 0)
                smc_ewatch_ctl(epfd, op, fd, ev);
        return r;
}

/* ---- epoll_create, epoll_wait ------------------------------------------------------ */

/* The epoll watch (socket.c): epoll_wait, epoll_pwait and epoll_pwait2 on a set that
 * holds SMC-D connections look at their rings too; a new set under a number forgets
 * what the library recorded for the old one. */
DEFINE_REAL(epoll_create)
DEFINE_REAL(fork)
/* fork(3) itself: the atfork handlers (socket.c) do the work; the parent's copy only
 * learns the child's pid, so that the epoll watch sees when the child is gone */
_public_ pid_t fork(void) {
        __typeof__(fork) *f = real_fork();
        pid_t p;

        if (!f) {
                errno = EAGAIN;
                return -1;
        }
        p = f();
        if (p > 0) {
                int saved = errno;

                smc_ewatch_child(p);
                errno = saved;
        } else if (p < 0) {
                int saved = errno;

                smc_listen_fork_failed();
                errno = saved;
        }
        return p;
}

DEFINE_REAL(epoll_create1)

_public_ int epoll_create(int size) {
        __typeof__(epoll_create) *f = real_epoll_create();
        int r = f ? f(size) : (size <= 0 ? (errno = EINVAL, -1) : (int) smc_syscall(SYS_epoll_create1, 0));

        if (r >= 0)
                smc_ewatch_fd_event(r, SMC_EWATCH_CREATED);
        return r;
}

_public_ int epoll_create1(int flags) {
        __typeof__(epoll_create1) *f = real_epoll_create1();
        int r = f ? f(flags) : (int) smc_syscall(SYS_epoll_create1, flags);

        if (r >= 0)
                smc_ewatch_fd_event(r, SMC_EWATCH_CREATED);
        return r;
}

/* the kernel's wait in both forms: @ts (epoll_pwait2) or @timeout_ms */
static int epoll_kwait(int epfd, struct epoll_event *evs, int max, int timeout_ms, const struct timespec *ts,
                       const sigset_t *mask) {
        /* (a zero timespec as epoll_pwait's 0: kernels before 5.11 lack epoll_pwait2) */
        if (ts && (smc_uptr_bad(ts) || ts->tv_sec != 0 || ts->tv_nsec != 0))
                return (int) smc_syscall(SYS_epoll_pwait2, epfd, evs, max, ts, mask, _NSIG / 8);
        return (int) smc_syscall(SYS_epoll_pwait, epfd, evs, max, ts ? 0 : timeout_ms, mask, _NSIG / 8);
}

_public_ int epoll_wait(int epfd, struct epoll_event *evs, int max, int timeout) {
        return smc_ewatch_wait(epfd, evs, max, timeout, NULL, NULL, epoll_kwait);
}

_public_ int epoll_pwait(int epfd, struct epoll_event *evs, int max, int timeout, const sigset_t *mask) {
        return smc_ewatch_wait(epfd, evs, max, timeout, NULL, mask, epoll_kwait);
}

_public_ int epoll_pwait2(int epfd, struct epoll_event *evs, int max, const struct timespec *ts, const sigset_t *mask) {
        return smc_ewatch_wait(epfd, evs, max, ts ? 0 : -1, ts, mask, epoll_kwait);
}

/* ---- data ---------------------------------------------------------------------------- */

_public_ ssize_t send(int fd, const void *buf, size_t len, int flags) {
        __typeof__(send) *f;

        if (managed(fd))
                return smc_send(fd, buf, len, flags);
        f = real_send();
        return f ? f(fd, buf, len, flags) : sys_sendto(fd, buf, len, flags, NULL, 0);
}

_public_ ssize_t sendto(int fd, const void *buf, size_t len, int flags,
                        const struct sockaddr *to, socklen_t tolen) {
        __typeof__(sendto) *f;

        if (managed(fd)) {
                /* A stream socket ignores the destination (TCP does, except with
                 * MSG_FASTOPEN); sockperf passes one on every call. */
                int r;

                if (flags & MSG_FASTOPEN)
                        return smc_sendto(fd, buf, len, flags, to, tolen);
                if ((r = smc_sendto_addr_check(to, tolen)) < 0) {
                        errno = -r;
                        return -1;
                }
                return smc_send(fd, buf, len, flags);
        }
        f = real_sendto();
        return f ? f(fd, buf, len, flags, to, tolen) : sys_sendto(fd, buf, len, flags, to, tolen);
}

static ssize_t next_sendmsg(int fd, const struct msghdr *msg, int flags) {
        __typeof__(sendmsg) *f = real_sendmsg();

        return f ? f(fd, msg, flags) : sys_sendmsg(fd, msg, flags);
}

_public_ ssize_t sendmsg(int fd, const struct msghdr *msg, int flags) {
        if (managed(fd))
                return smc_sendmsg(fd, msg, flags);
        if (!smc_uptr_bad(msg) && msg->msg_controllen) /* SCM_RIGHTS: SMC sockets passed on */
                return smc_sendmsg_passing(fd, msg, flags, next_sendmsg);
        return next_sendmsg(fd, msg, flags);
}

_public_ ssize_t recv(int fd, void *buf, size_t len, int flags) {
        __typeof__(recv) *f;

        if (managed(fd))
                return smc_recv(fd, buf, len, recv_flags(flags));
        f = real_recv();
        return f ? f(fd, buf, len, flags) : sys_recvfrom(fd, buf, len, flags, NULL, NULL);
}

_public_ ssize_t recvfrom(int fd, void *buf, size_t len, int flags,
                          struct sockaddr *from, socklen_t *fromlen) {
        __typeof__(recvfrom) *f;

        if (managed(fd))
                return smc_recvfrom(fd, buf, len, recv_flags(flags), from, fromlen);
        f = real_recvfrom();
        return f ? f(fd, buf, len, flags, from, fromlen) : sys_recvfrom(fd, buf, len, flags, from, fromlen);
}

_public_ ssize_t recvmsg(int fd, struct msghdr *msg, int flags) {
        __typeof__(recvmsg) *f;

        ssize_t r;

        if (managed(fd))
                return smc_recvmsg(fd, msg, recv_flags(flags));
        f = real_recvmsg();
        r = f ? f(fd, msg, flags) : sys_recvmsg(fd, msg, flags);
        if (r >= 0 && msg && msg->msg_controllen)
                smc_fds_received(msg); /* SCM_RIGHTS: SMC connections passed to us */
        return r;
}

_public_ ssize_t read(int fd, void *buf, size_t len) {
        __typeof__(read) *f;

        if (managed(fd))
                return smc_read(fd, buf, len);
        f = real_read();
        return f ? f(fd, buf, len) : sys_read(fd, buf, len);
}

_public_ ssize_t write(int fd, const void *buf, size_t len) {
        __typeof__(write) *f;

        if (managed(fd))
                return smc_write(fd, buf, len);
        f = real_write();
        return f ? f(fd, buf, len) : sys_write(fd, buf, len);
}

/* fstat(2) and the like on an SMC listener describe its TCP socket: the program's
 * number holds the library's epoll descriptor, which fstat would call no socket (node
 * checks a handle's type so, systemd's sd_is_socket() too). Every other descriptor is
 * left as it is. The stat structure of this ABI has no 32-bit twin (LP64), so the
 *64 names take the same path; without the C library, newfstatat (arm64 has no fstat
 * system call). */
DEFINE_REAL(fstat)
DEFINE_REAL(fstatat)
DEFINE_REAL(statx)
_Static_assert(sizeof(struct stat) == sizeof(struct stat64), "one stat layout (LP64)");
int __fxstat(int ver, int fd, struct stat *st);
int __fxstat64(int ver, int fd, struct stat64 *st);
int __fxstatat(int ver, int dirfd, const char *path, struct stat *st, int flags);
int __fxstatat64(int ver, int dirfd, const char *path, struct stat64 *st, int flags);
DEFINE_REAL(__fxstat)
DEFINE_REAL(__fxstatat)

static inline int stat_fd(int fd) {
        return managed(fd) ? smc_fd_stat_target(fd) : fd;
}

static inline bool stat_empty_path(const char *path, int flags) {
        return (flags & AT_EMPTY_PATH) && path && !path[0];
}

_public_ int fstat(int fd, struct stat *st) {
        __typeof__(fstat) *f = real_fstat();

        fd = stat_fd(fd);
        return f ? f(fd, st) : (int) smc_syscall(SYS_newfstatat, fd, "", st, AT_EMPTY_PATH);
}

_public_ int fstat64(int fd, struct stat64 *st) {
        return fstat(fd, (struct stat *) st);
}

_public_ int fstatat(int dirfd, const char *path, struct stat *st, int flags) {
        __typeof__(fstatat) *f = real_fstatat();

        if (stat_empty_path(path, flags))
                dirfd = stat_fd(dirfd);
        return f ? f(dirfd, path, st, flags) : (int) smc_syscall(SYS_newfstatat, dirfd, path, st, flags);
}

_public_ int fstatat64(int dirfd, const char *path, struct stat64 *st, int flags) {
        return fstatat(dirfd, path, (struct stat *) st, flags);
}

_public_ int statx(int dirfd, const char *path, int flags, unsigned int mask, struct statx *stx) {
        __typeof__(statx) *f = real_statx();

        if (stat_empty_path(path, flags))
                dirfd = stat_fd(dirfd);
        return f ? f(dirfd, path, flags, mask, stx) : (int) smc_syscall(SYS_statx, dirfd, path, flags, mask, stx);
}

/* programs built against glibc before 2.33 call these */
_public_ int __fxstat(int ver, int fd, struct stat *st) {
        __typeof__(__fxstat) *f = real___fxstat();

        fd = stat_fd(fd);
        return f ? f(ver, fd, st) : (int) smc_syscall(SYS_newfstatat, fd, "", st, AT_EMPTY_PATH);
}

_public_ int __fxstat64(int ver, int fd, struct stat64 *st) {
        return __fxstat(ver, fd, (struct stat *) st);
}

_public_ int __fxstatat(int ver, int dirfd, const char *path, struct stat *st, int flags) {
        __typeof__(__fxstatat) *f = real___fxstatat();

        if (stat_empty_path(path, flags))
                dirfd = stat_fd(dirfd);
        return f ? f(ver, dirfd, path, st, flags) : (int) smc_syscall(SYS_newfstatat, dirfd, path, st, flags);
}

_public_ int __fxstatat64(int ver, int dirfd, const char *path, struct stat64 *st, int flags) {
        return __fxstatat(ver, dirfd, path, (struct stat *) st, flags);
}

/* sendfile(2) onto an SMC socket goes through the ring (smc_sendfile); without this
 * it would write into the bare socketpair end, where the bytes would be lost. One
 * definition serves both names: off_t is 64-bit here (x86_64 and every LP64 target). */
_Static_assert(sizeof(off_t) == sizeof(int64_t), "64-bit off_t");
DEFINE_REAL(sendfile)

_public_ ssize_t sendfile(int out_fd, int in_fd, off_t *offset, size_t count) {
        __typeof__(sendfile) *f;

        if (managed(out_fd))
                return smc_sendfile(out_fd, in_fd, (int64_t *) offset, count);
        f = real_sendfile();
        return f ? f(out_fd, in_fd, offset, count) : sys_sendfile(out_fd, in_fd, (int64_t *) offset, count);
}

_public_ ssize_t sendfile64(int out_fd, int in_fd, off_t *offset, size_t count) {
        return sendfile(out_fd, in_fd, offset, count);
}

/* sendmmsg(2) / recvmmsg(2) on an SMC socket: one sendmsg / recvmsg per message, with
 * the kernel's rules for a stream socket: the count of messages done; an error only
 * if the first one failed; a short send ends the batch. recvmmsg: MSG_WAITFORONE
 * turns on MSG_DONTWAIT after the first message, a message of 0 bytes (end of file,
 * or an empty buffer) ends no batch, and
 * @timeout is checked after each message (as the kernel does). */
DEFINE_REAL(sendmmsg)
DEFINE_REAL(recvmmsg)

_public_ int sendmmsg(int fd, struct mmsghdr *vec, unsigned int vlen, int flags) {
        __typeof__(sendmmsg) *f;
        unsigned i;

        if (!managed(fd)) {
                bool scm = false;

                for (i = 0; !smc_uptr_bad(vec) && i < vlen && i < UIO_MAXIOV && !scm; i++)
                        scm = vec[i].msg_hdr.msg_controllen > 0;
                if (scm) {
                        /* SCM_RIGHTS: SMC sockets passed on, each message as sendmsg()
                         * (an SMC listener must go as its TCP socket); the kernel's
                         * loop: the count sent, an error only if none was */
                        if (vlen > UIO_MAXIOV)
                                vlen = UIO_MAXIOV;
                        for (i = 0; i < vlen; i++) {
                                ssize_t r = vec[i].msg_hdr.msg_controllen
                                                    ? smc_sendmsg_passing(fd, &vec[i].msg_hdr, flags, next_sendmsg)
                                                    : next_sendmsg(fd, &vec[i].msg_hdr, flags);

                                if (r < 0)
                                        return i == 0 ? -1 : (int) i;
                                vec[i].msg_len = (unsigned) r;
                        }
                        return (int) i;
                }
                f = real_sendmmsg();
                return f ? f(fd, vec, vlen, flags) : (int) smc_syscall(SYS_sendmmsg, fd, vec, vlen, flags);
        }
        if (vlen > 0 && smc_uptr_bad(vec)) {
                errno = EFAULT;
                return -1;
        }
        if (vlen > UIO_MAXIOV)
                vlen = UIO_MAXIOV;
        for (i = 0; i < vlen; i++) {
                size_t want = 0;
                ssize_t r = smc_sendmsg(fd, &vec[i].msg_hdr, flags);

                if (r < 0)
                        return i == 0 ? -1 : (int) i;
                vec[i].msg_len = (unsigned) r;
                for (size_t k = 0; k < vec[i].msg_hdr.msg_iovlen; k++)
                        want += vec[i].msg_hdr.msg_iov[k].iov_len;
                if ((size_t) r < want)
                        return (int) i + 1;
        }
        return (int) i;
}

static int64_t mono_ns(void) {
        struct timespec t;

        clock_gettime(CLOCK_MONOTONIC, &t);
        return (int64_t) t.tv_sec * 1000000000 + t.tv_nsec;
}

_public_ int recvmmsg(int fd, struct mmsghdr *vec, unsigned int vlen, int flags, struct timespec *timeout) {
        __typeof__(recvmmsg) *f;
        int64_t end = 0;
        unsigned i;

        if (!managed(fd)) {
                int n;

                f = real_recvmmsg();
                n = f ? f(fd, vec, vlen, flags, timeout) : (int) smc_syscall(SYS_recvmmsg, fd, vec, vlen, flags, timeout);
                for (int k = 0; k < n; k++)
                        if (vec[k].msg_hdr.msg_controllen)
                                smc_fds_received(&vec[k].msg_hdr);
                return n;
        }
        if (timeout && smc_uptr_bad(timeout)) {
                errno = EFAULT; /* (the kernel copies the timeout first) */
                return -1;
        }
        if (timeout) {
                if (timeout->tv_sec < 0 || timeout->tv_nsec < 0 || timeout->tv_nsec >= 1000000000) {
                        errno = EINVAL;
                        return -1;
                }
                end = mono_ns() + (int64_t) timeout->tv_sec * 1000000000 + timeout->tv_nsec;
        }
        if (vlen > UIO_MAXIOV)
                vlen = UIO_MAXIOV;
        flags = recv_flags(flags);
        for (i = 0; i < vlen; i++) {
                ssize_t r = smc_recvmsg(fd, &vec[i].msg_hdr, flags & ~MSG_WAITFORONE);

                if (r < 0)
                        return i == 0 ? -1 : (int) i;
                vec[i].msg_len = (unsigned) r; /* (0 ends no batch, as the kernel's) */
                if (flags & MSG_WAITFORONE)
                        flags |= MSG_DONTWAIT;
                if (timeout) {
                        int64_t left = end - mono_ns();

                        if (left <= 0) {
                                timeout->tv_sec = 0;
                                timeout->tv_nsec = 0;
                                return (int) i + 1;
                        }
                        timeout->tv_sec = left / 1000000000;
                        timeout->tv_nsec = left % 1000000000;
                }
        }
        return (int) i;
}

/* splice(2) between a pipe and an SMC connection: through a buffer here (splice
 * needs a pipe on one side; the connection's bytes live in the ring). Other managed
 * sockets (TCP fallback, not connected, listeners) are kernel sockets: the kernel's
 * splice serves them. Socket -> pipe: only what the pipe takes without blocking
 * leaves the ring (splice_from_smc). Pipe -> socket: never more than the ring
 * has room for, so every byte taken from the pipe is sent; a nonblocking socket
 * with no room gives EAGAIN before anything is taken, as the kernel leaves the pipe
 * as it was (splice_to_smc). (Before, a full ring made the send fail after the read:
 * the bytes taken from the pipe were lost, and a caller that counts what its pipe
 * holds, as haproxy does, then blocked reading an empty pipe.)
 * Offsets: EINVAL for the socket's, ESPIPE for the pipe's, and EINVAL when the other
 * end is no pipe, in the kernel's order. */
DEFINE_REAL(splice)

#define SPLICE_BUF (64u << 10)

/* Is @fd (a socket, a pipe) in nonblocking mode (the flag of its open file)? */
static bool fd_nonblock(int fd) {
        int fl = sys_fcntl(fd, F_GETFL, 0);

        return fl >= 0 && (fl & O_NONBLOCK);
}

/* Wait until @fd polls @events (smc_poll: the ring's readiness for an SMC socket). A
 * signal ends the wait with EINTR unless every handler has SA_RESTART, as the
 * kernel's wait for a pipe's room (-ERESTARTSYS). */
static int splice_wait(int fd, short events) {
        struct pollfd p = { .fd = fd, .events = events };
        int r;

        do
                r = smc_poll(&p, 1, -1);
        while (r < 0 && errno == EINTR && smc_restart_after_signal());
        return r < 0 ? -1 : 0;
}

/* A private pipe of SPLICE_BUF bytes for one splice call, close-on-exec, plus
 * @extra (O_NONBLOCK or 0). Returns 0 or -1 with errno. */
static int priv_pipe_open(int priv[2], int extra) {
        if (pipe2(priv, O_CLOEXEC | extra) < 0)
                return -1;
        (void) sys_fds_off_stdio(priv, 2);
        (void) sys_fcntl(priv[1], F_SETPIPE_SZ, (long) SPLICE_BUF);
        return 0;
}

/* Close it, errno kept (the splice's own). */
static void priv_pipe_close(const int priv[2]) {
        int e = errno;

        sys_close(priv[0]);
        sys_close(priv[1]);
        errno = e;
}

/* Socket -> pipe. A pipe's room is counted in pages, not bytes (FIONREAD does not tell
 * it), so the bytes go through a private pipe of this call and on into @pipe_out by
 * the kernel's own splice, which moves what fits without blocking; only what it moved
 * is taken from the ring (peeked first, dropped after with MSG_TRUNC). Before, a
 * write into a pipe that was fuller than its byte count said blocked the caller (an
 * haproxy thread for good: it is the pipe's reader) with bytes taken from the ring. */
static ssize_t splice_from_smc(int fd_in, int pipe_out, size_t len, unsigned flags) { /* (splice(): a pipe) */
        char buf[SPLICE_BUF];
        int priv[2];
        ssize_t n, moved, k;

        if (len > sizeof(buf))
                len = sizeof(buf);
        if (priv_pipe_open(priv, O_NONBLOCK) < 0)
                return -1;
        for (;;) {
                /* waits for data as the socket's mode says (the kernel's splice does
                 * not apply SPLICE_F_NONBLOCK to the socket) */
                n = smc_recv(fd_in, buf, len, MSG_PEEK);
                if (n <= 0)
                        break;
                /* into the empty private pipe (it holds SPLICE_BUF): all of it */
                for (ssize_t done = 0; done < n; done += k) {
                        k = sys_write(priv[1], buf + done, (size_t) (n - done));
                        if (k <= 0) {
                                n = done;
                                break;
                        }
                }
                moved = n > 0 ? smc_syscall(SYS_splice, priv[0], NULL, pipe_out, NULL, (size_t) n,
                                            SPLICE_F_NONBLOCK | (flags & SPLICE_F_MORE))
                              : 0;
                if (moved > 0) {
                        /* what the pipe took leaves the ring: exactly those bytes */
                        (void) smc_recv(fd_in, NULL, (size_t) moved, MSG_TRUNC | MSG_DONTWAIT);
                        n = moved;
                        break;
                }
                if (moved < 0 && errno != EAGAIN) {
                        n = -1; /* the pipe broke (EPIPE: no reader) */
                        break;
                }
                /* the pipe is full: EAGAIN with SPLICE_F_NONBLOCK or a pipe in
                 * O_NONBLOCK mode, else wait (also for a nonblocking socket), as
                 * the kernel's */
                if ((flags & SPLICE_F_NONBLOCK) || fd_nonblock(pipe_out)) {
                        errno = EAGAIN;
                        n = -1;
                        break;
                }
                while (sys_read(priv[0], buf, sizeof(buf)) > 0) /* (empty it again) */
                        ;
                if (splice_wait(pipe_out, POLLOUT) < 0) {
                        n = -1;
                        break;
                }
        }
        priv_pipe_close(priv);
        return n;
}

/* Pipe -> socket. The bytes go through a private pipe of this call: the kernel's
 * splice moves exactly what is asked from @pipe_in into it (part of a packet of an
 * O_DIRECT pipe too, the rest staying), then they are read and sent in full; never
 * more than the ring has room for. As the kernel's: the socket's own mode says
 * whether a full ring waits (SPLICE_F_NONBLOCK is the pipe's: an empty one gives
 * EAGAIN, and a nonblocking socket sets it), and a connection that is gone gives
 * EPIPE (with SIGPIPE) before anything is taken from the pipe. */
static ssize_t splice_to_smc(int pipe_in, int fd_out, size_t len, unsigned flags) { /* (splice(): a pipe) */
        char buf[SPLICE_BUF];
        bool sock_nb = fd_nonblock(fd_out);
        unsigned pipe_flags = (flags & SPLICE_F_NONBLOCK) || sock_nb ? SPLICE_F_NONBLOCK : 0;
        int priv[2];
        size_t room;
        ssize_t n, w, k;
        int r;

        for (;;) {
                struct pollfd p = { .fd = fd_out, .events = POLLOUT };

                /* a broken connection says so at a zero-length send (EPIPE and
                 * SIGPIPE, ECONNRESET), before the pipe is touched */
                if (smc_send(fd_out, buf, 0, MSG_DONTWAIT) < 0)
                        return -1;
                room = smc_fd_send_room(fd_out);
                if (room > 0)
                        break;
                /* no room, yet writable: the peer closed or stopped reading, and
                 * the send decides (the one send TCP takes then, else EPIPE) */
                if (smc_poll(&p, 1, 0) > 0) {
                        room = sizeof(buf);
                        break;
                }
                if (sock_nb) {
                        errno = EAGAIN;
                        return -1;
                }
                /* as a blocking send: SO_SNDTIMEO and signals end it (helper 132:
                 * this waited for good, past a 100 ms SO_SNDTIMEO) */
                r = smc_fd_wait_send(fd_out);
                if (r < 0) {
                        errno = -r;
                        return -1;
                }
        }
        if (len > room)
                len = room;
        if (len > sizeof(buf))
                len = sizeof(buf);
        if (priv_pipe_open(priv, 0) < 0)
                return -1;
        n = smc_syscall(SYS_splice, pipe_in, NULL, priv[1], NULL, len, pipe_flags);
        for (ssize_t done = 0; n > 0 && done < n; done += k) {
                k = sys_read(priv[0], buf + done, (size_t) (n - done));
                if (k <= 0) {
                        n = done;
                        break;
                }
        }
        priv_pipe_close(priv);
        if (n <= 0)
                return n;
        /* taken from the pipe: sent in full (it fits, unless another process that
         * shares the connection wrote meanwhile: then wait for room) */
        for (ssize_t done = 0; done < n; done += w) {
                w = smc_send(fd_out, buf + done, (size_t) (n - done), MSG_DONTWAIT);
                if (w < 0 && errno == EAGAIN && splice_wait(fd_out, POLLOUT) == 0)
                        w = 0;
                else if (w < 0 && errno == EINTR)
                        w = 0;
                else if (w < 0)
                        return done > 0 ? done : -1; /* the connection broke */
        }
        return n;
}

_public_ ssize_t splice(int fd_in, loff_t *off_in, int fd_out, loff_t *off_out, size_t len, unsigned int flags) {
        __typeof__(splice) *f;
        bool in = smc_fd_is_smc_conn(fd_in), out = smc_fd_is_smc_conn(fd_out);

        if (!in && !out) {
                f = real_splice();
                return f ? f(fd_in, off_in, fd_out, off_out, len, flags)
                         : smc_syscall(SYS_splice, fd_in, off_in, fd_out, off_out, len, flags);
        }
        /* as the kernel's do_splice(): EINVAL unless the other end is a pipe; then
         * ESPIPE for an offset of the pipe, EINVAL for one of the socket (no pread
         * on it) */
        if ((in && out) || sys_fcntl(in ? fd_out : fd_in, F_GETPIPE_SZ, 0) < 0) {
                errno = EINVAL; /* neither is a pipe */
                return -1;
        }
        if ((in && off_out) || (out && off_in)) {
                errno = ESPIPE;
                return -1;
        }
        if ((in && off_in) || (out && off_out)) {
                errno = EINVAL;
                return -1;
        }
        if (len == 0)
                return 0;
        return in ? splice_from_smc(fd_in, fd_out, len, flags) : splice_to_smc(fd_in, fd_out, len, flags);
}

_public_ ssize_t readv(int fd, const struct iovec *iov, int iovcnt) {
        __typeof__(readv) *f;

        if (managed(fd))
                return smc_readv(fd, iov, iovcnt);
        f = real_readv();
        return f ? f(fd, iov, iovcnt) : sys_readv(fd, iov, iovcnt);
}

_public_ ssize_t writev(int fd, const struct iovec *iov, int iovcnt) {
        __typeof__(writev) *f;

        if (managed(fd))
                return smc_writev(fd, iov, iovcnt);
        f = real_writev();
        return f ? f(fd, iov, iovcnt) : sys_writev(fd, iov, iovcnt);
}

/* preadv2 / pwritev2 with offset -1 are readv / writev (Python's os.preadv and
 * os.pwritev call them); before, they reached the socket pair under an SMC
 * connection: written bytes were lost, doorbell bytes read as data (helper 113).
 * (glibc's preadv64v2 / pwritev64v2 are the same calls under the LFS names.) */
_public_ ssize_t preadv2(int fd, const struct iovec *iov, int iovcnt, off_t offset, int flags) {
        if (managed(fd))
                return smc_preadv2(fd, iov, iovcnt, offset, flags);
        return sys_preadv2(fd, iov, iovcnt, offset, flags);
}

_public_ ssize_t pwritev2(int fd, const struct iovec *iov, int iovcnt, off_t offset, int flags) {
        if (managed(fd))
                return smc_pwritev2(fd, iov, iovcnt, offset, flags);
        return sys_pwritev2(fd, iov, iovcnt, offset, flags);
}

_public_ ssize_t preadv64v2(int fd, const struct iovec *iov, int iovcnt, off_t offset, int flags) {
        return preadv2(fd, iov, iovcnt, offset, flags);
}

_public_ ssize_t pwritev64v2(int fd, const struct iovec *iov, int iovcnt, off_t offset, int flags) {
        return pwritev2(fd, iov, iovcnt, offset, flags);
}

/* ---- poll ---------------------------------------------------------------------------- */

static bool any_managed(const struct pollfd *fds, nfds_t nfds) {
        if (nfds > 0 && smc_uptr_bad(fds))
                return false; /* the kernel's EFAULT */
        for (nfds_t i = 0; i < nfds; i++)
                if (managed(fds[i].fd))
                        return true;
        return false;
}

_public_ int poll(struct pollfd *fds, nfds_t nfds, int timeout) {
        __typeof__(poll) *f;

        if (_unlikely_(smc_ewatch_any()) && nfds > 0 && !smc_uptr_bad(fds)) {
                /* (epoll sets only: smc_poll looks at the connections' rings) */
                int r = smc_poll_rings_first(fds, nfds, false, true);

                if (r != -2)
                        return r;
        }
        if (any_managed(fds, nfds))
                return smc_poll(fds, nfds, timeout);
        f = real_poll();
        return f ? f(fds, nfds, timeout) : sys_poll(fds, nfds, timeout);
}

/* ppoll: the kernel answers (an SMC-D connection's X is exact), except for data that
 * came while an epoll set of ours watched the connection (socket.c "epoll watch"),
 * which has no byte in X: the rings are looked at first. */
DEFINE_REAL(ppoll)

_public_ int ppoll(struct pollfd *fds, nfds_t nfds, const struct timespec *ts, const sigset_t *mask) {
        __typeof__(ppoll) *f;

        if (nfds > 0 && !smc_uptr_bad(fds) && (smc_ewatch_any() || any_managed(fds, nfds))) {
                int r = ts && smc_uptr_bad(ts) ? -2 : smc_ppoll_connecting(fds, nfds, ts, mask);

                if (r != -2)
                        return r;
                r = smc_poll_rings_first(fds, nfds, true, false);
                if (r != -2)
                        return r;
        }
        f = real_ppoll();
        return f ? f(fds, nfds, ts, mask) : (int) smc_syscall(SYS_ppoll, fds, nfds, ts, mask, _NSIG / 8);
}

/* ---- select, pselect -------------------------------------------------------------- */

/* The kernel answers select and pselect (an SMC socket's kernel readiness is exact),
 * but it sleeps at once, and the peer then rings a doorbell for every chunk. With an
 * SMC-D connection in the sets and busy-polling on, smc_select() first looks at
 * everything once and spins on the rings for up to busy_poll_ns (signals blocked);
 * only when nothing became ready does it wait in the kernel, with the caller's signal
 * mask, so a signal that came meanwhile interrupts the call as it would have. With
 * a zero timeout too, smc_select() looks at the rings: data that came while an epoll
 * set watched the connection has no byte in X (socket.c "epoll watch"). */

DEFINE_REAL(select)
DEFINE_REAL(pselect)

_public_ int select(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, struct timeval *tv) {
        __typeof__(select) *f;

        if (nfds > 0 && !(tv && smc_uptr_bad(tv)) &&
            (!tv || (tv->tv_sec >= 0 && tv->tv_usec >= 0 && tv->tv_usec < 1000000))) {
                struct timespec ts = {};
                int k;

                if (tv)
                        ts = (struct timespec) { .tv_sec = tv->tv_sec, .tv_nsec = tv->tv_usec * 1000 };
                k = smc_select(nfds, rd, wr, ex, tv ? &ts : NULL, NULL);
                if (k != SMC_SELECT_UNHANDLED) {
                        if (tv) {
                                /* Linux's select leaves the time not slept in *tv */
                                tv->tv_sec = ts.tv_sec;
                                tv->tv_usec = ts.tv_nsec / 1000;
                        }
                        return k;
                }
        }
        f = real_select();
        if (f)
                return f(nfds, rd, wr, ex, tv);
        errno = ENOSYS;
        return -1;
}

_public_ int pselect(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, const struct timespec *ts, const sigset_t *mask) {
        __typeof__(pselect) *f;

        if (nfds > 0 && !(ts && smc_uptr_bad(ts))) {
                /* pselect leaves the caller's timeout as it was */
                struct timespec copy = ts ? *ts : (struct timespec) {};
                int k = smc_select(nfds, rd, wr, ex, ts ? &copy : NULL, mask);

                if (k != SMC_SELECT_UNHANDLED)
                        return k;
        }
        f = real_pselect();
        if (f)
                return f(nfds, rd, wr, ex, ts, mask);
        errno = ENOSYS;
        return -1;
}

/* ---- fcntl --------------------------------------------------------------------------- */

enum fcntl_arg { FCNTL_ARG_NONE, FCNTL_ARG_INT, FCNTL_ARG_PTR };

/* Which kind of third argument cmd takes (fcntl(2)). Unknown commands are assumed to
 * take an int, as glibc's own documentation of the interface does. */
static enum fcntl_arg fcntl_arg_kind(int cmd) {
        switch (cmd) {
        case F_GETFD:
        case F_GETFL:
        case F_GETOWN:
        case F_GETSIG:
        case F_GETLEASE:
        case F_GETPIPE_SZ:
        case F_GET_SEALS:
                return FCNTL_ARG_NONE;
        case F_GETLK:
        case F_SETLK:
        case F_SETLKW:
        case F_OFD_GETLK:
        case F_OFD_SETLK:
        case F_OFD_SETLKW:
        case F_GETOWN_EX:
        case F_SETOWN_EX:
        case F_GET_RW_HINT:
        case F_SET_RW_HINT:
        case F_GET_FILE_RW_HINT:
        case F_SET_FILE_RW_HINT:
                return FCNTL_ARG_PTR;
        default:
                return FCNTL_ARG_INT;
        }
}

/* One implementation for fcntl and fcntl64 (identical on LP64; on 32-bit ABIs the
 * lock commands differ, and real64 selects the 64-bit entry point). */
static int fcntl_common(bool is64, int fd, int cmd, va_list ap) {
        enum fcntl_arg kind = fcntl_arg_kind(cmd);
        void *p = NULL;
        int i = 0;
        __typeof__(fcntl) *f = NULL;

        if (kind == FCNTL_ARG_PTR)
                p = va_arg(ap, void *);
        else if (kind == FCNTL_ARG_INT)
                i = va_arg(ap, int);

        if (managed(fd) || ((cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC) && smc_fd_vfork_noted(fd))) {
                int r;

                if (kind == FCNTL_ARG_PTR)
                        return smc_fcntl(fd, cmd, p);
                if (kind != FCNTL_ARG_INT)
                        return smc_fcntl(fd, cmd);
                r = smc_fcntl(fd, cmd, i);
                if (_unlikely_(r >= 0 && r <= 2 && (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC)))
                        stdio_check(r);
                return r;
        }

        if ((cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC) && _unlikely_(smc_ewatch_any()) && smc_ewatch_is_set(fd)) {
                int r = sys_fcntl(fd, cmd, (long) i);

                if (r >= 0)
                        smc_ewatch_fd_dup(fd, r);
                return r;
        }
        if (is64)
                f = real_fcntl64();
        if (!f)
                f = real_fcntl();
        if (!f)
                return sys_fcntl(fd, cmd, kind == FCNTL_ARG_PTR ? (long) p : (long) i);
        if (kind == FCNTL_ARG_PTR)
                return f(fd, cmd, p);
        if (kind == FCNTL_ARG_INT)
                return f(fd, cmd, i);
        return f(fd, cmd);
}

_public_ int fcntl(int fd, int cmd, ...) {
        va_list ap;
        int r;

        va_start(ap, cmd);
        r = fcntl_common(false, fd, cmd, ap);
        va_end(ap);
        return r;
}

_public_ int fcntl64(int fd, int cmd, ...) {
        va_list ap;
        int r;

        va_start(ap, cmd);
        r = fcntl_common(true, fd, cmd, ap);
        va_end(ap);
        return r;
}

/* ioctl: FIONBIO must reach the library, which keeps each socket's blocking mode
 * itself (CPython's setblocking(), libuv and others use it instead of fcntl). */
_public_ int ioctl(int fd, unsigned long req, ...) {
        __typeof__(ioctl) *f;
        va_list ap;
        void *arg;

        va_start(ap, req);
        arg = va_arg(ap, void *);
        va_end(ap);
        if (managed(fd))
                return smc_ioctl(fd, req, arg);
        f = real_ioctl();
        if (!f)
                return sys_ioctl(fd, req, arg);
        return f(fd, req, arg);
}

/* ---- close_range, closefrom, syscall ---------------------------------------------------
 *
 * close_range(2) and closefrom(3) close SMC sockets too, as close() would, and leave
 * the library's own descriptors open (smc_fd_close_range). A program that closes or
 * uses a descriptor through syscall(2) must not bypass the library either: node's
 * libuv closes every descriptor with syscall(SYS_close, fd), and a close the library
 * never saw left the number marked as an SMC socket, so a file or socket opened later
 * on that number had its writes sent into the old connection's ring. syscall() is
 * therefore defined here: the calls on descriptors this file intercepts go to the
 * functions above (which pass descriptors not ours to libc), everything else to the
 * kernel. (The library itself enters the kernel through smc_syscall(), sys.h.) */

_public_ int close_range(unsigned int first, unsigned int last, int flags) {
        return smc_fd_close_range(first, last, (unsigned) flags);
}

DEFINE_REAL(closefrom)

_public_ void closefrom(int lowfd) {
        __typeof__(closefrom) *f;

        if (smc_fd_close_range(lowfd < 0 ? 0u : (unsigned) lowfd, ~0u, 0) == 0)
                return;
        f = real_closefrom(); /* (no close_range in this kernel: glibc's own way) */
        if (f)
                f(lowfd);
}

/* ---- seccomp -------------------------------------------------------------------------
 *
 * A program that installs a seccomp filter allows the calls its own I/O makes on a
 * TCP socket, not the ones the library makes on an SMC connection's doorbell pair
 * (OpenSSH's pre-authentication child allows read, write and poll: under smcrun it was
 * killed at its first read). When the program installs a filter (prctl(2)
 * PR_SET_SECCOMP or seccomp(2) SECCOMP_SET_MODE_FILTER, also through syscall(2)), the
 * library puts the prefix of seccomp.h in front of it, for the descriptors it holds
 * then, and takes no new socket from then on (the filter decides what the program
 * may create; the library would need more). SMCRUN_SECCOMP=keep: the program's filter
 * goes in unchanged (the library still takes no new socket). Strict mode
 * (SECCOMP_MODE_STRICT: read, write, exit) is left as it is. */

static bool seccomp_keep(void) {
        const char *e = getenv("SMCRUN_SECCOMP");

        return e && strcmp(e, "keep") == 0;
}

/* The filter to install instead of @prog, in *@ret (ret->filter malloc'd), or -errno
 * (then @prog goes in as it is). */
static int seccomp_prefixed(const struct sock_fprog *prog, struct sock_fprog *ret) {
        struct sock_filter *f;
        int *fds, n, len;
        size_t cap;

        atomic_store_explicit(&disabled_state, 2, memory_order_relaxed); /* no new socket */
        smc_set_sandboxed();
        if (!prog || seccomp_keep())
                return -ECANCELED;
        n = smc_lib_fds(&fds);
        if (n <= 0) {
                free(fds);
                return n < 0 ? n : -ENOENT; /* no socket of ours: nothing to allow */
        }
        cap = SMC_SECCOMP_PREFIX_BASE + 2 * (size_t) n + prog->len;
        f = malloc(cap * sizeof(*f));
        len = f ? smc_seccomp_prefix(prog, fds, (size_t) n, f, cap) : -ENOMEM;
        free(fds);
        if (len < 0) {
                free(f);
                smc_debug("seccomp: the program's filter goes in as it is: %s (SMC connections it holds may "
                          "be refused their system calls)", strerror(-len));
                return len;
        }
        smc_debug("seccomp: the program's filter goes in with the library's prefix for %d descriptors", n);
        *ret = (struct sock_fprog) { .len = (unsigned short) len, .filter = f };
        return 0;
}

DEFINE_REAL(prctl)

_public_ int prctl(int option, ...) {
        __typeof__(prctl) *f = real_prctl();
        unsigned long a2, a3, a4, a5;
        struct sock_fprog mine;
        va_list ap;
        int r;

        /* as glibc's prctl(): four more arguments are taken, whatever the option uses */
        va_start(ap, option);
        a2 = va_arg(ap, unsigned long);
        a3 = va_arg(ap, unsigned long);
        a4 = va_arg(ap, unsigned long);
        a5 = va_arg(ap, unsigned long);
        va_end(ap);

        if (option == PR_SET_SECCOMP && a2 == SECCOMP_MODE_FILTER &&
            seccomp_prefixed((const struct sock_fprog *) a3, &mine) == 0) {
                r = f ? f(option, a2, (unsigned long) &mine, a4, a5)
                      : (int) smc_syscall(SYS_prctl, option, a2, &mine, a4, a5);
                free(mine.filter);
                return r;
        }
        return f ? f(option, a2, a3, a4, a5) : (int) smc_syscall(SYS_prctl, option, a2, a3, a4, a5);
}

#ifdef SMC_RAW_SYSCALL
/* seccomp(2), which glibc has no function for: through syscall(2) */
static long seccomp_call(unsigned op, unsigned flags, void *args) {
        struct sock_fprog mine;
        long r;

        if (op == SECCOMP_SET_MODE_FILTER && seccomp_prefixed(args, &mine) == 0) {
                r = smc_syscall(SYS_seccomp, op, flags, &mine);
                free(mine.filter);
                return r;
        }
        return smc_syscall(SYS_seccomp, op, flags, args);
}
#endif

/* ---- chroot -----------------------------------------------------------------------------
 *
 * smcd's socket is a path: a process that changed its root before its first SMC call
 * could not reach it, and its sockets stayed TCP (vsftpd's session process listens for
 * each passive data connection inside its chroot: all of them were TCP). chroot(2)
 * first connects to smcd when this process has no control connection yet (one HELLO,
 * bounded by CHROOT_CTL_TIMEOUT_MS); that connection serves after the change, until
 * smcd restarts or the process forks (a child needs its own: smcrun(1) LIMITATIONS). */

#define CHROOT_CTL_TIMEOUT_MS 1000

DEFINE_REAL(chroot)

_public_ int chroot(const char *path) {
        __typeof__(chroot) *f = real_chroot();

        if (!smcrun_disabled())
                (void) smc_ctl_client_daemon(CHROOT_CTL_TIMEOUT_MS, NULL, NULL);
        return f ? f(path) : (int) smc_syscall(SYS_chroot, path);
}

/* ---- clone without CLONE_VM -----------------------------------------------------------
 *
 * A copy of the process made past fork(3) runs no pthread_atfork(3) handlers, and the
 * library then took it for a vfork() child (another pid, the parent's memory), whose
 * socket table it must not touch: the copy's table went stale (vsftpd makes its
 * session processes with syscall(SYS_clone, ...): every session failed, data went
 * into bare socket pair ends). The library's handlers run by hand around clone(2),
 * clone3(2) (through syscall(2)) and glibc's clone() when CLONE_VM is not asked for
 * and, for the system calls, no new stack is given (the copy then returns here as
 * from fork; with a stack of its own it goes to the kernel as it is). */

#ifdef SMC_RAW_SYSCALL
static long clone_forklike(long n, long a[6], bool forklike) {
        long r;

        if (!forklike)
                return smc_syscall(n, a[0], a[1], a[2], a[3], a[4], a[5]);
        smc_fork_emulate(SMC_FORK_PREPARE);
        r = smc_syscall(n, a[0], a[1], a[2], a[3], a[4], a[5]);
        smc_fork_emulate(r == 0 ? SMC_FORK_CHILD : SMC_FORK_PARENT);
        return r;
}
#endif

struct clone_call {
        int (*fn)(void *);
        void *arg;
};

static int clone_child(void *p) {
        struct clone_call c = *(struct clone_call *) p;

        smc_fork_emulate(SMC_FORK_CHILD);
        return c.fn(c.arg);
}

DEFINE_REAL(clone)

_public_ int clone(int (*fn)(void *), void *stack, int flags, void *arg, ...) {
        __typeof__(clone) *f = real_clone();
        struct clone_call *c;
        pid_t *ptid, *ctid;
        void *tls;
        va_list ap;
        int r;

        va_start(ap, arg);
        ptid = va_arg(ap, pid_t *);
        tls = va_arg(ap, void *);
        ctid = va_arg(ap, pid_t *);
        va_end(ap);
        if (!f) {
                errno = ENOSYS;
                return -1;
        }
        if ((flags & CLONE_VM) || !fn || !(c = malloc(sizeof(*c))))
                return f(fn, stack, flags, arg, ptid, tls, ctid);
        /* the copy reads *c from its own memory before the parent frees it */
        *c = (struct clone_call) { fn, arg };
        smc_fork_emulate(SMC_FORK_PREPARE);
        r = f(clone_child, stack, flags, c, ptid, tls, ctid);
        smc_fork_emulate(SMC_FORK_PARENT);
        free(c);
        return r;
}

#ifdef SMC_RAW_SYSCALL
_public_ long syscall(long n, ...) {
        va_list ap;
        long a[6];

        /* as glibc's syscall(): six arguments are taken, whatever the call uses */
        va_start(ap, n);
        for (int i = 0; i < 6; i++)
                a[i] = va_arg(ap, long);
        va_end(ap);
        switch (n) {
        case SYS_clone:
                /* (flags, stack, ...) on x86-64 and arm64 alike */
                return clone_forklike(n, a, !(a[0] & CLONE_VM) && a[1] == 0);
#ifdef SYS_clone3
        case SYS_clone3: {
                const struct clone_args *ca = (const struct clone_args *) a[0];

                return clone_forklike(n, a, ca && (size_t) a[1] >= offsetof(struct clone_args, stack_size) + 8 &&
                                                    !(ca->flags & CLONE_VM) && ca->stack == 0);
        }
#endif
        case SYS_seccomp:
                return seccomp_call((unsigned) a[0], (unsigned) a[1], (void *) a[2]);
        case SYS_close:
                return close((int) a[0]);
        case SYS_close_range:
                return close_range((unsigned) a[0], (unsigned) a[1], (int) a[2]);
        case SYS_dup:
                return dup((int) a[0]);
#ifdef SYS_dup2
        case SYS_dup2:
                return dup2((int) a[0], (int) a[1]);
#endif
        case SYS_dup3:
                return dup3((int) a[0], (int) a[1], (int) a[2]);
        case SYS_fcntl:
                return fcntl((int) a[0], (int) a[1], a[2]);
        case SYS_ioctl:
                return ioctl((int) a[0], (unsigned long) a[1], (void *) a[2]);
        case SYS_socket:
                return socket((int) a[0], (int) a[1], (int) a[2]);
        case SYS_bind:
                return bind((int) a[0], (const struct sockaddr *) a[1], (socklen_t) a[2]);
        case SYS_listen:
                return listen((int) a[0], (int) a[1]);
#ifdef SYS_accept
        case SYS_accept:
                return accept((int) a[0], (struct sockaddr *) a[1], (socklen_t *) a[2]);
#endif
        case SYS_accept4:
                return accept4((int) a[0], (struct sockaddr *) a[1], (socklen_t *) a[2], (int) a[3]);
        case SYS_connect:
                return connect((int) a[0], (const struct sockaddr *) a[1], (socklen_t) a[2]);
        case SYS_shutdown:
                return shutdown((int) a[0], (int) a[1]);
        case SYS_setsockopt:
                return setsockopt((int) a[0], (int) a[1], (int) a[2], (const void *) a[3], (socklen_t) a[4]);
        case SYS_getsockopt:
                return getsockopt((int) a[0], (int) a[1], (int) a[2], (void *) a[3], (socklen_t *) a[4]);
        case SYS_getsockname:
                return getsockname((int) a[0], (struct sockaddr *) a[1], (socklen_t *) a[2]);
        case SYS_getpeername:
                return getpeername((int) a[0], (struct sockaddr *) a[1], (socklen_t *) a[2]);
        case SYS_read:
                return read((int) a[0], (void *) a[1], (size_t) a[2]);
        case SYS_write:
                return write((int) a[0], (const void *) a[1], (size_t) a[2]);
        case SYS_readv:
                return readv((int) a[0], (const struct iovec *) a[1], (int) a[2]);
        case SYS_writev:
                return writev((int) a[0], (const struct iovec *) a[1], (int) a[2]);
        case SYS_sendto:
                return sendto((int) a[0], (const void *) a[1], (size_t) a[2], (int) a[3],
                              (const struct sockaddr *) a[4], (socklen_t) a[5]);
        case SYS_recvfrom:
                return recvfrom((int) a[0], (void *) a[1], (size_t) a[2], (int) a[3], (struct sockaddr *) a[4],
                                (socklen_t *) a[5]);
        case SYS_sendmsg:
                return sendmsg((int) a[0], (const struct msghdr *) a[1], (int) a[2]);
        case SYS_recvmsg:
                return recvmsg((int) a[0], (struct msghdr *) a[1], (int) a[2]);
        case SYS_sendmmsg:
                return sendmmsg((int) a[0], (struct mmsghdr *) a[1], (unsigned) a[2], (int) a[3]);
        case SYS_recvmmsg:
                return recvmmsg((int) a[0], (struct mmsghdr *) a[1], (unsigned) a[2], (int) a[3],
                                (struct timespec *) a[4]);
        case SYS_preadv2:
                if (sizeof(long) >= 8) /* (offset in a[3] alone) */
                        return preadv2((int) a[0], (const struct iovec *) a[1], (int) a[2], (off_t) a[3], (int) a[5]);
                return smc_syscall6(n, a[0], a[1], a[2], a[3], a[4], a[5]);
        case SYS_pwritev2:
                if (sizeof(long) >= 8)
                        return pwritev2((int) a[0], (const struct iovec *) a[1], (int) a[2], (off_t) a[3], (int) a[5]);
                return smc_syscall6(n, a[0], a[1], a[2], a[3], a[4], a[5]);
        case SYS_sendfile:
                return sendfile((int) a[0], (int) a[1], (off_t *) a[2], (size_t) a[3]);
        case SYS_splice:
                return splice((int) a[0], (loff_t *) a[1], (int) a[2], (loff_t *) a[3], (size_t) a[4],
                              (unsigned) a[5]);
        case SYS_epoll_ctl:
                return epoll_ctl((int) a[0], (int) a[1], (int) a[2], (struct epoll_event *) a[3]);
#ifdef SYS_poll
        case SYS_poll:
                return poll((struct pollfd *) a[0], (nfds_t) a[1], (int) a[2]);
#endif
#ifdef SYS_select
        case SYS_select:
                return select((int) a[0], (fd_set *) a[1], (fd_set *) a[2], (fd_set *) a[3], (struct timeval *) a[4]);
#endif
        default:
                return smc_syscall6(n, a[0], a[1], a[2], a[3], a[4], a[5]);
        }
}
#endif

/* ---- glibc fortified variants (_FORTIFY_SOURCE builds call these instead) ------------ */

_public_ ssize_t __read_chk(int fd, void *buf, size_t nbytes, size_t buflen) {
        __typeof__(__read_chk) *f;

        if (managed(fd)) {
                if (nbytes > buflen)
                        __chk_fail();
                return smc_read(fd, buf, nbytes);
        }
        f = real___read_chk();
        if (f)
                return f(fd, buf, nbytes, buflen);
        if (nbytes > buflen)
                __chk_fail();
        return read(fd, buf, nbytes);
}

_public_ ssize_t __recv_chk(int fd, void *buf, size_t len, size_t buflen, int flags) {
        __typeof__(__recv_chk) *f;

        if (managed(fd)) {
                if (len > buflen)
                        __chk_fail();
                return smc_recv(fd, buf, len, recv_flags(flags));
        }
        f = real___recv_chk();
        if (f)
                return f(fd, buf, len, buflen, flags);
        if (len > buflen)
                __chk_fail();
        return recv(fd, buf, len, flags);
}

_public_ ssize_t __recvfrom_chk(int fd, void *buf, size_t len, size_t buflen, int flags,
                                struct sockaddr *from, socklen_t *fromlen) {
        __typeof__(__recvfrom_chk) *f;

        if (managed(fd)) {
                if (len > buflen)
                        __chk_fail();
                return smc_recvfrom(fd, buf, len, recv_flags(flags), from, fromlen);
        }
        f = real___recvfrom_chk();
        if (f)
                return f(fd, buf, len, buflen, flags, from, fromlen);
        if (len > buflen)
                __chk_fail();
        return recvfrom(fd, buf, len, flags, from, fromlen);
}

_public_ int __poll_chk(struct pollfd *fds, nfds_t nfds, int timeout, size_t fdslen) {
        if (fdslen / sizeof(*fds) < nfds)
                __chk_fail();
        return poll(fds, nfds, timeout);
}

/* ---- exec and spawn ---------------------------------------------------------------------
 *
 * An SMC socket whose descriptor survives the exec (not close-on-exec) is described to
 * the new image in SMCRUN_INHERIT (socket-internal.h), which its copy of this library
 * reads in its constructor. glibc's execvp(), execl() etc. call its internal
 * __execve, so every public name is wrapped here; the l-variants build an argv and take
 * the v-variant's path. If the exec fails, everything is put back (smc_exec_finish).
 * system(3) and popen(3) spawn /bin/sh through glibc-internal calls that are not
 * interposable: they are wrapped too, and run with the prepared environment (see
 * there). */

extern char **environ;

DEFINE_REAL(execve)
DEFINE_REAL(execvpe)
DEFINE_REAL(fexecve)
DEFINE_REAL(posix_spawn)
DEFINE_REAL(posix_spawnp)

/* Does the environment @envp preload this library (LD_PRELOAD names our file, or a
 * file of the same name, libsmcrun.so)? Only then can the new image adopt sockets. */
static char self_path[4096]; /* our file, as loaded (set by exec_init_self_path()) */

/* Called from the constructor: dladdr() takes the loader's lock, which an exec in the
 * child of a multithreaded fork() must not wait for. */
static void exec_init_self_path(void) {
        Dl_info info = {};

        if (dladdr((void *) exec_init_self_path, &info) && info.dli_fname &&
            strlen(info.dli_fname) < sizeof(self_path))
                strcpy(self_path, info.dli_fname);
}

static bool env_preloads_us(char *const envp[]) {
        static const char want[] = "libsmcrun.so";
        const char *self = self_path[0] ? self_path : NULL;

        for (size_t i = 0; envp && envp[i]; i++) {
                const char *p;

                if (strncmp(envp[i], "LD_PRELOAD=", 11) != 0)
                        continue;
                p = envp[i] + 11;
                while (*p) {
                        size_t n = strcspn(p, ": ");
                        const char *base = p;

                        for (size_t k = 0; k < n; k++)
                                if (p[k] == '/')
                                        base = p + k + 1;
                        if ((self && strlen(self) == n && strncmp(p, self, n) == 0) ||
                            ((size_t) (p + n - base) == sizeof(want) - 1 && strncmp(base, want, sizeof(want) - 1) == 0))
                                return true;
                        p += n;
                        while (*p == ':' || *p == ' ')
                                p++;
                }
        }
        return false;
}

/* Is the ELF file at @fd dynamically linked (a PT_INTERP program header: ld.so runs
 * and honours LD_PRELOAD)? A static binary ignores LD_PRELOAD, so it could not adopt
 * an SMC socket: that socket must become a reset TCP socket instead (smcrun(1)).
 * Anything that is not a readable ELF file (a #! script, whose interpreter is a
 * dynamic program; an execute-only file) counts as dynamic. */
static bool fd_elf_dynamic(int fd) {
        union {
                Elf64_Ehdr e64;
                Elf32_Ehdr e32;
        } h;
        bool is64;
        uint64_t off;
        unsigned n, sz;

        if (pread(fd, &h, sizeof(h), 0) < (ssize_t) sizeof(h.e32) || memcmp(h.e64.e_ident, ELFMAG, SELFMAG) != 0)
                return true;
        is64 = h.e64.e_ident[EI_CLASS] == ELFCLASS64;
        off = is64 ? h.e64.e_phoff : h.e32.e_phoff;
        n = is64 ? h.e64.e_phnum : h.e32.e_phnum;
        sz = is64 ? sizeof(Elf64_Phdr) : sizeof(Elf32_Phdr);
        if (n > 256)
                return true;
        for (unsigned i = 0; i < n; i++) {
                union {
                        Elf64_Phdr p64;
                        Elf32_Phdr p32;
                } ph;

                if (pread(fd, &ph, sz, (off_t) (off + (uint64_t) i * sz)) != (ssize_t) sz)
                        return true;
                if ((is64 ? ph.p64.p_type : ph.p32.p_type) == PT_INTERP)
                        return true;
        }
        return false;
}

/* Will the program exec'ed from @path (relative to @dirfd; looked up in PATH when
 * @search and it has no '/') with environment @envp load this library? Only then can
 * it adopt SMC sockets (smc_exec_prepare()). */
static bool exec_loads_us(int dirfd, const char *path, bool search, char *const envp[]) {
        char buf[4096];
        int fd;
        bool r;

        if (!env_preloads_us(envp))
                return false;
        if (!path)
                return true;
        if (search && !strchr(path, '/')) {
                const char *dirs = getenv("PATH"), *p;

                if (!dirs)
                        dirs = "/bin:/usr/bin";
                for (p = dirs;; p += strcspn(p, ":") + 1) {
                        size_t n = strcspn(p, ":");

                        if (n + strlen(path) + 2 <= sizeof(buf)) {
                                snprintf(buf, sizeof(buf), "%.*s/%s", (int) n, n ? p : ".", path);
                                if (access(buf, X_OK) == 0) {
                                        path = buf;
                                        break;
                                }
                        }
                        if (!p[n])
                                return true; /* not found: the exec fails anyway */
                }
        }
        fd = sys_fd_off_stdio(openat(dirfd, path, O_RDONLY | O_CLOEXEC));
        if (fd < 0)
                return true;
        r = fd_elf_dynamic(fd);
        sys_close(fd);
        return r;
}

static int do_execve(const char *path, char *const argv[], char *const envp[]) {
        struct smc_exec_undo *u;
        char **env = smc_exec_prepare(envp, exec_loads_us(AT_FDCWD, path, false, envp), true, false, NULL, &u);
        __typeof__(execve) *f = real_execve();
        int r = f ? f(path, argv, env) : (int) smc_syscall(SYS_execve, path, argv, env);

        smc_exec_finish(u, true); /* we are still here: it failed */
        return r;
}

static int do_execvpe(const char *file, char *const argv[], char *const envp[]) {
        struct smc_exec_undo *u;
        char **env = smc_exec_prepare(envp, exec_loads_us(AT_FDCWD, file, true, envp), true, false, NULL, &u);
        __typeof__(execvpe) *f = real_execvpe();
        int r;

        if (f)
                r = f(file, argv, env);
        else {
                errno = ENOSYS;
                r = -1;
        }
        smc_exec_finish(u, true);
        return r;
}

_public_ int execve(const char *path, char *const argv[], char *const envp[]) {
        return do_execve(path, argv, envp);
}

_public_ int execv(const char *path, char *const argv[]) {
        return do_execve(path, argv, environ);
}

_public_ int execvpe(const char *file, char *const argv[], char *const envp[]) {
        return do_execvpe(file, argv, envp);
}

_public_ int execvp(const char *file, char *const argv[]) {
        return do_execvpe(file, argv, environ);
}

_public_ int fexecve(int fd, char *const argv[], char *const envp[]) {
        struct smc_exec_undo *u;
        char **env = smc_exec_prepare(envp, env_preloads_us(envp) && fd_elf_dynamic(fd), true, false, NULL, &u);
        __typeof__(fexecve) *f = real_fexecve();
        int r = f ? f(fd, argv, env) : (int) smc_syscall(SYS_execveat, fd, "", argv, env, AT_EMPTY_PATH);

        smc_exec_finish(u, true);
        return r;
}

/* glibc >= 2.34 has execveat(3); older ones only the system call. Declared here so
 * that this builds against either. */
int execveat(int dirfd, const char *path, char *const argv[], char *const envp[], int flags);
static _Atomic(void *) real_execveat_slot;

_public_ int execveat(int dirfd, const char *path, char *const argv[], char *const envp[], int flags) {
        struct smc_exec_undo *u;
        char **env = smc_exec_prepare(envp,
                                      (flags & AT_EMPTY_PATH) && !*path
                                              ? env_preloads_us(envp) && fd_elf_dynamic(dirfd)
                                              : exec_loads_us(dirfd, path, false, envp),
                                      true, false, NULL, &u);
        __typeof__(execveat) *f = (__typeof__(execveat) *) resolve(&real_execveat_slot, "execveat");
        int r = f ? f(dirfd, path, argv, env, flags) : (int) smc_syscall(SYS_execveat, dirfd, path, argv, env, flags);

        smc_exec_finish(u, true);
        return r;
}

/* execl(3) family: the arguments up to the NULL as an argv on the stack (execle's
 * environment follows the NULL). glibc declares @arg non-null. */
#define EXECL_ARGV(first, ap, argv)                                                 \
        do {                                                                         \
                va_list cnt_;                                                        \
                size_t n_ = 1;                                                       \
                va_copy(cnt_, ap);                                                   \
                while (va_arg(cnt_, const char *))                                   \
                        n_++;                                                        \
                va_end(cnt_);                                                        \
                argv = alloca((n_ + 1) * sizeof(char *));                            \
                argv[0] = (char *) (first);                                          \
                for (size_t i_ = 1; i_ <= n_; i_++) /* the last one is the NULL */   \
                        argv[i_] = va_arg(ap, char *);                               \
        } while (0)

_public_ int execl(const char *path, const char *arg, ...) {
        va_list ap;
        char **argv;

        va_start(ap, arg);
        EXECL_ARGV(arg, ap, argv);
        va_end(ap);
        return do_execve(path, argv, environ);
}

_public_ int execlp(const char *file, const char *arg, ...) {
        va_list ap;
        char **argv;

        va_start(ap, arg);
        EXECL_ARGV(arg, ap, argv);
        va_end(ap);
        return do_execvpe(file, argv, environ);
}

_public_ int execle(const char *path, const char *arg, ...) {
        va_list ap;
        char **argv, **envp = NULL;

        va_start(ap, arg);
        EXECL_ARGV(arg, ap, argv);
        envp = va_arg(ap, char **);
        va_end(ap);
        return do_execve(path, argv, envp);
}

/* posix_spawn's file actions. glibc runs them in the child through internal calls no
 * preload sees, so a dup2 of an SMC connection onto the child's stdout (CPython's
 * subprocess with close_fds=False) made a bare socketpair end there, whose bytes are
 * doorbells: the child's output was lost. The actions are recorded here as the program
 * adds them (per file actions object, in order: dup2, close, open, closefrom), and
 * do_spawn() works out which child descriptors are copies of which SMC connections
 * (struct smc_spawn_fds). A record starts at posix_spawn_file_actions_init() and only
 * there (one started at a later action would miss the earlier ones, and could name the
 * wrong connection). Objects without a whole record (more than SPAWN_FA_MAX alive at
 * once, a struct copy, more than SPAWN_ACTS_MAX actions) are not followed (as before:
 * documented). */
#define SPAWN_FA_MAX 1024
#define SPAWN_ACTS_MAX 1024
enum { FA_DUP2, FA_CLOSE, FA_OPEN, FA_CLOSEFROM, FA_CHDIR, FA_FCHDIR, FA_TCSETPGRP };
struct spawn_act {
        int op, fd, newfd, oflag;
        mode_t mode;
        char *path; /* FA_OPEN, FA_CHDIR: a copy (NULL: out of memory, the record is
                     * then not replayed) */
};
struct spawn_fa {
        const void *fa; /* the program's posix_spawn_file_actions_t; NULL: free slot */
        struct spawn_act *acts;
        unsigned n, cap;
        bool overflow;
};
static struct spawn_fa spawn_fas[SPAWN_FA_MAX];
static pthread_mutex_t spawn_fa_lock = PTHREAD_MUTEX_INITIALIZER;

/* a fork() while another thread records must not leave the child's copy locked */
static void spawn_fa_atfork_prepare(void) {
        pthread_mutex_lock(&spawn_fa_lock);
}
static void spawn_fa_atfork_release(void) {
        pthread_mutex_unlock(&spawn_fa_lock);
}
__attribute__((constructor)) static void spawn_fa_init(void) {
        (void) pthread_atfork(spawn_fa_atfork_prepare, spawn_fa_atfork_release, spawn_fa_atfork_release);
}

/* The record of @fa (lock held); @create: make one (NULL if all slots are taken). */
static struct spawn_fa *spawn_fa_get(const void *fa, bool create) {
        struct spawn_fa *freeslot = NULL;

        for (unsigned i = 0; i < SPAWN_FA_MAX; i++) {
                if (spawn_fas[i].fa == fa)
                        return &spawn_fas[i];
                if (!spawn_fas[i].fa && !freeslot)
                        freeslot = &spawn_fas[i];
        }
        if (create && freeslot)
                *freeslot = (struct spawn_fa) { .fa = fa };
        return create ? freeslot : NULL;
}

static void spawn_fa_drop(const void *fa) {
        struct spawn_fa *r;

        pthread_mutex_lock(&spawn_fa_lock);
        r = spawn_fa_get(fa, false);
        if (r) {
                for (unsigned i = 0; i < r->n; i++)
                        free(r->acts[i].path);
                free(r->acts);
                *r = (struct spawn_fa) { 0 };
        }
        pthread_mutex_unlock(&spawn_fa_lock);
}

static void spawn_fa_add_full(const void *fa, int op, int fd, int newfd, const char *path, int oflag, mode_t mode) {
        struct spawn_fa *r;

        pthread_mutex_lock(&spawn_fa_lock);
        r = spawn_fa_get(fa, false);
        if (r && !r->overflow) {
                if (r->n == r->cap) {
                        unsigned cap = r->cap ? r->cap * 2 : 8;
                        struct spawn_act *a = cap <= SPAWN_ACTS_MAX ? realloc(r->acts, cap * sizeof(*a)) : NULL;

                        if (!a)
                                r->overflow = true;
                        else {
                                r->acts = a;
                                r->cap = cap;
                        }
                }
                if (!r->overflow) {
                        char *copy = path ? strdup(path) : NULL;

                        if (path && !copy)
                                r->overflow = true; /* (not replayable: not followed) */
                        else
                                r->acts[r->n++] = (struct spawn_act) { .op = op, .fd = fd, .newfd = newfd,
                                                                       .oflag = oflag, .mode = mode, .path = copy };
                }
        }
        pthread_mutex_unlock(&spawn_fa_lock);
}

static void spawn_fa_add(const void *fa, int op, int fd, int newfd) {
        spawn_fa_add_full(fa, op, fd, newfd, NULL, 0, 0);
}

DEFINE_REAL(posix_spawn_file_actions_init)
DEFINE_REAL(posix_spawn_file_actions_destroy)
DEFINE_REAL(posix_spawn_file_actions_adddup2)
DEFINE_REAL(posix_spawn_file_actions_addclose)
DEFINE_REAL(posix_spawn_file_actions_addopen)

_public_ int posix_spawn_file_actions_init(posix_spawn_file_actions_t *fa) {
        __typeof__(posix_spawn_file_actions_init) *f = real_posix_spawn_file_actions_init();
        int r = f ? f(fa) : ENOSYS;

        if (r == 0) {
                spawn_fa_drop(fa); /* a record left by an object that lived here before */
                pthread_mutex_lock(&spawn_fa_lock);
                (void) spawn_fa_get(fa, true);
                pthread_mutex_unlock(&spawn_fa_lock);
        }
        return r;
}

_public_ int posix_spawn_file_actions_destroy(posix_spawn_file_actions_t *fa) {
        __typeof__(posix_spawn_file_actions_destroy) *f = real_posix_spawn_file_actions_destroy();

        spawn_fa_drop(fa);
        return f ? f(fa) : ENOSYS;
}

_public_ int posix_spawn_file_actions_adddup2(posix_spawn_file_actions_t *fa, int fd, int newfd) {
        __typeof__(posix_spawn_file_actions_adddup2) *f = real_posix_spawn_file_actions_adddup2();
        int r = f ? f(fa, fd, newfd) : ENOSYS;

        if (r == 0)
                spawn_fa_add(fa, FA_DUP2, fd, newfd);
        return r;
}

_public_ int posix_spawn_file_actions_addclose(posix_spawn_file_actions_t *fa, int fd) {
        __typeof__(posix_spawn_file_actions_addclose) *f = real_posix_spawn_file_actions_addclose();
        int r = f ? f(fa, fd) : ENOSYS;

        if (r == 0)
                spawn_fa_add(fa, FA_CLOSE, fd, -1);
        return r;
}

_public_ int posix_spawn_file_actions_addopen(posix_spawn_file_actions_t *fa, int fd, const char *path, int oflag,
                                              mode_t mode) {
        __typeof__(posix_spawn_file_actions_addopen) *f = real_posix_spawn_file_actions_addopen();
        int r = f ? f(fa, fd, path, oflag, mode) : ENOSYS;

        if (r == 0)
                spawn_fa_add_full(fa, FA_OPEN, fd, -1, path, oflag, mode);
        return r;
}

int posix_spawn_file_actions_addchdir_np(posix_spawn_file_actions_t *fa, const char *path);
int posix_spawn_file_actions_addfchdir_np(posix_spawn_file_actions_t *fa, int fd);
int posix_spawn_file_actions_addtcsetpgrp_np(posix_spawn_file_actions_t *fa, int tcfd);
static _Atomic(void *) real_addchdir_slot, real_addfchdir_slot, real_addtcsetpgrp_slot;

_public_ int posix_spawn_file_actions_addchdir_np(posix_spawn_file_actions_t *fa, const char *path) {
        __typeof__(posix_spawn_file_actions_addchdir_np) *f = (__typeof__(posix_spawn_file_actions_addchdir_np) *)
                resolve(&real_addchdir_slot, "posix_spawn_file_actions_addchdir_np");
        int r = f ? f(fa, path) : ENOSYS;

        if (r == 0)
                spawn_fa_add_full(fa, FA_CHDIR, -1, -1, path, 0, 0);
        return r;
}

_public_ int posix_spawn_file_actions_addfchdir_np(posix_spawn_file_actions_t *fa, int fd) {
        __typeof__(posix_spawn_file_actions_addfchdir_np) *f = (__typeof__(posix_spawn_file_actions_addfchdir_np) *)
                resolve(&real_addfchdir_slot, "posix_spawn_file_actions_addfchdir_np");
        int r = f ? f(fa, fd) : ENOSYS;

        if (r == 0)
                spawn_fa_add(fa, FA_FCHDIR, fd, -1);
        return r;
}

_public_ int posix_spawn_file_actions_addtcsetpgrp_np(posix_spawn_file_actions_t *fa, int tcfd) {
        __typeof__(posix_spawn_file_actions_addtcsetpgrp_np) *f =
                (__typeof__(posix_spawn_file_actions_addtcsetpgrp_np) *) resolve(&real_addtcsetpgrp_slot,
                                                                               "posix_spawn_file_actions_addtcsetpgrp_np");
        int r = f ? f(fa, tcfd) : ENOSYS;

        if (r == 0)
                spawn_fa_add(fa, FA_TCSETPGRP, tcfd, -1);
        return r;
}

int posix_spawn_file_actions_addclosefrom_np(posix_spawn_file_actions_t *fa, int from);
static _Atomic(void *) real_addclosefrom_slot;

_public_ int posix_spawn_file_actions_addclosefrom_np(posix_spawn_file_actions_t *fa, int from) {
        __typeof__(posix_spawn_file_actions_addclosefrom_np) *f =
                (__typeof__(posix_spawn_file_actions_addclosefrom_np) *) resolve(&real_addclosefrom_slot,
                                                                               "posix_spawn_file_actions_addclosefrom_np");
        int r = f ? f(fa, from) : ENOSYS;

        if (r == 0)
                spawn_fa_add(fa, FA_CLOSEFROM, from, -1);
        return r;
}

/* Play @fa's recorded actions against this process's descriptors: which child
 * descriptors end up copies of which of ours (only SMC connections matter, others are
 * -1), into @out (@max entries). False: not followed (no record while SMC sockets
 * exist is fine: nothing touched; an overflowed record or too many entries). */
static bool spawn_child_fds(const posix_spawn_file_actions_t *fa, struct smc_child_fd *out, size_t max,
                            struct smc_spawn_fds *child) {
        struct spawn_fa *r;
        bool ok = true;

        *child = (struct smc_spawn_fds) { .fds = out, .n = 0, .closed_from = INT_MAX };
        if (!fa)
                return true;
        pthread_mutex_lock(&spawn_fa_lock);
        r = spawn_fa_get(fa, false);
        if (r && r->overflow)
                ok = false;
        for (unsigned i = 0; r && ok && i < r->n; i++) {
                const struct spawn_act *a = &r->acts[i];
                int target = a->op == FA_DUP2 ? a->newfd : a->fd, src = -1;
                size_t k;

                if (a->op == FA_CLOSEFROM) {
                        /* numbers >= fd are closed from here on, copies made there too */
                        size_t m = 0;

                        for (k = 0; k < child->n; k++)
                                if (out[k].fd < a->fd)
                                        out[m++] = out[k];
                        child->n = m;
                        if (a->fd < child->closed_from)
                                child->closed_from = a->fd;
                        continue;
                }
                if (a->op == FA_DUP2) {
                        /* what a->fd is in the child at this point */
                        for (k = 0; k < child->n && out[k].fd != a->fd; k++)
                                ;
                        if (k < child->n)
                                src = out[k].src;
                        else if (a->fd < child->closed_from && managed(a->fd))
                                src = a->fd;
                }
                for (k = 0; k < child->n && out[k].fd != target; k++)
                        ;
                if (k == child->n) {
                        if (k == max) {
                                ok = false;
                                break;
                        }
                        child->n++;
                }
                out[k] = (struct smc_child_fd) { .fd = target, .src = src };
        }
        pthread_mutex_unlock(&spawn_fa_lock);
        return ok;
}

/* A file actions object of our own (*@own, initialized here) with @fa's recorded
 * actions, to which stubs can be added. False (nothing to destroy) if @fa has no whole
 * record or an action cannot be made again. */
static bool spawn_fa_replay(const posix_spawn_file_actions_t *fa, posix_spawn_file_actions_t *own) {
        __typeof__(posix_spawn_file_actions_init) *init = real_posix_spawn_file_actions_init();
        __typeof__(posix_spawn_file_actions_destroy) *destroy = real_posix_spawn_file_actions_destroy();
        __typeof__(posix_spawn_file_actions_adddup2) *dup2f = real_posix_spawn_file_actions_adddup2();
        __typeof__(posix_spawn_file_actions_addclose) *closef = real_posix_spawn_file_actions_addclose();
        __typeof__(posix_spawn_file_actions_addopen) *openf = real_posix_spawn_file_actions_addopen();
        __typeof__(posix_spawn_file_actions_addclosefrom_np) *closefromf =
                (__typeof__(posix_spawn_file_actions_addclosefrom_np) *) resolve(&real_addclosefrom_slot,
                                                                               "posix_spawn_file_actions_addclosefrom_np");
        __typeof__(posix_spawn_file_actions_addchdir_np) *chdirf = (__typeof__(posix_spawn_file_actions_addchdir_np) *)
                resolve(&real_addchdir_slot, "posix_spawn_file_actions_addchdir_np");
        __typeof__(posix_spawn_file_actions_addfchdir_np) *fchdirf =
                (__typeof__(posix_spawn_file_actions_addfchdir_np) *) resolve(&real_addfchdir_slot,
                                                                            "posix_spawn_file_actions_addfchdir_np");
        __typeof__(posix_spawn_file_actions_addtcsetpgrp_np) *tcf =
                (__typeof__(posix_spawn_file_actions_addtcsetpgrp_np) *) resolve(&real_addtcsetpgrp_slot,
                                                                               "posix_spawn_file_actions_addtcsetpgrp_np");
        struct spawn_fa *r = NULL;
        bool ok;

        if (!init || !destroy || !dup2f || !closef || !openf || init(own) != 0)
                return false;
        pthread_mutex_lock(&spawn_fa_lock);
        if (fa) {
                r = spawn_fa_get(fa, false);
                ok = r && !r->overflow;
        } else
                ok = true;
        for (unsigned i = 0; r && ok && i < r->n; i++) {
                const struct spawn_act *a = &r->acts[i];

                switch (a->op) {
                case FA_DUP2:
                        ok = dup2f(own, a->fd, a->newfd) == 0;
                        break;
                case FA_CLOSE:
                        ok = closef(own, a->fd) == 0;
                        break;
                case FA_OPEN:
                        ok = openf(own, a->fd, a->path, a->oflag, a->mode) == 0;
                        break;
                case FA_CLOSEFROM:
                        ok = closefromf && closefromf(own, a->fd) == 0;
                        break;
                case FA_CHDIR:
                        ok = chdirf && chdirf(own, a->path) == 0;
                        break;
                case FA_FCHDIR:
                        ok = fchdirf && fchdirf(own, a->fd) == 0;
                        break;
                default:
                        ok = tcf && tcf(own, a->fd) == 0;
                        break;
                }
        }
        pthread_mutex_unlock(&spawn_fa_lock);
        if (!ok)
                (void) destroy(own);
        return ok;
}

/* posix_spawn: the parent keeps running with its sockets, so they are marked shared
 * with the new process after it started. File actions are followed (spawn_child_fds()):
 * a copy of an SMC-D connection made by one is handed to the new program under the
 * child's number; a closed or replaced number is not described. Where the new program
 * cannot take a connection over (it does not load the library; SMC-R), a reset TCP
 * socket goes in its place in the child by a file action appended to a copy of the
 * program's (spawn_fa_replay()), as an exec's stub: never the bare socketpair end.
 * An SMC listener goes as its TCP socket (and accept channel) the same way
 * (spawn_prepare_listener()). A source number the program's actions replaced or
 * closed in the child (addclosefrom_np, a dup2 onto it) is not used: that connection
 * or listener arrives as before (the bare descriptor, the epoll descriptor). */
#define SPAWN_STUBS_MAX 64

/* Can spawn_fa_replay() copy @fa (none, or a whole record)? */
static bool spawn_fa_complete(const posix_spawn_file_actions_t *fa) {
        struct spawn_fa *r;
        bool ok;

        if (!fa)
                return true;
        pthread_mutex_lock(&spawn_fa_lock);
        r = spawn_fa_get(fa, false);
        ok = r && !r->overflow;
        pthread_mutex_unlock(&spawn_fa_lock);
        return ok;
}

static int do_spawn(bool path_search, pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
                    const posix_spawnattr_t *attr, char *const argv[], char *const envp[]) {
        struct smc_exec_undo *u;
        struct smc_child_fd cf[SPAWN_ACTS_MAX];
        int stub_fds[SPAWN_STUBS_MAX], stub_fams[SPAWN_STUBS_MAX], made[SPAWN_STUBS_MAX];
        int lst_fds[SPAWN_STUBS_MAX], lst_srcs[SPAWN_STUBS_MAX];
        size_t nmade = 0;
        struct smc_spawn_fds child;
        bool followed = spawn_child_fds(fa, cf, SPAWN_ACTS_MAX, &child);
        posix_spawn_file_actions_t own;
        const posix_spawn_file_actions_t *use = fa;
        char **env;
        __typeof__(posix_spawn) *f = path_search ? real_posix_spawnp() : real_posix_spawn();
        int r;

        child.stub_fds = stub_fds;
        child.stub_families = stub_fams;
        child.n_stub = 0;
        child.max_stub = SPAWN_STUBS_MAX;
        child.can_add = followed && spawn_fa_complete(fa);
        child.listen_fds = lst_fds;
        child.listen_srcs = lst_srcs;
        child.n_listen = 0;
        child.max_listen = SPAWN_STUBS_MAX;
        env = smc_exec_prepare(envp, exec_loads_us(AT_FDCWD, path, path_search, envp), false, true,
                               followed ? &child : NULL, &u);
        if (followed && (child.n_stub > 0 || child.n_listen > 0) && spawn_fa_replay(fa, &own)) {
                __typeof__(posix_spawn_file_actions_adddup2) *dup2f = real_posix_spawn_file_actions_adddup2();
                bool lok = true;

                /* an SMC listener's TCP socket in place of its epoll fd */
                for (size_t i = 0; i < child.n_listen && lok; i++)
                        lok = dup2f(&own, lst_srcs[i], lst_fds[i]) == 0;
                if (!lok) {
                        (void) real_posix_spawn_file_actions_destroy()(&own);
                        smc_exec_finish(u, true);
                        return ENOMEM;
                }

                for (size_t i = 0; i < child.n_stub; i++) {
                        int t = smc_reset_socket(stub_fams[i]);

                        if (t < 0)
                                continue;
                        if (smc_spawn_touched(&child, t)) {
                                /* a program's action replaced or closed that number in
                                 * the child before ours would copy it */
                                sys_close(t);
                                continue;
                        }
                        if (dup2f(&own, t, stub_fds[i]) != 0) {
                                sys_close(t);
                                continue;
                        }
                        made[nmade++] = t;
                }
                use = &own;
        } else if (child.n_listen > 0) {
                /* (the listeners' entries name T at their numbers, which only our file
                 * actions put there) */
                smc_exec_finish(u, true);
                return ENOMEM;
        }
        r = f ? f(pid, path, use, attr, argv, env) : ENOSYS;
        if (use == &own)
                (void) real_posix_spawn_file_actions_destroy()(&own);
        for (size_t i = 0; i < nmade; i++)
                sys_close(made[i]);
        smc_exec_finish(u, r != 0);
        return r;
}

_public_ int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
                         const posix_spawnattr_t *attr, char *const argv[], char *const envp[]) {
        return do_spawn(false, pid, path, fa, attr, argv, envp);
}

_public_ int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
                          const posix_spawnattr_t *attr, char *const argv[], char *const envp[]) {
        return do_spawn(true, pid, file, fa, attr, argv, envp);
}

/* system(3) and popen(3): glibc starts /bin/sh with posix_spawn internally (not
 * interposable) and the process environment. So the environment is prepared as for
 * posix_spawn (SMCRUN_INHERIT) and swapped in for the call: a shell that loads this
 * library adopts the inherited SMC sockets and hands them on to the command it execs.
 * environ is swapped for the duration of the call: another thread's setenv() at that
 * moment would go to the copy (getenv() sees the same variables). */
DEFINE_REAL(system)
DEFINE_REAL(popen)

_public_ int system(const char *cmd) {
        __typeof__(system) *f = real_system();
        struct smc_exec_undo *u;
        char **saved = environ, **env;
        int r;

        if (!f) {
                errno = ENOSYS;
                return -1;
        }
        if (!cmd)
                return f(cmd);
        env = smc_exec_prepare(environ, exec_loads_us(AT_FDCWD, "/bin/sh", false, environ), false, true, NULL, &u);
        environ = env;
        r = f(cmd);
        environ = saved;
        smc_exec_finish(u, r == -1 && errno != ECHILD);
        return r;
}

_public_ FILE *popen(const char *cmd, const char *mode) {
        __typeof__(popen) *f = real_popen();
        struct smc_exec_undo *u;
        char **saved = environ, **env;
        FILE *r;

        if (!f) {
                errno = ENOSYS;
                return NULL;
        }
        env = smc_exec_prepare(environ, exec_loads_us(AT_FDCWD, "/bin/sh", false, environ), false, true, NULL, &u);
        environ = env;
        r = f(cmd, mode);
        environ = saved;
        smc_exec_finish(u, !r);
        return r;
}

/* ---- C stdio ------------------------------------------------------------------------
 *
 * glibc's FILE streams read and write through glibc-internal calls that no preload can
 * see: a stream on an SMC connection's descriptor X would move the socketpair's doorbell
 * bytes, not the connection's data. So every stream this library can see coming sits on
 * a fopencookie(3) stream whose callbacks are this library's read, write and close of
 * the descriptor (the "SMC stream" below):
 *  - fdopen() of an SMC connection returns one;
 *  - when an SMC connection lands on descriptor 0, 1 or 2 (an image that adopted it
 *    across exec: inetd's pattern, a forked child running tr, grep or sha256sum on the
 *    connection; or an accept, connect or dup onto those numbers), stdin, stdout or
 *    stderr is replaced by one, with the old stream's buffering mode and the bytes it
 *    still held (written but not flushed, or read ahead but not consumed).
 * fileno() of an SMC stream gives its descriptor: glibc marks cookie streams with
 * _fileno -2 and only tests it for < 0 (fileno) and != -1 (is it open), so setting it is
 * safe. Its callbacks go through the interposed read and write, which serve whatever the
 * descriptor is at the time (an SMC connection, or a file dup2'ed there later).
 * The replaced stdin/stdout/stderr FILE (glibc's static one) is left on descriptor -1:
 * code that kept its address from before (a C++ iostream initialised earlier) gets
 * EBADF, never the doorbell bytes.
 * dprintf/vdprintf (glibc writes through a temporary FILE on the descriptor) format
 * into memory and write that through this library.
 * Not covered (smcrun(1)): wide-character I/O on an SMC stream (a cookie stream has
 * none), POSIX AIO, and any other glibc-internal read or write of the descriptor. */

#include <stdio.h>

/* glibc's libio flag bits (libio.h, not installed; stable ABI since glibc 2.1) */
#define LIBIO_UNBUFFERED 0x0002
#define LIBIO_LINE_BUF 0x0200

DEFINE_REAL(fdopen)
DEFINE_REAL(vdprintf)

int __vasprintf_chk(char **result, int flag, const char *fmt, va_list ap);
int __dprintf_chk(int fd, int flag, const char *fmt, ...);
int __vdprintf_chk(int fd, int flag, const char *fmt, va_list ap);
DEFINE_REAL(__vdprintf_chk)

struct smc_stream {
        int fd;
        char *carry; /* bytes read ahead by the stream this one replaced (malloc'ed) */
        size_t carry_len, carry_off;
};

static ssize_t smc_stream_read(void *cookie, char *buf, size_t size) {
        struct smc_stream *k = cookie;

        if (k->carry) {
                size_t n = k->carry_len - k->carry_off;

                if (n > size)
                        n = size;
                memcpy(buf, k->carry + k->carry_off, n);
                k->carry_off += n;
                if (k->carry_off == k->carry_len) {
                        free(k->carry);
                        k->carry = NULL;
                }
                return (ssize_t) n;
        }
        return read(k->fd, buf, size);
}

/* All of @size, as glibc's file write loop does for a descriptor. On an error
 * (EAGAIN on a nonblocking socket, EPIPE ...) the bytes written so far, possibly 0,
 * with errno set: a short count marks the stream's error, as for a descriptor.
 * Never negative: glibc's buffer code takes the result as a count (fopencookie(3)),
 * and -1 made fwrite() report more than it was given. */
static ssize_t smc_stream_write(void *cookie, const char *buf, size_t size) {
        struct smc_stream *k = cookie;
        size_t done = 0;

        while (done < size) {
                ssize_t r = write(k->fd, buf + done, size - done);

                if (r <= 0)
                        break; /* EINTR too: glibc's write loop does not retry either */
                done += (size_t) r;
        }
        return (ssize_t) done;
}

/* A socket cannot seek; glibc tries (ftell, or a flush of an update stream) */
static int smc_stream_seek(void *cookie, off64_t *off, int whence) {
        (void) cookie;
        (void) off;
        (void) whence;
        errno = ESPIPE;
        return -1;
}

static int smc_stream_close(void *cookie) {
        struct smc_stream *k = cookie;
        int r = k->fd >= 0 ? close(k->fd) : 0;

        free(k->carry);
        free(k);
        return r;
}

/* A new SMC stream on @fd with @mode (fopen's "r", "w", "a", optionally "+" or "b");
 * owns @carry (may be NULL). NULL with errno on failure (EINVAL: bad mode, ENOMEM). */
static FILE *smc_stream_open(int fd, const char *mode, char *carry, size_t carry_len) {
        static const cookie_io_functions_t fns = {
                .read = smc_stream_read,
                .write = smc_stream_write,
                .seek = smc_stream_seek,
                .close = smc_stream_close,
        };
        struct smc_stream *k = calloc(1, sizeof(*k));
        FILE *f;

        if (!k) {
                free(carry);
                errno = ENOMEM;
                return NULL;
        }
        k->fd = fd;
        k->carry = carry_len > 0 ? carry : NULL;
        k->carry_len = carry_len;
        if (!k->carry)
                free(carry);
        f = fopencookie(k, mode, fns);
        if (!f) {
                free(k->carry);
                free(k);
                return NULL;
        }
        f->_fileno = fd;
        return f;
}

_public_ FILE *fdopen(int fd, const char *mode) {
        __typeof__(fdopen) *f;

        if (fd >= 0 && smc_fd_is_smc_conn(fd))
                return smc_stream_open(fd, mode, NULL, 0);
        f = real_fdopen();
        if (!f) {
                errno = ENOSYS;
                return NULL;
        }
        return f(fd, mode);
}

static FILE *stdio_ours[3];

/* If SMC connection @fd is 0, 1 or 2 and the matching stdin/stdout/stderr is still a
 * stream on that descriptor, replace it by an SMC stream (see above). Called after
 * anything that can make 0-2 an SMC connection; never under the library's locks (the
 * moved bytes may be written at once). */
static void stdio_check(int fd) {
        FILE **slot, *old, *n;
        char *carry = NULL;
        size_t carry_len = 0;

        if (fd < 0 || fd > 2 || !smc_fd_is_smc_conn(fd))
                return;
        slot = fd == 0 ? &stdin : fd == 1 ? &stdout : &stderr;
        old = *slot;
        if (!old || old == stdio_ours[fd])
                return;
        flockfile(old);
        if (old->_fileno != fd) {
                /* the program pointed stdout elsewhere itself */
                funlockfile(old);
                return;
        }
        if (fd == 0 && old->_IO_read_ptr && old->_IO_read_ptr < old->_IO_read_end) {
                carry_len = (size_t) (old->_IO_read_end - old->_IO_read_ptr);
                carry = malloc(carry_len);
                if (!carry) {
                        funlockfile(old);
                        return;
                }
                memcpy(carry, old->_IO_read_ptr, carry_len);
        }
        n = smc_stream_open(fd, fd == 0 ? "r" : "w", carry, carry_len);
        if (!n) {
                funlockfile(old);
                return;
        }
        if (old->_flags & LIBIO_UNBUFFERED)
                setvbuf(n, NULL, _IONBF, 0);
        else if (old->_flags & LIBIO_LINE_BUF)
                setvbuf(n, NULL, _IOLBF, BUFSIZ);
        if (fd == 0)
                old->_IO_read_ptr = old->_IO_read_end;
        else if (old->_IO_write_ptr > old->_IO_write_base) {
                /* written before the descriptor changed, not flushed: TCP would send it
                 * on the new descriptor at the next flush */
                fwrite(old->_IO_write_base, 1, (size_t) (old->_IO_write_ptr - old->_IO_write_base), n);
                old->_IO_write_ptr = old->_IO_write_base;
        }
        old->_fileno = -1;
        stdio_ours[fd] = n;
        *slot = n;
        funlockfile(old);
}

/* dprintf's glibc path writes through a FILE on the descriptor: format here, write
 * through this library. @chk: _FORTIFY_SOURCE's flag, or -1 (plain). */
static int smc_vdprintf(int fd, int chk, const char *fmt, va_list ap) {
        char *s = NULL;
        int n = chk >= 0 ? __vasprintf_chk(&s, chk, fmt, ap) : vasprintf(&s, fmt, ap);
        size_t done = 0;

        if (n < 0)
                return -1;
        while (done < (size_t) n) {
                ssize_t r = write(fd, s + done, (size_t) n - done);

                if (r <= 0) {
                        free(s);
                        return -1;
                }
                done += (size_t) r;
        }
        free(s);
        return n;
}

_public_ int vdprintf(int fd, const char *fmt, va_list ap) {
        __typeof__(vdprintf) *f;

        if (fd >= 0 && smc_fd_is_smc_conn(fd))
                return smc_vdprintf(fd, -1, fmt, ap);
        f = real_vdprintf();
        if (!f) {
                errno = ENOSYS;
                return -1;
        }
        return f(fd, fmt, ap);
}

_public_ int dprintf(int fd, const char *fmt, ...) {
        va_list ap;
        int r;

        va_start(ap, fmt);
        r = vdprintf(fd, fmt, ap);
        va_end(ap);
        return r;
}

_public_ int __vdprintf_chk(int fd, int flag, const char *fmt, va_list ap) {
        __typeof__(__vdprintf_chk) *f;

        if (fd >= 0 && smc_fd_is_smc_conn(fd))
                return smc_vdprintf(fd, flag, fmt, ap);
        f = real___vdprintf_chk();
        if (!f) {
                errno = ENOSYS;
                return -1;
        }
        return f(fd, flag, fmt, ap);
}

_public_ int __dprintf_chk(int fd, int flag, const char *fmt, ...) {
        va_list ap;
        int r;

        va_start(ap, fmt);
        r = __vdprintf_chk(fd, flag, fmt, ap);
        va_end(ap);
        return r;
}
