// f32 matrix multiply for the CPU backend (ggml's mul_mat):
//
//   dst[n][m] = sum_k a[m][k] * b[n][k]
//
// with `a` the weight in f32, f16 or bf16 (converted to f32 on the fly),
// either in rows or already in the GEMM's panel layout (packed_layout.h,
// MatMulArgs::a_packed), and `b`, `dst` in f32. The kernel is picked at run
// time from the CPU's features (AVX-512, AVX2 or portable code), so one binary
// runs on any x86-64 CPU.
//
// Threading follows ggml: the backend calls MatMul(args, ith, nth) from each
// of its nth workers; each computes a disjoint block of dst, and they share
// nothing mutable, so no locks or barriers are needed inside. Optionally
// (MatMulArgs::next_column) they share one atomic counter and claim work as
// they go, which keeps all threads busy when the OS gives them unequal time.
#ifndef FERRY_BACKENDS_HOST_INTERNAL_MAT_MUL_H_
#define FERRY_BACKENDS_HOST_INTERNAL_MAT_MUL_H_

#include <optional>

#include "ferry/backends/host/internal/mat_mul_impl.h"
#include "ferry/runtime/cpu_features.h"

namespace ferry {
namespace cpu_internal {

// Every Isa (runtime/cpu_features.h) has a kernel; BestIsa() picks it.

// Makes MatMul use `isa` (which must be supported) instead of BestIsa(), or
// BestIsa() again for nullopt. For tests that force each path. Not
// thread-safe: call it only while no MatMul runs.
void ForceIsaForTesting(std::optional<Isa> isa);

// Returns the Isa MatMul uses: BestIsa() unless a test forced another.
Isa ActiveIsa();

// Computes thread ith's share (0 <= ith < nth) of dst; all nth calls together
// compute all of it. Requires m, n, k >= 1 and lda (unless a_packed), ldb >=
// k, ldc >= m; does not read dst. Thread-safe for disjoint dst.
void MatMul(const MatMulArgs& args, int ith, int nth);

// As MatMul, with the kernel for `isa`, which must be supported. For tests
// and benchmarks.
void MatMulWithIsa(const MatMulArgs& args, int ith, int nth, Isa isa);

// Computes all of dst on nth threads: the caller's plus nth - 1 new ones.
// Resets *args.next_column to 0 first if it is set.
void MatMulParallel(const MatMulArgs& args, int nth);

}  // namespace cpu_internal
}  // namespace ferry

#endif  // FERRY_BACKENDS_HOST_INTERNAL_MAT_MUL_H_
