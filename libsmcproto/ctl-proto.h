/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * smcd control protocol: between libsmcproto (client) and smcd.
 *
 * Transport: AF_UNIX SOCK_SEQPACKET at "$SMCD_RUNTIME_DIR/smcd.sock"
 * (default /run/smcd/smcd.sock). One datagram = one message. Integers are in host
 * byte order (both ends are on the same host). File descriptors travel by
 * SCM_RIGHTS in the same datagram as the message that announces them.
 *
 * Every message starts with the fixed 16-byte header struct smc_ctl_hdr:
 *   magic   SMC_CTL_MAGIC
 *   version the protocol version of the connection (see Versions); a message of
 *           a version nobody speaks is rejected (-EPROTONOSUPPORT), and smcd
 *           answers a HELLO it cannot serve with ERROR -EPROTONOSUPPORT
 *   type    enum smc_ctl_type
 *   len     total length of the datagram in bytes, header included; it must equal
 *           the fixed size of that type in that version (smc_ctl_msg_size_v())
 *   seq     chosen by the requester, echoed in the reply (replies to
 *           fire-and-forget requests can thus be told apart and discarded)
 *
 * Versions (SMC_CTL_VERSION_MIN .. SMC_CTL_VERSION; both ends speak all of them):
 *   1  the original protocol.
 *   2  LISTEN carries the application's SO_SNDBUF and SO_RCVBUF (like CONNECT);
 *      CONNECT_REPLY and NEW_CONN carry struct smc_ctl_conn_params (smcd's
 *      busy_poll and autocork_size tunables, per connection); the FALLBACK notice
 *      (a type that version 1 does not have: rejected there as unknown).
 *   3  SMC-R (peers on other hosts): CONNECT carries the client's TCP socket (1 fd);
 *      CONNECT_REPLY may say SMC_CTL_MODE_SMCR_PENDING ("connect it over TCP, then
 *      send SMCR") or SMC_CTL_MODE_SMCR (the connection is set up); the SMCR
 *      request; LISTEN_REPLY carries flags (SMC_CTL_LISTEN_SMCR).
 *   4  no new layout: a listener of version 4 marks every SMC-D connection its
 *      accept() takes (SMC_DMB_READER_ACCEPTED in the server's DMB header), so that
 *      smcd resets one whose server side ends without it (queued on the accept
 *      channel when the listener's last copy went, or lost to a receiver out of
 *      descriptors), as TCP resets connections queued on a closed listener.
 *   5  a listening socket passed to another process over a unix socket (SCM_RIGHTS)
 *      keeps one accept queue, as TCP's: the sender deposits the listener's accept
 *      channel with smcd (LISTEN_DEPOSIT), and the receiver's LISTEN (flags
 *      SMC_CTL_LISTEN_F_JOIN; the field was reserved, 0) gets that channel
 *      (LISTEN_REPLY flag SMC_CTL_LISTEN_JOINED) instead of a new registration.
 *   6  a listener survives an smcd restart in every process that holds it: each
 *      LISTEN_REPLY that is not SMC_CTL_LISTEN_REVIVED carries 2 fds, the channel's
 *      client end C and a copy of smcd's end D, which the library keeps (never read
 *      or written) so that C does not hang up when smcd goes; a later smcd gets both
 *      back in a LISTEN with SMC_CTL_LISTEN_F_REVIVE (3 fds) and sends on the same
 *      channel, which every holder (fork, dup, SCM_RIGHTS) already watches. Every
 *      NEW_CONN carries the sending smcd's instance in hdr.seq (0 before), so a
 *      connection queued by an earlier smcd is still told apart.
 *   HELLO has the same layout in every version. A client sends it with
 *   hdr.version = SMC_CTL_VERSION_MIN and the range it speaks in proto_min ..
 *   proto_max; smcd picks the highest version both speak and answers HELLO_REPLY
 *   with it in the body (version) and in hdr.version. From then on every message
 *   on that control connection, both ways, and every NEW_CONN on the accept
 *   channel of a listener it registered, has the chosen version in hdr.version and
 *   that version's layout; smcd answers a request of another version with ERROR
 *   -EPROTONOSUPPORT. Messages smcd sends before (or instead of) a HELLO_REPLY are
 *   of version SMC_CTL_VERSION_MIN. So a version-1 client keeps working with this
 *   smcd, and this library with a version-1 smcd. Fields marked "(v2)" are absent
 *   from a version-1 message (shorter len); smc_ctl_recv() zeroes them.
 *
 * Messages (C = client, D = smcd, L = listener channel; size = total bytes):
 *
 *   HELLO        C->D  first message on a connection. Body: proto_min, proto_max,
 *                      flags (0). No fds. Reply HELLO_REPLY or ERROR.
 *   HELLO_REPLY  D->C  version chosen, client id. No fds.
 *   LISTEN       C->D  addr (the address the TCP socket is bound to), backlog,
 *                      (v2) sndbuf, rcvbuf: the application's SO_SNDBUF / SO_RCVBUF
 *                      on the listening socket (bytes, 0 = not set).
 *                      1 fd: the client's listening TCP socket; smcd checks that it
 *                      is a listening TCP socket bound to exactly addr (so no client
 *                      can claim a port it does not own) and closes its copy.
 *                      Reply LISTEN_REPLY + 1 fd (the client end of the listener's
 *                      accept channel, an AF_UNIX SOCK_SEQPACKET socket), or ERROR.
 *                      (v3) LISTEN_REPLY.flags has SMC_CTL_LISTEN_SMCR when smcd
 *                      marked the listening socket for the SMC TCP option (SMC-R is
 *                      possible): the client then sends SMCR (role server) for every
 *                      TCP connection it accepts from it, instead of a FALLBACK.
 *                      (v5) flags SMC_CTL_LISTEN_F_JOIN (else 0): the socket arrived
 *                      from another process. If a LISTEN_DEPOSIT of this socket (the
 *                      same kernel socket: fstat's st_dev and st_ino) by a client of
 *                      the same uid is waiting, smcd answers with the deposited
 *                      channel, the registered listener's id and SMC_CTL_LISTEN_JOINED
 *                      set in LISTEN_REPLY.flags (the deposit is used up): the client
 *                      is one more holder of that listener, as a forked process is,
 *                      and never sends UNLISTEN for it. Without one: a new
 *                      registration, as without the flag, and smcd keeps a copy
 *                      of its channel as a deposit of its own for
 *                      SMC_CTL_DEPOSIT_USEC, which every LISTEN with the flag of
 *                      that socket meanwhile joins (processes that each received
 *                      the same unconnected socket and listen on it).
 *                      (v6) LISTEN_REPLY carries 2 fds: C, then a copy of smcd's
 *                      end D of the channel (the library holds it, unused, so that
 *                      the channel outlives smcd). With flags
 *                      SMC_CTL_LISTEN_F_REVIVE, 3 fds: the TCP socket, C and D of a
 *                      listener an earlier smcd registered. smcd checks the socket
 *                      as above and that C and D are AF_UNIX SOCK_SEQPACKET sockets;
 *                      if a listener already sends on a channel whose client end is
 *                      C (another holder revived it; of any uid: holding both ends
 *                      is the proof), the reply names it (-EINVAL if that one is of
 *                      another socket); else D becomes the channel of a new
 *                      registration, once smcd has checked that C and D are the
 *                      client and daemon ends of one channel: D nonblocking (as
 *                      every smcd makes its end; the library never changes either
 *                      end's flags) and C not, neither an end of a live listener,
 *                      and the kernel names C as D's peer (sock_diag; nothing is
 *                      sent to either) (-EINVAL otherwise: smcd never holds both
 *                      ends of one channel). Whatever is sent on a client end
 *                      (no library does) is dropped at smcd's end, descriptors too.
 *                      Reply LISTEN_REPLY with SMC_CTL_LISTEN_REVIVED and no fds
 *                      (smcd closes its copies of C and D but the one it keeps),
 *                      or ERROR.
 *   LISTEN_DEPOSIT C->D (v5) listener id, flags (SMC_CTL_DEPOSIT_NONBLOCK: the
 *                      sender's program has O_NONBLOCK on it; the receiver gets it
 *                      back in LISTEN_REPLY: SMC_CTL_LISTEN_NB_KNOWN and
 *                      SMC_CTL_LISTEN_NONBLOCK), reserved 0.
 *                      2 fds: the client end of that listener's
 *                      accept channel and its listening TCP socket, about to be sent
 *                      to another process over a unix socket. smcd checks that the
 *                      listener is of the client's uid, that the first fd is its
 *                      channel (the inode recorded at LISTEN) and the second its
 *                      socket, keeps the channel for one LISTEN with
 *                      SMC_CTL_LISTEN_F_JOIN of that socket, at most
 *                      SMC_CTL_DEPOSIT_MAX per listener (a new one replaces the
 *                      oldest) and for SMC_CTL_DEPOSIT_USEC (then closes it: the
 *                      listener ends when its last holder closes it), and closes
 *                      its copy of the socket. Reply OK or ERROR (-ENOENT: no such
 *                      listener of this uid; -EINVAL: not its channel or socket).
 *                      With SMC_CTL_DEPOSIT_WITHDRAW in flags (the sendmsg(2) the
 *                      deposit was made for failed, so no receiver will claim it):
 *                      the same checks and fds, then smcd closes the newest
 *                      deposit of that listener (not one of its own) instead of
 *                      adding one, and closes both fds. Reply OK or ERROR
 *                      (-ENOENT also when no deposit waits). An smcd from before the
 *                      flag answers ERROR -EBADMSG, and the deposit expires.
 *   UNLISTEN     C->D  listener id. No fds. Reply OK or ERROR.
 *   CONNECT      C->D  dst, src (the client's bound address), sndbuf, rcvbuf
 *                      (bytes, 0 = default). No fds; (v3) 1 fd: the client's TCP
 *                      socket, bound, not yet connected. Reply CONNECT_REPLY:
 *                      - (v3) mode SMC_CTL_MODE_SMCR_PENDING: dst is on another host
 *                        and SMC-R is possible; smcd marked the socket so that its
 *                        SYN carries the SMC TCP option. The client connects it over
 *                        TCP and then sends SMCR (role client). No fds, no buffers.
 *                      - mode SMC_CTL_MODE_SMCD: conn id, rx and tx buffer
 *                        descriptors, the listener's local address, (v2) params
 *                        (struct smc_ctl_conn_params); fds, in order:
 *                        X (the connection's own socket end; becomes the app's fd),
 *                        Y (the peer's doorbell end: writing to it wakes the peer),
 *                        then the rx memfd if rx.flags has SMC_CTL_BUF_FD, then the
 *                        tx memfd if tx.flags has SMC_CTL_BUF_FD. A buffer without
 *                        the flag is one this client already has mapped (same id).
 *                      - mode SMC_CTL_MODE_TCP: fallback reason (SMC_CLC_DECL_*),
 *                        no fds, (v2) params all zero. The client then connects
 *                        over plain TCP.
 *   SMCR         C->D  (v3) role (SMC_CTL_ROLE_*), listener id (role server: the
 *                      SMC_CTL_LISTEN_SMCR listener it was accepted from; client: 0),
 *                      sndbuf, rcvbuf (bytes, 0 = default); 1 fd: the connected TCP
 *                      socket. smcd runs the CLC handshake on it (wire spec 2-3) only
 *                      if the peer sent the SMC TCP option; else it answers at once
 *                      CONNECT_REPLY mode TCP with SMC_CLC_DECL_PEERNOSMC, no byte
 *                      written, and the client uses its socket as plain TCP.
 *                      - role client: the reply comes when the handshake ended:
 *                        CONNECT_REPLY mode SMC_CTL_MODE_SMCR: fds X, Y, rx memfd (the
 *                        RMB the peer RDMA-writes into), tx memfd (the send buffer
 *                        smcd RDMA-writes from), always both memfds; or mode TCP with
 *                        the SMC_CLC_DECL_* reason (the socket is then positioned
 *                        after the CLC bytes, at the first application byte); or
 *                        ERROR (-ECONNRESET, -ETIMEDOUT ...: the connection is
 *                        unusable). The client keeps the TCP socket (idle) and closes
 *                        it with the connection.
 *                      - role server: the reply comes at once, CONNECT_REPLY mode
 *                        SMC_CTL_MODE_SMCR_PENDING: smcd keeps (a duplicate of) the
 *                        socket and runs the handshake while the client goes on
 *                        accepting; the client closes its descriptor. The result
 *                        arrives on the listener's accept channel as NEW_CONN: mode
 *                        SMCR (as SMC-D; smcd holds the idle TCP socket for the
 *                        connection's lifetime), or mode TCP with the reason and 1 fd,
 *                        the TCP socket itself (after a DECLINE: at the first
 *                        application byte). A handshake that broke the TCP
 *                        connection delivers nothing (as a connection reset before
 *                        accept()).
 *   NEW_CONN     D->L  sent on a listener's accept channel for each SMC connection
 *                      queued to it (and, v3, for a TCP connection an SMC-R handshake
 *                      ended in a fallback: mode TCP, 1 fd); body and fds as CONNECT_REPLY (peer = the
 *                      connecting client's address, local = the listener's view);
 *                      smcd sets SMC_CTL_BUF_FD on both buffers (any process holding
 *                      the channel may read it; a library must still accept a buffer
 *                      without it, as older smcds sent). (v6) hdr.seq is the
 *                      sending smcd's instance (HELLO_REPLY.instance): a channel
 *                      revived by a later smcd may still hold an earlier one's.
 *   CLOSE        C->D  conn id, flags (SMC_CTL_CLOSE_ABORT). No fds. No reply on
 *                      success (fire and forget); ERROR on a bad id. The library
 *                      sends it for SMC-R endpoints and for SMC-D endpoints that
 *                      the smcd it talks to did not set up (an earlier smcd's, after
 *                      REREG: no Y copy here); an SMC-D endpoint that this smcd set
 *                      up (CONNECT_REPLY, NEW_CONN) is closed by the end of its X
 *                      alone (smcd's copy of Y hangs up; the abort is read from the
 *                      DMB flags), which costs smcd no message.
 *   FALLBACK     C->D  (v2 only) a notice, no reply: a TCP connection of this client
 *                      that is not SMC although smcd was asked, so that smcd can list
 *                      it (smcctl connections). local (getsockname) and peer address
 *                      of the TCP socket, both of one family, specific, port != 0;
 *                      role SMC_CTL_ROLE_CLIENT with the SMC_CLC_DECL_* reason smcd
 *                      (or the library) gave the CONNECT, or SMC_CTL_ROLE_SERVER
 *                      (a plain TCP connection accepted on an SMC listener) with
 *                      reason 0 (smcd knows it). No fds. Sent MSG_DONTWAIT on an
 *                      established control connection only: dropped, never
 *                      waited for, when the socket is full. smcd looks the socket
 *                      up in the kernel (sock_diag) and tracks it while it exists;
 *                      ERROR only for a socket of another uid (-EPERM).
 *   FALLBACK_COUNT C->D (v5; added after LISTEN_DEPOSIT: an older smcd answers
 *                      ERROR -EOPNOTSUPP, which the library never waits for) a
 *                      notice, no reply, no fds: @count TCP connections of this
 *                      client (role CLIENT: connects; SERVER: accepts on an SMC
 *                      listener) that fell back for @reason without a word to smcd:
 *                      only SMCD_DECL_SHORTCONN, a destination the connection hints
 *                      (smc-hints.h) name. smcd counts them (stats "fallback"); it does
 *                      not list them (a FALLBACK each would cost smcd a sock_diag
 *                      lookup per connection, which is what the hint saves). The
 *                      library sends its count at most every 100 ms, and what is
 *                      left when the process exits or execs (smcrun(1)).
 *   ADOPT        C->D  (v3; added after the first v3 smcd, which answers it ERROR
 *                      -EOPNOTSUPP) conn id of an open SMC-D endpoint. No fds. Sent by
 *                      a process image that inherited the endpoint's X over execve()
 *                      (smcrun(1), "exec"): the old image's mappings are gone, so it
 *                      asks for the buffers again. smcd answers a client of the
 *                      endpoint's uid only (others, SMC-R endpoints and closed or
 *                      unknown ids: ERROR -ENOENT, as CLOSE) with ADOPT_REPLY, and
 *                      counts the endpoint as owned by the asking client if its owner
 *                      is gone. X is not sent: the new image has it.
 *   ADOPT_REPLY  D->C  (v3) body as CONNECT_REPLY, mode SMC_CTL_MODE_SMCD: conn id, rx
 *                      and tx buffer descriptors (both with SMC_CTL_BUF_FD), the
 *                      endpoint's local and peer addresses, params (smcd's tunables
 *                      now). 3 fds: the rx memfd, the tx memfd, then Y (a copy of
 *                      smcd's end of the peer's doorbell pair, so that the new image
 *                      needs no inherited copy, which programs that close every
 *                      descriptor before an exec would lose; if the peer has closed
 *                      already, an end of a pair whose other end is closed).
 *   REREG        C->D  (v3; added after ADOPT: an smcd without it answers ERROR
 *                      -EOPNOTSUPP) an SMC-D endpoint this process set up with an
 *                      earlier smcd: the one whose HELLO_REPLY.instance it recorded,
 *                      when this control connection's instance differs (smcd was
 *                      restarted). Sent once per endpoint, on the first request after
 *                      the reconnect, or sooner when a send or receive that waits
 *                      finds another instance in the runtime directory's "instance"
 *                      file (SMC_CTL_INSTANCE_NAME), so that the new smcd lists and
 *                      counts the connections that outlived the old one. Body: the old id, role,
 *                      the ring sizes of both DMBs, the DMB tokens read from both DMB
 *                      headers (random 64-bit values the old smcd wrote there at
 *                      set-up; only the two processes that map a DMB can read it, so
 *                      the new smcd joins the two endpoints of one connection when
 *                      their tokens match crosswise, and no process can claim another's
 *                      endpoint), the endpoint's local and peer addresses. No fds: the
 *                      new smcd holds nothing of the connection (it does not have its
 *                      buffers), so the connection's life does not depend on it
 *                      (smcd(8), RESTARTS). Also sent, followed by a CLOSE of the
 *                      id it gets, for an endpoint the process closed while no smcd
 *                      answered. An endpoint the new smcd restored from its endpoint
 *                      table (smcd/eptable.h) is confirmed: the id it has. Reply
 *                      REREG_REPLY (the new id; the same id
 *                      again for a second REREG of the same endpoint, same tokens, role,
 *                      sizes and uid, as from a forked copy), or ERROR (-EMFILE: the
 *                      uid's endpoint limit; -EPROTO: the instance is this smcd's own;
 *                      -EEXIST: another endpoint has this rx_token, or the table's
 *                      endpoint of this rx_token has other tokens, role, sizes or uid).
 *   REREG_REPLY  D->C  (v3) the endpoint's new id. No fds.
 *   REREG_DONE   C->D  (v3, added after REREG; no reply, an smcd without it answers
 *                      ERROR -EOPNOTSUPP) this process is done re-registering with
 *                      this smcd (instance): flags SMC_CTL_REREG_DONE_ALL (every SMC-D
 *                      endpoint it holds from an earlier smcd was re-registered, every
 *                      close it kept told) and _SERVERS (its SMC listeners were never
 *                      shared). smcd then ends the endpoints it restored from its
 *                      endpoint table under this process (its pid and start time) and
 *                      that the process did not re-register: they were closed while no
 *                      smcd heard it (a CLOSE unread when the old smcd died): client
 *                      ends with _ALL, server ends with both. Sent once per smcd
 *                      instance, by a process that had SMC-D connections of another.
 *                      Errors (ERROR, discarded by the library): -EBADMSG (instance 0,
 *                      unknown flags), -EPROTO (another instance). No fds.
 *   ADOPT_FD     C->D  (v3; added after REREG_DONE: an smcd without it answers ERROR
 *                      -EOPNOTSUPP) reserved 0. 1 fd: an AF_UNIX stream socket this
 *                      process received from another over a unix socket (SCM_RIGHTS;
 *                      smcrun(1), "Passing connections"). smcd looks for the SMC-D
 *                      endpoint whose X it is (the socket's inode, recorded when smcd
 *                      made the doorbell pair) and answers as ADOPT: ADOPT_REPLY with the
 *                      endpoint's buffers and Y (3 fds), counted as owned by the
 *                      asking client if its owner is gone. Holding X is the proof
 *                      (it is never handed out otherwise); the endpoint's uid must
 *                      still be the client's. Others (not an X smcd made, a closed
 *                      endpoint, SMC-R, restored after an smcd restart, another
 *                      uid): ERROR -ENOENT. smcd closes its copy of the fd.
 *   REQUEUE      C->D  (v6; added after FALLBACK_COUNT: an smcd without it answers
 *                      ERROR -EOPNOTSUPP) listener id, conn id; 2 fds: X and Y of a
 *                      NEW_CONN of mode SMCD or SMCR (this smcd's instance in
 *                      hdr.seq) that the client received from the accept channel of
 *                      that listener after its UNLISTEN, i.e. queued but never
 *                      accepted. As the
 *                      kernel migrates a closed SO_REUSEPORT listener's queued
 *                      connections to another member of its group
 *                      (net.ipv4.tcp_migrate_req), smcd queues the connection to
 *                      another live listener of the same address, port, network
 *                      namespace, uid and bound device (in turn, preferring one whose
 *                      queue has room and moves; else, as the kernel, beyond its
 *                      backlog; for SMC-R one of version >= 3 with an owner; smcd(8),
 *                      "SO_REUSEPORT hand-over"): a NEW_CONN on that one's channel
 *                      with this X, Y and both memfds, and the endpoint's owner
 *                      becomes that listener's. smcd checks that the listener is of
 *                      the client's uid and was given up with connections queued (UNLISTEN
 *                      keeps it, out of its port, until its channel hangs up), that
 *                      the connection is an open one queued to it (SMC-D: not
 *                      accepted, SMC_DMB_READER_ACCEPTED) and that the fds are its
 *                      ends (the inodes recorded when smcd made the pairs: holding
 *                      them is the proof, as for ADOPT_FD; SMC-D: X only, smcd sends
 *                      its own copy of Y).
 *                      Reply OK (the client closes its copies: the connection is the
 *                      other listener's), or ERROR: -ENOENT (no such listener or
 *                      connection, or no other listener to take it), -EINVAL (not
 *                      its X and Y, or accepted), -errno of the send on the other
 *                      listener's channel (one that cannot take it even with its
 *                      send buffer enlarged); the client then resets the connection,
 *                      as before REQUEUE (and as TCP with net.ipv4.tcp_migrate_req=0).
 *                      smcd closes its copies of the fds.
 *   OK           D->C  generic success.
 *   ERROR        D->C  error (negative errno), SMC_CLC_DECL_* detail or 0, and a
 *                      NUL-terminated message text.
 *
 * Decoding is strict (smc_ctl_decode()): magic, version, type, exact length for the
 * version, field values and the exact number of fds for the type and direction are
 * checked; any mismatch is rejected with an error and the received fds are closed.
 * Whether the version is the one negotiated for the connection is for the receiver
 * to check (smcd and ctl-client.c do).
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define SMC_CTL_MAGIC 0x64434d53u /* "SMCd" little endian */
#define SMC_CTL_VERSION_MIN 1 /* the oldest version spoken */
#define SMC_CTL_VERSION 6     /* the newest version spoken; smc_ctl_init() builds it */
#define SMC_CTL_SOCKET_NAME "smcd.sock"
#define SMC_CTL_INSTANCE_NAME "instance" /* beside the socket: smcd's HELLO_REPLY.instance
                                          * (4 bytes, host order, offset 0), rewritten in
                                          * place at every start (REREG) */
/* In the same file, from byte SMC_CTL_INSTANCE_PIDS_OFF: the process ids of the last
 * SMC_CTL_INSTANCE_PIDS smcd processes that served this runtime directory (int32, host
 * order, oldest first, 0 = none), the running one last, written in place at every
 * start. A library that inherits an earlier smcd's socketpair (an accept channel
 * across exec, SMCRUN_INHERIT) tells it from one any other process made by its
 * creator (SO_PEERCRED) being one of them. */
#define SMC_CTL_INSTANCE_PIDS_OFF 8
#define SMC_CTL_INSTANCE_PIDS 16
#define SMC_CTL_RUNDIR_ENV "SMCD_RUNTIME_DIR"
#define SMC_CTL_MAX_MSG 256 /* bytes: no message is larger */
#define SMC_CTL_MAX_FDS 4
#define SMC_CTL_ERRMSG_LEN 96

enum smc_ctl_type {
        SMC_CTL_HELLO = 1,
        SMC_CTL_HELLO_REPLY,
        SMC_CTL_LISTEN,
        SMC_CTL_LISTEN_REPLY,
        SMC_CTL_UNLISTEN,
        SMC_CTL_CONNECT,
        SMC_CTL_CONNECT_REPLY,
        SMC_CTL_NEW_CONN,
        SMC_CTL_CLOSE,
        SMC_CTL_OK,
        SMC_CTL_ERROR,
        SMC_CTL_FALLBACK, /* v2 */
        SMC_CTL_SMCR,     /* v3 */
        SMC_CTL_ADOPT,       /* v3 (added later: an older smcd answers ERROR -EOPNOTSUPP) */
        SMC_CTL_ADOPT_REPLY, /* v3 */
        SMC_CTL_REREG,       /* v3 (added later: an older smcd answers ERROR -EOPNOTSUPP) */
        SMC_CTL_REREG_REPLY, /* v3 */
        SMC_CTL_REREG_DONE,  /* v3 (added later: an older smcd answers ERROR -EOPNOTSUPP) */
        SMC_CTL_ADOPT_FD,    /* v3 (added later: an older smcd answers ERROR -EOPNOTSUPP) */
        SMC_CTL_LISTEN_DEPOSIT, /* v5 */
        SMC_CTL_FALLBACK_COUNT, /* v5 (added later: an older smcd answers ERROR -EOPNOTSUPP) */
        SMC_CTL_REQUEUE,        /* v6 (added later: an older smcd answers ERROR -EOPNOTSUPP) */
        _SMC_CTL_TYPE_MAX,
};

enum smc_ctl_mode {
        SMC_CTL_MODE_TCP = 0,  /* TCP fallback */
        SMC_CTL_MODE_SMCD = 1, /* SMC-D over loopback ISM */
        SMC_CTL_MODE_SMCR_PENDING = 2, /* (v3) CONNECT_REPLY only: connect over TCP, then SMCR */
        SMC_CTL_MODE_SMCR = 3, /* (v3) SMC-R over RoCE: the same fds as SMC-D */
};

struct smc_ctl_hdr {
        uint32_t magic;
        uint16_t version;
        uint16_t type;
        uint32_t len;
        uint32_t seq;
};

/* An IPv4 or IPv6 socket address. family is AF_INET or AF_INET6; port in host byte
 * order; addr holds 4 (AF_INET) or 16 bytes, the rest zero. */
struct smc_ctl_addr {
        uint16_t family;
        uint16_t port;
        uint32_t scope_id;
        uint8_t addr[16];
};

#define SMC_CTL_BUF_FD 0x1u /* the memfd of this buffer follows in the fds */

/* A DMB: memfd of SMC_DMB_HDR_LEN + size bytes (see dmb.h). */
struct smc_ctl_buf {
        uint64_t id;   /* smcd-wide buffer id, never reused for another memfd */
        uint32_t size; /* ring size in bytes: 16 KiB << class */
        uint32_t flags;
};

struct smc_ctl_hello {
        struct smc_ctl_hdr hdr;
        uint32_t proto_min;
        uint32_t proto_max;
        uint32_t flags;
        uint32_t reserved;
};

struct smc_ctl_hello_reply {
        struct smc_ctl_hdr hdr;
        uint32_t version;
        uint32_t instance; /* random, not 0, drawn at smcd's start: another value than
                            * before means another smcd (a restart). 0 from an smcd
                            * older than REREG (this was a reserved field). */
        uint64_t client_id;
};

struct smc_ctl_listen {
        struct smc_ctl_hdr hdr;
        struct smc_ctl_addr addr;
        uint32_t backlog;
        uint32_t flags; /* (v5) SMC_CTL_LISTEN_F_JOIN; 0 before (it was reserved), and
                         * smc_ctl_set_version() clears it for an older version */
        /* v2 */
        uint32_t sndbuf; /* the app's SO_SNDBUF in bytes, 0 = not set */
        uint32_t rcvbuf; /* the app's SO_RCVBUF in bytes, 0 = not set */
};

#define SMC_CTL_LISTEN_SMCR 0x1u /* (v3) send SMCR for each accepted TCP connection */
#define SMC_CTL_LISTEN_JOINED 0x2u /* (v5) LISTEN_REPLY: a deposited channel, not a new
                                    * registration (the client never sends UNLISTEN) */
#define SMC_CTL_LISTEN_F_JOIN 0x1u /* (v5) LISTEN: take a deposited channel if one waits */
/* (v6) LISTEN: register the listener again with this (restarted) smcd over the
 * channel it already has; 3 fds: the TCP socket T, the channel's client end C and
 * the copy of the daemon's end D that a v6 LISTEN_REPLY gave. Not with F_JOIN. */
#define SMC_CTL_LISTEN_F_REVIVE 0x2u
/* (v6) LISTEN_REPLY to an F_REVIVE: no fds (the client keeps its C and D);
 * listener_id is the registration of that channel (a new one, or the one another
 * holder of the same channel revived before) */
#define SMC_CTL_LISTEN_REVIVED 0x10u
#define SMC_CTL_LISTEN_NB_KNOWN 0x4u /* (v5) LISTEN_REPLY, JOINED: the depositor's program's
                                      * O_NONBLOCK is in SMC_CTL_LISTEN_NONBLOCK */
#define SMC_CTL_LISTEN_NONBLOCK 0x8u

/* LISTEN_DEPOSIT (v5): at most this many deposits wait per listener, each at most
 * this long (microseconds): the time between a sendmsg(2) and the receiver's
 * recvmsg(2) of a listening socket (a few ms for multiprocessing's resource sharer). */
#define SMC_CTL_DEPOSIT_MAX 16
#define SMC_CTL_DEPOSIT_USEC (3u * 1000000u)

#define SMC_CTL_DEPOSIT_NONBLOCK 0x1u /* LISTEN_DEPOSIT.flags: the sender's program has
                                       * O_NONBLOCK on the listener */
#define SMC_CTL_DEPOSIT_WITHDRAW 0x2u /* LISTEN_DEPOSIT.flags: take back the newest
                                       * deposit instead of making one */

struct smc_ctl_listen_deposit {
        struct smc_ctl_hdr hdr;
        uint64_t listener_id;
        uint32_t flags;    /* SMC_CTL_DEPOSIT_* */
        uint32_t reserved; /* 0 */
};

struct smc_ctl_listen_reply {
        struct smc_ctl_hdr hdr;
        uint64_t listener_id;
        /* v3 */
        uint32_t flags; /* SMC_CTL_LISTEN_* */
        uint32_t reserved;
};

struct smc_ctl_unlisten {
        struct smc_ctl_hdr hdr;
        uint64_t listener_id;
};

struct smc_ctl_connect {
        struct smc_ctl_hdr hdr;
        struct smc_ctl_addr dst;
        struct smc_ctl_addr src;
        uint32_t sndbuf; /* bytes, 0 = default */
        uint32_t rcvbuf; /* bytes, 0 = default */
};

#define SMC_CTL_BUSY_POLL_MAX_US 10000u    /* microseconds */
#define SMC_CTL_AUTOCORK_MAX (1u << 20)    /* bytes */

/* Per-connection settings smcd hands to both endpoints (v2): its tunables at the
 * time the connection was set up. The client's environment may override them
 * (libsmcproto(3)). All zero in a TCP-mode CONNECT_REPLY. */
struct smc_ctl_conn_params {
        uint32_t busy_poll_us;  /* 0..SMC_CTL_BUSY_POLL_MAX_US: a blocking send/recv
                                 * spins this long on the ring before it sleeps */
        uint32_t autocork_size; /* bytes, 0..SMC_CTL_AUTOCORK_MAX: a corked batch is
                                 * published once it is this large (the library caps
                                 * it at half the tx ring); 0 = the library's default */
};

/* CONNECT_REPLY and NEW_CONN share this body. */
struct smc_ctl_conn {
        struct smc_ctl_hdr hdr;
        uint64_t conn_id;
        uint32_t mode;            /* enum smc_ctl_mode */
        uint32_t fallback_reason; /* SMC_CLC_DECL_* when mode is TCP, else 0 */
        struct smc_ctl_buf rx;    /* our DMB: the peer writes, we read */
        struct smc_ctl_buf tx;    /* the peer's DMB: we write, the peer reads */
        struct smc_ctl_addr local;
        struct smc_ctl_addr peer;
        /* v2 */
        struct smc_ctl_conn_params params;
};

#define SMC_CTL_CLOSE_ABORT 0x1u

struct smc_ctl_close {
        struct smc_ctl_hdr hdr;
        uint64_t conn_id;
        uint32_t flags;
        uint32_t reserved;
};

enum smc_ctl_role {
        SMC_CTL_ROLE_CLIENT = 0, /* the connecting side */
        SMC_CTL_ROLE_SERVER = 1, /* accepted by a listener */
};

/* FALLBACK (v2): one TCP connection that fell back (see Messages). */
struct smc_ctl_fallback {
        struct smc_ctl_hdr hdr;
        struct smc_ctl_addr local; /* the TCP socket's own address */
        struct smc_ctl_addr peer;  /* the address it is connected to */
        uint32_t role;             /* enum smc_ctl_role */
        uint32_t reason;           /* client: SMC_CLC_DECL_* (not 0); server: 0 */
};

/* FALLBACK_COUNT (v5, added later): TCP connections the library let fall back
 * without asking smcd (see Messages). 24 bytes. */
#define SMC_CTL_FALLBACK_COUNT_MAX 1000000u /* connections in one notice, at most */
struct smc_ctl_fallback_count {
        struct smc_ctl_hdr hdr;
        uint32_t reason; /* SMCD_DECL_SHORTCONN (the only one) */
        uint32_t role;   /* enum smc_ctl_role: client connects or server accepts */
        uint32_t count;  /* 1 .. SMC_CTL_FALLBACK_COUNT_MAX */
        uint32_t reserved;
};

/* SMCR (v3): run the SMC-R handshake on the connected TCP socket passed with it. */
struct smc_ctl_smcr {
        struct smc_ctl_hdr hdr;
        uint32_t role;   /* enum smc_ctl_role */
        uint32_t reserved;
        uint32_t sndbuf; /* bytes, 0 = default */
        uint32_t rcvbuf; /* bytes, 0 = default */
        uint64_t listener_id; /* role server: the listener; role client: 0 */
};

/* ADOPT (v3): take over SMC-D endpoint conn_id after an execve() (see Messages). The
 * reply, ADOPT_REPLY, is a struct smc_ctl_conn. */
struct smc_ctl_adopt {
        struct smc_ctl_hdr hdr;
        uint64_t conn_id;
};

/* ADOPT_FD (v3): take over the SMC-D endpoint whose X is the one fd sent along, as
 * received over a unix socket (SCM_RIGHTS; see Messages). The reply is ADOPT_REPLY. */
struct smc_ctl_adopt_fd {
        struct smc_ctl_hdr hdr;
        uint64_t reserved; /* 0 */
};

/* REQUEUE (v6): move SMC connection conn_id, queued on the accept channel of
 * listener_id (given up by UNLISTEN), to another listener of its address; 2 fds, its
 * X and Y (see Messages). */
struct smc_ctl_requeue {
        struct smc_ctl_hdr hdr;
        uint64_t listener_id;
        uint64_t conn_id;
};

/* REREG (v3): an SMC-D endpoint set up by an earlier smcd (see Messages). */
struct smc_ctl_rereg {
        struct smc_ctl_hdr hdr;
        uint64_t conn_id;   /* the id the earlier smcd gave the endpoint (logs only) */
        uint64_t rx_token;  /* DMB token in our rx DMB's header (dmb.h), not 0 */
        uint64_t tx_token;  /* ... and in the peer's DMB, which we write (not 0, and
                             * not rx_token) */
        uint32_t role;      /* enum smc_ctl_role */
        uint32_t instance;  /* the earlier smcd's HELLO_REPLY.instance, not 0 */
        uint32_t rx_size;   /* ring bytes of our DMB (16 KiB .. 1 MiB, a power of two) */
        uint32_t tx_size;   /* ring bytes of the peer's DMB */
        struct smc_ctl_addr local; /* the endpoint's address and its peer's: one family, */
        struct smc_ctl_addr peer;  /* ports not 0 */
};

/* REREG_REPLY (v3): the endpoint's id with this smcd (CLOSE takes it from now on). */
struct smc_ctl_rereg_reply {
        struct smc_ctl_hdr hdr;
        uint64_t conn_id;
};

/* REREG_DONE (v3, no reply): this process re-registered (REREG) every SMC-D endpoint
 * it holds that an earlier smcd set up, and told every close it kept. */
#define SMC_CTL_REREG_DONE_ALL 0x1u     /* none left out: none inherited over exec, none
                                         * of another uid, none shared with a process
                                         * that set it up */
#define SMC_CTL_REREG_DONE_SERVERS 0x2u /* none of its SMC listeners was ever shared
                                         * with another process (fork, exec): every
                                         * server endpoint set up through them is its */
struct smc_ctl_rereg_done {
        struct smc_ctl_hdr hdr;
        uint32_t instance; /* this smcd's HELLO_REPLY.instance, not 0 */
        uint32_t flags;    /* SMC_CTL_REREG_DONE_* */
};

struct smc_ctl_ok {
        struct smc_ctl_hdr hdr;
};

struct smc_ctl_error {
        struct smc_ctl_hdr hdr;
        int32_t error;   /* negative errno */
        uint32_t detail; /* SMC_CLC_DECL_* or 0 */
        char msg[SMC_CTL_ERRMSG_LEN];
};

union smc_ctl_msg {
        struct smc_ctl_hdr hdr;
        struct smc_ctl_hello hello;
        struct smc_ctl_hello_reply hello_reply;
        struct smc_ctl_listen listen;
        struct smc_ctl_listen_reply listen_reply;
        struct smc_ctl_unlisten unlisten;
        struct smc_ctl_listen_deposit listen_deposit;
        struct smc_ctl_connect connect;
        struct smc_ctl_conn conn;
        struct smc_ctl_close close;
        struct smc_ctl_fallback fallback;
        struct smc_ctl_fallback_count fallback_count;
        struct smc_ctl_smcr smcr;
        struct smc_ctl_adopt adopt;
        struct smc_ctl_adopt_fd adopt_fd;
        struct smc_ctl_rereg rereg;
        struct smc_ctl_rereg_reply rereg_reply;
        struct smc_ctl_rereg_done rereg_done;
        struct smc_ctl_requeue requeue;
        struct smc_ctl_ok ok;
        struct smc_ctl_error error;
        uint8_t raw[SMC_CTL_MAX_MSG];
};

/* Which side sends a message: decoding checks the direction too. */
enum smc_ctl_dir {
        SMC_CTL_TO_DAEMON,
        SMC_CTL_TO_CLIENT,
};

/* Fixed total size in bytes of a message of @type in SMC_CTL_VERSION, or 0 for an
 * unknown type. */
size_t smc_ctl_msg_size(uint16_t type);

/* Fixed total size in bytes of a message of @type in protocol @version, or 0 for an
 * unknown type or a version outside SMC_CTL_VERSION_MIN..SMC_CTL_VERSION. */
size_t smc_ctl_msg_size_v(uint16_t type, uint16_t version);

/* Number of fds a message carries, given its decoded body (CONNECT_REPLY/NEW_CONN
 * depend on mode and buffer flags). Returns -EINVAL if the body is inconsistent. */
int smc_ctl_msg_nfds(const union smc_ctl_msg *m);

/* Zero @m and fill in the header for @type with @seq (magic, version
 * SMC_CTL_VERSION, len). */
void smc_ctl_init(union smc_ctl_msg *m, uint16_t type, uint32_t seq);

/* The same for protocol @version (SMC_CTL_VERSION_MIN..SMC_CTL_VERSION). Returns 0,
 * or -EINVAL (unknown type or version; @m is then initialized as smc_ctl_init()
 * does). */
int smc_ctl_init_v(union smc_ctl_msg *m, uint16_t type, uint32_t seq, uint16_t version);

/* Re-stamp the built message @m for protocol @version: hdr.version and hdr.len
 * change; fields the version does not have are left out when it is sent (and zeroed
 * here), fields it gains are zero. The body must be valid for @version (e.g. no v2
 * field a v1 peer would need). Returns 0, or -EINVAL (unknown type or version; @m
 * unchanged). */
int smc_ctl_set_version(union smc_ctl_msg *m, uint16_t version);

/* Strictly validate @len bytes received in @m together with @nfds fds, as sent in
 * direction @dir. @truncated is true when the datagram or its control data was cut
 * (MSG_TRUNC / MSG_CTRUNC). Returns 0, or a negative errno:
 *   -EBADMSG      bad magic, short, oversized or truncated message, wrong length,
 *                 bad address family or field value
 *   -EPROTONOSUPPORT  version outside SMC_CTL_VERSION_MIN..SMC_CTL_VERSION
 *   -EOPNOTSUPP   unknown type, or a type not sent in this direction
 *   -EBADF        wrong number of fds for the type
 * Never touches the fds: the caller closes them on error. */
int smc_ctl_decode(const union smc_ctl_msg *m, size_t len, size_t nfds, bool truncated,
                   enum smc_ctl_dir dir);

/* Send @m (its hdr.len bytes) with @nfds fds over @sock (MSG_NOSIGNAL; @flags adds
 * e.g. MSG_DONTWAIT). Returns 0 or a negative errno (-EAGAIN, -EPIPE, ...). The fds
 * stay owned by the caller. */
int smc_ctl_send(int sock, const union smc_ctl_msg *m, const int *fds, size_t nfds, int flags);

/* Receive one message into @m with up to SMC_CTL_MAX_FDS fds into @fds (received
 * with MSG_CMSG_CLOEXEC), and decode it strictly for direction @dir. On success
 * returns the number of fds (>= 0), which the caller now owns, and the bytes of @m
 * past the message's length (fields its version does not have) are zero. On a
 * decoding error returns a negative errno (see smc_ctl_decode) and closes any
 * received fds, but still fills @m so the caller can echo hdr.seq. Returns -ECONNRESET at EOF and
 * another negative errno (-EAGAIN, ...) if recvmsg fails. */
int smc_ctl_recv(int sock, union smc_ctl_msg *m, int *fds, enum smc_ctl_dir dir, int flags);

/* Conversions between struct sockaddr (AF_INET/AF_INET6) and struct smc_ctl_addr.
 * Return 0 or -EAFNOSUPPORT / -EINVAL. to_sockaddr writes at most *len bytes and
 * sets *len to the full length, as getsockname(2) does. */
int smc_ctl_addr_from_sockaddr(struct smc_ctl_addr *a, const struct sockaddr *sa, socklen_t len);
int smc_ctl_addr_to_sockaddr(const struct smc_ctl_addr *a, struct sockaddr *sa, socklen_t *len);

/* The runtime directory: $SMCD_RUNTIME_DIR if set and absolute, else the built-in
 * default. Returns a pointer to static or environment storage. */
const char *smc_ctl_runtime_dir(void);
