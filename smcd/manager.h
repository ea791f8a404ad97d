/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * The smcd manager: control socket, clients, listeners and SMC-D connections over
 * loopback ISM, on one sd-event loop (single-threaded; the pool's reclaim worker is
 * the only other thread).
 *
 * Objects and ownership:
 *   Manager ─┬─ Client (one per control connection; owns its Endpoints' ownership
 *            │    and its Listeners)
 *            ├─ Listener (an SMC listener: address, accept channel, backlog), in the
 *            │    port table (port -> PortEntry -> list) for CONNECT lookups
 *            └─ Conn (one SMC-D connection: two Endpoints, two DMBs). A Conn lives
 *                 until both Endpoints are closed; then its DMBs go back to the pool.
 *   Endpoint ids are unguessable 64-bit values (SipHash of a counter under a random
 *   key), so knowing one proves that a client received it.
 *   A per-endpoint request (CLOSE) is accepted from any client of the endpoint's uid:
 *   after fork() the child's library has a control connection of its own, and a
 *   child of a pre-forking server closes connections it accepted from the inherited
 *   accept channel (whose endpoints the listener's client owns). Same-uid processes
 *   can signal and ptrace each other, so this grants nothing new; per-uid accounting
 *   is by the endpoint's uid and stays right. Clients of other uids get ENOENT, as
 *   for an unknown id (a root-started server whose workers switched uid: their
 *   library sends no CLOSE, the end of X tells smcd, below).
 *
 * Lifecycle rules:
 *   - CLOSE marks one Endpoint closed; the last close releases both DMBs.
 *   - SMC-D: smcd keeps a copy of Y, the far end of each endpoint's app fd X
 *     (Endpoint.hold_fd). When the last copy of X is closed, in whatever process
 *     (the one that set it up, a forked child, a worker that switched uid, or the
 *     kernel at a process's exit), Y gets EPOLLHUP and the endpoint is closed as TCP
 *     closes a socket at its last close: unless its library already set CLOSED or
 *     ABORT itself (a CLOSE), smcd ORs SMC_DMB_CONN_ABORT (data left unread in its
 *     rx DMB: RST) or else SMC_DMB_CONN_CLOSED (FIN) into the survivor's rx DMB
 *     (conn_flags) and into its own rx DMB (reader_flags), then wakes the survivor
 *     (drains its writer's plug from the survivor's Y, shuts Y for writing: EOF).
 *   - A client that dies (EOF/HUP/error on its socket, or a reply that cannot be
 *     sent without blocking) stops owning its SMC-D endpoints (a forked child may
 *     hold them; the rule above closes them), has its SMC-R endpoints closed as
 *     above, its Listeners removed, its TCP fallback entries (fallback.h) forgotten.
 *   - Control sockets and accept channels are not sd-event sources of their own:
 *     they sit in one inner epoll (Manager.watch_fd) whose readiness is one source,
 *     and each wakeup handles a bounded batch of ready fds, the clients' messages in
 *     rounds of one per uid (manager.c clients_on_io: a uid with many processes
 *     gets no more turns than one with one). So N clients that hang
 *     up at once cost O(N) in total, not O(N) per event loop iteration.
 *   - A Listener is removed on UNLISTEN, on HUP of its accept channel (the client
 *     closed its end) or with its client.
 */

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#include "addr.h"
#include "ctl-proto.h"
#include "eptable.h"
#include "hints.h"
#include "fallback.h"
#include "hashmap.h"
#include "ibdev.h"
#include "list.h"
#include "netlink.h"
#include "policy.h"
#include "pool.h"
#include "stats.h"

/* doorbell socketpairs kept ready (two per SMC-D connection): making them took 7% of
 * all CPU on the connect path (socketpair(2), inode and file set-up) */
#define SMCD_SPARE_PAIRS 32

typedef struct Manager Manager;
typedef struct Client Client;
typedef struct Listener Listener;
typedef struct Endpoint Endpoint;
typedef struct Conn Conn;
typedef struct ProcWatch ProcWatch;
typedef struct PortEntry PortEntry;
typedef struct ListenerGroup ListenerGroup;
typedef struct UidUsage UidUsage;
typedef struct SmcrManager SmcrManager;
typedef struct SmcrConn SmcrConn;

/* Give a buffer of a finished connection back to the pool; it is cleared when the
 * event loop has nothing else to do (or by the pool's worker under a backlog). */
void manager_release_buf(Manager *m, struct smc_buf *b);
/* As manager_release_buf() when only the first @dirty ring bytes can be non-zero
 * (smc_pool_release_len()). */
void manager_release_buf_len(Manager *m, struct smc_buf *b, uint32_t dirty);

/* One SMC-D doorbell socketpair (dmb.h): ret[0] = X (an endpoint's own fd, the
 * smallest SO_SNDBUF: a writer's plug stays small), ret[1] = Y (O_NONBLOCK, its peer's
 * end), both close-on-exec, owned by the caller. From the spares the event loop made
 * when it had nothing else to do, else made now. Returns 0 or -errno of
 * socketpair(2) / fcntl(2). */
/* A doorbell socketpair (ret[0] blocking with a 1-byte SO_SNDBUF request, ret[1]
 * nonblocking, both close-on-exec), made ahead in idle time if one is ready, with
 * the inode number of ret[0] in *@ret_ino (0 if fstat failed). Returns 0 or -errno. */
int manager_take_pair(Manager *m, int ret[2], uint64_t *ret_ino);

enum smcd_inline {
        SMCD_INLINE_AUTO = 0,
        SMCD_INLINE_ON,
        SMCD_INLINE_OFF,
};

enum smcd_cq_poll {
        SMCD_CQ_POLL_EVENT = 0, /* CQs through the completion channel in the event loop */
        SMCD_CQ_POLL_THREAD,    /* a polling thread per RoCE device (roce_dev_set_cq_poll) */
};

/* SMC-R v2 User EIDs (tunable "ueid"): at most 4 of 32 characters, as the kernel's
 * SMC_MAX_UEID / SMC_MAX_EID_LEN (net/smc/smc_clc.h) */
/* How often smcd gives back buffers that stayed free (smc_pool_trim_idle(), keeping
 * --prepopulate), by default (--pool-idle-sec): after a burst of connections, free
 * memory returns within one to two intervals. */
#define SMCD_POOL_TRIM_USEC (60u * 1000000u)
#define SMCD_MAX_UEIDS 4
#define SMCD_UEID_LEN 32
#define SMCD_DEFAULT_UEID "SMCD-USERSPACE"

/* FDNAME of the SMC TCP option program's smc_flagged map in systemd's file descriptor
 * store (FileDescriptorStoreMax= of smcd.service): kept across a restart, so that the
 * next smcd can mark the listeners that started listening before it (tcpopt.h) */
#define SMCD_FDSTORE_TCPOPT "smc-tcpopt-flagged"

/* Did systemd pass smcd its control socket (socket activation), not only descriptors of
 * its file descriptor store? Reads $LISTEN_FDS / $LISTEN_FDNAMES, changes nothing. */
bool manager_socket_activated(void);

typedef struct ManagerConfig {
        char *runtime_dir;         /* socket and stats.json live here */
        uid_t *allow_uids;         /* none and no groups = everybody may connect */
        size_t n_allow_uids;
        gid_t *allow_gids;
        size_t n_allow_gids;
        uint64_t max_conns_per_uid; /* endpoints owned by one uid, 0 = unlimited */
        uint64_t max_buf_per_uid;   /* DMB ring bytes of endpoints owned, 0 = unlimited */
        uint64_t max_clients_per_uid; /* control connections of one uid, 0 = unlimited */
        uint64_t max_listeners_per_uid; /* listeners registered by one uid, 0 = unlimited */
        enum smc_pool_clear buf_clear;
        unsigned prepopulate;       /* fresh buffers of the default class */
        bool no_bus;                /* do not connect to the system bus (manager-bus.h) */
        gid_t admin_gid;            /* may call state-changing D-Bus methods besides root;
                                     * (gid_t) -1 = nobody but root (bus-util.h) */
        uint32_t rmem;              /* RMB ring bytes of a CONNECT without SO_RCVBUF (a
                                     * class size, 16K..1M; tunables.h) */
        enum smcd_inline inline_mode; /* tunable "inline": SMC-R CDC sends (smcr.c) */
        enum smcd_cq_poll cq_poll;  /* tunable "cq_poll": how new links' CQs are served */
        uint32_t sndbuf;            /* the writer's send buffer when its app set no
                                     * SO_SNDBUF: the peer's RMB is at least this (a
                                     * class size, 16K..1M; tunables.h) */
        uint32_t busy_poll_us;      /* handed to both ends of new connections (v2) */
        uint32_t autocork_size;     /* bytes, handed to both ends of new connections */
        uint64_t short_conn_rate;   /* short SMC-D connections per second to one listener
                                     * from which its destination is hinted to TCP
                                     * (hints.h), 0 = never */
        uint64_t max_handshakes_per_uid; /* CONNECTs per second per uid, 0 = unlimited */
        uint32_t max_conns_per_lgr; /* SMC-R: connections per new link group (16..255) */
        uint32_t max_links_per_lgr; /* SMC-R: links per new link group (1..2) */
        uint32_t test_link_time;    /* SMC-R: TEST LINK idle time, seconds, 0 = off */
        uint8_t ueids[SMCD_MAX_UEIDS][SMCD_UEID_LEN]; /* tunable "ueid": SMC-R v2 User EIDs,
                                     * upper case, blank padded (no NUL), in the order given */
        uint32_t n_ueids;           /* 0..SMCD_MAX_UEIDS; 0 = no SMC-R v2 (v1 only) */
        char state_file[PATH_MAX];  /* tunables state file (tunables.h); "" = none */
        int state_load_error;       /* -errno: the state file exists but could not be read
                                     * at start; left alone, SetTunable refused */
        uint64_t max_fallback_conns; /* TCP fallback connections listed, 0 = the
                                      * default (fallback.h) */
        char **roce_devs;           /* --roce-dev: RoCE devices SMC-R may use ("name" or
                                     * "name:port"); NULL = every RoCE port */
        uint64_t pool_idle_usec;    /* --pool-idle-sec: smc_pool_trim_idle() interval, us;
                                     * 0 = never (default SMCD_POOL_TRIM_USEC, set in main) */
        bool cross_netns;           /* --cross-netns: SMC-D between network namespaces of
                                     * this host, over CLC on the TCP connection (needs
                                     * the SMC TCP option program, tcpopt.h) */
} ManagerConfig;

void manager_config_done(ManagerConfig *c);

struct Client {
        Manager *manager;
        uint64_t id;
        int fd;               /* in Manager.watch_fd, key = id */
        pid_t pid;
        uint64_t pid_start;   /* its start time (proc_pid_start), read at its first
                               * endpoint; 0 until then */
        uid_t uid;
        gid_t gid;
        bool hello_done;
        bool over_limit;      /* admitted beyond max_clients_per_uid: may only adopt */
        bool pending;         /* over_limit, holding nothing: nothing adopted yet, or all of
                               * it gone (UidUsage.clients_pending) */
        uint16_t version;     /* control protocol version: SMC_CTL_VERSION_MIN until
                               * HELLO, then the negotiated one (ctl-proto.h) */
        LIST_FIELDS(Client, clients);
        LIST_HEAD(Endpoint, endpoints); /* open endpoints owned */
        LIST_HEAD(Listener, listeners);
        U64Map *mapped; /* ids of buffers this client surely has mapped */
        FallbackQueue fallbacks; /* its TCP fallback connections (fallback.h) */
};

struct Listener {
        Manager *manager;
        Client *owner;            /* the client that sent LISTEN; NULL once it is gone
                                   * while its accept channel lives on in other
                                   * processes (an orphan: listener_orphan()) */
        uid_t uid;                /* the LISTEN's client's (the endpoints' uid) */
        bool uid_counted;         /* in its UidUsage.listeners (max_listeners_per_uid) */
        uint16_t version;         /* its control protocol version (NEW_CONN's) */
        uint64_t id;
        struct smc_ctl_addr addr; /* as bound (getsockname of the TCP socket) */
        uint64_t netns;           /* its TCP socket's network namespace (smcd_sock_netns);
                                   * 0 unknown: matches no CONNECT */
        uint64_t netns_cookie;    /* the same one's SO_NETNS_COOKIE; 0 unknown */
        NsV4 ns_v4;               /* a namespace other than smcd's: its IPv4 addresses
                                   * at LISTEN (smcd_sock_ns_v4()), for wildcard
                                   * listeners; smcd's own: netlink's, live */
        dev_t sock_dev;           /* the kernel socket it stands for (fstat of the */
        ino_t sock_ino;           /* LISTEN fd): a new LISTEN of it retires this one */
        bool v6only;
        char bound_dev[16];       /* SO_BINDTODEVICE at LISTEN (IFNAMSIZ), "" = none:
                                   * one bound to another device than lo gets no
                                   * connection of this host (manager_find_listener) */
        unsigned dmb_class;       /* server DMBs of a version-1 LISTEN:
                                   * smc_dmb_class(SO_RCVBUF / 2) */
        uint32_t sndbuf, rcvbuf;  /* version 2: the app's SO_SNDBUF / SO_RCVBUF, 0 =
                                   * not set (the tunables sndbuf / rmem at CONNECT) */
        uint32_t queue_max;       /* NEW_CONN queued but not accepted: backlog + 1 */
        int channel;              /* smcd's end of the accept channel, in Manager.watch_fd
                                   * (key = id | WATCH_LISTENER): HUP = the client
                                   * closed its end */
        PortEntry *port;
        uint64_t n_sent;          /* messages sent on its channel, total (NEW_CONN of
                                   * any mode): minus those queued, the accepted ones */
        uint64_t stall_accepted;  /* listener_stalled(): the accepted count seen last */
        uint64_t stall_since;     /* when it was last seen to move (manager_now), 0 =
                                   * nothing queued then */
        bool stalled;             /* said so in the log */
        bool retired;             /* in Manager.retired instead of a port (a newer
                                   * LISTEN of its socket): back when that one goes */
        bool unlistened;          /* retired by an UNLISTEN that found connections
                                   * queued: kept until its channel hangs up, so that
                                   * its client can REQUEUE them (listener.c); never
                                   * back in a port */
        bool smcr;                /* its socket was marked for the SMC TCP option (v3) */
        /* short-lived connections (tunable short_conn_rate, conn.c, hints.h): the
         * closes of the current window, how many were short, when it began */
        uint32_t sc_n, sc_short;
        uint64_t sc_start;        /* manager_now, usec */
        ino_t chan_ino;           /* the inode of the client end of the channel */
        ino_t chan_d_ino;         /* the inode of our end (channel) */
        /* LISTEN_DEPOSIT (v5): client ends of the channel kept for a LISTEN with
         * SMC_CTL_LISTEN_F_JOIN of its socket by another process, oldest first, each
         * until its deposit_until (manager_now); deposit_timer fires at the first */
        unsigned n_deposits;
        int deposit_fd[SMC_CTL_DEPOSIT_MAX];
        uint64_t deposit_until[SMC_CTL_DEPOSIT_MAX];
        bool deposit_keep[SMC_CTL_DEPOSIT_MAX]; /* smcd's own: serves every join until
                                                 * it expires (listen_join()) */
        uint32_t deposit_flags[SMC_CTL_DEPOSIT_MAX]; /* the sender's SMC_CTL_DEPOSIT_* */
        sd_event_source *deposit_timer;
        LIST_FIELDS(Listener, by_client);
        LIST_FIELDS(Listener, by_port);
};

struct PortEntry {
        uint16_t port;
        unsigned rr; /* round robin among listeners of one address (SO_REUSEPORT) */
        unsigned n;
        LIST_HEAD(Listener, listeners);
};

struct UidUsage {
        uid_t uid;
        uint64_t endpoints;
        uint64_t dmb_bytes;
        uint64_t clients; /* control connections */
        uint64_t clients_pending; /* of them: admitted over max_clients_per_uid, nothing adopted yet */
        uint64_t listeners; /* registered listeners (Listener.uid_counted) */
        /* max_handshakes_per_uid: a token bucket of CONNECTs, in millionths of a
         * handshake; hs_last = when it was last refilled (0: never used, full) */
        uint64_t hs_tokens;
        uint64_t hs_last;
};

enum {
        EP_CLIENT = 0, /* the connecting side */
        EP_SERVER = 1, /* the accepted side */
};

struct Endpoint {
        Conn *conn;         /* SMC-D; NULL for SMC-R */
        SmcrConn *smcr;     /* SMC-R (smcr.h); NULL for SMC-D */
        bool role_server;   /* SMC-R: accepted (SMC-D: the side in conn->ep) */
        uint64_t id;
        Client *owner;      /* NULL once closed */
        uid_t uid;
        bool closed;
        bool aborted;       /* CLOSE with ABORT, or its owner died */
        struct smc_ctl_addr local; /* its own address and its peer's, as the CONNECT_REPLY */
        struct smc_ctl_addr peer;  /* or NEW_CONN told its client (for ListConnections) */
        /* SMC-D: smcd's copy of Y, the far end of the endpoint's app fd X (its peer
         * rings it through Y), in Manager.watch_fd (key = hold_key | WATCH_ENDPOINT).
         * Y gets EPOLLHUP when the last copy of X is gone in every process: the
         * kernel's count of X's holders, across fork, setuid and death, decides when
         * the endpoint closes (conn.c endpoint_on_hold_hup). Also when a shutdown of
         * both directions reaches X (SMC_DMB_READER_X_HUP): then smcd asks the kernel
         * whether X still exists (x_ino). Edge-triggered, so a Y that stays hung up
         * wakes smcd once per change (X's last close is one). -1 once closed. */
        int hold_fd;
        uint64_t hold_key;
        /* SMC-D: the inode number of X (fstat), recorded when smcd made the pair, by
         * which ADOPT_FD finds the endpoint of an X passed between processes
         * (SCM_RIGHTS); 0 = unknown (restored endpoints) */
        uint64_t x_ino;
        /* SMC-D: its record in the endpoint table (eptable.h): slot + 1, 0 = none */
        uint32_t ept_slot1;
        /* restored, read from the endpoint table an earlier smcd left, and not yet
         * re-registered by its process (REREG): owner NULL; in proc's list (through
         * by_client) if that process is watched: its exit closes the endpoint, as a
         * death. Not charged to its uid's limits until confirmed. */
        bool loaded;
        bool from_table;    /* restored from the endpoint table (loaded, or since confirmed) */
        pid_t table_pid;    /* loaded: the pid the table names (listed as its pid) */
        ProcWatch *proc;
        LIST_FIELDS(Endpoint, by_client);
};

/* A process the endpoint table names for loaded endpoints (conn.c): one pidfd per
 * process, in Manager.watch_fd (key = key | WATCH_PROC), whose readiness says it
 * exited; freed with its last endpoint. */
struct ProcWatch {
        pid_t pid;
        uint64_t start; /* its start time (proc_pid_start), as checked */
        int pidfd;
        uint64_t key;
        LIST_HEAD(Endpoint, endpoints); /* loaded, through by_client */
};

struct Conn {
        Manager *manager;
        Endpoint ep[2];         /* EP_CLIENT, EP_SERVER */
        struct smc_buf *buf[2]; /* buf[i]: the rx DMB of ep[i] */
        uint64_t listener_id;   /* the Listener that got the NEW_CONN (it may be gone:
                                 * look it up with manager_get_listener()) */
        bool accept_marked;     /* its listener speaks ctl version >= 4: the server's
                                 * library marks the DMB when it accepts
                                 * (SMC_DMB_READER_ACCEPTED) */
        struct smcd_dmb_counters stats_base[2]; /* buf[i]'s DMB counters at the last
                                                 * stats reset, 0 before (stats.h) */
        int tcp_fd;             /* between namespaces (--cross-netns): the server's end
                                 * of the TCP connection the handshake ran on, idle,
                                 * kept for the connection's life (its 4-tuple); -1 */
        /* Restored (conn.c, client_handle_rereg): a connection an earlier smcd set up,
         * re-registered by its processes (REREG). buf[] are NULL (this smcd does not
         * have its DMBs), no Y is held (hold_fd -1: its ends learn of each other's
         * death from their own socket pairs, dmb.h), listener_id is 0. An endpoint
         * slot nobody re-registered (yet) has id 0 and counts as closed; the other end
         * joins it when its tokens match crosswise. */
        bool restored;
        uint32_t rsize[2];  /* restored: ring bytes of ep[i]'s rx DMB */
        uint64_t token[2];  /* restored: DMB token of ep[i]'s rx DMB (dmb.h), not 0 */
        /* restored: the only endpoint that re-registered closed. The connection was
         * counted as ended; it waits (a "tomb", conn.c) for its other endpoint's REREG
         * for CONN_TOMB_USEC, so that this one joins it and the connection is not
         * counted twice. */
        bool counted;           /* counted in conns_closed / conns_aborted already */
        bool tomb;
        uint64_t tomb_usec;     /* when it became one (manager_now) */
        LIST_FIELDS(Conn, tombs);
};

struct Manager {
        ManagerConfig config;
        sd_event *event;
        int listen_fd;
        int activated_fd;        /* the control socket systemd passed (socket activation),
                                  * until setup_socket() takes it; -1 none */
        int stored_flagged_fd;   /* the SMC TCP option program's smc_flagged map an earlier
                                  * smcd left in systemd's file descriptor store
                                  * (SMCD_FDSTORE_TCPOPT), until smcr_new() used it; -1 */
        bool socket_bound;       /* we bound it (not socket activation): unlink at exit */
        dev_t socket_dev;        /* its path's identity after the bind: unlinked at exit */
        ino_t socket_ino;        /* only while it is still ours */
        char *socket_path;
        char *stats_path;
        sd_event_source *listen_io;
        sd_event_source *rundir_watch; /* inotify on the runtime directory: the socket
                                        * we bound, removed, is bound again */
        bool rundir_gone;              /* the directory itself went (logged once) */
        dev_t foreign_dev;             /* the last other file found at the socket's */
        ino_t foreign_ino;             /* path (logged once) */
        sd_event_source *accept_retry; /* accept4 ran out of fds/memory: listen_io is
                                        * off until this timer fires */
        uint64_t max_clients;          /* control connections in all, from RLIMIT_NOFILE */

        int watch_fd;                  /* inner epoll of client sockets and channels */
        sd_event_source *watch_io;
        U64Map *watches;               /* watch key -> Client / Listener */

        struct smc_pool *pool;

        LIST_HEAD(Client, clients);
        LIST_HEAD(Listener, retired); /* listeners a newer LISTEN of their socket took out
                                       * of the port table (by_port links) */
        U64Map *endpoints; /* id -> Endpoint (open ones) */
        U64Map *ports;     /* port -> PortEntry */
        U64Map *uids;      /* uid -> UidUsage */

        uint64_t next_client_id;
        uint64_t next_listener_id;
        uint64_t next_hold_key;        /* Endpoint.hold_key */
        uint64_t ep_counter;
        uint64_t id_key[2];  /* SipHash key for endpoint ids (getrandom) */
        uint32_t instance;   /* HELLO_REPLY.instance: random, not 0, per start */
        uint64_t netns;      /* smcd's own network namespace (smcd_pid_netns): its
                              * address list (netlink, getifaddrs) is that one's */
        uint64_t netns_cookie; /* the same one's SO_NETNS_COOKIE; 0 unknown */
        EpTable *eptable;    /* $RUNTIME_DIR/endpoints (eptable.h); NULL if it could
                              * not be created */
        Hints *hints;        /* $RUNTIME_DIR/hints (hints.h); NULL if it could not be
                              * created (then no destination is hinted) */
        U64Map *procs;       /* pid -> ProcWatch (conn.c): the processes the endpoint
                              * table names for endpoints not yet re-registered */
        U64Map *restored;    /* DMB token -> restored Endpoint (its rx DMB's token),
                              * open or in a tomb */
        LIST_HEAD(Conn, tombs);       /* restored connections waiting for their peer */
        uint64_t n_tombs;
        sd_event_source *tomb_timer;  /* frees the tombs older than CONN_TOMB_USEC */
        size_t msg_truesize; /* kernel bytes of one queued NEW_CONN datagram */
        int somaxconn;

        LocalAddrs local_addrs;  /* getifaddrs fallback, only without m->netlink */
        NetlinkMonitor *netlink; /* links and local addresses (netlink.h); NULL if netlink
                                  * could not be opened at start */
        IbDevices *ibdevs;       /* RoCE device ports (ibdev.h) */
        struct smcd_stats stats;

        /* sd_notify STATUS=, at most once per second */
        sd_event_source *status_timer;
        sd_event_source *reclaim_idle; /* clears released buffers when the loop is idle */
        /* doorbell socketpairs made ahead, in idle time (manager_take_pair()) */
        sd_event_source *pairs_idle;
        int spare_pairs[SMCD_SPARE_PAIRS][2];
        uint64_t spare_pair_ino[SMCD_SPARE_PAIRS]; /* inode number of spare_pairs[i][0] */
        unsigned max_spare_pairs; /* by RLIMIT_NOFILE, 1 per 256 fds; how many are ready:
                                   * stats.spare_pairs */
        sd_event_source *pool_trim;    /* every --pool-idle-sec: smc_pool_trim_idle() */
        uint64_t status_last_usec;
        char *status_last;
        bool exiting; /* manager_free() runs: no more STATUS= */
        /* SIGTERM / SIGINT: the loop runs on until the CLC handshakes in flight have
         * ended (SMC-R, SMC-D between namespaces), at most SMCD_STOP_DRAIN_USEC;
         * meanwhile none starts (manager_stopping()) */
        bool stopping;
        uint64_t stop_deadline_usec;  /* CLOCK_MONOTONIC */
        uint64_t smcr_pending_until;  /* CLOCK_MONOTONIC: a CONNECT answered SMCR_PENDING
                                       * may still send its SMCR until then */
        sd_event_source *stop_timer;

        sd_bus *bus;  /* system bus, NULL without D-Bus (manager-bus.h) */

        PolicyTable policy; /* SMC or TCP per connect / listen (policy.h) */
        PnetTable pnet;     /* netdev <-> RoCE device, for SMC-R (policy.h) */
        FallbackTable *fallbacks; /* TCP fallback connections (fallback.h) */
        SmcrManager *smcr;  /* SMC-R over RoCE (smcr.h) */
        /* unix_diag (sockdiag.h), NULL if the kernel has none: whether an X still
         * exists when its Y hangs up after a shutdown of both directions (conn.c
         * endpoint_on_hold_hup); without it no DMB offers SMC_DMB_FEAT_X_HUP */
        SockDiag *unixdiag;
};

/* After SIGTERM / SIGINT the loop drains: the CLC handshakes in flight (SMC-R, SMC-D
 * between namespaces) end as they would, for up to this long (smcd's stop waits that
 * much more at most), and a CONNECT answered SMCR_PENDING just before has
 * SMCD_STOP_PENDING_USEC to bring its SMCR. A second signal exits at once. */
#define SMCD_STOP_DRAIN_USEC (3 * 1000000ULL)
#define SMCD_STOP_PENDING_USEC (1000000ULL)

/* Is smcd stopping (SIGTERM / SIGINT received)? Then no CLC handshake starts: CONNECT
 * answers TCP where it would answer SMCR_PENDING, a client's SMCR declines (a DECLINE
 * instead of its proposal), an accepting client's SMCR gets an error (its library
 * declines the proposal). Connections inside a namespace are still made (SMC-D
 * outlives smcd). */
static inline bool manager_stopping(const Manager *m) {
        return m->stopping;
}

/* Create a manager with a copy of @cfg: sd-event loop, signal handlers (SIGTERM,
 * SIGINT: exit; SIGUSR1: write stats.json; the caller blocks them), the pool.
 * Returns 0 or -errno (logged). */
int manager_new(const ManagerConfig *cfg, Manager **ret);

/* Set up the control socket (socket activation or own bind), write stats.json,
 * connect the system bus unless config.no_bus (optional: failure is logged, not
 * fatal), sd_notify READY=1. Returns 0 or -errno (logged). */
int manager_start(Manager *m);

/* Run the loop until SIGTERM/SIGINT. Returns the exit code of the loop or -errno. */
int manager_run(Manager *m);

/* Free everything; unlinks the socket if we bound it. Connections in clients keep
 * working (smcd is not on the data path). NULL is ok. Returns NULL. */
Manager *manager_free(Manager *m);

/* Write $RUNTIME_DIR/stats.json now. Returns 0 or -errno (logged). */
int manager_write_stats(Manager *m);

/* internal, between manager.c, listener.c and conn.c */
#define WATCH_LISTENER (UINT64_C(1) << 63) /* watch key bit: a Listener's channel */
#define WATCH_ENDPOINT (UINT64_C(1) << 62) /* watch key bit: an SMC-D Endpoint's Y copy */
#define WATCH_PROC (UINT64_C(1) << 61)     /* watch key bit: a ProcWatch's pidfd */
/* Watch @fd for @events (EPOLLIN, EPOLLHUP, ...) in the inner epoll; @key (a client
 * id, or a listener id | WATCH_LISTENER) finds @obj. Returns 0 or -errno. */
int manager_watch(Manager *m, int fd, uint32_t events, uint64_t key, void *obj);
/* Stop watching @fd (before it is closed). Events of @key already fetched are dropped. */
void manager_unwatch(Manager *m, int fd, uint64_t key);
/* Per-uid usage record, created if @create; NULL on ENOMEM or if absent. */
UidUsage *uid_usage(Manager *m, uid_t uid, bool create);
/* Free @u if it counts nothing. */
void uid_usage_gc(Manager *m, UidUsage *u);
void manager_status_changed(Manager *m);
uint64_t manager_now(Manager *m);
int client_send(Client *c, const union smc_ctl_msg *msg, const int *fds, size_t nfds);
int client_send_error(Client *c, uint32_t seq, int error, uint32_t detail, const char *fmt, ...)
        __attribute__((format(printf, 5, 6)));

/* LISTEN: @fd the client's TCP socket; @chan_c, @chan_d (F_REVIVE, v6; else -1) the
 * ends of an earlier smcd's accept channel. Takes the fds. */
int client_handle_listen(Client *c, const struct smc_ctl_listen *req, int fd, int chan_c, int chan_d);

/* Make the unix socket @fd refuse descriptors sent to it (SCM_RIGHTS: the sender's
 * sendmsg(2) fails with EPERM). For the ends smcd holds and never reads (a doorbell
 * pair's Y, an accept channel's own end): a client end sent into its own pair would
 * otherwise stay open inside the queue of the end we hold, and never hang up
 * (helper 97: a listener, a connection and ~270 KB of DMB per request, any uid).
 * SO_PASSRIGHTS is Linux 6.16's; older kernels ignore it (returns -ENOPROTOOPT). */
int manager_refuse_rights(int fd);
int client_handle_unlisten(Client *c, const struct smc_ctl_unlisten *req);
/* LISTEN_DEPOSIT (ctl-proto.h, v5): keep @chan, the client end of a listener's
 * accept channel, for the LISTEN of the process its listening socket @tcp goes to.
 * Takes both fds (closed or kept). Returns 0, or -errno when the client must go. */
int client_handle_listen_deposit(Client *c, const struct smc_ctl_listen_deposit *req, int chan, int tcp);
Listener *listener_free(Listener *l);
void listener_on_channel_event(Listener *l, uint32_t events); /* (epoll events of our end) */
/* Nothing accepted from @l for LISTENER_STALL_USEC with @queued (listener_queued())
 * connections queued to it (its holders do not accept from it any more): new
 * connections go over TCP. */
bool listener_stalled(Listener *l, uint64_t queued);
/* The owner client is gone (died): keep @l, ownerless, until its channel hangs up. */
void listener_orphan(Listener *l);
/* @c, of @l's uid, takes over the ownerless @l (no-op if @l has an owner). */
void listener_adopt(Listener *l, Client *c);
/* The last copy of @e's app fd is gone (HUP on its Y copy): close @e as TCP closes a
 * socket at its last close (conn.c). */
void endpoint_on_hold_hup(Endpoint *e);
/* The SMC listener a CONNECT to @dst from network namespace @netns reaches (one of
 * several SO_REUSEPORT ones in turn), or NULL: only listeners of that namespace, as
 * TCP's SYN only finds those (a client in another container reached a server that
 * listened in another namespace on the same port, where TCP was refused: 2026-12-06);
 * in a namespace other than smcd's, a wildcard listener matches loopback and the
 * namespace's IPv4 addresses, as the connecting socket @tfd (borrowed; -1: loopback
 * only) finds them (smcd_sock_ns_v4()). The namespace is @cookie
 * (SO_NETNS_COOKIE, one system call on the client's socket) if not 0, else @netns
 * (the nsfs inode: smcd_sock_netns(), smcd_pid_netns()). */
Listener *manager_find_listener(Manager *m, const struct smc_ctl_addr *dst, uint64_t cookie, uint64_t netns,
                                int tfd);
/* Whether a CONNECT to @dst from the namespace (@cookie, else @netns) of the TCP
 * socket @tfd (borrowed; -1 unknown) may reach an SMC listener of another network
 * namespace of this host: one bound to @dst, or a wildcard one in a namespace that
 * has @dst (smcd's own: netlink's addresses; another: IPv4 ones at its LISTEN,
 * Listener.ns_v4). Never for loopback or wildcard destinations, nor for one of the
 * connecting namespace's own addresses. Only a hint: the handshake on the real TCP
 * connection decides (smcr_cross_netns()). */
/* SMC-D between two network namespaces (smcr.c, --cross-netns): the client side of a
 * CLC handshake got an ACCEPT naming a server handshake of this smcd, for listener
 * @listener_id (of @group: if it went meanwhile, another listener of the group takes
 * the connection, listener_group_pick()). Sets the connection up as a local one
 * (conn.c conn_make()): NEW_CONN to the listener with the server's view @s_local / @s_peer (the addresses of its
 * end of the TCP connection), CONNECT_REPLY mode SMCD (seq @seq) to client @c with
 * @c_local / @c_peer; @sndbuf / @rcvbuf as in CONNECT (bytes, 0 = not set). Returns
 * 0 with the server endpoint's id in *@ret_server_ep, a fallback reason (> 0:
 * nothing sent; DECLINE and answer TCP), or -errno if the reply could not be sent
 * (the client's endpoint is aborted with it; the listener got its end: the id is
 * set then too). */
int conn_make_netns(Client *c, uint32_t seq, uint32_t sndbuf, uint32_t rcvbuf, uint64_t listener_id,
                    const ListenerGroup *group, const struct smc_ctl_addr *c_local, const struct smc_ctl_addr *c_peer,
                    const struct smc_ctl_addr *s_local, const struct smc_ctl_addr *s_peer, uint64_t *ret_server_ep);
/* The connection of endpoint @ep_id, if it is still open, keeps @fd (taken: closed
 * with it, or now if the endpoint is gone): the idle TCP socket of a connection
 * between namespaces. */
void conn_keep_tcp(Manager *m, uint64_t ep_id, int fd);
bool manager_listener_elsewhere(Manager *m, const struct smc_ctl_addr *dst, uint64_t cookie, uint64_t netns,
                                int tfd);
/* The live listener with id @id, or NULL if it is gone. */
Listener *manager_get_listener(Manager *m, uint64_t id);

/* What makes listeners members of one SO_REUSEPORT group, as far as smcd can tell:
 * the address and port they are bound to, their network namespace and uid (the
 * kernel puts only sockets of one uid into a group, and two listeners bound to one
 * address and port in one namespace are of one group or one socket), and the device
 * they are bound to (SO_BINDTODEVICE, as read at LISTEN). */
struct ListenerGroup {
        struct smc_ctl_addr addr;
        uint64_t netns, netns_cookie;
        uid_t uid;
        bool v6only;
        char bound_dev[16]; /* SO_BINDTODEVICE */
};
void listener_group_of(const Listener *l, ListenerGroup *g);
/* Another listener of group @g for a connection queued to one that went (its
 * UNLISTEN, or gone during an SMC-R or cross-namespace handshake): one in a port
 * (not retired), of ctl version >= @min_version, in turn (the port's round robin),
 * preferring one whose queue is neither full nor stalled (listener_stalled()); NULL
 * if none. As the kernel moves a closed SO_REUSEPORT listener's queued connections
 * to another member (net.ipv4.tcp_migrate_req=1), whatever its backlog. */
Listener *listener_group_pick(Manager *m, const ListenerGroup *g, uint16_t min_version);
/* Send @msg (restamped for @l's version) with @nfds @fds (borrowed) on @l's accept
 * channel, also beyond its backlog (a hand-over: its channel's send buffer grows to
 * hold one more). Counts it in l->n_sent. Returns 0 or -errno from sending. */
int listener_send(Listener *l, union smc_ctl_msg *msg, const int *fds, size_t nfds);
/* NEW_CONNs on @l's channel not yet received by an accepter (one SIOCOUTQ). */
uint64_t listener_queued(Listener *l);
/* listener_queued(@l) >= its backlog + 1. */
bool listener_queue_full(Listener *l);

int client_handle_connect(Client *c, const struct smc_ctl_connect *req, int fd);
/* Answer a CONNECT with TCP, reason @reason, without looking further (counted as a
 * client fallback, and a server one when a local SMC listener takes it). Returns 0
 * or a negative errno from sending. */
int client_reply_fallback(Client *c, const struct smc_ctl_connect *req, int fd, uint32_t reason);
/* @c (may be NULL) gave up an endpoint or a listener (closed, or taken over by an
 * adopter): a control connection admitted beyond max_clients_per_uid that holds
 * nothing any more counts as pending again (UidUsage.clients_pending), so that
 * adopting and closing cannot pile up connections beyond the limit. */
void client_owned_less(Client *c);
uint64_t manager_new_endpoint_id(Manager *m);
uint32_t uid_check(Manager *m, uid_t uid, uint64_t eps, uint64_t bytes);
void uid_account(Manager *m, uid_t uid, int64_t eps, int64_t bytes);
int client_handle_close(Client *c, const struct smc_ctl_close *req);
/* ADOPT (conn.c): hand both buffers of an open SMC-D endpoint of the client's uid to
 * a process image that inherited it over execve(). Returns 0 (also after an ERROR
 * reply) or a negative errno from sending (the client is dropped). */
int client_handle_adopt(Client *c, const struct smc_ctl_adopt *req);
/* ADOPT_FD (conn.c): the same for the SMC-D endpoint whose X is @fd (received by the
 * client's process over a unix socket); takes @fd. Returns as client_handle_adopt(). */
int client_handle_adopt_fd(Client *c, const struct smc_ctl_adopt_fd *req, int fd);
/* REQUEUE (conn.c, ctl-proto.h): the SMC connection @req->conn_id, queued on the
 * channel of @c's listener @req->listener_id when @c gave it up (UNLISTEN), goes to
 * another listener of its group (listener_group_pick()); @x and @y (taken) must be
 * the X and Y of its NEW_CONN (SMC-D: X is checked, Y not used; SMC-R: both).
 * Replies OK or ERROR (-ENOENT, -EINVAL, -EAGAIN). Returns 0 or a negative errno
 * from sending (the client is dropped). */
int client_handle_requeue(Client *c, const struct smc_ctl_requeue *req, int x, int y);
/* Initialize @msg as a message of @type (CONNECT_REPLY, NEW_CONN, ADOPT_REPLY) with
 * @seq for endpoint @e: its id, @mode (SMC_CTL_MODE_*), smcd's tunables now and its
 * addresses; buffers and fds are the caller's to add. */
void endpoint_conn_msg(Manager *m, union smc_ctl_msg *msg, uint16_t type, uint32_t seq, const Endpoint *e,
                       uint32_t mode);
/* REREG (conn.c): an SMC-D endpoint set up by an earlier smcd, re-registered by its
 * process after a restart; listed and counted from now on, joined with its peer
 * endpoint when that one re-registers too (matching DMB tokens). Returns 0 (also
 * after an ERROR reply) or a negative errno from sending (the client is dropped). */
int client_handle_rereg(Client *c, const struct smc_ctl_rereg *req);
/* REREG_DONE (ctl-proto.h): end the loaded endpoints of @c's process that it did not
 * re-register (closed while no smcd heard it). No reply; ERROR -EPROTO for another
 * instance. Returns 0 or a negative errno from sending. */
int client_handle_rereg_done(Client *c, const struct smc_ctl_rereg_done *req);
/* At start, before the control socket is served: read the endpoint table an earlier
 * smcd left in the runtime directory (eptable.h), restore the endpoints whose process
 * still runs (listed and counted at once; each closes when that process exits, or as
 * any restored endpoint once its process re-registered it), and install a new table
 * with them. Failures are logged; smcd runs on without the table. */
void conn_load_table(Manager *m);
/* The process of @pw exited: close its loaded endpoints (as deaths), free @pw. */
void proc_watch_on_exit(ProcWatch *pw, Manager *m);
/* A fresh random value (SipHash of a counter under the id key), never 0. */
uint64_t manager_random_u64(Manager *m);
/* Close endpoint @e (owned by a client). @died: its owner died, so unless it closed
 * it itself, mark CLOSED (nothing unread in its rx DMB) or ABORT (data unread) in
 * both DMBs, and count it aborted accordingly (@aborted is ignored). Releases the
 * connection when both ends are closed. */
void endpoint_close(Manager *m, Endpoint *e, bool aborted, bool died);
/* Free a connection at shutdown without releasing its buffers (the pool goes), and
 * the tombs. */
void conn_free_all(Manager *m);
int conn_measure_truesize(size_t *ret);
