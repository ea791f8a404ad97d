/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Unit tests of the counters (helper "stats"): histogram bucket math (smcd/hist.h),
 * smcd's JSON layout (smcd/stats.c: every old key kept, the new ones present, the
 * fallback table, reset keeps gauges), the DMB counters the data path keeps
 * (libsmcproto/ring.c: messages, cork flushes for TCP_CORK / MSG_MORE / autocork /
 * full ring, sendfile), and the pool's new counters (smcd/pool.c: reset, acquire
 * histogram, downgrade under max_bytes, several threads under TSan).
 */

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "hist.h"
#include "pool.h"
#include "ring.h"
#include "smc-clc.h"
#include "stats.h"

static _Atomic unsigned n_checks; /* the pool workers check too */

#define CHECK(cond, ...)                                                                          \
        do {                                                                                      \
                n_checks++;                                                                       \
                if (!(cond)) {                                                                    \
                        fprintf(stderr, "%s:%d: %s: check failed: %s: ", __FILE__, __LINE__, __func__, \
                                #cond);                                                           \
                        fprintf(stderr, __VA_ARGS__);                                             \
                        fputc('\n', stderr);                                                      \
                        exit(EXIT_FAILURE);                                                       \
                }                                                                                 \
        } while (0)

/* ---- hist.h ---- */

static void test_hist_math(void) {
        static const struct {
                uint64_t v;
                unsigned b;
        } t[] = {
                { 0, 0 }, { 1, 0 }, { 2, 1 }, { 3, 2 }, { 4, 2 }, { 5, 3 }, { 8, 3 }, { 9, 4 },
                { 1000, 10 }, { 1024, 10 }, { 1025, 11 },
                { UINT64_C(1) << 30, 30 }, { (UINT64_C(1) << 30) + 1, 31 }, { UINT64_C(1) << 40, 31 },
                { UINT64_MAX, 31 },
        };
        struct smc_hist h = {};
        uint64_t sum = 0;

        for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
                CHECK(smc_hist_bucket(t[i].v) == t[i].b, "bucket(%" PRIu64 ") = %u, want %u", t[i].v,
                      smc_hist_bucket(t[i].v), t[i].b);
        CHECK(smc_hist_le(0) == 1 && smc_hist_le(1) == 2 && smc_hist_le(10) == 1024 &&
              smc_hist_le(30) == UINT64_C(1) << 30 && smc_hist_le(SMC_HIST_BUCKETS - 1) == UINT64_MAX,
              "bounds");
        /* every value lies in (le(b - 1), le(b)] of its bucket */
        for (uint64_t v = 0; v < 70000; v++) {
                unsigned b = smc_hist_bucket(v);

                CHECK(v <= smc_hist_le(b) && (b == 0 || v > smc_hist_le(b - 1)), "%" PRIu64 " in bucket %u", v, b);
        }
        for (unsigned s = 0; s < 64; s++) {
                uint64_t v = UINT64_C(1) << s;

                for (int d = -1; d <= 1; d++) {
                        uint64_t x = v + (uint64_t) d;
                        unsigned b = smc_hist_bucket(x);

                        CHECK(x <= smc_hist_le(b) && (b == 0 || x > smc_hist_le(b - 1)), "%" PRIu64 " in bucket %u",
                              x, b);
                }
        }
        for (uint64_t v = 1; v <= 100; v++) {
                smc_hist_add(&h, v * 1000);
                sum += v * 1000;
        }
        CHECK(smc_hist_count(&h) == 100 && h.sum == sum, "count %" PRIu64 " sum %" PRIu64, smc_hist_count(&h), h.sum);
        CHECK(h.bucket[10] == 1 && h.bucket[17] == 35, "1000 ns in le 1024, 66000..100000 in le 131072: %" PRIu64
              " %" PRIu64, h.bucket[10], h.bucket[17]);
}

/* ---- stats.c: JSON ---- */

static json_object *get(json_object *o, const char *path) {
        char buf[128], *save = NULL;

        snprintf(buf, sizeof(buf), "%s", path);
        for (char *k = strtok_r(buf, ".", &save); k && o; k = strtok_r(NULL, ".", &save))
                if (!json_object_object_get_ex(o, k, &o))
                        return NULL;
        return o;
}

static uint64_t u64(json_object *root, const char *path) {
        json_object *o = get(root, path);

        CHECK(o && json_object_is_type(o, json_type_int), "%s missing or not a number", path);
        return json_object_get_uint64(o);
}

static void test_json_layout(void) {
        /* the keys of the first layout (tests and users read them) */
        static const char *const old_smcd[] = {
                "conns_client", "conns_server", "conns_client_current", "conns_server_current", "conns_current",
                "conns_closed", "conns_aborted", "fallback_total", "handshake_errors", "close_unknown",
                "bytes_tx", "bytes_rx", "clients", "clients_total", "clients_rejected", "clients_over_limit",
                "listeners", "listeners_total",
        };
        static const char *const old_pool[] = {
                "alloc", "reuse", "free", "clear", "bytes_cleared", "clear_ns", "in_use", "free_count",
                "pending_clear", "bytes_total",
        };
        static const char *const mode_keys[] = {
                "conns_client", "conns_server", "conns_client_current", "conns_server_current", "conns_current",
                "conns_closed", "conns_aborted", "handshake_errors", "bytes_tx", "bytes_rx", "msgs_tx", "msgs_rx",
                "cork_flushes", "sendfile_calls", "sendfile_bytes", "inline_sends",
        };
        struct smcd_stats s = {
                .conns_client = 5, .conns_server = 4, .conns_current = 2, .conns_client_current = 1,
                .conns_server_current = 1, .handshake_errors = 3, .bytes_tx = 1000, .bytes_rx = 2000,
                .clients = 7, .listeners = 2, .seq = 9,
        };
        struct smc_pool_stats p = { .alloc = 3, .downgrade = 2, .in_use = { 1, 0, 2 }, .free_count = { 0, 4 } };
        struct smcd_dmb_counters crx = { .prod_bytes = 10, .prod_msgs = 2, .cons_msgs = 3, .cork_flushes = 1,
                                         .sendfile_calls = 1, .sendfile_bytes = 5 },
                                 srx = { .prod_bytes = 20, .prod_msgs = 4, .cons_msgs = 5, .cork_flushes = 2 };
        json_object *root, *by, *e, *b;

        smcd_stats_count_fallback(&s, SMC_CLC_DECL_PEERDECL);
        smcd_stats_count_server_fallback(&s, SMC_CLC_DECL_PEERDECL);
        smcd_stats_count_fallback(&s, SMC_CLC_DECL_PEERNOSMC);
        smcd_stats_count_fallback(&s, SMC_CLC_DECL_PEERNOSMC);
        smcd_stats_count_fallback(&s, 0x0b990000u); /* no name */
        smcd_stats_count_ended(&s, &crx, &srx);
        smc_hist_add(&s.connect, 100000);
        smc_hist_add(&s.connect, 3);
        smc_hist_add(&p.acquire, 40);

        root = smcd_stats_to_json(&s, &p);
        CHECK(root, "to_json");
        for (size_t i = 0; i < sizeof(old_smcd) / sizeof(old_smcd[0]); i++) {
                char k[64];

                snprintf(k, sizeof(k), "smcd.%s", old_smcd[i]);
                (void) u64(root, k);
        }
        for (size_t i = 0; i < sizeof(old_pool) / sizeof(old_pool[0]); i++) {
                char k[64];

                snprintf(k, sizeof(k), "pool.%s", old_pool[i]);
                (void) u64(root, k);
        }
        for (size_t i = 0; i < sizeof(mode_keys) / sizeof(mode_keys[0]); i++) {
                char k[64];

                snprintf(k, sizeof(k), "smcd.%s", mode_keys[i]);
                (void) u64(root, k);
                snprintf(k, sizeof(k), "smcr.%s", mode_keys[i]);
                CHECK(u64(root, k) == 0, "%s not 0", k);
        }
        {
                static const char *const smcr_keys[] = { "cdc_sends", "llc_sends", "rdma_writes", "link_groups",
                                                         "link_groups_total", "links_failed", "links_added", "failovers", "handshakes_ok",
                                                         "handshakes_declined", "handshakes_failed", "decline_sent",
                                                         "decline_rcvd" };

                for (size_t i = 0; i < sizeof(smcr_keys) / sizeof(smcr_keys[0]); i++) {
                        char k[64];

                        snprintf(k, sizeof(k), "smcr.%s", smcr_keys[i]);
                        CHECK(u64(root, k) == 0, "%s not 0", k);
                }
                CHECK(json_object_object_length(get(root, "smcr")) ==
                              sizeof(mode_keys) / sizeof(mode_keys[0]) + sizeof(smcr_keys) / sizeof(smcr_keys[0]),
                      "smcr has exactly the connection keys and the SMC-R ones");
        }
        CHECK(u64(root, "seq") == 9 && u64(root, "time_usec") > 0 && u64(root, "reset_usec") == 0, "seq / times");
        CHECK(json_object_array_length(get(root, "pool.in_use_by_class")) == SMC_DMB_NCLASSES &&
              json_object_array_length(get(root, "pool.free_count_by_class")) == SMC_DMB_NCLASSES, "class arrays");
        CHECK(u64(root, "pool.in_use") == 3 && u64(root, "pool.free_count") == 4 && u64(root, "pool.downgrade") == 2,
              "pool sums");
        CHECK(u64(root, "pool.bytes_in_use") == (4096 + 16384) + 2 * (4096 + 65536), "bytes_in_use %" PRIu64,
              u64(root, "pool.bytes_in_use"));

        /* the ended connection: bytes per direction, the rest of both ends */
        CHECK(u64(root, "smcd.bytes_tx") == 1020 && u64(root, "smcd.bytes_rx") == 2010, "bytes");
        CHECK(u64(root, "smcd.msgs_tx") == 6 && u64(root, "smcd.msgs_rx") == 8 && u64(root, "smcd.cork_flushes") == 3 &&
              u64(root, "smcd.sendfile_calls") == 1 && u64(root, "smcd.sendfile_bytes") == 5 &&
              u64(root, "smcd.inline_sends") == 0, "messages / flushes / sendfile");

        /* fallbacks: the old map, and the new table sorted by code */
        CHECK(u64(root, "smcd.fallback.SMC_CLC_DECL_PEERNOSMC") == 2 && u64(root, "smcd.fallback.SMC_CLC_DECL_PEERDECL") == 1 &&
              u64(root, "smcd.fallback.0x0b990000") == 1 && u64(root, "smcd.fallback_total") == 4, "old fallback map");
        CHECK(u64(root, "fallback.client") == 4 && u64(root, "fallback.server") == 1, "fallback client/server");
        by = get(root, "fallback.by_reason");
        CHECK(by && json_object_array_length(by) == 3, "by_reason entries");
        e = json_object_array_get_idx(by, 0);
        CHECK(!strcmp(json_object_get_string(get(e, "name")), "SMC_CLC_DECL_PEERNOSMC") &&
              !strcmp(json_object_get_string(get(e, "code")), "0x03010000") && u64(e, "count") == 2 &&
              u64(e, "server") == 0, "first by code: %s", json_object_to_json_string(e));
        e = json_object_array_get_idx(by, 1);
        CHECK(!strcmp(json_object_get_string(get(e, "name")), "SMC_CLC_DECL_PEERDECL") && u64(e, "count") == 1 &&
              u64(e, "server") == 1, "second: %s", json_object_to_json_string(e));
        e = json_object_array_get_idx(by, 2);
        CHECK(!strcmp(json_object_get_string(get(e, "name")), "0x0b990000") &&
              !strcmp(json_object_get_string(get(e, "code")), "0x0b990000"), "unnamed: %s", json_object_to_json_string(e));

        /* histograms */
        CHECK(!strcmp(json_object_get_string(get(root, "histograms.connect.unit")), "ns") &&
              u64(root, "histograms.connect.count") == 2 && u64(root, "histograms.connect.sum") == 100003 &&
              u64(root, "histograms.buffer_acquire.count") == 1, "histogram totals");
        b = get(root, "histograms.connect.buckets");
        CHECK(b && json_object_array_length(b) == SMC_HIST_BUCKETS, "32 buckets");
        CHECK(u64(json_object_array_get_idx(b, 2), "le") == 4 && u64(json_object_array_get_idx(b, 2), "count") == 1 &&
              u64(json_object_array_get_idx(b, 17), "le") == 131072 && u64(json_object_array_get_idx(b, 17), "count") == 1,
              "samples in their buckets");
        CHECK(u64(json_object_array_get_idx(b, SMC_HIST_BUCKETS - 1), "le") == UINT64_MAX, "last bound");
        json_object_put(root);

        /* reset: gauges stay, everything else goes */
        smcd_stats_reset(&s);
        CHECK(s.conns_current == 2 && s.conns_client_current == 1 && s.conns_server_current == 1 && s.clients == 7 &&
              s.listeners == 2 && s.seq == 9, "gauges kept");
        CHECK(s.conns_client == 0 && s.handshake_errors == 0 && s.bytes_tx == 0 && s.msgs_tx == 0 &&
              s.cork_flushes == 0 && s.fallback_total == 0 && s.fallback_server == 0 && s.n_fallback == 0 &&
              smc_hist_count(&s.connect) == 0 && s.connect.sum == 0 && s.reset_usec > 0, "counters zeroed");
        root = smcd_stats_to_json(&s, NULL);
        CHECK(!get(root, "pool") && u64(root, "histograms.connect.count") == 0 && !get(root, "histograms.buffer_acquire") &&
              json_object_array_length(get(root, "fallback.by_reason")) == 0, "without a pool");
        json_object_put(root);
}

static void test_dmb_counters_read(void) {
        struct smc_dmb_hdr *h = calloc(1, sizeof(*h));
        struct smcd_dmb_counters base = { .prod_bytes = 5, .prod_msgs = 1, .cons_msgs = 9 }, v;

        CHECK(h, "calloc");
        atomic_store(&h->prod_bytes, 100);
        atomic_store(&h->prod_msgs, 4);
        atomic_store(&h->cons_msgs, 3);
        atomic_store(&h->prod_cork_flushes, 2);
        atomic_store(&h->prod_sendfile_calls, 1);
        atomic_store(&h->prod_sendfile_bytes, 50);
        smcd_dmb_counters_read(h, NULL, &v);
        CHECK(v.prod_bytes == 100 && v.prod_msgs == 4 && v.cons_msgs == 3 && v.cork_flushes == 2 &&
              v.sendfile_calls == 1 && v.sendfile_bytes == 50 && v.inline_sends == 0, "read");
        smcd_dmb_counters_read(h, &base, &v);
        /* cons_msgs below its base (a client rewrote it): 0, not a wrap */
        CHECK(v.prod_bytes == 95 && v.prod_msgs == 3 && v.cons_msgs == 0 && v.cork_flushes == 2, "minus base");
        free(h);
}

/* ---- ring.c: the DMB counters of the data path ---- */

struct conn {
        void *dmb_a, *dmb_b; /* A's rx (B writes it), B's rx (A writes it) */
        int xa, xb;
        struct smc_ring_ep a, b;
};

#define RING 16384u

static void *dmb_new(void) {
        void *p = mmap(NULL, SMC_DMB_HDR_LEN + RING, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

        CHECK(p != MAP_FAILED, "mmap: %m");
        ((struct smc_dmb_hdr *) p)->type = SMC_DMB_EYECATCHER;
        return p;
}

static void conn_open(struct conn *c) {
        int pa[2], pb[2];

        memset(c, 0, sizeof(*c));
        c->dmb_a = dmb_new();
        c->dmb_b = dmb_new();
        CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pa) == 0, "socketpair: %m");
        CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pb) == 0, "socketpair: %m");
        {
                /* as smcd does: the smallest send buffer on X keeps a plug small */
                int one = 1;

                (void) setsockopt(pa[0], SOL_SOCKET, SO_SNDBUF, &one, sizeof(one));
                (void) setsockopt(pb[0], SOL_SOCKET, SO_SNDBUF, &one, sizeof(one));
        }
        c->xa = pa[0];
        c->xb = pb[0];
        CHECK(smc_ring_init(&c->a, c->dmb_a, RING, c->dmb_b, RING, pa[0], pb[1]) == 0, "init a");
        CHECK(smc_ring_init(&c->b, c->dmb_b, RING, c->dmb_a, RING, pb[0], pa[1]) == 0, "init b");
}

static void conn_close(struct conn *c) {
        smc_ring_close(&c->a);
        smc_ring_close(&c->b);
        close(c->xa);
        close(c->xb);
        pthread_mutex_destroy(&c->a.tx_lock);
        pthread_mutex_destroy(&c->a.rx_lock);
        pthread_mutex_destroy(&c->b.tx_lock);
        pthread_mutex_destroy(&c->b.rx_lock);
        munmap(c->dmb_a, SMC_DMB_HDR_LEN + RING);
        munmap(c->dmb_b, SMC_DMB_HDR_LEN + RING);
}

static ssize_t xsend(struct smc_ring_ep *ep, const void *buf, size_t len, int flags) {
        struct iovec iov = { (void *) buf, len };
        return smc_ring_send(ep, &iov, 1, flags, true);
}

static ssize_t xrecv(struct smc_ring_ep *ep, void *buf, size_t len, int flags) {
        struct iovec iov = { buf, len };
        return smc_ring_recv(ep, &iov, 1, flags, true);
}

/* the counters A's sends left in B's DMB, B's receives in its own */
#define HB(c) ((struct smc_dmb_hdr *) (c)->dmb_b)
#define LD(f) atomic_load(&HB(&c)->f)

/* B drains everything it can; returns the bytes */
static size_t drain(struct conn *c) {
        char buf[RING];
        size_t got = 0;
        ssize_t n;

        while ((n = xrecv(&c->b, buf, sizeof(buf), 0)) > 0)
                got += (size_t) n;
        CHECK(n == -EAGAIN, "drain: %zd", n);
        return got;
}

static void test_ring_counters(void) {
        char buf[RING * 2] = { 0 }, in[RING];
        struct conn c;

        conn_open(&c);
        c.a.autocork_size = 4096;

        /* plain sends and receives: one message per call that moved data */
        for (int i = 0; i < 5; i++)
                CHECK(xsend(&c.a, buf, 100, 0) == 100, "send");
        CHECK(LD(prod_msgs) == 5 && LD(prod_bytes) == 500 && LD(prod_cork_flushes) == 0, "5 sends: %" PRIu64,
              (uint64_t) LD(prod_msgs));
        CHECK(xrecv(&c.b, in, 300, 0) == 300 && xrecv(&c.b, in, 300, 0) == 200, "recv");
        CHECK(xrecv(&c.b, in, 300, 0) == -EAGAIN, "empty");
        CHECK(LD(cons_msgs) == 2, "2 receives that returned data (not the EAGAIN): %" PRIu64, (uint64_t) LD(cons_msgs));
        /* MSG_PEEK and empty calls do not count */
        CHECK(xsend(&c.a, buf, 10, 0) == 10 && xrecv(&c.b, in, 10, MSG_PEEK) == 10, "peek");
        CHECK(LD(cons_msgs) == 2, "peek not counted");
        CHECK(xrecv(&c.b, in, 10, 0) == 10 && LD(cons_msgs) == 3, "recv after peek");
        CHECK(xsend(&c.a, buf, 0, 0) == 0 && LD(prod_msgs) == 6, "an empty send is no message");

        /* MSG_MORE x3, then a send without it: one flush, 4 messages */
        for (int i = 0; i < 3; i++)
                CHECK(xsend(&c.a, buf, 100, MSG_MORE) == 100, "send more");
        CHECK(LD(prod_msgs) == 6 && LD(prod_bytes) == 510, "held: nothing published yet");
        CHECK(xsend(&c.a, buf, 100, 0) == 100, "send");
        CHECK(LD(prod_msgs) == 10 && LD(prod_cork_flushes) == 1 && LD(prod_bytes) == 910, "MSG_MORE end: msgs %" PRIu64
              " flushes %" PRIu64, (uint64_t) LD(prod_msgs), (uint64_t) LD(prod_cork_flushes));
        CHECK(drain(&c) == 400, "drain");

        /* TCP_CORK on, 3 sends, off: one flush */
        CHECK(smc_ring_set_cork(&c.a, true) == 0, "cork");
        for (int i = 0; i < 3; i++)
                CHECK(xsend(&c.a, buf, 50, 0) == 50, "corked send");
        CHECK(smc_ring_set_cork(&c.a, false) == 0 && LD(prod_cork_flushes) == 2 && LD(prod_msgs) == 13, "uncork");
        /* uncorking with nothing held is no flush */
        CHECK(smc_ring_set_cork(&c.a, true) == 0 && smc_ring_set_cork(&c.a, false) == 0 && LD(prod_cork_flushes) == 2,
              "empty uncork");
        /* TCP_NODELAY's push (smc_ring_flush) of a MSG_MORE batch */
        CHECK(xsend(&c.a, buf, 70, MSG_MORE) == 70 && smc_ring_flush(&c.a) == 0 && LD(prod_cork_flushes) == 3, "flush");
        CHECK(drain(&c) == 220, "drain");

        /* autocork: 10000 bytes under MSG_MORE with autocork 4096: published at 4096 and
         * 8192 (2 flushes), the tail held until the next plain send (1 more) */
        CHECK(xsend(&c.a, buf, 10000, MSG_MORE) == 10000, "big more");
        CHECK(LD(prod_cork_flushes) == 5 && LD(prod_msgs) == 15, "autocork flushes %" PRIu64,
              (uint64_t) LD(prod_cork_flushes));
        CHECK(xsend(&c.a, buf, 1, 0) == 1 && LD(prod_cork_flushes) == 6 && LD(prod_msgs) == 16, "tail");
        CHECK(drain(&c) == 10001, "drain");

        /* a full ring under cork goes out (1 flush) and the send stops at EAGAIN */
        CHECK(smc_ring_set_cork(&c.a, true) == 0, "cork");
        c.a.autocork_size = RING * 4;
        CHECK(xsend(&c.a, buf, RING + 100, 0) == RING, "fills the ring");
        CHECK(LD(prod_cork_flushes) == 7 && LD(prod_msgs) == 17, "full ring under cork: flushes %" PRIu64,
              (uint64_t) LD(prod_cork_flushes));
        CHECK(smc_ring_set_cork(&c.a, false) == 0 && LD(prod_cork_flushes) == 7, "nothing held after it");
        CHECK(drain(&c) == RING, "drain");

        /* sendfile accounting */
        smc_ring_count_sendfile(&c.a, 4096);
        smc_ring_count_sendfile(&c.a, 0); /* moved nothing: not counted */
        smc_ring_count_sendfile(&c.a, 100);
        CHECK(LD(prod_sendfile_calls) == 2 && LD(prod_sendfile_bytes) == 4196 && LD(prod_inline_sends) == 0, "sendfile");

        /* B -> A counts in A's DMB, not in B's */
        CHECK(xsend(&c.b, buf, 10, 0) == 10 && xrecv(&c.a, in, 10, 0) == 10, "reverse");
        CHECK(atomic_load(&((struct smc_dmb_hdr *) c.dmb_a)->prod_msgs) == 1 &&
              atomic_load(&((struct smc_dmb_hdr *) c.dmb_a)->cons_msgs) == 1 && LD(prod_msgs) == 17, "per direction");

        /* a held batch published by close counts */
        CHECK(xsend(&c.a, buf, 5, MSG_MORE) == 5, "held at close");
        conn_close(&c);
}

/* Two endpoints initialised over DMBs that already carry counters (a re-init, e.g.
 * an smcd restart does not happen, but the library must not go backwards). */
static void test_ring_counters_init(void) {
        char buf[64] = { 0 };
        struct conn c;

        conn_open(&c);
        CHECK(xsend(&c.a, buf, 10, 0) == 10 && xrecv(&c.b, buf, 10, 0) == 10, "io");
        pthread_mutex_destroy(&c.a.tx_lock);
        pthread_mutex_destroy(&c.a.rx_lock);
        CHECK(smc_ring_init(&c.a, c.dmb_a, RING, c.dmb_b, RING, c.xa, c.a.y_peer) == 0, "re-init");
        CHECK(xsend(&c.a, buf, 10, 0) == 10 && LD(prod_msgs) == 2, "counts on from the header: %" PRIu64,
              (uint64_t) LD(prod_msgs));
        conn_close(&c);
}

/* ---- pool.c ---- */

static void test_pool_reset_and_hist(void) {
        struct smc_pool_config cfg = { .time_acquire = true, .prepopulate = { 2 } };
        struct smc_pool_stats st;
        struct smc_buf *b[6];
        struct smc_pool *p;

        CHECK(smc_pool_new(&cfg, &p) == 0, "pool");
        for (int i = 0; i < 6; i++)
                CHECK(smc_pool_acquire(p, 1000, 1001, i % 2, &b[i]) == 0, "acquire");
        smc_pool_get_stats(p, &st);
        CHECK(smc_hist_count(&st.acquire) == 6 && st.acquire.sum > 0, "6 acquires timed: %" PRIu64,
              smc_hist_count(&st.acquire));
        CHECK(st.reuse == 2 && st.alloc == 2 + 4 && st.in_use[0] == 3 && st.in_use[1] == 3, "alloc %" PRIu64 " reuse %"
              PRIu64, st.alloc, st.reuse);
        CHECK(smc_pool_acquire(p, 1, 2, SMC_DMB_NCLASSES, &b[0]) == -EINVAL, "bad class");
        smc_pool_get_stats(p, &st);
        CHECK(smc_hist_count(&st.acquire) == 6, "a failed acquire is not timed");
        for (int i = 0; i < 3; i++)
                smc_pool_release(p, b[i]);
        smc_pool_flush(p);
        smc_pool_get_stats(p, &st);
        CHECK(st.clear == 3 && st.bytes_cleared > 0 && st.free_count[0] + st.free_count[1] == 3, "cleared");

        smc_pool_reset_stats(p);
        smc_pool_get_stats(p, &st);
        CHECK(st.alloc == 0 && st.reuse == 0 && st.free == 0 && st.clear == 0 && st.bytes_cleared == 0 &&
              st.clear_ns == 0 && st.downgrade == 0 && smc_hist_count(&st.acquire) == 0 && st.acquire.sum == 0,
              "counters zeroed");
        CHECK(st.in_use[0] + st.in_use[1] == 3 && st.free_count[0] + st.free_count[1] == 3 &&
              st.bytes_total == 6 * SMC_DMB_HDR_LEN + 3 * 16384 + 3 * 32768 && st.pending_clear == 0, "gauges kept");
        /* counting goes on after a reset */
        CHECK(smc_pool_acquire(p, 1000, 1001, 0, &b[0]) == 0, "acquire");
        smc_pool_get_stats(p, &st);
        CHECK(smc_hist_count(&st.acquire) == 1 && st.reuse == 1, "after reset");
        smc_pool_free(p);

        /* without time_acquire the histogram stays empty */
        CHECK(smc_pool_new(NULL, &p) == 0, "pool");
        CHECK(smc_pool_acquire(p, 1, 1, 0, &b[0]) == 0, "acquire");
        smc_pool_get_stats(p, &st);
        CHECK(smc_hist_count(&st.acquire) == 0, "untimed");
        smc_pool_free(p);
}

static void test_pool_downgrade(void) {
        const uint64_t c64 = SMC_DMB_HDR_LEN + 65536, c16 = SMC_DMB_HDR_LEN + 16384;
        struct smc_pool_config cfg = { .max_bytes = 2 * c64 + c16 };
        struct smc_pool_stats st;
        struct smc_buf *b[5];
        struct smc_pool *p;

        CHECK(smc_pool_new(&cfg, &p) == 0, "pool");
        CHECK(smc_pool_acquire_fit(p, 1, 2, 2, 2, &b[0]) == 0 && b[0]->size == 65536, "64K");
        CHECK(smc_pool_acquire_fit(p, 1, 2, 2, 2, &b[1]) == 0 && b[1]->size == 65536, "64K");
        /* 16K left: the plain acquire fails, acquire_fit downgrades to 16K */
        CHECK(smc_pool_acquire(p, 1, 2, 2, &b[2]) == -ENOBUFS, "plain acquire does not downgrade");
        CHECK(smc_pool_acquire_fit(p, 1, 2, 2, 2, &b[2]) == 0 && b[2]->size == 16384 && b[2]->class == 0,
              "downgraded to 16K: %u", b[2]->size);
        smc_pool_get_stats(p, &st);
        CHECK(st.downgrade == 1 && st.in_use[2] == 2 && st.in_use[0] == 1, "downgrade counted");
        CHECK(smc_pool_acquire_fit(p, 1, 2, 0, 0, &b[3]) == -ENOBUFS, "full: not even 16K");
        smc_pool_get_stats(p, &st);
        CHECK(st.downgrade == 1, "a failure is no downgrade");
        CHECK(smc_pool_acquire_fit(p, 1, 2, 1, 2, &b[3]) == -EINVAL && smc_pool_acquire_fit(p, 1, 2, 7, 7, &b[3]) == -EINVAL,
              "max > want, bad class");

        /* the caller's own limit: want 64K, may have 32K; a freed 64K is trimmed for it */
        smc_pool_release(p, b[0]);
        smc_pool_flush(p);
        CHECK(smc_pool_acquire_fit(p, 1, 2, 2, 1, &b[0]) == 0 && b[0]->size == 32768, "max 32K: %u", b[0]->size);
        smc_pool_get_stats(p, &st);
        CHECK(st.downgrade == 2, "counted against want");
        smc_pool_free(p);
}

/* Several threads acquire and release with timing on while the main thread reads
 * and resets the counters: no race (TSan), and after the threads the histogram
 * counts exactly the acquires since the last reset. */
#define THREADS 4
#define ROUNDS 5000

static struct smc_pool *tpool;

static void *worker(void *arg) {
        unsigned id = (unsigned) (uintptr_t) arg;

        for (unsigned i = 0; i < ROUNDS; i++) {
                struct smc_buf *b;

                CHECK(smc_pool_acquire_fit(tpool, 1000 + id, 2000, i % 3, i % 3, &b) == 0, "acquire");
                smc_pool_release(tpool, b);
        }
        return NULL;
}

static void test_pool_threads(void) {
        struct smc_pool_config cfg = { .time_acquire = true };
        pthread_t t[THREADS];
        struct smc_pool_stats st;

        CHECK(smc_pool_new(&cfg, &tpool) == 0, "pool");
        for (unsigned i = 0; i < THREADS; i++)
                CHECK(pthread_create(&t[i], NULL, worker, (void *) (uintptr_t) i) == 0, "pthread_create");
        for (unsigned i = 0; i < 50; i++) {
                smc_pool_get_stats(tpool, &st);
                if (i % 10 == 0)
                        smc_pool_reset_stats(tpool);
                usleep(200);
        }
        for (unsigned i = 0; i < THREADS; i++)
                pthread_join(t[i], NULL);
        smc_pool_flush(tpool);
        smc_pool_reset_stats(tpool);
        for (unsigned i = 0; i < 100; i++) {
                struct smc_buf *b;

                CHECK(smc_pool_acquire(tpool, 7, 7, 0, &b) == 0, "acquire");
                smc_pool_release(tpool, b);
        }
        smc_pool_flush(tpool);
        smc_pool_get_stats(tpool, &st);
        CHECK(smc_hist_count(&st.acquire) == 100 && st.reuse + st.alloc == 100 && st.clear == 100, "count %" PRIu64
              ", reuse + alloc %" PRIu64 ", clear %" PRIu64, smc_hist_count(&st.acquire), st.reuse + st.alloc, st.clear);
        CHECK(st.in_use[0] + st.in_use[1] + st.in_use[2] == 0 && st.pending_clear == 0, "all back");
        tpool = smc_pool_free(tpool);
}

int main(void) {
        test_hist_math();
        test_json_layout();
        test_dmb_counters_read();
        test_ring_counters();
        test_ring_counters_init();
        test_pool_reset_and_hist();
        test_pool_downgrade();
        test_pool_threads();
        printf("test-stats: %u checks passed\n", atomic_load(&n_checks));
        return 0;
}
