#!/bin/bash
# The inference program as a new user meets it: bad flags and files are
# refused at once with a reason, outputs are what they claim, and nothing
# else is printed. Each case is a bug once found by trying it.
set -u
bin="$TEST_SRCDIR/$TEST_WORKSPACE/examples/pipelined_inference"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
small=(--layers=2 --embd=64 --heads=4 --kv_heads=2 --ff=96 --vocab=128
       --requests=4 --prompt_tokens=12 --gen_tokens=4 --batch_tokens=8
       --n_copies=4 "--sim=flops=1T,bw=1TB/s")
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# expect_error NAME SUBSTRING ARGS...: exits non-zero within 20 s, stderr
# has SUBSTRING.
expect_error() {
  local name="$1" want="$2"; shift 2
  local err rc
  err=$(timeout 20 "$bin" "$@" 2>&1 >/dev/null); rc=$?
  if [[ $rc -eq 0 ]]; then fail "$name: exit 0"; return; fi
  if [[ $rc -eq 124 ]]; then fail "$name: hung"; return; fi
  [[ "$err" == *"$want"* ]] || fail "$name: stderr lacks '$want': $err"
}

expect_error batches-zero "--requests: 0 must be >= 1" --requests=0
expect_error prompt-zero "--prompt_tokens: 0 must be >= 1" --prompt_tokens=0
expect_error gen-negative "--gen_tokens: -5 must be >= 1" --gen_tokens=-5
expect_error threads-negative "--cpu_threads: -4 must be >= 0" --cpu_threads=-4
expect_error stray-argument "unexpected argument 'extra'" "${small[@]}" extra
expect_error huge-split "overflow" "${small[@]}" --split=1e308,1e308,0
expect_error nan-split "--split: 'nan'" "${small[@]}" --split=nan,1,0
expect_error split-by-unknown "--split_by: 'bytes' is neither" "${small[@]}" \
  --split_by=bytes
expect_error spaced-backends "item ' cpu' is not a device name" \
  "${small[@]}" "--backends=sim0, cpu"
start=$(date +%s)
expect_error trace-missing-dir "directory '$tmp/no/such' does not exist" \
  "${small[@]}" --trace="$tmp/no/such/t.json"
(( $(date +%s) - start < 10 )) || fail "trace-missing-dir: not refused at once"
mkfifo "$tmp/fifo"
expect_error weights-fifo "is a FIFO" "${small[@]}" --weights="$tmp/fifo"
expect_error weights-directory "is a directory" "${small[@]}" --weights="$tmp"
expect_error model-fifo "is a FIFO" --model="$tmp/fifo"
expect_error model-directory-not-hf "$tmp/config.json" --model="$tmp"
echo hello > "$tmp/not.gguf"
expect_error model-not-gguf "no \"GGUF\" magic" --model="$tmp/not.gguf"
expect_error model-and-weights "exclusive" --model="$tmp/not.gguf" \
  --weights="$tmp/not.gguf"
expect_error prompt-without-model "--prompt needs --model" --prompt=hi

# --help and a default-sized run say nothing about CUDA on a machine
# without it (nobody asked for a CUDA device).
help=$("$bin" --help 2>&1)
[[ "$help" != *"CUDA"* ]] || fail "--help mentions CUDA"
out=$("$bin" "${small[@]}" 2>"$tmp/err"); rc=$?
[[ $rc -eq 0 ]] || fail "small run: exit $rc: $(cat "$tmp/err")"
[[ "$(cat "$tmp/err")" != *"CUDA"* ]] || fail "run mentions CUDA"
[[ "$out" == *"speedup of pipelined x4 over one in flight"* ]] ||
  fail "report lacks the speedup: $out"
[[ "$out" == *"0 of 4 requests' tokens differ"* ]] ||
  fail "pipelined and one-in-flight runs disagree: $out"

# A split by weight bytes that cuts layer 1 after its attention: the
# placement says so, and the tokens are the one-in-flight run's.
out=$("$bin" "${small[@]}" --split=3,2,0 --split_by=weights 2>"$tmp/err"); rc=$?
[[ $rc -eq 0 ]] || fail "split by weights: exit $rc: $(cat "$tmp/err")"
[[ "$out" == *"layers 0-1 (of 1: blk.1.attn_q, blk.1.attn_k, blk.1.attn_v, blk.1.attn_output)"* ]] ||
  fail "split by weights: placement not cut in layer 1: $out"
[[ "$out" == *"0 of 4 requests' tokens differ"* ]] ||
  fail "split by weights: runs disagree: $out"

# Requests from a file: results as JSON lines on stdout as each request
# finishes (so in any order), logits as .npy.
cat > "$tmp/prompts.jsonl" <<'JSONL'
{"id": "a", "tokens": [1, 2, 3, 4], "max_new_tokens": 3, "logits_positions": [1, 3]}
{"id": "b", "tokens": [5, 6], "max_new_tokens": 2, "temperature": 0.7, "seed": 3}
JSONL
"$bin" "${small[@]}" --prompts="$tmp/prompts.jsonl" \
  --dump_logits="$tmp/l.npy" >"$tmp/results.jsonl" 2>"$tmp/err" ||
  fail "prompts run: $(cat "$tmp/err")"
python3 - "$tmp/results.jsonl" "$tmp/l.npy" <<'PY' || fail "prompts outputs"
import json, struct, sys
lines = sorted((json.loads(l) for l in open(sys.argv[1])), key=lambda l: l["id"])
assert [l["id"] for l in lines] == ["a", "b"], lines
assert len(lines[0]["tokens"]) == 3 and len(lines[1]["tokens"]) == 2, lines
assert lines[0]["logits_rows"] == {"1": 0, "3": 1}, lines[0]
data = open(sys.argv[2], "rb").read()
assert data[:6] == b"\x93NUMPY", data[:8]
n = struct.unpack("<H", data[8:10])[0]
header = data[10:10 + n].decode()
assert "'shape': (2, 128)" in header, header
assert len(data) == 10 + n + 2 * 128 * 4
PY

# Loading weights with a trace: one clock for the load and the run (the
# trace spans seconds, not the machine's uptime) and a drawn timeline.
"$bin" "${small[@]}" --write_weights="$tmp/w.safetensors" >/dev/null ||
  fail "write_weights"
"$bin" "${small[@]}" --weights="$tmp/w.safetensors" --trace="$tmp/t.json" \
  --timeline="$tmp/t.svg" >/dev/null 2>"$tmp/err" ||
  fail "weights+trace: $(cat "$tmp/err")"
python3 - "$tmp/t.json" "$tmp/t.svg" <<'PY' || fail "trace clocks"
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
spans = [e for e in events if e["ph"] == "X"]
pids = {e["args"]["name"]: e["pid"] for e in events
        if e["ph"] == "M" and e["name"] == "process_name"}
names = set(pids)
assert any(e["pid"] == pids["disk"] for e in spans), "no load spans"
end = max(e["ts"] + e["dur"] for e in spans)
assert end < 60e6, f"trace spans {end / 1e6:.0f} s"
assert {"sim0", "sim1", "sched", "disk"} <= names, names
assert len({e["pid"] for e in spans}) > 1
svg = open(sys.argv[2]).read()
assert svg.count("<rect") > 20, "empty timeline"
PY

# All-NaN weights: the run says so and fails, instead of "max |diff| 0".
python3 - "$tmp/w.safetensors" "$tmp/nan.safetensors" <<'PY'
import struct, sys
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
nan = struct.pack("<f", float("nan"))
body = nan * ((len(data) - 8 - n) // 4)
open(sys.argv[2], "wb").write(data[:8 + n] + body)
PY
out=$("$bin" "${small[@]}" --weights="$tmp/nan.safetensors" 2>&1); rc=$?
[[ $rc -ne 0 ]] || fail "NaN weights: exit 0"
[[ "$out" == *"NaN/Inf logits"* ]] || fail "NaN weights not reported: $out"

# The same weights as a Hugging Face directory (HF names, Q/K rows in
# rotate-half order, a small byte-level tokenizer.json): --model=DIR gives
# the tokens --weights gives, and --prompt text goes through its tokenizer.
python3 - "$tmp/w.safetensors" "$tmp/hf" <<'PY'
import json, os, struct, sys
src, dest = sys.argv[1:]
data = open(src, "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
meta = header.pop("__metadata__")
body = data[8 + n:]
hd = int(meta["n_embd"]) // int(meta["n_head"])
layer = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj",
         "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
         "attn_output": "self_attn.o_proj",
         "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj",
         "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
top = {"tok_embd": "model.embed_tokens", "output_norm": "model.norm",
       "output": "lm_head"}
out, chunks, off = {}, [], 0
for name, info in sorted(header.items(), key=lambda t: t[1]["data_offsets"]):
    b, e = info["data_offsets"]
    raw = body[b:e]
    parts = name.split(".")
    hf = (top[name] if name in top
          else f"model.layers.{parts[1]}.{layer[parts[2]]}") + ".weight"
    if parts[-1] in ("attn_q", "attn_k"):
        # ferry's file rotates rows (2i, 2i+1) of a head; HF rows i, i+hd/2.
        rows, rb = info["shape"][0], info["shape"][1] * 4
        hf_rows = [None] * rows
        for r in range(rows):
            h, i = divmod(r, hd)
            hf_rows[h * hd + (i % 2) * (hd // 2) + i // 2] = raw[r * rb:(r + 1) * rb]
        raw = b"".join(hf_rows)
    out[hf] = {"dtype": "F32", "shape": info["shape"],
               "data_offsets": [off, off + len(raw)]}
    chunks.append(raw)
    off += len(raw)
os.makedirs(dest, exist_ok=True)
text = json.dumps(out).encode()
with open(f"{dest}/model.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))
json.dump({"model_type": "llama", "hidden_size": int(meta["n_embd"]),
           "num_hidden_layers": int(meta["n_layer"]),
           "num_attention_heads": int(meta["n_head"]),
           "num_key_value_heads": int(meta["n_head_kv"]),
           "intermediate_size": int(meta["n_ff"]),
           "vocab_size": int(meta["n_vocab"]),
           "max_position_embeddings": int(meta["n_ctx"]),
           "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
           "tie_word_embeddings": False}, open(f"{dest}/config.json", "w"))
# Byte-level BPE: the printable ASCII bytes, "Ġ" (space), merges to fill.
vocab = [chr(c) for c in range(0x21, 0x7f)] + ["\u0120"]
merges = [("\u0120", c) for c in "abcdefghijklmnopqrstuvwxyz"]
merges += [("h", "i"), ("t", "h"), ("e", "r"), ("r", "e"), ("i", "n"),
           ("o", "n"), ("a", "n")]
vocab += [a + b for a, b in merges]
assert len(vocab) == int(meta["n_vocab"]), len(vocab)
json.dump({"version": "1.0", "added_tokens": [], "normalizer": None,
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False,
                             "trim_offsets": True, "use_regex": True},
           "post_processor": None, "decoder": {"type": "ByteLevel"},
           "model": {"type": "BPE", "dropout": None, "unk_token": None,
                     "continuing_subword_prefix": None,
                     "end_of_word_suffix": None, "fuse_unk": False,
                     "byte_fallback": False,
                     "vocab": {t: i for i, t in enumerate(vocab)},
                     "merges": [f"{a} {b}" for a, b in merges]}},
          open(f"{dest}/tokenizer.json", "w"))
PY
echo '{"id": "a", "tokens": [5, 90, 17, 3, 64], "max_new_tokens": 6}' > "$tmp/p.jsonl"
echo '{"id": "b", "text": "hi there", "max_new_tokens": 4}' >> "$tmp/p.jsonl"
head -1 "$tmp/p.jsonl" > "$tmp/p_tokens.jsonl"
"$bin" --backends=cpu --weights="$tmp/w.safetensors" \
  --prompts="$tmp/p_tokens.jsonl" --output="$tmp/o_weights.jsonl" >/dev/null 2>&1 ||
  fail "weights run for the HF comparison"
"$bin" --backends=cpu --model="$tmp/hf" --prompts="$tmp/p.jsonl" \
  --output="$tmp/o_hf.jsonl" >/dev/null 2>"$tmp/hf.err" ||
  fail "--model=DIR: $(cat "$tmp/hf.err")"
python3 - "$tmp/o_weights.jsonl" "$tmp/o_hf.jsonl" <<'PY' || fail "--model=DIR differs from --weights"
import json, sys
w = [json.loads(l) for l in open(sys.argv[1])]
h = sorted((json.loads(l) for l in open(sys.argv[2])), key=lambda l: l["id"])
assert len(w) == 1 and len(h) == 2, (w, h)
assert w[0]["tokens"] == h[0]["tokens"], (w[0]["tokens"], h[0]["tokens"])
assert len(h[1]["tokens"]) == 4 and "text" in h[1], h[1]
PY
out=$("$bin" --backends=cpu --model="$tmp/hf" --prompt="hi there" --gen_tokens=3 2>&1) ||
  fail "--model=DIR --prompt: $out"

# A model opened by the library (models/open_model.h) with its own chat
# template: "messages" in a prompts file are formatted by it, giving what
# the hand-written ChatML text gives; an unknown template named by the user
# is refused; "messages" without a model say what they need.
tiny="$TEST_SRCDIR/$TEST_WORKSPACE/models/testdata/tiny"
cat > "$tmp/messages.jsonl" <<'JSONL'
{"id": "m", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], "max_new_tokens": 4}
{"id": "raw", "text": "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", "max_new_tokens": 4}
JSONL
"$bin" --backends=cpu --model="$tiny/qwen2.gguf" --prompts="$tmp/messages.jsonl" \
  --output="$tmp/o_messages.jsonl" >/dev/null 2>"$tmp/messages.err" ||
  fail "messages on qwen2.gguf: $(cat "$tmp/messages.err")"
python3 - "$tmp/o_messages.jsonl" <<'PY' || fail "messages differ from hand-written ChatML"
import json, sys
r = {l["id"]: l for l in map(json.loads, open(sys.argv[1]))}
assert r["m"]["prompt_tokens"] == r["raw"]["prompt_tokens"] > 10, r
assert r["m"]["tokens"] == r["raw"]["tokens"], r
PY
"$bin" --backends=cpu --model="$tiny/llama" --prompts="$tmp/messages.jsonl" \
  --output="$tmp/o_llama3.jsonl" >/dev/null 2>"$tmp/llama3.err" ||
  fail "messages on an HF llama-3 directory: $(cat "$tmp/llama3.err")"
expect_error unknown-chat-template "'alpaca' is not one of" \
  --backends=cpu --model="$tiny/qwen2.gguf" --chat_template=alpaca --prompt=hi
expect_error messages-without-model "\"messages\" need a model with a chat template" \
  "${small[@]}" --prompts="$tmp/messages.jsonl"

if [[ $failures -eq 0 ]]; then echo "all CLI checks passed"; fi
exit $failures
