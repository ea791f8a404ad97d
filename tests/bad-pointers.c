/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Bad pointers given to the socket calls the library intercepts: each call with a
 * pointer into the first page (16, and NULL) where the kernel expects an array, a
 * structure, a buffer or a length, on a connected socket with data waiting, on a
 * listener, on an unconnected socket and on an AF_UNIX socket (the preload looks into
 * the messages of every sendmsg for SCM_RIGHTS). Each call runs in a forked child, so
 * that a crash is one line. Prints a transcript ("call -> result") to compare with
 * the same program over TCP, line by line (test-smcrun-apps.sh); on stderr, whether
 * the connection is SMC-D.
 *
 * Under smcrun a pointer 16 crashed writev, readv, sendmsg, recvmsg, sendmmsg,
 * recvmmsg, getsockopt and getpeername with SIGSEGV, where TCP returns EFAULT; NULL
 * arrays gave EINVAL. libsmcproto(3) promises the kernel's EFAULT for pointers in the
 * first page.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#define CALL(name, expr)                                                                           \
        do {                                                                                       \
                pid_t p_ = fork();                                                                 \
                int st_;                                                                           \
                if (p_ == 0) {                                                                     \
                        long r_;                                                                   \
                        errno = 0;                                                                 \
                        r_ = (long) (expr);                                                        \
                        printf("%-44s %-5s -> %ld %s\n", name, what, r_ < 0 ? -1 : r_,             \
                               r_ < 0 ? strerrorname_np(errno) : "");                               \
                        fflush(stdout);                                                            \
                        _exit(0);                                                                  \
                }                                                                                  \
                if (p_ < 0 || waitpid(p_, &st_, 0) < 0) {                                          \
                        perror("fork");                                                            \
                        exit(2);                                                                   \
                }                                                                                  \
                if (WIFSIGNALED(st_))                                                              \
                        printf("%-44s %-5s -> killed by signal %d\n", name, what, WTERMSIG(st_));  \
        } while (0)

static void calls(int s, int lst, int fresh, int ux, int file, void *bad, const char *what) {
        char buf[64];
        int v = 0;
        socklen_t l = sizeof(v), sl = sizeof(struct sockaddr_in);
        struct sockaddr_in sa;
        struct iovec iov_badbase = { bad, 5 }, iov_ok = { buf, 5 };
        struct msghdr m_badiov = { .msg_iov = bad, .msg_iovlen = 1 };
        struct msghdr m_badbase = { .msg_iov = &iov_badbase, .msg_iovlen = 1 };
        struct msghdr m_badname = { .msg_name = bad, .msg_namelen = sizeof(sa), .msg_iov = &iov_ok, .msg_iovlen = 1 };
        struct msghdr m_badctl = { .msg_iov = &iov_ok, .msg_iovlen = 1, .msg_control = bad, .msg_controllen = 20 };
        struct mmsghdr mm_ok[2] = { { .msg_hdr = { .msg_iov = &iov_ok, .msg_iovlen = 1 } },
                                    { .msg_hdr = { .msg_iov = &iov_ok, .msg_iovlen = 1 } } };
        struct mmsghdr mm_badiov[2] = { { .msg_hdr = m_badiov }, { .msg_hdr = m_badiov } };
        int ep = epoll_create1(EPOLL_CLOEXEC);

        memset(buf, 'x', sizeof(buf));
        /* sends (the connection's) */
        CALL("send(buf)", send(s, bad, 5, MSG_DONTWAIT));
        CALL("write(buf)", write(s, bad, 5));
        CALL("writev(iov array)", writev(s, bad, 1));
        CALL("writev(iov_base)", writev(s, &iov_badbase, 1));
        CALL("sendmsg(msghdr)", sendmsg(s, bad, MSG_DONTWAIT));
        CALL("sendmsg(msg_iov)", sendmsg(s, &m_badiov, MSG_DONTWAIT));
        CALL("sendmsg(iov_base)", sendmsg(s, &m_badbase, MSG_DONTWAIT));
        CALL("sendmsg(msg_control)", sendmsg(s, &m_badctl, MSG_DONTWAIT));
        CALL("sendmsg(msg_name)", sendmsg(s, &m_badname, MSG_DONTWAIT));
        CALL("sendto(dest_addr)", sendto(s, buf, 5, MSG_DONTWAIT, bad, sizeof(sa)));
        CALL("sendmmsg(vec)", sendmmsg(s, bad, 2, MSG_DONTWAIT));
        CALL("sendmmsg(msg_iov)", sendmmsg(s, mm_badiov, 2, MSG_DONTWAIT));
        CALL("sendfile(offset)", sendfile(s, file, bad, 5));
        /* receives (data is waiting) */
        CALL("recv(buf)", recv(s, bad, 5, MSG_DONTWAIT));
        CALL("read(buf)", read(s, bad, 5));
        CALL("readv(iov array)", readv(s, bad, 1));
        CALL("readv(iov_base)", readv(s, &iov_badbase, 1));
        CALL("recvmsg(msghdr)", recvmsg(s, bad, MSG_DONTWAIT));
        CALL("recvmsg(msg_iov)", recvmsg(s, &m_badiov, MSG_DONTWAIT));
        CALL("recvmsg(iov_base)", recvmsg(s, &m_badbase, MSG_DONTWAIT));
        CALL("recvmmsg(vec)", recvmmsg(s, bad, 2, MSG_DONTWAIT, NULL));
        CALL("recvmmsg(msg_iov)", recvmmsg(s, mm_badiov, 2, MSG_DONTWAIT, NULL));
        CALL("recvmmsg(timeout)", recvmmsg(s, mm_ok, 2, MSG_DONTWAIT, bad));
        CALL("recv(buf, MSG_PEEK)", recv(s, bad, 5, MSG_DONTWAIT | MSG_PEEK));
        CALL("recvmsg(msg_name)", recvmsg(s, &m_badname, MSG_DONTWAIT | MSG_PEEK));
        CALL("recvmsg(msg_control)", recvmsg(s, &m_badctl, MSG_DONTWAIT | MSG_PEEK));
        CALL("recvfrom(src_addr)", recvfrom(s, buf, 1, MSG_DONTWAIT | MSG_PEEK, bad, &sl));
        CALL("recvfrom(addrlen)", recvfrom(s, buf, 1, MSG_DONTWAIT | MSG_PEEK, (struct sockaddr *) &sa, bad));
        /* options, names, ioctl */
        CALL("getsockopt(optlen)", getsockopt(s, SOL_SOCKET, SO_ERROR, &v, bad));
        CALL("getsockopt(optval)", getsockopt(s, SOL_SOCKET, SO_ERROR, bad, &l));
        CALL("getsockopt(TCP_INFO optval)", getsockopt(s, IPPROTO_TCP, TCP_INFO, bad, &l));
        CALL("getsockopt(TCP_NODELAY optlen)", getsockopt(s, IPPROTO_TCP, TCP_NODELAY, &v, bad));
        CALL("setsockopt(SO_KEEPALIVE optval)", setsockopt(s, SOL_SOCKET, SO_KEEPALIVE, bad, sizeof(int)));
        CALL("setsockopt(TCP_NODELAY optval)", setsockopt(s, IPPROTO_TCP, TCP_NODELAY, bad, sizeof(int)));
        CALL("setsockopt(TCP_CORK optval)", setsockopt(s, IPPROTO_TCP, TCP_CORK, bad, sizeof(int)));
        CALL("getpeername(addr, len)", getpeername(s, bad, bad));
        CALL("getpeername(len)", getpeername(s, (struct sockaddr *) &sa, bad));
        CALL("getpeername(addr)", getpeername(s, bad, &sl));
        CALL("getsockname(len)", getsockname(s, (struct sockaddr *) &sa, bad));
        CALL("getsockname(addr)", getsockname(s, bad, &sl));
        CALL("ioctl(FIONREAD)", ioctl(s, FIONREAD, bad));
        CALL("ioctl(FIONBIO)", ioctl(s, FIONBIO, bad));
        CALL("ioctl(SIOCOUTQ)", ioctl(s, TIOCOUTQ, bad));
        CALL("epoll_ctl(event)", epoll_ctl(ep, EPOLL_CTL_ADD, s, bad));
        CALL("poll(fds)", poll(bad, 1, 0));
        {
                struct timeval tv = { 0, 1000 };
                fd_set rd;

                FD_ZERO(&rd);
                FD_SET(s, &rd);
                CALL("select(readfds)", select(s + 1, bad, &rd, NULL, &tv));
                if (bad) { /* (NULL: no timeout) */
                        CALL("select(timeout)", select(s + 1, &rd, NULL, NULL, bad));
                        CALL("pselect(timeout)", pselect(s + 1, &rd, NULL, NULL, bad, NULL));
                }
        }
        /* the listener (nothing queued) and an unconnected socket */
        CALL("accept(listener addr, len)", accept(lst, bad, bad));
        CALL("getsockname(listener len)", getsockname(lst, (struct sockaddr *) &sa, bad));
        CALL("getsockopt(listener optlen)", getsockopt(lst, SOL_SOCKET, SO_ERROR, &v, bad));
        CALL("epoll_ctl(listener event)", epoll_ctl(ep, EPOLL_CTL_ADD, lst, bad));
        CALL("connect(addr)", connect(fresh, bad, sizeof(sa)));
        CALL("bind(addr)", bind(fresh, bad, sizeof(sa)));
        CALL("getsockopt(unconnected optlen)", getsockopt(fresh, SOL_SOCKET, SO_ERROR, &v, bad));
        CALL("setsockopt(unconnected TCP_NODELAY)", setsockopt(fresh, IPPROTO_TCP, TCP_NODELAY, bad, sizeof(int)));
        /* an AF_UNIX socket (not the library's) */
        CALL("sendmsg(unix msghdr)", sendmsg(ux, bad, MSG_DONTWAIT));
        CALL("sendmsg(unix msg_control)", sendmsg(ux, &m_badctl, MSG_DONTWAIT));
        CALL("sendmmsg(unix vec)", sendmmsg(ux, bad, 2, MSG_DONTWAIT));
        CALL("recvmsg(unix msghdr)", recvmsg(ux, bad, MSG_DONTWAIT));
        CALL("recvmmsg(unix vec)", recvmmsg(ux, bad, 2, MSG_DONTWAIT, NULL));
        /* last: the rest of the data, as it is (nothing was lost) */
        CALL("recv(rest)", recv(s, buf, sizeof(buf), MSG_DONTWAIT));
        close(ep);
}

int main(void) {
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t al = sizeof(a);
        int lst, c, srv, lst2, fresh, ux[2], file, v = 0;
        socklen_t vl = sizeof(v);
        char tmpl[] = "/tmp/bad-pointers-XXXXXX";

        setvbuf(stdout, NULL, _IOLBF, 0);
        lst = socket(AF_INET, SOCK_STREAM, 0);
        if (lst < 0 || bind(lst, (struct sockaddr *) &a, sizeof(a)) < 0 || listen(lst, 4) < 0 ||
            getsockname(lst, (struct sockaddr *) &a, &al) < 0) {
                perror("listener");
                return 2;
        }
        c = socket(AF_INET, SOCK_STREAM, 0);
        if (c < 0 || connect(c, (struct sockaddr *) &a, sizeof(a)) < 0 || (srv = accept(lst, NULL, NULL)) < 0) {
                perror("connection");
                return 2;
        }
        if (write(srv, "0123456789abcdefghijklmnopqrstuvwxyz", 36) != 36) {
                perror("write");
                return 2;
        }
        usleep(100000);
        lst2 = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        a.sin_port = 0;
        if (lst2 < 0 || bind(lst2, (struct sockaddr *) &a, sizeof(a)) < 0 || listen(lst2, 4) < 0) {
                perror("listener 2");
                return 2;
        }
        fresh = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        file = mkstemp(tmpl);
        if (fresh < 0 || socketpair(AF_UNIX, SOCK_STREAM, 0, ux) < 0 || file < 0 || write(file, "hello", 5) != 5) {
                perror("setup");
                return 2;
        }
        unlink(tmpl);
        (void) fcntl(c, F_SETFL, O_NONBLOCK);
        if (getsockopt(c, 286, 0x5301, &v, &vl) == 0)
                fprintf(stderr, "bad-pointers: the connection's mode %d (1: SMC-D)\n", v);
        calls(c, lst2, fresh, ux[0], file, (void *) 16, "16");
        calls(c, lst2, fresh, ux[0], file, NULL, "NULL");
        return 0;
}
