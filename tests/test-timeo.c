/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* SO_RCVTIMEO and SA_RESTART on a blocking receive behave as on TCP. Run it once over
 * SMC-D (a private smcd, SMCD_RUNTIME_DIR) and once with SMCPROTO_DISABLE=1 (TCP):
 * tests/test-timeo.sh does both and requires the same results. Prints one line per
 * check; exits non-zero if a check fails. */

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "smcproto.h"

static void on_alarm(int sig) {
        (void) sig;
}

static double now(void) {
        struct timespec t;

        clock_gettime(CLOCK_MONOTONIC, &t);
        return (double) t.tv_sec + (double) t.tv_nsec / 1e9;
}

int main(void) {
        struct sockaddr_in a = { .sin_family = AF_INET };
        struct timeval tv = { .tv_sec = 0, .tv_usec = 300000 };
        struct sigaction sa = { .sa_handler = on_alarm };
        socklen_t al = sizeof(a), ml = sizeof(int);
        int l, s, mode = -1, failed = 0;
        double t0, dt;
        ssize_t n;
        pid_t p;
        char b;

        inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
        l = smc_socket(AF_INET, SOCK_STREAM, 0);
        if (l < 0 || smc_bind(l, (struct sockaddr *) &a, sizeof(a)) < 0 || smc_listen(l, 8) < 0 ||
            smc_getsockname(l, (struct sockaddr *) &a, &al) < 0) {
                perror("listen");
                return 2;
        }
        p = fork();
        if (p == 0) {
                int c = smc_accept(l, NULL, NULL);

                /* data at ~1.5 s and ~3.5 s, then EOF: the alarm of check 3 fires at
                 * ~2.5 s, a second before 'y' */
                usleep(1500000);
                smc_send(c, "x", 1, 0);
                usleep(2000000);
                smc_send(c, "y", 1, 0);
                usleep(200000);
                smc_close(c);
                _exit(0);
        }
        s = smc_socket(AF_INET, SOCK_STREAM, 0);
        smc_setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        if (smc_connect(s, (struct sockaddr *) &a, sizeof(a)) < 0) {
                perror("connect");
                return 2;
        }
        smc_getsockopt(s, SOL_SMC, SMC_PROTO_MODE, &mode, &ml);
        printf("# mode %s\n", mode == SMC_PROTO_MODE_SMCD ? "SMC-D" : "TCP");

        /* 1. SO_RCVTIMEO set before connect: EAGAIN after ~0.3 s */
        t0 = now();
        n = smc_recv(s, &b, 1, 0);
        dt = now() - t0;
        if (n == -1 && (errno == EAGAIN || errno == EWOULDBLOCK) && dt > 0.25 && dt < 1.0)
                printf("ok - SO_RCVTIMEO: EAGAIN\n");
        else {
                printf("not ok - SO_RCVTIMEO: %zd %s after %.2f s\n", n, n < 0 ? strerror(errno) : "", dt);
                failed = 1;
        }

        /* 2. no timeout; SIGALRM with SA_RESTART at 0.5 s: the recv restarts, gets 'x' */
        tv = (struct timeval) {};
        smc_setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        sa.sa_flags = SA_RESTART;
        sigaction(SIGALRM, &sa, NULL);
        alarm(1);
        n = smc_recv(s, &b, 1, 0);
        if (n == 1 && b == 'x')
                printf("ok - SA_RESTART: recv restarted\n");
        else {
                printf("not ok - SA_RESTART: %zd %s\n", n, n < 0 ? strerror(errno) : "");
                failed = 1;
        }

        /* 3. without SA_RESTART: EINTR */
        sa.sa_flags = 0;
        sigaction(SIGALRM, &sa, NULL);
        alarm(1); /* fires ~1 s before the next data */
        n = smc_recv(s, &b, 1, 0);
        if (n == -1 && errno == EINTR)
                printf("ok - no SA_RESTART: EINTR\n");
        else {
                printf("not ok - no SA_RESTART: %zd %s\n", n, n < 0 ? strerror(errno) : "");
                failed = 1;
        }
        n = smc_recv(s, &b, 1, MSG_WAITALL);
        if (n == 1 && b == 'y' && smc_recv(s, &b, 1, 0) == 0)
                printf("ok - data after EINTR, then EOF\n");
        else {
                printf("not ok - data after EINTR\n");
                failed = 1;
        }
        smc_close(s);
        waitpid(p, NULL, 0);
        return failed;
}
