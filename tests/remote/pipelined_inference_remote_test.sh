#!/bin/bash
# The main program with two ferry_worker processes as pipeline stages
# (--backends=remote:...,remote:...,cpu over loopback TCP): the same greedy
# tokens and logits as the CPU alone, and the pipelined run equal to one in
# flight.
set -u
bin="$TEST_SRCDIR/$TEST_WORKSPACE/examples/pipelined_inference"
worker="$TEST_SRCDIR/$TEST_WORKSPACE/backends/remote/ferry_worker"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
compare="$TEST_SRCDIR/$TEST_WORKSPACE/tests/testing/compare_program_runs.py"
export UCX_TLS=tcp
export FERRY_WORKER_TOKEN="pipelined-inference-remote-test"
small=(--layers=4 --embd=64 --heads=4 --kv_heads=2 --ff=96 --vocab=128
       --requests=4 --prompt_tokens=12 --gen_tokens=4 --batch_tokens=8)
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
# The end of a program's stderr, or the head of a sanitizer's report in it.
report() {
  if grep -q "WARNING: .*Sanitizer" "$1"; then
    grep -m1 -A60 "WARNING: .*Sanitizer" "$1"
  else
    tail -20 "$1"
  fi
}
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; }
trap cleanup EXIT

# start_worker N: a worker on a free port; sets port_N.
start_worker() {
  "$worker" --listen=127.0.0.1:0 --devices=cpu >"$tmp/worker$1.out" \
    2>"$tmp/worker$1.err" &
  pids+=($!)
  for _ in $(seq 1 200); do
    if grep -q "listening on" "$tmp/worker$1.out"; then
      local line
      line=$(grep -m1 "listening on" "$tmp/worker$1.out")
      line=${line#*listening on 127.0.0.1:}
      eval "port_$1=${line%% *}"
      return 0
    fi
    sleep 0.05
  done
  echo "worker $1 did not start: $(cat "$tmp/worker$1.err")"
  exit 1
}
start_worker 1
start_worker 2
remote="remote:127.0.0.1:$port_1/cpu,remote:127.0.0.1:$port_2/cpu,cpu"

cat > "$tmp/prompts.jsonl" <<'JSONL'
{"id": "a", "tokens": [1, 2, 3, 4, 5, 6, 7, 8, 9], "max_new_tokens": 5, "logits_positions": [0, 4, 8]}
{"id": "b", "tokens": [90, 17], "max_new_tokens": 6, "logits_positions": [1]}
{"id": "c", "tokens": [3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3], "max_new_tokens": 3, "logits_positions": [12]}
JSONL

out=$(timeout 120 "$bin" "${small[@]}" --backends="$remote" 2>"$tmp/w.err")
rc=$?
if [[ $rc -ne 0 ]]; then
  fail "workload: exit $rc: $(report "$tmp/w.err")"
else
  [[ "$out" == *"remote:127.0.0.1:$port_1/cpu: layers"* ]] ||
    fail "no layers on the first worker: $out"
  [[ "$out" == *"remote:127.0.0.1:$port_2/cpu: layers"* ]] ||
    fail "no layers on the second worker: $out"
  [[ "$out" == *"0 of 4 requests' tokens differ"* ]] ||
    fail "pipelined and one-in-flight disagree: $out"
fi
for name in cpu remote; do
  backends=cpu
  [[ $name == remote ]] && backends=$remote
  timeout 120 "$bin" "${small[@]}" --backends="$backends" \
    --prompts="$tmp/prompts.jsonl" --dump_logits="$tmp/$name.npy" \
    >"$tmp/$name.jsonl" 2>"$tmp/$name.err" ||
    fail "$name prompts: $(report "$tmp/$name.err")"
done
# The workers run the CPU's kernels on the same weights: equal up to
# summation order.
python3 "$compare" "$tmp/cpu.jsonl" "$tmp/cpu.npy" "$tmp/remote.jsonl" \
    "$tmp/remote.npy" 1e-5 3 640 || fail "remote run differs from cpu"
for i in 1 2; do
  grep -qiE "sanitizer|error" "$tmp/worker$i.err" &&
    fail "worker $i: $(cat "$tmp/worker$i.err")"
done
if ((failures > 0)); then
  echo "$failures failure(s)"
  exit 1
fi
echo PASS
