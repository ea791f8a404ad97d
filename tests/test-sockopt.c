/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Socket options and ioctls of SMC-D connections against TCP's (issue 5, item 1):
 * against a private smcd (argv[1]), a plain TCP connection over loopback (libc) and
 * an SMC-D connection (smc_*) are made side by side with the same options, and every
 * answer of the listener, the connecting and the accepted socket is compared:
 *
 *   SO_TYPE / SO_DOMAIN / SO_PROTOCOL / SO_ACCEPTCONN / SO_ERROR, SO_KEEPALIVE with
 *   TCP_KEEPIDLE / KEEPINTVL / KEEPCNT, SO_LINGER, SO_REUSEADDR / SO_REUSEPORT,
 *   TCP_NODELAY, TCP_CORK, TCP_USER_TIMEOUT, SO_DONTROUTE, SO_TIMESTAMP, TCP_SYNCNT,
 *   IP_RECVTOS / IPV6_RECVTCLASS, IP_FREEBIND, IPV6_V6ONLY (inherited by the accepted
 *   socket), IP_MTU / IPV6_MTU, TCP_FASTOPEN(_CONNECT) set when connected (EINVAL),
 *   TCP_CONGESTION (default, set, unknown
 *   name: ENOENT), SO_SNDBUF / SO_RCVBUF (twice the ring, as TCP doubles), TCP_MAXSEG
 *   (listener; connected: TCP's advmss bounded by half the peer's ring; set before
 *   connect; bad values), TCP_INFO (length rules, state through shutdown and reset,
 *   path MTU, advmss, byte counters, unsent bytes under cork, rtt, cwnd), the
 *   ioctls FIONREAD / SIOCOUTQ / SIOCOUTQNSD, and bytes held by TCP_CORK or
 *   MSG_MORE reaching the peer without another call (TCP's 200 ms ceiling);
 *
 * once with defaults and once with options set on the listener and the client before
 * the connection (which the accepted socket inherits, as from a TCP listener), over
 * IPv4 and IPv6. TAP output.
 *
 *   test-sockopt SMCD_BINARY
 */

#include <arpa/inet.h>
#include <errno.h>
#include <linux/sockios.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "smcproto.h"
#include "sock-ops.h"

static int n_test, n_fail;

static void tap(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void tap(bool ok, const char *fmt, ...) {
        va_list ap;

        printf("%s %d - ", ok ? "ok" : "not ok", ++n_test);
        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
        printf("\n");
        fflush(stdout);
        if (!ok)
                n_fail++;
}

/* ---- the two APIs: sock_ops_tcp (libc) and sock_ops_smc (smc_*), tests/sock-ops.h ---- */

/* one connection: listener, connecting side, accepted side */
struct conn {
        const struct sock_ops *o;
        int l, c, a;
};

#define SIDES 3
static const char *const side_name[SIDES] = { "listener", "client", "accepted" };
static int side_fd(const struct conn *k, int side) {
        return side == 0 ? k->l : side == 1 ? k->c : k->a;
}

/* What the "options" configuration sets on the listener and on the client before
 * the connection. */
static int apply_opts(const struct sock_ops *o, int fd, bool listener) {
        int one = 1, v;
        struct linger lg = { 1, 3 };
        struct timeval tv = { 3, 0 };

        if (o->setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one)) < 0)
                return -errno;
        v = 77;
        if (o->setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &v, sizeof(v)) < 0)
                return -errno;
        v = 7;
        if (o->setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &v, sizeof(v)) < 0)
                return -errno;
        v = 5;
        if (o->setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &v, sizeof(v)) < 0)
                return -errno;
        /* options the accepted socket has from the listener too (helper 130: they
         * went back to their defaults) */
        if (o->setsockopt(fd, SOL_SOCKET, SO_DONTROUTE, &one, sizeof(one)) < 0 ||
            o->setsockopt(fd, SOL_SOCKET, SO_TIMESTAMP, &one, sizeof(one)) < 0)
                return -errno;
        v = 3;
        if (o->setsockopt(fd, IPPROTO_TCP, TCP_SYNCNT, &v, sizeof(v)) < 0)
                return -errno;
        {
                int fam = AF_INET;
                socklen_t fl = sizeof(fam);

                (void) o->getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &fam, &fl);
                if (fam == AF_INET && (o->setsockopt(fd, IPPROTO_IP, IP_RECVTOS, &one, sizeof(one)) < 0 ||
                                       o->setsockopt(fd, IPPROTO_IP, IP_FREEBIND, &one, sizeof(one)) < 0))
                        return -errno;
                if (fam == AF_INET6 && (o->setsockopt(fd, IPPROTO_IPV6, IPV6_RECVTCLASS, &one, sizeof(one)) < 0 ||
                                        o->setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one)) < 0))
                        return -errno;
        }
        if (o->setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0)
                return -errno;
        if (o->setsockopt(fd, IPPROTO_TCP, TCP_CORK, &one, sizeof(one)) < 0)
                return -errno;
        if (o->setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) < 0)
                return -errno;
        if (o->setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, "reno", 4) < 0)
                return -errno;
        /* the same on both ends: TCP's MSS is also clamped by the peer's, which SMC-D
         * does not learn */
        v = 1000;
        if (o->setsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &v, sizeof(v)) < 0)
                return -errno;
        v = 64 << 10;
        if (o->setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v)) < 0 ||
            o->setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v)) < 0)
                return -errno;
        v = 5000;
        if (o->setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &v, sizeof(v)) < 0)
                return -errno;
        if (o->setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0)
                return -errno;
        if (o->setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0)
                return -errno;
        return 0;
}

static int conn_open(struct conn *k, const struct sock_ops *o, int family, bool opts) {
        struct sockaddr_storage ss = { .ss_family = (sa_family_t) family };
        socklen_t sl = family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
        int one = 1, r;

        k->o = o;
        k->l = k->c = k->a = -1;
        if (family == AF_INET)
                ((struct sockaddr_in *) &ss)->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        else
                ((struct sockaddr_in6 *) &ss)->sin6_addr = in6addr_loopback;
        k->l = o->socket(family, SOCK_STREAM, 0);
        if (k->l < 0)
                return -errno;
        (void) o->setsockopt(k->l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (opts && (r = apply_opts(o, k->l, true)) < 0)
                return r;
        if (o->bind(k->l, (struct sockaddr *) &ss, sl) < 0 || o->listen(k->l, 8) < 0 ||
            o->getsockname(k->l, (struct sockaddr *) &ss, &sl) < 0)
                return -errno;
        k->c = o->socket(family, SOCK_STREAM, 0);
        if (k->c < 0)
                return -errno;
        if (opts && (r = apply_opts(o, k->c, false)) < 0)
                return r;
        if (o->connect(k->c, (struct sockaddr *) &ss, sl) < 0)
                return -errno;
        k->a = o->accept(k->l, NULL, NULL);
        if (k->a < 0)
                return -errno;
        return 0;
}

static void conn_close(struct conn *k) {
        if (k->a >= 0)
                k->o->close(k->a);
        if (k->c >= 0)
                k->o->close(k->c);
        if (k->l >= 0)
                k->o->close(k->l);
        k->l = k->c = k->a = -1;
}

/* ---- comparisons ---- */

static const char *ctx; /* "IPv4 defaults" ... */

struct answer {
        int r, err;
        socklen_t len;
        uint8_t val[512];
};

static void get(const struct conn *k, int side, int level, int name, socklen_t len, struct answer *a) {
        memset(a, 0, sizeof(*a));
        a->len = len;
        errno = 0;
        a->r = k->o->getsockopt(side_fd(k, side), level, name, a->val, &a->len);
        a->err = a->r < 0 ? errno : 0;
}

static int as_int(const struct answer *a) {
        int v;

        memcpy(&v, a->val, sizeof(v));
        return v;
}

/* The same answer (result, errno, length, bytes) from TCP and SMC-D on @side. */
static void cmp_opt_on(const struct conn *t, const struct conn *s, int side, int level, int name, const char *oname,
                       socklen_t len) {
        struct answer x, y;

        get(t, side, level, name, len, &x);
        get(s, side, level, name, len, &y);
        tap(x.r == y.r && x.err == y.err && x.len == y.len && !memcmp(x.val, y.val, x.len),
            "%s %s %s: TCP r %d errno %d len %u int %d, SMC-D r %d errno %d len %u int %d", ctx, side_name[side],
            oname, x.r, x.err, x.len, as_int(&x), y.r, y.err, y.len, as_int(&y));
}

/* ... on every side */
static void cmp_opt(const struct conn *t, const struct conn *s, int level, int name, const char *oname,
                    socklen_t len) {
        for (int side = 0; side < SIDES; side++)
                cmp_opt_on(t, s, side, level, name, oname, len);
}

#define CMP_INT(t, s, level, name) cmp_opt(t, s, level, name, #name, sizeof(int))

/* Set an option on one side of both and compare the results. */
static void cmp_set(const struct conn *t, const struct conn *s, int side, int level, int name, const char *oname,
                    const void *val, socklen_t len) {
        int rt, et, rs, es;

        errno = 0;
        rt = t->o->setsockopt(side_fd(t, side), level, name, val, len);
        et = rt < 0 ? errno : 0;
        errno = 0;
        rs = s->o->setsockopt(side_fd(s, side), level, name, val, len);
        es = rs < 0 ? errno : 0;
        tap(rt == rs && et == es, "%s %s set %s: TCP %d/%s, SMC-D %d/%s", ctx, side_name[side], oname, rt,
            strerror(et), rs, strerror(es));
}

static void cmp_ioctl(const struct conn *t, const struct conn *s, int side, unsigned long req, const char *rname) {
        int vt = -1, vs = -1, rt, rs, et, es;

        errno = 0;
        rt = t->o->ioctl(side_fd(t, side), req, &vt);
        et = rt < 0 ? errno : 0;
        errno = 0;
        rs = s->o->ioctl(side_fd(s, side), req, &vs);
        es = rs < 0 ? errno : 0;
        tap(rt == rs && et == es && (rt < 0 || vt == vs), "%s %s ioctl %s: TCP %d/%s %d, SMC-D %d/%s %d", ctx,
            side_name[side], rname, rt, strerror(et), vt, rs, strerror(es), vs);
}

static int tcpinfo(const struct conn *k, int side, struct tcp_info *ti) {
        socklen_t l = sizeof(*ti);

        memset(ti, 0, sizeof(*ti));
        return k->o->getsockopt(side_fd(k, side), IPPROTO_TCP, TCP_INFO, ti, &l);
}

static int get_int(const struct conn *k, int side, int level, int name) {
        int v = -1;
        socklen_t l = sizeof(v);

        if (k->o->getsockopt(side_fd(k, side), level, name, &v, &l) < 0)
                return -errno;
        return v;
}

/* TCP's state machine on loopback needs a moment for FIN / RST to arrive. */
static void settle(void) {
        sleep_ms(30);
}

/* Read exactly n bytes (or to EOF). */
static size_t drain(const struct conn *k, int fd, size_t n) {
        char buf[16384];
        size_t got = 0;

        while (got < n) {
                ssize_t r = k->o->recv(fd, buf, n - got < sizeof(buf) ? n - got : sizeof(buf), 0);

                if (r <= 0)
                        break;
                got += (size_t) r;
        }
        return got;
}

static size_t send_all(const struct conn *k, int fd, size_t n) {
        static char buf[16384];
        size_t sent = 0;

        while (sent < n) {
                ssize_t r = k->o->send(fd, buf, n - sent < sizeof(buf) ? n - sent : sizeof(buf), MSG_NOSIGNAL);

                if (r <= 0)
                        break;
                sent += (size_t) r;
        }
        return sent;
}

/* ---- the cases ---- */

static void options(const struct conn *t, const struct conn *s) {
        char cc[32];
        struct linger lg = { 1, 9 };
        int v;

        CMP_INT(t, s, SOL_SOCKET, SO_TYPE);
        CMP_INT(t, s, SOL_SOCKET, SO_DOMAIN);
        CMP_INT(t, s, SOL_SOCKET, SO_PROTOCOL);
        CMP_INT(t, s, SOL_SOCKET, SO_ACCEPTCONN);
        CMP_INT(t, s, SOL_SOCKET, SO_ERROR);
        CMP_INT(t, s, SOL_SOCKET, SO_KEEPALIVE);
        CMP_INT(t, s, SOL_SOCKET, SO_REUSEADDR);
        CMP_INT(t, s, SOL_SOCKET, SO_REUSEPORT);
        CMP_INT(t, s, IPPROTO_TCP, TCP_KEEPIDLE);
        CMP_INT(t, s, IPPROTO_TCP, TCP_KEEPINTVL);
        CMP_INT(t, s, IPPROTO_TCP, TCP_KEEPCNT);
        CMP_INT(t, s, IPPROTO_TCP, TCP_NODELAY);
        CMP_INT(t, s, IPPROTO_TCP, TCP_CORK);
        CMP_INT(t, s, IPPROTO_TCP, TCP_USER_TIMEOUT);
        CMP_INT(t, s, SOL_SOCKET, SO_DONTROUTE);
        CMP_INT(t, s, SOL_SOCKET, SO_TIMESTAMP);
        CMP_INT(t, s, IPPROTO_TCP, TCP_SYNCNT);
        CMP_INT(t, s, IPPROTO_IP, IP_RECVTOS);
        CMP_INT(t, s, IPPROTO_IP, IP_FREEBIND);
        CMP_INT(t, s, IPPROTO_IPV6, IPV6_RECVTCLASS);
        CMP_INT(t, s, IPPROTO_IPV6, IPV6_V6ONLY);
        CMP_INT(t, s, IPPROTO_IP, IP_MTU);
        CMP_INT(t, s, IPPROTO_IPV6, IPV6_MTU);
        cmp_opt(t, s, SOL_SOCKET, SO_LINGER, "SO_LINGER", sizeof(struct linger));
        cmp_opt(t, s, SOL_SOCKET, SO_RCVTIMEO, "SO_RCVTIMEO", sizeof(struct timeval));
        cmp_opt(t, s, IPPROTO_TCP, TCP_CONGESTION, "TCP_CONGESTION", 16);
        cmp_opt(t, s, IPPROTO_TCP, TCP_CONGESTION, "TCP_CONGESTION (3 bytes)", 3);
        cmp_opt(t, s, IPPROTO_TCP, TCP_NODELAY, "TCP_NODELAY (2 bytes)", 2);
        cmp_opt_on(t, s, 0, IPPROTO_TCP, TCP_MAXSEG, "TCP_MAXSEG", sizeof(int)); /* connected: segments() */

        /* set on the connected sockets, then read back */
        for (int side = 1; side < SIDES; side++) {
                v = 1;
                cmp_set(t, s, side, SOL_SOCKET, SO_KEEPALIVE, "SO_KEEPALIVE", &v, sizeof(v));
                v = 33;
                cmp_set(t, s, side, IPPROTO_TCP, TCP_KEEPIDLE, "TCP_KEEPIDLE", &v, sizeof(v));
                v = 0;
                cmp_set(t, s, side, IPPROTO_TCP, TCP_KEEPIDLE, "TCP_KEEPIDLE 0 (EINVAL)", &v, sizeof(v));
                v = 1;
                cmp_set(t, s, side, IPPROTO_TCP, TCP_NODELAY, "TCP_NODELAY", &v, sizeof(v));
                cmp_set(t, s, side, IPPROTO_TCP, TCP_NODELAY, "TCP_NODELAY (2 bytes: EINVAL)", &v, 2);
                cmp_set(t, s, side, SOL_SOCKET, SO_LINGER, "SO_LINGER", &lg, sizeof(lg));
                cmp_set(t, s, side, SOL_SOCKET, SO_LINGER, "SO_LINGER (short: EINVAL)", &lg, 4);
                cmp_set(t, s, side, IPPROTO_TCP, TCP_CONGESTION, "TCP_CONGESTION reno", "reno", 4);
                cmp_set(t, s, side, IPPROTO_TCP, TCP_CONGESTION, "TCP_CONGESTION nonesuch (ENOENT)", "nonesuch", 8);
                cmp_set(t, s, side, IPPROTO_TCP, TCP_CONGESTION, "TCP_CONGESTION \"\" (EINVAL)", "", 0);
                v = 50;
                cmp_set(t, s, side, IPPROTO_TCP, TCP_MAXSEG, "TCP_MAXSEG 50 (EINVAL)", &v, sizeof(v));
                v = 70000;
                cmp_set(t, s, side, IPPROTO_TCP, TCP_MAXSEG, "TCP_MAXSEG 70000 (EINVAL)", &v, sizeof(v));
                v = 0;
                cmp_set(t, s, side, IPPROTO_TCP, TCP_WINDOW_CLAMP, "TCP_WINDOW_CLAMP 0 connected (EINVAL)", &v,
                        sizeof(v));
                v = 5;
                cmp_set(t, s, side, IPPROTO_TCP, TCP_FASTOPEN, "TCP_FASTOPEN connected (EINVAL)", &v, sizeof(v));
                v = 1;
                cmp_set(t, s, side, IPPROTO_TCP, TCP_FASTOPEN_CONNECT, "TCP_FASTOPEN_CONNECT connected (EINVAL)", &v,
                        sizeof(v));
        }
        CMP_INT(t, s, SOL_SOCKET, SO_KEEPALIVE);
        CMP_INT(t, s, IPPROTO_TCP, TCP_KEEPIDLE);
        CMP_INT(t, s, IPPROTO_TCP, TCP_NODELAY);
        cmp_opt(t, s, SOL_SOCKET, SO_LINGER, "SO_LINGER", sizeof(struct linger));
        cmp_opt(t, s, IPPROTO_TCP, TCP_CONGESTION, "TCP_CONGESTION", sizeof(cc));
}

/* TCP_MAXSEG and the path figures of TCP_INFO. */
static void segments(const struct conn *t, const struct conn *s, bool opts) {
        for (int side = 1; side < SIDES; side++) {
                struct tcp_info x, y;
                int mt = get_int(t, side, IPPROTO_TCP, TCP_MAXSEG), ms = get_int(s, side, IPPROTO_TCP, TCP_MAXSEG);
                int ring = get_int(s, side, SOL_SOCKET, SO_SNDBUF) / 2;
                uint32_t want;

                if (tcpinfo(t, side, &x) < 0 || tcpinfo(s, side, &y) < 0) {
                        tap(false, "%s %s TCP_INFO: %m", ctx, side_name[side]);
                        continue;
                }
                tap(x.tcpi_pmtu == y.tcpi_pmtu, "%s %s tcpi_pmtu: TCP %u, SMC-D %u", ctx, side_name[side],
                    x.tcpi_pmtu, y.tcpi_pmtu);
                tap(x.tcpi_advmss == y.tcpi_advmss, "%s %s tcpi_advmss: TCP %u, SMC-D %u", ctx,
                            side_name[side], x.tcpi_advmss, y.tcpi_advmss);
                want = y.tcpi_advmss < (uint32_t) ring / 2 ? y.tcpi_advmss : (uint32_t) ring / 2;
                tap(ms > 0 && (uint32_t) ms == want && y.tcpi_snd_mss == (uint32_t) ms && y.tcpi_rcv_mss == (uint32_t) ms,
                    "%s %s TCP_MAXSEG: SMC-D %d (= min(advmss %u, ring %d / 2), snd_mss %u rcv_mss %u); TCP %d "
                    "(snd_mss %u)",
                    ctx, side_name[side], ms, y.tcpi_advmss, ring, y.tcpi_snd_mss, y.tcpi_rcv_mss, mt, x.tcpi_snd_mss);
                if (opts) /* TCP_MAXSEG 1000 set before: the clamp wins over half the window */
                        tap(mt == ms, "%s %s TCP_MAXSEG set before the connection: TCP %d, SMC-D %d", ctx,
                            side_name[side], mt, ms);
                tap((x.tcpi_options & TCPI_OPT_TIMESTAMPS) == (y.tcpi_options & TCPI_OPT_TIMESTAMPS),
                    "%s %s timestamps option: TCP %d, SMC-D %d", ctx, side_name[side],
                    x.tcpi_options & TCPI_OPT_TIMESTAMPS, y.tcpi_options & TCPI_OPT_TIMESTAMPS);
                tap(y.tcpi_rtt > 0 && y.tcpi_rtt <= 1000 && y.tcpi_rto == 200000 && y.tcpi_min_rtt > 0,
                    "%s %s rtt %u us rto %u min_rtt %u (TCP: %u / %u / %u)", ctx, side_name[side], y.tcpi_rtt,
                    y.tcpi_rto, y.tcpi_min_rtt, x.tcpi_rtt, x.tcpi_rto, x.tcpi_min_rtt);
                tap(y.tcpi_snd_cwnd > 0 && (uint64_t) y.tcpi_snd_cwnd * y.tcpi_snd_mss >= (uint64_t) ring &&
                    y.tcpi_snd_ssthresh == x.tcpi_snd_ssthresh,
                    "%s %s snd_cwnd %u x mss %u covers the ring %d; snd_ssthresh %u (TCP %u)", ctx, side_name[side],
                    y.tcpi_snd_cwnd, y.tcpi_snd_mss, ring, y.tcpi_snd_ssthresh, x.tcpi_snd_ssthresh);
                tap((int) y.tcpi_rcv_space == get_int(s, side, SOL_SOCKET, SO_RCVBUF) / 2,
                    "%s %s rcv_space %u = the receive ring (SO_RCVBUF / 2 = %d)", ctx, side_name[side],
                    y.tcpi_rcv_space, get_int(s, side, SOL_SOCKET, SO_RCVBUF) / 2);
        }
        /* after the connection TCP_MAXSEG is stored, the MSS does not change */
        for (int side = 1; side < SIDES; side++) {
                int v = 1200, before = get_int(s, side, IPPROTO_TCP, TCP_MAXSEG);

                cmp_set(t, s, side, IPPROTO_TCP, TCP_MAXSEG, "TCP_MAXSEG 1200 when connected", &v, sizeof(v));
                tap(get_int(s, side, IPPROTO_TCP, TCP_MAXSEG) == before, "%s %s TCP_MAXSEG unchanged: %d", ctx,
                    side_name[side], before);
        }
}

static void buffers(const struct conn *t, const struct conn *s, bool opts) {
        if (opts) {
                /* 64 KiB asked on every socket: TCP reports twice that, SMC-D twice its
                 * 64 KiB rings */
                CMP_INT(t, s, SOL_SOCKET, SO_SNDBUF);
                CMP_INT(t, s, SOL_SOCKET, SO_RCVBUF);
                return;
        }
        for (int side = 1; side < SIDES; side++) {
                int sb = get_int(s, side, SOL_SOCKET, SO_SNDBUF), rb = get_int(s, side, SOL_SOCKET, SO_RCVBUF);

                tap(sb >= (32 << 10) && !((sb / 2) & (sb / 2 - 1)) && rb >= (32 << 10) && !((rb / 2) & (rb / 2 - 1)),
                    "%s %s SO_SNDBUF %d, SO_RCVBUF %d: twice a ring size (TCP %d, %d)", ctx, side_name[side], sb, rb,
                    get_int(t, side, SOL_SOCKET, SO_SNDBUF), get_int(t, side, SOL_SOCKET, SO_RCVBUF));
        }
}

#define CORKED 500 /* bytes; less than the smallest MSS here (988) */

/* TCP_INFO's length rules, byte counters, unsent bytes, ioctls. */
static void info_data(const struct conn *t, const struct conn *s, bool opts) {
        const size_t n = 100000;
        struct tcp_info x, y;
        int one = 1, zero = 0;

        /* lengths: TCP_INFO takes any length, copies what fits and says how much */
        for (int side = 0; side < SIDES; side++) {
                static const socklen_t lens[] = { 0, 1, 5, 104, sizeof(struct tcp_info), 512 };

                for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
                        struct answer at, as;

                        get(t, side, IPPROTO_TCP, TCP_INFO, lens[i], &at);
                        get(s, side, IPPROTO_TCP, TCP_INFO, lens[i], &as);
                        tap(at.r == as.r && at.len == as.len && (lens[i] == 0 || at.val[0] == as.val[0]),
                            "%s %s TCP_INFO len %u: TCP r %d len %u state %u, SMC-D r %d len %u state %u", ctx,
                            side_name[side], lens[i], at.r, at.len, at.val[0], as.r, as.len, as.val[0]);
                }
                {
                        struct answer at, as;

                        get(t, side, IPPROTO_TCP, TCP_INFO, (socklen_t) -1, &at);
                        get(s, side, IPPROTO_TCP, TCP_INFO, (socklen_t) -1, &as);
                        tap(at.r == as.r && at.err == as.err, "%s %s TCP_INFO len -1: TCP %d/%s, SMC-D %d/%s", ctx,
                            side_name[side], at.r, strerror(at.err), as.r, strerror(as.err));
                }
        }
        for (int side = 0; side < SIDES; side++) {
                cmp_ioctl(t, s, side, FIONREAD, "FIONREAD");
                cmp_ioctl(t, s, side, SIOCOUTQ, "SIOCOUTQ");
                cmp_ioctl(t, s, side, SIOCOUTQNSD, "SIOCOUTQNSD");
        }

        /* corked: the bytes wait unsent (the options case is corked already). Less
         * than a segment: TCP sends full segments even when corked, SMC-D holds
         * everything up to the autocork size */
        for (int side = 1; side < SIDES; side++) {
                const struct conn *k[2] = { t, s };

                for (int i = 0; i < 2; i++)
                        if (k[i]->o->setsockopt(side_fd(k[i], side), IPPROTO_TCP, TCP_CORK, &one, sizeof(one)) < 0 ||
                            send_all(k[i], side_fd(k[i], side), CORKED) != CORKED)
                                tap(false, "%s %s cork + send %d: %m", ctx, k[i]->o->label, CORKED);
                settle();
                cmp_ioctl(t, s, side, SIOCOUTQ, "SIOCOUTQ corked");
                cmp_ioctl(t, s, side, SIOCOUTQNSD, "SIOCOUTQNSD corked");
                cmp_ioctl(t, s, 3 - side, FIONREAD, "FIONREAD (peer corked)");
                if (tcpinfo(t, side, &x) == 0 && tcpinfo(s, side, &y) == 0)
                        tap(x.tcpi_notsent_bytes == y.tcpi_notsent_bytes && y.tcpi_notsent_bytes == CORKED,
                            "%s %s tcpi_notsent_bytes corked: TCP %u, SMC-D %u", ctx, side_name[side],
                            x.tcpi_notsent_bytes, y.tcpi_notsent_bytes);
                cmp_set(t, s, side, IPPROTO_TCP, TCP_CORK, "TCP_CORK 0", &zero, sizeof(zero));
                settle();
                cmp_ioctl(t, s, side, SIOCOUTQNSD, "SIOCOUTQNSD uncorked");
                cmp_ioctl(t, s, 3 - side, FIONREAD, "FIONREAD (peer uncorked)");
                if (drain(t, side_fd(t, 3 - side), CORKED) != CORKED || drain(s, side_fd(s, 3 - side), CORKED) != CORKED)
                        tap(false, "%s reading the corked bytes", ctx);
                settle();
                cmp_ioctl(t, s, side, SIOCOUTQ, "SIOCOUTQ all read");
        }

        /* bytes: n from the client, all read by the accepted side */
        for (size_t done = 0; done < n; done += 10000) /* one process: in pieces that fit */
                if (send_all(t, t->c, 10000) != 10000 || drain(t, t->a, 10000) != 10000 ||
                    send_all(s, s->c, 10000) != 10000 || drain(s, s->a, 10000) != 10000) {
                        tap(false, "%s sending %zu bytes", ctx, n);
                        break;
                }
        settle();
        if (tcpinfo(t, 1, &x) == 0 && tcpinfo(s, 1, &y) == 0) {
                tap(x.tcpi_bytes_sent == y.tcpi_bytes_sent, "%s client bytes_sent: TCP %llu, SMC-D %llu", ctx,
                    (unsigned long long) x.tcpi_bytes_sent, (unsigned long long) y.tcpi_bytes_sent);
                /* TCP counts the SYN as one byte acknowledged */
                tap(y.tcpi_bytes_acked == n + CORKED && (x.tcpi_bytes_acked == y.tcpi_bytes_acked ||
                                                       x.tcpi_bytes_acked == y.tcpi_bytes_acked + 1),
                    "%s client bytes_acked: TCP %llu, SMC-D %llu", ctx, (unsigned long long) x.tcpi_bytes_acked,
                    (unsigned long long) y.tcpi_bytes_acked);
                tap(y.tcpi_unacked == 0 && x.tcpi_unacked == 0 && y.tcpi_notsent_bytes == 0,
                    "%s client unacked %u notsent %u (TCP %u %u)", ctx, y.tcpi_unacked, y.tcpi_notsent_bytes,
                    x.tcpi_unacked, x.tcpi_notsent_bytes);
                tap(y.tcpi_data_segs_out >= 2 && y.tcpi_segs_out >= y.tcpi_data_segs_out,
                    "%s client data_segs_out %u segs_out %u (TCP %u %u)", ctx, y.tcpi_data_segs_out, y.tcpi_segs_out,
                    x.tcpi_data_segs_out, x.tcpi_segs_out);
        }
        if (tcpinfo(t, 2, &x) == 0 && tcpinfo(s, 2, &y) == 0) {
                tap(x.tcpi_bytes_received == y.tcpi_bytes_received && y.tcpi_bytes_received == n + CORKED,
                    "%s accepted bytes_received: TCP %llu, SMC-D %llu", ctx, (unsigned long long) x.tcpi_bytes_received,
                    (unsigned long long) y.tcpi_bytes_received);
                tap(y.tcpi_data_segs_in >= 2 && y.tcpi_segs_in >= y.tcpi_data_segs_in,
                    "%s accepted data_segs_in %u segs_in %u (TCP %u %u)", ctx, y.tcpi_data_segs_in, y.tcpi_segs_in,
                    x.tcpi_data_segs_in, x.tcpi_segs_in);
        }
        /* sent, not read yet: in flight for SMC-D (the ring is the receive queue) */
        if (send_all(s, s->c, 5000) == 5000 && tcpinfo(s, 1, &y) == 0)
                tap(y.tcpi_unacked == (5000 + y.tcpi_snd_mss - 1) / y.tcpi_snd_mss && y.tcpi_snd_wnd == (uint32_t) get_int(s, 1, SOL_SOCKET, SO_SNDBUF) / 2 - 5000,
                    "%s client, 5000 bytes unread: unacked %u, snd_wnd %u", ctx, y.tcpi_unacked, y.tcpi_snd_wnd);
        (void) drain(s, s->a, 5000);
        (void) opts;
}

static unsigned state(const struct conn *k, int side) {
        struct tcp_info ti;

        return tcpinfo(k, side, &ti) == 0 ? ti.tcpi_state : 255;
}

static void cmp_states(const struct conn *t, const struct conn *s, const char *when) {
        for (int side = 0; side < SIDES; side++)
                tap(state(t, side) == state(s, side), "%s %s tcpi_state %s: TCP %u, SMC-D %u", ctx, side_name[side],
                    when, state(t, side), state(s, side));
}

static void states(const struct conn *t, const struct conn *s) {
        cmp_states(t, s, "established");
        t->o->shutdown(t->c, SHUT_WR);
        s->o->shutdown(s->c, SHUT_WR);
        settle();
        /* TCP's FIN_WAIT1 lasts until the peer acknowledges the FIN (a delayed ACK) */
        for (int i = 0; i < 50 && state(t, 1) == 4 /* TCP_FIN_WAIT1 */; i++)
                sleep_ms(20);
        cmp_states(t, s, "after the client's SHUT_WR");
        t->o->shutdown(t->a, SHUT_WR);
        s->o->shutdown(s->a, SHUT_WR);
        settle();
        cmp_states(t, s, "after both SHUT_WR");
}

/* A close with unread data resets the connection: SO_ERROR ECONNRESET once. */
static void reset(struct conn *t, struct conn *s) {
        const struct conn *k[2] = { t, s };

        for (int i = 0; i < 2; i++)
                (void) send_all(k[i], k[i]->c, 100);
        settle();
        t->o->close(t->a);
        s->o->close(s->a);
        t->a = s->a = -1;
        settle();
        {
                struct tcp_info x, y;

                if (tcpinfo(t, 1, &x) == 0 && tcpinfo(s, 1, &y) == 0)
                        tap(x.tcpi_state == y.tcpi_state, "%s client tcpi_state after a reset: TCP %u, SMC-D %u", ctx,
                            x.tcpi_state, y.tcpi_state);
        }
        for (int n = 0; n < 2; n++) {
                int et = get_int(t, 1, SOL_SOCKET, SO_ERROR), es = get_int(s, 1, SOL_SOCKET, SO_ERROR);

                tap(et == es, "%s client SO_ERROR after a reset (%s read): TCP %d, SMC-D %d", ctx, n ? "second" : "first",
                    et, es);
        }
}

/* SO_LINGER on with a zero timeout: the close resets even with nothing unread (TCP
 * sends RST); the peer's read fails with ECONNRESET. */
static void linger_reset(struct conn *t, struct conn *s) {
        const struct conn *k[2] = { t, s };
        struct linger lg = { .l_onoff = 1, .l_linger = 0 };
        int err[2];

        for (int i = 0; i < 2; i++) {
                char b[16];
                ssize_t n;

                tap(k[i]->o->setsockopt(k[i]->a, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) == 0,
                    "%s %s SO_LINGER {1, 0} on the accepted socket", ctx, k[i]->o->label);
                (void) k[i]->o->close(k[i]->a);
                ((struct conn *) k[i])->a = -1;
                settle();
                n = k[i]->o->recv(k[i]->c, b, sizeof(b), MSG_DONTWAIT);
                err[i] = n < 0 ? errno : n == 0 ? 0 : -1;
        }
        tap(err[0] == err[1] && err[0] == ECONNRESET,
            "%s SO_LINGER {1, 0} close with nothing unread: the peer's read: TCP %s, SMC-D %s", ctx,
            err[0] ? strerror(err[0]) : "EOF", err[1] ? strerror(err[1]) : "EOF");
}

/* The same on a socket shared by fork: the linger set before the fork, the parent's
 * close ends nothing (the child holds a copy), the child's (the last) resets. For
 * SMC-D only smcd sees that last close (smcd(8)): the option must reach it. */
static int recv_wait(const struct conn *k, int ms) {
        char b[16];

        for (int i = 0;; i++) {
                ssize_t n = k->o->recv(k->c, b, sizeof(b), MSG_DONTWAIT);

                if (n >= 0)
                        return n == 0 ? 0 : -1;
                if (errno != EAGAIN || i * 10 >= ms)
                        return errno;
                sleep_ms(10);
        }
}

/* TCP sends what a cork or MSG_MORE held back after at most 200 ms, even if the
 * program never uncorks nor sends again (tcp(7)): a request ended with MSG_MORE gets
 * its reply. The peer must see the bytes without another call of the sender (waited
 * for up to 3 s: a bound, not a timing goal). */
static void cork_ceiling(const struct conn *t, const struct conn *s) {
        const struct conn *k[2] = { t, s };

        for (int i = 0; i < 2; i++)
                for (int more = 0; more < 2; more++) {
                        struct pollfd p = { .fd = k[i]->a, .events = POLLIN };
                        int one = 1, zero = 0, r;
                        char b[8];
                        ssize_t n;

                        if (!more && k[i]->o->setsockopt(k[i]->c, IPPROTO_TCP, TCP_CORK, &one, sizeof(one)) < 0) {
                                tap(false, "%s %s TCP_CORK: %m", ctx, k[i]->o->label);
                                continue;
                        }
                        n = k[i]->o->send(k[i]->c, "held", 4, MSG_NOSIGNAL | (more ? MSG_MORE : 0));
                        r = k[i]->o->poll(&p, 1, 3000);
                        tap(n == 4 && r == 1 && (p.revents & POLLIN), "%s %s %s: the held bytes arrive by themselves (send %zd, poll %d revents %#x)",
                            ctx, k[i]->o->label, more ? "MSG_MORE" : "TCP_CORK", n, r, p.revents);
                        n = k[i]->o->recv(k[i]->a, b, sizeof(b), MSG_DONTWAIT);
                        tap(n == 4 && memcmp(b, "held", 4) == 0, "%s %s %s: read %zd", ctx, k[i]->o->label,
                            more ? "MSG_MORE" : "TCP_CORK", n);
                        if (!more)
                                (void) k[i]->o->setsockopt(k[i]->c, IPPROTO_TCP, TCP_CORK, &zero, sizeof(zero));
                }
}

static void linger_reset_shared(struct conn *t, struct conn *s) {
        const struct conn *k[2] = { t, s };
        struct linger lg = { .l_onoff = 1, .l_linger = 0 };
        int before[2], after[2];

        for (int i = 0; i < 2; i++) {
                int go[2];
                pid_t pid;

                before[i] = after[i] = -2;
                tap(k[i]->o->setsockopt(k[i]->a, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) == 0,
                    "%s %s SO_LINGER {1, 0} on the accepted socket, then fork", ctx, k[i]->o->label);
                if (pipe(go) < 0)
                        continue;
                fflush(NULL);
                pid = fork();
                if (pid == 0) {
                        char c;

                        close(go[1]);
                        (void) !read(go[0], &c, 1);
                        k[i]->o->close(k[i]->a);
                        _exit(0);
                }
                close(go[0]);
                (void) k[i]->o->close(k[i]->a);
                ((struct conn *) k[i])->a = -1;
                /* the child still holds it: nothing happened to the connection */
                before[i] = recv_wait(k[i], 100);
                close(go[1]);
                if (pid > 0)
                        (void) waitpid(pid, NULL, 0);
                after[i] = recv_wait(k[i], 5000);
        }
        tap(before[0] == before[1] && before[0] == EAGAIN,
            "%s SO_LINGER {1, 0}, shared by fork: after the first close the peer's read: TCP %s, SMC-D %s", ctx,
            strerror(before[0]), strerror(before[1]));
        tap(after[0] == after[1] && after[0] == ECONNRESET,
            "%s SO_LINGER {1, 0}, shared by fork: after the last close the peer's read: TCP %s, SMC-D %s", ctx,
            after[0] ? strerror(after[0]) : "EOF", after[1] ? strerror(after[1]) : "EOF");
}

static int mode(int fd) {
        int m = -1;
        socklen_t l = sizeof(m);

        (void) smc_getsockopt(fd, SOL_SMC, SMC_PROTO_MODE, &m, &l);
        return m;
}

static void run(int family, bool opts) {
        char name[64];
        struct conn t, s;
        int r;

        snprintf(name, sizeof(name), "%s %s", family == AF_INET ? "IPv4" : "IPv6", opts ? "options" : "defaults");
        ctx = name;
        r = conn_open(&t, &sock_ops_tcp, family, opts);
        if (r < 0) {
                tap(false, "%s: TCP connection: %s", ctx, strerror(-r));
                conn_close(&t);
                return;
        }
        r = conn_open(&s, &sock_ops_smc, family, opts);
        if (r < 0 || mode(s.c) != SMC_PROTO_MODE_SMCD || mode(s.a) != SMC_PROTO_MODE_SMCD) {
                tap(false, "%s: SMC-D connection: %s, modes %d %d", ctx, strerror(-r), mode(s.c), mode(s.a));
                conn_close(&t);
                conn_close(&s);
                return;
        }
        tap(true, "%s: a TCP and an SMC-D connection", ctx);
        options(&t, &s);
        segments(&t, &s, opts);
        buffers(&t, &s, opts);
        info_data(&t, &s, opts);
        if (!opts) /* (the options case is corked already) */
                cork_ceiling(&t, &s);
        states(&t, &s);
        conn_close(&t);
        conn_close(&s);

        /* a fresh pair for the reset */
        if (conn_open(&t, &sock_ops_tcp, family, false) == 0 && conn_open(&s, &sock_ops_smc, family, false) == 0)
                reset(&t, &s);
        else
                tap(false, "%s: second connection pair", ctx);
        conn_close(&t);
        conn_close(&s);

        if (conn_open(&t, &sock_ops_tcp, family, false) == 0 && conn_open(&s, &sock_ops_smc, family, false) == 0)
                linger_reset(&t, &s);
        else
                tap(false, "%s: third connection pair", ctx);
        conn_close(&t);
        conn_close(&s);

        if (conn_open(&t, &sock_ops_tcp, family, false) == 0 && conn_open(&s, &sock_ops_smc, family, false) == 0)
                linger_reset_shared(&t, &s);
        else
                tap(false, "%s: fourth connection pair", ctx);
        conn_close(&t);
        conn_close(&s);
}

int main(int argc, char **argv) {
        struct smcd_instance smcd;
        int r, status = 0;

        if (argc < 2) {
                fprintf(stderr, "usage: %s SMCD_BINARY\n", argv[0]);
                return 2;
        }
        signal(SIGPIPE, SIG_IGN);
        if (smcd_start_for_api(&smcd, argv[1]) < 0)
                return 1;

        run(AF_INET, false);
        run(AF_INET, true);
        run(AF_INET6, false);
        run(AF_INET6, true);

        r = smcd_stop(&smcd, 5000, &status);
        tap(r == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0, "smcd exits cleanly (status 0x%x)", status);
        if (n_fail)
                smcd_log_dump(&smcd, stdout, 20);
        smcd_instance_cleanup(&smcd);
        printf("1..%d\n", n_test);
        return n_fail ? 1 : 0;
}
