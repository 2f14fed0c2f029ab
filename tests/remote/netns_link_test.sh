#!/bin/bash
# A worker on its own host address behind a 1 Gbit/s link (see
# netns_hosts.sh): the worker on host w1, remote_probe on the client host,
# over TCP. Passes when the upload reaches half the link's bound (the shaped
# rate) and no more than the bound allows. Needs root and network
# namespaces; elsewhere it says SKIPPED and passes.
set -u
worker="$1"
probe="$2"
source "$(dirname "$0")/netns_hosts.sh"
skip() { echo "SKIPPED: $*"; exit 0; }
cleanup() {
  [[ -n "${wpid:-}" ]] && kill "$wpid" 2>/dev/null
  netns_hosts_down
}
trap cleanup EXIT
netns_hosts_up 1gbit || skip "$netns_skip_reason"
export UCX_TLS=tcp FERRY_WORKER_TOKEN=netns-link-test-token
out=$(mktemp)
ip netns exec "$ns_w1" "$worker" --listen=10.77.0.2:7070 --devices=cpu --peers=10.77.0.1,10.77.0.2,10.77.0.3 >"$out" 2>&1 &
wpid=$!
for _ in $(seq 50); do grep -q listening "$out" && break; sleep 0.1; done
grep -q listening "$out" || { cat "$out"; echo "worker did not start"; exit 1; }
line=$(ip netns exec "$ns_client" "$probe" --device=remote:10.77.0.2:7070/cpu --mib=32 --iters=3) ||
  { echo "probe failed: $line"; exit 1; }
echo "$line (link bound: 125 MB/s)"
up=$(sed -n 's/.*upload MB\/s=\([0-9.]*\).*/\1/p' <<<"$line")
awk -v up="$up" 'BEGIN { exit !(up >= 62.5 && up <= 135) }' ||
  { echo "upload $up MB/s is not within [0.5, 1.08] of the 125 MB/s link"; exit 1; }
echo "upload at $(awk -v up="$up" 'BEGIN { printf "%.2f", up / 125 }')x the link bound"
