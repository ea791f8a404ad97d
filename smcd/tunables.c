/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* smcd's tunables and their state file. See tunables.h. */

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dmb.h"
#include "log.h"
#include "fileio.h"
#include "tunables.h"

#define STATE_MAX_SIZE (64u << 10) /* bytes of a state file */

/* ---- the table ---- */

enum kind {
        KIND_ENUM,   /* one of names[], stored as the index */
        KIND_NUMBER, /* decimal digits, min..max */
        KIND_BYTES,  /* decimal digits with an optional K/M/G/T suffix, min..max */
        KIND_CLASS,  /* bytes as KIND_BYTES, min..max, rounded up to a DMB size class */
        KIND_UEIDS,  /* ManagerConfig.ueids / n_ueids: a comma separated list of User EIDs */
};

typedef struct Tunable {
        const char *key;
        enum kind kind;
        size_t offset, size;      /* the field in ManagerConfig: 4 or 8 bytes, unsigned */
        uint64_t min, max, def;
        const char *const *names; /* KIND_ENUM: by value, NULL terminated */
        const char *expect;       /* "expected ..." in the error message */
        const char *metavar, *help; /* smcd --help */
} Tunable;

#define FIELD(f) offsetof(ManagerConfig, f), sizeof(((ManagerConfig *) 0)->f)

static const char *const buf_clear_names[] = {
        [SMC_POOL_CLEAR_RELEASE] = "release",
        [SMC_POOL_CLEAR_CREATE] = "create",
        NULL
};

static const char *const inline_names[] = {
        [SMCD_INLINE_AUTO] = "auto",
        [SMCD_INLINE_ON] = "on",
        [SMCD_INLINE_OFF] = "off",
        NULL
};

static const char *const cq_poll_names[] = {
        [SMCD_CQ_POLL_EVENT] = "event",
        [SMCD_CQ_POLL_THREAD] = "thread",
        NULL
};

_Static_assert(sizeof(enum smc_pool_clear) == 4 && sizeof(enum smcd_inline) == 4, "enum fields are 4 bytes");
_Static_assert(sizeof(enum smcd_cq_poll) == 4, "enum fields are 4 bytes");

/* In display order (alphabetical). The ranges of busy_poll and autocork_size are the
 * control protocol's (ctl-proto.h), which carries them to the clients. */
static const Tunable tunables[] = {
        { "autocork_size", KIND_BYTES, FIELD(autocork_size), 1024, SMC_CTL_AUTOCORK_MAX, 64 << 10, NULL,
          "bytes 1K..1M (K/M suffixes)",
          "BYTES", "A corked batch is sent at this size (1K..1M, default 64K)" },
        { "buf_clear", KIND_ENUM, FIELD(buf_clear), 0, 1, SMC_POOL_CLEAR_RELEASE, buf_clear_names,
          "release or create",
          "release|create", "When buffers are zeroed (default release)" },
        { "busy_poll", KIND_NUMBER, FIELD(busy_poll_us), 0, SMC_CTL_BUSY_POLL_MAX_US, 50, NULL,
          "microseconds 0..10000",
          "USEC", "Clients spin this long before sleeping (0..10000, default 50)" },
        { "cq_poll", KIND_ENUM, FIELD(cq_poll), 0, 1, SMCD_CQ_POLL_EVENT, cq_poll_names,
          "event or thread",
          "event|thread", "SMC-R completions: event loop or a polling thread (default event)" },
        { "inline", KIND_ENUM, FIELD(inline_mode), 0, 2, SMCD_INLINE_AUTO, inline_names,
          "auto, on or off",
          "auto|on|off", "SMC-R inline CDC sends (default auto)" },
        { "max_buf_per_uid", KIND_BYTES, FIELD(max_buf_per_uid), 0, UINT64_MAX, 0, NULL,
          "bytes with an optional K/M/G/T suffix (0 = unlimited)",
          "BYTES", "DMB bytes per uid, K/M/G/T suffixes (0 = unlimited)" },
        { "max_clients_per_uid", KIND_NUMBER, FIELD(max_clients_per_uid), 0, UINT64_MAX, 256, NULL,
          "a number (0 = unlimited)",
          "N", "Control connections per uid (default 256, 0 = unlimited)" },
        { "max_conns_per_lgr", KIND_NUMBER, FIELD(max_conns_per_lgr), 16, 255, 255, NULL,
          "a number 16..255",
          "N", "Connections per SMC-R link group (16..255, default 255)" },
        { "max_conns_per_uid", KIND_NUMBER, FIELD(max_conns_per_uid), 0, UINT64_MAX, 0, NULL,
          "a number (0 = unlimited)",
          "N", "Connection endpoints per uid (0 = unlimited)" },
        { "max_handshakes_per_uid", KIND_NUMBER, FIELD(max_handshakes_per_uid), 0, 1000000, 0, NULL,
          "handshakes per second 0..1000000 (0 = unlimited)",
          "N", "Connects per second per uid (0 = unlimited)" },
        { "max_links_per_lgr", KIND_NUMBER, FIELD(max_links_per_lgr), 1, 2, 2, NULL,
          "a number 1..2",
          "N", "Links per SMC-R link group (1..2, default 2)" },
        { "max_listeners_per_uid", KIND_NUMBER, FIELD(max_listeners_per_uid), 0, UINT64_MAX, 1024, NULL,
          "a number (0 = unlimited)",
          "N", "SMC listeners per uid (default 1024, 0 = unlimited)" },
        { "rmem", KIND_CLASS, FIELD(rmem), SMC_DMB_MIN_SIZE, SMC_DMB_MAX_SIZE, SMC_DMB_DEFAULT_SIZE, NULL,
          "bytes 16K..1M (K/M suffixes)",
          "BYTES", "RMB size of a socket without SO_RCVBUF (16K..1M, default 128K)" },
        { "short_conn_rate", KIND_NUMBER, FIELD(short_conn_rate), 0, 10000000, 1000, NULL,
          "connections per second 0..10000000 (0 = off)",
          "N", "Short SMC-D connections per second to one listener that send its clients to TCP "
               "for a second (0 = off, default 1000)" },
        { "sndbuf", KIND_CLASS, FIELD(sndbuf), SMC_DMB_MIN_SIZE, SMC_DMB_MAX_SIZE, SMC_DMB_MIN_SIZE, NULL,
          "bytes 16K..1M (K/M suffixes)",
          "BYTES", "An RMB is at least its writer's SO_SNDBUF or this (16K..1M, default 16K)" },
        { "test_link_time", KIND_NUMBER, FIELD(test_link_time), 0, 3600, 30, NULL,
          "seconds 0..3600 (0 = off)",
          "SECONDS", "SMC-R link test interval (0 = off, default 30)" },
        { "ueid", KIND_UEIDS, FIELD(ueids), 0, SMCD_MAX_UEIDS, 1, NULL,
          "up to 4 comma separated User EIDs of 1..32 characters A-Z 0-9 . - (the first A-Z or 0-9), "
          "or \"\" for none",
          "EID[,EID...]", "SMC-R v2 User EIDs (up to 4, default " SMCD_DEFAULT_UEID ")" },
};

#define N_TUNABLES (sizeof(tunables) / sizeof(tunables[0]))

static const Tunable *tunable_find(const char *key) {
        for (size_t i = 0; i < N_TUNABLES; i++)
                if (strcmp(tunables[i].key, key) == 0)
                        return &tunables[i];
        return NULL;
}

static uint64_t field_get(const ManagerConfig *cfg, const Tunable *t) {
        const uint8_t *p = (const uint8_t *) cfg + t->offset;

        if (t->size == sizeof(uint64_t))
                return *(const uint64_t *) p;
        return *(const uint32_t *) p;
}

static void field_set(ManagerConfig *cfg, const Tunable *t, uint64_t v) {
        uint8_t *p = (uint8_t *) cfg + t->offset;

        if (t->size == sizeof(uint64_t))
                *(uint64_t *) p = v;
        else
                *(uint32_t *) p = (uint32_t) v;
}

size_t tunables_count(void) {
        return N_TUNABLES;
}

const char *tunable_key(size_t i) {
        return i < N_TUNABLES ? tunables[i].key : NULL;
}

bool tunable_known(const char *key) {
        return key && tunable_find(key);
}

const char *tunable_help(const char *key, const char **ret_metavar) {
        const Tunable *t = key ? tunable_find(key) : NULL;

        if (!t)
                return NULL;
        if (ret_metavar)
                *ret_metavar = t->metavar;
        return t->help;
}

void tunables_set_defaults(ManagerConfig *cfg) {
        for (size_t i = 0; i < N_TUNABLES; i++)
                if (tunables[i].kind != KIND_UEIDS)
                        field_set(cfg, &tunables[i], tunables[i].def);
        memset(cfg->ueids, 0, sizeof(cfg->ueids));
        memset(cfg->ueids[0], ' ', SMCD_UEID_LEN);
        memcpy(cfg->ueids[0], SMCD_DEFAULT_UEID, strlen(SMCD_DEFAULT_UEID));
        cfg->n_ueids = 1;
}

void tunables_copy(ManagerConfig *dst, const ManagerConfig *src) {
        for (size_t i = 0; i < N_TUNABLES; i++)
                if (tunables[i].kind != KIND_UEIDS)
                        field_set(dst, &tunables[i], field_get(src, &tunables[i]));
        memcpy(dst->ueids, src->ueids, sizeof(dst->ueids));
        dst->n_ueids = src->n_ueids;
}

static int set_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* One User EID of @len bytes at @s (blanks around it already cut) into @out, upper case
 * and blank padded. The kernel's rule (smc_clc_ueid_valid, net/smc/smc_clc.c): 1..32
 * characters A-Z, 0-9, '.' and '-', the first A-Z or 0-9. Lower case (which the kernel
 * refuses) is taken as upper case, for convenience. Returns 0 or -EINVAL. */
static int parse_ueid(const char *s, size_t len, uint8_t out[SMCD_UEID_LEN]) {
        if (len < 1 || len > SMCD_UEID_LEN || !isalnum((unsigned char) s[0]))
                return -EINVAL;
        memset(out, ' ', SMCD_UEID_LEN);
        for (size_t i = 0; i < len; i++) {
                unsigned char c = (unsigned char) s[i];

                if (c >= 0x80 || (!isalnum(c) && c != '.' && c != '-'))
                        return -EINVAL;
                out[i] = (uint8_t) toupper(c);
        }
        return 0;
}

/* "EID[,EID...]" (blanks around each allowed; "" = none) into @cfg's ueids. Nothing is
 * changed on error: -EINVAL with a reason naming @what in @err. */
static int parse_ueids(ManagerConfig *cfg, const char *value, const char *what, const char *expect, char *err,
                       size_t errlen) {
        uint8_t ueids[SMCD_MAX_UEIDS][SMCD_UEID_LEN] = {};
        unsigned n = 0;
        const char *p = value;

        if (*p == 0)
                goto done; /* "" = none; blanks alone are refused below (a typo, not "none") */
        for (;;) {
                const char *e = p + strcspn(p, ",");
                const char *b = p;
                size_t len;

                while (b < e && (*b == ' ' || *b == '\t'))
                        b++;
                len = (size_t) (e - b);
                while (len > 0 && (b[len - 1] == ' ' || b[len - 1] == '\t'))
                        len--;
                if (n == SMCD_MAX_UEIDS)
                        return set_err(err, errlen, "%s: at most %d User EIDs, not \"%s\"", what, SMCD_MAX_UEIDS,
                                       value);
                if (parse_ueid(b, len, ueids[n]) < 0)
                        return set_err(err, errlen, "%s: bad User EID \"%.*s\": expected %s", what, (int) len, b,
                                       expect);
                for (unsigned i = 0; i < n; i++)
                        if (memcmp(ueids[i], ueids[n], SMCD_UEID_LEN) == 0)
                                return set_err(err, errlen, "%s: User EID \"%.*s\" given twice", what, (int) len,
                                               b);
                n++;
                if (*e == 0)
                        break;
                p = e + 1;
        }
done:
        memcpy(cfg->ueids, ueids, sizeof(ueids));
        cfg->n_ueids = n;
        return 0;
}

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
 * 1024; "KiB"/"KB" too, in any case) if @size. */
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
                if (mult > 1 && (strcasecmp(end, "iB") == 0 || strcasecmp(end, "B") == 0))
                        end += strlen(end);
        }
        if (*end)
                return -EINVAL;
        if (v > UINT64_MAX / mult)
                return -ERANGE;
        *ret = v * mult;
        return 0;
}

int tunable_parse_as(ManagerConfig *cfg, const char *key, const char *value, const char *what, char *err,
                     size_t errlen) {
        const Tunable *t = key ? tunable_find(key) : NULL;
        uint64_t v = 0;

        if (!t) {
                char known[512] = "";
                size_t n = 0;

                for (size_t i = 0; i < N_TUNABLES && n < sizeof(known); i++)
                        n += (size_t) snprintf(known + n, sizeof(known) - n, "%s%s", i ? ", " : "", tunables[i].key);
                return set_err(err, errlen, "unknown tunable \"%s\" (known: %s)", key ? key : "", known);
        }
        if (!what)
                what = key;
        if (!value)
                value = "";
        if (t->kind == KIND_UEIDS)
                return parse_ueids(cfg, value, what, t->expect, err, errlen);
        switch (t->kind) {
        case KIND_ENUM:
                for (v = 0; t->names[v]; v++)
                        if (strcmp(value, t->names[v]) == 0)
                                break;
                if (!t->names[v])
                        return set_err(err, errlen, "%s: expected %s, not \"%s\"", what, t->expect, value);
                break;
        case KIND_NUMBER:
        case KIND_BYTES:
        case KIND_CLASS:
                if (parse_number(value, t->kind != KIND_NUMBER, &v) < 0 || v < t->min || v > t->max)
                        return set_err(err, errlen, "%s: expected %s, not \"%s\"", what, t->expect, value);
                if (t->kind == KIND_CLASS)
                        v = smc_dmb_class_size(smc_dmb_class(v));
                break;
        case KIND_UEIDS:
                break;
        }
        field_set(cfg, t, v);
        return 0;
}

int tunable_parse(ManagerConfig *cfg, const char *key, const char *value, char *err, size_t errlen) {
        return tunable_parse_as(cfg, key, value, NULL, err, errlen);
}

int tunable_format(const ManagerConfig *cfg, const char *key, char **ret) {
        const Tunable *t = key ? tunable_find(key) : NULL;
        uint64_t v;
        int r;

        if (!t)
                return -EINVAL;
        if (t->kind == KIND_UEIDS) {
                char buf[SMCD_MAX_UEIDS * (SMCD_UEID_LEN + 1) + 1] = "";
                size_t n = 0;

                for (unsigned i = 0; i < cfg->n_ueids && i < SMCD_MAX_UEIDS; i++) {
                        size_t len = SMCD_UEID_LEN;

                        while (len > 0 && cfg->ueids[i][len - 1] == ' ')
                                len--;
                        n += (size_t) snprintf(buf + n, sizeof(buf) - n, "%s%.*s", i ? "," : "", (int) len,
                                               (const char *) cfg->ueids[i]);
                }
                *ret = strdup(buf);
                return *ret ? 0 : -ENOMEM;
        }
        v = field_get(cfg, t);
        if (t->kind == KIND_ENUM)
                r = asprintf(ret, "%s", v <= t->max ? t->names[v] : t->names[t->def]);
        else
                r = asprintf(ret, "%" PRIu64, v);
        return r < 0 ? -ENOMEM : 0;
}

json_object *tunables_to_json(const ManagerConfig *cfg) {
        json_object *o = json_object_new_object();

        if (!o)
                return NULL;
        for (size_t i = 0; i < N_TUNABLES; i++) {
                json_object *s;
                char *v;

                if (tunable_format(cfg, tunables[i].key, &v) < 0) {
                        json_object_put(o);
                        return NULL;
                }
                s = json_object_new_string(v);
                free(v);
                if (!s || json_object_object_add(o, tunables[i].key, s) < 0) {
                        json_object_put(s);
                        json_object_put(o);
                        return NULL;
                }
        }
        return o;
}

/* Keys of the state file that are no tunable of this smcd (a newer smcd wrote them:
 * a downgrade), as loaded, with their values: written back by every save, so that
 * the newer smcd finds them again after an upgrade. Owned here; smcd's loop is its
 * only user (load at start, saves from D-Bus calls). */
static json_object *state_foreign;

int tunables_save(const ManagerConfig *cfg, const char *path) {
        json_object *o;
        const char *text;
        char *data;
        int r;

        if (!path || !*path)
                return -EINVAL;
        o = tunables_to_json(cfg);
        if (!o)
                return -ENOMEM;
        if (state_foreign) {
                json_object_object_foreach(state_foreign, fk, fv) {
                        if (json_object_object_add(o, fk, json_object_get(fv)) < 0) {
                                json_object_put(fv);
                                json_object_put(o);
                                return -ENOMEM;
                        }
                }
        }
        text = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE);
        r = asprintf(&data, "%s\n", text);
        json_object_put(o);
        if (r < 0)
                return -ENOMEM;
        /* tmp + fsync + rename + directory fsync (fileio.h), shared with policy.c */
        r = write_file_atomic(path, data, strlen(data), 0644);
        free(data);
        return r;
}

/* The state file's JSON @root (a reference is kept by the caller) from @path into
 * @cfg. A file of a newer smcd (a downgrade) may hold keys this one does not know
 * and values it refuses (a wider range, a new name): each is logged and skipped,
 * the rest applies, and unknown keys go to *@foreign (a new object, or NULL if none)
 * for tunables_save() to keep. The file's structure (an object of strings) is
 * checked first, so a file that is not that applies nothing. Returns 0, or -EINVAL
 * with a reason in @err (@cfg unchanged), -ENOMEM. */
static int parse_state(ManagerConfig *cfg, json_object *root, const char *path, json_object **foreign, char *err,
                       size_t errlen) {
        *foreign = NULL;
        if (!json_object_is_type(root, json_type_object))
                return set_err(err, errlen, "not a JSON object");
        json_object_object_foreach(root, k0, v0) {
                if (!json_object_is_type(v0, json_type_string))
                        return set_err(err, errlen, "value of \"%s\" is not a string", k0);
        }
        json_object_object_foreach(root, k, v) {
                char e[256];

                if (!tunable_known(k)) {
                        log_warning("State file %s: \"%s\" is no tunable of this smcd (written by a newer one?): "
                                    "not applied, kept in the file.",
                                    path, k);
                        if (!*foreign && !(*foreign = json_object_new_object()))
                                return -ENOMEM;
                        if (json_object_object_add(*foreign, k, json_object_get(v)) < 0) {
                                json_object_put(v);
                                return -ENOMEM;
                        }
                        continue;
                }
                if (tunable_parse(cfg, k, json_object_get_string(v), e, sizeof(e)) < 0)
                        log_warning("State file %s: %s: not applied (written by a newer smcd?); %s keeps its "
                                    "option or default value until it is set again.",
                                    path, e, k);
        }
        return 0;
}

int tunables_load(ManagerConfig *cfg, const char *path) {
        ManagerConfig tmp = *cfg;
        char err[300], aside[PATH_MAX + 48];
        json_object *root = NULL;
        int r;

        if (!path || !*path)
                return 0;
        r = read_json_file(path, STATE_MAX_SIZE, &root, err, sizeof(err));
        if (r == -ENOENT)
                return 0;
        if (r == -ENOMEM)
                return log_error_errno(r, "Out of memory.");
        if (r < 0 && r != -EBADMSG) {
                cfg->state_load_error = r;
                return log_error_errno(r, "Cannot read state file %s: %s; using the default tunables, leaving "
                                       "the file alone and refusing changes until smcd restarts.", path,
                                       r == -EINVAL ? "not a regular file" : strerror(-r));
        }
        if (r == 0) {
                json_object *foreign = NULL;

                r = parse_state(&tmp, root, path, &foreign, err, sizeof(err));
                json_object_put(root);
                if (r == -ENOMEM) {
                        json_object_put(foreign);
                        return log_error_errno(r, "Out of memory.");
                }
                if (r == 0) {
                        json_object_put(state_foreign);
                        state_foreign = foreign;
                }
        }
        if (r == 0) {
                *cfg = tmp;
                log_debug("Tunables loaded from %s.", path);
                return 0;
        }
        r = move_aside_corrupt(path, aside, sizeof(aside));
        if (r < 0)
                log_error_errno(r, "Corrupt state file %s (%s): starting with the default tunables; "
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
