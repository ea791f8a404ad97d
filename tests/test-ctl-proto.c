/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Unit test of the control-protocol codec: every message type round-trips through a
 * real SOCK_SEQPACKET socketpair, and every kind of malformed message is rejected
 * with the documented error, with its fds closed. */

#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ctl-proto.h"
#include "smc-clc.h"

#include "check.h"

static int sp[2];

static bool fd_open(int fd) {
        return fcntl(fd, F_GETFD) >= 0;
}

/* Descriptors open below 256: the receiver of the rejected messages is this process,
 * so a leak shows here. */
static int count_fds(void) {
        int n = 0;

        for (int fd = 0; fd < 256; fd++)
                n += fd_open(fd);
        return n;
}

/* Send raw bytes (and optionally fds) on sp[0], receive/decode on sp[1]. */
static int roundtrip_raw(const void *buf, size_t len, const int *fds, size_t nfds, enum smc_ctl_dir dir,
                         union smc_ctl_msg *out, int *out_fds) {
        union {
                struct cmsghdr c;
                char b[CMSG_SPACE(sizeof(int) * 8)];
        } control = {};
        struct iovec iov = { .iov_base = (void *) buf, .iov_len = len };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

        if (nfds) {
                mh.msg_control = &control;
                mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
                struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
                c->cmsg_level = SOL_SOCKET;
                c->cmsg_type = SCM_RIGHTS;
                c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
                memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
        }
        if (sendmsg(sp[0], &mh, 0) != (ssize_t) len) {
                perror("sendmsg");
                exit(2);
        }
        return smc_ctl_recv(sp[1], out, out_fds, dir, MSG_DONTWAIT);
}

static void set_addr4(struct smc_ctl_addr *a, const char *ip4, uint16_t port) {
        struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(port) };
        inet_pton(AF_INET, ip4, &sin.sin_addr);
        if (smc_ctl_addr_from_sockaddr(a, (struct sockaddr *) &sin, sizeof(sin)) < 0)
                abort();
}

static void make_conn(union smc_ctl_msg *m, uint16_t type) {
        smc_ctl_init(m, type, 7);
        m->conn.conn_id = 42;
        m->conn.mode = SMC_CTL_MODE_SMCD;
        m->conn.rx = (struct smc_ctl_buf) { .id = 1, .size = 65536, .flags = SMC_CTL_BUF_FD };
        m->conn.tx = (struct smc_ctl_buf) { .id = 2, .size = 16384, .flags = 0 };
        set_addr4(&m->conn.local, "127.0.0.1", 80);
        set_addr4(&m->conn.peer, "127.0.0.1", 40000);
}

static void test_sizes(void) {
        for (uint16_t t = SMC_CTL_HELLO; t < _SMC_CTL_TYPE_MAX; t++) {
                size_t s = smc_ctl_msg_size(t);
                CHECK(s >= sizeof(struct smc_ctl_hdr) && s <= SMC_CTL_MAX_MSG, "type %u size %zu", t, s);
        }
        CHECK(smc_ctl_msg_size(0) == 0, "type 0");
        CHECK(smc_ctl_msg_size(_SMC_CTL_TYPE_MAX) == 0, "type max");
        CHECK(smc_ctl_msg_size(0xffff) == 0, "type 0xffff");
}

static void test_good(void) {
        union smc_ctl_msg m, r;
        int fds[SMC_CTL_MAX_FDS], n;

        smc_ctl_init(&m, SMC_CTL_HELLO, 1);
        m.hello.proto_min = m.hello.proto_max = 1;
        CHECK(smc_ctl_send(sp[0], &m, NULL, 0, 0) == 0, "send hello");
        n = smc_ctl_recv(sp[1], &r, fds, SMC_CTL_TO_DAEMON, MSG_DONTWAIT);
        CHECK(n == 0 && r.hdr.type == SMC_CTL_HELLO && r.hdr.seq == 1, "hello: %d", n);

        /* CONNECT_REPLY with 3 fds round-trips and gives the fds */
        make_conn(&m, SMC_CTL_CONNECT_REPLY);
        int pipefd[2];
        if (pipe(pipefd) < 0)
                abort();
        int three[3] = { pipefd[0], pipefd[1], pipefd[0] };
        CHECK(smc_ctl_send(sp[0], &m, three, 3, 0) == 0, "send conn");
        n = smc_ctl_recv(sp[1], &r, fds, SMC_CTL_TO_CLIENT, MSG_DONTWAIT);
        CHECK(n == 3, "conn reply fds %d", n);
        CHECK(r.conn.conn_id == 42 && r.conn.rx.size == 65536, "conn body");
        for (int i = 0; i < n; i++)
                close(fds[i]);

        /* fallback reply: no fds */
        smc_ctl_init(&m, SMC_CTL_CONNECT_REPLY, 3);
        m.conn.mode = SMC_CTL_MODE_TCP;
        m.conn.fallback_reason = SMC_CLC_DECL_PEERNOSMC;
        CHECK(smc_ctl_send(sp[0], &m, NULL, 0, 0) == 0, "send fallback");
        n = smc_ctl_recv(sp[1], &r, fds, SMC_CTL_TO_CLIENT, MSG_DONTWAIT);
        CHECK(n == 0 && r.conn.fallback_reason == SMC_CLC_DECL_PEERNOSMC, "fallback %d", n);

        /* CLOSE */
        smc_ctl_init(&m, SMC_CTL_CLOSE, 9);
        m.close.conn_id = 5;
        m.close.flags = SMC_CTL_CLOSE_ABORT;
        CHECK(smc_ctl_send(sp[0], &m, NULL, 0, 0) == 0, "send close");
        n = smc_ctl_recv(sp[1], &r, fds, SMC_CTL_TO_DAEMON, MSG_DONTWAIT);
        CHECK(n == 0 && r.close.conn_id == 5, "close %d", n);

        /* ERROR */
        smc_ctl_init(&m, SMC_CTL_ERROR, 9);
        m.error.error = -EINVAL;
        snprintf(m.error.msg, sizeof(m.error.msg), "bad");
        CHECK(smc_ctl_send(sp[0], &m, NULL, 0, 0) == 0, "send error");
        n = smc_ctl_recv(sp[1], &r, fds, SMC_CTL_TO_CLIENT, MSG_DONTWAIT);
        CHECK(n == 0 && r.error.error == -EINVAL && !strcmp(r.error.msg, "bad"), "error %d", n);
        close(pipefd[0]);
        close(pipefd[1]);
}

static void expect_bad(const char *what, const void *buf, size_t len, const int *fds, size_t nfds,
                       enum smc_ctl_dir dir, int want) {
        union smc_ctl_msg r;
        int out[SMC_CTL_MAX_FDS], n;

        /* garbage past the datagram: a message of an older (shorter) version must
         * decode whatever the receive buffer held before */
        memset(&r, 0xa5, sizeof(r));
        n = roundtrip_raw(buf, len, fds, nfds, dir, &r, out);
        CHECK(n == want, "%s: got %d (%s), want %d", what, n, n < 0 ? strerror(-n) : "ok", want);
        if (n > 0)
                for (int i = 0; i < n; i++)
                        close(out[i]);
}


/* Ways to spoil an address (expect_bad_addrs) */
static void addr_unspec(struct smc_ctl_addr *a) {
        a->family = AF_UNSPEC;
}
static void addr_zero(struct smc_ctl_addr *a) {
        memset(a, 0, sizeof(*a));
}
static void addr_unix(struct smc_ctl_addr *a) {
        a->family = AF_UNIX;
}
static void addr_v4_garbage(struct smc_ctl_addr *a) {
        a->addr[6] = 1; /* garbage after an IPv4 address */
}
static void addr_v4_scope(struct smc_ctl_addr *a) {
        a->scope_id = 2; /* no scope on IPv4 */
}

/* The bad addresses every message with a local and a peer address rejects: @m is
 * valid, its local address at byte @local_off, its peer's at @peer_off. */
static void expect_bad_addrs(const char *what, const union smc_ctl_msg *m, size_t local_off, size_t peer_off,
                             const int *fds, size_t nfds, enum smc_ctl_dir dir) {
        static const struct {
                const char *name;
                bool peer;
                void (*spoil)(struct smc_ctl_addr *a);
        } cases[] = {
                { "without a local address", false, addr_unspec },
                { "without a peer address", true, addr_zero },
                { "peer family AF_UNIX", true, addr_unix },
                { "v4 garbage", false, addr_v4_garbage },
                { "v4 scope", true, addr_v4_scope },
        };

        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                union smc_ctl_msg c = *m;
                char name[96];

                cases[i].spoil((struct smc_ctl_addr *) ((uint8_t *) &c + (cases[i].peer ? peer_off : local_off)));
                snprintf(name, sizeof(name), "%s %s", what, cases[i].name);
                expect_bad(name, &c, c.hdr.len, fds, nfds, dir, -EBADMSG);
        }
}

static void test_bad(void) {
        union smc_ctl_msg m;
        uint8_t big[SMC_CTL_MAX_MSG + 64];
        int pfd[2];

        int fds_before = count_fds();
        if (pipe(pfd) < 0)
                abort();

        smc_ctl_init(&m, SMC_CTL_HELLO, 1);
        m.hello.proto_min = m.hello.proto_max = 1;

        /* short: less than a header, and a header-only HELLO */
        expect_bad("short", &m, 7, NULL, 0, SMC_CTL_TO_DAEMON, -EBADMSG);
        union smc_ctl_msg s = m;
        s.hdr.len = sizeof(struct smc_ctl_hdr);
        expect_bad("hdr only", &s, sizeof(struct smc_ctl_hdr), NULL, 0, SMC_CTL_TO_DAEMON, -EBADMSG);
        /* len field disagrees with datagram length */
        s = m;
        s.hdr.len += 4;
        expect_bad("len mismatch", &s, m.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EBADMSG);
        /* oversized datagram: truncated by recv */
        memset(big, 0, sizeof(big));
        memcpy(big, &m, m.hdr.len);
        ((struct smc_ctl_hdr *) big)->len = sizeof(big);
        expect_bad("oversized", big, sizeof(big), NULL, 0, SMC_CTL_TO_DAEMON, -EBADMSG);
        /* bad magic */
        s = m;
        s.hdr.magic ^= 1;
        expect_bad("magic", &s, m.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EBADMSG);
        /* versions nobody speaks */
        s = m;
        s.hdr.version = SMC_CTL_VERSION + 1;
        expect_bad("version", &s, m.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EPROTONOSUPPORT);
        s.hdr.version = 0;
        expect_bad("version 0", &s, m.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EPROTONOSUPPORT);
        /* unknown type */
        s = m;
        s.hdr.type = 999;
        expect_bad("unknown type", &s, m.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EOPNOTSUPP);
        s.hdr.type = 0;
        expect_bad("type 0", &s, m.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EOPNOTSUPP);
        /* wrong direction: a reply sent to the daemon */
        smc_ctl_init(&s, SMC_CTL_OK, 1);
        expect_bad("direction", &s, s.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EOPNOTSUPP);
        /* unexpected fd on HELLO: rejected and the fd closed in the receiver */
        expect_bad("unexpected fd", &m, m.hdr.len, pfd, 1, SMC_CTL_TO_DAEMON, -EBADF);
        /* missing fd on LISTEN */
        smc_ctl_init(&s, SMC_CTL_LISTEN, 2);
        set_addr4(&s.listen.addr, "127.0.0.1", 80);
        expect_bad("missing fd", &s, s.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EBADF);
        /* too many fds (more than SMC_CTL_MAX_FDS) */
        int many[6] = { pfd[0], pfd[0], pfd[0], pfd[0], pfd[0], pfd[0] };
        expect_bad("too many fds", &s, s.hdr.len, many, 6, SMC_CTL_TO_DAEMON, -EBADF);
        /* LISTEN with bad family / port 0 */
        union smc_ctl_msg l = s;
        l.listen.addr.family = AF_UNIX;
        expect_bad("family", &l, l.hdr.len, pfd, 1, SMC_CTL_TO_DAEMON, -EBADMSG);
        l = s;
        l.listen.addr.port = 0;
        expect_bad("port 0", &l, l.hdr.len, pfd, 1, SMC_CTL_TO_DAEMON, -EBADMSG);
        l = s;
        l.listen.addr.addr[9] = 1; /* garbage after an IPv4 address */
        expect_bad("v4 garbage", &l, l.hdr.len, pfd, 1, SMC_CTL_TO_DAEMON, -EBADMSG);
        /* HELLO with min > max, with flags */
        s = m;
        s.hello.proto_min = 3;
        expect_bad("hello range", &s, s.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EBADMSG);
        s = m;
        s.hello.flags = 1;
        expect_bad("hello flags", &s, s.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EBADMSG);
        /* CLOSE with id 0 / unknown flags */
        smc_ctl_init(&s, SMC_CTL_CLOSE, 3);
        expect_bad("close id 0", &s, s.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EBADMSG);
        s.close.conn_id = 1;
        s.close.flags = 0x80;
        expect_bad("close flags", &s, s.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EBADMSG);
        /* CONNECT to port 0 */
        smc_ctl_init(&s, SMC_CTL_CONNECT, 4);
        set_addr4(&s.connect.dst, "127.0.0.1", 0);
        expect_bad("connect port 0", &s, s.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EBADMSG);
        /* CONNECT_REPLY: bad sizes, same buffer twice, bad mode, fd count mismatch */
        make_conn(&s, SMC_CTL_CONNECT_REPLY);
        int two[2] = { pfd[0], pfd[1] };
        int three[3] = { pfd[0], pfd[1], pfd[0] };
        expect_bad("conn fd count", &s, s.hdr.len, two, 2, SMC_CTL_TO_CLIENT, -EBADF);
        union smc_ctl_msg c = s;
        c.conn.rx.size = 65535;
        expect_bad("conn size", &c, c.hdr.len, three, 3, SMC_CTL_TO_CLIENT, -EBADMSG);
        c = s;
        c.conn.rx.size = 2u << 20;
        expect_bad("conn size big", &c, c.hdr.len, three, 3, SMC_CTL_TO_CLIENT, -EBADMSG);
        c = s;
        c.conn.tx.id = c.conn.rx.id;
        expect_bad("conn same buf", &c, c.hdr.len, three, 3, SMC_CTL_TO_CLIENT, -EBADMSG);
        c = s;
        c.conn.mode = 7;
        expect_bad("conn mode", &c, c.hdr.len, three, 3, SMC_CTL_TO_CLIENT, -EBADMSG);
        c = s;
        c.conn.rx.flags |= 0x10;
        expect_bad("conn buf flags", &c, c.hdr.len, three, 3, SMC_CTL_TO_CLIENT, -EBADMSG);
        /* ERROR with positive errno / unterminated text */
        smc_ctl_init(&c, SMC_CTL_ERROR, 5);
        c.error.error = 5;
        expect_bad("error sign", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_CLIENT, -EBADMSG);
        c.error.error = -5;
        memset(c.error.msg, 'x', sizeof(c.error.msg));
        expect_bad("error text", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_CLIENT, -EBADMSG);

        /* the fds we sent in rejected messages were closed by the receiver: only our
         * own pipe ends are open, and nothing leaked (the receiver is this process,
         * so count open fds) */
        int open_fds = count_fds();
        CHECK(open_fds == fds_before + 2, "fds open after rejects: %d, before %d + 2", open_fds, fds_before);
        close(pfd[0]);
        close(pfd[1]);
}

/* Version 1 and 2 layouts (ctl-proto.h, Versions): sizes, re-stamping, decoding of
 * each, the v2 fields and their malformed values. (Version 3: test_v3().) */
static void test_versions(void) {
        union smc_ctl_msg m, r, c;
        int fds[SMC_CTL_MAX_FDS], pfd[2], n, fds_before = 0, fds_after = 0;

        fds_before = count_fds();
        if (pipe(pfd) < 0)
                abort();
        int three[3] = { pfd[0], pfd[1], pfd[0] }, one[1] = { pfd[0] };

        CHECK(SMC_CTL_VERSION_MIN == 1 && SMC_CTL_VERSION == 6, "versions %d..%d", SMC_CTL_VERSION_MIN,
              SMC_CTL_VERSION);
        CHECK(smc_ctl_msg_size_v(SMC_CTL_LISTEN, 1) == 48 && smc_ctl_msg_size_v(SMC_CTL_LISTEN, 2) == 56,
              "LISTEN sizes");
        CHECK(smc_ctl_msg_size_v(SMC_CTL_CONNECT_REPLY, 1) == 112 && smc_ctl_msg_size_v(SMC_CTL_NEW_CONN, 1) == 112 &&
              smc_ctl_msg_size_v(SMC_CTL_CONNECT_REPLY, 2) == 120 && smc_ctl_msg_size_v(SMC_CTL_NEW_CONN, 2) == 120,
              "conn sizes");
        for (uint16_t t = SMC_CTL_HELLO; t < _SMC_CTL_TYPE_MAX; t++)
                CHECK(smc_ctl_msg_size_v(t, SMC_CTL_VERSION) == smc_ctl_msg_size(t), "type %u: newest = default", t);
        CHECK(smc_ctl_msg_size_v(SMC_CTL_CONNECT, 1) == 72 && smc_ctl_msg_size_v(SMC_CTL_CONNECT, 2) == 72 &&
              smc_ctl_msg_size_v(SMC_CTL_CONNECT, 3) == 72, "CONNECT same in every version");
        CHECK(smc_ctl_msg_size_v(SMC_CTL_HELLO, 0) == 0 && smc_ctl_msg_size_v(SMC_CTL_HELLO, 7) == 0 &&
              smc_ctl_msg_size_v(SMC_CTL_HELLO, 0xffff) == 0 && smc_ctl_msg_size_v(0, 1) == 0 &&
              smc_ctl_msg_size_v(_SMC_CTL_TYPE_MAX, 3) == 0, "bad version / type -> 0");

        /* init_v, set_version: len follows, dropped fields are zeroed, bad input leaves m */
        CHECK(smc_ctl_init_v(&m, SMC_CTL_LISTEN, 5, 1) == 0 && m.hdr.version == 1 && m.hdr.len == 48, "init_v 1");
        CHECK(smc_ctl_init_v(&m, SMC_CTL_LISTEN, 5, 9) == -EINVAL, "init_v 9");
        make_conn(&m, SMC_CTL_NEW_CONN);
        m.conn.params.busy_poll_us = 77;
        m.conn.params.autocork_size = 4096;
        CHECK(m.hdr.version == 6 && smc_ctl_set_version(&m, 2) == 0 && m.hdr.len == 120 &&
              m.conn.params.busy_poll_us == 77, "init builds version 6; set_version 2 keeps the params");
        c = m;
        CHECK(smc_ctl_set_version(&c, 7) == -EINVAL && memcmp(&c, &m, sizeof(m)) == 0, "set_version 7 unchanged");
        CHECK(smc_ctl_set_version(&c, 0) == -EINVAL && memcmp(&c, &m, sizeof(m)) == 0, "set_version 0 unchanged");
        CHECK(smc_ctl_set_version(&c, 1) == 0 && c.hdr.version == 1 && c.hdr.len == 112 &&
              c.conn.params.busy_poll_us == 0 && c.conn.params.autocork_size == 0 && c.conn.conn_id == 42,
              "set_version 1: shorter, params zeroed");
        CHECK(smc_ctl_set_version(&c, 2) == 0 && c.hdr.len == 120, "set_version back to 2");
        c.hdr.len = 112; /* a v1 message with stale bytes after it: upgrading zeroes them */
        c.hdr.version = 1;
        c.conn.params.busy_poll_us = 0xdead;
        CHECK(smc_ctl_set_version(&c, 2) == 0 && c.hdr.len == 120 && c.conn.params.busy_poll_us == 0 &&
              c.conn.conn_id == 42, "set_version 1 -> 2: new fields zero");

        /* v2 NEW_CONN: the params arrive */
        CHECK(smc_ctl_send(sp[0], &m, three, 3, 0) == 0, "send v2 conn");
        n = smc_ctl_recv(sp[1], &r, fds, SMC_CTL_TO_CLIENT, MSG_DONTWAIT);
        CHECK(n == 3 && r.hdr.version == 2 && r.conn.params.busy_poll_us == 77 && r.conn.params.autocork_size == 4096,
              "v2 params: %d %u %u", n, r.conn.params.busy_poll_us, r.conn.params.autocork_size);
        for (int i = 0; i < n && n > 0; i++)
                close(fds[i]);
        /* v1 NEW_CONN into a union with garbage: decodes, the v2 fields read zero */
        c = m;
        CHECK(smc_ctl_set_version(&c, 1) == 0, "v1");
        memset(&r, 0xa5, sizeof(r));
        CHECK(smc_ctl_send(sp[0], &c, three, 3, 0) == 0, "send v1 conn");
        n = smc_ctl_recv(sp[1], &r, fds, SMC_CTL_TO_CLIENT, MSG_DONTWAIT);
        CHECK(n == 3 && r.hdr.version == 1 && r.conn.conn_id == 42 && r.conn.params.busy_poll_us == 0 &&
              r.conn.params.autocork_size == 0, "v1 conn: %d, params zeroed", n);
        for (int i = 0; i < n && n > 0; i++)
                close(fds[i]);

        /* v2 LISTEN carries sndbuf / rcvbuf; v1 LISTEN has them zero */
        CHECK(smc_ctl_init_v(&m, SMC_CTL_LISTEN, 6, 2) == 0, "init_v LISTEN 2");
        set_addr4(&m.listen.addr, "127.0.0.1", 80);
        m.listen.sndbuf = 300000;
        m.listen.rcvbuf = 20000;
        CHECK(smc_ctl_send(sp[0], &m, one, 1, 0) == 0, "send v2 listen");
        n = smc_ctl_recv(sp[1], &r, fds, SMC_CTL_TO_DAEMON, MSG_DONTWAIT);
        CHECK(n == 1 && r.hdr.version == 2 && r.listen.sndbuf == 300000 && r.listen.rcvbuf == 20000, "v2 listen: %d",
              n);
        for (int i = 0; i < n && n > 0; i++)
                close(fds[i]);
        c = m;
        CHECK(smc_ctl_set_version(&c, 1) == 0, "v1 listen");
        memset(&r, 0xa5, sizeof(r));
        CHECK(smc_ctl_send(sp[0], &c, one, 1, 0) == 0, "send v1 listen");
        n = smc_ctl_recv(sp[1], &r, fds, SMC_CTL_TO_DAEMON, MSG_DONTWAIT);
        CHECK(n == 1 && r.hdr.len == 48 && r.listen.sndbuf == 0 && r.listen.rcvbuf == 0, "v1 listen: %d", n);
        for (int i = 0; i < n && n > 0; i++)
                close(fds[i]);

        /* malformed: a length of the other version, params out of range, params in a
         * fallback reply */
        make_conn(&m, SMC_CTL_CONNECT_REPLY);
        CHECK(smc_ctl_set_version(&m, 2) == 0, "v2 conn reply");
        c = m;
        c.hdr.version = 1; /* v2 length with version 1 */
        expect_bad("v1 with v2 length", &c, c.hdr.len, three, 3, SMC_CTL_TO_CLIENT, -EBADMSG);
        c = m;
        c.hdr.len = 112; /* v1 length with version 2 */
        expect_bad("v2 with v1 length", &c, 112, three, 3, SMC_CTL_TO_CLIENT, -EBADMSG);
        smc_ctl_init_v(&c, SMC_CTL_LISTEN, 7, 2);
        set_addr4(&c.listen.addr, "127.0.0.1", 80);
        c.hdr.len = 48;
        expect_bad("v2 LISTEN with v1 length", &c, 48, one, 1, SMC_CTL_TO_DAEMON, -EBADMSG);
        c = m;
        c.conn.params.busy_poll_us = SMC_CTL_BUSY_POLL_MAX_US + 1;
        expect_bad("busy_poll too big", &c, c.hdr.len, three, 3, SMC_CTL_TO_CLIENT, -EBADMSG);
        c = m;
        c.conn.params.autocork_size = SMC_CTL_AUTOCORK_MAX + 1;
        expect_bad("autocork too big", &c, c.hdr.len, three, 3, SMC_CTL_TO_CLIENT, -EBADMSG);
        c = m;
        c.conn.params.busy_poll_us = SMC_CTL_BUSY_POLL_MAX_US;
        c.conn.params.autocork_size = SMC_CTL_AUTOCORK_MAX;
        expect_bad("params at the limits", &c, c.hdr.len, three, 3, SMC_CTL_TO_CLIENT, 3);
        smc_ctl_init_v(&c, SMC_CTL_CONNECT_REPLY, 8, 2);
        c.conn.mode = SMC_CTL_MODE_TCP;
        c.conn.fallback_reason = SMC_CLC_DECL_PEERNOSMC;
        c.conn.params.busy_poll_us = 1;
        expect_bad("params in a fallback", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_CLIENT, -EBADMSG);
        c.conn.params.busy_poll_us = 0;
        expect_bad("fallback without params", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_CLIENT, 0);
        close(pfd[0]);
        close(pfd[1]);
        fds_after = count_fds();
        CHECK(fds_after == fds_before, "fds open after the version checks: %d, before %d", fds_after, fds_before);
}

/* FALLBACK (v2 only): a one-way notice to smcd; its addresses, role and reason are
 * checked, and version 1 does not have it. */
static void make_fallback(union smc_ctl_msg *m) {
        smc_ctl_init(m, SMC_CTL_FALLBACK, 11);
        set_addr4(&m->fallback.local, "127.0.0.1", 40000);
        set_addr4(&m->fallback.peer, "127.0.0.2", 80);
        m->fallback.role = SMC_CTL_ROLE_CLIENT;
        m->fallback.reason = SMC_CLC_DECL_PEERNOSMC;
}

static void test_fallback(void) {
        union smc_ctl_msg m, r, c;
        int fds[SMC_CTL_MAX_FDS], pfd[2], n, fds_before = 0, fds_after = 0;

        fds_before = count_fds();
        if (pipe(pfd) < 0)
                abort();
        CHECK(smc_ctl_msg_size(SMC_CTL_FALLBACK) == 72 && smc_ctl_msg_size_v(SMC_CTL_FALLBACK, 2) == 72 &&
              smc_ctl_msg_size_v(SMC_CTL_FALLBACK, 1) == 0, "FALLBACK sizes: v2 72, not in v1");
        CHECK(smc_ctl_init_v(&c, SMC_CTL_FALLBACK, 1, 1) == -EINVAL, "no FALLBACK in version 1");
        make_fallback(&m);
        c = m;
        CHECK(smc_ctl_set_version(&c, 1) == -EINVAL && memcmp(&c, &m, sizeof(m)) == 0, "set_version 1 refused");

        /* client and server notices round-trip */
        CHECK(smc_ctl_send(sp[0], &m, NULL, 0, 0) == 0, "send fallback");
        n = smc_ctl_recv(sp[1], &r, fds, SMC_CTL_TO_DAEMON, MSG_DONTWAIT);
        CHECK(n == 0 && r.hdr.type == SMC_CTL_FALLBACK && r.fallback.local.port == 40000 &&
              r.fallback.peer.port == 80 && r.fallback.reason == SMC_CLC_DECL_PEERNOSMC, "fallback: %d", n);
        c = m;
        c.fallback.role = SMC_CTL_ROLE_SERVER;
        c.fallback.reason = 0;
        expect_bad("server notice", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, 0);
        {
                struct sockaddr_in6 s6 = { .sin6_family = AF_INET6, .sin6_port = htons(5), .sin6_scope_id = 2 };
                s6.sin6_addr = in6addr_loopback;
                c = m;
                CHECK(smc_ctl_addr_from_sockaddr(&c.fallback.local, (struct sockaddr *) &s6, sizeof(s6)) == 0 &&
                      smc_ctl_addr_from_sockaddr(&c.fallback.peer, (struct sockaddr *) &s6, sizeof(s6)) == 0, "v6");
                expect_bad("IPv6 notice", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, 0);
                c.fallback.peer.addr[10] = c.fallback.peer.addr[11] = 0xff; /* ::ffff:0.0.0.1 */
                memset(c.fallback.peer.addr, 0, 10);
                c.fallback.peer.addr[15] = 1;
                expect_bad("v4-mapped peer", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, 0);
                c.fallback.peer.addr[15] = 0; /* ::ffff:0.0.0.0 */
                expect_bad("v4-mapped any", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EBADMSG);
                memset(c.fallback.peer.addr, 0, 16); /* :: */
                expect_bad("v6 any", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EBADMSG);
        }

        /* malformed: lengths, version 1, fds, addresses, role, reason, direction */
        expect_bad("fallback short", &m, m.hdr.len - 4, NULL, 0, SMC_CTL_TO_DAEMON, -EBADMSG);
        c = m;
        c.hdr.len += 8;
        expect_bad("fallback long", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EBADMSG);
        c = m;
        c.hdr.version = 1;
        expect_bad("fallback of version 1", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EOPNOTSUPP);
        expect_bad("fallback with an fd", &m, m.hdr.len, pfd, 1, SMC_CTL_TO_DAEMON, -EBADF);
        expect_bad("fallback to a client", &m, m.hdr.len, NULL, 0, SMC_CTL_TO_CLIENT, -EOPNOTSUPP);
        c = m;
        c.fallback.local.port = 0;
        expect_bad("local port 0", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EBADMSG);
        c = m;
        c.fallback.peer.port = 0;
        expect_bad("peer port 0", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EBADMSG);
        c = m;
        set_addr4(&c.fallback.local, "0.0.0.0", 40000);
        expect_bad("local any", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EBADMSG);
        c = m;
        c.fallback.peer.family = AF_UNIX;
        expect_bad("peer family", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EBADMSG);
        c = m;
        c.fallback.peer.family = AF_UNSPEC;
        expect_bad("peer unspec", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EBADMSG);
        c = m;
        c.fallback.local.addr[7] = 1; /* garbage after an IPv4 address */
        expect_bad("v4 garbage", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EBADMSG);
        c = m;
        c.fallback.local.scope_id = 3; /* no scope on IPv4 */
        expect_bad("v4 scope", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EBADMSG);
        {
                struct sockaddr_in6 s6 = { .sin6_family = AF_INET6, .sin6_port = htons(80) };
                s6.sin6_addr = in6addr_loopback;
                c = m;
                smc_ctl_addr_from_sockaddr(&c.fallback.peer, (struct sockaddr *) &s6, sizeof(s6));
                expect_bad("families differ", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EBADMSG);
        }
        c = m;
        c.fallback.role = 2;
        expect_bad("role 2", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EBADMSG);
        c = m;
        c.fallback.reason = 0;
        expect_bad("client without reason", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EBADMSG);
        c.fallback.reason = 0x03990000; /* no such code */
        expect_bad("unknown reason", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EBADMSG);
        c.fallback.reason = SMCD_DECL_POLICY;
        expect_bad("smcd's own reason", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, 0);
        c = m;
        c.fallback.role = SMC_CTL_ROLE_SERVER; /* a server's reason is smcd's to say */
        expect_bad("server with a reason", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EBADMSG);

        close(pfd[0]);
        close(pfd[1]);
        fds_after = count_fds();
        CHECK(fds_after == fds_before, "fds open after the FALLBACK checks: %d, before %d", fds_after, fds_before);
}

/* FALLBACK_COUNT (v5): the library's batched count of connections it let fall back for
 * smcd's hints (smc-hints.h): reason, role, count range, reserved, version, direction. */
static void test_fallback_count(void) {
        union smc_ctl_msg m, r, c;
        int fds[SMC_CTL_MAX_FDS], n, fds_before = count_fds();

        CHECK(smc_ctl_msg_size(SMC_CTL_FALLBACK_COUNT) == 32 && smc_ctl_msg_size_v(SMC_CTL_FALLBACK_COUNT, 5) == 32 &&
              smc_ctl_msg_size_v(SMC_CTL_FALLBACK_COUNT, 4) == 0, "FALLBACK_COUNT sizes: v5 32, not in v4");
        smc_ctl_init(&m, SMC_CTL_FALLBACK_COUNT, 12);
        m.fallback_count.reason = SMCD_DECL_SHORTCONN;
        m.fallback_count.role = SMC_CTL_ROLE_SERVER;
        m.fallback_count.count = 235;
        CHECK(smc_ctl_send(sp[0], &m, NULL, 0, 0) == 0, "send fallback count");
        n = smc_ctl_recv(sp[1], &r, fds, SMC_CTL_TO_DAEMON, MSG_DONTWAIT);
        CHECK(n == 0 && r.hdr.type == SMC_CTL_FALLBACK_COUNT && r.fallback_count.count == 235 &&
              r.fallback_count.role == SMC_CTL_ROLE_SERVER && r.fallback_count.reason == SMCD_DECL_SHORTCONN,
              "fallback count: %d", n);
        c = m;
        c.fallback_count.count = SMC_CTL_FALLBACK_COUNT_MAX;
        expect_bad("the most connections", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, 0);
        c.fallback_count.count = SMC_CTL_FALLBACK_COUNT_MAX + 1;
        expect_bad("too many connections", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EBADMSG);
        c.fallback_count.count = 0;
        expect_bad("no connection", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EBADMSG);
        c = m;
        c.fallback_count.reason = SMCD_DECL_POLICY; /* smcd's to decide, never counted this way */
        expect_bad("another reason", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EBADMSG);
        c = m;
        c.fallback_count.role = 2;
        expect_bad("role 2", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EBADMSG);
        c = m;
        c.fallback_count.reserved = 1;
        expect_bad("reserved set", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EBADMSG);
        c = m;
        c.hdr.version = 4;
        expect_bad("fallback count of version 4", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EOPNOTSUPP);
        expect_bad("fallback count short", &m, m.hdr.len - 4, NULL, 0, SMC_CTL_TO_DAEMON, -EBADMSG);
        expect_bad("fallback count to a client", &m, m.hdr.len, NULL, 0, SMC_CTL_TO_CLIENT, -EOPNOTSUPP);
        CHECK(count_fds() == fds_before, "fds open after the FALLBACK_COUNT checks");
}

/* Version 3 (SMC-R, ctl-proto.h): CONNECT carries the client's TCP socket, the SMCR
 * request, the CONNECT_REPLY modes SMCR_PENDING and SMCR, LISTEN_REPLY's flags. */
static void make_smcr(union smc_ctl_msg *m, uint32_t role) {
        smc_ctl_init(m, SMC_CTL_SMCR, 12);
        m->smcr.role = role;
        m->smcr.sndbuf = 65536;
        m->smcr.rcvbuf = 131072;
        /* role server names the SMC-R listener it accepted from; role client 0 */
        m->smcr.listener_id = role == SMC_CTL_ROLE_SERVER ? 9 : 0;
}

/* NEW_CONN mode TCP (v3): an SMC-R handshake of role server that fell back; 1 fd
 * (the TCP socket), the reason, the addresses, nothing else. */
static void make_newconn_tcp(union smc_ctl_msg *m) {
        smc_ctl_init(m, SMC_CTL_NEW_CONN, 0);
        m->conn.mode = SMC_CTL_MODE_TCP;
        m->conn.fallback_reason = SMC_CLC_DECL_PEERDECL;
        set_addr4(&m->conn.local, "192.0.2.1", 80);
        set_addr4(&m->conn.peer, "192.0.2.7", 40000);
}

static void test_v3(void) {
        union smc_ctl_msg m, r, c;
        int fds[SMC_CTL_MAX_FDS], pfd[2], n, fds_before = 0, fds_after = 0;

        fds_before = count_fds();
        if (pipe(pfd) < 0)
                abort();
        int one[1] = { pfd[0] }, two[2] = { pfd[0], pfd[1] }, three[3] = { pfd[0], pfd[1], pfd[0] },
            four[4] = { pfd[0], pfd[1], pfd[0], pfd[1] };

        /* sizes of the v3 messages, and of the others in v3 */
        CHECK(smc_ctl_msg_size(SMC_CTL_SMCR) == 40 && smc_ctl_msg_size_v(SMC_CTL_SMCR, 3) == 40 &&
              smc_ctl_msg_size_v(SMC_CTL_SMCR, 2) == 0 && smc_ctl_msg_size_v(SMC_CTL_SMCR, 1) == 0,
              "SMCR sizes: v3 40, not in v1, v2");
        CHECK(offsetof(struct smc_ctl_smcr, listener_id) == 32, "SMCR listener_id at byte 32");
        CHECK(smc_ctl_msg_size_v(SMC_CTL_LISTEN_REPLY, 1) == 24 && smc_ctl_msg_size_v(SMC_CTL_LISTEN_REPLY, 2) == 24 &&
              smc_ctl_msg_size_v(SMC_CTL_LISTEN_REPLY, 3) == 32 && smc_ctl_msg_size(SMC_CTL_LISTEN_REPLY) == 32,
              "LISTEN_REPLY sizes: v1, v2 24, v3 32");
        CHECK(smc_ctl_msg_size_v(SMC_CTL_CONNECT_REPLY, 3) == 120 && smc_ctl_msg_size_v(SMC_CTL_NEW_CONN, 3) == 120 &&
              smc_ctl_msg_size_v(SMC_CTL_LISTEN, 3) == 56 && smc_ctl_msg_size_v(SMC_CTL_FALLBACK, 3) == 72,
              "v3 sizes of the v2 messages unchanged");
        CHECK(smc_ctl_init_v(&c, SMC_CTL_SMCR, 1, 2) == -EINVAL, "no SMCR in version 2");
        make_smcr(&m, SMC_CTL_ROLE_CLIENT);
        CHECK(m.hdr.version == 6 && m.hdr.len == 40 && m.smcr.listener_id == 0, "SMCR built in version 6");
        c = m;
        CHECK(smc_ctl_set_version(&c, 2) == -EINVAL && memcmp(&c, &m, sizeof(m)) == 0, "SMCR: set_version 2 refused");

        /* the number of fds: CONNECT by version, SMCR, the v3 modes */
        for (uint16_t v = 1; v <= 3; v++) {
                CHECK(smc_ctl_init_v(&c, SMC_CTL_CONNECT, 1, v) == 0 && smc_ctl_msg_nfds(&c) == (v >= 3 ? 1 : 0),
                      "CONNECT v%u: %d fds", v, smc_ctl_msg_nfds(&c));
                CHECK(smc_ctl_init_v(&c, SMC_CTL_LISTEN_REPLY, 1, v) == 0 && smc_ctl_msg_nfds(&c) == 1,
                      "LISTEN_REPLY v%u: 1 fd", v);
        }
        CHECK(smc_ctl_msg_nfds(&m) == 1, "SMCR: 1 fd");
        smc_ctl_init(&c, SMC_CTL_CONNECT_REPLY, 1);
        c.conn.mode = SMC_CTL_MODE_SMCR_PENDING;
        CHECK(smc_ctl_msg_nfds(&c) == 0, "SMCR_PENDING: no fds");
        smc_ctl_init(&c, SMC_CTL_CONNECT_REPLY, 1);
        c.conn.mode = SMC_CTL_MODE_TCP;
        CHECK(smc_ctl_msg_nfds(&c) == 0, "CONNECT_REPLY mode TCP: no fds");
        make_newconn_tcp(&c);
        CHECK(smc_ctl_msg_nfds(&c) == 1, "NEW_CONN mode TCP: 1 fd (the TCP socket)");
        make_conn(&c, SMC_CTL_NEW_CONN);
        c.conn.mode = SMC_CTL_MODE_SMCR;
        CHECK(smc_ctl_msg_nfds(&c) == 3, "NEW_CONN mode SMCR, rx memfd: 3 fds (%d)", smc_ctl_msg_nfds(&c));
        make_conn(&c, SMC_CTL_CONNECT_REPLY);
        c.conn.mode = SMC_CTL_MODE_SMCR;
        CHECK(smc_ctl_msg_nfds(&c) == 3, "SMCR mode, rx memfd: 3 fds (%d)", smc_ctl_msg_nfds(&c));
        c.conn.tx.flags = SMC_CTL_BUF_FD;
        CHECK(smc_ctl_msg_nfds(&c) == 4, "SMCR mode, both memfds: 4 fds");
        c.conn.mode = 4;
        CHECK(smc_ctl_msg_nfds(&c) == -EINVAL, "mode 4: -EINVAL");

        /* CONNECT: exactly 1 fd in v3, none in v1, v2 */
        smc_ctl_init(&m, SMC_CTL_CONNECT, 13);
        set_addr4(&m.connect.dst, "192.0.2.7", 443);
        set_addr4(&m.connect.src, "192.0.2.1", 0);
        m.connect.sndbuf = 32768;
        CHECK(m.hdr.version == 6 && m.hdr.len == 72, "CONNECT built in version 6");
        CHECK(smc_ctl_send(sp[0], &m, one, 1, 0) == 0, "send v3 connect");
        memset(&r, 0xa5, sizeof(r));
        n = smc_ctl_recv(sp[1], &r, fds, SMC_CTL_TO_DAEMON, MSG_DONTWAIT);
        CHECK(n == 1 && r.hdr.version == 6 && r.connect.dst.port == 443 && r.connect.sndbuf == 32768 &&
              r.connect.rcvbuf == 0 && fd_open(fds[0]), "v3 CONNECT with its TCP socket: %d", n);
        for (int i = 0; i < n && n > 0; i++)
                close(fds[i]);
        expect_bad("v3 CONNECT without an fd", &m, m.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EBADF);
        expect_bad("v3 CONNECT with 2 fds", &m, m.hdr.len, two, 2, SMC_CTL_TO_DAEMON, -EBADF);
        c = m;
        c.connect.dst.port = 0; /* the body is checked before the fds */
        expect_bad("v3 CONNECT to port 0", &c, c.hdr.len, one, 1, SMC_CTL_TO_DAEMON, -EBADMSG);
        for (uint16_t v = 1; v <= 2; v++) {
                c = m;
                CHECK(smc_ctl_set_version(&c, v) == 0 && c.hdr.len == 72, "CONNECT v%u", v);
                expect_bad("v1/v2 CONNECT with an fd", &c, c.hdr.len, one, 1, SMC_CTL_TO_DAEMON, -EBADF);
                expect_bad("v1/v2 CONNECT without fds", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, 0);
        }

        /* SMCR: role and listener id, reserved, fds, version, direction, length */
        make_smcr(&m, SMC_CTL_ROLE_CLIENT);
        CHECK(smc_ctl_send(sp[0], &m, one, 1, 0) == 0, "send SMCR");
        memset(&r, 0xa5, sizeof(r));
        n = smc_ctl_recv(sp[1], &r, fds, SMC_CTL_TO_DAEMON, MSG_DONTWAIT);
        CHECK(n == 1 && r.hdr.type == SMC_CTL_SMCR && r.hdr.seq == 12 && r.hdr.len == 40 &&
              r.smcr.role == SMC_CTL_ROLE_CLIENT && r.smcr.sndbuf == 65536 && r.smcr.rcvbuf == 131072 &&
              r.smcr.listener_id == 0 && fd_open(fds[0]), "SMCR client: %d", n);
        for (int i = 0; i < n && n > 0; i++)
                close(fds[i]);
        make_smcr(&c, SMC_CTL_ROLE_SERVER);
        c.smcr.listener_id = 0x8000000000000001ull; /* any id but 0: smcd looks it up */
        CHECK(smc_ctl_send(sp[0], &c, one, 1, 0) == 0, "send SMCR server");
        memset(&r, 0xa5, sizeof(r));
        n = smc_ctl_recv(sp[1], &r, fds, SMC_CTL_TO_DAEMON, MSG_DONTWAIT);
        CHECK(n == 1 && r.smcr.role == SMC_CTL_ROLE_SERVER && r.smcr.listener_id == 0x8000000000000001ull &&
              fd_open(fds[0]), "SMCR server with its listener id: %d", n);
        for (int i = 0; i < n && n > 0; i++)
                close(fds[i]);
        make_smcr(&c, SMC_CTL_ROLE_SERVER);
        c.smcr.sndbuf = c.smcr.rcvbuf = 0;
        expect_bad("SMCR server, default buffers", &c, c.hdr.len, one, 1, SMC_CTL_TO_DAEMON, 1);
        c.smcr.listener_id = UINT64_MAX;
        expect_bad("SMCR server, listener id 2^64-1", &c, c.hdr.len, one, 1, SMC_CTL_TO_DAEMON, 1);
        c.smcr.listener_id = 0;
        expect_bad("SMCR server without a listener id", &c, c.hdr.len, one, 1, SMC_CTL_TO_DAEMON, -EBADMSG);
        c = m;
        c.smcr.listener_id = 9;
        expect_bad("SMCR client with a listener id", &c, c.hdr.len, one, 1, SMC_CTL_TO_DAEMON, -EBADMSG);
        c.smcr.listener_id = 1ull << 63;
        expect_bad("SMCR client with a high listener id", &c, c.hdr.len, one, 1, SMC_CTL_TO_DAEMON, -EBADMSG);
        c = m;
        c.smcr.role = 2;
        c.smcr.listener_id = 9;
        expect_bad("SMCR role 2 with a listener id", &c, c.hdr.len, one, 1, SMC_CTL_TO_DAEMON, -EBADMSG);
        make_smcr(&c, SMC_CTL_ROLE_SERVER);
        c.smcr.reserved = 1;
        expect_bad("SMCR server, reserved", &c, c.hdr.len, one, 1, SMC_CTL_TO_DAEMON, -EBADMSG);
        make_smcr(&c, SMC_CTL_ROLE_SERVER);
        expect_bad("SMCR server without an fd", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EBADF);
        c.hdr.len = 32; /* the old 32-byte layout, without the listener id */
        expect_bad("SMCR server, 32 bytes", &c, 32, one, 1, SMC_CTL_TO_DAEMON, -EBADMSG);
        c = m;
        c.smcr.role = 2;
        expect_bad("SMCR role 2", &c, c.hdr.len, one, 1, SMC_CTL_TO_DAEMON, -EBADMSG);
        c.smcr.role = UINT32_MAX;
        expect_bad("SMCR role -1", &c, c.hdr.len, one, 1, SMC_CTL_TO_DAEMON, -EBADMSG);
        c = m;
        c.smcr.reserved = 1;
        expect_bad("SMCR reserved", &c, c.hdr.len, one, 1, SMC_CTL_TO_DAEMON, -EBADMSG);
        expect_bad("SMCR without an fd", &m, m.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EBADF);
        expect_bad("SMCR with 2 fds", &m, m.hdr.len, two, 2, SMC_CTL_TO_DAEMON, -EBADF);
        c = m;
        c.hdr.version = 2;
        expect_bad("SMCR of version 2", &c, c.hdr.len, one, 1, SMC_CTL_TO_DAEMON, -EOPNOTSUPP);
        c.hdr.version = 1;
        expect_bad("SMCR of version 1", &c, c.hdr.len, one, 1, SMC_CTL_TO_DAEMON, -EOPNOTSUPP);
        c.hdr.version = 7;
        expect_bad("SMCR of version 7", &c, c.hdr.len, one, 1, SMC_CTL_TO_DAEMON, -EPROTONOSUPPORT);
        expect_bad("SMCR to a client", &m, m.hdr.len, one, 1, SMC_CTL_TO_CLIENT, -EOPNOTSUPP);
        expect_bad("SMCR short", &m, m.hdr.len - 4, one, 1, SMC_CTL_TO_DAEMON, -EBADMSG);
        c = m;
        c.hdr.len = 32; /* the 32-byte layout before listener_id: header and datagram agree */
        expect_bad("SMCR of 32 bytes", &c, 32, one, 1, SMC_CTL_TO_DAEMON, -EBADMSG);
        c = m;
        c.hdr.len += 8;
        expect_bad("SMCR long", &c, c.hdr.len, one, 1, SMC_CTL_TO_DAEMON, -EBADMSG);

        /* CONNECT_REPLY mode SMCR_PENDING: nothing but the mode, no fds, v3 only,
         * CONNECT_REPLY only. It answers a CONNECT (connect over TCP, then SMCR) and,
         * the same message with the same checks, a role-server SMCR at once (the
         * result comes later as NEW_CONN on the listener's accept channel). */
        smc_ctl_init(&m, SMC_CTL_CONNECT_REPLY, 14);
        m.conn.mode = SMC_CTL_MODE_SMCR_PENDING;
        CHECK(smc_ctl_send(sp[0], &m, NULL, 0, 0) == 0, "send SMCR_PENDING");
        n = smc_ctl_recv(sp[1], &r, fds, SMC_CTL_TO_CLIENT, MSG_DONTWAIT);
        CHECK(n == 0 && r.hdr.seq == 14 && r.conn.mode == SMC_CTL_MODE_SMCR_PENDING, "SMCR_PENDING: %d", n);
        make_smcr(&c, SMC_CTL_ROLE_SERVER);
        smc_ctl_init(&r, SMC_CTL_CONNECT_REPLY, c.hdr.seq); /* what smcd answers that SMCR */
        r.conn.mode = SMC_CTL_MODE_SMCR_PENDING;
        c = r;
        memset(&r, 0xa5, sizeof(r));
        CHECK(smc_ctl_send(sp[0], &c, NULL, 0, 0) == 0, "send SMCR_PENDING to a server SMCR");
        n = smc_ctl_recv(sp[1], &r, fds, SMC_CTL_TO_CLIENT, MSG_DONTWAIT);
        CHECK(n == 0 && r.hdr.seq == 12 && r.hdr.len == 120 && r.conn.mode == SMC_CTL_MODE_SMCR_PENDING &&
              r.conn.conn_id == 0 && r.conn.fallback_reason == 0, "SMCR_PENDING answering a server SMCR: %d", n);
        c.conn.local.family = AF_INET; /* the listener's address is not in it: NEW_CONN brings it */
        expect_bad("server SMCR_PENDING with a local family", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_CLIENT, -EBADMSG);
        expect_bad("SMCR_PENDING with an fd", &m, m.hdr.len, one, 1, SMC_CTL_TO_CLIENT, -EBADF);
        c = m;
        c.conn.conn_id = 5;
        expect_bad("SMCR_PENDING with a conn id", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_CLIENT, -EBADMSG);
        c = m;
        c.conn.fallback_reason = SMC_CLC_DECL_PEERNOSMC;
        expect_bad("SMCR_PENDING with a reason", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_CLIENT, -EBADMSG);
        c = m;
        c.conn.rx = (struct smc_ctl_buf) { .id = 1, .size = 65536, .flags = 0 };
        expect_bad("SMCR_PENDING with an rx buffer", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_CLIENT, -EBADMSG);
        c = m;
        c.conn.tx.size = 16384;
        expect_bad("SMCR_PENDING with a tx size", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_CLIENT, -EBADMSG);
        c = m;
        c.conn.tx.flags = SMC_CTL_BUF_FD;
        expect_bad("SMCR_PENDING with a tx memfd flag", &c, c.hdr.len, one, 1, SMC_CTL_TO_CLIENT, -EBADMSG);
        c = m;
        set_addr4(&c.conn.local, "127.0.0.1", 80);
        expect_bad("SMCR_PENDING with a local address", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_CLIENT, -EBADMSG);
        c = m;
        c.conn.peer.port = 80;
        expect_bad("SMCR_PENDING with a peer port", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_CLIENT, -EBADMSG);
        c = m;
        c.conn.params.busy_poll_us = 1;
        expect_bad("SMCR_PENDING with busy_poll", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_CLIENT, -EBADMSG);
        c = m;
        c.conn.params.autocork_size = 4096;
        expect_bad("SMCR_PENDING with autocork", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_CLIENT, -EBADMSG);
        c = m;
        CHECK(smc_ctl_set_version(&c, 2) == 0 && c.conn.mode == SMC_CTL_MODE_SMCR_PENDING, "v2 SMCR_PENDING built");
        expect_bad("SMCR_PENDING in version 2", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_CLIENT, -EBADMSG);
        CHECK(smc_ctl_set_version(&c, 1) == 0, "v1 SMCR_PENDING built");
        expect_bad("SMCR_PENDING in version 1", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_CLIENT, -EBADMSG);
        smc_ctl_init(&c, SMC_CTL_NEW_CONN, 15);
        c.conn.mode = SMC_CTL_MODE_SMCR_PENDING;
        expect_bad("SMCR_PENDING as NEW_CONN", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_CLIENT, -EBADMSG);
        expect_bad("SMCR_PENDING to smcd", &m, m.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EOPNOTSUPP);

        /* CONNECT_REPLY mode SMCR: body and fds as SMC-D, CONNECT_REPLY only, v3 only */
        make_conn(&m, SMC_CTL_CONNECT_REPLY);
        m.conn.mode = SMC_CTL_MODE_SMCR;
        m.conn.rx.flags = m.conn.tx.flags = SMC_CTL_BUF_FD;
        m.conn.params.busy_poll_us = 50;
        CHECK(smc_ctl_send(sp[0], &m, four, 4, 0) == 0, "send SMCR mode");
        n = smc_ctl_recv(sp[1], &r, fds, SMC_CTL_TO_CLIENT, MSG_DONTWAIT);
        CHECK(n == 4 && r.hdr.version == 6 && r.conn.mode == SMC_CTL_MODE_SMCR && r.conn.conn_id == 42 &&
              r.conn.params.busy_poll_us == 50, "SMCR mode with both memfds: %d", n);
        for (int i = 0; i < n && n > 0; i++)
                close(fds[i]);
        expect_bad("SMCR mode, 3 fds for 4", &m, m.hdr.len, three, 3, SMC_CTL_TO_CLIENT, -EBADF);
        c = m;
        c.conn.tx.flags = 0;
        expect_bad("SMCR mode, rx memfd only", &c, c.hdr.len, three, 3, SMC_CTL_TO_CLIENT, 3);
        c.conn.rx.flags = 0;
        expect_bad("SMCR mode, no memfds", &c, c.hdr.len, two, 2, SMC_CTL_TO_CLIENT, 2);
        expect_bad("SMCR mode, no memfds but 3 fds", &c, c.hdr.len, three, 3, SMC_CTL_TO_CLIENT, -EBADF);
        c = m;
        c.conn.conn_id = 0;
        expect_bad("SMCR mode, conn id 0", &c, c.hdr.len, four, 4, SMC_CTL_TO_CLIENT, -EBADMSG);
        c = m;
        c.conn.fallback_reason = SMC_CLC_DECL_PEERNOSMC;
        expect_bad("SMCR mode with a reason", &c, c.hdr.len, four, 4, SMC_CTL_TO_CLIENT, -EBADMSG);
        c = m;
        c.conn.rx.size = 65535;
        expect_bad("SMCR mode, bad rx size", &c, c.hdr.len, four, 4, SMC_CTL_TO_CLIENT, -EBADMSG);
        c = m;
        c.conn.tx.id = c.conn.rx.id;
        expect_bad("SMCR mode, same buffer twice", &c, c.hdr.len, four, 4, SMC_CTL_TO_CLIENT, -EBADMSG);
        c = m;
        c.conn.params.autocork_size = SMC_CTL_AUTOCORK_MAX + 1;
        expect_bad("SMCR mode, autocork too big", &c, c.hdr.len, four, 4, SMC_CTL_TO_CLIENT, -EBADMSG);
        c = m;
        c.conn.peer.family = AF_UNIX;
        expect_bad("SMCR mode, bad peer family", &c, c.hdr.len, four, 4, SMC_CTL_TO_CLIENT, -EBADMSG);
        /* NEW_CONN mode SMCR (v3): a role-server SMC-R handshake that succeeded; body
         * and fds as SMC-D, the same checks */
        c = m;
        c.hdr.type = SMC_CTL_NEW_CONN;
        c.hdr.seq = 0;
        CHECK(smc_ctl_send(sp[0], &c, four, 4, 0) == 0, "send NEW_CONN SMCR");
        memset(&r, 0xa5, sizeof(r));
        n = smc_ctl_recv(sp[1], &r, fds, SMC_CTL_TO_CLIENT, MSG_DONTWAIT);
        CHECK(n == 4 && r.hdr.type == SMC_CTL_NEW_CONN && r.hdr.version == 6 && r.conn.mode == SMC_CTL_MODE_SMCR &&
              r.conn.conn_id == 42 && r.conn.peer.port == 40000 && r.conn.params.busy_poll_us == 50 &&
              fd_open(fds[0]) && fd_open(fds[3]), "NEW_CONN mode SMCR with both memfds: %d", n);
        for (int i = 0; i < n && n > 0; i++)
                close(fds[i]);
        union smc_ctl_msg nc = c;
        c.conn.tx.flags = 0;
        expect_bad("NEW_CONN SMCR, rx memfd only", &c, c.hdr.len, three, 3, SMC_CTL_TO_CLIENT, 3);
        expect_bad("NEW_CONN SMCR, 4 fds for 3", &c, c.hdr.len, four, 4, SMC_CTL_TO_CLIENT, -EBADF);
        expect_bad("NEW_CONN SMCR, 1 fd", &c, c.hdr.len, one, 1, SMC_CTL_TO_CLIENT, -EBADF);
        c = nc;
        c.conn.conn_id = 0;
        expect_bad("NEW_CONN SMCR, conn id 0", &c, c.hdr.len, four, 4, SMC_CTL_TO_CLIENT, -EBADMSG);
        c = nc;
        c.conn.fallback_reason = SMC_CLC_DECL_PEERDECL;
        expect_bad("NEW_CONN SMCR with a reason", &c, c.hdr.len, four, 4, SMC_CTL_TO_CLIENT, -EBADMSG);
        c = nc;
        c.conn.tx.size = 3u << 14;
        expect_bad("NEW_CONN SMCR, bad tx size", &c, c.hdr.len, four, 4, SMC_CTL_TO_CLIENT, -EBADMSG);
        c = nc;
        c.conn.rx.id = 0;
        expect_bad("NEW_CONN SMCR, rx id 0", &c, c.hdr.len, four, 4, SMC_CTL_TO_CLIENT, -EBADMSG);
        c = nc;
        c.conn.params.busy_poll_us = SMC_CTL_BUSY_POLL_MAX_US + 1;
        expect_bad("NEW_CONN SMCR, busy_poll too big", &c, c.hdr.len, four, 4, SMC_CTL_TO_CLIENT, -EBADMSG);
        c = nc;
        c.conn.local.family = AF_UNSPEC;
        expect_bad("NEW_CONN SMCR, no local family", &c, c.hdr.len, four, 4, SMC_CTL_TO_CLIENT, -EBADMSG);
        expect_bad("NEW_CONN SMCR to smcd", &nc, nc.hdr.len, four, 4, SMC_CTL_TO_DAEMON, -EOPNOTSUPP);
        c = nc;
        CHECK(smc_ctl_set_version(&c, 2) == 0, "v2 NEW_CONN SMCR built");
        expect_bad("NEW_CONN SMCR in version 2", &c, c.hdr.len, four, 4, SMC_CTL_TO_CLIENT, -EBADMSG);
        CHECK(smc_ctl_set_version(&c, 1) == 0, "v1 NEW_CONN SMCR built");
        expect_bad("NEW_CONN SMCR in version 1", &c, c.hdr.len, four, 4, SMC_CTL_TO_CLIENT, -EBADMSG);
        c = m;
        CHECK(smc_ctl_set_version(&c, 2) == 0, "v2 SMCR mode built");
        expect_bad("SMCR mode in version 2", &c, c.hdr.len, four, 4, SMC_CTL_TO_CLIENT, -EBADMSG);
        CHECK(smc_ctl_set_version(&c, 1) == 0, "v1 SMCR mode built");
        expect_bad("SMCR mode in version 1", &c, c.hdr.len, four, 4, SMC_CTL_TO_CLIENT, -EBADMSG);
        /* SMC-D and TCP modes are unchanged in v3 */
        make_conn(&c, SMC_CTL_NEW_CONN);
        expect_bad("v3 NEW_CONN SMC-D", &c, c.hdr.len, three, 3, SMC_CTL_TO_CLIENT, 3);
        smc_ctl_init(&c, SMC_CTL_CONNECT_REPLY, 16);
        c.conn.fallback_reason = SMC_CLC_DECL_NOSMCRDEV;
        expect_bad("v3 TCP fallback", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_CLIENT, 0);
        c.conn.params.busy_poll_us = 1;
        expect_bad("v3 TCP fallback with params", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_CLIENT, -EBADMSG);
        smc_ctl_init(&c, SMC_CTL_CONNECT_REPLY, 16);
        c.conn.fallback_reason = SMC_CLC_DECL_PEERNOSMC;
        expect_bad("v3 CONNECT_REPLY TCP with an fd", &c, c.hdr.len, one, 1, SMC_CTL_TO_CLIENT, -EBADF);

        /* NEW_CONN mode TCP (v3 only): a role-server SMC-R handshake fell back; 1 fd,
         * the TCP socket; reason != 0, conn id 0, no buffers, valid addresses, no
         * params */
        make_newconn_tcp(&m);
        CHECK(m.hdr.version == 6 && m.hdr.len == 120, "NEW_CONN TCP built in version 6");
        CHECK(smc_ctl_send(sp[0], &m, one, 1, 0) == 0, "send NEW_CONN TCP");
        memset(&r, 0xa5, sizeof(r));
        n = smc_ctl_recv(sp[1], &r, fds, SMC_CTL_TO_CLIENT, MSG_DONTWAIT);
        CHECK(n == 1 && r.hdr.type == SMC_CTL_NEW_CONN && r.hdr.version == 6 && r.conn.mode == SMC_CTL_MODE_TCP &&
              r.conn.fallback_reason == SMC_CLC_DECL_PEERDECL && r.conn.conn_id == 0 && r.conn.local.port == 80 &&
              r.conn.peer.port == 40000 && r.conn.rx.id == 0 && r.conn.params.busy_poll_us == 0 && fd_open(fds[0]),
              "NEW_CONN TCP with its socket: %d", n);
        for (int i = 0; i < n && n > 0; i++)
                close(fds[i]);
        {
                struct sockaddr_in6 s6 = { .sin6_family = AF_INET6, .sin6_port = htons(443), .sin6_scope_id = 3 };
                s6.sin6_addr = in6addr_loopback;
                c = m;
                CHECK(smc_ctl_addr_from_sockaddr(&c.conn.local, (struct sockaddr *) &s6, sizeof(s6)) == 0 &&
                      smc_ctl_addr_from_sockaddr(&c.conn.peer, (struct sockaddr *) &s6, sizeof(s6)) == 0, "v6");
                expect_bad("NEW_CONN TCP, IPv6", &c, c.hdr.len, one, 1, SMC_CTL_TO_CLIENT, 1);
        }
        c = m;
        c.conn.fallback_reason = SMC_CLC_DECL_NOSMCRDEV;
        expect_bad("NEW_CONN TCP, another reason", &c, c.hdr.len, one, 1, SMC_CTL_TO_CLIENT, 1);
        /* the fd count */
        expect_bad("NEW_CONN TCP without its socket", &m, m.hdr.len, NULL, 0, SMC_CTL_TO_CLIENT, -EBADF);
        expect_bad("NEW_CONN TCP with 2 fds", &m, m.hdr.len, two, 2, SMC_CTL_TO_CLIENT, -EBADF);
        expect_bad("NEW_CONN TCP with 4 fds", &m, m.hdr.len, four, 4, SMC_CTL_TO_CLIENT, -EBADF);
        /* every field that must be empty, the reason, the addresses, the params */
        c = m;
        c.conn.fallback_reason = 0;
        expect_bad("NEW_CONN TCP without a reason", &c, c.hdr.len, one, 1, SMC_CTL_TO_CLIENT, -EBADMSG);
        c = m;
        c.conn.conn_id = 42;
        expect_bad("NEW_CONN TCP with a conn id", &c, c.hdr.len, one, 1, SMC_CTL_TO_CLIENT, -EBADMSG);
        c = m;
        c.conn.rx.id = 1;
        expect_bad("NEW_CONN TCP with an rx id", &c, c.hdr.len, one, 1, SMC_CTL_TO_CLIENT, -EBADMSG);
        c = m;
        c.conn.rx.size = 65536;
        expect_bad("NEW_CONN TCP with an rx size", &c, c.hdr.len, one, 1, SMC_CTL_TO_CLIENT, -EBADMSG);
        c = m;
        c.conn.rx.flags = SMC_CTL_BUF_FD;
        expect_bad("NEW_CONN TCP with an rx memfd flag", &c, c.hdr.len, one, 1, SMC_CTL_TO_CLIENT, -EBADMSG);
        expect_bad("NEW_CONN TCP with an rx memfd flag and 2 fds", &c, c.hdr.len, two, 2, SMC_CTL_TO_CLIENT,
                   -EBADMSG);
        c = m;
        c.conn.tx.id = 2;
        expect_bad("NEW_CONN TCP with a tx id", &c, c.hdr.len, one, 1, SMC_CTL_TO_CLIENT, -EBADMSG);
        c = m;
        c.conn.tx.size = 16384;
        expect_bad("NEW_CONN TCP with a tx size", &c, c.hdr.len, one, 1, SMC_CTL_TO_CLIENT, -EBADMSG);
        c = m;
        c.conn.tx.flags = 0x10;
        expect_bad("NEW_CONN TCP with tx flags", &c, c.hdr.len, one, 1, SMC_CTL_TO_CLIENT, -EBADMSG);
        c = m;
        c.conn.rx = (struct smc_ctl_buf) { .id = 1, .size = 65536, .flags = SMC_CTL_BUF_FD };
        c.conn.tx = (struct smc_ctl_buf) { .id = 2, .size = 16384, .flags = SMC_CTL_BUF_FD };
        expect_bad("NEW_CONN TCP with both buffers", &c, c.hdr.len, one, 1, SMC_CTL_TO_CLIENT, -EBADMSG);
        c = m;
        c.conn.params.busy_poll_us = 1;
        expect_bad("NEW_CONN TCP with busy_poll", &c, c.hdr.len, one, 1, SMC_CTL_TO_CLIENT, -EBADMSG);
        c = m;
        c.conn.params.autocork_size = 4096;
        expect_bad("NEW_CONN TCP with autocork", &c, c.hdr.len, one, 1, SMC_CTL_TO_CLIENT, -EBADMSG);
        expect_bad_addrs("NEW_CONN TCP", &m, offsetof(struct smc_ctl_conn, local), offsetof(struct smc_ctl_conn, peer),
                         one, 1, SMC_CTL_TO_CLIENT);
        /* direction, lengths */
        expect_bad("NEW_CONN TCP to smcd", &m, m.hdr.len, one, 1, SMC_CTL_TO_DAEMON, -EOPNOTSUPP);
        expect_bad("NEW_CONN TCP short", &m, m.hdr.len - 8, one, 1, SMC_CTL_TO_CLIENT, -EBADMSG);
        c = m;
        c.hdr.len = 112; /* v1 length with version 3 */
        expect_bad("NEW_CONN TCP with the v1 length", &c, 112, one, 1, SMC_CTL_TO_CLIENT, -EBADMSG);
        /* not in version 1 or 2: there a NEW_CONN is SMC-D only (with or without the fd) */
        for (uint16_t v = 1; v <= 2; v++) {
                c = m;
                CHECK(smc_ctl_set_version(&c, v) == 0 && c.hdr.version == v, "NEW_CONN TCP v%u built", v);
                expect_bad("NEW_CONN TCP in version 1/2 with its socket", &c, c.hdr.len, one, 1, SMC_CTL_TO_CLIENT,
                           -EBADMSG);
                expect_bad("NEW_CONN TCP in version 1/2 without an fd", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_CLIENT,
                           -EBADMSG);
        }

        /* LISTEN_REPLY: flags (SMC_CTL_LISTEN_SMCR only) and reserved in v3 (sent
         * as version 5: 1 fd; version 6's 2 fds are below) */
        smc_ctl_init_v(&m, SMC_CTL_LISTEN_REPLY, 17, 5);
        m.listen_reply.listener_id = 9;
        m.listen_reply.flags = SMC_CTL_LISTEN_SMCR;
        CHECK(m.hdr.len == 32, "v3 LISTEN_REPLY is 32 bytes");
        CHECK(smc_ctl_send(sp[0], &m, one, 1, 0) == 0, "send v3 LISTEN_REPLY");
        n = smc_ctl_recv(sp[1], &r, fds, SMC_CTL_TO_CLIENT, MSG_DONTWAIT);
        CHECK(n == 1 && r.listen_reply.listener_id == 9 && r.listen_reply.flags == SMC_CTL_LISTEN_SMCR,
              "v3 LISTEN_REPLY with SMC_CTL_LISTEN_SMCR: %d", n);
        for (int i = 0; i < n && n > 0; i++)
                close(fds[i]);
        c = m;
        c.listen_reply.flags = 0;
        expect_bad("v3 LISTEN_REPLY without flags", &c, c.hdr.len, one, 1, SMC_CTL_TO_CLIENT, 1);
        c.listen_reply.flags = 0x10;
        expect_bad("v3 LISTEN_REPLY unknown flag", &c, c.hdr.len, one, 1, SMC_CTL_TO_CLIENT, -EBADMSG);
        c.listen_reply.flags = SMC_CTL_LISTEN_SMCR | 0x80000000u;
        expect_bad("v3 LISTEN_REPLY unknown high flag", &c, c.hdr.len, one, 1, SMC_CTL_TO_CLIENT, -EBADMSG);
        c = m;
        c.listen_reply.reserved = 1;
        expect_bad("v3 LISTEN_REPLY reserved", &c, c.hdr.len, one, 1, SMC_CTL_TO_CLIENT, -EBADMSG);
        c = m;
        c.listen_reply.listener_id = 0;
        expect_bad("v3 LISTEN_REPLY id 0", &c, c.hdr.len, one, 1, SMC_CTL_TO_CLIENT, -EBADMSG);
        expect_bad("v3 LISTEN_REPLY without its fd", &m, m.hdr.len, NULL, 0, SMC_CTL_TO_CLIENT, -EBADF);
        c = m;
        c.hdr.len = 24; /* v2 length with version 3 */
        expect_bad("v3 LISTEN_REPLY with the v2 length", &c, 24, one, 1, SMC_CTL_TO_CLIENT, -EBADMSG);
        c = m;
        c.hdr.version = 2; /* v3 length with version 2 */
        expect_bad("v2 LISTEN_REPLY with the v3 length", &c, 32, one, 1, SMC_CTL_TO_CLIENT, -EBADMSG);
        /* set_version: 24 bytes in v1 / v2, the flags left out (zeroed); back to 32 */
        c = m;
        c.listen_reply.reserved = 7;
        CHECK(smc_ctl_set_version(&c, 2) == 0 && c.hdr.version == 2 && c.hdr.len == 24 && c.listen_reply.flags == 0 &&
              c.listen_reply.reserved == 0 && c.listen_reply.listener_id == 9, "LISTEN_REPLY set_version 2: 24 bytes");
        memset(&r, 0xa5, sizeof(r));
        CHECK(smc_ctl_send(sp[0], &c, one, 1, 0) == 0, "send v2 LISTEN_REPLY");
        n = smc_ctl_recv(sp[1], &r, fds, SMC_CTL_TO_CLIENT, MSG_DONTWAIT);
        CHECK(n == 1 && r.hdr.version == 2 && r.hdr.len == 24 && r.listen_reply.listener_id == 9 &&
              r.listen_reply.flags == 0 && r.listen_reply.reserved == 0, "v2 LISTEN_REPLY: %d, flags read 0", n);
        for (int i = 0; i < n && n > 0; i++)
                close(fds[i]);
        CHECK(smc_ctl_set_version(&c, 1) == 0 && c.hdr.len == 24, "LISTEN_REPLY set_version 1: 24 bytes");
        expect_bad("v1 LISTEN_REPLY", &c, c.hdr.len, one, 1, SMC_CTL_TO_CLIENT, 1);
        c.listen_reply.flags = SMC_CTL_LISTEN_SMCR; /* stale bytes past a v1 message */
        CHECK(smc_ctl_set_version(&c, 3) == 0 && c.hdr.version == 3 && c.hdr.len == 32 && c.listen_reply.flags == 0 &&
              c.listen_reply.listener_id == 9, "LISTEN_REPLY set_version 1 -> 3: 32 bytes, flags zero");
        CHECK(smc_ctl_init_v(&c, SMC_CTL_LISTEN_REPLY, 1, 2) == 0 && c.hdr.len == 24, "init_v LISTEN_REPLY 2: 24");

        close(pfd[0]);
        close(pfd[1]);
        fds_after = count_fds();
        CHECK(fds_after == fds_before, "fds open after the v3 checks: %d, before %d", fds_after, fds_before);
}

/* REREG / REREG_REPLY (v3 only; ctl-proto.h): an SMC-D endpoint of an earlier smcd. */
static void make_rereg(union smc_ctl_msg *m) {
        smc_ctl_init(m, SMC_CTL_REREG, 21);
        m->rereg.conn_id = 0x0123456789abcdefull;
        m->rereg.rx_token = 0x5ec0de0000000001ull;
        m->rereg.tx_token = 0x5ec0de0000000002ull;
        m->rereg.role = SMC_CTL_ROLE_CLIENT;
        m->rereg.instance = 0x9e3779b9u;
        m->rereg.rx_size = 65536;
        m->rereg.tx_size = 16384;
        set_addr4(&m->rereg.local, "127.0.0.1", 40000);
        set_addr4(&m->rereg.peer, "127.0.0.1", 8080);
}

static void test_rereg(void) {
        union smc_ctl_msg m, r, c;
        int fds[SMC_CTL_MAX_FDS], pfd[2], n, fds_before = 0, fds_after = 0;

        fds_before = count_fds();
        if (pipe(pfd) < 0)
                abort();
        int one[1] = { pfd[0] };

        /* layout and sizes: v3 only */
        CHECK(sizeof(struct smc_ctl_rereg) == 104 && offsetof(struct smc_ctl_rereg, conn_id) == 16 &&
              offsetof(struct smc_ctl_rereg, rx_token) == 24 && offsetof(struct smc_ctl_rereg, tx_token) == 32 &&
              offsetof(struct smc_ctl_rereg, role) == 40 && offsetof(struct smc_ctl_rereg, instance) == 44 &&
              offsetof(struct smc_ctl_rereg, rx_size) == 48 && offsetof(struct smc_ctl_rereg, tx_size) == 52 &&
              offsetof(struct smc_ctl_rereg, local) == 56 && offsetof(struct smc_ctl_rereg, peer) == 80,
              "REREG layout (104 bytes)");
        CHECK(sizeof(struct smc_ctl_rereg_reply) == 24 && offsetof(struct smc_ctl_rereg_reply, conn_id) == 16,
              "REREG_REPLY layout (24 bytes)");
        CHECK(offsetof(struct smc_ctl_hello_reply, instance) == 20 && sizeof(struct smc_ctl_hello_reply) == 32,
              "HELLO_REPLY.instance after version, size unchanged");
        CHECK(SMC_CTL_REREG == 16 && SMC_CTL_REREG_REPLY == 17, "REREG types 16, 17");
        CHECK(smc_ctl_msg_size(SMC_CTL_REREG) == 104 && smc_ctl_msg_size_v(SMC_CTL_REREG, 3) == 104 &&
              smc_ctl_msg_size_v(SMC_CTL_REREG, 2) == 0 && smc_ctl_msg_size_v(SMC_CTL_REREG, 1) == 0 &&
              smc_ctl_msg_size_v(SMC_CTL_REREG, 7) == 0 && smc_ctl_msg_size_v(SMC_CTL_REREG, 0) == 0,
              "REREG sizes: v3 104, not in v1, v2");
        CHECK(smc_ctl_msg_size(SMC_CTL_REREG_REPLY) == 24 && smc_ctl_msg_size_v(SMC_CTL_REREG_REPLY, 3) == 24 &&
              smc_ctl_msg_size_v(SMC_CTL_REREG_REPLY, 2) == 0 && smc_ctl_msg_size_v(SMC_CTL_REREG_REPLY, 1) == 0,
              "REREG_REPLY sizes: v3 24, not in v1, v2");
        CHECK(smc_ctl_init_v(&c, SMC_CTL_REREG, 1, 2) == -EINVAL && smc_ctl_init_v(&c, SMC_CTL_REREG_REPLY, 1, 1) == -EINVAL,
              "no REREG / REREG_REPLY in version 1, 2");
        make_rereg(&m);
        CHECK(m.hdr.version == 6 && m.hdr.len == 104 && smc_ctl_msg_nfds(&m) == 0, "REREG built in version 6, no fds");
        c = m;
        CHECK(smc_ctl_set_version(&c, 2) == -EINVAL && memcmp(&c, &m, sizeof(m)) == 0, "REREG: set_version 2 refused");

        /* valid REREGs round-trip */
        CHECK(smc_ctl_send(sp[0], &m, NULL, 0, 0) == 0, "send REREG");
        memset(&r, 0xa5, sizeof(r));
        n = smc_ctl_recv(sp[1], &r, fds, SMC_CTL_TO_DAEMON, MSG_DONTWAIT);
        CHECK(n == 0 && r.hdr.type == SMC_CTL_REREG && r.hdr.seq == 21 && r.rereg.conn_id == m.rereg.conn_id &&
              r.rereg.rx_token == m.rereg.rx_token && r.rereg.tx_token == m.rereg.tx_token &&
              r.rereg.role == SMC_CTL_ROLE_CLIENT && r.rereg.instance == 0x9e3779b9u && r.rereg.rx_size == 65536 &&
              r.rereg.tx_size == 16384 && r.rereg.local.port == 40000 && r.rereg.peer.port == 8080,
              "REREG client: %d", n);
        c = m;
        c.rereg.role = SMC_CTL_ROLE_SERVER;
        c.rereg.rx_size = 1u << 20; /* the limits: 16 KiB .. 1 MiB */
        c.rereg.tx_size = 16384;
        expect_bad("REREG server, 1 MiB / 16 KiB", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, 0);
        /* tokens: an smcd that tells an instance writes two different ones */
        c = m;
        c.rereg.rx_token = 0;
        expect_bad("REREG rx_token 0", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EBADMSG);
        c = m;
        c.rereg.tx_token = 0;
        expect_bad("REREG tx_token 0", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EBADMSG);
        c = m;
        c.rereg.tx_token = c.rereg.rx_token;
        expect_bad("REREG with equal tokens", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EBADMSG);
        /* an established connection: ports, one family */
        c = m;
        c.rereg.local.port = 0;
        expect_bad("REREG local port 0", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EBADMSG);
        c = m;
        c.rereg.peer.port = 0;
        expect_bad("REREG peer port 0", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EBADMSG);
        c = m;
        memset(&c.rereg.local, 0, sizeof(c.rereg.local));
        c.rereg.local.family = AF_INET6;
        c.rereg.local.port = 40000;
        c.rereg.local.addr[15] = 1;
        expect_bad("REREG IPv6 local, IPv4 peer", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EBADMSG);
        c = m;
        c.rereg.instance = UINT32_MAX;
        c.rereg.conn_id = UINT64_MAX;
        expect_bad("REREG instance 2^32-1, id 2^64-1", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, 0);
        {
                struct sockaddr_in6 s6 = { .sin6_family = AF_INET6, .sin6_port = htons(443), .sin6_scope_id = 2 };
                s6.sin6_addr = in6addr_loopback;
                c = m;
                CHECK(smc_ctl_addr_from_sockaddr(&c.rereg.local, (struct sockaddr *) &s6, sizeof(s6)) == 0 &&
                      smc_ctl_addr_from_sockaddr(&c.rereg.peer, (struct sockaddr *) &s6, sizeof(s6)) == 0, "v6");
                expect_bad("REREG, IPv6 with a scope", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, 0);
        }

        /* each invalid field */
        c = m;
        c.rereg.conn_id = 0;
        expect_bad("REREG conn_id 0", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EBADMSG);
        c = m;
        c.rereg.instance = 0;
        expect_bad("REREG instance 0", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EBADMSG);
        c = m;
        c.rereg.role = 2;
        expect_bad("REREG role 2", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EBADMSG);
        c.rereg.role = UINT32_MAX;
        expect_bad("REREG role -1", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EBADMSG);
        static const uint32_t bad_sizes[] = { 0, 1, 8192, 16383, 16385, 65537, 98304, (1u << 20) + 1, 1u << 21,
                                              UINT32_MAX, 1u << 31 };
        for (size_t i = 0; i < sizeof(bad_sizes) / sizeof(bad_sizes[0]); i++) {
                c = m;
                c.rereg.rx_size = bad_sizes[i];
                expect_bad("REREG bad rx_size", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EBADMSG);
                c = m;
                c.rereg.tx_size = bad_sizes[i];
                expect_bad("REREG bad tx_size", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EBADMSG);
        }
        expect_bad_addrs("REREG", &m, offsetof(struct smc_ctl_rereg, local), offsetof(struct smc_ctl_rereg, peer), NULL,
                         0, SMC_CTL_TO_DAEMON);

        /* fds, lengths, versions, direction */
        expect_bad("REREG with an fd", &m, m.hdr.len, one, 1, SMC_CTL_TO_DAEMON, -EBADF);
        expect_bad("REREG short", &m, m.hdr.len - 8, NULL, 0, SMC_CTL_TO_DAEMON, -EBADMSG);
        c = m;
        c.hdr.len = 96; /* header and datagram agree, but not the size of REREG */
        expect_bad("REREG of 96 bytes", &c, 96, NULL, 0, SMC_CTL_TO_DAEMON, -EBADMSG);
        c = m;
        c.hdr.len += 8;
        expect_bad("REREG long", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EBADMSG);
        c = m;
        c.hdr.version = 2;
        expect_bad("REREG of version 2", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EOPNOTSUPP);
        c.hdr.version = 1;
        expect_bad("REREG of version 1", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EOPNOTSUPP);
        c.hdr.version = 7;
        expect_bad("REREG of version 7", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EPROTONOSUPPORT);
        expect_bad("REREG to a client", &m, m.hdr.len, NULL, 0, SMC_CTL_TO_CLIENT, -EOPNOTSUPP);

        /* REREG_REPLY: the new id, not 0, no fds, v3 only, to the client only */
        smc_ctl_init(&m, SMC_CTL_REREG_REPLY, 22);
        m.rereg_reply.conn_id = 0xfedcba9876543210ull;
        CHECK(m.hdr.version == 6 && m.hdr.len == 24 && smc_ctl_msg_nfds(&m) == 0, "REREG_REPLY built in version 6");
        CHECK(smc_ctl_send(sp[0], &m, NULL, 0, 0) == 0, "send REREG_REPLY");
        memset(&r, 0xa5, sizeof(r));
        n = smc_ctl_recv(sp[1], &r, fds, SMC_CTL_TO_CLIENT, MSG_DONTWAIT);
        CHECK(n == 0 && r.hdr.type == SMC_CTL_REREG_REPLY && r.hdr.seq == 22 &&
              r.rereg_reply.conn_id == 0xfedcba9876543210ull, "REREG_REPLY: %d", n);
        c = m;
        c.rereg_reply.conn_id = 0;
        expect_bad("REREG_REPLY id 0", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_CLIENT, -EBADMSG);
        expect_bad("REREG_REPLY with an fd", &m, m.hdr.len, one, 1, SMC_CTL_TO_CLIENT, -EBADF);
        expect_bad("REREG_REPLY to smcd", &m, m.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EOPNOTSUPP);
        expect_bad("REREG_REPLY short", &m, 20, NULL, 0, SMC_CTL_TO_CLIENT, -EBADMSG);
        c = m;
        c.hdr.len = 32;
        expect_bad("REREG_REPLY long", &c, 32, NULL, 0, SMC_CTL_TO_CLIENT, -EBADMSG);
        c = m;
        c.hdr.version = 2;
        expect_bad("REREG_REPLY of version 2", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_CLIENT, -EOPNOTSUPP);
        c.hdr.version = 1;
        expect_bad("REREG_REPLY of version 1", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_CLIENT, -EOPNOTSUPP);

        /* HELLO_REPLY.instance (formerly reserved): any value, 0 from an older smcd */
        smc_ctl_init(&m, SMC_CTL_HELLO_REPLY, 23);
        m.hello_reply.version = 3;
        m.hello_reply.client_id = 7;
        m.hello_reply.instance = 0xdeadbeefu;
        CHECK(smc_ctl_send(sp[0], &m, NULL, 0, 0) == 0, "send HELLO_REPLY with an instance");
        n = smc_ctl_recv(sp[1], &r, fds, SMC_CTL_TO_CLIENT, MSG_DONTWAIT);
        CHECK(n == 0 && r.hello_reply.instance == 0xdeadbeefu && r.hello_reply.client_id == 7,
              "HELLO_REPLY instance round-trips: %d", n);
        m.hello_reply.instance = 0;
        expect_bad("HELLO_REPLY instance 0 (older smcd)", &m, m.hdr.len, NULL, 0, SMC_CTL_TO_CLIENT, 0);

        close(pfd[0]);
        close(pfd[1]);
        fds_after = count_fds();
        CHECK(fds_after == fds_before, "fds open after the REREG checks: %d, before %d", fds_after, fds_before);
}

/* REQUEUE: v6 only, to the daemon, exactly two fds, listener and conn id not 0 */
static void test_requeue(void) {
        union smc_ctl_msg m, r, c;
        int fds[SMC_CTL_MAX_FDS], pfd[2], n, fds_before = count_fds();

        if (pipe(pfd) < 0)
                abort();
        int one[1] = { pfd[0] }, two[2] = { pfd[0], pfd[1] }, three[3] = { pfd[0], pfd[1], pfd[0] };

        CHECK(SMC_CTL_REQUEUE == 22 && sizeof(struct smc_ctl_requeue) == 32, "REQUEUE type 22, 32 bytes");
        CHECK(smc_ctl_msg_size_v(SMC_CTL_REQUEUE, 6) == 32 && smc_ctl_msg_size_v(SMC_CTL_REQUEUE, 5) == 0 &&
                      smc_ctl_msg_size_v(SMC_CTL_REQUEUE, 1) == 0,
              "REQUEUE: v6 only");
        smc_ctl_init(&m, SMC_CTL_REQUEUE, 23);
        m.requeue.listener_id = 7;
        m.requeue.conn_id = 0x1234567890abcdefULL;
        CHECK(smc_ctl_msg_nfds(&m) == 2, "REQUEUE carries two fds");
        CHECK(smc_ctl_send(sp[0], &m, two, 2, 0) == 0, "send REQUEUE");
        memset(&r, 0xa5, sizeof(r));
        n = smc_ctl_recv(sp[1], &r, fds, SMC_CTL_TO_DAEMON, MSG_DONTWAIT);
        CHECK(n == 2 && r.hdr.type == SMC_CTL_REQUEUE && r.hdr.seq == 23 && r.requeue.listener_id == 7 &&
                      r.requeue.conn_id == 0x1234567890abcdefULL && fd_open(fds[0]) && fd_open(fds[1]),
              "REQUEUE round trip: %d", n);
        for (int i = 0; i < n && n > 0; i++)
                close(fds[i]);
        expect_bad("REQUEUE without an fd", &m, m.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EBADF);
        expect_bad("REQUEUE with 1 fd", &m, m.hdr.len, one, 1, SMC_CTL_TO_DAEMON, -EBADF);
        expect_bad("REQUEUE with 3 fds", &m, m.hdr.len, three, 3, SMC_CTL_TO_DAEMON, -EBADF);
        expect_bad("REQUEUE to a client", &m, m.hdr.len, two, 2, SMC_CTL_TO_CLIENT, -EOPNOTSUPP);
        c = m;
        c.requeue.listener_id = 0;
        expect_bad("REQUEUE listener 0", &c, c.hdr.len, two, 2, SMC_CTL_TO_DAEMON, -EBADMSG);
        c = m;
        c.requeue.conn_id = 0;
        expect_bad("REQUEUE conn 0", &c, c.hdr.len, two, 2, SMC_CTL_TO_DAEMON, -EBADMSG);
        expect_bad("REQUEUE short", &m, 24, two, 2, SMC_CTL_TO_DAEMON, -EBADMSG);
        c = m;
        c.hdr.version = 5;
        expect_bad("REQUEUE in version 5", &c, c.hdr.len, two, 2, SMC_CTL_TO_DAEMON, -EOPNOTSUPP);
        close(pfd[0]);
        close(pfd[1]);
        CHECK(count_fds() == fds_before, "REQUEUE: no fd leaked (%d -> %d)", fds_before, count_fds());
}

/* ADOPT_FD: v3 only, to the daemon, exactly one fd, reserved 0 */
static void test_adopt_fd(void) {
        union smc_ctl_msg m, r, c;
        int fds[SMC_CTL_MAX_FDS], pfd[2], n, fds_before = count_fds();

        if (pipe(pfd) < 0)
                abort();
        int one[1] = { pfd[0] }, two[2] = { pfd[0], pfd[1] };

        CHECK(SMC_CTL_ADOPT_FD == 19 && sizeof(struct smc_ctl_adopt_fd) == 24, "ADOPT_FD type 19, 24 bytes");
        CHECK(smc_ctl_msg_size_v(SMC_CTL_ADOPT_FD, 3) == 24 && smc_ctl_msg_size_v(SMC_CTL_ADOPT_FD, 2) == 0 &&
              smc_ctl_msg_size_v(SMC_CTL_ADOPT_FD, 1) == 0, "ADOPT_FD: v3 only");
        smc_ctl_init(&m, SMC_CTL_ADOPT_FD, 21);
        CHECK(smc_ctl_msg_nfds(&m) == 1, "ADOPT_FD carries one fd");
        CHECK(smc_ctl_send(sp[0], &m, one, 1, 0) == 0, "send ADOPT_FD");
        memset(&r, 0xa5, sizeof(r));
        n = smc_ctl_recv(sp[1], &r, fds, SMC_CTL_TO_DAEMON, MSG_DONTWAIT);
        CHECK(n == 1 && r.hdr.type == SMC_CTL_ADOPT_FD && r.hdr.seq == 21 && r.adopt_fd.reserved == 0 &&
              fd_open(fds[0]), "ADOPT_FD round trip: %d", n);
        for (int i = 0; i < n && n > 0; i++)
                close(fds[i]);
        expect_bad("ADOPT_FD without an fd", &m, m.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EBADF);
        expect_bad("ADOPT_FD with 2 fds", &m, m.hdr.len, two, 2, SMC_CTL_TO_DAEMON, -EBADF);
        expect_bad("ADOPT_FD to a client", &m, m.hdr.len, one, 1, SMC_CTL_TO_CLIENT, -EOPNOTSUPP);
        c = m;
        c.adopt_fd.reserved = 1;
        expect_bad("ADOPT_FD reserved", &c, c.hdr.len, one, 1, SMC_CTL_TO_DAEMON, -EBADMSG);
        expect_bad("ADOPT_FD short", &m, 16, one, 1, SMC_CTL_TO_DAEMON, -EBADMSG);
        close(pfd[0]);
        close(pfd[1]);
        CHECK(count_fds() == fds_before, "ADOPT_FD: no fd leaked (%d -> %d)", fds_before, count_fds());
}

/* Version 5: LISTEN's flags (SMC_CTL_LISTEN_F_JOIN), LISTEN_REPLY's
 * SMC_CTL_LISTEN_JOINED and LISTEN_DEPOSIT (2 fds: the channel and the socket). */
static void test_listen_deposit(void) {
        union smc_ctl_msg m, r, c;
        int fds[SMC_CTL_MAX_FDS], pfd[2], n, fds_before = count_fds();

        if (pipe(pfd) < 0)
                abort();
        int one[1] = { pfd[0] }, two[2] = { pfd[0], pfd[1] }, three[3] = { pfd[0], pfd[1], pfd[0] };

        CHECK(SMC_CTL_LISTEN_DEPOSIT == 20 && sizeof(struct smc_ctl_listen_deposit) == 32,
              "LISTEN_DEPOSIT type 20, 32 bytes");
        CHECK(smc_ctl_msg_size_v(SMC_CTL_LISTEN_DEPOSIT, 5) == 32 && smc_ctl_msg_size_v(SMC_CTL_LISTEN_DEPOSIT, 4) == 0 &&
              smc_ctl_msg_size_v(SMC_CTL_LISTEN_DEPOSIT, 3) == 0 && smc_ctl_msg_size_v(SMC_CTL_LISTEN_DEPOSIT, 1) == 0,
              "LISTEN_DEPOSIT: v5 only");
        smc_ctl_init(&m, SMC_CTL_LISTEN_DEPOSIT, 31);
        m.listen_deposit.listener_id = 7;
        m.listen_deposit.flags = SMC_CTL_DEPOSIT_NONBLOCK;
        CHECK(smc_ctl_msg_nfds(&m) == 2, "LISTEN_DEPOSIT carries two fds");
        CHECK(smc_ctl_send(sp[0], &m, two, 2, 0) == 0, "send LISTEN_DEPOSIT");
        memset(&r, 0xa5, sizeof(r));
        n = smc_ctl_recv(sp[1], &r, fds, SMC_CTL_TO_DAEMON, MSG_DONTWAIT);
        CHECK(n == 2 && r.hdr.type == SMC_CTL_LISTEN_DEPOSIT && r.hdr.seq == 31 && r.listen_deposit.listener_id == 7 &&
                      r.listen_deposit.flags == SMC_CTL_DEPOSIT_NONBLOCK && fd_open(fds[0]) && fd_open(fds[1]),
              "LISTEN_DEPOSIT round trip: %d", n);
        for (int i = 0; i < n && n > 0; i++)
                close(fds[i]);
        expect_bad("LISTEN_DEPOSIT with 1 fd", &m, m.hdr.len, one, 1, SMC_CTL_TO_DAEMON, -EBADF);
        expect_bad("LISTEN_DEPOSIT with 3 fds", &m, m.hdr.len, three, 3, SMC_CTL_TO_DAEMON, -EBADF);
        expect_bad("LISTEN_DEPOSIT without fds", &m, m.hdr.len, NULL, 0, SMC_CTL_TO_DAEMON, -EBADF);
        expect_bad("LISTEN_DEPOSIT to a client", &m, m.hdr.len, two, 2, SMC_CTL_TO_CLIENT, -EOPNOTSUPP);
        expect_bad("LISTEN_DEPOSIT short", &m, 16, two, 2, SMC_CTL_TO_DAEMON, -EBADMSG);
        c = m;
        c.listen_deposit.listener_id = 0;
        expect_bad("LISTEN_DEPOSIT of listener 0", &c, c.hdr.len, two, 2, SMC_CTL_TO_DAEMON, -EBADMSG);
        c = m;
        c.listen_deposit.flags = SMC_CTL_DEPOSIT_WITHDRAW;
        CHECK(SMC_CTL_DEPOSIT_WITHDRAW == 0x2 && smc_ctl_send(sp[0], &c, two, 2, 0) == 0, "send LISTEN_DEPOSIT WITHDRAW");
        n = smc_ctl_recv(sp[1], &r, fds, SMC_CTL_TO_DAEMON, MSG_DONTWAIT);
        CHECK(n == 2 && r.hdr.type == SMC_CTL_LISTEN_DEPOSIT && r.listen_deposit.flags == SMC_CTL_DEPOSIT_WITHDRAW,
              "LISTEN_DEPOSIT WITHDRAW round trip: %d", n);
        for (int i = 0; i < n && n > 0; i++)
                close(fds[i]);
        c.listen_deposit.flags = 0x4;
        expect_bad("LISTEN_DEPOSIT unknown flag", &c, c.hdr.len, two, 2, SMC_CTL_TO_DAEMON, -EBADMSG);
        c = m;
        c.listen_deposit.reserved = 1;
        expect_bad("LISTEN_DEPOSIT reserved", &c, c.hdr.len, two, 2, SMC_CTL_TO_DAEMON, -EBADMSG);
        c = m;
        c.hdr.version = 4;
        expect_bad("LISTEN_DEPOSIT of version 4", &c, c.hdr.len, two, 2, SMC_CTL_TO_DAEMON, -EOPNOTSUPP);
        CHECK(smc_ctl_set_version(&c, 4) == -EINVAL, "no LISTEN_DEPOSIT in version 4");

        /* LISTEN.flags: SMC_CTL_LISTEN_F_JOIN in v5; nothing else, and 0 before */
        smc_ctl_init(&m, SMC_CTL_LISTEN, 32);
        m.listen.addr.family = AF_INET;
        m.listen.addr.port = 8080;
        m.listen.flags = SMC_CTL_LISTEN_F_JOIN;
        CHECK(smc_ctl_send(sp[0], &m, one, 1, 0) == 0, "send v5 LISTEN with F_JOIN");
        n = smc_ctl_recv(sp[1], &r, fds, SMC_CTL_TO_DAEMON, MSG_DONTWAIT);
        CHECK(n == 1 && r.listen.flags == SMC_CTL_LISTEN_F_JOIN, "v5 LISTEN with F_JOIN: %d", n);
        for (int i = 0; i < n && n > 0; i++)
                close(fds[i]);
        c = m;
        c.listen.flags = 0x4;
        expect_bad("v6 LISTEN unknown flag", &c, c.hdr.len, one, 1, SMC_CTL_TO_DAEMON, -EBADMSG);
        c.hdr.version = 5;
        c.listen.flags = SMC_CTL_LISTEN_F_REVIVE;
        expect_bad("v5 LISTEN with F_REVIVE (v6)", &c, c.hdr.len, three, 3, SMC_CTL_TO_DAEMON, -EBADMSG);
        c = m;
        c.hdr.version = 4;
        expect_bad("v4 LISTEN with F_JOIN (reserved there)", &c, c.hdr.len, one, 1, SMC_CTL_TO_DAEMON, -EBADMSG);
        c = m;
        CHECK(smc_ctl_set_version(&c, 4) == 0 && c.listen.flags == 0 && c.listen.addr.port == 8080,
              "set_version 4 clears LISTEN's flags");
        CHECK(smc_ctl_set_version(&c, 1) == 0 && c.listen.flags == 0 && c.hdr.len == 48, "and so does version 1");

        /* LISTEN_REPLY: SMC_CTL_LISTEN_JOINED from v5 on */
        smc_ctl_init_v(&m, SMC_CTL_LISTEN_REPLY, 33, 5);
        m.listen_reply.listener_id = 9;
        m.listen_reply.flags = SMC_CTL_LISTEN_JOINED | SMC_CTL_LISTEN_SMCR | SMC_CTL_LISTEN_NB_KNOWN |
                               SMC_CTL_LISTEN_NONBLOCK;
        CHECK(smc_ctl_send(sp[0], &m, one, 1, 0) == 0, "send v5 LISTEN_REPLY JOINED");
        n = smc_ctl_recv(sp[1], &r, fds, SMC_CTL_TO_CLIENT, MSG_DONTWAIT);
        CHECK(n == 1 && r.listen_reply.flags == (SMC_CTL_LISTEN_JOINED | SMC_CTL_LISTEN_SMCR | SMC_CTL_LISTEN_NB_KNOWN |
                                                 SMC_CTL_LISTEN_NONBLOCK),
              "v5 LISTEN_REPLY with JOINED, SMCR and the sender's O_NONBLOCK: %d", n);
        for (int i = 0; i < n && n > 0; i++)
                close(fds[i]);
        c = m;
        c.hdr.version = 4;
        expect_bad("v4 LISTEN_REPLY with JOINED", &c, c.hdr.len, one, 1, SMC_CTL_TO_CLIENT, -EBADMSG);

        /* v6: LISTEN_REPLY carries C and D; F_REVIVE sends T, C, D and its reply
         * (SMC_CTL_LISTEN_REVIVED) none */
        smc_ctl_init(&m, SMC_CTL_LISTEN_REPLY, 34);
        m.listen_reply.listener_id = 9;
        CHECK(m.hdr.version == 6 && smc_ctl_msg_nfds(&m) == 2, "v6 LISTEN_REPLY: 2 fds");
        CHECK(smc_ctl_send(sp[0], &m, two, 2, 0) == 0, "send v6 LISTEN_REPLY");
        n = smc_ctl_recv(sp[1], &r, fds, SMC_CTL_TO_CLIENT, MSG_DONTWAIT);
        CHECK(n == 2 && fd_open(fds[0]) && fd_open(fds[1]), "v6 LISTEN_REPLY with C and D: %d", n);
        for (int i = 0; i < n && n > 0; i++)
                close(fds[i]);
        expect_bad("v6 LISTEN_REPLY with 1 fd", &m, m.hdr.len, one, 1, SMC_CTL_TO_CLIENT, -EBADF);
        m.listen_reply.flags = SMC_CTL_LISTEN_REVIVED | SMC_CTL_LISTEN_SMCR;
        CHECK(smc_ctl_msg_nfds(&m) == 0, "v6 LISTEN_REPLY REVIVED: no fds");
        expect_bad("v6 LISTEN_REPLY REVIVED", &m, m.hdr.len, NULL, 0, SMC_CTL_TO_CLIENT, 0);
        expect_bad("v6 LISTEN_REPLY REVIVED with fds", &m, m.hdr.len, two, 2, SMC_CTL_TO_CLIENT, -EBADF);
        c = m;
        c.hdr.version = 5;
        expect_bad("v5 LISTEN_REPLY with REVIVED", &c, c.hdr.len, NULL, 0, SMC_CTL_TO_CLIENT, -EBADMSG);
        smc_ctl_init(&m, SMC_CTL_LISTEN, 35);
        m.listen.addr.family = AF_INET;
        m.listen.addr.port = 8080;
        m.listen.flags = SMC_CTL_LISTEN_F_REVIVE;
        CHECK(smc_ctl_msg_nfds(&m) == 3, "v6 LISTEN F_REVIVE: 3 fds");
        expect_bad("v6 LISTEN F_REVIVE", &m, m.hdr.len, three, 3, SMC_CTL_TO_DAEMON, 3);
        expect_bad("v6 LISTEN F_REVIVE with 1 fd", &m, m.hdr.len, one, 1, SMC_CTL_TO_DAEMON, -EBADF);
        m.listen.flags = SMC_CTL_LISTEN_F_REVIVE | SMC_CTL_LISTEN_F_JOIN;
        expect_bad("v6 LISTEN F_REVIVE with F_JOIN", &m, m.hdr.len, three, 3, SMC_CTL_TO_DAEMON, -EBADMSG);
        close(pfd[0]);
        close(pfd[1]);
        CHECK(count_fds() == fds_before, "LISTEN_DEPOSIT: no fd leaked (%d -> %d)", fds_before, count_fds());
}

static void test_addr(void) {
        struct sockaddr_in6 s6 = { .sin6_family = AF_INET6, .sin6_port = htons(443) };
        struct smc_ctl_addr a;
        struct sockaddr_storage ss;
        socklen_t len = sizeof(ss);

        s6.sin6_addr = in6addr_loopback;
        CHECK(smc_ctl_addr_from_sockaddr(&a, (struct sockaddr *) &s6, sizeof(s6)) == 0, "from6");
        CHECK(a.family == AF_INET6 && a.port == 443, "from6 fields");
        CHECK(smc_ctl_addr_to_sockaddr(&a, (struct sockaddr *) &ss, &len) == 0 && len == sizeof(s6), "to6");
        CHECK(memcmp(&ss, &s6, sizeof(s6)) == 0, "roundtrip6");
        CHECK(smc_ctl_addr_from_sockaddr(&a, (struct sockaddr *) &s6, 8) == -EINVAL, "short sockaddr");
        struct sockaddr su = { .sa_family = AF_UNIX };
        CHECK(smc_ctl_addr_from_sockaddr(&a, &su, sizeof(su)) == -EAFNOSUPPORT, "unix");
        len = 4; /* truncated like getsockname */
        set_addr4(&a, "10.1.2.3", 9);
        CHECK(smc_ctl_addr_to_sockaddr(&a, (struct sockaddr *) &ss, &len) == 0 && len == sizeof(struct sockaddr_in),
              "truncated len");
}

/* Inputs found by the libFuzzer target (fuzz/regressions/ctl-proto/). */
static void test_fuzz_regressions(void) {
        /* v1-connect-reply-tcp-no-addresses: a version-1 CONNECT_REPLY of mode TCP
         * (fallback reason 0x03010000), everything else zero: a TCP answer carries no
         * addresses, so it is valid with AF_UNSPEC local / peer (the target once
         * wrongly expected addresses in it). The fuzz input's first two bytes are its
         * flags (to the client) and fd count (0). */
        union smc_ctl_msg m, r;
        int fds[4];

        CHECK(smc_ctl_init_v(&m, SMC_CTL_CONNECT_REPLY, 7, 1) == 0 && m.hdr.len == 112, "v1 CONNECT_REPLY");
        m.conn.fallback_reason = 0x03010000;
        CHECK(roundtrip_raw(&m, m.hdr.len, NULL, 0, SMC_CTL_TO_CLIENT, &r, fds) == 0 &&
                      r.conn.mode == SMC_CTL_MODE_TCP && r.conn.local.family == AF_UNSPEC &&
                      r.conn.peer.family == AF_UNSPEC,
              "fuzz: v1 CONNECT_REPLY TCP without addresses accepted");
}

int main(void) {
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0) {
                perror("socketpair");
                return 2;
        }
        test_sizes();
        test_good();
        test_bad();
        test_versions();
        test_fallback();
        test_fallback_count();
        test_v3();
        test_rereg();
        test_adopt_fd();
        test_requeue();
        test_listen_deposit();
        test_addr();
        test_fuzz_regressions();
        /* EOF */
        close(sp[0]);
        union smc_ctl_msg r;
        int fds[4];
        CHECK(smc_ctl_recv(sp[1], &r, fds, SMC_CTL_TO_DAEMON, 0) == -ECONNRESET, "eof");
        printf("%d checks, %d failed\n", checks, failures);
        return failures ? 1 : 0;
}
