/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libFuzzer target: smc_cdc_decode() (smcd/smcr-wire.c), a 44-byte RDMA receive as
 * smcd/smcr.c's link receive handler gets it when smc_wr_is_cdc() says CDC; each
 * message accepted is encoded again and must decode to the same fields.
 */

#include "fuzz-smcr-wire.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        fuzz_cdc(data, size);
        return 0;
}
