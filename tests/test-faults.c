/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Fault injection and soak with real processes against a private smcd (issue 7, items
 * 2 and 5). Clients use the public API (smcproto.h); two cases also speak the raw
 * control protocol (ctl-proto.h, hand-packed) to play a misbehaving client.
 *
 *   test-faults SMCD_BINARY [CASE...]        (no CASE: every case but "soak")
 *
 * Each case starts its own smcd (--no-bus, a mkdtemp runtime directory), takes a
 * baseline of smcd's counters (stats.json) and of its descriptors (/proc/PID/fd), runs
 * the fault and then requires: every byte any process received checked, no process
 * hung (each has a deadline), smcd's connections and buffers back to 0 and its
 * descriptor count back to (not above) the baseline (descriptors minus pool buffers, as a free
 * pool buffer keeps its memfd; the NETLINK_SOCK_DIAG socket smcd opens at the first
 * FALLBACK notice and keeps is not counted), smcd still serving (a "bystander"
 * connection running through the fault never stalls nor sees a wrong byte), and a
 * clean SIGTERM exit (in an ASan build: no LeakSanitizer report at smcd's exit).
 *
 * Cases:
 *   client-kill         SIGKILL of the sender (the receiver reads every byte, then EOF)
 *                       and of the receiver (the sender gets ECONNRESET/EPIPE), each
 *                       within 2 s of the kill
 *   reader-stop-kill    the reader SIGSTOPped while the writer fills the ring: the
 *                       writer blocks (no error while the reader is only stopped);
 *                       then SIGKILL: the blocked writer gets ECONNRESET/EPIPE in <= 2 s
 *   smcd-kill           SIGKILL of smcd while 64 MiB flow each way: both transfers
 *                       complete, every byte and the checksums right (smcd is not on
 *                       the data path)
 *   ctl-shutdown-1000   a client holding 1000 connections shuts its control socket
 *                       down: the 1000 keep working (echo checked), then closing them
 *                       frees all in smcd; and a holder of 1000 SIGKILLed
 *   no-read-flood       a raw client floods requests and never reads a reply: smcd
 *                       drops it, others' connects stay fast (max latency measured)
 *   no-read-connects    a raw client sends 50 CONNECTs and never reads the replies
 *                       (their fds stay in flight), then dies: smcd frees all 50
 *   buf-pressure-churn  --max-buf-per-uid 384K while 8 processes churn connections
 *                       with 1 B .. 1 MiB messages: SMC-D or a clean MAX_DMB fallback,
 *                       every byte checked, nothing left over
 *   soak                (only when named) SMCD_SOAK_CLIENTS (64) client processes
 *                       churning short (1-4 requests) and long (0.5-2 s) connections
 *                       to 4 server processes, requests and responses of 1 B .. 1 MiB
 *                       each checked, for SMCD_SOAK_SECONDS (60; 30 under ASan): at a
 *                       quiet point after the warm-up and one at the end (every client
 *                       paused between connections) smcd's descriptors beyond its pool
 *                       must not grow, its RssAnon within 1 MiB + 10% (not checked
 *                       under ASan, whose quarantine grows), its pool within 4 buffers
 *                       per client, no abort, handshake error nor fallback
 *
 * TAP output; diagnostics and figures on stderr ("# ..."). Exit 1 if a case failed.
 */

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
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
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "smc-clc.h"
#include "smcproto.h"

#define KiB ((uint64_t) 1024)
#define MiB ((uint64_t) 1024 * 1024)
#define MAX_PROCS 256

/* built with ASan (the test is built like smcd): RSS is no measure of leaks then, and
 * the soak runs shorter by default */
#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif
#define SOAK_DEFAULT_SECONDS (SANITIZED ? 30 : 60)

/* ---- state shared by every process of a case (one MAP_SHARED page) ---- */

struct shared {
        atomic_int failed;
        char reason[768];
        _Atomic uint64_t t_kill_ns;
        _Atomic uint32_t port;
        _Atomic uint64_t progress; /* bytes a case's watched process moved */
        _Atomic uint64_t sent;
        atomic_int stage;          /* set by a child: where it is */
        atomic_int go;             /* set by the parent */
        atomic_int paused;
        atomic_int phase;          /* soak: 0 warm-up, 1 pause, 2 run, 3 pause, 4 stop */
        atomic_int stop_bystander;
        _Atomic uint64_t rounds, max_rtt_ns;
        _Atomic uint64_t transfers, bytes, conns_smcd, conns_tcp, errors, lat_max_ns;
        atomic_int threads;        /* server: connections being served */
        _Atomic uint32_t ports[16];
};

static struct shared *shm;
static const char *smcd_path;
static struct smcd_instance S;

static int fail_at(int line, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail_at(int line, const char *fmt, ...) {
        char buf[600];
        int expected = 0;
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(buf, sizeof(buf), fmt, ap);
        va_end(ap);
        if (atomic_compare_exchange_strong(&shm->failed, &expected, 1))
                snprintf(shm->reason, sizeof(shm->reason), "%s (line %d, pid %d)", buf, line, (int) getpid());
        atomic_fetch_add(&shm->errors, 1);
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

/* ---- smcd: start, counters, descriptors ---- */

static int smcd_up(const char *const *extra) {
        char state[PATH_MAX];
        const char *args[24];
        size_t n = 0;
        int r;

        r = smcd_instance_init(&S);
        if (r < 0)
                return FAIL("mkdtemp: %s", strerror(-r));
        /* others (the isolation cases switch uid) must reach smcd.sock */
        chmod(S.dir, 0755);
        snprintf(state, sizeof(state), "%s/tunables.json", S.dir);
        args[n++] = "--no-bus";
        args[n++] = "--state-file";
        args[n++] = state;
        for (size_t i = 0; extra && extra[i] && n < 23; i++)
                args[n++] = extra[i];
        args[n] = NULL;
        r = smcd_start(&S, smcd_path, args, 10000);
        if (r < 0) {
                smcd_log_dump(&S, stderr, 20);
                return FAIL("smcd did not start: %s", strerror(-r));
        }
        setenv("SMCD_RUNTIME_DIR", S.dir, 1);
        return 0;
}

struct snap {
        int64_t fds, clients, listeners, conns, in_use, pending, free_count, bytes_total, aborted, spare_pairs,
                hs_errors, fallbacks;
        int64_t rss_kb, anon_kb, shmem_kb;
};

static int64_t pool_bufs(const struct snap *s) {
        return s->in_use + s->free_count + s->pending;
}

/* descriptors beyond the pool's memfds and the spare doorbell socketpairs smcd
 * keeps on purpose (smcd.spare_pairs, two fds each): must come back to the baseline */
static int64_t fd_excess(const struct snap *s) {
        return s->fds - pool_bufs(s) - 2 * s->spare_pairs;
}

/* NETLINK_SOCK_DIAG sockets (inodes): smcd opens one at the first FALLBACK notice
 * and keeps it (smcd/sockdiag.c), a lazily made resource rather than a leak */
static bool is_sockdiag(unsigned long ino) {
        char line[256];
        bool found = false;
        FILE *f = fopen("/proc/net/netlink", "re");

        if (!f)
                return false;
        while (!found && fgets(line, sizeof(line), f)) {
                unsigned long sk, inode = 0, x;
                int proto;

                /* sk Eth Pid Groups Rmem Wmem Dump Locks Drops Inode */
                if (sscanf(line, "%lx %d %lu %lx %lu %lu %lu %lu %lu %lu", &sk, &proto, &x, &x, &x, &x, &x, &x, &x,
                           &inode) == 10 && proto == 4 /* NETLINK_SOCK_DIAG */ && inode == ino)
                        found = true;
        }
        fclose(f);
        return found;
}

static int count_fds(pid_t pid) {
        char path[64], link[PATH_MAX], target[128];
        struct dirent *de;
        DIR *d;
        int n = 0;

        snprintf(path, sizeof(path), "/proc/%d/fd", (int) pid);
        d = opendir(path);
        if (!d)
                return -errno;
        while ((de = readdir(d))) {
                ssize_t len;

                if (de->d_name[0] == '.')
                        continue;
                snprintf(link, sizeof(link), "%s/%s", path, de->d_name);
                len = readlink(link, target, sizeof(target) - 1);
                if (len > 0) {
                        target[len] = 0;
                        if (strncmp(target, "socket:[", 8) == 0 && is_sockdiag(strtoul(target + 8, NULL, 10)))
                                continue;
                }
                n++;
        }
        closedir(d);
        return n;
}

/* on a failure: what smcd's descriptors are, but its pool buffers */
static void dump_fds(pid_t pid) {
        char path[64], link[PATH_MAX], target[256];
        struct dirent *de;
        DIR *d;

        snprintf(path, sizeof(path), "/proc/%d/fd", (int) pid);
        d = opendir(path);
        if (!d)
                return;
        while ((de = readdir(d))) {
                ssize_t n;

                if (de->d_name[0] == '.')
                        continue;
                snprintf(link, sizeof(link), "%s/%s", path, de->d_name);
                n = readlink(link, target, sizeof(target) - 1);
                if (n < 0)
                        continue;
                target[n] = 0;
                if (!strstr(target, "smcd-dmb")) {
                        char cmd[128];

                        fprintf(stderr, "# smcd fd %s -> %s\n", de->d_name, target);
                        if (getenv("SMCD_FAULTS_DEBUG") && strncmp(target, "socket:[", 8) == 0) {
                                snprintf(cmd, sizeof(cmd), "grep -h ' %.*s' /proc/net/netlink /proc/net/unix /proc/net/tcp /proc/net/tcp6 >&2",
                                         (int) strlen(target) - 9, target + 8);
                                if (system(cmd) < 0)
                                        continue;
                        }
                }
        }
        closedir(d);
}

static int64_t status_kb(pid_t pid, const char *key) {
        char path[64], line[256];
        size_t kl = strlen(key);
        int64_t v = -1;
        FILE *f;

        snprintf(path, sizeof(path), "/proc/%d/status", (int) pid);
        f = fopen(path, "re");
        if (!f)
                return -1;
        while (fgets(line, sizeof(line), f))
                if (strncmp(line, key, kl) == 0 && line[kl] == ':') {
                        v = strtoll(line + kl + 1, NULL, 10);
                        break;
                }
        fclose(f);
        return v;
}

static int snap_take(struct snap *s) {
        struct json_object *o = NULL;
        int r;

        r = smcd_stats(&S, &o, 5000);
        if (r < 0)
                return FAIL("smcd stats: %s", strerror(-r));
        /* the descriptors after the stats: stats.json is written and closed by now */
        s->fds = count_fds(S.pid);
        r = stats_get(o, "smcd.clients", &s->clients) | stats_get(o, "smcd.listeners", &s->listeners) |
            stats_get(o, "smcd.conns_current", &s->conns) | stats_get(o, "pool.in_use", &s->in_use) |
            stats_get(o, "pool.pending_clear", &s->pending) | stats_get(o, "pool.free_count", &s->free_count) |
            stats_get(o, "pool.bytes_total", &s->bytes_total) | stats_get(o, "smcd.conns_aborted", &s->aborted) |
            stats_get(o, "smcd.handshake_errors", &s->hs_errors) |
            stats_get(o, "smcd.fallback_total", &s->fallbacks) | stats_get(o, "smcd.spare_pairs", &s->spare_pairs);
        json_object_put(o);
        if (r != 0)
                return FAIL("stats.json: a key is missing");
        s->rss_kb = status_kb(S.pid, "VmRSS");
        s->anon_kb = status_kb(S.pid, "RssAnon");
        s->shmem_kb = status_kb(S.pid, "RssShmem");
        return 0;
}

/* A baseline: smcd's connection from smcd_start()'s probe (and any other client that
 * just left) may still be open for a moment, so wait until two snapshots agree. */
static int snap_baseline(struct snap *s) {
        struct snap prev;

        if (snap_take(&prev) < 0)
                return -1;
        for (int i = 0; i < 100; i++) {
                sleep_ms(50);
                if (snap_take(s) < 0)
                        return -1;
                if (s->fds == prev.fds && pool_bufs(s) == pool_bufs(&prev) && s->clients == prev.clients &&
                    s->conns == prev.conns)
                        return 0;
                prev = *s;
        }
        return FAIL("smcd's descriptor count does not settle");
}

static void snap_print(const char *what, const struct snap *s) {
        fprintf(stderr,
                "# %s: smcd fds %" PRId64 " (pool buffers %" PRId64 "), clients %" PRId64 ", conns %" PRId64
                ", in_use %" PRId64 ", free %" PRId64 ", pool bytes %" PRId64 " KiB, VmRSS %" PRId64
                " KiB (anon %" PRId64 ", shmem %" PRId64 ")\n",
                what, s->fds, pool_bufs(s), s->clients, s->conns, s->in_use, s->free_count, s->bytes_total / 1024,
                s->rss_kb, s->anon_kb, s->shmem_kb);
}

/* Waits until smcd has no connection, no buffer in use or to clear, @clients control
 * connections and its descriptors back to @base's (when given): not above it, as a
 * leak would be; fewer means the baseline caught one in passing (seen once in CI at
 * the end of the soak case: 12 against a baseline of 13, with 0 errors). */
static int wait_quiet(int64_t clients, const struct snap *base, int timeout_ms, const char *what,
                      struct snap *ret) {
        uint64_t deadline = now_ns() + (uint64_t) timeout_ms * 1000000ull;
        struct snap s;

        for (;;) {
                if (snap_take(&s) < 0)
                        return -1;
                if (s.conns == (base ? base->conns : 0) && s.in_use == (base ? base->in_use : 0) && s.pending == 0 &&
                    s.clients == clients &&
                    (!base || fd_excess(&s) <= fd_excess(base)))
                        break;
                if (now_ns() > deadline) {
                        snap_print("smcd now", &s);
                        dump_fds(S.pid);
                        if (base)
                                snap_print("smcd baseline", base);
                        return FAIL("%s: smcd not back to quiet after %d ms: conns %" PRId64 ", in_use %" PRId64
                                    ", pending %" PRId64 ", clients %" PRId64 " (want %" PRId64 "), fds-minus-pool %" PRId64
                                    " (baseline %" PRId64 ")",
                                    what, timeout_ms, s.conns, s.in_use, s.pending, s.clients, clients, fd_excess(&s),
                                    base ? fd_excess(base) : -1);
                }
                sleep_ms(20);
        }
        if (ret)
                *ret = s;
        return 0;
}

/* ---- processes ---- */

static pid_t spawn(int (*fn)(void *), void *arg) {
        pid_t pid;

        fflush(NULL);
        pid = fork();
        if (pid < 0) {
                FAIL("fork: %m");
                return -1;
        }
        if (pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                signal(SIGPIPE, SIG_IGN);
                _exit(fn(arg) == 0 && !failed() ? 0 : 1);
        }
        return pid;
}

/* Waits up to @timeout_ms for @pid; a process still running then is a hang (killed). */
static int reap(pid_t pid, int timeout_ms, const char *who) {
        uint64_t deadline = now_ns() + (uint64_t) timeout_ms * 1000000ull;
        int st;

        for (;;) {
                pid_t w = waitpid(pid, &st, WNOHANG);

                if (w == pid)
                        break;
                if (w < 0 && errno != EINTR)
                        return FAIL("%s: waitpid: %m", who);
                if (now_ns() > deadline) {
                        kill(pid, SIGKILL);
                        waitpid(pid, &st, 0);
                        return FAIL("%s hung: still running after %d ms", who, timeout_ms);
                }
                sleep_ms(2);
        }
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: %s %d", who, WIFEXITED(st) ? "exit status" : "killed by signal",
              WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
        return 0;
}

static void reap_killed(pid_t pid) {
        int st;

        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
                ;
}

/* waits until *v >= want; -1 on timeout or when a failure was reported */
static int wait_u64(_Atomic uint64_t *v, uint64_t want, int timeout_ms, const char *what) {
        uint64_t deadline = now_ns() + (uint64_t) timeout_ms * 1000000ull;

        while (atomic_load(v) < want) {
                if (failed())
                        return -1;
                if (now_ns() > deadline)
                        return FAIL("%s: timed out (%" PRIu64 " of %" PRIu64 ")", what, atomic_load(v), want);
                sleep_ms(1);
        }
        return 0;
}

static int wait_int(atomic_int *v, int want, int timeout_ms, const char *what) {
        uint64_t deadline = now_ns() + (uint64_t) timeout_ms * 1000000ull;

        while (atomic_load(v) < want) {
                if (failed())
                        return -1;
                if (now_ns() > deadline)
                        return FAIL("%s: timed out (%d of %d)", what, atomic_load(v), want);
                sleep_ms(1);
        }
        return 0;
}

/* ---- sockets through the client library ---- */

static int listener(uint16_t *ret_port, int backlog) {
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t len = sizeof(sa);
        int one = 1, fd;

        fd = smc_socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0)
                return FAIL("smc_socket: %m");
        if (smc_setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
            smc_bind(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0 || smc_listen(fd, backlog) < 0 ||
            smc_getsockname(fd, (struct sockaddr *) &sa, &len) < 0) {
                FAIL("listener: %m");
                smc_close(fd);
                return -1;
        }
        *ret_port = ntohs(sa.sin_port);
        return fd;
}

static int sock_mode(int fd) {
        int mode = -1;
        socklen_t len = sizeof(mode);

        if (smc_getsockopt(fd, SOL_SMC, SMC_PROTO_MODE, &mode, &len) < 0)
                return -1;
        return mode;
}

static uint32_t sock_reason(int fd) {
        uint32_t reason = 0;
        socklen_t len = sizeof(reason);

        if (smc_getsockopt(fd, SOL_SMC, SMC_PROTO_FALLBACK_REASON, &reason, &len) < 0)
                return UINT32_MAX;
        return reason;
}

/* connects to 127.0.0.1:port; -1 (after FAIL) on error */
static int dial(uint16_t port) {
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port),
                                  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        int fd = smc_socket(AF_INET, SOCK_STREAM, 0);

        if (fd < 0)
                return FAIL("smc_socket: %m");
        if (smc_connect(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0) {
                FAIL("connect to port %u: %m", port);
                smc_close(fd);
                return -1;
        }
        return fd;
}

/* all of buf, or -errno */
static ssize_t send_full(int fd, const void *buf, size_t len) {
        const char *p = buf;
        size_t done = 0;

        while (done < len) {
                ssize_t n = smc_send(fd, p + done, len - done, MSG_NOSIGNAL);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                done += (size_t) n;
        }
        return (ssize_t) done;
}

/* all of buf; fewer bytes at EOF; -errno on an error */
static ssize_t recv_full(int fd, void *buf, size_t len) {
        char *p = buf;
        size_t done = 0;

        while (done < len) {
                ssize_t n = smc_recv(fd, p + done, len - done, 0);

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

static int check_prompt(const char *what) {
        uint64_t t = now_ns(), tk = atomic_load(&shm->t_kill_ns);

        CHECK(tk != 0, "%s before the peer was killed", what);
        CHECK(t - tk <= 2000000000ull, "%s only %.0f ms after the kill", what, (t - tk) / 1e6);
        fprintf(stderr, "# %s %.1f ms after SIGKILL\n", what, (t - tk) / 1e6);
        return 0;
}

/* ---- request / response traffic (buffer pressure, soak, bystander) ----
 * A request: struct req, then req.len_req bytes of the stream req.seed; the server
 * checks every byte and answers len_resp bytes of the stream ~req.seed, which the
 * client checks. Strictly request then response, so no size can deadlock. EOF at a
 * request boundary ends the connection. */

#define REQ_MAGIC 0x51455246u

struct req {
        uint32_t magic;
        uint32_t len_req;
        uint32_t len_resp;
        uint32_t pad;
        uint64_t seed;
};

#define XFER_BUF (1 * MiB)

static void *serve_conn(void *arg) {
        int fd = (int) (intptr_t) arg;
        char *buf = malloc(XFER_BUF);
        struct req q;

        while (buf) {
                ssize_t n = recv_full(fd, &q, sizeof(q));

                if (n == 0)
                        break; /* the client is done */
                if (n != (ssize_t) sizeof(q) || q.magic != REQ_MAGIC || q.len_req > XFER_BUF || q.len_resp > XFER_BUF) {
                        FAIL("server: bad request header (%zd: %s)", n, n < 0 ? strerror((int) -n) : "short");
                        break;
                }
                n = recv_full(fd, buf, q.len_req);
                if (n != (ssize_t) q.len_req) {
                        FAIL("server: request of %u bytes: got %zd (%s)", q.len_req, n, n < 0 ? strerror((int) -n) : "EOF");
                        break;
                }
                if (pattern_check(q.seed, 0, buf, q.len_req) >= 0) {
                        FAIL("server: corrupt request (seed %" PRIu64 ", %u bytes, byte %zd)", q.seed, q.len_req,
                             pattern_check(q.seed, 0, buf, q.len_req));
                        break;
                }
                pattern_fill(~q.seed, 0, buf, q.len_resp);
                n = send_full(fd, buf, q.len_resp);
                if (n != (ssize_t) q.len_resp) {
                        FAIL("server: response of %u bytes: %s", q.len_resp, n < 0 ? strerror((int) -n) : "short");
                        break;
                }
        }
        free(buf);
        smc_close(fd);
        atomic_fetch_sub(&shm->threads, 1);
        return NULL;
}

/* A request/response server on its own port (published in shm->ports[slot]): a thread
 * per connection, until shm->go == -1 and every connection ended. */
static int rr_server(void *arg) {
        int slot = (int) (intptr_t) arg;
        uint16_t port;
        int lfd = listener(&port, 512);

        if (lfd < 0)
                return -1;
        atomic_store(&shm->ports[slot], port);
        while (atomic_load(&shm->go) != -1) {
                struct pollfd p = { .fd = lfd, .events = POLLIN };
                pthread_attr_t attr;
                pthread_t t;
                int fd;

                if (smc_poll(&p, 1, 100) <= 0)
                        continue;
                fd = smc_accept(lfd, NULL, NULL);
                if (fd < 0) {
                        if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED)
                                continue;
                        return FAIL("server: accept: %m");
                }
                atomic_fetch_add(&shm->threads, 1);
                pthread_attr_init(&attr);
                pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
                pthread_attr_setstacksize(&attr, 256 * 1024);
                if (pthread_create(&t, &attr, serve_conn, (void *) (intptr_t) fd) != 0) {
                        atomic_fetch_sub(&shm->threads, 1);
                        smc_close(fd);
                        return FAIL("server: pthread_create");
                }
                pthread_attr_destroy(&attr);
        }
        smc_close(lfd);
        for (int i = 0; i < 30000 && atomic_load(&shm->threads) > 0; i++)
                sleep_ms(1);
        CHECK(atomic_load(&shm->threads) == 0, "server: %d connections still open at the end", atomic_load(&shm->threads));
        return 0;
}

/* one request and its response on fd, both checked; 0, or -1 after FAIL */
static int rr_once(int fd, uint32_t len_req, uint32_t len_resp, uint64_t seed, char *buf) {
        struct req q = { .magic = REQ_MAGIC, .len_req = len_req, .len_resp = len_resp, .seed = seed };
        ssize_t n;

        pattern_fill(seed, 0, buf, len_req);
        n = send_full(fd, &q, sizeof(q));
        if (n == (ssize_t) sizeof(q))
                n = send_full(fd, buf, len_req);
        CHECK(n == (ssize_t) len_req, "client: request of %u bytes: %s", len_req, n < 0 ? strerror((int) -n) : "short");
        n = recv_full(fd, buf, len_resp);
        CHECK(n == (ssize_t) len_resp, "client: response of %u bytes: got %zd (%s)", len_resp, n,
              n < 0 ? strerror((int) -n) : "EOF");
        CHECK(pattern_check(~seed, 0, buf, len_resp) < 0, "client: corrupt response (seed %" PRIu64 ", %u bytes)", seed,
              len_resp);
        atomic_fetch_add(&shm->transfers, 2);
        atomic_fetch_add(&shm->bytes, (uint64_t) len_req + len_resp);
        return 0;
}

/* 1 B .. 1 MiB, about evenly spread over the powers of two */
static uint32_t rand_size(uint64_t *rng) {
        unsigned shift = (unsigned) (xorshift64s(rng) % 21); /* 2^0 .. 2^20 */
        uint64_t base = 1ull << shift;
        uint64_t v = base + xorshift64s(rng) % base;

        return (uint32_t) (v > XFER_BUF ? XFER_BUF : v);
}

/* ---- the bystander: one connection with small echoes all through a case ---- */

static void *echo_thread(void *arg) {
        int fd = (int) (intptr_t) arg;
        char buf[32768];

        for (;;) {
                ssize_t n = smc_recv(fd, buf, sizeof(buf), 0);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        break;
                if (send_full(fd, buf, (size_t) n) != n)
                        break;
        }
        return NULL;
}

static int bystander(void *unused) {
        uint64_t seq = 0, max_rtt = 0;
        char *buf = malloc(32768);
        uint16_t port;
        pthread_t t;
        int lfd, cfd, sfd, r = -1;

        lfd = listener(&port, 4);
        if (lfd < 0 || !buf)
                return -1;
        cfd = dial(port);
        if (cfd < 0)
                return -1;
        sfd = smc_accept(lfd, NULL, NULL);
        CHECK(sfd >= 0, "bystander: accept: %m");
        CHECK(sock_mode(cfd) == SMC_PROTO_MODE_SMCD, "bystander: not SMC-D (%d)", sock_mode(cfd));
        pthread_create(&t, NULL, echo_thread, (void *) (intptr_t) sfd);
        while (!atomic_load(&shm->stop_bystander)) {
                size_t len = 1 + (size_t) (splitmix64(seq) % 32767);
                uint64_t t0 = now_ns(), dt;

                pattern_fill(1000 + seq, 0, buf, len);
                if (send_full(cfd, buf, len) != (ssize_t) len || recv_full(cfd, buf, len) != (ssize_t) len) {
                        FAIL("bystander: echo %" PRIu64 " failed: %m", seq);
                        goto out;
                }
                if (pattern_check(1000 + seq, 0, buf, len) >= 0) {
                        FAIL("bystander: corrupt echo %" PRIu64, seq);
                        goto out;
                }
                dt = now_ns() - t0;
                if (dt > max_rtt)
                        max_rtt = dt;
                seq++;
                atomic_store(&shm->rounds, seq);
                sleep_ms(1);
        }
        r = 0;
out:
        smc_close(cfd);
        pthread_join(t, NULL);
        smc_close(sfd);
        smc_close(lfd);
        atomic_store(&shm->max_rtt_ns, max_rtt);
        CHECK(max_rtt < 2000000000ull, "bystander: an echo took %.0f ms", max_rtt / 1e6);
        free(buf);
        return r;
}

static pid_t bystander_start(void) {
        pid_t pid;

        atomic_store(&shm->stop_bystander, 0);
        atomic_store(&shm->rounds, 0);
        pid = spawn(bystander, NULL);
        if (pid > 0 && wait_u64(&shm->rounds, 10, 10000, "bystander start") < 0)
                return -1;
        return pid;
}

static int bystander_stop(pid_t pid) {
        uint64_t r0 = atomic_load(&shm->rounds);

        /* it must still be making progress */
        if (wait_u64(&shm->rounds, r0 + 5, 5000, "bystander during the fault") < 0)
                return -1;
        atomic_store(&shm->stop_bystander, 1);
        if (reap(pid, 10000, "bystander") < 0)
                return -1;
        fprintf(stderr, "# bystander: %" PRIu64 " echoes checked, slowest %.1f ms\n", atomic_load(&shm->rounds),
                atomic_load(&shm->max_rtt_ns) / 1e6);
        return 0;
}

/* ====================== client-kill ====================== */

#define KILL_AFTER (4 * MiB)

/* the receiver of seed 48: every byte checked, then EOF (the sender is killed) */
static int killsnd_server(void *arg) {
        char *buf = malloc(256 * KiB);
        uint64_t off = 0;
        uint16_t port;
        int lfd = listener(&port, 4), fd;

        if (lfd < 0 || !buf)
                return -1;
        atomic_store(&shm->port, port);
        fd = smc_accept(lfd, NULL, NULL);
        CHECK(fd >= 0, "accept: %m");
        for (;;) {
                ssize_t n = smc_recv(fd, buf, 256 * KiB, 0);

                if (n < 0 && errno == EINTR)
                        continue;
                CHECK(n >= 0, "receiver: after the sender was killed: expected EOF (as TCP), got %m");
                if (n == 0) {
                        CHECK(off >= KILL_AFTER, "receiver: EOF after only %" PRIu64 " bytes", off);
                        fprintf(stderr, "# receiver: %" PRIu64 " bytes checked, then EOF\n", off);
                        break;
                }
                CHECK(pattern_check(48, off, buf, (size_t) n) < 0, "receiver: corrupt data near %" PRIu64, off);
                off += (uint64_t) n;
                atomic_store(&shm->progress, off);
        }
        smc_close(fd);
        smc_close(lfd);
        free(buf);
        return check_prompt("EOF on recv");
}

static int killsnd_client(void *arg) {
        char *buf = malloc(64 * KiB);
        uint64_t off = 0;
        int fd = dial((uint16_t) atomic_load(&shm->port));

        CHECK(fd >= 0 && buf, "sender: connect");
        CHECK(sock_mode(fd) == SMC_PROTO_MODE_SMCD, "sender: not SMC-D");
        for (;;) {
                pattern_fill(48, off, buf, 64 * KiB);
                CHECK(send_full(fd, buf, 64 * KiB) == (ssize_t) (64 * KiB), "sender: send failed before the kill: %m");
                off += 64 * KiB;
        }
}

static int killrcv_server(void *arg) {
        char *buf = malloc(64 * KiB);
        uint64_t off = 0;
        uint16_t port;
        int lfd = listener(&port, 4), fd;

        if (lfd < 0 || !buf)
                return -1;
        atomic_store(&shm->port, port);
        fd = smc_accept(lfd, NULL, NULL);
        CHECK(fd >= 0, "accept: %m");
        for (;;) {
                ssize_t n;

                pattern_fill(49, off, buf, 64 * KiB);
                n = send_full(fd, buf, 64 * KiB);
                if (n < 0) {
                        CHECK(n == -ECONNRESET || n == -EPIPE, "sender: after the receiver was killed: %s, want ECONNRESET or EPIPE",
                              strerror((int) -n));
                        smc_close(fd);
                        smc_close(lfd);
                        free(buf);
                        return check_prompt(n == -EPIPE ? "EPIPE on send" : "ECONNRESET on send");
                }
                off += 64 * KiB;
                atomic_store(&shm->sent, off);
        }
}

static int killrcv_client(void *arg) {
        char *buf = malloc(256 * KiB);
        uint64_t off = 0;
        int fd = dial((uint16_t) atomic_load(&shm->port));

        CHECK(fd >= 0 && buf, "receiver: connect");
        CHECK(sock_mode(fd) == SMC_PROTO_MODE_SMCD, "receiver: not SMC-D");
        for (;;) {
                ssize_t n = smc_recv(fd, buf, 256 * KiB, 0);

                CHECK(n > 0, "receiver: recv failed before the kill: %zd %m", n);
                CHECK(pattern_check(49, off, buf, (size_t) n) < 0, "receiver: corrupt data near %" PRIu64, off);
                off += (uint64_t) n;
                atomic_store(&shm->progress, off);
        }
}

/* server process first (it publishes its port), then the client; the client is
 * SIGKILLed once shm->progress reaches KILL_AFTER */
static int kill_one(const char *what, int (*server)(void *), int (*client)(void *)) {
        pid_t sp, cp;

        atomic_store(&shm->port, 0);
        atomic_store(&shm->progress, 0);
        atomic_store(&shm->t_kill_ns, 0);
        sp = spawn(server, NULL);
        if (sp < 0)
                return -1;
        while (atomic_load(&shm->port) == 0 && !failed())
                sleep_ms(1);
        cp = spawn(client, NULL);
        if (cp < 0 || wait_u64(&shm->progress, KILL_AFTER, 20000, what) < 0) {
                kill(sp, SIGKILL);
                kill(cp, SIGKILL);
                return -1;
        }
        atomic_store(&shm->t_kill_ns, now_ns());
        kill(cp, SIGKILL);
        reap_killed(cp);
        return reap(sp, 10000, what);
}

static int case_client_kill(void) {
        struct snap s0;
        pid_t by;

        if (snap_baseline(&s0) < 0 || (by = bystander_start()) < 0)
                return -1;
        CHECK(kill_one("sender killed", killsnd_server, killsnd_client) == 0, "sender killed");
        CHECK(kill_one("receiver killed", killrcv_server, killrcv_client) == 0, "receiver killed");
        if (bystander_stop(by) < 0)
                return -1;
        return wait_quiet(s0.clients, &s0, 5000, "after the kills", NULL);
}

/* ====================== reader-stop-kill ====================== */

static int case_reader_stop_kill(void) {
        struct snap s0, s1;
        uint64_t sent, t0;
        pid_t sp, cp, by;

        if ((by = bystander_start()) < 0 || snap_baseline(&s0) < 0)
                return -1;
        atomic_store(&shm->port, 0);
        atomic_store(&shm->progress, 0);
        atomic_store(&shm->sent, 0);
        atomic_store(&shm->t_kill_ns, 0);
        sp = spawn(killrcv_server, NULL); /* the writer: ECONNRESET/EPIPE within 2 s of the kill */
        while (sp > 0 && atomic_load(&shm->port) == 0 && !failed())
                sleep_ms(1);
        cp = spawn(killrcv_client, NULL);
        if (cp < 0 || wait_u64(&shm->progress, 1 * MiB, 20000, "reader") < 0)
                goto fail;
        kill(cp, SIGSTOP);
        /* the writer fills the ring and blocks: its count stops moving */
        t0 = now_ns();
        for (sent = atomic_load(&shm->sent);;) {
                sleep_ms(300);
                if (atomic_load(&shm->sent) == sent)
                        break;
                sent = atomic_load(&shm->sent);
                if (now_ns() - t0 > 10000000000ull) {
                        FAIL("the writer did not block with its reader stopped");
                        goto fail;
                }
        }
        /* a stopped reader is not a dead one: the writer stays blocked, no error */
        sleep_ms(1000);
        if (failed() || waitpid(sp, NULL, WNOHANG) != 0) {
                FAIL("the writer ended while the reader was only stopped");
                goto fail;
        }
        fprintf(stderr, "# reader stopped after %" PRIu64 " KiB read; the writer blocked after %" PRIu64 " KiB\n",
                atomic_load(&shm->progress) / 1024, atomic_load(&shm->sent) / 1024);
        atomic_store(&shm->t_kill_ns, now_ns());
        kill(cp, SIGKILL);
        reap_killed(cp);
        if (reap(sp, 10000, "writer after its stopped reader was killed") < 0)
                return -1;
        if (wait_quiet(s0.clients, &s0, 5000, "after the kill", &s1) < 0)
                return -1;
        CHECK(s1.aborted == s0.aborted + 1, "the connection with unread data counted as aborted (%" PRId64 " -> %" PRId64 ")",
              s0.aborted, s1.aborted);
        return bystander_stop(by);
fail:
        if (cp > 0) {
                kill(cp, SIGKILL);
                reap_killed(cp);
        }
        if (sp > 0) {
                kill(sp, SIGKILL);
                reap_killed(sp);
        }
        return -1;
}

/* ====================== smcd-kill ====================== */

#define SK_TOTAL (64 * MiB)
#define SK_PAUSE (8 * MiB)

struct sk_dir {
        int fd;
        uint64_t seed;
        uint64_t fnv; /* of what was received */
        int r;
};

static void *sk_sender(void *arg) {
        struct sk_dir *d = arg;
        char *buf = malloc(256 * KiB);

        d->r = -1;
        for (uint64_t off = 0; buf && off < SK_TOTAL; off += 256 * KiB) {
                if (off == SK_PAUSE) {
                        /* both senders wait here until smcd is dead */
                        atomic_fetch_add(&shm->paused, 1);
                        while (atomic_load(&shm->go) == 0)
                                sleep_ms(1);
                }
                pattern_fill(d->seed, off, buf, 256 * KiB);
                if (send_full(d->fd, buf, 256 * KiB) != (ssize_t) (256 * KiB)) {
                        FAIL("sender of stream %" PRIu64 ": send at %" PRIu64 ": %m", d->seed, off);
                        free(buf);
                        return NULL;
                }
        }
        free(buf);
        d->r = 0;
        return NULL;
}

static void *sk_receiver(void *arg) {
        struct sk_dir *d = arg;
        char *buf = malloc(256 * KiB);
        uint64_t off = 0, want = FNV1A64_INIT;

        d->r = -1;
        d->fnv = FNV1A64_INIT;
        while (buf && off < SK_TOTAL) {
                ssize_t n = smc_recv(d->fd, buf, 256 * KiB, 0);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0) {
                        FAIL("receiver of stream %" PRIu64 ": at %" PRIu64 ": %s", d->seed, off, n == 0 ? "EOF" : strerror(errno));
                        goto out;
                }
                if (pattern_check(d->seed, off, buf, (size_t) n) >= 0) {
                        FAIL("receiver of stream %" PRIu64 ": corrupt near %" PRIu64, d->seed, off);
                        goto out;
                }
                d->fnv = fnv1a64(d->fnv, buf, (size_t) n);
                off += (uint64_t) n;
        }
        /* the checksum of the stream as it should be */
        for (uint64_t o = 0; o < SK_TOTAL; o += 256 * KiB) {
                pattern_fill(d->seed, o, buf, 256 * KiB);
                want = fnv1a64(want, buf, 256 * KiB);
        }
        if (d->fnv != want)
                FAIL("stream %" PRIu64 ": checksum %016" PRIx64 ", want %016" PRIx64, d->seed, d->fnv, want);
        else
                d->r = 0;
out:
        free(buf);
        return NULL;
}

static int sk_run(int fd, uint64_t seed_tx, uint64_t seed_rx, const char *who) {
        struct sk_dir tx = { .fd = fd, .seed = seed_tx }, rx = { .fd = fd, .seed = seed_rx };
        pthread_t ts, tr;

        CHECK(sock_mode(fd) == SMC_PROTO_MODE_SMCD, "%s: not SMC-D", who);
        pthread_create(&ts, NULL, sk_sender, &tx);
        pthread_create(&tr, NULL, sk_receiver, &rx);
        pthread_join(ts, NULL);
        pthread_join(tr, NULL);
        CHECK(tx.r == 0 && rx.r == 0, "%s: transfer failed", who);
        fprintf(stderr, "# %s: 64 MiB received after smcd's death too, checksum %016" PRIx64 " right\n", who, rx.fnv);
        CHECK(smc_close(fd) == 0, "%s: close: %m", who);
        return 0;
}

static int sk_server(void *arg) {
        uint16_t port;
        int lfd = listener(&port, 4), fd;

        if (lfd < 0)
                return -1;
        atomic_store(&shm->port, port);
        fd = smc_accept(lfd, NULL, NULL);
        CHECK(fd >= 0, "accept: %m");
        smc_close(lfd);
        return sk_run(fd, 81, 80, "server");
}

static int sk_client(void *arg) {
        int fd = dial((uint16_t) atomic_load(&shm->port));

        if (fd < 0)
                return -1;
        return sk_run(fd, 80, 81, "client");
}

static int case_smcd_kill(void) {
        pid_t sp, cp = -1, by;
        int r;

        /* a connection made before the kill, echoing all through it and after */
        if ((by = bystander_start()) < 0)
                return -1;
        atomic_store(&shm->port, 0);
        atomic_store(&shm->paused, 0);
        atomic_store(&shm->go, 0);
        sp = spawn(sk_server, NULL);
        while (sp > 0 && atomic_load(&shm->port) == 0 && !failed())
                sleep_ms(1);
        if (sp > 0)
                cp = spawn(sk_client, NULL);
        r = cp > 0 ? wait_int(&shm->paused, 2, 20000, "both senders at 8 MiB") : -1;
        if (r == 0) {
                CHECK(kill(S.pid, SIGKILL) == 0, "kill smcd: %m");
                smcd_reap(&S, true);
                fprintf(stderr, "# smcd SIGKILLed with 8 MiB of 64 MiB sent each way\n");
        }
        atomic_store(&shm->go, 1);
        if (cp > 0)
                r |= reap(cp, 60000, "client");
        r |= reap(sp, 60000, "server");
        r |= bystander_stop(by);
        return r ? -1 : 0;
}

/* ====================== ctl-shutdown-1000 ====================== */

#define NCONN 1000

/* echoes on every connection it accepts until NCONN of them ended (EOF, or
 * ECONNRESET after a SIGKILL); shm->stage = 1 once all are accepted */
static int many_server(void *arg) {
        struct pollfd *p = calloc(NCONN + 1, sizeof(*p));
        int n = 0, ended = 0, eof = 0;
        uint64_t deadline = now_ns() + 90 * 1000000000ull;
        uint16_t port;
        char buf[4096];

        CHECK(p, "calloc");
        p[0].fd = listener(&port, NCONN);
        if (p[0].fd < 0)
                return -1;
        p[0].events = POLLIN;
        atomic_store(&shm->port, port);
        while (ended < NCONN) {
                int k;

                CHECK(now_ns() < deadline, "server: %d of %d connections ended by the deadline", ended, NCONN);
                k = smc_poll(p, (nfds_t) n + 1, 500);
                CHECK(k >= 0 || errno == EINTR, "server: poll: %m");
                if (k <= 0)
                        continue;
                if ((p[0].revents & POLLIN) && n < NCONN) {
                        int fd = smc_accept(p[0].fd, NULL, NULL);

                        CHECK(fd >= 0, "server: accept: %m");
                        CHECK(sock_mode(fd) == SMC_PROTO_MODE_SMCD, "server: connection %d not SMC-D", n);
                        p[++n] = (struct pollfd) { .fd = fd, .events = POLLIN };
                }
                for (int i = 1; i <= n; i++) {
                        ssize_t m;

                        if (p[i].fd < 0 || !p[i].revents)
                                continue;
                        m = smc_recv(p[i].fd, buf, sizeof(buf), MSG_DONTWAIT);
                        if (m < 0 && (errno == EAGAIN || errno == EINTR))
                                continue;
                        if (m > 0) {
                                CHECK(send_full(p[i].fd, buf, (size_t) m) == m, "server: echo on %d: %m", i);
                                continue;
                        }
                        CHECK(m == 0 || errno == ECONNRESET, "server: connection %d: %m", i);
                        eof += m == 0;
                        smc_close(p[i].fd);
                        p[i].fd = -1;
                        ended++;
                }
        }
        smc_close(p[0].fd);
        free(p);
        fprintf(stderr, "# server: %d connections ended (%d EOF)\n", ended, eof);
        return 0;
}

static int echo_all(int *fds, int n, uint64_t seed) {
        char buf[100], got[100];

        for (int i = 0; i < n; i++) {
                pattern_fill(seed + (uint64_t) i, 0, buf, sizeof(buf));
                CHECK(send_full(fds[i], buf, sizeof(buf)) == (ssize_t) sizeof(buf), "echo %d: send: %m", i);
        }
        for (int i = 0; i < n; i++) {
                CHECK(recv_full(fds[i], got, sizeof(got)) == (ssize_t) sizeof(got), "echo %d: recv: %m", i);
                CHECK(pattern_check(seed + (uint64_t) i, 0, got, sizeof(got)) < 0, "echo %d: corrupt", i);
        }
        return 0;
}

/* the library's control connection to smcd: the one AF_UNIX SEQPACKET socket */
static int find_ctl_socket(void) {
        DIR *d = opendir("/proc/self/fd");
        struct dirent *de;
        int found = -1;

        if (!d)
                return -1;
        while ((de = readdir(d))) {
                int fd = atoi(de->d_name), v;
                socklen_t len = sizeof(v);
                struct sockaddr_un sa;
                socklen_t sl = sizeof(sa);

                if (de->d_name[0] == '.' || fd == dirfd(d))
                        continue;
                if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &len) < 0 || v != SOCK_SEQPACKET)
                        continue;
                if (getpeername(fd, (struct sockaddr *) &sa, &sl) == 0 && sa.sun_family == AF_UNIX &&
                    strstr(sa.sun_path, "smcd.sock"))
                        found = fd;
        }
        closedir(d);
        return found;
}

static int many_client(void *arg) {
        bool shut = arg != NULL;
        int *fds = calloc(NCONN, sizeof(int)), cfd;

        CHECK(fds, "calloc");
        for (int i = 0; i < NCONN; i++) {
                fds[i] = dial((uint16_t) atomic_load(&shm->port));
                if (fds[i] < 0)
                        return -1;
                CHECK(sock_mode(fds[i]) == SMC_PROTO_MODE_SMCD, "connection %d not SMC-D", i);
        }
        if (echo_all(fds, NCONN, 5000) < 0)
                return -1;
        if (!shut) {
                atomic_store(&shm->stage, 2);
                for (;;)
                        pause(); /* SIGKILLed by the parent */
        }
        cfd = find_ctl_socket();
        CHECK(cfd >= 0, "no control socket found in /proc/self/fd");
        CHECK(shutdown(cfd, SHUT_RDWR) == 0, "shutdown of the control socket: %m");
        atomic_store(&shm->stage, 2);
        while (atomic_load(&shm->go) == 0)
                sleep_ms(1);
        /* the data path does not need smcd's control connection */
        if (echo_all(fds, NCONN, 7000) < 0)
                return -1;
        fprintf(stderr, "# %d connections echo after the control socket was shut down\n", NCONN);
        for (int i = 0; i < NCONN; i++)
                smc_close(fds[i]);
        free(fds);
        return 0;
}

static int many_run(bool shut) {
        const char *what = shut ? "control socket shut down" : "holder SIGKILLed";
        struct snap s0, s1;
        pid_t sp, cp = -1;
        int r = -1;

        if (snap_baseline(&s0) < 0)
                return -1;
        atomic_store(&shm->port, 0);
        atomic_store(&shm->stage, 0);
        atomic_store(&shm->go, 0);
        sp = spawn(many_server, NULL);
        while (sp > 0 && atomic_load(&shm->port) == 0 && !failed())
                sleep_ms(1);
        if (sp > 0)
                cp = spawn(many_client, shut ? (void *) 1 : NULL);
        if (cp < 0 || wait_int(&shm->stage, 2, 90000, "1000 connections and their echoes") < 0)
                goto out;
        if (shut) {
                /* smcd lost the client's control connection, the connections live on */
                uint64_t deadline = now_ns() + 5000000000ull;

                do {
                        if (snap_take(&s1) < 0)
                                goto out;
                } while ((s1.clients != s0.clients + 1 || s1.conns != s0.conns + NCONN) && now_ns() < deadline && (sleep_ms(20), true));
                if (s1.clients != s0.clients + 1 || s1.conns != s0.conns + NCONN) {
                        FAIL("after the shutdown: clients %" PRId64 " (want %" PRId64 "), conns %" PRId64 " (want %" PRId64 ")",
                             s1.clients, s0.clients + 1, s1.conns, s0.conns + NCONN);
                        goto out;
                }
                snap_print("smcd with 1000 connections of a client whose control socket is gone", &s1);
                atomic_store(&shm->go, 1);
                if (reap(cp, 60000, "client") < 0)
                        cp = -1;
                else
                        cp = 0;
        } else {
                if (snap_take(&s1) == 0)
                        snap_print("smcd with 1000 connections", &s1);
                kill(cp, SIGKILL);
                reap_killed(cp);
                cp = 0;
        }
        if (cp < 0)
                goto out;
        if (reap(sp, 90000, "server") < 0) {
                sp = 0;
                goto out;
        }
        sp = 0;
        r = wait_quiet(s0.clients, &s0, 10000, what, &s1);
        if (r == 0)
                fprintf(stderr, "# %s: all %d connections freed, smcd fds back to %" PRId64 " (+ %" PRId64 " pool buffers)\n",
                        what, NCONN, fd_excess(&s1), pool_bufs(&s1));
out:
        if (cp > 0) {
                kill(cp, SIGKILL);
                reap_killed(cp);
        }
        if (sp > 0) {
                kill(sp, SIGKILL);
                reap_killed(sp);
        }
        return r;
}

static int case_ctl_shutdown(void) {
        pid_t by = bystander_start();

        if (by < 0)
                return -1;
        if (many_run(true) < 0 || many_run(false) < 0) {
                kill(by, SIGKILL);
                reap_killed(by);
                return -1;
        }
        return bystander_stop(by);
}

/* ====================== raw control protocol (ctl-proto.h) ====================== */

#define CTL_MAGIC 0x64434d53u
enum { T_HELLO = 1, T_HELLO_REPLY = 2, T_CONNECT = 6, T_CONNECT_REPLY = 7, T_CLOSE = 9 };

struct raw_hdr {
        uint32_t magic;
        uint16_t version, type;
        uint32_t len, seq;
};

struct raw_addr {
        uint16_t family, port;
        uint32_t scope;
        uint8_t addr[16];
};

static int raw_open(void) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        struct {
                struct raw_hdr h;
                uint32_t lo, hi, r1, r2;
        } hello = { { CTL_MAGIC, 1, T_HELLO, 32, 1 }, 1, 1, 0, 0 };
        char reply[256];
        int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

        CHECK(fd >= 0, "socket: %m");
        CHECK(strlen(S.sock) < sizeof(sa.sun_path), "socket path too long");
        memcpy(sa.sun_path, S.sock, strlen(S.sock) + 1);
        CHECK(connect(fd, (struct sockaddr *) &sa, sizeof(sa)) == 0, "connect %s: %m", S.sock);
        CHECK(send(fd, &hello, sizeof(hello), MSG_NOSIGNAL) == (ssize_t) sizeof(hello), "HELLO: %m");
        CHECK(recv(fd, reply, sizeof(reply), 0) >= 16 && ((struct raw_hdr *) reply)->type == T_HELLO_REPLY, "no HELLO_REPLY");
        return fd;
}

/* a client that floods CLOSEs of unknown ids and never reads the ERRORs */
static int flood_hog(void *arg) {
        struct {
                struct raw_hdr h;
                uint64_t id;
                uint32_t flags, pad;
        } m = { { CTL_MAGIC, 1, T_CLOSE, 32, 0 }, 1, 0, 0 };
        uint64_t sent = 0, t0 = now_ns();
        int fd = raw_open();

        if (fd < 0)
                return -1;
        for (;;) {
                ssize_t n;

                m.h.seq++;
                n = send(fd, &m, sizeof(m), MSG_DONTWAIT | MSG_NOSIGNAL);
                if (n < 0 && errno == EAGAIN) {
                        sleep_ms(1);
                        continue;
                }
                if (n < 0 && (errno == EPIPE || errno == ECONNRESET))
                        break;
                CHECK(n == (ssize_t) sizeof(m), "hog: send: %m");
                sent++;
                CHECK(now_ns() - t0 < 15000000000ull, "hog: smcd did not drop a client that never reads (%" PRIu64 " sent)",
                      sent);
        }
        fprintf(stderr, "# hog: dropped by smcd after %" PRIu64 " unread requests, %.0f ms\n", sent, (now_ns() - t0) / 1e6);
        close(fd);
        atomic_store(&shm->stage, 1);
        return 0;
}

/* connects, one request/response, closes; until shm->stage >= 1; max latency of
 * a connect recorded */
static int connect_prober(void *arg) {
        uint16_t port = (uint16_t) atomic_load(&shm->ports[0]);
        char *buf = malloc(XFER_BUF);
        uint64_t n = 0, worst = 0;

        CHECK(buf, "malloc");
        while (atomic_load(&shm->stage) == 0 || n < 20) {
                uint64_t t0 = now_ns(), dt;
                int fd = dial(port);

                if (fd < 0)
                        return -1;
                dt = now_ns() - t0;
                worst = dt > worst ? dt : worst;
                CHECK(sock_mode(fd) == SMC_PROTO_MODE_SMCD, "prober: connect %" PRIu64 " not SMC-D (reason %#x)", n,
                      sock_reason(fd));
                if (rr_once(fd, 1000, 1000, 9000 + n, buf) < 0)
                        return -1;
                smc_close(fd);
                n++;
        }
        free(buf);
        fprintf(stderr, "# prober: %" PRIu64 " connects meanwhile, slowest %.1f ms\n", n, worst / 1e6);
        CHECK(worst < 1000000000ull, "a connect took %.0f ms while a client did not read its replies", worst / 1e6);
        return 0;
}

static int case_no_read_flood(void) {
        struct snap s0;
        pid_t by, srv, hog, prober;
        int r;

        if (snap_baseline(&s0) < 0)
                return -1;
        atomic_store(&shm->go, 0);
        atomic_store(&shm->stage, 0);
        atomic_store(&shm->ports[0], 0);
        by = bystander_start();
        srv = spawn(rr_server, (void *) 0);
        while (srv > 0 && atomic_load(&shm->ports[0]) == 0 && !failed())
                sleep_ms(1);
        prober = spawn(connect_prober, NULL);
        hog = spawn(flood_hog, NULL);
        r = reap(hog, 20000, "hog");
        r |= reap(prober, 20000, "prober");
        atomic_store(&shm->go, -1);
        r |= reap(srv, 20000, "server");
        r |= by > 0 ? bystander_stop(by) : -1;
        if (r)
                return -1;
        return wait_quiet(s0.clients, &s0, 5000, "after the flood", NULL);
}

/* 50 CONNECTs to a listener, replies (with their fds) never read; then it dies */
#define NOREAD_CONNS 50
static int connect_hog(void *arg) {
        struct {
                struct raw_hdr h;
                struct raw_addr dst, src;
                uint32_t sndbuf, rcvbuf;
        } m;
        int fd = raw_open();

        if (fd < 0)
                return -1;
        for (int i = 0; i < NOREAD_CONNS; i++) {
                memset(&m, 0, sizeof(m));
                m.h = (struct raw_hdr) { CTL_MAGIC, 1, T_CONNECT, sizeof(m), 100 + (uint32_t) i };
                m.dst.family = AF_INET;
                m.dst.port = (uint16_t) atomic_load(&shm->port);
                m.src.family = AF_INET;
                m.src.port = (uint16_t) (41000 + i);
                m.dst.addr[0] = m.src.addr[0] = 127;
                m.dst.addr[3] = m.src.addr[3] = 1;
                CHECK(send(fd, &m, sizeof(m), MSG_NOSIGNAL) == (ssize_t) sizeof(m), "CONNECT %d: %m", i);
        }
        atomic_store(&shm->stage, 1);
        while (atomic_load(&shm->go) == 0)
                sleep_ms(1);
        return 0; /* exits with the replies unread: their fds die in the socket */
}

/* accepts NOREAD_CONNS connections, each must end (EOF or reset) */
static int noread_server(void *arg) {
        uint16_t port;
        int lfd = listener(&port, 128), fds[NOREAD_CONNS], eof = 0;
        char b;

        if (lfd < 0)
                return -1;
        atomic_store(&shm->port, port);
        for (int i = 0; i < NOREAD_CONNS; i++) {
                fds[i] = smc_accept(lfd, NULL, NULL);
                CHECK(fds[i] >= 0, "accept %d: %m", i);
        }
        atomic_store(&shm->progress, NOREAD_CONNS);
        for (int i = 0; i < NOREAD_CONNS; i++) {
                ssize_t n = smc_recv(fds[i], &b, 1, 0);

                CHECK(n == 0 || (n < 0 && errno == ECONNRESET), "connection %d: expected its end, got %zd %m", i, n);
                eof += n == 0;
                smc_close(fds[i]);
        }
        smc_close(lfd);
        fprintf(stderr, "# server: the %d connections of the dead client ended (%d EOF)\n", NOREAD_CONNS, eof);
        return 0;
}

static int case_no_read_connects(void) {
        struct snap s0, s1;
        pid_t sp, hp;
        int r;

        if (snap_baseline(&s0) < 0)
                return -1;
        atomic_store(&shm->port, 0);
        atomic_store(&shm->stage, 0);
        atomic_store(&shm->go, 0);
        atomic_store(&shm->progress, 0);
        sp = spawn(noread_server, NULL);
        while (sp > 0 && atomic_load(&shm->port) == 0 && !failed())
                sleep_ms(1);
        hp = spawn(connect_hog, NULL);
        r = wait_int(&shm->stage, 1, 10000, "hog's CONNECTs");
        r = r ?: wait_u64(&shm->progress, NOREAD_CONNS, 10000, "server accepts");
        if (r == 0 && snap_take(&s1) == 0) {
                snap_print("smcd with 50 CONNECT replies unread", &s1);
                if (s1.conns != NOREAD_CONNS)
                        r = FAIL("conns_current %" PRId64 ", want %d", s1.conns, NOREAD_CONNS);
        }
        atomic_store(&shm->go, 1);
        r |= reap(hp, 10000, "hog");
        r |= reap(sp, 10000, "server");
        if (r)
                return -1;
        return wait_quiet(s0.clients, &s0, 5000, "after the hog died", NULL);
}

/* ====================== buf-pressure-churn ====================== */

static int churn_client(void *arg) {
        uint64_t rng = 0x9e3779b97f4a7c15ull ^ (uint64_t) getpid() << 16, deadline = now_ns() + 8000000000ull;
        uint16_t port = (uint16_t) atomic_load(&shm->ports[0]);
        char *buf = malloc(XFER_BUF);

        CHECK(buf, "malloc");
        while (now_ns() < deadline) {
                int fd = dial(port), mode, k;

                if (fd < 0)
                        return -1;
                mode = sock_mode(fd);
                if (mode == SMC_PROTO_MODE_SMCD)
                        atomic_fetch_add(&shm->conns_smcd, 1);
                else {
                        uint32_t reason = sock_reason(fd);

                        CHECK(mode == SMC_PROTO_MODE_TCP && reason == SMC_CLC_DECL_MAX_DMB,
                              "under the buffer limit: mode %d reason %#x, want SMC-D or TCP with MAX_DMB", mode, reason);
                        atomic_fetch_add(&shm->conns_tcp, 1);
                }
                k = 1 + (int) (xorshift64s(&rng) % 4);
                for (int i = 0; i < k; i++)
                        if (rr_once(fd, rand_size(&rng), rand_size(&rng), xorshift64s(&rng), buf) < 0)
                                return -1;
                CHECK(smc_close(fd) == 0, "close: %m");
        }
        free(buf);
        return 0;
}

static int case_buf_pressure(void) {
        pid_t by, srv, cl[8];
        struct snap s0, s1;
        int r = 0;

        if (snap_baseline(&s0) < 0)
                return -1;
        atomic_store(&shm->go, 0);
        atomic_store(&shm->ports[0], 0);
        by = bystander_start(); /* holds 128 KiB of the 384 KiB all along */
        srv = spawn(rr_server, (void *) 0);
        while (srv > 0 && atomic_load(&shm->ports[0]) == 0 && !failed())
                sleep_ms(1);
        for (int i = 0; i < 8; i++)
                cl[i] = spawn(churn_client, NULL);
        for (int i = 0; i < 8; i++)
                r |= reap(cl[i], 60000, "churn client");
        atomic_store(&shm->go, -1);
        r |= reap(srv, 20000, "server");
        r |= by > 0 ? bystander_stop(by) : -1;
        if (r)
                return -1;
        if (wait_quiet(s0.clients, &s0, 5000, "after the churn", &s1) < 0)
                return -1;
        fprintf(stderr, "# 8 processes under --max-buf-per-uid 384K: %" PRIu64 " SMC-D and %" PRIu64
                        " MAX_DMB fallback connections, %" PRIu64 " transfers (%" PRIu64 " MiB) checked\n",
                atomic_load(&shm->conns_smcd), atomic_load(&shm->conns_tcp), atomic_load(&shm->transfers),
                atomic_load(&shm->bytes) / MiB);
        CHECK(atomic_load(&shm->conns_tcp) > 0 && atomic_load(&shm->conns_smcd) > 0,
              "the limit was never reached, or SMC-D never possible (%" PRIu64 " SMC-D, %" PRIu64 " TCP)",
              atomic_load(&shm->conns_smcd), atomic_load(&shm->conns_tcp));
        return 0;
}

/* ====================== soak ====================== */

static unsigned env_uint(const char *name, unsigned def) {
        const char *v = getenv(name);
        char *end;
        unsigned long n;

        if (!v || !*v)
                return def;
        n = strtoul(v, &end, 10);
        return *end || n == 0 || n > 1000000 ? def : (unsigned) n;
}

#define SOAK_SERVERS 4

/* phase 1 and 3: finish the current connection, then wait for the next phase */
static void soak_pause_point(int *seen) {
        int ph = atomic_load(&shm->phase);

        if ((ph == 1 || ph == 3) && *seen != ph) {
                *seen = ph;
                atomic_fetch_add(&shm->paused, 1);
                while (atomic_load(&shm->phase) == ph)
                        sleep_ms(5);
        }
}

static int soak_client(void *arg) {
        unsigned idx = (unsigned) (uintptr_t) arg;
        uint64_t rng = splitmix64(0x50a6ull + idx) | 1;
        char *buf = malloc(XFER_BUF);
        int seen = 0;

        CHECK(buf, "malloc");
        while (atomic_load(&shm->phase) != 4) {
                uint16_t port = (uint16_t) atomic_load(&shm->ports[xorshift64s(&rng) % SOAK_SERVERS]);
                bool lng = xorshift64s(&rng) % 8 == 0;
                uint64_t t0 = now_ns(), dt, until = t0 + (lng ? 500000000ull + xorshift64s(&rng) % 1500000000ull : 0);
                int fd, k = lng ? 1000000 : 1 + (int) (xorshift64s(&rng) % 4);

                soak_pause_point(&seen);
                if (atomic_load(&shm->phase) == 4)
                        break;
                t0 = now_ns();
                fd = dial(port);
                if (fd < 0)
                        return -1;
                dt = now_ns() - t0;
                if (dt > atomic_load(&shm->lat_max_ns))
                        atomic_store(&shm->lat_max_ns, dt);
                if (sock_mode(fd) == SMC_PROTO_MODE_SMCD)
                        atomic_fetch_add(&shm->conns_smcd, 1);
                else {
                        atomic_fetch_add(&shm->conns_tcp, 1);
                        FAIL("soak: connection not SMC-D (mode %d, reason %#x)", sock_mode(fd), sock_reason(fd));
                        smc_close(fd);
                        return -1;
                }
                for (int i = 0; i < k; i++) {
                        /* a long-lived one mostly exchanges small messages with pauses */
                        uint32_t a = rand_size(&rng), b = rand_size(&rng);

                        if (lng && xorshift64s(&rng) % 4 != 0) {
                                a = a > 4096 ? a % 4096 + 1 : a;
                                b = b > 4096 ? b % 4096 + 1 : b;
                        }
                        if (rr_once(fd, a, b, xorshift64s(&rng), buf) < 0) {
                                smc_close(fd);
                                return -1;
                        }
                        if (lng) {
                                if (now_ns() > until || (atomic_load(&shm->phase) != 0 && atomic_load(&shm->phase) != 2))
                                        break;
                                sleep_ms((unsigned) (xorshift64s(&rng) % 5));
                        }
                }
                CHECK(smc_close(fd) == 0, "close: %m");
        }
        free(buf);
        return 0;
}

static int soak_quiet_point(int phase, int nclients, const struct snap *base, struct snap *ret, const char *what) {
        atomic_store(&shm->paused, 0);
        atomic_store(&shm->phase, phase);
        if (wait_int(&shm->paused, nclients, 60000, "clients pausing") < 0)
                return -1;
        if (wait_quiet(nclients + SOAK_SERVERS, NULL, 10000, what, ret) < 0)
                return -1;
        /* the descriptor count may lag the counters by a close or two: settle, and at
         * the end give it a moment more to match the start */
        if (snap_baseline(ret) < 0)
                return -1;
        for (int i = 0; base && i < 50 && fd_excess(ret) > fd_excess(base); i++) {
                sleep_ms(20);
                if (snap_take(ret) < 0)
                        return -1;
        }
        snap_print(what, ret);
        if (getenv("SMCD_FAULTS_DEBUG"))
                dump_fds(S.pid);
        return 0;
}

static int case_soak(void) {
        unsigned secs = env_uint("SMCD_SOAK_SECONDS", SOAK_DEFAULT_SECONDS), n = env_uint("SMCD_SOAK_CLIENTS", 64);
        unsigned warm = secs / 6 < 5 ? 5 : secs / 6 > 30 ? 30 : secs / 6;
        pid_t srv[SOAK_SERVERS], *cl;
        struct snap a, b, s;
        uint64_t t0, tr0, by0, end;
        int r = 0;

        if (n > MAX_PROCS)
                n = MAX_PROCS;
        if (secs < warm + 5)
                secs = warm + 5;
        cl = calloc(n, sizeof(pid_t));
        CHECK(cl, "calloc");
        fprintf(stderr, "# soak: %u client processes, %u s (warm-up %u s), %d servers\n", n, secs, warm, SOAK_SERVERS);
        atomic_store(&shm->go, 0);
        atomic_store(&shm->phase, 0);
        for (int i = 0; i < SOAK_SERVERS; i++) {
                atomic_store(&shm->ports[i], 0);
                srv[i] = spawn(rr_server, (void *) (intptr_t) i);
                while (srv[i] > 0 && atomic_load(&shm->ports[i]) == 0 && !failed())
                        sleep_ms(1);
        }
        for (unsigned i = 0; i < n && !failed(); i++)
                cl[i] = spawn(soak_client, (void *) (uintptr_t) i);
        t0 = now_ns();
        while (!failed() && now_ns() - t0 < (uint64_t) warm * 1000000000ull)
                sleep_ms(100);
        if (failed() || soak_quiet_point(1, (int) n, NULL, &a, "soak start (after the warm-up, all clients paused)") < 0)
                goto stop;
        tr0 = atomic_load(&shm->transfers);
        by0 = atomic_load(&shm->bytes);
        atomic_store(&shm->phase, 2);
        end = now_ns() + (uint64_t) (secs - warm) * 1000000000ull;
        for (uint64_t next = now_ns() + 10000000000ull; !failed() && now_ns() < end; sleep_ms(100))
                if (now_ns() >= next) {
                        next += 10000000000ull;
                        if (snap_take(&s) < 0)
                                goto stop;
                        fprintf(stderr, "# soak %.0f s: %" PRIu64 " transfers checked, ", (now_ns() - t0) / 1e9,
                                atomic_load(&shm->transfers));
                        snap_print("smcd", &s);
                }
        if (failed() || soak_quiet_point(3, (int) n, &a, &b, "soak end (all clients paused)") < 0)
                goto stop;
        fprintf(stderr,
                "# soak: %" PRIu64 " transfers (%" PRIu64 " MiB) checked in the measured %u s, %" PRIu64
                " SMC-D connections in all, 0 errors, slowest connect %.1f ms\n",
                atomic_load(&shm->transfers) - tr0, (atomic_load(&shm->bytes) - by0) / MiB, secs - warm,
                atomic_load(&shm->conns_smcd), atomic_load(&shm->lat_max_ns) / 1e6);
        fprintf(stderr,
                "# soak growth start -> end: fds %" PRId64 " -> %" PRId64 " (pool buffers %" PRId64 " -> %" PRId64
                "), VmRSS %" PRId64 " -> %" PRId64 " KiB, RssAnon %" PRId64 " -> %" PRId64 " KiB, pool bytes %" PRId64
                " -> %" PRId64 " KiB\n",
                a.fds, b.fds, pool_bufs(&a), pool_bufs(&b), a.rss_kb, b.rss_kb, a.anon_kb, b.anon_kb,
                a.bytes_total / 1024, b.bytes_total / 1024);
        /* growth is the leak; fewer at the end means the start caught one in passing
         * (seen once in CI: 13 -> 12 with 0 errors and the same total) */
        if (fd_excess(&b) > fd_excess(&a))
                r = FAIL("smcd's descriptors beyond its pool buffers grew: %" PRId64 " -> %" PRId64, fd_excess(&a), fd_excess(&b));
        /* heap: a small tolerance for allocator slack (hash tables sized by the peak);
         * not under ASan, whose quarantine holds freed memory by design (reported only) */
        else if (!SANITIZED && b.anon_kb > a.anon_kb + 1024 + a.anon_kb / 10)
                r = FAIL("smcd's RssAnon grew %" PRId64 " -> %" PRId64 " KiB", a.anon_kb, b.anon_kb);
        /* the pool keeps free buffers for the peak demand (buffers in use plus those
         * released but not yet cleared), and gives back what stays unused for
         * --pool-idle-sec: at most 2 buffers per connection, and twice that for the
         * ones waiting to be cleared. Connections at once: one per client, plus up to
         * 1/8 more whose server end has not closed yet when the client's next one
         * starts (66 of 64 seen in a sample); under a sanitizer, whose slower servers
         * close later, up to 1/4 more (73 of 64 seen in CI, 2026-12-03: 292 buffers,
         * the same at 16 s, 25 s and the end, so a peak, not a leak) */
        else if (pool_bufs(&b) > pool_bufs(&a) &&
                 pool_bufs(&b) > 4 * (int64_t) (n + (SANITIZED ? n / 4 : n / 8)))
                r = FAIL("smcd's pool grew: %" PRId64 " -> %" PRId64 " buffers (bound %u)", pool_bufs(&a), pool_bufs(&b),
                         4 * (n + (SANITIZED ? n / 4 : n / 8)));
        else if (b.aborted != a.aborted || b.hs_errors != 0 || b.fallbacks != 0)
                r = FAIL("aborted %" PRId64 " -> %" PRId64 ", handshake errors %" PRId64 ", fallbacks %" PRId64,
                         a.aborted, b.aborted, b.hs_errors, b.fallbacks);
stop:
        atomic_store(&shm->phase, 4);
        for (unsigned i = 0; i < n; i++)
                if (cl[i] > 0)
                        r |= reap(cl[i], 60000, "soak client");
        atomic_store(&shm->go, -1);
        for (int i = 0; i < SOAK_SERVERS; i++)
                if (srv[i] > 0)
                        r |= reap(srv[i], 60000, "soak server");
        free(cl);
        if (r || failed())
                return -1;
        return wait_quiet(0, NULL, 10000, "after the soak", NULL);
}

/* ====================== runner ====================== */

struct tcase {
        const char *name;
        int (*fn)(void);
        const char *smcd_args[6];
        bool smcd_killed;
        bool explicit_only;
        int timeout_s;
};

static const struct tcase cases[] = {
        { "client-kill", case_client_kill, { NULL }, false, false, 60 },
        { "reader-stop-kill", case_reader_stop_kill, { NULL }, false, false, 60 },
        { "smcd-kill", case_smcd_kill, { NULL }, true, false, 120 },
        { "ctl-shutdown-1000", case_ctl_shutdown, { NULL }, false, false, 240 },
        { "no-read-flood", case_no_read_flood, { NULL }, false, false, 60 },
        { "no-read-connects", case_no_read_connects, { NULL }, false, false, 60 },
        { "buf-pressure-churn", case_buf_pressure, { "--max-buf-per-uid", "384K", NULL }, false, false, 90 },
        { "soak", case_soak, { NULL }, false, true, 0 },
};

static int run_case(const struct tcase *tc) {
        struct snap base;
        pid_t pid;
        int st, r;

        memset(shm, 0, sizeof(*shm));
        if (smcd_up(tc->smcd_args) < 0)
                return -1;
        if (snap_baseline(&base) < 0)
                goto out;
        fflush(NULL);
        pid = fork();
        if (pid < 0) {
                FAIL("fork: %m");
                goto out;
        }
        if (pid == 0) {
                setpgid(0, 0);
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                signal(SIGPIPE, SIG_IGN);
                r = tc->fn();
                _exit(r == 0 && !failed() ? 0 : 1);
        }
        setpgid(pid, pid);
        {
                int timeout = tc->timeout_s ? tc->timeout_s : (int) env_uint("SMCD_SOAK_SECONDS", SOAK_DEFAULT_SECONDS) + 180;
                uint64_t deadline = now_ns() + (uint64_t) timeout * 1000000000ull;

                while (waitpid(pid, &st, WNOHANG) != pid) {
                        if (now_ns() > deadline) {
                                kill(-pid, SIGKILL);
                                waitpid(pid, &st, 0);
                                FAIL("case timed out after %d s", timeout);
                                break;
                        }
                        sleep_ms(5);
                }
        }
        kill(-pid, SIGKILL);
        while (waitpid(-pid, &st, 0) > 0 || errno == EINTR)
                ;
        if (!failed() && !tc->smcd_killed)
                wait_quiet(base.clients, &base, 5000, "smcd after the case", NULL);
out:
        if (tc->smcd_killed) {
                smcd_stop(&S, 0, NULL);
        } else if (smcd_reap(&S, false)) {
                FAIL("smcd died during the case (status %#x)", S.status);
        } else {
                r = smcd_stop(&S, 5000, &st);
                if (r < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
                        FAIL("smcd on SIGTERM: %s status %#x", r < 0 ? "no exit within 5 s," : "", st);
        }
        if (failed())
                smcd_log_dump(&S, stderr, 30);
        smcd_instance_cleanup(&S);
        return failed() ? -1 : 0;
}

int main(int argc, char *argv[]) {
        size_t n = sizeof(cases) / sizeof(cases[0]);
        bool run[sizeof(cases) / sizeof(cases[0])];
        int planned = 0, nfail = 0, num = 0;
        struct rlimit rl;

        if (argc < 2 || access(argv[1], X_OK) < 0) {
                fprintf(stderr, "usage: %s SMCD_BINARY [CASE...]\ncases:", argv[0]);
                for (size_t i = 0; i < n; i++)
                        fprintf(stderr, " %s", cases[i].name);
                fprintf(stderr, "\n");
                return 2;
        }
        smcd_path = argv[1];
        for (size_t i = 0; i < n; i++) {
                run[i] = argc == 2 && !cases[i].explicit_only;
                for (int a = 2; a < argc; a++)
                        if (strcmp(argv[a], cases[i].name) == 0)
                                run[i] = true;
                planned += run[i];
        }
        if (!planned) {
                fprintf(stderr, "no such case\n");
                return 2;
        }
        shm = mmap(NULL, sizeof(*shm), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (shm == MAP_FAILED)
                return 2;
        setenv("UBSAN_OPTIONS", "halt_on_error=1:print_stacktrace=1", 0);
        /* 1000 connections in one process */
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 16384) {
                rl.rlim_cur = rl.rlim_max < 16384 ? rl.rlim_max : 16384;
                setrlimit(RLIMIT_NOFILE, &rl);
        }
        prctl(PR_SET_CHILD_SUBREAPER, 1);
        signal(SIGPIPE, SIG_IGN);
        setvbuf(stdout, NULL, _IOLBF, 0);
        printf("1..%d\n", planned);
        for (size_t i = 0; i < n; i++) {
                uint64_t t0 = now_ns();

                if (!run[i])
                        continue;
                num++;
                if (run_case(&cases[i]) == 0)
                        printf("ok %d - %s (%.1f s)\n", num, cases[i].name, (now_ns() - t0) / 1e9);
                else {
                        printf("not ok %d - %s: %s\n", num, cases[i].name, shm->reason);
                        nfail++;
                }
        }
        return nfail ? 1 : 0;
}
