/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * The connection hints: a file smcd publishes in its runtime directory
 * ($SMCD_RUNTIME_DIR/hints, mode 0644, 4096 bytes) and every client reads, so that a
 * connect can choose TCP without asking smcd.
 *
 * What it carries: destinations whose SMC-D connections are short-lived at a high rate
 * (tunable short_conn_rate, smcd-tunables(5)). Such a connection costs more through
 * smcd (its set-up: a round trip to smcd and four descriptors passed; its tear-down)
 * than its few bytes save, so for a while (SMC_HINT_HOLD_NS) new connections to it are
 * plain TCP, with reason SMCD_DECL_SHORTCONN, as the kernel's SMC falls back for a
 * listener whose handshakes are congested (net.smc.limit_smc_hs) and as its BPF
 * handshake control (smc_hs_ctrl) lets a policy keep short-lived flows on TCP. When a
 * hint expires, connections are SMC again and smcd measures anew.
 *
 * Neither side maps the file: a file truncated under a mapping kills the process that
 * touches it (SIGBUS), and root may truncate any file. smcd writes it with pwrite(2),
 * a slot as three writes: seq made odd, the rest, seq made even (the next even value).
 * A reader reads it with pread(2) twice and takes a slot only when both copies are the
 * same, byte for byte, and seq is even: a write that overlapped the first read changed
 * seq by the second (smcd/hints.c, libsmcproto/hints.c).
 *
 * Every time is CLOCK_REALTIME in ns since the epoch: the one clock a time namespace
 * (time_namespaces(7): containers, CRIU) does not shift, so smcd and a client in such
 * a namespace agree on it. A reader takes a hint whose expiry lies more than
 * SMC_HINT_HOLD_NS + SMC_HINT_SLACK_NS ahead of its clock as void (the clock was set
 * back, or the file is bad), so no hint holds longer than that. A reader that finds
 * magic, version or sizes unknown ignores the file; `closed` set means smcd has
 * stopped (its hints hold nothing). A new smcd replaces the file (rename).
 */

#include <stdint.h>

#define SMC_HINTS_NAME "hints"
#define SMC_HINTS_MAGIC 0x48434d53u /* "SMCH" little-endian */
#define SMC_HINTS_VERSION 1u
#define SMC_HINTS_SIZE 4096u
#define SMC_HINTS_SLOTS 63u
#define SMC_HINT_HOLD_NS 1000000000ull  /* ns a hint holds once published */
#define SMC_HINT_SLACK_NS 1000000000ull /* ns a reader's clock may lag smcd's */

/* One destination. 64 bytes, host byte order. */
struct smc_hint {
        uint32_t seq;         /* odd while written */
        uint32_t reason;      /* SMCD_DECL_SHORTCONN; 0 = the slot is free */
        uint64_t until_ns;    /* the hint holds while CLOCK_REALTIME < this */
        uint64_t listener_id; /* smcd's id of the listener (LISTEN_REPLY) */
        uint8_t addr[16];     /* the destination as the clients connected to it: struct
                               * smc_ctl_addr.addr (IPv4 in the first 4 bytes) */
        uint32_t family_port; /* family << 16 | port */
        uint32_t reserved[5];
};

struct smc_hints {
        uint32_t magic;         /* SMC_HINTS_MAGIC */
        uint32_t version;       /* SMC_HINTS_VERSION */
        uint32_t n_slots;       /* SMC_HINTS_SLOTS */
        uint32_t size;          /* SMC_HINTS_SIZE */
        uint32_t used;          /* slots [0, used) may hold a hint: a reader looks at no more */
        uint32_t closed;        /* 1: smcd stopped, no hint holds */
        uint32_t reserved[10];
        struct smc_hint slot[SMC_HINTS_SLOTS];
};

_Static_assert(sizeof(struct smc_hint) == 64, "hint slot layout");
_Static_assert(sizeof(struct smc_hints) == SMC_HINTS_SIZE, "hints page layout");
