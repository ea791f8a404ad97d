/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The RoCE verbs layer of smcd (rdma-core libibverbs). See roce.h.
 *
 * Work request ids: the top byte says what a completion belongs to, the low bits which
 * buffer or slot:
 *   WRID_RECV  | index   receive buffer @index (0 .. ROCE_RECV_WRS-1)
 *   WRID_SEND  | slot    send slot @slot; the caller's wr_id is kept in the slot
 *   WRID_WRITE           an unsignaled RDMA WRITE (seen only when flushed or failed)
 *
 * Send queue accounting: an unsignaled WRITE keeps its send queue entry until a later
 * signaled WR completes, so every SEND slot remembers how many WRITEs were posted in
 * front of it and gives all of those entries back when its completion arrives.
 *
 * Lifetime: completions are handled from the completion channel's io handler. A
 * callback may call roce_link_free() on the link being dispatched (or roce_dev_close()
 * on its device): the link (device) is then only marked dead and freed once the
 * dispatch loop is back out of the callback.
 *
 * CQ polling thread (roce_dev_set_cq_poll()): a polled link's CQ is bound to a second
 * completion channel of the device, owned by one thread per device (RocePoller),
 * started with the first polled link and joined when the last one is freed. The
 * thread only polls: under RocePoller.lock (which guards the set of CQs it polls and
 * which it holds while it polls or arms them) it takes work completions out of the CQs
 * and, after dropping the lock, hands them with the link's id to the loop thread
 * through a single-producer / single-consumer ring (wc-ring.h), waking the loop with
 * an eventfd only when the loop said it sleeps. Found nothing for spin_usec, it arms
 * every CQ, looks once more, and then sleeps in poll(2) on its channel and a stop
 * eventfd. The loop's wake handler drains the ring and runs every completion through
 * link_handle_wc(), the same code as the event path; completions of a link freed
 * meanwhile (its id is gone from the map) are dropped. A link leaves the thread's set
 * before its QP and CQ are destroyed. The thread acknowledges each CQ event as soon as
 * it has read it, before anything that can wait (ibv_destroy_cq waits for that). No
 * callback ever runs on the thread; the API stays single-threaded. */

#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "hashmap.h"
#include "list.h"
#include "roce.h"
#include "wc-ring.h"

#define WRID_TYPE_SHIFT 56
#define WRID_RECV  (UINT64_C(1) << WRID_TYPE_SHIFT)
#define WRID_SEND  (UINT64_C(2) << WRID_TYPE_SHIFT)
#define WRID_WRITE (UINT64_C(3) << WRID_TYPE_SHIFT)
#define WRID_TYPE_MASK (UINT64_C(0xff) << WRID_TYPE_SHIFT)
#define WRID_INDEX_MASK (~WRID_TYPE_MASK)

/* the small slots, then the one big slot (index ROCE_SEND_SLOTS) */
#define ROCE_SLOTS_ALL (ROCE_SEND_SLOTS + 1)
#define ROCE_SEND_BUF_LEN ((size_t) ROCE_SEND_SLOTS * ROCE_SEND_SLOT_LEN + ROCE_SEND_BIG_LEN)
#define ROCE_SQ_WRS (ROCE_SLOTS_ALL * (1 + ROCE_WRITES_PER_SEND))
#define ROCE_CQ_ENTRIES (ROCE_RECV_WRS + ROCE_SQ_WRS)
#define ROCE_POLL_BATCH 16
#define POLLER_RING_ENTRIES 1024 /* work completions in flight from a polling thread */
#define POLLER_BATCH 64          /* completions the thread takes per round under its lock */
#define POLLER_CLOCK_EVERY 32    /* empty rounds between clock reads while spinning (a clock
                                  * read is not always cheap: an HPET clocksource traps) */

typedef struct RocePoller RocePoller;

enum link_state {
        LINK_INIT,
        LINK_RTR,
        LINK_RTS,
        LINK_ERR, /* moved to ERR by us (roce_link_set_error or a failure) */
};

struct RoceDev {
        sd_event *event;
        sd_event_source *io;       /* the completion channel */
        sd_event_source *async_io; /* the context's async events */
        struct ibv_context *ctx;
        struct ibv_pd *pd;
        struct ibv_comp_channel *channel;
        char name[IBV_SYSFS_NAME_MAX];
        uint8_t port;
        uint8_t mtu;
        unsigned n_links;
        LIST_HEAD(RoceLink, links);
        bool dispatching;    /* inside the completion handler (or the poller's wake handler) */
        bool close_pending;  /* roce_dev_close() called while dispatching */
        bool cq_thread;      /* new links are polled by the thread (roce_dev_set_cq_poll) */
        uint32_t spin_usec;  /* the thread's spin before it sleeps */
        uint64_t next_link_id; /* ids of links: never reused */
        RocePoller *poller;  /* the CQ polling thread; NULL until the first polled link */
        bool draining;       /* inside the poller's wake handler: the poller stays */
};

/* One CQ of the polling thread's set. */
struct polled_cq {
        struct ibv_cq *cq;
        uint64_t link_id;
        bool broken;         /* poll or arm failed: reported once, no longer polled */
};

struct RocePoller {
        struct ibv_comp_channel *channel; /* the polled links' CQs only */
        int stop_fd;           /* eventfd: loop -> thread, stop */
        int wake_fd;           /* eventfd: thread -> loop, entries in the ring */
        sd_event_source *wake_io;
        pthread_t thread;
        bool thread_started;
        atomic_bool stop;
        _Atomic uint32_t spin_usec;
        WcRing ring;           /* thread (producer) -> loop (consumer) */
        U64Map *links;         /* link id -> RoceLink (loop thread only) */
        unsigned n_links;      /* polled links (loop thread only) */

        pthread_mutex_t lock;  /* guards cqs / n_cqs; held by the thread while it polls */
        atomic_uint lock_wanted; /* the loop waits for @lock: the spinning thread lets it */
        struct polled_cq *cqs;
        size_t n_cqs, cap_cqs;
        size_t next;           /* round-robin start (thread only) */
};

struct send_slot {
        uint64_t wr_id;      /* the caller's */
        unsigned n_writes;   /* unsignaled WRITEs posted just before this SEND */
        bool busy;
};

struct RoceLink {
        RoceDev *dev;
        LIST_FIELDS(RoceLink, links);
        const struct roce_link_ops *ops;
        void *userdata;

        struct ibv_cq *cq;
        struct ibv_qp *qp;
        uint8_t *recv_buf;   /* ROCE_RECV_WRS x ROCE_RECV_BUF_LEN */
        struct ibv_mr *recv_mr;
        uint8_t *send_buf;   /* ROCE_SEND_SLOTS x ROCE_SEND_SLOT_LEN, then the big slot */
        struct ibv_mr *send_mr;
        struct send_slot slots[ROCE_SLOTS_ALL];

        int gid_index;
        uint32_t psn;
        uint32_t max_inline;
        uint32_t sq_cap;        /* send queue depth the QP got */
        uint32_t sq_used;       /* send queue entries not yet given back */
        unsigned slots_free;
        unsigned writes_pending; /* WRITEs posted since the last SEND */
        enum link_state state;

        bool failed;         /* the failed callback ran (or is running) */
        bool busy;           /* its completions are being dispatched */
        bool dead;           /* roce_link_free() called while busy */

        uint64_t id;         /* unique on its device, never reused */
        bool polled;         /* its CQ is polled by the device's thread */
        bool in_poller;      /* in the thread's set and map */
};

static uint64_t wrid_recv(unsigned i) {
        return WRID_RECV | i;
}

static int errno_or(int fallback) {
        return errno > 0 ? -errno : -fallback;
}

/* ---- device ---- */

/* Find a RoCE v2 entry of @port's GID table: the one equal to @want, or any if @want is
 * NULL. Returns 0 and *ret, -ENOENT, or -errno. */
static int find_roce_v2_gid(struct ibv_context *ctx, uint8_t port, const uint8_t *want, struct ibv_gid_entry *ret) {
        struct ibv_device_attr da;
        struct ibv_gid_entry *e;
        size_t total = 0;
        ssize_t n;
        int r = -ENOENT;

        /* ibv_query_gid_table() returns the entries of all ports: room for all of them */
        if (ibv_query_device(ctx, &da) != 0)
                return errno_or(EIO);
        for (uint8_t p = 1; p <= da.phys_port_cnt; p++) {
                struct ibv_port_attr pa;

                if (ibv_query_port(ctx, p, &pa) == 0 && pa.gid_tbl_len > 0)
                        total += (size_t) pa.gid_tbl_len;
        }
        if (total == 0)
                return -ENOENT;
        e = calloc(total, sizeof(*e));
        if (!e)
                return -ENOMEM;
        n = ibv_query_gid_table(ctx, e, total, 0);
        if (n >= 0) {
                for (ssize_t i = 0; i < n && r < 0; i++)
                        if (e[i].port_num == port && e[i].gid_type == IBV_GID_TYPE_ROCE_V2 &&
                            (!want || memcmp(e[i].gid.raw, want, 16) == 0)) {
                                *ret = e[i];
                                r = 0;
                        }
        } else {
                struct ibv_port_attr pa;

                /* no table query (old kernel): one entry at a time */
                if (ibv_query_port(ctx, port, &pa) == 0)
                        for (int i = 0; i < pa.gid_tbl_len && r < 0; i++) {
                                struct ibv_gid_entry g;

                                if (ibv_query_gid_ex(ctx, port, (uint32_t) i, &g, 0) == 0 &&
                                    g.gid_type == IBV_GID_TYPE_ROCE_V2 && (!want || memcmp(g.gid.raw, want, 16) == 0)) {
                                        *ret = g;
                                        r = 0;
                                }
                        }
        }
        free(e);
        return r;
}

static int dev_handle_io(sd_event_source *s, int fd, uint32_t revents, void *userdata);
static int dev_handle_async(sd_event_source *s, int fd, uint32_t revents, void *userdata);
static void link_destroy(RoceLink *l);
static int poller_start(RoceDev *d);
static void poller_stop(RoceDev *d);
static int poller_add(RocePoller *p, RoceLink *l);
static void poller_remove(RocePoller *p, RoceLink *l);

static int fd_nonblock(int fd) {
        int flags = fcntl(fd, F_GETFL);

        if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
                return -errno;
        return 0;
}

int roce_dev_open(sd_event *event, const char *name, uint8_t port, RoceDev **ret) {
        struct ibv_device **list = NULL;
        struct ibv_device *found = NULL;
        struct ibv_device_attr da;
        struct ibv_port_attr pa;
        RoceDev *d = NULL;
        int n = 0, r;

        if (!event || !name || !ret)
                return -EINVAL;
        if (port == 0)
                return -ENODEV;
        errno = 0;
        list = ibv_get_device_list(&n);
        if (!list)
                return errno == ENOSYS ? -ENODEV : errno_or(ENODEV);
        for (int i = 0; i < n && !found; i++)
                if (strcmp(ibv_get_device_name(list[i]), name) == 0)
                        found = list[i];
        if (!found) {
                r = -ENODEV;
                goto fail;
        }
        d = calloc(1, sizeof(*d));
        if (!d) {
                r = -ENOMEM;
                goto fail;
        }
        snprintf(d->name, sizeof(d->name), "%s", name);
        d->port = port;
        errno = 0;
        d->ctx = ibv_open_device(found);
        if (!d->ctx) {
                r = errno_or(ENODEV);
                goto fail;
        }
        ibv_free_device_list(list);
        list = NULL;

        if (ibv_query_device(d->ctx, &da) != 0) {
                r = errno_or(EIO);
                goto fail;
        }
        if (port > da.phys_port_cnt) {
                r = -ENODEV;
                goto fail;
        }
        r = ibv_query_port(d->ctx, port, &pa);
        if (r != 0) {
                r = r > 0 ? -r : -EIO;
                goto fail;
        }
        if (pa.link_layer != IBV_LINK_LAYER_ETHERNET) {
                r = -ENOTSUP;
                goto fail;
        }
        {
                struct ibv_gid_entry g;

                r = find_roce_v2_gid(d->ctx, port, NULL, &g);
                if (r < 0) {
                        r = r == -ENOENT ? -ENOTSUP : r;
                        goto fail;
                }
        }
        d->mtu = (uint8_t) pa.active_mtu;
        d->spin_usec = ROCE_CQ_SPIN_USEC;

        d->pd = ibv_alloc_pd(d->ctx);
        if (!d->pd) {
                r = errno_or(ENOMEM);
                goto fail;
        }
        d->channel = ibv_create_comp_channel(d->ctx);
        if (!d->channel) {
                r = errno_or(ENOMEM);
                goto fail;
        }
        r = fd_nonblock(d->channel->fd);
        if (r < 0)
                goto fail;
        r = sd_event_add_io(event, &d->io, d->channel->fd, EPOLLIN, dev_handle_io, d);
        if (r < 0)
                goto fail;
        (void) sd_event_source_set_description(d->io, "roce-cq");
        r = fd_nonblock(d->ctx->async_fd);
        if (r < 0)
                goto fail;
        r = sd_event_add_io(event, &d->async_io, d->ctx->async_fd, EPOLLIN, dev_handle_async, d);
        if (r < 0)
                goto fail;
        (void) sd_event_source_set_description(d->async_io, "roce-async");
        d->event = sd_event_ref(event);
        *ret = d;
        return 0;
fail:
        if (list)
                ibv_free_device_list(list);
        roce_dev_close(d);
        return r;
}

static void dev_free(RoceDev *d) {
        RoceLink *l;

        /* links the owner forgot: freed without callbacks */
        while ((l = d->links)) {
                l->busy = false;
                link_destroy(l);
        }
        if (d->poller)
                poller_stop(d); /* before the context closes: it owns a channel */
        sd_event_source_disable_unref(d->io);
        sd_event_source_disable_unref(d->async_io);
        if (d->channel)
                (void) ibv_destroy_comp_channel(d->channel);
        if (d->pd)
                (void) ibv_dealloc_pd(d->pd);
        if (d->ctx)
                (void) ibv_close_device(d->ctx);
        sd_event_unref(d->event);
        free(d);
}

RoceDev *roce_dev_close(RoceDev *d) {
        if (!d)
                return NULL;
        if (d->dispatching) {
                d->close_pending = true;
                return NULL;
        }
        dev_free(d);
        return NULL;
}

int roce_dev_set_cq_poll(RoceDev *d, bool thread, uint32_t spin_usec) {
        if (!d || spin_usec > ROCE_CQ_SPIN_MAX_USEC)
                return -EINVAL;
        if (d->close_pending)
                return -ENODEV;
        d->cq_thread = thread;
        d->spin_usec = spin_usec;
        if (d->poller)
                atomic_store_explicit(&d->poller->spin_usec, spin_usec, memory_order_relaxed);
        return 0;
}

bool roce_dev_cq_poll_running(const RoceDev *d) {
        return d && d->poller && d->poller->thread_started;
}

const char *roce_dev_name(const RoceDev *d) {
        return d->name;
}

uint8_t roce_dev_port(const RoceDev *d) {
        return d->port;
}

struct ibv_pd *roce_dev_pd(RoceDev *d) {
        return d->pd;
}

int roce_dev_port_state(RoceDev *d) {
        struct ibv_port_attr pa;
        int r;

        r = ibv_query_port(d->ctx, d->port, &pa);
        if (r != 0)
                return r > 0 ? -r : -EIO;
        if (pa.active_mtu >= IBV_MTU_256 && pa.active_mtu <= IBV_MTU_4096)
                d->mtu = (uint8_t) pa.active_mtu;
        return (int) pa.state;
}

uint8_t roce_dev_mtu(const RoceDev *d) {
        return d->mtu;
}

/* The MAC address of the netdev with index @ifindex, from sysfs. */
static int read_netdev_mac(uint32_t ifindex, uint8_t mac[6]) {
        char ifname[IF_NAMESIZE], path[64 + IF_NAMESIZE];
        unsigned m[6];
        FILE *f;
        int n;

        if (ifindex == 0 || !if_indextoname(ifindex, ifname))
                return -ENOENT;
        snprintf(path, sizeof(path), "/sys/class/net/%s/address", ifname);
        f = fopen(path, "re");
        if (!f)
                return -errno;
        n = fscanf(f, "%2x:%2x:%2x:%2x:%2x:%2x", &m[0], &m[1], &m[2], &m[3], &m[4], &m[5]);
        fclose(f);
        if (n != 6)
                return -EIO;
        for (int i = 0; i < 6; i++)
                mac[i] = (uint8_t) m[i];
        return 0;
}

int roce_dev_gid_for_ipv4(RoceDev *d, const uint8_t ipv4[4], uint8_t gid[16], int *gid_index, uint8_t mac[6]) {
        uint8_t want[16] = { [10] = 0xff, [11] = 0xff };
        struct ibv_gid_entry e;
        int r;

        if (!d || !ipv4 || !gid || !gid_index)
                return -EINVAL;
        memcpy(want + 12, ipv4, 4);
        r = find_roce_v2_gid(d->ctx, d->port, want, &e);
        if (r < 0)
                return r;
        if (mac && read_netdev_mac(e.ndev_ifindex, mac) < 0)
                return -ENOENT;
        memcpy(gid, e.gid.raw, 16);
        *gid_index = (int) e.gid_index;
        return 0;
}

int roce_mr_reg(RoceDev *d, void *addr, size_t len, bool remote_write, struct ibv_mr **ret) {
        struct ibv_mr *mr;
        int access = IBV_ACCESS_LOCAL_WRITE | (remote_write ? IBV_ACCESS_REMOTE_WRITE : 0);

        if (!d || !addr || len == 0 || !ret)
                return -EINVAL;
        errno = 0;
        mr = ibv_reg_mr(d->pd, addr, len, access);
        if (!mr)
                return errno_or(EIO);
        *ret = mr;
        return 0;
}

/* ---- link ---- */

static int link_post_recv(RoceLink *l, unsigned i) {
        struct ibv_sge sge = {
                .addr = (uintptr_t) (l->recv_buf + (size_t) i * ROCE_RECV_BUF_LEN),
                .length = ROCE_RECV_BUF_LEN,
                .lkey = l->recv_mr->lkey,
        };
        struct ibv_recv_wr wr = { .wr_id = wrid_recv(i), .sg_list = &sge, .num_sge = 1 }, *bad;
        int r;

        r = ibv_post_recv(l->qp, &wr, &bad);
        return r > 0 ? -r : r < 0 ? -EIO : 0;
}

static void link_to_err(RoceLink *l) {
        struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

        if (l->state == LINK_ERR)
                return;
        l->state = LINK_ERR;
        (void) ibv_modify_qp(l->qp, &a, IBV_QP_STATE);
}

static void link_destroy(RoceLink *l) {
        RoceDev *d = l->dev;
        bool polled = l->in_poller;

        /* out of the polling thread's set first: it never touches the CQ again */
        if (polled)
                poller_remove(d->poller, l);
        if (l->qp)
                (void) ibv_destroy_qp(l->qp);
        if (l->cq)
                (void) ibv_destroy_cq(l->cq);
        if (l->recv_mr)
                (void) ibv_dereg_mr(l->recv_mr);
        if (l->send_mr)
                (void) ibv_dereg_mr(l->send_mr);
        free(l->recv_buf);
        free(l->send_buf);
        if (d) {
                LIST_REMOVE(links, d->links, l);
                d->n_links--;
        }
        free(l);
        /* the last polled link: the thread goes (from the wake handler: when it returns) */
        if (d && d->poller && d->poller->n_links == 0 && !d->draining)
                poller_stop(d);
}

static uint32_t random_psn(void) {
        uint32_t v = 0;

        if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != sizeof(v)) {
                struct timespec ts;

                clock_gettime(CLOCK_MONOTONIC, &ts);
                v = (uint32_t) ts.tv_nsec ^ (uint32_t) getpid() * 2654435761u;
        }
        return v & 0xffffff;
}

int roce_link_new(RoceDev *d, int gid_index, uint32_t inline_want, const struct roce_link_ops *ops,
                  void *userdata, RoceLink **ret) {
        struct ibv_qp_init_attr ia = {
                .qp_type = IBV_QPT_RC,
                .sq_sig_all = 0,
                .cap = {
                        .max_send_wr = ROCE_SQ_WRS,
                        .max_recv_wr = ROCE_RECV_WRS,
                        .max_send_sge = 2,
                        .max_recv_sge = 1,
                        .max_inline_data = inline_want,
                },
        };
        struct ibv_qp_attr qa = {
                .qp_state = IBV_QPS_INIT,
                .pkey_index = 0,
                .qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
        };
        RoceLink *l;
        int r;

        /* the address vector's sgid_index is 8 bits wide */
        if (!d || !ops || !ops->recv || !ops->send_done || !ops->failed || !ret || gid_index < 0 || gid_index > 255)
                return -EINVAL;
        if (d->close_pending)
                return -ENODEV;
        l = calloc(1, sizeof(*l));
        if (!l)
                return -ENOMEM;
        l->dev = d;
        l->ops = ops;
        l->userdata = userdata;
        l->gid_index = gid_index;
        l->psn = random_psn();
        l->slots_free = ROCE_SEND_SLOTS;
        l->state = LINK_INIT;
        l->id = ++d->next_link_id;
        LIST_PREPEND(links, d->links, l);
        d->n_links++;
        if (d->cq_thread) {
                if (!d->poller) {
                        r = poller_start(d);
                        if (r < 0)
                                goto fail;
                }
                l->polled = true;
        }

        if (posix_memalign((void **) &l->recv_buf, 4096, (size_t) ROCE_RECV_WRS * ROCE_RECV_BUF_LEN) != 0 ||
            posix_memalign((void **) &l->send_buf, 64, ROCE_SEND_BUF_LEN) != 0) {
                r = -ENOMEM;
                goto fail;
        }
        memset(l->send_buf, 0, ROCE_SEND_BUF_LEN);
        r = roce_mr_reg(d, l->recv_buf, (size_t) ROCE_RECV_WRS * ROCE_RECV_BUF_LEN, false, &l->recv_mr);
        if (r < 0)
                goto fail;
        r = roce_mr_reg(d, l->send_buf, ROCE_SEND_BUF_LEN, false, &l->send_mr);
        if (r < 0)
                goto fail;

        errno = 0;
        l->cq = ibv_create_cq(d->ctx, ROCE_CQ_ENTRIES, l, l->polled ? d->poller->channel : d->channel, 0);
        if (!l->cq) {
                r = errno_or(ENOMEM);
                goto fail;
        }
        if (l->polled)
                r = poller_add(d->poller, l); /* adds and arms it */
        else {
                r = ibv_req_notify_cq(l->cq, 0);
                r = r > 0 ? -r : r < 0 ? -EIO : 0;
        }
        if (r < 0)
                goto fail;
        ia.send_cq = ia.recv_cq = l->cq;
        ia.qp_context = l;
        errno = 0;
        l->qp = ibv_create_qp(d->pd, &ia);
        if (!l->qp) {
                r = errno_or(EINVAL);
                goto fail;
        }
        /* what the provider granted (>= what was asked) */
        l->max_inline = ia.cap.max_inline_data;
        l->sq_cap = ia.cap.max_send_wr;

        qa.port_num = d->port;
        r = ibv_modify_qp(l->qp, &qa, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
        if (r != 0) {
                r = r > 0 ? -r : -EIO;
                goto fail;
        }
        for (unsigned i = 0; i < ROCE_RECV_WRS; i++) {
                r = link_post_recv(l, i);
                if (r < 0)
                        goto fail;
        }
        *ret = l;
        return 0;
fail:
        link_destroy(l);
        return r;
}

int roce_link_rtr(RoceLink *l, uint32_t dqpn, uint32_t dpsn, const uint8_t dgid[16], uint8_t mtu) {
        struct ibv_qp_attr a = {
                .qp_state = IBV_QPS_RTR,
                .path_mtu = (enum ibv_mtu) mtu,
                .dest_qp_num = dqpn & 0xffffff,
                .rq_psn = dpsn & 0xffffff,
                .max_dest_rd_atomic = 1,
                .min_rnr_timer = 5,
                .ah_attr = {
                        .is_global = 1,
                        .port_num = l ? l->dev->port : 0,
                        .grh = {
                                .hop_limit = 1,
                                .sgid_index = l ? (uint8_t) l->gid_index : 0,
                        },
                },
        };
        int r;

        if (!l || !dgid || mtu < IBV_MTU_256 || mtu > IBV_MTU_4096 || dqpn > 0xffffff)
                return -EINVAL;
        if (l->failed || l->state == LINK_ERR)
                return -ENOTCONN;
        if (l->state != LINK_INIT)
                return -EINVAL;
        memcpy(a.ah_attr.grh.dgid.raw, dgid, 16);
        r = ibv_modify_qp(l->qp, &a,
                          IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
        if (r != 0)
                return r > 0 ? -r : -EIO;
        l->state = LINK_RTR;
        return 0;
}

int roce_link_rts(RoceLink *l) {
        struct ibv_qp_attr a = {
                .qp_state = IBV_QPS_RTS,
                .timeout = 15,
                .retry_cnt = 7,
                .rnr_retry = 7,
                .sq_psn = l ? l->psn : 0,
                .max_rd_atomic = 1,
        };
        int r;

        if (!l)
                return -EINVAL;
        if (l->failed || l->state == LINK_ERR)
                return -ENOTCONN;
        if (l->state != LINK_RTR)
                return -EINVAL;
        r = ibv_modify_qp(l->qp, &a,
                          IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                  IBV_QP_MAX_QP_RD_ATOMIC);
        if (r != 0)
                return r > 0 ? -r : -EIO;
        l->state = LINK_RTS;
        return 0;
}

int roce_link_set_ops(RoceLink *l, const struct roce_link_ops *ops, void *userdata) {
        if (!l || !ops || !ops->recv || !ops->send_done || !ops->failed)
                return -EINVAL;
        l->ops = ops;
        l->userdata = userdata;
        return 0;
}

void roce_link_set_error(RoceLink *l) {
        if (l)
                link_to_err(l);
}

RoceLink *roce_link_free(RoceLink *l) {
        if (!l)
                return NULL;
        if (l->busy) {
                /* inside one of its callbacks: the dispatch loop frees it */
                if (!l->dead)
                        link_to_err(l);
                l->dead = true;
                return NULL;
        }
        link_destroy(l);
        return NULL;
}

uint32_t roce_link_qpn(const RoceLink *l) {
        return l->qp->qp_num;
}

uint32_t roce_link_psn(const RoceLink *l) {
        return l->psn;
}

uint32_t roce_link_max_inline(const RoceLink *l) {
        return l->max_inline;
}

unsigned roce_link_send_slots_free(const RoceLink *l) {
        return l->slots_free;
}

static bool link_usable(const RoceLink *l) {
        return l->state == LINK_RTS && !l->failed && !l->dead;
}

int roce_link_send(RoceLink *l, const void *msg, uint32_t len, uint64_t wr_id, bool try_inline, bool *inlined) {
        struct ibv_sge sge;
        struct ibv_send_wr wr = {}, *bad;
        unsigned i;
        bool inl;
        int r;

        if (inlined)
                *inlined = false;
        if (!l || (!msg && len > 0) || len > ROCE_SEND_BIG_LEN)
                return -EINVAL;
        if (!link_usable(l))
                return -ENOTCONN;
        if (len > ROCE_SEND_SLOT_LEN) {
                /* the big slot (v2 LLC messages): one at a time, not in slots_free */
                if (l->slots[ROCE_SEND_SLOTS].busy || l->sq_used + 1 > l->sq_cap)
                        return -EAGAIN;
                i = ROCE_SEND_SLOTS;
        } else {
                if (l->slots_free == 0 || l->sq_used + 1 > l->sq_cap)
                        return -EAGAIN;
                for (i = 0; i < ROCE_SEND_SLOTS && l->slots[i].busy; i++)
                        ;
                if (i == ROCE_SEND_SLOTS)
                        return -EAGAIN; /* not reached: slots_free says otherwise */
        }
        inl = try_inline && len > 0 && len <= l->max_inline;
        if (len > 0)
                memcpy(l->send_buf + (size_t) i * ROCE_SEND_SLOT_LEN, msg, len);
        sge = (struct ibv_sge) {
                .addr = (uintptr_t) (l->send_buf + (size_t) i * ROCE_SEND_SLOT_LEN),
                .length = len,
                .lkey = l->send_mr->lkey,
        };
        wr.wr_id = WRID_SEND | i;
        wr.sg_list = &sge;
        wr.num_sge = len > 0 ? 1 : 0;
        wr.opcode = IBV_WR_SEND;
        wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | (inl ? IBV_SEND_INLINE : 0);
        r = ibv_post_send(l->qp, &wr, &bad);
        if (r != 0)
                return r == ENOMEM ? -EAGAIN : r > 0 ? -r : -EIO;
        l->slots[i] = (struct send_slot) { .wr_id = wr_id, .n_writes = l->writes_pending, .busy = true };
        if (i < ROCE_SEND_SLOTS)
                l->slots_free--;
        l->sq_used++;
        l->writes_pending = 0;
        if (inlined)
                *inlined = inl;
        return 0;
}

int roce_link_write(RoceLink *l, const struct ibv_sge *sge, int nsge, uint64_t raddr, uint32_t rkey) {
        struct ibv_sge s[2];
        struct ibv_send_wr wr = {}, *bad;
        int r;

        if (!l || !sge || nsge < 1 || nsge > 2)
                return -EINVAL;
        for (int i = 0; i < nsge; i++)
                if (sge[i].length == 0)
                        return -EINVAL;
        if (!link_usable(l))
                return -ENOTCONN;
        if (l->writes_pending >= ROCE_WRITES_PER_SEND)
                return -EINVAL;
        /* keep one entry for the SEND that must follow */
        if (l->sq_used + 2 > l->sq_cap)
                return -EAGAIN;
        memcpy(s, sge, (size_t) nsge * sizeof(*s));
        wr.wr_id = WRID_WRITE;
        wr.sg_list = s;
        wr.num_sge = nsge;
        wr.opcode = IBV_WR_RDMA_WRITE;
        wr.send_flags = 0; /* unsignaled: the following SEND's completion covers it */
        wr.wr.rdma.remote_addr = raddr;
        wr.wr.rdma.rkey = rkey;
        r = ibv_post_send(l->qp, &wr, &bad);
        if (r != 0)
                return r == ENOMEM ? -EAGAIN : r > 0 ? -r : -EIO;
        l->sq_used++;
        l->writes_pending++;
        return 0;
}

/* ---- completions ---- */

static void link_fail(RoceLink *l, enum ibv_wc_status status) {
        if (l->failed)
                return;
        l->failed = true;
        link_to_err(l); /* flush whatever is still posted */
        l->ops->failed(l->userdata, status);
}

static void link_handle_wc(RoceLink *l, const struct ibv_wc *wc) {
        uint64_t type = wc->wr_id & WRID_TYPE_MASK;
        uint64_t idx = wc->wr_id & WRID_INDEX_MASK;

        if (wc->status != IBV_WC_SUCCESS && !l->failed) {
                link_fail(l, wc->status);
                if (l->dead)
                        return;
        }

        if (type == WRID_SEND && idx < ROCE_SLOTS_ALL && l->slots[idx].busy) {
                struct send_slot *s = &l->slots[idx];
                uint64_t wr_id = s->wr_id;
                uint32_t give = 1 + s->n_writes;

                s->busy = false;
                if (idx < ROCE_SEND_SLOTS)
                        l->slots_free++;
                l->sq_used = l->sq_used >= give ? l->sq_used - give : 0;
                l->ops->send_done(l->userdata, wr_id, wc->status);
                return;
        }
        if (type == WRID_RECV && idx < ROCE_RECV_WRS) {
                int r;

                if (l->failed || wc->status != IBV_WC_SUCCESS)
                        return; /* flushed, or dropped after the failure: not reposted */
                if (wc->opcode == IBV_WC_RECV)
                        l->ops->recv(l->userdata, l->recv_buf + (size_t) idx * ROCE_RECV_BUF_LEN, wc->byte_len);
                if (l->dead || l->failed || l->state == LINK_ERR)
                        return;
                r = link_post_recv(l, (unsigned) idx);
                if (r < 0)
                        link_fail(l, IBV_WC_GENERAL_ERR);
                return;
        }
        /* WRID_WRITE (only ever seen with an error status) or a stray id: nothing to do */
}

/* One completion handed over by the polling thread: the same handling as a completion
 * of link_dispatch(), then free the link if a callback asked for it. */
static void link_dispatch_one(RoceLink *l, const struct ibv_wc *wc) {
        l->busy = true;
        link_handle_wc(l, wc);
        l->busy = false;
        if (l->dead)
                link_destroy(l);
}

/* Re-arm @l's CQ and drain it, then free the link if a callback asked for it. */
static void link_dispatch(RoceLink *l) {
        struct ibv_wc wc[ROCE_POLL_BATCH];
        int n;

        l->busy = true;
        /* arm first, then poll: a completion that lands in between raises a new event */
        if (ibv_req_notify_cq(l->cq, 0) != 0)
                link_fail(l, IBV_WC_GENERAL_ERR);
        while (!l->dead && !l->dev->close_pending) {
                n = ibv_poll_cq(l->cq, ROCE_POLL_BATCH, wc);
                if (n < 0) {
                        link_fail(l, IBV_WC_GENERAL_ERR);
                        break;
                }
                if (n == 0)
                        break;
                for (int i = 0; i < n && !l->dead && !l->dev->close_pending; i++)
                        link_handle_wc(l, &wc[i]);
        }
        l->busy = false;
        if (l->dead)
                link_destroy(l);
}

static int dev_handle_io(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        RoceDev *d = userdata;

        d->dispatching = true;
        while (!d->close_pending) {
                struct ibv_cq *cq;
                void *ctx;

                if (ibv_get_cq_event(d->channel, &cq, &ctx) != 0)
                        break; /* EAGAIN: nothing more queued */
                ibv_ack_cq_events(cq, 1);
                link_dispatch(ctx);
        }
        d->dispatching = false;
        if (d->close_pending)
                dev_free(d);
        return 0;
}

/* Async events: a QP that went to an error state by itself is moved to ERR by us too,
 * so its posted WRs are flushed and the failed callback runs from the completion path;
 * a fatal device error does that for every link. Everything else (port and GID
 * changes: the netlink monitor sees those) is only acknowledged. */
static int dev_handle_async(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        RoceDev *d = userdata;
        struct ibv_async_event e;

        while (ibv_get_async_event(d->ctx, &e) == 0) {
                RoceLink *l = NULL, *cq_link = NULL;
                bool all = false;

                switch (e.event_type) {
                case IBV_EVENT_QP_FATAL:
                case IBV_EVENT_QP_REQ_ERR:
                case IBV_EVENT_QP_ACCESS_ERR:
                        l = e.element.qp ? e.element.qp->qp_context : NULL;
                        break;
                case IBV_EVENT_CQ_ERR:
                        /* the CQ is unusable: no flushes will come through it */
                        cq_link = e.element.cq ? e.element.cq->cq_context : NULL;
                        break;
                case IBV_EVENT_DEVICE_FATAL:
                        all = true;
                        break;
                default:
                        break;
                }
                ibv_ack_async_event(&e);
                if (l)
                        link_to_err(l);
                if (cq_link) {
                        cq_link->busy = true;
                        link_fail(cq_link, IBV_WC_GENERAL_ERR);
                        cq_link->busy = false;
                        if (cq_link->dead)
                                link_destroy(cq_link);
                }
                if (all)
                        LIST_FOREACH(links, l, d->links)
                                link_to_err(l);
        }
        return 0;
}

/* ---- the CQ polling thread ---- */

static uint64_t mono_usec(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000u + (uint64_t) ts.tv_nsec / 1000u;
}

static void efd_signal(int fd) {
        uint64_t one = 1;

        /* never blocks (the counter cannot reach its limit); a failed write of a
         * non-blocking eventfd means it is readable already */
        (void) !write(fd, &one, sizeof(one));
}

/* Thread, under p->lock: a completion that reports a CQ the thread cannot poll or arm
 * any more (the loop fails the link with it, as link_dispatch() does). */
static size_t poller_broken(struct polled_cq *c, struct wc_ring_entry *out) {
        c->broken = true;
        out->link_id = c->link_id;
        out->wc = (struct ibv_wc) { .wr_id = 0, .status = IBV_WC_GENERAL_ERR };
        return 1;
}

/* Thread, under p->lock: take up to @max completions out of the set's CQs (round
 * robin) into @out. Returns how many. */
static size_t poller_poll_all(RocePoller *p, struct wc_ring_entry *out, size_t max) {
        struct ibv_wc wc[ROCE_POLL_BATCH];
        size_t n = 0;

        for (size_t k = 0; k < p->n_cqs && n < max; k++) {
                struct polled_cq *c = &p->cqs[(p->next + k) % p->n_cqs];
                int want = max - n < (size_t) ROCE_POLL_BATCH ? (int) (max - n) : ROCE_POLL_BATCH, got;

                if (c->broken)
                        continue;
                got = ibv_poll_cq(c->cq, want, wc);
                if (got < 0) {
                        n += poller_broken(c, &out[n]);
                        continue;
                }
                for (int i = 0; i < got; i++) {
                        out[n].link_id = c->link_id;
                        out[n].wc = wc[i];
                        n++;
                }
        }
        if (p->n_cqs > 0)
                p->next = (p->next + 1) % p->n_cqs;
        return n;
}

/* Thread, under p->lock: ask for an event from every CQ of the set. Returns the
 * completions that report CQs which could not be armed (in @out, up to @max). */
static size_t poller_arm_all(RocePoller *p, struct wc_ring_entry *out, size_t max) {
        size_t n = 0;

        for (size_t k = 0; k < p->n_cqs && n < max; k++)
                if (!p->cqs[k].broken && ibv_req_notify_cq(p->cqs[k].cq, 0) != 0)
                        n += poller_broken(&p->cqs[k], &out[n]);
        return n;
}

/* Thread: hand @n entries to the loop; waits for room when the ring is full. Returns
 * false when told to stop meanwhile (the rest is dropped: nobody is left to take it). */
static bool poller_push(RocePoller *p, const struct wc_ring_entry *e, size_t n) {
        for (size_t i = 0; i < n; i++)
                while (!wc_ring_push(&p->ring, e[i].link_id, &e[i].wc)) {
                        if (wc_ring_wake_needed(&p->ring))
                                efd_signal(p->wake_fd);
                        if (atomic_load_explicit(&p->stop, memory_order_acquire))
                                return false;
                        sched_yield();
                }
        if (wc_ring_wake_needed(&p->ring))
                efd_signal(p->wake_fd);
        return true;
}

/* Thread: take p->lock; first let the loop thread have it if it waits (the spinning
 * thread would otherwise take it again and again before the woken waiter runs). */
static void poller_lock(RocePoller *p) {
        while (atomic_load_explicit(&p->lock_wanted, memory_order_relaxed) > 0)
                sched_yield();
        pthread_mutex_lock(&p->lock);
}

/* Loop thread: take p->lock. */
static void loop_lock(RocePoller *p) {
        atomic_fetch_add_explicit(&p->lock_wanted, 1, memory_order_relaxed);
        pthread_mutex_lock(&p->lock);
        atomic_fetch_sub_explicit(&p->lock_wanted, 1, memory_order_relaxed);
}

static void *poller_main(void *userdata) {
        RocePoller *p = userdata;
        struct wc_ring_entry batch[POLLER_BATCH];
        uint64_t idle_since = 0;
        unsigned empty = 0;
        bool spinning = false;

        while (!atomic_load_explicit(&p->stop, memory_order_acquire)) {
                struct pollfd pfd[2] = {
                        { .fd = p->channel->fd, .events = POLLIN },
                        { .fd = p->stop_fd, .events = POLLIN },
                };
                uint32_t spin;
                size_t n;

                poller_lock(p);
                n = poller_poll_all(p, batch, POLLER_BATCH);
                pthread_mutex_unlock(&p->lock);
                if (n > 0) {
                        if (!poller_push(p, batch, n))
                                break;
                        spinning = false;
                        continue;
                }
                spin = atomic_load_explicit(&p->spin_usec, memory_order_relaxed);
                if (spin > 0) {
                        /* spin: the clock starts at the first empty round */
                        if (!spinning) {
                                spinning = true;
                                empty = 0;
                                idle_since = mono_usec();
                                continue;
                        }
                        if (++empty % POLLER_CLOCK_EVERY != 0 || mono_usec() - idle_since < spin)
                                continue;
                }
                spinning = false;

                /* idle: arm every CQ, then look once more (a completion that came in
                 * between is not announced by the channel) */
                poller_lock(p);
                n = poller_arm_all(p, batch, POLLER_BATCH);
                n += poller_poll_all(p, batch + n, POLLER_BATCH - n);
                pthread_mutex_unlock(&p->lock);
                if (n > 0) {
                        if (!poller_push(p, batch, n))
                                break;
                        continue;
                }
                if (poll(pfd, 2, -1) < 0 && errno != EINTR) {
                        /* not expected with two valid fds: do not spin on it */
                        struct timespec ts = { .tv_nsec = 1000000 };

                        nanosleep(&ts, NULL);
                }
                if (pfd[0].revents) {
                        struct ibv_cq *cq;
                        void *ctx;

                        /* acknowledge at once: ibv_destroy_cq() in the loop thread waits
                         * for the acknowledgements of the events read (it does not hold
                         * the lock then). Under the lock, which orders this after the
                         * CQ's creation for TSan too (the kernel orders it for real). */
                        poller_lock(p);
                        while (ibv_get_cq_event(p->channel, &cq, &ctx) == 0)
                                ibv_ack_cq_events(cq, 1);
                        pthread_mutex_unlock(&p->lock);
                }
        }
        return NULL;
}

/* Loop thread: the thread said there are entries. Drains the ring (at most its
 * capacity per call, then it comes back through the eventfd so other event sources
 * get their turn) and dispatches each completion as the event path does. */
static int poller_handle_wake(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        RoceDev *d = userdata;
        RocePoller *p = d->poller;
        uint64_t budget = wc_ring_capacity(&p->ring), v;
        struct wc_ring_entry e;

        /* first take the wake-up, then drain: a wake-up written meanwhile is kept */
        (void) !read(p->wake_fd, &v, sizeof(v));
        d->dispatching = true;
        d->draining = true;
        for (;;) {
                while (!d->close_pending && budget > 0 && wc_ring_pop(&p->ring, &e)) {
                        RoceLink *l = u64map_get(p->links, e.link_id);

                        budget--;
                        if (l) /* else freed since: dropped */
                                link_dispatch_one(l, &e.wc);
                }
                if (d->close_pending)
                        break;
                if (budget == 0) {
                        /* the sleeping flag stays down (the thread does not write):
                         * wake ourselves for the rest */
                        efd_signal(p->wake_fd);
                        break;
                }
                if (wc_ring_prepare_sleep(&p->ring))
                        break;
        }
        d->draining = false;
        d->dispatching = false;
        if (d->close_pending)
                dev_free(d);
        else if (d->poller && d->poller->n_links == 0)
                poller_stop(d);
        return 0;
}

static int poller_start(RoceDev *d) {
        sigset_t all, old;
        RocePoller *p;
        int r;

        p = calloc(1, sizeof(*p));
        if (!p)
                return -ENOMEM;
        p->stop_fd = p->wake_fd = -1;
        atomic_init(&p->stop, false);
        atomic_init(&p->spin_usec, d->spin_usec);
        atomic_init(&p->lock_wanted, 0);
        r = pthread_mutex_init(&p->lock, NULL);
        if (r != 0) {
                free(p);
                return -r;
        }
        d->poller = p;
        r = wc_ring_init(&p->ring, POLLER_RING_ENTRIES);
        if (r < 0)
                goto fail;
        p->links = u64map_new();
        if (!p->links) {
                r = -ENOMEM;
                goto fail;
        }
        errno = 0;
        p->channel = ibv_create_comp_channel(d->ctx);
        if (!p->channel) {
                r = errno_or(ENOMEM);
                goto fail;
        }
        r = fd_nonblock(p->channel->fd);
        if (r < 0)
                goto fail;
        p->stop_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        p->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (p->stop_fd < 0 || p->wake_fd < 0) {
                r = -errno;
                goto fail;
        }
        r = sd_event_add_io(d->event, &p->wake_io, p->wake_fd, EPOLLIN, poller_handle_wake, d);
        if (r < 0)
                goto fail;
        (void) sd_event_source_set_description(p->wake_io, "roce-cq-poll");
        /* no signal for the thread: sd-event's signalfds need them blocked everywhere */
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        r = pthread_create(&p->thread, NULL, poller_main, p);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (r != 0) {
                r = -r;
                goto fail;
        }
        p->thread_started = true;
        {
                char name[16];

                snprintf(name, sizeof(name), "cq-%.12s", d->name); /* 15 characters at most */
                (void) pthread_setname_np(p->thread, name);
        }
        return 0;
fail:
        poller_stop(d);
        return r;
}

/* Stop and join the thread and free the poller (all polled links are gone). */
static void poller_stop(RoceDev *d) {
        RocePoller *p = d->poller;

        if (!p)
                return;
        if (p->thread_started) {
                atomic_store_explicit(&p->stop, true, memory_order_release);
                efd_signal(p->stop_fd);
                (void) pthread_join(p->thread, NULL);
        }
        sd_event_source_disable_unref(p->wake_io);
        if (p->stop_fd >= 0)
                close(p->stop_fd);
        if (p->wake_fd >= 0)
                close(p->wake_fd);
        if (p->channel)
                (void) ibv_destroy_comp_channel(p->channel);
        wc_ring_done(&p->ring);
        u64map_free(p->links);
        free(p->cqs);
        pthread_mutex_destroy(&p->lock);
        free(p);
        d->poller = NULL;
}

/* Put @l's CQ into the thread's set and arm it. Returns 0 or -errno. */
static int poller_add(RocePoller *p, RoceLink *l) {
        int r;

        r = u64map_put(p->links, l->id, l);
        if (r < 0)
                return r;
        loop_lock(p);
        if (p->n_cqs == p->cap_cqs) {
                size_t cap = p->cap_cqs ? p->cap_cqs * 2 : 8;
                struct polled_cq *n = realloc(p->cqs, cap * sizeof(*n));

                if (!n) {
                        pthread_mutex_unlock(&p->lock);
                        u64map_remove(p->links, l->id);
                        return -ENOMEM;
                }
                p->cqs = n;
                p->cap_cqs = cap;
        }
        r = ibv_req_notify_cq(l->cq, 0);
        if (r == 0)
                p->cqs[p->n_cqs++] = (struct polled_cq) { .cq = l->cq, .link_id = l->id };
        pthread_mutex_unlock(&p->lock);
        if (r != 0) {
                u64map_remove(p->links, l->id);
                return r > 0 ? -r : -EIO;
        }
        p->n_links++;
        l->in_poller = true;
        return 0;
}

/* Take @l's CQ out of the thread's set (once this returns, the thread never touches it
 * again) and forget its id (completions of it still in the ring are dropped). */
static void poller_remove(RocePoller *p, RoceLink *l) {
        loop_lock(p);
        for (size_t i = 0; i < p->n_cqs; i++)
                if (p->cqs[i].cq == l->cq) {
                        p->cqs[i] = p->cqs[--p->n_cqs];
                        break;
                }
        pthread_mutex_unlock(&p->lock);
        u64map_remove(p->links, l->id);
        p->n_links--;
        l->in_poller = false;
}
