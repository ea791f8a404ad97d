#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# Seeds for fuzz-clc / fuzz-cdc / fuzz-llc from the real Linux 6.12 bytes in
# tests/test-smcr-kernel-bytes.c (the k_* / s_* arrays): CLC messages (eyecatcher
# E2D4C3D9) go to corpus/clc, 0xFE-first ones to corpus/cdc, the others to corpus/llc.
# Usage: fuzz/gen-wire-seeds.py [SRCDIR]   (writes SRCDIR/fuzz/corpus/...)
import os
import re
import sys

src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
text = open(os.path.join(src, "tests", "test-smcr-kernel-bytes.c")).read()
n = 0
for name, body in re.findall(r"static const uint8_t ([ks]_\w+)\[\] = \{(.*?)\};", text, re.S):
    data = bytes(int(x, 16) for x in re.findall(r"0x([0-9a-fA-F]{2})", body))
    if data[:4] == b"\xe2\xd4\xc3\xd9":
        target = "clc"
    elif data[:1] == b"\xfe":
        target = "cdc"
    else:
        target = "llc"
    d = os.path.join(src, "fuzz", "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "kernel-" + name), "wb") as f:
        f.write(data)
    n += 1
print(f"{n} seeds from the kernel captures")
