/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * The endpoint table: $RUNTIME_DIR/endpoints, one record per open SMC-D endpoint, so
 * that an smcd started after this one (a restart, a crash) knows every connection at
 * once, idle ones too, and which process owns each (smcd(8), RESTARTS).
 *
 * A file of SMCD_EPT_HDR_LEN header bytes and nslots records of SMCD_EPT_RECORD_LEN
 * bytes, mode 0600, owned by smcd's uid (it holds the DMB tokens, which prove a
 * connection's ownership in REREG), mapped MAP_SHARED: adding or removing a record is
 * a few stores into smcd's memory, no syscall, and survives SIGKILL (tmpfs keeps the
 * pages). A record is valid when its state is SMCD_EPT_LIVE: stored last when one is
 * added, cleared first when it is removed. Its pages are allocated when it is made
 * or grown (fallocate: a sparse page a full tmpfs could not supply would end smcd
 * with SIGBUS at the store). Full: the file grows (doubles) up to
 * SMCD_EPT_MAX_SLOTS records; beyond that an endpoint is not recorded (logged once).
 *
 * At start, smcd reads the file an earlier smcd left (eptable_load), writes a new
 * one under a temporary name with the records it kept (eptable_create, eptable_add),
 * and renames it over the old one (eptable_commit).
 */

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ctl-proto.h"

#define SMCD_EPT_NAME "endpoints"
#define SMCD_EPT_MAGIC UINT64_C(0x3154504544434d53) /* "SMCDEPT1", little-endian */
#define SMCD_EPT_VERSION 1u
#define SMCD_EPT_LIVE 0x4556494cu /* "LIVE" */
#define SMCD_EPT_HDR_LEN 64u
#define SMCD_EPT_RECORD_LEN 128u
#define SMCD_EPT_MIN_SLOTS 4096u
#define SMCD_EPT_MAX_SLOTS (1u << 22) /* 512 MiB of file at most; pages touched only */

struct smcd_ept_header {
        uint64_t magic;
        uint32_t version;
        uint32_t record_len;
        uint32_t nslots;
        uint32_t instance; /* the smcd that writes it (HELLO_REPLY.instance) */
        uint8_t reserved[40];
};
_Static_assert(sizeof(struct smcd_ept_header) == SMCD_EPT_HDR_LEN, "endpoint table header");

struct smcd_ept_record {
        uint32_t state;     /* SMCD_EPT_LIVE, or 0 (free) */
        uint32_t role;      /* SMC_CTL_ROLE_CLIENT / _SERVER */
        uint64_t id;        /* the endpoint id of the smcd that wrote it */
        uint64_t rx_token;  /* DMB tokens (dmb.h) of its rx and tx DMB, not 0 */
        uint64_t tx_token;
        uint32_t rx_size;   /* ring bytes of its rx and tx DMB */
        uint32_t tx_size;
        uint32_t uid;       /* the endpoint's uid */
        int32_t pid;        /* its owner (the process that set it up, or re-registered
                             * it), and that process's start time (/proc/PID/stat
                             * field 22, clock ticks after boot): a pid reused since
                             * is not the owner */
        uint64_t pid_start;
        struct smc_ctl_addr local; /* its own address and its peer's */
        struct smc_ctl_addr peer;
        uint8_t reserved[24];
};
_Static_assert(sizeof(struct smcd_ept_record) == SMCD_EPT_RECORD_LEN, "endpoint table record");

typedef struct EpTable EpTable;

/* Read the table in @dir (left by an earlier smcd). On success returns the number of
 * valid live records (>= 0) in a malloc'd array *@ret (the caller frees it; NULL if
 * none). A record is valid if its role is known, its tokens, sizes and pid are not 0
 * and its sizes are DMB sizes (dmb.h; others are skipped). Errors: -ENOENT
 * (no table), -EPERM (not a regular file of our uid with mode 0600: not trusted),
 * -EBADMSG (not a table of this version, or smaller than its header says, or not a
 * whole number of records; larger is read: a kill while it grew), -ENOMEM,
 * another -errno from open/fstat/mmap. Nothing is changed. */
int eptable_load(const char *dir, struct smcd_ept_record **ret);

/* Create a new, empty table for @instance in @dir, under a temporary name, with room
 * for @nslots records (at least SMCD_EPT_MIN_SLOTS). *@ret is owned by the caller
 * (eptable_free). Returns 0 or -errno (-ENOMEM, or from open/ftruncate/mmap). */
int eptable_create(const char *dir, uint32_t instance, uint32_t nslots, EpTable **ret);

/* Rename the table over $dir/endpoints: from now on a later smcd reads this one.
 * Returns 0 or -errno from rename(2). */
int eptable_commit(EpTable *t);

/* Record @r (its state is set here). Returns the record's slot + 1 (> 0), or -ENOSPC
 * (SMCD_EPT_MAX_SLOTS records), -errno from growing the file. */
int eptable_add(EpTable *t, const struct smcd_ept_record *r);

/* The owner of the record at @slot1 (eptable_add's value) is now @pid, started at
 * @pid_start. No-op for slot1 0 and for a record removed. */
void eptable_set_owner(EpTable *t, uint32_t slot1, pid_t pid, uint64_t pid_start);

/* Remove the record at @slot1. No-op for slot1 0. */
void eptable_remove(EpTable *t, uint32_t slot1);

/* Unmap and close @t (the file stays: the connections outlive smcd). Returns NULL. */
EpTable *eptable_free(EpTable *t);

/* The start time of process @pid (/proc/PID/stat field 22, clock ticks after boot)
 * into *@ret. Returns 0, -ESRCH (no such process), -EBADMSG, or -errno. */
int proc_pid_start(pid_t pid, uint64_t *ret);
