#!/usr/bin/env bash
# gpu_check.sh: everything ferry can check on a GPU, in one command, for a
# bare GPU machine with minutes to spare (CUDA 13 at /usr/local/cuda).
#
#   tools/gpu_check.sh [--out DIR] [--build-only] [--skip-build] [--fake]
#
# Prints the driver and toolkit, builds only the targets it runs (one
# configuration, --config=opt, so the benchmark measures optimised code),
# then runs, in order, each alone (--local_test_jobs=1) under --config=gpu
# (a GPU test that finds no usable GPU fails) with no SKIPPED accepted:
#    1 kernels      every op and cuBLAS (cuda_kernels_test)
#    2 probe        probe and registry tests
#    3 backend      backend and sticky-error tests
#    4 conformance  the backend conformance suite on CUDA
#    5 scheduler    the scheduler on CUDA (tests/cuda)
#    6 program      the main program, --backends=cuda0,cpu against
#                   --backends=cpu on one small synthetic model: the same
#                   tokens, logits within 1e-4 of the largest
#    7 benchmark    copy bandwidth, copy/compute overlap, launch cost, GEMM
#    8 memcheck     compute-sanitizer memcheck and racecheck on the kernel
#                   test, if compute-sanitizer is present
# and writes one summary ($OUT/summary.txt) saying what passed, what failed
# and what it could not run, and why. Exits non-zero unless every step
# passed. Budget: 8 minutes on a 16-core machine; most of it is the build.
# GPU_CHECK_BUDGET_S (default 480) bounds the whole run: the benchmark and
# the sanitizer runs get at most what is left of it, and a step with under
# 20 s left is not run (the summary says so) instead of overrunning.
# --build-only stops after the build (to time it on a machine without a
# GPU); --skip-build runs the steps on what is built; --fake runs steps 1-6
# on the fake CUDA runtime (the tests' `_on_fake` twins, the program linked
# with the fake), to check this script itself where there is no GPU.
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1
root=$PWD
out="$root/gpu_check_out"
build_only=0
skip_build=0
fake=0
while (($#)); do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --build-only) build_only=1; shift ;;
    --skip-build) skip_build=1; shift ;;
    --fake) fake=1; shift ;;
    *) echo "gpu_check.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
summary="$out/summary.txt"
: >"$summary"
cuda="${CUDA_PATH:-/usr/local/cuda}"
failed=0
budget=${GPU_CHECK_BUDGET_S:-480}
# cap N: N seconds, or what is left of the budget if less.
cap() {
  local left=$((budget - SECONDS))
  ((left < $1)) && echo "$left" || echo "$1"
}
# over_budget NAME: true (and the summary says so) when under 20 s are left.
over_budget() {
  if (($(cap 20) < 20)); then
    note "$(printf '%-12s %-8s' "$1" "NOT RUN") the ${budget}s budget is spent (${SECONDS}s so far)"
    failed=1
    return 0
  fi
  return 1
}

note() { echo "$*" | tee -a "$summary"; }
# step NAME STATUS DETAIL: one line of the summary.
step() {
  local name=$1 status=$2 detail=${3:-}
  [[ "$status" == PASS ]] || failed=1
  note "$(printf '%-12s %-8s %4ss  %s' "$name" "$status" \
           "$((SECONDS - step_start))" "$detail")"
}

# --- What this machine has. ---
note "ferry gpu_check $(git rev-parse --short HEAD 2>/dev/null) on $(hostname)," \
     "$(nproc) cores, $(date -u +%FT%TZ)"
gpu=0
gpus=0
if ((fake)); then
  gpu=1
  gpus=2  # The fake's default.
  note "driver: the fake CUDA runtime (--fake: steps 1-6 on the test double)"
elif command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  gpu=1
  gpus=$(nvidia-smi -L | grep -c '^GPU')
  note "driver: $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)"
  nvidia-smi --query-gpu=index,name,memory.total,compute_cap \
    --format=csv,noheader | sed 's/^/gpu: /' | tee -a "$summary"
else
  note "driver: none (nvidia-smi missing or finds no GPU): no step can run"
fi
if [[ -x "$cuda/bin/nvcc" && -f "$cuda/lib64/libcudart_static.a" ]]; then
  note "toolkit: $("$cuda/bin/nvcc" --version | grep -o 'release [0-9.]*, V[0-9.]*') at $cuda"
else
  note "toolkit: missing ($cuda/bin/nvcc or lib64/libcudart_static.a):" \
       "every CUDA target is incompatible; nothing to build"
  exit 1
fi

# --- Build (one configuration for every step). ---
# GPU_CHECK_BAZEL_FLAGS: more flags for every bazel call (e.g.
# --disk_cache= to time a cold build).
read -r -a extra <<<"${GPU_CHECK_BAZEL_FLAGS:-}"
readonly CONFIG=(--config=opt --config=gpu "${extra[@]}")
suffix=""
program_target=//examples:pipelined_inference
if ((fake)); then
  suffix=_on_fake
  program_target=//tests/cuda:pipelined_inference_on_fake_cuda
fi
readonly KERNELS=//backends/cuda/kernels:cuda_kernels_test"$suffix"
readonly PROBE=(//backends/cuda:cuda_probe_test"$suffix"
                //backends/cuda:cuda_registry_test"$suffix")
readonly BACKEND=(//backends/cuda:cuda_backend_test"$suffix"
                  //backends/cuda:cuda_sticky_error_test"$suffix")
readonly CONFORMANCE=//backends/cuda:cuda_conformance_test"$suffix"
readonly SCHEDULER=//tests/cuda:cuda_scheduler_test"$suffix"
readonly TESTS=("$KERNELS" "${PROBE[@]}" "${BACKEND[@]}" "$CONFORMANCE"
                "$SCHEDULER")
BINARIES=("$program_target")
((fake)) || BINARIES+=(//backends/cuda:cuda_benchmark)
bazel=("$root/bazelw")
bin_dir=$("${bazel[@]}" info "${CONFIG[@]}" bazel-bin 2>/dev/null)
testlogs=$("${bazel[@]}" info "${CONFIG[@]}" bazel-testlogs 2>/dev/null)
if ((!skip_build)); then
  step_start=$SECONDS
  jobs=$(nproc)
  if "${bazel[@]}" build "${CONFIG[@]}" --jobs="$jobs" "${TESTS[@]}" \
       "${BINARIES[@]}" >"$out/build.log" 2>&1; then
    step build PASS "${#TESTS[@]} tests, ${#BINARIES[@]} programs"
    # Bazel must never run two GPU binaries at once: every GPU test is
    # exclusive (bazel/cuda.bzl).
    step_start=$SECONDS
    shared=$("${bazel[@]}" query 'attr(tags, "requires-gpu", tests(//...))
               except attr(tags, "exclusive", tests(//...))' 2>/dev/null)
    if [[ -z "$shared" ]]; then
      step exclusive PASS "every requires-gpu test is tagged exclusive"
    else
      step exclusive FAIL "not exclusive: $(echo $shared)"
    fi
  else
    step build FAIL "see $out/build.log: $(grep -m1 -E 'ERROR|error:' "$out/build.log")"
    note "could not run: every step (the build failed)"
    exit 1
  fi
fi
if ((build_only)); then
  note "total ${SECONDS}s (build only)"
  exit "$failed"
fi
if ((!gpu)); then
  note "could not run: every step (no GPU)"
  exit 1
fi

# A test's log says it ran tests and skipped none, except, on a machine
# with one GPU, those that say they need more ("needs 2 CUDA devices, this
# machine has 1": cuda1's conformance instance, peer copies).
no_skips() {
  log_ran_all "$testlogs/$(sed 's|^//||; s|:|/|' <<<"$1")/test.log"
}
# log_ran_all LOG: the same verdict on a GoogleTest binary's output.
log_ran_all() {
  local log=$1
  [[ -f "$log" ]] || { echo "no log"; return 1; }
  local passed skipped allowed=0
  passed=$(grep -o '^\[  PASSED  \] [0-9]* test' "$log" | grep -o '[0-9][0-9]*')
  skipped=$(grep -c '^\[  SKIPPED \] .* ([0-9]* ms)$' "$log")
  if ((gpus < 2)); then
    allowed=$(grep -c 'needs [0-9]* CUDA devices, this machine has [01]\b' "$log")
  fi
  if ((skipped > allowed)); then
    echo "$skipped skipped ($allowed need more GPUs): $(grep -m1 -B1 '^\[  SKIPPED \]' "$log" | head -1)"
    return 1
  fi
  [[ -n "$passed" ]] || { echo "no test ran"; return 1; }
  echo "$passed passed$( ((skipped)) && echo ", $skipped need more GPUs")"
}

# run_tests NAME TARGET...: the targets, one at a time, nothing skipped.
run_tests() {
  local name=$1
  shift
  step_start=$SECONDS
  local detail=() status=PASS
  if ! "${bazel[@]}" test "${CONFIG[@]}" --local_test_jobs=1 \
         --test_output=errors "$@" >"$out/$name.log" 2>&1; then
    status=FAIL
  fi
  for target in "$@"; do
    local why
    why=$(no_skips "$target") || status=FAIL
    detail+=("${target##*:}: $why")
  done
  step "$name" "$status" "$(IFS=';'; echo "${detail[*]}")"
}

run_tests kernels "$KERNELS"
run_tests probe "${PROBE[@]}"
run_tests backend "${BACKEND[@]}"
run_tests conformance "$CONFORMANCE"
run_tests scheduler "$SCHEDULER"

# --- The main program on cuda0,cpu against cpu. ---
step_start=$SECONDS
program="$bin_dir/$(sed 's|^//||; s|:|/|' <<<"$program_target")"
small=(--layers=2 --embd=64 --heads=4 --kv_heads=2 --ff=96 --vocab=128
       --requests=4 --prompt_tokens=12 --gen_tokens=4 --batch_tokens=8)
cat >"$out/prompts.jsonl" <<'JSONL'
{"id": "a", "tokens": [1, 2, 3, 4, 5, 6, 7, 8, 9], "max_new_tokens": 5, "logits_positions": [0, 4, 8]}
{"id": "b", "tokens": [90, 17], "max_new_tokens": 6, "logits_positions": [1]}
{"id": "c", "tokens": [3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3], "max_new_tokens": 3, "logits_positions": [12]}
JSONL
program_ok=1
for backends in cpu cuda0,cpu; do
  name=${backends//,/_}
  if ! timeout 120 "$program" "${small[@]}" --backends="$backends" \
       --prompts="$out/prompts.jsonl" --dump_logits="$out/$name.npy" \
       >"$out/$name.jsonl" 2>"$out/$name.err"; then
    program_ok=0
    program_why="--backends=$backends failed: $(tail -1 "$out/$name.err")"
  fi
done
if ((program_ok)); then
  if why=$(python3 tests/testing/compare_program_runs.py "$out/cpu.jsonl" \
             "$out/cpu.npy" "$out/cuda0_cpu.jsonl" "$out/cuda0_cpu.npy" \
             1e-4 3 640 2>&1); then
    step program PASS "cuda0,cpu = cpu (tokens; logits within 1e-4)"
  else
    step program FAIL "$why"
  fi
else
  step program FAIL "$program_why"
fi

if ((fake)); then
  note "could not run: benchmark, memcheck, racecheck (--fake: they need a GPU)"
  note "total ${SECONDS}s; $( ((failed)) && echo 'FAILED' || echo 'all passed'); logs in $out"
  exit "$failed"
fi

# --- The benchmark. ---
step_start=$SECONDS
if over_budget benchmark; then
  :
elif timeout "$(cap 180)" "$bin_dir/backends/cuda/cuda_benchmark" \
     --benchmark_min_time=0.05 --benchmark_format=console \
     --benchmark_out="$out/benchmark.json" --benchmark_out_format=json \
     >"$out/benchmark.txt" 2>&1; then
  if grep -qi 'error occurred\|skipped' "$out/benchmark.txt" ||
     grep -q '"error_occurred": true' "$out/benchmark.json"; then
    step benchmark FAIL "a case skipped or failed: see $out/benchmark.txt"
  else
    step benchmark PASS "$(grep -c '^BM_' "$out/benchmark.txt") cases: $out/benchmark.txt"
  fi
else
  step benchmark FAIL "exit $?: $(tail -1 "$out/benchmark.txt")"
fi

# --- compute-sanitizer on the kernel test. ---
# memcheck on every case; racecheck (much slower) on the kernels with
# shared memory and warp shuffles: the row ops and the quantized dot.
# FERRY_REQUIRE_GPU=1: a test that finds no GPU fails here too, and the
# output must show every selected test run, none skipped.
sanitizer="$cuda/bin/compute-sanitizer"
kernels="$bin_dir/backends/cuda/kernels/cuda_kernels_test"
declare -A filter=([memcheck]='*'
                   [racecheck]='*norm*:*soft_max*:*rope*:*gemv*:*decode_batch*')
for tool in memcheck racecheck; do
  step_start=$SECONDS
  if [[ ! -x "$sanitizer" ]]; then
    note "$(printf '%-12s %-8s' "$tool" "NOT RUN") no $sanitizer"
    continue
  fi
  over_budget "$tool" && continue
  if FERRY_REQUIRE_GPU=1 timeout "$(cap 150)" "$sanitizer" --tool "$tool" \
       --error-exitcode 3 "$kernels" --gtest_filter="${filter[$tool]}" \
       >"$out/$tool.log" 2>&1; then
    if why=$(log_ran_all "$out/$tool.log"); then
      step "$tool" PASS "$why; $(grep -m1 'ERROR SUMMARY' "$out/$tool.log")"
    else
      step "$tool" FAIL "$why (see $out/$tool.log)"
    fi
  else
    rc=$?
    ((rc == 124)) && why="timed out" || why="exit $rc"
    step "$tool" FAIL "$why: $(grep -m1 -E 'ERROR SUMMARY|FAILED' "$out/$tool.log") (see $out/$tool.log)"
  fi
done

note "total ${SECONDS}s; $( ((failed)) && echo 'FAILED' || echo 'all passed'); logs in $out"
exit "$failed"
