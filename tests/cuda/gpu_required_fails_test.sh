#!/bin/bash
# Under --config=gpu (FERRY_REQUIRE_GPU=1) a GPU test binary that finds no
# usable GPU fails instead of skipping: here the real tests' sources on the
# fake CUDA runtime with a driver older than the runtime (no usable device).
#   gpu_required_fails_test.sh BINARY [GTEST_FILTER]
# Passes when BINARY exits non-zero, says FERRY_REQUIRE_GPU=1 and the
# versions, and skipped nothing in the filter.
set -u
bin="$TEST_SRCDIR/$TEST_WORKSPACE/$1"
filter="${2:-*}"
log="${TEST_TMPDIR:-$(mktemp -d)}/run.log"
FERRY_FAKE_CUDA=driver=12080 FERRY_REQUIRE_GPU=1 \
  "$bin" --gtest_filter="$filter" >"$log" 2>&1
rc=$?
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
[[ $rc -ne 0 ]] || fail "$1 exited 0 without a usable GPU"
grep -q "FERRY_REQUIRE_GPU=1" "$log" || fail "no mention of FERRY_REQUIRE_GPU=1"
grep -q "driver 12.8 (12080), runtime 13.0 (13000)" "$log" ||
  fail "the failure does not name the driver and runtime versions"
grep -q "^\[  SKIPPED \]" "$log" && fail "tests skipped: $(grep -c '^\[  SKIPPED \] ' "$log")"
grep -q "^\[  FAILED  \]" "$log" || fail "no test failed"
if ((failures)); then
  tail -40 "$log"
  exit 1
fi
echo "PASS: $1 ($filter) fails without a usable GPU under FERRY_REQUIRE_GPU=1"
