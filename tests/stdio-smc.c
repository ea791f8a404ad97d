/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * C stdio on SMC connections, run under smcrun by test-smcrun-apps.sh (and passing over
 * plain TCP too): glibc's streams read and write through internal calls the preload
 * cannot see, so libsmcrun gives them SMC streams (libsmcproto/preload.c, "C stdio").
 * Cases: fdopen() "r" and "w" (getline, fprintf, fread/fwrite of 2 MiB, fileno, fclose
 * ends the connection), dprintf, dup2() onto stdout with bytes still buffered (they go
 * to the connection at the next flush, as over TCP), dup2() onto stdin after a read
 * ahead from the old stdin (the read-ahead bytes come first, as over TCP), stderr,
 * fwrite() on a nonblocking socket (short counts with EAGAIN, as over TCP; before,
 * a crash).
 * stdin must be a pipe holding "first\nsecond\n". Prints one line per case to stderr's
 * original descriptor (kept as fd 9); exit status 0 when all pass.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <stdbool.h>
#include <unistd.h>

static int report_fd = 9, failures;

static void report(int ok, const char *fmt, ...) {
        char buf[512];
        va_list ap;
        int n = snprintf(buf, sizeof(buf), "%s - ", ok ? "ok" : "not ok");

        va_start(ap, fmt);
        n += vsnprintf(buf + n, sizeof(buf) - (size_t) n, fmt, ap);
        va_end(ap);
        if (n > (int) sizeof(buf) - 2)
                n = (int) sizeof(buf) - 2;
        buf[n++] = '\n';
        if (write(report_fd, buf, (size_t) n) < 0)
                exit(2);
        if (!ok)
                failures++;
}

static int lfd;

static void pair(int *client, int *server) {
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t al = sizeof(a);

        if (getsockname(lfd, (struct sockaddr *) &a, &al) < 0)
                exit(2);
        *client = socket(AF_INET, SOCK_STREAM, 0);
        if (*client < 0 || connect(*client, (struct sockaddr *) &a, sizeof(a)) < 0)
                exit(2);
        *server = accept(lfd, NULL, NULL);
        if (*server < 0)
                exit(2);
}

/* everything up to end of file from @fd (malloc'ed), its length in *len */
static char *slurp(int fd, size_t *len) {
        size_t cap = 1 << 16, n = 0;
        char *b = malloc(cap);

        for (;;) {
                ssize_t r;

                if (n == cap)
                        b = realloc(b, cap *= 2);
                r = read(fd, b + n, cap - n);
                if (r < 0 && errno == EINTR)
                        continue;
                if (r <= 0)
                        break;
                n += (size_t) r;
        }
        *len = n;
        return b;
}

static int write_all(int fd, const void *p, size_t n) {
        const char *c = p;

        while (n > 0) {
                ssize_t r = write(fd, c, n);

                if (r <= 0)
                        return -1;
                c += r;
                n -= (size_t) r;
        }
        return 0;
}

struct feed {
        int fd;
        const char *data;
        size_t len;
        bool shut;
};

static void *feeder(void *arg) {
        struct feed *f = arg;

        write_all(f->fd, f->data, f->len);
        if (f->shut)
                shutdown(f->fd, SHUT_WR);
        return NULL;
}

#define BIG (2u << 20)

static void case_fdopen(void) {
        int c, s;
        FILE *in, *out;
        char *line = NULL, *big = malloc(BIG), *back;
        size_t cap = 0, n, got = 0;
        struct feed f;
        pthread_t t;
        int lines = 0, ok;

        for (size_t i = 0; i < BIG; i++)
                big[i] = (char) (i * 131 + (i >> 9));
        pair(&c, &s);
        in = fdopen(s, "r");
        out = fdopen(dup(s), "w");
        report(in && out && fileno(in) == s && fileno(out) > s, "fdopen: streams on the connection, fileno %d/%d",
               in ? fileno(in) : -1, out ? fileno(out) : -1);
        if (!in || !out)
                exit(1);
        /* lines in, lines out */
        f = (struct feed) { c, "one\ntwo\nthree\n", 14, false };
        pthread_create(&t, NULL, feeder, &f);
        while (lines < 3 && getline(&line, &cap, in) > 0) {
                fprintf(out, "%d:%s", ++lines, line);
        }
        fflush(out);
        pthread_join(t, NULL);
        {
                char want[] = "1:one\n2:two\n3:three\n", buf[sizeof(want)];
                size_t k = 0;

                while (k < sizeof(want) - 1) {
                        ssize_t r = read(c, buf + k, sizeof(want) - 1 - k);
                        if (r <= 0)
                                break;
                        k += (size_t) r;
                }
                report(k == sizeof(want) - 1 && memcmp(buf, want, k) == 0, "fdopen: getline + fprintf, %zu bytes back", k);
        }
        /* 2 MiB each way through fread/fwrite */
        f = (struct feed) { c, big, BIG, false };
        pthread_create(&t, NULL, feeder, &f);
        back = malloc(BIG);
        while (got < BIG && (n = fread(back + got, 1, BIG - got, in)) > 0)
                got += n;
        pthread_join(t, NULL);
        ok = got == BIG && memcmp(back, big, BIG) == 0;
        report(ok, "fdopen: fread 2 MiB (%zu)", got);
        /* fwrite 2 MiB; a child reads it all, and sees end of file when both streams
         * are closed (fclose closes the descriptors) */
        {
                pid_t pid = fork();

                if (pid == 0) {
                        size_t len;
                        char *r;

                        fclose(in);
                        fclose(out);
                        r = slurp(c, &len);
                        _exit(len == BIG && memcmp(r, big, BIG) == 0 ? 0 : 1);
                }
                close(c);
                ok = fwrite(big, 1, BIG, out) == BIG;
                ok &= fclose(out) == 0;
                ok &= fclose(in) == 0;
                int st;
                waitpid(pid, &st, 0);
                report(ok && WIFEXITED(st) && WEXITSTATUS(st) == 0,
                       "fdopen: fwrite 2 MiB, fclose of both streams is end of file (status %#x)", st);
        }
        free(line);
        free(back);
        free(big);
}

static void case_dprintf(void) {
        int c, s;
        char buf[64];
        ssize_t k = 0, r;

        pair(&c, &s);
        dprintf(s, "dprintf %d %s\n", 42, "works");
        close(s);
        while ((r = read(c, buf + k, sizeof(buf) - 1 - (size_t) k)) > 0)
                k += r;
        buf[k] = 0;
        report(strcmp(buf, "dprintf 42 works\n") == 0, "dprintf: \"%.*s\"", (int) (k ? k - 1 : 0), buf);
        close(c);
}

/* stdout onto the connection with "pending" still buffered from before */
static void case_stdout(void) {
        int c, s, saved = dup(1);
        size_t len;
        char *got;
        const char *want = "pending|printf 7|puts\n";

        pair(&c, &s);
        setvbuf(stdout, NULL, _IOFBF, 4096);
        fputs("pending|", stdout); /* buffered, not flushed */
        dup2(s, 1);
        close(s);
        printf("printf %d|", 7);
        puts("puts");
        fflush(stdout);
        dup2(saved, 1); /* fd 1 back to the original; stdout still works */
        close(saved);
        got = slurp(c, &len);
        report(len == strlen(want) && memcmp(got, want, len) == 0,
               "stdout: dup2 onto 1, buffered bytes and printf go to the connection (%zu bytes)", len);
        free(got);
        close(c);
}

/* stdin: "first\n" read from the pipe (the stream read ahead "second\n" too), then the
 * connection on 0: "second\n" comes first, then the connection's lines */
static void case_stdin(void) {
        int c, s;
        char line[64] = "", l2[64] = "", l3[64] = "";
        int n;

        if (!fgets(line, sizeof(line), stdin) || strcmp(line, "first\n") != 0) {
                report(0, "stdin: the test needs \"first\\nsecond\\n\" on a pipe (got \"%s\")", line);
                return;
        }
        pair(&c, &s);
        dup2(s, 0);
        close(s);
        write_all(c, "third 33\n", 9);
        shutdown(c, SHUT_WR);
        fgets(l2, sizeof(l2), stdin);
        n = -1;
        if (scanf("%63s %d", l3, &n) != 2)
                n = -2;
        report(strcmp(l2, "second\n") == 0 && strcmp(l3, "third") == 0 && n == 33 && getchar() == '\n' &&
                       getchar() == EOF && feof(stdin),
               "stdin: read-ahead bytes first (\"%.6s\"), then scanf from the connection (%s %d), then EOF", l2, l3, n);
        close(c);
}

/* stderr is unbuffered and stays so */
static void case_stderr(void) {
        int c, s, saved = dup(2);
        char buf[64];
        ssize_t k;

        pair(&c, &s);
        dup2(s, 2);
        close(s);
        fprintf(stderr, "unbuffered");
        k = read(c, buf, sizeof(buf)); /* arrives without a flush */
        dup2(saved, 2);
        close(saved);
        report(k == 10 && memcmp(buf, "unbuffered", 10) == 0, "stderr: unbuffered on the connection (%zd)", k);
        close(c);
}

struct drain {
        int fd;
        size_t len;
};

static void *drain(void *arg) {
        struct drain *d = arg;

        free(slurp(d->fd, &d->len));
        return NULL;
}

/* fwrite() of 1 MiB pieces to a nonblocking socket while the peer reads slowly: each
 * short count comes with the stream's error set and errno EAGAIN, never more than
 * asked (glibc's cookie streams took a -1 from the write callback as a count) */
static void case_nonblock_fwrite(void) {
        int c, s;
        struct drain d = { 0 };
        size_t big = 1u << 20, total = 0, shorts = 0, bad = 0;
        char *buf = calloc(1, big);
        pthread_t t;
        FILE *f;

        pair(&c, &s);
        fcntl(s, F_SETFL, fcntl(s, F_GETFL) | O_NONBLOCK);
        f = fdopen(s, "w");
        d.fd = c;
        pthread_create(&t, NULL, drain, &d);
        for (int i = 0; i < 16; i++) {
                size_t n;

                errno = 0;
                n = fwrite(buf, 1, big, f);
                if (n > big)
                        bad++;
                total += n > big ? 0 : n;
                if (n < big) {
                        shorts++;
                        if (!ferror(f) || errno != EAGAIN)
                                bad++;
                        clearerr(f);
                        poll(&(struct pollfd) { .fd = s, .events = POLLOUT }, 1, 1000);
                }
        }
        while (fflush(f) != 0 && errno == EAGAIN) {
                clearerr(f);
                poll(&(struct pollfd) { .fd = s, .events = POLLOUT }, 1, 1000);
        }
        fclose(f);
        pthread_join(t, NULL);
        report(bad == 0 && total <= 16 * big, "nonblocking fwrite: %zu of %zu bytes taken, %zu short counts (EAGAIN), %zu wrong",
               total, 16 * big, shorts, bad);
        free(buf);
        close(c);
}

int main(void) {
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };

        if (dup2(2, report_fd) < 0)
                return 2;
        lfd = socket(AF_INET, SOCK_STREAM, 0);
        if (lfd < 0 || bind(lfd, (struct sockaddr *) &a, sizeof(a)) < 0 || listen(lfd, 8) < 0)
                return 2;
        case_fdopen();
        case_dprintf();
        case_stdout();
        case_stdin();
        case_stderr();
        case_nonblock_fwrite();
        return failures ? 1 : 0;
}
