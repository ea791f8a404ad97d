/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* smcd manager: the control socket, clients, request dispatch, stats, sd_notify. */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "log.h"
#include "fileio.h"
#include "manager.h"
#include "smcr.h"
#include "manager-bus.h"
#include "smc-clc.h"

#define CLIENT_SNDBUF (256 * 1024)
#define CLIENT_BATCH 64   /* messages handled per wakeup of one client (fairness) */
#define ACCEPT_BATCH 64
#define WATCH_BATCH 128   /* ready client sockets / channels handled per wakeup */
#define RECLAIM_IDLE_BATCH 4 /* released buffers cleared per idle turn */
#define ACCEPT_RETRY_USEC 100000u /* accept4 out of fds or memory: pause this long */
#define MAX_CLIENTS_CAP 4096u
#define STATUS_INTERVAL_USEC 1000000u

static void client_free(Client *c, bool died);

void manager_config_done(ManagerConfig *c) {
        free(c->runtime_dir);
        free(c->allow_uids);
        free(c->allow_gids);
        for (char **p = c->roce_devs; p && *p; p++)
                free(*p);
        free(c->roce_devs);
        *c = (ManagerConfig) {};
}

uint64_t manager_now(Manager *m) {
        uint64_t t = 0;

        (void) sd_event_now(m->event, CLOCK_MONOTONIC, &t);
        return t;
}

/* ---- sd_notify STATUS= ---- */

static void status_send(Manager *m) {
        char *s = NULL;
        size_t n_listeners = (size_t) m->stats.listeners;

        if (asprintf(&s, "STATUS=%" PRIu64 " clients, %" PRIu64 " connections, %zu listeners",
                     m->stats.clients, m->stats.conns_current, n_listeners) < 0)
                return;
        if (m->status_last && strcmp(m->status_last, s) == 0) {
                free(s);
                return;
        }
        (void) sd_notify(false, s);
        free(m->status_last);
        m->status_last = s;
        m->status_last_usec = manager_now(m);
}

/* Give back the buffers that stayed free for a whole interval (pool.h), keeping the
 * pre-populated ones, and re-arm (every --pool-idle-sec). */
static int on_pool_trim(sd_event_source *s, uint64_t usec, void *userdata) {
        Manager *m = userdata;
        unsigned keep[SMC_DMB_NCLASSES] = { 0 };
        unsigned n;

        keep[smc_dmb_class(SMC_DMB_DEFAULT_SIZE)] = m->config.prepopulate;
        n = smc_pool_trim_idle(m->pool, keep);
        if (n > 0)
                log_debug("Gave back %u idle buffers.", n);
        if (sd_event_source_set_time(s, usec + m->config.pool_idle_usec) >= 0)
                (void) sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
        return 0;
}

static int on_status_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        Manager *m = userdata;

        m->status_timer = sd_event_source_unref(m->status_timer);
        status_send(m);
        return 0;
}

void manager_status_changed(Manager *m) {
        uint64_t now = manager_now(m);

        if (m->status_timer || m->exiting)
                return;
        if (now >= m->status_last_usec + STATUS_INTERVAL_USEC) {
                status_send(m);
                return;
        }
        if (sd_event_add_time(m->event, &m->status_timer, CLOCK_MONOTONIC,
                              m->status_last_usec + STATUS_INTERVAL_USEC, 0, on_status_timer, m) < 0)
                m->status_timer = NULL;
}

/* ---- stats ---- */

int manager_write_stats(Manager *m) {
        struct smc_pool_stats ps;
        int r;

        if (m->pool)
                smc_pool_get_stats(m->pool, &ps);
        r = smcd_stats_write_json(&m->stats, m->pool ? &ps : NULL, m->stats_path);
        if (r < 0)
                return log_error_errno(r, "Failed to write %s: %m", m->stats_path);
        log_debug("Wrote %s (seq %" PRIu64 ")", m->stats_path, m->stats.seq);
        return 0;
}

#define SMCD_STOP_POLL_USEC (20 * 1000ULL) /* how often a stopping smcd looks again */

/* Stopping: may smcd exit now? When no CLC handshake runs and no CONNECT answered
 * SMCR_PENDING may still send its SMCR (manager.h, SMCD_STOP_DRAIN_USEC). */
static bool stop_drained(Manager *m) {
        return smcr_handshakes(m->smcr) == 0 && manager_now(m) >= m->smcr_pending_until;
}

static int on_stop_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        Manager *m = userdata;

        (void) usec;
        if (stop_drained(m)) {
                log_info("The CLC handshakes in flight have ended: exiting.");
                return sd_event_exit(m->event, 0);
        }
        if (manager_now(m) >= m->stop_deadline_usec) {
                log_info("%u CLC handshakes still in flight after %llu s: exiting (they end).",
                         smcr_handshakes(m->smcr), (unsigned long long) (SMCD_STOP_DRAIN_USEC / 1000000ULL));
                return sd_event_exit(m->event, 0);
        }
        (void) sd_event_source_set_time_relative(s, SMCD_STOP_POLL_USEC);
        (void) sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
        return 0;
}

static int on_signal(sd_event_source *s, const struct signalfd_siginfo *si, void *userdata) {
        Manager *m = userdata;

        if (si->ssi_signo == SIGUSR1) {
                (void) manager_write_stats(m);
                return 0;
        }
        if (si->ssi_signo == SIGHUP) {
                /* (a hangup of the terminal a foreground smcd ran in must not end it
                 * silently; configuration changes go through smcctl set) */
                log_info("Received SIGHUP: ignored (nothing to reload: tunables change with smcctl set, the "
                         "configuration file is read at start).");
                return 0;
        }
        if (m->stopping) {
                log_info("Received %s again: exiting now.", strsignal((int) si->ssi_signo));
                return sd_event_exit(m->event, 0);
        }
        (void) sd_notify(false, "STOPPING=1");
        m->stopping = true;
        m->stop_deadline_usec = manager_now(m) + SMCD_STOP_DRAIN_USEC;
        if (stop_drained(m)) {
                log_info("Received %s, exiting.", strsignal((int) si->ssi_signo));
                return sd_event_exit(m->event, 0);
        }
        log_info("Received %s: exiting when the CLC handshakes in flight (%u now, and those of connects told to "
                 "start one in the last second) have ended (at most %llu s).",
                 strsignal((int) si->ssi_signo), smcr_handshakes(m->smcr),
                 (unsigned long long) (SMCD_STOP_DRAIN_USEC / 1000000ULL));
        if (sd_event_add_time_relative(m->event, &m->stop_timer, CLOCK_MONOTONIC, SMCD_STOP_POLL_USEC, 1000,
                                       on_stop_timer, m) < 0)
                return sd_event_exit(m->event, 0);
        return 0;
}

/* ---- sending ---- */

int client_send(Client *c, const union smc_ctl_msg *msg, const int *fds, size_t nfds) {
        union smc_ctl_msg v;
        int r;

        if (msg->hdr.version != c->version) {
                /* in the client's protocol version (ctl-proto.h) */
                memcpy(&v, msg, msg->hdr.len);
                if (smc_ctl_set_version(&v, c->version) < 0)
                        return log_error_errno(EINVAL, "Cannot send message type %u in version %u.",
                                               msg->hdr.type, c->version);
                msg = &v;
        }
        r = smc_ctl_send(c->fd, msg, fds, nfds, MSG_DONTWAIT);

        if (r == -EAGAIN)
                /* never block on a client: one that does not read is treated as dead */
                return log_warning_errno(ENOBUFS, "Client %" PRIu64 " (pid %d) does not read its replies, disconnecting.",
                                         c->id, (int) c->pid);
        if (r < 0)
                return log_debug_errno(r, "Failed to send to client %" PRIu64 ": %m", c->id);
        return 0;
}

int client_send_error(Client *c, uint32_t seq, int error, uint32_t detail, const char *fmt, ...) {
        union smc_ctl_msg msg;
        va_list ap;

        smc_ctl_init(&msg, SMC_CTL_ERROR, seq);
        msg.error.error = -abs(error);
        msg.error.detail = detail;
        va_start(ap, fmt);
        vsnprintf(msg.error.msg, sizeof(msg.error.msg), fmt, ap);
        va_end(ap);
        log_debug("Client %" PRIu64 ": ERROR seq %u: %s (%s)", c->id, seq, msg.error.msg, strerror(abs(error)));
        return client_send(c, &msg, NULL, 0);
}

/* ---- requests ---- */

static int client_handle_hello(Client *c, const struct smc_ctl_hello *req) {
        union smc_ctl_msg msg;
        int r;

        if (c->hello_done) {
                c->manager->stats.handshake_errors++;
                return client_send_error(c, req->hdr.seq, EALREADY, 0, "HELLO already done");
        }
        /* the highest version both speak */
        if (req->proto_min > SMC_CTL_VERSION || req->proto_max < SMC_CTL_VERSION_MIN) {
                c->manager->stats.handshake_errors++;
                return client_send_error(c, req->hdr.seq, EPROTONOSUPPORT, 0,
                                         "protocol versions %u..%u not supported, smcd speaks %u..%u",
                                         req->proto_min, req->proto_max, SMC_CTL_VERSION_MIN, SMC_CTL_VERSION);
        }
        c->version = (uint16_t) (req->proto_max < SMC_CTL_VERSION ? req->proto_max : SMC_CTL_VERSION);
        smc_ctl_init(&msg, SMC_CTL_HELLO_REPLY, req->hdr.seq);
        msg.hello_reply.version = c->version;
        msg.hello_reply.client_id = c->id;
        msg.hello_reply.instance = c->manager->instance;
        r = client_send(c, &msg, NULL, 0);
        if (r < 0)
                return r;
        c->hello_done = true;
        log_debug("Client %" PRIu64 ": HELLO done, protocol version %u", c->id, c->version);
        return 0;
}

static const char *decode_error_text(int r) {
        switch (r) {
        case -EBADMSG: return "malformed message (magic, length or field value)";
        case -EPROTONOSUPPORT: return "protocol version not supported";
        case -EOPNOTSUPP: return "unknown message type or wrong direction";
        case -EBADF: return "wrong number of file descriptors for the message type";
        case -EMFILE: return "smcd is out of file descriptors: the message's were dropped";
        default: return "cannot receive message";
        }
}

/* A control connection beyond max_clients_per_uid is admitted for one purpose: a
 * process image that inherited SMC connections across execve() must take them over
 * (ADOPT, ADOPT_FD; REREG after an smcd restart), or they are reset, where TCP goes
 * on (helper 112: an inetd-style server, socat fork EXEC, with 150 clients of one
 * uid: 24 reset). Refused at accept as before beyond CLIENTS_PENDING_MAX such
 * connections of a uid that have adopted nothing yet, so that idle connections
 * cannot take more than that over the limit; one that has adopted lives as long as
 * its process, and is pending again once it holds nothing (client_owned_less()):
 * so a uid's connections beyond the limit stay fewer than its endpoints and
 * listeners + CLIENTS_PENDING_MAX. */
#define CLIENTS_PENDING_MAX 32

/* What such a connection may ask besides adopting: what its adopted connections need. */
static bool over_limit_may(uint16_t type) {
        switch (type) {
        case SMC_CTL_HELLO:
        case SMC_CTL_ADOPT:
        case SMC_CTL_ADOPT_FD:
        case SMC_CTL_REQUEUE:
        case SMC_CTL_REREG:
        case SMC_CTL_REREG_DONE:
        case SMC_CTL_CLOSE:
        case SMC_CTL_UNLISTEN:
        case SMC_CTL_FALLBACK:
        case SMC_CTL_FALLBACK_COUNT:
                return true;
        default:
                return false;
        }
}

/* After an adoption request: a connection over the limit that holds endpoints now
 * is no longer pending. */
static void client_adopted(Client *c) {
        UidUsage *u;

        if (!c->pending || !c->endpoints)
                return;
        c->pending = false;
        u = uid_usage(c->manager, c->uid, false);
        if (u)
                u->clients_pending--;
}

void client_owned_less(Client *c) {
        UidUsage *u;

        if (!c || !c->over_limit || c->pending || c->endpoints || c->listeners)
                return;
        c->pending = true;
        u = uid_usage(c->manager, c->uid, false);
        if (u)
                u->clients_pending++;
}

/* Anything else from a connection over the limit: a CONNECT goes to TCP (reason
 * SMCD_DECL_MAXCLIENTS, counted as a fallback), the rest is refused (EUSERS); a
 * connection that adopted nothing is closed then, as it was refused at accept before
 * (its library connects again for the next request). */
static int client_over_limit(Client *c, const union smc_ctl_msg *msg, int *fds, int n) {
        Manager *m = c->manager;
        int r;

        m->stats.clients_over_limit++;
        if (msg->hdr.type == SMC_CTL_CONNECT)
                r = client_reply_fallback(c, &msg->connect, n > 0 ? fds[0] : -1, SMCD_DECL_MAXCLIENTS);
        else
                r = client_send_error(c, msg->hdr.seq, EUSERS, SMCD_DECL_MAXCLIENTS,
                                      "too many control connections for uid %u", (unsigned) c->uid);
        for (int i = 0; i < n; i++)
                close(fds[i]);
        if (r < 0)
                return r;
        return c->endpoints || c->listeners ? 0 : -EUSERS;
}

/* Handle one message. Returns 0 to go on, 1 when nothing is left to read, or a
 * negative errno to disconnect the client (-ECONNRESET at EOF). */
static int client_process_one(Client *c) {
        union smc_ctl_msg msg;
        int fds[SMC_CTL_MAX_FDS];
        int n, r;

        n = smc_ctl_recv(c->fd, &msg, fds, SMC_CTL_TO_DAEMON, MSG_DONTWAIT);
        if (n == -EAGAIN)
                return 1;
        if (n == -ENOMEM || n == -ENOBUFS)
                return 1; /* transient: try again on the next wakeup */
        if (n < 0 && n != -EBADMSG && n != -EPROTONOSUPPORT && n != -EOPNOTSUPP && n != -EBADF && n != -EMFILE)
                return n; /* recvmsg failed: the socket is broken */
        if (n < 0) {
                c->manager->stats.handshake_errors++;
                if (n == -EPROTONOSUPPORT)
                        return client_send_error(c, msg.hdr.seq, -n, 0,
                                                 "protocol version %u not supported, smcd speaks %u..%u",
                                                 msg.hdr.version, SMC_CTL_VERSION_MIN, SMC_CTL_VERSION);
                return client_send_error(c, msg.hdr.seq, -n, 0, "%s", decode_error_text(n));
        }
        if (c->hello_done && msg.hdr.version != c->version && msg.hdr.type != SMC_CTL_HELLO) {
                for (int i = 0; i < n; i++)
                        close(fds[i]);
                c->manager->stats.handshake_errors++;
                return client_send_error(c, msg.hdr.seq, EPROTONOSUPPORT, 0,
                                         "message of protocol version %u on a connection of version %u",
                                         msg.hdr.version, c->version);
        }

        if (!c->hello_done && msg.hdr.type != SMC_CTL_HELLO) {
                for (int i = 0; i < n; i++)
                        close(fds[i]);
                c->manager->stats.handshake_errors++;
                return client_send_error(c, msg.hdr.seq, EPROTO, 0, "the first message must be HELLO");
        }

        if (c->over_limit && !over_limit_may(msg.hdr.type))
                return client_over_limit(c, &msg, fds, n);

        switch (msg.hdr.type) {
        case SMC_CTL_HELLO:
                return client_handle_hello(c, &msg.hello);
        case SMC_CTL_LISTEN:
                /* takes the fds (3 for a revive: ctl-proto.h) */
                return client_handle_listen(c, &msg.listen, fds[0], n == 3 ? fds[1] : -1, n == 3 ? fds[2] : -1);
        case SMC_CTL_UNLISTEN:
                return client_handle_unlisten(c, &msg.unlisten);
        case SMC_CTL_LISTEN_DEPOSIT:
                return client_handle_listen_deposit(c, &msg.listen_deposit, fds[0], fds[1]); /* takes the fds */
        case SMC_CTL_CONNECT: {
                /* the "connect" histogram (stats.h): decoded request to reply sent */
                struct timespec t0, t1;

                clock_gettime(CLOCK_MONOTONIC, &t0);
                r = client_handle_connect(c, &msg.connect, n > 0 ? fds[0] : -1); /* takes the fd */
                clock_gettime(CLOCK_MONOTONIC, &t1);
                if (r >= 0)
                        smc_hist_add(&c->manager->stats.connect,
                                     (uint64_t) ((t1.tv_sec - t0.tv_sec) * 1000000000 + (t1.tv_nsec - t0.tv_nsec)));
                return r;
        }
        case SMC_CTL_CLOSE:
                return client_handle_close(c, &msg.close);
        case SMC_CTL_ADOPT:
                r = client_handle_adopt(c, &msg.adopt);
                client_adopted(c);
                return r;
        case SMC_CTL_ADOPT_FD:
                r = client_handle_adopt_fd(c, &msg.adopt_fd, fds[0]); /* takes the fd */
                client_adopted(c);
                return r;
        case SMC_CTL_REQUEUE:
                return client_handle_requeue(c, &msg.requeue, fds[0], fds[1]); /* takes the fds */
        case SMC_CTL_REREG:
                r = client_handle_rereg(c, &msg.rereg);
                client_adopted(c);
                return r;
        case SMC_CTL_REREG_DONE:
                return client_handle_rereg_done(c, &msg.rereg_done);
        case SMC_CTL_FALLBACK:
                return client_handle_fallback(c, &msg.fallback);
        case SMC_CTL_FALLBACK_COUNT:
                /* counted only: the library decided alone, from the hints (hints.h) */
                if (msg.fallback_count.role == SMC_CTL_ROLE_CLIENT)
                        smcd_stats_count_fallback_n(&c->manager->stats, msg.fallback_count.reason,
                                                    msg.fallback_count.count);
                else
                        smcd_stats_count_server_fallback_n(&c->manager->stats, msg.fallback_count.reason,
                                                           msg.fallback_count.count);
                return 0;
        case SMC_CTL_SMCR:
                return client_handle_smcr(c, &msg.smcr, fds[0]); /* takes the fd */
        default:
                /* smc_ctl_recv() let through a type that travels to the daemon but
                 * that we do not know: cannot happen with a matching codec */
                for (int i = 0; i < n; i++)
                        close(fds[i]);
                c->manager->stats.handshake_errors++;
                r = client_send_error(c, msg.hdr.seq, EOPNOTSUPP, 0, "message type %u not handled",
                                      msg.hdr.type);
                return r;
        }
}

/* Handle one message of @c. Returns true if @c may have more (it is still there),
 * false if it has none or was dropped (freed). */
static bool client_on_io_one(Client *c) {
        int r = client_process_one(c);

        if (r == 0)
                return true;
        if (r > 0)
                return false;
        if (r == -ECONNRESET)
                log_debug("Client %" PRIu64 " (pid %d) disconnected.", c->id, (int) c->pid);
        else
                log_debug_errno(r, "Disconnecting client %" PRIu64 " (pid %d): %m", c->id, (int) c->pid);
        client_free(c, true);
        return false;
}

/* ---- the inner epoll of client sockets and accept channels ---- */

int manager_watch(Manager *m, int fd, uint32_t events, uint64_t key, void *obj) {
        struct epoll_event ev = { .events = events, .data.u64 = key };
        int r;

        r = u64map_put(m->watches, key, obj);
        if (r < 0)
                return r;
        if (epoll_ctl(m->watch_fd, EPOLL_CTL_ADD, fd, &ev) < 0) {
                r = -errno;
                u64map_remove(m->watches, key);
                return r;
        }
        return 0;
}

void manager_unwatch(Manager *m, int fd, uint64_t key) {
        if (!u64map_remove(m->watches, key))
                return;
        (void) epoll_ctl(m->watch_fd, EPOLL_CTL_DEL, fd, NULL);
}

/* One wakeup of the inner epoll: handle a bounded batch of ready fds. Objects are
 * found by key, so an event of one freed earlier in the batch (a listener of a
 * client that died just before) is dropped. Level triggered: whatever is left, or
 * ready beyond the batch, wakes us again. */
/* The ready clients of one wakeup (@ev, @n: client keys have neither WATCH_* bit), in
 * rounds: each round takes one message from each uid that has a ready client, from its
 * clients in turn. So one uid with many processes (a connect flood) has one request
 * ahead of another uid's, not one per process. A client has up to CLIENT_BATCH
 * messages handled per wakeup; what is left waits for the next (the inner epoll is
 * level triggered). */
static void clients_on_io(Manager *m, const struct epoll_event *ev, int n) {
        uint64_t keys[WATCH_BATCH];
        unsigned done[WATCH_BATCH]; /* messages handled per ready client */
        size_t nkeys = 0;

        for (int i = 0; i < n; i++)
                if (!(ev[i].data.u64 & (WATCH_LISTENER | WATCH_ENDPOINT | WATCH_PROC))) {
                        done[nkeys] = 0;
                        keys[nkeys++] = ev[i].data.u64;
                }
        while (nkeys > 0) {
                uid_t served[WATCH_BATCH];
                size_t nserved = 0, kept = 0;

                for (size_t i = 0; i < nkeys; i++) {
                        Client *c = u64map_get(m->watches, keys[i]);
                        bool more, again = false;

                        if (!c)
                                continue; /* freed meanwhile */
                        for (size_t j = 0; j < nserved; j++)
                                if (served[j] == c->uid) {
                                        again = true;
                                        break;
                                }
                        if (again) {
                                /* its uid had its turn this round: the next round */
                                done[kept] = done[i];
                                keys[kept++] = keys[i];
                                continue;
                        }
                        served[nserved++] = c->uid;
                        more = client_on_io_one(c);
                        if (more && ++done[i] < CLIENT_BATCH) {
                                done[kept] = done[i];
                                keys[kept++] = keys[i];
                        }
                }
                nkeys = kept;
        }
}

static int on_watch(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        Manager *m = userdata;
        struct epoll_event ev[WATCH_BATCH];
        int n;

        n = epoll_wait(m->watch_fd, ev, WATCH_BATCH, 0);
        if (n < 0) {
                if (errno == EINTR)
                        return 0;
                return log_error_errno(errno, "epoll_wait on the client sockets failed: %m");
        }
        clients_on_io(m, ev, n);
        /* then the listeners' channels (HUP: the client closed its end; IN: junk sent
         * on its client end, dropped); endpoints
         * last: a library sends CLOSE before it closes X, so a client's CLOSE ready
         * in this batch goes first (and names the abort itself) */
        for (unsigned kind = 0; kind < 3; kind++)
                for (int i = 0; i < n; i++) {
                        static const uint64_t bit[3] = { WATCH_LISTENER, WATCH_ENDPOINT, WATCH_PROC };
                        uint64_t key = ev[i].data.u64;
                        void *obj;

                        if (!(key & bit[kind]) || !(obj = u64map_get(m->watches, key)))
                                continue; /* another kind, or freed meanwhile */
                        if (kind == 0)
                                listener_on_channel_event(obj, ev[i].events);
                        else if (kind == 1)
                                endpoint_on_hold_hup(obj);
                        else
                                proc_watch_on_exit(obj, m);
                }
        return 0;
}

/* ---- clients ---- */

static bool client_allowed(Manager *m, int fd, const struct ucred *uc) {
        gid_t groups[256];
        socklen_t len = sizeof(groups);
        int n = 0;

        if (uc->uid == 0)
                return true;
        if (m->config.n_allow_uids == 0 && m->config.n_allow_gids == 0)
                return true;
        for (size_t i = 0; i < m->config.n_allow_uids; i++)
                if (m->config.allow_uids[i] == uc->uid)
                        return true;
        if (m->config.n_allow_gids == 0)
                return false;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) == 0)
                n = (int) (len / sizeof(gid_t));
        for (size_t i = 0; i < m->config.n_allow_gids; i++) {
                if (m->config.allow_gids[i] == uc->gid)
                        return true;
                for (int j = 0; j < n; j++)
                        if (groups[j] == m->config.allow_gids[i])
                                return true;
        }
        return false;
}

static void client_reject(Manager *m, int fd, const struct ucred *uc) {
        union smc_ctl_msg msg;

        m->stats.clients_rejected++;
        log_notice("Refusing client pid %d uid %u gid %u: not in the allow list.",
                   (int) uc->pid, (unsigned) uc->uid, (unsigned) uc->gid);
        (void) smc_ctl_init_v(&msg, SMC_CTL_ERROR, 0, SMC_CTL_VERSION_MIN); /* before any HELLO */
        msg.error.error = -EACCES;
        snprintf(msg.error.msg, sizeof(msg.error.msg), "uid %u is not allowed to use smcd",
                 (unsigned) uc->uid);
        (void) smc_ctl_send(fd, &msg, NULL, 0, MSG_DONTWAIT);
        close(fd);
}

/* Refuse a client over a limit on control connections: ERROR -EUSERS, then close. */
static void client_refuse(Manager *m, int fd, const struct ucred *uc, bool per_uid) {
        union smc_ctl_msg msg;

        m->stats.clients_over_limit++;
        (void) smc_ctl_init_v(&msg, SMC_CTL_ERROR, 0, SMC_CTL_VERSION_MIN); /* before any HELLO */
        msg.error.error = -EUSERS;
        if (per_uid) {
                log_debug("Refusing client pid %d: uid %u has %" PRIu64 " control connections already.",
                          (int) uc->pid, (unsigned) uc->uid, m->config.max_clients_per_uid);
                snprintf(msg.error.msg, sizeof(msg.error.msg), "too many control connections for uid %u",
                         (unsigned) uc->uid);
        } else {
                log_debug("Refusing client pid %d uid %u: %" PRIu64 " control connections already.",
                          (int) uc->pid, (unsigned) uc->uid, m->max_clients);
                snprintf(msg.error.msg, sizeof(msg.error.msg), "too many control connections (%" PRIu64 ")",
                         m->max_clients);
        }
        (void) smc_ctl_send(fd, &msg, NULL, 0, MSG_DONTWAIT);
        close(fd);
}

static int client_new(Manager *m, int fd) {
        struct ucred uc;
        socklen_t len = sizeof(uc);
        int sndbuf = CLIENT_SNDBUF, r;
        bool over;
        UidUsage *u;
        Client *c;

        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &len) < 0) {
                r = log_warning_errno(errno, "SO_PEERCRED failed, dropping connection: %m");
                close(fd);
                return r;
        }
        if (!client_allowed(m, fd, &uc)) {
                client_reject(m, fd, &uc);
                return 0;
        }
        if (m->stats.clients >= m->max_clients) {
                client_refuse(m, fd, &uc, false);
                return 0;
        }
        u = uid_usage(m, uc.uid, false);
        /* over the uid's limit: admitted for an adoption only (CLIENTS_PENDING_MAX at
         * a time, client_over_limit()) */
        over = m->config.max_clients_per_uid && u && u->clients >= m->config.max_clients_per_uid;
        if (over && u->clients_pending >= CLIENTS_PENDING_MAX) {
                client_refuse(m, fd, &uc, true);
                return 0;
        }
        u = uid_usage(m, uc.uid, true);
        if (!u) {
                close(fd);
                return log_error_errno(ENOMEM, "Out of memory.");
        }
        (void) setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));

        c = calloc(1, sizeof(*c));
        if (!c) {
                close(fd);
                uid_usage_gc(m, u);
                return log_error_errno(ENOMEM, "Out of memory.");
        }
        c->manager = m;
        c->fd = fd;
        c->id = ++m->next_client_id;
        c->pid = uc.pid;
        c->uid = uc.uid;
        c->gid = uc.gid;
        c->version = SMC_CTL_VERSION_MIN;
        c->mapped = u64map_new();
        if (!c->mapped) {
                free(c);
                close(fd);
                uid_usage_gc(m, u);
                return log_error_errno(ENOMEM, "Out of memory.");
        }
        r = manager_watch(m, fd, EPOLLIN, c->id, c);
        if (r < 0) {
                u64map_free(c->mapped);
                free(c);
                close(fd);
                uid_usage_gc(m, u);
                return log_error_errno(r, "Failed to watch client socket: %m");
        }
        u->clients++;
        if (over) {
                c->over_limit = c->pending = true;
                u->clients_pending++;
        }
        LIST_PREPEND(clients, m->clients, c);
        m->stats.clients++;
        m->stats.clients_total++;
        log_debug("Client %" PRIu64 " connected: pid %d uid %u gid %u", c->id, (int) c->pid,
                  (unsigned) c->uid, (unsigned) c->gid);
        manager_status_changed(m);
        return 0;
}

/* @died: abort its connections (client death). Otherwise (smcd shutdown) leave the
 * DMBs alone: the connections go on without smcd. */
static void client_free(Client *c, bool died) {
        Manager *m = c->manager;
        UidUsage *u;
        Endpoint *e, *en;
        Listener *l, *ln;

        smcr_client_gone(c); /* its SMC-R handshakes in progress */
        if (died) {
                /* SMC-R: as TCP closes a dead process's sockets. SMC-D endpoints are
                 * closed when the last copy of their fd is gone (endpoint_on_hold_hup):
                 * a forked child may still hold them; this one only stops owning them */
                LIST_FOREACH_SAFE(by_client, e, en, c->endpoints) {
                        if (e->smcr || e->hold_fd < 0)
                                endpoint_close(m, e, false, true);
                        else {
                                LIST_REMOVE(by_client, c->endpoints, e);
                                e->owner = NULL;
                        }
                }
        } else {
                LIST_FOREACH_SAFE(by_client, e, en, c->endpoints) {
                        LIST_REMOVE(by_client, c->endpoints, e);
                        e->owner = NULL;
                }
        }
        /* a dead client's listeners live on while other processes hold their accept
         * channel (forked, daemonized servers); smcd's shutdown ends them all */
        LIST_FOREACH_SAFE(by_client, l, ln, c->listeners)
                if (died)
                        listener_orphan(l);
                else
                        listener_free(l);
        fallback_client_gone(m, c);

        LIST_REMOVE(clients, m->clients, c);
        m->stats.clients--;
        u = uid_usage(m, c->uid, false);
        if (u) {
                u->clients--;
                if (c->pending)
                        u->clients_pending--;
                uid_usage_gc(m, u);
        }
        manager_unwatch(m, c->fd, c->id);
        close(c->fd);
        u64map_free(c->mapped);
        free(c);
        manager_status_changed(m);
}

static int on_accept_retry(sd_event_source *s, uint64_t usec, void *userdata) {
        Manager *m = userdata;

        m->accept_retry = sd_event_source_disable_unref(m->accept_retry);
        log_debug("Accepting control connections again.");
        (void) sd_event_source_set_enabled(m->listen_io, SD_EVENT_ON);
        return 0;
}

/* accept4 failed for lack of fds or memory: the connection stays queued and the
 * level-triggered source would fire again at once, so switch it off for
 * ACCEPT_RETRY_USEC. Logged once per pause. */
static void accept_pause(Manager *m, int error) {
        int r;

        log_warning_errno(error, "accept4 on the control socket failed, pausing accepts for %u ms: %m",
                          ACCEPT_RETRY_USEC / 1000);
        r = sd_event_add_time_relative(m->event, &m->accept_retry, CLOCK_MONOTONIC, ACCEPT_RETRY_USEC, 1000,
                                       on_accept_retry, m);
        if (r < 0) {
                log_warning_errno(r, "Failed to arm the accept retry timer, not pausing: %m");
                return;
        }
        (void) sd_event_source_set_enabled(m->listen_io, SD_EVENT_OFF);
}

static int on_accept(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        Manager *m = userdata;

        for (unsigned i = 0; i < ACCEPT_BATCH; i++) {
                int cfd = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (cfd < 0) {
                        if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED)
                                return 0;
                        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                                accept_pause(m, errno);
                                return 0;
                        }
                        return log_error_errno(errno, "accept4 on control socket failed: %m");
                }
                (void) client_new(m, cfd);
        }
        return 0;
}

/* ---- control socket ---- */

/* The runtime directory (socket, stats.json): created if missing, must be a directory. */
static int setup_runtime_dir(Manager *m) {
        struct stat st;
        int r;

        r = mkdir_p(m->config.runtime_dir, 0755);
        if (r < 0)
                return log_error_errno(r, "Cannot create runtime directory %s: %m", m->config.runtime_dir);
        if (stat(m->config.runtime_dir, &st) < 0)
                return log_error_errno(errno, "Cannot use runtime directory %s: %m", m->config.runtime_dir);
        if (!S_ISDIR(st.st_mode))
                return log_error_errno(ENOTDIR, "Cannot use runtime directory %s: %m", m->config.runtime_dir);
        return 0;
}

static int bind_socket(Manager *m, const struct sockaddr_un *sa, int *ret_fd);

static void names_free(char **names) {
        for (size_t i = 0; names && names[i]; i++)
                free(names[i]);
        free(names);
}

/* Count the descriptors systemd passed: 0 none; the number passed otherwise, and in
 * *@ret_store (may be NULL) how many of them are named SMCD_FDSTORE_TCPOPT. */
static int passed_fds(bool unset, char ***ret_names, int *ret_store) {
        char **names = NULL;
        int n, store = 0;

        n = sd_listen_fds_with_names(unset, &names);
        if (n < 0)
                return n;
        for (int i = 0; names && i < n; i++)
                if (names[i] && strcmp(names[i], SMCD_FDSTORE_TCPOPT) == 0)
                        store++;
        if (ret_store)
                *ret_store = store;
        if (ret_names)
                *ret_names = names;
        else
                names_free(names);
        return n;
}

bool manager_socket_activated(void) {
        int store = 0, n = passed_fds(false, NULL, &store);

        return n > store;
}

/* Take what systemd passed (once, at start; the environment is unset): the control
 * socket (socket activation) into m->activated_fd, the stored smc_flagged map into
 * m->stored_flagged_fd; anything else is closed. */
static void take_passed_fds(Manager *m) {
        char **names = NULL;
        int n, bad = 0;

        n = passed_fds(true, &names, NULL);
        if (n < 0)
                log_warning_errno(n, "sd_listen_fds failed, binding our own socket: %m");
        for (int i = 0; i < n; i++) {
                int fd = SD_LISTEN_FDS_START + i;
                const char *name = names ? names[i] : NULL;

                if (name && strcmp(name, SMCD_FDSTORE_TCPOPT) == 0 && m->stored_flagged_fd < 0)
                        m->stored_flagged_fd = fd;
                else if ((!name || strcmp(name, SMCD_FDSTORE_TCPOPT) != 0) && m->activated_fd < 0 &&
                         sd_is_socket_unix(fd, SOCK_SEQPACKET, 1, NULL, 0) > 0)
                        m->activated_fd = fd;
                else {
                        bad++;
                        close(fd);
                }
        }
        if (bad)
                log_warning("Ignoring %d passed file descriptor(s): expected one listening AF_UNIX SOCK_SEQPACKET "
                            "socket and the file descriptor store's \"" SMCD_FDSTORE_TCPOPT "\".", bad);
        names_free(names);
}

static int setup_socket(Manager *m) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int fd, r;

        if (m->activated_fd >= 0) {
                m->listen_fd = m->activated_fd;
                m->activated_fd = -1;
                (void) fcntl(m->listen_fd, F_SETFL, fcntl(m->listen_fd, F_GETFL) | O_NONBLOCK);
                (void) fcntl(m->listen_fd, F_SETFD, FD_CLOEXEC);
                log_info("Using the socket-activated control socket.");
                return 0;
        }

        if (strlen(m->socket_path) >= sizeof(sa.sun_path))
                return log_error_errno(ENAMETOOLONG, "Socket path too long: %s", m->socket_path);
        strcpy(sa.sun_path, m->socket_path);

        fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return log_error_errno(errno, "socket(AF_UNIX) failed: %m");
        /* a socket that still accepts belongs to a running smcd: do not steal it */
        if (connect(fd, (struct sockaddr *) &sa, sizeof(sa)) == 0) {
                close(fd);
                return log_error_errno(EADDRINUSE, "Another smcd is serving %s already.", m->socket_path);
        }
        close(fd);
        if (unlink(m->socket_path) < 0 && errno != ENOENT)
                log_warning_errno(errno, "Failed to remove stale %s: %m", m->socket_path);
        r = bind_socket(m, &sa, &m->listen_fd);
        if (r < 0)
                return r;
        m->socket_bound = true;
        log_info("Listening on %s", m->socket_path);
        return 0;
}

/* Bind and listen on the control socket's path @sa (free now), world-writable (access
 * is enforced per client by SO_PEERCRED); its identity is noted (unlinked at exit only
 * if still ours). The new socket in *@ret_fd. */
static int bind_socket(Manager *m, const struct sockaddr_un *sa, int *ret_fd) {
        struct sockaddr_un tmp = { .sun_family = AF_UNIX };
        const char *at = m->socket_path;
        struct stat st;
        int fd, r;

        /* bound and listening under a temporary name first, then renamed into place:
         * a client never finds the path bound but not yet listening (its connect
         * would be refused and it would fall back to TCP while smcd starts) */
        if (strlen(sa->sun_path) + (sizeof(".new") - 1) < sizeof(tmp.sun_path)) {
                stpcpy(stpcpy(tmp.sun_path, sa->sun_path), ".new");
                at = tmp.sun_path;
                (void) unlink(at); /* (a stale one: the runtime directory's lock is ours) */
        } else
                tmp = *sa;
        fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return log_error_errno(errno, "socket(AF_UNIX) failed: %m");
        if (bind(fd, (const struct sockaddr *) &tmp, sizeof(tmp)) < 0) {
                r = log_error_errno(errno, "Failed to bind %s: %m", at);
                close(fd);
                return r;
        }
        if (chmod(at, 0666) < 0 || listen(fd, SOMAXCONN) < 0 || stat(at, &st) < 0 ||
            (at != m->socket_path && rename(at, m->socket_path) < 0)) {
                r = log_error_errno(errno, "Failed to set up %s: %m", m->socket_path);
                (void) unlink(at);
                close(fd);
                return r;
        }
        m->socket_dev = st.st_dev;
        m->socket_ino = st.st_ino;
        *ret_fd = fd;
        return 0;
}

/* The runtime directory changed. Our control socket removed (a cleaner of /tmp, a
 * stray rm): bound again at once, so clients reach smcd and no second smcd starts on
 * the directory (its lock is ours) to sit there useless; connections queued on the
 * old one are taken first. Its path taken by another file (also renamed over it):
 * left alone, logged once per file (removing it lets smcd bind again). The
 * directory itself removed or moved: logged (clients cannot reach smcd; a new one
 * may start on a new directory of that name). */
static int on_rundir_event(sd_event_source *s, const struct inotify_event *ev, void *userdata) {
        Manager *m = userdata;
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        struct stat st;
        int fd, old;

        if (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED)) {
                if (!m->rundir_gone)
                        log_error("The runtime directory %s was removed or moved: clients cannot reach smcd "
                                  "(restart it).", m->config.runtime_dir);
                m->rundir_gone = true;
                return 0;
        }
        if (!ev->len || strcmp(ev->name, SMC_CTL_SOCKET_NAME) != 0)
                return 0;
        if (stat(m->socket_path, &st) == 0) {
                /* (each foreign file logged once: it may come with two events) */
                if ((st.st_dev != m->socket_dev || st.st_ino != m->socket_ino) &&
                    (st.st_dev != m->foreign_dev || st.st_ino != m->foreign_ino)) {
                        log_warning("%s was replaced by another file: clients cannot reach smcd (left alone; "
                                    "remove it and smcd binds its socket again).", m->socket_path);
                        m->foreign_dev = st.st_dev;
                        m->foreign_ino = st.st_ino;
                }
                return 0;
        }
        if (!(ev->mask & (IN_DELETE | IN_MOVED_FROM)))
                return 0; /* (created and gone again) */
        strcpy(sa.sun_path, m->socket_path); /* (its length was checked at the start) */
        if (bind_socket(m, &sa, &fd) < 0)
                return 0; /* (logged; clients fall back to TCP) */
        old = m->listen_fd;
        (void) on_accept(m->listen_io, old, EPOLLIN, m); /* (what was queued before the removal) */
        if (sd_event_source_set_io_fd(m->listen_io, fd) < 0) {
                close(fd);
                return log_error_errno(ENOMEM, "Cannot watch the new %s: %m", m->socket_path);
        }
        m->listen_fd = fd;
        close(old);
        log_warning("%s was removed: bound it again.", m->socket_path);
        return 0;
}

static int read_somaxconn(void) {
        FILE *f = fopen("/proc/sys/net/core/somaxconn", "re");
        int v = 4096;

        if (f) {
                if (fscanf(f, "%d", &v) != 1 || v <= 0)
                        v = 4096;
                fclose(f);
        }
        return v;
}

/* Idle-priority defer source: sd-event dispatches it only when no control message
 * or connection event is pending, so clearing never delays a connect or a close. One
 * buffer per dispatch keeps each step short (a 1 MiB clear is ~80 us). */
static int on_reclaim_idle(sd_event_source *s, void *userdata) {
        Manager *m = userdata;

        /* a few per turn (a connection releases two): fewer loop iterations */
        if (smc_pool_reclaim(m->pool, RECLAIM_IDLE_BATCH) == 0)
                (void) sd_event_source_set_enabled(s, SD_EVENT_OFF);
        return 0;
}

#ifndef SO_PASSRIGHTS
#define SO_PASSRIGHTS 83 /* (asm-generic/socket.h, Linux 6.16) */
#endif

int manager_refuse_rights(int fd) {
        int zero = 0;

        return setsockopt(fd, SOL_SOCKET, SO_PASSRIGHTS, &zero, sizeof(zero)) < 0 ? -errno : 0;
}

static int pair_make(int ret[2], uint64_t *ret_ino) {
        int one = 1;
        struct stat st;

        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ret) < 0)
                return -errno;
        (void) setsockopt(ret[0], SOL_SOCKET, SO_SNDBUF, &one, sizeof(one));
        (void) manager_refuse_rights(ret[1]); /* Y: the doorbells of X, never a descriptor */
        if (fcntl(ret[1], F_SETFL, O_NONBLOCK) < 0) {
                int r = -errno;

                close(ret[0]);
                close(ret[1]);
                ret[0] = ret[1] = -1;
                return r;
        }
        *ret_ino = fstat(ret[0], &st) == 0 ? (uint64_t) st.st_ino : 0;
        return 0;
}

/* Idle-priority defer source: one spare doorbell pair per dispatch, until full. */
static int on_pairs_idle(sd_event_source *s, void *userdata) {
        Manager *m = userdata;

        uint64_t n = m->stats.spare_pairs; /* the gauge is the count (kept by a reset) */

        if (n < m->max_spare_pairs && pair_make(m->spare_pairs[n], &m->spare_pair_ino[n]) == 0)
                m->stats.spare_pairs++;
        else
                (void) sd_event_source_set_enabled(s, SD_EVENT_OFF); /* full, or EMFILE */
        return 0;
}

int manager_take_pair(Manager *m, int ret[2], uint64_t *ret_ino) {
        if (m->pairs_idle)
                (void) sd_event_source_set_enabled(m->pairs_idle, SD_EVENT_ON);
        if (m->stats.spare_pairs == 0)
                return pair_make(ret, ret_ino);
        m->stats.spare_pairs--;
        ret[0] = m->spare_pairs[m->stats.spare_pairs][0];
        ret[1] = m->spare_pairs[m->stats.spare_pairs][1];
        *ret_ino = m->spare_pair_ino[m->stats.spare_pairs];
        return 0;
}

void manager_release_buf(Manager *m, struct smc_buf *b) {
        manager_release_buf_len(m, b, b ? b->size : 0);
}

void manager_release_buf_len(Manager *m, struct smc_buf *b, uint32_t dirty) {
        smc_pool_release_len(m->pool, b, dirty);
        if (m->reclaim_idle)
                (void) sd_event_source_set_enabled(m->reclaim_idle, SD_EVENT_ON);
}

int manager_new(const ManagerConfig *cfg, Manager **ret) {
        struct smc_pool_config pc = {};
        Manager *m;
        int r;

        m = calloc(1, sizeof(*m));
        if (!m)
                return log_error_errno(ENOMEM, "Out of memory.");
        m->listen_fd = -1;
        m->activated_fd = -1;
        m->stored_flagged_fd = -1;
        m->watch_fd = -1;
        m->config = *cfg;
        m->config.runtime_dir = strdup(cfg->runtime_dir);
        m->config.allow_uids = NULL;
        m->config.allow_gids = NULL;
        m->config.roce_devs = NULL;
        if (cfg->roce_devs) {
                size_t n = 0;

                while (cfg->roce_devs[n])
                        n++;
                m->config.roce_devs = calloc(n + 1, sizeof(char *));
                for (size_t i = 0; m->config.roce_devs && i < n; i++)
                        if (!(m->config.roce_devs[i] = strdup(cfg->roce_devs[i]))) {
                                manager_config_done(&m->config);
                                free(m);
                                return -ENOMEM;
                        }
                if (!m->config.roce_devs) {
                        manager_config_done(&m->config);
                        free(m);
                        return -ENOMEM;
                }
        }
        if (cfg->n_allow_uids) {
                m->config.allow_uids = calloc(cfg->n_allow_uids, sizeof(uid_t));
                if (m->config.allow_uids)
                        memcpy(m->config.allow_uids, cfg->allow_uids, cfg->n_allow_uids * sizeof(uid_t));
        }
        if (cfg->n_allow_gids) {
                m->config.allow_gids = calloc(cfg->n_allow_gids, sizeof(gid_t));
                if (m->config.allow_gids)
                        memcpy(m->config.allow_gids, cfg->allow_gids, cfg->n_allow_gids * sizeof(gid_t));
        }
        m->endpoints = u64map_new();
        m->ports = u64map_new();
        m->uids = u64map_new();
        m->watches = u64map_new();
        m->restored = u64map_new();
        m->procs = u64map_new();
        if (!m->restored || !m->procs || !m->config.runtime_dir || (cfg->n_allow_uids && !m->config.allow_uids) ||
            (cfg->n_allow_gids && !m->config.allow_gids) || !m->endpoints || !m->ports || !m->uids ||
            !m->watches ||
            asprintf(&m->socket_path, "%s/%s", cfg->runtime_dir, SMC_CTL_SOCKET_NAME) < 0 ||
            asprintf(&m->stats_path, "%s/stats.json", cfg->runtime_dir) < 0) {
                manager_free(m);
                return log_error_errno(ENOMEM, "Out of memory.");
        }
        {
                /* policy.json and pnet.json live beside the tunables state file
                 * (policy.h); a corrupt one is moved aside and the table starts empty */
                char path[PATH_MAX];

                if (policy_state_path(m->config.state_file, POLICY_STATE_NAME, path, sizeof(path)) < 0 ||
                    policy_load(&m->policy, path) < 0 ||
                    policy_state_path(m->config.state_file, PNET_STATE_NAME, path, sizeof(path)) < 0 ||
                    pnet_load(&m->pnet, path) < 0) {
                        manager_free(m);
                        return log_error_errno(ENOMEM, "Cannot set up the policy and pnet tables.");
                }
        }

        if (getrandom(m->id_key, sizeof(m->id_key), 0) != sizeof(m->id_key)) {
                r = log_error_errno(errno, "getrandom failed: %m");
                manager_free(m);
                return r;
        }
        /* which smcd this is, for REREG after a restart (ctl-proto.h) */
        while (m->instance == 0)
                m->instance = (uint32_t) manager_random_u64(m);
        m->netns = smcd_pid_netns(getpid()); /* (0: unknown; then no namespace is smcd's own) */
        {
                int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

                m->netns_cookie = smcd_sock_netns_cookie(s);
                if (s >= 0)
                        close(s);
        }
        if (fallback_table_new(cfg->max_fallback_conns, &m->fallbacks) < 0) {
                manager_free(m);
                return log_error_errno(ENOMEM, "Out of memory.");
        }
        r = sockdiag_unix_open(&m->unixdiag);
        if (r < 0)
                log_info_errno(r, "No unix_diag in this kernel (%m): epoll reports no EPOLLHUP on SMC-D "
                                  "connections shut down both ways.");
        m->somaxconn = read_somaxconn();
        r = conn_measure_truesize(&m->msg_truesize);
        if (r < 0) {
                manager_free(m);
                return log_error_errno(r, "Failed to measure the size of a queued NEW_CONN: %m");
        }
        log_debug("A queued NEW_CONN costs %zu bytes of socket buffer; somaxconn %d.", m->msg_truesize,
                  m->somaxconn);

        r = sd_event_default(&m->event);
        if (r < 0) {
                manager_free(m);
                return log_error_errno(r, "Failed to allocate the event loop: %m");
        }
        /* under WatchdogSec= the loop itself sends WATCHDOG=1 (before half of the
         * period or sooner): a hung loop is what the watchdog is for */
        r = sd_event_set_watchdog(m->event, true);
        if (r < 0)
                log_warning_errno(r, "Cannot enable the service watchdog: %m");
        else if (r > 0)
                log_debug("Service watchdog enabled.");
        if ((r = sd_event_add_signal(m->event, NULL, SIGTERM, on_signal, m)) < 0 ||
            (r = sd_event_add_signal(m->event, NULL, SIGINT, on_signal, m)) < 0 ||
            (r = sd_event_add_signal(m->event, NULL, SIGUSR1, on_signal, m)) < 0 ||
            (r = sd_event_add_signal(m->event, NULL, SIGHUP, on_signal, m)) < 0) {
                manager_free(m);
                return log_error_errno(r, "Failed to add signal handlers: %m");
        }
        m->watch_fd = epoll_create1(EPOLL_CLOEXEC);
        if (m->watch_fd < 0) {
                r = log_error_errno(errno, "epoll_create1 failed: %m");
                manager_free(m);
                return r;
        }
        r = sd_event_add_io(m->event, &m->watch_io, m->watch_fd, EPOLLIN, on_watch, m);
        if (r < 0) {
                manager_free(m);
                return log_error_errno(r, "Failed to watch the client sockets: %m");
        }
        {
                /* each client costs its socket, plus its connections' fds in flight;
                 * leave 3/4 of the fd limit to buffers (memfds) and socketpairs */
                struct rlimit rl;
                uint64_t nofile = 1024;

                if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
                        nofile = rl.rlim_cur;
                else if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
                        nofile = UINT64_MAX;
                m->max_clients = nofile / 4 < MAX_CLIENTS_CAP ? nofile / 4 : MAX_CLIENTS_CAP;
                /* spare doorbell pairs: two fds each, at most 1/128 of the limit */
                m->max_spare_pairs = nofile / 256 < SMCD_SPARE_PAIRS ? (unsigned) (nofile / 256) : SMCD_SPARE_PAIRS;
                if (m->max_clients == 0)
                        m->max_clients = 1;
                log_debug("At most %" PRIu64 " control connections (RLIMIT_NOFILE %" PRIu64 "), %" PRIu64
                          " per uid.", m->max_clients, nofile, m->config.max_clients_per_uid);
        }

        pc.buf_clear = cfg->buf_clear;
        pc.prepopulate[smc_dmb_class(SMC_DMB_DEFAULT_SIZE)] = cfg->prepopulate;
        pc.inline_reclaim = true;
        pc.time_acquire = true; /* the "buffer_acquire" histogram (stats.h) */
        r = smc_pool_new(&pc, &m->pool);
        if (r < 0) {
                manager_free(m);
                return log_error_errno(r, "Failed to create the buffer pool: %m");
        }
        r = sd_event_add_defer(m->event, &m->reclaim_idle, on_reclaim_idle, m);
        if (r >= 0)
                r = sd_event_source_set_priority(m->reclaim_idle, SD_EVENT_PRIORITY_IDLE);
        if (r >= 0)
                r = sd_event_source_set_enabled(m->reclaim_idle, SD_EVENT_OFF);
        if (r >= 0)
                r = sd_event_add_defer(m->event, &m->pairs_idle, on_pairs_idle, m);
        if (r >= 0)
                r = sd_event_source_set_priority(m->pairs_idle, SD_EVENT_PRIORITY_IDLE);
        if (r >= 0 && cfg->pool_idle_usec > 0)
                r = sd_event_add_time_relative(m->event, &m->pool_trim, CLOCK_MONOTONIC, cfg->pool_idle_usec,
                                               cfg->pool_idle_usec / 10, on_pool_trim, m);
        if (r < 0) {
                manager_free(m);
                return log_error_errno(r, "Failed to set up buffer reclaim: %m");
        }
        *ret = m;
        return 0;
}

/* $RUNTIME_DIR/instance (ctl-proto.h SMC_CTL_INSTANCE_NAME): our HELLO_REPLY.instance
 * at offset 0, written in place (never truncated or replaced), so that processes of an
 * earlier smcd that read it see that we are another one and re-register their
 * connections (REREG). The socket is ours: no other smcd writes it now. Failing is
 * not fatal: they then re-register at their next request only. */
static void write_instance_file(Manager *m) {
        char *path = NULL;
        int fd, r = 0;

        if (asprintf(&path, "%s/%s", m->config.runtime_dir, SMC_CTL_INSTANCE_NAME) < 0) {
                log_warning("Out of memory: no %s file.", SMC_CTL_INSTANCE_NAME);
                return;
        }
        fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0)
                r = -errno;
        else {
                /* the pids of the smcds before us, then ours (ctl-proto.h) */
                int32_t pids[SMC_CTL_INSTANCE_PIDS] = { 0 }, next[SMC_CTL_INSTANCE_PIDS] = { 0 };
                ssize_t n = pread(fd, pids, sizeof(pids), SMC_CTL_INSTANCE_PIDS_OFF);
                unsigned k = 0;

                for (unsigned i = 0; n == (ssize_t) sizeof(pids) && i < SMC_CTL_INSTANCE_PIDS; i++)
                        if (pids[i] > 0 && pids[i] != (int32_t) getpid())
                                next[k++] = pids[i];
                if (k == SMC_CTL_INSTANCE_PIDS) {
                        memmove(next, next + 1, sizeof(next) - sizeof(next[0]));
                        k--;
                }
                next[k] = (int32_t) getpid();
                if (fchmod(fd, 0644) < 0 ||
                    pwrite(fd, &m->instance, sizeof(m->instance), 0) != (ssize_t) sizeof(m->instance) ||
                    pwrite(fd, next, sizeof(next), SMC_CTL_INSTANCE_PIDS_OFF) != (ssize_t) sizeof(next))
                        r = errno ? -errno : -EIO;
                close(fd);
        }
        if (r < 0)
                log_warning_errno(r, "Cannot write %s (processes of an earlier smcd then re-register at their "
                                  "next request only): %m", path);
        free(path);
}

int manager_start(Manager *m) {
        int r;

        take_passed_fds(m);
        if (m->activated_fd < 0) {
                r = setup_runtime_dir(m);
                if (r < 0)
                        return r;
        }
        /* the connection hints the clients read (hints.h): without them, short-lived
         * connections stay SMC-D */
        r = hints_create(m->config.runtime_dir, &m->hints);
        if (r < 0)
                log_warning_errno(r, "Cannot create %s/" SMC_HINTS_NAME " (%m): no destination is hinted to TCP "
                                  "(short_conn_rate has no effect).", m->config.runtime_dir);
        /* local addresses and links, live (netlink.h); without netlink the CONNECT
         * decision falls back to getifaddrs() (addr.h) and devices shows no netdevs */
        r = netlink_new(m->event, &m->netlink);
        if (r < 0)
                log_warning_errno(r, "Cannot open the netlink monitor (%m): local addresses come from "
                                  "getifaddrs(), refreshed at most once a second; no netdevs are listed.");
        r = ibdevs_new(m->event, m->netlink, &m->ibdevs);
        if (r < 0)
                return log_error_errno(r, "Failed to set up RoCE device discovery: %m");
        /* SMC-R before the control socket exists: a listener that a client registers
         * as soon as the socket appears must already see the SMC TCP option program
         * (tcpopt.h: a socket listening before it was attached cannot be marked) */
        r = smcr_new(m, m->config.roce_devs, &m->smcr);
        if (r < 0)
                return log_error_errno(r, "Failed to set up SMC-R: %m");
        r = setup_socket(m);
        if (r < 0)
                return r;
        /* the socket is ours: no other smcd writes the endpoint table now; its
         * connections are known before a client can ask anything */
        conn_load_table(m);
        write_instance_file(m);
        r = sd_event_add_io(m->event, &m->listen_io, m->listen_fd, EPOLLIN, on_accept, m);
        if (r < 0)
                return log_error_errno(r, "Failed to watch the control socket: %m");
        if (m->socket_bound) {
                r = sd_event_add_inotify(m->event, &m->rundir_watch, m->config.runtime_dir,
                                         IN_DELETE | IN_MOVED_FROM | IN_CREATE | IN_MOVED_TO | IN_DELETE_SELF |
                                                 IN_MOVE_SELF | IN_ONLYDIR,
                                         on_rundir_event, m);
                if (r < 0)
                        log_warning_errno(r, "Cannot watch %s (a removed control socket is not bound again): %m",
                                          m->config.runtime_dir);
        }
        r = manager_write_stats(m);
        if (r < 0)
                return r;
        if (!m->config.no_bus)
                (void) manager_bus_connect(m); /* optional: logged, smcd runs without it */
        /* the socket is ours, so no other smcd writes the state files now: drop the
         * temporary files of a save that a kill interrupted */
        {
                const char *state[] = { m->config.state_file, m->policy.path, m->pnet.path };

                for (size_t i = 0; i < sizeof(state) / sizeof(state[0]); i++)
                        if (state[i][0] && (r = remove_stale_tmp(state[i])) > 0)
                                log_info("Removed %d temporary file(s) of an interrupted save of %s.", r, state[i]);
        }
        (void) sd_notify(false, "READY=1");
        status_send(m);
        log_info("smcd " SMCD_VERSION " ready (runtime directory %s, buf_clear=%s, prepopulate %u).",
                 m->config.runtime_dir, m->config.buf_clear == SMC_POOL_CLEAR_CREATE ? "create" : "release",
                 m->config.prepopulate);
        return 0;
}

int manager_run(Manager *m) {
        return sd_event_loop(m->event);
}

/* At exit, after the clients (which freed their own listeners): the listeners no
 * client lists, ownerless (listener_orphan) or retired from their port. All are in
 * the watch table; collected first, since listener_free() changes it. */
static void manager_free_orphan_listeners(Manager *m) {
        Listener **ls = NULL;
        size_t n = 0, cap = 0, st = 0;
        uint64_t key;
        void *v;

        if (!m->watches)
                return;
        while (u64map_iterate(m->watches, &st, &key, &v)) {
                if (!(key & WATCH_LISTENER))
                        continue;
                if (n == cap) {
                        size_t nc = cap ? cap * 2 : 16;
                        Listener **g = realloc(ls, nc * sizeof(*g));

                        if (!g)
                                break; /* out of memory at exit: the rest is left to the kernel */
                        ls = g;
                        cap = nc;
                }
                ls[n++] = v;
        }
        for (size_t i = 0; i < n; i++)
                listener_free(ls[i]);
        free(ls);
}

Manager *manager_free(Manager *m) {
        Client *c, *cn;
        size_t st = 0;
        void *v;

        if (!m)
                return NULL;
        m->exiting = true;
        if (m->activated_fd >= 0)
                close(m->activated_fd);
        if (m->stored_flagged_fd >= 0)
                close(m->stored_flagged_fd);
        smcr_exit_notify(m->smcr); /* SMC-R peers first: their link groups end now */
        LIST_FOREACH_SAFE(clients, c, cn, m->clients)
                client_free(c, false);
        manager_free_orphan_listeners(m);
        m->fallbacks = fallback_table_free(m->fallbacks); /* the clients' entries went with them */
        m->unixdiag = sockdiag_free(m->unixdiag);
        if (m->endpoints)
                conn_free_all(m);
        if (m->ports) {
                while (u64map_iterate(m->ports, &st, NULL, &v))
                        free(v); /* empty: the listeners are freed above */
        }
        if (m->uids) {
                st = 0;
                while (u64map_iterate(m->uids, &st, NULL, &v))
                        free(v);
        }
        manager_bus_disconnect(m);
        m->smcr = smcr_free(m->smcr); /* its connections went with conn_free_all() */
        m->ibdevs = ibdevs_free(m->ibdevs); /* unhooks from the netlink monitor */
        m->netlink = netlink_free(m->netlink);
        sd_event_source_disable_unref(m->listen_io);
        sd_event_source_disable_unref(m->rundir_watch);
        sd_event_source_disable_unref(m->accept_retry);
        sd_event_source_disable_unref(m->status_timer);
        sd_event_source_disable_unref(m->stop_timer);
        sd_event_source_disable_unref(m->reclaim_idle);
        sd_event_source_disable_unref(m->pairs_idle);
        for (uint64_t i = 0; i < m->stats.spare_pairs; i++) {
                close(m->spare_pairs[i][0]);
                close(m->spare_pairs[i][1]);
        }
        m->stats.spare_pairs = 0;
        sd_event_source_disable_unref(m->pool_trim);
        sd_event_source_disable_unref(m->watch_io);
        if (m->watch_fd >= 0)
                close(m->watch_fd);
        if (m->listen_fd >= 0)
                close(m->listen_fd);
        if (m->socket_bound) {
                /* only our own: never a socket another smcd bound there since */
                struct stat sst;

                if (stat(m->socket_path, &sst) == 0 && sst.st_dev == m->socket_dev && sst.st_ino == m->socket_ino &&
                    unlink(m->socket_path) < 0 && errno != ENOENT)
                        log_warning_errno(errno, "Failed to remove %s: %m", m->socket_path);
        }
        m->pool = smc_pool_free(m->pool);
        sd_event_unref(m->event);
        u64map_free(m->endpoints);
        u64map_free(m->ports);
        u64map_free(m->uids);
        u64map_free(m->watches);
        u64map_free(m->restored);
        u64map_free(m->procs); /* (emptied by conn_free_all) */
        eptable_free(m->eptable);
        hints_free(m->hints);
        local_addrs_done(&m->local_addrs);
        policy_done(&m->policy);
        pnet_done(&m->pnet);
        manager_config_done(&m->config);
        free(m->socket_path);
        free(m->stats_path);
        free(m->status_last);
        free(m);
        return NULL;
}
