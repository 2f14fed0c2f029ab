# Sourced by the tests that run the main program on ferry_worker processes
# (pipelined_inference_remote_test.sh, netns_pipeline_test.sh,
# worker_killed_test.sh). The caller sets bin (the program), compare
# (compare_program_runs.py), tmp, small (the program's model flags), worker
# (ferry_worker, for start_loopback_worker) and writes its workers' stderr to
# $tmp/worker{1,2}.err.

failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# start_loopback_worker N: a worker serving its CPU on a free loopback port;
# sets port_N and worker_pid_N. stop_workers ends them (the caller traps it
# on EXIT).
worker_pids=()
stop_workers() { local p; for p in "${worker_pids[@]}"; do kill "$p" 2>/dev/null; done; }
start_loopback_worker() {
  "$worker" --listen=127.0.0.1:0 --peers=127.0.0.1 --devices=cpu >"$tmp/worker$1.out" \
    2>"$tmp/worker$1.err" &
  worker_pids+=($!)
  eval "worker_pid_$1=$!"
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

# The end of a program's stderr, or the head of a sanitizer's report in it.
report() {
  if grep -q "WARNING: .*Sanitizer" "$1"; then
    grep -m1 -A60 "WARNING: .*Sanitizer" "$1"
  else
    tail -20 "$1"
  fi
}

# prompts_match_cpu BACKENDS [RUNNER...]: a small prompts file through the
# program on the CPU alone and on BACKENDS (each run prefixed by RUNNER,
# e.g. `ip netns exec NS`) gives the same tokens and logits. The workers run
# the CPU's kernels on the same weights: equal up to summation order.
prompts_match_cpu() {
  local remote="$1" name backends
  shift
  cat >"$tmp/prompts.jsonl" <<'JSONL'
{"id": "a", "tokens": [1, 2, 3, 4, 5, 6, 7, 8, 9], "max_new_tokens": 5, "logits_positions": [0, 4, 8]}
{"id": "b", "tokens": [90, 17], "max_new_tokens": 6, "logits_positions": [1]}
{"id": "c", "tokens": [3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3], "max_new_tokens": 3, "logits_positions": [12]}
JSONL
  for name in cpu remote; do
    backends=cpu
    [[ $name == remote ]] && backends="$remote"
    "$@" timeout 120 "$bin" "${small[@]}" --backends="$backends" \
      --prompts="$tmp/prompts.jsonl" --dump_logits="$tmp/$name.npy" \
      >"$tmp/$name.jsonl" 2>"$tmp/$name.err" ||
      fail "$name prompts: $(report "$tmp/$name.err")"
  done
  python3 "$compare" "$tmp/cpu.jsonl" "$tmp/cpu.npy" "$tmp/remote.jsonl" \
    "$tmp/remote.npy" 1e-5 3 640 || fail "the run on $remote differs from the cpu's"
}

# finish: fails on a worker's sanitizer report or error, then exits with
# the verdict.
finish() {
  local i
  for i in 1 2; do
    grep -qiE "sanitizer|error" "$tmp/worker$i.err" &&
      fail "worker $i: $(cat "$tmp/worker$i.err")"
  done
  if ((failures > 0)); then
    echo "$failures failure(s)"
    exit 1
  fi
  echo PASS
  exit 0
}
