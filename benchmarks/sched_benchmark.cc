// Scheduler benchmarks.
//
// BM_SchedulerOverhead: reset + assign + split + allocate of a llama graph
// (f32 weights in a weights buffer, n_embd 2048, 16 heads, n_ff 5632,
// vocabulary 32000, 32 tokens, attention over the batch) with no compute,
// on [cpu] and on [a sim device that runs only mul_mat, cpu]. The weights
// are allocated but never touched, so their pages are never committed.
//
// BM_LayerSplitPipeline: batches/s of a model whose layers are split over
// sim devices, with n_copies = 1 (one batch at a time) and 4 (pipelined),
// beside the bound set by the slowest stage.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "ferry/alloc/tensor_allocator.h"
#include "ferry/alloc/testing/llama_graph.h"
#include "ferry/alloc/weights.h"
#include "ferry/backends/cpu/cpu_backend.h"
#include "ferry/backends/sim/sim_device.h"
#include "ferry/runtime/status_macros.h"
#include "ferry/sched/scheduler.h"

namespace ferry {
namespace {

template <typename T>
T Check(absl::StatusOr<T> value) {
  FERRY_CHECK(value.ok());
  return *std::move(value);
}

void BM_SchedulerOverhead(benchmark::State& state) {
  const int n_layer = static_cast<int>(state.range(0));
  const bool with_sim = state.range(1) != 0;
  testing::LlamaConfig config;
  config.n_layer = n_layer;
  auto model = Check(testing::MakeLlamaModel(config));
  auto cpu = Check(GetCpuDevice().CreateBackend("threads=1"));
  std::unique_ptr<SimDevice> sim_device;
  std::unique_ptr<Backend> sim;
  std::vector<Backend*> backends;
  BufferType* weights_type = cpu->default_buffer_type();
  if (with_sim) {
    sim_device = Check(SimDevice::Create("bench_sim", "mem=16GiB,ops=mul_mat"));
    sim = Check(sim_device->CreateBackend());
    backends.push_back(sim.get());
    weights_type = sim->default_buffer_type();
  }
  backends.push_back(cpu.get());
  auto weights = Check(AllocateWeights(model->ctx, *weights_type));
  auto graph = Check(testing::BuildLlamaGraph(*model, 32, false));
  auto sched = Check(Scheduler::Create(backends, {.n_copies = 1}));
  FERRY_CHECK(sched->Reserve(graph.graph).ok());
  for (auto _ : state) {
    sched->Reset();
    FERRY_CHECK(sched->AllocGraph(graph.graph).ok());
  }
  state.counters["nodes"] = static_cast<double>(graph.graph.num_nodes());
  state.counters["splits"] = sched->num_splits();
  state.counters["split_inputs"] = sched->stats().num_split_inputs;
  state.counters["re_reserves"] =
      static_cast<double>(sched->stats().re_reserves);
  state.SetLabel(with_sim ? "[sim(mul_mat), cpu]" : "[cpu]");
}
BENCHMARK(BM_SchedulerOverhead)
    ->ArgsProduct({{8, 32}, {0, 1}})
    ->Unit(benchmark::kMicrosecond)
    ->Repetitions(5)
    ->ReportAggregatesOnly(true);

}  // namespace
}  // namespace ferry
namespace ferry {
namespace {
void BM_SupportsOpSweep(benchmark::State& state) {
  testing::LlamaConfig config;
  config.n_layer = 32;
  auto model = Check(testing::MakeLlamaModel(config));
  testing::FakePlaceWeights(model->ctx);
  auto graph = Check(testing::BuildLlamaGraph(*model, 32, false));
  for (auto _ : state) {
    int n = 0;
    for (Tensor* node : graph.graph.nodes()) n += GetCpuDevice().SupportsOp(*node);
    benchmark::DoNotOptimize(n);
  }
}
BENCHMARK(BM_SupportsOpSweep)->Unit(benchmark::kMicrosecond);
}  // namespace
}  // namespace ferry
