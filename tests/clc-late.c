/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * clc-late: an SMC client whose CLC proposal comes late, for tests/test-netns-smcd.sh
 * (case 13). It marks its own TCP socket for the SMC TCP option (its own TcpOpt
 * instance on the cgroup v2 root: any instance's option in a SYN counts), connects to
 * a server whose listener smcd marked and whose accepting process cannot reach smcd,
 * checks that the SYN-ACK echoed the option, waits DELAY_MS (a stalled smcd), sends a
 * CLC PROPOSAL and expects a CLC DECLINE back (the server's library answers it:
 * accept_decline()); then speaks TCP to the server of tests/netns-smcd.py (an
 * E request: SIZE bytes echoed, then the trailer) and checks the echo.
 *
 *   clc-late ADDR PORT DELAY_MS [NETNS]
 *       NETNS: connect from the network namespace /run/netns/NETNS (entered after the
 *       program is loaded: `ip netns exec` would hide the cgroup2 mount)
 *
 * Prints "ok - ..." / "not ok - ..." lines; exit status 0 if all were ok, 77 if the
 * option program cannot be loaded here, 1 otherwise.
 */

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "smcr-wire.h"
#include "tcpopt.h"

static int failed;

#define T(cond, ...)                                    \
        do {                                            \
                bool _ok = (cond);                      \
                printf("%s - ", _ok ? "ok" : "not ok"); \
                printf(__VA_ARGS__);                    \
                printf("\n");                           \
                if (!_ok)                               \
                        failed = 1;                     \
        } while (0)

/* Read exactly @len bytes within @ms. Returns the count read (fewer: EOF, error or
 * timeout). */
static size_t read_full(int fd, uint8_t *buf, size_t len, int ms) {
        size_t got = 0;

        while (got < len) {
                struct pollfd p = { .fd = fd, .events = POLLIN };
                ssize_t n;

                if (poll(&p, 1, ms) <= 0)
                        break;
                n = recv(fd, buf + got, len - got, 0);
                if (n <= 0)
                        break;
                got += (size_t) n;
        }
        return got;
}

int main(int argc, char **argv) {
        struct sockaddr_in sin = { .sin_family = AF_INET };
        struct smc_clc_proposal p = { .typev1 = SMC_TYPE_R, .typev2 = SMC_TYPE_N, .ipv4_prefix_len = 24 };
        struct smc_clc_decline d;
        struct smc_clc_hdr h;
        uint8_t buf[SMC_CLC_MAX_LEN], req[9], data[1000], back[1000];
        TcpOpt *t = NULL;
        ssize_t n;
        int fd, r, delay;

        if (argc < 4 || argc > 5 || inet_pton(AF_INET, argv[1], &sin.sin_addr) != 1) {
                fprintf(stderr, "usage: clc-late ADDR PORT DELAY_MS [NETNS]\n");
                return 2;
        }
        sin.sin_port = htons((uint16_t) atoi(argv[2]));
        delay = atoi(argv[3]);
        r = tcpopt_new(tcpopt_default_cgroup() ? tcpopt_default_cgroup() : "/sys/fs/cgroup", -1, &t);
        if (r < 0) {
                printf("# SKIP: the SMC TCP option program cannot be loaded: %s\n", strerror(-r));
                return 77;
        }
        if (argc == 5) {
                char path[256];
                int ns;

                snprintf(path, sizeof(path), "/run/netns/%s", argv[4]);
                ns = open(path, O_RDONLY | O_CLOEXEC);
                if (ns < 0 || setns(ns, CLONE_NEWNET) < 0) {
                        T(false, "clc-late: enter %s: %s", path, strerror(errno));
                        return 1;
                }
                close(ns);
        }
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || tcpopt_mark(t, fd) < 0 || connect(fd, (struct sockaddr *) &sin, sizeof(sin)) < 0) {
                T(false, "clc-late: connect to %s:%s: %s", argv[1], argv[2], strerror(errno));
                return 1;
        }
        r = tcpopt_peer_has(t, fd);
        T(r == 1, "clc-late: the server's SYN-ACK echoed the option (peer_has %d)", r);

        /* a stalled smcd: the proposal comes DELAY_MS after the connection */
        usleep((useconds_t) delay * 1000u);
        for (int i = 0; i < 8; i++)
                p.peer_id[i] = (uint8_t) (i + 1);
        n = smc_clc_proposal_encode(&p, buf, sizeof(buf));
        T(n > 0 && send(fd, buf, (size_t) n, MSG_NOSIGNAL) == n, "clc-late: a PROPOSAL of %zd bytes sent after %d ms", n,
          delay);
        r = read_full(fd, buf, 8, 5000) == 8 ? smc_clc_decode_hdr(buf, 8, &h) : -EIO;
        if (r == 0 && h.type == SMC_CLC_DECLINE && h.length <= sizeof(buf) &&
            read_full(fd, buf + 8, h.length - 8u, 5000) == h.length - 8u)
                r = smc_clc_decline_decode(buf, h.length, &d);
        else if (r == 0)
                r = -EPROTO;
        T(r == 0, "clc-late: the server answered with a DECLINE (%s; reason 0x%08x)", r ? strerror(-r) : "decoded",
          r ? 0 : d.diag);

        /* and the connection is plain TCP now: an echo request of tests/netns-smcd.py */
        req[0] = 'E';
        for (int i = 1; i < 9; i++)
                req[i] = i == 7 ? (uint8_t) (sizeof(data) >> 8) : i == 8 ? (uint8_t) (sizeof(data) & 0xff) : 0;
        for (size_t i = 0; i < sizeof(data); i++)
                data[i] = (uint8_t) (i * 7 + 3);
        r = send(fd, req, sizeof(req), MSG_NOSIGNAL) == (ssize_t) sizeof(req) &&
            send(fd, data, sizeof(data), MSG_NOSIGNAL) == (ssize_t) sizeof(data);
        T(r && read_full(fd, back, sizeof(back), 5000) == sizeof(back) && memcmp(back, data, sizeof(data)) == 0,
          "clc-late: then TCP: %zu bytes echoed by the server's application", sizeof(data));
        close(fd);
        tcpopt_free(t);
        return failed;
}
