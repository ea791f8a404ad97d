/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * SMC-R in smcd: connections to peers on other hosts over RoCE (../shared/smc-wire-spec.md).
 *
 * smcd owns the RoCE devices (roce.h), the link groups and their links (one RC QP
 * each), and the RMBs and send buffers of every SMC-R connection (memfds from the
 * pool, registered as MRs and mapped into the client exactly as an SMC-D DMB is).
 * For the client the connection looks like SMC-D with smcd as its peer (dmb.h):
 *
 *   client A: X_a (app fd), Y_s, RMB (rx ring: the remote peer RDMA-writes into its
 *             data area), send buffer (tx ring: A writes, smcd RDMA-writes from it)
 *   smcd:     Y_a (rings A when a CDC moved the RMB's producer cursor; drains A's
 *             plug bytes when send-buffer space is freed), X_s (A's doorbell for new
 *             send-buffer data; smcd plugs it to learn when A consumed RMB data)
 *
 * So smcd *is* on the SMC-R data path: a doorbell from A makes it post the RDMA
 * WRITEs and the CDC for the new bytes; a received CDC makes it publish the peer's
 * producer cursor into A's RMB header and the peer's consumer cursor into the send
 * buffer's consumer cursor (when the CDC send completes), and send consumer-cursor
 * updates by the RFC 7609 rule (wire spec 4.4).
 *
 * The handshake runs in smcd on a dup of the application's TCP socket (SMCR control
 * message): the SMC TCP option (tcpopt.h) must have been exchanged, then CLC
 * Proposal / Accept / Confirm / Decline (SMC-R v2 when both sides have the UEID,
 * else v1 with the IP-prefix check), first contact with LLC CONFIRM LINK or link-group
 * reuse with LLC CONFIRM RKEY. Only bytes of CLC messages are ever read from the
 * socket (header peeked, then exactly the announced length).
 *
 * Single-threaded: the event loop's thread.
 */

#include <stdbool.h>
#include <stdint.h>

#include "ctl-proto.h"

typedef struct Manager Manager;
typedef struct Client Client;
typedef struct Endpoint Endpoint;
typedef struct SmcrManager SmcrManager;
typedef struct SmcrConn SmcrConn;

/* Open the RoCE devices (all active RoCE ports, or only @devices, a NULL-terminated
 * list of "name" or "name:port") and the SMC TCP option program. A host without RDMA
 * devices or without BPF is not an error: SMC-R is then unavailable (*ret is still
 * set; smcr_why_unavailable() says why). Returns 0 or -ENOMEM. */
int smcr_new(Manager *m, char **devices, SmcrManager **ret);
/* Abort every SMC-R connection, free link groups, devices, the TCP option program.
 * NULL ok. Returns NULL. */
/* smcd is exiting: tell the peer of every link group that it ends now (LLC DELETE
 * LINK ALL, reason program-initiated termination; orderly when it has no connections),
 * before the connections are freed (their abort CDCs follow). smcr_free() then waits
 * SMCR_EXIT_DRAIN_USEC (200 ms) for the sends. A message that finds the send queue
 * full stays queued and is lost: the peer then notices by TEST LINK. */
void smcr_exit_notify(SmcrManager *sm);
SmcrManager *smcr_free(SmcrManager *sm);
/* The number of CLC handshakes running (either role). NULL ok (0). */
unsigned smcr_handshakes(const SmcrManager *sm);
/* NULL if SMC-R can be used, else a static text why not. */
const char *smcr_why_unavailable(const SmcrManager *sm);

/* CONNECT (v3) to a destination without a local SMC listener, with the client's TCP
 * socket @fd (borrowed): if SMC-R is possible (@ism: if SMC-D between namespaces is,
 * smcr_cross_netns()), mark @fd for the SMC TCP option and return 0; else a reason
 * (> 0): the caller then falls back with PEERNOSMC (no SMC listener here, and SMC-R
 * cannot be tried). */
int smcr_prepare_connect(SmcrManager *sm, const struct smc_ctl_addr *src, int fd, bool ism);
/* LISTEN: mark the listening socket @fd (borrowed), when SMC-R or SMC-D between
 * namespaces can be used. Returns true if marked: the library then hands each TCP
 * connection it accepts on it to smcd (SMCR, role server). */
bool smcr_mark_listener(SmcrManager *sm, int fd);
/* Whether SMC-D between the network namespaces of this host is on: --cross-netns
 * and the TCP option program loaded. NULL ok (false). The handshake is the CLC one
 * (wire spec 2.3, 2.5: SMC-D v1 with this smcd's own ISM GID), on the real TCP
 * connection, whose two ends are both this smcd's clients: the client's side makes
 * the connection (conn_setup_netns(), manager.h) when the server's ACCEPT names the
 * DMB token of a server handshake running here. */
bool smcr_cross_netns(const SmcrManager *sm);

/* The SMCR request of client @c with the connected TCP socket @fd (taken): runs the
 * handshake asynchronously and answers with CONNECT_REPLY (mode SMCR or TCP) or
 * ERROR. Returns 0, or a negative errno if the client must be disconnected. */
int client_handle_smcr(Client *c, const struct smc_ctl_smcr *req, int fd);

/* The client closed endpoint @e (CLOSE; @aborted with SMC_CTL_CLOSE_ABORT) or died
 * (@died). Called by endpoint_close() for SMC-R endpoints. */
void smcr_endpoint_close(Manager *m, Endpoint *e, bool aborted, bool died);
/* smcd exits: abort the SMC-R connection @c (its client sees ECONNRESET; the peer
 * gets an abort CDC if the link still works) and free it. */
void smcr_conn_free_at_exit(SmcrConn *c);

/* What `smcctl connections` shows of an SMC-R endpoint. */
typedef struct SmcrEndpointInfo {
        const char *state;      /* "open", "peer-done-writing", "closed-by-peer", ... */
        uint32_t sndbuf, rmb;   /* ring bytes */
        uint32_t peer_rmb;
        uint64_t bytes_tx, bytes_rx;
        uint32_t lgr_id;        /* 0 once the link group is gone */
        const char *device;     /* RoCE device, NULL once the link group is gone */
} SmcrEndpointInfo;
void smcr_endpoint_info(const Endpoint *e, SmcrEndpointInfo *ret);

/* Client @c goes away: cancel its handshakes in progress (answering nobody). */
void smcr_client_gone(Client *c);
/* REQUEUE of an SMC-R server endpoint @e (conn.c client_handle_requeue()): is it an
 * active one whose NEW_CONN went to listener @listener_id, with @x and @y (borrowed)
 * the X and Y that NEW_CONN carried? Returns 0, -ENOENT or -EINVAL. */
int smcr_requeue_check(const Endpoint *e, uint64_t listener_id, int x, int y);
/* Send @e's NEW_CONN again, with @x and @y (borrowed) and both memfds, on listener
 * @to's channel; @e then belongs to @to and its owner. Returns 0, -ENOENT (@to has no
 * owner) or -errno from sending (-EAGAIN: its channel is full). */
int smcr_requeue_send(Endpoint *e, int x, int y, Listener *to);

/* One link group as `smcctl linkgroups` shows it (linkgroups-bus.c has the schema). */
typedef struct SmcrLgrInfo {
        uint32_t id;
        bool server;              /* role: created by the server side of a first contact */
        uint8_t version;          /* CLC version of the first contact: 1 or 2 */
        uint8_t peer_id[8];       /* the peer's SMC peer id (system id) */
        const char *device;       /* local RoCE device of its first link (valid until
                                   * the loop runs again) */
        uint8_t port;
        uint8_t peer_gid[16];     /* the peer's GID on its first link */
        const char *type;         /* "single", "symmetric", "asymmetric-local" */
        unsigned conns;
        unsigned max_conns;
        unsigned max_links;       /* negotiated */
        unsigned n_links;
        struct {
                const char *device;       /* local RoCE device */
                uint8_t port;
                const char *netdev;       /* its netdev */
                uint8_t local_gid[16], peer_gid[16];
                uint32_t local_qp, peer_qp;
                uint8_t link_num;
                const char *state;        /* "active", "activating", "deleting" */
                unsigned conns;           /* connections using it */
                uint32_t max_inline;      /* bytes of inline data the link's QP got */
        } links[2];
} SmcrLgrInfo;

/* Links (of live link groups) on RDMA device @device port @port. */
unsigned smcr_links_on(const SmcrManager *sm, const char *device, uint8_t port);

/* Fill up to @max entries of @ret with the live link groups; returns how many exist. */
size_t smcr_get_lgrs(const SmcrManager *sm, SmcrLgrInfo *ret, size_t max);
