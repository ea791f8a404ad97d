/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The client side of tests/test-stats.sh: real connections through libsmcproto to an
 * smcd the script started, doing an exactly known number of calls, then one JSON line
 * on stdout with what it did (the figures smcd's counters must show). Exit 0 on
 * success, 1 on a failed check (printed on stderr), 2 on bad usage.
 *
 *   test-stats-client traffic
 *       3 SMC-D connections (client and server ends in this process): per connection
 *       5 + 3 + 3 client sends (plain, TCP_CORK'ed, MSG_MORE) and 3 + 2 server sends
 *       (plain, MSG_MORE); every recv call that returns data is counted; 3 cork
 *       flushes per connection. Prints conns, send_calls, recv_calls, cork_flushes,
 *       bytes_tx (client to server), bytes_rx (server to client).
 *   test-stats-client fallback
 *       one connection to a plain TCP listener (no SMC listener: PEERNOSMC, a client
 *       fallback only) and three to an SMC listener with backlog 1 that nobody
 *       accepts from until the third (the accept queue is full: PEERDECL, a server
 *       fallback too); data checked on each. Prints connects, smcd, tcp, peernosmc,
 *       peerdecl.
 *   test-stats-client hold DIR
 *       two SMC-D connections; 1 MiB each way over the second with a checksum; then
 *       DIR/ready, wait for DIR/go (30 s at most), close. Prints bytes.
 */

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "smcproto.h"
#include "smc-clc.h"

#define FAIL(...)                                                                  \
        do {                                                                       \
                fprintf(stderr, "test-stats-client: %s:%d: ", __func__, __LINE__); \
                fprintf(stderr, __VA_ARGS__);                                      \
                fputc('\n', stderr);                                               \
                exit(1);                                                           \
        } while (0)

static unsigned long send_calls, recv_calls;

static int listener(int backlog, struct sockaddr_in *ret) {
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t len = sizeof(a);
        int fd = smc_socket(AF_INET, SOCK_STREAM, 0);

        if (fd < 0 || smc_bind(fd, (struct sockaddr *) &a, sizeof(a)) < 0 || smc_listen(fd, backlog) < 0 ||
            smc_getsockname(fd, (struct sockaddr *) &a, &len) < 0)
                FAIL("listener: %m");
        *ret = a;
        return fd;
}

static int connect_to(const struct sockaddr_in *a) {
        int fd = smc_socket(AF_INET, SOCK_STREAM, 0);

        if (fd < 0 || smc_connect(fd, (const struct sockaddr *) a, sizeof(*a)) < 0)
                FAIL("connect: %m");
        return fd;
}

static int accept_one(int lfd) {
        int fd = smc_accept(lfd, NULL, NULL);

        if (fd < 0)
                FAIL("accept: %m");
        return fd;
}

static int mode_of(int fd, uint32_t *ret_reason) {
        socklen_t len = sizeof(int);
        uint32_t reason = 0;
        int mode = -1;

        if (smc_getsockopt(fd, SOL_SMC, SMC_PROTO_MODE, &mode, &len) < 0)
                FAIL("SMC_PROTO_MODE: %m");
        len = sizeof(reason);
        if (ret_reason) {
                if (smc_getsockopt(fd, SOL_SMC, SMC_PROTO_FALLBACK_REASON, &reason, &len) < 0)
                        FAIL("SMC_PROTO_FALLBACK_REASON: %m");
                *ret_reason = reason;
        }
        return mode;
}

/* One send call of @len bytes that must take all of them (they fit in the ring). */
static void send1(int fd, const void *buf, size_t len, int flags) {
        ssize_t n = smc_send(fd, buf, len, flags);

        if (n != (ssize_t) len)
                FAIL("send %zu: %zd %m", len, n);
        send_calls++;
}

/* Receive exactly @len bytes, counting the calls that returned data. */
static void recv_n(int fd, size_t len) {
        char buf[4096];

        while (len > 0) {
                ssize_t n = smc_recv(fd, buf, len < sizeof(buf) ? len : sizeof(buf), 0);

                if (n <= 0)
                        FAIL("recv: %zd %m", n);
                recv_calls++;
                len -= (size_t) n;
        }
}

static void set_int(int fd, int level, int name, int v) {
        if (smc_setsockopt(fd, level, name, &v, sizeof(v)) < 0)
                FAIL("setsockopt %d/%d: %m", level, name);
}

static void expect_eof(int fd) {
        char b;
        ssize_t n = smc_recv(fd, &b, 1, 0);

        if (n != 0)
                FAIL("expected EOF: %zd %m", n);
}

static int traffic(void) {
        char buf[128];
        unsigned long flushes = 0, btx = 0, brx = 0;
        struct sockaddr_in a;
        int lfd = listener(16, &a);

        memset(buf, 'x', sizeof(buf));
        for (int k = 0; k < 3; k++) {
                int c = connect_to(&a), s = accept_one(lfd);

                if (mode_of(c, NULL) != SMC_PROTO_MODE_SMCD || mode_of(s, NULL) != SMC_PROTO_MODE_SMCD)
                        FAIL("connection %d is not SMC-D", k);
                /* plain: 5 x 100 B one way, 3 x 50 B back */
                for (int i = 0; i < 5; i++)
                        send1(c, buf, 100, 0);
                recv_n(s, 500);
                for (int i = 0; i < 3; i++)
                        send1(s, buf, 50, 0);
                recv_n(c, 150);
                /* TCP_CORK: 3 sends, one flush when it is turned off */
                set_int(c, IPPROTO_TCP, TCP_CORK, 1);
                for (int i = 0; i < 3; i++)
                        send1(c, buf, 10, 0);
                set_int(c, IPPROTO_TCP, TCP_CORK, 0);
                flushes++;
                /* MSG_MORE twice, then a plain send: one flush */
                send1(c, buf, 10, MSG_MORE);
                send1(c, buf, 10, MSG_MORE);
                send1(c, buf, 10, 0);
                flushes++;
                recv_n(s, 60);
                /* the server too: MSG_MORE, then plain */
                send1(s, buf, 20, MSG_MORE);
                send1(s, buf, 20, 0);
                flushes++;
                recv_n(c, 40);
                btx += 500 + 30 + 30;
                brx += 150 + 40;
                /* orderly close: the server sees EOF (a recv of 0: no message) */
                if (smc_close(c) < 0)
                        FAIL("close: %m");
                expect_eof(s);
                if (smc_close(s) < 0)
                        FAIL("close: %m");
        }
        smc_close(lfd);
        printf("{\"conns\": 3, \"send_calls\": %lu, \"recv_calls\": %lu, \"cork_flushes\": %lu, "
               "\"bytes_tx\": %lu, \"bytes_rx\": %lu}\n", send_calls, recv_calls, flushes, btx, brx);
        return 0;
}

/* One byte each way over a connected pair. */
static void ping(int c, int s) {
        char b = 'p';

        send1(c, &b, 1, 0);
        recv_n(s, 1);
        send1(s, &b, 1, 0);
        recv_n(c, 1);
}

static int fallback(void) {
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t len = sizeof(a);
        unsigned smcd = 0, tcp = 0, peernosmc = 0, peerdecl = 0;
        int plain, c, s, lfd, cs[3], ss[3];
        uint32_t reason;

        /* (1) a plain TCP listener: smcd knows no SMC listener there */
        plain = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (plain < 0 || bind(plain, (struct sockaddr *) &a, sizeof(a)) < 0 || listen(plain, 4) < 0 ||
            getsockname(plain, (struct sockaddr *) &a, &len) < 0)
                FAIL("plain listener: %m");
        c = connect_to(&a);
        if (mode_of(c, &reason) != SMC_PROTO_MODE_TCP || reason != SMC_CLC_DECL_PEERNOSMC)
                FAIL("to a plain listener: mode %d reason 0x%08x", mode_of(c, NULL), reason);
        peernosmc++;
        tcp++;
        s = accept(plain, NULL, NULL);
        if (s < 0 || write(s, "q", 1) != 1)
                FAIL("plain accept: %m");
        recv_n(c, 1);
        close(s);
        smc_close(c);
        close(plain);

        /* (2) an SMC listener with backlog 1: two NEW_CONNs queue, the third does not fit */
        lfd = listener(1, &a);
        for (int i = 0; i < 3; i++) {
                cs[i] = connect_to(&a);
                int m = mode_of(cs[i], &reason);

                if (i < 2 && m != SMC_PROTO_MODE_SMCD)
                        FAIL("connection %d: mode %d, reason 0x%08x", i, m, reason);
                if (i == 2 && (m != SMC_PROTO_MODE_TCP || reason != SMC_CLC_DECL_PEERDECL))
                        FAIL("connection 3: mode %d reason 0x%08x, want TCP / PEERDECL", m, reason);
        }
        smcd += 2;
        tcp++;
        peerdecl++;
        for (int i = 0; i < 3; i++)
                ss[i] = accept_one(lfd);
        /* which accepted socket is which: the TCP one is TCP on both ends */
        for (int i = 0; i < 3; i++) {
                int peer = -1;

                for (int j = 0; j < 3; j++) {
                        struct sockaddr_in x, y;
                        socklen_t lx = sizeof(x), ly = sizeof(y);

                        if (smc_getsockname(cs[i], (struct sockaddr *) &x, &lx) == 0 &&
                            smc_getpeername(ss[j], (struct sockaddr *) &y, &ly) == 0 && x.sin_port == y.sin_port)
                                peer = j;
                }
                if (peer < 0)
                        FAIL("no accepted socket for connection %d", i);
                if (mode_of(cs[i], NULL) != mode_of(ss[peer], NULL))
                        FAIL("connection %d: client and server modes differ", i);
                ping(cs[i], ss[peer]);
        }
        for (int i = 0; i < 3; i++) {
                smc_close(cs[i]);
                smc_close(ss[i]);
        }
        smc_close(lfd);
        printf("{\"connects\": 4, \"smcd\": %u, \"tcp\": %u, \"peernosmc\": %u, \"peerdecl\": %u}\n", smcd, tcp,
               peernosmc, peerdecl);
        return 0;
}

/* 1 MiB through a connection in both directions at once (a thread per direction's
 * receiver), with a checksum of a pattern. */
#define XFER (1u << 20)

struct xfer {
        int fd;
        unsigned seed;
        bool ok;
};

static uint8_t pat(unsigned seed, size_t i) {
        return (uint8_t) ((i * 2654435761u + seed) >> 7);
}

static void *xfer_recv(void *arg) {
        struct xfer *x = arg;
        static __thread uint8_t buf[65536];
        size_t got = 0;

        x->ok = true;
        while (got < XFER) {
                ssize_t n = smc_recv(x->fd, buf, sizeof(buf), 0);

                if (n <= 0) {
                        x->ok = false;
                        return NULL;
                }
                for (ssize_t i = 0; i < n; i++)
                        if (buf[i] != pat(x->seed, got + (size_t) i))
                                x->ok = false;
                got += (size_t) n;
        }
        return NULL;
}

static void xfer_send(int fd, unsigned seed) {
        static uint8_t buf[XFER];
        size_t done = 0;

        for (size_t i = 0; i < XFER; i++)
                buf[i] = pat(seed, i);
        while (done < XFER) {
                ssize_t n = smc_send(fd, buf + done, XFER - done, 0);

                if (n <= 0)
                        FAIL("send: %zd %m", n);
                done += (size_t) n;
        }
}

static bool file_exists(const char *dir, const char *name) {
        char p[4096];
        struct stat st;

        snprintf(p, sizeof(p), "%s/%s", dir, name);
        return stat(p, &st) == 0;
}

static int hold(const char *dir) {
        struct sockaddr_in a;
        int lfd = listener(16, &a), c1, s1, c2, s2;
        struct xfer rx_s = { .seed = 1 }, rx_c = { .seed = 2 };
        pthread_t t1, t2;
        char p[4096];
        FILE *f;

        c1 = connect_to(&a);
        s1 = accept_one(lfd);
        ping(c1, s1);
        c2 = connect_to(&a);
        s2 = accept_one(lfd);
        if (mode_of(c1, NULL) != SMC_PROTO_MODE_SMCD || mode_of(c2, NULL) != SMC_PROTO_MODE_SMCD)
                FAIL("not SMC-D");
        rx_s.fd = s2;
        rx_c.fd = c2;
        if (pthread_create(&t1, NULL, xfer_recv, &rx_s) != 0 || pthread_create(&t2, NULL, xfer_recv, &rx_c) != 0)
                FAIL("pthread_create");
        xfer_send(c2, 1);
        xfer_send(s2, 2);
        pthread_join(t1, NULL);
        pthread_join(t2, NULL);
        if (!rx_s.ok || !rx_c.ok)
                FAIL("data corrupted or cut short (client to server %s, server to client %s)", rx_s.ok ? "ok" : "bad",
                     rx_c.ok ? "ok" : "bad");

        snprintf(p, sizeof(p), "%s/ready", dir);
        f = fopen(p, "we");
        if (!f)
                FAIL("%s: %m", p);
        fclose(f);
        for (int i = 0; i < 3000 && !file_exists(dir, "go"); i++)
                usleep(10000);
        smc_close(c1);
        smc_close(s1);
        smc_close(c2);
        smc_close(s2);
        smc_close(lfd);
        printf("{\"bytes\": %u}\n", 2 * XFER);
        return 0;
}

int main(int argc, char **argv) {
        setvbuf(stdout, NULL, _IOLBF, 0);
        if (argc == 2 && !strcmp(argv[1], "traffic"))
                return traffic();
        if (argc == 2 && !strcmp(argv[1], "fallback"))
                return fallback();
        if (argc == 3 && !strcmp(argv[1], "hold"))
                return hold(argv[2]);
        fprintf(stderr, "usage: test-stats-client traffic | fallback | hold DIR\n");
        return 2;
}
