// Portable mul_mat for CPUs without AVX2: converts a few rows of A to f32 and
// takes dot products with every row of B (or, for a packed A, accumulates a
// panel's columns k by k). Correct everywhere, not fast.
#include <algorithm>
#include <cstdint>

#include "ferry/backends/host/internal/mat_mul_impl.h"
#include "ferry/backends/host/internal/packed_layout.h"
#include "ferry/graph/dtype.h"

namespace ferry {
namespace cpu_internal {
namespace {

constexpr int64_t kRowBlock = 8;

inline float ToF32(float x) { return x; }
inline float ToF32(Half x) { return F16ToF32(x); }
inline float ToF32(BFloat16 x) { return BF16ToF32(x); }

float Dot(const float* a, const float* b, int64_t k) {
  // Four partial sums break the add dependency chain.
  float s[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= k; i += 4) {
    for (int j = 0; j < 4; ++j) s[j] += a[i + j] * b[i + j];
  }
  for (; i < k; ++i) s[0] += a[i] * b[i];
  return (s[0] + s[1]) + (s[2] + s[3]);
}

template <typename T>
void MatMulTyped(const MatMulArgs& args, Range mr) {
  thread_local ScratchBuffer scratch;
  float* rows = scratch.Get(kRowBlock * args.k);
  const T* a = static_cast<const T*>(args.a);
  for (int64_t m0 = mr.begin; m0 < mr.end; m0 += kRowBlock) {
    const int64_t mb = std::min(kRowBlock, mr.end - m0);
    for (int64_t i = 0; i < mb; ++i) {
      const T* src = a + (m0 + i) * args.lda;
      for (int64_t k = 0; k < args.k; ++k) rows[i * args.k + k] = ToF32(src[k]);
    }
    for (int64_t n = 0; n < args.n; ++n) {
      const float* b = args.b + n * args.ldb;
      float* d = args.dst + n * args.ldc + m0;
      for (int64_t i = 0; i < mb; ++i) d[i] = Dot(rows + i * args.k, b, args.k);
    }
  }
}

// Columns mr (starting at a panel boundary) of a packed A.
template <typename T>
void PackedMatMulTyped(const MatMulArgs& args, Range mr) {
  const T* a = static_cast<const T*>(args.a);
  float acc[kPanelWidth];
  for (int64_t m0 = mr.begin; m0 < mr.end; m0 += kPanelWidth) {
    const int64_t cols = std::min(kPanelWidth, mr.end - m0);
    const T* panel = a + (m0 / kPanelWidth) * kPanelWidth * args.k;
    for (int64_t n = 0; n < args.n; ++n) {
      const float* b = args.b + n * args.ldb;
      std::fill(acc, acc + kPanelWidth, 0.0f);
      for (int64_t k = 0; k < args.k; ++k) {
        const T* row = panel + k * kPanelWidth;
        const float bk = b[k];
        for (int64_t j = 0; j < kPanelWidth; ++j) acc[j] += ToF32(row[j]) * bk;
      }
      std::copy(acc, acc + cols, args.dst + n * args.ldc + m0);
    }
  }
}

}  // namespace

void MatMulGeneric(const MatMulArgs& args, int ith, int nth) {
  void (*typed)(const MatMulArgs&, Range) = MatMulTyped<float>;
  if (args.a_type == DType::kF16) typed = MatMulTyped<Half>;
  if (args.a_type == DType::kBF16) typed = MatMulTyped<BFloat16>;
  int64_t unit = kRowBlock;
  if (args.a_packed) {
    unit = kPanelWidth;
    typed = args.a_type == DType::kF16    ? PackedMatMulTyped<Half>
            : args.a_type == DType::kBF16 ? PackedMatMulTyped<BFloat16>
                                          : PackedMatMulTyped<float>;
  }
  if (args.next_column != nullptr) {
    while (true) {
      const Range mr = ClaimColumns(*args.next_column, args.m, unit,
                                    args.a_packed ? 1 : 4, nth);
      if (mr.size() == 0) return;
      typed(args, mr);
    }
  }
  const Range mr = PartitionRange(args.m, unit, ith, nth);
  if (mr.size() > 0) typed(args, mr);
}

}  // namespace cpu_internal
}  // namespace ferry
