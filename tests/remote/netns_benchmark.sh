#!/bin/bash
# remote_benchmark with its client and two workers on hosts of their own
# (netns_hosts.sh: one switch, every link shaped to RATE), so copies cross
# real network stacks at a link's speed instead of loopback's. BM_Llama8's
# local modes run on the client host beside the workers' in the same run.
# Prints the benchmark's output and the bytes each host sent each other.
# Needs root and network namespaces.
#
#   tests/remote/netns_benchmark.sh RATE [benchmark flags...]
#   e.g. tests/remote/netns_benchmark.sh 1gbit --benchmark_filter='BM_Llama8/mode:[02]/'
# FERRY_BENCH and FERRY_WORKER_BIN name the binaries (default: bazel-bin's,
# build them with --config=opt).
set -u
rate="${1:?RATE, e.g. 1gbit}"
shift
root="$(cd "$(dirname "$0")/../.." && pwd)"
bench="${FERRY_BENCH:-$root/bazel-bin/tests/remote/remote_benchmark}"
worker="${FERRY_WORKER_BIN:-$root/bazel-bin/backends/remote/ferry_worker}"
source "$root/tests/remote/netns_hosts.sh"
dir=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  netns_hosts_down
  rm -rf "$dir"
}
trap cleanup EXIT
netns_hosts_up "$rate" || { echo "cannot run: $netns_skip_reason"; exit 1; }
export UCX_TLS=tcp FERRY_WORKER_TOKEN="netns-benchmark-$$"
for n in 2 3; do
  ns="$ns_w1"
  ((n == 3)) && ns="$ns_w2"
  ip netns exec "$ns" "$worker" --listen="10.77.0.$n:7070" --devices=cpu --peers=10.77.0.1,10.77.0.2,10.77.0.3,10.77.0.4 \
    --weights_dir="$dir" >"$dir/worker$n.out" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 200); do
    grep -q "listening on" "$dir/worker$n.out" && break
    sleep 0.05
  done
  grep -q "listening on" "$dir/worker$n.out" ||
    { cat "$dir/worker$n.out"; echo "worker at 10.77.0.$n did not start"; exit 1; }
done
ip netns exec "$ns_client" env TEST_TMPDIR="$dir" \
  FERRY_BENCH_WORKERS=10.77.0.2:7070,10.77.0.3:7070 "$bench" "$@"
rc=$?
echo "link rate $rate; bytes sent: client to w1 $(netns_bytes_sent "$ns_client" 2)," \
  "client to w2 $(netns_bytes_sent "$ns_client" 3), w1 to w2 $(netns_bytes_sent "$ns_w1" 3)," \
  "w1 to client $(netns_bytes_sent "$ns_w1" 1), w2 to client $(netns_bytes_sent "$ns_w2" 1)"
exit $rc
