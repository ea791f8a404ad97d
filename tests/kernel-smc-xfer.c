/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * kernel-smc-xfer: the peer of tests/smcr-xfer.c on the Linux kernel's own SMC
 * (socket(AF_SMC, SOCK_STREAM, SMCPROTO_SMC), plain libc calls, no smcd), for the interop
 * test tests/test-kernel-smcr-vm.sh. Same framing: the client sends a 16-byte header
 * {size, seed} (little endian) and @size bytes of the xorshift stream of seed; the server
 * checks them and answers with @size bytes of the stream of seed ^ 0x5a5a. (C, not
 * python: 16 MiB of xorshift takes python ~10 s natively, minutes under TCG.)
 * One line per connection:
 *   "ok <role> size=N mode=SMCR|SMCD|TCP|?"  or  "FAIL <role> ... error=..."
 * mode is the kernel's own view of the socket, from smc_diag (NETLINK_SOCK_DIAG, the
 * AF_SMC dump, matched by inode), read before the close; a TCP fallback adds
 * "reason=0x... peer=0x..." (SMC_DIAG_FALLBACK: the kernel's SMC_CLC_DECL_* and the
 * peer's decline diagnosis); a client's line has "connect_ms=N" too (how long its
 * connect() took, handshake included).
 *
 *   kernel-smc-xfer server ADDR PORT COUNT            accept COUNT connections (threads)
 *   kernel-smc-xfer client ADDR PORT SIZE[,SIZE...] [PARALLEL]
 * Env: KSMC_XFER_MODE=SMCR: a connection not in that mode counts as failed;
 * KSMC_XFER_SHUTDOWN=1: the client half-closes (SHUT_WR) after sending (the kernel starts
 * the close); KSMC_XFER_WAIT_EOF=1: the server waits for the peer's EOF before it closes
 * (the peer starts the close); KSMC_XFER_TOGETHER=1: a batch's connections all connect
 * before any transfers; KSMC_XFER_FAMILY=inet: plain AF_INET sockets instead (mode
 * "inet": the program as an ordinary TCP one, e.g. under smcrun). Exit status 0 when
 * every connection was ok.
 */

#include <arpa/inet.h>
#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/smc_diag.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef AF_SMC
#define AF_SMC 43
#endif
#define SMCPROTO_SMC 0

static const char *want_mode;
static int family = AF_SMC, proto = SMCPROTO_SMC;
static atomic_int failures;
static bool together;
static pthread_barrier_t batch_barrier;

#define XFER_SEND send
#define XFER_RECV recv
#include "xfer-stream.h"

/* the kernel's mode of the AF_SMC socket @fd (smc_diag dump, matched by inode); for a
 * fallback its reason and the peer's diagnosis into @why (@len bytes), else "" */
static const char *diag_mode(int fd, char *why, size_t len) {
        struct {
                struct nlmsghdr nh;
                struct smc_diag_req r;
        } req = {
                .nh = { .nlmsg_len = sizeof(req), .nlmsg_type = SOCK_DIAG_BY_FAMILY,
                        .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP, .nlmsg_seq = 1 },
                .r = { .diag_family = AF_SMC, .diag_ext = 1 << (SMC_DIAG_FALLBACK - 1) },
        };
        static char buf[65536];
        static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
        const char *mode = "?";
        struct stat st;
        int nl;

        why[0] = 0;
        if (family != AF_SMC)
                return "inet";
        if (fstat(fd, &st) < 0)
                return mode;
        nl = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
        if (nl < 0)
                return mode;
        pthread_mutex_lock(&lock);
        if (send(nl, &req, sizeof(req), 0) < 0)
                goto out;
        for (;;) {
                ssize_t k = recv(nl, buf, sizeof(buf), 0);
                int n = (int) k;

                if (k <= 0)
                        goto out;
                for (struct nlmsghdr *h = (struct nlmsghdr *) buf; NLMSG_OK(h, n); h = NLMSG_NEXT(h, n)) {
                        struct smc_diag_msg *m = NLMSG_DATA(h);

                        if (h->nlmsg_type == NLMSG_DONE || h->nlmsg_type == NLMSG_ERROR)
                                goto out;
                        if (h->nlmsg_len < NLMSG_LENGTH(sizeof(*m)) || m->diag_inode != st.st_ino)
                                continue;
                        mode = m->diag_mode == SMC_DIAG_MODE_SMCR         ? "SMCR"
                               : m->diag_mode == SMC_DIAG_MODE_SMCD       ? "SMCD"
                               : m->diag_mode == SMC_DIAG_MODE_FALLBACK_TCP ? "TCP"
                                                                           : "?";
                        if (m->diag_mode != SMC_DIAG_MODE_FALLBACK_TCP)
                                continue;
                        {
                                int alen = (int) (h->nlmsg_len - NLMSG_LENGTH(sizeof(*m)));
                                for (struct rtattr *a = (struct rtattr *) (m + 1); RTA_OK(a, alen); a = RTA_NEXT(a, alen))
                                        if (a->rta_type == SMC_DIAG_FALLBACK &&
                                            RTA_PAYLOAD(a) >= sizeof(struct smc_diag_fallback)) {
                                                struct smc_diag_fallback f;
                                                memcpy(&f, RTA_DATA(a), sizeof(f));
                                                snprintf(why, len, " reason=0x%08x peer=0x%08x", f.reason,
                                                         f.peer_diagnosis);
                                        }
                        }
                }
        }
out:
        pthread_mutex_unlock(&lock);
        close(nl);
        return mode;
}

static void report(const char *role, uint64_t size, const char *mode, const char *why, int err, uint64_t bad_at) {
        bool ok = err == 0 && (!want_mode || !strcmp(want_mode, mode));
        char line[256], extra[64] = "";

        if (!ok)
                atomic_fetch_add(&failures, 1);
        if (err == -EBADMSG)
                snprintf(extra, sizeof(extra), " first-bad-byte=%llu", (unsigned long long) bad_at);
        snprintf(line, sizeof(line), "%s %s size=%llu mode=%s%s%s%s%s\n", ok ? "ok" : "FAIL", role,
                 (unsigned long long) size, mode, why, err ? " error=" : "", err ? strerror(-err) : "", extra);
        fputs(line, stdout);
        fflush(stdout);
}

static void *serve(void *arg) {
        int fd = (int) (intptr_t) arg, r;
        uint8_t hdr[16];
        uint64_t size = 0, seed = 0, bad = 0;
        const char *mode;
        char why[64];

        r = recv_all(fd, hdr, sizeof(hdr));
        if (r == 0) {
                memcpy(&size, hdr, 8);
                memcpy(&seed, hdr + 8, 8);
                r = stream(fd, size, seed, false, &bad);
        }
        if (r == 0)
                r = stream(fd, size, seed ^ 0x5a5a, true, &bad);
        mode = diag_mode(fd, why, sizeof(why));
        if (r == 0 && getenv("KSMC_XFER_WAIT_EOF")) {
                char c;
                ssize_t k = recv(fd, &c, 1, 0);
                if (k != 0)
                        r = k < 0 ? -errno : -EPROTO;
        }
        report("server", size, mode, why, r, bad);
        close(fd);
        return NULL;
}

static int make_addr(const char *a, const char *p, struct sockaddr_in *sin) {
        memset(sin, 0, sizeof(*sin));
        sin->sin_family = AF_INET;
        sin->sin_port = htons((uint16_t) atoi(p));
        return inet_pton(AF_INET, a, &sin->sin_addr) == 1 ? 0 : -EINVAL;
}

struct job {
        struct sockaddr_in sin;
        uint64_t size, seed;
};

static void *client(void *arg) {
        struct job *j = arg;
        uint8_t hdr[16];
        uint64_t bad = 0;
        const char *mode = "?";
        char why[64] = "", connect_ms[32] = "";
        int fd, r;

        fd = socket(family, SOCK_STREAM, proto);
        if (fd < 0) {
                r = -errno;
                if (together)
                        pthread_barrier_wait(&batch_barrier);
                report("client", j->size, mode, why, r, 0);
                return NULL;
        }
        {
                struct timespec a, b;

                clock_gettime(CLOCK_MONOTONIC, &a);
                r = connect(fd, (struct sockaddr *) &j->sin, sizeof(j->sin)) < 0 ? -errno : 0;
                clock_gettime(CLOCK_MONOTONIC, &b);
                snprintf(connect_ms, sizeof(connect_ms), " connect_ms=%lld",
                         (long long) ((b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000));
        }
        if (together)
                pthread_barrier_wait(&batch_barrier);
        if (r == 0) {
                memcpy(hdr, &j->size, 8);
                memcpy(hdr + 8, &j->seed, 8);
                r = send_all(fd, hdr, sizeof(hdr));
        }
        if (r == 0)
                r = stream(fd, j->size, j->seed, true, &bad);
        if (r == 0 && getenv("KSMC_XFER_SHUTDOWN") && shutdown(fd, SHUT_WR) < 0)
                r = -errno;
        if (r == 0)
                r = stream(fd, j->size, j->seed ^ 0x5a5a, false, &bad);
        mode = diag_mode(fd, why, sizeof(why));
        strncat(why, connect_ms, sizeof(why) - strlen(why) - 1);
        report("client", j->size, mode, why, r, bad);
        close(fd);
        return NULL;
}

int main(int argc, char **argv) {
        struct sockaddr_in sin;

        want_mode = getenv("KSMC_XFER_MODE");
        together = getenv("KSMC_XFER_TOGETHER") != NULL;
        if (getenv("KSMC_XFER_FAMILY") && !strcmp(getenv("KSMC_XFER_FAMILY"), "inet")) {
                family = AF_INET;
                proto = 0;
        }
        if (argc < 5 || make_addr(argv[2], argv[3], &sin) < 0) {
                fprintf(stderr, "usage: kernel-smc-xfer server|client ADDR PORT COUNT|SIZES [PARALLEL]\n");
                return 2;
        }
        if (!strcmp(argv[1], "server")) {
                int l = socket(family, SOCK_STREAM, proto), one = 1, n = atoi(argv[4]);
                pthread_t *t = calloc((size_t) n, sizeof(*t));

                if (l < 0 || !t || setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
                    bind(l, (struct sockaddr *) &sin, sizeof(sin)) < 0 || listen(l, 512) < 0) {
                        perror("kernel-smc-xfer: listen");
                        return 1;
                }
                printf("listening\n");
                fflush(stdout);
                for (int i = 0; i < n; i++) {
                        int fd = accept(l, NULL, NULL);
                        if (fd < 0) {
                                perror("kernel-smc-xfer: accept");
                                atomic_fetch_add(&failures, 1);
                                break;
                        }
                        pthread_create(&t[i], NULL, serve, (void *) (intptr_t) fd);
                }
                for (int i = 0; i < n; i++)
                        if (t[i])
                                pthread_join(t[i], NULL);
                close(l);
                free(t);
        } else if (!strcmp(argv[1], "client")) {
                int par = argc > 5 ? atoi(argv[5]) : 1, n = 0;
                static struct job jobs[1024];
                static pthread_t t[1024];
                char *list = strdup(argv[4]), *save = NULL;

                for (char *s = strtok_r(list, ",", &save); s && n < 1024; s = strtok_r(NULL, ",", &save)) {
                        char *mul = strchr(s, 'x'); /* "20x4096": 20 connections of 4096 bytes */
                        int times = 1;
                        if (mul) {
                                times = atoi(s);
                                s = mul + 1;
                        }
                        for (int k = 0; k < times && n < 1024; k++, n++)
                                jobs[n] = (struct job) { .sin = sin, .size = strtoull(s, NULL, 0),
                                                         .seed = 0x9e3779b97f4a7c15ULL * (uint64_t) (n + 1) };
                }
                free(list);
                if (par < 1)
                        par = 1;
                for (int i = 0; i < n; i += par) {
                        int m = n - i < par ? n - i : par;
                        if (together)
                                pthread_barrier_init(&batch_barrier, NULL, (unsigned) m);
                        for (int k = 0; k < m; k++)
                                pthread_create(&t[k], NULL, client, &jobs[i + k]);
                        for (int k = 0; k < m; k++)
                                pthread_join(t[k], NULL);
                        if (together)
                                pthread_barrier_destroy(&batch_barrier);
                }
        } else
                return 2;
        return atomic_load(&failures) ? 1 : 0;
}
