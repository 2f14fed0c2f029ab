#!/usr/bin/env python3
"""Writes smollm2_reference.json: what llama.cpp computes on the SmolLM2 GGUF.

For each prompt: its token ids (llama.cpp's tokenizer, no BOS: the file's
tokenizer.ggml.add_bos_token is false), the top-K logits (ids and values) at
every prompt position (logits_all), and the greedy continuation with the
margin between the two best logits at each step.

The same again ("exact") from a plain float64 numpy forward pass on the
weights dequantized by the gguf package: llama.cpp's CPU kernels round
activations to q8_1 before multiplying by q4_1/q8_0 weights, so it is itself
~0.5 off the exact math; ferry (weights dequantized to f32 at load) is
checked tightly against "exact" and loosely against llama.cpp. The ferry
test (engine/smollm2_test.cc) compares against this file, so CI needs the
GGUF (tools/fetch_smollm2.sh) but not llama_cpp.

  /work/venv-gguf/bin/python engine/testdata/make_smollm2_reference.py \
      ~/.cache/ferry/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf

The requantized files of tools/requantize_smollm2.sh the same way, with
MORE_PROMPTS too (--more_prompts), e.g. smollm2_q4_k_m_reference.json for
engine/smollm2_kquant_test.cc, with llama-cpp-python's sources on the
llama.cpp build in the cache (~30 s a file on 2 quiet cores; llama.cpp's
spinning threads slow down many times beside other work):

  c=~/.cache/ferry/llama.cpp/0.3.36
  LLAMA_CPP_LIB_PATH=$c/bin PYTHONPATH=$c/src ~/.cache/ferry/venv-ref/bin/python \
      engine/testdata/make_smollm2_reference.py --more_prompts \
      ~/.cache/ferry/smollm2/SmolLM2-135M-Instruct.Q4_K_M.gguf \
      > engine/testdata/smollm2_q4_k_m_reference.json

--cache_type=f32 gives llama.cpp ferry's K/V cache type (its default, f16,
rounds K, V and the attention's inputs to f16; the committed files use it).
"""
import argparse
import json
import os
import sys

import gguf
import numpy as np
from llama_cpp import Llama

TOP_K = 16
NEW_TOKENS = 16
PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "<|im_start|>user\nWhat is the largest planet in the solar system?"
    "<|im_end|>\n<|im_start|>assistant\n",
    "Once upon a time, there was a little girl named",
]
# More positions for the requantized files (--more_prompts): at 52 positions
# one top-1 flip moves agreement by 2%, inside the noise of 8-bit activations.
MORE_PROMPTS = [
    "Photosynthesis is the process by which green plants use sunlight, water"
    " and carbon dioxide to make glucose. It takes place in the chloroplasts,"
    " where the pigment chlorophyll absorbs light. The oxygen we breathe is",
    "import numpy as np\n\n\ndef softmax(x):\n    e = np.exp(x - x.max())\n"
    "    return e / e.sum()\n\n\ndef cross_entropy(logits, label):\n",
    "<|im_start|>system\nYou are a helpful assistant who answers briefly."
    "<|im_end|>\n<|im_start|>user\nHow many days are there in a leap year,"
    " and why do we have them?<|im_end|>\n<|im_start|>assistant\n",
    "Shopping list for the weekend: apples, bread, two litres of milk, eggs,"
    " coffee, rice, tomatoes, onions, and",
    "The old lighthouse keeper climbed the narrow stairs every evening at"
    " sunset. On the night of the storm, he noticed a small boat struggling"
    " against the waves, and he",
    "Q: What is 17 multiplied by 3?\nA: 51\nQ: What is the square root of"
    " 144?\nA: 12\nQ: What is 100 divided by 4?\nA:",
]


class ExactLlama:
    """The llama forward pass, written from the architecture, in float64."""

    def __init__(self, path):
        r = gguf.GGUFReader(path)

        def field(key):
            f = r.fields[key]
            return f.parts[f.data[0]][0]

        self.n_layer = int(field("llama.block_count"))
        self.n_head = int(field("llama.attention.head_count"))
        self.n_head_kv = int(field("llama.attention.head_count_kv"))
        self.eps = float(field("llama.attention.layer_norm_rms_epsilon"))
        self.base = float(field("llama.rope.freq_base"))
        self.w = {}
        for t in r.tensors:
            a = gguf.quants.dequantize(t.data, t.tensor_type)
            self.w[t.name] = np.asarray(a, dtype=np.float64)
        self.w.setdefault("output.weight", self.w["token_embd.weight"])

    def norm(self, x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + self.eps) * w

    def rope(self, x, pos):
        # Pairs (2i, 2i+1) rotate by pos * base^(-2i/d): GGUF's Q and K rows
        # are permuted for this ("normal") style.
        d = x.shape[-1]
        theta = pos[:, None] * self.base ** (-np.arange(0, d, 2) / d)
        c, s = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = x0 * c - x1 * s
        out[..., 1::2] = x0 * s + x1 * c
        return out

    def logits(self, tokens, cache):
        """Logits of `tokens`, which follow the tokens whose keys and values
        (per layer, after rope) `cache` holds, or none where cache[0] is None;
        appends theirs to `cache`.
        """
        w = self.w
        n = len(tokens)
        n_past = 0 if cache[0] is None else len(cache[0][0])
        x = w["token_embd.weight"][tokens]
        hd = x.shape[1] // self.n_head
        pos = np.arange(n_past, n_past + n, dtype=np.float64)
        mask = np.triu(np.full((n, n_past + n), -np.inf), n_past + 1)
        for il in range(self.n_layer):
            p = "blk.%d." % il
            h = self.norm(x, w[p + "attn_norm.weight"])
            q = (h @ w[p + "attn_q.weight"].T).reshape(n, self.n_head, hd)
            k = (h @ w[p + "attn_k.weight"].T).reshape(n, self.n_head_kv, hd)
            v = (h @ w[p + "attn_v.weight"].T).reshape(n, self.n_head_kv, hd)
            q, k = self.rope(q, pos), self.rope(k, pos)
            if n_past:
                k = np.concatenate([cache[il][0], k])
                v = np.concatenate([cache[il][1], v])
            cache[il] = [k, v]
            rep = self.n_head // self.n_head_kv
            k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
            att = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(hd) + mask
            att = np.exp(att - att.max(-1, keepdims=True))
            att /= att.sum(-1, keepdims=True)
            o = np.einsum("hqk,khd->qhd", att, v).reshape(n, -1)
            x = x + o @ w[p + "attn_output.weight"].T
            h = self.norm(x, w[p + "ffn_norm.weight"])
            g = h @ w[p + "ffn_gate.weight"].T
            u = h @ w[p + "ffn_up.weight"].T
            x = x + (g / (1 + np.exp(-g)) * u) @ w[p + "ffn_down.weight"].T
        x = self.norm(x, w["output_norm.weight"])
        return x @ w["output.weight"].T


def top(logits):
    rows = []
    for row in logits:
        ids = np.argsort(-row, kind="stable")[:TOP_K]
        rows.append({"ids": [int(i) for i in ids],
                     "logits": [float(row[i]) for i in ids]})
    return rows


def margin(row):
    a = np.sort(row)
    return float(a[-1] - a[-2])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("gguf")
    parser.add_argument("--more_prompts", action="store_true",
                        help="add MORE_PROMPTS (the requantized files)")
    parser.add_argument("--cache_type", choices=["f16", "f32"], default="f16",
                        help="llama.cpp's K and V cache type (its default: f16)")
    args = parser.parse_args()
    path = args.gguf
    prompts = PROMPTS + (MORE_PROMPTS if args.more_prompts else [])
    cache_type = {"f32": 0, "f16": 1}[args.cache_type]  # enum ggml_type
    llm = Llama(model_path=path, n_ctx=256, n_threads=2, n_batch=256,
                logits_all=True, verbose=False, type_k=cache_type,
                type_v=cache_type)
    exact = ExactLlama(path)
    out = {"model": os.path.basename(path), "top_k": TOP_K,
           "cache_type": args.cache_type, "prompts": []}
    for text in prompts:
        tokens = llm.tokenize(text.encode(), add_bos=False, special=True)
        llm.reset()
        llm.eval(tokens)
        logits = np.array(llm.scores[: len(tokens)], dtype=np.float32)
        # Greedy: argmax of each next-token distribution, fed back.
        greedy, margins = [], []
        row = logits[-1]
        for _ in range(NEW_TOKENS):
            t = int(np.argmax(row))
            greedy.append(t)
            margins.append(margin(row))
            llm.eval([t])
            row = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        cache = [None] * exact.n_layer
        exact_logits = exact.logits(tokens, cache)
        exact_greedy, exact_margins = [], []
        row = exact_logits[-1]
        for _ in range(NEW_TOKENS):
            t = int(np.argmax(row))
            exact_greedy.append(t)
            exact_margins.append(margin(row))
            row = exact.logits([t], cache)[-1]
        out["prompts"].append({
            "text": text, "tokens": [int(t) for t in tokens],
            "top": top(logits), "greedy": greedy, "greedy_margin": margins,
            "greedy_text": llm.detokenize(greedy).decode("utf-8", "replace"),
            "exact_top": top(exact_logits), "exact_greedy": exact_greedy,
            "exact_greedy_margin": exact_margins,
            "exact_greedy_text": llm.detokenize(exact_greedy).decode(
                "utf-8", "replace")})
    json.dump(out, sys.stdout, indent=None)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
