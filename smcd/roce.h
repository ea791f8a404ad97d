/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * The RoCE verbs layer of smcd (rdma-core libibverbs): an opened RDMA device port with
 * one protection domain, memory regions, and links. A link is one RC queue pair with
 * its own completion queue, fed to the sd-event loop through the device's completion
 * channel, a ring of receive buffers kept posted, and a fixed set of send slots.
 * The SMC rules it follows are in ../shared/smc-wire-spec.md section 7:
 *  - QP attributes: RC, access LOCAL_WRITE | REMOTE_WRITE, path MTU = min(local, peer),
 *    GRH to the peer GID with hop limit 1 (RoCE v2), max_rd_atomic 1, ack timeout 15,
 *    retry count 7, RNR retry 7, min RNR timer 5.
 *  - ROCE_RECV_WRS (48) receive WRs of ROCE_RECV_BUF_LEN bytes are posted at all times
 *    (reposted as soon as the recv callback returns).
 *  - ROCE_SEND_SLOTS (16) SEND slots of 48 bytes (44-byte messages); every SEND is
 *    SIGNALED | SOLICITED, with IBV_SEND_INLINE when the caller allows it and the
 *    message fits the max_inline_data the QP got (seed 002). RDMA WRITEs are posted
 *    unsignaled and must be followed by a SEND on the same link (RC ordering makes the
 *    SEND's completion cover them).
 *  - A work completion with an error status (other than the flushes that follow it)
 *    marks the link failed: the failed callback runs once, later receive completions
 *    are dropped (SENDs are still reported through send_done).
 *  - soft-RoCE (rxe) treats retry count 7 as infinite, like RNR retry 7: SENDs to a
 *    peer that stopped answering never complete with an error there; the owner's
 *    timers (TEST LINK) must notice and call roce_link_set_error().
 *
 * Optionally (roce_dev_set_cq_poll()) the CQs of a device's links are polled by one
 * thread of that device instead of going through the completion channel in the event
 * loop: the thread spins on them for a while after each completion and sleeps on a
 * completion channel of its own when idle; it only moves the completions to the event
 * loop (a lock-free ring and an eventfd), where they are handled by the same code:
 * every callback and rule below is the same in both modes.
 *
 * Single-threaded API: every function is called from the sd-event loop's thread and
 * every callback runs there. Library-style: returns -errno, never logs (the caller
 * logs), never exits.
 */

#include <stdbool.h>
#include <stdint.h>
#include <infiniband/verbs.h>
#include <systemd/sd-event.h>

#define ROCE_RECV_WRS 48
#define ROCE_RECV_BUF_LEN 8192 /* bytes; >= 44, room for v2 LLC messages */
#define ROCE_SEND_SLOTS 16
#define ROCE_SEND_SLOT_LEN 48  /* bytes per slot; messages are <= 44 */
#define ROCE_SEND_BIG_LEN 8192 /* bytes: the one big slot, for v2 LLC messages (5.1) */
#define ROCE_WRITES_PER_SEND 4 /* RDMA WRITEs allowed before each SEND (SQ sizing) */
#define ROCE_CQ_SPIN_USEC 50   /* default spin of the CQ polling thread, microseconds */
#define ROCE_CQ_SPIN_MAX_USEC 1000000

typedef struct RoceDev RoceDev;
typedef struct RoceLink RoceLink;

/* Open RDMA device @name (e.g. "rxe0"), port @port (1-based): context, PD, completion
 * channel (its fd watched in @event). Returns 0 and *ret, -ENODEV (no such device or
 * port), -ENOTSUP (port not Ethernet / no RoCE v2 GID), -ENOMEM, or the verbs errno. */
int roce_dev_open(sd_event *event, const char *name, uint8_t port, RoceDev **ret);
/* Free a device whose links are all freed; NULL is ok. Returns NULL. Links still on it
 * are freed too (without callbacks). May be called from inside a link callback of this
 * device: no further callback runs, the memory is released when the callback returns. */
RoceDev *roce_dev_close(RoceDev *d);
/* How the CQs of links created on @d from now on are served (links that exist keep
 * theirs): @thread false = through the device's completion channel in the event loop
 * (the default); true = by the device's polling thread (started with the first such
 * link, joined when the last one is freed or the device closed), which after its last
 * completion polls for @spin_usec microseconds (0..ROCE_CQ_SPIN_MAX_USEC; the default
 * is ROCE_CQ_SPIN_USEC; it burns a CPU meanwhile) before it arms the CQs and sleeps. A
 * new @spin_usec applies to a running thread at once. Returns 0, -EINVAL (@d NULL or
 * @spin_usec out of range) or -ENODEV (the device is being closed). */
int roce_dev_set_cq_poll(RoceDev *d, bool thread, uint32_t spin_usec);
/* Whether @d's polling thread runs now (tests, diagnostics). */
bool roce_dev_cq_poll_running(const RoceDev *d);
const char *roce_dev_name(const RoceDev *d);
uint8_t roce_dev_port(const RoceDev *d);
struct ibv_pd *roce_dev_pd(RoceDev *d);
/* Port state now (IBV_PORT_ACTIVE etc.), queried from the device; -errno on error. */
int roce_dev_port_state(RoceDev *d);
/* Active MTU of the port as the IB enum (IBV_MTU_256 = 1 .. IBV_MTU_4096 = 5). */
uint8_t roce_dev_mtu(const RoceDev *d);
/* The RoCE v2 GID of the port for IPv4 address @ipv4 (network order, the address of
 * the netdev the TCP connection uses): *gid = ::ffff:a.b.c.d and *gid_index its table
 * index; the MAC of that GID's netdev in @mac (may be NULL). Returns 0 or -ENOENT
 * (-ENOMEM or the verbs errno when the GID table cannot be read). */
int roce_dev_gid_for_ipv4(RoceDev *d, const uint8_t ipv4[4], uint8_t gid[16], int *gid_index, uint8_t mac[6]);

/* Register [@addr, @addr + @len) in the device's PD: LOCAL_WRITE, plus REMOTE_WRITE
 * if @remote_write (an RMB). The RDMA address of a byte is its virtual address (the
 * MR iova). Returns 0 and *ret (deregister with ibv_dereg_mr) or -errno. */
int roce_mr_reg(RoceDev *d, void *addr, size_t len, bool remote_write, struct ibv_mr **ret);

struct roce_link_ops {
        /* a received SEND of @len bytes (a CDC or LLC message); @buf is valid during
         * the call only; the receive buffer is reposted after it returns. */
        void (*recv)(void *userdata, const uint8_t *buf, uint32_t len);
        /* a SEND posted with @wr_id completed (IBV_WC_SUCCESS) or was flushed /
         * failed (@status = its ibv_wc_status). Its slot is free again. Every posted
         * SEND gets exactly one, in posting order, also after failed (the flushes),
         * unless the link is freed first. */
        void (*send_done)(void *userdata, uint64_t wr_id, enum ibv_wc_status status);
        /* the link failed (first error completion, or the QP went to ERR): called
         * once; later receive completions of this link are dropped. The link must
         * then be freed by the owner (also allowed from inside this callback, see
         * roce_link_free()). */
        void (*failed)(void *userdata, enum ibv_wc_status status);
};

/* Create a link on @d using GID table entry @gid_index: a CQ, an RC QP moved to INIT,
 * a random 24-bit initial PSN, ROCE_RECV_WRS receives posted. @inline_want: bytes of
 * inline data asked for at creation (0 = none asked); the QP's granted value is
 * roce_link_max_inline(). Its CQ is served as roce_dev_set_cq_poll() last said (may
 * start the device's polling thread). Returns 0 and *ret, or -errno. */
int roce_link_new(RoceDev *d, int gid_index, uint32_t inline_want, const struct roce_link_ops *ops,
                  void *userdata, RoceLink **ret);
/* QP INIT -> RTR toward the peer QP @dqpn with initial PSN @dpsn at GID @dgid (RoCE v2),
 * @mtu the IB enum (min of both ends). Returns 0 or -errno. */
int roce_link_rtr(RoceLink *l, uint32_t dqpn, uint32_t dpsn, const uint8_t dgid[16], uint8_t mtu);
/* Give @l other callbacks and userdata, from its next completion on (also from inside
 * one of its callbacks). Returns 0 or -EINVAL (NULL, or an op missing). */
int roce_link_set_ops(RoceLink *l, const struct roce_link_ops *ops, void *userdata);
/* QP RTR -> RTS (our send PSN = roce_link_psn()). Returns 0 or -errno. */
int roce_link_rts(RoceLink *l);
/* Move the QP to ERR (flushes posted WRs: send_done with IBV_WC_WR_FLUSH_ERR for each
 * outstanding SEND, from the event loop later). */
void roce_link_set_error(RoceLink *l);
/* QP to ERR if needed and free everything, without callbacks. NULL ok. Returns NULL.
 * May be called from inside any callback of this link: no further callback runs and
 * the memory is released when the callback returns. */
RoceLink *roce_link_free(RoceLink *l);

uint32_t roce_link_qpn(const RoceLink *l);
uint32_t roce_link_psn(const RoceLink *l);        /* our initial send PSN (24 bits) */
uint32_t roce_link_max_inline(const RoceLink *l); /* bytes granted at QP creation */
unsigned roce_link_send_slots_free(const RoceLink *l);

/* Post a SEND of @len (<= ROCE_SEND_BIG_LEN) bytes copied into a free slot, SIGNALED |
 * SOLICITED, INLINE if @try_inline and @len <= max_inline (then *inlined = true).
 * A message longer than ROCE_SEND_SLOT_LEN (a v2 LLC message) takes the link's one
 * big slot, which roce_link_send_slots_free() does not count. Returns 0, -EINVAL (too
 * long), -EAGAIN (no free slot, or the send queue is full: retry after a send_done),
 * -ENOTCONN (link failed / not RTS), or the verbs errno. */
int roce_link_send(RoceLink *l, const void *msg, uint32_t len, uint64_t wr_id, bool try_inline, bool *inlined);
/* Post an unsignaled RDMA WRITE of the @nsge local pieces (lkeys of MRs of this
 * device) to @raddr/@rkey of the peer. At most ROCE_WRITES_PER_SEND writes may precede
 * each roce_link_send(); at most 2 SGEs. Returns 0, -EAGAIN (send queue full),
 * -ENOTCONN, -EINVAL (not 1..2 SGEs, an empty SGE, or a write beyond
 * ROCE_WRITES_PER_SEND since the last SEND), or the verbs errno. */
int roce_link_write(RoceLink *l, const struct ibv_sge *sge, int nsge, uint64_t raddr, uint32_t rkey);
