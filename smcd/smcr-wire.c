/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * SMC wire formats: encoders and strict decoders (see smcr-wire.h for the API and
 * ../shared/smc-wire-spec.md, sections 2, 4.1, 5 and 6.1, for the layouts).
 *
 * Conventions of this file
 *  - Every decoder parses into a zeroed local copy and copies it out only on success:
 *    on any error the caller's struct (and, for ADD LINK v2, the caller's rkey array)
 *    is left untouched. Every read is bounds-checked against the length first.
 *  - Every encoder validates all fields and the buffer size before it writes a single
 *    byte, then zeroes the whole message, so reserved bytes are always zero.
 *  - NULL message or struct pointers are -EINVAL (a caller bug, not bad input).
 *
 * Rules where the spec sheet leaves a choice, and why (Linux = net/smc, 2025):
 *
 * CLC header (smc_clc_decode_hdr): besides the spec's minimum lengths it already
 *  applies the exact lengths (v1 SMC-R Accept/Confirm 68, v1 SMC-D 48, Decline 28 /
 *  44) and Linux's rule that Accept/Confirm/Decline carry typev1 R or D
 *  (smc_clc.c smc_clc_msg_acc_conf_valid / smc_clc_msg_decl_valid), so a caller
 *  learns before reading the body that it must not. Minimum Proposal lengths:
 *  v1 52 (40 + 8 + 4: empty IP prefix area), v2 84 (40 + 40 + 4).
 *
 * CLC lengths: decoders require @len == the header's length (2.1: the receiver reads
 *  exactly that many bytes). The trailer eyecatcher (R or D) is checked for Proposal
 *  and Accept/Confirm, not for Decline (Linux).
 *
 * PROPOSAL: Linux checks only the total length against its formula and caps the
 *  offsets (smc_clc.h smc_get_clc_v2_ext, smc_get_clc_smcd_v2_ext); it never checks
 *  that the offsets point where its builder puts the areas. Here the areas must be
 *  exactly where a contiguous layout puts them (IP area at 40 + IP-area offset, v2
 *  extension at 52 + 28 [+ 8 + 17n], SMC-Dv2 extension at v2ext + 8 + 32 + 32e).
 *  Together with the exact total length that is the only layout in which no two
 *  areas overlap and no byte is unaccounted for, so nothing legitimate is refused.
 *  The IP-area offset must be 0 or 40 in v1 (RFC 7609 peers: 0; SMC-D area: 40);
 *  in v2 it must be 40 when SMC is offered for v1 and 0 otherwise (Linux's builder;
 *  with any other value Linux itself reads its prefix area from the wrong bytes).
 *  Offsets of areas that are absent (v2-extension offset when typev2 = N, SMC-Dv2
 *  offset when typev2 has no D) and the ISM entry count without SMC-Dv2 are ignored,
 *  as Linux ignores them. A v1 proposal's typev2 bits are not looked at (RFC 7609
 *  peers send 0 there) and decode as N. A v2 proposal with typev1 = typev2 = N is
 *  well-formed (Linux accepts it and then declines): it decodes, the caller declines.
 *
 * PROPOSAL encoder: [Linux] with typev1 = N the IP-area offset is 0 and Linux reads
 *  its (absent) prefix area at offset 40, i.e. takes byte 47 (the low byte of the
 *  SMC-D v1 ISM GID) as an IPv6 prefix count and refuses the proposal if it is > 8.
 *  Linux's builder writes that GID only when SMC-D is offered for v1, so it is 0.
 *  The encoder therefore refuses typev1 = N with a non-zero ism_gid (-EINVAL), and
 *  refuses SMC-D offered for v1 without the SMC-D area (Linux would ignore it).
 *
 * ACCEPT/CONFIRM v2 (SMC-R): Linux checks only length >= 108. Here: >= 108; with
 *  first contact the 52-byte first-contact extension must fit (>= 160); a first-
 *  contact CONFIRM must also hold the GID list {count <= 2, 3 reserved, 16 * count}
 *  (>= 164 + 16 count). Bytes after these (before the trailer) are ignored, as the
 *  spec states minimum lengths only. The FCE is 52 bytes for SMC-R at every release
 *  (Linux before v2.1 sent a 36-byte FCE followed by 16 reserved bytes: the same
 *  bytes on the wire).
 *
 * ACCEPT/CONFIRM v1 (SMC-D, 2.5): exactly 48 bytes (the header check). Linux checks
 *  only the length (and typev1 R or D) and reads no reserved field, so reserved bits
 *  and bytes (header bit 2, byte 25 bits 3-0, 26-27, 32-43) are ignored here too;
 *  DMBE index and link-group id are taken as they are. Either eyecatcher is accepted
 *  in header and trailer (2.1); the encoder writes D in both, as Linux does. The
 *  header check runs first, with the exact length of the type the header names, so
 *  -EPROTO (not SMC-D v1) is only for messages that are otherwise well-formed: an
 *  SMC-R one of 68 / 108+ bytes, an SMC-D v2 one of 78+ bytes. A 48-byte message
 *  with SMC-R type bits or version 2 has the wrong length for what it claims to be:
 *  -EBADMSG.
 *
 * LLC header: byte 0 = type (v1) or 0x20 | type (v2); any other high nibble, or a
 *  type not defined for that version (v1 0x05; v2 0x23 ADD LINK CONT), is -EPROTO.
 *  CONFIRM RKEY CONTINUATION (0x08 / 0x28) decodes as its header only (type, flags):
 *  Linux never sends it and ignores it (spec 5.1); it cannot be encoded.
 *  [Linux] registers no receive handler for types it does not know (smc_llc.c,
 *  smc_llc_rx_handlers[]), so it drops them silently instead of terminating.
 *
 * LLC v2 length (bytes 1-2): [Linux] writes it in host byte order (little-endian on
 *  x86, big-endian on s390x). We emit big-endian. On receive both readings are
 *  candidates; a candidate is valid if 44 <= value <= min(@len, 8192). One valid
 *  candidate: taken. Two different valid candidates: the one equal to @len is taken
 *  (the completion length of the SEND is the message length), otherwise -EBADMSG
 *  (ambiguous). None: -EBADMSG. Note: an x86 Linux reads our big-endian value
 *  byte-swapped and only checks that it is >= 44; that fails only for multiples of
 *  256, which no length we emit is (44, 72 + 16r, 28 + 16c are never 0 mod 256).
 *  Messages of a fixed 44-byte format may carry a larger v2 length: the extra bytes
 *  are ignored (Linux only checks >= 44).
 *
 * ADD LINK v2 rkey count (bytes 70-71): [Linux] host order u16, and the receiver
 *  truncates it to u8 (smc_llc.c smc_llc_save_add_link_rkeys: min_t(u8, ...)). As
 *  valid counts are <= 255, one of the two bytes is always 0 and the other is the
 *  count: byte 70 set = little-endian, byte 71 set = big-endian; both set =
 *  -EBADMSG. Consequence for sending: an x86 Linux reads a big-endian count n as
 *  n << 8 and truncates that to 0, i.e. it takes NO rkeys from our ADD LINK; an
 *  s390x Linux reads a little-endian one as 0 the same way. The encoder writes
 *  big-endian unless add_link.n_rkeys_le is set: the caller must pick the peer's
 *  byte order (an x86 Linux peer needs n_rkeys_le). On receive, [Linux] may
 *  announce more entries than it sends (smc_llc_fill_ext_v2 keeps num_rkeys =
 *  conns_num when it finds fewer used RMBs), so the count is clamped to the entries
 *  the length holds; the length must be 44 (no extension: Linux's reject response)
 *  or 72 + 16 * k.
 *
 * LLC counts: CONFIRM RKEY additional entries <= 2 ([Linux] accepts 3 and reads 2);
 *  DELETE RKEY v1 <= 8 (-EBADMSG above); DELETE RKEY v2 with more than 8 rkeys is
 *  -EPROTO (this codec's struct holds 8; Linux always sends 1); REQUEST ADD LINK <= 8
 *  GIDs; ADD LINK CONT: num_rkeys counts what is still to come and may exceed 2,
 *  min(num_rkeys, 2) entries are carried.
 *
 * LLC encoder: v1 is always 44 bytes; v2 44 except ADD LINK (72 + 16 n_rkeys, or 44
 *  when m->length = 44: no extension, e.g. a reject response) and REQUEST ADD LINK
 *  (max(44, 28 + 16 n_gids)). A non-zero m->length must be that length. An ADD LINK
 *  request whose bytes 4-43 would all be zero is refused (-EINVAL): Linux takes it
 *  for its internal "start an add-link flow" trigger (smc_llc_is_local_add_link).
 *  The ADD LINK reject reason nibble exists only in v1; in v2 it is ignored.
 */

#include <errno.h>
#include <string.h>

#include "smcr-wire.h"

/* ---- byte helpers ---- */

static inline uint16_t get_be16(const uint8_t *p) {
        return (uint16_t) (p[0] << 8 | p[1]);
}
static inline uint32_t get_be24(const uint8_t *p) {
        return (uint32_t) p[0] << 16 | (uint32_t) p[1] << 8 | p[2];
}
static inline uint32_t get_be32(const uint8_t *p) {
        return (uint32_t) p[0] << 24 | (uint32_t) p[1] << 16 | (uint32_t) p[2] << 8 | p[3];
}
static inline uint64_t get_be64(const uint8_t *p) {
        return (uint64_t) get_be32(p) << 32 | get_be32(p + 4);
}
static inline void put_be16(uint8_t *p, uint16_t v) {
        p[0] = (uint8_t) (v >> 8);
        p[1] = (uint8_t) v;
}
static inline void put_be24(uint8_t *p, uint32_t v) {
        p[0] = (uint8_t) (v >> 16);
        p[1] = (uint8_t) (v >> 8);
        p[2] = (uint8_t) v;
}
static inline void put_be32(uint8_t *p, uint32_t v) {
        p[0] = (uint8_t) (v >> 24);
        p[1] = (uint8_t) (v >> 16);
        p[2] = (uint8_t) (v >> 8);
        p[3] = (uint8_t) v;
}
static inline void put_be64(uint8_t *p, uint64_t v) {
        put_be32(p, (uint32_t) (v >> 32));
        put_be32(p + 4, (uint32_t) v);
}

static inline bool is_eyecatcher(uint32_t e) {
        return e == SMC_EYECATCHER_R || e == SMC_EYECATCHER_D;
}
static inline bool smcd_indicated(uint8_t t) {
        return t == SMC_TYPE_D || t == SMC_TYPE_B;
}

/* encoders: 0 means R; anything else must be one of the two eyecatchers */
static int eyecatcher_for_encode(uint32_t e, uint32_t *ret) {
        if (e == 0)
                e = SMC_EYECATCHER_R;
        if (!is_eyecatcher(e))
                return -EINVAL;
        *ret = e;
        return 0;
}

static void put_clc_hdr(uint8_t *b, uint32_t eyec, uint8_t type, uint16_t length, uint8_t byte7) {
        put_be32(b, eyec);
        b[4] = type;
        put_be16(b + 5, length);
        b[7] = byte7;
}

/* ---- CLC header (2.2) ---- */

#define PROPOSAL_V1_MIN_LEN 52 /* 40 + empty IP prefix area (8) + trailer */
#define PROPOSAL_V2_MIN_LEN 84 /* 40 + SMC-D/v2 area (40) + trailer */
#define SMCD_ACCEPT_V2_MIN  78
#define FCE_R_LEN           52 /* first-contact extension, SMC-R (2.6) */
#define FCE_OFF_R           104

int smc_clc_decode_hdr(const uint8_t *buf, size_t len, struct smc_clc_hdr *h) {
        struct smc_clc_hdr t;

        if (!buf || !h)
                return -EINVAL;
        memset(&t, 0, sizeof(t));
        if (len < SMC_CLC_HDR_LEN)
                return -EBADMSG;

        t.eyecatcher = get_be32(buf);
        t.type = buf[4];
        t.length = get_be16(buf + 5);
        t.version = buf[7] >> 4;
        t.typev2 = (buf[7] >> 2) & 3;
        t.typev1 = buf[7] & 3;

        if (!is_eyecatcher(t.eyecatcher))
                return -EBADMSG;
        if (t.type < SMC_CLC_PROPOSAL || t.type > SMC_CLC_DECLINE)
                return -EBADMSG;
        if (t.version == 0)
                return -EBADMSG;
        if (t.version > 2)
                return -EPROTO;
        if (t.length > SMC_CLC_MAX_LEN)
                return -EBADMSG;

        switch (t.type) {
        case SMC_CLC_PROPOSAL:
                if (t.length < (t.version == 1 ? PROPOSAL_V1_MIN_LEN : PROPOSAL_V2_MIN_LEN))
                        return -EBADMSG;
                break;
        case SMC_CLC_ACCEPT:
        case SMC_CLC_CONFIRM:
                if (t.typev1 != SMC_TYPE_R && t.typev1 != SMC_TYPE_D)
                        return -EBADMSG;
                if (t.version == 1) {
                        if (t.length != (t.typev1 == SMC_TYPE_R ? SMC_CLC_ACCEPT_R_V1_LEN : SMC_CLC_ACCEPT_D_V1_LEN))
                                return -EBADMSG;
                } else if (t.length < (t.typev1 == SMC_TYPE_R ? SMC_CLC_ACCEPT_R_V2_MIN : SMCD_ACCEPT_V2_MIN))
                        return -EBADMSG;
                break;
        case SMC_CLC_DECLINE:
                if (t.typev1 != SMC_TYPE_R && t.typev1 != SMC_TYPE_D)
                        return -EBADMSG;
                if (t.length != (t.version == 1 ? SMC_CLC_DECLINE_V1_LEN : SMC_CLC_DECLINE_V2_LEN))
                        return -EBADMSG;
                break;
        }

        memcpy(h, &t, sizeof(t));
        return 0;
}

/* Header of a whole message of @len bytes, of @type, trailer checked if @trailer. */
static int clc_decode_whole(const uint8_t *buf, size_t len, uint8_t type, bool trailer,
                            struct smc_clc_hdr *h) {
        int r;

        r = smc_clc_decode_hdr(buf, len, h);
        if (r < 0)
                return r;
        if (type == SMC_CLC_ACCEPT ? (h->type != SMC_CLC_ACCEPT && h->type != SMC_CLC_CONFIRM)
                                   : h->type != type)
                return -EBADMSG;
        if (len != h->length)
                return -EBADMSG;
        if (trailer && !is_eyecatcher(get_be32(buf + len - SMC_CLC_TRAILER_LEN)))
                return -EBADMSG;
        return 0;
}

/* ---- PROPOSAL (2.3) ---- */

ssize_t smc_clc_proposal_encode(const struct smc_clc_proposal *p, uint8_t *buf, size_t buflen) {
        bool smcd_area, have_ip, have_v2, have_dv2;
        uint32_t eyec;
        uint8_t version;
        size_t l, off;

        if (!p || (!buf && buflen > 0))
                return -EINVAL;
        if (eyecatcher_for_encode(p->eyecatcher, &eyec) < 0)
                return -EINVAL;
        if (p->typev1 > SMC_TYPE_B || p->typev2 > SMC_TYPE_B)
                return -EINVAL;
        if (p->typev1 == SMC_TYPE_N && p->typev2 == SMC_TYPE_N)
                return -EINVAL;

        have_ip = p->typev1 != SMC_TYPE_N;
        have_v2 = p->typev2 != SMC_TYPE_N;
        have_dv2 = smcd_indicated(p->typev2);
        version = have_v2 ? 2 : 1;
        smcd_area = version == 2 || p->has_smcd_area;

        if (have_ip && p->n_ipv6 > SMC_CLC_MAX_V6_PREFIXES)
                return -EINVAL;
        if (have_v2 && (p->n_ueids > SMC_CLC_MAX_UEIDS || p->release > 15))
                return -EINVAL;
        if (have_dv2 && p->n_ism > SMC_CLC_MAX_ISM_ENTRIES)
                return -EINVAL;
        /* see the top of the file: Linux reads byte 47 as a prefix count then */
        if (!have_ip && p->ism_gid != 0)
                return -EINVAL;
        if (smcd_indicated(p->typev1) && !smcd_area)
                return -EINVAL;

        l = 40;
        if (smcd_area)
                l += 40;
        if (have_ip)
                l += 8 + 17 * (size_t) p->n_ipv6;
        if (have_v2)
                l += 40 + (size_t) SMC_EID_LEN * p->n_ueids;
        if (have_dv2)
                l += 48 + 10 * (size_t) p->n_ism;
        l += SMC_CLC_TRAILER_LEN;
        if (buflen < l)
                return -ENOBUFS;

        memset(buf, 0, l);
        put_clc_hdr(buf, eyec, SMC_CLC_PROPOSAL, (uint16_t) l,
                    (uint8_t) (version << 4 | (have_v2 ? p->typev2 << 2 : 0) | p->typev1));
        memcpy(buf + 8, p->peer_id, 8);
        memcpy(buf + 16, p->gid, 16);
        memcpy(buf + 32, p->mac, 6);
        put_be16(buf + 38, smcd_area && have_ip ? 40 : 0);
        off = 40;
        if (smcd_area) {
                put_be64(buf + 40, p->ism_gid);
                put_be16(buf + 48, p->ism_chid);
                if (have_v2)
                        put_be16(buf + 50, (uint16_t) (28 + (have_ip ? 8 + 17 * p->n_ipv6 : 0)));
                /* 52..79: vendor OUI, vendor options, reserved: zero */
                off = 80;
        }
        if (have_ip) {
                memcpy(buf + off, p->ipv4_prefix, 4);
                buf[off + 4] = p->ipv4_prefix_len;
                buf[off + 7] = p->n_ipv6;
                off += 8;
                for (unsigned i = 0; i < p->n_ipv6; i++, off += 17) {
                        memcpy(buf + off, p->ipv6[i].prefix, 16);
                        buf[off + 16] = p->ipv6[i].len;
                }
        }
        if (have_v2) {
                buf[off] = p->n_ueids;
                buf[off + 1] = have_dv2 ? p->n_ism : 0;
                buf[off + 3] = (uint8_t) (p->release << 4 | (p->seid_enabled ? 1 : 0));
                if (have_dv2)
                        put_be16(buf + off + 6, (uint16_t) (32 + SMC_EID_LEN * p->n_ueids));
                memcpy(buf + off + 8, p->roce_v2_gid, 16);
                buf[off + 24] = p->max_conns;
                buf[off + 25] = p->max_links;
                put_be16(buf + off + 26, p->feature_mask);
                off += 40;
                for (unsigned i = 0; i < p->n_ueids; i++, off += SMC_EID_LEN)
                        memcpy(buf + off, p->ueids[i], SMC_EID_LEN);
        }
        if (have_dv2) {
                memcpy(buf + off, p->seid, SMC_EID_LEN);
                off += 48;
                for (unsigned i = 0; i < p->n_ism; i++, off += 10) {
                        put_be64(buf + off, p->ism[i].gid);
                        put_be16(buf + off + 8, p->ism[i].chid);
                }
        }
        put_be32(buf + off, eyec);
        return (ssize_t) l;
}

/* The IP prefix area at @off; *end is the trailer offset. Advances *off. */
static int proposal_decode_ip(const uint8_t *b, size_t end, size_t *off, struct smc_clc_proposal *t) {
        size_t o = *off;

        if (o + 8 > end)
                return -EBADMSG;
        memcpy(t->ipv4_prefix, b + o, 4);
        t->ipv4_prefix_len = b[o + 4];
        t->n_ipv6 = b[o + 7];
        if (t->n_ipv6 > SMC_CLC_MAX_V6_PREFIXES)
                return -EBADMSG;
        o += 8;
        if (o + 17 * (size_t) t->n_ipv6 > end)
                return -EBADMSG;
        for (unsigned i = 0; i < t->n_ipv6; i++, o += 17) {
                memcpy(t->ipv6[i].prefix, b + o, 16);
                t->ipv6[i].len = b[o + 16];
        }
        *off = o;
        return 0;
}

int smc_clc_proposal_decode(const uint8_t *buf, size_t len, struct smc_clc_proposal *p) {
        struct smc_clc_proposal t;
        struct smc_clc_hdr h;
        size_t end, off;
        uint16_t ip_off;
        int r;

        if (!buf || !p)
                return -EINVAL;
        r = clc_decode_whole(buf, len, SMC_CLC_PROPOSAL, true, &h);
        if (r < 0)
                return r;

        memset(&t, 0, sizeof(t));
        t.eyecatcher = h.eyecatcher;
        t.version = h.version;
        t.typev1 = h.typev1;
        memcpy(t.peer_id, buf + 8, 8);
        memcpy(t.gid, buf + 16, 16);
        memcpy(t.mac, buf + 32, 6);
        ip_off = get_be16(buf + 38);
        end = len - SMC_CLC_TRAILER_LEN;

        if (h.version == 1) {
                /* RFC 7609 / Linux v1 check: 40 + offset + 8 + 17n + 4 */
                t.typev2 = SMC_TYPE_N;
                if (t.typev1 == SMC_TYPE_N)
                        return -EBADMSG;
                if (ip_off != 0 && ip_off != 40)
                        return -EBADMSG;
                if (ip_off == 40) {
                        t.has_smcd_area = true;
                        t.ism_gid = get_be64(buf + 40);
                        t.ism_chid = get_be16(buf + 48);
                }
                off = 40 + (size_t) ip_off;
                r = proposal_decode_ip(buf, end, &off, &t);
                if (r < 0)
                        return r;
                if (off != end)
                        return -EBADMSG;
                memcpy(p, &t, sizeof(t));
                return 0;
        }

        /* v2: 40 + 40 + [8 + 17n] + [40 + 32e] + [48 + 10g] + 4, areas contiguous */
        t.typev2 = h.typev2;
        t.has_smcd_area = true;
        t.ism_gid = get_be64(buf + 40);
        t.ism_chid = get_be16(buf + 48);
        if (ip_off != (t.typev1 != SMC_TYPE_N ? 40 : 0))
                return -EBADMSG;
        off = 80;
        if (t.typev1 != SMC_TYPE_N) {
                r = proposal_decode_ip(buf, end, &off, &t);
                if (r < 0)
                        return r;
        }
        if (t.typev2 != SMC_TYPE_N) {
                bool dv2 = smcd_indicated(t.typev2);
                const uint8_t *x = buf + off;

                if (get_be16(buf + 50) != off - 52)
                        return -EBADMSG;
                if (off + 40 > end)
                        return -EBADMSG;
                t.n_ueids = x[0];
                if (t.n_ueids > SMC_CLC_MAX_UEIDS)
                        return -EBADMSG;
                if (dv2) {
                        t.n_ism = x[1];
                        if (t.n_ism > SMC_CLC_MAX_ISM_ENTRIES)
                                return -EBADMSG;
                        if (get_be16(x + 6) != 32 + SMC_EID_LEN * t.n_ueids)
                                return -EBADMSG;
                }
                t.release = x[3] >> 4;
                t.seid_enabled = x[3] & 1;
                memcpy(t.roce_v2_gid, x + 8, 16);
                t.max_conns = x[24];
                t.max_links = x[25];
                t.feature_mask = get_be16(x + 26);
                off += 40;
                if (off + (size_t) SMC_EID_LEN * t.n_ueids > end)
                        return -EBADMSG;
                for (unsigned i = 0; i < t.n_ueids; i++, off += SMC_EID_LEN)
                        memcpy(t.ueids[i], buf + off, SMC_EID_LEN);
                if (dv2) {
                        if (off + 48 + 10 * (size_t) t.n_ism > end)
                                return -EBADMSG;
                        memcpy(t.seid, buf + off, SMC_EID_LEN);
                        off += 48;
                        for (unsigned i = 0; i < t.n_ism; i++, off += 10) {
                                t.ism[i].gid = get_be64(buf + off);
                                t.ism[i].chid = get_be16(buf + off + 8);
                        }
                }
        }
        if (off != end)
                return -EBADMSG;
        memcpy(p, &t, sizeof(t));
        return 0;
}

/* ---- ACCEPT / CONFIRM, SMC-R (2.4, 2.6) ---- */

ssize_t smc_clc_accept_r_encode(const struct smc_clc_accept_r *a, uint8_t *buf, size_t buflen) {
        bool fce, gidlist;
        uint32_t eyec;
        size_t l;

        if (!a || (!buf && buflen > 0))
                return -EINVAL;
        if (eyecatcher_for_encode(a->eyecatcher, &eyec) < 0)
                return -EINVAL;
        if (a->type != SMC_CLC_ACCEPT && a->type != SMC_CLC_CONFIRM)
                return -EINVAL;
        if (a->version != 1 && a->version != 2)
                return -EINVAL;
        if (a->qpn > 0xFFFFFF || a->psn > 0xFFFFFF || a->rmbe_size > 15 || a->qp_mtu > 15)
                return -EINVAL;
        fce = a->version == 2 && a->first_contact;
        gidlist = fce && a->type == SMC_CLC_CONFIRM;
        if (fce && (a->fce.os_type > 15 || a->fce.release > 15))
                return -EINVAL;
        if (a->n_gids > (gidlist ? SMC_CLC_MAX_CONFIRM_GIDS : 0))
                return -EINVAL;

        if (a->version == 1)
                l = SMC_CLC_ACCEPT_R_V1_LEN;
        else
                l = SMC_CLC_ACCEPT_R_V2_MIN + (fce ? FCE_R_LEN : 0) + (gidlist ? 4 + 16 * (size_t) a->n_gids : 0);
        if (buflen < l)
                return -ENOBUFS;

        memset(buf, 0, l);
        put_clc_hdr(buf, eyec, a->type, (uint16_t) l,
                    (uint8_t) (a->version << 4 | (a->first_contact ? 0x08 : 0) | SMC_TYPE_R));
        memcpy(buf + 8, a->peer_id, 8);
        memcpy(buf + 16, a->gid, 16);
        memcpy(buf + 32, a->mac, 6);
        put_be24(buf + 38, a->qpn);
        put_be32(buf + 41, a->rkey);
        buf[45] = a->rmbe_idx;
        put_be32(buf + 46, a->rmbe_alert_token);
        buf[50] = (uint8_t) (a->rmbe_size << 4 | a->qp_mtu);
        put_be64(buf + 52, a->rmb_addr);
        put_be24(buf + 61, a->psn);
        if (a->version == 2) {
                memcpy(buf + 64, a->eid, SMC_EID_LEN);
                if (fce) {
                        uint8_t *f = buf + FCE_OFF_R;

                        f[0] = a->fce.v2_direct ? 0x80 : 0;
                        f[1] = (uint8_t) (a->fce.os_type << 4 | a->fce.release);
                        memcpy(f + 4, a->fce.hostname, SMC_HOSTNAME_LEN);
                        f[36] = a->fce.max_conns;
                        f[37] = a->fce.max_links;
                        put_be16(f + 38, a->fce.feature_mask);
                        /* 40..43 vendor options, 44..51 reserved: zero */
                }
                if (gidlist) {
                        uint8_t *g = buf + FCE_OFF_R + FCE_R_LEN;

                        g[0] = a->n_gids;
                        for (unsigned i = 0; i < a->n_gids; i++)
                                memcpy(g + 4 + 16 * i, a->gids[i], 16);
                }
        }
        put_be32(buf + l - SMC_CLC_TRAILER_LEN, eyec);
        return (ssize_t) l;
}

int smc_clc_accept_r_decode(const uint8_t *buf, size_t len, struct smc_clc_accept_r *a) {
        struct smc_clc_accept_r t;
        struct smc_clc_hdr h;
        size_t end;
        int r;

        if (!buf || !a)
                return -EINVAL;
        memset(&t, 0, sizeof(t)); /* padding too: callers may memcmp() results */
        r = clc_decode_whole(buf, len, SMC_CLC_ACCEPT, true, &h);
        if (r < 0)
                return r;
        if (h.typev1 == SMC_TYPE_D)
                return -EPROTO;
        end = len - SMC_CLC_TRAILER_LEN;

        t.type = h.type;
        t.version = h.version;
        t.eyecatcher = h.eyecatcher;
        t.first_contact = h.typev2 & 2;
        memcpy(t.peer_id, buf + 8, 8);
        memcpy(t.gid, buf + 16, 16);
        memcpy(t.mac, buf + 32, 6);
        t.qpn = get_be24(buf + 38);
        t.rkey = get_be32(buf + 41);
        t.rmbe_idx = buf[45];
        t.rmbe_alert_token = get_be32(buf + 46);
        t.rmbe_size = buf[50] >> 4;
        t.qp_mtu = buf[50] & 0x0F;
        t.rmb_addr = get_be64(buf + 52);
        t.psn = get_be24(buf + 61);

        if (h.version == 2) {
                /* header decode guaranteed len >= 108, so 64..103 is there */
                memcpy(t.eid, buf + 64, SMC_EID_LEN);
                if (t.first_contact) {
                        const uint8_t *f = buf + FCE_OFF_R;

                        if (FCE_OFF_R + FCE_R_LEN > end)
                                return -EBADMSG;
                        t.fce.v2_direct = f[0] & 0x80;
                        t.fce.os_type = f[1] >> 4;
                        t.fce.release = f[1] & 0x0F;
                        memcpy(t.fce.hostname, f + 4, SMC_HOSTNAME_LEN);
                        t.fce.max_conns = f[36];
                        t.fce.max_links = f[37];
                        t.fce.feature_mask = get_be16(f + 38);
                        if (t.type == SMC_CLC_CONFIRM) {
                                const uint8_t *g = f + FCE_R_LEN;
                                size_t g_off = FCE_OFF_R + FCE_R_LEN;

                                if (g_off + 4 > end)
                                        return -EBADMSG;
                                t.n_gids = g[0];
                                if (t.n_gids > SMC_CLC_MAX_CONFIRM_GIDS)
                                        return -EBADMSG;
                                if (g_off + 4 + 16 * (size_t) t.n_gids > end)
                                        return -EBADMSG;
                                for (unsigned i = 0; i < t.n_gids; i++)
                                        memcpy(t.gids[i], g + 4 + 16 * i, 16);
                        }
                }
        }
        memcpy(a, &t, sizeof(t));
        return 0;
}

/* ---- ACCEPT / CONFIRM, SMC-D v1 (2.5) ---- */

ssize_t smc_clc_accept_d_encode(const struct smc_clc_accept_d *a, uint8_t *buf, size_t buflen) {
        if (!a || (!buf && buflen > 0))
                return -EINVAL;
        if (a->type != SMC_CLC_ACCEPT && a->type != SMC_CLC_CONFIRM)
                return -EINVAL;
        if (a->dmbe_size > 15)
                return -EINVAL;
        if (buflen < SMC_CLC_ACCEPT_D_V1_LEN)
                return -ENOBUFS;

        memset(buf, 0, SMC_CLC_ACCEPT_D_V1_LEN);
        put_clc_hdr(buf, SMC_EYECATCHER_D, a->type, SMC_CLC_ACCEPT_D_V1_LEN,
                    (uint8_t) (1 << 4 | (a->first_contact ? 0x08 : 0) | SMC_TYPE_D));
        put_be64(buf + 8, a->gid);
        put_be64(buf + 16, a->token);
        buf[24] = a->dmbe_idx;
        buf[25] = (uint8_t) (a->dmbe_size << 4);
        /* 26..27 reserved */
        put_be32(buf + 28, a->lgr_id);
        /* 32..43 reserved (v2: CHID, EID, GID extension) */
        put_be32(buf + SMC_CLC_ACCEPT_D_V1_LEN - SMC_CLC_TRAILER_LEN, SMC_EYECATCHER_D);
        return SMC_CLC_ACCEPT_D_V1_LEN;
}

int smc_clc_accept_d_decode(const uint8_t *buf, size_t len, struct smc_clc_accept_d *a) {
        struct smc_clc_accept_d t;
        struct smc_clc_hdr h;
        int r;

        if (!buf || !a)
                return -EINVAL;
        memset(&t, 0, sizeof(t)); /* padding too: callers may memcmp() results */
        r = clc_decode_whole(buf, len, SMC_CLC_ACCEPT, true, &h);
        if (r < 0)
                return r;
        if (h.typev1 != SMC_TYPE_D || h.version != 1)
                return -EPROTO;
        /* header decode guaranteed len == 48 */

        t.type = h.type;
        t.first_contact = h.typev2 & 2;
        t.gid = get_be64(buf + 8);
        t.token = get_be64(buf + 16);
        t.dmbe_idx = buf[24];
        t.dmbe_size = buf[25] >> 4;
        t.lgr_id = get_be32(buf + 28);
        memcpy(a, &t, sizeof(t));
        return 0;
}

/* ---- DECLINE (2.7) ---- */

ssize_t smc_clc_decline_encode(const struct smc_clc_decline *d, uint8_t *buf, size_t buflen) {
        uint32_t eyec;
        size_t l;

        if (!d || (!buf && buflen > 0))
                return -EINVAL;
        if (eyecatcher_for_encode(d->eyecatcher, &eyec) < 0)
                return -EINVAL;
        if ((d->version != 1 && d->version != 2) || d->os_type > 15)
                return -EINVAL;
        l = d->version == 1 ? SMC_CLC_DECLINE_V1_LEN : SMC_CLC_DECLINE_V2_LEN;
        if (buflen < l)
                return -ENOBUFS;

        memset(buf, 0, l);
        put_clc_hdr(buf, eyec, SMC_CLC_DECLINE, (uint16_t) l,
                    (uint8_t) (d->version << 4 | (d->out_of_sync ? 0x08 : 0)));
        memcpy(buf + 8, d->peer_id, 8);
        put_be32(buf + 16, d->diag);
        buf[20] = (uint8_t) (d->os_type << 4);
        /* v2: 24..39 additional diagnosis codes, zero */
        put_be32(buf + l - SMC_CLC_TRAILER_LEN, eyec);
        return (ssize_t) l;
}

int smc_clc_decline_decode(const uint8_t *buf, size_t len, struct smc_clc_decline *d) {
        struct smc_clc_decline t;
        struct smc_clc_hdr h;
        int r;

        if (!buf || !d)
                return -EINVAL;
        memset(&t, 0, sizeof(t));
        r = clc_decode_whole(buf, len, SMC_CLC_DECLINE, false, &h);
        if (r < 0)
                return r;
        t.version = h.version;
        t.eyecatcher = h.eyecatcher;
        t.out_of_sync = h.typev2 & 2;
        memcpy(t.peer_id, buf + 8, 8);
        t.diag = get_be32(buf + 16);
        t.os_type = buf[20] >> 4;
        memcpy(d, &t, sizeof(t));
        return 0;
}

/* ---- CDC, SMC-R (4.1) ---- */

#define CDC_PROD_FLAGS_MASK 0xF8 /* low 3 bits reserved */
#define CDC_CONN_FLAGS_MASK 0xE0 /* low 5 bits reserved */

void smc_cdc_encode(const struct smc_cdc_msg *c, uint8_t out[SMC_CDC_LEN]) {
        memset(out, 0, SMC_CDC_LEN);
        out[0] = SMC_CDC_TYPE;
        out[1] = SMC_CDC_LEN;
        put_be16(out + 2, c->seqno);
        put_be32(out + 4, c->token);
        put_be16(out + 10, c->prod_wrap);
        put_be32(out + 12, c->prod_count);
        put_be16(out + 18, c->cons_wrap);
        put_be32(out + 20, c->cons_count);
        out[24] = c->prod_flags & CDC_PROD_FLAGS_MASK;
        out[25] = c->conn_flags & CDC_CONN_FLAGS_MASK;
}

int smc_cdc_decode(const uint8_t *buf, size_t len, struct smc_cdc_msg *c) {
        struct smc_cdc_msg t;

        if (!buf || !c)
                return -EINVAL;
        memset(&t, 0, sizeof(t));
        if (len < SMC_CDC_LEN || buf[0] != SMC_CDC_TYPE || buf[1] != SMC_CDC_LEN)
                return -EBADMSG;
        t.seqno = get_be16(buf + 2);
        t.token = get_be32(buf + 4);
        t.prod_wrap = get_be16(buf + 10);
        t.prod_count = get_be32(buf + 12);
        t.cons_wrap = get_be16(buf + 18);
        t.cons_count = get_be32(buf + 20);
        t.prod_flags = buf[24] & CDC_PROD_FLAGS_MASK;
        t.conn_flags = buf[25] & CDC_CONN_FLAGS_MASK;
        memcpy(c, &t, sizeof(t));
        return 0;
}

/* ---- LLC (5) ---- */

#define LLC_V2_TYPE_HI        0x20
#define ADD_LINK_V2_EXT_LEN   28 /* 44..71 */
#define ADD_LINK_V2_BASE_LEN  (SMC_LLC_LEN + ADD_LINK_V2_EXT_LEN)
#define REQ_ADD_LINK_HDR_LEN  28
#define REQ_ADD_LINK_MAX_GIDS 8

static bool llc_type_valid(uint8_t type, bool v2) {
        switch (type) {
        case SMC_LLC_CONFIRM_LINK:
        case SMC_LLC_ADD_LINK:
        case SMC_LLC_DELETE_LINK:
        case SMC_LLC_CONFIRM_RKEY:
        case SMC_LLC_TEST_LINK:
        case SMC_LLC_CONFIRM_RKEY_CONT:
        case SMC_LLC_DELETE_RKEY:
                return true;
        case SMC_LLC_ADD_LINK_CONT:
                return !v2;
        case SMC_LLC_REQ_ADD_LINK:
                return v2;
        default:
                return false;
        }
}

/* The v2 message length for m, or -EINVAL. */
static ssize_t llc_encode_len(const struct smc_llc_msg *m) {
        size_t natural = SMC_LLC_LEN;

        if (!m->v2)
                return m->length == 0 || m->length == SMC_LLC_LEN ? SMC_LLC_LEN : -EINVAL;
        if (m->type == SMC_LLC_ADD_LINK) {
                if (m->length == SMC_LLC_LEN)
                        return m->add_link.n_rkeys == 0 ? SMC_LLC_LEN : -EINVAL;
                natural = ADD_LINK_V2_BASE_LEN + 16 * (size_t) m->add_link.n_rkeys;
        } else if (m->type == SMC_LLC_REQ_ADD_LINK) {
                size_t l = REQ_ADD_LINK_HDR_LEN + 16 * (size_t) m->req_add_link.n_gids;
                natural = l > SMC_LLC_LEN ? l : SMC_LLC_LEN;
        }
        if (m->length != 0 && m->length != natural)
                return -EINVAL;
        return (ssize_t) natural;
}

static void put_rkey_entry(uint8_t *p, const struct smc_llc_rkey_entry *e) {
        put_be32(p, e->rkey_old);
        put_be32(p + 4, e->rkey_new);
        put_be64(p + 8, e->addr_new);
}
static void get_rkey_entry(const uint8_t *p, struct smc_llc_rkey_entry *e) {
        e->rkey_old = get_be32(p);
        e->rkey_new = get_be32(p + 4);
        e->addr_new = get_be64(p + 8);
}

static bool all_zero(const uint8_t *p, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (p[i])
                        return false;
        return true;
}

ssize_t smc_llc_encode(const struct smc_llc_msg *m, uint8_t *buf, size_t buflen) {
        ssize_t sl;
        size_t l;

        if (!m || (!buf && buflen > 0))
                return -EINVAL;
        if (m->type == SMC_LLC_CONFIRM_RKEY_CONT || !llc_type_valid(m->type, m->v2))
                return -EINVAL;
        sl = llc_encode_len(m);
        if (sl < 0)
                return sl;
        l = (size_t) sl;

        /* field checks, all before the first write */
        switch (m->type) {
        case SMC_LLC_CONFIRM_LINK:
                if (m->confirm_link.qpn > 0xFFFFFF)
                        return -EINVAL;
                break;
        case SMC_LLC_ADD_LINK:
                if (m->add_link.qpn > 0xFFFFFF || m->add_link.psn > 0xFFFFFF || m->add_link.qp_mtu > 15)
                        return -EINVAL;
                if (!m->v2 && m->add_link_reject_reason > 15)
                        return -EINVAL;
                if (m->v2 && m->add_link.n_rkeys > SMC_LLC_MAX_ADD_LINK_RKEYS)
                        return -EINVAL;
                if (m->v2 && m->add_link.n_rkeys > 0 && !m->add_link.rkeys)
                        return -EINVAL;
                /* bytes 4..43 come from these fields only: all zero = Linux's trigger */
                if (!(m->flags & SMC_LLC_FLAG_RESP) && all_zero(m->add_link.mac, 6) &&
                    all_zero(m->add_link.gid, 16) && m->add_link.qpn == 0 && m->add_link.link_num == 0 &&
                    m->add_link.qp_mtu == 0 && m->add_link.psn == 0)
                        return -EINVAL;
                break;
        case SMC_LLC_CONFIRM_RKEY:
                if (m->confirm_rkey.num_rkeys > 2)
                        return -EINVAL;
                break;
        case SMC_LLC_DELETE_RKEY:
                if (m->delete_rkey.num_rkeys > SMC_LLC_MAX_DELETE_RKEYS_V1)
                        return -EINVAL;
                break;
        case SMC_LLC_REQ_ADD_LINK:
                if (m->req_add_link.n_gids > REQ_ADD_LINK_MAX_GIDS)
                        return -EINVAL;
                break;
        }
        if (buflen < l)
                return -ENOBUFS;

        memset(buf, 0, l);
        buf[0] = m->v2 ? (uint8_t) (LLC_V2_TYPE_HI | m->type) : m->type;
        if (m->v2)
                put_be16(buf + 1, (uint16_t) l);
        else {
                buf[1] = SMC_LLC_LEN;
                if (m->type == SMC_LLC_ADD_LINK)
                        buf[2] = m->add_link_reject_reason;
        }
        buf[3] = m->flags;

        switch (m->type) {
        case SMC_LLC_CONFIRM_LINK:
                memcpy(buf + 4, m->confirm_link.mac, 6);
                memcpy(buf + 10, m->confirm_link.gid, 16);
                put_be24(buf + 26, m->confirm_link.qpn);
                buf[29] = m->confirm_link.link_num;
                put_be32(buf + 30, m->confirm_link.link_uid);
                buf[34] = m->confirm_link.max_links;
                buf[35] = m->confirm_link.max_conns;
                break;
        case SMC_LLC_ADD_LINK:
                memcpy(buf + 4, m->add_link.mac, 6);
                memcpy(buf + 12, m->add_link.gid, 16);
                put_be24(buf + 28, m->add_link.qpn);
                buf[31] = m->add_link.link_num;
                buf[32] = m->add_link.qp_mtu;
                put_be24(buf + 33, m->add_link.psn);
                if (m->v2 && l > SMC_LLC_LEN) {
                        uint8_t *x = buf + SMC_LLC_LEN;
                        uint16_t n = m->add_link.n_rkeys;

                        x[0] = m->add_link.v2_direct ? 0x80 : 0;
                        memcpy(x + 2, m->add_link.target_gid, 16);
                        if (m->add_link.n_rkeys_le) {
                                x[26] = (uint8_t) n;
                                x[27] = (uint8_t) (n >> 8);
                        } else
                                put_be16(x + 26, n);
                        for (unsigned i = 0; i < n; i++)
                                put_rkey_entry(x + ADD_LINK_V2_EXT_LEN + 16 * i, &m->add_link.rkeys[i]);
                }
                break;
        case SMC_LLC_ADD_LINK_CONT: {
                unsigned n = m->add_link_cont.num_rkeys < 2 ? m->add_link_cont.num_rkeys : 2;

                buf[4] = m->add_link_cont.link_num;
                buf[5] = m->add_link_cont.num_rkeys;
                for (unsigned i = 0; i < n; i++)
                        put_rkey_entry(buf + 8 + 16 * i, &m->add_link_cont.rt[i]);
                break;
        }
        case SMC_LLC_DELETE_LINK:
                buf[4] = m->delete_link.link_num;
                put_be32(buf + 5, m->delete_link.reason);
                break;
        case SMC_LLC_CONFIRM_RKEY:
                buf[4] = m->confirm_rkey.num_rkeys;
                put_be32(buf + 5, m->confirm_rkey.rkey);
                put_be64(buf + 9, m->confirm_rkey.addr);
                for (unsigned i = 0; i < m->confirm_rkey.num_rkeys; i++) {
                        uint8_t *e = buf + 17 + 13 * i;

                        e[0] = m->confirm_rkey.rt[i].link_num;
                        put_be32(e + 1, m->confirm_rkey.rt[i].rkey);
                        put_be64(e + 5, m->confirm_rkey.rt[i].addr);
                }
                break;
        case SMC_LLC_TEST_LINK:
                memcpy(buf + 4, m->test_link.user_data, 16);
                break;
        case SMC_LLC_DELETE_RKEY:
                buf[4] = m->delete_rkey.num_rkeys;
                buf[5] = m->delete_rkey.err_mask;
                for (unsigned i = 0; i < m->delete_rkey.num_rkeys; i++)
                        put_be32(buf + 8 + 4 * i, m->delete_rkey.rkeys[i]);
                break;
        case SMC_LLC_REQ_ADD_LINK:
                buf[24] = m->req_add_link.n_gids;
                for (unsigned i = 0; i < m->req_add_link.n_gids; i++)
                        memcpy(buf + REQ_ADD_LINK_HDR_LEN + 16 * i, m->req_add_link.gids[i], 16);
                break;
        }
        return (ssize_t) l;
}

/* The v2 length field (see the top of the file), or -EBADMSG. */
static int llc_v2_length(const uint8_t *buf, size_t len, uint16_t *ret) {
        uint16_t be = get_be16(buf + 1), le = (uint16_t) (buf[2] << 8 | buf[1]);
        size_t lim = len < SMC_LLC_V2_MAX_LEN ? len : SMC_LLC_V2_MAX_LEN;
        bool ok_be = be >= SMC_LLC_LEN && be <= lim, ok_le = le >= SMC_LLC_LEN && le <= lim;

        if (ok_be && ok_le && be != le) {
                if (be == len)
                        ok_le = false;
                else if (le == len)
                        ok_be = false;
                else
                        return -EBADMSG;
        }
        if (ok_be)
                *ret = be;
        else if (ok_le)
                *ret = le;
        else
                return -EBADMSG;
        return 0;
}

int smc_llc_decode(const uint8_t *buf, size_t len, struct smc_llc_msg *m) {
        struct smc_llc_rkey_entry *rkeys_out;
        struct smc_llc_msg t;
        unsigned n_entries = 0;
        uint8_t type;
        bool v2;
        int r;

        if (!buf || !m)
                return -EINVAL;
        if (len < SMC_LLC_LEN)
                return -EBADMSG;
        if ((buf[0] & 0xF0) != 0 && (buf[0] & 0xF0) != LLC_V2_TYPE_HI)
                return -EPROTO;
        v2 = buf[0] & 0xF0;
        type = buf[0] & 0x0F;
        if (!llc_type_valid(type, v2))
                return -EPROTO;

        memset(&t, 0, sizeof(t));
        t.type = type;
        t.v2 = v2;
        t.flags = buf[3];
        if (v2) {
                r = llc_v2_length(buf, len, &t.length);
                if (r < 0)
                        return r;
        } else {
                if (buf[1] != SMC_LLC_LEN)
                        return -EBADMSG;
                t.length = SMC_LLC_LEN;
                if (type == SMC_LLC_ADD_LINK)
                        t.add_link_reject_reason = buf[2] & 0x0F;
        }

        /* read the caller's array pointer before t replaces the union (header) */
        rkeys_out = type == SMC_LLC_ADD_LINK ? m->add_link.rkeys : NULL;

        switch (type) {
        case SMC_LLC_CONFIRM_LINK:
                memcpy(t.confirm_link.mac, buf + 4, 6);
                memcpy(t.confirm_link.gid, buf + 10, 16);
                t.confirm_link.qpn = get_be24(buf + 26);
                t.confirm_link.link_num = buf[29];
                t.confirm_link.link_uid = get_be32(buf + 30);
                t.confirm_link.max_links = buf[34];
                t.confirm_link.max_conns = buf[35];
                break;
        case SMC_LLC_ADD_LINK:
                memcpy(t.add_link.mac, buf + 4, 6);
                memcpy(t.add_link.gid, buf + 12, 16);
                t.add_link.qpn = get_be24(buf + 28);
                t.add_link.link_num = buf[31];
                t.add_link.qp_mtu = buf[32] & 0x0F;
                t.add_link.psn = get_be24(buf + 33);
                if (v2 && t.length > SMC_LLC_LEN) {
                        const uint8_t *x = buf + SMC_LLC_LEN;
                        unsigned count, avail;

                        if (t.length < ADD_LINK_V2_BASE_LEN || (t.length - ADD_LINK_V2_BASE_LEN) % 16 != 0)
                                return -EBADMSG;
                        if (x[26] != 0 && x[27] != 0)
                                return -EBADMSG;
                        t.add_link.v2_direct = x[0] & 0x80;
                        memcpy(t.add_link.target_gid, x + 2, 16);
                        t.add_link.n_rkeys_le = x[26] != 0;
                        count = x[26] | x[27];
                        avail = (t.length - ADD_LINK_V2_BASE_LEN) / 16;
                        n_entries = count < avail ? count : avail;
                        t.add_link.n_rkeys = (uint16_t) n_entries;
                }
                t.add_link.rkeys = rkeys_out;
                break;
        case SMC_LLC_ADD_LINK_CONT: {
                unsigned n;

                t.add_link_cont.link_num = buf[4];
                t.add_link_cont.num_rkeys = buf[5];
                n = buf[5] < 2 ? buf[5] : 2;
                for (unsigned i = 0; i < n; i++)
                        get_rkey_entry(buf + 8 + 16 * i, &t.add_link_cont.rt[i]);
                break;
        }
        case SMC_LLC_DELETE_LINK:
                t.delete_link.link_num = buf[4];
                t.delete_link.reason = get_be32(buf + 5);
                break;
        case SMC_LLC_CONFIRM_RKEY:
                t.confirm_rkey.num_rkeys = buf[4];
                if (t.confirm_rkey.num_rkeys > 2)
                        return -EBADMSG;
                t.confirm_rkey.rkey = get_be32(buf + 5);
                t.confirm_rkey.addr = get_be64(buf + 9);
                for (unsigned i = 0; i < t.confirm_rkey.num_rkeys; i++) {
                        const uint8_t *e = buf + 17 + 13 * i;

                        t.confirm_rkey.rt[i].link_num = e[0];
                        t.confirm_rkey.rt[i].rkey = get_be32(e + 1);
                        t.confirm_rkey.rt[i].addr = get_be64(e + 5);
                }
                break;
        case SMC_LLC_TEST_LINK:
                memcpy(t.test_link.user_data, buf + 4, 16);
                break;
        case SMC_LLC_DELETE_RKEY:
                t.delete_rkey.num_rkeys = buf[4];
                t.delete_rkey.err_mask = buf[5];
                if (v2 && t.length < 8 + 4 * (size_t) buf[4])
                        return -EBADMSG;
                if (buf[4] > SMC_LLC_MAX_DELETE_RKEYS_V1)
                        return v2 ? -EPROTO : -EBADMSG;
                for (unsigned i = 0; i < buf[4]; i++)
                        t.delete_rkey.rkeys[i] = get_be32(buf + 8 + 4 * i);
                break;
        case SMC_LLC_REQ_ADD_LINK:
                t.req_add_link.n_gids = buf[24];
                if (t.req_add_link.n_gids > REQ_ADD_LINK_MAX_GIDS)
                        return -EBADMSG;
                if (t.length < REQ_ADD_LINK_HDR_LEN + 16 * (size_t) t.req_add_link.n_gids)
                        return -EBADMSG;
                for (unsigned i = 0; i < t.req_add_link.n_gids; i++)
                        memcpy(t.req_add_link.gids[i], buf + REQ_ADD_LINK_HDR_LEN + 16 * i, 16);
                break;
        case SMC_LLC_CONFIRM_RKEY_CONT:
                break; /* header only, see the top of the file */
        }

        /* all checks passed: now the caller's rkey array may be written */
        if (rkeys_out)
                for (unsigned i = 0; i < n_entries; i++)
                        get_rkey_entry(buf + ADD_LINK_V2_BASE_LEN + 16 * i, &rkeys_out[i]);
        memcpy(m, &t, sizeof(t));
        return 0;
}

/* ---- size encoding (6.1) ---- */

uint8_t smc_size_compress(uint64_t size, uint8_t max_c) {
        unsigned c;

        if (max_c > 15)
                max_c = 15;
        if (size <= 16384)
                return 0;
        c = (unsigned) (63 - __builtin_clzll((size - 1) >> 14)) + 1;
        return (uint8_t) (c < max_c ? c : max_c);
}
