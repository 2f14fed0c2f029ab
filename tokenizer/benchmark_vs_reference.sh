#!/usr/bin/env bash
# Runs ferry's tokenizer benchmark and the reference implementations on the
# same text, one after the other (quote both, with the load):
#   tokenizer/benchmark_vs_reference.sh [python-with-tokenizers]
# The python needs `tokenizers` (and `gguf`, `llama-cpp-python` for the
# SmolLM2 rows); SmolLM2 rows need tools/fetch_smollm2.sh's file.
set -euo pipefail
cd "$(dirname "$0")/.."
python="${1:-python3}"
model=$(tools/fetch_smollm2.sh 2>/dev/null || true)
uptime
./bazelw run --config=opt //tokenizer:tokenizer_benchmark -- \
  --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
"$python" tokenizer/testdata/bench_reference.py ${model:+"$model"}
