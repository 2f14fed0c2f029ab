#!/bin/bash
# A worker killed mid-run (issue #32 item 6): the main program on two
# ferry_worker processes streams its results to --output; once the short
# requests' results are written, `kill -9` of the second worker must make the
# program exit non-zero at once with a status that names the device, the
# worker and what it was doing, and the results already written must still be
# there, whole.
set -u
bin="$TEST_SRCDIR/$TEST_WORKSPACE/examples/pipelined_inference"
worker="$TEST_SRCDIR/$TEST_WORKSPACE/backends/remote/ferry_worker"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
export UCX_TLS=tcp
export FERRY_WORKER_TOKEN="pipelined-inference-worker-killed-test"
small=(--layers=4 --embd=64 --heads=4 --kv_heads=2 --ff=96 --vocab=128
       --ctx=4096)
source "$(dirname "$0")/program_test_lib.sh"
trap stop_workers EXIT
start_loopback_worker 1
start_loopback_worker 2
device="remote:127.0.0.1:$port_2/cpu"

# Two requests that finish after a few tokens, six that would take
# thousands of steps: the kill lands while those run.
python3 - >"$tmp/prompts.jsonl" <<'PY'
import json
for i in range(2):
    print(json.dumps({"id": f"short{i}", "tokens": [1 + i, 2, 3],
                      "max_new_tokens": 2}))
for i in range(6):
    print(json.dumps({"id": f"long{i}", "tokens": [5 + i, 6, 7],
                      "max_new_tokens": 3000}))
PY
out="$tmp/results.jsonl"
timeout 60 "$bin" "${small[@]}" \
  --backends="remote:127.0.0.1:$port_1/cpu,$device,cpu" \
  --prompts="$tmp/prompts.jsonl" --output="$out" >/dev/null 2>"$tmp/err" &
program=$!

# Waits (up to 30 s) for both short results, then kills the second worker.
for _ in $(seq 1 600); do
  [[ $(grep -c '"short' "$out" 2>/dev/null) -ge 2 ]] && break
  kill -0 "$program" 2>/dev/null || break
  sleep 0.05
done
if [[ $(grep -c '"short' "$out" 2>/dev/null) -lt 2 ]]; then
  fail "the short results never came: $(report "$tmp/err")"
  kill "$program" 2>/dev/null
  finish
fi
kill -9 "$worker_pid_2"
killed=$(date +%s)
wait "$program"
rc=$?
waited=$(($(date +%s) - killed))

# Exits non-zero (not killed by its timeout or a signal), and soon.
[[ $rc -eq 1 ]] || fail "exit $rc after the kill (want 1): $(report "$tmp/err")"
((waited <= 10)) || fail "took ${waited} s to exit after the kill"
# The status names the device, the worker and what it was doing.
status=$(grep "^pipelined_inference: " "$tmp/err")
[[ -n "$status" ]] || fail "no status printed: $(report "$tmp/err")"
[[ "$status" == *"UNAVAILABLE"* ]] || fail "not UNAVAILABLE: $status"
[[ "$status" == *"$device"* ]] || fail "the status lacks the device $device: $status"
[[ "$status" == *"remote worker 127.0.0.1:$port_2"* ]] ||
  fail "the status lacks the worker 127.0.0.1:$port_2: $status"
# (A batch's split, a stage's stream, or, when the kill lands while a new
# bucket is planned, its buffers.)
[[ "$status" =~ batch\ [0-9]+:\ split\ [0-9]+\ on|cannot\ make\ a\ .*stream|cannot\ allocate\ .*buffer ]] ||
  fail "the status does not say what was being done: $status"
[[ "$status" == *"connection lost"* ]] ||
  fail "the status does not say the connection was lost: $status"
# The results written before the kill are whole lines, the short ones
# among them; none of the long ones could have finished.
python3 - "$out" <<'PY' || fail "results before the kill: $(cat "$out")"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
ids = sorted(l["id"] for l in lines)
assert ids == ["short0", "short1"], ids
for l in lines:
    assert l["finish"] == "length" and len(l["tokens"]) == 2, l
PY

# The surviving worker reports nothing wrong (finish reads both workers'
# stderr: the killed one's is empty).
finish
