/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Integration tests (tier 2): a real smcd in a private runtime directory, real
 * client processes (fork: one server, one client), real data.
 *
 *   test-integration SMCD_BINARY [CASE...]
 *
 * For each case: mkdtemp a runtime directory, start smcd there, run the case in its
 * own process group with SMCD_RUNTIME_DIR pointing at it, check that smcd's counters
 * settle back (no client, listener, connection or buffer left), stop smcd with
 * SIGTERM and require a clean exit. Output is TAP ("ok N - name" / "not ok N - name:
 * reason"), diagnostics on stderr prefixed with "# ". Exit status 1 if any case
 * failed.
 *
 * Every process of a case reports its first failure into one MAP_SHARED page, so the
 * "not ok" line names the failing check even when it happened in a grandchild.
 *
 * Cases (name or number selects one):
 *   1 echo                   SMC-D on both ends over 127.0.0.1, ::1, 0.0.0.0 <- 127.0.0.2
 *   2 bulk-1B-64MiB-...      1 B .. 64 MiB both ways at once (sender + receiver thread
 *                            per side), every byte checked; smcd's byte counters exact
 *   3 1000-concurrent-...    1000 connections open at once, each echoes, all closed;
 *                            conns_current and pool in_use back to 0
 *   4 socket-semantics-...   MSG_PEEK, MSG_TRUNC, MSG_WAITALL, EAGAIN, SHUT_WR/EOF, close keeps data,
 *                            ECONNRESET, EPIPE/SIGPIPE, nonblocking connect, ECONNREFUSED:
 *                            each run over libc TCP and over smc_*, same assertions
 *   5 no-smcd-tcp-fallback   no smcd / no dir / stale socket: TCP, NOSMCDDEV, 1 MiB ok
 *   6 client-sigkill-...     sender SIGKILLed: receiver gets all data then EOF (as TCP);
 *                            receiver SIGKILLed: sender gets ECONNRESET/EPIPE; within 2 s,
 *                            buffers back and cleared
 *   7 smcd-sigkill           established SMC-D keeps flowing; new connections TCP
 *   8 listen-semantics       EADDRINUSE between TCP and SMC listeners; a plain TCP client
 *                            on an SMC listener; an SMC client on a plain listener
 *   9-11 per-uid limits      --max-conns-per-uid (two uids, then one uid: smcd counts
 *                            endpoints) and --max-buf-per-uid: TCP with MAXCONNERR / MAX_DMB
 */

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <grp.h>
#include <unistd.h>

#include "helpers.h"
#include "smc-clc.h"
#include "smcproto.h"
#include "sock-ops.h"

#define KiB 1024ull
#define MiB (1024ull * 1024ull)
#define REASON_ANY UINT32_MAX
#define RUNDIR_ENV "SMCD_RUNTIME_DIR" /* where clients look for smcd.sock */

/* ---- failure reporting, shared by every process of a case ---- */

struct shared {
        atomic_int failed;
        char reason[1024];
        _Atomic uint64_t t_kill_ns; /* when the case process sent a SIGKILL */
        _Atomic uint16_t port;      /* the current pair's listening port */
};

/* The one global of this test: set up before the first fork, so every process of
 * every case writes to the same page. */
static struct shared *shm;

static int fail_at(int line, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail_at(int line, const char *fmt, ...) {
        char buf[900];
        int expected = 0;
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(buf, sizeof(buf), fmt, ap);
        va_end(ap);
        if (atomic_compare_exchange_strong(&shm->failed, &expected, 1))
                snprintf(shm->reason, sizeof(shm->reason), "%s (line %d, pid %d)", buf, line,
                         (int) getpid());
        fprintf(stderr, "# [pid %d] line %d: %s\n", (int) getpid(), line, buf);
        return -1;
}

#define FAIL(...) fail_at(__LINE__, __VA_ARGS__)
#define CHECK(cond, ...)                          \
        do {                                      \
                if (!(cond))                      \
                        return FAIL(__VA_ARGS__); \
        } while (0)

static bool failed(void) {
        return atomic_load(&shm->failed) != 0;
}

/* ---- the two socket APIs: sock_ops_tcp (libc, real TCP) and sock_ops_smc
 * (libsmcproto), tests/sock-ops.h ---- */

/* ---- small socket helpers ---- */

static const char *mode_name(int mode) {
        switch (mode) {
        case SMC_PROTO_MODE_NONE: return "NONE";
        case SMC_PROTO_MODE_SMCD: return "SMCD";
        case SMC_PROTO_MODE_TCP: return "TCP";
        default: return "?";
        }
}

/* Checks an smc socket's mode and fallback reason (want_reason REASON_ANY: any). */
static int expect_mode(int fd, const char *who, int want_mode, uint32_t want_reason) {
        int mode = -1;
        uint32_t reason = UINT32_MAX;
        socklen_t l = sizeof(mode);

        if (smc_getsockopt(fd, SOL_SMC, SMC_PROTO_MODE, &mode, &l) < 0)
                return FAIL("%s: getsockopt(SOL_SMC, SMC_PROTO_MODE): %m", who);
        l = sizeof(reason);
        if (smc_getsockopt(fd, SOL_SMC, SMC_PROTO_FALLBACK_REASON, &reason, &l) < 0)
                return FAIL("%s: getsockopt(SOL_SMC, SMC_PROTO_FALLBACK_REASON): %m", who);
        CHECK(mode == want_mode, "%s: mode %s (fallback reason %s 0x%08x), expected %s", who,
              mode_name(mode), smc_clc_decl_name(reason), reason, mode_name(want_mode));
        if (want_mode == SMC_PROTO_MODE_SMCD)
                CHECK(reason == 0, "%s: mode SMCD but fallback reason 0x%08x", who, reason);
        else if (want_reason != REASON_ANY)
                CHECK(reason == want_reason, "%s: fallback reason %s (0x%08x), expected %s", who,
                      smc_clc_decl_name(reason), reason, smc_clc_decl_name(want_reason));
        return 0;
}

static socklen_t make_addr(const char *ip, uint16_t port, struct sockaddr_storage *ss) {
        memset(ss, 0, sizeof(*ss));
        if (strchr(ip, ':')) {
                struct sockaddr_in6 *s6 = (struct sockaddr_in6 *) ss;

                s6->sin6_family = AF_INET6;
                s6->sin6_port = htons(port);
                inet_pton(AF_INET6, ip, &s6->sin6_addr);
                return sizeof(*s6);
        } else {
                struct sockaddr_in *s4 = (struct sockaddr_in *) ss;

                s4->sin_family = AF_INET;
                s4->sin_port = htons(port);
                inet_pton(AF_INET, ip, &s4->sin_addr);
                return sizeof(*s4);
        }
}

static uint16_t addr_port(const struct sockaddr_storage *ss) {
        if (ss->ss_family == AF_INET6)
                return ntohs(((const struct sockaddr_in6 *) ss)->sin6_port);
        return ntohs(((const struct sockaddr_in *) ss)->sin_port);
}

static bool addr_equal(const struct sockaddr_storage *a, const struct sockaddr_storage *b) {
        if (a->ss_family != b->ss_family)
                return false;
        if (a->ss_family == AF_INET6) {
                const struct sockaddr_in6 *x = (const void *) a, *y = (const void *) b;

                return x->sin6_port == y->sin6_port &&
                       memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(x->sin6_addr)) == 0;
        }
        const struct sockaddr_in *x = (const void *) a, *y = (const void *) b;

        return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
}

static const char *addr_str(const struct sockaddr_storage *ss, char *buf, size_t len) {
        char ip[INET6_ADDRSTRLEN] = "?";

        if (ss->ss_family == AF_INET6)
                inet_ntop(AF_INET6, &((const struct sockaddr_in6 *) ss)->sin6_addr, ip, sizeof(ip));
        else if (ss->ss_family == AF_INET)
                inet_ntop(AF_INET, &((const struct sockaddr_in *) ss)->sin_addr, ip, sizeof(ip));
        snprintf(buf, len, "%s:%u (family %d)", ip, addr_port(ss), ss->ss_family);
        return buf;
}

/* Creates a listener on ip:port (port 0: any); returns the fd and the port. */
static int listen_on(const struct sock_ops *o, const char *ip, uint16_t port, int backlog,
                     uint16_t *ret_port) {
        struct sockaddr_storage ss;
        socklen_t len = make_addr(ip, port, &ss);
        int fd, one = 1;

        fd = o->socket(ss.ss_family, SOCK_STREAM, 0);
        if (fd < 0)
                return FAIL("%s socket(%s): %m", o->name, ip);
        if (o->setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0) {
                FAIL("%s setsockopt(SO_REUSEADDR): %m", o->name);
                goto fail;
        }
        if (o->bind(fd, (struct sockaddr *) &ss, len) < 0) {
                FAIL("%s bind(%s:%u): %m", o->name, ip, port);
                goto fail;
        }
        if (o->listen(fd, backlog) < 0) {
                FAIL("%s listen: %m", o->name);
                goto fail;
        }
        len = sizeof(ss);
        if (o->getsockname(fd, (struct sockaddr *) &ss, &len) < 0) {
                FAIL("%s getsockname(listener): %m", o->name);
                goto fail;
        }
        *ret_port = addr_port(&ss);
        return fd;
fail:
        o->close(fd);
        return -1;
}

/* Sends all of buf (MSG_NOSIGNAL). Returns len, or -errno. */
static ssize_t send_all(const struct sock_ops *o, int fd, const void *buf, size_t len) {
        size_t done = 0;

        while (done < len) {
                ssize_t n = o->send(fd, (const char *) buf + done, len - done, MSG_NOSIGNAL);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if (n == 0)
                        return -EIO;
                done += (size_t) n;
        }
        return (ssize_t) done;
}

/* Receives until len bytes or EOF. Returns the count, or -errno. */
static ssize_t recv_all(const struct sock_ops *o, int fd, void *buf, size_t len) {
        size_t done = 0;

        while (done < len) {
                ssize_t n = o->recv(fd, (char *) buf + done, len - done, 0);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if (n == 0)
                        break;
                done += (size_t) n;
        }
        return (ssize_t) done;
}

/* Waits up to timeout_ms for events on one fd; returns revents (0 on timeout). */
static int wait_fd(const struct sock_ops *o, int fd, short events, int timeout_ms) {
        struct pollfd p = { .fd = fd, .events = events };
        int r;

        do
                r = o->poll(&p, 1, timeout_ms);
        while (r < 0 && errno == EINTR);
        if (r < 0)
                return -errno;
        return r == 0 ? 0 : p.revents;
}

/* ---- side channels between the processes of a case (pipes of u64) ---- */

static int chan_put(int fd, uint64_t v) {
        ssize_t n;

        do
                n = write(fd, &v, sizeof(v));
        while (n < 0 && errno == EINTR);
        return n == sizeof(v) ? 0 : -EPIPE;
}

static int chan_get(int fd, uint64_t *ret, int timeout_ms) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        ssize_t n;
        int r;

        do
                r = poll(&p, 1, timeout_ms);
        while (r < 0 && errno == EINTR);
        if (r == 0)
                return -ETIMEDOUT;
        do
                n = read(fd, ret, sizeof(*ret));
        while (n < 0 && errno == EINTR);
        return n == sizeof(*ret) ? 0 : -EPIPE;
}

/* ---- bidirectional transfer: a sender and a receiver thread per side ---- */

struct xfer_half {
        const struct sock_ops *o;
        int fd;
        uint64_t size, seed, rng;
        const char *who;
        int r;
};

static void *xfer_sender(void *arg) {
        struct xfer_half *h = arg;
        size_t cap = 256 * KiB;
        uint8_t *buf = malloc(cap);
        uint64_t off = 0;

        h->r = -1;
        if (!buf) {
                FAIL("%s: out of memory", h->who);
                return NULL;
        }
        while (off < h->size) {
                size_t n = 1 + xorshift64s(&h->rng) % cap;
                ssize_t r;

                if (n > h->size - off)
                        n = h->size - off;
                pattern_fill(h->seed, off, buf, n);
                r = send_all(h->o, h->fd, buf, n);
                if (r < 0) {
                        errno = (int) -r;
                        FAIL("%s: send at offset %" PRIu64 " of %" PRIu64 ": %m", h->who, off, h->size);
                        goto out;
                }
                off += n;
        }
        if (h->o->shutdown(h->fd, SHUT_WR) < 0) {
                FAIL("%s: shutdown(SHUT_WR) after %" PRIu64 " bytes: %m", h->who, off);
                goto out;
        }
        h->r = 0;
out:
        free(buf);
        return NULL;
}

static void *xfer_receiver(void *arg) {
        struct xfer_half *h = arg;
        size_t cap = 256 * KiB;
        uint8_t *buf = malloc(cap);
        uint64_t off = 0;

        h->r = -1;
        if (!buf) {
                FAIL("%s: out of memory", h->who);
                return NULL;
        }
        for (;;) {
                size_t want = 1 + xorshift64s(&h->rng) % cap;
                ssize_t n = h->o->recv(h->fd, buf, want, 0), bad;

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        FAIL("%s: recv at offset %" PRIu64 " of %" PRIu64 ": %m", h->who, off, h->size);
                        goto out;
                }
                if (n == 0)
                        break;
                if (off + (uint64_t) n > h->size) {
                        FAIL("%s: received %" PRIu64 " bytes, more than the %" PRIu64 " sent", h->who,
                             off + (uint64_t) n, h->size);
                        goto out;
                }
                bad = pattern_check(h->seed, off, buf, (size_t) n);
                if (bad >= 0) {
                        FAIL("%s: data corrupt at offset %" PRIu64 " of %" PRIu64, h->who,
                             off + (uint64_t) bad, h->size);
                        goto out;
                }
                off += (uint64_t) n;
        }
        if (off != h->size) {
                FAIL("%s: EOF after %" PRIu64 " of %" PRIu64 " bytes", h->who, off, h->size);
                goto out;
        }
        h->r = 0;
out:
        free(buf);
        return NULL;
}

/* Sends size bytes of stream seed_tx while receiving and checking size bytes of
 * stream seed_rx, then EOF, at the same time on one socket. *ret_ns: elapsed. */
static int xfer_bidir(const struct sock_ops *o, int fd, uint64_t size, uint64_t seed_tx,
                      uint64_t seed_rx, const char *who, uint64_t *ret_ns) {
        struct xfer_half tx = { .o = o, .fd = fd, .size = size, .seed = seed_tx, .rng = seed_tx * 7 + 1, .who = who };
        struct xfer_half rx = { .o = o, .fd = fd, .size = size, .seed = seed_rx, .rng = seed_rx * 13 + 5, .who = who };
        uint64_t t0 = now_ns();
        pthread_t t;
        int r;

        r = pthread_create(&t, NULL, xfer_sender, &tx);
        CHECK(r == 0, "%s: pthread_create: %s", who, strerror(r));
        xfer_receiver(&rx);
        pthread_join(t, NULL);
        if (ret_ns)
                *ret_ns = now_ns() - t0;
        return tx.r < 0 || rx.r < 0 ? -1 : 0;
}

/* ---- a server process and a client process ---- */

struct pair;
/* A side's body. Owns fd (closes it). In manual mode the server gets the listener
 * (the harness closes it) and the client gets -1. Returns 0 or -1 (after FAIL). */
typedef int (*pair_fn)(struct pair *p, int fd);

struct pair {
        const struct sock_ops *sops, *cops; /* the server's and the client's API */
        const char *listen_ip;              /* default 127.0.0.1 */
        const char *connect_ip;             /* default listen_ip */
        int backlog;                        /* default 128 */
        bool manual;
        int smode, cmode;     /* expected modes of smc sockets; 0: not checked */
        uint32_t creason;     /* expected client fallback reason (mode TCP) */
        int timeout_s;        /* per process, default 60 */
        bool client_killed;   /* the case SIGKILLs the client */
        void *arg;
        pid_t spid, cpid;
        int s2c[2], c2s[2];   /* server <-> client */
        int note[2];          /* both sides -> case process */
        int go_c[2], go_s[2]; /* case process -> client, -> server */
};

static void close_fds(int *fds, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (fds[i] >= 0) {
                        close(fds[i]);
                        fds[i] = -1;
                }
}

static int pair_connect(struct pair *p, const struct sock_ops *o, int *ret_fd) {
        const char *ip = p->connect_ip ? p->connect_ip : p->listen_ip;
        struct sockaddr_storage ss;
        socklen_t len = make_addr(ip, atomic_load(&shm->port), &ss);
        int fd;

        fd = o->socket(ss.ss_family, SOCK_STREAM, 0);
        if (fd < 0)
                return FAIL("%s socket: %m", o->name);
        while (o->connect(fd, (struct sockaddr *) &ss, len) < 0) {
                if (errno == EINTR)
                        continue;
                FAIL("%s connect(%s:%u): %m", o->name, ip, atomic_load(&shm->port));
                o->close(fd);
                return -1;
        }
        *ret_fd = fd;
        return 0;
}

static int pair_accept(struct pair *p, int lfd, int *ret_fd) {
        int fd;

        do
                fd = p->sops->accept(lfd, NULL, NULL);
        while (fd < 0 && errno == EINTR);
        if (fd < 0)
                return FAIL("%s accept: %m", p->sops->name);
        *ret_fd = fd;
        return 0;
}

static void __attribute__((noreturn)) pair_server(struct pair *p, pair_fn fn) {
        uint16_t port;
        int lfd, r = -1;

        prctl(PR_SET_PDEATHSIG, SIGKILL);
        alarm((unsigned) p->timeout_s);
        close_fds((int[]) { p->s2c[0], p->c2s[1], p->note[0], p->go_c[0], p->go_c[1], p->go_s[1] }, 6);
        lfd = listen_on(p->sops, p->listen_ip, 0, p->backlog, &port);
        if (lfd < 0)
                exit(1);
        atomic_store(&shm->port, port);
        if (chan_put(p->s2c[1], port) < 0) {
                FAIL("server: cannot tell the client the port");
                exit(1);
        }
        if (p->manual)
                r = fn(p, lfd);
        else {
                int fd;

                if (pair_accept(p, lfd, &fd) == 0) {
                        if (p->sops->smc && p->smode && expect_mode(fd, "server", p->smode, REASON_ANY) < 0)
                                p->sops->close(fd);
                        else
                                r = fn(p, fd);
                }
        }
        p->sops->close(lfd);
        exit(r == 0 && !failed() ? 0 : 1);
}

static void __attribute__((noreturn)) pair_client(struct pair *p, pair_fn fn) {
        uint64_t port;
        int r = -1;

        prctl(PR_SET_PDEATHSIG, SIGKILL);
        alarm((unsigned) p->timeout_s);
        close_fds((int[]) { p->s2c[1], p->c2s[0], p->note[0], p->go_c[1], p->go_s[0], p->go_s[1] }, 6);
        if (chan_get(p->s2c[0], &port, p->timeout_s * 1000) < 0) {
                FAIL("client: no port from the server");
                exit(1);
        }
        if (p->manual)
                r = fn(p, -1);
        else {
                int fd;

                if (pair_connect(p, p->cops, &fd) == 0) {
                        if (p->cops->smc && p->cmode && expect_mode(fd, "client", p->cmode, p->creason) < 0)
                                p->cops->close(fd);
                        else
                                r = fn(p, fd);
                }
        }
        exit(r == 0 && !failed() ? 0 : 1);
}

static int pair_start(struct pair *p, pair_fn server, pair_fn client) {
        if (!p->sops)
                p->sops = &sock_ops_smc;
        if (!p->cops)
                p->cops = p->sops;
        if (!p->listen_ip)
                p->listen_ip = "127.0.0.1";
        if (!p->backlog)
                p->backlog = 128;
        if (!p->timeout_s)
                p->timeout_s = 60;
        if (pipe2(p->s2c, O_CLOEXEC) < 0 || pipe2(p->c2s, O_CLOEXEC) < 0 || pipe2(p->note, O_CLOEXEC) < 0 ||
            pipe2(p->go_c, O_CLOEXEC) < 0 || pipe2(p->go_s, O_CLOEXEC) < 0)
                return FAIL("pipe2: %m");
        atomic_store(&shm->port, 0);
        fflush(NULL);
        p->spid = fork();
        if (p->spid < 0)
                return FAIL("fork: %m");
        if (p->spid == 0)
                pair_server(p, server);
        p->cpid = fork();
        if (p->cpid < 0)
                return FAIL("fork: %m");
        if (p->cpid == 0)
                pair_client(p, client);
        close_fds((int[]) { p->s2c[0], p->s2c[1], p->c2s[0], p->c2s[1], p->note[1], p->go_c[0], p->go_s[0] }, 7);
        return 0;
}

static const char *describe_status(int st, char *buf, size_t len) {
        if (WIFEXITED(st))
                snprintf(buf, len, "exited with status %d", WEXITSTATUS(st));
        else if (WIFSIGNALED(st))
                snprintf(buf, len, "killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
        else
                snprintf(buf, len, "wait status 0x%x", st);
        return buf;
}

/* Waits for both sides (killing them after their timeout); 0 if both succeeded. */
static int pair_wait(struct pair *p) {
        uint64_t deadline = now_ns() + (uint64_t) (p->timeout_s + 5) * 1000000000ull;
        pid_t pids[2] = { p->spid, p->cpid };
        int st[2] = { 0, 0 }, r = 0;
        bool done[2] = { false, false };

        while (!done[0] || !done[1]) {
                for (int i = 0; i < 2; i++) {
                        if (done[i])
                                continue;
                        pid_t w = waitpid(pids[i], &st[i], WNOHANG);

                        if (w == pids[i] || (w < 0 && errno != EINTR))
                                done[i] = true;
                }
                if (now_ns() > deadline) {
                        for (int i = 0; i < 2; i++)
                                if (!done[i]) {
                                        kill(pids[i], SIGKILL);
                                        waitpid(pids[i], &st[i], 0);
                                        done[i] = true;
                                }
                        r = FAIL("server or client hung (killed after %d s)", p->timeout_s + 5);
                }
                if (!done[0] || !done[1])
                        sleep_ms(1);
        }
        close_fds((int[]) { p->note[0], p->go_c[1], p->go_s[1] }, 3);
        for (int i = 0; i < 2; i++) {
                char buf[128];
                bool killed_ok = i == 1 && p->client_killed && WIFSIGNALED(st[i]) && WTERMSIG(st[i]) == SIGKILL;

                if ((WIFEXITED(st[i]) && WEXITSTATUS(st[i]) == 0) || killed_ok)
                        continue;
                r = FAIL("%s %s", i == 0 ? "server" : "client", describe_status(st[i], buf, sizeof(buf)));
        }
        return failed() ? -1 : r;
}

static int pair_run(struct pair *p, pair_fn server, pair_fn client) {
        if (pair_start(p, server, client) < 0)
                return -1;
        return pair_wait(p);
}

/* Runs fn(arg) in a child process (fresh library state); 0 if it succeeded. */
static int run_child(int (*fn)(void *), void *arg, int timeout_s) {
        char buf[128];
        pid_t pid;
        int st;

        fflush(NULL);
        pid = fork();
        if (pid < 0)
                return FAIL("fork: %m");
        if (pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                alarm((unsigned) timeout_s);
                exit(fn(arg) == 0 && !failed() ? 0 : 1);
        }
        while (waitpid(pid, &st, 0) < 0)
                if (errno != EINTR)
                        return FAIL("waitpid: %m");
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %s", describe_status(st, buf, sizeof(buf)));
        return failed() ? -1 : 0;
}

/* ---- the case context and smcd's counters ---- */

struct ctx {
        struct smcd_instance *smcd;
        const char *smcd_path;
};

static int get_stats(struct ctx *c, struct json_object **ret) {
        int r = smcd_stats(c->smcd, ret, 5000);

        if (r < 0) {
                errno = -r;
                return FAIL("cannot read smcd stats (%s): %m", c->smcd->stats);
        }
        return 0;
}

static int stat_value(struct json_object *o, const char *path, int64_t *ret) {
        int r = stats_get(o, path, ret);

        if (r < 0) {
                errno = -r;
                return FAIL("stats.json: key %s: %m", path);
        }
        return 0;
}

struct stat_cond {
        const char *path;
        char op; /* '=', '>', '<' (<=) */
        int64_t value;
};

/* Polls smcd's counters until every condition holds (up to timeout_ms). */
static int wait_stats(struct ctx *c, const struct stat_cond *conds, size_t n, int timeout_ms,
                      const char *what) {
        uint64_t deadline = now_ns() + (uint64_t) timeout_ms * 1000000ull;

        for (;;) {
                struct json_object *o;
                const struct stat_cond *bad = NULL;
                int64_t v = 0;

                if (get_stats(c, &o) < 0)
                        return -1;
                for (size_t i = 0; i < n && !bad; i++) {
                        if (stat_value(o, conds[i].path, &v) < 0) {
                                json_object_put(o);
                                return -1;
                        }
                        if ((conds[i].op == '=' && v != conds[i].value) ||
                            (conds[i].op == '>' && v <= conds[i].value) ||
                            (conds[i].op == '<' && v > conds[i].value))
                                bad = &conds[i];
                }
                if (!bad) {
                        json_object_put(o);
                        return 0;
                }
                if (now_ns() > deadline) {
                        const char *js = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);

                        fprintf(stderr, "# stats: %s\n", js);
                        FAIL("%s: after %d ms %s = %" PRId64 ", expected %s %" PRId64, what, timeout_ms,
                             bad->path, v, bad->op == '=' ? "==" : bad->op == '>' ? ">" : "<=", bad->value);
                        json_object_put(o);
                        return -1;
                }
                json_object_put(o);
                sleep_ms(20);
        }
}

/* ======================= case 1: echo over SMC-D ======================= */

static int echo_server(struct pair *p, int fd) {
        char buf[65536];

        for (;;) {
                ssize_t n = smc_recv(fd, buf, sizeof(buf), 0), w;

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        FAIL("echo server: recv: %m");
                        smc_close(fd);
                        return -1;
                }
                if (n == 0)
                        break;
                w = send_all(&sock_ops_smc, fd, buf, (size_t) n);
                if (w < 0) {
                        errno = (int) -w;
                        FAIL("echo server: send: %m");
                        smc_close(fd);
                        return -1;
                }
        }
        CHECK(smc_close(fd) == 0, "echo server: close: %m");
        return 0;
}

static int echo_client_body(struct pair *p, int fd) {
        static const size_t sizes[] = { 1, 14, 100, 1000, 4096, 16384, 32768 };
        struct sockaddr_storage peer, self;
        socklen_t l = sizeof(peer);
        char want[32768], got[32768];
        char b1[96];

        CHECK(smc_getpeername(fd, (struct sockaddr *) &peer, &l) == 0, "getpeername: %m");
        CHECK(addr_port(&peer) == atomic_load(&shm->port), "getpeername port %u, listener port %u",
              addr_port(&peer), atomic_load(&shm->port));
        l = sizeof(self);
        CHECK(smc_getsockname(fd, (struct sockaddr *) &self, &l) == 0, "getsockname: %m");
        CHECK(self.ss_family == peer.ss_family && addr_port(&self) != 0, "getsockname: %s",
              addr_str(&self, b1, sizeof(b1)));

        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
                for (int round = 0; round < 3; round++) {
                        ssize_t n;

                        pattern_fill(1000 + i, (uint64_t) round * 40000, want, sizes[i]);
                        n = send_all(&sock_ops_smc, fd, want, sizes[i]);
                        CHECK(n == (ssize_t) sizes[i], "echo: send %zu: %s", sizes[i], strerror((int) -n));
                        n = recv_all(&sock_ops_smc, fd, got, sizes[i]);
                        CHECK(n == (ssize_t) sizes[i], "echo: recv %zu: got %zd (%s)", sizes[i], n,
                              n < 0 ? strerror((int) -n) : "EOF");
                        CHECK(memcmp(want, got, sizes[i]) == 0, "echo: %zu bytes came back different", sizes[i]);
                }
        }
        CHECK(smc_shutdown(fd, SHUT_WR) == 0, "shutdown: %m");
        CHECK(smc_recv(fd, got, sizeof(got), 0) == 0, "no EOF after the echo server closed: %m");
        CHECK(smc_close(fd) == 0, "close: %m");
        return 0;
}

static int echo_server_v(struct pair *p, int fd) {
        struct sockaddr_storage peer, self;
        socklen_t l = sizeof(peer);

        if (smc_getpeername(fd, (struct sockaddr *) &peer, &l) < 0) {
                smc_close(fd);
                return FAIL("server getpeername: %m");
        }
        l = sizeof(self);
        if (smc_getsockname(fd, (struct sockaddr *) &self, &l) < 0 || addr_port(&self) != atomic_load(&shm->port)) {
                smc_close(fd);
                return FAIL("server getsockname: port %u, listener port %u (%m)", addr_port(&self),
                            atomic_load(&shm->port));
        }
        return echo_server(p, fd);
}

static int case_echo(struct ctx *c) {
        static const struct {
                const char *listen_ip, *connect_ip;
        } v[] = {
                { "127.0.0.1", "127.0.0.1" },
                { "::1", "::1" },
                { "0.0.0.0", "127.0.0.2" },
        };
        struct json_object *o;
        int64_t cl = 0, sv = 0;

        for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
                struct pair p = {
                        .listen_ip = v[i].listen_ip, .connect_ip = v[i].connect_ip,
                        .smode = SMC_PROTO_MODE_SMCD, .cmode = SMC_PROTO_MODE_SMCD,
                };

                if (pair_run(&p, echo_server_v, echo_client_body) < 0)
                        return FAIL("echo listen %s connect %s failed", v[i].listen_ip, v[i].connect_ip);
                fprintf(stderr, "# echo listen %s, connect %s: SMCD both ends, ok\n", v[i].listen_ip,
                        v[i].connect_ip);
        }
        if (get_stats(c, &o) < 0)
                return -1;
        if (stat_value(o, "smcd.conns_client", &cl) < 0 || stat_value(o, "smcd.conns_server", &sv) < 0) {
                json_object_put(o);
                return -1;
        }
        json_object_put(o);
        CHECK(cl == 3 && sv == 3, "stats: conns_client %" PRId64 " conns_server %" PRId64 ", expected 3 and 3", cl, sv);
        return 0;
}

/* ============= case 2: 1 B .. 64 MiB both directions at once ============= */

struct xfer_arg {
        uint64_t size;
        uint64_t ns;
};

static int xfer_server(struct pair *p, int fd) {
        struct xfer_arg *a = p->arg;
        int r = xfer_bidir(p->sops, fd, a->size, a->size * 2 + 2, a->size * 2 + 1, "server", NULL);

        if (p->sops->close(fd) < 0 && r == 0)
                return FAIL("server: close: %m");
        return r;
}

static int xfer_client(struct pair *p, int fd) {
        struct xfer_arg *a = p->arg;
        uint64_t ns = 0;
        int r = xfer_bidir(p->cops, fd, a->size, a->size * 2 + 1, a->size * 2 + 2, "client", &ns);

        if (r == 0 && a->size >= MiB) {
                int mode = 0;
                socklen_t l = sizeof(mode);

                if (p->cops->smc)
                        smc_getsockopt(fd, SOL_SMC, SMC_PROTO_MODE, &mode, &l);
                fprintf(stderr, "# %s API, mode %s: %" PRIu64 " bytes each way in %.1f ms, %.0f MB/s each way "
                        "(with pattern generation and checking)\n", p->cops->name,
                        p->cops->smc ? mode_name(mode) : "TCP", a->size, ns / 1e6, (double) a->size / (ns / 1e3));
        }
        if (p->cops->close(fd) < 0 && r == 0)
                return FAIL("client: close: %m");
        return r;
}

static int case_bulk(struct ctx *c) {
        static const uint64_t sizes[] = { 1, 7, 4095, 65536, 65537, MiB + 3, 64 * MiB };
        uint64_t total = 0;

        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
                struct xfer_arg a = { .size = sizes[i] };
                struct pair p = {
                        .smode = SMC_PROTO_MODE_SMCD, .cmode = SMC_PROTO_MODE_SMCD,
                        .arg = &a, .timeout_s = 90,
                };

                if (pair_run(&p, xfer_server, xfer_client) < 0)
                        return FAIL("%" PRIu64 " bytes both ways failed", sizes[i]);
                total += sizes[i];
        }
        /* smcd counts the bytes from the cursors when a connection ends; 7
         * connections one after the other in one trust domain reuse buffers */
        return wait_stats(c, (const struct stat_cond[]) {
                                  { "smcd.conns_current", '=', 0 },
                                  { "smcd.conns_closed", '=', 7 },
                                  { "smcd.bytes_tx", '=', (int64_t) total },
                                  { "smcd.bytes_rx", '=', (int64_t) total },
                                  { "pool.reuse", '>', 0 },
                          }, 5, 5000, "byte and buffer counters");
}

/* ============== case 3: 1000 concurrent connections ============== */

#define MANY 1000

static int many_server(struct pair *p, int lfd) {
        struct pollfd *pf = calloc(MANY, sizeof(*pf));
        int answered = 0, eofs = 0, r = -1;
        char msg[16], want[16];

        if (!pf)
                return FAIL("out of memory");
        for (int i = 0; i < MANY; i++)
                pf[i].fd = -1;
        for (int i = 0; i < MANY; i++) {
                char who[32];

                if (pair_accept(p, lfd, &pf[i].fd) < 0)
                        goto out;
                pf[i].events = POLLIN;
                snprintf(who, sizeof(who), "server conn %d", i);
                if (expect_mode(pf[i].fd, who, SMC_PROTO_MODE_SMCD, REASON_ANY) < 0)
                        goto out;
        }
        if (chan_put(p->s2c[1], 1) < 0) {
                FAIL("server: side channel");
                goto out;
        }
        while (eofs < MANY) {
                int n = smc_poll(pf, MANY, 20000);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0) {
                        FAIL("server: poll: %s (answered %d, EOFs %d)", n == 0 ? "timeout" : strerror(errno),
                             answered, eofs);
                        goto out;
                }
                for (int i = 0; i < MANY; i++) {
                        ssize_t k;
                        int idx;

                        if (pf[i].fd < 0 || !pf[i].revents)
                                continue;
                        k = smc_recv(pf[i].fd, msg, sizeof(msg), MSG_DONTWAIT);
                        if (k < 0 && (errno == EAGAIN || errno == EINTR))
                                continue;
                        if (k == 0) {
                                smc_close(pf[i].fd);
                                pf[i].fd = -1;
                                eofs++;
                                continue;
                        }
                        if (k != (ssize_t) sizeof(msg) || sscanf(msg, "conn %d", &idx) != 1 || idx != i) {
                                FAIL("server conn %d: recv %zd: %.16s (%m)", i, k, k > 0 ? msg : "");
                                goto out;
                        }
                        snprintf(want, sizeof(want), "ack  %09d", i);
                        if (send_all(&sock_ops_smc, pf[i].fd, want, sizeof(want)) != (ssize_t) sizeof(want)) {
                                FAIL("server conn %d: send failed", i);
                                goto out;
                        }
                        answered++;
                }
        }
        if (answered != MANY) {
                FAIL("server: answered %d of %d", answered, MANY);
                goto out;
        }
        r = 0;
out:
        for (int i = 0; i < MANY; i++)
                if (pf[i].fd >= 0)
                        smc_close(pf[i].fd);
        free(pf);
        return r;
}

static int many_client(struct pair *p, int unused) {
        int *fds = calloc(MANY, sizeof(int)), r = -1, opened = 0;
        char msg[16], got[16], want[16];
        uint64_t v, t0 = now_ns();

        if (!fds)
                return FAIL("out of memory");
        for (; opened < MANY; opened++) {
                char who[32];

                if (pair_connect(p, &sock_ops_smc, &fds[opened]) < 0)
                        goto out;
                snprintf(who, sizeof(who), "client conn %d", opened);
                if (expect_mode(fds[opened], who, SMC_PROTO_MODE_SMCD, REASON_ANY) < 0) {
                        opened++;
                        goto out;
                }
        }
        fprintf(stderr, "# %d SMC-D connects in %.1f ms\n", MANY, (now_ns() - t0) / 1e6);
        if (chan_get(p->s2c[0], &v, 30000) < 0) {
                FAIL("client: server did not accept all connections");
                goto out;
        }
        /* all 1000 open at both ends: let the case process look at the counters */
        if (chan_put(p->note[1], 1) < 0 || chan_get(p->go_c[0], &v, 30000) < 0) {
                FAIL("client: no go from the case process");
                goto out;
        }
        for (int i = 0; i < MANY; i++) {
                memset(msg, 0, sizeof(msg));
                snprintf(msg, sizeof(msg), "conn %d", i);
                if (send_all(&sock_ops_smc, fds[i], msg, sizeof(msg)) != (ssize_t) sizeof(msg)) {
                        FAIL("client conn %d: send failed: %m", i);
                        goto out;
                }
        }
        for (int i = 0; i < MANY; i++) {
                ssize_t k = recv_all(&sock_ops_smc, fds[i], got, sizeof(got));

                snprintf(want, sizeof(want), "ack  %09d", i);
                if (k != (ssize_t) sizeof(got) || memcmp(got, want, sizeof(want)) != 0) {
                        FAIL("client conn %d: reply %zd bytes %.16s", i, k, k > 0 ? got : "");
                        goto out;
                }
        }
        r = 0;
out:
        t0 = now_ns();
        for (int i = 0; i < opened; i++)
                if (smc_close(fds[i]) < 0 && r == 0)
                        r = FAIL("client conn %d: close: %m", i);
        if (r == 0)
                fprintf(stderr, "# %d closes in %.1f ms\n", MANY, (now_ns() - t0) / 1e6);
        free(fds);
        return r;
}

static int case_many(struct ctx *c) {
        struct pair p = { .manual = true, .backlog = 1024, .timeout_s = 90 };
        struct json_object *o;
        int64_t cur = 0, inuse = 0;
        uint64_t v;
        int r;

        if (pair_start(&p, many_server, many_client) < 0)
                return -1;
        r = chan_get(p.note[0], &v, 80000);
        if (r == 0) {
                r = get_stats(c, &o);
                if (r == 0) {
                        if (stat_value(o, "smcd.conns_current", &cur) < 0 ||
                            stat_value(o, "pool.in_use", &inuse) < 0)
                                r = -1;
                        else {
                                fprintf(stderr, "# with %d open: conns_current %" PRId64 ", pool in_use %" PRId64 "\n",
                                        MANY, cur, inuse);
                                if (cur != MANY)
                                        r = FAIL("conns_current %" PRId64 " with %d connections open", cur, MANY);
                                else if (inuse != 2 * MANY)
                                        r = FAIL("pool in_use %" PRId64 " with %d connections open, expected %d",
                                                 inuse, MANY, 2 * MANY);
                        }
                        json_object_put(o);
                }
                chan_put(p.go_c[1], 1);
        }
        if (pair_wait(&p) < 0 || r < 0)
                return -1;
        return wait_stats(c, (const struct stat_cond[]) {
                                  { "smcd.conns_current", '=', 0 },
                                  { "pool.in_use", '=', 0 },
                                  { "pool.pending_clear", '=', 0 },
                          }, 3, 5000, "after closing all");
}

/* ===== case 4: socket semantics, each over TCP and over SMC-D, same checks ===== */

/* MSG_PEEK and poll readiness */
static int peek_server(struct pair *p, int fd) {
        const struct sock_ops *o = p->sops;
        char buf[64];
        ssize_t n = 0;
        uint64_t t;

        CHECK(o->recv(fd, buf, sizeof(buf), MSG_PEEK | MSG_DONTWAIT) < 0 && errno == EAGAIN,
              "peek on an empty socket: expected EAGAIN, got %m");
        CHECK(wait_fd(o, fd, POLLIN, 0) == 0, "poll reports POLLIN on an empty socket");
        CHECK(chan_put(p->s2c[1], 1) == 0, "side channel");
        CHECK(wait_fd(o, fd, POLLIN, 5000) & POLLIN, "no POLLIN within 5 s after the peer sent");
        n = o->recv(fd, buf, 5, MSG_PEEK);
        CHECK(n == 5 && memcmp(buf, "hello", 5) == 0, "peek 5: %zd %m", n);
        t = now_ns();
        do {
                n = o->recv(fd, buf, sizeof(buf), MSG_PEEK | MSG_DONTWAIT);
        } while (n >= 0 && n < 11 && now_ns() - t < 2000000000ull);
        CHECK(n == 11 && memcmp(buf, "hello world", 11) == 0, "peek 64: %zd %m", n);
        n = o->recv(fd, buf, sizeof(buf), MSG_PEEK);
        CHECK(n == 11 && memcmp(buf, "hello world", 11) == 0, "second peek: %zd %m", n);
        CHECK(wait_fd(o, fd, POLLIN, 0) & POLLIN, "POLLIN gone after a peek");
        memset(buf, 0, sizeof(buf));
        n = o->recv(fd, buf, 6, 0);
        CHECK(n == 6 && memcmp(buf, "hello ", 6) == 0, "recv 6 after peek: %zd %m", n);
        n = o->recv(fd, buf, 3, MSG_PEEK);
        CHECK(n == 3 && memcmp(buf, "wor", 3) == 0, "peek after partial recv: %zd %m", n);
        n = o->recv(fd, buf, sizeof(buf), 0);
        CHECK(n == 5 && memcmp(buf, "world", 5) == 0, "recv rest: %zd %m", n);
        CHECK(o->recv(fd, buf, sizeof(buf), MSG_DONTWAIT) < 0 && errno == EAGAIN,
              "recv on drained socket: expected EAGAIN, got %m");
        CHECK(wait_fd(o, fd, POLLIN, 0) == 0, "POLLIN on a drained socket");
        CHECK(chan_put(p->s2c[1], 2) == 0, "side channel");
        n = o->recv(fd, buf, sizeof(buf), 0);
        CHECK(n == 0, "expected EOF, got %zd %m", n);
        return o->close(fd) == 0 ? 0 : FAIL("close: %m");
}

static int peek_client(struct pair *p, int fd) {
        uint64_t v;

        CHECK(chan_get(p->s2c[0], &v, 10000) == 0, "side channel");
        CHECK(p->cops->send(fd, "hello world", 11, MSG_NOSIGNAL) == 11, "send: %m");
        CHECK(chan_get(p->s2c[0], &v, 10000) == 0, "side channel");
        return p->cops->close(fd) == 0 ? 0 : FAIL("close: %m");
}

/* MSG_TRUNC (tcp(7)): the bytes are dropped, not copied; the buffer may be NULL (the
 * client is MSG_PEEK's) */
static int trunc_server(struct pair *p, int fd) {
        const struct sock_ops *o = p->sops;
        char buf[64] = { 0 };
        ssize_t n;
        uint64_t t;

        CHECK(o->recv(fd, NULL, 4, MSG_TRUNC | MSG_DONTWAIT) < 0 && errno == EAGAIN,
              "MSG_TRUNC on an empty socket: expected EAGAIN, got %m");
        CHECK(chan_put(p->s2c[1], 1) == 0, "side channel");
        t = now_ns();
        do {
                n = o->recv(fd, buf, sizeof(buf), MSG_PEEK | MSG_DONTWAIT);
        } while ((n >= 0 || errno == EAGAIN) && n < 11 && now_ns() - t < 2000000000ull);
        CHECK(n == 11, "peek 11: %zd %m", n);
        n = o->recv(fd, NULL, 3, MSG_TRUNC | MSG_PEEK);
        CHECK(n == 3, "MSG_TRUNC|MSG_PEEK 3: %zd %m", n);
        n = o->recv(fd, NULL, 6, MSG_TRUNC);
        CHECK(n == 6, "MSG_TRUNC 6 into NULL: %zd %m", n);
        memset(buf, '#', sizeof(buf));
        n = o->recv(fd, buf, 2, MSG_TRUNC);
        CHECK(n == 2 && buf[0] == '#' && buf[1] == '#', "MSG_TRUNC 2 touched the buffer or failed: %zd %m", n);
        n = o->recv(fd, buf, sizeof(buf), 0);
        CHECK(n == 3 && memcmp(buf, "rld", 3) == 0, "recv after MSG_TRUNC: %zd '%.3s' %m", n, buf);
        CHECK(chan_put(p->s2c[1], 2) == 0, "side channel");
        n = o->recv(fd, NULL, 100, MSG_TRUNC);
        CHECK(n == 0, "MSG_TRUNC at EOF: %zd %m", n);
        return o->close(fd) == 0 ? 0 : FAIL("close: %m");
}

/* MSG_WAITALL: assembles slow pieces, spans more than a ring, stops at EOF */
static int waitall_server(struct pair *p, int fd) {
        const struct sock_ops *o = p->sops;
        size_t big = 300 * KiB;
        char *buf = malloc(big);
        ssize_t n;
        int r = -1;

        if (!buf)
                return FAIL("out of memory");
        n = o->recv(fd, buf, 10000, MSG_WAITALL);
        if (n != 10000 || pattern_check(41, 0, buf, 10000) >= 0) {
                FAIL("WAITALL 10000 of slow pieces: %zd %m", n);
                goto out;
        }
        n = o->recv(fd, buf, big, MSG_WAITALL);
        if (n != (ssize_t) big || pattern_check(42, 0, buf, big) >= 0) {
                FAIL("WAITALL %zu: %zd %m", big, n);
                goto out;
        }
        n = o->recv(fd, buf, 1000, MSG_WAITALL);
        if (n != 100 || pattern_check(43, 0, buf, 100) >= 0) {
                FAIL("WAITALL 1000 with 100 bytes then EOF: expected 100, got %zd %m", n);
                goto out;
        }
        n = o->recv(fd, buf, 1000, MSG_WAITALL);
        if (n != 0) {
                FAIL("WAITALL at EOF: expected 0, got %zd %m", n);
                goto out;
        }
        r = 0;
out:
        free(buf);
        if (o->close(fd) < 0 && r == 0)
                r = FAIL("close: %m");
        return r;
}

static int waitall_client(struct pair *p, int fd) {
        const struct sock_ops *o = p->cops;
        size_t big = 300 * KiB;
        char *buf = malloc(big);
        int r = -1;

        if (!buf)
                return FAIL("out of memory");
        pattern_fill(41, 0, buf, 10000);
        for (int i = 0; i < 10; i++) {
                if (send_all(o, fd, buf + i * 1000, 1000) != 1000) {
                        FAIL("send: %m");
                        goto out;
                }
                sleep_ms(3);
        }
        pattern_fill(42, 0, buf, big);
        for (size_t off = 0; off < big; off += 3000) {
                size_t n = big - off < 3000 ? big - off : 3000;

                if (send_all(o, fd, buf + off, n) != (ssize_t) n) {
                        FAIL("send: %m");
                        goto out;
                }
        }
        pattern_fill(43, 0, buf, 100);
        if (send_all(o, fd, buf, 100) != 100 || o->shutdown(fd, SHUT_WR) < 0) {
                FAIL("send/shutdown: %m");
                goto out;
        }
        r = 0;
out:
        free(buf);
        if (o->close(fd) < 0 && r == 0)
                r = FAIL("close: %m");
        return r;
}

/* Nonblocking: EAGAIN on an empty socket, and on a full ring */
static int eagain_server(struct pair *p, int fd) {
        const struct sock_ops *o = p->sops;
        size_t cap = 256 * KiB;
        char *buf = malloc(cap);
        uint64_t total = 0, off = 0;
        int r = -1;

        if (!buf)
                return FAIL("out of memory");
        if (!(o->recv(fd, buf, 10, MSG_DONTWAIT) < 0 && errno == EAGAIN)) {
                FAIL("recv(MSG_DONTWAIT) on empty: expected EAGAIN, got %m");
                goto out;
        }
        if (o->set_nonblock(fd, true) < 0) {
                FAIL("O_NONBLOCK: %m");
                goto out;
        }
        if (!(o->recv(fd, buf, 10, 0) < 0 && errno == EAGAIN)) {
                FAIL("recv on empty O_NONBLOCK socket: expected EAGAIN, got %m");
                goto out;
        }
        if (o->set_nonblock(fd, false) < 0) {
                FAIL("clear O_NONBLOCK: %m");
                goto out;
        }
        if (chan_put(p->s2c[1], 1) < 0 || chan_get(p->c2s[0], &total, 30000) < 0) {
                FAIL("side channel");
                goto out;
        }
        while (off < total) {
                size_t want = total - off < cap ? total - off : cap;
                ssize_t n = o->recv(fd, buf, want, 0);

                if (n <= 0) {
                        FAIL("recv at %" PRIu64 " of %" PRIu64 ": %zd %m", off, total, n);
                        goto out;
                }
                if (pattern_check(44, off, buf, (size_t) n) >= 0) {
                        FAIL("data corrupt near %" PRIu64, off);
                        goto out;
                }
                off += (uint64_t) n;
        }
        if (!(o->recv(fd, buf, 10, MSG_DONTWAIT) < 0 && errno == EAGAIN)) {
                FAIL("recv(MSG_DONTWAIT) after reading all %" PRIu64 ": expected EAGAIN, got %m", total);
                goto out;
        }
        if (chan_put(p->s2c[1], 2) < 0) {
                FAIL("side channel");
                goto out;
        }
        if (recv_all(o, fd, buf, 1) != 1 || pattern_check(44, total, buf, 1) >= 0) {
                FAIL("last byte: %m");
                goto out;
        }
        if (o->recv(fd, buf, 10, 0) != 0) {
                FAIL("expected EOF: %m");
                goto out;
        }
        r = 0;
out:
        free(buf);
        if (o->close(fd) < 0 && r == 0)
                r = FAIL("close: %m");
        return r;
}

static int eagain_client(struct pair *p, int fd) {
        const struct sock_ops *o = p->cops;
        size_t chunk = 64 * KiB;
        char *buf = malloc(chunk);
        uint64_t total = 0, v;
        int r = -1, rev;

        if (!buf)
                return FAIL("out of memory");
        if (chan_get(p->s2c[0], &v, 10000) < 0) {
                FAIL("side channel");
                goto out;
        }
        if (o->set_nonblock(fd, true) < 0) {
                FAIL("O_NONBLOCK: %m");
                goto out;
        }
        if (!(o->recv(fd, buf, 10, 0) < 0 && errno == EAGAIN)) {
                FAIL("client recv on empty O_NONBLOCK socket: expected EAGAIN, got %m");
                goto out;
        }
        for (;;) {
                ssize_t n;

                pattern_fill(44, total, buf, chunk);
                n = o->send(fd, buf, chunk, MSG_NOSIGNAL);
                if (n < 0 && errno == EAGAIN)
                        break;
                if (n <= 0) {
                        FAIL("nonblocking send after %" PRIu64 " bytes: %zd %m", total, n);
                        goto out;
                }
                total += (uint64_t) n;
                if (total > 256 * MiB) {
                        FAIL("nonblocking send never returned EAGAIN (peer not reading, %" PRIu64 " bytes)", total);
                        goto out;
                }
        }
        if (total == 0) {
                FAIL("EAGAIN before anything was sent");
                goto out;
        }
        fprintf(stderr, "# %s: EAGAIN after %" PRIu64 " bytes buffered\n", o->name, total);
        if (chan_put(p->c2s[1], total) < 0 || chan_get(p->s2c[0], &v, 30000) < 0) {
                FAIL("side channel");
                goto out;
        }
        rev = wait_fd(o, fd, POLLOUT, 2000);
        if (!(rev > 0 && (rev & POLLOUT))) {
                FAIL("no POLLOUT within 2 s after the peer drained everything (revents %d)", rev);
                goto out;
        }
        pattern_fill(44, total, buf, 1);
        if (o->send(fd, buf, 1, MSG_NOSIGNAL) != 1) {
                FAIL("send after drain: %m");
                goto out;
        }
        r = 0;
out:
        free(buf);
        if (o->close(fd) < 0 && r == 0)
                r = FAIL("close: %m");
        return r;
}

/* shutdown(SHUT_WR): the peer reads everything, then EOF; the other direction lives on */
#define SHUT_BYTES (200 * KiB)
static int shutwr_server(struct pair *p, int fd) {
        const struct sock_ops *o = p->sops;
        char *buf = malloc(SHUT_BYTES + 1);
        ssize_t n;
        int r = -1;

        if (!buf)
                return FAIL("out of memory");
        n = recv_all(o, fd, buf, SHUT_BYTES + 1);
        if (n != SHUT_BYTES || pattern_check(45, 0, buf, SHUT_BYTES) >= 0) {
                FAIL("read %zd of %llu bytes before EOF (%s)", n, SHUT_BYTES, n < 0 ? strerror((int) -n) : "");
                goto out;
        }
        if (o->recv(fd, buf, 10, 0) != 0 || o->recv(fd, buf, 10, MSG_DONTWAIT) != 0) {
                FAIL("EOF does not repeat: %m");
                goto out;
        }
        if (!(wait_fd(o, fd, POLLIN, 0) & POLLIN)) {
                FAIL("no POLLIN at EOF");
                goto out;
        }
        if (o->send(fd, "bye", 3, MSG_NOSIGNAL) != 3) {
                FAIL("send to a half-closed peer: %m");
                goto out;
        }
        r = 0;
out:
        free(buf);
        if (o->close(fd) < 0 && r == 0)
                r = FAIL("close: %m");
        return r;
}

static int shutwr_client(struct pair *p, int fd) {
        const struct sock_ops *o = p->cops;
        char *buf = malloc(SHUT_BYTES);
        ssize_t n;
        int r = -1;

        if (!buf)
                return FAIL("out of memory");
        pattern_fill(45, 0, buf, SHUT_BYTES);
        if (send_all(o, fd, buf, SHUT_BYTES) != SHUT_BYTES || o->shutdown(fd, SHUT_WR) < 0) {
                FAIL("send/shutdown: %m");
                goto out;
        }
        if (!(o->send(fd, "x", 1, MSG_NOSIGNAL) < 0 && errno == EPIPE)) {
                FAIL("send after shutdown(SHUT_WR): expected EPIPE, got %m");
                goto out;
        }
        n = recv_all(o, fd, buf, 10);
        if (n != 3 || memcmp(buf, "bye", 3) != 0) {
                FAIL("after half close: expected \"bye\" then EOF, got %zd", n);
                goto out;
        }
        r = 0;
out:
        free(buf);
        if (o->close(fd) < 0 && r == 0)
                r = FAIL("close: %m");
        return r;
}

/* close() by the writer while its data is still unread: the peer still reads all of it */
#define CLOSE_BYTES (48 * KiB)
static int closeeof_server(struct pair *p, int fd) {
        const struct sock_ops *o = p->sops;
        char buf[CLOSE_BYTES + 1];
        uint64_t v;
        ssize_t n;

        if (chan_get(p->c2s[0], &v, 10000) < 0) {
                o->close(fd);
                return FAIL("side channel");
        }
        n = recv_all(o, fd, buf, sizeof(buf));
        o->close(fd);
        CHECK(n == CLOSE_BYTES, "after the writer's close: read %zd of %llu, then %s", n, CLOSE_BYTES,
              n < 0 ? strerror((int) -n) : "EOF");
        CHECK(pattern_check(46, 0, buf, CLOSE_BYTES) < 0, "data corrupt");
        return 0;
}

static int closeeof_client(struct pair *p, int fd) {
        char buf[CLOSE_BYTES];

        pattern_fill(46, 0, buf, sizeof(buf));
        if (send_all(p->cops, fd, buf, sizeof(buf)) != (ssize_t) sizeof(buf)) {
                p->cops->close(fd);
                return FAIL("send: %m");
        }
        CHECK(p->cops->close(fd) == 0, "close: %m");
        CHECK(chan_put(p->c2s[1], 1) == 0, "side channel");
        return 0;
}

/* close() with unread data: the peer gets ECONNRESET */
static int reset_server(struct pair *p, int fd) {
        const struct sock_ops *o = p->sops;
        uint64_t v;

        if (chan_get(p->c2s[0], &v, 10000) < 0 || !(wait_fd(o, fd, POLLIN, 5000) & POLLIN)) {
                o->close(fd);
                return FAIL("data from the client never arrived");
        }
        CHECK(o->close(fd) == 0, "close with unread data: %m");
        CHECK(chan_put(p->s2c[1], 1) == 0, "side channel");
        return 0;
}

static int reset_client(struct pair *p, int fd) {
        const struct sock_ops *o = p->cops;
        char buf[1000];
        uint64_t v, t0;
        ssize_t n;
        int rev;

        pattern_fill(47, 0, buf, sizeof(buf));
        if (send_all(o, fd, buf, sizeof(buf)) != (ssize_t) sizeof(buf) || chan_put(p->c2s[1], 1) < 0 ||
            chan_get(p->s2c[0], &v, 10000) < 0) {
                o->close(fd);
                return FAIL("send or side channel: %m");
        }
        t0 = now_ns();
        rev = wait_fd(o, fd, POLLIN, 2000);
        n = o->recv(fd, buf, sizeof(buf), 0);
        if (!(n < 0 && errno == ECONNRESET)) {
                FAIL("recv after the peer closed with unread data: expected ECONNRESET, got %zd %m (poll revents 0x%x after %.1f ms)",
                     n, rev, (now_ns() - t0) / 1e6);
                o->close(fd);
                return -1;
        }
        n = o->send(fd, buf, 10, MSG_NOSIGNAL);
        if (!(n < 0 && (errno == EPIPE || errno == ECONNRESET))) {
                FAIL("send after ECONNRESET: expected EPIPE, got %zd %m", n);
                o->close(fd);
                return -1;
        }
        CHECK(o->close(fd) == 0, "close: %m");
        return 0;
}

/* send() to a closed peer without MSG_NOSIGNAL: the first is taken, as TCP's, then EPIPE
 * and SIGPIPE */
static volatile sig_atomic_t sigpipes;
static void on_sigpipe(int sig) {
        sigpipes++;
}

static int sigpipe_server(struct pair *p, int fd) {
        CHECK(p->sops->close(fd) == 0, "close: %m");
        CHECK(chan_put(p->s2c[1], 1) == 0, "side channel");
        return 0;
}

static int sigpipe_client(struct pair *p, int fd) {
        const struct sock_ops *o = p->cops;
        struct sigaction sa = { .sa_handler = on_sigpipe };
        uint64_t v, t0;
        char buf[100] = { 0 };
        int sent = 0, resets = 0;

        sigaction(SIGPIPE, &sa, NULL);
        if (chan_get(p->s2c[0], &v, 10000) < 0) {
                o->close(fd);
                return FAIL("side channel");
        }
        CHECK(o->recv(fd, buf, sizeof(buf), 0) == 0, "expected EOF from the closed peer: %m");
        t0 = now_ns();
        for (;;) {
                int before = sigpipes;
                ssize_t n = o->send(fd, buf, sizeof(buf), 0);

                if (n > 0) {
                        sent++;
                } else if (n < 0 && errno == ECONNRESET) {
                        resets++;
                } else if (n < 0 && errno == EPIPE) {
                        /* as TCP: the first send after the peer's FIN goes out (the
                         * peer answers RST); EPIPE comes on a later one */
                        CHECK(sent >= 1, "EPIPE on the first send after the peer's close (TCP takes it)");
                        CHECK(sigpipes == before + 1, "EPIPE with %d SIGPIPE (expected 1)", sigpipes - before);
                        before = sigpipes;
                        n = o->send(fd, buf, sizeof(buf), MSG_NOSIGNAL);
                        CHECK(n < 0 && errno == EPIPE, "send(MSG_NOSIGNAL) to a closed peer: %zd %m", n);
                        CHECK(sigpipes == before, "SIGPIPE despite MSG_NOSIGNAL");
                        /* the connection is in state CLOSE now (the peer's RST) */
                        {
                                struct sockaddr_storage ss;
                                socklen_t sl = sizeof(ss);
                                struct tcp_info ti;
                                socklen_t tl = sizeof(ti);

                                CHECK(o->getpeername(fd, (struct sockaddr *) &ss, &sl) < 0 && errno == ENOTCONN,
                                      "getpeername after the reset: %m, want ENOTCONN");
                                CHECK(o->shutdown(fd, SHUT_WR) < 0 && errno == ENOTCONN,
                                      "shutdown after the reset: %m, want ENOTCONN");
                                CHECK(o->getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) == 0 &&
                                              ti.tcpi_state == TCP_CLOSE,
                                      "TCP_INFO state after the reset: %u, want CLOSE", ti.tcpi_state);
                                CHECK(o->recv(fd, buf, sizeof(buf), 0) == 0, "recv after the reset: %m, want EOF");
                        }
                        break;
                } else {
                        o->close(fd);
                        return FAIL("send to a closed peer: %zd %m", n);
                }
                if (now_ns() - t0 > 2000000000ull) {
                        o->close(fd);
                        return FAIL("no EPIPE within 2 s of the peer's close (%d sends ok, %d ECONNRESET)", sent, resets);
                }
                sleep_ms(5);
        }
        CHECK(o->close(fd) == 0, "close: %m");
        return 0;
}

/* A peer that shut down both directions but keeps the socket: the first send to it is
 * taken, it answers with a reset (TCP: tcp_rcv_state_process() in FIN_WAIT with the
 * receive side shut), later sends fail with EPIPE; the peer sees ECONNRESET */
static int shutboth_server(struct pair *p, int fd) {
        const struct sock_ops *o = p->sops;
        uint64_t v;
        int err = 0;
        socklen_t el = sizeof(err);
        char b;

        CHECK(o->shutdown(fd, SHUT_RDWR) == 0, "shutdown(SHUT_RDWR): %m");
        CHECK(chan_put(p->s2c[1], 1) == 0, "side channel");
        CHECK(chan_get(p->c2s[0], &v, 10000) == 0, "side channel");
        CHECK(o->getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == ECONNRESET,
              "SO_ERROR after the client's send: %d, want ECONNRESET", err);
        CHECK(o->recv(fd, &b, 1, MSG_DONTWAIT) == 0, "recv after the reset: %m, want 0");
        CHECK(o->send(fd, &b, 1, MSG_NOSIGNAL) < 0 && errno == EPIPE, "send after the reset: %m, want EPIPE");
        return o->close(fd) == 0 ? 0 : FAIL("close: %m");
}

static int shutboth_client(struct pair *p, int fd) {
        const struct sock_ops *o = p->cops;
        uint64_t v, t0;
        ssize_t n;
        char b;

        CHECK(chan_get(p->s2c[0], &v, 10000) == 0, "side channel");
        CHECK(o->recv(fd, &b, 1, 0) == 0, "EOF after the server's SHUT_RDWR: %m");
        CHECK(o->send(fd, "ab", 2, MSG_NOSIGNAL) == 2, "first send to a peer that shut both ways: %m");
        t0 = now_ns();
        do {
                sleep_ms(5);
                n = o->send(fd, "c", 1, MSG_NOSIGNAL);
        } while (n == 1 && now_ns() - t0 < 2000000000ull);
        CHECK(n < 0 && errno == EPIPE, "later send to a peer that shut both ways: %zd %m, want EPIPE", n);
        CHECK(chan_put(p->c2s[1], 1) == 0, "side channel");
        return o->close(fd) == 0 ? 0 : FAIL("close: %m");
}

/* The peer shuts down writing, then closes with our bytes unread (Python's
 * socketserver): its FIN comes before its RST, so TCP delivers the reply and EOF, and
 * reports the reset as EPIPE on a send, never ECONNRESET */
static int finrst_server(struct pair *p, int fd) {
        const struct sock_ops *o = p->sops;
        uint64_t v;

        CHECK(chan_get(p->c2s[0], &v, 10000) == 0, "side channel"); /* the client sent */
        CHECK(o->send(fd, "reply", 5, MSG_NOSIGNAL) == 5, "send: %m");
        CHECK(o->shutdown(fd, SHUT_WR) == 0, "shutdown(SHUT_WR): %m");
        return o->close(fd) == 0 ? 0 : FAIL("close: %m"); /* "unsent" unread: RST */
}

static int finrst_client(struct pair *p, int fd) {
        const struct sock_ops *o = p->cops;
        char buf[16] = { 0 };
        ssize_t n;
        int err = 0;
        socklen_t el = sizeof(err);

        CHECK(o->send(fd, "unread", 6, MSG_NOSIGNAL) == 6, "send: %m");
        CHECK(chan_put(p->c2s[1], 1) == 0, "side channel");
        n = recv_all(o, fd, buf, 5);
        CHECK(n == 5 && memcmp(buf, "reply", 5) == 0, "the reply before the peer's FIN: %zd %m", n);
        sleep_ms(50); /* the RST after the FIN */
        n = o->recv(fd, buf, sizeof(buf), 0);
        CHECK(n == 0, "recv after the peer's FIN and RST: %zd %m, want EOF", n);
        n = o->send(fd, "x", 1, MSG_NOSIGNAL);
        CHECK(n < 0 && errno == EPIPE, "send after the peer's FIN and RST: %zd %m, want EPIPE", n);
        CHECK(o->getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err != ECONNRESET,
              "SO_ERROR after the peer's FIN and RST: %d", err);
        return o->close(fd) == 0 ? 0 : FAIL("close: %m");
}

/* connect to a port with no listener: ECONNREFUSED, blocking and nonblocking */
static int refused_body(void *arg) {
        const struct sock_ops *o = arg;
        struct sockaddr_storage ss;
        socklen_t len;
        int holder, fd, err = 0, rev;
        socklen_t el = sizeof(err);
        uint16_t port;

        /* a bound, never listening TCP socket keeps the port ours and closed */
        holder = socket(AF_INET, SOCK_STREAM, 0);
        len = make_addr("127.0.0.1", 0, &ss);
        CHECK(holder >= 0 && bind(holder, (struct sockaddr *) &ss, len) == 0, "bind: %m");
        len = sizeof(ss);
        CHECK(getsockname(holder, (struct sockaddr *) &ss, &len) == 0, "getsockname: %m");
        port = addr_port(&ss);
        len = make_addr("127.0.0.1", port, &ss);

        fd = o->socket(AF_INET, SOCK_STREAM, 0);
        CHECK(fd >= 0, "socket: %m");
        CHECK(o->connect(fd, (struct sockaddr *) &ss, len) < 0 && errno == ECONNREFUSED,
              "%s blocking connect to a closed port: expected ECONNREFUSED, got %m", o->name);
        CHECK(o->getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == 0,
              "SO_ERROR after a refused blocking connect: %d", err);
        CHECK(o->close(fd) == 0, "close: %m");

        fd = o->socket(AF_INET, SOCK_STREAM, 0);
        CHECK(fd >= 0 && o->set_nonblock(fd, true) == 0, "socket: %m");
        if (o->connect(fd, (struct sockaddr *) &ss, len) < 0 && errno == EINPROGRESS) {
                rev = wait_fd(o, fd, POLLOUT, 2000);
                CHECK(rev > 0, "nonblocking connect: no event within 2 s");
                el = sizeof(err);
                CHECK(o->getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == ECONNREFUSED,
                      "%s nonblocking connect: SO_ERROR %s, expected ECONNREFUSED", o->name, strerror(err));
        } else
                CHECK(errno == ECONNREFUSED, "%s nonblocking connect: expected EINPROGRESS or ECONNREFUSED, got %m",
                      o->name);
        CHECK(o->close(fd) == 0, "close: %m");
        close(holder);
        return 0;
}

/* nonblocking connect to a listener: EINPROGRESS (or 0), then POLLOUT and SO_ERROR 0 */
static int nbconnect_server(struct pair *p, int lfd) {
        char buf[8];
        int fd;

        if (pair_accept(p, lfd, &fd) < 0)
                return -1;
        if (p->sops->smc && expect_mode(fd, "server", SMC_PROTO_MODE_SMCD, REASON_ANY) < 0) {
                p->sops->close(fd);
                return -1;
        }
        if (recv_all(p->sops, fd, buf, 4) != 4 || memcmp(buf, "ping", 4) != 0) {
                p->sops->close(fd);
                return FAIL("server: no ping");
        }
        CHECK(p->sops->close(fd) == 0, "close: %m");
        return 0;
}

static int nbconnect_client(struct pair *p, int unused) {
        const struct sock_ops *o = p->cops;
        struct sockaddr_storage ss;
        socklen_t len = make_addr("127.0.0.1", atomic_load(&shm->port), &ss), el;
        int fd, err = -1, rev;

        fd = o->socket(AF_INET, SOCK_STREAM, 0);
        CHECK(fd >= 0 && o->set_nonblock(fd, true) == 0, "socket: %m");
        if (o->connect(fd, (struct sockaddr *) &ss, len) < 0) {
                CHECK(errno == EINPROGRESS, "nonblocking connect: expected EINPROGRESS, got %m");
                rev = wait_fd(o, fd, POLLOUT, 5000);
                CHECK(rev > 0 && (rev & POLLOUT), "nonblocking connect: no POLLOUT within 5 s (%d)", rev);
        }
        el = sizeof(err);
        CHECK(o->getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == 0,
              "nonblocking connect: SO_ERROR %d", err);
        if (o->smc)
                CHECK(expect_mode(fd, "client", SMC_PROTO_MODE_SMCD, REASON_ANY) == 0, "mode");
        CHECK(wait_fd(o, fd, POLLOUT, 5000) & POLLOUT, "connected socket not writable");
        CHECK(o->send(fd, "ping", 4, MSG_NOSIGNAL) == 4, "send: %m");
        CHECK(o->set_nonblock(fd, false) == 0, "clear O_NONBLOCK: %m");
        CHECK(o->recv(fd, &err, 1, 0) == 0, "expected EOF after the server closed: %m");
        CHECK(o->close(fd) == 0, "close: %m");
        return 0;
}

struct semantic {
        const char *name;
        pair_fn server, client;
        bool manual;
        int (*single)(void *); /* instead of a pair */
};

static int case_semantics(struct ctx *c) {
        static const struct semantic tests[] = {
                { "MSG_PEEK", peek_server, peek_client, false, NULL },
                { "MSG_TRUNC", trunc_server, peek_client, false, NULL },
                { "MSG_WAITALL", waitall_server, waitall_client, false, NULL },
                { "nonblocking EAGAIN", eagain_server, eagain_client, false, NULL },
                { "shutdown(SHUT_WR) then EOF", shutwr_server, shutwr_client, false, NULL },
                { "close by the writer keeps its data", closeeof_server, closeeof_client, false, NULL },
                { "close with unread data -> ECONNRESET", reset_server, reset_client, false, NULL },
                { "EPIPE and SIGPIPE", sigpipe_server, sigpipe_client, false, NULL },
                { "send to a peer that shut both ways", shutboth_server, shutboth_client, false, NULL },
                { "FIN, then RST: EOF and EPIPE", finrst_server, finrst_client, false, NULL },
                { "nonblocking connect", nbconnect_server, nbconnect_client, true, NULL },
                { "ECONNREFUSED", NULL, NULL, false, refused_body },
        };
        const struct sock_ops *ops[] = { &sock_ops_tcp, &sock_ops_smc };
        char first[sizeof(shm->reason)] = "";
        int bad = 0;

        for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
                const char *res[2];

                for (int k = 0; k < 2; k++) {
                        int r;

                        if (tests[i].single)
                                r = run_child(tests[i].single, (void *) ops[k], 30);
                        else {
                                struct pair p = {
                                        .sops = ops[k], .manual = tests[i].manual, .timeout_s = 30,
                                        .smode = SMC_PROTO_MODE_SMCD, .cmode = SMC_PROTO_MODE_SMCD,
                                };

                                r = pair_run(&p, tests[i].server, tests[i].client);
                        }
                        res[k] = r == 0 ? "ok" : "FAILED";
                        if (r < 0) {
                                /* keep going: report every subtest, the first failure is the reason */
                                if (bad++ == 0)
                                        snprintf(first, sizeof(first), "%s over %s: %.900s", tests[i].name,
                                                 ops[k]->name, shm->reason);
                                atomic_store(&shm->failed, 0);
                        }
                }
                fprintf(stderr, "# %-40s tcp %s, smc %s\n", tests[i].name, res[0], res[1]);
        }
        if (bad) {
                snprintf(shm->reason, sizeof(shm->reason), "%d subtest run(s) failed; first: %.980s", bad, first);
                atomic_store(&shm->failed, 1);
                return -1;
        }
        return 0;
}

/* ================= case 5: no smcd: TCP fallback ================= */

static int fallback_variant(const char *what, const char *rundir) {
        struct xfer_arg a = { .size = MiB };
        struct pair p = {
                .smode = SMC_PROTO_MODE_TCP, .cmode = SMC_PROTO_MODE_TCP, .creason = SMC_CLC_DECL_NOSMCDDEV,
                .arg = &a, .timeout_s = 30,
        };

        setenv(RUNDIR_ENV, rundir, 1);
        if (pair_run(&p, xfer_server, xfer_client) < 0)
                return FAIL("%s: 1 MiB both ways over TCP fallback failed", what);
        fprintf(stderr, "# %s: TCP fallback (NOSMCDDEV), 1 MiB each way verified\n", what);
        return 0;
}

static int case_no_smcd(struct ctx *c) {
        char missing[PATH_MAX], stale[PATH_MAX];
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int fd;

        CHECK(fallback_variant("empty runtime directory", c->smcd->dir) == 0, "fallback");
        snprintf(missing, sizeof(missing), "%s/does-not-exist", c->smcd->dir);
        CHECK(fallback_variant("missing runtime directory", missing) == 0, "fallback");

        /* a stale socket file: bound, then closed, nobody listening */
        snprintf(stale, sizeof(stale), "%s", c->smcd->sock);
        fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
        CHECK(strlen(stale) < sizeof(sa.sun_path), "path too long: %s", stale);
        memcpy(sa.sun_path, stale, strlen(stale) + 1);
        CHECK(fd >= 0 && bind(fd, (struct sockaddr *) &sa, sizeof(sa)) == 0, "bind %s: %m", stale);
        close(fd);
        CHECK(fallback_variant("stale smcd.sock", c->smcd->dir) == 0, "fallback");
        return 0;
}

/* ============ case 6: a client killed with SIGKILL mid-transfer ============ */

#define KILL_AFTER (4 * MiB)

static int check_prompt(const char *what) {
        uint64_t t = now_ns(), tk = atomic_load(&shm->t_kill_ns);

        CHECK(tk != 0, "%s before the peer was killed", what);
        CHECK(t - tk <= 2000000000ull, "%s only %.0f ms after the peer was killed", what, (t - tk) / 1e6);
        fprintf(stderr, "# %s %.1f ms after SIGKILL\n", what, (t - tk) / 1e6);
        return 0;
}

/* the server receives; the client (the sender) is killed. As over TCP, where the
 * kernel closes a killed process's sockets orderly (FIN) unless data sent to it was
 * left unread, the receiver reads everything sent and then EOF. */
static int killsnd_server(struct pair *p, int fd) {
        size_t cap = 256 * KiB;
        char *buf = malloc(cap);
        uint64_t off = 0;
        bool noted = false;
        int r = -1;

        if (!buf)
                return FAIL("out of memory");
        for (;;) {
                ssize_t n = smc_recv(fd, buf, cap, 0);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        FAIL("receiver: after the sender was killed: expected EOF (as TCP), got %m");
                        goto out;
                }
                if (n == 0) {
                        if (off < KILL_AFTER) {
                                FAIL("receiver: EOF after only %" PRIu64 " bytes", off);
                                goto out;
                        }
                        r = check_prompt("EOF on recv");
                        goto out;
                }
                if (pattern_check(48, off, buf, (size_t) n) >= 0) {
                        FAIL("receiver: corrupt data near %" PRIu64, off);
                        goto out;
                }
                off += (uint64_t) n;
                if (!noted && off >= KILL_AFTER) {
                        noted = true;
                        chan_put(p->note[1], off);
                }
        }
out:
        free(buf);
        smc_close(fd);
        return r;
}

static int killsnd_client(struct pair *p, int fd) {
        size_t chunk = 64 * KiB;
        char *buf = malloc(chunk);
        uint64_t off = 0;

        if (!buf)
                return FAIL("out of memory");
        for (;;) {
                pattern_fill(48, off, buf, chunk);
                if (send_all(&sock_ops_smc, fd, buf, chunk) < 0) {
                        free(buf);
                        return FAIL("sender: send failed before it was killed: %m");
                }
                off += chunk;
        }
}

/* the server sends; the client (the receiver) is killed */
static int killrcv_server(struct pair *p, int fd) {
        size_t chunk = 64 * KiB;
        char *buf = malloc(chunk);
        uint64_t off = 0;
        bool noted = false;
        int r = -1;

        if (!buf)
                return FAIL("out of memory");
        for (;;) {
                ssize_t n;

                pattern_fill(49, off, buf, chunk);
                n = send_all(&sock_ops_smc, fd, buf, chunk);
                if (n < 0) {
                        if (n != -ECONNRESET && n != -EPIPE) {
                                FAIL("sender: after the receiver was killed: expected ECONNRESET or EPIPE, got %s",
                                     strerror((int) -n));
                                goto out;
                        }
                        r = check_prompt(n == -EPIPE ? "EPIPE on send" : "ECONNRESET on send");
                        goto out;
                }
                off += chunk;
                if (!noted && off >= KILL_AFTER) {
                        noted = true;
                        chan_put(p->note[1], off);
                }
        }
out:
        free(buf);
        smc_close(fd);
        return r;
}

static int killrcv_client(struct pair *p, int fd) {
        size_t cap = 256 * KiB;
        char *buf = malloc(cap);
        uint64_t off = 0;

        if (!buf)
                return FAIL("out of memory");
        for (;;) {
                ssize_t n = smc_recv(fd, buf, cap, 0);

                if (n <= 0) {
                        free(buf);
                        return FAIL("receiver: recv failed before it was killed: %zd %m", n);
                }
                if (pattern_check(49, off, buf, (size_t) n) >= 0) {
                        free(buf);
                        return FAIL("receiver: corrupt data near %" PRIu64, off);
                }
                off += (uint64_t) n;
        }
}

/* @orderly: the death must count as an orderly close (the killed sender had read
 * everything sent to it: nothing is ever sent to it here). Otherwise either is right,
 * as over TCP: a killed receiver whose buffer held unread data resets (aborted), one
 * that had just drained it closes orderly (FIN); the test cannot time the kill to one
 * or the other, so it checks that exactly one connection ended, either way. */
static int kill_run(struct ctx *c, const char *what, pair_fn server, pair_fn client, bool orderly) {
        struct pair p = {
                .smode = SMC_PROTO_MODE_SMCD, .cmode = SMC_PROTO_MODE_SMCD,
                .client_killed = true, .timeout_s = 30,
        };
        struct json_object *o;
        int64_t clear0 = 0, inuse0 = 0, closed0 = 0, aborted0 = 0, closed1 = 0, aborted1 = 0;
        uint64_t v;
        int r;

        atomic_store(&shm->t_kill_ns, 0);
        if (pair_start(&p, server, client) < 0)
                return -1;
        r = chan_get(p.note[0], &v, 20000);
        if (r < 0)
                FAIL("%s: transfer did not reach %llu bytes", what, KILL_AFTER);
        else if (get_stats(c, &o) == 0) {
                if (stat_value(o, "pool.clear", &clear0) < 0 || stat_value(o, "pool.in_use", &inuse0) < 0 ||
                    stat_value(o, "smcd.conns_closed", &closed0) < 0 ||
                    stat_value(o, "smcd.conns_aborted", &aborted0) < 0)
                        r = -1;
                json_object_put(o);
        } else
                r = -1;
        atomic_store(&shm->t_kill_ns, now_ns());
        kill(p.cpid, SIGKILL);
        if (pair_wait(&p) < 0 || r < 0)
                return -1;
        CHECK(inuse0 >= 2, "%s: pool in_use %" PRId64 " during the transfer", what, inuse0);
        if (wait_stats(c, (const struct stat_cond[]) {
                               { "pool.in_use", '=', 0 },
                               { "pool.pending_clear", '=', 0 },
                               { "pool.clear", '>', clear0 },
                               { "smcd.conns_current", '=', 0 },
                       }, 4, 5000, what) < 0)
                return -1;
        if (get_stats(c, &o) < 0)
                return -1;
        r = stat_value(o, "smcd.conns_closed", &closed1) < 0 || stat_value(o, "smcd.conns_aborted", &aborted1) < 0;
        json_object_put(o);
        if (r)
                return -1;
        CHECK((closed1 - closed0) + (aborted1 - aborted0) == 1, "%s: %" PRId64 " closed + %" PRId64 " aborted, want 1 in all",
              what, closed1 - closed0, aborted1 - aborted0);
        if (orderly)
                CHECK(closed1 - closed0 == 1, "%s: counted as aborted, want an orderly close", what);
        fprintf(stderr, "# %s: buffers back and cleared; %s\n", what, closed1 > closed0 ? "closed" : "aborted");
        return 0;
}

static int case_kill_client(struct ctx *c) {
        CHECK(kill_run(c, "sender killed", killsnd_server, killsnd_client, true) == 0, "sender killed");
        CHECK(kill_run(c, "receiver killed", killrcv_server, killrcv_client, false) == 0, "receiver killed");
        return 0;
}

/* ================= case 7: smcd killed with SIGKILL ================= */

static int smcdkill_server(struct pair *p, int lfd) {
        char buf[1000];
        uint64_t v;
        int fd;

        if (pair_accept(p, lfd, &fd) < 0)
                return -1;
        if (expect_mode(fd, "server conn 1", SMC_PROTO_MODE_SMCD, REASON_ANY) < 0 ||
            recv_all(&sock_ops_smc, fd, buf, sizeof(buf)) != (ssize_t) sizeof(buf) ||
            send_all(&sock_ops_smc, fd, buf, sizeof(buf)) != (ssize_t) sizeof(buf)) {
                smc_close(fd);
                return FAIL("server conn 1: ping before the kill");
        }
        if (chan_get(p->go_s[0], &v, 20000) < 0) {
                smc_close(fd);
                return FAIL("server: no go");
        }
        if (xfer_bidir(&sock_ops_smc, fd, MiB, 71, 70, "server conn 1 after smcd died", NULL) < 0) {
                smc_close(fd);
                return -1;
        }
        smc_close(fd);
        for (int i = 2; i <= 3; i++) {
                char who[64];

                snprintf(who, sizeof(who), "server conn %d after smcd died", i);
                if (pair_accept(p, lfd, &fd) < 0)
                        return -1;
                if (expect_mode(fd, who, SMC_PROTO_MODE_TCP, REASON_ANY) < 0 ||
                    xfer_bidir(&sock_ops_smc, fd, MiB, 70 + 2 * i + 1, 70 + 2 * i, who, NULL) < 0) {
                        smc_close(fd);
                        return -1;
                }
                smc_close(fd);
        }
        return 0;
}

static int smcdkill_newconn(struct pair *p, int i) {
        char who[64];
        int fd;

        snprintf(who, sizeof(who), "client conn %d after smcd died", i);
        if (pair_connect(p, &sock_ops_smc, &fd) < 0)
                return -1;
        if (expect_mode(fd, who, SMC_PROTO_MODE_TCP, SMC_CLC_DECL_NOSMCDDEV) < 0 ||
            xfer_bidir(&sock_ops_smc, fd, MiB, 70 + 2 * i, 70 + 2 * i + 1, who, NULL) < 0) {
                smc_close(fd);
                return -1;
        }
        CHECK(smc_close(fd) == 0, "%s: close: %m", who);
        return 0;
}

static int smcdkill_client(struct pair *p, int unused) {
        char buf[1000];
        uint64_t v;
        int fd;

        if (pair_connect(p, &sock_ops_smc, &fd) < 0)
                return -1;
        pattern_fill(69, 0, buf, sizeof(buf));
        if (expect_mode(fd, "client conn 1", SMC_PROTO_MODE_SMCD, REASON_ANY) < 0 ||
            send_all(&sock_ops_smc, fd, buf, sizeof(buf)) != (ssize_t) sizeof(buf) ||
            recv_all(&sock_ops_smc, fd, buf, sizeof(buf)) != (ssize_t) sizeof(buf) ||
            pattern_check(69, 0, buf, sizeof(buf)) >= 0) {
                smc_close(fd);
                return FAIL("client conn 1: ping before the kill");
        }
        if (chan_put(p->note[1], 1) < 0 || chan_get(p->go_c[0], &v, 20000) < 0) {
                smc_close(fd);
                return FAIL("client: no go");
        }
        if (xfer_bidir(&sock_ops_smc, fd, MiB, 70, 71, "client conn 1 after smcd died", NULL) < 0) {
                smc_close(fd);
                return -1;
        }
        CHECK(smc_close(fd) == 0, "close: %m");
        fprintf(stderr, "# established SMC-D connection: 1 MiB each way after smcd's death\n");

        /* a new connection from this process, whose control connection is dead */
        if (smcdkill_newconn(p, 2) < 0)
                return -1;
        fprintf(stderr, "# new connection from a process that knew smcd: TCP, NOSMCDDEV, data ok\n");
        CHECK(chan_put(p->note[1], 2) == 0, "side channel");
        return 0;
}

/* conn 3: from a process that never talked to smcd, and finds a stale smcd.sock */
static int smcdkill_fresh(void *arg) {
        if (smcdkill_newconn(arg, 3) < 0)
                return -1;
        fprintf(stderr, "# new connection from a fresh process: TCP, NOSMCDDEV, data ok\n");
        return 0;
}

static int case_kill_smcd(struct ctx *c) {
        struct pair p = { .manual = true, .timeout_s = 60 };
        uint64_t v, t0;
        int r;

        if (pair_start(&p, smcdkill_server, smcdkill_client) < 0)
                return -1;
        r = chan_get(p.note[0], &v, 20000);
        if (r < 0)
                FAIL("no established connection before killing smcd");
        else {
                CHECK(kill(c->smcd->pid, SIGKILL) == 0, "kill smcd: %m");
                t0 = now_ns();
                while (smcd_probe(c->smcd) == 0 && now_ns() - t0 < 5000000000ull)
                        sleep_ms(5);
                if (smcd_probe(c->smcd) == 0)
                        r = FAIL("smcd's socket still answers 5 s after SIGKILL");
        }
        chan_put(p.go_c[1], 1);
        chan_put(p.go_s[1], 1);
        if (r == 0) {
                /* after the client's conns 1 and 2 are done */
                r = chan_get(p.note[0], &v, 40000);
                if (r < 0)
                        FAIL("the client did not finish conns 1 and 2");
                else
                        r = run_child(smcdkill_fresh, &p, 30);
        }
        if (pair_wait(&p) < 0 || r < 0)
                return -1;
        return 0;
}

/* ================= case 8: listen semantics ================= */

static int bind_expect(const struct sock_ops *o, const char *ip, uint16_t port, int want_errno) {
        struct sockaddr_storage ss;
        socklen_t len = make_addr(ip, port, &ss);
        int fd = o->socket(ss.ss_family, SOCK_STREAM, 0), one = 1, r;

        CHECK(fd >= 0, "socket: %m");
        o->setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        r = o->bind(fd, (struct sockaddr *) &ss, len);
        if (want_errno) {
                if (!(r < 0 && errno == want_errno)) {
                        FAIL("%s bind(%s:%u): expected %s, got %s", o->name, ip, port, strerror(want_errno),
                             r == 0 ? "success" : strerror(errno));
                        o->close(fd);
                        return -1;
                }
        } else if (r < 0) {
                FAIL("%s bind(%s:%u): %m", o->name, ip, port);
                o->close(fd);
                return -1;
        }
        o->close(fd);
        return 0;
}

static int addrinuse_body(void *arg) {
        uint16_t p1, p2, p3;
        int l1, l2, l3;

        /* a port held by a plain TCP listener: smc_bind gets EADDRINUSE */
        l1 = listen_on(&sock_ops_tcp, "127.0.0.1", 0, 16, &p1);
        CHECK(l1 >= 0, "tcp listener");
        CHECK(bind_expect(&sock_ops_smc, "127.0.0.1", p1, EADDRINUSE) == 0, "smc bind on a TCP listener's port");
        CHECK(bind_expect(&sock_ops_smc, "0.0.0.0", p1, EADDRINUSE) == 0, "smc bind 0.0.0.0 on a TCP listener's port");
        close(l1);

        /* a port held by an SMC listener: plain bind and smc_bind get EADDRINUSE */
        l2 = listen_on(&sock_ops_smc, "127.0.0.1", 0, 16, &p2);
        CHECK(l2 >= 0, "smc listener");
        CHECK(bind_expect(&sock_ops_tcp, "127.0.0.1", p2, EADDRINUSE) == 0, "tcp bind on an SMC listener's port");
        CHECK(bind_expect(&sock_ops_smc, "127.0.0.1", p2, EADDRINUSE) == 0, "smc bind on an SMC listener's port");
        l3 = listen_on(&sock_ops_smc, "0.0.0.0", 0, 16, &p3);
        CHECK(l3 >= 0, "smc wildcard listener");
        CHECK(bind_expect(&sock_ops_tcp, "127.0.0.1", p3, EADDRINUSE) == 0,
              "tcp bind on an SMC wildcard listener's port");

        /* closing the SMC listener frees the port */
        CHECK(smc_close(l2) == 0 && smc_close(l3) == 0, "close listeners: %m");
        CHECK(bind_expect(&sock_ops_tcp, "127.0.0.1", p2, 0) == 0, "port of a closed SMC listener");
        CHECK(bind_expect(&sock_ops_tcp, "127.0.0.1", p3, 0) == 0, "port of a closed SMC listener");
        fprintf(stderr, "# EADDRINUSE both ways between TCP and SMC listeners; ports freed on close\n");
        return 0;
}

/* shutdown(SHUT_RDWR) of a listener stops it, as TCP's (inet_shutdown()): a thread
 * blocked in accept wakes with EINVAL, a later connect is refused, and a connection
 * queued before is reset; paused by connect(AF_UNSPEC) or shutdown(SHUT_RD), it
 * listens again after listen(). Over TCP and over smc_*, the same assertions. */
struct lshut_arg {
        const struct sock_ops *o;
        int l, r, err;
};

static void *lshut_accept(void *p) {
        struct lshut_arg *a = p;

        a->r = a->o->accept(a->l, NULL, NULL);
        a->err = errno;
        return NULL;
}

static int lshut_body(void *arg) {
        const struct sock_ops *o = arg;
        struct lshut_arg a = { .o = o, .r = -2 };
        struct sockaddr_storage ss;
        struct pollfd p;
        socklen_t len;
        uint16_t port;
        pthread_t t;
        char b;
        int c, q, l2;

        /* a thread blocked in accept */
        a.l = listen_on(o, "127.0.0.1", 0, 16, &port);
        CHECK(a.l >= 0, "%s listener", o->name);
        len = make_addr("127.0.0.1", port, &ss);
        CHECK(pthread_create(&t, NULL, lshut_accept, &a) == 0, "pthread_create");
        sleep_ms(100);
        CHECK(o->shutdown(a.l, SHUT_RDWR) == 0, "%s shutdown of the listener: %m", o->name);
        pthread_join(t, NULL);
        CHECK(a.r < 0 && a.err == EINVAL, "%s accept blocked across the listener's shutdown: %d %s, want EINVAL",
              o->name, a.r, strerror(a.err));
        c = o->socket(AF_INET, SOCK_STREAM, 0);
        CHECK(c >= 0 && o->connect(c, (struct sockaddr *) &ss, len) < 0 && errno == ECONNREFUSED,
              "%s connect after the listener's shutdown: %m, want ECONNREFUSED", o->name);
        o->close(c);
        CHECK(o->accept(a.l, NULL, NULL) < 0 && errno == EINVAL, "%s accept after shutdown: %m, want EINVAL", o->name);
        o->close(a.l);

        /* a connection queued, never accepted: reset by the shutdown */
        l2 = listen_on(o, "127.0.0.1", 0, 16, &port);
        CHECK(l2 >= 0, "%s listener", o->name);
        len = make_addr("127.0.0.1", port, &ss);
        q = o->socket(AF_INET, SOCK_STREAM, 0);
        CHECK(q >= 0 && o->connect(q, (struct sockaddr *) &ss, len) == 0, "%s queued connect: %m", o->name);
        CHECK(o->shutdown(l2, SHUT_RD) == 0, "%s shutdown(SHUT_RD) of the listener: %m", o->name);
        p = (struct pollfd) { .fd = q, .events = POLLIN };
        CHECK(o->poll(&p, 1, 5000) == 1, "%s the queued connection was not woken", o->name);
        CHECK(o->recv(q, &b, 1, 0) < 0 && errno == ECONNRESET, "%s recv on the queued connection: %m, want ECONNRESET",
              o->name);
        o->close(q);
        o->close(l2);

        /* paused and resumed on its port: connect(AF_UNSPEC) (HAProxy's pause of a
         * listener) or shutdown(SHUT_RD), then listen() again: connects are refused
         * while paused, then accepted (SMC-D again for smc_*) */
        for (int how = 0; how < 2; how++) {
                struct sockaddr unspec = { .sa_family = AF_UNSPEC };
                const char *what = how == 0 ? "connect(AF_UNSPEC)" : "shutdown(SHUT_RD)";
                int l3, fd;

                l3 = listen_on(o, "127.0.0.1", 0, 16, &port); /* a free port */
                CHECK(l3 >= 0, "%s listener", o->name);
                o->close(l3);
                l3 = listen_on(o, "127.0.0.1", port, 16, &port);
                CHECK(l3 >= 0, "%s listener on port %u", o->name, port);
                len = make_addr("127.0.0.1", port, &ss);
                CHECK((how == 0 ? o->connect(l3, &unspec, sizeof(unspec)) : o->shutdown(l3, SHUT_RD)) == 0,
                      "%s %s of the listener: %m", o->name, what);
                c = o->socket(AF_INET, SOCK_STREAM, 0);
                CHECK(c >= 0 && o->connect(c, (struct sockaddr *) &ss, len) < 0 && errno == ECONNREFUSED,
                      "%s connect to a listener paused by %s: %m, want ECONNREFUSED", o->name, what);
                o->close(c);
                CHECK(o->listen(l3, 16) == 0, "%s listen again after %s: %m", o->name, what);
                c = o->socket(AF_INET, SOCK_STREAM, 0);
                CHECK(c >= 0 && o->connect(c, (struct sockaddr *) &ss, len) == 0,
                      "%s connect after listen again (%s): %m", o->name, what);
                fd = o->accept(l3, NULL, NULL);
                CHECK(fd >= 0, "%s accept after listen again (%s): %m", o->name, what);
                CHECK(o->send(c, "r", 1, 0) == 1 && o->recv(fd, &b, 1, 0) == 1 && b == 'r', "%s data after %s: %m",
                      o->name, what);
                if (o->smc)
                        CHECK(expect_mode(fd, "resumed listener", SMC_PROTO_MODE_SMCD, REASON_ANY) == 0,
                              "resumed after %s: not SMC-D", what);
                o->close(fd);
                o->close(c);
                o->close(l3);
        }
        return 0;
}

/* A listener nobody accepts from (an old nginx master after a binary upgrade whose
 * new binary runs without the library): once its oldest queued connection waited 3 s,
 * a new connection goes over TCP (SMC_CLC_DECL_PEERDECL; TCP's own queue serves it),
 * also when the queue was empty when the listener stopped accepting; once one is
 * accepted, SMC-D again. */
static int stall_body(void *arg) {
        struct sockaddr_storage ss;
        socklen_t len;
        uint16_t port;
        int l, c1, c2, c3, a1, a2, a3;
        char b;

        (void) arg;
        l = listen_on(&sock_ops_smc, "127.0.0.1", 0, 16, &port);
        CHECK(l >= 0, "listener");
        len = make_addr("127.0.0.1", port, &ss);
        sleep_ms(3300); /* the listener idle (no accept) for longer than the 3 s */
        c1 = smc_socket(AF_INET, SOCK_STREAM, 0);
        CHECK(c1 >= 0 && smc_connect(c1, (struct sockaddr *) &ss, len) == 0, "connect 1: %m");
        CHECK(expect_mode(c1, "connect 1 (empty queue)", SMC_PROTO_MODE_SMCD, REASON_ANY) == 0, "mode 1");
        sleep_ms(3300);
        c2 = smc_socket(AF_INET, SOCK_STREAM, 0);
        CHECK(c2 >= 0 && smc_connect(c2, (struct sockaddr *) &ss, len) == 0, "connect 2: %m");
        CHECK(expect_mode(c2, "connect 2 (connect 1 queued 3.3 s)", SMC_PROTO_MODE_TCP, SMC_CLC_DECL_PEERDECL) == 0,
              "mode 2");
        a1 = smc_accept(l, NULL, NULL);
        a2 = smc_accept(l, NULL, NULL);
        CHECK(a1 >= 0 && a2 >= 0, "accept the two: %m");
        CHECK(smc_send(c1, "1", 1, 0) == 1 && smc_send(c2, "2", 1, 0) == 1, "send: %m");
        CHECK(smc_recv(a1, &b, 1, 0) == 1 && (b == '1' || b == '2'), "recv a1: %m");
        CHECK(smc_recv(a2, &b, 1, 0) == 1 && (b == '1' || b == '2'), "recv a2: %m");
        c3 = smc_socket(AF_INET, SOCK_STREAM, 0);
        CHECK(c3 >= 0 && smc_connect(c3, (struct sockaddr *) &ss, len) == 0, "connect 3: %m");
        CHECK(expect_mode(c3, "connect 3 (accepting again)", SMC_PROTO_MODE_SMCD, REASON_ANY) == 0, "mode 3");
        a3 = smc_accept(l, NULL, NULL);
        CHECK(a3 >= 0, "accept 3: %m");
        smc_close(a1), smc_close(a2), smc_close(a3), smc_close(c1), smc_close(c2), smc_close(c3), smc_close(l);
        return 0;
}

static int mixed_server(struct pair *p, int lfd) {
        struct sockaddr_storage peer, got;
        socklen_t l = sizeof(peer);
        char b1[96], b2[96];
        uint64_t v;
        int fd;

        /* 1: a plain TCP client */
        do
                fd = smc_accept(lfd, (struct sockaddr *) &peer, &l);
        while (fd < 0 && errno == EINTR);
        CHECK(fd >= 0, "accept of a plain TCP client: %m");
        if (expect_mode(fd, "server side of a plain TCP client", SMC_PROTO_MODE_TCP, REASON_ANY) < 0 ||
            xfer_bidir(&sock_ops_smc, fd, 256 * KiB, 81, 80, "server (TCP client)", NULL) < 0) {
                smc_close(fd);
                return -1;
        }
        smc_close(fd);
        CHECK(chan_get(p->c2s[0], &v, 10000) == 0, "side channel");
        memset(&got, 0, sizeof(got));
        {
                struct sockaddr_in *s4 = (struct sockaddr_in *) &got;

                s4->sin_family = AF_INET;
                s4->sin_port = htons((uint16_t) v);
                s4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        }
        CHECK(addr_equal(&peer, &got), "accept's peer address %s, the client is %s", addr_str(&peer, b1, sizeof(b1)),
              addr_str(&got, b2, sizeof(b2)));

        /* 2: an SMC client on the same listener */
        CHECK(pair_accept(p, lfd, &fd) == 0, "accept");
        if (expect_mode(fd, "server side of an SMC client", SMC_PROTO_MODE_SMCD, REASON_ANY) < 0 ||
            xfer_bidir(&sock_ops_smc, fd, 256 * KiB, 83, 82, "server (SMC client)", NULL) < 0) {
                smc_close(fd);
                return -1;
        }
        smc_close(fd);
        return 0;
}

static int mixed_client(struct pair *p, int unused) {
        struct sockaddr_storage self;
        socklen_t l = sizeof(self);
        int fd;

        CHECK(pair_connect(p, &sock_ops_tcp, &fd) == 0, "plain connect");
        CHECK(getsockname(fd, (struct sockaddr *) &self, &l) == 0, "getsockname: %m");
        if (xfer_bidir(&sock_ops_tcp, fd, 256 * KiB, 80, 81, "plain TCP client", NULL) < 0) {
                close(fd);
                return -1;
        }
        close(fd);
        CHECK(chan_put(p->c2s[1], addr_port(&self)) == 0, "side channel");

        CHECK(pair_connect(p, &sock_ops_smc, &fd) == 0, "smc connect");
        if (expect_mode(fd, "SMC client", SMC_PROTO_MODE_SMCD, REASON_ANY) < 0 ||
            xfer_bidir(&sock_ops_smc, fd, 256 * KiB, 82, 83, "SMC client", NULL) < 0) {
                smc_close(fd);
                return -1;
        }
        CHECK(smc_close(fd) == 0, "close: %m");
        return 0;
}

static int case_listen(struct ctx *c) {
        struct xfer_arg a = { .size = 256 * KiB };
        struct pair mixed = { .manual = true, .timeout_s = 30 };
        /* an SMC client to a plain TCP listener: TCP, PEERNOSMC */
        struct pair plain = {
                .sops = &sock_ops_tcp, .cops = &sock_ops_smc, .cmode = SMC_PROTO_MODE_TCP,
                .creason = SMC_CLC_DECL_PEERNOSMC, .arg = &a, .timeout_s = 30,
        };

        CHECK(run_child(addrinuse_body, NULL, 30) == 0, "EADDRINUSE");
        CHECK(run_child(lshut_body, (void *) &sock_ops_tcp, 30) == 0, "listener shutdown over TCP");
        CHECK(run_child(lshut_body, (void *) &sock_ops_smc, 30) == 0, "listener shutdown over SMC");
        CHECK(run_child(stall_body, NULL, 30) == 0, "a listener that stopped accepting");
        fprintf(stderr, "# shutdown of a listener: blocked accept EINVAL, connect refused (TCP and SMC)\n");
        CHECK(pair_run(&mixed, mixed_server, mixed_client) == 0, "plain TCP and SMC clients on one SMC listener");
        fprintf(stderr, "# one SMC listener accepted a plain TCP client (mode TCP) and an SMC client (SMCD)\n");
        CHECK(pair_run(&plain, xfer_server, xfer_client) == 0, "SMC client to a plain TCP listener");
        fprintf(stderr, "# SMC client to a plain TCP listener: TCP, PEERNOSMC, data ok\n");
        return 0;
}

/* ================= a listener whose process daemonizes ================= */

/* A server that listens and then daemonizes (nginx's default `daemon on`, daemon(3)):
 * the process that called listen() forks and exits, its child accepts. As with TCP the
 * listener lives on in the child and must stay SMC (smcd keeps it while its accept
 * channel is open elsewhere), and go away when the child closes it. */
#define DAEMON_CONNS 3

static int daemon_serve(int l) {
        static char buf[64 * KiB];

        for (int i = 0; i < DAEMON_CONNS; i++) {
                char who[40];
                int fd;

                snprintf(who, sizeof(who), "daemon: accepted conn %d", i + 1);
                do
                        fd = smc_accept(l, NULL, NULL);
                while (fd < 0 && errno == EINTR);
                if (fd < 0)
                        return FAIL("daemon: accept: %m");
                if (expect_mode(fd, who, SMC_PROTO_MODE_SMCD, REASON_ANY) < 0 ||
                    recv_all(&sock_ops_smc, fd, buf, sizeof(buf)) != (ssize_t) sizeof(buf) ||
                    send_all(&sock_ops_smc, fd, buf, sizeof(buf)) != (ssize_t) sizeof(buf)) {
                        smc_close(fd);
                        return FAIL("%s: echo failed", who);
                }
                smc_close(fd);
        }
        smc_close(l);
        return 0;
}

/* A connection still in the accept queue when the server closes its listener is
 * reset (TCP: RST; the client's blocked receive fails with ECONNRESET at once), also
 * for SMC-D, where the client blocks in poll on its doorbell socket: the library's
 * drain of the queue must wake it (it did not: a copy of Y in smcd kept it asleep). */
static int queued_reset_errno(const struct sock_ops *o) {
        int portp[2], fd = -1, r = -1;
        uint64_t port = 0;
        struct pollfd p;
        pid_t pid;

        CHECK(pipe2(portp, O_CLOEXEC) == 0, "pipe2: %m");
        fflush(NULL);
        pid = fork();
        if (pid == 0) {
                uint16_t pt;
                int l = listen_on(o, "127.0.0.1", 0, 8, &pt);

                (void) chan_put(portp[1], l < 0 ? 0 : pt);
                sleep_ms(300); /* the client connects and waits meanwhile */
                o->close(l);
                sleep_ms(3000);
                _exit(0);
        }
        close(portp[1]);
        if (chan_get(portp[0], &port, 10000) == 0 && port != 0) {
                struct sockaddr_storage ss;
                socklen_t len = make_addr("127.0.0.1", (uint16_t) port, &ss);
                char b[8];

                fd = o->socket(AF_INET, SOCK_STREAM, 0);
                if (fd >= 0 && o->connect(fd, (struct sockaddr *) &ss, len) == 0 &&
                    send_all(o, fd, "req", 3) == 3) {
                        p = (struct pollfd) { .fd = fd, .events = POLLIN };
                        if (o->poll(&p, 1, 2500) == 1) {
                                ssize_t n = o->recv(fd, b, sizeof(b), MSG_DONTWAIT);

                                r = n < 0 ? errno : 0;
                        } else
                                r = ETIMEDOUT; /* nothing woke it */
                }
        }
        if (fd >= 0)
                o->close(fd);
        close(portp[0]);
        if (pid > 0) {
                kill(pid, SIGKILL);
                waitpid(pid, NULL, 0);
        }
        return r;
}

static int case_queued_reset(struct ctx *c) {
        int t = queued_reset_errno(&sock_ops_tcp), s = queued_reset_errno(&sock_ops_smc);

        (void) c;
        CHECK(t == ECONNRESET && s == t, "a queued connection whose listener closed: the client's receive: TCP %s, SMC %s",
              strerror(t), strerror(s));
        fprintf(stderr, "# queued connection, listener closed: TCP and SMC-D both %s\n", strerror(s));
        return 0;
}

static int case_daemon_listener(struct ctx *c) {
        static char buf[64 * KiB], back[64 * KiB];
        int portp[2], res[2], st = 0;
        uint64_t port = 0, ok = 0;
        pid_t p1;

        CHECK(pipe2(portp, O_CLOEXEC) == 0 && pipe2(res, O_CLOEXEC) == 0, "pipe2: %m");
        fflush(NULL);
        p1 = fork();
        if (p1 < 0)
                return FAIL("fork: %m");
        if (p1 == 0) {
                uint16_t pt;
                int l = listen_on(&sock_ops_smc, "127.0.0.1", 0, 16, &pt);
                pid_t d;

                if (l < 0)
                        _exit(1);
                d = fork();
                if (d == 0) {
                        alarm(60);
                        (void) chan_put(res[1], daemon_serve(l) == 0 && !failed() ? 1 : 2);
                        _exit(0);
                }
                /* the parent of daemon(3): tells the port and leaves, listener open */
                (void) chan_put(portp[1], d > 0 ? pt : 0);
                _exit(d > 0 ? 0 : 1);
        }
        close(portp[1]);
        close(res[1]);
        CHECK(chan_get(portp[0], &port, 20000) == 0 && port != 0, "no port from the listening process");
        CHECK(waitpid(p1, &st, 0) == p1 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "the listening process failed");
        /* smcd has seen the listening process go (no client left; the daemon has not
         * talked to smcd yet) and kept its listener */
        if (wait_stats(c, (const struct stat_cond[]) { { "smcd.clients", '=', 0 }, { "smcd.listeners", '=', 1 } }, 2,
                       5000, "listener after its process exited") < 0)
                return -1;
        for (int i = 0; i < DAEMON_CONNS; i++) {
                struct sockaddr_storage ss;
                socklen_t len = make_addr("127.0.0.1", (uint16_t) port, &ss);
                char who[40];
                int fd = smc_socket(AF_INET, SOCK_STREAM, 0);

                snprintf(who, sizeof(who), "client conn %d", i + 1);
                CHECK(fd >= 0 && smc_connect(fd, (struct sockaddr *) &ss, len) == 0, "%s: connect: %m", who);
                pattern_fill(700 + (uint64_t) i, 0, buf, sizeof(buf));
                if (expect_mode(fd, who, SMC_PROTO_MODE_SMCD, REASON_ANY) < 0 ||
                    send_all(&sock_ops_smc, fd, buf, sizeof(buf)) != (ssize_t) sizeof(buf) ||
                    recv_all(&sock_ops_smc, fd, back, sizeof(back)) != (ssize_t) sizeof(back) ||
                    pattern_check(700 + (uint64_t) i, 0, back, sizeof(back)) >= 0) {
                        smc_close(fd);
                        return FAIL("%s: echo through the daemon failed", who);
                }
                smc_close(fd);
        }
        CHECK(chan_get(res[0], &ok, 30000) == 0 && ok == 1, "the daemon failed (%" PRIu64 ")", ok);
        fprintf(stderr, "# listen, fork, exit: the child accepted %d SMC-D connections\n", DAEMON_CONNS);
        /* the daemon closed it: the listener is gone (checked after every case too) */
        return wait_stats(c, (const struct stat_cond[]) { { "smcd.listeners", '=', 0 } }, 1, 5000,
                          "listener after the daemon closed it");
}

/* ================= cases 9-11: per-uid limits ================= */

/* Four connections from one client to one server: 1 and 2 SMC-D, 3 hits the limit
 * (TCP with the given reason), then 1 is closed and 4 is SMC-D again. */
struct limit_arg {
        uint32_t reason;  /* SMC_CLC_DECL_MAXCONNERR or SMC_CLC_DECL_MAX_DMB */
        uid_t client_uid; /* 0: the client keeps our uid */
};

static int limit_server(struct pair *p, int lfd) {
        static const int modes[] = { SMC_PROTO_MODE_SMCD, SMC_PROTO_MODE_SMCD, SMC_PROTO_MODE_TCP, SMC_PROTO_MODE_SMCD };
        int fds[4] = { -1, -1, -1, -1 }, r = -1;
        char buf[100];

        for (int i = 0; i < 4; i++) {
                char who[48];

                snprintf(who, sizeof(who), "server conn %d", i + 1);
                if (pair_accept(p, lfd, &fds[i]) < 0 || expect_mode(fds[i], who, modes[i], REASON_ANY) < 0)
                        goto out;
                if (recv_all(&sock_ops_smc, fds[i], buf, sizeof(buf)) != (ssize_t) sizeof(buf) ||
                    pattern_check(90 + (uint64_t) i, 0, buf, sizeof(buf)) >= 0 ||
                    send_all(&sock_ops_smc, fds[i], buf, sizeof(buf)) != (ssize_t) sizeof(buf)) {
                        FAIL("%s: echo failed", who);
                        goto out;
                }
                if (i == 2) {
                        /* the client closes conn 1 now: wait for its EOF and close ours */
                        if (smc_recv(fds[0], buf, sizeof(buf), 0) != 0) {
                                FAIL("server conn 1: expected EOF: %m");
                                goto out;
                        }
                        smc_close(fds[0]);
                        fds[0] = -1;
                        chan_put(p->note[1], 1);
                }
        }
        r = 0;
out:
        for (int i = 0; i < 4; i++)
                if (fds[i] >= 0)
                        smc_close(fds[i]);
        return r;
}

static int limit_client(struct pair *p, int unused) {
        const struct limit_arg *a = p->arg;
        int fds[4] = { -1, -1, -1, -1 }, r = -1;
        char buf[100];
        uint64_t v;

        if (a->client_uid != 0) {
                CHECK(setgroups(0, NULL) == 0 && setresgid(a->client_uid, a->client_uid, a->client_uid) == 0 &&
                      setresuid(a->client_uid, a->client_uid, a->client_uid) == 0,
                      "cannot become uid %u: %m", (unsigned) a->client_uid);
        }
        for (int i = 0; i < 4; i++) {
                char who[48];
                int mode = i == 2 ? SMC_PROTO_MODE_TCP : SMC_PROTO_MODE_SMCD;

                snprintf(who, sizeof(who), "client conn %d", i + 1);
                if (i == 3) {
                        /* conn 1 is closed at both ends and smcd has seen it */
                        if (chan_get(p->go_c[0], &v, 20000) < 0) {
                                FAIL("client: no go");
                                goto out;
                        }
                }
                if (pair_connect(p, &sock_ops_smc, &fds[i]) < 0 || expect_mode(fds[i], who, mode, a->reason) < 0)
                        goto out;
                pattern_fill(90 + (uint64_t) i, 0, buf, sizeof(buf));
                if (send_all(&sock_ops_smc, fds[i], buf, sizeof(buf)) != (ssize_t) sizeof(buf) ||
                    recv_all(&sock_ops_smc, fds[i], buf, sizeof(buf)) != (ssize_t) sizeof(buf) ||
                    pattern_check(90 + (uint64_t) i, 0, buf, sizeof(buf)) >= 0) {
                        FAIL("%s: echo failed", who);
                        goto out;
                }
                if (i == 2) {
                        smc_close(fds[0]);
                        fds[0] = -1;
                }
        }
        r = 0;
out:
        for (int i = 0; i < 4; i++)
                if (fds[i] >= 0)
                        smc_close(fds[i]);
        return r;
}

static int limit_run(struct ctx *c, struct limit_arg *a) {
        struct pair p = { .manual = true, .timeout_s = 30, .arg = a };
        char key[96];
        uint64_t v;
        int r;

        snprintf(key, sizeof(key), "smcd.fallback.%s", smc_clc_decl_name(a->reason));
        if (pair_start(&p, limit_server, limit_client) < 0)
                return -1;
        r = chan_get(p.note[0], &v, 20000);
        if (r < 0)
                FAIL("the first three connections did not complete");
        else
                r = wait_stats(c, (const struct stat_cond[]) {
                                       { "smcd.conns_current", '=', 1 },
                                       { key, '=', 1 },
                               }, 2, 5000, "after closing conn 1");
        chan_put(p.go_c[1], 1);
        if (pair_wait(&p) < 0 || r < 0)
                return -1;
        fprintf(stderr, "# conns 1, 2: SMCD; conn 3: TCP (%s); conn 4 after closing conn 1: SMCD\n",
                smc_clc_decl_name(a->reason));
        return 0;
}

/* --max-conns-per-uid 2, client and server under different uids (one endpoint
 * each per connection): the third concurrent connection falls back. */
#define OTHER_UID 65534
static int case_limit_conns(struct ctx *c) {
        struct limit_arg a = { .reason = SMC_CLC_DECL_MAXCONNERR, .client_uid = OTHER_UID };

        if (geteuid() != 0) {
                snprintf(shm->reason, sizeof(shm->reason), "needs root to run the client as another uid");
                return 1;
        }
        /* the other uid must reach smcd.sock (itself mode 0666) */
        CHECK(chmod(c->smcd->dir, 0711) == 0, "chmod %s: %m", c->smcd->dir);
        return limit_run(c, &a);
}

/* --max-conns-per-uid 4 with client and server under one uid: smcd counts
 * endpoints, so a connection costs that uid 2 and the third falls back. */
static int case_limit_conns_same_uid(struct ctx *c) {
        struct limit_arg a = { .reason = SMC_CLC_DECL_MAXCONNERR };

        return limit_run(c, &a);
}

/* --max-buf-per-uid 512K, one uid, default 128 KiB DMBs (256 KiB per connection):
 * the third connection falls back with MAX_DMB. */
static int case_limit_buf(struct ctx *c) {
        struct limit_arg a = { .reason = SMC_CLC_DECL_MAX_DMB };

        return limit_run(c, &a);
}

/* ================= the runner ================= */

struct tcase {
        const char *name;
        int (*fn)(struct ctx *c);
        const char *smcd_args[8];
        bool no_smcd;     /* run without smcd */
        bool smcd_killed; /* the case SIGKILLs smcd */
        int timeout_s;
};

static const struct tcase cases[] = {
        { "echo", case_echo, { NULL }, false, false, 60 },
        { "bulk-1B-64MiB-both-ways", case_bulk, { NULL }, false, false, 150 },
        { "1000-concurrent-connections", case_many, { NULL }, false, false, 120 },
        { "socket-semantics-tcp-vs-smc", case_semantics, { NULL }, false, false, 120 },
        { "no-smcd-tcp-fallback", case_no_smcd, { NULL }, true, false, 60 },
        { "client-sigkill-mid-transfer", case_kill_client, { NULL }, false, false, 60 },
        { "smcd-sigkill", case_kill_smcd, { NULL }, false, true, 90 },
        { "listen-semantics", case_listen, { NULL }, false, false, 60 },
        { "daemonizing-listener", case_daemon_listener, { NULL }, false, false, 60 },
        { "listener-close-resets-queued", case_queued_reset, { NULL }, false, false, 60 },
        { "per-uid-connection-limit", case_limit_conns, { "--max-conns-per-uid", "2", NULL }, false, false, 60 },
        { "per-uid-connection-limit-same-uid", case_limit_conns_same_uid, { "--max-conns-per-uid", "4", NULL }, false, false, 60 },
        { "per-uid-buffer-limit", case_limit_buf, { "--max-buf-per-uid", "512K", NULL }, false, false, 60 },
};

static void reap_group(pid_t pgid) {
        int st;

        kill(-pgid, SIGKILL);
        while (waitpid(-pgid, &st, 0) > 0 || errno == EINTR)
                ;
}

/* Runs one case; returns 0 if it passed, 1 if it was skipped, -1 if it failed (the
 * reason is in shm->reason for both). */
static int run_case(const struct tcase *tc, const char *smcd_path) {
        struct smcd_instance smcd;
        struct ctx c = { .smcd = &smcd, .smcd_path = smcd_path };
        uint64_t deadline;
        bool smcd_failed = false, skipped = false;
        char buf[128];
        pid_t pid;
        int r, st = 0;

        atomic_store(&shm->failed, 0);
        shm->reason[0] = 0;
        r = smcd_instance_init(&smcd);
        if (r < 0) {
                errno = -r;
                return FAIL("mkdtemp: %m");
        }
        if (!tc->no_smcd) {
                r = smcd_start(&smcd, smcd_path, tc->smcd_args, 10000);
                if (r < 0) {
                        if (r == -ECHILD)
                                FAIL("smcd %s before its socket answered", describe_status(smcd.status, buf, sizeof(buf)));
                        else {
                                errno = -r;
                                FAIL("smcd did not start: %m");
                        }
                        smcd_log_dump(&smcd, stderr, 30);
                        smcd_instance_cleanup(&smcd);
                        return -1;
                }
        }

        fflush(NULL);
        pid = fork();
        if (pid < 0)
                return FAIL("fork: %m");
        if (pid == 0) {
                setpgid(0, 0);
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                setenv(RUNDIR_ENV, smcd.dir, 1);
                signal(SIGPIPE, SIG_IGN);
                r = tc->fn(&c);
                if (r == 1 && !failed())
                        exit(77); /* skipped, reason in shm->reason */
                exit(r == 0 && !failed() ? 0 : 1);
        }
        setpgid(pid, pid);
        deadline = now_ns() + (uint64_t) tc->timeout_s * 1000000000ull;
        for (;;) {
                pid_t w = waitpid(pid, &st, WNOHANG);

                if (w == pid)
                        break;
                if (now_ns() > deadline) {
                        kill(-pid, SIGKILL);
                        waitpid(pid, &st, 0);
                        FAIL("case timed out after %d s", tc->timeout_s);
                        break;
                }
                sleep_ms(5);
        }
        reap_group(pid);
        if (WIFEXITED(st) && WEXITSTATUS(st) == 77 && !failed())
                skipped = true;
        else if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0))
                FAIL("case process %s", describe_status(st, buf, sizeof(buf)));

        /* smcd must be back to nothing: no client, listener, connection or buffer */
        if (!failed() && !tc->no_smcd && !tc->smcd_killed)
                wait_stats(&c, (const struct stat_cond[]) {
                                   { "smcd.clients", '=', 0 },
                                   { "smcd.listeners", '=', 0 },
                                   { "smcd.conns_current", '=', 0 },
                                   { "pool.in_use", '=', 0 },
                                   { "pool.pending_clear", '=', 0 },
                           }, 5, 5000, "smcd after the case");

        if (!tc->no_smcd) {
                if (tc->smcd_killed) {
                        smcd_reap(&smcd, true);
                        if (!(WIFSIGNALED(smcd.status) && WTERMSIG(smcd.status) == SIGKILL)) {
                                FAIL("smcd: expected death by SIGKILL, %s", describe_status(smcd.status, buf, sizeof(buf)));
                                smcd_failed = true;
                        }
                } else if (smcd_reap(&smcd, false)) {
                        FAIL("smcd died during the case: %s", describe_status(smcd.status, buf, sizeof(buf)));
                        smcd_failed = true;
                } else {
                        r = smcd_stop(&smcd, 5000, &st);
                        if (r < 0 || !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
                                FAIL("smcd on SIGTERM: %s%s", r < 0 ? "did not exit within 5 s, " : "",
                                     describe_status(st, buf, sizeof(buf)));
                                smcd_failed = true;
                        }
                }
        }
        if (!tc->no_smcd)
                smcd_stop(&smcd, 0, NULL); /* reaped already: clears smcd's process group */
        if (failed() && !tc->no_smcd)
                smcd_log_dump(&smcd, stderr, smcd_failed ? 60 : 20);
        smcd_instance_cleanup(&smcd);
        if (failed())
                return -1;
        return skipped ? 1 : 0;
}

static void raise_nofile(void) {
        struct rlimit rl;

        if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
                return;
        if (rl.rlim_max < 65536) {
                struct rlimit want = { 65536, 65536 };

                if (setrlimit(RLIMIT_NOFILE, &want) == 0)
                        return;
        }
        rl.rlim_cur = rl.rlim_max < 65536 ? rl.rlim_max : 65536;
        setrlimit(RLIMIT_NOFILE, &rl);
}

int main(int argc, char *argv[]) {
        size_t n = sizeof(cases) / sizeof(cases[0]);
        bool run[sizeof(cases) / sizeof(cases[0])];
        int planned = 0, nfail = 0, num = 0;

        if (argc < 2) {
                fprintf(stderr, "usage: %s SMCD_BINARY [CASE...]\ncases:", argv[0]);
                for (size_t i = 0; i < n; i++)
                        fprintf(stderr, " %s", cases[i].name);
                fprintf(stderr, "\n");
                return 2;
        }
        if (access(argv[1], X_OK) < 0) {
                fprintf(stderr, "%s: %s: %m\n", argv[0], argv[1]);
                return 2;
        }
        for (size_t i = 0; i < n; i++) {
                run[i] = argc == 2;
                for (int a = 2; a < argc; a++)
                        if (strcmp(argv[a], cases[i].name) == 0 ||
                            (argv[a][0] >= '1' && argv[a][0] <= '9' && (size_t) atoi(argv[a]) == i + 1))
                                run[i] = true;
                planned += run[i];
        }
        if (planned == 0) {
                fprintf(stderr, "no such case\n");
                return 2;
        }

        shm = mmap(NULL, sizeof(*shm), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (shm == MAP_FAILED) {
                fprintf(stderr, "mmap: %m\n");
                return 2;
        }
        /* a sanitizer finding in smcd or in a client process fails its case (the
         * processes we start read these; an explicit setting wins) */
        setenv("UBSAN_OPTIONS", "halt_on_error=1:print_stacktrace=1", 0);
        raise_nofile();
        /* orphaned grandchildren come back to us and are reaped per case */
        prctl(PR_SET_CHILD_SUBREAPER, 1);
        signal(SIGPIPE, SIG_IGN);
        unsetenv(RUNDIR_ENV);

        setvbuf(stdout, NULL, _IOLBF, 0);
        printf("1..%d\n", planned);
        for (size_t i = 0; i < n; i++) {
                uint64_t t0;
                int r;

                if (!run[i])
                        continue;
                num++;
                t0 = now_ns();
                r = run_case(&cases[i], argv[1]);
                if (r == 0)
                        printf("ok %d - %s (%.1f s)\n", num, cases[i].name, (now_ns() - t0) / 1e9);
                else if (r == 1)
                        printf("ok %d - %s # SKIP %s\n", num, cases[i].name, shm->reason);
                else {
                        printf("not ok %d - %s: %s\n", num, cases[i].name, shm->reason);
                        nfail++;
                }
                fflush(stdout);
        }
        fprintf(stderr, "# %d of %d cases failed\n", nfail, planned);
        return nfail ? 1 : 0;
}
