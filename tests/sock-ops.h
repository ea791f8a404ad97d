/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once
/*
 * The two socket APIs the integration tests run side by side: libc over real TCP
 * (sock_ops_tcp) and libsmcproto's smc_* calls (sock_ops_smc), as one table of
 * function pointers each, so that a test body is written once for both. Every call
 * behaves as its libc namesake: -1 with errno set on error.
 * Used by tests/test-integration.c and tests/test-sockopt.c (tests/sock-ops.c).
 */
#include <poll.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <sys/types.h>

struct sock_ops {
        const char *name;  /* short, lower case: "tcp", "smc" */
        const char *label; /* for reports: "TCP", "SMC-D" */
        bool smc;          /* the smc_* calls */
        int (*socket)(int, int, int);
        int (*bind)(int, const struct sockaddr *, socklen_t);
        int (*listen)(int, int);
        int (*accept)(int, struct sockaddr *, socklen_t *);
        int (*connect)(int, const struct sockaddr *, socklen_t);
        ssize_t (*send)(int, const void *, size_t, int);
        ssize_t (*recv)(int, void *, size_t, int);
        int (*shutdown)(int, int);
        int (*close)(int);
        int (*setsockopt)(int, int, int, const void *, socklen_t);
        int (*getsockopt)(int, int, int, void *, socklen_t *);
        int (*getsockname)(int, struct sockaddr *, socklen_t *);
        int (*getpeername)(int, struct sockaddr *, socklen_t *);
        int (*poll)(struct pollfd *, nfds_t, int);
        int (*ioctl)(int, unsigned long, void *);
        /* O_NONBLOCK on (true) or off through F_GETFL / F_SETFL */
        int (*set_nonblock)(int, bool);
};

extern const struct sock_ops sock_ops_tcp;
extern const struct sock_ops sock_ops_smc;
