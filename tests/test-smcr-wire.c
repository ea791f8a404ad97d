/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Unit tests of smcd/smcr-wire.c, the SMC CLC / CDC / LLC codec.
 *
 * Every byte vector here is written by hand at the offsets of the tables in
 * ../shared/smc-wire-spec.md (section numbers in the comments), never produced by the
 * encoder. For each: decode(vector) gives the expected fields, encode(fields) gives
 * the vector byte for byte, and every truncation is refused with the output left
 * untouched. Then the rejection cases, the Linux byte-order quirks of LLC v2, and a
 * deterministic random / mutation loop through every decoder (run it under
 * -Db_sanitize=address,undefined) with a decode -> encode -> decode round-trip check.
 */

#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "smcr-wire.h"

#define PUT(b, off, ...)                                                                   \
        do {                                                                               \
                static const uint8_t _x[] = { __VA_ARGS__ };                               \
                memcpy((b) + (off), _x, sizeof(_x));                                       \
        } while (0)
#define ELEMENTSOF(a) (sizeof(a) / sizeof((a)[0]))

/* opaque test data (addresses, ids) */
static const uint8_t PEER_ID[8] = { 0x12, 0x34, 0x02, 0x00, 0x00, 0xaa, 0xbb, 0xcc };
static const uint8_t MAC[6] = { 0x02, 0x00, 0x00, 0xaa, 0xbb, 0xcc };
static const uint8_t MAC2[6] = { 0x02, 0x00, 0x00, 0xdd, 0xee, 0xff };
static const uint8_t GID_V1[16] = { 0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x00, 0x00, 0x00, 0xff, 0xfe, 0xaa, 0xbb, 0xcc };
static const uint8_t GID_V2[16] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1 };
static const uint8_t GID_V2B[16] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 1, 1 };
static const uint8_t V6_A[16] = { 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x01 };
static const uint8_t V6_B[16] = { 0xfd, 0x00, 0x12, 0x34 };
/* 32 bytes, blank padded */
static const char UEID[33] = "SMCD-TEST-UEID-1                ";
static const char SEID[33] = "IBM-SYSZ-ISMSEID00000000ABCD1234";
static const char HOST[33] = "vmhost                          ";

/* ------------------------------------------------------------------------- */
/* helpers */

static void check_bytes(const char *what, const uint8_t *got, ssize_t got_n, const uint8_t *want, size_t want_n) {
        CHECK(got_n == (ssize_t) want_n, "%s: encoded %zd bytes, want %zu", what, got_n, want_n);
        if (got_n != (ssize_t) want_n)
                return;
        for (size_t i = 0; i < want_n; i++)
                if (got[i] != want[i]) {
                        CHECK(got[i] == want[i], "%s: byte %zu is 0x%02x, want 0x%02x", what, i, got[i], want[i]);
                        return;
                }
        CHECK(true, "%s", what);
}

typedef int (*dec_fn)(const uint8_t *buf, size_t len, void *out);

static int dec_hdr(const uint8_t *b, size_t n, void *o) {
        return smc_clc_decode_hdr(b, n, o);
}
static int dec_prop(const uint8_t *b, size_t n, void *o) {
        return smc_clc_proposal_decode(b, n, o);
}
static int dec_acc(const uint8_t *b, size_t n, void *o) {
        return smc_clc_accept_r_decode(b, n, o);
}
static int dec_accd(const uint8_t *b, size_t n, void *o) {
        return smc_clc_accept_d_decode(b, n, o);
}
static int dec_decl(const uint8_t *b, size_t n, void *o) {
        return smc_clc_decline_decode(b, n, o);
}
static int dec_cdc(const uint8_t *b, size_t n, void *o) {
        return smc_cdc_decode(b, n, o);
}
static struct smc_llc_rkey_entry scratch_rkeys[SMC_LLC_MAX_ADD_LINK_RKEYS];
static int dec_llc(const uint8_t *b, size_t n, void *o) {
        struct smc_llc_msg *m = o;

        m->add_link.rkeys = scratch_rkeys;
        return smc_llc_decode(b, n, m);
}

/* Every proper prefix of @v must be refused with -EBADMSG and leave *out as it was.
 * (For LLC the rkeys pointer is set by dec_llc, so the check skips that struct.) */
static void check_truncations(const char *what, dec_fn dec, const uint8_t *v, size_t n, size_t out_size, size_t min_ok) {
        uint8_t out[2048], before[2048];

        for (size_t l = 0; l < n; l++) {
                uint8_t *copy = malloc(l ? l : 1); /* exact-size heap copy: ASan sees overreads */
                int r;

                memcpy(copy, v, l);
                memset(out, 0xa5, sizeof(out));
                memcpy(before, out, sizeof(out));
                r = dec(copy, l, out);
                if (l >= min_ok) {
                        free(copy);
                        continue;
                }
                CHECK(r == -EBADMSG, "%s truncated to %zu: got %d, want -EBADMSG", what, l, r);
                if (dec != dec_llc)
                        CHECK(memcmp(out, before, out_size) == 0, "%s truncated to %zu: output changed", what, l);
                free(copy);
        }
}

/* decode from an exact-size heap copy */
static int dec_exact(dec_fn dec, const uint8_t *v, size_t n, void *out) {
        uint8_t *copy = malloc(n ? n : 1);
        int r;

        memcpy(copy, v, n);
        r = dec(copy, n, out);
        free(copy);
        return r;
}

/* ------------------------------------------------------------------------- */
/* CLC PROPOSAL (2.3) */

/* v1 SMC-R proposal, IP-area offset 0 (RFC 7609 layout), IPv4 prefix + 2 IPv6 prefixes:
 * 40 + 8 + 2 * 17 + 4 = 86 bytes */
static size_t vec_prop_v1(uint8_t *b) {
        memset(b, 0, 86);
        PUT(b, 0, 0xe2, 0xd4, 0xc3, 0xd9, 0x01, 0x00, 86, 0x10); /* R, type 1, len, v1 typev1 R */
        memcpy(b + 8, PEER_ID, 8);
        memcpy(b + 16, GID_V1, 16);
        memcpy(b + 32, MAC, 6);
        PUT(b, 38, 0x00, 0x00);                                /* IP-area offset 0 */
        PUT(b, 40, 192, 168, 1, 0, 24, 0x00, 0x00, 0x02);      /* subnet, /24, rsv, 2 IPv6 */
        memcpy(b + 48, V6_A, 16);
        b[64] = 64;
        memcpy(b + 65, V6_B, 16);
        b[81] = 48;
        PUT(b, 82, 0xe2, 0xd4, 0xc3, 0xd9);
        return 86;
}

static void fill_prop_v1(struct smc_clc_proposal *p) {
        memset(p, 0, sizeof(*p));
        p->typev1 = SMC_TYPE_R;
        p->typev2 = SMC_TYPE_N;
        memcpy(p->peer_id, PEER_ID, 8);
        memcpy(p->gid, GID_V1, 16);
        memcpy(p->mac, MAC, 6);
        memcpy(p->ipv4_prefix, (uint8_t[]) { 192, 168, 1, 0 }, 4);
        p->ipv4_prefix_len = 24;
        p->n_ipv6 = 2;
        memcpy(p->ipv6[0].prefix, V6_A, 16);
        p->ipv6[0].len = 64;
        memcpy(p->ipv6[1].prefix, V6_B, 16);
        p->ipv6[1].len = 48;
}

/* Linux-style v2 proposal: R+D on v1 and v2 (byte 7 = 0x2F), IPv4 prefix, 1 UEID,
 * SMC-Dv2 extension with 2 ISM entries (one emulated ISM device = 2 entries).
 * 40 + 40 + 8 + (40 + 32) + (48 + 20) + 4 = 232 */
static size_t vec_prop_v2(uint8_t *b) {
        memset(b, 0, 232);
        PUT(b, 0, 0xe2, 0xd4, 0xc3, 0xd9, 0x01, 0x00, 232, 0x2f);
        memcpy(b + 8, PEER_ID, 8);
        memcpy(b + 16, GID_V1, 16);
        memcpy(b + 32, MAC, 6);
        PUT(b, 38, 0x00, 40);                                     /* IP-area offset 40 */
        PUT(b, 40, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, /* ISM GID */
           0x01, 0x23,                                             /* CHID */
           0x00, 36);                                              /* v2-ext offset 28 + 8 */
        PUT(b, 80, 10, 0, 0, 0, 8, 0, 0, 0);                      /* IP area: 10/8, 0 IPv6 */
        /* v2 extension at 52 + 36 = 88 */
        PUT(b, 88, 1, 2, 0, 0x11, 0, 0, 0x00, 64);                /* e=1 g=2, rel 1 + SEID, SMC-Dv2 off 32+32 */
        memcpy(b + 96, GID_V2, 16);
        PUT(b, 112, 0xff, 0x02, 0x00, 0x01);                      /* max_conns, max_links, features */
        memcpy(b + 128, UEID, 32);
        /* SMC-Dv2 extension at 88 + 8 + 64 = 160 */
        memcpy(b + 160, SEID, 32);
        PUT(b, 208, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8, 0xff, 0xff,
           0xb1, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7, 0xb8, 0xff, 0xff);
        PUT(b, 228, 0xe2, 0xd4, 0xc3, 0xd9);
        return 232;
}

static void fill_prop_v2(struct smc_clc_proposal *p) {
        memset(p, 0, sizeof(*p));
        p->typev1 = SMC_TYPE_B;
        p->typev2 = SMC_TYPE_B;
        memcpy(p->peer_id, PEER_ID, 8);
        memcpy(p->gid, GID_V1, 16);
        memcpy(p->mac, MAC, 6);
        p->has_smcd_area = true;
        p->ism_gid = 0x1122334455667788ull;
        p->ism_chid = 0x0123;
        memcpy(p->ipv4_prefix, (uint8_t[]) { 10, 0, 0, 0 }, 4);
        p->ipv4_prefix_len = 8;
        p->n_ueids = 1;
        memcpy(p->ueids[0], UEID, 32);
        p->release = 1;
        p->seid_enabled = true;
        memcpy(p->roce_v2_gid, GID_V2, 16);
        p->max_conns = 255;
        p->max_links = 2;
        p->feature_mask = 1;
        memcpy(p->seid, SEID, 32);
        p->n_ism = 2;
        p->ism[0].gid = 0xa1a2a3a4a5a6a7a8ull;
        p->ism[0].chid = 0xffff;
        p->ism[1].gid = 0xb1b2b3b4b5b6b7b8ull;
        p->ism[1].chid = 0xffff;
}

/* v2, SMC-Rv2 only (typev1 N, typev2 R: byte 7 = 0x22), no IP area: offset 0,
 * v2-ext offset 28: 40 + 40 + 40 + 32 + 4 = 156 */
static size_t vec_prop_v2_r_only(uint8_t *b) {
        memset(b, 0, 156);
        PUT(b, 0, 0xe2, 0xd4, 0xc3, 0xd9, 0x01, 0x00, 156, 0x22);
        memcpy(b + 8, PEER_ID, 8);
        memcpy(b + 16, GID_V1, 16);
        memcpy(b + 32, MAC, 6);
        PUT(b, 50, 0x00, 28);
        PUT(b, 80, 1, 0, 0, 0x10, 0, 0, 0, 0);       /* e=1, release 1, no SEID, no SMC-Dv2 */
        memcpy(b + 88, GID_V2, 16);
        PUT(b, 104, 0x80, 0x01, 0x00, 0x00);          /* max_conns 128, max_links 1 */
        memcpy(b + 120, UEID, 32);
        PUT(b, 152, 0xe2, 0xd4, 0xc3, 0xd9);
        return 156;
}

/* v1 SMC-D proposal with the SMC-D area (offset 40), SMCD trailer: 40+40+8+4 = 92 */
static size_t vec_prop_v1_d(uint8_t *b) {
        memset(b, 0, 92);
        PUT(b, 0, 0xe2, 0xd4, 0xc3, 0xd9, 0x01, 0x00, 92, 0x11);
        PUT(b, 38, 0x00, 40);
        PUT(b, 40, 0, 0, 0, 0, 0, 0, 0x12, 0x34, 0xab, 0xcd);
        PUT(b, 80, 172, 16, 0, 0, 12, 0, 0, 0);
        PUT(b, 88, 0xe2, 0xd4, 0xc3, 0xc4);
        return 92;
}

/* v1 proposal offering SMC-R and SMC-D (typev1 B, byte 7 = 0x13) as Linux builds it
 * (smc_clc_send_proposal: peer ID / GID / MAC for SMC-R, ISM GID + CHID for SMC-D),
 * IP-area offset 40, IPv4 prefix + 1 IPv6 prefix: 40 + 40 + 8 + 17 + 4 = 109 */
static size_t vec_prop_v1_b(uint8_t *b) {
        memset(b, 0, 109);
        PUT(b, 0, 0xe2, 0xd4, 0xc3, 0xd9, 0x01, 0x00, 109, 0x13);
        memcpy(b + 8, PEER_ID, 8);
        memcpy(b + 16, GID_V1, 16);
        memcpy(b + 32, MAC, 6);
        PUT(b, 38, 0x00, 40);                                     /* IP-area offset 40 */
        PUT(b, 40, 0xa1, 0xb2, 0xc3, 0xd4, 0xe5, 0xf6, 0x07, 0x18, /* ISM GID */
           0x02, 0x37);                                            /* CHID; v2-ext offset 0 */
        PUT(b, 80, 192, 168, 1, 0, 24, 0x00, 0x00, 0x01);         /* 192.168.1.0/24, 1 IPv6 */
        memcpy(b + 88, V6_A, 16);
        b[104] = 64;
        PUT(b, 105, 0xe2, 0xd4, 0xc3, 0xd9);
        return 109;
}

static void test_proposal(void) {
        struct smc_clc_proposal p, q;
        uint8_t v[1100], out[1100];
        struct smc_clc_hdr h;
        ssize_t n;
        size_t l;

        /* v1 with IPv4 + 2 IPv6 prefixes */
        l = vec_prop_v1(v);
        CHECK(smc_clc_decode_hdr(v, 8, &h) == 0, "v1 proposal header");
        CHECK(h.eyecatcher == SMC_EYECATCHER_R && h.type == SMC_CLC_PROPOSAL && h.length == 86 &&
              h.version == 1 && h.typev1 == SMC_TYPE_R, "v1 proposal header fields");
        CHECK(dec_exact(dec_prop, v, l, &p) == 0, "v1 proposal decodes");
        CHECK(p.eyecatcher == SMC_EYECATCHER_R && p.version == 1, "v1 eyecatcher/version");
        CHECK(p.typev1 == SMC_TYPE_R && p.typev2 == SMC_TYPE_N, "v1 types %u %u", p.typev1, p.typev2);
        CHECK(!memcmp(p.peer_id, PEER_ID, 8) && !memcmp(p.gid, GID_V1, 16) && !memcmp(p.mac, MAC, 6), "v1 ids");
        CHECK(!p.has_smcd_area, "v1 no SMC-D area");
        CHECK(!memcmp(p.ipv4_prefix, (uint8_t[]) { 192, 168, 1, 0 }, 4) && p.ipv4_prefix_len == 24, "v1 IPv4");
        CHECK(p.n_ipv6 == 2 && !memcmp(p.ipv6[0].prefix, V6_A, 16) && p.ipv6[0].len == 64 &&
              !memcmp(p.ipv6[1].prefix, V6_B, 16) && p.ipv6[1].len == 48, "v1 IPv6 prefixes");
        CHECK(p.n_ueids == 0 && p.n_ism == 0, "v1 no v2 parts");
        fill_prop_v1(&q);
        n = smc_clc_proposal_encode(&q, out, sizeof(out));
        check_bytes("v1 proposal encode", out, n, v, l);
        check_truncations("v1 proposal", dec_prop, v, l, sizeof(p), l);
        check_truncations("CLC header", dec_hdr, v, 8, sizeof(h), 8);

        /* Linux-style v2, 0x2F, 1 UEID, SMC-Dv2 with 2 entries */
        l = vec_prop_v2(v);
        CHECK(dec_exact(dec_prop, v, l, &p) == 0, "v2 proposal decodes");
        CHECK(p.version == 2 && p.typev1 == SMC_TYPE_B && p.typev2 == SMC_TYPE_B, "v2 types");
        CHECK(p.has_smcd_area && p.ism_gid == 0x1122334455667788ull && p.ism_chid == 0x0123, "v2 SMC-D area");
        CHECK(!memcmp(p.ipv4_prefix, (uint8_t[]) { 10, 0, 0, 0 }, 4) && p.ipv4_prefix_len == 8 && p.n_ipv6 == 0,
              "v2 IP area");
        CHECK(p.n_ueids == 1 && !memcmp(p.ueids[0], UEID, 32), "v2 UEID");
        CHECK(p.release == 1 && p.seid_enabled, "v2 release %u seid %d", p.release, p.seid_enabled);
        CHECK(!memcmp(p.roce_v2_gid, GID_V2, 16) && p.max_conns == 255 && p.max_links == 2 && p.feature_mask == 1,
              "v2 extension fields");
        CHECK(!memcmp(p.seid, SEID, 32), "v2 SEID");
        CHECK(p.n_ism == 2 && p.ism[0].gid == 0xa1a2a3a4a5a6a7a8ull && p.ism[0].chid == 0xffff &&
              p.ism[1].gid == 0xb1b2b3b4b5b6b7b8ull && p.ism[1].chid == 0xffff, "v2 ISM entries");
        fill_prop_v2(&q);
        n = smc_clc_proposal_encode(&q, out, sizeof(out));
        check_bytes("v2 proposal encode", out, n, v, l);
        check_truncations("v2 proposal", dec_prop, v, l, sizeof(p), l);
        /* too small a buffer: -ENOBUFS, buffer untouched */
        memset(out, 0x5a, sizeof(out));
        CHECK(smc_clc_proposal_encode(&q, out, l - 1) == -ENOBUFS, "v2 proposal ENOBUFS");
        CHECK(out[0] == 0x5a && out[l - 2] == 0x5a, "ENOBUFS wrote nothing");

        /* v2, SMC-Rv2 only, no IP area */
        l = vec_prop_v2_r_only(v);
        CHECK(dec_exact(dec_prop, v, l, &p) == 0, "v2 R-only proposal decodes");
        CHECK(p.typev1 == SMC_TYPE_N && p.typev2 == SMC_TYPE_R && p.n_ipv6 == 0 && p.n_ueids == 1 &&
              p.release == 1 && !p.seid_enabled && p.max_conns == 128 && p.max_links == 1 && p.n_ism == 0,
              "v2 R-only fields");
        memset(&q, 0, sizeof(q));
        q.typev1 = SMC_TYPE_N;
        q.typev2 = SMC_TYPE_R;
        memcpy(q.peer_id, PEER_ID, 8);
        memcpy(q.gid, GID_V1, 16);
        memcpy(q.mac, MAC, 6);
        q.n_ueids = 1;
        memcpy(q.ueids[0], UEID, 32);
        q.release = 1;
        memcpy(q.roce_v2_gid, GID_V2, 16);
        q.max_conns = 128;
        q.max_links = 1;
        n = smc_clc_proposal_encode(&q, out, sizeof(out));
        check_bytes("v2 R-only proposal encode", out, n, v, l);
        q.ism_gid = 0x0909; /* Linux would read byte 47 (0x09) as an IPv6 prefix count */
        CHECK(smc_clc_proposal_encode(&q, out, sizeof(out)) == -EINVAL, "typev1 N with ISM GID refused");

        /* v1 SMC-D with the SMC-D area, SMCD eyecatcher in the trailer */
        l = vec_prop_v1_d(v);
        CHECK(dec_exact(dec_prop, v, l, &p) == 0, "v1 SMC-D proposal decodes");
        CHECK(p.version == 1 && p.typev1 == SMC_TYPE_D && p.has_smcd_area && p.ism_gid == 0x1234 &&
              p.ism_chid == 0xabcd && p.ipv4_prefix_len == 12, "v1 SMC-D fields");
        memset(&q, 0, sizeof(q));
        q.typev1 = SMC_TYPE_D;
        q.typev2 = SMC_TYPE_N;
        q.has_smcd_area = true;
        q.ism_gid = 0x1234;
        q.ism_chid = 0xabcd;
        memcpy(q.ipv4_prefix, (uint8_t[]) { 172, 16, 0, 0 }, 4);
        q.ipv4_prefix_len = 12;
        n = smc_clc_proposal_encode(&q, out, sizeof(out));
        CHECK(n == 92 && !memcmp(out, v, 88), "v1 SMC-D encode (R trailer, rest equal)");
        q.has_smcd_area = false;
        CHECK(smc_clc_proposal_encode(&q, out, sizeof(out)) == -EINVAL, "v1 SMC-D without SMC-D area refused");

        /* v1 SMC-R + SMC-D (typev1 B) with the ISM GID and a full IP prefix area */
        l = vec_prop_v1_b(v);
        CHECK(dec_exact(dec_prop, v, l, &p) == 0, "v1 SMC-R+D proposal decodes");
        CHECK(p.version == 1 && p.typev1 == SMC_TYPE_B && p.typev2 == SMC_TYPE_N && p.has_smcd_area &&
              p.ism_gid == 0xa1b2c3d4e5f60718ull && p.ism_chid == 0x0237, "v1 SMC-R+D SMC-D area");
        CHECK(!memcmp(p.peer_id, PEER_ID, 8) && !memcmp(p.gid, GID_V1, 16) && !memcmp(p.mac, MAC, 6),
              "v1 SMC-R+D SMC-R ids");
        CHECK(!memcmp(p.ipv4_prefix, (uint8_t[]) { 192, 168, 1, 0 }, 4) && p.ipv4_prefix_len == 24 &&
              p.n_ipv6 == 1 && !memcmp(p.ipv6[0].prefix, V6_A, 16) && p.ipv6[0].len == 64, "v1 SMC-R+D IP area");
        memset(&q, 0, sizeof(q));
        q.typev1 = SMC_TYPE_B;
        q.typev2 = SMC_TYPE_N;
        memcpy(q.peer_id, PEER_ID, 8);
        memcpy(q.gid, GID_V1, 16);
        memcpy(q.mac, MAC, 6);
        q.has_smcd_area = true;
        q.ism_gid = 0xa1b2c3d4e5f60718ull;
        q.ism_chid = 0x0237;
        memcpy(q.ipv4_prefix, (uint8_t[]) { 192, 168, 1, 0 }, 4);
        q.ipv4_prefix_len = 24;
        q.n_ipv6 = 1;
        memcpy(q.ipv6[0].prefix, V6_A, 16);
        q.ipv6[0].len = 64;
        n = smc_clc_proposal_encode(&q, out, sizeof(out));
        check_bytes("v1 SMC-R+D proposal encode", out, n, v, l);
        check_truncations("v1 SMC-R+D proposal", dec_prop, v, l, sizeof(p), l);

        /* encode -> decode round trips of v1 proposals offering SMC-D (typev1 D and B)
         * with a non-zero ISM GID, 8 IPv6 prefixes, either eyecatcher */
        for (unsigned i = 0; i < 4; i++) {
                struct smc_clc_proposal w;

                memset(&w, 0, sizeof(w));
                w.eyecatcher = i & 2 ? SMC_EYECATCHER_D : SMC_EYECATCHER_R;
                w.version = 1;
                w.typev1 = i & 1 ? SMC_TYPE_B : SMC_TYPE_D;
                w.typev2 = SMC_TYPE_N;
                if (w.typev1 == SMC_TYPE_B) {
                        memcpy(w.peer_id, PEER_ID, 8);
                        memcpy(w.gid, GID_V1, 16);
                        memcpy(w.mac, MAC2, 6);
                }
                w.has_smcd_area = true;
                w.ism_gid = 0xfedcba9876543210ull + i; /* low byte (47) > 8: not a prefix count */
                w.ism_chid = (uint16_t) (0x0100 + i);
                memcpy(w.ipv4_prefix, (uint8_t[]) { 10, 1, 0, 0 }, 4);
                w.ipv4_prefix_len = 16;
                w.n_ipv6 = SMC_CLC_MAX_V6_PREFIXES;
                for (unsigned k = 0; k < w.n_ipv6; k++) {
                        memcpy(w.ipv6[k].prefix, k % 2 ? V6_A : V6_B, 16);
                        w.ipv6[k].prefix[15] = (uint8_t) k;
                        w.ipv6[k].len = (uint8_t) (48 + k);
                }
                n = smc_clc_proposal_encode(&w, out, sizeof(out));
                CHECK(n == 40 + 40 + 8 + 17 * 8 + 4, "v1 %s proposal with ISM GID encodes (%zd)",
                      i & 1 ? "SMC-R+D" : "SMC-D", n);
                if (n <= 0)
                        continue;
                CHECK(out[7] == (0x10 | w.typev1) && out[38] == 0 && out[39] == 40 && out[40] == 0xfe &&
                      out[47] == (uint8_t) (0x10 + i) && out[48] == 0x01 && out[49] == i,
                      "v1 %u: header, IP-area offset 40, ISM GID and CHID big-endian at 40", i);
                CHECK(dec_exact(dec_prop, out, (size_t) n, &p) == 0, "v1 proposal %u re-decodes", i);
                CHECK(!memcmp(&p, &w, sizeof(p)), "v1 proposal %u (typev1 %u, ISM GID) round trips", i, w.typev1);
        }

        /* ---- rejections ---- */
        /* 9 IPv6 prefixes, length consistent (40 + 8 + 153 + 4 = 205) */
        memset(v, 0, sizeof(v));
        PUT(v, 0, 0xe2, 0xd4, 0xc3, 0xd9, 0x01, 0x00, 205, 0x10);
        v[47] = 9;
        PUT(v, 201, 0xe2, 0xd4, 0xc3, 0xd9);
        CHECK(dec_exact(dec_prop, v, 205, &p) == -EBADMSG, "9 IPv6 prefixes refused");
        /* same in v2 */
        memset(v, 0, sizeof(v));
        PUT(v, 0, 0xe2, 0xd4, 0xc3, 0xd9, 0x01, 0x00, 245, 0x28); /* v2, typev2 N, typev1 R */
        PUT(v, 38, 0, 40);
        v[87] = 9;
        PUT(v, 241, 0xe2, 0xd4, 0xc3, 0xd9);
        CHECK(dec_exact(dec_prop, v, 245, &p) == -EBADMSG, "v2: 9 IPv6 prefixes refused");
        /* 9 UEIDs (typev1 N, typev2 R): 80 + 40 + 288 + 4 = 412 */
        memset(v, 0, sizeof(v));
        PUT(v, 0, 0xe2, 0xd4, 0xc3, 0xd9, 0x01, 0x01, 0x9c, 0x22);
        PUT(v, 50, 0, 28);
        v[80] = 9;
        PUT(v, 408, 0xe2, 0xd4, 0xc3, 0xd9);
        CHECK(dec_exact(dec_prop, v, 412, &p) == -EBADMSG, "9 UEIDs refused");
        v[80] = 8; /* 8 UEIDs but 32 bytes too many: exact length rule */
        CHECK(dec_exact(dec_prop, v, 412, &p) == -EBADMSG, "8 UEIDs with 412 bytes refused");
        PUT(v, 5, 0x01, 0x7c); /* 80 + 40 + 256 + 4 = 380 */
        PUT(v, 376, 0xe2, 0xd4, 0xc3, 0xd9);
        CHECK(dec_exact(dec_prop, v, 380, &p) == 0 && p.n_ueids == 8, "8 UEIDs with 380 bytes ok");
        /* 9 ISM entries: typev1 N, typev2 D: 80 + 40 + 48 + 90 + 4 = 262 */
        memset(v, 0, sizeof(v));
        PUT(v, 0, 0xe2, 0xd4, 0xc3, 0xd9, 0x01, 0x01, 0x06, 0x26);
        PUT(v, 50, 0, 28);
        PUT(v, 80, 0, 9, 0, 0, 0, 0, 0, 32);
        PUT(v, 258, 0xe2, 0xd4, 0xc3, 0xd9);
        CHECK(dec_exact(dec_prop, v, 262, &p) == -EBADMSG, "9 ISM entries refused");
        v[81] = 8;
        PUT(v, 5, 0x00, 0xfc); /* 80 + 40 + 48 + 80 + 4 = 252 */
        PUT(v, 248, 0xe2, 0xd4, 0xc3, 0xd9);
        CHECK(dec_exact(dec_prop, v, 252, &p) == 0, "8 ISM entries ok");
        /* misplaced extensions */
        l = vec_prop_v2(v);
        v[51] = 37;
        CHECK(dec_exact(dec_prop, v, l, &p) == -EBADMSG, "v2-ext offset off by one refused");
        l = vec_prop_v2(v);
        v[95] = 65;
        CHECK(dec_exact(dec_prop, v, l, &p) == -EBADMSG, "SMC-Dv2 offset off by one refused");
        l = vec_prop_v2(v);
        v[39] = 0;
        CHECK(dec_exact(dec_prop, v, l, &p) == -EBADMSG, "v2 IP-area offset 0 with typev1 != N refused");
        l = vec_prop_v1(v);
        v[39] = 20;
        CHECK(dec_exact(dec_prop, v, l, &p) == -EBADMSG, "v1 IP-area offset 20 refused");
        /* exact length: one byte too many / too few prefixes */
        l = vec_prop_v1(v);
        v[47] = 1;
        CHECK(dec_exact(dec_prop, v, l, &p) == -EBADMSG, "v1 prefix count / length mismatch refused");
        l = vec_prop_v1(v);
        v[7] = 0x12; /* v1, typev1 N */
        CHECK(dec_exact(dec_prop, v, l, &p) == -EBADMSG, "v1 typev1 N refused");
        /* eyecatchers, type, version */
        l = vec_prop_v1(v);
        v[3] = 0xd8;
        CHECK(dec_exact(dec_prop, v, l, &p) == -EBADMSG, "wrong header eyecatcher refused");
        CHECK(smc_clc_decode_hdr(v, l, &h) == -EBADMSG, "wrong header eyecatcher: header refused");
        l = vec_prop_v1(v);
        v[l - 1] = 0;
        CHECK(dec_exact(dec_prop, v, l, &p) == -EBADMSG, "wrong trailer eyecatcher refused");
        l = vec_prop_v1(v);
        PUT(v, l - 4, 0xe2, 0xd4, 0xc3, 0xc4);
        CHECK(dec_exact(dec_prop, v, l, &p) == 0, "SMCD trailer on a proposal accepted (Linux)");
        l = vec_prop_v1(v);
        v[4] = 2;
        CHECK(dec_exact(dec_prop, v, l, &p) == -EBADMSG, "wrong type refused");
        v[4] = 5;
        CHECK(smc_clc_decode_hdr(v, l, &h) == -EBADMSG, "type 5 refused");
        l = vec_prop_v1(v);
        v[7] = 0x30;
        CHECK(dec_exact(dec_prop, v, l, &p) == -EPROTO, "version 3 is -EPROTO");
        CHECK(smc_clc_decode_hdr(v, l, &h) == -EPROTO, "header: version 3 is -EPROTO");
        v[7] = 0x00;
        CHECK(smc_clc_decode_hdr(v, l, &h) == -EBADMSG, "header: version 0 refused");
        l = vec_prop_v1(v);
        CHECK(dec_exact(dec_prop, v, l - 1, &p) == -EBADMSG, "len != header length refused");
        PUT(v, 5, 0x04, 0x01);
        CHECK(smc_clc_decode_hdr(v, l, &h) == -EBADMSG, "length 1025 refused by the header");
        PUT(v, 5, 0x00, 51);
        CHECK(smc_clc_decode_hdr(v, l, &h) == -EBADMSG, "v1 proposal length 51 refused by the header");
        CHECK(smc_clc_decode_hdr(v, 7, &h) == -EBADMSG, "7-byte header refused");

        /* encoder rejections */
        fill_prop_v1(&q);
        q.n_ipv6 = 9;
        CHECK(smc_clc_proposal_encode(&q, out, sizeof(out)) == -EINVAL, "encode 9 IPv6 refused");
        fill_prop_v2(&q);
        q.n_ueids = 9;
        CHECK(smc_clc_proposal_encode(&q, out, sizeof(out)) == -EINVAL, "encode 9 UEIDs refused");
        fill_prop_v2(&q);
        q.n_ism = 9;
        CHECK(smc_clc_proposal_encode(&q, out, sizeof(out)) == -EINVAL, "encode 9 ISM refused");
        fill_prop_v2(&q);
        q.typev1 = q.typev2 = SMC_TYPE_N;
        CHECK(smc_clc_proposal_encode(&q, out, sizeof(out)) == -EINVAL, "encode N/N refused");
        fill_prop_v2(&q);
        q.eyecatcher = 0x12345678;
        CHECK(smc_clc_proposal_encode(&q, out, sizeof(out)) == -EINVAL, "encode bad eyecatcher refused");
        fill_prop_v2(&q);
        q.release = 16;
        CHECK(smc_clc_proposal_encode(&q, out, sizeof(out)) == -EINVAL, "encode release 16 refused");
        CHECK(smc_clc_proposal_encode(NULL, out, sizeof(out)) == -EINVAL, "encode NULL");
        CHECK(smc_clc_proposal_decode(NULL, 100, &p) == -EINVAL, "decode NULL");

        /* maximal v2 proposal: 8 IPv6, 8 UEIDs, 8 ISM = 652 bytes (spec 2.1) */
        fill_prop_v2(&q);
        q.n_ipv6 = 8;
        q.n_ueids = 8;
        q.n_ism = 8;
        n = smc_clc_proposal_encode(&q, out, sizeof(out));
        CHECK(n == 652, "maximal proposal is %zd bytes", n);
        CHECK(n == 652 && dec_exact(dec_prop, out, 652, &p) == 0 && p.n_ipv6 == 8 && p.n_ueids == 8 && p.n_ism == 8,
              "maximal proposal decodes");
}

/* ------------------------------------------------------------------------- */
/* CLC ACCEPT / CONFIRM SMC-R (2.4, 2.6) */

/* SMC-R v1 first-contact Accept, 68 bytes, byte 7 = 0x18 */
static size_t vec_accept_v1(uint8_t *b) {
        memset(b, 0, 68);
        PUT(b, 0, 0xe2, 0xd4, 0xc3, 0xd9, 0x02, 0x00, 68, 0x18);
        memcpy(b + 8, PEER_ID, 8);
        memcpy(b + 16, GID_V1, 16);
        memcpy(b + 32, MAC, 6);
        PUT(b, 38, 0x0a, 0xbc, 0xde,                                    /* QPN */
           0x11, 0x22, 0x33, 0x44,                                       /* rkey */
           0x01,                                                         /* RMBE index */
           0xca, 0xfe, 0xba, 0xbe,                                       /* alert token */
           0x35,                                                         /* size 3, MTU 5 */
           0x00,
           0x00, 0x00, 0x7f, 0x00, 0x12, 0x34, 0x50, 0x00,               /* RMB address */
           0x00,
           0x65, 0x43, 0x21);                                            /* PSN */
        PUT(b, 64, 0xe2, 0xd4, 0xc3, 0xd9);
        return 68;
}

static void fill_accept_v1(struct smc_clc_accept_r *a) {
        memset(a, 0, sizeof(*a));
        a->type = SMC_CLC_ACCEPT;
        a->version = 1;
        a->first_contact = true;
        memcpy(a->peer_id, PEER_ID, 8);
        memcpy(a->gid, GID_V1, 16);
        memcpy(a->mac, MAC, 6);
        a->qpn = 0x0abcde;
        a->rkey = 0x11223344;
        a->rmbe_idx = 1;
        a->rmbe_alert_token = 0xcafebabe;
        a->rmbe_size = 3;
        a->qp_mtu = 5;
        a->rmb_addr = 0x00007f0012345000ull;
        a->psn = 0x654321;
}

/* v2 first-contact CONFIRM with the first-contact extension and a 2-GID list:
 * 108 + 52 + 4 + 32 = 196 bytes, byte 7 = 0x28 */
static size_t vec_confirm_v2(uint8_t *b) {
        memset(b, 0, 196);
        PUT(b, 0, 0xe2, 0xd4, 0xc3, 0xd9, 0x03, 0x00, 196, 0x28);
        memcpy(b + 8, PEER_ID, 8);
        memcpy(b + 16, GID_V2, 16);
        memcpy(b + 32, MAC, 6);
        PUT(b, 38, 0x00, 0x01, 0x07, 0xde, 0xad, 0xbe, 0xef, 0x01, 0x00, 0x00, 0x00, 0x07, 0x43, 0x00,
           0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01);
        memcpy(b + 64, UEID, 32);                         /* negotiated EID */
        /* 96..103 reserved; FCE at 104 */
        PUT(b, 104, 0x80, 0x21, 0x00, 0x00);              /* v2_direct, OS Linux, release 1 */
        memcpy(b + 108, HOST, 32);
        PUT(b, 140, 0x80, 0x02, 0x00, 0x01);              /* max_conns 128, max_links 2, features 1 */
        /* 144..147 vendor options, 148..155 reserved; GID list at 156 */
        PUT(b, 156, 0x02, 0x00, 0x00, 0x00);
        memcpy(b + 160, GID_V2, 16);
        memcpy(b + 176, GID_V2B, 16);
        PUT(b, 192, 0xe2, 0xd4, 0xc3, 0xd9);
        return 196;
}

static void fill_confirm_v2(struct smc_clc_accept_r *a) {
        memset(a, 0, sizeof(*a));
        a->type = SMC_CLC_CONFIRM;
        a->version = 2;
        a->first_contact = true;
        memcpy(a->peer_id, PEER_ID, 8);
        memcpy(a->gid, GID_V2, 16);
        memcpy(a->mac, MAC, 6);
        a->qpn = 0x000107;
        a->rkey = 0xdeadbeef;
        a->rmbe_idx = 1;
        a->rmbe_alert_token = 7;
        a->rmbe_size = 4;
        a->qp_mtu = 3;
        a->rmb_addr = 0x100000;
        a->psn = 1;
        memcpy(a->eid, UEID, 32);
        a->fce.v2_direct = true;
        a->fce.os_type = 2;
        a->fce.release = 1;
        memcpy(a->fce.hostname, HOST, 32);
        a->fce.max_conns = 128;
        a->fce.max_links = 2;
        a->fce.feature_mask = 1;
        a->n_gids = 2;
        memcpy(a->gids[0], GID_V2, 16);
        memcpy(a->gids[1], GID_V2B, 16);
}

static void test_accept(void) {
        struct smc_clc_accept_r a, q;
        uint8_t v[400], out[400];
        struct smc_clc_hdr h;
        ssize_t n;
        size_t l;

        l = vec_accept_v1(v);
        CHECK(smc_clc_decode_hdr(v, l, &h) == 0 && h.typev2 == 2 && h.typev1 == 0 && h.version == 1,
              "v1 accept header (first contact bit)");
        CHECK(dec_exact(dec_acc, v, l, &a) == 0, "v1 accept decodes");
        CHECK(a.type == SMC_CLC_ACCEPT && a.version == 1 && a.eyecatcher == SMC_EYECATCHER_R && a.first_contact,
              "v1 accept header fields");
        CHECK(!memcmp(a.peer_id, PEER_ID, 8) && !memcmp(a.gid, GID_V1, 16) && !memcmp(a.mac, MAC, 6), "v1 accept ids");
        CHECK(a.qpn == 0x0abcde && a.rkey == 0x11223344 && a.rmbe_idx == 1 && a.rmbe_alert_token == 0xcafebabe,
              "v1 accept qpn/rkey/token");
        CHECK(a.rmbe_size == 3 && a.qp_mtu == 5 && a.rmb_addr == 0x00007f0012345000ull && a.psn == 0x654321,
              "v1 accept size/mtu/addr/psn");
        CHECK(a.n_gids == 0, "v1 accept no GIDs");
        fill_accept_v1(&q);
        n = smc_clc_accept_r_encode(&q, out, sizeof(out));
        check_bytes("v1 accept encode", out, n, v, l);
        check_truncations("v1 accept", dec_acc, v, l, sizeof(a), l);
        q.type = SMC_CLC_CONFIRM;
        q.first_contact = false;
        n = smc_clc_accept_r_encode(&q, out, sizeof(out));
        CHECK(n == 68 && out[4] == 3 && out[7] == 0x10, "v1 confirm, no first contact: byte 7 0x%02x", out[7]);

        l = vec_confirm_v2(v);
        CHECK(dec_exact(dec_acc, v, l, &a) == 0, "v2 confirm decodes");
        CHECK(a.type == SMC_CLC_CONFIRM && a.version == 2 && a.first_contact, "v2 confirm header");
        CHECK(a.qpn == 0x107 && a.rkey == 0xdeadbeef && a.rmbe_alert_token == 7 && a.rmbe_size == 4 && a.qp_mtu == 3 &&
              a.rmb_addr == 0x100000 && a.psn == 1, "v2 confirm SMC-R fields");
        CHECK(!memcmp(a.eid, UEID, 32), "v2 confirm EID");
        CHECK(a.fce.v2_direct && a.fce.os_type == 2 && a.fce.release == 1 && !memcmp(a.fce.hostname, HOST, 32) &&
              a.fce.max_conns == 128 && a.fce.max_links == 2 && a.fce.feature_mask == 1, "v2 confirm FCE");
        CHECK(a.n_gids == 2 && !memcmp(a.gids[0], GID_V2, 16) && !memcmp(a.gids[1], GID_V2B, 16), "v2 confirm GIDs");
        fill_confirm_v2(&q);
        n = smc_clc_accept_r_encode(&q, out, sizeof(out));
        check_bytes("v2 confirm encode", out, n, v, l);
        check_truncations("v2 confirm", dec_acc, v, l, sizeof(a), l);

        /* the same as a first-contact ACCEPT: no GID list, 160 bytes */
        q.type = SMC_CLC_ACCEPT;
        q.n_gids = 0;
        n = smc_clc_accept_r_encode(&q, out, sizeof(out));
        CHECK(n == 160 && !memcmp(out + 8, v + 8, 156 - 8) && out[4] == 2 && out[6] == 160, "v2 FC accept is 160 bytes");
        CHECK(n == 160 && dec_exact(dec_acc, out, 160, &a) == 0 && a.n_gids == 0 && a.fce.max_links == 2,
              "v2 FC accept decodes");
        q.first_contact = false;
        n = smc_clc_accept_r_encode(&q, out, sizeof(out));
        CHECK(n == 108 && out[7] == 0x20, "v2 accept without FC is 108 bytes");
        CHECK(n == 108 && dec_exact(dec_acc, out, 108, &a) == 0 && !a.first_contact, "v2 accept 108 decodes");

        /* rejections */
        l = vec_accept_v1(v);
        v[6] = 69;
        CHECK(smc_clc_decode_hdr(v, 8, &h) == -EBADMSG, "v1 accept length 69 refused by the header");
        v[l] = 0;
        CHECK(dec_exact(dec_acc, v, 69, &a) == -EBADMSG, "v1 accept length 69 refused");
        l = vec_accept_v1(v);
        v[7] = 0x19; /* SMC-D */
        v[6] = 48;
        PUT(v, 44, 0xe2, 0xd4, 0xc3, 0xc4);
        CHECK(smc_clc_decode_hdr(v, 8, &h) == 0 && h.typev1 == SMC_TYPE_D, "SMC-D accept header ok");
        CHECK(dec_exact(dec_acc, v, 48, &a) == -EPROTO, "SMC-D accept is -EPROTO");
        l = vec_accept_v1(v);
        v[7] = 0x1a;
        CHECK(dec_exact(dec_acc, v, l, &a) == -EBADMSG, "accept typev1 2 refused");
        l = vec_accept_v1(v);
        v[4] = 1;
        CHECK(dec_exact(dec_acc, v, l, &a) == -EBADMSG, "type 1 to the accept decoder refused");
        v[4] = 4;
        CHECK(dec_exact(dec_acc, v, l, &a) == -EBADMSG, "type 4 to the accept decoder refused");
        l = vec_accept_v1(v);
        v[66] = 0;
        CHECK(dec_exact(dec_acc, v, l, &a) == -EBADMSG, "accept wrong trailer refused");
        l = vec_confirm_v2(v);
        v[156] = 3; /* 3 GIDs with a consistent length: 212 */
        v[6] = 212;
        memcpy(v + 192, GID_V2, 16);
        PUT(v, 208, 0xe2, 0xd4, 0xc3, 0xd9);
        CHECK(dec_exact(dec_acc, v, 212, &a) == -EBADMSG, "confirm with 3 GIDs refused");
        l = vec_confirm_v2(v);
        v[156] = 2;
        v[6] = 180; /* GID list cut short */
        PUT(v, 176, 0xe2, 0xd4, 0xc3, 0xd9);
        CHECK(dec_exact(dec_acc, v, 180, &a) == -EBADMSG, "confirm GID list beyond the message refused");
        l = vec_confirm_v2(v);
        v[4] = 2; /* FC accept that is too short for its FCE */
        v[6] = 150;
        PUT(v, 146, 0xe2, 0xd4, 0xc3, 0xd9);
        CHECK(dec_exact(dec_acc, v, 150, &a) == -EBADMSG, "FC accept shorter than its FCE refused");
        v[6] = 107;
        CHECK(smc_clc_decode_hdr(v, 8, &h) == -EBADMSG, "v2 accept length 107 refused by the header");

        /* encoder rejections */
        fill_accept_v1(&q);
        q.qpn = 0x1000000;
        CHECK(smc_clc_accept_r_encode(&q, out, sizeof(out)) == -EINVAL, "24-bit QPN overflow refused");
        fill_accept_v1(&q);
        q.rmbe_size = 16;
        CHECK(smc_clc_accept_r_encode(&q, out, sizeof(out)) == -EINVAL, "rmbe_size 16 refused");
        fill_confirm_v2(&q);
        q.n_gids = 3;
        CHECK(smc_clc_accept_r_encode(&q, out, sizeof(out)) == -EINVAL, "3 GIDs refused");
        fill_confirm_v2(&q);
        q.type = SMC_CLC_ACCEPT;
        CHECK(smc_clc_accept_r_encode(&q, out, sizeof(out)) == -EINVAL, "GIDs in an ACCEPT refused");
        fill_confirm_v2(&q);
        q.type = SMC_CLC_DECLINE;
        CHECK(smc_clc_accept_r_encode(&q, out, sizeof(out)) == -EINVAL, "type 4 refused");
        fill_confirm_v2(&q);
        CHECK(smc_clc_accept_r_encode(&q, out, 195) == -ENOBUFS, "accept ENOBUFS");
}

/* ------------------------------------------------------------------------- */
/* CLC ACCEPT / CONFIRM SMC-D v1 (2.5) */

/* SMC-D v1 Accept, subsequent contact (byte 7 = 0x11), 48 bytes, SMCD eyecatchers */
static size_t vec_accept_d_v1(uint8_t *b) {
        memset(b, 0, 48);
        PUT(b, 0, 0xe2, 0xd4, 0xc3, 0xc4, 0x02, 0x00, 48, 0x11); /* D, type 2, len 48, v1 D */
        PUT(b, 8, 0xa1, 0xb2, 0xc3, 0xd4, 0xe5, 0xf6, 0x07, 0x18); /* sender's ISM GID */
        PUT(b, 16, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11); /* DMB token */
        b[24] = 0x00;                                              /* DMBE index (Linux 0) */
        b[25] = 0x50;                                              /* size 5, reserved 0 */
        /* 26..27 reserved */
        PUT(b, 28, 0x0a, 0x0b, 0x0c, 0x00);                        /* link-group id */
        /* 32..43 reserved */
        PUT(b, 44, 0xe2, 0xd4, 0xc3, 0xc4);
        return 48;
}

static void fill_accept_d_v1(struct smc_clc_accept_d *a) {
        memset(a, 0, sizeof(*a));
        a->type = SMC_CLC_ACCEPT;
        a->gid = 0xa1b2c3d4e5f60718ull;
        a->token = 0x8877665544332211ull;
        a->dmbe_idx = 0;
        a->dmbe_size = 5;
        a->lgr_id = 0x0a0b0c00;
}

/* SMC-D v1 first-contact Confirm (byte 7 = 0x19), every field non-zero */
static size_t vec_confirm_d_v1(uint8_t *b) {
        memset(b, 0, 48);
        PUT(b, 0, 0xe2, 0xd4, 0xc3, 0xc4, 0x03, 0x00, 48, 0x19);
        PUT(b, 8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x02, 0x03);
        PUT(b, 16, 0xff, 0xee, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01);
        PUT(b, 24, 0x02, 0xf0);                                    /* index 2, size 15 */
        PUT(b, 28, 0x00, 0x00, 0x01, 0x00);
        PUT(b, 44, 0xe2, 0xd4, 0xc3, 0xc4);
        return 48;
}

static void fill_confirm_d_v1(struct smc_clc_accept_d *a) {
        memset(a, 0, sizeof(*a));
        a->type = SMC_CLC_CONFIRM;
        a->first_contact = true;
        a->gid = 0x10203;
        a->token = 0xffee000000000001ull;
        a->dmbe_idx = 2;
        a->dmbe_size = 15;
        a->lgr_id = 0x100;
}

/* SMC-D v2 Accept without first contact: 78 bytes (2.5: CHID, EID, GID extension) */
static size_t vec_accept_d_v2(uint8_t *b) {
        memset(b, 0, 78);
        PUT(b, 0, 0xe2, 0xd4, 0xc3, 0xc4, 0x02, 0x00, 78, 0x21);
        PUT(b, 8, 0xa1, 0xb2, 0xc3, 0xd4, 0xe5, 0xf6, 0x07, 0x18);
        PUT(b, 16, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11);
        b[25] = 0x10;
        PUT(b, 28, 0x0a, 0x0b, 0x0c, 0x00);
        PUT(b, 32, 0xff, 0xff);                                    /* CHID: loopback-ism */
        memcpy(b + 34, UEID, 32);
        PUT(b, 74, 0xe2, 0xd4, 0xc3, 0xc4);
        return 78;
}

static void test_accept_d(void) {
        struct smc_clc_accept_d a, q, before;
        struct smc_clc_accept_r ar;
        uint8_t v[400], out[400];
        struct smc_clc_hdr h;
        ssize_t n;
        size_t l;

        /* the hand-built Accept */
        l = vec_accept_d_v1(v);
        CHECK(l == SMC_CLC_ACCEPT_D_V1_LEN, "SMC-D v1 accept is 48 bytes");
        CHECK(smc_clc_decode_hdr(v, 8, &h) == 0 && h.eyecatcher == SMC_EYECATCHER_D && h.type == SMC_CLC_ACCEPT &&
              h.length == 48 && h.version == 1 && h.typev1 == SMC_TYPE_D && h.typev2 == 0,
              "SMC-D v1 accept header");
        CHECK(dec_exact(dec_accd, v, l, &a) == 0, "SMC-D v1 accept decodes");
        CHECK(a.type == SMC_CLC_ACCEPT && !a.first_contact, "SMC-D accept type, no first contact");
        CHECK(a.gid == 0xa1b2c3d4e5f60718ull && a.token == 0x8877665544332211ull, "SMC-D accept GID %" PRIx64
              " token %" PRIx64, a.gid, a.token);
        CHECK(a.dmbe_idx == 0 && a.dmbe_size == 5 && a.lgr_id == 0x0a0b0c00, "SMC-D accept idx %u size %u lgr %08x",
              a.dmbe_idx, a.dmbe_size, a.lgr_id);
        fill_accept_d_v1(&q);
        CHECK(!memcmp(&a, &q, sizeof(a)), "SMC-D accept: decoded struct is the expected one");
        n = smc_clc_accept_d_encode(&q, out, sizeof(out));
        check_bytes("SMC-D v1 accept encode", out, n, v, l);
        check_truncations("SMC-D v1 accept", dec_accd, v, l, sizeof(a), l);
        CHECK(dec_exact(dec_acc, v, l, &ar) == -EPROTO, "SMC-D accept to the SMC-R decoder is -EPROTO");

        /* the hand-built first-contact Confirm */
        l = vec_confirm_d_v1(v);
        CHECK(dec_exact(dec_accd, v, l, &a) == 0, "SMC-D v1 FC confirm decodes");
        CHECK(a.type == SMC_CLC_CONFIRM && a.first_contact && a.gid == 0x10203 && a.token == 0xffee000000000001ull &&
              a.dmbe_idx == 2 && a.dmbe_size == 15 && a.lgr_id == 0x100, "SMC-D FC confirm fields");
        fill_confirm_d_v1(&q);
        n = smc_clc_accept_d_encode(&q, out, sizeof(out));
        check_bytes("SMC-D v1 FC confirm encode", out, n, v, l);
        CHECK(n == 48 && out[7] == 0x19, "SMC-D FC confirm byte 7 0x%02x", out[7]);
        check_truncations("SMC-D v1 FC confirm", dec_accd, v, l, sizeof(a), l);

        /* round trips: both types, first contact or not, every size, extreme values */
        for (unsigned i = 0; i < 64; i++) {
                struct smc_clc_accept_d w, r;

                memset(&w, 0, sizeof(w));
                w.type = i & 1 ? SMC_CLC_CONFIRM : SMC_CLC_ACCEPT;
                w.first_contact = i & 2;
                w.dmbe_size = (uint8_t) (i / 4);
                w.gid = i & 4 ? ~0ull : 0x0102030405060708ull * i;
                w.token = i & 8 ? ~0ull : ~(0x1111111111111111ull * i);
                w.dmbe_idx = (uint8_t) (i * 37);
                w.lgr_id = i & 16 ? 0xffffffffu : 0x01000100u * i;
                n = smc_clc_accept_d_encode(&w, out, 48);
                memset(&r, 0xa5, sizeof(r));
                CHECK(n == 48 && dec_exact(dec_accd, out, 48, &r) == 0 && !memcmp(&w, &r, sizeof(w)),
                      "SMC-D accept round trip %u", i);
                CHECK(n == 48 && out[7] == (0x11 | (w.first_contact ? 0x08 : 0)) && (out[25] & 0x0f) == 0 &&
                      !memcmp(out + 44, out, 4) && out[0] == 0xe2 && out[3] == 0xc4,
                      "SMC-D accept %u: byte 7, reserved nibble, D trailer = header", i);
        }

        /* rejections: the output is left as it was */
        memset(&before, 0x5a, sizeof(before));
#define REFUSED(len, want, ...)                                                            \
        do {                                                                               \
                a = before;                                                                \
                CHECK(dec_exact(dec_accd, v, (len), &a) == (want), __VA_ARGS__);           \
                CHECK(!memcmp(&a, &before, sizeof(a)), "output untouched");                \
        } while (0)
        /* short: header length 47, or 48 announced but 47 given */
        l = vec_accept_d_v1(v);
        v[6] = 47;
        CHECK(smc_clc_decode_hdr(v, 8, &h) == -EBADMSG, "SMC-D v1 length 47 refused by the header");
        REFUSED(47, -EBADMSG, "SMC-D v1 accept of 47 bytes refused");
        l = vec_accept_d_v1(v);
        REFUSED(47, -EBADMSG, "SMC-D v1 accept cut to 47 bytes refused");
        /* long: header length 49, or 48 announced but 49 given */
        l = vec_accept_d_v1(v);
        v[6] = 49;
        PUT(v, 45, 0xe2, 0xd4, 0xc3, 0xc4);
        CHECK(smc_clc_decode_hdr(v, 8, &h) == -EBADMSG, "SMC-D v1 length 49 refused by the header");
        REFUSED(49, -EBADMSG, "SMC-D v1 accept of 49 bytes refused");
        l = vec_accept_d_v1(v);
        v[48] = 0;
        REFUSED(49, -EBADMSG, "SMC-D v1 accept: 49 bytes for a length of 48 refused");
        /* eyecatchers */
        l = vec_accept_d_v1(v);
        v[3] = 0xc5;
        REFUSED(l, -EBADMSG, "SMC-D accept wrong header eyecatcher refused");
        l = vec_accept_d_v1(v);
        v[47] = 0xc5;
        REFUSED(l, -EBADMSG, "SMC-D accept wrong trailer refused");
        l = vec_accept_d_v1(v);
        memset(v + 44, 0, 4);
        REFUSED(l, -EBADMSG, "SMC-D accept zero trailer refused");
        l = vec_accept_d_v1(v);
        PUT(v, 0, 0xe2, 0xd4, 0xc3, 0xd9);
        PUT(v, 44, 0xe2, 0xd4, 0xc3, 0xd9);
        fill_accept_d_v1(&q);
        CHECK(dec_exact(dec_accd, v, l, &a) == 0 && !memcmp(&a, &q, sizeof(a)),
              "SMC-D accept with SMCR eyecatchers accepted (2.1, Linux)");
        /* SMC-R type bits: a well-formed SMC-R Accept / Confirm is -EPROTO; a 48-byte
         * one has the wrong length for SMC-R (the header's check): -EBADMSG */
        l = vec_accept_v1(v);
        REFUSED(l, -EPROTO, "SMC-R v1 accept to the SMC-D decoder is -EPROTO");
        l = vec_confirm_v2(v);
        REFUSED(l, -EPROTO, "SMC-R v2 confirm to the SMC-D decoder is -EPROTO");
        l = vec_accept_d_v1(v);
        v[7] = 0x10;
        REFUSED(l, -EBADMSG, "48-byte accept with SMC-R type bits refused (SMC-R v1 is 68)");
        l = vec_accept_d_v1(v);
        v[7] = 0x12;
        REFUSED(l, -EBADMSG, "SMC-D accept typev1 2 refused");
        v[7] = 0x13;
        REFUSED(l, -EBADMSG, "SMC-D accept typev1 3 refused");
        /* version 2: a well-formed SMC-D v2 Accept is -EPROTO (first contact too, the
         * decoder does not look at the FCE); 48 bytes are too short for v2: -EBADMSG */
        l = vec_accept_d_v2(v);
        CHECK(smc_clc_decode_hdr(v, 8, &h) == 0 && h.version == 2 && h.typev1 == SMC_TYPE_D, "SMC-D v2 header ok");
        REFUSED(l, -EPROTO, "SMC-D v2 accept is -EPROTO");
        v[7] = 0x29;
        REFUSED(l, -EPROTO, "SMC-D v2 first-contact accept is -EPROTO");
        l = vec_accept_d_v1(v);
        v[7] = 0x21;
        REFUSED(l, -EBADMSG, "48-byte accept claiming version 2 refused (SMC-D v2 is >= 78)");
        v[7] = 0x31;
        REFUSED(l, -EPROTO, "SMC-D accept version 3 is -EPROTO (header)");
        v[7] = 0x01;
        REFUSED(l, -EBADMSG, "SMC-D accept version 0 refused");
        /* other CLC types */
        l = vec_accept_d_v1(v);
        v[4] = SMC_CLC_PROPOSAL;
        REFUSED(l, -EBADMSG, "type 1 to the SMC-D accept decoder refused");
        v[4] = SMC_CLC_DECLINE;
        REFUSED(l, -EBADMSG, "type 4 to the SMC-D accept decoder refused");
#undef REFUSED
        /* reserved bits and bytes are ignored (Linux) */
        l = vec_accept_d_v1(v);
        v[7] |= 0x04;
        v[25] |= 0x0f;
        PUT(v, 26, 0xff, 0xff);
        memset(v + 32, 0xff, 12);
        fill_accept_d_v1(&q);
        CHECK(dec_exact(dec_accd, v, l, &a) == 0 && !memcmp(&a, &q, sizeof(a)), "SMC-D accept reserved bits ignored");

        /* encoder rejections */
        fill_accept_d_v1(&q);
        q.dmbe_size = 16;
        CHECK(smc_clc_accept_d_encode(&q, out, sizeof(out)) == -EINVAL, "SMC-D dmbe_size 16 refused");
        fill_accept_d_v1(&q);
        q.type = SMC_CLC_DECLINE;
        CHECK(smc_clc_accept_d_encode(&q, out, sizeof(out)) == -EINVAL, "SMC-D type 4 refused");
        q.type = SMC_CLC_PROPOSAL;
        CHECK(smc_clc_accept_d_encode(&q, out, sizeof(out)) == -EINVAL, "SMC-D type 1 refused");
        q.type = 0;
        CHECK(smc_clc_accept_d_encode(&q, out, sizeof(out)) == -EINVAL, "SMC-D type 0 refused");
        fill_accept_d_v1(&q);
        memset(out, 0x5a, sizeof(out));
        CHECK(smc_clc_accept_d_encode(&q, out, 47) == -ENOBUFS, "SMC-D accept ENOBUFS");
        CHECK(out[0] == 0x5a && out[46] == 0x5a, "SMC-D ENOBUFS wrote nothing");
        CHECK(smc_clc_accept_d_encode(&q, NULL, 0) == -ENOBUFS, "SMC-D accept NULL buffer of 0 bytes: ENOBUFS");
        CHECK(smc_clc_accept_d_encode(&q, NULL, 48) == -EINVAL, "SMC-D accept NULL buffer");
        CHECK(smc_clc_accept_d_encode(NULL, out, sizeof(out)) == -EINVAL, "SMC-D accept encode NULL");
        CHECK(smc_clc_accept_d_decode(NULL, 48, &a) == -EINVAL, "SMC-D accept decode NULL buffer");
        l = vec_accept_d_v1(v);
        CHECK(smc_clc_accept_d_decode(v, l, NULL) == -EINVAL, "SMC-D accept decode NULL struct");
}

/* ------------------------------------------------------------------------- */
/* CLC DECLINE (2.7) */

static void test_decline(void) {
        struct smc_clc_decline d, q;
        uint8_t v1[28], v2[44], out[64], v[64];
        ssize_t n;

        /* v1, out of sync (bit 3), SYNCERR */
        memset(v1, 0, sizeof(v1));
        PUT(v1, 0, 0xe2, 0xd4, 0xc3, 0xd9, 0x04, 0x00, 28, 0x18);
        memcpy(v1 + 8, PEER_ID, 8);
        PUT(v1, 16, 0x04, 0x00, 0x00, 0x00);
        PUT(v1, 24, 0xe2, 0xd4, 0xc3, 0xd9);
        CHECK(dec_exact(dec_decl, v1, 28, &d) == 0, "v1 decline decodes");
        CHECK(d.version == 1 && d.eyecatcher == SMC_EYECATCHER_R && d.out_of_sync && !memcmp(d.peer_id, PEER_ID, 8) &&
              d.diag == 0x04000000 && d.os_type == 0, "v1 decline fields");
        memset(&q, 0, sizeof(q));
        q.version = 1;
        q.out_of_sync = true;
        memcpy(q.peer_id, PEER_ID, 8);
        q.diag = 0x04000000;
        n = smc_clc_decline_encode(&q, out, sizeof(out));
        check_bytes("v1 decline encode", out, n, v1, 28);
        check_truncations("v1 decline", dec_decl, v1, 28, sizeof(d), 28);

        /* v2, MAXCONNERR, OS Linux, zero peer id */
        memset(v2, 0, sizeof(v2));
        PUT(v2, 0, 0xe2, 0xd4, 0xc3, 0xd9, 0x04, 0x00, 44, 0x20);
        PUT(v2, 16, 0x03, 0x03, 0x00, 0x0a, 0x20);
        PUT(v2, 40, 0xe2, 0xd4, 0xc3, 0xd9);
        CHECK(dec_exact(dec_decl, v2, 44, &d) == 0, "v2 decline decodes");
        CHECK(d.version == 2 && !d.out_of_sync && d.diag == 0x0303000a && d.os_type == 2, "v2 decline fields");
        memset(&q, 0, sizeof(q));
        q.version = 2;
        q.diag = 0x0303000a;
        q.os_type = 2;
        n = smc_clc_decline_encode(&q, out, sizeof(out));
        check_bytes("v2 decline encode", out, n, v2, 44);
        check_truncations("v2 decline", dec_decl, v2, 44, sizeof(d), 44);

        /* rejections */
        memcpy(v, v1, 28);
        v[6] = 29;
        v[28] = 0;
        CHECK(dec_exact(dec_decl, v, 29, &d) == -EBADMSG, "v1 decline length 29 refused");
        memcpy(v, v2, 44);
        v[6] = 28;
        CHECK(dec_exact(dec_decl, v, 28, &d) == -EBADMSG, "v2 decline length 28 refused");
        memcpy(v, v2, 44);
        v[6] = 43;
        CHECK(dec_exact(dec_decl, v, 43, &d) == -EBADMSG, "v2 decline length 43 refused");
        memcpy(v, v1, 28);
        v[27] = 0;
        CHECK(dec_exact(dec_decl, v, 28, &d) == 0, "decline trailer not checked (Linux)");
        memcpy(v, v1, 28);
        v[7] = 0x13;
        CHECK(dec_exact(dec_decl, v, 28, &d) == -EBADMSG, "decline typev1 3 refused (Linux)");
        memcpy(v, v1, 28);
        v[0] = 0;
        CHECK(dec_exact(dec_decl, v, 28, &d) == -EBADMSG, "decline wrong eyecatcher refused");
        memcpy(v, v2, 44);
        v[4] = 3;
        CHECK(dec_exact(dec_decl, v, 44, &d) == -EBADMSG, "confirm type to the decline decoder refused");
        memset(&q, 0, sizeof(q));
        q.version = 3;
        CHECK(smc_clc_decline_encode(&q, out, sizeof(out)) == -EINVAL, "decline version 3 refused");
        q.version = 2;
        CHECK(smc_clc_decline_encode(&q, out, 43) == -ENOBUFS, "decline ENOBUFS");
}

/* ------------------------------------------------------------------------- */
/* CDC (4.1) */

static void test_cdc(void) {
        struct smc_cdc_msg c, q;
        uint8_t v[44], out[44];

        /* all flags, prod cursor about to wrap its wrap counter, cons cursor just wrapped */
        memset(v, 0, sizeof(v));
        PUT(v, 0, 0xfe, 44, 0xff, 0xff, 0x0a, 0x0b, 0x0c, 0x0d,  /* type, len, seqno, token */
           0x00, 0x00, 0xff, 0xff, 0x00, 0x00, 0xff, 0xf0,         /* prod: rsv, wrap, count */
           0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00,         /* cons: rsv, wrap, count */
           0xf8, 0xe0);                                            /* flags */
        CHECK(smc_wr_is_cdc(v, 44), "is CDC");
        CHECK(dec_exact(dec_cdc, v, 44, &c) == 0, "CDC decodes");
        CHECK(c.seqno == 0xffff && c.token == 0x0a0b0c0d, "CDC seqno/token");
        CHECK(c.prod_wrap == 0xffff && c.prod_count == 0xfff0 && c.cons_wrap == 1 && c.cons_count == 0, "CDC cursors");
        CHECK(c.prod_flags == (SMC_CDC_PROD_WRITE_BLOCKED | SMC_CDC_PROD_URG_PENDING | SMC_CDC_PROD_URG_PRESENT |
                               SMC_CDC_PROD_CONS_UPD_REQ | SMC_CDC_PROD_FAILOVER_VAL) &&
              c.conn_flags == (SMC_CDC_CONN_DONE_WRITING | SMC_CDC_CONN_CLOSED | SMC_CDC_CONN_ABORT),
              "CDC flags 0x%02x 0x%02x", c.prod_flags, c.conn_flags);
        q = (struct smc_cdc_msg) {
                .seqno = 0xffff,
                .token = 0x0a0b0c0d,
                .prod_wrap = 0xffff,
                .prod_count = 0xfff0,
                .cons_wrap = 1,
                .cons_count = 0,
                .prod_flags = 0xff, /* reserved bits are not sent */
                .conn_flags = 0xff,
        };
        smc_cdc_encode(&q, out);
        check_bytes("CDC encode", out, 44, v, 44);
        check_truncations("CDC", dec_cdc, v, 44, sizeof(c), 44);

        v[1] = 43;
        CHECK(dec_exact(dec_cdc, v, 44, &c) == -EBADMSG, "CDC byte 1 = 43 refused");
        v[1] = 45;
        CHECK(dec_exact(dec_cdc, v, 44, &c) == -EBADMSG, "CDC byte 1 = 45 refused");
        v[1] = 44;
        v[0] = 0x07;
        CHECK(dec_exact(dec_cdc, v, 44, &c) == -EBADMSG && !smc_wr_is_cdc(v, 44), "CDC type 0x07 refused");
        v[0] = 0xfe;
        v[9] = 1;     /* reserved cursor bytes and the reserved tail are ignored */
        v[43] = 0xff;
        v[24] = 0xff; /* reserved flag bits are dropped */
        CHECK(dec_exact(dec_cdc, v, 44, &c) == 0 && c.prod_wrap == 0xffff && c.prod_flags == 0xf8, "CDC reserved ignored");
}

/* ------------------------------------------------------------------------- */
/* LLC (5) */

static void llc_base(uint8_t *b, uint8_t type, uint8_t flags) {
        memset(b, 0, 44);
        b[0] = type;
        b[1] = 44;
        b[3] = flags;
}

/* Decode @v, compare with @want (rkeys compared separately), encode @want, compare
 * with @v, and check every truncation. */
static void llc_roundtrip(const char *what, const uint8_t *v, size_t n, const struct smc_llc_msg *want,
                          const struct smc_llc_rkey_entry *want_rkeys) {
        struct smc_llc_rkey_entry rk[SMC_LLC_MAX_ADD_LINK_RKEYS];
        struct smc_llc_msg m, w;
        uint8_t out[SMC_LLC_V2_MAX_LEN];
        ssize_t e;
        int r;

        memcpy(&w, want, sizeof(w));
        memset(&m, 0x5a, sizeof(m));
        memset(rk, 0, sizeof(rk));
        m.add_link.rkeys = rk;
        {
                uint8_t *copy = malloc(n);

                memcpy(copy, v, n);
                r = smc_llc_decode(copy, n, &m);
                free(copy);
        }
        CHECK(r == 0, "%s: decode %d", what, r);
        if (r == 0) {
                /* compare field by field through a normalized copy */
                struct smc_llc_msg a, b;

                memcpy(&a, &m, sizeof(a));
                memcpy(&b, &w, sizeof(b));

                if (a.type == SMC_LLC_ADD_LINK) {
                        CHECK(a.add_link.rkeys == rk, "%s: rkeys pointer kept", what);
                        a.add_link.rkeys = b.add_link.rkeys = NULL;
                        if (want_rkeys)
                                CHECK(!memcmp(rk, want_rkeys, sizeof(rk[0]) * b.add_link.n_rkeys), "%s: rkey entries",
                                      what);
                }
                if (b.length == 0)
                        b.length = a.length;
                CHECK(a.type == b.type && a.v2 == b.v2 && a.length == b.length && a.flags == b.flags &&
                      a.add_link_reject_reason == b.add_link_reject_reason,
                      "%s: header type %u v2 %d len %u flags 0x%02x", what, a.type, a.v2, a.length, a.flags);
                switch (a.type) {
                case SMC_LLC_CONFIRM_LINK:
                        CHECK(!memcmp(&a.confirm_link, &b.confirm_link, sizeof(a.confirm_link)), "%s: fields", what);
                        break;
                case SMC_LLC_ADD_LINK:
                        CHECK(!memcmp(a.add_link.mac, b.add_link.mac, 6) && !memcmp(a.add_link.gid, b.add_link.gid, 16) &&
                              a.add_link.qpn == b.add_link.qpn && a.add_link.link_num == b.add_link.link_num &&
                              a.add_link.qp_mtu == b.add_link.qp_mtu && a.add_link.psn == b.add_link.psn &&
                              a.add_link.v2_direct == b.add_link.v2_direct &&
                              !memcmp(a.add_link.target_gid, b.add_link.target_gid, 16) &&
                              a.add_link.n_rkeys == b.add_link.n_rkeys && a.add_link.n_rkeys_le == b.add_link.n_rkeys_le,
                              "%s: fields", what);
                        break;
                case SMC_LLC_ADD_LINK_CONT:
                        CHECK(!memcmp(&a.add_link_cont, &b.add_link_cont, sizeof(a.add_link_cont)), "%s: fields", what);
                        break;
                case SMC_LLC_DELETE_LINK:
                        CHECK(!memcmp(&a.delete_link, &b.delete_link, sizeof(a.delete_link)), "%s: fields", what);
                        break;
                case SMC_LLC_CONFIRM_RKEY:
                        CHECK(!memcmp(&a.confirm_rkey, &b.confirm_rkey, sizeof(a.confirm_rkey)), "%s: fields", what);
                        break;
                case SMC_LLC_TEST_LINK:
                        CHECK(!memcmp(&a.test_link, &b.test_link, sizeof(a.test_link)), "%s: fields", what);
                        break;
                case SMC_LLC_DELETE_RKEY:
                        CHECK(!memcmp(&a.delete_rkey, &b.delete_rkey, sizeof(a.delete_rkey)), "%s: fields", what);
                        break;
                case SMC_LLC_REQ_ADD_LINK:
                        CHECK(!memcmp(&a.req_add_link, &b.req_add_link, sizeof(a.req_add_link)), "%s: fields", what);
                        break;
                }
        }
        e = smc_llc_encode(&w, out, sizeof(out));
        check_bytes(what, out, e, v, n);
        check_truncations(what, dec_llc, v, n, sizeof(m), n);
}

static const struct smc_llc_rkey_entry RKEYS3[3] = {
        { 0x00001001, 0x00002001, 0x0000100000001000ull },
        { 0x00001002, 0x00002002, 0x0000100000002000ull },
        { 0x00001003, 0x00002003, 0x0000100000003000ull },
};

static void put_rkeys3(uint8_t *b) {
        PUT(b, 0, 0x00, 0x00, 0x10, 0x01, 0x00, 0x00, 0x20, 0x01, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x10, 0x00);
        PUT(b, 16, 0x00, 0x00, 0x10, 0x02, 0x00, 0x00, 0x20, 0x02, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x20, 0x00);
        PUT(b, 32, 0x00, 0x00, 0x10, 0x03, 0x00, 0x00, 0x20, 0x03, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x30, 0x00);
}

/* ADD LINK v2 request with 3 rkey entries: 72 + 48 = 120 bytes */
static size_t vec_add_link_v2(uint8_t *b) {
        memset(b, 0, 120);
        PUT(b, 0, 0x22, 0x00, 120, 0x00);
        memcpy(b + 4, MAC2, 6);
        memcpy(b + 12, GID_V2B, 16);
        PUT(b, 28, 0x00, 0x02, 0x22, 0x02, 0x05, 0x0a, 0x0b, 0x0c); /* QPN, link 2, MTU 5, PSN */
        b[44] = 0x80;                                                /* v2_direct */
        memcpy(b + 46, GID_V2B, 16);
        PUT(b, 70, 0x00, 0x03);
        put_rkeys3(b + 72);
        return 120;
}

static void fill_add_link_v2(struct smc_llc_msg *m) {
        memset(m, 0, sizeof(*m));
        m->type = SMC_LLC_ADD_LINK;
        m->v2 = true;
        memcpy(m->add_link.mac, MAC2, 6);
        memcpy(m->add_link.gid, GID_V2B, 16);
        m->add_link.qpn = 0x000222;
        m->add_link.link_num = 2;
        m->add_link.qp_mtu = 5;
        m->add_link.psn = 0x0a0b0c;
        m->add_link.v2_direct = true;
        memcpy(m->add_link.target_gid, GID_V2B, 16);
        m->add_link.n_rkeys = 3;
        m->add_link.rkeys = (struct smc_llc_rkey_entry *) RKEYS3;
}

static void test_llc(void) {
        struct smc_llc_rkey_entry rk[SMC_LLC_MAX_ADD_LINK_RKEYS], rk_before[SMC_LLC_MAX_ADD_LINK_RKEYS];
        uint8_t v[SMC_LLC_V2_MAX_LEN], out[SMC_LLC_V2_MAX_LEN];
        struct smc_llc_msg m, w;
        size_t l;
        int r;

        /* CONFIRM LINK request, v1 */
        llc_base(v, 0x01, 0x03);
        memcpy(v + 4, MAC, 6);
        memcpy(v + 10, GID_V1, 16);
        PUT(v, 26, 0x00, 0x01, 0x11, 0x01, 0x00, 0x00, 0x01, 0x01, 0x02, 0x00); /* QPN, link 1, uid, max links 2 */
        memset(&w, 0, sizeof(w));
        w.type = SMC_LLC_CONFIRM_LINK;
        w.flags = SMC_LLC_FLAG_NO_RMBE_EYEC;
        memcpy(w.confirm_link.mac, MAC, 6);
        memcpy(w.confirm_link.gid, GID_V1, 16);
        w.confirm_link.qpn = 0x111;
        w.confirm_link.link_num = 1;
        w.confirm_link.link_uid = 0x00000101;
        w.confirm_link.max_links = 2;
        llc_roundtrip("CONFIRM LINK req v1", v, 44, &w, NULL);

        /* CONFIRM LINK response, v2 link group (type 0x21, BE length 44), v2.1 max_conns */
        memset(v, 0, 44);
        PUT(v, 0, 0x21, 0x00, 44, 0x83);
        memcpy(v + 4, MAC2, 6);
        memcpy(v + 10, GID_V2, 16);
        PUT(v, 26, 0x00, 0x02, 0x22, 0x01, 0x12, 0x34, 0x56, 0x78, 0x02, 0xff);
        memset(&w, 0, sizeof(w));
        w.type = SMC_LLC_CONFIRM_LINK;
        w.v2 = true;
        w.flags = SMC_LLC_FLAG_RESP | SMC_LLC_FLAG_NO_RMBE_EYEC;
        memcpy(w.confirm_link.mac, MAC2, 6);
        memcpy(w.confirm_link.gid, GID_V2, 16);
        w.confirm_link.qpn = 0x222;
        w.confirm_link.link_num = 1;
        w.confirm_link.link_uid = 0x12345678;
        w.confirm_link.max_links = 2;
        w.confirm_link.max_conns = 255;
        llc_roundtrip("CONFIRM LINK resp v2", v, 44, &w, NULL);
        /* [Linux x86] the same with a little-endian length */
        PUT(v, 1, 44, 0x00);
        CHECK(smc_llc_decode(v, 44, &m) == 0 && m.v2 && m.length == 44 && m.confirm_link.max_conns == 255,
              "v2 little-endian length 44 accepted");

        /* ADD LINK v1 request */
        llc_base(v, 0x02, 0x00);
        memcpy(v + 4, MAC2, 6);
        memcpy(v + 12, GID_V1, 16);
        PUT(v, 28, 0x00, 0x03, 0x33, 0x02, 0x04, 0x00, 0x00, 0x07); /* QPN, link 2, MTU 4, PSN 7 */
        memset(&w, 0, sizeof(w));
        w.type = SMC_LLC_ADD_LINK;
        memcpy(w.add_link.mac, MAC2, 6);
        memcpy(w.add_link.gid, GID_V1, 16);
        w.add_link.qpn = 0x333;
        w.add_link.link_num = 2;
        w.add_link.qp_mtu = 4;
        w.add_link.psn = 7;
        llc_roundtrip("ADD LINK v1", v, 44, &w, NULL);
        /* v1 reject response: reason 1 in byte 2, flags response + rejected */
        v[2] = 0x01;
        v[3] = 0xc0;
        w.flags = SMC_LLC_FLAG_RESP | SMC_LLC_FLAG_ADD_LNK_REJ;
        w.add_link_reject_reason = 1;
        llc_roundtrip("ADD LINK v1 reject", v, 44, &w, NULL);

        /* ADD LINK v2 with 3 rkey entries */
        l = vec_add_link_v2(v);
        fill_add_link_v2(&w);
        llc_roundtrip("ADD LINK v2, 3 rkeys", v, l, &w, RKEYS3);
        /* [Linux x86] little-endian length and count: same fields, n_rkeys_le */
        PUT(v, 1, 120, 0x00);
        PUT(v, 70, 0x03, 0x00);
        w.add_link.n_rkeys_le = true;
        w.length = 120;
        {
                struct smc_llc_msg tmp = w;

                /* decode check (the encoder writes the length big-endian) */
                memset(rk, 0, sizeof(rk));
                m.add_link.rkeys = rk;
                CHECK(smc_llc_decode(v, l, &m) == 0 && m.length == 120 && m.add_link.n_rkeys == 3 &&
                              m.add_link.n_rkeys_le && !memcmp(rk, RKEYS3, sizeof(RKEYS3)),
                      "ADD LINK v2 little-endian length/count");
                CHECK(smc_llc_encode(&tmp, out, sizeof(out)) == 120 && out[70] == 3 && out[71] == 0 && out[1] == 0 &&
                              out[2] == 120,
                      "ADD LINK v2 n_rkeys_le encodes the count little-endian, the length big-endian");
        }
        /* count bytes both set: neither byte order gives a count <= 255 */
        l = vec_add_link_v2(v);
        PUT(v, 70, 0x01, 0x03);
        memset(rk, 0x77, sizeof(rk));
        memcpy(rk_before, rk, sizeof(rk));
        memset(&m, 0x33, sizeof(m));
        m.add_link.rkeys = rk;
        CHECK(smc_llc_decode(v, l, &m) == -EBADMSG, "ADD LINK v2 count 0x0103 refused");
        CHECK(!memcmp(rk, rk_before, sizeof(rk)) && m.add_link.rkeys == rk && m.type == 0x33,
              "refused ADD LINK left the message and rkey array untouched");
        /* count above what the length holds: clamped (Linux may announce more) */
        l = vec_add_link_v2(v);
        v[71] = 5;
        m.add_link.rkeys = rk;
        CHECK(smc_llc_decode(v, l, &m) == 0 && m.add_link.n_rkeys == 3, "ADD LINK v2 count 5 with 3 entries -> 3");
        /* count below: only count entries */
        v[71] = 1;
        memset(rk, 0, sizeof(rk));
        m.add_link.rkeys = rk;
        CHECK(smc_llc_decode(v, l, &m) == 0 && m.add_link.n_rkeys == 1 && rk[1].rkey_old == 0, "ADD LINK v2 count 1");
        /* NULL array: entries skipped */
        m.add_link.rkeys = NULL;
        CHECK(smc_llc_decode(v, l, &m) == 0 && m.add_link.n_rkeys == 1 && !m.add_link.rkeys, "ADD LINK v2 NULL rkeys");
        /* lengths that cannot be an ADD LINK v2 */
        l = vec_add_link_v2(v);
        v[2] = 60;
        m.add_link.rkeys = rk;
        CHECK(smc_llc_decode(v, 60, &m) == -EBADMSG, "ADD LINK v2 length 60 refused");
        v[2] = 80;
        CHECK(smc_llc_decode(v, 80, &m) == -EBADMSG, "ADD LINK v2 length 80 (partial entry) refused");
        /* 44-byte v2 ADD LINK: Linux's reject response (length overwrites the reason) */
        memset(v, 0, 44);
        PUT(v, 0, 0x22, 0x00, 44, 0xc0);
        memcpy(v + 4, MAC2, 6);
        memcpy(v + 12, GID_V2B, 16);
        PUT(v, 28, 0x00, 0x02, 0x22, 0x02, 0x05, 0x0a, 0x0b, 0x0c);
        fill_add_link_v2(&w);
        w.flags = SMC_LLC_FLAG_RESP | SMC_LLC_FLAG_ADD_LNK_REJ;
        w.length = 44;
        w.add_link.v2_direct = false;
        memset(w.add_link.target_gid, 0, 16);
        w.add_link.n_rkeys = 0;
        llc_roundtrip("ADD LINK v2 44-byte reject", v, 44, &w, NULL);
        w.add_link.n_rkeys = 1;
        CHECK(smc_llc_encode(&w, out, sizeof(out)) == -EINVAL, "ADD LINK v2 length 44 with rkeys refused");
        /* never an all-zero ADD LINK request (Linux's local trigger) */
        memset(&w, 0, sizeof(w));
        w.type = SMC_LLC_ADD_LINK;
        CHECK(smc_llc_encode(&w, out, sizeof(out)) == -EINVAL, "all-zero ADD LINK request refused");
        w.flags = SMC_LLC_FLAG_RESP;
        CHECK(smc_llc_encode(&w, out, sizeof(out)) == 44, "all-zero ADD LINK response allowed");

        /* ADD LINK CONTINUATION: 3 still to transfer, 2 in this message (client: 0x80) */
        llc_base(v, 0x03, 0x80);
        PUT(v, 4, 0x02, 0x03);
        put_rkeys3(out);
        memcpy(v + 8, out, 32);
        memset(&w, 0, sizeof(w));
        w.type = SMC_LLC_ADD_LINK_CONT;
        w.flags = SMC_LLC_FLAG_RESP;
        w.add_link_cont.link_num = 2;
        w.add_link_cont.num_rkeys = 3;
        w.add_link_cont.rt[0] = RKEYS3[0];
        w.add_link_cont.rt[1] = RKEYS3[1];
        llc_roundtrip("ADD LINK CONT", v, 44, &w, NULL);
        /* last one: 1 entry, the second slot stays zero */
        llc_base(v, 0x03, 0x00);
        PUT(v, 4, 0x02, 0x01);
        memcpy(v + 8, out + 32, 16);
        memset(&w, 0, sizeof(w));
        w.type = SMC_LLC_ADD_LINK_CONT;
        w.add_link_cont.link_num = 2;
        w.add_link_cont.num_rkeys = 1;
        w.add_link_cont.rt[0] = RKEYS3[2];
        llc_roundtrip("ADD LINK CONT last", v, 44, &w, NULL);

        /* DELETE LINK all + orderly, program-initiated termination */
        llc_base(v, 0x04, 0x60);
        PUT(v, 4, 0x00, 0x00, 0x03, 0x00, 0x00);
        memset(&w, 0, sizeof(w));
        w.type = SMC_LLC_DELETE_LINK;
        w.flags = SMC_LLC_FLAG_DEL_LINK_ALL | SMC_LLC_FLAG_DEL_LINK_ORDERLY;
        w.delete_link.reason = SMC_LLC_DEL_PROG_INIT_TERM;
        llc_roundtrip("DELETE LINK all orderly", v, 44, &w, NULL);
        /* one link, lost path, response */
        llc_base(v, 0x04, 0x80);
        PUT(v, 4, 0x02, 0x00, 0x01, 0x00, 0x00);
        memset(&w, 0, sizeof(w));
        w.type = SMC_LLC_DELETE_LINK;
        w.flags = SMC_LLC_FLAG_RESP;
        w.delete_link.link_num = 2;
        w.delete_link.reason = SMC_LLC_DEL_LOST_PATH;
        llc_roundtrip("DELETE LINK one", v, 44, &w, NULL);

        /* CONFIRM RKEY with 2 additional entries */
        llc_base(v, 0x06, 0x00);
        PUT(v, 4, 0x02, 0xaa, 0xbb, 0xcc, 0x01, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, /* rkey, addr */
           0x02, 0xaa, 0xbb, 0xcc, 0x02, 0x00, 0x00, 0x00, 0x00, 0x20, 0x00, 0x00, 0x00,          /* link 2 */
           0x03, 0xaa, 0xbb, 0xcc, 0x03, 0x00, 0x00, 0x00, 0x00, 0x30, 0x00, 0x00, 0x00);         /* link 3 */
        memset(&w, 0, sizeof(w));
        w.type = SMC_LLC_CONFIRM_RKEY;
        w.confirm_rkey.num_rkeys = 2;
        w.confirm_rkey.rkey = 0xaabbcc01;
        w.confirm_rkey.addr = 0x10000000;
        w.confirm_rkey.rt[0].link_num = 2;
        w.confirm_rkey.rt[0].rkey = 0xaabbcc02;
        w.confirm_rkey.rt[0].addr = 0x20000000;
        w.confirm_rkey.rt[1].link_num = 3;
        w.confirm_rkey.rt[1].rkey = 0xaabbcc03;
        w.confirm_rkey.rt[1].addr = 0x30000000;
        llc_roundtrip("CONFIRM RKEY 2 extra", v, 44, &w, NULL);
        v[4] = 3;
        CHECK(smc_llc_decode(v, 44, &m) == -EBADMSG, "CONFIRM RKEY 3 extra refused");
        w.confirm_rkey.num_rkeys = 3;
        CHECK(smc_llc_encode(&w, out, sizeof(out)) == -EINVAL, "encode CONFIRM RKEY 3 extra refused");

        /* TEST LINK request and response */
        llc_base(v, 0x07, 0x00);
        PUT(v, 4, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16);
        memset(&w, 0, sizeof(w));
        w.type = SMC_LLC_TEST_LINK;
        for (int i = 0; i < 16; i++)
                w.test_link.user_data[i] = (uint8_t) (i + 1);
        llc_roundtrip("TEST LINK", v, 44, &w, NULL);
        v[3] = 0x80;
        w.flags = SMC_LLC_FLAG_RESP;
        llc_roundtrip("TEST LINK resp", v, 44, &w, NULL);

        /* DELETE RKEY v1 with 3 rkeys, and the negative response (rkey 2 unknown) */
        llc_base(v, 0x09, 0x00);
        PUT(v, 4, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x11, 0x00, 0x00, 0x00, 0x22, 0x00, 0x00, 0x00, 0x33);
        memset(&w, 0, sizeof(w));
        w.type = SMC_LLC_DELETE_RKEY;
        w.delete_rkey.num_rkeys = 3;
        w.delete_rkey.rkeys[0] = 0x11;
        w.delete_rkey.rkeys[1] = 0x22;
        w.delete_rkey.rkeys[2] = 0x33;
        llc_roundtrip("DELETE RKEY v1 3 rkeys", v, 44, &w, NULL);
        v[3] = 0xa0;
        v[5] = 0x40;
        w.flags = SMC_LLC_FLAG_RESP | SMC_LLC_FLAG_RKEY_NEG;
        w.delete_rkey.err_mask = 0x40;
        llc_roundtrip("DELETE RKEY v1 negative resp", v, 44, &w, NULL);
        v[4] = 9;
        CHECK(smc_llc_decode(v, 44, &m) == -EBADMSG, "DELETE RKEY v1 9 rkeys refused");
        v[0] = 0x29; /* v2: 9 rkeys fit in 44 bytes (8 + 36), but this codec holds 8 */
        PUT(v, 1, 0x00, 44);
        CHECK(smc_llc_decode(v, 44, &m) == -EPROTO, "DELETE RKEY v2 9 rkeys is -EPROTO");
        v[4] = 10; /* 8 + 40 > 44 */
        CHECK(smc_llc_decode(v, 44, &m) == -EBADMSG, "DELETE RKEY v2 10 rkeys beyond length refused");
        w.delete_rkey.num_rkeys = 9;
        CHECK(smc_llc_encode(&w, out, sizeof(out)) == -EINVAL, "encode DELETE RKEY 9 refused");

        /* REQUEST ADD LINK v2 with 2 GIDs: 28 + 32 = 60 bytes, and its 44-byte response */
        memset(v, 0, 60);
        PUT(v, 0, 0x25, 0x00, 60, 0x00);
        v[24] = 2;
        memcpy(v + 28, GID_V2, 16);
        memcpy(v + 44, GID_V2B, 16);
        memset(&w, 0, sizeof(w));
        w.type = SMC_LLC_REQ_ADD_LINK;
        w.v2 = true;
        w.req_add_link.n_gids = 2;
        memcpy(w.req_add_link.gids[0], GID_V2, 16);
        memcpy(w.req_add_link.gids[1], GID_V2B, 16);
        llc_roundtrip("REQUEST ADD LINK v2", v, 60, &w, NULL);
        memset(v, 0, 44);
        PUT(v, 0, 0x25, 0x00, 44, 0x80);
        memset(&w, 0, sizeof(w));
        w.type = SMC_LLC_REQ_ADD_LINK;
        w.v2 = true;
        w.flags = SMC_LLC_FLAG_RESP;
        llc_roundtrip("REQUEST ADD LINK v2 resp", v, 44, &w, NULL);
        v[24] = 2; /* 2 GIDs need 60 bytes */
        CHECK(smc_llc_decode(v, 44, &m) == -EBADMSG, "REQUEST ADD LINK 2 GIDs in 44 bytes refused");
        v[24] = 9;
        v[2] = 172;
        CHECK(smc_llc_decode(v, 44 + 128, &m) == -EBADMSG, "REQUEST ADD LINK 9 GIDs refused");
        w.flags = 0;
        w.v2 = false;
        CHECK(smc_llc_encode(&w, out, sizeof(out)) == -EINVAL, "v1 REQUEST ADD LINK refused");

        /* CONFIRM RKEY CONT: header only; not encodable */
        llc_base(v, 0x08, 0x00);
        v[4] = 1;
        CHECK(smc_llc_decode(v, 44, &m) == 0 && m.type == SMC_LLC_CONFIRM_RKEY_CONT, "CONFIRM RKEY CONT decodes");
        memset(&w, 0, sizeof(w));
        w.type = SMC_LLC_CONFIRM_RKEY_CONT;
        CHECK(smc_llc_encode(&w, out, sizeof(out)) == -EINVAL, "CONFIRM RKEY CONT not encodable");

        /* ---- generic rejections ---- */
        llc_base(v, 0x07, 0x00);
        v[1] = 43;
        CHECK(smc_llc_decode(v, 44, &m) == -EBADMSG, "v1 LLC byte 1 = 43 refused");
        v[1] = 88;
        CHECK(smc_llc_decode(v, 88, &m) == -EBADMSG, "v1 LLC byte 1 = 88 refused");
        {
                static const uint8_t unknown[] = { 0x00, 0x05, 0x0a, 0x0f, 0x10, 0x13, 0x20, 0x23, 0x2a, 0x2f, 0x31, 0x47, 0xfe };

                for (size_t i = 0; i < ELEMENTSOF(unknown); i++) {
                        llc_base(v, unknown[i], 0x00);
                        if (unknown[i] & 0xf0)
                                PUT(v, 1, 0x00, 44);
                        r = smc_llc_decode(v, 44, &m);
                        CHECK(r == -EPROTO, "LLC type 0x%02x: %d, want -EPROTO", unknown[i], r);
                }
        }
        /* v2 length rules */
        llc_base(v, 0x27, 0x00);
        PUT(v, 1, 0x00, 43);
        CHECK(smc_llc_decode(v, 44, &m) == -EBADMSG, "v2 length 43 refused");
        PUT(v, 1, 0x00, 45);
        CHECK(smc_llc_decode(v, 44, &m) == -EBADMSG, "v2 length 45 > received 44 refused");
        PUT(v, 1, 0x20, 0x01); /* BE 8193 > 8192, LE 288 */
        CHECK(smc_llc_decode(v, 8192, &m) == 0 && m.length == 288, "v2 length: BE 8193 invalid, LE 288 taken");
        PUT(v, 1, 0x01, 0x02); /* BE 258, LE 513 */
        CHECK(smc_llc_decode(v, 600, &m) == -EBADMSG, "v2 length 258 or 513 with 600 received: ambiguous, refused");
        CHECK(smc_llc_decode(v, 513, &m) == 0 && m.length == 513, "v2 length = received length (LE 513) taken");
        CHECK(smc_llc_decode(v, 258, &m) == 0 && m.length == 258, "v2 length: only BE 258 fits 258 received");
        CHECK(smc_llc_decode(v, 400, &m) == 0 && m.length == 258, "v2 length: only BE 258 fits 400 received");
        PUT(v, 1, 0x21, 0x00); /* BE 8448 > 8192, LE 33 < 44 */
        CHECK(smc_llc_decode(v, 8192, &m) == -EBADMSG, "v2 length 8448/33 refused");
        /* a 44-byte-format message with a larger v2 length: extra ignored */
        llc_base(v, 0x27, 0x80);
        PUT(v, 1, 0x00, 64);
        CHECK(smc_llc_decode(v, 64, &m) == 0 && m.length == 64 && m.type == SMC_LLC_TEST_LINK, "v2 TEST LINK length 64");

        /* encoder rejections */
        fill_add_link_v2(&w);
        CHECK(smc_llc_encode(&w, out, 119) == -ENOBUFS, "ADD LINK v2 ENOBUFS");
        w.add_link.rkeys = NULL;
        CHECK(smc_llc_encode(&w, out, sizeof(out)) == -EINVAL, "ADD LINK v2 rkeys NULL refused");
        fill_add_link_v2(&w);
        w.add_link.n_rkeys = 256;
        CHECK(smc_llc_encode(&w, out, sizeof(out)) == -EINVAL, "ADD LINK v2 256 rkeys refused");
        fill_add_link_v2(&w);
        w.length = 100;
        CHECK(smc_llc_encode(&w, out, sizeof(out)) == -EINVAL, "ADD LINK v2 wrong explicit length refused");
        fill_add_link_v2(&w);
        w.add_link.qpn = 0x1000000;
        CHECK(smc_llc_encode(&w, out, sizeof(out)) == -EINVAL, "ADD LINK 24-bit QPN overflow refused");
        fill_add_link_v2(&w);
        w.v2 = false;
        w.add_link_reject_reason = 16;
        CHECK(smc_llc_encode(&w, out, sizeof(out)) == -EINVAL, "v1 reject reason 16 refused");
        memset(&w, 0, sizeof(w));
        w.type = SMC_LLC_ADD_LINK_CONT;
        w.v2 = true;
        CHECK(smc_llc_encode(&w, out, sizeof(out)) == -EINVAL, "v2 ADD LINK CONT refused");
        w.type = 10;
        w.v2 = false;
        CHECK(smc_llc_encode(&w, out, sizeof(out)) == -EINVAL, "LLC type 10 refused");
        w.type = SMC_LLC_TEST_LINK;
        w.length = 45;
        CHECK(smc_llc_encode(&w, out, sizeof(out)) == -EINVAL, "v1 length 45 refused");
        w.length = 0;
        CHECK(smc_llc_encode(&w, out, 43) == -ENOBUFS, "LLC ENOBUFS");
        CHECK(smc_llc_decode(NULL, 44, &m) == -EINVAL, "LLC decode NULL");
}

/* ------------------------------------------------------------------------- */
/* compressed size (6.1) */

static void test_size(void) {
        static const struct {
                uint64_t size;
                uint8_t max, c;
        } t[] = {
                { 0, 15, 0 },
                { 1, 15, 0 },
                { 16384, 15, 0 },
                { 16385, 15, 1 },
                { 32768, 15, 1 },
                { 32769, 15, 2 },
                { 65536, 15, 2 },
                { 1u << 20, 15, 6 },
                { (1u << 20) + 1, 15, 7 },
                { 512u << 20, 15, 15 },
                { (512u << 20) + 1, 15, 15 },
                { UINT64_MAX, 15, 15 },
                { 1u << 20, 5, 5 },
                { UINT64_MAX, 40, 15 },
                { 1u << 20, 0, 0 },
        };

        for (size_t i = 0; i < ELEMENTSOF(t); i++) {
                uint8_t c = smc_size_compress(t[i].size, t[i].max);

                CHECK(c == t[i].c, "compress(%" PRIu64 ", %u) = %u, want %u", t[i].size, t[i].max, c, t[i].c);
        }
        for (uint8_t c = 0; c <= 15; c++) {
                CHECK(smc_size_uncompress(c) == (uint64_t) 16384 << c, "uncompress %u", c);
                CHECK(smc_size_compress(smc_size_uncompress(c), 15) == c, "compress(uncompress(%u))", c);
        }
}

/* ------------------------------------------------------------------------- */
/* random and mutated input through every decoder */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void) {
        uint64_t x = rng_state;

        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        return rng_state = x;
}

struct corpus {
        uint8_t b[1100];
        size_t n;
};

static unsigned rt_prop, rt_acc, rt_accd, rt_decl, rt_cdc, rt_llc, dec_ok;

/* decode -> encode -> decode must give the same struct (when the encoder takes it) */
static void roundtrip_random(const uint8_t *b, size_t n) {
        static uint8_t enc[SMC_LLC_V2_MAX_LEN];
        ssize_t e;

        {
                struct smc_clc_proposal p, p2;

                memset(&p, 0, sizeof(p));
                if (smc_clc_proposal_decode(b, n, &p) == 0) {
                        dec_ok++;
                        e = smc_clc_proposal_encode(&p, enc, sizeof(enc));
                        if (e > 0) {
                                CHECK(smc_clc_proposal_decode(enc, (size_t) e, &p2) == 0, "proposal re-decode");
                                p2.version = p.version; /* the encoder picks the version from typev2 */
                                if (p.version == 2 && p.typev2 == SMC_TYPE_N)
                                        p2.has_smcd_area = p.has_smcd_area;
                                CHECK(!memcmp(&p, &p2, sizeof(p)), "proposal round trip");
                                rt_prop++;
                        }
                }
        }
        {
                struct smc_clc_accept_r a, a2;

                if (smc_clc_accept_r_decode(b, n, &a) == 0) {
                        dec_ok++;
                        e = smc_clc_accept_r_encode(&a, enc, sizeof(enc));
                        CHECK(e > 0, "accept re-encode %zd", e);
                        if (e > 0) {
                                CHECK(smc_clc_accept_r_decode(enc, (size_t) e, &a2) == 0 && !memcmp(&a, &a2, sizeof(a)),
                                      "accept round trip");
                                rt_acc++;
                        }
                }
        }
        {
                struct smc_clc_accept_d a, a2;

                if (smc_clc_accept_d_decode(b, n, &a) == 0) {
                        dec_ok++;
                        e = smc_clc_accept_d_encode(&a, enc, sizeof(enc));
                        CHECK(e == SMC_CLC_ACCEPT_D_V1_LEN, "SMC-D accept re-encode %zd", e);
                        if (e > 0) {
                                CHECK(smc_clc_accept_d_decode(enc, (size_t) e, &a2) == 0 && !memcmp(&a, &a2, sizeof(a)),
                                      "SMC-D accept round trip");
                                rt_accd++;
                        }
                }
        }
        {
                struct smc_clc_decline d, d2;

                if (smc_clc_decline_decode(b, n, &d) == 0) {
                        dec_ok++;
                        e = smc_clc_decline_encode(&d, enc, sizeof(enc));
                        CHECK(e > 0 && smc_clc_decline_decode(enc, (size_t) e, &d2) == 0 && !memcmp(&d, &d2, sizeof(d)),
                              "decline round trip");
                        rt_decl++;
                }
        }
        {
                struct smc_cdc_msg c, c2;

                if (smc_cdc_decode(b, n, &c) == 0) {
                        dec_ok++;
                        smc_cdc_encode(&c, enc);
                        CHECK(smc_cdc_decode(enc, SMC_CDC_LEN, &c2) == 0 && !memcmp(&c, &c2, sizeof(c)), "CDC round trip");
                        rt_cdc++;
                }
        }
        {
                static struct smc_llc_rkey_entry rk1[SMC_LLC_MAX_ADD_LINK_RKEYS], rk2[SMC_LLC_MAX_ADD_LINK_RKEYS];
                struct smc_llc_msg m, m2;

                memset(&m, 0, sizeof(m));
                m.add_link.rkeys = rk1;
                if (smc_llc_decode(b, n, &m) == 0) {
                        dec_ok++;
                        e = smc_llc_encode(&m, enc, sizeof(enc));
                        if (e > 0) {
                                memset(&m2, 0, sizeof(m2));
                                m2.add_link.rkeys = rk2;
                                CHECK(smc_llc_decode(enc, (size_t) e, &m2) == 0, "LLC re-decode");
                                if (m.type == SMC_LLC_ADD_LINK) {
                                        CHECK(!memcmp(rk1, rk2, sizeof(rk1[0]) * m.add_link.n_rkeys), "LLC rkeys round trip");
                                        m2.add_link.rkeys = rk1;
                                        if (m.add_link.n_rkeys == 0) /* 0 reads the same in both byte orders */
                                                m2.add_link.n_rkeys_le = m.add_link.n_rkeys_le;
                                }
                                CHECK(!memcmp(&m, &m2, sizeof(m)), "LLC round trip type %u", m.type);
                                rt_llc++;
                        }
                }
        }
}

static void test_random(unsigned iterations) {
        static struct corpus corp[32];
        struct smc_clc_hdr h;
        size_t nc = 0;
        uint8_t *buf;

#define ADD(fn)                                                                            \
        do {                                                                               \
                corp[nc].n = fn(corp[nc].b);                                               \
                nc++;                                                                      \
        } while (0)
        ADD(vec_prop_v1);
        ADD(vec_prop_v2);
        ADD(vec_prop_v2_r_only);
        ADD(vec_prop_v1_d);
        ADD(vec_accept_v1);
        ADD(vec_confirm_v2);
        ADD(vec_prop_v1_b);
        ADD(vec_accept_d_v1);
        ADD(vec_confirm_d_v1);
        ADD(vec_accept_d_v2);
        ADD(vec_add_link_v2);
#undef ADD
        /* a few 44-byte LLC / CDC / decline seeds */
        for (uint8_t t = 1; t <= 9; t++) {
                llc_base(corp[nc].b, t == 5 ? 0x25 : t, 0);
                if (t == 5)
                        PUT(corp[nc].b, 1, 0x00, 44);
                corp[nc].b[4] = 2;
                corp[nc].n = 44;
                nc++;
        }
        corp[nc].n = 44;
        memset(corp[nc].b, 0, 44);
        PUT(corp[nc].b, 0, 0xfe, 44);
        nc++;
        corp[nc].n = 44;
        memset(corp[nc].b, 0, 44);
        PUT(corp[nc].b, 0, 0xe2, 0xd4, 0xc3, 0xd9, 0x04, 0x00, 44, 0x20);
        nc++;

        for (unsigned it = 0; it < iterations; it++) {
                uint64_t r = rnd();
                size_t n;

                if (r % 4 == 0) {
                        /* pure random bytes, random length, sometimes a valid-looking start */
                        n = rnd() % 1100;
                        buf = malloc(n ? n : 1);
                        for (size_t i = 0; i < n; i++)
                                buf[i] = (uint8_t) rnd();
                        if (n >= 8 && (r >> 8) % 2) {
                                PUT(buf, 0, 0xe2, 0xd4, 0xc3, 0xd9);
                                buf[4] = (uint8_t) (1 + rnd() % 4);
                                buf[5] = (uint8_t) (n >> 8);
                                buf[6] = (uint8_t) n;
                        }
                } else {
                        /* mutate a valid vector: flip bytes, then maybe cut or extend */
                        const struct corpus *c = &corp[rnd() % nc];
                        size_t flips = rnd() % 5;

                        n = c->n;
                        if ((r >> 8) % 8 == 0)
                                n = rnd() % (c->n + 1);
                        else if ((r >> 8) % 8 == 1)
                                n = c->n + rnd() % 64;
                        buf = malloc(n ? n : 1);
                        for (size_t i = 0; i < n; i++)
                                buf[i] = i < c->n ? c->b[i] : (uint8_t) rnd();
                        for (size_t i = 0; i < flips && n > 0; i++) {
                                size_t at = rnd() % n;

                                buf[at] = (r >> 16) % 2 ? (uint8_t) rnd() : (uint8_t) (buf[at] ^ (1u << (rnd() % 8)));
                        }
                        /* keep CLC lengths consistent half of the time to get past the header */
                        if (n >= 8 && (r >> 24) % 2 && c->b[0] == 0xe2) {
                                buf[5] = (uint8_t) (n >> 8);
                                buf[6] = (uint8_t) n;
                        }
                }
                (void) smc_clc_decode_hdr(buf, n, &h);
                roundtrip_random(buf, n);
                free(buf);
        }
        printf("random: %u iterations, %u successful decodes; round trips: proposal %u, accept %u, SMC-D accept %u, "
               "decline %u, CDC %u, LLC %u\n",
               iterations, dec_ok, rt_prop, rt_acc, rt_accd, rt_decl, rt_cdc, rt_llc);
        CHECK(rt_prop > 100 && rt_acc > 100 && rt_accd > 100 && rt_decl > 100 && rt_cdc > 100 && rt_llc > 1000,
              "the random loop reached every decoder's success path");
}

/* ------------------------------------------------------------------------- */
/* inputs found by the libFuzzer targets (fuzz/regressions/<target>/) */

static void test_fuzz_regressions(void) {
        /* fuzz/regressions/llc/add-link-v2-le-count-clamped-to-0: an ADD LINK v2 of
         * 72 bytes (no room for an rkey entry) announcing 4 entries little-endian. The
         * count is clamped to the 0 entries the length holds, with n_rkeys_le set; a
         * count of 0 encodes the same in both byte orders, so the flag is the one field
         * a decode -> encode -> decode round trip cannot keep. */
        static const uint8_t v[80] = {
                0x22, 0x00, 0x48, 0x00, [31] = 0x02, 0x03, [38] = 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                0x04, [53] = 0x70, [60] = 0xb8, 0xb8, 0xb8, 0xb8, 0xb8, 0xb8, 0xb8, 0xb8, 0xb8, 0xbc, 0xb8,
        };
        static struct smc_llc_rkey_entry rk[SMC_LLC_MAX_ADD_LINK_RKEYS];
        struct smc_llc_msg m, m2;
        uint8_t out[SMC_LLC_V2_MAX_LEN];
        ssize_t e;

        memset(&m, 0, sizeof(m));
        m.add_link.rkeys = rk;
        CHECK(dec_exact(dec_llc, v, sizeof(v), &m) == 0 && m.type == SMC_LLC_ADD_LINK && m.v2 && m.length == 72,
              "fuzz llc: ADD LINK v2 with a count beyond its length decodes");
        CHECK(m.add_link.n_rkeys == 0 && m.add_link.n_rkeys_le, "fuzz llc: count clamped to 0, little-endian seen");
        e = smc_llc_encode(&m, out, sizeof(out));
        CHECK(e == 72 && out[70] == 0 && out[71] == 0, "fuzz llc: re-encoded with count 0 (%zd bytes)", e);
        memset(&m2, 0, sizeof(m2));
        m2.add_link.rkeys = rk;
        CHECK(e == 72 && smc_llc_decode(out, 72, &m2) == 0 && m2.add_link.n_rkeys == 0 && !m2.add_link.n_rkeys_le,
              "fuzz llc: the re-decoded count 0 reads as big-endian");
        m2.add_link.n_rkeys_le = m.add_link.n_rkeys_le;
        m2.add_link.rkeys = m.add_link.rkeys; /* dec_llc() points it at its scratch array */
        CHECK(memcmp(&m, &m2, sizeof(m)) == 0, "fuzz llc: every other field survives the round trip");
}

int main(int argc, char **argv) {
        unsigned iterations = 200000;

        if (argc > 1)
                iterations = (unsigned) strtoul(argv[1], NULL, 0);
        CHECK(strlen(UEID) == 32 && strlen(SEID) == 32 && strlen(HOST) == 32, "test data: 32-byte EIDs / host");
        test_proposal();
        test_accept();
        test_accept_d();
        test_decline();
        test_cdc();
        test_llc();
        test_size();
        test_fuzz_regressions();
        test_random(iterations);
        printf("test-smcr-wire: %d checks, %d failed\n", checks, failures);
        return failures ? 1 : 0;
}
