/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * SMC wire formats: CLC (on the TCP connection), SMC-R CDC and LLC (44-byte RDMA
 * SENDs), encoders and strict decoders. Every layout, offset and rule here is from
 * ../shared/smc-wire-spec.md (section numbers in the comments), which was checked
 * against Linux net/smc (smc_clc.h, smc_cdc.h, smc_llc.c); RFC 7609 Appendix A
 * defines the v1 formats. All integers on the wire are big-endian (the spec's [Linux]
 * host-order exceptions are parsed defensively, as the spec advises, and noted below).
 * The notes "[6.12 bytes]" are what the bytes a real kernel (Debian 6.12, x86_64) sent
 * to smcd showed; those bytes are tests/test-smcr-kernel-bytes.c (captured with
 * tests/vm/kernel-smc-capture.sh).
 *
 * Decoders take the received bytes and their length and fill a plain C struct; they
 * never read past @len, check every length/count/version rule the spec states, and
 * return 0 or -EBADMSG (malformed: wrong eyecatcher, type, length, count) or
 * -EPROTO (well-formed but a version/type this codec does not handle); on error the
 * output is left untouched. Encoders write into a caller buffer and return the number
 * of bytes written, or -EINVAL (a field out of range) or -ENOBUFS (buffer too small;
 * nothing written). NULL message/struct pointers are -EINVAL everywhere. No
 * allocation, no logging, no global state: safe from any thread.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* ---- CLC (spec section 2) ---- */

#define SMC_EYECATCHER_R 0xE2D4C3D9u /* EBCDIC "SMCR" */
#define SMC_EYECATCHER_D 0xE2D4C3C4u /* EBCDIC "SMCD" */

#define SMC_CLC_PROPOSAL 1
#define SMC_CLC_ACCEPT   2
#define SMC_CLC_CONFIRM  3
#define SMC_CLC_DECLINE  4

/* SMC type codes in the header's typev1 / typev2 bits (2.2) */
#define SMC_TYPE_R 0 /* SMC-R */
#define SMC_TYPE_D 1 /* SMC-D */
#define SMC_TYPE_N 2 /* none */
#define SMC_TYPE_B 3 /* both */

#define SMC_CLC_HDR_LEN      8
#define SMC_CLC_TRAILER_LEN  4
#define SMC_CLC_MAX_LEN      1024 /* bytes: no CLC message we accept is longer (a
                                   * maximal v2 proposal is 40+40+8+136+40+256+48+80+4) */
#define SMC_CLC_ACCEPT_R_V1_LEN 68   /* exact (2.4) */
#define SMC_CLC_ACCEPT_R_V2_MIN 108  /* minimum (2.4) */
#define SMC_CLC_ACCEPT_D_V1_LEN 48   /* exact (2.5) */
#define SMC_CLC_DECLINE_V1_LEN  28   /* exact (2.7) */
#define SMC_CLC_DECLINE_V2_LEN  44   /* exact (2.7) */
#define SMC_CLC_MAX_V6_PREFIXES 8
#define SMC_CLC_MAX_UEIDS       8
#define SMC_CLC_MAX_ISM_ENTRIES 8
#define SMC_CLC_MAX_CONFIRM_GIDS 2   /* GID list in a first-contact v2 CONFIRM (2.4) */
#define SMC_EID_LEN 32
#define SMC_HOSTNAME_LEN 32

/* The common 8-byte header (2.2), as decoded by smc_clc_decode_hdr(). */
struct smc_clc_hdr {
        uint32_t eyecatcher; /* SMC_EYECATCHER_R or _D */
        uint8_t type;        /* SMC_CLC_* */
        uint16_t length;     /* whole message, header and trailer included (bytes) */
        uint8_t version;     /* bits 7-4 of byte 7: 1 or 2 */
        uint8_t typev1;      /* bits 1-0 */
        uint8_t typev2;      /* bits 3-2 (Proposal: v2 types; Accept/Confirm: bit 3 =
                              * first contact; Decline: bit 3 = out of sync) */
};

/* Check and decode the 8-byte header at @buf (@len >= 8): either eyecatcher, type
 * 1..4, version 1..2 (a higher version is -EPROTO), length at least the type's
 * minimum (Proposal 40+4... see the .c) and at most SMC_CLC_MAX_LEN. The caller then
 * reads exactly h->length bytes in total (2.1: never more). Returns 0, -EBADMSG,
 * -EPROTO. */
int smc_clc_decode_hdr(const uint8_t *buf, size_t len, struct smc_clc_hdr *h);

struct smc_clc_ipv6_prefix {
        uint8_t prefix[16];
        uint8_t len; /* bits */
};

/* PROPOSAL (2.3). Encoders follow Linux's builder: version 2 in the header when
 * typev2 != N, else version 1; the 40-byte SMC-D area is always included when
 * version is 2 or has_smcd_area is set; IP-area offset 40 then if typev1 != N,
 * else 0 (Linux). With typev1 == N, ism_gid must be 0 (see the .c). */
struct smc_clc_proposal {
        uint32_t eyecatcher;     /* decode: what the header had; encode: 0 = R */
        uint8_t version;         /* decode only: header version */
        uint8_t typev1;          /* SMC_TYPE_* offered for v1 */
        uint8_t typev2;          /* SMC_TYPE_* offered for v2 (N if version 1) */
        uint8_t peer_id[8];      /* 2 random bytes + 6-byte MAC of a RoCE port.
                                  * [6.12 bytes] Linux leaves peer_id, gid and mac
                                  * zero unless SMC-R is offered for v1 (its
                                  * v2-only proposal has none of them) */
        uint8_t gid[16];         /* SMC-R v1: client's RoCE GID */
        uint8_t mac[6];          /* SMC-R v1: MAC of that port */
        bool has_smcd_area;      /* the 40-byte SMC-D/v2 area is present */
        uint64_t ism_gid;        /* SMC-D area: native ISM GID */
        uint16_t ism_chid;       /* SMC-D area: CHID */
        /* IP prefix area: present iff typev1 != N */
        uint8_t ipv4_prefix[4];  /* address AND mask, network order; 0 for IPv6 */
        uint8_t ipv4_prefix_len; /* bits */
        uint8_t n_ipv6;          /* 0..8 */
        struct smc_clc_ipv6_prefix ipv6[SMC_CLC_MAX_V6_PREFIXES];
        /* v2 extension: present iff typev2 != N */
        uint8_t n_ueids;         /* 0..8 */
        uint8_t ueids[SMC_CLC_MAX_UEIDS][SMC_EID_LEN];
        uint8_t release;         /* 0 = v2.0, 1 = v2.1 */
        bool seid_enabled;
        uint8_t roce_v2_gid[16]; /* IPv4-mapped ::ffff:a.b.c.d */
        uint8_t max_conns;       /* v2.1 */
        uint8_t max_links;       /* v2.1 */
        uint16_t feature_mask;   /* [6.12 bytes] Linux sets 0x0001 (emulated ISM) even
                                  * when it offers SMC-R only */
        /* SMC-Dv2 extension: present iff typev2 is D or B */
        uint8_t seid[SMC_EID_LEN];
        uint8_t n_ism;           /* 0..8 {gid, chid} entries */
        struct {
                uint64_t gid;
                uint16_t chid;
        } ism[SMC_CLC_MAX_ISM_ENTRIES];
};

/* Encode @p into @buf; returns the length (also written into the header) or -EINVAL
 * (counts over their maxima, typev1 and typev2 both N) / -ENOBUFS. */
ssize_t smc_clc_proposal_encode(const struct smc_clc_proposal *p, uint8_t *buf, size_t buflen);
/* Decode a whole PROPOSAL of @len bytes (= the header's length). Applies Linux's
 * exact length check (2.3, "Length check performed by Linux") and the trailer check.
 * Returns 0, -EBADMSG, -EPROTO. */
int smc_clc_proposal_decode(const uint8_t *buf, size_t len, struct smc_clc_proposal *p);

/* First-contact extension (2.6) */
struct smc_clc_fce {
        bool v2_direct;
        uint8_t os_type;   /* 2 = Linux */
        uint8_t release;   /* 0 or 1 */
        char hostname[SMC_HOSTNAME_LEN]; /* blank padded, not NUL terminated */
        uint8_t max_conns; /* v2.1 */
        uint8_t max_links; /* v2.1 */
        uint16_t feature_mask;
};

/* ACCEPT (server -> client) / CONFIRM (client -> server), SMC-R (2.4) */
struct smc_clc_accept_r {
        uint8_t type;            /* SMC_CLC_ACCEPT or SMC_CLC_CONFIRM */
        uint8_t version;         /* 1 or 2 */
        uint32_t eyecatcher;     /* decode: what the header had; encode: 0 = R */
        bool first_contact;      /* header bit 3 */
        uint8_t peer_id[8];
        uint8_t gid[16];         /* sender's GID for the link */
        uint8_t mac[6];
        uint32_t qpn;            /* 24 bits */
        uint32_t rkey;           /* RMB rkey on this link */
        uint8_t rmbe_idx;        /* 1 */
        uint32_t rmbe_alert_token;
        uint8_t rmbe_size;       /* compressed size c (6.1), 0..15 */
        uint8_t qp_mtu;          /* IB MTU enum 1..5 */
        uint64_t rmb_addr;       /* RDMA address of the RMB (opaque to the peer) */
        uint32_t psn;            /* 24 bits */
        /* v2 only */
        uint8_t eid[SMC_EID_LEN];
        struct smc_clc_fce fce;  /* v2 with first_contact */
        uint8_t n_gids;          /* v2 first-contact CONFIRM only: 0..2 */
        uint8_t gids[SMC_CLC_MAX_CONFIRM_GIDS][16];
};

/* Encode: v1 is exactly 68 bytes; v2 108 + FCE (52 bytes for SMC-R, 2.6) if
 * first_contact, + the GID list (4 + 16 n) for a first-contact CONFIRM. Returns the
 * length, -EINVAL, -ENOBUFS. */
ssize_t smc_clc_accept_r_encode(const struct smc_clc_accept_r *a, uint8_t *buf, size_t buflen);
/* Decode an SMC-R ACCEPT or CONFIRM of @len bytes: type 2/3 with typev1 bits = 0
 * (SMC-R; an SMC-D one is -EPROTO), v1 exactly 68, v2 at least 108 and consistent
 * with the FCE / GID list. Returns 0, -EBADMSG, -EPROTO. */
int smc_clc_accept_r_decode(const uint8_t *buf, size_t len, struct smc_clc_accept_r *a);

/* ACCEPT (server -> client) / CONFIRM (client -> server), SMC-D version 1 (2.5).
 * Version 2 (78+ bytes: CHID, EID, GID extension, FCE) is not handled here. The
 * eyecatcher is not kept: the encoder writes D in header and trailer (as Linux does),
 * the decoder accepts R or D in either (2.1, Linux). */
struct smc_clc_accept_d {
        uint8_t type;            /* SMC_CLC_ACCEPT or SMC_CLC_CONFIRM */
        bool first_contact;      /* header bit 3 */
        uint64_t gid;            /* sender's ISM GID */
        uint64_t token;          /* sender's DMB token: the peer writes into this DMB */
        uint8_t dmbe_idx;        /* DMBE index (Linux 0) */
        uint8_t dmbe_size;       /* compressed size c (6.1), 0..15 */
        uint32_t lgr_id;         /* sender's link-group id (opaque 4 bytes, read BE) */
};

/* Encode: exactly SMC_CLC_ACCEPT_D_V1_LEN (48) bytes, header byte 7 = 0x11 or, with
 * first_contact, 0x19; reserved bytes zero. Returns 48 (bytes), -EINVAL (NULL, type not
 * Accept/Confirm, dmbe_size > 15) or -ENOBUFS (@buflen < 48; nothing written). */
ssize_t smc_clc_accept_d_encode(const struct smc_clc_accept_d *a, uint8_t *buf, size_t buflen);
/* Decode an SMC-D v1 ACCEPT or CONFIRM of @len bytes (= the header's length, which
 * must be 48). -EBADMSG: malformed (a header smc_clc_decode_hdr() refuses, type not
 * 2/3, @len != header length, trailer not an eyecatcher). -EPROTO: a well-formed
 * Accept/Confirm this codec does not handle here: SMC-R (typev1 bits = 0; use
 * smc_clc_accept_r_decode()) or SMC-D version 2. Reserved bits and bytes (header bit
 * 2, byte 25 bits 3-0, 26-27, 32-43) are ignored, as Linux does. Returns 0,
 * -EBADMSG, -EPROTO; -EINVAL for NULL pointers. */
int smc_clc_accept_d_decode(const uint8_t *buf, size_t len, struct smc_clc_accept_d *a);

/* DECLINE (2.7) */
struct smc_clc_decline {
        uint8_t version;         /* 1 (28 bytes) or 2 (44 bytes) */
        uint32_t eyecatcher;     /* decode: what the header had; encode: 0 = R */
        bool out_of_sync;        /* header bit 3 */
        uint8_t peer_id[8];      /* [6.12 bytes] Linux fills it (its system id) */
        uint32_t diag;           /* SMC_CLC_DECL_*. [6.12 bytes] Linux reports the
                                  * last check that failed: with no common UEID and
                                  * SMC-R v1 offered too, DIFFPREFIX, not NOUEID */
        uint8_t os_type;         /* v2: 2 = Linux */
};

ssize_t smc_clc_decline_encode(const struct smc_clc_decline *d, uint8_t *buf, size_t buflen);
/* Exact length 28 (v1) or 44 (v2); the trailer is not checked (2.1, Linux). */
int smc_clc_decline_decode(const uint8_t *buf, size_t len, struct smc_clc_decline *d);

/* ---- CDC, SMC-R (4.1) ---- */

#define SMC_CDC_LEN 44
#define SMC_CDC_TYPE 0xFE
/* producer flags (byte 24) */
#define SMC_CDC_PROD_WRITE_BLOCKED 0x80
#define SMC_CDC_PROD_URG_PENDING   0x40
#define SMC_CDC_PROD_URG_PRESENT   0x20
#define SMC_CDC_PROD_CONS_UPD_REQ  0x10
#define SMC_CDC_PROD_FAILOVER_VAL  0x08
/* connection-state flags (byte 25) */
#define SMC_CDC_CONN_DONE_WRITING  0x80
#define SMC_CDC_CONN_CLOSED        0x40
#define SMC_CDC_CONN_ABORT         0x20

struct smc_cdc_msg {
        uint16_t seqno;
        uint32_t token;      /* alert token of the receiving connection */
        uint16_t prod_wrap;
        uint32_t prod_count;
        uint16_t cons_wrap;
        uint32_t cons_count;
        uint8_t prod_flags;  /* SMC_CDC_PROD_* */
        uint8_t conn_flags;  /* SMC_CDC_CONN_* */
};

/* Write the 44-byte CDC message (reserved bytes zero). */
void smc_cdc_encode(const struct smc_cdc_msg *c, uint8_t out[SMC_CDC_LEN]);
/* Byte 0 must be 0xFE, byte 1 = 44, @len >= 44. Returns 0 or -EBADMSG. */
int smc_cdc_decode(const uint8_t *buf, size_t len, struct smc_cdc_msg *c);

/* ---- LLC (section 5) ---- */

#define SMC_LLC_LEN 44
#define SMC_LLC_V2_MAX_LEN 8192
#define SMC_LLC_CONFIRM_LINK       0x01
#define SMC_LLC_ADD_LINK           0x02
#define SMC_LLC_ADD_LINK_CONT      0x03
#define SMC_LLC_DELETE_LINK        0x04
#define SMC_LLC_REQ_ADD_LINK       0x05 /* v2 only */
#define SMC_LLC_CONFIRM_RKEY       0x06
#define SMC_LLC_TEST_LINK          0x07
#define SMC_LLC_CONFIRM_RKEY_CONT  0x08
#define SMC_LLC_DELETE_RKEY        0x09

#define SMC_LLC_FLAG_RESP          0x80
/* CONFIRM LINK (5.2): "RMBEs carry no eyecatcher", Linux always sets and requires it */
#define SMC_LLC_FLAG_NO_RMBE_EYEC  0x03
#define SMC_LLC_FLAG_ADD_LNK_REJ   0x40 /* ADD LINK response: rejected */
#define SMC_LLC_FLAG_DEL_LINK_ALL  0x40 /* DELETE LINK: all links (terminate group) */
#define SMC_LLC_FLAG_DEL_LINK_ORDERLY 0x20
#define SMC_LLC_FLAG_RKEY_NEG      0x20 /* CONFIRM/DELETE RKEY response: negative */
#define SMC_LLC_FLAG_RKEY_RETRY    0x10

/* DELETE LINK reasons (5.5) */
#define SMC_LLC_DEL_LOST_PATH      0x00010000u
#define SMC_LLC_DEL_OP_INIT_TERM   0x00020000u /* [6.12 bytes] `rmmod smc`: ALL without
                                                * ORDERLY, link number 0 */
#define SMC_LLC_DEL_PROG_INIT_TERM 0x00030000u
#define SMC_LLC_DEL_PROT_VIOL      0x00040000u
#define SMC_LLC_DEL_NO_ASYM_NEEDED 0x00050000u

#define SMC_LLC_MAX_ADD_LINK_RKEYS 255 /* v2 ADD LINK extension entries we decode */
#define SMC_LLC_MAX_DELETE_RKEYS_V1 8

struct smc_llc_rkey_entry {      /* ADD LINK v2 / ADD LINK CONT entry */
        uint32_t rkey_old;       /* rkey on the existing link */
        uint32_t rkey_new;       /* rkey on the new link */
        uint64_t addr_new;       /* RMB address on the new link */
};

struct smc_llc_msg {
        uint8_t type;    /* SMC_LLC_* base type 1..9 (decode: 0x2N mapped to N, v2 set) */
        bool v2;         /* v2 link-group encoding: type 0x20 | N, 16-bit length */
        uint16_t length; /* decode: from the message; encode: 0 = the type's natural length */
        uint8_t flags;
        uint8_t add_link_reject_reason; /* v1 ADD LINK: byte 2 bits 3-0 */
        union {
                struct { /* 5.2 */
                        uint8_t mac[6];
                        uint8_t gid[16];
                        uint32_t qpn;
                        uint8_t link_num;
                        uint32_t link_uid; /* the sender's own: a response does
                                            * not echo the request's ([6.12 bytes]
                                            * Linux: htonl(lgr id + link number)) */
                        uint8_t max_links;
                        uint8_t max_conns;
                } confirm_link;
                struct { /* 5.3 */
                        uint8_t mac[6];
                        uint8_t gid[16];
                        uint32_t qpn;
                        uint8_t link_num;
                        uint8_t qp_mtu;
                        uint32_t psn;
                        /* v2 extension (v2 == true) */
                        bool v2_direct;
                        uint8_t target_gid[16];
                        uint16_t n_rkeys; /* [Linux] host order on the wire: parsed
                                           * defensively, bounded by the length */
                        bool n_rkeys_le;  /* encode: write n_rkeys little-endian, as an
                                           * x86 Linux peer needs (it reads a big-endian
                                           * count as 0, see the .c); decode: it was LE */
                        struct smc_llc_rkey_entry *rkeys; /* decode: caller-provided array
                                                           * of SMC_LLC_MAX_ADD_LINK_RKEYS
                                                           * or NULL (entries skipped).
                                                           * It shares the union: set it
                                                           * (or NULL) before EVERY
                                                           * smc_llc_decode(), a decode
                                                           * of another type overwrites
                                                           * it. encode: n_rkeys entries */
                } add_link;
                struct { /* 5.4 */
                        uint8_t link_num;
                        uint8_t num_rkeys;
                        struct smc_llc_rkey_entry rt[2];
                } add_link_cont;
                struct { /* 5.5 */
                        uint8_t link_num;
                        uint32_t reason;
                } delete_link;
                struct { /* 5.6 */
                        uint8_t num_rkeys; /* additional entries 0..2 */
                        uint32_t rkey;
                        uint64_t addr;
                        struct {
                                uint8_t link_num;
                                uint32_t rkey;
                                uint64_t addr;
                        } rt[2];
                } confirm_rkey;
                struct { /* 5.8 */
                        uint8_t user_data[16];
                } test_link;
                struct { /* 5.7 (v1: n <= 8). [6.12 bytes] Linux's v2
                          * request: 44 bytes, n = 1; its response keeps
                          * num_rkeys, zeroes the rkeys, err_mask = 0 */
                        uint8_t num_rkeys;
                        uint8_t err_mask;
                        uint32_t rkeys[SMC_LLC_MAX_DELETE_RKEYS_V1];
                } delete_rkey;
                struct { /* 5.9 */
                        uint8_t n_gids;
                        uint8_t gids[8][16];
                } req_add_link;
        };
};

/* Encode @m (v1: exactly 44 bytes; v2: 44, or the ADD LINK (72 + 16 n_rkeys; 44 if
 * m->length = 44: no extension) / REQ ADD LINK (max(44, 28 + 16 n_gids)) length;
 * DELETE RKEY v2 is 44 as it carries <= 8 rkeys here). Returns the length, -EINVAL,
 * -ENOBUFS. CONFIRM RKEY CONT cannot be encoded (-EINVAL). */
ssize_t smc_llc_encode(const struct smc_llc_msg *m, uint8_t *buf, size_t buflen);
/* Decode one LLC message of @len bytes (>= 44). v1: byte 1 must be 44. v2: length
 * 44..8192 and <= @len (stored in host order by Linux: both byte orders accepted when
 * unambiguous, see the .c). An unknown type is -EPROTO (the caller then terminates
 * the link group, 5.1); so is a v2 DELETE RKEY with more than 8 rkeys (Linux sends
 * 1). CONFIRM RKEY CONT decodes as its header only (type, v2, length, flags).
 * On error *m and the rkey array are unchanged. Returns 0, -EBADMSG, -EPROTO. */
int smc_llc_decode(const uint8_t *buf, size_t len, struct smc_llc_msg *m);

/* Peek: is this 44+-byte receive a CDC (true) or an LLC message (false)? (5.1) */
static inline bool smc_wr_is_cdc(const uint8_t *buf, size_t len) {
        return len >= 1 && buf[0] == SMC_CDC_TYPE;
}

/* Compressed size (6.1): c for a wanted RMB size, rounding up, at most @max_c. */
uint8_t smc_size_compress(uint64_t size, uint8_t max_c);
/* 16 KiB << c */
static inline uint64_t smc_size_uncompress(uint8_t c) {
        return (uint64_t) 16384 << c;
}
