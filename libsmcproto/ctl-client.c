/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The process-wide control connection to smcd: see ctl-client.h. */

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "ctl-client.h"
#include "ctl-proto.h"
#include "debug.h"
#include "sys.h"

static pthread_mutex_t ctl_lock = PTHREAD_MUTEX_INITIALIZER;
/* All below under ctl_lock. */
static int ctl_fd = -1;
static unsigned ctl_gen;  /* fork generation that opened ctl_fd */
static unsigned fork_gen; /* bumped in every child (pthread_atfork): a getpid()
                           * per request would cost a syscall */
static uint32_t ctl_seq;  /* last seq used */
static uint16_t ctl_version; /* negotiated by HELLO; 0 while not connected */
static uint32_t ctl_instance; /* HELLO_REPLY.instance; 0 while not connected */
static pid_t ctl_daemon_pid;  /* SO_PEERCRED of the control socket (0: smcd is outside our pid
                               * namespace; -1: unreadable) */
static uid_t ctl_daemon_uid;  /* ... and its uid */
static bool ctl_forked;       /* we are a child of a process that had a control
                               * connection (closed at the fork): notices connect */

/* Concurrent requests (an SMCR handshake takes network round trips, and other threads
 * must not wait for it): the lock is held to send, not to wait. Every thread waiting
 * for a reply is on ctl_waiters (registered under the lock it sent with, so before
 * its reply can be read). One waiter at a time reads the socket (ctl_reading) with
 * the lock dropped, and hands each message to the waiter of its seq, straight into
 * that waiter's buffers; a message nobody waits for (the ERROR answer to a
 * fire-and-forget CLOSE, a reply that came after its waiter timed out) is discarded
 * with its fds. ctl_cond wakes the waiters after every read, and when a HELLO ends.
 * No table to fill up: any number of threads may wait, none loses its reply. */
struct waiter {
        uint32_t seq;
        bool done;                 /* the reply is in *reply, n fds in fds[] */
        int n;
        union smc_ctl_msg *reply;
        int *fds;
        struct waiter *next;
};
static pthread_cond_t ctl_cond = PTHREAD_COND_INITIALIZER;
static struct waiter *ctl_waiters;
static bool ctl_reading;     /* a thread is in recvmsg on ctl_fd without the lock */
static int ctl_zombie = -1;  /* ctl_fd dropped while being read: the reader closes it */
static unsigned ctl_conn_gen; /* bumped by every drop: a reply read from an older
                               * connection belongs to nobody */
/* smcd did not accept a connection or answer its HELLO or a request in time (stopped,
 * hung): until ctl_hold_off_until (now_ms()) no connect is tried and every request
 * fails at once with -ENOTCONN (a connect() falls back to TCP) instead of waiting out
 * the timeout again.
 * The hold-off doubles with each such HELLO, from 1 s up to SMC_CTL_HOLD_OFF_MAX_MS,
 * and ends with the first HELLO answered. A refused connect (smcd not running) costs
 * microseconds and sets none. */
#define SMC_CTL_HOLD_OFF_MAX_MS 16000u
#define SMC_CTL_HOLD_OFF_REQUEST_MS 10000u /* requests waiting up to this long (CONNECT)
                                            * hold off too when not answered */
static uint64_t ctl_hold_off_until;
static unsigned ctl_hold_off_ms;

static uint64_t now_ms(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000u + (uint64_t) ts.tv_nsec / 1000000u;
}

static void close_fds(int *fds, int n) {
        for (int i = 0; i < n; i++)
                sys_close(fds[i]);
}

static void drop_locked(void) {
        if (ctl_fd >= 0) {
                if (ctl_reading) {
                        /* another thread is in recvmsg on it: wake it, let it close the
                         * descriptor (its number must not be reused under it) */
                        (void) sys_shutdown(ctl_fd, SHUT_RDWR);
                        ctl_zombie = ctl_fd;
                } else
                        sys_close(ctl_fd);
        }
        ctl_fd = -1;
        ctl_version = 0;
        ctl_instance = 0;
        ctl_daemon_pid = 0;
        ctl_conn_gen++; /* the waiters not served yet give up (-ENOTCONN) */
        pthread_cond_broadcast(&ctl_cond);
}

/* Sleep on ctl_cond (ctl_lock held) until woken or @deadline (CLOCK_MONOTONIC ms). */
static void cond_wait_until(uint64_t deadline) {
        struct timespec ts;
        uint64_t now = now_ms(), left = deadline > now ? deadline - now : 0;

        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += (time_t) (left / 1000);
        ts.tv_nsec += (long) (left % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
        }
        (void) pthread_cond_timedwait(&ctl_cond, &ctl_lock, &ts);
}

/* Hand the message @m with @n fds (read from the current connection) to the thread
 * waiting for its seq, or discard it. ctl_lock held. */
static void deliver_locked(const union smc_ctl_msg *m, int *fds, int n) {
        /* (smcd's refusal at accept, before any HELLO, has seq 0: the HELLO's answer) */
        bool refusal = ctl_version == 0 && m->hdr.seq == 0 && m->hdr.type == SMC_CTL_ERROR;

        for (struct waiter *w = ctl_waiters; w; w = w->next)
                if ((w->seq == m->hdr.seq || refusal) && !w->done) {
                        *w->reply = *m;
                        memcpy(w->fds, fds, sizeof(int) * (size_t) n);
                        w->n = n;
                        w->done = true;
                        return;
                }
        smc_debug("ctl: message type %u seq %u that nobody waits for: discarded", m->hdr.type, m->hdr.seq);
        close_fds(fds, n);
}

static uint32_t next_seq_locked(void) {
        if (++ctl_seq == 0)
                ctl_seq = 1;
        return ctl_seq;
}

/* After -ECONNRESET from @fd: what smcd queued before it closed, if anything. A unix
 * socket closed by its peer with our message unread reports ECONNRESET before the
 * messages queued for us (the kernel's sock_error() comes first), and EOF afterwards
 * also reads as -ECONNRESET (smc_ctl_recv()): smcd's refusal at accept (ERROR EUSERS,
 * before it read our HELLO) would be lost otherwise. Returns nfds, or -ECONNRESET. */
static int recv_after_reset(int fd, union smc_ctl_msg *m, int *fds) {
        for (int i = 0; i < 2; i++) {
                int r = smc_ctl_recv(fd, m, fds, SMC_CTL_TO_CLIENT, MSG_DONTWAIT);

                if (r != -ECONNRESET)
                        return r >= 0 ? r : -ECONNRESET;
        }
        return -ECONNRESET;
}

/* Wait for the message with @seq (ctl_lock held; dropped while waiting and reading).
 * Returns nfds (the reply in @reply, the fds in @fds, owned by the caller) or -errno:
 * -ETIMEDOUT after @timeout_ms, -ENOTCONN if the connection was dropped meanwhile
 * (the reader drops it on EOF or a message that does not decode). */
static int wait_reply_locked(uint32_t seq, union smc_ctl_msg *reply, int *fds, unsigned timeout_ms) {
        uint64_t deadline = now_ms() + timeout_ms;
        unsigned gen = ctl_conn_gen;
        struct waiter w = { .seq = seq, .reply = reply, .fds = fds, .next = ctl_waiters }, **pp;
        int r;

        ctl_waiters = &w;
        for (;;) {
                union smc_ctl_msg m;
                int mfds[SMC_CTL_MAX_FDS];
                bool hello;
                int fd;

                if (w.done) {
                        r = w.n;
                        break;
                }
                if (ctl_fd < 0 || gen != ctl_conn_gen) {
                        smc_debug("ctl: seq %u: the control connection was dropped meanwhile: ENOTCONN", seq);
                        r = -ENOTCONN; /* dropped: our reply is lost */
                        break;
                }
                if (now_ms() >= deadline) {
                        smc_debug("ctl: seq %u: no reply within %u ms: ETIMEDOUT", seq, timeout_ms);
                        r = -ETIMEDOUT;
                        break;
                }
                if (ctl_reading) {
                        cond_wait_until(deadline);
                        continue;
                }
                /* blocking, bounded by SO_RCVTIMEO (set at connect): one syscall.
                 * (Polling for the reply instead was measured slower: on 2 CPUs the
                 * spinning client takes the CPU smcd needs to answer.) */
                ctl_reading = true;
                fd = ctl_fd;
                hello = !ctl_version; /* (read under the lock) */
                pthread_mutex_unlock(&ctl_lock);
                if (timeout_ms < SMC_CTL_CLIENT_TIMEOUT_MS) {
                        /* a wait shorter than SO_RCVTIMEO (the idle path's): poll
                         * first, so that the deadline holds */
                        struct pollfd p = { .fd = fd, .events = POLLIN };
                        uint64_t now = now_ms();

                        r = sys_poll(&p, 1, now < deadline ? (int) (deadline - now) : 0) == 1
                                    ? smc_ctl_recv(fd, &m, mfds, SMC_CTL_TO_CLIENT, 0)
                                    : -EAGAIN;
                } else
                        r = smc_ctl_recv(fd, &m, mfds, SMC_CTL_TO_CLIENT, 0);
                if (r == -ECONNRESET && hello)
                        r = recv_after_reset(fd, &m, mfds); /* (refused at accept?) */
                pthread_mutex_lock(&ctl_lock);
                ctl_reading = false;
                pthread_cond_broadcast(&ctl_cond);
                if (ctl_zombie == fd) {
                        /* dropped while we read: ours to close (the loop then ends
                         * with -ENOTCONN) */
                        smc_debug("ctl: seq %u: the control connection was dropped while read", seq);
                        if (r > 0)
                                close_fds(mfds, r);
                        sys_close(fd);
                        ctl_zombie = -1;
                        continue;
                }
                if (r == -EAGAIN || r == -EINTR)
                        continue;
                /* (a reply's descriptors are the library's: an X is put on the app's
                 * number later) */
                if (r > 0 && !sys_fds_off_stdio(mfds, r)) {
                        close_fds(mfds, r);
                        r = -EMFILE; /* as if they had not fit (smc_ctl_recv()) */
                }
                if (r >= 0 && ctl_version && m.hdr.version != ctl_version) {
                        close_fds(mfds, r);
                        r = -EPROTONOSUPPORT; /* not the version we agreed on */
                }
                if (r < 0) {
                        /* EOF, or smcd sent something we cannot parse: the stream of
                         * replies can no longer be trusted. */
                        smc_debug("ctl: seq %u: reading a reply failed: %s: dropping the control connection", seq,
                                  strerror(-r));
                        drop_locked();
                        continue;
                }
                deliver_locked(&m, mfds, r);
        }
        for (pp = &ctl_waiters; *pp; pp = &(*pp)->next)
                if (*pp == &w) {
                        *pp = w.next;
                        break;
                }
        return r;
}

/* smcd's socket path. $SMCD_RUNTIME_DIR as it is at connect time; if it is not set
 * then, as it was when the library was loaded: a program may clear its environment
 * (nginx's workers keep only TZ) and must still reach the smcd it was started with.
 * Returns 0 or -ENAMETOOLONG. */
static char ctl_path_at_load[sizeof(((struct sockaddr_un *) 0)->sun_path)];

static int ctl_path_make(char *path, size_t size) {
        const char *dir = smc_ctl_runtime_dir();
        size_t dl = strlen(dir);

        if (dl + 1 + strlen(SMC_CTL_SOCKET_NAME) + 1 > size)
                return -ENAMETOOLONG;
        memcpy(path, dir, dl);
        path[dl] = '/';
        strcpy(path + dl + 1, SMC_CTL_SOCKET_NAME);
        return 0;
}

static int ctl_path(char *path, size_t size) {
        if (!secure_getenv(SMC_CTL_RUNDIR_ENV) && ctl_path_at_load[0]) {
                memcpy(path, ctl_path_at_load, size < sizeof(ctl_path_at_load) ? size : sizeof(ctl_path_at_load));
                path[size - 1] = 0;
                return 0;
        }
        return ctl_path_make(path, size);
}

/* @min_ms: at least as long as the wait that was not answered */
static void hold_off_locked(const char *what, unsigned min_ms) {
        ctl_hold_off_ms = ctl_hold_off_ms ? ctl_hold_off_ms * 2 : 1000;
        if (ctl_hold_off_ms < min_ms)
                ctl_hold_off_ms = min_ms;
        if (ctl_hold_off_ms > SMC_CTL_HOLD_OFF_MAX_MS)
                ctl_hold_off_ms = SMC_CTL_HOLD_OFF_MAX_MS;
        ctl_hold_off_until = now_ms() + ctl_hold_off_ms;
        smc_debug("ctl: smcd %s in time: no connect tried for %u ms", what, ctl_hold_off_ms);
}

/* Is the process that listens on control socket @fd (at @path) one we may take for
 * smcd: root, our own uid, or the owner of the socket's directory (a private smcd's
 * runtime directory; smcd refuses one that others can write)? Anyone else may have
 * put a socket of theirs there (a directory writable by others) and would see our
 * requests and hand us buffers of its own. */
static bool peer_trusted_locked(int fd, const char *path) {
        struct ucred cr;
        socklen_t cl = sizeof(cr);
        char dir[sizeof(((struct sockaddr_un *) 0)->sun_path)];
        const char *slash = strrchr(path, '/');
        struct stat st;

        if (sys_getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) < 0 || cl < sizeof(cr)) {
                smc_debug("ctl: %s: SO_PEERCRED failed: %m: not used", path);
                return false;
        }
        if (cr.uid == 0 || cr.uid == geteuid())
                return true;
        if (slash && (size_t) (slash - path) < sizeof(dir)) {
                memcpy(dir, path, (size_t) (slash - path));
                dir[slash - path] = 0;
                if (slash == path)
                        strcpy(dir, "/");
                if (stat(dir, &st) == 0 && st.st_uid == cr.uid)
                        return true;
        }
        smc_debug("ctl: %s is served by uid %u (pid %d), neither root, nor ours, nor its directory's owner: not used",
                  path, (unsigned) cr.uid, (int) cr.pid);
        return false;
}

/* Connect and exchange HELLO, waiting up to @timeout_ms for each of the connect (a
 * full backlog: smcd stopped) and the HELLO_REPLY. */
static int connect_locked(unsigned timeout_ms, bool hold) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        union smc_ctl_msg m, reply;
        struct timeval tv = { .tv_sec = SMC_CTL_CLIENT_TIMEOUT_MS / 1000,
                              .tv_usec = (SMC_CTL_CLIENT_TIMEOUT_MS % 1000) * 1000 };
        struct timeval ctv = { .tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000 };
        int fds[SMC_CTL_MAX_FDS];
        int r;

        if (hold && ctl_hold_off_until && now_ms() < ctl_hold_off_until)
                return -ENOTCONN; /* smcd did not answer lately */
        if (ctl_path(sa.sun_path, sizeof(sa.sun_path)) < 0)
                return -ENOTCONN;

        ctl_fd = sys_fd_off_stdio(sys_socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
        if (ctl_fd >= 0 && ctl_fd <= 2) {
                /* no number above 2 free: none of the program's 0..2 is taken for
                 * it (smcd is out of reach: TCP) */
                sys_close(ctl_fd);
                ctl_fd = -1;
        }
        if (ctl_fd < 0) {
                ctl_fd = -1;
                return -ENOTCONN;
        }
        ctl_gen = fork_gen;
        (void) sys_setsockopt(ctl_fd, SOL_SOCKET, SO_SNDTIMEO, &ctv, sizeof(ctv));
        if (sys_connect(ctl_fd, (struct sockaddr *) &sa, sizeof(sa)) < 0) {
                smc_debug("ctl: connecting to %s failed: %m", sa.sun_path);
                if (errno == EAGAIN)
                        hold_off_locked("did not accept", timeout_ms); /* its backlog is full */
                drop_locked();
                return -ENOTCONN;
        }
        if (!peer_trusted_locked(ctl_fd, sa.sun_path)) {
                drop_locked();
                return -ENOTCONN;
        }
        /* a stuck smcd must not hang us in send either */
        (void) sys_setsockopt(ctl_fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        (void) sys_setsockopt(ctl_fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));

        /* HELLO's layout is the same in every version: send it as the oldest, so that
         * any smcd understands it, offering every version we speak (ctl-proto.h) */
        (void) smc_ctl_init_v(&m, SMC_CTL_HELLO, next_seq_locked(), SMC_CTL_VERSION_MIN);
        m.hello.proto_min = SMC_CTL_VERSION_MIN;
        m.hello.proto_max = SMC_CTL_VERSION;
        r = smc_ctl_send(ctl_fd, &m, NULL, 0, 0);
        if (r < 0) {
                /* smcd closed it at once: its refusal may wait to be read */
                int n = recv_after_reset(ctl_fd, &reply, fds);
                bool users = n >= 0 && reply.hdr.type == SMC_CTL_ERROR && reply.error.error == -EUSERS;

                if (n > 0)
                        close_fds(fds, n);
                smc_debug("ctl: sending HELLO failed (%s)%s", strerror(-r),
                          users ? ": refused, too many control connections" : "");
                drop_locked();
                return users ? -EUSERS : -ENOTCONN;
        }
        r = wait_reply_locked(m.hdr.seq, &reply, fds, timeout_ms);
        if (r > 0)
                close_fds(fds, r);
        if (r == -ETIMEDOUT)
                hold_off_locked("did not answer HELLO", timeout_ms);
        if (r != 0 || reply.hdr.type != SMC_CTL_HELLO_REPLY || reply.hello_reply.version < SMC_CTL_VERSION_MIN ||
            reply.hello_reply.version > SMC_CTL_VERSION || reply.hello_reply.version != reply.hdr.version) {
                /* refused for the uid's (or smcd's) number of control connections:
                 * said as such, for the fallback reason (SMCD_DECL_MAXCLIENTS) */
                bool users = r == 0 && reply.hdr.type == SMC_CTL_ERROR && reply.error.error == -EUSERS;

                smc_debug("ctl: HELLO failed (%s, reply type %u): no control connection",
                          r < 0 ? strerror(-r) : users ? reply.error.msg : "ok", r < 0 ? 0 : reply.hdr.type);
                drop_locked();
                return users ? -EUSERS : -ENOTCONN;
        }
        ctl_version = (uint16_t) reply.hello_reply.version;
        ctl_forked = false;
        ctl_hold_off_until = 0;
        ctl_hold_off_ms = 0;
        ctl_instance = reply.hello_reply.instance;
        {
                struct ucred cr;
                socklen_t cl = sizeof(cr);

                /* (-1 if it cannot be read: then no descriptor is taken for smcd's) */
                if (sys_getsockopt(ctl_fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) < 0)
                        cr = (struct ucred) { .pid = -1, .uid = (uid_t) -1, .gid = (gid_t) -1 };
                ctl_daemon_pid = cr.pid;
                ctl_daemon_uid = cr.uid;
        }
        pthread_cond_broadcast(&ctl_cond); /* the threads waiting in ensure_locked() */
        return 0;
}

/* An established control connection (HELLO done), connecting if there is none,
 * waiting up to @timeout_ms for the HELLO (ours or another thread's).
 * ctl_lock held (dropped while waiting). Returns 0, -ENOTCONN, or -EUSERS (smcd
 * refused the control connection: too many of the uid's or in all). */
/* @probe: look for a hang-up of the control connection first (one poll(2)), for a
 * send that must not be lost on an smcd that is gone (CLOSE, notices). A request
 * that waits for its reply needs no probe: its send fails (EPIPE) on a connection
 * whose smcd is gone, and goes once more on a new one. */
static int ensure_locked(unsigned timeout_ms, bool hold, bool probe) {
        uint64_t deadline = 0;
        unsigned gen = 0;

        for (;;) {
                if (ctl_fd >= 0 && ctl_gen != fork_gen) {
                        /* forked: the inherited socket is the parent's; ours is new */
                        drop_locked();
                }
                if (ctl_fd < 0) {
                        if (deadline && gen != ctl_conn_gen) {
                                /* the HELLO we waited for failed: so would ours */
                                smc_debug("ctl: another thread's HELLO failed: ENOTCONN");
                                return -ENOTCONN;
                        }
                        return connect_locked(timeout_ms, hold);
                }
                if (ctl_version) {
                        /* smcd gone since our last request (it restarted): its end
                         * is closed, ours reads EOF. Find out now, not from the send
                         * (a fire-and-forget CLOSE would be lost, and REREG would go
                         * unsent): one poll(2) */
                        struct pollfd p = { .fd = ctl_fd, .events = POLLIN | POLLRDHUP };

                        if (probe && !ctl_reading && sys_poll(&p, 1, 0) == 1 &&
                            (p.revents & (POLLHUP | POLLERR | POLLRDHUP))) {
                                smc_debug("ctl: the control connection hung up (smcd gone): connecting again");
                                drop_locked();
                                continue;
                        }
                        return 0;
                }
                /* Another thread's HELLO is under way: connect_locked() waits for its
                 * reply with the lock dropped. No request may go out before it is
                 * answered (the version is not known yet, and smcd wants HELLO first):
                 * wait for its outcome. */
                if (!deadline) {
                        deadline = now_ms() + timeout_ms;
                        gen = ctl_conn_gen;
                } else if (now_ms() >= deadline) {
                        smc_debug("ctl: another thread's HELLO unanswered for %u ms: ENOTCONN", timeout_ms);
                        return -ENOTCONN;
                }
                cond_wait_until(deadline);
        }
}

int smc_ctl_client_call(union smc_ctl_msg *req, const int *fds, size_t nfds, union smc_ctl_msg *ret_reply,
                        int *ret_fds) {
        return smc_ctl_client_call_timeout(req, fds, nfds, ret_reply, ret_fds, SMC_CTL_CLIENT_TIMEOUT_MS);
}

int smc_ctl_client_call_timeout(union smc_ctl_msg *req, const int *fds, size_t nfds, union smc_ctl_msg *ret_reply,
                                int *ret_fds, unsigned timeout_ms) {
        return smc_ctl_client_call_instance(req, fds, nfds, ret_reply, ret_fds, timeout_ms, NULL);
}

int smc_ctl_client_call_instance(union smc_ctl_msg *req, const int *fds, size_t nfds, union smc_ctl_msg *ret_reply,
                                 int *ret_fds, unsigned timeout_ms, uint32_t *ret_instance) {
        bool hold;
        int r;

        if (ret_instance)
                *ret_instance = 0;
        if (!req || !ret_reply || !ret_fds || nfds > SMC_CTL_MAX_FDS)
                return -EINVAL;

        /* held off: only the requests that have a way on without smcd (CONNECT: TCP;
         * REREG: tried again later). LISTEN, ADOPT ... wait: a listener refused now
         * would stay TCP */
        hold = req->hdr.type == SMC_CTL_CONNECT || req->hdr.type == SMC_CTL_REREG;
        pthread_mutex_lock(&ctl_lock);
        if (hold && timeout_ms <= SMC_CTL_HOLD_OFF_REQUEST_MS && ctl_hold_off_until && now_ms() < ctl_hold_off_until) {
                /* smcd did not answer lately: do not wait again yet. (Not the SMCR
                 * request after a CONNECT that timed out: smcd may have marked the
                 * socket for SMC-R, its answer decides how the connect ends.) */
                r = -ENOTCONN;
                goto out;
        }
        for (unsigned attempt = 0;; attempt++) {
                bool fresh = ctl_fd < 0 || ctl_gen != fork_gen;
                size_t n = nfds;

                r = ensure_locked(timeout_ms < SMC_CTL_CLIENT_TIMEOUT_MS ? timeout_ms : SMC_CTL_CLIENT_TIMEOUT_MS, hold,
                                  false);
                if (r < 0)
                        goto out;
                req->hdr.seq = next_seq_locked();
                r = smc_ctl_set_version(req, ctl_version);
                if (r < 0)
                        goto out;
                /* a message that carries fds only in newer versions (CONNECT: v3)
                 * sends as many as it carries in the negotiated one */
                r = smc_ctl_msg_nfds(req);
                if (r >= 0 && (size_t) r < n)
                        n = (size_t) r;
                r = smc_ctl_send(ctl_fd, req, fds, n, 0);
                if (r >= 0)
                        break;
                smc_debug("ctl: sending request type %u seq %u failed: %s: dropping the control connection",
                          req->hdr.type, req->hdr.seq, strerror(-r));
                drop_locked();
                /* the connection we had went to an smcd that is gone (restarted since
                 * our last request): nothing was sent, so once more on a new one */
                if (!fresh && attempt == 0 && (r == -EPIPE || r == -ECONNRESET || r == -ENOTCONN))
                        continue;
                r = -ENOTCONN;
                goto out;
        }
        r = wait_reply_locked(req->hdr.seq, ret_reply, ret_fds, timeout_ms);
        /* (the lock was held since the send: the connection that answered) */
        if (r >= 0 && ret_instance && ctl_fd >= 0 && ctl_version)
                *ret_instance = ctl_instance;
        if (r == -ETIMEDOUT && timeout_ms <= SMC_CTL_HOLD_OFF_REQUEST_MS)
                hold_off_locked("did not answer a request", timeout_ms); /* (not an SMCR handshake:
                                                              * its peer may be slow) */
        else if (r >= 0 && ctl_hold_off_ms) {
                ctl_hold_off_ms = 0; /* answered again */
                ctl_hold_off_until = 0;
        }
out:
        pthread_mutex_unlock(&ctl_lock);
        return r;
}

uint16_t smc_ctl_client_version(void) {
        uint16_t v;

        pthread_mutex_lock(&ctl_lock);
        v = ctl_fd >= 0 ? ctl_version : 0;
        pthread_mutex_unlock(&ctl_lock);
        return v;
}

uint32_t smc_ctl_client_instance(void) {
        uint32_t i;

        pthread_mutex_lock(&ctl_lock);
        i = ctl_fd >= 0 && ctl_gen == fork_gen && ctl_version ? ctl_instance : 0;
        pthread_mutex_unlock(&ctl_lock);
        return i;
}

int smc_ctl_client_file_path(const char *name, char *path, size_t size) {
        size_t nl = strlen(name);
        char *slash;

        if (ctl_path(path, size) < 0 || !(slash = strrchr(path, '/')) || (size_t) (slash - path) + 2 + nl > size)
                return -ENAMETOOLONG;
        slash[0] = '/';
        memcpy(slash + 1, name, nl + 1);
        return 0;
}

/* Read @len bytes at @off of the runtime directory's instance file into @buf. Returns
 * true if they were all there. One open and pread(2). */
static bool instance_file_read(void *buf, size_t len, off_t off) {
        char path[sizeof(((struct sockaddr_un *) 0)->sun_path) + 16];
        bool ok;
        int fd;

        if (smc_ctl_client_file_path(SMC_CTL_INSTANCE_NAME, path, sizeof(path)) < 0)
                return false;
        /* (O_NOCTTY: a terminal put in its place must not become ours) */
        fd = sys_fd_off_stdio((int) smc_syscall(SYS_openat, AT_FDCWD, path,
                                                O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY));
        if (fd < 0)
                return false;
        ok = sys_pread(fd, buf, len, off) == (ssize_t) len;
        sys_close(fd);
        return ok;
}

uint32_t smc_ctl_client_instance_file(void) {
        uint32_t v = 0;

        return instance_file_read(&v, sizeof(v), 0) ? v : 0;
}

bool smc_ctl_client_was_daemon(pid_t pid) {
        int32_t pids[SMC_CTL_INSTANCE_PIDS];

        if (pid <= 0 || !instance_file_read(pids, sizeof(pids), SMC_CTL_INSTANCE_PIDS_OFF))
                return false;
        for (unsigned i = 0; i < SMC_CTL_INSTANCE_PIDS; i++)
                if (pids[i] == (int32_t) pid)
                        return true;
        return false;
}

uint32_t smc_ctl_client_ensure_instance(unsigned timeout_ms) {
        uint32_t i = 0;

        pthread_mutex_lock(&ctl_lock);
        if (ensure_locked(timeout_ms, true, true) == 0)
                i = ctl_instance;
        pthread_mutex_unlock(&ctl_lock);
        return i;
}

int smc_ctl_client_daemon(unsigned timeout_ms, pid_t *ret_pid, uid_t *ret_uid) {
        pid_t p = 0;
        uid_t u = 0;
        int r;

        pthread_mutex_lock(&ctl_lock);
        r = ensure_locked(timeout_ms, true, false) == 0 ? 0 : -ENOTCONN;
        if (r == 0) {
                p = ctl_daemon_pid;
                u = ctl_daemon_uid;
        }
        pthread_mutex_unlock(&ctl_lock);
        if (ret_pid)
                *ret_pid = p;
        if (ret_uid)
                *ret_uid = u;
        return r;
}

int smc_ctl_client_send_instance(union smc_ctl_msg *req, uint32_t instance) {
        int r = -ENOTCONN;

        if (!req || !instance)
                return -EINVAL;
        pthread_mutex_lock(&ctl_lock);
        if (ctl_fd >= 0 && ctl_gen == fork_gen && ctl_version && ctl_instance == instance) {
                req->hdr.seq = next_seq_locked();
                r = smc_ctl_set_version(req, ctl_version);
                if (r >= 0)
                        r = smc_ctl_send(ctl_fd, req, NULL, 0, 0);
                if (r < 0 && r != -EINVAL && r != -EMSGSIZE) {
                        drop_locked(); /* not sent again: another smcd would not know it */
                        r = -ENOTCONN;
                }
        }
        pthread_mutex_unlock(&ctl_lock);
        return r;
}

int smc_ctl_client_send(union smc_ctl_msg *req) {
        int r;

        if (!req)
                return -EINVAL;
        pthread_mutex_lock(&ctl_lock);
        for (unsigned attempt = 0;; attempt++) {
                bool fresh = ctl_fd < 0 || ctl_gen != fork_gen;

                r = ensure_locked(SMC_CTL_CLIENT_TIMEOUT_MS, true, true);
                if (r < 0)
                        break;
                req->hdr.seq = next_seq_locked();
                r = smc_ctl_set_version(req, ctl_version);
                if (r >= 0)
                        r = smc_ctl_send(ctl_fd, req, NULL, 0, 0);
                if (r >= 0 || r == -EINVAL || r == -EMSGSIZE)
                        break;
                drop_locked();
                /* as smc_ctl_client_call_timeout(): nothing was sent, once more */
                if (!fresh && attempt == 0 && (r == -EPIPE || r == -ECONNRESET || r == -ENOTCONN))
                        continue;
                r = -ENOTCONN;
                break;
        }
        pthread_mutex_unlock(&ctl_lock);
        return r;
}

static int notify(union smc_ctl_msg *req, uint16_t min_version, bool connect) {
        int r;

        if (!req)
                return -EINVAL;
        pthread_mutex_lock(&ctl_lock);
        if ((ctl_fd >= 0 && ctl_gen != fork_gen) || ((connect || ctl_forked) && ctl_fd < 0)) {
                /* a child of a process that talked to smcd (a pre-forked server
                 * accepting): its own connection, as its first request would open */
                r = ensure_locked(SMC_CTL_CLIENT_TIMEOUT_MS, true, true);
                if (r < 0)
                        goto out;
        }
        if (ctl_fd < 0 || ctl_version < min_version) {
                r = -ENOTCONN;
                goto out;
        }
        req->hdr.seq = next_seq_locked();
        r = smc_ctl_set_version(req, ctl_version);
        if (r >= 0)
                r = smc_ctl_send(ctl_fd, req, NULL, 0, MSG_DONTWAIT);
        if (r == -EPIPE || r == -ECONNRESET || r == -ENOTCONN) {
                drop_locked(); /* smcd went away: the next request reconnects */
                r = -ENOTCONN;
        }
out:
        pthread_mutex_unlock(&ctl_lock);
        return r;
}

int smc_ctl_client_notify(union smc_ctl_msg *req, uint16_t min_version) {
        return notify(req, min_version, false);
}

int smc_ctl_client_notify_connect(union smc_ctl_msg *req, uint16_t min_version) {
        return notify(req, min_version, true);
}

/* fork(): never leave the child with a mutex held by a thread that does not exist
 * there. The child's connection is replaced at its first request (pid check). */
static void atfork_prepare(void) {
        pthread_mutex_lock(&ctl_lock);
}

static void atfork_parent(void) {
        pthread_mutex_unlock(&ctl_lock);
}

static void atfork_child(void) {
        fork_gen++;
        /* no other thread exists here: nobody reads, nobody waits. The waiters were
         * the parent's threads (their stacks are still mapped here): the descriptors
         * handed to them are copies, ours to close. */
        ctl_reading = false;
        for (struct waiter *w = ctl_waiters; w; w = w->next)
                if (w->done)
                        close_fds(w->fds, w->n);
        ctl_waiters = NULL;
        if (ctl_zombie >= 0) {
                sys_close(ctl_zombie);
                ctl_zombie = -1;
        }
        /* the parent's control connection: not ours to use, and while we held a copy
         * smcd would not see the parent's death (its SMC-R endpoints, its
         * listeners, restored endpoints stay until we exit) */
        if (ctl_fd >= 0) {
                sys_close(ctl_fd);
                ctl_fd = -1;
                ctl_version = 0;
                ctl_instance = 0;
                ctl_conn_gen++;
                ctl_forked = true;
        }
        pthread_cond_init(&ctl_cond, NULL);
        pthread_mutex_unlock(&ctl_lock);
}

void smc_ctl_client_fork(int phase) {
        if (phase == SMC_FORK_PREPARE)
                atfork_prepare();
        else if (phase == SMC_FORK_PARENT)
                atfork_parent();
        else
                atfork_child();
}

__attribute__((constructor)) static void ctl_client_init(void) {
        if (secure_getenv(SMC_CTL_RUNDIR_ENV))
                (void) ctl_path_make(ctl_path_at_load, sizeof(ctl_path_at_load));
        pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

size_t smc_ctl_client_fds(int ret[2]) {
        size_t n = 0;

        pthread_mutex_lock(&ctl_lock);
        if (ctl_fd >= 0)
                ret[n++] = ctl_fd;
        if (ctl_zombie >= 0)
                ret[n++] = ctl_zombie;
        pthread_mutex_unlock(&ctl_lock);
        return n;
}

void smc_ctl_client_reset(void) {
        pthread_mutex_lock(&ctl_lock);
        drop_locked();
        pthread_mutex_unlock(&ctl_lock);
}
