#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""kernel-smc-config.py: configure the Linux kernel's SMC module over generic netlink,
for the kernel interop test (tests/test-kernel-smcr-vm.sh; root, `modprobe smc` first).

  kernel-smc-config.py pnet PNETID NETDEV IBDEV PORT   SMC_PNETID ADD: NETDEV and IBDEV's
                                                       PORT get PNETID (the kernel then uses
                                                       only IBDEV for connections on NETDEV)
  kernel-smc-config.py ueid EID                        SMC_GEN_NETLINK ADD_UEID (blank
                                                       padded to 32 bytes, upper case)
  kernel-smc-config.py show                            the UEID table (DUMP_UEID)

Families are resolved with CTRL_CMD_GETFAMILY ("SMC_PNETID", "SMC_GEN_NETLINK"); values
from include/uapi/linux/smc.h. Exit 0, or 1 with the kernel's error (errno) on stderr.
"""
import errno
import os
import socket
import struct
import sys

NETLINK_GENERIC = 16
NLM_F_REQUEST, NLM_F_ACK, NLM_F_DUMP = 0x1, 0x4, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
GENL_ID_CTRL, CTRL_CMD_GETFAMILY = 0x10, 3
CTRL_ATTR_FAMILY_ID, CTRL_ATTR_FAMILY_NAME = 1, 2
# SMC_PNETID family
SMC_PNETID_ADD = 2
SMC_PNETID_NAME, SMC_PNETID_ETHNAME, SMC_PNETID_IBNAME, SMC_PNETID_IBPORT = 1, 2, 3, 4
# SMC_GEN_NETLINK family
SMC_NETLINK_DUMP_UEID, SMC_NETLINK_ADD_UEID = 9, 10
SMC_NLA_EID_TABLE_ENTRY = 1
SMC_MAX_EID_LEN = 32


def nla(typ, payload):
    n = 4 + len(payload)
    return struct.pack("=HH", n, typ) + payload + b"\0" * ((4 - n % 4) % 4)


def nla_str(typ, s):
    return nla(typ, s.encode() + b"\0")


def parse_attrs(buf):
    out = {}
    while len(buf) >= 4:
        n, typ = struct.unpack_from("=HH", buf)
        if n < 4:
            break
        out.setdefault(typ & 0x3fff, []).append(buf[4:n])
        buf = buf[(n + 3) & ~3:]
    return out


class Genl:
    def __init__(self):
        self.s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_GENERIC)
        self.s.bind((0, 0))
        self.seq = 1

    def request(self, family, cmd, attrs=b"", flags=NLM_F_ACK):
        """send one request; returns the payloads (after the genl header) of the replies"""
        self.seq += 1
        body = struct.pack("=BBH", cmd, 1, 0) + attrs
        self.s.send(struct.pack("=IHHII", 16 + len(body), family, NLM_F_REQUEST | flags, self.seq, 0) + body)
        replies = []
        while True:
            data = self.s.recv(65536)
            off = 0
            while off + 16 <= len(data):
                n, typ, _, seq, _ = struct.unpack_from("=IHHII", data, off)
                msg = data[off + 16:off + n]
                off += (n + 3) & ~3
                if seq != self.seq:
                    continue
                if typ == NLMSG_ERROR:
                    err = struct.unpack_from("=i", msg)[0]
                    if err:
                        raise OSError(-err, os.strerror(-err))
                    return replies
                if typ == NLMSG_DONE:
                    return replies
                replies.append(msg[4:])

    def family(self, name):
        r = self.request(GENL_ID_CTRL, CTRL_CMD_GETFAMILY, nla_str(CTRL_ATTR_FAMILY_NAME, name))
        a = parse_attrs(r[0])
        return struct.unpack("=H", a[CTRL_ATTR_FAMILY_ID][0][:2])[0]


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    g = Genl()
    try:
        if argv[1] == "pnet" and len(argv) == 6:
            fam = g.family("SMC_PNETID")
            attrs = (nla_str(SMC_PNETID_NAME, argv[2].upper()) + nla_str(SMC_PNETID_ETHNAME, argv[3]) +
                     nla_str(SMC_PNETID_IBNAME, argv[4]) + nla(SMC_PNETID_IBPORT, struct.pack("B", int(argv[5]))))
            g.request(fam, SMC_PNETID_ADD, attrs)
            print(f"pnet: {argv[3]} and {argv[4]} port {argv[5]} -> pnetid {argv[2].upper()}")
        elif argv[1] == "ueid" and len(argv) == 3:
            eid = argv[2].upper()
            if len(eid) > SMC_MAX_EID_LEN:
                print("ueid: at most 32 characters", file=sys.stderr)
                return 2
            fam = g.family("SMC_GEN_NETLINK")
            # the kernel wants exactly 32 bytes, blank padded, plus the NUL
            g.request(fam, SMC_NETLINK_ADD_UEID,
                      nla(SMC_NLA_EID_TABLE_ENTRY, eid.ljust(SMC_MAX_EID_LEN).encode() + b"\0"))
            print(f"ueid: added '{eid.ljust(SMC_MAX_EID_LEN)}'")
        elif argv[1] == "show" and len(argv) == 2:
            fam = g.family("SMC_GEN_NETLINK")
            for r in g.request(fam, SMC_NETLINK_DUMP_UEID, flags=NLM_F_DUMP):
                for v in parse_attrs(r).get(SMC_NLA_EID_TABLE_ENTRY, []):
                    print("ueid: '%s'" % v.rstrip(b"\0").decode(errors="replace"))
        else:
            print(__doc__, file=sys.stderr)
            return 2
    except OSError as e:
        print(f"kernel-smc-config: {argv[1]}: {e.strerror} (errno {e.errno}"
              f"{', ' + errno.errorcode.get(e.errno, '') if e.errno else ''})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
