/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The prefix smcrun puts in front of a program's seccomp filter: see seccomp.h. */

#include <errno.h>
#include <linux/audit.h>
#include <linux/seccomp.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>

#include "seccomp.h"

#if defined(__x86_64__)
#define SMC_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define SMC_AUDIT_ARCH AUDIT_ARCH_AARCH64
#endif

/* struct seccomp_data: nr at 0, arch at 4, args[] at 16; the low word of args[0]
 * (little endian: both architectures above) holds the descriptor */
#define OFF_NR 0
#define OFF_ARCH 4
#define OFF_ARG0_LO 16

int smc_seccomp_prefix(const struct sock_fprog *prog, const int *fds, size_t nfds, struct sock_filter *out,
                       size_t cap) {
#ifdef SMC_AUDIT_ARCH
        /* on any descriptor: they wait, yield the CPU (ring.c's wait for a peer
         * preempted on ours), or read the CPU number (the spin's "same CPU" test; a
         * vDSO call unless the kernel has none) */
        static const uint32_t any[] = { SYS_ppoll, SYS_epoll_pwait, SYS_sched_yield, SYS_getcpu };
        /* on the library's descriptors only: the doorbell pair and control socket I/O,
         * their options and flags, shutting and closing them */
        static const uint32_t own[] = { SYS_sendto,     SYS_recvfrom, SYS_sendmsg,  SYS_recvmsg, SYS_getsockopt,
                                        SYS_setsockopt, SYS_fcntl,    SYS_shutdown, SYS_close };
        const size_t n_any = sizeof(any) / sizeof(any[0]), n_own = sizeof(own) / sizeof(own[0]);
        size_t len, i = 0, app;

        if (!prog || !prog->filter || prog->len == 0)
                return -EINVAL;
        len = 4 + 2 * n_any + n_own + 2 + 2 * nfds + 2 + prog->len;
        if (len > BPF_MAXINSNS || len > cap)
                return -E2BIG;
        app = len - prog->len - 2; /* where the program's filter starts, after A = X = 0 */
#define PUT(code, k, jt, jf) (out[i] = (struct sock_filter) BPF_JUMP((code), (k), (jt), (jf)), i++)
        PUT(BPF_LD | BPF_W | BPF_ABS, OFF_ARCH, 0, 0);
        PUT(BPF_JMP | BPF_JEQ | BPF_K, SMC_AUDIT_ARCH, 1, 0);
        PUT(BPF_JMP | BPF_JA, (uint32_t) (app - i - 1), 0, 0);
        PUT(BPF_LD | BPF_W | BPF_ABS, OFF_NR, 0, 0);
        for (size_t j = 0; j < n_any; j++) {
                PUT(BPF_JMP | BPF_JEQ | BPF_K, any[j], 0, 1);
                PUT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW, 0, 0);
        }
        /* each of these jumps to the descriptor check, right after the list + 1 */
        for (size_t j = 0; j < n_own; j++)
                PUT(BPF_JMP | BPF_JEQ | BPF_K, own[j], (uint8_t) (n_own - j), 0);
        PUT(BPF_JMP | BPF_JA, (uint32_t) (app - i - 1), 0, 0);
        PUT(BPF_LD | BPF_W | BPF_ABS, OFF_ARG0_LO, 0, 0);
        for (size_t j = 0; j < nfds; j++) {
                PUT(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t) fds[j], 0, 1);
                PUT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW, 0, 0);
        }
        /* the program's filter runs as if alone: A and X zero, as at the start */
        PUT(BPF_LD | BPF_IMM, 0, 0, 0);
        PUT(BPF_MISC | BPF_TAX, 0, 0, 0);
#undef PUT
        memcpy(out + i, prog->filter, prog->len * sizeof(*out));
        return (int) len;
#else
        (void) prog;
        (void) fds;
        (void) nfds;
        (void) out;
        (void) cap;
        return -EINVAL;
#endif
}
