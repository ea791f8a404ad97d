/* SPDX-License-Identifier: LGPL-2.1-or-later */

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "smc-clc.h"
#include "stats.h"

void smcd_stats_count_fallback(struct smcd_stats *s, uint32_t code) {
        s->fallback_total++;
        for (unsigned i = 0; i < s->n_fallback; i++)
                if (s->fallback[i].code == code) {
                        s->fallback[i].count++;
                        return;
                }
        if (s->n_fallback < SMCD_STATS_MAX_FALLBACK)
                s->fallback[s->n_fallback++] = (struct smcd_fallback_count) { code, 1 };
}

void smcd_stats_reset(struct smcd_stats *s) {
        /* gauges describe the present, not history: keep them */
        struct smcd_stats keep = {
                .conns_client_current = s->conns_client_current,
                .conns_server_current = s->conns_server_current,
                .conns_current = s->conns_current,
                .clients = s->clients,
                .listeners = s->listeners,
                .seq = s->seq,
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

json_object *smcd_stats_to_json(const struct smcd_stats *s, const struct smc_pool_stats *p) {
        json_object *root = json_object_new_object(), *d = json_object_new_object(),
                    *fb = json_object_new_object();
        struct timespec ts;

        add_u64(d, "conns_client", s->conns_client);
        add_u64(d, "conns_server", s->conns_server);
        add_u64(d, "conns_client_current", s->conns_client_current);
        add_u64(d, "conns_server_current", s->conns_server_current);
        add_u64(d, "conns_current", s->conns_current);
        add_u64(d, "conns_closed", s->conns_closed);
        add_u64(d, "conns_aborted", s->conns_aborted);
        for (unsigned i = 0; i < s->n_fallback; i++) {
                char other[32];
                const char *name = smc_clc_decl_name(s->fallback[i].code);
                if (strcmp(name, "SMC_CLC_DECL_UNKNOWN") == 0) {
                        snprintf(other, sizeof(other), "0x%08x", s->fallback[i].code);
                        name = other;
                }
                add_u64(fb, name, s->fallback[i].count);
        }
        json_object_object_add(d, "fallback", fb);
        add_u64(d, "fallback_total", s->fallback_total);
        add_u64(d, "handshake_errors", s->handshake_errors);
        add_u64(d, "close_unknown", s->close_unknown);
        add_u64(d, "bytes_tx", s->bytes_tx);
        add_u64(d, "bytes_rx", s->bytes_rx);
        add_u64(d, "clients", s->clients);
        add_u64(d, "clients_total", s->clients_total);
        add_u64(d, "clients_rejected", s->clients_rejected);
        add_u64(d, "clients_over_limit", s->clients_over_limit);
        add_u64(d, "listeners", s->listeners);
        add_u64(d, "listeners_total", s->listeners_total);
        json_object_object_add(root, "smcd", d);

        if (p) {
                json_object *o = json_object_new_object(), *a;
                uint64_t sum;

                add_u64(o, "alloc", p->alloc);
                add_u64(o, "reuse", p->reuse);
                add_u64(o, "free", p->free);
                add_u64(o, "clear", p->clear);
                add_u64(o, "bytes_cleared", p->bytes_cleared);
                add_u64(o, "clear_ns", p->clear_ns);
                a = u64_array(p->in_use, SMC_DMB_NCLASSES, &sum);
                add_u64(o, "in_use", sum);
                json_object_object_add(o, "in_use_by_class", a);
                a = u64_array(p->free_count, SMC_DMB_NCLASSES, &sum);
                add_u64(o, "free_count", sum);
                json_object_object_add(o, "free_count_by_class", a);
                add_u64(o, "pending_clear", p->pending_clear);
                add_u64(o, "bytes_total", p->bytes_total);
                json_object_object_add(root, "pool", o);
        }

        add_u64(root, "seq", s->seq);
        clock_gettime(CLOCK_REALTIME, &ts);
        add_u64(root, "time_usec", (uint64_t) ts.tv_sec * 1000000u + (uint64_t) ts.tv_nsec / 1000u);
        return root;
}

int smcd_stats_write_json(struct smcd_stats *s, const struct smc_pool_stats *pool, const char *path) {
        char *tmp = NULL;
        json_object *root;
        const char *text;
        size_t len, done = 0;
        int fd, r = 0;

        s->seq++;
        if (asprintf(&tmp, "%s.XXXXXX", path) < 0)
                return -ENOMEM;
        fd = mkostemp(tmp, O_CLOEXEC);
        if (fd < 0) {
                r = -errno;
                free(tmp);
                return r;
        }
        root = smcd_stats_to_json(s, pool);
        text = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE);
        len = strlen(text);
        while (done < len) {
                ssize_t n = write(fd, text + done, len - done);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        r = -errno;
                        break;
                }
                done += (size_t) n;
        }
        if (r == 0 && write(fd, "\n", 1) != 1)
                r = -EIO;
        json_object_put(root);
        if (r == 0 && fchmod(fd, 0644) < 0)
                r = -errno;
        if (r == 0 && fsync(fd) < 0)
                r = -errno;
        if (close(fd) < 0 && r == 0)
                r = -errno;
        if (r == 0 && rename(tmp, path) < 0)
                r = -errno;
        if (r < 0)
                (void) unlink(tmp);
        free(tmp);
        return r;
}
