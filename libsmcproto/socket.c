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
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "ctl-client.h"
#include "ctl-proto.h"
#include "debug.h"
#include "dmb.h"
#include "ring.h"
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

static void atfork_count(void) {
        atomic_fetch_add(&fork_gen, 1);
}
static bool env_disable;
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
        n = snprintf(line, sizeof(line), "libsmcproto[%d.%ld] %llu.%03ld: ", (int) getpid(), (long) syscall(SYS_gettid),
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

static void env_init(void) {
        const char *e;
        uint32_t v;

        pthread_atfork(NULL, atfork_count, atfork_count);
        e = getenv("SMC_DEBUG");
        smcproto_debug_on = e && e[0] && strcmp(e, "0") != 0;
        e = getenv("SMCPROTO_DISABLE");
        env_disable = e && e[0] && strcmp(e, "0") != 0;
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
};

struct smc_sock {
        pthread_mutex_t lock; /* state changes: connect, listen, close, options */
        int fd;
        int family;
        _Atomic int state;   /* enum sock_state; read lock-free by data calls */
        _Atomic bool nonblock;
        bool connect_report; /* nonblocking SMC-D connect said EINPROGRESS: next connect returns 0 */
        bool nodelay;
        bool rcvtimeo_set;       /* the app set SO_RCVTIMEO: X must carry it too */
        int sndbuf, rcvbuf;      /* set by the app (bytes), 0 = not set */
        uint32_t fallback_reason;
        int hidden;  /* T, moved away (LISTEN_SMC, SMCD connect side), else -1 */
        int optsock; /* lazily made TCP socket holding options (SMCD accept side), else -1 */

        /* LISTEN_SMC */
        int chan; /* accept channel C, -1 once it hit EOF */
        uint64_t listener_id;
        bool listen_smcr; /* smcd marked the listener for SMC-R: SMCR per accepted TCP */
        bool smcr;        /* the connection is SMC-R (state SMCD, smcd on the data path) */
        pid_t listen_pid;          /* the process that registered it */
        unsigned listen_fork_gen;  /* fork_gen then */
        _Atomic unsigned accept_turn;

        /* SMCD */
        uint64_t conn_id;
        struct sockaddr_storage local, peer;
        socklen_t local_len, peer_len;
        struct smc_ring_ep ep;

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
        s->chan = -1;
        return s;
}

static void sock_release(struct smc_sock *s) {
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

static void sock_teardown(struct smc_sock *s);

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
        if (old && old != s) {
                pthread_mutex_lock(&old->lock);
                sock_teardown(old);
                pthread_mutex_unlock(&old->lock);
                sock_release(old);
        }
        return 0;
}

/* Remove @s from the table, if it is still the entry at its fd. */
static void sock_remove(struct smc_sock *s) {
        struct fd_chunk *c;
        struct smc_sock *expect = s;
        unsigned fd = (unsigned) s->fd;

        if (s->fd < 0 || fd >= FD_MAX)
                return;
        c = atomic_load_explicit(&fd_table[fd >> FD_CHUNK_BITS], memory_order_acquire);
        if (!c)
                return;
        pthread_mutex_lock(&table_lock);
        atomic_compare_exchange_strong(&c->s[fd & (FD_CHUNK - 1)], &expect, NULL);
        pthread_mutex_unlock(&table_lock);
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

static int set_cloexec(int fd, bool on) {
        return neg_errno(sys_fcntl(fd, F_SETFD, on ? FD_CLOEXEC : 0));
}

static void raise_sigpipe(void) {
        (void) syscall(SYS_tgkill, getpid(), (pid_t) syscall(SYS_gettid), SIGPIPE);
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
        if (!len)
                return -EFAULT;
        if (addr)
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
 * here) or find the cached mapping. Returns 0 and the DMB base, or -errno. */
static int buf_get(const struct smc_ctl_buf *d, int memfd, void **ret_base) {
        struct buf_map *b;
        int r = 0;

        pthread_mutex_lock(&buf_lock);
        b = buf_find_locked(d->id);
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
                                *b = (struct buf_map) { .id = d->id, .base = p, .size = d->size };
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

/* Map both buffers of @c; @fds as received (X, Y, [rx memfd], [tx memfd]). Closes
 * the memfds in any case (but not X and Y). Both buffers are always processed, so
 * the cache matches what smcd believes we hold. */
static int conn_map(const struct smc_ctl_conn *c, int *fds, int nfds, void **rx, void **tx) {
        int i = 2, rxfd = -1, txfd = -1, r1, r2;

        if (c->rx.flags & SMC_CTL_BUF_FD)
                rxfd = i < nfds ? fds[i++] : -1;
        if (c->tx.flags & SMC_CTL_BUF_FD)
                txfd = i < nfds ? fds[i++] : -1;
        r1 = buf_get(&c->rx, rxfd, rx);
        r2 = buf_get(&c->tx, txfd, tx);
        return r1 < 0 ? r1 : r2;
}

static void ctl_close_conn(uint64_t conn_id, bool abort) {
        union smc_ctl_msg m;

        smc_ctl_init(&m, SMC_CTL_CLOSE, 0);
        m.close.conn_id = conn_id;
        m.close.flags = abort ? SMC_CTL_CLOSE_ABORT : 0;
        (void) smc_ctl_client_send(&m);
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
                (void) smc_ctl_client_notify(&m, 2);
        }
        errno = saved;
}

/* ------------------------------------------------------------------------- */
/* Teardown */

/* Drain a listener's accept channel: every queued connection is refused (its
 * peer sees ECONNRESET). */
static void chan_drain(int chan) {
        for (;;) {
                union smc_ctl_msg m;
                int fds[SMC_CTL_MAX_FDS];
                void *rx, *tx;
                int n = smc_ctl_recv(chan, &m, fds, SMC_CTL_TO_CLIENT, MSG_DONTWAIT);

                if (n == -EAGAIN || n == -ECONNRESET)
                        return;
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
                /* SMC-D or SMC-R: reset it, so that the peer learns at once */
                (void) conn_map(&m.conn, fds, n, &rx, &tx);
                sys_close(fds[0]);
                sys_close(fds[1]);
                ctl_close_conn(m.conn.conn_id, true);
        }
}

/* Release everything of @s except s->fd itself. Caller holds s->lock and has
 * removed @s from the table (or is replacing it). */
static void sock_teardown(struct smc_sock *s) {
        switch (sock_state(s)) {
        case SOCK_LISTEN_SMC: {
                union smc_ctl_msg m, reply;
                int fds[SMC_CTL_MAX_FDS];
                int n;

                if (getpid() != s->listen_pid || atomic_load(&fork_gen) != s->listen_fork_gen) {
                        /* Another process may hold the listener since a fork: only drop
                         * our copies; smcd retires the listener when the last copy of
                         * its channel is closed (HUP on its end). */
                        if (s->chan >= 0)
                                sys_close(s->chan);
                        s->chan = -1;
                        break;
                }
                smc_ctl_init(&m, SMC_CTL_UNLISTEN, 0);
                m.unlisten.listener_id = s->listener_id;
                n = smc_ctl_client_call(&m, NULL, 0, &reply, fds);
                for (int i = 0; i < n; i++)
                        sys_close(fds[i]);
                if (s->chan >= 0) {
                        chan_drain(s->chan);
                        sys_close(s->chan);
                        s->chan = -1;
                }
                break;
        }
        case SOCK_SMCD: {
                bool abort = smc_ring_close(&s->ep);

                ctl_close_conn(s->conn_id, abort);
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

void smc_fd_forget(int fd) {
        struct smc_sock *s = sock_lookup(fd);

        if (!s)
                return;
        pthread_mutex_lock(&s->lock);
        sock_remove(s);
        sock_teardown(s);
        pthread_mutex_unlock(&s->lock);
        sock_release(s);
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

/* Register the TCP listener s->fd with smcd and turn s->fd into the epoll fd.
 * Caller holds s->lock; the state is LISTEN_TCP. On failure the listener stays
 * plain TCP. */
static int listen_register(struct smc_sock *s, int backlog) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        union smc_ctl_msg m, reply;
        int fds[SMC_CTL_MAX_FDS];
        int n, r, hidden = -1, ep = -1, chan, fdfl, fl;
        struct epoll_event ev = { .events = EPOLLIN };
        bool cloexec, nonblock;

        if (sys_getsockname(s->fd, (struct sockaddr *) &ss, &sl) < 0)
                return -errno;
        smc_ctl_init(&m, SMC_CTL_LISTEN, 0);
        r = smc_ctl_addr_from_sockaddr(&m.listen.addr, (struct sockaddr *) &ss, sl);
        if (r < 0)
                return r;
        m.listen.backlog = backlog < 0 ? 0 : (uint32_t) backlog;
        /* what the app set, as CONNECT does (a version-1 smcd reads the socket) */
        m.listen.sndbuf = s->sndbuf > 0 ? (uint32_t) s->sndbuf : 0;
        m.listen.rcvbuf = s->rcvbuf > 0 ? (uint32_t) s->rcvbuf : 0;
        n = smc_ctl_client_call(&m, &s->fd, 1, &reply, fds);
        if (n < 0)
                return n;
        if (reply.hdr.type != SMC_CTL_LISTEN_REPLY || n != 1) {
                for (int i = 0; i < n; i++)
                        sys_close(fds[i]);
                return reply.hdr.type == SMC_CTL_ERROR ? reply.error.error : -EPROTO;
        }
        chan = fds[0];

        fdfl = sys_fcntl(s->fd, F_GETFD, 0);
        fl = sys_fcntl(s->fd, F_GETFL, 0);
        if (fdfl < 0 || fl < 0) {
                r = -errno;
                goto fail;
        }
        cloexec = fdfl & FD_CLOEXEC;
        nonblock = fl & O_NONBLOCK;

        hidden = sys_fcntl(s->fd, F_DUPFD_CLOEXEC, 0);
        if (hidden < 0) {
                r = -errno;
                goto fail;
        }
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
        s->hidden = hidden;
        s->chan = chan;
        s->listener_id = reply.listen_reply.listener_id;
        s->listen_smcr = reply.hdr.version >= 3 && (reply.listen_reply.flags & SMC_CTL_LISTEN_SMCR);
        s->listen_pid = getpid();
        s->listen_fork_gen = atomic_load(&fork_gen);
        atomic_store(&s->nonblock, nonblock);
        sock_set_state(s, SOCK_LISTEN_SMC);
        return 0;

fail:
        if (ep >= 0)
                sys_close(ep);
        if (hidden >= 0)
                sys_close(hidden);
        smc_ctl_init(&m, SMC_CTL_UNLISTEN, 0);
        m.unlisten.listener_id = reply.listen_reply.listener_id;
        n = smc_ctl_client_call(&m, NULL, 0, &reply, fds);
        for (int i = 0; i < n; i++)
                sys_close(fds[i]);
        chan_drain(chan);
        sys_close(chan);
        return r;
}

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
                break;
        default: /* NEW, BOUND, LISTEN_TCP (retries smcd) */
                r = sys_listen(fd, backlog);
                if (r < 0)
                        break;
                sock_set_state(s, SOCK_LISTEN_TCP);
                if (!env_disable) {
                        int k = listen_register(s, backlog);

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

static int accept_chan(struct smc_sock *l, struct sockaddr *addr, socklen_t *len, int flags) {
        union smc_ctl_msg m;
        int fds[SMC_CTL_MAX_FDS];
        struct smc_sock *s;
        void *rx, *tx;
        int n, r, x, chan = l->chan;

        if (chan < 0)
                return -EAGAIN;
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
                        l->chan = -1;
                        sys_close(chan);
                }
                pthread_mutex_unlock(&l->lock);
                return -EAGAIN;
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
        x = fds[0];
        r = conn_map(&m.conn, fds, n, &rx, &tx);
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
        if ((flags & SOCK_NONBLOCK) && (r = set_nonblock(x, true)) < 0)
                goto abort;
        s = sock_alloc(x, l->family, SOCK_NEW, flags & SOCK_NONBLOCK);
        if (!s) {
                r = -ENOMEM;
                goto abort;
        }
        s->conn_id = m.conn.conn_id;
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
        ep_tune(&s->ep, &m);
        s->smcr = m.conn.mode == SMC_CTL_MODE_SMCR;
        s->ep.peer_is_daemon = s->smcr;
        sock_set_state(s, SOCK_SMCD);
        r = sock_insert(s);
        if (r < 0) {
                (void) smc_ring_close(&s->ep); /* closes Y */
                sock_release(s);
                sys_close(x);
                ctl_close_conn(m.conn.conn_id, true);
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
        ctl_close_conn(m.conn.conn_id, true);
        return r == -EMFILE || r == -ENOMEM ? r : -EPROTO;
}

/* A TCP connection @fd accepted from an SMC-R listener @l: hand it to smcd for the
 * server side of the SMC-R handshake (SMCR, role server). smcd answers at once:
 * PENDING (it runs the handshake and delivers the result on the accept channel, as
 * NEW_CONN: accept_chan()), or TCP (the peer did not ask for SMC). Returns -EAGAIN
 * (@fd closed: smcd has it now), or -ENOPROTOOPT (@fd is a plain TCP connection, not
 * closed). */
static int accept_smcr(struct smc_sock *l, int fd) {
        union smc_ctl_msg m, reply;
        int fds[SMC_CTL_MAX_FDS];
        int n;

        smc_ctl_init(&m, SMC_CTL_SMCR, 0);
        m.smcr.role = SMC_CTL_ROLE_SERVER;
        m.smcr.listener_id = l->listener_id;
        m.smcr.sndbuf = l->sndbuf > 0 ? (uint32_t) l->sndbuf : 0;
        m.smcr.rcvbuf = l->rcvbuf > 0 ? (uint32_t) l->rcvbuf : 0;
        n = smc_ctl_client_call(&m, &fd, 1, &reply, fds);
        if (n < 0) {
                smc_debug("accept fd %d: SMCR seq %u (server) failed: %s: TCP", l->fd, m.hdr.seq, strerror(-n));
                return -ENOPROTOOPT; /* smcd is gone: as TCP (what it would have said) */
        }
        for (int i = 0; i < n; i++)
                sys_close(fds[i]);
        if (reply.hdr.type == SMC_CTL_CONNECT_REPLY && reply.conn.mode == SMC_CTL_MODE_SMCR_PENDING) {
                sys_close(fd);
                return -EAGAIN;
        }
        if (reply.hdr.type == SMC_CTL_ERROR)
                smc_debug("accept fd %d: SMCR seq %u (server): ERROR %s: %s: TCP", l->fd, m.hdr.seq,
                          strerror(-reply.error.error), reply.error.msg);
        else
                smc_debug("accept fd %d: SMCR seq %u (server): reply type %u mode %u reason 0x%08x: TCP", l->fd,
                          m.hdr.seq, reply.hdr.type, reply.hdr.type == SMC_CTL_CONNECT_REPLY ? reply.conn.mode : 0,
                          reply.hdr.type == SMC_CTL_CONNECT_REPLY ? reply.conn.fallback_reason : 0);
        return -ENOPROTOOPT;
}

/* accept4 on the listener's TCP socket @t; registers the connection as TCP. With
 * @notice (the TCP socket of an SMC listener: the peer did not come through smcd),
 * smcd is told of it (fallback_notice()). */
static int accept_tcp(struct smc_sock *l, int t, struct sockaddr *addr, socklen_t *len, int flags,
                      bool notice) {
        struct sockaddr_storage own;
        socklen_t own_len = sizeof(own), want = addr && len ? *len : 0;
        struct smc_sock *s;
        int fd;

        if (notice && !addr) /* the app asked for no address: take it for the notice */
                fd = sys_accept4(t, (struct sockaddr *) &own, &own_len, flags);
        else
                fd = sys_accept4(t, addr, len, flags);
        if (fd < 0)
                return -errno;
        if (notice && l->listen_smcr) {
                int r = accept_smcr(l, fd);

                if (r != -ENOPROTOOPT)
                        return r; /* -EAGAIN: smcd runs the handshake, NEW_CONN follows */
                /* TCP: the peer did not ask for SMC */
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
        if (!s || sock_insert(s) < 0) {
                if (s)
                        sock_release(s);
                sys_close(fd);
                return -ENOMEM;
        }
        return fd;
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

        for (;;) {
                unsigned turn = atomic_fetch_add(&s->accept_turn, 1);
                struct pollfd p = { .fd = fd, .events = POLLIN };
                int r = -EAGAIN;

                for (unsigned i = 0; i < 2; i++) {
                        if ((turn + i) & 1)
                                r = accept_tcp(s, s->hidden, addr, len, flags, true);
                        else {
                                do
                                        r = accept_chan(s, addr, len, flags);
                                while (r == -EPROTO);
                        }
                        if (r != -EAGAIN)
                                return ret_errno(r);
                }
                if (atomic_load(&s->nonblock)) {
                        errno = EAGAIN;
                        return -1;
                }
                if (sys_poll(&p, 1, -1) < 0)
                        return -1; /* EINTR */
        }
}

SMC_PUBLIC int smc_accept(int fd, struct sockaddr *addr, socklen_t *len) {
        return smc_accept4(fd, addr, len, 0);
}

/* ------------------------------------------------------------------------- */
/* connect */

/* SMC-R (smcd said SMCR_PENDING): connect T over TCP (blocking, even for a
 * nonblocking socket: the handshake follows at once), then ask smcd to run the CLC
 * handshake on it (SMCR). Returns 1 with *reply / *fds / *n the CONNECT_REPLY of mode
 * SMCR, 2 for TCP on the connected T (*ret_reason set), or -errno: TCP's connect
 * error, or -ECONNRESET when the connection broke during the handshake. */
static int connect_smcr(struct smc_sock *s, const struct sockaddr *addr, socklen_t addrlen, union smc_ctl_msg *reply,
                        int *fds, int *n, uint32_t *ret_reason) {
        union smc_ctl_msg m;
        int fl, r;

        fl = sys_fcntl(s->fd, F_GETFL, 0);
        if (fl >= 0 && (fl & O_NONBLOCK))
                (void) sys_fcntl(s->fd, F_SETFL, fl & ~O_NONBLOCK);
        r = sys_connect(s->fd, addr, addrlen) < 0 ? -errno : 0;
        if (fl >= 0 && (fl & O_NONBLOCK))
                (void) sys_fcntl(s->fd, F_SETFL, fl);
        if (r < 0) {
                smc_debug("connect fd %d: SMC-R: TCP connect failed: %s", s->fd, strerror(-r));
                return r;
        }
        smc_ctl_init(&m, SMC_CTL_SMCR, 0);
        m.smcr.role = SMC_CTL_ROLE_CLIENT;
        m.smcr.sndbuf = s->sndbuf > 0 ? (uint32_t) s->sndbuf : 0;
        m.smcr.rcvbuf = s->rcvbuf > 0 ? (uint32_t) s->rcvbuf : 0;
        *n = smc_ctl_client_call_timeout(&m, &s->fd, 1, reply, fds, SMC_SMCR_TIMEOUT_MS);
        if (*n < 0) {
                /* smcd went away during the handshake: the stream may hold CLC bytes */
                smc_debug("connect fd %d: SMCR seq %u failed: %s: ECONNRESET", s->fd, m.hdr.seq, strerror(-*n));
                *ret_reason = SMC_CLC_DECL_INTERR;
                return -ECONNRESET;
        }
        if (reply->hdr.type == SMC_CTL_ERROR) {
                smc_debug("connect fd %d: SMCR seq %u: ERROR %s (detail 0x%08x): %s", s->fd, m.hdr.seq,
                          strerror(-reply->error.error), reply->error.detail, reply->error.msg);
                return reply->error.error == -ETIMEDOUT ? -ETIMEDOUT : -ECONNRESET;
        }
        if (reply->hdr.type != SMC_CTL_CONNECT_REPLY) {
                smc_debug("connect fd %d: SMCR seq %u: reply of type %u seq %u: ECONNRESET", s->fd, m.hdr.seq,
                          reply->hdr.type, reply->hdr.seq);
                for (int i = 0; i < *n; i++)
                        sys_close(fds[i]);
                return -ECONNRESET;
        }
        if (reply->conn.mode == SMC_CTL_MODE_TCP) {
                *ret_reason = reply->conn.fallback_reason ? reply->conn.fallback_reason : SMC_CLC_DECL_INTERR;
                smc_debug("connect fd %d: SMCR seq %u: smcd says TCP, reason 0x%08x", s->fd, m.hdr.seq,
                          reply->conn.fallback_reason);
                return 2;
        }
        if (reply->conn.mode != SMC_CTL_MODE_SMCR || *n < 2) {
                smc_debug("connect fd %d: SMCR seq %u: reply mode %u with %d fds: ECONNRESET", s->fd, m.hdr.seq,
                          reply->conn.mode, *n);
                return -ECONNRESET;
        }
        return 1;
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
        void *rx = NULL, *tx = NULL;
        int n, r, x, y, hidden = -1, fdfl;

        if (env_disable) {
                smc_debug("connect fd %d: SMCPROTO_DISABLE: TCP, reason NOSMCDDEV", s->fd);
                *ret_reason = SMC_CLC_DECL_NOSMCDDEV;
                return 0;
        }
        if (dst->port == 0) {
                smc_debug("connect fd %d: port 0: TCP, reason PEERNOSMC", s->fd);
                *ret_reason = SMC_CLC_DECL_PEERNOSMC;
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

        smc_ctl_init(&m, SMC_CTL_CONNECT, 0);
        m.connect.dst = *dst;
        m.connect.src = src;
        m.connect.sndbuf = s->sndbuf > 0 ? (uint32_t) s->sndbuf : 0;
        m.connect.rcvbuf = s->rcvbuf > 0 ? (uint32_t) s->rcvbuf : 0;
        /* v3: T goes along, for SMC-R (smcd marks it for the SMC TCP option) */
        n = smc_ctl_client_call_timeout(&m, &s->fd, 1, &reply, fds, SMC_CONNECT_TIMEOUT_MS);
        if (n == -ETIMEDOUT && smc_ctl_client_version() >= 3) {
                smc_debug("connect fd %d: CONNECT seq %u: no reply in %u ms: going on as SMC-R", s->fd, m.hdr.seq,
                          SMC_CONNECT_TIMEOUT_MS);
                /* smcd is alive but slow: it may have marked T for SMC-R already, and a
                 * plain TCP connect would then offer SMC and send no CLC. Go on as SMC-R:
                 * smcd decides from what the handshake really carried. */
                memset(&reply, 0, sizeof(reply));
                reply.hdr.type = SMC_CTL_CONNECT_REPLY;
                reply.conn.mode = SMC_CTL_MODE_SMCR_PENDING;
                n = 0;
        }
        if (n < 0) {
                *ret_reason = n == -ENOTCONN ? SMC_CLC_DECL_NOSMCDDEV : SMC_CLC_DECL_INTERR;
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
                r = connect_smcr(s, addr, addrlen, &reply, fds, &n, ret_reason);
                if (r <= 0)
                        return r;   /* an error of TCP's connect, or -ECONNRESET */
                if (r == 2)
                        return 2;   /* TCP: T is connected, *ret_reason set */
                src = reply.conn.local;
        } else if (reply.conn.mode != SMC_CTL_MODE_SMCD) {
                *ret_reason = reply.conn.fallback_reason ? reply.conn.fallback_reason : SMC_CLC_DECL_INTERR;
                smc_debug("connect fd %d: CONNECT seq %u: mode %u, reason 0x%08x: TCP, reason 0x%08x", s->fd,
                          m.hdr.seq, reply.conn.mode, reply.conn.fallback_reason, *ret_reason);
                for (int i = 0; i < n; i++)
                        sys_close(fds[i]);
                return 0;
        }

        x = fds[0];
        y = fds[1];
        r = conn_map(&reply.conn, fds, n, &rx, &tx);
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
        hidden = sys_fcntl(s->fd, F_DUPFD_CLOEXEC, 0);
        if (hidden < 0) {
                smc_debug("connect fd %d: F_DUPFD_CLOEXEC failed: %m", s->fd);
                goto fail;
        }
        /* the point of no return: the app's fd number becomes X */
        if (sys_dup3(x, s->fd, (fdfl & FD_CLOEXEC) ? O_CLOEXEC : 0) < 0) {
                /* s->fd still is T */
                smc_debug("connect fd %d: dup3 failed: %m", s->fd);
                goto fail;
        }
        sys_close(x);
        x = s->fd;
        if (atomic_load(&s->nonblock))
                (void) set_nonblock(x, true);
        if (s->rcvtimeo_set) {
                struct timeval tv;
                socklen_t tl = sizeof(tv);

                if (sys_getsockopt(hidden, SOL_SOCKET, SO_RCVTIMEO, &tv, &tl) == 0)
                        (void) sys_setsockopt(x, SOL_SOCKET, SO_RCVTIMEO, &tv, tl);
        }
        s->hidden = hidden;
        s->conn_id = reply.conn.conn_id;
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
                ctl_close_conn(reply.conn.conn_id, true);
                return r;
        }
        ep_tune(&s->ep, &reply);
        s->smcr = reply.conn.mode == SMC_CTL_MODE_SMCR;
        s->ep.peer_is_daemon = s->smcr;
        sock_set_state(s, SOCK_SMCD);
        return 1;

fail:
        if (hidden >= 0)
                sys_close(hidden);
        sys_close(x);
        sys_close(y);
        ctl_close_conn(reply.conn.conn_id, true);
        *ret_reason = SMC_CLC_DECL_INTERR;
        if (reply.conn.mode == SMC_CTL_MODE_SMCR) {
                /* T is connected and its CLC bytes are gone: it cannot serve as TCP */
                smc_debug("connect fd %d: SMC-R connection %016llx aborted: ECONNRESET", s->fd,
                          (unsigned long long) reply.conn.conn_id);
                return -ECONNRESET;
        }
        smc_debug("connect fd %d: connection %016llx aborted: TCP, reason INTERR", s->fd,
                  (unsigned long long) reply.conn.conn_id);
        return 0;
}

SMC_PUBLIC int smc_connect(int fd, const struct sockaddr *addr, socklen_t len) {
        struct smc_sock *s = sock_lookup(fd);
        struct smc_ctl_addr dst;
        uint32_t reason = 0;
        int r, st, prev;

        if (!s)
                return sys_connect(fd, addr, len);
        pthread_mutex_lock(&s->lock);
        st = sock_state(s);
        switch (st) {
        case SOCK_SMCD:
                if (s->connect_report) {
                        s->connect_report = false;
                        r = 0;
                } else
                        r = -EISCONN;
                pthread_mutex_unlock(&s->lock);
                return ret_errno(r);
        case SOCK_LISTEN_SMC:
                pthread_mutex_unlock(&s->lock);
                errno = EISCONN; /* what Linux TCP says for a listener */
                return -1;
        case SOCK_LISTEN_TCP:
        case SOCK_TCP:
                pthread_mutex_unlock(&s->lock);
                return sys_connect(fd, addr, len);
        default:
                break;
        }

        /* Only a well-formed address of our family goes to smcd; anything else gets
         * the kernel's own answer. */
        if (!addr || smc_ctl_addr_from_sockaddr(&dst, addr, len) < 0 || dst.family != s->family) {
                pthread_mutex_unlock(&s->lock);
                return sys_connect(fd, addr, len);
        }
        addr_unmap(&dst);

        r = connect_smc(s, &dst, addr, len, &reason);
        if (r == 2) {
                /* SMC-R was tried: T is connected over TCP, as the fallback */
                s->fallback_reason = reason;
                sock_set_state(s, SOCK_TCP);
                pthread_mutex_unlock(&s->lock);
                fallback_notice(fd, addr, len, SMC_CTL_ROLE_CLIENT, reason);
                return 0;
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
        sock_set_state(s, SOCK_TCP);
        pthread_mutex_unlock(&s->lock);
        r = sys_connect(fd, addr, len);
        if (r < 0 && errno != EINPROGRESS && errno != EINTR && errno != EALREADY && errno != EISCONN) {
                /* failed at once (ECONNREFUSED...): like a TCP socket it may connect
                 * again, and then SMC gets another chance */
                int saved = errno;

                pthread_mutex_lock(&s->lock);
                if (sock_state(s) == SOCK_TCP)
                        sock_set_state(s, prev);
                pthread_mutex_unlock(&s->lock);
                errno = saved;
        } else if ((r == 0 || errno == EINPROGRESS || errno == EINTR) && reason != SMC_CLC_DECL_NOSMCDDEV)
                /* under way, its source address chosen: smcd answered this CONNECT
                 * (NOSMCDDEV: it could not be asked), so it may list the connection */
                fallback_notice(fd, addr, len, SMC_CTL_ROLE_CLIENT, reason);
        return r;
}

/* ------------------------------------------------------------------------- */
/* Data */

#define SEND_FLAGS (MSG_DONTWAIT | MSG_NOSIGNAL | MSG_MORE)
#define RECV_FLAGS (MSG_DONTWAIT | MSG_PEEK | MSG_WAITALL | MSG_NOSIGNAL | MSG_CMSG_CLOEXEC)

/* The connection for a data call on @fd: the SMC-D socket, or NULL with *ret_fd
 * the descriptor to pass the call to (the fd itself, or a listener's hidden T,
 * which gives TCP's ENOTCONN / EPIPE). */
static struct smc_sock *data_sock(int fd, int *ret_fd) {
        struct smc_sock *s = sock_lookup(fd);
        int st;

        *ret_fd = fd;
        if (!s)
                return NULL;
        st = sock_state(s);
        if (st == SOCK_SMCD)
                return s;
        if (st == SOCK_LISTEN_SMC)
                *ret_fd = s->hidden;
        return NULL;
}

static ssize_t iov_total(const struct iovec *iov, int iovcnt) {
        size_t t = 0;

        if (iovcnt < 0 || iovcnt > IOV_MAX || (iovcnt > 0 && !iov))
                return -EINVAL;
        for (int i = 0; i < iovcnt; i++) {
                if (iov[i].iov_len > (size_t) SSIZE_MAX - t)
                        return -EINVAL;
                t += iov[i].iov_len;
        }
        return (ssize_t) t;
}

static ssize_t smcd_send(struct smc_sock *s, const struct iovec *iov, int iovcnt, int flags, bool sigpipe) {
        ssize_t r;

        if (flags & ~SEND_FLAGS)
                return ret_errno_ssize(-EOPNOTSUPP);
        r = iov_total(iov, iovcnt);
        if (r <= 0)
                return ret_errno_ssize(r);
        r = smc_ring_send(&s->ep, iov, iovcnt, flags & MSG_MORE,
                          atomic_load_explicit(&s->nonblock, memory_order_relaxed) || (flags & MSG_DONTWAIT));
        if (r == -EPIPE && sigpipe && !(flags & MSG_NOSIGNAL))
                raise_sigpipe();
        return ret_errno_ssize(r);
}

static ssize_t smcd_recv(struct smc_sock *s, const struct iovec *iov, int iovcnt, int flags) {
        ssize_t r;

        if (flags & ~RECV_FLAGS)
                return ret_errno_ssize(-EOPNOTSUPP);
        r = iov_total(iov, iovcnt);
        if (r <= 0)
                return ret_errno_ssize(r);
        r = smc_ring_recv(&s->ep, iov, iovcnt, flags & (MSG_PEEK | MSG_WAITALL),
                          atomic_load_explicit(&s->nonblock, memory_order_relaxed) || (flags & MSG_DONTWAIT));
        return ret_errno_ssize(r);
}

SMC_PUBLIC ssize_t smc_send(int fd, const void *buf, size_t len, int flags) {
        struct iovec v = { .iov_base = (void *) buf, .iov_len = len };
        struct smc_sock *s = data_sock(fd, &fd);

        if (!s)
                return sys_sendto(fd, buf, len, flags, NULL, 0);
        return smcd_send(s, &v, 1, flags, true);
}

SMC_PUBLIC ssize_t smc_recv(int fd, void *buf, size_t len, int flags) {
        struct iovec v = { .iov_base = buf, .iov_len = len };
        struct smc_sock *s = data_sock(fd, &fd);

        if (!s)
                return sys_recvfrom(fd, buf, len, flags, NULL, NULL);
        return smcd_recv(s, &v, 1, flags);
}

SMC_PUBLIC ssize_t smc_sendto(int fd, const void *buf, size_t len, int flags, const struct sockaddr *to,
                              socklen_t tolen) {
        struct iovec v = { .iov_base = (void *) buf, .iov_len = len };
        struct smc_sock *s = data_sock(fd, &fd);

        if (!s)
                return sys_sendto(fd, buf, len, flags, to, tolen);
        return smcd_send(s, &v, 1, flags, true); /* a connected TCP socket ignores @to */
}

SMC_PUBLIC ssize_t smc_recvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *from,
                                socklen_t *fromlen) {
        struct iovec v = { .iov_base = buf, .iov_len = len };
        struct smc_sock *s = data_sock(fd, &fd);
        ssize_t r;

        if (!s)
                return sys_recvfrom(fd, buf, len, flags, from, fromlen);
        r = smcd_recv(s, &v, 1, flags);
        if (r >= 0 && from && fromlen)
                *fromlen = 0; /* as TCP: no address */
        return r;
}

SMC_PUBLIC ssize_t smc_sendmsg(int fd, const struct msghdr *msg, int flags) {
        struct smc_sock *s = data_sock(fd, &fd);

        if (!s)
                return sys_sendmsg(fd, msg, flags);
        if (!msg) {
                errno = EFAULT;
                return -1;
        }
        return smcd_send(s, msg->msg_iov, (int) msg->msg_iovlen, flags, true);
}

SMC_PUBLIC ssize_t smc_recvmsg(int fd, struct msghdr *msg, int flags) {
        struct smc_sock *s = data_sock(fd, &fd);
        ssize_t r;

        if (!s)
                return sys_recvmsg(fd, msg, flags);
        if (!msg) {
                errno = EFAULT;
                return -1;
        }
        r = smcd_recv(s, msg->msg_iov, (int) msg->msg_iovlen, flags);
        if (r >= 0) {
                msg->msg_flags = 0;
                msg->msg_namelen = 0;
                msg->msg_controllen = 0;
        }
        return r;
}

SMC_PUBLIC ssize_t smc_read(int fd, void *buf, size_t len) {
        struct iovec v = { .iov_base = buf, .iov_len = len };
        struct smc_sock *s = data_sock(fd, &fd);

        if (!s)
                return sys_read(fd, buf, len);
        return smcd_recv(s, &v, 1, 0);
}

SMC_PUBLIC ssize_t smc_write(int fd, const void *buf, size_t len) {
        struct iovec v = { .iov_base = (void *) buf, .iov_len = len };
        struct smc_sock *s = data_sock(fd, &fd);

        if (!s)
                return sys_write(fd, buf, len);
        return smcd_send(s, &v, 1, 0, true);
}

SMC_PUBLIC ssize_t smc_readv(int fd, const struct iovec *iov, int iovcnt) {
        struct smc_sock *s = data_sock(fd, &fd);

        if (!s)
                return sys_readv(fd, iov, iovcnt);
        return smcd_recv(s, iov, iovcnt, 0);
}

SMC_PUBLIC ssize_t smc_writev(int fd, const struct iovec *iov, int iovcnt) {
        struct smc_sock *s = data_sock(fd, &fd);

        if (!s)
                return sys_writev(fd, iov, iovcnt);
        return smcd_send(s, iov, iovcnt, 0, true);
}

/* sendfile(2) onto an SMC connection: the file's bytes go through the ring as a
 * write() of them would (a bounce buffer of SENDFILE_CHUNK bytes: two copies, not the
 * one of a direct read into the peer's DMB). The file position or *@offset moves by
 * exactly what was sent, so a short (nonblocking) send loses nothing. A source that
 * cannot seek (a pipe) gets EINVAL, as from the kernel for a TCP socket. */
#define SENDFILE_CHUNK (64u << 10)
SMC_PUBLIC ssize_t smc_sendfile(int out_fd, int in_fd, int64_t *offset, size_t count) {
        struct smc_sock *s = data_sock(out_fd, &out_fd);
        bool nonblock;
        size_t done = 0;
        int64_t pos;
        uint8_t *buf;
        ssize_t r = 0;

        if (!s)
                return sys_sendfile(out_fd, in_fd, offset, count);
        if (count == 0)
                return 0;
        if (offset) {
                if (*offset < 0)
                        return ret_errno_ssize(-EINVAL);
                pos = *offset;
        } else {
                pos = sys_lseek(in_fd, 0, SEEK_CUR);
                if (pos < 0)
                        return ret_errno_ssize(errno == ESPIPE ? -EINVAL : -errno);
        }
        buf = malloc(SENDFILE_CHUNK);
        if (!buf)
                return ret_errno_ssize(-ENOMEM);
        nonblock = atomic_load_explicit(&s->nonblock, memory_order_relaxed);
        if (count > (size_t) SSIZE_MAX)
                count = SSIZE_MAX;
        while (done < count) {
                size_t want = count - done < SENDFILE_CHUNK ? count - done : SENDFILE_CHUNK;
                ssize_t n = sys_pread(in_fd, buf, want, pos);
                size_t sent = 0;

                if (n < 0) {
                        r = -errno;
                        break;
                }
                if (n == 0)
                        break; /* end of file */
                {
                        struct iovec v = { .iov_base = buf, .iov_len = (size_t) n };
                        /* blocking: all of it (or an error); nonblocking: maybe less */
                        ssize_t k = smc_ring_send(&s->ep, &v, 1, false, nonblock);

                        if (k < 0)
                                r = k;
                        else
                                sent = (size_t) k;
                }
                done += sent;
                pos += (int64_t) sent;
                if (r < 0 || sent < (size_t) n)
                        break;
        }
        free(buf);
        if (offset)
                *offset = pos;
        else if (done > 0)
                (void) sys_lseek(in_fd, pos, SEEK_SET);
        if (done > 0) {
                smc_ring_count_sendfile(&s->ep, done);
                return (ssize_t) done; /* an error after some bytes: the next call reports it */
        }
        if (r == -EPIPE)
                raise_sigpipe();
        return ret_errno_ssize(r);
}

SMC_PUBLIC int smc_shutdown(int fd, int how) {
        struct smc_sock *s = data_sock(fd, &fd);

        if (!s)
                return sys_shutdown(fd, how);
        if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR) {
                errno = EINVAL;
                return -1;
        }
        return ret_errno(smc_ring_shutdown(&s->ep, how));
}

SMC_PUBLIC int smc_close(int fd) {
        struct smc_sock *s = sock_lookup(fd);
        int r;

        if (!s)
                return sys_close(fd);
        pthread_mutex_lock(&s->lock);
        sock_remove(s);
        sock_teardown(s);
        r = sys_close(fd);
        pthread_mutex_unlock(&s->lock);
        sock_release(s);
        return r;
}

/* ------------------------------------------------------------------------- */
/* Options and names */

static int put_int(void *val, socklen_t *len, int v) {
        if (!len || (*len > 0 && !val))
                return -EFAULT;
        if (*len > sizeof(int))
                *len = sizeof(int);
        memcpy(val, &v, *len);
        return 0;
}

static int get_int(const void *val, socklen_t len, int *v) {
        if (len < sizeof(int))
                return -EINVAL;
        if (!val)
                return -EFAULT;
        memcpy(v, val, sizeof(int));
        return 0;
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
                if (s->optsock < 0)
                        s->optsock = sys_socket(s->family, SOCK_STREAM | SOCK_CLOEXEC, 0);
                return s->optsock;
        default:
                return s->fd;
        }
}

SMC_PUBLIC int smc_setsockopt(int fd, int level, int name, const void *val, socklen_t len) {
        struct smc_sock *s = sock_lookup(fd);
        bool smcd;
        int r, v, t;

        if (!s)
                return sys_setsockopt(fd, level, name, val, len);
        if (level == SOL_SMC) {
                errno = ENOPROTOOPT; /* SMC_PROTO_* are read-only */
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
                }
                goto out;
        }
        t = opt_fd(s);
        r = t < 0 ? -ENOMEM : neg_errno(sys_setsockopt(t, level, name, val, len));
        if (r == 0 && level == SOL_SOCKET && name == SO_RCVTIMEO) {
                /* a blocking SMC-D receive sleeps in a recv on X: X times out as TCP */
                s->rcvtimeo_set = true;
                if (smcd)
                        r = neg_errno(sys_setsockopt(s->fd, level, name, val, len));
        }
out:
        pthread_mutex_unlock(&s->lock);
        return ret_errno(r);
}

SMC_PUBLIC int smc_getsockopt(int fd, int level, int name, void *val, socklen_t *len) {
        struct smc_sock *s = sock_lookup(fd);
        int r = 0, st, t;

        if (!s)
                return sys_getsockopt(fd, level, name, val, len);
        st = sock_state(s);
        if (level == SOL_SMC) {
                if (name == SMC_PROTO_MODE)
                        return ret_errno(put_int(val, len, st == SOCK_SMCD ? (s->smcr ? SMC_PROTO_MODE_SMCR : SMC_PROTO_MODE_SMCD)
                                                          : st == SOCK_TCP ? SMC_PROTO_MODE_TCP
                                                                           : SMC_PROTO_MODE_NONE));
                if (name == SMC_PROTO_FALLBACK_REASON) {
                        uint32_t reason = st == SOCK_SMCD ? 0 : s->fallback_reason;

                        if (!len || (*len > 0 && !val))
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
                        case SO_SNDBUF:
                                return ret_errno(put_int(val, len, (int) s->ep.tx_size));
                        case SO_RCVBUF:
                                return ret_errno(put_int(val, len, (int) s->ep.rx_size));
                        default:
                                break;
                        }
                } else if (level == IPPROTO_TCP) {
                        if (name == TCP_NODELAY)
                                return ret_errno(put_int(val, len, s->nodelay));
                        if (name == TCP_CORK)
                                return ret_errno(put_int(val, len, __atomic_load_n(&s->ep.corked, __ATOMIC_RELAXED)));
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
                return ret_errno(copy_addr_out(&s->peer, s->peer_len, addr, len));
        if (st == SOCK_LISTEN_SMC)
                return sys_getpeername(s->hidden, addr, len); /* ENOTCONN */
        return sys_getpeername(fd, addr, len);
}

/* ------------------------------------------------------------------------- */
/* poll, fcntl */

static uint64_t now_ms(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000u + (uint64_t) ts.tv_nsec / 1000000u;
}

#define POLL_ALWAYS (POLLERR | POLLHUP | POLLNVAL)

/* The true readiness of SMC-D entries; others left as they are. Returns the
 * number of entries with revents. */
static int poll_fixup(struct pollfd *fds, nfds_t n, struct smc_sock **socks) {
        int cnt = 0;

        for (nfds_t i = 0; i < n; i++) {
                if (socks[i])
                        fds[i].revents = (short) (smc_ring_poll(&socks[i]->ep) & (fds[i].events | POLL_ALWAYS));
                if (fds[i].revents)
                        cnt++;
        }
        return cnt;
}

SMC_PUBLIC int smc_poll(struct pollfd *fds, nfds_t n, int timeout) {
        struct smc_sock *stack_socks[64], **socks = stack_socks;
        uint64_t deadline = 0;
        bool any = false, ready = false;
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
                if (socks[i] && (smc_ring_poll(&s->ep) & (fds[i].events | POLL_ALWAYS)))
                        ready = true;
        }
        if (timeout > 0)
                deadline = now_ms() + (uint64_t) timeout;

        if (ready) {
                r = sys_poll(fds, n, 0);
                if (r >= 0)
                        r = poll_fixup(fds, n, socks);
                goto out;
        }
        for (;;) {
                int left = timeout;

                if (timeout > 0) {
                        uint64_t now = now_ms();
                        left = now >= deadline ? 0 : (int) (deadline - now);
                }
                r = sys_poll(fds, n, left);
                if (r <= 0)
                        goto out;
                r = poll_fixup(fds, n, socks);
                if (r > 0 || left == 0)
                        goto out;
                /* only stale wakeups (a doorbell that was already consumed): the
                 * ring settled them, wait again for the remaining time. A ring
                 * that is full without a plugged fd would wake us at once, so do
                 * not spin on it: back off a little. */
                struct timespec ts = { .tv_nsec = 50000 };
                nanosleep(&ts, NULL);
        }
out:
        if (socks != stack_socks)
                free(socks);
        return r;
}

SMC_PUBLIC int smc_ioctl(int fd, unsigned long req, void *arg) {
        struct smc_sock *s = sock_lookup(fd);
        int st, r;

        if (!s)
                return sys_ioctl(fd, req, arg);
        st = atomic_load(&s->state);
        switch (req) {
        case FIONBIO: {
                int on;

                if (!arg)
                        return ret_errno(-EFAULT);
                memcpy(&on, arg, sizeof(on));
                pthread_mutex_lock(&s->lock);
                r = sys_ioctl(fd, FIONBIO, arg);
                if (r == 0)
                        atomic_store(&s->nonblock, on != 0);
                pthread_mutex_unlock(&s->lock);
                return r;
        }
        case FIONREAD: /* = SIOCINQ: bytes ready to read */
        case SIOCOUTQ: { /* bytes sent that the peer has not read yet */
                int v;

                if (st == SOCK_LISTEN_SMC || st == SOCK_LISTEN_TCP)
                        return ret_errno(-EINVAL); /* as TCP on a listener */
                if (st != SOCK_SMCD)
                        return sys_ioctl(fd, req, arg);
                if (!arg)
                        return ret_errno(-EFAULT);
                if (req == FIONREAD)
                        v = (int) smc_ring_readable(&s->ep);
                else
                        v = (int) smc_curs_diff(s->ep.tx_size, atomic_load(&s->ep.tx_hdr->cons),
                                                atomic_load(&s->ep.tx_hdr->prod));
                memcpy(arg, &v, sizeof(v));
                return 0;
        }
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
        if (!s || cmd != F_SETFL)
                return sys_fcntl(fd, cmd, arg);
        pthread_mutex_lock(&s->lock);
        r = sys_fcntl(fd, F_SETFL, arg);
        if (r == 0)
                atomic_store(&s->nonblock, (arg & O_NONBLOCK) != 0);
        pthread_mutex_unlock(&s->lock);
        return r;
}
