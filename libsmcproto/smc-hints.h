/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * The connection hints: a page smcd publishes in its runtime directory
 * ($SMCD_RUNTIME_DIR/hints, mode 0644, one 4096-byte file) and every client maps read
 * only, so that a connect can choose TCP without asking smcd.
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
 * Writer: smcd only (smcd/hints.c). Each slot is a seqlock: seq odd while smcd writes
 * it, even when stable; a reader loads seq (acquire), the fields, seq again (after an
 * acquire fence) and uses them only if both were the same even value. Fields are
 * atomics (relaxed) so that the race is a defined one.
 *
 * Every time is CLOCK_MONOTONIC in ns (system-wide, as every process of the host sees
 * it). A reader that finds magic or version unknown, or the file smaller than
 * SMC_HINTS_SIZE, ignores the file. A new smcd replaces the file (rename), so a reader
 * checks now and then (libsmcproto: each second at most) that the path still names
 * the file it mapped, and `closed` set means smcd has stopped: its hints hold nothing.
 */

#include <stdatomic.h>
#include <stdint.h>

#define SMC_HINTS_NAME "hints"
#define SMC_HINTS_MAGIC 0x48434d53u /* "SMCH" little-endian */
#define SMC_HINTS_VERSION 1u
#define SMC_HINTS_SIZE 4096u
#define SMC_HINTS_SLOTS 63u
#define SMC_HINT_HOLD_NS 1000000000ull /* ns a hint holds once published */

/* One destination. 64 bytes. */
struct smc_hint {
        _Atomic uint32_t seq;         /* seqlock: odd while written */
        _Atomic uint32_t reason;      /* SMCD_DECL_SHORTCONN; 0 = the slot is free */
        _Atomic uint64_t until_ns;    /* the hint holds while CLOCK_MONOTONIC < this */
        _Atomic uint64_t listener_id; /* smcd's id of the listener (LISTEN_REPLY) */
        _Atomic uint64_t addr[2];     /* the destination as the clients connected to it:
                                       * struct smc_ctl_addr.addr (16 bytes, IPv4 in
                                       * the first 4) */
        _Atomic uint32_t family_port; /* family << 16 | port (host order) */
        uint32_t reserved[5];
};

struct smc_hints {
        uint32_t magic;         /* SMC_HINTS_MAGIC */
        uint32_t version;       /* SMC_HINTS_VERSION */
        uint32_t n_slots;       /* SMC_HINTS_SLOTS */
        uint32_t size;          /* SMC_HINTS_SIZE */
        _Atomic uint32_t used;  /* slots [0, used) may hold a hint: a reader looks at no more */
        _Atomic uint32_t closed; /* 1: smcd stopped, no hint holds */
        uint32_t reserved[10];
        struct smc_hint slot[SMC_HINTS_SLOTS];
};

_Static_assert(sizeof(struct smc_hint) == 64, "hint slot layout");
_Static_assert(sizeof(struct smc_hints) == SMC_HINTS_SIZE, "hints page layout");
