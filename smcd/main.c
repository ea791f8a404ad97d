/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* smcd: the SMC daemon (SMC-D over loopback ISM, SMC-R over RoCE). See smcd(8) and manager.h. */

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <systemd/sd-daemon.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "ctl-proto.h"
#include "log.h"
#include "fileio.h"
#include "manager.h"
#include "dmb.h"
#include "eptable.h"
#include "policy.h"
#include "tunables.h"

#define EXIT_USAGE 2
#define CONFIG_MAX_SIZE (64u << 10) /* bytes of a config file */
#define CONFIG_MAX_LINE 1024u       /* bytes of one line, with its newline */

/* The option of tunable @key: '_' as '-'. */
static void option_of_key(const char *key, char *buf, size_t len) {
        size_t i;

        for (i = 0; key[i] && i + 1 < len; i++)
                buf[i] = key[i] == '_' ? '-' : key[i];
        buf[i] = 0;
}

static void help(void) {
        char state[PATH_MAX];

        tunables_default_path(state, sizeof(state));
        printf("Usage: smcd [OPTIONS]\n\n"
               "Shared Memory Communications daemon: sets up SMC-D connections over loopback ISM and SMC-R over RoCE.\n\n"
               "  -h --help                    Show this help and exit\n"
               "     --version                 Show the version and exit\n"
               "  -v --verbose                 Log debug messages\n"
               "     --config FILE             Read key=value options from FILE\n"
               "     --runtime-dir DIR         Socket and stats directory (default %s)\n"
               "     --allow-uid UID           Allow this user (repeatable; default: everybody)\n"
               "     --allow-group GROUP       Allow this group (repeatable)\n"
               "     --admin-group GROUP       May change state over D-Bus besides root\n"
               "                               (default " SMCD_DEFAULT_ADMIN_GROUP " if it exists; \"\" = root only)\n"
               "     --state-file FILE         Tunables state file (default %s)\n"
               "     --prepopulate N           Fresh buffers of the default size to create\n"
               "     --max-fallback-conns N    TCP fallback connections listed (default 65536)\n"
               "     --pool-idle-sec N         Free buffers unused this long are given back\n"
               "                               (default 60, 0 = keep them)\n"
               "     --roce-dev DEV[:PORT]     RoCE device SMC-R may use (repeatable; default: all)\n"
               "     --cross-netns yes|no      SMC-D between network namespaces of this host\n"
               "                               (default no; needs the SMC TCP option program)\n"
               "     --no-bus                  Do not offer the D-Bus API (org.smcd.smcd1)\n"
               "\nTunables (smcd-tunables(5); the state file overrides these):\n",
               smc_ctl_runtime_dir(), state);
        for (size_t i = 0; i < tunables_count(); i++) {
                const char *metavar, *text = tunable_help(tunable_key(i), &metavar);
                char opt[64];
                int n;

                option_of_key(tunable_key(i), opt, sizeof(opt));
                n = printf("     --%s %s", opt, metavar);
                printf("%*s%s\n", n < 31 ? 31 - n : 2, "", text);
        }
        printf("\nEnvironment:\n"
               "     SMCD_RUNTIME_DIR          Default of --runtime-dir (an absolute path); the client\n"
               "                               library and smcrun(1) find smcd.sock there too\n"
               "     STATE_DIRECTORY           Directory of the default state file (set by systemd)\n"
               "\nSIGUSR1 writes the counters to stats.json in the runtime directory. See smcd(8).\n");
}

/* A decimal number at the start of @s (digits only, no sign or space); *end is set
 * past it. */
static int parse_digits(const char *s, unsigned long long *ret, char **end) {
        if (!*s || !isdigit((unsigned char) *s))
                return -EINVAL;
        errno = 0;
        *ret = strtoull(s, end, 10);
        return errno ? -errno : 0;
}

static int parse_uint(const char *s, uint64_t max, uint64_t *ret) {
        unsigned long long v;
        char *end;
        int r;

        r = parse_digits(s, &v, &end);
        if (r < 0)
                return r;
        if (*end)
                return -EINVAL;
        if (v > max)
                return -ERANGE;
        *ret = v;
        return 0;
}

static int parse_bool(const char *s, bool *ret) {
        if (!strcmp(s, "1") || !strcasecmp(s, "yes") || !strcasecmp(s, "true") || !strcasecmp(s, "on"))
                *ret = true;
        else if (!strcmp(s, "0") || !strcasecmp(s, "no") || !strcasecmp(s, "false") || !strcasecmp(s, "off"))
                *ret = false;
        else
                return -EINVAL;
        return 0;
}

static int config_file(ManagerConfig *cfg, const char *path);

/* Append @id to a uid_t / gid_t list (both are 32-bit on Linux). */
static int id_list_append(uint32_t **list, size_t *n, uint32_t id) {
        uint32_t *a = realloc(*list, (*n + 1) * sizeof(uint32_t));

        if (!a)
                return log_error_errno(ENOMEM, "Out of memory.");
        a[(*n)++] = id;
        *list = a;
        return 0;
}

/* The options that are not tunables: each applies @value of option @key, logs and
 * returns -EINVAL on error. @where names the source ("command line" or "file:line"). */
typedef int (*option_fn)(ManagerConfig *cfg, const char *key, const char *value, const char *where);

static int opt_runtime_dir(ManagerConfig *cfg, const char *key, const char *value, const char *where) {
        if (value[0] != '/')
                return log_error_errno(EINVAL, "%s: runtime-dir must be an absolute path: %s", where, value);
        free(cfg->runtime_dir);
        cfg->runtime_dir = strdup(value);
        return cfg->runtime_dir ? 0 : log_error_errno(ENOMEM, "Out of memory.");
}

static int opt_allow_id(ManagerConfig *cfg, const char *key, const char *value, const char *where) {
        bool is_uid = !strcmp(key, "allow-uid");
        uint64_t v;
        uint32_t id;

        if (parse_uint(value, UINT32_MAX - 1, &v) == 0)
                id = (uint32_t) v;
        else if (is_uid) {
                struct passwd *pw = getpwnam(value);
                if (!pw)
                        return log_error_errno(EINVAL, "%s: allow-uid: no such user: %s", where, value);
                id = pw->pw_uid;
        } else {
                struct group *gr = getgrnam(value);
                if (!gr)
                        return log_error_errno(EINVAL, "%s: allow-group: no such group: %s", where, value);
                id = gr->gr_gid;
        }
        _Static_assert(sizeof(uid_t) == sizeof(uint32_t) && sizeof(gid_t) == sizeof(uint32_t), "32-bit ids");
        return is_uid ? id_list_append((uint32_t **) &cfg->allow_uids, &cfg->n_allow_uids, id)
                      : id_list_append((uint32_t **) &cfg->allow_gids, &cfg->n_allow_gids, id);
}

static int opt_admin_group(ManagerConfig *cfg, const char *key, const char *value, const char *where) {
        struct group *gr;
        uint64_t v;

        if (!value[0]) {
                cfg->admin_gid = (gid_t) -1;
                return 0;
        }
        if (parse_uint(value, UINT32_MAX - 1, &v) == 0) {
                cfg->admin_gid = (gid_t) v;
                return 0;
        }
        gr = getgrnam(value);
        if (!gr)
                return log_error_errno(EINVAL, "%s: admin-group: no such group: %s", where, value);
        cfg->admin_gid = gr->gr_gid;
        return 0;
}

static int opt_state_file(ManagerConfig *cfg, const char *key, const char *value, const char *where) {
        if (value[0] != '/')
                return log_error_errno(EINVAL, "%s: state-file must be an absolute path: %s", where, value);
        if (strlen(value) >= sizeof(cfg->state_file) - 64)
                return log_error_errno(EINVAL, "%s: state-file: path too long", where);
        snprintf(cfg->state_file, sizeof(cfg->state_file), "%s", value);
        return 0;
}

static int opt_prepopulate(ManagerConfig *cfg, const char *key, const char *value, const char *where) {
        uint64_t v;

        if (parse_uint(value, 1u << 24, &v) < 0)
                return log_error_errno(EINVAL, "%s: prepopulate: expected a number of buffers (at most %u): %s",
                                       where, 1u << 24, value);
        cfg->prepopulate = (unsigned) v;
        return 0;
}

static int opt_max_fallback_conns(ManagerConfig *cfg, const char *key, const char *value, const char *where) {
        uint64_t v;

        if (parse_uint(value, FALLBACK_MAX_LIMIT, &v) < 0 || v == 0)
                return log_error_errno(EINVAL, "%s: max-fallback-conns: expected a number 1..%u: %s", where,
                                       FALLBACK_MAX_LIMIT, value);
        cfg->max_fallback_conns = v;
        return 0;
}

static int opt_pool_idle_sec(ManagerConfig *cfg, const char *key, const char *value, const char *where) {
        uint64_t v;

        if (parse_uint(value, 86400, &v) < 0)
                return log_error_errno(EINVAL, "%s: pool-idle-sec: expected seconds 0..86400 (0 = keep free buffers): %s",
                                       where, value);
        cfg->pool_idle_usec = v * 1000000u;
        return 0;
}

static int opt_roce_dev(ManagerConfig *cfg, const char *key, const char *value, const char *where) {
        size_t n = 0;
        char **l;

        const char *colon = strchr(value, ':');
        size_t nl = colon ? (size_t) (colon - value) : strlen(value);

        /* NAME (at most 63 bytes: IB_DEVICE_NAME_MAX) and PORT 1..255 (a u8 in verbs) */
        if (!value[0] || strlen(value) > 72 || strspn(value, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.:") != strlen(value) ||
            nl == 0 || nl > 63 ||
            (colon && (!colon[1] || strspn(colon + 1, "0123456789") != strlen(colon + 1) || colon[1] == '0' ||
                       strlen(colon + 1) > 3 || atoi(colon + 1) > 255)))
                return log_error_errno(EINVAL, "%s: roce-dev: expected an RDMA device name, optionally :PORT "
                                       "(1..255): %s", where, value);
        while (cfg->roce_devs && cfg->roce_devs[n])
                n++;
        if (n >= 16)
                return log_error_errno(EINVAL, "%s: roce-dev: at most 16 devices", where);
        l = realloc(cfg->roce_devs, (n + 2) * sizeof(char *));
        if (!l)
                return log_error_errno(ENOMEM, "Out of memory.");
        cfg->roce_devs = l;
        l[n] = strdup(value);
        l[n + 1] = NULL;
        return l[n] ? 0 : log_error_errno(ENOMEM, "Out of memory.");
}

static int opt_cross_netns(ManagerConfig *cfg, const char *key, const char *value, const char *where) {
        bool b;

        if (parse_bool(value, &b) < 0)
                return log_error_errno(EINVAL, "%s: cross-netns: expected yes or no: %s", where, value);
        cfg->cross_netns = b;
        return 0;
}

static int opt_verbose(ManagerConfig *cfg, const char *key, const char *value, const char *where) {
        bool b;

        if (parse_bool(value, &b) < 0)
                return log_error_errno(EINVAL, "%s: verbose: expected yes or no: %s", where, value);
        log_set_max_level(b ? LOG_DEBUG : LOG_INFO);
        return 0;
}

static const struct {
        const char *name;
        option_fn apply;
} plain_options[] = {
        { "runtime-dir", opt_runtime_dir },
        { "allow-uid", opt_allow_id },
        { "allow-group", opt_allow_id },
        { "admin-group", opt_admin_group },
        { "state-file", opt_state_file },
        { "prepopulate", opt_prepopulate },
        { "max-fallback-conns", opt_max_fallback_conns },
        { "pool-idle-sec", opt_pool_idle_sec },
        { "roce-dev", opt_roce_dev },
        { "cross-netns", opt_cross_netns },
        { "verbose", opt_verbose }, /* config file only: -v on the command line */
};

/* The tunable of option @key ("max-conns-per-uid" -> "max_conns_per_uid") in @buf, or
 * NULL if @key names none. */
static const char *key_of_option(const char *key, char *buf, size_t len) {
        size_t i;

        for (i = 0; key[i] && i + 1 < len; i++) {
                if (key[i] == '_')
                        return NULL; /* options are spelled with '-' only */
                buf[i] = key[i] == '-' ? '_' : key[i];
        }
        if (key[i])
                return NULL;
        buf[i] = 0;
        return tunable_known(buf) ? buf : NULL;
}

/* Apply option @key (the long option name) with @value: a plain option of the table
 * above or a tunable (tunables.h, one validation for options, state file and D-Bus).
 * @where names the source for messages ("command line" or "file:line"). Logs and
 * returns -EINVAL on error. */
static int apply_option(ManagerConfig *cfg, const char *key, const char *value, const char *where) {
        char tkey[64], err[300];

        for (size_t i = 0; i < sizeof(plain_options) / sizeof(plain_options[0]); i++)
                if (!strcmp(plain_options[i].name, key))
                        return plain_options[i].apply(cfg, key, value, where);
        if (key_of_option(key, tkey, sizeof(tkey))) {
                if (tunable_parse_as(cfg, tkey, value, key, err, sizeof(err)) < 0)
                        return log_error_errno(EINVAL, "%s: %s", where, err);
                return 0;
        }
        return log_error_errno(EINVAL, "%s: unknown key: %s", where, key);
}

static char *strip(char *s) {
        char *e;

        while (isspace((unsigned char) *s))
                s++;
        e = s + strlen(s);
        while (e > s && isspace((unsigned char) e[-1]))
                *--e = 0;
        return s;
}

/* Read the whole regular file @path (at most CONFIG_MAX_SIZE bytes) into a NUL
 * terminated buffer. Returns 0 or -errno (logged). */
static int config_read(const char *path, char **ret, size_t *ret_len) {
        int r = read_regular_file(path, CONFIG_MAX_SIZE, ret, ret_len);

        if (r == -EINVAL)
                return log_error_errno(EINVAL, "Config file %s is not a regular file.", path);
        if (r == -EFBIG)
                return log_error_errno(EFBIG, "Config file %s is larger than %u bytes.", path, CONFIG_MAX_SIZE);
        if (r < 0)
                return log_error_errno(-r, "Cannot read config file %s: %m", path);
        return 0;
}

static int config_file(ManagerConfig *cfg, const char *path) {
        char where[PATH_MAX + 32], *buf = NULL;
        size_t len = 0, pos = 0;
        unsigned n = 0;
        int r;

        r = config_read(path, &buf, &len);
        if (r < 0)
                return r;
        while (pos < len) {
                char *line = buf + pos, *nl = memchr(line, '\n', len - pos), *s, *eq, *key, *value;
                size_t llen = nl ? (size_t) (nl - line) + 1 : len - pos;

                n++;
                snprintf(where, sizeof(where), "%s:%u", path, n);
                pos += llen;
                if (llen > CONFIG_MAX_LINE) {
                        r = log_error_errno(EINVAL, "%s: line too long (more than %u bytes).", where,
                                            CONFIG_MAX_LINE);
                        break;
                }
                if (memchr(line, 0, llen)) {
                        r = log_error_errno(EINVAL, "%s: line contains a NUL byte.", where);
                        break;
                }
                if (nl)
                        *nl = 0;
                s = strip(line);
                if (!*s || *s == '#')
                        continue;
                eq = strchr(s, '=');
                if (!eq) {
                        r = log_error_errno(EINVAL, "%s: expected key=value: %s", where, s);
                        break;
                }
                *eq = 0;
                key = strip(s);
                value = strip(eq + 1);
                /* "VALUE" as VALUE: the only way to write an empty one besides "ueid =" */
                if (value[0] == '"' && strlen(value) >= 2 && value[strlen(value) - 1] == '"') {
                        value[strlen(value) - 1] = 0;
                        value++;
                }
                /* an empty value means something only for ueid (none: SMC-R v1 only) */
                if (!*key || (!*value && strcmp(key, "ueid") != 0)) {
                        r = log_error_errno(EINVAL, "%s: expected key=value", where);
                        break;
                }
                r = apply_option(cfg, key, value, where);
                if (r < 0)
                        break;
        }
        free(buf);
        return r;
}

static int parse_argv(int argc, char *argv[], ManagerConfig *cfg) {
        enum {
                ARG_VERSION = 0x100,
                ARG_CONFIG,
                ARG_NO_BUS,
                ARG_PLAIN,             /* + index in plain_options[] */
                ARG_TUNABLE = 0x200,   /* + index of the tunable */
        };
        static const struct option fixed[] = {
                { "help", no_argument, NULL, 'h' },
                { "version", no_argument, NULL, ARG_VERSION },
                { "verbose", no_argument, NULL, 'v' },
                { "config", required_argument, NULL, ARG_CONFIG },
                { "no-bus", no_argument, NULL, ARG_NO_BUS },
        };
        /* the fixed ones, the plain options but verbose, one per tunable, the end */
        enum { N_FIXED = sizeof(fixed) / sizeof(fixed[0]), N_PLAIN = sizeof(plain_options) / sizeof(plain_options[0]) };
        static char names[64][48];
        struct option options[N_FIXED + N_PLAIN + 64 + 1];
        size_t n = 0;
        int c, r;

        if (tunables_count() > 64)
                return log_error_errno(EINVAL, "Too many tunables."); /* cannot happen */
        for (size_t i = 0; i < N_FIXED; i++)
                options[n++] = fixed[i];
        for (size_t i = 0; i < N_PLAIN; i++)
                if (strcmp(plain_options[i].name, "verbose") != 0)
                        options[n++] = (struct option) { plain_options[i].name, required_argument, NULL,
                                                         ARG_PLAIN + (int) i };
        for (size_t i = 0; i < tunables_count(); i++) {
                option_of_key(tunable_key(i), names[i], sizeof(names[i]));
                options[n++] = (struct option) { names[i], required_argument, NULL, ARG_TUNABLE + (int) i };
        }
        options[n] = (struct option) {};

        while ((c = getopt_long(argc, argv, "hv", options, NULL)) >= 0) {
                const char *key;

                switch (c) {
                case 'h':
                        help();
                        return 0;
                case ARG_VERSION:
                        printf("smcd " SMCD_VERSION "\n");
                        return 0;
                case 'v':
                        log_set_max_level(LOG_DEBUG);
                        continue;
                case ARG_CONFIG:
                        r = config_file(cfg, optarg);
                        if (r < 0)
                                return r;
                        continue;
                case ARG_NO_BUS:
                        cfg->no_bus = true;
                        continue;
                default:
                        if (c >= ARG_TUNABLE && (size_t) (c - ARG_TUNABLE) < tunables_count())
                                key = names[c - ARG_TUNABLE];
                        else if (c >= ARG_PLAIN && (size_t) (c - ARG_PLAIN) < N_PLAIN)
                                key = plain_options[c - ARG_PLAIN].name;
                        else
                                return -EINVAL; /* getopt printed the reason */
                }
                r = apply_option(cfg, key, optarg, "command line");
                if (r < 0)
                        return r;
        }
        if (optind < argc)
                return log_error_errno(EINVAL, "Unexpected argument: %s", argv[optind]);
        return 1;
}

/* Whether a running smcd answers on the control socket in @runtime_dir (logged). Not
 * under socket activation: then the socket is ours. */
static bool another_smcd(const char *runtime_dir) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        bool busy;
        int fd;

        if (manager_socket_activated())
                return false;
        if ((size_t) snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", runtime_dir, SMC_CTL_SOCKET_NAME) >=
            sizeof(sa.sun_path))
                return false; /* manager_start() reports it */
        fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return false;
        busy = connect(fd, (struct sockaddr *) &sa, sizeof(sa)) == 0;
        close(fd);
        if (busy)
                log_error("Another smcd is serving %s already.", sa.sun_path);
        return busy;
}

/* Could a user other than root and us replace smcd's control socket in runtime
 * directory @dir, or the directory, or a directory or symbolic link on the way to it?
 * Then clients might talk to an impostor (helper 121: a socket renamed over smcd.sock
 * in a mode 777 directory got root's HELLO; helper 122: a symbolic link of another
 * user on the way, pointed elsewhere later). The path is walked component by
 * component as the kernel resolves it (symbolic links followed, at most 40): every
 * directory and link on the way owned by root or us; every directory before the last
 * writable by others only with the sticky bit (/tmp: there only a link's owner may
 * replace it), the last one by nobody else, as sshd's StrictModes. With @existing,
 * only the part that exists is looked at (before it is created). Returns 0, or -EPERM,
 * -ELOOP, -ENOTDIR, -ENAMETOOLONG or lstat(2)'s error (logged). */
static int runtime_dir_safe(const char *dir, bool existing) {
        char cur[PATH_MAX] = "", todo[2 * PATH_MAX], link[PATH_MAX], comp[NAME_MAX + 1];
        uid_t me = geteuid();
        unsigned links = 0;
        struct stat st;

        if (dir[0] != '/' || strlen(dir) >= sizeof(todo))
                return log_error_errno(ENAMETOOLONG, "Cannot use runtime directory %s: path too long.", dir);
        strcpy(todo, dir);
        if (lstat("/", &st) < 0)
                return log_error_errno(errno, "Cannot use runtime directory %s: /: %m", dir);
        for (;;) {
                const char *what = cur[0] ? cur : "/";
                char *c = todo, *rest;
                bool last;
                ssize_t n;

                /* (cur, "" for /, is a directory whose owner and mode are in st) */
                while (*c == '/')
                        c++;
                rest = strchr(c, '/');
                if (rest)
                        *rest++ = 0;
                else
                        rest = c + strlen(c);
                while (*rest == '/')
                        rest++;
                last = !*c || (!*rest && !strcmp(c, "."));
                if (st.st_uid != 0 && st.st_uid != me) {
                        log_error("Runtime directory %s: %s belongs to uid %u, who could replace smcd's control "
                                  "socket: use a path that only root%s can change.",
                                  dir, what, (unsigned) st.st_uid, me ? " and smcd's uid" : "");
                        return -EPERM;
                }
                if ((st.st_mode & (S_IWGRP | S_IWOTH)) && (last || !(st.st_mode & S_ISVTX))) {
                        log_error("Runtime directory %s: %s is writable by %s (mode %04o), who could replace smcd's "
                                  "control socket (%s).",
                                  dir, what, (st.st_mode & S_IWOTH) ? "every user" : "its group",
                                  (unsigned) (st.st_mode & 07777),
                                  last ? "chmod go-w; mode 755 lets them reach it" : "chmod go-w, or the sticky bit");
                        return -EPERM;
                }
                if (last)
                        return 0;
                if (strlen(c) >= sizeof(comp))
                        return log_error_errno(ENAMETOOLONG, "Cannot use runtime directory %s: path too long.", dir);
                strcpy(comp, c);
                c = comp;
                memmove(todo, rest, strlen(rest) + 1); /* (todo held c) */
                if (!strcmp(c, "."))
                        continue;
                if (!strcmp(c, "..")) {
                        char *sl = strrchr(cur, '/');

                        if (sl)
                                *sl = 0;
                        if (lstat(cur[0] ? cur : "/", &st) < 0)
                                return log_error_errno(errno, "Cannot use runtime directory %s: %s: %m", dir,
                                                       cur[0] ? cur : "/");
                        continue;
                }
                if (strlen(cur) + 1 + strlen(c) >= sizeof(cur))
                        return log_error_errno(ENAMETOOLONG, "Cannot use runtime directory %s: path too long.", dir);
                {
                        char next[PATH_MAX];
                        size_t lc = strlen(cur);

                        memcpy(next, cur, lc); /* (the length was checked above) */
                        next[lc] = '/';
                        strcpy(next + lc + 1, c);
                        if (lstat(next, &st) < 0) {
                                if (errno == ENOENT && existing)
                                        return 0; /* (created next, mode 0755, ours) */
                                return strcmp(next, dir) == 0
                                               ? log_error_errno(errno, "Cannot use runtime directory %s: %m", dir)
                                               : log_error_errno(errno, "Cannot use runtime directory %s: %s: %m",
                                                                 dir, next);
                        }
                        if (S_ISLNK(st.st_mode)) {
                                if (st.st_uid != 0 && st.st_uid != me) {
                                        log_error("Runtime directory %s: the symbolic link %s belongs to uid %u, who "
                                                  "could point it elsewhere: use a path that only root%s can change.",
                                                  dir, next, (unsigned) st.st_uid, me ? " and smcd's uid" : "");
                                        return -EPERM;
                                }
                                if (++links > 40)
                                        return log_error_errno(ELOOP, "Cannot use runtime directory %s: %m", dir);
                                n = readlink(next, link, sizeof(link) - 1);
                                if (n < 0)
                                        return strcmp(next, dir) == 0
                                               ? log_error_errno(errno, "Cannot use runtime directory %s: %m", dir)
                                               : log_error_errno(errno, "Cannot use runtime directory %s: %s: %m",
                                                                 dir, next);
                                link[n] = 0;
                                if ((size_t) n + 1 + strlen(todo) + 1 > sizeof(todo))
                                        return log_error_errno(ENAMETOOLONG, "Cannot use runtime directory %s: path too long.",
                                                               dir);
                                memmove(todo + n + 1, todo, strlen(todo) + 1);
                                memcpy(todo, link, (size_t) n);
                                todo[n] = '/';
                                if (link[0] == '/')
                                        cur[0] = 0;
                                if (lstat(cur[0] ? cur : "/", &st) < 0)
                                        return log_error_errno(errno, "Cannot use runtime directory %s: %s: %m", dir,
                                                               cur[0] ? cur : "/");
                                continue;
                        }
                        if (!S_ISDIR(st.st_mode))
                                return strcmp(next, dir) == 0
                                               ? log_error_errno(ENOTDIR, "Cannot use runtime directory %s: %m", dir)
                                               : log_error_errno(ENOTDIR, "Cannot use runtime directory %s: %s: %m",
                                                                 dir, next);
                        strcpy(cur, next);
                }
        }
}

/* One smcd per runtime directory: a lock (flock) on the directory itself, taken
 * before anything is read or moved aside (two smcd started at the same moment both
 * passed another_smcd()'s connect and bound the socket path in turn: the first one's
 * exit then removed the second's socket, which no client could reach any more) and
 * held, open, until exit. No file of its own: nothing is left behind. The path is
 * checked first (runtime_dir_safe()). Returns 0, 1 when another smcd holds it
 * (logged), or -errno (logged). */
static int lock_runtime_dir(const char *dir) {
        int fd, r;

        r = runtime_dir_safe(dir, true); /* (nothing is created under a path others can change) */
        if (r < 0)
                return r;
        r = mkdir_p(dir, 0755);
        if (r < 0)
                return log_error_errno(r, "Cannot create runtime directory %s: %m", dir);
        fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return log_error_errno(errno, "Cannot use runtime directory %s: %m", dir);
        r = runtime_dir_safe(dir, false);
        if (r < 0) {
                close(fd);
                return r;
        }
        if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
                r = errno;
                close(fd);
                if (r == EWOULDBLOCK) {
                        log_error("Another smcd is serving %s already (it holds the directory's lock).", dir);
                        return 1;
                }
                return log_error_errno(r, "Cannot lock runtime directory %s: %m", dir);
        }
        return 0; /* (fd stays open: the lock lives as long as this process) */
}

/* Option values that parse but cannot work, refused before anything is touched:
 * a runtime directory too long for its socket's path; a state file named as one of
 * the tables kept beside it, or as one of smcd's files in the runtime directory. */
static int check_paths(const ManagerConfig *cfg) {
        static const char *const beside[] = { POLICY_STATE_NAME, PNET_STATE_NAME };
        static const char *const rt[] = { SMC_CTL_SOCKET_NAME, SMC_CTL_SOCKET_NAME ".new", SMCD_EPT_NAME, "stats.json",
                                          "instance" };
        size_t max = sizeof(((struct sockaddr_un *) 0)->sun_path) - 2 - strlen(SMC_CTL_SOCKET_NAME);
        const char *base = strrchr(cfg->state_file, '/');
        size_t dlen;

        if (strlen(cfg->state_file) >= sizeof(cfg->state_file) - 64)
                return log_error_errno(ENAMETOOLONG, "state file %s: path too long (STATE_DIRECTORY?).",
                                       cfg->state_file);
        if (strlen(cfg->runtime_dir) > max)
                return log_error_errno(ENAMETOOLONG, "runtime-dir %s: too long for the control socket's path "
                                       "(at most %zu bytes).", cfg->runtime_dir, max);
        base = base ? base + 1 : cfg->state_file;
        dlen = (size_t) (base - cfg->state_file);
        for (size_t i = 0; i < sizeof(beside) / sizeof(beside[0]); i++)
                if (!strcmp(base, beside[i]))
                        return log_error_errno(EINVAL, "state-file %s: that name belongs to the %s table, which "
                                               "lives beside the tunables.", cfg->state_file,
                                               i == 0 ? "policy" : "pnet");
        if (dlen > 1 && strlen(cfg->runtime_dir) == dlen - 1 && !strncmp(cfg->runtime_dir, cfg->state_file, dlen - 1))
                for (size_t i = 0; i < sizeof(rt) / sizeof(rt[0]); i++)
                        if (!strcmp(base, rt[i]))
                                return log_error_errno(EINVAL, "state-file %s: that is smcd's own file in the "
                                                       "runtime directory.", cfg->state_file);
        return 0;
}

/* Started with stdin, stdout or stderr closed (`smcd 2>&-`, a supervisor that closes
 * them): /dev/null in their place, as systemd gives a service, before the daemon
 * opens anything that stays open. Otherwise the runtime directory's lock, the
 * control socket or a client's connection would take 0..2, and the log's writes to
 * stderr (and anything written to stdout) would land in them. Returns 0 or -errno
 * (/dev/null cannot be opened). */
static int stdio_fill(void) {
        for (int fd = 0; fd <= 2; fd++) {
                int n;

                if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF)
                        continue;
                /* the lowest free number: this one, as the lower ones are open */
                n = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
                if (n < 0)
                        return -errno;
                if (n != fd) {
                        (void) close(n); /* (cannot happen: the lower ones are open) */
                        return -EBADF;
                }
        }
        return 0;
}

static void raise_nofile_limit(void) {
        struct rlimit rl;

        /* fds in flight in accept channels count against RLIMIT_NOFILE */
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
                rl.rlim_cur = rl.rlim_max;
                (void) setrlimit(RLIMIT_NOFILE, &rl);
        }
}

/* First of all, before main(): a SIGHUP or SIGUSR1 at start-up (a reload or a stats
 * request sent as the service starts) must not kill smcd; the loop reads them all
 * through sd-event once it runs, SIGTERM and SIGINT too. (Only the dynamic loader's
 * work since the exec is left before this.) */
__attribute__((constructor)) static void block_signals_early(void) {
        sigset_t mask;

        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        sigaddset(&mask, SIGUSR1);
        sigaddset(&mask, SIGHUP);
        sigprocmask(SIG_BLOCK, &mask, NULL);
}

int main(int argc, char *argv[]) {
        ManagerConfig cfg = {};
        Manager *m = NULL;
        int r;

        tunables_set_defaults(&cfg);
        cfg.pool_idle_usec = SMCD_POOL_TRIM_USEC;
        {
                struct group *gr = getgrnam(SMCD_DEFAULT_ADMIN_GROUP);

                cfg.admin_gid = gr ? gr->gr_gid : (gid_t) -1;
        }
        tunables_default_path(cfg.state_file, sizeof(cfg.state_file));
        cfg.runtime_dir = strdup(smc_ctl_runtime_dir());
        if (!cfg.runtime_dir)
                return EXIT_FAILURE;
        /* getopt's messages say "smcd: ...", not the path it was started by */
        if (argc > 0)
                argv[0] = (char *) "smcd";
        r = parse_argv(argc, argv, &cfg);
        if (r <= 0) {
                manager_config_done(&cfg);
                errno = 0;
                if (r == 0 && (fflush(stdout) != 0 || ferror(stdout))) {
                        /* --help, --version: to /dev/full or a closed output */
                        fprintf(stderr, "smcd: cannot write the output: %s\n",
                                errno ? strerror(errno) : "write error");
                        return EXIT_FAILURE;
                }
                return r < 0 ? EXIT_USAGE : EXIT_SUCCESS;
        }

        /* (after --help and --version, whose closed output is an error) */
        r = stdio_fill();
        if (r < 0) {
                manager_config_done(&cfg);
                return EXIT_FAILURE; /* (nowhere to say why: no stderr) */
        }
        if (check_paths(&cfg) < 0) {
                manager_config_done(&cfg);
                return EXIT_USAGE;
        }
        /* Before anything is read (and a corrupt state file moved aside): a second smcd
         * for the same runtime directory stops here (the lock; the connect for an
         * smcd from before the lock). */
        if (lock_runtime_dir(cfg.runtime_dir) != 0 || another_smcd(cfg.runtime_dir)) {
                manager_config_done(&cfg);
                return EXIT_FAILURE;
        }
        /* the options are the defaults; the state file (smcctl tunables set) overrides them */
        (void) tunables_load(&cfg, cfg.state_file);

        raise_nofile_limit();
        (void) signal(SIGPIPE, SIG_IGN);

        r = manager_new(&cfg, &m);
        manager_config_done(&cfg);
        if (r < 0)
                return EXIT_FAILURE;
        r = manager_start(m);
        if (r < 0) {
                /* manager_start() logged the reason; nothing ran, so no stats.json */
                manager_free(m);
                return EXIT_FAILURE;
        }
        r = manager_run(m);
        if (r < 0)
                log_error_errno(r, "Event loop failed: %m");
        (void) manager_write_stats(m);
        manager_free(m);
        return r < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
