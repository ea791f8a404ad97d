/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The decode -> encode -> decode checks shared by fuzz-clc.c, fuzz-cdc.c and
 * fuzz-llc.c (the same rules as the random loop of tests/test-smcr-wire.c), and the
 * rule that a decoder that fails leaves its output untouched. */

#include <stddef.h>
#include <stdint.h>

#include "smcr-wire.h"

void fuzz_proposal(const uint8_t *buf, size_t len);
void fuzz_accept(const uint8_t *buf, size_t len);
void fuzz_accept_d(const uint8_t *buf, size_t len);
void fuzz_decline(const uint8_t *buf, size_t len);
void fuzz_cdc(const uint8_t *buf, size_t len);
void fuzz_llc(const uint8_t *buf, size_t len);
