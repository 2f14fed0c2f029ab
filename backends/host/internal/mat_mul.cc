#include "ferry/backends/host/internal/mat_mul.h"

#include <atomic>
#include <optional>
#include <thread>
#include <vector>

#include "ferry/backends/host/internal/mat_mul_impl.h"
#include "ferry/runtime/cpu_features.h"

namespace ferry {
namespace cpu_internal {
namespace {

std::optional<Isa> forced_isa;

}  // namespace

void ForceIsaForTesting(std::optional<Isa> isa) { forced_isa = isa; }

Isa ActiveIsa() { return forced_isa.value_or(BestIsa()); }

void MatMulWithIsa(const MatMulArgs& args, int ith, int nth, Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return MatMulAvx512(args, ith, nth);
    case Isa::kAvx2:
      return MatMulAvx2(args, ith, nth);
    case Isa::kScalar:
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
