/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Internal interface of socket.c for the smcrun preload (preload.c). */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>

/* True if @fd is a socket made by smc_socket() or smc_accept*() of AF_INET/AF_INET6
 * SOCK_STREAM, in any mode (not connected yet, listener, SMC-D, TCP fallback).
 * Lock-free; callable from any thread and from signal handlers. */
bool smc_fd_managed(int fd);

/* Forget the state of @fd without closing anything (the descriptor number was
 * closed or replaced behind the library's back, e.g. by dup2() onto it or a close
 * done by other means). Frees the state; an SMC-D connection is closed as by
 * smc_close() except that @fd itself is not closed. No-op if not managed. */
void smc_fd_forget(int fd);

/* @newfd was just made a duplicate of @oldfd (dup, dup2, dup3, F_DUPFD[_CLOEXEC]): if
 * @oldfd is an SMC connection or SMC listener, make @newfd one too, sharing it as a
 * forked copy would (either may be used, one at a time; the connection ends when the
 * last copy of the descriptor is closed). Otherwise (or if out of memory or
 * descriptors: logged with SMC_DEBUG) @newfd stays the bare descriptor. In a vfork()
 * child (the parent's memory) the copy is only noted for the child's exec. */
void smc_fd_dup(int oldfd, int newfd);
/* Whether a vfork() child of this thread noted @fd (a copy it made of an SMC
 * connection, or a number it closed or replaced): dup2()/dup3() onto it must tell
 * smc_fd_forget(). Cheap: false at once while no vfork() child noted anything. */
bool smc_fd_vfork_noted(int fd);

/* epoll_ctl(@epfd, @op, @fd, @ev) for the library's sockets that need it. An SMC
 * listener @fd: EPOLLEXCLUSIVE (ADD) puts its hidden TCP socket and accept channel
 * into @epfd directly, as the kernel refuses the flag for the epoll instance the app's
 * fd is; a later ADD (-EEXIST), DEL or MOD (-EINVAL) of @fd in that set acts on them
 * as the kernel would on a TCP listener. A socket not connected yet: the call is made
 * and recorded (up to 4 sets), so that connect() can move the registration onto the
 * connection's descriptor. *@handled: whether it did the call (then the result, 0 or
 * -errno, is the call's); if not (another descriptor, or a call on the listener's fd
 * itself) the caller makes the call with @ev, which may have lost EPOLLEXCLUSIVE when
 * more live sets than recorded (8) ask for it. Takes the socket's lock. */
int smc_sock_epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev, bool *handled);

/* close_range(2) for the shim (also closefrom() and syscall(SYS_close_range)): the
 * program's sockets in [@first, @last] are closed as by smc_close() (with
 * CLOSE_RANGE_CLOEXEC only the kernel's flag is set on them), and every other
 * descriptor in the range by the kernel, except the library's own (the hidden TCP
 * sockets, accept channels and doorbell ends of the sockets left, and the control
 * connection), which the connections outside the range still need. Bad @first/@last
 * or @flags, CLOSE_RANGE_UNSHARE (a descriptor table of the thread's own, which the
 * library shared by all threads cannot follow) go to the kernel as they are; in a
 * vfork() child (whose library state is the parent's memory) the kernel closes all
 * but the TCP sockets and accept channels of SMC listeners, which an exec hands on.
 * Returns 0, or -1 with errno (ENOMEM, or the kernel's). */
#define CLOSE_RANGE_CLOEXEC_FLAG (1u << 2) /* linux/close_range.h CLOSE_RANGE_CLOEXEC */
int smc_fd_close_range(unsigned first, unsigned last, unsigned flags);

/* @fd is the TCP socket or the accept channel of one of this process's SMC listeners,
 * which smc_close() leaves open (a program's close of every descriptor before an exec,
 * CPython's subprocess with pass_fds: the exec hands the listener on with them). One
 * load for numbers that never were one. */
bool smc_fd_listener_internal(int fd);

/* Is @fd an SMC connection (SMC-D or SMC-R: its descriptor is the socketpair end X, whose
 * own bytes are doorbells, not the stream; smcproto.h)? C stdio must not touch it
 * directly (preload.c, "C stdio"). */
bool smc_fd_is_smc_conn(int fd);

/* The descriptor whose file fstat(2) and the like should describe for @fd: an SMC
 * listener's TCP socket (the program's number holds the library's epoll descriptor,
 * which is no socket to fstat: node's handle check, systemd's sd_is_socket), else @fd
 * itself. */
int smc_fd_stat_target(int fd);

/* Bytes a send on the SMC connection @fd could take now without waiting (the free
 * space of the peer's ring), 0 if none or if @fd is not one. Lock-free. */
size_t smc_fd_send_room(int fd);

/* Wait until the SMC connection @fd polls POLLOUT, as a blocking send waits for room
 * (splice(2) into it before it takes anything from the pipe): up to the socket's
 * SO_SNDTIMEO, then -EAGAIN; a signal handler ends it with -EINTR, unless no timeout
 * is set and every handler has SA_RESTART (the kernel restarts the call then:
 * sock_intr_errno()). 0: writable, or @fd is no SMC connection (any more). */
int smc_fd_wait_send(int fd);

/* Whether a system call interrupted now would be restarted: every signal with a
 * handler, not blocked, has SA_RESTART (false in a seccomp sandbox: EINTR). */
bool smc_restart_after_signal(void);

/* From now on, every connect and listen of this process is plain TCP with fallback
 * @reason (an SMC_CLC_DECL_* or SMCD_DECL_* code; 0 undoes it): as with no smcd, but
 * smcd is told of each fallback connection with @reason (smcctl connections / stats).
 * Connections and listeners that exist stay as they are. smcrun uses it when the
 * program has an io_uring (preload.c). Thread-safe. */
void smc_set_tcp_only(uint32_t reason);

/* ---- exec (smcrun(1), "exec") ----
 *
 * An SMC-D socket whose descriptor X survives execve() (not close-on-exec, as a TCP
 * socket would) is described to the new image in the environment variable
 * SMCRUN_INHERIT: entries separated by ',', each of ten fields separated by ':'
 *
 *   X:T:CONN_ID:RX_ID:RX_SIZE:TX_ID:TX_SIZE:FLAGS:OWED:UNPUB
 *
 * X, T: descriptors (decimal; T, the connecting side's hidden TCP socket, may be -1;
 * the doorbell end Y comes from smcd with the buffers, not from the old image, whose
 * copy a program that closes all its descriptors before exec would lose); CONN_ID, RX_ID, TX_ID: 1..16 hex digits, not 0; RX_SIZE, TX_SIZE: ring bytes
 * (decimal, a power of two, 16 KiB .. 1 MiB); FLAGS: hex, SMC_INHERIT_F_*; OWED:
 * doorbell bytes the old image still had to read from X (decimal, <=
 * SMC_INHERIT_OWED_MAX); UNPUB: bytes the old image had copied into the peer's ring
 * but not published (TCP_CORK / MSG_MORE), which the new image publishes (decimal, <=
 * TX_SIZE). The new image's libsmcrun.so (its constructor) asks smcd for
 * the buffers (ADOPT, ctl-proto.h) and rebuilds the socket; if that fails X becomes a
 * reset TCP connection (ECONNRESET, then EOF), never a bare socketpair end.
 * An SMC listener's entry is "L:FD:FLAGS:CHAN:ID" (struct smc_inherit_listener): FD
 * is its listening TCP socket, which the old image put in place of its epoll fd;
 * CHAN its accept channel (decimal, != FD) and ID its smcd listener id (1..16 hex
 * digits, not 0). The new image accepts from that same channel, as one more holder of
 * the listener (as a forked process does: the queue is shared, as TCP's is with the
 * socket), without registering anything with smcd. "L:FD:FLAGS" (no channel: the old
 * image had none, or an older library wrote it) has the new image register FD with
 * smcd again. */

#define SMC_INHERIT_ENV "SMCRUN_INHERIT"
#define SMC_INHERIT_F_INET6 0x01u    /* the socket is AF_INET6 (else AF_INET) */
#define SMC_INHERIT_F_CORK 0x02u     /* TCP_CORK on */
#define SMC_INHERIT_F_NODELAY 0x04u  /* TCP_NODELAY on */
#define SMC_INHERIT_F_SHARED 0x08u   /* another process may hold X too (fork, vfork,
                                      * posix_spawn): close() only detaches */
#define SMC_INHERIT_F_RCVTIMEO 0x10u /* SO_RCVTIMEO set (it is on X itself) */
#define SMC_INHERIT_F_MASK 0x1fu
#define SMC_INHERIT_OWED_MAX 65536u
#define SMC_INHERIT_MAX_ENTRIES 4096u

#define SMC_INHERIT_LF_INET6 SMC_INHERIT_F_INET6 /* a listener entry's FLAGS: AF_INET6 */
#define SMC_INHERIT_LF_SMCR 0x02u                 /* smcd takes SMC-R on it (SMCR per accept) */
#define SMC_INHERIT_LF_NONBLOCK 0x04u             /* the program's O_NONBLOCK on it (entries
                                                   * with CHAN:ID; older ones: the file's) */
#define SMC_INHERIT_LF_MASK 0x07u

struct smc_inherit_listener {
        int fd;               /* the listening TCP socket */
        int chan;             /* its accept channel, or -1 */
        int dchan;            /* a copy of smcd's end of it (with chan; ctl version 6),
                               * or -1 */
        uint64_t listener_id; /* smcd's id (with chan), else 0 */
        uint32_t flags;       /* SMC_INHERIT_LF_* */
};

/* Parse one listener entry, "L:FD:FLAGS", "L:FD:FLAGS:CHAN:ID" or
 * "L:FD:FLAGS:CHAN:ID:DCHAN" (@len bytes at @s) strictly. Returns 0, or -EINVAL (not a
 * listener entry, wrong field count, a field out of range, two equal descriptor
 * numbers, ID 0); @l is then undefined. */
int smc_inherit_parse_listener(const char *s, size_t len, struct smc_inherit_listener *l);

/* Format @l as an entry into @buf (@size bytes): with CHAN and ID when l->chan >= 0,
 * and DCHAN when l->dchan >= 0 too. Returns the length, or -ENOBUFS. */
int smc_inherit_format_listener(const struct smc_inherit_listener *l, char *buf, size_t size);

struct smc_inherit_entry {
        int x, t;
        uint64_t conn_id, rx_id, tx_id;
        uint32_t rx_size, tx_size, flags, owed, unpub;
};

/* Parse one entry (@len bytes at @s, no separator) strictly. Returns 0, or -EINVAL
 * (wrong field count, a field that is not a plain number of its base, out of range,
 * T == X, equal buffer ids); @e is then undefined. */
int smc_inherit_parse_entry(const char *s, size_t len, struct smc_inherit_entry *e);

/* Format @e as an entry into @buf (@size bytes). Returns the length, or -ENOBUFS. */
int smc_inherit_format_entry(const struct smc_inherit_entry *e, char *buf, size_t size);

struct smc_exec_undo;

/* What posix_spawn's file actions do to descriptors in the new process (preload.c
 * records them; POSIX, posix_spawn_file_actions_adddup2(3)): for each child
 * descriptor they touched, the parent's descriptor it is a copy of (dup2; -1: closed,
 * opened over, or a copy of nothing the parent has), and the lowest number a closefrom
 * action closed (INT_MAX: none). The child's copies are not close-on-exec. */
struct smc_child_fd {
        int fd, src;
};
struct smc_spawn_fds {
        const struct smc_child_fd *fds;
        size_t n;
        int closed_from;
        /* filled in by smc_exec_prepare(): the child's numbers (with their families)
         * where an SMC connection would arrive that the new program cannot take over
         * (it does not load the library, or SMC-R): the caller puts a reset TCP socket
         * there with a file action of its own, as an exec's stub (up to max_stub) */
        int *stub_fds, *stub_families;
        size_t n_stub, max_stub;
        /* set by the caller: it can add file actions of its own (the program's are
         * recorded whole, or there are none); then each SMC listener the child inherits
         * is filled in here: the caller dup2()s listen_srcs[i] (its TCP socket, or
         * its accept channel onto its own number) onto listen_fds[i] in the child,
         * after the program's actions (up to max_listen) */
        bool can_add;
        int *listen_fds, *listen_srcs;
        size_t n_listen, max_listen;
};

/* Did @child's file actions close, replace or copy over @fd in the child (its number
 * there is not this process's descriptor)? False for @child NULL. */
bool smc_spawn_touched(const struct smc_spawn_fds *child, int fd);

/* A TCP socket of @family whose connection was reset by its peer (ECONNRESET once,
 * then end of file; send EPIPE), close-on-exec, blocking. Returns it or -errno. */
int smc_reset_socket(int family);

/* Before an exec: publish what corked sends left on every SMC-D socket; for each
 * whose X is not close-on-exec: if @preloaded (the new environment loads
 * libsmcrun.so), clear close-on-exec on its T and describe it in
 * SMCRUN_INHERIT; else, or for SMC-R, and if @may_stub, put a reset TCP socket in
 * X's place (the new image could only read doorbell bytes from X), keeping X in a
 * hidden close-on-exec copy. @spawn: the caller keeps running (posix_spawn), so the
 * sockets are marked as shared by the new process; @child (NULL: none): its file
 * actions, whose copies of SMC-D connections are described under the child's numbers
 * and whose closed or replaced numbers are left out. Returns the environment to exec
 * with: @envp itself when there is nothing to add, else a copy without any inherited
 * SMCRUN_INHERIT and with the new one (owned by *@ret_undo). Never fails: on ENOMEM
 * the sockets are left as they are and @envp is returned. */
char **smc_exec_prepare(char *const envp[], bool preloaded, bool may_stub, bool spawn,
                        struct smc_spawn_fds *child, struct smc_exec_undo **ret_undo);

/* After the exec or spawn: @failed: the exec did not happen, restore close-on-exec on
 * T and X in place of its stub; else (a spawn that started the new process)
 * mark the sockets shared. Frees @u (NULL: nothing). errno is kept. */
void smc_exec_finish(struct smc_exec_undo *u, bool failed);

/* In a new image (libsmcrun.so's constructor): adopt the sockets SMCRUN_INHERIT
 * describes and remove the variable from the environment. Bad entries are ignored
 * (SMC_DEBUG says why); waits for smcd at most SMC_ADOPT_TIMEOUT_MS per socket. */
#define SMC_ADOPT_TIMEOUT_MS 1000u
void smc_exec_adopt_inherited(void);

/* SMC sockets passed between processes over a unix socket (SCM_RIGHTS; smcrun(1),
 * "Passing connections"). smc_fds_passing(): before @msg is sent on a descriptor
 * that is not an SMC socket: each SMC-D connection among its SCM_RIGHTS descriptors
 * is shared from now on (as after fork()), its held bytes published; each SMC
 * listener must go as its TCP socket: returns @msg, or @copy with the control data
 * copied into @cbuf (@cbuf_len bytes; NULL, or too small: the listener goes as it
 * is) and the listeners replaced; send what it returns.
 * smc_fds_sent(): after the sendmsg(2) of what smc_fds_passing() returned for @msg
 * (@sent: it did not fail): a listener's deposit with smcd is taken back when the
 * message did not go (LISTEN_DEPOSIT, SMC_CTL_DEPOSIT_WITHDRAW), as no receiver will
 * claim it.
 * smc_fds_received(): after @msg was received: each SCM_RIGHTS descriptor that is
 * the socket pair end of an SMC-D connection becomes that SMC socket in this process
 * (asking smcd, ADOPT_FD), or a reset TCP socket if smcd does not give it; a TCP
 * listener becomes an SMC listener (blocking for the program); other descriptors
 * are left as they are. Both leave errno alone. */
union smc_scm_buf {
        struct cmsghdr align;
        char buf[4096]; /* bytes of control data a copy can hold (SCM_MAX_FD fds fit) */
};
const struct msghdr *smc_fds_passing(const struct msghdr *msg, struct msghdr *copy, void *cbuf, size_t cbuf_len);
void smc_fds_sent(const struct msghdr *msg, bool sent);
/* sendto(2)'s checks of its address on a connected stream socket, which ignores it
 * but copies it in first: 0, -EINVAL (too long) or -EFAULT (in the first page). */
int smc_sendto_addr_check(const struct sockaddr *to, socklen_t tolen);
/* Both around one @send_fn(@fd, ...) (sendmsg(2) or the next definition of it): the
 * control data is copied to the stack, or to the heap when it is larger. Returns
 * what @send_fn did, errno its. */
ssize_t smc_sendmsg_passing(int fd, const struct msghdr *msg, int flags,
                            ssize_t (*send_fn)(int fd, const struct msghdr *msg, int flags));
void smc_fds_received(const struct msghdr *msg);

/* select()/pselect() with an SMC-D connection in its sets (preload.c): look at every
 * descriptor once (poll, no wait) and, if none is ready, busy-poll the SMC-D rings for
 * up to their busy_poll_ns, signals blocked, then wait in the kernel (pselect6) for the
 * rest of the time with @mask (NULL: the thread's own) as pselect does: a signal that
 * came during the spin interrupts it (EINTR). @ts: the timeout (NULL: none), updated
 * to the time not slept as Linux's select does. Returns what select returns (the sets
 * rewritten as the kernel writes them: only the words below @nfds), or
 * SMC_SELECT_UNHANDLED with nothing changed and nothing done: no SMC-D connection to
 * spin on (a zero timeout spins on none) and no ring with data X may not show (epoll
 * watch), an invalid timeout, @nfds above FD_SETSIZE: the caller makes the real call. */
#define SMC_SELECT_UNHANDLED (-2)
int smc_select(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, struct timespec *ts, const sigset_t *mask);

/* Every descriptor of the library's sockets: the program's number of each, the
 * library's own (hidden TCP socket, option socket, accept channel, the peer's doorbell
 * end) and the control connection's. *@ret is a malloc'd array (the caller frees it).
 * Returns how many, or -ENOMEM. For the seccomp prefix (seccomp.h). */
int smc_lib_fds(int **ret);

/* The program installed a seccomp filter (preload.c): from now on the library makes
 * only the system calls the prefix of seccomp.h allows on its descriptors, besides the
 * program's own: no busy-poll spin in poll(2) and select(2) (it blocks signals and
 * reads the pending ones), and an interrupted blocking send or accept returns EINTR
 * without asking sigaction(2) whether to restart. */
void smc_set_sandboxed(void);

/* The library's fork handlers (pthread_atfork(3)) for a copy of the process made past
 * the C library: clone(2) or clone3(2) without CLONE_VM through syscall(2), or glibc's
 * clone() without it (vsftpd makes its session processes so). @phase: SMC_FORK_PREPARE
 * before the call, then SMC_FORK_PARENT in the caller and SMC_FORK_CHILD in the copy
 * (ctl-client.h). Without them the copy took the parent's socket table for a vfork()
 * child's, which shares the parent's memory, and left it stale. */
void smc_fork_emulate(int phase);

/* The epoll watch (socket.c "epoll watch"). smc_ewatch_ctl(): record the program's
 * epoll_ctl(@epfd, @op, @fd, @ev) after the kernel took it (no errors). */
void smc_ewatch_ctl(int epfd, int op, int fd, const struct epoll_event *ev);

/* epoll_wait / epoll_pwait (@timeout_ms, @ts NULL) and epoll_pwait2 (@ts): the kernel's
 * answer through @kwait (which takes both forms, with @mask as the kernel's sigmask)
 * plus the rings of the set's watched connections. Returns the number of events or -1
 * with errno, as the kernel's call. */
int smc_ewatch_wait(int epfd, struct epoll_event *evs, int max, int timeout_ms, const struct timespec *ts,
                    const sigset_t *mask,
                    int (*kwait)(int, struct epoll_event *, int, int, const struct timespec *, const sigset_t *));

/* What happened to descriptor @fd, for the epoll sets recorded under numbers:
 * CREATED (epoll_create made it: a set that may watch), CLOSED, ELSEWHERE (it is
 * waited on by other means: SCM_RIGHTS). (A dup: smc_ewatch_fd_dup.) */
enum { SMC_EWATCH_CREATED, SMC_EWATCH_CLOSED, SMC_EWATCH_ELSEWHERE };
void smc_ewatch_fd_event(int fd, int what);
bool smc_ewatch_is_set(int fd);
/* dup/dup2/dup3/F_DUPFD made @newfd a copy of @oldfd */
void smc_ewatch_fd_dup(int oldfd, int newfd);

/* fork(3) returned @pid in the parent (preload.c): the epoll watch learns when the
 * child is gone (socket.c "re-arming after a fork"). */
void smc_ewatch_child(pid_t pid);
/* fork(2) failed: undo what the atfork prepare handler counted for the child that
 * was not made (socket.c, listen_share). */
void smc_listen_fork_failed(void);
/* This process hands descriptors on (SCM_RIGHTS, exec, spawn, fork): if it is a forked
 * child, its parent never watches again what it shared with it. */
void smc_ewatch_handed_on(void);

/* The connection hints (hints.c, smc-hints.h). */
struct smc_ctl_addr;
/* True while smcd's hints say that connections to @dst (an address as the program
 * connects to it) are to be TCP (SMCD_DECL_SHORTCONN). No system call but a read of
 * the hints file at most every 10 ms (hints.c); false without the file. */
bool smc_hint_tcp(const struct smc_ctl_addr *dst);
/* How long after a hint expired a TCP connection accepted on its address (@local, the
 * listener's side) is still taken as one its client sent to TCP for it: a client that
 * looked just before the expiry connects, and its server accepts, later (ns). */
#define SMC_HINT_ACCEPT_GRACE_NS 250000000ull
/* smc_hint_tcp() for the server's end: also SMC_HINT_ACCEPT_GRACE_NS after the expiry. */
bool smc_hint_accepted(const struct smc_ctl_addr *local);
/* True if some hint, in force or not, may name port @port (any address, family; 0:
 * any port): the cheap first look before the address of an accepted connection is
 * asked for. */
bool smc_hint_port(uint16_t port);
/* Count one connection that fell back for a hint, @role an enum smc_ctl_role; the
 * counts go to smcd in a FALLBACK_COUNT at most every 100 ms. */
void smc_hint_count(uint32_t role);
/* Send the counts not yet told (before an exec; at exit by itself). */
void smc_hint_flush(void);
/* The program installed a seccomp filter: the hints file is not looked at again, and
 * counts go only over a control connection that exists. */
void smc_hint_sandboxed(void);

/* End every watch (fork, before the child exists; exec). */
void smc_ewatch_stop_all(void);

/* poll/ppoll: the rings of the SMC-D connections among @fds and of the connections in
 * epoll sets among them first (ending their epoll watch). Returns -2 when nothing is
 * ready there (the kernel's call answers), else the kernel's nonblocking answer with
 * the rings' readiness added (a count, or -1 with errno). @sticky (ppoll, whose
 * kernel call the caller makes): the connections waited for with POLLIN are never
 * watched again. @sets_only (poll, whose smc_poll looks at the connections itself):
 * only the epoll sets among @fds are looked at before the kernel's answer. */
int smc_poll_rings_first(struct pollfd *fds, nfds_t n, bool sticky, bool sets_only);

/* ppoll(2) when one of @fds (@n) is a socket whose nonblocking connect is under way
 * (socket.c "nonblocking connect over CLC"): it is not ready until the connection
 * is, as poll() sees it (poll_connecting()); @ts: the timeout (NULL: none), @mask:
 * set around the wait (not atomically). Returns ppoll's result (-1 with errno), or
 * -2 when no such socket is among @fds (the kernel's ppoll answers). */
int smc_ppoll_connecting(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask);

/* Whether any epoll set is recorded (a relaxed load). */
bool smc_ewatch_any(void);
