// Quantized mat-vec throughput: one activation row against the 1536 x 576
// weight matrix of a SmolLM2 ffn_up, for each weight type and ISA. Bytes/s
// count weight bytes read; f32 weights (what dequantizing at load gives) are
// the baseline. BM_LmHead reads a matrix too big for any cache, where bytes
// per weight decide the speed. Run with
//   ./bazelw run --config=opt //backends/host:vec_dot_benchmark
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "ferry/backends/host/vec_dot.h"
#include "ferry/quant/quant_type.h"
#include "ferry/quant/quantize.h"
#include "ferry/runtime/cpu_features.h"

namespace ferry::quant {
namespace {

constexpr int64_t kRows = 1536;
constexpr int64_t kCols = 576;

std::vector<float> Values(int64_t n, float phase) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = std::sin(0.37f * i + phase);
  return v;
}

void MatVec(benchmark::State& state, QuantType type, Isa isa, int64_t rows,
            int64_t cols = kCols) {
  const VecDotFn dot = FindVecDot(type, isa);
  if (dot == nullptr) {
    state.SkipWithError("ISA not supported on this CPU");
    return;
  }
  const int64_t row_bytes = RowBytes(type, cols);
  std::vector<uint8_t> w(row_bytes * rows);
  const std::vector<float> wf = Values(cols * 64, 0.5f);
  for (int64_t r = 0; r < rows; ++r) {
    (void)QuantizeRow(type, wf.data() + (r % 64) * cols,
                      w.data() + r * row_bytes, cols);
  }
  const QuantType act_type = *VecDotActivationType(type);
  std::vector<uint8_t> act(RowBytes(act_type, cols));
  const std::vector<float> af = Values(cols, 1.5f);
  (void)QuantizeRow(act_type, af.data(), act.data(), cols);
  std::vector<float> out(rows);
  for (auto _ : state) {
    for (int64_t r = 0; r < rows; ++r) {
      out[r] = dot(w.data() + r * row_bytes, act.data(), cols);
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * row_bytes * rows);
  state.SetItemsProcessed(state.iterations() * rows * cols);
}

// A matrix that stays in cache (an ffn_up): compute-bound.
void BM_MatVec(benchmark::State& state, QuantType type, Isa isa) {
  MatVec(state, type, isa, kRows);
}

// A SmolLM2 ffn_down, 576 x 1536: the K-quant types need rows of whole
// 256-element super-blocks (576 is not), so they are timed here, with the
// 32-element types beside them.
void BM_MatVecDown(benchmark::State& state, QuantType type, Isa isa) {
  MatVec(state, type, isa, kCols, kRows);
}

// SmolLM2's tied output projection, 49152 x 576: 17 MiB in q4_1, 109 MiB in
// f32, past every cache, as each decode step reads it. Preferred ISA.
void BM_LmHead(benchmark::State& state, QuantType type) {
  MatVec(state, type, PreferredIsa(type), 49152);
}

// Quantizing the activation row happens once per mat-vec.
void BM_QuantizeActivation(benchmark::State& state, QuantType type) {
  const std::vector<float> af = Values(kCols, 1.5f);
  std::vector<uint8_t> act(RowBytes(type, kCols));
  for (auto _ : state) {
    (void)QuantizeRow(type, af.data(), act.data(), kCols);
    benchmark::DoNotOptimize(act.data());
  }
  state.SetItemsProcessed(state.iterations() * kCols);
}

void RegisterAll() {
  for (QuantType type :
       {QuantType::kQ4_0, QuantType::kQ4_1, QuantType::kQ5_0, QuantType::kQ5_1,
        QuantType::kQ8_0, QuantType::kF16, QuantType::kBF16, QuantType::kF32}) {
    for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
      const std::string name = "BM_MatVec1536x576/" +
                               std::string(QuantTypeName(type)) + "/" +
                               std::string(IsaName(isa));
      benchmark::RegisterBenchmark(name.c_str(), BM_MatVec, type, isa);
    }
  }
  for (QuantType type :
       {QuantType::kQ4_1, QuantType::kQ5_0, QuantType::kQ8_0, QuantType::kQ2_K,
        QuantType::kQ3_K, QuantType::kQ4_K, QuantType::kQ5_K, QuantType::kQ6_K,
        QuantType::kIQ4_NL, QuantType::kIQ4_XS}) {
    for (Isa isa : {Isa::kScalar, Isa::kAvx2}) {
      const std::string name = "BM_MatVec576x1536/" +
                               std::string(QuantTypeName(type)) + "/" +
                               std::string(IsaName(isa));
      benchmark::RegisterBenchmark(name.c_str(), BM_MatVecDown, type, isa);
    }
  }
  for (QuantType type :
       {QuantType::kQ4_1, QuantType::kQ8_0, QuantType::kF16, QuantType::kF32}) {
    const std::string name =
        "BM_LmHead49152x576/" + std::string(QuantTypeName(type));
    benchmark::RegisterBenchmark(name.c_str(), BM_LmHead, type)
        ->Unit(benchmark::kMillisecond);
  }
  for (QuantType type : {QuantType::kQ8_0, QuantType::kQ8_1}) {
    const std::string name =
        "BM_QuantizeActivation576/" + std::string(QuantTypeName(type));
    benchmark::RegisterBenchmark(name.c_str(), BM_QuantizeActivation, type);
  }
}

const int kRegistered = (RegisterAll(), 0);

}  // namespace
}  // namespace ferry::quant
