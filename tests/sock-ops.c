/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The libc and libsmcproto socket tables of tests/sock-ops.h. */

#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "smcproto.h"
#include "sock-ops.h"

static int tcp_socket(int d, int t, int p) { return socket(d, t, p); }
static int tcp_bind(int fd, const struct sockaddr *a, socklen_t l) { return bind(fd, a, l); }
static int tcp_listen(int fd, int b) { return listen(fd, b); }
static int tcp_accept(int fd, struct sockaddr *a, socklen_t *l) { return accept(fd, a, l); }
static int tcp_connect(int fd, const struct sockaddr *a, socklen_t l) { return connect(fd, a, l); }
static ssize_t tcp_send(int fd, const void *b, size_t n, int f) { return send(fd, b, n, f); }
static ssize_t tcp_recv(int fd, void *b, size_t n, int f) { return recv(fd, b, n, f); }
static int tcp_shutdown(int fd, int how) { return shutdown(fd, how); }
static int tcp_close(int fd) { return close(fd); }
static int tcp_setsockopt(int fd, int lv, int nm, const void *v, socklen_t l) { return setsockopt(fd, lv, nm, v, l); }
static int tcp_getsockopt(int fd, int lv, int nm, void *v, socklen_t *l) { return getsockopt(fd, lv, nm, v, l); }
static int tcp_getsockname(int fd, struct sockaddr *a, socklen_t *l) { return getsockname(fd, a, l); }
static int tcp_getpeername(int fd, struct sockaddr *a, socklen_t *l) { return getpeername(fd, a, l); }
static int tcp_poll(struct pollfd *p, nfds_t n, int t) { return poll(p, n, t); }
static int tcp_ioctl(int fd, unsigned long req, void *arg) { return ioctl(fd, req, arg); }
static int tcp_set_nonblock(int fd, bool on) {
        int fl = fcntl(fd, F_GETFL);

        if (fl < 0)
                return -1;
        return fcntl(fd, F_SETFL, on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK);
}
static int smc_set_nonblock(int fd, bool on) {
        int fl = smc_fcntl(fd, F_GETFL);

        if (fl < 0)
                return -1;
        return smc_fcntl(fd, F_SETFL, on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK);
}

const struct sock_ops sock_ops_tcp = {
        .name = "tcp", .label = "TCP", .smc = false,
        .socket = tcp_socket, .bind = tcp_bind, .listen = tcp_listen, .accept = tcp_accept,
        .connect = tcp_connect, .send = tcp_send, .recv = tcp_recv, .shutdown = tcp_shutdown,
        .close = tcp_close, .setsockopt = tcp_setsockopt, .getsockopt = tcp_getsockopt,
        .getsockname = tcp_getsockname, .getpeername = tcp_getpeername, .poll = tcp_poll,
        .ioctl = tcp_ioctl, .set_nonblock = tcp_set_nonblock,
};

const struct sock_ops sock_ops_smc = {
        .name = "smc", .label = "SMC-D", .smc = true,
        .socket = smc_socket, .bind = smc_bind, .listen = smc_listen, .accept = smc_accept,
        .connect = smc_connect, .send = smc_send, .recv = smc_recv, .shutdown = smc_shutdown,
        .close = smc_close, .setsockopt = smc_setsockopt, .getsockopt = smc_getsockopt,
        .getsockname = smc_getsockname, .getpeername = smc_getpeername, .poll = smc_poll,
        .ioctl = smc_ioctl, .set_nonblock = smc_set_nonblock,
};
