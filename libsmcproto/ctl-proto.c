/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The smcd control protocol codec: see ctl-proto.h for the messages. */

#include <errno.h>
#include <stddef.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "config.h"
#include "ctl-proto.h"
#include "smc-clc.h"
#include "sys.h"

_Static_assert(offsetof(struct smc_ctl_listen, sndbuf) == 48 && sizeof(struct smc_ctl_listen) == 56,
               "LISTEN layout (v1: 48 bytes, v2: 56)");
_Static_assert(offsetof(struct smc_ctl_conn, params) == 112 && sizeof(struct smc_ctl_conn) == 120,
               "CONNECT_REPLY / NEW_CONN layout (v1: 112 bytes, v2: 120)");
_Static_assert(sizeof(struct smc_ctl_fallback) == 72, "FALLBACK layout (v2 only)");
_Static_assert(sizeof(struct smc_ctl_fallback_count) == 32, "FALLBACK_COUNT layout (v5 only)");
_Static_assert(offsetof(struct smc_ctl_listen_reply, flags) == 24 && sizeof(struct smc_ctl_listen_reply) == 32,
               "LISTEN_REPLY layout (v1, v2: 24 bytes, v3: 32)");
_Static_assert(sizeof(struct smc_ctl_smcr) == 40, "SMCR layout (v3 only)");
_Static_assert(sizeof(struct smc_ctl_adopt) == 24, "ADOPT layout (v3 only)");
_Static_assert(sizeof(struct smc_ctl_rereg) == 104 && sizeof(struct smc_ctl_rereg_reply) == 24,
               "REREG layout (v3 only)");
_Static_assert(sizeof(struct smc_ctl_rereg_done) == 24, "REREG_DONE layout (v3 only)");

size_t smc_ctl_msg_size_v(uint16_t type, uint16_t version) {
        if (version < SMC_CTL_VERSION_MIN || version > SMC_CTL_VERSION)
                return 0;
        if (version == 1)
                switch (type) {
                case SMC_CTL_LISTEN: return offsetof(struct smc_ctl_listen, sndbuf);
                case SMC_CTL_CONNECT_REPLY:
                case SMC_CTL_NEW_CONN: return offsetof(struct smc_ctl_conn, params);
                case SMC_CTL_FALLBACK: return 0; /* not in version 1 */
                default: break;
                }
        if (version <= 2)
                switch (type) {
                case SMC_CTL_LISTEN_REPLY: return offsetof(struct smc_ctl_listen_reply, flags);
                case SMC_CTL_SMCR:
                case SMC_CTL_ADOPT:
                case SMC_CTL_ADOPT_REPLY:
                case SMC_CTL_REREG:
                case SMC_CTL_REREG_REPLY:
                case SMC_CTL_REREG_DONE:
                case SMC_CTL_ADOPT_FD: return 0; /* not before version 3 */
                default: break;
                }
        if (version <= 4 && (type == SMC_CTL_LISTEN_DEPOSIT || type == SMC_CTL_FALLBACK_COUNT))
                return 0; /* not before version 5 */
        if (version <= 5 && type == SMC_CTL_REQUEUE)
                return 0; /* not before version 6 */
        return smc_ctl_msg_size(type);
}

size_t smc_ctl_msg_size(uint16_t type) {
        switch (type) {
        case SMC_CTL_HELLO: return sizeof(struct smc_ctl_hello);
        case SMC_CTL_HELLO_REPLY: return sizeof(struct smc_ctl_hello_reply);
        case SMC_CTL_LISTEN: return sizeof(struct smc_ctl_listen);
        case SMC_CTL_LISTEN_REPLY: return sizeof(struct smc_ctl_listen_reply);
        case SMC_CTL_UNLISTEN: return sizeof(struct smc_ctl_unlisten);
        case SMC_CTL_LISTEN_DEPOSIT: return sizeof(struct smc_ctl_listen_deposit);
        case SMC_CTL_CONNECT: return sizeof(struct smc_ctl_connect);
        case SMC_CTL_CONNECT_REPLY:
        case SMC_CTL_NEW_CONN: return sizeof(struct smc_ctl_conn);
        case SMC_CTL_CLOSE: return sizeof(struct smc_ctl_close);
        case SMC_CTL_FALLBACK: return sizeof(struct smc_ctl_fallback);
        case SMC_CTL_FALLBACK_COUNT: return sizeof(struct smc_ctl_fallback_count);
        case SMC_CTL_SMCR: return sizeof(struct smc_ctl_smcr);
        case SMC_CTL_ADOPT: return sizeof(struct smc_ctl_adopt);
        case SMC_CTL_ADOPT_REPLY: return sizeof(struct smc_ctl_conn);
        case SMC_CTL_REREG: return sizeof(struct smc_ctl_rereg);
        case SMC_CTL_REREG_REPLY: return sizeof(struct smc_ctl_rereg_reply);
        case SMC_CTL_REREG_DONE: return sizeof(struct smc_ctl_rereg_done);
        case SMC_CTL_ADOPT_FD: return sizeof(struct smc_ctl_adopt_fd);
        case SMC_CTL_REQUEUE: return sizeof(struct smc_ctl_requeue);
        case SMC_CTL_OK: return sizeof(struct smc_ctl_ok);
        case SMC_CTL_ERROR: return sizeof(struct smc_ctl_error);
        default: return 0;
        }
}

static bool type_dir_ok(uint16_t type, enum smc_ctl_dir dir) {
        switch (type) {
        case SMC_CTL_HELLO:
        case SMC_CTL_LISTEN:
        case SMC_CTL_UNLISTEN:
        case SMC_CTL_CONNECT:
        case SMC_CTL_CLOSE:
        case SMC_CTL_FALLBACK:
        case SMC_CTL_FALLBACK_COUNT:
        case SMC_CTL_SMCR:
        case SMC_CTL_ADOPT:
        case SMC_CTL_REREG:
        case SMC_CTL_REREG_DONE:
        case SMC_CTL_ADOPT_FD:
        case SMC_CTL_LISTEN_DEPOSIT:
        case SMC_CTL_REQUEUE:
                return dir == SMC_CTL_TO_DAEMON;
        case SMC_CTL_HELLO_REPLY:
        case SMC_CTL_LISTEN_REPLY:
        case SMC_CTL_CONNECT_REPLY:
        case SMC_CTL_NEW_CONN:
        case SMC_CTL_ADOPT_REPLY:
        case SMC_CTL_REREG_REPLY:
        case SMC_CTL_OK:
        case SMC_CTL_ERROR:
                return dir == SMC_CTL_TO_CLIENT;
        default:
                return false;
        }
}

/* 16 KiB .. 1 MiB, a power of two (SMC-D compressed sizes 0..6) */
static bool ring_size_ok(uint32_t size) {
        return size >= 16384 && size <= (1u << 20) && !(size & (size - 1));
}

static bool buf_ok(const struct smc_ctl_buf *b) {
        if (b->flags & ~SMC_CTL_BUF_FD)
                return false;
        if (!ring_size_ok(b->size))
                return false;
        return b->id != 0;
}

static bool addr_ok(const struct smc_ctl_addr *a, bool allow_unspec) {
        if (a->family == AF_INET) {
                for (size_t i = 4; i < sizeof(a->addr); i++)
                        if (a->addr[i])
                                return false;
                return a->scope_id == 0;
        }
        if (a->family == AF_INET6)
                return true;
        if (allow_unspec && a->family == AF_UNSPEC)
                return true;
        return false;
}

int smc_ctl_msg_nfds(const union smc_ctl_msg *m) {
        switch (m->hdr.type) {
        case SMC_CTL_LISTEN:
                /* (v6) T, C and D to revive a listener */
                return m->hdr.version >= 6 && (m->listen.flags & SMC_CTL_LISTEN_F_REVIVE) ? 3 : 1;
        case SMC_CTL_LISTEN_REPLY:
                /* (v6) C and D; none for a revive */
                if (m->hdr.version >= 6)
                        return (m->listen_reply.flags & SMC_CTL_LISTEN_REVIVED) ? 0 : 2;
                return 1;
        case SMC_CTL_SMCR:
        case SMC_CTL_ADOPT_FD:
                return 1;
        case SMC_CTL_ADOPT_REPLY:
                return 3;
        case SMC_CTL_LISTEN_DEPOSIT:
        case SMC_CTL_REQUEUE:
                return 2;
        case SMC_CTL_CONNECT:
                return m->hdr.version >= 3 ? 1 : 0;
        case SMC_CTL_CONNECT_REPLY:
        case SMC_CTL_NEW_CONN:
                if (m->conn.mode == SMC_CTL_MODE_TCP)
                        return m->hdr.type == SMC_CTL_NEW_CONN ? 1 : 0; /* v3: the TCP socket */
                if (m->conn.mode == SMC_CTL_MODE_SMCR_PENDING)
                        return 0;
                if (m->conn.mode != SMC_CTL_MODE_SMCD && m->conn.mode != SMC_CTL_MODE_SMCR)
                        return -EINVAL;
                return 2 + !!(m->conn.rx.flags & SMC_CTL_BUF_FD) + !!(m->conn.tx.flags & SMC_CTL_BUF_FD);
        default:
                return 0;
        }
}

void smc_ctl_init(union smc_ctl_msg *m, uint16_t type, uint32_t seq) {
        size_t len = smc_ctl_msg_size(type);

        memset(m, 0, len ? len : sizeof(m->hdr));
        m->hdr.magic = SMC_CTL_MAGIC;
        m->hdr.version = SMC_CTL_VERSION;
        m->hdr.type = type;
        m->hdr.len = (uint32_t) len;
        m->hdr.seq = seq;
}

int smc_ctl_init_v(union smc_ctl_msg *m, uint16_t type, uint32_t seq, uint16_t version) {
        smc_ctl_init(m, type, seq);
        return smc_ctl_set_version(m, version);
}

int smc_ctl_set_version(union smc_ctl_msg *m, uint16_t version) {
        size_t len = smc_ctl_msg_size_v(m->hdr.type, version), full = smc_ctl_msg_size(m->hdr.type);
        size_t keep = m->hdr.len < len ? m->hdr.len : len; /* upgraded: new fields are 0 */

        if (!len)
                return -EINVAL;
        if (keep < sizeof(m->hdr))
                keep = sizeof(m->hdr);
        if (keep < full)
                memset(m->raw + keep, 0, full - keep);
        if (version < 5 && m->hdr.type == SMC_CTL_LISTEN)
                m->listen.flags = 0; /* (reserved before) */
        m->hdr.version = version;
        m->hdr.len = (uint32_t) len;
        return 0;
}

/* A connected TCP endpoint's address: IPv4 or IPv6, not the wildcard (nor its
 * v4-mapped form), port != 0. */
static bool addr_specific_ok(const struct smc_ctl_addr *a) {
        static const uint8_t zero[16], mapped_any[16] = { [10] = 0xff, [11] = 0xff };

        if (!addr_ok(a, false) || a->port == 0)
                return false;
        if (a->family == AF_INET)
                return memcmp(a->addr, zero, 4) != 0;
        return memcmp(a->addr, zero, 16) != 0 && memcmp(a->addr, mapped_any, 16) != 0;
}

static bool fallback_ok(const struct smc_ctl_fallback *f) {
        if (!addr_specific_ok(&f->local) || !addr_specific_ok(&f->peer) || f->local.family != f->peer.family)
                return false;
        if (f->role == SMC_CTL_ROLE_SERVER)
                return f->reason == 0;
        if (f->role != SMC_CTL_ROLE_CLIENT || f->reason == 0)
                return false;
        return strcmp(smc_clc_decl_name(f->reason), "SMC_CLC_DECL_UNKNOWN") != 0;
}

static bool params_ok(const struct smc_ctl_conn_params *p) {
        return p->busy_poll_us <= SMC_CTL_BUSY_POLL_MAX_US && p->autocork_size <= SMC_CTL_AUTOCORK_MAX;
}

/* The body of a message whose length matched its version (fields past it are not
 * looked at: smc_ctl_recv() zeroed them). */
static int decode_body(const union smc_ctl_msg *m) {
        static const struct smc_ctl_conn_params no_params = {};
        bool v2 = m->hdr.version >= 2;

        switch (m->hdr.type) {
        case SMC_CTL_HELLO:
                if (m->hello.flags || m->hello.reserved || m->hello.proto_min > m->hello.proto_max)
                        return -EBADMSG;
                return 0;
        case SMC_CTL_LISTEN:
                if (!addr_ok(&m->listen.addr, false) || m->listen.addr.port == 0 ||
                    (m->listen.flags & ~(m->hdr.version >= 6   ? SMC_CTL_LISTEN_F_JOIN | SMC_CTL_LISTEN_F_REVIVE
                                         : m->hdr.version >= 5 ? SMC_CTL_LISTEN_F_JOIN
                                                               : 0u)) ||
                    (m->listen.flags & (SMC_CTL_LISTEN_F_JOIN | SMC_CTL_LISTEN_F_REVIVE)) ==
                            (SMC_CTL_LISTEN_F_JOIN | SMC_CTL_LISTEN_F_REVIVE))
                        return -EBADMSG;
                return 0;
        case SMC_CTL_UNLISTEN:
                return m->unlisten.listener_id ? 0 : -EBADMSG;
        case SMC_CTL_LISTEN_DEPOSIT:
                return m->listen_deposit.listener_id && !(m->listen_deposit.flags & ~(SMC_CTL_DEPOSIT_NONBLOCK | SMC_CTL_DEPOSIT_WITHDRAW)) &&
                                       !m->listen_deposit.reserved
                               ? 0
                               : -EBADMSG;
        case SMC_CTL_CONNECT:
                if (!addr_ok(&m->connect.dst, false) || m->connect.dst.port == 0 ||
                    !addr_ok(&m->connect.src, true))
                        return -EBADMSG;
                return 0;
        case SMC_CTL_CLOSE:
                if (!m->close.conn_id || (m->close.flags & ~SMC_CTL_CLOSE_ABORT) || m->close.reserved)
                        return -EBADMSG;
                return 0;
        case SMC_CTL_CONNECT_REPLY:
        case SMC_CTL_NEW_CONN:
                if (m->conn.mode == SMC_CTL_MODE_TCP) {
                        if (v2 && memcmp(&m->conn.params, &no_params, sizeof(no_params)) != 0)
                                return -EBADMSG;
                        if (m->hdr.type == SMC_CTL_CONNECT_REPLY)
                                return 0;
                        /* v3 NEW_CONN of an SMC-R handshake that fell back: the reason,
                         * the addresses, no id, no buffers */
                        if (m->hdr.version < 3 || m->conn.conn_id || !m->conn.fallback_reason ||
                            m->conn.rx.id || m->conn.rx.size || m->conn.rx.flags || m->conn.tx.id ||
                            m->conn.tx.size || m->conn.tx.flags || !addr_ok(&m->conn.local, false) ||
                            !addr_ok(&m->conn.peer, false))
                                return -EBADMSG;
                        return 0;
                }
                if (m->conn.mode == SMC_CTL_MODE_SMCR_PENDING) {
                        struct smc_ctl_conn body = m->conn;

                        /* nothing but the mode: no id, reason, buffers, addresses, params */
                        memset(&body.hdr, 0, sizeof(body.hdr));
                        body.mode = 0;
                        if (m->hdr.version < 3 || m->hdr.type != SMC_CTL_CONNECT_REPLY ||
                            memcmp(&body, &(struct smc_ctl_conn){}, sizeof(body)) != 0)
                                return -EBADMSG;
                        return 0;
                }
                if (m->conn.mode == SMC_CTL_MODE_SMCR && m->hdr.version < 3)
                        return -EBADMSG;
                if ((m->conn.mode != SMC_CTL_MODE_SMCD && m->conn.mode != SMC_CTL_MODE_SMCR) || !m->conn.conn_id ||
                    m->conn.fallback_reason)
                        return -EBADMSG;
                if (v2 && !params_ok(&m->conn.params))
                        return -EBADMSG;
                if (!buf_ok(&m->conn.rx) || !buf_ok(&m->conn.tx) || m->conn.rx.id == m->conn.tx.id)
                        return -EBADMSG;
                if (!addr_ok(&m->conn.local, false) || !addr_ok(&m->conn.peer, false))
                        return -EBADMSG;
                return 0;
        case SMC_CTL_ERROR:
                if (m->error.error >= 0 || m->error.error < -4095)
                        return -EBADMSG;
                if (!memchr(m->error.msg, 0, sizeof(m->error.msg)))
                        return -EBADMSG;
                return 0;
        case SMC_CTL_LISTEN_REPLY:
                if (!m->listen_reply.listener_id ||
                    (m->hdr.version >= 3 &&
                     ((m->listen_reply.flags &
                       ~(SMC_CTL_LISTEN_SMCR |
                         (m->hdr.version >= 5 ? SMC_CTL_LISTEN_JOINED | SMC_CTL_LISTEN_NB_KNOWN | SMC_CTL_LISTEN_NONBLOCK
                                              : 0u) |
                         (m->hdr.version >= 6 ? SMC_CTL_LISTEN_REVIVED : 0u))) ||
                      m->listen_reply.reserved)))
                        return -EBADMSG;
                return 0;
        case SMC_CTL_SMCR:
                if ((m->smcr.role != SMC_CTL_ROLE_CLIENT && m->smcr.role != SMC_CTL_ROLE_SERVER) || m->smcr.reserved ||
                    (m->smcr.role == SMC_CTL_ROLE_SERVER) != (m->smcr.listener_id != 0))
                        return -EBADMSG;
                return 0;
        case SMC_CTL_FALLBACK:
                return fallback_ok(&m->fallback) ? 0 : -EBADMSG;
        case SMC_CTL_FALLBACK_COUNT:
                return m->fallback_count.reason == SMCD_DECL_SHORTCONN &&
                                       (m->fallback_count.role == SMC_CTL_ROLE_CLIENT ||
                                        m->fallback_count.role == SMC_CTL_ROLE_SERVER) &&
                                       m->fallback_count.count >= 1 &&
                                       m->fallback_count.count <= SMC_CTL_FALLBACK_COUNT_MAX &&
                                       !m->fallback_count.reserved
                               ? 0
                               : -EBADMSG;
        case SMC_CTL_ADOPT:
                return m->adopt.conn_id ? 0 : -EBADMSG;
        case SMC_CTL_ADOPT_FD:
                return m->adopt_fd.reserved ? -EBADMSG : 0;
        case SMC_CTL_REQUEUE:
                return m->requeue.listener_id && m->requeue.conn_id ? 0 : -EBADMSG;
        case SMC_CTL_REREG:
                /* an established connection of an smcd that writes DMB tokens (any
                 * smcd that tells an instance does): two different tokens, both
                 * addresses of one family with a port */
                if (!m->rereg.conn_id || !m->rereg.instance ||
                    (m->rereg.role != SMC_CTL_ROLE_CLIENT && m->rereg.role != SMC_CTL_ROLE_SERVER) ||
                    !ring_size_ok(m->rereg.rx_size) || !ring_size_ok(m->rereg.tx_size) || !m->rereg.rx_token ||
                    !m->rereg.tx_token || m->rereg.rx_token == m->rereg.tx_token ||
                    !addr_ok(&m->rereg.local, false) || !addr_ok(&m->rereg.peer, false) ||
                    m->rereg.local.family != m->rereg.peer.family || !m->rereg.local.port || !m->rereg.peer.port)
                        return -EBADMSG;
                return 0;
        case SMC_CTL_REREG_REPLY:
                return m->rereg_reply.conn_id ? 0 : -EBADMSG;
        case SMC_CTL_REREG_DONE:
                return m->rereg_done.instance &&
                                       !(m->rereg_done.flags & ~(SMC_CTL_REREG_DONE_ALL | SMC_CTL_REREG_DONE_SERVERS))
                               ? 0
                               : -EBADMSG;
        case SMC_CTL_ADOPT_REPLY:
                /* SMC-D only, both memfds always sent */
                if (m->conn.mode != SMC_CTL_MODE_SMCD || !m->conn.conn_id || m->conn.fallback_reason ||
                    !params_ok(&m->conn.params) || !buf_ok(&m->conn.rx) || !buf_ok(&m->conn.tx) ||
                    m->conn.rx.flags != SMC_CTL_BUF_FD || m->conn.tx.flags != SMC_CTL_BUF_FD ||
                    m->conn.rx.id == m->conn.tx.id || !addr_ok(&m->conn.local, false) ||
                    !addr_ok(&m->conn.peer, false))
                        return -EBADMSG;
                return 0;
        default:
                return 0;
        }
}

int smc_ctl_decode(const union smc_ctl_msg *m, size_t len, size_t nfds, bool truncated,
                   enum smc_ctl_dir dir) {
        size_t want;
        int n;

        if (truncated || len < sizeof(struct smc_ctl_hdr) || len > SMC_CTL_MAX_MSG)
                return -EBADMSG;
        if (m->hdr.magic != SMC_CTL_MAGIC)
                return -EBADMSG;
        if (m->hdr.version < SMC_CTL_VERSION_MIN || m->hdr.version > SMC_CTL_VERSION)
                return -EPROTONOSUPPORT;
        want = smc_ctl_msg_size_v(m->hdr.type, m->hdr.version);
        if (!want || !type_dir_ok(m->hdr.type, dir))
                return -EOPNOTSUPP;
        if (m->hdr.len != len || len != want)
                return -EBADMSG;
        n = decode_body(m);
        if (n < 0)
                return n;
        n = smc_ctl_msg_nfds(m);
        if (n < 0)
                return -EBADMSG;
        if ((size_t) n != nfds)
                return -EBADF;
        return 0;
}

int smc_ctl_send(int sock, const union smc_ctl_msg *m, const int *fds, size_t nfds, int flags) {
        union {
                struct cmsghdr cmsg;
                char buf[CMSG_SPACE(sizeof(int) * SMC_CTL_MAX_FDS)];
        } control;
        struct iovec iov = { .iov_base = (void *) m, .iov_len = m->hdr.len };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
        ssize_t n;

        if (nfds > SMC_CTL_MAX_FDS || m->hdr.len > SMC_CTL_MAX_MSG)
                return -EINVAL;
        if (nfds > 0) {
                memset(&control, 0, sizeof(control));
                mh.msg_control = &control;
                mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
                struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
                c->cmsg_level = SOL_SOCKET;
                c->cmsg_type = SCM_RIGHTS;
                c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
                memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
        }
        do
                n = sys_sendmsg(sock, &mh, MSG_NOSIGNAL | flags);
        while (n < 0 && errno == EINTR);
        if (n < 0)
                return -errno;
        if ((size_t) n != m->hdr.len)
                return -EMSGSIZE;
        return 0;
}

int smc_ctl_recv(int sock, union smc_ctl_msg *m, int *fds, enum smc_ctl_dir dir, int flags) {
        union {
                struct cmsghdr cmsg;
                /* room for more fds than allowed, so that excess is seen, not cut */
                char buf[CMSG_SPACE(sizeof(int) * SMC_CTL_MAX_FDS * 4)];
        } control;
        struct iovec iov = { .iov_base = m, .iov_len = sizeof(*m) };
        struct msghdr mh = {
                .msg_iov = &iov,
                .msg_iovlen = 1,
                .msg_control = &control,
                .msg_controllen = sizeof(control),
        };
        int got[SMC_CTL_MAX_FDS * 4];
        size_t ngot = 0;
        ssize_t n;
        int r;

        memset(m, 0, sizeof(m->hdr));
        do
                n = sys_recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | flags);
        while (n < 0 && errno == EINTR);
        if (n < 0)
                return -errno;

        for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
                if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
                        continue;
                size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                int tmp[SMC_CTL_MAX_FDS * 4];
                if (k > SMC_CTL_MAX_FDS * 4 - ngot)
                        k = SMC_CTL_MAX_FDS * 4 - ngot;
                memcpy(tmp, CMSG_DATA(c), k * sizeof(int));
                for (size_t i = 0; i < k; i++)
                        got[ngot++] = tmp[i];
        }
        if (n == 0 && ngot == 0)
                return -ECONNRESET;
        if ((mh.msg_flags & MSG_CTRUNC) && ngot < SMC_CTL_MAX_FDS * 4) {
                /* cut short with room left: the kernel could not install the fds in
                 * our table (RLIMIT_NOFILE), not a sender's excess */
                for (size_t i = 0; i < ngot; i++)
                        sys_close(got[i]);
                return -EMFILE;
        }

        r = smc_ctl_decode(m, (size_t) n, ngot, (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0, dir);
        if (r < 0 || ngot > SMC_CTL_MAX_FDS) {
                for (size_t i = 0; i < ngot; i++)
                        sys_close(got[i]);
                return r < 0 ? r : -EBADF;
        }
        if ((size_t) n < sizeof(*m))
                memset(m->raw + n, 0, sizeof(*m) - (size_t) n); /* fields of later versions */
        memcpy(fds, got, ngot * sizeof(int));
        return (int) ngot;
}

int smc_ctl_addr_from_sockaddr(struct smc_ctl_addr *a, const struct sockaddr *sa, socklen_t len) {
        memset(a, 0, sizeof(*a));
        if (!sa)
                return -EINVAL;
        if (sa->sa_family == AF_INET) {
                const struct sockaddr_in *s = (const struct sockaddr_in *) sa;
                if (len < sizeof(*s))
                        return -EINVAL;
                a->family = AF_INET;
                a->port = ntohs(s->sin_port);
                memcpy(a->addr, &s->sin_addr, 4);
                return 0;
        }
        if (sa->sa_family == AF_INET6) {
                const struct sockaddr_in6 *s = (const struct sockaddr_in6 *) sa;
                if (len < sizeof(*s))
                        return -EINVAL;
                a->family = AF_INET6;
                a->port = ntohs(s->sin6_port);
                a->scope_id = s->sin6_scope_id;
                memcpy(a->addr, &s->sin6_addr, 16);
                return 0;
        }
        return -EAFNOSUPPORT;
}

int smc_ctl_addr_to_sockaddr(const struct smc_ctl_addr *a, struct sockaddr *sa, socklen_t *len) {
        struct sockaddr_storage ss = {};
        socklen_t full;

        if (a->family == AF_INET) {
                struct sockaddr_in *s = (struct sockaddr_in *) &ss;
                s->sin_family = AF_INET;
                s->sin_port = htons(a->port);
                memcpy(&s->sin_addr, a->addr, 4);
                full = sizeof(*s);
        } else if (a->family == AF_INET6) {
                struct sockaddr_in6 *s = (struct sockaddr_in6 *) &ss;
                s->sin6_family = AF_INET6;
                s->sin6_port = htons(a->port);
                s->sin6_scope_id = a->scope_id;
                memcpy(&s->sin6_addr, a->addr, 16);
                full = sizeof(*s);
        } else
                return -EAFNOSUPPORT;
        if (!len)
                return -EINVAL;
        if (sa)
                memcpy(sa, &ss, *len < full ? *len : full);
        *len = full;
        return 0;
}

const char *smc_ctl_runtime_dir(void) {
        const char *e = secure_getenv(SMC_CTL_RUNDIR_ENV);

        if (e && e[0] == '/')
                return e;
        return SMCD_DEFAULT_RUNDIR;
}
