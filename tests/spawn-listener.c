/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* posix_spawn and an SMC listener the new process may inherit, run under smcrun (test
 * smcrun-exec) and over plain TCP alike:
 *  closefrom  a spawn with posix_spawn_file_actions_addclosefrom_np(L + 1) while a
 *             listener L that is not close-on-exec is open: posix_spawn returns 0 and
 *             the child runs (the library's appended dup2 of the listener's TCP socket,
 *             a higher number, read from a number the program's closefrom had closed:
 *             EBADF), and the listener then accepts a connection, over SMC-D under
 *             smcrun.
 *  threads    one thread spawns 150 short children that inherit a listener, another
 *             at the same time 150 children (sleep 3) with an addclose action for it;
 *             after the first thread's children exited and the listener is closed, a
 *             connect to its port is refused at once, as over TCP (the accept channel
 *             had its close-on-exec cleared in the parent for each spawn of the first
 *             thread, and 20-30 of the second thread's children held it: the listener
 *             lived on in smcd, and the connect succeeded into a queue nobody read).
 *             (It first waits, up to 2.5 s, until none of those children holds a socket:
 *             the kernel lets a spawned child keep the parent's close-on-exec copies for
 *             a moment after posix_spawn() returned; about 1 run in 30 on a busy CPU.)
 * Usage: spawn-listener closefrom|threads. Prints one line; exit status 0 if the case
 * held, 1 if not, 2 on bad usage. */

#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define SOL_SMC_PROTO 286
#define SMC_PROTO_MODE 0x5301
#define N_SPAWN 150

extern char **environ;

static int listener(struct sockaddr_in *a, int cloexec) {
        socklen_t l = sizeof(*a);
        int fd = socket(AF_INET, SOCK_STREAM | cloexec, 0);

        memset(a, 0, sizeof(*a));
        a->sin_family = AF_INET;
        a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (fd < 0 || bind(fd, (struct sockaddr *) a, sizeof(*a)) < 0 || listen(fd, 16) < 0 ||
            getsockname(fd, (struct sockaddr *) a, &l) < 0) {
                perror("spawn-listener: listener");
                exit(1);
        }
        return fd;
}

/* @what: the mode of a connection accepted on @lfd after a connect to @a, in *@mode
 * (-1 over TCP); 4 bytes each way. Returns 0 or -1. */
static int one_connection(int lfd, const struct sockaddr_in *a, int *mode) {
        int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), s, r = -1;
        socklen_t ml = sizeof(*mode);
        char buf[4];

        *mode = -1;
        if (c < 0 || connect(c, (const struct sockaddr *) a, sizeof(*a)) < 0)
                return -1;
        s = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (s >= 0 && write(c, "ping", 4) == 4 && read(s, buf, 4) == 4 && !memcmp(buf, "ping", 4) &&
            write(s, "pong", 4) == 4 && read(c, buf, 4) == 4 && !memcmp(buf, "pong", 4))
                r = 0;
        if (s >= 0 && getsockopt(s, SOL_SMC_PROTO, SMC_PROTO_MODE, mode, &ml) < 0)
                *mode = -1;
        if (s >= 0)
                close(s);
        close(c);
        return r;
}

static int case_closefrom(void) {
        struct sockaddr_in a;
        posix_spawn_file_actions_t fa;
        char *argv[] = { (char *) "true", NULL };
        int lfd = listener(&a, 0), r, st = -1, mode;
        pid_t pid;

        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addclosefrom_np(&fa, lfd + 1);
        r = posix_spawn(&pid, "/bin/true", &fa, NULL, argv, environ);
        posix_spawn_file_actions_destroy(&fa);
        if (r != 0) {
                printf("closefrom: posix_spawn failed: %s\n", strerror(r));
                return 1;
        }
        if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                printf("closefrom: the child did not exit 0 (status 0x%x)\n", st);
                return 1;
        }
        if (one_connection(lfd, &a, &mode) < 0) {
                printf("closefrom: the listener does not carry a connection after the spawn: %m\n");
                return 1;
        }
        close(lfd);
        printf("closefrom: posix_spawn with addclosefrom_np(%d) ran /bin/true; the listener accepts on "
               "(mode %d)\n", lfd + 1, mode);
        return 0;
}

static int lfd_threads;
static pid_t kids[2][N_SPAWN];

static void *spawner(void *arg) {
        int which = (int) (long) arg;
        posix_spawn_file_actions_t fa;
        char *t_argv[] = { (char *) "true", NULL };
        char *s_argv[] = { (char *) "sleep", (char *) "3", NULL };

        posix_spawn_file_actions_init(&fa);
        if (which == 1)
                posix_spawn_file_actions_addclose(&fa, lfd_threads);
        for (int i = 0; i < N_SPAWN; i++) {
                kids[which][i] = -1;
                if (which == 0)
                        (void) posix_spawn(&kids[which][i], "/bin/true", &fa, NULL, t_argv, environ);
                else
                        (void) posix_spawn(&kids[which][i], "/bin/sleep", &fa, NULL, s_argv, environ);
        }
        posix_spawn_file_actions_destroy(&fa);
        return NULL;
}

/* Does any of the second thread's children still hold a socket (beyond 0-2)? */
static bool sleepers_hold_sockets(void) {
        for (int i = 0; i < N_SPAWN; i++) {
                char path[64];
                DIR *d;
                struct dirent *de;
                bool any = false;

                if (kids[1][i] <= 0)
                        continue;
                snprintf(path, sizeof(path), "/proc/%d/fd", (int) kids[1][i]);
                d = opendir(path);
                while (d && !any && (de = readdir(d))) {
                        char l[320], t[64];
                        ssize_t n;

                        if (de->d_name[0] == '.' || atoi(de->d_name) <= 2)
                                continue;
                        snprintf(l, sizeof(l), "%s/%s", path, de->d_name);
                        n = readlink(l, t, sizeof(t) - 1);
                        any = n > 7 && !strncmp(t, "socket:", 7);
                }
                if (d)
                        closedir(d);
                if (any)
                        return true;
        }
        return false;
}

static int case_threads(void) {
        struct sockaddr_in a;
        pthread_t t[2];
        int c, r, e;

        lfd_threads = listener(&a, 0);
        for (long i = 0; i < 2; i++)
                pthread_create(&t[i], NULL, spawner, (void *) i);
        for (int i = 0; i < 2; i++)
                pthread_join(t[i], NULL);
        for (int i = 0; i < N_SPAWN; i++)
                if (kids[0][i] > 0)
                        (void) waitpid(kids[0][i], NULL, 0);
        close(lfd_threads);
        /* a spawned child holds copies of the parent's close-on-exec descriptors (the
         * listener's accept channel and TCP socket among them) for a moment after
         * posix_spawn() returned: the kernel wakes the parent of a vfork-style clone
         * before the child's exec closes them (begin_new_exec(): exec_mmap(), then
         * do_close_on_exec()), and a busy CPU stretches that to milliseconds, an
         * ASan build beside redis and iperf3 on 2 cores past 1 s (a CI run of
         * 2026-12-07 failed so; alone it passed 6 of 6). Wait for that (up to 2.5 s)
         * before judging: the bug this case is for kept the channel in the sleeping
         * children for their whole 3 s. */
        for (int tries = 0; tries < 250 && sleepers_hold_sockets(); tries++)
                usleep(10000);
        c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        r = connect(c, (struct sockaddr *) &a, sizeof(a));
        e = errno;
        close(c);
        for (int i = 0; i < N_SPAWN; i++)
                if (kids[1][i] > 0) {
                        kill(kids[1][i], SIGTERM);
                        (void) waitpid(kids[1][i], NULL, 0);
                }
        if (r == 0 || e != ECONNREFUSED) {
                printf("threads: a connect after the listener's close: %s (want ECONNREFUSED)\n",
                       r == 0 ? "connected" : strerror(e));
                return 1;
        }
        printf("threads: %d spawns inheriting the listener beside %d without it; after its close a connect "
               "is refused\n", N_SPAWN, N_SPAWN);
        return 0;
}

int main(int argc, char **argv) {
        if (argc != 2)
                return 2;
        if (!strcmp(argv[1], "closefrom"))
                return case_closefrom();
        if (!strcmp(argv[1], "threads"))
                return case_threads();
        return 2;
}
