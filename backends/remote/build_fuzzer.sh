#!/bin/sh
# Builds the libFuzzer binary for the remote command decoder with clang
# (outside Bazel, whose toolchain here is gcc; Abseil is the system one) and
# optionally runs it briefly from a seed corpus of valid messages, as CI does:
#   backends/remote/build_fuzzer.sh /tmp/remote_command_fuzzer 30
set -eu
out="${1:-/tmp/remote_command_fuzzer}"
seconds="${2:-0}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
inc="$(mktemp -d)"
trap 'rm -rf "$inc"' EXIT
ln -s "$root" "$inc/ferry"
clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined \
  -I"$inc" \
  "$root/backends/remote/protocol/command_fuzzer.cc" \
  "$root/backends/remote/protocol/protocol.cc" \
  "$root/backends/remote/protocol/wire_graph.cc" \
  "$root/backends/buffer.cc" \
  "$root/backends/host_buffer.cc" \
  "$root/backends/cpu/cpu_packed_buffer.cc" \
  "$root/backends/host/internal/packed_layout.cc" \
  "$root/backends/host/internal/quant_group_layout.cc" \
  "$root/backends/host/packed_state.cc" \
  "$root/graph/tensor.cc" "$root/graph/dtype.cc" "$root/graph/op.cc" \
  $(pkg-config --libs absl_status absl_statusor absl_strings absl_str_format \
    absl_raw_hash_set absl_hash) \
  -o "$out"
echo "built $out"
if [ "$seconds" -gt 0 ]; then
  corpus="$(mktemp -d)"
  "$out" -runs=0 "$corpus" >/dev/null 2>&1 || true
  # Seeds: a wire graph (scale of a placed x), a set_tensor header and a
  # tensor ref (a [64, 64] f32 weight at offset 0, named "w").
  printf '\003\002\000\000\000' > "$corpus/graph_header"
  printf '\000\006\065\221\000\000\001\000\000\000\000\000\000\000' > "$corpus/cmd"
  z6='\000\000\000\000\000\000'
  z7="\\000$z6"
  printf "\\005\\000\\100$z7\\100$z7\\001$z7\\001$z7\\004$z7\\000\\001$z6\\000\\100$z6\\000\\100$z6\\000$z7\\000\\001\\000\\000\\000w" > "$corpus/ref"
  "$out" -max_total_time="$seconds" -max_len=4096 "$corpus"
fi
