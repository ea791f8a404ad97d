/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* SMC CLC decline / fallback reason codes (SMC_CLC_DECL_*), values as in Linux
 * net/smc/smc_clc.h and ../shared/smc-wire-spec.md section 2.7. The high byte is the
 * class: 01 resource, 02 timeout, 03 configuration/capability, 04 sync, 05 peer
 * declined, 09 internal. smcd records one of these for every TCP fallback. */

#define SMC_CLC_DECL_MEM         0x01010000u /* insufficient memory */
#define SMC_CLC_DECL_TIMEOUT_CL  0x02010000u /* timeout w4 QP confirm link */
#define SMC_CLC_DECL_TIMEOUT_AL  0x02020000u /* timeout w4 QP add link */
#define SMC_CLC_DECL_CNFERR      0x03000000u /* configuration error */
#define SMC_CLC_DECL_PEERNOSMC   0x03010000u /* peer did not indicate SMC */
#define SMC_CLC_DECL_IPSEC       0x03020000u /* IPsec usage */
#define SMC_CLC_DECL_NOSMCDEV    0x03030000u /* no SMC device found (R or D) */
#define SMC_CLC_DECL_NOSMCDDEV   0x03030001u /* no SMC-D device found */
#define SMC_CLC_DECL_NOSMCRDEV   0x03030002u /* no SMC-R device found */
#define SMC_CLC_DECL_MODEUNSUPP  0x03040000u /* smc modes do not match (R or D) */
#define SMC_CLC_DECL_OPTUNSUPP   0x03060000u /* fastopen sockopt not supported */
#define SMC_CLC_DECL_DIFFPREFIX  0x03070000u /* IP prefix / subnet mismatch */
#define SMC_CLC_DECL_VERSMISMAT  0x030c0000u /* SMC version mismatch */
#define SMC_CLC_DECL_MAX_DMB     0x030d0000u /* SMC-D DMB limit reached */
#define SMC_CLC_DECL_MAXCONNERR  0x0303000au /* max connections negotiation failed */
#define SMC_CLC_DECL_RMBE_EC     0x03050000u /* peer has eyecatcher in RMBE */
#define SMC_CLC_DECL_NOACTLINK   0x030a0000u /* no active link in the link group */
#define SMC_CLC_DECL_NOSRVLINK   0x030b0000u /* SMC-R link from server not found */
#define SMC_CLC_DECL_NOV2EXT     0x03030004u /* peer sent no v2 extension */
#define SMC_CLC_DECL_NOUEID      0x03030008u /* peer sent no (matching) UEID */
#define SMC_CLC_DECL_RELEASEERR  0x03030009u /* release negotiation failed */
#define SMC_CLC_DECL_MAXLINKERR  0x0303000bu /* max links negotiation failed */
#define SMC_CLC_DECL_SYNCERR     0x04000000u /* synchronization error */
#define SMC_CLC_DECL_PEERDECL    0x05000000u /* peer declined during handshake */
#define SMC_CLC_DECL_INTERR      0x09990000u /* internal error */
#define SMC_CLC_DECL_ERR_RTOK    0x09990001u /* rtoken handling failed */
#define SMC_CLC_DECL_ERR_RDYLNK  0x09990002u /* QP bring-up failed */
#define SMC_CLC_DECL_ERR_REGBUF  0x09990003u /* memory registration failed */

/* smcd's own reasons, in a range Linux does not use (0x0b......); they are local
 * decisions of smcd and never sent to a kernel SMC peer in a CLC DECLINE (a decline on
 * the wire carries SMC_CLC_DECL_PEERDECL's family instead). */
#define SMCD_DECL_POLICY         0x0b010000u /* an smcctl policy rule says TCP */
#define SMCD_DECL_HSRATE         0x0b020000u /* the uid's handshakes-per-second limit */
#define SMCD_DECL_IOURING        0x0b030000u /* the program uses io_uring (smcrun) */
#define SMCD_DECL_SHORTCONN      0x0b040000u /* short-lived connections at a high rate (smc-hints.h) */
#define SMCD_DECL_MAXCLIENTS     0x0b050000u /* the uid's control connections (max_clients_per_uid) */

/* How smcd uses them for loopback ISM (SMC-D):
 *   NOSMCDDEV   smcd not reachable (not running, socket missing, handshake failed)
 *   PEERNOSMC   no SMC listener for the destination on this host
 *   MAXCONNERR  per-uid connection limit reached
 *   MAX_DMB     per-uid buffer-bytes limit reached
 *   MEM         buffer allocation failed
 *   OPTUNSUPP   a socket option that SMC cannot honour was set before connect
 *   SMCD_DECL_POLICY  a policy rule (smcctl policy) selects TCP for this connection
 *   SMCD_DECL_HSRATE  the uid made more handshakes per second than allowed
 *   SMCD_DECL_IOURING the program (under smcrun) has an io_uring or loaded liburing:
 *                     io_uring acts on descriptors in the kernel, past the library, so
 *                     its sockets stay TCP (decided by the library, told to smcd)
 *   SMCD_DECL_SHORTCONN the destination's SMC-D connections were short-lived at a
 *                     high rate (tunable short_conn_rate): for a second its new
 *                     connections are TCP, decided by the library from smcd's hints
 *                     (smc-hints.h) without asking smcd, counted in batches
 *   SMCD_DECL_MAXCLIENTS the uid has max_clients_per_uid control connections: a
 *                     process admitted beyond them only to take over (adopt) the
 *                     connections it inherited across exec gets TCP for the rest
 *   INTERR      anything else that went wrong inside smcd or the library */

/* Name of a reason code ("SMC_CLC_DECL_PEERNOSMC"), or "SMC_CLC_DECL_UNKNOWN". */
static inline const char *smc_clc_decl_name(unsigned int code) {
        switch (code) {
        case 0: return "none";
        case SMC_CLC_DECL_MEM: return "SMC_CLC_DECL_MEM";
        case SMC_CLC_DECL_TIMEOUT_CL: return "SMC_CLC_DECL_TIMEOUT_CL";
        case SMC_CLC_DECL_TIMEOUT_AL: return "SMC_CLC_DECL_TIMEOUT_AL";
        case SMC_CLC_DECL_CNFERR: return "SMC_CLC_DECL_CNFERR";
        case SMC_CLC_DECL_PEERNOSMC: return "SMC_CLC_DECL_PEERNOSMC";
        case SMC_CLC_DECL_IPSEC: return "SMC_CLC_DECL_IPSEC";
        case SMC_CLC_DECL_NOSMCDEV: return "SMC_CLC_DECL_NOSMCDEV";
        case SMC_CLC_DECL_NOSMCDDEV: return "SMC_CLC_DECL_NOSMCDDEV";
        case SMC_CLC_DECL_NOSMCRDEV: return "SMC_CLC_DECL_NOSMCRDEV";
        case SMC_CLC_DECL_MODEUNSUPP: return "SMC_CLC_DECL_MODEUNSUPP";
        case SMC_CLC_DECL_OPTUNSUPP: return "SMC_CLC_DECL_OPTUNSUPP";
        case SMC_CLC_DECL_DIFFPREFIX: return "SMC_CLC_DECL_DIFFPREFIX";
        case SMC_CLC_DECL_VERSMISMAT: return "SMC_CLC_DECL_VERSMISMAT";
        case SMC_CLC_DECL_MAX_DMB: return "SMC_CLC_DECL_MAX_DMB";
        case SMC_CLC_DECL_MAXCONNERR: return "SMC_CLC_DECL_MAXCONNERR";
        case SMC_CLC_DECL_RMBE_EC: return "SMC_CLC_DECL_RMBE_EC";
        case SMC_CLC_DECL_NOACTLINK: return "SMC_CLC_DECL_NOACTLINK";
        case SMC_CLC_DECL_NOSRVLINK: return "SMC_CLC_DECL_NOSRVLINK";
        case SMC_CLC_DECL_NOV2EXT: return "SMC_CLC_DECL_NOV2EXT";
        case SMC_CLC_DECL_NOUEID: return "SMC_CLC_DECL_NOUEID";
        case SMC_CLC_DECL_RELEASEERR: return "SMC_CLC_DECL_RELEASEERR";
        case SMC_CLC_DECL_MAXLINKERR: return "SMC_CLC_DECL_MAXLINKERR";
        case SMC_CLC_DECL_SYNCERR: return "SMC_CLC_DECL_SYNCERR";
        case SMC_CLC_DECL_PEERDECL: return "SMC_CLC_DECL_PEERDECL";
        case SMC_CLC_DECL_INTERR: return "SMC_CLC_DECL_INTERR";
        case SMC_CLC_DECL_ERR_RTOK: return "SMC_CLC_DECL_ERR_RTOK";
        case SMC_CLC_DECL_ERR_RDYLNK: return "SMC_CLC_DECL_ERR_RDYLNK";
        case SMC_CLC_DECL_ERR_REGBUF: return "SMC_CLC_DECL_ERR_REGBUF";
        case SMCD_DECL_POLICY: return "SMCD_DECL_POLICY";
        case SMCD_DECL_HSRATE: return "SMCD_DECL_HSRATE";
        case SMCD_DECL_IOURING: return "SMCD_DECL_IOURING";
        case SMCD_DECL_SHORTCONN: return "SMCD_DECL_SHORTCONN";
        case SMCD_DECL_MAXCLIENTS: return "SMCD_DECL_MAXCLIENTS";
        default: return "SMC_CLC_DECL_UNKNOWN";
        }
}
