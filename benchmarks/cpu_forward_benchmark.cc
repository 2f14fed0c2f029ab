// The CPU backend on a whole forward pass: a 2-layer llama of models/llama
// (n_embd 2048, 16 heads, n_ff 5632, vocabulary 32000, f32 weights,
// attention over the batch) on 2 threads through the
// scheduler, as /work/shared/bench/ggml_harness.cpp runs ggml's
// (`compute 2 <tokens> cpu <iters> 2`), so the two can run side by side.
//
//   ./bazelw run --config=opt //benchmarks:cpu_forward_benchmark
//
// BM_CpuForward/<tokens>/<packed>: one forward pass; packed = 1 places the
//   matrices in the CPU's weights buffer type (panels, packed once at load)
//   and the token table, which only get_rows reads, in plain memory, as
//   llama.cpp places them; packed = 0 places everything in plain host memory
//   (mul_mat then packs on every call). Counters: GFLOP/s (the harness's
//   count: weight products plus attention), tokens/s.
// BM_CpuForwardOps/<tokens>: the same graph node by node through the
//   scheduler's eval callback (each node computed, then synchronized),
//   reported as microseconds per forward for each op. ggml's figures come
//   from the same method (see the report of issue #18 for the program).
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "benchmark/benchmark.h"
#include "ferry/alloc/weights.h"
#include "ferry/backends/backend.h"
#include "ferry/backends/buffer.h"
#include "ferry/backends/cpu/cpu_backend.h"
#include "ferry/graph/context.h"
#include "ferry/graph/op.h"
#include "ferry/graph/testing/reference.h"
#include "ferry/models/llama/llama_graph.h"
#include "ferry/models/llama/llama_model.h"
#include "ferry/models/llama/testing/llama_testing.h"
#include "ferry/runtime/status_macros.h"
#include "ferry/sched/scheduler.h"

namespace ferry {
namespace {

constexpr int kThreads = 2;

template <typename T>
T Check(absl::StatusOr<T> value) {
  if (!value.ok()) {
    std::fprintf(stderr, "%s\n", value.status().ToString().c_str());
  }
  FERRY_CHECK(value.ok());
  return *std::move(value);
}

llama::LlamaConfig Config() {
  return {.n_layer = 2,
          .n_embd = 2048,
          .n_head = 16,
          .n_ff = 5632,
          .n_vocab = 32000,
          .n_ctx = 512};
}

// The model, made once per placement (filling 1.3 GB takes seconds).
// One at a time: each holds 1.3 GB.
llama::LlamaModel& Model(bool packed) {
  static auto* model = new std::unique_ptr<llama::LlamaModel>;
  static bool model_packed = false;
  if (*model == nullptr || model_packed != packed) {
    model->reset();
    CpuDevice& device = GetCpuDevice();
    BufferType* type =
        packed ? device.weights_buffer_type() : device.default_buffer_type();
    *model = Check(testing::MakePlacedLlamaModel(Config(), *type));
    model_packed = packed;
  }
  return **model;
}

double ForwardFlops(int64_t tokens) {
  const llama::LlamaConfig c = Config();
  const double t = static_cast<double>(tokens);
  const double e = static_cast<double>(c.n_embd);
  const double f = static_cast<double>(c.n_ff);
  const double v = static_cast<double>(c.n_vocab);
  return c.n_layer * (2 * t * (4 * e * e + 3 * e * f) + 2 * 2 * t * t * e) +
         2 * t * e * v;
}

struct Forward {
  std::unique_ptr<Backend> cpu;
  std::unique_ptr<Scheduler> sched;
  llama::LlamaGraph graph;

  Forward(int64_t tokens, bool packed) {
    llama::LlamaModel& model = Model(packed);
    cpu = Check(GetCpuDevice().CreateBackend("threads=2"));
    sched = Check(Scheduler::Create({cpu.get()}));
    graph = Check(llama::BuildLlamaGraph(
        model, {.n_tokens = tokens, .last_token_only = false}));
    FERRY_CHECK(sched->AllocGraph(graph.graph).ok());
    FERRY_CHECK(
        testing::FillLlamaInputs(graph, model.config().n_vocab, 1).ok());
    for (int i = 0; i < 2; ++i) FERRY_CHECK(sched->Compute(graph.graph).ok());
  }
};

// The forward for (tokens, packed), kept across repetitions (a 512-token
// one takes a second to warm up).
Forward& CachedForward(int64_t tokens, bool packed) {
  static auto* cache =
      new std::map<std::pair<int64_t, bool>, std::unique_ptr<Forward>>;
  if (!cache->empty() && cache->begin()->first.second != packed) {
    cache->clear();  // Its model is about to be replaced.
  }
  std::unique_ptr<Forward>& forward = (*cache)[{tokens, packed}];
  if (forward == nullptr) forward = std::make_unique<Forward>(tokens, packed);
  return *forward;
}

void BM_CpuForward(benchmark::State& state) {
  const int64_t tokens = state.range(0);
  Forward& forward = CachedForward(tokens, state.range(1) != 0);
  for (auto _ : state) {
    FERRY_CHECK(forward.sched->Compute(forward.graph.graph).ok());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(ForwardFlops(tokens) / 1e9,
                         benchmark::Counter::kIsIterationInvariantRate);
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(tokens),
                         benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(state.range(1) != 0 ? "packed weights" : "plain weights");
}
// For the median of single passes, as the harness reports: add
//   --benchmark_min_time=0 --benchmark_repetitions=10
//   --benchmark_report_aggregates_only=true
BENCHMARK(BM_CpuForward)
    ->ArgNames({"tokens", "packed"})
    ->ArgsProduct({{1, 8, 32, 512}, {1, 0}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

void BM_CpuForwardOps(benchmark::State& state) {
  const int64_t tokens = state.range(0);
  Forward forward(tokens, /*packed=*/true);
  // Asks for every node: the scheduler then computes nodes one at a time,
  // synchronizing after each, and the time between two callbacks is the
  // node's (ggml_ops.cpp times ggml's the same way).
  std::map<std::string, double> seconds;
  absl::Time last;
  forward.sched->SetEvalCallback([&](Tensor& node, bool ask) {
    if (ask) return true;
    const absl::Time now = absl::Now();
    seconds[std::string(OpName(node.op))] += absl::ToDoubleSeconds(now - last);
    last = now;
    return true;
  });
  for (auto _ : state) {
    last = absl::Now();
    FERRY_CHECK(forward.sched->Compute(forward.graph.graph).ok());
  }
  for (const auto& [op, s] : seconds) {
    state.counters[op + "_us"] =
        s * 1e6 / static_cast<double>(state.iterations());
  }
}
BENCHMARK(BM_CpuForwardOps)
    ->ArgNames({"tokens"})
    ->Arg(1)
    ->Arg(32)
    ->Arg(512)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0);

}  // namespace
}  // namespace ferry
