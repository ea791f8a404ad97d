/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * The SMC-D data path of one connection endpoint, in the client process, with smcd
 * not on it. The protocol (cursors, doorbell, plug, flags, memory ordering) is
 * written down in dmb.h; this module implements it.
 *
 * Locking: smc_ring_send/shutdown may run in one thread while smc_ring_recv runs in
 * another; each direction has its own mutex, so concurrent senders (or receivers)
 * are serialised as on a TCP socket.
 *
 * Counters (dmb.h, "Counters"): a send call that moves data counts one message
 * (prod_msgs of the peer's DMB), a recv call without MSG_PEEK that returns data one
 * (cons_msgs of our DMB); every publication of a batch that TCP_CORK or MSG_MORE
 * held back counts one cork flush (prod_cork_flushes), whatever published it: a send
 * without MSG_MORE, TCP_CORK off, smc_ring_flush() (TCP_NODELAY), the autocork size,
 * a full ring, shutdown or close.
 */

#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "dmb.h"

/* Called (if set) when a send or receive on a ring is about to sleep or to return
 * EAGAIN: a point where a system call follows anyway. socket.c uses it to notice a
 * restarted smcd (rereg_idle_check). Must not take ring locks. */
extern void (*smc_ring_idle_hook)(void);

/* Called (if set), with the ring's tx_lock held, when a send leaves bytes held back
 * (TCP_CORK, MSG_MORE) and no push of them is queued yet (ep->hold_armed, which it
 * sets first): socket.c queues smc_ring_flush_held_try() for TCP's 200 ms ceiling.
 * Must not take ring locks. */
struct smc_ring_ep;
extern void (*smc_ring_hold_hook)(struct smc_ring_ep *ep);

struct smc_ring_ep {
        /* our DMB (rx): the peer writes, we read */
        struct smc_dmb_hdr *rx_hdr;
        uint8_t *rx_data;
        uint32_t rx_size;
        /* the peer's DMB (tx): we write, the peer reads */
        struct smc_dmb_hdr *tx_hdr;
        uint8_t *tx_data;
        uint32_t tx_size;

        int x;      /* our socketpair end: the app-visible fd (not owned here) */
        int y_peer; /* the peer's socketpair end: owned, closed by smc_ring_close() */

        pthread_mutex_t tx_lock;
        pthread_mutex_t rx_lock;
        bool plug_wait_gave_up; /* rx_unplug_writer() waited out a stopped writer's
                                 * plug_pending (rx_lock) */
        uint64_t tx_prod;     /* our producer cursor, published or not (tx_lock) */
        uint32_t tx_unpub;    /* bytes copied but not yet published (cork) */
        uint64_t tx_bytes;    /* bytes published so far (tx_lock) */
        uint32_t handoff_miss; /* spin handoffs to an idle reader that failed (tx_lock) */
        bool tentative;        /* we hold the peer's bell TENTATIVE (tx_lock) */
        bool tentative_idle;   /* ... taken while the reader was IDLE */
        bool corked;          /* TCP_CORK on (atomic builtins: smc_ring_set_cork() may
                               * store it while a sender sleeps with tx_lock held) */
        bool closed;          /* smc_ring_close_reset() or smc_ring_detach() began
                               * (atomic builtins): a call racing it in another thread
                               * stops before it touches the rings again, which smcd may
                               * clear and hand to another connection once X is closed */
        int closed_err;       /* what calls that find @closed fail with (atomic), 0:
                               * EBADF (a close); smc_ring_wake_closed() */
        bool tx_sleeping;     /* a sender holds tx_lock and sleeps in poll(2) for room,
                               * with nothing held back and no bell TENTATIVE (atomic):
                               * a nonblocking send gets EAGAIN, a cork change or a
                               * push needs nothing of the ring, as with TCP, whose
                               * sender sleeps without the socket lock */
        bool hold_armed;      /* a push of the held bytes is queued (smc_ring_hold_hook;
                               * tx_lock) */
        bool wr_shut;         /* we did shutdown(SHUT_WR) */
        bool wr_shut_pending; /* SHUT_WR asked while a sender held tx_lock (atomic) */
        bool rd_shut;         /* we did shutdown(SHUT_RD) */
        bool reset_seen;      /* ECONNRESET already reported once */
        bool held_after_close; /* a send held back (MSG_MORE, TCP_CORK) after the peer's
                                * close was accepted: the next push is the taken send
                                * (tx_send; tx_lock) */
        bool x_mode_is_app;   /* X's O_NONBLOCK is the application's socket mode (set by
                               * the caller after smc_ring_init()): a call asked to block
                               * returns -EAGAIN instead of sleeping when another copy
                               * of the socket (dup, fork) made it nonblocking */
        bool peer_is_daemon;  /* SMC-R: smcd holds the pairs' other ends (set by the caller
                               * after smc_ring_init()); its death is an abort */
        _Atomic int kwaiters;  /* threads of this process in a receive that may block or
                                * in poll() on X (smc_ring_kwait): no epoll watch then */
        _Atomic bool no_watch; /* select/ppoll waited on X: never watched again */
        _Atomic unsigned edge_regs; /* edge-triggered epoll registrations of this
                                     * process (socket.c): a receive that leaves data
                                     * in the ring takes the bell, so that the next
                                     * publish rings X again (an edge, as TCP's every
                                     * arrival); level-triggered readers need not */
        bool shared;          /* other processes may write this connection too (fork,
                               * dup, exec): sends take the DMB's wr_lock and publish
                               * everything before they return (smc_ring_set_shared) */
        _Atomic bool plug_owed; /* a send that was whole left less than WRITABLE_MIN of
                                 * the peer's ring free and did not plug X: the next
                                 * wait on X for POLLOUT plugs first
                                 * (smc_ring_plug_owed()); not on a shared or SMC-R
                                 * endpoint, whose sends plug at once */
        uint32_t busy_poll_ns;  /* spin this long before sleeping (0 = never spin) */
        uint32_t autocork_size; /* bytes; flush a corked batch at this size */
        /* statistics, published into the DMB headers (dmb.h, "Counters") */
        bool tx_held;              /* copied under cork / MSG_MORE, not published (tx_lock) */
        uint64_t tx_msgs;          /* send calls that moved data (tx_lock): prod_msgs */
        uint64_t tx_cork_flushes;  /* held batches published (tx_lock): prod_cork_flushes */
        uint64_t tx_sendfile_calls; /* (tx_lock): prod_sendfile_calls */
        uint64_t tx_sendfile_bytes; /* (tx_lock): prod_sendfile_bytes */
        uint64_t rx_msgs;          /* recv calls that consumed data (rx_lock): cons_msgs */
};

/* From now on, other processes may hold copies of this connection (after fork, dup
 * or exec; the socket layer knows): every send takes the cross-process writer lock in
 * the peer's DMB header (dmb.h wr_lock), starts from the producer cursor and counters
 * found there, and publishes all it wrote before it returns (TCP_CORK and MSG_MORE
 * then batch within one call only). So two processes writing at the same time never
 * mix bytes within a call, as on a TCP socket. Call under no lock. */
void smc_ring_set_shared(struct smc_ring_ep *ep);

/* A new connection's writer (connect, accept; not an adoption after exec): say in
 * the peer's DMB header that this library records how far it writes the ring, by
 * replacing smcd's SMC_DMB_DIRTY_UNKNOWN with 0 (dmb.h, data_dirty); a value already
 * there stays. Call after smc_ring_init(), before the first send. */
void smc_ring_track_dirty(struct smc_ring_ep *ep);

/* For tests: the copy used when the destination sits 1..63 bytes past the source
 * modulo 4 KiB (ring.c copy_bytes): 1 the SSE2 loop, 2 the AVX2 loop (AMD's CPUs with
 * AVX2), 3 memcpy below 64 KiB and the AVX2 loop from there (other CPUs with AVX2),
 * 4 memcpy; 2 and 3 only where the CPU has AVX2; 0 ask the CPU again. Returns the
 * copy now in use (1..4; 0 on other architectures). */
int smc_ring_copy_isa(int isa);

/* Set up @ep over two mapped DMBs. rx/tx point at the DMB bases (header first).
 * Takes ownership of y_peer. @x keeps the send buffer its creator gave it: only plug
 * bytes go through it, so the smallest (SO_SNDBUF 1, which the kernel rounds up to
 * SOCK_MIN_SNDBUF, ~4.5 KiB) keeps a plug cheap; smcd sets that (measured: streaming
 * over a 64 KiB ring ~0.5 GB/s with the default, ~1.8 GB/s with the smallest).
 * Returns 0 or -errno (pthread_mutex_init). */
int smc_ring_init(struct smc_ring_ep *ep, void *rx_base, uint32_t rx_size, void *tx_base, uint32_t tx_size,
                  int x, int y_peer);

/* Undo smc_ring_init() for an @ep that was never used by another thread (its locks);
 * closes nothing and unmaps nothing: after smc_ring_close_reset(), or when the caller
 * closes y_peer itself. */
void smc_ring_fini(struct smc_ring_ep *ep);

/* Send up to the sum of @iov bytes. @nonblock: return -EAGAIN instead of waiting
 * for space. flags: MSG_MORE (hold data as TCP_CORK does for this call).
 * Returns bytes sent (> 0; a blocking send sends all unless interrupted after
 * some progress), or -EAGAIN, -EPIPE (we shut down or the peer closed), -ECONNRESET
 * (peer aborted or died), -EINTR (a signal before any byte was sent), -EFAULT (@iov
 * or, once the connection's state allows sending, a buffer in the first page of the
 * address space or wrapping around it: nothing is sent; other bad pointers fault in
 * the copy). Never raises SIGPIPE: the caller does. */
ssize_t smc_ring_send(struct smc_ring_ep *ep, const struct iovec *iov, int iovcnt, int flags, bool nonblock);

/* smc_ring_send() bounded by a send timeout: @timeo_fd is a socket whose SO_SNDTIMEO
 * limits the time the call waits for space (read only if it has to wait; -1: no
 * limit, as smc_ring_send()); when it passes the call returns what it sent, or
 * -EAGAIN, as a TCP send does. */
ssize_t smc_ring_send_timeo(struct smc_ring_ep *ep, const struct iovec *iov, int iovcnt, int flags, bool nonblock,
                            int timeo_fd);

/* sendfile(2) onto the connection in one copy: up to @count bytes of @in_fd are read
 * (pread, or read at the file position when @offset is NULL) straight into the free
 * space of the peer's ring, both pieces in one preadv / readv when that space wraps, and
 * published exactly as smc_ring_send() publishes copied bytes: TCP_CORK, @flags
 * MSG_MORE and the autocork size hold them back the same way, a blocking call waits for
 * space (and sends all of @count unless the file ends first), @nonblock or MSG_DONTWAIT
 * sends what fits. @timeo_fd: a socket whose SO_SNDTIMEO bounds the time the call
 * waits for space (read only if it has to wait; -1: no limit); when it passes the
 * call returns what it sent, or -EAGAIN.
 * A file that ends (or reads short) before @count stops the call: it returns what was
 * sent. *@offset (or the file position) moves by exactly the bytes returned; without
 * @offset, @in_fd must be able to seek for that to hold (the caller checks: a pipe
 * would be read and not given back). Counted as one message (prod_msgs) and one
 * sendfile call with its bytes (prod_sendfile_calls / _bytes) in the peer's DMB.
 * Returns bytes sent (> 0), 0 at end of file (nothing read), or the errors of
 * smc_ring_send(), or @in_fd's read error (-EIO, -EBADF, -EISDIR, -ESPIPE for a pipe
 * with @offset, ...) only when nothing was sent; -EINVAL for a negative *@offset or
 * flags other than MSG_MORE / MSG_DONTWAIT. */
ssize_t smc_ring_sendfile(struct smc_ring_ep *ep, int in_fd, int64_t *offset, size_t count, int flags,
                          bool nonblock, int timeo_fd);

/* Receive into @iov. flags: MSG_PEEK, MSG_WAITALL. A blocking call returns once it
 * has min(SO_RCVLOWAT, the buffer's length) bytes (smc_ring_set_rcvlowat(); all of
 * them with MSG_WAITALL), or earlier with what it has at EOF, an error, a signal
 * handler or the timeout, as TCP's. Returns bytes (> 0), 0 at EOF
 * (peer shut down or closed orderly and all data read), -EAGAIN, -ECONNRESET (peer
 * aborted / died; data sent before the abort is still delivered first), -EINTR,
 * -EFAULT (@iov, or a buffer as smc_ring_send() refuses it when there is data to
 * copy: nothing is consumed). */
ssize_t smc_ring_recv(struct smc_ring_ep *ep, const struct iovec *iov, int iovcnt, int flags, bool nonblock);

/* Publish bytes held back by cork / MSG_MORE and ring the peer (TCP_NODELAY's push).
 * Returns 0, as TCP's push never fails: a peer that is gone is reported by the next
 * send (held bytes for a peer that closed are the one send TCP takes after the peer's
 * FIN, as at uncork). */
int smc_ring_flush(struct smc_ring_ep *ep);

/* The push smc_ring_hold_hook queued: as smc_ring_flush(), if no other thread holds
 * tx_lock (a sender then either publishes the batch or holds it on: try again
 * later). Clears ep->hold_armed. Returns 0, or -EBUSY (nothing done). */
int smc_ring_flush_held_try(struct smc_ring_ep *ep);

/* TCP_CORK on/off; turning it off flushes. Returns 0, as TCP's setsockopt: a peer that
 * is gone is reported by the next send (held bytes for a peer that closed count as the
 * one send TCP takes after the peer's FIN: dropped). */
int smc_ring_set_cork(struct smc_ring_ep *ep, bool on);

/* Statistics for a sendfile(2) made of smc_ring_send() calls (smc_ring_sendfile()
 * counts itself): count one sendfile call on @ep that moved @bytes (> 0) into the
 * peer's ring, in the peer's DMB header (prod_sendfile_calls, prod_sendfile_bytes;
 * dmb.h). Call it after the smc_ring_send() calls that moved the bytes (they count in
 * prod_bytes and, one per call, in prod_msgs as usual). Takes tx_lock; never fails. */
void smc_ring_count_sendfile(struct smc_ring_ep *ep, uint64_t bytes);

/* shutdown(2): SHUT_WR flushes, sets DONE_WRITING in the peer's DMB and shuts
 * down the peer's socket end for writing (the peer sees EOF after the data).
 * Returns 0 or -ENOTCONN. */
int smc_ring_shutdown(struct smc_ring_ep *ep, int how);

/* Tear down: flush, set CLOSED in the peer's DMB (or ABORT if we leave unread
 * data), close y_peer. Does not close x and does not unmap. Returns true if it
 * aborted. */
bool smc_ring_close(struct smc_ring_ep *ep);
/* The same; @reset: ABORT even with nothing unread (SO_LINGER on with a zero
 * timeout: TCP's close then sends RST, RFC 793 "ABORT" call; Linux tcp_close()). */
bool smc_ring_close_reset(struct smc_ring_ep *ep, bool reset);
/* After smc_ring_close_reset() for a disconnect (connect(2) with AF_UNSPEC) of a
 * connection no other process holds: wake this process's receives sleeping on X
 * (X's receive side shut, as by the owner's shutdown(SHUT_RD)), and have the calls
 * of other threads that find the endpoint closed fail with @err (a positive errno;
 * TCP's: EPIPE) instead of EBADF. Call before X is closed. */
void smc_ring_wake_closed(struct smc_ring_ep *ep, int err);
/* The server's accept() took this connection: SMC_DMB_READER_ACCEPTED in our rx DMB
 * header (dmb.h), without which smcd resets it when its last copy goes. Once, before
 * the application sees the descriptor. */
void smc_ring_mark_accepted(struct smc_ring_ep *ep);

/* Record in the shared DMB whether the socket's close resets (SO_LINGER {1, 0}), for
 * whichever process closes it last (SMC_DMB_READER_LINGER_RESET). */
void smc_ring_set_linger_reset(struct smc_ring_ep *ep, bool reset);
/* Record the socket's SO_RCVLOWAT in bytes (as the kernel stores it: a negative
 * value is INT_MAX, 0 is 1) in the shared DMB header, for every process that holds
 * the socket; smc_ring_recv() honours it. */
void smc_ring_set_rcvlowat(struct smc_ring_ep *ep, int val);
/* Whether any process that holds the socket set SO_LINGER {1, 0} (the flag above). */
bool smc_ring_linger_reset(const struct smc_ring_ep *ep);

/* Let go of @ep in this process only, as close(2) of one copy of a socket that another
 * process still holds (after fork): publish what a corked send left, close our copy
 * of y_peer, set no flag, tell the peer nothing. Whoever holds the last copy of X ends
 * the connection; if nobody does, smcd sees X gone and closes it as TCP would (FIN,
 * or RST with data unread). The caller still unmaps and closes X. */
void smc_ring_detach(struct smc_ring_ep *ep);

/* Make @dst a second endpoint of @src's connection for @x, a duplicate (dup(2)) of
 * src's x: publishes what a corked send of @src held, then copies its state, with
 * its own locks and its own copy of y_peer (close-on-exec). Either may then be used,
 * one at a time, and let go of with smc_ring_detach(). Returns 0, -ENOTCONN (@src is
 * closed) or -errno (no descriptor). */
int smc_ring_copy(struct smc_ring_ep *dst, struct smc_ring_ep *src, int x);

/* The true readiness of the endpoint (POLLIN, POLLOUT, POLLHUP, POLLRDHUP, POLLERR)
 * from the rings and flags, settling a stale doorbell first. */
short smc_ring_poll(struct smc_ring_ep *ep);

/* Busy-polling in poll()/select() (socket.c): whether the endpoint is worth spinning
 * on for @events (POLLIN and/or POLLOUT): busy_poll_ns > 0 and the peer did not last run
 * on our CPU (it could not run while we spin). Returns the endpoint's budget in ns, 0 for
 * "do not spin". */
uint32_t smc_ring_spin_budget(struct smc_ring_ep *ep, short events);

/* Before a wait that sleeps on X's kernel readiness for POLLOUT (poll, select,
 * ppoll, epoll_wait; socket.c): a send that was whole may have left less than half of
 * the peer's ring free without plugging X, which then polls writable (a plug costs
 * system calls on both sides, and a program that does not wait for POLLOUT next, such
 * as a client that sends a request and waits for the reply, needs none: redis SET of
 * 100 kB values, 50 clients: 0.54x -> 1.58x TCP). Plugs X now, unless another thread
 * of this process holds the send lock (it plugs or owes again when it ends) or, on a
 * shared connection, another process the DMB's wr_lock (never waited for): then
 * returns false and X may still poll writable; @spin: first wait up to busy_poll_ns
 * for a reader on another CPU to free the room. An adopted connection starts owing
 * (smc_ring_init()). Returns true when X's readiness is to be trusted (nothing owed,
 * or settled now: plugged, or room enough that no plug was needed). */
bool smc_ring_plug_owed(struct smc_ring_ep *ep, bool spin);

/* A cheap readiness check for such a spin: no system call, no lock, no settling. True
 * when smc_ring_poll() would report one of @events (or an error/hang-up) now. */
bool smc_ring_ready_quick(struct smc_ring_ep *ep, short events);

/* Publish the reader's busy-poll state while poll()/select() spins on this endpoint's
 * ring (dmb.h "spinning"): @on true before the spin (a writer hands data over without a
 * doorbell byte), false after it, with @sleeping telling whether the caller goes on to
 * sleep in the kernel (the writer must ring from then on) or returns ready (IDLE). */
void smc_ring_spin_state(struct smc_ring_ep *ep, bool on, bool sleeping);

/* The epoll watch (socket.c): @on true marks the reader as watched (dmb.h
 * SMC_DMB_SPIN_WATCHED: its writer publishes without a doorbell byte, because the
 * owner's epoll_wait() looks at the ring itself before it sleeps); false ends it
 * (SLEEPING, seq_cst: writers ring from then on) if it was on, and leaves any other
 * state alone. The caller of "false" must look at the ring afterwards before it relies
 * on X's kernel readiness: data published while watched has no byte in X.
 * smc_ring_poll(), a receive that may block and smc_ring_set_shared() end it
 * themselves. */
void smc_ring_watch(struct smc_ring_ep *ep, bool on);

/* A wait of this process that relies on X's kernel readiness begins (@enter true,
 * before it looks at the ring: it ends the watch) or ends. While one is in progress no
 * watch is made (smc_ring_watch() checks after its store, the Dekker pair with the
 * count here). smc_ring_recv() calls it itself when it may block. */
void smc_ring_kwait(struct smc_ring_ep *ep, bool enter);

/* As smc_ring_kwait(enter) for a wait the library cannot bracket (select, ppoll: the
 * kernel's call is made elsewhere): no watch ever again for this endpoint. */
void smc_ring_no_watch(struct smc_ring_ep *ep);

/* An edge-triggered registration was just told of the data in the ring (socket.c, the
 * epoll watch): take a set bell as a receive would (its byte is owed, X stays
 * readable), so that the writer's next publish rings X again, a new edge, as TCP gives
 * for every arrival, also when the program reads nothing in between. Skipped while
 * another thread receives (it settles itself). */
void smc_ring_take_bell(struct smc_ring_ep *ep);

/* Whether X holds (or is about to hold) a doorbell byte of this endpoint: the bell is
 * set or bytes are owed; then a level-triggered epoll registration of X is reported
 * by the kernel anyway. A hint (no lock): for fairness only. */
bool smc_ring_x_rung(struct smc_ring_ep *ep);

/* Whether the reader state in the DMB header is SMC_DMB_SPIN_WATCHED (a receive's
 * busy-poll states replace it: the epoll watch marks it again). */
bool smc_ring_is_watched(struct smc_ring_ep *ep);

/* Bytes ready to read (TCP_INFO, smcss). */
uint32_t smc_ring_readable(struct smc_ring_ep *ep);

/* The producer cursor of the endpoint's rx ring (dmb.h, seq_cst load): it changes with
 * every publish of the peer, so two equal values mean no data came in between (the
 * epoll watch's edge-triggered registrations, socket.c). */
uint64_t smc_ring_rx_prod(struct smc_ring_ep *ep);

/* Bytes ready to read, for the program's FIONREAD: as smc_ring_readable(), and data
 * published after the call rings the reader again (a SET bell is taken, its byte kept
 * in X while the ring is not empty), as TCP wakes an edge-triggered epoll for every
 * arrival. nginx counts FIONREAD down and waits for a new EPOLLIN edge once it read
 * that many bytes: without this, its proxy connections stalled (the bell stayed set
 * while the writer kept the ring non-empty, so no byte, no edge). */
uint32_t smc_ring_fionread(struct smc_ring_ep *ep);

/* Bytes a send could put into the peer's ring now without waiting (its free space;
 * another process sharing the connection may take some meanwhile). */
uint32_t smc_ring_send_room(struct smc_ring_ep *ep);

/* The pending error, as SO_ERROR reports it (ECONNRESET once after an abort), or 0. */
int smc_ring_error(struct smc_ring_ep *ep);

/* Whether smc_ring_error() would report an error now (without taking it): TCP's
 * sk_err, which tcp_poll() reports as EPOLLERR until a call returns it. */
bool smc_ring_error_pending(struct smc_ring_ep *ep);

/* Whether a TCP socket in this connection's place would be in state CLOSE (tcp(7)):
 * the peer aborted (RST), or the peer closed and we sent after it (the send TCP takes,
 * answered by RST), or both directions were shut in order (FINs both ways). TCP then
 * answers getpeername(2) and shutdown(2) with ENOTCONN, and TCP_INFO says CLOSE. */
bool smc_ring_tcp_closed(struct smc_ring_ep *ep);

/* The wakeup TCP's shutdown(2) gives the socket's waiters even when it fails with
 * ENOTCONN (inet_shutdown(): sk_state_change): for a connection whose
 * smc_ring_tcp_closed() is true, X's write side shut again (X hung up already: no
 * readiness changes, its waiters wake, an edge for edge-triggered epoll). */
void smc_ring_shutdown_wake(struct smc_ring_ep *ep);

/* Whether this socket's write side is shut (shutdown(SHUT_WR), a close), through any
 * of its copies (dup, fork, exec: the flag in the peer's DMB header). */
bool smc_ring_wr_shut(struct smc_ring_ep *ep);
