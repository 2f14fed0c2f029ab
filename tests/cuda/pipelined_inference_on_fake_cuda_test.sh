#!/bin/bash
# The main program as a user runs it on CUDA devices, here on the fake CUDA
# runtime (the real backend code; device memory, streams, kernels and cuBLAS
# emulated on the host): --backends=cuda0,cpu and cuda0,cuda1,cpu give the
# CPU's greedy tokens and logits, the pipelined run equals one in flight,
# and the fake's device-memory race check (it aborts the process) stays
# quiet. With an f16 KV cache (the CPU attends by ranges, CUDA over a
# gathered window of the f16 cells) both stay within f16 rounding of it.
set -u
bin="$TEST_SRCDIR/$TEST_WORKSPACE/tests/cuda/pipelined_inference_on_fake_cuda"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
compare="$TEST_SRCDIR/$TEST_WORKSPACE/tests/testing/compare_program_runs.py"
small=(--layers=2 --embd=64 --heads=4 --kv_heads=2 --ff=96 --vocab=128
       --requests=4 --prompt_tokens=12 --gen_tokens=4 --batch_tokens=8)
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

cat > "$tmp/prompts.jsonl" <<'JSONL'
{"id": "a", "tokens": [1, 2, 3, 4, 5, 6, 7, 8, 9], "max_new_tokens": 5, "logits_positions": [0, 4, 8]}
{"id": "b", "tokens": [90, 17], "max_new_tokens": 6, "logits_positions": [1]}
{"id": "c", "tokens": [3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3], "max_new_tokens": 3, "logits_positions": [12]}
JSONL

for backends in cpu cuda0,cpu cuda0,cuda1,cpu; do
  name=${backends//,/_}
  # The synthetic workload: its own check that pipelined and one-in-flight
  # runs give the same tokens.
  out=$(timeout 240 "$bin" "${small[@]}" --backends="$backends" \
        2>"$tmp/$name.err"); rc=$?
  if [[ $rc -ne 0 ]]; then
    fail "$backends workload: exit $rc: $(tail -20 "$tmp/$name.err")"
  else
    [[ "$out" == *"0 of 4 requests' tokens differ"* ]] ||
      fail "$backends: pipelined and one-in-flight disagree: $out"
  fi
  # Requests from a file: tokens and logits to compare across backends.
  timeout 240 "$bin" "${small[@]}" --backends="$backends" \
    --prompts="$tmp/prompts.jsonl" --dump_logits="$tmp/$name.npy" \
    >"$tmp/$name.jsonl" 2>"$tmp/$name.err" ||
    fail "$backends prompts: $(tail -20 "$tmp/$name.err")"
done

for name in cuda0_cpu cuda0_cuda1_cpu; do
  # f32 throughout; summation orders differ (cuBLAS's emulation vs the CPU's
  # GEMM): equal to a relative 1e-4.
  python3 "$compare" "$tmp/cpu.jsonl" "$tmp/cpu.npy" "$tmp/$name.jsonl" \
      "$tmp/$name.npy" 1e-4 3 640 || fail "$name differs from cpu"
done

for backends in cpu cuda0,cpu; do
  name=f16_${backends//,/_}
  timeout 240 "$bin" "${small[@]}" --backends="$backends" --kv_cache_type=f16 \
    --prompts="$tmp/prompts.jsonl" --dump_logits="$tmp/$name.npy" \
    >"$tmp/$name.jsonl" 2>"$tmp/$name.err" ||
    fail "$backends f16 cache: $(tail -20 "$tmp/$name.err")"
  python3 "$compare" "$tmp/cpu.jsonl" "$tmp/cpu.npy" "$tmp/$name.jsonl" \
      "$tmp/$name.npy" 1e-2 3 640 || fail "$name differs from cpu in f32"
done

if ((failures > 0)); then
  echo "$failures failure(s)"
  exit 1
fi
echo PASS
