// What EnqueueCompute costs per node on the CPU backend: the placement
// checks and the metadata snapshot of backend.h's rule 1, next to running
// the same nodes directly on a KernelRunner (no checks, no snapshot), for
// a chain of small element-wise nodes whose compute is negligible.
// BM_EnqueueCompute/1 is one node enqueued and synchronized at a time, as a
// scheduler with an eval callback runs a graph: there the hand-off between
// the calling thread and the stream's worker, if any, is most of the cost.
//
//   ./bazelw run --config=opt //backends/cpu:enqueue_benchmark
#include <memory>
#include <vector>

#include "benchmark/benchmark.h"
#include "ferry/backends/buffer.h"
#include "ferry/backends/cpu/cpu_backend.h"
#include "ferry/backends/host/kernels/kernel_runner.h"
#include "ferry/backends/host/kernels/kernels.h"
#include "ferry/backends/node_snapshot.h"
#include "ferry/graph/context.h"
#include "ferry/graph/graph.h"
#include "ferry/graph/ops.h"
#include "ferry/runtime/status_macros.h"

namespace ferry {
namespace {

struct Chain {
  Context ctx;
  Graph graph;
  std::unique_ptr<Buffer> buffer;
};

// n nodes, each add(previous, weight): two sources per node.
std::unique_ptr<Chain> MakeChain(int n) {
  auto chain = std::make_unique<Chain>();
  Tensor* x = *chain->ctx.NewTensor(DType::kF32, {16}, "x");
  Tensor* w = *chain->ctx.NewTensor(DType::kF32, {16}, "w");
  Tensor* t = x;
  for (int i = 0; i < n; ++i) t = *Add(chain->ctx, t, w);
  chain->graph = *Graph::Build({t});
  BufferType* type = GetCpuDevice().default_buffer_type();
  chain->buffer = *type->Allocate(static_cast<size_t>(n + 2) * 64);
  size_t offset = 0;
  for (auto list : {chain->graph.leafs(), chain->graph.nodes()}) {
    for (Tensor* tensor : list) {
      FERRY_CHECK(PlaceTensor(*chain->buffer, *tensor, offset).ok());
      offset += 64;
    }
  }
  return chain;
}

void BM_EnqueueCompute(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  auto chain = MakeChain(n);
  auto backend = *GetCpuDevice().CreateBackend("threads=1");
  for (auto _ : state) {
    FERRY_CHECK(backend->EnqueueCompute(chain->graph.nodes()).ok());
    FERRY_CHECK(backend->Synchronize().ok());
  }
  state.SetItemsProcessed(state.iterations() * n);
  state.SetLabel("checked + snapshot + synchronize");
}
BENCHMARK(BM_EnqueueCompute)->Arg(1)->Arg(64)->Arg(1024);

void BM_KernelRunnerDirect(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  auto chain = MakeChain(n);
  cpu_kernels::KernelRunner runner(1);
  for (auto _ : state) {
    FERRY_CHECK(
        runner.Run(chain->graph.nodes(), nullptr, /*validate=*/false).ok());
  }
  state.SetItemsProcessed(state.iterations() * n);
  state.SetLabel("no checks, no snapshot, same thread");
}
BENCHMARK(BM_KernelRunnerDirect)->Arg(64)->Arg(1024);

// The parts: the support check and the snapshot alone.
void BM_CheckSupported(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  auto chain = MakeChain(n);
  for (auto _ : state) {
    for (const Tensor* node : chain->graph.nodes()) {
      benchmark::DoNotOptimize(cpu_kernels::CheckSupported(*node).ok());
    }
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_CheckSupported)->Arg(1024);

void BM_Snapshot(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  auto chain = MakeChain(n);
  for (auto _ : state) {
    auto snapshot = NodeSnapshot::Make(
        chain->graph.nodes(),
        [](const Tensor& t) -> absl::StatusOr<void*> { return t.data; });
    benchmark::DoNotOptimize(snapshot.ok());
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_Snapshot)->Arg(1024);

}  // namespace
}  // namespace ferry
