#!/usr/bin/env bash
# The main job side by side with llama.cpp's own tools, alternated in one
# run: N = 1, 8, 32 requests of 128-token prompts + 64 new tokens (greedy)
# on SmolLM2-135M-Instruct Q4_1, CPU, 2 threads.
#   ferry:     engine:smollm2_serving_benchmark (the engine with the main
#              program's picked options), time to the last result;
#   llama.cpp: llama-batched-bench -npp 128 -ntg 64 -npl 1,8,32 (built from
#              the llama.cpp that llama-cpp-python vendors, outside the repo,
#              by ../shared/bench/llama_cpp_tools.sh), its time T for B = 1
#              times N ("one after another") and for B = N (its batching).
# Prints each round and the median ratios (ferry's throughput over
# llama.cpp's; > 1 is ferry faster).
#   benchmarks/smollm2_vs_llama_cpp.sh [ROUNDS]     (default 3)
#   LLAMA_CPP_BIN=dir (a folder with llama-batched-bench) skips the build.
#   FERRY_SMOLLM2_GGUF=file runs another GGUF of the model instead (e.g. the
#              K-quant requantizations of tools/requantize_smollm2.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
model=${FERRY_SMOLLM2_GGUF:-$(bash tools/fetch_smollm2.sh)}
bin=${LLAMA_CPP_BIN:-}
if [[ -z "$bin" ]]; then
  tools=../shared/bench/llama_cpp_tools.sh
  if [[ ! -f $tools ]]; then
    echo "no $tools: set LLAMA_CPP_BIN to a folder with llama-batched-bench" >&2
    exit 1
  fi
  bin=$(bash "$tools")
fi
./bazelw build --config=opt //engine:smollm2_serving_benchmark >&2
ferry=bazel-bin/engine/smollm2_serving_benchmark
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "model: $(basename "$model")"
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)," \
  "$(grep -o -m1 -w 'avx512f' /proc/cpuinfo || echo 'AVX2 only')," \
  "load $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 1; r <= rounds; r++)); do
  FERRY_SMOLLM2_GGUF=$model "$ferry" --benchmark_format=json \
    >"$out/ferry.$r.json" 2>/dev/null
  LD_LIBRARY_PATH=$bin "$bin/llama-batched-bench" -m "$model" -t 2 -c 8192 \
    -b 2048 -ub 512 -npp 128 -ntg 64 -npl 1,8,32 \
    >"$out/llama.$r.txt" 2>/dev/null
done
python3 - "$out" "$rounds" <<'PY'
import json, re, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
ratios = {}
print(f"{'N':>3} {'round':>5} {'ferry s':>9} {'llama seq s':>12} {'llama batched s':>16}"
      f" {'vs seq':>7} {'vs batched':>11}")
for r in range(1, rounds + 1):
    ferry = {}
    for b in json.load(open(f"{out}/ferry.{r}.json"))["benchmarks"]:
        n = int(re.search(r"requests:(\d+)", b["name"]).group(1))
        ferry[n] = b["real_time"] / 1e3  # ms -> s
    llama = {}
    for line in open(f"{out}/llama.{r}.txt"):
        cells = [c.strip() for c in line.split("|")[1:-1]]
        if len(cells) == 10 and cells[0].isdigit():
            llama[int(cells[2])] = float(cells[8])  # B -> T s
    for n in sorted(ferry):
        seq = llama[1] * n
        batched = llama.get(n, float("nan"))
        ratios.setdefault(n, []).append((seq / ferry[n], batched / ferry[n]))
        print(f"{n:>3} {r:>5} {ferry[n]:>9.2f} {seq:>12.2f} {batched:>16.2f}"
              f" {seq / ferry[n]:>6.2f}x {batched / ferry[n]:>10.2f}x")
print("median ratios (llama.cpp time / ferry time):")
for n, rs in sorted(ratios.items()):
    print(f"  N={n}: {statistics.median(x for x, _ in rs):.2f}x llama.cpp one "
          f"after another, {statistics.median(y for _, y in rs):.2f}x its "
          f"batched-bench")
PY
