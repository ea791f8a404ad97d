/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * seccomp-smc: a server whose per-connection child confines itself with a seccomp
 * filter before it serves, as OpenSSH's pre-authentication child does (the same
 * allow-list: read, write, poll, select, futex, mmap, ... and nothing that names a
 * socket call), then echoes what the client sends with plain read(2), write(2) and
 * poll(2). Over TCP this works; under smcrun the library's own calls on the SMC
 * connection (doorbell sendto/recvfrom, ppoll) need the prefix smcrun puts in front
 * of the filter (libsmcproto/seccomp.h). The child also checks that the filter still
 * refuses what it refused (getppid(2): SIGSYS) and that a socket made after it is a
 * plain one (socket(2) is refused too: EACCES-free SIGSYS as well, so it is not
 * tried). tests/test-smcrun-apps.sh runs it over TCP and under smcrun.
 *
 *   seccomp-smc prctl|seccomp BYTES     exit 0 when every byte came back right
 */


#include <arpa/inet.h>
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__x86_64__)
#define ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define ARCH AUDIT_ARCH_AARCH64
#endif

static volatile sig_atomic_t trapped_nr = -1;

static void on_sigsys(int sig, siginfo_t *si, void *uc) {
        (void) sig;
        (void) uc;
        trapped_nr = si->si_syscall;
}

#define ALLOW(nr) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)

/* OpenSSH's pre-authentication allow-list (sandbox-seccomp-filter.c), refusing the
 * rest with SIGSYS (OpenSSH kills; a trap lets the test report it) */
static int sandbox(const char *how) {
#ifdef ARCH
        struct sock_filter f[] = {
                BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
                BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ARCH, 1, 0),
                BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
                BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
                ALLOW(SYS_brk), ALLOW(SYS_clock_gettime), ALLOW(SYS_close), ALLOW(SYS_exit),
                ALLOW(SYS_exit_group), ALLOW(SYS_futex), ALLOW(SYS_geteuid), ALLOW(SYS_getpgid),
                ALLOW(SYS_getpid), ALLOW(SYS_getrandom), ALLOW(SYS_gettimeofday), ALLOW(SYS_getuid),
                ALLOW(SYS_madvise), ALLOW(SYS_mmap), ALLOW(SYS_mremap), ALLOW(SYS_munmap),
                ALLOW(SYS_nanosleep), ALLOW(SYS_clock_nanosleep), ALLOW(SYS_poll), ALLOW(SYS_pselect6),
                ALLOW(SYS_read), ALLOW(SYS_rt_sigprocmask), ALLOW(SYS_rt_sigreturn), ALLOW(SYS_select),
                ALLOW(SYS_shutdown), ALLOW(SYS_write),
                BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP),
        };
        struct sock_fprog p = { sizeof(f) / sizeof(f[0]), f };
        struct sigaction sa = { .sa_sigaction = on_sigsys, .sa_flags = SA_SIGINFO };

        if (sigaction(SIGSYS, &sa, NULL) < 0 || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
                return -errno;
        if (strcmp(how, "prctl") == 0)
                return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &p) < 0 ? -errno : 0;
        return syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &p) < 0 ? -errno : 0;
#else
        (void) how;
        return -ENOSYS;
#endif
}

static uint8_t pattern(size_t i) {
        return (uint8_t) (i * 131 + (i >> 9));
}

/* the child: sandboxed, echo until EOF with read / write / poll */
static int serve(int c, const char *how) {
        uint8_t buf[16384];
        int r = sandbox(how);

        if (r < 0) {
                fprintf(stderr, "child: seccomp: %s\n", strerror(-r));
                return 2;
        }
        for (;;) {
                struct pollfd p = { .fd = c, .events = POLLIN };
                ssize_t n;

                if (poll(&p, 1, 10000) != 1)
                        return 3;
                n = read(c, buf, sizeof(buf));
                if (n == 0)
                        break;
                if (n < 0)
                        return 4;
                for (ssize_t o = 0; o < n;) {
                        ssize_t w = write(c, buf + o, (size_t) (n - o));

                        if (w <= 0)
                                return 5;
                        o += w;
                }
        }
        if (trapped_nr != -1)
                return 6; /* one of the library's calls was refused on the way */
        /* the program's filter still decides everything else */
        syscall(SYS_getppid);
        if (trapped_nr != SYS_getppid)
                return 7;
        shutdown(c, SHUT_WR);
        return 0;
}

int main(int argc, char **argv) {
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t al = sizeof(a);
        size_t total, sent = 0, got = 0;
        int l, c, s, st;
        pid_t pid;

        if (argc != 3 || (strcmp(argv[1], "prctl") && strcmp(argv[1], "seccomp"))) {
                fprintf(stderr, "usage: seccomp-smc prctl|seccomp BYTES\n");
                return 2;
        }
        total = strtoull(argv[2], NULL, 10);
        l = socket(AF_INET, SOCK_STREAM, 0);
        if (l < 0 || bind(l, (struct sockaddr *) &a, sizeof(a)) < 0 || listen(l, 4) < 0 ||
            getsockname(l, (struct sockaddr *) &a, &al) < 0) {
                perror("listen");
                return 1;
        }
        c = socket(AF_INET, SOCK_STREAM, 0);
        if (c < 0 || connect(c, (struct sockaddr *) &a, sizeof(a)) < 0 || (s = accept(l, NULL, NULL)) < 0) {
                perror("connect");
                return 1;
        }
        pid = fork();
        if (pid == 0) {
                close(l);
                close(c);
                exit(serve(s, argv[1])); /* (exit: the library's destructors run sandboxed too) */
        }
        close(s);
        /* the client: send and read back, interleaved (the echo would fill both
         * directions' buffers otherwise) */
        while (got < total) {
                struct pollfd p = { .fd = c, .events = POLLIN | (sent < total ? POLLOUT : 0) };
                uint8_t buf[16384];

                if (poll(&p, 1, 10000) != 1) {
                        fprintf(stderr, "client: stalled at %zu sent, %zu back\n", sent, got);
                        break;
                }
                if ((p.revents & POLLOUT) && sent < total) {
                        size_t n = total - sent < sizeof(buf) ? total - sent : sizeof(buf);
                        ssize_t w;

                        for (size_t i = 0; i < n; i++)
                                buf[i] = pattern(sent + i);
                        w = send(c, buf, n, MSG_DONTWAIT);
                        if (w > 0)
                                sent += (size_t) w;
                        if (sent == total)
                                shutdown(c, SHUT_WR);
                }
                if (p.revents & (POLLIN | POLLHUP)) {
                        ssize_t n = recv(c, buf, sizeof(buf), MSG_DONTWAIT);

                        if (n == 0)
                                break;
                        for (ssize_t i = 0; i < n; i++)
                                if (buf[i] != pattern(got + (size_t) i)) {
                                        fprintf(stderr, "client: byte %zu wrong\n", got + (size_t) i);
                                        return 1;
                                }
                        if (n > 0)
                                got += (size_t) n;
                }
        }
        close(c);
        if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                fprintf(stderr, "child %s %d\n", WIFEXITED(st) ? "exited" : "killed by signal",
                        WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
                return 1;
        }
        printf("%s: %zu bytes echoed by a sandboxed child\n", argv[1], got);
        return got == total ? 0 : 1;
}
