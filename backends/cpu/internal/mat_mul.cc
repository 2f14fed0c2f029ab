#include "ferry/backends/cpu/internal/mat_mul.h"

#include <atomic>
#include <optional>
#include <thread>
#include <vector>

#include "ferry/backends/cpu/internal/mat_mul_impl.h"

namespace ferry {
namespace cpu_internal {
namespace {

Isa DetectIsa() {
  __builtin_cpu_init();
  // __builtin_cpu_supports also checks that the OS saves the vector state.
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("f16c")) {
    return Isa::kAvx512;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("f16c")) {
    return Isa::kAvx2;
  }
  return Isa::kGeneric;
}

std::optional<Isa> forced_isa;

}  // namespace

void ForceIsaForTesting(std::optional<Isa> isa) { forced_isa = isa; }

Isa ActiveIsa() { return forced_isa.value_or(BestIsa()); }

Isa BestIsa() {
  static const Isa isa = DetectIsa();
  return isa;
}

bool IsaSupported(Isa isa) {
  return static_cast<int>(isa) <= static_cast<int>(BestIsa());
}

void MatMulWithIsa(const MatMulArgs& args, int ith, int nth, Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return MatMulAvx512(args, ith, nth);
    case Isa::kAvx2:
      return MatMulAvx2(args, ith, nth);
    case Isa::kGeneric:
      return MatMulGeneric(args, ith, nth);
  }
}

void MatMul(const MatMulArgs& args, int ith, int nth) {
  MatMulWithIsa(args, ith, nth, ActiveIsa());
}

void MatMulParallel(const MatMulArgs& args, int nth) {
  if (args.next_column != nullptr) {
    args.next_column->store(0, std::memory_order_relaxed);
  }
  std::vector<std::thread> threads;
  threads.reserve(nth - 1);
  for (int i = 1; i < nth; ++i) {
    threads.emplace_back([&args, i, nth] { MatMul(args, i, nth); });
  }
  MatMul(args, 0, nth);
  for (std::thread& t : threads) t.join();
}

}  // namespace cpu_internal
}  // namespace ferry
