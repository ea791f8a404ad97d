/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The endpoint table: see eptable.h. */

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "eptable.h"
#include "log.h"

struct EpTable {
        int fd;
        char *path;     /* $dir/endpoints */
        char *tmp_path; /* $dir/endpoints.tmp until committed, then NULL */
        void *base;
        size_t len;
        uint32_t nslots;
        uint32_t *free_slots; /* a stack of free slot indexes */
        uint32_t nfree;
        bool full_logged;
};

static size_t table_len(uint32_t nslots) {
        return SMCD_EPT_HDR_LEN + (size_t) nslots * SMCD_EPT_RECORD_LEN;
}

static struct smcd_ept_record *record(EpTable *t, uint32_t slot) {
        return (struct smcd_ept_record *) ((char *) t->base + SMCD_EPT_HDR_LEN + (size_t) slot * SMCD_EPT_RECORD_LEN);
}

static bool ring_size_ok(uint32_t size) {
        return size >= 16384 && size <= (1u << 20) && !(size & (size - 1));
}

int eptable_load(const char *dir, struct smcd_ept_record **ret) {
        struct smcd_ept_record *out = NULL;
        const struct smcd_ept_header *h;
        char path[4096];
        struct stat st;
        uint32_t nslots;
        void *base;
        size_t n = 0;
        int fd, r;

        *ret = NULL;
        if ((size_t) snprintf(path, sizeof(path), "%s/%s", dir, SMCD_EPT_NAME) >= sizeof(path))
                return -ENAMETOOLONG;
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
        if (fd < 0)
                return -errno;
        if (fstat(fd, &st) < 0) {
                r = -errno;
                close(fd);
                return r;
        }
        if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 0077)) {
                close(fd);
                return -EPERM;
        }
        if ((uint64_t) st.st_size < SMCD_EPT_HDR_LEN || (uint64_t) st.st_size > table_len(SMCD_EPT_MAX_SLOTS) ||
            ((uint64_t) st.st_size - SMCD_EPT_HDR_LEN) % SMCD_EPT_RECORD_LEN) {
                close(fd);
                return -EBADMSG;
        }
        base = mmap(NULL, (size_t) st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        r = base == MAP_FAILED ? -errno : 0;
        close(fd);
        if (r < 0)
                return r;
        h = base;
        /* (a file larger than its header says: killed while growing, between the
         * ftruncate and the header's count; the records past it are free) */
        if (h->magic != SMCD_EPT_MAGIC || h->version != SMCD_EPT_VERSION || h->record_len != SMCD_EPT_RECORD_LEN ||
            h->nslots > SMCD_EPT_MAX_SLOTS || table_len(h->nslots) > (size_t) st.st_size) {
                munmap(base, (size_t) st.st_size);
                return -EBADMSG;
        }
        nslots = (uint32_t) (((size_t) st.st_size - SMCD_EPT_HDR_LEN) / SMCD_EPT_RECORD_LEN);
        for (uint32_t i = 0; i < nslots; i++) {
                const struct smcd_ept_record *rec =
                        (const void *) ((const char *) base + SMCD_EPT_HDR_LEN + (size_t) i * SMCD_EPT_RECORD_LEN);

                if (__atomic_load_n(&rec->state, __ATOMIC_ACQUIRE) != SMCD_EPT_LIVE)
                        continue;
                if ((rec->role != SMC_CTL_ROLE_CLIENT && rec->role != SMC_CTL_ROLE_SERVER) || !rec->rx_token ||
                    !rec->tx_token || rec->rx_token == rec->tx_token || !ring_size_ok(rec->rx_size) ||
                    !ring_size_ok(rec->tx_size) || rec->pid <= 0 || !rec->pid_start)
                        continue;
                if (!out) {
                        out = calloc(nslots, sizeof(*out)); /* at most this many */
                        if (!out) {
                                munmap(base, (size_t) st.st_size);
                                return -ENOMEM;
                        }
                }
                out[n++] = *rec;
        }
        munmap(base, (size_t) st.st_size);
        *ret = out;
        return (int) n;
}

int eptable_create(const char *dir, uint32_t instance, uint32_t nslots, EpTable **ret) {
        struct smcd_ept_header *h;
        EpTable *t;
        int r;

        if (nslots < SMCD_EPT_MIN_SLOTS)
                nslots = SMCD_EPT_MIN_SLOTS;
        if (nslots > SMCD_EPT_MAX_SLOTS)
                nslots = SMCD_EPT_MAX_SLOTS;
        t = calloc(1, sizeof(*t));
        if (!t)
                return -ENOMEM;
        t->fd = -1;
        t->base = MAP_FAILED;
        if (asprintf(&t->path, "%s/%s", dir, SMCD_EPT_NAME) < 0) {
                t->path = NULL;
                r = -ENOMEM;
                goto fail;
        }
        if (asprintf(&t->tmp_path, "%s/%s.tmp", dir, SMCD_EPT_NAME) < 0) {
                t->tmp_path = NULL;
                r = -ENOMEM;
                goto fail;
        }
        t->free_slots = malloc(sizeof(uint32_t) * nslots);
        if (!t->free_slots) {
                r = -ENOMEM;
                goto fail;
        }
        (void) unlink(t->tmp_path);
        t->fd = open(t->tmp_path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        /* every page allocated now (fallocate): a store into a page a full tmpfs
         * cannot supply would kill smcd with SIGBUS */
        if (t->fd < 0 || fchmod(t->fd, 0600) < 0 || fallocate(t->fd, 0, 0, (off_t) table_len(nslots)) < 0) {
                r = -errno;
                goto fail;
        }
        t->len = table_len(nslots);
        t->base = mmap(NULL, t->len, PROT_READ | PROT_WRITE, MAP_SHARED, t->fd, 0);
        if (t->base == MAP_FAILED) {
                r = -errno;
                goto fail;
        }
        t->nslots = nslots;
        for (uint32_t i = 0; i < nslots; i++)
                t->free_slots[i] = nslots - 1 - i; /* slot 0 on top */
        t->nfree = nslots;
        h = t->base;
        h->magic = SMCD_EPT_MAGIC;
        h->version = SMCD_EPT_VERSION;
        h->record_len = SMCD_EPT_RECORD_LEN;
        h->nslots = nslots;
        h->instance = instance;
        *ret = t;
        return 0;
fail:
        if (t->fd >= 0)
                (void) unlink(t->tmp_path);
        eptable_free(t);
        return r;
}

int eptable_commit(EpTable *t) {
        if (!t->tmp_path)
                return 0;
        if (rename(t->tmp_path, t->path) < 0) {
                int r = -errno;

                (void) unlink(t->tmp_path);
                return r;
        }
        free(t->tmp_path);
        t->tmp_path = NULL;
        return 0;
}

/* Double the table (records stay where they are). */
static int grow(EpTable *t) {
        uint32_t n = t->nslots * 2, *fs;
        struct smcd_ept_header *h;
        void *base;

        if (t->nslots >= SMCD_EPT_MAX_SLOTS)
                return -ENOSPC;
        if (n > SMCD_EPT_MAX_SLOTS)
                n = SMCD_EPT_MAX_SLOTS;
        fs = realloc(t->free_slots, sizeof(uint32_t) * n);
        if (!fs)
                return -ENOMEM;
        t->free_slots = fs;
        /* allocated, not sparse (see eptable_create); a failed fallocate leaves the
         * file as it was */
        if (fallocate(t->fd, 0, (off_t) t->len, (off_t) (table_len(n) - t->len)) < 0)
                return -errno;
        base = mremap(t->base, t->len, table_len(n), MREMAP_MAYMOVE);
        if (base == MAP_FAILED) {
                int r = -errno;

                (void) ftruncate(t->fd, (off_t) t->len);
                return r;
        }
        t->base = base;
        t->len = table_len(n);
        for (uint32_t i = n; i-- > t->nslots;)
                t->free_slots[t->nfree++] = i;
        t->nslots = n;
        h = t->base;
        /* (a reader that sees the old count reads fewer records: the new ones are
         * free, and the file size decides: eptable_load checks both) */
        h->nslots = n;
        return 0;
}

int eptable_add(EpTable *t, const struct smcd_ept_record *r) {
        struct smcd_ept_record *rec;
        uint32_t slot;

        if (!t)
                return -EBADF;
        if (t->nfree == 0) {
                int e = grow(t);

                if (e < 0) {
                        if (!t->full_logged)
                                log_warning_errno(e, "The endpoint table %s cannot grow beyond %u records (%m): "
                                                  "endpoints beyond are not recorded (a restarted smcd learns them "
                                                  "from their processes only).",
                                                  t->path, t->nslots);
                        t->full_logged = true;
                        return e;
                }
        }
        slot = t->free_slots[--t->nfree];
        rec = record(t, slot);
        __atomic_store_n(&rec->state, 0, __ATOMIC_RELAXED);
        memcpy((char *) rec + sizeof(rec->state), (const char *) r + sizeof(r->state),
               sizeof(*rec) - sizeof(rec->state));
        __atomic_store_n(&rec->state, SMCD_EPT_LIVE, __ATOMIC_RELEASE);
        return (int) slot + 1;
}

void eptable_set_owner(EpTable *t, uint32_t slot1, pid_t pid, uint64_t pid_start) {
        struct smcd_ept_record *rec;

        if (!t || slot1 == 0 || slot1 > t->nslots)
                return;
        rec = record(t, slot1 - 1);
        if (__atomic_load_n(&rec->state, __ATOMIC_RELAXED) != SMCD_EPT_LIVE)
                return; /* removed */
        /* not live while the pair is torn: a reader skips it rather than believe a
         * pid with another process's start time */
        __atomic_store_n(&rec->state, 0, __ATOMIC_RELEASE);
        rec->pid = pid;
        rec->pid_start = pid_start;
        __atomic_store_n(&rec->state, SMCD_EPT_LIVE, __ATOMIC_RELEASE);
}

void eptable_remove(EpTable *t, uint32_t slot1) {
        if (!t || slot1 == 0 || slot1 > t->nslots)
                return;
        __atomic_store_n(&record(t, slot1 - 1)->state, 0, __ATOMIC_RELEASE);
        t->free_slots[t->nfree++] = slot1 - 1;
}

EpTable *eptable_free(EpTable *t) {
        if (!t)
                return NULL;
        if (t->base != MAP_FAILED)
                munmap(t->base, t->len);
        if (t->fd >= 0)
                close(t->fd);
        free(t->path);
        free(t->tmp_path);
        free(t->free_slots);
        free(t);
        return NULL;
}

int proc_pid_start(pid_t pid, uint64_t *ret) {
        char path[64], buf[1024], *p;
        unsigned long long v;
        ssize_t n;
        int fd;

        snprintf(path, sizeof(path), "/proc/%d/stat", (int) pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return errno == ENOENT ? -ESRCH : -errno;
        n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (n <= 0)
                return n < 0 ? -errno : -ESRCH;
        buf[n] = 0;
        /* "pid (comm) state ppid ...": comm may hold anything, ')' too; the fields
         * after the last ')' start with field 3 (state); starttime is field 22 */
        p = strrchr(buf, ')');
        if (!p)
                return -EBADMSG;
        p++;
        for (unsigned field = 2; field < 21; field++) {
                p = strchr(p + 1, ' ');
                if (!p)
                        return -EBADMSG;
        }
        if (sscanf(p, " %llu", &v) != 1 || v == 0)
                return -EBADMSG;
        *ret = v;
        return 0;
}
