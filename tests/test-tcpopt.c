/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The SMC TCP option through smcd/tcpopt.c (BPF sock_ops) for real, over loopback:
 * the test makes its own cgroup v2 child (below its own cgroup, in the hierarchy at
 * tcpopt_default_cgroup()), moves itself in, enters a private network namespace when
 * it can (its own lo and sysctls), loads TcpOpt instances on the cgroup and connects
 * marked / unmarked clients to marked / unmarked listeners. tcpopt_peer_has() is checked on both ends, and the SYN and
 * SYN-ACK are captured with an AF_PACKET socket on lo: the option (and its exact 8
 * bytes) must be on the wire exactly where the API says it was exchanged.
 *
 * Cases: (a) marked -> marked (listener marked after and before listen()), (b)
 * unmarked -> marked, (c) marked -> unmarked, (d) the wire in each, (e) two instances
 * at once (one's marks never make the other's program write; freeing one leaves its
 * sockets unmarked), IPv6 and a dual-stack listener, syncookies (never advertised),
 * a stale mark of a closed listener, unmark, 200 connections mixed, API errors; the
 * program does not run for the packets of established connections (its callbacks are
 * off again), and its maps are empty once every socket is closed.
 *
 * Run as root; exit 77 (skip) when not root, without cgroup v2, or when the kernel or
 * the build lacks BPF sock_ops header options. TAP-like output.
 */

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/ip6.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tcpopt.h"

static int tap_n, tap_failed;

#define T(cond, ...)                                                                       \
        do {                                                                               \
                bool _ok = (cond);                                                         \
                tap_n++;                                                                   \
                if (!_ok)                                                                  \
                        tap_failed++;                                                      \
                printf("%sok %d - ", _ok ? "" : "not ", tap_n);                            \
                printf(__VA_ARGS__);                                                       \
                printf("%s\n", _ok ? "" : "   <-- FAILED");                                \
                fflush(stdout);                                                            \
        } while (0)

/* ---- cgroup and network namespace ---- */

static char cg_path[8192], cg_orig[4096];
static char cg_back[8192], cg_pid[32]; /* for cg_leave(), also from a signal handler */
static bool own_netns;

static int write_file(const char *path, const char *s) {
        int fd = open(path, O_WRONLY | O_CLOEXEC), r = 0;

        if (fd < 0)
                return -errno;
        if (write(fd, s, strlen(s)) < 0)
                r = -errno;
        close(fd);
        return r;
}

/* Move back and remove the test cgroup. Async-signal-safe (open, write, rmdir). */
static void cg_leave(void) {
        int fd;

        if (!cg_path[0])
                return;
        fd = open(cg_back, O_WRONLY | O_CLOEXEC);
        if (fd >= 0) {
                (void) !write(fd, cg_pid, strlen(cg_pid));
                close(fd);
        }
        (void) rmdir(cg_path);
        cg_path[0] = 0;
}

static void on_signal(int sig) {
        cg_leave();
        signal(sig, SIG_DFL);
        raise(sig);
}

/* Make smcd-test-tcpopt.PID below this process's own cgroup v2 (the "0::" line of
 * /proc/self/cgroup; below @root if that fails) and move this process in, remembering
 * where it was. */
static int cg_enter(const char *root) {
        char line[4096], p[8300];
        FILE *f;
        int r;

        snprintf(cg_orig, sizeof(cg_orig), "%s", root);
        f = fopen("/proc/self/cgroup", "re");
        if (f) {
                while (fgets(line, sizeof(line), f))
                        if (strncmp(line, "0::", 3) == 0) {
                                line[strcspn(line, "\n")] = 0;
                                snprintf(cg_orig, sizeof(cg_orig), "%s%s", root,
                                         strcmp(line + 3, "/") == 0 ? "" : line + 3);
                        }
                fclose(f);
        }
        snprintf(cg_path, sizeof(cg_path), "%s/smcd-test-tcpopt.%d", cg_orig, (int) getpid());
        if (mkdir(cg_path, 0755) < 0) {
                snprintf(cg_path, sizeof(cg_path), "%s/smcd-test-tcpopt.%d", root, (int) getpid());
                if (mkdir(cg_path, 0755) < 0) {
                        r = -errno;
                        cg_path[0] = 0;
                        return r;
                }
        }
        snprintf(cg_pid, sizeof(cg_pid), "%d\n", (int) getpid());
        snprintf(cg_back, sizeof(cg_back), "%s/cgroup.procs", cg_orig);
        snprintf(p, sizeof(p), "%s/cgroup.procs", cg_path);
        r = write_file(p, cg_pid);
        if (r < 0) {
                rmdir(cg_path);
                cg_path[0] = 0;
                return r;
        }
        signal(SIGTERM, on_signal);
        signal(SIGINT, on_signal);
        signal(SIGHUP, on_signal);
        return 0;
}

static int lo_up(void) {
        struct ifreq ifr = {};
        int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), r = 0;

        if (fd < 0)
                return -errno;
        strcpy(ifr.ifr_name, "lo");
        if (ioctl(fd, SIOCGIFFLAGS, &ifr) < 0)
                r = -errno;
        else {
                ifr.ifr_flags |= IFF_UP;
                if (ioctl(fd, SIOCSIFFLAGS, &ifr) < 0)
                        r = -errno;
        }
        close(fd);
        return r;
}

/* ---- the wire: SYN and SYN-ACK of one connection, captured on lo ---- */

static int cap_fd = -1;

/* Seen packets: -1 not seen, else the number of well-formed SMC options in it. */
struct wire {
        int syn, synack;
        bool syn_exact, synack_exact; /* FE 06 E2 D4 C3 D9 01 01 at a 4-byte boundary */
        bool syn_linux, synack_linux; /* 01 01 FE 06 E2 D4 C3 D9 (Linux net/smc's form) */
        int synack_n, synack_with;     /* SYN-ACKs seen (retransmissions too), with the option */
        char syn_hex[128], synack_hex[128];
};

static const uint8_t smc_bytes[8] = { 0xFE, 0x06, 0xE2, 0xD4, 0xC3, 0xD9, 0x01, 0x01 };

/* Walk the TCP options as a receiver does: EOL ends, NOP is one byte, every other
 * option has a length >= 2 that must fit. Count kind 254 / even length >= 6 / magic
 * E2D4C3D9 (the rule Linux applies). -1 if the list is malformed. */
static int opts_count_smc(const uint8_t *o, size_t n) {
        int count = 0;

        for (size_t i = 0; i < n;) {
                if (o[i] == 0)
                        break;
                if (o[i] == 1) {
                        i++;
                        continue;
                }
                if (i + 1 >= n || o[i + 1] < 2 || i + o[i + 1] > n)
                        return -1;
                if (o[i] == 254 && o[i + 1] >= 6 && (o[i + 1] & 1) == 0 &&
                    memcmp(o + i + 2, "\xE2\xD4\xC3\xD9", 4) == 0)
                        count++;
                i += o[i + 1];
        }
        return count;
}

static const uint8_t smc_bytes_linux[8] = { 0x01, 0x01, 0xFE, 0x06, 0xE2, 0xD4, 0xC3, 0xD9 };

static bool opts_has8(const uint8_t *o, size_t n, const uint8_t b[8]) {
        for (size_t i = 0; i + 8 <= n; i += 4)
                if (memcmp(o + i, b, 8) == 0)
                        return true;
        return false;
}

static bool opts_exact(const uint8_t *o, size_t n) {
        return opts_has8(o, n, smc_bytes);
}

static void hex(char *out, size_t outlen, const uint8_t *o, size_t n) {
        size_t w = 0;

        out[0] = 0;
        for (size_t i = 0; i < n && w + 4 < outlen; i++)
                w += (size_t) snprintf(out + w, outlen - w, "%s%02X", i ? " " : "", o[i]);
}

static int cap_open(void) {
        struct sockaddr_ll sll = { .sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_ALL) };
        int bufsz = 4 << 20;

        sll.sll_ifindex = (int) if_nametoindex("lo");
        if (!sll.sll_ifindex)
                return -errno;
        cap_fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, htons(ETH_P_ALL));
        if (cap_fd < 0)
                return -errno;
        (void) setsockopt(cap_fd, SOL_SOCKET, SO_RCVBUF, &bufsz, sizeof(bufsz));
        if (bind(cap_fd, (struct sockaddr *) &sll, sizeof(sll)) < 0)
                return -errno;
        return 0;
}

static void cap_drain(void) {
        uint8_t b[256];

        while (recv(cap_fd, b, sizeof(b), MSG_DONTWAIT) >= 0)
                ;
}

/* Read what was captured; fill @w from the SYN cport->lport and SYN-ACK lport->cport. */
static void cap_collect(uint16_t cport, uint16_t lport, struct wire *w) {
        uint8_t b[2048];
        struct sockaddr_ll from;
        socklen_t fl;
        ssize_t n;

        memset(w, 0, sizeof(*w));
        w->syn = w->synack = -1;
        for (;;) {
                const uint8_t *tcp;
                size_t off, tlen;
                uint16_t et, sp, dp;
                uint8_t proto, flags;

                fl = sizeof(from);
                n = recvfrom(cap_fd, b, sizeof(b), MSG_DONTWAIT, (struct sockaddr *) &from, &fl);
                if (n < 0)
                        break;
                if (from.sll_pkttype == PACKET_OUTGOING) /* lo: each packet shows twice */
                        continue;
                if (n < 14)
                        continue;
                et = (uint16_t) (b[12] << 8 | b[13]);
                if (et == ETH_P_IP && n >= 34) {
                        off = 14 + (size_t) (b[14] & 0x0f) * 4;
                        proto = b[23];
                } else if (et == ETH_P_IPV6 && n >= 54) {
                        off = 54;
                        proto = b[20];
                } else
                        continue;
                if (proto != IPPROTO_TCP || (size_t) n < off + 20)
                        continue;
                tcp = b + off;
                tlen = (size_t) (tcp[12] >> 4) * 4;
                if (tlen < 20 || (size_t) n < off + tlen)
                        continue;
                sp = (uint16_t) (tcp[0] << 8 | tcp[1]);
                dp = (uint16_t) (tcp[2] << 8 | tcp[3]);
                flags = tcp[13];
                if ((flags & (TH_SYN | TH_ACK)) == TH_SYN && sp == cport && dp == lport &&
                    w->syn < 0) {
                        w->syn = opts_count_smc(tcp + 20, tlen - 20);
                        w->syn_exact = opts_exact(tcp + 20, tlen - 20);
                        w->syn_linux = opts_has8(tcp + 20, tlen - 20, smc_bytes_linux);
                        hex(w->syn_hex, sizeof(w->syn_hex), tcp + 20, tlen - 20);
                } else if ((flags & (TH_SYN | TH_ACK)) == (TH_SYN | TH_ACK) && sp == lport &&
                           dp == cport) {
                        int k = opts_count_smc(tcp + 20, tlen - 20);

                        w->synack_n++;
                        w->synack_with += k > 0;
                        if (w->synack >= 0)
                                continue;
                        w->synack = k;
                        w->synack_exact = opts_exact(tcp + 20, tlen - 20);
                        w->synack_linux = opts_has8(tcp + 20, tlen - 20, smc_bytes_linux);
                        hex(w->synack_hex, sizeof(w->synack_hex), tcp + 20, tlen - 20);
                }
        }
}

/* ---- one connection ---- */

struct spec {
        int family;          /* of the listener */
        bool dual;           /* AF_INET6 listener on :: (V6ONLY off), IPv4 client */
        bool wild;           /* listener on the wildcard address */
        uint16_t port;       /* listener port (0: any) */
        TcpOpt *lst_before;  /* mark the listener before listen() */
        TcpOpt *lst_after;   /* mark the listener after listen() */
        TcpOpt *cli;         /* mark the client before connect() */
};

struct conn {
        int lst, cli, acc;
        uint16_t lport, cport;
        int r_lst, r_cli;    /* tcpopt_mark() results */
        struct wire w;
};

static void conn_close(struct conn *c) {
        if (c->acc >= 0)
                close(c->acc);
        if (c->cli >= 0)
                close(c->cli);
        if (c->lst >= 0)
                close(c->lst);
        c->acc = c->cli = c->lst = -1;
}

static int sa_fill(struct sockaddr_storage *ss, int family, bool wild, uint16_t port) {
        memset(ss, 0, sizeof(*ss));
        if (family == AF_INET) {
                struct sockaddr_in *sin = (struct sockaddr_in *) ss;

                sin->sin_family = AF_INET;
                sin->sin_port = htons(port);
                sin->sin_addr.s_addr = htonl(wild ? INADDR_ANY : INADDR_LOOPBACK);
                return sizeof(*sin);
        }
        struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *) ss;

        sin6->sin6_family = AF_INET6;
        sin6->sin6_port = htons(port);
        sin6->sin6_addr = wild ? in6addr_any : in6addr_loopback;
        return sizeof(*sin6);
}

static uint16_t sock_port(int fd) {
        struct sockaddr_storage ss;
        socklen_t l = sizeof(ss);

        if (getsockname(fd, (struct sockaddr *) &ss, &l) < 0)
                return 0;
        return ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *) &ss)->sin_port
                                             : ((struct sockaddr_in6 *) &ss)->sin6_port);
}

static int listener_open(const struct spec *s, struct conn *c) {
        struct sockaddr_storage ss;
        int one = 1, zero = 0, len;

        c->lst = socket(s->family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (c->lst < 0)
                return -errno;
        (void) setsockopt(c->lst, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (s->family == AF_INET6)
                (void) setsockopt(c->lst, IPPROTO_IPV6, IPV6_V6ONLY, s->dual ? &zero : &one, sizeof(int));
        len = sa_fill(&ss, s->family, s->wild || s->dual, s->port);
        if (bind(c->lst, (struct sockaddr *) &ss, (socklen_t) len) < 0)
                return -errno;
        if (s->lst_before)
                c->r_lst = tcpopt_mark(s->lst_before, c->lst);
        if (listen(c->lst, 256) < 0)
                return -errno;
        if (s->lst_after)
                c->r_lst = tcpopt_mark(s->lst_after, c->lst);
        c->lport = sock_port(c->lst);
        return 0;
}

static int client_connect(const struct spec *s, struct conn *c, TcpOpt *mark) {
        struct sockaddr_storage ss;
        int fam = s->dual ? AF_INET : s->family, len;

        c->cli = socket(fam, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (c->cli < 0)
                return -errno;
        if (mark)
                c->r_cli = tcpopt_mark(mark, c->cli);
        len = sa_fill(&ss, fam, false, c->lport);
        if (connect(c->cli, (struct sockaddr *) &ss, (socklen_t) len) < 0)
                return -errno;
        c->cport = sock_port(c->cli);
        return 0;
}

static int wait_fd(int fd, short ev, int ms) {
        struct pollfd p = { .fd = fd, .events = ev };

        return poll(&p, 1, ms) == 1 ? p.revents : 0;
}

/* Listener, client, connect, accept, capture. Returns 0 or -errno (setup failed). */
static int conn_run(const struct spec *s, struct conn *c) {
        int r;

        memset(c, 0, sizeof(*c));
        c->lst = c->cli = c->acc = -1;
        cap_drain();
        r = listener_open(s, c);
        if (r < 0)
                return r;
        r = client_connect(s, c, s->cli);
        if (r < 0)
                return r;
        c->acc = accept4(c->lst, NULL, NULL, SOCK_CLOEXEC);
        if (c->acc < 0)
                return -errno;
        cap_collect(c->cport, c->lport, &c->w);
        return 0;
}

static const char *fam_name(const struct spec *s) {
        return s->dual ? "IPv4 to dual-stack [::]" : s->family == AF_INET ? "IPv4" : "IPv6";
}

/* Run @s and check: peer_has() of client (through @q_cli) and accepted socket
 * (through @q_acc) and the option on the wire in SYN / SYN-ACK. */
static void check_case(const char *name, const struct spec *s, TcpOpt *q_cli, int want_cli,
                       TcpOpt *q_acc, int want_acc, int want_syn, int want_synack) {
        struct conn c;
        int r, pc, pa;

        r = conn_run(s, &c);
        if (r < 0) {
                T(false, "%s (%s): connection set-up: %s", name, fam_name(s), strerror(-r));
                conn_close(&c);
                return;
        }
        if (s->lst_before || s->lst_after)
                T(c.r_lst == 0, "%s: tcpopt_mark(listener, %s listen()) = %d", name,
                  s->lst_before ? "before" : "after", c.r_lst);
        if (s->cli)
                T(c.r_cli == 0, "%s: tcpopt_mark(client) = %d", name, c.r_cli);
        pc = tcpopt_peer_has(q_cli, c.cli);
        pa = tcpopt_peer_has(q_acc, c.acc);
        T(pc == want_cli && pa == want_acc, "%s (%s): peer_has client %d, accepted %d (want %d, %d)",
          name, fam_name(s), pc, pa, want_cli, want_acc);
        T(c.w.syn == want_syn, "%s: SYN %d->%d on the wire with %d SMC option(s) (want %d): %s",
          name, c.cport, c.lport, c.w.syn, want_syn, c.w.syn_hex);
        T(c.w.synack == want_synack, "%s: SYN-ACK with %d SMC option(s) (want %d): %s", name,
          c.w.synack, want_synack, c.w.synack_hex);
        if (want_syn == 1)
                T(c.w.syn_exact, "%s: SYN has the 8 bytes FE 06 E2 D4 C3 D9 01 01 (4-aligned)", name);
        if (want_synack == 1)
                T(c.w.synack_exact, "%s: SYN-ACK has the 8 bytes FE 06 E2 D4 C3 D9 01 01", name);
        conn_close(&c);
}

/* ---- cases ---- */

static void test_api_errors(TcpOpt *a, int pre_listener) {
        TcpOpt *t = (TcpOpt *) 1;
        int p[2], u, fd, r;
        struct conn c;
        struct spec s = { .family = AF_INET };

        T(tcpopt_new(NULL, -1, &t) == -EINVAL, "tcpopt_new(NULL) = -EINVAL");
        r = tcpopt_new("/nonexistent-smcd-cgroup", -1, &t);
        T(r == -ENOENT, "tcpopt_new(missing dir) = %d (-ENOENT)", r);
        r = tcpopt_new("/proc", -1, &t);
        T(r == -EINVAL, "tcpopt_new(/proc, not cgroup2) = %d (-EINVAL)", r);
        T(t == (TcpOpt *) 1, "failed tcpopt_new leaves *ret alone");
        T(tcpopt_free(NULL) == NULL, "tcpopt_free(NULL)");
        T(tcpopt_mark(NULL, 0) == -EINVAL && tcpopt_peer_has(NULL, 0) == -EINVAL, "NULL TcpOpt: -EINVAL");
        T(tcpopt_mark(a, -1) == -EBADF, "mark(-1) = -EBADF");
        T(pipe2(p, O_CLOEXEC) == 0, "pipe");
        r = tcpopt_mark(a, p[0]);
        T(r == -ENOTSOCK, "mark(pipe) = %d (-ENOTSOCK)", r);
        close(p[0]);
        close(p[1]);
        u = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        r = tcpopt_mark(a, u);
        T(r == -EPROTONOSUPPORT, "mark(UDP) = %d (-EPROTONOSUPPORT)", r);
        r = tcpopt_peer_has(a, u);
        T(r == -EPROTONOSUPPORT, "peer_has(UDP) = %d", r);
        close(u);
        u = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        r = tcpopt_mark(a, u);
        T(r == -EPROTONOSUPPORT, "mark(AF_UNIX) = %d (-EPROTONOSUPPORT)", r);
        close(u);

        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        T(tcpopt_peer_has(a, fd) == 0, "peer_has(fresh unmarked) = 0");
        T(tcpopt_mark(a, fd) == 0 && tcpopt_mark(a, fd) == 0, "mark(fresh) twice = 0");
        r = tcpopt_peer_has(a, fd);
        T(r == -ENOTCONN, "peer_has(marked, never connected) = %d (-ENOTCONN)", r);
        T(tcpopt_unmark(a, fd) == 0 && tcpopt_peer_has(a, fd) == 0, "unmark(fresh), then peer_has 0");
        close(fd);

        r = pre_listener >= 0 ? tcpopt_mark(a, pre_listener) : -EBUSY;
        T(r == -EBUSY, "mark(listening since before any TcpOpt) = %d (-EBUSY)", r);

        if (conn_run(&s, &c) == 0) {
                r = tcpopt_mark(a, c.cli);
                T(r == -EISCONN, "mark(connected) = %d (-EISCONN)", r);
                r = tcpopt_mark(a, c.acc);
                T(r == -EISCONN, "mark(accepted) = %d (-EISCONN)", r);
                T(tcpopt_mark(a, c.lst) == 0, "mark(listener after listen())");
                r = tcpopt_peer_has(a, c.lst);
                T(r == -EINVAL, "peer_has(marked listener) = %d (-EINVAL)", r);
        } else
                T(false, "connection for the error cases");
        conn_close(&c);
}

/* Many connections at once, every other client marked: each accepted socket must report
 * what its own client did (the per-4-tuple records), none left behind. */
static void test_many(TcpOpt *a) {
        enum { N = 200 };
        struct spec s = { .family = AF_INET, .lst_after = a };
        int cli[N], bad = 0, ones = 0, zeros = 0, r;
        uint16_t cport_marked[N];
        struct conn c;

        memset(&c, 0, sizeof(c));
        c.lst = c.cli = c.acc = -1;
        if (listener_open(&s, &c) < 0 || c.r_lst != 0) {
                T(false, "many: listener");
                conn_close(&c);
                return;
        }
        for (int i = 0; i < N; i++) {
                struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(c.lport),
                                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };

                cli[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
                if (i % 2 == 0 && tcpopt_mark(a, cli[i]) < 0)
                        bad++;
                if (connect(cli[i], (struct sockaddr *) &sin, sizeof(sin)) < 0)
                        bad++;
                cport_marked[i] = sock_port(cli[i]);
                r = tcpopt_peer_has(a, cli[i]);
                if (r != (i % 2 == 0))
                        bad++;
        }
        for (int i = 0; i < N; i++) {
                struct sockaddr_in peer;
                socklen_t pl = sizeof(peer);
                int acc = accept4(c.lst, (struct sockaddr *) &peer, &pl, SOCK_CLOEXEC), want = -1;

                if (acc < 0) {
                        bad++;
                        continue;
                }
                for (int j = 0; j < N; j++)
                        if (cport_marked[j] == ntohs(peer.sin_port))
                                want = j % 2 == 0;
                r = tcpopt_peer_has(a, acc);
                if (r != want)
                        bad++;
                r == 1 ? ones++ : zeros++;
                close(acc);
        }
        for (int i = 0; i < N; i++)
                close(cli[i]);
        T(bad == 0 && ones == N / 2 && zeros == N / 2,
          "many: %d connections, every other client marked: %d accepted with the option, %d without, %d mismatches",
          N, ones, zeros, bad);
        conn_close(&c);
}


/* A SYN-ACK retransmission has no SYN at hand (the program repeats the first SYN-ACK's
 * decision from its record). TCP_DEFER_ACCEPT makes the listener ignore the bare final
 * ACK and resend the SYN-ACK after about a second; the client's data then completes
 * the handshake. Marked client: both SYN-ACKs carry the echo and both ends say 1;
 * unmarked: neither, both 0. */
static void test_synack_retransmit(TcpOpt *a, bool mark) {
        const char *name = mark ? "(j) SYN-ACK retransmitted (TCP_DEFER_ACCEPT), marked client"
                                : "(j') SYN-ACK retransmitted (TCP_DEFER_ACCEPT), unmarked client";
        struct spec s = { .family = AF_INET, .lst_after = a };
        struct conn c;
        int one = 1, pc, pa;
        char ch = 'x';

        memset(&c, 0, sizeof(c));
        c.lst = c.cli = c.acc = -1;
        cap_drain();
        if (listener_open(&s, &c) < 0 || setsockopt(c.lst, IPPROTO_TCP, TCP_DEFER_ACCEPT, &one, sizeof(one)) < 0 ||
            client_connect(&s, &c, mark ? a : NULL) < 0) {
                T(false, "%s: set-up: %m", name);
                conn_close(&c);
                return;
        }
        pc = tcpopt_peer_has(a, c.cli);
        cap_collect(c.cport, c.lport, &c.w); /* the SYN and the first SYN-ACK */
        /* wait for the retransmitted SYN-ACK (initial RTO 1 s) */
        for (int i = 0; i < 40; i++) {
                struct wire w;

                usleep(100000);
                cap_collect(c.cport, c.lport, &w);
                if (w.synack_n > 0) {
                        c.w.synack_n += w.synack_n;
                        c.w.synack_with += w.synack_with;
                        break;
                }
        }
        if (write(c.cli, &ch, 1) != 1 || !(wait_fd(c.lst, POLLIN, 3000) & POLLIN) ||
            (c.acc = accept4(c.lst, NULL, NULL, SOCK_CLOEXEC)) < 0) {
                T(false, "%s: data / accept: %m", name);
                conn_close(&c);
                return;
        }
        pa = tcpopt_peer_has(a, c.acc);
        T(c.w.synack_n >= 2 && c.w.synack_with == (mark ? c.w.synack_n : 0),
          "%s: %d SYN-ACKs (first + retransmitted), %d with the option", name, c.w.synack_n, c.w.synack_with);
        T(pc == (mark ? 1 : 0) && pa == (mark ? 1 : 0), "%s: peer_has client %d, accepted %d", name, pc, pa);
        conn_close(&c);
}

/* ---- interop with the kernel's own SMC (AF_SMC), where the kernel has it ---- */

#ifndef AF_SMC
#define AF_SMC 43
#endif

static int peer_has_wait(TcpOpt *t, int fd) {
        int r;

        for (int i = 0; i < 300; i++) {
                r = tcpopt_peer_has(t, fd);
                if (r != -EAGAIN)
                        return r;
                usleep(10000);
        }
        return r;
}

/* An AF_SMC client (kernel) to our listener, marked or not. Marked: the kernel's SYN
 * has its option (01 01 FE 06 E2 D4 C3 D9), we echo, and the kernel then speaks CLC
 * (a proposal, or a decline when it has no SMC device): the first bytes on the
 * accepted socket are the eyecatcher. Unmarked: no echo, the kernel falls back to
 * TCP and the first bytes are the application's. */
static void kernel_client(TcpOpt *a, bool mark) {
        const char *name = mark ? "(k1) kernel AF_SMC client -> marked listener"
                                : "(k2) kernel AF_SMC client -> unmarked listener";
        struct spec s = { .family = AF_INET, .lst_after = mark ? a : NULL };
        struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        uint8_t buf[64];
        struct conn c;
        int pa, ev;
        ssize_t n = -1;

        memset(&c, 0, sizeof(c));
        c.lst = c.cli = c.acc = -1;
        cap_drain();
        if (listener_open(&s, &c) < 0) {
                T(false, "%s: listener", name);
                goto out;
        }
        sin.sin_port = htons(c.lport);
        c.cli = socket(AF_SMC, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (c.cli < 0 || (connect(c.cli, (struct sockaddr *) &sin, sizeof(sin)) < 0 && errno != EINPROGRESS)) {
                T(false, "%s: AF_SMC connect: %m", name);
                goto out;
        }
        if (!(wait_fd(c.lst, POLLIN, 5000) & POLLIN) || (c.acc = accept4(c.lst, NULL, NULL, SOCK_CLOEXEC)) < 0) {
                T(false, "%s: accept", name);
                goto out;
        }
        {
                struct sockaddr_in peer;
                socklen_t pl = sizeof(peer);

                getpeername(c.acc, (struct sockaddr *) &peer, &pl);
                c.cport = ntohs(peer.sin_port);
        }
        pa = peer_has_wait(a, c.acc);
        if (!mark) {
                /* the kernel fell back to TCP: send application bytes through it */
                if (wait_fd(c.cli, POLLOUT, 5000) & POLLOUT)
                        (void) write(c.cli, "hello", 5);
        }
        ev = wait_fd(c.acc, POLLIN, 5000);
        if (ev & POLLIN)
                n = recv(c.acc, buf, sizeof(buf), MSG_DONTWAIT);
        cap_collect(c.cport, c.lport, &c.w);
        T(c.w.syn == 1 && c.w.syn_linux, "%s: the kernel's SYN carries 01 01 FE 06 E2 D4 C3 D9: %s", name,
          c.w.syn_hex);
        T(c.w.synack == (mark ? 1 : 0), "%s: our SYN-ACK has %d SMC option(s) (want %d): %s", name,
          c.w.synack, mark ? 1 : 0, c.w.synack_hex);
        T(pa == (mark ? 1 : 0), "%s: peer_has(accepted) = %d", name, pa);
        if (mark)
                T(n >= 8 && memcmp(buf, "\xE2\xD4\xC3\xD9", 4) == 0 && (buf[4] == 1 || buf[4] == 4),
                  "%s: the kernel then sent CLC: %zd bytes, eyecatcher %02X%02X%02X%02X, type %u (1 proposal, 4 decline)",
                  name, n, n >= 4 ? buf[0] : 0, n >= 4 ? buf[1] : 0, n >= 4 ? buf[2] : 0, n >= 4 ? buf[3] : 0,
                  n >= 5 ? buf[4] : 0);
        else
                T(n == 5 && memcmp(buf, "hello", 5) == 0,
                  "%s: the kernel fell back to TCP: the first bytes are the application's (%zd)", name, n);
out:
        conn_close(&c);
}

/* Our client, marked or not, to an AF_SMC listener (kernel): marked, the kernel echoes
 * in its own form and we read it (NOPs before the option). */
static void kernel_server(TcpOpt *a, bool mark) {
        const char *name = mark ? "(k3) marked client -> kernel AF_SMC listener"
                                : "(k4) unmarked client -> kernel AF_SMC listener";
        struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t sl = sizeof(sin);
        struct conn c;
        int pc, rm = 0;

        memset(&c, 0, sizeof(c));
        c.lst = c.cli = c.acc = -1;
        cap_drain();
        c.lst = socket(AF_SMC, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (c.lst < 0 || bind(c.lst, (struct sockaddr *) &sin, sizeof(sin)) < 0 || listen(c.lst, 8) < 0 ||
            getsockname(c.lst, (struct sockaddr *) &sin, &sl) < 0) {
                T(false, "%s: AF_SMC listener: %m", name);
                goto out;
        }
        c.lport = ntohs(sin.sin_port);
        c.cli = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (mark)
                rm = tcpopt_mark(a, c.cli);
        if (rm < 0 || connect(c.cli, (struct sockaddr *) &sin, sizeof(sin)) < 0) {
                T(false, "%s: connect: %d %m", name, rm);
                goto out;
        }
        c.cport = sock_port(c.cli);
        pc = tcpopt_peer_has(a, c.cli);
        cap_collect(c.cport, c.lport, &c.w);
        T(c.w.syn == (mark ? 1 : 0), "%s: our SYN has %d SMC option(s): %s", name, c.w.syn, c.w.syn_hex);
        if (mark)
                T(c.w.synack == 1 && c.w.synack_linux,
                  "%s: the kernel's SYN-ACK echoes 01 01 FE 06 E2 D4 C3 D9: %s", name, c.w.synack_hex);
        else
                T(c.w.synack == 0, "%s: the kernel's SYN-ACK has no SMC option: %s", name, c.w.synack_hex);
        T(pc == (mark ? 1 : 0), "%s: peer_has(client) = %d", name, pc);
out:
        conn_close(&c);
}

static void test_kernel_smc(TcpOpt *a) {
        int fd = socket(AF_SMC, SOCK_STREAM | SOCK_CLOEXEC, 0);

        if (fd < 0) {
                printf("# no AF_SMC in this kernel (%m): interop with kernel SMC skipped\n");
                return;
        }
        close(fd);
        kernel_client(a, true);
        kernel_client(a, false);
        kernel_server(a, true);
        kernel_server(a, false);
}

/* ---- the program's own state, seen through this process's BPF descriptors ---- */

static bool fd_is(int fd, const char *kind) {
        char p[64], l[64];
        ssize_t n;

        snprintf(p, sizeof(p), "/proc/self/fd/%d", fd);
        n = readlink(p, l, sizeof(l) - 1);
        if (n < 0)
                return false;
        l[n] = 0;
        return strcmp(l, kind) == 0;
}

/* Entries in all maps called @name this process holds (the TcpOpt instances'). */
static long map_entries(const char *name) {
        struct dirent *de;
        long n = 0;
        DIR *d = opendir("/proc/self/fd");

        if (!d)
                return -errno;
        while ((de = readdir(d))) {
                struct bpf_map_info info = {};
                uint32_t len = sizeof(info);
                uint8_t key[64], next[64];
                int fd = atoi(de->d_name);
                void *prev = NULL;

                if (de->d_name[0] == '.' || !fd_is(fd, "anon_inode:bpf-map"))
                        continue;
                if (bpf_obj_get_info_by_fd(fd, &info, &len) < 0 || strcmp(info.name, name) != 0 ||
                    info.key_size > sizeof(key))
                        continue;
                while (bpf_map_get_next_key(fd, prev, next) == 0) {
                        memcpy(key, next, info.key_size);
                        prev = key;
                        n++;
                }
        }
        closedir(d);
        return n;
}

/* Runs of the smc_tcpopt programs this process holds (while BPF stats are on). */
static uint64_t prog_runs(void) {
        struct dirent *de;
        uint64_t n = 0;
        DIR *d = opendir("/proc/self/fd");

        if (!d)
                return 0;
        while ((de = readdir(d))) {
                struct bpf_prog_info info = {};
                uint32_t len = sizeof(info);
                int fd = atoi(de->d_name);

                if (de->d_name[0] == '.' || !fd_is(fd, "anon_inode:bpf-prog"))
                        continue;
                if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0 && strcmp(info.name, "smc_tcpopt") == 0)
                        n += info.run_cnt;
        }
        closedir(d);
        return n;
}

/* ---- listeners of two network namespaces on the same address and port ---- */

/* A wildcard IPv4 listener on @port (0: any) in the current namespace, marked after
 * listen() by @mark (NULL: not marked). Returns the fd or -errno. */
static int ns_listener(uint16_t port, TcpOpt *mark) {
        struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(port) };
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1, r;

        if (fd < 0)
                return -errno;
        (void) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, (struct sockaddr *) &sin, sizeof(sin)) < 0 || listen(fd, 16) < 0) {
                r = -errno;
                close(fd);
                return r;
        }
        if (mark && (r = tcpopt_mark(mark, fd)) < 0) {
                close(fd);
                return r;
        }
        return fd;
}

/* A client marked by @a connects to 127.0.0.1:@port of the current namespace, @lst
 * accepts: tcpopt_peer_has() of both ends in *@pc / *@pa (-100: set-up failed). */
static void ns_pair(TcpOpt *a, int lst, uint16_t port, int *pc, int *pa) {
        struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(port),
                                   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        int cli = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), acc = -1;

        *pc = *pa = -100;
        if (cli >= 0 && tcpopt_mark(a, cli) == 0 && connect(cli, (struct sockaddr *) &sin, sizeof(sin)) == 0 &&
            (acc = accept4(lst, NULL, NULL, SOCK_CLOEXEC)) >= 0) {
                *pc = tcpopt_peer_has(a, cli);
                *pa = tcpopt_peer_has(a, acc);
        }
        if (acc >= 0)
                close(acc);
        if (cli >= 0)
                close(cli);
}

/* Containers: every namespace may have a listener on 0.0.0.0:80. The program tells
 * them apart by the namespace: (n1) a marked listener in each, the one marked last
 * closes, the other still echoes; (n2) a plain listener of one namespace never echoes
 * because another namespace has a marked one on the same address and port (its client
 * would speak CLC to a plain server). Runs in a second namespace made here. */
static void test_netns(TcpOpt *a) {
        int ns1 = -1, ns2 = -1, l1 = -1, l2 = -1, pc, pa;
        uint16_t port;

        ns1 = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
        if (ns1 < 0 || unshare(CLONE_NEWNET) < 0 || lo_up() < 0) {
                printf("# no second network namespace (%m): namespace cases skipped\n");
                if (ns1 >= 0) {
                        (void) setns(ns1, CLONE_NEWNET);
                        close(ns1);
                }
                return;
        }
        ns2 = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
        if (ns2 < 0 || setns(ns1, CLONE_NEWNET) < 0) {
                T(false, "namespaces: open / setns: %m");
                goto out;
        }

        /* (n1) */
        l1 = ns_listener(0, a);
        port = l1 >= 0 ? sock_port(l1) : 0;
        T(l1 >= 0 && port, "(n1) marked listener 0.0.0.0:%u in namespace 1", port);
        if (l1 < 0 || setns(ns2, CLONE_NEWNET) < 0)
                goto out;
        l2 = ns_listener(port, a);
        T(l2 >= 0, "(n1) marked listener 0.0.0.0:%u in namespace 2: %s", port, l2 < 0 ? strerror(-l2) : "ok");
        if (l2 >= 0) {
                ns_pair(a, l2, port, &pc, &pa);
                T(pc == 1 && pa == 1, "(n1) namespace 2: marked -> marked: peer_has %d/%d (want 1 1)", pc, pa);
                close(l2);
                l2 = -1;
        }
        if (setns(ns1, CLONE_NEWNET) < 0)
                goto out;
        ns_pair(a, l1, port, &pc, &pa);
        T(pc == 1 && pa == 1,
          "(n1) namespace 2's listener (marked last) closed: namespace 1's still echoes: peer_has %d/%d (want 1 1)",
          pc, pa);

        close(l1);
        l1 = -1;

        /* (n2): a plain listener in namespace 2 first, then a marked one on its address
         * and port in namespace 1 */
        if (setns(ns2, CLONE_NEWNET) < 0)
                goto out;
        l2 = ns_listener(0, NULL);
        port = l2 >= 0 ? sock_port(l2) : 0;
        T(l2 >= 0 && port, "(n2) plain listener 0.0.0.0:%u in namespace 2", port);
        if (l2 < 0 || setns(ns1, CLONE_NEWNET) < 0)
                goto out;
        l1 = ns_listener(port, a);
        T(l1 >= 0, "(n2) then a marked listener 0.0.0.0:%u in namespace 1", port);
        if (l1 < 0 || setns(ns2, CLONE_NEWNET) < 0)
                goto out;
        ns_pair(a, l2, port, &pc, &pa);
        T(pc == 0 && pa == 0,
          "(n2) marked client -> the plain listener of namespace 2: peer_has %d/%d (want 0 0: an echo would make the client speak CLC to a plain server)",
          pc, pa);
        if (setns(ns1, CLONE_NEWNET) < 0)
                goto out;
        ns_pair(a, l1, port, &pc, &pa);
        T(pc == 1 && pa == 1, "(n2) namespace 1's marked listener echoes: peer_has %d/%d (want 1 1)", pc, pa);

out:
        if (l2 >= 0)
                close(l2);
        if (l1 >= 0)
                close(l1);
        if (setns(ns1, CLONE_NEWNET) < 0)
                T(false, "back to namespace 1: %m");
        if (ns2 >= 0)
                close(ns2);
        close(ns1);
}

/* smcd restarted: a listener that started listening under the previous instance can be
 * marked by the next one if that one loads with the previous smc_flagged map
 * (tcpopt_new()'s @flagged_fd); without it -EBUSY; a map of another layout is refused
 * and the load goes on. *@pa is replaced by the new instance. */
static void test_restart(TcpOpt **pa) {
        struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        TcpOpt *x = NULL;
        int lst, keep, reused = 0, r, pc, pa_, bad;
        uint16_t port;

        lst = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (lst < 0 || bind(lst, (struct sockaddr *) &sin, sizeof(sin)) < 0 || listen(lst, 16) < 0) {
                T(false, "(r) restart: listener: %m");
                if (lst >= 0)
                        close(lst);
                return;
        }
        port = sock_port(lst);
        keep = fcntl(tcpopt_flagged_fd(*pa, NULL), F_DUPFD_CLOEXEC, 3);
        T(keep >= 0, "(r) the instance's smc_flagged map descriptor kept (%d)", keep);
        *pa = tcpopt_free(*pa);

        r = tcpopt_new(cg_path, -1, &x);
        if (r == 0) {
                r = tcpopt_mark(x, lst);
                T(r == -EBUSY, "(r) new instance without the old map: mark(listener from before) = %d (-EBUSY)", r);
                x = tcpopt_free(x);
        }
        bad = open("/dev/null", O_RDONLY | O_CLOEXEC);
        r = tcpopt_new(cg_path, bad, &x);
        T(r == 0 && tcpopt_flagged_fd(x, &reused) >= 0 && reused == -1,
          "(r) new instance given a descriptor that is no smc_flagged map: loads (%d), refuses it (reused %d)", r,
          reused);
        x = tcpopt_free(x);
        if (bad >= 0)
                close(bad);

        r = tcpopt_new(cg_path, keep, pa);
        T(r == 0 && tcpopt_flagged_fd(*pa, &reused) >= 0 && reused == 1,
          "(r) new instance with the old smc_flagged map: loads (%d), reuses it (%d)", r, reused);
        if (r < 0) {
                close(keep);
                close(lst);
                return;
        }
        r = tcpopt_mark(*pa, lst);
        T(r == 0, "(r) new instance marks the listener that started under the old one: %d", r);
        ns_pair(*pa, lst, port, &pc, &pa_);
        T(pc == 1 && pa_ == 1, "(r) marked -> that listener: peer_has %d/%d (want 1 1)", pc, pa_);
        close(keep);
        close(lst);
}

/* Listeners that may share their address and port echo only if every listener
 * overlapping them is marked: (p) a plain SO_REUSEPORT member listening first, then
 * one that is marked: the mark says 1 (no echo yet) and a marked client gets no echo
 * from either member (before 12c52b3, the plain member echoed for the marked one);
 * (p') an SO_BINDTODEVICE listener alone on its port is marked. */
static void test_shared_address(TcpOpt *a) {
        struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        int one = 1, lp = -1, ls = -1, ld = -1, r, pc, pa, bad = 0;
        socklen_t sl = sizeof(sin);

        lp = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (lp < 0 || ls < 0 || setsockopt(lp, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0 ||
            setsockopt(ls, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0 ||
            bind(lp, (struct sockaddr *) &sin, sizeof(sin)) < 0 || listen(lp, 64) < 0 ||
            getsockname(lp, (struct sockaddr *) &sin, &sl) < 0 || bind(ls, (struct sockaddr *) &sin, sizeof(sin)) < 0 ||
            listen(ls, 64) < 0) {
                T(false, "(p) SO_REUSEPORT group: %m");
                goto out;
        }
        r = tcpopt_mark(a, ls);
        T(r == 1, "(p) mark(second SO_REUSEPORT member, the first plain) = %d (1: marked, no echo)", r);
        for (int i = 0; i < 16; i++) {
                int cli = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), acc = -1;
                struct pollfd p[2] = { { .fd = lp, .events = POLLIN }, { .fd = ls, .events = POLLIN } };

                pc = pa = -100;
                if (cli >= 0 && tcpopt_mark(a, cli) == 0 && connect(cli, (struct sockaddr *) &sin, sizeof(sin)) == 0 &&
                    poll(p, 2, 2000) > 0)
                        acc = accept4((p[0].revents & POLLIN) ? lp : ls, NULL, NULL, SOCK_CLOEXEC);
                if (acc >= 0) {
                        pc = tcpopt_peer_has(a, cli);
                        pa = tcpopt_peer_has(a, acc);
                }
                if (pc != 0 || pa != 0)
                        bad++;
                if (acc >= 0)
                        close(acc);
                if (cli >= 0)
                        close(cli);
        }
        T(bad == 0, "(p) 16 marked clients to the group: no echo from either member (%d with an echo or failed)", bad);

        ld = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sin.sin_port = 0;
        if (ld < 0 || setsockopt(ld, SOL_SOCKET, SO_BINDTODEVICE, "lo", 3) < 0 ||
            bind(ld, (struct sockaddr *) &sin, sizeof(sin)) < 0 || listen(ld, 4) < 0) {
                printf("# (p') SO_BINDTODEVICE listener: %m: skipped\n");
                goto out;
        }
        r = tcpopt_mark(a, ld);
        T(r == 0, "(p') mark(listener with SO_BINDTODEVICE, alone on its port) = %d (0)", r);

out:
        if (ld >= 0)
                close(ld);
        if (ls >= 0)
                close(ls);
        if (lp >= 0)
                close(lp);
}

/* A SO_REUSEPORT listener on @sin (port 0: a free one, written back), listening. */
static int reuseport_listener(struct sockaddr_in *sin) {
        socklen_t sl = sizeof(*sin);
        int one = 1, fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

        if (fd < 0)
                return -1;
        if (setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0 ||
            bind(fd, (struct sockaddr *) sin, sizeof(*sin)) < 0 || listen(fd, 64) < 0 ||
            getsockname(fd, (struct sockaddr *) sin, &sl) < 0) {
                close(fd);
                return -1;
        }
        return fd;
}

/* @n marked clients to the listeners @l[0..@nl-1] (one port, @sin): how many of them
 * had the option both ways on both ends (*@echoed), on neither end (*@plain), and how
 * many each listener accepted (@got, may be NULL). */
static void group_clients(TcpOpt *a, const struct sockaddr_in *sin, const int *l, int nl, int n, int *echoed,
                          int *plain, int *got) {
        *echoed = *plain = 0;
        for (int i = 0; i < n; i++) {
                int cli = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), acc = -1, pc = -100, pa = -100, w = -1;
                struct pollfd p[4];

                for (int j = 0; j < nl && j < 4; j++)
                        p[j] = (struct pollfd){ .fd = l[j], .events = POLLIN };
                if (cli >= 0 && tcpopt_mark(a, cli) == 0 && connect(cli, (const struct sockaddr *) sin, sizeof(*sin)) == 0 &&
                    poll(p, (nfds_t) nl, 2000) > 0)
                        for (int j = 0; j < nl && w < 0; j++)
                                if (p[j].revents & POLLIN)
                                        w = j;
                if (w >= 0)
                        acc = accept4(l[w], NULL, NULL, SOCK_CLOEXEC);
                if (acc >= 0) {
                        pc = tcpopt_peer_has(a, cli);
                        pa = tcpopt_peer_has(a, acc);
                        if (got)
                                got[w]++;
                }
                if (pc == 1 && pa == 1)
                        (*echoed)++;
                else if (pc == 0 && pa == 0)
                        (*plain)++;
                if (acc >= 0)
                        close(acc);
                if (cli >= 0)
                        close(cli);
        }
}

/* (v) A marked IPV6_V6ONLY listener on [::]:P and a plain IPv4 one on 0.0.0.0:P (the
 * plain one first): IPv4 connections go to the plain one, which must not echo (before,
 * the IPv4 look-up fell back to the [::] entry: the plain server got CLC; helper 118);
 * IPv6 connections to the marked one still get the echo. */
static void test_v6only(TcpOpt *a) {
        struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY) };
        struct sockaddr_in6 sin6 = { .sin6_family = AF_INET6, .sin6_addr = IN6ADDR_ANY_INIT };
        int l4 = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), l6 = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int one = 1, r, echoed, plain, pc = -100, pa = -100;
        socklen_t sl = sizeof(sin);

        if (l4 < 0 || l6 < 0 || bind(l4, (struct sockaddr *) &sin, sizeof(sin)) < 0 || listen(l4, 16) < 0 ||
            getsockname(l4, (struct sockaddr *) &sin, &sl) < 0 ||
            setsockopt(l6, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one)) < 0) {
                T(false, "(v) listeners: %m");
                goto out;
        }
        sin6.sin6_port = sin.sin_port;
        if (bind(l6, (struct sockaddr *) &sin6, sizeof(sin6)) < 0 || listen(l6, 16) < 0) {
                printf("# (v) no IPv6 listener (%m): skipped\n");
                goto out;
        }
        r = tcpopt_mark(a, l6);
        sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        group_clients(a, &sin, &l4, 1, 8, &echoed, &plain, NULL);
        T(r == 0 && plain == 8, "(v) marked V6ONLY [::]:P, plain 0.0.0.0:P: mark %d, %d of 8 IPv4 clients plain on both ends (0 8)",
          r, plain);
        {
                int cli = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0), acc = -1;

                sin6.sin6_addr = in6addr_loopback;
                if (cli >= 0 && tcpopt_mark(a, cli) == 0 &&
                    connect(cli, (struct sockaddr *) &sin6, sizeof(sin6)) == 0 &&
                    (acc = accept4(l6, NULL, NULL, SOCK_CLOEXEC)) >= 0) {
                        pc = tcpopt_peer_has(a, cli);
                        pa = tcpopt_peer_has(a, acc);
                }
                if (acc >= 0)
                        close(acc);
                if (cli >= 0)
                        close(cli);
        }
        T(pc == 1 && pa == 1, "(v) an IPv6 client of the marked V6ONLY listener: peer_has %d/%d (1 1)", pc, pa);
out:
        if (l4 >= 0)
                close(l4);
        if (l6 >= 0)
                close(l6);
}

/* SO_REUSEPORT groups whose members are all marked echo: (rp1) two members, each
 * marked after it listens: every marked client gets the echo, from either member;
 * (rp2) the member whose mark the entry names closes: the entry passes to the other,
 * which still echoes; (rp3) a plain member joins: no member echoes any more (the plain
 * one would have answered for the group); (rp4) it leaves and the marked one is marked
 * again: echoes again; (rp5) in another network namespace than the caller's: a plain
 * member there keeps the mark from echoing (the listeners are read in the listener's
 * namespace), a group of one there is marked and echoes; (rp6) both members listen
 * before either is marked (as after an smcd restart, or workers starting at once):
 * the first mark says 1, the second one turns the echo on for both. */
static void test_reuseport_group(TcpOpt *a) {
        struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        int l[2] = { -1, -1 }, lp = -1, r1, r2, echoed, plain, got[2] = { 0, 0 };
        int ns1 = -1, ns2 = -1, lx = -1, ly = -1, pc, pa;

        l[0] = reuseport_listener(&sin);
        r1 = l[0] >= 0 ? tcpopt_mark(a, l[0]) : -1;
        l[1] = l[0] >= 0 ? reuseport_listener(&sin) : -1;
        r2 = l[1] >= 0 ? tcpopt_mark(a, l[1]) : -1;
        T(r1 == 0 && r2 == 0, "(rp1) mark(first member) = %d, mark(second member) = %d (0 0)", r1, r2);
        if (l[1] < 0)
                goto out;
        group_clients(a, &sin, l, 2, 24, &echoed, &plain, got);
        T(echoed == 24, "(rp1) 24 marked clients to a group of two marked members: %d echoed (24; accepted %d + %d)",
          echoed, got[0], got[1]);

        close(l[1]);
        l[1] = -1;
        group_clients(a, &sin, l, 1, 8, &echoed, &plain, NULL);
        T(echoed == 8, "(rp2) the member the entry named closed: %d of 8 echoed by the other (8)", echoed);

        lp = reuseport_listener(&sin);
        l[1] = lp;
        group_clients(a, &sin, l, 2, 16, &echoed, &plain, NULL);
        T(lp >= 0 && plain == 16, "(rp3) a plain member joined: %d of 16 plain on both ends, %d echoed (16 0)", plain,
          echoed);
        r1 = tcpopt_mark(a, l[0]);
        T(r1 == 1, "(rp3) mark(the marked member again) with the plain one listening = %d (1)", r1);

        if (lp >= 0)
                close(lp);
        l[1] = lp = -1;
        r1 = tcpopt_mark(a, l[0]);
        group_clients(a, &sin, l, 1, 8, &echoed, &plain, NULL);
        T(r1 == 0 && echoed == 8, "(rp4) the plain member gone, marked again: mark %d, %d of 8 echoed (0 8)", r1, echoed);

        /* (rp6) */
        for (int i = 0; i < 2; i++)
                if (l[i] >= 0)
                        close(l[i]);
        got[0] = got[1] = 0;
        sin.sin_port = 0;
        l[0] = reuseport_listener(&sin);
        l[1] = l[0] >= 0 ? reuseport_listener(&sin) : -1;
        if (l[1] < 0) {
                T(false, "(rp6) two SO_REUSEPORT listeners: %m");
                goto out;
        }
        r1 = tcpopt_mark(a, l[0]);
        r2 = tcpopt_mark(a, l[1]);
        group_clients(a, &sin, l, 2, 24, &echoed, &plain, got);
        T(r1 == 1 && r2 == 0 && echoed == 24,
          "(rp6) both listening, then marked: mark %d then %d (1 0), %d of 24 echoed (24; accepted %d + %d)", r1, r2,
          echoed, got[0], got[1]);

        /* (rp5) */
        ns1 = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
        if (ns1 < 0 || unshare(CLONE_NEWNET) < 0 || lo_up() < 0) {
                printf("# (rp5) no second network namespace (%m): skipped\n");
                if (ns1 >= 0)
                        (void) setns(ns1, CLONE_NEWNET);
                goto out;
        }
        ns2 = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
        /* (the same port in the other namespace) */
        ly = reuseport_listener(&sin);
        lx = ly >= 0 ? reuseport_listener(&sin) : -1;
        if (ns2 < 0 || lx < 0 || setns(ns1, CLONE_NEWNET) < 0) {
                T(false, "(rp5) listeners in a second namespace: %m");
                goto out;
        }
        r1 = tcpopt_mark(a, lx);
        T(r1 == 1, "(rp5) mark(member in another namespace, a plain member there) = %d (1)", r1);
        close(ly);
        ly = -1;
        r1 = tcpopt_mark(a, lx);
        T(r1 == 0, "(rp5) mark(a group of one in another namespace) = %d (0)", r1);
        if (setns(ns2, CLONE_NEWNET) == 0) {
                ns_pair(a, lx, ntohs(sin.sin_port), &pc, &pa);
                T(pc == 1 && pa == 1, "(rp5) a marked client there: peer_has %d/%d (1 1)", pc, pa);
                (void) setns(ns1, CLONE_NEWNET);
        }

out:
        if (ly >= 0)
                close(ly);
        if (lx >= 0)
                close(lx);
        if (ns2 >= 0)
                close(ns2);
        if (ns1 >= 0) {
                (void) setns(ns1, CLONE_NEWNET);
                close(ns1);
        }
        for (int i = 0; i < 2; i++)
                if (l[i] >= 0)
                        close(l[i]);
}

/* 100 one-byte round trips on an established pair: the program must not run for
 * them (the header-option callbacks were turned off at ESTABLISHED). */
static void test_callbacks_off(const char *name, const struct spec *s, int want_peer, TcpOpt *q) {
        struct conn c;
        uint64_t r0, r1;
        int one = 1, stats, bad = 0;
        char ch = 'x';

        stats = bpf_enable_stats(BPF_STATS_RUN_TIME);
        if (stats < 0) {
                printf("# BPF_ENABLE_STATS: %s: %s skipped\n", strerror(errno), name);
                return;
        }
        if (conn_run(s, &c) < 0) {
                T(false, "%s: set-up", name);
                conn_close(&c);
                close(stats);
                return;
        }
        (void) setsockopt(c.cli, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        (void) setsockopt(c.acc, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        T(tcpopt_peer_has(q, c.cli) == want_peer && tcpopt_peer_has(q, c.acc) == want_peer,
          "%s: peer_has %d on both ends", name, want_peer);
        r0 = prog_runs();
        for (int i = 0; i < 100; i++) {
                if (write(c.cli, &ch, 1) != 1 || read(c.acc, &ch, 1) != 1 ||
                    write(c.acc, &ch, 1) != 1 || read(c.cli, &ch, 1) != 1)
                        bad++;
        }
        r1 = prog_runs();
        T(bad == 0 && r1 == r0, "%s: 200 data segments after the handshake ran the program %llu times (want 0)",
          name, (unsigned long long) (r1 - r0));
        conn_close(&c);
        close(stats);
}

int main(void) {
        const char *root;
        TcpOpt *a = NULL, *b = NULL;
        int r, pre_listener = -1;
        bool v6 = true;
        struct timespec t0, t1;

        setvbuf(stdout, NULL, _IOLBF, 0);
        signal(SIGPIPE, SIG_IGN); /* a closed stdout must not skip the clean-up */
        clock_gettime(CLOCK_MONOTONIC, &t0);
        if (geteuid() != 0) {
                printf("# SKIP: needs root (BPF, cgroups)\n");
                return 77;
        }
        root = tcpopt_default_cgroup();
        if (!root) {
                printf("# SKIP: no cgroup v2 mounted (/proc/self/mountinfo)\n");
                return 77;
        }
        printf("# kernel cgroup2 root: %s\n", root);
        if (unshare(CLONE_NEWNET) == 0 && lo_up() == 0)
                own_netns = true;
        else
                printf("# no private network namespace (%m): using the host's lo\n");
        r = cg_enter(root);
        if (r < 0) {
                printf("# SKIP: cannot make / enter a child cgroup under %s: %s\n", root, strerror(-r));
                return 77;
        }
        printf("# test cgroup: %s\n", cg_path);

        /* a listener from before any TcpOpt: cannot be marked later */
        {
                struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };

                pre_listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
                if (bind(pre_listener, (struct sockaddr *) &sin, sizeof(sin)) < 0 || listen(pre_listener, 1) < 0) {
                        close(pre_listener);
                        pre_listener = -1;
                }
        }

        r = tcpopt_new(cg_path, -1, &a);
        if (r == -ENOTSUP || r == -EPERM || r == -ENOSYS) {
                printf("# SKIP: tcpopt_new: %s (kernel or build without BPF sock_ops header options)\n",
                       strerror(-r));
                cg_leave();
                return 77;
        }
        T(r == 0, "tcpopt_new(%s) = %d", cg_path, r);
        if (r < 0) {
                cg_leave();
                return 1;
        }
        r = cap_open();
        T(r == 0, "AF_PACKET capture on lo (%s netns)", own_netns ? "private" : "host");
        if (r < 0)
                goto out;
        {
                int t6 = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
                struct sockaddr_in6 s6 = { .sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT };

                if (t6 < 0 || bind(t6, (struct sockaddr *) &s6, sizeof(s6)) < 0)
                        v6 = false;
                if (t6 >= 0)
                        close(t6);
        }

        /* (a) marked client -> marked listener */
        check_case("(a) marked -> marked listener (marked after listen)",
                   &(struct spec){ .family = AF_INET, .lst_after = a, .cli = a }, a, 1, a, 1, 1, 1);
        check_case("(a') marked -> marked listener (marked before listen)",
                   &(struct spec){ .family = AF_INET, .lst_before = a, .cli = a }, a, 1, a, 1, 1, 1);
        check_case("(a'') marked -> marked wildcard listener",
                   &(struct spec){ .family = AF_INET, .wild = true, .lst_after = a, .cli = a }, a, 1, a, 1, 1, 1);
        /* (b) unmarked client -> marked listener */
        check_case("(b) unmarked -> marked listener",
                   &(struct spec){ .family = AF_INET, .lst_after = a }, a, 0, a, 0, 0, 0);
        /* (c) marked client -> unmarked listener */
        check_case("(c) marked -> unmarked listener",
                   &(struct spec){ .family = AF_INET, .cli = a }, a, 0, a, 0, 1, 0);
        check_case("(c') unmarked -> unmarked listener",
                   &(struct spec){ .family = AF_INET }, a, 0, a, 0, 0, 0);

        if (v6) {
                check_case("(f) IPv6 marked -> marked",
                           &(struct spec){ .family = AF_INET6, .lst_after = a, .cli = a }, a, 1, a, 1, 1, 1);
                check_case("(f') IPv6 unmarked -> marked",
                           &(struct spec){ .family = AF_INET6, .lst_before = a }, a, 0, a, 0, 0, 0);
                check_case("(f'') IPv4 marked -> marked dual-stack listener",
                           &(struct spec){ .family = AF_INET6, .dual = true, .lst_after = a, .cli = a },
                           a, 1, a, 1, 1, 1);
        } else
                printf("# no IPv6 loopback: IPv6 cases skipped\n");

        /* (e) two instances: each acts only on its own marks */
        r = tcpopt_new(cg_path, -1, &b);
        T(r == 0, "second TcpOpt on the same cgroup: %d", r);
        if (r == 0) {
                check_case("(e1) client marked by A -> listener marked by B",
                           &(struct spec){ .family = AF_INET, .lst_after = b, .cli = a }, a, 1, b, 1, 1, 1);
                check_case("(e2) same, asked the other instance",
                           &(struct spec){ .family = AF_INET, .lst_after = b, .cli = a }, b, 0, a, 0, 1, 1);
                check_case("(e3) client marked by B -> unmarked listener (A attached too)",
                           &(struct spec){ .family = AF_INET, .cli = b }, b, 0, a, 0, 1, 0);
                check_case("(e4) unmarked client -> listener marked by B",
                           &(struct spec){ .family = AF_INET, .lst_before = b }, a, 0, b, 0, 0, 0);
                /* A marks both ends, then A goes away: B must not write for A's marks */
                {
                        struct spec s = { .family = AF_INET, .lst_after = a };
                        struct conn c;
                        int rm, pc, pa;

                        memset(&c, 0, sizeof(c));
                        c.lst = c.cli = c.acc = -1;
                        cap_drain();
                        r = listener_open(&s, &c);
                        c.cli = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
                        rm = tcpopt_mark(a, c.cli);
                        a = tcpopt_free(a);
                        if (r == 0 && rm == 0 && c.r_lst == 0) {
                                struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(c.lport),
                                                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };

                                r = connect(c.cli, (struct sockaddr *) &sin, sizeof(sin));
                                c.cport = sock_port(c.cli);
                                c.acc = accept4(c.lst, NULL, NULL, SOCK_CLOEXEC);
                                cap_collect(c.cport, c.lport, &c.w);
                                pc = tcpopt_peer_has(b, c.cli);
                                pa = tcpopt_peer_has(b, c.acc);
                                T(r == 0 && c.acc >= 0 && c.w.syn == 0 && c.w.synack == 0 && pc == 0 && pa == 0,
                                  "(e5) A marked client and listener, A freed, B attached: SYN %d, SYN-ACK %d options, B peer_has %d/%d (want 0 0 0 0)",
                                  c.w.syn, c.w.synack, pc, pa);
                        } else
                                T(false, "(e5) set-up: listen %d mark %d/%d", r, rm, c.r_lst);
                        conn_close(&c);
                }
                r = tcpopt_new(cg_path, -1, &a);
                T(r == 0, "TcpOpt A loaded again: %d", r);
                if (r < 0)
                        goto out;
                check_case("(e6) B alone marks both ends, A back",
                           &(struct spec){ .family = AF_INET, .lst_after = b, .cli = b }, b, 1, b, 1, 1, 1);
                b = tcpopt_free(b);
                check_case("(e7) B freed: its old program is gone, A marks both",
                           &(struct spec){ .family = AF_INET, .lst_after = a, .cli = a }, a, 1, a, 1, 1, 1);
        }

        /* a marked listener closed: a new unmarked listener on its port must not echo */
        {
                struct spec s1 = { .family = AF_INET, .lst_after = a };
                struct conn c1;

                memset(&c1, 0, sizeof(c1));
                c1.lst = c1.cli = c1.acc = -1;
                r = listener_open(&s1, &c1);
                T(r == 0 && c1.r_lst == 0, "stale: listener on port %u marked", c1.lport);
                conn_close(&c1);
                check_case("(g) stale mark: new unmarked listener on a marked listener's old port",
                           &(struct spec){ .family = AF_INET, .port = c1.lport, .cli = a }, a, 0, a, 0, 1, 0);
        }

        /* unmark */
        {
                struct spec s = { .family = AF_INET, .lst_after = a };
                struct conn c;

                memset(&c, 0, sizeof(c));
                c.lst = c.cli = c.acc = -1;
                cap_drain();
                r = listener_open(&s, &c);
                T(r == 0 && tcpopt_unmark(a, c.lst) == 0, "unmark(listener)");
                if (r == 0 && client_connect(&s, &c, a) == 0) {
                        c.acc = accept4(c.lst, NULL, NULL, SOCK_CLOEXEC);
                        cap_collect(c.cport, c.lport, &c.w);
                        T(c.w.syn == 1 && c.w.synack == 0 && tcpopt_peer_has(a, c.cli) == 0 &&
                          tcpopt_peer_has(a, c.acc) == 0,
                          "(h) marked -> unmarked-again listener: SYN %d, SYN-ACK %d, peer_has 0/0", c.w.syn,
                          c.w.synack);
                } else
                        T(false, "(h) set-up");
                conn_close(&c);
        }

        /* syncookies: never advertise */
        if (own_netns) {
                r = write_file("/proc/sys/net/ipv4/tcp_syncookies", "2\n");
                T(r == 0, "net.ipv4.tcp_syncookies=2 in the private netns");
                if (r == 0) {
                        check_case("(i) syncookies always: marked -> marked",
                                   &(struct spec){ .family = AF_INET, .lst_after = a, .cli = a }, a, 0, a, 0, 1, 0);
                        (void) write_file("/proc/sys/net/ipv4/tcp_syncookies", "1\n");
                        check_case("(i') syncookies back to 1: marked -> marked",
                                   &(struct spec){ .family = AF_INET, .lst_after = a, .cli = a }, a, 1, a, 1, 1, 1);
                }
        } else
                printf("# host netns: syncookie case skipped\n");

        if (own_netns)
                test_netns(a);
        else
                printf("# host netns: namespace cases skipped\n");
        test_restart(&a);
        if (!a)
                goto out;
        test_shared_address(a);
        test_reuseport_group(a);
        test_v6only(a);
        test_many(a);
        test_synack_retransmit(a, true);
        test_synack_retransmit(a, false);
        test_kernel_smc(a);
        test_callbacks_off("callbacks off: marked -> marked",
                           &(struct spec){ .family = AF_INET, .lst_after = a, .cli = a }, 1, a);
        test_callbacks_off("callbacks off: unmarked -> unmarked (callbacks inherited from the listener)",
                           &(struct spec){ .family = AF_INET }, 0, a);
        test_api_errors(a, pre_listener);
        {
                long ns = map_entries("smc_synack"), nl = map_entries("smc_listen"),
                     nf = map_entries("smc_flagged"), nm = map_entries("smc_marks"), nb = map_entries("smc_members");

                T(ns == 0 && nl == 0 && nf == 0 && nb == 0,
                  "all sockets closed: smc_synack %ld, smc_listen %ld, smc_flagged %ld, smc_members %ld entries left "
                  "(want 0); smc_marks %ld",
                  ns, nl, nf, nb, nm);
        }

out:
        if (pre_listener >= 0)
                close(pre_listener);
        if (cap_fd >= 0)
                close(cap_fd);
        tcpopt_free(b);
        tcpopt_free(a);
        cg_leave();
        clock_gettime(CLOCK_MONOTONIC, &t1);
        printf("1..%d\n# %d of %d failed; %.2f s\n", tap_n, tap_failed, tap_n,
               (double) (t1.tv_sec - t0.tv_sec) + (double) (t1.tv_nsec - t0.tv_nsec) / 1e9);
        return tap_failed ? 1 : 0;
}
