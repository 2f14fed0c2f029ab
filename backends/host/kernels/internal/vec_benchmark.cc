// The row primitives on one thread, each instruction set forced in turn, on
// rows of the 2-layer llama forward's shapes (n_embd 2048, n_ff 5632, head
// 128): the ISAs side by side in one run.
//
//   ./bazelw run --config=opt //backends/host/kernels:vec_benchmark
//
// BM_<Row>/<isa>/<n>: isa 0 portable, 1 AVX2, 2 AVX-512 (skipped where the
// CPU lacks it); GB/s counts the bytes read and written once.
#include <cstdint>
#include <optional>
#include <vector>

#include "benchmark/benchmark.h"
#include "ferry/backends/host/kernels/internal/vec.h"

namespace ferry::cpu_kernels_internal {
namespace {

// Forces the state's ISA for the benchmark's scope; false (and the run
// skipped) when the CPU cannot run it.
bool ForceIsa(benchmark::State& state) {
  const auto isa = static_cast<Isa>(state.range(0));
  if (!IsaSupported(isa)) {
    state.SkipWithError("this CPU lacks the ISA");
    return false;
  }
  ForceIsaForTesting(isa);
  return true;
}

std::vector<float> Row(int64_t n, float scale) {
  std::vector<float> row(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    row[i] = scale * static_cast<float>((i * 37) % 101 - 50) / 50.0f;
  }
  return row;
}

// Reports GB/s for `arrays` rows of n floats and restores the best ISA.
void Finish(benchmark::State& state, int64_t n, int arrays) {
  state.counters["GB/s"] =
      benchmark::Counter(static_cast<double>(n * arrays * sizeof(float)) / 1e9,
                         benchmark::Counter::kIsIterationInvariantRate);
  ForceIsaForTesting(std::nullopt);
}

void BM_AddRow(benchmark::State& state) {
  if (!ForceIsa(state)) return;
  const int64_t n = state.range(1);
  std::vector<float> a = Row(n, 1), b = Row(n, 2), d(static_cast<size_t>(n));
  for (auto _ : state) {
    BinaryRow(BinaryOp::kAdd, a.data(), b.data(), d.data(), n);
    benchmark::DoNotOptimize(d.data());
  }
  Finish(state, n, 3);
}

void BM_SiluRow(benchmark::State& state) {
  if (!ForceIsa(state)) return;
  const int64_t n = state.range(1);
  std::vector<float> a = Row(n, 4), d(static_cast<size_t>(n));
  for (auto _ : state) {
    SiluRow(a.data(), d.data(), n);
    benchmark::DoNotOptimize(d.data());
  }
  Finish(state, n, 2);
}

// rms_norm's two passes: the sum of squares, then the scaling.
void BM_RmsNormRow(benchmark::State& state) {
  if (!ForceIsa(state)) return;
  const int64_t n = state.range(1);
  std::vector<float> a = Row(n, 1), d(static_cast<size_t>(n));
  for (auto _ : state) {
    const float ss = SumSquaresRow(a.data(), 0.0f, n);
    AffineRow(a.data(), 0.0f, 1.0f / (ss + 1.0f), d.data(), n);
    benchmark::DoNotOptimize(d.data());
  }
  Finish(state, n, 3);
}

// soft_max's three passes over one attention row.
void BM_SoftMaxRow(benchmark::State& state) {
  if (!ForceIsa(state)) return;
  const int64_t n = state.range(1);
  std::vector<float> a = Row(n, 3), mask = Row(n, 1), d(static_cast<size_t>(n));
  for (auto _ : state) {
    const float max = ScaleMaskMaxRow(a.data(), mask.data(), 0.1f, d.data(), n);
    const float sum = ExpSubRow(d.data(), max, n);
    ScaleRow(d.data(), 1.0f / sum, d.data(), n);
    benchmark::DoNotOptimize(d.data());
  }
  Finish(state, n, 5);
}

// One token of rope (normal mode) over 16 heads of 128: angles, sin/cos,
// then the rotation of each head.
void BM_RopeToken(benchmark::State& state) {
  if (!ForceIsa(state)) return;
  constexpr int64_t kHead = 128;
  constexpr int64_t kHeads = 16;
  constexpr int64_t kHalf = kHead / 2;
  std::vector<double> theta(kHalf);
  for (int64_t k = 0; k < kHalf; ++k) theta[k] = 1.0 / (1.0 + k);
  std::vector<float> angle(kHalf), sin(kHalf), cos(kHalf), cos2(kHead),
      nsin2(kHead);
  std::vector<float> x = Row(kHead * kHeads, 1), d(x.size());
  int32_t position = 0;
  for (auto _ : state) {
    RopeAnglesRow(++position, theta.data(), angle.data(), kHalf);
    SinCosRow(angle.data(), sin.data(), cos.data(), kHalf);
    for (int64_t k = 0; k < kHalf; ++k) {
      cos2[2 * k] = cos2[2 * k + 1] = cos[k];
      nsin2[2 * k] = -sin[k];
      nsin2[2 * k + 1] = sin[k];
    }
    for (int64_t h = 0; h < kHeads; ++h) {
      RopeNormalRow(x.data() + h * kHead, cos2.data(), nsin2.data(),
                    d.data() + h * kHead, kHead);
    }
    benchmark::DoNotOptimize(d.data());
  }
  Finish(state, kHead * kHeads, 2);
}

void Isas(benchmark::internal::Benchmark* b, std::vector<int64_t> lengths) {
  b->ArgNames({"isa", "n"});
  for (int64_t n : lengths) {
    for (int isa = 0; isa <= 2; ++isa) b->Args({isa, n});
  }
}

BENCHMARK(BM_AddRow)->Apply([](auto* b) { Isas(b, {2048, 32 * 2048}); });
BENCHMARK(BM_SiluRow)->Apply([](auto* b) { Isas(b, {5632, 32 * 5632}); });
BENCHMARK(BM_RmsNormRow)->Apply([](auto* b) { Isas(b, {2048}); });
BENCHMARK(BM_SoftMaxRow)->Apply([](auto* b) { Isas(b, {32, 512}); });
BENCHMARK(BM_RopeToken)->Apply([](auto* b) { Isas(b, {128}); });

}  // namespace
}  // namespace ferry::cpu_kernels_internal
