/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* smcd's tunables and their state file. See tunables.h. */

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dmb.h"
#include "log.h"
#include "fileio.h"
#include "tunables.h"

#define STATE_MAX_SIZE (64u << 10) /* bytes of a state file */

const char *const smcd_tunable_keys[] = {
        "buf_clear",
        "inline",
        "max_buf_per_uid",
        "max_clients_per_uid",
        "max_conns_per_uid",
        "rmem",
        NULL
};

static const char *const inline_names[] = {
        [SMCD_INLINE_AUTO] = "auto",
        [SMCD_INLINE_ON] = "on",
        [SMCD_INLINE_OFF] = "off",
};

static int set_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int set_err(char *err, size_t errlen, const char *fmt, ...) {
        va_list ap;

        if (err && errlen) {
                va_start(ap, fmt);
                vsnprintf(err, errlen, fmt, ap);
                va_end(ap);
        }
        return -EINVAL;
}

/* Decimal digits only (no sign, no space), then an optional K/M/G/T suffix (powers of
 * 1024; "KiB"/"KB" too) if @size. */
static int parse_number(const char *s, bool size, uint64_t *ret) {
        unsigned long long v;
        uint64_t mult = 1;
        char *end;

        if (!isdigit((unsigned char) *s))
                return -EINVAL;
        errno = 0;
        v = strtoull(s, &end, 10);
        if (errno)
                return -errno;
        if (size) {
                switch (toupper((unsigned char) *end)) {
                case 'K': mult = 1ULL << 10; end++; break;
                case 'M': mult = 1ULL << 20; end++; break;
                case 'G': mult = 1ULL << 30; end++; break;
                case 'T': mult = 1ULL << 40; end++; break;
                default: break;
                }
                if (mult > 1 && (strcmp(end, "iB") == 0 || strcmp(end, "B") == 0))
                        end += strlen(end);
        }
        if (*end)
                return -EINVAL;
        if (v > UINT64_MAX / mult)
                return -ERANGE;
        *ret = v * mult;
        return 0;
}

static bool key_known(const char *key) {
        for (size_t i = 0; smcd_tunable_keys[i]; i++)
                if (strcmp(smcd_tunable_keys[i], key) == 0)
                        return true;
        return false;
}

int tunable_parse(ManagerConfig *cfg, const char *key, const char *value, char *err, size_t errlen) {
        uint64_t v;

        if (!key_known(key))
                return set_err(err, errlen, "unknown tunable \"%s\" (known: buf_clear, inline, max_buf_per_uid, "
                               "max_clients_per_uid, max_conns_per_uid, rmem)", key);
        if (strcmp(key, "buf_clear") == 0) {
                if (strcmp(value, "release") == 0)
                        cfg->buf_clear = SMC_POOL_CLEAR_RELEASE;
                else if (strcmp(value, "create") == 0)
                        cfg->buf_clear = SMC_POOL_CLEAR_CREATE;
                else
                        return set_err(err, errlen, "buf_clear: expected release or create, not \"%s\"", value);
                return 0;
        }
        if (strcmp(key, "inline") == 0) {
                for (unsigned i = 0; i < sizeof(inline_names) / sizeof(inline_names[0]); i++)
                        if (strcmp(value, inline_names[i]) == 0) {
                                cfg->inline_mode = (enum smcd_inline) i;
                                return 0;
                        }
                return set_err(err, errlen, "inline: expected auto, on or off, not \"%s\"", value);
        }
        if (strcmp(key, "max_buf_per_uid") == 0) {
                if (parse_number(value, true, &v) < 0)
                        return set_err(err, errlen, "max_buf_per_uid: expected bytes with an optional K/M/G "
                                       "suffix (0 = unlimited), not \"%s\"", value);
                cfg->max_buf_per_uid = v;
                return 0;
        }
        if (strcmp(key, "max_conns_per_uid") == 0 || strcmp(key, "max_clients_per_uid") == 0) {
                if (parse_number(value, false, &v) < 0)
                        return set_err(err, errlen, "%s: expected a number (0 = unlimited), not \"%s\"", key, value);
                if (key[4] == 'c' && key[5] == 'o')
                        cfg->max_conns_per_uid = v;
                else
                        cfg->max_clients_per_uid = v;
                return 0;
        }
        /* rmem */
        if (parse_number(value, true, &v) < 0 || v < SMC_DMB_MIN_SIZE || v > SMC_DMB_MAX_SIZE)
                return set_err(err, errlen, "rmem: expected bytes 16K..1M (K/M suffixes), not \"%s\"", value);
        cfg->rmem = smc_dmb_class_size(smc_dmb_class(v));
        return 0;
}

int tunable_format(const ManagerConfig *cfg, const char *key, char **ret) {
        int r;

        if (strcmp(key, "buf_clear") == 0)
                r = asprintf(ret, "%s", cfg->buf_clear == SMC_POOL_CLEAR_CREATE ? "create" : "release");
        else if (strcmp(key, "inline") == 0)
                r = asprintf(ret, "%s", (unsigned) cfg->inline_mode <= SMCD_INLINE_OFF ?
                             inline_names[cfg->inline_mode] : "auto");
        else if (strcmp(key, "max_buf_per_uid") == 0)
                r = asprintf(ret, "%" PRIu64, cfg->max_buf_per_uid);
        else if (strcmp(key, "max_conns_per_uid") == 0)
                r = asprintf(ret, "%" PRIu64, cfg->max_conns_per_uid);
        else if (strcmp(key, "max_clients_per_uid") == 0)
                r = asprintf(ret, "%" PRIu64, cfg->max_clients_per_uid);
        else if (strcmp(key, "rmem") == 0)
                r = asprintf(ret, "%" PRIu32, cfg->rmem ? cfg->rmem : SMC_DMB_DEFAULT_SIZE);
        else
                return -EINVAL;
        return r < 0 ? -ENOMEM : 0;
}

json_object *tunables_to_json(const ManagerConfig *cfg) {
        json_object *o = json_object_new_object();

        if (!o)
                return NULL;
        for (size_t i = 0; smcd_tunable_keys[i]; i++) {
                json_object *s;
                char *v;

                if (tunable_format(cfg, smcd_tunable_keys[i], &v) < 0) {
                        json_object_put(o);
                        return NULL;
                }
                s = json_object_new_string(v);
                free(v);
                if (!s || json_object_object_add(o, smcd_tunable_keys[i], s) < 0) {
                        json_object_put(s);
                        json_object_put(o);
                        return NULL;
                }
        }
        return o;
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

/* The directory part of @path in @buf. */
static const char *dir_of(const char *path, char *buf, size_t len) {
        snprintf(buf, len, "%s", path);
        return dirname(buf);
}

int tunables_save(const ManagerConfig *cfg, const char *path) {
        char dir[PATH_MAX], tmp[PATH_MAX + 16];
        json_object *o;
        const char *text;
        int fd, dfd, r;

        if (!path || !*path)
                return -EINVAL;
        if ((size_t) snprintf(tmp, sizeof(tmp), "%s.tmp-XXXXXX", path) >= sizeof(tmp))
                return -ENAMETOOLONG;
        dir_of(path, dir, sizeof(dir));
        if (mkdir(dir, 0755) < 0 && errno != EEXIST)
                return -errno;
        o = tunables_to_json(cfg);
        if (!o)
                return -ENOMEM;
        text = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE);
        fd = mkostemp(tmp, O_CLOEXEC);
        if (fd < 0) {
                r = -errno;
                json_object_put(o);
                return r;
        }
        r = write_all(fd, text, strlen(text));
        if (r == 0)
                r = write_all(fd, "\n", 1);
        json_object_put(o);
        if (r == 0 && fchmod(fd, 0644) < 0)
                r = -errno;
        if (r == 0 && fsync(fd) < 0)
                r = -errno;
        if (close(fd) < 0 && r == 0)
                r = -errno;
        if (r == 0 && rename(tmp, path) < 0)
                r = -errno;
        if (r < 0) {
                (void) unlink(tmp);
                return r;
        }
        /* the rename itself must survive a crash too */
        dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0)
                return -errno;
        r = fsync(dfd) < 0 ? -errno : 0;
        close(dfd);
        return r;
}

/* Parse the state file text @text onto @cfg. On error returns -EINVAL with a reason in
 * @err; @cfg may be partly changed (the caller works on a copy). */
static int parse_state(ManagerConfig *cfg, const char *text, char *err, size_t errlen) {
        enum json_tokener_error jerr;
        json_tokener *tok;
        json_object *root;
        size_t used;
        int r = 0;

        tok = json_tokener_new();
        if (!tok)
                return -ENOMEM;
        root = json_tokener_parse_ex(tok, text, (int) strlen(text));
        jerr = json_tokener_get_error(tok);
        used = json_tokener_get_parse_end(tok);
        json_tokener_free(tok);
        if (!root || jerr != json_tokener_success) {
                json_object_put(root);
                return set_err(err, errlen, "not valid JSON (%s)",
                               root || jerr == json_tokener_continue ? "truncated" :
                               json_tokener_error_desc(jerr));
        }
        for (const char *p = text + used; *p; p++)
                if (!isspace((unsigned char) *p)) {
                        json_object_put(root);
                        return set_err(err, errlen, "not valid JSON (trailing data)");
                }
        if (!json_object_is_type(root, json_type_object)) {
                json_object_put(root);
                return set_err(err, errlen, "not a JSON object");
        }
        json_object_object_foreach(root, k, v) {
                char e[256];

                if (!json_object_is_type(v, json_type_string)) {
                        r = set_err(err, errlen, "value of \"%s\" is not a string", k);
                        break;
                }
                r = tunable_parse(cfg, k, json_object_get_string(v), e, sizeof(e));
                if (r < 0) {
                        set_err(err, errlen, "%s", e);
                        break;
                }
        }
        json_object_put(root);
        return r;
}

int tunables_load(ManagerConfig *cfg, const char *path) {
        ManagerConfig tmp = *cfg;
        char err[300], aside[PATH_MAX + 48];
        char *text = NULL;
        int r;

        if (!path || !*path)
                return 0;
        r = read_regular_file(path, STATE_MAX_SIZE, &text, NULL);
        if (r == -ENOENT)
                return 0;
        if (r == -EFBIG)
                snprintf(err, sizeof(err), "larger than %u bytes", STATE_MAX_SIZE);
        else if (r < 0)
                return log_error_errno(r, "Cannot read state file %s: %m; using the default tunables.", path);
        else {
                r = parse_state(&tmp, text, err, sizeof(err));
                free(text);
                if (r == -ENOMEM)
                        return log_error_errno(r, "Out of memory.");
        }
        if (r == 0) {
                *cfg = tmp;
                log_debug("Tunables loaded from %s.", path);
                return 0;
        }
        snprintf(aside, sizeof(aside), "%s.corrupt-%lld", path, (long long) time(NULL));
        if (rename(path, aside) < 0)
                log_error_errno(errno, "Corrupt state file %s (%s): starting with the default tunables; "
                                "cannot move it aside: %m", path, err);
        else
                log_error("Corrupt state file %s (%s): starting with the default tunables; moved it to %s.",
                          path, err, aside);
        return 0;
}

const char *tunables_default_path(char *buf, size_t len) {
        const char *d = getenv("STATE_DIRECTORY");

        if (d && d[0] == '/') {
                size_t n = strcspn(d, ":");
                snprintf(buf, len, "%.*s/tunables.json", (int) n, d);
        } else
                snprintf(buf, len, "%s", SMCD_DEFAULT_STATE_FILE);
        return buf;
}
