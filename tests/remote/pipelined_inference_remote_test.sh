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
source "$(dirname "$0")/program_test_lib.sh"
trap stop_workers EXIT
start_loopback_worker 1
start_loopback_worker 2
remote="remote:127.0.0.1:$port_1/cpu,remote:127.0.0.1:$port_2/cpu,cpu"

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
prompts_match_cpu "$remote"
finish
