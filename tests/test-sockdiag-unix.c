/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Unit: smcd/sockdiag.c's unix_diag look-ups against real sockets of this process:
 * sockdiag_unix_exists() (open, closed, in flight in an SCM_RIGHTS message) and
 * sockdiag_unix_peer() (a socketpair's ends name each other; a socket whose peer
 * closed, an unconnected one and a gone one; bad inode numbers refused). smcd's
 * F_REVIVE pairing check (listener.c channel_ends_paired()) rests on the latter.
 * Skips (77) if the kernel has no unix_diag. */

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "sockdiag.h"

static uint64_t ino_of(int fd) {
        struct stat st;

        return fstat(fd, &st) == 0 ? (uint64_t) st.st_ino : 0;
}

/* send @fd over @via (SCM_RIGHTS) */
static int send_fd(int via, int fd) {
        char byte = 'x';
        struct iovec iov = { .iov_base = &byte, .iov_len = 1 };
        union {
                char buf[CMSG_SPACE(sizeof(int))];
                struct cmsghdr align;
        } u;
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf) };
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);

        memset(u.buf, 0, sizeof(u.buf));
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof(int));
        return sendmsg(via, &mh, 0) == 1 ? 0 : -errno;
}

int main(void) {
        SockDiag *d = NULL;
        int types[] = { SOCK_SEQPACKET, SOCK_STREAM, SOCK_DGRAM };
        uint64_t peer = 12345;
        int r;

        r = sockdiag_unix_open(&d);
        if (r == -EPROTONOSUPPORT) {
                printf("SKIP: no unix_diag in this kernel\n");
                return 77;
        }
        CHECK(r == 0 && d, "sockdiag_unix_open: %s", strerror(-r));
        if (!d)
                return 1;

        for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
                int p[2], q[2];
                uint64_t a, b;

                CHECK(socketpair(AF_UNIX, types[t] | SOCK_CLOEXEC, 0, p) == 0, "socketpair");
                a = ino_of(p[0]);
                b = ino_of(p[1]);
                CHECK(sockdiag_unix_exists(d, a) == 1 && sockdiag_unix_exists(d, b) == 1, "type %d: both open", types[t]);
                peer = 0;
                CHECK(sockdiag_unix_peer(d, a, &peer) == 0 && peer == b, "type %d: a's peer %llu, want %llu", types[t],
                      (unsigned long long) peer, (unsigned long long) b);
                peer = 0;
                CHECK(sockdiag_unix_peer(d, b, &peer) == 0 && peer == a, "type %d: b's peer", types[t]);

                /* another pair's end is nobody's peer here */
                CHECK(socketpair(AF_UNIX, types[t] | SOCK_CLOEXEC, 0, q) == 0, "socketpair 2");
                peer = 0;
                CHECK(sockdiag_unix_peer(d, ino_of(q[0]), &peer) == 0 && peer == ino_of(q[1]) && peer != a && peer != b,
                      "type %d: the second pair names its own", types[t]);

                /* in flight: p[1] sent into q[0] and closed here: still open */
                CHECK(send_fd(q[1], p[1]) == 0, "send in flight");
                close(p[1]);
                CHECK(sockdiag_unix_exists(d, b) == 1, "type %d: in flight counts as open", types[t]);
                peer = 0;
                CHECK(sockdiag_unix_peer(d, a, &peer) == 0 && peer == b, "type %d: its peer in flight", types[t]);
                /* gone once the message holding it goes */
                close(q[0]);
                close(q[1]);
                CHECK(sockdiag_unix_exists(d, b) == 0, "type %d: gone with the message", types[t]);
                CHECK(sockdiag_unix_peer(d, b, &peer) == -ENOENT, "type %d: a gone socket's peer", types[t]);
                peer = 12345;
                r = sockdiag_unix_peer(d, a, &peer);
                /* (a stream or seqpacket socket keeps its peer pointer until it is
                 * released itself; a datagram socket drops it when the peer goes) */
                CHECK(r == 0 && (peer == b || peer == 0), "type %d: peer of a socket whose peer closed: %d %llu",
                      types[t], r, (unsigned long long) peer);
                close(p[0]);
                CHECK(sockdiag_unix_exists(d, a) == 0, "type %d: closed", types[t]);
        }

        /* an unconnected socket has no peer */
        {
                int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

                peer = 12345;
                CHECK(s >= 0 && sockdiag_unix_peer(d, ino_of(s), &peer) == 0 && peer == 0, "unconnected: %llu",
                      (unsigned long long) peer);
                close(s);
        }
        /* bad inode numbers */
        CHECK(sockdiag_unix_peer(d, 0, &peer) == -EINVAL, "inode 0");
        CHECK(sockdiag_unix_peer(d, (uint64_t) UINT32_MAX + 1, &peer) == -EINVAL, "a 33-bit inode");
        CHECK(sockdiag_unix_exists(d, 0) == -EINVAL, "exists: inode 0");
        /* a number no socket has (sockfs counts its inodes up from 1) */
        CHECK(sockdiag_unix_peer(d, 0xfffffff0u, &peer) == -ENOENT, "no such socket");

        sockdiag_free(d);
        printf("%d checks, %d failed\n", checks, failures);
        return failures ? 1 : 0;
}
