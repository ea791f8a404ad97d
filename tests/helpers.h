/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * Shared helpers for the tests that run a real smcd:
 *   - a private smcd in a private runtime directory (mkdtemp), started by
 *     fork/exec and stopped by SIGTERM (smcd_start(), smcd_stop());
 *   - its counters: SIGUSR1 makes smcd rewrite $RUNTIME_DIR/stats.json, read and
 *     parsed with json-c (smcd_stats(), stats_get());
 *   - test data: a random-access pseudo-random byte stream (pattern_fill(),
 *     pattern_check()) and FNV-1a 64 checksums.
 *
 * Header only (static inline), so each test executable compiles what it uses.
 * Functions return 0 or a negative errno unless stated otherwise; nothing here
 * prints except smcd_log_dump().
 */

#include <dirent.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- time ---- */

/* CLOCK_MONOTONIC in nanoseconds; comparable between processes. */
static inline uint64_t now_ns(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000000ull + (uint64_t) ts.tv_nsec;
}

static inline void sleep_ms(unsigned ms) {
        struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long) (ms % 1000) * 1000000L };

        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

/* ---- checksums and test data ---- */

#define FNV1A64_INIT 0xcbf29ce484222325ull

/* FNV-1a 64 of buf[0..len), continuing from h (start with FNV1A64_INIT). */
static inline uint64_t fnv1a64(uint64_t h, const void *buf, size_t len) {
        const uint8_t *p = buf;

        for (size_t i = 0; i < len; i++) {
                h ^= p[i];
                h *= 0x100000001b3ull;
        }
        return h;
}

static inline uint64_t splitmix64(uint64_t x) {
        x += 0x9e3779b97f4a7c15ull;
        x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
        x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
        return x ^ (x >> 31);
}

/* xorshift64*: a small PRNG for chunk sizes and the like. state must not be 0. */
static inline uint64_t xorshift64s(uint64_t *state) {
        uint64_t x = *state;

        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        *state = x;
        return x * 0x2545f4914f6cdd1dull;
}

/* The pseudo-random byte stream number 'seed': byte at offset off is byte
 * (off % 8) of splitmix64(seed * 2^32 + off / 8). Random access, so a receiver can
 * check any chunk without state. Fills buf[0..len) with the bytes at off.. */
static inline void pattern_fill(uint64_t seed, uint64_t off, void *buf, size_t len) {
        uint8_t *p = buf;
        uint64_t base = seed << 32;

        while (len > 0 && (off & 7)) {
                *p++ = (uint8_t) (splitmix64(base + off / 8) >> (8 * (off & 7)));
                off++;
                len--;
        }
        while (len >= 8) {
                uint64_t w = htole64(splitmix64(base + off / 8));

                memcpy(p, &w, 8);
                p += 8;
                off += 8;
                len -= 8;
        }
        while (len > 0) {
                *p++ = (uint8_t) (splitmix64(base + off / 8) >> (8 * (off & 7)));
                off++;
                len--;
        }
}

/* Compares buf[0..len) with the stream 'seed' at offset off. Returns -1 when equal,
 * else the index (into buf) of the first differing byte. */
static inline ssize_t pattern_check(uint64_t seed, uint64_t off, const void *buf, size_t len) {
        const uint8_t *p = buf;
        uint8_t tmp[4096];

        for (size_t done = 0; done < len;) {
                size_t n = len - done < sizeof(tmp) ? len - done : sizeof(tmp);

                pattern_fill(seed, off + done, tmp, n);
                if (memcmp(tmp, p + done, n) != 0) {
                        for (size_t i = 0; i < n; i++)
                                if (tmp[i] != p[done + i])
                                        return (ssize_t) (done + i);
                }
                done += n;
        }
        return -1;
}

/* ---- a private smcd ---- */

struct smcd_instance {
        char dir[PATH_MAX - 32]; /* private runtime directory */
        char sock[PATH_MAX];     /* dir/smcd.sock */
        char stats[PATH_MAX];    /* dir/stats.json */
        char log[PATH_MAX];      /* smcd's stdout and stderr (outside dir) */
        pid_t pid;               /* > 0 while started and not yet reaped */
        pid_t pgid;              /* smcd's own process group (= its first pid) */
        int status;              /* wait status once reaped */
};

/* Creates a fresh private runtime directory (mode 0700) for s. smcd is not started. */
static inline int smcd_instance_init(struct smcd_instance *s) {
        char tmpl[] = "/tmp/smcd-test.XXXXXX";

        memset(s, 0, sizeof(*s));
        if (!mkdtemp(tmpl))
                return -errno;
        snprintf(s->dir, sizeof(s->dir), "%s", tmpl);
        snprintf(s->sock, sizeof(s->sock), "%s/smcd.sock", s->dir);
        snprintf(s->stats, sizeof(s->stats), "%s/stats.json", s->dir);
        snprintf(s->log, sizeof(s->log), "%s.log", s->dir);
        return 0;
}

/* Tries one connect() to the control socket: 0 if smcd accepts, else -errno. */
static inline int smcd_probe(const struct smcd_instance *s) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int fd, r = 0;

        if (strlen(s->sock) >= sizeof(sa.sun_path))
                return -ENAMETOOLONG;
        strcpy(sa.sun_path, s->sock);
        fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        if (connect(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0)
                r = -errno;
        close(fd);
        return r;
}

/* Reaps smcd if it has exited. Returns true if it is gone (s->status is valid). */
static inline bool smcd_reap(struct smcd_instance *s, bool block) {
        pid_t r;

        if (s->pid <= 0)
                return true;
        do
                r = waitpid(s->pid, &s->status, block ? 0 : WNOHANG);
        while (r < 0 && errno == EINTR);
        if (r == s->pid || (r < 0 && errno == ECHILD)) {
                s->pid = 0;
                return true;
        }
        return false;
}

/* Starts smcd_path --runtime-dir s->dir [extra_args...] (extra_args NULL-terminated,
 * may be NULL), stdout and stderr to s->log, and waits up to timeout_ms until its
 * control socket accepts connections. -ECHILD if smcd exits first (see s->status),
 * -ETIMEDOUT if the socket never answers (smcd is then killed). */
static inline int smcd_start(struct smcd_instance *s, const char *smcd_path,
                             const char *const *extra_args, int timeout_ms) {
        const char *argv[32];
        size_t n = 0;
        uint64_t deadline;
        pid_t pid;

        argv[n++] = smcd_path;
        argv[n++] = "--runtime-dir";
        argv[n++] = s->dir;
        for (size_t i = 0; extra_args && extra_args[i] && n < 31; i++)
                argv[n++] = extra_args[i];
        argv[n] = NULL;

        pid_t parent = getpid();

        pid = fork();
        if (pid < 0)
                return -errno;
        if (pid == 0) {
                int fd = open(s->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);

                /* own process group, so smcd_stop() also catches anything it spawns;
                 * and never outlive the test (e.g. killed by a test timeout) */
                setpgid(0, 0);
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                if (getppid() != parent)
                        _exit(127);

                if (fd >= 0) {
                        dup2(fd, STDOUT_FILENO);
                        dup2(fd, STDERR_FILENO);
                }
                unsetenv("NOTIFY_SOCKET");
                unsetenv("LISTEN_FDS");
                unsetenv("LISTEN_PID");
                signal(SIGPIPE, SIG_DFL);
                execv(smcd_path, (char *const *) argv);
                _exit(127);
        }
        setpgid(pid, pid);
        s->pid = pid;
        s->pgid = pid;
        s->status = 0;

        deadline = now_ns() + (uint64_t) timeout_ms * 1000000ull;
        for (;;) {
                if (smcd_reap(s, false))
                        return -ECHILD;
                if (smcd_probe(s) == 0)
                        return 0;
                if (now_ns() > deadline) {
                        kill(s->pid, SIGKILL);
                        smcd_reap(s, true);
                        return -ETIMEDOUT;
                }
                sleep_ms(5);
        }
}

/* Sends SIGTERM and waits up to timeout_ms for smcd to exit, then SIGKILL. Returns
 * 0 if smcd exited (status in *ret_status), -ETIMEDOUT if it had to be killed. If
 * smcd already died, just reaps it. Anything left in smcd's process group is
 * killed. */
static inline int smcd_stop(struct smcd_instance *s, int timeout_ms, int *ret_status) {
        uint64_t deadline = now_ns() + (uint64_t) timeout_ms * 1000000ull;
        int r = 0;

        if (s->pid > 0) {
                kill(s->pid, SIGTERM);
                while (!smcd_reap(s, false)) {
                        if (now_ns() > deadline) {
                                kill(s->pid, SIGKILL);
                                smcd_reap(s, true);
                                r = -ETIMEDOUT;
                                break;
                        }
                        sleep_ms(2);
                }
        }
        if (s->pgid > 0) {
                kill(-s->pgid, SIGKILL);
                s->pgid = 0;
        }
        if (ret_status)
                *ret_status = s->status;
        return r;
}

/* Removes the runtime directory (one level of files) and the log. */
static inline void smcd_instance_cleanup(struct smcd_instance *s) {
        DIR *d;

        if (!s->dir[0])
                return;
        d = opendir(s->dir);
        if (d) {
                struct dirent *de;

                while ((de = readdir(d))) {
                        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                                continue;
                        unlinkat(dirfd(d), de->d_name, 0);
                }
                closedir(d);
        }
        rmdir(s->dir);
        unlink(s->log);
        s->dir[0] = 0;
}

/* Prints the last max_lines lines of smcd's log to f, each prefixed with "# smcd: ". */
static inline void smcd_log_dump(const struct smcd_instance *s, FILE *f, int max_lines) {
        char line[512];
        long nlines = 0, skip;
        FILE *in = fopen(s->log, "re");

        if (!in)
                return;
        while (fgets(line, sizeof(line), in))
                nlines++;
        skip = nlines > max_lines ? nlines - max_lines : 0;
        rewind(in);
        for (long i = 0; fgets(line, sizeof(line), in); i++) {
                if (i < skip)
                        continue;
                line[strcspn(line, "\n")] = 0;
                fprintf(f, "# smcd: %s\n", line);
        }
        fclose(in);
}

/* For a TAP test of the library's API: a private smcd from @smcd_path, waited for up to
 * 5 s, and SMCD_RUNTIME_DIR pointing at it. On failure prints "not ok 1 - starting
 * smcd" with the end of its log, cleans up and returns a negative errno. */
static inline int smcd_start_for_api(struct smcd_instance *s, const char *smcd_path) {
        int r = smcd_instance_init(s);

        if (r == 0)
                r = smcd_start(s, smcd_path, NULL, 5000);
        if (r < 0) {
                printf("not ok 1 - starting smcd: %s\n", strerror(-r));
                smcd_log_dump(s, stdout, 20);
                smcd_instance_cleanup(s);
                return r;
        }
        setenv("SMCD_RUNTIME_DIR", s->dir, 1);
        return 0;
}

/* Reads a whole small file into a NUL-terminated malloc'd string. */
static inline int read_file_str(const char *path, char **ret) {
        char *buf = NULL;
        size_t len = 0, cap = 0;
        int fd = open(path, O_RDONLY | O_CLOEXEC);

        if (fd < 0)
                return -errno;
        for (;;) {
                ssize_t n;

                if (cap - len < 4096) {
                        char *nb = realloc(buf, cap + 65536);

                        if (!nb) {
                                free(buf);
                                close(fd);
                                return -ENOMEM;
                        }
                        buf = nb;
                        cap += 65536;
                }
                n = read(fd, buf + len, cap - len - 1);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        int r = -errno;

                        free(buf);
                        close(fd);
                        return r;
                }
                if (n == 0)
                        break;
                len += (size_t) n;
        }
        close(fd);
        buf[len] = 0;
        *ret = buf;
        return 0;
}

/* Asks smcd (SIGUSR1) for fresh counters and parses $dir/stats.json. The old file is
 * removed first, so what is returned was written after the signal. *ret is owned by
 * the caller (json_object_put()). -ESRCH if smcd is not running, -ETIMEDOUT if no
 * complete file appears within timeout_ms. */
static inline int smcd_stats(const struct smcd_instance *s, struct json_object **ret, int timeout_ms) {
        uint64_t deadline = now_ns() + (uint64_t) timeout_ms * 1000000ull;

        if (s->pid <= 0)
                return -ESRCH;
        if (unlink(s->stats) < 0 && errno != ENOENT)
                return -errno;
        if (kill(s->pid, SIGUSR1) < 0)
                return -errno;
        for (;;) {
                char *text = NULL;

                if (read_file_str(s->stats, &text) == 0) {
                        struct json_tokener *tok = json_tokener_new();
                        struct json_object *o = NULL;

                        if (tok) {
                                o = json_tokener_parse_ex(tok, text, (int) strlen(text));
                                if (o && json_tokener_get_error(tok) != json_tokener_success) {
                                        json_object_put(o);
                                        o = NULL;
                                }
                                json_tokener_free(tok);
                        }
                        free(text);
                        if (o && json_object_is_type(o, json_type_object)) {
                                *ret = o;
                                return 0;
                        }
                        json_object_put(o);
                }
                if (now_ns() > deadline)
                        return -ETIMEDOUT;
                sleep_ms(2);
        }
}

/* Looks up a dotted path ("pool.in_use", "smcd.fallback.SMC_CLC_DECL_MAXCONNERR")
 * and stores its integer value. -ENOENT if a component is missing, -EINVAL if the
 * value is not a number. */
static inline int stats_get(struct json_object *root, const char *path, int64_t *ret) {
        char buf[256], *save = NULL;
        struct json_object *o = root;

        if (strlen(path) >= sizeof(buf))
                return -EINVAL;
        strcpy(buf, path);
        for (char *k = strtok_r(buf, ".", &save); k; k = strtok_r(NULL, ".", &save))
                if (!o || !json_object_object_get_ex(o, k, &o))
                        return -ENOENT;
        if (!json_object_is_type(o, json_type_int) && !json_object_is_type(o, json_type_double))
                return -EINVAL;
        *ret = json_object_get_int64(o);
        return 0;
}

/* Like stats_get() but returns defval for a missing key (fallback counters
 * appear only once a reason occurred). */
static inline int64_t stats_get_or(struct json_object *root, const char *path, int64_t defval) {
        int64_t v;

        return stats_get(root, path, &v) == 0 ? v : defval;
}
