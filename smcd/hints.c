/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The connection hints page: see hints.h here and smc-hints.h in libsmcproto. */

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "smc-hints.h"
#include "hints.h"

struct Hints {
        struct smc_hints *page;
        char *path;    /* $dir/hints */
        dev_t dev;     /* the file's identity: removed at exit only if it is still ours */
        ino_t ino;
};

int hints_create(const char *dir, Hints **ret) {
        char *path = NULL, *tmp = NULL;
        struct smc_hints *p = MAP_FAILED;
        struct stat st;
        Hints *h = NULL;
        int fd = -1, r;

        if (asprintf(&path, "%s/%s", dir, SMC_HINTS_NAME) < 0) {
                path = NULL;
                r = -ENOMEM;
                goto out;
        }
        if (asprintf(&tmp, "%s/%s.tmp", dir, SMC_HINTS_NAME) < 0) {
                tmp = NULL;
                r = -ENOMEM;
                goto out;
        }
        h = calloc(1, sizeof(*h));
        if (!h) {
                r = -ENOMEM;
                goto out;
        }
        (void) unlink(tmp);
        fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0) {
                r = -errno;
                goto out;
        }
        /* the mode whatever the umask: every client reads it */
        if (fchmod(fd, 0644) < 0 || fallocate(fd, 0, 0, SMC_HINTS_SIZE) < 0) {
                r = -errno;
                goto out_unlink;
        }
        if (fstat(fd, &st) < 0) {
                r = -errno;
                goto out_unlink;
        }
        p = mmap(NULL, SMC_HINTS_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
                r = -errno;
                goto out_unlink;
        }
        p->version = SMC_HINTS_VERSION;
        p->n_slots = SMC_HINTS_SLOTS;
        p->size = SMC_HINTS_SIZE;
        __atomic_store_n(&p->magic, SMC_HINTS_MAGIC, __ATOMIC_RELEASE);
        if (rename(tmp, path) < 0) {
                r = -errno;
                munmap(p, SMC_HINTS_SIZE);
                goto out_unlink;
        }
        h->page = p;
        h->path = path;
        path = NULL;
        h->dev = st.st_dev;
        h->ino = st.st_ino;
        *ret = h;
        h = NULL;
        r = 0;
        goto out;
out_unlink:
        (void) unlink(tmp);
out:
        if (fd >= 0)
                close(fd);
        free(h);
        free(path);
        free(tmp);
        return r;
}

void hints_free(Hints *h) {
        struct stat st;

        if (!h)
                return;
        atomic_store_explicit(&h->page->closed, 1, memory_order_release);
        munmap(h->page, SMC_HINTS_SIZE);
        /* gone with us (a reader's mapping stays, marked closed); never a newer
         * smcd's file */
        if (stat(h->path, &st) == 0 && st.st_dev == h->dev && st.st_ino == h->ino)
                (void) unlink(h->path);
        free(h->path);
        free(h);
}

static uint32_t family_port(const struct smc_ctl_addr *a) {
        return (uint32_t) a->family << 16 | a->port;
}

static void addr_words(const struct smc_ctl_addr *a, uint64_t w[2]) {
        memcpy(w, a->addr, 16);
}

/* The seqlock's write side (hints.h): odd, the fields, even. */
static void slot_write(struct smc_hint *s, uint32_t reason, uint64_t until_ns, uint64_t listener_id,
                       const uint64_t addr[2], uint32_t fp) {
        uint32_t seq = atomic_load_explicit(&s->seq, memory_order_relaxed);

        atomic_store_explicit(&s->seq, seq + 1, memory_order_relaxed);
        atomic_thread_fence(memory_order_release);
        atomic_store_explicit(&s->reason, reason, memory_order_relaxed);
        atomic_store_explicit(&s->until_ns, until_ns, memory_order_relaxed);
        atomic_store_explicit(&s->listener_id, listener_id, memory_order_relaxed);
        atomic_store_explicit(&s->addr[0], addr[0], memory_order_relaxed);
        atomic_store_explicit(&s->addr[1], addr[1], memory_order_relaxed);
        atomic_store_explicit(&s->family_port, fp, memory_order_relaxed);
        atomic_store_explicit(&s->seq, seq + 2, memory_order_release);
}

int hints_publish(Hints *h, const struct smc_ctl_addr *dst, uint64_t listener_id, uint32_t reason,
                  uint64_t until_ns, uint64_t now_ns) {
        struct smc_hints *p;
        uint64_t w[2];
        uint32_t fp, used;
        int pick = -1, soonest = 0;

        if (!h)
                return -EBADF;
        if (dst->port == 0 || (dst->family != AF_INET && dst->family != AF_INET6) || reason == 0)
                return -EINVAL;
        p = h->page;
        fp = family_port(dst);
        addr_words(dst, w);
        used = atomic_load_explicit(&p->used, memory_order_relaxed);
        for (uint32_t i = 0; i < used; i++) {
                struct smc_hint *s = &p->slot[i];

                /* only this thread writes: relaxed loads see its own stores */
                if (atomic_load_explicit(&s->family_port, memory_order_relaxed) == fp &&
                    atomic_load_explicit(&s->addr[0], memory_order_relaxed) == w[0] &&
                    atomic_load_explicit(&s->addr[1], memory_order_relaxed) == w[1] &&
                    atomic_load_explicit(&s->reason, memory_order_relaxed)) {
                        pick = (int) i;
                        break;
                }
                if (pick < 0 && (!atomic_load_explicit(&s->reason, memory_order_relaxed) ||
                                 atomic_load_explicit(&s->until_ns, memory_order_relaxed) <= now_ns))
                        pick = (int) i; /* free or expired: kept unless the same one follows */
                if (atomic_load_explicit(&s->until_ns, memory_order_relaxed) <
                    atomic_load_explicit(&p->slot[soonest].until_ns, memory_order_relaxed))
                        soonest = (int) i;
        }
        if (pick < 0 && used < SMC_HINTS_SLOTS) {
                pick = (int) used;
                /* the slot is written before a reader may look at it */
                slot_write(&p->slot[pick], reason, until_ns, listener_id, w, fp);
                atomic_store_explicit(&p->used, used + 1, memory_order_release);
                return pick;
        }
        if (pick < 0)
                pick = soonest;
        slot_write(&p->slot[pick], reason, until_ns, listener_id, w, fp);
        return pick;
}

void hints_clear(Hints *h) {
        static const uint64_t zero[2];

        if (!h)
                return;
        for (uint32_t i = 0; i < atomic_load_explicit(&h->page->used, memory_order_relaxed); i++)
                if (atomic_load_explicit(&h->page->slot[i].reason, memory_order_relaxed))
                        slot_write(&h->page->slot[i], 0, 0, 0, zero, 0);
}

void hints_forget_listener(Hints *h, uint64_t listener_id) {
        static const uint64_t zero[2];

        if (!h || !listener_id)
                return;
        for (uint32_t i = 0; i < atomic_load_explicit(&h->page->used, memory_order_relaxed); i++) {
                struct smc_hint *s = &h->page->slot[i];

                if (atomic_load_explicit(&s->reason, memory_order_relaxed) &&
                    atomic_load_explicit(&s->listener_id, memory_order_relaxed) == listener_id)
                        slot_write(s, 0, 0, 0, zero, 0);
        }
}
