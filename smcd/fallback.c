/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The TCP fallback connections smcd lists: see fallback.h. */

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "addr.h"
#include "fallback.h"
#include "log.h"
#include "manager.h"
#include "smc-clc.h"

/* What a refresh dump asks for: every state a connection of a process can be in. */
#define ALIVE_STATES                                                                              \
        ((1u << SOCKDIAG_TCP_ESTABLISHED) | (1u << SOCKDIAG_TCP_SYN_SENT) | (1u << SOCKDIAG_TCP_FIN_WAIT1) | \
         (1u << SOCKDIAG_TCP_FIN_WAIT2) | (1u << SOCKDIAG_TCP_CLOSE_WAIT) | (1u << SOCKDIAG_TCP_LAST_ACK) | \
         (1u << SOCKDIAG_TCP_CLOSING))

int fallback_table_new(size_t max, FallbackTable **ret) {
        FallbackTable *t = calloc(1, sizeof(*t));

        if (!t)
                return -ENOMEM;
        t->by_cookie = u64map_new();
        if (!t->by_cookie) {
                free(t);
                return -ENOMEM;
        }
        t->max = max ? max : FALLBACK_MAX_DEFAULT;
        t->max_per_client = t->max / 4 ? t->max / 4 : 1;
        *ret = t;
        return 0;
}

static unsigned family_slot(uint16_t family) {
        return family == AF_INET6;
}

/* Unlink and free @f. */
static void conn_drop(FallbackTable *t, FallbackConn *f) {
        Client *c = f->owner;

        if (f->age_prev)
                f->age_prev->age_next = f->age_next;
        else
                t->newest = f->age_next;
        if (f->age_next)
                f->age_next->age_prev = f->age_prev;
        else
                t->oldest = f->age_prev;
        if (c) {
                if (f->client_prev)
                        f->client_prev->client_next = f->client_next;
                else
                        c->fallbacks.head = f->client_next;
                if (f->client_next)
                        f->client_next->client_prev = f->client_prev;
                else
                        c->fallbacks.tail = f->client_prev;
                c->fallbacks.n--;
        }
        u64map_remove(t->by_cookie, f->cookie);
        t->n--;
        t->n_family[family_slot(f->local.family)]--;
        free(f);
}

FallbackTable *fallback_table_free(FallbackTable *t) {
        if (!t)
                return NULL;
        while (t->oldest)
                conn_drop(t, t->oldest);
        u64map_free(t->by_cookie);
        sockdiag_free(t->diag);
        free(t);
        return NULL;
}

void fallback_client_gone(Manager *m, Client *c) {
        FallbackTable *t = m->fallbacks;

        while (t && c->fallbacks.head)
                conn_drop(t, c->fallbacks.head);
}

/* The sock_diag socket, opened at first use. NULL if it cannot be (logged once). */
static SockDiag *diag_get(FallbackTable *t) {
        int r;

        if (t->diag)
                return t->diag;
        r = sockdiag_open(&t->diag);
        if (r < 0) {
                t->diag = NULL;
                if (!t->diag_failed_logged)
                        log_warning_errno(r, "Cannot open a sock_diag netlink socket (%m): TCP fallback connections "
                                          "are not listed.");
                t->diag_failed_logged = true;
                return NULL;
        }
        return t->diag;
}

/* Does the process still hold the socket, and is it a connection? */
static bool alive(const SockDiagInfo *i) {
        return i->inode != 0 && i->state < 32 && (ALIVE_STATES & (1u << i->state));
}

/* @n less @k, not below 0 */
static uint64_t minus(uint64_t n, uint64_t k) {
        return n > k ? n - k : 0;
}

static void take_view(FallbackConn *f, const SockDiagInfo *i, bool ext) {
        uint8_t st = i->state;

        f->state = st;
        if (!ext)
                return;
        f->have_mem = i->have_mem;
        f->sndbuf = i->sndbuf;
        f->rcvbuf = i->rcvbuf;
        f->have_bytes = i->have_bytes;
        /* payload bytes, as the SMC rows count them: the kernel's counters include the
         * SYN of an active open (a passive open's child starts after its SYN-ACK was
         * acknowledged), our FIN once acknowledged, and the peer's FIN once received */
        f->bytes_acked = minus(i->bytes_acked, (f->role == SMC_CTL_ROLE_CLIENT && st != SOCKDIAG_TCP_SYN_SENT) +
                                                       (st == SOCKDIAG_TCP_FIN_WAIT2));
        f->bytes_received = minus(i->bytes_received, st == SOCKDIAG_TCP_CLOSE_WAIT || st == SOCKDIAG_TCP_LAST_ACK ||
                                                             st == SOCKDIAG_TCP_CLOSING);
}

static int dump_cb(const SockDiagInfo *i, void *userdata) {
        FallbackTable *t = userdata;
        FallbackConn *f = u64map_get(t->by_cookie, i->cookie);

        if (f && f->local.family == i->family && alive(i)) {
                take_view(f, i, true);
                f->seen = t->generation;
        }
        return 0;
}

/* The key of a connection's client end (@local, @peer), for finding it from its
 * server end: the ports, and a hash of family and addresses (FNV-1a). Two client ends
 * with one key (same ports, a hash collision) are told apart by comparing addresses:
 * the one that lost the slot leaves its server end at PEERNOSMC. */
static uint64_t client_key(const struct smc_ctl_addr *local, const struct smc_ctl_addr *peer) {
        uint32_t h = 2166136261u;

        h = (h ^ local->family) * 16777619u;
        for (size_t k = 0; k < 16; k++)
                h = (h ^ local->addr[k]) * 16777619u;
        for (size_t k = 0; k < 16; k++)
                h = (h ^ peer->addr[k]) * 16777619u;
        return (uint64_t) h << 32 | (uint64_t) local->port << 16 | peer->port;
}

/* Servers: the reason of the client end if smcd knows it, else PEERNOSMC. */
static void set_server_reasons(FallbackTable *t) {
        U64Map *clients = u64map_new();
        FallbackConn *f;

        LIST_FOREACH(age, f, t->newest)
                if (clients && f->role == SMC_CTL_ROLE_CLIENT)
                        (void) u64map_put(clients, client_key(&f->local, &f->peer), f);
        LIST_FOREACH(age, f, t->newest) {
                FallbackConn *c;

                if (f->role != SMC_CTL_ROLE_SERVER)
                        continue;
                f->reason = SMC_CLC_DECL_PEERNOSMC;
                c = clients ? u64map_get(clients, client_key(&f->peer, &f->local)) : NULL;
                if (c && smcd_addr_equal(&c->local, &f->peer) && smcd_addr_equal(&c->peer, &f->local))
                        f->reason = c->reason;
        }
        u64map_free(clients);
}

int fallback_refresh(Manager *m, bool ext) {
        FallbackTable *t = m->fallbacks;
        FallbackConn *f, *n;
        SockDiag *d;
        int r;

        if (!t || t->n == 0)
                return 0;
        d = diag_get(t);
        if (!d)
                return -ENOTCONN;
        t->generation++;
        if (t->n <= FALLBACK_EXACT_MAX) {
                /* few: one exact lookup each (a dump walks every TCP socket of the host) */
                LIST_FOREACH(age, f, t->newest) {
                        SockDiagInfo i;

                        r = sockdiag_lookup(d, &f->local, &f->peer, f->cookie, ext, &i);
                        if (r == -ENOENT)
                                continue;
                        if (r < 0)
                                return log_debug_errno(r, "sock_diag lookup failed: %m");
                        if (alive(&i)) {
                                take_view(f, &i, ext);
                                f->seen = t->generation;
                        }
                }
        } else {
                for (unsigned k = 0; k < 2; k++) {
                        if (t->n_family[k] == 0)
                                continue;
                        r = sockdiag_dump(d, k ? AF_INET6 : AF_INET, ALIVE_STATES, ext, dump_cb, t);
                        if (r < 0)
                                return log_debug_errno(r, "sock_diag dump failed: %m");
                }
        }
        for (f = t->newest; f; f = n) {
                n = f->age_next;
                if (f->seen != t->generation)
                        conn_drop(t, f);
        }
        if (ext)
                set_server_reasons(t);
        return 0;
}

/* Room for one more entry of @c: a refresh first when a bound is reached (at most
 * once per FALLBACK_SWEEP_USEC), then the oldest evicted. */
static void make_room(Manager *m, Client *c) {
        FallbackTable *t = m->fallbacks;
        uint64_t now;

        if (c->fallbacks.n < t->max_per_client && t->n < t->max)
                return;
        now = manager_now(m);
        if (t->last_sweep_usec == 0 || now - t->last_sweep_usec >= FALLBACK_SWEEP_USEC) {
                t->last_sweep_usec = now;
                (void) fallback_refresh(m, false);
        }
        while (c->fallbacks.n >= t->max_per_client) {
                conn_drop(t, c->fallbacks.tail);
                t->evicted++;
        }
        while (t->n >= t->max) {
                conn_drop(t, t->oldest);
                t->evicted++;
        }
}

int client_handle_fallback(Client *c, const struct smc_ctl_fallback *req) {
        Manager *m = c->manager;
        FallbackTable *t = m->fallbacks;
        char a[SMCD_ADDR_STRLEN], b[SMCD_ADDR_STRLEN];
        FallbackConn *f;
        SockDiagInfo i;
        SockDiag *d;
        int r;

        /* a fallback the library decided alone (smcrun: the program uses io_uring) never
         * came through CONNECT: count it here, as CONNECT counts the ones smcd decides */
        if (req->role == SMC_CTL_ROLE_CLIENT && req->reason == SMCD_DECL_IOURING)
                smcd_stats_count_fallback(&m->stats, req->reason);
        if (!t || !(d = diag_get(t)))
                return 0;
        r = sockdiag_lookup(d, &req->local, &req->peer, 0, false, &i); /* tcp_info at List time */
        if (r == -ENOENT || (r == 0 && !alive(&i))) {
                /* closed before we got here (or not a connection of this host) */
                t->gone_at_notice++;
                log_debug("Client %" PRIu64 ": TCP connection %s -> %s is gone already, not listed.", c->id,
                          smcd_addr_to_string(&req->local, a), smcd_addr_to_string(&req->peer, b));
                return 0;
        }
        if (r < 0) {
                log_debug_errno(r, "Client %" PRIu64 ": cannot look up TCP connection %s -> %s: %m", c->id,
                                smcd_addr_to_string(&req->local, a), smcd_addr_to_string(&req->peer, b));
                return 0;
        }
        if (c->uid != 0 && i.uid != c->uid) {
                m->stats.handshake_errors++;
                return client_send_error(c, req->hdr.seq, EPERM, 0, "TCP connection %s is not of uid %u",
                                         smcd_addr_to_string(&req->local, a), (unsigned) c->uid);
        }
        f = u64map_get(t->by_cookie, i.cookie);
        if (f) {
                /* told again (a duplicate, or another process holding the socket) */
                take_view(f, &i, false);
                return 0;
        }

        make_room(m, c);
        f = calloc(1, sizeof(*f));
        if (!f) {
                log_error_errno(ENOMEM, "Out of memory.");
                return 0;
        }
        f->cookie = i.cookie;
        f->owner = c;
        f->role = req->role;
        f->reason = req->role == SMC_CTL_ROLE_CLIENT ? req->reason : SMC_CLC_DECL_PEERNOSMC;
        f->local = req->local;
        f->peer = req->peer;
        take_view(f, &i, false);
        if (u64map_put(t->by_cookie, f->cookie, f) < 0) {
                free(f);
                log_error_errno(ENOMEM, "Out of memory.");
                return 0;
        }
        f->age_next = t->newest;
        if (t->newest)
                t->newest->age_prev = f;
        else
                t->oldest = f;
        t->newest = f;
        f->client_next = c->fallbacks.head;
        if (c->fallbacks.head)
                c->fallbacks.head->client_prev = f;
        else
                c->fallbacks.tail = f;
        c->fallbacks.head = f;
        c->fallbacks.n++;
        t->n++;
        t->n_family[family_slot(f->local.family)]++;
        log_debug("Client %" PRIu64 ": TCP %s %s -> %s (%s), %s, listed.", c->id,
                  f->role == SMC_CTL_ROLE_CLIENT ? "connection" : "accepted connection",
                  smcd_addr_to_string(&f->local, a), smcd_addr_to_string(&f->peer, b),
                  smc_clc_decl_name(f->reason), sockdiag_state_name(f->state));
        return 0;
}
