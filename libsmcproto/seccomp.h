/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * A program that confines itself with a seccomp filter (OpenSSH's pre-authentication
 * child: read, write, poll and a few more; seccomp(2)) allows the system calls its
 * own I/O makes on a TCP socket. On an SMC connection the library makes others on its
 * own descriptors (the doorbell pair: sendto, recvfrom, sendmsg, recvmsg; ppoll for
 * poll(2); getsockopt, fcntl), and the kernel would kill the process at the first.
 * smcrun therefore puts a prefix in front of such a filter when the program installs
 * it: those calls are allowed on exactly the library's descriptors of that moment
 * (the first argument compared with each), plus ppoll, epoll_pwait, sched_yield and
 * getcpu on any (they only wait, yield or read the CPU number, as the poll family the
 * filter allows);
 * everything else reaches the program's filter unchanged, which decides as before.
 * smcrun(1) "SECCOMP".
 */

#include <linux/filter.h>
#include <stddef.h>

/* Instructions a prefix adds besides two per descriptor. */
#define SMC_SECCOMP_PREFIX_BASE 26u

/* The program's filter @prog with the prefix for the descriptors @fds[0..@nfds)
 * in front, in @out (room for @cap instructions; SMC_SECCOMP_PREFIX_BASE + 2 * @nfds
 * + prog->len suffice). The prefix checks the architecture (only the one this
 * library is built for; other calls go to the program's filter as they are), then
 * the system call number and, for the calls that name a descriptor, the descriptor.
 * Returns the length of the new program, or -E2BIG (more than BPF_MAXINSNS, or more
 * than @cap), -EINVAL (no program, or no architecture known here). */
int smc_seccomp_prefix(const struct sock_fprog *prog, const int *fds, size_t nfds, struct sock_filter *out,
                       size_t cap);
