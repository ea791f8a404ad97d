/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * smc-tcpopt: the SMC capability option (TCP kind 254, length 6, ExID 0xE2D4C3D9) in
 * SYN and SYN-ACK, for the TCP sockets smcd marks, as a BPF_PROG_TYPE_SOCK_OPS program
 * attached to a cgroup v2 (see smcd/tcpopt.h for the user-space side and the limits).
 *
 * Active side (a marked socket that connects):
 *   TCP_CONNECT_CB       turn on the header-option callbacks for this socket
 *   HDR_OPT_LEN_CB       (SYN) reserve 6 bytes; the kernel rounds up to 8
 *   WRITE_HDR_OPT_CB     (SYN) write FE 06 E2 D4 C3 D9 (the kernel pads 01 01 after it)
 *   ACTIVE_ESTABLISHED   did the SYN-ACK carry it? record; callbacks off again
 *
 * Passive side (a marked listener and its children):
 *   TCP_LISTEN_CB        for every listener in the cgroup: turn on the header-option and
 *                        state callbacks (so a socket marked while already listening
 *                        works), note that in smc_flagged; a marked one goes into
 *                        smc_listen, by its namespace and bound address, with its
 *                        cookie
 *   HDR_OPT_LEN_CB /     (SYN-ACK of a request socket; skops->sk is NULL there, so the
 *   WRITE_HDR_OPT_CB     listener is found in smc_listen by the request's namespace and
 *                        local address)
 *                        echo the option only if the listener is marked, the SYN carried
 *                        it (the just-received SYN is at hand without TCP_SAVE_SYN) and
 *                        the SYN-ACK is not a syncookie one; each echo is recorded in
 *                        smc_synack by 4-tuple, which a retransmitted SYN-ACK (no SYN at
 *                        hand) repeats, and the child reads
 *   PASSIVE_ESTABLISHED  the child (it inherited a copy of the listener's smc_marks
 *                        value through BPF_F_CLONE): PEER iff its request was echoed;
 *                        the callbacks inherited from the listener turned off
 *   STATE_CB             a listener leaves LISTEN: its smc_members / smc_flagged entries
 *                        go, and its smc_listen entry, or (a group's) passes to another
 *                        marked member on the same key
 *
 * Every map belongs to one loaded instance: two smcd daemons load two instances with
 * their own maps, and each acts only on the sockets marked in its own maps.
 */

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "smc-tcpopt-abi.h"

#define AF_INET    2
#define AF_INET6   10
#define TCPHDR_SYN 0x02
#define TCPHDR_ACK 0x10
#define ENOENT     2
#define EEXIST     17

struct bpf_map;

/* Kernel-side license tag. The file is LGPL-2.1-or-later, which may be conveyed under
 * the GPL; no GPL-only helper is used. */
char LICENSE[] SEC("license") = "GPL";

/* Set by the loader before loading (read-only to the program): nonzero if sock_ops
 * programs may call bpf_get_netns_cookie() (Linux 5.15). Otherwise the keys carry
 * namespace 0, and the verifier never sees the call (the branch on a constant of a
 * frozen map is not explored). */
const volatile __u32 smc_netns_key = 0;

struct {
        __uint(type, BPF_MAP_TYPE_SK_STORAGE);
        __uint(map_flags, BPF_F_NO_PREALLOC | BPF_F_CLONE);
        __type(key, int);
        __type(value, struct smc_tcpopt_sk);
} smc_marks SEC(".maps");

struct {
        __uint(type, BPF_MAP_TYPE_HASH);
        __uint(map_flags, BPF_F_NO_PREALLOC);
        __uint(max_entries, SMC_TCPOPT_LISTEN_MAX);
        __type(key, struct smc_tcpopt_lkey);
        __type(value, struct smc_tcpopt_lval);
} smc_listen SEC(".maps");

struct {
        __uint(type, BPF_MAP_TYPE_HASH);
        __uint(map_flags, BPF_F_NO_PREALLOC);
        __uint(max_entries, SMC_TCPOPT_MEMBERS_MAX);
        __type(key, __u64);
        __type(value, struct smc_tcpopt_lkey);
} smc_members SEC(".maps");

struct {
        __uint(type, BPF_MAP_TYPE_LRU_HASH);
        __uint(max_entries, SMC_TCPOPT_FLAGGED_MAX);
        __type(key, struct smc_tcpopt_lkey);
        __type(value, struct smc_tcpopt_lval);
} smc_flagged SEC(".maps");

struct {
        __uint(type, BPF_MAP_TYPE_HASH);
        __uint(map_flags, BPF_F_NO_PREALLOC);
        __uint(max_entries, SMC_TCPOPT_SYNACK_MAX);
        __type(key, struct smc_tcpopt_ckey);
        __type(value, struct smc_tcpopt_cval);
} smc_synack SEC(".maps");

#define CB_ACTIVE   BPF_SOCK_OPS_WRITE_HDR_OPT_CB_FLAG
#define CB_LISTENER (BPF_SOCK_OPS_WRITE_HDR_OPT_CB_FLAG | BPF_SOCK_OPS_STATE_CB_FLAG)

/* Read a context field into a register and keep it there: the verifier wants each
 * context field read straight from the context pointer, and without the barrier the
 * compiler may turn "c ? ctx->a : ctx->b" into one read through a selected (modified)
 * context pointer, which it refuses. */
#define CTX_U32(field)                                  \
        ({                                              \
                __u32 _v = skops->field;                \
                asm volatile("" : "+r"(_v));            \
                _v;                                     \
        })

/* The local / remote address of the socket (or request) as four network-order words,
 * IPv4 mapped into IPv6. addr_local() returns true if it is all-zero (a wildcard
 * bind). */
static __always_inline int addr_local(struct bpf_sock_ops *skops, __u32 a[4]) {
        if (skops->family == AF_INET) {
                a[0] = 0;
                a[1] = 0;
                a[2] = bpf_htonl(0xffff);
                a[3] = CTX_U32(local_ip4);
                return a[3] == 0;
        }
        a[0] = CTX_U32(local_ip6[0]);
        a[1] = CTX_U32(local_ip6[1]);
        a[2] = CTX_U32(local_ip6[2]);
        a[3] = CTX_U32(local_ip6[3]);
        return (a[0] | a[1] | a[2] | a[3]) == 0;
}

static __always_inline void addr_remote(struct bpf_sock_ops *skops, __u32 a[4]) {
        if (skops->family == AF_INET) {
                a[0] = 0;
                a[1] = 0;
                a[2] = bpf_htonl(0xffff);
                a[3] = CTX_U32(remote_ip4);
                return;
        }
        a[0] = CTX_U32(remote_ip6[0]);
        a[1] = CTX_U32(remote_ip6[1]);
        a[2] = CTX_U32(remote_ip6[2]);
        a[3] = CTX_U32(remote_ip6[3]);
}

/* The network namespace of the socket or request (skops->sk is the request socket for
 * a SYN-ACK: its namespace is its listener's). */
static __always_inline __u64 netns_of(struct bpf_sock_ops *skops) {
        if (smc_netns_key)
                return bpf_get_netns_cookie(skops);
        return 0;
}

/* The key of a listener by its namespace and bound address (wildcards normalized). */
static __always_inline void lkey_local(struct bpf_sock_ops *skops, struct smc_tcpopt_lkey *k) {
        __builtin_memset(k, 0, sizeof(*k));
        k->netns = netns_of(skops);
        k->port = skops->local_port;
        if (addr_local(skops, k->addr)) {
                __builtin_memset(k->addr, 0, sizeof(k->addr));
                k->wild = skops->family == AF_INET ? 4 : 6;
        }
}

/* Look a connection's local address up in a listener-keyed map: the exact address,
 * the wildcard of its family, and for IPv4 a :: listener, which must be flagged
 * dual-stack if @dualstack (smc_listen: an IPV6_V6ONLY one does not get IPv4
 * connections, which go to a listener that may be plain). */
static __always_inline struct smc_tcpopt_lval *lkey_find(void *map, struct bpf_sock_ops *skops, int dualstack) {
        struct smc_tcpopt_lkey k;
        struct smc_tcpopt_lval *v;
        int v4 = skops->family == AF_INET;

        __builtin_memset(&k, 0, sizeof(k));
        k.netns = netns_of(skops);
        k.port = skops->local_port;
        addr_local(skops, k.addr);
        v = bpf_map_lookup_elem(map, &k);
        if (v)
                return v;
        __builtin_memset(k.addr, 0, sizeof(k.addr));
        k.wild = v4 ? 4 : 6;
        v = bpf_map_lookup_elem(map, &k);
        if (v || !v4)
                return v;
        k.wild = 6;
        v = bpf_map_lookup_elem(map, &k);
        if (v && dualstack && !(v->flags & SMC_TCPOPT_L_DUALSTACK))
                return NULL;
        return v;
}

static __always_inline void ckey_fill(struct bpf_sock_ops *skops, struct smc_tcpopt_ckey *k) {
        __builtin_memset(k, 0, sizeof(*k));
        k->netns = netns_of(skops);
        addr_local(skops, k->laddr);
        addr_remote(skops, k->raddr);
        k->lport = skops->local_port;
        k->rport = skops->remote_port;
}

/* Is the SMC option in the packet: the outgoing-or-received skb (@flags 0) or the SYN
 * (BPF_LOAD_HDR_OPT_TCP_SYN)? The kernel walks the options (NOPs, any order) and
 * matches kind 254 with the 4-byte ExID; like Linux, only an even length >= 6 counts.
 * Returns 1, 0, or a negative error (-ENOENT: no SYN at hand). */
static __always_inline long opt_find(struct bpf_sock_ops *skops, __u64 flags) {
        __u8 buf[40];
        long r;

        __builtin_memset(buf, 0, sizeof(buf));
        buf[0] = SMC_TCPOPT_KIND;
        buf[1] = 6; /* "search length": kind + length + a 4-byte magic */
        buf[2] = SMC_TCPOPT_MAGIC0;
        buf[3] = SMC_TCPOPT_MAGIC1;
        buf[4] = SMC_TCPOPT_MAGIC2;
        buf[5] = SMC_TCPOPT_MAGIC3;
        r = bpf_load_hdr_opt(skops, buf, sizeof(buf), flags);
        if (r == -ENOENT)
                return r;
        if (r < 0) /* -ENOMSG: absent; -EFAULT: malformed options */
                return 0;
        return r >= SMC_TCPOPT_LEN && (r & 1) == 0;
}

static __always_inline long opt_store(struct bpf_sock_ops *skops) {
        __u8 opt[SMC_TCPOPT_LEN] = {
                SMC_TCPOPT_KIND, SMC_TCPOPT_LEN,
                SMC_TCPOPT_MAGIC0, SMC_TCPOPT_MAGIC1, SMC_TCPOPT_MAGIC2, SMC_TCPOPT_MAGIC3,
        };
        long r = bpf_store_hdr_opt(skops, opt, sizeof(opt), 0);

        /* -EEXIST: the same option is in the header already (the kernel's own SMC, or
         * another instance of this program): it is on the wire either way */
        return r == -EEXIST ? 0 : r;
}

static __always_inline struct smc_tcpopt_sk *marks_get(struct bpf_sock_ops *skops) {
        struct bpf_sock *sk;

        if (!skops->is_fullsock)
                return NULL;
        sk = skops->sk;
        if (!sk)
                return NULL;
        return bpf_sk_storage_get(&smc_marks, sk, 0, 0);
}

struct listen_purge {
        struct smc_tcpopt_lkey key;
        __u64 cookie;
};

/* Drop marks of listeners that are gone: a new listener on an overlapping address and
 * port of the same namespace proves the old entry stale (short of SO_REUSEPORT
 * groups). */
static long listen_purge_cb(struct bpf_map *map, struct smc_tcpopt_lkey *k,
                            struct smc_tcpopt_lval *v, struct listen_purge *p) {
        if (k->port != p->key.port || k->netns != p->key.netns || v->cookie == p->cookie)
                return 0;
        if (k->wild || p->key.wild ||
            (k->addr[0] == p->key.addr[0] && k->addr[1] == p->key.addr[1] &&
             k->addr[2] == p->key.addr[2] && k->addr[3] == p->key.addr[3]))
                bpf_map_delete_elem(map, k);
        return 0;
}

static void on_listen(struct bpf_sock_ops *skops) {
        struct listen_purge p;
        struct smc_tcpopt_lval v = {};
        struct smc_tcpopt_sk *st;
        __u32 cur, add;

        lkey_local(skops, &p.key);
        p.cookie = bpf_get_socket_cookie(skops);
        bpf_for_each_map_elem(&smc_listen, listen_purge_cb, &p, 0);

        cur = skops->bpf_sock_ops_cb_flags;
        add = CB_LISTENER & ~cur;
        if (add && bpf_sock_ops_cb_flags_set(skops, cur | add) != 0)
                add = 0;
        if ((cur | add) & BPF_SOCK_OPS_WRITE_HDR_OPT_CB_FLAG) {
                v.cookie = p.cookie;
                v.ours = add;
                bpf_map_update_elem(&smc_flagged, &p.key, &v, BPF_ANY);
        }

        st = marks_get(skops);
        if (st && (st->flags & SMC_TCPOPT_F_MARKED)) {
                v.cookie = p.cookie;
                v.ours = 0;
                bpf_map_update_elem(&smc_listen, &p.key, &v, BPF_ANY);
        }
}

struct member_find {
        struct smc_tcpopt_lkey key;
        __u64 found;
};

static long member_find_cb(struct bpf_map *map, __u64 *cookie, struct smc_tcpopt_lkey *k,
                           struct member_find *f) {
        if (k->port != f->key.port || k->netns != f->key.netns || k->wild != f->key.wild ||
            k->addr[0] != f->key.addr[0] || k->addr[1] != f->key.addr[1] ||
            k->addr[2] != f->key.addr[2] || k->addr[3] != f->key.addr[3])
                return 0;
        f->found = *cookie;
        return 1;
}

static void on_state(struct bpf_sock_ops *skops) {
        struct member_find f;
        struct smc_tcpopt_lval *v;
        __u64 cookie;

        if (skops->args[0] != BPF_TCP_LISTEN)
                return;
        lkey_local(skops, &f.key);
        cookie = bpf_get_socket_cookie(skops);
        bpf_map_delete_elem(&smc_members, &cookie);
        v = bpf_map_lookup_elem(&smc_listen, &f.key);
        if (v && v->cookie == cookie) {
                /* a group's entry passes to a member that still listens: every member
                 * was marked when the entry was made, and a listener that joined since
                 * dropped it (listen_purge_cb) */
                f.found = 0;
                if (v->flags & SMC_TCPOPT_L_GROUP)
                        bpf_for_each_map_elem(&smc_members, member_find_cb, &f, 0);
                if (f.found)
                        v->cookie = f.found;
                else
                        bpf_map_delete_elem(&smc_listen, &f.key);
        }
        v = bpf_map_lookup_elem(&smc_flagged, &f.key);
        if (v && v->cookie == cookie)
                bpf_map_delete_elem(&smc_flagged, &f.key);
}

static void on_connect(struct bpf_sock_ops *skops) {
        struct smc_tcpopt_sk *st = marks_get(skops);
        __u32 cur, add;

        if (!st || !(st->flags & SMC_TCPOPT_F_MARKED))
                return;
        st->flags = SMC_TCPOPT_F_MARKED; /* a new attempt: forget an earlier result */
        cur = skops->bpf_sock_ops_cb_flags;
        add = CB_ACTIVE & ~cur;
        if (add && bpf_sock_ops_cb_flags_set(skops, cur | add) != 0)
                add = 0;
        /* |=: bits turned on by an earlier attempt that never got established */
        st->cb_added |= add;
}

/* The SYN-ACK of a request socket: echo? (@k is filled for the caller.) */
static __always_inline int synack_echo(struct bpf_sock_ops *skops, struct smc_tcpopt_ckey *k) {
        long r;

        if (!lkey_find(&smc_listen, skops, 1))
                return 0;
        ckey_fill(skops, k);
        if (skops->args[0] & BPF_WRITE_HDR_TCP_SYNACK_COOKIE) {
                /* no request state survives a syncookie SYN-ACK: never advertise */
                bpf_map_delete_elem(&smc_synack, k);
                return 0;
        }
        r = opt_find(skops, BPF_LOAD_HDR_OPT_TCP_SYN);
        if (r == -ENOENT) /* a retransmission: do what the first SYN-ACK did */
                return bpf_map_lookup_elem(&smc_synack, k) != NULL;
        if (r != 1) {
                bpf_map_delete_elem(&smc_synack, k);
                return 0;
        }
        return 1;
}

static long synack_sweep_cb(struct bpf_map *map, struct smc_tcpopt_ckey *k,
                            struct smc_tcpopt_cval *v, __u64 *now) {
        if (*now - v->ts_ns > SMC_TCPOPT_SYNACK_STALE_NS)
                bpf_map_delete_elem(map, k);
        return 0;
}

static void on_hdr_len(struct bpf_sock_ops *skops) {
        struct smc_tcpopt_ckey k;
        struct smc_tcpopt_sk *st;
        __u32 fl = skops->skb_tcp_flags;

        if (!skops->is_fullsock) {
                if ((fl & (TCPHDR_SYN | TCPHDR_ACK)) == (TCPHDR_SYN | TCPHDR_ACK) &&
                    synack_echo(skops, &k))
                        bpf_reserve_hdr_opt(skops, SMC_TCPOPT_LEN, 0);
                return;
        }
        if ((fl & (TCPHDR_SYN | TCPHDR_ACK)) != TCPHDR_SYN)
                return;
        st = marks_get(skops);
        if (st && (st->flags & SMC_TCPOPT_F_MARKED))
                bpf_reserve_hdr_opt(skops, SMC_TCPOPT_LEN, 0);
}

static void on_hdr_write(struct bpf_sock_ops *skops) {
        struct smc_tcpopt_cval v;
        struct smc_tcpopt_ckey k;
        struct smc_tcpopt_sk *st;
        __u32 fl = skops->skb_tcp_flags;
        __u64 now;

        if (!skops->is_fullsock) {
                if ((fl & (TCPHDR_SYN | TCPHDR_ACK)) != (TCPHDR_SYN | TCPHDR_ACK) ||
                    !synack_echo(skops, &k))
                        return;
                /* record first: an echo the child could not find would leave the peer
                 * speaking CLC to a socket that thinks it is plain TCP */
                now = bpf_ktime_get_ns();
                v.ts_ns = now;
                if (bpf_map_update_elem(&smc_synack, &k, &v, BPF_ANY) != 0) {
                        bpf_for_each_map_elem(&smc_synack, synack_sweep_cb, &now, 0);
                        if (bpf_map_update_elem(&smc_synack, &k, &v, BPF_ANY) != 0)
                                return;
                }
                if (opt_store(skops) != 0)
                        bpf_map_delete_elem(&smc_synack, &k);
                return;
        }
        if ((fl & (TCPHDR_SYN | TCPHDR_ACK)) != TCPHDR_SYN)
                return;
        st = marks_get(skops);
        if (st && (st->flags & SMC_TCPOPT_F_MARKED) && opt_store(skops) == 0)
                st->flags |= SMC_TCPOPT_F_SENT;
}

static void on_active_established(struct bpf_sock_ops *skops) {
        struct smc_tcpopt_sk *st = marks_get(skops);
        __u32 cur;

        if (!st || !(st->flags & SMC_TCPOPT_F_MARKED))
                return;
        if ((st->flags & SMC_TCPOPT_F_SENT) && opt_find(skops, 0) == 1)
                st->flags |= SMC_TCPOPT_F_PEER;
        st->flags |= SMC_TCPOPT_F_DONE;
        cur = skops->bpf_sock_ops_cb_flags;
        if (cur & st->cb_added)
                bpf_sock_ops_cb_flags_set(skops, cur & ~st->cb_added);
        st->cb_added = 0;
}

static void on_passive_established(struct bpf_sock_ops *skops) {
        struct smc_tcpopt_sk *st = marks_get(skops);
        struct smc_tcpopt_lval *fv;
        struct smc_tcpopt_ckey k;
        __u32 cur, flags;

        if (st) {
                /* the child's copy of its listener's value */
                ckey_fill(skops, &k);
                flags = (st->flags & SMC_TCPOPT_F_MARKED) | SMC_TCPOPT_F_DONE;
                if (bpf_map_lookup_elem(&smc_synack, &k)) {
                        flags |= SMC_TCPOPT_F_SENT | SMC_TCPOPT_F_PEER;
                        bpf_map_delete_elem(&smc_synack, &k);
                }
                st->flags = flags;
                st->cb_added = 0;
        }
        cur = skops->bpf_sock_ops_cb_flags;
        if (!(cur & CB_LISTENER))
                return;
        fv = lkey_find(&smc_flagged, skops, 0);
        if (fv && (cur & fv->ours))
                bpf_sock_ops_cb_flags_set(skops, cur & ~fv->ours);
}

SEC("sockops")
int smc_tcpopt(struct bpf_sock_ops *skops) {
        switch (skops->op) {
        case BPF_SOCK_OPS_TCP_LISTEN_CB:
                on_listen(skops);
                break;
        case BPF_SOCK_OPS_STATE_CB:
                on_state(skops);
                break;
        case BPF_SOCK_OPS_TCP_CONNECT_CB:
                on_connect(skops);
                break;
        case BPF_SOCK_OPS_HDR_OPT_LEN_CB:
                on_hdr_len(skops);
                break;
        case BPF_SOCK_OPS_WRITE_HDR_OPT_CB:
                on_hdr_write(skops);
                break;
        case BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB:
                on_active_established(skops);
                break;
        case BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB:
                on_passive_established(skops);
                break;
        }
        return 1; /* 0 would make the kernel treat the callback as failed */
}
