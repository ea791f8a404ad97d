/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Unit: the SMCRUN_INHERIT entry parsers and formatters (socket-internal.h), and the
 * ADOPT / ADOPT_REPLY codec (ctl-proto.h) that an exec'd image uses. */

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "ctl-proto.h"
#include "socket-internal.h"

static int parse(const char *s, struct smc_inherit_entry *e) {
        return smc_inherit_parse_entry(s, strlen(s), e);
}

static void test_parse_good(void) {
        struct smc_inherit_entry e, f;
        char buf[200];
        int n;

        CHECK(parse("7:-1:5df99dbe1e150455:2:65536:1:65536:2:0:0", &e) == 0, "valid entry");
        CHECK(e.x == 7 && e.t == -1 && e.conn_id == 0x5df99dbe1e150455ull && e.rx_id == 2 && e.rx_size == 65536 &&
                      e.tx_id == 1 && e.tx_size == 65536 && e.flags == 2 && e.owed == 0,
              "fields");
        CHECK(parse("3:1048575:FFFFFFFFFFFFFFFF:a:16384:B:1048576:1f:65536:1048576", &e) == 0, "limits");
        CHECK(e.t == 1048575 && e.conn_id == UINT64_MAX && e.rx_id == 10 && e.tx_id == 11 && e.rx_size == 16384 &&
                      e.tx_size == 1048576 && e.flags == 0x1f && e.owed == 65536 && e.unpub == 1048576,
              "limit fields");
        /* format -> parse is the identity */
        e = (struct smc_inherit_entry) { .x = 1023, .t = 0, .conn_id = 1, .rx_id = 0xabcdef, .rx_size = 262144,
                                         .tx_id = 0x123456789abcdefull, .tx_size = 32768,
                                         .flags = SMC_INHERIT_F_INET6 | SMC_INHERIT_F_SHARED, .owed = 3,
                                         .unpub = 32768 };
        n = smc_inherit_format_entry(&e, buf, sizeof(buf));
        CHECK(n > 0 && (size_t) n == strlen(buf), "format: %d", n);
        CHECK(parse(buf, &f) == 0 && f.x == e.x && f.t == e.t && f.conn_id == e.conn_id && f.rx_id == e.rx_id &&
                      f.rx_size == e.rx_size && f.tx_id == e.tx_id && f.tx_size == e.tx_size && f.flags == e.flags &&
                      f.owed == e.owed && f.unpub == e.unpub,
              "round trip of %s", buf);
        CHECK(smc_inherit_format_entry(&e, buf, 10) == -ENOBUFS, "format into a short buffer");
        /* only the @len bytes count: a separator or garbage after them is not read */
        CHECK(smc_inherit_parse_entry("7:-1:1:2:65536:3:65536:0:0:0,garbage", 28, &e) == 0, "length bound");
}

static void test_parse_bad(void) {
        static const char *const bad[] = {
                "",
                ",",
                "garbage",
                "7:-1:1:2:65536:3:65536:0:0",            /* 9 fields */
                "7:-1:1:2:65536:3:65536:0:0:0:0",        /* 11 fields */
                "7:-1:1:2:65536:3:65536:0:0:0:",         /* trailing separator */
                "7::1:2:65536:3:65536:0:0:0",            /* empty field */
                "-1:-1:1:2:65536:3:65536:0:0:0",         /* X < 0 */
                "7:-2:1:2:65536:3:65536:0:0:0",          /* T < -1 */
                "7:-01:1:2:65536:3:65536:0:0:0",         /* T not exactly -1 */
                "+7:-1:1:2:65536:3:65536:0:0:0",         /* sign */
                " 7:-1:1:2:65536:3:65536:0:0:0",         /* blank */
                "7 :-1:1:2:65536:3:65536:0:0:0",
                "1048576:-1:1:2:65536:3:65536:0:0:0",    /* beyond the fd table */
                "99999999999999999999999:-1:1:2:65536:3:65536:0:0:0", /* overflow */
                "7:-1:0:2:65536:3:65536:0:0:0",          /* conn id 0 */
                "7:-1:0x1:2:65536:3:65536:0:0:0",        /* hex prefix */
                "7:-1:10000000000000000:2:65536:3:65536:0:0:0", /* 17 hex digits */
                "7:-1:1g:2:65536:3:65536:0:0:0",         /* not hex */
                "7:-1:1:0:65536:3:65536:0:0:0",          /* rx id 0 */
                "7:-1:1:2:65536:0:65536:0:0:0",          /* tx id 0 */
                "7:-1:1:2:65536:2:65536:0:0:0",          /* rx id == tx id */
                "7:-1:1:2:65535:3:65536:0:0:0",          /* not a power of two */
                "7:-1:1:2:8192:3:65536:0:0:0",           /* below 16 KiB */
                "7:-1:1:2:2097152:3:65536:0:0:0",        /* above 1 MiB */
                "7:-1:1:2:65536:3:0:0:0:0",              /* tx size 0 */
                "7:-1:1:2:65536:3:65536:20:0:0",         /* unknown flag */
                "7:-1:1:2:65536:3:65536:0:65537:0",      /* owed too large */
                "7:-1:1:2:65536:3:65536:0:-1:0",
                "7:7:1:2:65536:3:65536:0:0:0",           /* T == X */
                "7:-1:1:2:65536:3:16384:0:0:16385",      /* unpublished beyond the ring */
                "7:-1:1:2:65536:3:16384:0:0:x",
        };
        struct smc_inherit_entry e;

        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                CHECK(parse(bad[i], &e) == -EINVAL, "accepted \"%s\"", bad[i]);
        /* an embedded NUL inside the length */
        CHECK(smc_inherit_parse_entry("7:-1:1:2\0:65536:3:65536:0:0:0", 29, &e) == -EINVAL, "embedded NUL");
        CHECK(smc_inherit_parse_entry(NULL, 0, &e) == -EINVAL, "NULL");
}

static int parse_l(const char *s, struct smc_inherit_listener *l) {
        return smc_inherit_parse_listener(s, strlen(s), l);
}

/* listener entries: "L:FD:FLAGS" (register again), "L:FD:FLAGS:CHAN:ID" (join) and
 * "L:FD:FLAGS:CHAN:ID:DCHAN" (join, with the copy of smcd's end) */
static void test_listener(void) {
        static const char *const bad[] = {
                "L", "L:", "L:3", "L:3:", "L::0", "L:3:8", "L:3:0:", "L:3:0:5", "L:3:0:5:", "L:3:0::1",
                "L:3:0:5:0", "L:3:0:3:1", "L:3:0:5:1:", "L:3:0:5:1:3", "L:3:0:5:1:5", "L:3:0:5:1:2:7",
                "L:3:0:5:1:-1", "L:3:0:5:1:1048576", "L:3:0:5:1:x", "L:3:0:5:1: 2", "L:-1:0", "L:3:-1", "L:3:0:-1:1",
                "L:1048576:0", "L:3:0:1048576:1", "L:3:0:5:10000000000000000", "L:3:0:5:g", "L:3:x",
                "L:+3:0", "L: 3:0", "L:3:0:5:1,", "l:3:0", "X:3:0", "7:-1:1:2:65536:3:65536:0:0:0",
        };
        struct smc_inherit_listener l, m;
        char buf[96];
        int n;

        CHECK(parse_l("L:3:0", &l) == 0 && l.fd == 3 && l.flags == 0 && l.chan == -1 && l.dchan == -1 &&
                      l.listener_id == 0,
              "old form");
        CHECK(parse_l("L:3:0:5:1", &l) == 0 && l.chan == 5 && l.dchan == -1, "a channel without smcd's end");
        CHECK(parse_l("L:3:4:5:1a:2", &l) == 0 && l.fd == 3 && l.chan == 5 && l.dchan == 2 && l.listener_id == 0x1a &&
                      l.flags == SMC_INHERIT_LF_NONBLOCK,
              "with smcd's end of the channel");
        CHECK(parse_l("L:12:3:7:ffffffffffffffff", &l) == 0 && l.fd == 12 &&
                      l.flags == (SMC_INHERIT_LF_INET6 | SMC_INHERIT_LF_SMCR) && l.chan == 7 &&
                      l.listener_id == UINT64_MAX,
              "with channel and id");
        CHECK(parse_l("L:4:7:9:2", &l) == 0 && (l.flags & SMC_INHERIT_LF_NONBLOCK) && l.chan == 9,
              "the program's O_NONBLOCK");
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                CHECK(parse_l(bad[i], &l) == -EINVAL, "accepted \"%s\"", bad[i]);
        CHECK(smc_inherit_parse_listener("L:3:0:5:1", 5, &l) == 0 && l.chan == -1, "length bound");
        CHECK(smc_inherit_parse_listener("L:3:0\0:5:1", 9, &l) == -EINVAL, "embedded NUL");
        CHECK(smc_inherit_parse_listener(NULL, 0, &l) == -EINVAL, "NULL");
        l = (struct smc_inherit_listener) { .fd = 1023, .chan = 0, .dchan = -1, .listener_id = 0x1234,
                                            .flags = SMC_INHERIT_LF_SMCR };
        n = smc_inherit_format_listener(&l, buf, sizeof(buf));
        CHECK(n > 0 && (size_t) n == strlen(buf) && parse_l(buf, &m) == 0 && m.fd == l.fd && m.chan == l.chan &&
                      m.dchan == -1 && m.listener_id == l.listener_id && m.flags == l.flags,
              "round trip of %s", buf);
        l.dchan = 1048575;
        n = smc_inherit_format_listener(&l, buf, sizeof(buf));
        CHECK(n > 0 && !strcmp(buf, "L:1023:2:0:1234:1048575") && parse_l(buf, &m) == 0 && m.dchan == l.dchan &&
                      m.chan == 0,
              "round trip with smcd's end: %s", buf);
        l.chan = -1;
        n = smc_inherit_format_listener(&l, buf, sizeof(buf));
        CHECK(n > 0 && !strcmp(buf, "L:1023:2"), "without a channel: %s", buf);
        CHECK(smc_inherit_format_listener(&l, buf, 5) == -ENOBUFS, "too small a buffer");
}

static void test_adopt_codec(void) {
        union smc_ctl_msg m;

        smc_ctl_init(&m, SMC_CTL_ADOPT, 5);
        m.adopt.conn_id = 42;
        CHECK(m.hdr.len == 24, "ADOPT size %u", m.hdr.len);
        CHECK(smc_ctl_decode(&m, m.hdr.len, 0, false, SMC_CTL_TO_DAEMON) == 0, "ADOPT decodes");
        CHECK(smc_ctl_decode(&m, m.hdr.len, 1, false, SMC_CTL_TO_DAEMON) == -EBADF, "ADOPT with an fd");
        CHECK(smc_ctl_decode(&m, m.hdr.len, 0, false, SMC_CTL_TO_CLIENT) == -EOPNOTSUPP, "ADOPT to a client");
        CHECK(smc_ctl_decode(&m, m.hdr.len - 8, 0, false, SMC_CTL_TO_DAEMON) == -EBADMSG, "short ADOPT");
        m.adopt.conn_id = 0;
        CHECK(smc_ctl_decode(&m, m.hdr.len, 0, false, SMC_CTL_TO_DAEMON) == -EBADMSG, "ADOPT of id 0");
        CHECK(smc_ctl_init_v(&m, SMC_CTL_ADOPT, 1, 2) == -EINVAL, "no ADOPT in version 2");
        smc_ctl_init(&m, SMC_CTL_ADOPT, 5);
        m.adopt.conn_id = 1;
        m.hdr.version = 2;
        CHECK(smc_ctl_decode(&m, m.hdr.len, 0, false, SMC_CTL_TO_DAEMON) == -EOPNOTSUPP, "ADOPT of version 2");

        smc_ctl_init(&m, SMC_CTL_ADOPT_REPLY, 5);
        m.conn.conn_id = 42;
        m.conn.mode = SMC_CTL_MODE_SMCD;
        m.conn.rx = (struct smc_ctl_buf) { .id = 1, .size = 65536, .flags = SMC_CTL_BUF_FD };
        m.conn.tx = (struct smc_ctl_buf) { .id = 2, .size = 16384, .flags = SMC_CTL_BUF_FD };
        m.conn.local.family = m.conn.peer.family = AF_INET;
        m.conn.local.port = 1;
        CHECK(smc_ctl_msg_nfds(&m) == 3, "ADOPT_REPLY carries 3 fds");
        CHECK(smc_ctl_decode(&m, m.hdr.len, 3, false, SMC_CTL_TO_CLIENT) == 0, "ADOPT_REPLY decodes");
        CHECK(smc_ctl_decode(&m, m.hdr.len, 2, false, SMC_CTL_TO_CLIENT) == -EBADF, "ADOPT_REPLY without Y");
        CHECK(smc_ctl_decode(&m, m.hdr.len, 4, false, SMC_CTL_TO_CLIENT) == -EBADF, "ADOPT_REPLY with X too");
        CHECK(smc_ctl_decode(&m, m.hdr.len, 3, false, SMC_CTL_TO_DAEMON) == -EOPNOTSUPP, "ADOPT_REPLY to smcd");
        m.conn.tx.flags = 0;
        CHECK(smc_ctl_decode(&m, m.hdr.len, 3, false, SMC_CTL_TO_CLIENT) == -EBADMSG, "a buffer without its memfd");
        m.conn.tx.flags = SMC_CTL_BUF_FD;
        m.conn.tx.id = 1;
        CHECK(smc_ctl_decode(&m, m.hdr.len, 3, false, SMC_CTL_TO_CLIENT) == -EBADMSG, "equal buffer ids");
        m.conn.tx.id = 2;
        m.conn.mode = SMC_CTL_MODE_SMCR;
        CHECK(smc_ctl_decode(&m, m.hdr.len, 3, false, SMC_CTL_TO_CLIENT) == -EBADMSG, "SMC-R");
        m.conn.mode = SMC_CTL_MODE_SMCD;
        m.conn.params.busy_poll_us = SMC_CTL_BUSY_POLL_MAX_US + 1;
        CHECK(smc_ctl_decode(&m, m.hdr.len, 3, false, SMC_CTL_TO_CLIENT) == -EBADMSG, "bad params");
        m.conn.params.busy_poll_us = 0;
        m.conn.conn_id = 0;
        CHECK(smc_ctl_decode(&m, m.hdr.len, 3, false, SMC_CTL_TO_CLIENT) == -EBADMSG, "id 0");
}

int main(void) {
        test_parse_good();
        test_parse_bad();
        test_listener();
        test_adopt_codec();
        printf("%d of %d checks failed\n", failures, checks);
        return failures ? 1 : 0;
}
