// Benchmarks the CPU mul_mat against OpenBLAS on the same shapes, both on 2
// threads. ferry runs on a persistent pool (OpenBLAS keeps its own), so
// neither side pays for thread creation.
//
//   ./bazelw run --config=opt //backends/host:mat_mul_benchmark --
//       --benchmark_filter=Ferry
//
// (or OpenBlas, or both in one run).
#include <cblas.h>
#include <immintrin.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "benchmark/benchmark.h"
#include "ferry/backends/host/internal/mat_mul.h"
#include "ferry/backends/host/internal/packed_layout.h"
#include "ferry/graph/dtype.h"

namespace ferry {
namespace cpu_internal {
namespace {

constexpr int kThreads = 2;

// Runs MatMul(args, ith, nth) on the caller (ith = 0) and nth - 1 workers
// that wait between jobs by spinning, then yielding, as OpenBLAS's do.
// Thread-compatible: one Run at a time.
class SpinPool {
 public:
  explicit SpinPool(int nth) : nth_(nth) {
    for (int i = 1; i < nth; ++i) workers_.emplace_back([this, i] { Work(i); });
  }
  ~SpinPool() {
    stop_.store(true, std::memory_order_release);
    generation_.fetch_add(1, std::memory_order_release);
    for (std::thread& t : workers_) t.join();
  }

  void Run(const MatMulArgs& args, Isa isa) {
    if (args.next_column != nullptr) {
      args.next_column->store(0, std::memory_order_relaxed);
    }
    Run([&args, isa, nth = nth_](int ith) {
      MatMulWithIsa(args, ith, nth, isa);
    });
  }

  // Runs job(ith) on every thread and returns when all are done.
  void Run(const std::function<void(int)>& job) {
    job_ = &job;
    pending_.store(nth_ - 1, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    job(0);
    for (int spins = 0; pending_.load(std::memory_order_acquire) != 0;
         ++spins) {
      Backoff(spins);
    }
  }

 private:
  // Spins briefly, then yields: with more runnable threads than cores (other
  // jobs on the machine), pure spinning would starve the thread waited for.
  static void Backoff(int spins) {
    if (spins < 4096) {
      __builtin_ia32_pause();
    } else {
      std::this_thread::yield();
    }
  }

  void Work(int ith) {
    uint64_t seen = 0;
    while (true) {
      uint64_t g;
      for (int spins = 0;
           (g = generation_.load(std::memory_order_acquire)) == seen; ++spins) {
        Backoff(spins);
      }
      seen = g;
      if (stop_.load(std::memory_order_acquire)) return;
      (*job_)(ith);
      pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
  }

  const int nth_;
  const std::function<void(int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::vector<std::thread> workers_;
};

struct Operands {
  std::vector<float> a;
  std::vector<Half> a_f16;
  std::vector<BFloat16> a_bf16;
  std::vector<float> b;
  std::vector<float> c;
};

Operands MakeOperands(int64_t m, int64_t n, int64_t k, DType type) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Operands o;
  o.a.resize(m * k);
  for (float& x : o.a) x = dist(rng);
  if (type == DType::kF16) {
    for (float x : o.a) o.a_f16.push_back(F32ToF16(x));
  } else if (type == DType::kBF16) {
    for (float x : o.a) o.a_bf16.push_back(F32ToBF16(x));
  }
  o.b.resize(n * k);
  for (float& x : o.b) x = dist(rng);
  o.c.assign(n * m, 0.0f);
  return o;
}

void SetFlops(benchmark::State& state, int64_t m, int64_t n, int64_t k) {
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * m * n * k * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

// Args: m, n, k. Weights in `type`; with `packed`, in the panel layout of
// packed_layout.h (packed before timing, as a weights buffer holds them).
void RunFerry(benchmark::State& state, DType type, Isa isa, bool shared = false,
              bool packed = false) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  if (!IsaSupported(isa)) {
    state.SkipWithError("ISA not supported on this CPU");
    return;
  }
  Operands o = MakeOperands(m, n, k, type);
  MatMulArgs args;
  args.a_type = type;
  args.a = type == DType::kF16    ? static_cast<const void*>(o.a_f16.data())
           : type == DType::kBF16 ? static_cast<const void*>(o.a_bf16.data())
                                  : static_cast<const void*>(o.a.data());
  args.lda = k;
  std::vector<std::byte> a_packed;
  if (packed) {
    const PackedLayout layout(type, {k, m, 1, 1});
    a_packed.resize(layout.PackedBytes());
    layout.Pack(args.a, 0, layout.LogicalBytes(), a_packed.data());
    args.a = a_packed.data();
    args.a_packed = true;
    // Free the rows, so only the packed copy competes for the cache.
    o.a = {};
    o.a_f16 = {};
    o.a_bf16 = {};
  }
  args.b = o.b.data();
  args.ldb = k;
  args.dst = o.c.data();
  args.ldc = m;
  args.m = m;
  args.n = n;
  args.k = k;
  std::atomic<int64_t> next_column{0};
  if (shared) args.next_column = &next_column;
  SpinPool pool(kThreads);
  for (auto _ : state) {
    pool.Run(args, isa);
    benchmark::DoNotOptimize(o.c.data());
    benchmark::ClobberMemory();
  }
  SetFlops(state, m, n, k);
  state.counters["weight GB/s"] = benchmark::Counter(
      static_cast<double>(m * k * DTypeBlockBytes(type)) / 1e9,
      benchmark::Counter::kIsIterationInvariantRate);
}

void BM_FerryMatMul(benchmark::State& state) {
  RunFerry(state, DType::kF32, BestIsa());
}
// Threads claim column ranges from a shared counter instead of fixed blocks.
void BM_FerryMatMulShared(benchmark::State& state) {
  RunFerry(state, DType::kF32, BestIsa(), /*shared=*/true);
}
void BM_FerryMatMulF16(benchmark::State& state) {
  RunFerry(state, DType::kF16, BestIsa());
}
void BM_FerryMatMulBF16(benchmark::State& state) {
  RunFerry(state, DType::kBF16, BestIsa());
}
void BM_FerryMatMulAvx2(benchmark::State& state) {
  RunFerry(state, DType::kF32, Isa::kAvx2);
}
// Weights packed once, as the CPU's weights buffer type stores them.
void BM_FerryPacked(benchmark::State& state) {
  RunFerry(state, DType::kF32, BestIsa(), false, /*packed=*/true);
}
void BM_FerryPackedShared(benchmark::State& state) {
  RunFerry(state, DType::kF32, BestIsa(), /*shared=*/true, /*packed=*/true);
}
void BM_FerryPackedAvx2(benchmark::State& state) {
  RunFerry(state, DType::kF32, Isa::kAvx2, false, /*packed=*/true);
}
void BM_FerryPackedF16(benchmark::State& state) {
  RunFerry(state, DType::kF16, BestIsa(), false, /*packed=*/true);
}
void BM_FerryPackedBF16(benchmark::State& state) {
  RunFerry(state, DType::kBF16, BestIsa(), false, /*packed=*/true);
}

// The same product as BM_FerryMatMul: C(N x M) = B(N x K) * A(M x K)^T; for
// n = 1, OpenBLAS's own GEMV.
void BM_OpenBlasSgemm(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  Operands o = MakeOperands(m, n, k, DType::kF32);
  openblas_set_num_threads(kThreads);
  for (auto _ : state) {
    if (n == 1) {
      cblas_sgemv(CblasRowMajor, CblasNoTrans, m, k, 1.0f, o.a.data(), k,
                  o.b.data(), 1, 0.0f, o.c.data(), 1);
    } else {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, m, k, 1.0f,
                  o.b.data(), k, o.a.data(), k, 0.0f, o.c.data(), m);
    }
    benchmark::DoNotOptimize(o.c.data());
    benchmark::ClobberMemory();
  }
  SetFlops(state, m, n, k);
}

// Sums n floats with AVX2 loads (8 independent accumulators), the read
// pattern of a memory-bound GEMV without its arithmetic.
__attribute__((target("avx2"))) float SumAvx2(const float* p, int64_t n) {
  __m256 acc[8];
  for (__m256& a : acc) a = _mm256_setzero_ps();
  for (int64_t i = 0; i + 64 <= n; i += 64) {
    for (int v = 0; v < 8; ++v) {
      acc[v] = _mm256_add_ps(acc[v], _mm256_loadu_ps(p + i + 8 * v));
    }
  }
  for (int v = 1; v < 8; ++v) acc[0] = _mm256_add_ps(acc[0], acc[v]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc[0]);
  float sum = 0;
  for (float x : lanes) sum += x;
  return sum;
}

// Memory read bandwidth on kThreads threads, each summing its half of a
// buffer of range(0) MiB: the bound a GEMV over weights that size can reach.
void BM_MemoryRead(benchmark::State& state) {
  if (!__builtin_cpu_supports("avx2")) {
    state.SkipWithError("needs AVX2");
    return;
  }
  const int64_t n = state.range(0) * (int64_t{1} << 20) / 4;
  std::vector<float> data(static_cast<size_t>(n), 1.0f);
  SpinPool pool(kThreads);
  float sums[kThreads] = {};
  const std::function<void(int)> job = [&](int ith) {
    const int64_t begin = n * ith / kThreads / 64 * 64;
    const int64_t end = n * (ith + 1) / kThreads / 64 * 64;
    sums[ith] = SumAvx2(data.data() + begin, end - begin);
  };
  for (auto _ : state) {
    pool.Run(job);
    benchmark::DoNotOptimize(sums);
  }
  state.counters["GB/s"] =
      benchmark::Counter(static_cast<double>(n) * 4 / 1e9,
                         benchmark::Counter::kIsIterationInvariantRate);
}
// 44 MiB: the 5632 x 2048 f32 weight of the GEMV below; 512 MiB: far past
// any cache.
BENCHMARK(BM_MemoryRead)
    ->Arg(44)
    ->Arg(512)
    ->UseRealTime()
    ->MeasureProcessCPUTime()
    ->MinTime(1.0);

void SquareSizes(benchmark::internal::Benchmark* b) {
  for (int64_t s : {512, 1024, 2048, 4096}) b->Args({s, s, s});
  b->Args({4096, 1, 4096});  // Matrix-vector (token generation).
  b->UseRealTime()->MeasureProcessCPUTime()->MinTime(1.0);
}

// The forward pass's weight shapes (n_ff 5632 x n_embd 2048) at 1, 8, 32 and
// 512 tokens, ffn_down and the output matrix, then squares.
void ModelSizes(benchmark::internal::Benchmark* b) {
  for (int64_t n : {1, 8, 32, 512}) b->Args({5632, n, 2048});
  b->Args({2048, 32, 5632});  // ffn_down at 32 tokens: K above the whole-K B.
  b->Args({32000, 1, 2048});  // The output matrix (256 MiB): past L3.
  b->Args({1024, 1024, 1024});
  b->Args({4096, 4096, 4096});
  b->UseRealTime()->MeasureProcessCPUTime()->MinTime(1.0);
}

BENCHMARK(BM_FerryMatMul)->Apply(SquareSizes);
BENCHMARK(BM_FerryMatMul)->Apply(ModelSizes);
BENCHMARK(BM_FerryPacked)->Apply(ModelSizes);
BENCHMARK(BM_FerryPackedShared)->Apply(ModelSizes);
BENCHMARK(BM_FerryPackedAvx2)->Apply(ModelSizes);
BENCHMARK(BM_FerryPackedF16)->Apply(ModelSizes);
BENCHMARK(BM_FerryPackedBF16)->Apply(ModelSizes);
BENCHMARK(BM_OpenBlasSgemm)->Apply(ModelSizes);
BENCHMARK(BM_FerryMatMulShared)->Apply(SquareSizes);
BENCHMARK(BM_OpenBlasSgemm)->Apply(SquareSizes);
BENCHMARK(BM_FerryMatMulF16)
    ->Args({1024, 1024, 1024})
    ->Args({4096, 1, 4096})
    ->UseRealTime()
    ->MinTime(1.0);
BENCHMARK(BM_FerryMatMulBF16)
    ->Args({1024, 1024, 1024})
    ->Args({4096, 1, 4096})
    ->UseRealTime()
    ->MinTime(1.0);
BENCHMARK(BM_FerryMatMulAvx2)
    ->Args({1024, 1024, 1024})
    ->UseRealTime()
    ->MinTime(1.0);

}  // namespace
}  // namespace cpu_internal
}  // namespace ferry
