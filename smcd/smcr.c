/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* SMC-R: link groups, links, the CLC handshake, LLC and the CDC data path (smcr.h). */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "dmb.h"
#include "log.h"
#include "manager.h"
#include "roce.h"
#include "smc-clc.h"
#include "smcr-wire.h"
#include "smcr.h"
#include "tunables.h"
#if SMCD_HAVE_TCPOPT
#include "tcpopt.h"
#endif

#define SMCR_MAX_DEVS 8
/* per expected CLC message: Linux waits 6 s (spec 2.1); smcd waits longer, because the
 * peer may answer a burst of connections one LLC CONFIRM RKEY flow at a time (5.10) */
#define SMCR_CLC_TIMEOUT_USEC (30 * 1000000ULL)
#define SMCR_CONFIRM_LINK_USEC (4 * 1000000ULL)      /* client waits for CONFIRM LINK (3.2) */
#define SMCR_LLC_RESP_USEC (5 * 1000000ULL)          /* LLC responses (5.10: 2 s; TCG is slow) */
#define SMCR_LGR_IDLE_USEC (600 * 1000000ULL)        /* unused link groups kept (3.6) */
#define SMCR_CDC_INFLIGHT 16                         /* CDCs of one connection in flight */
#define SMCR_LLC_QUEUE 64                            /* LLC messages waiting for a send slot */
#define SMCR_INLINE_WANT 64                          /* bytes of inline data asked for (inline=on) */
#define SMCR_RELEASE 1                               /* SMC v2.1 */
#define SMCR_OS_LINUX 2

#define SMCR_MAX_LINKS 2                             /* links per group (Linux: 2 in use) */
#define SMCR_DEL_RKEYS 256                           /* RMBs waiting for DELETE RKEY (a
                                                      * whole group's) */
#define SMCR_RTOKENS 256                             /* peer RMBs known per group (6.2: 255) */
#define SMCR_ADD_LINK_USEC (5 * 1000000ULL)          /* each step of an ADD LINK flow (5.4) */
#define SMCR_LINK_GRACE_USEC (2 * 1000000ULL)        /* a removed link's QP still delivers */
#define SMCR_EXIT_DRAIN_USEC (200 * 1000U)            /* at exit: for the last LLC / CDC sends */
#define SMCR_VAL_WAIT_USEC (SMCR_LINK_GRACE_USEC + 1000000ULL) /* a CDC the validation named */
#define SMCR_RETIRE_USEC SMCR_LLC_RESP_USEC          /* an RMB we aborted stays writable */

#define WR_ID_CDC (UINT64_C(1) << 63)
#define WR_ID_VALIDATION (UINT64_C(1) << 62)         /* a failover-validation CDC (4.6) */

/* SMCD_SMCR_TRACE=1 in smcd's environment: a debug line (-v) per CDC sent / received,
 * doorbell and completion, with CLOCK_MONOTONIC microseconds (for stall hunting) */
static bool smcr_trace;

typedef struct SmcrLgr SmcrLgr;
typedef struct SmcrHs SmcrHs;

/* A removed link's QP, kept a moment (SMCR_LINK_GRACE_USEC) for what its device has
 * already acknowledged to the peer but we have not read from its CQ yet: the peer
 * counts those CDCs as delivered (failover validation, 4.6). It only receives. */
typedef struct SmcrZombie {
        SmcrLgr *lgr;
        RoceLink *rl;
        sd_event_source *timer;
        LIST_FIELDS(struct SmcrZombie, zombies);
} SmcrZombie;

/* The RMB of a connection we aborted before the peer had closed or aborted it: the
 * peer may still have RDMA WRITEs into it on the wire, posted before it saw our abort
 * (RC keeps them ahead of what it sends after, but it sends nothing after an abort
 * that would tell us the last one arrived). A WRITE to a deregistered rkey is a
 * remote access error that puts both QPs in the error state: the whole link group
 * and its other connections ended (kernel-smcr-vm: after SIGKILL of the smcd-side
 * reader while the kernel wrote 1 GiB, 2026-12-06). So its memory regions stay
 * registered, and the buffer out of the pool, for SMCR_RETIRE_USEC; the Linux kernel
 * keeps RMBs registered for the group's life. Freed with the group too (its QPs are
 * gone then). */
typedef struct SmcrRetired {
        SmcrLgr *lgr;
        struct ibv_mr *mr[SMCR_MAX_LINKS];
        struct smc_buf *rmb;
        sd_event_source *timer;
        LIST_FIELDS(struct SmcrRetired, retired);
} SmcrRetired;

/* One link of a group: a QP on a local RoCE device port to one on the peer. A slot
 * of lgr->links is in use while rl is set; the link carries traffic once active. */
typedef struct SmcrLink {
        SmcrLgr *lgr;
        RoceLink *rl;
        unsigned idx;          /* its slot in lgr->links (the index of MRs and rtokens) */
        RoceDev *dev;
        int gid_index;
        uint8_t gid[16], mac[6];
        uint8_t peer_gid[16], peer_mac[6];
        uint8_t link_num;
        uint32_t peer_qpn;
        uint8_t mtu;
        bool active;           /* CONFIRM LINK done */
        unsigned n_conns;      /* connections whose data path uses it */
        uint8_t llc_q[SMCR_LLC_QUEUE][SMC_LLC_LEN];
        unsigned llc_head, llc_n;
        uint8_t *big;          /* a v2 LLC message longer than 44 bytes waiting for the
                                * link's big send slot */
        uint32_t big_len;
        uint64_t last_rx_usec;
        uint64_t test_sent_usec;
        bool test_pending;
        bool failing;          /* link_down() is under way (deferred): not used any more */
        sd_event_source *down_defer;
        char down_why[96];
} SmcrLink;

/* What we know of one RMB of the peer, per link (its rkey and address there): from
 * CLC (first contact / the link of the handshake), CONFIRM RKEY (5.6) and the ADD LINK
 * rkey exchange (5.3, 5.4); ended by DELETE RKEY (5.7). */
typedef struct SmcrRtoken {
        bool used;
        uint8_t valid;                 /* bit i: rkey[i] / addr[i] are known */
        uint32_t rkey[SMCR_MAX_LINKS];
        uint64_t addr[SMCR_MAX_LINKS];
} SmcrRtoken;

enum add_state {
        ADD_NONE,
        ADD_SRV_WAIT_RESP,      /* server: ADD LINK sent, waiting for the response */
        ADD_SRV_WAIT_CONT,      /* server (v1): ADD LINK CONT sent, waiting for the client's */
        ADD_SRV_WAIT_CONFIRM,   /* server: CONFIRM LINK sent on the new link */
        ADD_CLI_WAIT_CONT,      /* client (v1): waiting for the server's ADD LINK CONT */
        ADD_CLI_WAIT_CONFIRM,   /* client: waiting for CONFIRM LINK on the new link */
};

struct SmcrLgr {
        SmcrManager *sm;
        uint32_t id;
        bool server;
        uint8_t version;        /* CLC version of the first contact: 1 or 2 */
        uint8_t peer_id[8];
        uint8_t peer_gid[16];   /* of the first link (matching for reuse) */
        RoceDev *dev;           /* the device of the first contact (matching for reuse) */
        SmcrLink links[SMCR_MAX_LINKS];
        uint8_t max_links;      /* negotiated (v2.1), else ours */
        uint8_t next_link_num;  /* server: the link number of the next new link */
        bool first_link_up;     /* the first contact's link was confirmed (it may be gone
                                 * since, the group lives on with another) */
        unsigned n_conns;
        unsigned max_conns;
        bool failed;
        SmcrRtoken rtok[SMCR_RTOKENS];
        /* the ADD LINK flow (5.3), server-driven: one at a time */
        enum add_state add_state;
        SmcrLink *add_new;              /* the link being added */
        SmcrLink *add_via;              /* the link its messages travel on */
        struct smc_llc_rkey_entry *add_rk; /* our RMBs' (old, new rkey, address) */
        unsigned add_rk_n, add_rk_sent; /* entries, sent so far (v1 CONT) */
        unsigned add_recv_left;         /* v1: rkeys the peer still has to send */
        bool add_wanted;                /* server: try to add a link when the flows allow */
        sd_event_source *add_timer;
        LIST_HEAD(SmcrConn, conns);
        LIST_HEAD(SmcrConn, tx_wait);   /* connections waiting for a send slot */
        LIST_FIELDS(SmcrLgr, lgrs);
        /* local LLC flows (5.10): one at a time */
        LIST_HEAD(SmcrHs, rkey_wait);   /* handshakes waiting to run CONFIRM RKEY */
        SmcrHs *rkey_active;            /* the one whose CONFIRM RKEY is out */
        uint32_t del_rkeys[SMCR_DEL_RKEYS][SMCR_MAX_LINKS]; /* our RMBs to delete (DELETE
                                                             * RKEY flows), rkey per link */
        uint8_t del_valid[SMCR_DEL_RKEYS];                  /* bit i: del_rkeys[][i] is set */
        unsigned n_del_rkeys;
        bool del_active;
        sd_event_source *flow_timer;    /* response timeout of the active flow */
        sd_event_source *idle_timer;    /* freed when unused this long */
        sd_event_source *test_timer;    /* TEST LINK (test_link_time) */
        SmcrHs *confirm_link_wait;      /* first contact: the handshake waiting for it */
        LIST_HEAD(SmcrHs, fc_wait);     /* server handshakes waiting for its link (HS_WAIT_LGR) */
        LIST_HEAD(SmcrZombie, zombies); /* removed links in their grace period */
        LIST_HEAD(SmcrRetired, retired); /* RMBs of aborted connections, still writable */
};

struct SmcrConn {
        SmcrManager *sm;
        SmcrLgr *lgr;
        SmcrLink *link;          /* the link its WRITEs and CDCs go on */
        Endpoint ep;
        Client *client;
        struct smc_buf *rmb, *sndbuf;
        struct ibv_mr *rmb_mr[SMCR_MAX_LINKS], *snd_mr[SMCR_MAX_LINKS]; /* per link slot */
        uint32_t token;          /* our alert token */
        uint32_t peer_token;
        int rtok;                /* the peer RMB's entry in lgr->rtok, or -1 */
        uint32_t peer_rmb_size;
        int xs, ya;              /* smcd's fds (smcr.h) */
        int tcp;                 /* role server: the idle TCP connection, or -1 */
        uint64_t listener_id;    /* role server: the listener its NEW_CONN went to */
        uint64_t x_ino, y_ino;   /* role server: the inodes of X_a and Y_s, the ends
                                  * the NEW_CONN carried (REQUEUE's proof) */
        uid_t uid;
        bool accounted;          /* counted in its uid's endpoints and buffer bytes (from
                                  * conn_new on, so that concurrent handshakes of one uid
                                  * cannot pass its limits together) */
        sd_event_source *xs_src;
        bool active;             /* handshake done */
        /* tx: send buffer -> peer RMB */
        uint64_t snd_sent;       /* sndbuf cursor up to which WRITEs were posted */
        uint64_t peer_prod;      /* our producer cursor into the peer's RMB */
        uint64_t peer_cons;      /* the peer's consumer cursor of its RMB */
        uint16_t tx_seq;
        struct {
                uint64_t snd, prod;       /* sndbuf and peer-RMB cursors it carried */
                uint16_t seq;
                uint8_t flags;
        } fifo[SMCR_CDC_INFLIGHT];        /* the CDCs in flight, oldest first */
        unsigned fifo_head, fifo_n;
        /* the state of the last CDC whose send completed (failover rewinds to it, 4.6) */
        uint64_t snd_fin, prod_fin;
        uint16_t seq_fin;
        uint8_t flags_fin;
        bool need_validation;     /* moved to another link: a failover-validation CDC is due */
        bool xs_eof;
        bool in_tx_wait;
        bool wait_force;         /* in tx_wait with a CDC due even without data */
        LIST_FIELDS(SmcrConn, tx_wait);
        uint64_t tx_bytes;
        /* rx: peer -> our RMB */
        uint64_t rx_prod;
        uint64_t rx_cons_sent;   /* consumer cursor last sent to the peer */
        uint16_t rx_seq;
        bool rx_seq_valid;
        /* a failover-validation CDC named a CDC we have not seen yet: it may still be in
         * the old link's CQ (delivered in any order with the other link's); wait for
         * seqno val_seq until val_timer (SMCR_VAL_WAIT_USEC), then abort */
        uint16_t val_seq;
        bool val_pending;
        sd_event_source *val_timer;
        bool peer_blocked;
        bool cons_upd_req;
        bool plugged;            /* xs plugged, waiting for EPOLLOUT */
        uint64_t rx_bytes;
        /* close */
        uint8_t peer_flags;      /* SMC_CDC_CONN_* received */
        uint8_t local_flags;     /* SMC_CDC_CONN_* to send once the data is out */
        uint8_t sent_flags;      /* ... sent */
        bool closed;             /* the endpoint was closed by its client */
        bool ya_shut;            /* Y_a's writing side shut: the client reads EOF */
        bool ya_rd_shut;         /* ... and its reading side (an abort: conn_eof_client) */
        LIST_FIELDS(SmcrConn, conns);
};

enum hs_state {
        HS_WAIT_OPTION,            /* server: the accepted socket's handshake is still
                                    * finishing in the kernel (tcpopt_peer_has -EAGAIN) */
        HS_WAIT_PROPOSAL,
        HS_WAIT_ACCEPT,
        HS_WAIT_CONFIRM,
        HS_WAIT_CONFIRM_LINK,      /* client: LLC CONFIRM LINK request */
        HS_WAIT_CONFIRM_LINK_RESP, /* server: LLC CONFIRM LINK response */
        HS_WAIT_RKEY,              /* CONFIRM RKEY flow queued or out */
        HS_WAIT_LGR,               /* server: a first contact with the same peer is under
                                    * way: reuse its group once its link is up */
};

struct SmcrHs {
        SmcrManager *sm;
        Client *client;
        uint32_t seq;
        int fd;
        bool server;
        enum hs_state state;
        sd_event_source *io, *timer;
        uint8_t buf[SMC_CLC_MAX_LEN];
        size_t have;
        uint32_t sndbuf, rcvbuf;
        uint64_t listener_id;    /* role server: the result goes to its accept channel */
        ListenerGroup group;     /* role server: that listener's SO_REUSEPORT group,
                                  * whose other listeners take the result if it went
                                  * meanwhile (hs_listener()) */
        uint64_t option_deadline; /* HS_WAIT_OPTION: give up (as no option) after this */
        uid_t uid;               /* whose connection (the listener's owner / the client) */
        struct smc_ctl_addr local, peer;
        uint8_t local4[4];
        uint8_t version;
        bool first_contact;
        SmcrLgr *lgr;
        SmcrConn *conn;
        RoceDev *dev;
        int gid_index;
        uint8_t gid[16], mac[6];
        uint8_t peer_id[8];
        uint8_t peer_gid[16];
        uint8_t eid[SMC_EID_LEN];       /* v2: the negotiated User EID (Accept, Confirm) */
        uint8_t release;
        uint8_t max_conns;
        uint8_t max_links;              /* negotiated (v2.1), else ours */
        struct smc_clc_accept_r accept; /* client: the Accept received */
        /* SMC-D between two network namespaces of this host (--cross-netns): both
         * ends of the TCP connection are ours; the handshake's CLC messages go over
         * it as between two hosts, and the connection is made as a local one */
        bool ism;                       /* proposing / accepted SMC-D */
        uint64_t ism_token;             /* server: the DMB token its ACCEPT carried */
        uint64_t ism_ep;                /* server: the connection's server endpoint, once
                                         * the client's side made it (then CONFIRM
                                         * or a failure only frees the handshake) */
        LIST_FIELDS(SmcrHs, rkey_wait);
        LIST_FIELDS(SmcrHs, hss);
        SmcrLgr *fc_wait_lgr;           /* HS_WAIT_LGR: the group it waits for */
        LIST_FIELDS(SmcrHs, fc_wait);
};

struct SmcrManager {
        Manager *m;
        RoceDev *devs[SMCR_MAX_DEVS];
        char netdevs[SMCR_MAX_DEVS][IF_NAMESIZE]; /* the netdev of each device's port */
        unsigned n_devs;
        NetlinkHook *link_hook;
        sd_event_source *readd_timer;   /* after a netdev came up: try ADD LINK again */
#if SMCD_HAVE_TCPOPT
        TcpOpt *tcpopt;
#endif
        const char *why;
        bool cross_netns;        /* --cross-netns and the TCP option program loaded */
        uint64_t ism_gid;        /* our loopback ISM's GID in SMC-D proposals (random,
                                  * per smcd: only another namespace of this host has it) */
        char first_netdev[IF_NAMESIZE];
        uint8_t peer_id[8];
        char hostname[SMC_HOSTNAME_LEN];
        uint32_t next_lgr_id;
        bool exit_told;          /* smcr_exit_notify() sent DELETE LINKs */
        U64Map *tokens;          /* our alert token -> SmcrConn */
        LIST_HEAD(SmcrLgr, lgrs);
        LIST_HEAD(SmcrHs, hss);
};

static void lgr_fail(SmcrLgr *lgr, const char *why);
static void conn_tx(SmcrConn *c, bool force_cdc);
static void conn_maybe_free(SmcrConn *c);
static void hs_fail(SmcrHs *hs, int error, uint32_t reason, bool send_decline);
static void hs_server_continue(SmcrHs *hs);
static void lgr_release_waiters(SmcrLgr *lgr);
static void hs_arm(SmcrHs *hs, enum hs_state st, uint64_t usec);
static void hs_conn_ready(SmcrHs *hs);
static void lgr_flow_next(SmcrLgr *lgr);
static const struct roce_link_ops link_ops;
static void conn_unreg(SmcrConn *c, unsigned i);
static bool conn_retire_rmb(SmcrConn *c);
static int conn_reg(SmcrConn *c, unsigned i);

/* ------------------------------------------------------------------------- */
/* helpers */

static uint64_t now_usec(SmcrManager *sm) {
        return manager_now(sm->m);
}

/* Is cursor @new older than @old? (Linux smc_cdc_cursor_to_host: a wrap number 0
 * after others counts as newer, the 16-bit wrap wrapped.) */
static bool curs_goes_back(uint64_t old, uint64_t new) {
        uint16_t ow = smc_curs_wrap(old), nw = smc_curs_wrap(new);

        if (ow > nw && nw)
                return true;
        return ow == nw && smc_curs_count(old) > smc_curs_count(new);
}

static uint64_t cdc_cursor(uint16_t wrap, uint32_t count) {
        return smc_curs_make(wrap, count);
}

static bool is_v4(const struct smc_ctl_addr *a, uint8_t ret[4]) {
        return smcd_addr_get_v4(a, ret);
}

/* the IPv4 prefix length of local address @ip (netlink), or -1 */
static int local_prefixlen(Manager *m, const uint8_t ip[4]) {
        const NetlinkLink *links;
        size_t n;

        if (!m->netlink)
                return -1;
        n = netlink_get_links(m->netlink, &links);
        for (size_t i = 0; i < n; i++)
                for (size_t j = 0; j < links[i].n_addrs; j++) {
                        const NetlinkAddr *a = &links[i].addrs[j];
                        if (a->family == AF_INET && !memcmp(a->addr + 12, ip, 4))
                                return a->prefixlen;
                }
        return -1;
}

static void prefix_of(const uint8_t ip[4], int len, uint8_t out[4]) {
        uint32_t a = (uint32_t) ip[0] << 24 | (uint32_t) ip[1] << 16 | (uint32_t) ip[2] << 8 | ip[3];
        uint32_t mask = len <= 0 ? 0 : len >= 32 ? 0xffffffffu : ~((1u << (32 - len)) - 1);

        a &= mask;
        out[0] = a >> 24;
        out[1] = a >> 16;
        out[2] = a >> 8;
        out[3] = a;
}

/* the device with a RoCE v2 GID for local IPv4 address @ip */
/* The pnet entry of the netdev that owns local IPv4 address @ip, or NULL. */
static const PnetEntry *pnet_for_ipv4(SmcrManager *sm, const uint8_t ip[4]) {
        Manager *m = sm->m;
        const NetlinkLink *links;
        size_t n;

        if (!m->netlink || m->pnet.n == 0)
                return NULL;
        n = netlink_get_links(m->netlink, &links);
        for (size_t i = 0; i < n; i++)
                for (size_t j = 0; j < links[i].n_addrs; j++) {
                        const NetlinkAddr *a = &links[i].addrs[j];

                        if (a->family != AF_INET || memcmp(a->addr + 12, ip, 4) != 0)
                                continue;
                        for (size_t k = 0; k < m->pnet.n; k++)
                                if (!strcmp(m->pnet.v[k].netdev, links[i].name))
                                        return &m->pnet.v[k];
                        return NULL;
                }
        return NULL;
}

/* The device for a connection from local IPv4 address @ip: one with an ACTIVE port and
 * a RoCE v2 GID for @ip; if the pnet table has an entry for the netdev that owns @ip,
 * only its RDMA device and port (as the kernel's smc_pnet table groups a netdev with
 * its RoCE port). */
static RoceDev *dev_for_ipv4(SmcrManager *sm, const uint8_t ip[4], uint8_t gid[16], int *gid_index, uint8_t mac[6]) {
        const PnetEntry *pe = pnet_for_ipv4(sm, ip);

        for (unsigned i = 0; i < sm->n_devs; i++) {
                if (pe && (strcmp(pe->ibdev, roce_dev_name(sm->devs[i])) != 0 || pe->port != roce_dev_port(sm->devs[i])))
                        continue;
                if (roce_dev_port_state(sm->devs[i]) != IBV_PORT_ACTIVE)
                        continue;
                if (roce_dev_gid_for_ipv4(sm->devs[i], ip, gid, gid_index, mac) == 0)
                        return sm->devs[i];
        }
        return NULL;
}

static uint8_t own_max_links(SmcrManager *sm) {
        uint32_t v = sm->m->config.max_links_per_lgr;

        return v >= 1 && v <= SMCR_MAX_LINKS ? (uint8_t) v : SMCR_MAX_LINKS;
}

/* Whether @eid (32 bytes, blank padded) is one of our User EIDs (tunable "ueid"; 2.8) */
static bool own_ueid(SmcrManager *sm, const uint8_t eid[SMC_EID_LEN]) {
        _Static_assert(SMC_EID_LEN == SMCD_UEID_LEN, "EID length");
        for (unsigned i = 0; i < sm->m->config.n_ueids && i < SMCD_MAX_UEIDS; i++)
                if (memcmp(sm->m->config.ueids[i], eid, SMC_EID_LEN) == 0)
                        return true;
        return false;
}

static bool inline_allowed(SmcrManager *sm, RoceLink *rl) {
        if (sm->m->config.inline_mode == SMCD_INLINE_OFF)
                return false;
        return roce_link_max_inline(rl) >= SMC_CDC_LEN;
}

static uint32_t inline_want(SmcrManager *sm) {
        return sm->m->config.inline_mode == SMCD_INLINE_ON ? SMCR_INLINE_WANT : 0;
}

/* ------------------------------------------------------------------------- */
/* links of a group */

static unsigned lgr_links_used(const SmcrLgr *lgr) {
        unsigned n = 0;

        for (unsigned i = 0; i < SMCR_MAX_LINKS; i++)
                if (lgr->links[i].rl)
                        n++;
        return n;
}

/* an active link other than @not (NULL: any), the one with the fewest connections */
static SmcrLink *lgr_pick_link(SmcrLgr *lgr, const SmcrLink *not) {
        SmcrLink *best = NULL;

        for (unsigned i = 0; i < SMCR_MAX_LINKS; i++) {
                SmcrLink *l = &lgr->links[i];

                if (!l->rl || !l->active || l == not)
                        continue;
                if (!best || l->n_conns < best->n_conns)
                        best = l;
        }
        return best;
}

/* the link LLC flows of the group use: the first active one */
static SmcrLink *lgr_llc_link(SmcrLgr *lgr) {
        for (unsigned i = 0; i < SMCR_MAX_LINKS; i++)
                if (lgr->links[i].rl && lgr->links[i].active)
                        return &lgr->links[i];
        return NULL;
}

static SmcrLink *lgr_link_by_num(SmcrLgr *lgr, uint8_t num) {
        for (unsigned i = 0; i < SMCR_MAX_LINKS; i++)
                if (lgr->links[i].rl && lgr->links[i].link_num == num)
                        return &lgr->links[i];
        return NULL;
}

static const char *link_netdev(const SmcrManager *sm, const RoceDev *d) {
        for (unsigned k = 0; k < sm->n_devs; k++)
                if (sm->devs[k] == d)
                        return sm->netdevs[k];
        return "";
}

/* An opened device other than those in @not[0..n_not), with an ACTIVE port and an
 * IPv4 address on its netdev that has a RoCE v2 GID: its GID, index, MAC. With @near
 * (the peer's IPv4 address of the new link) one whose address shares the prefix is
 * preferred. NULL if there is none. */
static RoceDev *alt_dev(SmcrManager *sm, RoceDev *const *not, unsigned n_not, const uint8_t *near, uint8_t gid[16],
                        int *gid_index, uint8_t mac[6]) {
        Manager *m = sm->m;
        const NetlinkLink *links;
        size_t nl = m->netlink ? netlink_get_links(m->netlink, &links) : 0;
        RoceDev *found = NULL;

        for (unsigned i = 0; i < sm->n_devs; i++) {
                RoceDev *d = sm->devs[i];
                bool skip = false;

                for (unsigned k = 0; k < n_not; k++)
                        if (not[k] == d)
                                skip = true;
                if (skip || roce_dev_port_state(d) != IBV_PORT_ACTIVE)
                        continue;
                for (size_t j = 0; j < nl; j++) {
                        if (strcmp(links[j].name, sm->netdevs[i]) != 0)
                                continue;
                        for (size_t a = 0; a < links[j].n_addrs; a++) {
                                const NetlinkAddr *ad = &links[j].addrs[a];
                                uint8_t g[16], mc[6], p1[4], p2[4];
                                int gi;

                                if (ad->family != AF_INET || roce_dev_gid_for_ipv4(d, ad->addr + 12, g, &gi, mc) < 0)
                                        continue;
                                if (near) {
                                        prefix_of(ad->addr + 12, ad->prefixlen, p1);
                                        prefix_of(near, ad->prefixlen, p2);
                                }
                                if (!found || (near && !memcmp(p1, p2, 4))) {
                                        found = d;
                                        memcpy(gid, g, 16);
                                        memcpy(mac, mc, 6);
                                        *gid_index = gi;
                                        if (!near || !memcmp(p1, p2, 4))
                                                return d;
                                }
                        }
                }
        }
        return found;
}

/* ------------------------------------------------------------------------- */
/* LLC sends */

static int link_post(SmcrLink *l, const uint8_t *msg, uint32_t len, uint64_t wr_id, bool *inlined) {
        SmcrManager *sm = l->lgr->sm;
        bool inl = false;
        int r;

        r = roce_link_send(l->rl, msg, len, wr_id, inline_allowed(sm, l->rl), &inl);
        if (r == 0) {
                if (wr_id & WR_ID_CDC) {
                        sm->m->stats.smcr.cdc_sends++;
                        if (inl)
                                sm->m->stats.smcr.inline_sends++;
                } else if (!(wr_id & WR_ID_VALIDATION))
                        sm->m->stats.smcr.llc_sends++;
                if (inlined)
                        *inlined = inl;
        }
        return r;
}

static void link_down(SmcrLink *l, const char *why);
static void llc_send_raw(SmcrLink *l, const uint8_t *buf);

static void link_flush_llc(SmcrLink *l) {
        if (l->big) {
                int r = link_post(l, l->big, l->big_len, 0, NULL);
                if (r != -EAGAIN) {
                        free(l->big);
                        l->big = NULL;
                        if (r < 0) {
                                link_down(l, "LLC send failed");
                                return;
                        }
                }
        }
        while (l->llc_n > 0) {
                int r = link_post(l, l->llc_q[l->llc_head], SMC_LLC_LEN, 0, NULL);
                if (r == -EAGAIN)
                        return;
                l->llc_head = (l->llc_head + 1) % SMCR_LLC_QUEUE;
                l->llc_n--;
                if (r < 0) {
                        link_down(l, "LLC send failed");
                        return;
                }
        }
}

static void llc_send(SmcrLink *l, const struct smc_llc_msg *msg) {
        uint8_t buf[SMC_LLC_V2_MAX_LEN];
        ssize_t n;

        if (!l || l->lgr->failed || !l->rl)
                return;
        n = smc_llc_encode(msg, buf, sizeof(buf));
        if (n < SMC_LLC_LEN) {
                log_error("LLC encode of type %u failed.", msg->type);
                return;
        }
        if (n > SMC_LLC_LEN) {
                /* a long v2 message (ADD LINK with rkeys): the link's big slot */
                int r = l->big ? -EAGAIN : link_post(l, buf, (uint32_t) n, 0, NULL);

                if (r == 0)
                        return;
                if (r != -EAGAIN || l->big) {
                        link_down(l, r == -EAGAIN ? "LLC send queue overflow" : "LLC send failed");
                        return;
                }
                l->big = malloc((size_t) n);
                if (!l->big) {
                        link_down(l, "out of memory");
                        return;
                }
                memcpy(l->big, buf, (size_t) n);
                l->big_len = (uint32_t) n;
                return;
        }
        llc_send_raw(l, buf);
}

/* a 44-byte LLC message as it is (queued when no slot is free) */
static void llc_send_raw(SmcrLink *l, const uint8_t *buf) {
        if (!l || l->lgr->failed || !l->rl)
                return;
        if (l->llc_n == 0 && link_post(l, buf, SMC_LLC_LEN, 0, NULL) != -EAGAIN)
                return;
        if (l->llc_n == SMCR_LLC_QUEUE) {
                link_down(l, "LLC send queue overflow");
                return;
        }
        memcpy(l->llc_q[(l->llc_head + l->llc_n) % SMCR_LLC_QUEUE], buf, SMC_LLC_LEN);
        l->llc_n++;
}

static void llc_init(SmcrLgr *lgr, struct smc_llc_msg *m, uint8_t type, uint8_t flags) {
        memset(m, 0, sizeof(*m));
        m->type = type;
        m->v2 = lgr->version >= 2;
        m->flags = flags;
}

/* LLC CONFIRM LINK (5.2) on @l, about @l; @max_conns: 0 unless v2.1 negotiated it */
static void send_confirm_link(SmcrLink *l, bool resp, uint8_t max_conns) {
        SmcrLgr *lgr = l->lgr;
        struct smc_llc_msg m;

        llc_init(lgr, &m, SMC_LLC_CONFIRM_LINK, (resp ? SMC_LLC_FLAG_RESP : 0) | SMC_LLC_FLAG_NO_RMBE_EYEC);
        memcpy(m.confirm_link.mac, l->mac, 6);
        memcpy(m.confirm_link.gid, l->gid, 16);
        m.confirm_link.qpn = roce_link_qpn(l->rl);
        m.confirm_link.link_num = l->link_num;
        m.confirm_link.link_uid = lgr->id + l->link_num;
        m.confirm_link.max_links = lgr->max_links;
        m.confirm_link.max_conns = max_conns;
        llc_send(l, &m);
}

/* ------------------------------------------------------------------------- */
/* connections: the data path */

static struct smc_dmb_hdr *rmb_hdr(SmcrConn *c) {
        return c->rmb->base;
}
static struct smc_dmb_hdr *snd_hdr(SmcrConn *c) {
        return c->sndbuf->base;
}

/* Ring the client: its RMB's producer cursor moved or a flag changed. */
static void conn_ring_client(SmcrConn *c) {
        if (c->ya < 0 || c->ya_shut)
                return;
        if (atomic_exchange(&rmb_hdr(c)->bell, SMC_DMB_BELL_SET) == SMC_DMB_BELL_NONE) {
                char b = 0;
                if (send(c->ya, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL) < 0 && errno != EAGAIN && errno != EPIPE)
                        log_debug_errno(errno, "SMC-R connection %08x: doorbell: %m", c->token);
        }
}

/* The client's Y_a end has bytes only when it plugged X_a (send buffer full):
 * drain them when send-buffer space was freed and it said it waits (dmb.h "Plug"). */
static void conn_unplug_client(SmcrConn *c) {
        char scratch[4096];

        if (smcr_trace)
                log_debug("T %llu unplug check ww %u", (unsigned long long) now_usec(c->sm),
                          atomic_load(&snd_hdr(c)->writer_waiting));
        if (atomic_exchange(&snd_hdr(c)->writer_waiting, 0) == 0 || c->ya < 0)
                return;
        while (recv(c->ya, scratch, sizeof(scratch), MSG_DONTWAIT) > 0)
                ;
}

static void conn_set_flags(SmcrConn *c, uint32_t rx_flags, uint32_t reader_flags) {
        if (rx_flags)
                atomic_fetch_or_explicit(&rmb_hdr(c)->conn_flags, rx_flags, memory_order_release);
        if (reader_flags)
                atomic_fetch_or_explicit(&snd_hdr(c)->reader_flags, reader_flags, memory_order_release);
}

/* Abort locally: the client sees ECONNRESET. */
/* EOF on the client's X (shut Y_a's writing side), after the flags that explain it.
 * After an abort X's writing side too, as a RST leaves a TCP socket shut both ways:
 * the kernel then reports EPOLLHUP on X (the client's own SHUT_WR shuts X's writing
 * side itself, SMC_DMB_FEAT_X_HUP). */
static void conn_eof_client(SmcrConn *c, bool abort) {
        if (c->ya < 0 || (c->ya_shut && (!abort || c->ya_rd_shut)))
                return;
        shutdown(c->ya, abort ? SHUT_RDWR : SHUT_WR);
        c->ya_shut = true;
        c->ya_rd_shut = abort;
}

static void conn_abort_local(SmcrConn *c) {
        if (!c->active)
                return;
        conn_set_flags(c, SMC_DMB_CONN_ABORT, SMC_DMB_CONN_ABORT);
        conn_ring_client(c);
        conn_eof_client(c, true);
        c->peer_flags |= SMC_CDC_CONN_ABORT;
}

static void xs_update_events(SmcrConn *c) {
        uint32_t ev = 0;

        if (!c->xs_src)
                return;
        if (!c->xs_eof)
                ev |= EPOLLIN | EPOLLRDHUP;
        if (c->plugged)
                ev |= EPOLLOUT;
        (void) sd_event_source_set_io_events(c->xs_src, ev);
        (void) sd_event_source_set_enabled(c->xs_src, ev ? SD_EVENT_ON : SD_EVENT_OFF);
}

/* RFC 7609 consumer-cursor update rule (wire spec 4.4). */
static void conn_rx_check(SmcrConn *c) {
        uint32_t size = c->rmb->size, limit = size / 10 > 2304 ? size / 10 : 2304;
        uint64_t cons = atomic_load_explicit(&rmb_hdr(c)->cons, memory_order_acquire);
        uint32_t to_confirm = smc_curs_diff(size, c->rx_cons_sent, cons);
        uint32_t unacked = smc_curs_diff(size, c->rx_cons_sent, c->rx_prod);
        bool want = c->peer_blocked || size - unacked <= size / 2;

        if (!c->active || (c->peer_flags & (SMC_CDC_CONN_ABORT | SMC_CDC_CONN_CLOSED)))
                return;
        if (smcr_trace)
                log_debug("T %llu rx check cons %u sent %u prod %u confirm %u unacked %u want %d plugged %d",
                          (unsigned long long) now_usec(c->sm), smc_curs_count(cons), smc_curs_count(c->rx_cons_sent),
                          smc_curs_count(c->rx_prod), to_confirm, unacked, want, c->plugged);
        if (to_confirm > 0 && (c->cons_upd_req || (to_confirm > limit && want))) {
                c->cons_upd_req = false;
                conn_tx(c, true);
                return;
        }
        if (want && unacked > 0 && !c->plugged && c->xs >= 0) {
                /* learn when the client consumes: plug X_s (the reader drains it) */
                char junk[4096] = {};

                /* P1 plug, then P2 writer_waiting, then P3 look at cons again (dmb.h
                 * "Plug"): in the other order the reader could drain a half-made plug
                 * (it saw writer_waiting) and we would fill X_s again behind it, with
                 * nobody left to drain it: no EPOLLOUT ever, a stalled connection */
                while (send(c->xs, junk, sizeof(junk), MSG_DONTWAIT | MSG_NOSIGNAL) > 0)
                        ;
                atomic_store(&rmb_hdr(c)->writer_waiting, 1);
                c->plugged = true;
                xs_update_events(c);
                /* it may have consumed meanwhile */
                cons = atomic_load_explicit(&rmb_hdr(c)->cons, memory_order_acquire);
                if (smc_curs_diff(size, c->rx_cons_sent, cons) > limit)
                        conn_tx(c, true);
        }
}

/* No send slot (or CDC budget) now: conn_tx() again when one frees, with @force_cdc
 * if this attempt had to send a CDC even without data (a consumer update). */
static void conn_wait_slot(SmcrConn *c, bool force_cdc) {
        SmcrLgr *lgr = c->lgr;

        c->wait_force |= force_cdc;
        if (!c->in_tx_wait) {
                LIST_PREPEND(tx_wait, lgr->tx_wait, c);
                c->in_tx_wait = true;
        }
}

/* Post WRITEs for the published but unsent send-buffer bytes that fit the peer's
 * RMB, then one CDC; also a CDC alone when @force_cdc (consumer update) or when
 * close flags are due. */
static void conn_tx(SmcrConn *c, bool force_cdc) {
        SmcrLgr *lgr = c->lgr;
        SmcrLink *l;
        uint32_t S, R, pending, space, n;
        uint64_t prod, cons;
        struct smc_cdc_msg cdc = {};
        uint8_t buf[SMC_CDC_LEN];
        uint8_t flags = 0;
        bool blocked;
        int r;

        if (!c->active || !lgr || lgr->failed || (c->sent_flags & (SMC_CDC_CONN_CLOSED | SMC_CDC_CONN_ABORT)))
                return;
        if (c->peer_flags & SMC_CDC_CONN_ABORT)
                return;
        l = c->link;
        if (!l || !l->rl || l->failing)
                return; /* moved to another link soon (link_down) */
        S = c->sndbuf->size;
        R = c->peer_rmb_size;
        for (;;) {
                if (c->fifo_n == SMCR_CDC_INFLIGHT || roce_link_send_slots_free(l->rl) == 0 || l->llc_n > 0) {
                        conn_wait_slot(c, force_cdc);
                        return;
                }
                if (c->need_validation) {
                        /* first on the new link: the seqno of our last completed CDC,
                         * for the peer to check that it lost none (4.6) */
                        struct smc_cdc_msg v = { .seqno = c->seq_fin, .token = c->peer_token,
                                                 .prod_flags = SMC_CDC_PROD_FAILOVER_VAL };

                        smc_cdc_encode(&v, buf);
                        r = link_post(l, buf, SMC_CDC_LEN, WR_ID_VALIDATION | ((uint64_t) c->token << 16), NULL);
                        if (r == -EAGAIN) {
                                conn_wait_slot(c, force_cdc);
                                return;
                        }
                        if (r < 0) {
                                link_down(l, "CDC send failed");
                                return;
                        }
                        c->need_validation = false;
                        continue;
                }
                prod = atomic_load_explicit(&snd_hdr(c)->prod, memory_order_acquire);
                pending = (c->local_flags & SMC_CDC_CONN_ABORT) ? 0 : smc_curs_diff(S, c->snd_sent, prod);
                if (c->peer_flags & SMC_CDC_CONN_CLOSED)
                        pending = 0; /* the peer does not read any more */
                space = R - smc_curs_diff(R, c->peer_cons, c->peer_prod);
                n = pending < space ? pending : space;
                blocked = pending > space;
                /* close flags once the data is out; a later flag too (CLOSED after a
                 * DONE_WRITING that went out with shutdown(SHUT_WR)), or neither side
                 * would ever see the other done */
                flags = 0;
                if (n == pending && (c->local_flags & ~c->sent_flags))
                        flags = c->local_flags;
                if (n == 0 && !force_cdc && !flags)
                        return;
                /* the RDMA WRITEs: at most 2 source x 2 destination pieces */
                if (n > 0) {
                        const SmcrRtoken *t = c->rtok >= 0 ? &lgr->rtok[c->rtok] : NULL;
                        uint32_t left = n, src = smc_curs_count(c->snd_sent), dst = smc_curs_count(c->peer_prod);
                        uint8_t *base = (uint8_t *) c->sndbuf->base + SMC_DMB_HDR_LEN;

                        if (!t || !(t->valid & (1u << l->idx)) || !c->snd_mr[l->idx]) {
                                /* the peer never told us its RMB on this link */
                                log_warning("SMC-R connection %08x: no rkey of the peer's RMB on link %u: abort.",
                                            c->token, l->link_num);
                                c->local_flags |= SMC_CDC_CONN_ABORT;
                                conn_abort_local(c);
                                continue;
                        }

                        while (left > 0) {
                                uint32_t piece = left;
                                struct ibv_sge sge;

                                if (piece > S - src)
                                        piece = S - src;
                                if (piece > R - dst)
                                        piece = R - dst;
                                sge.addr = (uintptr_t) (base + src);
                                sge.length = piece;
                                sge.lkey = c->snd_mr[l->idx]->lkey;
                                r = roce_link_write(l->rl, &sge, 1, t->addr[l->idx] + dst, t->rkey[l->idx]);
                                if (r < 0) {
                                        link_down(l, "RDMA WRITE failed");
                                        return;
                                }
                                c->sm->m->stats.smcr.rdma_writes++;
                                left -= piece;
                                src = (src + piece) % S;
                                dst = (dst + piece) % R;
                        }
                }
                c->snd_sent = smc_curs_add(c->snd_sent, n, S);
                c->peer_prod = smc_curs_add(c->peer_prod, n, R);
                c->tx_bytes += n;
                c->sm->m->stats.smcr.bytes_tx += n;
                cons = atomic_load_explicit(&rmb_hdr(c)->cons, memory_order_acquire);
                cdc.seqno = ++c->tx_seq;
                cdc.token = c->peer_token;
                cdc.prod_wrap = smc_curs_wrap(c->peer_prod);
                cdc.prod_count = smc_curs_count(c->peer_prod);
                cdc.cons_wrap = smc_curs_wrap(cons);
                cdc.cons_count = smc_curs_count(cons);
                cdc.prod_flags = blocked ? SMC_CDC_PROD_WRITE_BLOCKED : 0;
                cdc.conn_flags = flags;
                smc_cdc_encode(&cdc, buf);
                r = link_post(l, buf, SMC_CDC_LEN, WR_ID_CDC | ((uint64_t) c->token << 16) | cdc.seqno, NULL);
                if (r < 0) {
                        /* the WRITEs are posted: a later CDC carries their cursor */
                        if (r == -EAGAIN) {
                                conn_wait_slot(c, force_cdc);
                                return;
                        }
                        link_down(l, "CDC send failed");
                        return;
                }
                if (smcr_trace)
                        log_debug("T %llu tx cdc seq %u n %u space %u pending %u cons %u flags %x", (unsigned long long) now_usec(c->sm),
                                  cdc.seqno, n, space, pending, cdc.cons_count, flags);
                c->rx_cons_sent = cons;
                {
                        unsigned k = (c->fifo_head + c->fifo_n) % SMCR_CDC_INFLIGHT;

                        c->fifo[k].snd = c->snd_sent;
                        c->fifo[k].prod = c->peer_prod;
                        c->fifo[k].seq = cdc.seqno;
                        c->fifo[k].flags = flags;
                }
                c->fifo_n++;
                c->sent_flags |= flags;
                force_cdc = false;
                if (flags || !blocked || n == 0)
                        return;
        }
}

/* a CDC of @c completed: its bytes are in the peer's RMB; free send-buffer space */
static void conn_cdc_done(SmcrConn *c, enum ibv_wc_status status) {
        if (smcr_trace)
                log_debug("T %llu cdc done %d", (unsigned long long) now_usec(c->sm), status);
        if (c->fifo_n == 0)
                return;
        if (status == IBV_WC_SUCCESS) {
                c->snd_fin = c->fifo[c->fifo_head].snd;
                c->prod_fin = c->fifo[c->fifo_head].prod;
                c->seq_fin = c->fifo[c->fifo_head].seq;
                c->flags_fin |= c->fifo[c->fifo_head].flags;
                atomic_store_explicit(&snd_hdr(c)->cons, c->snd_fin, memory_order_release);
                conn_unplug_client(c);
        }
        c->fifo_head = (c->fifo_head + 1) % SMCR_CDC_INFLIGHT;
        c->fifo_n--;
}

/* doorbell / EOF / plug-drained on X_s */
static int on_xs(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        SmcrConn *c = userdata;
        char buf[64];

        if (smcr_trace)
                log_debug("T %llu xs events %x", (unsigned long long) now_usec(c->sm), revents);
        (void) s;
        if (revents & EPOLLOUT) {
                c->plugged = false;
                xs_update_events(c);
                conn_rx_check(c);
        }
        if (revents & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
                /* the reader's side of the doorbell (dmb.h): read every byte there is,
                 * then take the bell, then look at prod (conn_tx). A writer that
                 * publishes after our exchange finds the bell NONE and rings again; a
                 * byte written after our read only makes a spurious wakeup. (Reading
                 * just the bytes "owed" by bells we took would lose a wakeup here: a
                 * byte read for a bell taken later leaves that bell SET with no byte
                 * coming, and the writer never rings again.) */
                bool eof = false;

                for (;;) {
                        ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
                        if (n > 0)
                                continue;
                        eof = n == 0;
                        break;
                }
                (void) atomic_exchange(&snd_hdr(c)->bell, SMC_DMB_BELL_NONE);
                if (eof) {
                        /* the client shut down or closed its Y_s (or died) */
                        uint32_t f = atomic_load_explicit(&snd_hdr(c)->conn_flags, memory_order_acquire);

                        c->xs_eof = true;
                        xs_update_events(c);
                        if (f & SMC_DMB_CONN_ABORT)
                                c->local_flags |= SMC_CDC_CONN_ABORT;
                        else if (f & SMC_DMB_CONN_CLOSED)
                                c->local_flags |= SMC_CDC_CONN_CLOSED;
                        else if (f & SMC_DMB_CONN_DONE_WRITING)
                                c->local_flags |= SMC_CDC_CONN_DONE_WRITING;
                }
                conn_tx(c, false);
                conn_rx_check(c);
                conn_maybe_free(c);
        }
        return 0;
}

/* Publish the peer's close state (c->peer_flags) to the client: flags in the DMB
 * headers, then EOF on its fd (dmb.h "Shutdown and close"). */
static void conn_apply_peer_flags(SmcrConn *c) {
        uint8_t f = c->peer_flags;

        if (f & SMC_CDC_CONN_ABORT)
                conn_set_flags(c, SMC_DMB_CONN_ABORT, SMC_DMB_CONN_ABORT);
        else {
                if (f & SMC_CDC_CONN_CLOSED)
                        conn_set_flags(c, SMC_DMB_CONN_CLOSED, SMC_DMB_CONN_CLOSED);
                if (f & SMC_CDC_CONN_DONE_WRITING)
                        conn_set_flags(c, SMC_DMB_CONN_DONE_WRITING, 0);
        }
        if (!f)
                return;
        conn_ring_client(c);
        conn_eof_client(c, f & SMC_CDC_CONN_ABORT);
}

/* The CDC a failover validation named did not come in time: it was lost (4.6). */
static int on_val_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        SmcrConn *c = userdata;

        (void) s;
        (void) usec;
        c->val_timer = sd_event_source_disable_unref(c->val_timer);
        if (!c->val_pending)
                return 0;
        c->val_pending = false;
        log_warning("SMC-R connection %08x: a CDC was lost in a link failover (have %u, peer %u): abort.", c->token,
                    c->rx_seq_valid ? c->rx_seq : 0, c->val_seq);
        /* the abort CDC first: conn_abort_local() marks the peer done */
        c->local_flags |= SMC_CDC_CONN_ABORT;
        conn_tx(c, true);
        conn_abort_local(c);
        conn_maybe_free(c);
        return 0;
}

/* a CDC for @c arrived */
static void conn_on_cdc(SmcrConn *c, const struct smc_cdc_msg *cdc) {
        uint64_t prod = cdc_cursor(cdc->prod_wrap, cdc->prod_count), cons = cdc_cursor(cdc->cons_wrap, cdc->cons_count);
        uint32_t n;

        if (smcr_trace)
                log_debug("T %llu rx cdc seq %u prod %u cons %u flags %x/%x", (unsigned long long) now_usec(c->sm), cdc->seqno,
                          cdc->prod_count, cdc->cons_count, cdc->prod_flags, cdc->conn_flags);
        if (cdc->prod_flags & SMC_CDC_PROD_FAILOVER_VAL) {
                /* the peer moved us to another link: did we get every CDC whose send
                 * completed on its side? (4.6) */
                uint16_t have = c->rx_seq_valid ? c->rx_seq : 0;

                if ((int16_t) (have - cdc->seqno) < 0) {
                        /* not seen (yet): it may wait in the old link's CQ, which is
                         * served apart from this one's; it must come by the deadline */
                        if (smcr_trace)
                                log_debug("SMC-R connection %08x: failover validation names CDC %u, have %u: waiting",
                                          c->token, cdc->seqno, have);
                        c->val_seq = cdc->seqno;
                        c->val_pending = true;
                        if (!c->val_timer &&
                            sd_event_add_time(c->sm->m->event, &c->val_timer, CLOCK_MONOTONIC,
                                              now_usec(c->sm) + SMCR_VAL_WAIT_USEC, 0, on_val_timer, c) < 0)
                                (void) on_val_timer(NULL, 0, c); /* cannot wait: judge now */
                }
                return;
        }
        if (c->val_pending && cdc->seqno == c->val_seq) {
                /* the named CDC came (on the old link; its QP delivers in order, so the
                 * ones before it did too) */
                c->val_pending = false;
                c->val_timer = sd_event_source_disable_unref(c->val_timer);
        }
        if (c->rx_seq_valid && (int16_t) (cdc->seqno - c->rx_seq) <= 0)
                return; /* old or duplicate (4.1) */
        c->rx_seq = cdc->seqno;
        c->rx_seq_valid = true;
        if (cdc->prod_count >= c->rmb->size || (c->peer_rmb_size && cdc->cons_count >= c->peer_rmb_size)) {
                log_warning("SMC-R connection %08x: CDC with a cursor out of range: abort.", c->token);
                c->local_flags |= SMC_CDC_CONN_ABORT;
                conn_tx(c, true);
                conn_abort_local(c);
                return;
        }
        /* after a failover the peer re-sends from its last completed CDC: cursors
         * older than what we have are ignored (as Linux's smc_cdc_cursor_to_host) */
        n = curs_goes_back(c->rx_prod, prod) ? 0 : smc_curs_diff(c->rmb->size, c->rx_prod, prod);
        if (n > 0) {
                c->rx_prod = prod;
                c->rx_bytes += n;
                c->sm->m->stats.smcr.bytes_rx += n;
                atomic_store_explicit(&rmb_hdr(c)->prod_bytes, c->rx_bytes, memory_order_relaxed);
                atomic_store_explicit(&rmb_hdr(c)->prod, prod, memory_order_release);
        }
        if (!c->active) {
                /* the peer went ahead before our handshake ended (its CONFIRM is on the
                 * way over TCP): keep what its CDC said, also that it waits for room
                 * in our RMB; hs_done() rings the client and applies the rule */
                if (c->peer_rmb_size && !curs_goes_back(c->peer_cons, cons))
                        c->peer_cons = cons;
                c->peer_flags |= cdc->conn_flags;
                c->peer_blocked = cdc->prod_flags & SMC_CDC_PROD_WRITE_BLOCKED;
                if (cdc->prod_flags & SMC_CDC_PROD_CONS_UPD_REQ)
                        c->cons_upd_req = true;
                return;
        }
        if (!curs_goes_back(c->peer_cons, cons))
                c->peer_cons = cons;
        c->peer_blocked = cdc->prod_flags & SMC_CDC_PROD_WRITE_BLOCKED;
        if (cdc->prod_flags & SMC_CDC_PROD_CONS_UPD_REQ)
                c->cons_upd_req = true;
        if (cdc->conn_flags & ~c->peer_flags) {
                c->peer_flags |= cdc->conn_flags;
                conn_apply_peer_flags(c);
        } else if (n > 0)
                conn_ring_client(c);
        conn_tx(c, false);
        conn_rx_check(c);
        conn_maybe_free(c);
}

/* ------------------------------------------------------------------------- */
/* connection lifetime */

/* Register @c's RMB (remote write) and send buffer on the device of link slot @i. */
static int conn_reg(SmcrConn *c, unsigned i) {
        RoceDev *d = c->lgr->links[i].dev;
        int r;

        if (c->rmb_mr[i])
                return 0;
        r = roce_mr_reg(d, (uint8_t *) c->rmb->base + SMC_DMB_HDR_LEN, c->rmb->size, true, &c->rmb_mr[i]);
        if (r < 0)
                return r;
        r = roce_mr_reg(d, (uint8_t *) c->sndbuf->base + SMC_DMB_HDR_LEN, c->sndbuf->size, false, &c->snd_mr[i]);
        if (r < 0) {
                ibv_dereg_mr(c->rmb_mr[i]);
                c->rmb_mr[i] = NULL;
        }
        return r;
}

static void conn_unreg(SmcrConn *c, unsigned i) {
        if (c->rmb_mr[i])
                ibv_dereg_mr(c->rmb_mr[i]);
        if (c->snd_mr[i])
                ibv_dereg_mr(c->snd_mr[i]);
        c->rmb_mr[i] = c->snd_mr[i] = NULL;
}

/* Take @c off its link group: deregister its MRs, stop its data path. The buffers
 * and fds stay until its client closes the endpoint (the client still maps them). */
static void conn_detach(SmcrConn *c) {
        SmcrManager *sm = c->sm;

        if (c->in_tx_wait && c->lgr) {
                LIST_REMOVE(tx_wait, c->lgr->tx_wait, c);
                c->in_tx_wait = false;
        }
        for (unsigned i = 0; i < SMCR_MAX_LINKS; i++)
                conn_unreg(c, i);
        c->fifo_n = 0;
        if (c->link) {
                c->link->n_conns--;
                c->link = NULL;
        }
        if (c->lgr) {
                SmcrLgr *lgr = c->lgr;

                LIST_REMOVE(conns, lgr->conns, c);
                lgr->n_conns--;
                c->lgr = NULL;
                if (lgr->n_conns == 0 && !lgr->failed && lgr->idle_timer) {
                        (void) sd_event_source_set_time(lgr->idle_timer, now_usec(sm) + SMCR_LGR_IDLE_USEC);
                        (void) sd_event_source_set_enabled(lgr->idle_timer, SD_EVENT_ONESHOT);
                }
        }
}

static void conn_free(SmcrConn *c) {
        SmcrManager *sm = c->sm;
        Manager *m = sm->m;

        if (c->accounted && c->rmb) {
                uid_account(m, c->uid, -1, -(int64_t) c->rmb->size);
                c->accounted = false;
        }
        if (c->active && c->sndbuf && c->rmb) {
                /* what the client counted in the headers (dmb.h "Counters") */
                struct smc_dmb_hdr *t = snd_hdr(c), *r = rmb_hdr(c);

                m->stats.smcr.msgs_tx += atomic_load_explicit(&t->prod_msgs, memory_order_relaxed);
                m->stats.smcr.cork_flushes += atomic_load_explicit(&t->prod_cork_flushes, memory_order_relaxed);
                m->stats.smcr.sendfile_calls += atomic_load_explicit(&t->prod_sendfile_calls, memory_order_relaxed);
                m->stats.smcr.sendfile_bytes += atomic_load_explicit(&t->prod_sendfile_bytes, memory_order_relaxed);
                m->stats.smcr.msgs_rx += atomic_load_explicit(&r->cons_msgs, memory_order_relaxed);
        }
        if (conn_retire_rmb(c))
                log_debug("SMC-R connection %08x: its RMB stays registered for %llu s (aborted before the peer "
                          "was done: WRITEs may still come).",
                          c->token, (unsigned long long) (SMCR_RETIRE_USEC / 1000000ULL));
        conn_detach(c);
        c->val_timer = sd_event_source_disable_unref(c->val_timer);
        c->xs_src = sd_event_source_disable_unref(c->xs_src);
        if (c->xs >= 0)
                close(c->xs);
        if (c->ya >= 0)
                close(c->ya);
        if (c->tcp >= 0)
                close(c->tcp);
        c->xs = c->ya = c->tcp = -1;
        if (c->token)
                u64map_remove(sm->tokens, c->token);
        if (c->rmb)
                manager_release_buf(m, c->rmb);
        if (c->sndbuf)
                manager_release_buf(m, c->sndbuf);
        free(c);
}

/* DELETE RKEY of @c's RMB (5.7) on a live link group, its rkey on each link: when the
 * connection is freed, or its handshake failed after the RMB may have been announced
 * (the peer answers an unknown rkey negatively: harmless). */
static void conn_queue_delete_rkey(SmcrConn *c) {
        SmcrLgr *lgr = c->lgr;
        unsigned k;
        uint8_t valid = 0;

        if (!lgr || lgr->failed || lgr->n_del_rkeys >= SMCR_DEL_RKEYS)
                return;
        k = lgr->n_del_rkeys;
        for (unsigned i = 0; i < SMCR_MAX_LINKS; i++) {
                lgr->del_rkeys[k][i] = c->rmb_mr[i] ? c->rmb_mr[i]->rkey : 0;
                if (c->rmb_mr[i])
                        valid |= (uint8_t) (1u << i);
        }
        if (!valid)
                return;
        lgr->del_valid[k] = valid;
        lgr->n_del_rkeys++;
        lgr_flow_next(lgr);
}

/* Free once both sides are done and our last CDC completed. */
static void conn_maybe_free(SmcrConn *c) {
        SmcrManager *sm = c->sm;
        Manager *m = sm->m;
        /* after our abort the peer owes us nothing (as after a TCP RST) */
        bool peer_done = (c->peer_flags & (SMC_CDC_CONN_CLOSED | SMC_CDC_CONN_ABORT)) ||
                         (c->sent_flags & SMC_CDC_CONN_ABORT);
        /* after the peer's abort we owe it nothing either (conn_tx sends no more) */
        bool we_done = (c->sent_flags & (SMC_CDC_CONN_CLOSED | SMC_CDC_CONN_ABORT)) ||
                       (c->local_flags & SMC_CDC_CONN_ABORT) || (c->peer_flags & SMC_CDC_CONN_ABORT) ||
                       !c->lgr || c->lgr->failed;

        if (!c->closed || !peer_done || !we_done || (c->fifo_n > 0 && c->lgr && !c->lgr->failed))
                return;
        conn_queue_delete_rkey(c);
        if (c->peer_flags & SMC_CDC_CONN_ABORT || c->ep.aborted)
                m->stats.smcr.conns_aborted++;
        else
                m->stats.smcr.conns_closed++;
        m->stats.smcr.conns_current--;
        log_debug("SMC-R connection %08x freed (%" PRIu64 " bytes out, %" PRIu64 " in).", c->token, c->tx_bytes,
                  c->rx_bytes);
        conn_free(c);
        manager_status_changed(m);
}

void smcr_endpoint_close(Manager *m, Endpoint *e, bool aborted, bool died) {
        SmcrConn *c = e->smcr;

        if (e->closed)
                return;
        e->closed = true;
        u64map_remove(m->endpoints, e->id);
        if (e->owner) {
                Client *owner = e->owner;

                LIST_REMOVE(by_client, owner->endpoints, e);
                e->owner = NULL;
                client_owned_less(owner);
        }
        if (c->accounted) {
                uid_account(m, c->uid, -1, -(int64_t) c->rmb->size);
                c->accounted = false;
        }
        if (e->role_server)
                m->stats.smcr.conns_server_current--;
        else
                m->stats.smcr.conns_client_current--;
        c->closed = true;
        if (died) {
                uint32_t f = atomic_load(&snd_hdr(c)->conn_flags), n;
                if (!(f & (SMC_DMB_CONN_CLOSED | SMC_DMB_CONN_ABORT))) {
                        /* as TCP when a process exits: FIN if it read everything, else RST;
                         * never RST once both directions were shut (both FINs went:
                         * TCP's socket is closed then, conn.c died_flags) */
                        aborted = atomic_load(&rmb_hdr(c)->prod) != atomic_load(&rmb_hdr(c)->cons) &&
                                  !((f & SMC_DMB_CONN_DONE_WRITING) &&
                                    (atomic_load(&rmb_hdr(c)->conn_flags) &
                                     (SMC_DMB_CONN_DONE_WRITING | SMC_DMB_CONN_CLOSED)));
                        c->local_flags |= aborted ? SMC_CDC_CONN_ABORT : SMC_CDC_CONN_CLOSED;
                        /* bytes its cork or MSG_MORE held back in the send buffer
                         * go before the CLOSED flag (conn_tx); an abort drops them */
                        if (!aborted && (n = smc_dmb_publish_held(snd_hdr(c), c->sndbuf->size)) > 0)
                                log_debug("Endpoint %016" PRIx64 ": %" PRIu32
                                          " bytes it held back published at its end.", e->id, n);
                } else
                        c->local_flags |= (f & SMC_DMB_CONN_ABORT) ? SMC_CDC_CONN_ABORT : SMC_CDC_CONN_CLOSED;
        } else if (aborted)
                c->local_flags |= SMC_CDC_CONN_ABORT;
        else {
                uint32_t f = atomic_load(&snd_hdr(c)->conn_flags);
                c->local_flags |= (f & SMC_DMB_CONN_ABORT) ? SMC_CDC_CONN_ABORT : SMC_CDC_CONN_CLOSED;
        }
        e->aborted = (c->local_flags & SMC_CDC_CONN_ABORT) != 0;
        conn_tx(c, true);
        conn_maybe_free(c);
}

/* ------------------------------------------------------------------------- */
/* link groups */

static SmcrConn *conn_by_token(SmcrManager *sm, uint32_t token) {
        return u64map_get(sm->tokens, token);
}

/* Free link slot @l's resources (no callbacks run) and clear it. */
static void link_clear(SmcrLink *l) {
        SmcrLgr *lgr = l->lgr;
        unsigned idx = l->idx;

        l->rl = roce_link_free(l->rl);
        l->down_defer = sd_event_source_disable_unref(l->down_defer);
        free(l->big);
        memset(l, 0, sizeof(*l));
        l->lgr = lgr;
        l->idx = idx;
}

static void zombie_free(SmcrZombie *z) {
        LIST_REMOVE(zombies, z->lgr->zombies, z);
        z->timer = sd_event_source_disable_unref(z->timer);
        z->rl = roce_link_free(z->rl);
        free(z);
}

static int on_zombie_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        (void) s;
        (void) usec;
        zombie_free(userdata);
        return 0;
}

static void retired_free(SmcrRetired *r) {
        LIST_REMOVE(retired, r->lgr->retired, r);
        r->timer = sd_event_source_disable_unref(r->timer);
        for (unsigned i = 0; i < SMCR_MAX_LINKS; i++)
                if (r->mr[i])
                        ibv_dereg_mr(r->mr[i]);
        manager_release_buf(r->lgr->sm->m, r->rmb);
        free(r);
}

static int on_retired_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        (void) s;
        (void) usec;
        retired_free(userdata);
        return 0;
}

/* Keep @c's RMB and its memory regions (SmcrRetired) instead of letting them go with
 * @c, if the peer may still write into it. Returns true if taken (c->rmb and
 * c->rmb_mr[] are cleared then), false to free them at once. */
static bool conn_retire_rmb(SmcrConn *c) {
        SmcrLgr *lgr = c->lgr;
        SmcrRetired *r;

        if (!lgr || lgr->failed || !c->rmb || !(c->sent_flags & SMC_CDC_CONN_ABORT) ||
            (c->peer_flags & (SMC_CDC_CONN_CLOSED | SMC_CDC_CONN_ABORT)))
                return false;
        r = calloc(1, sizeof(*r));
        if (!r)
                return false;
        if (sd_event_add_time_relative(lgr->sm->m->event, &r->timer, CLOCK_MONOTONIC, SMCR_RETIRE_USEC, 0,
                                       on_retired_timer, r) < 0) {
                free(r);
                return false;
        }
        r->lgr = lgr;
        r->rmb = c->rmb;
        c->rmb = NULL;
        for (unsigned i = 0; i < SMCR_MAX_LINKS; i++) {
                r->mr[i] = c->rmb_mr[i];
                c->rmb_mr[i] = NULL;
        }
        LIST_PREPEND(retired, lgr->retired, r);
        return true;
}

static void zombie_recv(void *userdata, const uint8_t *buf, uint32_t len) {
        SmcrZombie *z = userdata;
        struct smc_cdc_msg cdc;
        SmcrConn *c;

        if (z->lgr->failed || !smc_wr_is_cdc(buf, len) || smc_cdc_decode(buf, len, &cdc) < 0)
                return; /* LLC: its flows went to the other link */
        c = conn_by_token(z->lgr->sm, cdc.token);
        if (c && c->lgr == z->lgr)
                conn_on_cdc(c, &cdc);
}

static void zombie_send_done(void *userdata, uint64_t wr_id, enum ibv_wc_status status) {
        (void) userdata;
        (void) wr_id;
        (void) status;
}

static void zombie_failed(void *userdata, enum ibv_wc_status status) {
        (void) userdata;
        (void) status; /* freed by its timer */
}

static const struct roce_link_ops zombie_ops = {
        .recv = zombie_recv,
        .send_done = zombie_send_done,
        .failed = zombie_failed,
};

/* Keep @l's QP for its grace period (it takes l->rl); false if that cannot be done. */
static bool link_to_zombie(SmcrLink *l) {
        SmcrLgr *lgr = l->lgr;
        SmcrZombie *z = calloc(1, sizeof(*z));

        if (!z)
                return false;
        if (sd_event_add_time(lgr->sm->m->event, &z->timer, CLOCK_MONOTONIC, now_usec(lgr->sm) + SMCR_LINK_GRACE_USEC,
                              0, on_zombie_timer, z) < 0 ||
            roce_link_set_ops(l->rl, &zombie_ops, z) < 0) {
                z->timer = sd_event_source_disable_unref(z->timer);
                free(z);
                return false;
        }
        z->lgr = lgr;
        z->rl = l->rl;
        l->rl = NULL;
        LIST_PREPEND(zombies, lgr->zombies, z);
        return true;
}

static void lgr_free(SmcrLgr *lgr) {
        SmcrManager *sm = lgr->sm;

        LIST_REMOVE(lgrs, sm->lgrs, lgr);
        lgr->flow_timer = sd_event_source_disable_unref(lgr->flow_timer);
        lgr->idle_timer = sd_event_source_disable_unref(lgr->idle_timer);
        lgr->test_timer = sd_event_source_disable_unref(lgr->test_timer);
        lgr->add_timer = sd_event_source_disable_unref(lgr->add_timer);
        for (unsigned i = 0; i < SMCR_MAX_LINKS; i++)
                link_clear(&lgr->links[i]);
        while (lgr->zombies)
                zombie_free(lgr->zombies);
        while (lgr->retired)
                retired_free(lgr->retired);
        free(lgr->add_rk);
        sm->m->stats.smcr.lgrs--;
        log_debug("SMC-R link group %08x freed.", lgr->id);
        free(lgr);
}

static int on_lgr_free_defer(sd_event_source *s, void *userdata) {
        SmcrLgr *lgr = userdata;

        sd_event_source_disable_unref(s);
        lgr_free(lgr);
        return 0;
}

/* The link group is unusable: abort its connections, fail its handshakes, free it
 * (deferred: we may be inside one of its link's callbacks). */
static void lgr_fail(SmcrLgr *lgr, const char *why) {
        SmcrManager *sm = lgr->sm;
        SmcrConn *c, *cn;
        SmcrHs *hs, *hn;

        if (lgr->failed)
                return;
        lgr->failed = true;
        if (lgr->n_conns > 0)
                log_warning("SMC-R link group %08x (%s): %s; aborting %u connections.", lgr->id, roce_dev_name(lgr->dev),
                            why, lgr->n_conns);
        else /* an unused group ended (by us when idle, or by the peer): nothing lost */
                log_info("SMC-R link group %08x (%s): %s; it had no connections.", lgr->id, roce_dev_name(lgr->dev),
                         why);
        for (unsigned i = 0; i < SMCR_MAX_LINKS; i++)
                if (lgr->links[i].rl)
                        roce_link_set_error(lgr->links[i].rl);
        LIST_FOREACH_SAFE(hss, hs, hn, sm->hss)
                if (hs->lgr == lgr)
                        hs_fail(hs, -ECONNRESET, SMC_CLC_DECL_NOACTLINK, false);
        lgr_release_waiters(lgr); /* they make their own first contact */
        LIST_FOREACH_SAFE(conns, c, cn, lgr->conns) {
                conn_abort_local(c);
                c->local_flags |= SMC_CDC_CONN_ABORT;
                conn_detach(c); /* the Endpoint and buffers stay until the client closes */
                conn_maybe_free(c);
        }
        {
                sd_event_source *s = NULL;
                if (sd_event_add_defer(sm->m->event, &s, on_lgr_free_defer, lgr) < 0)
                        log_error("Cannot defer freeing link group %08x: leaked.", lgr->id);
        }
}

/* The handshakes that waited for @lgr's first contact decide again: reuse it (its
 * link is up) or make their own (it failed). Deferred-safe: each is taken off the
 * list before it continues. */
static void lgr_release_waiters(SmcrLgr *lgr) {
        while (lgr->fc_wait) {
                SmcrHs *hs = lgr->fc_wait;

                LIST_REMOVE(fc_wait, lgr->fc_wait, hs);
                hs->fc_wait_lgr = NULL;
                hs_server_continue(hs);
        }
}

/* ---- the peer's RMBs: rtokens ---- */

static int rtok_find(const SmcrLgr *lgr, unsigned idx, uint32_t rkey) {
        for (int i = 0; i < SMCR_RTOKENS; i++)
                if (lgr->rtok[i].used && (lgr->rtok[i].valid & (1u << idx)) && lgr->rtok[i].rkey[idx] == rkey)
                        return i;
        return -1;
}

static int rtok_new(SmcrLgr *lgr) {
        for (int i = 0; i < SMCR_RTOKENS; i++)
                if (!lgr->rtok[i].used) {
                        memset(&lgr->rtok[i], 0, sizeof(lgr->rtok[i]));
                        lgr->rtok[i].used = true;
                        return i;
                }
        return -1;
}

/* The peer's RMB (@rkey, @addr) on link slot @idx: its entry (found or made), or -1
 * when the table is full. */
static int rtok_add(SmcrLgr *lgr, unsigned idx, uint32_t rkey, uint64_t addr) {
        int t = rtok_find(lgr, idx, rkey);

        if (t < 0)
                t = rtok_new(lgr);
        if (t < 0)
                return -1;
        lgr->rtok[t].valid |= 1u << idx;
        lgr->rtok[t].rkey[idx] = rkey;
        lgr->rtok[t].addr[idx] = addr;
        return t;
}

/* An rkey exchange entry of the peer (5.3 v2 extension, 5.4): the RMB it knows as
 * @e->rkey_old on slot @old is @e->rkey_new / @e->addr_new on slot @new. Unknown old
 * rkeys are skipped (an RMB whose CONFIRM RKEY is still to come carries both then). */
static void rtok_set_new(SmcrLgr *lgr, unsigned old, unsigned new, const struct smc_llc_rkey_entry *e) {
        int t = rtok_find(lgr, old, e->rkey_old);

        if (t < 0)
                return;
        lgr->rtok[t].valid |= 1u << new;
        lgr->rtok[t].rkey[new] = e->rkey_new;
        lgr->rtok[t].addr[new] = e->addr_new;
}

static void rtok_del(SmcrLgr *lgr, int t) {
        SmcrConn *c;

        LIST_FOREACH(conns, c, lgr->conns)
                if (c->rtok == t)
                        c->rtok = -1;
        memset(&lgr->rtok[t], 0, sizeof(lgr->rtok[t]));
}

/* ---- local LLC flows: CONFIRM RKEY for a handshake, DELETE RKEY, ADD LINK (5.10) ---- */

static void add_start(SmcrLgr *lgr);

static int on_flow_timeout(sd_event_source *s, uint64_t usec, void *userdata) {
        SmcrLgr *lgr = userdata;

        (void) s;
        (void) usec;
        lgr->sm->m->stats.smcr.links_failed++;
        lgr_fail(lgr, "no LLC response in time");
        return 0;
}

static void flow_arm(SmcrLgr *lgr) {
        SmcrManager *sm = lgr->sm;

        if (!lgr->flow_timer) {
                if (sd_event_add_time(sm->m->event, &lgr->flow_timer, CLOCK_MONOTONIC, 0, 0, on_flow_timeout, lgr) < 0)
                        return;
        }
        (void) sd_event_source_set_time(lgr->flow_timer, now_usec(sm) + SMCR_LLC_RESP_USEC);
        (void) sd_event_source_set_enabled(lgr->flow_timer, SD_EVENT_ONESHOT);
}

static void flow_disarm(SmcrLgr *lgr) {
        if (lgr->flow_timer)
                (void) sd_event_source_set_enabled(lgr->flow_timer, SD_EVENT_OFF);
}

/* CONFIRM RKEY for @c's RMB on @via: its rkey there, and on each other active link */
static void send_confirm_rkey(SmcrLgr *lgr, SmcrConn *c, SmcrLink *via) {
        uint64_t addr = (uint64_t) (uintptr_t) ((uint8_t *) c->rmb->base + SMC_DMB_HDR_LEN);
        struct smc_llc_msg m;

        llc_init(lgr, &m, SMC_LLC_CONFIRM_RKEY, 0);
        m.confirm_rkey.rkey = c->rmb_mr[via->idx]->rkey;
        m.confirm_rkey.addr = addr;
        for (unsigned i = 0; i < SMCR_MAX_LINKS; i++) {
                SmcrLink *o = &lgr->links[i];

                if (o == via || !o->rl || !o->active || !c->rmb_mr[i])
                        continue;
                m.confirm_rkey.rt[m.confirm_rkey.num_rkeys].link_num = o->link_num;
                m.confirm_rkey.rt[m.confirm_rkey.num_rkeys].rkey = c->rmb_mr[i]->rkey;
                m.confirm_rkey.rt[m.confirm_rkey.num_rkeys].addr = addr;
                m.confirm_rkey.num_rkeys++;
        }
        llc_send(via, &m);
}

/* Start the next local flow if none is active (nor a remote ADD LINK flow). */
static void lgr_flow_next(SmcrLgr *lgr) {
        SmcrLink *via = lgr_llc_link(lgr);
        struct smc_llc_msg m;

        if (lgr->failed || lgr->rkey_active || lgr->del_active || lgr->add_state != ADD_NONE || !via)
                return;
        if (lgr->rkey_wait) {
                SmcrHs *hs = lgr->rkey_wait;
                SmcrConn *c = hs->conn;

                LIST_REMOVE(rkey_wait, lgr->rkey_wait, hs);
                lgr->rkey_active = hs;
                if (!c->rmb_mr[via->idx]) {
                        /* registered on a link that is gone, not yet on this one */
                        if (conn_reg(c, via->idx) < 0) {
                                lgr->rkey_active = NULL;
                                hs_fail(hs, 0, SMC_CLC_DECL_ERR_REGBUF, true);
                                lgr_flow_next(lgr);
                                return;
                        }
                }
                send_confirm_rkey(lgr, c, via);
                flow_arm(lgr);
                return;
        }
        while (lgr->n_del_rkeys > 0) {
                unsigned n = 0, used = 0;

                llc_init(lgr, &m, SMC_LLC_DELETE_RKEY, 0);
                while (used < lgr->n_del_rkeys && n < SMC_LLC_MAX_DELETE_RKEYS_V1) {
                        if (lgr->del_valid[used] & (1u << via->idx))
                                m.delete_rkey.rkeys[n++] = lgr->del_rkeys[used][via->idx];
                        used++;
                }
                memmove(lgr->del_rkeys, lgr->del_rkeys + used, (lgr->n_del_rkeys - used) * sizeof(lgr->del_rkeys[0]));
                memmove(lgr->del_valid, lgr->del_valid + used, (lgr->n_del_rkeys - used) * sizeof(lgr->del_valid[0]));
                lgr->n_del_rkeys -= used;
                if (n == 0)
                        continue; /* RMBs registered only on links that are gone */
                m.delete_rkey.num_rkeys = (uint8_t) n;
                lgr->del_active = true;
                llc_send(via, &m);
                flow_arm(lgr);
                return;
        }
        if (lgr->add_wanted)
                add_start(lgr);
}

/* ---- TEST LINK keepalive (5.8), per link ---- */

static int on_test_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        SmcrLgr *lgr = userdata;
        SmcrManager *sm = lgr->sm;
        uint64_t t = (uint64_t) sm->m->config.test_link_time * 1000000ULL, now = now_usec(sm), next = now + t;
        struct smc_llc_msg m;

        (void) usec;
        if (lgr->failed)
                return 0;
        if (t == 0) {
                (void) sd_event_source_set_time(s, now + 10 * 1000000ULL); /* look again later */
                return sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
        }
        for (unsigned i = 0; i < SMCR_MAX_LINKS; i++) {
                SmcrLink *l = &lgr->links[i];
                uint64_t due;

                if (!l->rl || !l->active || l->failing)
                        continue;
                if (l->test_pending) {
                        if (now >= l->test_sent_usec + SMCR_LLC_RESP_USEC) {
                                link_down(l, "no TEST LINK response");
                                continue;
                        }
                        due = l->test_sent_usec + SMCR_LLC_RESP_USEC;
                } else if (now - l->last_rx_usec >= t) {
                        llc_init(lgr, &m, SMC_LLC_TEST_LINK, 0);
                        llc_send(l, &m);
                        l->test_pending = true;
                        l->test_sent_usec = now;
                        due = now + SMCR_LLC_RESP_USEC;
                } else
                        due = l->last_rx_usec + t;
                if (due < next)
                        next = due;
        }
        if (lgr->failed)
                return 0;
        (void) sd_event_source_set_time(s, next > now ? next : now + 1000);
        return sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
}

static int on_idle_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        SmcrLgr *lgr = userdata;
        struct smc_llc_msg m;

        (void) s;
        (void) usec;
        if (lgr->n_conns > 0 || lgr->failed)
                return 0;
        /* orderly end of an unused link group (3.6) */
        llc_init(lgr, &m, SMC_LLC_DELETE_LINK, SMC_LLC_FLAG_DEL_LINK_ALL | SMC_LLC_FLAG_DEL_LINK_ORDERLY);
        m.delete_link.reason = SMC_LLC_DEL_PROG_INIT_TERM;
        llc_send(lgr_llc_link(lgr), &m);
        lgr_fail(lgr, "unused");
        return 0;
}

/* ---- failover (4.6, 5.5) ---- */

/* Move @c to link @to: rewind to the last CDC whose send completed, a validation CDC
 * first, then the data again (rewriting the same RMB bytes is harmless). */
static void conn_switch(SmcrConn *c, SmcrLink *to) {
        uint32_t S = c->sndbuf->size, R = c->peer_rmb_size;
        bool cant = false;

        if (c->link)
                c->link->n_conns--;
        c->link = to;
        to->n_conns++;
        if (c->in_tx_wait) {
                LIST_REMOVE(tx_wait, c->lgr->tx_wait, c);
                c->in_tx_wait = false;
                c->wait_force = false;
        }
        c->fifo_n = 0;
        c->fifo_head = 0;
        c->sm->m->stats.smcr.failovers++;
        if (!c->rmb_mr[to->idx] && conn_reg(c, to->idx) < 0) {
                c->local_flags |= SMC_CDC_CONN_ABORT; /* conn_tx() sends it below */
                cant = true;
        }
        {
                /* the bytes written again are counted once */
                uint32_t again = smc_curs_diff(S, c->snd_fin, c->snd_sent);

                c->tx_bytes -= again;
                c->sm->m->stats.smcr.bytes_tx -= again;
        }
        c->snd_sent = c->snd_fin;
        c->peer_prod = c->prod_fin;
        if (R && !curs_goes_back(c->prod_fin, c->peer_cons) && smc_curs_diff(R, c->prod_fin, c->peer_cons) > 0) {
                /* the peer consumed beyond our last completed CDC (its CDC got through,
                 * the completion did not): those bytes arrived, start after them */
                uint32_t d = smc_curs_diff(R, c->prod_fin, c->peer_cons);

                c->snd_fin = c->snd_sent = smc_curs_add(c->snd_fin, d, S);
                c->prod_fin = c->peer_prod = smc_curs_add(c->prod_fin, d, R);
                atomic_store_explicit(&snd_hdr(c)->cons, c->snd_fin, memory_order_release);
                conn_unplug_client(c);
        }
        c->sent_flags = c->flags_fin;
        c->need_validation = c->active;
        /* then a CDC even without data: our consumer cursor too may have gone out only
         * in a CDC lost with the link, and a blocked peer would wait for it forever */
        if (c->active)
                conn_tx(c, true);
        if (cant)
                conn_abort_local(c);
}

/* Link @l is gone (netdev down, TEST LINK unanswered, completion error, the peer's
 * DELETE LINK): move its connections to another active link, or end the group if
 * there is none. @tell: send the peer DELETE LINK for it (5.5). */
static void link_remove(SmcrLink *l, const char *why, bool tell) {
        SmcrLgr *lgr = l->lgr;
        SmcrManager *sm = lgr->sm;
        SmcrLink *to;
        SmcrConn *c, *cn;
        unsigned moved = 0;
        uint8_t num = l->link_num;
        bool was_active = l->active;

        if (lgr->failed || !l->rl)
                return;
        if (lgr->add_state != ADD_NONE && (lgr->add_new == l || lgr->add_via == l)) {
                SmcrLink *nl = lgr->add_new;

                lgr->add_state = ADD_NONE;
                lgr->add_new = lgr->add_via = NULL;
                free(lgr->add_rk);
                lgr->add_rk = NULL;
                if (lgr->add_timer)
                        (void) sd_event_source_set_enabled(lgr->add_timer, SD_EVENT_OFF);
                if (nl != l) {
                        /* the link that was being added goes too */
                        LIST_FOREACH(conns, c, lgr->conns)
                                conn_unreg(c, nl->idx);
                        link_clear(nl);
                }
        }
        sm->m->stats.smcr.links_failed++;
        to = lgr_pick_link(lgr, l);
        if (!to) {
                lgr_fail(lgr, why);
                return;
        }
        l->active = false;
        l->failing = true;
        LIST_FOREACH_SAFE(conns, c, cn, lgr->conns)
                if (c->link == l) {
                        conn_switch(c, to);
                        moved++;
                }
        LIST_FOREACH(conns, c, lgr->conns)
                conn_unreg(c, l->idx);
        for (unsigned i = 0; i < SMCR_RTOKENS; i++)
                lgr->rtok[i].valid &= (uint8_t) ~(1u << l->idx);
        log_warning("SMC-R link group %08x: link %u (%s) removed: %s; %u connections moved to link %u (%s).", lgr->id,
                    num, roce_dev_name(l->dev), why, moved, to->link_num, roce_dev_name(to->dev));
        /* responses still queued on it (the peer's flows wait for them) go on the other
         * link; our own requests are made again below */
        for (unsigned i = 0; i < l->llc_n; i++) {
                const uint8_t *q = l->llc_q[(l->llc_head + i) % SMCR_LLC_QUEUE];

                if (q[3] & SMC_LLC_FLAG_RESP)
                        llc_send_raw(to, q);
        }
        (void) link_to_zombie(l); /* else link_clear() frees the QP at once */
        link_clear(l);
        if (tell) {
                struct smc_llc_msg m;

                llc_init(lgr, &m, SMC_LLC_DELETE_LINK, lgr->server ? 0 : SMC_LLC_FLAG_DEL_LINK_ORDERLY);
                m.delete_link.link_num = num;
                m.delete_link.reason = SMC_LLC_DEL_LOST_PATH;
                llc_send(to, &m);
        }
        /* a local flow whose message went on the lost link: again on the other one */
        if (lgr->rkey_active) {
                SmcrConn *rc = lgr->rkey_active->conn;

                if (rc && (rc->rmb_mr[to->idx] || conn_reg(rc, to->idx) == 0)) {
                        send_confirm_rkey(lgr, rc, to);
                        flow_arm(lgr);
                }
        }
        if (lgr->del_active) {
                /* its rkeys are not kept: the peer keeps stale entries (harmless) */
                lgr->del_active = false;
                flow_disarm(lgr);
        }
        /* another try now (a device may be up), unless this link never came up: then
         * the peer could not or would not make it (e.g. a Linux peer deletes a link
         * whose path it cannot reach after 5 s), and a try now would loop; the next
         * one is when a netdev comes up (on_readd_timer) */
        if (lgr->server && was_active && lgr_links_used(lgr) < lgr->max_links)
                lgr->add_wanted = true;
        lgr_flow_next(lgr);
        manager_status_changed(sm->m);
}

static int on_link_down_defer(sd_event_source *s, void *userdata) {
        SmcrLink *l = userdata;

        (void) s;
        l->down_defer = sd_event_source_disable_unref(l->down_defer);
        link_remove(l, l->down_why, true);
        return 0;
}

/* @l failed: deferred to link_remove() (we may be inside a callback of its link or
 * in the middle of a send on it); it is not used from now on. */
static void link_down(SmcrLink *l, const char *why) {
        SmcrLgr *lgr = l->lgr;

        if (lgr->failed || !l->rl || l->failing)
                return;
        l->failing = true;
        l->active = false;
        snprintf(l->down_why, sizeof(l->down_why), "%s", why);
        if (sd_event_add_defer(lgr->sm->m->event, &l->down_defer, on_link_down_defer, l) < 0) {
                lgr->sm->m->stats.smcr.links_failed++;
                lgr_fail(lgr, why);
        }
}

/* ---- ADD LINK (5.3, 5.4): the server adds a second link; the client answers ---- */

static int on_add_timeout(sd_event_source *s, uint64_t usec, void *userdata);

static void add_arm(SmcrLgr *lgr) {
        SmcrManager *sm = lgr->sm;

        if (!lgr->add_timer &&
            sd_event_add_time(sm->m->event, &lgr->add_timer, CLOCK_MONOTONIC, 0, 0, on_add_timeout, lgr) < 0)
                return;
        (void) sd_event_source_set_time(lgr->add_timer, now_usec(sm) + SMCR_ADD_LINK_USEC);
        (void) sd_event_source_set_enabled(lgr->add_timer, SD_EVENT_ONESHOT);
}

/* The flow ended (@ok: the new link is active). */
static void add_end(SmcrLgr *lgr, bool ok, const char *why) {
        SmcrLink *nl = lgr->add_new, *via = lgr->add_via;
        bool server = lgr->server;
        uint8_t num = nl ? nl->link_num : 0;

        lgr->add_state = ADD_NONE;
        lgr->add_new = lgr->add_via = NULL;
        free(lgr->add_rk);
        lgr->add_rk = NULL;
        lgr->add_rk_n = lgr->add_rk_sent = lgr->add_recv_left = 0;
        if (lgr->add_timer)
                (void) sd_event_source_set_enabled(lgr->add_timer, SD_EVENT_OFF);
        if (ok) {
                lgr->sm->m->stats.smcr.links_added++;
                log_info("SMC-R link group %08x: link %u added (%s -> %s QP %u).", lgr->id, nl->link_num,
                         roce_dev_name(nl->dev), link_netdev(lgr->sm, nl->dev), nl->peer_qpn);
                manager_status_changed(lgr->sm->m);
        } else if (nl) {
                SmcrConn *c;

                log_info("SMC-R link group %08x: no second link: %s.", lgr->id, why);
                LIST_FOREACH(conns, c, lgr->conns)
                        conn_unreg(c, nl->idx);
                link_clear(nl);
                if (server && num && via && via->rl && !lgr->failed) {
                        /* the client may have made its side: delete it (5.4 step 5) */
                        struct smc_llc_msg m;

                        llc_init(lgr, &m, SMC_LLC_DELETE_LINK, 0);
                        m.delete_link.link_num = num;
                        m.delete_link.reason = SMC_LLC_DEL_LOST_PATH;
                        llc_send(via, &m);
                }
        }
        lgr_flow_next(lgr);
}

static int on_add_timeout(sd_event_source *s, uint64_t usec, void *userdata) {
        SmcrLgr *lgr = userdata;

        (void) s;
        (void) usec;
        if (lgr->add_state != ADD_NONE)
                add_end(lgr, false, "no answer in time");
        return 0;
}

/* A new link in a free slot on @dev: QP in INIT, every connection's buffers
 * registered on it. NULL on failure. */
static SmcrLink *add_link_new(SmcrLgr *lgr, RoceDev *dev, int gid_index, const uint8_t gid[16], const uint8_t mac[6]) {
        SmcrManager *sm = lgr->sm;
        SmcrLink *nl = NULL;
        SmcrConn *c;

        for (unsigned i = 0; i < SMCR_MAX_LINKS && !nl; i++)
                if (!lgr->links[i].rl)
                        nl = &lgr->links[i];
        if (!nl)
                return NULL;
        nl->dev = dev;
        nl->gid_index = gid_index;
        memcpy(nl->gid, gid, 16);
        memcpy(nl->mac, mac, 6);
        nl->mtu = roce_dev_mtu(dev);
        nl->last_rx_usec = now_usec(sm);
        (void) roce_dev_set_cq_poll(dev, sm->m->config.cq_poll == SMCD_CQ_POLL_THREAD, ROCE_CQ_SPIN_USEC);
        if (roce_link_new(dev, gid_index, inline_want(sm), &link_ops, nl, &nl->rl) < 0) {
                link_clear(nl);
                return NULL;
        }
        LIST_FOREACH(conns, c, lgr->conns)
                if (conn_reg(c, nl->idx) < 0) {
                        SmcrConn *k;

                        LIST_FOREACH(conns, k, lgr->conns)
                                conn_unreg(k, nl->idx);
                        link_clear(nl);
                        return NULL;
                }
        return nl;
}

/* our RMBs as rkey-exchange entries: rkey on @via, rkey and address on @nl */
static int add_fill_rk(SmcrLgr *lgr, SmcrLink *via, SmcrLink *nl) {
        SmcrConn *c;
        unsigned n = 0;

        lgr->add_rk = calloc(lgr->n_conns ? lgr->n_conns : 1, sizeof(*lgr->add_rk));
        if (!lgr->add_rk)
                return -ENOMEM;
        LIST_FOREACH(conns, c, lgr->conns) {
                if (!c->rmb_mr[via->idx] || !c->rmb_mr[nl->idx] || n >= lgr->n_conns ||
                    n >= SMC_LLC_MAX_ADD_LINK_RKEYS)
                        continue;
                lgr->add_rk[n].rkey_old = c->rmb_mr[via->idx]->rkey;
                lgr->add_rk[n].rkey_new = c->rmb_mr[nl->idx]->rkey;
                lgr->add_rk[n].addr_new = (uint64_t) (uintptr_t) ((uint8_t *) c->rmb->base + SMC_DMB_HDR_LEN);
                n++;
        }
        lgr->add_rk_n = n;
        lgr->add_rk_sent = 0;
        return 0;
}

/* v1: the next ADD LINK CONTINUATION (up to 2 entries, the count still to send) */
static void add_send_cont(SmcrLgr *lgr) {
        struct smc_llc_msg m;
        unsigned left = lgr->add_rk_n - lgr->add_rk_sent, n = left < 2 ? left : 2;

        llc_init(lgr, &m, SMC_LLC_ADD_LINK_CONT, lgr->server ? 0 : SMC_LLC_FLAG_RESP);
        m.add_link_cont.link_num = lgr->add_new->link_num;
        m.add_link_cont.num_rkeys = (uint8_t) (left > 255 ? 255 : left);
        for (unsigned i = 0; i < n; i++)
                m.add_link_cont.rt[i] = lgr->add_rk[lgr->add_rk_sent + i];
        lgr->add_rk_sent += n;
        llc_send(lgr->add_via, &m);
}

/* ADD LINK (request, or with @flags SMC_LLC_FLAG_RESP the response) about the link
 * being added, on the link the flow runs on; v2 with our rkeys on it (5.3) */
static void send_add_link(SmcrLgr *lgr, uint8_t flags) {
        SmcrLink *nl = lgr->add_new;
        struct smc_llc_msg m;

        llc_init(lgr, &m, SMC_LLC_ADD_LINK, flags);
        memcpy(m.add_link.mac, nl->mac, 6);
        memcpy(m.add_link.gid, nl->gid, 16);
        m.add_link.qpn = roce_link_qpn(nl->rl);
        m.add_link.link_num = nl->link_num;
        m.add_link.qp_mtu = nl->mtu;
        m.add_link.psn = roce_link_psn(nl->rl);
        if (m.v2) {
                memcpy(m.add_link.target_gid, nl->gid, 16);
                m.add_link.n_rkeys = (uint16_t) lgr->add_rk_n;
                m.add_link.n_rkeys_le = true; /* as x86 Linux reads it (smcr-wire.c) */
                m.add_link.rkeys = lgr->add_rk;
        }
        llc_send(lgr->add_via, &m);
}

static void add_send_confirm_link(SmcrLgr *lgr) {
        /* on the new link (5.3 step 5) */
        send_confirm_link(lgr->add_new, false, lgr->version >= 2 ? (uint8_t) lgr->max_conns : 0);
        lgr->add_state = ADD_SRV_WAIT_CONFIRM;
        add_arm(lgr);
}

/* Server: try to add a link on another local device (no asymmetric links of ours). */
static void add_start(SmcrLgr *lgr) {
        SmcrManager *sm = lgr->sm;
        SmcrLink *via = lgr_llc_link(lgr), *nl;
        RoceDev *not[SMCR_MAX_LINKS];
        unsigned n_not = 0;
        uint8_t gid[16], mac[6];
        RoceDev *d;
        int gi;

        lgr->add_wanted = false;
        if (!lgr->server || lgr->failed || !via || lgr->add_state != ADD_NONE || lgr->max_links < 2 ||
            lgr_links_used(lgr) >= lgr->max_links || lgr_links_used(lgr) >= SMCR_MAX_LINKS)
                return;
        for (unsigned i = 0; i < SMCR_MAX_LINKS; i++)
                if (lgr->links[i].rl)
                        not[n_not++] = lgr->links[i].dev;
        d = alt_dev(sm, not, n_not, NULL, gid, &gi, mac);
        if (!d)
                return; /* no alternate device (now): one link */
        nl = add_link_new(lgr, d, gi, gid, mac);
        if (!nl) {
                log_warning("SMC-R link group %08x: cannot make a link on %s.", lgr->id, roce_dev_name(d));
                return;
        }
        do
                lgr->next_link_num = lgr->next_link_num == 255 ? 1 : lgr->next_link_num + 1;
        while (lgr_link_by_num(lgr, lgr->next_link_num));
        nl->link_num = lgr->next_link_num;
        lgr->add_new = nl;
        lgr->add_via = via;
        if (add_fill_rk(lgr, via, nl) < 0) {
                add_end(lgr, false, "out of memory");
                return;
        }
        lgr->add_state = ADD_SRV_WAIT_RESP;
        log_debug("SMC-R link group %08x: ADD LINK %u on %s (%u rkeys).", lgr->id, nl->link_num, roce_dev_name(d),
                  lgr->add_rk_n);
        send_add_link(lgr, 0);
        add_arm(lgr);
}

/* Server: the client's ADD LINK response. */
static void add_srv_on_resp(SmcrLgr *lgr, const struct smc_llc_msg *msg) {
        SmcrLink *nl = lgr->add_new;

        if (msg->flags & SMC_LLC_FLAG_ADD_LNK_REJ) {
                add_end(lgr, false, "the peer rejected it");
                return;
        }
        if (msg->add_link.link_num != nl->link_num || msg->add_link.qp_mtu == 0) {
                add_end(lgr, false, "bad ADD LINK response");
                return;
        }
        nl->peer_qpn = msg->add_link.qpn;
        memcpy(nl->peer_gid, msg->add_link.gid, 16);
        memcpy(nl->peer_mac, msg->add_link.mac, 6);
        if (msg->add_link.qp_mtu < nl->mtu)
                nl->mtu = msg->add_link.qp_mtu;
        if (roce_link_rtr(nl->rl, nl->peer_qpn, msg->add_link.psn, nl->peer_gid, nl->mtu) < 0 ||
            roce_link_rts(nl->rl) < 0) {
                add_end(lgr, false, "cannot ready the QP");
                return;
        }
        if (msg->v2) {
                for (unsigned i = 0; i < msg->add_link.n_rkeys && msg->add_link.rkeys; i++)
                        rtok_set_new(lgr, lgr->add_via->idx, nl->idx, &msg->add_link.rkeys[i]);
                add_send_confirm_link(lgr);
                return;
        }
        add_send_cont(lgr);
        lgr->add_state = ADD_SRV_WAIT_CONT;
        add_arm(lgr);
}

/* v1: an ADD LINK CONTINUATION of the peer (either role). */
static void add_on_cont(SmcrLgr *lgr, const struct smc_llc_msg *msg) {
        unsigned n = msg->add_link_cont.num_rkeys < 2 ? msg->add_link_cont.num_rkeys : 2;

        if (!lgr->add_new || msg->add_link_cont.link_num != lgr->add_new->link_num)
                return;
        for (unsigned i = 0; i < n; i++)
                rtok_set_new(lgr, lgr->add_via->idx, lgr->add_new->idx, &msg->add_link_cont.rt[i]);
        lgr->add_recv_left = msg->add_link_cont.num_rkeys - n;
        if (lgr->server) {
                if (lgr->add_rk_sent < lgr->add_rk_n || lgr->add_recv_left > 0) {
                        add_send_cont(lgr);
                        add_arm(lgr);
                } else
                        add_send_confirm_link(lgr);
                return;
        }
        add_send_cont(lgr);
        if (lgr->add_rk_sent >= lgr->add_rk_n && lgr->add_recv_left == 0)
                lgr->add_state = ADD_CLI_WAIT_CONFIRM;
        add_arm(lgr);
}

static void add_cli_reject(SmcrLgr *lgr, SmcrLink *via, const char *why) {
        struct smc_llc_msg m;

        log_debug("SMC-R link group %08x: ADD LINK rejected: %s.", lgr->id, why);
        llc_init(lgr, &m, SMC_LLC_ADD_LINK, SMC_LLC_FLAG_RESP | SMC_LLC_FLAG_ADD_LNK_REJ);
        m.add_link_reject_reason = 1; /* no alternate path */
        if (m.v2)
                m.length = SMC_LLC_LEN;
        llc_send(via, &m);
}

/* Client: the server's ADD LINK request, received on @via. */
static void add_cli_on_req(SmcrLgr *lgr, SmcrLink *via, const struct smc_llc_msg *msg) {
        SmcrManager *sm = lgr->sm;
        RoceDev *not[SMCR_MAX_LINKS], *d;
        unsigned n_not = 0;
        uint8_t gid[16], mac[6], ip[4];
        static const uint8_t v4mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
        SmcrLink *nl;
        int gi;

        if (lgr->add_state != ADD_NONE || lgr_links_used(lgr) >= SMCR_MAX_LINKS || lgr->max_links < 2) {
                add_cli_reject(lgr, via, "no free link slot");
                return;
        }
        if (msg->add_link.qp_mtu == 0 || msg->add_link.link_num == 0 || lgr_link_by_num(lgr, msg->add_link.link_num)) {
                add_cli_reject(lgr, via, "bad request");
                return;
        }
        for (unsigned i = 0; i < SMCR_MAX_LINKS; i++)
                if (lgr->links[i].rl)
                        not[n_not++] = lgr->links[i].dev;
        memcpy(ip, msg->add_link.gid + 12, 4);
        d = alt_dev(sm, not, n_not, memcmp(msg->add_link.gid, v4mapped, 12) ? NULL : ip, gid, &gi, mac);
        if (!d) {
                /* asymmetric: our device of the first link, to a new device of theirs */
                bool theirs_new = true;

                for (unsigned i = 0; i < SMCR_MAX_LINKS; i++)
                        if (lgr->links[i].rl && !memcmp(lgr->links[i].peer_gid, msg->add_link.gid, 16))
                                theirs_new = false;
                if (!theirs_new) {
                        add_cli_reject(lgr, via, "no alternate path");
                        return;
                }
                d = via->dev;
                gi = via->gid_index;
                memcpy(gid, via->gid, 16);
                memcpy(mac, via->mac, 6);
        }
        nl = add_link_new(lgr, d, gi, gid, mac);
        if (!nl) {
                add_cli_reject(lgr, via, "cannot make a link");
                return;
        }
        nl->link_num = msg->add_link.link_num;
        nl->peer_qpn = msg->add_link.qpn;
        memcpy(nl->peer_gid, msg->add_link.gid, 16);
        memcpy(nl->peer_mac, msg->add_link.mac, 6);
        if (msg->add_link.qp_mtu < nl->mtu)
                nl->mtu = msg->add_link.qp_mtu;
        lgr->add_new = nl;
        lgr->add_via = via;
        if (roce_link_rtr(nl->rl, nl->peer_qpn, msg->add_link.psn, nl->peer_gid, nl->mtu) < 0 ||
            roce_link_rts(nl->rl) < 0 || add_fill_rk(lgr, via, nl) < 0) {
                SmcrConn *c;

                LIST_FOREACH(conns, c, lgr->conns)
                        conn_unreg(c, nl->idx);
                link_clear(nl);
                lgr->add_new = lgr->add_via = NULL;
                free(lgr->add_rk);
                lgr->add_rk = NULL;
                add_cli_reject(lgr, via, "cannot ready the QP");
                return;
        }
        if (msg->v2)
                for (unsigned i = 0; i < msg->add_link.n_rkeys && msg->add_link.rkeys; i++)
                        rtok_set_new(lgr, via->idx, nl->idx, &msg->add_link.rkeys[i]);
        send_add_link(lgr, SMC_LLC_FLAG_RESP);
        lgr->add_state = lgr->version >= 2 ? ADD_CLI_WAIT_CONFIRM : ADD_CLI_WAIT_CONT;
        add_arm(lgr);
}

/* ---- receiving on a link ---- */

static void lgr_on_llc(SmcrLgr *lgr, SmcrLink *l, const struct smc_llc_msg *msg) {
        struct smc_llc_msg m;
        bool resp = msg->flags & SMC_LLC_FLAG_RESP;

        switch (msg->type) {
        case SMC_LLC_CONFIRM_LINK:
                if (!resp && !lgr->server && lgr->confirm_link_wait && l == &lgr->links[0]) {
                        SmcrHs *hs = lgr->confirm_link_wait;

                        if (!(msg->flags & SMC_LLC_FLAG_NO_RMBE_EYEC)) {
                                hs_fail(hs, 0, SMC_CLC_DECL_RMBE_EC, true);
                                return;
                        }
                        l->link_num = msg->confirm_link.link_num;
                        if (msg->confirm_link.max_links >= 1 && msg->confirm_link.max_links < lgr->max_links)
                                lgr->max_links = msg->confirm_link.max_links;
                        if (roce_link_rts(l->rl) < 0) {
                                hs_fail(hs, 0, SMC_CLC_DECL_ERR_RDYLNK, true);
                                return;
                        }
                        send_confirm_link(l, true, (uint8_t) lgr->max_conns);
                        l->active = true;
                        lgr->first_link_up = true;
                        lgr->confirm_link_wait = NULL;
                        hs_conn_ready(hs);
                } else if (resp && lgr->server && lgr->confirm_link_wait && l == &lgr->links[0]) {
                        SmcrHs *hs = lgr->confirm_link_wait;

                        if (!(msg->flags & SMC_LLC_FLAG_NO_RMBE_EYEC)) {
                                hs_fail(hs, 0, SMC_CLC_DECL_RMBE_EC, true);
                                return;
                        }
                        l->active = true;
                        lgr->first_link_up = true;
                        lgr->confirm_link_wait = NULL;
                        hs_conn_ready(hs);
                        lgr_release_waiters(lgr);
                        /* a second link when we have another device (5.3 triggers) */
                        if (!lgr->failed && lgr->max_links > 1) {
                                lgr->add_wanted = true;
                                lgr_flow_next(lgr);
                        }
                } else if (!resp && !lgr->server && lgr->add_state == ADD_CLI_WAIT_CONFIRM && l == lgr->add_new) {
                        if (!(msg->flags & SMC_LLC_FLAG_NO_RMBE_EYEC)) {
                                add_end(lgr, false, "CONFIRM LINK without the RMBE flag");
                                return;
                        }
                        send_confirm_link(l, true, lgr->version >= 2 ? (uint8_t) lgr->max_conns : 0);
                        l->active = true;
                        l->last_rx_usec = now_usec(lgr->sm);
                        add_end(lgr, true, NULL);
                } else if (resp && lgr->server && lgr->add_state == ADD_SRV_WAIT_CONFIRM && l == lgr->add_new) {
                        l->active = true;
                        add_end(lgr, true, NULL);
                }
                return;
        case SMC_LLC_CONFIRM_RKEY:
                if (resp) {
                        SmcrHs *hs = lgr->rkey_active;

                        if (!hs)
                                return; /* matches no flow: dropped (5.10) */
                        lgr->rkey_active = NULL;
                        flow_disarm(lgr);
                        if (msg->flags & SMC_LLC_FLAG_RKEY_NEG)
                                hs_fail(hs, 0, SMC_CLC_DECL_ERR_REGBUF, true);
                        else
                                hs_conn_ready(hs);
                        lgr_flow_next(lgr);
                        return;
                }
                /* the peer announces an RMB: its rkey and address on this link and on
                 * the links it lists; we echo the message as the response (5.6) */
                m = *msg;
                m.flags |= SMC_LLC_FLAG_RESP;
                {
                        int t = rtok_add(lgr, l->idx, msg->confirm_rkey.rkey, msg->confirm_rkey.addr);

                        if (t < 0)
                                m.flags |= SMC_LLC_FLAG_RKEY_NEG;
                        for (unsigned i = 0; t >= 0 && i < msg->confirm_rkey.num_rkeys && i < 2; i++) {
                                SmcrLink *o = lgr_link_by_num(lgr, msg->confirm_rkey.rt[i].link_num);

                                if (!o)
                                        continue;
                                lgr->rtok[t].valid |= 1u << o->idx;
                                lgr->rtok[t].rkey[o->idx] = msg->confirm_rkey.rt[i].rkey;
                                lgr->rtok[t].addr[o->idx] = msg->confirm_rkey.rt[i].addr;
                        }
                }
                llc_send(l, &m);
                return;
        case SMC_LLC_DELETE_RKEY:
                if (resp) {
                        if (lgr->del_active) {
                                lgr->del_active = false;
                                flow_disarm(lgr);
                                lgr_flow_next(lgr);
                        }
                        return;
                }
                m = *msg;
                m.flags |= SMC_LLC_FLAG_RESP;
                m.delete_rkey.err_mask = 0;
                for (unsigned i = 0; i < msg->delete_rkey.num_rkeys && i < SMC_LLC_MAX_DELETE_RKEYS_V1; i++) {
                        int t = rtok_find(lgr, l->idx, msg->delete_rkey.rkeys[i]);

                        if (t >= 0)
                                rtok_del(lgr, t);
                        else
                                m.delete_rkey.err_mask |= (uint8_t) (0x80u >> i);
                }
                if (m.delete_rkey.err_mask)
                        m.flags |= SMC_LLC_FLAG_RKEY_NEG;
                llc_send(l, &m);
                return;
        case SMC_LLC_TEST_LINK:
                if (resp) {
                        l->test_pending = false;
                        return;
                }
                m = *msg;
                m.flags |= SMC_LLC_FLAG_RESP;
                llc_send(l, &m);
                return;
        case SMC_LLC_ADD_LINK:
                if (resp) {
                        if (lgr->server && lgr->add_state == ADD_SRV_WAIT_RESP)
                                add_srv_on_resp(lgr, msg);
                        return;
                }
                if (lgr->server) {
                        /* a v1 client's hint: our own flow, if we can (5.3) */
                        lgr->add_wanted = true;
                        lgr_flow_next(lgr);
                        return;
                }
                add_cli_on_req(lgr, l, msg);
                return;
        case SMC_LLC_REQ_ADD_LINK:
                if (resp)
                        return;
                llc_init(lgr, &m, SMC_LLC_REQ_ADD_LINK, SMC_LLC_FLAG_RESP);
                llc_send(l, &m);
                if (lgr->server) {
                        lgr->add_wanted = true;
                        lgr_flow_next(lgr);
                }
                return;
        case SMC_LLC_ADD_LINK_CONT:
                if ((lgr->server && lgr->add_state == ADD_SRV_WAIT_CONT) ||
                    (!lgr->server && lgr->add_state == ADD_CLI_WAIT_CONT))
                        add_on_cont(lgr, msg);
                return;
        case SMC_LLC_DELETE_LINK:
                if (msg->flags & SMC_LLC_FLAG_DEL_LINK_ALL) {
                        if (!resp) {
                                llc_init(lgr, &m, SMC_LLC_DELETE_LINK, SMC_LLC_FLAG_RESP | SMC_LLC_FLAG_DEL_LINK_ALL);
                                llc_send(l, &m);
                        }
                        lgr_fail(lgr, "the peer ended the link group");
                        return;
                }
                if (resp)
                        return; /* our request was done */
                {
                        SmcrLink *del = lgr_link_by_num(lgr, msg->delete_link.link_num);

                        if (lgr->server) {
                                /* the client lost the link: echo the request (Linux's
                                 * server does), the client answers it */
                                if (del) {
                                        link_remove(del, "the peer deleted it", false);
                                        if (!lgr->failed)
                                                llc_send(lgr_llc_link(lgr), msg);
                                }
                                return;
                        }
                        llc_init(lgr, &m, SMC_LLC_DELETE_LINK, SMC_LLC_FLAG_RESP);
                        m.delete_link.link_num = msg->delete_link.link_num;
                        m.delete_link.reason = del ? 0 : 0x00100000u; /* unknown link id */
                        if (del && del == lgr->add_new && lgr->add_state != ADD_NONE) {
                                add_end(lgr, false, "the peer deleted it");
                                llc_send(l, &m);
                                return;
                        }
                        if (del)
                                link_remove(del, "the peer deleted it", false);
                        if (!lgr->failed)
                                llc_send(lgr_llc_link(lgr), &m);
                }
                return;
        case SMC_LLC_CONFIRM_RKEY_CONT:
                return; /* ignored (5.1) */
        default:
                return;
        }
}

static void link_recv(void *userdata, const uint8_t *buf, uint32_t len) {
        SmcrLink *l = userdata;
        SmcrLgr *lgr = l->lgr;
        SmcrManager *sm = lgr->sm;

        /* a link on its way out (link_down) still delivers: its device acknowledged
         * what arrived, so the peer counts it as received (failover validation, 4.6) */
        if (lgr->failed)
                return;
        l->last_rx_usec = now_usec(sm);
        l->test_pending = false; /* anything received proves the link */
        if (smc_wr_is_cdc(buf, len)) {
                struct smc_cdc_msg cdc;
                SmcrConn *c;

                if (smc_cdc_decode(buf, len, &cdc) < 0)
                        return; /* Linux drops it (4.1) */
                c = conn_by_token(sm, cdc.token);
                if (!c || c->lgr != lgr)
                        return; /* unknown token: drop */
                conn_on_cdc(c, &cdc);
                return;
        }
        {
                struct smc_llc_rkey_entry rk[SMC_LLC_MAX_ADD_LINK_RKEYS];
                struct smc_llc_msg msg;
                int r;

                memset(&msg, 0, sizeof(msg));
                msg.add_link.rkeys = rk;
                r = smc_llc_decode(buf, len, &msg);
                if (r == -EPROTO) {
                        struct smc_llc_msg m;

                        /* unknown type: protocol violation, terminate the group (5.1) */
                        llc_init(lgr, &m, SMC_LLC_DELETE_LINK, SMC_LLC_FLAG_DEL_LINK_ALL);
                        m.delete_link.reason = SMC_LLC_DEL_PROT_VIOL;
                        llc_send(l, &m);
                        lgr_fail(lgr, "unknown LLC message type");
                        return;
                }
                if (r < 0)
                        return;
                if (msg.type != SMC_LLC_ADD_LINK)
                        msg.add_link.rkeys = NULL;
                lgr_on_llc(lgr, l, &msg);
        }
}

static void link_send_done(void *userdata, uint64_t wr_id, enum ibv_wc_status status) {
        SmcrLink *l = userdata;
        SmcrLgr *lgr = l->lgr;
        SmcrManager *sm = lgr->sm;
        SmcrConn *c, *cn;

        if (wr_id & WR_ID_CDC) {
                c = conn_by_token(sm, (uint32_t) (wr_id >> 16));
                if (c && c->lgr == lgr && c->link == l) {
                        conn_cdc_done(c, status);
                        conn_maybe_free(c);
                }
        }
        if (lgr->failed || l->failing || !l->rl)
                return;
        /* a slot is free: LLC first, then the connections waiting on this link */
        link_flush_llc(l);
        LIST_FOREACH_SAFE(tx_wait, c, cn, lgr->tx_wait) {
                if (roce_link_send_slots_free(l->rl) == 0 || l->llc_n > 0 || l->failing)
                        break;
                if (c->link != l)
                        continue;
                {
                        bool force = c->wait_force;

                        LIST_REMOVE(tx_wait, lgr->tx_wait, c);
                        c->in_tx_wait = false;
                        c->wait_force = false;
                        conn_tx(c, force);
                }
                if (c->in_tx_wait)
                        break;
                conn_maybe_free(c);
                cn = lgr->tx_wait; /* the list may have changed: from the start again */
        }
}

static void link_failed(void *userdata, enum ibv_wc_status status) {
        SmcrLink *l = userdata;
        char why[96];

        snprintf(why, sizeof(why), "link failed (%s)", ibv_wc_status_str(status));
        link_down(l, why);
}

static const struct roce_link_ops link_ops = {
        .recv = link_recv,
        .send_done = link_send_done,
        .failed = link_failed,
};

static int lgr_new(SmcrManager *sm, SmcrHs *hs, SmcrLgr **ret) {
        SmcrLgr *lgr = calloc(1, sizeof(*lgr));
        SmcrLink *l;
        int r;

        if (!lgr)
                return -ENOMEM;
        lgr->sm = sm;
        sm->next_lgr_id += 256; /* as Linux: ids step by 256, link numbers below */
        lgr->id = sm->next_lgr_id;
        lgr->server = hs->server;
        lgr->version = hs->version;
        memcpy(lgr->peer_id, hs->peer_id, 8);
        memcpy(lgr->peer_gid, hs->peer_gid, 16);
        lgr->dev = hs->dev;
        lgr->max_conns = hs->max_conns ? hs->max_conns : 255;
        lgr->max_links = hs->max_links ? hs->max_links : 1;
        lgr->next_link_num = 1;
        for (unsigned i = 0; i < SMCR_MAX_LINKS; i++) {
                lgr->links[i].lgr = lgr;
                lgr->links[i].idx = i;
        }
        l = &lgr->links[0];
        l->dev = hs->dev;
        l->gid_index = hs->gid_index;
        memcpy(l->gid, hs->gid, 16);
        memcpy(l->mac, hs->mac, 6);
        memcpy(l->peer_gid, hs->peer_gid, 16);
        (void) roce_dev_set_cq_poll(hs->dev, sm->m->config.cq_poll == SMCD_CQ_POLL_THREAD, ROCE_CQ_SPIN_USEC);
        r = roce_link_new(hs->dev, hs->gid_index, inline_want(sm), &link_ops, l, &l->rl);
        if (r < 0) {
                free(lgr);
                return r;
        }
        l->mtu = roce_dev_mtu(hs->dev);
        l->last_rx_usec = now_usec(sm);
        if (sd_event_add_time(sm->m->event, &lgr->idle_timer, CLOCK_MONOTONIC, UINT64_MAX, 0, on_idle_timer, lgr) < 0 ||
            sd_event_add_time(sm->m->event, &lgr->test_timer, CLOCK_MONOTONIC, now_usec(sm) + 1000000ULL, 0,
                              on_test_timer, lgr) < 0) {
                lgr->idle_timer = sd_event_source_disable_unref(lgr->idle_timer);
                l->rl = roce_link_free(l->rl);
                free(lgr);
                return -ENOMEM;
        }
        (void) sd_event_source_set_enabled(lgr->idle_timer, SD_EVENT_OFF);
        LIST_PREPEND(lgrs, sm->lgrs, lgr);
        sm->m->stats.smcr.lgrs++;
        sm->m->stats.smcr.lgrs_total++;
        *ret = lgr;
        return 0;
}

/* A link group to reuse for @hs (3.3), or NULL; *link: the link (server: one to the
 * peer GID of @hs; client: the one the Accept names, which the server may have put on
 * any of its links). As Linux's smcr_lgr_match, any active link of the group may
 * match, whatever its local device. */
static SmcrLgr *lgr_find(SmcrManager *sm, SmcrHs *hs, SmcrLink **link) {
        SmcrLgr *lgr;

        LIST_FOREACH(lgrs, lgr, sm->lgrs) {
                if (lgr->failed || lgr->server != hs->server || memcmp(lgr->peer_id, hs->peer_id, 8) != 0)
                        continue;
                if (hs->server && (lgr->n_conns >= lgr->max_conns || lgr->version != hs->version))
                        continue;
                for (unsigned i = 0; i < SMCR_MAX_LINKS; i++) {
                        SmcrLink *l = &lgr->links[i];

                        if (!l->rl || !l->active)
                                continue;
                        if (hs->server ? memcmp(l->peer_gid, hs->peer_gid, 16) != 0
                                       : l->peer_qpn != hs->accept.qpn || memcmp(l->peer_gid, hs->accept.gid, 16) != 0)
                                continue;
                        if (link)
                                *link = l;
                        return lgr;
                }
        }
        return NULL;
}

/* ------------------------------------------------------------------------- */
/* handshakes */

static void hs_free(SmcrHs *hs) {
        SmcrManager *sm = hs->sm;

        LIST_REMOVE(hss, sm->hss, hs);
        if (hs->lgr && hs->lgr->rkey_active == hs) {
                hs->lgr->rkey_active = NULL;
                flow_disarm(hs->lgr);
        }
        if (hs->lgr && hs->state == HS_WAIT_RKEY) {
                SmcrHs *i;
                LIST_FOREACH(rkey_wait, i, hs->lgr->rkey_wait)
                        if (i == hs) {
                                LIST_REMOVE(rkey_wait, hs->lgr->rkey_wait, hs);
                                break;
                        }
        }
        if (hs->lgr && hs->lgr->confirm_link_wait == hs)
                hs->lgr->confirm_link_wait = NULL;
        if (hs->fc_wait_lgr) {
                LIST_REMOVE(fc_wait, hs->fc_wait_lgr->fc_wait, hs);
                hs->fc_wait_lgr = NULL;
        }
        hs->io = sd_event_source_disable_unref(hs->io);
        hs->timer = sd_event_source_disable_unref(hs->timer);
        if (hs->fd >= 0)
                close(hs->fd);
        free(hs);
}

static int hs_send(SmcrHs *hs, const uint8_t *buf, size_t len) {
        ssize_t n = send(hs->fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);

        if (n < 0)
                return -errno;
        return (size_t) n == len ? 0 : -EIO;
}

static void hs_send_decline(SmcrHs *hs, uint32_t reason) {
        SmcrManager *sm = hs->sm;
        struct smc_clc_decline d = {
                .version = hs->version ? hs->version : 2,
                .out_of_sync = reason == SMC_CLC_DECL_SYNCERR,
                .diag = reason,
                .os_type = SMCR_OS_LINUX,
        };
        uint8_t buf[64];
        ssize_t n;

        memcpy(d.peer_id, sm->peer_id, 8);
        n = smc_clc_decline_encode(&d, buf, sizeof(buf));
        if (n > 0 && hs_send(hs, buf, (size_t) n) == 0)
                sm->m->stats.smcr.decline_sent++;
}

static void hs_reply_tcp(SmcrHs *hs, uint32_t reason) {
        union smc_ctl_msg msg;

        smc_ctl_init(&msg, SMC_CTL_CONNECT_REPLY, hs->seq);
        (void) smc_ctl_set_version(&msg, hs->client->version);
        msg.conn.mode = SMC_CTL_MODE_TCP;
        msg.conn.fallback_reason = reason;
        (void) client_send(hs->client, &msg, NULL, 0);
}

/* What the handshake makes, for the logs: SMC-R, or SMC-D between two network
 * namespaces of this host (--cross-netns) once the proposal or accept said so. */
static const char *hs_kind(const SmcrHs *hs) {
        return hs->ism ? "SMC-D (between namespaces)" : "SMC-R";
}

/* Role server: the listener whose accept channel gets the result: the one the
 * connection was accepted from, or if it went meanwhile (closed: UNLISTEN, or its last
 * holder exited) another of its SO_REUSEPORT group of ctl version >= @min_version, as
 * the kernel moves a closed member's queued connections (listener_group_pick()): a
 * hand-over (*@ret_handover), which its backlog does not limit; NULL if none. */
static Listener *hs_listener(SmcrHs *hs, uint16_t min_version, bool *ret_handover) {
        Listener *l = manager_get_listener(hs->sm->m, hs->listener_id);

        *ret_handover = false;
        if (l && l->channel >= 0 && !l->unlistened)
                return l;
        l = listener_group_pick(hs->sm->m, &hs->group, min_version);
        *ret_handover = l != NULL;
        if (l)
                log_debug("Listener %" PRIu64 " went during a handshake: its connection goes to listener %" PRIu64
                          " of its group.",
                          hs->listener_id, l->id);
        return l;
}

/* Role server, fallback: hand the TCP connection to the listener's accept channel. */
static void hs_newconn_tcp(SmcrHs *hs, uint32_t reason) {
        Manager *m = hs->sm->m;
        bool handover;
        Listener *l = hs_listener(hs, 3, &handover);
        union smc_ctl_msg msg;
        int r;

        if (!l || l->channel < 0 || l->version < 3)
                return; /* gone: the connection is closed with our descriptor */
        smc_ctl_init(&msg, SMC_CTL_NEW_CONN, m->instance); /* (v6) seq: our instance */
        msg.conn.mode = SMC_CTL_MODE_TCP;
        msg.conn.fallback_reason = reason;
        msg.conn.local = hs->local;
        msg.conn.peer = hs->peer;
        if (handover)
                r = listener_send(l, &msg, &hs->fd, 1); /* (counts it) */
        else {
                (void) smc_ctl_set_version(&msg, l->version);
                r = smc_ctl_send(l->channel, &msg, &hs->fd, 1, MSG_DONTWAIT);
                if (r >= 0)
                        l->n_sent++;
        }
        if (r < 0)
                log_debug_errno(r, "NEW_CONN (TCP) to listener %" PRIu64 " failed: %m", l->id);
}

/* The handshake failed: DECLINE (if @send_decline and the TCP connection is fine),
 * free what was built, answer the client: TCP fallback with @reason when @error is
 * 0, else ERROR @error. */
static void hs_fail(SmcrHs *hs, int error, uint32_t reason, bool send_decline) {
        SmcrManager *sm = hs->sm;
        Manager *m = sm->m;
        SmcrLgr *lgr = hs->lgr;

        if (hs->server && hs->ism_ep) {
                /* the connection exists (the listener has it): it goes on; only the
                 * handshake's end is lost */
                log_debug("SMC-D between namespaces: server handshake ended (%s) after the connection was made.",
                          error ? strerror(-error) : smc_clc_decl_name(reason));
                conn_keep_tcp(m, hs->ism_ep, hs->fd);
                hs->fd = -1;
                hs_free(hs);
                return;
        }
        if (send_decline && error == 0)
                hs_send_decline(hs, reason);
        if (hs->conn) {
                SmcrConn *c = hs->conn;
                hs->conn = NULL;
                /* a reused group: the peer may know our RMB from CONFIRM RKEY */
                if (!hs->first_contact && (hs->state == HS_WAIT_RKEY || hs->state == HS_WAIT_CONFIRM ||
                                           hs->state == HS_WAIT_ACCEPT))
                        conn_queue_delete_rkey(c);
                conn_free(c);
        }
        hs->lgr = NULL;
        if (lgr && hs->first_contact && lgr->n_conns == 0 && !lgr->failed)
                lgr_fail(lgr, "first contact failed");
        if (hs->server) {
                /* the client was answered PENDING: a fallback goes to the listener as
                 * a TCP connection (NEW_CONN mode TCP with the socket); a broken
                 * connection goes nowhere */
                if (error == 0) {
                        sm->m->stats.smcr.handshakes_declined++;
                        hs_newconn_tcp(hs, reason);
                } else
                        sm->m->stats.smcr.handshakes_failed++;
        } else if (hs->client) {
                if (error == 0) {
                        smcd_stats_count_fallback(&m->stats, reason);
                        hs_reply_tcp(hs, reason);
                        sm->m->stats.smcr.handshakes_declined++;
                } else {
                        (void) client_send_error(hs->client, hs->seq, -error, reason, "%s handshake failed: %s",
                                                 hs_kind(hs), strerror(-error));
                        sm->m->stats.smcr.handshakes_failed++;
                }
        }
        log_debug("%s %s handshake: %s %s (0x%08x).", hs_kind(hs), hs->server ? "server" : "client",
                  error ? "failed:" : "fallback:", error ? strerror(-error) : smc_clc_decl_name(reason), reason);
        hs_free(hs);
}

static int on_hs_timeout(sd_event_source *s, uint64_t usec, void *userdata) {
        SmcrHs *hs = userdata;

        (void) s;
        (void) usec;
        switch (hs->state) {
        case HS_WAIT_OPTION: {
                /* an accept() can dequeue the child before the kernel ran the
                 * PASSIVE_ESTABLISHED callback on it: look again shortly */
                int r = -EAGAIN;
#if SMCD_HAVE_TCPOPT
                r = tcpopt_peer_has(hs->sm->tcpopt, hs->fd);
#endif
                if (r == -EAGAIN && now_usec(hs->sm) < hs->option_deadline) {
                        hs_arm(hs, HS_WAIT_OPTION, 2000);
                        break;
                }
                if (r == 1) {
                        hs_arm(hs, HS_WAIT_PROPOSAL, SMCR_CLC_TIMEOUT_USEC);
                        break;
                }
                /* no option (or never settled): the application gets it as TCP */
                hs_fail(hs, 0, SMC_CLC_DECL_PEERNOSMC, false);
                break;
        }
        case HS_WAIT_CONFIRM_LINK:
        case HS_WAIT_CONFIRM_LINK_RESP:
                hs_fail(hs, 0, SMC_CLC_DECL_TIMEOUT_CL, true);
                break;
        case HS_WAIT_LGR:
                /* that first contact takes too long: decline (the peer falls back) */
                hs_fail(hs, 0, SMC_CLC_DECL_TIMEOUT_CL, true);
                break;
        default:
                /* no CLC message in time: the TCP connection is not usable for SMC */
                hs_fail(hs, -ETIMEDOUT, SMC_CLC_DECL_TIMEOUT_CL, false);
        }
        return 0;
}

static void hs_arm(SmcrHs *hs, enum hs_state st, uint64_t usec) {
        hs->state = st;
        /* while the kernel has not settled whether we echoed the SMC option, CLC
         * bytes stay in the socket (read once the answer is yes) */
        if (hs->io)
                (void) sd_event_source_set_enabled(hs->io, st == HS_WAIT_OPTION ? SD_EVENT_OFF : SD_EVENT_ON);
        (void) sd_event_source_set_time(hs->timer, now_usec(hs->sm) + usec);
        (void) sd_event_source_set_enabled(hs->timer, SD_EVENT_ONESHOT);
}

static uint32_t new_token(SmcrManager *sm) {
        for (;;) {
                uint32_t t;
                if (getrandom(&t, sizeof(t), 0) != sizeof(t))
                        t = (uint32_t) random();
                if (t && !u64map_get(sm->tokens, t))
                        return t;
        }
}

/* The connection's buffers, MRs and token (not yet active). Returns 0 or the
 * decline reason. */
static uint32_t conn_new(SmcrHs *hs, SmcrLgr *lgr, SmcrLink *link) {
        SmcrManager *sm = hs->sm;
        Manager *m = sm->m;
        uid_t uid = hs->uid;
        unsigned rclass = smc_dmb_class(hs->rcvbuf ? hs->rcvbuf : m->config.rmem ? m->config.rmem : SMC_DMB_DEFAULT_SIZE);
        /* the send buffer: what the application asked for (SO_SNDBUF), else the larger
         * of the sndbuf and rmem tunables. (In SMC-D the writer writes straight into
         * the peer's RMB, which the sndbuf tunable only enlarges; here it is a real
         * buffer of its own, and 16 KiB would cut a stream into 16 KiB CDC round
         * trips: measured 1 MB/s vs 3.4-4.8 with 256 KiB in the TCG VM.) */
        uint32_t swant = hs->sndbuf ? hs->sndbuf : m->config.sndbuf > m->config.rmem ? m->config.sndbuf : m->config.rmem;
        unsigned sclass = smc_dmb_class(swant ? swant : SMC_DMB_DEFAULT_SIZE);
        uint32_t reason;
        SmcrConn *c;
        int r;

        reason = uid_check(m, uid, 1, smc_dmb_class_size(rclass));
        if (reason)
                return reason;
        c = calloc(1, sizeof(*c));
        if (!c)
                return SMC_CLC_DECL_MEM;
        c->sm = sm;
        c->xs = c->ya = c->tcp = -1;
        c->rtok = -1;
        r = smc_pool_acquire_fit(m->pool, uid, uid, rclass, rclass, &c->rmb);
        if (r >= 0)
                r = smc_pool_acquire_fit(m->pool, uid, uid, sclass, sclass, &c->sndbuf);
        if (r < 0) {
                conn_free(c);
                return SMC_CLC_DECL_MEM;
        }
        rmb_hdr(c)->type = SMC_DMB_EYECATCHER;
        snd_hdr(c)->type = SMC_DMB_EYECATCHER;
        /* smcd watches no hang-up of Y_a (xs tells it of the client's close): the
         * library may shut X both ways (EPOLLHUP, dmb.h) */
        rmb_hdr(c)->features = snd_hdr(c)->features = SMC_DMB_FEAT_X_HUP;
        /* registered on every link of the group (also one being added) */
        c->lgr = lgr;
        for (unsigned i = 0; i < SMCR_MAX_LINKS; i++)
                if (lgr->links[i].rl && !lgr->links[i].failing && conn_reg(c, i) < 0) {
                        c->lgr = NULL;
                        conn_free(c);
                        return SMC_CLC_DECL_ERR_REGBUF;
                }
        c->lgr = NULL;
        c->token = new_token(sm);
        if (u64map_put(sm->tokens, c->token, c) < 0) {
                c->token = 0;
                conn_free(c);
                return SMC_CLC_DECL_MEM;
        }
        c->uid = uid;
        c->accounted = true;
        uid_account(m, uid, 1, c->rmb->size);
        c->lgr = lgr;
        c->link = link;
        link->n_conns++;
        LIST_PREPEND(conns, lgr->conns, c);
        lgr->n_conns++;
        (void) sd_event_source_set_enabled(lgr->idle_timer, SD_EVENT_OFF);
        hs->conn = c;
        return 0;
}

/* The peer's side of @c from its CLC Accept / Confirm: the RMB is the one it announced
 * by CONFIRM RKEY (with its rkeys on the other links) or, first contact, a new one.
 * Returns 0 or a decline reason. */
static uint32_t conn_set_peer(SmcrConn *c, const struct smc_clc_accept_r *a) {
        c->peer_token = a->rmbe_alert_token;
        c->peer_rmb_size = (uint32_t) smc_size_uncompress(a->rmbe_size);
        c->rtok = rtok_add(c->lgr, c->link->idx, a->rkey, a->rmb_addr);
        return c->rtok < 0 ? SMC_CLC_DECL_ERR_RTOK : 0;
}

static void fill_accept(SmcrHs *hs, struct smc_clc_accept_r *a, uint8_t type) {
        SmcrManager *sm = hs->sm;
        SmcrLgr *lgr = hs->lgr;
        SmcrConn *c = hs->conn;
        SmcrLink *l = c->link;

        memset(a, 0, sizeof(*a));
        a->type = type;
        a->version = hs->version;
        a->first_contact = hs->first_contact;
        memcpy(a->peer_id, sm->peer_id, 8);
        memcpy(a->gid, l->gid, 16);
        memcpy(a->mac, l->mac, 6);
        a->qpn = roce_link_qpn(l->rl);
        a->rkey = c->rmb_mr[l->idx]->rkey;
        a->rmbe_idx = 1;
        a->rmbe_alert_token = c->token;
        a->rmbe_size = smc_size_compress(c->rmb->size, 15);
        a->qp_mtu = l->mtu;
        a->rmb_addr = (uint64_t) (uintptr_t) ((uint8_t *) c->rmb->base + SMC_DMB_HDR_LEN);
        a->psn = roce_link_psn(l->rl);
        if (hs->version >= 2) {
                memcpy(a->eid, hs->eid, SMC_EID_LEN);
                if (hs->first_contact) {
                        a->fce.v2_direct = true;
                        a->fce.os_type = SMCR_OS_LINUX;
                        a->fce.release = hs->release;
                        memcpy(a->fce.hostname, sm->hostname, SMC_HOSTNAME_LEN);
                        a->fce.max_conns = hs->release >= 1 ? (uint8_t) lgr->max_conns : 0;
                        a->fce.max_links = hs->release >= 1 ? lgr->max_links : 0;
                        if (type == SMC_CLC_CONFIRM) {
                                a->n_gids = 1;
                                memcpy(a->gids[0], l->gid, 16);
                        }
                }
        }
}

static int hs_send_accept(SmcrHs *hs, uint8_t type) {
        struct smc_clc_accept_r a;
        uint8_t buf[SMC_CLC_MAX_LEN];
        ssize_t n;

        fill_accept(hs, &a, type);
        n = smc_clc_accept_r_encode(&a, buf, sizeof(buf));
        if (n < 0)
                return (int) n;
        return hs_send(hs, buf, (size_t) n);
}

/* Success: the client's fds, the Endpoint, CONNECT_REPLY mode SMCR. */
static void hs_done(SmcrHs *hs) {
        SmcrManager *sm = hs->sm;
        Manager *m = sm->m;
        SmcrConn *c = hs->conn;
        bool handover = false;
        Listener *l = hs->server ? hs_listener(hs, 3, &handover) : NULL;
        Client *cl = hs->server ? (l ? l->owner : NULL) : hs->client;
        int a[2] = { -1, -1 }, s[2] = { -1, -1 }, one = 1, fds[SMC_CTL_MAX_FDS], r;
        union smc_ctl_msg msg;
        size_t nfds = 0;
        bool hs_server_was;

        if (!cl || (hs->server && (l->channel < 0 || (!handover && listener_queue_full(l))))) {
                /* nobody to hand it to (the listener went away or its queue is full):
                 * as a TCP connection reset before accept() */
                hs->client = NULL;
                hs_fail(hs, -ECONNABORTED, SMC_CLC_DECL_PEERDECL, false);
                return;
        }

        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, a) < 0 ||
            socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, s) < 0) {
                if (a[0] >= 0)
                        close(a[0]), close(a[1]);
                hs_fail(hs, -errno, SMC_CLC_DECL_INTERR, false);
                return;
        }
        /* a small send buffer keeps a plug small (dmb.h): X_a (client plugs), X_s (we do) */
        (void) setsockopt(a[0], SOL_SOCKET, SO_SNDBUF, &one, sizeof(one));
        (void) setsockopt(s[0], SOL_SOCKET, SO_SNDBUF, &one, sizeof(one));
        (void) fcntl(a[1], F_SETFL, O_NONBLOCK);
        for (int k = 0; k < 2; k++) { /* (no descriptor ever goes over a doorbell pair: manager.h) */
                (void) manager_refuse_rights(a[k]);
                (void) manager_refuse_rights(s[k]);
        }
        (void) fcntl(s[0], F_SETFL, O_NONBLOCK);
        c->ya = a[1];
        c->xs = s[0];
        r = sd_event_add_io(m->event, &c->xs_src, c->xs, EPOLLIN | EPOLLRDHUP, on_xs, c);
        if (r < 0) {
                close(a[0]);
                close(s[1]);
                hs_fail(hs, r, SMC_CLC_DECL_INTERR, false);
                return;
        }
        c->ep.id = manager_new_endpoint_id(m);
        if (u64map_put(m->endpoints, c->ep.id, &c->ep) < 0) {
                close(a[0]);
                close(s[1]);
                hs_fail(hs, -ENOMEM, SMC_CLC_DECL_MEM, false);
                return;
        }
        c->ep.smcr = c;
        c->ep.uid = hs->uid;
        c->ep.hold_fd = -1; /* SMC-D only */
        c->ep.local = hs->local;
        c->ep.peer = hs->peer;
        c->ep.role_server = hs->server;
        c->ep.owner = cl;
        c->client = cl;
        LIST_PREPEND(by_client, cl->endpoints, &c->ep);
        if (hs->server) {
                struct stat st;

                c->listener_id = l->id;
                if (fstat(a[0], &st) == 0)
                        c->x_ino = st.st_ino;
                if (fstat(s[1], &st) == 0)
                        c->y_ino = st.st_ino;
                m->stats.smcr.conns_server++;
                m->stats.smcr.conns_server_current++;
        } else {
                m->stats.smcr.conns_client++;
                m->stats.smcr.conns_client_current++;
        }
        m->stats.smcr.conns_current++;
        c->active = true;
        hs->conn = NULL;

        /* (v6) a NEW_CONN's seq: our instance */
        smc_ctl_init(&msg, hs->server ? SMC_CTL_NEW_CONN : SMC_CTL_CONNECT_REPLY, hs->server ? m->instance : hs->seq);
        msg.conn.conn_id = c->ep.id;
        msg.conn.mode = SMC_CTL_MODE_SMCR;
        msg.conn.params.busy_poll_us = m->config.busy_poll_us;
        msg.conn.params.autocork_size = m->config.autocork_size;
        msg.conn.local = hs->local;
        msg.conn.peer = hs->peer;
        fds[nfds++] = a[0]; /* X_a */
        fds[nfds++] = s[1]; /* Y_s */
        msg.conn.rx = (struct smc_ctl_buf) { .id = c->rmb->id, .size = c->rmb->size, .flags = SMC_CTL_BUF_FD };
        fds[nfds++] = c->rmb->memfd;
        msg.conn.tx = (struct smc_ctl_buf) { .id = c->sndbuf->id, .size = c->sndbuf->size, .flags = SMC_CTL_BUF_FD };
        fds[nfds++] = c->sndbuf->memfd;
        if (hs->server) {
                /* smcd keeps the idle TCP connection (its descriptor) while the
                 * connection lives: closed with it */
                c->tcp = hs->fd;
                hs->fd = -1;
                if (handover)
                        r = listener_send(l, &msg, fds, nfds); /* (counts it) */
                else {
                        (void) smc_ctl_set_version(&msg, cl->version);
                        r = smc_ctl_send(l->channel, &msg, fds, nfds, MSG_DONTWAIT);
                        if (r >= 0)
                                l->n_sent++;
                }
        } else
                r = client_send(cl, &msg, fds, nfds);
        close(a[0]);
        close(s[1]);
        sm->m->stats.smcr.handshakes_ok++;
        hs_server_was = hs->server;
        {
                char x[SMCD_ADDR_STRLEN], y[SMCD_ADDR_STRLEN], fc[48] = "";
                int eidlen = hs->version >= 2 ? SMC_EID_LEN : 0; /* v1 has no UEID */

                while (eidlen > 0 && hs->eid[eidlen - 1] == ' ')
                        eidlen--;
                if (hs->first_contact)
                        snprintf(fc, sizeof(fc), " (first contact), max links %u", c->lgr->max_links);
                log_debug("SMC-R v%u %s %s -> %s: link group %08x%s, token %08x, RMB %u KiB, peer RMB %u KiB%s%.*s.",
                          hs->version, hs->server ? "server" : "client", smcd_addr_to_string(&hs->local, x),
                          smcd_addr_to_string(&hs->peer, y), c->lgr->id, fc, c->token, c->rmb->size >> 10,
                          c->peer_rmb_size >> 10, eidlen ? ", UEID " : "", eidlen, (const char *) hs->eid);
        }
        hs_free(hs);
        manager_status_changed(m);
        if (r < 0 && hs_server_was) {
                /* the NEW_CONN did not go out (channel full or gone): abort it */
                endpoint_close(m, &c->ep, true, false);
                return;
        }
        if (r < 0)
                return; /* the client is gone: its endpoints are closed with it */
        /* data or a close that arrived before we were active */
        if (c->rx_prod)
                conn_ring_client(c);
        conn_apply_peer_flags(c);
        conn_tx(c, false);
        /* and the consumer-cursor rule for that data: a peer that filled our RMB
         * meanwhile waits for a cursor update, which only the plug of X_s lets us
         * send when the client has read (without it both sides waited for ever) */
        conn_rx_check(c);
}

int smcr_requeue_check(const Endpoint *e, uint64_t listener_id, int x, int y) {
        const SmcrConn *c = e->smcr;
        struct stat sx, sy;

        if (!c || !e->role_server || !c->active || c->closed || e->closed || c->listener_id != listener_id)
                return -ENOENT;
        if (fstat(x, &sx) < 0 || fstat(y, &sy) < 0 || !S_ISSOCK(sx.st_mode) || !S_ISSOCK(sy.st_mode) || !c->x_ino ||
            !c->y_ino || (uint64_t) sx.st_ino != c->x_ino || (uint64_t) sy.st_ino != c->y_ino)
                return -EINVAL;
        return 0;
}

int smcr_requeue_send(Endpoint *e, int x, int y, Listener *to) {
        SmcrConn *c = e->smcr;
        Manager *m = c->sm->m;
        union smc_ctl_msg msg;
        int fds[4] = { x, y, c->rmb->memfd, c->sndbuf->memfd }, r;

        if (!to->owner)
                return -ENOENT; /* (an SMC-R endpoint needs an owner: hs_done) */
        endpoint_conn_msg(m, &msg, SMC_CTL_NEW_CONN, m->instance, e, SMC_CTL_MODE_SMCR);
        msg.conn.rx = (struct smc_ctl_buf) { .id = c->rmb->id, .size = c->rmb->size, .flags = SMC_CTL_BUF_FD };
        msg.conn.tx = (struct smc_ctl_buf) { .id = c->sndbuf->id, .size = c->sndbuf->size, .flags = SMC_CTL_BUF_FD };
        r = listener_send(to, &msg, fds, 4); /* (beyond its backlog too; counts it) */
        if (r < 0)
                return r;
        c->listener_id = to->id;
        /* it ends with its owner's control connection (smcr_client_gone()): the
         * process that will accept it now */
        c->client = to->owner;
        if (e->owner != to->owner) {
                Client *old = e->owner;

                if (old)
                        LIST_REMOVE(by_client, old->endpoints, e);
                e->owner = to->owner;
                LIST_PREPEND(by_client, to->owner->endpoints, e);
                client_owned_less(old);
        }
        return 0;
}

/* An LLC step the handshake waited for is done (smcr.c lgr_on_llc / flows). */
static void hs_conn_ready(SmcrHs *hs) {
        int r;

        switch (hs->state) {
        case HS_WAIT_RKEY:
                if (hs->server) {
                        r = hs_send_accept(hs, SMC_CLC_ACCEPT);
                        if (r < 0) {
                                hs_fail(hs, r, SMC_CLC_DECL_INTERR, false);
                                return;
                        }
                        hs_arm(hs, HS_WAIT_CONFIRM, SMCR_CLC_TIMEOUT_USEC);
                        return;
                }
                r = hs_send_accept(hs, SMC_CLC_CONFIRM);
                if (r < 0) {
                        hs_fail(hs, r, SMC_CLC_DECL_INTERR, false);
                        return;
                }
                hs_done(hs);
                return;
        case HS_WAIT_CONFIRM_LINK:
        case HS_WAIT_CONFIRM_LINK_RESP:
                hs_done(hs);
                return;
        default:
                return;
        }
}

/* Subsequent contact: register the new RMB with the peer (CONFIRM RKEY), then go on. */
static void hs_queue_rkey(SmcrHs *hs) {
        SmcrLgr *lgr = hs->lgr;

        hs_arm(hs, HS_WAIT_RKEY, 60 * 1000000ULL); /* flow start wait (5.10: 20 s; a burst
                                                    * of 255 queues longer under TCG) */
        LIST_PREPEND(rkey_wait, lgr->rkey_wait, hs);
        lgr_flow_next(lgr);
}

static void hs_client_start(SmcrHs *hs) {
        SmcrManager *sm = hs->sm;
        struct smc_clc_proposal p = {};
        uint8_t buf[SMC_CLC_MAX_LEN];
        ssize_t n;
        int plen, r;

        hs->version = 2;
        hs->dev = NULL;
        if (is_v4(&hs->local, hs->local4))
                hs->dev = dev_for_ipv4(sm, hs->local4, hs->gid, &hs->gid_index, hs->mac);
        /* SMC-D too, with our own ISM GID, when the destination may be an SMC listener
         * of another network namespace of this host (only this smcd knows the GID:
         * any other peer declines it, or picks SMC-R) */
        if (sm->cross_netns && hs->client) {
                uint64_t cookie = smcd_sock_netns_cookie(hs->fd);
                uint64_t netns = cookie ? 0 : smcd_sock_netns(hs->fd);

                hs->ism = manager_listener_elsewhere(sm->m, &hs->peer, cookie, netns, hs->fd);
        }
        if (!hs->dev && !hs->ism) {
                /* nothing to propose: DECLINE instead of a proposal (3.5) */
                hs_fail(hs, 0, SMC_CLC_DECL_NOSMCRDEV, true);
                return;
        }
        if (manager_stopping(sm->m)) {
                /* smcd stops: no handshake starts that could outlast it (the
                 * connection goes on as TCP on both ends) */
                log_debug("SMC-R client handshake: smcd is stopping: DECLINE instead of a proposal.");
                hs_fail(hs, 0, SMC_CLC_DECL_NOSMCDEV, true);
                return;
        }
        p.typev1 = !hs->dev ? SMC_TYPE_D : hs->ism ? SMC_TYPE_B : SMC_TYPE_R;
        /* v2 needs a User EID (2.8): without one, v1 only (as Linux, smc_find_proposal_devices);
         * SMC-D between namespaces is v1 (v2 has no use here) */
        p.typev2 = hs->dev && sm->m->config.n_ueids > 0 ? SMC_TYPE_R : SMC_TYPE_N;
        hs->version = p.typev2 != SMC_TYPE_N ? 2 : 1;
        if (hs->ism)
                p.ism_gid = sm->ism_gid;
        memcpy(p.peer_id, sm->peer_id, 8);
        if (hs->dev) {
                memcpy(p.gid, hs->gid, 16);
                memcpy(p.mac, hs->mac, 6);
        }
        p.has_smcd_area = true;
        plen = local_prefixlen(sm->m, hs->local4);
        prefix_of(hs->local4, plen < 0 ? 32 : plen, p.ipv4_prefix);
        p.ipv4_prefix_len = (uint8_t) (plen < 0 ? 32 : plen);
        p.n_ueids = 0;
        for (unsigned i = 0; i < sm->m->config.n_ueids && i < SMCD_MAX_UEIDS; i++)
                memcpy(p.ueids[p.n_ueids++], sm->m->config.ueids[i], SMC_EID_LEN);
        p.release = SMCR_RELEASE;
        memcpy(p.roce_v2_gid, hs->gid, 16);
        p.max_conns = (uint8_t) (sm->m->config.max_conns_per_lgr ? sm->m->config.max_conns_per_lgr : 255);
        p.max_links = own_max_links(sm);
        n = smc_clc_proposal_encode(&p, buf, sizeof(buf));
        if (n < 0) {
                hs_fail(hs, (int) n, SMC_CLC_DECL_INTERR, false);
                return;
        }
        r = hs_send(hs, buf, (size_t) n);
        if (r < 0) {
                hs_fail(hs, r, SMC_CLC_DECL_INTERR, false);
                return;
        }
        hs_arm(hs, HS_WAIT_ACCEPT, SMCR_CLC_TIMEOUT_USEC);
}

/* The server handshake of this smcd whose ACCEPT carried DMB token @token (SMC-D
 * between namespaces), still waiting for the CONFIRM. */
static SmcrHs *hs_find_ism_server(SmcrManager *sm, uint64_t token) {
        SmcrHs *i;

        LIST_FOREACH(hss, i, sm->hss)
                if (i->server && i->ism && i->ism_token == token && i->state == HS_WAIT_CONFIRM && !i->ism_ep)
                        return i;
        return NULL;
}

static ssize_t ism_encode(SmcrManager *sm, uint8_t type, uint64_t token, uint8_t *buf, size_t len) {
        struct smc_clc_accept_d d = {
                .type = type,
                .first_contact = true, /* (no ISM link group is reused) */
                .gid = sm->ism_gid,
                .token = token,
        };

        return smc_clc_accept_d_encode(&d, buf, len);
}

/* Client, SMC-D between namespaces: the ACCEPT names a server handshake of ours by
 * its token (only this smcd and that TCP connection know it): make the connection
 * between our client and that handshake's listener, CONFIRM. */
static void hs_client_on_accept_d(SmcrHs *hs, const struct smc_clc_accept_d *a) {
        SmcrManager *sm = hs->sm;
        uint8_t buf[SMC_CLC_ACCEPT_D_V1_LEN];
        uint64_t ep = 0, token = 0;
        SmcrHs *srv;
        ssize_t n;
        int r;

        srv = a->gid == sm->ism_gid ? hs_find_ism_server(sm, a->token) : NULL;
        if (!srv || !hs->client) {
                /* an SMC-D peer that is not this smcd (or no longer waits) */
                hs_fail(hs, 0, SMC_CLC_DECL_NOSMCDDEV, true);
                return;
        }
        hs->version = 1;
        r = conn_make_netns(hs->client, hs->seq, hs->sndbuf, hs->rcvbuf, srv->listener_id, &srv->group, &hs->local,
                            &hs->peer, &srv->local, &srv->peer, &ep);
        if (r > 0) {
                hs_fail(hs, 0, (uint32_t) r, true); /* DECLINE: the server side goes TCP */
                return;
        }
        /* the listener has its end: CONFIRM, so that the server side keeps its TCP
         * socket with the connection (conn_keep_tcp()) */
        srv->ism_ep = ep;
        (void) getrandom(&token, sizeof(token), GRND_NONBLOCK);
        n = ism_encode(sm, SMC_CLC_CONFIRM, token, buf, sizeof(buf));
        if (n > 0)
                (void) hs_send(hs, buf, (size_t) n);
        if (r < 0) {
                hs_fail(hs, r, SMC_CLC_DECL_INTERR, false);
                return;
        }
        log_debug("SMC-D between namespaces: client %" PRIu64 " -> listener %" PRIu64 ", server endpoint %016" PRIx64
                  ".", hs->client->id, srv->listener_id, ep);
        hs_free(hs); /* (the client keeps its own copy of the TCP socket) */
}

static void hs_client_on_accept(SmcrHs *hs, const uint8_t *buf, size_t len) {
        SmcrManager *sm = hs->sm;
        struct smc_clc_accept_r *a = &hs->accept;
        SmcrLink *l = NULL;
        uint32_t reason;
        int r;

        if (hs->ism) {
                struct smc_clc_accept_d d;

                r = smc_clc_accept_d_decode(buf, len, &d);
                if (r == 0 && d.type == SMC_CLC_ACCEPT) {
                        hs_client_on_accept_d(hs, &d);
                        return;
                }
                if (r != -EPROTO || !hs->dev) {
                        hs_fail(hs, r < 0 ? r : -EPROTO, SMC_CLC_DECL_INTERR, false);
                        return;
                }
                /* (an SMC-R ACCEPT to our both-types proposal) */
        }
        r = smc_clc_accept_r_decode(buf, len, a);
        if (r == -EPROTO) {
                hs_fail(hs, 0, SMC_CLC_DECL_MODEUNSUPP, true);
                return;
        }
        if (r < 0 || a->type != SMC_CLC_ACCEPT) {
                hs_fail(hs, -EPROTO, SMC_CLC_DECL_INTERR, false);
                return;
        }
        hs->version = a->version;
        if (manager_stopping(sm->m)) {
                /* a DECLINE instead of the CONFIRM: an SMC-R connection would end with
                 * this smcd in a moment, TCP outlives it */
                hs_fail(hs, 0, SMC_CLC_DECL_NOSMCDEV, true);
                return;
        }
        hs->first_contact = a->first_contact;
        memcpy(hs->peer_id, a->peer_id, 8);
        memcpy(hs->peer_gid, a->gid, 16);
        hs->release = 0;
        hs->max_conns = 255;
        hs->max_links = own_max_links(sm);
        if (a->version >= 2) {
                if (!own_ueid(sm, a->eid)) {
                        hs_fail(hs, 0, SMC_CLC_DECL_NOUEID, true);
                        return;
                }
                memcpy(hs->eid, a->eid, SMC_EID_LEN);
                if (a->first_contact) {
                        if (a->fce.release > SMCR_RELEASE) {
                                hs_fail(hs, 0, SMC_CLC_DECL_RELEASEERR, true);
                                return;
                        }
                        hs->release = a->fce.release;
                        if (hs->release >= 1) {
                                if (a->fce.max_conns < 16) {
                                        hs_fail(hs, 0, SMC_CLC_DECL_MAXCONNERR, true);
                                        return;
                                }
                                if (a->fce.max_links < 1 || a->fce.max_links > 2) {
                                        hs_fail(hs, 0, SMC_CLC_DECL_MAXLINKERR, true);
                                        return;
                                }
                                hs->max_conns = a->fce.max_conns;
                                if (a->fce.max_links < hs->max_links)
                                        hs->max_links = a->fce.max_links;
                        }
                }
        }
        if (a->first_contact) {
                uint8_t mtu;

                r = lgr_new(sm, hs, &hs->lgr);
                if (r < 0) {
                        hs_fail(hs, 0, SMC_CLC_DECL_ERR_RDYLNK, true);
                        return;
                }
                l = &hs->lgr->links[0];
                reason = conn_new(hs, hs->lgr, l);
                if (!reason)
                        reason = conn_set_peer(hs->conn, a);
                if (reason) {
                        hs_fail(hs, 0, reason, true);
                        return;
                }
                mtu = a->qp_mtu < l->mtu ? a->qp_mtu : l->mtu;
                l->mtu = mtu;
                l->peer_qpn = a->qpn;
                memcpy(l->peer_gid, a->gid, 16);
                memcpy(l->peer_mac, a->mac, 6);
                r = roce_link_rtr(l->rl, a->qpn, a->psn, a->gid, mtu);
                if (r < 0) {
                        hs_fail(hs, 0, SMC_CLC_DECL_ERR_RDYLNK, true);
                        return;
                }
                r = hs_send_accept(hs, SMC_CLC_CONFIRM);
                if (r < 0) {
                        hs_fail(hs, r, SMC_CLC_DECL_INTERR, false);
                        return;
                }
                hs->lgr->confirm_link_wait = hs;
                hs_arm(hs, HS_WAIT_CONFIRM_LINK, SMCR_CONFIRM_LINK_USEC);
                return;
        }
        hs->lgr = lgr_find(sm, hs, &l);
        if (!hs->lgr) {
                hs_fail(hs, 0, SMC_CLC_DECL_SYNCERR, true);
                return;
        }
        reason = conn_new(hs, hs->lgr, l);
        if (!reason)
                reason = conn_set_peer(hs->conn, a);
        if (reason) {
                hs_fail(hs, 0, reason, true);
                return;
        }
        hs_queue_rkey(hs);
}

static void hs_server_on_proposal(SmcrHs *hs, const uint8_t *buf, size_t len) {
        SmcrManager *sm = hs->sm;
        struct smc_clc_proposal p;
        bool r_v1, r_v2, have_ueid = false, v4;
        int r, plen;

        r = smc_clc_proposal_decode(buf, len, &p);
        if (r < 0) {
                hs_fail(hs, r == -EPROTO ? 0 : -EPROTO, SMC_CLC_DECL_VERSMISMAT, r == -EPROTO);
                return;
        }
        memcpy(hs->peer_id, p.peer_id, 8);
        if (sm->cross_netns && (p.typev1 == SMC_TYPE_D || p.typev1 == SMC_TYPE_B) && p.has_smcd_area &&
            p.ism_gid == sm->ism_gid) {
                /* SMC-D from another network namespace of this host: our own GID (only
                 * this smcd proposes it). ACCEPT with a fresh token that names this
                 * handshake; the client's side makes the connection (hs_client_on_accept_d) */
                uint8_t abuf[SMC_CLC_ACCEPT_D_V1_LEN];
                ssize_t n;

                hs->ism = true;
                hs->version = 1;
                while (!hs->ism_token || hs_find_ism_server(sm, hs->ism_token))
                        if (getrandom(&hs->ism_token, sizeof(hs->ism_token), GRND_NONBLOCK) != sizeof(hs->ism_token)) {
                                hs_fail(hs, 0, SMC_CLC_DECL_INTERR, true);
                                return;
                        }
                n = ism_encode(sm, SMC_CLC_ACCEPT, hs->ism_token, abuf, sizeof(abuf));
                r = n < 0 ? (int) n : hs_send(hs, abuf, (size_t) n);
                if (r < 0) {
                        hs_fail(hs, r, SMC_CLC_DECL_INTERR, false);
                        return;
                }
                hs_arm(hs, HS_WAIT_CONFIRM, SMCR_CLC_TIMEOUT_USEC);
                return;
        }
        if (manager_stopping(sm->m)) {
                /* an SMC-R connection would end with this smcd in a moment: TCP
                 * outlives it (SMC-D between namespaces, above, outlives it too) */
                hs->version = p.version >= 2 ? 2 : 1;
                hs_fail(hs, 0, SMC_CLC_DECL_NOSMCDEV, true);
                return;
        }
        r_v1 = p.typev1 == SMC_TYPE_R || p.typev1 == SMC_TYPE_B;
        r_v2 = p.version >= 2 && (p.typev2 == SMC_TYPE_R || p.typev2 == SMC_TYPE_B);
        /* the first of the client's User EIDs that we have too (Linux smc_clc_match_eid) */
        for (unsigned i = 0; r_v2 && !have_ueid && i < p.n_ueids; i++)
                if (own_ueid(sm, p.ueids[i])) {
                        memcpy(hs->eid, p.ueids[i], SMC_EID_LEN);
                        have_ueid = true;
                }
        v4 = is_v4(&hs->local, hs->local4);
        hs->dev = v4 ? dev_for_ipv4(sm, hs->local4, hs->gid, &hs->gid_index, hs->mac) : NULL;
        if (!r_v1 && !r_v2) {
                hs_fail(hs, 0, SMC_CLC_DECL_NOSMCRDEV, true);
                return;
        }
        if (!hs->dev) {
                hs->version = p.version >= 2 ? 2 : 1;
                hs_fail(hs, 0, SMC_CLC_DECL_NOSMCRDEV, true);
                return;
        }
        hs->max_links = own_max_links(sm);
        if (r_v2 && have_ueid) {
                hs->version = 2;
                memcpy(hs->peer_gid, p.roce_v2_gid, 16);
                hs->release = p.release < SMCR_RELEASE ? p.release : SMCR_RELEASE;
                hs->max_conns = 255;
                if (hs->release >= 1) {
                        unsigned own = sm->m->config.max_conns_per_lgr ? sm->m->config.max_conns_per_lgr : 255;
                        hs->max_conns = (uint8_t) (p.max_conns < own ? p.max_conns : own);
                        if (hs->max_conns < 16) {
                                hs_fail(hs, 0, SMC_CLC_DECL_MAXCONNERR, true);
                                return;
                        }
                        if (p.max_links < 1) {
                                hs_fail(hs, 0, SMC_CLC_DECL_MAXLINKERR, true);
                                return;
                        }
                        hs->max_links = p.max_links < own_max_links(sm) ? p.max_links : own_max_links(sm);
                        /* No second device of ours (we make no asymmetric-local links):
                         * say so, or a Linux client waits 2 s for an ADD LINK and 1 s
                         * more for a DECLINE on every first contact
                         * (smcr_clnt_conf_first_link). */
                        if (hs->max_links > 1) {
                                uint8_t g[16], mc[6];
                                int gi;

                                if (!alt_dev(sm, &hs->dev, 1, NULL, g, &gi, mc))
                                        hs->max_links = 1;
                        }
                }
        } else if (r_v1) {
                uint8_t mine[4];

                hs->version = 1;
                plen = local_prefixlen(sm->m, hs->local4);
                prefix_of(hs->local4, plen < 0 ? 32 : plen, mine);
                if (plen < 0 || p.ipv4_prefix_len != plen || memcmp(p.ipv4_prefix, mine, 4) != 0) {
                        hs_fail(hs, 0, SMC_CLC_DECL_DIFFPREFIX, true);
                        return;
                }
                memcpy(hs->peer_gid, p.gid, 16);
                hs->max_conns = 255;
        } else {
                hs->version = 2;
                hs_fail(hs, 0, SMC_CLC_DECL_NOUEID, true);
                return;
        }
        hs_server_continue(hs);
}

/* A link group whose first contact with the same peer is still under way (its link
 * not yet confirmed), that @hs may wait for instead of making another one: as Linux's
 * smc_server_lgr_pending, first contacts to one peer are made one at a time, so that
 * concurrent connections share a group instead of each making its own. */
static SmcrLgr *lgr_find_activating(SmcrManager *sm, SmcrHs *hs) {
        SmcrLgr *lgr;

        LIST_FOREACH(lgrs, lgr, sm->lgrs)
                if (!lgr->failed && lgr->server == hs->server && !lgr->first_link_up && lgr->dev == hs->dev &&
                    lgr->version == hs->version && !memcmp(lgr->peer_id, hs->peer_id, 8) &&
                    !memcmp(lgr->peer_gid, hs->peer_gid, 16))
                        return lgr;
        return NULL;
}

/* The server's choice after a good proposal: reuse a link group, wait for one being
 * made, or make one (first contact). Also called again for the handshakes that waited
 * when that group's link came up or the group failed. */
static void hs_server_continue(SmcrHs *hs) {
        SmcrManager *sm = hs->sm;
        SmcrLgr *wait;
        SmcrLink *l = NULL;
        uint32_t reason;
        int r;

        hs->lgr = lgr_find(sm, hs, &l);
        if (!hs->lgr && (wait = lgr_find_activating(sm, hs))) {
                hs->fc_wait_lgr = wait;
                LIST_PREPEND(fc_wait, wait->fc_wait, hs);
                hs_arm(hs, HS_WAIT_LGR, SMCR_CLC_TIMEOUT_USEC);
                return;
        }
        if (hs->lgr) {
                hs->first_contact = false;
                /* the least used link (Linux smcr_lgr_conn_assign_link) */
                reason = conn_new(hs, hs->lgr, lgr_pick_link(hs->lgr, NULL));
                if (reason) {
                        hs_fail(hs, 0, reason, true);
                        return;
                }
                hs_queue_rkey(hs);
                return;
        }
        hs->first_contact = true;
        r = lgr_new(sm, hs, &hs->lgr);
        if (r < 0) {
                hs_fail(hs, 0, SMC_CLC_DECL_ERR_RDYLNK, true);
                return;
        }
        hs->lgr->links[0].link_num = 1;
        reason = conn_new(hs, hs->lgr, &hs->lgr->links[0]);
        if (reason) {
                hs_fail(hs, 0, reason, true);
                return;
        }
        r = hs_send_accept(hs, SMC_CLC_ACCEPT);
        if (r < 0) {
                hs_fail(hs, r, SMC_CLC_DECL_INTERR, false);
                return;
        }
        hs_arm(hs, HS_WAIT_CONFIRM, SMCR_CLC_TIMEOUT_USEC);
}

static void hs_server_on_confirm(SmcrHs *hs, const uint8_t *buf, size_t len) {
        SmcrLgr *lgr = hs->lgr;
        struct smc_clc_accept_r a;
        SmcrLink *l;
        uint32_t reason;
        int r;

        if (hs->ism) {
                /* SMC-D between namespaces: the client's side made the connection
                 * (ism_ep) before its CONFIRM; our TCP socket stays with it */
                struct smc_clc_accept_d d;

                r = smc_clc_accept_d_decode(buf, len, &d);
                if (r < 0 || d.type != SMC_CLC_CONFIRM || d.gid != hs->sm->ism_gid || !hs->ism_ep) {
                        hs_fail(hs, -EPROTO, SMC_CLC_DECL_INTERR, false);
                        return;
                }
                conn_keep_tcp(hs->sm->m, hs->ism_ep, hs->fd);
                hs->fd = -1;
                hs_free(hs);
                return;
        }

        r = smc_clc_accept_r_decode(buf, len, &a);
        if (r < 0 || a.type != SMC_CLC_CONFIRM || a.version != hs->version || a.first_contact != hs->first_contact) {
                hs_fail(hs, -EPROTO, SMC_CLC_DECL_INTERR, false);
                return;
        }
        if (a.version >= 2) {
                if (memcmp(a.eid, hs->eid, SMC_EID_LEN) != 0) {
                        hs_fail(hs, 0, SMC_CLC_DECL_NOUEID, true);
                        return;
                }
                if (a.first_contact && a.fce.release != hs->release) {
                        hs_fail(hs, 0, SMC_CLC_DECL_RELEASEERR, true);
                        return;
                }
                if (a.first_contact && hs->release >= 1 && a.fce.max_conns != hs->max_conns) {
                        hs_fail(hs, 0, SMC_CLC_DECL_MAXCONNERR, true);
                        return;
                }
        }
        reason = conn_set_peer(hs->conn, &a);
        if (reason) {
                hs_fail(hs, 0, reason, true);
                return;
        }
        if (!hs->first_contact) {
                hs_done(hs);
                return;
        }
        l = &lgr->links[0];
        l->mtu = a.qp_mtu < l->mtu ? a.qp_mtu : l->mtu;
        l->peer_qpn = a.qpn;
        memcpy(l->peer_gid, a.gid, 16);
        memcpy(l->peer_mac, a.mac, 6);
        if (roce_link_rtr(l->rl, a.qpn, a.psn, a.gid, l->mtu) < 0 || roce_link_rts(l->rl) < 0) {
                hs_fail(hs, 0, SMC_CLC_DECL_ERR_RDYLNK, true);
                return;
        }
        lgr->confirm_link_wait = hs;
        send_confirm_link(l, false, hs->release >= 1 ? (uint8_t) lgr->max_conns : 0);
        hs_arm(hs, HS_WAIT_CONFIRM_LINK_RESP, SMCR_LLC_RESP_USEC);
}

/* One CLC message of @len bytes is complete in hs->buf (hs->have is 0 again). */
static void hs_on_clc(SmcrHs *hs, const struct smc_clc_hdr *h, size_t len) {
        SmcrManager *sm = hs->sm;

        if (h->type == SMC_CLC_DECLINE) {
                struct smc_clc_decline d;

                if (smc_clc_decline_decode(hs->buf, len, &d) < 0) {
                        hs_fail(hs, -EPROTO, SMC_CLC_DECL_INTERR, false);
                        return;
                }
                sm->m->stats.smcr.decline_rcvd++;
                if (d.out_of_sync && hs->lgr)
                        lgr_fail(hs->lgr, "peer declined with out-of-sync");
                else
                        hs_fail(hs, 0, d.diag ? d.diag : SMC_CLC_DECL_PEERDECL, false);
                return;
        }
        switch (hs->state) {
        case HS_WAIT_PROPOSAL:
                if (h->type == SMC_CLC_PROPOSAL) {
                        hs_server_on_proposal(hs, hs->buf, len);
                        return;
                }
                break;
        case HS_WAIT_ACCEPT:
                if (h->type == SMC_CLC_ACCEPT) {
                        hs_client_on_accept(hs, hs->buf, len);
                        return;
                }
                break;
        case HS_WAIT_CONFIRM:
                if (h->type == SMC_CLC_CONFIRM) {
                        hs_server_on_confirm(hs, hs->buf, len);
                        return;
                }
                break;
        default:
                break;
        }
        log_debug("%s %s handshake: CLC message type %u in state %d: protocol error.", hs_kind(hs),
                  hs->server ? "server" : "client", h->type, (int) hs->state);
        hs_fail(hs, -EPROTO, SMC_CLC_DECL_INTERR, false);
}

static int on_hs_io(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        SmcrHs *hs = userdata;
        struct smc_clc_hdr h;

        (void) s;
        (void) revents;
        for (;;) {
                size_t want = SMC_CLC_HDR_LEN;
                ssize_t n;

                if (hs->have >= SMC_CLC_HDR_LEN) {
                        int r = smc_clc_decode_hdr(hs->buf, hs->have, &h);
                        if (r < 0) {
                                log_debug("%s %s handshake: bad CLC header %02x%02x%02x%02x %02x%02x%02x%02x (state %d): %s",
                                          hs_kind(hs), hs->server ? "server" : "client", hs->buf[0], hs->buf[1], hs->buf[2],
                                          hs->buf[3], hs->buf[4], hs->buf[5], hs->buf[6], hs->buf[7], (int) hs->state,
                                          strerror(-r));
                                hs_fail(hs, -EPROTO, SMC_CLC_DECL_INTERR, false);
                                return 0;
                        }
                        want = h.length;
                }
                if (hs->have == want && want > SMC_CLC_HDR_LEN) {
                        hs->have = 0;
                        hs_on_clc(hs, &h, want); /* may free hs */
                        return 0;
                }
                if (hs->have == 0) {
                        /* peek the header first (spec 2.1): a server whose peer signalled
                         * SMC but sends application data instead (its side fell back,
                         * e.g. its smcd did not answer in time) hands the connection to
                         * the application untouched, as TCP */
                        uint8_t peek[SMC_CLC_HDR_LEN];
                        struct smc_clc_hdr ph;

                        n = recv(fd, peek, sizeof(peek), MSG_DONTWAIT | MSG_PEEK);
                        if (n == (ssize_t) sizeof(peek) && smc_clc_decode_hdr(peek, sizeof(peek), &ph) < 0 &&
                            hs->server && hs->state == HS_WAIT_PROPOSAL) {
                                log_debug("SMC-R server handshake: the peer sent no CLC proposal but data "
                                          "(%02x%02x%02x%02x...): the connection is plain TCP.",
                                          peek[0], peek[1], peek[2], peek[3]);
                                hs_fail(hs, 0, SMC_CLC_DECL_PEERNOSMC, false);
                                return 0;
                        }
                }
                /* never read past the message: what follows is application data */
                n = recv(fd, hs->buf + hs->have, want - hs->have, MSG_DONTWAIT);
                if (n < 0) {
                        if (errno == EAGAIN || errno == EINTR)
                                return 0;
                        hs_fail(hs, -errno, SMC_CLC_DECL_INTERR, false);
                        return 0;
                }
                if (n == 0) {
                        hs_fail(hs, -ECONNRESET, SMC_CLC_DECL_INTERR, false);
                        return 0;
                }
                hs->have += (size_t) n;
                if (hs->have == SMC_CLC_HDR_LEN)
                        continue; /* decode the header, read the body */
        }
}

static int hs_new(SmcrManager *sm, Client *cl, uint32_t seq, int fd, bool server, SmcrHs **ret) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        SmcrHs *hs = calloc(1, sizeof(*hs));
        int r;

        if (!hs)
                return -ENOMEM;
        hs->sm = sm;
        hs->client = cl;
        hs->seq = seq;
        hs->fd = fd;
        hs->server = server;
        LIST_PREPEND(hss, sm->hss, hs);
        if (getsockname(fd, (struct sockaddr *) &ss, &sl) < 0 ||
            smc_ctl_addr_from_sockaddr(&hs->local, (struct sockaddr *) &ss, sl) < 0) {
                hs->fd = -1;
                hs_free(hs);
                return -ENOTCONN;
        }
        sl = sizeof(ss);
        if (getpeername(fd, (struct sockaddr *) &ss, &sl) < 0 ||
            smc_ctl_addr_from_sockaddr(&hs->peer, (struct sockaddr *) &ss, sl) < 0) {
                hs->fd = -1;
                hs_free(hs);
                return -ENOTCONN;
        }
        r = sd_event_add_io(sm->m->event, &hs->io, fd, EPOLLIN | EPOLLRDHUP, on_hs_io, hs);
        if (r >= 0)
                r = sd_event_add_time(sm->m->event, &hs->timer, CLOCK_MONOTONIC, UINT64_MAX, 0, on_hs_timeout, hs);
        if (r < 0) {
                hs->fd = -1;
                hs_free(hs);
                return r;
        }
        *ret = hs;
        return 0;
}

/* SMCR answered at once with TCP (@reason): the client uses its socket as plain TCP.
 * A client-side fallback counts in the stats as a CONNECT answered with TCP. */
static int reply_tcp_now(Client *c, const struct smc_ctl_smcr *req, uint32_t reason) {
        union smc_ctl_msg msg;

        if (req->role != SMC_CTL_ROLE_SERVER)
                smcd_stats_count_fallback(&c->manager->stats, reason);
        smc_ctl_init(&msg, SMC_CTL_CONNECT_REPLY, req->hdr.seq);
        msg.conn.mode = SMC_CTL_MODE_TCP;
        msg.conn.fallback_reason = reason;
        return client_send(c, &msg, NULL, 0); /* in the client's version */
}

/* Is TCP socket @fd one accepted from listener @l: of its network namespace, with its
 * port, and its address unless @l listens on all? A process of another uid may hand
 * such a connection on: a worker that switched uid after its master listened (nginx's
 * default `user nobody`; helper 116: refused before, the server read the client's CLC
 * proposal as data). No other uid can hold one (the kernel keeps a listening port to
 * its socket, or to an SO_REUSEPORT group of one uid). */
static bool accepted_from(const Listener *l, int fd) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        struct smc_ctl_addr a;
        uint64_t cookie;
        uint8_t a4[4], l4[4];

        if (getsockname(fd, (struct sockaddr *) &ss, &sl) < 0 ||
            smc_ctl_addr_from_sockaddr(&a, (struct sockaddr *) &ss, sl) < 0 || a.port != l->addr.port)
                return false;
        cookie = smcd_sock_netns_cookie(fd);
        if (cookie && l->netns_cookie ? cookie != l->netns_cookie : smcd_sock_netns(fd) != l->netns)
                return false;
        if (smcd_addr_is_any(&l->addr))
                return true;
        if (smcd_addr_get_v4(&a, a4) && smcd_addr_get_v4(&l->addr, l4))
                return !memcmp(a4, l4, 4);
        return a.family == l->addr.family && !memcmp(a.addr, l->addr.addr, sizeof(a.addr));
}

int client_handle_smcr(Client *c, const struct smc_ctl_smcr *req, int fd) {
        Manager *m = c->manager;
        SmcrManager *sm = m->smcr;
        bool server = req->role == SMC_CTL_ROLE_SERVER;
        SmcrHs *hs;
        int type = 0, r, opt;
        socklen_t tl = sizeof(type);
        uid_t uid = c->uid; /* whose endpoint: the client's, or the listener's */
        ListenerGroup group = { 0 };

        if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) < 0 || type != SOCK_STREAM) {
                close(fd);
                return client_send_error(c, req->hdr.seq, EINVAL, 0, "SMCR: not a TCP socket");
        }
        if (!sm) {
                close(fd);
                return reply_tcp_now(c, req, SMC_CLC_DECL_NOSMCRDEV);
        }
#if SMCD_HAVE_TCPOPT
        r = tcpopt_peer_has(sm->tcpopt, fd);
#else
        r = 0;
#endif
        if (smcr_why_unavailable(sm) && !sm->cross_netns) {
                close(fd);
                /* a marked listener echoed the option although SMC-R is gone (its
                 * device removed): its client sends a proposal, which the library
                 * declines on an error (accept_decline()); TCP only if no echo */
                if (server && (r == 1 || r == -EAGAIN))
                        return client_send_error(c, req->hdr.seq, ENODEV, SMC_CLC_DECL_NOSMCRDEV,
                                                 "SMCR: no RoCE device: %s", smcr_why_unavailable(sm));
                return reply_tcp_now(c, req, SMC_CLC_DECL_NOSMCRDEV);
        }
        if (server && manager_stopping(m) && (r == 1 || r == -EAGAIN)) {
                /* no handshake starts while smcd stops: the accepting library declines
                 * the client's proposal itself (accept_decline()), the connection goes
                 * on as TCP. (A client's SMCR declines in hs_client_start().) */
                close(fd);
                return client_send_error(c, req->hdr.seq, ESHUTDOWN, SMC_CLC_DECL_NOSMCDEV, "SMCR: smcd is stopping");
        }
        if (r == -EAGAIN && !server) {
                /* a connected client socket has finished its handshake: cannot be */
                r = 0;
        }
#if SMCD_HAVE_TCPOPT
        if (server && r == 0 && !tcpopt_has_record(sm->tcpopt, fd)) {
                /* its SYN came before we marked the listener: an earlier smcd may have
                 * echoed it (a restart) and its client sent a proposal, which the
                 * accepting library declines if it finds one queued (helper 122: the
                 * application read it) */
                close(fd);
                return client_send_error(c, req->hdr.seq, ESTALE, SMC_CLC_DECL_NOSMCDEV,
                                         "SMCR: the connection came before this smcd marked its listener");
        }
#endif
        if (r <= 0 && r != -EAGAIN) {
                /* the peer is not SMC-capable (or we cannot tell): not a CLC byte */
                close(fd);
                return reply_tcp_now(c, req, SMC_CLC_DECL_PEERNOSMC);
        }
        if (server) {
                Listener *l = manager_get_listener(m, req->listener_id);

                if (!l || !l->smcr || (l->uid != c->uid && !accepted_from(l, fd))) {
                        close(fd);
                        return client_send_error(c, req->hdr.seq, ENOENT, 0, "SMCR: no SMC-R listener %" PRIu64
                                                 " of this uid", req->listener_id);
                }
                /* an accepting process of a listener whose LISTEN's process is gone
                 * (daemonized): its SMC-R endpoints need an owner (hs_done) */
                listener_adopt(l, c);
                uid = l->uid;
                listener_group_of(l, &group);
        }
        opt = r; /* 1, or -EAGAIN (server: not settled yet) */
        r = hs_new(sm, c, req->hdr.seq, fd, server, &hs);
        if (r < 0) {
                close(fd);
                return client_send_error(c, req->hdr.seq, -r, SMC_CLC_DECL_INTERR, "SMCR: %s", strerror(-r));
        }
        hs->sndbuf = req->sndbuf;
        hs->rcvbuf = req->rcvbuf;
        hs->uid = uid;
        hs->listener_id = req->listener_id;
        hs->group = group; /* (role server; zero for a client) */
        if (server) {
                /* answered now; the result goes to the listener's accept channel, so the
                 * client accepts on while handshakes run (ctl-proto.h, SMCR) */
                union smc_ctl_msg msg;

                bool settled = opt != -EAGAIN;

                hs->client = NULL;
                smc_ctl_init(&msg, SMC_CTL_CONNECT_REPLY, req->hdr.seq);
                msg.conn.mode = SMC_CTL_MODE_SMCR_PENDING;
                r = client_send(c, &msg, NULL, 0);
                if (settled)
                        hs_arm(hs, HS_WAIT_PROPOSAL, SMCR_CLC_TIMEOUT_USEC);
                else {
                        hs->option_deadline = now_usec(sm) + 3000000ULL;
                        hs_arm(hs, HS_WAIT_OPTION, 2000);
                }
                return r;
        }
        hs_client_start(hs); /* may end it at once */
        return 0;
}

void smcr_client_gone(Client *c) {
        SmcrManager *sm = c->manager->smcr;
        SmcrHs *hs, *n;

        if (!sm)
                return;
        LIST_FOREACH_SAFE(hss, hs, n, sm->hss)
                if (hs->client == c) {
                        hs->client = NULL;
                        hs_fail(hs, -ECONNABORTED, SMC_CLC_DECL_INTERR, false);
                }
}

int smcr_prepare_connect(SmcrManager *sm, const struct smc_ctl_addr *src, int fd, bool ism) {
        (void) src;
        if (!sm || (ism ? !sm->cross_netns : smcr_why_unavailable(sm) != NULL))
                return ism ? SMC_CLC_DECL_PEERNOSMC : SMC_CLC_DECL_NOSMCRDEV;
#if SMCD_HAVE_TCPOPT
        if (tcpopt_mark(sm->tcpopt, fd) < 0)
                return SMC_CLC_DECL_INTERR;
        return 0;
#else
        (void) fd;
        return SMC_CLC_DECL_NOSMCRDEV;
#endif
}

bool smcr_mark_listener(SmcrManager *sm, int fd) {
        if (!sm || (smcr_why_unavailable(sm) && !sm->cross_netns))
                return false;
#if SMCD_HAVE_TCPOPT
        int r = tcpopt_mark(sm->tcpopt, fd);

        if (r == 1)
                log_debug("Listener socket with SO_REUSEPORT or SO_BINDTODEVICE next to a listener that is not "
                          "marked: its group echoes the SMC TCP option once every member is marked (until then its "
                          "clients from other hosts and namespaces use TCP).");
        else if (r == -EPERM)
                log_debug("Listener socket with SO_REUSEPORT or SO_BINDTODEVICE in another network namespace: not "
                          "marked for the SMC TCP option (reading that namespace's listeners needs setns(2) and "
                          "CAP_SYS_ADMIN, which smcd.service does not grant).");
        else if (r < 0)
                log_debug_errno(r, "Listener socket not marked for the SMC TCP option: %m");
        return r >= 0;
#else
        (void) fd;
        return false;
#endif
}

unsigned smcr_handshakes(const SmcrManager *sm) {
        const SmcrHs *hs;
        unsigned n = 0;

        if (!sm)
                return 0;
        LIST_FOREACH(hss, hs, sm->hss)
                n++;
        return n;
}

const char *smcr_why_unavailable(const SmcrManager *sm) {
        return sm->why;
}

bool smcr_cross_netns(const SmcrManager *sm) {
        return sm && sm->cross_netns;
}

/* Whether @want (a --roce-dev value: DEVICE or DEVICE:PORT) names RoCE port @pt. */
static bool port_named(const IbPort *pt, const char *want) {
        char name[IBDEV_NAME_MAX + 8];

        if (strcmp(pt->link_layer, "Ethernet") != 0)
                return false;
        snprintf(name, sizeof(name), "%s:%u", pt->device, pt->port);
        return !strcmp(want, pt->device) || !strcmp(want, name);
}

static int open_devices(SmcrManager *sm, char **devices) {
        const IbPort *ports;
        size_t n = sm->m->ibdevs ? ibdevs_get_ports(sm->m->ibdevs, &ports) : 0;

        for (size_t i = 0; i < n && sm->n_devs < SMCR_MAX_DEVS; i++) {
                bool want = !devices || !devices[0];
                RoceDev *d;
                int r;

                if (strcmp(ports[i].link_layer, "Ethernet") != 0)
                        continue;
                for (char **p = devices; p && *p; p++)
                        if (port_named(&ports[i], *p))
                                want = true;
                if (!want)
                        continue;
                r = roce_dev_open(sm->m->event, ports[i].device, ports[i].port, &d);
                if (r < 0) {
                        log_warning_errno(r, "Cannot open RoCE device %s port %u: %m", ports[i].device, ports[i].port);
                        continue;
                }
                if (sm->n_devs == 0)
                        snprintf(sm->first_netdev, sizeof(sm->first_netdev), "%s", ports[i].netdev);
                snprintf(sm->netdevs[sm->n_devs], IF_NAMESIZE, "%s", ports[i].netdev);
                sm->devs[sm->n_devs++] = d;
                log_info("SMC-R: using RoCE device %s port %u (%s).", ports[i].device, ports[i].port, ports[i].netdev);
        }
        /* a --roce-dev that names no RoCE port of this host is a typo or a missing
         * driver: say so (the others are used) */
        for (char **p = devices; p && *p; p++) {
                bool found = false;

                for (size_t i = 0; i < n && !found; i++)
                        found = port_named(&ports[i], *p);
                if (!found)
                        log_warning("--roce-dev %s: no RoCE (Ethernet) port of that name on this host; ignored.", *p);
        }
        if (sm->n_devs > 0) {
                char *u = NULL;

                if (tunable_format(&sm->m->config, "ueid", &u) == 0)
                        log_info("SMC-R: User EIDs for v2: %s%s%s (tunable ueid).", *u ? "\"" : "", *u ? u : "none: v1 only",
                                 *u ? "\"" : "");
                free(u);
        }
        return 0;
}

static int on_readd_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        SmcrManager *sm = userdata;
        SmcrLgr *lgr;

        (void) s;
        (void) usec;
        LIST_FOREACH(lgrs, lgr, sm->lgrs)
                if (lgr->server && !lgr->failed && lgr->max_links > 1 && lgr_links_used(lgr) < lgr->max_links) {
                        lgr->add_wanted = true;
                        lgr_flow_next(lgr);
                }
        return 0;
}

/* A netdev went down or away: the links of its RoCE port are lost (rxe never reports a
 * dead path through completions: its retry count 7 is infinite); their connections
 * move to another link of the group (or the group ends). A netdev up again: the server
 * side tries to add links again (after a moment, for the port to become ACTIVE). */
static void on_link_change(NetlinkMonitor *nl, const NetlinkLink *l, NetlinkLinkChange change, void *userdata) {
        SmcrManager *sm = userdata;
        SmcrLgr *lgr;

        (void) nl;
        for (unsigned i = 0; i < sm->n_devs; i++) {
                if (strcmp(sm->netdevs[i], l->name) != 0)
                        continue;
                if (change == NETLINK_LINK_DOWN || change == NETLINK_LINK_GONE) {
                        LIST_FOREACH(lgrs, lgr, sm->lgrs)
                                for (unsigned k = 0; k < SMCR_MAX_LINKS && !lgr->failed; k++)
                                        if (lgr->links[k].rl && lgr->links[k].dev == sm->devs[i])
                                                link_down(&lgr->links[k], "its netdev went down");
                } else if (sm->readd_timer) {
                        (void) sd_event_source_set_time(sm->readd_timer, now_usec(sm) + 3 * 1000000ULL);
                        (void) sd_event_source_set_enabled(sm->readd_timer, SD_EVENT_ONESHOT);
                }
        }
}

#if SMCD_HAVE_TCPOPT
/* Keep the program's smc_flagged map in systemd's file descriptor store (smcd.service:
 * FileDescriptorStoreMax=), for the next smcd after a restart: the listeners that
 * start listening while this one runs can be marked by it too (tcpopt.h). Without
 * $NOTIFY_SOCKET nothing happens. */
static void tcpopt_store(TcpOpt *t) {
        int reused, fd = tcpopt_flagged_fd(t, &reused), r;

        if (fd < 0)
                return;
        if (reused > 0) {
                log_info("SMC TCP option program: the listener record of the previous smcd reused "
                         "(listeners from before the restart can be marked).");
                return; /* it is in the store already */
        }
        if (reused < 0) {
                log_warning("SMC TCP option program: the stored listener record has another layout (an smcd of "
                            "another version?): not used; listeners from before this start get SMC again when "
                            "they listen again.");
                (void) sd_notify(false, "FDSTOREREMOVE=1\nFDNAME=" SMCD_FDSTORE_TCPOPT);
        }
        /* FDPOLL=0 (systemd 246): a BPF map's descriptor polls as EPOLLERR (bpf_map_poll()
         * of a map without its own poll), which would make systemd drop it at once */
        r = sd_pid_notify_with_fds(0, false, "FDSTORE=1\nFDPOLL=0\nFDNAME=" SMCD_FDSTORE_TCPOPT, &fd, 1);
        if (r < 0)
                log_warning_errno(r, "Cannot keep the listener record in the file descriptor store: %m");
}
#endif

int smcr_new(Manager *m, char **devices, SmcrManager **ret) {
        SmcrManager *sm = calloc(1, sizeof(*sm));
        uint8_t rnd[2] = {};
        int r;

        if (!sm)
                return -ENOMEM;
        sm->m = m;
        smcr_trace = getenv("SMCD_SMCR_TRACE") && *getenv("SMCD_SMCR_TRACE");
        sm->tokens = u64map_new();
        if (!sm->tokens) {
                free(sm);
                return -ENOMEM;
        }
        memset(sm->hostname, ' ', SMC_HOSTNAME_LEN);
        {
                char h[256] = "";
                (void) gethostname(h, sizeof(h) - 1);
                memcpy(sm->hostname, h, strnlen(h, SMC_HOSTNAME_LEN));
        }
        (void) getrandom(rnd, sizeof(rnd), 0);
        (void) getrandom(&sm->next_lgr_id, sizeof(sm->next_lgr_id), 0);
        sm->next_lgr_id &= ~0xffu;
        sm->peer_id[0] = rnd[0];
        sm->peer_id[1] = rnd[1];
        open_devices(sm, devices);
        if (sm->n_devs && m->netlink)
                (void) netlink_add_link_hook(m->netlink, on_link_change, sm, &sm->link_hook);
        if (sm->n_devs > 1 &&
            sd_event_add_time(m->event, &sm->readd_timer, CLOCK_MONOTONIC, UINT64_MAX, 0, on_readd_timer, sm) >= 0)
                (void) sd_event_source_set_enabled(sm->readd_timer, SD_EVENT_OFF);
        while (sm->ism_gid == 0)
                if (getrandom(&sm->ism_gid, sizeof(sm->ism_gid), 0) != sizeof(sm->ism_gid))
                        sm->ism_gid = (uint64_t) now_usec(sm) * 0x9E3779B97F4A7C15ULL;
        if (sm->n_devs == 0) {
                sm->why = "no usable RoCE device";
        } else {
                /* the peer ID's MAC: of the first device's netdev (2.3 advice) */
                const NetlinkLink *links;
                size_t nl = m->netlink ? netlink_get_links(m->netlink, &links) : 0;

                for (size_t i = 0; i < nl; i++)
                        if (!strcmp(links[i].name, sm->first_netdev) && links[i].mac_len == 6)
                                memcpy(sm->peer_id + 2, links[i].mac, 6);
        }
        if (sm->n_devs > 0 || m->config.cross_netns) {
                /* the TCP option: SMC-R's, and SMC-D's between namespaces */
#if SMCD_HAVE_TCPOPT
                r = tcpopt_new(tcpopt_default_cgroup(), m->stored_flagged_fd, &sm->tcpopt);
                if (m->stored_flagged_fd >= 0) {
                        close(m->stored_flagged_fd); /* (reused: the program holds its own) */
                        m->stored_flagged_fd = -1;
                }
                if (r >= 0)
                        tcpopt_store(sm->tcpopt);
                if (r < 0) {
                        log_warning_errno(r, "Cannot load the SMC TCP option program: %m");
                        if (!sm->why)
                                sm->why = "the SMC TCP option program cannot be loaded";
                        if (m->config.cross_netns)
                                log_warning("SMC-D between network namespaces unavailable: the SMC TCP option "
                                            "program cannot be loaded.");
                } else
                        sm->cross_netns = m->config.cross_netns;
#else
                if (!sm->why)
                        sm->why = "smcd was built without the SMC TCP option program (libbpf, clang)";
                if (m->config.cross_netns)
                        log_warning("SMC-D between network namespaces unavailable: smcd was built without the SMC "
                                    "TCP option program (libbpf, clang).");
#endif
        }
        (void) r;
        if (sm->why)
                log_info("SMC-R unavailable: %s.", sm->why);
        if (sm->cross_netns)
                log_info("SMC-D between network namespaces: on.");
        *ret = sm;
        return 0;
}

void smcr_exit_notify(SmcrManager *sm) {
        SmcrLgr *lgr;

        if (!sm)
                return;
        LIST_FOREACH(lgrs, lgr, sm->lgrs) {
                SmcrLink *via = lgr_llc_link(lgr);
                struct smc_llc_msg m;

                if (lgr->failed || !via)
                        continue;
                /* orderly only when no connection is left (Linux smc_llc_send_link_delete_all) */
                llc_init(lgr, &m, SMC_LLC_DELETE_LINK,
                         SMC_LLC_FLAG_DEL_LINK_ALL | (lgr->conns ? 0 : SMC_LLC_FLAG_DEL_LINK_ORDERLY));
                m.delete_link.reason = SMC_LLC_DEL_PROG_INIT_TERM;
                llc_send(via, &m);
                sm->exit_told = true;
        }
}

SmcrManager *smcr_free(SmcrManager *sm) {
        SmcrLgr *lgr, *ln;
        SmcrHs *hs, *hn;

        if (!sm)
                return NULL;
        if (sm->n_devs)
                log_info("SMC-R totals: link groups %" PRIu64 ", handshakes ok=%" PRIu64 " declined=%" PRIu64
                         " failed=%" PRIu64 ", cdc_sends=%" PRIu64 " inline_sends=%" PRIu64 " llc_sends=%" PRIu64
                         " rdma_writes=%" PRIu64 ", bytes tx=%" PRIu64 " rx=%" PRIu64 ", links_failed=%" PRIu64 ".",
                         sm->m->stats.smcr.lgrs_total, sm->m->stats.smcr.handshakes_ok, sm->m->stats.smcr.handshakes_declined,
                         sm->m->stats.smcr.handshakes_failed, sm->m->stats.smcr.cdc_sends, sm->m->stats.smcr.inline_sends, sm->m->stats.smcr.llc_sends,
                         sm->m->stats.smcr.rdma_writes, sm->m->stats.smcr.bytes_tx, sm->m->stats.smcr.bytes_rx, sm->m->stats.smcr.links_failed);
        LIST_FOREACH_SAFE(hss, hs, hn, sm->hss) {
                hs->client = NULL;
                hs_fail(hs, -ECONNABORTED, SMC_CLC_DECL_INTERR, false);
        }
        if (sm->exit_told) {
                /* smcr_exit_notify(): a moment for the device to send the DELETE LINKs
                 * and the connections' abort CDCs (conn_free_all()) before the QPs go */
                log_debug("SMC-R: told the peers that their link groups end; waiting %u ms for the sends.",
                          (unsigned) (SMCR_EXIT_DRAIN_USEC / 1000));
                (void) usleep(SMCR_EXIT_DRAIN_USEC);
        }
        LIST_FOREACH_SAFE(lgrs, lgr, ln, sm->lgrs) {
                SmcrConn *c, *cn;

                LIST_FOREACH_SAFE(conns, c, cn, lgr->conns)
                        conn_detach(c);
                lgr_free(lgr);
        }
        sm->link_hook = netlink_hook_free(sm->link_hook);
        sm->readd_timer = sd_event_source_disable_unref(sm->readd_timer);
        for (unsigned i = 0; i < sm->n_devs; i++)
                sm->devs[i] = roce_dev_close(sm->devs[i]);
#if SMCD_HAVE_TCPOPT
        sm->tcpopt = tcpopt_free(sm->tcpopt);
#endif
        u64map_free(sm->tokens);
        free(sm);
        return NULL;
}


void smcr_conn_free_at_exit(SmcrConn *c) {
        conn_abort_local(c);
        if (c->lgr && !c->lgr->failed) {
                c->local_flags |= SMC_CDC_CONN_ABORT;
                conn_tx(c, true);
        }
        conn_free(c);
}

void smcr_endpoint_info(const Endpoint *e, SmcrEndpointInfo *ret) {
        const SmcrConn *c = e->smcr;
        uint8_t p = c->peer_flags, l = c->sent_flags | c->local_flags;

        memset(ret, 0, sizeof(*ret));
        if (!c->lgr && c->active)
                ret->state = "link-lost"; /* its link group ended under it */
        else if (p & SMC_CDC_CONN_ABORT)
                ret->state = "aborted-by-peer";
        else if (p & SMC_CDC_CONN_CLOSED)
                ret->state = "closed-by-peer";
        else if ((p & SMC_CDC_CONN_DONE_WRITING) && (l & SMC_CDC_CONN_DONE_WRITING))
                ret->state = "both-done-writing";
        else if (p & SMC_CDC_CONN_DONE_WRITING)
                ret->state = "peer-done-writing";
        else if (l & SMC_CDC_CONN_DONE_WRITING)
                ret->state = "done-writing";
        else
                ret->state = "open";
        ret->sndbuf = c->sndbuf ? c->sndbuf->size : 0;
        ret->rmb = c->rmb ? c->rmb->size : 0;
        ret->peer_rmb = c->peer_rmb_size;
        ret->bytes_tx = c->tx_bytes;
        ret->bytes_rx = c->rx_bytes;
        ret->lgr_id = c->lgr ? c->lgr->id : 0;
        ret->device = c->link && c->link->dev ? roce_dev_name(c->link->dev) : NULL;
}

size_t smcr_get_lgrs(const SmcrManager *sm, SmcrLgrInfo *ret, size_t max) {
        const SmcrLgr *lgr;
        size_t n = 0;

        if (!sm)
                return 0;
        LIST_FOREACH(lgrs, lgr, sm->lgrs) {
                SmcrLgrInfo *i;
                bool same_dev = false;

                if (lgr->failed)
                        continue;
                if (n >= max) {
                        n++;
                        continue;
                }
                i = &ret[n++];
                memset(i, 0, sizeof(*i));
                i->id = lgr->id;
                i->server = lgr->server;
                i->version = lgr->version;
                memcpy(i->peer_id, lgr->peer_id, 8);
                memcpy(i->peer_gid, lgr->peer_gid, 16);
                i->conns = lgr->n_conns;
                i->max_conns = lgr->max_conns;
                i->max_links = lgr->max_links;
                for (unsigned k = 0; k < SMCR_MAX_LINKS && i->n_links < 2; k++) {
                        const SmcrLink *l = &lgr->links[k];

                        if (!l->rl)
                                continue;
                        for (unsigned j = 0; j < i->n_links; j++)
                                if (!strcmp(i->links[j].device, roce_dev_name(l->dev)))
                                        same_dev = true;
                        i->links[i->n_links].device = roce_dev_name(l->dev);
                        i->links[i->n_links].port = roce_dev_port(l->dev);
                        i->links[i->n_links].netdev = link_netdev(sm, l->dev);
                        memcpy(i->links[i->n_links].local_gid, l->gid, 16);
                        memcpy(i->links[i->n_links].peer_gid, l->peer_gid, 16);
                        i->links[i->n_links].local_qp = roce_link_qpn(l->rl);
                        i->links[i->n_links].peer_qp = l->peer_qpn;
                        i->links[i->n_links].link_num = l->link_num;
                        i->links[i->n_links].state = l->failing ? "deleting" : l->active ? "active" : "activating";
                        i->links[i->n_links].conns = l->n_conns;
                        i->links[i->n_links].max_inline = roce_link_max_inline(l->rl);
                        i->n_links++;
                }
                i->type = i->n_links < 2 ? "single" : same_dev ? "asymmetric-local" : "symmetric";
                /* the group's device: that of its first link now (the first contact's
                 * link may be gone) */
                i->device = i->n_links ? i->links[0].device : roce_dev_name(lgr->dev);
                i->port = i->n_links ? i->links[0].port : roce_dev_port(lgr->dev);
                if (i->n_links)
                        memcpy(i->peer_gid, i->links[0].peer_gid, 16);
        }
        return n;
}

unsigned smcr_links_on(const SmcrManager *sm, const char *device, uint8_t port) {
        const SmcrLgr *lgr;
        unsigned n = 0;

        if (!sm)
                return 0;
        LIST_FOREACH(lgrs, lgr, sm->lgrs)
                for (unsigned k = 0; k < SMCR_MAX_LINKS && !lgr->failed; k++)
                        if (lgr->links[k].rl && roce_dev_port(lgr->links[k].dev) == port &&
                            !strcmp(roce_dev_name(lgr->links[k].dev), device))
                                n++;
        return n;
}
