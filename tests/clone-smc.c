/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * clone-smc: copies of the process made past fork(3), which run no pthread_atfork(3)
 * handlers: syscall(SYS_clone, SIGCHLD, 0, ...) as vsftpd makes its session
 * processes, and glibc's clone() without CLONE_VM. Each case passes over TCP; under
 * smcrun the library took such a copy for a vfork() child and left its socket table
 * stale (vsftpd: every session failed; data went into bare socket pair ends).
 *   1. raw clone: the copy dup2()s an accepted connection onto fd 0, closes the
 *      original, reads the client's "hello" from 0 and answers "world" (vsftpd);
 *   2. glibc clone(): the copy closes the listener and makes a socket pair, which
 *      gets the listener's number: the pair works (not the listener's TCP socket);
 *   3. raw clone: parent and copy connect 20 times each at the same time (the copy
 *      must not share the parent's control connection to smcd and take its replies),
 *      every echo right.
 * Prints one line per case; exit 0 when all passed.
 */

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static struct sockaddr_in srv;

static int listener(void) {
        socklen_t al = sizeof(srv);
        int l = socket(AF_INET, SOCK_STREAM, 0);

        srv = (struct sockaddr_in) { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        if (l < 0 || bind(l, (struct sockaddr *) &srv, sizeof(srv)) < 0 || listen(l, 64) < 0 ||
            getsockname(l, (struct sockaddr *) &srv, &al) < 0) {
                perror("listen");
                exit(1);
        }
        return l;
}

static int dial(void) {
        int c = socket(AF_INET, SOCK_STREAM, 0);

        if (c < 0 || connect(c, (struct sockaddr *) &srv, sizeof(srv)) < 0) {
                perror("connect");
                exit(1);
        }
        return c;
}

static pid_t raw_clone(void) {
        return (pid_t) syscall(SYS_clone, (long) SIGCHLD, 0L, 0L, 0L, 0L);
}

static int waitok(pid_t pid) {
        int st;

        return waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static int case_dup2(void) {
        int l = listener(), c = dial(), s = accept(l, NULL, NULL);
        char b[16] = "";
        pid_t pid;

        if (s < 0)
                return 0;
        pid = raw_clone();
        if (pid == 0) {
                char r[16] = "";

                close(l);
                close(c);
                if (dup2(s, 0) != 0 || close(s) < 0 || read(0, r, 5) != 5 || strcmp(r, "hello") ||
                    write(0, "world", 5) != 5)
                        _exit(1);
                _exit(0);
        }
        close(s);
        close(l);
        if (write(c, "hello", 5) != 5 || read(c, b, 5) != 5)
                b[0] = 0;
        close(c);
        return waitok(pid) && strcmp(b, "world") == 0;
}

static int l2;

static int clone_fn(void *arg) {
        int sp[2];
        char b = 0;

        (void) arg;
        close(l2);
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, sp) < 0 || write(sp[1], "x", 1) != 1 || read(sp[0], &b, 1) != 1)
                return 1;
        return b == 'x' ? 0 : 1;
}

static int case_glibc_clone(void) {
        static char stack[256 * 1024];
        pid_t pid;
        int ok;

        l2 = listener();
        pid = clone(clone_fn, stack + sizeof(stack), SIGCHLD, NULL);
        if (pid < 0)
                return 0;
        ok = waitok(pid);
        close(l2);
        return ok;
}

static int echo_n(int n, const char *who) {
        for (int i = 0; i < n; i++) {
                char msg[32], b[32] = "";
                int c = dial();
                size_t len = (size_t) snprintf(msg, sizeof(msg), "%s-%d", who, i);

                if (write(c, msg, len) != (ssize_t) len || read(c, b, sizeof(b) - 1) != (ssize_t) len ||
                    memcmp(b, msg, len)) {
                        fprintf(stderr, "%s: connection %d: sent '%s', got '%s'\n", who, i, msg, b);
                        close(c);
                        return 0;
                }
                close(c);
        }
        return 1;
}

static int case_connect_both(void) {
        int l = listener(), ok;
        pid_t srvpid, pid;

        srvpid = fork();
        if (srvpid == 0) {
                for (int i = 0; i < 41; i++) {
                        char b[32];
                        int s = accept(l, NULL, NULL);
                        ssize_t n;

                        if (s < 0)
                                _exit(1);
                        n = read(s, b, sizeof(b));
                        if (n > 0 && write(s, b, (size_t) n) != n)
                                _exit(1);
                        close(s);
                }
                _exit(0);
        }
        close(l);
        ok = echo_n(1, "warm-up"); /* the parent's control connection exists now */
        pid = raw_clone();
        if (pid == 0)
                _exit(echo_n(20, "copy") ? 0 : 1);
        ok &= echo_n(20, "parent");
        ok &= waitok(pid);
        ok &= waitok(srvpid);
        return ok;
}

int main(void) {
        int r1 = case_dup2(), r2 = case_glibc_clone(), r3 = case_connect_both();

        printf("raw clone, dup2 onto 0: %s; glibc clone(), number reused: %s; raw clone, both connect: %s\n",
               r1 ? "ok" : "FAILED", r2 ? "ok" : "FAILED", r3 ? "ok" : "FAILED");
        return r1 && r2 && r3 ? 0 : 1;
}
