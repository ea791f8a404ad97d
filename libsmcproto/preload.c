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
 * Not intercepted, on purpose: select, pselect, ppoll and epoll_*. An SMC socket is a
 * real descriptor whose kernel readiness is exact (an AF_UNIX socketpair end for a
 * connection, an epoll descriptor for a listener; see smcproto.h), so the kernel
 * answers those calls itself. poll() is intercepted only so that a set containing an
 * SMC socket goes through smc_poll(), which also looks at the rings.
 *
 * dup2/dup3 onto the number of an SMC socket make the library forget that socket (as
 * close would, but the number now names the new file).
 *
 * Not handled (a later issue): fork (both processes would share one ring endpoint),
 * exec (the new image does not know the inherited SMC descriptors and treats them as
 * plain descriptors), a duplicate of an SMC socket (dup, F_DUPFD, dup2/dup3 from it: the
 * copy is the bare socketpair end, not an SMC socket), splice, sendmmsg/recvmmsg.
 * sendfile is intercepted (smc_sendfile).
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
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <sys/ioctl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

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

/* Resolve everything early (before main), so the hot paths never take the slow path.
 * Calls made before this constructor runs resolve lazily. */
__attribute__((constructor)) static void smcrun_init(void) {
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

        if (managed(fd))
                return smc_listen(fd, backlog);
        f = real_listen();
        return f ? f(fd, backlog) : sys_listen(fd, backlog);
}

_public_ int accept(int fd, struct sockaddr *addr, socklen_t *len) {
        __typeof__(accept) *f;

        if (managed(fd))
                return smc_accept(fd, addr, len);
        f = real_accept();
        return f ? f(fd, addr, len) : sys_accept4(fd, addr, len, 0);
}

_public_ int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags) {
        __typeof__(accept4) *f;

        if (managed(fd))
                return smc_accept4(fd, addr, len, flags);
        f = real_accept4();
        return f ? f(fd, addr, len, flags) : sys_accept4(fd, addr, len, flags);
}

_public_ int connect(int fd, const struct sockaddr *addr, socklen_t len) {
        __typeof__(connect) *f;

        if (managed(fd))
                return smc_connect(fd, addr, len);
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

        if (managed(fd))
                return smc_close(fd);
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

/* The new descriptor replaces whatever newfd was: if that was an SMC socket, its state
 * must go (smc_fd_forget closes the connection but not the number, which dup2 reuses). */
_public_ int dup2(int oldfd, int newfd) {
        __typeof__(dup2) *f;

        if (oldfd != newfd && managed(newfd) && fcntl(oldfd, F_GETFD) >= 0)
                smc_fd_forget(newfd);
        f = real_dup2();
        return f ? f(oldfd, newfd) : sys_dup3(oldfd, newfd, 0);
}

_public_ int dup3(int oldfd, int newfd, int flags) {
        __typeof__(dup3) *f;

        if (oldfd != newfd && managed(newfd) && fcntl(oldfd, F_GETFD) >= 0)
                smc_fd_forget(newfd);
        f = real_dup3();
        return f ? f(oldfd, newfd, flags) : sys_dup3(oldfd, newfd, flags);
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
                if (flags & MSG_FASTOPEN)
                        return smc_sendto(fd, buf, len, flags, to, tolen);
                return smc_send(fd, buf, len, flags);
        }
        f = real_sendto();
        return f ? f(fd, buf, len, flags, to, tolen) : sys_sendto(fd, buf, len, flags, to, tolen);
}

_public_ ssize_t sendmsg(int fd, const struct msghdr *msg, int flags) {
        __typeof__(sendmsg) *f;

        if (managed(fd))
                return smc_sendmsg(fd, msg, flags);
        f = real_sendmsg();
        return f ? f(fd, msg, flags) : sys_sendmsg(fd, msg, flags);
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

        if (managed(fd))
                return smc_recvmsg(fd, msg, recv_flags(flags));
        f = real_recvmsg();
        return f ? f(fd, msg, flags) : sys_recvmsg(fd, msg, flags);
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

/* ---- poll ---------------------------------------------------------------------------- */

static bool any_managed(const struct pollfd *fds, nfds_t nfds) {
        for (nfds_t i = 0; i < nfds; i++)
                if (managed(fds[i].fd))
                        return true;
        return false;
}

_public_ int poll(struct pollfd *fds, nfds_t nfds, int timeout) {
        __typeof__(poll) *f;

        if (any_managed(fds, nfds))
                return smc_poll(fds, nfds, timeout);
        f = real_poll();
        return f ? f(fds, nfds, timeout) : sys_poll(fds, nfds, timeout);
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

        if (managed(fd)) {
                if (kind == FCNTL_ARG_PTR)
                        return smc_fcntl(fd, cmd, p);
                if (kind == FCNTL_ARG_INT)
                        return smc_fcntl(fd, cmd, i);
                return smc_fcntl(fd, cmd);
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
