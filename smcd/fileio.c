/* SPDX-License-Identifier: LGPL-2.1-or-later */

#include <ctype.h>
#include <errno.h>
#include <dirent.h>
#include <stdbool.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
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

static int write_all(int fd, const char *p, size_t n) {
        while (n > 0) {
                ssize_t k = write(fd, p, n);

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

int write_file_atomic(const char *path, const void *data, size_t len, mode_t mode) {
        char buf[PATH_MAX], tmp[PATH_MAX + 16];
        const char *dir;
        int fd, dfd, r;

        if (!path || !*path)
                return -EINVAL;
        if ((size_t) snprintf(tmp, sizeof(tmp), "%s.tmp-XXXXXX", path) >= sizeof(tmp) ||
            (size_t) snprintf(buf, sizeof(buf), "%s", path) >= sizeof(buf))
                return -ENAMETOOLONG;
        dir = dirname(buf);
        r = mkdir_p(dir, 0755);
        if (r < 0)
                return r;
        /* opened before the rename: after it, only the fsync itself can fail */
        dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0)
                return -errno;
        fd = mkostemp(tmp, O_CLOEXEC);
        if (fd < 0) {
                r = -errno;
                close(dfd);
                return r;
        }
        r = write_all(fd, data, len);
        if (r == 0 && fchmod(fd, mode) < 0)
                r = -errno;
        if (r == 0 && fsync(fd) < 0)
                r = -errno;
        if (close(fd) < 0 && r == 0)
                r = -errno;
        if (r == 0 && rename(tmp, path) < 0)
                r = -errno;
        if (r < 0) {
                (void) unlink(tmp);
                close(dfd);
                return r;
        }
        r = fsync(dfd) < 0 ? -errno : 0;
        close(dfd);
        return r;
}

/* Whether a string value anywhere in @o holds a NUL: C code would see it cut
 * short there, so such a file is taken as corrupt. */
static bool has_nul_string(json_object *o) {
        switch (json_object_get_type(o)) {
        case json_type_string:
                return strlen(json_object_get_string(o)) != (size_t) json_object_get_string_len(o);
        case json_type_array:
                for (size_t i = 0; i < json_object_array_length(o); i++)
                        if (has_nul_string(json_object_array_get_idx(o, i)))
                                return true;
                return false;
        case json_type_object: {
                json_object_object_foreach(o, k, v) {
                        (void) k; /* keys are C strings in json-c */
                        if (has_nul_string(v))
                                return true;
                }
                return false;
        }
        default:
                return false;
        }
}

/* The members of every object in @o, nested ones too. */
static size_t count_members(json_object *o) {
        size_t n = 0;

        if (json_object_is_type(o, json_type_array)) {
                for (size_t i = 0; i < json_object_array_length(o); i++)
                        n += count_members(json_object_array_get_idx(o, i));
        } else if (json_object_is_type(o, json_type_object)) {
                json_object_object_foreach(o, k, v) {
                        (void) k;
                        n += 1 + count_members(v);
                }
        }
        return n;
}

/* The ':' of text @text that json-c parsed, outside its strings ("..." or '...') and
 * comments (json-c takes both forms unless strict): one per object member written.
 * json-c keeps the last of a key given twice in an object, silently: fewer members
 * parsed than written means a key given twice. */
static size_t count_colons(const char *text, size_t len) {
        char quote = 0;
        size_t n = 0;

        for (size_t i = 0; i < len; i++) {
                if (quote) {
                        if (text[i] == '\\')
                                i++;
                        else if (text[i] == quote)
                                quote = 0;
                } else if (text[i] == '"' || text[i] == '\'')
                        quote = text[i];
                else if (text[i] == '/' && i + 1 < len && text[i + 1] == '*') {
                        const char *e = memmem(text + i + 2, len - i - 2, "*/", 2);
                        i = e ? (size_t) (e - text) + 1 : len;
                } else if (text[i] == '/' && i + 1 < len && text[i + 1] == '/') {
                        const char *e = memchr(text + i, '\n', len - i);
                        i = e ? (size_t) (e - text) : len;
                } else if (text[i] == ':')
                        n++;
        }
        return n;
}

int read_json_file(const char *path, size_t max, json_object **ret, char *err, size_t errlen) {
        enum json_tokener_error jerr;
        json_tokener *tok;
        json_object *root;
        char *text = NULL;
        size_t len, used;
        int r;

        r = read_regular_file(path, max, &text, &len);
        if (r == -EFBIG) {
                snprintf(err, errlen, "larger than %zu bytes", max);
                return -EBADMSG;
        }
        if (r < 0)
                return r;
        if (strlen(text) != len) {
                free(text);
                snprintf(err, errlen, "not valid JSON (a NUL byte)");
                return -EBADMSG;
        }
        tok = json_tokener_new();
        if (!tok) {
                free(text);
                return -ENOMEM;
        }
        root = json_tokener_parse_ex(tok, text, (int) len);
        jerr = json_tokener_get_error(tok);
        used = json_tokener_get_parse_end(tok);
        json_tokener_free(tok);
        if (!root && jerr == json_tokener_success) {
                free(text);
                snprintf(err, errlen, "not a JSON object (null)");
                return -EBADMSG;
        }
        if (!root || jerr != json_tokener_success) {
                snprintf(err, errlen, "not valid JSON (%s)",
                         root || jerr == json_tokener_continue ? "truncated" : json_tokener_error_desc(jerr));
                json_object_put(root);
                free(text);
                return -EBADMSG;
        }
        for (const char *p = text + used; *p; p++)
                if (!isspace((unsigned char) *p)) {
                        json_object_put(root);
                        free(text);
                        snprintf(err, errlen, "not valid JSON (trailing data)");
                        return -EBADMSG;
                }
        if (count_colons(text, used) != count_members(root)) {
                json_object_put(root);
                free(text);
                snprintf(err, errlen, "a key given twice in one object");
                return -EBADMSG;
        }
        free(text);
        if (has_nul_string(root)) {
                json_object_put(root);
                snprintf(err, errlen, "a string with a NUL character (\\u0000)");
                return -EBADMSG;
        }
        *ret = root;
        return 0;
}

int move_aside_corrupt(const char *path, char *aside, size_t len) {
        long long now = (long long) time(NULL);

        /* never over an earlier one: <path>.corrupt-<time>, then -<time>.1 ... */
        for (unsigned i = 0; i < 100; i++) {
                int n = i ? snprintf(aside, len, "%s.corrupt-%lld.%u", path, now, i)
                          : snprintf(aside, len, "%s.corrupt-%lld", path, now);

                if (n < 0 || (size_t) n >= len)
                        return -ENAMETOOLONG;
                if (renameat2(AT_FDCWD, path, AT_FDCWD, aside, RENAME_NOREPLACE) == 0)
                        return 0;
                if (errno != EEXIST)
                        return -errno;
        }
        return -EEXIST;
}

int remove_stale_tmp(const char *path) {
        char dir[PATH_MAX], prefix[NAME_MAX + 8];
        const char *base = strrchr(path, '/');
        struct dirent *de;
        size_t plen;
        DIR *d;
        int n = 0;

        if (!base || (size_t) (base - path) >= sizeof(dir))
                return -EINVAL;
        memcpy(dir, path, (size_t) (base - path));
        dir[base - path] = '\0';
        if ((size_t) snprintf(prefix, sizeof(prefix), "%s.tmp-", base + 1) >= sizeof(prefix))
                return -ENAMETOOLONG;
        plen = strlen(prefix);
        d = opendir(dir[0] ? dir : "/");
        if (!d)
                return errno == ENOENT ? 0 : -errno;
        while ((de = readdir(d)))
                /* exactly what write_file_atomic() creates: <name>.tmp-XXXXXX */
                if (strncmp(de->d_name, prefix, plen) == 0 && strlen(de->d_name) == plen + 6 &&
                    unlinkat(dirfd(d), de->d_name, 0) == 0)
                        n++;
        closedir(d);
        return n;
}

int mkdir_p(const char *path, mode_t mode) {
        char *p = strdup(path);
        int r = 0;

        if (!p)
                return -ENOMEM;
        for (char *s = p + 1;; s++) {
                if (*s != '/' && *s != 0)
                        continue;
                char saved = *s;
                *s = 0;
                if (mkdir(p, mode) < 0 && errno != EEXIST) {
                        r = -errno;
                        break;
                }
                *s = saved;
                if (!saved)
                        break;
        }
        free(p);
        return r;
}
