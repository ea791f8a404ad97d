/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* smcd: the SMC-D (loopback ISM) daemon. See smcd(8) and manager.h. */

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "ctl-proto.h"
#include "log.h"
#include "fileio.h"
#include "manager.h"
#include "dmb.h"
#include "tunables.h"

#define EXIT_USAGE 2
#define DEFAULT_MAX_CLIENTS_PER_UID 256u
#define CONFIG_MAX_SIZE (64u << 10) /* bytes of a config file */
#define CONFIG_MAX_LINE 1024u       /* bytes of one line, with its newline */

static void help(void) {
        char state[PATH_MAX];

        tunables_default_path(state, sizeof(state));
        printf("Usage: smcd [OPTIONS]\n\n"
               "Shared Memory Communications daemon: sets up SMC-D connections over loopback ISM.\n\n"
               "  -h --help                    Show this help and exit\n"
               "     --version                 Show the version and exit\n"
               "  -v --verbose                 Log debug messages\n"
               "     --config FILE             Read key=value options from FILE\n"
               "     --runtime-dir DIR         Socket and stats directory (default %s)\n"
               "     --allow-uid UID           Allow this user (repeatable; default: everybody)\n"
               "     --allow-group GROUP       Allow this group (repeatable)\n"
               "     --admin-group GROUP       May change state over D-Bus besides root\n"
               "                               (default " SMCD_DEFAULT_ADMIN_GROUP " if it exists; \"\" = root only)\n"
               "     --max-conns-per-uid N     Connection endpoints per uid (0 = unlimited)\n"
               "     --max-buf-per-uid BYTES   DMB bytes per uid, K/M/G suffixes (0 = unlimited)\n"
               "     --max-clients-per-uid N   Control connections per uid (default %u, 0 = unlimited)\n"
               "     --buf-clear release|create  When buffers are zeroed (default release)\n"
               "     --rmem BYTES              RMB size of a connect without SO_RCVBUF (16K..1M, default 64K)\n"
               "     --inline auto|on|off      Inline sends (stored; used by SMC-R, default auto)\n"
               "     --state-file FILE         Tunables state file (default %s)\n"
               "     --prepopulate N           Fresh buffers of the default size to create\n"
               "     --no-bus                  Do not offer the D-Bus API (org.smcd.smcd1)\n",
               smc_ctl_runtime_dir(), DEFAULT_MAX_CLIENTS_PER_UID, state);
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

/* "123", "64K", "1M", "2G", "1MiB", "1MB" (powers of 1024). */
static int parse_size(const char *s, uint64_t *ret) {
        unsigned long long v;
        uint64_t mult = 1;
        char *end;
        int r;

        r = parse_digits(s, &v, &end);
        if (r < 0)
                return r;
        switch (toupper((unsigned char) *end)) {
        case 0: break;
        case 'K': mult = 1ULL << 10; end++; break;
        case 'M': mult = 1ULL << 20; end++; break;
        case 'G': mult = 1ULL << 30; end++; break;
        case 'T': mult = 1ULL << 40; end++; break;
        default: return -EINVAL;
        }
        if (mult > 1 && (strcmp(end, "iB") == 0 || strcmp(end, "B") == 0))
                end += strlen(end);
        if (*end)
                return -EINVAL;
        if (v > UINT64_MAX / mult)
                return -ERANGE;
        *ret = v * mult;
        return 0;
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

/* Apply option @key (the long option name) with @value. @where names the source
 * for messages ("command line" or "file:line"). Logs and returns -EINVAL on error. */

/* Append @id to a uid_t / gid_t list (both are 32-bit on Linux). */
static int id_list_append(uint32_t **list, size_t *n, uint32_t id) {
        uint32_t *a = realloc(*list, (*n + 1) * sizeof(uint32_t));

        if (!a)
                return log_error_errno(ENOMEM, "Out of memory.");
        a[(*n)++] = id;
        *list = a;
        return 0;
}

static int apply_option(ManagerConfig *cfg, const char *key, const char *value, const char *where) {
        uint64_t v = 0;
        int r;

        if (!strcmp(key, "runtime-dir")) {
                if (value[0] != '/')
                        return log_error_errno(EINVAL, "%s: runtime-dir must be an absolute path: %s", where, value);
                free(cfg->runtime_dir);
                cfg->runtime_dir = strdup(value);
                return cfg->runtime_dir ? 0 : log_error_errno(ENOMEM, "Out of memory.");
        }
        if (!strcmp(key, "allow-uid") || !strcmp(key, "allow-group")) {
                bool is_uid = key[6] == 'u';
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
        if (!strcmp(key, "admin-group")) {
                struct group *gr;

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
        if (!strcmp(key, "max-conns-per-uid")) {
                r = parse_uint(value, UINT64_MAX, &v);
                if (r < 0)
                        return log_error_errno(EINVAL, "%s: max-conns-per-uid: not a number: %s", where, value);
                cfg->max_conns_per_uid = v;
                return 0;
        }
        if (!strcmp(key, "max-clients-per-uid")) {
                r = parse_uint(value, UINT64_MAX, &v);
                if (r < 0)
                        return log_error_errno(EINVAL, "%s: max-clients-per-uid: not a number: %s", where, value);
                cfg->max_clients_per_uid = v;
                return 0;
        }
        if (!strcmp(key, "max-buf-per-uid")) {
                r = parse_size(value, &v);
                if (r < 0)
                        return log_error_errno(EINVAL, "%s: max-buf-per-uid: not a size (e.g. 64M): %s", where, value);
                cfg->max_buf_per_uid = v;
                return 0;
        }
        if (!strcmp(key, "buf-clear")) {
                if (!strcmp(value, "release"))
                        cfg->buf_clear = SMC_POOL_CLEAR_RELEASE;
                else if (!strcmp(value, "create"))
                        cfg->buf_clear = SMC_POOL_CLEAR_CREATE;
                else
                        return log_error_errno(EINVAL, "%s: buf-clear: expected release or create, not: %s", where, value);
                return 0;
        }
        if (!strcmp(key, "rmem") || !strcmp(key, "inline")) {
                char err[256];

                if (tunable_parse(cfg, key, value, err, sizeof(err)) < 0)
                        return log_error_errno(EINVAL, "%s: %s", where, err);
                return 0;
        }
        if (!strcmp(key, "state-file")) {
                if (value[0] != '/')
                        return log_error_errno(EINVAL, "%s: state-file must be an absolute path: %s", where, value);
                if (strlen(value) >= sizeof(cfg->state_file) - 64)
                        return log_error_errno(EINVAL, "%s: state-file: path too long", where);
                snprintf(cfg->state_file, sizeof(cfg->state_file), "%s", value);
                return 0;
        }
        if (!strcmp(key, "prepopulate")) {
                r = parse_uint(value, 1u << 24, &v);
                if (r < 0)
                        return log_error_errno(EINVAL, "%s: prepopulate: expected a number of buffers (at most %u): %s",
                                               where, 1u << 24, value);
                cfg->prepopulate = (unsigned) v;
                return 0;
        }
        if (!strcmp(key, "verbose")) {
                bool b;
                if (parse_bool(value, &b) < 0)
                        return log_error_errno(EINVAL, "%s: verbose: expected yes or no: %s", where, value);
                log_set_max_level(b ? LOG_DEBUG : LOG_INFO);
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
                if (!*key || !*value) {
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
                ARG_RUNTIME_DIR,
                ARG_ALLOW_UID,
                ARG_ALLOW_GROUP,
                ARG_ADMIN_GROUP,
                ARG_MAX_CONNS,
                ARG_MAX_BUF,
                ARG_MAX_CLIENTS,
                ARG_BUF_CLEAR,
                ARG_PREPOPULATE,
                ARG_NO_BUS,
                ARG_RMEM,
                ARG_INLINE,
                ARG_STATE_FILE,
        };
        static const struct option options[] = {
                { "help", no_argument, NULL, 'h' },
                { "version", no_argument, NULL, ARG_VERSION },
                { "verbose", no_argument, NULL, 'v' },
                { "config", required_argument, NULL, ARG_CONFIG },
                { "runtime-dir", required_argument, NULL, ARG_RUNTIME_DIR },
                { "allow-uid", required_argument, NULL, ARG_ALLOW_UID },
                { "allow-group", required_argument, NULL, ARG_ALLOW_GROUP },
                { "admin-group", required_argument, NULL, ARG_ADMIN_GROUP },
                { "max-conns-per-uid", required_argument, NULL, ARG_MAX_CONNS },
                { "max-buf-per-uid", required_argument, NULL, ARG_MAX_BUF },
                { "max-clients-per-uid", required_argument, NULL, ARG_MAX_CLIENTS },
                { "buf-clear", required_argument, NULL, ARG_BUF_CLEAR },
                { "prepopulate", required_argument, NULL, ARG_PREPOPULATE },
                { "no-bus", no_argument, NULL, ARG_NO_BUS },
                { "rmem", required_argument, NULL, ARG_RMEM },
                { "inline", required_argument, NULL, ARG_INLINE },
                { "state-file", required_argument, NULL, ARG_STATE_FILE },
                {}
        };
        int c, r;

        while ((c = getopt_long(argc, argv, "hv", options, NULL)) >= 0) {
                const char *key = NULL;

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
                case ARG_RUNTIME_DIR: key = "runtime-dir"; break;
                case ARG_ALLOW_UID: key = "allow-uid"; break;
                case ARG_ALLOW_GROUP: key = "allow-group"; break;
                case ARG_ADMIN_GROUP: key = "admin-group"; break;
                case ARG_MAX_CONNS: key = "max-conns-per-uid"; break;
                case ARG_MAX_BUF: key = "max-buf-per-uid"; break;
                case ARG_MAX_CLIENTS: key = "max-clients-per-uid"; break;
                case ARG_BUF_CLEAR: key = "buf-clear"; break;
                case ARG_PREPOPULATE: key = "prepopulate"; break;
                case ARG_RMEM: key = "rmem"; break;
                case ARG_INLINE: key = "inline"; break;
                case ARG_STATE_FILE: key = "state-file"; break;
                case ARG_NO_BUS:
                        cfg->no_bus = true;
                        continue;
                default:
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

static void raise_nofile_limit(void) {
        struct rlimit rl;

        /* fds in flight in accept channels count against RLIMIT_NOFILE */
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
                rl.rlim_cur = rl.rlim_max;
                (void) setrlimit(RLIMIT_NOFILE, &rl);
        }
}

int main(int argc, char *argv[]) {
        ManagerConfig cfg = {};
        Manager *m = NULL;
        sigset_t mask;
        int r;

        cfg.max_clients_per_uid = DEFAULT_MAX_CLIENTS_PER_UID;
        {
                struct group *gr = getgrnam(SMCD_DEFAULT_ADMIN_GROUP);

                cfg.admin_gid = gr ? gr->gr_gid : (gid_t) -1;
        }
        cfg.rmem = SMC_DMB_DEFAULT_SIZE;
        tunables_default_path(cfg.state_file, sizeof(cfg.state_file));
        cfg.runtime_dir = strdup(smc_ctl_runtime_dir());
        if (!cfg.runtime_dir)
                return EXIT_FAILURE;
        r = parse_argv(argc, argv, &cfg);
        if (r <= 0) {
                manager_config_done(&cfg);
                return r < 0 ? EXIT_USAGE : EXIT_SUCCESS;
        }

        /* the options are the defaults; the state file (smcctl tunables set) overrides them */
        (void) tunables_load(&cfg, cfg.state_file);

        raise_nofile_limit();
        (void) signal(SIGPIPE, SIG_IGN);
        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        sigaddset(&mask, SIGUSR1);
        sigprocmask(SIG_BLOCK, &mask, NULL);

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
