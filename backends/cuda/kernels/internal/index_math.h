// Index math of the CUDA kernels, for nvcc and for the host compiler alike
// (so host tests check it at the sizes a GPU's grid reaches):
//   - FastDivmod: division by a divisor fixed at launch with one 32-bit
//     multiply-high, an add and a shift (Granlund and Montgomery,
//     "Division by invariant integers using multiplication", 1994). A GPU
//     has no integer divider: a 64-bit `/` or `%` is a software routine of
//     dozens of instructions, and element kernels did several per element.
//   - ElementIndex: splits a flat element index into four coordinates with
//     FastDivmod when the tensor has fewer than 2^32 elements (else with
//     64-bit division).
//   - The grid-stride loops of element and row kernels.
#ifndef FERRY_BACKENDS_CUDA_KERNELS_INTERNAL_INDEX_MATH_H_
#define FERRY_BACKENDS_CUDA_KERNELS_INTERNAL_INDEX_MATH_H_

#include <cstdint>

#include "ferry/backends/cuda/kernels/internal/desc.h"

#if defined(__CUDACC__)
#define FERRY_INDEX_HD __host__ __device__ __forceinline__
#else
#define FERRY_INDEX_HD inline
#endif

namespace ferry {
namespace cuda_kernels_internal {

// The high 32 bits of a * b.
FERRY_INDEX_HD uint32_t MulHi(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __umulhi(a, b);
#else
  return static_cast<uint32_t>((static_cast<uint64_t>(a) * b) >> 32);
#endif
}

// A FastDiv for `divisor` (>= 1; host code, once per launch).
inline FastDiv MakeFastDiv(uint32_t divisor) {
  FastDiv d;
  d.divisor = divisor == 0 ? 1 : divisor;
  uint32_t shift = 0;
  while (shift < 32 && (uint64_t{1} << shift) < d.divisor) ++shift;
  // multiplier = floor(2^32 (2^shift - d) / d) + 1, which is below 2^32.
  const uint64_t numerator = ((uint64_t{1} << shift) - d.divisor) << 32;
  d.multiplier = static_cast<uint32_t>(numerator / d.divisor + 1);
  d.shift = shift;
  return d;
}

// n / d for every n < 2^32.
FERRY_INDEX_HD uint32_t Div(uint32_t n, const FastDiv& d) {
  return static_cast<uint32_t>(
      (static_cast<uint64_t>(MulHi(n, d.multiplier)) + n) >> d.shift);
}

// An ElementIndex for results of shape `ne` (host code).
inline ElementIndex MakeElementIndex(const int64_t (&ne)[4]) {
  ElementIndex index;
  int64_t count = 1;
  bool fits = true;
  for (int i = 0; i < 4; ++i) {
    index.ne[i] = ne[i];
    count *= ne[i] > 0 ? ne[i] : 1;
    if (ne[i] < 0 || ne[i] > 0xffffffffll) fits = false;
  }
  index.fast = fits && count <= 0xffffffffll;
  for (int i = 0; i < 3; ++i) {
    index.div[i] =
        MakeFastDiv(index.fast && ne[i] > 0 ? static_cast<uint32_t>(ne[i]) : 1);
  }
  return index;
}

// Splits flat index e (i0 fastest) of the index's shape into i.
FERRY_INDEX_HD void Unflatten(int64_t e, const ElementIndex& index,
                              int64_t (&i)[4]) {
  if (index.fast) {
    const uint32_t n = static_cast<uint32_t>(e);
    const uint32_t q0 = Div(n, index.div[0]);
    const uint32_t q1 = Div(q0, index.div[1]);
    const uint32_t q2 = Div(q1, index.div[2]);
    i[0] = n - q0 * index.div[0].divisor;
    i[1] = q0 - q1 * index.div[1].divisor;
    i[2] = q1 - q2 * index.div[2].divisor;
    i[3] = q2;
    return;
  }
  i[0] = e % index.ne[0];
  e /= index.ne[0];
  i[1] = e % index.ne[1];
  e /= index.ne[1];
  i[2] = e % index.ne[2];
  i[3] = e / index.ne[2];
}

// i mod d for a coordinate i < 2^32 (fast) or any (slow).
FERRY_INDEX_HD int64_t Mod(int64_t i, const FastDiv& d, int64_t n, bool fast) {
  if (fast) {
    const uint32_t u = static_cast<uint32_t>(i);
    return u - Div(u, d) * d.divisor;
  }
  return i % n;
}

// The coordinates one thread of a kernel launch sees.
struct GridPosition {
  int64_t block = 0;    // blockIdx.x
  int64_t blocks = 1;   // gridDim.x
  int64_t thread = 0;   // threadIdx.x
  int64_t threads = 1;  // blockDim.x
};

// Calls fn(e) for the elements e < count that thread `at` handles in a
// grid-stride loop: e = block * threads + thread, then a whole grid on.
template <typename Fn>
FERRY_INDEX_HD void ForEachElement(const GridPosition& at, int64_t count,
                                   Fn&& fn) {
  const int64_t stride = at.blocks * at.threads;
  for (int64_t e = at.block * at.threads + at.thread; e < count; e += stride) {
    fn(e);
  }
}

// Calls fn(row) for the rows < rows that block `at.block` handles.
template <typename Fn>
FERRY_INDEX_HD void ForEachRow(const GridPosition& at, int64_t rows, Fn&& fn) {
  for (int64_t row = at.block; row < rows; row += at.blocks) fn(row);
}

// Launch shapes of the kernels (grid-stride beyond the block limits).
inline constexpr int kElementThreads = 256;
inline constexpr int64_t kMaxElementBlocks = int64_t{1} << 16;
inline constexpr int kMaxRowThreads = 256;
inline constexpr int64_t kMaxRowBlocks = int64_t{1} << 20;

inline int64_t ElementBlocks(int64_t count) {
  const int64_t blocks = (count + kElementThreads - 1) / kElementThreads;
  return blocks < kMaxElementBlocks ? blocks : kMaxElementBlocks;
}

// Threads per row block: enough warps for `width` items, at most 256.
inline int RowThreads(int64_t width) {
  const int64_t warps = width > 32 ? (width + 31) / 32 : 1;
  const int64_t threads = warps * 32;
  return static_cast<int>(threads < kMaxRowThreads ? threads : kMaxRowThreads);
}

inline int64_t RowBlocks(int64_t rows) {
  return rows < kMaxRowBlocks ? rows : kMaxRowBlocks;
}

}  // namespace cuda_kernels_internal
}  // namespace ferry

#endif  // FERRY_BACKENDS_CUDA_KERNELS_INTERNAL_INDEX_MATH_H_
