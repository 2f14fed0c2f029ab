#!/bin/sh
# Builds the libFuzzer binary for the GGUF parser with clang (outside Bazel,
# whose toolchain here is gcc; Abseil is the system one) and optionally runs
# it briefly from seed files, as CI does:
#   models/gguf/build_fuzzer.sh /tmp/gguf_fuzzer 30   # build, fuzz 30 s
set -eu
out="${1:-/tmp/gguf_fuzzer}"
seconds="${2:-0}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
inc="$(mktemp -d)"
trap 'rm -rf "$inc"' EXIT
ln -s "$root" "$inc/ferry"
clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined \
  -I"$inc" \
  "$root/models/gguf/gguf_fuzzer.cc" \
  "$root/models/gguf/gguf_file.cc" \
  "$root/models/gguf/gguf_source.cc" \
  "$root/models/gguf/gguf_value.cc" \
  "$root/models/gguf/llama_hparams.cc" \
  "$root/quant/quant_type.cc" \
  "$root/runtime/file.cc" \
  $(pkg-config --libs absl_status absl_statusor absl_strings absl_str_format \
    absl_raw_hash_set absl_hash) \
  -o "$out"
echo "built $out"
if [ "$seconds" -gt 0 ]; then
  corpus="$(mktemp -d)"
  cp "$root"/models/gguf/testdata/*.gguf "$corpus/"
  # -rss_limit_mb: a parse that allocates far beyond the input is a bug.
  "$out" -max_total_time="$seconds" -max_len=8192 -rss_limit_mb=1024 \
    -malloc_limit_mb=64 "$corpus"
fi
