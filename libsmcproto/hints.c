/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The client's side of the connection hints (smc-hints.h): map smcd's page, look a
 * destination (or a listener) up in it, and count the connections that fell back for
 * a hint, told to smcd in batches (FALLBACK_COUNT, ctl-proto.h).
 *
 * Cost per connect: while no hint was ever published, one load (used == 0); else a
 * scan of the used slots and a vDSO clock_gettime. The file is looked at (open, fstat,
 * and mmap when it changed) at most once a second (CLOCK_MONOTONIC_COARSE), and no
 * more once the program installed a seccomp filter (smc_hint_sandboxed(): its filter
 * may refuse, or kill for, those calls; the page mapped by then stays in use).
 */

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>

#include "ctl-client.h"
#include "ctl-proto.h"
#include "smc-clc.h"
#include "smc-hints.h"
#include "socket-internal.h"
#include "sys.h"

#define HINT_CHECK_MS 1000u  /* the file is looked at this often, at most */
#define HINT_FLUSH_MS 100u   /* counts go to smcd this often, at most */

static pthread_mutex_t hint_lock = PTHREAD_MUTEX_INITIALIZER; /* (re)mapping */
static struct smc_hints *_Atomic hint_page; /* the mapped page, or NULL */
/* The page before it: a thread may still scan it when the page is replaced (smcd
 * restarted), so it is unmapped only at the next replacement, a second later at least
 * (a scan takes well under a microsecond). */
static struct smc_hints *hint_old;
static dev_t hint_dev;                      /* the mapped file's identity */
static ino_t hint_ino;
static _Atomic uint64_t hint_check_ms;      /* the next look at the file */
static _Atomic uint32_t hint_pending[2];    /* by enum smc_ctl_role: not yet told */
static _Atomic uint64_t hint_flush_ms;      /* the next FALLBACK_COUNT, at the earliest */
static atomic_bool hint_sandboxed;          /* smc_hint_sandboxed() */

static uint64_t coarse_ms(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
        return (uint64_t) ts.tv_sec * 1000u + (uint64_t) ts.tv_nsec / 1000000u;
}

/* Look at the file (lock held): map it if it is new, forget it if it is gone. */
static void hint_refresh_locked(void) {
        char path[sizeof(((struct sockaddr_un *) 0)->sun_path) + 16];
        struct smc_hints *p, *cur = atomic_load_explicit(&hint_page, memory_order_relaxed);
        struct stat st;
        int fd;

        if (smc_ctl_client_file_path(SMC_HINTS_NAME, path, sizeof(path)) < 0)
                return;
        fd = (int) smc_syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
        if (fd < 0) {
                /* no smcd here (or an older one): no hints */
                atomic_store_explicit(&hint_page, NULL, memory_order_release);
                return;
        }
        if (smc_syscall(SYS_fstat, fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size < (off_t) SMC_HINTS_SIZE) {
                sys_close(fd);
                atomic_store_explicit(&hint_page, NULL, memory_order_release);
                return;
        }
        if (cur && st.st_dev == hint_dev && st.st_ino == hint_ino) {
                sys_close(fd);
                return; /* the same file */
        }
        p = mmap(NULL, SMC_HINTS_SIZE, PROT_READ, MAP_SHARED, fd, 0);
        sys_close(fd);
        if (p == MAP_FAILED)
                return;
        if (__atomic_load_n(&p->magic, __ATOMIC_ACQUIRE) != SMC_HINTS_MAGIC || p->version != SMC_HINTS_VERSION ||
            p->n_slots != SMC_HINTS_SLOTS || p->size != SMC_HINTS_SIZE) {
                munmap(p, SMC_HINTS_SIZE);
                atomic_store_explicit(&hint_page, NULL, memory_order_release);
                return;
        }
        if (hint_old)
                munmap(hint_old, SMC_HINTS_SIZE);
        hint_old = cur;
        hint_dev = st.st_dev;
        hint_ino = st.st_ino;
        atomic_store_explicit(&hint_page, p, memory_order_release);
}

static struct smc_hints *hints_get(void) {
        uint64_t now = coarse_ms(), next = atomic_load_explicit(&hint_check_ms, memory_order_relaxed);

        if (now >= next && !atomic_load_explicit(&hint_sandboxed, memory_order_relaxed) &&
            atomic_compare_exchange_strong(&hint_check_ms, &next, now + HINT_CHECK_MS)) {
                pthread_mutex_lock(&hint_lock);
                hint_refresh_locked();
                pthread_mutex_unlock(&hint_lock);
        }
        return atomic_load_explicit(&hint_page, memory_order_acquire);
}

bool smc_hint_tcp(const struct smc_ctl_addr *dst, uint64_t listener_id) {
        struct smc_hints *p = hints_get();
        uint64_t w[2] = { 0, 0 }, now = 0;
        uint32_t used, fp = 0;

        if (!p || atomic_load_explicit(&p->closed, memory_order_relaxed))
                return false;
        used = atomic_load_explicit(&p->used, memory_order_acquire);
        if (used == 0)
                return false;
        if (used > SMC_HINTS_SLOTS)
                used = SMC_HINTS_SLOTS;
        if (dst) {
                fp = (uint32_t) dst->family << 16 | dst->port;
                memcpy(w, dst->addr, sizeof(w));
        }
        for (uint32_t i = 0; i < used; i++) {
                struct smc_hint *s = &p->slot[i];
                uint32_t seq = atomic_load_explicit(&s->seq, memory_order_acquire), reason;
                uint64_t until;
                bool match;

                if (seq & 1)
                        continue; /* being written: as if not there yet */
                reason = atomic_load_explicit(&s->reason, memory_order_relaxed);
                until = atomic_load_explicit(&s->until_ns, memory_order_relaxed);
                if (dst)
                        match = atomic_load_explicit(&s->family_port, memory_order_relaxed) == fp &&
                                atomic_load_explicit(&s->addr[0], memory_order_relaxed) == w[0] &&
                                atomic_load_explicit(&s->addr[1], memory_order_relaxed) == w[1];
                else
                        match = atomic_load_explicit(&s->listener_id, memory_order_relaxed) == listener_id;
                atomic_thread_fence(memory_order_acquire);
                if (atomic_load_explicit(&s->seq, memory_order_relaxed) != seq || !match || !reason)
                        continue;
                if (!now) {
                        struct timespec ts;

                        clock_gettime(CLOCK_MONOTONIC, &ts);
                        now = (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
                }
                if (now < until)
                        return true;
        }
        return false;
}

void smc_hint_flush(void) {
        for (uint32_t role = 0; role < 2; role++) {
                uint32_t n = atomic_exchange(&hint_pending[role], 0);
                union smc_ctl_msg m;

                if (!n)
                        continue;
                smc_ctl_init(&m, SMC_CTL_FALLBACK_COUNT, 0);
                m.fallback_count.reason = SMCD_DECL_SHORTCONN;
                m.fallback_count.role = role;
                m.fallback_count.count = n > SMC_CTL_FALLBACK_COUNT_MAX ? SMC_CTL_FALLBACK_COUNT_MAX : n;
                /* (connects if needed: a process may have met smcd only through the hints;
                 * not under a seccomp filter, which may refuse the socket) */
                if (atomic_load_explicit(&hint_sandboxed, memory_order_relaxed))
                        (void) smc_ctl_client_notify(&m, 5);
                else
                        (void) smc_ctl_client_notify_connect(&m, 5);
        }
}

void smc_hint_count(uint32_t role) {
        uint64_t now, next;

        atomic_fetch_add_explicit(&hint_pending[role & 1], 1, memory_order_relaxed);
        now = coarse_ms();
        next = atomic_load_explicit(&hint_flush_ms, memory_order_relaxed);
        if (now >= next && atomic_compare_exchange_strong(&hint_flush_ms, &next, now + HINT_FLUSH_MS))
                smc_hint_flush();
}

void smc_hint_sandboxed(void) {
        atomic_store_explicit(&hint_sandboxed, true, memory_order_relaxed);
}

/* fork(): the parent's counts are the parent's to tell; the lock is not the child's */
static void hint_atfork_child(void) {
        pthread_mutex_init(&hint_lock, NULL);
        atomic_store(&hint_pending[0], 0);
        atomic_store(&hint_pending[1], 0);
}

__attribute__((constructor)) static void hint_init(void) {
        pthread_atfork(NULL, NULL, hint_atfork_child);
}

/* exit(): what is left (a process killed, or one that ends with _exit, loses it: the
 * counts are statistics, the connections themselves worked) */
__attribute__((destructor)) static void hint_fini(void) {
        smc_hint_flush();
}
