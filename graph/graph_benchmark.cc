// Graph::Build on transformer-like graphs of 1k and 10k nodes.
#include <vector>

#include "benchmark/benchmark.h"
#include "ferry/graph/context.h"
#include "ferry/graph/graph.h"
#include "ferry/graph/ops.h"

namespace ferry {
namespace {

// Builds `layers` blocks of 10 nodes each; returns the output.
Tensor* BuildLayers(Context& ctx, int layers) {
  Tensor* h = *ctx.NewTensor(DType::kF32, {64, 8}, "x");
  for (int layer = 0; layer < layers; ++layer) {
    Tensor* w = *ctx.NewTensor(DType::kF16, {64, 64}, "w");
    Tensor* g = *ctx.NewTensor(DType::kF32, {64}, "g");
    Tensor* n = *RmsNorm(ctx, h, 1e-5f);
    Tensor* ng = *Mul(ctx, n, g);
    Tensor* m = *MulMat(ctx, w, ng);
    Tensor* s = *Silu(ctx, m);
    Tensor* t = *Transpose(ctx, s);
    Tensor* c = *Cont(ctx, t);
    Tensor* r = *Reshape(ctx, c, {64, 8});
    Tensor* sm = *SoftMax(ctx, r, nullptr, 1.0f);
    Tensor* a = *Add(ctx, sm, h);
    h = *Scale(ctx, a, 0.5f);
  }
  return h;
}

void BM_GraphBuild(benchmark::State& state) {
  Context ctx;
  Tensor* out = BuildLayers(ctx, static_cast<int>(state.range(0)) / 10);
  const std::vector<Tensor*> outputs = {out};
  for (auto _ : state) {
    absl::StatusOr<Graph> graph = Graph::Build(outputs);
    benchmark::DoNotOptimize(graph);
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_GraphBuild)->Arg(1000)->Arg(10000);

void BM_BuildOps(benchmark::State& state) {
  for (auto _ : state) {
    Context ctx;
    benchmark::DoNotOptimize(BuildLayers(ctx, 100));
  }
  state.SetItemsProcessed(state.iterations() * 1000);
}
BENCHMARK(BM_BuildOps);

}  // namespace
}  // namespace ferry
