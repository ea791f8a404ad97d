/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libFuzzer target: the smcd control protocol codec (libsmcproto/ctl-proto.c), the
 * smcd side (SMC_CTL_TO_DAEMON: smcd/manager.c) and the client side (SMC_CTL_TO_CLIENT:
 * libsmcproto/ctl-client.c and the accept channel in socket.c).
 *
 * Input: byte 0 = flags (bit 0: direction to the client, else to smcd; bit 1: the
 * truncated flag of the direct decode), byte 1 = number of fds, then the datagram.
 *
 * 1. smc_ctl_decode() directly on the datagram (with byte 1 as nfds) in a union whose
 *    bytes past the datagram are once zero and once 0xff: the verdict must not depend
 *    on them (smc_ctl_recv() leaves stale bytes there). A message it accepts must be
 *    self-consistent: hdr.len = length, smc_ctl_msg_nfds() = nfds, an ERROR's text
 *    NUL-terminated, addresses convertible, and re-stamping it for its own version
 *    (smc_ctl_set_version) must change no byte and decode again.
 * 2. The framing as smcd and the library see it: the datagram (up to 512 bytes: a
 *    longer one arrives truncated) is sent with byte 1 % 21 copies of an fd (more than
 *    the 16 smc_ctl_recv() has room for: MSG_CTRUNC) over an AF_UNIX SOCK_SEQPACKET
 *    socketpair and received with smc_ctl_recv(). Its answer must agree with
 *    smc_ctl_decode() of the same bytes, fd count and truncation; on success the fds
 *    are valid and ours, on error none may be left open (no fd leak).
 */

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ctl-proto.h"
#include "fuzz.h"

static int sp[2] = { -1, -1 }, devnull = -1;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0) {
                perror("socketpair");
                abort();
        }
        devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
        FUZZ_CHECK(devnull >= 0);
        return 0;
}

static void check_accepted(const union smc_ctl_msg *m, size_t len, size_t nfds) {
        union smc_ctl_msg c;

        FUZZ_CHECK(m->hdr.len == len && len == smc_ctl_msg_size_v(m->hdr.type, m->hdr.version));
        FUZZ_CHECK(smc_ctl_msg_nfds(m) == (int) nfds);
        switch (m->hdr.type) {
        case SMC_CTL_ERROR: {
                char buf[256];

                /* as socket.c and ctl-client.c print it */
                FUZZ_CHECK(strlen(m->error.msg) < sizeof(m->error.msg));
                snprintf(buf, sizeof(buf), "%s: %s", strerror(-m->error.error), m->error.msg);
                break;
        }
        case SMC_CTL_CONNECT_REPLY:
        case SMC_CTL_NEW_CONN:
        case SMC_CTL_ADOPT_REPLY:
                /* the addresses of a connection (a TCP-mode CONNECT_REPLY has none) */
                if (m->conn.mode == SMC_CTL_MODE_SMCD || m->conn.mode == SMC_CTL_MODE_SMCR ||
                    (m->hdr.type == SMC_CTL_NEW_CONN && m->conn.mode == SMC_CTL_MODE_TCP)) {
                        struct sockaddr_storage ss;
                        socklen_t l = sizeof(ss);

                        FUZZ_CHECK(smc_ctl_addr_to_sockaddr(&m->conn.local, (struct sockaddr *) &ss, &l) == 0);
                        l = sizeof(ss);
                        FUZZ_CHECK(smc_ctl_addr_to_sockaddr(&m->conn.peer, (struct sockaddr *) &ss, &l) == 0);
                }
                break;
        default:
                break;
        }
        /* re-stamping for its own version keeps every byte */
        memcpy(&c, m, sizeof(c));
        FUZZ_CHECK(smc_ctl_set_version(&c, m->hdr.version) == 0);
        FUZZ_CHECK(memcmp(&c, m, len) == 0);
}

/* libFuzzer runs the inputs one after the other in this process: nothing else opens
 * or closes descriptors meanwhile, so a descriptor open after a run that was not open
 * before is a leak. Looks at the 32 numbers from the lowest free one (where the
 * received descriptors land); descriptors inherited from the caller are left out. */
static int lowest_free_fd(void) {
        int fd = fcntl(devnull, F_DUPFD_CLOEXEC, 0);

        FUZZ_CHECK(fd >= 0);
        close(fd);
        return fd;
}

static uint32_t open_fds_from(int lowest) {
        uint32_t set = 0;

        for (int i = 0; i < 32; i++)
                if (fcntl(lowest + i, F_GETFD) >= 0)
                        set |= 1u << i;
        return set;
}

static void check_no_fd_from(int lowest, uint32_t before) {
        uint32_t now = open_fds_from(lowest);

        for (int i = 0; i < 32; i++)
                if ((now & ~before) & (1u << i)) {
                        char link[64], target[256] = "?";

                        snprintf(link, sizeof(link), "/proc/self/fd/%d", lowest + i);
                        (void) !readlink(link, target, sizeof(target) - 1);
                        fprintf(stderr, "fd %d (%s) leaked\n", lowest + i, target);
                        abort();
                }
}

static void via_socket(const uint8_t *msg, size_t len, size_t want_fds, enum smc_ctl_dir dir) {
        union {
                struct cmsghdr cmsg;
                char buf[CMSG_SPACE(sizeof(int) * 20)];
        } control;
        int fds[20], got[SMC_CTL_MAX_FDS], lowest, r, expect;
        uint32_t before;
        struct iovec iov = { .iov_base = (void *) msg, .iov_len = len };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
        union smc_ctl_msg m, d;
        bool trunc;

        if (len > 512)
                len = iov.iov_len = 512;
        lowest = lowest_free_fd();
        before = open_fds_from(lowest);
        if (want_fds > 0) {
                memset(&control, 0, sizeof(control));
                for (size_t i = 0; i < want_fds; i++)
                        fds[i] = devnull;
                mh.msg_control = &control;
                mh.msg_controllen = CMSG_SPACE(sizeof(int) * want_fds);
                struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
                c->cmsg_level = SOL_SOCKET;
                c->cmsg_type = SCM_RIGHTS;
                c->cmsg_len = CMSG_LEN(sizeof(int) * want_fds);
                memcpy(CMSG_DATA(c), fds, sizeof(int) * want_fds);
        }
        if (sendmsg(sp[0], &mh, MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t) len) {
                perror("fuzz: sendmsg");
                abort();
        }
        memset(&m, 0x5a, sizeof(m)); /* stale bytes of an earlier message */
        r = smc_ctl_recv(sp[1], &m, got, dir, MSG_DONTWAIT);

        /* what smc_ctl_decode() says about the same datagram */
        trunc = len > SMC_CTL_MAX_MSG || want_fds > SMC_CTL_MAX_FDS * 4;
        memset(&d, 0x5a, sizeof(d));
        memcpy(&d, msg, len < sizeof(d) ? len : sizeof(d));
        if (len == 0 && want_fds == 0)
                expect = -ECONNRESET;
        else
                expect = smc_ctl_decode(&d, len < sizeof(d) ? len : sizeof(d),
                                        want_fds < SMC_CTL_MAX_FDS * 4 ? want_fds : SMC_CTL_MAX_FDS * 4, trunc, dir);
        if (expect == 0)
                expect = (int) want_fds;
        if (r != expect) {
                fprintf(stderr, "smc_ctl_recv() = %d, smc_ctl_decode() = %d (len %zu, fds %zu)\n", r, expect, len,
                        want_fds);
                abort();
        }
        if (r >= 0) {
                check_accepted(&m, len, (size_t) r);
                /* the bytes past the message are zero */
                for (size_t i = len; i < sizeof(m); i++)
                        FUZZ_CHECK(m.raw[i] == 0);
                for (int i = 0; i < r; i++) {
                        FUZZ_CHECK(fcntl(got[i], F_GETFD) == FD_CLOEXEC);
                        close(got[i]);
                }
        }
        check_no_fd_from(lowest, before);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        union smc_ctl_msg a, b;
        enum smc_ctl_dir dir;
        size_t len, n, nfds;
        bool truncated;
        int ra, rb;

        if (size < 2)
                return 0;
        dir = (data[0] & 1) ? SMC_CTL_TO_CLIENT : SMC_CTL_TO_DAEMON;
        truncated = data[0] & 2;
        nfds = data[1];
        len = size - 2;
        n = len < sizeof(a) ? len : sizeof(a);

        memset(&a, 0, sizeof(a));
        memset(&b, 0xff, sizeof(b));
        memcpy(&a, data + 2, n);
        memcpy(&b, data + 2, n);
        ra = smc_ctl_decode(&a, len, nfds, truncated, dir);
        rb = smc_ctl_decode(&b, len, nfds, truncated, dir);
        if (ra != rb) {
                fprintf(stderr, "the verdict depends on bytes past the message: %d vs %d\n", ra, rb);
                abort();
        }
        FUZZ_CHECK(ra == 0 || ra == -EBADMSG || ra == -EPROTONOSUPPORT || ra == -EOPNOTSUPP || ra == -EBADF);
        if (ra == 0) {
                FUZZ_CHECK(!truncated && len <= SMC_CTL_MAX_MSG);
                check_accepted(&a, len, nfds);
        }

        via_socket(data + 2, len, data[1] % 21, dir);
        return 0;
}
