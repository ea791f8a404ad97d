/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Helpers of the fuzz targets (fuzz.h). */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <unistd.h>

#include "fuzz.h"

uint8_t *fuzz_exact_copy(const void *p, size_t n) {
        uint8_t *c = malloc(n ? n : 1);

        if (!c)
                abort();
        if (n)
                memcpy(c, p, n);
        return c;
}

char *fuzz_cstring(const void *p, size_t n) {
        char *c = malloc(n + 1);

        if (!c)
                abort();
        if (n)
                memcpy(c, p, n);
        c[n] = 0;
        return c;
}

static char tmpdir[PATH_MAX];

static void remove_tmpdir(void) {
        if (!tmpdir[0])
                return;
        fuzz_clean_tmpdir();
        (void) rmdir(tmpdir);
}

const char *fuzz_tmpdir(void) {
        const char *base;

        if (tmpdir[0])
                return tmpdir;
        base = getenv("TMPDIR");
        if (!base || base[0] != '/')
                base = "/tmp";
        if ((size_t) snprintf(tmpdir, sizeof(tmpdir), "%s/smcd-fuzz-XXXXXX", base) >= sizeof(tmpdir) ||
            !mkdtemp(tmpdir)) {
                perror("fuzz: mkdtemp");
                abort();
        }
        atexit(remove_tmpdir);
        return tmpdir;
}

const char *fuzz_write_file(const char *name, const void *p, size_t n) {
        static char path[PATH_MAX];
        const uint8_t *b = p;
        int fd;

        snprintf(path, sizeof(path), "%s/%s", fuzz_tmpdir(), name);
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0) {
                perror("fuzz: open");
                abort();
        }
        while (n > 0) {
                ssize_t k = write(fd, b, n);

                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0) {
                        perror("fuzz: write");
                        abort();
                }
                b += k;
                n -= (size_t) k;
        }
        close(fd);
        return path;
}

void fuzz_clean_tmpdir(void) {
        DIR *d = opendir(fuzz_tmpdir());
        struct dirent *de;

        if (!d)
                return;
        while ((de = readdir(d)))
                if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
                        (void) unlinkat(dirfd(d), de->d_name, 0);
        closedir(d);
}
