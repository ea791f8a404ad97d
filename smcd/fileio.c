/* SPDX-License-Identifier: LGPL-2.1-or-later */

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fileio.h"

int read_regular_file(const char *path, size_t max, char **ret, size_t *ret_len) {
        struct stat st;
        size_t len = 0;
        char *buf;
        int fd, r = 0;

        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        if (fd < 0)
                return -errno;
        if (fstat(fd, &st) < 0) {
                r = -errno;
                close(fd);
                return r;
        }
        if (!S_ISREG(st.st_mode)) {
                close(fd);
                return -EINVAL;
        }
        buf = malloc(max + 2); /* + the byte beyond the limit, + NUL */
        if (!buf) {
                close(fd);
                return -ENOMEM;
        }
        for (;;) {
                ssize_t n = read(fd, buf + len, max + 1 - len);

                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        r = -errno;
                        break;
                }
                if (n == 0)
                        break;
                len += (size_t) n;
                if (len > max) {
                        r = -EFBIG;
                        break;
                }
        }
        close(fd);
        if (r < 0) {
                free(buf);
                return r;
        }
        buf[len] = 0;
        *ret = buf;
        if (ret_len)
                *ret_len = len;
        return 0;
}
