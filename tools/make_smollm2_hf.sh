#!/usr/bin/env bash
# Makes Hugging Face directories of SmolLM2-135M-Instruct from the GGUF that
# tools/fetch_smollm2.sh fetched (no model hub is reachable here), for the
# tests and the program's --model=DIR:
#   tools/make_smollm2_hf.sh   # -> $HOME/.cache/ferry/smollm2/hf-f16/
#                              #    $HOME/.cache/ferry/smollm2/hf-bf16/
# hf-f16 holds one model.safetensors in float16; hf-bf16 two bfloat16 shards
# and model.safetensors.index.json. Both have config.json (llama
# architecture, as transformers writes it), tokenizer.json (built with the
# `tokenizers` library from the GGUF's vocabulary, merges and special
# tokens) and tokenizer_config.json. The weights are the GGUF's, dequantized
# by the `gguf` package, with Q and K un-permuted to HF's rotate-half
# layout, then rounded to f16 / bf16.
# The Python packages (pinned) go into a venv in the same cache. Idempotent;
# prints the two directories.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${FERRY_CACHE_DIR:-$HOME/.cache/ferry}"
gguf_path=$(bash "$root/tools/fetch_smollm2.sh")
out="$cache/smollm2"
if [[ -s "$out/hf-f16/config.json" && -s "$out/hf-bf16/config.json" ]]; then
  echo "$out/hf-f16"
  echo "$out/hf-bf16"
  exit 0
fi
venv="$cache/venv-hf"
if [[ ! -x "$venv/bin/python" ]] ||
  ! "$venv/bin/python" -c "import gguf, numpy, safetensors, tokenizers" 2>/dev/null; then
  python3 -m venv "$venv" || {
    echo "make_smollm2_hf: needs python3-venv" >&2
    exit 1
  }
  "$venv/bin/python" -m pip install --quiet gguf==0.19.0 numpy \
    safetensors==0.8.0 tokenizers==0.23.3 >&2
fi
tmp=$(mktemp -d "$out/hf-tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
"$venv/bin/python" - "$gguf_path" "$tmp" <<'PY'
import json
import os
import sys

import gguf
import numpy as np
from safetensors.numpy import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, AddedToken

gguf_path, dest = sys.argv[1:]
r = gguf.GGUFReader(gguf_path)


def field(key):
    f = r.fields[key]
    if f.types and f.types[0] == gguf.GGUFValueType.STRING:
        return bytes(f.parts[f.data[0]]).decode("utf-8")
    return f.parts[f.data[0]][0].item()


def strings(key):
    f = r.fields[key]
    return [bytes(f.parts[i]).decode("utf-8") for i in f.data]


n_head = int(field("llama.attention.head_count"))
n_head_kv = int(field("llama.attention.head_count_kv"))
n_embd = int(field("llama.embedding_length"))
tokens = strings("tokenizer.ggml.tokens")
types = list(r.fields["tokenizer.ggml.token_type"].data)
types = [int(r.fields["tokenizer.ggml.token_type"].parts[i][0]) for i in types]
bos = int(field("tokenizer.ggml.bos_token_id"))
eos = int(field("tokenizer.ggml.eos_token_id"))


def unpermute(w, heads):
    # GGUF's converter stores each head's rows interleaved (row 2i, 2i+1 is
    # rotation pair i) for llama.cpp's normal rope; HF's rotate-half pairs
    # row i with row i + head_dim/2. Undo: [heads, half, 2] -> [heads, 2, half].
    rows = w.shape[0]
    half = rows // heads // 2
    return (w.reshape(heads, half, 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


names = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
weights = {}
for t in r.tensors:
    base = t.name.removesuffix(".weight")
    parts = base.split(".")
    if parts[0] == "blk":
        hf = f"model.layers.{parts[1]}.{names[parts[2]]}.weight"
    else:
        hf = names[base] + ".weight"
    # numpy shape: outermost first ([rows, cols]), as safetensors stores it.
    w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
    w = w.reshape([int(d) for d in reversed(t.shape)] if len(t.shape) > 1
                  else [int(t.shape[0])])
    if base.endswith("attn_q"):
        w = unpermute(w, n_head)
    elif base.endswith("attn_k"):
        w = unpermute(w, n_head_kv)
    weights[hf] = w
tied = "lm_head.weight" not in weights

config = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_act": "silu",
    "hidden_size": n_embd,
    "intermediate_size": int(field("llama.feed_forward_length")),
    "num_hidden_layers": int(field("llama.block_count")),
    "num_attention_heads": n_head,
    "num_key_value_heads": n_head_kv,
    "max_position_embeddings": int(field("llama.context_length")),
    "rms_norm_eps": float(field("llama.attention.layer_norm_rms_epsilon")),
    "rope_theta": float(field("llama.rope.freq_base")),
    "vocab_size": len(tokens),
    "tie_word_embeddings": tied,
    "bos_token_id": bos,
    "eos_token_id": eos,
}

# The tokenizer: byte-level BPE with SmolLM2's pre-tokenizer (each digit
# apart, then GPT-2's byte-level split), control tokens as special added
# tokens.
merges = [tuple(m.split(" ", 1)) for m in strings("tokenizer.ggml.merges")]
tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)},
                           merges=merges))
tok.pre_tokenizer = pre_tokenizers.Sequence([
    pre_tokenizers.Digits(individual_digits=True),
    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
])
tok.decoder = decoders.ByteLevel()
CONTROL = 3
tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                        for t, ty in zip(tokens, types) if ty == CONTROL])
tok_config = {
    "bos_token": tokens[bos],
    "eos_token": tokens[eos],
    "add_bos_token": False,
    "model_max_length": config["max_position_embeddings"],
}
if "tokenizer.chat_template" in r.fields:
    tok_config["chat_template"] = field("tokenizer.chat_template")

for dtype, name, shards in ((np.float16, "float16", 1),
                            ("bfloat16", "bfloat16", 2)):
    d = os.path.join(dest, "hf-f16" if shards == 1 else "hf-bf16")
    os.makedirs(d)
    cast = {}
    for k, w in weights.items():
        if dtype == "bfloat16":
            # Round to nearest even on the top 16 bits, kept as uint16 and
            # written with a BF16 header below.
            u = w.view(np.uint32).astype(np.uint64)
            u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
            cast[k] = u.astype(np.uint16)
        else:
            cast[k] = w.astype(dtype)
    keys = list(cast)
    if shards == 1:
        save_file(cast, os.path.join(d, "model.safetensors"))
    else:
        # safetensors.numpy has no bfloat16: write uint16 ("U16") files,
        # then rewrite each header with dtype "BF16" (offsets are relative
        # to the data, which stays as it is).
        split = len(keys) // 2
        index = {"metadata": {}, "weight_map": {}}
        for s, part in enumerate((keys[:split], keys[split:])):
            fname = f"model-{s + 1:05d}-of-00002.safetensors"
            path = os.path.join(d, fname)
            save_file({k: cast[k] for k in part}, path)
            with open(path, "rb") as f:
                n = int.from_bytes(f.read(8), "little")
                header = json.loads(f.read(n))
                data = f.read()
            for k in part:
                assert header[k]["dtype"] == "U16"
                header[k]["dtype"] = "BF16"
            text = json.dumps(header, separators=(",", ":")).encode()
            text += b" " * (-len(text) % 8)
            with open(path, "wb") as f:
                f.write(len(text).to_bytes(8, "little") + text + data)
            for k in part:
                index["weight_map"][k] = fname
        index["metadata"]["total_size"] = sum(
            v.nbytes for v in cast.values())
        with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
            json.dump(index, f, indent=2)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(dict(config, torch_dtype=name), f, indent=2)
    tok.save(os.path.join(d, "tokenizer.json"))
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(tok_config, f, indent=2)
PY
rm -rf "$out/hf-f16" "$out/hf-bf16"
mv "$tmp/hf-f16" "$tmp/hf-bf16" "$out/"
echo "$out/hf-f16"
echo "$out/hf-bf16"
