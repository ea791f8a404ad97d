/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The connection hints file: see hints.h here and smc-hints.h in libsmcproto. */

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "smc-hints.h"
#include "hints.h"

struct Hints {
        struct smc_hints page; /* what the file holds (smcd's copy: it never reads it) */
        int fd;
        char *path;            /* $dir/hints */
        dev_t dev;             /* the file's identity: removed at exit only if it is still ours */
        ino_t ino;
};

__attribute__((noinline)) static int write_at(Hints *h, const void *p, size_t len, size_t off) {
        ssize_t n = pwrite(h->fd, p, len, (off_t) off);

        if (n < 0)
                return -errno;
        return (size_t) n == len ? 0 : -EIO;
}

/* Write the page as a new file (hints.tmp, renamed over $dir/hints), mode 0644 whatever
 * the umask, and take it as h->fd. On failure the old file descriptor (if any) stays. */
static int file_make(Hints *h) {
        char *tmp = NULL;
        struct stat st;
        int fd, old = h->fd, r;

        if (asprintf(&tmp, "%s.tmp", h->path) < 0)
                return -ENOMEM;
        (void) unlink(tmp);
        fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0) {
                r = -errno;
                free(tmp);
                return r;
        }
        h->fd = fd;
        if (fchmod(fd, 0644) < 0 || fstat(fd, &st) < 0)
                r = -errno;
        else
                r = write_at(h, &h->page, sizeof(h->page), 0);
        if (r == 0 && rename(tmp, h->path) < 0)
                r = -errno;
        if (r < 0) {
                (void) unlink(tmp);
                close(fd);
                h->fd = old;
        }
        free(tmp);
        if (r < 0)
                return r;
        if (old >= 0)
                close(old);
        h->dev = st.st_dev;
        h->ino = st.st_ino;
        return 0;
}

int hints_create(const char *dir, Hints **ret) {
        Hints *h;
        int r;

        h = calloc(1, sizeof(*h));
        if (!h)
                return -ENOMEM;
        h->fd = -1;
        if (asprintf(&h->path, "%s/%s", dir, SMC_HINTS_NAME) < 0) {
                free(h);
                return -ENOMEM;
        }
        h->page.magic = SMC_HINTS_MAGIC;
        h->page.version = SMC_HINTS_VERSION;
        h->page.n_slots = SMC_HINTS_SLOTS;
        h->page.size = SMC_HINTS_SIZE;
        r = file_make(h);
        if (r < 0) {
                free(h->path);
                free(h);
                return r;
        }
        *ret = h;
        return 0;
}

/* The path still names our file, whole: else (removed, replaced, truncated: by root's
 * hand; smcd never does) the page is written anew, so that readers see hints again. */
static void file_check(Hints *h) {
        struct stat st;

        if (stat(h->path, &st) == 0 && st.st_dev == h->dev && st.st_ino == h->ino &&
            st.st_size == (off_t) SMC_HINTS_SIZE)
                return;
        (void) file_make(h);
}

void hints_free(Hints *h) {
        struct stat st;

        if (!h)
                return;
        h->page.closed = 1;
        (void) write_at(h, &h->page.closed, sizeof(h->page.closed), offsetof(struct smc_hints, closed));
        close(h->fd);
        /* gone with us; never a newer smcd's file */
        if (stat(h->path, &st) == 0 && st.st_dev == h->dev && st.st_ino == h->ino)
                (void) unlink(h->path);
        free(h->path);
        free(h);
}

/* Write slot @i as smc-hints.h says: seq odd, the rest, seq even. */
static void slot_write(Hints *h, uint32_t i, const struct smc_hint *v) {
        struct smc_hint *s = &h->page.slot[i];
        size_t off = offsetof(struct smc_hints, slot) + i * sizeof(*s);
        uint32_t seq = s->seq;

        s->seq = seq + 1;
        (void) write_at(h, &s->seq, sizeof(s->seq), off);
        memcpy((char *) s + sizeof(s->seq), (const char *) v + sizeof(v->seq), sizeof(*s) - sizeof(s->seq));
        (void) write_at(h, (char *) s + sizeof(s->seq), sizeof(*s) - sizeof(s->seq), off + sizeof(s->seq));
        s->seq = seq + 2;
        (void) write_at(h, &s->seq, sizeof(s->seq), off);
}

static bool same_dest(const struct smc_hint *s, const struct smc_hint *v) {
        return s->family_port == v->family_port && memcmp(s->addr, v->addr, sizeof(s->addr)) == 0;
}

int hints_publish(Hints *h, const struct smc_ctl_addr *dst, uint64_t listener_id, uint32_t reason,
                  uint64_t until_ns, uint64_t now_ns) {
        struct smc_hint v = {};
        int pick = -1, soonest = 0;

        if (!h)
                return -EBADF;
        if (dst->port == 0 || (dst->family != AF_INET && dst->family != AF_INET6) || reason == 0)
                return -EINVAL;
        file_check(h);
        v.reason = reason;
        v.until_ns = until_ns;
        v.listener_id = listener_id;
        memcpy(v.addr, dst->addr, sizeof(v.addr));
        v.family_port = (uint32_t) dst->family << 16 | dst->port;
        for (uint32_t i = 0; i < h->page.used; i++) {
                const struct smc_hint *s = &h->page.slot[i];

                if (s->reason && same_dest(s, &v)) {
                        pick = (int) i;
                        break;
                }
                /* free, or expired a hold ago (a server still takes the accepts of its
                 * last clients as hinted for a while after the expiry: the library's
                 * SMC_HINT_ACCEPT_GRACE_NS): kept unless the same one follows */
                if (pick < 0 && (!s->reason || s->until_ns + SMC_HINT_HOLD_NS <= now_ns))
                        pick = (int) i;
                if (s->until_ns < h->page.slot[soonest].until_ns)
                        soonest = (int) i;
        }
        if (pick < 0 && h->page.used < SMC_HINTS_SLOTS) {
                pick = (int) h->page.used;
                /* the slot is written before a reader may look at it */
                slot_write(h, (uint32_t) pick, &v);
                h->page.used++;
                (void) write_at(h, &h->page.used, sizeof(h->page.used), offsetof(struct smc_hints, used));
                return pick;
        }
        if (pick < 0)
                pick = soonest;
        slot_write(h, (uint32_t) pick, &v);
        return pick;
}

void hints_clear(Hints *h) {
        static const struct smc_hint none;

        if (!h)
                return;
        for (uint32_t i = 0; i < h->page.used; i++)
                if (h->page.slot[i].reason)
                        slot_write(h, i, &none);
}

void hints_forget_listener(Hints *h, uint64_t listener_id) {
        static const struct smc_hint none;

        if (!h || !listener_id)
                return;
        for (uint32_t i = 0; i < h->page.used; i++)
                if (h->page.slot[i].reason && h->page.slot[i].listener_id == listener_id)
                        slot_write(h, i, &none);
}
