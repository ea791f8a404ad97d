/* SPDX-License-Identifier: LGPL-2.1-or-later */

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dmb.h"
#include "smc-clc.h"
#include "fileio.h"
#include "stats.h"

static uint64_t realtime_usec(void) {
        struct timespec ts;

        clock_gettime(CLOCK_REALTIME, &ts);
        return (uint64_t) ts.tv_sec * 1000000u + (uint64_t) ts.tv_nsec / 1000u;
}

void smcd_stats_count_fallback_n(struct smcd_stats *s, uint32_t code, uint64_t n) {
        s->fallback_total += n;
        for (unsigned i = 0; i < s->n_fallback; i++)
                if (s->fallback[i].code == code) {
                        s->fallback[i].count += n;
                        return;
                }
        if (s->n_fallback < SMCD_STATS_MAX_FALLBACK)
                s->fallback[s->n_fallback++] = (struct smcd_fallback_count) { .code = code, .count = n };
}

void smcd_stats_count_fallback(struct smcd_stats *s, uint32_t code) {
        smcd_stats_count_fallback_n(s, code, 1);
}

void smcd_stats_count_server_fallback_n(struct smcd_stats *s, uint32_t code, uint64_t n) {
        s->fallback_server += n;
        for (unsigned i = 0; i < s->n_fallback; i++)
                if (s->fallback[i].code == code) {
                        s->fallback[i].server += n;
                        return;
                }
        if (s->n_fallback < SMCD_STATS_MAX_FALLBACK)
                s->fallback[s->n_fallback++] = (struct smcd_fallback_count) { .code = code, .server = n };
}

void smcd_stats_count_server_fallback(struct smcd_stats *s, uint32_t code) {
        smcd_stats_count_server_fallback_n(s, code, 1);
}

void smcd_dmb_counters_read(const void *dmb_base, const struct smcd_dmb_counters *base,
                            struct smcd_dmb_counters *ret) {
        /* const only to the caller: the atomics are loaded, never stored */
        struct smc_dmb_hdr *h = (struct smc_dmb_hdr *) dmb_base;
        struct smcd_dmb_counters v = {
                .prod_bytes = atomic_load_explicit(&h->prod_bytes, memory_order_relaxed),
                .prod_msgs = atomic_load_explicit(&h->prod_msgs, memory_order_relaxed),
                .cons_msgs = atomic_load_explicit(&h->cons_msgs, memory_order_relaxed),
                .cork_flushes = atomic_load_explicit(&h->prod_cork_flushes, memory_order_relaxed),
                .sendfile_calls = atomic_load_explicit(&h->prod_sendfile_calls, memory_order_relaxed),
                .sendfile_bytes = atomic_load_explicit(&h->prod_sendfile_bytes, memory_order_relaxed),
                .inline_sends = atomic_load_explicit(&h->prod_inline_sends, memory_order_relaxed),
        };

        if (base) {
                /* a client may write anything into its DMBs: never below zero */
#define SUB(f) v.f = v.f >= base->f ? v.f - base->f : 0
                SUB(prod_bytes);
                SUB(prod_msgs);
                SUB(cons_msgs);
                SUB(cork_flushes);
                SUB(sendfile_calls);
                SUB(sendfile_bytes);
                SUB(inline_sends);
#undef SUB
        }
        *ret = v;
}

void smcd_stats_count_ended(struct smcd_stats *s, const struct smcd_dmb_counters *client_rx,
                            const struct smcd_dmb_counters *server_rx) {
        /* the client's rx DMB was written by the server and vice versa */
        s->bytes_tx += server_rx->prod_bytes;
        s->bytes_rx += client_rx->prod_bytes;
        s->msgs_tx += client_rx->prod_msgs + server_rx->prod_msgs;
        s->msgs_rx += client_rx->cons_msgs + server_rx->cons_msgs;
        s->cork_flushes += client_rx->cork_flushes + server_rx->cork_flushes;
        s->sendfile_calls += client_rx->sendfile_calls + server_rx->sendfile_calls;
        s->sendfile_bytes += client_rx->sendfile_bytes + server_rx->sendfile_bytes;
        s->inline_sends += client_rx->inline_sends + server_rx->inline_sends;
}

void smcd_stats_reset(struct smcd_stats *s) {
        /* gauges describe the present, not history: keep them */
        struct smcd_stats keep = {
                .conns_client_current = s->conns_client_current,
                .conns_server_current = s->conns_server_current,
                .conns_current = s->conns_current,
                .restored_current = s->restored_current,
                .clients = s->clients,
                .listeners = s->listeners,
                .spare_pairs = s->spare_pairs,
                .seq = s->seq,
                .reset_usec = realtime_usec(),
                .smcr = {
                        .conns_client_current = s->smcr.conns_client_current,
                        .conns_server_current = s->smcr.conns_server_current,
                        .conns_current = s->smcr.conns_current,
                        .lgrs = s->smcr.lgrs,
                },
        };

        *s = keep;
}

static void add_u64(json_object *o, const char *key, uint64_t v) {
        json_object_object_add(o, key, json_object_new_uint64(v));
}

static json_object *u64_array(const uint64_t *v, size_t n, uint64_t *ret_sum) {
        json_object *a = json_object_new_array();
        uint64_t sum = 0;

        for (size_t i = 0; i < n; i++) {
                json_object_array_add(a, json_object_new_uint64(v[i]));
                sum += v[i];
        }
        *ret_sum = sum;
        return a;
}

/* The connection keys of one mode ("smcd", "smcr"); @s NULL: all 0. */
static void add_mode_conns(json_object *d, const struct smcd_stats *s) {
        static const struct smcd_stats zero = {};

        if (!s)
                s = &zero;
        add_u64(d, "conns_client", s->conns_client);
        add_u64(d, "conns_server", s->conns_server);
        add_u64(d, "conns_client_current", s->conns_client_current);
        add_u64(d, "conns_server_current", s->conns_server_current);
        add_u64(d, "conns_current", s->conns_current);
        add_u64(d, "conns_closed", s->conns_closed);
        add_u64(d, "conns_aborted", s->conns_aborted);
        add_u64(d, "handshake_errors", s->handshake_errors);
        add_u64(d, "bytes_tx", s->bytes_tx);
        add_u64(d, "bytes_rx", s->bytes_rx);
        add_u64(d, "msgs_tx", s->msgs_tx);
        add_u64(d, "msgs_rx", s->msgs_rx);
        add_u64(d, "cork_flushes", s->cork_flushes);
        add_u64(d, "sendfile_calls", s->sendfile_calls);
        add_u64(d, "sendfile_bytes", s->sendfile_bytes);
        add_u64(d, "inline_sends", s->inline_sends);
}

/* The name of a reason, or "0x%08x" into @buf for a code without one. */
static const char *reason_name(uint32_t code, char buf[static 11]) {
        const char *name = smc_clc_decl_name(code);

        if (strcmp(name, "SMC_CLC_DECL_UNKNOWN") != 0)
                return name;
        snprintf(buf, 11, "0x%08x", code);
        return buf;
}

static int cmp_fallback(const void *a, const void *b) {
        const struct smcd_fallback_count *x = *(const struct smcd_fallback_count *const *) a,
                                         *y = *(const struct smcd_fallback_count *const *) b;

        return x->code < y->code ? -1 : x->code > y->code;
}

static json_object *fallback_to_json(const struct smcd_stats *s) {
        const struct smcd_fallback_count *sorted[SMCD_STATS_MAX_FALLBACK];
        json_object *o = json_object_new_object(), *a = json_object_new_array();

        add_u64(o, "client", s->fallback_total);
        add_u64(o, "server", s->fallback_server);
        for (unsigned i = 0; i < s->n_fallback; i++)
                sorted[i] = &s->fallback[i];
        qsort(sorted, s->n_fallback, sizeof(sorted[0]), cmp_fallback);
        for (unsigned i = 0; i < s->n_fallback; i++) {
                json_object *e = json_object_new_object();
                char name[11], code[11];

                json_object_object_add(e, "name", json_object_new_string(reason_name(sorted[i]->code, name)));
                snprintf(code, sizeof(code), "0x%08x", sorted[i]->code);
                json_object_object_add(e, "code", json_object_new_string(code));
                add_u64(e, "count", sorted[i]->count);
                add_u64(e, "server", sorted[i]->server);
                json_object_array_add(a, e);
        }
        json_object_object_add(o, "by_reason", a);
        return o;
}

json_object *smcd_hist_to_json(const struct smc_hist *h) {
        json_object *o = json_object_new_object(), *a = json_object_new_array();

        json_object_object_add(o, "unit", json_object_new_string("ns"));
        add_u64(o, "count", smc_hist_count(h));
        add_u64(o, "sum", h->sum);
        for (unsigned i = 0; i < SMC_HIST_BUCKETS; i++) {
                json_object *b = json_object_new_object();

                add_u64(b, "le", smc_hist_le(i));
                add_u64(b, "count", h->bucket[i]);
                json_object_array_add(a, b);
        }
        json_object_object_add(o, "buckets", a);
        return o;
}

json_object *smcd_stats_to_json(const struct smcd_stats *s, const struct smc_pool_stats *p) {
        json_object *root = json_object_new_object(), *d = json_object_new_object(),
                    *fb = json_object_new_object(), *r = json_object_new_object(),
                    *h = json_object_new_object();

        /* "smcd": the connection keys first, then the rest as before */
        add_mode_conns(d, s);
        for (unsigned i = 0; i < s->n_fallback; i++) {
                char other[11];

                add_u64(fb, reason_name(s->fallback[i].code, other), s->fallback[i].count);
        }
        json_object_object_add(d, "fallback", fb);
        add_u64(d, "fallback_total", s->fallback_total);
        add_u64(d, "short_conn_hints", s->short_conn_hints);
        add_u64(d, "close_unknown", s->close_unknown);
        add_u64(d, "rereg_total", s->rereg_total);
        add_u64(d, "restored_loaded", s->restored_loaded);
        add_u64(d, "restored_swept", s->restored_swept);
        add_u64(d, "restored_current", s->restored_current);
        add_u64(d, "clients", s->clients);
        add_u64(d, "clients_total", s->clients_total);
        add_u64(d, "clients_rejected", s->clients_rejected);
        add_u64(d, "clients_over_limit", s->clients_over_limit);
        add_u64(d, "listeners", s->listeners);
        add_u64(d, "listeners_total", s->listeners_total);
        add_u64(d, "conns_netns", s->conns_netns);
        add_u64(d, "conns_requeued", s->conns_requeued);
        add_u64(d, "spare_pairs", s->spare_pairs);
        json_object_object_add(root, "smcd", d);

        {
                const struct smcd_smcr_stats *x = &s->smcr;

                add_u64(r, "conns_client", x->conns_client);
                add_u64(r, "conns_server", x->conns_server);
                add_u64(r, "conns_client_current", x->conns_client_current);
                add_u64(r, "conns_server_current", x->conns_server_current);
                add_u64(r, "conns_current", x->conns_current);
                add_u64(r, "conns_closed", x->conns_closed);
                add_u64(r, "conns_aborted", x->conns_aborted);
                add_u64(r, "handshake_errors", x->handshakes_failed);
                add_u64(r, "bytes_tx", x->bytes_tx);
                add_u64(r, "bytes_rx", x->bytes_rx);
                add_u64(r, "msgs_tx", x->msgs_tx);
                add_u64(r, "msgs_rx", x->msgs_rx);
                add_u64(r, "cork_flushes", x->cork_flushes);
                add_u64(r, "sendfile_calls", x->sendfile_calls);
                add_u64(r, "sendfile_bytes", x->sendfile_bytes);
                add_u64(r, "inline_sends", x->inline_sends);
                add_u64(r, "cdc_sends", x->cdc_sends);
                add_u64(r, "llc_sends", x->llc_sends);
                add_u64(r, "rdma_writes", x->rdma_writes);
                add_u64(r, "link_groups", x->lgrs);
                add_u64(r, "link_groups_total", x->lgrs_total);
                add_u64(r, "links_failed", x->links_failed);
                add_u64(r, "links_added", x->links_added);
                add_u64(r, "failovers", x->failovers);
                add_u64(r, "handshakes_ok", x->handshakes_ok);
                add_u64(r, "handshakes_declined", x->handshakes_declined);
                add_u64(r, "handshakes_failed", x->handshakes_failed);
                add_u64(r, "decline_sent", x->decline_sent);
                add_u64(r, "decline_rcvd", x->decline_rcvd);
        }
        json_object_object_add(root, "smcr", r);
        json_object_object_add(root, "fallback", fallback_to_json(s));

        if (p) {
                json_object *o = json_object_new_object(), *a;
                uint64_t sum, bytes = 0;

                json_object_object_add(o, "buf_clear",
                                       json_object_new_string(p->buf_clear == SMC_POOL_CLEAR_CREATE ? "create" : "release"));
                add_u64(o, "alloc", p->alloc);
                add_u64(o, "reuse", p->reuse);
                add_u64(o, "free", p->free);
                add_u64(o, "clear", p->clear);
                add_u64(o, "bytes_cleared", p->bytes_cleared);
                add_u64(o, "clear_ns", p->clear_ns);
                add_u64(o, "downgrade", p->downgrade);
                add_u64(o, "idle_trimmed", p->idle_trimmed);
                a = u64_array(p->in_use, SMC_DMB_NCLASSES, &sum);
                add_u64(o, "in_use", sum);
                json_object_object_add(o, "in_use_by_class", a);
                for (unsigned c = 0; c < SMC_DMB_NCLASSES; c++)
                        bytes += p->in_use[c] * (SMC_DMB_HDR_LEN + (uint64_t) smc_dmb_class_size(c));
                add_u64(o, "bytes_in_use", bytes);
                a = u64_array(p->free_count, SMC_DMB_NCLASSES, &sum);
                add_u64(o, "free_count", sum);
                json_object_object_add(o, "free_count_by_class", a);
                add_u64(o, "pending_clear", p->pending_clear);
                add_u64(o, "bytes_total", p->bytes_total);
                json_object_object_add(root, "pool", o);
        }

        json_object_object_add(h, "connect", smcd_hist_to_json(&s->connect));
        if (p)
                json_object_object_add(h, "buffer_acquire", smcd_hist_to_json(&p->acquire));
        json_object_object_add(root, "histograms", h);

        add_u64(root, "seq", s->seq);
        add_u64(root, "time_usec", realtime_usec());
        add_u64(root, "reset_usec", s->reset_usec);
        return root;
}

int smcd_stats_write_json(struct smcd_stats *s, const struct smc_pool_stats *pool, const char *path) {
        json_object *root;
        char *text;
        int r;

        s->seq++;
        root = smcd_stats_to_json(s, pool);
        if (!root)
                return -ENOMEM;
        r = asprintf(&text, "%s\n",
                     json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE));
        json_object_put(root);
        if (r < 0)
                return -ENOMEM;
        r = write_file_atomic(path, text, strlen(text), 0644);
        free(text);
        return r;
}
