/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* SMC listeners: LISTEN / UNLISTEN, the accept channel, lookup for CONNECT. */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "manager.h"
#include "smcr.h"
#include "smc-clc.h"
#include "sockdiag.h"

static void listener_reinstate(Manager *m, dev_t dev, ino_t ino);
static void deposits_drop(Listener *l, unsigned n);
static void deposit_timer_arm(Listener *l);

Listener *listener_free(Listener *l) {
        Manager *m;
        char buf[SMCD_ADDR_STRLEN];
        bool active;

        if (!l)
                return NULL;
        m = l->manager;
        log_debug("Listener %" PRIu64 " on %s removed.", l->id, smcd_addr_to_string(&l->addr, buf));
        hints_forget_listener(m->hints, l->id);
        if (l->owner) {
                LIST_REMOVE(by_client, l->owner->listeners, l);
                client_owned_less(l->owner);
        }
        active = l->port != NULL;
        if (l->port) {
                PortEntry *pe = l->port;
                LIST_REMOVE(by_port, pe->listeners, l);
                if (--pe->n == 0) {
                        u64map_remove(m->ports, pe->port);
                        free(pe);
                }
        } else if (l->retired)
                LIST_REMOVE(by_port, m->retired, l);
        if (l->uid_counted) {
                UidUsage *u = uid_usage(m, l->uid, false);

                if (u) {
                        u->listeners--;
                        uid_usage_gc(m, u);
                }
        }
        /* the registration that took over from older ones of its socket is gone: the
         * newest of those still held takes the connections again (the process that
         * registered it again has exited, a rolled-back upgrade) */
        if (active && !m->exiting)
                listener_reinstate(m, l->sock_dev, l->sock_ino);
        deposits_drop(l, l->n_deposits);
        sd_event_source_disable_unref(l->deposit_timer);
        if (l->channel >= 0)
                manager_unwatch(m, l->channel, l->id | WATCH_LISTENER);
        /* closing our end drops queued NEW_CONNs with their fds once the client's end
         * is closed too */
        if (l->channel >= 0)
                close(l->channel);
        m->stats.listeners--;
        manager_status_changed(m);
        free(l);
        return NULL;
}

/* The listener's client went away (its process exited, or exec'd) while its accept
 * channel may live on in other processes: a server that listens and then daemonizes
 * (fork, the parent exits: nginx, `daemon on`), or a forked worker. As TCP, the
 * listening socket lives as long as any copy of it: the listener keeps serving until
 * the last copy of the channel is closed (HUP on our end: listener_on_channel_event()).
 * It has no owner meanwhile: its SMC-D server endpoints have none (they end with their
 * X, as those of a dead owner: client_free()), and the next client of its uid that
 * sends SMCR for it adopts it. */
void listener_orphan(Listener *l) {
        Client *c = l->owner;

        if (!c)
                return;
        LIST_REMOVE(by_client, c->listeners, l);
        l->owner = NULL;
        log_debug("Listener %" PRIu64 ": client %" PRIu64 " (pid %d) is gone; kept while its accept channel is open "
                  "elsewhere.", l->id, c->id, (int) c->pid);
}

/* Take @l out of its port: no connection is queued to it any more. It lives on until
 * its channel hangs up (or its owner's UNLISTEN), so that what is queued already can
 * still be accepted. */
static void listener_retire(Listener *l) {
        PortEntry *pe = l->port;

        if (!pe)
                return;
        LIST_REMOVE(by_port, pe->listeners, l);
        l->port = NULL;
        if (--pe->n == 0) {
                u64map_remove(l->manager->ports, pe->port);
                free(pe);
        }
        l->retired = true;
        LIST_PREPEND(by_port, l->manager->retired, l);
}

/* Put @l into the table of its port (made if it is the port's first). Returns 0 or
 * -ENOMEM. */
static int port_add(Manager *m, Listener *l) {
        PortEntry *pe = u64map_get(m->ports, l->addr.port);

        if (!pe) {
                pe = calloc(1, sizeof(*pe));
                if (!pe || u64map_put(m->ports, l->addr.port, pe) < 0) {
                        free(pe);
                        return -ENOMEM;
                }
                pe->port = l->addr.port;
        }
        LIST_PREPEND(by_port, pe->listeners, l);
        pe->n++;
        l->port = pe;
        return 0;
}

/* Put the newest retired listener of socket (@dev, @ino) back into its port. */
static void listener_reinstate(Manager *m, dev_t dev, ino_t ino) {
        Listener *l, *best = NULL;

        LIST_FOREACH(by_port, l, m->retired)
                if (!l->unlistened && l->sock_dev == dev && l->sock_ino == ino && (!best || l->id > best->id))
                        best = l;
        if (!best)
                return;
        LIST_REMOVE(by_port, m->retired, best);
        best->retired = false;
        if (port_add(m, best) < 0) {
                best->retired = true; /* out of memory: it stays retired */
                LIST_PREPEND(by_port, m->retired, best);
                return;
        }
        log_debug("Listener %" PRIu64 ": the newer registration of its socket is gone; it gets the connections again.",
                  best->id);
}

/* A LISTEN of a socket that already has listeners (@l is the new one, not yet in
 * the port table): a process that registers it again (after an exec, or the new
 * binary of nginx's upgrade) accepts on it now; an older registration may be held by
 * processes that never accept from it again (an orphan whose holders sleep, the old
 * master), and connections queued there would wait for ever. As one TCP socket has
 * one accept queue: the newest registration gets the connections. */
static void listener_supersede(Manager *m, const Listener *l) {
        PortEntry *pe = u64map_get(m->ports, l->addr.port);
        Listener *o, *on;

        if (!pe)
                return;
        /* (retiring the last one frees pe: the loop ends with it) */
        for (o = pe->listeners, on = o ? o->by_port_next : NULL; o; o = on, on = o ? o->by_port_next : NULL) {
                bool last = pe->n == 1;

                if (o->sock_dev != l->sock_dev || o->sock_ino != l->sock_ino)
                        continue;
                log_debug("Listener %" PRIu64 ": its socket was registered again (listener %" PRIu64
                          "): no new connections to it.",
                          o->id, l->id);
                listener_retire(o);
                if (last)
                        break;
        }
}

/* @c (of the listener's uid) uses the orphaned listener @l: it becomes the owner. */
void listener_adopt(Listener *l, Client *c) {
        if (l->owner || c->uid != l->uid)
                return;
        l->owner = c;
        LIST_PREPEND(by_client, c->listeners, l);
        log_debug("Listener %" PRIu64 " adopted by client %" PRIu64 " (pid %d).", l->id, c->id, (int) c->pid);
}

/* Called by the manager's inner epoll for our end of the accept channel: HUP, the
 * client closed its end; IN, something was sent on the client end, which no library
 * ever does. It is dropped, descriptors too: a client end sent into its own channel
 * (SCM_RIGHTS) would otherwise keep itself open inside our end's queue, and the
 * channel would never hang up (helper 96: one fd and a listener per request, from
 * any uid, until smcd's descriptor table was full). */
void listener_on_channel_event(Listener *l, uint32_t events) {
        char junk[64];
        unsigned n = 0;

        if (events & (EPOLLHUP | EPOLLERR)) {
                log_debug("Accept channel of listener %" PRIu64 " hung up.", l->id);
                listener_free(l);
                return;
        }
        /* (no control buffer: the kernel closes any descriptors in them; 64 at most
         * per wakeup, the watch is level triggered) */
        while (n < 64 && recv(l->channel, junk, sizeof(junk), MSG_DONTWAIT) >= 0)
                n++;
        if (n > 0)
                log_debug("Accept channel of listener %" PRIu64 ": %u message(s) sent on its client end dropped.", l->id,
                          n);
}

/* Check that @fd is a listening TCP socket bound to exactly @want. Fills the
 * listener's v6only and DMB class. Returns 0 or -errno with a message in @err. */
static int check_tcp_listener(int fd, const struct smc_ctl_addr *want, Listener *l, char *err, size_t errlen) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof(int);
        struct smc_ctl_addr got;
        int v = 0, r;
        struct stat st;

        if (fstat(fd, &st) < 0 || !S_ISSOCK(st.st_mode)) {
                snprintf(err, errlen, "the LISTEN fd is not a socket");
                return -ENOTSOCK;
        }
        l->sock_dev = st.st_dev;
        l->sock_ino = st.st_ino;
        {
                /* SO_BINDTODEVICE: "" when not bound (or unreadable) */
                socklen_t dl = sizeof(l->bound_dev);

                memset(l->bound_dev, 0, sizeof(l->bound_dev));
                if (getsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, l->bound_dev, &dl) < 0)
                        l->bound_dev[0] = 0;
                l->bound_dev[sizeof(l->bound_dev) - 1] = 0;
        }
        if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &len) < 0 || v != SOCK_STREAM) {
                snprintf(err, errlen, "the LISTEN fd is not a SOCK_STREAM socket");
                return -EINVAL;
        }
        len = sizeof(int);
        if (getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &v, &len) < 0 || v != IPPROTO_TCP) {
                snprintf(err, errlen, "the LISTEN fd is not a TCP socket");
                return -EINVAL;
        }
        len = sizeof(int);
        if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &len) < 0 || v != 1) {
                snprintf(err, errlen, "the LISTEN fd is not a listening socket");
                return -EINVAL;
        }
        len = sizeof(ss);
        if (getsockname(fd, (struct sockaddr *) &ss, &len) < 0) {
                r = -errno;
                snprintf(err, errlen, "getsockname on the LISTEN fd failed");
                return r;
        }
        r = smc_ctl_addr_from_sockaddr(&got, (struct sockaddr *) &ss, len);
        if (r < 0) {
                snprintf(err, errlen, "the LISTEN fd is not an IPv4/IPv6 socket");
                return -EAFNOSUPPORT;
        }
        if (!smcd_addr_equal(&got, want)) {
                char a[SMCD_ADDR_STRLEN], b[SMCD_ADDR_STRLEN];
                snprintf(err, errlen, "socket is bound to %s, not %s", smcd_addr_to_string(&got, a),
                         smcd_addr_to_string(want, b));
                return -EADDRNOTAVAIL;
        }
        l->addr = got;
        l->netns = smcd_sock_netns(fd);
        l->netns_cookie = smcd_sock_netns_cookie(fd);
        l->v6only = false;
        if (got.family == AF_INET6) {
                len = sizeof(int);
                if (getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v, &len) == 0)
                        l->v6only = v != 0;
        }
        len = sizeof(int);
        if (getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, &len) < 0 || v <= 0)
                v = 2 * SMC_DMB_DEFAULT_SIZE;
        /* Linux sizes the RMB from sk_rcvbuf / 2 */
        l->dmb_class = smc_dmb_class((uint64_t) v / 2);
        return 0;
}

static void channel_set_sndbuf(Manager *m, int fd, uint32_t queue_max) {
        /* room for queue_max + 1 messages; the kernel doubles the value we set */
        uint64_t want = ((uint64_t) queue_max + 1) * m->msg_truesize;
        int v = want > INT32_MAX / 2 ? INT32_MAX / 2 : (int) want;

        if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &v, sizeof(v)) < 0)
                (void) setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v));
}

/* ---- LISTEN_DEPOSIT (v5): a listening socket passed to another process ----
 *
 * TCP gives a listening socket one accept queue however many processes hold it,
 * also one that received it over a unix socket (SCM_RIGHTS: multiprocessing, uvicorn
 * --workers). The receiver holds only the TCP socket; a LISTEN of it would be a new
 * registration, which takes the new connections from the sender's (the newest
 * registration of a socket gets them: listener_supersede()). So the sender's library
 * deposits the client end of the channel here before the sendmsg(2), and the
 * receiver's LISTEN with SMC_CTL_LISTEN_F_JOIN takes it: one queue, as TCP's. While
 * a deposit waits, smcd holds a copy of the channel, so the listener lives on as a
 * socket in flight in a unix socket does; an unclaimed deposit (the receiver runs
 * without the library, or never reads the message) is closed after
 * SMC_CTL_DEPOSIT_USEC, and one whose sendmsg(2) failed is withdrawn by the sender
 * (SMC_CTL_DEPOSIT_WITHDRAW). */

/* Take the @n deposits from @i on out of @l's list (not closed). */
static void deposits_remove(Listener *l, unsigned i, unsigned n) {
        unsigned rest = l->n_deposits - i - n;

        memmove(l->deposit_fd + i, l->deposit_fd + i + n, rest * sizeof(l->deposit_fd[0]));
        memmove(l->deposit_until + i, l->deposit_until + i + n, rest * sizeof(l->deposit_until[0]));
        memmove(l->deposit_keep + i, l->deposit_keep + i + n, rest * sizeof(l->deposit_keep[0]));
        memmove(l->deposit_flags + i, l->deposit_flags + i + n, rest * sizeof(l->deposit_flags[0]));
        l->n_deposits -= n;
}

/* Add @chan (owned from now on) to @l's deposits, for SMC_CTL_DEPOSIT_USEC; @keep:
 * smcd's own, for every join meanwhile; @flags: the sender's SMC_CTL_DEPOSIT_*. A
 * full list drops its oldest. */
static void deposit_add(Listener *l, int chan, bool keep, uint32_t flags) {
        if (l->n_deposits == SMC_CTL_DEPOSIT_MAX)
                deposits_drop(l, 1);
        l->deposit_fd[l->n_deposits] = chan;
        l->deposit_keep[l->n_deposits] = keep;
        l->deposit_flags[l->n_deposits] = flags;
        l->deposit_until[l->n_deposits++] = manager_now(l->manager) + SMC_CTL_DEPOSIT_USEC;
        deposit_timer_arm(l);
}

/* Close the @n oldest deposits of @l. */
static void deposits_drop(Listener *l, unsigned n) {
        if (n > l->n_deposits)
                n = l->n_deposits;
        for (unsigned i = 0; i < n; i++)
                close(l->deposit_fd[i]);
        deposits_remove(l, 0, n);
}

static int on_deposit_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        Listener *l = userdata;
        unsigned n = 0;

        (void) s;
        while (n < l->n_deposits && l->deposit_until[n] <= usec)
                n++;
        if (n > 0)
                log_debug("Listener %" PRIu64 ": %u deposited channel(s) not claimed in %u s: closed.", l->id, n,
                          SMC_CTL_DEPOSIT_USEC / 1000000u);
        deposits_drop(l, n);
        deposit_timer_arm(l);
        /* (with the last copy of the channel gone, its HUP frees @l later) */
        return 0;
}

/* (Re)arm @l's timer for its oldest deposit, or stop it when there is none. */
static void deposit_timer_arm(Listener *l) {
        Manager *m = l->manager;

        if (l->n_deposits == 0) {
                if (l->deposit_timer)
                        (void) sd_event_source_set_enabled(l->deposit_timer, SD_EVENT_OFF);
                return;
        }
        if (l->deposit_timer) {
                if (sd_event_source_set_time(l->deposit_timer, l->deposit_until[0]) >= 0 &&
                    sd_event_source_set_enabled(l->deposit_timer, SD_EVENT_ONESHOT) >= 0)
                        return;
                l->deposit_timer = sd_event_source_disable_unref(l->deposit_timer);
        }
        if (sd_event_add_time(m->event, &l->deposit_timer, CLOCK_MONOTONIC, l->deposit_until[0], 100000,
                              on_deposit_timer, l) < 0) {
                /* no timer: keep no deposit that could never expire */
                log_warning("Listener %" PRIu64 ": cannot arm the deposit timer: deposits dropped.", l->id);
                l->deposit_timer = NULL;
                deposits_drop(l, l->n_deposits);
        }
}

int client_handle_listen_deposit(Client *c, const struct smc_ctl_listen_deposit *req, int chan, int tcp) {
        Listener *l = manager_get_listener(c->manager, req->listener_id);
        union smc_ctl_msg msg;
        struct stat cs, ts;
        int r;

        if (!l || l->uid != c->uid) {
                close(chan);
                close(tcp);
                return client_send_error(c, req->hdr.seq, ENOENT, 0, "no listener %" PRIu64 " of this uid",
                                         req->listener_id);
        }
        if (fstat(chan, &cs) < 0 || !S_ISSOCK(cs.st_mode) || cs.st_ino != l->chan_ino || fstat(tcp, &ts) < 0 ||
            ts.st_dev != l->sock_dev || ts.st_ino != l->sock_ino) {
                close(chan);
                close(tcp);
                return client_send_error(c, req->hdr.seq, EINVAL, 0,
                                         "the fds are not the accept channel and the socket of listener %" PRIu64,
                                         req->listener_id);
        }
        close(tcp);
        if (req->flags & SMC_CTL_DEPOSIT_WITHDRAW) {
                /* the sendmsg(2) failed: no receiver will claim it */
                unsigned i = l->n_deposits;

                close(chan);
                while (i > 0 && l->deposit_keep[i - 1])
                        i--;
                if (i == 0)
                        return client_send_error(c, req->hdr.seq, ENOENT, 0,
                                                 "no deposit of listener %" PRIu64 " to withdraw", l->id);
                close(l->deposit_fd[i - 1]);
                deposits_remove(l, i - 1, 1);
                deposit_timer_arm(l);
                log_debug("Client %" PRIu64 ": listener %" PRIu64 " did not go to another process: a deposit is withdrawn (%u left).",
                          c->id, l->id, l->n_deposits);
        } else {
                deposit_add(l, chan, false, req->flags);
                log_debug("Client %" PRIu64 ": listener %" PRIu64 " goes to another process: its channel is deposited (%u).",
                          c->id, l->id, l->n_deposits);
        }
        smc_ctl_init(&msg, SMC_CTL_OK, req->hdr.seq);
        r = smc_ctl_set_version(&msg, c->version);
        return r < 0 ? r : client_send(c, &msg, NULL, 0);
}

static bool deposit_for(const Listener *l, const Client *c, dev_t dev, ino_t ino) {
        return l->sock_dev == dev && l->sock_ino == ino && l->n_deposits > 0 && l->uid == c->uid &&
               l->version == c->version;
}

/* A LISTEN with SMC_CTL_LISTEN_F_JOIN: the listener of socket (@dev, @ino) of @c's
 * uid and version with a deposit waiting, or NULL. */
static Listener *deposit_find(Manager *m, const Client *c, uint16_t port, dev_t dev, ino_t ino) {
        PortEntry *pe = u64map_get(m->ports, port);
        Listener *l;

        if (pe)
                LIST_FOREACH(by_port, l, pe->listeners)
                        if (deposit_for(l, c, dev, ino))
                                return l;
        LIST_FOREACH(by_port, l, m->retired)
                if (deposit_for(l, c, dev, ino))
                        return l;
        return NULL;
}

/* Answer a LISTEN with @l's oldest deposit (a sender's before smcd's own, which stays
 * for the next): @c holds the listener from now on. */
static int listen_join(Client *c, const struct smc_ctl_listen *req, Listener *l) {
        union smc_ctl_msg msg;
        unsigned i = 0;
        uint32_t flags;
        bool keep;
        int chan, r;

        while (i < l->n_deposits && l->deposit_keep[i])
                i++;
        if (i == l->n_deposits)
                i = 0;
        chan = l->deposit_fd[i];
        keep = l->deposit_keep[i];
        flags = l->deposit_flags[i];
        if (!keep) {
                deposits_remove(l, i, 1);
                deposit_timer_arm(l);
        }
        listener_adopt(l, c); /* (if its owner is gone) */
        smc_ctl_init(&msg, SMC_CTL_LISTEN_REPLY, req->hdr.seq);
        msg.listen_reply.listener_id = l->id;
        msg.listen_reply.flags = SMC_CTL_LISTEN_JOINED | (l->smcr ? SMC_CTL_LISTEN_SMCR : 0);
        if (!keep) /* the sender's program's O_NONBLOCK, for the receiver's */
                msg.listen_reply.flags |= SMC_CTL_LISTEN_NB_KNOWN |
                                          ((flags & SMC_CTL_DEPOSIT_NONBLOCK) ? SMC_CTL_LISTEN_NONBLOCK : 0);
        (void) smc_ctl_set_version(&msg, c->version);
        log_debug("Client %" PRIu64 ": LISTEN of a socket received from another process joins listener %" PRIu64
                  " with its deposited channel.",
                  c->id, l->id);
        {
                int fds[2] = { chan, l->channel }; /* (v6) and D: ctl-proto.h */

                r = client_send(c, &msg, fds, c->version >= 6 ? 2 : 1);
        }
        if (!keep)
                close(chan);
        return r;
}

/* Is @fd an AF_UNIX SOCK_SEQPACKET socket (what an accept channel's ends are)? */
static bool is_seqpacket_unix(int fd) {
        int v = 0;
        socklen_t len = sizeof(v);

        if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &v, &len) < 0 || v != AF_UNIX)
                return false;
        len = sizeof(v);
        return getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &len) == 0 && v == SOCK_SEQPACKET;
}

/* The live listener (retired ones too) with a channel end of inode @ino: its
 * client end C, or with @ours the end that we hold; NULL if none. (Of any uid:
 * holding the channel's two ends is the proof, as holding X is for ADOPT_FD; nginx's
 * workers revive a listener their master registered. A scan: LISTEN F_REVIVE is
 * rare, one per listener and holder after a restart.) */
static Listener *listener_by_channel(Manager *m, ino_t ino, bool ours) {
        size_t state = 0;
        void *v;
        Listener *l;

        while (u64map_iterate(m->ports, &state, NULL, &v))
                LIST_FOREACH(by_port, l, ((PortEntry *) v)->listeners)
                        if ((ours ? l->chan_d_ino : l->chan_ino) == ino)
                                return l;
        LIST_FOREACH(by_port, l, m->retired)
                if ((ours ? l->chan_d_ino : l->chan_ino) == ino)
                        return l;
        return NULL;
}

/* Are @c and @d the client and daemon ends of one channel? The daemon end is the one
 * an smcd made nonblocking (handle_listen; the library never changes either end's
 * flags), and the kernel must name each the other's peer (sock_diag: nothing is sent
 * to either, which could be connected to some other local service). */
static bool channel_ends_paired(Manager *m, int c, int d, ino_t c_ino, ino_t d_ino) {
        int cf = fcntl(c, F_GETFL), df = fcntl(d, F_GETFL);
        uint64_t peer = 0;

        if (cf < 0 || df < 0 || (cf & O_NONBLOCK) || !(df & O_NONBLOCK))
                return false;
        /* (without unix_diag in the kernel, no revive is taken) */
        return m->unixdiag && sockdiag_unix_peer(m->unixdiag, (uint64_t) d_ino, &peer) == 0 &&
               peer == (uint64_t) c_ino;
}

static int listen_reply_revived(Client *c, const struct smc_ctl_listen *req, const Listener *l) {
        union smc_ctl_msg msg;

        smc_ctl_init(&msg, SMC_CTL_LISTEN_REPLY, req->hdr.seq);
        msg.listen_reply.listener_id = l->id;
        msg.listen_reply.flags = SMC_CTL_LISTEN_REVIVED | (l->smcr ? SMC_CTL_LISTEN_SMCR : 0);
        (void) smc_ctl_set_version(&msg, c->version);
        return client_send(c, &msg, NULL, 0);
}

/* LISTEN with the client's listening socket @fd (borrowed); with
 * SMC_CTL_LISTEN_F_REVIVE (v6) also the ends @chan_c and @chan_d (borrowed, else -1)
 * of the accept channel an earlier smcd made for it. */
static int handle_listen(Client *c, const struct smc_ctl_listen *req, int fd, int chan_c, int chan_d) {
        Manager *m = c->manager;
        union smc_ctl_msg msg;
        char err[SMC_CTL_ERRMSG_LEN], abuf[SMCD_ADDR_STRLEN];
        int pair[2] = { -1, -1 }, r;
        uint32_t backlog;
        struct stat cs;
        Listener *l;
        bool revive = req->flags & SMC_CTL_LISTEN_F_REVIVE;
        struct stat ds;

        l = calloc(1, sizeof(*l));
        if (!l)
                return client_send_error(c, req->hdr.seq, ENOMEM, 0, "out of memory");
        l->channel = -1;
        r = check_tcp_listener(fd, &req->addr, l, err, sizeof(err));
        if (r < 0) {
                free(l);
                c->manager->stats.handshake_errors++;
                return client_send_error(c, req->hdr.seq, r, 0, "%s", err);
        }
        if (req->flags & SMC_CTL_LISTEN_F_JOIN) {
                Listener *d = deposit_find(m, c, l->addr.port, l->sock_dev, l->sock_ino);

                if (d) {
                        free(l);
                        return listen_join(c, req, d);
                }
        }
        /* the policy (policy.h): a tcp rule keeps this listener plain TCP (the client
         * library goes on with its TCP listener); connects to it find no SMC listener */
        {
                const PolicyRule *rule = policy_match(&m->policy, POLICY_SCOPE_LISTEN, &l->addr, NULL);

                if (rule && rule->action == POLICY_ACTION_TCP) {
                        uint32_t id = rule->id;

                        free(l);
                        return client_send_error(c, req->hdr.seq, EPERM, SMCD_DECL_POLICY,
                                                 "policy rule %" PRIu32 " keeps this listener TCP", id);
                }
        }

        if (revive) {
                /* an earlier smcd's channel, which the client's library kept both ends
                 * of (ctl-proto.h, version 6): send on it again */
                Listener *o;

                if (chan_c < 0 || chan_d < 0 || !is_seqpacket_unix(chan_c) || !is_seqpacket_unix(chan_d) ||
                    fstat(chan_c, &cs) < 0 || fstat(chan_d, &ds) < 0 || cs.st_ino == ds.st_ino) {
                        free(l);
                        c->manager->stats.handshake_errors++;
                        return client_send_error(c, req->hdr.seq, EINVAL, 0,
                                                 "the fds are not the two ends of an accept channel");
                }
                o = listener_by_channel(m, cs.st_ino, false);
                if (o && (o->sock_dev != l->sock_dev || o->sock_ino != l->sock_ino)) {
                        free(l);
                        c->manager->stats.handshake_errors++;
                        return client_send_error(c, req->hdr.seq, EINVAL, 0,
                                                 "the channel is listener %" PRIu64 "'s, of another socket", o->id);
                }
                /* (the ends swapped, or one of another channel: we would end up holding
                 * both ends of one, which then never hangs up) */
                if (!o && (listener_by_channel(m, ds.st_ino, false) || listener_by_channel(m, cs.st_ino, true) ||
                           listener_by_channel(m, ds.st_ino, true) ||
                           !channel_ends_paired(m, chan_c, chan_d, cs.st_ino, ds.st_ino))) {
                        free(l);
                        c->manager->stats.handshake_errors++;
                        return client_send_error(c, req->hdr.seq, EINVAL, 0,
                                                 "the fds are not the client and daemon ends of one accept channel");
                }
                if (o) {
                        /* another holder of the same channel revived it first */
                        free(l);
                        listener_adopt(o, c); /* (if its owner is gone) */
                        log_debug("Client %" PRIu64 ": listener %" PRIu64 " is already registered again.", c->id,
                                  o->id);
                        return listen_reply_revived(c, req, o);
                }
        }
        /* each listener holds a channel end here: a uid may not fill our table
         * (checked before the channel is made; a revive that found its listener
         * registered again above adds none) */
        {
                UidUsage *u = uid_usage(m, c->uid, false);

                if (m->config.max_listeners_per_uid && u && u->listeners >= m->config.max_listeners_per_uid) {
                        free(l);
                        return client_send_error(c, req->hdr.seq, EMFILE, 0,
                                                 "uid %u has %" PRIu64 " SMC listeners (max_listeners_per_uid)",
                                                 (unsigned) c->uid, u->listeners);
                }
        }
        if (revive) {
                pair[0] = fcntl(chan_d, F_DUPFD_CLOEXEC, 3);
                if (pair[0] < 0) {
                        r = -errno;
                        free(l);
                        return client_send_error(c, req->hdr.seq, r, 0, "cannot keep the accept channel");
                }
                l->chan_ino = cs.st_ino;
                l->chan_d_ino = ds.st_ino;
        } else {
                if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) < 0) {
                        r = -errno;
                        free(l);
                        return client_send_error(c, req->hdr.seq, r, 0, "cannot create the accept channel");
                }
                l->chan_ino = fstat(pair[1], &cs) == 0 ? cs.st_ino : 0;
                l->chan_d_ino = fstat(pair[0], &ds) == 0 ? ds.st_ino : 0;
        }
        /* (the file's flag: also on a revived channel, whose client never uses D) */
        (void) fcntl(pair[0], F_SETFL, O_NONBLOCK);
        (void) manager_refuse_rights(pair[0]); /* (manager.h; the drain below too) */
        backlog = req->backlog > (uint32_t) m->somaxconn ? (uint32_t) m->somaxconn : req->backlog;
        /* as Linux: the accept queue is full when more than backlog are queued */
        l->queue_max = backlog + 1;
        channel_set_sndbuf(m, pair[0], l->queue_max);

        l->manager = m;
        if (l->netns_cookie ? l->netns_cookie != m->netns_cookie : l->netns != m->netns)
                (void) smcd_sock_ns_v4(fd, &l->ns_v4);
        l->owner = c;
        l->uid = c->uid;
        l->version = c->version;
        /* version 2: what the app set (0 = not set: the sndbuf / rmem tunables at each
         * CONNECT); version 1 sized from the socket's SO_RCVBUF above (dmb_class) */
        l->sndbuf = req->sndbuf;
        l->rcvbuf = req->rcvbuf;
        l->channel = pair[0];
        l->id = ++m->next_listener_id;
        r = manager_watch(m, l->channel, EPOLLIN | EPOLLHUP, l->id | WATCH_LISTENER, l);
        if (r < 0) {
                close(pair[0]);
                if (pair[1] >= 0)
                        close(pair[1]);
                free(l);
                return client_send_error(c, req->hdr.seq, r, 0, "cannot watch the accept channel");
        }
        listener_supersede(m, l);
        if (port_add(m, l) < 0) {
                manager_unwatch(m, l->channel, l->id | WATCH_LISTENER);
                close(pair[0]);
                if (pair[1] >= 0)
                        close(pair[1]);
                free(l);
                return client_send_error(c, req->hdr.seq, ENOMEM, 0, "out of memory");
        }
        LIST_PREPEND(by_client, c->listeners, l);
        {
                UidUsage *u = uid_usage(m, l->uid, true);

                if (u) {
                        u->listeners++;
                        l->uid_counted = true;
                }
        }
        m->stats.listeners++;
        m->stats.listeners_total++;
        manager_status_changed(m);

        /* SMC-R: only now, with the listener registered, does its socket echo the SMC
         * TCP option (smcr.h): a peer that got the echo sends CLC, which only an SMC
         * listener may receive. The accepted children inherit the mark. */
        if (c->version >= 3)
                l->smcr = smcr_mark_listener(m->smcr, fd);
        /* a socket from another process, none of whose holders deposited a channel
         * (node's cluster with SCHED_NONE hands each worker the bound socket, and
         * each calls listen()): the other holders' LISTENs of the next seconds join
         * this one, through a copy of our own */
        if (req->flags & SMC_CTL_LISTEN_F_JOIN) {
                int keep = fcntl(pair[1], F_DUPFD_CLOEXEC, 3);

                if (keep >= 0)
                        deposit_add(l, keep, true, 0);
        }
        if (revive) {
                log_debug("Client %" PRIu64 ": listener %" PRIu64 " on %s: an earlier smcd's accept channel, "
                          "registered again.",
                          c->id, l->id, smcd_addr_to_string(&l->addr, abuf));
                return listen_reply_revived(c, req, l); /* (on failure the client goes, and the listener with it) */
        }
        smc_ctl_init(&msg, SMC_CTL_LISTEN_REPLY, req->hdr.seq);
        msg.listen_reply.listener_id = l->id;
        if (l->smcr)
                msg.listen_reply.flags |= SMC_CTL_LISTEN_SMCR;
        (void) smc_ctl_set_version(&msg, c->version);
        /* (v6) C, and D for the library to keep: the channel then outlives us */
        {
                int rfds[2] = { pair[1], pair[0] };

                r = client_send(c, &msg, rfds, c->version >= 6 ? 2 : 1);
        }
        close(pair[1]);
        if (r < 0)
                return r; /* the client goes, and the listener with it */
        if (c->version >= 2)
                log_debug("Client %" PRIu64 ": listener %" PRIu64 " on %s%s, backlog %u, SO_SNDBUF %u SO_RCVBUF %u",
                          c->id, l->id, smcd_addr_to_string(&l->addr, abuf), l->v6only ? " (v6only)" : "", backlog,
                          l->sndbuf, l->rcvbuf);
        else
                log_debug("Client %" PRIu64 ": listener %" PRIu64 " on %s%s, backlog %u, DMB %u KiB", c->id, l->id,
                          smcd_addr_to_string(&l->addr, abuf), l->v6only ? " (v6only)" : "", backlog,
                          smc_dmb_class_size(l->dmb_class) >> 10);
        return 0;
}

int client_handle_listen(Client *c, const struct smc_ctl_listen *req, int fd, int chan_c, int chan_d) {
        int r = handle_listen(c, req, fd, chan_c, chan_d);

        close(fd); /* the mark, if any, stays with the socket */
        if (chan_c >= 0)
                close(chan_c);
        if (chan_d >= 0)
                close(chan_d);
        return r;
}

int client_handle_unlisten(Client *c, const struct smc_ctl_unlisten *req) {
        union smc_ctl_msg msg;
        Listener *l;

        LIST_FOREACH(by_client, l, c->listeners)
                if (l->id == req->listener_id)
                        break;
        if (!l || l->unlistened)
                return client_send_error(c, req->hdr.seq, ENOENT, 0, "no listener %" PRIu64 " of this client",
                                         req->listener_id);
        if (l->channel >= 0 && l->version >= 6 && listener_queued(l) > 0) {
                /* connections wait on its channel, which the client drains next: kept
                 * (out of its port) so that it can hand them to another listener of
                 * the group (REQUEUE) until its channel hangs up */
                bool active = l->port != NULL;

                listener_retire(l);
                l->unlistened = true;
                deposits_drop(l, l->n_deposits);
                deposit_timer_arm(l);
                if (active && !l->manager->exiting)
                        listener_reinstate(l->manager, l->sock_dev, l->sock_ino);
                log_debug("Listener %" PRIu64 " given up with %" PRIu64 " connection(s) queued; kept until its channel "
                          "hangs up.",
                          l->id, listener_queued(l));
        } else
                listener_free(l);
        smc_ctl_init(&msg, SMC_CTL_OK, req->hdr.seq);
        return client_send(c, &msg, NULL, 0);
}

Listener *manager_get_listener(Manager *m, uint64_t id) {
        /* every live listener is in the watch table under its channel's key */
        return u64map_get(m->watches, id | WATCH_LISTENER);
}

uint64_t listener_queued(Listener *l) {
        int outq = 0;
        size_t ts = l->manager->msg_truesize;

        if (ioctl(l->channel, SIOCOUTQ, &outq) < 0 || outq <= 0)
                return 0;
        /* every datagram on the channel is a NEW_CONN of the same size */
        return ((size_t) outq + ts - 1) / ts;
}

bool listener_queue_full(Listener *l) {
        return listener_queued(l) >= l->queue_max;
}

#define LISTENER_STALL_USEC (3 * 1000000ULL)

/* The accept queue has not moved for LISTENER_STALL_USEC while connections wait in it:
 * whoever holds its channel does not accept from it (an old nginx master after a
 * binary upgrade whose new binary does not run under smcrun, a stopped process). TCP
 * would still queue the connection; here it would wait in a queue nobody reads while
 * the socket's other accepters (without the library) serve TCP: new connections go
 * over TCP instead (SMC_CLC_DECL_PEERDECL, as a full queue) until one is accepted.
 * Judged at each CONNECT, no timer: a listener nobody connects to costs nothing. The
 * connections queued before the stall was seen wait until one is accepted, the
 * holder closes the listener (reset) or exits. */
bool listener_stalled(Listener *l, uint64_t queued) {
        Manager *m = l->manager;
        uint64_t accepted, now = manager_now(m);

        accepted = queued < l->n_sent ? l->n_sent - queued : 0;
        if (queued == 0 || accepted != l->stall_accepted || l->stall_since == 0) {
                /* the queue moved, or is empty: measured from now, also when it is
                 * empty (the connection this CONNECT queues is the oldest waiting
                 * one then: a listener that stopped accepting before it came is
                 * judged at the next CONNECT, not one more 3 s later) */
                l->stall_accepted = accepted;
                l->stall_since = now;
                if (l->stalled)
                        log_debug("Listener %" PRIu64 " accepts again.", l->id);
                l->stalled = false;
                return false;
        }
        if (now - l->stall_since < LISTENER_STALL_USEC)
                return false;
        if (!l->stalled)
                log_info("Listener %" PRIu64 " on port %u: nothing accepted for %llu s with %" PRIu64
                         " connection(s) queued; new connections to it go over TCP until one is accepted.",
                         l->id, (unsigned) l->addr.port, (unsigned long long) (LISTENER_STALL_USEC / 1000000), queued);
        l->stalled = true;
        return true;
}

void listener_group_of(const Listener *l, ListenerGroup *g) {
        *g = (ListenerGroup) {
                .addr = l->addr,
                .netns = l->netns,
                .netns_cookie = l->netns_cookie,
                .uid = l->uid,
                .v6only = l->v6only,
        };
        memcpy(g->bound_dev, l->bound_dev, sizeof(g->bound_dev));
}

static bool group_has(const ListenerGroup *g, const Listener *l) {
        return l->addr.family == g->addr.family && l->addr.port == g->addr.port &&
               memcmp(l->addr.addr, g->addr.addr, sizeof(l->addr.addr)) == 0 && l->uid == g->uid &&
               l->v6only == g->v6only && strcmp(l->bound_dev, g->bound_dev) == 0 &&
               (g->netns_cookie && l->netns_cookie ? l->netns_cookie == g->netns_cookie : l->netns == g->netns);
}

Listener *listener_group_pick(Manager *m, const ListenerGroup *g, uint16_t min_version) {
        PortEntry *pe = u64map_get(m->ports, g->addr.port);
        unsigned n = 0, k;
        Listener *l;

#define OK(l) (group_has(g, l) && (l)->channel >= 0 && (l)->version >= min_version && !(l)->unlistened)
        if (!pe)
                return NULL;
        LIST_FOREACH(by_port, l, pe->listeners)
                n += OK(l);
        if (n == 0)
                return NULL;
        /* from the next in turn, the first that has room and accepts; else the next
         * in turn whatever its queue (the kernel moves a closed member's connections
         * to another without looking at its backlog: helper 123 found 26 of 28 reset
         * with the other member's listen(1)) */
        k = pe->rr++ % n;
        for (unsigned tried = 0; tried < n; tried++, k = (k + 1) % n) {
                unsigned i = k;

                LIST_FOREACH(by_port, l, pe->listeners)
                        if (OK(l) && i-- == 0)
                                break;
                if (l) {
                        uint64_t queued = listener_queued(l);

                        if (queued < l->queue_max && !listener_stalled(l, queued))
                                return l;
                }
        }
        LIST_FOREACH(by_port, l, pe->listeners)
                if (OK(l) && k-- == 0)
                        return l;
        return NULL;
#undef OK
}

int listener_send(Listener *l, union smc_ctl_msg *msg, const int *fds, size_t nfds) {
        int r;

        (void) smc_ctl_set_version(msg, l->version);
        r = smc_ctl_send(l->channel, msg, fds, nfds, MSG_DONTWAIT);
        if (r == -EAGAIN) {
                /* beyond its backlog (a hand-over): room for one more than queued */
                channel_set_sndbuf(l->manager, l->channel, (uint32_t) listener_queued(l) + 2);
                r = smc_ctl_send(l->channel, msg, fds, nfds, MSG_DONTWAIT);
        }
        if (r >= 0)
                l->n_sent++;
        return r;
}

static bool match_exact(const Listener *l, const struct smc_ctl_addr *dst, bool dst_is_v4, const uint8_t v4[4]) {
        uint8_t lv4[4];

        if (smcd_addr_is_any(&l->addr))
                return false;
        if (l->addr.family == dst->family && memcmp(l->addr.addr, dst->addr, 16) == 0)
                return true;
        /* 1.2.3.4 vs ::ffff:1.2.3.4 */
        return dst_is_v4 && smcd_addr_get_v4(&l->addr, lv4) && memcmp(lv4, v4, 4) == 0 &&
               !(l->addr.family == AF_INET6 && l->v6only);
}

static bool match_wildcard(const Listener *l, const struct smc_ctl_addr *dst, bool dst_is_v4) {
        if (!smcd_addr_is_any(&l->addr))
                return false;
        if (l->addr.family == AF_INET)
                return dst_is_v4;
        /* [::]: IPv6 destinations, and IPv4 ones unless IPV6_V6ONLY */
        if (dst_is_v4)
                return !l->v6only;
        return true;
}

/* Is @dst an interface address of a network namespace: smcd's own (@smcd_ns: the
 * live view of netlink), else one of @known's, or when @known is NULL one of those
 * the namespace of socket @tfd has now (SIOCGIFCONF: IPv4 only)? */
static bool ns_has_addr(Manager *m, bool smcd_ns, const NsV4 *known, int tfd, const struct smc_ctl_addr *dst) {
        uint8_t v4[4];
        NsV4 now;

        if (smcd_ns)
                return m->netlink ? netlink_addr_is_local(m->netlink, dst)
                                  : smcd_addr_is_local(&m->local_addrs, dst, manager_now(m));
        if (!smcd_addr_get_v4(dst, v4))
                return false;
        if (!known) {
                (void) smcd_sock_ns_v4(tfd, &now);
                known = &now;
        }
        return smcd_ns_v4_has(known, v4);
}

/* A listener's preference for @dst among those that match, as the kernel's
 * compute_score() (inet_hashtables.c, inet6_hashtables.c): one bound to a device
 * (here only lo can match) before one that is not, and for an IPv4 destination an
 * AF_INET listener before a dual-stack AF_INET6 one (those are never one
 * SO_REUSEPORT group: the kernel gives every IPv4 connection to the AF_INET one). */
static int listener_score(const Listener *l, bool dst_is_v4) {
        return (l->bound_dev[0] ? 2 : 1) + (dst_is_v4 && l->addr.family == AF_INET);
}

/* Whether listener @l may get a connection of the namespace @cookie / @netns to
 * @dst (an exact or, @wildcard, a wildcard match). A listener bound to a device
 * (SO_BINDTODEVICE) gets only what arrives on it, and a connection to this host
 * arrives on lo: one bound elsewhere is not reached (helper 123: another uid's
 * listener bound to a veth got root's connections to 127.0.0.1, which TCP never
 * gives it). */
static bool listener_candidate(const Listener *l, const struct smc_ctl_addr *dst, bool dst_is_v4, const uint8_t v4[4],
                               bool wildcard, uint64_t cookie, uint64_t netns) {
        if (!(cookie ? l->netns_cookie == cookie : l->netns == netns))
                return false;
        if (l->bound_dev[0] && strcmp(l->bound_dev, "lo") != 0)
                return false;
        return wildcard ? match_wildcard(l, dst, dst_is_v4) : match_exact(l, dst, dst_is_v4, v4);
}

/* Of @pe's candidates (listener_candidate()), the best scored, in turn (SO_REUSEPORT
 * members score alike). */
static Listener *listener_pick(PortEntry *pe, const struct smc_ctl_addr *dst, bool dst_is_v4, const uint8_t v4[4],
                               bool wildcard, uint64_t cookie, uint64_t netns) {
        unsigned n = 0, k;
        int best = 0, sc;
        Listener *l;

        LIST_FOREACH(by_port, l, pe->listeners) {
                if (!listener_candidate(l, dst, dst_is_v4, v4, wildcard, cookie, netns))
                        continue;
                sc = listener_score(l, dst_is_v4);
                if (sc > best) {
                        best = sc;
                        n = 0;
                }
                n += sc == best;
        }
        if (n == 0)
                return NULL;
        k = pe->rr++ % n;
        LIST_FOREACH(by_port, l, pe->listeners)
                if (listener_candidate(l, dst, dst_is_v4, v4, wildcard, cookie, netns) &&
                    listener_score(l, dst_is_v4) == best && k-- == 0)
                        return l;
        return NULL;
}

Listener *manager_find_listener(Manager *m, const struct smc_ctl_addr *dst, uint64_t cookie, uint64_t netns,
                                int tfd) {
        PortEntry *pe = u64map_get(m->ports, dst->port);
        uint8_t v4[4];
        bool dst_is_v4;
        Listener *l;

        if (!pe)
                return NULL;
        dst_is_v4 = smcd_addr_get_v4(dst, v4);
        l = listener_pick(pe, dst, dst_is_v4, v4, false, cookie, netns);
        if (l)
                return l;
        /* a wildcard listener: for its namespace's loopback and interface addresses
         * (of a namespace other than smcd's, the IPv4 ones that the connecting socket
         * @tfd's namespace, this one, has) */
        if (!smcd_addr_is_loopback(dst) && !smcd_addr_is_any(dst) &&
            !ns_has_addr(m, cookie ? cookie == m->netns_cookie : netns == m->netns, NULL, tfd, dst))
                return NULL;
        return listener_pick(pe, dst, dst_is_v4, v4, true, cookie, netns);
}

bool manager_listener_elsewhere(Manager *m, const struct smc_ctl_addr *dst, uint64_t cookie, uint64_t netns,
                                int tfd) {
        PortEntry *pe = u64map_get(m->ports, dst->port);
        bool own_ns = cookie ? cookie == m->netns_cookie : netns == m->netns;
        uint8_t v4[4];
        bool dst_is_v4;
        Listener *l;

        if (!pe || (!cookie && !netns) || smcd_addr_is_loopback(dst) || smcd_addr_is_any(dst))
                return false;
        dst_is_v4 = smcd_addr_get_v4(dst, v4);
        /* an address of the connecting namespace: the connection stays in it */
        if (ns_has_addr(m, own_ns, NULL, tfd, dst))
                return false;
        LIST_FOREACH(by_port, l, pe->listeners) {
                bool l_own = l->netns_cookie && m->netns_cookie ? l->netns_cookie == m->netns_cookie
                                                                : l->netns == m->netns;

                if (cookie ? l->netns_cookie == cookie : l->netns == netns)
                        continue; /* (the connecting namespace's: not found there) */
                if (match_exact(l, dst, dst_is_v4, v4))
                        return true;
                if (match_wildcard(l, dst, dst_is_v4) && ns_has_addr(m, l_own, &l->ns_v4, -1, dst))
                        return true;
        }
        return false;
}
