// A test double for cuda_kernels::Launch on machines without a GPU: runs a
// node on HOST memory with the CUDA kernels' own __host__ __device__ math
// and index code (internal/kernel_math.h), serially, from the same
// arguments Launch builds. mul_mat is emulated from the column-major GEMM
// plan Launch hands to cuBLAS (operands, transposes, leading dimensions,
// batch offsets and strides, scratch conversions), with a plain triple loop
// in place of cuBLAS, so the ggml-to-cuBLAS mapping is checked too.
#ifndef FERRY_BACKENDS_CUDA_KERNELS_HOST_EMULATION_H_
#define FERRY_BACKENDS_CUDA_KERNELS_HOST_EMULATION_H_

#include "absl/status/status.h"
#include "ferry/graph/tensor.h"

namespace ferry::cuda_kernels {

// Computes `node` like Launch would, on host memory: node.data and every
// source's data must be host pointers. `node` must pass
// cpu_kernels::CheckSupported. Allocates its own ScratchBytes(node) of
// scratch. Returns InvalidArgumentError when the GEMM plan breaks a cuBLAS
// rule (a leading dimension below its minimum, a negative size), which
// cuBLAS would reject.
absl::Status EmulateOnHost(const Tensor& node);

}  // namespace ferry::cuda_kernels

#endif  // FERRY_BACKENDS_CUDA_KERNELS_HOST_EMULATION_H_
