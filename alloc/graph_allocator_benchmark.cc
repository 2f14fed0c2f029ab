// Peak compute-buffer bytes and planning / allocation time of the graph
// allocator on llama-like graphs (f32; n_head = n_embd / 128; n_ff 5632 for
// n_embd 2048 and 11008 for 4096; vocab 32000), next to the two liveness
// lower bounds of memory_bounds.h and to ggml's online allocator
// (PlanningStrategy::kOnline).
//
// Args: n_layer, n_embd, n_tokens, last_token_only. Counters (MiB):
//   strict, in_place: the bounds; ferry: the plan's bytes, ratio = ferry /
//   in_place; ggml_like: the online plan, ggml_ratio = ggml_like / in_place.
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "benchmark/benchmark.h"
#include "ferry/alloc/graph_allocator.h"
#include "ferry/alloc/memory_bounds.h"
#include "ferry/backends/host_buffer.h"
#include "ferry/graph/graph.h"
#include "ferry/models/llama/llama_graph.h"
#include "ferry/models/llama/llama_model.h"
#include "ferry/models/llama/testing/llama_testing.h"

namespace ferry {
namespace {

using Key = std::tuple<int, int64_t>;

llama::LlamaModel& Model(int n_layer, int64_t n_embd) {
  static auto* models = new std::map<Key, std::unique_ptr<llama::LlamaModel>>();
  auto& slot = (*models)[Key{n_layer, n_embd}];
  if (slot == nullptr) {
    llama::LlamaConfig config{.n_layer = n_layer,
                              .n_embd = n_embd,
                              .n_head = n_embd / 128,
                              .n_ff = n_embd == 2048 ? 5632 : 11008,
                              .n_vocab = 32000};
    slot = *testing::MakeFakePlacedLlamaModel(config);
  }
  return *slot;
}

HostBufferType& Type() {
  static auto* type = new HostBufferType("host", 64, nullptr);
  return *type;
}

constexpr double kMiB = 1024.0 * 1024.0;

void BM_Plan(benchmark::State& state) {
  llama::LlamaModel& model =
      Model(static_cast<int>(state.range(0)), state.range(1));
  absl::StatusOr<llama::LlamaGraph> g = llama::BuildLlamaGraph(
      model,
      {.n_tokens = state.range(2), .last_token_only = state.range(3) != 0});
  if (!g.ok()) {
    state.SkipWithError(std::string(g.status().message()).c_str());
    return;
  }
  BufferType* types[] = {&Type()};
  const MemoryBounds bounds = (*ComputeMemoryBounds(g->graph, types))[0];
  GraphAllocator ggml_like({&Type()}, {.strategy = PlanningStrategy::kOnline});
  const int64_t online = ggml_like.Measure(g->graph)->bytes[0];
  GraphAllocator galloc({&Type()});
  int64_t bytes = 0;
  for (auto _ : state) {
    absl::StatusOr<PlanSummary> plan = galloc.Measure(g->graph);
    bytes = plan->bytes[0];
    benchmark::DoNotOptimize(bytes);
  }
  state.counters["nodes"] = static_cast<double>(g->graph.num_nodes());
  state.counters["strict"] = static_cast<double>(bounds.strict) / kMiB;
  state.counters["in_place"] = static_cast<double>(bounds.in_place) / kMiB;
  state.counters["ferry"] = static_cast<double>(bytes) / kMiB;
  state.counters["ratio"] =
      static_cast<double>(bytes) / static_cast<double>(bounds.in_place);
  state.counters["ggml_like"] = static_cast<double>(online) / kMiB;
  state.counters["ggml_ratio"] =
      static_cast<double>(online) / static_cast<double>(bounds.in_place);
}

// Allocate of a graph whose topology was reserved (the fast path).
void BM_AllocateReserved(benchmark::State& state) {
  llama::LlamaModel& model =
      Model(static_cast<int>(state.range(0)), state.range(1));
  absl::StatusOr<llama::LlamaGraph> g = llama::BuildLlamaGraph(
      model,
      {.n_tokens = state.range(2), .last_token_only = state.range(3) != 0});
  GraphAllocator galloc({&Type()});
  if (!g.ok() || !galloc.Reserve(g->graph).ok()) {
    state.SkipWithError("reserve failed");
    return;
  }
  for (auto _ : state) {
    absl::Status s = galloc.Allocate(g->graph);
    if (!s.ok()) {
      state.SkipWithError(std::string(s.message()).c_str());
      return;
    }
  }
  state.counters["nodes"] = static_cast<double>(g->graph.num_nodes());
  state.counters["fast"] = galloc.last_plan().fast_path ? 1 : 0;
}

void Args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"layers", "embd", "tokens", "last"});
  b->ArgsProduct({{8, 32}, {2048, 4096}, {1, 32, 512}, {0, 1}});
  b->Unit(benchmark::kMicrosecond);
}

BENCHMARK(BM_Plan)->Apply(Args);
BENCHMARK(BM_AllocateReserved)->Apply(Args);

}  // namespace
}  // namespace ferry
