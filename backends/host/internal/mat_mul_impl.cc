#include "ferry/backends/host/internal/mat_mul_impl.h"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <new>

namespace ferry {
namespace cpu_internal {
namespace {

constexpr std::align_val_t kScratchAlignment{64};

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Part i of `units` split into `parts` nearly equal runs.
Range SplitUnits(int64_t units, int64_t parts, int64_t i) {
  return Range{units * i / parts, units * (i + 1) / parts};
}

}  // namespace

ScratchBuffer::~ScratchBuffer() = default;

float* ScratchBuffer::Get(size_t size) {
  if (size > size_) {
    data_.reset(static_cast<float*>(
        ::operator new(size * sizeof(float), kScratchAlignment)));
    size_ = size;
  }
  return data_.get();
}

void ScratchBuffer::AlignedDelete::operator()(float* p) const {
  ::operator delete(p, kScratchAlignment);
}

OutputBlock PartitionOutput(int64_t m, int64_t n, int64_t m_unit,
                            int64_t n_unit, int ith, int nth) {
  const int64_t m_units = CeilDiv(m, m_unit);
  const int64_t n_units = CeilDiv(n, n_unit);
  // Per k, a block costs ~cols * rows / 16 cycles of FMAs (32 flops per
  // cycle) plus ~(cols + rows) / 2 cycles of packing: weigh packing 8x an
  // output element, which favours square blocks when tile counts tie.
  constexpr double kPackWeight = 8.0;
  int64_t best_pm = 1;
  double best_cost = std::numeric_limits<double>::max();
  for (int64_t pm = 1; pm <= nth; ++pm) {
    if (nth % pm != 0) continue;
    const int64_t pn = nth / pm;
    const int64_t mu = CeilDiv(m_units, pm);
    const int64_t nu = CeilDiv(n_units, pn);
    const double cols = static_cast<double>(std::min(mu * m_unit, m));
    const double rows = static_cast<double>(std::min(nu * n_unit, n));
    const double cost =
        static_cast<double>(mu * m_unit) * static_cast<double>(nu * n_unit) +
        kPackWeight * (cols + rows);
    if (cost <= best_cost) {  // Ties: split m, so each packs less of A.
      best_cost = cost;
      best_pm = pm;
    }
  }
  const int64_t pn = nth / best_pm;
  const Range mu = SplitUnits(m_units, best_pm, ith % best_pm);
  const Range nu = SplitUnits(n_units, pn, ith / best_pm);
  return OutputBlock{
      Range{std::min(mu.begin * m_unit, m), std::min(mu.end * m_unit, m)},
      Range{std::min(nu.begin * n_unit, n), std::min(nu.end * n_unit, n)}};
}

Range ClaimColumns(std::atomic<int64_t>& next, int64_t m, int64_t unit,
                   int64_t min_units, int nth) {
  // Relaxed: the claimed ranges only need to be disjoint; the caller's
  // barrier orders the writes to dst.
  int64_t begin = next.load(std::memory_order_relaxed);
  while (begin < m) {
    const int64_t units =
        std::max(min_units, CeilDiv(m - begin, unit) / (2 * int64_t{nth}));
    const int64_t end = std::min(m, begin + units * unit);
    if (next.compare_exchange_weak(begin, end, std::memory_order_relaxed)) {
      return Range{begin, end};
    }
  }
  return Range{m, m};
}

Range PartitionRange(int64_t size, int64_t unit, int ith, int nth) {
  const Range u = SplitUnits(CeilDiv(size, unit), nth, ith);
  return Range{std::min(u.begin * unit, size), std::min(u.end * unit, size)};
}

}  // namespace cpu_internal
}  // namespace ferry
