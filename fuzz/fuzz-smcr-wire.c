/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Checks shared by the SMC wire codec targets (fuzz-smcr-wire.h). Every decoder gets
 * an exact-size heap copy (AddressSanitizer sees any read past @len). */

#include <errno.h>
#include <string.h>

#include "fuzz-smcr-wire.h"
#include "fuzz.h"

static uint8_t enc[SMC_LLC_V2_MAX_LEN];

#define CHECK_RESULT(r) FUZZ_CHECK((r) == 0 || (r) == -EBADMSG || (r) == -EPROTO)

void fuzz_proposal(const uint8_t *data, size_t len) {
        struct smc_clc_proposal p, p2, before;
        uint8_t *buf = fuzz_exact_copy(data, len);
        ssize_t e;
        int r;

        memset(&p, 0xa5, sizeof(p));
        before = p;
        r = smc_clc_proposal_decode(buf, len, &p);
        CHECK_RESULT(r);
        if (r < 0) {
                FUZZ_CHECK(memcmp(&p, &before, sizeof(p)) == 0);
                goto out;
        }
        FUZZ_CHECK(p.n_ipv6 <= SMC_CLC_MAX_V6_PREFIXES && p.n_ueids <= SMC_CLC_MAX_UEIDS &&
                   p.n_ism <= SMC_CLC_MAX_ISM_ENTRIES);
        /* the decoder fills every field it does not read with a defined value only on
         * the paths that have them: compare from a zeroed struct */
        memset(&p, 0, sizeof(p));
        FUZZ_CHECK(smc_clc_proposal_decode(buf, len, &p) == 0);
        e = smc_clc_proposal_encode(&p, enc, sizeof(enc));
        if (e > 0) {
                uint8_t *again = fuzz_exact_copy(enc, (size_t) e);

                memset(&p2, 0, sizeof(p2));
                FUZZ_CHECK(smc_clc_proposal_decode(again, (size_t) e, &p2) == 0);
                free(again);
                p2.version = p.version; /* the encoder picks the version from typev2 */
                if (p.version == 2 && p.typev2 == SMC_TYPE_N)
                        p2.has_smcd_area = p.has_smcd_area;
                FUZZ_CHECK(memcmp(&p, &p2, sizeof(p)) == 0);
        }
out:
        free(buf);
}

void fuzz_accept(const uint8_t *data, size_t len) {
        struct smc_clc_accept_r a, a2, before;
        uint8_t *buf = fuzz_exact_copy(data, len);
        ssize_t e;
        int r;

        memset(&a, 0xa5, sizeof(a));
        before = a;
        r = smc_clc_accept_r_decode(buf, len, &a);
        CHECK_RESULT(r);
        if (r < 0) {
                FUZZ_CHECK(memcmp(&a, &before, sizeof(a)) == 0);
                goto out;
        }
        FUZZ_CHECK(a.n_gids <= SMC_CLC_MAX_CONFIRM_GIDS);
        memset(&a, 0, sizeof(a));
        FUZZ_CHECK(smc_clc_accept_r_decode(buf, len, &a) == 0);
        e = smc_clc_accept_r_encode(&a, enc, sizeof(enc));
        FUZZ_CHECK(e > 0);
        {
                uint8_t *again = fuzz_exact_copy(enc, (size_t) e);

                memset(&a2, 0, sizeof(a2));
                FUZZ_CHECK(smc_clc_accept_r_decode(again, (size_t) e, &a2) == 0);
                free(again);
                FUZZ_CHECK(memcmp(&a, &a2, sizeof(a)) == 0);
        }
out:
        free(buf);
}

void fuzz_accept_d(const uint8_t *data, size_t len) {
        struct smc_clc_accept_d a, a2, before;
        uint8_t *buf = fuzz_exact_copy(data, len);
        ssize_t e;
        int r;

        memset(&a, 0xa5, sizeof(a));
        before = a;
        r = smc_clc_accept_d_decode(buf, len, &a);
        CHECK_RESULT(r);
        if (r < 0) {
                FUZZ_CHECK(memcmp(&a, &before, sizeof(a)) == 0);
                goto out;
        }
        FUZZ_CHECK(len == SMC_CLC_ACCEPT_D_V1_LEN);
        FUZZ_CHECK((a.type == SMC_CLC_ACCEPT || a.type == SMC_CLC_CONFIRM) && a.dmbe_size <= 15);
        memset(&a, 0, sizeof(a));
        FUZZ_CHECK(smc_clc_accept_d_decode(buf, len, &a) == 0);
        e = smc_clc_accept_d_encode(&a, enc, sizeof(enc));
        FUZZ_CHECK(e == SMC_CLC_ACCEPT_D_V1_LEN);
        {
                uint8_t *again = fuzz_exact_copy(enc, (size_t) e);

                memset(&a2, 0, sizeof(a2));
                FUZZ_CHECK(smc_clc_accept_d_decode(again, (size_t) e, &a2) == 0);
                free(again);
                FUZZ_CHECK(memcmp(&a, &a2, sizeof(a)) == 0);
        }
        /* the SMC-R decoder refuses what this one took (typev1 D): never both */
        {
                struct smc_clc_accept_r ar;

                FUZZ_CHECK(smc_clc_accept_r_decode(buf, len, &ar) == -EPROTO);
        }
out:
        free(buf);
}

void fuzz_decline(const uint8_t *data, size_t len) {
        struct smc_clc_decline d, d2, before;
        uint8_t *buf = fuzz_exact_copy(data, len);
        ssize_t e;
        int r;

        memset(&d, 0xa5, sizeof(d));
        before = d;
        r = smc_clc_decline_decode(buf, len, &d);
        CHECK_RESULT(r);
        if (r < 0) {
                FUZZ_CHECK(memcmp(&d, &before, sizeof(d)) == 0);
                goto out;
        }
        memset(&d, 0, sizeof(d));
        FUZZ_CHECK(smc_clc_decline_decode(buf, len, &d) == 0);
        e = smc_clc_decline_encode(&d, enc, sizeof(enc));
        FUZZ_CHECK(e > 0);
        memset(&d2, 0, sizeof(d2));
        FUZZ_CHECK(smc_clc_decline_decode(enc, (size_t) e, &d2) == 0);
        FUZZ_CHECK(memcmp(&d, &d2, sizeof(d)) == 0);
out:
        free(buf);
}

void fuzz_cdc(const uint8_t *data, size_t len) {
        struct smc_cdc_msg c, c2, before;
        uint8_t *buf = fuzz_exact_copy(data, len);
        int r;

        memset(&c, 0xa5, sizeof(c));
        before = c;
        r = smc_cdc_decode(buf, len, &c);
        FUZZ_CHECK(r == 0 || r == -EBADMSG);
        if (r < 0) {
                FUZZ_CHECK(memcmp(&c, &before, sizeof(c)) == 0);
                goto out;
        }
        FUZZ_CHECK(smc_wr_is_cdc(buf, len));
        memset(&c, 0, sizeof(c));
        FUZZ_CHECK(smc_cdc_decode(buf, len, &c) == 0);
        smc_cdc_encode(&c, enc);
        memset(&c2, 0, sizeof(c2));
        FUZZ_CHECK(smc_cdc_decode(enc, SMC_CDC_LEN, &c2) == 0);
        FUZZ_CHECK(memcmp(&c, &c2, sizeof(c)) == 0);
out:
        free(buf);
}

void fuzz_llc(const uint8_t *data, size_t len) {
        static struct smc_llc_rkey_entry rk1[SMC_LLC_MAX_ADD_LINK_RKEYS], rk2[SMC_LLC_MAX_ADD_LINK_RKEYS],
                rk_before[SMC_LLC_MAX_ADD_LINK_RKEYS];
        struct smc_llc_msg m, m2, before;
        uint8_t *buf = fuzz_exact_copy(data, len);
        ssize_t e;
        int r;

        /* as smcr.c: the rkeys array set before every decode */
        memset(&m, 0xa5, sizeof(m));
        memset(rk1, 0x5a, sizeof(rk1));
        m.add_link.rkeys = rk1;
        before = m;
        memcpy(rk_before, rk1, sizeof(rk1));
        r = smc_llc_decode(buf, len, &m);
        CHECK_RESULT(r);
        if (r < 0) {
                FUZZ_CHECK(memcmp(&m, &before, sizeof(m)) == 0);
                FUZZ_CHECK(memcmp(rk1, rk_before, sizeof(rk1)) == 0);
                goto out;
        }
        FUZZ_CHECK(m.type >= 1 && m.type <= 9);
        FUZZ_CHECK(m.length >= SMC_LLC_LEN && m.length <= len);
        if (m.type == SMC_LLC_ADD_LINK)
                FUZZ_CHECK(m.add_link.n_rkeys <= SMC_LLC_MAX_ADD_LINK_RKEYS);
        memset(&m, 0, sizeof(m));
        m.add_link.rkeys = rk1;
        FUZZ_CHECK(smc_llc_decode(buf, len, &m) == 0);
        e = smc_llc_encode(&m, enc, sizeof(enc));
        if (e > 0) {
                uint8_t *again = fuzz_exact_copy(enc, (size_t) e);

                memset(&m2, 0, sizeof(m2));
                m2.add_link.rkeys = rk2;
                FUZZ_CHECK(smc_llc_decode(again, (size_t) e, &m2) == 0);
                free(again);
                if (m.type == SMC_LLC_ADD_LINK) {
                        FUZZ_CHECK(memcmp(rk1, rk2, sizeof(rk1[0]) * m.add_link.n_rkeys) == 0);
                        m2.add_link.rkeys = rk1;
                        /* a count of 0 (also one announced little-endian but clamped
                         * to the 0 entries the length holds) reads the same in both
                         * byte orders: the flag cannot survive the round trip */
                        if (m.add_link.n_rkeys == 0)
                                m2.add_link.n_rkeys_le = m.add_link.n_rkeys_le;
                }
                FUZZ_CHECK(memcmp(&m, &m2, sizeof(m)) == 0);
        }
out:
        free(buf);
}
