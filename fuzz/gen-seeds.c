/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Writes the seed corpora of the fuzz targets (fuzz/corpus/<target>/) with the
 * project's own encoders and the hand-written vectors of tests/test-smcr-wire.c
 * (included below, its main() renamed): valid control messages of every type and
 * version, CLC / CDC / LLC messages, tunables / policy / pnet state files as smcd
 * saves them, rules, pnet entries, smcctl command lines and SMCRUN_INHERIT entries.
 * fuzz/gen-wire-seeds.py adds the real kernel bytes. Usage: gen-seeds CORPUSDIR
 * (built with -Dfuzz=true; the corpora in the repository were made by it).
 */

int test_smcr_wire_main(int argc, char **argv);
#define main test_smcr_wire_main
#include "../tests/test-smcr-wire.c"
#undef main

#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctl-proto.h"
#include "policy.h"
#include "smc-clc.h"
#include "socket-internal.h"
#include "tunables.h"

int main(int argc, char **argv);

static const char *outdir;
static unsigned n_written;

static void seed(const char *target, const char *name, const void *a, size_t an, const void *b, size_t bn) {
        char path[4096];
        int fd;

        snprintf(path, sizeof(path), "%s/%s", outdir, target);
        (void) mkdir(path, 0755);
        snprintf(path, sizeof(path), "%s/%s/%s", outdir, target, name);
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0 || (an && write(fd, a, an) != (ssize_t) an) || (bn && write(fd, b, bn) != (ssize_t) bn)) {
                perror(path);
                exit(1);
        }
        close(fd);
        n_written++;
}

static void seed_file(const char *target, const char *name, uint8_t prefix, const char *path) {
        char buf[65536];
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        ssize_t n;

        if (fd < 0 || (n = read(fd, buf, sizeof(buf))) < 0) {
                perror(path);
                exit(1);
        }
        close(fd);
        seed(target, name, &prefix, 1, buf, (size_t) n);
}

/* ---- control protocol ---- */

static void ctl_addr(struct smc_ctl_addr *a, uint16_t family, uint16_t port) {
        memset(a, 0, sizeof(*a));
        a->family = family;
        a->port = port;
        if (family == AF_INET) {
                a->addr[0] = 127;
                a->addr[3] = 1;
        } else
                a->addr[15] = 1;
}

static void ctl_seed(union smc_ctl_msg *m, enum smc_ctl_dir dir, const char *what) {
        uint8_t head[2] = { dir == SMC_CTL_TO_CLIENT ? 1 : 0, 0 };
        char name[64];
        int n = smc_ctl_msg_nfds(m);

        if (smc_ctl_decode(m, m->hdr.len, (size_t) n, false, dir) != 0) {
                fprintf(stderr, "ctl seed %s v%u does not decode\n", what, m->hdr.version);
                exit(1);
        }
        head[1] = (uint8_t) n;
        snprintf(name, sizeof(name), "v%u-%s", m->hdr.version, what);
        seed("ctl-proto", name, head, 2, m, m->hdr.len);
}

static void gen_ctl(void) {
        union smc_ctl_msg m;

        for (uint16_t v = SMC_CTL_VERSION_MIN; v <= SMC_CTL_VERSION; v++) {
#define INIT(type) (smc_ctl_init_v(&m, (type), 7, v) == 0)
                if (INIT(SMC_CTL_HELLO)) {
                        m.hello.proto_min = 1;
                        m.hello.proto_max = 3;
                        ctl_seed(&m, SMC_CTL_TO_DAEMON, "hello");
                }
                if (INIT(SMC_CTL_HELLO_REPLY)) {
                        m.hello_reply.version = v;
                        m.hello_reply.client_id = 42;
                        ctl_seed(&m, SMC_CTL_TO_CLIENT, "hello-reply");
                }
                if (INIT(SMC_CTL_LISTEN)) {
                        ctl_addr(&m.listen.addr, AF_INET6, 8080);
                        m.listen.backlog = 128;
                        if (v >= 2)
                                m.listen.rcvbuf = 65536;
                        if (v >= 5)
                                m.listen.flags = SMC_CTL_LISTEN_F_JOIN;
                        ctl_seed(&m, SMC_CTL_TO_DAEMON, "listen");
                }
                if (INIT(SMC_CTL_LISTEN_REPLY)) {
                        m.listen_reply.listener_id = 3;
                        if (v >= 3)
                                m.listen_reply.flags = SMC_CTL_LISTEN_SMCR;
                        if (v >= 5)
                                m.listen_reply.flags |= SMC_CTL_LISTEN_JOINED | SMC_CTL_LISTEN_NB_KNOWN;
                        ctl_seed(&m, SMC_CTL_TO_CLIENT, "listen-reply");
                }
                if (INIT(SMC_CTL_UNLISTEN)) {
                        m.unlisten.listener_id = 3;
                        ctl_seed(&m, SMC_CTL_TO_DAEMON, "unlisten");
                }
                if (INIT(SMC_CTL_CONNECT)) {
                        ctl_addr(&m.connect.dst, AF_INET, 80);
                        ctl_addr(&m.connect.src, AF_INET, 0);
                        m.connect.sndbuf = 16384;
                        ctl_seed(&m, SMC_CTL_TO_DAEMON, "connect");
                }
                if (INIT(SMC_CTL_CONNECT_REPLY)) {
                        m.conn.conn_id = 9;
                        m.conn.mode = SMC_CTL_MODE_SMCD;
                        m.conn.rx = (struct smc_ctl_buf) { .id = 1, .size = 65536, .flags = SMC_CTL_BUF_FD };
                        m.conn.tx = (struct smc_ctl_buf) { .id = 2, .size = 16384, .flags = 0 };
                        ctl_addr(&m.conn.local, AF_INET, 80);
                        ctl_addr(&m.conn.peer, AF_INET, 40000);
                        if (v >= 2)
                                m.conn.params = (struct smc_ctl_conn_params) { .busy_poll_us = 50, .autocork_size = 65536 };
                        ctl_seed(&m, SMC_CTL_TO_CLIENT, "connect-reply-smcd");
                        memset(&m.conn.conn_id, 0, sizeof(m) - offsetof(struct smc_ctl_conn, conn_id));
                        m.conn.mode = SMC_CTL_MODE_TCP;
                        m.conn.fallback_reason = 0x03010000;
                        ctl_seed(&m, SMC_CTL_TO_CLIENT, "connect-reply-tcp");
                        if (v >= 3) {
                                m.conn.mode = SMC_CTL_MODE_SMCR_PENDING;
                                m.conn.fallback_reason = 0;
                                ctl_seed(&m, SMC_CTL_TO_CLIENT, "connect-reply-smcr-pending");
                        }
                }
                if (INIT(SMC_CTL_NEW_CONN)) {
                        m.conn.conn_id = 10;
                        m.conn.mode = v >= 3 ? SMC_CTL_MODE_SMCR : SMC_CTL_MODE_SMCD;
                        m.conn.rx = (struct smc_ctl_buf) { .id = 5, .size = 1u << 20, .flags = SMC_CTL_BUF_FD };
                        m.conn.tx = (struct smc_ctl_buf) { .id = 6, .size = 32768, .flags = SMC_CTL_BUF_FD };
                        ctl_addr(&m.conn.local, AF_INET6, 80);
                        ctl_addr(&m.conn.peer, AF_INET6, 40001);
                        ctl_seed(&m, SMC_CTL_TO_CLIENT, "new-conn");
                        if (v >= 3) {
                                m.conn.conn_id = 0;
                                m.conn.mode = SMC_CTL_MODE_TCP;
                                m.conn.fallback_reason = 0x03030000;
                                memset(&m.conn.rx, 0, sizeof(m.conn.rx));
                                memset(&m.conn.tx, 0, sizeof(m.conn.tx));
                                ctl_seed(&m, SMC_CTL_TO_CLIENT, "new-conn-tcp");
                        }
                }
                if (INIT(SMC_CTL_CLOSE)) {
                        m.close.conn_id = 9;
                        m.close.flags = SMC_CTL_CLOSE_ABORT;
                        ctl_seed(&m, SMC_CTL_TO_DAEMON, "close");
                }
                if (INIT(SMC_CTL_OK))
                        ctl_seed(&m, SMC_CTL_TO_CLIENT, "ok");
                if (INIT(SMC_CTL_ERROR)) {
                        m.error.error = -EPERM;
                        m.error.detail = 0x03010000;
                        snprintf(m.error.msg, sizeof(m.error.msg), "uid 1000 is not allowed to use smcd");
                        ctl_seed(&m, SMC_CTL_TO_CLIENT, "error");
                }
                if (INIT(SMC_CTL_FALLBACK)) {
                        ctl_addr(&m.fallback.local, AF_INET, 40002);
                        ctl_addr(&m.fallback.peer, AF_INET, 80);
                        m.fallback.role = SMC_CTL_ROLE_CLIENT;
                        m.fallback.reason = 0x03010000;
                        ctl_seed(&m, SMC_CTL_TO_DAEMON, "fallback");
                }
                if (INIT(SMC_CTL_SMCR)) {
                        m.smcr.role = SMC_CTL_ROLE_SERVER;
                        m.smcr.listener_id = 3;
                        ctl_seed(&m, SMC_CTL_TO_DAEMON, "smcr");
                }
                if (INIT(SMC_CTL_ADOPT)) {
                        m.adopt.conn_id = 9;
                        ctl_seed(&m, SMC_CTL_TO_DAEMON, "adopt");
                }
                if (INIT(SMC_CTL_ADOPT_REPLY)) {
                        m.conn.conn_id = 9;
                        m.conn.mode = SMC_CTL_MODE_SMCD;
                        m.conn.rx = (struct smc_ctl_buf) { .id = 1, .size = 65536, .flags = SMC_CTL_BUF_FD };
                        m.conn.tx = (struct smc_ctl_buf) { .id = 2, .size = 65536, .flags = SMC_CTL_BUF_FD };
                        ctl_addr(&m.conn.local, AF_INET, 80);
                        ctl_addr(&m.conn.peer, AF_INET, 40000);
                        ctl_seed(&m, SMC_CTL_TO_CLIENT, "adopt-reply");
                }
                if (INIT(SMC_CTL_REREG)) {
                        m.rereg.conn_id = 9;
                        m.rereg.rx_token = 0x5ec0de0000000001ull;
                        m.rereg.tx_token = 0x5ec0de0000000002ull;
                        m.rereg.role = SMC_CTL_ROLE_SERVER;
                        m.rereg.instance = 0x9e3779b9u;
                        m.rereg.rx_size = 65536;
                        m.rereg.tx_size = 16384;
                        ctl_addr(&m.rereg.local, AF_INET, 80);
                        ctl_addr(&m.rereg.peer, AF_INET, 40000);
                        ctl_seed(&m, SMC_CTL_TO_DAEMON, "rereg");
                }
                if (INIT(SMC_CTL_REREG_REPLY)) {
                        m.rereg_reply.conn_id = 10;
                        ctl_seed(&m, SMC_CTL_TO_CLIENT, "rereg-reply");
                }
                if (INIT(SMC_CTL_REREG_DONE)) {
                        m.rereg_done.instance = 0x9e3779b9u;
                        m.rereg_done.flags = SMC_CTL_REREG_DONE_ALL | SMC_CTL_REREG_DONE_SERVERS;
                        ctl_seed(&m, SMC_CTL_TO_DAEMON, "rereg-done");
                }
                if (INIT(SMC_CTL_ADOPT_FD))
                        ctl_seed(&m, SMC_CTL_TO_DAEMON, "adopt-fd");
                if (INIT(SMC_CTL_REQUEUE)) {
                        m.requeue.listener_id = 3;
                        m.requeue.conn_id = 0x5eed5eed5eed5eedULL;
                        ctl_seed(&m, SMC_CTL_TO_DAEMON, "requeue");
                }
                if (INIT(SMC_CTL_LISTEN_DEPOSIT)) {
                        m.listen_deposit.listener_id = 3;
                        m.listen_deposit.flags = SMC_CTL_DEPOSIT_NONBLOCK;
                        ctl_seed(&m, SMC_CTL_TO_DAEMON, "listen-deposit");
                }
                if (INIT(SMC_CTL_FALLBACK_COUNT)) {
                        m.fallback_count.reason = SMCD_DECL_SHORTCONN;
                        m.fallback_count.role = SMC_CTL_ROLE_CLIENT;
                        m.fallback_count.count = 64;
                        ctl_seed(&m, SMC_CTL_TO_DAEMON, "fallback-count");
                }
#undef INIT
        }
}

/* ---- CLC, CDC, LLC ---- */

static void gen_wire(void) {
        uint8_t b[SMC_LLC_V2_MAX_LEN];
        struct smc_clc_decline d = {};
        struct smc_cdc_msg c = {};
        ssize_t n;

        seed("clc", "test-prop-v1", b, vec_prop_v1(b), NULL, 0);
        seed("clc", "test-prop-v2", b, vec_prop_v2(b), NULL, 0);
        seed("clc", "test-prop-v2-r-only", b, vec_prop_v2_r_only(b), NULL, 0);
        seed("clc", "test-prop-v1-d", b, vec_prop_v1_d(b), NULL, 0);
        seed("clc", "test-accept-v1", b, vec_accept_v1(b), NULL, 0);
        seed("clc", "test-confirm-v2", b, vec_confirm_v2(b), NULL, 0);
        seed("clc", "test-prop-v1-b", b, vec_prop_v1_b(b), NULL, 0);
        seed("clc", "test-accept-d-v1", b, vec_accept_d_v1(b), NULL, 0);
        seed("clc", "test-confirm-d-v1", b, vec_confirm_d_v1(b), NULL, 0);
        seed("clc", "test-accept-d-v2", b, vec_accept_d_v2(b), NULL, 0);
        d.version = 1;
        d.diag = 0x03030000;
        memcpy(d.peer_id, PEER_ID, 8);
        n = smc_clc_decline_encode(&d, b, sizeof(b));
        seed("clc", "enc-decline-v1", b, (size_t) n, NULL, 0);
        d.version = 2;
        d.os_type = 2;
        d.out_of_sync = true;
        n = smc_clc_decline_encode(&d, b, sizeof(b));
        seed("clc", "enc-decline-v2", b, (size_t) n, NULL, 0);
        {
                /* a proposal and a decline back to back, as one TCP stream */
                uint8_t s[2048];
                size_t l = vec_prop_v1(s);

                n = smc_clc_decline_encode(&d, s + l, sizeof(s) - l);
                seed("clc", "stream-prop-decline", s, l + (size_t) n, NULL, 0);
        }

        c.seqno = 1;
        c.token = 0x1234;
        c.prod_wrap = 1;
        c.prod_count = 4096;
        c.cons_count = 100;
        c.prod_flags = SMC_CDC_PROD_CONS_UPD_REQ;
        smc_cdc_encode(&c, b);
        seed("cdc", "enc-cdc", b, SMC_CDC_LEN, NULL, 0);
        c.conn_flags = SMC_CDC_CONN_DONE_WRITING | SMC_CDC_CONN_CLOSED;
        smc_cdc_encode(&c, b);
        seed("cdc", "enc-cdc-closed", b, SMC_CDC_LEN, NULL, 0);

        seed("llc", "test-add-link-v2", b, vec_add_link_v2(b), NULL, 0);
        for (uint8_t t = 1; t <= 9; t++)
                for (int v2 = 0; v2 <= 1; v2++) {
                        struct smc_llc_msg m = {};
                        char name[32];

                        m.type = t;
                        m.v2 = v2;
                        if (t == SMC_LLC_ADD_LINK) {
                                m.add_link.qp_mtu = 3;
                                m.add_link.link_num = 2;
                        }
                        if (t == SMC_LLC_DELETE_RKEY)
                                m.delete_rkey.num_rkeys = 2;
                        if (t == SMC_LLC_REQ_ADD_LINK) {
                                m.req_add_link.n_gids = 2;
                                memcpy(m.req_add_link.gids[0], GID_V2, 16);
                                memcpy(m.req_add_link.gids[1], GID_V2B, 16);
                        }
                        n = smc_llc_encode(&m, b, sizeof(b));
                        if (n <= 0)
                                continue;
                        snprintf(name, sizeof(name), "enc-llc-%s%u", v2 ? "v2-" : "", t);
                        seed("llc", name, b, (size_t) n, NULL, 0);
                }
}

/* ---- tunables, policy, pnet ---- */

static void gen_state(void) {
        char dir[] = "/tmp/smcd-gen-seeds-XXXXXX", path[4096], err[512];
        ManagerConfig cfg = {};
        PolicyTable pt = {};
        PnetTable nt = {};
        uint32_t id;
        static const char *const rules[] = {
                "connect peer-port 5432 prefix 10.0.0.0/8 action tcp",
                "listen local-port 8000-8999 action smc",
                "both prefix 2001:db8::/32 position 1 action tcp",
                "peer-port 22 action tcp",
                "prefix 192.168.1.7 action smc",
        };
        static const struct {
                const char *key, *value;
        } values[] = {
                { "sndbuf", "64K" }, { "rmem", "1M" }, { "max_buf_per_uid", "2GiB" }, { "busy_poll", "50" },
                { "ueid", "SMCD-USERSPACE, other.eid-2" }, { "inline", "auto" }, { "cq_poll", "thread" },
                { "buf_clear", "create" }, { "test_link_time", "3600" }, { "autocork_size", "1KB" },
        };

        if (!mkdtemp(dir)) {
                perror("mkdtemp");
                exit(1);
        }
        /* tunables.json as smcd writes it: the defaults, then some set */
        tunables_set_defaults(&cfg);
        snprintf(path, sizeof(path), "%s/tunables.json", dir);
        if (tunables_save(&cfg, path) < 0)
                exit(1);
        seed_file("tunables", "state-defaults", 0, path);
        for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++)
                if (tunable_parse(&cfg, values[i].key, values[i].value, err, sizeof(err)) < 0) {
                        fprintf(stderr, "%s\n", err);
                        exit(1);
                }
        if (tunables_save(&cfg, path) < 0)
                exit(1);
        seed_file("tunables", "state-set", 0, path);
        {
                static const char old[] = "{ \"max_conns_per_uid\": \"100\", \"sndbuf\": \"16384\" }\n";
                seed("tunables", "state-old", "\0", 1, old, sizeof(old) - 1);
        }
        for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
                uint8_t head[2] = { 1, 0 };
                char name[64];

                for (size_t k = 0; k < tunables_count(); k++)
                        if (strcmp(tunable_key(k), values[i].key) == 0)
                                head[1] = (uint8_t) k;
                snprintf(name, sizeof(name), "value-%s", values[i].key);
                seed("tunables", name, head, 2, values[i].value, strlen(values[i].value));
        }
        {
                static const char kv[] = "max_conns_per_uid\0" "1000";
                uint8_t head[2] = { 1, 255 };
                seed("tunables", "key-value", head, 2, kv, sizeof(kv) - 1);
        }

        /* policy.json and pnet.json as smcd writes them */
        snprintf(path, sizeof(path), "%s/%s", dir, POLICY_STATE_NAME);
        if (policy_load(&pt, path) < 0)
                exit(1);
        for (size_t i = 0; i < sizeof(rules) / sizeof(rules[0]); i++) {
                uint8_t head = 2;
                char name[32];

                if (policy_add(&pt, rules[i], &id, err, sizeof(err)) < 0) {
                        fprintf(stderr, "%s\n", err);
                        exit(1);
                }
                snprintf(name, sizeof(name), "rule-%zu", i + 1);
                seed("policy", name, &head, 1, rules[i], strlen(rules[i]));
        }
        seed_file("policy", "state-policy", 0, path);
        policy_done(&pt);
        snprintf(path, sizeof(path), "%s/%s", dir, PNET_STATE_NAME);
        if (pnet_load(&nt, path) < 0 || pnet_add(&nt, "eth0", "mlx5_0", 1, "NET1", err, sizeof(err)) < 0 ||
            pnet_add(&nt, "veth-a", "rxe0", 2, NULL, err, sizeof(err)) < 0) {
                fprintf(stderr, "pnet: %s\n", err);
                exit(1);
        }
        seed_file("policy", "state-pnet", 1, path);
        pnet_done(&nt);
        {
                static const char e1[] = "eth0\0mlx5_0\0NET1", e2[] = "enp1s0f1\0rxe0";
                uint8_t head[2] = { 3, 1 };

                seed("policy", "pnet-entry", head, 2, e1, sizeof(e1) - 1);
                head[1] = 2;
                seed("policy", "pnet-entry-noid", head, 2, e2, sizeof(e2) - 1);
        }
        unlink(path);
        snprintf(path, sizeof(path), "%s/%s", dir, POLICY_STATE_NAME);
        unlink(path);
        snprintf(path, sizeof(path), "%s/tunables.json", dir);
        unlink(path);
        rmdir(dir);
}

/* ---- smcctl command lines, SMCRUN_INHERIT entries ---- */

static void gen_args(void) {
        static const struct {
                const char *name;
                const char *words;
                size_t len;
        } lines[] = {
#define L(n, s) { n, s, sizeof(s) - 1 }
                L("stats", "stats"),
                L("stats-reset", "-j\0stats\0reset"),
                L("connections", "-jp\0conn\0--mode=smcd\0--port\0" "80"),
                L("devices", "-d\0dev"),
                L("linkgroups", "linkgroups\0show"),
                L("tunables-get", "tunables\0get\0sndbuf"),
                L("tunables-set", "tunables\0set\0sndbuf=64K\0ueid=A,B"),
                L("set", "set\0inline=on"),
                L("get", "--json\0get\0rmem"),
                L("policy-add", "policy\0add\0connect\0peer-port\0" "5432\0action\0tcp"),
                L("policy-del", "pol\0del\0" "3"),
                L("pnet-add", "pnet\0add\0eth0\0mlx5_0\0" "1\0pnetid\0NET1"),
                L("pnet-del", "pnet\0del\0eth0"),
                L("help", "--help"),
                L("version", "--version"),
#undef L
        };
        struct smc_inherit_entry e = { .x = 7, .t = -1, .conn_id = 0x5df99dbe1e150455ull, .rx_id = 2, .rx_size = 65536,
                                       .tx_id = 1, .tx_size = 65536, .flags = SMC_INHERIT_F_CORK, .owed = 0 };
        char buf[256];
        int n;

        for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++)
                seed("smcctl", lines[i].name, lines[i].words, lines[i].len, NULL, 0);
        n = smc_inherit_format_entry(&e, buf, sizeof(buf));
        seed("inherit", "entry", buf, (size_t) n, NULL, 0);
        e = (struct smc_inherit_entry) { .x = 1023, .t = 5, .conn_id = UINT64_MAX, .rx_id = 0xabcdef, .rx_size = 1u << 20,
                                         .tx_id = 0x123456789abcdefull, .tx_size = 16384,
                                         .flags = SMC_INHERIT_F_INET6 | SMC_INHERIT_F_SHARED | SMC_INHERIT_F_RCVTIMEO,
                                         .owed = 65536, .unpub = 16384 };
        n = smc_inherit_format_entry(&e, buf, sizeof(buf));
        seed("inherit", "entry-limits", buf, (size_t) n, NULL, 0);
        {
                struct smc_inherit_listener l = { .fd = 3, .chan = 4, .listener_id = 0x2a,
                                                  .flags = SMC_INHERIT_LF_INET6 | SMC_INHERIT_LF_SMCR };

                n = smc_inherit_format_listener(&l, buf, sizeof(buf));
                seed("inherit", "listener", buf, (size_t) n, NULL, 0);
                l.chan = -1;
                n = smc_inherit_format_listener(&l, buf, sizeof(buf));
                seed("inherit", "listener-old", buf, (size_t) n, NULL, 0);
        }
}

int main(int argc, char **argv) {
        if (argc != 2) {
                fprintf(stderr, "usage: %s CORPUSDIR\n", argv[0]);
                return 2;
        }
        outdir = argv[1];
        (void) mkdir(outdir, 0755);
        gen_ctl();
        gen_wire();
        gen_state();
        gen_args();
        printf("%u seeds written to %s\n", n_written, outdir);
        return 0;
}
