/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libFuzzer target: the SMC CLC decoders of smcd/smcr-wire.c (smc_clc_decode_hdr,
 * smc_clc_proposal_decode, smc_clc_accept_r_decode, smc_clc_accept_d_decode,
 * smc_clc_decline_decode).
 *
 * The input is what a peer sends on the TCP connection: read as smcd/smcr.c's
 * on_hs_io() and hs_on_clc() do, a header (8 bytes), then exactly its length, handed
 * to the decoder of its type (an Accept/Confirm to both the SMC-R and the SMC-D one);
 * then the next message (at most 8). Each message accepted is encoded again and must
 * decode to the same fields. Besides, the whole input goes through every decoder as
 * it is (lengths that disagree with the header).
 */

#include <errno.h>

#include "fuzz-smcr-wire.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        const uint8_t *p = data;
        size_t rest = size;

        for (unsigned i = 0; i < 8 && rest >= SMC_CLC_HDR_LEN; i++) {
                struct smc_clc_hdr h;
                uint8_t *hdr = fuzz_exact_copy(p, SMC_CLC_HDR_LEN);
                int r = smc_clc_decode_hdr(hdr, SMC_CLC_HDR_LEN, &h);

                free(hdr);
                FUZZ_CHECK(r == 0 || r == -EBADMSG || r == -EPROTO);
                if (r < 0)
                        break;
                FUZZ_CHECK(h.length > SMC_CLC_HDR_LEN && h.length <= SMC_CLC_MAX_LEN);
                FUZZ_CHECK(h.type >= SMC_CLC_PROPOSAL && h.type <= SMC_CLC_DECLINE);
                if (h.length > rest)
                        break; /* the peer would still owe bytes */
                switch (h.type) {
                case SMC_CLC_PROPOSAL:
                        fuzz_proposal(p, h.length);
                        break;
                case SMC_CLC_ACCEPT:
                case SMC_CLC_CONFIRM:
                        fuzz_accept(p, h.length);
                        fuzz_accept_d(p, h.length);
                        break;
                case SMC_CLC_DECLINE:
                        fuzz_decline(p, h.length);
                        break;
                }
                p += h.length;
                rest -= h.length;
        }

        fuzz_proposal(data, size);
        fuzz_accept(data, size);
        fuzz_accept_d(data, size);
        fuzz_decline(data, size);
        return 0;
}
