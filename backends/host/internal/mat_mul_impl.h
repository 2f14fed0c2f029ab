// Pieces of the CPU mul_mat shared by its per-ISA kernel files: the argument
// struct, the work partition and the per-ISA entry points that mat_mul.cc
// dispatches to. Include mat_mul.h instead unless you write a kernel.
#ifndef FERRY_BACKENDS_HOST_INTERNAL_MAT_MUL_IMPL_H_
#define FERRY_BACKENDS_HOST_INTERNAL_MAT_MUL_IMPL_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>

#include "ferry/graph/dtype.h"

namespace ferry {
namespace cpu_internal {

// Operands of dst[j][i] = sum_l a[i][l] * b[j][l] for i < m, j < n, l < k
// (ggml's mul_mat). All strides are in elements. In BLAS terms this is
// C(n x m) = B(n x k) * A(m x k)^T with every matrix row-major.
struct MatMulArgs {
  DType a_type = DType::kF32;  // kF32, kF16 or kBF16.
  const void* a = nullptr;     // M rows of K elements of a_type.
  int64_t lda = 0;
  // True when `a` is one slice in the panel layout of packed_layout.h (M x K
  // of a_type, panels of kPanelWidth rows) instead of rows; lda is unused.
  bool a_packed = false;
  const float* b = nullptr;  // N rows of K floats.
  int64_t ldb = 0;
  float* dst = nullptr;  // N rows of M floats.
  int64_t ldc = 0;
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  // Optional work sharing, for machines where threads get unequal CPU time.
  // Null: each thread computes a fixed block and the threads share nothing.
  // Non-null: threads claim ranges of columns (m) from this counter until
  // none are left, so a thread that runs slower does less. The caller stores
  // 0 into it before any thread starts this call (e.g. before the barrier
  // that precedes the op) and leaves it alone until all have returned.
  std::atomic<int64_t>* next_column = nullptr;
};

// Half-open index range.
struct Range {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};

// The block of dst that one thread computes.
struct OutputBlock {
  Range m;
  Range n;
};

// Splits an m x n output among nth threads and returns thread ith's block,
// in whole units of m_unit columns and n_unit rows (the microkernel's tile)
// except at the edges. Picks the grid pm x pn = nth that minimises the
// largest block's cost (its tiles plus the packing it implies). Blocks of
// threads that get no work are empty.
OutputBlock PartitionOutput(int64_t m, int64_t n, int64_t m_unit,
                            int64_t n_unit, int ith, int nth);

// Splits [0, size) into nth nearly equal parts aligned to `unit` and returns
// part ith.
Range PartitionRange(int64_t size, int64_t unit, int ith, int nth);

// Claims the next range of columns [begin, end) of [0, m) from `next` (see
// MatMulArgs::next_column): guided sizes, remaining / (2 * nth) but at least
// min_units, in units of `unit` columns. Returns an empty range when no
// columns are left. Lock-free.
Range ClaimColumns(std::atomic<int64_t>& next, int64_t m, int64_t unit,
                   int64_t min_units, int nth);

// Largest n handled by the dot-product path instead of the packed GEMM: for
// few rows of B, transposing all of A into panels costs more than the tile
// kernel saves (measured on Zen 4 at m = k = 4096: the crossover is n ~ 12).
inline constexpr int64_t kMaxDotN = 8;

// A growable 64-byte-aligned float buffer for per-thread packing scratch.
// Defined out of line so that no kernel file's target flags leak into it.
// Thread-compatible.
class ScratchBuffer {
 public:
  ScratchBuffer() = default;
  // Out of line too: an implicit one would be inline code in every kernel
  // file, and the linker could keep an AVX-512 file's copy.
  ~ScratchBuffer();

  // Returns at least `size` floats; contents are unspecified. Invalidates
  // earlier results.
  float* Get(size_t size);

 private:
  struct AlignedDelete {
    void operator()(float* p) const;
  };
  std::unique_ptr<float[], AlignedDelete> data_;
  size_t size_ = 0;
};

// Per-ISA implementations of MatMul(args, ith, nth). Each is compiled with
// its own target flags and must only run where the CPU has them.
void MatMulGeneric(const MatMulArgs& args, int ith, int nth);
void MatMulAvx2(const MatMulArgs& args, int ith, int nth);
void MatMulAvx512(const MatMulArgs& args, int ith, int nth);
// The same built on SIMDe for CPUs without AVX-512 (tests only:
// :mat_mul_avx512_emulated).
namespace emulated {
void MatMulAvx512(const MatMulArgs& args, int ith, int nth);
}  // namespace emulated

}  // namespace cpu_internal
}  // namespace ferry

#endif  // FERRY_BACKENDS_HOST_INTERNAL_MAT_MUL_IMPL_H_
