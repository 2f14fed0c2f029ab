// The CUDA backend's op kernels: every graph op (graph/ops.h) that the CPU
// kernels support, enqueued on a CUDA stream with the same semantics
// (cpu_kernels::CheckSupported decides what is supported, for both).
//
// Element-wise ops, copies, get_rows, set_rows and concat run grid-stride
// kernels over the result's elements (set_rows: over the rows it writes;
// contiguous operands addressed directly, others through precomputed
// multiply-shift division); rms_norm, norm, soft_max and rope run one block
// per row (rope after a kernel that computes each
// position's angles once); mul_mat runs on cuBLAS with CUBLAS_COMPUTE_32F: f32
// x f32 in full f32 (TF32 products only with LaunchContext::allow_tf32),
// f16/bf16 weights on tensor cores with b converted to their type in scratch
// and f32 accumulation. Block-quantized weights (q4_0, q4_1, q5_0, q5_1,
// q8_0, the K formats q2_K..q6_K, iq4_nl and iq4_xs: ReadsWeightsOf) are
// computed from their blocks: for up to 8 columns of b (decode) by a kernel
// that dequantizes each block as it reads it and dots it with b in f32; for
// more (prompts) dequantized to f16 in scratch for the f16 GEMM.
//
// Typical use:
//   size_t bytes = cuda_kernels::ScratchBytes(*node);  // Plan; 0 for most.
//   cuda_kernels::LaunchContext ctx{stream, cublas, scratch, bytes};
//   FERRY_RETURN_IF_ERROR(cuda_kernels::Launch(*node, ctx));
#ifndef FERRY_BACKENDS_CUDA_KERNELS_CUDA_KERNELS_H_
#define FERRY_BACKENDS_CUDA_KERNELS_CUDA_KERNELS_H_

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>

#include "absl/status/status.h"
#include "ferry/graph/dtype.h"
#include "ferry/graph/tensor.h"

namespace ferry::cuda_kernels {

// Where and with what Launch enqueues work. Holds no ownership.
struct LaunchContext {
  cudaStream_t stream = nullptr;
  // Already bound to `stream` by the caller (cublasSetStream) with a
  // workspace set, in CUBLAS_POINTER_MODE_HOST (the default).
  cublasHandle_t cublas = nullptr;
  // Device memory of at least ScratchBytes(node) bytes, 256-byte aligned.
  void* scratch = nullptr;
  size_t scratch_bytes = 0;
  // f32 x f32 GEMMs may use TF32 tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32:
  // inputs rounded to 10-bit mantissas, about 1e-3 relative error per
  // product). Off: full f32.
  bool allow_tf32 = false;
};

// True for the block-quantized dtypes mul_mat reads as its a (weights);
// no other op reads or writes blocks.
bool ReadsWeightsOf(DType dtype);

// Returns the device scratch bytes `node` needs (mul_mat converting f32 b
// to f16/bf16 for tensor cores, dequantizing block-quantized a for a
// prompt's GEMM, or copying operands whose rows overlap;
// rope's table of angles); 0 for most ops.
size_t ScratchBytes(const Tensor& node);

// Enqueues node's computation on ctx.stream. `node` must pass
// cpu_kernels::CheckSupported; node.data and every source's data are DEVICE
// pointers. Ops that OpCanRunInPlace also work with node.data ==
// src[0]->data (same layout). Leafs (Op::kNone) and view ops (IsViewOp) are
// no-ops returning OK. Returns an error naming the op and the CUDA or cuBLAS
// call when a launch fails (cudaGetLastError after each launch, cuBLAS
// statuses). Never synchronizes.
absl::Status Launch(const Tensor& node, const LaunchContext& ctx);

}  // namespace ferry::cuda_kernels

#endif  // FERRY_BACKENDS_CUDA_KERNELS_CUDA_KERNELS_H_
