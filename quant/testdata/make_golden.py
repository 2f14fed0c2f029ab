#!/usr/bin/env python3
"""Writes golden.bin: rows quantized and dequantized by the python `gguf`
package, and its table of type block sizes, for quantize_test.cc.

  python3 -m venv /tmp/venv && /tmp/venv/bin/pip install gguf numpy
  /tmp/venv/bin/python quant/testdata/make_golden.py

Layout (little-endian):
  u32 n_types, then n_types x (u32 id, u32 block_size, u32 block_bytes)
  u32 n_rows,  then n_rows x (u32 type id, u32 n, f32[n] input,
                              u32 n_bytes, u8[n_bytes] quantized,
                              f32[n] dequantized)
"""
import os
import struct

import numpy as np
from gguf import quants
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType as T

rng = np.random.default_rng(19)


def rows():
    n = 128  # Four blocks of 32.
    yield rng.standard_normal(n).astype(np.float32)
    yield (rng.standard_normal(n) * 1e-3 + 0.5).astype(np.float32)
    r = rng.uniform(-4, 4, n).astype(np.float32)
    r[:32] = 0.0  # An all-zero block: d = 0.
    r[32:64] = 1.25  # A constant block.
    r[64] = -9.0  # Largest magnitude negative.
    yield r
    # Halves and ties for round-half-away-from-zero.
    yield (np.arange(n, dtype=np.float32) - 64) / 2


def main():
    out = bytearray()
    types = list(T)
    out += struct.pack("<I", len(types))
    for t in types:
        bs, bb = GGML_QUANT_SIZES[t]
        out += struct.pack("<III", t.value, bs, bb)
    records = []
    for t in (T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0):
        for r in rows():
            q = quants.quantize(r, t).view(np.uint8).reshape(-1)
            d = quants.dequantize(q, t).astype(np.float32).reshape(-1)
            records.append((t, r, q, d))
    out += struct.pack("<I", len(records))
    for t, r, q, d in records:
        out += struct.pack("<II", t.value, r.size) + r.tobytes()
        out += struct.pack("<I", q.size) + q.tobytes() + d.tobytes()
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden.bin")
    with open(path, "wb") as f:
        f.write(out)
    print(f"wrote {path}: {len(records)} rows, {len(out)} bytes")


if __name__ == "__main__":
    main()
