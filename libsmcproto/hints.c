/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The client's side of the connection hints (smc-hints.h): read smcd's file, look a
 * destination up in it, and count the connections that fell back for a hint, told to
 * smcd in batches (FALLBACK_COUNT, ctl-proto.h).
 *
 * The file is read (openat, pread twice, close: smc-hints.h says why twice) at most
 * every HINT_READ_MS, and only by a connect or an accept; what it held is kept here,
 * in a snapshot of the hints in force with a seqlock of its own, which every lookup
 * reads without a system call (and a vDSO clock_gettime when an entry matches). Not
 * read again once the program installed a seccomp filter (smc_hint_sandboxed(): its
 * filter may refuse, or kill for, those calls); the snapshot then stays as it was.
 */

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>

#include "ctl-client.h"
#include "ctl-proto.h"
#include "smc-clc.h"
#include "smc-hints.h"
#include "socket-internal.h"
#include "sys.h"

#define HINT_READ_MS 10u     /* the file is read this often, at most */
#define HINT_FLUSH_MS 100u   /* counts go to smcd this often, at most */

/* One hint in force, as read (all fields atomics: read under the seqlock below). */
struct hint_entry {
        _Atomic uint64_t until_ns, addr0, addr1;
        _Atomic uint32_t family_port;
};

static pthread_mutex_t hint_lock = PTHREAD_MUTEX_INITIALIZER; /* one reader of the file */
static struct {
        _Atomic uint32_t seq; /* odd while the snapshot is written */
        _Atomic uint32_t n;   /* entries in use */
        struct hint_entry e[SMC_HINTS_SLOTS];
} snap;
static _Atomic uint64_t hint_read_ms;       /* the next read of the file */
static _Atomic uint32_t hint_pending[2];    /* by enum smc_ctl_role: not yet told */
static _Atomic uint64_t hint_flush_ms;      /* the next FALLBACK_COUNT, at the earliest */
static atomic_bool hint_sandboxed;          /* smc_hint_sandboxed() */

static uint64_t coarse_ms(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
        return (uint64_t) ts.tv_sec * 1000u + (uint64_t) ts.tv_nsec / 1000000u;
}

static bool page_ok(const struct smc_hints *p, ssize_t n) {
        return n == (ssize_t) SMC_HINTS_SIZE && p->magic == SMC_HINTS_MAGIC && p->version == SMC_HINTS_VERSION &&
               p->n_slots == SMC_HINTS_SLOTS && p->size == SMC_HINTS_SIZE && !p->closed;
}

/* Read the file (lock held) and replace the snapshot with the hints it holds: none if
 * it is missing, bad, or marked closed. A slot that changed between the two reads is
 * left out until the next read. */
static void hint_read_locked(void) {
        static struct smc_hints a, b; /* (under hint_lock; static: 8 KiB off the stack) */
        char path[sizeof(((struct sockaddr_un *) 0)->sun_path) + 16];
        uint32_t n = 0, used = 0, seq;
        ssize_t na = -1, nb = -1;
        int fd = -1;

        if (smc_ctl_client_file_path(SMC_HINTS_NAME, path, sizeof(path)) == 0)
                /* (O_NOCTTY: a terminal put in its place must not become ours) */
                fd = sys_fd_off_stdio((int) smc_syscall(SYS_openat, AT_FDCWD, path,
                                                        O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY));
        if (fd >= 0) {
                na = sys_pread(fd, &a, sizeof(a), 0);
                nb = sys_pread(fd, &b, sizeof(b), 0);
                sys_close(fd);
        }
        if (page_ok(&a, na) && page_ok(&b, nb))
                used = b.used < SMC_HINTS_SLOTS ? b.used : SMC_HINTS_SLOTS;
        seq = atomic_load_explicit(&snap.seq, memory_order_relaxed);
        atomic_store_explicit(&snap.seq, seq + 1, memory_order_relaxed);
        atomic_thread_fence(memory_order_release);
        for (uint32_t i = 0; i < used; i++) {
                const struct smc_hint *s = &b.slot[i];
                struct hint_entry *e = &snap.e[n];
                uint64_t w[2];

                if ((s->seq & 1) || !s->reason || memcmp(&a.slot[i], s, sizeof(*s)) != 0)
                        continue;
                memcpy(w, s->addr, sizeof(w));
                atomic_store_explicit(&e->until_ns, s->until_ns, memory_order_relaxed);
                atomic_store_explicit(&e->addr0, w[0], memory_order_relaxed);
                atomic_store_explicit(&e->addr1, w[1], memory_order_relaxed);
                atomic_store_explicit(&e->family_port, s->family_port, memory_order_relaxed);
                n++;
        }
        atomic_store_explicit(&snap.n, n, memory_order_relaxed);
        atomic_store_explicit(&snap.seq, seq + 2, memory_order_release);
}

static void hints_refresh(void) {
        uint64_t now = coarse_ms(), next = atomic_load_explicit(&hint_read_ms, memory_order_relaxed);

        if (now >= next && !atomic_load_explicit(&hint_sandboxed, memory_order_relaxed) &&
            atomic_compare_exchange_strong(&hint_read_ms, &next, now + HINT_READ_MS)) {
                pthread_mutex_lock(&hint_lock);
                hint_read_locked();
                pthread_mutex_unlock(&hint_lock);
        }
}

/* Whether an entry of the snapshot matches: the destination (@fp, @w) and in force (or
 * expired less than @grace ns ago), or with @port >= 0 any entry of that port (0: of
 * any port); the snapshot read as its seqlock says. Returns 1, 0, or -1 when the
 * snapshot changed meanwhile. */
static int snap_lookup(uint32_t fp, const uint64_t w[2], int port, uint64_t grace) {
        uint32_t seq = atomic_load_explicit(&snap.seq, memory_order_acquire), n;
        uint64_t now = 0;
        int found = 0;

        if (seq & 1)
                return -1;
        n = atomic_load_explicit(&snap.n, memory_order_relaxed);
        if (n > SMC_HINTS_SLOTS)
                n = SMC_HINTS_SLOTS;
        for (uint32_t i = 0; i < n && !found; i++) {
                const struct hint_entry *e = &snap.e[i];
                uint32_t efp = atomic_load_explicit(&e->family_port, memory_order_relaxed);
                uint64_t until = atomic_load_explicit(&e->until_ns, memory_order_relaxed);
                bool match;

                if (port >= 0)
                        match = port == 0 || (efp & 0xffffu) == (uint32_t) port;
                else
                        match = efp == fp && atomic_load_explicit(&e->addr0, memory_order_relaxed) == w[0] &&
                                atomic_load_explicit(&e->addr1, memory_order_relaxed) == w[1];
                if (!match)
                        continue;
                if (port >= 0) {
                        found = 1; /* (in force or not: smc_hint_tcp() decides) */
                        break;
                }
                if (!now) {
                        struct timespec ts;

                        clock_gettime(CLOCK_REALTIME, &ts);
                        now = (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
                }
                /* (an expiry too far ahead: a clock set back, or a bad file) */
                if (now < until ? until - now <= SMC_HINT_HOLD_NS + SMC_HINT_SLACK_NS : now - until < grace)
                        found = 1;
        }
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&snap.seq, memory_order_relaxed) != seq)
                return -1;
        return found;
}

static bool lookup(uint32_t fp, const uint64_t w[2], int port, uint64_t grace) {
        hints_refresh();
        for (int tries = 0; tries < 4; tries++) {
                int r = snap_lookup(fp, w, port, grace);

                if (r >= 0)
                        return r;
        }
        return false; /* (rewritten under us four times: as if no hint) */
}

bool smc_hint_tcp(const struct smc_ctl_addr *dst) {
        uint64_t w[2];

        memcpy(w, dst->addr, sizeof(w));
        return lookup((uint32_t) dst->family << 16 | dst->port, w, -1, 0);
}

bool smc_hint_accepted(const struct smc_ctl_addr *local) {
        uint64_t w[2];

        memcpy(w, local->addr, sizeof(w));
        return lookup((uint32_t) local->family << 16 | local->port, w, -1, SMC_HINT_ACCEPT_GRACE_NS);
}

bool smc_hint_port(uint16_t port) {
        static const uint64_t w[2];

        return lookup(0, w, port, 0);
}

/* Send the counts; @may_connect: open a control connection if there is none (a HELLO
 * round trip: at exit and exec only, never inside the program's connect or accept). */
static void hint_flush(bool may_connect) {
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
                if (!may_connect || atomic_load_explicit(&hint_sandboxed, memory_order_relaxed)) {
                        if (smc_ctl_client_notify(&m, 5) == -ENOTCONN)
                                /* none yet: kept for the exit (or the next flush) */
                                atomic_fetch_add_explicit(&hint_pending[role], n, memory_order_relaxed);
                } else
                        (void) smc_ctl_client_notify_connect(&m, 5);
        }
}

void smc_hint_flush(void) {
        hint_flush(true);
}

void smc_hint_count(uint32_t role) {
        uint64_t now, next;

        atomic_fetch_add_explicit(&hint_pending[role & 1], 1, memory_order_relaxed);
        now = coarse_ms();
        next = atomic_load_explicit(&hint_flush_ms, memory_order_relaxed);
        if (next == 0) {
                /* the first count: the first flush HINT_FLUSH_MS later, not now */
                (void) atomic_compare_exchange_strong(&hint_flush_ms, &next, now + HINT_FLUSH_MS);
                return;
        }
        if (now >= next && atomic_compare_exchange_strong(&hint_flush_ms, &next, now + HINT_FLUSH_MS))
                hint_flush(false);
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
