// The real SmolLM2-135M-Instruct (Q4_1 GGUF) on the CPU backend with 2
// threads, as llama.cpp is timed beside it (engine/testdata/
// llama_cpp_speed.py): prompt processing of 128 tokens in one micro-batch
// and generation of 64 tokens one at a time (after a 1-token prompt), with
// the weights as loaded by default (kept quantized) or dequantized to f32
// at load (Arg 1). Items are tokens: items_per_second is tokens/s (wall
// clock); the CPU column is the whole process's CPU time, which says more
// on a machine shared with other work. Skips without the file
// (tools/fetch_smollm2.sh).
//
//   ./bazelw run --config=opt //engine:smollm2_benchmark
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "benchmark/benchmark.h"
#include "ferry/backends/cpu/cpu_backend.h"
#include "ferry/engine/engine.h"
#include "ferry/models/gguf/testing/smollm2.h"
#include "ferry/models/llama/llama_gguf.h"
#include "ferry/runtime/io_reactor.h"
#include "ferry/runtime/thread_pool.h"

namespace ferry::engine {
namespace {

constexpr int64_t kPromptTokens = 128;
constexpr int kGenTokens = 64;

struct Loaded {
  std::unique_ptr<Backend> cpu;
  std::unique_ptr<llama::LlamaModel> model;
  std::unique_ptr<Engine> engine;
};

// Loads the model (f32 weights when `f32`) and, unless `batch_tokens` is 0,
// an engine whose micro-batch holds `batch_tokens` tokens (a whole prompt,
// or the one token of a decode step); an error status skips the benchmark.
absl::Status Load(bool f32, int64_t batch_tokens, Loaded& out) {
  const auto path = gguf::testing::FindSmolLm2Gguf();
  if (!path) return absl::NotFoundError("no SmolLM2 GGUF (fetch_smollm2.sh)");
  auto cpu = GetCpuDevice().CreateBackend("threads=2");
  if (!cpu.ok()) return cpu.status();
  out.cpu = *std::move(cpu);
  ThreadPool pool(2);
  auto io = IoReactor::Create(&pool);
  if (!io.ok()) return io.status();
  llama::LlamaModelOptions options;
  if (f32) options.weight_dtype = llama::F32Weights;
  auto model = llama::LoadLlamaGguf(*path, {out.cpu.get()}, options, **io,
                                    /*n_ctx=*/512);
  if (!model.ok()) return model.status();
  out.model = *std::move(model);
  if (batch_tokens == 0) return absl::OkStatus();
  auto engine = Engine::Create(*out.model, {.max_sequences = 1,
                                            .max_sequence_len = 512,
                                            .batch_tokens = batch_tokens,
                                            .n_copies = 1});
  if (!engine.ok()) return engine.status();
  out.engine = *std::move(engine);
  return absl::OkStatus();
}

// Runs one request to completion; false (and a skip) on error.
bool RunRequest(benchmark::State& state, Engine& engine,
                std::vector<int32_t> prompt, int new_tokens) {
  Request req;
  req.prompt = std::move(prompt);
  req.max_new_tokens = new_tokens;
  auto handle = engine.Submit(req);
  absl::Status status = handle.status();
  if (status.ok()) status = handle->Wait().status();
  if (!status.ok()) state.SkipWithError(std::string(status.message()).c_str());
  return status.ok();
}

// A prompt of ordinary token ids (not special tokens).
std::vector<int32_t> Prompt(int64_t n) {
  std::vector<int32_t> tokens;
  for (int64_t i = 0; i < n; ++i) {
    tokens.push_back(static_cast<int32_t>(1000 + (i * 7919) % 20000));
  }
  return tokens;
}

// 128 prompt tokens in one micro-batch; the one new token comes from the
// prompt's logits, so no decode step is timed.
void BM_SmolLm2Prompt128(benchmark::State& state) {
  Loaded loaded;
  if (absl::Status s = Load(state.range(0) == 1, kPromptTokens, loaded);
      !s.ok()) {
    state.SkipWithError(std::string(s.message()).c_str());
    return;
  }
  for (auto _ : state) {
    if (!RunRequest(state, *loaded.engine, Prompt(kPromptTokens), 1)) return;
  }
  state.SetItemsProcessed(state.iterations() * kPromptTokens);
  state.SetLabel(state.range(0) == 1 ? "f32 weights" : "quantized weights");
}
BENCHMARK(BM_SmolLm2Prompt128)
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond)
    ->MeasureProcessCPUTime()
    ->UseRealTime();

// A 1-token prompt, then 64 decode steps of one token each.
void BM_SmolLm2Generate64(benchmark::State& state) {
  Loaded loaded;
  if (absl::Status s = Load(state.range(0) == 1, 1, loaded); !s.ok()) {
    state.SkipWithError(std::string(s.message()).c_str());
    return;
  }
  for (auto _ : state) {
    if (!RunRequest(state, *loaded.engine, Prompt(1), kGenTokens + 1)) return;
  }
  state.SetItemsProcessed(state.iterations() * kGenTokens);
  state.SetLabel(state.range(0) == 1 ? "f32 weights" : "quantized weights");
}
BENCHMARK(BM_SmolLm2Generate64)
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond)
    ->MeasureProcessCPUTime()
    ->UseRealTime();

// What a bucket costs: Create builds and plans the full shape's (32-token
// micro-batches over one 512-cell slot, quantized weights); the others are
// planned when a micro-batch first needs them, each as much. Counters: the
// buckets, and the compute and copy buffers of their schedulers.
void BM_SmolLm2CreateEngine(benchmark::State& state) {
  Loaded loaded;
  if (absl::Status s = Load(false, 0, loaded); !s.ok()) {
    state.SkipWithError(std::string(s.message()).c_str());
    return;
  }
  const EngineOptions options{.max_sequences = 1,
                              .max_sequence_len = 512,
                              .batch_tokens = 32,
                              .n_copies = 1};
  double buckets = 0;
  double bytes = 0;
  for (auto _ : state) {
    auto engine = Engine::Create(*loaded.model, options);
    if (!engine.ok()) {
      state.SkipWithError(std::string(engine.status().message()).c_str());
      return;
    }
    buckets = (*engine)->num_buckets();
    bytes = 0;
    for (int b = 0; b < (*engine)->num_buckets(); ++b) {
      const SchedulerStats& stats = (*engine)->scheduler(b).stats();
      for (size_t n : stats.compute_bytes) bytes += static_cast<double>(n);
      for (size_t n : stats.copy_buffer_bytes) bytes += static_cast<double>(n);
    }
  }
  state.counters["buckets"] = buckets;
  state.counters["buffer_MiB"] = bytes / (1 << 20);
}
BENCHMARK(BM_SmolLm2CreateEngine)
    ->Unit(benchmark::kMillisecond)
    ->MeasureProcessCPUTime()
    ->UseRealTime();

}  // namespace
}  // namespace ferry::engine
