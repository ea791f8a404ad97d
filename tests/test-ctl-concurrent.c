/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * test-ctl-concurrent SMCD_PATH [CASE]: many threads on the one control connection of
 * a process (libsmcproto/ctl-client.c), the cause of the SMC_CLC_DECL_INTERR
 * fallbacks seen with concurrent connects (issue 4).
 *
 *  hello-race   (a fake smcd that answers HELLO after 300 ms) requests of other
 *               threads while the first thread's HELLO is under way wait for it and
 *               then reach smcd: a call, and a fire-and-forget CLOSE. (They used to
 *               fail at once with -EINVAL, never sent: ctl_version was still 0.)
 *  many-waiters (fake smcd) 600 ERROR answers nobody waits for (as smcd answers a
 *               CLOSE of an unknown id), then 300 threads wait at once; smcd answers
 *               them in reverse order, each with a memfd holding the reply's cookie:
 *               every thread gets its own reply and its own descriptor.
 *  first-connects (a real smcd) rounds of 48 threads that connect at once through
 *               the public API, each round on a new control connection: every
 *               connection is SMC-D (none falls back with SMC_CLC_DECL_INTERR).
 * TAP output; exit 0 when every case passed.
 */

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ctl-client.h"
#include "ctl-proto.h"
#include "helpers.h"
#include "smc-clc.h"
#include "smcproto.h"

static _Atomic int failures;
static int failures_seen;

#define CHECK(cond, ...)                                                                   \
        do {                                                                               \
                if (!(cond)) {                                                             \
                        atomic_fetch_add(&failures, 1);                                    \
                        fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);    \
                        fprintf(stderr, __VA_ARGS__);                                      \
                        fputc('\n', stderr);                                               \
                }                                                                          \
        } while (0)

static void step(const char *what) {
        int f = atomic_load(&failures);

        printf("%s - %s\n", f == failures_seen ? "ok" : "not ok", what);
        failures_seen = f;
        fflush(stdout);
}

/* ---- a fake smcd on a private runtime directory ---- */

struct fake {
        char dir[64];
        int lfd;
        pthread_t thread;
        unsigned hello_delay_ms;   /* before HELLO_REPLY */
        unsigned collect;          /* LISTENs to collect before answering them, reversed */
        _Atomic bool hello_seen;   /* HELLO received (its reply not sent yet) */
        _Atomic unsigned closes;   /* CLOSEs received */
        _Atomic unsigned requests; /* LISTENs and UNLISTENs received */
};

static int fake_reply_listen(int c, uint32_t seq) {
        union smc_ctl_msg r;
        uint64_t cookie = (uint64_t) seq * 7 + 1;
        int mfd = memfd_create("fake-smcd", MFD_CLOEXEC), k;

        if (mfd < 0 || pwrite(mfd, &cookie, sizeof(cookie), 0) != sizeof(cookie))
                return -errno;
        smc_ctl_init(&r, SMC_CTL_LISTEN_REPLY, seq);
        r.listen_reply.listener_id = cookie;
        /* (version 6: two fds, the channel's ends; the memfd stands for both) */
        k = smc_ctl_send(c, &r, (int[2]){ mfd, mfd }, 2, 0);
        close(mfd);
        return k;
}

static void *fake_run(void *arg) {
        struct fake *f = arg;
        uint32_t *pending = calloc(f->collect ? f->collect : 1, sizeof(uint32_t));
        unsigned npending = 0;
        int c = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC);

        if (c < 0 || !pending) {
                free(pending);
                return NULL;
        }
        for (;;) {
                union smc_ctl_msg m, r;
                int fds[SMC_CTL_MAX_FDS];
                int n = smc_ctl_recv(c, &m, fds, SMC_CTL_TO_DAEMON, 0);

                if (n < 0 && n != -EBADMSG && n != -EPROTONOSUPPORT && n != -EOPNOTSUPP && n != -EBADF)
                        break; /* EOF: the client dropped the connection */
                if (n < 0) {
                        smc_ctl_init(&r, SMC_CTL_ERROR, m.hdr.seq);
                        r.error.error = n;
                        (void) smc_ctl_send(c, &r, NULL, 0, 0);
                        continue;
                }
                for (int i = 0; i < n; i++)
                        close(fds[i]);
                switch (m.hdr.type) {
                case SMC_CTL_HELLO:
                        atomic_store(&f->hello_seen, true);
                        sleep_ms(f->hello_delay_ms);
                        (void) smc_ctl_init_v(&r, SMC_CTL_HELLO_REPLY, m.hdr.seq, SMC_CTL_VERSION);
                        r.hello_reply.version = SMC_CTL_VERSION;
                        r.hello_reply.client_id = 1;
                        (void) smc_ctl_send(c, &r, NULL, 0, 0);
                        break;
                case SMC_CTL_CLOSE:
                        /* as smcd answers a CLOSE of an id it does not know */
                        atomic_fetch_add(&f->closes, 1);
                        smc_ctl_init(&r, SMC_CTL_ERROR, m.hdr.seq);
                        r.error.error = -ENOENT;
                        snprintf(r.error.msg, sizeof(r.error.msg), "no connection");
                        (void) smc_ctl_send(c, &r, NULL, 0, 0);
                        break;
                case SMC_CTL_UNLISTEN:
                        atomic_fetch_add(&f->requests, 1);
                        smc_ctl_init(&r, SMC_CTL_OK, m.hdr.seq);
                        (void) smc_ctl_send(c, &r, NULL, 0, 0);
                        break;
                case SMC_CTL_LISTEN:
                        atomic_fetch_add(&f->requests, 1);
                        if (!f->collect) {
                                (void) fake_reply_listen(c, m.hdr.seq);
                                break;
                        }
                        pending[npending++] = m.hdr.seq;
                        if (npending == f->collect) {
                                while (npending > 0)
                                        (void) fake_reply_listen(c, pending[--npending]);
                        }
                        break;
                default:
                        break;
                }
        }
        close(c);
        free(pending);
        return NULL;
}

static int fake_start(struct fake *f) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        char tmpl[] = "/tmp/smcd-ctlconc.XXXXXX";

        if (!mkdtemp(tmpl))
                return -errno;
        snprintf(f->dir, sizeof(f->dir), "%s", tmpl);
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", f->dir, SMC_CTL_SOCKET_NAME);
        f->lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (f->lfd < 0 || bind(f->lfd, (struct sockaddr *) &sa, sizeof(sa)) < 0 || listen(f->lfd, 4) < 0)
                return -errno;
        setenv(SMC_CTL_RUNDIR_ENV, f->dir, 1);
        return -pthread_create(&f->thread, NULL, fake_run, f);
}

static void fake_stop(struct fake *f) {
        char p[128];

        smc_ctl_client_reset(); /* EOF: the fake's thread ends */
        pthread_join(f->thread, NULL);
        close(f->lfd);
        snprintf(p, sizeof(p), "%s/%s", f->dir, SMC_CTL_SOCKET_NAME);
        unlink(p);
        rmdir(f->dir);
        unsetenv(SMC_CTL_RUNDIR_ENV);
}

/* LISTEN for 127.0.0.1:@port with a TCP socket (the fake looks at nothing). Returns
 * the reply's fd count or -errno; *ret_seq the request's seq. */
static int call_listen(uint16_t port, union smc_ctl_msg *reply, int *fds, uint32_t *ret_seq) {
        struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(port),
                                   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        union smc_ctl_msg m;
        int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), n;

        if (s < 0)
                return -errno;
        smc_ctl_init(&m, SMC_CTL_LISTEN, 0);
        (void) smc_ctl_addr_from_sockaddr(&m.listen.addr, (struct sockaddr *) &sin, sizeof(sin));
        n = smc_ctl_client_call(&m, &s, 1, reply, fds);
        *ret_seq = m.hdr.seq;
        close(s);
        return n;
}

/* ---- hello-race ---- */

struct race_arg {
        int r;
        union smc_ctl_msg reply;
        uint32_t seq;
};

static void *race_first(void *arg) {
        struct race_arg *a = arg;
        int fds[SMC_CTL_MAX_FDS];

        a->r = call_listen(1, &a->reply, fds, &a->seq);
        for (int i = 0; i < a->r; i++)
                close(fds[i]);
        return NULL;
}

static void case_hello_race(void) {
        struct fake f = { .hello_delay_ms = 300 };
        struct race_arg first = {}, second = {};
        union smc_ctl_msg m;
        int fds[SMC_CTL_MAX_FDS];
        pthread_t t;
        uint64_t t0;
        int r;

        smc_ctl_client_reset();
        r = fake_start(&f);
        CHECK(r == 0, "fake smcd: %s", strerror(-r));
        if (r < 0)
                return;
        pthread_create(&t, NULL, race_first, &first);
        /* the first thread's HELLO is under way (its answer 300 ms away) */
        t0 = now_ns();
        while (!atomic_load(&f.hello_seen) && now_ns() - t0 < 5000000000ull)
                sleep_ms(1);
        CHECK(atomic_load(&f.hello_seen), "no HELLO");

        smc_ctl_init(&m, SMC_CTL_CLOSE, 0);
        m.close.conn_id = 42;
        r = smc_ctl_client_send(&m);
        CHECK(r == 0, "CLOSE while HELLO is under way: %s", strerror(-r));
        race_first(&second);
        CHECK(second.r == 2 && second.reply.hdr.type == SMC_CTL_LISTEN_REPLY &&
                      second.reply.listen_reply.listener_id == (uint64_t) second.seq * 7 + 1,
              "LISTEN while HELLO is under way: %d (%s), reply type %u", second.r,
              second.r < 0 ? strerror(-second.r) : "ok", second.reply.hdr.type);
        pthread_join(t, NULL);
        CHECK(first.r == 2 && first.reply.hdr.type == SMC_CTL_LISTEN_REPLY &&
                      first.reply.listen_reply.listener_id == (uint64_t) first.seq * 7 + 1,
              "the first LISTEN: %d (%s), reply type %u", first.r, first.r < 0 ? strerror(-first.r) : "ok",
              first.reply.hdr.type);
        /* the fake answered the CLOSE with an ERROR nobody waits for: harmless */
        r = call_listen(2, &second.reply, fds, &second.seq);
        CHECK(r == 2 && second.reply.listen_reply.listener_id == (uint64_t) second.seq * 7 + 1,
              "a LISTEN after the CLOSE's ERROR: %d", r);
        for (int i = 0; i < r; i++)
                close(fds[i]);
        fake_stop(&f);
        CHECK(atomic_load(&f.closes) == 1, "the fake saw %u CLOSEs, want 1", atomic_load(&f.closes));
        CHECK(atomic_load(&f.requests) == 3, "the fake saw %u LISTENs, want 3", atomic_load(&f.requests));
        step("hello-race: requests during another thread's HELLO wait for it and reach smcd");
}

/* ---- many-waiters ---- */

#define WAITERS 300
#define STALE 600

static pthread_barrier_t waiters_barrier;

static void *waiter(void *arg) {
        struct race_arg *a = arg;
        int fds[SMC_CTL_MAX_FDS];
        uint64_t got = 0;

        pthread_barrier_wait(&waiters_barrier);
        a->r = call_listen(3, &a->reply, fds, &a->seq);
        if (a->r == 2) {
                if (pread(fds[0], &got, sizeof(got), 0) != sizeof(got))
                        got = 0;
                if (got != a->reply.listen_reply.listener_id)
                        a->r = -EBADF; /* another reply's descriptor */
        }
        for (int i = 0; i < a->r; i++)
                close(fds[i]);
        return NULL;
}

static void case_many_waiters(void) {
        struct fake f = { .collect = WAITERS };
        struct race_arg *a = calloc(WAITERS, sizeof(*a));
        pthread_t *t = calloc(WAITERS, sizeof(*t));
        union smc_ctl_msg m, reply;
        unsigned bad = 0, created = 0;
        int r, fds[SMC_CTL_MAX_FDS];

        if (!a || !t) {
                CHECK(false, "out of memory");
                goto out;
        }
        smc_ctl_client_reset();
        r = fake_start(&f);
        CHECK(r == 0, "fake smcd: %s", strerror(-r));
        if (r < 0)
                goto out;
        /* STALE answers nobody waits for, read by the calls between the batches (a
         * socket holds a few hundred small messages at most) */
        for (unsigned i = 0; i <= STALE; i++) {
                if (i % 100 == 0) {
                        smc_ctl_init(&m, SMC_CTL_UNLISTEN, 0);
                        m.unlisten.listener_id = 1;
                        r = smc_ctl_client_call(&m, NULL, 0, &reply, fds);
                        CHECK(r == 0 && reply.hdr.type == SMC_CTL_OK, "UNLISTEN: %d, reply type %u", r,
                              reply.hdr.type);
                }
                if (i == STALE)
                        break;
                smc_ctl_init(&m, SMC_CTL_CLOSE, 0);
                m.close.conn_id = i + 1;
                r = smc_ctl_client_send(&m);
                CHECK(r == 0, "CLOSE %u: %s", i, strerror(-r));
        }
        pthread_barrier_init(&waiters_barrier, NULL, WAITERS);
        for (unsigned i = 0; i < WAITERS; i++) {
                if (pthread_create(&t[i], NULL, waiter, &a[i]) != 0)
                        break;
                created++;
        }
        CHECK(created == WAITERS, "only %u threads", created);
        if (created < WAITERS) {
                /* cannot go on: the others wait at the barrier forever */
                _exit(1);
        }
        for (unsigned i = 0; i < created; i++)
                pthread_join(t[i], NULL);
        pthread_barrier_destroy(&waiters_barrier);
        for (unsigned i = 0; i < created; i++)
                if (a[i].r != 2 || a[i].reply.hdr.type != SMC_CTL_LISTEN_REPLY ||
                    a[i].reply.listen_reply.listener_id != (uint64_t) a[i].seq * 7 + 1) {
                        if (bad++ < 5)
                                CHECK(false, "waiter %u (seq %u): %d (%s), reply type %u id %llu", i, a[i].seq,
                                      a[i].r, a[i].r < 0 ? strerror(-a[i].r) : "ok", a[i].reply.hdr.type,
                                      (unsigned long long) a[i].reply.listen_reply.listener_id);
                }
        CHECK(bad == 0, "%u of %u waiters without their own reply", bad, created);
        fake_stop(&f);
        step("many-waiters: 300 concurrent waiters after 600 stale answers each get their own reply and fd");
out:
        free(a);
        free(t);
}

/* ---- first-connects (a real smcd) ---- */

#define THREADS 48
#define ROUNDS 12

static struct sockaddr_in target;
static pthread_barrier_t connect_barrier;

struct conn_res {
        int r, mode;
        uint32_t reason;
};

static void *connector(void *arg) {
        struct conn_res *res = arg;
        socklen_t l;
        int fd = smc_socket(AF_INET, SOCK_STREAM, 0);

        pthread_barrier_wait(&connect_barrier);
        res->r = fd >= 0 && smc_connect(fd, (struct sockaddr *) &target, sizeof(target)) == 0 ? 0 : -errno;
        l = sizeof(res->mode);
        (void) smc_getsockopt(fd, SOL_SMC, SMC_PROTO_MODE, &res->mode, &l);
        l = sizeof(res->reason);
        (void) smc_getsockopt(fd, SOL_SMC, SMC_PROTO_FALLBACK_REASON, &res->reason, &l);
        pthread_barrier_wait(&connect_barrier); /* all connected before any closes */
        smc_close(fd);
        return NULL;
}

/* The listener: its own process (its registration lives on its own control
 * connection, which the rounds must not reset). Writes the port to @wfd. */
static void serve(int wfd) {
        struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t sl = sizeof(sin);
        int l = smc_socket(AF_INET, SOCK_STREAM, 0);

        if (l < 0 || smc_bind(l, (struct sockaddr *) &sin, sizeof(sin)) < 0 || smc_listen(l, 1024) < 0 ||
            smc_getsockname(l, (struct sockaddr *) &sin, &sl) < 0)
                _exit(1);
        if (write(wfd, &sin.sin_port, sizeof(sin.sin_port)) != sizeof(sin.sin_port))
                _exit(1);
        close(wfd);
        for (;;) {
                int fd = smc_accept(l, NULL, NULL);

                if (fd >= 0)
                        smc_close(fd);
        }
}

static void case_first_connects(const char *smcd_path) {
        /* (short_conn_rate 0: 576 one-shot connections would be hinted to TCP) */
        const char *args[] = { "--no-bus", "--short-conn-rate=0", "--state-file", NULL, NULL };
        struct smcd_instance s;
        char state[PATH_MAX];
        struct conn_res res[THREADS];
        pthread_t t[THREADS];
        unsigned smcd = 0, total = 0, interr = 0;
        uint32_t other = 0;
        int p[2], r;
        pid_t srv;

        r = smcd_instance_init(&s);
        CHECK(r == 0, "runtime dir: %s", strerror(-r));
        if (r < 0)
                return;
        snprintf(state, sizeof(state), "%s/tunables.json", s.dir);
        args[3] = state;
        r = smcd_start(&s, smcd_path, args, 10000);
        CHECK(r == 0, "smcd: %s", strerror(-r));
        if (r < 0)
                goto out;
        setenv(SMC_CTL_RUNDIR_ENV, s.dir, 1);
        smc_ctl_client_reset();
        if (pipe2(p, O_CLOEXEC) < 0) {
                CHECK(false, "pipe: %m");
                goto out;
        }
        srv = fork();
        if (srv == 0) {
                close(p[0]);
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                serve(p[1]);
        }
        close(p[1]);
        target = (struct sockaddr_in) { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        r = srv > 0 && read(p[0], &target.sin_port, sizeof(target.sin_port)) == sizeof(target.sin_port);
        close(p[0]);
        CHECK(r, "the listener did not start");
        if (!r)
                goto kill;
        for (unsigned round = 0; round < ROUNDS; round++) {
                smc_ctl_client_reset(); /* every round's first requests open the connection */
                memset(res, 0, sizeof(res));
                pthread_barrier_init(&connect_barrier, NULL, THREADS);
                for (unsigned i = 0; i < THREADS; i++)
                        pthread_create(&t[i], NULL, connector, &res[i]);
                for (unsigned i = 0; i < THREADS; i++)
                        pthread_join(t[i], NULL);
                pthread_barrier_destroy(&connect_barrier);
                for (unsigned i = 0; i < THREADS; i++) {
                        total++;
                        if (res[i].r == 0 && res[i].mode == SMC_PROTO_MODE_SMCD)
                                smcd++;
                        else if (res[i].reason == SMC_CLC_DECL_INTERR)
                                interr++;
                        else
                                other = res[i].r ? (uint32_t) -res[i].r : res[i].reason;
                }
        }
        CHECK(smcd == total, "%u of %u connections SMC-D, %u fell back with SMC_CLC_DECL_INTERR, other: 0x%08x",
              smcd, total, interr, other);
kill:
        if (srv > 0) {
                kill(srv, SIGKILL);
                waitpid(srv, NULL, 0);
        }
out:
        unsetenv(SMC_CTL_RUNDIR_ENV);
        smc_ctl_client_reset();
        r = smcd_stop(&s, 5000, NULL);
        CHECK(r == 0, "smcd did not stop");
        if (atomic_load(&failures) != failures_seen)
                smcd_log_dump(&s, stderr, 20);
        smcd_instance_cleanup(&s);
        step("first-connects: 12 rounds of 48 threads connecting at once on a new control connection: all SMC-D");
}

int main(int argc, char **argv) {
        struct rlimit rl;
        const char *only = argc > 2 ? argv[2] : NULL;

        if (argc < 2) {
                fprintf(stderr, "usage: test-ctl-concurrent SMCD_PATH [hello-race|many-waiters|first-connects]\n");
                return 2;
        }
        signal(SIGPIPE, SIG_IGN);
        /* 300 waiters hold a socket and a memfd each */
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 4096) {
                rl.rlim_cur = rl.rlim_max < 4096 ? rl.rlim_max : 4096;
                (void) setrlimit(RLIMIT_NOFILE, &rl);
        }
        if (!only || !strcmp(only, "hello-race"))
                case_hello_race();
        if (!only || !strcmp(only, "many-waiters"))
                case_many_waiters();
        if (!only || !strcmp(only, "first-connects"))
                case_first_connects(argv[1]);
        printf("# %d failed checks\n", atomic_load(&failures));
        return atomic_load(&failures) ? 1 : 0;
}
