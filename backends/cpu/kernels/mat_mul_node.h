// The mul_mat node kernel of the CPU backend: batched, broadcasting
//   dst[i3][i2][n][m] = sum_k a[i3/r3][i2/r2][m][k] * b[i3][i2][n][k]
// (ggml's mul_mat, see graph/ops.h) over Tensor strides, with `a` in
// f32/f16/bf16 (converted to f32 a tile at a time) and b, dst in f32.
//
// This is the single entry point the op kernels use for mul_mat, so that the
// backend can route it to the optimized GEMM of backends/cpu/internal/
// without touching the other kernels.
#ifndef FERRY_BACKENDS_CPU_KERNELS_MAT_MUL_NODE_H_
#define FERRY_BACKENDS_CPU_KERNELS_MAT_MUL_NODE_H_

#include <cstddef>

#include "ferry/backends/cpu/kernels/kernel_context.h"
#include "ferry/graph/tensor.h"

namespace ferry {
namespace cpu_kernels {

// Returns the scratch bytes one thread of MatMulNode needs for `node` (0 for
// f32 a), a multiple of kScratchAlignment.
size_t MatMulScratchBytesPerThread(const Tensor& node);

// Computes thread ith's share (0 <= ith < nth) of mul_mat `node`, whose
// shapes, dtypes and layout must pass CheckSupported (kernels.h): a and b
// rows contiguous, dst contiguous. The nth calls write disjoint blocks of
// dst and share nothing else; ctx must hold nth * MatMulScratchBytesPerThread
// bytes. Does not read dst.
void MatMulNode(const Tensor& node, int ith, int nth, const KernelContext& ctx);

}  // namespace cpu_kernels
}  // namespace ferry

#endif  // FERRY_BACKENDS_CPU_KERNELS_MAT_MUL_NODE_H_
