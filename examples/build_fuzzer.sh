#!/bin/sh
# Builds the libFuzzer binary for the safetensors header parser with clang
# (outside Bazel, whose toolchain here is gcc; Abseil is the system one) and
# optionally runs it briefly, as CI does:
#   examples/build_fuzzer.sh /tmp/safetensors_fuzzer 30   # build, fuzz 30 s
set -eu
out="${1:-/tmp/safetensors_header_fuzzer}"
seconds="${2:-0}"
root="$(cd "$(dirname "$0")/.." && pwd)"
inc="$(mktemp -d)"
trap 'rm -rf "$inc"' EXIT
ln -s "$root" "$inc/ferry"
clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined \
  -I"$inc" \
  "$root/examples/safetensors_header_fuzzer.cc" \
  "$root/examples/safetensors_header.cc" \
  -labsl_status -labsl_statusor -labsl_strings -labsl_str_format_internal \
  -labsl_cord -labsl_cordz_info -labsl_cord_internal -labsl_cordz_functions \
  -labsl_cordz_handle -labsl_strings_internal -labsl_int128 \
  -labsl_raw_logging_internal -labsl_throw_delegate -labsl_synchronization \
  -labsl_base -labsl_spinlock_wait -labsl_time -labsl_time_zone \
  -labsl_stacktrace -labsl_symbolize -labsl_malloc_internal \
  -labsl_debugging_internal -labsl_demangle_internal -labsl_graphcycles_internal \
  -labsl_exponential_biased -labsl_bad_optional_access \
  -o "$out"
echo "built $out"
if [ "$seconds" -gt 0 ]; then
  corpus="$(mktemp -d)"
  printf '\030\000\000\000\000\000\000\000{"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}}' \
    > "$corpus/seed"
  "$out" -max_total_time="$seconds" -max_len=4096 "$corpus"
fi
