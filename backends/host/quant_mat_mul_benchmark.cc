// QuantMatMul on SmolLM2-135M's shapes (ffn_up 576 -> 1536, ffn_down
// 1536 -> 576) in q4_1, q4_0, q5_0, q5_1, q8_0 and iq4_nl, and ffn_down
// alone (576 is no whole number of super-blocks) in q2_K..q6_K and
// iq4_xs, on one thread, for 1 to 128 tokens: the integer path (activations
// rounded to q8_1; one-token dots, tiles from 2 tokens on) beside the
// dequantized-weight f32 GEMM path, and the tiles on grouped weights with
// the ISA's own choice (path 2) and with the AVX-512 tiles (path 3; skipped
// where the CPU has no AVX-512). `per_token` at n tokens against n = 1 is
// what batching tokens saves.
//
//   ./bazelw run --config=opt //backends/host:quant_mat_mul_benchmark
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "ferry/backends/host/internal/quant_group_layout.h"
#include "ferry/backends/host/internal/quant_mat_mul.h"
#include "ferry/graph/dtype.h"
#include "ferry/quant/quant_dtype.h"
#include "ferry/quant/quant_type.h"
#include "ferry/quant/quantize.h"
#include "ferry/runtime/cpu_features.h"

namespace ferry::cpu_internal {
namespace {

// Args: m, k, n, path (0: integer dots on row-major weights, 1: the
// dequantized GEMM, 2: integer tiles on weights in groups of 8 rows, as
// the CPU's weight buffers store all of these, 3: 2 on the AVX-512 tiles).
template <quant::QuantType kType>
void BM_QuantMatMul(benchmark::State& state) {
  const int64_t m = state.range(0);
  const int64_t k = state.range(1);
  const int64_t n = state.range(2);
  const bool gemm = state.range(3) == 1;
  const bool avx512 = state.range(3) == 3;
  const bool grouped = state.range(3) >= 2;
  if (avx512 && !IsaSupported(Isa::kAvx512)) {
    state.SkipWithError("no AVX-512 on this CPU");
    return;
  }
  const quant::QuantType type = kType;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> values(static_cast<size_t>(m * k));
  for (float& v : values) v = dist(rng);
  const int64_t row_bytes = quant::RowBytes(type, k);
  std::vector<std::byte> a(static_cast<size_t>(m * row_bytes));
  for (int64_t i = 0; i < m; ++i) {
    (void)quant::QuantizeRow(type, values.data() + i * k,
                             a.data() + i * row_bytes, k);
  }
  std::vector<float> b(static_cast<size_t>(n * k));
  for (float& v : b) v = dist(rng);
  std::vector<float> dst(static_cast<size_t>(n * m));
  if (grouped) {
    std::vector<std::byte> rows = a;
    QuantGroupLayout(*quant::DTypeOf(type), {k, m, 1, 1})
        .Pack(rows.data(), 0, rows.size(), a.data());
  }
  QuantMatMulArgs args;
  args.a_type = type;
  args.a = a.data();
  args.a_grouped = grouped;
  args.a_row_bytes = row_bytes;
  args.b = b.data();
  args.ldb = k;
  args.dst = dst.data();
  args.ldc = m;
  args.m = m;
  args.n = n;
  args.k = k;
  args.min_gemm_tokens = gemm ? 1 : std::numeric_limits<int64_t>::max();
  // 64-byte aligned, as QuantMatMul needs.
  std::vector<float> scratch(
      QuantMatMulScratchBytes(type, m, n, k, 1, args.min_gemm_tokens) / 4 + 16);
  void* aligned =
      scratch.data() +
      (16 - reinterpret_cast<uintptr_t>(scratch.data()) / 4 % 16) % 16;
  for (auto _ : state) {
    if (avx512) {
      QuantMatMul(args, 0, 1, aligned, Isa::kAvx512);
    } else {
      QuantMatMul(args, 0, 1, aligned);
    }
    benchmark::DoNotOptimize(dst.data());
  }
  state.counters["GFLOPS"] = benchmark::Counter(
      2.0 * static_cast<double>(m * n * k) *
          static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
  // Time per token: at n tokens against n = 1 it says what batching saves.
  state.counters["per_token"] = benchmark::Counter(
      static_cast<double>(n) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
void Shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"m", "k", "n", "path"})
      ->ArgsProduct(
          {{1536}, {576}, {1, 2, 4, 8, 16, 32, 64, 128}, {0, 1, 2, 3}})
      ->ArgsProduct(
          {{576}, {1536}, {1, 2, 4, 8, 16, 32, 64, 128}, {0, 1, 2, 3}});
}
// ffn_down only: K formats need rows of whole 256-element super-blocks.
void KShapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"m", "k", "n", "path"})
      ->ArgsProduct(
          {{576}, {1536}, {1, 2, 4, 8, 16, 32, 64, 128}, {0, 1, 2, 3}});
}
BENCHMARK_TEMPLATE(BM_QuantMatMul, quant::QuantType::kQ4_1)->Apply(Shapes);
BENCHMARK_TEMPLATE(BM_QuantMatMul, quant::QuantType::kQ4_0)->Apply(Shapes);
BENCHMARK_TEMPLATE(BM_QuantMatMul, quant::QuantType::kQ5_0)->Apply(Shapes);
BENCHMARK_TEMPLATE(BM_QuantMatMul, quant::QuantType::kQ5_1)->Apply(Shapes);
BENCHMARK_TEMPLATE(BM_QuantMatMul, quant::QuantType::kQ8_0)->Apply(Shapes);
BENCHMARK_TEMPLATE(BM_QuantMatMul, quant::QuantType::kQ2_K)->Apply(KShapes);
BENCHMARK_TEMPLATE(BM_QuantMatMul, quant::QuantType::kQ3_K)->Apply(KShapes);
BENCHMARK_TEMPLATE(BM_QuantMatMul, quant::QuantType::kQ4_K)->Apply(KShapes);
BENCHMARK_TEMPLATE(BM_QuantMatMul, quant::QuantType::kQ5_K)->Apply(KShapes);
BENCHMARK_TEMPLATE(BM_QuantMatMul, quant::QuantType::kQ6_K)->Apply(KShapes);
BENCHMARK_TEMPLATE(BM_QuantMatMul, quant::QuantType::kIQ4_XS)->Apply(KShapes);
BENCHMARK_TEMPLATE(BM_QuantMatMul, quant::QuantType::kIQ4_NL)->Apply(Shapes);

}  // namespace
}  // namespace ferry::cpu_internal
