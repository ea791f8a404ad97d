/* SPDX-License-Identifier: LGPL-2.1-or-later */

/*
 * The SMC-D data path of one connection endpoint (ring.h), implementing the protocol
 * of dmb.h. Topology of one connection between endpoints A and B: two AF_UNIX
 * SOCK_STREAM socketpairs (X_a, Y_a) and (X_b, Y_b); A holds X_a (ep->x, the fd its
 * application sees) and Y_b (ep->y_peer); B holds X_b and Y_a. A's rx DMB is written
 * by B, A writes B's DMB (ep->tx_*).
 *
 *  - Doorbell bytes flow Y -> X: A rings B by writing one byte to Y_b.
 *  - Plug bytes flow X -> Y: when B's DMB is full, A fills X_a's send buffer (the bytes
 *    queue in Y_a, which B holds) so that X_a stops being writable; B drains Y_a after
 *    freeing space. The two kinds of bytes never share a direction of a socket.
 *
 * Memory-ordering argument (the C11 model; all shared header fields are atomics, the
 * ring bytes are plain memory):
 *
 *  (1) Data. The writer memcpy()s bytes into free space, then stores prod (seq_cst,
 *      which includes release). The reader loads prod (seq_cst, includes acquire) and
 *      only then memcpy()s bytes below that prod: the store/load pair synchronises, so
 *      the copy-in happens before the copy-out. The reader then stores cons (release,
 *      seq_cst); the writer loads cons (acquire, seq_cst) before computing free space
 *      and overwriting it: the copy-out happens before the overwrite. Both cursors have
 *      a single writer each (prod: the tx side under tx_lock, cons: the rx side under
 *      rx_lock), so no read-modify-write is needed on them.
 *
 *  (2) Doorbell, no lost wakeup. Writer: W1 store prod; W2 exchange(bell, 1), and if
 *      it returned 0, write a byte to Y. Reader, on an empty ring: R1 exchange(bell, 0),
 *      if it returned 1 the reader owes one byte of X (owed++); R2 load prod again. All
 *      four are seq_cst, so they are totally ordered. If R2 precedes W1 in that order,
 *      then R1 precedes W2, W2 reads 0 (or a later 0) and writes a byte: the reader's
 *      poll(X) wakes. Otherwise R2 sees the new prod. Either way nothing is lost.
 *      W3/W4 (an addition to dmb.h's protocol, the reader side is unchanged): after
 *      W2 returned 0 the writer loads cons; if cons == the prod it just published, the
 *      reader has consumed everything (it found the data by spinning, before W2), so
 *      no wakeup is needed and the writer takes the bell back with
 *      compare_exchange(bell, 1 -> 0). If that fails, the reader's R1 took the bell
 *      and owes a byte: the writer writes it. A later publish runs W2 again, so no
 *      wakeup is lost; this also saves both syscalls when both sides spin.
 *      Invariant: (bytes queued or in flight in X) == owed + bell. The reader reads its
 *      owed bytes only after R2 found the ring empty, so whenever the ring is non-empty
 *      X holds (or is about to hold) at least one byte, and after a recv that leaves the
 *      ring empty X holds no byte unless new data was published meanwhile. That makes
 *      the kernel's POLLIN on X exact. An owed byte still in flight (the writer set
 *      bell and is inside write(2)) is waited for, briefly, by the reader before it
 *      returns, rather than left to make X readable on an empty ring later.
 *
 *  (3) Plug, no lost POLLOUT. Writer with a full ring: P1 fill X until EAGAIN; P2
 *      store(writer_waiting, 1); P3 load cons. Reader: C1 store cons; C2 load
 *      writer_waiting and, if 1, exchange it to 0 and drain Y. Seq_cst again: either P3
 *      sees C1's space (the writer goes on writing, X stays plugged until the reader's
 *      next cons store drains it: the writer then publishes so that such a store
 *      comes), or C2 sees P2 and drains, which makes X writable and wakes the writer's
 *      poll(X, POLLOUT). Since P1 precedes P2, the drain always removes the plug bytes.
 *
 *  (5) Spin handoff (saves both doorbell syscalls when the reader busy-polls). A
 *      reader with busy_poll_ns > 0 keeps its state in spinning: S1 ACTIVE at recv
 *      entry; S2 SLEEPING (seq_cst) before it settles and blocks in poll(X), ACTIVE
 *      again after waking; S3 IDLE at exit, after its final cons store and settle.
 *      Writer after W1: if it loads ACTIVE or IDLE and CASes bell NONE -> TENTATIVE,
 *      it waits (at most SMC_RING_HANDOFF_NS; not at all when more than
 *      SMC_RING_HANDOFF_MAX_BYTES are unread) until cons == its prod or the state is
 *      SLEEPING, then resolves: cons == prod: CAS TENTATIVE -> NONE, no byte (the
 *      reader consumed everything and needs no readiness); otherwise CAS TENTATIVE ->
 *      SET and write the byte. The reader's R1 takes only SET, never TENTATIVE, so the
 *      writer alone resolves a TENTATIVE bell within the bound. No lost wakeup: a
 *      reader about to sleep stores SLEEPING before R1/R2; if its R1 saw TENTATIVE,
 *      its R2 sees the prod of W1 (which precedes the CAS) and it does not sleep; if
 *      its R2 missed W1, the writer's load of the state (after W1) sees SLEEPING,
 *      either before the handoff (normal W2 path) or inside the wait loop (it then
 *      resolves to SET and rings). The window in which X lacks a byte while data is
 *      pending is the handoff itself, at most SMC_RING_HANDOFF_NS.
 *
 *  (6) Epoll watch (socket.c). A reader whose epoll_wait() looks at the ring itself
 *      before it sleeps stores WATCHED in spinning; a writer that loads WATCHED after
 *      W1 (seq_cst) rings no doorbell byte and does not wait. The reader stores
 *      SLEEPING (seq_cst) before any wait that relies on X, then loads prod: either
 *      it sees the data, or the writer's load came after the SLEEPING store and it
 *      rang. Data published while WATCHED has no byte in X, so the invariant of (2)
 *      ("ring non-empty => X readable") does not hold for it until it is read; the
 *      library's own waits look at the ring (smc_ring_poll(), a blocking recv).
 *
 *  (4) Flags. A closer sets its SMC_DMB_CONN_* bit (fetch_or, seq_cst) before
 *      shutdown(Y)/close(Y); the other side reads the flags (acquire) after it saw the
 *      EOF, and reloads prod after the flags, so all data published before the flag is
 *      delivered before EOF or ECONNRESET. EOF on X without a flag means the peer
 *      died: the survivor then sets SMC_DMB_CONN_ABORT itself in its own DMB, as smcd
 *      would, so that every later check agrees.
 */

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <limits.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "ring.h"
#include "sys.h"

#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __asm__ __volatile__("" ::: "memory")
#elif defined(__aarch64__) || defined(__arm__)
#define cpu_relax() __asm__ __volatile__("yield" ::: "memory")
#else
#define cpu_relax() __asm__ __volatile__("" ::: "memory")
#endif

#define SMC_RING_DEFAULT_BUSY_POLL_NS 0u
#define SMC_RING_DEFAULT_AUTOCORK (64u << 10)
#define SMC_RING_HANDOFF_NS 4000u /* writer waits this long for a spinning reader */
/* bytes: with more unread than this the writer rings at once instead of waiting for the
 * spinning reader: a reader copies ~10-20 GB/s, so it would seldom empty the ring within
 * SMC_RING_HANDOFF_NS, and the wait was 19% of iperf3 -P1's sending CPU (128 KiB
 * writes). Skipping it: 139-141 -> 150-155 Gbit/s (AMD EPYC, 2026-12-02). */
#define SMC_RING_HANDOFF_MAX_BYTES (32u << 10)
#define HANDOFF_MISS_MAX 4
#define WAIT_SPACE_POLL_MS 100 /* a blocked sender rechecks for a concurrent shutdown */
#define SEND_CHUNK_MIN (4u << 10) /* bytes: smallest piece a send publishes */
/* bytes: smallest piece a sendfile reads and publishes (unless the ring has less
 * room). A read call costs ~0.5 us besides its copy: at 16 KiB (a quarter of the
 * default ring) that was a third of a piece's time, and measured (bench-sendfile,
 * 1 MiB file, 64 KiB ring) 32 KiB pieces streamed faster than 16 or 64 KiB ones. */
#define SENDFILE_CHUNK_MIN (32u << 10)
#define OWED_SPIN_TRIES 16  /* retries of an in-flight doorbell byte before sleeping */
#define OWED_POLL_TRIES 3   /* ... then this many poll()s of OWED_POLL_MS */
#define OWED_POLL_MS 10
#define SCRATCH_LEN 4096u   /* stack buffer for plug / drain bytes */
#define SCRATCH_IOVS 16     /* iovecs aliasing it: 64 KiB per syscall */

#define PEER_GONE_FLAGS (SMC_DMB_CONN_CLOSED | SMC_DMB_CONN_ABORT)
#define PEER_EOF_FLAGS (SMC_DMB_CONN_DONE_WRITING | SMC_DMB_CONN_CLOSED | SMC_DMB_CONN_ABORT)

void (*smc_ring_idle_hook)(void);
void (*smc_ring_hold_hook)(struct smc_ring_ep *ep);

static inline void ring_idle(void) {
        void (*h)(void) = __atomic_load_n(&smc_ring_idle_hook, __ATOMIC_RELAXED);

        if (h)
                h();
}

/* The CPU we run on, + 1 (0: unknown). Busy-polling for a peer that last ran on our
 * own CPU can only delay it, so both spins and the spin handoff are skipped then. */
static uint32_t cur_cpu(void) {
        int c = sched_getcpu();

        return c < 0 ? 0 : (uint32_t) c + 1;
}

static uint64_t now_ns(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
}

/* ---- iovec iteration ---------------------------------------------------------- */

struct iov_iter {
        const struct iovec *iov;
        int cnt;
        size_t off; /* offset into iov[0] */
};

static size_t iov_total(const struct iovec *iov, int cnt) {
        size_t t = 0;

        for (int i = 0; i < cnt; i++) {
                if (iov[i].iov_len > SSIZE_MAX - t)
                        return SSIZE_MAX;
                t += iov[i].iov_len;
        }
        return t;
}

/* Buffers the kernel would refuse with EFAULT before copying a byte, as far as can be
 * told without a system call: the iovec array or a buffer in the first page (NULL and
 * small offsets from it: no mapping can be there), or a buffer that wraps around the
 * address space. Anything else bad still faults in the copy. */
#define USER_ADDR_MIN 4096u

/* The iovec array itself (the kernel copies it at once, before looking at the
 * socket): -EINVAL for a negative count, -EFAULT for an array in the first page, else
 * 0. */
static int iov_array_check(const struct iovec *iov, int cnt) {
        if (cnt < 0)
                return -EINVAL;
        return cnt > 0 && (uintptr_t) iov < USER_ADDR_MIN ? -EFAULT : 0;
}

static bool iov_bad(const struct iovec *iov, int cnt) {
        if (iov_array_check(iov, cnt) < 0)
                return true;
        for (int i = 0; i < cnt; i++)
                if (iov[i].iov_len > 0 && ((uintptr_t) iov[i].iov_base < USER_ADDR_MIN ||
                                           (uintptr_t) iov[i].iov_base + iov[i].iov_len < (uintptr_t) iov[i].iov_base))
                        return true;
        return false;
}

/* memcpy, except when the destination sits 1..63 bytes past the source modulo 4 KiB:
 * then the loads of glibc's forward copy (rep movsb on CPUs with ERMS) alias the
 * stores it just made ("4K aliasing") and on AMD CPUs it runs at ~2 GB/s instead of
 * > 20 GB/s (bench/run's "rx-offset 16" stream shows it). A malloc'd buffer at
 * page + 16 and a page-aligned DMB hit exactly that. The loops below load each block
 * before they store the previous one, so no load follows an aliasing store. The AVX2
 * loop (on CPUs that have it) keeps up with glibc's AVX memcpy; the SSE one did not:
 * iperf3 -P1, whose 128 KiB writes hit this case, made 110 Gbit/s with it and 140
 * with the AVX2 loop (memcpy: 144) on an AMD EPYC, 2026-12-02.
 * Other vendors' CPUs (an Intel Xeon with AVX-512, 2026-12-06) do not slow down
 * that much, and there memcpy wins below COPY_LOOP_MIN and the loop from there:
 * iperf3 -P1 over the default 128 KiB ring (copies of up to a quarter ring) made
 * 42-56 Gbit/s with the AVX2 loop, 64-69 with memcpy; over a 1 MiB ring (iperf3's
 * 128 KiB reads whole) 122-128 with the loop, 91-111 with memcpy; the AVX-512 form
 * of the loop 49 / 126; memcpy below 64 KiB and the loop from there 62-65 / 123-126.
 * The rx-offset 16 stream (64 KiB writes) made 6.6-6.9 GB/s every way. */
#if defined(__x86_64__)
#define COPY_LOOP_MIN (64u << 10) /* bytes: from here the loop on CPUs other than AMD's */

/* The loop for vectors of V bytes: four vectors (4 V bytes) are loaded ahead; each
 * round loads the next four, then stores the previous ones. Needs n >= 4 V. */
#define COPY_UNALIASED(name, attr, vec, load, store, V)                                                  \
        attr static void name(uint8_t *d, const uint8_t *s, size_t n) {                                  \
                vec a0 = load((const vec *) s), a1 = load((const vec *) (s + (V))),                      \
                    a2 = load((const vec *) (s + 2 * (V))), a3 = load((const vec *) (s + 3 * (V)));      \
                                                                                                         \
                while (n >= 8 * (V)) {                                                                   \
                        vec b0 = load((const vec *) (s + 4 * (V))), b1 = load((const vec *) (s + 5 * (V))), \
                            b2 = load((const vec *) (s + 6 * (V))), b3 = load((const vec *) (s + 7 * (V))); \
                                                                                                         \
                        store((vec *) d, a0);                                                            \
                        store((vec *) (d + (V)), a1);                                                    \
                        store((vec *) (d + 2 * (V)), a2);                                                \
                        store((vec *) (d + 3 * (V)), a3);                                                \
                        a0 = b0;                                                                         \
                        a1 = b1;                                                                         \
                        a2 = b2;                                                                         \
                        a3 = b3;                                                                         \
                        s += 4 * (V);                                                                    \
                        d += 4 * (V);                                                                    \
                        n -= 4 * (V);                                                                    \
                }                                                                                        \
                store((vec *) d, a0);                                                                    \
                store((vec *) (d + (V)), a1);                                                            \
                store((vec *) (d + 2 * (V)), a2);                                                        \
                store((vec *) (d + 3 * (V)), a3);                                                        \
                memcpy(d + 4 * (V), s + 4 * (V), n - 4 * (V));                                          \
        }

COPY_UNALIASED(copy_unaliased_avx2, __attribute__((target("avx2"))), __m256i, _mm256_loadu_si256,
               _mm256_storeu_si256, 32)
COPY_UNALIASED(copy_unaliased_sse2, , __m128i, _mm_loadu_si128, _mm_storeu_si128, 16)

/* 0: not asked yet, 1: the SSE2 loop, 2: the AVX2 loop, 3: memcpy below
 * COPY_LOOP_MIN and the AVX2 loop from there, 4: memcpy (cpuid's answer never
 * changes: a race only asks twice) */
static _Atomic int copy_isa;

static bool copy_isa_has(int isa) {
        __builtin_cpu_init();
        return isa == 1 || isa == 4 || ((isa == 2 || isa == 3) && __builtin_cpu_supports("avx2"));
}

static int copy_isa_cpu(void) {
        bool avx2;

        __builtin_cpu_init();
        avx2 = __builtin_cpu_supports("avx2");
        if (__builtin_cpu_is("amd"))
                return avx2 ? 2 : 1;
        return avx2 ? 3 : 4;
}
#endif

int smc_ring_copy_isa(int isa) {
#if defined(__x86_64__)
        if (isa < 1 || isa > 4 || !copy_isa_has(isa))
                isa = copy_isa_cpu();
        atomic_store_explicit(&copy_isa, isa, memory_order_relaxed);
        return isa;
#else
        (void) isa;
        return 0;
#endif
}

static void copy_bytes(void *dst, const void *src, size_t n) {
#if defined(__x86_64__)
        size_t delta = ((uintptr_t) dst - (uintptr_t) src) & 4095;

        if (n >= 512 && delta >= 1 && delta < 64) {
                int isa = atomic_load_explicit(&copy_isa, memory_order_relaxed);

                if (!isa) {
                        isa = copy_isa_cpu();
                        atomic_store_explicit(&copy_isa, isa, memory_order_relaxed);
                }
                if (isa == 2 || (isa == 3 && n >= COPY_LOOP_MIN)) {
                        copy_unaliased_avx2(dst, src, n);
                        return;
                }
                if (isa == 1) {
                        copy_unaliased_sse2(dst, src, n);
                        return;
                }
        }
#endif
        memcpy(dst, src, n);
}

/* Copy @n bytes from the iterator to @dst (src_to_ring) or from @src to the iterator.
 * @dst/@src NULL: skip (MSG_TRUNC). */
static void iter_copy(struct iov_iter *it, uint8_t *ring, size_t n, bool to_ring) {
        while (n > 0) {
                size_t left = it->iov->iov_len - it->off, k = n < left ? n : left;

                if (k > 0 && ring) {
                        if (to_ring)
                                copy_bytes(ring, (const uint8_t *) it->iov->iov_base + it->off, k);
                        else
                                copy_bytes((uint8_t *) it->iov->iov_base + it->off, ring, k);
                }
                if (ring)
                        ring += k;
                n -= k;
                it->off += k;
                if (it->off == it->iov->iov_len && it->cnt > 1) {
                        it->iov++;
                        it->cnt--;
                        it->off = 0;
                }
        }
}

/* Copy @n bytes between the iterator and ring @data of @size bytes at offset @pos,
 * in two chunks when it wraps. */
static void ring_copy(uint8_t *data, uint32_t size, uint32_t pos, struct iov_iter *it, uint32_t n, bool to_ring,
                      bool skip) {
        uint32_t first = size - pos < n ? size - pos : n;

        iter_copy(it, skip ? NULL : data + pos, first, to_ring);
        if (n > first)
                iter_copy(it, skip ? NULL : data, n - first, to_ring);
}

/* ---- shared helpers --------------------------------------------------------------- */

/* The socket's error was returned already (by this copy, or another: a dup, a
 * forked or exec'd holder, SMC_DMB_READER_ERR_TAKEN). */
static bool reset_taken(struct smc_ring_ep *ep) {
        return __atomic_load_n(&ep->reset_seen, __ATOMIC_RELAXED) ||
               (atomic_load_explicit(&ep->rx_hdr->reader_flags, memory_order_acquire) & SMC_DMB_READER_ERR_TAKEN);
}

/* The errno of a call that finds @ep closed by another thread: EBADF after a close,
 * what smc_ring_wake_closed() set after a disconnect. */
static int closed_errno(const struct smc_ring_ep *ep) {
        int e = __atomic_load_n(&ep->closed_err, __ATOMIC_ACQUIRE);

        return e > 0 ? e : EBADF;
}

static bool take_reset(struct smc_ring_ep *ep) {
        /* true the first time only, for all copies of the socket: ECONNRESET is
         * reported once, as TCP's sk_err */
        if (__atomic_exchange_n(&ep->reset_seen, true, __ATOMIC_RELAXED))
                return false;
        return !(atomic_fetch_or_explicit(&ep->rx_hdr->reader_flags, SMC_DMB_READER_ERR_TAKEN, memory_order_acq_rel) &
                 SMC_DMB_READER_ERR_TAKEN);
}

static uint32_t peer_flags(struct smc_ring_ep *ep) {
        /* the peer's state as writer into our ring and as reader of its own */
        return atomic_load_explicit(&ep->rx_hdr->conn_flags, memory_order_acquire) |
               atomic_load_explicit(&ep->tx_hdr->reader_flags, memory_order_acquire);
}

/* Our read side is shut: by our own shutdown(SHUT_RD), in this process or through
 * another copy of the socket (fork, a passed descriptor: the flag is shared, as a
 * TCP socket's shutdown state is). */
static bool rd_shut_any(struct smc_ring_ep *ep) {
        return __atomic_load_n(&ep->rd_shut, __ATOMIC_RELAXED) ||
               (atomic_load_explicit(&ep->rx_hdr->reader_flags, memory_order_relaxed) & SMC_DMB_READER_SHUT_RD);
}

/* ... our write side: shutdown(SHUT_WR) or close, here or through another copy */
static bool wr_shut_any(struct smc_ring_ep *ep) {
        return __atomic_load_n(&ep->wr_shut, __ATOMIC_RELAXED) ||
               (atomic_load_explicit(&ep->tx_hdr->conn_flags, memory_order_relaxed) & SMC_DMB_CONN_DONE_WRITING);
}

/* The socket that reads @hdr will have both directions shut once the shutdown(2)
 * we are about to make lands: mark it (dmb.h SMC_DMB_READER_X_HUP) before that call.
 * The doorbell pair mirrors the socket's state (X's write side shut with ours, its
 * read side with the peer's FIN or our SHUT_RD), so the kernel then reports EPOLLHUP
 * on X as on TCP (tcp_poll(): both directions shut), and smcd, whose copy of Y hangs
 * up at the same moment, must know that X may live on. Every call that can complete
 * the pair's shutdown marks first if it sees the other half: it sets its own half in
 * the flags (seq_cst) before it looks at the other, so of two racing halves at least
 * one sees both. Only where smcd offered it (SMC_DMB_FEAT_X_HUP). */
static void x_hup_mark(struct smc_dmb_hdr *hdr) {
        if (hdr->features & SMC_DMB_FEAT_X_HUP)
                atomic_fetch_or(&hdr->reader_flags, SMC_DMB_READER_X_HUP);
}

/* The peer's X is about to be shut both ways by our shutdown(@y, SHUT_WR) (its own
 * write side is shut), or by our shutdown(@y, SHUT_RDWR) at an abort: queue the
 * anchor byte (dmb.h SMC_DMB_READER_X_ANCHOR), then
 * mark it. SMC-D only (for SMC-R the other end of @y is smcd's). */
static void x_hup_mark_peer(struct smc_ring_ep *ep, int y) {
        static const uint8_t anchor = 0;

        if (!(ep->tx_hdr->features & SMC_DMB_FEAT_X_HUP))
                return;
        if (!ep->peer_is_daemon && sys_sendto(y, &anchor, 1, MSG_DONTWAIT | MSG_NOSIGNAL, NULL, 0) == 1)
                atomic_fetch_or(&ep->tx_hdr->reader_flags, SMC_DMB_READER_X_ANCHOR);
        x_hup_mark(ep->tx_hdr);
}

/* The peer shut down writing (its FIN) before it aborted: TCP then delivers the data
 * and EOF, and reports the reset that follows as EPIPE, not ECONNRESET (tcp_reset() of
 * a connection in CLOSE_WAIT). Python's socketserver does shutdown(SHUT_WR) then
 * close() with a request body partly unread: curl must read the reply and its end. */
static bool peer_fin_then_reset(struct smc_ring_ep *ep) {
        return atomic_load_explicit(&ep->rx_hdr->conn_flags, memory_order_acquire) & SMC_DMB_CONN_DONE_WRITING;
}

/* The peer vanished (EOF/EPIPE on one of our sockets to it) without telling us
 * through the flags: it died. Mark the abort in our own DMB as smcd does. */
/* The peer's end of our doorbell pair closed without a close flag: its process exited
 * or was killed. As TCP does when a process dies with the socket open (the kernel
 * closes it): orderly close (FIN: EOF here) if the peer had read everything we sent,
 * abort (RST: ECONNRESET) if data of ours was left unread in its ring. smcd applies
 * the same rule when it sees the client die. */
static void mark_peer_dead(struct smc_ring_ep *ep) {
        bool unread;

        if (peer_flags(ep) & PEER_GONE_FLAGS)
                return;
        /* SMC-R: the other end of the pairs is smcd, whose death breaks the
         * connection whatever was read: an abort, never a clean end of stream */
        unread = ep->peer_is_daemon || atomic_load(&ep->tx_hdr->cons) != atomic_load(&ep->tx_hdr->prod);
        atomic_fetch_or(&ep->rx_hdr->conn_flags, unread ? SMC_DMB_CONN_ABORT : SMC_DMB_CONN_CLOSED);
}

/* Bytes in our rx ring not yet consumed, as of a fresh prod load. */
static uint32_t rx_avail(struct smc_ring_ep *ep, uint64_t cons) {
        return smc_curs_diff(ep->rx_size, cons, atomic_load(&ep->rx_hdr->prod));
}

static uint32_t tx_space(struct smc_ring_ep *ep) {
        uint64_t cons = atomic_load(&ep->tx_hdr->cons);

        return ep->tx_size - smc_curs_diff(ep->tx_size, cons, __atomic_load_n(&ep->tx_prod, __ATOMIC_RELAXED));
}

/* tx_space() for a sender that does not hold wr_lock (waiting for room, or poll): a
 * shared connection's other writers may have moved the producer cursor past ours, so
 * take it from the header (nothing of ours is unpublished then: shared sends publish
 * before they let go). */
static uint32_t tx_space_unlocked(struct smc_ring_ep *ep) {
        uint64_t cons, prod;

        if (!__atomic_load_n(&ep->shared, __ATOMIC_RELAXED))
                return tx_space(ep);
        prod = atomic_load(&ep->tx_hdr->prod);
        cons = atomic_load(&ep->tx_hdr->cons);
        return ep->tx_size - smc_curs_diff(ep->tx_size, cons, prod);
}

int smc_ring_init(struct smc_ring_ep *ep, void *rx_base, uint32_t rx_size, void *tx_base, uint32_t tx_size,
                  int x, int y_peer) {
        int r;

        if (!ep || !rx_base || !tx_base || rx_size == 0 || tx_size == 0 || rx_size > SMC_DMB_MAX_SIZE ||
            tx_size > SMC_DMB_MAX_SIZE || x < 0 || y_peer < 0)
                return -EINVAL;

        *ep = (struct smc_ring_ep) {
                .rx_hdr = rx_base,
                .rx_data = smc_dmb_data(rx_base),
                .rx_size = rx_size,
                .tx_hdr = tx_base,
                .tx_data = smc_dmb_data(tx_base),
                .tx_size = tx_size,
                .x = x,
                .y_peer = y_peer,
                .busy_poll_ns = SMC_RING_DEFAULT_BUSY_POLL_NS,
                /* an adopted connection (exec, SCM_RIGHTS): X may be unplugged with
                 * the ring full, so the first wait for POLLOUT settles it */
                .plug_owed = true,
                .autocork_size = tx_size / 2 < SMC_RING_DEFAULT_AUTOCORK ? tx_size / 2 : SMC_RING_DEFAULT_AUTOCORK,
        };
        ep->tx_prod = atomic_load(&ep->tx_hdr->prod);
        ep->tx_msgs = atomic_load_explicit(&ep->tx_hdr->prod_msgs, memory_order_relaxed);
        ep->tx_cork_flushes = atomic_load_explicit(&ep->tx_hdr->prod_cork_flushes, memory_order_relaxed);
        ep->tx_sendfile_calls = atomic_load_explicit(&ep->tx_hdr->prod_sendfile_calls, memory_order_relaxed);
        ep->tx_sendfile_bytes = atomic_load_explicit(&ep->tx_hdr->prod_sendfile_bytes, memory_order_relaxed);
        ep->rx_msgs = atomic_load_explicit(&ep->rx_hdr->cons_msgs, memory_order_relaxed);

        /* (X's SO_SNDBUF is its creator's: smcd sets the smallest, dmb.h) */

        r = pthread_mutex_init(&ep->tx_lock, NULL);
        if (r != 0)
                return -r;
        r = pthread_mutex_init(&ep->rx_lock, NULL);
        if (r != 0) {
                pthread_mutex_destroy(&ep->tx_lock);
                return -r;
        }
        return 0;
}

void smc_ring_fini(struct smc_ring_ep *ep) {
        pthread_mutex_destroy(&ep->tx_lock);
        pthread_mutex_destroy(&ep->rx_lock);
}

/* ---- transmit side (tx_lock held) ------------------------------------------------ */

/* With nothing held back, take the producer cursor from the peer's DMB, where only
 * we write it: another process holding a copy of this connection (fork) may have
 * sent since this one last did; shared, the counters too (they are totals of all
 * writers). tx_lock held (and wr_lock when shared). */
static void tx_sync(struct smc_ring_ep *ep) {
        if (ep->tx_unpub != 0)
                return;
        __atomic_store_n(&ep->tx_prod, atomic_load_explicit(&ep->tx_hdr->prod, memory_order_relaxed),
                         __ATOMIC_RELAXED);
        if (__atomic_load_n(&ep->shared, __ATOMIC_RELAXED)) {
                ep->tx_bytes = atomic_load_explicit(&ep->tx_hdr->prod_bytes, memory_order_relaxed);
                ep->tx_msgs = atomic_load_explicit(&ep->tx_hdr->prod_msgs, memory_order_relaxed);
                ep->tx_cork_flushes = atomic_load_explicit(&ep->tx_hdr->prod_cork_flushes, memory_order_relaxed);
                ep->tx_sendfile_calls = atomic_load_explicit(&ep->tx_hdr->prod_sendfile_calls, memory_order_relaxed);
                ep->tx_sendfile_bytes = atomic_load_explicit(&ep->tx_hdr->prod_sendfile_bytes, memory_order_relaxed);
        }
}

/* ---- Shared writers ----------------------------------------------------------------
 *
 * A connection shared by fork, dup or exec may be written by several processes at
 * once; tx_lock only orders the threads of one. So a shared endpoint's sends also
 * hold wr_lock in the peer's DMB header: 0 when free, else the pid of the holder.
 * The holder copies from the producer cursor in the header (tx_sync) and publishes
 * everything before it lets go, so the next writer, in any process, continues after
 * it; it lets go while it sleeps for space. A holder that died (kill -9 in a send) is
 * found by kill(pid, 0) and its lock taken over; the bytes it copied but did not
 * publish are overwritten, as a TCP send that never returned may send part of its
 * buffer. The peer can write the word too, but only to stall or garble its own
 * traffic: it can never make a writer touch memory outside the ring. */
/* Writable, as TCP reports it: a socket is writable (POLLOUT) when at least this much
 * of the peer's ring is free, so that a program that polls for POLLOUT and then makes
 * a blocking write of a buffer (socat: 8 KiB) finds room for it, and two such
 * programs never block writing to each other (a TCP sender's POLLOUT likewise waits
 * for a third to a half of its buffer). The reader drains a writer's plug only then
 * (rx_unplug_writer), a send that leaves less plugs X (tx_plug_after). */
#define WRITABLE_MIN(size) ((size) / 2)
#define WR_LOCK_SPINS 256
#define SHARED_WRITE_WHOLE PIPE_BUF /* bytes: a shared send up to this is never split */
#define WR_LOCK_SLEEP_NS 20000 /* between checks once spinning did not get it */

static void tx_lock_shared(struct smc_ring_ep *ep) {
        uint32_t me = (uint32_t) getpid(), cur;

        for (unsigned round = 0;; round++) {
                cur = 0;
                if (atomic_compare_exchange_weak_explicit(&ep->tx_hdr->wr_lock, &cur, me, memory_order_acquire,
                                                          memory_order_relaxed))
                        return;
                if (cur == me || (int32_t) cur <= 0) {
                        /* our own pid (a thread of a former image of this process, cut off
                         * by exec; our threads are ordered by tx_lock) or garbage */
                        if (atomic_compare_exchange_strong_explicit(&ep->tx_hdr->wr_lock, &cur, me,
                                                                    memory_order_acquire, memory_order_relaxed))
                                return;
                        continue;
                }
                if (round < WR_LOCK_SPINS) {
                        cpu_relax();
                        continue;
                }
                if ((round & 63) == 0) {
                        int saved = errno;
                        bool dead = kill((pid_t) cur, 0) < 0 && errno == ESRCH;

                        errno = saved;
                        if (dead && atomic_compare_exchange_strong_explicit(&ep->tx_hdr->wr_lock, &cur, me,
                                                                            memory_order_acquire,
                                                                            memory_order_relaxed))
                                return;
                }
                {
                        struct timespec ts = { 0, WR_LOCK_SLEEP_NS };

                        nanosleep(&ts, NULL);
                }
        }
}

/* wr_lock if it is free now (a readiness check must not wait for another process's
 * send, which may be stopped there) */
static bool tx_trylock_shared(struct smc_ring_ep *ep) {
        uint32_t cur = 0;

        return atomic_compare_exchange_strong_explicit(&ep->tx_hdr->wr_lock, &cur, (uint32_t) getpid(),
                                                       memory_order_acquire, memory_order_relaxed);
}

static void tx_unlock_shared(struct smc_ring_ep *ep) {
        atomic_store_explicit(&ep->tx_hdr->wr_lock, 0, memory_order_release);
}

void smc_ring_set_shared(struct smc_ring_ep *ep) {
        if (ep) {
                __atomic_store_n(&ep->shared, true, __ATOMIC_RELAXED);
                /* another process may wait on X in the kernel: writers must ring */
                smc_ring_watch(ep, false);
        }
}

/* -EPIPE / -ECONNRESET if sending is no longer possible, else 0. */

static int tx_check(struct smc_ring_ep *ep) {
        uint32_t f;

        if (__atomic_load_n(&ep->wr_shut, __ATOMIC_RELAXED))
                return -EPIPE;
        /* ... also through a copy in another process (fork): the flag is shared */
        if (atomic_load_explicit(&ep->tx_hdr->conn_flags, memory_order_relaxed) & SMC_DMB_CONN_DONE_WRITING)
                return -EPIPE;
        f = peer_flags(ep);
        if (f & SMC_DMB_CONN_ABORT)
                /* taken (reported once) by smc_ring_send(); after the peer's FIN, TCP
                 * reports the reset as EPIPE (tcp_reset() in CLOSE_WAIT) */
                return peer_fin_then_reset(ep) ? -EPIPE : -ECONNRESET;
        if (f & SMC_DMB_CONN_CLOSED)
                return -EPIPE;
        /* the peer "reset" the connection after the send it got with both directions
         * shut (tx_take_send_after_fin) */
        if (atomic_load_explicit(&ep->tx_hdr->prod_flags, memory_order_relaxed) & SMC_DMB_PROD_SENT_AFTER_CLOSE)
                return -EPIPE;
        return 0;
}

/* TCP accepts the first send after the peer's orderly close (FIN): the data goes out,
 * the peer's kernel answers with RST, and only a later send fails with EPIPE (and
 * SIGPIPE), as tcp_reset() sets EPIPE for a connection in CLOSE_WAIT. A program that
 * writes and then reads to learn that the server hung up (an HTTP client reusing a
 * kept-alive connection) must not be killed by SIGPIPE on that write. So the first
 * send after the peer closed is taken whole and dropped (its bytes had nowhere to go
 * over TCP either); never after an abort (ECONNRESET), nor after our own
 * shutdown(SHUT_WR). Once per connection, also when processes share it (the flag is in
 * the peer's DMB header). The same holds for a peer that shut down both
 * directions but still holds the socket (TCP: data reaching a socket in FIN_WAIT with
 * its receive side shut is answered with RST, tcp_rcv_state_process()); that peer
 * then gets the reset too (our ABORT flag: ECONNRESET once, state CLOSE). True if
 * this send is that one (with @take false: would be, and nothing is taken: a zero-length
 * send, which TCP answers with 0 there). tx_lock held. */
static bool tx_take_send_after_fin(struct smc_ring_ep *ep, bool take) {
        uint32_t f;
        bool shut_both;

        if (__atomic_load_n(&ep->wr_shut, __ATOMIC_RELAXED))
                return false;
        /* ... nor after a shutdown(SHUT_WR) through another copy (fork, a passed
         * descriptor): the flag is shared */
        if (atomic_load_explicit(&ep->tx_hdr->conn_flags, memory_order_relaxed) & SMC_DMB_CONN_DONE_WRITING)
                return false;
        f = peer_flags(ep);
        if (f & SMC_DMB_CONN_ABORT)
                return false;
        shut_both = (atomic_load_explicit(&ep->tx_hdr->reader_flags, memory_order_acquire) & SMC_DMB_READER_SHUT_RD) &&
                    (atomic_load_explicit(&ep->rx_hdr->conn_flags, memory_order_acquire) & SMC_DMB_CONN_DONE_WRITING);
        if (!(f & SMC_DMB_CONN_CLOSED) && !shut_both)
                return false;
        if (!take)
                return !(atomic_load_explicit(&ep->tx_hdr->prod_flags, memory_order_relaxed) &
                         SMC_DMB_PROD_SENT_AFTER_CLOSE);
        if (atomic_fetch_or(&ep->tx_hdr->prod_flags, SMC_DMB_PROD_SENT_AFTER_CLOSE) & SMC_DMB_PROD_SENT_AFTER_CLOSE)
                return false;
        if (!(f & SMC_DMB_CONN_CLOSED)) {
                int y = __atomic_load_n(&ep->y_peer, __ATOMIC_RELAXED);

                atomic_fetch_or(&ep->tx_hdr->conn_flags, SMC_DMB_CONN_ABORT); /* the peer's RST */
                /* ... and its wakeup (tcp_reset(): a new edge for edge-triggered
                 * epoll): its X shut its read side already, so shutting our end's
                 * write side changes nothing there but wakes its waiters */
                if (y >= 0)
                        (void) sys_shutdown(y, SHUT_WR);
        }
        return true;
}

/* The peer's RST for the send just taken (tx_take_send_after_fin): TCP's socket is
 * then closed both ways (tcp_reset(): EPOLLHUP, and a new edge for edge-triggered
 * epoll; a program that sent a request on a connection the server had closed waits
 * for that edge). X's read side is shut already (the peer's close or SHUT_WR shut Y's
 * write side); shutting its write side, marked first as every completing shutdown
 * is (x_hup_mark()), makes the kernel report EPOLLHUP on X. Nothing of ours goes
 * through X any more: later sends fail (tx_check()). Only where smcd offered it
 * (SMC_DMB_FEAT_X_HUP). tx_lock held. */
static void tx_hup_after_close(struct smc_ring_ep *ep) {
        if (!(ep->rx_hdr->features & SMC_DMB_FEAT_X_HUP))
                return;
        x_hup_mark(ep->rx_hdr);
        (void) sys_shutdown(ep->x, SHUT_WR);
}

/* tx_take_send_after_fin() for a send that tx_check() answered with @r: only after
 * EPIPE, or with the peer's receive side shut (one relaxed load otherwise). */
static bool tx_send_after_close(struct smc_ring_ep *ep, int r, bool take) {
        if (r != -EPIPE &&
            (r != 0 || !(atomic_load_explicit(&ep->tx_hdr->reader_flags, memory_order_relaxed) & SMC_DMB_READER_SHUT_RD)))
                return false;
        return tx_take_send_after_fin(ep, take);
}

/* A syscall towards the peer failed with EPIPE/ECONNRESET. */
static int tx_peer_gone(struct smc_ring_ep *ep) {
        int r;

        mark_peer_dead(ep);
        r = tx_check(ep);
        return r < 0 ? r : -EPIPE;
}

/* The doorbell write failed with EPIPE: the peer died, unless it only shut down
 * reading (its X then refuses doorbell bytes, and nobody needs waking). */
static int tx_bell_gone(struct smc_ring_ep *ep) {
        if (atomic_load(&ep->tx_hdr->reader_flags) & (SMC_DMB_READER_SHUT_RD | SMC_DMB_READER_X_HUP))
                return 0;
        return tx_peer_gone(ep);
}

/* Write the doorbell byte to the peer's X through @y, our end of its pair. */
static int ring_bell(int y) {
        static const uint8_t one = 1;

        for (;;) {
                ssize_t n = sys_sendto(y, &one, 1, MSG_DONTWAIT | MSG_NOSIGNAL, NULL, 0);
                struct pollfd p = { .fd = y, .events = POLLOUT };

                if (n == 1)
                        return 0;
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && (errno == EPIPE || errno == ECONNRESET))
                        return -EPIPE;
                if (n < 0 && errno != EAGAIN)
                        return -errno;
                /* Cannot happen while the invariant "bytes in X == owed + bell" holds
                 * (at most a few bytes queued); wait rather than lose a wakeup. */
                if (sys_poll(&p, 1, -1) < 0 && errno != EINTR)
                        return -errno;
        }
}

/* Resolve a TENTATIVE bell this writer holds (dmb.h, (5) above): wait, bounded, for
 * the spinning reader to consume everything published, then either take the bell
 * back (no syscall) or make it SET and write the doorbell byte. Called before the
 * writer returns from a send, sleeps, or publishes for close, so a TENTATIVE bell
 * never outlives the writer's activity. */
static int tx_resolve(struct smc_ring_ep *ep) {
        uint64_t prod = atomic_load_explicit(&ep->tx_hdr->prod, memory_order_relaxed); /* ours */
        uint64_t end = 0;
        uint32_t b;
        bool spin_wait;
        int r, y;

        if (!ep->tentative)
                return 0;
        ep->tentative = false;
        /* (what is unread only shrinks: once within the limit, it stays so) */
        spin_wait = smc_curs_diff(ep->tx_size, atomic_load(&ep->tx_hdr->cons), prod) <= SMC_RING_HANDOFF_MAX_BYTES;
        for (unsigned i = 0; spin_wait; i++) {
                if (atomic_load(&ep->tx_hdr->cons) == prod)
                        break;
                if (atomic_load(&ep->tx_hdr->spinning) == SMC_DMB_SPIN_SLEEPING)
                        break;
                if ((i & 63) == 63) {
                        uint64_t t = now_ns();
                        if (!end)
                                end = t + SMC_RING_HANDOFF_NS;
                        else if (t >= end)
                                break;
                }
                cpu_relax();
        }
        b = SMC_DMB_BELL_TENTATIVE;
        if (atomic_load(&ep->tx_hdr->cons) == prod &&
            atomic_compare_exchange_strong(&ep->tx_hdr->bell, &b, SMC_DMB_BELL_NONE)) {
                ep->handoff_miss = 0;
                return 0; /* consumed by the spinning reader: no syscall */
        }
        if (ep->tentative_idle && ep->handoff_miss < HANDOFF_MISS_MAX)
                ep->handoff_miss++;
        b = SMC_DMB_BELL_TENTATIVE;
        if (!atomic_compare_exchange_strong(&ep->tx_hdr->bell, &b, SMC_DMB_BELL_SET))
                return 0; /* cannot happen: the reader never takes TENTATIVE */
        /* As W3/W4 in tx_publish(): the reader may have consumed everything since the
         * check above, and settled while the bell was TENTATIVE (which it leaves
         * alone): a byte now would leave its X readable on an empty ring, and a
         * nonblocking read after EPOLLIN would get EAGAIN (wrk counts that as an
         * error). Take the bell back unless the reader took it (it owes a byte). */
        if (atomic_load(&ep->tx_hdr->cons) == prod) {
                b = SMC_DMB_BELL_SET;
                if (atomic_compare_exchange_strong(&ep->tx_hdr->bell, &b, SMC_DMB_BELL_NONE))
                        return 0;
        }
        y = __atomic_load_n(&ep->y_peer, __ATOMIC_RELAXED); /* smc_ring_close() may race */
        if (y < 0)
                return -EPIPE;
        r = ring_bell(y);
        return r == -EPIPE ? tx_bell_gone(ep) : r;
}

/* Publish tx_prod to the peer and ring it if its bell was not already set. With
 * @last false the writer goes on writing in this call, so a spin handoff is started
 * (or kept) without waiting for the reader; with @last true it is resolved. */
static int tx_publish(struct smc_ring_ep *ep, bool last) {
        uint32_t b, st, cpu;
        int r, y;

        cpu = cur_cpu();
        if (ep->tx_unpub > 0) {
                if (atomic_load_explicit(&ep->tx_hdr->writer_cpu, memory_order_relaxed) != cpu)
                        atomic_store_explicit(&ep->tx_hdr->writer_cpu, cpu, memory_order_relaxed);
                ep->tx_bytes += ep->tx_unpub;
                /* counters: single writer, plain stores on the line prod is on */
                atomic_store_explicit(&ep->tx_hdr->prod_bytes, ep->tx_bytes, memory_order_relaxed);
                atomic_store_explicit(&ep->tx_hdr->prod_msgs, ep->tx_msgs, memory_order_relaxed);
                if (ep->tx_held) {
                        ep->tx_held = false;
                        atomic_store_explicit(&ep->tx_hdr->prod_cork_flushes, ++ep->tx_cork_flushes,
                                              memory_order_relaxed);
                        atomic_store_explicit(&ep->tx_hdr->prod_held, 0, memory_order_relaxed);
                }
                /* W1: release the copied bytes (seq_cst: ordered before W2) */
                atomic_store(&ep->tx_hdr->prod, ep->tx_prod);
                ep->tx_unpub = 0;
        } else if (!ep->tentative)
                return 0;
        if (ep->tentative)
                return last ? tx_resolve(ep) : 0;

        /* (6) Watched reader: its epoll_wait() looks at the ring before it sleeps
         * (socket.c "epoll watch"), so no byte is needed. The load is seq_cst after
         * W1: a reader that stops watching stores SLEEPING (seq_cst) and then loads
         * prod, so either it sees our data or we see SLEEPING and ring below. */
        st = atomic_load(&ep->tx_hdr->spinning);
        if (st == SMC_DMB_SPIN_WATCHED)
                return 0;
        /* Spin handoff (dmb.h, (5) above): the reader busy-polls; let it take the data
         * without a doorbell byte. Only this writer (tx_lock) ever sets TENTATIVE. An
         * IDLE reader (between recv calls) is worth it only while such handoffs pay
         * off: after HANDOFF_MISS_MAX misses in a row try once in 64. */
        st = atomic_load(&ep->tx_hdr->spinning);
        if (cpu && atomic_load_explicit(&ep->tx_hdr->reader_cpu, memory_order_relaxed) == cpu)
                st = SMC_DMB_SPIN_NONE; /* it cannot run while we wait */
        if (st == SMC_DMB_SPIN_IDLE && ep->handoff_miss >= HANDOFF_MISS_MAX &&
            (++ep->handoff_miss & 63) != 0)
                st = SMC_DMB_SPIN_NONE;
        b = SMC_DMB_BELL_NONE;
        if ((st == SMC_DMB_SPIN_ACTIVE || st == SMC_DMB_SPIN_IDLE) &&
            atomic_compare_exchange_strong(&ep->tx_hdr->bell, &b, SMC_DMB_BELL_TENTATIVE)) {
                ep->tentative = true;
                ep->tentative_idle = st == SMC_DMB_SPIN_IDLE;
                return last ? tx_resolve(ep) : 0;
        }

        /* W2 */
        if (atomic_exchange(&ep->tx_hdr->bell, SMC_DMB_BELL_SET) != SMC_DMB_BELL_NONE)
                return 0;
        /* W3/W4: the reader may already have consumed everything (it spun on prod)
         * and settled before W2; a byte now would leave its X readable on an empty
         * ring. Take the bell back unless the reader took it (then it owes a byte). */
        if (atomic_load(&ep->tx_hdr->cons) == ep->tx_prod) {
                uint32_t one = SMC_DMB_BELL_SET;

                if (atomic_compare_exchange_strong(&ep->tx_hdr->bell, &one, SMC_DMB_BELL_NONE))
                        return 0;
        }
        y = __atomic_load_n(&ep->y_peer, __ATOMIC_RELAXED); /* smc_ring_close() may race */
        if (y < 0)
                return -EPIPE;
        r = ring_bell(y);
        return r == -EPIPE ? tx_bell_gone(ep) : r;
}

static int tx_plug(struct smc_ring_ep *ep) {
        uint8_t zeros[SCRATCH_LEN];
        struct iovec iov[SCRATCH_IOVS];
        struct msghdr mh = { .msg_iov = iov, .msg_iovlen = SCRATCH_IOVS };

        memset(zeros, 0, sizeof(zeros));
        for (int i = 0; i < SCRATCH_IOVS; i++)
                iov[i] = (struct iovec) { zeros, sizeof(zeros) };
        for (;;) {
                /* MSG_DONTWAIT: X's O_NONBLOCK belongs to the application */
                ssize_t n = sys_sendmsg(ep->x, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);

                if (n >= 0 || errno == EINTR)
                        continue;
                if (errno == EAGAIN)
                        return 0;
                if (errno == EPIPE || errno == ECONNRESET)
                        return tx_peer_gone(ep);
                return -errno;
        }
}

/* The send timeout of one call: SO_SNDTIMEO of @fd (-1: none), read only when the call
 * first has to sleep, so a call that finds space pays no syscall for it. */
struct tx_deadline {
        int fd;
        bool known;
        uint64_t end_ns; /* CLOCK_MONOTONIC; 0: no limit */
};

/* The poll(2) timeout for the next sleep of a blocked sender: WAIT_SPACE_POLL_MS, or
 * less when the send timeout ends sooner; -ETIMEDOUT once it has passed. */
static int tx_deadline_poll_ms(struct tx_deadline *d) {
        uint64_t now, left;

        if (!d || d->fd < 0)
                return WAIT_SPACE_POLL_MS;
        if (!d->known) {
                struct timeval tv = {};
                socklen_t tl = sizeof(tv);

                d->known = true;
                if (sys_getsockopt(d->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, &tl) == 0 && (tv.tv_sec > 0 || tv.tv_usec > 0))
                        d->end_ns = now_ns() + (uint64_t) tv.tv_sec * 1000000000u + (uint64_t) tv.tv_usec * 1000u;
        }
        if (d->end_ns == 0)
                return WAIT_SPACE_POLL_MS;
        now = now_ns();
        if (now >= d->end_ns)
                return -ETIMEDOUT;
        left = (d->end_ns - now + 999999u) / 1000000u; /* ms, rounded up */
        return left < WAIT_SPACE_POLL_MS ? (int) left : WAIT_SPACE_POLL_MS;
}

/* Wait until the peer's ring has @need (>= 1) bytes of space. Returns 0 (space; *plugged set if X was left
 * plugged, in which case the caller must publish), -EAGAIN (nonblock, or the send
 * timeout of @dl passed, as TCP reports it), -EINTR, -EPIPE, -ECONNRESET, or another
 * -errno. @dl may be NULL (no timeout). @progress: this call has already moved bytes
 * (published); a nonblocking send then spins as a blocking one does while a reader
 * on another CPU frees room, so that one call takes what TCP's send buffer would:
 * a program that moves the rest of its buffer after each partial write (hiredis'
 * sdsrange, so redis-benchmark with large pipelined values) otherwise pays a copy of
 * the whole rest per half ring. Measured (2 vCPUs, 128 KiB ring, redis-benchmark SET
 * -d 300000 -P 16): 1.2k -> 2.6-4.4k req/s with 50 clients, 2.6-2.9k -> 7.7-8.7k with
 * one (TCP 9-15k); nginx 1 MiB file, wrk -c 32: 5614 -> 5670 req/s (mean of 8). A
 * rule that stopped waiting after 10 us without room freed kept nginx there and lost
 * most of redis' gain (its reader serves the request between reads). */
static int tx_wait_space(struct smc_ring_ep *ep, bool nonblock, bool *plugged, struct tx_deadline *dl,
                         uint32_t need, bool progress) {
        int r, ms;

        if ((!nonblock || progress) && ep->busy_poll_ns > 0 &&
            atomic_load_explicit(&ep->tx_hdr->reader_cpu, memory_order_relaxed) != cur_cpu()) {
                uint64_t end = now_ns() + ep->busy_poll_ns;

                do {
                        if (tx_space_unlocked(ep) >= need)
                                return 0;
                        if (peer_flags(ep) & PEER_GONE_FLAGS)
                                break;
                        cpu_relax();
                } while (now_ns() < end);
        }

        /* about to plug and maybe sleep: no TENTATIVE bell may be left behind */
        r = tx_resolve(ep);
        if (r < 0)
                return r;
        for (;;) {
                struct pollfd p = { .fd = ep->x, .events = POLLOUT };

                if (tx_space_unlocked(ep) >= need)
                        return 0;
                r = tx_check(ep);
                if (r < 0)
                        return r;
                r = tx_plug(ep);                                          /* P1 */
                if (r < 0)
                        return r;
                atomic_fetch_or(&ep->tx_hdr->prod_flags, SMC_DMB_PROD_WRITE_BLOCKED);
                atomic_store(&ep->tx_hdr->writer_waiting, 1);            /* P2 */
                if (tx_space_unlocked(ep) >= need) {                               /* P3 */
                        *plugged = true;
                        return 0;
                }
                r = tx_check(ep);
                if (r < 0)
                        return r;
                ring_idle();
                if (nonblock)
                        return -EAGAIN;
                /* O_NONBLOCK is shared by the copies of X (an open file's flag): a
                 * copy in another process may have set it since the caller looked */
                if (ep->x_mode_is_app && __atomic_load_n(&ep->shared, __ATOMIC_RELAXED) &&
                    (sys_fcntl(ep->x, F_GETFL, 0) & O_NONBLOCK))
                        return -EAGAIN;
                ms = tx_deadline_poll_ms(dl);
                if (ms < 0)
                        return -EAGAIN; /* SO_SNDTIMEO passed: EAGAIN, as TCP */
                /* bounded, to see a shutdown(SHUT_WR) from another thread */
                __atomic_store_n(&ep->tx_sleeping, ep->tx_unpub == 0 && !ep->tentative, __ATOMIC_RELEASE);
                r = sys_poll(&p, 1, ms);
                __atomic_store_n(&ep->tx_sleeping, false, __ATOMIC_RELAXED);
                if (r < 0)
                        return errno == EINTR ? -EINTR : -errno;
                if (__atomic_load_n(&ep->wr_shut_pending, __ATOMIC_RELAXED))
                        return -EPIPE;
                /* POLLHUP/POLLERR: the next tx_plug() reports EPIPE, or the flags tell */
        }
}

/* A bounded wait for the peer to get through a few system calls (the writer's plug,
 * Q1..Q4; the reader's drain, D0..D3): spin while it runs on another CPU; then yield
 * the CPU, so that a peer preempted on ours (both ends on one CPU, or a busy machine)
 * runs at once; then sleep, 10 us doubling to 1 ms. A sleep of 1 ms from the start
 * left the CPU idle while the writer was done in microseconds: qperf tcp_bw with both
 * ends on one CPU made 0.5-1.4 GB/s against TCP's 3.1. */
struct peer_wait {
        bool same_cpu;  /* the peer last ran on our CPU: spinning cannot help */
        unsigned steps;
        uint64_t start; /* ns, CLOCK_MONOTONIC, at the first step past the spin */
};

#define PEER_WAIT_SPINS 1024u   /* cpu_relax() rounds first (a few us) */
#define PEER_WAIT_YIELDS 16u    /* then sched_yield() calls */
#define PLUG_WAIT_MAX_NS 30000000u /* rx_unplug_writer gives up after 30 ms */
#define DRAIN_WAIT_MAX_NS 10000000u /* tx_plug_after's Q3, after 10 ms (16 times at most) */

/* One step of the wait; false once @max_ns passed since the spin ended (the peer is
 * stopped: the caller gives up). */
static bool peer_wait_step(struct peer_wait *w, uint64_t max_ns) {
        unsigned k;

        if (!w->same_cpu && w->steps < PEER_WAIT_SPINS) {
                w->steps++;
                cpu_relax();
                return true;
        }
        if (w->start == 0)
                w->start = now_ns();
        else if (now_ns() - w->start > max_ns)
                return false;
        k = w->steps++ - (w->same_cpu ? 0 : PEER_WAIT_SPINS);
        if (k < PEER_WAIT_YIELDS)
                sched_yield();
        else {
                unsigned sh = k - PEER_WAIT_YIELDS;
                struct timespec ts = { 0, sh < 7 ? 10000L << sh : 1000000L };

                nanosleep(&ts, NULL);
        }
        return true;
}

/* After a send that left less than WRITABLE_MIN free: make X not writable until the
 * reader frees that much, as TCP's POLLOUT. The reader drains on its cons stores once
 * there is room (rx_unplug_writer); plug_pending closes the race with a reader that
 * empties the ring meanwhile. tx_lock held. */
static void tx_plug_after(struct smc_ring_ep *ep, bool spin) {
        uint32_t d0, g0;

        if (tx_space(ep) >= WRITABLE_MIN(ep->tx_size))
                return;
        /* a reader busy on another CPU usually frees the room in microseconds: spin for
         * it as a blocked sender does (tx_wait_space) rather than plug, sleep and be
         * woken (socat's select-then-write loop: 5x the time without this) */
        if (spin && ep->busy_poll_ns > 0 &&
            atomic_load_explicit(&ep->tx_hdr->reader_cpu, memory_order_relaxed) != cur_cpu()) {
                uint64_t end = now_ns() + ep->busy_poll_ns;

                do {
                        if (tx_space(ep) >= WRITABLE_MIN(ep->tx_size))
                                return;
                        if (peer_flags(ep) & PEER_GONE_FLAGS)
                                return;
                        cpu_relax();
                } while (now_ns() < end);
        }
        /* Q1 (seq_cst): announce, then look at cons again. A reader that emptied the
         * ring stores cons (D1) and then loads plug_pending (D2): either Q2 sees D1's
         * room and we do not plug, or D2 sees Q1 and the reader waits for Q4 or P2 and
         * drains (rx_unplug_writer). */
        atomic_store(&ep->tx_hdr->plug_pending, 1);                        /* Q1 */
        /* Q0 (seq_cst, before P1): the reader's drain state, for Q3's shortcut */
        d0 = atomic_load(&ep->tx_hdr->draining);
        g0 = atomic_load(&ep->tx_hdr->drain_gen);
        if (tx_space(ep) < WRITABLE_MIN(ep->tx_size) && tx_plug(ep) == 0) {  /* Q2, P1 */
                atomic_store(&ep->tx_hdr->writer_waiting, 1);             /* P2 */
                /* Q3 shortcut: a drain that read our plug bytes began before them and
                 * ended after them: it was in progress at Q0 (d0), or is now, or ended
                 * in between (drain_gen moved). None of these: our plug stands, and no
                 * poll(2) is needed to see it. */
                if (!d0 && !atomic_load(&ep->tx_hdr->draining) && atomic_load(&ep->tx_hdr->drain_gen) == g0)
                        goto done;
                /* Q3: a reader that decided to drain before our publish (its D0 came
                 * first, so it did not see our data) may be inside its drain loop, which
                 * reads Y until EAGAIN and so eats the plug we just made: X would stay
                 * writable with less than half free (a socat relay then wrote into a
                 * full ring and deadlocked with its filter, under CPU contention). Wait
                 * for that drain to end (D3), then plug again if X is writable. A drain
                 * that starts after our P2 looks at the room after its D0 and sees our
                 * data. Bounded: a stopped drainer costs us at most ~10 ms. */
                for (unsigned tries = 0; tries < 16; tries++) {
                        struct pollfd p = { .fd = ep->x, .events = POLLOUT };
                        struct peer_wait w = { .same_cpu = atomic_load_explicit(&ep->tx_hdr->reader_cpu,
                                                                                memory_order_relaxed) == cur_cpu() };

                        while (atomic_load(&ep->tx_hdr->draining) && peer_wait_step(&w, DRAIN_WAIT_MAX_NS))
                                ;
                        if (tx_space(ep) >= WRITABLE_MIN(ep->tx_size))
                                break;
                        if (sys_poll(&p, 1, 0) <= 0 || !(p.revents & POLLOUT))
                                break; /* still plugged */
                        if (tx_plug(ep) != 0)
                                break;
                        atomic_store(&ep->tx_hdr->writer_waiting, 1);
                }
        }
done:
        atomic_store(&ep->tx_hdr->plug_pending, 0);                        /* Q4 */
}

bool smc_ring_plug_owed(struct smc_ring_ep *ep, bool spin) {
        bool shared;

        if (!atomic_load_explicit(&ep->plug_owed, memory_order_relaxed))
                return true;
        if (pthread_mutex_trylock(&ep->tx_lock) != 0)
                return false;
        shared = __atomic_load_n(&ep->shared, __ATOMIC_RELAXED);
        if (shared && !tx_trylock_shared(ep)) { /* (shared since the send that owed it: a fork) */
                pthread_mutex_unlock(&ep->tx_lock);
                return false;
        }
        if (atomic_exchange_explicit(&ep->plug_owed, false, memory_order_relaxed)) {
                if (shared)
                        tx_sync(ep);
                tx_plug_after(ep, spin);
        }
        if (shared)
                tx_unlock_shared(ep);
        pthread_mutex_unlock(&ep->tx_lock);
        return true;
}

/* The SHUT_WR work, with tx_lock held. */
/* @x_how: how X is shut when the peer's ring has the X_HUP feature: SHUT_WR, or
 * SHUT_RDWR for a shutdown(SHUT_RDWR) whose read side was left to this call (one
 * wakeup for a waiter, as TCP's: smc_ring_shutdown()) */
static int tx_shutdown_locked(struct smc_ring_ep *ep, int x_how) {
        int y = __atomic_load_n(&ep->y_peer, __ATOMIC_RELAXED);

        if (y < 0)
                return -ENOTCONN;
        if (!ep->wr_shut) {
                (void) tx_publish(ep, true); /* errors mean the peer is gone: nothing to flush to */
                __atomic_store_n(&ep->wr_shut, true, __ATOMIC_RELAXED);
                /* the flag before the EOF it explains (release, part of seq_cst) */
                atomic_fetch_or(&ep->tx_hdr->conn_flags, SMC_DMB_CONN_DONE_WRITING);
                /* our FIN completes a peer that shut down writing already */
                if (atomic_load(&ep->rx_hdr->conn_flags) & SMC_DMB_CONN_DONE_WRITING)
                        x_hup_mark_peer(ep, y);
                (void) sys_shutdown(y, SHUT_WR);
                if (ep->rx_hdr->features & SMC_DMB_FEAT_X_HUP) {
                        /* X's write side too, as TCP's own state (an edge for
                         * edge-triggered epoll; EPOLLHUP once the read side is shut):
                         * nothing of ours goes through X any more (no plug after the
                         * last send) */
                        if ((atomic_load(&ep->rx_hdr->conn_flags) & PEER_EOF_FLAGS) ||
                            (atomic_load(&ep->rx_hdr->reader_flags) & SMC_DMB_READER_SHUT_RD))
                                x_hup_mark(ep->rx_hdr);
                        (void) sys_shutdown(ep->x, x_how);
                }
                /* TCP reports EPOLLOUT once its writing side is shut (tcp_poll()), but
                 * a plug we left in X (the peer's ring had no room) keeps X's send
                 * buffer full, and the plug bytes sit in the peer's Y, out of our
                 * reach. A larger SO_SNDBUF makes X writable and wakes its waiters
                 * (sk_write_space); nothing of ours is queued in X from here on, and
                 * the program's SO_SNDBUF lives on T, not on X. */
                if (atomic_load(&ep->tx_hdr->writer_waiting) || atomic_load(&ep->tx_hdr->plug_pending)) {
                        int big = 64 << 10;

                        (void) sys_setsockopt(ep->x, SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
                }
        } else if (ep->rx_hdr->features & SMC_DMB_FEAT_X_HUP) {
                /* shut already: TCP's shutdown wakes the socket's waiters at every
                 * call (inet_shutdown(): sk_state_change), an edge for edge-triggered
                 * epoll; so does shutting X's shut side again, changing nothing
                 * (helper 132) */
                (void) sys_shutdown(ep->x, SHUT_WR);
        }
        return 0;
}

void smc_ring_shutdown_wake(struct smc_ring_ep *ep) {
        (void) sys_shutdown(ep->x, SHUT_WR);
}

/* Where the bytes of a send come from: the caller's iovecs (copied), or a file read
 * straight into the peer's ring (sendfile: one copy, by the kernel). */
struct tx_src {
        struct iov_iter it; /* file_fd < 0 */
        int file_fd;        /* >= 0: sendfile from this descriptor ... */
        int64_t file_pos;   /* ... at this offset (pread), or < 0: at its file position (read) */
        int file_err;       /* the file's read error (-errno), if one ended the call */
        bool file_short;    /* the file gave fewer bytes than asked (end of file): stop */
};

void smc_ring_track_dirty(struct smc_ring_ep *ep) {
        uint32_t unknown = SMC_DMB_DIRTY_UNKNOWN;

        (void) atomic_compare_exchange_strong(&ep->tx_hdr->data_dirty, &unknown, 0);
}

/* Raise the peer's data_dirty to cover @n bytes at offset @pos (dmb.h) before they
 * are written. Rare: it only grows, and stays at the ring size after a first wrap. */
static void tx_note_dirty(struct smc_ring_ep *ep, uint32_t pos, uint32_t n) {
        uint32_t end = ep->tx_size - pos < n ? ep->tx_size : pos + n;
        uint32_t cur = atomic_load_explicit(&ep->tx_hdr->data_dirty, memory_order_relaxed);

        if (cur >= end)
                return;
        /* CAS, not a store: a writer in another process (fork) may raise it too; an
         * UNKNOWN left by a writer that did not track stays */
        while (cur < end && !atomic_compare_exchange_weak_explicit(&ep->tx_hdr->data_dirty, &cur, end,
                                                                    memory_order_relaxed, memory_order_relaxed))
                ;
        /* the compiler keeps the ring stores after it (a kill needs only program
         * order: every store before the signal has landed) */
        atomic_signal_fence(memory_order_seq_cst);
}

/* Put @n bytes from @src at offset @pos of the peer's ring (a file: one pread / read,
 * or one preadv / readv for both pieces when the free region wraps). Returns the bytes put there: @n, fewer
 * for a file that ends (src->file_short), or 0 with src->file_err set. */
static uint32_t tx_fill(struct smc_ring_ep *ep, struct tx_src *src, uint32_t pos, uint32_t n) {
        uint32_t first = ep->tx_size - pos < n ? ep->tx_size - pos : n;
        struct iovec v[2] = {
                { ep->tx_data + pos, first },
                { ep->tx_data, n - first },
        };
        int cnt = n > first ? 2 : 1;
        ssize_t k;

        tx_note_dirty(ep, pos, n);
        if (src->file_fd < 0) {
                ring_copy(ep->tx_data, ep->tx_size, pos, &src->it, n, true, false);
                return n;
        }
        /* The kernel copies from the page cache into the peer's DMB. It does so on
         * this thread before the syscall returns, so the bytes precede the prod store
         * of tx_publish() (W1) as a memcpy of ours would (dmb.h, "Data"). */
        if (src->file_pos >= 0)
                k = cnt == 1 ? sys_pread(src->file_fd, v[0].iov_base, n, src->file_pos)
                             : sys_preadv(src->file_fd, v, cnt, src->file_pos);
        else /* moves the file position by k */
                k = cnt == 1 ? sys_read(src->file_fd, v[0].iov_base, n) : sys_readv(src->file_fd, v, cnt);
        if (k < 0) {
                src->file_err = -errno;
                return 0;
        }
        if ((uint32_t) k < n)
                src->file_short = true;
        if (src->file_pos >= 0)
                src->file_pos += k;
        return (uint32_t) k;
}

/* The send loop of smc_ring_send() and smc_ring_sendfile(), with the same cork,
 * MSG_MORE, autocork, publication, wait and error rules for both. */
/* Take tx_lock for a call that need not wait behind a sender sleeping for room
 * (tx_sleeping): returns true with the lock held, or false, without it, when the
 * holder sleeps for room (then the ring is full and nothing is held back: a
 * nonblocking send gets EAGAIN, a push has nothing to push). TCP's sender sleeps
 * without the socket lock (sk_stream_wait_memory()), so another thread's nonblocking
 * send, TCP_CORK or TCP_NODELAY returns at once there too. */
static bool tx_lock_or_sleeper(struct smc_ring_ep *ep) {
        for (;;) {
                struct timespec ts;
                int r;

                if (pthread_mutex_trylock(&ep->tx_lock) == 0)
                        return true;
                if (__atomic_load_n(&ep->tx_sleeping, __ATOMIC_ACQUIRE))
                        return false;
                /* held by a sender that copies (short) or is about to sleep: wait in
                 * the futex, looking again each millisecond. (CLOCK_REALTIME:
                 * pthread_mutex_clocklock() is not seen by ThreadSanitizer) */
                clock_gettime(CLOCK_REALTIME, &ts);
                ts.tv_nsec += 1000000;
                if (ts.tv_nsec >= 1000000000) {
                        ts.tv_sec++;
                        ts.tv_nsec -= 1000000000;
                }
                r = pthread_mutex_timedlock(&ep->tx_lock, &ts);
                if (r == 0)
                        return true;
                if (r != ETIMEDOUT) {
                        pthread_mutex_lock(&ep->tx_lock);
                        return true;
                }
        }
}

/* Take what a sendfile of @total bytes from @src would read, for the send taken after
 * the peer's close (dropped): for a regular file of a known size, no more than is
 * left from its offset (or file position, then moved past them) to its end; else
 * read to count them (a /proc file says size 0: helper 131), at most
 * TX_FILE_TAKE_MAX, as TCP's first send takes about a socket buffer. Returns the
 * bytes taken. */
#define TX_FILE_TAKE_MAX (1u << 20)
static size_t tx_file_take(const struct tx_src *src, size_t total) {
        struct stat st;
        int64_t pos = src->file_pos >= 0 ? src->file_pos : sys_lseek(src->file_fd, 0, SEEK_CUR);
        uint8_t buf[4096];
        size_t n = 0;

        if (pos >= 0 && sys_fstat(src->file_fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
                if (st.st_size > pos)
                        n = (uint64_t) (st.st_size - pos) < total ? (size_t) (st.st_size - pos) : total;
                if (src->file_pos < 0 && n > 0)
                        (void) sys_lseek(src->file_fd, (int64_t) n, SEEK_CUR);
                return n;
        }
        if (total > TX_FILE_TAKE_MAX)
                total = TX_FILE_TAKE_MAX;
        while (n < total) {
                size_t want = total - n < sizeof(buf) ? total - n : sizeof(buf);
                ssize_t k = src->file_pos >= 0 ? sys_pread(src->file_fd, buf, want, src->file_pos + (int64_t) n)
                                               : sys_read(src->file_fd, buf, want);

                if (k <= 0)
                        break;
                n += (size_t) k;
        }
        return n;
}

/* Whether the file of a sendfile gives no byte at its offset (at or past its end):
 * the kernel's sendfile then returns 0 without touching the socket, whatever its
 * state (splice_direct_to_actor() reads the file before the socket's actor runs;
 * helper 132: EPIPE here after the peer's close, or after our SHUT_WR). Asked only
 * on a sendfile's error path. A file without a size (/proc) is asked with a pread. */
static bool tx_file_at_end(const struct tx_src *src) {
        int64_t pos = src->file_pos >= 0 ? src->file_pos : sys_lseek(src->file_fd, 0, SEEK_CUR);
        struct stat st;
        uint8_t b;

        if (pos < 0 || sys_fstat(src->file_fd, &st) < 0)
                return false;
        if (S_ISREG(st.st_mode) && st.st_size > 0)
                return st.st_size <= pos;
        return sys_pread(src->file_fd, &b, 1, pos) == 0;
}

static ssize_t tx_send(struct smc_ring_ep *ep, struct tx_src *src, size_t total, int flags, bool nonblock,
                       struct tx_deadline *dl) {
        bool sendfile = src->file_fd >= 0;
        size_t sent = 0;
        bool hold, plugged = false, shared;
        int r;

        if (flags & MSG_DONTWAIT)
                nonblock = true;

        /* a nonblocking send does not wait behind a sender that sleeps for room
         * (the ring is full): EAGAIN, unless the peer is gone (the sleeper wakes for
         * that at once, and the call reports it) or the send is empty */
        if (!nonblock || total == 0)
                pthread_mutex_lock(&ep->tx_lock);
        else if (!tx_lock_or_sleeper(ep)) {
                if (!(peer_flags(ep) & PEER_GONE_FLAGS))
                        return -EAGAIN;
                pthread_mutex_lock(&ep->tx_lock);
        }
        shared = __atomic_load_n(&ep->shared, __ATOMIC_RELAXED);
        if (shared)
                tx_lock_shared(ep);
        tx_sync(ep);
        r = tx_check(ep);
        hold = __atomic_load_n(&ep->corked, __ATOMIC_RELAXED) || (flags & MSG_MORE);
        /* the one send TCP takes after the peer's close (tx_take_send_after_fin): a
         * held one is only accepted, as TCP holds it, and the next push is the taken
         * send; a zero-length one takes nothing. A sendfile takes what the file would
         * give (none at its end: 0, and nothing is taken) */
        if (sendfile && total > 0 && tx_send_after_close(ep, r, false))
                total = tx_file_take(src, total); /* (the file position moved) */
        if (tx_send_after_close(ep, r, total > 0 && !hold)) {
                ep->held_after_close = total > 0 && hold;
                if (total > 0 && !hold)
                        tx_hup_after_close(ep);
                sent = total;
                r = 0;
                goto out;
        }
        /* (nothing to send: 0, as the kernel's; a count of 0, or a file the take
         * above found empty, too) */
        if (r < 0 && sendfile && (total == 0 || tx_file_at_end(src))) {
                r = 0;
                total = 0;
        }
        if (r < 0 || total == 0)
                goto out;
        /* where the kernel's copy would fault: after the state checks (a send to a
         * reset connection is EPIPE, as TCP), before the first byte */
        if (src->file_fd < 0 && iov_bad(src->it.iov, src->it.cnt)) {
                r = -EFAULT;
                goto out;
        }

        while (sent < total) {
                uint32_t space, n, pos, k, chunk, need = 1;

                /* closed by another thread (a race in the program): no more bytes
                 * into a ring smcd may hand to another connection once the peer is
                 * gone too; the bytes sent are returned, else EBADF (smcrun(1)) */
                if (__atomic_load_n(&ep->closed, __ATOMIC_ACQUIRE)) {
                        r = -closed_errno(ep);
                        break;
                }
                space = tx_space(ep);

                /* shared: a small send goes in one piece, never split around another
                 * process's bytes (as a small TCP send; PIPE_BUF as for pipes): a
                 * blocking one waits for the room, a nonblocking one gets EAGAIN */
                if (shared && sent == 0 && total <= SHARED_WRITE_WHOLE && total <= ep->tx_size && space < total) {
                        need = (uint32_t) total;
                        space = 0;
                }
                if (space == 0) {
                        /* full: a held batch must go out now, or we would wait forever */
                        r = tx_publish(ep, shared);
                        if (r < 0)
                                break;
                        if (shared)
                                tx_unlock_shared(ep); /* others may write while we wait */
                        r = tx_wait_space(ep, nonblock, &plugged, dl, need, sent > 0);
                        if (shared) {
                                tx_lock_shared(ep);
                                tx_sync(ep); /* on after what they wrote */
                        }
                        if (r < 0)
                                break;
                        /* TCP_CORK may have changed while we slept */
                        hold = __atomic_load_n(&ep->corked, __ATOMIC_RELAXED) || (flags & MSG_MORE);
                        continue;
                }
                n = total - sent < space ? (uint32_t) (total - sent) : space;
                /* publish in chunks of a quarter ring, so that the reader copies out
                 * while we copy in; a file in pieces of at least SENDFILE_CHUNK_MIN,
                 * where the cost of one read call no longer shows */
                chunk = ep->tx_size / 4;
                if (chunk < (sendfile ? SENDFILE_CHUNK_MIN : SEND_CHUNK_MIN))
                        chunk = sendfile ? SENDFILE_CHUNK_MIN : SEND_CHUNK_MIN;
                if (n > chunk)
                        n = chunk;
                pos = smc_curs_count(ep->tx_prod);
                k = tx_fill(ep, src, pos, n);
                if (k == 0)
                        break; /* end of file, or its read error (src->file_err) */
                __atomic_store_n(&ep->tx_prod, smc_curs_add(ep->tx_prod, k, ep->tx_size), __ATOMIC_RELAXED);
                ep->tx_unpub += k;
                if (sent == 0)
                        ep->tx_msgs++; /* published with the data (tx_publish) */
                if (hold)
                        ep->tx_held = true;
                sent += k;
                if (!hold || ep->tx_unpub >= ep->autocork_size) {
                        r = tx_publish(ep, sent == total || src->file_short);
                        if (r < 0)
                                break;
                }
                if (src->file_short)
                        break; /* the file ended before @total: send what it had */
        }
        if (plugged || (sent > 0 && !hold) || (shared && ep->tx_unpub > 0)) {
                int q = tx_publish(ep, true);
                if (q < 0 && r >= 0)
                        r = q;
        }
        if (ep->tentative) {
                int q = tx_resolve(ep); /* a corked tail or an error left one open */
                if (q < 0 && r >= 0)
                        r = q;
        }
        /* also after a send that plugged while waiting for room: the reader may have
         * drained that plug meanwhile (once half its ring was free) while we went on
         * filling it, and X must not stay writable with less than half free (a socat
         * relay then wrote 8 KiB into a full ring and blocked, deadlocked with its
         * filter, under CPU contention) */
        if (sent > 0 && r >= 0 && ep->tx_unpub == 0) {
                /* a whole send need not plug (nor spin for the reader first): the
                 * next wait for POLLOUT does (smc_ring_plug_owed); one that ran out of
                 * room, or plugged while waiting, does it now, as does a shared or
                 * SMC-R endpoint */
                if (sent == total && !plugged && !shared && !ep->peer_is_daemon) {
                        if (tx_space(ep) < WRITABLE_MIN(ep->tx_size))
                                atomic_store_explicit(&ep->plug_owed, true, memory_order_relaxed);
                } else {
                        atomic_store_explicit(&ep->plug_owed, false, memory_order_relaxed);
                        tx_plug_after(ep, true);
                }
        }
        /* informational (smcss): we are no longer blocked. A plug left behind is
         * drained by the reader on its next cons store, which the publish above makes
         * sure comes. */
        if (atomic_load_explicit(&ep->tx_hdr->prod_flags, memory_order_relaxed) & SMC_DMB_PROD_WRITE_BLOCKED)
                atomic_fetch_and(&ep->tx_hdr->prod_flags, ~SMC_DMB_PROD_WRITE_BLOCKED);
        if (sendfile && sent > 0) {
                /* statistics (dmb.h): cold line, single writer */
                atomic_store_explicit(&ep->tx_hdr->prod_sendfile_calls, ++ep->tx_sendfile_calls,
                                      memory_order_relaxed);
                ep->tx_sendfile_bytes += sent;
                atomic_store_explicit(&ep->tx_hdr->prod_sendfile_bytes, ep->tx_sendfile_bytes,
                                      memory_order_relaxed);
        }
out:
        /* a shutdown(SHUT_WR) another thread asked for while we held the lock */
        if (__atomic_exchange_n(&ep->wr_shut_pending, false, __ATOMIC_RELAXED))
                (void) tx_shutdown_locked(ep, SHUT_WR);
        /* bytes left held back: TCP sends them after at most 200 ms even if the
         * program never uncorks (tcp(7), TCP_CORK): queue that push; and say how far
         * they go, for smcd if this process dies first (dmb.h prod_held) */
        if (ep->tx_unpub > 0)
                atomic_store_explicit(&ep->tx_hdr->prod_held, SMC_DMB_PROD_HELD_VALID | ep->tx_prod,
                                      memory_order_release);
        if ((ep->tx_unpub > 0 || ep->held_after_close) && !ep->hold_armed) {
                void (*h)(struct smc_ring_ep *) = __atomic_load_n(&smc_ring_hold_hook, __ATOMIC_RELAXED);

                if (h) {
                        ep->hold_armed = true;
                        h(ep);
                }
        }
        if (shared)
                tx_unlock_shared(ep);
        pthread_mutex_unlock(&ep->tx_lock);
        if (sent > 0)
                return (ssize_t) sent; /* an error, if any, is reported by the next call */
        if (r == -ECONNRESET && !take_reset(ep))
                r = -EPIPE; /* ECONNRESET once, then EPIPE as TCP */
        else if (r == -EPIPE) {
                /* as sk_stream_error(): a pending error (the peer's reset, also after
                 * our own shutdown(SHUT_WR) or close of its read side) is reported,
                 * and cleared, before EPIPE; EPIPE alone takes nothing, so a reset
                 * that comes later is still reported (by recv, poll, SO_ERROR) */
                int e = smc_ring_error(ep);

                if (e != 0)
                        r = -e;
        }
        if (r == 0 && src->file_err < 0)
                r = src->file_err;
        return r < 0 ? r : 0;
}

ssize_t smc_ring_send(struct smc_ring_ep *ep, const struct iovec *iov, int iovcnt, int flags, bool nonblock) {
        struct tx_src src = { .it = { iov, iovcnt, 0 }, .file_fd = -1 };
        int r;

        if (!ep)
                return -EINVAL;
        if ((r = iov_array_check(iov, iovcnt)) < 0)
                return r;
        return tx_send(ep, &src, iov_total(iov, iovcnt), flags, nonblock, NULL);
}

ssize_t smc_ring_send_timeo(struct smc_ring_ep *ep, const struct iovec *iov, int iovcnt, int flags, bool nonblock,
                            int timeo_fd) {
        struct tx_deadline dl = { .fd = timeo_fd };
        struct tx_src src = { .it = { iov, iovcnt, 0 }, .file_fd = -1 };
        int r;

        if (!ep)
                return -EINVAL;
        if ((r = iov_array_check(iov, iovcnt)) < 0)
                return r;
        return tx_send(ep, &src, iov_total(iov, iovcnt), flags, nonblock, &dl);
}

ssize_t smc_ring_sendfile(struct smc_ring_ep *ep, int in_fd, int64_t *offset, size_t count, int flags,
                          bool nonblock, int timeo_fd) {
        struct tx_deadline dl = { .fd = timeo_fd };
        struct tx_src src = { .file_fd = in_fd, .file_pos = -1 };
        ssize_t r;

        if (!ep || (offset && *offset < 0) || (flags & ~(MSG_MORE | MSG_DONTWAIT)))
                return -EINVAL;
        if (in_fd < 0)
                return -EBADF;
        if (count > SSIZE_MAX)
                count = SSIZE_MAX;
        if (offset) {
                src.file_pos = *offset;
                if (count > (uint64_t) (INT64_MAX - *offset))
                        count = (size_t) (INT64_MAX - *offset);
        }
        r = tx_send(ep, &src, count, flags, nonblock, &dl);
        if (offset && r > 0)
                *offset += r;
        return r;
}

/* Push what cork or MSG_MORE held back, as TCP's uncork and TCP_NODELAY do. A push
 * never fails: a closed peer answers with RST over TCP, and the next send reports it.
 * Held bytes for a peer that closed, or shut down both ways, are the one taken send
 * (tx_take_send_after_fin): dropped, as over TCP. tx_lock held. */
static void tx_push_held(struct smc_ring_ep *ep) {
        int r = tx_check(ep);

        if ((ep->tx_unpub > 0 || ep->held_after_close) && tx_send_after_close(ep, r, true)) {
                tx_hup_after_close(ep);
                ep->held_after_close = false;
                __atomic_store_n(&ep->tx_prod, atomic_load(&ep->tx_hdr->prod), __ATOMIC_RELAXED);
                ep->tx_unpub = 0;
                ep->tx_held = false;
                atomic_store_explicit(&ep->tx_hdr->prod_held, 0, memory_order_relaxed);
        } else if (r == 0)
                (void) tx_publish(ep, true); /* (a failure: the next send reports it) */
}

int smc_ring_flush(struct smc_ring_ep *ep) {
        if (!tx_lock_or_sleeper(ep))
                return 0; /* a sender sleeps for room: nothing is held back */
        tx_push_held(ep);
        pthread_mutex_unlock(&ep->tx_lock);
        return 0;
}

int smc_ring_flush_held_try(struct smc_ring_ep *ep) {
        if (pthread_mutex_trylock(&ep->tx_lock) != 0)
                return -EBUSY;
        ep->hold_armed = false;
        tx_push_held(ep);
        pthread_mutex_unlock(&ep->tx_lock);
        return 0;
}

void smc_ring_count_sendfile(struct smc_ring_ep *ep, uint64_t bytes) {
        if (!ep || bytes == 0)
                return;
        pthread_mutex_lock(&ep->tx_lock);
        atomic_store_explicit(&ep->tx_hdr->prod_sendfile_calls, ++ep->tx_sendfile_calls, memory_order_relaxed);
        ep->tx_sendfile_bytes += bytes;
        atomic_store_explicit(&ep->tx_hdr->prod_sendfile_bytes, ep->tx_sendfile_bytes, memory_order_relaxed);
        pthread_mutex_unlock(&ep->tx_lock);
}

int smc_ring_set_cork(struct smc_ring_ep *ep, bool on) {
        if (!tx_lock_or_sleeper(ep)) {
                /* a sender sleeps for room, nothing held back: it takes the new
                 * state when it wakes */
                __atomic_store_n(&ep->corked, on, __ATOMIC_RELAXED);
                return 0;
        }
        __atomic_store_n(&ep->corked, on, __ATOMIC_RELAXED);
        if (!on)
                tx_push_held(ep);
        pthread_mutex_unlock(&ep->tx_lock);
        return 0;
}

/* ---- receive side (rx_lock held) ------------------------------------------------- */

/* C2: after a cons store, unplug a waiting writer by draining its plug bytes from
 * y_peer (our end of the writer's pair). */
static void rx_unplug_writer(struct smc_ring_ep *ep) {
        uint8_t sink[SCRATCH_LEN];
        struct iovec iov[SCRATCH_IOVS];
        struct msghdr mh = { .msg_iov = iov, .msg_iovlen = SCRATCH_IOVS };
        int y;

        if (atomic_load(&ep->rx_hdr->writer_waiting) == 0) {
                /* D2: the writer may be plugging after a send (tx_plug_after, Q1..Q4):
                 * wait until it is done (it takes a few syscalls), bounded in case it
                 * is stopped there; after one such timeout not again until it moved */
                if (!atomic_load(&ep->rx_hdr->plug_pending)) {
                        ep->plug_wait_gave_up = false;
                        return;
                }
                if (ep->plug_wait_gave_up)
                        return;
                struct peer_wait w = { .same_cpu = atomic_load_explicit(&ep->rx_hdr->writer_cpu,
                                                                        memory_order_relaxed) == cur_cpu() };

                while (atomic_load(&ep->rx_hdr->plug_pending) && !atomic_load(&ep->rx_hdr->writer_waiting))
                        if (!peer_wait_step(&w, PLUG_WAIT_MAX_NS)) {
                                ep->plug_wait_gave_up = true;
                                break;
                        }
                if (atomic_load(&ep->rx_hdr->writer_waiting) == 0)
                        return;
        }
        /* D0 (seq_cst): announce the drain before looking at the room, so that a writer
         * that publishes and plugs again meanwhile either is seen here (no drain) or
         * sees us draining and plugs again after us (tx_plug_after, Q3): a drain reads
         * Y until EAGAIN and would otherwise eat a plug made after this decision */
        atomic_store(&ep->rx_hdr->draining, 1);                              /* D0 */
        /* not writable yet for the writer (WRITABLE_MIN): its plug stays, the next
         * cons store looks again */
        if (ep->rx_size - rx_avail(ep, atomic_load(&ep->rx_hdr->cons)) < WRITABLE_MIN(ep->rx_size) ||
            atomic_exchange(&ep->rx_hdr->writer_waiting, 0) == 0) {          /* D1 */
                atomic_store(&ep->rx_hdr->draining, 0);
                return;
        }
        y = __atomic_load_n(&ep->y_peer, __ATOMIC_RELAXED);
        if (y >= 0) {
                for (int i = 0; i < SCRATCH_IOVS; i++)
                        iov[i] = (struct iovec) { sink, sizeof(sink) };
                for (;;) {
                        ssize_t n = sys_recvmsg(y, &mh, MSG_DONTWAIT);              /* D2 */

                        if (n > 0 || (n < 0 && errno == EINTR))
                                continue;
                        break; /* EAGAIN: drained; 0: the writer's X is gone; errors: nothing to do */
                }
        }
        atomic_fetch_add(&ep->rx_hdr->drain_gen, 1);                         /* D3 */
        atomic_store(&ep->rx_hdr->draining, 0);
}

/* Owed doorbell bytes (dmb.h rx_hdr->owed, one count for every copy of the socket):
 * a taken bell adds one; a reader claims what it will read before its recv from X
 * and gives back what it did not get, so that two copies never read one byte twice
 * (the second would eat the byte of a bell set meanwhile: X not readable while the
 * ring holds data). Claims at most @max, leaving @keep. */
static void owed_add(struct smc_ring_ep *ep, uint32_t n) {
        if (n > 0)
                atomic_fetch_add(&ep->rx_hdr->owed, n);
}

static uint32_t owed_claim(struct smc_ring_ep *ep, uint32_t max, uint32_t keep) {
        uint32_t o = atomic_load(&ep->rx_hdr->owed), k;

        do {
                if (o <= keep)
                        return 0;
                k = o - keep < max ? o - keep : max;
        } while (!atomic_compare_exchange_weak(&ep->rx_hdr->owed, &o, o - k));
        return k;
}

static uint32_t owed_get(struct smc_ring_ep *ep) {
        return atomic_load_explicit(&ep->rx_hdr->owed, memory_order_relaxed);
}

/* Read up to @max of the owed bytes from X, leaving @keep owed: the bytes read
 * (0: X at EOF; -1 with errno from the recv; -2: none owed, or another copy took
 * them). */
static ssize_t owed_read(struct smc_ring_ep *ep, uint8_t *buf, uint32_t max, uint32_t keep) {
        uint32_t want = owed_claim(ep, max, keep);
        ssize_t n;

        if (want == 0)
                return -2;
        n = sys_recvfrom(ep->x, buf, want, MSG_DONTWAIT, NULL, NULL);
        owed_add(ep, want - (n > 0 ? (uint32_t) n : 0));
        return n;
}

/* The drain protocol (R1, R2, then read owed bytes while the ring is empty). Returns
 * 1 if the ring is non-empty, 0 if empty, 2 if empty and X is at EOF. */
static int rx_settle(struct smc_ring_ep *ep) {
        uint64_t cons = atomic_load_explicit(&ep->rx_hdr->cons, memory_order_relaxed);
        uint8_t buf[64];

        uint32_t b = atomic_load(&ep->rx_hdr->bell);

        /* R1: take a SET bell; a TENTATIVE one belongs to the writer until it resolves */
        while (b == SMC_DMB_BELL_SET && !atomic_compare_exchange_weak(&ep->rx_hdr->bell, &b, SMC_DMB_BELL_NONE))
                ;
        if (b == SMC_DMB_BELL_SET)
                owed_add(ep, 1);
        if (rx_avail(ep, cons) > 0) /* R2 */
                return 1; /* keep the owed byte(s) in X: X stays readable, data is pending */
        for (unsigned tries = 0; owed_get(ep) > 0;) {
                ssize_t n = owed_read(ep, buf, sizeof(buf), 0);
                struct pollfd p = { .fd = ep->x, .events = POLLIN };

                if (n == -2)
                        break; /* (another copy read them) */
                if (n > 0 || (n < 0 && errno == EINTR))
                        continue;
                if (n == 0) {
                        /* the writer died between setting bell and writing the byte */
                        atomic_store(&ep->rx_hdr->owed, 0);
                        return 2;
                }
                if (n < 0 && errno != EAGAIN)
                        break;
                /* EAGAIN: the writer set bell and is inside its write(2) right now.
                 * Wait for the byte (a few retries, then a short sleep in poll), so
                 * that X is not left readable on an empty ring. Bounded in case the
                 * writer is stopped there: then the byte is remembered in owed and
                 * read by the next settle. */
                if (++tries <= OWED_SPIN_TRIES) {
                        for (int i = 0; i < 64; i++)
                                cpu_relax();
                        continue;
                }
                if (tries > OWED_SPIN_TRIES + OWED_POLL_TRIES)
                        break;
                (void) sys_poll(&p, 1, OWED_POLL_MS);
        }
        /* the ring is empty: a writer that plugged after its send (tx_plug_after) and
         * rang because we had emptied it unseen gets its X back */
        rx_unplug_writer(ep);
        return 0;
}

/* With the ring empty and settled: is X at EOF (the peer's Y shut down or closed)? */
static bool rx_x_eof(struct smc_ring_ep *ep) {
        uint8_t b;
        ssize_t n;

        if (owed_get(ep) > 0)
                return false; /* owed bytes come first; rx_settle() sees the EOF after them */
        do
                n = sys_recvfrom(ep->x, &b, 1, MSG_DONTWAIT | MSG_PEEK, NULL, NULL);
        while (n < 0 && errno == EINTR);
        return n == 0;
}

/* The terminal state of an empty ring: 0 (EOF), -ECONNRESET (abort, not yet taken),
 * or 1 (not terminal). @x_eof: X was seen at EOF. */
static int rx_terminal(struct smc_ring_ep *ep, bool x_eof) {
        uint32_t f = atomic_load_explicit(&ep->rx_hdr->conn_flags, memory_order_acquire);

        /* after our own SHUT_RD, X reads EOF by itself: that is no peer death */
        if (!(f & PEER_EOF_FLAGS) && x_eof && !rd_shut_any(ep)) {
                mark_peer_dead(ep);
                f = atomic_load_explicit(&ep->rx_hdr->conn_flags, memory_order_acquire);
        }
        if ((f & SMC_DMB_CONN_ABORT) && !(f & SMC_DMB_CONN_DONE_WRITING))
                return -ECONNRESET; /* (after a FIN: EOF, peer_fin_then_reset) */
        if (f & (SMC_DMB_CONN_DONE_WRITING | SMC_DMB_CONN_CLOSED))
                return 0;
        if (rd_shut_any(ep))
                return 0;
        return 1;
}

/* The end of this receive's wait under X's SO_RCVTIMEO (the socket's, read at the
 * first call into *@deadline: CLOCK_MONOTONIC ns, UINT64_MAX without a timeout), as
 * TCP's one timeout for the whole call (sock_rcvtimeo() in tcp_recvmsg). True while
 * it has not passed. */
static bool rx_before_deadline(struct smc_ring_ep *ep, uint64_t *deadline) {
        if (*deadline == 0) {
                struct timeval tv;
                socklen_t tl = sizeof(tv);

                *deadline = UINT64_MAX;
                /* (a timeout of more than about 100 years, up to the kernel's
                 * LONG_MAX / HZ seconds, would wrap the sum: it is none) */
                if (sys_getsockopt(ep->x, SOL_SOCKET, SO_RCVTIMEO, &tv, &tl) == 0 && (tv.tv_sec > 0 || tv.tv_usec > 0) &&
                    tv.tv_sec < 3200000000)
                        *deadline = now_ns() + (uint64_t) tv.tv_sec * 1000000000u + (uint64_t) tv.tv_usec * 1000u;
        }
        return *deadline == UINT64_MAX || now_ns() < *deadline;
}

/* Sleep while the ring holds only bytes we already peeked: X stays readable then
 * (the doorbell byte of that data), so poll(X) cannot wait for *more* data. Backs off
 * from 10 us to 1 ms. Only MSG_PEEK|MSG_WAITALL gets here. False when the receive
 * must return what it has, as TCP's does: the timeout passed (rx_before_deadline) or
 * a signal handler ran. */
static bool rx_peek_backoff(struct smc_ring_ep *ep, unsigned *round, uint64_t *deadline) {
        struct timespec ts = { 0, 10000L << (*round < 7 ? *round : 7) };

        if (!rx_before_deadline(ep, deadline))
                return false;
        if (ts.tv_nsec > 1000000L)
                ts.tv_nsec = 1000000L;
        (*round)++;
        return nanosleep(&ts, NULL) == 0 || errno != EINTR;
}

/* MSG_WAITALL or SO_RCVLOWAT with bytes copied: wait for more in poll(X), which the kernel never
 * restarts after a signal handler, so that a handler installed with SA_RESTART
 * also ends the call with the partial count, as TCP's tcp_recvmsg returns `copied`
 * once a signal is pending; and so does the timeout. False: return what was copied.
 * *@x_eof: X was seen at EOF. */
static bool rx_waitall_wait(struct smc_ring_ep *ep, uint64_t *deadline, bool *x_eof) {
        struct pollfd p = { .fd = ep->x, .events = POLLIN | POLLRDHUP };
        int ms = -1, n;

        if (!rx_before_deadline(ep, deadline))
                return false;
        if (*deadline != UINT64_MAX) {
                uint64_t now = now_ns(), left;

                if (now >= *deadline)
                        return false; /* (passed since the check) */
                left = (*deadline - now + 999999u) / 1000000u; /* rounded up */

                ms = left > INT_MAX ? INT_MAX : (int) left; /* (SO_RCVTIMEO of > 24.8 days) */
        }
        n = sys_poll(&p, 1, ms);
        if (n < 0)
                return false; /* EINTR */
        if (n > 0 && rx_x_eof(ep))
                *x_eof = true;
        return true;
}

ssize_t smc_ring_recv(struct smc_ring_ep *ep, const struct iovec *iov, int iovcnt, int flags, bool nonblock) {
        struct iov_iter it = { iov, iovcnt, 0 };
        bool peek = flags & MSG_PEEK, waitall = flags & MSG_WAITALL, trunc = flags & MSG_TRUNC;
        bool x_eof = false, settled = false, spinning = false;
        uint32_t my_cpu = 0;
        unsigned backoff = 0;
        uint64_t deadline = 0; /* rx_before_deadline() */
        size_t total, got = 0;
        uint64_t c; /* our read cursor; equals cons unless peeking */
        ssize_t r = 0;

        if (!ep)
                return -EINVAL;
        if ((r = iov_array_check(iov, iovcnt)) < 0)
                return r;
        if (flags & MSG_DONTWAIT)
                nonblock = true;
        total = iov_total(iov, iovcnt);

        /* a call that may sleep in poll(X) stops an epoll watch first (before the
         * prod loads below): writers ring from here on */
        if (!nonblock)
                smc_ring_kwait(ep, true);
        pthread_mutex_lock(&ep->rx_lock);
        c = atomic_load_explicit(&ep->rx_hdr->cons, memory_order_relaxed);
        if (ep->busy_poll_ns > 0) {
                my_cpu = cur_cpu();
                if (atomic_load_explicit(&ep->rx_hdr->reader_cpu, memory_order_relaxed) != my_cpu)
                        atomic_store_explicit(&ep->rx_hdr->reader_cpu, my_cpu, memory_order_relaxed);
                atomic_store(&ep->rx_hdr->spinning, SMC_DMB_SPIN_ACTIVE); /* S1 */
                spinning = true;
        }

        for (;;) {
                uint32_t avail = rx_avail(ep, c), n;
                int s, t;

                if (avail > 0) {
                        /* a zero-length receive returns 0 once there is data (and
                         * waits for it, or says EAGAIN, EOF or the error), as
                         * tcp_recvmsg() */
                        if (total == 0)
                                break;
                        /* checked where the kernel's copy would fault: with data to
                         * copy (no data: EAGAIN or EOF, as TCP; MSG_TRUNC discards
                         * without touching a buffer) */
                        if (got == 0 && !trunc && iov_bad(iov, iovcnt)) {
                                r = -EFAULT;
                                break;
                        }
                        n = total - got < avail ? (uint32_t) (total - got) : avail;
                        /* acquire (the prod load in rx_avail) before the copy-out */
                        ring_copy(ep->rx_data, ep->rx_size, smc_curs_count(c), &it, n, false, trunc);
                        /* closed by another thread meanwhile (a race in the program):
                         * smcd may have cleared the ring, or given it to another
                         * connection, so what was copied may not be this connection's
                         * bytes: drop it, and store no cons. The fence orders the
                         * copy's loads before the flag's: a copy that saw smcd's
                         * stores, made after the close began, sees the flag. */
                        atomic_thread_fence(memory_order_acquire);
                        if (__atomic_load_n(&ep->closed, __ATOMIC_RELAXED)) {
                                r = got > 0 ? 0 : -closed_errno(ep);
                                break;
                        }
                        c = smc_curs_add(c, n, ep->rx_size);
                        got += n;
                        settled = false;
                        if (!peek) {
                                /* the call's first chunk: count it, next to C1 on the
                                 * same cache line */
                                if (got == n)
                                        atomic_store_explicit(&ep->rx_hdr->cons_msgs, ++ep->rx_msgs,
                                                              memory_order_relaxed);
                                atomic_store(&ep->rx_hdr->cons, c); /* C1: release the space */
                                rx_unplug_writer(ep);               /* C2 */
                        }
                        if (got == total)
                                break;
                        continue;
                }

                /* Our view of the ring is exhausted. While peeking with bytes copied the
                 * ring itself is not empty: leave the doorbell alone. */
                if (!(peek && got > 0)) {
                        s = rx_settle(ep);
                        settled = true;
                        if (s == 1)
                                continue;
                        if (s == 2)
                                x_eof = true;
                }
                if (got > 0 && !waitall) {
                        /* SO_RCVLOWAT: a blocking receive waits for min(mark, len)
                         * bytes, as TCP's (sock_rcvlowat()); a nonblocking one
                         * returns what it has (got < total here) */
                        uint32_t lowat = atomic_load_explicit(&ep->rx_hdr->rcvlowat, memory_order_relaxed);

                        if (nonblock || got >= lowat)
                                break;
                }

                t = rx_terminal(ep, x_eof);
                if (t <= 0) {
                        /* the flags were stored after the last data: reload prod and
                         * deliver that data first */
                        if (rx_avail(ep, c) > 0)
                                continue;
                        if (got == 0 && __atomic_load_n(&ep->closed_err, __ATOMIC_ACQUIRE))
                                r = -closed_errno(ep); /* disconnected by another thread */
                        else if (got == 0)
                                r = t < 0 ? (take_reset(ep) ? -ECONNRESET : 0) : 0;
                        break; /* with got > 0 the error is reported by the next call */
                }
                if (nonblock) {
                        if (got == 0 && !x_eof && rx_x_eof(ep)) {
                                x_eof = true;
                                continue;
                        }
                        if (got == 0) {
                                r = -EAGAIN;
                                ring_idle();
                        }
                        break;
                }
                if (peek && got > 0) {
                        if (!rx_peek_backoff(ep, &backoff, &deadline))
                                break; /* what was peeked so far */
                        continue;
                }

                /* block: spin, then sleep in poll(X) */
                if (spinning) {
                        uint64_t end = now_ns() + ep->busy_poll_ns;

                        /* no spinning for a writer on our own CPU: it could not run */
                        if (atomic_load_explicit(&ep->rx_hdr->writer_cpu, memory_order_relaxed) == my_cpu)
                                end = 0;
                        while (rx_avail(ep, c) == 0 &&
                               !(atomic_load_explicit(&ep->rx_hdr->conn_flags, memory_order_relaxed) & PEER_EOF_FLAGS) &&
                               now_ns() < end)
                                cpu_relax();
                        if (rx_avail(ep, c) > 0)
                                continue;
                        /* S2: we are about to sleep: writers must ring from now on */
                        atomic_store(&ep->rx_hdr->spinning, SMC_DMB_SPIN_SLEEPING);
                        /* the bell may have been set again since we settled */
                        s = rx_settle(ep);
                        if (s == 1)
                                continue;
                        if (s == 2) {
                                x_eof = true;
                                continue;
                        }
                }
                ring_idle();
                if (got > 0) {
                        if (!rx_waitall_wait(ep, &deadline, &x_eof))
                                break;
                        if (spinning)
                                atomic_store(&ep->rx_hdr->spinning, SMC_DMB_SPIN_ACTIVE);
                } else {
                        /* Sleep in a blocking recv(MSG_PEEK) of the doorbell byte rather
                         * than in poll(): the kernel then restarts it after a signal
                         * handler installed with SA_RESTART and fails it with EINTR
                         * otherwise, and times it out after X's SO_RCVTIMEO, exactly as
                         * it would a TCP recv. 1: a byte (data), 0: EOF on X (the peer
                         * shut down or died, or our own SHUT_RD). */
                        uint8_t b;
                        ssize_t w = sys_recvfrom(ep->x, &b, 1, MSG_PEEK, NULL, NULL);

                        if (w == 0)
                                x_eof = true;
                        else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) &&
                                 (sys_fcntl(ep->x, F_GETFL, 0) & O_NONBLOCK)) {
                                /* X is nonblocking although this call blocks: the
                                 * application's mode, changed through another copy of
                                 * the socket (its open file's flag): EAGAIN as TCP;
                                 * else wait in poll */
                                struct pollfd p = { .fd = ep->x, .events = POLLIN | POLLRDHUP };

                                if (ep->x_mode_is_app) {
                                        r = -EAGAIN;
                                        break;
                                }

                                if (sys_poll(&p, 1, -1) < 0 && errno != EINTR) {
                                        r = -errno;
                                        break;
                                }
                        } else if (w < 0) {
                                /* EINTR (no SA_RESTART), EAGAIN (SO_RCVTIMEO), EBADF ...;
                                 * a zero-length receive whose wait ended so returns 0,
                                 * as tcp_recvmsg(), whose loop ends with len 0 after
                                 * sk_wait_data() (helper 129) */
                                r = total == 0 && (errno == EAGAIN || errno == EINTR) ? 0 : -errno;
                                break;
                        }
                        if (spinning)
                                atomic_store(&ep->rx_hdr->spinning, SMC_DMB_SPIN_ACTIVE);
                }
        }
        /* Eager rule: never return with the ring empty and the doorbell unsettled, or
         * X would stay readable with nothing to read. With data left, an
         * edge-triggered waiter needs the bell taken (R1 of the settle; its byte is
         * owed, X stays readable): the writer rings again at its next publish, and
         * that byte is the edge TCP makes for every arrival. */
        if (!peek && !settled &&
            (rx_avail(ep, c) == 0 || atomic_load_explicit(&ep->edge_regs, memory_order_relaxed) > 0))
                (void) rx_settle(ep);
        if (spinning)
                atomic_store(&ep->rx_hdr->spinning, SMC_DMB_SPIN_IDLE); /* S3: after cons and settle */
        pthread_mutex_unlock(&ep->rx_lock);
        if (!nonblock)
                smc_ring_kwait(ep, false);
        return got > 0 ? (ssize_t) got : r;
}

/* ---- connection state ------------------------------------------------------------ */

/* Shut our read side, as TCP's SHUT_RD: wake every reader and poller of this socket
 * with EOF by shutting X's receive side (the kernel then reports POLLIN|POLLRDHUP),
 * after telling the writer that EPIPE on its doorbell is not our death. */
/* @x: shut X's read side too (else the write side's shutdown does both at once) */
static void rx_shut(struct smc_ring_ep *ep, bool x) {
        atomic_fetch_or(&ep->rx_hdr->reader_flags, SMC_DMB_READER_SHUT_RD);
        if (atomic_load(&ep->tx_hdr->conn_flags) & SMC_DMB_CONN_DONE_WRITING)
                x_hup_mark(ep->rx_hdr); /* our write side is shut: this completes it */
        if (x)
                (void) sys_shutdown(ep->x, SHUT_RD);
}

int smc_ring_shutdown(struct smc_ring_ep *ep, int how) {
        int r = 0;

        bool rd;

        if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR)
                return -EINVAL;
        rd = (how == SHUT_RD || how == SHUT_RDWR) && !__atomic_exchange_n(&ep->rd_shut, true, __ATOMIC_RELAXED);
        if (how == SHUT_RD) {
                if (rd)
                        rx_shut(ep, true);
                else /* (shut already: only the wakeup, below) */
                        (void) sys_shutdown(ep->x, SHUT_RD);
                return 0;
        }

        /* A sender blocked in another thread holds tx_lock while it waits for space:
         * leave the shutdown to it (it polls with a timeout and sees the request),
         * as TCP's shutdown returns at once and the blocked send returns its count.
         * Any other holder (a sender that copies, the held-bytes push, another
         * thread's poll making an owed plug) lets go soon and does no shutdown for
         * us: wait for it (a shutdown left pending there was lost until the next
         * send: the peer saw no EOF) */
        if (!tx_lock_or_sleeper(ep)) {
                if (rd)
                        rx_shut(ep, true); /* (now: the sleeper does the write side) */
                __atomic_store_n(&ep->wr_shut_pending, true, __ATOMIC_RELAXED);
                /* (a sleeper that holds the lock after our store sees it) */
                if (!tx_lock_or_sleeper(ep))
                        return __atomic_load_n(&ep->y_peer, __ATOMIC_RELAXED) < 0 ? -ENOTCONN : 0;
                rd = false;
        }
        {
                /* a copy in another process may be sending: its bytes go before the
                 * EOF or get EPIPE, never after it (their cross-process lock) */
                bool shared = __atomic_load_n(&ep->shared, __ATOMIC_RELAXED);
                /* SHUT_RDWR: X shut both ways in one call where the write side's
                 * shutdown shuts X, so that a thread waiting in epoll_wait wakes
                 * once, with EPOLLHUP, as TCP's (helper 113: IN|RDHUP first, HUP at
                 * the next wait, in 3 of 5 runs) */
                bool both = rd && !ep->wr_shut && __atomic_load_n(&ep->y_peer, __ATOMIC_RELAXED) >= 0 &&
                            (ep->rx_hdr->features & SMC_DMB_FEAT_X_HUP);

                if (rd)
                        rx_shut(ep, !both);
                if (shared) {
                        tx_lock_shared(ep);
                        tx_sync(ep);
                }
                r = tx_shutdown_locked(ep, both ? SHUT_RDWR : SHUT_WR);
                if (shared)
                        tx_unlock_shared(ep);
        }
        pthread_mutex_unlock(&ep->tx_lock);
        return r;
}

bool smc_ring_close(struct smc_ring_ep *ep) {
        return smc_ring_close_reset(ep, false);
}

void smc_ring_wake_closed(struct smc_ring_ep *ep, int err) {
        __atomic_store_n(&ep->closed_err, err, __ATOMIC_RELEASE);
        rx_shut(ep, true); /* also when a SHUT_RD already did: the close may have marked us */
}

void smc_ring_mark_accepted(struct smc_ring_ep *ep) {
        atomic_fetch_or(&ep->rx_hdr->reader_flags, SMC_DMB_READER_ACCEPTED);
}

void smc_ring_set_linger_reset(struct smc_ring_ep *ep, bool reset) {
        if (reset)
                atomic_fetch_or(&ep->rx_hdr->reader_flags, SMC_DMB_READER_LINGER_RESET);
        else
                atomic_fetch_and(&ep->rx_hdr->reader_flags, ~SMC_DMB_READER_LINGER_RESET);
}

void smc_ring_set_rcvlowat(struct smc_ring_ep *ep, int val) {
        /* sock_setsockopt(): negative is INT_MAX, 0 is 1 */
        atomic_store_explicit(&ep->rx_hdr->rcvlowat, val < 0 ? INT_MAX : val == 0 ? 1 : (uint32_t) val,
                              memory_order_relaxed);
}

bool smc_ring_linger_reset(const struct smc_ring_ep *ep) {
        return (atomic_load(&ep->rx_hdr->reader_flags) & SMC_DMB_READER_LINGER_RESET) != 0;
}

bool smc_ring_close_reset(struct smc_ring_ep *ep, bool reset) {
        uint64_t cons;
        bool abort, fin_went;
        uint32_t f;

        __atomic_store_n(&ep->closed, true, __ATOMIC_SEQ_CST); /* before anything that
                                                                 * lets smcd release */
        cons = atomic_load(&ep->rx_hdr->cons);
        /* our FIN went before this close (here or through another copy) */
        fin_went = atomic_load(&ep->tx_hdr->conn_flags) & SMC_DMB_CONN_DONE_WRITING;

        /* as tcp_close(): a reset (SO_LINGER {1, 0}, or data left unread) only while
         * the connection is open; once both FINs went (our shutdown(SHUT_WR) here or
         * through another copy, and the peer's), TCP's socket is CLOSED or TIME_WAIT
         * and closes without RST. smcd decides alike for a close it sees (conn.c
         * died_flags) */
        abort = (reset || rx_avail(ep, cons) > 0) &&
                !(wr_shut_any(ep) && (atomic_load_explicit(&ep->rx_hdr->conn_flags, memory_order_acquire) &
                                      (SMC_DMB_CONN_DONE_WRITING | SMC_DMB_CONN_CLOSED)));
        /* a sender blocked in another thread holds tx_lock; it published already
         * (another holder lets go soon: waited for, or what a cork held back would
         * not go out) */
        if (tx_lock_or_sleeper(ep)) {
                if (abort && ep->tx_unpub > 0) {
                        /* TCP's RST goes out instead of what a cork held back */
                        __atomic_store_n(&ep->tx_prod, atomic_load(&ep->tx_hdr->prod), __ATOMIC_RELAXED);
                        ep->tx_unpub = 0;
                        ep->tx_held = false;
                        atomic_store_explicit(&ep->tx_hdr->prod_held, 0, memory_order_relaxed);
                }
                (void) tx_publish(ep, true);
                pthread_mutex_unlock(&ep->tx_lock);
        }
        f = abort ? SMC_DMB_CONN_ABORT : SMC_DMB_CONN_CLOSED;
        atomic_fetch_or(&ep->tx_hdr->conn_flags, f);
        atomic_fetch_or(&ep->rx_hdr->reader_flags, f);
        __atomic_store_n(&ep->wr_shut, true, __ATOMIC_RELAXED);
        __atomic_store_n(&ep->rd_shut, true, __ATOMIC_RELAXED);
        {
                /* atomic: a receiver in another thread may look at y_peer to unplug */
                int y = __atomic_exchange_n(&ep->y_peer, -1, __ATOMIC_RELAXED);

                if (y >= 0 && !abort && fin_went &&
                    (atomic_load(&ep->rx_hdr->conn_flags) & SMC_DMB_CONN_DONE_WRITING)) {
                        /* both FINs went: the peer's X is shut both ways already (our
                         * FIN shut its read side, its own shutdown its write side)
                         * and no send of its can block. TCP's close sends nothing
                         * then (TIME_WAIT or LAST_ACK): no edge, no SIGIO at the peer
                         * (helper 113: a second shutdown(2) of Y woke X again, and a
                         * Python program whose SIGIO handler was reset died at exit) */
                        (void) sys_close(y);
                } else if (y >= 0) {
                        /* smcd holds a copy of Y too (it learns from Y when our X is
                         * gone), so closing ours alone would tell the peer nothing:
                         * drain its writer's plug (its X turns writable: a blocked
                         * send wakes and reads the flags) and shut Y's writing side
                         * (its X reads EOF) */
                        uint8_t sink[SCRATCH_LEN];

                        for (int i = 0; i < 64; i++)
                                if (sys_recvmsg(y, &(struct msghdr) { .msg_iov = &(struct iovec) { sink, sizeof(sink) },
                                                                      .msg_iovlen = 1 },
                                                MSG_DONTWAIT) <= 0)
                                        break;
                        /* an abort shuts the peer's X both ways in one call, as a
                         * RST leaves a TCP socket (EOF and EPOLLHUP together; the
                         * anchor byte before it is a wakeup of its own: smcrun(1)
                         * READINESS); smcd, which would shut its write side at our
                         * X's last close, then finds nothing left to shut. Else
                         * our FIN, which completes a peer that shut down writing
                         * already. SMC-D only: for SMC-R the other end of @y is
                         * smcd's, which shuts the peer's pair itself */
                        bool both = abort && !ep->peer_is_daemon &&
                                    (ep->tx_hdr->features & SMC_DMB_FEAT_X_HUP);

                        if (both || (atomic_load(&ep->rx_hdr->conn_flags) & SMC_DMB_CONN_DONE_WRITING))
                                x_hup_mark_peer(ep, y);
                        (void) sys_shutdown(y, both ? SHUT_RDWR : SHUT_WR);
                        (void) sys_close(y);
                }
        }
        return abort;
}

void smc_ring_detach(struct smc_ring_ep *ep) {
        int y;

        __atomic_store_n(&ep->closed, true, __ATOMIC_SEQ_CST);

        /* what a corked send left unpublished is the app's data: it goes out (a
         * sender asleep for room holds nothing back) */
        if (tx_lock_or_sleeper(ep)) {
                (void) tx_publish(ep, true);
                pthread_mutex_unlock(&ep->tx_lock);
        }
        __atomic_store_n(&ep->wr_shut, true, __ATOMIC_RELAXED);
        __atomic_store_n(&ep->rd_shut, true, __ATOMIC_RELAXED);
        y = __atomic_exchange_n(&ep->y_peer, -1, __ATOMIC_RELAXED);
        if (y >= 0)
                (void) sys_close(y);
}

int smc_ring_copy(struct smc_ring_ep *dst, struct smc_ring_ep *src, int x) {
        int y, r;

        y = __atomic_load_n(&src->y_peer, __ATOMIC_RELAXED);
        if (y < 0)
                return -ENOTCONN;
        y = sys_fcntl(y, F_DUPFD_CLOEXEC, 3); /* (sys_fd_off_stdio()) */
        if (y < 0)
                return -errno;
        pthread_mutex_lock(&src->tx_lock);
        pthread_mutex_lock(&src->rx_lock);
        /* the copy starts from what the peer can see: nothing held back */
        (void) tx_publish(src, true);
        *dst = *src;
        pthread_mutex_unlock(&src->rx_lock);
        pthread_mutex_unlock(&src->tx_lock);
        r = pthread_mutex_init(&dst->tx_lock, NULL);
        if (r == 0)
                r = pthread_mutex_init(&dst->rx_lock, NULL);
        if (r != 0) {
                sys_close(y);
                return -r;
        }
        dst->x = x;
        dst->y_peer = y;
        atomic_store_explicit(&dst->plug_owed, true, memory_order_relaxed); /* (a new X) */
        dst->corked = false;
        dst->tx_sleeping = false;
        dst->closed = false;
        return 0;
}

short smc_ring_poll(struct smc_ring_ep *ep) {
        uint64_t cons;

        /* the caller may sleep on X next: writers must ring from here on (before the
         * loads of cons and prod below) */
        smc_ring_watch(ep, false);
        cons = atomic_load(&ep->rx_hdr->cons);
        uint32_t f, pf;
        short m = 0;
        bool eof = false;

        /* settle a stale doorbell so that X's kernel readiness matches afterwards; a
         * receiver in another thread holds rx_lock and settles itself */
        if (rx_avail(ep, cons) == 0 && pthread_mutex_trylock(&ep->rx_lock) == 0) {
                int s = rx_settle(ep);

                if (s == 2)
                        eof = true;
                else if (s == 0 && !(atomic_load(&ep->rx_hdr->conn_flags) & PEER_EOF_FLAGS) && rx_x_eof(ep))
                        eof = true;
                if (eof && !rd_shut_any(ep))
                        mark_peer_dead(ep);
                pthread_mutex_unlock(&ep->rx_lock);
        }

        f = atomic_load_explicit(&ep->rx_hdr->conn_flags, memory_order_acquire);
        pf = peer_flags(ep);
        if (rx_avail(ep, cons) > 0)
                m |= POLLIN | POLLRDNORM;
        if ((f & PEER_EOF_FLAGS) || rd_shut_any(ep))
                m |= POLLIN | POLLRDNORM | POLLRDHUP;
        if (wr_shut_any(ep) || (pf & PEER_GONE_FLAGS) ||
            tx_space_unlocked(ep) >= WRITABLE_MIN(ep->tx_size))
                m |= POLLOUT | POLLWRNORM; /* as TCP: a shut-down writer gets POLLOUT, then EPIPE */
        /* a reset: the peer's abort, or its RST for the send taken after its close */
        if ((pf & SMC_DMB_CONN_ABORT) ||
            (atomic_load_explicit(&ep->tx_hdr->prod_flags, memory_order_relaxed) & SMC_DMB_PROD_SENT_AFTER_CLOSE)) {
                m |= POLLHUP;
                if (!reset_taken(ep))
                        m |= POLLERR;
        }
        /* as tcp_poll(): hang-up once both directions are shut, by the peer's FIN or
         * our own shutdown(SHUT_RD) for the receive side */
        if (((f & PEER_EOF_FLAGS) || rd_shut_any(ep)) && wr_shut_any(ep))
                m |= POLLHUP;
        return m;
}

uint32_t smc_ring_spin_budget(struct smc_ring_ep *ep, short events) {
        uint32_t cpu;

        if (ep->busy_poll_ns == 0)
                return 0;
        cpu = cur_cpu();
        if (cpu == 0)
                return ep->busy_poll_ns;
        /* POLLIN waits for the peer as writer into our ring, POLLOUT for it as reader
         * of its own: either last seen on our CPU cannot run while we spin */
        if ((events & POLLIN) && atomic_load_explicit(&ep->rx_hdr->writer_cpu, memory_order_relaxed) == cpu)
                return 0;
        if ((events & POLLOUT) && atomic_load_explicit(&ep->tx_hdr->reader_cpu, memory_order_relaxed) == cpu)
                return 0;
        return ep->busy_poll_ns;
}

bool smc_ring_ready_quick(struct smc_ring_ep *ep, short events) {
        uint32_t f = atomic_load_explicit(&ep->rx_hdr->conn_flags, memory_order_relaxed);

        if ((f | atomic_load_explicit(&ep->tx_hdr->reader_flags, memory_order_relaxed)) & SMC_DMB_CONN_ABORT)
                return true;
        if ((events & POLLIN) &&
            (rx_avail(ep, atomic_load_explicit(&ep->rx_hdr->cons, memory_order_relaxed)) > 0 ||
             (f & PEER_EOF_FLAGS) || rd_shut_any(ep)))
                return true;
        if ((events & POLLOUT) &&
            (tx_space_unlocked(ep) >= WRITABLE_MIN(ep->tx_size) || __atomic_load_n(&ep->wr_shut, __ATOMIC_RELAXED) ||
             (atomic_load_explicit(&ep->tx_hdr->reader_flags, memory_order_relaxed) & PEER_GONE_FLAGS)))
                return true;
        return false;
}

void smc_ring_watch(struct smc_ring_ep *ep, bool on) {
        uint32_t st = atomic_load_explicit(&ep->rx_hdr->spinning, memory_order_relaxed);

        if (on) {
                /* (not even for a moment while a kernel wait is known: a writer that
                 * saw the mark before it is taken back would not ring) */
                if (atomic_load(&ep->kwaiters) > 0 || atomic_load(&ep->no_watch))
                        return;
                if (st != SMC_DMB_SPIN_WATCHED)
                        atomic_store(&ep->rx_hdr->spinning, SMC_DMB_SPIN_WATCHED);
                /* after the store (seq_cst): a waiter that entered before it is seen
                 * here; one that enters after it finds WATCHED and ends it */
                if (atomic_load(&ep->kwaiters) > 0 || atomic_load(&ep->no_watch))
                        smc_ring_watch(ep, false);
        } else if (st == SMC_DMB_SPIN_WATCHED || (st = atomic_load(&ep->rx_hdr->spinning)) == SMC_DMB_SPIN_WATCHED)
                (void) atomic_compare_exchange_strong(&ep->rx_hdr->spinning, &st, SMC_DMB_SPIN_SLEEPING);
}

void smc_ring_kwait(struct smc_ring_ep *ep, bool enter) {
        if (enter) {
                atomic_fetch_add(&ep->kwaiters, 1);
                smc_ring_watch(ep, false);
        } else
                atomic_fetch_sub(&ep->kwaiters, 1);
}

void smc_ring_no_watch(struct smc_ring_ep *ep) {
        if (!atomic_load_explicit(&ep->no_watch, memory_order_relaxed))
                atomic_store(&ep->no_watch, true);
        smc_ring_watch(ep, false);
}

void smc_ring_spin_state(struct smc_ring_ep *ep, bool on, bool sleeping) {
        uint32_t cpu;

        if (ep->busy_poll_ns == 0)
                return;
        if (on) {
                cpu = cur_cpu();
                if (atomic_load_explicit(&ep->rx_hdr->reader_cpu, memory_order_relaxed) != cpu)
                        atomic_store_explicit(&ep->rx_hdr->reader_cpu, cpu, memory_order_relaxed);
                atomic_store(&ep->rx_hdr->spinning, SMC_DMB_SPIN_ACTIVE);
        } else
                atomic_store(&ep->rx_hdr->spinning, sleeping ? SMC_DMB_SPIN_SLEEPING : SMC_DMB_SPIN_IDLE);
}

void smc_ring_take_bell(struct smc_ring_ep *ep) {
        uint32_t b = SMC_DMB_BELL_SET;

        if (atomic_load_explicit(&ep->rx_hdr->bell, memory_order_relaxed) != SMC_DMB_BELL_SET ||
            pthread_mutex_trylock(&ep->rx_lock) != 0)
                return;
        if (atomic_compare_exchange_strong(&ep->rx_hdr->bell, &b, SMC_DMB_BELL_NONE)) /* R1 */
                owed_add(ep, 1);
        pthread_mutex_unlock(&ep->rx_lock);
}

bool smc_ring_x_rung(struct smc_ring_ep *ep) {
        return atomic_load_explicit(&ep->rx_hdr->bell, memory_order_relaxed) == SMC_DMB_BELL_SET ||
               owed_get(ep) > 0;
}

bool smc_ring_is_watched(struct smc_ring_ep *ep) {
        return atomic_load_explicit(&ep->rx_hdr->spinning, memory_order_relaxed) == SMC_DMB_SPIN_WATCHED;
}

uint64_t smc_ring_rx_prod(struct smc_ring_ep *ep) {
        return atomic_load(&ep->rx_hdr->prod);
}

uint32_t smc_ring_readable(struct smc_ring_ep *ep) {
        return rx_avail(ep, atomic_load(&ep->rx_hdr->cons));
}

uint32_t smc_ring_fionread(struct smc_ring_ep *ep) {
        uint32_t b = SMC_DMB_BELL_SET, n;
        uint8_t buf[64];

        if (pthread_mutex_trylock(&ep->rx_lock) != 0)
                return smc_ring_readable(ep); /* another thread receives: it settles */
        /* R1 (seq_cst, before the load of prod in rx_avail): from here on a writer
         * that publishes rings again */
        if (atomic_compare_exchange_strong(&ep->rx_hdr->bell, &b, SMC_DMB_BELL_NONE))
                owed_add(ep, 1);
        n = rx_avail(ep, atomic_load(&ep->rx_hdr->cons));
        if (n == 0)
                (void) rx_settle(ep); /* nothing to read: X must not stay readable */
        else
                /* the ring is not empty: one owed byte keeps X readable (level-triggered
                 * pollers), the others go, so X never fills with doorbell bytes */
                while (owed_read(ep, buf, sizeof(buf), 1) > 0)
                        ; /* (a byte still in flight stays owed: the next settle reads it) */
        pthread_mutex_unlock(&ep->rx_lock);
        return n;
}

uint32_t smc_ring_send_room(struct smc_ring_ep *ep) {
        return tx_space_unlocked(ep);
}

bool smc_ring_tcp_closed(struct smc_ring_ep *ep) {
        uint32_t f = atomic_load_explicit(&ep->rx_hdr->conn_flags, memory_order_acquire);

        if (peer_flags(ep) & SMC_DMB_CONN_ABORT)
                return true;
        if (atomic_load_explicit(&ep->tx_hdr->prod_flags, memory_order_relaxed) & SMC_DMB_PROD_SENT_AFTER_CLOSE)
                return true;
        return (f & (SMC_DMB_CONN_DONE_WRITING | SMC_DMB_CONN_CLOSED)) && wr_shut_any(ep);
}

bool smc_ring_wr_shut(struct smc_ring_ep *ep) {
        return wr_shut_any(ep);
}

bool smc_ring_error_pending(struct smc_ring_ep *ep) {
        if (reset_taken(ep))
                return false;
        return (peer_flags(ep) & SMC_DMB_CONN_ABORT) ||
               (atomic_load_explicit(&ep->tx_hdr->prod_flags, memory_order_relaxed) & SMC_DMB_PROD_SENT_AFTER_CLOSE);
}

int smc_ring_error(struct smc_ring_ep *ep) {
        if ((peer_flags(ep) & SMC_DMB_CONN_ABORT) && take_reset(ep))
                return peer_fin_then_reset(ep) ? EPIPE : ECONNRESET;
        /* the RST that answered the send taken after the peer's close: tcp_reset()
         * in CLOSE_WAIT sets EPIPE, reported once (here or by the next send) */
        if ((atomic_load_explicit(&ep->tx_hdr->prod_flags, memory_order_relaxed) & SMC_DMB_PROD_SENT_AFTER_CLOSE) &&
            take_reset(ep))
                return EPIPE;
        return 0;
}
