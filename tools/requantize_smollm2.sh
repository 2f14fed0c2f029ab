#!/usr/bin/env bash
# Requantizes the SmolLM2 Q4_1 GGUF (tools/fetch_smollm2.sh) with llama.cpp's
# own llama-quantize into the K-quant and iq4 files people download
# (Q4_K_M, Q5_K_M, Q6_K, Q3_K_M, Q2_K, IQ4_XS), and Q2_K_PURE (Q2_K with
# --pure: SmolLM2's 576-wide rows are not whole 256-element super-blocks, so
# the Q2_K mix has no q2_K matrix; the pure one has q2_K ffn_down), beside it
# in the cache, for
# the tests that compare ferry with llama.cpp on them (they skip, saying so,
# without them):
#   tools/requantize_smollm2.sh            # -> $HOME/.cache/ferry/smollm2/
#   LLAMA_CPP_BIN=/path/to/bin tools/requantize_smollm2.sh Q4_K_M Q6_K
# Needs a built llama.cpp (default: the llama-cpp-python 0.3.36 build under
# the cache; llama-quantize and its shared libraries in one directory).
# Requantizing from Q4_1 (--allow-requantize) is lossy twice over, which does
# not matter here: ferry and llama.cpp read the same resulting file. ~2 s a
# file on 2 cores. Idempotent; prints each path.
set -euo pipefail
cache="${FERRY_CACHE_DIR:-$HOME/.cache/ferry}"
bin="${LLAMA_CPP_BIN:-$cache/llama.cpp/0.3.36/bin}"
src="$cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
if [[ ! -x "$bin/llama-quantize" ]]; then
  echo "requantize_smollm2: no llama-quantize in $bin (set LLAMA_CPP_BIN)" >&2
  exit 1
fi
if [[ ! -s "$src" ]]; then
  echo "requantize_smollm2: no $src (run tools/fetch_smollm2.sh)" >&2
  exit 1
fi
types=("$@")
((${#types[@]})) || types=(Q4_K_M Q5_K_M Q6_K Q3_K_M Q2_K IQ4_XS Q2_K_PURE)
for type in "${types[@]}"; do
  out="$cache/smollm2/SmolLM2-135M-Instruct.$type.gguf"
  flags=(--allow-requantize)
  [[ $type == *_PURE ]] && flags+=(--pure)
  if [[ ! -s "$out" ]]; then
    LD_LIBRARY_PATH="$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
      "$bin/llama-quantize" "${flags[@]}" "$src" "$out.tmp" "${type%_PURE}" 2 \
      >"$out.log" 2>&1 || {
      echo "requantize_smollm2: llama-quantize $type failed, see $out.log" >&2
      rm -f "$out.tmp"
      exit 1
    }
    mv "$out.tmp" "$out"
    rm -f "$out.log"
  fi
  echo "$out"
done
