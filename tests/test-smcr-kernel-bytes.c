/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The exact bytes the Linux kernel's SMC-R v2 sent to smcd, decoded with smcd's own
 * decoders (smcd/smcr-wire.h), every field checked, and where smcd encodes the same
 * message, smcd's encoder output compared with the kernel's bytes.
 *
 * Captured with tests/vm/kernel-smc-capture.sh (tcpdump on the kernel host's veth,
 * extracted by tests/vm/smc-pcap-extract.py) in the qemu VM on Debian's kernel
 * 6.12.117+deb12-amd64 (x86_64: host byte order = little-endian), soft-RoCE:
 *   smcd   host A: rxe0 on smc0a, 10.77.0.1, MAC 02:00:0a:4d:00:01, GID ::ffff:10.77.0.1
 *   kernel host B: rxe1 on smc0b, 10.77.0.2, MAC 02:00:0a:4d:00:02, GID ::ffff:10.77.0.2
 * kernel sysctls at their defaults (smcr_max_links_per_lgr 2, smcr_max_conns_per_lgr
 * 255) except smcr_testlink_time = 3 s; the kernel's hostname "vm"; its UEID table
 * KCAPTURE-OTHER (decline phase) and then SMCD-USERSPACE (smcd's, smcd/smcr.c).
 * "capture #N" is the message's index in the tool's messages.txt of that run. Every
 * array here is kernel -> smcd, except the one marked smcd -> kernel.
 *
 * Kernel facts these bytes show (see also the report of issue 6 item 4 and the
 * comments in smcd/smcr-wire.h):
 *  - LLC v2 length (bytes 1-2) little-endian (2c 00 = 44, 58 00 = 88); the ADD LINK
 *    v2 rkey count (bytes 70-71) little-endian (01 00). smcd writes both big-endian
 *    (unless n_rkeys_le); that is the only byte difference to smcd's encoder in
 *    every LLC message below.
 *  - The peer ID (CLC bytes 8-15) is the kernel's system id: 2 random bytes + the MAC
 *    of the FIRST RoCE device the kernel registered, here rxe0 = host A's MAC (both
 *    "hosts" share one kernel in this VM). The Proposal (typev1 = N) carries no peer
 *    ID, GID or MAC at all (zeros), but Accept / Confirm / Decline do.
 *  - Proposal v2 extension: release 1 (v2.1), feature mask 0x0001 (emulated ISM) even
 *    though only SMC-R is offered; the Accept FCE repeats 0x0001, the Confirm FCE
 *    carries the AND with smcd's (0).
 *  - With no common UEID the kernel server declines smcd's proposal (SMC-R for v1 and
 *    v2) with DIFFPREFIX (0x03070000), not NOUEID: it reports its last failed check,
 *    the SMC-R v1 prefix match (10.77.0.1/32 vs 10.77.0.2/32).
 *  - DELETE RKEY v2 is 44 bytes with one rkey; its response keeps the count (1) and
 *    zeroes the rkey.
 *  - rmmod smc: DELETE LINK "all" (0x40, not orderly), link number 0, reason
 *    0x00020000 (operator-initiated termination), on every link group.
 */

#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "smcr-wire.h"

#define ELEMENTSOF(a) (sizeof(a) / sizeof((a)[0]))

static const uint8_t KERNEL_MAC[6] = { 0x02, 0x00, 0x0a, 0x4d, 0x00, 0x02 };
static const uint8_t KERNEL_GID[16] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 77, 0, 2 };
/* the kernel's system id: 2 random bytes + rxe0's MAC (see the top) */
static const uint8_t KERNEL_PEER_ID[8] = { 0xe4, 0x24, 0x02, 0x00, 0x0a, 0x4d, 0x00, 0x01 };
static const char UEID_SMCD[33] = "SMCD-USERSPACE                  ";
static const char UEID_OTHER[33] = "KCAPTURE-OTHER                  ";
static const char HOST_VM[33] = "vm                              ";
static const uint8_t ZERO[64];

/* from the same capture: the kernel's first RMB on its link 1 (rkey, RDMA address)
 * and on its asymmetric link 2 (ADD LINK), the QPs and PSNs of its links */
#define K_RMB_RKEY      0x00000316u
#define K_RMB_RKEY_L2   0x000005dcu
#define K_RMB_ADDR      UINT64_C(0xffff8880094f0000)
#define K_SRV_QPN       0x000011u /* kernel server, link 1 */
#define K_SRV_PSN       0x7efb4fu /* = the PSN of its first SEND (CONFIRM LINK) */
#define K_SRV_QPN_L2    0x000012u /* its asymmetric link 2 (ADD LINK) */
#define K_CLI_QPN       0x000013u /* kernel client, link 1 */
#define K_CLI_PSN       0x3b7870u /* = the PSN of its CONFIRM LINK response */

/* ------------------------------------------------------------------------- */
/* the bytes */

/* capture #0000, phase decline-from-kernel: kernel->smcd, CLC_PROPOSAL, 156 bytes;
 * ver=2 typev1=2 typev2=0; tcp 10.77.0.2:36292 -> 10.77.0.1:7001 */
static const uint8_t k_proposal_ueid_other[] = {
        0xe2, 0xd4, 0xc3, 0xd9, 0x01, 0x00, 0x9c, 0x22, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x1c, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x10,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0xff, 0xff, 0x0a, 0x4d, 0x00, 0x02, 0xff, 0x02, 0x00, 0x01,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x4b, 0x43, 0x41, 0x50, 0x54, 0x55, 0x52, 0x45, 0x2d, 0x4f, 0x54, 0x48,
        0x45, 0x52, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
        0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0xe2, 0xd4, 0xc3, 0xd9,
};
/* capture #0003, phase decline-to-kernel: kernel->smcd, CLC_DECLINE, 44 bytes;
 * ver=2 typev1=0 typev2=0 out_of_sync=0 diag=0x03070000; tcp 10.77.0.2:7002 -> 10.77.0.1:54239 */
static const uint8_t k_decline[] = {
        0xe2, 0xd4, 0xc3, 0xd9, 0x04, 0x00, 0x2c, 0x20, 0xe4, 0x24, 0x02, 0x00,
        0x0a, 0x4d, 0x00, 0x01, 0x03, 0x07, 0x00, 0x00, 0x20, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0xe2, 0xd4, 0xc3, 0xd9,
};
/* capture #0005, phase to-kernel-first: kernel->smcd, CLC_ACCEPT, 160 bytes;
 * ver=2 smc_type=0 first_contact=1; tcp 10.77.0.2:7003 -> 10.77.0.1:47607 */
static const uint8_t k_accept_first[] = {
        0xe2, 0xd4, 0xc3, 0xd9, 0x02, 0x00, 0xa0, 0x28, 0xe4, 0x24, 0x02, 0x00,
        0x0a, 0x4d, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0xff, 0xff, 0x0a, 0x4d, 0x00, 0x02, 0x02, 0x00, 0x0a, 0x4d,
        0x00, 0x02, 0x00, 0x00, 0x11, 0x00, 0x00, 0x03, 0x16, 0x01, 0x00, 0x00,
        0x00, 0x01, 0x23, 0x00, 0xff, 0xff, 0x88, 0x80, 0x09, 0x4f, 0x00, 0x00,
        0x00, 0x7e, 0xfb, 0x4f, 0x53, 0x4d, 0x43, 0x44, 0x2d, 0x55, 0x53, 0x45,
        0x52, 0x53, 0x50, 0x41, 0x43, 0x45, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
        0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x21, 0x00, 0x00,
        0x76, 0x6d, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
        0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
        0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0xff, 0x02, 0x00, 0x01,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0xe2, 0xd4, 0xc3, 0xd9,
};
/* capture #0007, phase to-kernel-first: kernel->smcd, LLCv2_CONFIRM_LINK_REQ, 44 bytes;
 * len_le=44 len_be=11264 flags=0x03; qpn=0x000011 psn=0x7efb4f SEND_ONLY */
static const uint8_t k_confirm_link_req[] = {
        0x21, 0x2c, 0x00, 0x03, 0x02, 0x00, 0x0a, 0x4d, 0x00, 0x02, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0x0a, 0x4d,
        0x00, 0x02, 0x00, 0x00, 0x11, 0x01, 0x00, 0x00, 0x01, 0x01, 0x02, 0xff,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
};
/* capture #0009, phase to-kernel-first: kernel->smcd, LLCv2_ADD_LINK_REQ, 88 bytes;
 * len_le=88 len_be=22528 flags=0x00; qpn=0x000011 psn=0x7efb50 SEND_ONLY */
static const uint8_t k_add_link_req[] = {
        0x22, 0x58, 0x00, 0x00, 0x02, 0x00, 0x0a, 0x4d, 0x00, 0x02, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff,
        0x0a, 0x4d, 0x00, 0x02, 0x00, 0x00, 0x12, 0x02, 0x03, 0x82, 0x32, 0xf9,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0x0a, 0x4d,
        0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00,
        0x00, 0x00, 0x03, 0x16, 0x00, 0x00, 0x05, 0xdc, 0xff, 0xff, 0x88, 0x80,
        0x09, 0x4f, 0x00, 0x00,
};
/* capture #0012, phase to-kernel-first: kernel->smcd, CDC, 44 bytes;
 * seqno=1 token=0x71884113 prod=0:1000 cons=0:1016 prod_flags=0x00 conn_flags=0x00; qpn=0x000011
 * psn=0x7efb52 SEND_ONLY */
static const uint8_t k_cdc_data[] = {
        0xfe, 0x2c, 0x00, 0x01, 0x71, 0x88, 0x41, 0x13, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x03, 0xe8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0xf8,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
};
/* capture #0013, phase to-kernel-first: kernel->smcd, CDC, 44 bytes;
 * seqno=2 token=0x71884113 prod=0:1000 cons=0:1016 prod_flags=0x00 conn_flags=0x40; qpn=0x000011
 * psn=0x7efb53 SEND_ONLY */
static const uint8_t k_cdc_closed[] = {
        0xfe, 0x2c, 0x00, 0x02, 0x71, 0x88, 0x41, 0x13, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x03, 0xe8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0xf8,
        0x00, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
};
/* capture #0015, phase to-kernel-first: kernel->smcd, LLCv2_DELETE_RKEY_REQ, 44 bytes;
 * len_le=44 len_be=11264 flags=0x00; qpn=0x000011 psn=0x7efb54 SEND_ONLY */
static const uint8_t k_delete_rkey_req[] = {
        0x29, 0x2c, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0x16,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
};
/* capture #0017, phase to-kernel-first: kernel->smcd, LLCv2_DELETE_RKEY_RESP, 44 bytes;
 * len_le=44 len_be=11264 flags=0x80; qpn=0x000011 psn=0x7efb55 SEND_ONLY */
static const uint8_t k_delete_rkey_resp[] = {
        0x29, 0x2c, 0x00, 0x80, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
};
/* capture #0020, phase to-kernel-reuse: kernel->smcd, LLCv2_CONFIRM_RKEY_REQ, 44 bytes;
 * len_le=44 len_be=11264 flags=0x00; qpn=0x000011 psn=0x7efb56 SEND_ONLY */
static const uint8_t k_confirm_rkey_req[] = {
        0x26, 0x2c, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0x16, 0xff, 0xff, 0x88,
        0x80, 0x09, 0x4f, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
};
/* capture #0022, phase to-kernel-reuse: kernel->smcd, CLC_ACCEPT, 108 bytes;
 * ver=2 smc_type=0 first_contact=0; tcp 10.77.0.2:7004 -> 10.77.0.1:48551 */
static const uint8_t k_accept_reuse[] = {
        0xe2, 0xd4, 0xc3, 0xd9, 0x02, 0x00, 0x6c, 0x20, 0xe4, 0x24, 0x02, 0x00,
        0x0a, 0x4d, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0xff, 0xff, 0x0a, 0x4d, 0x00, 0x02, 0x02, 0x00, 0x0a, 0x4d,
        0x00, 0x02, 0x00, 0x00, 0x11, 0x00, 0x00, 0x03, 0x16, 0x01, 0x00, 0x00,
        0x00, 0x02, 0x23, 0x00, 0xff, 0xff, 0x88, 0x80, 0x09, 0x4f, 0x00, 0x00,
        0x00, 0x7e, 0xfb, 0x4f, 0x53, 0x4d, 0x43, 0x44, 0x2d, 0x55, 0x53, 0x45,
        0x52, 0x53, 0x50, 0x41, 0x43, 0x45, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
        0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xe2, 0xd4, 0xc3, 0xd9,
};
/* capture #0023, phase to-kernel-reuse: smcd->kernel, LLCv2_CONFIRM_RKEY_REQ, 44 bytes;
 * len_le=11264 len_be=44 flags=0x00; qpn=0x000011 psn=0xa08863 SEND_ONLY */
/* (smcd -> kernel: the request the kernel answers with #0024) */
static const uint8_t s_confirm_rkey_req[] = {
        0x26, 0x00, 0x2c, 0x00, 0x00, 0x00, 0x00, 0x06, 0xfd, 0x00, 0x00, 0x7f,
        0x06, 0x03, 0x46, 0xd0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
};
/* capture #0024, phase to-kernel-reuse: kernel->smcd, LLCv2_CONFIRM_RKEY_RESP, 44 bytes;
 * len_le=44 len_be=11264 flags=0x80; qpn=0x000011 psn=0x7efb57 SEND_ONLY */
static const uint8_t k_confirm_rkey_resp[] = {
        0x26, 0x2c, 0x00, 0x80, 0x00, 0x00, 0x00, 0x06, 0xfd, 0x00, 0x00, 0x7f,
        0x06, 0x03, 0x46, 0xd0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
};
/* capture #0044, phase to-kernel-reuse: kernel->smcd, CDC, 44 bytes;
 * seqno=2 token=0x47c3acb5 prod=1:0 cons=1:16 prod_flags=0x80 conn_flags=0x00; qpn=0x000011 psn=0x7efba0 SEND_ONLY */
static const uint8_t k_cdc_write_blocked[] = {
        0xfe, 0x2c, 0x00, 0x02, 0x47, 0xc3, 0xac, 0xb5, 0x00, 0x00, 0x00, 0x01,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x10,
        0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
};
/* capture #0094, phase to-kernel-smcd-closes-first: kernel->smcd, LLCv2_TEST_LINK_REQ, 44 bytes;
 * len_le=44 len_be=11264 flags=0x00; qpn=0x000011 psn=0x7efbb8 SEND_ONLY */
static const uint8_t k_test_link_req[] = {
        0x27, 0x2c, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
};
/* capture #0111, phase from-kernel-first: kernel->smcd, CLC_PROPOSAL, 156 bytes;
 * ver=2 typev1=2 typev2=0; tcp 10.77.0.2:49792 -> 10.77.0.1:7007 */
static const uint8_t k_proposal[] = {
        0xe2, 0xd4, 0xc3, 0xd9, 0x01, 0x00, 0x9c, 0x22, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x1c, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x10,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0xff, 0xff, 0x0a, 0x4d, 0x00, 0x02, 0xff, 0x02, 0x00, 0x01,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x53, 0x4d, 0x43, 0x44, 0x2d, 0x55, 0x53, 0x45, 0x52, 0x53, 0x50, 0x41,
        0x43, 0x45, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
        0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0xe2, 0xd4, 0xc3, 0xd9,
};
/* capture #0113, phase from-kernel-first: kernel->smcd, CLC_CONFIRM, 180 bytes;
 * ver=2 smc_type=0 first_contact=1; tcp 10.77.0.2:49792 -> 10.77.0.1:7007 */
static const uint8_t k_confirm_first[] = {
        0xe2, 0xd4, 0xc3, 0xd9, 0x03, 0x00, 0xb4, 0x28, 0xe4, 0x24, 0x02, 0x00,
        0x0a, 0x4d, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0xff, 0xff, 0x0a, 0x4d, 0x00, 0x02, 0x02, 0x00, 0x0a, 0x4d,
        0x00, 0x02, 0x00, 0x00, 0x13, 0x00, 0x00, 0x09, 0x02, 0x01, 0x00, 0x00,
        0x00, 0x08, 0x23, 0x00, 0xff, 0xff, 0x88, 0x80, 0x09, 0x5d, 0x00, 0x00,
        0x00, 0x3b, 0x78, 0x70, 0x53, 0x4d, 0x43, 0x44, 0x2d, 0x55, 0x53, 0x45,
        0x52, 0x53, 0x50, 0x41, 0x43, 0x45, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
        0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x21, 0x00, 0x00,
        0x76, 0x6d, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
        0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
        0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0xff, 0x02, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0xff, 0xff, 0x0a, 0x4d, 0x00, 0x02, 0xe2, 0xd4, 0xc3, 0xd9,
};
/* capture #0115, phase from-kernel-first: kernel->smcd, LLCv2_CONFIRM_LINK_RESP, 44 bytes;
 * len_le=44 len_be=11264 flags=0x83; qpn=0x000012 psn=0x3b7870 SEND_ONLY */
static const uint8_t k_confirm_link_resp[] = {
        0x21, 0x2c, 0x00, 0x83, 0x02, 0x00, 0x0a, 0x4d, 0x00, 0x02, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0x0a, 0x4d,
        0x00, 0x02, 0x00, 0x00, 0x13, 0x01, 0x00, 0x00, 0x02, 0x01, 0x02, 0xff,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
};
/* capture #0134, phase from-kernel-reuse: kernel->smcd, CLC_CONFIRM, 108 bytes;
 * ver=2 smc_type=0 first_contact=0; tcp 10.77.0.2:36778 -> 10.77.0.1:7008 */
static const uint8_t k_confirm_reuse[] = {
        0xe2, 0xd4, 0xc3, 0xd9, 0x03, 0x00, 0x6c, 0x20, 0xe4, 0x24, 0x02, 0x00,
        0x0a, 0x4d, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0xff, 0xff, 0x0a, 0x4d, 0x00, 0x02, 0x02, 0x00, 0x0a, 0x4d,
        0x00, 0x02, 0x00, 0x00, 0x13, 0x00, 0x00, 0x09, 0x02, 0x01, 0x00, 0x00,
        0x00, 0x09, 0x23, 0x00, 0xff, 0xff, 0x88, 0x80, 0x09, 0x5d, 0x00, 0x00,
        0x00, 0x3b, 0x78, 0x70, 0x53, 0x4d, 0x43, 0x44, 0x2d, 0x55, 0x53, 0x45,
        0x52, 0x53, 0x50, 0x41, 0x43, 0x45, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
        0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xe2, 0xd4, 0xc3, 0xd9,
};
/* capture #0223, phase from-kernel-kernel-closes-first: kernel->smcd, CDC, 44 bytes;
 * seqno=3 token=0x09f19238 prod=0:116 cons=0:0 prod_flags=0x00 conn_flags=0x80; qpn=0x000012 psn=0x3b78ec SEND_ONLY */
static const uint8_t k_cdc_done_writing[] = {
        0xfe, 0x2c, 0x00, 0x03, 0x09, 0xf1, 0x92, 0x38, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x74, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
};
/* capture #0225, phase from-kernel-kernel-closes-first: kernel->smcd, CDC, 44 bytes;
 * seqno=4 token=0x09f19238 prod=0:116 cons=0:100 prod_flags=0x00 conn_flags=0xc0; qpn=0x000012
 * psn=0x3b78ed SEND_ONLY */
static const uint8_t k_cdc_done_closed[] = {
        0xfe, 0x2c, 0x00, 0x04, 0x09, 0xf1, 0x92, 0x38, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x74, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x64,
        0x00, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
};
/* capture #0243, phase rmmod: kernel->smcd, LLCv2_DELETE_LINK_REQ, 44 bytes;
 * len_le=44 len_be=11264 flags=0x40; qpn=0x000011 psn=0x7efbc7 SEND_ONLY */
static const uint8_t k_delete_link_all[] = {
        0x24, 0x2c, 0x00, 0x40, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
};

/* ------------------------------------------------------------------------- */
/* helpers */

/* @got (smcd's encoder, @got_n bytes) equals @want except at the byte offsets in
 * @allowed (the documented differences); each differing offset is checked */
static void check_same_bytes(const char *what, const uint8_t *got, ssize_t got_n, const uint8_t *want,
                             size_t want_n, const unsigned *allowed, size_t n_allowed) {
        CHECK(got_n == (ssize_t) want_n, "%s: smcd encodes %zd bytes, the kernel sent %zu", what, got_n, want_n);
        if (got_n != (ssize_t) want_n)
                return;
        for (size_t i = 0; i < want_n; i++) {
                bool ok = got[i] == want[i];

                for (size_t j = 0; !ok && j < n_allowed; j++)
                        ok = allowed[j] == i;
                CHECK(ok, "%s: byte %zu: smcd 0x%02x, kernel 0x%02x", what, i, got[i], want[i]);
        }
}

/* The LLC v2 length in smcd's encoding (big-endian) vs the kernel's (little-endian):
 * bytes 1 and 2 are swapped, nothing else may differ. */
static const unsigned LLC_LEN_BYTES[] = { 1, 2 };
/* the ADD LINK v2 rkey entries of the last check_llc() */
static struct smc_llc_rkey_entry llc_rkeys[SMC_LLC_MAX_ADD_LINK_RKEYS];

static void check_llc_len_swapped(const char *what, const uint8_t *smcd, const uint8_t *kernel, uint16_t len) {
        CHECK(kernel[1] == (len & 0xff) && kernel[2] == len >> 8, "%s: kernel length little-endian %u", what, len);
        CHECK(smcd[1] == len >> 8 && smcd[2] == (len & 0xff), "%s: smcd length big-endian %u", what, len);
}

/* every truncation of a decodable message is refused, the output left alone */
static void check_truncations(const char *what, const uint8_t *buf, size_t len, size_t min_len,
                              int (*dec)(const uint8_t *, size_t, void *), void *out, size_t out_size) {
        uint8_t before[4096];

        if (out_size > sizeof(before))
                return;
        memcpy(before, out, out_size);
        for (size_t l = min_len; l < len; l++) {
                int r = dec(buf, l, out);

                if (r != -EBADMSG)
                        CHECK(r == -EBADMSG, "%s: truncated to %zu: %d", what, l, r);
                if (memcmp(before, out, out_size) != 0) {
                        CHECK(false, "%s: truncated to %zu changed the output", what, l);
                        memcpy(out, before, out_size);
                }
        }
        CHECK(true, "%s: every truncation refused", what);
}

static int dec_prop(const uint8_t *b, size_t l, void *o) {
        return smc_clc_proposal_decode(b, l, o);
}
static int dec_acc(const uint8_t *b, size_t l, void *o) {
        return smc_clc_accept_r_decode(b, l, o);
}
static int dec_decl(const uint8_t *b, size_t l, void *o) {
        return smc_clc_decline_decode(b, l, o);
}

/* ------------------------------------------------------------------------- */
/* CLC */

/* the kernel client's Proposal: SMC-R v2 only (typev1 N, typev2 R), header version 2 */
static void check_kernel_proposal(const char *what, const uint8_t *buf, size_t len, const char *ueid) {
        struct smc_clc_proposal p, q;
        struct smc_clc_hdr h;
        uint8_t enc[SMC_CLC_MAX_LEN];
        ssize_t n;

        CHECK(smc_clc_decode_hdr(buf, len, &h) == 0, "%s: header", what);
        CHECK(h.eyecatcher == SMC_EYECATCHER_R && h.type == SMC_CLC_PROPOSAL && h.length == len && h.version == 2 &&
              h.typev1 == SMC_TYPE_N && h.typev2 == SMC_TYPE_R,
              "%s: header eyecatcher %08x type %u length %u version %u typev1 %u typev2 %u", what, h.eyecatcher,
              h.type, h.length, h.version, h.typev1, h.typev2);
        /* 40 + 40 + (typev1 N: no IP area) + 40 + 32 * 1 UEID + (no SMC-D: no SMC-Dv2
         * extension) + 4 = 156, Linux's length formula (2.3) */
        CHECK(len == 156, "%s: length %zu", what, len);
        memset(&p, 0xa5, sizeof(p));
        CHECK(smc_clc_proposal_decode(buf, len, &p) == 0, "%s: decodes", what);
        CHECK(p.version == 2 && p.typev1 == SMC_TYPE_N && p.typev2 == SMC_TYPE_R, "%s: versions/types", what);
        /* [Linux] peer ID, GID and MAC only with SMC-R in typev1: all zero here */
        CHECK(memcmp(p.peer_id, ZERO, 8) == 0 && memcmp(p.gid, ZERO, 16) == 0 && memcmp(p.mac, ZERO, 6) == 0,
              "%s: no peer ID / v1 GID / MAC without SMC-R v1", what);
        CHECK(p.has_smcd_area && p.ism_gid == 0 && p.ism_chid == 0, "%s: the 40-byte SMC-D/v2 area, empty", what);
        /* IP-area offset 0 (bytes 38-39) and v2-extension offset 28 (bytes 50-51) */
        CHECK(buf[38] == 0 && buf[39] == 0 && buf[50] == 0 && buf[51] == 28, "%s: offsets 0 / 28", what);
        CHECK(p.n_ipv6 == 0 && p.ipv4_prefix_len == 0, "%s: no IP prefix area", what);
        CHECK(p.n_ueids == 1 && memcmp(p.ueids[0], ueid, 32) == 0, "%s: one UEID '%.32s'", what,
              (const char *) p.ueids[0]);
        CHECK(p.release == 1 && !p.seid_enabled, "%s: release %u (v2.1), SEID off", what, p.release);
        CHECK(memcmp(p.roce_v2_gid, KERNEL_GID, 16) == 0, "%s: RoCEv2 GID ::ffff:10.77.0.2", what);
        CHECK(p.max_conns == 255 && p.max_links == 2, "%s: max_conns %u max_links %u (sysctl defaults)", what,
              p.max_conns, p.max_links);
        /* the kernel offers the emulated-ISM feature bit even in an SMC-R-only proposal */
        CHECK(p.feature_mask == 0x0001, "%s: feature mask 0x%04x", what, p.feature_mask);
        CHECK(p.n_ism == 0, "%s: no ISM entries", what);
        /* vendor OUI / options (52-59) and the reserved bytes are zero */
        CHECK(memcmp(buf + 52, ZERO, 28) == 0 && memcmp(buf + 80 + 28, ZERO, 12) == 0, "%s: reserved zero", what);

        /* smcd's encoder, from the decoded fields: the same 156 bytes */
        q = p;
        n = smc_clc_proposal_encode(&q, enc, sizeof(enc));
        check_same_bytes(what, enc, n, buf, len, NULL, 0);
        check_truncations(what, buf, len, 0, dec_prop, &p, sizeof(p));
}

static void test_proposal(void) {
        /* capture #0111, kernel client -> smcd server, UEID SMCD-USERSPACE */
        check_kernel_proposal("Proposal", k_proposal, sizeof(k_proposal), UEID_SMCD);
        /* capture #0000, the same with the UEID smcd does not have (smcd declined it
         * with NOUEID 0x03030008) */
        check_kernel_proposal("Proposal (other UEID)", k_proposal_ueid_other, sizeof(k_proposal_ueid_other),
                              UEID_OTHER);
        CHECK(memcmp(k_proposal, k_proposal_ueid_other, 120) == 0 &&
              memcmp(k_proposal + 152, k_proposal_ueid_other + 152, 4) == 0,
              "the two proposals differ only in the UEID");
}

/* an SMC-R v2 Accept / Confirm of the kernel */
static void check_kernel_accept(const char *what, const uint8_t *buf, size_t len, uint8_t type, bool first,
                                struct smc_clc_accept_r *a) {
        uint8_t enc[SMC_CLC_MAX_LEN];
        struct smc_clc_hdr h;
        ssize_t n;

        CHECK(smc_clc_decode_hdr(buf, len, &h) == 0 && h.type == type && h.version == 2 && h.typev1 == SMC_TYPE_R &&
              h.eyecatcher == SMC_EYECATCHER_R && h.length == len,
              "%s: header", what);
        memset(a, 0xa5, sizeof(*a));
        CHECK(smc_clc_accept_r_decode(buf, len, a) == 0, "%s: decodes", what);
        CHECK(a->type == type && a->version == 2 && a->first_contact == first, "%s: type %u version %u first %d", what,
              a->type, a->version, a->first_contact);
        CHECK(memcmp(a->peer_id, KERNEL_PEER_ID, 8) == 0, "%s: the kernel's peer ID", what);
        CHECK(memcmp(a->gid, KERNEL_GID, 16) == 0 && memcmp(a->mac, KERNEL_MAC, 6) == 0, "%s: GID / MAC of rxe1", what);
        CHECK(a->rmbe_idx == 1, "%s: RMBE index 1", what);
        /* the kernel's RMB: 64 KiB (from sk_rcvbuf), MTU 1024 (rxe on a 1500-byte veth) */
        CHECK(a->rmbe_size == 2 && a->qp_mtu == 3, "%s: RMBE size %u MTU %u", what, a->rmbe_size, a->qp_mtu);
        CHECK(memcmp(a->eid, UEID_SMCD, 32) == 0, "%s: EID SMCD-USERSPACE", what);
        CHECK(buf[51] == 0 && buf[60] == 0 && memcmp(buf + 96, ZERO, 8) == 0, "%s: reserved zero", what);
        if (first) {
                CHECK(a->fce.v2_direct && a->fce.os_type == 2 && a->fce.release == 1, "%s: FCE direct, Linux, v2.1",
                      what);
                CHECK(memcmp(a->fce.hostname, HOST_VM, 32) == 0, "%s: FCE host name", what);
                CHECK(a->fce.max_conns == 255 && a->fce.max_links == 2, "%s: FCE max_conns %u max_links %u", what,
                      a->fce.max_conns, a->fce.max_links);
                /* the FCE is 52 bytes: vendor options (+40) and reserved (+44) zero */
                CHECK(memcmp(buf + 104 + 40, ZERO, 12) == 0, "%s: FCE tail zero", what);
        }
        /* smcd's encoder, from the decoded fields: the same bytes */
        n = smc_clc_accept_r_encode(a, enc, sizeof(enc));
        check_same_bytes(what, enc, n, buf, len, NULL, 0);
        {
                struct smc_clc_accept_r t = *a;

                check_truncations(what, buf, len, 0, dec_acc, &t, sizeof(t));
        }
}

static void test_accept_confirm(void) {
        struct smc_clc_accept_r a;

        /* capture #0005: kernel server -> smcd client, first contact, 108 + 52 (FCE) */
        check_kernel_accept("Accept (first contact)", k_accept_first, sizeof(k_accept_first), SMC_CLC_ACCEPT, true, &a);
        CHECK(sizeof(k_accept_first) == 160, "Accept (first contact): 160 bytes");
        CHECK(a.qpn == K_SRV_QPN && a.psn == K_SRV_PSN, "Accept: QPN 0x%06x PSN 0x%06x", a.qpn, a.psn);
        CHECK(a.rkey == K_RMB_RKEY && a.rmb_addr == K_RMB_ADDR, "Accept: rkey 0x%08x addr 0x%016" PRIx64, a.rkey,
              a.rmb_addr);
        CHECK(a.rmbe_alert_token == 1, "Accept: token %u (the kernel's first connection)", a.rmbe_alert_token);
        /* the server's FCE offers its feature mask (2.8) */
        CHECK(a.fce.feature_mask == 0x0001, "Accept: FCE feature mask 0x%04x", a.fce.feature_mask);

        /* capture #0022: the next connection reuses the link group: 108 bytes, no FCE,
         * the same link (QPN, PSN as in the first Accept), the next token, the same RMB
         * (its rkey confirmed again by CONFIRM RKEY #0020 first) */
        check_kernel_accept("Accept (reuse)", k_accept_reuse, sizeof(k_accept_reuse), SMC_CLC_ACCEPT, false, &a);
        CHECK(sizeof(k_accept_reuse) == 108, "Accept (reuse): 108 bytes");
        CHECK(a.qpn == K_SRV_QPN && a.psn == K_SRV_PSN && a.rmbe_alert_token == 2 && a.rkey == K_RMB_RKEY &&
              a.rmb_addr == K_RMB_ADDR,
              "Accept (reuse): QPN 0x%06x PSN 0x%06x token %u rkey 0x%x", a.qpn, a.psn, a.rmbe_alert_token, a.rkey);

        /* capture #0113: kernel client -> smcd server, first contact: 108 + 52 (FCE) +
         * the GID list {1, 3 reserved, ::ffff:10.77.0.2} + 4 = 180 */
        check_kernel_accept("Confirm (first contact)", k_confirm_first, sizeof(k_confirm_first), SMC_CLC_CONFIRM, true,
                            &a);
        CHECK(sizeof(k_confirm_first) == 180, "Confirm (first contact): 180 bytes");
        CHECK(a.qpn == K_CLI_QPN && a.psn == K_CLI_PSN, "Confirm: QPN 0x%06x PSN 0x%06x", a.qpn, a.psn);
        CHECK(a.rkey == 0x00000902 && a.rmb_addr == UINT64_C(0xffff8880095d0000) && a.rmbe_alert_token == 8,
              "Confirm: rkey 0x%x addr 0x%016" PRIx64 " token %u", a.rkey, a.rmb_addr, a.rmbe_alert_token);
        CHECK(a.n_gids == 1 && memcmp(a.gids[0], KERNEL_GID, 16) == 0, "Confirm: GID list = its one RoCEv2 GID");
        /* the client echoes max_conns / max_links and ANDs the feature mask with the
         * server's: smcd's Accept offered 0 (capture #0112) */
        CHECK(a.fce.feature_mask == 0, "Confirm: FCE feature mask 0x%04x", a.fce.feature_mask);

        /* capture #0134: reuse, 108 bytes, the same link and RMB, the next token */
        check_kernel_accept("Confirm (reuse)", k_confirm_reuse, sizeof(k_confirm_reuse), SMC_CLC_CONFIRM, false, &a);
        CHECK(a.qpn == K_CLI_QPN && a.psn == K_CLI_PSN && a.rkey == 0x00000902 && a.rmbe_alert_token == 9,
              "Confirm (reuse): QPN 0x%06x token %u", a.qpn, a.rmbe_alert_token);
}

static void test_decline(void) {
        struct smc_clc_decline d, e;
        uint8_t enc[64];
        ssize_t n;

        /* capture #0003: smcd client -> kernel server, the kernel's UEID table without
         * SMCD-USERSPACE: the kernel declines (v2, 44 bytes). The reason is DIFFPREFIX,
         * not NOUEID: after skipping SMC-R v2 (no common UEID) the kernel tried SMC-R
         * v1, which smcd offers too (typev1 R, prefix 10.77.0.1/32), found the
         * prefixes differ and reports that last failure. */
        memset(&d, 0xa5, sizeof(d));
        CHECK(smc_clc_decline_decode(k_decline, sizeof(k_decline), &d) == 0, "Decline decodes");
        CHECK(d.version == 2 && d.eyecatcher == SMC_EYECATCHER_R && !d.out_of_sync, "Decline: v2, R, in sync");
        CHECK(memcmp(d.peer_id, KERNEL_PEER_ID, 8) == 0, "Decline: the kernel's peer ID (not zeros)");
        CHECK(d.diag == 0x03070000, "Decline: diag 0x%08x (DIFFPREFIX)", d.diag);
        CHECK(d.os_type == 2, "Decline: OS type %u (Linux)", d.os_type);
        CHECK(k_decline[7] == 0x20 && memcmp(k_decline + 21, ZERO, 19) == 0, "Decline: byte 7, reserved zero");
        e = d;
        n = smc_clc_decline_encode(&e, enc, sizeof(enc));
        check_same_bytes("Decline", enc, n, k_decline, sizeof(k_decline), NULL, 0);
        check_truncations("Decline", k_decline, sizeof(k_decline), 0, dec_decl, &d, sizeof(d));
}

/* ------------------------------------------------------------------------- */
/* CDC */

struct cdc_case {
        const char *what;
        const uint8_t *buf;
        size_t len;
        struct smc_cdc_msg want;
};

static void test_cdc(void) {
        /* tokens: smcd's alert tokens of the connections (what the kernel must send) */
        const struct cdc_case cases[] = {
                /* #0012: kernel server's reply: 1000 bytes after smcd's 1016 (16-byte
                 * header + 1000) consumed */
                { "CDC data", k_cdc_data, sizeof(k_cdc_data), { 1, 0x71884113, 0, 1000, 0, 1016, 0, 0 } },
                /* #0013: the kernel server closes first (close() with all data read):
                 * peer connection closed, cursors unchanged, next seqno */
                { "CDC closed", k_cdc_closed, sizeof(k_cdc_closed),
                  { 2, 0x71884113, 0, 1000, 0, 1016, 0, SMC_CDC_CONN_CLOSED } },
                /* #0044: 65536 + 16 bytes into smcd's 64 KiB RMBE: the producer wrapped
                 * (wrap 1, count 0) and the kernel still has data: write blocked */
                { "CDC write blocked", k_cdc_write_blocked, sizeof(k_cdc_write_blocked),
                  { 2, 0x47c3acb5, 1, 0, 1, 16, SMC_CDC_PROD_WRITE_BLOCKED, 0 } },
                /* #0223: the kernel client half-closes (shutdown SHUT_WR) first */
                { "CDC done writing", k_cdc_done_writing, sizeof(k_cdc_done_writing),
                  { 3, 0x09f19238, 0, 116, 0, 0, 0, SMC_CDC_CONN_DONE_WRITING } },
                /* #0225: ... then reads smcd's 100 bytes and closes: done writing stays set */
                { "CDC done writing + closed", k_cdc_done_closed, sizeof(k_cdc_done_closed),
                  { 4, 0x09f19238, 0, 116, 0, 100, 0, SMC_CDC_CONN_DONE_WRITING | SMC_CDC_CONN_CLOSED } },
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                const struct cdc_case *c = &cases[i];
                struct smc_cdc_msg m;
                uint8_t enc[SMC_CDC_LEN];

                CHECK(c->len == SMC_CDC_LEN && smc_wr_is_cdc(c->buf, c->len), "%s: a 44-byte CDC", c->what);
                memset(&m, 0xa5, sizeof(m));
                CHECK(smc_cdc_decode(c->buf, c->len, &m) == 0, "%s: decodes", c->what);
                CHECK(m.seqno == c->want.seqno && m.token == c->want.token, "%s: seqno %u token 0x%08x", c->what,
                      m.seqno, m.token);
                CHECK(m.prod_wrap == c->want.prod_wrap && m.prod_count == c->want.prod_count &&
                      m.cons_wrap == c->want.cons_wrap && m.cons_count == c->want.cons_count,
                      "%s: prod %u:%u cons %u:%u", c->what, m.prod_wrap, m.prod_count, m.cons_wrap, m.cons_count);
                CHECK(m.prod_flags == c->want.prod_flags && m.conn_flags == c->want.conn_flags,
                      "%s: flags 0x%02x 0x%02x", c->what, m.prod_flags, m.conn_flags);
                /* the cursors' 2 reserved bytes and bytes 26-43 are zero */
                CHECK(memcmp(c->buf + 8, ZERO, 2) == 0 && memcmp(c->buf + 16, ZERO, 2) == 0 &&
                      memcmp(c->buf + 26, ZERO, 18) == 0,
                      "%s: reserved zero", c->what);
                /* smcd's CDC for the same fields: byte for byte the kernel's */
                smc_cdc_encode(&m, enc);
                check_same_bytes(c->what, enc, SMC_CDC_LEN, c->buf, c->len, NULL, 0);
                CHECK(smc_cdc_decode(c->buf, SMC_CDC_LEN - 1, &m) == -EBADMSG, "%s: 43 bytes refused", c->what);
        }
}

/* ------------------------------------------------------------------------- */
/* LLC */

/* decode the kernel's v2 LLC message @buf, check type, length, flags; then smcd's
 * encoder for the decoded fields: the same bytes but the length's byte order */
static void check_llc(const char *what, const uint8_t *buf, size_t len, uint8_t type, uint8_t flags,
                      struct smc_llc_msg *m) {
        uint8_t enc[SMC_LLC_V2_MAX_LEN];
        struct smc_llc_msg t;
        ssize_t n;

        CHECK(!smc_wr_is_cdc(buf, len), "%s: not a CDC", what);
        memset(m, 0xa5, sizeof(*m));
        memset(llc_rkeys, 0xa5, sizeof(llc_rkeys));
        m->add_link.rkeys = llc_rkeys; /* the union: set before every decode */
        CHECK(smc_llc_decode(buf, len, m) == 0, "%s: decodes", what);
        CHECK(m->v2 && m->type == type && m->length == len && m->flags == flags,
              "%s: v2 %d type %u length %u flags 0x%02x", what, m->v2, m->type, m->length, m->flags);
        CHECK(buf[0] == (0x20 | type), "%s: byte 0 = 0x%02x", what, 0x20 | type);
        t = *m;
        n = smc_llc_encode(&t, enc, sizeof(enc));
        check_same_bytes(what, enc, n, buf, len, LLC_LEN_BYTES, ELEMENTSOF(LLC_LEN_BYTES));
        if (n == (ssize_t) len)
                check_llc_len_swapped(what, enc, buf, (uint16_t) len);
        /* a v2 message shorter than its length, or than 44 bytes, is refused */
        {
                struct smc_llc_msg before = *m, u = *m;

                for (size_t l = 0; l < len; l++) {
                        u.add_link.rkeys = NULL;
                        if (smc_llc_decode(buf, l, &u) != -EBADMSG)
                                CHECK(false, "%s: truncated to %zu decodes", what, l);
                }
                u.add_link.rkeys = before.add_link.rkeys;
                CHECK(memcmp(&u, &before, sizeof(u)) == 0, "%s: truncations left the output alone", what);
        }
}

static void test_llc(void) {
        const struct smc_llc_rkey_entry *rk = llc_rkeys;
        struct smc_llc_msg m;
        uint8_t enc[SMC_LLC_V2_MAX_LEN];
        ssize_t n;

        /* #0007: CONFIRM LINK request, kernel server, first link (flags 0x03: no RMBE
         * eyecatchers). link_uid = htonl(lgr id 0x100 (host-order counter) + link 1) */
        check_llc("CONFIRM LINK req", k_confirm_link_req, sizeof(k_confirm_link_req), SMC_LLC_CONFIRM_LINK,
                  SMC_LLC_FLAG_NO_RMBE_EYEC, &m);
        CHECK(memcmp(m.confirm_link.mac, KERNEL_MAC, 6) == 0 && memcmp(m.confirm_link.gid, KERNEL_GID, 16) == 0,
              "CONFIRM LINK req: MAC / GID");
        CHECK(m.confirm_link.qpn == K_SRV_QPN && m.confirm_link.link_num == 1 && m.confirm_link.link_uid == 0x00000101,
              "CONFIRM LINK req: QPN 0x%06x (= Accept) link %u uid 0x%08x", m.confirm_link.qpn,
              m.confirm_link.link_num, m.confirm_link.link_uid);
        CHECK(m.confirm_link.max_links == 2 && m.confirm_link.max_conns == 255,
              "CONFIRM LINK req: max_links %u max_conns %u (v2.1, as in the Accept FCE)", m.confirm_link.max_links,
              m.confirm_link.max_conns);
        CHECK(memcmp(k_confirm_link_req + 36, ZERO, 8) == 0, "CONFIRM LINK req: reserved zero");

        /* #0115: CONFIRM LINK response, kernel client: its QP of the Confirm, the link
         * number smcd assigned (1), the uid smcd sent (0x93a55c01, smcd's capture #0114)
         * is NOT echoed: the kernel sends its own link uid (htonl(0x200 + 1)) */
        check_llc("CONFIRM LINK resp", k_confirm_link_resp, sizeof(k_confirm_link_resp), SMC_LLC_CONFIRM_LINK,
                  SMC_LLC_FLAG_RESP | SMC_LLC_FLAG_NO_RMBE_EYEC, &m);
        CHECK(m.confirm_link.qpn == K_CLI_QPN && m.confirm_link.link_num == 1 &&
              m.confirm_link.link_uid == 0x00000201 &&
              m.confirm_link.max_links == 2 && m.confirm_link.max_conns == 255 &&
              memcmp(m.confirm_link.mac, KERNEL_MAC, 6) == 0 && memcmp(m.confirm_link.gid, KERNEL_GID, 16) == 0,
              "CONFIRM LINK resp: QPN 0x%06x link %u uid 0x%08x", m.confirm_link.qpn, m.confirm_link.link_num,
              m.confirm_link.link_uid);

        /* #0009: the kernel server's ADD LINK request right after the first link: only
         * rxe1 is in its pnet table, so the new link 2 is asymmetric (same MAC / GID,
         * a new QP). v2: 72 + 16 * 1 rkey = 88 bytes; v2_direct; the rkey count 01 00
         * (little-endian, host order); one entry: RMB rkey on link 1 -> on link 2, the
         * same RDMA address. smcd rejects it (capture #0010: 44 bytes, flags 0xc0). */
        check_llc("ADD LINK req", k_add_link_req, sizeof(k_add_link_req), SMC_LLC_ADD_LINK, 0, &m);
        CHECK(memcmp(m.add_link.mac, KERNEL_MAC, 6) == 0 && memcmp(m.add_link.gid, KERNEL_GID, 16) == 0 &&
              memcmp(m.add_link.target_gid, KERNEL_GID, 16) == 0,
              "ADD LINK req: MAC / GID / target GID of rxe1 (asymmetric)");
        CHECK(m.add_link.qpn == K_SRV_QPN_L2 && m.add_link.link_num == 2 && m.add_link.qp_mtu == 3 &&
              m.add_link.psn == 0x8232f9,
              "ADD LINK req: QPN 0x%06x link %u MTU %u PSN 0x%06x", m.add_link.qpn, m.add_link.link_num,
              m.add_link.qp_mtu, m.add_link.psn);
        CHECK(m.add_link.v2_direct && m.add_link.n_rkeys == 1 && m.add_link.n_rkeys_le,
              "ADD LINK req: direct, %u rkey, count little-endian %d", m.add_link.n_rkeys, m.add_link.n_rkeys_le);
        CHECK(rk[0].rkey_old == K_RMB_RKEY && rk[0].rkey_new == K_RMB_RKEY_L2 && rk[0].addr_new == K_RMB_ADDR,
              "ADD LINK req: rkey 0x%x -> 0x%x addr 0x%016" PRIx64 " (= the Accept's)", rk[0].rkey_old,
              rk[0].rkey_new, rk[0].addr_new);
        CHECK(k_add_link_req[70] == 1 && k_add_link_req[71] == 0, "ADD LINK req: count bytes 01 00");
        CHECK(memcmp(k_add_link_req + 36, ZERO, 8) == 0 && k_add_link_req[45] == 0 &&
              memcmp(k_add_link_req + 62, ZERO, 8) == 0 && (k_add_link_req[32] & 0xf0) == 0,
              "ADD LINK req: reserved zero");
        /* check_llc() compared smcd's encoder (n_rkeys_le as decoded, the entries):
         * the same 88 bytes but the length (1-2). Without n_rkeys_le smcd writes the
         * count 00 01, which this x86 kernel reads as 256 and truncates to 0 rkeys. */
        m.add_link.rkeys = llc_rkeys;
        m.add_link.n_rkeys_le = false;
        n = smc_llc_encode(&m, enc, sizeof(enc));
        CHECK(n == (ssize_t) sizeof(k_add_link_req) && enc[70] == 0 && enc[71] == 1 &&
              memcmp(enc + 72, k_add_link_req + 72, 16) == 0,
              "ADD LINK req: big-endian count 00 01 otherwise");

        /* #0020: CONFIRM RKEY request before the second Accept: the RMB of #0005 again
         * (freed and re-registered: same rkey / address), no other links yet */
        check_llc("CONFIRM RKEY req", k_confirm_rkey_req, sizeof(k_confirm_rkey_req), SMC_LLC_CONFIRM_RKEY, 0, &m);
        CHECK(m.confirm_rkey.num_rkeys == 0 && m.confirm_rkey.rkey == K_RMB_RKEY && m.confirm_rkey.addr == K_RMB_ADDR,
              "CONFIRM RKEY req: %u more, rkey 0x%x addr 0x%016" PRIx64, m.confirm_rkey.num_rkeys,
              m.confirm_rkey.rkey, m.confirm_rkey.addr);
        CHECK(memcmp(k_confirm_rkey_req + 17, ZERO, 27) == 0, "CONFIRM RKEY req: empty entries");

        /* #0024: the kernel's response to smcd's CONFIRM RKEY #0023: it echoes smcd's
         * message (rkey, address) with the response flag, in its own length order */
        check_llc("CONFIRM RKEY resp", k_confirm_rkey_resp, sizeof(k_confirm_rkey_resp), SMC_LLC_CONFIRM_RKEY,
                  SMC_LLC_FLAG_RESP, &m);
        CHECK(m.confirm_rkey.num_rkeys == 0 && m.confirm_rkey.rkey == 0x000006fd &&
              m.confirm_rkey.addr == UINT64_C(0x00007f060346d000),
              "CONFIRM RKEY resp: rkey 0x%x addr 0x%016" PRIx64, m.confirm_rkey.rkey, m.confirm_rkey.addr);
        CHECK(memcmp(k_confirm_rkey_resp + 4, s_confirm_rkey_req + 4, 40) == 0 && s_confirm_rkey_req[3] == 0,
              "CONFIRM RKEY resp: bytes 4-43 = smcd's request");

        /* #0015 / #0017: DELETE RKEY after the first connection closed: one rkey (the
         * RMB's on this link), 44 bytes in v2 too; the response keeps the count, zeroes
         * the rkey (error byte 0: no invalid rkeys) */
        check_llc("DELETE RKEY req", k_delete_rkey_req, sizeof(k_delete_rkey_req), SMC_LLC_DELETE_RKEY, 0, &m);
        CHECK(m.delete_rkey.num_rkeys == 1 && m.delete_rkey.err_mask == 0 && m.delete_rkey.rkeys[0] == K_RMB_RKEY,
              "DELETE RKEY req: %u rkey 0x%x", m.delete_rkey.num_rkeys, m.delete_rkey.rkeys[0]);
        check_llc("DELETE RKEY resp", k_delete_rkey_resp, sizeof(k_delete_rkey_resp), SMC_LLC_DELETE_RKEY,
                  SMC_LLC_FLAG_RESP, &m);
        CHECK(m.delete_rkey.num_rkeys == 1 && m.delete_rkey.err_mask == 0 && m.delete_rkey.rkeys[0] == 0,
              "DELETE RKEY resp: count %u kept, rkey zeroed, %u invalid", m.delete_rkey.num_rkeys,
              m.delete_rkey.err_mask);

        /* #0094: TEST LINK request (smcr_testlink_time 3 s): 16 bytes of zero user data */
        check_llc("TEST LINK req", k_test_link_req, sizeof(k_test_link_req), SMC_LLC_TEST_LINK, 0, &m);
        CHECK(memcmp(m.test_link.user_data, ZERO, 16) == 0, "TEST LINK req: user data zero");
        /* smcd's response (capture #0095): the request echoed with the response flag */
        m.flags = SMC_LLC_FLAG_RESP;
        n = smc_llc_encode(&m, enc, sizeof(enc));
        CHECK(n == SMC_LLC_LEN && enc[3] == SMC_LLC_FLAG_RESP && memcmp(enc + 4, k_test_link_req + 4, 40) == 0,
              "TEST LINK resp: smcd echoes the kernel's bytes 4-43");

        /* #0243: `rmmod smc`: DELETE LINK all (0x40, not orderly), link 0, reason
         * operator-initiated termination */
        check_llc("DELETE LINK req", k_delete_link_all, sizeof(k_delete_link_all), SMC_LLC_DELETE_LINK,
                  SMC_LLC_FLAG_DEL_LINK_ALL, &m);
        CHECK(m.delete_link.link_num == 0 && m.delete_link.reason == SMC_LLC_DEL_OP_INIT_TERM,
              "DELETE LINK: link %u reason 0x%08x", m.delete_link.link_num, m.delete_link.reason);
}

int main(void) {
        CHECK(strlen(UEID_SMCD) == 32 && strlen(UEID_OTHER) == 32 && strlen(HOST_VM) == 32, "test data: 32 bytes");
        test_proposal();
        test_accept_confirm();
        test_decline();
        test_cdc();
        test_llc();
        printf("test-smcr-kernel-bytes: %d checks, %d failed\n", checks, failures);
        return failures ? 1 : 0;
}
