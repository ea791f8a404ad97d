/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * test-api-basic SMCD_PATH: the client API against a private smcd.
 *
 *  1. no smcd: a connection falls back to TCP with SMC_CLC_DECL_NOSMCDDEV, data flows
 *  2. smcd running (--runtime-dir in a mkdtemp directory, SMCD_RUNTIME_DIR set):
 *     both ends are SMC-D (SOL_SMC SMC_PROTO_MODE), 1 MiB echoed full duplex (a
 *     sender thread and a receiver thread on one socket) with a checksum, names,
 *     nonblocking connect (EINPROGRESS, POLLOUT, SO_ERROR 0, then 0, EISCONN),
 *     MSG_PEEK, shutdown -> EOF
 *  3. smcd killed: a new connection to the same (SMC) listener falls back to TCP
 *     with SMC_CLC_DECL_NOSMCDDEV and data still flows.
 */

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "smc-clc.h"
#include "smcproto.h"

#define ECHO_BYTES (1u << 20)

static int failures;
static int failures_seen;

/* print a TAP-like line: ok if no CHECK failed since the last one */
static void step(const char *what) {
        printf("%s - %s\n", failures == failures_seen ? "ok" : "not ok", what);
        failures_seen = failures;
        fflush(stdout);
}

#define CHECK(cond, ...)                                                          \
        do {                                                                      \
                if (!(cond)) {                                                    \
                        fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
                        fprintf(stderr, __VA_ARGS__);                             \
                        fprintf(stderr, " (errno %d %s)\n", errno, strerror(errno)); \
                        failures++;                                               \
                }                                                                 \
        } while (0)

#define REQUIRE(cond, ...)                                                        \
        do {                                                                      \
                if (!(cond)) {                                                    \
                        CHECK(cond, __VA_ARGS__);                                 \
                        exit(1);                                                  \
                }                                                                 \
        } while (0)

static uint64_t fnv(uint64_t h, const uint8_t *p, size_t n) {
        for (size_t i = 0; i < n; i++) {
                h ^= p[i];
                h *= 0x100000001b3ull;
        }
        return h;
}

static int sock_mode(int fd) {
        int m = -1;
        socklen_t l = sizeof(m);

        if (smc_getsockopt(fd, SOL_SMC, SMC_PROTO_MODE, &m, &l) < 0)
                return -1;
        return m;
}

static uint32_t sock_reason(int fd) {
        uint32_t r = 0xffffffffu;
        socklen_t l = sizeof(r);

        if (smc_getsockopt(fd, SOL_SMC, SMC_PROTO_FALLBACK_REASON, &r, &l) < 0)
                return 0xffffffffu;
        return r;
}

/* ---- server: accept, report the mode over @report, echo until EOF ---- */

static void serve(int lfd, int report) {
        for (;;) {
                uint8_t buf[65536];
                int c = smc_accept(lfd, NULL, NULL);
                int mode;

                if (c < 0) {
                        if (errno == EINTR || errno == ECONNABORTED)
                                continue;
                        _exit(2);
                }
                mode = sock_mode(c);
                if (write(report, &mode, sizeof(mode)) != sizeof(mode))
                        _exit(3);
                for (;;) {
                        ssize_t n = smc_recv(c, buf, sizeof(buf), 0), w = 0;

                        if (n <= 0)
                                break;
                        while (w < n) {
                                ssize_t k = smc_send(c, buf + w, (size_t) (n - w), MSG_NOSIGNAL);
                                if (k <= 0)
                                        break;
                                w += k;
                        }
                        if (w < n)
                                break;
                }
                smc_close(c);
        }
}

/* Fork a server listening on 127.0.0.1:0; returns its pid, the port and the pipe on
 * which it reports the mode of every accepted connection. */
static pid_t start_server(uint16_t *ret_port, int *ret_report) {
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t al = sizeof(a);
        int lfd, p[2];
        pid_t pid;

        REQUIRE(pipe2(p, O_CLOEXEC) == 0, "pipe");
        lfd = smc_socket(AF_INET, SOCK_STREAM, 0);
        REQUIRE(lfd >= 0, "socket");
        REQUIRE(smc_bind(lfd, (struct sockaddr *) &a, sizeof(a)) == 0, "bind");
        REQUIRE(smc_listen(lfd, 64) == 0, "listen");
        REQUIRE(smc_getsockname(lfd, (struct sockaddr *) &a, &al) == 0, "getsockname");
        pid = fork();
        REQUIRE(pid >= 0, "fork");
        if (pid == 0) {
                close(p[0]);
                serve(lfd, p[1]);
                _exit(0);
        }
        close(p[1]);
        smc_close(lfd);
        *ret_port = ntohs(a.sin_port);
        *ret_report = p[0];
        return pid;
}

static int server_mode(int report) {
        struct pollfd p = { .fd = report, .events = POLLIN };
        int mode = -1;

        if (poll(&p, 1, 5000) != 1 || read(report, &mode, sizeof(mode)) != sizeof(mode))
                return -1;
        return mode;
}

static void stop_server(pid_t pid, int report) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        close(report);
}

static int client_connect(uint16_t port, int type) {
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port),
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        int fd = smc_socket(AF_INET, type, 0);

        REQUIRE(fd >= 0, "socket");
        if (smc_connect(fd, (struct sockaddr *) &a, sizeof(a)) < 0 && errno != EINPROGRESS) {
                CHECK(0, "connect to port %u", port);
                smc_close(fd);
                return -1;
        }
        return fd;
}

/* ---- echo, full duplex: a sender thread and the receiving caller ---- */

struct sender {
        int fd;
        const uint8_t *data;
        size_t len;
        int err;
};

static void *sender_main(void *arg) {
        struct sender *s = arg;
        size_t off = 0;

        while (off < s->len) {
                size_t chunk = s->len - off < 50000 ? s->len - off : 50000; /* odd size: wraps */
                ssize_t n = smc_send(s->fd, s->data + off, chunk, 0);

                if (n <= 0) {
                        s->err = errno;
                        return NULL;
                }
                off += (size_t) n;
        }
        return NULL;
}

static int echo_check(int fd, size_t len) {
        uint8_t *data = malloc(len), *back = malloc(len);
        struct sender snd = { .fd = fd, .data = data, .len = len };
        pthread_t t;
        size_t got = 0;
        int ok;

        REQUIRE(data && back, "malloc");
        srand(12345);
        for (size_t i = 0; i < len; i++)
                data[i] = (uint8_t) rand();
        REQUIRE(pthread_create(&t, NULL, sender_main, &snd) == 0, "pthread_create");
        while (got < len) {
                ssize_t n = smc_recv(fd, back + got, len - got, 0);
                if (n <= 0) {
                        CHECK(0, "recv returned %zd after %zu bytes", n, got);
                        break;
                }
                got += (size_t) n;
        }
        pthread_join(t, NULL);
        CHECK(snd.err == 0, "sender failed: %s", strerror(snd.err));
        ok = got == len && fnv(0xcbf29ce484222325ull, data, len) == fnv(0xcbf29ce484222325ull, back, len);
        CHECK(ok, "echo of %zu bytes: checksum mismatch (got %zu)", len, got);
        free(data);
        free(back);
        return ok;
}

/* ---- smcd ---- */

static pid_t start_smcd(const char *smcd, const char *dir) {
        char sock[4096];
        pid_t pid = fork();

        REQUIRE(pid >= 0, "fork");
        if (pid == 0) {
                execl(smcd, smcd, "--runtime-dir", dir, (char *) NULL);
                fprintf(stderr, "exec %s: %s\n", smcd, strerror(errno));
                _exit(127);
        }
        snprintf(sock, sizeof(sock), "%s/smcd.sock", dir);
        for (int i = 0; i < 500; i++) {
                struct stat st;
                int status;

                if (stat(sock, &st) == 0 && S_ISSOCK(st.st_mode)) {
                        /* bound is not enough: wait until it accepts connections */
                        struct sockaddr_un sa = { .sun_family = AF_UNIX };
                        int u = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
                        bool up;

                        REQUIRE(u >= 0, "socket");
                        REQUIRE(strlen(sock) < sizeof(sa.sun_path), "path too long");
                        memcpy(sa.sun_path, sock, strlen(sock) + 1);
                        up = connect(u, (struct sockaddr *) &sa, sizeof(sa)) == 0;
                        close(u);
                        if (up)
                                return pid;
                }
                if (waitpid(pid, &status, WNOHANG) == pid)
                        REQUIRE(0, "smcd exited early (status %d)", status);
                usleep(10000);
        }
        REQUIRE(0, "smcd did not create %s", sock);
        return -1;
}

int main(int argc, char **argv) {
        char dir[] = "/tmp/smcd-api-basic-XXXXXX";
        uint16_t port;
        int report, fd, mode;
        pid_t srv, smcd;

        if (argc != 2) {
                fprintf(stderr, "usage: %s SMCD_PATH\n", argv[0]);
                return 2;
        }
        signal(SIGPIPE, SIG_IGN);
        REQUIRE(mkdtemp(dir), "mkdtemp");
        setenv("SMCD_RUNTIME_DIR", dir, 1);

        /* 1. no smcd: TCP fallback */
        srv = start_server(&port, &report);
        fd = client_connect(port, SOCK_STREAM);
        REQUIRE(fd >= 0, "connect without smcd");
        CHECK(sock_mode(fd) == SMC_PROTO_MODE_TCP, "mode %d", sock_mode(fd));
        CHECK(sock_reason(fd) == SMC_CLC_DECL_NOSMCDDEV, "reason %#x", sock_reason(fd));
        CHECK(server_mode(report) == SMC_PROTO_MODE_TCP, "server side mode");
        echo_check(fd, 64 << 10);
        smc_close(fd);
        stop_server(srv, report);
        step("no smcd: TCP fallback, reason SMC_CLC_DECL_NOSMCDDEV, echo 64 KiB");

        /* 2. SMC-D */
        smcd = start_smcd(argv[1], dir);
        srv = start_server(&port, &report);
        fd = client_connect(port, SOCK_STREAM);
        REQUIRE(fd >= 0, "connect with smcd");
        mode = sock_mode(fd);
        CHECK(mode == SMC_PROTO_MODE_SMCD, "client mode %d reason %s", mode,
              smc_clc_decl_name(sock_reason(fd)));
        CHECK(server_mode(report) == SMC_PROTO_MODE_SMCD, "server side mode");
        {
                struct sockaddr_in a;
                socklen_t al = sizeof(a);

                CHECK(smc_getpeername(fd, (struct sockaddr *) &a, &al) == 0 && al == sizeof(a) &&
                              ntohs(a.sin_port) == port && a.sin_addr.s_addr == htonl(INADDR_LOOPBACK),
                      "getpeername");
                al = sizeof(a);
                CHECK(smc_getsockname(fd, (struct sockaddr *) &a, &al) == 0 && a.sin_family == AF_INET &&
                              a.sin_port != 0,
                      "getsockname");
        }
        echo_check(fd, ECHO_BYTES);
        step("SMC-D both ends, echo 1 MiB full duplex, checksum ok");
        {
                char b[8];

                CHECK(smc_send(fd, "peek", 4, 0) == 4, "send");
                CHECK(smc_recv(fd, b, 4, MSG_PEEK | MSG_WAITALL) == 4 && !memcmp(b, "peek", 4), "peek");
                CHECK(smc_recv(fd, b, 4, MSG_WAITALL) == 4 && !memcmp(b, "peek", 4), "recv after peek");
                CHECK(smc_recv(fd, b, 4, MSG_DONTWAIT) < 0 && errno == EAGAIN, "EAGAIN");
                CHECK(smc_shutdown(fd, SHUT_WR) == 0, "shutdown");
                CHECK(smc_recv(fd, b, sizeof(b), 0) == 0, "EOF after the server closed");
                CHECK(smc_send(fd, b, 1, MSG_NOSIGNAL) < 0 && errno == EPIPE, "EPIPE after shutdown");
                step("MSG_PEEK, EAGAIN, shutdown -> EOF, EPIPE");
        }
        smc_close(fd);

        /* nonblocking connect */
        fd = client_connect(port, SOCK_STREAM | SOCK_NONBLOCK);
        REQUIRE(fd >= 0, "nonblocking connect");
        {
                struct pollfd p = { .fd = fd, .events = POLLOUT };
                int err = -1;
                socklen_t el = sizeof(err);
                struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port),
                                         .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };

                CHECK(smc_poll(&p, 1, 5000) == 1 && (p.revents & POLLOUT), "POLLOUT");
                CHECK(smc_getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == 0, "SO_ERROR %d", err);
                CHECK(smc_connect(fd, (struct sockaddr *) &a, sizeof(a)) == 0, "second connect returns 0");
                CHECK(smc_connect(fd, (struct sockaddr *) &a, sizeof(a)) < 0 && errno == EISCONN, "EISCONN");
                CHECK(sock_mode(fd) == SMC_PROTO_MODE_SMCD, "mode %d", sock_mode(fd));
                CHECK(server_mode(report) == SMC_PROTO_MODE_SMCD, "server side mode");
                CHECK(smc_send(fd, "x", 1, 0) == 1, "send");
                p.events = POLLIN;
                CHECK(smc_poll(&p, 1, 5000) == 1 && (p.revents & POLLIN), "POLLIN");
                char b;
                CHECK(smc_recv(fd, &b, 1, 0) == 1 && b == 'x', "echo");
                step("nonblocking connect: EINPROGRESS, POLLOUT, SO_ERROR 0, 0, EISCONN");
        }
        smc_close(fd);

        /* 3. smcd killed: fallback to TCP, the SMC listener still accepts over TCP */
        kill(smcd, SIGKILL);
        waitpid(smcd, NULL, 0);
        fd = client_connect(port, SOCK_STREAM);
        REQUIRE(fd >= 0, "connect after smcd died");
        CHECK(sock_mode(fd) == SMC_PROTO_MODE_TCP, "mode %d", sock_mode(fd));
        CHECK(sock_reason(fd) == SMC_CLC_DECL_NOSMCDDEV, "reason %#x", sock_reason(fd));
        CHECK(server_mode(report) == SMC_PROTO_MODE_TCP, "server side mode");
        echo_check(fd, 256 << 10);
        smc_close(fd);
        step("smcd killed: TCP fallback to the same listener, echo 256 KiB");

        stop_server(srv, report);
        {
                /* what smcd left in its runtime directory (it was killed) */
                static const char *const left[] = { "smcd.sock", "endpoints", "endpoints.tmp", "instance",
                                                    "stats.json", "hints" };
                char path[4096];

                for (size_t i = 0; i < sizeof(left) / sizeof(left[0]); i++) {
                        snprintf(path, sizeof(path), "%s/%s", dir, left[i]);
                        unlink(path);
                }
                CHECK(rmdir(dir) == 0, "rmdir %s: %m", dir);
        }
        printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
        return failures ? 1 : 0;
}
