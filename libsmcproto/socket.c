/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libsmcproto: the public client API (smcproto.h).
 *
 * Every AF_INET/AF_INET6 SOCK_STREAM socket made by smc_socket() or smc_accept*()
 * has a struct smc_sock in a two-level table indexed by fd (lock-free lookups, no
 * realloc; a global mutex only for insert/remove). The fd the application holds
 * never changes number, but what it refers to does:
 *
 *   state        app fd is             hidden descriptors
 *   NEW, BOUND   the TCP socket T      -
 *   LISTEN_TCP   T (smcd unavailable)  -
 *   LISTEN_SMC   an epoll fd E         T (O_NONBLOCK), accept channel C; E watches both
 *   TCP          T (fallback, or a TCP connection accepted from T)
 *   SMCD         X, our end of the connection's socketpair (see dmb.h)
 *                                      T on the connecting side (keeps its port)
 *   CONNECTING   T (nonblocking connect  a copy of T, its handshake's (connect_async)
 *                over CLC under way)
 *
 * Connect asks smcd (ctl-client.c); on an SMC-D reply the buffers are mapped
 * (kept mapped in a process-wide cache by buffer id, so a reused buffer costs no
 * mmap and no page fault), T is moved to a hidden descriptor and X is dup3()ed onto
 * the app's fd number. Anything else falls back to plain TCP on T and records the
 * SMC_CLC_DECL_* reason; if smcd was asked, it is told of the TCP connection once its
 * connect is under way (a one-way FALLBACK notice, never waited for), and so of every
 * plain TCP connection an SMC listener accepts, so that smcctl lists them.
 *
 * Environment (read once, at the first socket):
 *   SMCPROTO_DISABLE=1   never use SMC: listeners stay plain TCP, connections fall
 *                        back with reason SMC_CLC_DECL_NOSMCDDEV.
 *   SMCPROTO_HINTS=0     ignore smcd's connection hints (smc-hints.h): connections
 *                        to a destination hinted to TCP ask smcd as any other
 *                        (SMC-D however short they are).
 *   SMC_BUSY_POLL_US=N   microseconds a blocking send/recv spins on the ring before
 *                        it sleeps (0 = never spin). Unset: smcd's busy_poll tunable,
 *                        handed over with each connection (default 50; 50 as well
 *                        with an smcd of protocol version 1).
 *   SMC_AUTOCORK=N       bytes: a corked (TCP_CORK / MSG_MORE) batch is published to
 *                        the peer once it reaches N bytes. Unset or 0: smcd's
 *                        autocork_size tunable, capped at half the peer's buffer
 *                        (default: the smaller of 64 KiB and half the peer's buffer).
 *                        The variables are per-process overrides: they win over smcd.
 *   SMCD_RUNTIME_DIR     where smcd.sock is (ctl-proto.h).
 *   SMC_DEBUG=1          one line to stderr at every fallback or error decision of
 *                        connect and accept (debug.h). Off by default.
 *
 * Struct lifetime: a closed socket's struct smc_sock goes to a FIFO free list and is
 * reused only after SOCK_FREE_DELAY other closes (type-stable memory): a thread
 * that still uses a descriptor another thread closed (an application bug, as with
 * a reused kernel fd number) never touches freed memory. DMB mappings are never
 * unmapped.
 *
 * Lock order: sock->lock, then the ctl-client lock or buf_lock or table_lock.
 */

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <linux/sockios.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "ctl-client.h"
#include "ctl-proto.h"
#include "debug.h"
#include "dmb.h"
#include "ring.h"
#include "../smcd/smcr-wire.h"
#include "smc-clc.h"
#include "smcproto.h"
#include "socket-internal.h"
#include "sys.h"

#define SMC_PUBLIC __attribute__((visibility("default")))

/* ------------------------------------------------------------------------- */
/* Tunables */

static pthread_once_t env_once = PTHREAD_ONCE_INIT;
/* incremented in parent and child at every fork(): a listener registered before a
 * fork may be shared with another process */
static _Atomic unsigned fork_gen;
/* For REREG_DONE (ctl-proto.h): this process listened on an SMC listener at some time
 * (listener_ever), and forked since (listener_forked: a child may hold server ends set
 * up through it); it inherited sockets over exec (inherited_any: their roles are not
 * known, they are not re-registered). */
static _Atomic bool listener_ever, listener_forked, inherited_any;

static void atfork_count(void) {
        atomic_fetch_add(&fork_gen, 1);
        if (atomic_load(&listener_ever))
                atomic_store(&listener_forked, true);
}
static bool env_disable;
static bool env_no_hints; /* SMCPROTO_HINTS=0 */
/* smc_set_tcp_only(): 0, or the reason every new connection and listener is TCP */
static _Atomic uint32_t tcp_only_reason;
/* The default when neither the environment nor smcd (protocol version 1) says. */
#define DEFAULT_BUSY_POLL_NS 50000u /* measured: see README, Benchmarks */
static bool env_busy_poll_set; /* SMC_BUSY_POLL_US given: it wins over smcd */
static uint32_t env_busy_poll_ns;
static uint32_t env_autocork; /* SMC_AUTOCORK; 0 = not given: smcd's or the ring default */

static bool parse_u32(const char *s, uint32_t *ret) {
        char *end;
        unsigned long v;

        if (!s || !*s)
                return false;
        errno = 0;
        v = strtoul(s, &end, 10);
        if (errno || *end || v > UINT32_MAX)
                return false;
        *ret = (uint32_t) v;
        return true;
}

bool smcproto_debug_on;

void smcproto_debug_log(const char *fmt, ...) {
        char line[512];
        struct timespec ts;
        va_list ap;
        int saved = errno, n, k;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        n = snprintf(line, sizeof(line), "libsmcproto[%d.%ld] %llu.%03ld: ", (int) getpid(), (long) smc_syscall(SYS_gettid),
                     (unsigned long long) ts.tv_sec, ts.tv_nsec / 1000000L);
        if (n < 0 || (size_t) n >= sizeof(line))
                n = 0;
        errno = saved; /* for %m */
        va_start(ap, fmt);
        k = vsnprintf(line + n, sizeof(line) - (size_t) n - 1, fmt, ap);
        va_end(ap);
        if (k > 0)
                n += (size_t) k < sizeof(line) - (size_t) n - 1 ? k : (int) (sizeof(line) - (size_t) n - 2);
        line[n++] = '\n';
        (void) sys_write(STDERR_FILENO, line, (size_t) n);
        errno = saved;
}

static void ew_atfork_prepare(void);
static void ew_atfork_kid(void);
static void ew_atfork_kid_child(void);
static void ew_atfork_parent(void);
static void ew_atfork_child(void);
static void lshare_atfork_prepare(void);
static void cwait_atfork_prepare(void);
static void cwait_atfork_parent(void);
static void cwait_atfork_child(void);
static void lshare_atfork_release(void);
static void table_atfork_prepare(void);
static void table_atfork_parent(void);
static void table_atfork_child(void);

static void env_init(void) {
        const char *e;
        uint32_t v;

        /* first: its prepare runs last, after the others have taken their locks (a
         * thread holding cwait_lock takes no other lock) */
        pthread_atfork(cwait_atfork_prepare, cwait_atfork_parent, cwait_atfork_child);
        /* next: its prepare runs next to last, its child handler early (before those
         * that take socket locks in the child) */
        pthread_atfork(table_atfork_prepare, table_atfork_parent, table_atfork_child);
        pthread_atfork(ew_atfork_prepare, ew_atfork_parent, ew_atfork_child);
        pthread_atfork(NULL, atfork_count, atfork_count);
        pthread_atfork(lshare_atfork_prepare, lshare_atfork_release, lshare_atfork_release);
        pthread_atfork(NULL, ew_atfork_kid, ew_atfork_kid_child); /* (after the count) */
        e = getenv("SMC_DEBUG");
        smcproto_debug_on = e && e[0] && strcmp(e, "0") != 0;
        e = getenv("SMCPROTO_DISABLE");
        env_disable = e && e[0] && strcmp(e, "0") != 0;
        e = getenv("SMCPROTO_HINTS");
        env_no_hints = e && strcmp(e, "0") == 0;
        if (parse_u32(getenv("SMC_BUSY_POLL_US"), &v)) {
                env_busy_poll_ns = v > 1000000 ? 1000000000u : v * 1000u;
                env_busy_poll_set = true;
        }
        if (parse_u32(getenv("SMC_AUTOCORK"), &v))
                env_autocork = v;
}

static void env_load(void) {
        pthread_once(&env_once, env_init);
}

/* ------------------------------------------------------------------------- */
/* Per-socket state */

enum sock_state {
        SOCK_NEW,        /* fd is T, not bound */
        SOCK_BOUND,      /* fd is T, bound (by the app, or by us before asking smcd) */
        SOCK_LISTEN_TCP, /* fd is T, a plain TCP listener */
        SOCK_LISTEN_SMC, /* fd is the epoll fd E; hidden T and channel C */
        SOCK_TCP,        /* fd is T: TCP connection (fallback or accepted from T) */
        SOCK_SMCD,       /* fd is X: SMC-D connection */
        SOCK_CONNECTING, /* fd is T: a nonblocking connect over CLC (SMC-R, SMC-D between
                          * namespaces) under way in a thread of its own: TCP's
                          * handshake, then smcd's (connect_async_main()) */
};

/* One option set on a socket that may become a listener, to be inherited by the SMC
 * connections it accepts (as the kernel's accepted TCP socket inherits its
 * listener's): opt_record(), opt_inherit(). */
#define OPT_INHERIT_MAX 16
#define OPT_VAL_MAX 16 /* bytes: an int, struct linger, struct timeval, a TCP_CONGESTION name */
struct opt_rec {
        int level, name;
        socklen_t len;
        uint8_t val[OPT_VAL_MAX];
};
struct smc_sock;
static void opt_inherit(struct smc_sock *s, struct smc_sock *l);
static int optsock_make(struct smc_sock *s);
static void opt_capture(struct smc_sock *s, int t);

#define LISTEN_XREG_MAX 8
#define PREREG_MAX 4

/* a listener's holders across fork() (listen_sole(); "listeners shared by fork()") */
struct listen_share {
        _Atomic int holders;
};
#define LSHARE_TAINTED (1 << 28) /* (holders never back at 1: lshare_taint) */

struct smc_sock {
        pthread_mutex_t lock; /* state changes: connect, listen, close, options */
        int fd;
        int family;
        _Atomic int state;   /* enum sock_state; read lock-free by data calls */
        _Atomic bool nonblock;
        _Atomic bool closing; /* smc_close() began: data calls racing it wait for it to
                               * end (data_sock()), else X would hand them doorbell
                               * bytes until it is closed */
        bool connect_report; /* nonblocking SMC-D connect said EINPROGRESS: next connect returns 0 */
        /* CONNECTING: TCP's handshake is done and smcd's runs on T (no call touches
         * T's stream: a nonblocking one answers, a blocking one waits for the end,
         * connect_settle()) */
        _Atomic bool connect_clc;
        _Atomic bool connect_cancel; /* close, shutdown: the connect ends as TCP, unused */
        int connect_shut; /* CONNECTING: shutdown()s made past TCP's handshake, for
                           * the connection (1 SHUT_RD, 2 SHUT_WR: how + 1 bits) */
        int connect_err; /* positive errno: the SMC handshake broke after TCP's (the
                          * stream is unusable): the next SO_ERROR or connect says it */
        int8_t connect_prev; /* SOCK_TCP by a connect's fallback: the state before + 1, for
                              * another try when that connect failed (0: not so) */
        bool nodelay;
        bool rcvtimeo_set;       /* the app set SO_RCVTIMEO: X must carry it too */
        _Atomic signed char inq; /* TCP_INQ on (1) or off (0) on an SMC connection, as
                                  * the socket holding its options has it; -1: not
                                  * known yet, asked there at the first receive with
                                  * control room (recv_put_inq()) */
        int sndbuf, rcvbuf;      /* set by the app (bytes), 0 = not set */
        uint32_t fallback_reason;
        int hidden;  /* T, moved away (LISTEN_SMC, SMCD connect side), else -1 */
        int optsock; /* lazily made TCP socket holding options (SMCD accept side), else -1 */
        /* options of the socket before it is connected or while it listens, for
         * what SMC-D needs later (opt_inherit(), tcp_mss()) */
        bool cork;      /* TCP_CORK on (carried into the ring at connect and accept) */
        bool linger_reset; /* SO_LINGER on with l_linger 0: the last close resets, as
                            * TCP's (inherited by accepted sockets) */
        int user_mss;   /* TCP_MAXSEG set, 0 = none */
        struct opt_rec inh[OPT_INHERIT_MAX]; /* options an accepted socket inherits */
        unsigned n_inh;

        /* LISTEN_SMC */
        int chan; /* accept channel C, -1 once it hit EOF */
        int dchan; /* a copy of smcd's end D of C (ctl version 6), never read or
                    * written: C then outlives smcd, and a restarted one is given both
                    * (listen_revive()); -1: none (an older smcd, or inherited over exec) */
        uint64_t revive_ms[2]; /* coarse_ms() of the last look at smcd's instance after an
                                * accept from the channel [0] or of TCP [1] (listen_revive) */
        bool revived;       /* registered again over its channel: it may still hold an
                             * earlier smcd's NEW_CONNs */
        uint32_t revive_refused; /* the smcd instance that refused that (older than
                                  * version 6, a policy rule): not asked again */
        uint32_t revive_fail_inst;  /* the instance that did not answer it in time ... */
        uint64_t revive_retry_ms;   /* ... asked again from then on (coarse_ms()) */
        unsigned revive_backoff_ms; /* the wait after the next such failure */
        uint64_t listener_id;
        struct smc_ctl_addr listen_addr; /* as bound at LISTEN (unmapped); family 0:
                                          * not known here (inherited over exec) */
        bool listen_smcr; /* smcd marked the listener for SMC-R: SMCR per accepted TCP */
        int syn_peek;     /* listen_smcr: 0 not yet tried, 1 TCP_SAVE_SYN is ours (a TCP
                           * connection whose SYN had no SMC option skips SMCR), -1 not
                           * used (the program's own setting, or not settable); atomic */
        int app_save_syn; /* the program's own TCP_SAVE_SYN on the listener (it reads the
                           * SYNs itself: none read here) */
        bool smcr;        /* the connection is SMC-R (state SMCD, smcd on the data path) */
        pid_t listen_pid;          /* the process that registered it */
        unsigned listen_fork_gen;  /* fork_gen then */
        bool received;             /* an unconnected socket from another process: its
                                    * listen() joins a listener of it (F_JOIN) */
        unsigned deposits_out;     /* LISTEN_DEPOSITs made for sendmsg(2) calls that have
                                    * not returned yet (smc_fds_sent) */
        uid_t listen_euid;         /* its effective uid then: smcd's endpoints of the
                                    * connections it accepts have this uid */
        _Atomic unsigned accept_turn; /* bit 0: which queue accept() tries first (0: the
                                       * accept channel, 1: T); bits 1..: how many in a
                                       * row it served (smc_accept4) */
        int listen_backlog;        /* for a LISTEN again after smcd came back */
        uint32_t listen_instance;  /* the smcd (HELLO_REPLY.instance) it is registered
                                    * with: its connections' conn_instance */
        uint64_t relisten_ms;      /* the last such try (now_ms), 0 = none yet */
        bool listen_shut;          /* shutdown(SHUT_RD) or connect(AF_UNSPEC) stopped it
                                    * (listener_stop_smc()): not registered with smcd
                                    * again, unless listen(2) resumes it (smc_listen) */
        struct listen_share *lshare; /* how many processes hold it (listen_sole()); NULL:
                                      * not counted (inherited over exec, joined, a dup) */
        bool lshare_dropped;         /* counted out (its close); mapped until reused */
        struct smc_sock *lshare_next; /* on lshare_list, under lshare_lock */
        /* epoll sets the app added the listener to with EPOLLEXCLUSIVE: T and C sit in
         * them directly, with the app's events and data (smc_sock_epoll_ctl) */
        struct listen_xreg {
                int epfd;
                struct epoll_event ev;
                bool disarmed; /* prereg: an EPOLLONESHOT one that had fired */
        } xreg[LISTEN_XREG_MAX];
        unsigned n_xreg;
        /* epoll sets the app added the socket to before connect() (nginx adds its
         * upstream socket first): connect_smc() moves them from T onto X when X
         * takes the number (prereg_epoll_ctl, prereg_detach, prereg_attach) */
        struct listen_xreg prereg[PREREG_MAX];
        unsigned n_prereg;
        bool prereg_unknown; /* a set more, or a MOD/DEL of one not recorded: the
                              * connection stays TCP (its sets cannot all be moved) */

        /* SMCD */
        uint64_t conn_id;
        unsigned conn_fork_gen; /* fork_gen when the connection was set up: if it moved,
                                 * another process may hold the connection too */
        bool dup_shared;        /* dup(2)'d in this process: other descriptors here are
                                 * the same connection (copies_set_option()) */
        uid_t conn_euid;        /* the uid of smcd's endpoint (the CLOSE check) */
        uint32_t conn_instance; /* the smcd (HELLO_REPLY.instance) conn_id belongs to;
                                 * 0 = unknown (an smcd without REREG): never re-registered */
        int8_t conn_role;       /* SMC_CTL_ROLE_*, or -1 = unknown (adopted after an
                                 * exec): never re-registered */
        uint32_t y_instance;    /* the smcd that set the connection up (CONNECT_REPLY,
                                 * NEW_CONN) and so holds a copy of its Y; unlike
                                 * conn_instance not moved by REREG. 0 = not known */
        struct sockaddr_storage local, peer;
        socklen_t local_len, peer_len;
        struct smc_ring_ep ep;
        /* epoll watch: how many recorded epoll registrations the connection has
         * (ew_regs), and how many of them cannot be watched (ew_other: one-shot, or in
         * a set waited on by other means) */
        _Atomic unsigned ew_regs, ew_other;
        /* other processes than this one's forked children may hold it (dup, SCM_RIGHTS,
         * exec, spawn): never watched; a fork alone only while the child lives */
        bool ew_foreign;
        /* the set and member index of its first recorded registration (under that
         * set's lock and ew_global), so that epoll_ctl and close need no search */
        struct ew_set *ew_home;
        unsigned ew_home_idx;

        /* the queued push of bytes held back (hold_queue(), under hold_lock) */
        struct smc_sock *hold_prev, *hold_next;
        uint64_t hold_deadline_ns; /* CLOCK_MONOTONIC */
        bool hold_linked;
        _Atomic bool hold_ever; /* ever queued: its close takes hold_lock */

        struct smc_sock *free_next;
};

#define FD_CHUNK_BITS 10
#define FD_CHUNK (1u << FD_CHUNK_BITS)
#define FD_TOP 1024u
#define FD_MAX (FD_CHUNK * FD_TOP)
#define SMC_SMCR_TIMEOUT_MS 60000u /* the SMCR handshake: CLC + LLC round trips (slow VMs) */
#define SMC_CONNECT_TIMEOUT_MS 10000u /* CONNECT: smcd answers at once, unless very busy */
#define SOCK_FREE_DELAY 64

struct fd_chunk {
        _Atomic(struct smc_sock *) s[FD_CHUNK];
};

static _Atomic(struct fd_chunk *) fd_table[FD_TOP];
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
/* FIFO of freed structs, under table_lock */
static struct smc_sock *free_head, *free_tail;
static unsigned free_count;

static struct smc_sock *sock_lookup(int fd) {
        struct fd_chunk *c;

        if (fd < 0 || (unsigned) fd >= FD_MAX)
                return NULL;
        c = atomic_load_explicit(&fd_table[(unsigned) fd >> FD_CHUNK_BITS], memory_order_acquire);
        if (!c)
                return NULL;
        return atomic_load_explicit(&c->s[(unsigned) fd & (FD_CHUNK - 1)], memory_order_acquire);
}

/* The table's walk: the next socket at a number in [*pos, end), *pos moved past it;
 * NULL when none is left. Lock-free, as sock_lookup(): the entry may be removed (and
 * the struct reused: type-stable memory) while the caller looks at it. Usage:
 *   for (unsigned pos = 0; (s = table_next(&pos, FD_MAX));) { fd = pos - 1; ... } */
static struct smc_sock *table_next(unsigned *pos, unsigned end) {
        if (end > FD_MAX)
                end = FD_MAX;
        while (*pos < end) {
                struct fd_chunk *c = atomic_load_explicit(&fd_table[*pos >> FD_CHUNK_BITS], memory_order_acquire);
                struct smc_sock *s;

                if (!c) { /* a chunk never made: none of its numbers is ours */
                        *pos = (*pos | (FD_CHUNK - 1)) + 1;
                        continue;
                }
                s = atomic_load_explicit(&c->s[*pos & (FD_CHUNK - 1)], memory_order_acquire);
                (*pos)++;
                if (s)
                        return s;
        }
        return NULL;
}

static int sock_state(struct smc_sock *s) {
        return atomic_load_explicit(&s->state, memory_order_acquire);
}

static void sock_set_state(struct smc_sock *s, int st) {
        atomic_store_explicit(&s->state, st, memory_order_release);
}

static struct smc_sock *sock_alloc(int fd, int family, int state, bool nonblock) {
        struct smc_sock *s = NULL;

        pthread_mutex_lock(&table_lock);
        if (free_count > SOCK_FREE_DELAY) {
                s = free_head;
                free_head = s->free_next;
                if (!free_head)
                        free_tail = NULL;
                free_count--;
        }
        pthread_mutex_unlock(&table_lock);
        if (s && s->lshare) /* (kept past its close for racing readers: lshare_drop) */
                (void) munmap(s->lshare, sizeof(struct listen_share));
        if (!s) {
                s = malloc(sizeof(*s));
                if (!s)
                        return NULL;
        }
        memset(s, 0, sizeof(*s));
        pthread_mutex_init(&s->lock, NULL);
        s->fd = fd;
        s->family = family;
        atomic_init(&s->state, state);
        atomic_init(&s->nonblock, nonblock);
        s->hidden = -1;
        s->optsock = -1;
        atomic_init(&s->inq, -1);
        s->chan = -1;
        s->dchan = -1;
        return s;
}

/* Give @d the options the library keeps for @s (one socket: a dup(2) of it, or what
 * a disconnect leaves of it): TCP_NODELAY, TCP_CORK before a connection, SO_LINGER
 * {1, 0}, TCP_MAXSEG, the buffer sizes, SO_RCVTIMEO set, TCP_INQ, and those its accepted
 * connections inherit. Caller holds s->lock; @d is not in the table yet. */
static void sock_copy_options(struct smc_sock *d, const struct smc_sock *s) {
        d->nodelay = s->nodelay;
        d->cork = s->cork;
        d->linger_reset = s->linger_reset;
        d->user_mss = s->user_mss;
        d->sndbuf = s->sndbuf;
        d->rcvbuf = s->rcvbuf;
        d->rcvtimeo_set = s->rcvtimeo_set;
        atomic_store_explicit(&d->inq, atomic_load_explicit(&s->inq, memory_order_relaxed), memory_order_relaxed);
        d->n_inh = s->n_inh;
        memcpy(d->inh, s->inh, s->n_inh * sizeof(s->inh[0]));
}

static void hold_forget(struct smc_sock *s);

static void sock_release(struct smc_sock *s) {
        hold_forget(s);
        pthread_mutex_lock(&table_lock);
        s->free_next = NULL;
        if (free_tail)
                free_tail->free_next = s;
        else
                free_head = s;
        free_tail = s;
        free_count++;
        pthread_mutex_unlock(&table_lock);
}

/* ---- listeners shared by fork() ------------------------------------------------------
 * A listener registered before a fork() may be held by the child too, which could take
 * its connections, so the library treats it as shared (no LISTEN again after an smcd
 * restart, a poll before a blocking accept). A server that forks a child per
 * connection (PostgreSQL's postmaster) has its children close their copy at once:
 * each listener counts its holders in a page shared with the children (MAP_SHARED,
 * inherited by fork, gone at exec): one more for each fork (atfork prepare), one less
 * at each process's close of its copy. Back at 1, the listener is its process's
 * alone again. A child that exits or runs a program without closing it keeps the
 * count up for good (the safe side: shared, as before). */

static pthread_mutex_t lshare_lock = PTHREAD_MUTEX_INITIALIZER;
static struct smc_sock *lshare_list; /* this process's counted listeners */

/* Count @s (just registered by this process, alone): 0, or -ENOMEM (then it is
 * simply not counted: shared after the first fork, as without this). */
static int lshare_start(struct smc_sock *s) {
        void *p = mmap(NULL, sizeof(struct listen_share), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

        if (p == MAP_FAILED)
                return -ENOMEM;
        s->lshare = p;
        atomic_init(&s->lshare->holders, 1);
        pthread_mutex_lock(&lshare_lock);
        s->lshare_next = lshare_list;
        lshare_list = s;
        pthread_mutex_unlock(&lshare_lock);
        return 0;
}

/* This process lets go of its copy of @s (its close). The page stays mapped until
 * the struct is reused (sock_alloc, after SOCK_FREE_DELAY others): a thread still in
 * accept on the closed listener may read it. */
static void lshare_drop(struct smc_sock *s) {
        if (!s->lshare || s->lshare_dropped)
                return;
        pthread_mutex_lock(&lshare_lock);
        for (struct smc_sock **pp = &lshare_list; *pp; pp = &(*pp)->lshare_next)
                if (*pp == s) {
                        *pp = s->lshare_next;
                        break;
                }
        pthread_mutex_unlock(&lshare_lock);
        atomic_fetch_sub(&s->lshare->holders, 1);
        s->lshare_dropped = true;
        s->lshare_next = NULL;
}

/* @s's descriptor is duplicated, passed on or inherited over exec or spawn, by this
 * process: copies the count does not see. The listener stays shared for good, in
 * every process that counts it (as listen_fork_gen ~0u does for this process). */
static void lshare_taint(struct smc_sock *s) {
        if (s->lshare && !s->lshare_dropped)
                atomic_store(&s->lshare->holders, LSHARE_TAINTED);
}

static void lshare_taint_all(void) {
        pthread_mutex_lock(&lshare_lock);
        for (struct smc_sock *l = lshare_list; l; l = l->lshare_next)
                lshare_taint(l);
        pthread_mutex_unlock(&lshare_lock);
}

static void lshare_atfork_prepare(void) {
        pthread_mutex_lock(&lshare_lock);
        for (struct smc_sock *l = lshare_list; l; l = l->lshare_next)
                atomic_fetch_add(&l->lshare->holders, 1); /* (the child about to be) */
}

static void lshare_atfork_release(void) {
        pthread_mutex_unlock(&lshare_lock);
}

void smc_listen_fork_failed(void) {
        pthread_mutex_lock(&lshare_lock);
        for (struct smc_sock *l = lshare_list; l; l = l->lshare_next)
                atomic_fetch_sub(&l->lshare->holders, 1);
        pthread_mutex_unlock(&lshare_lock);
}

/* Does this process alone hold listener @l: no fork since it registered it, or every
 * child forked since closed its copy (and no dup, no passing, no exec or spawn: those
 * make listen_fork_gen ~0u here, and the count unreachable in every holder:
 * lshare_taint())? */
static bool listen_sole(const struct smc_sock *l) {
        if (l->listen_fork_gen == atomic_load_explicit(&fork_gen, memory_order_relaxed))
                return true;
        return l->listen_fork_gen != ~0u && l->lshare && !l->lshare_dropped &&
               atomic_load(&l->lshare->holders) == 1;
}

static void sock_teardown(struct smc_sock *s);
static int connect_cancel_locked(struct smc_sock *s, int how);
static void connect_settle(struct smc_sock *s);
static bool connect_tcp_done(struct smc_sock *s);
static bool same_file(int a, int b);

/* Enter @s at s->fd. A stale entry (its fd was closed behind our back) is torn
 * down without closing the fd. Returns 0 or -EMFILE (fd beyond the table), -ENOMEM. */
static int sock_insert(struct smc_sock *s) {
        struct smc_sock *old;
        struct fd_chunk *c;
        unsigned fd = (unsigned) s->fd;

        if (s->fd < 0 || fd >= FD_MAX)
                return -EMFILE;
        pthread_mutex_lock(&table_lock);
        c = atomic_load_explicit(&fd_table[fd >> FD_CHUNK_BITS], memory_order_acquire);
        if (!c) {
                c = calloc(1, sizeof(*c));
                if (!c) {
                        pthread_mutex_unlock(&table_lock);
                        return -ENOMEM;
                }
                atomic_store_explicit(&fd_table[fd >> FD_CHUNK_BITS], c, memory_order_release);
        }
        old = atomic_exchange_explicit(&c->s[fd & (FD_CHUNK - 1)], s, memory_order_acq_rel);
        pthread_mutex_unlock(&table_lock);
        /* (one being closed is its closer's to release: smc_close() keeps it in the
         * table until the number is closed, and the number may be ours now) */
        if (old && old != s && !atomic_load_explicit(&old->closing, memory_order_acquire)) {
                pthread_mutex_lock(&old->lock);
                (void) connect_cancel_locked(old, SHUT_RDWR);
                sock_teardown(old);
                pthread_mutex_unlock(&old->lock);
                sock_release(old);
        }
        return 0;
}

/* fork(2) and the locks of the table. table_lock is a leaf (nothing is waited for
 * under it): it is held across the fork, so the child's free list and chunks are
 * never caught half changed. A socket's lock that another thread of the parent held
 * at the fork (a connect waiting for smcd, a listen, a close) would stay held for
 * ever in the child, where that thread does not exist: a close(2) of any number that
 * once was a listener's (smc_fd_listener_internal()) or a call on that socket then
 * hung (helper 107: a child that only closed a file). The child makes such locks
 * anew; the socket is as that thread left it (an exec takes the sockets with
 * exec_lock() anyway). */
static void table_atfork_prepare(void) {
        pthread_mutex_lock(&table_lock);
}

static void table_atfork_parent(void) {
        pthread_mutex_unlock(&table_lock);
}

static void table_atfork_child(void) {
        struct smc_sock *s;

        /* (the child's only thread holds it, under another thread id: made anew) */
        pthread_mutex_init(&table_lock, NULL);
        for (unsigned pos = 0; (s = table_next(&pos, FD_MAX));) {
                if (atomic_load_explicit(&s->closing, memory_order_acquire)) {
                        /* a parent thread was closing it: that close never ends
                         * here, the number is left to the kernel (a close or a
                         * data call would wait for it for ever) */
                        struct fd_chunk *c = atomic_load_explicit(&fd_table[(pos - 1) >> FD_CHUNK_BITS],
                                                                  memory_order_relaxed);

                        atomic_store_explicit(&c->s[(pos - 1) & (FD_CHUNK - 1)], NULL, memory_order_release);
                        continue;
                }
                if (pthread_mutex_trylock(&s->lock) == 0)
                        pthread_mutex_unlock(&s->lock);
                else
                        pthread_mutex_init(&s->lock, NULL); /* a parent thread's */
                if (sock_state(s) == SOCK_CONNECTING) {
                        /* its thread is the parent's: the child's copy is T, as TCP
                         * (the parent's connect goes on, and T's stream is its) */
                        if (s->hidden >= 0)
                                sys_close(s->hidden);
                        s->hidden = -1;
                        s->connect_prev = 0;
                        sock_set_state(s, SOCK_TCP);
                }
        }
}

/* Remove @s from the table, if it is still the entry at its fd. */
static void ew_sock_gone(struct smc_sock *s);

static void sock_remove(struct smc_sock *s) {
        struct fd_chunk *c;
        struct smc_sock *expect = s;
        unsigned fd = (unsigned) s->fd;

        if (s->fd < 0 || fd >= FD_MAX)
                return;
        if (atomic_load_explicit(&s->ew_regs, memory_order_relaxed))
                ew_sock_gone(s);
        c = atomic_load_explicit(&fd_table[fd >> FD_CHUNK_BITS], memory_order_acquire);
        if (!c)
                return;
        pthread_mutex_lock(&table_lock);
        atomic_compare_exchange_strong(&c->s[fd & (FD_CHUNK - 1)], &expect, NULL);
        pthread_mutex_unlock(&table_lock);
}

/* A blocking send or accept that a signal handler interrupted before it moved anything:
 * go on, as the kernel does for a TCP socket when the handler was installed with
 * SA_RESTART (signal(7)), or fail with EINTR. The library waits in poll(2), which
 * the kernel never restarts, and cannot tell which signal came: it restarts when every
 * signal that has a handler has SA_RESTART (the usual case: all or none), else
 * reports EINTR (fault signals, which cannot interrupt a call, do not count, nor do
 * signals the calling thread blocks: they cannot have come). A send with SO_SNDTIMEO
 * set is never restarted, as the kernel's. Costs one sigaction(2) per signal number,
 * only after an EINTR. */
static atomic_bool sandboxed; /* smc_set_sandboxed() */

void smc_set_sandboxed(void) {
        atomic_store_explicit(&sandboxed, true, memory_order_relaxed);
        smc_hint_sandboxed();
}

static bool restart_after_signal(void) {
        sigset_t blocked;

        if (atomic_load_explicit(&sandboxed, memory_order_relaxed))
                return false; /* no sigaction(2) to ask: EINTR */

        if (pthread_sigmask(SIG_BLOCK, NULL, &blocked) != 0)
                sigemptyset(&blocked);
        for (int sig = 1; sig < NSIG; sig++) {
                struct sigaction sa;

                /* fault signals are synchronous (a crash handler, ASan's): they do
                 * not interrupt a system call */
                if (sig == SIGKILL || sig == SIGSTOP || sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE ||
                    sig == SIGILL || sig == SIGTRAP || sig == SIGSYS || sigismember(&blocked, sig) == 1 ||
                    sigaction(sig, NULL, &sa) < 0)
                        continue;
                if (sa.sa_handler == SIG_DFL || sa.sa_handler == SIG_IGN)
                        continue;
                if (!(sa.sa_flags & SA_RESTART))
                        return false;
        }
        return true;
}

static int neg_errno(int r) {
        return r < 0 ? -errno : r;
}

static int ret_errno(int r) {
        if (r < 0) {
                errno = -r;
                return -1;
        }
        return r;
}

static ssize_t ret_errno_ssize(ssize_t r) {
        if (r < 0) {
                errno = (int) -r;
                return -1;
        }
        return r;
}

static int set_nonblock(int fd, bool on) {
        int fl = sys_fcntl(fd, F_GETFL, 0);

        if (fl < 0)
                return -errno;
        if (!!(fl & O_NONBLOCK) == on)
                return 0;
        fl = on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK;
        return neg_errno(sys_fcntl(fd, F_SETFL, fl));
}

/* O_NONBLOCK on an X just received from smcd: its status flags are the
 * socketpair's (none), so no F_GETFL first */
static int set_nonblock_fresh(int fd) {
        return neg_errno(sys_fcntl(fd, F_SETFL, O_NONBLOCK));
}

static int set_cloexec(int fd, bool on) {
        return neg_errno(sys_fcntl(fd, F_SETFD, on ? FD_CLOEXEC : 0));
}

static void raise_sigpipe(void) {
        (void) smc_syscall(SYS_tgkill, getpid(), (pid_t) smc_syscall(SYS_gettid), SIGPIPE);
}

/* ------------------------------------------------------------------------- */
/* Addresses */

static bool addr_is_v4mapped(const struct smc_ctl_addr *a) {
        static const uint8_t pfx[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

        return a->family == AF_INET6 && memcmp(a->addr, pfx, 12) == 0;
}

/* ::ffff:a.b.c.d -> a.b.c.d; other addresses unchanged */
static void addr_unmap(struct smc_ctl_addr *a) {
        if (!addr_is_v4mapped(a))
                return;
        a->family = AF_INET;
        memmove(a->addr, a->addr + 12, 4);
        memset(a->addr + 4, 0, 12);
        a->scope_id = 0;
}

static bool addr_is_any(const struct smc_ctl_addr *a) {
        static const uint8_t zero[16];

        return memcmp(a->addr, zero, a->family == AF_INET ? 4 : 16) == 0;
}

/* A destination on this host's loopback (127.0.0.0/8, ::1, v4-mapped 127.x, and the
 * unspecified address, which reaches it): never SMC-R. */
static bool addr_is_loopback(const struct smc_ctl_addr *a) {
        struct smc_ctl_addr t = *a;

        addr_unmap(&t);
        if (addr_is_any(&t))
                return true;
        if (t.family == AF_INET)
                return t.addr[0] == 127;
        return t.family == AF_INET6 && memcmp(t.addr, &in6addr_loopback, 16) == 0;
}

/* @a as a sockaddr of the socket's @family (v4-mapped for an AF_INET6 socket). */
static int addr_for_family(const struct smc_ctl_addr *a, int family, struct sockaddr_storage *ss,
                           socklen_t *len) {
        struct smc_ctl_addr t = *a;

        if (family == AF_INET6 && t.family == AF_INET) {
                t.family = AF_INET6;
                memset(t.addr + 4, 0, 12);
                memcpy(t.addr + 12, a->addr, 4);
                memset(t.addr, 0, 10);
                t.addr[10] = t.addr[11] = 0xff;
        } else if (family == AF_INET)
                addr_unmap(&t);
        *len = sizeof(*ss);
        return smc_ctl_addr_to_sockaddr(&t, (struct sockaddr *) ss, len);
}

/* getsockname(2)-style copy out of a stored address */
static int copy_addr_out(const struct sockaddr_storage *ss, socklen_t sslen, struct sockaddr *addr,
                         socklen_t *len) {
        if (smc_uptr_bad(len))
                return -EFAULT;
        if ((int) *len < 0)
                return -EINVAL;
        if (*len > 0 && smc_uptr_bad(addr))
                return -EFAULT;
        if (*len > 0)
                memcpy(addr, ss, *len < sslen ? *len : sslen);
        *len = sslen;
        return 0;
}

/* ------------------------------------------------------------------------- */
/* DMB mapping cache: buffer id -> mapping, kept for the life of the process */

struct buf_map {
        uint64_t id;
        void *base;
        uint32_t size;
        dev_t dev; /* the memfd's identity: a memfd sent again for a cached id is */
        ino_t ino; /* the same buffer (mapped already) unless smcd restarted */
        uint32_t instance; /* the smcd that sent it (HELLO_REPLY.instance), 0 if unknown */
        struct buf_map *next;
};

#define BUF_HASH 256
static struct buf_map *buf_hash[BUF_HASH];
static pthread_mutex_t buf_lock = PTHREAD_MUTEX_INITIALIZER;

static unsigned buf_slot(uint64_t id) {
        return (unsigned) ((id * 0x9e3779b97f4a7c15ull) >> 56) % BUF_HASH;
}

static struct buf_map *buf_find_locked(uint64_t id) {
        for (struct buf_map *b = buf_hash[buf_slot(id)]; b; b = b->next)
                if (b->id == id)
                        return b;
        return NULL;
}

/* Resolve one buffer of a CONNECT_REPLY/NEW_CONN: map @memfd (>= 0, always closed
 * here) or find the cached mapping. Returns 0 and the DMB base, or -errno.
 * A memfd sent with an id we have cached, but another file than the cached mapping's,
 * replaces the cached mapping: a restarted smcd hands out the same ids again for other
 * buffers (its knowledge of what we hold starts empty with the new control
 * connection). The old mapping stays (it may still serve a connection made before the
 * restart: mappings are never unmapped) and is only forgotten by the cache. */
static int buf_get(const struct smc_ctl_buf *d, int memfd, uint32_t instance, void **ret_base) {
        struct buf_map *b;
        struct stat st = {};
        int r = 0;

        pthread_mutex_lock(&buf_lock);
        b = buf_find_locked(d->id);
        if (b && memfd >= 0 && instance && b->instance == instance) {
                /* the smcd that sent it before sends it again (a shared listener's
                 * NEW_CONN always carries its memfds): ids are unique per smcd, so
                 * it is the buffer we have mapped. No fstat */
                pthread_mutex_unlock(&buf_lock);
                sys_close(memfd);
                if (b->size != d->size)
                        return -EBADMSG;
                *ret_base = b->base;
                return 0;
        }
        pthread_mutex_unlock(&buf_lock);
        if (memfd >= 0 && fstat(memfd, &st) < 0) {
                sys_close(memfd);
                return -errno;
        }
        pthread_mutex_lock(&buf_lock);
        b = buf_find_locked(d->id);
        if (b && memfd >= 0 && b->dev == st.st_dev && b->ino == st.st_ino)
                b->instance = instance; /* the same file: from this smcd now */
        if (b && memfd >= 0 && (b->dev != st.st_dev || b->ino != st.st_ino)) {
                struct buf_map **pp = &buf_hash[buf_slot(d->id)];

                while (*pp != b)
                        pp = &(*pp)->next;
                *pp = b->next;
                free(b); /* the struct only: the mapping stays */
                b = NULL;
        }
        if (!b && memfd >= 0) {
                void *p = mmap(NULL, (size_t) SMC_DMB_HDR_LEN + d->size, PROT_READ | PROT_WRITE,
                               MAP_SHARED | MAP_POPULATE, memfd, 0);
                if (p == MAP_FAILED)
                        r = -errno;
                else {
                        b = malloc(sizeof(*b));
                        if (!b) {
                                munmap(p, (size_t) SMC_DMB_HDR_LEN + d->size);
                                r = -ENOMEM;
                        } else {
                                *b = (struct buf_map) { .id = d->id, .base = p, .size = d->size,
                                                        .dev = st.st_dev, .ino = st.st_ino,
                                                        .instance = instance };
                                b->next = buf_hash[buf_slot(d->id)];
                                buf_hash[buf_slot(d->id)] = b;
                        }
                }
        } else if (!b)
                r = -ENOENT; /* smcd thinks we have it mapped, but we do not */
        if (b && b->size != d->size)
                r = -EBADMSG; /* ids are never reused for another memfd */
        if (r == 0)
                *ret_base = b->base;
        pthread_mutex_unlock(&buf_lock);
        if (memfd >= 0)
                sys_close(memfd);
        return r;
}

/* Map both buffers of @c; @fds as received (X, Y, [rx memfd], [tx memfd]), from the
 * smcd @instance (0: not known for sure). Closes the memfds in any case (but not X
 * and Y). Both buffers are always processed, so the cache matches what smcd
 * believes we hold. */
static int conn_map(const struct smc_ctl_conn *c, int *fds, int nfds, uint32_t instance, void **rx, void **tx) {
        int i = 2, rxfd = -1, txfd = -1, r1, r2;

        if (c->rx.flags & SMC_CTL_BUF_FD)
                rxfd = i < nfds ? fds[i++] : -1;
        if (c->tx.flags & SMC_CTL_BUF_FD)
                txfd = i < nfds ? fds[i++] : -1;
        r1 = buf_get(&c->rx, rxfd, instance, rx);
        r2 = buf_get(&c->tx, txfd, instance, tx);
        return r1 < 0 ? r1 : r2;
}

/* Tell smcd that @conn_id closed. @instance: the smcd instance that knows the id,
 * whose control connection was just checked (then the CLOSE goes only to it), or 0
 * (an smcd older than REREG, or not the close of an SMC-D socket). */
static void ctl_close_conn(uint64_t conn_id, bool abort, uint32_t instance) {
        union smc_ctl_msg m;

        smc_ctl_init(&m, SMC_CTL_CLOSE, 0);
        m.close.conn_id = conn_id;
        m.close.flags = abort ? SMC_CTL_CLOSE_ABORT : 0;
        if (instance)
                (void) smc_ctl_client_send_instance(&m, instance);
        else
                (void) smc_ctl_client_send(&m);
}

/* ------------------------------------------------------------------------- */
/* Re-registration after an smcd restart (ctl-proto.h, REREG)
 *
 * smcd is not on the SMC-D data path: a connection outlives the smcd that set it up.
 * A new smcd knows nothing of it until its processes tell it. Every SMC-D socket
 * remembers the smcd instance its id belongs to (conn_instance); when the control
 * connection goes to another instance, the socket is re-registered once (REREG), at
 * whichever comes first of:
 *   - its close (before the CLOSE, so that the new smcd counts it);
 *   - the first connect(), listen() or SMC accept() of the process after the
 *     reconnect (rereg_maybe());
 *   - a send or receive of the process that is about to wait or return EAGAIN, at most
 *     once a second, when smcd's instance file names another instance
 *     (rereg_idle_check()).
 * A process that neither asks smcd anything nor waits in the library is not
 * re-registered (smcd(8), RESTARTS).
 *
 * Neither may stall a process when the new smcd hangs (stopped after writing its
 * instance file): the idle path's HELLO and each of its REREGs wait at most
 * SMC_REREG_IDLE_TIMEOUT_MS, the first failure ends the round, and the next check
 * waits twice as long as the last (2 s up to SMC_REREG_IDLE_BACKOFF_MAX_MS); a close
 * waits at most SMC_REREG_CLOSE_TIMEOUT_MS for each (then sends no CLOSE). A HELLO
 * not answered in time also holds off every connect of the process for a while
 * (ctl-client.h). */
#define SMC_REREG_IDLE_TIMEOUT_MS 200u
#define SMC_REREG_CLOSE_TIMEOUT_MS 500u
#define SMC_REREG_IDLE_BACKOFF_MAX_MS 16000u

static _Atomic uint32_t rereg_done; /* the instance every socket was offered to */
/* the smcd instances this process set SMC-D connections up with: the last one, and
 * whether there was another before it (then a new smcd may have restored endpoints of
 * ours from its endpoint table: REREG_DONE) */
static _Atomic uint32_t conn_inst_last;
static _Atomic bool conn_inst_multi;

static void note_conn_instance(uint32_t inst) {
        uint32_t last = atomic_load_explicit(&conn_inst_last, memory_order_relaxed);

        if (last == inst)
                return;
        if (last != 0)
                atomic_store(&conn_inst_multi, true);
        atomic_store(&conn_inst_last, inst);
}

/* Does @s (lock held) need a REREG with smcd instance @inst? Only the SMC-D sockets
 * set up by another smcd that told its instance, with a known role, whose endpoint
 * is of our uid (as CLOSE: smcd accepts requests for an endpoint from its uid), and
 * that no other descriptor or process may hold (no fork or dup since the set-up):
 * the close of a shared copy sends no CLOSE (smcd learns the last close from the Y
 * it holds, and the new smcd holds none), so a shared restored endpoint would stay
 * listed, or end with the first process that re-registered it. */
static bool rereg_wanted(struct smc_sock *s, uint32_t inst) {
        return sock_state(s) == SOCK_SMCD && !s->smcr && s->conn_instance != 0 && s->conn_instance != inst &&
               s->conn_fork_gen == atomic_load(&fork_gen) &&
               s->conn_role >= 0 && s->ep.rx_hdr && s->ep.tx_hdr && s->ep.rx_hdr->token && s->ep.tx_hdr->token &&
               geteuid() == s->conn_euid;
}

/* Send REREG for @s (lock held) to smcd instance @inst, waiting up to @timeout_ms
 * (ms) for the reply. On REREG_REPLY, s->conn_id becomes the new id. Returns 0 (also
 * when smcd refused it: it is not offered again to that instance) or -ENOTCONN,
 * -ETIMEDOUT and the like (the control connection broke or smcd did not answer: try
 * again later; a REREG answered late is answered alike when repeated). */
/* The REREG for @s (lock held; its ring mapped) into @m. Returns 0, or -EAFNOSUPPORT
 * (an address smcd would not take: nothing to tell). */
static int rereg_build(struct smc_sock *s, union smc_ctl_msg *m) {
        smc_ctl_init(m, SMC_CTL_REREG, 0);
        m->rereg.conn_id = s->conn_id;
        m->rereg.instance = s->conn_instance;
        m->rereg.role = (uint32_t) s->conn_role;
        m->rereg.rx_token = s->ep.rx_hdr->token;
        m->rereg.tx_token = s->ep.tx_hdr->token;
        m->rereg.rx_size = s->ep.rx_size;
        m->rereg.tx_size = s->ep.tx_size;
        if (smc_ctl_addr_from_sockaddr(&m->rereg.local, (struct sockaddr *) &s->local, s->local_len) < 0 ||
            smc_ctl_addr_from_sockaddr(&m->rereg.peer, (struct sockaddr *) &s->peer, s->peer_len) < 0)
                return -EAFNOSUPPORT;
        return 0;
}

static int rereg_one(struct smc_sock *s, uint32_t inst, unsigned timeout_ms) {
        union smc_ctl_msg m, reply;
        int fds[SMC_CTL_MAX_FDS];
        int n;

        if (rereg_build(s, &m) < 0) {
                s->conn_instance = inst; /* nothing to tell: not again */
                return 0;
        }
        n = smc_ctl_client_call_timeout(&m, NULL, 0, &reply, fds, timeout_ms);
        if (n < 0) {
                smc_debug("fd %d: REREG of %016llx failed: %s", s->fd, (unsigned long long) s->conn_id, strerror(-n));
                return n;
        }
        for (int i = 0; i < n; i++)
                sys_close(fds[i]);
        if (smc_ctl_client_instance() != inst)
                return -ENOTCONN; /* answered by yet another smcd: again with that one */
        if (reply.hdr.type == SMC_CTL_REREG_REPLY) {
                smc_debug("fd %d: SMC-D connection %016llx of smcd %08x re-registered as %016llx", s->fd,
                          (unsigned long long) s->conn_id, s->conn_instance,
                          (unsigned long long) reply.rereg_reply.conn_id);
                s->conn_id = reply.rereg_reply.conn_id;
        } else
                smc_debug("fd %d: REREG of %016llx refused: %s", s->fd, (unsigned long long) s->conn_id,
                          reply.hdr.type == SMC_CTL_ERROR ? reply.error.msg : "unexpected reply");
        s->conn_instance = inst;
        return 0;
}

/* Closes no smcd heard of: the close of an SMC-D socket found smcd unreachable (or
 * its REREG unanswered). The next smcd may know the endpoint from the endpoint table
 * its predecessor kept (smcd(8), RESTARTS) and would list it until this process
 * exits: so the close is told to the next smcd this process reaches, at the same
 * moments as a REREG (rereg_round), as REREG then CLOSE (or only the CLOSE, to the
 * smcd that set the endpoint up, back from a hang). At most SMC_PENDING_CLOSE_MAX are
 * kept, the oldest dropped. */
#define SMC_PENDING_CLOSE_MAX 4096u

struct pending_close {
        union smc_ctl_msg rereg; /* the REREG, built at the close */
        bool abort;
};
static pthread_mutex_t pending_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pending_close *pending;      /* under pending_lock */
static unsigned pending_n, pending_cap;    /* under pending_lock */
static _Atomic unsigned pending_count;     /* pending_n, read without the lock */
static _Atomic bool pending_flushing;      /* one flusher at a time */

/* fork(): the parent's kept closes are the parent's to tell (the child would tell them
 * twice); a lock or flush another thread held is not the child's */
static void pending_atfork_child(void) {
        pthread_mutex_init(&pending_lock, NULL);
        free(pending);
        pending = NULL;
        pending_n = pending_cap = 0;
        atomic_store(&pending_count, 0);
        atomic_store(&pending_flushing, false);
}

__attribute__((constructor)) static void pending_init(void) {
        pthread_atfork(NULL, NULL, pending_atfork_child);
}

/* Remember the close of @s (lock held, ring still mapped). */
static void pending_close_add(struct smc_sock *s, bool abort) {
        struct pending_close pc = { .abort = abort };

        if (rereg_build(s, &pc.rereg) < 0)
                return;
        pthread_mutex_lock(&pending_lock);
        if (pending_n == pending_cap && pending_cap < SMC_PENDING_CLOSE_MAX) {
                unsigned cap = pending_cap ? pending_cap * 2 : 16;
                struct pending_close *np = realloc(pending, sizeof(*np) * cap);

                if (np) {
                        pending = np;
                        pending_cap = cap;
                }
        }
        if (pending_n == pending_cap && pending_n > 0 && !atomic_load(&pending_flushing)) {
                memmove(pending, pending + 1, sizeof(*pending) * (pending_n - 1)); /* drop the oldest */
                pending_n--;
        } /* (while a flush runs, its indexes must stay: the new one is dropped) */
        if (pending_n < pending_cap) {
                pending[pending_n++] = pc;
                atomic_store(&pending_count, pending_n);
        }
        pthread_mutex_unlock(&pending_lock);
        smc_debug("fd %d: close of SMC-D connection %016llx not told (smcd unreachable): kept for the next smcd",
                  s->fd, (unsigned long long) s->conn_id);
}

/* Tell smcd instance @inst the pending closes, each REREG waiting up to @timeout_ms.
 * Returns 0 (all told, or another thread is at it), or the first failure of the
 * control connection (the rest stays for the next round). */
static int pending_flush(uint32_t inst, unsigned timeout_ms) {
        unsigned done = 0;
        int r = 0;

        if (atomic_exchange(&pending_flushing, true))
                return 0;
        for (;;) {
                struct pending_close pc;
                union smc_ctl_msg reply, m;
                int fds[SMC_CTL_MAX_FDS], n;
                uint64_t id;

                pthread_mutex_lock(&pending_lock);
                if (done >= pending_n) {
                        pthread_mutex_unlock(&pending_lock);
                        break;
                }
                pc = pending[done];
                pthread_mutex_unlock(&pending_lock);
                if (pc.rereg.rereg.instance == inst)
                        id = pc.rereg.rereg.conn_id; /* its own smcd, back */
                else {
                        n = smc_ctl_client_call_timeout(&pc.rereg, NULL, 0, &reply, fds, timeout_ms);
                        if (n < 0) {
                                r = n;
                                break;
                        }
                        for (int i = 0; i < n; i++)
                                sys_close(fds[i]);
                        if (smc_ctl_client_instance() != inst) {
                                r = -ENOTCONN;
                                break;
                        }
                        id = reply.hdr.type == SMC_CTL_REREG_REPLY ? reply.rereg_reply.conn_id : 0;
                }
                if (id) {
                        smc_ctl_init(&m, SMC_CTL_CLOSE, 0);
                        m.close.conn_id = id;
                        m.close.flags = pc.abort ? SMC_CTL_CLOSE_ABORT : 0;
                        r = smc_ctl_client_send_instance(&m, inst);
                        if (r < 0)
                                break;
                }
                smc_debug("close of SMC-D connection %016llx told to smcd %08x%s",
                          (unsigned long long) pc.rereg.rereg.conn_id, inst, id ? "" : " (its REREG was refused)");
                done++;
        }
        pthread_mutex_lock(&pending_lock);
        memmove(pending, pending + done, sizeof(*pending) * (pending_n - done));
        pending_n -= done;
        atomic_store(&pending_count, pending_n);
        pthread_mutex_unlock(&pending_lock);
        atomic_store(&pending_flushing, false);
        return r;
}

/* Re-register every socket that needs it with smcd instance @inst (the one the
 * control connection goes to), each REREG waiting up to @timeout_ms. Takes each
 * socket's lock with trylock (the caller may hold its own socket's; a socket busy now
 * is tried again later). Returns 0 (all offered), 1 (some were busy), or the first
 * failure of the control connection (-ENOTCONN, -ETIMEDOUT ...), which ends the
 * round: the next REREG would wait as long. */
static int rereg_round(uint32_t inst, unsigned timeout_ms) {
        bool done = inst == atomic_load_explicit(&rereg_done, memory_order_acquire), left_out = false,
             servers_left = false;
        struct smc_sock *s;
        int ret = 0;

        if (inst == 0 || (done && atomic_load(&pending_count) == 0))
                return 0;
        /* (type-stable memory: a struct freed meanwhile is still one) */
        for (unsigned pos = 0; !done && ret >= 0 && (s = table_next(&pos, FD_MAX));) {
                int r;

                if (sock_state(s) == SOCK_LISTEN_SMC) {
                        /* its accept channel to an earlier smcd may still hold
                         * NEW_CONNs not accepted yet: server ends of ours that
                         * no REREG names (the channel outlives smcd, l->dchan:
                         * only while it holds a message; a revived one may
                         * hold the earlier smcd's behind the new one's) */
                        int chan, dchan;
                        uint32_t li;
                        bool rv;

                        /* (its fields change under its lock: listen() in another
                         * thread; busy: counted as possibly holding some) */
                        if (pthread_mutex_trylock(&s->lock) != 0) {
                                servers_left = true;
                                continue;
                        }
                        chan = s->chan;
                        dchan = s->dchan;
                        li = s->listen_instance;
                        rv = s->revived;
                        pthread_mutex_unlock(&s->lock);
                        if (chan >= 0 && li && (li != inst || rv) &&
                            (dchan < 0 || sys_poll(&(struct pollfd){ .fd = chan, .events = POLLIN }, 1, 0) != 0))
                                servers_left = true;
                        continue;
                }
                if (sock_state(s) != SOCK_SMCD)
                        continue;
                if (pthread_mutex_trylock(&s->lock) != 0) {
                        ret = 1;
                        continue;
                }
                if (sock_lookup(s->fd) == s && rereg_wanted(s, inst)) {
                        if ((r = rereg_one(s, inst, timeout_ms)) < 0)
                                ret = r;
                } else if (sock_lookup(s->fd) == s && sock_state(s) == SOCK_SMCD && !s->smcr &&
                           s->conn_instance && s->conn_instance != inst)
                        left_out = true; /* of an earlier smcd, not re-registered */
                pthread_mutex_unlock(&s->lock);
        }
        if (ret >= 0 && atomic_load(&pending_count) > 0) {
                int r = pending_flush(inst, timeout_ms);

                if (r < 0)
                        ret = r;
        }
        if (ret == 0 && !done) {
                uint32_t last = atomic_load(&conn_inst_last);

                atomic_store_explicit(&rereg_done, inst, memory_order_release);
                /* tell smcd that we hold no other endpoint of an earlier smcd: the ones
                 * it restored from its table under our pid that we did not re-register
                 * were closed while no smcd heard it */
                if ((atomic_load(&conn_inst_multi) || (last && last != inst)) && !left_out &&
                    !atomic_load(&inherited_any)) {
                        union smc_ctl_msg m;

                        smc_ctl_init(&m, SMC_CTL_REREG_DONE, 0);
                        m.rereg_done.instance = inst;
                        m.rereg_done.flags = SMC_CTL_REREG_DONE_ALL | (atomic_load(&listener_forked) || servers_left
                                                                               ? 0
                                                                               : SMC_CTL_REREG_DONE_SERVERS);
                        (void) smc_ctl_client_send_instance(&m, inst);
                }
        }
        return ret;
}

/* After a request to smcd: if the control connection goes to another smcd than our
 * sockets were set up by, re-register them. */
static void rereg_maybe(void) {
        (void) rereg_round(smc_ctl_client_instance(), SMC_CTL_CLIENT_TIMEOUT_MS);
}

/* CLOCK_MONOTONIC_COARSE in ms (a tick's resolution, a few ms): enough for the
 * once-a-second looks on the data and accept paths, and cheaper than CLOCK_MONOTONIC. */
static uint64_t coarse_ms(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
        return (uint64_t) ts.tv_sec * 1000u + (uint64_t) ts.tv_nsec / 1000000u;
}

/* The pause after a failed look at a restarted smcd that did not answer in time,
 * given the pause after the one before (0: none failed): 2 s, doubling up to
 * SMC_REREG_IDLE_BACKOFF_MAX_MS. In ms. */
static uint32_t rereg_backoff_next(uint32_t prev_ms) {
        if (prev_ms == 0)
                return 2000;
        return prev_ms >= SMC_REREG_IDLE_BACKOFF_MAX_MS / 2 ? SMC_REREG_IDLE_BACKOFF_MAX_MS : prev_ms * 2;
}

/* The ring's idle hook (ring.h): see above. CLOCK_MONOTONIC_COARSE: no cost on the
 * data path between checks. */
static _Atomic uint64_t rereg_check_ms;   /* the next check, CLOCK_MONOTONIC_COARSE ms */
static _Atomic uint32_t rereg_backoff_ms; /* the wait after the next failed check */

static void rereg_idle_check(void) {
        uint64_t now = coarse_ms(), next = atomic_load_explicit(&rereg_check_ms, memory_order_relaxed);
        uint32_t inst, backoff;
        int r;

        if (now < next || !atomic_compare_exchange_strong(&rereg_check_ms, &next, now + 1000))
                return; /* not yet, or another thread checks */
        inst = smc_ctl_client_instance_file();
        if (inst == 0 ||
            (inst == atomic_load_explicit(&rereg_done, memory_order_acquire) && atomic_load(&pending_count) == 0))
                return;
        r = smc_ctl_client_ensure_instance(SMC_REREG_IDLE_TIMEOUT_MS) == inst
                    ? rereg_round(inst, SMC_REREG_IDLE_TIMEOUT_MS)
                    : -ENOTCONN;
        if (r >= 0) {
                atomic_store_explicit(&rereg_backoff_ms, 0, memory_order_relaxed);
                return;
        }
        /* smcd did not answer in time (or is not there after all): stall no process
         * that moves data again soon */
        backoff = rereg_backoff_next(atomic_load_explicit(&rereg_backoff_ms, memory_order_relaxed));
        atomic_store_explicit(&rereg_backoff_ms, backoff, memory_order_relaxed);
        atomic_store_explicit(&rereg_check_ms, now + backoff, memory_order_relaxed);
        smc_debug("rereg: smcd %08x did not answer (%s): next check in %u ms", inst, strerror(-r), backoff);
}

__attribute__((constructor)) static void rereg_init(void) {
        __atomic_store_n(&smc_ring_idle_hook, rereg_idle_check, __ATOMIC_RELAXED);
}

/* ---- The 200 ms ceiling of a cork -------------------------------------------------
 * TCP sends what TCP_CORK or MSG_MORE held back after at most 200 ms even if the
 * program never uncorks nor sends again (tcp(7)); a program that ends a request with
 * MSG_MORE and waits for the reply works over TCP. A ring publishes held bytes only
 * in a call of the program, so the library queues each connection that a send left
 * with bytes held (smc_ring_hold_hook, once per held batch: ep->hold_armed) and one
 * thread of this process, started at the first such send, pushes them at their
 * deadline (smc_ring_flush_held_try(): not while a sender holds the ring's lock;
 * then again HOLD_RETRY_NS later). Batches pushed earlier (uncork, a full batch,
 * TCP_NODELAY) leave their entry to expire with nothing to do. The queue is FIFO with
 * deadlines that never decrease, so the thread sleeps until the head's deadline;
 * with an empty queue it ticks every HOLD_CEILING_NS for HOLD_IDLE_TICKS ticks (a
 * new entry's deadline is never earlier than the tick: no wakeup needed per batch),
 * then sleeps until a send signals it. Lock order: the ring's tx_lock, then
 * hold_lock; the thread holds hold_lock while it tries tx_lock (trylock), and a
 * close takes hold_lock to unlink (hold_forget()): the entry's socket is not closed
 * under the thread. */
#define HOLD_CEILING_NS (200u * 1000000u)
#define HOLD_RETRY_NS (20u * 1000000u)
#define HOLD_IDLE_TICKS 10u

/* A detached thread of the library's running @fn(@arg) with a stack of @stack bytes,
 * all signals blocked in it (they stay with the program's threads). Returns 0 or
 * pthread_create()'s error (positive). */
static int lib_thread_start(void *(*fn)(void *), void *arg, size_t stack) {
        pthread_attr_t a;
        pthread_t t;
        sigset_t all, old;
        int r;

        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&a, stack);
        r = pthread_create(&t, &a, fn, arg);
        pthread_attr_destroy(&a);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        return r;
}

static pthread_mutex_t hold_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hold_cond; /* CLOCK_MONOTONIC (hold_init) */
static struct smc_sock *hold_head, *hold_tail;
static bool hold_thread_started; /* in this process (cleared in a fork child) */
static bool hold_idle;           /* the thread waits without a deadline */
static bool hold_any;            /* a socket was ever queued in this process */

/* CLOCK_MONOTONIC in ns (also the spins of poll and select) */
static uint64_t now_ns(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
}

/* hold_lock held */
static void hold_append(struct smc_sock *s, uint64_t deadline) {
        if (hold_tail && deadline < hold_tail->hold_deadline_ns)
                deadline = hold_tail->hold_deadline_ns;
        s->hold_deadline_ns = deadline;
        s->hold_next = NULL;
        s->hold_prev = hold_tail;
        if (hold_tail)
                hold_tail->hold_next = s;
        else
                hold_head = s;
        hold_tail = s;
        s->hold_linked = true;
}

/* hold_lock held */
static void hold_unlink(struct smc_sock *s) {
        if (!s->hold_linked)
                return;
        if (s->hold_prev)
                s->hold_prev->hold_next = s->hold_next;
        else
                hold_head = s->hold_next;
        if (s->hold_next)
                s->hold_next->hold_prev = s->hold_prev;
        else
                hold_tail = s->hold_prev;
        s->hold_prev = s->hold_next = NULL;
        s->hold_linked = false;
}

static void hold_wait_until(uint64_t deadline) {
        struct timespec ts = { .tv_sec = (time_t) (deadline / 1000000000u),
                               .tv_nsec = (long) (deadline % 1000000000u) };

        (void) pthread_cond_timedwait(&hold_cond, &hold_lock, &ts);
}

static void *hold_main(void *arg) {
        unsigned ticks = 0;

        (void) arg;
        pthread_mutex_lock(&hold_lock);
        for (;;) {
                struct smc_sock *s = hold_head;
                uint64_t now = now_ns();

                if (!s) {
                        if (ticks >= HOLD_IDLE_TICKS) {
                                hold_idle = true;
                                (void) pthread_cond_wait(&hold_cond, &hold_lock);
                                hold_idle = false;
                                ticks = 0;
                        } else {
                                ticks++;
                                hold_wait_until(now + HOLD_CEILING_NS);
                        }
                        continue;
                }
                ticks = 0;
                if (s->hold_deadline_ns > now) {
                        hold_wait_until(s->hold_deadline_ns);
                        continue;
                }
                hold_unlink(s);
                if (smc_ring_flush_held_try(&s->ep) == -EBUSY)
                        hold_append(s, now + HOLD_RETRY_NS);
        }
        return NULL;
}

static bool in_vfork_child(void);

/* smc_ring_hold_hook: @ep (a connection's, tx_lock held) has bytes held back. */
static void hold_queue(struct smc_ring_ep *ep) {
        struct smc_sock *s = (struct smc_sock *) ((char *) ep - offsetof(struct smc_sock, ep));

        pthread_mutex_lock(&hold_lock);
        if (!s->hold_linked) {
                atomic_store_explicit(&s->hold_ever, true, memory_order_relaxed);
                hold_any = true;
                hold_append(s, now_ns() + HOLD_CEILING_NS);
        }
        if (!hold_thread_started && !in_vfork_child()) { /* (a vfork() child shares our memory) */
                int r = lib_thread_start(hold_main, NULL, 64u << 10);

                if (r == 0)
                        hold_thread_started = true;
                else /* (the next held batch tries again; until then, as before: held
                      * until the program's next call) */
                        smc_debug("fd %d: no thread for the 200 ms push of held bytes: %s", s->fd, strerror(r));
        } else if (hold_idle)
                pthread_cond_signal(&hold_cond);
        pthread_mutex_unlock(&hold_lock);
}

/* @s is closed or released: its queued push goes (hold_main() is not pushing it
 * once this returns). */
static void hold_forget(struct smc_sock *s) {
        if (!atomic_load_explicit(&s->hold_ever, memory_order_relaxed))
                return;
        pthread_mutex_lock(&hold_lock);
        hold_unlink(s);
        pthread_mutex_unlock(&hold_lock);
}

static void hold_cond_init(void) {
        pthread_condattr_t ca;

        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&hold_cond, &ca);
        pthread_condattr_destroy(&ca);
}

/* fork(): what is held is pushed first (the connection is then shared, and either
 * process may sit on it while the other exits: TCP's kernel would send it after
 * 200 ms); a ring whose lock a sender holds is left to that sender. */
static void hold_atfork_prepare(void) {
        if (!hold_any)
                return;
        pthread_mutex_lock(&hold_lock);
        for (struct smc_sock *s = hold_head, *n; s; s = n) {
                n = s->hold_next;
                if (smc_ring_flush_held_try(&s->ep) == 0)
                        hold_unlink(s);
        }
        pthread_mutex_unlock(&hold_lock);
}

/* fork(): the child has no such thread, and the parent's queue is not its own (its
 * entries' bytes are the parent's to push). The parent's thread may have been
 * changing the queue at the fork, so the child does not walk it: it clears the
 * entries of every socket in its table that was ever queued. */
static void hold_atfork_child(void) {
        struct smc_sock *s;

        for (unsigned pos = 0; hold_any && (s = table_next(&pos, FD_MAX));)
                if (atomic_load_explicit(&s->hold_ever, memory_order_relaxed)) {
                        s->hold_prev = s->hold_next = NULL;
                        s->hold_linked = false;
                        s->ep.hold_armed = false;
                }
        hold_head = hold_tail = NULL;
        hold_thread_started = false;
        hold_idle = false;
        pthread_mutex_init(&hold_lock, NULL);
        hold_cond_init();
}

__attribute__((constructor)) static void hold_init(void) {
        hold_cond_init();
        pthread_atfork(hold_atfork_prepare, NULL, hold_atfork_child);
        __atomic_store_n(&smc_ring_hold_hook, hold_queue, __ATOMIC_RELAXED);
}

/* Busy polling and the cork flush size of a new connection: the environment wins,
 * then what smcd handed over with it (@c of protocol version 2: its tunables), then
 * the defaults. */
static void ep_tune(struct smc_ring_ep *ep, const union smc_ctl_msg *c) {
        bool from_smcd = c->hdr.version >= 2;

        if (env_busy_poll_set)
                ep->busy_poll_ns = env_busy_poll_ns;
        else if (from_smcd)
                ep->busy_poll_ns = c->conn.params.busy_poll_us * 1000u;
        else
                ep->busy_poll_ns = DEFAULT_BUSY_POLL_NS;
        if (env_autocork)
                ep->autocork_size = env_autocork;
        else if (from_smcd && c->conn.params.autocork_size)
                ep->autocork_size = c->conn.params.autocork_size < ep->tx_size / 2 ? c->conn.params.autocork_size
                                                                                   : ep->tx_size / 2;
        /* else the ring's default: the smaller of 64 KiB and half the tx ring */
}

/* Tell smcd about a TCP connection on @fd that is not SMC although smcd was asked
 * (ctl-proto.h, FALLBACK), so that it is listed as smcss lists the kernel's fallen
 * back sockets: @role SMC_CTL_ROLE_CLIENT with the CONNECT's @reason, or
 * SMC_CTL_ROLE_SERVER with reason 0; @peer (@peer_len bytes) is the address it is
 * connected to. Best effort: one getsockname() and one sendmsg(MSG_DONTWAIT) on the
 * established control connection; nothing is waited for, and if smcd is gone or its
 * socket is full the notice is dropped. errno is kept. */
static void fallback_notice(int fd, const struct sockaddr *peer, socklen_t peer_len, uint32_t role,
                            uint32_t reason) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        union smc_ctl_msg m;
        int saved = errno;

        smc_ctl_init(&m, SMC_CTL_FALLBACK, 0);
        if (sys_getsockname(fd, (struct sockaddr *) &ss, &sl) == 0 &&
            smc_ctl_addr_from_sockaddr(&m.fallback.local, (struct sockaddr *) &ss, sl) == 0 &&
            smc_ctl_addr_from_sockaddr(&m.fallback.peer, peer, peer_len) == 0) {
                m.fallback.role = role;
                m.fallback.reason = reason;
                if (reason == SMCD_DECL_IOURING)
                        /* decided here, never asked smcd: connect to tell it (counted) */
                        (void) smc_ctl_client_notify_connect(&m, 2);
                else
                        (void) smc_ctl_client_notify(&m, 2);
        }
        errno = saved;
}

/* ------------------------------------------------------------------------- */
/* Teardown */

/* Hand the SMC-D or SMC-R connection of NEW_CONN @m (fds @fds), queued to listener
 * @listener_id which this process has just given up (UNLISTEN answered OK), to
 * another listener of its SO_REUSEPORT group (REQUEUE with its X and Y, the proof;
 * ctl-proto.h), as the kernel migrates a closed member's queued connections
 * (net.ipv4.tcp_migrate_req). Returns true if smcd took it (our copies of its fds
 * are closed then); false if not (no other listener, a refused proof, an smcd
 * without REQUEUE: *@unsupported is set then, so as not to ask again). */
static bool chan_requeue(uint64_t listener_id, const union smc_ctl_msg *m, int *fds, int n, bool *unsupported) {
        union smc_ctl_msg req, reply;
        int rfds[SMC_CTL_MAX_FDS], r;

        if (!listener_id || *unsupported || m->hdr.version < 6 || !m->hdr.seq ||
            m->hdr.seq != smc_ctl_client_instance() || n < 2)
                return false;
        smc_ctl_init(&req, SMC_CTL_REQUEUE, 0);
        req.requeue.listener_id = listener_id;
        req.requeue.conn_id = m->conn.conn_id;
        r = smc_ctl_client_call(&req, fds, 2, &reply, rfds); /* X, Y */
        for (int i = 0; i < r; i++)
                sys_close(rfds[i]);
        if (r < 0 || reply.hdr.type != SMC_CTL_OK) {
                if (r < 0 || (reply.hdr.type == SMC_CTL_ERROR && reply.error.error == -EOPNOTSUPP))
                        *unsupported = true;
                return false;
        }
        for (int i = 0; i < n; i++)
                sys_close(fds[i]);
        return true;
}

/* Drain a listener's accept channel: every queued connection is refused (its
 * peer sees ECONNRESET), but those another listener of the same address takes
 * (chan_requeue(); @listener_id: the listener given up, 0 = none). At most
 * SMC_CHAN_DRAIN_MAX messages: smcd queues no more
 * than a listener's backlog (SOMAXCONN at most), and a channel the program broke
 * (closed, or replaced by another file with dup2(): ENOTSOCK, EBADF) fails every
 * receive without consuming anything; it must not loop for ever (found: a process
 * spun at 100% CPU in its exit). */
#define SMC_CHAN_DRAIN_MAX 65536

static void chan_drain(int chan, uint64_t listener_id) {
        bool unsupported = false;

        for (unsigned k = 0; k < SMC_CHAN_DRAIN_MAX; k++) {
                union smc_ctl_msg m;
                int fds[SMC_CTL_MAX_FDS];
                void *rx, *tx;
                int n = smc_ctl_recv(chan, &m, fds, SMC_CTL_TO_CLIENT, MSG_DONTWAIT);

                if (n == -EAGAIN || n == -ECONNRESET || n == -ENOTSOCK || n == -EINVAL || n == -ENOTCONN ||
                    n == -EFAULT)
                        return;
                if (n == -EBADF && sys_fcntl(chan, F_GETFD, 0) < 0)
                        return; /* (EBADF is also a message with too many fds) */
                if (n < 0)
                        continue; /* undecodable: dropped, fds closed */
                if (m.hdr.type != SMC_CTL_NEW_CONN ||
                    (m.conn.mode != SMC_CTL_MODE_SMCD && m.conn.mode != SMC_CTL_MODE_SMCR)) {
                        /* (a TCP connection of an SMC-R fallback: closed, as a queued
                         * TCP connection of a closed listener is reset) */
                        for (int i = 0; i < n; i++)
                                sys_close(fds[i]);
                        continue;
                }
                if (chan_requeue(listener_id, &m, fds, n, &unsupported))
                        continue;
                /* SMC-D or SMC-R: reset it, so that the peer learns at once: the
                 * ABORT flags, and Y shut down (smcd holds a copy of Y, so closing
                 * ours alone would not wake a peer blocked in a receive) */
                if (conn_map(&m.conn, fds, n, 0, &rx, &tx) == 0) {
                        struct smc_ring_ep ep;

                        if (smc_ring_init(&ep, rx, m.conn.rx.size, tx, m.conn.tx.size, fds[0], fds[1]) == 0) {
                                (void) smc_ring_close_reset(&ep, true); /* closes Y */
                                fds[1] = -1;
                                smc_ring_fini(&ep);
                        }
                }
                sys_close(fds[0]);
                if (fds[1] >= 0)
                        sys_close(fds[1]);
                ctl_close_conn(m.conn.conn_id, true, 0);
        }
}

/* ---- EPOLLEXCLUSIVE on an SMC listener ----------------------------------------------
 * The listener's descriptor E is an epoll instance holding T and C, and the kernel
 * refuses EPOLLEXCLUSIVE for an epoll instance. Nor would it help there: an exclusive
 * wakeup stops only at an epoll set with a task in epoll_wait(), and E never has one
 * (fs/eventpoll.c ep_poll_callback()), so every process whose epoll set holds E would
 * wake for each connection (nginx workers: measured, each loser paid an epoll_wait, an
 * accept4 on T and a recvmsg on C per connection). So T and C themselves go into the
 * app's epoll set with the app's events and data, and the set is recorded here to
 * answer a later EPOLL_CTL_ADD / DEL / MOD of E there. At close, as a TCP listener's,
 * their registrations end when no descriptor of T and C is left (no process holds the
 * listener), and last while a dup or a forked copy lives; an unshared listener takes
 * them out first (sock_teardown). */

/* The events C is registered with: an accept channel is a writable socket, a
 * listener never is (EPOLLOUT would be reported for ever). */
static struct epoll_event xreg_chan_ev(const struct epoll_event *ev) {
        struct epoll_event e = *ev;

        e.events &= ~(uint32_t) (EPOLLOUT | EPOLLWRNORM | EPOLLWRBAND);
        return e;
}

/* Add the new channel @chan to every recorded set. Caller holds s->lock. */
static void xreg_add_chan(struct smc_sock *s, int chan) {
        for (unsigned i = 0; i < s->n_xreg; i++) {
                struct epoll_event e = xreg_chan_ev(&s->xreg[i].ev);

                (void) sys_epoll_ctl(s->xreg[i].epfd, EPOLL_CTL_ADD, chan, &e);
        }
}

/* Take fd @m out of every recorded set (before it is closed: another process may
 * hold a copy, which would keep it there). Caller holds s->lock. */
static void xreg_del(struct smc_sock *s, int m) {
        for (unsigned i = 0; i < s->n_xreg; i++)
                (void) sys_epoll_ctl(s->xreg[i].epfd, EPOLL_CTL_DEL, m, NULL);
}

static int xreg_find(const struct smc_sock *s, int epfd) {
        for (unsigned i = 0; i < s->n_xreg; i++)
                if (s->xreg[i].epfd == epfd)
                        return (int) i;
        return -1;
}

static void xreg_forget(struct smc_sock *s, int i) {
        s->xreg[i] = s->xreg[--s->n_xreg];
}

/* Whether recorded set @i still holds T: the app may have closed it, and its number
 * may now be another set or another file. An ADD of T says so (EEXIST) without a
 * change; one that succeeds is undone. It asks for no event (a listening socket never
 * reports EPOLLERR or EPOLLHUP), so a set in use meanwhile sees nothing. */
static bool xreg_live(struct smc_sock *s, int i) {
        struct epoll_event e = { .events = 0, .data = s->xreg[i].ev.data };

        if (sys_epoll_ctl(s->xreg[i].epfd, EPOLL_CTL_ADD, s->hidden, &e) == 0) {
                (void) sys_epoll_ctl(s->xreg[i].epfd, EPOLL_CTL_DEL, s->hidden, NULL);
                return false;
        }
        return errno == EEXIST;
}

/* Forget the recorded sets that are gone; whether a slot is free now. */
static bool xreg_prune(struct smc_sock *s) {
        for (unsigned i = s->n_xreg; i-- > 0;)
                if (!xreg_live(s, (int) i))
                        xreg_forget(s, (int) i);
        return s->n_xreg < LISTEN_XREG_MAX;
}

#define EP_PRIVATE_BITS (EPOLLWAKEUP | EPOLLONESHOT | EPOLLET | EPOLLEXCLUSIVE) /* (eventpoll.c) */

/* epoll_ctl on a socket that is not connected yet (SOCK_NEW, SOCK_BOUND: fd is T;
 * CONNECTING: T's copy s->hidden stands in, with no events: prereg_add_fd()): done
 * here, and recorded for connect_smc(). Lock held. Returns 0 or -errno. */
static int prereg_epoll_ctl(struct smc_sock *s, int epfd, int op, struct epoll_event *ev) {
        bool quiet = sock_state(s) == SOCK_CONNECTING;
        struct epoll_event qev;
        unsigned i;

        if (ev && quiet) {
                qev = *ev;
                qev.events &= EP_PRIVATE_BITS;
        }
        if (sys_epoll_ctl(epfd, op, quiet ? s->hidden : s->fd, ev && quiet ? &qev : ev) < 0)
                return -errno;
        for (i = 0; i < s->n_prereg && s->prereg[i].epfd != epfd; i++)
                ;
        if (op == EPOLL_CTL_DEL) {
                if (i < s->n_prereg)
                        s->prereg[i] = s->prereg[--s->n_prereg];
                else
                        s->prereg_unknown = true; /* (added through another number) */
        } else if (i < s->n_prereg && op == EPOLL_CTL_MOD)
                s->prereg[i].ev = *ev, s->prereg[i].disarmed = false;
        else if (i == s->n_prereg && op == EPOLL_CTL_ADD && i < PREREG_MAX)
                s->prereg[s->n_prereg++] = (struct listen_xreg) { .epfd = epfd, .ev = *ev };
        else
                s->prereg_unknown = true;
        return 0;
}

/* Whether @fd's registration in epoll set @epfd is an EPOLLONESHOT one that has
 * fired (its events are then only the private bits: /proc/PID/fdinfo of the set,
 * eventpoll.c ep_show_fdinfo()). False when that cannot be read. */
static bool epoll_oneshot_fired(int epfd, int fd) {
        char path[64], buf[4096 + 128];
        size_t have = 0;
        ssize_t n;
        int f;
        bool fired = false, found = false;

        (void) snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", epfd);
        f = sys_fd_off_stdio((int) smc_syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC));
        if (f < 0)
                return false;
        /* line by line ("tfd: %8d events: %8x data: ..."; a set of many sockets has
         * a long one: read through it, a line cut at a chunk's end carried over) */
        while (!found && (n = sys_read(f, buf + have, sizeof(buf) - 1 - have)) > 0) {
                char *l = buf, *nl;

                have += (size_t) n;
                buf[have] = 0;
                while (!found && (nl = strchr(l, '\n'))) {
                        int tfd;
                        unsigned ev;

                        *nl = 0;
                        if (sscanf(l, "tfd: %d events: %x", &tfd, &ev) == 2 && tfd == fd) {
                                fired = (ev & ~(unsigned) EP_PRIVATE_BITS) == 0;
                                found = true;
                        }
                        l = nl + 1;
                }
                have -= (size_t) (l - buf);
                if (have >= sizeof(buf) - 1)
                        have = 0; /* (no line is that long) */
                memmove(buf, l, have);
        }
        sys_close(f);
        return fired;
}

/* Take @fd (T, or its copy standing in for it) out of the recorded sets (those it is
 * no longer in, an epoll descriptor closed or reused since, are forgotten). An
 * EPOLLONESHOT registration that has fired stays disarmed on X (helper 124: re-added,
 * it fired again, so two threads of a pool could take one socket). */
static void prereg_detach_fd(struct smc_sock *s, int fd) {
        for (unsigned i = 0; i < s->n_prereg;) {
                struct listen_xreg *r = &s->prereg[i];

                r->disarmed = r->disarmed || ((r->ev.events & EPOLLONESHOT) && epoll_oneshot_fired(r->epfd, fd));
                if (sys_epoll_ctl(r->epfd, EPOLL_CTL_DEL, fd, NULL) == 0)
                        i++;
                else
                        *r = s->prereg[--s->n_prereg];
        }
}

/* ... and put @fd into them: with the app's events and data, or (@quiet) with none
 * (a CONNECTING socket's copy of T: its readiness is TCP's, not the connection's, as
 * kernel SMC's socket shows none until its handshake ends; EPOLLHUP and EPOLLERR
 * still come, for a broken connect). */
static void prereg_add_fd(struct smc_sock *s, int fd, bool quiet) {
        for (unsigned i = 0; i < s->n_prereg; i++) {
                struct epoll_event ev = s->prereg[i].ev;

                if (quiet || s->prereg[i].disarmed)
                        ev.events &= EP_PRIVATE_BITS;
                if (sys_epoll_ctl(s->prereg[i].epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
                        smc_debug("connect fd %d: adding %d to epoll set %d failed: %m", s->fd, fd, s->prereg[i].epfd);
        }
}

/* Before T leaves the app's number (locked). */
static void prereg_detach(struct smc_sock *s) {
        prereg_detach_fd(s, s->fd);
}

/* After: what now has the number (X; T again if the switch failed) goes in. */
static void prereg_attach(struct smc_sock *s) {
        prereg_add_fd(s, s->fd, false);
        s->n_prereg = 0;
}

int smc_sock_epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev, bool *handled) {
        struct smc_sock *s = sock_lookup(fd);
        int r = 0, i, st;

        *handled = false;
        if (!s)
                return 0;
        st = sock_state(s);
        if (st == SOCK_NEW || st == SOCK_BOUND || st == SOCK_CONNECTING) {
                pthread_mutex_lock(&s->lock);
                st = sock_state(s);
                if (s->fd == fd && (st == SOCK_NEW || st == SOCK_BOUND || st == SOCK_CONNECTING) &&
                    (op == EPOLL_CTL_DEL || ev)) {
                        *handled = true;
                        r = prereg_epoll_ctl(s, epfd, op, ev);
                }
                pthread_mutex_unlock(&s->lock);
                return r;
        }
        if (st != SOCK_LISTEN_SMC)
                return 0;
        pthread_mutex_lock(&s->lock);
        if (sock_state(s) != SOCK_LISTEN_SMC || s->hidden < 0)
                goto out;
        i = xreg_find(s, epfd);
        switch (op) {
        case EPOLL_CTL_ADD:
                if (!ev || !(ev->events & EPOLLEXCLUSIVE)) {
                        /* E itself, as asked; unless this set holds the listener
                         * already (exclusively): EEXIST, as for a TCP listener */
                        if (i >= 0) {
                                if (xreg_live(s, i)) {
                                        *handled = true;
                                        r = -EEXIST;
                                } else
                                        xreg_forget(s, i);
                        }
                        goto out;
                }
                if (i < 0 && s->n_xreg >= LISTEN_XREG_MAX && !xreg_prune(s)) {
                        /* more live sets than recorded: E itself, without the flag
                         * (every waiter wakes, one accepts: correct, only slower) */
                        ev->events &= ~EPOLLEXCLUSIVE;
                        goto out;
                }
                *handled = true;
                if (i < 0) {
                        /* E itself in this set already (added without the flag):
                         * EEXIST, as for a TCP listener; an ADD of E says so, one
                         * that succeeds is undone (asking for no event: an epoll
                         * instance never reports EPOLLERR or EPOLLHUP) */
                        struct epoll_event e = { .events = 0, .data = ev->data };

                        if (sys_epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &e) < 0) {
                                r = -errno; /* EEXIST, or EBADF / EINVAL for @epfd */
                                break;
                        }
                        (void) sys_epoll_ctl(epfd, EPOLL_CTL_DEL, fd, NULL);
                }
                if (sys_epoll_ctl(epfd, EPOLL_CTL_ADD, s->hidden, ev) < 0) {
                        r = -errno; /* EEXIST: added before, as the kernel says for E */
                        break;
                }
                if (s->chan >= 0) {
                        struct epoll_event e = xreg_chan_ev(ev);

                        if (sys_epoll_ctl(epfd, EPOLL_CTL_ADD, s->chan, &e) < 0) {
                                r = -errno;
                                (void) sys_epoll_ctl(epfd, EPOLL_CTL_DEL, s->hidden, NULL);
                                break;
                        }
                }
                if (i < 0)
                        i = (int) s->n_xreg++;
                s->xreg[i] = (struct listen_xreg) { .epfd = epfd, .ev = *ev };
                break;
        case EPOLL_CTL_DEL:
                if (i < 0)
                        goto out;
                /* a recorded set may be gone (closed, its number reused): T not in it
                 * says so, and E itself is asked for */
                if (sys_epoll_ctl(epfd, EPOLL_CTL_DEL, s->hidden, NULL) < 0) {
                        xreg_forget(s, i);
                        goto out;
                }
                if (s->chan >= 0)
                        (void) sys_epoll_ctl(epfd, EPOLL_CTL_DEL, s->chan, NULL);
                xreg_forget(s, i);
                *handled = true;
                break;
        case EPOLL_CTL_MOD:
                if (i < 0)
                        goto out;
                /* an exclusive registration cannot be modified (EINVAL, epoll_ctl(2)) */
                if (!xreg_live(s, i)) {
                        xreg_forget(s, i);
                        goto out;
                }
                *handled = true;
                r = -EINVAL;
                break;
        default:
                break;
        }
out:
        pthread_mutex_unlock(&s->lock);
        return r;
}

/* Release everything of @s except s->fd itself. Caller holds s->lock and has
 * removed @s from the table (or is replacing it). */
static void sock_teardown(struct smc_sock *s) {
        lshare_drop(s); /* (whatever the state: a counted listener may have changed it) */
        switch (sock_state(s)) {
        case SOCK_LISTEN_SMC: {
                union smc_ctl_msg m, reply;
                int fds[SMC_CTL_MAX_FDS];
                int n;

                if (getpid() != s->listen_pid || atomic_load(&fork_gen) != s->listen_fork_gen) {
                        /* Another process may hold the listener since a fork: only drop
                         * our copies; smcd retires the listener when the last copy of
                         * its channel is closed (HUP on its end). Registrations of T
                         * and C in epoll sets end with their files, as a TCP
                         * listener's (EPOLLEXCLUSIVE). */
                        s->n_xreg = 0;
                        if (s->chan >= 0)
                                sys_close(s->chan);
                        s->chan = -1;
                        if (s->dchan >= 0)
                                sys_close(s->dchan);
                        s->dchan = -1;
                        break;
                }
                /* No fork and no dup since listen(): this process alone holds T and
                 * C, so their registrations end at this close anyway. End them first:
                 * the UNLISTEN hangs C up and the drain resets what is queued, which
                 * would wake a thread waiting in epoll_wait on E or on a set they are
                 * in (EPOLLEXCLUSIVE) with an event for a listener being closed, which
                 * TCP never reports (found: 12 of 20 runs). */
                xreg_del(s, s->hidden);
                if (s->chan >= 0)
                        xreg_del(s, s->chan);
                s->n_xreg = 0;
                (void) sys_epoll_ctl(s->fd, EPOLL_CTL_DEL, s->hidden, NULL);
                if (s->chan >= 0)
                        (void) sys_epoll_ctl(s->fd, EPOLL_CTL_DEL, s->chan, NULL);
                smc_ctl_init(&m, SMC_CTL_UNLISTEN, 0);
                m.unlisten.listener_id = s->listener_id;
                n = smc_ctl_client_call(&m, NULL, 0, &reply, fds);
                for (int i = 0; i < n; i++)
                        sys_close(fds[i]);
                if (s->chan >= 0) {
                        /* (smcd kept the listener for REQUEUE only if it said OK) */
                        chan_drain(s->chan, n >= 0 && reply.hdr.type == SMC_CTL_OK ? s->listener_id : 0);
                        sys_close(s->chan);
                        s->chan = -1;
                }
                if (s->dchan >= 0)
                        sys_close(s->dchan);
                s->dchan = -1;
                break;
        }
        case SOCK_SMCD: {
                uint32_t inst = 0;
                bool abort, tell, later = false;

                hold_forget(s); /* (the close publishes or drops what is held) */

                if (!s->smcr && s->conn_fork_gen != atomic_load(&fork_gen)) {
                        /* set up before a fork(): the other process may still use it
                         * (a pre-forking server's child). As close(2) of one copy of a
                         * TCP socket, this ends nothing: smcd sees the last copy of X
                         * go and closes the endpoint then (FIN, or RST with data
                         * unread). SMC-R: smcd is the peer and needs the CLOSE. */
                        smc_ring_detach(&s->ep);
                        break;
                }
                /* SMC-D, set up by the smcd we still talk to (unshared: see above):
                 * no CLOSE. smcd holds a copy of Y and sees our X go (HUP), and
                 * reads from the DMB flags whether we left data unread (abort): no
                 * message per close. (The probe for a hang-up of the control
                 * connection stays: after a restart the new smcd knows the
                 * endpoint only from its table or a REREG, and holds no Y.) */
                if (!s->smcr && s->y_instance &&
                    smc_ctl_client_ensure_instance(SMC_REREG_CLOSE_TIMEOUT_MS) == s->y_instance) {
                        (void) smc_ring_close_reset(&s->ep, s->linger_reset || smc_ring_linger_reset(&s->ep));
                        break;
                }
                /* smcd refuses a CLOSE from another uid than the endpoint's (a
                 * root-started server whose children switched uid): there the end
                 * of X tells it (SMC-D); save the round trip */
                tell = s->smcr || geteuid() == s->conn_euid;
                /* set up by an smcd that has restarted since: tell the new one
                 * first, so that it counts the close */
                if (tell && s->conn_instance) {
                        inst = smc_ctl_client_ensure_instance(SMC_REREG_CLOSE_TIMEOUT_MS);
                        if (inst && rereg_wanted(s, inst) && rereg_one(s, inst, SMC_REREG_CLOSE_TIMEOUT_MS) < 0)
                                later = true; /* smcd did not answer */
                        else if (!inst)
                                later = rereg_wanted(s, 0); /* unreachable */
                        /* smcd unreachable, or not re-registered (inherited over
                         * exec, or it failed): the smcd there is does not know the
                         * id, a CLOSE would only count in its close_unknown. A later
                         * smcd may know it (from its endpoint table): the close is
                         * kept for it (pending_close_add) */
                        if (!inst || s->conn_instance != inst)
                                tell = false;
                }
                abort = smc_ring_close_reset(&s->ep, s->linger_reset || smc_ring_linger_reset(&s->ep));
                /* (the ring stays mapped) */
                if (tell)
                        ctl_close_conn(s->conn_id, abort, inst);
                else if (later)
                        pending_close_add(s, abort);
                break;
        }
        default:
                break;
        }
        if (s->hidden >= 0)
                sys_close(s->hidden);
        if (s->optsock >= 0)
                sys_close(s->optsock);
        s->hidden = s->optsock = -1;
        sock_set_state(s, SOCK_NEW);
}

/* The process the library last knew it ran in (set at load and in a fork child:
 * "exec" below): a vfork() child, or a raw clone, runs the parent's memory under
 * another pid, so a socket it passes on is still held by the parent. */
static pid_t exec_known_pid;

/* In a vfork() child (or a raw clone) the library's state is the parent's memory:
 * closing a descriptor there closes the child's copy only, and must not touch it. */
static bool in_vfork_child(void) {
        return getpid() != exec_known_pid;
}

/* ---- An SMC listener's own descriptors (its TCP socket T and accept channel) ----
 * A program that closes descriptors it does not know of must not close these: a
 * listener handed to a new image (pass_fds: CPython's subprocess and multiprocessing's
 * spawn close every other descriptor between vfork() and exec) needs T for the
 * image's number and the channel for its queue, and a listener's own process needs
 * them to go on. close() and close_range() leave them open (they are close-on-exec:
 * an exec or exit ends them anyway). lint_bits marks every number that was one: a
 * filter, so that other close() calls cost one load; a marked number is then looked
 * up in the socket table, and unmarked if it is no listener's any more. */
#define LINT_FDS 65536u
static _Atomic uint64_t lint_bits[LINT_FDS / 64];

static void lint_mark(int fd) {
        if (fd >= 0 && (unsigned) fd < LINT_FDS)
                atomic_fetch_or_explicit(&lint_bits[fd / 64], 1ull << (fd % 64), memory_order_relaxed);
}

/* Store the T and channel numbers of every SMC listener into @out (room for @cap);
 * returns how many there are (more than @cap: some were not stored). @only: count
 * only that number (and store nothing). */
static size_t listener_internal_fds(int *out, size_t cap, int only) {
        size_t n = 0;

        struct smc_sock *s;

        if (!atomic_load_explicit(&listener_ever, memory_order_relaxed))
                return 0;
        for (unsigned pos = 0; (s = table_next(&pos, FD_MAX));) {
                if (sock_state(s) != SOCK_LISTEN_SMC)
                        continue;
                pthread_mutex_lock(&s->lock);
                if (sock_state(s) == SOCK_LISTEN_SMC && sock_lookup(s->fd) == s) {
                        int fds[3] = { s->hidden, s->chan, s->dchan };

                        for (int k = 0; k < 3; k++) {
                                if (fds[k] < 0 || (only >= 0 && fds[k] != only))
                                        continue;
                                if (n < cap)
                                        out[n] = fds[k];
                                n++;
                        }
                }
                pthread_mutex_unlock(&s->lock);
                if (only >= 0 && n > 0)
                        return n;
        }
        return n;
}

/* @fd is T or the channel of an SMC listener of this process. */
bool smc_fd_listener_internal(int fd) {
        if (fd < 0 || !atomic_load_explicit(&listener_ever, memory_order_relaxed))
                return false;
        if ((unsigned) fd < LINT_FDS &&
            !(atomic_load_explicit(&lint_bits[fd / 64], memory_order_relaxed) & (1ull << (fd % 64))))
                return false;
        if (listener_internal_fds(NULL, 0, fd) > 0)
                return true;
        /* a number that was one and is the program's now (a closed listener's): no
         * other look next time. Only while @fd is open (until our caller closes it)
         * can no listener take the number (and mark it) meanwhile: a close() of a
         * number that is not open, as another thread makes it a listener's, must not
         * clear that fresh mark. */
        if ((unsigned) fd < LINT_FDS && sys_fcntl(fd, F_GETFD, 0) >= 0)
                atomic_fetch_and_explicit(&lint_bits[fd / 64], ~(1ull << (fd % 64)), memory_order_relaxed);
        return false;
}

/* Copies made and numbers closed in a vfork() child. The socket table is the
 * parent's memory (the child runs on its parent's stack until it execs or exits), so
 * a copy made there must not enter it: the parent would take the child's number for
 * an SMC connection. CPython's subprocess dup2()s a connection onto the child's fd 1
 * between vfork and exec, and the parent's own stdout then went to the peer. What
 * the child does is noted here instead, thread-local (the child runs on its parent's
 * thread: no other thread sees the notes), with the child's pid; only that child's
 * exec reads them (smc_exec_prepare()), and a later child's first note drops them. */
#define VFORK_FDS_MAX 32
struct vfork_fd {
        pid_t pid; /* the vfork() child that noted it */
        int fd;    /* its descriptor */
        int oldfd; /* the SMC socket it is a copy of; -1: closed or replaced there */
};
static __thread struct vfork_fd vfork_fds[VFORK_FDS_MAX];
static __thread unsigned vfork_fds_n;

static void vfork_fd_note(int fd, int oldfd) {
        pid_t pid = getpid();
        unsigned n = 0;

        for (unsigned i = 0; i < vfork_fds_n; i++)
                if (vfork_fds[i].pid == pid && vfork_fds[i].fd != fd)
                        vfork_fds[n++] = vfork_fds[i];
        vfork_fds_n = n;
        if (n < VFORK_FDS_MAX)
                vfork_fds[vfork_fds_n++] = (struct vfork_fd) { .pid = pid, .fd = fd, .oldfd = oldfd };
        else
                smc_debug("vfork child: more than %d descriptor changes noted, fd %d not", VFORK_FDS_MAX, fd);
}

/* The note this vfork() child (@pid) made for @fd, or NULL. */
static const struct vfork_fd *vfork_fd_find(pid_t pid, int fd) {
        for (unsigned i = 0; i < vfork_fds_n; i++)
                if (vfork_fds[i].pid == pid && vfork_fds[i].fd == fd)
                        return &vfork_fds[i];
        return NULL;
}

/* Are we a vfork() child (the notes are then its own, or a later first note drops an
 * earlier child's)? In the parent, notes left by a child that has exec'd or exited
 * since are dropped here, at the first look: each would cost a getpid() per call. */
static bool vfork_child_noting(void) {
        if (in_vfork_child())
                return true;
        vfork_fds_n = 0;
        return false;
}

bool smc_fd_vfork_noted(int fd) {
        pid_t pid;

        if (!vfork_fds_n || !vfork_child_noting())
                return false;
        pid = getpid();
        return vfork_fd_find(pid, fd) != NULL;
}

void smc_fd_forget(int fd) {
        struct smc_sock *s = sock_lookup(fd);
        bool asked;

        if (!s && !vfork_fds_n)
                return;
        /* in a vfork() child the state is the parent's, whose socket that number
         * still is (CPython's subprocess dup2()s a pipe onto a connection on fd 1):
         * noted for the child's exec only */
        if (vfork_child_noting()) {
                vfork_fd_note(fd, -1);
                return;
        }
        if (!s)
                return;
        pthread_mutex_lock(&s->lock);
        if (atomic_load_explicit(&s->closing, memory_order_relaxed)) {
                pthread_mutex_unlock(&s->lock); /* its close() releases it */
                return;
        }
        /* (a connect under way: ended, and not onto the number, now another file's) */
        (void) connect_cancel_locked(s, SHUT_RDWR);
        asked = sock_state(s) == SOCK_SMCD || sock_state(s) == SOCK_LISTEN_SMC;
        sock_remove(s);
        sock_teardown(s);
        pthread_mutex_unlock(&s->lock);
        sock_release(s);
        if (asked)
                rereg_maybe(); /* it talked to smcd, perhaps a new one */
}

void smc_fd_dup(int oldfd, int newfd) {
        struct smc_sock *s = sock_lookup(oldfd), *d;
        int st, r = 0;

        if ((!s && !vfork_fds_n) || newfd < 0 || newfd == oldfd)
                return;
        if (vfork_child_noting()) {
                /* not in the parent's table; a copy of a copy the child made is a copy
                 * of the same socket (CPython: errwrite = dup(1), then dup2(errwrite,
                 * 2)), and a copy of a number it closed or replaced is none */
                const struct vfork_fd *n = vfork_fd_find(getpid(), oldfd);
                int src = n ? n->oldfd : s ? oldfd : -1;

                vfork_fd_note(newfd, src);
                return;
        }
        if (!s)
                return;
        pthread_mutex_lock(&s->lock);
        st = sock_state(s);
        if (st == SOCK_CONNECTING) {
                /* the copy is T: once the connect has ended, the socket's file */
                int fl;

                pthread_mutex_unlock(&s->lock);
                connect_settle(s);
                pthread_mutex_lock(&s->lock);
                st = sock_state(s);
                if (st == SOCK_SMCD && s->fd == oldfd && !atomic_load(&s->closing) &&
                    (fl = sys_fcntl(newfd, F_GETFD, 0)) >= 0 && !same_file(newfd, oldfd))
                        (void) sys_dup3(oldfd, newfd, (fl & FD_CLOEXEC) ? O_CLOEXEC : 0);
        }
        if (st != SOCK_SMCD && st != SOCK_LISTEN_SMC) {
                /* unconnected, or TCP (fallback): the copy is a plain TCP socket */
                pthread_mutex_unlock(&s->lock);
                return;
        }
        d = sock_alloc(newfd, s->family, SOCK_NEW, atomic_load(&s->nonblock));
        if (!d) {
                r = -ENOMEM;
                goto out;
        }
        sock_copy_options(d, s);
        d->fallback_reason = s->fallback_reason;
        if (s->hidden >= 0 && (d->hidden = sys_fcntl(s->hidden, F_DUPFD_CLOEXEC, 3)) < 0) {
                r = -errno;
                d->hidden = -1;
                goto fail;
        }
        if (st == SOCK_LISTEN_SMC) {
                if (s->chan >= 0 && (d->chan = sys_fcntl(s->chan, F_DUPFD_CLOEXEC, 3)) < 0) {
                        r = -errno;
                        d->chan = -1;
                        goto fail;
                }
                if (s->dchan >= 0 && (d->dchan = sys_fcntl(s->dchan, F_DUPFD_CLOEXEC, 3)) < 0) {
                        r = -errno;
                        d->dchan = -1;
                        goto fail;
                }
                lint_mark(d->hidden);
                lint_mark(d->chan);
                lint_mark(d->dchan);
                d->listener_id = s->listener_id;
                d->listen_instance = s->listen_instance;
                d->revived = s->revived;
                d->listen_smcr = s->listen_smcr;
                d->listen_pid = s->listen_pid;
                d->listen_euid = s->listen_euid;
                /* either copy's close only drops its descriptors: smcd retires the
                 * listener when the last copy of its channel is gone */
                d->listen_fork_gen = s->listen_fork_gen = ~0u;
                lshare_taint(s); /* (also for a forked holder's parent) */
        } else {
                d->conn_id = s->conn_id;
                d->conn_instance = s->conn_instance;
                d->conn_role = s->conn_role;
                d->local = s->local;
                d->peer = s->peer;
                d->local_len = s->local_len;
                d->peer_len = s->peer_len;
                d->smcr = s->smcr;
                d->conn_euid = s->conn_euid;
                if (s->hidden < 0) {
                        /* accept side: both copies keep their options on one option
                         * socket, so that what is set through one reads back through
                         * the other, as on the one TCP socket (best effort: without
                         * it the copy makes its own when asked) */
                        int t = s->optsock >= 0 ? s->optsock : optsock_make(s);

                        if (t >= 0 && (d->optsock = sys_fcntl(t, F_DUPFD_CLOEXEC, 3)) < 0)
                                d->optsock = -1;
                }
                r = smc_ring_copy(&d->ep, &s->ep, newfd);
                if (r < 0)
                        goto fail;
                /* one socket: TCP_CORK stays on for the copy (smc_ring_copy() pushed
                 * what the original held) */
                if (__atomic_load_n(&s->ep.corked, __ATOMIC_RELAXED))
                        (void) smc_ring_set_cork(&d->ep, true);
                d->dup_shared = s->dup_shared = true;
                /* SMC-D: either copy's close only lets go of it (smcd sees the last
                 * copy of X go). SMC-R: the first close ends it (smcr(7) limits) */
                d->conn_fork_gen = s->conn_fork_gen = ~0u;
                d->ew_foreign = s->ew_foreign = true;
        }
        sock_set_state(d, st);
        r = sock_insert(d);
        if (r < 0) {
                if (st == SOCK_SMCD)
                        smc_ring_detach(&d->ep);
                goto fail;
        }
        pthread_mutex_unlock(&s->lock);
        return;
fail:
        if (d->hidden >= 0)
                sys_close(d->hidden);
        if (d->optsock >= 0)
                sys_close(d->optsock);
        if (d->chan >= 0)
                sys_close(d->chan);
        if (d->dchan >= 0)
                sys_close(d->dchan);
        sock_release(d);
out:
        pthread_mutex_unlock(&s->lock);
        smc_debug("dup: fd %d of fd %d stays a bare descriptor: %s", newfd, oldfd, strerror(-r));
}

void smc_set_tcp_only(uint32_t reason) {
        atomic_store_explicit(&tcp_only_reason, reason, memory_order_relaxed);
}

/* A connection set up before the last fork, or a dup / exec copy, may have writers in
 * other processes: its sends take the cross-process lock from now on (ring.h). */
static inline void conn_note_shared(struct smc_sock *s) {
        if (__builtin_expect(s->conn_fork_gen != atomic_load_explicit(&fork_gen, memory_order_relaxed), 0) &&
            !__atomic_load_n(&s->ep.shared, __ATOMIC_RELAXED))
                smc_ring_set_shared(&s->ep);
}

/* @s's ring endpoint, for a readiness check (poll, select, epoll): a sender's room is
 * taken from the header once other processes may write too (conn_note_shared()); a
 * fork child's sends left the parent's own producer cursor behind, and POLLOUT was
 * never reported (helper 108). */
static inline struct smc_ring_ep *sock_ep(struct smc_sock *s) {
        conn_note_shared(s);
        return &s->ep;
}

/* O_NONBLOCK is a flag of the open file, which the copies of a socket made by dup()
 * and fork() share: a copy's cached mode (s->nonblock) can be stale once another copy
 * changed it. The kernel's flag on X is the truth (the library sets it with every mode
 * change). After a call the cache made nonblocking ended with -EAGAIN: if the socket
 * may have copies and the file is blocking now, cache that and return true (block
 * instead). After a call asked to block ended with -EAGAIN (the ring found X
 * nonblocking, or a timeout): refresh the cache. */
static bool mode_turned_blocking(struct smc_sock *s, bool was_nonblock, int flags) {
        int fl;

        if (flags & MSG_DONTWAIT)
                return false;
        if (was_nonblock && s->conn_fork_gen == atomic_load_explicit(&fork_gen, memory_order_relaxed))
                return false; /* no copies: every mode change came through s */
        fl = sys_fcntl(s->fd, F_GETFL, 0);
        if (fl < 0)
                return false;
        atomic_store(&s->nonblock, (fl & O_NONBLOCK) != 0);
        return was_nonblock && !(fl & O_NONBLOCK);
}

bool smc_fd_is_smc_conn(int fd) {
        struct smc_sock *s = sock_lookup(fd);

        if (s && sock_state(s) == SOCK_CONNECTING && connect_tcp_done(s)) {
                connect_settle(s); /* (its stream is smcd's until then) */
                s = sock_lookup(fd);
        }
        return s && sock_state(s) == SOCK_SMCD;
}

int smc_fd_stat_target(int fd) {
        struct smc_sock *s = sock_lookup(fd);
        int t = fd;

        if (!s)
                return fd;
        pthread_mutex_lock(&s->lock);
        if (s->fd == fd && sock_state(s) == SOCK_LISTEN_SMC && s->hidden >= 0)
                t = s->hidden;
        pthread_mutex_unlock(&s->lock);
        return t;
}

size_t smc_fd_send_room(int fd) {
        struct smc_sock *s = sock_lookup(fd);

        return s && sock_state(s) == SOCK_SMCD ? smc_ring_send_room(&s->ep) : 0;
}

int smc_fd_wait_send(int fd) {
        struct smc_sock *s = sock_lookup(fd);
        struct timeval tv = { 0 };
        socklen_t tl = sizeof(tv);
        uint64_t deadline = 0;
        int timeo_fd;

        if (!s || sock_state(s) != SOCK_SMCD)
                return 0;
        /* where smc_setsockopt() keeps SO_SNDTIMEO (as smc_sendfile()) */
        timeo_fd = __atomic_load_n(&s->hidden, __ATOMIC_RELAXED);
        if (timeo_fd < 0)
                timeo_fd = __atomic_load_n(&s->optsock, __ATOMIC_RELAXED);
        if (timeo_fd >= 0 && sys_getsockopt(timeo_fd, SOL_SOCKET, SO_SNDTIMEO, &tv, &tl) == 0 &&
            (tv.tv_sec > 0 || tv.tv_usec > 0) && tv.tv_sec < 3200000000)
                deadline = now_ns() + (uint64_t) tv.tv_sec * 1000000000u + (uint64_t) tv.tv_usec * 1000u;
        for (;;) {
                struct pollfd p = { .fd = fd, .events = POLLOUT };
                int ms = -1, r;

                if (deadline) {
                        uint64_t now = now_ns(), left;

                        if (now >= deadline)
                                return -EAGAIN;
                        left = (deadline - now + 999999u) / 1000000u;
                        ms = left > INT_MAX ? INT_MAX : (int) left;
                }
                r = smc_poll(&p, 1, ms);
                if (r > 0)
                        return 0;
                if (r < 0 && errno == EINTR) {
                        if (deadline || !restart_after_signal())
                                return -EINTR;
                } else if (r < 0)
                        return -errno;
        }
}

bool smc_restart_after_signal(void) {
        return restart_after_signal();
}

bool smc_fd_managed(int fd) {
        return sock_lookup(fd) != NULL;
}

/* ------------------------------------------------------------------------- */
/* socket, bind, listen, accept */

SMC_PUBLIC int smc_socket(int domain, int type, int protocol) {
        struct smc_sock *s;
        int fd, base = type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC);

        fd = sys_socket(domain, type, protocol);
        if (fd < 0)
                return -1;
        if ((domain != AF_INET && domain != AF_INET6) || base != SOCK_STREAM ||
            (protocol != 0 && protocol != IPPROTO_TCP) || (unsigned) fd >= FD_MAX)
                return fd;

        env_load();
        s = sock_alloc(fd, domain, SOCK_NEW, type & SOCK_NONBLOCK);
        if (!s || sock_insert(s) < 0) {
                if (s)
                        sock_release(s);
                sys_close(fd);
                errno = ENOMEM;
                return -1;
        }
        return fd;
}

SMC_PUBLIC int smc_bind(int fd, const struct sockaddr *addr, socklen_t len) {
        struct smc_sock *s = sock_lookup(fd);
        int r;

        if (!s)
                return sys_bind(fd, addr, len);
        pthread_mutex_lock(&s->lock);
        switch (sock_state(s)) {
        case SOCK_NEW:
                r = sys_bind(fd, addr, len);
                if (r == 0)
                        sock_set_state(s, SOCK_BOUND);
                break;
        case SOCK_LISTEN_SMC:
                r = sys_bind(s->hidden, addr, len); /* EINVAL, as TCP */
                break;
        case SOCK_SMCD:
                errno = EINVAL;
                r = -1;
                break;
        default:
                r = sys_bind(fd, addr, len);
        }
        pthread_mutex_unlock(&s->lock);
        return r;
}

/* Fill *@m with the LISTEN for @s, whose listening TCP socket is @tcp: its address,
 * @backlog, the app's buffer sizes and @flags (SMC_CTL_LISTEN_F_*). Returns 0, or the
 * errno of getsockname(), -EAFNOSUPPORT (not IPv4 nor IPv6), -EINVAL. */
static int listen_msg(const struct smc_sock *s, int tcp, int backlog, uint32_t flags, union smc_ctl_msg *m) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        int r;

        if (sys_getsockname(tcp, (struct sockaddr *) &ss, &sl) < 0)
                return -errno;
        smc_ctl_init(m, SMC_CTL_LISTEN, 0);
        r = smc_ctl_addr_from_sockaddr(&m->listen.addr, (struct sockaddr *) &ss, sl);
        if (r < 0)
                return r;
        m->listen.backlog = backlog < 0 ? 0 : (uint32_t) backlog;
        /* what the app set, as CONNECT does (a version-1 smcd reads the socket) */
        m->listen.sndbuf = s->sndbuf > 0 ? (uint32_t) s->sndbuf : 0;
        m->listen.rcvbuf = s->rcvbuf > 0 ? (uint32_t) s->rcvbuf : 0;
        /* (cleared for an smcd older than version 5) */
        m->listen.flags = flags;
        return 0;
}

/* LISTEN for @s, whose listening TCP socket is @tcp (listen_msg(); @join:
 * SMC_CTL_LISTEN_F_JOIN). Returns the accept channel C (*reply: the LISTEN_REPLY;
 * *@dchan: a copy of smcd's end D from a version-6 smcd, else -1), or -ENOTCONN (smcd
 * away), smcd's ERROR, -EPROTO, or listen_msg()'s error. */
static int listen_request(struct smc_sock *s, int tcp, int backlog, bool join, union smc_ctl_msg *reply,
                          int *dchan) {
        union smc_ctl_msg m;
        int fds[SMC_CTL_MAX_FDS];
        int n, r;

        r = listen_msg(s, tcp, backlog, join ? SMC_CTL_LISTEN_F_JOIN : 0, &m);
        if (r < 0)
                return r;
        s->listen_addr = m.listen.addr;
        addr_unmap(&s->listen_addr);
        *dchan = -1;
        n = smc_ctl_client_call(&m, &tcp, 1, reply, fds);
        if (n < 0)
                return n;
        if (reply->hdr.type != SMC_CTL_LISTEN_REPLY || n != (reply->hdr.version >= 6 ? 2 : 1)) {
                for (int i = 0; i < n; i++)
                        sys_close(fds[i]);
                return reply->hdr.type == SMC_CTL_ERROR ? reply->error.error : -EPROTO;
        }
        if (n == 2)
                *dchan = fds[1]; /* (v6) smcd's end, kept: listen_revive() */
        return fds[0];
}

/* Give back a listener we cannot use: UNLISTEN, refuse what was queued meanwhile,
 * close the channel. */
static void listen_undo(uint64_t listener_id, int chan) {
        union smc_ctl_msg m, reply;
        int fds[SMC_CTL_MAX_FDS];
        int n;

        smc_ctl_init(&m, SMC_CTL_UNLISTEN, 0);
        m.unlisten.listener_id = listener_id;
        n = smc_ctl_client_call(&m, NULL, 0, &reply, fds);
        for (int i = 0; i < n; i++)
                sys_close(fds[i]);
        chan_drain(chan, n >= 0 && reply.hdr.type == SMC_CTL_OK ? listener_id : 0);
        sys_close(chan);
}

/* What a LISTEN_REPLY @reply told, into @s. */
static void listen_take_reply(struct smc_sock *s, const union smc_ctl_msg *reply) {
        s->listener_id = reply->listen_reply.listener_id;
        s->listen_instance = smc_ctl_client_instance();
        s->listen_smcr = reply->hdr.version >= 3 && (reply->listen_reply.flags & SMC_CTL_LISTEN_SMCR);
}

/* Signal-driven I/O on a listener (O_ASYNC, F_SETOWN(_EX), F_SETSIG): the program's
 * descriptor of an SMC listener is the epoll fd E, which never raises SIGIO (and
 * since Linux 6.x does not even keep O_ASYNC), so these settings go to T and C, where
 * connections arrive (TCP raises SIGIO when one is ready to accept). The owner and
 * signal are kept on E too (F_GETOWN reads them there); O_ASYNC lives on T, whose open
 * file every copy of the listener shares (dup, fork, exec), and F_GETFL adds it.
 * Copies @from's owner and signal to @to (two different descriptors), and sets @to's
 * O_ASYNC as @async. */
static void async_copy(int from, int to, bool async) {
        struct f_owner_ex o;
        int tf, sig;

        if (from < 0 || to < 0)
                return;
        if (sys_fcntl(from, F_GETOWN_EX, (long) (uintptr_t) &o) == 0)
                (void) sys_fcntl(to, F_SETOWN_EX, (long) (uintptr_t) &o);
        sig = sys_fcntl(from, F_GETSIG, 0);
        if (sig >= 0)
                (void) sys_fcntl(to, F_SETSIG, sig);
        tf = sys_fcntl(to, F_GETFL, 0);
        if (tf >= 0 && ((tf & O_ASYNC) != 0) != async)
                (void) sys_fcntl(to, F_SETFL, async ? tf | O_ASYNC : tf & ~O_ASYNC);
}

/* O_ASYNC of listener @s, as the program set it (on T: async_copy()) */
static bool listener_async(struct smc_sock *s) {
        int fl = s->hidden >= 0 ? sys_fcntl(s->hidden, F_GETFL, 0) : -1;

        return fl >= 0 && (fl & O_ASYNC);
}

/* After the program changed signal-driven I/O on listener @s (its E): T and C follow
 * (async_copy()). s->lock held. */
static void listener_async_sync(struct smc_sock *s, bool async) {
        async_copy(s->fd, s->hidden, async);
        async_copy(s->fd, s->chan, async);
}

/* Make @s (s->lock held, s->fd its listening TCP socket) an SMC listener that
 * accepts from @chan: the program's fd number becomes an epoll fd watching T (a
 * hidden close-on-exec copy of the TCP socket, nonblocking) and @chan, with the fd's
 * close-on-exec flag and the program's O_NONBLOCK (s->nonblock: T's file flag is
 * shared with other holders, whose libraries set it too). Returns 0 (the caller then fills in the
 * listener's fields), or a negative errno with nothing changed (@chan not closed). */
static int listen_install(struct smc_sock *s, int chan) {
        int r, hidden = -1, ep = -1, fdfl;
        struct epoll_event ev = { .events = EPOLLIN };
        bool cloexec, nonblock = atomic_load(&s->nonblock);

        opt_capture(s, s->fd); /* for what its connections inherit */

        fdfl = sys_fcntl(s->fd, F_GETFD, 0);
        if (fdfl < 0)
                return -errno;
        cloexec = fdfl & FD_CLOEXEC;

        hidden = sys_fcntl(s->fd, F_DUPFD_CLOEXEC, 3); /* (sys_fd_off_stdio()) */
        if (hidden < 0)
                return -errno;
        ep = sys_epoll_create1(EPOLL_CLOEXEC);
        if (ep < 0) {
                r = -errno;
                goto fail;
        }
        ev.data.fd = hidden;
        if (sys_epoll_ctl(ep, EPOLL_CTL_ADD, hidden, &ev) < 0) {
                r = -errno;
                goto fail;
        }
        ev.data.fd = chan;
        if (sys_epoll_ctl(ep, EPOLL_CTL_ADD, chan, &ev) < 0) {
                r = -errno;
                goto fail;
        }
        if (nonblock && set_nonblock(ep, true) < 0) {
                r = -errno;
                goto fail;
        }
        /* the point of no return: the app's fd number becomes the epoll fd */
        if (sys_dup3(ep, s->fd, cloexec ? O_CLOEXEC : 0) < 0) {
                r = -errno;
                goto fail;
        }
        sys_close(ep);
        (void) set_nonblock(hidden, true);
        /* O_ASYNC and its owner set on the socket before listen() (now T's alone) */
        {
                int tfl = sys_fcntl(hidden, F_GETFL, 0);
                bool async = tfl >= 0 && (tfl & O_ASYNC);

                async_copy(hidden, s->fd, false);
                async_copy(hidden, chan, async);
        }
        s->hidden = hidden;
        s->chan = chan;
        lint_mark(hidden);
        lint_mark(chan);
        s->listen_euid = geteuid();
        atomic_store(&s->nonblock, nonblock);
        atomic_store(&listener_ever, true);
        sock_set_state(s, SOCK_LISTEN_SMC);
        return 0;

fail:
        if (ep >= 0)
                sys_close(ep);
        sys_close(hidden);
        return r;
}

/* Register @s (s->lock held, s->fd its listening TCP socket) with smcd and make it an
 * SMC listener. @join: the socket arrived from another process (SCM_RIGHTS): if its
 * sender deposited the listener's accept channel with smcd (listen_deposit()), this
 * process accepts from that channel as one more holder of the listener, as a forked
 * process does. Returns 0 or a negative errno (the socket stays a TCP listener). */
static int listen_register(struct smc_sock *s, int backlog, bool join) {
        union smc_ctl_msg reply;
        int r, chan, dchan;
        bool joined;

        chan = listen_request(s, s->fd, backlog, join, &reply, &dchan);
        if (chan < 0)
                return chan;
        joined = reply.hdr.version >= 5 && (reply.listen_reply.flags & SMC_CTL_LISTEN_JOINED);
        if (joined && (reply.listen_reply.flags & SMC_CTL_LISTEN_NB_KNOWN))
                /* the sender's program's flag (T's file flag is shared with the other
                 * receivers, whose libraries set it) */
                atomic_store(&s->nonblock, (reply.listen_reply.flags & SMC_CTL_LISTEN_NONBLOCK) != 0);
        r = listen_install(s, chan);
        if (r < 0) {
                if (joined)
                        sys_close(chan); /* (the queue is the other holders' too) */
                else
                        listen_undo(reply.listen_reply.listener_id, chan);
                if (dchan >= 0)
                        sys_close(dchan);
                return r;
        }
        s->dchan = dchan;
        lint_mark(dchan);
        listen_take_reply(s, &reply);
        s->listen_pid = getpid();
        s->listen_backlog = backlog;
        /* a joined listener is shared: its close only lets go of our copies */
        s->listen_fork_gen = joined ? ~0u : atomic_load(&fork_gen);
        if (!joined && !s->lshare && !s->lshare_dropped)
                (void) lshare_start(s);
        if (joined)
                smc_debug("listen fd %d: joined listener %llu of the process that passed the socket", s->fd,
                          (unsigned long long) s->listener_id);
        return 0;
}

static void listen_reregister(struct smc_sock *l);

SMC_PUBLIC int smc_listen(int fd, int backlog) {
        struct smc_sock *s = sock_lookup(fd);
        int r;

        if (!s)
                return sys_listen(fd, backlog);
        pthread_mutex_lock(&s->lock);
        switch (sock_state(s)) {
        case SOCK_SMCD:
                errno = EINVAL;
                r = -1;
                break;
        case SOCK_TCP:
                r = sys_listen(fd, backlog); /* EINVAL, as TCP */
                break;
        case SOCK_LISTEN_SMC:
                r = sys_listen(s->hidden, backlog); /* new backlog */
                if (r == 0 && s->listen_shut && s->chan < 0 && getpid() == s->listen_pid) {
                        /* listening again after a shutdown(SHUT_RD) or connect(AF_UNSPEC)
                         * stopped it (a pause, as HAProxy's): SMC again too, when this
                         * process registered it and holds it alone (else TCP only) */
                        s->listen_shut = false;
                        s->listen_backlog = backlog;
                        s->relisten_ms = 0;
                        listen_reregister(s);
                        if (s->chan < 0)
                                s->listen_shut = true;
                        rereg_maybe();
                }
                break;
        default: /* NEW, BOUND, LISTEN_TCP (retries smcd) */
                r = sys_listen(fd, backlog);
                if (r < 0)
                        break;
                sock_set_state(s, SOCK_LISTEN_TCP);
                if (!env_disable && !atomic_load_explicit(&tcp_only_reason, memory_order_relaxed)) {
                        int k = listen_register(s, backlog, s->received);

                        rereg_maybe();
                        if (k < 0)
                                smc_debug("listen fd %d: registering with smcd failed: %s: plain TCP listener", fd,
                                          strerror(-k));
                }
                r = 0;
        }
        pthread_mutex_unlock(&s->lock);
        return r;
}

/* Take one SMC-D connection from the listener's channel. Returns the new fd, or
 * -EAGAIN (none queued), -EPROTO (a bad message was dropped: try again), -errno. */
/* NEW_CONN mode TCP (v3): an SMC-R handshake on @fd fell back; @fd is a plain TCP
 * connection now, at its first application byte. Returns it as accept() would. */
static int accept_chan_tcp(struct smc_sock *l, const union smc_ctl_msg *m, int fd, struct sockaddr *addr,
                           socklen_t *len, int flags) {
        struct sockaddr_storage ss;
        socklen_t sl = 0;
        struct smc_sock *s;

        /* arrived O_CLOEXEC and blocking (smcd never changes its file flags) */
        if (!(flags & SOCK_CLOEXEC))
                (void) set_cloexec(fd, false);
        if (flags & SOCK_NONBLOCK)
                (void) set_nonblock(fd, true);
        if (addr && len && addr_for_family(&m->conn.peer, l->family, &ss, &sl) == 0)
                (void) copy_addr_out(&ss, sl, addr, len);
        if ((unsigned) fd >= FD_MAX)
                return fd;
        s = sock_alloc(fd, l->family, SOCK_TCP, flags & SOCK_NONBLOCK);
        if (!s || sock_insert(s) < 0) {
                if (s)
                        sock_release(s);
                sys_close(fd);
                return -ENOMEM;
        }
        s->fallback_reason = m->conn.fallback_reason;
        return fd;
}

/* An SMC listener whose accept channel hit EOF (smcd went away) registers again once
 * smcd is back, so that new connections get SMC again without a new listen(): tried
 * from accept (whose callers wake for the TCP connections that arrive meanwhile), at
 * most every RELISTEN_MS. Only the process that registered it, while it alone holds it
 * (no fork or dup since: another copy's process would keep seeing a channel it does not
 * hold readable in the shared epoll instance). Caller holds l->lock. */
#define RELISTEN_MS 1000

static uint64_t now_ms(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000u + (uint64_t) ts.tv_nsec / 1000000u;
}

#define RELISTEN_WAITS 64

/* Could @l (its channel gone with an smcd) be registered again by this process, once
 * its forked children closed their copies (listen_sole())? */
static bool listen_may_return(const struct smc_sock *l) {
        return getpid() == l->listen_pid && !l->listen_shut && l->listen_fork_gen != ~0u && l->lshare &&
               !l->lshare_dropped && atomic_load(&l->lshare->holders) < LSHARE_TAINTED;
}

static void listen_reregister(struct smc_sock *l) {
        union smc_ctl_msg reply;
        struct epoll_event ev = { .events = EPOLLIN };
        uint64_t now = now_ms();
        int chan, dchan;

        if (l->chan >= 0 || l->listen_shut || sock_state(l) != SOCK_LISTEN_SMC || l->hidden < 0 ||
            getpid() != l->listen_pid || !listen_sole(l) || geteuid() != l->listen_euid ||
            (l->relisten_ms != 0 && now - l->relisten_ms < RELISTEN_MS))
                return;
        l->relisten_ms = now;
        chan = listen_request(l, l->hidden, l->listen_backlog, false, &reply, &dchan);
        if (chan < 0) {
                smc_debug("accept fd %d: LISTEN again failed (%s): the listener stays TCP", l->fd, strerror(-chan));
                return;
        }
        ev.data.fd = chan;
        if (sys_epoll_ctl(l->fd, EPOLL_CTL_ADD, chan, &ev) < 0) {
                listen_undo(reply.listen_reply.listener_id, chan);
                if (dchan >= 0)
                        sys_close(dchan);
                return;
        }
        l->chan = chan;
        async_copy(l->fd, chan, listener_async(l));
        lint_mark(chan);
        if (l->dchan >= 0)
                sys_close(l->dchan);
        l->dchan = dchan;
        lint_mark(dchan);
        xreg_add_chan(l, chan);
        listen_take_reply(l, &reply);
        smc_debug("accept fd %d: registered with smcd again (listener %llu)", l->fd,
                  (unsigned long long) l->listener_id);
}

/* Register @l (l->lock held) again with a restarted smcd over the channel it has:
 * an SMC listener keeps both ends of its accept channel (l->dchan, ctl version 6),
 * so C never hangs up when smcd goes, and every process that holds the listener
 * (forked children, dups, a receiver over SCM_RIGHTS) already watches it; whichever
 * of them looks first gives the channel to the new smcd (LISTEN with
 * SMC_CTL_LISTEN_F_REVIVE), the others' LISTENs find it registered. Looked at after
 * an accept (clients fall back to TCP while no smcd knows the listener, and
 * connections the old smcd queued come first), at most once per RELISTEN_MS for
 * each kind of accept (@q: 1 TCP, 0 the channel; a TCP one right after a restart
 * is not held back by a channel one just before it): smcd's instance file against
 * the instance the listener is registered with. */
static bool listen_revive(struct smc_sock *l, unsigned q) {
        union smc_ctl_msg m, reply;
        int fds[SMC_CTL_MAX_FDS], n;
        uint64_t now = coarse_ms();
        uint32_t file_inst, inst = 0;

        if (l->dchan < 0 || l->chan < 0 || l->listen_shut || sock_state(l) != SOCK_LISTEN_SMC || l->hidden < 0 ||
            now - __atomic_load_n(&l->revive_ms[q], __ATOMIC_RELAXED) < RELISTEN_MS)
                return false;
        __atomic_store_n(&l->revive_ms[q], now, __ATOMIC_RELAXED);
        file_inst = smc_ctl_client_instance_file();
        if (file_inst == 0 || file_inst == l->listen_instance || file_inst == l->revive_refused ||
            (file_inst == l->revive_fail_inst && now < l->revive_retry_ms))
                return false;
        if (listen_msg(l, l->hidden, l->listen_backlog, SMC_CTL_LISTEN_F_REVIVE, &m) < 0)
                return false;
        {
                int send_fds[3] = { l->hidden, l->chan, l->dchan };

                /* (a short wait, and a longer pause after each one that failed, until
                 * another smcd starts: one that hangs must not stall the accepts,
                 * which go on over TCP meanwhile) */
                n = smc_ctl_client_call_instance(&m, send_fds, 3, &reply, fds, SMC_REREG_IDLE_TIMEOUT_MS, &inst);
        }
        /* a limit of smcd's (max_listeners_per_uid, its descriptors or memory) may
         * lift: asked again later, as when smcd did not answer */
        if (n >= 0 && reply.hdr.type == SMC_CTL_ERROR &&
            (reply.error.error == -EMFILE || reply.error.error == -ENFILE || reply.error.error == -ENOMEM ||
             reply.error.error == -ENOBUFS || reply.error.error == -EAGAIN)) {
                for (int i = 0; i < n; i++)
                        sys_close(fds[i]);
                n = reply.error.error;
        }
        if (n < 0) {
                l->revive_backoff_ms = rereg_backoff_next(l->revive_fail_inst == file_inst ? l->revive_backoff_ms : 0);
                l->revive_fail_inst = file_inst;
                l->revive_retry_ms = now + l->revive_backoff_ms;
                smc_debug("accept fd %d: registering the listener again failed: %s (next try in %u ms)", l->fd,
                          strerror(-n), l->revive_backoff_ms);
                return false;
        }
        for (int i = 0; i < n; i++)
                sys_close(fds[i]);
        if (reply.hdr.type != SMC_CTL_LISTEN_REPLY || reply.hdr.version < 6 ||
            !(reply.listen_reply.flags & SMC_CTL_LISTEN_REVIVED) || inst == 0) {
                smc_debug("accept fd %d: smcd %08x did not register the listener again (%s): it stays TCP there",
                          l->fd, inst,
                          reply.hdr.type == SMC_CTL_ERROR ? strerror(-reply.error.error) : "unexpected reply");
                if (inst == file_inst)
                        l->revive_refused = inst;
                return false;
        }
        l->listener_id = reply.listen_reply.listener_id;
        l->listen_smcr = (reply.listen_reply.flags & SMC_CTL_LISTEN_SMCR) != 0;
        l->listen_instance = inst;
        l->revived = true;
        /* (a worker that dropped privileges after its master listened: the new
         * registration is of this uid, as the connections it accepts) */
        l->listen_euid = geteuid();
        smc_debug("accept fd %d: registered with smcd %08x again over its channel (listener %llu)", l->fd, inst,
                  (unsigned long long) l->listener_id);
        return true;
}

/* A connection's descriptors arrive with its NEW_CONN message (up to
 * SMC_CTL_MAX_FDS); those that do not fit the process's table (RLIMIT_NOFILE) are
 * closed by the kernel, and the connection is lost (smcd resets its client). TCP's
 * accept fails with EMFILE instead and leaves the connection queued. So from a sign
 * of a nearly full table on (accept_room_after(), or such a loss), for
 * FD_PRESSURE_MS after the last one, each accept first makes sure the descriptors
 * would fit (that many dups of the channel, closed again: 2 x SMC_CTL_MAX_FDS system
 * calls) and answers EMFILE without receiving when they would not: the message
 * stays queued, as TCP's connection. (No look before every receive: it would cost
 * every accept those calls.) */
#define FD_PRESSURE_MS 10000u
static _Atomic uint64_t fd_pressure_until; /* now_ms(); 0: never */

static void fd_pressure_note(void) {
        atomic_store_explicit(&fd_pressure_until, now_ms() + FD_PRESSURE_MS, memory_order_relaxed);
}

/* The soft RLIMIT_NOFILE, read at most once a second (prlimit64); 0 if unknown. */
static uint64_t nofile_soft(void) {
        static _Atomic uint64_t cached, read_ms;
        uint64_t now = now_ms();

        if (now - atomic_load_explicit(&read_ms, memory_order_relaxed) >= 1000u) {
                struct rlimit rl;

                if (smc_syscall(SYS_prlimit64, 0, RLIMIT_NOFILE, NULL, &rl) == 0)
                        atomic_store_explicit(&cached, (uint64_t) rl.rlim_cur, memory_order_relaxed);
                atomic_store_explicit(&read_ms, now, memory_order_relaxed);
        }
        return atomic_load_explicit(&cached, memory_order_relaxed);
}

/* After an accept or connect: descriptors numbered close to the limit mean a table
 * about full (numbers are handed out lowest first), so the next accepts and connects
 * look first, and even the first connection that would not fit stays queued (a lower
 * number freed since hides it: then that one is lost, as without this). */
static void accept_room_after(const int *fds, int n) {
        uint64_t lim;
        int top = -1;

        for (int i = 0; i < n; i++)
                if (fds[i] > top)
                        top = fds[i];
        if (top >= 0 && (lim = nofile_soft()) > 0 && (uint64_t) top + 2u * SMC_CTL_MAX_FDS >= lim)
                fd_pressure_note();
}

/* Room for @need more descriptors (while under pressure: that many dups of @ref,
 * closed again); false when they would not fit. */
static bool fd_room(int ref, int need) {
        uint64_t until = atomic_load_explicit(&fd_pressure_until, memory_order_relaxed);
        int probe[SMC_CTL_MAX_FDS + 2], n = 0;
        bool ok = true;

        if (__builtin_expect(until == 0, 1) || now_ms() > until)
                return true;
        if (need > (int) (sizeof(probe) / sizeof(probe[0])))
                need = (int) (sizeof(probe) / sizeof(probe[0]));
        while (n < need) {
                int d = sys_fcntl(ref, F_DUPFD_CLOEXEC, 0);

                if (d < 0) {
                        ok = errno != EMFILE && errno != ENFILE; /* (else: let the receive tell) */
                        break;
                }
                probe[n++] = d;
        }
        while (n > 0)
                sys_close(probe[--n]);
        if (!ok)
                fd_pressure_note();
        return ok;
}

static bool accept_room(int chan) {
        return fd_room(chan, SMC_CTL_MAX_FDS);
}

/* Before a CONNECT: room for its reply's descriptors, for the copy of T the
 * connection keeps (`hidden`) and, when this is the process's first request, for the
 * control connection it opens (helper 125: one short, a connect over CLC with five
 * free was reset). A reply whose descriptors do not fit is cut short by
 * the kernel (MSG_CTRUNC), and the client goes on over TCP, while smcd has queued
 * the SMC-D connection to the listener already: the server accepted a connection
 * nobody used, at EOF at once, beside the client's real one (helper 112: a process
 * that connects and accepts until EMFILE). T's own number is the sign of a table
 * about full (the lowest free one when the socket was made). */
static bool connect_room(int t) {
        uint64_t lim = nofile_soft();
        int ctl[2];

        if (lim > 0 && (uint64_t) t + 2u * SMC_CTL_MAX_FDS >= lim)
                fd_pressure_note();
        return fd_room(t, SMC_CTL_MAX_FDS + 1 + (smc_ctl_client_fds(ctl) == 0 ? 1 : 0));
}

static int accept_chan(struct smc_sock *l, struct sockaddr *addr, socklen_t *len, int flags) {
        union smc_ctl_msg m;
        int fds[SMC_CTL_MAX_FDS];
        struct smc_sock *s;
        void *rx, *tx;
        int n, r, x, chan = l->chan;
        uint32_t inst = 0;

        if (chan < 0)
                return -EAGAIN;
        if (!accept_room(chan))
                return -EMFILE; /* the connection stays queued */
        n = smc_ctl_recv(chan, &m, fds, SMC_CTL_TO_CLIENT, MSG_DONTWAIT);
        if (n == -EAGAIN || n == -EINTR)
                return -EAGAIN;
        if (n == -ECONNRESET) {
                smc_debug("accept fd %d: accept channel at EOF (smcd gone): the listener goes on as TCP", l->fd);
                /* smcd went away: the channel is at EOF forever. Stop watching it, or
                 * the epoll fd would stay readable; the listener goes on as TCP. */
                pthread_mutex_lock(&l->lock);
                if (l->chan == chan) {
                        (void) sys_epoll_ctl(l->fd, EPOLL_CTL_DEL, chan, NULL);
                        xreg_del(l, chan);
                        l->chan = -1;
                        sys_close(chan);
                }
                pthread_mutex_unlock(&l->lock);
                return -EAGAIN;
        }
        if (n == -EMFILE || n == -ENFILE) {
                /* no room for the message's descriptors: it is gone (the kernel closed
                 * what did not fit, and smcd resets that client). Say so, as TCP's
                 * accept does: the program backs off (the next messages must not be
                 * received into the same full table: one accept lost them all), and
                 * the next accepts look first (accept_room()) */
                fd_pressure_note();
                smc_debug("accept fd %d: a connection's descriptors did not fit: %s: it is reset", l->fd,
                          strerror(-n));
                return n;
        }
        if (n < 0) {
                smc_debug("accept fd %d: undecodable message on the accept channel: %s: dropped", l->fd, strerror(-n));
                return -EPROTO;
        }
        if (m.hdr.type == SMC_CTL_NEW_CONN && m.conn.mode == SMC_CTL_MODE_TCP && n == 1) {
                smc_debug("accept fd %d: NEW_CONN %016llx: SMC-R fell back, TCP, reason 0x%08x", l->fd,
                          (unsigned long long) m.conn.conn_id, m.conn.fallback_reason);
                return accept_chan_tcp(l, &m, fds[0], addr, len, flags);
        }
        if (m.hdr.type != SMC_CTL_NEW_CONN || (m.conn.mode != SMC_CTL_MODE_SMCD && m.conn.mode != SMC_CTL_MODE_SMCR) ||
            n < 2) {
                smc_debug("accept fd %d: message type %u mode %u with %d fds on the accept channel: dropped", l->fd,
                          m.hdr.type, m.hdr.type == SMC_CTL_NEW_CONN ? m.conn.mode : 0, n);
                for (int i = 0; i < n; i++)
                        sys_close(fds[i]);
                return -EPROTO;
        }
        accept_room_after(fds, n);
        x = fds[0]; /* (the lowest number free, as TCP's accept gives) */
        if (!sys_fds_off_stdio(fds + 1, n - 1)) {
                /* Y and the memfds stay ours: with no number above 2 free for
                 * them, as if they had not fit */
                for (int i = 2; i < n; i++)
                        sys_close(fds[i]);
                fd_pressure_note();
                r = -EMFILE;
                goto abort;
        }
        /* (v6) the smcd that sent it: the channel may have been revived since
         * (listen_revive()), with connections of the earlier smcd still queued */
        inst = m.hdr.version >= 6 && m.hdr.seq ? m.hdr.seq : l->listen_instance;
        r = conn_map(&m.conn, fds, n, inst, &rx, &tx);
        if (r < 0) {
                smc_debug("accept fd %d: NEW_CONN %016llx: mapping the buffers %016llx/%016llx failed: %s", l->fd,
                          (unsigned long long) m.conn.conn_id, (unsigned long long) m.conn.rx.id,
                          (unsigned long long) m.conn.tx.id, strerror(-r));
                goto abort;
        }
        if ((unsigned) x >= FD_MAX) {
                r = -EMFILE;
                goto abort;
        }
        /* X arrived O_CLOEXEC */
        if (!(flags & SOCK_CLOEXEC) && (r = set_cloexec(x, false)) < 0)
                goto abort;
        if ((flags & SOCK_NONBLOCK) && (r = set_nonblock_fresh(x)) < 0)
                goto abort;
        s = sock_alloc(x, l->family, SOCK_NEW, flags & SOCK_NONBLOCK);
        if (!s) {
                r = -ENOMEM;
                goto abort;
        }
        s->conn_id = m.conn.conn_id;
        s->conn_instance = inst;
        s->y_instance = inst;
        note_conn_instance(s->conn_instance);
        s->conn_role = SMC_CTL_ROLE_SERVER;
        if (addr_for_family(&m.conn.local, s->family, &s->local, &s->local_len) < 0 ||
            addr_for_family(&m.conn.peer, s->family, &s->peer, &s->peer_len) < 0) {
                sock_release(s);
                r = -EPROTO;
                goto abort;
        }
        r = smc_ring_init(&s->ep, rx, m.conn.rx.size, tx, m.conn.tx.size, x, fds[1]);
        if (r < 0) {
                sock_release(s);
                goto abort;
        }
        s->ep.x_mode_is_app = true;
        smc_ring_track_dirty(&s->ep);
        ep_tune(&s->ep, &m);
        opt_inherit(s, l); /* the listener's options, as an accepted TCP socket has them */
        if (s->linger_reset)
                smc_ring_set_linger_reset(&s->ep, true);
        s->smcr = m.conn.mode == SMC_CTL_MODE_SMCR;
        s->ep.peer_is_daemon = s->smcr;
        s->conn_fork_gen = atomic_load(&fork_gen);
        s->conn_euid = l->listen_euid;
        /* taken: without the mark, smcd resets it when its last copy goes (a failed
         * insert below closes it with ABORT anyway) */
        if (!s->smcr)
                smc_ring_mark_accepted(&s->ep);
        sock_set_state(s, SOCK_SMCD);
        r = sock_insert(s);
        if (r < 0) {
                (void) smc_ring_close(&s->ep); /* closes Y */
                sock_release(s);
                sys_close(x);
                ctl_close_conn(m.conn.conn_id, true, 0);
                return r;
        }
        if (addr && len)
                (void) copy_addr_out(&s->peer, s->peer_len, addr, len);
        return x;

abort:
        smc_debug("accept fd %d: NEW_CONN %016llx aborted: %s", l->fd, (unsigned long long) m.conn.conn_id,
                  strerror(-r));
        sys_close(fds[0]);
        sys_close(fds[1]);
        ctl_close_conn(m.conn.conn_id, true, inst);
        return r == -EMFILE || r == -ENOMEM ? r : -EPROTO;
}

/* How long an accept waits for a CLC proposal that smcd cannot take
 * (accept_decline()): a proposal comes from the client's smcd as soon as the TCP
 * connection is up, but a stalled smcd sends it late; a client library gives up
 * after SMC_SMCR_TIMEOUT_MS and shuts the connection down, after which none can
 * come. Only a client that offered SMC, got no echo (syncookies, an SO_REUSEPORT
 * group with a plain member) and waits for the server to speak first waits it out. */
#define SMC_DECLINE_WAIT_MS (SMC_SMCR_TIMEOUT_MS + 5000u)
/* ... and for a connection whose SYN came before the smcd that answers marked the
 * listener (smcd's ESTALE: an earlier smcd may have echoed it): a proposal, if any,
 * was sent as that smcd ran, so it is queued already; a little more for one in flight */
#define SMC_DECLINE_STALE_MS 200u

/* Read up to @len bytes of @fd (MSG_PEEK in @flags: leave them) until @deadline_ms
 * (now_ms()): returns the count (fewer only at EOF or the deadline), or -errno. */
static ssize_t recv_until(int fd, uint8_t *buf, size_t len, int flags, uint64_t deadline_ms) {
        size_t got = 0;

        while (got < len) {
                struct pollfd p = { .fd = fd, .events = POLLIN };
                uint64_t now = now_ms();
                bool peek = flags & MSG_PEEK;
                ssize_t n;

                /* (peeking always starts at the stream's head) */
                n = sys_recvfrom(fd, peek ? buf : buf + got, peek ? len : len - got, flags | MSG_DONTWAIT, NULL,
                                 NULL);
                if (n == 0)
                        break;
                if (n > 0) {
                        got = peek ? (size_t) n : got + (size_t) n;
                        if (got >= len)
                                break;
                } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                        return -errno;
                if (now >= deadline_ms)
                        break;
                /* (a part peeked stays readable: wait a little for the rest) */
                if (sys_poll(n > 0 && peek ? NULL : &p, n > 0 && peek ? 0 : 1,
                             n > 0 && peek ? 2 : (int) (deadline_ms - now)) < 0 &&
                    errno != EINTR)
                        return -errno;
        }
        return (ssize_t) got;
}

/* Connection @fd, accepted on marked listener @l, came with the SMC TCP option in its
 * SYN, but smcd cannot take it (unreachable: restarting, or this process may not use
 * it; or it refused). If our SYN-ACK echoed the option, the client sends a CLC
 * PROPOSAL at once and waits for the answer: read it and answer with a DECLINE of
 * @reason, after which both ends continue on the connection as plain TCP (smc-wire
 * spec 2.7, RFC 7609), so the application never reads CLC bytes. A client DECLINE is
 * read too (no answer). Anything else (application data, EOF, nothing within
 * @wait_ms, SMC_DECLINE_WAIT_MS or SMC_DECLINE_STALE_MS: the echo was not sent) stays
 * for the application: the app's accept() waits until the first bytes come, up to
 * that long, on this path only. Returns 0, or -ECONNRESET when
 * the connection cannot be given to the application (a CLC message cut short: part
 * of it is consumed; or the DECLINE cannot be sent). */
static int accept_decline(struct smc_sock *l, int fd, uint32_t reason, unsigned wait_ms) {
        static const uint8_t eye_r[4] = { 0xE2, 0xD4, 0xC3, 0xD9 }, eye_d[4] = { 0xE2, 0xD4, 0xC3, 0xC4 };
        uint64_t deadline = now_ms() + wait_ms;
        struct smc_clc_decline d = { .version = 1, .diag = reason };
        uint8_t buf[SMC_CLC_MAX_LEN];
        struct smc_clc_hdr h;
        ssize_t n, w;

        n = recv_until(fd, buf, 8, MSG_PEEK, deadline);
        if (n <= 0)
                return 0; /* nothing (or EOF, or an error the application will see) */
        if (memcmp(buf, eye_r, (size_t) n < 4 ? (size_t) n : 4) != 0 &&
            memcmp(buf, eye_d, (size_t) n < 4 ? (size_t) n : 4) != 0)
                return 0; /* application data: the client did not get the echo */
        if (n < 8 || smc_clc_decode_hdr(buf, 8, &h) < 0 ||
            (h.type != SMC_CLC_PROPOSAL && h.type != SMC_CLC_DECLINE))
                return 0; /* data that starts like a CLC header (only peeked): the app's */
        n = recv_until(fd, buf, h.length, 0, now_ms() + 5000); /* (it follows its header) */
        if (n != (ssize_t) h.length) {
                smc_debug("accept fd %d: CLC message of %u bytes cut short at %zd: ECONNRESET", l->fd, h.length, n);
                return -ECONNRESET;
        }
        if (h.type == SMC_CLC_DECLINE) {
                smc_debug("accept fd %d: the client declined SMC: TCP", l->fd);
                return 0;
        }
        w = smc_clc_decline_encode(&d, buf, sizeof(buf));
        if (w <= 0 || sys_sendto(fd, buf, (size_t) w, MSG_NOSIGNAL, NULL, 0) != w) {
                smc_debug("accept fd %d: cannot send the CLC DECLINE: ECONNRESET", l->fd);
                return -ECONNRESET;
        }
        smc_debug("accept fd %d: smcd cannot take an SMC client: its proposal declined (0x%08x): TCP", l->fd,
                  reason);
        return 0;
}

/* A TCP connection @fd accepted from an SMC-R listener @l: hand it to smcd for the
 * server side of the SMC-R handshake (SMCR, role server). smcd answers at once:
 * PENDING (it runs the handshake and delivers the result on the accept channel, as
 * NEW_CONN: accept_chan()), or TCP (the peer did not ask for SMC). When smcd cannot
 * take it (unreachable, or an error), a CLC proposal the echo may have brought is
 * declined here (accept_decline()), with the reason in *@ret_reason. Returns -EAGAIN
 * (@fd closed: smcd has it now, or it broke during the decline), or -ENOPROTOOPT
 * (@fd is a plain TCP connection, not closed). */
static int accept_smcr(struct smc_sock *l, int fd, uint32_t *ret_reason) {
        union smc_ctl_msg m, reply;
        int fds[SMC_CTL_MAX_FDS];
        unsigned wait_ms = SMC_DECLINE_WAIT_MS;
        uint32_t reason;
        int n;

        smc_ctl_init(&m, SMC_CTL_SMCR, 0);
        m.smcr.role = SMC_CTL_ROLE_SERVER;
        m.smcr.listener_id = l->listener_id;
        m.smcr.sndbuf = l->sndbuf > 0 ? (uint32_t) l->sndbuf : 0;
        m.smcr.rcvbuf = l->rcvbuf > 0 ? (uint32_t) l->rcvbuf : 0;
        n = smc_ctl_client_call(&m, &fd, 1, &reply, fds);
        if (n < 0) {
                /* smcd is away, or this process may not use it (another uid than the
                 * listener's, a runtime directory it cannot enter): the listener
                 * still echoes the option, so a client may be sending CLC */
                smc_debug("accept fd %d: SMCR seq %u (server) failed: %s: TCP", l->fd, m.hdr.seq, strerror(-n));
                reason = SMC_CLC_DECL_NOSMCDEV;
                goto decline;
        }
        for (int i = 0; i < n; i++)
                sys_close(fds[i]);
        if (reply.hdr.type == SMC_CTL_CONNECT_REPLY && reply.conn.mode == SMC_CTL_MODE_SMCR_PENDING) {
                sys_close(fd);
                return -EAGAIN;
        }
        if (reply.hdr.type == SMC_CTL_CONNECT_REPLY && reply.conn.mode == SMC_CTL_MODE_TCP) {
                /* smcd saw that the client did not get the echo */
                smc_debug("accept fd %d: SMCR seq %u (server): TCP, reason 0x%08x", l->fd, m.hdr.seq,
                          reply.conn.fallback_reason);
                return -ENOPROTOOPT;
        }
        if (reply.hdr.type == SMC_CTL_ERROR)
                smc_debug("accept fd %d: SMCR seq %u (server): ERROR %s: %s: TCP", l->fd, m.hdr.seq,
                          strerror(-reply.error.error), reply.error.msg);
        else
                smc_debug("accept fd %d: SMCR seq %u (server): reply type %u: TCP", l->fd, m.hdr.seq,
                          reply.hdr.type);
        reason = reply.hdr.type == SMC_CTL_ERROR && reply.error.detail ? reply.error.detail : SMC_CLC_DECL_INTERR;
        if (reply.hdr.type == SMC_CTL_ERROR && reply.error.error == -ESTALE)
                wait_ms = SMC_DECLINE_STALE_MS;

decline:
        if (accept_decline(l, fd, reason, wait_ms) < 0) {
                struct linger lg = { .l_onoff = 1, .l_linger = 0 };

                /* (reset, as a connection that broke before accept) */
                (void) sys_setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
                sys_close(fd);
                return -EAGAIN;
        }
        *ret_reason = reason;
        return -ENOPROTOOPT;
}

/* Is TCP connection @fd, accepted on SMC listener @l, one that smcd's hints sent to
 * TCP? Matched by the address the client connected to, as the client matched it: the
 * listener's own address, or for a wildcard listener the connection's (getsockname,
 * only while some hint names the listener's port). So every SO_REUSEPORT listener of
 * a hinted address counts its connections as hinted, and a wildcard listener's
 * clients of other addresses are not. */
static bool accepted_hinted(struct smc_sock *l, int fd) {
        struct smc_ctl_addr local = l->listen_addr;

        if (!smc_hint_port(local.family ? local.port : 0))
                return false;
        if (!local.family || addr_is_any(&local)) {
                struct sockaddr_storage ss;
                socklen_t sl = sizeof(ss);

                if (sys_getsockname(fd, (struct sockaddr *) &ss, &sl) < 0 ||
                    smc_ctl_addr_from_sockaddr(&local, (struct sockaddr *) &ss, sl) < 0)
                        return false;
                addr_unmap(&local);
        }
        return smc_hint_accepted(&local);
}

/* Did TCP connection @fd, accepted on listener @l (TCP socket @t), come with the SMC
 * TCP option in its SYN? Only such a connection can be SMC-R, or SMC-D from another
 * network namespace: the others skip the SMCR round trip to smcd (a plain client
 * of an SMC listener paid it on every accept). Read from the SYN the kernel saved
 * (TCP_SAVE_SYN, set on the listener at its first accept unless the program uses it
 * itself; TCP_SAVED_SYN frees it). Returns false only when the saved SYN shows no
 * option; true when it has one or nothing tells (not saved, not parsed). */
static bool syn_offered_smc(struct smc_sock *l, int t, int fd) {
        static const uint8_t exid[4] = { 0xE2, 0xD4, 0xC3, 0xD9 }; /* (tcpopt.h) */
        int peek = __atomic_load_n(&l->syn_peek, __ATOMIC_RELAXED);
        uint8_t b[256];
        socklen_t len = sizeof(b);
        size_t off, end;

        if (peek == 0) {
                int v = 0, one = 1;
                socklen_t vl = sizeof(v);

                peek = sys_getsockopt(t, IPPROTO_TCP, TCP_SAVE_SYN, &v, &vl) == 0 && v == 0 &&
                                       !__atomic_load_n(&l->app_save_syn, __ATOMIC_RELAXED) &&
                                       sys_setsockopt(t, IPPROTO_TCP, TCP_SAVE_SYN, &one, sizeof(one)) == 0
                               ? 1
                               : -1;
                __atomic_store_n(&l->syn_peek, peek, __ATOMIC_RELAXED);
                return true; /* (this one's SYN came before) */
        }
        if (peek < 0 || __atomic_load_n(&l->app_save_syn, __ATOMIC_RELAXED) ||
            sys_getsockopt(fd, IPPROTO_TCP, TCP_SAVED_SYN, b, &len) < 0 || len < 20)
                return true;
        if ((b[0] >> 4) == 4 && b[9] == IPPROTO_TCP)
                off = (size_t) (b[0] & 15) * 4;
        else if ((b[0] >> 4) == 6 && b[6] == IPPROTO_TCP)
                off = 40;
        else
                return true; /* (IPv6 extension headers: not followed) */
        if (off + 20 > len)
                return true;
        end = off + (size_t) (b[off + 12] >> 4) * 4;
        if (end > len)
                return true;
        for (size_t i = off + 20; i < end;) {
                if (b[i] == 0)
                        break;
                if (b[i] == 1) {
                        i++;
                        continue;
                }
                if (i + 1 >= end || b[i + 1] < 2 || i + b[i + 1] > end)
                        return true;
                if (b[i] == 254 && b[i + 1] >= 6 && !memcmp(b + i + 2, exid, 4))
                        return true;
                i += b[i + 1];
        }
        return false;
}

/* accept4 on the listener's TCP socket @t; registers the connection as TCP. With
 * @notice (the TCP socket of an SMC listener: the peer did not come through smcd),
 * smcd is told of it (fallback_notice()), unless smcd's hints sent its client to TCP
 * (accepted_hinted(): then it is counted, SMCD_DECL_SHORTCONN). */
static int accept_tcp(struct smc_sock *l, int t, struct sockaddr *addr, socklen_t *len, int flags,
                      bool notice) {
        struct sockaddr_storage own;
        /* (a bad @len is the kernel's to report, EFAULT, once there is a connection;
         * with none, EAGAIN as TCP's) */
        socklen_t own_len = sizeof(own), want = addr && len && !smc_uptr_bad(len) ? *len : 0;
        struct smc_sock *s;
        bool hinted = false;
        uint32_t declined = 0;
        int fd;

        if (notice && !addr) /* the app asked for no address: take it for the notice */
                fd = sys_accept4(t, (struct sockaddr *) &own, &own_len, flags);
        else
                fd = sys_accept4(t, addr, len, flags);
        if (fd < 0)
                return -errno;
        if (notice && l->listen_smcr && syn_offered_smc(l, t, fd)) {
                int r = accept_smcr(l, fd, &declined);

                if (r != -ENOPROTOOPT)
                        return r; /* -EAGAIN: smcd runs the handshake, NEW_CONN follows */
                /* TCP: the peer did not ask for SMC, or its proposal was declined */
        }
        if (notice && !env_no_hints && accepted_hinted(l, fd)) {
                /* its clients connect over TCP for smcd's hint (smc-hints.h): counted in
                 * batches, not listed (a notice each would cost smcd a lookup) */
                smc_hint_count(SMC_CTL_ROLE_SERVER);
                notice = false;
                hinted = true;
        }
        if (notice) {
                if (!addr)
                        fallback_notice(fd, (struct sockaddr *) &own, own_len, SMC_CTL_ROLE_SERVER, 0);
                else if (len && *len <= want) /* the app's copy is whole */
                        fallback_notice(fd, addr, *len, SMC_CTL_ROLE_SERVER, 0);
                else if (sys_getpeername(fd, (struct sockaddr *) &own, &own_len) == 0)
                        fallback_notice(fd, (struct sockaddr *) &own, own_len, SMC_CTL_ROLE_SERVER, 0);
        }
        if ((unsigned) fd >= FD_MAX)
                return fd; /* works as a plain TCP socket, only unmanaged */
        s = sock_alloc(fd, l->family, SOCK_TCP, flags & SOCK_NONBLOCK);
        if (s && declined)
                s->fallback_reason = declined; /* its proposal was declined here */
        else if (s && notice)
                s->fallback_reason = SMC_CLC_DECL_PEERNOSMC; /* the peer did not come through smcd */
        else if (s && hinted)
                s->fallback_reason = SMCD_DECL_SHORTCONN;
        if (!s || sock_insert(s) < 0) {
                if (s)
                        sock_release(s);
                sys_close(fd);
                return -ENOMEM;
        }
        return fd;
}

#define ACCEPT_STREAK 16u /* accepts in a row from one queue, then the other first */

/* The listener's TCP socket T is kept nonblocking for this library, but its open file
 * is shared with every copy: a new image that got T in the listener's place (exec
 * after fork: exec_prepare_listener()) has it follow the program's blocking mode then,
 * as a plain TCP listener there must, and keeps it. So for a listener that may be
 * held by such an image (or a process without the library: passed, duplicated and
 * exec'd listeners are tainted for good, lshare_taint()), T is polled first (one call,
 * as the failed accept4 it replaces when empty): true if it has no connection (accept4
 * could block while SMC connections wait on the channel). Another holder may still
 * take a connection between the poll and the accept, which then waits for the next
 * TCP one (as two blocking TCP acceptors racing). A listener shared by fork() alone
 * (nginx's workers) is held by processes of this library only, where T stays
 * nonblocking: no poll (a system call per TCP accept: nginx `Connection: close`,
 * whose connections are hinted to TCP). */
static bool accept_tcp_may_block(struct smc_sock *s) {
        struct pollfd p = { .fd = s->hidden, .events = POLLIN };

        if (listen_sole(s))
                return false;
        if (s->listen_fork_gen != ~0u && s->lshare && !s->lshare_dropped &&
            atomic_load_explicit(&s->lshare->holders, memory_order_relaxed) < LSHARE_TAINTED)
                return false; /* (forked copies only) */
        return sys_poll(&p, 1, 0) == 0;
}

SMC_PUBLIC int smc_accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags) {
        struct smc_sock *s = sock_lookup(fd);
        int st;

        if (!s)
                return sys_accept4(fd, addr, len, flags);
        if (flags & ~(SOCK_NONBLOCK | SOCK_CLOEXEC)) {
                errno = EINVAL;
                return -1;
        }
        st = sock_state(s);
        if (st == SOCK_LISTEN_TCP)
                return ret_errno(accept_tcp(s, fd, addr, len, flags, false));
        if (st == SOCK_SMCD) {
                errno = EINVAL;
                return -1;
        }
        if (st != SOCK_LISTEN_SMC)
                return sys_accept4(fd, addr, len, flags); /* EINVAL, as TCP */
        if (__builtin_expect(s->chan < 0, 0)) {
                pthread_mutex_lock(&s->lock);
                listen_reregister(s);
                pthread_mutex_unlock(&s->lock);
                rereg_maybe();
        }

        /* the listener's SO_RCVTIMEO (on its TCP socket): read when the call first
         * blocks; 0: none yet read, UINT64_MAX: no timeout */
        uint64_t deadline = 0;
        unsigned relisten_waits = 0;
        bool relisten;
        int pr;

        for (;;) {
                unsigned turn = atomic_load_explicit(&s->accept_turn, memory_order_relaxed);
                struct pollfd p = { .fd = fd, .events = POLLIN };
                int r = -EAGAIN, wait_ms = -1;

                /* The queue that served the last accept first (a load of one kind
                 * then costs no failed call on the other), but after ACCEPT_STREAK in
                 * a row the other one, so neither waits long behind a busy one.
                 * (Threads racing here only change the order.) */
                for (unsigned i = 0; i < 2; i++) {
                        unsigned q = (turn + i) & 1;

                        if (q) {
                                if (accept_tcp_may_block(s))
                                        continue; /* nothing there: it would block */
                                r = accept_tcp(s, s->hidden, addr, len, flags, true);
                        } else {
                                do
                                        r = accept_chan(s, addr, len, flags);
                                while (r == -EPROTO);
                        }
                        if (r != -EAGAIN) {
                                unsigned streak = i == 0 ? (turn >> 1) + 1 : 1;

                                /* a TCP connection on an SMC listener (a client that
                                 * fell back, maybe because smcd restarted), or one an
                                 * earlier smcd queued: once a second, a look */
                                if (r >= 0 && s->dchan >= 0 &&
                                    coarse_ms() - __atomic_load_n(&s->revive_ms[q], __ATOMIC_RELAXED) >= RELISTEN_MS) {
                                        bool revived;

                                        pthread_mutex_lock(&s->lock);
                                        revived = listen_revive(s, q);
                                        pthread_mutex_unlock(&s->lock);
                                        if (revived)
                                                rereg_maybe(); /* (as after a LISTEN) */
                                }

                                if (streak >= ACCEPT_STREAK)
                                        atomic_store_explicit(&s->accept_turn, q ^ 1, memory_order_relaxed);
                                else
                                        atomic_store_explicit(&s->accept_turn, q | (streak << 1),
                                                              memory_order_relaxed);
                                return ret_errno(r);
                        }
                }
                /* O_NONBLOCK is the open file's: a copy made by fork() or dup() may
                 * have changed it (the library sets it on the listener's fd) */
                if (s->listen_fork_gen != atomic_load_explicit(&fork_gen, memory_order_relaxed)) {
                        int fl = sys_fcntl(s->fd, F_GETFL, 0);

                        if (fl >= 0)
                                atomic_store(&s->nonblock, (fl & O_NONBLOCK) != 0);
                }
                if (atomic_load(&s->nonblock)) {
                        errno = EAGAIN;
                        return -1;
                }
                if (deadline == 0) {
                        struct timeval tv;
                        socklen_t tl = sizeof(tv);

                        deadline = UINT64_MAX;
                        /* (more than about 100 years would wrap the sum: none) */
                        if (s->hidden >= 0 && sys_getsockopt(s->hidden, SOL_SOCKET, SO_RCVTIMEO, &tv, &tl) == 0 &&
                            (tv.tv_sec > 0 || tv.tv_usec > 0) && tv.tv_sec < 3200000000)
                                deadline = now_ms() + (uint64_t) tv.tv_sec * 1000u + ((uint64_t) tv.tv_usec + 999u) / 1000u;
                }
                if (deadline != UINT64_MAX) {
                        uint64_t now = now_ms();

                        if (now >= deadline) {
                                errno = EAGAIN; /* as TCP's accept after SO_RCVTIMEO */
                                return -1;
                        }
                        wait_ms = deadline - now > INT_MAX ? INT_MAX : (int) (deadline - now);
                }
                /* registered with an smcd that is gone, and held by forked children
                 * that may close their copies meanwhile (a server that blocks in
                 * accept right after its fork): look again every RELISTEN_MS while
                 * blocked, RELISTEN_WAITS times in a call */
                relisten = false;
                if (s->chan < 0 && relisten_waits < RELISTEN_WAITS && listen_may_return(s)) {
                        relisten_waits++;
                        if (wait_ms < 0 || wait_ms > RELISTEN_MS) {
                                wait_ms = RELISTEN_MS;
                                relisten = true;
                        }
                }
                pr = sys_poll(&p, 1, wait_ms);
                if (pr < 0) {
                        /* with a timeout the kernel fails the call with EINTR after any
                         * handler (sock_intr_errno()), SA_RESTART or not */
                        if (errno == EINTR && deadline == UINT64_MAX && restart_after_signal())
                                continue;
                        return -1; /* EINTR */
                }
                if (pr == 0 && relisten) {
                        pthread_mutex_lock(&s->lock);
                        listen_reregister(s);
                        pthread_mutex_unlock(&s->lock);
                }
        }
}

SMC_PUBLIC int smc_accept(int fd, struct sockaddr *addr, socklen_t *len) {
        return smc_accept4(fd, addr, len, 0);
}

/* ------------------------------------------------------------------------- */
/* connect */

/* Ask smcd to run the CLC handshake (SMCR) on T, connected over TCP (@t: the app's
 * number, or the copy a nonblocking connect's thread holds). @sndbuf, @rcvbuf: the
 * app's sizes (bytes, 0 = not set). Returns 1 with *reply / *fds / *n the
 * CONNECT_REPLY of mode SMCR (or SMCD: a listener in another namespace), 2 for TCP on
 * T (*ret_reason set), or -ECONNRESET when the connection broke during the handshake
 * (T is shut down then), -ETIMEDOUT when the peer did not answer. */
static int smcr_ask(int t, int sndbuf, int rcvbuf, union smc_ctl_msg *reply, int *fds, int *n, uint32_t *ret_reason) {
        union smc_ctl_msg m;

        smc_ctl_init(&m, SMC_CTL_SMCR, 0);
        m.smcr.role = SMC_CTL_ROLE_CLIENT;
        m.smcr.sndbuf = sndbuf > 0 ? (uint32_t) sndbuf : 0;
        m.smcr.rcvbuf = rcvbuf > 0 ? (uint32_t) rcvbuf : 0;
        *n = smc_ctl_client_call_timeout(&m, &t, 1, reply, fds, SMC_SMCR_TIMEOUT_MS);
        if (*n < 0) {
                /* smcd went away during the handshake, or stalled: the stream may hold
                 * CLC bytes. Shut it for every holder: a stalled smcd that wakes up
                 * cannot send its proposal any more (an accepting library that cannot
                 * reach its smcd waits that long for one: accept_decline()) */
                (void) sys_shutdown(t, SHUT_RDWR);
                smc_debug("connect T %d: SMCR seq %u failed: %s: ECONNRESET", t, m.hdr.seq, strerror(-*n));
                *ret_reason = SMC_CLC_DECL_INTERR;
                return -ECONNRESET;
        }
        if (reply->hdr.type == SMC_CTL_ERROR) {
                smc_debug("connect T %d: SMCR seq %u: ERROR %s (detail 0x%08x): %s", t, m.hdr.seq,
                          strerror(-reply->error.error), reply->error.detail, reply->error.msg);
                /* the stream may hold CLC bytes (helper 124: a DECLINE read as data
                 * after ETIMEDOUT): it ends here, for every holder */
                (void) sys_shutdown(t, SHUT_RDWR);
                return reply->error.error == -ETIMEDOUT ? -ETIMEDOUT : -ECONNRESET;
        }
        if (reply->hdr.type != SMC_CTL_CONNECT_REPLY) {
                smc_debug("connect T %d: SMCR seq %u: reply of type %u seq %u: ECONNRESET", t, m.hdr.seq,
                          reply->hdr.type, reply->hdr.seq);
                (void) sys_shutdown(t, SHUT_RDWR);
                for (int i = 0; i < *n; i++)
                        sys_close(fds[i]);
                return -ECONNRESET;
        }
        if (reply->conn.mode == SMC_CTL_MODE_TCP) {
                *ret_reason = reply->conn.fallback_reason ? reply->conn.fallback_reason : SMC_CLC_DECL_INTERR;
                smc_debug("connect T %d: SMCR seq %u: smcd says TCP, reason 0x%08x", t, m.hdr.seq,
                          reply->conn.fallback_reason);
                return 2;
        }
        /* (SMCD: a listener in another network namespace of this host, smcd
         * --cross-netns; the connection is a local one then) */
        if ((reply->conn.mode != SMC_CTL_MODE_SMCR && reply->conn.mode != SMC_CTL_MODE_SMCD) || *n < 2) {
                smc_debug("connect T %d: SMCR seq %u: reply mode %u with %d fds: ECONNRESET", t, m.hdr.seq,
                          reply->conn.mode, *n);
                (void) sys_shutdown(t, SHUT_RDWR);
                for (int i = 0; i < *n; i++)
                        sys_close(fds[i]);
                return -ECONNRESET;
        }
        return 1;
}

/* Whether descriptors @a and @b are the same open file (the same socket). */
static bool same_file(int a, int b) {
        struct stat sa, sb;

        /* (the system call: the library's fstat() takes the socket's lock) */
        return smc_syscall(SYS_fstat, a, &sa) == 0 && smc_syscall(SYS_fstat, b, &sb) == 0 && sa.st_dev == sb.st_dev &&
               sa.st_ino == sb.st_ino;
}

/* Give up the connection of CONNECT_REPLY @reply (its X and Y @x, @y, closed here)
 * before the program had it: a connect cancelled or failed at its set-up. The peer
 * learns of it as of a process that died holding it (FIN): for SMC-D set up by the
 * smcd we talk to (@inst), which holds a copy of Y, by the hang-up of X; else (SMC-R,
 * or an smcd that restarted since) by a CLOSE with abort. (A CLOSE for the former
 * closed smcd's endpoint without a word to the peer, whose read waited for ever:
 * helper 124.) */
static void conn_discard(const union smc_ctl_msg *reply, int x, int y, uint32_t inst) {
        sys_close(x);
        sys_close(y);
        if (reply->conn.mode == SMC_CTL_MODE_SMCR || !inst)
                ctl_close_conn(reply->conn.conn_id, true, 0);
}

/* Set up the SMC connection of CONNECT_REPLY @reply (its descriptors @fds, @n of
 * them; @inst: the smcd that answered, 0 = another since) on @s (locked; its number
 * is T): map the buffers, keep T hidden (s->hidden if the caller made that copy
 * already, else a new one) and dup3() X onto the app's number, moving its epoll
 * registrations. @src: the local address; @addr, @addrlen: the peer's; @via_clc: T
 * carried a CLC handshake. Returns 1 (state SMCD), 0 for TCP on T (*ret_reason
 * INTERR; never when @via_clc) or -ECONNRESET (@via_clc: T's stream cannot serve as
 * TCP). The reply's descriptors are kept or closed in every case. */
static int connect_install(struct smc_sock *s, const union smc_ctl_msg *reply_in, int *fds, int n, uint32_t inst,
                           const struct smc_ctl_addr *src_in, const struct sockaddr *addr, socklen_t addrlen,
                           bool via_clc, uint32_t *ret_reason) {
        union smc_ctl_msg reply = *reply_in;
        struct smc_ctl_addr src = *src_in;
        void *rx = NULL, *tx = NULL;
        bool own_hidden = s->hidden < 0;
        int r, x, y, hidden = -1, fdfl;

        x = fds[0];
        y = fds[1];
        r = conn_map(&reply.conn, fds, n, inst, &rx, &tx);
        if (r < 0) {
                smc_debug("connect fd %d: seq %u, mode %u: mapping the buffers %016llx/%016llx failed: %s", s->fd,
                          reply.hdr.seq, reply.conn.mode, (unsigned long long) reply.conn.rx.id,
                          (unsigned long long) reply.conn.tx.id, strerror(-r));
                goto fail;
        }
        fdfl = sys_fcntl(s->fd, F_GETFD, 0);
        if (fdfl < 0) {
                smc_debug("connect fd %d: F_GETFD failed: %m", s->fd);
                goto fail;
        }
        hidden = own_hidden ? sys_fcntl(s->fd, F_DUPFD_CLOEXEC, 3) : s->hidden;
        if (hidden < 0) {
                smc_debug("connect fd %d: F_DUPFD_CLOEXEC failed: %m", s->fd);
                goto fail;
        }
        if (!own_hidden && !same_file(s->fd, hidden)) {
                /* (a dup2() onto the number just now, whose hook is waiting for the
                 * lock to cancel this connect: the number is not T's any more) */
                smc_debug("connect fd %d: the number is no longer the socket's", s->fd);
                goto fail;
        }
        /* the point of no return: the app's fd number becomes X */
        prereg_detach_fd(s, own_hidden ? s->fd : hidden); /* (CONNECTING: T's copy stood in) */
        if (sys_dup3(x, s->fd, (fdfl & FD_CLOEXEC) ? O_CLOEXEC : 0) < 0) {
                /* s->fd still is T */
                smc_debug("connect fd %d: dup3 failed: %m", s->fd);
                prereg_attach(s);
                goto fail;
        }
        sys_close(x);
        x = s->fd;
        if (atomic_load(&s->nonblock))
                (void) set_nonblock_fresh(x);
        if (s->rcvtimeo_set) {
                struct timeval tv;
                socklen_t tl = sizeof(tv);

                if (sys_getsockopt(hidden, SOL_SOCKET, SO_RCVTIMEO, &tv, &tl) == 0)
                        (void) sys_setsockopt(x, SOL_SOCKET, SO_RCVTIMEO, &tv, tl);
        }
        s->hidden = hidden;
        s->conn_id = reply.conn.conn_id;
        s->conn_instance = smc_ctl_client_instance();
        s->y_instance = inst;
        note_conn_instance(s->conn_instance);
        s->conn_role = SMC_CTL_ROLE_CLIENT;
        s->fallback_reason = 0;
        if (addr_for_family(&src, s->family, &s->local, &s->local_len) < 0)
                s->local_len = 0;
        s->peer_len = addrlen < sizeof(s->peer) ? addrlen : sizeof(s->peer);
        memcpy(&s->peer, addr, s->peer_len);
        r = smc_ring_init(&s->ep, rx, reply.conn.rx.size, tx, reply.conn.tx.size, x, y);
        if (r < 0) {
                /* cannot happen on Linux (mutex init); keep the socket consistent:
                 * it is a dead connection now */
                sys_close(y);
                ctl_close_conn(reply.conn.conn_id, true, 0);
                prereg_attach(s);
                return r;
        }
        s->ep.x_mode_is_app = true;
        smc_ring_track_dirty(&s->ep);
        ep_tune(&s->ep, &reply);
        if (s->cork)
                (void) smc_ring_set_cork(&s->ep, true); /* TCP_CORK set before connect() */
        if (s->linger_reset)
                smc_ring_set_linger_reset(&s->ep, true); /* SO_LINGER set before connect() */
        {
                /* SO_RCVLOWAT set before connect() (here, before exec or through a
                 * copy): on the TCP socket, T */
                int lowat = 1;
                socklen_t ll = sizeof(lowat);

                if (sys_getsockopt(hidden, SOL_SOCKET, SO_RCVLOWAT, &lowat, &ll) == 0 && lowat > 1)
                        smc_ring_set_rcvlowat(&s->ep, lowat);
        }
        s->smcr = reply.conn.mode == SMC_CTL_MODE_SMCR;
        s->ep.peer_is_daemon = s->smcr;
        s->conn_fork_gen = atomic_load(&fork_gen);
        s->conn_euid = geteuid();
        sock_set_state(s, SOCK_SMCD);
        prereg_attach(s); /* X in the app's epoll sets, as T was: now that it is SMC-D */
        return 1;

fail:
        if (hidden >= 0 && own_hidden)
                sys_close(hidden);
        conn_discard(&reply, x, y, inst);
        *ret_reason = SMC_CLC_DECL_INTERR;
        if (via_clc) {
                /* T is connected and its CLC bytes are gone: it cannot serve as TCP */
                smc_debug("connect fd %d: SMC-R connection %016llx aborted: ECONNRESET", s->fd,
                          (unsigned long long) reply.conn.conn_id);
                return -ECONNRESET;
        }
        smc_debug("connect fd %d: connection %016llx aborted: TCP, reason INTERR", s->fd,
                  (unsigned long long) reply.conn.conn_id);
        return 0;
}

/* ---- nonblocking connect over CLC ----------------------------------------------------
 * A nonblocking connect() that goes over CLC (SMC-R, SMC-D between namespaces) says
 * EINPROGRESS at once, as TCP's and as the kernel's SMC (smc_connect_work): a thread
 * of its own waits for TCP's handshake on a copy of T (s->hidden), asks smcd for the
 * CLC handshake (smcr_ask()) and installs X (connect_install()), while the socket is
 * CONNECTING. An event loop is never held up by a dead host's SYN retries or by the
 * server's accept. Meanwhile the app's number is T, but the socket is not ready, as
 * kernel SMC's until its handshake ends: the program's epoll sets hold T's copy
 * without events (prereg_add_fd()), poll/ppoll/select/pselect leave it out once TCP's
 * handshake is done (poll_connecting()). No call touches T's stream: a nonblocking one
 * answers at once (EAGAIN, EALREADY, SO_ERROR 0, a shutdown kept for the connection),
 * a blocking one waits for the end (connect_settle()); close and a connect to
 * AF_UNSPEC cancel it, and a connection already made is then closed as by a dying
 * process (conn_discard()). */
struct connect_async {
        struct smc_sock *s;
        int t;          /* s->hidden: the thread's copy of T */
        uint32_t inst;  /* the smcd that answered CONNECT */
        socklen_t addrlen;
        struct sockaddr_storage addr;
};

/* Sleepers of the poll family with a connecting socket among their fds
 * (poll_connecting()): each waits on an eventfd of its own besides the program's
 * fds, and connect_wake() writes to those with the socket among their fds when its
 * connect ends, so that they see it at once. Entries live on the sleepers' stacks. */
struct connect_waiter {
        int efd;
        const struct pollfd *fds; /* the call's (poll_connecting()'s @fds, @n): only a */
        nfds_t n;                 /* connect among them wakes it */
        struct connect_waiter *next;
};
static pthread_mutex_t cwait_lock = PTHREAD_MUTEX_INITIALIZER;
static struct connect_waiter *cwait_list;

static void cwait_atfork_prepare(void) {
        pthread_mutex_lock(&cwait_lock);
}

static void cwait_atfork_parent(void) {
        pthread_mutex_unlock(&cwait_lock);
}

static void cwait_atfork_child(void) {
        /* the sleepers are the parent's threads: their eventfds are not the child's
         * (helper 125: they leaked into it) */
        for (struct connect_waiter *w = cwait_list; w; w = w->next)
                (void) sys_close(w->efd);
        cwait_list = NULL;
        pthread_mutex_unlock(&cwait_lock);
}

/* cwait_lock with the thread's signals blocked: poll() is async-signal-safe, and a
 * handler that polls a connecting socket must not find its own thread holding it
 * (helper 125). *@old: the mask to give back. */
static void cwait_lock_take(sigset_t *old) {
        sigset_t all;

        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, old);
        pthread_mutex_lock(&cwait_lock);
}

static void cwait_lock_give(const sigset_t *old) {
        pthread_mutex_unlock(&cwait_lock);
        pthread_sigmask(SIG_SETMASK, old, NULL);
}

/* Add @w (its eventfd made here) to the sleepers, for a connect among @fds (@n);
 * false: no eventfd, and the caller looks every 1 .. 8 ms instead. Not made, or
 * given up (helper 125): when none is left; when its number is within 8 of
 * RLIMIT_NOFILE (a connection being made needs the descriptors left); when @fds
 * holds its number (the program's entry was closed: the kernel must say POLLNVAL for
 * it, not poll the eventfd). Numbers 0 .. 2 are not used: a program that closed its
 * stdin may dup2() onto 0 meanwhile. */
static bool cwait_add(struct connect_waiter *w, const struct pollfd *fds, nfds_t n) {
        sigset_t old;
        uint64_t lim = nofile_soft();
        int e = sys_fd_off_stdio((int) smc_syscall(SYS_eventfd2, 0, EFD_CLOEXEC | EFD_NONBLOCK));

        w->efd = -1;
        if (e >= 0 && e < 3) {
                (void) sys_close(e); /* (no number above 2 free) */
                e = -1;
        }
        if (e < 0)
                return false;
        if (lim > 0 && (uint64_t) e + 8u >= lim) {
                (void) sys_close(e);
                return false;
        }
        for (nfds_t i = 0; i < n; i++)
                if (fds[i].fd == e) {
                        (void) sys_close(e);
                        return false;
                }
        w->efd = e;
        w->fds = fds;
        w->n = n;
        cwait_lock_take(&old);
        w->next = cwait_list;
        cwait_list = w;
        cwait_lock_give(&old);
        return true;
}

static void cwait_remove(struct connect_waiter *w) {
        sigset_t old;

        if (w->efd < 0)
                return;
        cwait_lock_take(&old);
        for (struct connect_waiter **pp = &cwait_list; *pp; pp = &(*pp)->next)
                if (*pp == w) {
                        *pp = w->next;
                        break;
                }
        cwait_lock_give(&old);
        (void) sys_close(w->efd);
        w->efd = -1;
}

/* A connecting socket changed (TCP's handshake done, or, @ended, the connect
 * ended): wake connect_settle()'s waiters (futex on s->state) and, at the end, the
 * poll_connecting() sleepers with @s among their fds (before it, such a sleeper polls
 * T itself, whose handshake wakes it). */
static void connect_wake(struct smc_sock *s, bool ended) {
        uint64_t one = 1;

        (void) smc_syscall(SYS_futex, &s->state, FUTEX_WAKE_PRIVATE, INT_MAX);
        if (!ended)
                return;
        pthread_mutex_lock(&cwait_lock); /* (the connect thread: signals blocked) */
        for (struct connect_waiter *w = cwait_list; w; w = w->next)
                for (nfds_t i = 0; i < w->n; i++)
                        if (w->fds[i].fd == s->fd) {
                                (void) sys_write(w->efd, &one, sizeof(one));
                                break;
                        }
        pthread_mutex_unlock(&cwait_lock);
}

/* Wait until @s is no longer CONNECTING (no lock held). */
static void connect_settle(struct smc_sock *s) {
        while (sock_state(s) == SOCK_CONNECTING) {
                struct timespec ts = { .tv_nsec = 100 * 1000000L }; /* (a lost wake-up costs this) */

                (void) smc_syscall(SYS_futex, &s->state, FUTEX_WAIT_PRIVATE, SOCK_CONNECTING, &ts);
        }
}

/* Wait until CONNECTING @s's thread has seen TCP's handshake end: connected (the CLC
 * handshake runs, connect_clc) or not (the connect has ended). Microseconds, once T
 * is done (connect_tcp_done()). No lock held. */
static void connect_settle_tcp(struct smc_sock *s) {
        while (sock_state(s) == SOCK_CONNECTING && !atomic_load(&s->connect_clc)) {
                struct timespec ts = { .tv_nsec = 10 * 1000000L };

                (void) smc_syscall(SYS_futex, &s->state, FUTEX_WAIT_PRIVATE, SOCK_CONNECTING, &ts);
        }
}

/* Whether CONNECTING @s is past TCP's handshake, connected or failed (its stream is
 * smcd's now or about to be, or the thread is about to end as TCP); false while T is
 * in SYN_SENT. */
static bool connect_tcp_done(struct smc_sock *s) {
        /* (s->hidden without the lock: at worst a closed or another number, for a
         * connect that has just ended, after which the caller looks at the state) */
        struct pollfd p = { .fd = __atomic_load_n(&s->hidden, __ATOMIC_RELAXED), .events = POLLOUT };

        return atomic_load(&s->connect_clc) || sys_poll(&p, 1, 0) != 0;
}

/* Cancel the connect of CONNECTING @s (locked; the lock is let go of meanwhile):
 * shutdown(@how) on T (TCP's answer to a shutdown or a close in SYN_SENT: the
 * connect ends; after it, smcd's handshake fails at once) and wait for the thread to
 * end (state TCP then, or SMCD when it had just finished). Returns the shutdown's
 * result (0 or -errno), 0 when not CONNECTING. */
static int connect_cancel_locked(struct smc_sock *s, int how) {
        int r;

        if (sock_state(s) != SOCK_CONNECTING)
                return 0;
        atomic_store(&s->connect_cancel, true);
        r = neg_errno(sys_shutdown(s->hidden, how));
        while (sock_state(s) == SOCK_CONNECTING) {
                pthread_mutex_unlock(&s->lock);
                connect_settle(s);
                pthread_mutex_lock(&s->lock);
        }
        return r;
}

/* The thread's end without SMC (locked): T stays the app's number, as TCP.
 * @prev_retry: the connect did not get through (TCP's error is on T): a later
 * connect gets another chance of SMC, as after any failed nonblocking connect. */
static void connect_async_tcp(struct smc_sock *s, struct connect_async *a, bool prev_retry) {
        if (s->connect_shut && same_file(s->fd, a->t))
                (void) sys_shutdown(s->fd, s->connect_shut - 1); /* (smc_shutdown) */
        s->connect_shut = 0;
        /* T back in the sets its copy stood in for (unless the number is another
         * file's now: a dup2() onto it) */
        prereg_detach_fd(s, a->t);
        if (same_file(s->fd, a->t))
                prereg_add_fd(s, s->fd, false);
        s->n_prereg = 0;
        __atomic_store_n(&s->hidden, -1, __ATOMIC_RELAXED);
        s->connect_prev = prev_retry ? (int8_t) (SOCK_BOUND + 1) : 0;
        sock_set_state(s, SOCK_TCP);
        sys_close(a->t);
}

static void *connect_async_main(void *arg) {
        struct connect_async *a = arg;
        struct smc_sock *s = a->s;
        const struct sockaddr *addr = (const struct sockaddr *) &a->addr;
        union smc_ctl_msg reply;
        struct smc_ctl_addr src;
        int fds[SMC_CTL_MAX_FDS], n = 0, r, sndbuf, rcvbuf;
        uint32_t reason = 0;
        bool up = false;

        /* TCP's handshake, as long as TCP takes (SYN retries), or until a cancel */
        while (!atomic_load(&s->connect_cancel)) {
                struct pollfd p = { .fd = a->t, .events = POLLOUT };
                struct sockaddr_storage ss;
                socklen_t sl = sizeof(ss);

                r = sys_poll(&p, 1, 1000);
                if (r < 0 && errno != EINTR && errno != EAGAIN)
                        break;
                if (r <= 0)
                        continue;
                /* writable: connected, or failed (state CLOSE: ENOTCONN here; the
                 * error stays on T for the program's SO_ERROR or connect) */
                up = sys_getpeername(a->t, (struct sockaddr *) &ss, &sl) == 0;
                break;
        }
        pthread_mutex_lock(&s->lock);
        if (!up || atomic_load(&s->connect_cancel)) {
                smc_debug("connect fd %d: TCP connect %s: TCP", s->fd,
                          atomic_load(&s->connect_cancel) ? "cancelled" : "failed");
                connect_async_tcp(s, a, true);
                goto out;
        }
        atomic_store(&s->connect_clc, true);
        connect_wake(s, false); /* (connect_settle_tcp) */
        sndbuf = s->sndbuf;
        rcvbuf = s->rcvbuf;
        pthread_mutex_unlock(&s->lock);

        r = smcr_ask(a->t, sndbuf, rcvbuf, &reply, fds, &n, &reason);

        pthread_mutex_lock(&s->lock);
        if (atomic_load(&s->connect_cancel)) {
                if (r == 1) {
                        void *rx, *tx;
                        uint32_t inst = a->inst != smc_ctl_client_instance() ? 0 : a->inst;

                        /* (the buffers into the mapping cache, as smcd believes we
                         * hold them: else a later connection reusing them fails,
                         * helper 124) */
                        (void) conn_map(&reply.conn, fds, n, inst, &rx, &tx);
                        conn_discard(&reply, fds[0], fds[1], inst);
                }
                smc_debug("connect fd %d: cancelled during the CLC handshake", s->fd);
                connect_async_tcp(s, a, false);
        } else if (r == 2) {
                s->fallback_reason = reason;
                fallback_notice(a->t, addr, a->addrlen, SMC_CTL_ROLE_CLIENT, reason);
                connect_async_tcp(s, a, false);
        } else if (r < 0) {
                __atomic_store_n(&s->connect_err, -r, __ATOMIC_RELAXED);
                connect_async_tcp(s, a, false);
        } else {
                src = reply.conn.local;
                r = connect_install(s, &reply, fds, n, a->inst != smc_ctl_client_instance() ? 0 : a->inst, &src, addr,
                                    a->addrlen, true, &reason);
                if (r == 1) {
                        s->connect_report = true; /* (the next connect() says 0, as TCP's) */
                        if (s->connect_shut)
                                (void) smc_ring_shutdown(&s->ep, s->connect_shut - 1);
                        s->connect_shut = 0;
                } else {
                        (void) sys_shutdown(a->t, SHUT_RDWR);
                        __atomic_store_n(&s->connect_err, ECONNRESET, __ATOMIC_RELAXED);
                        connect_async_tcp(s, a, false);
                }
        }
out:
        connect_wake(s, true);
        pthread_mutex_unlock(&s->lock);
        free(a);
        return NULL;
}

/* Wait for TCP's connect on nonblocking @t, under way (no thread for it). Returns 0
 * or -errno (TCP's error). */
static int connect_wait_tcp(int t) {
        struct pollfd p = { .fd = t, .events = POLLOUT };
        int err = 0;
        socklen_t el = sizeof(err);

        while (sys_poll(&p, 1, -1) < 0 && (errno == EINTR || errno == EAGAIN))
                ;
        if (sys_getsockopt(t, SOL_SOCKET, SO_ERROR, &err, &el) < 0)
                return -errno;
        return -err;
}

/* Start the nonblocking connect of @s (locked, BOUND, its number T nonblocking) to
 * @addr: TCP's connect, then the thread. Returns 3 (CONNECTING, the thread runs), 0
 * when T is connected already (the caller goes on), or -errno (TCP's error). */
static int connect_async_start(struct smc_sock *s, const struct sockaddr *addr, socklen_t addrlen, uint32_t inst) {
        struct connect_async *a;
        int t = -1, r;

        if (sys_connect(s->fd, addr, addrlen) == 0)
                return 0;
        if (errno != EINPROGRESS)
                return -errno;
        a = in_vfork_child() ? NULL : calloc(1, sizeof(*a)); /* (a vfork() child shares our memory) */
        if (a && (t = sys_fcntl(s->fd, F_DUPFD_CLOEXEC, 3)) >= 0) {
                a->s = s;
                a->t = t;
                a->inst = inst;
                a->addrlen = addrlen < sizeof(a->addr) ? addrlen : sizeof(a->addr);
                memcpy(&a->addr, addr, a->addrlen);
                s->hidden = t;
                atomic_store(&s->connect_clc, false);
                atomic_store(&s->connect_cancel, false);
                s->connect_err = 0;
                s->connect_shut = 0;
                /* the program's epoll sets get T's copy instead, with no events, until
                 * the connect ends (prereg_add_fd(): else TCP's handshake made the
                 * socket writable for them before the connection was, and a
                 * level-triggered loop spun, or waited in SO_ERROR: helper 124) */
                prereg_detach(s);
                prereg_add_fd(s, t, true);
                sock_set_state(s, SOCK_CONNECTING);
                r = lib_thread_start(connect_async_main, a, 256u << 10);
                if (r == 0)
                        return 3;
                sock_set_state(s, SOCK_BOUND);
                prereg_detach_fd(s, t);
                prereg_add_fd(s, s->fd, false);
                s->hidden = -1;
                smc_debug("connect fd %d: no thread for the nonblocking connect (%s): waiting here", s->fd,
                          strerror(r));
        }
        if (t >= 0)
                sys_close(t);
        free(a);
        return connect_wait_tcp(s->fd);
}

/* SMC-R (smcd said SMCR_PENDING): connect T over TCP, then have smcd run the CLC
 * handshake on it (smcr_ask()). A blocking socket waits for both here; a nonblocking
 * one returns 3 while they run in a thread (connect_async_start()). @inst: the smcd
 * that answered CONNECT. Returns smcr_ask()'s values, 3, or -errno: TCP's connect
 * error. */
static int connect_smcr(struct smc_sock *s, const struct sockaddr *addr, socklen_t addrlen, uint32_t inst,
                        union smc_ctl_msg *reply, int *fds, int *n, uint32_t *ret_reason) {
        int fl, r;

        fl = sys_fcntl(s->fd, F_GETFL, 0);
        if (fl >= 0 && (fl & O_NONBLOCK))
                r = connect_async_start(s, addr, addrlen, inst);
        else
                r = sys_connect(s->fd, addr, addrlen) < 0 ? -errno : 0;
        if (r == 3)
                return 3;
        if (r < 0) {
                smc_debug("connect fd %d: SMC-R: TCP connect failed: %s", s->fd, strerror(-r));
                return r;
        }
        return smcr_ask(s->fd, s->sndbuf, s->rcvbuf, reply, fds, n, ret_reason);
}

/* Ask smcd for an SMC-D connection to @dst. Caller holds s->lock, state is NEW or
 * BOUND. Returns 1 if the socket is now SMCD, 0 for TCP fallback with
 * *ret_reason set, or -errno for an error TCP would also have given (none now). */
static int connect_smc(struct smc_sock *s, const struct smc_ctl_addr *dst, const struct sockaddr *addr,
                       socklen_t addrlen, uint32_t *ret_reason) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        struct smc_ctl_addr src;
        union smc_ctl_msg m, reply;
        int fds[SMC_CTL_MAX_FDS];
        int n, r;
        bool via_clc = false; /* T connected, CLC on it (SMC-R, or SMC-D between namespaces) */
        uint32_t inst;

        if (env_disable) {
                smc_debug("connect fd %d: SMCPROTO_DISABLE: TCP, reason NOSMCDDEV", s->fd);
                *ret_reason = SMC_CLC_DECL_NOSMCDDEV;
                return 0;
        }
        if (atomic_load_explicit(&tcp_only_reason, memory_order_relaxed)) {
                *ret_reason = atomic_load_explicit(&tcp_only_reason, memory_order_relaxed);
                smc_debug("connect fd %d: TCP only, reason %s", s->fd, smc_clc_decl_name(*ret_reason));
                return 0;
        }
        if (s->prereg_unknown) {
                smc_debug("connect fd %d: in epoll sets that cannot all be moved to the connection: TCP, reason INTERR",
                          s->fd);
                *ret_reason = SMC_CLC_DECL_INTERR;
                return 0;
        }
        if (dst->port == 0) {
                smc_debug("connect fd %d: port 0: TCP, reason PEERNOSMC", s->fd);
                *ret_reason = SMC_CLC_DECL_PEERNOSMC;
                return 0;
        }
        if (!env_no_hints && smc_hint_tcp(dst)) {
                /* smcd's hint (smc-hints.h): its connections are short-lived at a high
                 * rate, TCP is cheaper for a while; smcd is not asked */
                smc_debug("connect fd %d: hinted: TCP, reason SMCD_DECL_SHORTCONN", s->fd);
                *ret_reason = SMCD_DECL_SHORTCONN;
                return 0;
        }
        /* reserve a real ephemeral port first, so the address is ours */
        if (sock_state(s) == SOCK_NEW) {
                struct sockaddr_storage any = { .ss_family = (sa_family_t) s->family };

                if (sys_bind(s->fd, (struct sockaddr *) &any,
                             s->family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6)) < 0) {
                        smc_debug("connect fd %d: bind to an ephemeral port failed: %m: TCP, reason INTERR", s->fd);
                        *ret_reason = SMC_CLC_DECL_INTERR;
                        return 0;
                }
                sock_set_state(s, SOCK_BOUND);
        }
        if (sys_getsockname(s->fd, (struct sockaddr *) &ss, &sl) < 0 ||
            smc_ctl_addr_from_sockaddr(&src, (struct sockaddr *) &ss, sl) < 0) {
                smc_debug("connect fd %d: getsockname failed or unusable: %m: TCP, reason INTERR", s->fd);
                *ret_reason = SMC_CLC_DECL_INTERR;
                return 0;
        }
        addr_unmap(&src);
        if (addr_is_any(&src) || src.family != dst->family) {
                uint16_t port = src.port;

                memset(&src, 0, sizeof(src));
                src.family = dst->family;
                src.port = port;
                if (dst->family == AF_INET && dst->addr[0] == 127) {
                        src.addr[0] = 127;
                        src.addr[3] = 1;
                } else if (dst->family == AF_INET6 && !memcmp(dst->addr, &in6addr_loopback, 16))
                        src.addr[15] = 1;
                else {
                        memcpy(src.addr, dst->addr, sizeof(src.addr));
                        src.scope_id = dst->scope_id;
                }
        }

        if (!connect_room(s->fd)) {
                smc_debug("connect fd %d: no room for the connection's descriptors (RLIMIT_NOFILE): TCP, reason MEM",
                          s->fd);
                *ret_reason = SMC_CLC_DECL_MEM;
                return 0;
        }
        smc_ctl_init(&m, SMC_CTL_CONNECT, 0);
        m.connect.dst = *dst;
        m.connect.src = src;
        m.connect.sndbuf = s->sndbuf > 0 ? (uint32_t) s->sndbuf : 0;
        m.connect.rcvbuf = s->rcvbuf > 0 ? (uint32_t) s->rcvbuf : 0;
        /* v3: T goes along, for SMC-R (smcd marks it for the SMC TCP option) */
        /* the smcd that answered (for the mapping cache, buf_get; and y_instance: at
         * the close it holds our Y, no CLOSE needed), also for a process's first
         * request, which opens the control connection */
        n = smc_ctl_client_call_instance(&m, &s->fd, 1, &reply, fds, SMC_CONNECT_TIMEOUT_MS, &inst);
        if (n == -ETIMEDOUT && addr_is_loopback(dst)) {
                /* smcd stopped or stuck: never SMC-R to this host's loopback, so plain
                 * TCP, as when smcd is not running (an smcd that reads the CONNECT
                 * later finds T in use and sets nothing up: handle_connect()) */
                smc_debug("connect fd %d: CONNECT seq %u: no reply in %u ms: TCP, reason NOSMCDDEV", s->fd, m.hdr.seq,
                          SMC_CONNECT_TIMEOUT_MS);
                *ret_reason = SMC_CLC_DECL_NOSMCDDEV;
                return 0;
        }
        if (n == -ETIMEDOUT && smc_ctl_client_version() >= 3) {
                smc_debug("connect fd %d: CONNECT seq %u: no reply in %u ms: going on as SMC-R", s->fd, m.hdr.seq,
                          SMC_CONNECT_TIMEOUT_MS);
                /* smcd is alive but slow: it may have marked T for SMC-R already, and a
                 * plain TCP connect would then offer SMC and send no CLC. Go on as SMC-R:
                 * smcd decides from what the handshake really carried. (Another host:
                 * a loopback destination went to TCP above.) */
                memset(&reply, 0, sizeof(reply));
                reply.hdr.type = SMC_CTL_CONNECT_REPLY;
                reply.conn.mode = SMC_CTL_MODE_SMCR_PENDING;
                n = 0;
        }
        if (n < 0) {
                if (n == -EMFILE || n == -ENFILE)
                        fd_pressure_note(); /* (the reply's descriptors did not fit: look first next time) */
                *ret_reason = n == -ENOTCONN ? SMC_CLC_DECL_NOSMCDDEV
                              : n == -EUSERS  ? SMCD_DECL_MAXCLIENTS /* (refused at HELLO) */
                                              : SMC_CLC_DECL_INTERR;
                smc_debug("connect fd %d: CONNECT seq %u failed: %s: TCP, reason 0x%08x", s->fd, m.hdr.seq,
                          strerror(-n), *ret_reason);
                return 0;
        }
        if (reply.hdr.type == SMC_CTL_ERROR) {
                *ret_reason = reply.error.detail ? reply.error.detail : SMC_CLC_DECL_INTERR;
                smc_debug("connect fd %d: CONNECT seq %u: ERROR %s (detail 0x%08x): %s: TCP, reason 0x%08x", s->fd,
                          m.hdr.seq, strerror(-reply.error.error), reply.error.detail, reply.error.msg, *ret_reason);
                return 0;
        }
        if (reply.hdr.type != SMC_CTL_CONNECT_REPLY) {
                smc_debug("connect fd %d: CONNECT seq %u: reply of type %u seq %u: TCP, reason INTERR", s->fd,
                          m.hdr.seq, reply.hdr.type, reply.hdr.seq);
                for (int i = 0; i < n; i++)
                        sys_close(fds[i]);
                *ret_reason = SMC_CLC_DECL_INTERR;
                return 0;
        }
        if (reply.conn.mode == SMC_CTL_MODE_SMCR_PENDING) {
                via_clc = true;
                r = connect_smcr(s, addr, addrlen, inst, &reply, fds, &n, ret_reason);
                if (r <= 0)
                        return r;   /* an error of TCP's connect, or -ECONNRESET */
                if (r == 2 || r == 3)
                        return r;   /* TCP: T is connected, *ret_reason set; or under way */
                src = reply.conn.local;
        } else if (reply.conn.mode != SMC_CTL_MODE_SMCD) {
                *ret_reason = reply.conn.fallback_reason ? reply.conn.fallback_reason : SMC_CLC_DECL_INTERR;
                smc_debug("connect fd %d: CONNECT seq %u: mode %u, reason 0x%08x: TCP, reason 0x%08x", s->fd,
                          m.hdr.seq, reply.conn.mode, reply.conn.fallback_reason, *ret_reason);
                for (int i = 0; i < n; i++)
                        sys_close(fds[i]);
                return 0;
        }

        if (inst != smc_ctl_client_instance())
                inst = 0; /* (an SMC-R handshake since: its reply's smcd) */
        return connect_install(s, &reply, fds, n, inst, &src, addr, addrlen, via_clc, ret_reason);
}

static int listener_disconnect(struct smc_sock *l, const struct sockaddr *addr, socklen_t len);
static int conn_disconnect(struct smc_sock *s);
static int opt_fd(struct smc_sock *s);

SMC_PUBLIC int smc_connect(int fd, const struct sockaddr *addr, socklen_t len) {
        struct smc_sock *s = sock_lookup(fd);
        struct sockaddr_storage any_fixed; /* a destination of INADDR_ANY, as TCP takes it */
        struct smc_ctl_addr dst;
        uint32_t reason = 0;
        int r, st, prev;

        if (!s)
                return sys_connect(fd, addr, len);
        if (len > 0 && len <= sizeof(struct sockaddr_storage) && smc_uptr_bad(addr))
                return ret_errno(-EFAULT); /* (the kernel copies the address first) */
        pthread_mutex_lock(&s->lock);
        st = sock_state(s);
        switch (st) {
        case SOCK_SMCD:
                if (len < (socklen_t) sizeof(sa_family_t)) {
                        pthread_mutex_unlock(&s->lock);
                        return ret_errno(-EINVAL); /* (__inet_stream_connect()) */
                }
                if (!smc_uptr_bad(addr) && addr->sa_family == AF_UNSPEC) {
                        pthread_mutex_unlock(&s->lock);
                        return conn_disconnect(s);
                }
                if (s->connect_report) {
                        s->connect_report = false;
                        r = 0;
                } else
                        r = -EISCONN;
                pthread_mutex_unlock(&s->lock);
                return ret_errno(r);
        case SOCK_LISTEN_SMC:
                pthread_mutex_unlock(&s->lock);
                if (!smc_uptr_bad(addr) && len >= (socklen_t) sizeof(sa_family_t) && addr->sa_family == AF_UNSPEC)
                        return listener_disconnect(s, addr, len);
                errno = EISCONN; /* what Linux TCP says for a listener */
                return -1;
        case SOCK_LISTEN_TCP:
                pthread_mutex_unlock(&s->lock);
                return sys_connect(fd, addr, len);
        case SOCK_CONNECTING:
                if (!smc_uptr_bad(addr) && len >= (socklen_t) sizeof(sa_family_t) && addr->sa_family == AF_UNSPEC) {
                        /* TCP's disconnect in SYN_SENT, or of the connection: the
                         * socket is unconnected again, and its next connect gets SMC
                         * another chance (helper 124: it stayed TCP) */
                        (void) connect_cancel_locked(s, SHUT_RDWR);
                        if (sock_state(s) != SOCK_TCP) {
                                pthread_mutex_unlock(&s->lock);
                                return smc_connect(fd, addr, len); /* (SMCD: just made) */
                        }
                        r = neg_errno(sys_connect(fd, addr, len));
                        if (r == 0) {
                                struct sockaddr_storage ss;
                                socklen_t sl = sizeof(ss);
                                bool bound = sys_getsockname(fd, (struct sockaddr *) &ss, &sl) == 0 &&
                                             ((ss.ss_family == AF_INET && ((struct sockaddr_in *) &ss)->sin_port) ||
                                              (ss.ss_family == AF_INET6 && ((struct sockaddr_in6 *) &ss)->sin6_port));

                                sock_set_state(s, bound ? SOCK_BOUND : SOCK_NEW);
                                s->connect_prev = 0;
                                s->fallback_reason = 0;
                                s->connect_err = 0;
                        }
                        pthread_mutex_unlock(&s->lock);
                        return ret_errno(r);
                }
                if (atomic_load(&s->nonblock)) {
                        bool done = !atomic_load(&s->connect_clc) && connect_tcp_done(s);

                        pthread_mutex_unlock(&s->lock);
                        if (!done)
                                return ret_errno(-EALREADY); /* as TCP's, and kernel SMC's */
                        /* TCP's handshake ended: failed (its error, as TCP's connect
                         * says it), or the SMC handshake runs (EALREADY) */
                        connect_settle_tcp(s);
                        return smc_connect(fd, addr, len);
                }
                pthread_mutex_unlock(&s->lock);
                connect_settle(s);
                return smc_connect(fd, addr, len); /* (SMCD or TCP now) */
        case SOCK_TCP:
                if (s->connect_err) {
                        /* the SMC handshake after TCP's broke (connect_async_main) */
                        r = -s->connect_err;
                        s->connect_err = 0;
                        pthread_mutex_unlock(&s->lock);
                        return ret_errno(r);
                }
                prev = s->connect_prev;
                pthread_mutex_unlock(&s->lock);
                r = sys_connect(fd, addr, len);
                if (r < 0 && errno == ECONNABORTED && prev) {
                        /* a nonblocking connect that failed (refused, timed out): the
                         * kernel has made the socket unconnected again with this
                         * ECONNABORTED, and the next connect gets another chance of
                         * SMC, as after a blocking one that failed at once (helper 113:
                         * a retry to a live SMC listener stayed TCP) */
                        int saved = errno;

                        pthread_mutex_lock(&s->lock);
                        if (sock_state(s) == SOCK_TCP && s->connect_prev == prev) {
                                sock_set_state(s, prev - 1);
                                s->connect_prev = 0;
                                s->fallback_reason = 0;
                        }
                        pthread_mutex_unlock(&s->lock);
                        errno = saved;
                }
                return r;
        default:
                break;
        }

        /* Only a well-formed address of our family goes to smcd; anything else gets
         * the kernel's own answer. */
        if (smc_uptr_bad(addr) || smc_ctl_addr_from_sockaddr(&dst, addr, len) < 0 || dst.family != s->family) {
                pthread_mutex_unlock(&s->lock);
                return sys_connect(fd, addr, len);
        }
        addr_unmap(&dst);
        if (addr_is_any(&dst)) {
                /* TCP connects to INADDR_ANY / in6addr_any as to the socket's bound
                 * address, or else to loopback (ip_route_connect(), tcp_v6_connect()),
                 * and reports that address as its peer */
                struct sockaddr_storage bs;
                socklen_t bl = sizeof(bs);
                struct smc_ctl_addr b;
                uint16_t port = dst.port;

                if (sys_getsockname(fd, (struct sockaddr *) &bs, &bl) == 0 &&
                    smc_ctl_addr_from_sockaddr(&b, (struct sockaddr *) &bs, bl) == 0 &&
                    (addr_unmap(&b), b.family == dst.family) && !addr_is_any(&b))
                        dst = b;
                else {
                        memset(dst.addr, 0, sizeof(dst.addr));
                        dst.scope_id = 0;
                        if (dst.family == AF_INET) {
                                dst.addr[0] = 127;
                                dst.addr[3] = 1;
                        } else
                                dst.addr[15] = 1;
                }
                dst.port = port;
                if (addr_for_family(&dst, s->family, &any_fixed, &bl) < 0) {
                        pthread_mutex_unlock(&s->lock);
                        return sys_connect(fd, addr, len);
                }
                addr = (const struct sockaddr *) &any_fixed;
                len = bl;
        }

        r = connect_smc(s, &dst, addr, len, &reason);
        rereg_maybe(); /* (our own lock is held: this socket needs none) */
        if (r == 2) {
                /* SMC-R was tried: T is connected over TCP, as the fallback */
                s->fallback_reason = reason;
                sock_set_state(s, SOCK_TCP);
                pthread_mutex_unlock(&s->lock);
                fallback_notice(fd, addr, len, SMC_CTL_ROLE_CLIENT, reason);
                return 0;
        }
        if (r == 3) {
                /* CONNECTING: the rest runs in its thread (connect_async_main) */
                pthread_mutex_unlock(&s->lock);
                errno = EINPROGRESS;
                return -1;
        }
        if (r > 0) {
                bool nb = atomic_load(&s->nonblock);

                s->connect_report = nb;
                pthread_mutex_unlock(&s->lock);
                if (nb) {
                        errno = EINPROGRESS;
                        return -1;
                }
                return 0;
        }
        if (r < 0) {
                pthread_mutex_unlock(&s->lock);
                return ret_errno(r);
        }

        /* TCP fallback, with TCP's own errors */
        prev = sock_state(s);
        s->fallback_reason = reason;
        s->connect_prev = (int8_t) (prev + 1);
        sock_set_state(s, SOCK_TCP);
        pthread_mutex_unlock(&s->lock);
        r = sys_connect(fd, addr, len);
        if (r < 0 && errno != EINPROGRESS && errno != EINTR && errno != EALREADY && errno != EISCONN) {
                /* failed at once (ECONNREFUSED...): like a TCP socket it may connect
                 * again, and then SMC gets another chance */
                int saved = errno;

                pthread_mutex_lock(&s->lock);
                if (sock_state(s) == SOCK_TCP) {
                        sock_set_state(s, prev);
                        s->connect_prev = 0;
                }
                pthread_mutex_unlock(&s->lock);
                errno = saved;
        } else if ((r == 0 || errno == EINPROGRESS || errno == EINTR) && reason == SMCD_DECL_SHORTCONN) {
                int saved = errno;

                smc_hint_count(SMC_CTL_ROLE_CLIENT); /* counted in batches, not listed */
                errno = saved;
        } else if ((r == 0 || errno == EINPROGRESS || errno == EINTR) && reason != SMC_CLC_DECL_NOSMCDDEV)
                /* under way, its source address chosen: smcd answered this CONNECT
                 * (NOSMCDDEV: it could not be asked), so it may list the connection */
                fallback_notice(fd, addr, len, SMC_CTL_ROLE_CLIENT, reason);
        return r;
}

/* ------------------------------------------------------------------------- */
/* Data */

/* MSG_EOR, MSG_CONFIRM and MSG_DONTROUTE change nothing a TCP program can see over
 * loopback, and MSG_WAITFORONE nothing on a recv: accepted and ignored, as by TCP.
 * The rest: send_flags_other(); on a receive MSG_OOB gives EINVAL (TCP's answer when
 * no urgent byte came: none ever comes over SMC from a sender with this library),
 * and any other flag is ignored, as by tcp_recvmsg(). */
#define SEND_FLAGS (MSG_DONTWAIT | MSG_NOSIGNAL | MSG_MORE | MSG_EOR | MSG_CONFIRM | MSG_DONTROUTE)

#define DATA_FAIL (-2) /* data_sock()'s *ret_fd: the call fails, errno set */
#define DS_DONTWAIT 1u  /* data_sock(): the call does not block (MSG_DONTWAIT, RWF_NOWAIT) */
#define DS_RX 2u        /* ... it receives (SO_RCVTIMEO bounds a wait for a connect) */
#define DS_TX 4u        /* ... it sends (SO_SNDTIMEO) */

/* A blocking data call (@f: DS_RX or DS_TX) on @s, whose connect is under way, waits
 * for its end as TCP's in SYN_SENT (sk_stream_wait_connect(), tcp_recvmsg()): up to
 * T's SO_SNDTIMEO or SO_RCVTIMEO (-EAGAIN after it); a signal handler ends the wait
 * with -EINTR, unless no timeout is set and the program's handlers have SA_RESTART
 * (restart_after_signal()), as the kernel restarts the call then. Without a
 * direction it waits for the end. Returns 0 once @s is not CONNECTING. */
static int data_connect_wait(struct smc_sock *s, unsigned f) {
        struct timeval tv = { 0 };
        socklen_t tl = sizeof(tv);
        uint64_t deadline = 0;
        long r;

        if (!(f & (DS_RX | DS_TX))) {
                connect_settle(s);
                return 0;
        }
        /* (a timeout of more than ~292 years: none, as the kernel's never ends either) */
        if (sys_getsockopt(s->fd, SOL_SOCKET, (f & DS_TX) ? SO_SNDTIMEO : SO_RCVTIMEO, &tv, &tl) == 0 &&
            (tv.tv_sec > 0 || tv.tv_usec > 0) && (uint64_t) tv.tv_sec < (UINT64_MAX >> 1) / 1000000000u)
                deadline = now_ns() + (uint64_t) tv.tv_sec * 1000000000u + (uint64_t) tv.tv_usec * 1000u;
        while (sock_state(s) == SOCK_CONNECTING) {
                struct timespec ts;

                /* one sleep until the deadline (or none): the connect thread's
                 * connect_wake() follows every change of the state, and the futex
                 * compares it first. No slices: a signal that came as one timed out
                 * ran its handler without EINTR (helper 126) */
                if (deadline) {
                        uint64_t now = now_ns();

                        if (now >= deadline)
                                return -EAGAIN;
                        ts.tv_sec = (time_t) ((deadline - now) / 1000000000u);
                        ts.tv_nsec = (long) ((deadline - now) % 1000000000u);
                }
                /* (EINTR: a handler ran; a futex wait is never restarted) */
                r = smc_syscall(SYS_futex, &s->state, FUTEX_WAIT_PRIVATE, SOCK_CONNECTING, deadline ? &ts : NULL);
                if (r < 0 && errno == EINTR && (deadline || !restart_after_signal()))
                        return -EINTR;
        }
        return 0;
}

/* The connection for a data call on @fd: the SMC-D socket, or NULL with *ret_fd
 * the descriptor to pass the call to (the fd itself, or a listener's hidden T,
 * which gives TCP's ENOTCONN / EPIPE), or DATA_FAIL with errno set: a connect under
 * way and the call nonblocking (O_NONBLOCK, or DS_DONTWAIT in @f for its
 * MSG_DONTWAIT / RWF_NOWAIT: EAGAIN), or blocking and its wait for the connect ended
 * by a timeout or a signal (data_connect_wait()). */
static struct smc_sock *data_sock(int fd, int *ret_fd, unsigned f) {
        struct smc_sock *s = sock_lookup(fd);
        int st;

        *ret_fd = fd;
        if (!s)
                return NULL;
        st = sock_state(s);
        while (st == SOCK_CONNECTING) {
                /* T's stream is smcd's until the handshake ends: never read or written
                 * here. A nonblocking call (or one with MSG_DONTWAIT, RWF_NOWAIT)
                 * says EAGAIN, as TCP's in SYN_SENT and kernel SMC's until its
                 * handshake ends; a blocking one waits, as theirs */
                int r = (f & DS_DONTWAIT) || atomic_load(&s->nonblock) ? -EAGAIN : data_connect_wait(s, f);

                if (r < 0) {
                        errno = -r;
                        *ret_fd = DATA_FAIL;
                        return NULL;
                }
                s = sock_lookup(fd);
                if (!s)
                        return NULL;
                st = sock_state(s);
        }
        /* after the state (acquire): a teardown that changed it began with closing.
         * Another thread's close() holds the lock until the number is closed and out
         * of the table: wait for it, then look again (the kernel then says EBADF, or
         * the number is already another file's, which must not get EBADF from us),
         * never the doorbell bytes of X the number still is meanwhile */
        while (atomic_load_explicit(&s->closing, memory_order_acquire)) {
                pthread_mutex_lock(&s->lock);
                pthread_mutex_unlock(&s->lock);
                s = sock_lookup(fd);
                if (!s)
                        return NULL;
                st = sock_state(s);
        }
        if (st == SOCK_SMCD)
                return s;
        if (st == SOCK_LISTEN_SMC)
                *ret_fd = s->hidden;
        return NULL;
}

/* One buffer's length as the kernel takes it (MAX_RW_COUNT, linux/fs.h): a longer one
 * is cut, not refused (recv(fd, NULL, SIZE_MAX, MSG_TRUNC) drops what is there). */
static size_t rw_count(size_t len) {
        const size_t max = (size_t) INT_MAX & ~(size_t) 4095;

        return len < max ? len : max;
}

static ssize_t iov_total(const struct iovec *iov, int iovcnt) {
        size_t t = 0;

        if (iovcnt < 0 || iovcnt > IOV_MAX)
                return -EINVAL;
        if (iovcnt > 0 && smc_uptr_bad(iov))
                return -EFAULT; /* (the kernel copies the array first) */
        for (int i = 0; i < iovcnt; i++) {
                if (iov[i].iov_len > (size_t) SSIZE_MAX - t)
                        return -EINVAL;
                t += iov[i].iov_len;
        }
        return (ssize_t) t;
}

/* The send flags beyond SEND_FLAGS, as tcp_sendmsg() takes them on a connected
 * socket: MSG_OOB (TCP's urgent byte) is not carried: -EOPNOTSUPP; MSG_FASTOPEN:
 * -EISCONN (its connect on a connected socket); MSG_ZEROCOPY: ignored unless
 * SO_ZEROCOPY is on (its completions would never come: -EOPNOTSUPP); any other flag
 * is ignored, as by TCP. */
static int send_flags_other(struct smc_sock *s, int flags) {
        if (flags & MSG_OOB)
                return -EOPNOTSUPP;
        if (flags & MSG_FASTOPEN)
                return -EISCONN;
        if (flags & MSG_ZEROCOPY) {
                int fd = __atomic_load_n(&s->hidden, __ATOMIC_RELAXED), on = 0;
                socklen_t l = sizeof(on);

                if (fd < 0)
                        fd = __atomic_load_n(&s->optsock, __ATOMIC_RELAXED);
                if (fd >= 0 && sys_getsockopt(fd, SOL_SOCKET, SO_ZEROCOPY, &on, &l) == 0 && on)
                        return -EOPNOTSUPP;
        }
        return 0;
}

static ssize_t smcd_send(struct smc_sock *s, const struct iovec *iov, int iovcnt, int flags, bool sigpipe) {
        ssize_t r;
        int timeo_fd;

        if ((flags & ~SEND_FLAGS) && (r = send_flags_other(s, flags)) < 0)
                return ret_errno_ssize(r);
        r = iov_total(iov, iovcnt);
        if (r < 0)
                return ret_errno_ssize(r); /* (a zero-length send reports the state, as TCP's) */
        /* where smc_setsockopt() keeps SO_SNDTIMEO (as smc_sendfile) */
        timeo_fd = __atomic_load_n(&s->hidden, __ATOMIC_RELAXED);
        if (timeo_fd < 0)
                timeo_fd = __atomic_load_n(&s->optsock, __ATOMIC_RELAXED);
        conn_note_shared(s);
        for (;;) {
                struct timeval tv = {};
                socklen_t tl = sizeof(tv);
                bool nb = atomic_load_explicit(&s->nonblock, memory_order_relaxed);

                r = smc_ring_send_timeo(&s->ep, iov, iovcnt, flags & MSG_MORE, nb || (flags & MSG_DONTWAIT),
                                        timeo_fd);
                if (r == -EAGAIN && mode_turned_blocking(s, nb, flags))
                        continue; /* another copy made the socket blocking */
                if (r != -EINTR || !restart_after_signal())
                        break;
                if (timeo_fd >= 0 && sys_getsockopt(timeo_fd, SOL_SOCKET, SO_SNDTIMEO, &tv, &tl) == 0 &&
                    (tv.tv_sec || tv.tv_usec))
                        break; /* with a send timeout the kernel does not restart either */
        }
        if (r == -EPIPE && sigpipe && !(flags & MSG_NOSIGNAL))
                raise_sigpipe();
        return ret_errno_ssize(r);
}

/* @vfs: read(2) or readv(2), which return 0 for zero bytes asked without looking at
 * the socket (sock_read_iter()); a recv(2) of zero bytes goes to the ring, which
 * answers as tcp_recvmsg() does (EAGAIN, a wait, EOF or an error; 0 with data). */
static ssize_t smcd_recv(struct smc_sock *s, const struct iovec *iov, int iovcnt, int flags, bool vfs) {
        ssize_t r;

        if (flags & MSG_ERRQUEUE)
                return ret_errno_ssize(-EAGAIN); /* as TCP's empty error queue */
        if (flags & MSG_OOB)
                return ret_errno_ssize(-EINVAL);
        r = iov_total(iov, iovcnt);
        if (r < 0 || (r == 0 && vfs))
                return ret_errno_ssize(r);
        /* MSG_TRUNC: as tcp_recvmsg(), the bytes are dropped instead of copied (the
         * buffer is not touched and may be NULL); the count says how many */
        for (;;) {
                bool nb = atomic_load_explicit(&s->nonblock, memory_order_relaxed);

                r = smc_ring_recv(&s->ep, iov, iovcnt, flags & (MSG_PEEK | MSG_WAITALL | MSG_TRUNC),
                                  nb || (flags & MSG_DONTWAIT));
                if (r != -EAGAIN || !mode_turned_blocking(s, nb, flags))
                        break; /* (else another copy made the socket blocking) */
        }
        return ret_errno_ssize(r);
}

SMC_PUBLIC ssize_t smc_send(int fd, const void *buf, size_t len, int flags) {
        struct iovec v = { .iov_base = (void *) buf, .iov_len = rw_count(len) };
        struct smc_sock *s = data_sock(fd, &fd, ((flags & MSG_DONTWAIT) ? DS_DONTWAIT : 0) | DS_TX);

        if (fd == DATA_FAIL)
                return -1; /* (CONNECTING: data_connect_wait()) */
        if (!s)
                return sys_sendto(fd, buf, len, flags, NULL, 0);
        return smcd_send(s, &v, 1, flags, true);
}

SMC_PUBLIC ssize_t smc_recv(int fd, void *buf, size_t len, int flags) {
        struct iovec v = { .iov_base = buf, .iov_len = rw_count(len) };
        struct smc_sock *s = data_sock(fd, &fd, ((flags & MSG_DONTWAIT) ? DS_DONTWAIT : 0) | DS_RX);

        if (fd == DATA_FAIL)
                return -1; /* (CONNECTING: data_connect_wait()) */
        if (!s)
                return sys_recvfrom(fd, buf, len, flags, NULL, NULL);
        return smcd_recv(s, &v, 1, flags, false);
}

int smc_sendto_addr_check(const struct sockaddr *to, socklen_t tolen) {
        if (!to)
                return 0;
        if ((int) tolen < 0 || tolen > sizeof(struct sockaddr_storage))
                return -EINVAL;
        return tolen > 0 && smc_uptr_bad(to) ? -EFAULT : 0;
}

SMC_PUBLIC ssize_t smc_sendto(int fd, const void *buf, size_t len, int flags, const struct sockaddr *to,
                              socklen_t tolen) {
        struct iovec v = { .iov_base = (void *) buf, .iov_len = rw_count(len) };
        struct smc_sock *s = data_sock(fd, &fd, ((flags & MSG_DONTWAIT) ? DS_DONTWAIT : 0) | DS_TX);

        int r;

        if (fd == DATA_FAIL)
                return -1; /* (CONNECTING: data_connect_wait()) */
        if (!s)
                return sys_sendto(fd, buf, len, flags, to, tolen);
        if ((r = smc_sendto_addr_check(to, tolen)) < 0)
                return ret_errno_ssize(r);
        return smcd_send(s, &v, 1, flags, true); /* a connected TCP socket ignores @to */
}

SMC_PUBLIC ssize_t smc_recvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *from,
                                socklen_t *fromlen) {
        struct iovec v = { .iov_base = buf, .iov_len = rw_count(len) };
        struct smc_sock *s = data_sock(fd, &fd, ((flags & MSG_DONTWAIT) ? DS_DONTWAIT : 0) | DS_RX);
        ssize_t r;

        if (fd == DATA_FAIL)
                return -1; /* (CONNECTING: data_connect_wait()) */
        if (!s)
                return sys_recvfrom(fd, buf, len, flags, from, fromlen);
        if (from && smc_uptr_bad(fromlen)) {
                /* the kernel receives first, then fails at the address length (the
                 * bytes are gone); here they stay */
                r = smcd_recv(s, &v, 1, flags | MSG_PEEK, false);
                return r < 0 ? r : ret_errno_ssize(-EFAULT);
        }
        r = smcd_recv(s, &v, 1, flags, false);
        if (r >= 0 && from && fromlen)
                *fromlen = 0; /* as TCP: no address */
        return r;
}

/* sendmsg/recvmsg's checks of @msg before any data moves, as the kernel's
 * (net/socket.c copy_msghdr_from_user: more than UIO_MAXIOV vectors is EMSGSIZE there,
 * while readv/writev say EINVAL). Returns 0 or -1 with errno set. */
static int msg_check(const struct msghdr *msg, bool send) {
        if (smc_uptr_bad(msg)) {
                errno = EFAULT;
                return -1;
        }
        if (msg->msg_iovlen > UIO_MAXIOV) {
                errno = EMSGSIZE;
                return -1;
        }
        if (send && ((msg->msg_controllen > 0 && smc_uptr_bad(msg->msg_control)) ||
                     (msg->msg_name && msg->msg_namelen > 0 && smc_uptr_bad(msg->msg_name)))) {
                errno = EFAULT; /* (a send's control data and address are copied in first) */
                return -1;
        }
        return 0;
}

SMC_PUBLIC ssize_t smc_sendmsg(int fd, const struct msghdr *msg, int flags) {
        struct smc_sock *s = data_sock(fd, &fd, ((flags & MSG_DONTWAIT) ? DS_DONTWAIT : 0) | DS_TX);

        if (fd == DATA_FAIL)
                return -1; /* (CONNECTING: data_connect_wait()) */
        if (!s) {
                if (smc_uptr_bad(msg) || !msg->msg_controllen)
                        return sys_sendmsg(fd, msg, flags);
                return smc_sendmsg_passing(fd, msg, flags, sys_sendmsg); /* SCM_RIGHTS */
        }
        if (msg_check(msg, true) < 0)
                return -1;
        return smcd_send(s, msg->msg_iov, (int) msg->msg_iovlen, flags, true);
}

#ifndef TCP_INQ
#define TCP_INQ 36 /* linux/tcp.h */
#endif
#ifndef TCP_CM_INQ
#define TCP_CM_INQ TCP_INQ
#endif
/* Is TCP_INQ on for SMC connection @s? Kept in s->inq (set by setsockopt and at
 * accept); when not known (a connection adopted after exec or through SCM_RIGHTS) or
 * when the connection has copies (dup(2), exec: conn_fork_gen ~0u), whose setsockopt
 * this one would not see, asked of the socket that holds the options, which the
 * copies share (smc_fd_dup(); none: off). */
static bool sock_inq(struct smc_sock *s) {
        int on = atomic_load_explicit(&s->inq, memory_order_relaxed), fd;
        socklen_t l = sizeof(on);

        if (on >= 0 && s->conn_fork_gen != ~0u)
                return on;
        fd = __atomic_load_n(&s->hidden, __ATOMIC_RELAXED);
        if (fd < 0)
                fd = __atomic_load_n(&s->optsock, __ATOMIC_RELAXED);
        if (fd < 0 || sys_getsockopt(fd, IPPROTO_TCP, TCP_INQ, &on, &l) != 0)
                on = 0;
        on = on != 0;
        atomic_store_explicit(&s->inq, (signed char) on, memory_order_relaxed);
        return on;
}

/* A receive's control data (tcp(7)): with TCP_INQ on, TCP adds a TCP_CM_INQ message
 * holding the bytes left to read after the call (an int; 1 at end of file with none
 * left: tcp_inq_hint()). Put as the kernel's put_cmsg() puts it: cut to the room
 * there is, with MSG_CTRUNC, and nothing at all under a header's size. No system
 * call (sock_inq()); no other control message comes over SMC (receive timestamps:
 * smcrun(1)). */
static void recv_put_inq(struct smc_sock *s, struct msghdr *msg) {
        int inq, known;
        size_t room = msg->msg_controllen, len;
        struct cmsghdr h = { .cmsg_level = SOL_TCP, .cmsg_type = TCP_CM_INQ };

        msg->msg_controllen = 0;
        /* (no control room: only MSG_CTRUNC is at stake, so a value known already is
         * taken even for a connection with copies: no system call per receive) */
        known = atomic_load_explicit(&s->inq, memory_order_relaxed);
        if (!(room || known < 0 ? sock_inq(s) : known > 0))
                return;
        if (room < sizeof(h) || !msg->msg_control || smc_uptr_bad(msg->msg_control)) {
                /* (none at all too: put_cmsg() sets MSG_CTRUNC then; helper 111) */
                msg->msg_flags |= MSG_CTRUNC;
                return;
        }
        inq = (int) smc_ring_readable(sock_ep(s));
        if (inq == 0 && smc_ring_ready_quick(sock_ep(s), POLLIN))
                inq = 1; /* (end of file, or a reset) */
        len = CMSG_LEN(sizeof(inq));
        if (room < len) {
                msg->msg_flags |= MSG_CTRUNC;
                len = room;
        }
        h.cmsg_len = len;
        memcpy(msg->msg_control, &h, sizeof(h));
        memcpy((char *) msg->msg_control + sizeof(h), &inq, len - sizeof(h));
        msg->msg_controllen = CMSG_SPACE(sizeof(inq)) < room ? CMSG_SPACE(sizeof(inq)) : room;
}

SMC_PUBLIC ssize_t smc_recvmsg(int fd, struct msghdr *msg, int flags) {
        struct smc_sock *s = data_sock(fd, &fd, ((flags & MSG_DONTWAIT) ? DS_DONTWAIT : 0) | DS_RX);
        ssize_t r;

        if (fd == DATA_FAIL)
                return -1; /* (CONNECTING: data_connect_wait()) */
        if (!s) {
                r = sys_recvmsg(fd, msg, flags);
                if (r >= 0 && msg && msg->msg_controllen)
                        smc_fds_received(msg); /* SCM_RIGHTS: SMC connections passed to us */
                return r;
        }
        if (msg_check(msg, false) < 0)
                return -1;
        r = smcd_recv(s, msg->msg_iov, (int) msg->msg_iovlen, flags, false);
        if (r >= 0) {
                msg->msg_flags = 0;
                msg->msg_namelen = 0;
                recv_put_inq(s, msg);
        }
        return r;
}

SMC_PUBLIC ssize_t smc_read(int fd, void *buf, size_t len) {
        struct iovec v = { .iov_base = buf, .iov_len = rw_count(len) };
        struct smc_sock *s = data_sock(fd, &fd, DS_RX);

        if (fd == DATA_FAIL)
                return -1; /* (CONNECTING: data_connect_wait()) */
        if (!s)
                return sys_read(fd, buf, len);
        return smcd_recv(s, &v, 1, 0, true);
}

SMC_PUBLIC ssize_t smc_write(int fd, const void *buf, size_t len) {
        struct iovec v = { .iov_base = (void *) buf, .iov_len = rw_count(len) };
        struct smc_sock *s = data_sock(fd, &fd, DS_TX);

        if (fd == DATA_FAIL)
                return -1; /* (CONNECTING: data_connect_wait()) */
        if (!s)
                return sys_write(fd, buf, len);
        return smcd_send(s, &v, 1, 0, true);
}

/* readv(2), writev(2) and their p*v2 forms move nothing when the vector's lengths add
 * up to 0: the kernel returns 0 before it reaches the socket (do_iter_read(),
 * do_iter_write()), where a send or receive would report the socket's state or error
 * (helper 129: EPIPE after SHUT_WR, and a reset taken). True for such a vector; a bad
 * one is left to the call, whose error comes first. */
static bool iov_nothing(const struct iovec *iov, int iovcnt) {
        if (iovcnt < 0 || iovcnt > IOV_MAX || (iovcnt > 0 && smc_uptr_bad(iov)))
                return false;
        for (int i = 0; i < iovcnt; i++)
                if (iov[i].iov_len)
                        return false;
        return true;
}

SMC_PUBLIC ssize_t smc_readv(int fd, const struct iovec *iov, int iovcnt) {
        struct smc_sock *s;

        if (iov_nothing(iov, iovcnt))
                return sys_readv(fd, iov, iovcnt); /* (0, as TCP's, also while connecting) */
        s = data_sock(fd, &fd, DS_RX);

        if (fd == DATA_FAIL)
                return -1; /* (CONNECTING: data_connect_wait()) */
        if (!s)
                return sys_readv(fd, iov, iovcnt);
        return smcd_recv(s, iov, iovcnt, 0, true);
}

SMC_PUBLIC ssize_t smc_writev(int fd, const struct iovec *iov, int iovcnt) {
        struct smc_sock *s;

        if (iov_nothing(iov, iovcnt))
                return sys_writev(fd, iov, iovcnt);
        s = data_sock(fd, &fd, DS_TX);

        if (fd == DATA_FAIL)
                return -1; /* (CONNECTING: data_connect_wait()) */
        if (!s)
                return sys_writev(fd, iov, iovcnt);
        return smcd_send(s, iov, iovcnt, 0, true);
}

/* preadv2(2) / pwritev2(2) flags a socket ignores (the kernel's sock_read_iter and
 * sock_write_iter; RWF_NOWAIT is a nonblocking call) */
#define RWF_SOCKET_OK (RWF_HIPRI | RWF_DSYNC | RWF_SYNC | RWF_NOWAIT | RWF_APPEND)

SMC_PUBLIC ssize_t smc_preadv2(int fd, const struct iovec *iov, int iovcnt, int64_t offset, int flags) {
        struct smc_sock *s;

        /* another offset (ESPIPE, EINVAL) or flag (EOPNOTSUPP): the kernel says the
         * same for the socket pair as for a TCP socket, before any I/O */
        if (offset != -1 || (flags & ~RWF_SOCKET_OK) || iov_nothing(iov, iovcnt))
                return sys_preadv2(fd, iov, iovcnt, offset, flags);
        s = data_sock(fd, &fd, ((flags & RWF_NOWAIT) ? DS_DONTWAIT : 0) | DS_RX);
        if (fd == DATA_FAIL)
                return -1; /* (CONNECTING: data_connect_wait()) */
        if (!s)
                return sys_preadv2(fd, iov, iovcnt, offset, flags);
        return smcd_recv(s, iov, iovcnt, (flags & RWF_NOWAIT) ? MSG_DONTWAIT : 0, true);
}

SMC_PUBLIC ssize_t smc_pwritev2(int fd, const struct iovec *iov, int iovcnt, int64_t offset, int flags) {
        struct smc_sock *s;

        if (offset != -1 || (flags & ~RWF_SOCKET_OK) || iov_nothing(iov, iovcnt))
                return sys_pwritev2(fd, iov, iovcnt, offset, flags);
        s = data_sock(fd, &fd, ((flags & RWF_NOWAIT) ? DS_DONTWAIT : 0) | DS_TX);
        if (fd == DATA_FAIL)
                return -1; /* (CONNECTING: data_connect_wait()) */
        if (!s)
                return sys_pwritev2(fd, iov, iovcnt, offset, flags);
        return smcd_send(s, iov, iovcnt, (flags & RWF_NOWAIT) ? MSG_DONTWAIT : 0, true);
}

/* sendfile(2) onto an SMC connection in one copy: smc_ring_sendfile() reads the file
 * straight into the peer's DMB (the send buffer for SMC-R), with send()'s cork,
 * MSG_MORE, autocork, blocking and nonblocking rules and SO_SNDTIMEO. The file
 * position or *@offset moves by exactly what was sent, so a short (nonblocking) send
 * loses nothing. A source that cannot seek (a pipe) gets EINVAL without @offset and
 * ESPIPE with it, as from the kernel for a TCP socket. */
#define SENDFILE_MAX_COUNT 0x7ffff000u /* the kernel's MAX_RW_COUNT on 4 KiB pages */
SMC_PUBLIC ssize_t smc_sendfile(int out_fd, int in_fd, int64_t *offset, size_t count) {
        struct smc_sock *s = data_sock(out_fd, &out_fd, DS_TX);
        int64_t pos;
        int timeo_fd;
        ssize_t r;

        if (out_fd == DATA_FAIL)
                return -1; /* (CONNECTING: data_connect_wait()) */
        if (!s)
                return sys_sendfile(out_fd, in_fd, offset, count);
        if (offset && smc_uptr_bad(offset))
                return ret_errno_ssize(-EFAULT);
        if (offset && *offset < 0)
                return ret_errno_ssize(-EINVAL);
        if (count == 0)
                return 0;
        pos = offset ? *offset : sys_lseek(in_fd, 0, SEEK_CUR);
        if (pos < 0)
                /* read() would take a pipe's bytes for good: refuse as the kernel does */
                return ret_errno_ssize(errno == ESPIPE ? -EINVAL : -errno);
        /* rw_verify_area(): a count above SSIZE_MAX, or one that takes the position
         * past the largest offset (helpers 110, 111: the library sent the file) */
        if ((ssize_t) count < 0 || count > (uint64_t) (INT64_MAX - pos))
                return ret_errno_ssize(-EINVAL);
        if (count > SENDFILE_MAX_COUNT)
                count = SENDFILE_MAX_COUNT;
        /* where smc_setsockopt() keeps SO_SNDTIMEO: T (connect side) or the option
         * socket (accept side; none yet: never set) */
        timeo_fd = __atomic_load_n(&s->hidden, __ATOMIC_RELAXED);
        if (timeo_fd < 0)
                timeo_fd = __atomic_load_n(&s->optsock, __ATOMIC_RELAXED);
        conn_note_shared(s);
        for (;;) {
                bool nb = atomic_load_explicit(&s->nonblock, memory_order_relaxed);

                r = smc_ring_sendfile(&s->ep, in_fd, offset, count, 0, nb, timeo_fd);
                if (r != -EAGAIN || !mode_turned_blocking(s, nb, 0))
                        break; /* (else another copy made the socket blocking) */
        }
        if (r == -EISDIR)
                r = -EINVAL; /* (the kernel's: a directory cannot be spliced from) */
        if (r == -EPIPE)
                raise_sigpipe();
        return ret_errno_ssize(r);
}

/* @l's TCP socket T stopped listening (locked): the SMC side stops too. */
static void listener_stop_smc(struct smc_sock *l) {
        if (sock_state(l) != SOCK_LISTEN_SMC || l->chan < 0)
                return;
        l->listen_shut = true;
        if (getpid() == l->listen_pid && atomic_load(&fork_gen) == l->listen_fork_gen) {
                xreg_del(l, l->chan);
                (void) sys_epoll_ctl(l->fd, EPOLL_CTL_DEL, l->chan, NULL);
                listen_undo(l->listener_id, l->chan);
                l->chan = -1;
                if (l->dchan >= 0)
                        sys_close(l->dchan);
                l->dchan = -1;
        }
}

/* shutdown(2) of an SMC listener. As TCP's (inet_shutdown(): a listener shut for
 * reading stops listening): its TCP socket T answers and stops listening, and when it
 * did, the SMC side stops too: UNLISTEN (only the process that listened may; smcd then
 * hangs up every copy of the accept channel), what was queued is reset, and the
 * listener is never registered again. Connects are then refused, accept(2) fails with
 * EINVAL (T's answer) and a thread blocked in accept wakes. */
static int listener_shutdown(struct smc_sock *l, int how) {
        int r;

        pthread_mutex_lock(&l->lock);
        r = sys_shutdown(l->hidden, how);
        if (r == 0 && how != SHUT_WR)
                listener_stop_smc(l);
        pthread_mutex_unlock(&l->lock);
        return r;
}

/* connect(2) with AF_UNSPEC on an SMC listener: as TCP's (__inet_stream_connect(): the
 * disconnect a shutdown for reading makes, which stops listening; HAProxy pauses its
 * listeners so, and resumes them with listen(2)). */
static int listener_disconnect(struct smc_sock *l, const struct sockaddr *addr, socklen_t len) {
        int r;

        pthread_mutex_lock(&l->lock);
        r = sys_connect(l->hidden, addr, len);
        if (r == 0)
                listener_stop_smc(l);
        pthread_mutex_unlock(&l->lock);
        return r;
}

/* Give unconnected TCP socket @t (of @family, maybe bound) the state TCP's own
 * disconnect leaves (tcp_disconnect(): SO_ERROR ECONNRESET, POLLOUT|POLLERR|POLLHUP,
 * then ENOTCONN; connect(2) may be called again): connect it to a listener of ours on
 * loopback and disconnect it there. Best effort: on failure @t stays as it was
 * (unconnected, no error pending). Leaves @t blocking. */
static void disconnected_like_tcp(int t, int family) {
        struct sockaddr_storage ss = { .ss_family = (sa_family_t) family };
        socklen_t sl = family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
        struct sockaddr un = { .sa_family = AF_UNSPEC };
        struct pollfd p;
        int l, a = -1;

        if (family == AF_INET6)
                ((struct sockaddr_in6 *) &ss)->sin6_addr = in6addr_loopback;
        else
                ((struct sockaddr_in *) &ss)->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        l = sys_fd_off_stdio(sys_socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
        if (l < 0)
                return;
        if (sys_bind(l, (struct sockaddr *) &ss, sl) < 0 || sys_listen(l, 1) < 0 ||
            sys_getsockname(l, (struct sockaddr *) &ss, &sl) < 0)
                goto out;
        (void) set_nonblock(t, true);
        /* bounded: a firewall that drops loopback SYNs must not stall the call */
        if (sys_connect(t, (struct sockaddr *) &ss, sl) < 0 && errno != EINPROGRESS)
                goto out;
        p = (struct pollfd) { .fd = t, .events = POLLOUT };
        if (sys_poll(&p, 1, 200) <= 0 || (p.revents & (POLLERR | POLLHUP)))
                goto out;
        a = sys_fd_off_stdio(sys_accept4(l, NULL, NULL, SOCK_CLOEXEC));
        (void) sys_connect(t, &un, sizeof(un)); /* RST to a; ECONNRESET pending on t */
out:
        (void) set_nonblock(t, false);
        if (a >= 0)
                sys_close(a);
        sys_close(l);
}

/* connect(2) with AF_UNSPEC on an SMC connection: TCP's disconnect
 * (__inet_stream_connect(), tcp_disconnect()): the connection is reset, as by a close
 * with SO_LINGER {1, 0} (the peer gets ECONNRESET; a copy another process holds since
 * a fork only lets go of it, the reset comes with the last copy's close), and the
 * descriptor becomes an unconnected TCP socket with the socket's options, whose
 * SO_ERROR is ECONNRESET, and which may connect again (SMC again, if it can). The new
 * socket is not in the epoll sets the connection was in (it is a new file; TCP's stays
 * in them). Returns 0, or -1 with errno (ENOMEM, EMFILE: the connection is left as it
 * was). */
static int conn_disconnect(struct smc_sock *s) {
        struct smc_sock *n = NULL;
        int fd = s->fd, fdfl, o, t = -1, r;
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        bool lr, sole;

        pthread_mutex_lock(&s->lock);
        if (sock_state(s) != SOCK_SMCD || atomic_load(&s->closing)) {
                /* closed or disconnected meanwhile by another thread */
                pthread_mutex_unlock(&s->lock);
                return ret_errno(-EBADF);
        }
        fdfl = sys_fcntl(fd, F_GETFD, 0);
        o = opt_fd(s);
        if (fdfl < 0 || o < 0 || (t = sys_fcntl(o, F_DUPFD_CLOEXEC, 3)) < 0 ||
            !(n = sock_alloc(fd, s->family, SOCK_NEW, atomic_load(&s->nonblock)))) {
                r = fdfl < 0 || t < 0 ? -errno : -ENOMEM;
                if (t >= 0)
                        sys_close(t);
                pthread_mutex_unlock(&s->lock);
                return ret_errno(r < 0 ? r : -ENOMEM);
        }
        sock_copy_options(n, s); /* the options stay the socket's, as TCP's */
        /* (those the library kept to itself while connected) */
        if (s->nodelay)
                (void) sys_setsockopt(t, IPPROTO_TCP, TCP_NODELAY, &(int) { 1 }, sizeof(int));
        if (s->sndbuf)
                (void) sys_setsockopt(t, SOL_SOCKET, SO_SNDBUF, &s->sndbuf, sizeof(int));
        if (s->rcvbuf)
                (void) sys_setsockopt(t, SOL_SOCKET, SO_RCVBUF, &s->rcvbuf, sizeof(int));
        disconnected_like_tcp(t, s->family);
        if (atomic_load(&s->nonblock))
                (void) set_nonblock(t, true);
        if (sys_getsockname(t, (struct sockaddr *) &ss, &sl) == 0 &&
            ((ss.ss_family == AF_INET && ((struct sockaddr_in *) &ss)->sin_port) ||
             (ss.ss_family == AF_INET6 && ((struct sockaddr_in6 *) &ss)->sin6_port)))
                sock_set_state(n, SOCK_BOUND); /* bound by the app: the port stays */

        atomic_store_explicit(&s->closing, true, memory_order_release);
        if (atomic_load_explicit(&s->ew_regs, memory_order_relaxed))
                ew_sock_gone(s);
        /* (as sock_teardown() decides: a connection set up before a fork() may be
         * another process's too, and is only let go of) */
        sole = s->smcr || s->conn_fork_gen == atomic_load(&fork_gen);
        lr = s->linger_reset;
        s->linger_reset = true; /* TCP's disconnect resets the peer */
        sock_teardown(s);
        s->linger_reset = lr;
        /* a receive another thread sleeps in on X ends, as TCP's with EPIPE (not
         * when X may be another process's too: its reads would end at EOF) */
        if (sole)
                smc_ring_wake_closed(&s->ep, EPIPE);
        r = sys_dup3(t, fd, (fdfl & FD_CLOEXEC) ? O_CLOEXEC : 0) < 0 ? -errno : 0; /* X goes: smcd sees it */
        sys_close(t);
        sock_remove(s);
        if (r < 0 || sock_insert(n) < 0) {
                /* (dup3 onto an open number does not fail but for EBUSY, EINTR) */
                sock_release(n);
                if (r < 0)
                        (void) sys_close(fd); /* X, the connection torn down: closed */
        }
        pthread_mutex_unlock(&s->lock);
        sock_release(s);
        smc_debug("connect fd %d: AF_UNSPEC: the connection is reset, the fd is an unconnected TCP socket", fd);
        return ret_errno(r);
}

SMC_PUBLIC int smc_shutdown(int fd, int how) {
        struct smc_sock *l = sock_lookup(fd), *s;

        if (l && sock_state(l) == SOCK_CONNECTING) {
                int r;

                pthread_mutex_lock(&l->lock);
                if (sock_state(l) == SOCK_CONNECTING && !connect_tcp_done(l) &&
                    (how == SHUT_RD || how == SHUT_WR || how == SHUT_RDWR)) {
                        /* TCP's shutdown in SYN_SENT: the connect ends (inet_shutdown) */
                        r = connect_cancel_locked(l, how);
                        pthread_mutex_unlock(&l->lock);
                        return ret_errno(r);
                }
                if (sock_state(l) == SOCK_CONNECTING && atomic_load(&l->connect_clc) &&
                    (how == SHUT_RD || how == SHUT_WR || how == SHUT_RDWR)) {
                        /* of the connection being made: for it, once made (a nonblocking
                         * program must not wait for the handshake here either) */
                        l->connect_shut |= how + 1;
                        pthread_mutex_unlock(&l->lock);
                        return 0;
                }
                pthread_mutex_unlock(&l->lock);
                connect_settle(l); /* (then as the connection it became) */
                l = sock_lookup(fd);
        }
        s = data_sock(fd, &fd, 0);
        if (fd == DATA_FAIL)
                return -1; /* (a connect begun meanwhile by another thread) */
        if (!s && l && sock_state(l) == SOCK_LISTEN_SMC && (how == SHUT_RD || how == SHUT_WR || how == SHUT_RDWR))
                return listener_shutdown(l, how);
        if (!s)
                return sys_shutdown(fd, how);
        if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR) {
                errno = EINVAL;
                return -1;
        }
        if (smc_ring_tcp_closed(&s->ep)) {
                smc_ring_shutdown_wake(&s->ep); /* (inet_shutdown() wakes, then fails) */
                return ret_errno(-ENOTCONN);    /* as inet_shutdown() in state CLOSE */
        }
        conn_note_shared(s);
        return ret_errno(smc_ring_shutdown(&s->ep, how));
}

SMC_PUBLIC int smc_close(int fd) {
        struct smc_sock *s;
        int r;

again:
        s = sock_lookup(fd);
        if (!s && smc_fd_listener_internal(fd)) {
                /* (close_range() leaves it open too) */
                smc_debug("close(%d): the descriptor of an SMC listener of the library: left open", fd);
                return 0;
        }
        if (!s || in_vfork_child()) {
                if (s)
                        vfork_fd_note(fd, -1); /* the parent's socket: the child's copy goes */
                return sys_close(fd);
        }
        pthread_mutex_lock(&s->lock);
        if (atomic_load_explicit(&s->closing, memory_order_relaxed)) {
                /* another thread's close() (or disconnect) of this number got here
                 * first, and has ended: it holds the lock until the number is closed
                 * and out of the table. Look again: the number is closed (the kernel
                 * says EBADF), or already another file's, which is what this close
                 * is for (EBADF from us left that file open: helper 107) */
                pthread_mutex_unlock(&s->lock);
                goto again;
        }
        if (sock_state(s) == SOCK_CONNECTING) {
                /* TCP's close in SYN_SENT or of a connection just made: the connect
                 * (and smcd's handshake on T) ends first */
                (void) connect_cancel_locked(s, SHUT_RDWR);
                pthread_mutex_unlock(&s->lock);
                goto again;
        }
        /* in the table until the number is closed: a data call racing this close
         * (another thread's) finds it closing and waits for it (data_sock()), so it
         * never reads the doorbell bytes of X (the number's file until sys_close()) */
        atomic_store_explicit(&s->closing, true, memory_order_release);
        if (atomic_load_explicit(&s->ew_regs, memory_order_relaxed))
                ew_sock_gone(s);
        sock_teardown(s);
        r = sys_close(fd);
        sock_remove(s); /* (unless a socket opened meanwhile took the number) */
        pthread_mutex_unlock(&s->lock);
        sock_release(s);
        return r;
}

/* The library's own descriptors of @s (locked): its hidden TCP socket, option socket,
 * accept channel and its copy of smcd's end, and the peer's doorbell end Y; stored
 * from @out[*n], at most @max. */
static void sock_internal_fds(struct smc_sock *s, int *out, size_t *n, size_t max) {
        int fds[5] = { s->hidden, s->optsock, s->chan,
                       sock_state(s) == SOCK_SMCD ? __atomic_load_n(&s->ep.y_peer, __ATOMIC_RELAXED) : -1,
                       sock_state(s) == SOCK_LISTEN_SMC ? s->dchan : -1 };

        for (size_t i = 0; i < 5; i++)
                if (fds[i] >= 0 && *n < max)
                        out[(*n)++] = fds[i];
}

static int cmp_int(const void *a, const void *b) {
        int x = *(const int *) a, y = *(const int *) b;

        return (x > y) - (x < y);
}

/* The library's own descriptors of every socket (and, if @app, the program's
 * descriptor of each), after those of the control connection, into @out (room for
 * @cap). Returns how many. */
static size_t lib_fds(int *out, size_t cap, bool app) {
        size_t n = smc_ctl_client_fds(out);
        struct smc_sock *s;

        for (unsigned pos = 0; (s = table_next(&pos, FD_MAX));) {
                pthread_mutex_lock(&s->lock);
                if (sock_lookup(s->fd) == s) {
                        if (app && n < cap)
                                out[n++] = s->fd;
                        sock_internal_fds(s, out, &n, cap);
                }
                pthread_mutex_unlock(&s->lock);
        }
        return n;
}

/* (room lib_fds() needs: 2 control descriptors, 5 per socket) */
static size_t lib_fds_cap(void) {
        size_t cap = 2;

        for (unsigned top = 0; top < FD_TOP; top++)
                if (atomic_load_explicit(&fd_table[top], memory_order_acquire))
                        cap += 5 * FD_CHUNK;
        return cap;
}

int smc_lib_fds(int **ret) {
        size_t cap = lib_fds_cap();
        int *fds = malloc(cap * sizeof(int));

        *ret = NULL;
        if (!fds)
                return -ENOMEM;
        *ret = fds;
        return (int) lib_fds(fds, cap, true);
}

/* close_range(@first, @last, @flags) by the kernel around the @n numbers of @keep
 * (sorted here). Returns 0, or -1 with errno. */
static int close_range_except(unsigned first, unsigned last, unsigned flags, int *keep, size_t n) {
        unsigned lo = first;
        int r = 0;

        qsort(keep, n, sizeof(int), cmp_int);
        for (size_t i = 0; i < n && r == 0; i++) {
                unsigned k = (unsigned) keep[i];

                if (k < lo || k > last)
                        continue;
                if (k > lo)
                        r = (int) smc_syscall(SYS_close_range, lo, k - 1, flags);
                lo = k + 1;
        }
        if (r == 0 && lo <= last)
                r = (int) smc_syscall(SYS_close_range, lo, last, flags);
        return r;
}

/* listener descriptors a vfork() child's close_range() keeps open at most (2 per
 * listener; 64 KiB of its stack) */
#define VFORK_KEEP_MAX 16384u

int smc_fd_close_range(unsigned first, unsigned last, unsigned flags) {
        unsigned end = last < FD_MAX ? last + 1 : FD_MAX; /* (last: up to ~0U) */
        size_t n = 0, cap = 2;
        int *keep = NULL, r = 0;

        if (first > last || (flags & ~CLOSE_RANGE_CLOEXEC_FLAG) != 0)
                /* the kernel's answer (EINVAL), CLOSE_RANGE_UNSHARE as it is */
                return (int) smc_syscall(SYS_close_range, first, last, flags);
        if (in_vfork_child()) {
                /* CPython's subprocess closes the descriptors so between vfork and
                 * exec: the parent's library state stays, its sockets' descriptors
                 * go, but not those of its listeners, which an exec hands on
                 * (listener_internal_fds(); no malloc here: the parent's heap; the
                 * stack below ours is the child's to use) */
                int lk[128], *big;
                size_t ln = listener_internal_fds(lk, 128, -1), bn;

                if (ln == 0)
                        return (int) smc_syscall(SYS_close_range, first, last, flags);
                if (ln <= 128)
                        return close_range_except(first, last, flags, lk, ln);
                if (ln > VFORK_KEEP_MAX)
                        return (int) smc_syscall(SYS_close_range, first, last, flags);
                big = alloca(VFORK_KEEP_MAX * sizeof(int));
                bn = listener_internal_fds(big, VFORK_KEEP_MAX, -1);
                if (bn > VFORK_KEEP_MAX) /* (another thread of the parent made more) */
                        return (int) smc_syscall(SYS_close_range, first, last, flags);
                return close_range_except(first, last, flags, big, bn);
        }

        /* the program's sockets in the range first, each as close() would (with
         * CLOSE_RANGE_CLOEXEC: the flag on its descriptor is all, as on TCP's) */
        for (unsigned pos = first; !(flags & CLOSE_RANGE_CLOEXEC_FLAG) && table_next(&pos, end);)
                (void) smc_close((int) pos - 1);
        /* then the rest, around the library's own descriptors of the sockets left
         * (their connections must keep working) and its control connection */
        cap = lib_fds_cap();
        keep = malloc(cap * sizeof(int));
        if (!keep) {
                errno = ENOMEM;
                return -1;
        }
        n = lib_fds(keep, cap, false);
        r = close_range_except(first, last, flags, keep, n);
        free(keep);
        return r;
}

/* ------------------------------------------------------------------------- */
/* Options and names */

static int put_int(void *val, socklen_t *len, int v) {
        if (smc_uptr_bad(len))
                return -EFAULT;
        if ((int) *len < 0)
                return -EINVAL;
        if (*len > 0 && smc_uptr_bad(val))
                return -EFAULT;
        if (*len > sizeof(int))
                *len = sizeof(int);
        memcpy(val, &v, *len);
        return 0;
}

static int get_int(const void *val, socklen_t len, int *v) {
        if (len < sizeof(int))
                return -EINVAL;
        if (smc_uptr_bad(val))
                return -EFAULT;
        memcpy(v, val, sizeof(int));
        return 0;
}

/* The option socket of an accepted SMC connection: an unconnected TCP socket of its
 * family that stores the options, starting with what the listener's options gave
 * the connection (opt_inherit()). Returns it, or -1. */
static int optsock_make(struct smc_sock *s) {
        int t = sys_fd_off_stdio(sys_socket(s->family, SOCK_STREAM | SOCK_CLOEXEC, 0));

        for (unsigned i = 0; t >= 0 && i < s->n_inh; i++)
                (void) sys_setsockopt(t, s->inh[i].level, s->inh[i].name, s->inh[i].val, s->inh[i].len);
        __atomic_store_n(&s->optsock, t, __ATOMIC_RELAXED); /* smc_sendfile() reads it */
        return t;
}

/* The TCP socket that takes options we do not handle ourselves. */
static int opt_fd(struct smc_sock *s) {
        switch (sock_state(s)) {
        case SOCK_LISTEN_SMC:
                return s->hidden;
        case SOCK_SMCD:
                if (s->hidden >= 0)
                        return s->hidden;
                /* accept side: an unconnected socket of our family just stores them */
                return s->optsock >= 0 ? s->optsock : optsock_make(s);
        default:
                return s->fd;
        }
}

/* Options a TCP socket accepted from a listener has from it (the kernel clones the
 * listener's socket) and that the option socket of an accepted SMC connection
 * stores. TCP_NODELAY, TCP_CORK and TCP_MAXSEG are kept in struct smc_sock;
 * SO_SNDBUF / SO_RCVBUF size the rings. (SO_PRIORITY is not inherited.) */
static const struct {
        int level, name;
} inherit_opts[] = {
        { SOL_SOCKET, SO_KEEPALIVE },      { SOL_SOCKET, SO_LINGER },         { SOL_SOCKET, SO_REUSEADDR },
        { SOL_SOCKET, SO_REUSEPORT },      { SOL_SOCKET, SO_RCVTIMEO },       { SOL_SOCKET, SO_SNDTIMEO },
        { SOL_SOCKET, SO_OOBINLINE },      { SOL_SOCKET, SO_RCVLOWAT },       { IPPROTO_TCP, TCP_KEEPIDLE },
        { IPPROTO_TCP, TCP_KEEPINTVL },    { IPPROTO_TCP, TCP_KEEPCNT },      { IPPROTO_TCP, TCP_CONGESTION },
        { IPPROTO_TCP, TCP_USER_TIMEOUT }, { IPPROTO_TCP, TCP_LINGER2 },      { IPPROTO_TCP, TCP_NOTSENT_LOWAT },
        { IPPROTO_TCP, TCP_WINDOW_CLAMP }, { IPPROTO_IP, IP_TOS },            { IPPROTO_IP, IP_TTL },
        { IPPROTO_IPV6, IPV6_TCLASS },     { IPPROTO_IPV6, IPV6_UNICAST_HOPS }, { IPPROTO_TCP, TCP_INQ },
        /* (helper 130: these went back to their defaults) */
        { SOL_SOCKET, SO_BINDTODEVICE },   { SOL_SOCKET, SO_DONTROUTE },      { SOL_SOCKET, SO_BROADCAST },
        { SOL_SOCKET, SO_TIMESTAMP },      { SOL_SOCKET, SO_TIMESTAMPNS },    { SOL_SOCKET, SO_BUSY_POLL },
        { SOL_SOCKET, SO_MARK },           { SOL_SOCKET, SO_ZEROCOPY },       { IPPROTO_TCP, TCP_SYNCNT },
        { IPPROTO_TCP, TCP_THIN_LINEAR_TIMEOUTS }, { IPPROTO_TCP, TCP_SAVE_SYN }, { IPPROTO_IP, IP_MTU_DISCOVER },
        { IPPROTO_IP, IP_RECVTOS },        { IPPROTO_IP, IP_PKTINFO },        { IPPROTO_IP, IP_FREEBIND },
        { IPPROTO_IP, IP_TRANSPARENT },    { IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT }, { IPPROTO_IP, IP_RECVTTL },
        { IPPROTO_IPV6, IPV6_V6ONLY },     { IPPROTO_IPV6, IPV6_RECVTCLASS }, { IPPROTO_IPV6, IPV6_MTU_DISCOVER },
        { IPPROTO_IPV6, IPV6_RECVPKTINFO },
};

static bool opt_inheritable(int level, int name) {
        for (size_t i = 0; i < sizeof(inherit_opts) / sizeof(inherit_opts[0]); i++)
                if (inherit_opts[i].level == level && inherit_opts[i].name == name)
                        return true;
        return false;
}

/* Remember an option set (successfully) on @s before it is connected or while it
 * listens, for the connections it will accept. The latest value of an option wins;
 * beyond OPT_INHERIT_MAX different options the rest are not inherited. Caller holds
 * s->lock. */
static void opt_record(struct smc_sock *s, int level, int name, const void *val, socklen_t len) {
        unsigned i;

        if (!opt_inheritable(level, name) || !val)
                return;
        for (i = 0; i < s->n_inh; i++)
                if (s->inh[i].level == level && s->inh[i].name == name)
                        break;
        if (i == OPT_INHERIT_MAX)
                return;
        if (i == s->n_inh)
                s->n_inh++;
        s->inh[i].level = level;
        s->inh[i].name = name;
        /* the kernel reads at most this much of each of them (a TCP_CONGESTION name: 15) */
        s->inh[i].len = len < OPT_VAL_MAX ? len : OPT_VAL_MAX;
        memcpy(s->inh[i].val, val, s->inh[i].len);
}

/* Take the options of @s's listening TCP socket @t that its connections inherit
 * (opt_inheritable(), TCP_NODELAY, TCP_CORK, SO_LINGER {1, 0}, TCP_MAXSEG) where they
 * differ from a new socket's, in place of what was recorded: the kernel's socket is
 * the truth, also for a listener whose options were set where the library did not
 * see it (before an exec, in the process that passed it over SCM_RIGHTS, by systemd
 * for socket activation). About 45 system calls, once per listen. Caller holds
 * s->lock. */
static void opt_capture(struct smc_sock *s, int t) {
        int fresh = sys_fd_off_stdio(sys_socket(s->family, SOCK_STREAM | SOCK_CLOEXEC, 0)), v = 0, w = 0;
        socklen_t vl = sizeof(v), wl = sizeof(w);
        struct linger lg;
        socklen_t ll = sizeof(lg);

        if (sys_getsockopt(t, SOL_SOCKET, SO_ACCEPTCONN, &v, &vl) < 0 || !v || fresh < 0) {
                /* (not a listening socket: what was recorded stays) */
                if (fresh >= 0)
                        sys_close(fresh);
                return;
        }
        vl = sizeof(v);
        s->n_inh = 0;
        for (size_t i = 0; i < sizeof(inherit_opts) / sizeof(inherit_opts[0]); i++) {
                uint8_t a[OPT_VAL_MAX] = { 0 }, b[OPT_VAL_MAX] = { 0 };
                socklen_t al = sizeof(a), bl = sizeof(b);

                /* (TCP_SAVE_SYN may be the library's own: syn_offered_smc()) */
                if (inherit_opts[i].level == IPPROTO_TCP && inherit_opts[i].name == TCP_SAVE_SYN &&
                    !__atomic_load_n(&s->app_save_syn, __ATOMIC_RELAXED))
                        continue;
                if (sys_getsockopt(t, inherit_opts[i].level, inherit_opts[i].name, a, &al) < 0 ||
                    sys_getsockopt(fresh, inherit_opts[i].level, inherit_opts[i].name, b, &bl) < 0)
                        continue; /* (IPPROTO_IP on an IPv6 socket...) */
                if (al != bl || memcmp(a, b, al) != 0)
                        opt_record(s, inherit_opts[i].level, inherit_opts[i].name, a, al);
        }
        if (sys_getsockopt(t, IPPROTO_TCP, TCP_NODELAY, &v, &vl) == 0)
                s->nodelay = v != 0;
        vl = sizeof(v);
        if (sys_getsockopt(t, IPPROTO_TCP, TCP_CORK, &v, &vl) == 0)
                s->cork = v != 0;
        if (sys_getsockopt(t, SOL_SOCKET, SO_LINGER, &lg, &ll) == 0)
                s->linger_reset = lg.l_onoff && lg.l_linger == 0;
        vl = sizeof(v);
        /* (a listener answers its user_mss, if set, else the default MSS) */
        if (sys_getsockopt(t, IPPROTO_TCP, TCP_MAXSEG, &v, &vl) == 0 &&
            sys_getsockopt(fresh, IPPROTO_TCP, TCP_MAXSEG, &w, &wl) == 0)
                s->user_mss = v != w ? v : 0;
        sys_close(fresh);
}

/* A new SMC connection @s accepted from listener @l takes @l's options as an
 * accepted TCP socket does: TCP_NODELAY, TCP_CORK (the ring starts corked),
 * TCP_MAXSEG, SO_RCVTIMEO (on X, where a blocking receive sleeps), TCP_INQ and the recorded
 * rest, which go to its option socket when that is made (at once if SO_SNDTIMEO is
 * among them: sendfile reads it there). @s is not in the table yet. */
static void opt_inherit(struct smc_sock *s, struct smc_sock *l) {
        bool sndtimeo = false;

        pthread_mutex_lock(&l->lock);
        s->nodelay = l->nodelay;
        s->cork = l->cork;
        s->linger_reset = l->linger_reset;
        s->user_mss = l->user_mss;
        s->n_inh = l->n_inh;
        memcpy(s->inh, l->inh, l->n_inh * sizeof(l->inh[0]));
        pthread_mutex_unlock(&l->lock);
        if (s->cork)
                (void) smc_ring_set_cork(&s->ep, true);
        atomic_store_explicit(&s->inq, 0, memory_order_relaxed);
        for (unsigned i = 0; i < s->n_inh; i++) {
                if (s->inh[i].level == IPPROTO_TCP && s->inh[i].name == TCP_INQ && s->inh[i].len >= sizeof(int)) {
                        int v;

                        memcpy(&v, s->inh[i].val, sizeof(v));
                        atomic_store_explicit(&s->inq, (signed char) (v != 0), memory_order_relaxed);
                }
                if (s->inh[i].level != SOL_SOCKET)
                        continue;
                if (s->inh[i].name == SO_RCVTIMEO &&
                    sys_setsockopt(s->fd, SOL_SOCKET, SO_RCVTIMEO, s->inh[i].val, s->inh[i].len) == 0)
                        s->rcvtimeo_set = true;
                else if (s->inh[i].name == SO_SNDTIMEO)
                        sndtimeo = true;
                else if (s->inh[i].name == SO_RCVLOWAT && s->inh[i].len >= sizeof(int)) {
                        int v;

                        memcpy(&v, s->inh[i].val, sizeof(v));
                        smc_ring_set_rcvlowat(&s->ep, v);
                }
        }
        if (sndtimeo && s->optsock < 0)
                (void) optsock_make(s);
}

/* What Linux would answer for a TCP connection between two sockets of this host
 * (routed over lo), read once per process: lo's MTU, and whether TCP timestamps
 * are on (net.ipv4.tcp_timestamps; they take 12 bytes of each segment). */
static _Atomic int lo_mtu_cache;    /* bytes; 0 = not read yet */
static _Atomic int tcp_ts_cache;    /* 0 = not read yet, 1 = off, 2 = on */
static _Atomic uint32_t tcp_info_klen; /* the kernel's sizeof(struct tcp_info); 0 = not asked */

static int lo_mtu(int any_sock) {
        int mtu = atomic_load_explicit(&lo_mtu_cache, memory_order_relaxed);
        struct ifreq ifr = {};

        if (mtu > 0)
                return mtu;
        strcpy(ifr.ifr_name, "lo");
        mtu = sys_ioctl(any_sock, SIOCGIFMTU, &ifr) == 0 && ifr.ifr_mtu > 0 ? ifr.ifr_mtu : 65536;
        atomic_store_explicit(&lo_mtu_cache, mtu, memory_order_relaxed);
        return mtu;
}

static bool tcp_timestamps(void) {
        int ts = atomic_load_explicit(&tcp_ts_cache, memory_order_relaxed);
        char b[8] = {};
        int fd;

        if (ts)
                return ts == 2;
        ts = 2; /* the default: on */
        fd = sys_fd_off_stdio((int) smc_syscall(SYS_openat, AT_FDCWD, "/proc/sys/net/ipv4/tcp_timestamps",
                                                O_RDONLY | O_CLOEXEC));
        if (fd >= 0) {
                if (sys_read(fd, b, sizeof(b) - 1) > 0 && b[0] == '0')
                        ts = 1;
                sys_close(fd);
        }
        atomic_store_explicit(&tcp_ts_cache, ts, memory_order_relaxed);
        return ts == 2;
}

/* The MTU of the route to @s's peer (SMC-R: another host), from a UDP socket
 * connected to it (nothing is sent); 0 if unknown. */
static int route_mtu(struct smc_sock *s) {
        int fd = sys_fd_off_stdio(sys_socket(s->family, SOCK_DGRAM | SOCK_CLOEXEC, 0)), mtu = 0;
        socklen_t l = sizeof(mtu);

        if (fd < 0)
                return 0;
        if (sys_connect(fd, (const struct sockaddr *) &s->peer, s->peer_len) < 0 ||
            sys_getsockopt(fd, s->family == AF_INET ? IPPROTO_IP : IPPROTO_IPV6,
                           s->family == AF_INET ? IP_MTU : IPV6_MTU, &mtu, &l) < 0)
                mtu = 0;
        sys_close(fd);
        return mtu > 0 ? mtu : 0;
}

/* The segment sizes of a TCP connection in place of SMC connection @s, as Linux
 * computes them for one over lo (SMC-D; SMC-R: over the route to the peer):
 * *ret_pmtu the path MTU (65535 at most for IPv4), *ret_advmss the MSS it
 * advertises (the MTU less the IP and TCP headers, clamped by TCP_MAXSEG set before
 * the connection, less the timestamp option), and the return value, the MSS it sends
 * with (TCP_MAXSEG): advmss, at most half the largest window the peer offers
 * (tcp_bound_to_half_wnd()), here the ring we write into. */
static uint32_t tcp_mss(struct smc_sock *s, uint32_t *ret_advmss, uint32_t *ret_pmtu) {
        const struct sockaddr_in6 *p6 = (const struct sockaddr_in6 *) &s->peer;
        bool v4 = s->family == AF_INET || (s->peer_len >= sizeof(*p6) && IN6_IS_ADDR_V4MAPPED(&p6->sin6_addr));
        int rmtu = s->smcr ? route_mtu(s) : 0;
        uint32_t mtu = (uint32_t) (rmtu > 0 ? rmtu : lo_mtu(s->fd)), pmtu, adv, mss;

        if (mtu < 576)
                mtu = 576; /* no TCP path is narrower (IPv4's minimum datagram) */

        if (v4) {
                pmtu = mtu < 65535 ? mtu : 65535;
                adv = pmtu - 40;
        } else {
                pmtu = mtu;
                adv = mtu - 60 > 65535 - 20 ? 65535 : mtu - 60; /* ip6_default_advmss() */
        }
        if (s->user_mss > 0 && (uint32_t) s->user_mss < adv)
                adv = (uint32_t) s->user_mss;
        if (tcp_timestamps())
                adv -= 12;
        mss = adv < s->ep.tx_size / 2 ? adv : s->ep.tx_size / 2;
        if (ret_advmss)
                *ret_advmss = adv;
        if (ret_pmtu)
                *ret_pmtu = pmtu;
        return mss;
}

/* struct tcp_info as Linux 6.18 has it (include/uapi/linux/tcp.h; fields are only
 * ever appended). glibc's <netinet/tcp.h> has an older, shorter one, and
 * <linux/tcp.h> cannot be included beside it. */
struct smc_tcp_info {
        uint8_t tcpi_state, tcpi_ca_state, tcpi_retransmits, tcpi_probes, tcpi_backoff, tcpi_options;
        uint8_t tcpi_snd_wscale : 4, tcpi_rcv_wscale : 4;
        uint8_t tcpi_delivery_rate_app_limited : 1, tcpi_fastopen_client_fail : 2;
        uint32_t tcpi_rto, tcpi_ato, tcpi_snd_mss, tcpi_rcv_mss;
        uint32_t tcpi_unacked, tcpi_sacked, tcpi_lost, tcpi_retrans, tcpi_fackets;
        uint32_t tcpi_last_data_sent, tcpi_last_ack_sent, tcpi_last_data_recv, tcpi_last_ack_recv;
        uint32_t tcpi_pmtu, tcpi_rcv_ssthresh, tcpi_rtt, tcpi_rttvar, tcpi_snd_ssthresh, tcpi_snd_cwnd;
        uint32_t tcpi_advmss, tcpi_reordering, tcpi_rcv_rtt, tcpi_rcv_space, tcpi_total_retrans;
        uint64_t tcpi_pacing_rate, tcpi_max_pacing_rate, tcpi_bytes_acked, tcpi_bytes_received;
        uint32_t tcpi_segs_out, tcpi_segs_in, tcpi_notsent_bytes, tcpi_min_rtt;
        uint32_t tcpi_data_segs_in, tcpi_data_segs_out;
        uint64_t tcpi_delivery_rate, tcpi_busy_time, tcpi_rwnd_limited, tcpi_sndbuf_limited;
        uint32_t tcpi_delivered, tcpi_delivered_ce;
        uint64_t tcpi_bytes_sent, tcpi_bytes_retrans;
        uint32_t tcpi_dsack_dups, tcpi_reord_seen, tcpi_rcv_ooopack, tcpi_snd_wnd, tcpi_rcv_wnd, tcpi_rehash;
        uint16_t tcpi_total_rto, tcpi_total_rto_recoveries;
        uint32_t tcpi_total_rto_time, tcpi_received_ce;
        uint32_t tcpi_delivered_e1_bytes, tcpi_delivered_e0_bytes, tcpi_delivered_ce_bytes;
        uint32_t tcpi_received_e1_bytes, tcpi_received_e0_bytes, tcpi_received_ce_bytes;
        uint16_t tcpi_accecn_fail_mode, tcpi_accecn_opt_seen;
};
_Static_assert(offsetof(struct smc_tcp_info, tcpi_rto) == 8 && offsetof(struct smc_tcp_info, tcpi_pacing_rate) == 104 &&
               offsetof(struct smc_tcp_info, tcpi_bytes_acked) == 120 &&
               offsetof(struct smc_tcp_info, tcpi_delivery_rate) == 160 &&
               offsetof(struct smc_tcp_info, tcpi_bytes_sent) == 200 && offsetof(struct smc_tcp_info, tcpi_snd_wnd) == 228 &&
               sizeof(struct smc_tcp_info) == 280,
               "struct tcp_info layout");

#define TCPI_STATE_ESTABLISHED 1
#define TCPI_STATE_FIN_WAIT2 5
#define TCPI_STATE_CLOSE 7
#define TCPI_STATE_CLOSE_WAIT 8
#define TCPI_OPTS_LOOPBACK 0x7 /* TCPI_OPT_TIMESTAMPS | TCPI_OPT_SACK | TCPI_OPT_WSCALE */
#define TCPI_RTO_US 200000u    /* TCP_RTO_MIN */
#define TCPI_RTT_US 1u         /* SMC-D's round trip is about a microsecond or less */
#define TCPI_REORDERING 3u     /* net.ipv4.tcp_reordering's default */
#define TCPI_INFINITE_SSTHRESH 0x7fffffffu

/* The window scale Linux would need to advertise a window of @bytes. */
static uint8_t tcp_wscale(uint32_t bytes) {
        uint8_t ws = 0;

        while (ws < 14 && (bytes >> ws) > 65535u)
                ws++;
        return ws;
}

/* getsockopt(TCP_INFO) on SMC connection @s: what TCP would say of a connection that
 * moved the same bytes over lo. From the rings (dmb.h): state from the close flags,
 * bytes and messages from the header counters (every send and every consuming recv
 * counts as a segment each way, as data and as a window update), in-flight and unsent
 * bytes from the cursors, windows from the ring sizes; segment sizes as tcp_mss(); a
 * nominal rtt, unless the connection has a real TCP socket under it (SMC-R, the
 * connecting side), whose path figures (rtt, rto, MSS, options) are taken. Copies
 * min(*len, the kernel's sizeof(struct tcp_info)) bytes and sets *len, as Linux does.
 * Returns 0, -EINVAL (*len negative), -EFAULT. */
static int tcp_info_smc(struct smc_sock *s, void *val, socklen_t *len) {
        union {
                struct smc_tcp_info ti;
                uint8_t raw[512];
        } u = {}, k = {};
        struct smc_tcp_info *ti = &u.ti;
        struct smc_ring_ep *ep = &s->ep;
        uint32_t klen = atomic_load_explicit(&tcp_info_klen, memory_order_relaxed), flags, pmtu, advmss, mss, unacked,
                 unread, unpub, readable;
        uint64_t tx_cons, tx_pub, tx_prod, sent, tx_msgs, rx_msgs, peer_recvs, our_recvs;
        bool wr_shut, real = false;

        if (smc_uptr_bad(len))
                return -EFAULT;
        if ((int) *len < 0)
                return -EINVAL;
        if (*len > 0 && smc_uptr_bad(val))
                return -EFAULT;
        if (s->smcr && s->hidden >= 0) {
                socklen_t kl = sizeof(k);

                real = sys_getsockopt(s->hidden, IPPROTO_TCP, TCP_INFO, &k, &kl) == 0 &&
                       k.ti.tcpi_state != TCPI_STATE_CLOSE;
                if (real && klen == 0)
                        klen = kl;
        }
        if (klen == 0) {
                int t = sys_fd_off_stdio(sys_socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
                socklen_t kl = sizeof(k);

                klen = sizeof(*ti);
                if (t >= 0) {
                        if (sys_getsockopt(t, IPPROTO_TCP, TCP_INFO, &k.raw, &kl) == 0 && kl > 0)
                                klen = kl;
                        sys_close(t);
                }
        }
        if (klen > sizeof(u))
                klen = sizeof(u);
        atomic_store_explicit(&tcp_info_klen, klen, memory_order_relaxed);

        flags = atomic_load_explicit(&ep->rx_hdr->conn_flags, memory_order_acquire);
        wr_shut = smc_ring_wr_shut(ep); /* (also through another copy: a dup, fork) */
        if (smc_ring_tcp_closed(ep))
                ti->tcpi_state = TCPI_STATE_CLOSE; /* reset, or FINs both ways */
        else if (flags & (SMC_DMB_CONN_DONE_WRITING | SMC_DMB_CONN_CLOSED))
                ti->tcpi_state = TCPI_STATE_CLOSE_WAIT;
        else
                ti->tcpi_state = wr_shut ? TCPI_STATE_FIN_WAIT2 : TCPI_STATE_ESTABLISHED;

        tx_cons = atomic_load(&ep->tx_hdr->cons);
        tx_pub = atomic_load(&ep->tx_hdr->prod);
        /* (this copy's cursor only while it holds bytes back: another copy may have
         * published past it, SIOCOUTQ's case) */
        tx_prod = __atomic_load_n(&ep->tx_unpub, __ATOMIC_RELAXED) ? __atomic_load_n(&ep->tx_prod, __ATOMIC_RELAXED)
                                                                  : tx_pub;
        unread = smc_curs_diff(ep->tx_size, tx_cons, tx_pub); /* sent, not yet taken by the peer */
        unpub = smc_curs_diff(ep->tx_size, tx_pub, tx_prod);  /* held back by cork */
        if (ti->tcpi_state == TCPI_STATE_CLOSE)
                unread = unpub = 0; /* as TCP's reset purges its write queue */
        readable = smc_ring_readable(ep);
        sent = atomic_load_explicit(&ep->tx_hdr->prod_bytes, memory_order_relaxed);
        tx_msgs = atomic_load_explicit(&ep->tx_hdr->prod_msgs, memory_order_relaxed);
        rx_msgs = atomic_load_explicit(&ep->rx_hdr->prod_msgs, memory_order_relaxed);
        our_recvs = atomic_load_explicit(&ep->rx_hdr->cons_msgs, memory_order_relaxed);
        peer_recvs = atomic_load_explicit(&ep->tx_hdr->cons_msgs, memory_order_relaxed);
        mss = tcp_mss(s, &advmss, &pmtu);
        unacked = (unread + mss - 1) / mss;

        ti->tcpi_options = tcp_timestamps() ? TCPI_OPTS_LOOPBACK : TCPI_OPTS_LOOPBACK & ~1u;
        ti->tcpi_snd_wscale = tcp_wscale(ep->tx_size) & 0xf;
        ti->tcpi_rcv_wscale = tcp_wscale(ep->rx_size) & 0xf;
        ti->tcpi_rto = TCPI_RTO_US;
        ti->tcpi_snd_mss = ti->tcpi_rcv_mss = mss;
        ti->tcpi_advmss = advmss;
        ti->tcpi_pmtu = pmtu;
        ti->tcpi_unacked = unacked;
        ti->tcpi_rcv_ssthresh = ti->tcpi_rcv_space = ep->rx_size;
        ti->tcpi_rtt = ti->tcpi_min_rtt = TCPI_RTT_US;
        ti->tcpi_rttvar = TCPI_RTT_US;
        ti->tcpi_snd_ssthresh = TCPI_INFINITE_SSTHRESH;
        ti->tcpi_reordering = TCPI_REORDERING;
        ti->tcpi_pacing_rate = ti->tcpi_max_pacing_rate = UINT64_MAX; /* no pacing */
        ti->tcpi_bytes_sent = sent;
        ti->tcpi_bytes_acked = sent >= unread ? sent - unread : 0;
        ti->tcpi_bytes_received = atomic_load_explicit(&ep->rx_hdr->prod_bytes, memory_order_relaxed);
        ti->tcpi_data_segs_out = (uint32_t) tx_msgs;
        ti->tcpi_data_segs_in = (uint32_t) rx_msgs;
        ti->tcpi_segs_out = (uint32_t) (tx_msgs + our_recvs);
        ti->tcpi_segs_in = (uint32_t) (rx_msgs + peer_recvs);
        ti->tcpi_delivered = tx_msgs >= unacked ? (uint32_t) (tx_msgs - unacked) : 0;
        ti->tcpi_notsent_bytes = unpub;
        ti->tcpi_snd_wnd = ep->tx_size - unread;
        ti->tcpi_rcv_wnd = ep->rx_size - (readable < ep->rx_size ? readable : ep->rx_size);
        if (real) {
                /* the path is the TCP connection's */
                ti->tcpi_options = k.ti.tcpi_options;
                ti->tcpi_snd_wscale = k.ti.tcpi_snd_wscale;
                ti->tcpi_rcv_wscale = k.ti.tcpi_rcv_wscale;
                ti->tcpi_rto = k.ti.tcpi_rto;
                ti->tcpi_snd_mss = k.ti.tcpi_snd_mss;
                ti->tcpi_rcv_mss = k.ti.tcpi_rcv_mss;
                ti->tcpi_advmss = k.ti.tcpi_advmss;
                ti->tcpi_pmtu = k.ti.tcpi_pmtu;
                ti->tcpi_rtt = k.ti.tcpi_rtt;
                ti->tcpi_rttvar = k.ti.tcpi_rttvar;
                ti->tcpi_min_rtt = k.ti.tcpi_min_rtt;
                mss = ti->tcpi_snd_mss > 0 ? ti->tcpi_snd_mss : mss;
        }
        /* the window the peer's ring gives, in segments */
        ti->tcpi_snd_cwnd = (ep->tx_size + mss - 1) / mss;

        if (*len > klen)
                *len = klen;
        if (*len > 0)
                memcpy(val, &u, *len);
        return 0;
}

/* getsockopt(TCP_MAXSEG) on SMC connection @s: the TCP connection's own MSS where
 * one is under it (SMC-R, the connecting side), else as tcp_mss(). */
static int tcp_maxseg_smc(struct smc_sock *s, void *val, socklen_t *len) {
        if (s->smcr && s->hidden >= 0)
                return neg_errno(sys_getsockopt(s->hidden, IPPROTO_TCP, TCP_MAXSEG, val, len));
        return put_int(val, len, (int) tcp_mss(s, NULL, NULL));
}

/* Set option @level/@name to @v on SMC connection @o (o->lock held): the options the
 * library keeps itself (its ring's, or its own fields). (SO_RCVLOWAT's mark lives in
 * the rx DMB header, which every copy shares already.) */
static void sock_apply_option(struct smc_sock *o, int level, int name, int v) {
        if (level == IPPROTO_TCP && name == TCP_CORK)
                (void) smc_ring_set_cork(&o->ep, v != 0);
        else if (level == IPPROTO_TCP && name == TCP_NODELAY)
                o->nodelay = v != 0;
        else if (level == IPPROTO_TCP && name == TCP_INQ)
                atomic_store_explicit(&o->inq, (signed char) (v != 0), memory_order_relaxed);
        else if (level == SOL_SOCKET && name == SO_LINGER) {
                o->linger_reset = v != 0;
                smc_ring_set_linger_reset(&o->ep, o->linger_reset);
        }
}

/* TCP keeps options per socket, shared by all of its descriptors: an option set
 * through descriptor @s of SMC connection @conn_id that the library keeps itself
 * (sock_apply_option(); @v: its value, for SO_LINGER whether it resets) goes to the
 * other descriptors of that connection in this process too (before, TCP_CORK set
 * through a dup(2) did not hold back what the original sent). A walk of the table,
 * only for a connection dup'd here (dup_shared), with each copy's lock taken alone
 * (s->lock released: two threads setting options through two copies cannot deadlock).
 * Copies in other processes (fork) keep their own: smcrun(1). */
static void copies_set_option(struct smc_sock *s, uint64_t conn_id, int level, int name, int v) {
        struct smc_sock *o;

        for (unsigned pos = 0; (o = table_next(&pos, FD_MAX));) {
                if (o == s || !o->dup_shared)
                        continue;
                pthread_mutex_lock(&o->lock);
                if (sock_state(o) == SOCK_SMCD && o->conn_id == conn_id && o->fd == (int) pos - 1 &&
                    !atomic_load_explicit(&o->closing, memory_order_relaxed))
                        sock_apply_option(o, level, name, v);
                pthread_mutex_unlock(&o->lock);
        }
}

SMC_PUBLIC int smc_setsockopt(int fd, int level, int name, const void *val, socklen_t len) {
        struct smc_sock *s = sock_lookup(fd);
        bool smcd, shared;
        uint64_t conn_id;
        int r, v = 0, t;

        if (!s)
                return sys_setsockopt(fd, level, name, val, len);
        if (level == SOL_SMC) {
                errno = ENOPROTOOPT; /* SMC_PROTO_* are read-only */
                return -1;
        }
        if (level == SOL_SOCKET && name == SO_PEEK_OFF && sock_state(s) != SOCK_TCP) {
                /* the rings have no peek offset: refused, as by TCP before Linux 6.9
                 * and every protocol without one (taken by the TCP socket underneath,
                 * MSG_PEEK would have gone on reading from the start) */
                errno = EOPNOTSUPP;
                return -1;
        }
        pthread_mutex_lock(&s->lock);
        smcd = sock_state(s) == SOCK_SMCD;
        if ((level == SOL_SOCKET && (name == SO_SNDBUF || name == SO_RCVBUF)) ||
            (level == IPPROTO_TCP && (name == TCP_NODELAY || name == TCP_CORK))) {
                r = get_int(val, len, &v);
                if (r < 0)
                        goto out;
                if (smcd && level == IPPROTO_TCP && name == TCP_CORK) {
                        r = smc_ring_set_cork(&s->ep, v != 0);
                        goto out;
                }
                if (smcd && s->hidden < 0)
                        r = 0; /* nothing underneath to keep in sync */
                else {
                        t = opt_fd(s);
                        r = neg_errno(sys_setsockopt(t, level, name, val, len));
                }
                if (r < 0)
                        goto out;
                if (level == SOL_SOCKET)
                        *(name == SO_SNDBUF ? &s->sndbuf : &s->rcvbuf) = v;
                else if (name == TCP_NODELAY) {
                        s->nodelay = v != 0;
                        if (smcd && v)
                                (void) smc_ring_flush(&s->ep); /* as Linux: NODELAY pushes */
                } else
                        s->cork = v != 0; /* not connected yet: for the ring to come */
                goto out;
        }
        if (smcd && level == IPPROTO_TCP && name == TCP_WINDOW_CLAMP && !s->smcr && get_int(val, len, &v) == 0 &&
            v == 0) {
                r = -EINVAL; /* (TCP's: clamp 0 only while CLOSE; helper 131) */
                goto out;
        }
        if (smcd && level == IPPROTO_TCP && (name == TCP_FASTOPEN || name == TCP_FASTOPEN_CONNECT)) {
                /* a connected TCP socket refuses both (do_tcp_setsockopt(): only in
                 * CLOSE or LISTEN); the socket that stores options is not connected
                 * (helper 130) */
                r = get_int(val, len, &v);
                if (r == 0)
                        r = -EINVAL;
                goto out;
        }
        t = opt_fd(s);
        r = t < 0 ? -ENOMEM : neg_errno(sys_setsockopt(t, level, name, val, len));
        if (r == 0 && !smcd && sock_state(s) != SOCK_TCP) {
                /* not connected yet, or listening: for the connections to come */
                if (level == IPPROTO_TCP && name == TCP_MAXSEG && get_int(val, len, &v) == 0)
                        s->user_mss = v;
                opt_record(s, level, name, val, len);
        }
        if (r == 0 && level == SOL_SOCKET && name == SO_LINGER && val && len >= (socklen_t) sizeof(struct linger)) {
                struct linger lg;

                memcpy(&lg, val, sizeof(lg)); /* (the kernel took it: valid) */
                s->linger_reset = lg.l_onoff && lg.l_linger == 0;
                /* for the last close, wherever it happens (a copy in a forked process) */
                if (smcd)
                        smc_ring_set_linger_reset(&s->ep, s->linger_reset);
        }
        if (r == 0 && level == IPPROTO_TCP && name == TCP_INQ && get_int(val, len, &v) == 0)
                atomic_store_explicit(&s->inq, (signed char) (v != 0), memory_order_relaxed); /* (0 or 1) */
        if (r == 0 && level == IPPROTO_TCP && name == TCP_SAVE_SYN && get_int(val, len, &v) == 0)
                /* the program reads the SYNs itself: the library leaves them alone
                 * (syn_offered_smc()), also once it sets it back to 0 */
                __atomic_store_n(&s->app_save_syn, 1, __ATOMIC_RELAXED);
        if (r == 0 && smcd && level == SOL_SOCKET && name == SO_RCVLOWAT && get_int(val, len, &v) == 0) {
                /* for the ring's receive (the kernel took it): the value it keeps
                 * (TCP caps it at half of tcp_rmem's largest), which getsockopt
                 * reads back from the ring (shared by every process) */
                int kv;
                socklen_t kl = sizeof(kv);

                if (sys_getsockopt(t, SOL_SOCKET, SO_RCVLOWAT, &kv, &kl) == 0 && kl == sizeof(kv))
                        v = kv;
                smc_ring_set_rcvlowat(&s->ep, v);
        }
        if (r == 0 && level == SOL_SOCKET && name == SO_RCVTIMEO) {
                /* a blocking SMC-D receive sleeps in a recv on X: X times out as TCP */
                s->rcvtimeo_set = true;
                if (smcd)
                        r = neg_errno(sys_setsockopt(s->fd, level, name, val, len));
        }
out:
        shared = smcd && s->dup_shared;
        conn_id = s->conn_id;
        v = level == SOL_SOCKET && name == SO_LINGER ? s->linger_reset : v;
        pthread_mutex_unlock(&s->lock);
        if (r == 0 && shared &&
            ((level == IPPROTO_TCP && (name == TCP_CORK || name == TCP_NODELAY || name == TCP_INQ)) ||
             (level == SOL_SOCKET && name == SO_LINGER)) &&
            (name == SO_LINGER || get_int(val, len, &v) == 0))
                copies_set_option(s, conn_id, level, name, v);
        return ret_errno(r);
}

SMC_PUBLIC int smc_getsockopt(int fd, int level, int name, void *val, socklen_t *len) {
        struct smc_sock *s = sock_lookup(fd);
        int r = 0, st, t;

        if (!s)
                return sys_getsockopt(fd, level, name, val, len);
        st = sock_state(s);
        if (st == SOCK_CONNECTING && level == SOL_SOCKET && name == SO_ERROR) {
                /* under way: 0, as TCP's in SYN_SENT and kernel SMC's during its
                 * handshake; once TCP's handshake ended, the thread's look first
                 * (a failure's error is T's, as TCP's) */
                if (!atomic_load(&s->connect_clc) && connect_tcp_done(s))
                        connect_settle_tcp(s);
                if (sock_state(s) == SOCK_CONNECTING && atomic_load(&s->connect_clc))
                        return ret_errno(put_int(val, len, 0));
                if (sock_state(s) == SOCK_CONNECTING)
                        return sys_getsockopt(fd, level, name, val, len); /* (T, in SYN_SENT) */
                return smc_getsockopt(fd, level, name, val, len); /* (ended: as what it became) */
        }
        if (st == SOCK_TCP && level == SOL_SOCKET && name == SO_ERROR && __atomic_load_n(&s->connect_err, __ATOMIC_RELAXED)) {
                pthread_mutex_lock(&s->lock);
                r = s->connect_err;
                s->connect_err = 0;
                pthread_mutex_unlock(&s->lock);
                if (r)
                        return ret_errno(put_int(val, len, r));
        }
        if (level == SOL_SOCKET && name == SO_PEEK_OFF && st != SOCK_TCP)
                return ret_errno(-EOPNOTSUPP); /* (smc_setsockopt) */
        if (level == IPPROTO_TCP && name == TCP_SAVE_SYN && st == SOCK_LISTEN_SMC &&
            __atomic_load_n(&s->syn_peek, __ATOMIC_RELAXED) > 0 && !__atomic_load_n(&s->app_save_syn, __ATOMIC_RELAXED))
                return ret_errno(put_int(val, len, 0)); /* (the library's own, syn_offered_smc()) */
        if (level == SOL_SMC) {
                if (name == SMC_PROTO_MODE)
                        return ret_errno(put_int(val, len, st == SOCK_SMCD ? (s->smcr ? SMC_PROTO_MODE_SMCR : SMC_PROTO_MODE_SMCD)
                                                          : st == SOCK_TCP ? SMC_PROTO_MODE_TCP
                                                                           : SMC_PROTO_MODE_NONE));
                if (name == SMC_PROTO_FALLBACK_REASON) {
                        uint32_t reason = st == SOCK_SMCD ? 0 : s->fallback_reason;

                        if (smc_uptr_bad(len) || (*len > 0 && smc_uptr_bad(val)))
                                return ret_errno(-EFAULT);
                        if (*len > sizeof(reason))
                                *len = sizeof(reason);
                        memcpy(val, &reason, *len);
                        return 0;
                }
                if (name == SMC_PROTO_BUSY_POLL || name == SMC_PROTO_AUTOCORK) {
                        if (st != SOCK_SMCD)
                                return ret_errno(-ENOTCONN);
                        return ret_errno(put_int(val, len, name == SMC_PROTO_BUSY_POLL
                                                                   ? (int) (s->ep.busy_poll_ns / 1000u)
                                                                   : (int) s->ep.autocork_size));
                }
                return ret_errno(-ENOPROTOOPT);
        }
        if (st == SOCK_SMCD) {
                if (level == SOL_SOCKET) {
                        switch (name) {
                        case SO_ERROR:
                                return ret_errno(put_int(val, len, smc_ring_error(&s->ep)));
                        case SO_TYPE:
                                return ret_errno(put_int(val, len, SOCK_STREAM));
                        case SO_DOMAIN:
                                return ret_errno(put_int(val, len, s->family));
                        case SO_PROTOCOL:
                                return ret_errno(put_int(val, len, IPPROTO_TCP));
                        case SO_ACCEPTCONN:
                                return ret_errno(put_int(val, len, 0));
                        case SO_SNDBUF: /* twice the ring, as Linux's SMC and TCP's doubling */
                                return ret_errno(put_int(val, len, (int) (2 * s->ep.tx_size)));
                        case SO_RCVBUF:
                                return ret_errno(put_int(val, len, (int) (2 * s->ep.rx_size)));
                        case SO_INCOMING_CPU: { /* TCP's: the CPU its last segment came in
                                                 * on; here the CPU the peer last
                                                 * published from, else ours (TCP's
                                                 * handshake's); -1 only unconnected */
                                uint32_t c = atomic_load_explicit(&s->ep.rx_hdr->writer_cpu, memory_order_relaxed);
                                int cpu = c > 0 ? (int) c - 1 : sched_getcpu();

                                return ret_errno(put_int(val, len, cpu >= 0 ? cpu : 0));
                        }
                        case SO_RCVLOWAT: { /* the mark in the shared rx header: what
                                             * every copy's receive waits for, in any
                                             * process (smc_ring_set_rcvlowat() maps as
                                             * the kernel; 0: never set, TCP's 1) */
                                uint32_t m = atomic_load_explicit(&s->ep.rx_hdr->rcvlowat, memory_order_relaxed);

                                return ret_errno(put_int(val, len, m == 0 ? 1 : m > INT_MAX ? INT_MAX : (int) m));
                        }
                        default:
                                break;
                        }
                } else if (level == IPPROTO_TCP) {
                        if (name == TCP_INFO)
                                return ret_errno(tcp_info_smc(s, val, len));
                        if (name == TCP_MAXSEG)
                                return ret_errno(tcp_maxseg_smc(s, val, len));
                        if (name == TCP_NODELAY)
                                return ret_errno(put_int(val, len, s->nodelay));
                        if (name == TCP_CORK)
                                return ret_errno(put_int(val, len, __atomic_load_n(&s->ep.corked, __ATOMIC_RELAXED)));
                        if (name == TCP_WINDOW_CLAMP && !s->smcr) {
                                /* TCP's: the largest window it offers, from its receive
                                 * space; here the ring, unless the program set one (kept
                                 * by the option socket: helper 130 found 0) */
                                int v = 0;
                                socklen_t vl = sizeof(v);

                                pthread_mutex_lock(&s->lock);
                                t = opt_fd(s);
                                if (t >= 0)
                                        (void) sys_getsockopt(t, level, name, &v, &vl);
                                pthread_mutex_unlock(&s->lock);
                                return ret_errno(put_int(val, len, v > 0 ? v : (int) s->ep.rx_size));
                        }
                } else if ((level == IPPROTO_IP && name == IP_MTU) ||
                           (level == IPPROTO_IPV6 && name == IPV6_MTU && s->family == AF_INET6)) {
                        /* a connected TCP socket's path MTU: its route to the peer's
                         * address (lo for SMC-D); the socket that stores options is
                         * not connected: ENOTCONN (helper 130) */
                        int mtu = route_mtu(s);

                        if (mtu > 0)
                                return ret_errno(put_int(val, len, mtu));
                }
        }
        pthread_mutex_lock(&s->lock);
        t = opt_fd(s);
        r = t < 0 ? -ENOMEM : neg_errno(sys_getsockopt(t, level, name, val, len));
        pthread_mutex_unlock(&s->lock);
        return ret_errno(r);
}

SMC_PUBLIC int smc_getsockname(int fd, struct sockaddr *addr, socklen_t *len) {
        struct smc_sock *s = sock_lookup(fd);
        int st;

        if (!s)
                return sys_getsockname(fd, addr, len);
        st = sock_state(s);
        if (st == SOCK_SMCD && s->local_len > 0)
                return ret_errno(copy_addr_out(&s->local, s->local_len, addr, len));
        if (st == SOCK_LISTEN_SMC || (st == SOCK_SMCD && s->hidden >= 0))
                return sys_getsockname(s->hidden, addr, len);
        if (st == SOCK_SMCD)
                return ret_errno(-EINVAL);
        return sys_getsockname(fd, addr, len);
}

SMC_PUBLIC int smc_getpeername(int fd, struct sockaddr *addr, socklen_t *len) {
        struct smc_sock *s = sock_lookup(fd);
        int st;

        if (!s)
                return sys_getpeername(fd, addr, len);
        st = sock_state(s);
        if (st == SOCK_SMCD)
                /* as TCP in state CLOSE (reset, or FINs both ways): ENOTCONN */
                return ret_errno(smc_ring_tcp_closed(&s->ep) ? -ENOTCONN
                                                             : copy_addr_out(&s->peer, s->peer_len, addr, len));
        if (st == SOCK_LISTEN_SMC)
                return sys_getpeername(s->hidden, addr, len); /* ENOTCONN */
        return sys_getpeername(fd, addr, len);
}

/* ------------------------------------------------------------------------- */
/* poll, fcntl */

/* as ring.c's cpu_relax(): a compiler barrier (x86's pause costs ~140 cycles on recent
 * cores, longer than a look at the rings) */
#if defined(__aarch64__) || defined(__arm__)
#define cpu_pause() __asm__ __volatile__("yield" ::: "memory")
#else
#define cpu_pause() __asm__ __volatile__("" ::: "memory")
#endif

#define POLL_ALWAYS (POLLERR | POLLHUP | POLLNVAL)

/* The true readiness of SMC-D entries; others left as they are. Returns the
 * number of entries with revents. */
static bool ew_set_poll(int fd);

static int poll_fixup(struct pollfd *fds, nfds_t n, struct smc_sock **socks) {
        int cnt = 0;

        for (nfds_t i = 0; i < n; i++) {
                if (socks[i])
                        fds[i].revents = (short) (smc_ring_poll(sock_ep(socks[i])) & (fds[i].events | POLL_ALWAYS));
                else if ((fds[i].events & POLLIN) && !(fds[i].revents & POLLNVAL) && ew_set_poll(fds[i].fd))
                        fds[i].revents |= POLLIN; /* an epoll set with data in a ring */
                if (fds[i].revents)
                        cnt++;
        }
        return cnt;
}

/* Before a sleep in the kernel's poll: the SMC-D entries that wait for POLLOUT get
 * the plug a whole send owed (smc_ring_plug_owed), so that X polls as the ring. */
static void poll_plug_owed(const struct pollfd *fds, nfds_t n, struct smc_sock **socks, bool spin) {
        for (nfds_t i = 0; i < n; i++)
                if (socks[i] && (fds[i].events & POLLOUT))
                        (void) smc_ring_plug_owed(sock_ep(socks[i]), spin);
}

/* ... for the connections in @wr (below @nfds), as select() passes them */
static void select_plug_owed(int nfds, const fd_set *wr, bool spin) {
        for (int fd = 0; wr && fd < nfds; fd++) {
                struct smc_sock *s;

                if (FD_ISSET(fd, wr) && (s = sock_lookup(fd)) && sock_state(s) == SOCK_SMCD)
                        (void) smc_ring_plug_owed(sock_ep(s), spin);
        }
}

/* Busy-poll before a poll or select that would sleep (issue 5: a program that waits in
 * poll/select between its reads and writes otherwise sleeps in the kernel, and its peer
 * rings a doorbell, for every chunk).
 *
 * poll_spin_budget(): how long to spin, in ns: the largest busy_poll_ns of the SMC-D
 * entries (those whose peer last ran on our CPU excepted), at most the caller's timeout
 * (@timeout_ns, negative: none); 0 = do not spin.
 *
 * poll_spin(): spin on the SMC-D entries' rings, without system calls, for @budget ns
 * until one is ready for what it asks. While spinning, each POLLIN entry's ring shows a
 * spinning reader, so that its writer hands the data over without a doorbell byte
 * (ring.c, (5)). Returns true when an entry became ready; the other descriptors are not
 * looked at meanwhile (the caller checked them just before). */
static uint64_t poll_spin_budget(const struct pollfd *fds, nfds_t n, struct smc_sock **socks, int64_t timeout_ns) {
        uint64_t budget = 0;

        /* (the spin blocks signals and asks which are pending: calls a sandbox
         * filter need not allow) */
        if (timeout_ns == 0 || atomic_load_explicit(&sandboxed, memory_order_relaxed))
                return 0;
        for (nfds_t i = 0; i < n; i++)
                if (socks[i]) {
                        uint32_t b = smc_ring_spin_budget(sock_ep(socks[i]), fds[i].events);

                        if (b > budget)
                                budget = b;
                }
        if (timeout_ns > 0 && (uint64_t) timeout_ns < budget)
                budget = (uint64_t) timeout_ns;
        return budget;
}

/* A signal is pending that @waitmask lets in (the sleeping call would end with EINTR
 * at once): the spin stops for it. */
static bool spin_signal_pending(const sigset_t *waitmask) {
        sigset_t p;

        if (sigpending(&p) < 0 || sigisemptyset(&p))
                return false;
        for (int sig = 1; sig < NSIG; sig++)
                if (sigismember(&p, sig) == 1 && sigismember(waitmask, sig) != 1)
                        return true;
        return false;
}

/* @budget from poll_spin_budget(), > 0; @waitmask: the mask the sleeping call after
 * the spin will take (signals pending outside it end the spin) */
static bool poll_spin(const struct pollfd *fds, nfds_t n, struct smc_sock **socks, uint64_t budget,
                      const sigset_t *waitmask) {
        uint64_t end, t;
        bool ready = false;
        unsigned k = 0;

        for (nfds_t i = 0; i < n; i++)
                if (socks[i] && (fds[i].events & POLLIN))
                        smc_ring_spin_state(&socks[i]->ep, true, false);
        end = now_ns() + budget;
        for (;;) {
                for (nfds_t i = 0; i < n && !ready; i++)
                        ready = socks[i] && smc_ring_ready_quick(sock_ep(socks[i]), fds[i].events);
                if (ready)
                        break;
                /* the clock costs ~20 ns: look at it every 16 rounds; at pending
                 * signals (a system call) every 1024 */
                if ((++k & 15) == 0) {
                        t = now_ns();
                        if (t >= end)
                                break;
                        if ((k & 1023) == 0 && spin_signal_pending(waitmask))
                                break;
                }
                cpu_pause();
        }
        for (nfds_t i = 0; i < n; i++)
                if (socks[i] && (fds[i].events & POLLIN))
                        smc_ring_spin_state(&socks[i]->ep, false, !ready);
        return ready;
}

/* The SMC-D entries' readiness after a successful spin, the others' revents 0. */
static int poll_spin_result(struct pollfd *fds, nfds_t n, struct smc_sock **socks) {
        int cnt = 0;

        for (nfds_t i = 0; i < n; i++) {
                fds[i].revents = socks[i] ? (short) (smc_ring_poll(sock_ep(socks[i])) & (fds[i].events | POLL_ALWAYS)) : 0;
                if (fds[i].revents)
                        cnt++;
        }
        return cnt;
}

/* Signals during a spin: the spin runs with every signal blocked, and the sleeping
 * call that may follow takes the caller's mask atomically (ppoll, pselect6), so that a
 * signal that came while spinning interrupts it (EINTR) as it would have interrupted
 * the kernel's wait, instead of running its handler and leaving the call asleep.
 * (glibc keeps its own internal signals out of a pthread_sigmask() set.) */
static void spin_block_signals(sigset_t *old) {
        sigset_t all;

        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, old);
}

static void spin_restore_signals(const sigset_t *old) {
        int e = errno;

        pthread_sigmask(SIG_SETMASK, old, NULL);
        errno = e;
}

static void ts_from_ns(struct timespec *ts, int64_t ns) {
        if (ns < 0)
                ns = 0;
        ts->tv_sec = ns / 1000000000;
        ts->tv_nsec = ns % 1000000000;
}

static int poll_connecting(struct pollfd *fds, nfds_t n, int timeout);

/* Write the result of a select over @nfds descriptors, polled as @fds (@n), into
 * @rd, @wr, @ex as the kernel's select writes it: the words that hold bits below
 * @nfds (fs/select.c set_fd_set), the poll bits mapped as POLLIN_SET etc. Returns
 * the number of bits set. */
static int select_result(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, const struct pollfd *fds, nfds_t n) {
        int r = 0;

        if (rd)
                memset(rd, 0, ((size_t) nfds + 63) / 64 * 8);
        if (wr)
                memset(wr, 0, ((size_t) nfds + 63) / 64 * 8);
        if (ex)
                memset(ex, 0, ((size_t) nfds + 63) / 64 * 8);
        for (nfds_t i = 0; i < n; i++) {
                short re = fds[i].revents;

                if ((fds[i].events & POLLIN) && (re & (POLLIN | POLLRDNORM | POLLRDBAND | POLLHUP | POLLERR))) {
                        FD_SET(fds[i].fd, rd);
                        r++;
                }
                if ((fds[i].events & POLLOUT) && (re & (POLLOUT | POLLWRNORM | POLLWRBAND | POLLERR))) {
                        FD_SET(fds[i].fd, wr);
                        r++;
                }
                if ((fds[i].events & POLLPRI) && (re & POLLPRI)) {
                        FD_SET(fds[i].fd, ex);
                        r++;
                }
        }
        return r;
}

/* Whether @fd is the library's socket with a nonblocking connect under way
 * (CONNECTING): the poll family treats such a socket apart (poll_connecting(),
 * select_connecting()). */
static bool fd_connecting(int fd) {
        struct smc_sock *s = fd >= 0 ? sock_lookup(fd) : NULL;

        return s && sock_state(s) == SOCK_CONNECTING;
}

/* Whether any of @fds (@n entries, readable memory) is fd_connecting(). */
static bool pollfds_connecting(const struct pollfd *fds, nfds_t n) {
        for (nfds_t i = 0; i < n; i++)
                if (fd_connecting(fds[i].fd))
                        return true;
        return false;
}

/* select()/pselect() with a socket whose nonblocking connect is under way among
 * the sets: as poll_connecting() (which leaves it out while it is not ready), the
 * result written back as the kernel's select writes it (fs/select.c: POLLIN_SET,
 * POLLOUT_SET, POLLEX_SET; the time not slept in *@ts). @mask is set around the wait
 * (not atomically as pselect's). Returns the number of bits set, or -1 with errno. */
static int select_connecting(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, struct timespec *ts,
                             const sigset_t *mask) {
        struct pollfd *fds = calloc((size_t) nfds, sizeof(*fds));
        uint64_t t0 = now_ns();
        int64_t tns = ts ? (int64_t) ts->tv_sec * 1000000000 + ts->tv_nsec : -1;
        sigset_t old;
        nfds_t n = 0;
        int r;

        if (!fds) {
                errno = ENOMEM;
                return -1;
        }
        for (int fd = 0; fd < nfds; fd++) {
                short ev = (short) ((rd && FD_ISSET(fd, rd) ? POLLIN : 0) | (wr && FD_ISSET(fd, wr) ? POLLOUT : 0) |
                                    (ex && FD_ISSET(fd, ex) ? POLLPRI : 0));

                if (ev)
                        fds[n++] = (struct pollfd) { .fd = fd, .events = ev };
        }
        if (mask)
                pthread_sigmask(SIG_SETMASK, mask, &old);
        r = poll_connecting(fds, n, tns < 0 ? -1 : (int) ((tns + 999999) / 1000000 > INT_MAX ? INT_MAX : (tns + 999999) / 1000000));
        if (mask) {
                int saved = errno;

                pthread_sigmask(SIG_SETMASK, &old, NULL);
                errno = saved;
        }
        if (r >= 0) {
                for (nfds_t i = 0; i < n; i++)
                        if (fds[i].revents & POLLNVAL) {
                                free(fds);
                                errno = EBADF;
                                return -1;
                        }
                r = select_result(nfds, rd, wr, ex, fds, n);
        }
        if (ts)
                ts_from_ns(ts, tns - (int64_t) (now_ns() - t0));
        free(fds);
        return r;
}

int smc_select(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, struct timespec *ts, const sigset_t *mask) {
        struct pollfd stack_fds[64], *fds = stack_fds;
        struct smc_sock *stack_socks[64], **socks = stack_socks;
        nfds_t n = 0, cap = 64;
        int64_t timeout_ns = -1;
        uint64_t budget, t0;
        sigset_t old;
        bool any = false, nval = false, dirty = false, owed = false;
        int r = 0;

        if (nfds <= 0 || nfds > FD_SETSIZE)
                return SMC_SELECT_UNHANDLED; /* the kernel's answers, sets beyond 1024 bits */
        if ((rd && smc_uptr_bad(rd)) || (wr && smc_uptr_bad(wr)) || (ex && smc_uptr_bad(ex)))
                return SMC_SELECT_UNHANDLED; /* EFAULT */
        if (ts) {
                if (ts->tv_sec < 0 || ts->tv_nsec < 0 || ts->tv_nsec >= 1000000000L)
                        return SMC_SELECT_UNHANDLED; /* EINVAL */
                /* (a zero timeout too: no spin, but the rings may have what X does
                 * not show) */
                timeout_ns = ts->tv_sec > INT64_MAX / 1000000000 - 1 ? -1
                                                                      : (int64_t) ts->tv_sec * 1000000000 + ts->tv_nsec;
        }
        for (int fd = 0; fd < nfds; fd++)
                if (((rd && FD_ISSET(fd, rd)) || (wr && FD_ISSET(fd, wr))) && fd_connecting(fd))
                        return select_connecting(nfds, rd, wr, ex, timeout_ns < 0 ? NULL : ts, mask);
        for (int fd = 0; fd < nfds; fd++) {
                struct smc_sock *s;

                if (!(rd && FD_ISSET(fd, rd)) && !(wr && FD_ISSET(fd, wr)))
                        continue;
                s = sock_lookup(fd);
                if (s && sock_state(s) == SOCK_SMCD) {
                        any = any || s->ep.busy_poll_ns > 0;
                        owed = owed || (wr && FD_ISSET(fd, wr) &&
                                        atomic_load_explicit(&s->ep.plug_owed, memory_order_relaxed));
                        /* data that came while watched by an epoll set has no byte
                         * in X (socket.c "epoll watch"): the kernel's select would
                         * not see it */
                        if (rd && FD_ISSET(fd, rd)) {
                                smc_ring_no_watch(&s->ep);
                                dirty = dirty || smc_ring_ready_quick(sock_ep(s), POLLIN);
                        }
                } else if (rd && FD_ISSET(fd, rd) && ew_set_poll(fd))
                        dirty = true;
        }
        if (!dirty && (!any || timeout_ns == 0)) {
                /* the kernel's select answers: X must poll as the ring (no spin
                 * when that would not wait) */
                if (owed)
                        select_plug_owed(nfds, wr, timeout_ns != 0);
                return SMC_SELECT_UNHANDLED; /* (a zero timeout spins on nothing) */
        }

        for (int fd = 0; fd < nfds; fd++) {
                short ev = (short) ((rd && FD_ISSET(fd, rd) ? POLLIN : 0) | (wr && FD_ISSET(fd, wr) ? POLLOUT : 0) |
                                    (ex && FD_ISSET(fd, ex) ? POLLPRI : 0));
                struct smc_sock *s;

                if (!ev)
                        continue;
                if (n == cap) {
                        struct pollfd *nf;
                        struct smc_sock **ns;

                        cap = FD_SETSIZE;
                        nf = calloc(cap, sizeof(*nf));
                        ns = calloc(cap, sizeof(*ns));
                        if (!nf || !ns) {
                                free(nf);
                                free(ns);
                                return SMC_SELECT_UNHANDLED; /* the kernel does it unaided */
                        }
                        memcpy(nf, fds, n * sizeof(*nf));
                        memcpy(ns, socks, n * sizeof(*ns));
                        fds = nf;
                        socks = ns;
                }
                s = sock_lookup(fd);
                fds[n] = (struct pollfd) { .fd = fd, .events = ev };
                socks[n] = s && sock_state(s) == SOCK_SMCD ? s : NULL;
                n++;
        }

        budget = any ? poll_spin_budget(fds, n, socks, timeout_ns) : 0;
        if (budget == 0 && !dirty) {
                if (owed)
                        select_plug_owed(nfds, wr, false);
                r = SMC_SELECT_UNHANDLED; /* nothing to spin on (the peers run on our CPU) */
                goto out;
        }
        t0 = now_ns();
        spin_block_signals(&old);
        /* everything once, as the kernel sees it; an invalid descriptor: no spin, the
         * kernel's call below reports EBADF */
        r = sys_poll(fds, n, 0);
        if (r > 0 || (r == 0 && dirty)) { /* (dirty: the rings have what X may not show) */
                for (nfds_t i = 0; i < n; i++)
                        if (fds[i].revents & POLLNVAL)
                                nval = true;
                r = nval ? 0 : poll_fixup(fds, n, socks);
        }
        if (r == 0 && !nval && budget > 0 && poll_spin(fds, n, socks, budget, mask ? mask : &old))
                r = poll_spin_result(fds, n, socks);
        if (r <= 0) {
                /* sleep in the kernel for the rest of the time, with the caller's mask */
                struct timespec left;
                struct {
                        const sigset_t *ss;
                        size_t len;
                } m = { mask ? mask : &old, _NSIG / 8 };

                if (ts)
                        ts_from_ns(&left, timeout_ns - (int64_t) (now_ns() - t0));
                if (owed && timeout_ns != 0)
                        select_plug_owed(nfds, wr, false); /* (after the spin) */
                r = (int) smc_syscall(SYS_pselect6, nfds, rd, wr, ex, ts ? &left : NULL, &m);
                spin_restore_signals(&old);
                if (ts)
                        *ts = left; /* what the kernel left of it */
                goto out;
        }
        spin_restore_signals(&old);
        if (ts)
                ts_from_ns(ts, timeout_ns - (int64_t) (now_ns() - t0));

        r = select_result(nfds, rd, wr, ex, fds, n);
out:
        if (fds != stack_fds) {
                free(fds);
                free(socks);
        }
        return r;
}

static int poll_main(struct pollfd *fds, nfds_t n, int timeout);

/* poll() with a socket whose nonblocking connect is under way (CONNECTING) among
 * @fds (@n, @timeout ms as poll's): past TCP's handshake such a socket is not ready
 * (T's readiness is TCP's; the connection's comes with X), as kernel SMC's until its
 * handshake ends. A copy of @fds is polled, with such a socket left out (a negative
 * fd) and an eventfd that connect_wake() writes to added (cwait_add()), until
 * something is ready, the connect has ended or @timeout passed; without an eventfd
 * (none left) in slices of 1 .. 8 ms. */
static int poll_connecting(struct pollfd *fds, nfds_t n, int timeout) {
        uint64_t deadline = timeout > 0 ? now_ns() + (uint64_t) timeout * 1000000u : 0;
        struct pollfd stack_w[64], *w = stack_w; /* @fds, then the eventfd */
        struct connect_waiter waiter = { .efd = -1 };
        int slice = 1, r, t;

        if (n >= 64 && !(w = calloc(n + 1, sizeof(*w)))) {
                errno = ENOMEM;
                return -1;
        }
        /* (before the states are read: a change after that wakes the poll) */
        (void) cwait_add(&waiter, fds, n);
        for (;;) {
                bool connecting = false, masked = false;
                nfds_t nw = n;

                for (nfds_t i = 0; i < n; i++) {
                        struct smc_sock *s = fds[i].fd >= 0 ? sock_lookup(fds[i].fd) : NULL;

                        w[i] = fds[i];
                        if (!s || sock_state(s) != SOCK_CONNECTING)
                                continue;
                        connecting = true;
                        if (atomic_load(&s->connect_clc) || connect_tcp_done(s)) {
                                w[i].fd = -1;
                                masked = true;
                        }
                }
                t = timeout;
                if (timeout > 0) {
                        uint64_t now = now_ns();

                        t = now >= deadline ? 0 : (int) ((deadline - now + 999999u) / 1000000u);
                }
                if (!connecting) {
                        r = poll_main(fds, n, t);
                        break;
                }
                if (waiter.efd >= 0)
                        w[nw++] = (struct pollfd) { .fd = waiter.efd, .events = POLLIN };
                else if (masked && t != 0)
                        t = t > 0 && t < slice ? t : slice;
                r = poll_main(w, nw, t);
                if (r > 0 && nw > n && w[n].revents) {
                        uint64_t v;

                        (void) sys_read(waiter.efd, &v, sizeof(v));
                        r--;
                }
                for (nfds_t i = 0; i < n; i++) {
                        fds[i].revents = w[i].fd == fds[i].fd ? w[i].revents : 0;
                        /* T in SYN_SENT said its handshake ended: not ready yet either
                         * (the thread looks first: connect_tcp_done()) */
                        if (r > 0 && fds[i].revents && fd_connecting(fds[i].fd)) {
                                fds[i].revents = 0;
                                r--;
                        }
                }
                if (r != 0 || timeout == 0 || (timeout > 0 && now_ns() >= deadline))
                        break;
                slice = slice < 8 ? slice * 2 : 8;
        }
        cwait_remove(&waiter);
        if (w != stack_w)
                free(w);
        return r;
}

int smc_ppoll_connecting(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask) {
        sigset_t old;
        int64_t ms;
        int r, saved;

        if (!pollfds_connecting(fds, n))
                return -2;
        if (ts && (ts->tv_sec < 0 || ts->tv_nsec < 0 || ts->tv_nsec >= 1000000000L))
                return ret_errno(-EINVAL);
        ms = !ts ? -1 : ts->tv_sec > INT_MAX / 1000 ? INT_MAX : ts->tv_sec * 1000 + (ts->tv_nsec + 999999) / 1000000;
        if (mask)
                pthread_sigmask(SIG_SETMASK, mask, &old);
        r = poll_connecting(fds, n, (int) ms);
        saved = errno;
        if (mask)
                pthread_sigmask(SIG_SETMASK, &old, NULL);
        errno = saved;
        return r;
}

SMC_PUBLIC int smc_poll(struct pollfd *fds, nfds_t n, int timeout) {
        if (n > 0 && fds && !smc_uptr_bad(fds) && pollfds_connecting(fds, n))
                return poll_connecting(fds, n, timeout);
        return poll_main(fds, n, timeout);
}

static int poll_main(struct pollfd *fds, nfds_t n, int timeout) {
        struct smc_sock *stack_socks[64], **socks = stack_socks;
        uint64_t deadline = 0, budget;
        sigset_t old;
        bool any = false, ready = false, blocked = false;
        int r = 0;

        if (n > 0 && !fds)
                return sys_poll(fds, n, timeout);
        for (nfds_t i = 0; i < n && !any; i++) {
                struct smc_sock *s = sock_lookup(fds[i].fd);
                any = s && sock_state(s) == SOCK_SMCD;
        }
        if (!any)
                return sys_poll(fds, n, timeout);

        if (n > 64) {
                socks = calloc(n, sizeof(*socks));
                if (!socks) {
                        errno = ENOMEM;
                        return -1;
                }
        }
        for (nfds_t i = 0; i < n; i++) {
                struct smc_sock *s = sock_lookup(fds[i].fd);

                socks[i] = s && sock_state(s) == SOCK_SMCD ? s : NULL;
                fds[i].revents = 0;
                if (socks[i] && (fds[i].events & POLLIN))
                        smc_ring_kwait(&s->ep, true); /* (before smc_ring_poll looks) */
                if (socks[i] && (smc_ring_poll(sock_ep(s)) & (fds[i].events | POLL_ALWAYS)))
                        ready = true;
        }
        if (timeout > 0)
                deadline = now_ns() + (uint64_t) timeout * 1000000u;

        if (ready) {
                r = sys_poll(fds, n, 0);
                if (r >= 0)
                        r = poll_fixup(fds, n, socks);
                /* 0: what was ready is no longer (a copy of the socket in another
                 * process filled the ring again): wait as for anything else */
                if (r != 0 || timeout == 0)
                        goto out;
        }
        budget = poll_spin_budget(fds, n, socks, timeout < 0 ? -1 : (int64_t) timeout * 1000000);
        if (budget > 0) {
                /* the other descriptors first (one system call), then spin on the rings,
                 * signals blocked (see spin_block_signals) */
                spin_block_signals(&old);
                blocked = true;
                r = sys_poll(fds, n, 0);
                if (r < 0)
                        goto out;
                if (r > 0 && (r = poll_fixup(fds, n, socks)) > 0)
                        goto out;
                if (poll_spin(fds, n, socks, budget, &old)) {
                        r = poll_spin_result(fds, n, socks);
                        if (r > 0)
                                goto out;
                }
        }
        for (;;) {
                struct timespec left = {};

                if (timeout > 0) {
                        uint64_t now = now_ns();

                        ts_from_ns(&left, now >= deadline ? 0 : (int64_t) (deadline - now));
                }
                if (timeout != 0)
                        poll_plug_owed(fds, n, socks, false); /* (after the spin) */
                /* after a spin, with the caller's signal mask again (atomically) */
                r = sys_ppoll(fds, n, timeout < 0 ? NULL : &left, blocked ? &old : NULL);
                if (r <= 0)
                        goto out;
                r = poll_fixup(fds, n, socks);
                /* (an infinite timeout never ends with 0: helper 108 saw it after a
                 * stale wakeup) */
                if (r > 0 || timeout == 0 || (timeout > 0 && left.tv_sec == 0 && left.tv_nsec == 0))
                        goto out;
                /* only stale wakeups (a doorbell that was already consumed): the
                 * ring settled them, wait again for the remaining time. A ring
                 * that is full without a plugged fd would wake us at once, so do
                 * not spin on it: back off a little. */
                struct timespec ts = { .tv_nsec = 50000 };
                nanosleep(&ts, NULL);
        }
out:
        if (blocked)
                spin_restore_signals(&old);
        for (nfds_t i = 0; i < n; i++)
                if (socks[i] && (fds[i].events & POLLIN))
                        smc_ring_kwait(&socks[i]->ep, false);
        if (socks != stack_socks)
                free(socks);
        return r;
}

SMC_PUBLIC int smc_ioctl(int fd, unsigned long req, void *arg) {
        struct smc_sock *s = sock_lookup(fd);
        int st, r;

        if (!s)
                return sys_ioctl(fd, req, arg);
        if (sock_state(s) == SOCK_CONNECTING &&
            (req == SIOCINQ || req == SIOCOUTQ || req == SIOCOUTQNSD || req == SIOCATMARK)) {
                /* nothing to read or unsent yet (T's queues hold CLC bytes) */
                if (smc_uptr_bad(arg))
                        return ret_errno(-EFAULT);
                *(int *) arg = 0;
                return 0;
        }
        st = atomic_load(&s->state);
        switch (req) {
        case FIOASYNC:
        case FIOSETOWN:
        case SIOCSPGRP:
        case FIOGETOWN:
        case SIOCGPGRP: {
                /* on a listener's E (an epoll fd: ENOTTY there) as the socket ioctls
                 * do it: F_SETOWN / F_GETOWN, and O_ASYNC (async_copy()) */
                int v;

                if (st != SOCK_LISTEN_SMC)
                        return sys_ioctl(fd, req, arg);
                if (smc_uptr_bad(arg))
                        return ret_errno(-EFAULT);
                if (req == FIOGETOWN || req == SIOCGPGRP) {
                        v = sys_fcntl(fd, F_GETOWN, 0);
                        memcpy(arg, &v, sizeof(v));
                        return 0;
                }
                memcpy(&v, arg, sizeof(v));
                pthread_mutex_lock(&s->lock);
                r = req == FIOASYNC ? 0 : sys_fcntl(fd, F_SETOWN, v);
                if (r == 0 && sock_state(s) == SOCK_LISTEN_SMC)
                        listener_async_sync(s, req == FIOASYNC ? v != 0 : listener_async(s));
                pthread_mutex_unlock(&s->lock);
                return r;
        }
        case FIONBIO: {
                int on;

                if (smc_uptr_bad(arg))
                        return ret_errno(-EFAULT);
                memcpy(&on, arg, sizeof(on));
                pthread_mutex_lock(&s->lock);
                r = sys_ioctl(fd, FIONBIO, arg);
                if (r == 0)
                        atomic_store(&s->nonblock, on != 0);
                pthread_mutex_unlock(&s->lock);
                return r;
        }
        case FIONREAD:     /* = SIOCINQ: bytes ready to read */
        case SIOCOUTQ:     /* bytes written that the peer has not read yet (TCP: not
                            * acknowledged yet), held back by cork or not */
        case SIOCOUTQNSD: { /* ... of them, those held back (TCP: not sent yet) */
                int v;

                if (st == SOCK_LISTEN_SMC || st == SOCK_LISTEN_TCP)
                        return ret_errno(-EINVAL); /* as TCP on a listener */
                if (st != SOCK_SMCD)
                        return sys_ioctl(fd, req, arg);
                if (smc_uptr_bad(arg))
                        return ret_errno(-EFAULT);
                if (req == FIONREAD)
                        v = (int) smc_ring_fionread(&s->ep);
                else if (smc_ring_tcp_closed(&s->ep))
                        v = 0; /* state CLOSE: as TCP's reset purges its write queue */
                else {
                        /* our cursor while this copy holds bytes back; else the
                         * published one, which another copy (dup, fork) may have
                         * moved since this one last sent (helper 132: SIOCOUTQ 0
                         * through the original after a dup filled the ring) */
                        uint64_t pub = atomic_load(&s->ep.tx_hdr->prod);
                        uint64_t end = __atomic_load_n(&s->ep.tx_unpub, __ATOMIC_RELAXED)
                                               ? __atomic_load_n(&s->ep.tx_prod, __ATOMIC_RELAXED)
                                               : pub;

                        v = (int) smc_curs_diff(s->ep.tx_size, req == SIOCOUTQ ? atomic_load(&s->ep.tx_hdr->cons) : pub,
                                                end);
                }
                memcpy(arg, &v, sizeof(v));
                return 0;
        }
        case FIOCLEX:  /* close-on-exec: a flag of the app's descriptor itself (CPython's */
        case FIONCLEX: /* set_inheritable() uses these), not of the TCP socket underneath */
                return sys_ioctl(fd, req, arg);
        case SIOCGSTAMP_OLD: /* a received packet's time: a TCP stream socket has */
        case SIOCGSTAMPNS_OLD: /* none (ENOENT); the accept side has only X, a unix */
        case SIOCGSTAMP_NEW:   /* socket, whose ENOTTY a program would not expect */
        case SIOCGSTAMPNS_NEW:
                if (st == SOCK_SMCD && s->hidden < 0)
                        return ret_errno(-ENOENT);
                if ((st == SOCK_SMCD || st == SOCK_LISTEN_SMC) && s->hidden >= 0)
                        return sys_ioctl(s->hidden, req, arg);
                return sys_ioctl(fd, req, arg);
        default:
                /* everything else concerns the TCP socket underneath */
                if ((st == SOCK_SMCD || st == SOCK_LISTEN_SMC) && s->hidden >= 0)
                        return sys_ioctl(s->hidden, req, arg);
                return sys_ioctl(fd, req, arg);
        }
}

SMC_PUBLIC int smc_fcntl(int fd, int cmd, ...) {
        struct smc_sock *s;
        va_list ap;
        long arg;
        int r;

        va_start(ap, cmd);
        arg = va_arg(ap, long);
        va_end(ap);

        s = sock_lookup(fd);
        if ((s || smc_fd_vfork_noted(fd)) && (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC)) {
                r = sys_fcntl(fd, cmd, arg);
                if (r >= 0)
                        smc_fd_dup(fd, r); /* the copy is an SMC socket too */
                return r;
        }
        if (s && (cmd == F_SETOWN || cmd == F_SETOWN_EX || cmd == F_SETSIG) &&
            sock_state(s) == SOCK_LISTEN_SMC) {
                pthread_mutex_lock(&s->lock);
                r = sys_fcntl(fd, cmd, arg);
                if (r == 0 && sock_state(s) == SOCK_LISTEN_SMC)
                        listener_async_sync(s, listener_async(s));
                pthread_mutex_unlock(&s->lock);
                return r;
        }
        if (s && cmd == F_GETFL && sock_state(s) == SOCK_LISTEN_SMC) {
                r = sys_fcntl(fd, F_GETFL, 0);
                return r >= 0 && listener_async(s) ? r | O_ASYNC : r;
        }
        if (!s || cmd != F_SETFL)
                return sys_fcntl(fd, cmd, arg);
        pthread_mutex_lock(&s->lock);
        r = sys_fcntl(fd, F_SETFL, arg);
        if (r == 0)
                atomic_store(&s->nonblock, (arg & O_NONBLOCK) != 0);
        if (r == 0 && sock_state(s) == SOCK_LISTEN_SMC)
                listener_async_sync(s, (arg & O_ASYNC) != 0);
        pthread_mutex_unlock(&s->lock);
        return r;
}

/* ------------------------------------------------------------------------- */
/* exec: SMC-D sockets that survive execve() (socket-internal.h, smcrun(1)) */

/* exec_known_pid (declared above smc_fd_forget) follows the process */
static void exec_atfork_child(void) {
        exec_known_pid = getpid();
}

__attribute__((constructor)) static void exec_init(void) {
        exec_known_pid = getpid();
        pthread_atfork(NULL, NULL, exec_atfork_child);
}

/* Take @m for an exec, waiting at most about 100 ms: in the child of a fork() made
 * while another thread held it, it is held forever (that thread does not exist
 * there), and an exec must not hang on it. Returns true if it was taken; otherwise
 * the caller goes on without it (only this thread runs in such a child). */
static bool exec_lock(pthread_mutex_t *m) {
        for (unsigned i = 0; i < 100; i++) {
                struct timespec ts = { .tv_nsec = 1000000L };

                if (pthread_mutex_trylock(m) == 0)
                        return true;
                nanosleep(&ts, NULL);
        }
        return false;
}

static void exec_unlock(pthread_mutex_t *m, bool locked) {
        if (locked)
                pthread_mutex_unlock(m);
}

/* Parse the decimal (@hex false) or hexadecimal number of @len bytes at @s, at most
 * @max: plain digits only, no sign, blank, prefix or leading "+". */
static bool inherit_num(const char *s, size_t len, bool hex, uint64_t max, uint64_t *ret) {
        uint64_t v = 0;
        unsigned base = hex ? 16 : 10;

        if (len == 0 || len > (hex ? 16 : 20))
                return false;
        for (size_t i = 0; i < len; i++) {
                unsigned d;
                char ch = s[i];

                if (ch >= '0' && ch <= '9')
                        d = (unsigned) (ch - '0');
                else if (hex && ch >= 'a' && ch <= 'f')
                        d = (unsigned) (ch - 'a' + 10);
                else if (hex && ch >= 'A' && ch <= 'F')
                        d = (unsigned) (ch - 'A' + 10);
                else
                        return false;
                if (v > (UINT64_MAX - d) / base)
                        return false;
                v = v * base + d;
        }
        if (v > max)
                return false;
        *ret = v;
        return true;
}

static bool inherit_ring_size(uint64_t v) {
        return v >= SMC_DMB_MIN_SIZE && v <= SMC_DMB_MAX_SIZE && (v & (v - 1)) == 0;
}

/* Split the @len bytes at @s into at most @max ':'-separated fields (@f, @fl: start
 * and length of each). Returns the number of fields, or -EINVAL (more than @max, or
 * a NUL byte). */
static int inherit_split(const char *s, size_t len, const char **f, size_t *fl, size_t max) {
        size_t nf = 0, start = 0;

        for (size_t i = 0; i <= len; i++) {
                if (i < len && s[i] == '\0')
                        return -EINVAL;
                if (i == len || s[i] == ':') {
                        if (nf == max)
                                return -EINVAL;
                        f[nf] = s + start;
                        fl[nf++] = i - start;
                        start = i + 1;
                }
        }
        return (int) nf;
}

int smc_inherit_parse_entry(const char *s, size_t len, struct smc_inherit_entry *e) {
        const char *f[10];
        size_t fl[10];
        uint64_t v[10];

        if (!s || !e || inherit_split(s, len, f, fl, 10) != 10)
                return -EINVAL;
        /* X: a descriptor; T: a descriptor or -1 */
        if (!inherit_num(f[0], fl[0], false, FD_MAX - 1, &v[0]))
                return -EINVAL;
        if (fl[1] == 2 && f[1][0] == '-' && f[1][1] == '1')
                v[1] = UINT64_MAX;
        else if (!inherit_num(f[1], fl[1], false, FD_MAX - 1, &v[1]))
                return -EINVAL;
        if (!inherit_num(f[2], fl[2], true, UINT64_MAX, &v[2]) || !inherit_num(f[3], fl[3], true, UINT64_MAX, &v[3]) ||
            !inherit_num(f[4], fl[4], false, SMC_DMB_MAX_SIZE, &v[4]) ||
            !inherit_num(f[5], fl[5], true, UINT64_MAX, &v[5]) ||
            !inherit_num(f[6], fl[6], false, SMC_DMB_MAX_SIZE, &v[6]) ||
            !inherit_num(f[7], fl[7], true, SMC_INHERIT_F_MASK, &v[7]) ||
            !inherit_num(f[8], fl[8], false, SMC_INHERIT_OWED_MAX, &v[8]) ||
            !inherit_num(f[9], fl[9], false, SMC_DMB_MAX_SIZE, &v[9]))
                return -EINVAL;
        if (v[2] == 0 || v[3] == 0 || v[5] == 0 || v[3] == v[5] || !inherit_ring_size(v[4]) ||
            !inherit_ring_size(v[6]) || v[1] == v[0] || v[9] > v[6])
                return -EINVAL;
        *e = (struct smc_inherit_entry) {
                .x = (int) v[0],
                .t = v[1] == UINT64_MAX ? -1 : (int) v[1],
                .conn_id = v[2],
                .rx_id = v[3],
                .rx_size = (uint32_t) v[4],
                .tx_id = v[5],
                .tx_size = (uint32_t) v[6],
                .flags = (uint32_t) v[7],
                .owed = (uint32_t) v[8],
                .unpub = (uint32_t) v[9],
        };
        return 0;
}

int smc_inherit_format_entry(const struct smc_inherit_entry *e, char *buf, size_t size) {
        int n = snprintf(buf, size, "%d:%d:%llx:%llx:%u:%llx:%u:%x:%u:%u", e->x, e->t,
                         (unsigned long long) e->conn_id, (unsigned long long) e->rx_id, e->rx_size,
                         (unsigned long long) e->tx_id, e->tx_size, e->flags, e->owed, e->unpub);

        if (n < 0 || (size_t) n >= size)
                return -ENOBUFS;
        return n;
}

int smc_inherit_parse_listener(const char *s, size_t len, struct smc_inherit_listener *l) {
        const char *f[5];
        size_t fl[5];
        uint64_t v[5] = { 0, 0, 0, 0, 0 };
        int nf;

        if (!s || !l || len < 5 || s[0] != 'L' || s[1] != ':')
                return -EINVAL;
        nf = inherit_split(s + 2, len - 2, f, fl, 5);
        if (nf != 2 && nf != 4 && nf != 5)
                return -EINVAL;
        if (!inherit_num(f[0], fl[0], false, FD_MAX - 1, &v[0]) ||
            !inherit_num(f[1], fl[1], true, SMC_INHERIT_LF_MASK, &v[1]))
                return -EINVAL;
        if (nf >= 4 && (!inherit_num(f[2], fl[2], false, FD_MAX - 1, &v[2]) ||
                        !inherit_num(f[3], fl[3], true, UINT64_MAX, &v[3]) || v[2] == v[0] || v[3] == 0))
                return -EINVAL;
        if (nf == 5 && (!inherit_num(f[4], fl[4], false, FD_MAX - 1, &v[4]) || v[4] == v[0] || v[4] == v[2]))
                return -EINVAL;
        *l = (struct smc_inherit_listener) {
                .fd = (int) v[0],
                .flags = (uint32_t) v[1],
                .chan = nf >= 4 ? (int) v[2] : -1,
                .dchan = nf == 5 ? (int) v[4] : -1,
                .listener_id = v[3],
        };
        return 0;
}

int smc_inherit_format_listener(const struct smc_inherit_listener *l, char *buf, size_t size) {
        int n = l->chan < 0    ? snprintf(buf, size, "L:%d:%x", l->fd, l->flags)
                : l->dchan < 0 ? snprintf(buf, size, "L:%d:%x:%d:%llx", l->fd, l->flags, l->chan,
                                          (unsigned long long) l->listener_id)
                               : snprintf(buf, size, "L:%d:%x:%d:%llx:%d", l->fd, l->flags, l->chan,
                                          (unsigned long long) l->listener_id, l->dchan);

        if (n < 0 || (size_t) n >= size)
                return -ENOBUFS;
        return n;
}

/* A TCP socket of @family (AF_INET6 falls back to AF_INET) whose connection was reset
 * by its peer: recv() gives ECONNRESET once, then 0; send() EPIPE; poll()
 * POLLIN|POLLERR|POLLHUP. Made over loopback (a listener, a connect, an accept, an
 * abortive close). If loopback cannot be used: an unconnected TCP socket (ENOTCONN /
 * EPIPE). Close-on-exec. Returns the descriptor or -errno. */
static int reset_socket(int family) {
        int fams[2] = { family, AF_INET };

        for (unsigned k = 0; k < 2; k++) {
                struct sockaddr_storage ss = { .ss_family = (sa_family_t) fams[k] };
                socklen_t sl = fams[k] == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
                struct linger lg = { .l_onoff = 1, .l_linger = 0 };
                struct pollfd p;
                int l, c = -1, a = -1;

                if (k == 1 && family == AF_INET)
                        break;
                if (fams[k] == AF_INET6)
                        ((struct sockaddr_in6 *) &ss)->sin6_addr = in6addr_loopback;
                else
                        ((struct sockaddr_in *) &ss)->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
                l = sys_fd_off_stdio(sys_socket(fams[k], SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
                if (l < 0)
                        continue;
                if (sys_bind(l, (struct sockaddr *) &ss, sl) < 0 || sys_listen(l, 1) < 0 ||
                    sys_getsockname(l, (struct sockaddr *) &ss, &sl) < 0)
                        goto next;
                /* nonblocking and bounded: a firewall that drops loopback SYNs must not
                 * stall an exec or a program's start */
                c = sys_fd_off_stdio(sys_socket(fams[k], SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
                if (c < 0 || (sys_connect(c, (struct sockaddr *) &ss, sl) < 0 && errno != EINPROGRESS))
                        goto next;
                p = (struct pollfd) { .fd = l, .events = POLLIN };
                if (sys_poll(&p, 1, 200) <= 0)
                        goto next;
                a = sys_fd_off_stdio(sys_accept4(l, NULL, NULL, SOCK_CLOEXEC));
                if (a < 0 || sys_setsockopt(a, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) < 0)
                        goto next;
                p = (struct pollfd) { .fd = c, .events = POLLOUT };
                (void) sys_poll(&p, 1, 200); /* the SYN-ACK: at once over loopback */
                (void) set_nonblock(c, false);
                sys_close(a); /* RST */
                sys_close(l);
                p = (struct pollfd) { .fd = c, .events = POLLIN };
                (void) sys_poll(&p, 1, 200); /* loopback delivers it at once; bounded */
                return c;
        next:
                if (a >= 0)
                        sys_close(a);
                if (c >= 0)
                        sys_close(c);
                sys_close(l);
        }
        family = family == AF_INET6 ? AF_INET6 : AF_INET;
        {
                int t = sys_fd_off_stdio(sys_socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0));

                return t < 0 ? -errno : t;
        }
}

/* Put a reset TCP socket in place of descriptor @fd (its close-on-exec flag and
 * O_NONBLOCK kept). Returns 0 or -errno (@fd unchanged). */
int smc_reset_socket(int family) {
        return reset_socket(family);
}

static int stub_in_place(int fd, int family) {
        int fdfl = sys_fcntl(fd, F_GETFD, 0), fl = sys_fcntl(fd, F_GETFL, 0), t, r = 0;

        if (fdfl < 0 || fl < 0)
                return -errno;
        t = reset_socket(family);
        if (t < 0)
                return t;
        if (fl & O_NONBLOCK)
                (void) set_nonblock(t, true);
        if (sys_dup3(t, fd, (fdfl & FD_CLOEXEC) ? O_CLOEXEC : 0) < 0)
                r = -errno;
        sys_close(t);
        return r;
}

struct exec_fd {
        struct smc_sock *s;
        bool listener;  /* an SMC listener: its TCP socket took the epoll fd's place */
        int x;          /* X (a listener: the app's fd) */
        int y, t;       /* close-on-exec cleared on these (-1: none) */
        int saved;      /* X's socketpair end, when a stub took its place (-1: none) */
        int x_fdflags;  /* X's F_GETFD, for the restore */
        uint32_t unpub; /* the ring's unpublished bytes handed to the entry, and its */
        uint64_t tx_prod; /* cursor and held flag then (restored by a failed exec) */
        bool tx_held;
};

struct smc_exec_undo {
        char **env;     /* the environment handed to exec (a copy), or NULL */
        char *var;      /* its SMCRUN_INHERIT=... string */
        size_t n, cap;
        struct exec_fd fds[];
};

/* Append @sz bytes of @p to the malloc'd string *@buf (length *@len, room *@cap). */
static bool str_append(char **buf, size_t *len, size_t *cap, const char *p, size_t sz) {
        if (*len + sz + 1 > *cap) {
                size_t nc = (*cap ? *cap * 2 : 256);
                char *nb;

                while (nc < *len + sz + 1)
                        nc *= 2;
                nb = realloc(*buf, nc);
                if (!nb)
                        return false;
                *buf = nb;
                *cap = nc;
        }
        memcpy(*buf + *len, p, sz);
        *len += sz;
        (*buf)[*len] = '\0';
        return true;
}

static struct exec_fd *undo_add(struct smc_exec_undo **u) {
        if (!*u || (*u)->n == (*u)->cap) {
                size_t cap = *u && (*u)->cap ? (*u)->cap * 2 : 8;
                struct smc_exec_undo *nu = realloc(*u, sizeof(**u) + cap * sizeof(struct exec_fd));

                if (!nu)
                        return NULL;
                if (!*u) {
                        nu->env = NULL;
                        nu->var = NULL;
                        nu->n = 0;
                }
                nu->cap = cap;
                *u = nu;
        }
        return &(*u)->fds[(*u)->n++];
}

/* One SMC socket before an exec (s->lock held). Returns false on ENOMEM. */
static bool exec_prepare_one(struct smc_sock *s, int x, int x_fdfl, bool preloaded, bool may_stub, bool pid_moved,
                             struct smc_spawn_fds *child, struct smc_exec_undo **u, char **var, size_t *len,
                             size_t *cap) {
        struct smc_ring_ep *ep = &s->ep;
        int fdfl, y;
        struct exec_fd *f;

        /* @x_fdfl: X's descriptor flags when @x is a number in another process (a
         * spawn's file action made it), else -1: ask */
        fdfl = x_fdfl >= 0 ? x_fdfl : sys_fcntl(x, F_GETFD, 0);
        y = __atomic_load_n(&ep->y_peer, __ATOMIC_RELAXED);
        /* Data a cork held back is the app's. It goes out now if the peer can be rung
         * (as at close), or the new image publishes it (it is in the peer's ring
         * already): a program may have closed every other descriptor before the exec
         * (CPython's close_fds), Y too, and a published batch without its doorbell
         * byte would leave the peer asleep for good. */
        if (__atomic_load_n(&ep->tx_unpub, __ATOMIC_RELAXED) > 0 && y >= 0 && sys_fcntl(y, F_GETFD, 0) >= 0 &&
            pthread_mutex_trylock(&ep->tx_lock) == 0) {
                pthread_mutex_unlock(&ep->tx_lock);
                (void) smc_ring_flush(ep);
        }
        if (fdfl < 0 || (fdfl & FD_CLOEXEC))
                return true; /* closed by the exec, as a TCP socket would be */
        if (!preloaded || s->smcr || y < 0) {
                int saved, r;

                if (!may_stub) {
                        /* a spawn: the caller stubs the child's number by a file action */
                        if (child && child->n_stub < child->max_stub) {
                                child->stub_fds[child->n_stub] = x;
                                child->stub_families[child->n_stub++] = s->family;
                        }
                        return true;
                }
                saved = sys_fcntl(x, F_DUPFD_CLOEXEC, 3);
                if (saved < 0)
                        return true;
                r = stub_in_place(x, s->family);
                if (r < 0) {
                        sys_close(saved);
                        return true;
                }
                f = undo_add(u);
                if (!f) {
                        (void) sys_dup3(saved, x, 0);
                        sys_close(saved);
                        return false;
                }
                *f = (struct exec_fd) { .s = s, .x = x, .y = -1, .t = -1, .saved = saved, .x_fdflags = fdfl };
                smc_debug("exec: fd %d (%s) cannot live on in the new image (%s): a reset TCP socket takes its place",
                          x, s->smcr ? "SMC-R" : "SMC-D",
                          s->smcr ? "SMC-R" : !preloaded ? "libsmcrun.so not in its LD_PRELOAD" : "no doorbell");
                return true;
        }
        {
                struct smc_inherit_entry e = {
                        .x = x,
                        .t = s->hidden,
                        .conn_id = s->conn_id,
                        .rx_id = 0,
                        .rx_size = ep->rx_size,
                        .tx_id = 0,
                        .tx_size = ep->tx_size,
                        .flags = (s->family == AF_INET6 ? SMC_INHERIT_F_INET6 : 0) |
                                 (__atomic_load_n(&ep->corked, __ATOMIC_RELAXED) ? SMC_INHERIT_F_CORK : 0) |
                                 (s->nodelay ? SMC_INHERIT_F_NODELAY : 0) |
                                 (s->rcvtimeo_set ? SMC_INHERIT_F_RCVTIMEO : 0) |
                                 (pid_moved || s->conn_fork_gen != atomic_load(&fork_gen) ? SMC_INHERIT_F_SHARED : 0),
                        .owed = 0, /* (now in the DMB header: dmb.h owed) */
                };
                char buf[160];
                bool locked, txl;
                int n;

                /* the buffer ids: the mapping cache knows them by base address */
                locked = exec_lock(&buf_lock);
                for (unsigned i = 0; i < BUF_HASH; i++)
                        for (struct buf_map *b = buf_hash[i]; b; b = b->next) {
                                if (b->base == (void *) ep->rx_hdr)
                                        e.rx_id = b->id;
                                if (b->base == (void *) ep->tx_hdr)
                                        e.tx_id = b->id;
                        }
                exec_unlock(&buf_lock, locked);
                /* what is still unpublished goes with the entry: this image forgets it
                 * (a vfork() parent would publish it again later, over the new
                 * image's data); smc_exec_finish() gives it back if the exec fails */
                txl = exec_lock(&ep->tx_lock);
                e.unpub = ep->tx_unpub;
                n = smc_inherit_format_entry(&e, buf, sizeof(buf));
                if (n < 0 || e.rx_id == 0 || e.tx_id == 0 || e.conn_id == 0 || e.unpub > ep->tx_size) {
                        exec_unlock(&ep->tx_lock, txl);
                        return true;
                }
                f = undo_add(u);
                if (!f) {
                        exec_unlock(&ep->tx_lock, txl);
                        return false;
                }
                if ((*len > 0 && !str_append(var, len, cap, ",", 1)) || !str_append(var, len, cap, buf, (size_t) n)) {
                        exec_unlock(&ep->tx_lock, txl);
                        (*u)->n--;
                        return false;
                }
                *f = (struct exec_fd) { .s = s, .x = x, .y = -1, .t = s->hidden, .saved = -1, .x_fdflags = fdfl,
                                        .unpub = ep->tx_unpub, .tx_prod = ep->tx_prod, .tx_held = ep->tx_held };
                if (ep->tx_unpub > 0) {
                        ep->tx_unpub = 0;
                        ep->tx_held = false;
                        __atomic_store_n(&ep->tx_prod, atomic_load(&ep->tx_hdr->prod), __ATOMIC_RELAXED);
                }
                exec_unlock(&ep->tx_lock, txl);
                if (pid_moved)
                        /* a vfork() child writes its parent's memory: the parent's close
                         * must only let go of its copy, the new image holds one too */
                {
                        s->conn_fork_gen = atomic_load(&fork_gen) - 1;
                        s->ew_foreign = true;
                }
                if (s->hidden >= 0)
                        (void) set_cloexec(s->hidden, false);
                smc_debug("exec: fd %d (SMC-D %016llx) goes to the new image: %s", x,
                          (unsigned long long) s->conn_id, buf);
        }
        return true;
}

/* The SMCRUN_INHERIT entry of an SMC listener at the new image's number @fd (s->lock
 * held): with its accept channel for an image that loads the library (@preloaded)
 * and a listener smcd knows by id, and with the copy of smcd's end of the channel
 * when it has one (the new image can then give the channel to a restarted smcd,
 * listen_revive()). */
static struct smc_inherit_listener listener_entry(const struct smc_sock *s, int fd, bool preloaded) {
        bool chan = preloaded && s->listener_id != 0 && s->chan >= 0;

        return (struct smc_inherit_listener) {
                .fd = fd,
                .chan = chan ? s->chan : -1,
                .dchan = chan ? s->dchan : -1,
                .listener_id = s->listener_id,
                .flags = (s->family == AF_INET6 ? SMC_INHERIT_LF_INET6 : 0) |
                         (s->listen_smcr ? SMC_INHERIT_LF_SMCR : 0) |
                         (atomic_load(&s->nonblock) ? SMC_INHERIT_LF_NONBLOCK : 0),
        };
}

/* Appends @le's "L:..." entry to the variable being built. False on ENOMEM. */
static bool listener_entry_append(const struct smc_inherit_listener *le, char **var, size_t *len, size_t *cap) {
        char buf[96];
        int n = smc_inherit_format_listener(le, buf, sizeof(buf));

        return n >= 0 && (*len == 0 || str_append(var, len, cap, ",", 1)) && str_append(var, len, cap, buf, (size_t) n);
}

/* An SMC listener before an exec (s->lock held): its app fd is an epoll fd that no
 * new image could accept on. Its listening TCP socket T takes the fd's place (the
 * epoll fd kept in a hidden close-on-exec copy for a failed exec). A new image that
 * loads libsmcrun.so also gets the accept channel (close-on-exec cleared) and accepts
 * from it as one more holder of the listener, as a forked process does: connections
 * queued there stay, and this process, if it goes on (vfork, posix_spawn, a fork's
 * parent), shares the queue with the new image as TCP shares T's. Other images accept
 * plain TCP on T. @pid_moved: the caller is a vfork() child (the parent's memory):
 * the parent holds the listener too from now on. Returns false on ENOMEM. */
static bool exec_prepare_listener(struct smc_sock *s, bool preloaded, bool pid_moved, struct smc_exec_undo **u,
                                  char **var, size_t *len, size_t *cap) {
        int fdfl = sys_fcntl(s->fd, F_GETFD, 0), saved;
        struct smc_inherit_listener le = listener_entry(s, s->fd, preloaded);
        struct exec_fd *f;

        if (fdfl < 0 || (fdfl & FD_CLOEXEC) || s->hidden < 0)
                return true;
        if (le.chan >= 0 && set_cloexec(le.chan, false) < 0)
                le.chan = le.dchan = -1;
        if (le.dchan >= 0 && set_cloexec(le.dchan, false) < 0)
                le.dchan = -1;
        f = undo_add(u);
        if (!f || (preloaded && !listener_entry_append(&le, var, len, cap))) {
                if (f)
                        (*u)->n--;
                if (le.chan >= 0)
                        (void) set_cloexec(le.chan, true);
                if (le.dchan >= 0)
                        (void) set_cloexec(le.dchan, true);
                return false;
        }
        saved = sys_fcntl(s->fd, F_DUPFD_CLOEXEC, 3);
        if (saved < 0 || sys_dup3(s->hidden, s->fd, 0) < 0) {
                if (saved >= 0)
                        sys_close(saved);
                (*u)->n--; /* (an entry already written names a TCP listener: harmless) */
                if (le.chan >= 0)
                        (void) set_cloexec(le.chan, true);
                if (le.dchan >= 0)
                        (void) set_cloexec(le.dchan, true);
                return true;
        }
        (void) set_nonblock(s->fd, atomic_load(&s->nonblock)); /* T's file is shared with the fd now */
        *f = (struct exec_fd) { .s = s, .listener = true, .x = s->fd, .y = le.dchan, .t = le.chan, .saved = saved,
                                .x_fdflags = fdfl };
        if (pid_moved && le.chan >= 0)
                /* a vfork() child writes its parent's memory: the parent's close must
                 * only let go of its copies, the new image holds the channel too */
                s->listen_fork_gen = ~0u;
        smc_debug("exec: listener fd %d: its TCP socket goes to the new image%s", s->fd,
                  !preloaded ? "" : le.chan >= 0 ? " with its accept channel" : " (registered with smcd again there)");
        return true;
}

bool smc_spawn_touched(const struct smc_spawn_fds *child, int fd) {
        if (!child)
                return false;
        if (fd >= child->closed_from)
                return true;
        for (size_t i = 0; i < child->n; i++)
                if (child->fds[i].fd == fd)
                        return true;
        return false;
}

/* An SMC listener the new process of a spawn inherits (s->lock held; @child can add
 * file actions): the parent's table is not touched (its other threads go on using the
 * listener), so the caller puts T at the listener's number in the child by a dup2
 * action; a new program that loads libsmcrun.so also gets the accept channel (by a
 * dup2 onto its own number) and the "L:FD:FLAGS:CHAN:ID" entry, as after an exec. Not
 * if a file action of the program's replaced or closed T's (or the channel's) number
 * in the child: our copy would not be T there. T's file takes the program's blocking mode for a child without the library,
 * and the listener is shared from now on (its accepts poll T first). Returns false on
 * ENOMEM. */
static bool spawn_prepare_listener(struct smc_sock *s, int x, int x_fdfl, bool preloaded, struct smc_spawn_fds *child,
                                   struct smc_exec_undo **u, char **var, size_t *len, size_t *cap) {
        /* @x: the child's number for it (a file action's copy: @x_fdfl 0), else s->fd */
        int fdfl = x_fdfl >= 0 ? x_fdfl : sys_fcntl(x, F_GETFD, 0);
        struct smc_inherit_listener le = listener_entry(s, x, preloaded);
        struct exec_fd *f;

        if (fdfl < 0 || (fdfl & FD_CLOEXEC) || s->hidden < 0 || child->n_listen + 3 > child->max_listen ||
            smc_spawn_touched(child, s->hidden) || (le.chan >= 0 && smc_spawn_touched(child, le.chan)))
                return true; /* (a file action replaced or closed the number of T or of the
                              * channel: the child's copy would not be ours) */
        if (le.dchan >= 0 && smc_spawn_touched(child, le.dchan))
                le.dchan = -1; /* (the channel alone, as from a version-5 smcd) */
        f = undo_add(u);
        if (!f)
                return false;
        if (preloaded && !listener_entry_append(&le, var, len, cap)) {
                (*u)->n--;
                return false;
        }
        /* shared before T may turn blocking: this process's accepts poll it first */
        s->listen_fork_gen = ~0u;
        (void) set_nonblock(s->hidden, atomic_load(&s->nonblock));
        *f = (struct exec_fd) { .s = s, .listener = true, .x = x, .y = -1, .t = -1, .saved = -1, .x_fdflags = fdfl };
        child->listen_fds[child->n_listen] = x;
        child->listen_srcs[child->n_listen++] = s->hidden;
        if (le.chan >= 0) {
                /* the channel by a dup2 onto its own number, which clears close-on-exec
                 * in the child only (glibc >= 2.35; POSIX 2024): clearing it here
                 * would hand it to whatever another thread spawns meanwhile */
                child->listen_fds[child->n_listen] = le.chan;
                child->listen_srcs[child->n_listen++] = le.chan;
        }
        if (le.dchan >= 0) {
                child->listen_fds[child->n_listen] = le.dchan;
                child->listen_srcs[child->n_listen++] = le.dchan;
        }
        smc_debug("spawn: listener fd %d: its TCP socket goes to the new process as fd %d%s", s->fd, x,
                  !preloaded ? "" : le.chan >= 0 ? " with its accept channel" : " (registered with smcd again there)");
        return true;
}


char **smc_exec_prepare(char *const envp[], bool preloaded, bool may_stub, bool spawn,
                        struct smc_spawn_fds *child, struct smc_exec_undo **ret_undo) {
        static const char prefix[] = SMC_INHERIT_ENV "=";

        smc_ewatch_stop_all(); /* the new image (or child) waits in the kernel */
        smc_ewatch_handed_on();
        lshare_taint_all(); /* (a listener may go to the new image) */
        if (!spawn && getpid() == exec_known_pid)
                smc_hint_flush(); /* the new image starts counting from 0 */
        struct smc_exec_undo *u = NULL;
        char *var = NULL;
        size_t len = 0, cap = 0, nenv = 0, k = 0;
        /* another process keeps X: our vfork() parent, or we ourselves (a spawn) */
        bool pid_moved = getpid() != exec_known_pid || spawn, ok = true;
        struct smc_sock *s;

        *ret_undo = NULL;
        for (unsigned pos = 0; ok && (s = table_next(&pos, FD_MAX));) {
                if (sock_state(s) == SOCK_CONNECTING && !pid_moved && !(sys_fcntl(s->fd, F_GETFD, 0) & FD_CLOEXEC))
                        /* this process's image goes, its thread with it: the connect
                         * ends first, and goes on as any connection (a child's copy,
                         * vfork or spawn, is T: the connect is the parent's; one
                         * closed at the exec is not waited for) */
                        connect_settle(s);
                if (sock_state(s) != SOCK_SMCD &&
                    (sock_state(s) != SOCK_LISTEN_SMC || (!may_stub && !(child && child->can_add))))
                        continue;
                /* a vfork() child closed, replaced or copied over that number */
                if ((vfork_fds_n && vfork_fd_find(getpid(), s->fd)) || smc_spawn_touched(child, s->fd))
                        continue;
                bool locked = exec_lock(&s->lock);

                if (sock_state(s) == SOCK_SMCD && sock_lookup(s->fd) == s)
                        ok = exec_prepare_one(s, s->fd, -1, preloaded, may_stub, pid_moved, child, &u, &var,
                                              &len, &cap);
                else if (sock_state(s) == SOCK_LISTEN_SMC && sock_lookup(s->fd) == s && may_stub)
                        ok = exec_prepare_listener(s, preloaded, pid_moved, &u, &var, &len, &cap);
                else if (sock_state(s) == SOCK_LISTEN_SMC && sock_lookup(s->fd) == s)
                        ok = spawn_prepare_listener(s, s->fd, -1, preloaded, child, &u, &var, &len, &cap);
                exec_unlock(&s->lock, locked);
        }
        /* the copies a vfork() child made of its parent's SMC connections */
        if (vfork_fds_n) {
                pid_t pid = getpid();

                for (unsigned i = 0; i < vfork_fds_n && ok; i++) {
                        if (vfork_fds[i].pid != pid || vfork_fds[i].oldfd < 0 ||
                            !(s = sock_lookup(vfork_fds[i].oldfd)))
                                continue;
                        bool locked = exec_lock(&s->lock);

                        if (sock_state(s) == SOCK_SMCD)
                                ok = exec_prepare_one(s, vfork_fds[i].fd, -1, preloaded, may_stub, true, NULL, &u,
                                                      &var, &len, &cap);
                        exec_unlock(&s->lock, locked);
                }
        }
        /* the copies a spawn's file actions make (dup2 onto the child's 0, 1, 2: CPython's
         * subprocess with close_fds=False): not close-on-exec there; a listener's, when
         * the caller can put its TCP socket there */
        for (size_t i = 0; child && i < child->n && ok; i++) {
                if (child->fds[i].src < 0 || !(s = sock_lookup(child->fds[i].src)))
                        continue;
                bool locked = exec_lock(&s->lock);

                if (sock_state(s) == SOCK_SMCD && sock_lookup(child->fds[i].src) == s)
                        ok = exec_prepare_one(s, child->fds[i].fd, 0, preloaded, may_stub, true, child, &u, &var,
                                              &len, &cap);
                else if (sock_state(s) == SOCK_LISTEN_SMC && sock_lookup(child->fds[i].src) == s && child->can_add)
                        ok = spawn_prepare_listener(s, child->fds[i].fd, 0, preloaded, child, &u, &var, &len, &cap);
                exec_unlock(&s->lock, locked);
        }
        bool stale = false;

        if (!ok) {
                free(var);
                smc_exec_finish(u, true);
                return (char **) envp;
        }
        if (envp)
                for (; envp[nenv]; nenv++)
                        stale = stale || strncmp(envp[nenv], prefix, sizeof(prefix) - 1) == 0;
        if (len == 0 && !stale) {
                free(var);
                *ret_undo = u; /* only stubs, or nothing (NULL) */
                return (char **) envp;
        }
        /* our SMCRUN_INHERIT=entries; a stale one in @envp (the program's own copy of
         * an environment) would name descriptors that are something else by now */
        if (!u) {
                u = calloc(1, sizeof(*u));
                if (!u) {
                        free(var);
                        return (char **) envp;
                }
        }
        *ret_undo = u;
        u->var = len > 0 ? malloc(sizeof(prefix) + len) : NULL;
        u->env = malloc((nenv + 2) * sizeof(char *));
        if ((len > 0 && !u->var) || !u->env) {
                free(var);
                smc_exec_finish(u, true);
                *ret_undo = NULL;
                return (char **) envp;
        }
        if (len > 0) {
                memcpy(u->var, prefix, sizeof(prefix) - 1);
                memcpy(u->var + sizeof(prefix) - 1, var, len + 1);
        }
        free(var);
        for (size_t i = 0; i < nenv; i++)
                if (strncmp(envp[i], prefix, sizeof(prefix) - 1) != 0)
                        u->env[k++] = envp[i];
        if (u->var)
                u->env[k++] = u->var;
        u->env[k] = NULL;
        if (spawn)
                smc_debug("spawn: %zu SMC socket(s) inherited by the new process", u->n);
        return u->env;
}

void smc_exec_finish(struct smc_exec_undo *u, bool failed) {
        int saved_errno = errno;

        if (!u)
                return;
        for (size_t i = 0; i < u->n; i++) {
                struct exec_fd *f = &u->fds[i];

                if (f->listener) {
                        /* the epoll fd back in place (an exec; a spawn never moved it);
                         * T is hidden and nonblocking again, unless a spawned process
                         * holds it now (it has the program's mode there: this
                         * process's accepts poll it first); the accept channel
                         * close-on-exec (a spawned process holds a copy) */
                        if (f->saved >= 0) {
                                (void) sys_dup3(f->saved, f->x, (f->x_fdflags & FD_CLOEXEC) ? O_CLOEXEC : 0);
                                sys_close(f->saved);
                        }
                        if (f->s->hidden >= 0 && (failed || f->saved >= 0))
                                (void) set_nonblock(f->s->hidden, true);
                        if (f->t >= 0)
                                (void) set_cloexec(f->t, true);
                        if (f->y >= 0)
                                (void) set_cloexec(f->y, true);
                        continue;
                }
                if (failed) {
                        if (f->unpub > 0) {
                                /* this image keeps the data it had held back */
                                bool txl = exec_lock(&f->s->ep.tx_lock);

                                f->s->ep.tx_unpub = f->unpub;
                                f->s->ep.tx_held = f->tx_held;
                                __atomic_store_n(&f->s->ep.tx_prod, f->tx_prod, __ATOMIC_RELAXED);
                                exec_unlock(&f->s->ep.tx_lock, txl);
                        }
                        if (f->y >= 0)
                                (void) set_cloexec(f->y, true);
                        if (f->t >= 0)
                                (void) set_cloexec(f->t, true);
                        if (f->saved >= 0) {
                                (void) sys_dup3(f->saved, f->x, (f->x_fdflags & FD_CLOEXEC) ? O_CLOEXEC : 0);
                                sys_close(f->saved);
                        }
                } else {
                        /* a new process holds X too (posix_spawn): a close here only
                         * detaches, smcd ends the connection with the last copy */
                        bool locked = exec_lock(&f->s->lock);

                        if (sock_state(f->s) == SOCK_SMCD && f->s->fd == f->x)
                        {
                                f->s->conn_fork_gen = atomic_load(&fork_gen) - 1;
                                f->s->ew_foreign = true;
                        }
                        exec_unlock(&f->s->lock, locked);
                        if (f->y >= 0)
                                (void) set_cloexec(f->y, true);
                        if (f->t >= 0)
                                (void) set_cloexec(f->t, true);
                        if (f->saved >= 0) {
                                (void) sys_dup3(f->saved, f->x, (f->x_fdflags & FD_CLOEXEC) ? O_CLOEXEC : 0);
                                sys_close(f->saved);
                        }
                }
        }
        free(u->env);
        free(u->var);
        free(u);
        errno = saved_errno;
}

/* Is @fd a socket of @domain and SOCK_STREAM? */
static bool fd_is_stream(int fd, int domain) {
        int v;
        socklen_t l = sizeof(v);

        if (fd < 0 || sys_getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &l) < 0 || v != SOCK_STREAM)
                return false;
        l = sizeof(v);
        if (sys_getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &v, &l) < 0)
                return false;
        return domain == AF_INET ? (v == AF_INET || v == AF_INET6) : v == domain;
}

static bool adopt_give_up;

/* Free bytes in the peer's ring of @ep, from its published cursors. */
static uint32_t smc_ring_tx_space_for(struct smc_ring_ep *ep) {
        return ep->tx_size - smc_curs_diff(ep->tx_size, atomic_load(&ep->tx_hdr->cons), atomic_load(&ep->tx_hdr->prod));
}

/* Is @fd (>= 0) a TCP socket bound to @port (0: any) that is neither connected nor
 * listening, as the connecting side's hidden T is? */
static bool exec_is_hidden_tcp(int fd, uint16_t port) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        struct smc_ctl_addr a;
        int v;
        socklen_t l = sizeof(v);

        if (fd < 0 || !fd_is_stream(fd, AF_INET) || sys_getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &l) < 0 || v)
                return false;
        if (sys_getpeername(fd, (struct sockaddr *) &ss, &sl) == 0 || errno != ENOTCONN)
                return false;
        sl = sizeof(ss);
        if (sys_getsockname(fd, (struct sockaddr *) &ss, &sl) < 0 ||
            smc_ctl_addr_from_sockaddr(&a, (struct sockaddr *) &ss, sl) < 0)
                return false;
        return a.port != 0 && (port == 0 || a.port == port);
}

/* Build the SMC-D socket of entry @e at e->x from an ADOPT_REPLY @reply that matches
 * it, with its 3 fds (rx memfd, tx memfd, Y), which it takes in every case. Returns 0,
 * or -errno (nothing changed then). */
static int adopt_install(const struct smc_inherit_entry *e, const union smc_ctl_msg *rp, int *fds) {
        int r, fl, y;
        void *rx = NULL, *tx = NULL;
        struct smc_sock *s;

        y = fds[2];
        r = buf_get(&rp->conn.rx, fds[0], 0, &rx);
        if (buf_get(&rp->conn.tx, fds[1], 0, &tx) < 0 && r == 0)
                r = -EPROTO;
        fl = sys_fcntl(e->x, F_GETFL, 0);
        if (r == 0 && fl < 0)
                r = -errno;
        s = r == 0 ? sock_alloc(e->x, (e->flags & SMC_INHERIT_F_INET6) ? AF_INET6 : AF_INET, SOCK_NEW,
                                fl & O_NONBLOCK)
                   : NULL;
        if (r == 0 && !s)
                r = -ENOMEM;
        if (r < 0) {
                sys_close(y);
                return r;
        }
        s->conn_id = e->conn_id;
        s->conn_instance = smc_ctl_client_instance();
        s->conn_role = -1; /* ADOPT_REPLY does not say */
        if (addr_for_family(&rp->conn.local, s->family, &s->local, &s->local_len) < 0 ||
            addr_for_family(&rp->conn.peer, s->family, &s->peer, &s->peer_len) < 0) {
                sys_close(y);
                sock_release(s);
                return -EPROTO;
        }
        r = smc_ring_init(&s->ep, rx, e->rx_size, tx, e->tx_size, e->x, y);
        if (r < 0) {
                sys_close(y);
                sock_release(s);
                return r;
        }
        s->ep.x_mode_is_app = true;
        ep_tune(&s->ep, rp);
        /* the local state of the ring that lives in no DMB header: bytes the old
         * image had copied into the peer's ring but not published (they must fit in
         * the free space). (The doorbell bytes it owed are in the header: an entry's
         * owed, from an older library, is not added again) */
        if (e->unpub > smc_ring_tx_space_for(&s->ep)) {
                sys_close(y);
                smc_ring_fini(&s->ep);
                sock_release(s);
                return -EPROTO;
        }
        if (e->unpub > 0) {
                s->ep.tx_prod = smc_curs_add(s->ep.tx_prod, e->unpub, s->ep.tx_size);
                s->ep.tx_unpub = e->unpub;
                s->ep.tx_held = true;
        }
        s->ep.wr_shut = (atomic_load(&s->ep.tx_hdr->conn_flags) & (SMC_DMB_CONN_DONE_WRITING | SMC_DMB_CONN_CLOSED |
                                                                    SMC_DMB_CONN_ABORT)) != 0;
        s->ep.rd_shut = (atomic_load(&s->ep.rx_hdr->reader_flags) & SMC_DMB_READER_SHUT_RD) != 0;
        if (e->flags & SMC_INHERIT_F_CORK) {
                s->cork = true;
                (void) smc_ring_set_cork(&s->ep, true);
        }
        if (e->unpub > 0)
                /* out now, corked or not, as the old image would have sent them if it
                 * could have rung the peer (TCP sends corked data after 200 ms) */
                (void) smc_ring_flush(&s->ep);
        s->nodelay = (e->flags & SMC_INHERIT_F_NODELAY) != 0;
        s->rcvtimeo_set = (e->flags & SMC_INHERIT_F_RCVTIMEO) != 0;
        /* T (connecting side: it keeps the port) if it still is that socket: a TCP
         * socket bound to the connection's local port and not connected */
        if (exec_is_hidden_tcp(e->t, rp->conn.local.port)) {
                s->hidden = e->t;
                (void) set_cloexec(e->t, true);
        }
        s->conn_fork_gen = atomic_load(&fork_gen) - ((e->flags & SMC_INHERIT_F_SHARED) ? 1 : 0);
        s->ew_foreign = (e->flags & SMC_INHERIT_F_SHARED) != 0;
        s->conn_euid = geteuid();
        sock_set_state(s, SOCK_SMCD);
        r = sock_insert(s);
        if (r < 0) {
                sock_set_state(s, SOCK_NEW);
                s->hidden = -1;
                sys_close(y);
                smc_ring_fini(&s->ep);
                sock_release(s);
                return r;
        }
        return 0;
}

/* Rebuild the SMC-D socket of entry @e in this image. Returns 0, or -errno (nothing
 * changed then, the memfds closed). */
static int exec_adopt(const struct smc_inherit_entry *e) {
        union smc_ctl_msg m, reply;
        int fds[SMC_CTL_MAX_FDS], n;

        smc_ctl_init(&m, SMC_CTL_ADOPT, 0);
        m.adopt.conn_id = e->conn_id;
        if (adopt_give_up)
                return -ETIMEDOUT;
        if (atomic_load_explicit(&tcp_only_reason, memory_order_relaxed))
                return -ECANCELED; /* (io_uring) this image must not have SMC sockets */
        n = smc_ctl_client_call_timeout(&m, NULL, 0, &reply, fds, SMC_ADOPT_TIMEOUT_MS);
        if (n == -ETIMEDOUT)
                adopt_give_up = true; /* smcd is stuck: do not wait again for each socket */
        if (n < 0)
                return n;
        if (reply.hdr.type == SMC_CTL_ERROR) {
                for (int i = 0; i < n; i++)
                        sys_close(fds[i]);
                smc_debug("exec: ADOPT %016llx: ERROR %s: %s", (unsigned long long) e->conn_id,
                          strerror(-reply.error.error), reply.error.msg);
                return reply.error.error;
        }
        if (reply.hdr.type != SMC_CTL_ADOPT_REPLY || n != 3 || reply.conn.conn_id != e->conn_id ||
            reply.conn.rx.id != e->rx_id || reply.conn.rx.size != e->rx_size || reply.conn.tx.id != e->tx_id ||
            reply.conn.tx.size != e->tx_size) {
                for (int i = 0; i < n; i++)
                        sys_close(fds[i]);
                smc_debug("exec: ADOPT %016llx: reply of type %u does not match the entry", (unsigned long long) e->conn_id,
                          reply.hdr.type);
                return -EPROTO;
        }
        return adopt_install(e, &reply, fds);
}

/* ---- SMC connections passed between processes over unix sockets (SCM_RIGHTS) ---- */

/* bytes: the largest SO_SNDBUF an X of smcd's doorbell pairs reports (smcd sets 1; the
 * kernel raises it to its minimum, 4608 on x86-64); ordinary socket pairs have far
 * more (wmem_default) */
#define DOORBELL_SNDBUF_MAX 16384

/* Call @fn(fd, offset of its int in msg_control, @arg) for each descriptor of the
 * SCM_RIGHTS messages in @msg's control data. */
static void scm_rights_each(const struct msghdr *msg, void (*fn)(int fd, size_t off, void *arg), void *arg) {
        if (smc_uptr_bad(msg) || smc_uptr_bad(msg->msg_control) || msg->msg_controllen < sizeof(struct cmsghdr))
                return;
        for (struct cmsghdr *c = CMSG_FIRSTHDR((struct msghdr *) msg); c; c = CMSG_NXTHDR((struct msghdr *) msg, c)) {
                size_t n;

                if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS || c->cmsg_len < CMSG_LEN(0))
                        continue;
                n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                for (size_t i = 0; i < n; i++) {
                        size_t off = (size_t) (CMSG_DATA(c) - (unsigned char *) msg->msg_control) + i * sizeof(int);
                        int fd;

                        memcpy(&fd, (const char *) msg->msg_control + off, sizeof(fd));
                        fn(fd, off, arg);
                }
        }
}

/* The SMC listener @s (s->lock held) is about to go to another process as its TCP
 * socket: deposit its accept channel with smcd (LISTEN_DEPOSIT, protocol version 5),
 * so that the receiver's registration of the socket joins this listener's queue
 * instead of taking the new connections from it (listen_register()). From then on the
 * listener is shared, as after fork(): this process's close only lets go of its
 * copies. An smcd older than version 5, or one that refuses: nothing changes (the
 * receiver registers the socket again, as before). */
static void listen_deposit(struct smc_sock *s, bool withdraw) {
        union smc_ctl_msg m, reply;
        int fds[SMC_CTL_MAX_FDS], n, pass[2] = { s->chan, s->hidden };
        const char *what = withdraw ? "withdrawing the deposit of" : "depositing";

        if (s->chan < 0 || s->hidden < 0 || s->listener_id == 0 || s->listen_instance != smc_ctl_client_instance())
                return;
        smc_ctl_init(&m, SMC_CTL_LISTEN_DEPOSIT, 0);
        m.listen_deposit.listener_id = s->listener_id;
        m.listen_deposit.flags = withdraw                   ? SMC_CTL_DEPOSIT_WITHDRAW
                                 : atomic_load(&s->nonblock) ? SMC_CTL_DEPOSIT_NONBLOCK
                                                             : 0;
        n = smc_ctl_client_call(&m, pass, 2, &reply, fds);
        for (int i = 0; i < n; i++)
                sys_close(fds[i]);
        if (n < 0 || reply.hdr.type != SMC_CTL_OK) {
                smc_debug("fd %d: %s the accept channel of listener %llu failed: %s", s->fd, what,
                          (unsigned long long) s->listener_id,
                          n < 0 ? strerror(-n) : reply.hdr.type == SMC_CTL_ERROR ? reply.error.msg : "bad reply");
                return;
        }
        if (!withdraw)
                s->deposits_out++;
        smc_debug("fd %d: %s the accept channel of listener %llu with smcd: done", s->fd, what,
                  (unsigned long long) s->listener_id);
}

/* @fd goes to another process: an SMC-D connection is shared from now on, as after
 * fork() (either copy's close lets go of it only; sends take the cross-process lock),
 * and what TCP_CORK or MSG_MORE held back is published first: the receiver starts
 * from what the peer can see. An SMC listener (an epoll descriptor here) goes as its
 * TCP socket: returns that descriptor to send in @fd's place, else -1. */
static int fd_passing(int fd) {
        struct smc_sock *s = sock_lookup(fd);
        int t = -1;

        if (!s)
                return -1;
        pthread_mutex_lock(&s->lock);
        if (s->fd == fd && sock_state(s) == SOCK_SMCD && !s->smcr) {
                s->conn_fork_gen = ~0u;
                s->ew_foreign = true;
                smc_ring_set_shared(&s->ep);
                (void) smc_ring_flush(&s->ep);
                smc_debug("fd %d: SMC-D connection %016llx passed to another process", fd,
                          (unsigned long long) s->conn_id);
        } else if (s->fd == fd && sock_state(s) == SOCK_LISTEN_SMC && s->hidden >= 0) {
                t = s->hidden;
                listen_deposit(s, false);
                /* the receiver sees the file's flag, as a TCP listener's: the
                 * program's; shared from now on, our accepts poll T first */
                s->listen_fork_gen = ~0u;
                (void) set_nonblock(t, atomic_load(&s->nonblock));
                smc_debug("fd %d: SMC listener passed to another process as its TCP socket", fd);
        }
        pthread_mutex_unlock(&s->lock);
        return t;
}

struct passing {
        const struct msghdr *msg;
        struct msghdr *copy; /* set up once a listener is replaced */
        void *cbuf;
        size_t cbuf_len;
        bool copied;
};

static void fd_passing_at(int fd, size_t off, void *arg) {
        struct passing *p = arg;
        int t = fd_passing(fd);

        if (t < 0)
                return;
        if (!p->copied) {
                if (!p->copy || !p->cbuf || p->msg->msg_controllen > p->cbuf_len) {
                        smc_debug("fd %d: SMC listener passed as itself: no room to replace it", fd);
                        return;
                }
                memcpy(p->cbuf, p->msg->msg_control, p->msg->msg_controllen);
                *p->copy = *p->msg;
                p->copy->msg_control = p->cbuf;
                p->copied = true;
        }
        memcpy((char *) p->cbuf + off, &t, sizeof(t));
}

const struct msghdr *smc_fds_passing(const struct msghdr *msg, struct msghdr *copy, void *cbuf, size_t cbuf_len) {
        struct passing p = { .msg = msg, .copy = copy, .cbuf = cbuf, .cbuf_len = cbuf_len };
        int saved = errno;

        smc_ewatch_handed_on(); /* (whatever is sent: a forked child's parent re-arms no watch) */
        lshare_taint_all();     /* (the same for a listener passed on) */
        scm_rights_each(msg, fd_passing_at, &p);
        errno = saved;
        return p.copied ? copy : msg;
}

static void fd_sent(int fd, size_t off, void *arg) {
        struct smc_sock *s = sock_lookup(fd);
        bool sent = *(const bool *) arg;

        (void) off;
        if (sent && smc_ewatch_is_set(fd))
                smc_ewatch_fd_event(fd, SMC_EWATCH_ELSEWHERE); /* another process may wait in it */
        if (!s)
                return;
        pthread_mutex_lock(&s->lock);
        if (s->fd == fd && sock_state(s) == SOCK_LISTEN_SMC && s->deposits_out > 0) {
                s->deposits_out--;
                if (!sent)
                        listen_deposit(s, true);
        }
        pthread_mutex_unlock(&s->lock);
}

void smc_fds_sent(const struct msghdr *msg, bool sent) {
        int saved = errno;

        scm_rights_each(msg, fd_sent, &sent);
        errno = saved;
}

ssize_t smc_sendmsg_passing(int fd, const struct msghdr *msg, int flags,
                            ssize_t (*send_fn)(int fd, const struct msghdr *msg, int flags)) {
        union smc_scm_buf cb;
        struct msghdr copy;
        char *buf = cb.buf, *heap = NULL;
        size_t len = sizeof(cb.buf);
        const struct msghdr *out;
        ssize_t r;
        int saved;

        if (msg && msg->msg_control && msg->msg_controllen > len && (heap = malloc(msg->msg_controllen))) {
                buf = heap;
                len = msg->msg_controllen;
        }
        out = smc_fds_passing(msg, &copy, buf, len);
        r = send_fn(fd, out, flags);
        saved = errno;
        smc_fds_sent(msg, r >= 0);
        free(heap);
        errno = saved;
        return r;
}

/* @fd, a TCP socket of family @dom that arrived from another process and is not
 * listening: if it is not connected either (node's cluster with SCHED_NONE hands its
 * workers a bound socket, and each worker calls listen()), it is the library's from
 * now on, as one this process made: listen() or connect() on it go SMC. A connected
 * one is a plain TCP connection and stays unmanaged. */
static void unconnected_received(int fd, int dom) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        struct smc_ctl_addr a;
        struct smc_sock *s;
        bool bound;
        int fl;

        if (sys_getpeername(fd, (struct sockaddr *) &ss, &sl) == 0 || errno != ENOTCONN)
                return;
        sl = sizeof(ss);
        bound = sys_getsockname(fd, (struct sockaddr *) &ss, &sl) == 0 &&
                smc_ctl_addr_from_sockaddr(&a, (struct sockaddr *) &ss, sl) == 0 && a.port != 0;
        fl = sys_fcntl(fd, F_GETFL, 0);
        if (fl < 0)
                return;
        s = sock_alloc(fd, dom, bound ? SOCK_BOUND : SOCK_NEW, fl & O_NONBLOCK);
        if (s)
                s->received = true;
        if (s && sock_insert(s) < 0)
                sock_release(s);
}

/* @fd, a listening TCP socket of @domain that this library does not manage (one
 * received from another process, or inherited over exec): make it an SMC listener
 * (@nonblock: the program's flag) and, if @reg, register it with smcd as listen()
 * does. Returns listen_register()'s result (-ECANCELED when not asked to; the socket
 * is then a plain TCP listener), with *@ret the socket, or NULL (out of memory: @fd
 * stays unmanaged). */
static int listener_take(int fd, int domain, bool nonblock, bool reg, bool join, struct smc_sock **ret) {
        struct smc_sock *s = sock_alloc(fd, domain, SOCK_LISTEN_TCP, nonblock);
        int r;

        *ret = NULL;
        if (!s)
                return -ENOMEM;
        if (sock_insert(s) < 0) {
                sock_release(s);
                return -ENOMEM;
        }
        pthread_mutex_lock(&s->lock);
        r = reg ? listen_register(s, SOMAXCONN, join) : -ECANCELED;
        pthread_mutex_unlock(&s->lock);
        *ret = s;
        return r;
}

/* @fd, a TCP socket that arrived from another process: a listening one (an SMC
 * listener passes as its TCP socket) becomes an SMC listener here too: it joins the
 * sender's listener if the sender deposited its accept channel (listen_deposit()),
 * else it is registered with smcd as listen() does (smcd gives the newest
 * registration of a socket the new connections: smcd(8)). Its O_NONBLOCK is the
 * shared file's, which the sender's library set to its program's (fd_passing()).
 * Not registered (no smcd): a plain TCP listener. Others: unconnected_received(). */
static void tcp_received(int fd) {
        struct smc_sock *s;
        int v = 0, dom = 0, r;
        socklen_t l = sizeof(v), dl = sizeof(dom);

        if (sys_getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &l) < 0 ||
            sys_getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &dl) < 0 || (dom != AF_INET && dom != AF_INET6) ||
            atomic_load_explicit(&tcp_only_reason, memory_order_relaxed))
                return;
        if (!v) {
                unconnected_received(fd, dom);
                return;
        }
        v = sys_fcntl(fd, F_GETFL, 0); /* the sender's program's (fd_passing()) */
        r = listener_take(fd, dom, v >= 0 && (v & O_NONBLOCK), true, true, &s);
        if (!s)
                return;
        /* (the program does not know @fd yet: nobody else touches @s) */
        if (r == 0) {
                /* fd is our epoll descriptor now, with the flag the shared file had:
                 * the sender's program's (fd_passing() set it), as a TCP listener's.
                 * Shared with the sender: accepts poll T first, whatever the
                 * sender's program makes of T's flag later */
                pthread_mutex_lock(&s->lock);
                s->listen_fork_gen = ~0u;
                pthread_mutex_unlock(&s->lock);
        } else {
                int fl = sys_fcntl(fd, F_GETFL, 0);

                /* a plain TCP listener: the shared file's flag is the truth */
                atomic_store(&s->nonblock, fl >= 0 && (fl & O_NONBLOCK));
        }
        smc_debug("fd %d: a TCP listener received from another process: %s%s", fd,
                  r < 0 ? "stays one: " : "an SMC listener", r < 0 ? strerror(-r) : "");
}

/* Is @fd an AF_UNIX socket of @type (SOCK_STREAM, SOCK_SEQPACKET) that this library
 * does not manage? Its SO_PEERCRED in @cr (a socketpair's ends carry their
 * creator's; pid > 0). */
static bool unmanaged_unix(int fd, int type, struct ucred *cr) {
        int v, t;
        socklen_t vl = sizeof(v), tl = sizeof(t), cl = sizeof(*cr);

        /* (pid 0: made outside our pid namespace) */
        return fd >= 0 && sys_getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &v, &vl) == 0 && v == AF_UNIX &&
               sys_getsockopt(fd, SOL_SOCKET, SO_TYPE, &t, &tl) == 0 && t == type && !sock_lookup(fd) &&
               sys_getsockopt(fd, SOL_SOCKET, SO_PEERCRED, cr, &cl) == 0 && cr->pid >= 0;
}

/* Could the unix socket pair whose creator's credentials are @cr (SO_PEERCRED of
 * either end: a socketpair's ends carry their creator's) be an smcd's: the running
 * one, or an earlier one (a process of the running smcd's uid that is gone, and that
 * the instance file lists as an smcd of this runtime directory)? Never one this
 * process made (exec keeps the pid), nor one of another process: an entry that names
 * the program's own sockets (a hand-set SMCRUN_INHERIT) leaves them alone. With no
 * smcd to ask: false if @need_smcd, else any creator, outside our pid namespace too
 * (a connection's X is then reset rather than handed over bare; the caller checks the
 * doorbell's send buffer first). A creator outside our pid namespace (pid 0) is
 * smcd's exactly when smcd runs there too (smcd then tells by the inode what the
 * caller asks about). */
static bool made_by_smcd(const struct ucred *cr, bool need_smcd) {
        uid_t duid;
        pid_t daemon;

        if (cr->pid < 0 || cr->pid == getpid())
                return false;
        if (smc_ctl_client_daemon(SMC_ADOPT_TIMEOUT_MS, &daemon, &duid) < 0)
                /* no smcd to ask: the instance file cannot tell either (removed with
                 * the directory, or pids of smcd's own namespace: helper 128) */
                return !need_smcd;
        if (cr->pid == daemon)
                /* (both 0: made outside our pid namespace, where smcd runs; it checks
                 * what we then ask) */
                return true;
        if (cr->pid == 0 || daemon <= 0)
                /* made outside our pid namespace, smcd inside; or smcd outside, the
                 * maker inside (an earlier smcd's pids in the instance file are
                 * those of smcd's namespace, not ours) */
                return false;
        return cr->uid == duid && smc_ctl_client_was_daemon(cr->pid) && kill(cr->pid, 0) < 0 && errno == ESRCH;
}

/* Could @fd be the X of a doorbell pair (a received or inherited SMC-D connection)?
 * An unmanaged unix stream socket made by another process, with the kernel's
 * smallest send buffer (smcd asks for 1 byte). Its SO_PEERCRED in @cr, for the
 * caller's check of the creator. */
static bool doorbell_x_like(int fd, struct ucred *cr) {
        int sb = 0;
        socklen_t sl = sizeof(sb);

        return unmanaged_unix(fd, SOCK_STREAM, cr) && cr->pid != getpid() &&
               sys_getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sb, &sl) == 0 && sb <= DOORBELL_SNDBUF_MAX;
}

/* @fd arrived from another process: if it is the X of an SMC-D connection (a stream
 * socket pair end that smcd made: its SO_PEERCRED is smcd's), ask smcd for the
 * connection (ADOPT_FD) and make @fd that SMC socket, shared, as after fork(). One
 * getsockopt(2) for any other descriptor. */
static void fd_received(int fd, size_t off, void *arg) {
        union smc_ctl_msg m, reply;
        int fds[SMC_CTL_MAX_FDS], n, r;
        struct ucred cr;
        struct smc_inherit_entry e;
        bool maybe;

        (void) off;
        (void) arg;
        if (fd < 0 || env_disable)
                return;
        if (fd_is_stream(fd, AF_INET)) {
                tcp_received(fd);
                return;
        }
        /* any other unix stream socket is the program's own, and costs no round trip
         * to smcd (a process that never used SMC would connect to it). One made by
         * smcd (or, smcd out of reach, by any other process: it stopped, no
         * descriptor left to reach it; nothing else can tell) is asked about, and
         * reset rather than handed over bare if it cannot be taken over. Its maker
         * outside our pid namespace (pid 0), as smcd is when we run in a
         * container's: smcd tells by its inode, and a descriptor it says it does
         * not know is left as it is (helper 126: an SMC-D connection passed between
         * two processes in a pid namespace arrived bare, its doorbell bytes read as
         * data; helper 128: so did one passed while smcd was stopped) */
        if (!doorbell_x_like(fd, &cr) || !made_by_smcd(&cr, false))
                return;
        maybe = cr.pid == 0;
        /* a doorbell end made by smcd: apps hold only X ends, which are useless bare */
        if (atomic_load_explicit(&tcp_only_reason, memory_order_relaxed)) {
                r = -ECANCELED; /* (io_uring) this image must not have SMC sockets */
                goto reset;
        }
        smc_ctl_init(&m, SMC_CTL_ADOPT_FD, 0);
        n = smc_ctl_client_call_timeout(&m, &fd, 1, &reply, fds, SMC_ADOPT_TIMEOUT_MS);
        if (n < 0) {
                r = n; /* (no answer: unsure, as with smcd out of reach) */
                goto reset;
        }
        if (reply.hdr.type != SMC_CTL_ADOPT_REPLY || n != 3) {
                for (int i = 0; i < n; i++)
                        sys_close(fds[i]);
                if (maybe)
                        return; /* (not smcd's, or not to be told) */
                r = reply.hdr.type == SMC_CTL_ERROR ? reply.error.error : -EPROTO;
                goto reset;
        }
        e = (struct smc_inherit_entry) {
                .x = fd,
                .t = -1, /* the sender's hidden TCP socket (its port) stays with it */
                .conn_id = reply.conn.conn_id,
                .rx_id = reply.conn.rx.id,
                .rx_size = reply.conn.rx.size,
                .tx_id = reply.conn.tx.id,
                .tx_size = reply.conn.tx.size,
                .flags = SMC_INHERIT_F_SHARED | (reply.conn.local.family == AF_INET6 ? SMC_INHERIT_F_INET6 : 0),
        };
        r = adopt_install(&e, &reply, fds);
        if (r == 0) {
                smc_debug("fd %d: SMC-D connection %016llx received from another process", fd,
                          (unsigned long long) e.conn_id);
                return;
        }
reset:
        /* never hand the app the bare socket pair end (its bytes would be doorbells):
         * a reset connection instead, as for an exec that cannot adopt */
        smc_debug("fd %d: an SMC-D connection received from another process cannot be taken over: %s: it is reset",
                  fd, strerror(-r));
        if (stub_in_place(fd, AF_INET) < 0) {
                /* no descriptor left for the stub: end of stream instead, never a
                 * doorbell byte (shut first: the peer's later bells then fail) */
                uint8_t buf[64];

                (void) sys_shutdown(fd, SHUT_RDWR);
                while (sys_recvfrom(fd, buf, sizeof(buf), MSG_DONTWAIT, NULL, NULL) > 0)
                        ;
        }
}

void smc_fds_received(const struct msghdr *msg) {
        int saved = errno;

        env_load(); /* (SMCPROTO_DISABLE: a process whose first socket is a received one) */
        scm_rights_each(msg, fd_received, NULL);
        errno = saved;
}

/* The accept channel @chan of an inherited listener entry, if it is one: an unnamed
 * unix SOCK_SEQPACKET socket pair end (smcd's listener.c) whose peer is the smcd this
 * process talks to (a connection to smcd.sock has a named peer: it is no channel). */
static bool inherit_chan_ok(int chan) {
        struct ucred cr;
        struct sockaddr_un peer;
        socklen_t pl = sizeof(peer);
        pid_t daemon;

        if (!unmanaged_unix(chan, SOCK_SEQPACKET, &cr) ||
            sys_getpeername(chan, (struct sockaddr *) &peer, &pl) < 0 || pl > sizeof(sa_family_t))
                return false;
        return smc_ctl_client_daemon(SMC_ADOPT_TIMEOUT_MS, &daemon, NULL) == 0 && daemon > 0 && cr.pid == daemon;
}

/* Are @chan and @dchan the two ends of one socketpair an smcd made (an earlier one
 * than the running smcd: inherit_chan_ok() failed)? Both unmanaged AF_UNIX
 * SOCK_SEQPACKET sockets with the same creator, an smcd (made_by_smcd()), @dchan
 * nonblocking and @chan not (as every smcd leaves them). The restarted smcd checks
 * the pairing itself before it takes them (F_REVIVE). */
static bool inherit_dchan_ok(int chan, int dchan) {
        struct ucred a, b;
        int cf, df;

        if (!unmanaged_unix(chan, SOCK_SEQPACKET, &a) || !unmanaged_unix(dchan, SOCK_SEQPACKET, &b) ||
            a.pid != b.pid || a.uid != b.uid)
                return false;
        cf = sys_fcntl(chan, F_GETFL, 0);
        df = sys_fcntl(dchan, F_GETFL, 0);
        return cf >= 0 && df >= 0 && !(cf & O_NONBLOCK) && (df & O_NONBLOCK) && made_by_smcd(&a, true);
}

/* A listener entry (smc_inherit_parse_listener()): FD is the listening TCP socket of
 * an SMC listener of the old image. With its accept channel: accept from it, as a
 * forked holder of the listener does (smcd is not asked; this image's close only lets
 * go of its copies). With the copy of smcd's end too (DCHAN), a channel of an earlier
 * smcd is kept as well: the first accept gives it to the running smcd
 * (listen_revive()), as the old image would have. Without, or if the channel is not
 * one of smcd's: make FD an SMC listener again as listen() does (registered with
 * smcd, else a plain TCP listener; the backlog given to smcd is SOMAXCONN, the kernel
 * keeps its own). Options recorded for accepted connections are not carried over. */
static void exec_inherit_listener(const char *p, size_t len) {
        struct smc_inherit_listener le;
        struct smc_sock *s;
        int v, fl, r;
        socklen_t l = sizeof(v);
        bool reg = !env_disable && !adopt_give_up && !atomic_load_explicit(&tcp_only_reason, memory_order_relaxed);
        bool ours, current;
        int domain;

        if (smc_inherit_parse_listener(p, len, &le) < 0) {
                smc_debug("exec: " SMC_INHERIT_ENV " entry \"%.*s\" is malformed: ignored", (int) (len < 200 ? len : 200), p);
                return;
        }
        if (!fd_is_stream(le.fd, AF_INET) || sock_lookup(le.fd) ||
            sys_getsockopt(le.fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &l) < 0 || !v ||
            (fl = sys_fcntl(le.fd, F_GETFL, 0)) < 0) {
                smc_debug("exec: " SMC_INHERIT_ENV " entry for fd %d: not an unmanaged TCP listener: ignored", le.fd);
                return;
        }
        /* (the socket's own family, not the entry's flag) */
        l = sizeof(domain);
        if (sys_getsockopt(le.fd, SOL_SOCKET, SO_DOMAIN, &domain, &l) < 0 || (domain != AF_INET && domain != AF_INET6))
                return;
        current = le.chan >= 0 && !adopt_give_up && inherit_chan_ok(le.chan);
        if (le.dchan >= 0 && (le.chan < 0 || adopt_give_up || !inherit_dchan_ok(le.chan, le.dchan)))
                le.dchan = -1; /* (not closed: a number we cannot tell is ours, as CHAN's) */
        ours = current || le.dchan >= 0;
        if (le.listener_id != 0 && ours)
                /* the old image's program's flag: T's file flag is shared with the
                 * other holders, whose libraries set it (siblings starting at once);
                 * not from an entry whose channel is none of smcd's */
                fl = (le.flags & SMC_INHERIT_LF_NONBLOCK) ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK);
        if (ours && !reg) {
                /* this image takes no SMC (SMCPROTO_DISABLE, io_uring): a channel it never
                 * reads would hold connections until smcd gives up on it */
                sys_close(le.chan);
                if (le.dchan >= 0)
                        sys_close(le.dchan);
                ours = false;
        }
        if (ours) {
                s = sock_alloc(le.fd, domain, SOCK_LISTEN_TCP, fl & O_NONBLOCK);
                if (!s || sock_insert(s) < 0) {
                        if (s)
                                sock_release(s);
                        sys_close(le.chan);
                        if (le.dchan >= 0)
                                sys_close(le.dchan);
                        return;
                }
                pthread_mutex_lock(&s->lock);
                (void) set_cloexec(le.chan, true);
                if (le.dchan >= 0)
                        (void) set_cloexec(le.dchan, true);
                r = listen_install(s, le.chan);
                if (r == 0) {
                        s->listener_id = le.listener_id;
                        s->dchan = le.dchan;
                        lint_mark(le.dchan);
                        /* (0: an earlier smcd's channel, given to the running one at
                         * the first accept) */
                        s->listen_instance = current ? smc_ctl_client_instance() : 0;
                        s->listen_smcr = (le.flags & SMC_INHERIT_LF_SMCR) != 0;
                        s->listen_pid = getpid();
                        s->listen_backlog = SOMAXCONN;
                        /* one holder among others: a close only lets go of the copies */
                        s->listen_fork_gen = ~0u;
                } else {
                        sys_close(le.chan); /* a plain TCP listener */
                        if (le.dchan >= 0)
                                sys_close(le.dchan);
                }
                pthread_mutex_unlock(&s->lock);
                smc_debug("exec: listener fd %d: %s%s", le.fd,
                          r == 0 ? "accepts from its inherited channel" : "plain TCP listener: ",
                          r == 0 ? "" : strerror(-r));
                return;
        }
        r = listener_take(le.fd, domain, fl & O_NONBLOCK, reg, false, &s);
        if (!s)
                return;
        smc_debug("exec: listener fd %d: %s%s", le.fd, r < 0 ? "plain TCP listener: " : "registered with smcd again",
                  r < 0 ? strerror(-r) : "");
}

static void exec_inherit_one(const char *p, size_t len) {
        struct smc_inherit_entry e;
        int r;

        atomic_store(&inherited_any, true); /* (REREG_DONE: never sent by this image) */
        if (len > 0 && p[0] == 'L') {
                exec_inherit_listener(p, len);
                return;
        }
        if (smc_inherit_parse_entry(p, len, &e) < 0) {
                smc_debug("exec: " SMC_INHERIT_ENV " entry \"%.*s\" is malformed: ignored", (int) (len < 200 ? len : 200), p);
                return;
        }
        /* X must be the socketpair end the entry says (made by an smcd, with a
         * doorbell's send buffer: smcd asks for the kernel's smallest); anything else
         * is left alone */
        {
                struct ucred cr;

                if (!doorbell_x_like(e.x, &cr) || !made_by_smcd(&cr, false)) {
                        smc_debug("exec: " SMC_INHERIT_ENV " entry for fd %d: not an unmanaged AF_UNIX stream socket "
                                  "of smcd's: ignored",
                                  e.x);
                        return;
                }
        }
        r = exec_adopt(&e);
        if (r == 0) {
                smc_debug("exec: fd %d: SMC-D connection %016llx adopted", e.x, (unsigned long long) e.conn_id);
                return;
        }
        /* never hand the app the bare socketpair end: a reset connection instead */
        smc_debug("exec: fd %d: adopting SMC-D connection %016llx failed: %s: it is reset", e.x,
                  (unsigned long long) e.conn_id, strerror(-r));
        if (exec_is_hidden_tcp(e.t, 0))
                sys_close(e.t); /* the connection's hidden TCP socket: nobody needs it */
        if (stub_in_place(e.x, (e.flags & SMC_INHERIT_F_INET6) ? AF_INET6 : AF_INET) < 0)
                (void) sys_shutdown(e.x, SHUT_RDWR); /* at least EOF, never doorbell bytes */
}

void smc_exec_adopt_inherited(void) {
        const char *v = getenv(SMC_INHERIT_ENV);
        char *copy;
        size_t start = 0, len, count = 0;

        if (!v)
                return;
        env_load();
        copy = strdup(v);
        (void) unsetenv(SMC_INHERIT_ENV); /* for this image only: a later exec makes its own */
        if (!copy)
                return;
        len = strlen(copy);
        for (size_t i = 0; i <= len; i++) {
                if (i < len && copy[i] != ',')
                        continue;
                if (++count > SMC_INHERIT_MAX_ENTRIES) {
                        smc_debug("exec: more than %u " SMC_INHERIT_ENV " entries: the rest ignored",
                                  SMC_INHERIT_MAX_ENTRIES);
                        break;
                }
                exec_inherit_one(copy + start, i - start);
                start = i + 1;
        }
        free(copy);
}

/* ------------------------------------------------------------------------- */
/* A copy of the process made past the C library's fork() (socket-internal.h) */

void smc_fork_emulate(int phase) {
        switch (phase) {
        case SMC_FORK_PREPARE:
                smc_ctl_client_fork(SMC_FORK_PREPARE);
                break;
        case SMC_FORK_PARENT:
                atfork_count();
                smc_ctl_client_fork(SMC_FORK_PARENT);
                break;
        default:
                smc_ctl_client_fork(SMC_FORK_CHILD);
                atfork_count();
                pending_atfork_child();
                exec_atfork_child();
                break;
        }
}

/* ---- epoll watch ----------------------------------------------------------------------
 *
 * Issue 5 (redis): a request/response loop over epoll costs each side one doorbell
 * sendto(2) per message and one drain recvfrom(2) per wakeup, which is most of what a
 * busy client (redis-benchmark) spends besides epoll_ctl. An event loop that comes back
 * to epoll_wait() anyway can look at its connections' rings itself: while a connection is
 * *watched* (dmb.h SMC_DMB_SPIN_WATCHED in its reader state) its writer publishes
 * without a doorbell byte, and this process's epoll_wait() reports the data it finds in
 * the ring as the kernel would have reported the byte (level-triggered: EPOLLIN while
 * data is unread; edge-triggered: once per arrival, i.e. when the ring's producer
 * cursor moved since the member's last report, as TCP's every segment is an edge).
 *
 * The library records, per epoll set (by descriptor number), the SMC-D connections the
 * program added to it (epoll_ctl after the kernel's success: events and data). A
 * connection is watched only while every rule below holds, so that nobody relies on
 * X's kernel readiness meanwhile:
 *  - its one recorded registration has EPOLLIN and no EPOLLONESHOT, and is not in a
 *    set that is waited on by other means (added to another epoll set, polled,
 *    duplicated or sent to another process: "nested");
 *  - it is not shared: no child forked since it (and its set) was set up still lives
 *    (see "re-arming after a fork"), no dup, not received or sent over SCM_RIGHTS,
 *    not SMC-R (smcd rings SMC-R readers itself);
 *  - one thread at a time waits in the set (a second concurrent waiter ends watching
 *    in that set for good).
 * The process's own waits that may sleep on X end the watch first and look at the ring
 * after that (smc_ring_watch(false): poll, ppoll, select, pselect, a receive that may
 * block, a set's own sleep in epoll_wait); fork ends it in the parent before the child
 * exists, exec before the new image runs. Data that arrived while watched and is
 * still unread after the watch ended has no byte in X: the recorded sets keep
 * reporting it (they look at the rings of all their connections that had data), an
 * edge-triggered or one-shot registration made or changed later gets one event for it
 * (as the kernel's ADD / MOD of a ready descriptor), and
 * poll/select look at the rings. What stays blind to it: a kernel-only wait outside the
 * library (an epoll set nested into another before that data was read, raw system
 * calls): documented in smcrun(1).
 *
 * epoll_wait(E) for a set with connections: mark the active ones watched, ask the
 * kernel without waiting, add the rings' readiness (merge); if nothing and the call may
 * sleep: end the watch (SLEEPING), look at the rings again, then sleep in the kernel
 * (writers ring now), and mark them watched again after waking. A connection whose ring
 * was found empty EW_IDLE_MAX times in a row stops being looked at (and watched) until
 * the kernel reports it again, so an idle connection costs nothing per call.
 */
#define EW_IDLE_MAX 256
/* (written under the home set's lock, read under another's: relaxed atomics; a value
 * is trusted only once checked under the home set's lock) */
#define EW_HOME(s) __atomic_load_n(&(s)->ew_home, __ATOMIC_RELAXED)
#define EW_HOME_IDX(s) __atomic_load_n(&(s)->ew_home_idx, __ATOMIC_RELAXED)

struct ew_member {
        struct smc_sock *s;
        int fd;
        uint32_t events;
        uint64_t data;
        bool elig;   /* with EPOLLIN, not one-shot */
        bool et;     /* edge-triggered: reported only for data newer than seen_prod */
        bool seen_ok; /* seen_prod is set (not: the data present is reported once, as
                       * the kernel's ADD / MOD reports a ready descriptor) */
        bool active; /* looked at (and watched) by the set's epoll_wait */
        bool edge;   /* not elig: one event owed for data that arrived while watched */
        bool marked; /* this set marked it watched (others may have ended that since:
                      * then it is only not watched, which is safe) */
        uint16_t idle;
        uint32_t seen_gen; /* == the set's gen: the kernel reported it in this merge */
        uint64_t seen_prod; /* et: the rx producer cursor when last reported */
};

struct ew_set {
        pthread_mutex_t lock;
        int epfd;
        bool nested; /* waited on by other means: never watch again */
        unsigned n, cap;
        struct ew_member *m;
        /* data -> member + 1, open addressing (hcap a power of two >= 2n), 0 = empty;
         * rebuilt when members come or go (hdirty) */
        uint32_t *hash;
        unsigned hcap;
        bool hdirty;
        _Atomic int waiters;
        unsigned refs;  /* descriptor numbers recorded for it (dup: aliases), ew_global */
        /* made by this process's epoll_create* (not found in use later: inherited
         * over exec, made with a raw system call), at fork_gen @born_gen: a set made
         * before the last fork may be waited on by the other process too, also for
         * connections added after the fork, so it watches nothing */
        bool born;
        unsigned born_gen;
        unsigned rr;    /* where the next merge starts looking (fairness, as the kernel
                         * rotates its ready list) */
        unsigned n_hot; /* members active or owing an edge */
        bool ring_turn; /* the last merge left ring data out (maxevents): the next one
                         * looks at the rings before it asks the kernel */
        uint32_t gen;   /* ew_merge() calls (seen_gen) */
        /* sets added to this one edge-triggered (never removed: sets are never freed,
         * and a stale entry costs a doorbell at most); more than EW_INNER_ET_MAX:
         * inner_et_all, every nested set is armed (the first EW_ARM_ALL_MAX) */
#define EW_INNER_ET_MAX 8
        _Atomic(struct ew_set *) inner_et[EW_INNER_ET_MAX];
        _Atomic bool inner_et_all;
        struct ew_set *next; /* ew_all */
};
#define EW_ARM_ALL_MAX 64
#define EW_NEST_DEPTH 4 /* levels of sets in sets armed (the kernel allows 4, EP_MAX_NESTS) */

/* members that are active or owe an edge (set->n_hot counts them) */
static void ew_hot(struct ew_set *set, struct ew_member *m, bool active, bool edge) {
        int was = m->active || m->edge, now = active || edge;

        m->active = active;
        m->edge = edge;
        set->n_hot += (unsigned) (now - was);
}

static _Atomic(_Atomic(struct ew_set *) *) ew_chunks[FD_TOP];
static pthread_mutex_t ew_global = PTHREAD_MUTEX_INITIALIZER; /* ew_chunks, ew_all */
static struct ew_set *ew_all;
static _Atomic unsigned ew_nsets;

static struct ew_set *ew_get(int epfd) {
        _Atomic(struct ew_set *) *c;

        if (epfd < 0 || (unsigned) epfd >= FD_MAX || !atomic_load_explicit(&ew_nsets, memory_order_relaxed))
                return NULL;
        c = atomic_load_explicit(&ew_chunks[(unsigned) epfd >> FD_CHUNK_BITS], memory_order_acquire);
        return c ? atomic_load_explicit(&c[(unsigned) epfd & (FD_CHUNK - 1)], memory_order_acquire) : NULL;
}

/* under ew_global */
static _Atomic(struct ew_set *) *ew_slot(int epfd, bool create) {
        _Atomic(struct ew_set *) *c = atomic_load(&ew_chunks[(unsigned) epfd >> FD_CHUNK_BITS]);

        if (!c && create) {
                c = calloc(FD_CHUNK, sizeof(*c));
                if (c)
                        atomic_store_explicit(&ew_chunks[(unsigned) epfd >> FD_CHUNK_BITS], c, memory_order_release);
        }
        return c ? &c[(unsigned) epfd & (FD_CHUNK - 1)] : NULL;
}

/* ---- re-arming after a fork ----
 * A set made, or a connection set up, before a fork may be waited on by the child too,
 * so neither is watched while a child forked after it lives: ew_floor is the newest
 * fork generation a live child shares (fork_gen counts forks; a child forked at
 * generation g holds what was made below g). Once every child forked since is gone
 * (waitid(2) WNOWAIT: exited or reaped, never reaping it ourselves) and none handed
 * anything on (a fork, exec or spawn of its own, a descriptor sent over SCM_RIGHTS:
 * it marks a word shared with its parent, ew_taint), nothing else can hold them and
 * they are watched again: redis-server after its BGSAVE child exits. A child whose pid
 * we never learnt (a fork not through fork(3)'s symbol), or more than EW_KIDS_MAX at
 * once, or a marked word, keeps what it shares unwatched for good (ew_floor_perm), as
 * does the parent of a forked process (the parent may live on). */
#define EW_KIDS_MAX 32
#define EW_KIDS_CHECK_NS 20000000ull /* how often a waiting set looks for gone children */
struct ew_kid {
        pid_t pid; /* 0: not known yet (fork() has not returned) or never */
        unsigned gen;
};
static struct ew_kid ew_kids[EW_KIDS_MAX]; /* under ew_global */
static _Atomic unsigned ew_nkids;
static unsigned ew_floor_perm;             /* under ew_global */
static _Atomic unsigned ew_floor;
static _Atomic uint32_t *ew_taint;         /* our children mark it (MAP_SHARED) */
static _Atomic uint32_t *ew_parent_taint;  /* in a forked child: the parent's word (set
                                            * in the child's atfork handler only) */
static _Atomic uint64_t ew_kids_next;      /* monotonic ns of the next look */
static __thread int ew_my_kid = -1;        /* the slot of this thread's fork in progress */

static void ew_floor_update(void) { /* under ew_global */
        unsigned f = ew_floor_perm, n = atomic_load(&ew_nkids);

        for (unsigned i = 0; i < n; i++)
                if (ew_kids[i].gen > f)
                        f = ew_kids[i].gen;
        atomic_store_explicit(&ew_floor, f, memory_order_release);
}

void smc_ewatch_handed_on(void) {
        _Atomic uint32_t *w = ew_parent_taint;

        if (w && !atomic_load_explicit(w, memory_order_relaxed))
                atomic_store(w, 1);
}

/* fork(3) returned @pid in the parent */
void smc_ewatch_child(pid_t pid) {
        if (ew_my_kid < 0)
                return;
        pthread_mutex_lock(&ew_global);
        if ((unsigned) ew_my_kid < atomic_load(&ew_nkids) && ew_kids[ew_my_kid].pid == 0)
                ew_kids[ew_my_kid].pid = pid;
        pthread_mutex_unlock(&ew_global);
        ew_my_kid = -1;
}

/* (parent, after the fork count) the child shares everything made so far */
static void ew_atfork_kid(void) {
        unsigned n, g = atomic_load(&fork_gen);

        pthread_mutex_lock(&ew_global);
        n = atomic_load(&ew_nkids);
        ew_my_kid = -1;
        if (!ew_taint || n == EW_KIDS_MAX) {
                ew_floor_perm = g; /* (no shared word, or too many: for good) */
        } else {
                ew_kids[n] = (struct ew_kid) { .pid = 0, .gen = g };
                ew_my_kid = (int) n;
                atomic_store(&ew_nkids, n + 1);
        }
        ew_floor_update();
        pthread_mutex_unlock(&ew_global);
}

/* (child, after the fork count) the parent shares everything made before, for good */
static void ew_atfork_kid_child(void) {
        ew_my_kid = -1;
        ew_parent_taint = ew_taint; /* (NULL: the parent keeps all for good) */
        ew_taint = NULL;
        atomic_store(&ew_nkids, 0);
        ew_floor_perm = atomic_load(&fork_gen);
        ew_floor_update();
}

/* Forget the children that are gone; lower the floor if it can. */
static void ew_kids_check(void) {
        struct timespec now;
        uint64_t t;

        if (!atomic_load_explicit(&ew_nkids, memory_order_relaxed))
                return;
        clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
        t = (uint64_t) now.tv_sec * 1000000000ull + (uint64_t) now.tv_nsec;
        if (t < atomic_load_explicit(&ew_kids_next, memory_order_relaxed))
                return;
        atomic_store_explicit(&ew_kids_next, t + EW_KIDS_CHECK_NS, memory_order_relaxed);
        pthread_mutex_lock(&ew_global);
        for (unsigned i = 0; i < atomic_load(&ew_nkids);) {
                siginfo_t si = { 0 };
                bool gone;
                int r;

                if (ew_kids[i].pid <= 0) {
                        i++;
                        continue;
                }
                r = (int) smc_syscall(SYS_waitid, P_PID, ew_kids[i].pid, &si, WEXITED | WNOHANG | WNOWAIT, NULL);
                gone = (r == 0 && si.si_pid == ew_kids[i].pid) || (r < 0 && errno == ECHILD);
                if (!gone) {
                        i++;
                        continue;
                }
                ew_kids[i] = ew_kids[atomic_load(&ew_nkids) - 1];
                atomic_fetch_sub(&ew_nkids, 1);
        }
        /* a child handed something on (maybe one still running): what every child so
         * far shares stays unwatched */
        if (ew_taint && atomic_exchange(ew_taint, 0))
                ew_floor_perm = atomic_load(&fork_gen);
        ew_floor_update();
        pthread_mutex_unlock(&ew_global);
}

static bool ew_watchable(struct ew_set *set, struct smc_sock *s) {
        unsigned fg = atomic_load_explicit(&fork_gen, memory_order_relaxed);
        unsigned fl = atomic_load_explicit(&ew_floor, memory_order_acquire);

        /* (one registration: a connection in two sets would wake only the thread
         * that watches it, where TCP wakes both; made or set up at a fork generation
         * no live child shares, see "re-arming after a fork") */
        return !set->nested && set->born && set->born_gen >= fl && set->born_gen <= fg &&
               sock_state(s) == SOCK_SMCD && !s->smcr &&
               atomic_load_explicit(&s->ew_regs, memory_order_relaxed) == 1 && !s->ew_foreign &&
               s->conn_fork_gen >= fl && s->conn_fork_gen <= fg &&
               atomic_load_explicit(&s->ew_other, memory_order_relaxed) == 0;
}

/* End the connection's watch (data it got meanwhile stays in the ring without a byte
 * in X: the recorded sets keep looking at it, see above). */
static void ew_unwatch(struct smc_sock *s) {
        smc_ring_watch(&s->ep, false);
}

/* Whether the registration keeps its connection from being watched: it waits for data
 * and the kernel alone answers it (one-shot, or a nested set). One
 * without EPOLLIN waits for no data (EPOLLOUT comes from the plug, hang-ups from Y:
 * both are X's own). */
static bool ew_blocks(const struct ew_set *set, const struct ew_member *m) {
        return (m->events & EPOLLIN) && (!m->elig || set->nested);
}

static void ew_member_drop(struct ew_set *set, unsigned i) {
        struct ew_member *m = &set->m[i];

        atomic_fetch_sub(&m->s->ew_regs, 1);
        if (m->et)
                atomic_fetch_sub(&m->s->ep.edge_regs, 1);
        if (ew_blocks(set, m))
                atomic_fetch_sub(&m->s->ew_other, 1);
        if (EW_HOME(m->s) == set && EW_HOME_IDX(m->s) == i)
                __atomic_store_n(&m->s->ew_home, NULL, __ATOMIC_RELAXED);
        ew_hot(set, m, false, false);
        set->m[i] = set->m[--set->n];
        if (i < set->n && EW_HOME(set->m[i].s) == set && EW_HOME_IDX(set->m[i].s) == set->n)
                __atomic_store_n(&set->m[i].s->ew_home_idx, i, __ATOMIC_RELAXED); /* (moved into the hole) */
        set->hdirty = true;
}

/* The set is waited on by other means from now on (under its lock): no connection in
 * it is watched again. */
static void ew_set_nest(struct ew_set *set) {
        if (set->nested)
                return;
        for (unsigned i = 0; i < set->n; i++) {
                struct ew_member *m = &set->m[i];
                bool before = ew_blocks(set, m);

                set->nested = true;
                if (!before && ew_blocks(set, m))
                        atomic_fetch_add(&m->s->ew_other, 1);
                set->nested = false;
                m->marked = false;
                ew_unwatch(m->s);
        }
        set->nested = true;
}

/* Sets are never freed (a thread may be entering epoll_wait on a set another thread
 * closes): a forgotten set is emptied and kept for the next new set (ew_free). */
static struct ew_set *ew_free;

/* Forget the set recorded under @fd (closed, or another file now has the number). */
static void ew_forget(int fd) {
        _Atomic(struct ew_set *) *slot;
        struct ew_set *set = NULL, **pp;

        if (!ew_get(fd))
                return;
        pthread_mutex_lock(&ew_global);
        slot = ew_slot(fd, false);
        if (slot && (set = atomic_load(slot))) {
                atomic_store(slot, NULL);
                if (set->refs > 1) { /* another number still names it (dup) */
                        set->refs--;
                        pthread_mutex_unlock(&ew_global);
                        return;
                }
                for (pp = &ew_all; *pp; pp = &(*pp)->next)
                        if (*pp == set) {
                                *pp = set->next;
                                break;
                        }
                atomic_fetch_sub(&ew_nsets, 1);
                pthread_mutex_lock(&set->lock);
                ew_set_nest(set); /* (a waiter still inside watches nothing more) */
                while (set->n)
                        ew_member_drop(set, set->n - 1);
                set->epfd = -1;
                pthread_mutex_unlock(&set->lock);
                set->next = ew_free;
                ew_free = set;
        }
        pthread_mutex_unlock(&ew_global);
}

static struct ew_set *ew_get_or_make(int epfd) {
        _Atomic(struct ew_set *) *slot;
        struct ew_set *set;

        if (epfd < 0 || (unsigned) epfd >= FD_MAX)
                return NULL;
        pthread_mutex_lock(&ew_global);
        slot = ew_slot(epfd, true);
        set = slot ? atomic_load(slot) : NULL;
        if (slot && !set && ew_free) {
                set = ew_free;
                ew_free = set->next;
                pthread_mutex_lock(&set->lock);
                set->born = false;
                set->nested = false;
                set->n_hot = 0;
                for (unsigned k = 0; k < EW_INNER_ET_MAX; k++)
                        atomic_store(&set->inner_et[k], NULL);
                atomic_store(&set->inner_et_all, false);
                set->hdirty = true;
                set->epfd = epfd;
                pthread_mutex_unlock(&set->lock);
        } else if (slot && !set && (set = calloc(1, sizeof(*set)))) {
                pthread_mutex_init(&set->lock, NULL);
                set->epfd = epfd;
        } else
                slot = NULL;
        if (slot && set) {
                set->refs = 1;
                set->next = ew_all;
                ew_all = set;
                atomic_fetch_add(&ew_nsets, 1);
                atomic_store_explicit(slot, set, memory_order_release);
        }
        pthread_mutex_unlock(&ew_global);
        return set;
}

static int ew_find(struct ew_set *set, int fd) {
        struct smc_sock *s = sock_lookup(fd);

        unsigned h = s ? EW_HOME_IDX(s) : 0;

        if (s && EW_HOME(s) == set && h < set->n && set->m[h].fd == fd)
                return (int) h;
        for (unsigned i = 0; i < set->n; i++)
                if (set->m[i].fd == fd)
                        return (int) i;
        return -1;
}

static uint32_t ew_hash_of(uint64_t d, unsigned hcap) {
        d ^= d >> 33;
        d *= 0xff51afd7ed558ccdULL;
        d ^= d >> 33;
        return (uint32_t) d & (hcap - 1);
}

static bool ew_hash_build(struct ew_set *set) {
        unsigned want = 16;

        while (want < set->n * 2)
                want *= 2;
        if (want != set->hcap) {
                uint32_t *h = realloc(set->hash, want * sizeof(*h));

                if (!h)
                        return false;
                set->hash = h;
                set->hcap = want;
        }
        memset(set->hash, 0, set->hcap * sizeof(*set->hash));
        for (unsigned i = 0; i < set->n; i++) {
                uint32_t k = ew_hash_of(set->m[i].data, set->hcap);

                while (set->hash[k])
                        k = (k + 1) & (set->hcap - 1);
                set->hash[k] = i + 1;
        }
        set->hdirty = false;
        return true;
}

/* The member the kernel's event with @data is for, -1 if none (several members with
 * the same data: the first not yet seen in this merge) */
static int ew_lookup(struct ew_set *set, uint64_t data) {
        if (set->n <= 8 || !set->hash) {
                for (unsigned i = 0; i < set->n; i++)
                        if (set->m[i].data == data && set->m[i].seen_gen != set->gen)
                                return (int) i;
                return -1;
        }
        for (uint32_t k = ew_hash_of(data, set->hcap); set->hash[k]; k = (k + 1) & (set->hcap - 1)) {
                unsigned i = set->hash[k] - 1;

                if (set->m[i].data == data && set->m[i].seen_gen != set->gen)
                        return (int) i;
        }
        return -1;
}

/* Set @inner was added to set @epfd edge-triggered. The kernel wakes the outer set at
 * every wakeup of a connection in the inner one, and TCP wakes at every arrival; a
 * connection's X is woken only by a doorbell byte, which its writer sends only while
 * the bell is not set: once the outer set reported, the inner connections' bells are
 * taken (ew_inner_et_arm()), so that the next arrival is an edge there too (helper
 * 130: an outer set left asleep by a second arrival before the first was read). */
static void ew_nest_et(int epfd, struct ew_set *inner) {
        struct ew_set *outer = ew_get_or_make(epfd);

        if (!outer || outer == inner)
                return;
        for (unsigned k = 0; k < EW_INNER_ET_MAX; k++) {
                struct ew_set *cur = NULL;

                if (atomic_compare_exchange_strong(&outer->inner_et[k], &cur, inner) || cur == inner)
                        return;
        }
        atomic_store(&outer->inner_et_all, true); /* (more than EW_INNER_ET_MAX: helper 131) */
}

static void ew_inner_arm_one(struct ew_set *inner, unsigned depth);

/* The bells of @set's nested sets, @depth levels down at most. */
static void ew_inner_arm_sets(struct ew_set *set, unsigned depth) {
        if (depth == 0)
                return;
        if (atomic_load_explicit(&set->inner_et_all, memory_order_relaxed)) {
                /* every nested set (ew_global: the list; sets are never freed) */
                struct ew_set *v[EW_ARM_ALL_MAX];
                unsigned n = 0;

                pthread_mutex_lock(&ew_global);
                for (struct ew_set *x = ew_all; x && n < EW_ARM_ALL_MAX; x = x->next)
                        if (x != set && __atomic_load_n(&x->nested, __ATOMIC_RELAXED))
                                v[n++] = x;
                pthread_mutex_unlock(&ew_global);
                for (unsigned i = 0; i < n; i++)
                        ew_inner_arm_one(v[i], 1);
                return;
        }
        for (unsigned k = 0; k < EW_INNER_ET_MAX; k++) {
                struct ew_set *inner = atomic_load_explicit(&set->inner_et[k], memory_order_relaxed);

                if (!inner)
                        return;
                ew_inner_arm_one(inner, depth);
        }
}

static void ew_inner_arm_one(struct ew_set *inner, unsigned depth) {
        pthread_mutex_lock(&inner->lock);
        for (unsigned i = 0; i < inner->n; i++)
                if (inner->m[i].events & EPOLLIN)
                        smc_ring_take_bell(&inner->m[i].s->ep);
        pthread_mutex_unlock(&inner->lock);
        ew_inner_arm_sets(inner, depth - 1); /* (a set in a set in a set: helper 131) */
}

/* After a wait in @set: take the bells of the connections of the sets nested in it
 * edge-triggered (ew_nest_et()), and of theirs. */
static void ew_inner_et_arm(struct ew_set *set) {
        ew_inner_arm_sets(set, EW_NEST_DEPTH);
}

void smc_ewatch_ctl(int epfd, int op, int fd, const struct epoll_event *ev) {
        struct smc_sock *s;
        struct ew_set *set, *inner;
        bool elig, before, after;
        int i;

        /* an epoll set added to another: waited on by other means */
        if (op == EPOLL_CTL_ADD && (inner = ew_get(fd))) {
                pthread_mutex_lock(&inner->lock);
                ew_set_nest(inner);
                pthread_mutex_unlock(&inner->lock);
        }
        if ((op == EPOLL_CTL_ADD || op == EPOLL_CTL_MOD) && ev && (ev->events & EPOLLET) && (inner = ew_get(fd)))
                ew_nest_et(epfd, inner);
        s = sock_lookup(fd);
        if (!s || sock_state(s) != SOCK_SMCD || s->fd != fd) {
                set = op == EPOLL_CTL_ADD ? NULL : ew_get(epfd);
                if (set) { /* (a number that was a connection when it was added) */
                        pthread_mutex_lock(&set->lock);
                        if ((i = ew_find(set, fd)) >= 0)
                                ew_member_drop(set, (unsigned) i);
                        pthread_mutex_unlock(&set->lock);
                }
                return;
        }
        set = ew_get(epfd); /* (ew_get_or_make takes the global lock) */
        if (!set && op != EPOLL_CTL_DEL)
                set = ew_get_or_make(epfd);
        if (!set)
                return;
        elig = ev && (ev->events & EPOLLIN) && !(ev->events & EPOLLONESHOT);
        pthread_mutex_lock(&set->lock);
        i = ew_find(set, fd);
        if (i >= 0 && set->m[i].s != s) { /* a stale member under a reused number */
                ew_member_drop(set, (unsigned) i);
                i = -1;
        }
        if (op == EPOLL_CTL_DEL) {
                if (i >= 0)
                        ew_member_drop(set, (unsigned) i);
                ew_unwatch(s); /* (no set looks at it here any more) */
        } else if (ev) {
                struct ew_member *m;

                if (i < 0) {
                        if (set->n == set->cap) {
                                unsigned cap = set->cap ? set->cap * 2 : 16;
                                struct ew_member *nm = realloc(set->m, cap * sizeof(*nm));

                                if (!nm) {
                                        /* not recorded: the connection is never watched
                                         * again (counted as blocking, never dropped) */
                                        atomic_fetch_add(&s->ew_other, 1);
                                        if (ev->events & EPOLLET)
                                                atomic_fetch_add(&s->ep.edge_regs, 1);
                                        ew_unwatch(s);
                                        pthread_mutex_unlock(&set->lock);
                                        return;
                                }
                                set->m = nm;
                                set->cap = cap;
                        }
                        i = (int) set->n++;
                        /* (events 0: blocks nothing until set below) */
                        set->m[i] = (struct ew_member) { .s = s, .fd = fd, .data = ev->data.u64 };
                        if (atomic_fetch_add(&s->ew_regs, 1) == 0 || !EW_HOME(s)) {
                                __atomic_store_n(&s->ew_home_idx, (unsigned) i, __ATOMIC_RELAXED);
                                __atomic_store_n(&s->ew_home, set, __ATOMIC_RELAXED);
                        }
                        set->hdirty = true;
                }
                m = &set->m[i];
                before = ew_blocks(set, m);
                if (m->data != ev->data.u64)
                        set->hdirty = true;
                m->events = ev->events;
                m->data = ev->data.u64;
                m->elig = elig;
                if (m->et != ((ev->events & EPOLLET) != 0)) {
                        m->et = !m->et;
                        if (m->et)
                                atomic_fetch_add(&s->ep.edge_regs, 1);
                        else
                                atomic_fetch_sub(&s->ep.edge_regs, 1);
                }
                m->seen_ok = false;
                ew_hot(set, m, elig, false);
                m->idle = 0;
                after = ew_blocks(set, m);
                if (after && !before)
                        atomic_fetch_add(&s->ew_other, 1);
                else if (before && !after)
                        atomic_fetch_sub(&s->ew_other, 1);
                if (!ew_watchable(set, s) || !elig) {
                        /* data that came while watched: X has no byte for it, so an
                         * edge-triggered or one-shot registration gets one event here */
                        ew_unwatch(s);
                        m->marked = false;
                        if (after && smc_ring_ready_quick(sock_ep(s), POLLIN))
                                ew_hot(set, m, m->active, true);
                } else if (!m->marked && atomic_load(&set->waiters) == 0) {
                        /* watched from now on, not only from the next epoll_wait (a
                         * reply may come first). Not while a thread waits in the
                         * set: it may sleep in the kernel already; one that enters
                         * later ends the marks it finds before it sleeps. */
                        smc_ring_watch(&s->ep, true);
                        m->marked = true;
                }
        }
        pthread_mutex_unlock(&set->lock);
}

/* Another descriptor of @s's connection in this process (a dup(2) of it: the same
 * open file, so the kernel's epoll registrations of @s live on while it is open),
 * not closing; NULL if none. Socket objects are recycled, never freed: reading a
 * stale entry is safe, and its state and number are checked. */
static struct smc_sock *sock_dup_alive(const struct smc_sock *s) {
        struct smc_sock *o;

        if (!s->dup_shared)
                return NULL;
        for (unsigned pos = 0; (o = table_next(&pos, FD_MAX));)
                if (o != s && o->dup_shared && sock_state(o) == SOCK_SMCD && o->conn_id == s->conn_id &&
                    o->fd == (int) pos - 1 && !atomic_load_explicit(&o->closing, memory_order_acquire))
                        return o;
        return NULL;
}

/* @s's members go to @o, a dup of it (under ew_global and the set's lock): closing
 * one descriptor of a file leaves the kernel's registration made through it, which
 * goes on reporting the file's events under its data until the file's last close
 * (helper 132: EPOLLERR after the peer's reset was missing once the registered number
 * was closed while a dup lived). Its number is gone: no epoll_ctl reaches it (-1). */
static void ew_member_rehome(struct ew_set *set, unsigned i, struct smc_sock *o) {
        struct ew_member *m = &set->m[i];
        struct smc_sock *s = m->s;
        bool blocks = ew_blocks(set, m);

        if (blocks)
                atomic_fetch_sub(&s->ew_other, 1);
        atomic_fetch_sub(&s->ew_regs, 1);
        if (m->et)
                atomic_fetch_sub(&s->ep.edge_regs, 1);
        if (EW_HOME(s) == set && EW_HOME_IDX(s) == i)
                __atomic_store_n(&s->ew_home, NULL, __ATOMIC_RELAXED);
        m->s = o;
        m->fd = -1;
        m->marked = false;
        atomic_fetch_add(&o->ew_regs, 1); /* (two registrations now: not watched) */
        if (m->et)
                atomic_fetch_add(&o->ep.edge_regs, 1);
        if (blocks)
                atomic_fetch_add(&o->ew_other, 1);
}

static void ew_sock_gone(struct smc_sock *s) {
        struct smc_sock *o = sock_dup_alive(s);
        struct ew_set *home;

        pthread_mutex_lock(&ew_global);
        if (o) {
                for (struct ew_set *set = ew_all; set && atomic_load(&s->ew_regs) > 0; set = set->next) {
                        pthread_mutex_lock(&set->lock);
                        for (unsigned i = 0; i < set->n; i++)
                                if (set->m[i].s == s)
                                        ew_member_rehome(set, i, o);
                        pthread_mutex_unlock(&set->lock);
                }
                pthread_mutex_unlock(&ew_global);
                ew_unwatch(s);
                ew_unwatch(o);
                return;
        }
        /* the usual case: one registration, at home (no search) */
        if ((home = EW_HOME(s)) && atomic_load(&s->ew_regs) == 1) {
                pthread_mutex_lock(&home->lock);
                unsigned h = EW_HOME_IDX(s);

                if (EW_HOME(s) == home && h < home->n && home->m[h].s == s)
                        ew_member_drop(home, h);
                pthread_mutex_unlock(&home->lock);
        }
        for (struct ew_set *set = ew_all; set && atomic_load(&s->ew_regs) > 0; set = set->next) {
                pthread_mutex_lock(&set->lock);
                for (unsigned i = set->n; i-- > 0;)
                        if (set->m[i].s == s)
                                ew_member_drop(set, i);
                pthread_mutex_unlock(&set->lock);
        }
        pthread_mutex_unlock(&ew_global);
        ew_unwatch(s);
}

static bool ew_any_active(const struct ew_set *set) {
        return set->n_hot > 0;
}

/* Mark the set's active, watchable connections watched (@on) or end their watch. */
static void ew_mark(struct ew_set *set, bool on) {
        for (unsigned i = 0; i < set->n; i++) {
                struct ew_member *m = &set->m[i];

                if (!m->active)
                        continue;
                /* (a receive's busy-poll states replace the mark: made again then,
                 * else its writer hands over or rings after every receive) */
                if (m->marked == on && (!on || smc_ring_is_watched(&m->s->ep)))
                        continue;
                if (on && !ew_watchable(set, m->s))
                        continue;
                smc_ring_watch(&m->s->ep, on);
                m->marked = on;
        }
}

/* Whether the member's ring has something to report: data (or an end) for a
 * level-triggered registration; for an edge-triggered one data that came after the last
 * report (the cursor, loaded first, goes to @prod), as TCP's every arrival is an edge */
static bool ew_fresh(const struct ew_member *m, uint64_t *prod) {
        if (m->et) {
                *prod = smc_ring_rx_prod(&m->s->ep);
                if (m->seen_ok && *prod == m->seen_prod)
                        return false;
        }
        return smc_ring_ready_quick(sock_ep(m->s), POLLIN);
}

/* After a reset (the peer's abort, or the RST that answered the send taken after the
 * peer's close) and until a call returned the error (SO_ERROR, a receive or a send,
 * through any copy of the socket): what tcp_poll() reports for TCP's socket in CLOSE
 * with sk_err set, EPOLLERR and EPOLLHUP, and the asked-for EPOLLIN, EPOLLRDHUP and
 * EPOLLOUT (every call fails at once). X is a unix socket with no error state, and
 * its hang-up may come after its EOF (smcd shuts it in two steps): added to every
 * event reported for the member meanwhile. 0 otherwise. */
static uint32_t ew_reset_events(const struct ew_member *m) {
        if (!smc_ring_error_pending(&m->s->ep))
                return 0;
        return EPOLLERR | EPOLLHUP | (m->events & (EPOLLIN | EPOLLRDHUP | EPOLLOUT));
}

/* A merge's start: a new generation (seen_gen), the hash current. */
static void ew_merge_begin(struct ew_set *set) {
        if (++set->gen == 0) { /* (wrapped: no member may look seen) */
                for (unsigned i = 0; i < set->n; i++)
                        set->m[i].seen_gen = 0;
                set->gen = 1;
        }
}

/* The kernel's events evs[@from, @n) (the entries before @from are this merge's
 * reports already: the rings', or an earlier kernel call's): mark their members seen
 * and add the rings' readiness to them; an event for a member (or data) reported
 * already in this merge is folded into that entry. Returns the new count. */
static int ew_kernel_pass(struct ew_set *set, struct epoll_event *evs, int from, int n) {
        int j, w = from;

        if (n > from && set->n > 8 && set->hdirty && !ew_hash_build(set)) {
                free(set->hash);
                set->hash = NULL;
                set->hcap = 0;
        }
        for (int i = from; i < n; i++) {
                struct ew_member *m;

                evs[w] = evs[i];
                if ((j = ew_lookup(set, evs[w].data.u64)) < 0) {
                        int k;

                        for (k = 0; k < from && evs[k].data.u64 != evs[w].data.u64; k++)
                                ;
                        if (k < from) { /* (reported by the rings already) */
                                evs[k].events |= evs[w].events;
                                continue;
                        }
                        w++;
                        continue;
                }
                m = &set->m[j];
                m->seen_gen = set->gen;
                evs[w].events |= ew_reset_events(m);
                /* X writable while less than half of the ring is free: a whole send
                 * owed the plug (smc_ring_plug_owed), made now, so not writable yet
                 * (the drain of that plug makes the edge when there is room). Left
                 * as it is when another thread's send holds the lock, or when the
                 * room came meanwhile (no plug then, so no edge to come): a stray
                 * EPOLLOUT costs an EAGAIN, a lost edge would cost the wakeup. */
                if ((evs[w].events & EPOLLOUT) &&
                    atomic_load_explicit(&m->s->ep.plug_owed, memory_order_relaxed) &&
                    !smc_ring_ready_quick(sock_ep(m->s), POLLOUT) && smc_ring_plug_owed(sock_ep(m->s), false) &&
                    !smc_ring_ready_quick(sock_ep(m->s), POLLOUT))
                        evs[w].events &= ~(uint32_t) (EPOLLOUT | EPOLLWRNORM);
                ew_hot(set, m, m->elig, false);
                if (m->elig) {
                        m->idle = 0;
                        if (m->et) { /* (what it reports now is seen: the cursor first) */
                                m->seen_prod = smc_ring_rx_prod(&m->s->ep);
                                m->seen_ok = true;
                                smc_ring_take_bell(&m->s->ep); /* (the next arrival rings) */
                        }
                        if (!(evs[w].events & EPOLLIN) && smc_ring_ready_quick(sock_ep(m->s), POLLIN))
                                evs[w].events |= EPOLLIN;
                }
                if (evs[w].events == 0) {
                        /* only that EPOLLOUT: no event; a one-shot registration the
                         * kernel disarmed for it is armed again (X is plugged now) */
                        if (m->events & EPOLLONESHOT) {
                                struct epoll_event on = { .events = m->events, .data.u64 = m->data };

                                (void) smc_syscall(SYS_epoll_ctl, set->epfd, EPOLL_CTL_MOD, m->fd, &on);
                        }
                        continue;
                }
                w++;
        }
        return w;
}

/* Append the rings' readiness of the members the kernel did not report in this merge
 * (round-robin from rr) to the @n events, up to @max; @kernel_first: the kernel was
 * asked first, so ring data left out gives the rings the next turn (not after a turn
 * of their own, or the kernel's descriptors would wait for good). */
static int ew_ring_pass(struct ew_set *set, struct epoll_event *evs, int n, int max, bool kernel_first) {
        unsigned next_rr;

        next_rr = set->rr;
        for (unsigned k = 0; k < set->n && set->n_hot > 0; k++) {
                unsigned i = (set->rr + k) % set->n;
                struct ew_member *m = &set->m[i];
                uint64_t prod = 0;
                uint32_t e;

                if (m->seen_gen == set->gen || (!m->active && !m->edge))
                        continue;
                /* (the rings' own turn: a level-triggered member with a byte in X is
                 * the kernel's to report, in its order) */
                if (!kernel_first && !m->et && !m->edge && smc_ring_x_rung(&m->s->ep))
                        continue;
                if (!ew_fresh(m, &prod)) {
                        ew_hot(set, m, m->active, false);
                        if (m->elig && ++m->idle >= EW_IDLE_MAX) {
                                /* stop looking at it: its writers ring again (then
                                 * the kernel reports it, which makes it active) */
                                smc_ring_watch(&m->s->ep, false);
                                m->marked = false;
                                if (!ew_fresh(m, &prod)) {
                                        ew_hot(set, m, false, false);
                                        continue;
                                }
                        } else
                                continue;
                }
                if (n >= max) {
                        /* (the next call: level-triggered, or the edge is still
                         * owed; the rings go first then, so that descriptors the
                         * kernel reports every time cannot crowd them out) */
                        if (!kernel_first)
                                break;
                        if (m->et || !smc_ring_x_rung(&m->s->ep)) {
                                set->ring_turn = true; /* (only for data the kernel
                                                        * will not report itself) */
                                break;
                        }
                        continue;
                }
                m->idle = 0;
                e = EPOLLIN;
                if ((m->events & EPOLLOUT) && smc_ring_ready_quick(sock_ep(m->s), POLLOUT))
                        e |= EPOLLOUT;
                evs[n].events = (e & m->events) | ew_reset_events(m);
                evs[n].data.u64 = m->data;
                n++;
                m->seen_gen = set->gen; /* (a kernel event for it later in this merge
                                         * is folded into this one) */
                next_rr = i + 1;
                if (m->et) {
                        m->seen_prod = prod;
                        m->seen_ok = true;
                        smc_ring_take_bell(&m->s->ep);
                }
                if (m->edge) {
                        ew_hot(set, m, m->active, false);
                        if (m->events & EPOLLONESHOT) {
                                /* as the kernel disarms a one-shot registration that fired */
                                struct epoll_event off = { .events = 0, .data.u64 = m->data };

                                (void) smc_syscall(SYS_epoll_ctl, set->epfd, EPOLL_CTL_MOD, m->fd, &off);
                        }
                }
        }
        set->rr = set->n ? next_rr % set->n : 0;
        return n;
}

/* Add the rings' readiness to the kernel's @n events (at most @max). */
static int ew_merge(struct ew_set *set, struct epoll_event *evs, int n, int max) {
        ew_merge_begin(set);
        n = ew_kernel_pass(set, evs, 0, n);
        return ew_ring_pass(set, evs, n, max, true);
}

/* The time left of an epoll wait that the kernel ended for events the merge took away
 * (ew_kernel_pass: EPOLLOUT of a connection whose ring has no room; its X is plugged
 * now): the kernel would not have ended the call, so it waits again, until @deadline
 * (monotonic ns, set at the first call; 0 before). False when the time is up (the
 * call then returns 0, as the kernel's at its timeout); an infinite wait never is. */
static bool ew_wait_again(uint64_t *deadline, int *timeout_ms, const struct timespec **ts, struct timespec *left) {
        uint64_t now = now_ns();

        if (*ts) {
                if (*deadline == 0)
                        *deadline = now + (uint64_t) (*ts)->tv_sec * 1000000000u + (uint64_t) (*ts)->tv_nsec;
                if (now >= *deadline)
                        return false;
                ts_from_ns(left, (int64_t) (*deadline - now));
                *ts = left;
        } else if (*timeout_ms >= 0) {
                if (*deadline == 0)
                        *deadline = now + (uint64_t) *timeout_ms * 1000000u;
                if (now >= *deadline)
                        return false;
                *timeout_ms = (int) ((*deadline - now + 999999u) / 1000000u);
        }
        return true;
}

int smc_ewatch_wait(int epfd, struct epoll_event *evs, int max, int timeout_ms, const struct timespec *ts,
                    const sigset_t *mask, int (*kwait)(int, struct epoll_event *, int, int, const struct timespec *,
                                                      const sigset_t *)) {
        static const struct timespec zero = { 0, 0 };
        struct timespec left;
        struct ew_set *set;
        bool may_sleep = ts ? (ts->tv_sec != 0 || ts->tv_nsec != 0) : timeout_ms != 0;
        uint64_t deadline = 0;
        int n, got;

        if (max <= 0 || smc_uptr_bad(evs))
                return kwait(epfd, evs, max, timeout_ms, ts, mask);
        ew_kids_check();
        /* every waiter is counted, also in a set with no connection yet: a connection
         * added while a thread sleeps in the kernel must not be watched (ctl) */
        if (!(set = ew_get(epfd)) && !(set = ew_get_or_make(epfd)))
                return kwait(epfd, evs, max, timeout_ms, ts, mask);
        if (atomic_fetch_add(&set->waiters, 1) > 0) {
                /* another thread waits in this set (perhaps asleep in the kernel): never
                 * watch here again */
                pthread_mutex_lock(&set->lock);
                ew_set_nest(set);
                pthread_mutex_unlock(&set->lock);
        }
        pthread_mutex_lock(&set->lock);
        if (ew_get(epfd) != set) {
                /* (closed and reused meanwhile by another thread: the kernel answers) */
                pthread_mutex_unlock(&set->lock);
                n = kwait(epfd, evs, max, timeout_ms, ts, mask);
                goto out;
        }
        if (!ew_any_active(set)) {
                /* nothing to look at (only edge-triggered registrations, or idle
                 * ones): the kernel's call alone; the members it reports become
                 * active */
                pthread_mutex_unlock(&set->lock);
                do {
                        got = n = kwait(epfd, evs, max, timeout_ms, ts, mask);
                        if (n > 0) {
                                pthread_mutex_lock(&set->lock);
                                n = ew_merge(set, evs, n, max);
                                pthread_mutex_unlock(&set->lock);
                        }
                } while (n == 0 && got > 0 && may_sleep && ew_wait_again(&deadline, &timeout_ms, &ts, &left));
                goto out;
        }
        ew_mark(set, true);
        if (set->ring_turn) {
                /* the last merge left ring data out (maxevents): the rings first */
                int r;

                set->ring_turn = false;
                ew_merge_begin(set);
                r = ew_ring_pass(set, evs, 0, max, false);
                pthread_mutex_unlock(&set->lock);
                if (r >= max) {
                        n = r; /* (the kernel's events wait in its ready list) */
                        goto out;
                }
                n = r;
                /* (an event folded into an earlier entry left room: ask again, three
                 * calls at most; level-triggered events come back rotated) */
                for (int tries = 0; tries < 3 && n < max; tries++) {
                        int k = kwait(epfd, evs + n, max - n, 0, &zero, mask), w;

                        if (k <= 0) {
                                if (k < 0 && n == 0) {
                                        n = -1;
                                        goto out;
                                }
                                break;
                        }
                        pthread_mutex_lock(&set->lock);
                        w = ew_kernel_pass(set, evs, n, n + k);
                        pthread_mutex_unlock(&set->lock);
                        if (w == n + k || k < max - n) {
                                n = w;
                                break;
                        }
                        n = w;
                }
                pthread_mutex_lock(&set->lock);
        } else {
                pthread_mutex_unlock(&set->lock);
                n = kwait(epfd, evs, max, 0, &zero, mask);
                if (n < 0)
                        goto out;
                pthread_mutex_lock(&set->lock);
                n = ew_merge(set, evs, n, max);
        }
        if (n > 0 || !may_sleep) {
                pthread_mutex_unlock(&set->lock);
                goto out;
        }
        for (;;) {
                /* about to sleep in the kernel: writers must ring from now on; anything
                 * published before that is in the rings */
                ew_mark(set, false);
                n = ew_merge(set, evs, 0, max);
                pthread_mutex_unlock(&set->lock);
                if (n > 0)
                        goto out;
                got = n = kwait(epfd, evs, max, timeout_ms, ts, mask);
                if (n < 0)
                        goto out;
                pthread_mutex_lock(&set->lock);
                ew_mark(set, true);
                n = ew_merge(set, evs, n, max);
                if (n > 0 || got == 0 || !ew_wait_again(&deadline, &timeout_ms, &ts, &left))
                        break;
        }
        pthread_mutex_unlock(&set->lock);
out:
        if (n > 0 && (atomic_load_explicit(&set->inner_et[0], memory_order_relaxed) ||
                      atomic_load_explicit(&set->inner_et_all, memory_order_relaxed)))
                ew_inner_et_arm(set);
        atomic_fetch_sub(&set->waiters, 1);
        return n;
}

void smc_ewatch_fd_event(int fd, int what) {
        struct ew_set *set;

        switch (what) {
        case SMC_EWATCH_CREATED:
                env_load(); /* (registers the fork handlers: fork_gen must count from now) */
                ew_forget(fd);
                if ((set = ew_get_or_make(fd))) {
                        pthread_mutex_lock(&set->lock);
                        set->born = true;
                        set->born_gen = atomic_load(&fork_gen);
                        pthread_mutex_unlock(&set->lock);
                }
                break;
        case SMC_EWATCH_CLOSED:
                ew_forget(fd);
                break;
        case SMC_EWATCH_ELSEWHERE:
                if ((set = ew_get(fd))) {
                        pthread_mutex_lock(&set->lock);
                        ew_set_nest(set);
                        pthread_mutex_unlock(&set->lock);
                }
                break;
        }
}

void smc_ewatch_fd_dup(int oldfd, int newfd) {
        _Atomic(struct ew_set *) *slot;
        struct ew_set *set;

        ew_forget(newfd); /* (the number names the copy now) */
        if (!(set = ew_get(oldfd)))
                return;
        pthread_mutex_lock(&set->lock);
        ew_set_nest(set); /* (the copy may be waited on by other means too) */
        pthread_mutex_unlock(&set->lock);
        /* the copy is the same kernel set: its waits must look at the rings too, for
         * data that came while watched */
        if (newfd < 0 || (unsigned) newfd >= FD_MAX)
                return;
        pthread_mutex_lock(&ew_global);
        if (ew_get(oldfd) == set && (slot = ew_slot(newfd, true)) && !atomic_load(slot)) {
                set->refs++;
                atomic_store_explicit(slot, set, memory_order_release);
        }
        pthread_mutex_unlock(&ew_global);
}

bool smc_ewatch_is_set(int fd) {
        return ew_get(fd) != NULL;
}

/* End the watch of every member of @set (under its lock). */
static void ew_set_unwatch_all(struct ew_set *set) {
        for (unsigned i = 0; i < set->n; i++) {
                smc_ring_watch(&set->m[i].s->ep, false);
                set->m[i].marked = false;
        }
}

/* fork (before the child exists) and exec: the connections are shared or handed on,
 * so no watch may outlive this call */
void smc_ewatch_stop_all(void) {
        if (!atomic_load_explicit(&ew_nsets, memory_order_relaxed))
                return;
        pthread_mutex_lock(&ew_global);
        for (struct ew_set *set = ew_all; set; set = set->next) {
                pthread_mutex_lock(&set->lock);
                ew_set_unwatch_all(set);
                pthread_mutex_unlock(&set->lock);
        }
        pthread_mutex_unlock(&ew_global);
}

/* fork: no watch may outlive it (the child shares the connections); the sets' locks
 * are held across it so that the child's copies are consistent */
static void ew_atfork_prepare(void) {
        smc_ewatch_handed_on(); /* (a forked child forks: its child may outlive it) */
        if (!ew_taint) {
                void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

                if (p != MAP_FAILED)
                        ew_taint = p;
        }
        pthread_mutex_lock(&ew_global);
        for (struct ew_set *set = ew_all; set; set = set->next) {
                pthread_mutex_lock(&set->lock);
                ew_set_unwatch_all(set);
        }
        for (struct ew_set *set = ew_free; set; set = set->next)
                pthread_mutex_lock(&set->lock);
}

static void ew_atfork_parent(void) {
        for (struct ew_set *set = ew_all; set; set = set->next)
                pthread_mutex_unlock(&set->lock);
        for (struct ew_set *set = ew_free; set; set = set->next)
                pthread_mutex_unlock(&set->lock);
        pthread_mutex_unlock(&ew_global);
}

static void ew_atfork_child(void) {
        for (struct ew_set *set = ew_free; set; set = set->next) {
                atomic_store(&set->waiters, 0);
                pthread_mutex_unlock(&set->lock);
        }
        for (struct ew_set *set = ew_all; set; set = set->next) {
                atomic_store(&set->waiters, 0); /* (the parent's threads are not here) */
                /* the parent may wait in the same kernel set, and watch connections
                 * of its own in it that this copy of the table does not know */
                ew_set_nest(set);
                pthread_mutex_unlock(&set->lock);
        }
        pthread_mutex_unlock(&ew_global);
}

/* @fd is an epoll set waited on by poll/select/ppoll: never watched again; true when a
 * connection in it has data in its ring (which X may not show) */
static bool ew_set_poll(int fd) {
        struct ew_set *set = ew_get(fd);
        bool ready = false;

        if (!set)
                return false;
        pthread_mutex_lock(&set->lock);
        ew_set_nest(set);
        for (unsigned i = 0; i < set->n && !ready; i++)
                ready = (set->m[i].events & EPOLLIN) && smc_ring_ready_quick(sock_ep(set->m[i].s), POLLIN);
        pthread_mutex_unlock(&set->lock);
        return ready;
}

/* smc_poll_rings_first() hands the wait to the kernel: the plugs owed first */
static void rings_first_plug_owed(const struct pollfd *fds, nfds_t n, bool sets_only) {
        if (sets_only)
                return; /* (smc_poll() waits for the connections) */
        for (nfds_t i = 0; i < n; i++) {
                struct smc_sock *s;

                if ((fds[i].events & POLLOUT) && (s = sock_lookup(fds[i].fd)) && sock_state(s) == SOCK_SMCD)
                        (void) smc_ring_plug_owed(sock_ep(s), false);
        }
}

int smc_poll_rings_first(struct pollfd *fds, nfds_t n, bool sticky, bool sets_only) {
        bool ready = false;
        int r;

        for (nfds_t i = 0; i < n; i++) {
                struct smc_sock *s = sock_lookup(fds[i].fd);

                if (s && sock_state(s) == SOCK_SMCD) {
                        if (sets_only)
                                continue;
                        if (sticky && (fds[i].events & POLLIN))
                                smc_ring_no_watch(&s->ep); /* (the kernel's wait is not ours) */
                        if (smc_ring_poll(sock_ep(s)) & (fds[i].events | POLL_ALWAYS))
                                ready = true;
                } else if ((fds[i].events & POLLIN) && ew_set_poll(fds[i].fd))
                        ready = true;
        }
        if (!ready) {
                rings_first_plug_owed(fds, n, sets_only);
                return -2;
        }
        r = sys_poll(fds, n, 0);
        if (r < 0)
                return r;
        r = 0;
        for (nfds_t i = 0; i < n; i++) {
                struct smc_sock *s = sock_lookup(fds[i].fd);

                if (s && sock_state(s) == SOCK_SMCD)
                        fds[i].revents = (short) (smc_ring_poll(sock_ep(s)) & (fds[i].events | POLL_ALWAYS));
                else if ((fds[i].events & POLLIN) && !(fds[i].revents & POLLNVAL) && ew_set_poll(fds[i].fd))
                        fds[i].revents |= POLLIN;
                if (fds[i].revents)
                        r++;
        }
        /* nothing is ready any more (a copy in another process filled the ring again
         * meanwhile): the caller's wait, never 0 for a wait that has no end */
        if (r == 0)
                rings_first_plug_owed(fds, n, sets_only);
        return r > 0 ? r : -2;
}

bool smc_ewatch_any(void) {
        return atomic_load_explicit(&ew_nsets, memory_order_relaxed) != 0;
}
