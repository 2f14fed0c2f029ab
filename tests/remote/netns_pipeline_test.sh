#!/bin/bash
# The main program on three hosts of their own (see netns_hosts.sh: a client
# and two workers on a switch, 1 Gbit/s links): the workers are the pipeline
# stages, the client only feeds them. Passes when the tokens and logits
# equal the CPU's alone, the pipelined run equals one in flight, and the
# activations between the stages went from w1 to w2 (at least every prompt
# token's row, in both runs), not through the client.
# Needs root and network namespaces; elsewhere it says SKIPPED and passes.
set -u
bin="$TEST_SRCDIR/$TEST_WORKSPACE/examples/pipelined_inference"
worker="$TEST_SRCDIR/$TEST_WORKSPACE/backends/remote/ferry_worker"
compare="$TEST_SRCDIR/$TEST_WORKSPACE/tests/testing/compare_program_runs.py"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
source "$(dirname "$0")/netns_hosts.sh"
skip() { echo "SKIPPED: $*"; exit 0; }
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  netns_hosts_down
}
trap cleanup EXIT
netns_hosts_up 1gbit || skip "$netns_skip_reason"
export UCX_TLS=tcp FERRY_WORKER_TOKEN=netns-pipeline-test
embd=256
small=(--layers=4 --embd=$embd --heads=4 --kv_heads=2 --ff=384 --vocab=128
       --requests=8 --prompt_tokens=24 --gen_tokens=6 --batch_tokens=8)
source "$(dirname "$0")/program_test_lib.sh"

# start_worker N NS ADDRESS
start_worker() {
  ip netns exec "$2" "$worker" --listen="$3:7070" --devices=cpu --peers=10.77.0.1,10.77.0.2,10.77.0.3,10.77.0.4 \
    >"$tmp/worker$1.out" 2>"$tmp/worker$1.err" &
  pids+=($!)
  for _ in $(seq 1 200); do
    grep -q "listening on" "$tmp/worker$1.out" && return 0
    sleep 0.05
  done
  echo "worker $1 did not start: $(cat "$tmp/worker$1.err")"
  exit 1
}
start_worker 1 "$ns_w1" 10.77.0.2
start_worker 2 "$ns_w2" 10.77.0.3
w1="remote:10.77.0.2:7070/cpu"
w2="remote:10.77.0.3:7070/cpu"
on_client() { ip netns exec "$ns_client" "$@"; }

# Bytes so far from w1 to the client, from w1 to w2, from w2 to the client.
sent() {
  echo "$(netns_bytes_sent "$ns_w1" 1) $(netns_bytes_sent "$ns_w1" 3) $(netns_bytes_sent "$ns_w2" 1)"
}
read -r w1c_0 w1w2_0 w2c_0 <<<"$(sent)"
out=$(on_client timeout 120 "$bin" "${small[@]}" --backends="$w1,$w2,cpu" 2>"$tmp/w.err")
rc=$?
read -r w1c_1 w1w2_1 w2c_1 <<<"$(sent)"
echo "$out"
if [[ $rc -ne 0 ]]; then
  fail "workload: exit $rc: $(report "$tmp/w.err")"
else
  [[ "$out" == *"$w1: layers"* ]] || fail "no layers on the first worker"
  [[ "$out" == *"$w2: layers"* ]] || fail "no layers on the second worker"
  [[ "$out" == *" 0 of 8 requests' tokens differ"* ]] ||
    fail "pipelined and one in flight disagree"
  prompt=$(sed -n 's/^workload: [0-9]* requests, \([0-9]*\) prompt tokens.*/\1/p' <<<"$out")
  # Both runs (one in flight, pipelined) pass every prompt token's f32 row
  # from the first stage to the second.
  floor=$((2 * ${prompt:-0} * embd * 4))
  w1w2=$((w1w2_1 - w1w2_0))
  w1c=$((w1c_1 - w1c_0))
  echo "bytes sent: w1 to w2 $w1w2, w1 to the client $w1c, w2 to the client $((w2c_1 - w2c_0)) (activations at least $floor)"
  ((floor > 0)) || fail "no prompt token count in the output"
  ((w1w2 >= floor)) || fail "w1 sent w2 $w1w2 bytes, under the $floor of the activations"
  ((w1c < floor)) || fail "w1 sent the client $w1c bytes: activations went through it"
fi

prompts_match_cpu "$w1,$w2,cpu" ip netns exec "$ns_client"
finish
