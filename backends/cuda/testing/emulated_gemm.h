// cuBLAS's GEMM computed on the host, for the fake cuBLAS
// (cublas_entry_points.cc) and the kernels' host emulation: column-major
// C = alpha op(A) op(B) + beta C, A and B f32/f16/bf16, C f32, products summed
// in f32 in k order (TF32 products on request). Testonly.
#ifndef FERRY_BACKENDS_CUDA_TESTING_EMULATED_GEMM_H_
#define FERRY_BACKENDS_CUDA_TESTING_EMULATED_GEMM_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace ferry::cuda_testing {

enum class GemmType { kF32, kF16, kBF16 };

// One cublasGemmEx (batch == 1) or cublasGemmStridedBatchedEx call.
// Leading dimensions and strides count elements, as in cuBLAS.
struct GemmCall {
  bool trans_a = false;
  bool trans_b = false;
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  GemmType ab_type = GemmType::kF32;
  const void* a = nullptr;
  int64_t lda = 0;
  int64_t stride_a = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  int64_t stride_b = 0;
  float* c = nullptr;
  int64_t ldc = 0;
  int64_t stride_c = 0;
  int64_t batch = 1;
  float alpha = 1.0f;
  float beta = 0.0f;  // 0: C is only written (cuBLAS does not read it).
  // CUBLAS_COMPUTE_32F_FAST_TF32 (f32 only): A's and B's values rounded to
  // TF32's 10-bit mantissa before they are multiplied.
  bool tf32 = false;
};

// InvalidArgument naming the broken rule when cuBLAS would refuse the call
// (CUBLAS_STATUS_INVALID_VALUE): a negative size or batch, a leading
// dimension below its minimum, a negative stride.
absl::Status CheckGemm(const GemmCall& call);

// Bytes from each operand's first element that the call touches to one
// past its last (0 when it touches none).
size_t ExtentA(const GemmCall& call);
size_t ExtentB(const GemmCall& call);
size_t ExtentC(const GemmCall& call);

// Computes the call (which passed CheckGemm) on host memory.
void RunGemm(const GemmCall& call);

}  // namespace ferry::cuda_testing

#endif  // FERRY_BACKENDS_CUDA_TESTING_EMULATED_GEMM_H_
