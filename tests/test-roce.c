/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-roce: smcd/roce.c (the RoCE verbs layer) against two real RDMA devices in one
 * process, as two "hosts" (soft-RoCE rxe0 / rxe1 on the two ends of a veth pair in the
 * VM test tests/test-roce-vm.sh). One sd-event loop drives both devices' completion
 * channels.
 *
 *   test-roce [DEV_A IPV4_A DEV_B IPV4_B]      default rxe0 10.77.0.1 rxe1 10.77.0.2
 *
 * SMCD_TEST_CQ_POLL=thread runs every check with the links' CQs served by the devices'
 * polling threads (roce_dev_set_cq_poll(); device A spins ROCE_CQ_SPIN_USEC, B 0, so B's
 * thread arms and sleeps after every completion), plus the thread's life cycle (lazy
 * start, join when the last polled link goes, also from inside a callback, restart,
 * links of both modes on one device). The default (event) run also measures a SEND
 * ping-pong over link pairs in event mode vs thread mode (both ends spinning, one end
 * spinning, spin 0) and prints the ratios.
 *
 * Exit 0 all checks passed, 1 a check failed, 77 the devices are not there (skip).
 * SMCD_TEST_SEED=N repeats a run's random data. */

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "roce.h"

#define N_SENDS 1000
#define MSG_LEN 44
#define N_CHUNKS 300
#define SRC_LEN (64u * 1024)   /* the sender's ring (memfd) */
#define RMB_LEN (48u * 1024)   /* the receiver's RMB (memfd): another size, other wraps */
#define CHUNK_MAX 20000u

enum mode {
        MODE_SENDS,  /* numbered 44-byte messages, checked in order */
        MODE_WRITES, /* a SEND announcing RDMA-written data, checked against the copy */
        MODE_OTHER,  /* just counted */
        MODE_PINGPONG, /* answered at once (server), or the next ping sent (client) */
};

typedef struct Side {
        const char *name;
        const char *ip_str;
        uint8_t ip[4];
        RoceDev *dev;
        RoceLink *link;
        uint8_t gid[16];
        int gid_index;
        uint8_t mac[6];
        enum mode mode;
        /* receive side */
        uint32_t recv_expect;   /* next message number */
        unsigned recvs, recv_bad;
        /* send side */
        uint32_t sent;          /* messages posted */
        uint64_t done_expect;   /* next wr_id of send_done */
        unsigned done_ok, done_err, done_order_bad;
        unsigned inlined, not_inlined;
        unsigned failed_calls;
        enum ibv_wc_status failed_status;
        bool free_in_recv;      /* free the link from inside the first recv callback */
        bool free_in_failed;    /* ... from inside the failed callback */
        RoceDev **close_in_recv; /* close this device from inside the first recv callback */
        bool pp_client;         /* MODE_PINGPONG: sends the pings */
        unsigned pp_target, pp_err; /* MODE_PINGPONG: round trips to make, send errors */
        unsigned callbacks_after_free;
        bool freed;
} Side;

static sd_event *event;
static bool cq_thread; /* SMCD_TEST_CQ_POLL=thread */
static Side A = { .name = "A" }, B = { .name = "B" };
static uint64_t rng_state;

static uint64_t rnd(void) {
        /* xorshift64* */
        rng_state ^= rng_state >> 12;
        rng_state ^= rng_state << 25;
        rng_state ^= rng_state >> 27;
        return rng_state * UINT64_C(2685821657736338717);
}

static uint64_t now_usec(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000u + (uint64_t) ts.tv_nsec / 1000u;
}

/* The CQ mode of this run for a device just opened: the polling thread in a thread
 * run (A's devices spin the default, B's 0: arm and sleep after every completion). */
static int set_mode(RoceDev *d, bool side_b) {
        int r = roce_dev_set_cq_poll(d, cq_thread, side_b ? 0 : ROCE_CQ_SPIN_USEC);

        CHECK(r == 0, "roce_dev_set_cq_poll: %s", strerror(-r));
        return r;
}

/* ---- the write phase's bookkeeping ---- */

struct chunk {
        uint32_t seq, rmb_off, len;
        uint8_t *data;   /* what must be in the RMB */
        bool checked;
};

static struct {
        uint8_t *src, *rmb;             /* memfd mappings */
        struct ibv_mr *src_mr, *rmb_mr;
        struct chunk chunks[N_CHUNKS];
        uint64_t src_prod, src_released; /* bytes through the source ring */
        uint64_t rmb_prod, rmb_checked;  /* bytes through the RMB */
        uint32_t posted, checked, bad;
        unsigned two_sge, two_writes;
} W;

static void put32(uint8_t *p, uint32_t v) {
        memcpy(p, &v, 4);
}

static uint32_t get32(const uint8_t *p) {
        uint32_t v;

        memcpy(&v, p, 4);
        return v;
}

static void make_msg(uint8_t *m, const Side *s, uint32_t seq) {
        put32(m, seq);
        m[4] = (uint8_t) s->name[0];
        for (unsigned i = 5; i < MSG_LEN; i++)
                m[i] = (uint8_t) (seq * 31u + i * 7u + (uint8_t) s->name[0]);
}

static Side *peer_of(Side *s) {
        return s == &A ? &B : &A;
}

static void check_write_chunk(const uint8_t *buf, uint32_t len) {
        uint32_t seq = get32(buf + 1), off = get32(buf + 5), n = get32(buf + 9);
        struct chunk *c;
        uint32_t first;

        if (len != MSG_LEN || seq >= N_CHUNKS) {
                W.bad++;
                return;
        }
        c = &W.chunks[seq];
        if (seq != W.checked || c->checked || c->rmb_off != off || c->len != n) {
                fprintf(stderr, "write chunk %u: got seq %u off %u len %u, want seq %u off %u len %u\n", W.checked,
                        seq, off, n, c->seq, c->rmb_off, c->len);
                W.bad++;
                return;
        }
        first = n < RMB_LEN - off ? n : RMB_LEN - off;
        if (memcmp(W.rmb + off, c->data, first) != 0 || memcmp(W.rmb, c->data + first, n - first) != 0) {
                fprintf(stderr, "write chunk %u (off %u len %u): RMB bytes differ\n", seq, off, n);
                W.bad++;
        }
        c->checked = true;
        free(c->data);
        c->data = NULL;
        W.checked++;
        W.rmb_checked += n;
}

/* ---- callbacks ---- */

static void on_recv(void *userdata, const uint8_t *buf, uint32_t len) {
        Side *s = userdata;

        if (s->freed) {
                s->callbacks_after_free++;
                return;
        }
        s->recvs++;
        switch (s->mode) {
        case MODE_SENDS: {
                uint8_t want[MSG_LEN];

                make_msg(want, peer_of(s), s->recv_expect);
                if (len != MSG_LEN || memcmp(buf, want, MSG_LEN) != 0) {
                        if (s->recv_bad++ < 5)
                                fprintf(stderr, "%s: message %u: len %u, seq %u\n", s->name, s->recv_expect, len,
                                        len >= 4 ? get32(buf) : 0);
                }
                s->recv_expect++;
                break;
        }
        case MODE_WRITES:
                if (len == MSG_LEN && buf[0] == 'W')
                        check_write_chunk(buf, len);
                else if (!(len == MSG_LEN && buf[0] == 'X'))
                        W.bad++;
                break;
        case MODE_OTHER:
                break;
        case MODE_PINGPONG:
                if (!s->pp_client || s->recvs < s->pp_target) {
                        uint8_t m[MSG_LEN] = { 'P' };

                        if (roce_link_send(s->link, m, MSG_LEN, s->sent, true, NULL) == 0)
                                s->sent++;
                        else
                                s->pp_err++;
                }
                break;
        }
        if (s->free_in_recv) {
                s->free_in_recv = false;
                s->link = roce_link_free(s->link);
                s->freed = true;
        }
        if (s->close_in_recv) {
                *s->close_in_recv = roce_dev_close(*s->close_in_recv);
                s->close_in_recv = NULL;
                s->link = NULL; /* freed with its device */
                s->freed = true;
        }
}

static void on_send_done(void *userdata, uint64_t wr_id, enum ibv_wc_status status) {
        Side *s = userdata;

        if (s->freed) {
                s->callbacks_after_free++;
                return;
        }
        if (status == IBV_WC_SUCCESS)
                s->done_ok++;
        else
                s->done_err++;
        if (wr_id != s->done_expect && s->done_order_bad++ < 5)
                fprintf(stderr, "%s: send_done wr_id %llu, expected %llu\n", s->name, (unsigned long long) wr_id,
                        (unsigned long long) s->done_expect);
        s->done_expect = wr_id + 1;
        if (s->mode == MODE_WRITES && s == &A && wr_id >= 1000000 && wr_id - 1000000 < N_CHUNKS) {
                /* the chunk's source bytes may be reused now (RC: its WRITEs are done) */
                W.src_released += W.chunks[wr_id - 1000000].len;
        }
}

static void on_failed(void *userdata, enum ibv_wc_status status) {
        Side *s = userdata;

        if (s->freed) {
                s->callbacks_after_free++;
                return;
        }
        s->failed_calls++;
        s->failed_status = status;
        if (s->free_in_failed) {
                s->link = roce_link_free(s->link);
                s->freed = true;
        }
}

static const struct roce_link_ops ops = {
        .recv = on_recv,
        .send_done = on_send_done,
        .failed = on_failed,
};

/* Run the loop until @cond or @timeout_ms. Returns whether @cond held. */
static bool run_until(bool (*cond)(void), unsigned timeout_ms) {
        uint64_t end = now_usec() + (uint64_t) timeout_ms * 1000u;

        while (!cond()) {
                int r;

                if (now_usec() > end)
                        return false;
                r = sd_event_run(event, 100000);
                if (r < 0) {
                        fprintf(stderr, "sd_event_run: %s\n", strerror(-r));
                        return false;
                }
        }
        return true;
}

static void run_for(unsigned ms) {
        uint64_t end = now_usec() + (uint64_t) ms * 1000u;

        while (now_usec() < end)
                (void) sd_event_run(event, 20000);
}

/* ---- set-up ---- */

static int open_side(Side *s, const char *dev, const char *ip) {
        int r;

        s->ip_str = ip;
        if (inet_pton(AF_INET, ip, s->ip) != 1) {
                fprintf(stderr, "bad IPv4 address %s\n", ip);
                return -EINVAL;
        }
        r = roce_dev_open(event, dev, 1, &s->dev);
        if (r < 0) {
                fprintf(stderr, "roce_dev_open(%s): %s\n", dev, strerror(-r));
                return r;
        }
        set_mode(s->dev, s == &B);
        r = roce_dev_gid_for_ipv4(s->dev, s->ip, s->gid, &s->gid_index, s->mac);
        if (r < 0) {
                fprintf(stderr, "%s: no RoCE v2 GID for %s: %s\n", dev, ip, strerror(-r));
                return r;
        }
        printf("# %s: %s port %u state %d mtu %u, GID index %d for %s, MAC %02x:%02x:%02x:%02x:%02x:%02x\n", s->name,
               roce_dev_name(s->dev), roce_dev_port(s->dev), roce_dev_port_state(s->dev), 128u << roce_dev_mtu(s->dev),
               s->gid_index, ip, s->mac[0], s->mac[1], s->mac[2], s->mac[3], s->mac[4], s->mac[5]);
        return 0;
}

static int connect_links(RoceLink *la, RoceLink *lb) {
        uint8_t mtu = roce_dev_mtu(A.dev) < roce_dev_mtu(B.dev) ? roce_dev_mtu(A.dev) : roce_dev_mtu(B.dev);
        int r;

        r = roce_link_rtr(la, roce_link_qpn(lb), roce_link_psn(lb), B.gid, mtu);
        if (r < 0)
                return fprintf(stderr, "rtr A: %s\n", strerror(-r)), r;
        r = roce_link_rtr(lb, roce_link_qpn(la), roce_link_psn(la), A.gid, mtu);
        if (r < 0)
                return fprintf(stderr, "rtr B: %s\n", strerror(-r)), r;
        r = roce_link_rts(la);
        if (r < 0)
                return fprintf(stderr, "rts A: %s\n", strerror(-r)), r;
        r = roce_link_rts(lb);
        if (r < 0)
                return fprintf(stderr, "rts B: %s\n", strerror(-r)), r;
        return 0;
}

static void *memfd_buf(const char *name, size_t len) {
        int fd = memfd_create(name, MFD_CLOEXEC);
        void *p;

        if (fd < 0 || ftruncate(fd, (off_t) len) < 0) {
                perror("memfd");
                exit(1);
        }
        p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        if (p == MAP_FAILED) {
                perror("mmap");
                exit(1);
        }
        return p;
}

/* ---- phase: SENDs ---- */

/* post as many numbered messages of @s as the link takes; returns -errno on a hard error */
static int pump_sends(Side *s, uint32_t total) {
        while (s->sent < total) {
                uint8_t m[MSG_LEN];
                bool try_inline = (s->sent & 1) == 0, inl;
                int r;

                make_msg(m, s, s->sent);
                r = roce_link_send(s->link, m, MSG_LEN, s->sent, try_inline, &inl);
                if (r == -EAGAIN)
                        return 0;
                if (r < 0)
                        return r;
                if (inl != (try_inline && MSG_LEN <= roce_link_max_inline(s->link)))
                        fprintf(stderr, "%s: message %u: inlined %d with try_inline %d\n", s->name, s->sent, inl,
                                try_inline);
                if (inl)
                        s->inlined++;
                else
                        s->not_inlined++;
                s->sent++;
        }
        return 0;
}

static bool sends_done(void) {
        return A.done_ok + A.done_err >= N_SENDS && B.done_ok + B.done_err >= N_SENDS && A.recvs >= N_SENDS &&
               B.recvs >= N_SENDS;
}

static void phase_sends(void) {
        uint64_t t0 = now_usec(), end = t0 + 120000000u;
        int r = 0;

        while (!sends_done() && now_usec() < end) {
                r = pump_sends(&A, N_SENDS);
                if (r == 0)
                        r = pump_sends(&B, N_SENDS);
                if (r < 0)
                        break;
                (void) sd_event_run(event, 100000);
        }
        CHECK(r == 0, "post: %s", strerror(-r));
        CHECK(sends_done(), "A sent %u done %u recv %u, B sent %u done %u recv %u", A.sent, A.done_ok + A.done_err,
              A.recvs, B.sent, B.done_ok + B.done_err, B.recvs);
        for (Side *s = &A; s; s = s == &A ? &B : NULL) {
                CHECK(s->done_ok == N_SENDS && s->done_err == 0, "%s: send_done ok %u err %u", s->name, s->done_ok,
                      s->done_err);
                CHECK(s->done_order_bad == 0, "%s: send_done out of order %u times", s->name, s->done_order_bad);
                CHECK(s->recv_bad == 0 && s->recv_expect == N_SENDS, "%s: %u bad of %u received", s->name,
                      s->recv_bad, s->recvs);
                CHECK(s->inlined == N_SENDS / 2 && s->not_inlined == N_SENDS / 2, "%s: inlined %u, not %u",
                      s->name, s->inlined, s->not_inlined);
                CHECK(roce_link_send_slots_free(s->link) == ROCE_SEND_SLOTS, "%s: %u slots free", s->name,
                      roce_link_send_slots_free(s->link));
        }
        printf("ok - %u SENDs of %u bytes each way (half inline), in order, byte for byte, all send_done: %.1f ms\n",
               N_SENDS, MSG_LEN, (double) (now_usec() - t0) / 1000.0);
}

/* ---- phase: all 16 slots in flight ---- */

static bool eagain_done(void) {
        return A.done_ok + A.done_err >= A.sent && B.recvs >= A.sent;
}

static void phase_eagain(void) {
        uint32_t start = A.sent;
        uint8_t m[MSG_LEN];
        int r, posted = 0;

        for (int i = 0; i < ROCE_SEND_SLOTS; i++) {
                bool inl;

                make_msg(m, &A, A.sent);
                r = roce_link_send(A.link, m, MSG_LEN, A.sent, i & 1, &inl);
                if (r < 0) {
                        CHECK(r == 0, "send %d of 16: %s", i, strerror(-r));
                        break;
                }
                A.sent++;
                posted++;
        }
        CHECK(roce_link_send_slots_free(A.link) == 0, "%u slots free with 16 in flight",
              roce_link_send_slots_free(A.link));
        make_msg(m, &A, A.sent);
        r = roce_link_send(A.link, m, MSG_LEN, A.sent, false, NULL);
        CHECK(r == -EAGAIN, "17th send: %d", r);
        CHECK(run_until(eagain_done, 30000), "16 in flight: done %u of %u, received %u", A.done_ok + A.done_err,
              A.sent, B.recvs);
        CHECK(roce_link_send_slots_free(A.link) == ROCE_SEND_SLOTS, "%u slots free after", roce_link_send_slots_free(A.link));
        make_msg(m, &A, A.sent);
        r = roce_link_send(A.link, m, MSG_LEN, A.sent, false, NULL);
        CHECK(r == 0, "send after the slots came back: %d", r);
        if (r == 0)
                A.sent++;
        CHECK(run_until(eagain_done, 30000), "after -EAGAIN: done %u of %u", A.done_ok + A.done_err, A.sent);
        CHECK(A.done_err == 0 && A.done_order_bad == 0 && B.recv_bad == 0, "errors: send %u order %u recv %u",
              A.done_err, A.done_order_bad, B.recv_bad);
        printf("ok - 16 SENDs in flight, the 17th -EAGAIN, all %u completed and received in order (%d posted from %u)\n",
               A.sent - start, posted, start);
}

/* ---- phase: RDMA WRITEs into the peer's RMB, each followed by a SEND ---- */

/* post chunk W.posted: up to 2 WRITEs (remote wrap) of up to 2 SGEs (source wrap) + a SEND */
static int post_chunk(void) {
        struct chunk *c = &W.chunks[W.posted];
        uint32_t len = c->len, done = 0, roff = (uint32_t) (W.rmb_prod % RMB_LEN);
        uint64_t s = W.src_prod;
        uint8_t m[MSG_LEN] = { 'W' };
        int r, writes = 0;

        /* the source bytes: random, at the ring's producer position */
        for (uint32_t i = 0; i < len; i++) {
                uint8_t b = (uint8_t) rnd();

                W.src[(s + i) % SRC_LEN] = b;
                c->data[i] = b;
        }
        c->rmb_off = roff;
        while (done < len) {
                uint32_t piece = len - done < RMB_LEN - roff ? len - done : RMB_LEN - roff;
                uint32_t soff = (uint32_t) ((s + done) % SRC_LEN);
                uint32_t first = piece < SRC_LEN - soff ? piece : SRC_LEN - soff;
                struct ibv_sge sge[2] = {
                        { .addr = (uintptr_t) (W.src + soff), .length = first, .lkey = W.src_mr->lkey },
                        { .addr = (uintptr_t) W.src, .length = piece - first, .lkey = W.src_mr->lkey },
                };
                int nsge = piece > first ? 2 : 1;

                r = roce_link_write(A.link, sge, nsge, (uintptr_t) W.rmb_mr->addr + roff, W.rmb_mr->rkey);
                if (r < 0)
                        return r;
                if (nsge == 2)
                        W.two_sge++;
                writes++;
                done += piece;
                roff = (roff + piece) % RMB_LEN;
        }
        if (writes == 2)
                W.two_writes++;
        put32(m + 1, c->seq);
        put32(m + 5, c->rmb_off);
        put32(m + 9, len);
        r = roce_link_send(A.link, m, MSG_LEN, 1000000 + c->seq, true, NULL);
        if (r < 0)
                return r;
        A.sent++;
        W.src_prod += len;
        W.rmb_prod += len;
        W.posted++;
        return 0;
}

static void phase_writes(void) {
        uint64_t t0 = now_usec(), end = t0 + 180000000u, bytes = 0;
        struct ibv_sge sge;
        uint8_t m[MSG_LEN] = { 'X' };
        int r;

        W.src = memfd_buf("test-roce-src", SRC_LEN);
        W.rmb = memfd_buf("test-roce-rmb", RMB_LEN);
        r = roce_mr_reg(A.dev, W.src, SRC_LEN, false, &W.src_mr);
        CHECK(r == 0, "register the source ring: %s", strerror(-r));
        r = roce_mr_reg(B.dev, W.rmb, RMB_LEN, true, &W.rmb_mr);
        CHECK(r == 0, "register the RMB: %s", strerror(-r));
        if (!W.src_mr || !W.rmb_mr)
                return;
        CHECK(W.rmb_mr->addr == W.rmb, "MR iova is the address");
        A.mode = B.mode = MODE_WRITES;

        /* the WRITEs-per-SEND limit (sizes the send queue) */
        sge = (struct ibv_sge) { .addr = (uintptr_t) W.src, .length = 1, .lkey = W.src_mr->lkey };
        for (int i = 0; i < ROCE_WRITES_PER_SEND; i++) {
                r = roce_link_write(A.link, &sge, 1, (uintptr_t) W.rmb_mr->addr + RMB_LEN - 1, W.rmb_mr->rkey);
                CHECK(r == 0, "small write %d: %s", i, strerror(-r));
        }
        r = roce_link_write(A.link, &sge, 1, (uintptr_t) W.rmb_mr->addr, W.rmb_mr->rkey);
        CHECK(r == -EINVAL, "write %d before a SEND: %d", ROCE_WRITES_PER_SEND + 1, r);
        CHECK(roce_link_write(A.link, &sge, 3, (uintptr_t) W.rmb_mr->addr, W.rmb_mr->rkey) == -EINVAL, "3 SGEs");
        A.done_expect = 999999;
        r = roce_link_send(A.link, m, MSG_LEN, 999999, false, NULL);
        CHECK(r == 0, "SEND after %d writes: %s", ROCE_WRITES_PER_SEND, strerror(-r));
        A.sent++;

        for (uint32_t i = 0; i < N_CHUNKS; i++) {
                /* lengths from 1 byte to CHUNK_MAX, some exactly at the ring ends */
                uint32_t len = 1 + (uint32_t) (rnd() % CHUNK_MAX);

                if (i % 50 == 7)
                        len = RMB_LEN - (uint32_t) ((W.rmb_prod + bytes) % RMB_LEN);
                if (len > CHUNK_MAX)
                        len = CHUNK_MAX;
                W.chunks[i] = (struct chunk) { .seq = i, .len = len, .data = malloc(len) };
                if (!W.chunks[i].data) {
                        fprintf(stderr, "out of memory\n");
                        exit(1);
                }
                bytes += len;
        }
        bytes = 0;
        /* start the source ring somewhere else than the RMB so the wraps differ */
        W.src_prod = W.src_released = 12345;
        while ((W.checked < N_CHUNKS || W.src_released != W.src_prod) && now_usec() < end) {
                while (W.posted < N_CHUNKS) {
                        struct chunk *c = &W.chunks[W.posted];

                        /* flow control as SMC does: never overwrite unread RMB bytes or source
                         * bytes whose WRITE has not completed; a slot for the SEND */
                        if (W.rmb_prod - W.rmb_checked + c->len > RMB_LEN ||
                            W.src_prod - W.src_released + c->len > SRC_LEN || roce_link_send_slots_free(A.link) == 0)
                                break;
                        r = post_chunk();
                        if (r == -EAGAIN)
                                break;
                        if (r < 0) {
                                CHECK(r == 0, "chunk %u: %s", W.posted, strerror(-r));
                                goto out;
                        }
                        bytes += c->len;
                }
                (void) sd_event_run(event, 100000);
        }
out:
        CHECK(W.checked == N_CHUNKS && W.bad == 0, "write chunks checked %u of %u, bad %u", W.checked, N_CHUNKS, W.bad);
        CHECK(W.src_released == W.src_prod, "source ring: %llu released of %llu",
              (unsigned long long) W.src_released, (unsigned long long) W.src_prod);
        CHECK(A.done_err == 0 && A.done_order_bad == 0, "send_done errors %u, out of order %u", A.done_err,
              A.done_order_bad);
        CHECK(W.two_sge > 0 && W.two_writes > 0, "wraps: %u writes with 2 SGEs, %u chunks with 2 writes", W.two_sge,
              W.two_writes);
        printf("ok - %u RDMA WRITE chunks (%llu bytes, %u writes with 2 SGEs, %u chunks split in 2 writes) from a "
               "memfd ring into a memfd RMB, each checked after its SEND: %.1f ms\n",
               W.checked, (unsigned long long) bytes, W.two_sge, W.two_writes, (double) (now_usec() - t0) / 1000.0);
        A.mode = B.mode = MODE_OTHER;
}

/* ---- phase: freeing a link from inside its callbacks ---- */

static Side A2 = { .name = "a" }, B2 = { .name = "b" };

static bool free_in_recv_done(void) {
        return B2.freed && (A2.done_ok + A2.done_err >= A2.sent || A2.freed);
}

static bool a2_failed(void) {
        return A2.failed_calls > 0;
}

static void phase_free_in_callback(void) {
        uint8_t m[MSG_LEN] = { 0 };
        int r;

        A2.mode = B2.mode = MODE_OTHER;
        r = roce_link_new(A.dev, A.gid_index, 64, &ops, &A2, &A2.link);
        CHECK(r == 0, "link a: %s", strerror(-r));
        r = roce_link_new(B.dev, B.gid_index, 64, &ops, &B2, &B2.link);
        CHECK(r == 0, "link b: %s", strerror(-r));
        if (!A2.link || !B2.link)
                return;
        r = connect_links(A2.link, B2.link);
        CHECK(r == 0, "connect a-b: %s", strerror(-r));
        B2.free_in_recv = true;
        A2.free_in_failed = true;
        for (int i = 0; i < 8 && r == 0; i++) {
                r = roce_link_send(A2.link, m, MSG_LEN, (uint64_t) i, i & 1, NULL);
                CHECK(r == 0, "send %d: %s", i, strerror(-r));
                if (r == 0)
                        A2.sent++;
        }
        CHECK(run_until(free_in_recv_done, 60000), "b freed %d, a's send_done %u of %u", B2.freed,
              A2.done_ok + A2.done_err, A2.sent);
        CHECK(B2.recvs == 1 && B2.callbacks_after_free == 0, "b: %u recvs, %u callbacks after the free", B2.recvs,
              B2.callbacks_after_free);
        /* a's QP still talks to the gone QP (unless its retries ran out already): stop
         * it; a is freed from inside its failed callback */
        if (!A2.freed)
                roce_link_set_error(A2.link);
        CHECK(run_until(a2_failed, 30000), "a: no failed callback after set_error");
        run_for(300);
        CHECK(A2.failed_calls == 1 && A2.freed && A2.callbacks_after_free == 0, "a: failed %u times, freed %d, %u after",
              A2.failed_calls, A2.freed, A2.callbacks_after_free);
        printf("ok - a link freed from inside its recv callback (%u of %u SENDs acked), another from inside its "
               "failed callback (%s): no callback after the free\n",
               A2.done_ok, A2.sent, ibv_wc_status_str(A2.failed_status));
}

/* ---- phase: a device closed from inside a callback of its link ---- */

static Side A4 = { .name = "e" }, B4 = { .name = "f" };

static bool b4_freed(void) {
        return B4.freed;
}

/* A second handle of each test device (A event mode, B thread mode); false if one
 * could not be opened (the caller closes what was). */
static bool reopen_devs(RoceDev **da, RoceDev **db) {
        int r = roce_dev_open(event, roce_dev_name(A.dev), 1, da);

        CHECK(r == 0, "open %s again: %s", roce_dev_name(A.dev), strerror(-r));
        r = roce_dev_open(event, roce_dev_name(B.dev), 1, db);
        CHECK(r == 0, "open %s again: %s", roce_dev_name(B.dev), strerror(-r));
        if (!*da || !*db)
                return false;
        set_mode(*da, false);
        set_mode(*db, true);
        return true;
}

static void phase_dev_close_in_callback(void) {
        RoceDev *da = NULL, *db = NULL;
        uint8_t m[MSG_LEN] = { 0 };
        int r;

        A4.mode = B4.mode = MODE_OTHER;
        if (!reopen_devs(&da, &db))
                goto out;
        r = roce_link_new(da, A.gid_index, 0, &ops, &A4, &A4.link);
        CHECK(r == 0, "link e: %s", strerror(-r));
        r = roce_link_new(db, B.gid_index, 0, &ops, &B4, &B4.link);
        CHECK(r == 0, "link f: %s", strerror(-r));
        if (!A4.link || !B4.link || connect_links(A4.link, B4.link) < 0) {
                CHECK(false, "link pair e-f");
                goto out;
        }
        B4.close_in_recv = &db;
        for (int i = 0; i < 4; i++)
                if (roce_link_send(A4.link, m, MSG_LEN, (uint64_t) i, false, NULL) == 0)
                        A4.sent++;
        CHECK(run_until(b4_freed, 30000), "f: no recv");
        run_for(200);
        CHECK(!db && B4.recvs == 1 && B4.callbacks_after_free == 0, "f: device %p, %u recvs, %u callbacks after",
              (void *) db, B4.recvs, B4.callbacks_after_free);
        printf("ok - a device closed from inside a recv callback of its link (%u of %u SENDs acked before)\n",
               A4.done_ok, A4.sent);
out:
        /* e is still on da: closing the device frees it */
        da = roce_dev_close(da);
        db = roce_dev_close(db);
}

/* ---- phase: set_error -> failed once, flushes ---- */

static bool error_done(void) {
        return A.failed_calls > 0 && A.done_expect == 2000000 + 5;
}

static bool b_failed(void) {
        return B.failed_calls > 0;
}

static Side A3 = { .name = "c" }, B3 = { .name = "d" };

static bool retry_done(void) {
        return A3.failed_calls > 0 && A3.done_ok + A3.done_err >= A3.sent;
}

static void phase_error(void) {
        uint8_t m[MSG_LEN] = { 'X' };
        unsigned ok0 = A.done_ok, err0 = A.done_err;
        struct ibv_sge sge = { .addr = (uintptr_t) W.src, .length = 1, .lkey = W.src_mr ? W.src_mr->lkey : 0 };
        uint64_t t0;
        int r;

        /* B first: its posted receives are flushed -> failed once */
        roce_link_set_error(B.link);
        r = roce_link_send(B.link, m, MSG_LEN, 7, false, NULL);
        CHECK(r == -ENOTCONN, "send after set_error: %d", r);
        CHECK(run_until(b_failed, 30000), "B: no failed callback");
        /* A's SENDs now get no ACK: outstanding until set_error flushes them */
        A.done_expect = 2000000;
        for (int i = 0; i < 5; i++) {
                r = roce_link_send(A.link, m, MSG_LEN, 2000000 + (uint64_t) i, true, NULL);
                CHECK(r == 0, "send %d: %s", i, strerror(-r));
                A.sent++;
        }
        run_for(30);
        roce_link_set_error(A.link);
        r = roce_link_send(A.link, m, MSG_LEN, 7, false, NULL);
        CHECK(r == -ENOTCONN, "send after set_error: %d", r);
        if (W.rmb_mr) {
                r = roce_link_write(A.link, &sge, 1, (uintptr_t) W.rmb_mr->addr, W.rmb_mr->rkey);
                CHECK(r == -ENOTCONN, "write after set_error: %d", r);
        }
        CHECK(run_until(error_done, 30000), "failed %u, send_done expect %llu", A.failed_calls,
              (unsigned long long) A.done_expect);
        run_for(300);
        roce_link_set_error(A.link); /* again: nothing more */
        run_for(50);
        CHECK(A.failed_calls == 1 && B.failed_calls == 1, "failed called %u / %u times", A.failed_calls,
              B.failed_calls);
        CHECK(A.failed_status == IBV_WC_WR_FLUSH_ERR, "A failed with %s", ibv_wc_status_str(A.failed_status));
        CHECK(A.done_ok - ok0 + A.done_err - err0 == 5 && A.done_err - err0 >= 1,
              "send_done for %u of 5 (%u ok, %u flushed)", A.done_ok - ok0 + A.done_err - err0, A.done_ok - ok0,
              A.done_err - err0);
        CHECK(A.done_order_bad == 0, "send_done out of order");
        CHECK(roce_link_send_slots_free(A.link) == ROCE_SEND_SLOTS, "%u slots free", roce_link_send_slots_free(A.link));
        printf("ok - set_error: failed once each (%s), A's 5 unacknowledged SENDs reported (%u ok, %u %s), "
               "send/write -ENOTCONN\n",
               ibv_wc_status_str(A.failed_status), A.done_ok - ok0, A.done_err - err0,
               ibv_wc_status_str(IBV_WC_WR_FLUSH_ERR));
        A.link = roce_link_free(A.link);
        B.link = roce_link_free(B.link);

        /* the peer QP is in ERR: A's SENDs get no ACK. Real RoCE NICs complete them with
         * IBV_WC_RETRY_EXC_ERR after 7 retries (~1 s at timeout 15); rxe treats retry
         * count 7 as infinite (rxe_comp.c: "if (qp->comp.retry_cnt != 7) retry_cnt--"),
         * so there the owner's timers (TEST LINK) must notice, and set_error ends it. */
        A3.mode = B3.mode = MODE_OTHER;
        r = roce_link_new(A.dev, A.gid_index, 64, &ops, &A3, &A3.link);
        CHECK(r == 0, "link c: %s", strerror(-r));
        r = roce_link_new(B.dev, B.gid_index, 64, &ops, &B3, &B3.link);
        CHECK(r == 0, "link d: %s", strerror(-r));
        if (!A3.link || !B3.link || connect_links(A3.link, B3.link) < 0) {
                CHECK(false, "link pair c-d");
                goto out;
        }
        roce_link_set_error(B3.link);
        t0 = now_usec();
        for (int i = 0; i < 3; i++) {
                r = roce_link_send(A3.link, m, MSG_LEN, (uint64_t) i, false, NULL);
                CHECK(r == 0, "send %d: %s", i, strerror(-r));
                if (r == 0)
                        A3.sent++;
        }
        if (run_until(retry_done, 3000)) {
                CHECK(A3.failed_status == IBV_WC_RETRY_EXC_ERR, "c failed with %s", ibv_wc_status_str(A3.failed_status));
                printf("# unanswered SENDs: failed (%s) after %.2f s\n", ibv_wc_status_str(A3.failed_status),
                       (double) (now_usec() - t0) / 1e6);
        } else {
                CHECK(A3.failed_calls == 0 && A3.done_ok + A3.done_err == 0, "c: failed %u, send_done %u",
                      A3.failed_calls, A3.done_ok + A3.done_err);
                printf("# unanswered SENDs: still outstanding after %.1f s (retry count 7 = infinite here)\n",
                       (double) (now_usec() - t0) / 1e6);
                roce_link_set_error(A3.link);
                CHECK(run_until(retry_done, 30000), "c: failed %u, send_done %u of %u", A3.failed_calls,
                      A3.done_ok + A3.done_err, A3.sent);
                CHECK(A3.failed_status == IBV_WC_WR_FLUSH_ERR, "c failed with %s", ibv_wc_status_str(A3.failed_status));
        }
        run_for(200);
        CHECK(A3.failed_calls == 1, "c failed %u times", A3.failed_calls);
        CHECK(A3.done_err == A3.sent && A3.done_order_bad == 0, "c: send_done %u errors of %u", A3.done_err, A3.sent);
        printf("ok - SENDs to a peer QP in ERR: never acknowledged, failed once (%s), all %u send_done with errors\n",
               ibv_wc_status_str(A3.failed_status), A3.done_err);
out:
        A3.link = roce_link_free(A3.link);
        B3.link = roce_link_free(B3.link);
}

/* ---- phase (thread runs): the polling thread's life cycle ---- */

static Side A5 = { .name = "g" }, B5 = { .name = "h" }, A6 = { .name = "i" }, B6 = { .name = "j" };

static bool b5_freed(void) {
        return B5.freed;
}

static bool pair6_done(void) {
        return B6.recvs >= 5 && A6.done_ok + A6.done_err >= 5;
}

static void phase_thread_lifecycle(void) {
        RoceDev *da = NULL, *db = NULL;
        uint8_t m[MSG_LEN] = { 0 };
        int r;

        CHECK(roce_dev_set_cq_poll(NULL, true, 0) == -EINVAL, "set_cq_poll(NULL)");
        CHECK(roce_dev_set_cq_poll(A.dev, true, ROCE_CQ_SPIN_MAX_USEC + 1) == -EINVAL, "spin over the maximum");
        if (!reopen_devs(&da, &db))
                goto out;
        CHECK(!roce_dev_cq_poll_running(da) && !roce_dev_cq_poll_running(db), "a thread before any link");
        A5.mode = B5.mode = A6.mode = B6.mode = MODE_OTHER;
        r = roce_link_new(da, A.gid_index, 0, &ops, &A5, &A5.link);
        CHECK(r == 0, "link g: %s", strerror(-r));
        r = roce_link_new(db, B.gid_index, 0, &ops, &B5, &B5.link);
        CHECK(r == 0, "link h: %s", strerror(-r));
        CHECK(roce_dev_cq_poll_running(da) && roce_dev_cq_poll_running(db), "threads with the first links");
        if (!A5.link || !B5.link || connect_links(A5.link, B5.link) < 0) {
                CHECK(false, "link pair g-h");
                goto out;
        }
        /* h, the only polled link of db, is freed from inside its recv callback: the
         * thread goes once the wake handler is back out of it */
        B5.free_in_recv = true;
        for (int i = 0; i < 4; i++)
                if (roce_link_send(A5.link, m, MSG_LEN, (uint64_t) i, false, NULL) == 0)
                        A5.sent++;
        CHECK(run_until(b5_freed, 30000), "h: no recv");
        run_for(100);
        CHECK(B5.recvs == 1 && B5.callbacks_after_free == 0, "h: %u recvs, %u callbacks after the free", B5.recvs,
              B5.callbacks_after_free);
        CHECK(!roce_dev_cq_poll_running(db), "db's thread after its last polled link was freed in a callback");
        CHECK(roce_dev_cq_poll_running(da), "da's thread (g still there)");

        /* a new polled link on db starts a thread again; on da an event link next to g */
        r = roce_dev_set_cq_poll(da, false, 0);
        CHECK(r == 0, "da to event mode: %s", strerror(-r));
        r = roce_link_new(da, A.gid_index, 0, &ops, &A6, &A6.link);
        CHECK(r == 0, "link i: %s", strerror(-r));
        r = roce_link_new(db, B.gid_index, 0, &ops, &B6, &B6.link);
        CHECK(r == 0, "link j: %s", strerror(-r));
        CHECK(roce_dev_cq_poll_running(db), "db's thread restarted");
        if (!A6.link || !B6.link || connect_links(A6.link, B6.link) < 0) {
                CHECK(false, "link pair i-j");
                goto out;
        }
        for (int i = 0; i < 5; i++)
                if (roce_link_send(A6.link, m, MSG_LEN, (uint64_t) i, i & 1, NULL) == 0)
                        A6.sent++;
        CHECK(run_until(pair6_done, 30000), "i -> j: %u received, %u send_done", B6.recvs, A6.done_ok + A6.done_err);
        CHECK(A6.done_ok == 5 && A6.done_err == 0 && A6.done_order_bad == 0 && B6.recvs == 5,
              "i -> j: %u ok %u err, %u received", A6.done_ok, A6.done_err, B6.recvs);
        /* g (polled, its peer gone) freed from outside: da's thread goes, i (event) stays */
        A5.link = roce_link_free(A5.link);
        CHECK(!roce_dev_cq_poll_running(da), "da's thread after g was freed");
        B6.link = roce_link_free(B6.link);
        CHECK(!roce_dev_cq_poll_running(db), "db's thread after j was freed");
        printf("ok - polling thread: started with the first polled link, joined when the last one is freed (also "
               "from inside its recv callback), restarted; an event link beside a polled one on one device "
               "(%u SENDs from event to thread mode)\n", B6.recvs);
out:
        A5.link = roce_link_free(A5.link);
        A6.link = roce_link_free(A6.link);
        B6.link = roce_link_free(B6.link);
        if (!B5.freed)
                B5.link = roce_link_free(B5.link);
        da = roce_dev_close(da);
        db = roce_dev_close(db);
}

/* ---- phase (event runs): SEND ping-pong latency, event vs thread mode ---- */

#define PP_ROUNDS 500
#define PP_WARMUP 50

static Side PA = { .name = "pa" }, PB = { .name = "pb" };

static bool pp_done(void) {
        return PA.recvs >= PA.pp_target || PA.pp_err || PB.pp_err;
}

/* Round trips of one 44-byte SEND each way over a fresh link pair, A's CQ served as
 * @a_thread / @a_spin say, B's as @b_thread / @b_spin. Returns microseconds per round
 * trip, or -1. */
static double pingpong(bool a_thread, uint32_t a_spin, bool b_thread, uint32_t b_spin) {
        uint8_t m[MSG_LEN] = { 'P' };
        double usec = -1;
        uint64_t t0;
        int r;

        if (roce_dev_set_cq_poll(A.dev, a_thread, a_spin) < 0 || roce_dev_set_cq_poll(B.dev, b_thread, b_spin) < 0)
                return -1;
        for (Side *s = &PA; s; s = s == &PA ? &PB : NULL) {
                const char *name = s->name;

                *s = (Side) { .name = name, .mode = MODE_PINGPONG, .pp_client = s == &PA };
        }
        r = roce_link_new(A.dev, A.gid_index, 64, &ops, &PA, &PA.link);
        if (r == 0)
                r = roce_link_new(B.dev, B.gid_index, 64, &ops, &PB, &PB.link);
        if (r < 0 || connect_links(PA.link, PB.link) < 0)
                goto out;
        for (int pass = 0; pass < 2; pass++) {
                unsigned rounds = pass == 0 ? PP_WARMUP : PP_ROUNDS;

                PA.recvs = 0;
                PA.pp_target = rounds;
                t0 = now_usec();
                if (roce_link_send(PA.link, m, MSG_LEN, PA.sent, true, NULL) < 0)
                        goto out;
                PA.sent++;
                if (!run_until(pp_done, 120000) || PA.pp_err || PB.pp_err) {
                        usec = -1;
                        goto out;
                }
                usec = (double) (now_usec() - t0) / rounds;
        }
        run_for(20); /* the last send_done */
out:
        PA.link = roce_link_free(PA.link);
        PB.link = roce_link_free(PB.link);
        (void) roce_dev_set_cq_poll(A.dev, false, ROCE_CQ_SPIN_USEC);
        (void) roce_dev_set_cq_poll(B.dev, false, ROCE_CQ_SPIN_USEC);
        return usec;
}

static void phase_latency(void) {
        static const struct {
                const char *name;
                bool a_thread;
                uint32_t a_spin;
                bool b_thread;
                uint32_t b_spin;
        } modes[] = {
                { "event", false, 0, false, 0 },
                { "thread spin 50us both ends", true, ROCE_CQ_SPIN_USEC, true, ROCE_CQ_SPIN_USEC },
                { "thread spin 50us one end", true, ROCE_CQ_SPIN_USEC, false, 0 },
                { "thread spin 0 both ends", true, 0, true, 0 },
        };
#define N_MODES (sizeof(modes) / sizeof(modes[0]))
        double best[N_MODES] = {};

        /* two rounds, the modes interleaved; the better of each */
        for (int round = 0; round < 2; round++)
                for (size_t i = 0; i < N_MODES; i++) {
                        double u = pingpong(modes[i].a_thread, modes[i].a_spin, modes[i].b_thread, modes[i].b_spin);

                        CHECK(u > 0, "ping-pong in %s mode failed", modes[i].name);
                        printf("# ping-pong %s: %.1f us per round trip (%d round trips)\n", modes[i].name, u,
                               PP_ROUNDS);
                        if (u > 0 && (best[i] == 0 || u < best[i]))
                                best[i] = u;
                }
        CHECK(!roce_dev_cq_poll_running(A.dev) && !roce_dev_cq_poll_running(B.dev), "threads left after ping-pong");
        printf("ok - SEND ping-pong latency, better of 2 x %d round trips (only the ratios mean something under TCG):",
               PP_ROUNDS);
        for (size_t i = 0; i < N_MODES; i++)
                printf("%s %s %.1f us (%.2f x event)", i ? "," : "", modes[i].name, best[i],
                       best[0] > 0 ? best[i] / best[0] : 0);
        printf("\n");
#undef N_MODES
}

/* ---- misc checks before the links run ---- */

static void phase_misc(void) {
        uint8_t gid[16], bogus[4] = { 192, 0, 2, 99 }, m[MSG_LEN + 8] = { 0 };
        RoceDev *d = NULL;
        RoceLink *l = NULL;
        int idx, r;

        r = roce_dev_open(event, "no-such-rdma-dev", 1, &d);
        CHECK(r == -ENODEV && !d, "open a missing device: %d", r);
        r = roce_dev_open(event, roce_dev_name(A.dev), 2, &d);
        CHECK(r == -ENODEV && !d, "open port 2: %d", r);
        r = roce_dev_open(event, roce_dev_name(A.dev), 0, &d);
        CHECK(r == -ENODEV && !d, "open port 0: %d", r);
        r = roce_dev_gid_for_ipv4(A.dev, bogus, gid, &idx, NULL);
        CHECK(r == -ENOENT, "GID of an address not on the device: %d", r);
        r = roce_dev_gid_for_ipv4(A.dev, B.ip, gid, &idx, NULL);
        CHECK(r == -ENOENT, "GID of the other device's address: %d", r);
        CHECK(roce_dev_port_state(A.dev) == IBV_PORT_ACTIVE, "port state %d", roce_dev_port_state(A.dev));

        /* inline granted for other requests */
        for (uint32_t want = 0; want <= 1024; want = want ? want * 2 : 32) {
                r = roce_link_new(A.dev, A.gid_index, want, &ops, &A, &l);
                printf("# inline asked %u: %s, granted %u\n", want, r < 0 ? strerror(-r) : "created",
                       r < 0 ? 0 : roce_link_max_inline(l));
                if (want == 0)
                        CHECK(r == 0, "link with inline 0: %s", strerror(-r));
                l = roce_link_free(l);
        }
        /* a link not connected: no sends; too long messages refused */
        r = roce_link_new(A.dev, A.gid_index, 64, &ops, &A, &l);
        CHECK(r == 0, "link: %s", strerror(-r));
        if (l) {
                CHECK(roce_link_send(l, m, MSG_LEN, 1, false, NULL) == -ENOTCONN, "send in INIT");
                CHECK(roce_link_rts(l) == -EINVAL, "RTS before RTR");
                CHECK(roce_link_psn(l) <= 0xffffff, "PSN %u", roce_link_psn(l));
        }
        l = roce_link_free(l);
        /* a device closed with a link still on it frees the link */
        r = roce_dev_open(event, roce_dev_name(A.dev), 1, &d);
        CHECK(r == 0, "second open of %s: %s", roce_dev_name(A.dev), strerror(-r));
        if (d) {
                set_mode(d, false);
                r = roce_link_new(d, A.gid_index, 0, &ops, &A, &l);
                CHECK(r == 0, "link on the second open: %s", strerror(-r));
                d = roce_dev_close(d);
        }
        printf("ok - bad device / port / address refused, link states, inline requests\n");
}

int main(int argc, char **argv) {
        const char *dev_a = argc > 4 ? argv[1] : "rxe0", *ip_a = argc > 4 ? argv[2] : "10.77.0.1";
        const char *dev_b = argc > 4 ? argv[3] : "rxe1", *ip_b = argc > 4 ? argv[4] : "10.77.0.2";
        const char *seed = getenv("SMCD_TEST_SEED"), *mode = getenv("SMCD_TEST_CQ_POLL");
        uint64_t t0 = now_usec();
        uint8_t m[MSG_LEN + 8] = { 0 };
        int r;

        rng_state = seed ? strtoull(seed, NULL, 0) : (uint64_t) time(NULL) ^ ((uint64_t) getpid() << 32);
        if (rng_state == 0)
                rng_state = 1;
        if (mode && strcmp(mode, "thread") != 0 && strcmp(mode, "event") != 0)
                return fprintf(stderr, "SMCD_TEST_CQ_POLL=%s: expected event or thread\n", mode), 2;
        cq_thread = mode && strcmp(mode, "thread") == 0;
        printf("# seed %llu, CQs served in %s mode\n", (unsigned long long) rng_state, cq_thread ? "thread" : "event");
        setvbuf(stdout, NULL, _IOLBF, 0);
        r = sd_event_default(&event);
        if (r < 0)
                return fprintf(stderr, "sd_event_default: %s\n", strerror(-r)), 1;
        if (open_side(&A, dev_a, ip_a) < 0 || open_side(&B, dev_b, ip_b) < 0) {
                printf("SKIP: RDMA devices %s / %s with %s / %s not usable\n", dev_a, dev_b, ip_a, ip_b);
                roce_dev_close(A.dev);
                roce_dev_close(B.dev);
                sd_event_unref(event);
                return 77;
        }
        phase_misc();

        r = roce_link_new(A.dev, A.gid_index, 64, &ops, &A, &A.link);
        CHECK(r == 0, "link A: %s", strerror(-r));
        r = roce_link_new(B.dev, B.gid_index, 64, &ops, &B, &B.link);
        CHECK(r == 0, "link B: %s", strerror(-r));
        if (!A.link || !B.link)
                goto out;
        printf("# links: A qpn %u psn %u inline %u, B qpn %u psn %u inline %u\n", roce_link_qpn(A.link),
               roce_link_psn(A.link), roce_link_max_inline(A.link), roce_link_qpn(B.link), roce_link_psn(B.link),
               roce_link_max_inline(B.link));
        CHECK(roce_link_max_inline(A.link) >= 64, "inline granted %u for 64", roce_link_max_inline(A.link));
        r = connect_links(A.link, B.link);
        CHECK(r == 0, "connect: %s", strerror(-r));
        if (r < 0)
                goto out;
        CHECK(roce_link_send(A.link, m, ROCE_SEND_BIG_LEN + 1, 1, false, NULL) == -EINVAL, "8193-byte send");
        CHECK(roce_link_rtr(A.link, 1, 1, B.gid, 3) == -EINVAL, "RTR twice");
        printf("ok - links connected (RTR with hop limit 1, RTS)\n");

        phase_sends();
        phase_eagain();
        phase_writes();
        phase_free_in_callback();
        phase_dev_close_in_callback();
        phase_error();
        if (cq_thread)
                phase_thread_lifecycle();
        else
                phase_latency();
out:
        A.link = roce_link_free(A.link);
        B.link = roce_link_free(B.link);
        if (W.src_mr)
                ibv_dereg_mr(W.src_mr);
        if (W.rmb_mr)
                ibv_dereg_mr(W.rmb_mr);
        for (unsigned i = 0; i < N_CHUNKS; i++)
                free(W.chunks[i].data);
        CHECK(!roce_dev_cq_poll_running(A.dev) && !roce_dev_cq_poll_running(B.dev),
              "polling threads after all links were freed");
        if (W.src)
                munmap(W.src, SRC_LEN);
        if (W.rmb)
                munmap(W.rmb, RMB_LEN);
        A.dev = roce_dev_close(A.dev);
        B.dev = roce_dev_close(B.dev);
        sd_event_unref(event);
        printf("# %d checks, %d failed, %.1f s\n", checks, failures, (double) (now_usec() - t0) / 1e6);
        return failures ? 1 : 0;
}
