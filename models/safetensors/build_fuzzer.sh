#!/bin/sh
# Builds the libFuzzer binary for the safetensors header parser with clang
# (outside Bazel, whose toolchain here is gcc; Abseil is the system one) and
# optionally runs it briefly, as CI does:
#   models/safetensors/build_fuzzer.sh /tmp/safetensors_fuzzer 30   # build, fuzz 30 s
set -eu
out="${1:-/tmp/safetensors_header_fuzzer}"
seconds="${2:-0}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
inc="$(mktemp -d)"
trap 'rm -rf "$inc"' EXIT
ln -s "$root" "$inc/ferry"
clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined \
  -I"$inc" \
  "$root/models/safetensors/safetensors_header_fuzzer.cc" \
  "$root/models/safetensors/safetensors_header.cc" \
  $(pkg-config --libs absl_status absl_statusor absl_strings absl_str_format) \
  -o "$out"
echo "built $out"
if [ "$seconds" -gt 0 ]; then
  corpus="$(mktemp -d)"
  printf '\030\000\000\000\000\000\000\000{"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}}' \
    > "$corpus/seed"
  "$out" -max_total_time="$seconds" -max_len=4096 "$corpus"
fi
