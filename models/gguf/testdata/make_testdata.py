#!/usr/bin/env python3
"""Writes the GGUF test data of models/gguf with the python `gguf` package
(an independent writer and dequantizer to check ferry's against):

  tiny_llama.gguf       a 1-layer llama with every weight type ferry reads
                        (f32, f16, bf16, q4_0, q4_1, q8_0) and a tokenizer
  tiny_llama.expected   per tensor: name, type, elements, the sum and sum
                        of squares of its dequantized values, first 8 values
  smollm2.expected      the same for chosen tensors of the real SmolLM2 file,
                        when its path is given as the first argument

  python3 -m venv /tmp/venv && /tmp/venv/bin/pip install gguf numpy
  /tmp/venv/bin/python models/gguf/testdata/make_testdata.py [SmolLM2.gguf]
"""
import os
import sys

import numpy as np
import gguf
from gguf import quants
from gguf.constants import GGMLQuantizationType as T

HERE = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(42)


def stats_line(name, qtype, values):
    v = values.astype(np.float64).reshape(-1)
    first = " ".join(repr(float(np.float32(x))) for x in v[:8])
    return (f"{name} {qtype.name} {v.size} {float(v.sum())!r} "
            f"{float((v * v).sum())!r} {first}\n")


def tiny():
    n_embd, n_head, n_head_kv, n_ff, n_vocab = 64, 4, 2, 96, 32
    kv = n_embd // n_head * n_head_kv
    path = os.path.join(HERE, "tiny_llama.gguf")
    w = gguf.GGUFWriter(path, "llama")
    w.add_block_count(1)
    w.add_context_length(128)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_vocab_size(n_vocab)
    w.add_tokenizer_model("gpt2")
    tokens = [f"t{i}" for i in range(n_vocab - 2)] + ["<s>", "</s>"]
    w.add_token_list(tokens)
    w.add_token_types([1] * (n_vocab - 2) + [3, 3])
    w.add_token_merges(["t 0", "t 1"])
    w.add_bos_token_id(n_vocab - 2)
    w.add_eos_token_id(n_vocab - 1)
    # ggml order: dims innermost first; numpy shapes are outermost first.
    specs = [
        ("token_embd.weight", (n_vocab, n_embd), T.Q8_0),
        ("blk.0.attn_norm.weight", (n_embd,), T.F32),
        ("blk.0.attn_q.weight", (n_embd, n_embd), T.Q4_1),
        ("blk.0.attn_k.weight", (kv, n_embd), T.Q4_0),
        ("blk.0.attn_v.weight", (kv, n_embd), T.F16),
        ("blk.0.attn_output.weight", (n_embd, n_embd), T.BF16),
        ("blk.0.ffn_norm.weight", (n_embd,), T.F32),
        ("blk.0.ffn_gate.weight", (n_ff, n_embd), T.Q4_1),
        ("blk.0.ffn_up.weight", (n_ff, n_embd), T.Q8_0),
        ("blk.0.ffn_down.weight", (n_embd, n_ff), T.Q4_0),
        ("output_norm.weight", (n_embd,), T.F32),
    ]
    lines = []
    for name, shape, qtype in specs:
        x = rng.standard_normal(shape).astype(np.float32)
        q = quants.quantize(x, qtype)
        w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qtype)
        lines.append(stats_line(name, qtype, quants.dequantize(q, qtype)))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with open(os.path.join(HERE, "tiny_llama.expected"), "w") as f:
        f.writelines(lines)
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


def smollm2(path):
    r = gguf.GGUFReader(path)
    wanted = ["token_embd.weight", "blk.0.attn_q.weight",
              "blk.0.attn_norm.weight", "blk.17.ffn_gate.weight",
              "blk.29.ffn_down.weight", "output_norm.weight"]
    by_name = {t.name: t for t in r.tensors}
    lines = []
    for name in wanted:
        t = by_name[name]
        values = quants.dequantize(np.asarray(t.data), t.tensor_type)
        lines.append(stats_line(name, t.tensor_type, values))
    out = os.path.join(HERE, "smollm2.expected")
    with open(out, "w") as f:
        f.writelines(lines)
    print(f"wrote {out}")


if __name__ == "__main__":
    tiny()
    if len(sys.argv) > 1:
        smollm2(sys.argv[1])
