/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * The DMB (Direct Memory Buffer) of one SMC-D endpoint over loopback ISM, and the
 * SMC cursor arithmetic (../shared/smc-wire-spec.md sections 4.2, 4.3, 6.1).
 *
 * A DMB is a memfd of SMC_DMB_HDR_LEN + size bytes, size = 16 KiB << c for the
 * compressed size c = 0..6 (16 KiB .. 1 MiB). It is the *receive* ring of its owner
 * (the reader) and is mapped, read-write, by exactly two processes: its owner and
 * the connection's peer (the writer). smcd also maps it, to clear it on release and
 * to set the abort flag when one end dies. The ring data starts at SMC_DMB_HDR_LEN
 * (page aligned); unlike a kernel DMB the whole 2^(c+14) bytes are usable.
 *
 * The header differs from the kernel's 32-byte SMC-D CDC area (which is host memory,
 * not a wire format): cursors are packed into 64-bit words so that each is read and
 * written atomically, and the fields each side writes sit on their own cache line.
 * A cursor keeps SMC's (wrap, count) meaning: wrap in bits 32..47, count in 0..31.
 *
 * Memory-ordering protocol (checked under TSan by tests/test-ring):
 *  - Data: the writer copies bytes into the ring, then stores prod with release
 *    order; the reader loads prod with acquire order, then copies the bytes out, then
 *    stores cons with release order; the writer loads cons with acquire order before
 *    reusing that space. So a byte is never read before it is written nor
 *    overwritten before it is read.
 *  - Doorbell (reader wakeup): the app-visible fd of an endpoint is one end X of an
 *    AF_UNIX SOCK_STREAM socketpair; the other end Y is held by the peer, and a copy
 *    by smcd, which never reads nor writes it but learns from its EPOLLHUP that the
 *    last copy of X is gone. "bell"
 *    is 1 while a doorbell byte is queued (or about to be) in X. The writer, after
 *    publishing prod: if atomic_exchange(bell, 1) == 0, write one byte to Y. The
 *    reader, when it finds the ring empty: if atomic_exchange(bell, 0) == 1, read
 *    exactly one byte from X (a byte still in flight is remembered as owed and read
 *    later), then load prod again. Both exchanges and the prod store/load are
 *    seq_cst, so either the reader sees the new prod or the writer sees bell == 0 and
 *    rings: no lost wakeup. No syscall happens while the ring stays non-empty.
 *  - Spin handoff (no syscall when the reader busy-polls): a busy-polling reader
 *    publishes its state in "spinning" (ACTIVE in recv, SLEEPING before it blocks in
 *    poll(X), IDLE between calls). A writer that finds ACTIVE or IDLE moves bell
 *    NONE -> TENTATIVE instead of ringing, waits (bounded) for cons to reach its prod
 *    or for SLEEPING, then resolves: cons == prod: TENTATIVE -> NONE, no byte; else
 *    TENTATIVE -> SET, then, if cons reached prod meanwhile, SET -> NONE unless the
 *    reader took it, and only then write the byte (as after W2: a byte for data
 *    already read would leave X readable on an empty ring). The reader's drain protocol only ever takes SET, never
 *    TENTATIVE, so the writer alone resolves it (ring.c has the full argument).
 *  - Epoll watch: a reader whose epoll_wait() looks at the ring itself before it
 *    sleeps stores WATCHED; a writer that loads WATCHED after publishing writes no
 *    byte. The reader stores SLEEPING (seq_cst) and loads prod again before any wait
 *    that relies on X (ring.c (6)). A writer that does not know WATCHED (an older
 *    library) treats it as a reader that does not spin and rings: compatible.
 *  - Plug (writer wakeup, POLLOUT): when the peer's DMB is full the writer fills X's
 *    socket send buffer ("plugs" it: POLLOUT clears), then sets writer_waiting
 *    (seq_cst), then reloads cons. The reader, after storing cons: if
 *    atomic_exchange(writer_waiting, 0) == 1, drains all bytes from its Y end of the
 *    writer's pair, which makes the writer's X writable again.
 *  - Shutdown and close: the writer sets SMC_DMB_CONN_* in conn_flags of the peer's
 *    DMB (release) before shutdown(Y, SHUT_WR) (at close also draining its writer's
 *    plug from Y first, then closing Y); the reader sees EOF on X, then reads
 *    conn_flags (acquire). EOF or HUP without any flag means the peer went away
 *    without closing (it died, and smcd is gone too): as TCP (the kernel closes a
 *    dead process's sockets), that is an orderly close (CLOSED: EOF) if the peer had
 *    read everything sent to it, else an abort (ABORT: ECONNRESET). smcd applies the
 *    same rule when the last copy of an endpoint's X goes without a close of the
 *    library (a process exit, or a copy a forked process let go of last), sets the
 *    flags, then shuts Y for writing, so the survivor learns it even if it never
 *    polls.
 *
 * Counters (statistics; smcd reads them for ListConnections and adds them to its
 * totals when the connection ends): prod_bytes, prod_msgs, prod_cork_flushes and
 * prod_sendfile_* have the writer as their single writer, cons_msgs the owner (the
 * reader). Each is a 64-bit atomic that its one writer updates with a relaxed store
 * of a value it keeps itself (no read-modify-write), placed on the cache line that
 * side writes anyway (lines 0 and 1) or on a cold line (line 2): the data path pays
 * one plain store per call and no extra cache line. Readers load them relaxed;
 * they order nothing. A send call counts in prod_msgs when its data is published
 * (a corked send with its batch); recv calls with MSG_PEEK do not count.
 */

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define SMC_DMB_HDR_LEN 4096u          /* bytes before the ring data */
#define SMC_DMB_HDR_CLEAR_LEN 256u     /* bytes of the header that are ever written */
#define SMC_DMB_MIN_SIZE (16u << 10)   /* ring bytes, compressed size 0 */
#define SMC_DMB_MAX_SIZE (1u << 20)    /* ring bytes, compressed size 6 */
#define SMC_DMB_NCLASSES 7             /* compressed sizes 0..6 */
/* the RMB of a socket without SO_RCVBUF (smcd's rmem tunable): 128 KiB, as the
 * kernel's net.smc.rmem, which defaults to tcp_rmem[1] (Documentation/networking/
 * smc-sysctl.rst); measured against 64 KiB: iperf3 -P4 2.50x -> 3.46x TCP, nginx 1 MiB
 * file 1.06x -> 1.55x, small-message rates unchanged */
#define SMC_DMB_DEFAULT_SIZE (128u << 10)
#define SMC_DMB_EYECATCHER 0xFE        /* SMC CDC message type */

/* bell values */
#define SMC_DMB_BELL_NONE 0u      /* no doorbell byte queued */
#define SMC_DMB_BELL_SET 1u       /* a doorbell byte is queued in X, or being written */
#define SMC_DMB_BELL_TENTATIVE 2u /* the writer hands data to a spinning reader and
                                   * decides shortly whether a byte is needed */

/* spinning values (reader state, for the spin handoff) */
#define SMC_DMB_SPIN_NONE 0u     /* the reader does not busy-poll */
#define SMC_DMB_SPIN_ACTIVE 1u   /* the reader is in recv, polling the ring */
#define SMC_DMB_SPIN_SLEEPING 2u /* the reader sleeps in poll(X): ring it */
#define SMC_DMB_SPIN_IDLE 3u     /* a busy-polling reader between two recv calls */
#define SMC_DMB_SPIN_WATCHED 4u  /* the owner's epoll_wait() looks at the ring itself
                                  * before it sleeps: publish without a doorbell byte
                                  * (library-internal: smcd never rings SMC-D readers) */

/* conn_flags: the writer's connection state, bits as in the SMC CDC
 * connection-state flags byte (wire spec 4.1). */
#define SMC_DMB_CONN_DONE_WRITING 0x80u /* peer did shutdown(SHUT_WR) */
#define SMC_DMB_CONN_CLOSED       0x40u /* peer closed orderly */
#define SMC_DMB_CONN_ABORT        0x20u /* peer aborted: ECONNRESET */
/* reader_flags only: the owner did shutdown(SHUT_RD); its X no longer takes doorbell
 * bytes (EPIPE on the writer's Y is then not a death) */
#define SMC_DMB_READER_SHUT_RD    0x01u
/* reader_flags only: the socket has SO_LINGER on with a zero timeout (set by any
 * process that holds it). The last close of a socket shared by fork is seen only by
 * smcd (the hang-up of the last copy of X): it then aborts (ECONNRESET for the peer)
 * instead of closing orderly, as TCP's close sends RST with such a linger (Linux
 * tcp_close()). Set and cleared by the owner with the option; never a peer state. */
#define SMC_DMB_READER_LINGER_RESET 0x02u
/* reader_flags only: both directions of the owner's socket are shut (its write side,
 * and its read side by the peer's FIN or abort or its own shutdown(SHUT_RD)), and
 * the doorbell pair was shut down both ways for it, so that the kernel reports
 * EPOLLHUP on X as on a TCP socket in that state (tcp_poll()). Set, before that
 * shutdown(2), by whichever saw both halves: the owner, its peer (the FIN that
 * completes it) or smcd (a peer's close or death); only where smcd offered
 * SMC_DMB_FEAT_X_HUP. The owner also shuts X's write side (and marks first) after
 * the one send taken after the peer's close (SMC_DMB_PROD_SENT_AFTER_CLOSE: TCP's
 * RST). Y then hangs up while X lives on: smcd asks the kernel whether X still
 * exists before it takes the hang-up for X's last close. */
#define SMC_DMB_READER_X_HUP 0x04u
/* reader_flags only, with X_HUP: before the mark, the marker (the peer's library or
 * smcd, through its copy of Y) queued one byte in X that the owner never reads (it
 * reads only the doorbell bytes it owes, so X's queue keeps one byte more than it
 * owes). X's last close frees it: smcd then sees Y's bytes in flight (SO_MEMINFO
 * SK_MEMINFO_WMEM_ALLOC) drop to 0, and needs no unix_diag query (which walks every
 * unix socket of the host). */
#define SMC_DMB_READER_X_ANCHOR 0x08u
/* reader_flags only, the server's DMB: its library's accept() took the connection
 * (a listener of ctl protocol version >= 4 sets it, once). smcd resets (ABORT) a
 * server side that ends without it: its NEW_CONN was never taken (queued when the
 * listener's last copy went, or its descriptors lost to a receiver out of them), as
 * TCP resets connections queued on a listener that is closed. */
#define SMC_DMB_READER_ACCEPTED 0x10u
/* reader_flags only: the socket's pending error (the peer's abort, or the RST that
 * answered the send taken after the peer's close) was returned by a call, in any
 * process or descriptor that holds the socket (dup, fork, exec): one error for all
 * copies, as TCP's sk_err, which sock_error() takes. Library-private (never a peer
 * state; above the CDC's connection-state byte) */
#define SMC_DMB_READER_ERR_TAKEN 0x100u
/* features: what the smcd that set up the connection does (set when it hands the
 * DMB out, read-only then; 0 from an older smcd) */
#define SMC_DMB_FEAT_X_HUP 0x01u /* tells X's last close from a shutdown of both
                                  * directions (SMC_DMB_READER_X_HUP) */
/* prod_flags: producer flags as in the CDC (wire spec 4.1) */
#define SMC_DMB_PROD_WRITE_BLOCKED 0x80u
/* prod_flags, library-private (a bit the CDC reserves, never sent: smcr-wire.c masks
 * it): a writer took the one send TCP accepts after the reader's orderly close
 * (ring.c tx_take_send_after_fin); shared by every process that holds the socket */
#define SMC_DMB_PROD_SENT_AFTER_CLOSE 0x01u

struct smc_dmb_hdr {
        /* cache line 0: written by the writer (the peer), read by the owner */
        uint8_t type;     /* SMC_DMB_EYECATCHER, set by smcd when handed out */
        uint8_t reserved0[7];
        _Atomic uint64_t prod;           /* producer cursor into this ring */
        _Atomic uint32_t prod_flags;     /* SMC_DMB_PROD_* */
        _Atomic uint32_t conn_flags;     /* SMC_DMB_CONN_* of the writer */
        _Atomic uint32_t writer_waiting; /* writer plugged its fd, waits for space */
        _Atomic uint32_t writer_cpu;     /* CPU the writer last published from, + 1
                                          * (0 = unknown): spin only across CPUs */
        _Atomic uint64_t prod_bytes;     /* bytes ever published into this ring (64-bit,
                                          * unlike the cursor's 16-bit wrap): counters */
        /* Statistics (see "Counters" below): written by the writer only. */
        _Atomic uint64_t prod_msgs;      /* send calls that moved data into this ring */
        _Atomic uint64_t prod_cork_flushes; /* batches held back by cork / MSG_MORE
                                             * that were published */
        _Atomic uint32_t wr_lock;        /* writers in several processes (a connection
                                          * shared by fork, dup or exec): 0, or the pid
                                          * of the one writing now (ring.c, "Shared
                                          * writers"); unused while there is one */
        _Atomic uint32_t plug_pending;   /* 1 while the writer plugs its X after a send
                                          * that left the ring less than half free
                                          * (ring.c tx_plug_after): a reader that
                                          * emptied the ring waits for writer_waiting */
        /* cache line 1: written by the owner (the reader), read by the writer */
        _Atomic uint64_t cons;          /* consumer cursor of this ring */
        _Atomic uint32_t bell;          /* a doorbell byte is queued in owner's X */
        _Atomic uint32_t reader_flags;  /* SMC_DMB_CONN_* of the owner (reader) */
        _Atomic uint32_t spinning;      /* SMC_DMB_SPIN_*: the owner's busy-poll state */
        _Atomic uint32_t reader_cpu;    /* CPU the owner last received on, + 1 */
        /* Statistics: written by the owner (the reader) only. */
        _Atomic uint64_t cons_msgs;     /* recv calls that took data out of this ring */
        _Atomic uint32_t draining;      /* 1 while the reader drains the writer's plug
                                         * (ring.c rx_unplug_writer, D0..D3): a writer
                                         * that plugged meanwhile waits and plugs again */
        _Atomic uint32_t drain_gen;     /* drains ended (D3), wrapping: a writer that
                                         * sees neither draining nor a new drain_gen
                                         * around its plug knows no drain ate it (Q3) */
        /* SO_RCVLOWAT of the owner's socket (bytes; 0 or 1: the default, 1): a
         * blocking receive waits for that many bytes (ring.c smc_ring_recv), as
         * TCP's sock_rcvlowat(). Here, not per process, so that every process
         * holding the socket (fork, exec, SCM_RIGHTS) sees the one value, as the
         * kernel's sk_rcvlowat. Written by the owner's setsockopt (socket.c). */
        _Atomic uint32_t rcvlowat;
        /* Doorbell bytes owed: bells a receive took (ring.c R1) whose bytes are still
         * in X, to be read once the ring is empty. Here, not per process or
         * descriptor, since X's queue is one for every copy of the socket (dup, fork,
         * exec, SCM_RIGHTS): a copy that reads the ring empty reads the bytes
         * another copy's bell left, or X stayed readable on an empty ring (helper
         * 129: a stale EPOLLIN after a dup's read). Library-private, the owner's. */
        _Atomic uint32_t owed;
        uint8_t pad1[64 - 48];
        /* cache line 2: cold statistics, written by the writer only */
        _Atomic uint64_t prod_sendfile_calls; /* sendfile calls that moved data in */
        _Atomic uint64_t prod_sendfile_bytes; /* ... and their bytes (also in prod_bytes) */
        _Atomic uint64_t prod_inline_sends;   /* SMC-R only (data inline in the work
                                               * request); SMC-D never writes it: 0 */
        /* The DMB token: a random value smcd writes when it hands the DMB to a
         * connection (before either end maps it; cleared with the header at
         * release). Only the two processes that map the DMB can read it: after an
         * smcd restart they prove with it which connection they re-register
         * (ctl-proto.h, REREG). Written by smcd only, then read-only. */
        uint64_t token;
        /* How far the writer may have written the ring data: bytes from offset 0
         * (SMC_DMB_DIRTY_UNKNOWN: no writer said). smcd sets UNKNOWN when it hands
         * the DMB out; the writer's library replaces it by 0 before its first write
         * (smc_ring_track_dirty() at connect and accept; a connection adopted after
         * exec keeps what it finds) and raises it, before it copies, to the end of
         * every write (the ring size once a write wraps). At release smcd zeroes only that
         * much of the ring (release-time clearing, seed 000) instead of all of it:
         * a connection that moved 4 KiB through a 128 KiB ring costs a 4 KiB memset.
         * The value is raised before the bytes land, so a writer killed in mid-copy
         * has covered them. Either process could lower it, but only to leave behind
         * bytes it can read itself, and only for the next connection of the same
         * pair of uids (pool.h, trust domains). Written by the writer only. */
        _Atomic uint32_t data_dirty;
        uint32_t features;              /* SMC_DMB_FEAT_*: written by smcd only */
        /* While bytes that TCP_CORK or MSG_MORE hold back are copied but not
         * published: SMC_DMB_PROD_HELD_VALID | the producer cursor up to which they
         * were copied, stored (release) after the copy by every send that leaves
         * bytes held; 0 once the batch is published or dropped (and from an older
         * library). When the writer's last copy goes without a close of the library
         * (the process exits or is killed) and smcd closes it orderly (FIN), smcd
         * publishes prod up to it first, as the kernel sends a dead process's corked
         * TCP data; an abort drops them, as TCP's RST (smc_dmb_publish_held(): conn.c;
         * on SMC-R this is the send buffer, and smcr.c sends them).
         * Written by the writer only. */
        _Atomic uint64_t prod_held;
        uint8_t pad2[64 - 48];
};

#define SMC_DMB_DIRTY_UNKNOWN UINT32_MAX
#define SMC_DMB_PROD_HELD_VALID (1ull << 63) /* prod_held: a held batch is pending */

_Static_assert(sizeof(struct smc_dmb_hdr) == 192, "DMB header layout");
/* the fields of the first layout keep their offsets; counters were appended */
_Static_assert(offsetof(struct smc_dmb_hdr, prod) == 8 && offsetof(struct smc_dmb_hdr, prod_bytes) == 32 &&
               offsetof(struct smc_dmb_hdr, cons) == 64 && offsetof(struct smc_dmb_hdr, reader_cpu) == 84,
               "DMB header offsets");
_Static_assert(offsetof(struct smc_dmb_hdr, wr_lock) == 56, "DMB header: wr_lock in the writer's line");
_Static_assert(offsetof(struct smc_dmb_hdr, prod_msgs) / 64 == offsetof(struct smc_dmb_hdr, prod) / 64 &&
               offsetof(struct smc_dmb_hdr, cons_msgs) / 64 == offsetof(struct smc_dmb_hdr, cons) / 64,
               "hot counters share their writer's cache line");
_Static_assert(sizeof(struct smc_dmb_hdr) <= SMC_DMB_HDR_CLEAR_LEN, "clear length");
_Static_assert(offsetof(struct smc_dmb_hdr, token) == 152, "DMB header: token in the cold line");
_Static_assert(offsetof(struct smc_dmb_hdr, data_dirty) / 64 == 2, "DMB header: data_dirty in the cold line");
_Static_assert(offsetof(struct smc_dmb_hdr, prod_held) / 64 == 2, "DMB header: prod_held in the cold line");
_Static_assert(offsetof(struct smc_dmb_hdr, rcvlowat) / 64 == 1, "DMB header: rcvlowat in the reader's line");
_Static_assert(offsetof(struct smc_dmb_hdr, owed) / 64 == 1, "DMB header: owed in the reader's line");

/* Compressed size c (0..6) for a wanted ring size in bytes, rounding up as Linux
 * does (wire spec 6.1): 0 for <= 16 KiB, at most 6 (1 MiB). */
static inline unsigned smc_dmb_class(uint64_t size) {
        unsigned c = 0;

        if (size <= SMC_DMB_MIN_SIZE)
                return 0;
        size = (size - 1) >> 14;
        while (size) {
                c++;
                size >>= 1;
        }
        return c > SMC_DMB_NCLASSES - 1 ? SMC_DMB_NCLASSES - 1 : c;
}

/* Ring size in bytes of compressed size c. */
static inline uint32_t smc_dmb_class_size(unsigned c) {
        return SMC_DMB_MIN_SIZE << c;
}

/* Cursors: (wrap, count) packed as wrap << 32 | count, 0 <= count < ring size. */
static inline uint64_t smc_curs_make(uint16_t wrap, uint32_t count) {
        return ((uint64_t) wrap << 32) | count;
}
static inline uint32_t smc_curs_count(uint64_t c) {
        return (uint32_t) c;
}
static inline uint16_t smc_curs_wrap(uint64_t c) {
        return (uint16_t) (c >> 32);
}

/* Advance cursor @c by @n bytes (n <= size) in a ring of @size bytes. */
static inline uint64_t smc_curs_add(uint64_t c, uint32_t n, uint32_t size) {
        uint32_t count = smc_curs_count(c) + n;
        uint16_t wrap = smc_curs_wrap(c);

        if (count >= size) {
                count -= size;
                wrap++;
        }
        return smc_curs_make(wrap, count);
}

/* Distance in bytes from @old to @new (at most one ring apart), clamped at 0
 * (wire spec 4.3). */
static inline uint32_t smc_curs_diff(uint32_t size, uint64_t old, uint64_t new) {
        if (smc_curs_wrap(old) != smc_curs_wrap(new)) {
                int64_t d = (int64_t) (size - smc_curs_count(old)) + smc_curs_count(new);
                return d > 0 ? (uint32_t) d : 0;
        }
        return smc_curs_count(new) > smc_curs_count(old) ? smc_curs_count(new) - smc_curs_count(old) : 0;
}

/* If cursor @new is strictly ahead of @old by at most @size bytes in a ring of @size
 * bytes, that distance, else 0 (behind, equal, stale by a wrap or more, or invalid:
 * unlike smc_curs_diff(), for a cursor that may be old). */
static inline uint32_t smc_curs_ahead(uint32_t size, uint64_t old, uint64_t new) {
        uint32_t oc = smc_curs_count(old), nc = smc_curs_count(new);

        if (oc >= size || nc >= size)
                return 0;
        if (smc_curs_wrap(new) == smc_curs_wrap(old))
                return nc > oc ? nc - oc : 0;
        if (smc_curs_wrap(new) == (uint16_t) (smc_curs_wrap(old) + 1))
                return nc <= oc ? size - oc + nc : 0;
        return 0;
}

/* For smcd, when a writer died without closing and the close is orderly (FIN): move
 * @h's producer cursor up to the bytes its cork or MSG_MORE held back (prod_held),
 * as the kernel sends a dead process's corked TCP data before its FIN. @size: the
 * ring's data size in bytes. Returns the bytes published (0: none held, or a stale
 * value: smc_curs_ahead()). */
static inline uint32_t smc_dmb_publish_held(struct smc_dmb_hdr *h, uint32_t size) {
        uint64_t prod = atomic_load_explicit(&h->prod, memory_order_relaxed);
        uint64_t held = atomic_load_explicit(&h->prod_held, memory_order_acquire);
        uint32_t n = (held & SMC_DMB_PROD_HELD_VALID) ? smc_curs_ahead(size, prod, held & ~SMC_DMB_PROD_HELD_VALID) : 0;

        if (n > 0)
                atomic_store_explicit(&h->prod, held & ~SMC_DMB_PROD_HELD_VALID, memory_order_release);
        return n;
}

/* Pointer to the ring data of a DMB mapped at @base. */
static inline uint8_t *smc_dmb_data(void *base) {
        return (uint8_t *) base + SMC_DMB_HDR_LEN;
}
