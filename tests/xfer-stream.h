/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once
/*
 * The checked stream of the transfer test programs (tests/smcr-xfer.c over the client
 * library, tests/kernel-smc-xfer.c over the kernel's AF_SMC): a xorshift byte stream per
 * seed, sent or received and compared in 256 KiB chunks. The includer defines
 * XFER_SEND / XFER_RECV (send(2) / recv(2) shaped) before including it.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static uint64_t rng_next(uint64_t *s) {
        uint64_t x = *s;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        return *s = x;
}

static void rng_fill(uint64_t *s, uint8_t *buf, size_t n) {
        while (n >= 8) {
                uint64_t v = rng_next(s);
                memcpy(buf, &v, 8);
                buf += 8;
                n -= 8;
        }
        if (n) {
                uint64_t v = rng_next(s);
                memcpy(buf, &v, n);
        }
}

static int send_all(int fd, const void *buf, size_t n) {
        const uint8_t *p = buf;

        while (n > 0) {
                ssize_t k = XFER_SEND(fd, p, n, MSG_NOSIGNAL);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                p += k;
                n -= (size_t) k;
        }
        return 0;
}

static int recv_all(int fd, void *buf, size_t n) {
        uint8_t *p = buf;

        while (n > 0) {
                ssize_t k = XFER_RECV(fd, p, n, 0);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (k == 0)
                        return -EPIPE;
                p += k;
                n -= (size_t) k;
        }
        return 0;
}

/* stream @size bytes of seed's sequence (send) or check them (recv): 0, -errno, or
 * -EBADMSG with *bad_at the first wrong byte's offset */
static int stream(int fd, uint64_t size, uint64_t seed, bool sending, uint64_t *bad_at) {
        static const size_t CH = 256 * 1024;
        uint8_t *a = malloc(CH), *b = malloc(CH);
        uint64_t r = seed ? seed : 1, done = 0;
        int ret = 0;

        if (!a || !b) {
                free(a);
                free(b);
                return -ENOMEM;
        }
        while (done < size) {
                size_t n = size - done < CH ? (size_t) (size - done) : CH;

                rng_fill(&r, a, n);
                if (sending)
                        ret = send_all(fd, a, n);
                else {
                        ret = recv_all(fd, b, n);
                        if (ret == 0 && memcmp(a, b, n) != 0) {
                                for (size_t i = 0; i < n; i++)
                                        if (a[i] != b[i]) {
                                                *bad_at = done + i;
                                                break;
                                        }
                                ret = -EBADMSG;
                        }
                }
                if (ret < 0)
                        break;
                done += n;
        }
        free(a);
        free(b);
        return ret;
}
