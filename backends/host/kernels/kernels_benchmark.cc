// Per-op throughput of the CPU op kernels on 2 threads: GB/s (bytes from
// OpBytes) for memory-bound ops on llama-sized shapes, GFLOP/s for mul_mat.
//
//   ./bazelw run --config=opt //backends/host/kernels:kernels_benchmark
// (range_attention: --benchmark_filter=RangeAttention)
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "ferry/backends/host/kernels/kernel_runner.h"
#include "ferry/backends/host/kernels/kernels.h"
#include "ferry/graph/context.h"
#include "ferry/graph/graph.h"
#include "ferry/graph/op_cost.h"
#include "ferry/graph/ops.h"
#include "ferry/graph/tensor.h"
#include "ferry/graph/testing/reference.h"

namespace ferry::cpu_kernels {
namespace {

constexpr int kThreads = 2;

// Builds one node with `build`, fills its leafs, then times ComputeNode on
// kThreads threads. Reports GB/s, and GFLOP/s when the op has flops.
void RunOp(benchmark::State& state,
           const std::function<Tensor*(Context&)>& build) {
  Context ctx;
  Tensor* node = build(ctx);
  if (node == nullptr || !ctx.AllocateHostData().ok()) {
    state.SkipWithError("could not build the node");
    return;
  }
  auto graph = Graph::Build({node});
  if (!graph.ok()) {
    state.SkipWithError("could not build the graph");
    return;
  }
  uint64_t seed = 1;
  for (Tensor* leaf : graph->leafs()) {
    // i32 leafs are ids/positions: keep them small and in range.
    const float hi = leaf->dtype == DType::kI32 ? 64.0f : 1.0f;
    const float lo = leaf->dtype == DType::kI32 ? 0.0f : -1.0f;
    if (!testing::FillRandom(*leaf, seed++, lo, hi).ok()) {
      state.SkipWithError("fill failed");
      return;
    }
  }
  KernelRunner runner(kThreads);
  const absl::Status status = runner.Run(graph->nodes());
  if (!status.ok()) {
    state.SkipWithError(std::string(status.message()).c_str());
    return;
  }
  for (auto _ : state) {
    runner.Run(graph->nodes()).IgnoreError();
  }
  const double bytes = static_cast<double>(OpBytes(*node));
  const double flops = static_cast<double>(OpFlops(*node));
  state.counters["GB/s"] = benchmark::Counter(
      bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  if (node->op == Op::kMulMat) {
    state.counters["GFLOP/s"] = benchmark::Counter(
        flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  }
  state.SetLabel(node->ShapeString());
}

Tensor* F32(Context& ctx, std::initializer_list<int64_t> shape) {
  return *ctx.NewTensor(DType::kF32, shape);
}

constexpr int64_t kEmbd = 4096;
constexpr int64_t kTokens = 512;

void BM_Add(benchmark::State& state) {
  RunOp(state, [](Context& ctx) {
    return *Add(ctx, F32(ctx, {kEmbd, kTokens}), F32(ctx, {kEmbd, kTokens}));
  });
}
void BM_MulBroadcastRow(benchmark::State& state) {
  RunOp(state, [](Context& ctx) {
    return *Mul(ctx, F32(ctx, {kEmbd, kTokens}), F32(ctx, {kEmbd}));
  });
}
void BM_Scale(benchmark::State& state) {
  RunOp(state, [](Context& ctx) {
    return *Scale(ctx, F32(ctx, {kEmbd, kTokens}), 0.5f);
  });
}
void BM_Silu(benchmark::State& state) {
  RunOp(state, [](Context& ctx) {
    return *Silu(ctx, F32(ctx, {kEmbd, kTokens}));
  });
}
void BM_Gelu(benchmark::State& state) {
  RunOp(state, [](Context& ctx) {
    return *Gelu(ctx, F32(ctx, {kEmbd, kTokens}));
  });
}
void BM_RmsNorm(benchmark::State& state) {
  RunOp(state, [](Context& ctx) {
    return *RmsNorm(ctx, F32(ctx, {kEmbd, kTokens}), 1e-5f);
  });
}
void BM_SoftMaxMasked(benchmark::State& state) {
  // Attention scores: [kv, q, heads] with a causal-sized mask.
  RunOp(state, [](Context& ctx) {
    return *SoftMax(ctx, F32(ctx, {kTokens, kTokens, 8}),
                    F32(ctx, {kTokens, kTokens}), 0.125f);
  });
}
void BM_RopeNeox(benchmark::State& state) {
  RunOp(state, [](Context& ctx) {
    Tensor* pos = *ctx.NewTensor(DType::kI32, {kTokens});
    return *Rope(ctx, F32(ctx, {128, 32, kTokens}), pos, 128, RopeMode::kNeox);
  });
}
void BM_CpyF32ToF16(benchmark::State& state) {
  RunOp(state, [](Context& ctx) {
    return *Cpy(ctx, F32(ctx, {kEmbd, kTokens}),
                *ctx.NewTensor(DType::kF16, {kEmbd, kTokens}));
  });
}
void BM_GetRowsF16(benchmark::State& state) {
  // Token embedding lookup from a [4096, 8192] f16 table.
  RunOp(state, [](Context& ctx) {
    Tensor* ids = *ctx.NewTensor(DType::kI32, {kTokens});
    return *GetRows(ctx, *ctx.NewTensor(DType::kF16, {kEmbd, 8192}), ids);
  });
}
void BM_MulMat(benchmark::State& state) {
  const auto dtype = static_cast<DType>(state.range(0));
  const int64_t m = state.range(1), n = state.range(2), k = state.range(3);
  RunOp(state, [=](Context& ctx) {
    return *MulMat(ctx, *ctx.NewTensor(dtype, {k, m}), F32(ctx, {k, n}));
  });
}
// Attention's KQ: `heads` f32 slices of [M kv positions x N queries] over the
// head dimension K, K permuted from a [K, heads, M] cache as in llama.
void BM_MulMatHeads(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  const int64_t heads = state.range(3);
  RunOp(state, [=](Context& ctx) {
    Tensor* keys = *Permute(ctx, F32(ctx, {k, heads, m}), 0, 2, 1, 3);
    return *MulMat(ctx, keys, F32(ctx, {k, n, heads}));
  });
}

// range_attention at SmolLM2-135M's heads (64 wide, 9 query heads over 3
// kv heads) over a cache of 32 slots of 193 cells, f32 or f16. mode 0: a
// decode step of 32 sequences, each token over 160 cells of its own slot;
// mode 1: a 64-token prefill chunk of one sequence, token t over cells
// [0, 65 + t) (the chunk after a first one). GFLOP/s counts q.k and p.v.
void BM_RangeAttention(benchmark::State& state) {
  const auto cache_type = static_cast<DType>(state.range(0));
  const bool decode = state.range(1) != 1;
  // Mode 2: a decode step through 8 layers' caches (75 MB of f32), which
  // come from memory as a model's do, not from the last level cache.
  const int64_t layers = state.range(1) == 2 ? 8 : 1;
  constexpr int64_t kHeadDim = 64, kHeads = 9, kKvHeads = 3, kSlot = 193;
  constexpr int64_t kCells = 32 * kSlot;
  const int64_t n_tokens = decode ? 32 : 64;
  std::vector<float> ranges;
  int64_t cells_read = 0;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int64_t begin = decode ? t * kSlot : 0;
    const int64_t end = decode ? begin + 160 : 65 + t;
    ranges.push_back(static_cast<float>(begin));
    ranges.push_back(static_cast<float>(end));
    cells_read += end - begin;
  }
  Context ctx;
  Tensor* q = F32(ctx, {kHeadDim, kHeads, n_tokens});
  Tensor* r = *ctx.NewTensor(DType::kI32, {2, n_tokens});
  std::vector<Tensor*> nodes, caches;
  for (int64_t l = 0; l < layers; ++l) {
    Tensor* k = *ctx.NewTensor(cache_type, {kHeadDim * kKvHeads, kCells});
    Tensor* v = *ctx.NewTensor(cache_type, {kHeadDim * kKvHeads, kCells});
    caches.push_back(k);
    caches.push_back(v);
    nodes.push_back(*RangeAttention(ctx, q, k, v, r, 0.125f));
  }
  bool filled = ctx.AllocateHostData().ok() &&
                testing::FillRandom(*q, 1).ok() &&
                testing::WriteTensor(*r, ranges).ok();
  for (size_t i = 0; i < caches.size(); ++i) {
    filled = filled && testing::FillRandom(*caches[i], 2 + i).ok();
  }
  if (!filled) {
    state.SkipWithError("could not build the node");
    return;
  }
  KernelRunner runner(kThreads);
  if (absl::Status s = runner.Run(nodes); !s.ok()) {
    state.SkipWithError(std::string(s.message()).c_str());
    return;
  }
  for (auto _ : state) runner.Run(nodes).IgnoreError();
  state.counters["GFLOP/s"] = benchmark::Counter(
      4.0 * kHeadDim * kHeads * static_cast<double>(cells_read * layers) / 1e9,
      benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(absl::StrCat(DTypeName(cache_type),
                              decode ? " decode" : " prefill",
                              layers > 1 ? " from memory" : ""));
}

// mode: 0 decode, 1 prefill, 2 decode from memory.
BENCHMARK(BM_RangeAttention)
    ->ArgNames({"cache", "mode"})
    ->Args({static_cast<int>(DType::kF32), 0})
    ->Args({static_cast<int>(DType::kF16), 0})
    ->Args({static_cast<int>(DType::kF32), 1})
    ->Args({static_cast<int>(DType::kF16), 1})
    ->Args({static_cast<int>(DType::kF32), 2})
    ->Args({static_cast<int>(DType::kF16), 2})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Add)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MulBroadcastRow)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Scale)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Silu)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Gelu)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_RmsNorm)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SoftMaxMasked)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_RopeNeox)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CpyF32ToF16)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_GetRowsF16)->UseRealTime()->Unit(benchmark::kMicrosecond);
// Args: a dtype, M, N, K.
BENCHMARK(BM_MulMat)
    ->ArgNames({"dtype", "M", "N", "K"})
    ->Args({static_cast<int>(DType::kF32), 1024, 1024, 1024})
    ->Args({static_cast<int>(DType::kF16), 1024, 1024, 1024})
    ->Args({static_cast<int>(DType::kF32), 4096, 1, 4096})  // Decode GEMV.
    ->Args({static_cast<int>(DType::kF16), 4096, 1, 4096})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
// Args: M (kv length), N (queries), K (head dim), heads.
BENCHMARK(BM_MulMatHeads)
    ->ArgNames({"M", "N", "K", "heads"})
    ->Args({128, 32, 128, 32})  // Prompt chunk.
    ->Args({512, 1, 128, 32})   // Decode.
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// The element-wise, norm, softmax, rope and copy nodes of the 2-layer llama
// forward (n_embd 2048, 16 heads of 128, n_ff 5632) at range(0) tokens, one
// node each, as benchmarks/cpu_forward_benchmark.cc runs them.
constexpr int64_t kFwdEmbd = 2048;
constexpr int64_t kFwdHeads = 16;
constexpr int64_t kFwdHeadDim = 128;
constexpr int64_t kFwdFf = 5632;

void BM_FwdRmsNorm(benchmark::State& state) {
  const int64_t t = state.range(0);
  RunOp(state, [t](Context& ctx) {
    return *RmsNorm(ctx, F32(ctx, {kFwdEmbd, t}), 1e-5f);
  });
}
void BM_FwdMulNormWeight(benchmark::State& state) {
  const int64_t t = state.range(0);
  RunOp(state, [t](Context& ctx) {
    return *Mul(ctx, F32(ctx, {kFwdEmbd, t}), F32(ctx, {kFwdEmbd}));
  });
}
void BM_FwdMulGateUp(benchmark::State& state) {
  const int64_t t = state.range(0);
  RunOp(state, [t](Context& ctx) {
    return *Mul(ctx, F32(ctx, {kFwdFf, t}), F32(ctx, {kFwdFf, t}));
  });
}
void BM_FwdAdd(benchmark::State& state) {
  const int64_t t = state.range(0);
  RunOp(state, [t](Context& ctx) {
    return *Add(ctx, F32(ctx, {kFwdEmbd, t}), F32(ctx, {kFwdEmbd, t}));
  });
}
void BM_FwdSilu(benchmark::State& state) {
  const int64_t t = state.range(0);
  RunOp(state, [t](Context& ctx) { return *Silu(ctx, F32(ctx, {kFwdFf, t})); });
}
void BM_FwdRope(benchmark::State& state) {
  const int64_t t = state.range(0);
  RunOp(state, [t](Context& ctx) {
    Tensor* pos = *ctx.NewTensor(DType::kI32, {t});
    return *Rope(ctx, F32(ctx, {kFwdHeadDim, kFwdHeads, t}), pos,
                 static_cast<int>(kFwdHeadDim), RopeMode::kNormal);
  });
}
void BM_FwdSoftMax(benchmark::State& state) {
  const int64_t t = state.range(0);
  RunOp(state, [t](Context& ctx) {
    return *SoftMax(ctx, F32(ctx, {t, t, kFwdHeads}), F32(ctx, {t, t}), 0.088f);
  });
}
// V to [tokens, head_dim, heads]: the transposing cont of attention.
void BM_FwdContV(benchmark::State& state) {
  const int64_t t = state.range(0);
  RunOp(state, [t](Context& ctx) {
    Tensor* v = F32(ctx, {kFwdHeadDim, kFwdHeads, t});
    return *Cont(ctx, *Permute(ctx, v, 1, 2, 0, 3));
  });
}
// kqv [head_dim, tokens, heads] back to [head_dim, heads, tokens].
void BM_FwdContKqv(benchmark::State& state) {
  const int64_t t = state.range(0);
  RunOp(state, [t](Context& ctx) {
    Tensor* kqv = F32(ctx, {kFwdHeadDim, t, kFwdHeads});
    return *Cont(ctx, *Permute(ctx, kqv, 0, 2, 1, 3));
  });
}
void ForwardTokens(benchmark::internal::Benchmark* b) {
  b->ArgNames({"tokens"})->Arg(1)->Arg(8)->Arg(32)->Arg(512);
  b->UseRealTime()->Unit(benchmark::kMicrosecond);
}
BENCHMARK(BM_FwdRmsNorm)->Apply(ForwardTokens);
BENCHMARK(BM_FwdMulNormWeight)->Apply(ForwardTokens);
BENCHMARK(BM_FwdMulGateUp)->Apply(ForwardTokens);
BENCHMARK(BM_FwdAdd)->Apply(ForwardTokens);
BENCHMARK(BM_FwdSilu)->Apply(ForwardTokens);
BENCHMARK(BM_FwdRope)->Apply(ForwardTokens);
BENCHMARK(BM_FwdSoftMax)->Apply(ForwardTokens);
BENCHMARK(BM_FwdContV)->Apply(ForwardTokens);
BENCHMARK(BM_FwdContKqv)->Apply(ForwardTokens);

}  // namespace
}  // namespace ferry::cpu_kernels
