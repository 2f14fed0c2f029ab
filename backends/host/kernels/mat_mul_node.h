// The mul_mat node kernel of the CPU backend: batched, broadcasting
//   dst[i3][i2][n][m] = sum_k a[i3/r3][i2/r2][m][k] * b[i3][i2][n][k]
// (ggml's mul_mat, see graph/ops.h) over Tensor strides, with `a` in
// f32/f16/bf16 and b, dst in f32, computed slice by slice with the optimized
// GEMM of backends/host/internal/mat_mul.h. An `a` stored packed in a
// PackedHostBuffer (packed_state.h) is read in its panels as it is. A
// block-quantized `a` goes to backends/host/internal/quant_mat_mul.h (b
// rounded to 8-bit blocks, integer dot products), which needs scratch.
//
// This is the single entry point the op kernels use for mul_mat, so that the
// GEMM stays out of the other kernels.
#ifndef FERRY_BACKENDS_HOST_KERNELS_MAT_MUL_NODE_H_
#define FERRY_BACKENDS_HOST_KERNELS_MAT_MUL_NODE_H_

#include <cstddef>

#include "ferry/backends/host/kernels/kernel_context.h"
#include "ferry/graph/tensor.h"

namespace ferry {
namespace cpu_kernels {

// Computes thread ith's share (0 <= ith < nth) of mul_mat `node`, whose
// shapes, dtypes and layout must pass CheckSupported (kernels.h): a and b
// rows contiguous, dst contiguous. The nth calls write disjoint blocks of
// dst and share nothing else but ctx.work_counter (the GEMM's packing
// buffers are thread-local, so no scratch is needed): with a packed weight,
// threads claim its panels from the counter instead of taking fixed halves,
// so one the OS runs less does less. Does not read dst.
void MatMulNode(const Tensor& node, int ith, int nth, const KernelContext& ctx);

// The scratch bytes nth threads computing mul_mat `node` need in total (0
// unless `a` is quantized), nth equal slices of whole cache lines.
size_t MatMulScratchBytes(const Tensor& node, int nth);

}  // namespace cpu_kernels
}  // namespace ferry

#endif  // FERRY_BACKENDS_HOST_KERNELS_MAT_MUL_NODE_H_
