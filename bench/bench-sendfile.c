/* SPDX-License-Identifier: LGPL-2.1-or-later */

/*
 * bench-sendfile: sendfile(2) of one file, again and again, over one connection: SMC-D
 * in one copy (smc_sendfile(): the file is read straight into the peer's DMB), SMC-D
 * the way smc_sendfile() worked before (a 64 KiB bounce buffer: pread, then
 * smc_send(): two copies), and TCP sendfile(2) over loopback, in the same run.
 *
 *   bench-sendfile [--modes LIST] [--sizes LIST] [--time SEC] [--repeat N]
 *                  [--bufsize BYTES] [--cork] [--json]
 *
 * Modes (LIST comma-separated; default smc,smc-bounce,tcp):
 *   smc         smc_sendfile(sock, file, &off, SIZE) with off = 0 each call
 *   smc-bounce  what smc_sendfile() did before: per call a 64 KiB buffer is
 *               malloc()ed, each piece pread() into it and smc_send() (blocking: all
 *               of it), then free(); the library's sendfile counters are not touched
 *   tcp         sendfile(2) on a loopback TCP socket
 * Sizes: the file sizes (default 4K,1M; K and M suffixes). For each size and mode,
 * --repeat runs (default 3, modes alternating) of --time seconds each (default 1): the
 * client (pinned to CPU 0) sends the whole file per call with a blocking socket; a
 * receiver thread (pinned to CPU 1) drains the connection with 1 MiB receives and
 * counts. The median run is reported: MB/s (10^6 bytes) and sendfile calls/s, with the
 * spread, and the median CPU time (user + system) the sending thread spent per call
 * (with busy polling on, SMC_BUSY_POLL_US, that includes spinning for the receiver).
 * Before the timed runs each connection sends the file 3 times and the receiver
 * compares every byte with the file ("verified"); after each run the byte count the
 * receiver saw must match what the client sent.
 * --cork: each call is nginx's pattern instead: TCP_CORK on, a 200-byte header by
 *   send(), the file by sendfile, TCP_CORK off (the header counts in the bytes).
 * --bufsize BYTES: SO_SNDBUF / SO_RCVBUF on both ends before connect / listen (SMC-D:
 *   the DMB size class); default 0 = the defaults (SMC-D: 64 KiB DMBs).
 *
 * The file lives in $TMPDIR (default /tmp) and is read once before the runs, so the
 * page cache serves every call. smcd must be running (SMCD_RUNTIME_DIR); an SMC
 * connection that fell back to TCP is an error, never a result.
 *
 * Output: a table, or with --json one object per line:
 *   {"bench":"sendfile","mode":M,"size":B,"cork":false,"bufsize":B,"runs":N,
 *    "mb_s":X,"calls_s":X,"min_mb_s":X,"max_mb_s":X,"cpu_us_per_call":X,
 *    "verified":true}
 * Exit status 1 if a run failed (an error line says which), 2 on bad usage.
 */

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bench-util.h"
#include "smcproto.h"

#define MAX_SIZES 8
#define MAX_MODES 3
#define RECV_BUF (1u << 20)
#define BOUNCE_CHUNK (64u << 10) /* the old smc_sendfile()'s SENDFILE_CHUNK */
#define HEADER_LEN 200u
#define VERIFY_ROUNDS 3

enum mode { MODE_SMC, MODE_SMC_BOUNCE, MODE_TCP };
static const char *const mode_names[] = { "smc", "smc-bounce", "tcp" };

struct cfg {
        enum mode modes[MAX_MODES];
        int nmodes;
        size_t sizes[MAX_SIZES];
        int nsizes;
        double seconds;
        int repeat;
        int bufsize;
        bool cork, json, pinned;
};

/* ---- the two socket APIs --------------------------------------------------------- */

static bool is_smc(enum mode m) {
        return m != MODE_TCP;
}

static int x_socket(enum mode m) {
        return is_smc(m) ? smc_socket(AF_INET, SOCK_STREAM, 0) : socket(AF_INET, SOCK_STREAM, 0);
}
static int x_setsockopt(enum mode m, int fd, int lv, int n, const void *v, socklen_t l) {
        return is_smc(m) ? smc_setsockopt(fd, lv, n, v, l) : setsockopt(fd, lv, n, v, l);
}
static ssize_t x_send(enum mode m, int fd, const void *b, size_t n) {
        return is_smc(m) ? smc_send(fd, b, n, MSG_NOSIGNAL) : send(fd, b, n, MSG_NOSIGNAL);
}
static ssize_t x_recv(enum mode m, int fd, void *b, size_t n) {
        return is_smc(m) ? smc_recv(fd, b, n, 0) : recv(fd, b, n, 0);
}
static int x_shutdown(enum mode m, int fd) {
        return is_smc(m) ? smc_shutdown(fd, SHUT_WR) : shutdown(fd, SHUT_WR);
}
static int x_close(enum mode m, int fd) {
        return is_smc(m) ? smc_close(fd) : close(fd);
}
static int x_bind(enum mode m, int fd, const struct sockaddr *a, socklen_t l) {
        return is_smc(m) ? smc_bind(fd, a, l) : bind(fd, a, l);
}
static int x_listen(enum mode m, int fd) {
        return is_smc(m) ? smc_listen(fd, 4) : listen(fd, 4);
}
static int x_getsockname(enum mode m, int fd, struct sockaddr *a, socklen_t *l) {
        return is_smc(m) ? smc_getsockname(fd, a, l) : getsockname(fd, a, l);
}
static int x_connect(enum mode m, int fd, const struct sockaddr *a, socklen_t l) {
        return is_smc(m) ? smc_connect(fd, a, l) : connect(fd, a, l);
}

static uint64_t now_ns(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
}

/* CPU time of the calling thread */
static uint64_t cpu_ns(void) {
        struct timespec ts;

        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        return (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
}

static int pin_cpu(int cpu) {
        cpu_set_t set;

        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        return sched_setaffinity(0, sizeof(set), &set) < 0 ? -errno : 0;
}

static void set_bufsize(enum mode m, int fd, int bytes) {
        if (bytes <= 0)
                return;
        (void) x_setsockopt(m, fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
        (void) x_setsockopt(m, fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
}

/* ---- one sendfile call of each mode -------------------------------------------------- */

/* The old smc_sendfile() (libsmcproto before the one-copy path), for @count bytes from
 * offset 0 of @in_fd, blocking: malloc, pread + smc_send per 64 KiB, free. */
static ssize_t bounce_sendfile(int out_fd, int in_fd, size_t count) {
        uint8_t *buf = malloc(BOUNCE_CHUNK);
        size_t done = 0;
        ssize_t r = 0;

        if (!buf)
                return -1;
        while (done < count) {
                size_t want = count - done < BOUNCE_CHUNK ? count - done : BOUNCE_CHUNK;
                ssize_t n = pread(in_fd, buf, want, (off_t) done), k;

                if (n <= 0) {
                        r = n;
                        break;
                }
                k = smc_send(out_fd, buf, (size_t) n, MSG_NOSIGNAL);
                if (k < 0) {
                        r = -1;
                        break;
                }
                done += (size_t) k;
                if (k < n)
                        break;
        }
        free(buf);
        return done > 0 ? (ssize_t) done : r;
}

/* Send the whole file once (and the header first with --cork). Returns the bytes put
 * on the connection, or -errno. */
static int64_t send_once(const struct cfg *c, enum mode m, int fd, int file, size_t size, const uint8_t *hdr) {
        int64_t total = 0;
        size_t done = 0;
        int one = 1, zero = 0;

        if (c->cork) {
                if (x_setsockopt(m, fd, IPPROTO_TCP, TCP_CORK, &one, sizeof(one)) < 0 ||
                    x_send(m, fd, hdr, HEADER_LEN) != HEADER_LEN)
                        return -errno;
                total += HEADER_LEN;
        }
        while (done < size) {
                ssize_t k;

                if (m == MODE_SMC) {
                        int64_t off = (int64_t) done;
                        k = smc_sendfile(fd, file, &off, size - done);
                } else if (m == MODE_SMC_BOUNCE)
                        k = bounce_sendfile(fd, file, size - done); /* blocking: all of it */
                else {
                        off_t off = (off_t) done;
                        k = sendfile(fd, file, &off, size - done);
                }
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        return k < 0 ? -errno : -EIO;
                done += (size_t) k;
        }
        total += (int64_t) size;
        if (c->cork && x_setsockopt(m, fd, IPPROTO_TCP, TCP_CORK, &zero, sizeof(zero)) < 0)
                return -errno;
        return total;
}

/* ---- the receiver thread ------------------------------------------------------------ */

struct receiver {
        enum mode mode;
        int listen_fd;
        bool pinned;
        /* verification: the first @verify_bytes must repeat (header +) the file */
        const uint8_t *file_data, *hdr;
        size_t file_size, hdr_len;
        uint64_t verify_bytes;
        /* result */
        uint64_t bytes;
        int error; /* errno, or EBADMSG for a byte that does not match */
};

static void *receiver_run(void *p) {
        struct receiver *r = p;
        uint8_t *buf = malloc(RECV_BUF);
        size_t period = r->hdr_len + r->file_size;
        int fd;

        if (r->pinned)
                (void) pin_cpu(1);
        fd = is_smc(r->mode) ? smc_accept(r->listen_fd, NULL, NULL) : accept(r->listen_fd, NULL, NULL);
        if (fd < 0 || !buf) {
                r->error = fd < 0 ? errno : ENOMEM;
                free(buf);
                return NULL;
        }
        for (;;) {
                ssize_t n = x_recv(r->mode, fd, buf, RECV_BUF);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        r->error = errno;
                        break;
                }
                if (n == 0)
                        break;
                for (size_t i = 0; r->bytes + i < r->verify_bytes && i < (size_t) n; i++) {
                        uint64_t at = (r->bytes + i) % period;
                        uint8_t want = at < r->hdr_len ? r->hdr[at] : r->file_data[at - r->hdr_len];

                        if (buf[i] != want) {
                                r->error = EBADMSG;
                                break;
                        }
                }
                r->bytes += (uint64_t) n;
        }
        x_close(r->mode, fd);
        free(buf);
        return NULL;
}

/* ---- one run -------------------------------------------------------------------------- */

struct run {
        double mb_s, calls_s;
        double cpu_us; /* the sending thread's CPU time (user + system) per call */
};

static void report_error(const struct cfg *c, enum mode m, size_t size, const char *what, int e) {
        if (c->json)
                printf("{\"bench\":\"sendfile\",\"mode\":\"%s\",\"size\":%zu,\"error\":\"%s: %s\"}\n",
                       mode_names[m], size, what, strerror(e));
        else
                fprintf(stderr, "bench-sendfile: %s, %zu bytes: %s: %s\n", mode_names[m], size, what, strerror(e));
}

/* Connect, verify VERIFY_ROUNDS sends of the file, then send it for @seconds. */
static int run_once(const struct cfg *c, enum mode m, int file, const uint8_t *data, size_t size, struct run *ret) {
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t sl = sizeof(sa);
        uint8_t hdr[HEADER_LEN];
        struct receiver r = {
                .mode = m, .pinned = c->pinned, .file_data = data, .file_size = size, .hdr = hdr,
                .hdr_len = c->cork ? HEADER_LEN : 0,
        };
        pthread_t t;
        int lfd, fd = -1, one = 1, mode = -1, e = 0;
        socklen_t ml = sizeof(mode);
        uint64_t sent = 0, calls = 0, t0 = 0, t1 = 0, end, c0 = 0, c1 = 0;
        const char *what = "";

        for (size_t i = 0; i < sizeof(hdr); i++)
                hdr[i] = (uint8_t) ('A' + i % 26);
        r.verify_bytes = (uint64_t) VERIFY_ROUNDS * (r.hdr_len + size);
        lfd = x_socket(m);
        if (lfd < 0)
                return report_error(c, m, size, "socket", errno), -1;
        (void) x_setsockopt(m, lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        set_bufsize(m, lfd, c->bufsize);
        if (x_bind(m, lfd, (struct sockaddr *) &sa, sizeof(sa)) < 0 || x_listen(m, lfd) < 0 ||
            x_getsockname(m, lfd, (struct sockaddr *) &sa, &sl) < 0) {
                e = errno;
                x_close(m, lfd);
                return report_error(c, m, size, "listen", e), -1;
        }
        r.listen_fd = lfd;
        if (pthread_create(&t, NULL, receiver_run, &r) != 0) {
                x_close(m, lfd);
                return report_error(c, m, size, "pthread_create", EAGAIN), -1;
        }
        fd = x_socket(m);
        if (fd < 0) {
                e = errno, what = "socket";
                goto out;
        }
        set_bufsize(m, fd, c->bufsize);
        if (x_connect(m, fd, (struct sockaddr *) &sa, sizeof(sa)) < 0) {
                e = errno, what = "connect";
                x_close(m, fd);
                fd = -1;
                goto out;
        }
        if (is_smc(m) && (smc_getsockopt(fd, SOL_SMC, SMC_PROTO_MODE, &mode, &ml) < 0 || mode != SMC_PROTO_MODE_SMCD)) {
                e = EPROTONOSUPPORT, what = "not an SMC-D connection (fallback to TCP; is smcd running?)";
                goto out;
        }
        (void) x_setsockopt(m, fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        for (int i = 0; i < VERIFY_ROUNDS; i++) {
                int64_t k = send_once(c, m, fd, file, size, hdr);
                if (k < 0) {
                        e = (int) -k, what = "sendfile (verification)";
                        goto out;
                }
                sent += (uint64_t) k;
        }
        c0 = cpu_ns();
        t0 = now_ns();
        end = t0 + (uint64_t) (c->seconds * 1e9);
        do {
                /* the clock every 16 calls: a 4 KiB call is ~1 us */
                for (int i = 0; i < 16; i++) {
                        int64_t k = send_once(c, m, fd, file, size, hdr);
                        if (k < 0) {
                                e = (int) -k, what = "sendfile";
                                goto out;
                        }
                        sent += (uint64_t) k;
                        calls++;
                }
                t1 = now_ns();
        } while (t1 < end);
        c1 = cpu_ns();
out:
        if (e && fd < 0) {
                /* the receiver waits in accept for a connection that never came */
                report_error(c, m, size, what, e);
                exit(1);
        }
        (void) x_shutdown(m, fd);
        pthread_join(t, NULL);
        if (fd >= 0)
                x_close(m, fd);
        x_close(m, lfd);
        if (e)
                return report_error(c, m, size, what, e), -1;
        if (r.error)
                return report_error(c, m, size,
                                    r.error == EBADMSG ? "receiver: data differs from the file" : "receiver", r.error),
                       -1;
        if (r.bytes != sent)
                return report_error(c, m, size, "receiver byte count differs", EIO), -1;
        ret->mb_s = (double) (sent - (uint64_t) VERIFY_ROUNDS * (r.hdr_len + size)) / ((double) (t1 - t0) / 1e9) / 1e6;
        ret->calls_s = (double) calls / ((double) (t1 - t0) / 1e9);
        ret->cpu_us = (double) (c1 - c0) / 1e3 / (double) calls;
        return 0;
}

/* ---- main ------------------------------------------------------------------------------ */

static int parse_size(const char *s, size_t *ret) {
        char *e;
        unsigned long long v;

        errno = 0;
        v = strtoull(s, &e, 10);
        if (errno || e == s)
                return -EINVAL;
        if (*e == 'K' || *e == 'k')
                v <<= 10, e++;
        else if (*e == 'M' || *e == 'm')
                v <<= 20, e++;
        if (*e || v == 0 || v > (1ull << 30))
                return -EINVAL;
        *ret = (size_t) v;
        return 0;
}

static int parse_list(struct cfg *c, const char *arg, bool modes) {
        char *dup = strdup(arg), *save = NULL, *tok;
        int r = 0;

        if (!dup)
                return -ENOMEM;
        if (modes)
                c->nmodes = 0;
        else
                c->nsizes = 0;
        for (tok = strtok_r(dup, ",", &save); tok && r == 0; tok = strtok_r(NULL, ",", &save)) {
                if (modes) {
                        int i;

                        for (i = 0; i < MAX_MODES && strcmp(tok, mode_names[i]) != 0; i++)
                                ;
                        if (i == MAX_MODES || c->nmodes == MAX_MODES)
                                r = -EINVAL;
                        else
                                c->modes[c->nmodes++] = (enum mode) i;
                } else if (c->nsizes == MAX_SIZES || parse_size(tok, &c->sizes[c->nsizes++]) < 0)
                        r = -EINVAL;
        }
        free(dup);
        if (r == 0 && (modes ? c->nmodes : c->nsizes) == 0)
                r = -EINVAL;
        return r;
}

static void usage(FILE *f) {
        fprintf(f, "usage: bench-sendfile [--modes smc,smc-bounce,tcp] [--sizes 4K,1M] [--time SEC] [--repeat N]\n"
                   "                      [--bufsize BYTES] [--cork] [--json]\n");
}

/* A file of @size bytes of a pattern in $TMPDIR, unlinked, read once (page cache). */
static int make_file(size_t size, uint8_t **ret_data) {
        const char *dir = getenv("TMPDIR");
        char path[4096];
        uint8_t *d = malloc(size);
        int fd;

        if (!d)
                return -ENOMEM;
        snprintf(path, sizeof(path), "%s/bench-sendfile-XXXXXX", dir && *dir ? dir : "/tmp");
        fd = mkstemp(path);
        if (fd < 0) {
                free(d);
                return -errno;
        }
        (void) unlink(path);
        for (size_t i = 0; i < size; i++)
                d[i] = (uint8_t) ((i * 2654435761u) >> 13);
        if (pwrite(fd, d, size, 0) != (ssize_t) size || pread(fd, d, size, 0) != (ssize_t) size) {
                int e = errno ? -errno : -EIO;
                close(fd);
                free(d);
                return e;
        }
        *ret_data = d;
        return fd;
}

int main(int argc, char **argv) {
        static const struct option opts[] = {
                { "modes", required_argument, NULL, 'm' }, { "sizes", required_argument, NULL, 's' },
                { "time", required_argument, NULL, 't' },  { "repeat", required_argument, NULL, 'r' },
                { "bufsize", required_argument, NULL, 'b' }, { "cork", no_argument, NULL, 'c' },
                { "json", no_argument, NULL, 'j' },        { "help", no_argument, NULL, 'h' },
                {},
        };
        struct cfg c = {
                .modes = { MODE_SMC, MODE_SMC_BOUNCE, MODE_TCP }, .nmodes = 3,
                .sizes = { 4u << 10, 1u << 20 }, .nsizes = 2,
                .seconds = 1.0, .repeat = 3,
        };
        cpu_set_t set;
        int o, failed = 0;

        while ((o = getopt_long(argc, argv, "", opts, NULL)) >= 0) {
                char *e;
                size_t v;

                switch (o) {
                case 'm':
                case 's':
                        if (parse_list(&c, optarg, o == 'm') < 0) {
                                fprintf(stderr, "bench-sendfile: bad --%s: %s\n", o == 'm' ? "modes" : "sizes", optarg);
                                return 2;
                        }
                        break;
                case 't':
                        c.seconds = strtod(optarg, &e);
                        if (*e || !(c.seconds > 0 && c.seconds <= 3600)) {
                                fprintf(stderr, "bench-sendfile: bad --time: %s\n", optarg);
                                return 2;
                        }
                        break;
                case 'r':
                        c.repeat = (int) strtol(optarg, &e, 10);
                        if (*e || c.repeat < 1 || c.repeat > 100) {
                                fprintf(stderr, "bench-sendfile: bad --repeat: %s\n", optarg);
                                return 2;
                        }
                        break;
                case 'b':
                        if (strcmp(optarg, "0") == 0)
                                c.bufsize = 0;
                        else if (parse_size(optarg, &v) < 0 || v > (64u << 20)) {
                                fprintf(stderr, "bench-sendfile: bad --bufsize: %s\n", optarg);
                                return 2;
                        } else
                                c.bufsize = (int) v;
                        break;
                case 'c':
                        c.cork = true;
                        break;
                case 'j':
                        c.json = true;
                        break;
                default: /* 'h' (--help): exit 0; '?' (a bad option): 2 */
                        return bench_usage_exit(usage, o == 'h' ? 0 : 2);
                }
        }
        if (optind < argc)
                return bench_usage_exit(usage, 2);
        c.pinned = sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) >= 2 && CPU_ISSET(0, &set) &&
                   CPU_ISSET(1, &set);
        if (c.pinned)
                (void) pin_cpu(0);
        if (!c.json)
                printf("%-10s %9s %5s %12s %12s %22s %10s\n", "mode", "file", "cork", "MB/s", "calls/s",
                       "MB/s min..max", "cpu us/call");

        for (int si = 0; si < c.nsizes; si++) {
                struct run runs[MAX_MODES][100];
                int nruns[MAX_MODES] = {};
                uint8_t *data = NULL;
                int file = make_file(c.sizes[si], &data);

                if (file < 0) {
                        fprintf(stderr, "bench-sendfile: test file of %zu bytes: %s\n", c.sizes[si], strerror(-file));
                        return 1;
                }
                /* modes alternate, so that a disturbance hits all of them alike */
                for (int rep = 0; rep < c.repeat; rep++)
                        for (int mi = 0; mi < c.nmodes; mi++) {
                                if (nruns[mi] < 0)
                                        continue; /* it failed once: not again */
                                if (run_once(&c, c.modes[mi], file, data, c.sizes[si], &runs[mi][nruns[mi]]) < 0) {
                                        nruns[mi] = -1;
                                        failed = 1;
                                } else
                                        nruns[mi]++;
                        }
                for (int mi = 0; mi < c.nmodes; mi++) {
                        int n = nruns[mi];
                        struct run *rs = runs[mi], med;
                        double cpu[100];

                        if (n <= 0)
                                continue;
                        for (int i = 0; i < n; i++)
                                cpu[i] = rs[i].cpu_us;
                        bench_sort_by_double(cpu, (size_t) n, sizeof(*cpu), 0);
                        bench_sort_by_double(rs, (size_t) n, sizeof(*rs), offsetof(struct run, mb_s));
                        med = rs[n / 2];
                        if (c.json)
                                printf("{\"bench\":\"sendfile\",\"mode\":\"%s\",\"size\":%zu,\"cork\":%s,\"bufsize\":%d,"
                                       "\"runs\":%d,\"mb_s\":%.1f,\"calls_s\":%.0f,\"min_mb_s\":%.1f,\"max_mb_s\":%.1f,"
                                       "\"cpu_us_per_call\":%.3f,\"verified\":true}\n",
                                       mode_names[c.modes[mi]], c.sizes[si], c.cork ? "true" : "false", c.bufsize, n,
                                       med.mb_s, med.calls_s, rs[0].mb_s, rs[n - 1].mb_s, cpu[n / 2]);
                        else
                                printf("%-10s %9zu %5s %12.1f %12.0f %10.1f..%-10.1f %10.2f\n", mode_names[c.modes[mi]],
                                       c.sizes[si], c.cork ? "yes" : "no", med.mb_s, med.calls_s, rs[0].mb_s,
                                       rs[n - 1].mb_s, cpu[n / 2]);
                }
                fflush(stdout);
                close(file);
                free(data);
        }
        return failed;
}
