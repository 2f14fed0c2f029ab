#!/bin/bash
# Side-by-side run for the remote-device figures (see the issue and
# ../shared/bench/README.md): alternates, over R rounds, UCX's own
# ucx_perftest (tag bandwidth and latency), ferry's remote_benchmark, and,
# when given, ggml-rpc through the shared harness (xfer: 64 MiB set/get and a
# 4 KiB round trip; pipe: the 8-layer model over two rpc servers of one
# thread and on the local CPU with two). Prints every raw line with its round
# and the load; medians are taken from the output.
#
#   tests/remote/side_by_side.sh ROUNDS OUTDIR TLS [HARNESS RPC_SERVER]
#   e.g. tests/remote/side_by_side.sh 3 /tmp/rb tcp /path/harness /path/rpc_server
# TLS: tcp, or cma (cma,tcp: bulk bytes by cross-memory attach, as UCX picks
# by default between processes on one host; ggml-rpc ignores it).
set -u
R=${1:-3}
OUT=${2:-/tmp/remote_side_by_side}
TLS=${3:-tcp}
HARNESS=${4:-}
RPC=${5:-}
root="$(cd "$(dirname "$0")/../.." && pwd)"
bench="${FERRY_BENCH:-$root/bazel-bin/tests/remote/remote_benchmark}"
mkdir -p "$OUT"
[[ "$TLS" == cma ]] && export UCX_TLS=cma,tcp || export UCX_TLS=tcp
log() { echo "$(date +%T) round $1 load $(cut -d' ' -f1-3 /proc/loadavg) $2" | tee -a "$OUT/log.txt"; }
perftest() {  # test size iters
  local port=$((20000 + RANDOM % 10000))
  ucx_perftest -p $port >/dev/null 2>&1 &
  local spid=$!
  sleep 0.5
  ucx_perftest 127.0.0.1 -p $port -t "$1" -s "$2" -n "$3" -w 5 2>&1 | tail -n 1
  kill $spid 2>/dev/null; wait $spid 2>/dev/null
}
for r in $(seq 1 "$R"); do
  log "$r" "ucx_perftest"
  echo "round $r tag_bw_64MiB $(perftest tag_bw 67108864 20)" | tee -a "$OUT/perftest.txt"
  echo "round $r tag_lat_4KiB $(perftest tag_lat 4096 10000)" | tee -a "$OUT/perftest.txt"
  log "$r" "ferry"
  # One run per benchmark: the CSV reporter wants the same counters in
  # every row of a run.
  for name in $("$bench" --benchmark_list_tests --benchmark_filter="${FERRY_FILTER:-.}" 2>/dev/null); do
    "$bench" --benchmark_min_time=1 --benchmark_filter="^${name}\$" \
        --benchmark_format=csv 2>/dev/null | grep '^"BM_' | sed "s/^/round $r,/" | tee -a "$OUT/ferry.csv"
  done
  if [[ -n "$HARNESS" && -n "$RPC" ]]; then
    log "$r" "ggml-rpc"
    p1=$((30000 + RANDOM % 10000)); p2=$((p1 + 1))
    "$RPC" 127.0.0.1:$p1 1 >/dev/null 2>&1 & s1=$!
    "$RPC" 127.0.0.1:$p2 1 >/dev/null 2>&1 & s2=$!
    sleep 1
    "$HARNESS" xfer 127.0.0.1:$p1 5 2>&1 | sed "s/^/round $r /" | tee -a "$OUT/ggml.txt"
    if [[ -z "${SKIP_PIPE:-}" ]]; then
      "$HARNESS" pipe rpc 127.0.0.1:$p1 127.0.0.1:$p2 8 32 4 2 1 each 1 2>&1 |
        grep -E "PIPE|UPLOAD" | sed "s/^/round $r /" | tee -a "$OUT/ggml.txt"
      kill $s1 $s2 2>/dev/null; wait $s1 $s2 2>/dev/null
      "$HARNESS" pipe local - - 8 32 4 2 1 each 2 2>&1 | grep PIPE |
        sed "s/^/round $r /" | tee -a "$OUT/ggml.txt"
    else
      kill $s1 $s2 2>/dev/null; wait $s1 $s2 2>/dev/null
    fi
  fi
done
