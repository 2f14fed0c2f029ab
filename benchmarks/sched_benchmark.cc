// Scheduler benchmarks.
//
// BM_SchedulerOverhead: reset + assign + split + allocate of a llama graph
// (f32 weights in a weights buffer, n_embd 2048, 16 heads, n_ff 5632,
// vocabulary 32000, 32 tokens, attention over the batch) with no compute,
// on [cpu] and on [a sim device that runs only mul_mat, cpu]. The weights
// are allocated but never touched, so their pages are never committed.
// BM_SchedulerOverheadCold: the same when every graph differs from the
// previous one, so no plan is reused.
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
#include "ferry/alloc/weights.h"
#include "ferry/backends/cpu/cpu_backend.h"
#include "ferry/backends/sim/sim_device.h"
#include "ferry/models/llama/llama_graph.h"
#include "ferry/models/llama/llama_model.h"
#include "ferry/models/llama/testing/llama_testing.h"
#include "ferry/runtime/status_macros.h"
#include "ferry/sched/scheduler.h"

namespace ferry {
namespace {

template <typename T>
T Check(absl::StatusOr<T> value) {
  FERRY_CHECK(value.ok());
  return *std::move(value);
}

// The llama model, backends and scheduler of the overhead benchmarks.
struct OverheadSetup {
  explicit OverheadSetup(const benchmark::State& state) {
    const int n_layer = static_cast<int>(state.range(0));
    with_sim = state.range(1) != 0;
    llama::LlamaConfig config;
    config.n_layer = n_layer;
    model = Check(llama::LlamaModel::CreateUnplaced(config));
    cpu = Check(GetCpuDevice().CreateBackend("threads=1"));
    std::vector<Backend*> backends;
    BufferType* weights_type = cpu->default_buffer_type();
    if (with_sim) {
      sim_device =
          Check(SimDevice::Create("bench_sim", "mem=16GiB,ops=mul_mat"));
      sim = Check(sim_device->CreateBackend());
      backends.push_back(sim.get());
      weights_type = sim->default_buffer_type();
    }
    backends.push_back(cpu.get());
    weights =
        Check(AllocateWeights(*model->weight_contexts()[0], *weights_type));
    sched = Check(Scheduler::Create(backends, {.n_copies = 1}));
  }

  void Report(benchmark::State& state, const Graph& graph) {
    const SchedulerStats& stats = sched->stats();
    state.counters["nodes"] = static_cast<double>(graph.num_nodes());
    state.counters["splits"] = sched->num_splits();
    state.counters["split_inputs"] = stats.num_split_inputs;
    state.counters["re_reserves"] = static_cast<double>(stats.re_reserves);
    // Share of plans that reused the previous one (1 in steady state, 0
    // when every graph differs from the last).
    state.counters["reused"] = static_cast<double>(stats.plans_reused) /
                               static_cast<double>(stats.graphs_planned);
    state.SetLabel(with_sim ? "[sim(mul_mat), cpu]" : "[cpu]");
  }

  bool with_sim = false;
  std::unique_ptr<llama::LlamaModel> model;
  std::unique_ptr<Backend> cpu;
  std::unique_ptr<SimDevice> sim_device;
  std::unique_ptr<Backend> sim;
  std::vector<std::unique_ptr<Buffer>> weights;
  std::unique_ptr<Scheduler> sched;
};

// Steady state: the same graph every iteration, as in a decode loop. The
// scheduler checks the whole graph against its last plan each time and
// reuses it (see Scheduler::AllocGraph); the allocator re-applies its plan.
void BM_SchedulerOverhead(benchmark::State& state) {
  OverheadSetup setup(state);
  auto graph = Check(llama::BuildLlamaGraph(
      *setup.model, {.n_tokens = 32, .last_token_only = false}));
  FERRY_CHECK(setup.sched->Reserve(graph.graph).ok());
  for (auto _ : state) {
    setup.sched->Reset();
    FERRY_CHECK(setup.sched->AllocGraph(graph.graph).ok());
  }
  setup.Report(state, graph.graph);
}
BENCHMARK(BM_SchedulerOverhead)
    ->ArgsProduct({{8, 32}, {0, 1}})
    ->Unit(benchmark::kMicrosecond)
    ->Repetitions(5)
    ->ReportAggregatesOnly(true);

// Cold plans: two graphs of the same model (32 and 33 tokens) alternate, so
// each AllocGraph differs from the last plan and the scheduler assigns and
// splits from scratch (reused = 0). The graph allocator still finds both
// graphs among its cached plans, as it would in the steady state.
void BM_SchedulerOverheadCold(benchmark::State& state) {
  OverheadSetup setup(state);
  auto a = Check(llama::BuildLlamaGraph(
      *setup.model, {.n_tokens = 32, .last_token_only = false}));
  auto b = Check(llama::BuildLlamaGraph(
      *setup.model, {.n_tokens = 33, .last_token_only = false}));
  FERRY_CHECK(setup.sched->Reserve(b.graph).ok());
  int64_t k = 0;
  for (auto _ : state) {
    setup.sched->Reset();
    FERRY_CHECK(setup.sched->AllocGraph((k++ % 2 == 0 ? a : b).graph).ok());
  }
  setup.Report(state, a.graph);
}
BENCHMARK(BM_SchedulerOverheadCold)
    ->ArgsProduct({{8, 32}, {0, 1}})
    ->Unit(benchmark::kMicrosecond)
    ->Repetitions(5)
    ->ReportAggregatesOnly(true);

// Batches/s of a layer-split model on two simulated devices (modelled at
// 10 GFLOP/s each, so the host's own compute never dominates), one batch
// at a time (n_copies = 1) or pipelined (n_copies = 4, all batches
// submitted back to back). The bound is the slowest device's modelled busy
// time per batch.
void BM_LayerSplitPipeline(benchmark::State& state) {
  const int n_copies = static_cast<int>(state.range(0));
  constexpr int kBatches = 16;
  llama::LlamaConfig config;
  config.n_layer = 8;
  config.n_embd = 512;
  config.n_head = 8;
  config.n_ff = 1024;
  config.n_vocab = 2000;
  auto cpu = Check(GetCpuDevice().CreateBackend("threads=1"));
  std::vector<std::unique_ptr<SimDevice>> devices;
  std::vector<std::unique_ptr<Backend>> sims;
  std::vector<Backend*> sim_ptrs;
  for (int d = 0; d < 2; ++d) {
    devices.push_back(
        Check(SimDevice::Create(absl::StrCat("pipe_sim", d),
                                "mem=2GiB,flops=10G,bw=100GB/s,guard=off")));
    sims.push_back(Check(devices.back()->CreateBackend()));
    sim_ptrs.push_back(sims.back().get());
  }
  // Layers [0, n/2) on sim 0, the rest and the output on sim 1, the token
  // embedding on the CPU.
  auto model = Check(
      llama::LlamaModel::Create(config, {sim_ptrs[0], sim_ptrs[1], cpu.get()}));
  FERRY_CHECK(model->FillRandom(1).ok());
  auto graph = Check(llama::BuildLlamaGraph(
      *model, {.n_tokens = 64, .last_token_only = false}));
  auto sched = Check(Scheduler::Create({sim_ptrs[0], sim_ptrs[1], cpu.get()},
                                       {.n_copies = n_copies}));
  FERRY_CHECK(sched->AllocGraph(graph.graph).ok());
  FERRY_CHECK(testing::FillLlamaInputs(graph, config.n_vocab, 1).ok());
  FERRY_CHECK(sched->Compute(graph.graph).ok());  // Warm up.
  double busy_ns = 0;
  for (auto _ : state) {
    for (auto& device : devices) device->ResetStats();
    if (n_copies == 1) {
      for (int k = 0; k < kBatches; ++k)
        FERRY_CHECK(sched->Compute(graph.graph).ok());
    } else {
      for (int k = 0; k < kBatches; ++k)
        FERRY_CHECK(sched->Submit(graph.graph).ok());
      FERRY_CHECK(sched->Synchronize().ok());
    }
    double slowest = 0;
    for (auto& device : devices) {
      slowest = std::max(
          slowest,
          static_cast<double>(device->stats(SimEngineKind::kCompute).busy_ns));
    }
    busy_ns += slowest;
  }
  const double iterations = static_cast<double>(state.iterations());
  state.counters["batches/s"] =
      benchmark::Counter(kBatches * iterations, benchmark::Counter::kIsRate);
  // The slowest stage's busy time per batch bounds the throughput.
  state.counters["bound_batches/s"] = kBatches * iterations / (busy_ns * 1e-9);
  state.counters["splits"] = sched->num_splits();
  state.SetLabel(n_copies == 1 ? "one batch at a time" : "pipelined");
}
BENCHMARK(BM_LayerSplitPipeline)
    ->Arg(1)
    ->Arg(4)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(2);

}  // namespace
}  // namespace ferry
