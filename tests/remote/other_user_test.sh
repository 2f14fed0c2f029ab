#!/bin/bash
# Workers on this host running as another user than their client or peer.
# UCX moves bulk bytes between processes on one host by cross-memory attach,
# which needs one user: a client connects again without it (its copies then
# run over TCP), and a worker asked to send to a peer worker of another user
# fails the copy with an error naming the fix. Needs root (to start a worker
# as nobody) and cross-memory attach; elsewhere it says SKIPPED and passes.
set -u
worker="$1"
probe="$2"
skip() { echo "SKIPPED: $*"; exit 0; }
fail() { echo "FAIL: $*"; exit 1; }
[[ $(id -u) == 0 ]] || skip "needs root to start a worker as another user"
command -v setpriv >/dev/null || skip "needs setpriv"
unset UCX_TLS UCX_CMA_MEMORY_INVALIDATE
export FERRY_WORKER_TOKEN=other-user-test-token
# The user nobody cannot reach the runfiles under root's home.
dir=$(mktemp -d /tmp/ferry_other_user.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  rm -rf "$dir"
}
trap cleanup EXIT
chmod 755 "$dir"
cp "$worker" "$dir/ferry_worker"
chmod 755 "$dir/ferry_worker"

# start NAME [setpriv args]: starts a worker, sets $addr to its HOST:PORT.
start() {
  local name=$1
  shift
  "$@" "$dir/ferry_worker" --listen=127.0.0.1:0 --peers=127.0.0.1 --devices=cpu,sim0 >"$dir/$name.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 50); do grep -q listening "$dir/$name.log" && break; sleep 0.1; done
  addr=$(sed -n 's/.*listening on \([0-9.]*:[0-9]*\).*/\1/p' "$dir/$name.log")
  [[ -n "$addr" ]] || { cat "$dir/$name.log"; fail "worker $name did not start"; }
}
start mine
mine=$addr
start nobody setpriv --reuid=65534 --regid=65534 --clear-groups
nobody=$addr

line=$("$probe" --device=remote:$mine/cpu --mib=16 --iters=2 2>&1) ||
  fail "probe of a worker of this user: $line"
echo "$line"
[[ "$line" == *transports=cma,tcp* ]] ||
  skip "UCX gives no cross-memory attach here ($line)"

line=$("$probe" --device=remote:$nobody/cpu --mib=16 --iters=2 2>&1) ||
  fail "probe of a worker of another user: $line"
echo "$line"
[[ "$line" == *transports=tcp ]] || fail "expected TCP alone to a worker of another user"

line=$(timeout 30 "$probe" --device=remote:$mine/cpu --to=remote:$nobody/cpu --mib=16 --iters=1 2>&1) &&
  fail "a copy between workers of two users succeeded over cross-memory attach: $line"
echo "$line"
[[ "$line" == *"needs one user"* ]] || fail "expected the error naming the fix"

# Out of a simulated device's memory the sending stream is past the copy
# once the bytes are staged; the refusal must still reach the receiver at
# once, not after its 60 s transfer timeout.
start=$(date +%s)
line=$(timeout 50 "$probe" --device=remote:$mine/sim0 --to=remote:$nobody/sim0 --mib=16 --iters=1 2>&1) &&
  fail "a copy between sims of workers of two users succeeded: $line"
took=$(( $(date +%s) - start ))
echo "$line (${took} s)"
[[ "$line" == *"needs one user"* ]] || fail "sim copy: expected the error naming the fix"
(( took < 20 )) || fail "sim copy: the receiver waited ${took} s for bytes that were never sent"
echo "PASS"
