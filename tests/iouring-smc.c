/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * A program that uses io_uring on its sockets (raw system calls, as liburing makes
 * them), run under smcrun by test-smcrun-apps.sh: io_uring acts on descriptors in the
 * kernel, past the preload library, so smcrun must keep this program's sockets TCP
 * (SMCD_DECL_IOURING) instead of handing io_uring an SMC socket's doorbell end.
 * Checks that IORING_OP_SEND / IORING_OP_RECV move exactly the bytes written and read
 * with plain calls on the other end (64 KiB each way). Prints one line; exit 0 when the
 * bytes are right, 1 when not, 77 when the kernel refuses io_uring.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/io_uring.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

struct ring {
        int fd;
        unsigned *sq_tail, *sq_mask, *sq_array, *cq_head, *cq_tail, *cq_mask;
        struct io_uring_sqe *sqes;
        struct io_uring_cqe *cqes;
};

static int ring_init(struct ring *r) {
        struct io_uring_params p;
        uint8_t *sq, *cq;

        memset(&p, 0, sizeof(p));
        r->fd = (int) syscall(__NR_io_uring_setup, 4, &p);
        if (r->fd < 0)
                return -errno;
        sq = mmap(NULL, p.sq_off.array + p.sq_entries * sizeof(unsigned), PROT_READ | PROT_WRITE,
                  MAP_SHARED | MAP_POPULATE, r->fd, IORING_OFF_SQ_RING);
        cq = mmap(NULL, p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe), PROT_READ | PROT_WRITE,
                  MAP_SHARED | MAP_POPULATE, r->fd, IORING_OFF_CQ_RING);
        r->sqes = mmap(NULL, p.sq_entries * sizeof(struct io_uring_sqe), PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_POPULATE, r->fd, IORING_OFF_SQES);
        if (sq == MAP_FAILED || cq == MAP_FAILED || r->sqes == MAP_FAILED)
                return -errno;
        r->sq_tail = (unsigned *) (sq + p.sq_off.tail);
        r->sq_mask = (unsigned *) (sq + p.sq_off.ring_mask);
        r->sq_array = (unsigned *) (sq + p.sq_off.array);
        r->cq_head = (unsigned *) (cq + p.cq_off.head);
        r->cq_tail = (unsigned *) (cq + p.cq_off.tail);
        r->cq_mask = (unsigned *) (cq + p.cq_off.ring_mask);
        r->cqes = (struct io_uring_cqe *) (cq + p.cq_off.cqes);
        return 0;
}

/* One SEND or RECV of @len bytes at @buf on @fd, waited for: the result (bytes or
 * -errno). */
static int ring_io(struct ring *r, int op, int fd, void *buf, unsigned len) {
        unsigned tail = __atomic_load_n(r->sq_tail, __ATOMIC_ACQUIRE), idx = tail & *r->sq_mask, head;
        struct io_uring_sqe *sqe = &r->sqes[idx];
        int res;

        memset(sqe, 0, sizeof(*sqe));
        sqe->opcode = (uint8_t) op;
        sqe->fd = fd;
        sqe->addr = (uint64_t) (uintptr_t) buf;
        sqe->len = len;
        r->sq_array[idx] = idx;
        __atomic_store_n(r->sq_tail, tail + 1, __ATOMIC_RELEASE);
        if (syscall(__NR_io_uring_enter, r->fd, 1, 1, IORING_ENTER_GETEVENTS, NULL, 0) < 0)
                return -errno;
        head = __atomic_load_n(r->cq_head, __ATOMIC_ACQUIRE);
        if (head == __atomic_load_n(r->cq_tail, __ATOMIC_ACQUIRE))
                return -EIO;
        res = r->cqes[head & *r->cq_mask].res;
        __atomic_store_n(r->cq_head, head + 1, __ATOMIC_RELEASE);
        return res;
}

#define LEN (64u << 10)

int main(void) {
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t al = sizeof(a);
        static uint8_t out[LEN], in[LEN];
        struct ring r;
        int l, c, s, rc;
        size_t got = 0;

        rc = ring_init(&r);
        if (rc < 0) {
                printf("io_uring not available: %s\n", strerror(-rc));
                return 77;
        }
        for (size_t i = 0; i < LEN; i++)
                out[i] = (uint8_t) (i * 7 + (i >> 8));
        l = socket(AF_INET, SOCK_STREAM, 0);
        if (l < 0 || bind(l, (struct sockaddr *) &a, sizeof(a)) < 0 || listen(l, 4) < 0 ||
            getsockname(l, (struct sockaddr *) &a, &al) < 0)
                return 2;
        c = socket(AF_INET, SOCK_STREAM, 0);
        if (c < 0 || connect(c, (struct sockaddr *) &a, sizeof(a)) < 0 || (s = accept(l, NULL, NULL)) < 0)
                return 2;
        /* client -> server: write(), the server receives through io_uring */
        if (write(c, out, LEN) != (ssize_t) LEN)
                return 2;
        while (got < LEN) {
                rc = ring_io(&r, IORING_OP_RECV, s, in + got, LEN - (unsigned) got);
                if (rc <= 0)
                        break;
                got += (size_t) rc;
        }
        if (got != LEN || memcmp(in, out, LEN) != 0) {
                printf("io_uring RECV: %zu bytes, %s\n", got, got == LEN ? "different bytes" : "cut short");
                return 1;
        }
        /* server -> client: io_uring SEND, the client read()s */
        rc = ring_io(&r, IORING_OP_SEND, s, out, LEN);
        got = 0;
        memset(in, 0, LEN);
        while (rc == (int) LEN && got < LEN) {
                ssize_t n = read(c, in + got, LEN - got);

                if (n <= 0)
                        break;
                got += (size_t) n;
        }
        if (rc != (int) LEN || got != LEN || memcmp(in, out, LEN) != 0) {
                printf("io_uring SEND: %d, read %zu bytes, %s\n", rc, got, "wrong");
                return 1;
        }
        printf("io_uring RECV and SEND: 64 KiB each way, every byte right\n");
        return 0;
}
