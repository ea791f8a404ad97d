/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* SMC-D connections over loopback ISM: CONNECT, CLOSE, endpoint ids, per-uid limits,
 * closes on client death. */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/sock_diag.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "log.h"
#include "manager.h"
#include "smc-clc.h"
#include "smcr.h"

/* ---- endpoint ids: SipHash-2-4 of a counter under a random key ---- */

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                        \
        do {                                                            \
                v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32); \
                v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2;                  \
                v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0;                  \
                v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32); \
        } while (0)

static uint64_t siphash24_u64(const uint64_t key[2], uint64_t m) {
        uint64_t v0 = 0x736f6d6570736575ULL ^ key[0], v1 = 0x646f72616e646f6dULL ^ key[1],
                 v2 = 0x6c7967656e657261ULL ^ key[0], v3 = 0x7465646279746573ULL ^ key[1];
        uint64_t b = (uint64_t) 8 << 56;

        v3 ^= m;
        SIPROUND;
        SIPROUND;
        v0 ^= m;
        v3 ^= b;
        SIPROUND;
        SIPROUND;
        v0 ^= b;
        v2 ^= 0xff;
        SIPROUND;
        SIPROUND;
        SIPROUND;
        SIPROUND;
        return v0 ^ v1 ^ v2 ^ v3;
}

uint64_t manager_random_u64(Manager *m) {
        uint64_t v;

        do
                v = siphash24_u64(m->id_key, ++m->ep_counter);
        while (v == 0);
        return v;
}

uint64_t manager_new_endpoint_id(Manager *m) {
        for (;;) {
                uint64_t id = siphash24_u64(m->id_key, ++m->ep_counter);
                if (id != 0 && !u64map_get(m->endpoints, id))
                        return id;
        }
}

/* ---- measurement of one queued NEW_CONN (for the accept-queue limit) ---- */

int conn_measure_truesize(size_t *ret) {
        union smc_ctl_msg msg;
        int pair[2], outq = 0, r = 0;

        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) < 0)
                return -errno;
        smc_ctl_init(&msg, SMC_CTL_NEW_CONN, 0);
        /* fds do not count towards the sender's socket buffer: send none */
        if (send(pair[0], &msg, msg.hdr.len, MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t) msg.hdr.len)
                r = -errno;
        else if (ioctl(pair[0], SIOCOUTQ, &outq) < 0)
                r = -errno;
        else if (outq <= 0)
                r = -EIO;
        close(pair[0]);
        close(pair[1]);
        if (r < 0)
                return r;
        *ret = (size_t) outq;
        return 0;
}

/* ---- per-uid accounting ---- */

UidUsage *uid_usage(Manager *m, uid_t uid, bool create) {
        UidUsage *u = u64map_get(m->uids, uid);

        if (u || !create)
                return u;
        u = calloc(1, sizeof(*u));
        if (!u)
                return NULL;
        u->uid = uid;
        if (u64map_put(m->uids, uid, u) < 0) {
                free(u);
                return NULL;
        }
        return u;
}

/* Would @uid exceed a limit by @eps more endpoints and @bytes more DMB bytes?
 * Returns 0 or the fallback reason. */
uint32_t uid_check(Manager *m, uid_t uid, uint64_t eps, uint64_t bytes) {
        UidUsage *u = uid_usage(m, uid, false);
        uint64_t have_eps = u ? u->endpoints : 0, have_bytes = u ? u->dmb_bytes : 0;

        if (m->config.max_conns_per_uid && have_eps + eps > m->config.max_conns_per_uid)
                return SMC_CLC_DECL_MAXCONNERR;
        if (m->config.max_buf_per_uid && have_bytes + bytes > m->config.max_buf_per_uid)
                return SMC_CLC_DECL_MAX_DMB;
        return 0;
}

/* The per-uid limits for a new connection's two RMBs, of classes *cclass (owned by
 * @cuid) and *sclass (owned by @suid): MAXCONNERR if an endpoint limit is hit; else
 * shrink the classes (the larger first) until each uid stays within max_buf_per_uid,
 * as the kernel's smc_buf_create() downsizes an RMB that cannot be had; MAX_DMB if
 * not even 16 KiB each fits. Returns 0 or the fallback reason. */
static uint32_t uid_fit(Manager *m, uid_t cuid, uid_t suid, unsigned *cclass, unsigned *sclass) {
        uint32_t reason;

        if (cuid == suid) {
                while ((reason = uid_check(m, cuid, 2, (uint64_t) smc_dmb_class_size(*cclass) +
                                                               smc_dmb_class_size(*sclass))) == SMC_CLC_DECL_MAX_DMB) {
                        if (*cclass == 0 && *sclass == 0)
                                return reason;
                        if (*cclass >= *sclass && *cclass > 0)
                                (*cclass)--;
                        else
                                (*sclass)--;
                }
                return reason;
        }
        while ((reason = uid_check(m, cuid, 1, smc_dmb_class_size(*cclass))) == SMC_CLC_DECL_MAX_DMB && *cclass > 0)
                (*cclass)--;
        if (reason)
                return reason;
        while ((reason = uid_check(m, suid, 1, smc_dmb_class_size(*sclass))) == SMC_CLC_DECL_MAX_DMB && *sclass > 0)
                (*sclass)--;
        return reason;
}

void uid_account(Manager *m, uid_t uid, int64_t eps, int64_t bytes) {
        UidUsage *u = uid_usage(m, uid, eps > 0);

        if (!u)
                return; /* out of memory: accounting only */
        u->endpoints += (uint64_t) eps;
        u->dmb_bytes += (uint64_t) bytes;
        uid_usage_gc(m, u);
}

/* max_handshakes_per_uid: take one CONNECT from @uid's token bucket (N per second,
 * burst N; in millionths of a handshake, so it refills by N per microsecond). Returns
 * false when it is empty. */
#define HS_UNIT UINT64_C(1000000)
static bool uid_handshake_allowed(Manager *m, uid_t uid) {
        uint64_t rate = m->config.max_handshakes_per_uid, cap = rate * HS_UNIT, now;
        UidUsage *u;

        if (rate == 0)
                return true;
        u = uid_usage(m, uid, true); /* exists: the client's own connection counts */
        if (!u)
                return true;        /* out of memory: accounting only */
        now = manager_now(m);
        if (u->hs_last == 0 || now - u->hs_last >= HS_UNIT) /* a second refills it */
                u->hs_tokens = cap;
        else if (u->hs_tokens + (now - u->hs_last) * rate < cap)
                u->hs_tokens += (now - u->hs_last) * rate;
        else
                u->hs_tokens = cap; /* also when the limit was lowered since */
        u->hs_last = now;
        if (u->hs_tokens < HS_UNIT)
                return false;
        u->hs_tokens -= HS_UNIT;
        return true;
}

void uid_usage_gc(Manager *m, UidUsage *u) {
        /* a bucket that is not full again is kept, or short-lived processes would
         * get a fresh one each (the record then goes with the uid's next client) */
        if (u && u->endpoints == 0 && u->dmb_bytes == 0 && u->clients == 0 && u->listeners == 0 &&
            (u->hs_last == 0 || manager_now(m) - u->hs_last >= HS_UNIT)) {
                u64map_remove(m->uids, u->uid);
                free(u);
        }
}

/* ---- connections ---- */

static unsigned ep_side(const Endpoint *e) {
        return (unsigned) (e - e->conn->ep);
}

/* ---- the endpoint table (eptable.h) ---- */

static uint64_t client_pid_start(Client *c) {
        if (!c->pid_start)
                (void) proc_pid_start(c->pid, &c->pid_start);
        return c->pid_start;
}

/* Record SMC-D endpoint @e (id, tokens, sizes, addresses set) as owned by @pid. */
static void ept_record(Manager *m, Endpoint *e, pid_t pid, uint64_t pid_start) {
        Conn *conn = e->conn;
        unsigned side = ep_side(e);
        struct smcd_ept_record r = { 0 };
        int slot;

        if (!m->eptable || !pid_start)
                return;
        r.role = side == EP_SERVER ? SMC_CTL_ROLE_SERVER : SMC_CTL_ROLE_CLIENT;
        r.id = e->id;
        if (conn->restored) {
                r.rx_token = conn->token[side];
                r.tx_token = conn->token[!side];
                r.rx_size = conn->rsize[side];
                r.tx_size = conn->rsize[!side];
        } else {
                r.rx_token = ((struct smc_dmb_hdr *) conn->buf[side]->base)->token;
                r.tx_token = ((struct smc_dmb_hdr *) conn->buf[!side]->base)->token;
                r.rx_size = (uint32_t) conn->buf[side]->size;
                r.tx_size = (uint32_t) conn->buf[!side]->size;
        }
        r.uid = e->uid;
        r.pid = pid;
        r.pid_start = pid_start;
        r.local = e->local;
        r.peer = e->peer;
        slot = eptable_add(m->eptable, &r);
        e->ept_slot1 = slot > 0 ? (uint32_t) slot : 0;
}

/* ---- processes named by the endpoint table (ProcWatch) ---- */

static void proc_watch_free(Manager *m, ProcWatch *pw) {
        manager_unwatch(m, pw->pidfd, pw->key | WATCH_PROC);
        close(pw->pidfd);
        u64map_remove(m->procs, (uint64_t) pw->pid);
        free(pw);
}

/* Take loaded @e off its process's watch (freed with its last endpoint). */
static void proc_watch_detach(Manager *m, Endpoint *e) {
        ProcWatch *pw = e->proc;

        if (!pw)
                return;
        LIST_REMOVE(by_client, pw->endpoints, e);
        e->proc = NULL;
        if (!pw->endpoints)
                proc_watch_free(m, pw);
}

void proc_watch_on_exit(ProcWatch *pw, Manager *m) {
        Endpoint *e = pw->endpoints, *n;

        log_debug("Process %d, named by the endpoint table, exited: its restored endpoints end.", (int) pw->pid);
        pw->endpoints = NULL;
        for (; e; e = n) {
                n = e->by_client_next;
                e->proc = NULL;
                endpoint_close(m, e, false, true);
        }
        proc_watch_free(m, pw);
}

/* The watch of process @pid started at @start, made if there is none: NULL with
 * *@gone true if that process is not running (any more), NULL with *@gone false if it
 * cannot be watched (no pidfd_open, out of descriptors or memory: the endpoint is then
 * restored unwatched). */
static ProcWatch *proc_watch_get(Manager *m, pid_t pid, uint64_t start, bool *gone) {
        ProcWatch *pw = u64map_get(m->procs, (uint64_t) pid);
        uint64_t now = 0;
        int fd, err, r;

        *gone = false;
        if (pw) {
                *gone = pw->start != start; /* another process under a reused pid */
                return *gone ? NULL : pw;
        }
        fd = (int) syscall(SYS_pidfd_open, pid, 0);
        err = fd < 0 ? errno : 0;
        if (fd < 0 && err == ESRCH) {
                *gone = true;
                return NULL;
        }
        /* after pidfd_open: a process that started since under the pid has another
         * start time. (Its start time unreadable, e.g. out of descriptors: the
         * pidfd, if there is one, says a process of that pid runs; no pidfd: restored
         * unwatched, not dropped) */
        r = proc_pid_start(pid, &now);
        if (r == -ESRCH || (r == 0 && now != start)) {
                if (fd >= 0)
                        close(fd);
                *gone = true;
                return NULL;
        }
        if (fd < 0) {
                log_warning_errno(-err, "Cannot watch process %d (pidfd_open: %m): its restored endpoints end "
                                  "only by its REREG and CLOSE, or its control connection.",
                                  (int) pid);
                return NULL;
        }
        pw = calloc(1, sizeof(*pw));
        if (!pw || u64map_put(m->procs, (uint64_t) pid, pw) < 0) {
                free(pw);
                close(fd);
                return NULL;
        }
        pw->pid = pid;
        pw->start = start;
        pw->pidfd = fd;
        pw->key = ++m->next_hold_key;
        if (manager_watch(m, fd, EPOLLIN, pw->key | WATCH_PROC, pw) < 0) {
                u64map_remove(m->procs, (uint64_t) pid);
                close(fd);
                free(pw);
                return NULL;
        }
        return pw;
}

/* ---- tombs: restored connections whose one re-registered endpoint closed ---- */

#define CONN_TOMB_USEC (60u * 1000000u) /* how long a tomb waits for the other REREG */
#define CONN_TOMB_MAX 65536u            /* tombs kept at most (the oldest go first) */

static void tomb_free(Manager *m, Conn *conn) {
        for (unsigned i = 0; i < 2; i++)
                if (conn->ep[i].id && u64map_get(m->restored, conn->token[i]) == &conn->ep[i])
                        u64map_remove(m->restored, conn->token[i]);
        LIST_REMOVE(tombs, m->tombs, conn);
        m->n_tombs--;
        free(conn);
}

static int on_tomb_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        Manager *m = userdata;
        uint64_t now = manager_now(m), oldest = 0;
        Conn *c, *n;

        LIST_FOREACH_SAFE(tombs, c, n, m->tombs) {
                if (now - c->tomb_usec >= CONN_TOMB_USEC)
                        tomb_free(m, c);
                else if (!oldest || c->tomb_usec < oldest)
                        oldest = c->tomb_usec;
        }
        if (oldest && sd_event_source_set_time(s, usec + (oldest + CONN_TOMB_USEC - now)) >= 0)
                (void) sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
        return 0;
}

/* Keep @conn (restored, counted, its endpoint closed, the other slot never filled)
 * for its other endpoint's REREG. Returns false if it cannot be kept (free it). */
static bool tomb_add(Manager *m, Conn *conn) {
        if (m->exiting)
                return false;
        if (m->n_tombs >= CONN_TOMB_MAX) {
                Conn *oldest = m->tombs;

                while (oldest && oldest->tombs_next)
                        oldest = oldest->tombs_next; /* prepended: the tail is the oldest */
                if (oldest)
                        tomb_free(m, oldest);
        }
        if (!m->tomb_timer) {
                if (sd_event_add_time_relative(m->event, &m->tomb_timer, CLOCK_MONOTONIC, CONN_TOMB_USEC,
                                               CONN_TOMB_USEC / 10, on_tomb_timer, m) < 0)
                        return false;
        } else if (!m->tombs) {
                uint64_t t;

                if (sd_event_now(m->event, CLOCK_MONOTONIC, &t) < 0 ||
                    sd_event_source_set_time(m->tomb_timer, t + CONN_TOMB_USEC) < 0 ||
                    sd_event_source_set_enabled(m->tomb_timer, SD_EVENT_ONESHOT) < 0)
                        return false;
        }
        conn->tomb = true;
        conn->tomb_usec = manager_now(m);
        LIST_PREPEND(tombs, m->tombs, conn);
        m->n_tombs++;
        return true;
}

/* Release an SMC-D connection's DMB: its writer's library said how far it wrote the
 * ring (dmb.h, data_dirty), so only that much is cleared; UNKNOWN (a writer that did
 * not say, or none yet) clears all of it. */
static void release_dmb(Manager *m, struct smc_buf *b) {
        uint32_t dirty = atomic_load_explicit(&((struct smc_dmb_hdr *) b->base)->data_dirty, memory_order_relaxed);

        manager_release_buf_len(m, b, dirty); /* UNKNOWN: clamped to the size */
}

/* Both ends closed: count, give the buffers back (the pool's worker clears them). */
/* Short-lived connections (tunable short_conn_rate; smc-hints.h says why). A connection
 * is short when both ends together made at most SHORT_CONN_MSGS sends and moved at most
 * SHORT_CONN_BYTES: one or two request/response exchanges, whose few microseconds saved
 * on the data path do not pay for the set-up through smcd (README "What limits").
 * Each listener counts its connections' ends in windows of SHORT_CONN_WINDOW; a window
 * with 7 in 8 short that ended at short_conn_rate per second or faster publishes a
 * hint for the destination the clients connected to: for SMC_HINT_HOLD_NS they connect
 * over TCP, then SMC-D again, and the next window decides anew. */
#define SHORT_CONN_MSGS 8u
#define SHORT_CONN_BYTES (64u << 10)
#define SHORT_CONN_WINDOW 64u

static void short_conn_account(Manager *m, Conn *conn, const struct smcd_dmb_counters *crx,
                               const struct smcd_dmb_counters *srx) {
        char buf[SMCD_ADDR_STRLEN];
        uint64_t rate = m->config.short_conn_rate, now, span;
        Listener *l;

        if (!rate || !m->hints || !conn->listener_id || !(l = manager_get_listener(m, conn->listener_id)))
                return;
        now = manager_now(m);
        if (l->sc_n == 0)
                l->sc_start = now;
        l->sc_n++;
        if (crx->prod_msgs + srx->prod_msgs <= SHORT_CONN_MSGS && crx->prod_bytes + srx->prod_bytes <= SHORT_CONN_BYTES)
                l->sc_short++;
        if (l->sc_n < SHORT_CONN_WINDOW)
                return;
        span = now - l->sc_start; /* usec */
        if (l->sc_short * 8 >= l->sc_n * 7 && (uint64_t) l->sc_n * 1000000 >= rate * span) {
                struct timespec ts;
                uint64_t rt;

                /* (CLOCK_REALTIME: the clock clients in a time namespace share, smc-hints.h) */
                clock_gettime(CLOCK_REALTIME, &ts);
                rt = (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
                if (hints_publish(m->hints, &conn->ep[EP_CLIENT].peer, l->id, SMCD_DECL_SHORTCONN,
                                  rt + SMC_HINT_HOLD_NS, rt) < 0)
                        goto out;
                m->stats.short_conn_hints++;
                log_debug("Listener %" PRIu64 ": %u of %u connections short in %" PRIu64 " us: %s hinted to TCP.",
                          l->id, l->sc_short, l->sc_n, span,
                          smcd_addr_to_string(&conn->ep[EP_CLIENT].peer, buf));
        }
out:
        l->sc_n = l->sc_short = 0;
}

static void conn_finish(Manager *m, Conn *conn) {
        struct smcd_dmb_counters crx, srx;

        if (conn->restored) {
                unsigned lone = conn->ep[EP_CLIENT].id == 0 ? EP_SERVER : conn->ep[EP_SERVER].id == 0 ? EP_CLIENT : 2;

                /* no buffers of ours, no counters we could read */
                if (!conn->counted) {
                        if (conn->ep[0].aborted || conn->ep[1].aborted)
                                m->stats.conns_aborted++;
                        else
                                m->stats.conns_closed++;
                        conn->counted = true;
                }
                m->stats.conns_current--;
                manager_status_changed(m);
                /* only one end re-registered: its peer's REREG may still come (it
                 * learns of the close when it reads EOF, and its close re-registers
                 * it first): keep the connection for it */
                if (lone < 2 && tomb_add(m, conn))
                        return;
                for (unsigned i = 0; i < 2; i++)
                        if (conn->ep[i].id && u64map_get(m->restored, conn->token[i]) == &conn->ep[i])
                                u64map_remove(m->restored, conn->token[i]);
                free(conn);
                return;
        }

        /* bytes, messages, flushes the clients counted in the DMB headers (64-bit,
         * unlike the cursors), since the last stats reset */
        smcd_dmb_counters_read(conn->buf[EP_CLIENT]->base, &conn->stats_base[EP_CLIENT], &crx);
        smcd_dmb_counters_read(conn->buf[EP_SERVER]->base, &conn->stats_base[EP_SERVER], &srx);
        smcd_stats_count_ended(&m->stats, &crx, &srx);
        short_conn_account(m, conn, &crx, &srx);
        if (conn->ep[0].aborted || conn->ep[1].aborted)
                m->stats.conns_aborted++;
        else
                m->stats.conns_closed++;
        release_dmb(m, conn->buf[EP_CLIENT]);
        release_dmb(m, conn->buf[EP_SERVER]);
        m->stats.conns_current--;
        if (conn->tcp_fd >= 0)
                close(conn->tcp_fd);
        free(conn);
        manager_status_changed(m);
}

/* The owner of @e died with @e open. As TCP when a process exits with a socket open
 * (the kernel closes it): FIN if it had read everything its peer sent, RST if data
 * was left unread in its receive queue. Returns SMC_DMB_CONN_ABORT or _CLOSED, or
 * 0 if the dead one had closed it itself already (its own flags stand). */
static uint32_t died_flags(const Conn *conn, unsigned side) {
        struct smc_dmb_hdr *own_rx = conn->buf[side]->base, *peer_rx = conn->buf[!side]->base;
        const uint32_t gone = SMC_DMB_CONN_CLOSED | SMC_DMB_CONN_ABORT;
        uint32_t mine;

        /* its state as writer (in the peer's rx DMB) and as reader (in its own) */
        mine = atomic_load_explicit(&peer_rx->conn_flags, memory_order_acquire) |
               atomic_load_explicit(&own_rx->reader_flags, memory_order_acquire);
        if (mine & gone)
                return 0;
        /* never accepted (its NEW_CONN was still queued when the listener's last
         * copy went, or its descriptors were lost to a receiver out of them): TCP
         * resets a connection queued on a listener that is closed */
        if (side == EP_SERVER && conn->accept_marked && !(mine & SMC_DMB_READER_ACCEPTED))
                return SMC_DMB_CONN_ABORT;
        /* both directions were shut before (its FIN, in its flags as writer, and
         * the peer's, in the peer's flags as writer into its ring): TCP's socket is
         * CLOSED or TIME_WAIT then, and its close sends no RST, whatever the linger
         * or the data left unread (tcp_close(); ring.c smc_ring_close_reset()) */
        if ((mine & SMC_DMB_CONN_DONE_WRITING) &&
            (atomic_load_explicit(&own_rx->conn_flags, memory_order_acquire) &
             (SMC_DMB_CONN_DONE_WRITING | SMC_DMB_CONN_CLOSED)))
                return SMC_DMB_CONN_CLOSED;
        /* SO_LINGER {1, 0} (set by any of its processes): the last close resets */
        if (mine & SMC_DMB_READER_LINGER_RESET)
                return SMC_DMB_CONN_ABORT;
        if (atomic_load(&own_rx->prod) != atomic_load(&own_rx->cons))
                return SMC_DMB_CONN_ABORT;
        return SMC_DMB_CONN_CLOSED;
}

/* Stop watching @e's Y copy and close it. */
static void hold_release(Manager *m, Endpoint *e) {
        if (e->hold_fd < 0)
                return;
        manager_unwatch(m, e->hold_fd, e->hold_key | WATCH_ENDPOINT);
        close(e->hold_fd);
        e->hold_fd = -1;
}

/* Keep @fd (Y of @e's pair) and watch it for the HUP that says the last copy of X
 * is gone. Takes @fd in every case. Returns 0 or -errno (then @fd is closed). */
static int hold_take_events(Manager *m, Endpoint *e, int fd, uint32_t events) {
        int r;

        e->hold_key = ++m->next_hold_key;
        r = manager_watch(m, fd, events, e->hold_key | WATCH_ENDPOINT, e);
        if (r < 0) {
                close(fd);
                return r;
        }
        e->hold_fd = fd;
        return 0;
}

static int hold_take(Manager *m, Endpoint *e, int fd) {
        /* edge-triggered: after a shutdown of both directions (SMC_DMB_READER_X_HUP)
         * Y stays hung up while X lives; X's last close is the next edge (its
         * release wakes Y). Only HUP and ERR pass the mask: the data and space
         * wakeups of the doorbell traffic carry other keys and wake nobody. */
        return hold_take_events(m, e, fd, EPOLLHUP | EPOLLET);
}

/* Wake the reader and a blocked writer of @e after its peer went away: drain the
 * plug bytes its writer left in Y (its X turns writable: POLLOUT), then shut Y's
 * writing side (X reads EOF: POLLIN|POLLRDHUP). The flags in the DMBs say why. When
 * that leaves @e shut both ways (after its own shutdown(SHUT_WR), whose library shut
 * X's write side, or after an abort, for which we shut it here, as a RST leaves a
 * TCP socket), the kernel reports EPOLLHUP on X; SMC_DMB_READER_X_HUP first. */
static void hold_wake(Endpoint *e) {
        struct smc_dmb_hdr *rx, *tx;
        bool abort = false, rd_shut = false;
        char buf[4096];

        if (e->hold_fd < 0)
                return;
        for (unsigned i = 0; i < 64; i++) {
                ssize_t n = read(e->hold_fd, buf, sizeof(buf));

                /* 0: Y's read side is shut, that is, X's write side */
                rd_shut = n == 0;
                if (n <= 0)
                        break;
        }
        if (!e->conn->restored) {
                rx = e->conn->buf[ep_side(e)]->base;  /* @e reads it: the peer's state as writer */
                tx = e->conn->buf[!ep_side(e)]->base; /* @e writes it: its own */
                /* seq_cst, after the flags endpoint_close() set: against @e's own
                 * shutdown(SHUT_WR), which sets DONE_WRITING and then looks at these
                 * (ring.c x_hup_mark()); the mark goes before the shutdown it covers */
                if (rx->features & SMC_DMB_FEAT_X_HUP) {
                        abort = atomic_load(&rx->conn_flags) & SMC_DMB_CONN_ABORT;
                        /* (not again when the peer's library marked it at its close) */
                        if ((abort || (atomic_load(&tx->conn_flags) & SMC_DMB_CONN_DONE_WRITING)) &&
                            !(atomic_load(&rx->reader_flags) & SMC_DMB_READER_X_HUP)) {
                                static const char anchor = 0;

                                /* the anchor byte (dmb.h SMC_DMB_READER_X_ANCHOR) first */
                                if (send(e->hold_fd, &anchor, 1, MSG_DONTWAIT | MSG_NOSIGNAL) == 1)
                                        atomic_fetch_or(&rx->reader_flags, SMC_DMB_READER_X_ANCHOR);
                                atomic_fetch_or(&rx->reader_flags, SMC_DMB_READER_X_HUP);
                        }
                }
        }
        /* an abort shuts X's write side too, as a RST leaves TCP's socket. Not again
         * what the peer's library shut at its close already (its FIN; both ways at
         * its abort, ring.c smc_ring_close_reset(); a send of no bytes fails with
         * EPIPE then, and has no other effect): a shutdown wakes X's waiters even
         * when it changes nothing, and an edge-triggered waiter between the two would
         * see two edges where TCP's FIN or RST is one */
        if ((!abort || rd_shut) && send(e->hold_fd, NULL, 0, MSG_DONTWAIT | MSG_NOSIGNAL) < 0 && errno == EPIPE)
                return;
        (void) shutdown(e->hold_fd, abort ? SHUT_RDWR : SHUT_WR);
}

/* Is X of @e (SMC-D, held) still open somewhere, though Y hung up? Only after a
 * shutdown of both directions (SMC_DMB_READER_X_HUP): otherwise the hang-up is X's
 * last close. When the kernel cannot say, X counts as open: a DMB released under a
 * reader would lose its data, while an endpoint kept too long is only memory. */
static bool x_lives(Manager *m, Endpoint *e) {
        struct smc_dmb_hdr *rx;
        uint32_t f;
        int r;

        if (e->conn->restored || !m->unixdiag) /* (no unixdiag: smcd offered no X_HUP) */
                return false;
        rx = e->conn->buf[ep_side(e)]->base;
        f = atomic_load(&rx->reader_flags);
        if (!(f & SMC_DMB_READER_X_HUP))
                return false;
        if ((f & SMC_DMB_READER_X_ANCHOR) && e->hold_fd >= 0) {
                /* the anchor byte is in X's queue while X lives: Y's bytes in flight.
                 * None: X is gone. Some: X may be being released, since the kernel
                 * wakes Y (this HUP) before it frees X's queue, and that free is no
                 * edge Y's watch passes (EPOLLOUT): an endpoint kept then would be
                 * kept for good. unix_diag decides (X leaves the table first). */
                uint32_t mem[SK_MEMINFO_VARS] = { 0 };
                socklen_t ml = sizeof(mem);

                if (getsockopt(e->hold_fd, SOL_SOCKET, SO_MEMINFO, mem, &ml) == 0 &&
                    ml > SK_MEMINFO_WMEM_ALLOC * sizeof(uint32_t) && mem[SK_MEMINFO_WMEM_ALLOC] == 0)
                        return false;
        }
        r = sockdiag_unix_exists(m->unixdiag, e->x_ino);
        if (r < 0)
                log_warning_errno(r, "Endpoint %016" PRIx64 ": cannot tell whether its socket is still open, "
                                     "keeping it: %m", e->id);
        return r != 0;
}

void endpoint_on_hold_hup(Endpoint *e) {
        Conn *conn = e->conn;
        Manager *m = conn->manager;
        Endpoint *peer = &conn->ep[!ep_side(e)];

        if (x_lives(m, e)) {
                log_debug("Endpoint %016" PRIx64 ": shut down both ways, its socket still open.", e->id);
                return;
        }
        /* as at a process's last close(2) of a TCP socket: unless the library closed
         * it itself (its CLOSED / ABORT stand), FIN if everything sent to it was
         * read, else RST (died_flags) */
        bool wake = !peer->closed && !conn->restored; /* (a restored one holds no Y) */

        log_debug("Endpoint %016" PRIx64 ": %s.", e->id,
                  e->loaded ? "the process the endpoint table names exited" : "the last copy of its socket is closed");
        /* the flags first (endpoint_close), then the wake-up: the peer reads them when
         * it wakes (dmb.h (4)); in the other order it could read no flag yet and take
         * an abort for an orderly close (EOF instead of ECONNRESET). The peer is open,
         * so the connection outlives endpoint_close(). */
        endpoint_close(m, e, false, true);
        if (wake)
                hold_wake(peer);
}

void endpoint_close(Manager *m, Endpoint *e, bool aborted, bool died) {
        Conn *conn;
        unsigned side;
        Endpoint *peer;
        uint32_t f = 0;

        if (e->smcr) {
                smcr_endpoint_close(m, e, aborted, died);
                return;
        }
        conn = e->conn;
        side = ep_side(e);
        peer = &conn->ep[!side];
        if (e->closed)
                return;
        if (died && conn->restored)
                /* its DMBs are not ours to read: whether it left data unread is
                 * unknown; its peer's library decided from its own socket pair.
                 * Counted as aborted */
                aborted = true;
        else if (died) {
                struct smc_dmb_hdr *own_rx = conn->buf[side]->base, *peer_rx = conn->buf[!side]->base;

                f = died_flags(conn, side);
                if (f == SMC_DMB_CONN_CLOSED && !peer->closed) {
                        /* bytes its cork or MSG_MORE held back (dmb.h prod_held): the
                         * kernel sends a dead process's corked TCP data before its
                         * FIN; an abort drops them, as the RST does */
                        uint32_t n = smc_dmb_publish_held(peer_rx, conn->buf[!side]->size);

                        if (n > 0)
                                log_debug("Endpoint %016" PRIx64 ": %" PRIu32 " bytes it held back published at its end.",
                                          e->id, n);
                }
                if (f && !peer->closed) {
                        /* only add: DONE_WRITING the dead one set stays; the survivor
                         * reads the flag as the writer's state and, when it writes,
                         * as the reader's state: EOF / EPIPE, or ECONNRESET */
                        /* seq_cst: hold_wake() then reads the survivor's
                         * DONE_WRITING, which it sets before it reads these */
                        atomic_fetch_or(&peer_rx->conn_flags, f);
                        atomic_fetch_or(&own_rx->reader_flags, f);
                }
                if (f == 0) /* its own close decided: abort if it left data unread */
                        f = (atomic_load(&peer_rx->conn_flags) | atomic_load(&own_rx->reader_flags)) &
                            SMC_DMB_CONN_ABORT;
                aborted = (f & SMC_DMB_CONN_ABORT) != 0;
        }
        e->closed = true;
        e->aborted = aborted;
        hold_release(m, e);
        proc_watch_detach(m, e);
        eptable_remove(m->eptable, e->ept_slot1);
        e->ept_slot1 = 0;
        u64map_remove(m->endpoints, e->id);
        if (e->owner) {
                Client *owner = e->owner;

                LIST_REMOVE(by_client, owner->endpoints, e);
                e->owner = NULL;
                client_owned_less(owner);
        }
        if (!e->loaded) /* (a loaded one is charged at its REREG) */
                uid_account(m, e->uid, -1, -(int64_t) (conn->restored ? conn->rsize[side] : conn->buf[side]->size));
        e->loaded = false;
        if (conn->restored)
                m->stats.restored_current--; /* its token stays in m->restored until the
                                              * connection is freed (conn_finish) */
        if (side == EP_CLIENT)
                m->stats.conns_client_current--;
        else
                m->stats.conns_server_current--;

        log_debug("Endpoint %016" PRIx64 " (%s%s) closed%s.", e->id, side == EP_CLIENT ? "client" : "server",
                  conn->restored ? ", restored" : "",
                  died && conn->restored ? ", its process exited (counted as aborted: unread data unknown)"
                  : died                 ? (aborted ? ", owner died with data unread (abort)" : ", owner died (orderly close)")
                  : aborted              ? " (abort)"
                                         : "");
        if (peer->closed)
                conn_finish(m, conn);
}

void conn_free_all(Manager *m) {
        size_t st = 0;
        Endpoint *e;
        void *v;

        /* Shutdown: forget the connections without touching the DMBs; the pool is
         * freed next. A Conn is reachable from its open endpoints only. */
        while (u64map_iterate(m->endpoints, &st, NULL, &v)) {
                e = v;
                if (e->smcr) {
                        smcr_conn_free_at_exit(e->smcr);
                        continue;
                }
                Endpoint *peer = &e->conn->ep[!ep_side(e)];
                if (e->hold_fd >= 0)
                        close(e->hold_fd); /* the inner epoll goes next */
                e->hold_fd = -1;
                if (peer->closed) {
                        if (e->conn->tcp_fd >= 0)
                                close(e->conn->tcp_fd);
                        free(e->conn);
                } else
                        e->closed = true;
        }
        u64map_free(m->endpoints);
        m->endpoints = NULL;
        while (m->tombs)
                tomb_free(m, m->tombs);
        st = 0;
        while (u64map_iterate(m->procs, &st, NULL, &v)) {
                ProcWatch *pw = v;

                close(pw->pidfd);
                free(pw);
        }
        u64map_free(m->procs);
        m->procs = NULL;
        m->tomb_timer = sd_event_source_disable_unref(m->tomb_timer);
}

/* The network namespace a CONNECT comes from (manager_find_listener()): that of the
 * client's socket T (@fd, v3), else of its process. Returns false if unknown. */
static bool connect_netns(Client *c, int fd, uint64_t *cookie, uint64_t *netns) {
        *cookie = smcd_sock_netns_cookie(fd);
        *netns = *cookie ? 0 : fd >= 0 ? smcd_sock_netns(fd) : smcd_pid_netns(c->pid);
        return *cookie || *netns;
}

/* Is there a local SMC listener for @dst in the namespace of the CONNECT on @fd?
 * manager_find_listener() without moving the round robin among SO_REUSEPORT
 * listeners (for the server-side fallback count: a listener in another namespace,
 * another container, does not see this connection). */
static bool has_listener(Client *c, const struct smc_ctl_addr *dst, int fd) {
        Manager *m = c->manager;
        PortEntry *pe = u64map_get(m->ports, dst->port);
        uint64_t cookie, netns;
        unsigned rr;
        bool found;

        if (!pe || !connect_netns(c, fd, &cookie, &netns))
                return false;
        rr = pe->rr;
        found = manager_find_listener(m, dst, cookie, netns, fd) != NULL;
        pe->rr = rr;
        return found;
}

/* CONNECT_REPLY TCP with @reason, counted; @fd: the CONNECT's socket T or -1. */
static int reply_fallback(Client *c, uint32_t seq, uint32_t reason, const struct smc_ctl_addr *dst, int fd) {
        union smc_ctl_msg msg;
        char buf[SMCD_ADDR_STRLEN];

        smcd_stats_count_fallback(&c->manager->stats, reason);
        /* a local SMC listener for dst accepts this one over TCP: a server fallback too */
        if (has_listener(c, dst, fd))
                smcd_stats_count_server_fallback(&c->manager->stats, reason);
        log_debug("Client %" PRIu64 ": CONNECT to %s falls back to TCP: %s", c->id, smcd_addr_to_string(dst, buf),
                  smc_clc_decl_name(reason));
        smc_ctl_init(&msg, SMC_CTL_CONNECT_REPLY, seq);
        msg.conn.mode = SMC_CTL_MODE_TCP;
        msg.conn.fallback_reason = reason;
        return client_send(c, &msg, NULL, 0);
}

static void close_fds(int *fds, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (fds[i] >= 0) {
                        close(fds[i]);
                        fds[i] = -1;
                }
}

/* Fill in one buffer descriptor; append the memfd to @fds unless @c has it mapped. */
static void describe_buf(const Client *c, const struct smc_buf *b, struct smc_ctl_buf *d, int *fds, size_t *nfds) {
        d->id = b->id;
        d->size = b->size;
        d->flags = 0;
        if (!c || !u64map_get(c->mapped, b->id)) {
                d->flags = SMC_CTL_BUF_FD;
                fds[(*nfds)++] = b->memfd;
        }
}

static void mark_mapped(Client *c, const struct smc_buf *b) {
        if (!u64map_get(c->mapped, b->id))
                (void) u64map_put(c->mapped, b->id, (void *) 1); /* ENOMEM: we just send the fd again */
}

/* Has the client stopped waiting for this CONNECT? After SMC_CONNECT_TIMEOUT_MS
 * (10 s: smcd stopped, or stuck) its library connects T, the TCP socket it sent, over
 * plain TCP to a loopback destination (or as SMC-R to another host): T is then no
 * longer unconnected. A connection set up for it now would be queued to the listener
 * with nobody at the client's end. A @fd that is no TCP socket: not known to be stale. */
static bool connect_stale(int fd) {
        struct tcp_info ti;
        socklen_t len = sizeof(ti);

        if (fd < 0 || getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0 || len < 1)
                return false;
        return ti.tcpi_state != TCP_CLOSE;
}

/* Set up an SMC-D connection from client @c (its request @seq, its SO_SNDBUF /
 * SO_RCVBUF @sndbuf / @rcvbuf, bytes, 0 = not set) to listener @l: DMBs, doorbell
 * pairs, NEW_CONN to @l's accept channel, CONNECT_REPLY (seq @seq) to @c. The client's
 * addresses are @src (its own, AF_UNSPEC: unbound) and @dst (the listener's as it
 * connected); the server's view is @s_local / @s_peer, or when NULL (one namespace)
 * @dst / @src in the listener's family. *@ret_conn (if not NULL) gets the connection.
 * Returns 0, a fallback reason (> 0: nothing was sent nor kept; the caller answers),
 * or -errno when the reply could not be sent (the client is dropped). */
static int conn_make(Client *c, uint32_t seq, uint32_t sndbuf, uint32_t rcvbuf, Listener *l, bool handover,
                     const struct smc_ctl_addr *src0, const struct smc_ctl_addr *dst0,
                     const struct smc_ctl_addr *s_local, const struct smc_ctl_addr *s_peer, Conn **ret_conn) {
        Manager *m = c->manager;
        /* the RMB the connecting side's reader asks for (SO_RCVBUF, else rmem) */
        unsigned cclass = smc_dmb_class(rcvbuf ? rcvbuf : m->config.rmem ? m->config.rmem : SMC_DMB_DEFAULT_SIZE),
                 sclass, want_cclass, want_sclass;
        uint32_t csize = smc_dmb_class_size(cclass), ssize, reason;
        struct smc_ctl_addr dst = *dst0, src = *src0;
        int ab[2] = { -1, -1 }, bb[2] = { -1, -1 }; /* (X_a, Y_a), (X_b, Y_b) */
        uint64_t ab_ino = 0, bb_ino = 0; /* inode numbers of X_a, X_b (ADOPT_FD) */
        struct smc_buf *cbuf = NULL, *sbuf = NULL;
        int fds[SMC_CTL_MAX_FDS], r;
        union smc_ctl_msg msg;
        uint64_t queued;
        size_t nfds;
        Conn *conn;
        uid_t suid;

        suid = l->uid;
        /* each RMB is the larger of what its reader asks for (SO_RCVBUF, else rmem)
         * and what its writer asks for (SO_SNDBUF, else the sndbuf tunable): the
         * writer writes straight into it (tunables.h). A version-1 listener told us
         * no sizes: its socket's SO_RCVBUF / 2 (dmb_class) and the sndbuf tunable. */
        {
                unsigned s_rd = l->version >= 2 ? smc_dmb_class(l->rcvbuf ? l->rcvbuf : m->config.rmem)
                                                       : l->dmb_class;
                unsigned s_wr = smc_dmb_class(l->version >= 2 && l->sndbuf ? l->sndbuf : m->config.sndbuf);
                unsigned c_wr = smc_dmb_class(sndbuf ? sndbuf : m->config.sndbuf);

                sclass = s_rd > c_wr ? s_rd : c_wr;
                cclass = cclass > s_wr ? cclass : s_wr;
        }
        want_cclass = cclass;
        want_sclass = sclass;
        reason = uid_fit(m, c->uid, suid, &cclass, &sclass);
        if (reason)
                return (int) reason;

        /* (e) the listener's accept queue (not for a hand-over: the kernel moves
         * a closed member's connections whatever the other's backlog) */
        queued = listener_queued(l);
        if (!handover && (queued >= l->queue_max || listener_stalled(l, queued)))
                return (int) SMC_CLC_DECL_PEERDECL;

        /* addresses: connecting to 0.0.0.0 / :: reaches the loopback address; an
         * unbound client gets the destination's address (as the kernel would pick for
         * a local destination) and port 0 */
        if (smcd_addr_is_any(&dst)) {
                memset(dst.addr, 0, sizeof(dst.addr));
                if (dst.family == AF_INET)
                        dst.addr[0] = 127, dst.addr[3] = 1;
                else
                        dst.addr[15] = 1;
        }
        if (src.family == AF_UNSPEC) {
                src = dst;
                src.port = 0;
        }

        /* (c) two zeroed DMBs of the trust domain {client uid, listener uid} */
        /* ... of the classes uid_fit() left, or smaller if the pool is full; the
         * pool counts a "downgrade" for each smaller than wanted */
        r = smc_pool_acquire_fit(m->pool, c->uid, suid, want_cclass, cclass, &cbuf);
        if (r >= 0) {
                r = smc_pool_acquire_fit(m->pool, c->uid, suid, want_sclass, sclass, &sbuf);
                if (r < 0) {
                        manager_release_buf(m, cbuf);
                        cbuf = NULL;
                }
        }
        if (r < 0) {
                log_warning_errno(r, "Cannot get DMBs for a connection of client %" PRIu64 ": %m", c->id);
                return (int) SMC_CLC_DECL_MEM;
        }
        csize = cbuf->size; /* what the connection got: accounted, and the log's */
        ssize = sbuf->size;
        ((struct smc_dmb_hdr *) cbuf->base)->type = SMC_DMB_EYECATCHER;
        ((struct smc_dmb_hdr *) sbuf->base)->type = SMC_DMB_EYECATCHER;
        /* the DMB tokens: after a restart of smcd its two ends prove with them which
         * connection they re-register (REREG) */
        ((struct smc_dmb_hdr *) cbuf->base)->token = manager_random_u64(m);
        ((struct smc_dmb_hdr *) sbuf->base)->token = manager_random_u64(m);
        /* until a writer's library says how far it writes (dmb.h): all of it */
        atomic_store_explicit(&((struct smc_dmb_hdr *) cbuf->base)->data_dirty, SMC_DMB_DIRTY_UNKNOWN,
                              memory_order_relaxed);
        atomic_store_explicit(&((struct smc_dmb_hdr *) sbuf->base)->data_dirty, SMC_DMB_DIRTY_UNKNOWN,
                              memory_order_relaxed);

        /* (d) the doorbell pairs: X is an endpoint's own fd, Y its peer's end */
        r = manager_take_pair(m, ab, &ab_ino);
        if (r >= 0) {
                r = manager_take_pair(m, bb, &bb_ino);
                if (r < 0)
                        close_fds(ab, 2);
        }
        if (r < 0) {
                log_warning_errno(r, "socketpair failed: %m");
                goto fail_buffers;
        }
        /* we can tell a shutdown of both ways from X's last close (by X's inode) */
        if (m->unixdiag && ab_ino != 0 && bb_ino != 0)
                ((struct smc_dmb_hdr *) cbuf->base)->features = ((struct smc_dmb_hdr *) sbuf->base)->features =
                        SMC_DMB_FEAT_X_HUP;

        conn = calloc(1, sizeof(*conn));
        if (!conn) {
                r = -ENOMEM;
                goto fail_buffers;
        }
        conn->buf[EP_CLIENT] = cbuf;
        conn->buf[EP_SERVER] = sbuf;
        conn->manager = m;
        conn->tcp_fd = -1;
        for (unsigned i = 0; i < 2; i++) {
                conn->ep[i].hold_fd = -1;
                conn->ep[i].conn = conn;
                conn->ep[i].id = manager_new_endpoint_id(m);
                /* reserve the id before drawing the second one */
                if (u64map_put(m->endpoints, conn->ep[i].id, &conn->ep[i]) < 0) {
                        if (i == 1)
                                u64map_remove(m->endpoints, conn->ep[0].id);
                        free(conn);
                        r = -ENOMEM;
                        goto fail_buffers;
                }
        }
        conn->ep[EP_CLIENT].uid = c->uid;
        conn->ep[EP_SERVER].uid = suid;
        conn->ep[EP_CLIENT].x_ino = ab_ino; /* X_a */
        conn->ep[EP_SERVER].x_ino = bb_ino; /* X_b */
        conn->listener_id = l->id;
        conn->accept_marked = l->version >= 4;

        /* (f) NEW_CONN to the listener: rx = server DMB, tx = client DMB; (v6) seq:
         * our instance (the channel may outlive us: ctl-proto.h) */
        smc_ctl_init(&msg, SMC_CTL_NEW_CONN, m->instance);
        msg.conn.conn_id = conn->ep[EP_SERVER].id;
        msg.conn.mode = SMC_CTL_MODE_SMCD;
        msg.conn.params.busy_poll_us = m->config.busy_poll_us;   /* the tunables now */
        msg.conn.params.autocork_size = m->config.autocork_size;
        if (s_local && s_peer) {
                msg.conn.local = *s_local;
                msg.conn.peer = *s_peer;
        } else if (!smcd_addr_convert(&dst, l->addr.family, &msg.conn.local) ||
                   !smcd_addr_convert(&src, l->addr.family, &msg.conn.peer)) {
                msg.conn.local = dst;
                msg.conn.peer = src;
        }
        nfds = 0;
        fds[nfds++] = bb[0]; /* X_b */
        fds[nfds++] = ab[1]; /* Y_a */
        /* always both memfds: any process that holds the channel may read the
         * NEW_CONN, one forked before the listener's client mapped a buffer too (it
         * could not map it: the connection was reset, found with two forked workers
         * and a parent that connects). Measured: no change in the connect rate. */
        describe_buf(NULL, sbuf, &msg.conn.rx, fds, &nfds);
        describe_buf(NULL, cbuf, &msg.conn.tx, fds, &nfds);
        if (handover)
                r = listener_send(l, &msg, fds, nfds); /* (counts it) */
        else {
                (void) smc_ctl_set_version(&msg, l->version); /* the listener's client's */
                r = smc_ctl_send(l->channel, &msg, fds, nfds, MSG_DONTWAIT);
                if (r >= 0)
                        l->n_sent++;
        }
        if (r < 0) {
                u64map_remove(m->endpoints, conn->ep[0].id);
                u64map_remove(m->endpoints, conn->ep[1].id);
                free(conn);
                close_fds(ab, 2);
                close_fds(bb, 2);
                /* no process got their memfds: nothing was written */
                manager_release_buf_len(m, cbuf, 0);
                manager_release_buf_len(m, sbuf, 0);
                if (r != -EAGAIN)
                        log_debug_errno(r, "NEW_CONN to listener %" PRIu64 " failed: %m", l->id);
                return (int) SMC_CLC_DECL_PEERDECL;
        }
        close(bb[0]);
        /* smcd keeps Y_a: its HUP says that the last copy of X_a is gone */
        if (hold_take(m, &conn->ep[EP_CLIENT], ab[1]) < 0)
                log_warning("Cannot watch endpoint %016" PRIx64 ": it is freed when its client exits.",
                            conn->ep[EP_CLIENT].id);
        ab[1] = -1;

        /* the connection exists now: both endpoints are owned and counted */
        conn->ep[EP_CLIENT].owner = c;
        conn->ep[EP_CLIENT].local = src;
        conn->ep[EP_CLIENT].peer = dst;
        conn->ep[EP_SERVER].local = msg.conn.local;
        conn->ep[EP_SERVER].peer = msg.conn.peer;
        LIST_PREPEND(by_client, c->endpoints, &conn->ep[EP_CLIENT]);
        /* an orphaned listener's (listener_orphan()): no owner, as a dead owner's */
        conn->ep[EP_SERVER].owner = l->owner;
        if (l->owner)
                LIST_PREPEND(by_client, l->owner->endpoints, &conn->ep[EP_SERVER]);
        uid_account(m, c->uid, 1, csize);
        uid_account(m, suid, 1, ssize);
        ept_record(m, &conn->ep[EP_CLIENT], c->pid, client_pid_start(c));
        if (l->owner)
                ept_record(m, &conn->ep[EP_SERVER], l->owner->pid, client_pid_start(l->owner));
        m->stats.conns_client++;
        m->stats.conns_server++;
        m->stats.conns_client_current++;
        m->stats.conns_server_current++;
        m->stats.conns_current++;
        manager_status_changed(m);

        /* CONNECT_REPLY: rx = client DMB, tx = server DMB */
        smc_ctl_init(&msg, SMC_CTL_CONNECT_REPLY, seq);
        msg.conn.conn_id = conn->ep[EP_CLIENT].id;
        msg.conn.mode = SMC_CTL_MODE_SMCD;
        msg.conn.params.busy_poll_us = m->config.busy_poll_us;
        msg.conn.params.autocork_size = m->config.autocork_size;
        msg.conn.local = src;
        msg.conn.peer = dst;
        nfds = 0;
        fds[nfds++] = ab[0]; /* X_a */
        fds[nfds++] = bb[1]; /* Y_b */
        describe_buf(c, cbuf, &msg.conn.rx, fds, &nfds);
        describe_buf(c, sbuf, &msg.conn.tx, fds, &nfds);
        if (ret_conn)
                *ret_conn = conn;
        r = client_send(c, &msg, fds, nfds);
        close(ab[0]);
        /* ... and Y_b, for X_b */
        if (hold_take(m, &conn->ep[EP_SERVER], bb[1]) < 0)
                log_warning("Cannot watch endpoint %016" PRIx64 ": it is freed when its listener's client exits.",
                            conn->ep[EP_SERVER].id);
        if (r < 0)
                return r; /* the client dies; its endpoint is aborted with it */
        mark_mapped(c, cbuf);
        mark_mapped(c, sbuf);
        {
                char a[SMCD_ADDR_STRLEN], b[SMCD_ADDR_STRLEN];
                log_debug("Client %" PRIu64 ": SMC-D %s -> %s via listener %" PRIu64 ", ids %016" PRIx64
                          "/%016" PRIx64 ", DMBs %" PRIu64 "/%" PRIu64 " of %u/%u KiB",
                          c->id, smcd_addr_to_string(&src, a), smcd_addr_to_string(&dst, b), l->id,
                          conn->ep[EP_CLIENT].id, conn->ep[EP_SERVER].id, cbuf->id, sbuf->id, csize >> 10,
                          ssize >> 10);
        }
        return 0;

fail_buffers:
        close_fds(ab, 2);
        close_fds(bb, 2);
        manager_release_buf(m, cbuf);
        manager_release_buf(m, sbuf);
        return (int) SMC_CLC_DECL_INTERR;
}


static int handle_connect(Client *c, const struct smc_ctl_connect *req, int fd) {
        Manager *m = c->manager;
        uint32_t reason;
        union smc_ctl_msg msg;
        int r;
        uint64_t netns, cookie;
        bool have_ns;
        Listener *l;

        if (connect_stale(fd)) {
                /* (the client counted its fallback, NOSMCDDEV, itself; it discards this
                 * answer, which no thread waits for) */
                log_info("Client %" PRIu64 ": CONNECT seq %" PRIu32 " came after the client stopped waiting for it "
                         "(its socket is connected): nothing set up.",
                         c->id, req->hdr.seq);
                smc_ctl_init(&msg, SMC_CTL_CONNECT_REPLY, req->hdr.seq);
                msg.conn.mode = SMC_CTL_MODE_TCP;
                msg.conn.fallback_reason = SMC_CLC_DECL_NOSMCDDEV;
                return client_send(c, &msg, NULL, 0);
        }

        /* (0) the policy (policy.h): a matching rule with action tcp means TCP */
        {
                const PolicyRule *rule = policy_match(&m->policy, POLICY_SCOPE_CONNECT, &req->src, &req->dst);

                if (rule && rule->action == POLICY_ACTION_TCP) {
                        log_debug("Client %" PRIu64 ": CONNECT: policy rule %" PRIu32 " says tcp.", c->id, rule->id);
                        return reply_fallback(c, req->hdr.seq, SMCD_DECL_POLICY, &req->dst, fd);
                }
        }

        /* the connecting uid's handshake rate (max_handshakes_per_uid) */
        if (!uid_handshake_allowed(m, c->uid))
                return reply_fallback(c, req->hdr.seq, SMCD_DECL_HSRATE, &req->dst, fd);

        /* (a) the connecting uid's limits (bytes: the smallest RMB, see uid_fit()) */
        reason = uid_check(m, c->uid, 1, SMC_DMB_MIN_SIZE);
        if (reason)
                return reply_fallback(c, req->hdr.seq, reason, &req->dst, fd);

        /* (b) an SMC listener for dst on this host; else SMC-R (v3: the client sent its
         * TCP socket), if smcd has a usable RoCE device: the socket is marked for the
         * SMC TCP option, the client connects it and sends SMCR */
        /* (in the network namespace of the client's socket T, else of its process:
         * manager_find_listener()) */
        have_ns = connect_netns(c, fd, &cookie, &netns);
        l = have_ns ? manager_find_listener(m, &req->dst, cookie, netns, fd) : NULL;
        if (!l) {
                union smc_ctl_msg pm;
                /* (b') an SMC listener in another network namespace of this host may
                 * get it (--cross-netns): SMC-D, after CLC on the TCP connection */
                bool ism = fd >= 0 && have_ns && smcr_cross_netns(m->smcr) &&
                           manager_listener_elsewhere(m, &req->dst, cookie, netns, fd);

                if (manager_stopping(m))
                        /* (T unmarked: its SYN offers nothing, no CLC byte follows) */
                        return reply_fallback(c, req->hdr.seq, SMC_CLC_DECL_NOSMCDEV, &req->dst, fd);
                if (fd < 0 || smcr_prepare_connect(m->smcr, &req->src, fd, ism) != 0)
                        return reply_fallback(c, req->hdr.seq, SMC_CLC_DECL_PEERNOSMC, &req->dst, fd);
                m->smcr_pending_until = manager_now(m) + SMCD_STOP_PENDING_USEC;
                smc_ctl_init(&pm, SMC_CTL_CONNECT_REPLY, req->hdr.seq);
                (void) smc_ctl_set_version(&pm, c->version);
                pm.conn.mode = SMC_CTL_MODE_SMCR_PENDING;
                return client_send(c, &pm, NULL, 0);
        }
        r = conn_make(c, req->hdr.seq, req->sndbuf, req->rcvbuf, l, false, &req->src, &req->dst, NULL, NULL, NULL);
        return r > 0 ? reply_fallback(c, req->hdr.seq, (uint32_t) r, &req->dst, fd) : r;
}

int conn_make_netns(Client *c, uint32_t seq, uint32_t sndbuf, uint32_t rcvbuf, uint64_t listener_id,
                    const ListenerGroup *group, const struct smc_ctl_addr *c_local, const struct smc_ctl_addr *c_peer,
                    const struct smc_ctl_addr *s_local, const struct smc_ctl_addr *s_peer, uint64_t *ret_server_ep) {
        Manager *m = c->manager;
        Listener *l = manager_get_listener(m, listener_id);
        Conn *conn = NULL;
        bool handover = false;
        uint32_t reason;
        int r;

        if ((!l || l->channel < 0 || l->unlistened) && group) {
                /* its listener went meanwhile: another of its SO_REUSEPORT group */
                l = listener_group_pick(m, group, 1);
                handover = true;
                if (l)
                        log_debug("Listener %" PRIu64 " went during a handshake: its connection goes to listener %" PRIu64
                                  " of its group.",
                                  listener_id, l->id);
        }
        if (!l || l->channel < 0 || l->unlistened)
                return (int) SMC_CLC_DECL_PEERDECL; /* (none) */
        reason = uid_check(m, c->uid, 1, SMC_DMB_MIN_SIZE);
        if (reason)
                return (int) reason;
        r = conn_make(c, seq, sndbuf, rcvbuf, l, handover, c_local, c_peer, s_local, s_peer, &conn);
        if (r <= 0 && conn) {
                /* (also when the reply failed: the listener has its end) */
                *ret_server_ep = conn->ep[EP_SERVER].id;
                m->stats.conns_netns++;
        }
        return r;
}

void conn_keep_tcp(Manager *m, uint64_t ep_id, int fd) {
        Endpoint *e = u64map_get(m->endpoints, ep_id);

        if (!e || e->smcr || !e->conn || e->conn->restored || e->conn->tcp_fd >= 0) {
                close(fd);
                return;
        }
        e->conn->tcp_fd = fd;
}

int client_reply_fallback(Client *c, const struct smc_ctl_connect *req, int fd, uint32_t reason) {
        return reply_fallback(c, req->hdr.seq, reason, &req->dst, fd);
}

int client_handle_connect(Client *c, const struct smc_ctl_connect *req, int fd) {
        int r = handle_connect(c, req, fd);

        if (fd >= 0)
                close(fd); /* marked or not, the client keeps its own descriptor */
        return r;
}

int client_handle_close(Client *c, const struct smc_ctl_close *req) {
        Manager *m = c->manager;
        Endpoint *e = u64map_get(m->endpoints, req->conn_id);

        /* the owner, or another client of its uid (a forked child: manager.h); other
         * uids learn nothing, not even that the id exists */
        if (!e || e->uid != c->uid) {
                /* not a protocol error: e.g. a connection set up by an smcd that has
                 * restarted since */
                m->stats.close_unknown++;
                return client_send_error(c, req->hdr.seq, ENOENT, 0, "no connection %016" PRIx64 " of this uid",
                                         req->conn_id);
        }
        if (e->owner && e->owner != c && !e->smcr) {
                log_debug("Client %" PRIu64 " (pid %d) closes endpoint %016" PRIx64 " of client %" PRIu64
                          " (pid %d), same uid %u.",
                          c->id, (int) c->pid, e->id, e->owner->id, (int) e->owner->pid, (unsigned) c->uid);
        }
        /* knowing the (unguessable) id proves that this client's process received the
         * NEW_CONN (or inherited it over fork) and so has both buffers mapped */
        if (!e->smcr && !e->conn->restored && ep_side(e) == EP_SERVER) {
                mark_mapped(c, e->conn->buf[EP_CLIENT]);
                mark_mapped(c, e->conn->buf[EP_SERVER]);
        }
        /* the endpoint's uid is the closer's: per-uid accounting needs no transfer */
        endpoint_close(m, e, (req->flags & SMC_CTL_CLOSE_ABORT) != 0, false);
        return 0;
}

void endpoint_conn_msg(Manager *m, union smc_ctl_msg *msg, uint16_t type, uint32_t seq, const Endpoint *e,
                       uint32_t mode) {
        smc_ctl_init(msg, type, seq);
        msg->conn.conn_id = e->id;
        msg->conn.mode = mode;
        msg->conn.params.busy_poll_us = m->config.busy_poll_us; /* the tunables now */
        msg->conn.params.autocork_size = m->config.autocork_size;
        msg->conn.local = e->local;
        msg->conn.peer = e->peer;
}

/* ADOPT_REPLY for @e (SMC-D, open, of @c's uid): both buffers and Y, and @c as its
 * owner if it has none or @e is held (it lives on its X's copies). @how for the log.
 * Returns 0 or a negative errno from sending. */
static int adopt_reply(Client *c, uint32_t seq, Endpoint *e, const char *how) {
        Manager *m = c->manager;
        Endpoint *peer;
        union smc_ctl_msg msg;
        int fds[SMC_CTL_MAX_FDS], dead[2] = { -1, -1 };
        size_t nfds = 0;
        unsigned side;
        int r;

        side = ep_side(e);
        peer = &e->conn->ep[!side];
        endpoint_conn_msg(m, &msg, SMC_CTL_ADOPT_REPLY, seq, e, SMC_CTL_MODE_SMCD);
        /* both memfds, whatever smcd believes this client has mapped */
        describe_buf(NULL, e->conn->buf[side], &msg.conn.rx, fds, &nfds);
        describe_buf(NULL, e->conn->buf[!side], &msg.conn.tx, fds, &nfds);
        /* Y: the end that rings the peer, i.e. smcd's copy held for the peer
         * endpoint; once the peer closed, a dead end (EPIPE: the flags in the DMBs
         * say how it ended) */
        if (peer->hold_fd >= 0)
                fds[nfds++] = peer->hold_fd;
        else {
                if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, dead) < 0)
                        return client_send_error(c, seq, errno, 0, "socketpair: %m");
                close(dead[1]);
                fds[nfds++] = dead[0];
        }
        r = client_send(c, &msg, fds, nfds);
        if (dead[0] >= 0)
                close(dead[0]);
        if (r < 0)
                return r;
        mark_mapped(c, e->conn->buf[EP_CLIENT]);
        mark_mapped(c, e->conn->buf[EP_SERVER]);
        if (e->owner != c && (!e->owner || e->hold_fd >= 0)) {
                /* the asking client owns it now: the old image's (or the sender's)
                 * control connection is gone, or it lives on in a process that has
                 * handed the connection over (inetd: the parent closes its copy after
                 * the fork). A held endpoint lives as long as any copy of its X, not
                 * its owner (client_free()), so taking it changes no lifetime; it
                 * keeps a connection admitted beyond max_clients_per_uid for this
                 * (client_adopted()) from counting as pending */
                Client *old = e->owner;

                if (old)
                        LIST_REMOVE(by_client, old->endpoints, e);
                e->owner = c;
                LIST_PREPEND(by_client, c->endpoints, e);
                client_owned_less(old);
        }
        log_debug("Client %" PRIu64 " (pid %d) adopted endpoint %016" PRIx64 " %s.", c->id, (int) c->pid, e->id, how);
        return 0;
}

/* Can another process image take @e over (ADOPT, ADOPT_FD)? An open SMC-D endpoint
 * this smcd set up: SMC-R endpoints cannot be adopted (smcd is their peer and ended
 * them with the old image's control connection), restored ones have no DMBs of ours
 * to hand out. */
static bool adoptable(const Endpoint *e) {
        return !e->smcr && !e->closed && e->conn && !e->conn->restored;
}

/* ADOPT (ctl-proto.h): a process image that inherited endpoint req->conn_id's X over
 * execve() asks for its buffers again (the old image's mappings are gone with it). */
int client_handle_adopt(Client *c, const struct smc_ctl_adopt *req) {
        Endpoint *e = u64map_get(c->manager->endpoints, req->conn_id);

        /* as CLOSE: other uids learn nothing, not even that the id exists */
        if (!e || e->uid != c->uid || !adoptable(e))
                return client_send_error(c, req->hdr.seq, ENOENT, 0, "no SMC-D connection %016" PRIx64 " of this uid",
                                         req->conn_id);
        return adopt_reply(c, req->hdr.seq, e, "after an exec");
}

/* ADOPT_FD (ctl-proto.h): a process that received an X over a unix socket
 * (SCM_RIGHTS) asks for the endpoint's buffers. @fd is the X it sent (closed here). */
int client_handle_adopt_fd(Client *c, const struct smc_ctl_adopt_fd *req, int fd) {
        Manager *m = c->manager;
        Endpoint *e, *found = NULL;
        struct stat st;
        size_t state = 0;
        uint64_t key;
        void *v;

        if (fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_ino != 0)
                /* a scan: passing a connection is rare next to making one, which
                 * then keeps no index up to date */
                while (!found && u64map_iterate(m->endpoints, &state, &key, &v)) {
                        e = v;
                        if (e->x_ino == (uint64_t) st.st_ino && adoptable(e))
                                found = e;
                }
        close(fd);
        /* another uid's endpoint: as CLOSE, it learns nothing */
        if (!found || found->uid != c->uid)
                return client_send_error(c, req->hdr.seq, ENOENT, 0,
                                         "the descriptor is no open SMC-D connection of this uid");
        return adopt_reply(c, req->hdr.seq, found, "passed over a unix socket");
}

/* REQUEUE (ctl-proto.h): the client gave up listener @req->listener_id (UNLISTEN)
 * and found SMC connection @req->conn_id queued on its channel; @x, @y are its X, Y. As
 * the kernel moves a closed SO_REUSEPORT listener's queued connections to another
 * member of the group (tcp_migrate_req=1), it goes to another listener of the
 * address: found by a server that reloads (a new listener, then the old one drained
 * until EAGAIN and closed), which lost the connections queued to the old one
 * meanwhile (helper 122: 29 of 32.7k between namespaces, 2 of 25.8k in one). */
int client_handle_requeue(Client *c, const struct smc_ctl_requeue *req, int x, int y) {
        Manager *m = c->manager;
        Listener *l = manager_get_listener(m, req->listener_id), *to;
        Endpoint *e = u64map_get(m->endpoints, req->conn_id), *peer;
        int fds[SMC_CTL_MAX_FDS], dead[2] = { -1, -1 }, r;
        union smc_ctl_msg msg;
        ListenerGroup g;
        struct stat st;
        size_t nfds = 0;
        uint32_t flags;
        Conn *conn;

        if (!l || !l->unlistened || l->uid != c->uid || !e || e->uid != c->uid ||
            (e->smcr ? smcr_requeue_check(e, l->id, x, y) == -ENOENT
                     : !adoptable(e) || ep_side(e) != EP_SERVER || e->conn->listener_id != l->id)) {
                r = client_send_error(c, req->hdr.seq, ENOENT, 0,
                                      "no connection %016" PRIx64 " queued to a given up listener %" PRIu64
                                      " of this uid",
                                      req->conn_id, req->listener_id);
                goto out;
        }
        if (e->smcr)
                r = smcr_requeue_check(e, l->id, x, y);
        else {
                conn = e->conn;
                flags = atomic_load_explicit(&((struct smc_dmb_hdr *) conn->buf[EP_SERVER]->base)->reader_flags,
                                             memory_order_acquire);
                r = fstat(x, &st) < 0 || !S_ISSOCK(st.st_mode) || e->x_ino == 0 || (uint64_t) st.st_ino != e->x_ino ||
                                    (flags & SMC_DMB_READER_ACCEPTED)
                            ? -EINVAL
                            : 0;
        }
        if (r < 0) {
                r = client_send_error(c, req->hdr.seq, EINVAL, 0,
                                      "the descriptors are not connection %016" PRIx64 "'s, or it was accepted",
                                      req->conn_id);
                goto out;
        }
        listener_group_of(l, &g);
        to = listener_group_pick(m, &g, e->smcr ? 3 : l->version);
        if (!to || (e->smcr && !to->owner)) {
                r = client_send_error(c, req->hdr.seq, ENOENT, 0,
                                      "no other listener on port %u can take connection %016" PRIx64,
                                      (unsigned) l->addr.port, req->conn_id);
                goto out;
        }
        if (e->smcr) {
                r = smcr_requeue_send(e, x, y, to);
                goto sent;
        }

        /* the NEW_CONN conn_make() sent, on @to's channel: X, Y, both memfds (Y:
         * smcd's copy, which it holds for the peer endpoint) */
        conn = e->conn;
        peer = &conn->ep[EP_CLIENT];
        endpoint_conn_msg(m, &msg, SMC_CTL_NEW_CONN, m->instance, e, SMC_CTL_MODE_SMCD);
        fds[nfds++] = x;
        if (peer->hold_fd >= 0)
                fds[nfds++] = peer->hold_fd;
        else {
                /* the client closed already: a dead Y, as ADOPT_REPLY's (the DMB flags
                 * say how it ended) */
                if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, dead) < 0) {
                        r = client_send_error(c, req->hdr.seq, errno, 0, "socketpair: %m");
                        goto out;
                }
                close(dead[1]);
                fds[nfds++] = dead[0];
        }
        describe_buf(NULL, conn->buf[EP_SERVER], &msg.conn.rx, fds, &nfds);
        describe_buf(NULL, conn->buf[EP_CLIENT], &msg.conn.tx, fds, &nfds);
        r = listener_send(to, &msg, fds, nfds);
        if (dead[0] >= 0)
                close(dead[0]);
        if (r >= 0) {
                conn->listener_id = to->id;
                conn->accept_marked = to->version >= 4;
                /* the endpoint is the new listener's owner's now (NULL: an orphan's, as
                 * conn_make() gives it) */
                if (e->owner != to->owner) {
                        Client *old = e->owner;

                        if (old)
                                LIST_REMOVE(by_client, old->endpoints, e);
                        e->owner = to->owner;
                        if (to->owner) {
                                LIST_PREPEND(by_client, to->owner->endpoints, e);
                                /* (the endpoint table names the process that holds it) */
                                if (e->ept_slot1)
                                        eptable_set_owner(m->eptable, e->ept_slot1, to->owner->pid,
                                                          client_pid_start(to->owner));
                                else
                                        ept_record(m, e, to->owner->pid, client_pid_start(to->owner));
                        } else if (e->ept_slot1) {
                                /* an orphan's (conn_make() records none): the old
                                 * process's exit must not end it after a restart */
                                eptable_remove(m->eptable, e->ept_slot1);
                                e->ept_slot1 = 0;
                        }
                        client_owned_less(old);
                }
        }
sent:
        if (r < 0) {
                r = client_send_error(c, req->hdr.seq, -r, 0,
                                      "NEW_CONN to listener %" PRIu64 " failed: %s", to->id, strerror(-r));
                goto out;
        }
        m->stats.conns_requeued++;
        log_debug("Connection %016" PRIx64 " queued to given up listener %" PRIu64 " moved to listener %" PRIu64 ".",
                  e->id, l->id, to->id);
        smc_ctl_init(&msg, SMC_CTL_OK, req->hdr.seq);
        r = client_send(c, &msg, NULL, 0);
out:
        close(x);
        close(y);
        return r;
}

static int reply_rereg(Client *c, uint32_t seq, uint64_t id) {
        union smc_ctl_msg msg;

        smc_ctl_init(&msg, SMC_CTL_REREG_REPLY, seq);
        msg.rereg_reply.conn_id = id;
        return client_send(c, &msg, NULL, 0);
}

/* A restored endpoint (ctl-proto.h REREG, or a record of the endpoint table): role
 * @side, its rx/tx DMB tokens and ring sizes, its addresses and uid, owned by @owner
 * (NULL: read from the table, not re-registered yet). Joined with its peer when that
 * one is restored with the tokens crosswise (and the ports and sizes), else in a new
 * Conn. It gets a new id, is accounted to @uid (if @account) and counted in the
 * gauges and in restored_current. Returns 1 (joined) or 0 (alone) with *@ret, -EEXIST (its token, or the writer of its
 * peer's DMB, is registered already), -ENOMEM. */
static int restored_attach(Manager *m, unsigned side, uint64_t rx_token, uint64_t tx_token, uint32_t rx_size,
                           uint32_t tx_size, uid_t uid, const struct smc_ctl_addr *local,
                           const struct smc_ctl_addr *peer, Client *owner, bool account, Endpoint **ret) {
        Endpoint *e, *p;
        Conn *conn;
        bool joined = false;
        int r;

        if (u64map_get(m->restored, rx_token))
                return -EEXIST;
        /* its peer re-registered already: the endpoint whose rx DMB is our tx DMB,
         * and whose tx DMB is ours, of the same sizes (each endpoint is accounted to
         * its uid with the size it gave and released with conn->rsize[side]: a peer
         * that told other sizes must not set them) */
        /* ... open, or closed in a tomb (it closed before we re-registered); the
         * ports crosswise too (addresses may differ: 0.0.0.0 dialed, 127.0.0.1 seen) */
        p = u64map_get(m->restored, tx_token);
        if (p && ep_side(p) == !side && (!p->closed || p->conn->tomb) && p->conn->token[side] == rx_token &&
            p->conn->ep[side].id == 0 && p->conn->rsize[side] == rx_size && p->local.port == peer->port &&
            p->peer.port == local->port && p->conn->rsize[!side] == tx_size) {
                conn = p->conn;
                joined = true;
        } else if (p && p->conn->ep[side].id != 0) {
                /* the DMB we say we write has its writer registered already */
                return -EEXIST;
        } else {
                conn = calloc(1, sizeof(*conn));
                if (!conn)
                        return -ENOMEM;
                conn->manager = m;
                conn->tcp_fd = -1;
                conn->restored = true;
                conn->token[side] = rx_token;
                conn->token[!side] = tx_token;
                conn->rsize[side] = rx_size;
                conn->rsize[!side] = tx_size;
                for (unsigned i = 0; i < 2; i++) {
                        conn->ep[i].conn = conn;
                        conn->ep[i].hold_fd = -1;
                        conn->ep[i].closed = true; /* until an endpoint fills the slot */
                }
        }
        e = &conn->ep[side];
        e->id = manager_new_endpoint_id(m);
        r = u64map_put(m->endpoints, e->id, e);
        if (r >= 0) {
                r = u64map_put(m->restored, rx_token, e);
                if (r < 0)
                        u64map_remove(m->endpoints, e->id);
        }
        if (r < 0) {
                e->id = 0;
                if (!joined)
                        free(conn);
                return -ENOMEM;
        }
        e->closed = false;
        e->aborted = false;
        e->uid = uid;
        e->local = *local;
        e->peer = *peer;
        e->owner = owner;
        if (owner)
                LIST_PREPEND(by_client, owner->endpoints, e);
        if (account)
                uid_account(m, uid, 1, rx_size);
        if (side == EP_CLIENT)
                m->stats.conns_client_current++;
        else
                m->stats.conns_server_current++;
        if (joined && conn->tomb) {
                /* its other end closed before we came: the connection was counted
                 * as ended then (conn->counted), and ends again without a count */
                LIST_REMOVE(tombs, m->tombs, conn);
                m->n_tombs--;
                conn->tomb = false;
        }
        if (!joined || conn->counted)
                m->stats.conns_current++;
        m->stats.restored_current++;
        manager_status_changed(m);
        *ret = e;
        return joined;
}

/* REREG (ctl-proto.h): an endpoint of a connection an earlier smcd set up. This smcd
 * cannot check the claim against buffers it does not have: it believes the sizes and
 * addresses (they only describe the sender's own endpoint, accounted to its uid), and
 * it trusts the DMB tokens only to join two endpoints (a token is readable only by
 * the processes that map its DMB). Nothing it keeps gives access to anything. */
int client_handle_rereg(Client *c, const struct smc_ctl_rereg *req) {
        Manager *m = c->manager;
        unsigned side = req->role == SMC_CTL_ROLE_SERVER ? EP_SERVER : EP_CLIENT;
        UidUsage *u = uid_usage(m, c->uid, false);
        Endpoint *e;
        int r;

        if (req->instance == m->instance)
                return client_send_error(c, req->hdr.seq, EPROTO, 0,
                                         "endpoint %016" PRIx64 " was set up by this smcd: nothing to re-register",
                                         req->conn_id);
        if ((e = u64map_get(m->restored, req->rx_token)) && e->loaded) {
                /* read from the endpoint table at our start: its process confirms it
                 * (the tokens prove it maps the DMBs; the addresses are the table's) */
                if (e->uid != c->uid || ep_side(e) != side || e->conn->token[!side] != req->tx_token || e->closed ||
                    e->conn->rsize[side] != req->rx_size || e->conn->rsize[!side] != req->tx_size)
                        return client_send_error(c, req->hdr.seq, EEXIST, 0,
                                                 "another endpoint was recorded with this DMB token");
                /* from now on its owner's control connection ends it, as any
                 * restored endpoint; charged to its uid now */
                proc_watch_detach(m, e);
                e->loaded = false;
                uid_account(m, e->uid, 1, e->conn->rsize[side]);
                e->owner = c;
                LIST_PREPEND(by_client, c->endpoints, e);
                if (client_pid_start(c)) /* (unreadable: the table's owner stays) */
                        eptable_set_owner(m->eptable, e->ept_slot1, c->pid, client_pid_start(c));
                m->stats.rereg_total++;
                manager_status_changed(m);
                log_debug("Client %" PRIu64 " (pid %d) confirmed endpoint %016" PRIx64 " of smcd %08" PRIx32
                          " (recorded in the endpoint table) as %016" PRIx64 ".",
                          c->id, (int) c->pid, req->conn_id, req->instance, e->id);
                return reply_rereg(c, req->hdr.seq, e->id);
        }
        /* the same endpoint again (a copy in a forked process, or a retry after a lost
         * reply): the same id */
        if (e) {
                /* (an endpoint confirmed from the table has the table's addresses,
                 * which may be written otherwise than the library's: 0.0.0.0 dialed,
                 * v4-mapped; its tokens prove it) */
                if (e->uid != c->uid || ep_side(e) != side || e->conn->token[!side] != req->tx_token || e->closed ||
                    e->conn->rsize[side] != req->rx_size || e->conn->rsize[!side] != req->tx_size ||
                    (!e->from_table && (memcmp(&e->local, &req->local, sizeof(e->local)) != 0 ||
                                        memcmp(&e->peer, &req->peer, sizeof(e->peer)) != 0)))
                        return client_send_error(c, req->hdr.seq, EEXIST, 0,
                                                 "another endpoint was re-registered with this DMB token");
                if (!e->owner) {
                        e->owner = c;
                        LIST_PREPEND(by_client, c->endpoints, e);
                }
                return reply_rereg(c, req->hdr.seq, e->id);
        }
        /* the endpoint limit (the bytes exist already: counted, never refused) */
        if (m->config.max_conns_per_uid && u && u->endpoints + 1 > m->config.max_conns_per_uid)
                return client_send_error(c, req->hdr.seq, EMFILE, SMC_CLC_DECL_MAXCONNERR,
                                         "uid %u has %" PRIu64 " SMC endpoints (max_conns_per_uid)",
                                         (unsigned) c->uid, u->endpoints);

        r = restored_attach(m, side, req->rx_token, req->tx_token, req->rx_size, req->tx_size, c->uid, &req->local,
                            &req->peer, c, true, &e);
        if (r == -EEXIST)
                return client_send_error(c, req->hdr.seq, EEXIST, 0,
                                         "the peer's DMB of this token has its other endpoint registered");
        if (r < 0)
                return client_send_error(c, req->hdr.seq, ENOMEM, 0, "out of memory");
        ept_record(m, e, c->pid, client_pid_start(c));
        m->stats.rereg_total++;
        {
                char a[SMCD_ADDR_STRLEN], b[SMCD_ADDR_STRLEN];

                log_debug("Client %" PRIu64 " (pid %d) re-registered endpoint %016" PRIx64 " of smcd %08" PRIx32
                          " (%s %s -> %s) as %016" PRIx64 "%s.",
                          c->id, (int) c->pid, req->conn_id, req->instance, side == EP_CLIENT ? "client" : "server",
                          smcd_addr_to_string(&req->local, a), smcd_addr_to_string(&req->peer, b), e->id,
                          r > 0 ? ", joined with its peer" : "");
        }
        return reply_rereg(c, req->hdr.seq, e->id);
}

/* One record of the endpoint table an earlier smcd left: restore the endpoint if the
 * process it names is still the one that ran then (pidfd_open(2), then its start
 * time: a pid reused since is another process). Its exit closes the endpoint (the
 * pidfd is watched as a Y copy would be). Returns 1 (restored), 0 (its process is
 * gone, or the record repeats one restored already), or -ENOMEM. */
static int restore_loaded(Manager *m, const struct smcd_ept_record *rec) {
        unsigned side = rec->role == SMC_CTL_ROLE_SERVER ? EP_SERVER : EP_CLIENT;
        ProcWatch *pw;
        Endpoint *e;
        bool gone;
        int r;

        pw = proc_watch_get(m, rec->pid, rec->pid_start, &gone);
        if (gone)
                return 0;
        r = restored_attach(m, side, rec->rx_token, rec->tx_token, rec->rx_size, rec->tx_size, rec->uid, &rec->local,
                            &rec->peer, NULL, false, &e);
        if (r < 0) {
                if (pw && !pw->endpoints)
                        proc_watch_free(m, pw);
                return r == -EEXIST ? 0 : r;
        }
        e->loaded = true;
        e->from_table = true;
        e->table_pid = rec->pid;
        if (pw) {
                e->proc = pw;
                LIST_PREPEND(by_client, pw->endpoints, e);
        }
        ept_record(m, e, rec->pid, rec->pid_start);
        m->stats.restored_loaded++;
        log_debug("Endpoint %016" PRIx64 " of the endpoint table (pid %d, uid %u, %s) restored as %016" PRIx64 "%s%s.",
                  rec->id, (int) rec->pid, (unsigned) rec->uid, side == EP_CLIENT ? "client" : "server", e->id,
                  r > 0 ? ", joined with its peer" : "", pw ? "" : ", unwatched");
        return 1;
}

/* Without a table of our own, the old one must go: a later smcd would restore from it
 * connections that ended meanwhile. */
static void remove_old_table(Manager *m) {
        char path[4096];

        if ((size_t) snprintf(path, sizeof(path), "%s/%s", m->config.runtime_dir, SMCD_EPT_NAME) >= sizeof(path))
                return;
        if (unlink(path) < 0 && errno != ENOENT && errno != EISDIR)
                log_warning_errno(-errno, "Cannot remove the old endpoint table %s (%m): a later smcd may list "
                                  "connections that ended.",
                                  path);
}

void conn_load_table(Manager *m) {
        struct smcd_ept_record *recs = NULL;
        unsigned kept = 0, gone = 0;
        int n, r;

        n = eptable_load(m->config.runtime_dir, &recs);
        if (n < 0 && n != -ENOENT)
                log_warning_errno(n, "Ignoring the endpoint table in %s (%m): the connections of an earlier smcd "
                                  "are known once their processes re-register them.",
                                  m->config.runtime_dir);
        r = eptable_create(m->config.runtime_dir, m->instance, n > 0 ? 2u * (uint32_t) n : 0, &m->eptable);
        if (r < 0) {
                log_warning_errno(r, "Cannot create the endpoint table in %s (%m): a later smcd learns our "
                                  "connections from their processes only.",
                                  m->config.runtime_dir);
                remove_old_table(m);
        }
        for (int i = 0; i < n; i++) {
                r = restore_loaded(m, &recs[i]);
                if (r > 0)
                        kept++;
                else
                        gone++;
        }
        free(recs);
        if (m->eptable && (r = eptable_commit(m->eptable)) < 0) {
                log_warning_errno(r, "Cannot install the endpoint table (%m): a later smcd learns our connections "
                                  "from their processes only.");
                m->eptable = eptable_free(m->eptable);
                remove_old_table(m);
        }
        if (n > 0)
                log_info("Endpoint table of an earlier smcd: %u endpoint(s) restored, %u of processes gone since "
                         "dropped.",
                         kept, gone);
}

int client_handle_rereg_done(Client *c, const struct smc_ctl_rereg_done *req) {
        Manager *m = c->manager;
        unsigned swept = 0;
        ProcWatch *pw;
        Endpoint *e, *n;

        if (req->instance != m->instance)
                return client_send_error(c, req->hdr.seq, EPROTO, 0,
                                         "REREG_DONE names smcd %08" PRIx32 ", this is %08" PRIx32, req->instance,
                                         m->instance);
        if (!(req->flags & SMC_CTL_REREG_DONE_ALL))
                return 0; /* it left some out: any loaded one may be one of those */
        pw = u64map_get(m->procs, (uint64_t) c->pid);
        if (!pw || pw->start != client_pid_start(c))
                return 0;
        /* what it holds it re-registered (confirmed: off this list); what is left it
         * closed while no smcd heard it. Server ends only if its listeners were never
         * shared: else a child of it may hold them */
        for (e = pw->endpoints; e; e = n) {
                n = e->by_client_next;
                if (e->uid != c->uid || (ep_side(e) == EP_SERVER && !(req->flags & SMC_CTL_REREG_DONE_SERVERS)))
                        continue;
                endpoint_close(m, e, false, false); /* (the last one frees pw) */
                swept++;
        }
        if (swept) {
                m->stats.restored_swept += swept;
                log_info("Client %" PRIu64 " (pid %d) re-registered all it holds: %u restored endpoint(s) it "
                         "closed while no smcd heard it end now.",
                         c->id, (int) c->pid, swept);
        }
        return 0;
}
