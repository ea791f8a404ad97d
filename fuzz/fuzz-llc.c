/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libFuzzer target: smc_llc_decode() (smcd/smcr-wire.c), an RDMA receive of up to
 * SMC_LLC_V2_MAX_LEN bytes as smcd/smcr.c's link receive handler gets it when
 * smc_wr_is_cdc() says LLC (the rkeys array set before every decode, as there); each
 * message accepted is encoded again (where an encoder exists) and must decode to the
 * same fields, and a refused one leaves the output and the rkeys array untouched.
 */

#include "fuzz-smcr-wire.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (size > SMC_LLC_V2_MAX_LEN)
                return 0; /* a receive buffer is no larger */
        if (!smc_wr_is_cdc(data, size))
                fuzz_llc(data, size);
        else
                fuzz_cdc(data, size);
        return 0;
}
