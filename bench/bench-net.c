/* SPDX-License-Identifier: LGPL-2.1-or-later */

/*
 * bench-net: SMC-D (libsmcproto against smcd) versus TCP loopback, measured in the
 * same run, plus the raw shared-ring memcpy limit that bounds SMC-D streaming.
 *
 *   bench-net [--mode smc|tcp|both] [--json] [--tests LIST] [--time SEC] [--iters N]
 *             [--sizes LIST] [--repeat N] [--bufsize BYTES] [--read-size BYTES]
 *             [--rx-offset N] [--ring-size LIST] [--ring-piece BYTES] [--server-cpu 0|1]
 *
 * Tests (LIST is comma-separated; default all):
 *   ring      two processes stream 64 KiB chunks through a DMB-layout ring in a memfd
 *             (struct smc_dmb_hdr cursors, release/acquire, busy polling, no
 *             syscalls): producer memcpy in, consumer memcpy out, each publishing its
 *             cursor every 16, 32 or 64 KiB (--ring-piece: only that), --repeat
 *             rounds, each run --time / 8 (>= 0.25 s). The best run per ring size
 *             (--ring-size, default 128 KiB = the default DMB, and 1 MiB = the largest)
 *             is the limit SMC-D streaming over that DMB size can reach: GB/s.
 *   pingpong  round trip of a SIZE-byte message (--sizes, default 14,64,1K,16K;
 *             blocking send of the whole message, recv with MSG_WAITALL),
 *             clock_gettime around each; warmup first; up to --iters iterations
 *             (default 20000) or --time seconds per size. p50/p99/avg in us.
 *   stream    64 KiB writes; the receiver drains with --read-size reads (default
 *             1 MiB) and sends back the byte count, which must match. Gbit/s, GB/s.
 *             All buffers are page aligned; --rx-offset N puts the receiver's N bytes
 *             after a page boundary instead: malloc() returns page + 16 for large
 *             buffers, and on some CPUs (AMD Zen with glibc's rep-movsb memcpy) a copy
 *             whose destination sits 1..63 bytes after its source modulo 4 KiB runs
 *             ~20x slower (measured here: 43 -> 2 GB/s).
 *   connect   socket()+connect() in a loop; the server accepts and closes, the client
 *             waits for EOF and closes. Connections/s and the socket()+connect()
 *             latency p50/p99.
 * stream and connect, which whatever else runs on the machine disturbs most, run
 * --repeat times (default 3) per mode for --time / 2 seconds each (>= 0.5 s), the
 * modes alternating; the median run is reported, with the spread.
 *
 * --bufsize BYTES sets SO_SNDBUF and SO_RCVBUF on both ends before connect/listen
 * (for SMC-D: the DMB size class, 16 KiB .. 1 MiB; default 128 KiB); 0 = defaults.
 *
 * The server side runs in a child process (this binary re-executed with --serve, so
 * it starts with fresh library state), pinned to CPU 1 while the client is pinned to
 * CPU 0 when the machine has two CPUs or more (--server-cpu 0: both on CPU 0, to
 * see the cost of a cross-CPU wakeup). mode smc uses the smc_* calls of
 * libsmcproto (smcd found through $SMCD_RUNTIME_DIR); mode tcp the libc calls over
 * 127.0.0.1. Every smc result says which mode the connection really had
 * ("conn_mode": "smcd" or "tcp-fallback"), so a fallback is never mistaken for SMC.
 *
 * Output: a table on stdout, or with --json one JSON object per line:
 *   {"bench":"net","test":"machine","cpus":N,"pinned":B,"client_cpu":0,"server_cpu":N}
 *   {"bench":"net","test":"ring","ring_size":B,"chunk":B,"piece":B,"bytes":N,"seconds":S,
 *    "gbyte_s":X}
 *   {"bench":"net","test":"ring_limit","ring_size":B,"chunk":B,"piece":B,"gbyte_s":X}
 *   {"bench":"net","test":"pingpong","mode":M,"conn_mode":C,"size":B,"iters":N,
 *    "avg_us":X,"p50_us":X,"p99_us":X,"min_us":X}
 *   {"bench":"net","test":"stream","mode":M,"conn_mode":C,"write_size":B,"read_size":B,
 *    "rx_offset":B,"bufsize":B,"bytes":N,"seconds":S,"gbit_s":X,"gbyte_s":X,
 *    "verified":true,"runs":N,"min_gbyte_s":X,"max_gbyte_s":X}
 *   {"bench":"net","test":"connect","mode":M,"conn_mode":C,"conns":N,"seconds":S,
 *    "conn_per_s":X,"p50_us":X,"p99_us":X,"runs":N,"min_conn_per_s":X,"max_conn_per_s":X}
 * A test that fails prints {"bench":"net","test":T,"mode":M,"error":"..."} and the
 * exit status is 1. Sizes take K and M suffixes.
 */

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dmb.h"
#include "bench-util.h"
#include "smcproto.h"

#define STREAM_WRITE (64u << 10)
#define STREAM_READ_DEFAULT (1u << 20)
#define RING_CHUNK (64u << 10)
#define WARMUP_ITERS 1000u

/* ---- socket calls of one mode ---------------------------------------------- */

struct net_ops {
        const char *name; /* "smc" or "tcp" */
        int (*socket)(int domain, int type, int protocol);
        int (*bind)(int fd, const struct sockaddr *a, socklen_t l);
        int (*listen)(int fd, int backlog);
        int (*accept)(int fd, struct sockaddr *a, socklen_t *l);
        int (*connect)(int fd, const struct sockaddr *a, socklen_t l);
        ssize_t (*send)(int fd, const void *buf, size_t len, int flags);
        ssize_t (*recv)(int fd, void *buf, size_t len, int flags);
        int (*shutdown)(int fd, int how);
        int (*close)(int fd);
        int (*setsockopt)(int fd, int level, int name, const void *val, socklen_t len);
        int (*getsockopt)(int fd, int level, int name, void *val, socklen_t *len);
        int (*getsockname)(int fd, struct sockaddr *a, socklen_t *l);
};

/* glibc declares some of these with transparent unions: wrap them. */
static int tcp_socket(int d, int t, int p) { return socket(d, t, p); }
static int tcp_bind(int fd, const struct sockaddr *a, socklen_t l) { return bind(fd, a, l); }
static int tcp_listen(int fd, int b) { return listen(fd, b); }
static int tcp_accept(int fd, struct sockaddr *a, socklen_t *l) { return accept(fd, a, l); }
static int tcp_connect(int fd, const struct sockaddr *a, socklen_t l) { return connect(fd, a, l); }
static ssize_t tcp_send(int fd, const void *b, size_t n, int f) { return send(fd, b, n, f); }
static ssize_t tcp_recv(int fd, void *b, size_t n, int f) { return recv(fd, b, n, f); }
static int tcp_shutdown(int fd, int h) { return shutdown(fd, h); }
static int tcp_close(int fd) { return close(fd); }
static int tcp_setsockopt(int fd, int lv, int n, const void *v, socklen_t l) { return setsockopt(fd, lv, n, v, l); }
static int tcp_getsockopt(int fd, int lv, int n, void *v, socklen_t *l) { return getsockopt(fd, lv, n, v, l); }
static int tcp_getsockname(int fd, struct sockaddr *a, socklen_t *l) { return getsockname(fd, a, l); }

static const struct net_ops tcp_ops = {
        "tcp", tcp_socket, tcp_bind, tcp_listen, tcp_accept, tcp_connect, tcp_send, tcp_recv,
        tcp_shutdown, tcp_close, tcp_setsockopt, tcp_getsockopt, tcp_getsockname,
};

static const struct net_ops smc_ops = {
        "smc", smc_socket, smc_bind, smc_listen, smc_accept, smc_connect, smc_send, smc_recv,
        smc_shutdown, smc_close, smc_setsockopt, smc_getsockopt, smc_getsockname,
};

static const struct net_ops *ops_by_name(const char *name) {
        if (strcmp(name, "tcp") == 0)
                return &tcp_ops;
        if (strcmp(name, "smc") == 0)
                return &smc_ops;
        return NULL;
}

/* ---- small helpers ---------------------------------------------------------- */

static uint64_t now_ns(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
}

/* Send all @len bytes. Returns 0 or -errno. */
static int send_all(const struct net_ops *o, int fd, const void *buf, size_t len) {
        const uint8_t *p = buf;

        while (len > 0) {
                ssize_t n = o->send(fd, p, len, MSG_NOSIGNAL);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                p += n;
                len -= (size_t) n;
        }
        return 0;
}

/* Receive exactly @len bytes with MSG_WAITALL. Returns 1, 0 on EOF before the first
 * byte, -EPIPE on EOF in the middle, or -errno. */
static int recv_all(const struct net_ops *o, int fd, void *buf, size_t len) {
        uint8_t *p = buf;
        size_t got = 0;

        while (got < len) {
                ssize_t n = o->recv(fd, p + got, len - got, MSG_WAITALL);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (n == 0)
                        return got == 0 ? 0 : -EPIPE;
                got += (size_t) n;
        }
        return 1;
}

static int cmp_u64(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;

        return x < y ? -1 : x > y;
}

struct lat_stats {
        double avg_us, p50_us, p99_us, min_us;
};

/* Sorts @v in place. Nearest-rank percentiles. */
static struct lat_stats lat_stats(uint64_t *v, size_t n) {
        struct lat_stats s = {};
        double sum = 0;

        if (n == 0)
                return s;
        qsort(v, n, sizeof(*v), cmp_u64);
        for (size_t i = 0; i < n; i++)
                sum += (double) v[i];
        s.avg_us = sum / (double) n / 1000.0;
        s.p50_us = (double) v[(n * 50 + 99) / 100 - 1] / 1000.0;
        s.p99_us = (double) v[(n * 99 + 99) / 100 - 1] / 1000.0;
        s.min_us = (double) v[0] / 1000.0;
        return s;
}

static int pin_cpu(int cpu) {
        cpu_set_t set;

        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        return sched_setaffinity(0, sizeof(set), &set) < 0 ? -errno : 0;
}

static int ncpus(void) {
        cpu_set_t set;

        if (sched_getaffinity(0, sizeof(set), &set) < 0)
                return 1;
        return CPU_COUNT(&set);
}

/* In a freshly forked child: make every inherited descriptor above 2 close-on-exec
 * except @keep (so no socketpair end or control socket of the parent's library
 * leaks into the server, which would hide the parent's close from its peers). */
static void child_fds(int keep) {
        for (int fd = 3; fd < 1024; fd++)
                if (fd != keep)
                        (void) fcntl(fd, F_SETFD, FD_CLOEXEC);
        if (keep >= 0)
                (void) fcntl(keep, F_SETFD, 0);
}

/* "smcd", "tcp-fallback" (smc mode), or "tcp" (tcp mode). */
static const char *conn_mode(const struct net_ops *o, int fd) {
        int mode = -1;
        socklen_t l = sizeof(mode);

        if (o == &tcp_ops)
                return "tcp";
        if (o->getsockopt(fd, SOL_SMC, SMC_PROTO_MODE, &mode, &l) < 0)
                return "unknown";
        switch (mode) {
        case SMC_PROTO_MODE_SMCD:
                return "smcd";
        case SMC_PROTO_MODE_TCP:
                return "tcp-fallback";
        default:
                return "none";
        }
}

/* ---- configuration and output ---------------------------------------------- */

struct cfg {
        bool json;
        bool pinned;
        int server_cpu;       /* CPU of the server / consumer when pinned (default 1) */
        int cpus;
        double seconds;       /* per measurement */
        int bufsize;          /* SO_SNDBUF/SO_RCVBUF for both ends, 0 = default */
        size_t read_size;     /* stream receiver's recv size */
        size_t rx_offset;     /* stream receiver's buffer: bytes after a page boundary */
        unsigned repeat;      /* runs of stream and connect per mode; the median counts */
        unsigned iters;       /* max ping-pong iterations per size */
        size_t sizes[16];
        unsigned nsizes;
        uint32_t ring_sizes[8];
        unsigned nring_sizes;
        uint32_t ring_piece;  /* bytes per cursor update in the ring test; 0 = sweep */
        const struct net_ops *modes[2];
        unsigned nmodes;
        bool t_ring, t_pingpong, t_stream, t_connect;
};

/* One row of the human table. */
struct row {
        char metric[48];
        char unit[16];
        double v[2]; /* tcp, smc; NaN = not measured */
        bool have[2];
        char note[32];
        bool lower_better;
};

struct results {
        struct row rows[64];
        unsigned n;
        int failures;
};

static struct row *row_get(struct results *r, const char *metric, const char *unit, bool lower_better) {
        for (unsigned i = 0; i < r->n; i++)
                if (strcmp(r->rows[i].metric, metric) == 0)
                        return &r->rows[i];
        if (r->n >= sizeof(r->rows) / sizeof(r->rows[0]))
                return NULL;
        struct row *w = &r->rows[r->n++];
        *w = (struct row) { .lower_better = lower_better };
        snprintf(w->metric, sizeof(w->metric), "%s", metric);
        snprintf(w->unit, sizeof(w->unit), "%s", unit);
        return w;
}

static void row_set(struct results *r, const struct net_ops *o, const char *cm, const char *metric,
                    const char *unit, bool lower_better, double v) {
        struct row *w = row_get(r, metric, unit, lower_better);
        int i = o == &tcp_ops ? 0 : 1;

        if (!w)
                return;
        w->v[i] = v;
        w->have[i] = true;
        if (i == 1 && strcmp(cm, "smcd") != 0)
                snprintf(w->note, sizeof(w->note), "smc conn was %s", cm);
}

static void report_error(const struct cfg *c, struct results *r, const char *test, const struct net_ops *o,
                         int err) {
        r->failures++;
        if (c->json)
                printf("{\"bench\":\"net\",\"test\":\"%s\",\"mode\":\"%s\",\"error\":\"%s\"}\n", test,
                       o ? o->name : "-", strerror(-err));
        else
                fprintf(stderr, "bench-net: %s (%s): %s\n", test, o ? o->name : "-", strerror(-err));
        fflush(stdout);
}

/* ---- the server (child process) ------------------------------------------- */

enum server_kind { SERVE_PINGPONG, SERVE_STREAM, SERVE_CONNECT };

static const char *const serve_names[] = { "pingpong", "stream", "connect" };

/* SO_SNDBUF and SO_RCVBUF = @bytes (0: leave the defaults). On an SMC socket, before
 * connect/listen, this picks the DMB size class. */
static void set_bufsize(const struct net_ops *o, int fd, int bytes) {
        if (bytes <= 0)
                return;
        (void) o->setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
        (void) o->setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
}

/* A buffer of @len bytes starting @offset bytes after a page boundary (see --rx-offset);
 * free with free(*ret_base). */
static uint8_t *buf_alloc(size_t len, size_t offset, void **ret_base) {
        uint8_t *b = aligned_alloc(4096, (len + offset + 4095) / 4096 * 4096);

        *ret_base = b;
        if (!b)
                return NULL;
        memset(b, 0, len + offset); /* fault it in before the clock runs */
        return b + offset;
}

static int serve(const struct net_ops *o, enum server_kind kind, size_t size, int bufsize, size_t read_size,
                 size_t rx_offset, int report_fd) {
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t sl = sizeof(sa);
        int one = 1, lfd, fd, r;
        uint16_t port;

        lfd = o->socket(AF_INET, SOCK_STREAM, 0);
        if (lfd < 0)
                return -errno;
        (void) o->setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        set_bufsize(o, lfd, bufsize);
        if (o->bind(lfd, (struct sockaddr *) &sa, sizeof(sa)) < 0 || o->listen(lfd, 1024) < 0 ||
            o->getsockname(lfd, (struct sockaddr *) &sa, &sl) < 0)
                return -errno;
        port = ntohs(sa.sin_port);
        if (write(report_fd, &port, sizeof(port)) != sizeof(port))
                return -EIO;
        close(report_fd);

        if (kind == SERVE_CONNECT) {
                /* Accept and close until the parent kills us. */
                for (;;) {
                        fd = o->accept(lfd, NULL, NULL);
                        if (fd < 0) {
                                if (errno == EINTR || errno == ECONNABORTED)
                                        continue;
                                return -errno;
                        }
                        o->close(fd);
                }
        }

        fd = o->accept(lfd, NULL, NULL);
        if (fd < 0)
                return -errno;
        o->close(lfd);
        set_bufsize(o, fd, bufsize);
        (void) o->setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));

        if (kind == SERVE_PINGPONG) {
                void *base;
                uint8_t *buf = buf_alloc(size, 0, &base);
                if (!buf)
                        return -ENOMEM;
                for (;;) {
                        r = recv_all(o, fd, buf, size);
                        if (r <= 0)
                                break;
                        r = send_all(o, fd, buf, size);
                        if (r < 0)
                                break;
                }
                free(base);
        } else {
                void *base;
                uint8_t *buf = buf_alloc(read_size, rx_offset, &base);
                uint64_t total = 0;
                if (!buf)
                        return -ENOMEM;
                for (;;) {
                        ssize_t n = o->recv(fd, buf, read_size, 0);
                        if (n < 0) {
                                if (errno == EINTR)
                                        continue;
                                r = -errno;
                                break;
                        }
                        if (n == 0) {
                                r = send_all(o, fd, &total, sizeof(total));
                                break;
                        }
                        total += (uint64_t) n;
                }
                free(base);
        }
        o->close(fd);
        return r < 0 ? r : 0;
}

struct server {
        pid_t pid;
        uint16_t port;
};

/* Start the server: fork, pin to CPU 1, re-execute ourselves with --serve. */
static int server_start(const struct cfg *c, const struct net_ops *o, enum server_kind kind, size_t size,
                        struct server *ret) {
        int p[2];
        uint16_t port;
        pid_t pid;

        if (pipe2(p, O_CLOEXEC) < 0)
                return -errno;
        pid = fork();
        if (pid < 0) {
                int e = -errno;
                close(p[0]);
                close(p[1]);
                return e;
        }
        if (pid == 0) {
                char fdbuf[16], sizebuf[32], bufbuf[16], rdbuf[32], offbuf[32];

                if (c->pinned)
                        (void) pin_cpu(c->server_cpu);
                child_fds(p[1]);
                snprintf(fdbuf, sizeof(fdbuf), "%d", p[1]);
                snprintf(sizebuf, sizeof(sizebuf), "%zu", size);
                snprintf(bufbuf, sizeof(bufbuf), "%d", c->bufsize);
                snprintf(rdbuf, sizeof(rdbuf), "%zu", c->read_size);
                snprintf(offbuf, sizeof(offbuf), "%zu", c->rx_offset);
                execl("/proc/self/exe", "bench-net", "--serve", serve_names[kind], "--mode", o->name,
                      "--size", sizebuf, "--bufsize", bufbuf, "--read-size", rdbuf, "--rx-offset", offbuf,
                      "--report-fd", fdbuf, (char *) NULL);
                _exit(127);
        }
        close(p[1]);
        for (;;) {
                ssize_t n = read(p[0], &port, sizeof(port));
                if (n < 0 && errno == EINTR)
                        continue;
                close(p[0]);
                if (n != sizeof(port)) {
                        kill(pid, SIGKILL);
                        waitpid(pid, NULL, 0);
                        return -ECHILD;
                }
                break;
        }
        *ret = (struct server) { .pid = pid, .port = port };
        return 0;
}

/* Wait for the server; with @kill_it, SIGTERM it first. Returns 0 if it exited 0
 * (or died of our SIGTERM), -ECHILD otherwise. */
static int server_stop(struct server *s, bool kill_it) {
        int status;

        if (s->pid <= 0)
                return 0;
        if (kill_it)
                kill(s->pid, SIGTERM);
        while (waitpid(s->pid, &status, 0) < 0)
                if (errno != EINTR)
                        return -errno;
        s->pid = 0;
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
                return 0;
        if (kill_it && WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM)
                return 0;
        return -ECHILD;
}

static int client_connect(const struct cfg *c, const struct net_ops *o, uint16_t port) {
        struct sockaddr_in sa = {
                .sin_family = AF_INET,
                .sin_port = htons(port),
                .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
        };
        int fd, one = 1;

        fd = o->socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0)
                return -errno;
        set_bufsize(o, fd, c->bufsize);
        if (o->connect(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0) {
                int e = -errno;
                o->close(fd);
                return e;
        }
        (void) o->setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        return fd;
}

/* ---- the tests (client side) ---------------------------------------------- */

static int test_pingpong(const struct cfg *c, struct results *res, const struct net_ops *o, size_t size) {
        struct server s = {};
        uint64_t *lat = NULL, deadline;
        uint8_t *buf = NULL;
        void *buf_base = NULL;
        const char *cm;
        size_t n = 0;
        int fd = -1, r;

        r = server_start(c, o, SERVE_PINGPONG, size, &s);
        if (r < 0)
                return r;
        buf = buf_alloc(size, 0, &buf_base);
        lat = malloc(sizeof(*lat) * c->iters);
        if (!buf || !lat) {
                r = -ENOMEM;
                goto out;
        }
        memset(buf, 0xa5, size);
        fd = client_connect(c, o, s.port);
        if (fd < 0) {
                r = fd;
                goto out;
        }
        cm = conn_mode(o, fd);

        deadline = now_ns() + (uint64_t) (c->seconds * 0.2e9);
        for (unsigned i = 0; i < WARMUP_ITERS && now_ns() < deadline; i++) {
                if ((r = send_all(o, fd, buf, size)) < 0 || (r = recv_all(o, fd, buf, size)) < 0)
                        goto out;
                if (r == 0) {
                        r = -ECONNRESET;
                        goto out;
                }
        }
        deadline = now_ns() + (uint64_t) (c->seconds * 1e9);
        while (n < c->iters) {
                uint64_t t0 = now_ns(), t1;
                if ((r = send_all(o, fd, buf, size)) < 0 || (r = recv_all(o, fd, buf, size)) < 0)
                        goto out;
                if (r == 0) {
                        r = -ECONNRESET;
                        goto out;
                }
                t1 = now_ns();
                lat[n++] = t1 - t0;
                if (t1 >= deadline)
                        break;
        }
        o->close(fd);
        fd = -1;
        r = server_stop(&s, false);
        if (r < 0)
                goto out;

        struct lat_stats st = lat_stats(lat, n);
        if (c->json)
                printf("{\"bench\":\"net\",\"test\":\"pingpong\",\"mode\":\"%s\",\"conn_mode\":\"%s\","
                       "\"size\":%zu,\"iters\":%zu,\"avg_us\":%.3f,\"p50_us\":%.3f,\"p99_us\":%.3f,"
                       "\"min_us\":%.3f}\n",
                       o->name, cm, size, n, st.avg_us, st.p50_us, st.p99_us, st.min_us);
        fflush(stdout);
        char m[48];
        snprintf(m, sizeof(m), "ping-pong %zu B p50", size);
        row_set(res, o, cm, m, "us", true, st.p50_us);
        snprintf(m, sizeof(m), "ping-pong %zu B p99", size);
        row_set(res, o, cm, m, "us", true, st.p99_us);
out:
        if (fd >= 0)
                o->close(fd);
        if (s.pid > 0)
                (void) server_stop(&s, true);
        free(buf_base);
        free(lat);
        return r;
}

/* One measured run of the stream or connect test (see the drivers below). */
struct run {
        const char *conn_mode;
        uint64_t count;   /* bytes (stream) or connections (connect) */
        double seconds;
        double value;     /* GB/s or connections/s */
        struct lat_stats lat; /* connect only */
};

static int test_stream(const struct cfg *c, const struct net_ops *o, double seconds, struct run *ret) {
        struct server s = {};
        uint64_t sent = 0, got = 0, t0, t1, deadline;
        uint8_t *buf = NULL;
        void *buf_base = NULL;
        const char *cm;
        int fd = -1, r;

        r = server_start(c, o, SERVE_STREAM, 0, &s);
        if (r < 0)
                return r;
        buf = buf_alloc(STREAM_WRITE, 0, &buf_base);
        if (!buf) {
                r = -ENOMEM;
                goto out;
        }
        for (size_t i = 0; i < STREAM_WRITE; i++)
                buf[i] = (uint8_t) (i * 7);
        fd = client_connect(c, o, s.port);
        if (fd < 0) {
                r = fd;
                goto out;
        }
        cm = conn_mode(o, fd);

        t0 = now_ns();
        deadline = t0 + (uint64_t) (seconds * 1e9);
        do {
                r = send_all(o, fd, buf, STREAM_WRITE);
                if (r < 0)
                        goto out;
                sent += STREAM_WRITE;
        } while (now_ns() < deadline);
        if (o->shutdown(fd, SHUT_WR) < 0) {
                r = -errno;
                goto out;
        }
        r = recv_all(o, fd, &got, sizeof(got));
        if (r <= 0) {
                r = r == 0 ? -ECONNRESET : r;
                goto out;
        }
        t1 = now_ns();
        o->close(fd);
        fd = -1;
        r = server_stop(&s, false);
        if (r < 0)
                goto out;

        if (got != sent) {
                fprintf(stderr, "bench-net: stream (%s): sent %" PRIu64 " bytes, server got %" PRIu64 "\n",
                        o->name, sent, got);
                r = -EBADMSG;
                goto out;
        }
        *ret = (struct run) {
                .conn_mode = cm,
                .count = sent,
                .seconds = (double) (t1 - t0) / 1e9,
        };
        ret->value = (double) sent / ret->seconds / 1e9;
out:
        if (fd >= 0)
                o->close(fd);
        if (s.pid > 0)
                (void) server_stop(&s, true);
        free(buf_base);
        return r;
}

static int test_connect(const struct cfg *c, const struct net_ops *o, double seconds, struct run *ret) {
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        struct server s = {};
        uint64_t *lat = NULL, t0, t1, start, deadline;
        size_t n = 0, cap = 1u << 16;
        const char *cm = NULL;
        int r, fd;

        r = server_start(c, o, SERVE_CONNECT, 0, &s);
        if (r < 0)
                return r;
        sa.sin_port = htons(s.port);
        lat = malloc(sizeof(*lat) * cap);
        if (!lat) {
                r = -ENOMEM;
                goto out;
        }
        start = now_ns();
        deadline = start + (uint64_t) (seconds * 1e9);
        do {
                char ch;
                ssize_t k;

                t0 = now_ns();
                fd = o->socket(AF_INET, SOCK_STREAM, 0);
                if (fd < 0) {
                        r = -errno;
                        goto out;
                }
                set_bufsize(o, fd, c->bufsize);
                if (o->connect(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0) {
                        r = -errno;
                        o->close(fd);
                        goto out;
                }
                t1 = now_ns();
                if (!cm)
                        cm = conn_mode(o, fd);
                /* Wait for the server's accept + close: EOF (or a reset). */
                do
                        k = o->recv(fd, &ch, 1, 0);
                while (k < 0 && errno == EINTR);
                o->close(fd);
                if (k > 0) {
                        r = -EBADMSG;
                        goto out;
                }
                if (n == cap) {
                        uint64_t *nl = realloc(lat, sizeof(*lat) * cap * 2);
                        if (!nl) {
                                r = -ENOMEM;
                                goto out;
                        }
                        lat = nl;
                        cap *= 2;
                }
                lat[n++] = t1 - t0;
        } while (now_ns() < deadline);

        double secs = (double) (now_ns() - start) / 1e9;
        r = server_stop(&s, true);
        if (r < 0)
                goto out;
        *ret = (struct run) {
                .conn_mode = cm,
                .count = n,
                .seconds = secs,
                .value = (double) n / secs,
                .lat = lat_stats(lat, n),
        };
out:
        if (s.pid > 0)
                (void) server_stop(&s, true);
        free(lat);
        return r;
}

/* The raw ring: the DMB layout of dmb.h, no doorbell, both sides busy-poll. The
 * producer writes @RING_CHUNK-byte chunks, each in as many pieces as the free,
 * contiguous space allows; the consumer copies whatever is there (at most one
 * chunk) out into a private buffer, as smc_recv would. */
struct ring_shared {
        _Atomic uint64_t total;  /* bytes the producer will write in all; 0 = unknown */
        _Atomic uint32_t go;
        uint8_t pad[64 - 12];
        _Atomic uint64_t consumed; /* written by the consumer when done */
};

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#elif defined(__aarch64__)
        __asm__ __volatile__("yield");
#endif
}

static void ring_consumer(struct smc_dmb_hdr *h, uint8_t *data, uint32_t size, uint32_t piece,
                          struct ring_shared *sh) {
        uint8_t *out = aligned_alloc(4096, RING_CHUNK);
        uint64_t cons = 0, done = 0;

        if (!out)
                _exit(1);
        while (!atomic_load_explicit(&sh->go, memory_order_acquire))
                cpu_relax();
        for (;;) {
                uint64_t prod = atomic_load_explicit(&h->prod, memory_order_acquire);
                uint32_t avail = smc_curs_diff(size, cons, prod);
                if (avail == 0) {
                        uint64_t total = atomic_load_explicit(&sh->total, memory_order_acquire);
                        if (total && done == total)
                                break;
                        cpu_relax();
                        continue;
                }
                /* copy out what is there (at most one chunk), publishing cons every
                 * @piece bytes */
                uint32_t n = avail < RING_CHUNK ? avail : RING_CHUNK;
                for (uint32_t o = 0; o < n;) {
                        uint32_t off = smc_curs_count(cons), k = n - o;
                        if (k > piece)
                                k = piece;
                        if (k > size - off)
                                k = size - off;
                        memcpy(out + o, data + off, k);
                        o += k;
                        cons = smc_curs_add(cons, k, size);
                        atomic_store_explicit(&h->cons, cons, memory_order_release);
                }
                done += n;
        }
        atomic_store_explicit(&sh->consumed, done, memory_order_release);
        free(out);
        _exit(0);
}

/* One ring measurement: @size-byte ring, cursors published every @piece bytes, for
 * @seconds. Prints its JSON line; returns 0 and *ret_gbs, or -errno. */
static int ring_run(const struct cfg *c, uint32_t size, uint32_t piece, double seconds, double *ret_gbs) {
        size_t maplen = SMC_DMB_HDR_LEN + size + 4096;
        struct smc_dmb_hdr *h;
        struct ring_shared *sh;
        uint8_t *data, *src;
        uint64_t prod = 0, sent = 0, t0, t1, deadline;
        int mfd, r = 0, status;
        pid_t pid;

        mfd = memfd_create("bench-ring", MFD_CLOEXEC);
        if (mfd < 0)
                return -errno;
        if (ftruncate(mfd, (off_t) maplen) < 0) {
                r = -errno;
                close(mfd);
                return r;
        }
        h = mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, mfd, 0);
        close(mfd);
        if (h == MAP_FAILED)
                return -errno;
        data = smc_dmb_data(h);
        sh = (struct ring_shared *) (data + size);
        src = aligned_alloc(4096, RING_CHUNK);
        if (!src) {
                munmap(h, maplen);
                return -ENOMEM;
        }
        memset(src, 0x5a, RING_CHUNK);

        pid = fork();
        if (pid < 0) {
                r = -errno;
                goto out;
        }
        if (pid == 0) {
                if (c->pinned)
                        (void) pin_cpu(c->server_cpu);
                ring_consumer(h, data, size, piece, sh);
        }

        atomic_store_explicit(&sh->go, 1, memory_order_release);
        t0 = now_ns();
        deadline = t0 + (uint64_t) (seconds * 1e9);
        do {
                for (uint32_t left = RING_CHUNK; left > 0;) {
                        uint64_t cons = atomic_load_explicit(&h->cons, memory_order_acquire);
                        uint32_t space = size - smc_curs_diff(size, cons, prod);
                        if (space == 0) {
                                cpu_relax();
                                continue;
                        }
                        uint32_t off = smc_curs_count(prod), n = left < space ? left : space;
                        if (n > size - off)
                                n = size - off;
                        if (n > piece)
                                n = piece;
                        memcpy(data + off, src + (RING_CHUNK - left), n);
                        prod = smc_curs_add(prod, n, size);
                        atomic_store_explicit(&h->prod, prod, memory_order_release);
                        left -= n;
                }
                sent += RING_CHUNK;
        } while (now_ns() < deadline);
        atomic_store_explicit(&sh->total, sent, memory_order_release);
        while (waitpid(pid, &status, 0) < 0)
                if (errno != EINTR) {
                        r = -errno;
                        goto out;
                }
        t1 = now_ns();
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 ||
            atomic_load_explicit(&sh->consumed, memory_order_acquire) != sent) {
                r = -EBADMSG;
                goto out;
        }

        double secs = (double) (t1 - t0) / 1e9, gbs = (double) sent / secs / 1e9;
        if (c->json)
                printf("{\"bench\":\"net\",\"test\":\"ring\",\"ring_size\":%u,\"chunk\":%u,"
                       "\"piece\":%u,\"bytes\":%" PRIu64 ",\"seconds\":%.3f,\"gbyte_s\":%.3f}\n",
                       size, RING_CHUNK, piece, sent, secs, gbs);
        fflush(stdout);
        *ret_gbs = gbs;
out:
        free(src);
        munmap(h, maplen);
        return r;
}

/* The ring limit per ring size: the best over cursor-publishing granularities (16,
 * 32, 64 KiB, or just --ring-piece) and --repeat rounds (a limit is the best the
 * machine showed; a busy-polling pair is the first to suffer from a descheduled
 * vCPU), each run for --time / 8 (>= 0.25 s).
 * Prints {"test":"ring_limit","ring_size":B,"piece":B,"gbyte_s":X} per size. */
static int test_ring(const struct cfg *c, struct results *res) {
        static const uint32_t pieces[] = { 16u << 10, 32u << 10, 64u << 10 };
        double secs = c->seconds / 8 < 0.25 ? 0.25 : c->seconds / 8;

        for (unsigned i = 0; i < c->nring_sizes; i++) {
                uint32_t size = c->ring_sizes[i], best_piece = 0;
                double best = 0;

                for (unsigned k = 0; k < 3 * c->repeat; k++) {
                        uint32_t piece = c->ring_piece ? c->ring_piece : pieces[k % 3];
                        double gbs = 0;
                        int r;

                        if (piece > size)
                                piece = size;
                        r = ring_run(c, size, piece, secs, &gbs);
                        if (r < 0)
                                return r;
                        if (gbs > best) {
                                best = gbs;
                                best_piece = piece;
                        }
                        if (c->ring_piece && k + 1 >= c->repeat)
                                break;
                }
                if (c->json)
                        printf("{\"bench\":\"net\",\"test\":\"ring_limit\",\"ring_size\":%u,\"chunk\":%u,"
                               "\"piece\":%u,\"gbyte_s\":%.3f}\n",
                               size, RING_CHUNK, best_piece, best);
                fflush(stdout);
                char m[48];
                snprintf(m, sizeof(m), "raw ring limit (%u KiB ring)", size >> 10);
                struct row *w = row_get(res, m, "GB/s", false);
                if (w) {
                        w->v[1] = best;
                        w->have[1] = true;
                }
        }
        return 0;
}

/* Stream and connect are sensitive to whatever else the machine runs: each is run
 * --repeat times per mode for --time / 2 seconds (at least 0.5 s), alternating the
 * modes, and the median run is reported ("runs", "min", "max" show the spread). */
enum { TEST_STREAM, TEST_CONNECT };

static void run_repeated(const struct cfg *c, struct results *res, int test) {
        const char *name = test == TEST_STREAM ? "stream" : "connect";
        double secs = c->seconds / 2 < 0.5 ? 0.5 : c->seconds / 2;
        struct run runs[2][16];
        unsigned n[2] = {};

        for (unsigned k = 0; k < c->repeat; k++)
                for (unsigned m = 0; m < c->nmodes; m++) {
                        const struct net_ops *o = c->modes[m];
                        struct run *ru = &runs[m][n[m]];
                        int r = test == TEST_STREAM ? test_stream(c, o, secs, ru) : test_connect(c, o, secs, ru);
                        if (r < 0)
                                report_error(c, res, name, o, r);
                        else
                                n[m]++;
                }

        for (unsigned m = 0; m < c->nmodes; m++) {
                const struct net_ops *o = c->modes[m];
                const struct run *md;
                double lo, hi;

                if (n[m] == 0)
                        continue;
                bench_sort_by_double(runs[m], n[m], sizeof(runs[m][0]), offsetof(struct run, value));
                md = &runs[m][(n[m] - 1) / 2];
                lo = runs[m][0].value;
                hi = runs[m][n[m] - 1].value;
                if (test == TEST_STREAM) {
                        if (c->json)
                                printf("{\"bench\":\"net\",\"test\":\"stream\",\"mode\":\"%s\",\"conn_mode\":\"%s\","
                                       "\"write_size\":%u,\"read_size\":%zu,\"rx_offset\":%zu,\"bufsize\":%d,"
                                       "\"bytes\":%" PRIu64 ",\"seconds\":%.3f,\"gbit_s\":%.3f,\"gbyte_s\":%.3f,"
                                       "\"verified\":true,\"runs\":%u,\"min_gbyte_s\":%.3f,\"max_gbyte_s\":%.3f}\n",
                                       o->name, md->conn_mode, STREAM_WRITE, c->read_size, c->rx_offset, c->bufsize,
                                       md->count, md->seconds, md->value * 8, md->value, n[m], lo, hi);
                        row_set(res, o, md->conn_mode, "stream 64 KiB writes", "GB/s", false, md->value);
                        row_set(res, o, md->conn_mode, "stream 64 KiB writes ", "Gbit/s", false, md->value * 8);
                } else {
                        if (c->json)
                                printf("{\"bench\":\"net\",\"test\":\"connect\",\"mode\":\"%s\",\"conn_mode\":\"%s\","
                                       "\"conns\":%" PRIu64 ",\"seconds\":%.3f,\"conn_per_s\":%.1f,\"p50_us\":%.3f,"
                                       "\"p99_us\":%.3f,\"runs\":%u,\"min_conn_per_s\":%.1f,"
                                       "\"max_conn_per_s\":%.1f}\n",
                                       o->name, md->conn_mode, md->count, md->seconds, md->value, md->lat.p50_us,
                                       md->lat.p99_us, n[m], lo, hi);
                        row_set(res, o, md->conn_mode, "connect+accept+close rate", "conn/s", false, md->value);
                        row_set(res, o, md->conn_mode, "connect latency p50", "us", true, md->lat.p50_us);
                        row_set(res, o, md->conn_mode, "connect latency p99", "us", true, md->lat.p99_us);
                }
                fflush(stdout);
        }
}

/* ---- main ----------------------------------------------------------------- */

static void print_table(const struct cfg *c, const struct results *r) {
        if (c->pinned)
                printf("bench-net: %d CPU(s), client on CPU 0, server on CPU %d\n", c->cpus, c->server_cpu);
        else
                printf("bench-net: %d CPU(s), client and server not pinned\n", c->cpus);
        printf("%-30s %-7s %12s %12s %10s  %s\n", "metric", "unit", "TCP", "SMC", "SMC/TCP", "");
        for (unsigned i = 0; i < r->n; i++) {
                const struct row *w = &r->rows[i];
                char a[32] = "-", b[32] = "-", q[32] = "-";

                if (w->have[0])
                        snprintf(a, sizeof(a), "%.3f", w->v[0]);
                if (w->have[1])
                        snprintf(b, sizeof(b), "%.3f", w->v[1]);
                if (w->have[0] && w->have[1] && w->v[0] > 0)
                        snprintf(q, sizeof(q), "%.3fx", w->v[1] / w->v[0]);
                printf("%-30s %-7s %12s %12s %10s  %s\n", w->metric, w->unit, a, b, q, w->note);
        }
}

static int parse_sizes(struct cfg *c, const char *s) {
        char *dup = strdup(s), *save = NULL;

        if (!dup)
                return -ENOMEM;
        c->nsizes = 0;
        for (char *t = strtok_r(dup, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                char *end;
                unsigned long v = strtoul(t, &end, 10);
                if (*end == 'k' || *end == 'K')
                        v <<= 10, end++;
                if (*end || v == 0 || v > (16u << 20) || c->nsizes >= 16) {
                        free(dup);
                        return -EINVAL;
                }
                c->sizes[c->nsizes++] = v;
        }
        free(dup);
        return c->nsizes ? 0 : -EINVAL;
}

static int parse_ring_sizes(struct cfg *c, const char *s) {
        char *dup = strdup(s), *save = NULL;

        if (!dup)
                return -ENOMEM;
        c->nring_sizes = 0;
        for (char *t = strtok_r(dup, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                char *end;
                unsigned long v = strtoul(t, &end, 0);
                if (*end == 'k' || *end == 'K')
                        v <<= 10, end++;
                else if (*end == 'm' || *end == 'M')
                        v <<= 20, end++;
                if (*end || v < 4096 || v > (64ul << 20) || (v & (v - 1)) || c->nring_sizes >= 8) {
                        free(dup);
                        return -EINVAL;
                }
                c->ring_sizes[c->nring_sizes++] = (uint32_t) v;
        }
        free(dup);
        return c->nring_sizes ? 0 : -EINVAL;
}

static int parse_tests(struct cfg *c, const char *s) {
        char *dup = strdup(s), *save = NULL;

        if (!dup)
                return -ENOMEM;
        c->t_ring = c->t_pingpong = c->t_stream = c->t_connect = false;
        for (char *t = strtok_r(dup, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                if (strcmp(t, "ring") == 0)
                        c->t_ring = true;
                else if (strcmp(t, "pingpong") == 0)
                        c->t_pingpong = true;
                else if (strcmp(t, "stream") == 0)
                        c->t_stream = true;
                else if (strcmp(t, "connect") == 0)
                        c->t_connect = true;
                else {
                        free(dup);
                        return -EINVAL;
                }
        }
        free(dup);
        return 0;
}

static void usage(FILE *f) {
        fprintf(f,
                "usage: bench-net [--mode smc|tcp|both] [--json] [--tests ring,pingpong,stream,connect]\n"
                "                 [--time SEC] [--iters N] [--sizes 14,64,1K,16K] [--ring-size 128K,1M]\n"
                "                 [--ring-piece BYTES] [--bufsize BYTES] [--read-size BYTES] [--rx-offset N]\n"
                "                 [--repeat N] [--server-cpu 0|1]\n");
}

int main(int argc, char **argv) {
        static const struct option opts[] = {
                { "mode", required_argument, NULL, 'm' },
                { "json", no_argument, NULL, 'j' },
                { "tests", required_argument, NULL, 't' },
                { "time", required_argument, NULL, 'T' },
                { "iters", required_argument, NULL, 'n' },
                { "sizes", required_argument, NULL, 's' },
                { "ring-size", required_argument, NULL, 'R' },
                { "ring-piece", required_argument, NULL, 'P' },
                { "help", no_argument, NULL, 'h' },
                /* internal: the server child */
                { "serve", required_argument, NULL, 'S' },
                { "size", required_argument, NULL, 'z' },
                { "bufsize", required_argument, NULL, 'B' },
                { "read-size", required_argument, NULL, 'r' },
                { "repeat", required_argument, NULL, 'k' },
                { "server-cpu", required_argument, NULL, 'C' },
                { "rx-offset", required_argument, NULL, 'o' },
                { "report-fd", required_argument, NULL, 'F' },
                {}
        };
        struct cfg c = {
                .seconds = 2.0,
                .iters = 20000,
                .sizes = { 14, 64, 1024, 16384 },
                .nsizes = 4,
                .read_size = STREAM_READ_DEFAULT,
                .repeat = 3,
                .server_cpu = 1,
                .ring_sizes = { SMC_DMB_DEFAULT_SIZE, SMC_DMB_MAX_SIZE },
                .nring_sizes = 2,
                .modes = { &tcp_ops, &smc_ops },
                .nmodes = 2,
                .t_ring = true, .t_pingpong = true, .t_stream = true, .t_connect = true,
        };
        const char *serve_kind = NULL, *mode = "both";
        size_t serve_size = 0;
        int report_fd = -1, opt;
        static struct results res;

        while ((opt = getopt_long(argc, argv, "jh", opts, NULL)) >= 0) {
                switch (opt) {
                case 'm':
                        mode = optarg;
                        break;
                case 'j':
                        c.json = true;
                        break;
                case 't':
                        if (parse_tests(&c, optarg) < 0) {
                                fprintf(stderr, "bench-net: bad --tests '%s'\n", optarg);
                                return 2;
                        }
                        break;
                case 'T':
                        c.seconds = strtod(optarg, NULL);
                        if (!(c.seconds > 0 && c.seconds <= 600)) {
                                fprintf(stderr, "bench-net: bad --time '%s'\n", optarg);
                                return 2;
                        }
                        break;
                case 'n':
                        c.iters = (unsigned) strtoul(optarg, NULL, 10);
                        if (c.iters == 0) {
                                fprintf(stderr, "bench-net: bad --iters '%s'\n", optarg);
                                return 2;
                        }
                        break;
                case 's':
                        if (parse_sizes(&c, optarg) < 0) {
                                fprintf(stderr, "bench-net: bad --sizes '%s'\n", optarg);
                                return 2;
                        }
                        break;
                case 'R':
                        if (parse_ring_sizes(&c, optarg) < 0) {
                                fprintf(stderr, "bench-net: --ring-size takes powers of 2, 4 KiB .. 64 MiB\n");
                                return 2;
                        }
                        break;
                case 'P': {
                        unsigned long v = strtoul(optarg, NULL, 0);
                        if (v < 64 || v > RING_CHUNK) {
                                fprintf(stderr, "bench-net: --ring-piece must be 64 .. %u bytes\n", RING_CHUNK);
                                return 2;
                        }
                        c.ring_piece = (uint32_t) v;
                        break;
                }
                case 'S':
                        serve_kind = optarg;
                        break;
                case 'r': {
                        char *end;
                        unsigned long v = strtoul(optarg, &end, 0);
                        if (*end == 'k' || *end == 'K')
                                v <<= 10, end++;
                        else if (*end == 'm' || *end == 'M')
                                v <<= 20, end++;
                        if (*end || v == 0 || v > (64ul << 20)) {
                                fprintf(stderr, "bench-net: bad --read-size '%s'\n", optarg);
                                return 2;
                        }
                        c.read_size = v;
                        break;
                }
                case 'C':
                        c.server_cpu = atoi(optarg);
                        if (c.server_cpu < 0 || c.server_cpu > 1) {
                                fprintf(stderr, "bench-net: --server-cpu must be 0 or 1\n");
                                return 2;
                        }
                        break;
                case 'k':
                        c.repeat = (unsigned) strtoul(optarg, NULL, 10);
                        if (c.repeat < 1 || c.repeat > 16) {
                                fprintf(stderr, "bench-net: --repeat must be 1 .. 16\n");
                                return 2;
                        }
                        break;
                case 'o':
                        c.rx_offset = strtoul(optarg, NULL, 0);
                        if (c.rx_offset > 4095) {
                                fprintf(stderr, "bench-net: --rx-offset must be 0 .. 4095\n");
                                return 2;
                        }
                        break;
                case 'B':
                        c.bufsize = atoi(optarg);
                        if (c.bufsize < 0 || c.bufsize > (64 << 20)) {
                                fprintf(stderr, "bench-net: bad --bufsize '%s'\n", optarg);
                                return 2;
                        }
                        break;
                case 'z':
                        serve_size = strtoul(optarg, NULL, 10);
                        break;
                case 'F':
                        report_fd = atoi(optarg);
                        break;
                default: /* 'h' (--help): exit 0; '?' (a bad option): 2 */
                        return bench_usage_exit(usage, opt == 'h' ? 0 : 2);
                }
        }
        if (optind < argc)
                return bench_usage_exit(usage, 2);

        if (serve_kind) {
                const struct net_ops *o = ops_by_name(mode);
                int k = -1, r;

                for (int i = 0; i < 3; i++)
                        if (strcmp(serve_kind, serve_names[i]) == 0)
                                k = i;
                if (!o || k < 0 || report_fd < 0 || (k == SERVE_PINGPONG && serve_size == 0))
                        return 2;
                signal(SIGPIPE, SIG_IGN);
                r = serve(o, (enum server_kind) k, serve_size, c.bufsize, c.read_size, c.rx_offset, report_fd);
                if (r < 0) {
                        fprintf(stderr, "bench-net server (%s %s): %s\n", mode, serve_kind, strerror(-r));
                        return 1;
                }
                return 0;
        }

        if (strcmp(mode, "both") != 0) {
                const struct net_ops *o = ops_by_name(mode);
                if (!o) {
                        fprintf(stderr, "bench-net: --mode must be smc, tcp or both\n");
                        return 2;
                }
                c.modes[0] = o;
                c.nmodes = 1;
        }

        signal(SIGPIPE, SIG_IGN);
        c.cpus = ncpus();
        c.pinned = c.cpus >= 2 && pin_cpu(0) == 0;
        if (c.json) {
                printf("{\"bench\":\"net\",\"test\":\"machine\",\"cpus\":%d,\"pinned\":%s,"
                       "\"client_cpu\":0,\"server_cpu\":%d}\n",
                       c.cpus, c.pinned ? "true" : "false", c.server_cpu);
                fflush(stdout);
        }

        /* The ring first, before any smc_* call created library state to inherit. */
        if (c.t_ring) {
                int r = test_ring(&c, &res);
                if (r < 0)
                        report_error(&c, &res, "ring", NULL, r);
        }
        if (c.t_pingpong)
                for (unsigned i = 0; i < c.nsizes; i++)
                        for (unsigned m = 0; m < c.nmodes; m++) {
                                int r = test_pingpong(&c, &res, c.modes[m], c.sizes[i]);
                                if (r < 0)
                                        report_error(&c, &res, "pingpong", c.modes[m], r);
                        }
        if (c.t_stream)
                run_repeated(&c, &res, TEST_STREAM);
        if (c.t_connect)
                run_repeated(&c, &res, TEST_CONNECT);

        if (!c.json)
                print_table(&c, &res);
        return res.failures ? 1 : 0;
}
