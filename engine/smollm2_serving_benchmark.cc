// The main job users compare: N requests (128-token prompts, 64 new tokens
// each, greedy) served by the engine on the real SmolLM2-135M-Instruct
// (Q4_1 GGUF) on the CPU backend with 2 threads, with the options the main
// program picks for them (engine/auto_options.h). Each iteration submits
// all N at once and waits for the last result: the iteration time is the
// time to the last result, items/s the generated tokens per second, and
// the counter all_tok_s counts prompt and generated tokens, as
// llama-batched-bench's S does. benchmarks/smollm2_vs_llama_cpp.sh runs it
// beside llama.cpp's llama-batched-bench on the same file and prints the
// ratios. Skips without the file (tools/fetch_smollm2.sh).
//
//   ./bazelw run --config=opt //engine:smollm2_serving_benchmark
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "ferry/backends/cpu/cpu_backend.h"
#include "ferry/engine/auto_options.h"
#include "ferry/engine/engine.h"
#include "ferry/models/gguf/testing/smollm2.h"
#include "ferry/models/llama/llama_gguf.h"
#include "ferry/runtime/io_reactor.h"
#include "ferry/runtime/thread_pool.h"

namespace ferry::engine {
namespace {

constexpr int64_t kPromptTokens = 128;
constexpr int kNewTokens = 64;

// Distinct prompts of ordinary token ids (no special tokens), so no two
// requests share a prefix.
std::vector<Request> Requests(int n) {
  std::vector<Request> out;
  for (int r = 0; r < n; ++r) {
    Request req;
    req.id = absl::StrCat("r", r);
    for (int64_t i = 0; i < kPromptTokens; ++i) {
      req.prompt.push_back(
          static_cast<int32_t>(1000 + (i * 7919 + r * 104729) % 20000));
    }
    req.max_new_tokens = kNewTokens;
    out.push_back(std::move(req));
  }
  return out;
}

void BM_SmolLm2Requests(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const auto path = gguf::testing::FindSmolLm2Gguf();
  if (!path) {
    state.SkipWithError("no SmolLM2 GGUF (tools/fetch_smollm2.sh)");
    return;
  }
  auto cpu = GetCpuDevice().CreateBackend("threads=2");
  if (!cpu.ok()) {
    state.SkipWithError(std::string(cpu.status().message()).c_str());
    return;
  }
  ThreadPool pool(2);
  auto io = IoReactor::Create(&pool);
  if (!io.ok()) {
    state.SkipWithError(std::string(io.status().message()).c_str());
    return;
  }
  auto model = llama::LoadLlamaGguf(*path, {cpu->get()}, {}, **io);
  if (!model.ok()) {
    state.SkipWithError(std::string(model.status().message()).c_str());
    return;
  }
  const std::vector<Request> requests = Requests(n);
  const EngineOptions options = ChooseEngineOptions(**model, requests);
  auto engine = Engine::Create(**model, options);
  if (!engine.ok()) {
    state.SkipWithError(std::string(engine.status().message()).c_str());
    return;
  }
  int64_t generated = 0;
  for (auto _ : state) {
    std::vector<RequestHandle> handles;
    for (const Request& r : requests) {
      auto h = (*engine)->Submit(r);
      if (!h.ok()) {
        state.SkipWithError(std::string(h.status().message()).c_str());
        return;
      }
      handles.push_back(*std::move(h));
    }
    for (RequestHandle& h : handles) {
      auto result = h.Wait();
      if (!result.ok()) {
        state.SkipWithError(std::string(result.status().message()).c_str());
        return;
      }
      generated += static_cast<int64_t>(result->tokens.size());
    }
  }
  state.SetItemsProcessed(generated);
  state.counters["all_tok_s"] = benchmark::Counter(
      static_cast<double>(generated + state.iterations() * n * kPromptTokens),
      benchmark::Counter::kIsRate);
  state.SetLabel(absl::StrCat("batch_tokens=", options.batch_tokens,
                              " max_sequences=", options.max_sequences,
                              " n_copies=", options.n_copies));
}
BENCHMARK(BM_SmolLm2Requests)
    ->ArgName("requests")
    ->Arg(1)
    ->Arg(8)
    ->Arg(32)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond)
    ->MeasureProcessCPUTime()
    ->UseRealTime();

}  // namespace
}  // namespace ferry::engine
