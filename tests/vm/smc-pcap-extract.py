#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""smc-pcap-extract.py: the SMC messages of a pcap file (Ethernet, e.g. `tcpdump -i smc0b
-w FILE` in tests/vm/kernel-smc-capture.sh), as annotated hex. Python 3 stdlib only.

  smc-pcap-extract.py CAPTURE.pcap [--phases PHASES] [--meta META] [--c] [--summary]

What it finds:
  CLC   the TCP payload of each connection, per direction, reassembled by sequence
        number (retransmissions dropped): the CLC messages at the start of the stream
        (eyecatcher E2D4C3D9 / E2D4C3C4, length at offset 5) until the first byte that
        is not one (data after a fallback)
  LLC / CDC  RoCEv2 (UDP port 4791) RC SENDs: BTH (12 bytes; pad count in byte 1 bits
        5-4), payload, 4-byte ICRC; SEND FIRST/MIDDLE/LAST reassembled per destination
        QP; a PSN seen before on that QP is a retransmission and dropped. Byte 0 = 0xFE
        is CDC, else LLC (0x01-0x09 v1, 0x21-0x29 v2). RDMA WRITEs are only counted.
Each message: one "# " header line (index, time since the first packet, phase, dir,
kernel, proto, type, length, a short decode), then its bytes, 16 per line. dir is
kernel->smcd when the sender is the kernel's host (meta: kernel_host ... IP), else
smcd->kernel. PHASES: lines "START|END NAME EPOCH" (the script's); META: "kernel VERSION",
"kernel_host B IP ...", "smcd_host A IP ...". --c prints each message as a C array instead
of hex lines; --summary only counts messages per (phase, dir, type).
Exit status 0, or 1 (with a message) for an unreadable file.
"""
import argparse
import struct
import sys
from collections import Counter, defaultdict

CLC_TYPES = {1: "CLC_PROPOSAL", 2: "CLC_ACCEPT", 3: "CLC_CONFIRM", 4: "CLC_DECLINE"}
EYES = (b"\xe2\xd4\xc3\xd9", b"\xe2\xd4\xc3\xc4")
LLC_TYPES = {1: "CONFIRM_LINK", 2: "ADD_LINK", 3: "ADD_LINK_CONT", 4: "DELETE_LINK", 5: "REQ_ADD_LINK",
             6: "CONFIRM_RKEY", 7: "TEST_LINK", 8: "CONFIRM_RKEY_CONT", 9: "DELETE_RKEY"}
# RC opcodes (IBTA): SEND FIRST/MIDDLE/LAST/LAST_IMM/ONLY/ONLY_IMM, RDMA WRITE FIRST..ONLY_IMM
SEND_FIRST, SEND_MIDDLE, SEND_LAST, SEND_LAST_IMM, SEND_ONLY, SEND_ONLY_IMM = range(6)
WRITES = range(6, 12)
OPNAMES = {0: "SEND_FIRST", 1: "SEND_MIDDLE", 2: "SEND_LAST", 3: "SEND_LAST_IMM", 4: "SEND_ONLY",
           5: "SEND_ONLY_IMM", 6: "WRITE_FIRST", 7: "WRITE_MIDDLE", 8: "WRITE_LAST", 9: "WRITE_LAST_IMM",
           10: "WRITE_ONLY", 11: "WRITE_ONLY_IMM", 0x11: "ACK"}


def read_pcap(path):
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 24:
        raise ValueError("not a pcap file (too short)")
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        e = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        e = ">"
    else:
        raise ValueError("not a pcap file (pcapng is not read: tcpdump -w writes pcap)")
    nano = magic in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d")
    linktype = struct.unpack_from(e + "I", data, 20)[0]
    if linktype != 1:
        raise ValueError(f"link type {linktype}: only Ethernet (1) is read")
    off = 24
    while off + 16 <= len(data):
        sec, frac, incl, _orig = struct.unpack_from(e + "IIII", data, off)
        off += 16
        pkt = data[off:off + incl]
        off += incl
        yield sec + frac / (1e9 if nano else 1e6), pkt


def parse_ip(pkt):
    """(src, dst, proto, l4 bytes) of an IPv4 packet in an Ethernet frame (VLAN skipped), or None"""
    if len(pkt) < 14:
        return None
    et = struct.unpack_from(">H", pkt, 12)[0]
    p = 14
    if et == 0x8100 and len(pkt) >= 18:
        et = struct.unpack_from(">H", pkt, 16)[0]
        p = 18
    if et != 0x0800 or len(pkt) < p + 20:
        return None
    ihl = (pkt[p] & 0x0F) * 4
    total = struct.unpack_from(">H", pkt, p + 2)[0]
    proto = pkt[p + 9]
    src = ".".join(str(b) for b in pkt[p + 12:p + 16])
    dst = ".".join(str(b) for b in pkt[p + 16:p + 20])
    return src, dst, proto, pkt[p + ihl:p + total]


def hexlines(b, indent=""):
    return "\n".join(indent + " ".join(f"{x:02x}" for x in b[i:i + 16]) for i in range(0, len(b), 16))


def clc_info(m):
    t = m[4]
    b7 = m[7]
    s = f"ver={b7 >> 4} typev1={b7 & 3} typev2={(b7 >> 2) & 3}"
    if t in (2, 3):
        s = f"ver={b7 >> 4} smc_type={b7 & 3} first_contact={(b7 >> 3) & 1}"
    if t == 4 and len(m) >= 24:
        s += f" out_of_sync={(b7 >> 3) & 1} diag=0x{struct.unpack_from('>I', m, 16)[0]:08x}"
    return s


def cdc_info(m):
    seq, tok = struct.unpack_from(">HI", m, 2)
    pw, pc, cw, cc = struct.unpack_from(">2xHI2xHI", m, 8)
    return (f"seqno={seq} token=0x{tok:08x} prod={pw}:{pc} cons={cw}:{cc} "
            f"prod_flags=0x{m[24]:02x} conn_flags=0x{m[25]:02x}")


def llc_name(m):
    t = m[0]
    v2 = (t & 0xF0) == 0x20
    base = t & 0x0F if v2 else t
    name = LLC_TYPES.get(base, f"LLC_0x{t:02x}")
    resp = bool(m[3] & 0x80)
    return f"LLC{'v2' if v2 else 'v1'}_{name}_{'RESP' if resp else 'REQ'}", v2


def llc_info(m):
    _, v2 = llc_name(m)
    if v2:
        le = struct.unpack_from("<H", m, 1)[0]
        be = struct.unpack_from(">H", m, 1)[0]
        s = f"len_le={le} len_be={be}"
    else:
        s = f"len={m[1]}"
    return s + f" flags=0x{m[3]:02x}"


def main():
    ap = argparse.ArgumentParser(description="SMC messages of a pcap file, as annotated hex")
    ap.add_argument("pcap")
    ap.add_argument("--phases")
    ap.add_argument("--meta")
    ap.add_argument("--c", action="store_true", help="C arrays instead of hex lines")
    ap.add_argument("--summary", action="store_true", help="only count the messages")
    a = ap.parse_args()

    kernel, khost, clock_off = "?", "10.77.0.2", None
    if a.meta:
        for line in open(a.meta):
            w = line.split()
            if len(w) >= 2 and w[0] == "kernel":
                kernel = w[1]
            elif len(w) >= 3 and w[0] == "kernel_host":
                khost = w[2]
            elif len(w) >= 2 and w[0] == "clock_offset":
                clock_off = float(w[1])
    phases = []  # (start, end, name)
    if a.phases:
        starts = {}
        for line in open(a.phases):
            w = line.split()
            if len(w) != 3:
                continue
            if w[0] == "START":
                starts[w[1]] = float(w[2])
            elif w[0] == "END" and w[1] in starts:
                phases.append((starts.pop(w[1]), float(w[2]), w[1]))

    def phase_of(t):
        for s, e, n in phases:
            if s <= t <= e:
                return n
        return "-"

    def direction(src):
        return "kernel->smcd" if src == khost else "smcd->kernel"

    try:
        pkts = list(read_pcap(a.pcap))
    except (OSError, ValueError) as e:
        print(f"smc-pcap-extract: {a.pcap}: {e}", file=sys.stderr)
        return 1
    # Packets that rxe sends carry the skb's CLOCK_MONOTONIC time stamp (not the real
    # time of the others): put them on the real-time clock with meta's clock_offset.
    # Messages are ordered by capture order (the file's packet order) in any case.
    if clock_off is not None:
        pkts = [(t + clock_off if t < 1e9 else t, p) for t, p in pkts]
    t0 = min((t for t, _ in pkts), default=0.0)
    msgs = []  # (time, src, proto, type, info, bytes, extra)
    # TCP: per (src, sport, dst, dport): isn, first time, {rel seq: (time, payload)}
    tcp = {}
    sends = defaultdict(list)    # (src, dst, dqpn) -> [(time, psn, opcode, payload)] of one SEND
    seen_psn = defaultdict(set)  # (src, dst, dqpn) -> PSNs seen
    writes = Counter()
    for idx, (t, pkt) in enumerate(pkts):
        ip = parse_ip(pkt)
        if not ip:
            continue
        src, dst, proto, l4 = ip
        if proto == 6 and len(l4) >= 20:
            sport, dport, seq = struct.unpack_from(">HHI", l4)
            doff = (l4[12] >> 4) * 4
            flags = l4[13]
            key = (src, sport, dst, dport)
            if flags & 0x02:  # SYN: a new stream
                tcp[key] = {"isn": seq, "segs": {}, "t": (idx, t)}
                continue
            st = tcp.get(key)
            pay = l4[doff:]
            if st is None or not pay:
                continue
            rel = (seq - st["isn"] - 1) & 0xFFFFFFFF
            if rel not in st["segs"]:
                st["segs"][rel] = ((idx, t), pay)
        elif proto == 17 and len(l4) >= 8 + 12 + 4:
            _sport, dport = struct.unpack_from(">HH", l4)
            if dport != 4791:
                continue
            bth = l4[8:20]
            op = bth[0]
            pad = (bth[1] >> 4) & 3
            dqpn = int.from_bytes(bth[5:8], "big")
            psn = int.from_bytes(bth[9:12], "big")
            body = l4[20:len(l4) - 4]
            if pad:
                body = body[:len(body) - pad]
            key = (src, dst, dqpn)
            if op >> 5 != 0:  # not RC
                continue
            if op in WRITES:
                writes[(direction(src), phase_of(t))] += 1
                continue
            if op > SEND_ONLY_IMM:
                continue
            if psn in seen_psn[key]:
                continue  # a retransmission
            seen_psn[key].add(psn)
            if op in (SEND_LAST_IMM, SEND_ONLY_IMM):
                body = body[4:]  # ImmDt
            if op in (SEND_FIRST, SEND_ONLY, SEND_ONLY_IMM):
                sends[key] = []
            sends[key].append(((idx, t), psn, op, body))
            if op in (SEND_LAST, SEND_LAST_IMM, SEND_ONLY, SEND_ONLY_IMM):
                parts = sends.pop(key)
                m = b"".join(p[3] for p in parts)
                ops = "+".join(OPNAMES[p[2]] for p in parts)
                extra = f"qpn=0x{dqpn:06x} psn=0x{parts[0][1]:06x} {ops}"
                ts = parts[0][0]
                if len(m) >= 1 and m[0] == 0xFE:
                    msgs.append((ts, src, "CDC", "CDC", cdc_info(m) if len(m) >= 26 else "short", m, extra))
                elif len(m) >= 4:
                    name, _ = llc_name(m)
                    msgs.append((ts, src, "LLC", name, llc_info(m), m, extra))
                else:
                    msgs.append((ts, src, "SEND", "SHORT", "", m, extra))
    for (src, sport, dst, dport), st in tcp.items():
        segs = st["segs"]
        stream = b""
        times = []  # (offset in stream, time)
        for rel in sorted(segs):
            t, pay = segs[rel]
            if rel > len(stream):
                break  # a hole: stop there
            if rel + len(pay) <= len(stream):
                continue
            times.append((len(stream), t))
            stream += pay[len(stream) - rel:]
        off = 0
        while off + 8 <= len(stream) and stream[off:off + 4] in EYES and 1 <= stream[off + 4] <= 4:
            ln = struct.unpack_from(">H", stream, off + 5)[0]
            if ln < 8 or off + ln > len(stream):
                break
            m = stream[off:off + ln]
            ts = max((tt for o, tt in times if o <= off), default=st["t"])
            extra = f"tcp {src}:{sport} -> {dst}:{dport}"
            msgs.append((ts, src, "CLC", CLC_TYPES[m[4]], clc_info(m), m, extra))
            off += ln
            if m[4] == 4:
                break
    msgs.sort(key=lambda x: x[0][0])
    msgs = [(t, *rest) for (_, t), *rest in msgs]

    if a.summary:
        c = Counter((phase_of(m[0]), direction(m[1]), m[3]) for m in msgs)
        for (ph, d, ty), n in sorted(c.items(), key=lambda x: (min(mm[0] for mm in msgs
                                                                   if phase_of(mm[0]) == x[0][0]), x[0])):
            print(f"{n:4d}  {ph:32s} {d:14s} {ty}")
        for (d, ph), n in sorted(writes.items()):
            print(f"{n:4d}  {ph:32s} {d:14s} RDMA WRITE packets")
        print(f"{len(msgs)} messages")
        return 0
    print(f"# smc-pcap-extract: {a.pcap}: {len(msgs)} messages, kernel {kernel}, kernel host {khost}")
    for i, (t, src, proto, ty, info, m, extra) in enumerate(msgs):
        hdr = (f"{i:04d} t={t - t0:.6f} phase={phase_of(t)} dir={direction(src)} kernel={kernel} "
               f"proto={proto} type={ty} len={len(m)} {info} [{extra}]")
        if a.c:
            print(f"/* {hdr} */")
            print(f"static const uint8_t msg_{i:04d}[] = {{")
            for j in range(0, len(m), 12):
                print("        " + ", ".join(f"0x{x:02x}" for x in m[j:j + 12]) + ",")
            print("};")
        else:
            print("# " + hdr)
            print(hexlines(m))
    for (d, ph), n in sorted(writes.items()):
        print(f"# RDMA WRITE packets: phase={ph} dir={d}: {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
