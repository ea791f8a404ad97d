/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * What smc-tcpopt.bpf.c (the BPF sock_ops program) and smcd/tcpopt.c (its loader) share:
 * the SMC TCP option, the flag bits and the layouts of the maps' keys and values. Only
 * <linux/types.h> types: the file is compiled for the BPF target and for the host.
 *
 * The option (RFC 7609, Linux net/smc): kind 254 (experimental, RFC 6994), length 6,
 * 32-bit ExID 0xE2D4C3D9 ("SMCR" in EBCDIC), big-endian, only in SYN and SYN-ACK.
 */

#include <linux/types.h>

#define SMC_TCPOPT_KIND   254
#define SMC_TCPOPT_LEN    6
#define SMC_TCPOPT_MAGIC0 0xE2
#define SMC_TCPOPT_MAGIC1 0xD4
#define SMC_TCPOPT_MAGIC2 0xC3
#define SMC_TCPOPT_MAGIC3 0xD9

/* struct smc_tcpopt_sk.flags (the socket-local storage map "smc_marks") */
enum {
        SMC_TCPOPT_F_MARKED = 1u << 0, /* set by user space: send the option in our SYN, or
                                        * (listener) echo it in SYN-ACKs to SYNs that had it */
        SMC_TCPOPT_F_SENT   = 1u << 1, /* the program wrote the option into our SYN / SYN-ACK */
        SMC_TCPOPT_F_PEER   = 1u << 2, /* the handshake exchanged it both ways: active side:
                                        * we sent it and the SYN-ACK carried it; passive side:
                                        * the SYN carried it and we echoed it */
        SMC_TCPOPT_F_DONE   = 1u << 3, /* the handshake completed, SENT/PEER are final */
};

/* Value of "smc_marks" (BPF_MAP_TYPE_SK_STORAGE, BPF_F_NO_PREALLOC | BPF_F_CLONE: an
 * accepted socket starts with a copy of its listener's value). User space writes
 * { SMC_TCPOPT_F_MARKED, 0 } (or { 0, 0 } to unmark); the program owns the rest. */
struct smc_tcpopt_sk {
        __u32 flags;
        __u32 cb_added;   /* bpf_sock_ops_cb_flags bits this program turned on for the
                           * handshake, turned off again once established */
};

/* Key of "smc_listen" (marked listeners) and "smc_flagged" (listeners on which the
 * program enabled the header-option callbacks): the listener's network namespace and
 * bound address. */
struct smc_tcpopt_lkey {
        __u64 netns;      /* the namespace's cookie (SO_NETNS_COOKIE, bpf_get_netns_cookie);
                           * 0 on kernels whose sock_ops programs cannot read it (< 5.15) */
        __u32 addr[4];    /* network byte order; IPv4 as ::ffff:a.b.c.d; 0 if wildcard */
        __u32 port;       /* host byte order */
        __u32 wild;       /* 0: a specific address; 4: 0.0.0.0; 6: :: */
};

struct smc_tcpopt_lval {
        __u64 cookie;     /* SO_COOKIE of the listener the entry belongs to */
        __u32 ours;       /* smc_flagged: the cb flag bits this program turned on */
        __u32 flags;      /* smc_listen: SMC_TCPOPT_L_* (0 in smc_flagged) */
};

/* struct smc_tcpopt_lval.flags in smc_listen */
enum {
        SMC_TCPOPT_L_GROUP = 1u << 0, /* the listener may share its address and port
                                       * (SO_REUSEPORT, SO_BINDTODEVICE): user space
                                       * found every listener overlapping it marked. When
                                       * it stops listening the entry passes to another
                                       * member of "smc_members" with the same key, or
                                       * goes if there is none */
        SMC_TCPOPT_L_DUALSTACK = 1u << 1, /* a :: listener without IPV6_V6ONLY (user space
                                           * reads it): IPv4 connections find it */
};

/* "smc_members": the marked listeners, by socket cookie (key __u64), each with the
 * smc_tcpopt_lkey it was marked under (value). User space adds one when it marks a
 * listener and removes it when it unmarks one; the program removes it when the
 * listener leaves LISTEN. User space writes the smc_listen entry of a listener that
 * may share its address only if every listener the kernel shows on an overlapping
 * address and port is in here. */

/* Key of "smc_synack": one connection request whose SYN-ACK carried our echo, by the
 * namespace and 4-tuple as the sock_ops context shows them (so request and child give
 * the same key). */
struct smc_tcpopt_ckey {
        __u64 netns;      /* as smc_tcpopt_lkey.netns */
        __u32 laddr[4];   /* as smc_tcpopt_lkey.addr */
        __u32 raddr[4];
        __u32 lport;      /* bpf_sock_ops.local_port (host order) */
        __u32 rport;      /* bpf_sock_ops.remote_port (as read, network order) */
};

struct smc_tcpopt_cval {
        __u64 ts_ns;      /* bpf_ktime_get_ns() of the last SYN-ACK written with the echo */
};

/* A smc_synack entry older than this is stale (the request died without a final ACK):
 * swept when the map is full. SYN-ACK retransmissions refresh it (default
 * tcp_synack_retries 5: the last one about 31 s after the first). */
#define SMC_TCPOPT_SYNACK_STALE_NS (300ULL * 1000000000ULL)

#define SMC_TCPOPT_LISTEN_MAX  4096
#define SMC_TCPOPT_MEMBERS_MAX 4096
#define SMC_TCPOPT_FLAGGED_MAX 16384
#define SMC_TCPOPT_SYNACK_MAX  16384
