/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libFuzzer target: smcd's endpoint table loader (smcd/eptable.c, eptable_load), which
 * a restarted smcd runs on the file an earlier one left in its runtime directory.
 *
 * Input: the file. It is written as "endpoints" (mode 0600, our uid) in a private
 * temporary directory and loaded. Refused: one of the documented errors, no records.
 * Accepted: every record returned is live and valid (known role, tokens not 0 and
 * different, DMB sizes, pid and start time not 0), no more than the header's slots;
 * and a new table made of them (eptable_create, eptable_add, eptable_commit, which
 * replaces the file) loads back as the same records in the same order.
 * LeakSanitizer (on in libFuzzer) reports any leak.
 */

#include <errno.h>
#include <string.h>

#include "eptable.h"
#include "fuzz.h"

static int ring_ok(uint32_t s) {
        return s >= 16384 && s <= (1u << 20) && !(s & (s - 1));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        struct smcd_ept_record *recs = NULL, *again = NULL;
        EpTable *t = NULL;
        int n, m;

        (void) fuzz_write_file(SMCD_EPT_NAME, data, size);
        n = eptable_load(fuzz_tmpdir(), &recs);
        if (n < 0) {
                FUZZ_CHECK(n == -EBADMSG || n == -ENOMEM);
                FUZZ_CHECK(!recs);
                fuzz_clean_tmpdir();
                return 0;
        }
        FUZZ_CHECK(size >= SMCD_EPT_HDR_LEN);
        FUZZ_CHECK((size_t) n <= (size - SMCD_EPT_HDR_LEN) / SMCD_EPT_RECORD_LEN);
        FUZZ_CHECK(n == 0 || recs);
        for (int i = 0; i < n; i++) {
                const struct smcd_ept_record *r = &recs[i];

                FUZZ_CHECK(r->state == SMCD_EPT_LIVE);
                FUZZ_CHECK(r->role == SMC_CTL_ROLE_CLIENT || r->role == SMC_CTL_ROLE_SERVER);
                FUZZ_CHECK(r->rx_token && r->tx_token && r->rx_token != r->tx_token);
                FUZZ_CHECK(ring_ok(r->rx_size) && ring_ok(r->tx_size));
                FUZZ_CHECK(r->pid > 0 && r->pid_start);
        }
        /* round trip through a table of our own */
        FUZZ_CHECK(eptable_create(fuzz_tmpdir(), 1, (uint32_t) n, &t) == 0);
        for (int i = 0; i < n; i++)
                FUZZ_CHECK(eptable_add(t, &recs[i]) == i + 1);
        FUZZ_CHECK(eptable_commit(t) == 0);
        m = eptable_load(fuzz_tmpdir(), &again);
        FUZZ_CHECK(m == n);
        FUZZ_CHECK(n == 0 || memcmp(recs, again, sizeof(*recs) * (size_t) n) == 0);
        eptable_free(t);
        free(recs);
        free(again);
        fuzz_clean_tmpdir();
        return 0;
}
