#!/usr/bin/env python3
"""Writes golden_k.bin: K-quant and iq4 rows for quantize_test.cc, quantized
by ggml's own reference quantizers (quantize_row_*_ref in libggml-base, the
library llama.cpp's tools link) and dequantized by the python `gguf`
package, cross-checked against ggml's dequantize_row_*.

  python3 -m venv /tmp/venv && /tmp/venv/bin/pip install gguf numpy
  /tmp/venv/bin/python quant/testdata/make_golden_k.py \
      ~/.cache/ferry/llama.cpp/0.3.36/bin/libggml-base.so

Layout (little-endian):
  u32 n_rows, then n_rows x (u32 type id, u32 n, f32[n] input,
                             u32 n_bytes, u8[n_bytes] quantized,
                             f32[n] dequantized, u32 quantize_exact)
quantize_exact is 1 where ferry's QuantizeRow must give ggml's bytes (q8_K,
the activation format); rows of random bytes have an all-zero input.
"""
import ctypes
import os
import struct
import sys

import numpy as np
from gguf import quants
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType as T

rng = np.random.default_rng(23)
N = 512  # Two super-blocks of 256 (16 iq4_nl blocks).

TYPES = [T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K, T.Q8_K, T.IQ4_NL, T.IQ4_XS]


def rows():
    yield rng.standard_normal(N).astype(np.float32)
    yield (rng.standard_normal(N) * 1e-3 + 0.5).astype(np.float32)
    r = rng.uniform(-4, 4, N).astype(np.float32)
    r[:256] = 0.0  # An all-zero super-block.
    r[300:310] = -9.0
    yield r
    yield (np.arange(N, dtype=np.float32) - 200) / 2
    # -127 in each super-block makes q8_K's scale 1: every half is a tie,
    # which ggml rounds to even.
    r = ((np.arange(N) % 254) - 127).astype(np.float32) / 2
    r[0] = r[256] = -127.0
    yield r


def ggml_call(lib, name, src, dst_dtype, count):
    fn = getattr(lib, name)
    fn.restype = None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    dst = np.zeros(count, dtype=dst_dtype)
    fn(src.ctypes.data, dst.ctypes.data, N)
    return dst


def main():
    lib = ctypes.CDLL(sys.argv[1])
    records = []
    for t in TYPES:
        name = t.name.lower() if not t.name.endswith("_K") else t.name[:-2].lower() + "_K"
        bs, bb = GGML_QUANT_SIZES[t]
        n_bytes = N // bs * bb
        inputs = list(rows())
        randoms = [rng.integers(0, 256, n_bytes, dtype=np.uint8) for _ in range(2)]
        for r, q in [(r, None) for r in inputs] + [(None, q) for q in randoms]:
            if q is None:
                q = ggml_call(lib, f"quantize_row_{name}_ref", r, np.uint8, n_bytes)
            ggml_d = ggml_call(lib, f"dequantize_row_{name}", q, np.float32, N)
            if t == T.Q8_K:
                d = ggml_d  # gguf-py has no q8_K dequantizer.
            else:
                d = quants.dequantize(q, t).astype(np.float32).reshape(-1)
                same = (d.view(np.uint32) == ggml_d.view(np.uint32)) | (
                    np.isnan(d) & np.isnan(ggml_d))
                assert same.all(), f"{name}: gguf-py and ggml disagree"
            exact = 1 if (t == T.Q8_K and r is not None) else 0
            if r is None:
                r = np.zeros(N, dtype=np.float32)
            records.append((t, r, q, d, exact))
    out = bytearray(struct.pack("<I", len(records)))
    for t, r, q, d, exact in records:
        out += struct.pack("<II", t.value, r.size) + r.tobytes()
        out += struct.pack("<I", q.size) + q.tobytes() + d.tobytes()
        out += struct.pack("<I", exact)
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden_k.bin")
    with open(path, "wb") as f:
        f.write(out)
    print(f"wrote {path}: {len(records)} rows, {len(out)} bytes")


if __name__ == "__main__":
    main()
