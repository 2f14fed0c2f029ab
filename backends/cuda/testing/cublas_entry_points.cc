// The cuBLAS API's entry points of the fake (fake_cuda_control.h): handles,
// streams, workspaces and the GEMMs ferry calls, computed on the host
// (emulated_gemm.h) in the handle's stream with their operands' device
// addresses checked like a kernel's. A GEMM counts as a kernel launch for fault
// injection.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <memory>

#include "absl/strings/str_cat.h"
#include "ferry/backends/cuda/testing/emulated_gemm.h"
#include "ferry/backends/cuda/testing/internal/device_memory.h"
#include "ferry/backends/cuda/testing/internal/runtime_state.h"

// cublasHandle_t points at one.
struct cublasContext {
  int device = 0;
  cudaStream_t stream = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  cublasPointerMode_t pointer_mode = CUBLAS_POINTER_MODE_HOST;
  cublasMath_t math_mode = CUBLAS_DEFAULT_MATH;
};

namespace ferry::fake_cuda_internal {
namespace {

Runtime& R() { return Runtime::Get(); }

bool ToGemmType(cudaDataType type, cuda_testing::GemmType* out) {
  switch (type) {
    case CUDA_R_32F:
      *out = cuda_testing::GemmType::kF32;
      return true;
    case CUDA_R_16F:
      *out = cuda_testing::GemmType::kF16;
      return true;
    case CUDA_R_16BF:
      *out = cuda_testing::GemmType::kBF16;
      return true;
    default:
      return false;
  }
}

cublasStatus_t Gemm(cublasHandle_t handle, cublasOperation_t transa,
                    cublasOperation_t transb, int64_t m, int64_t n, int64_t k,
                    const void* alpha, const void* a, cudaDataType a_type,
                    int64_t lda, int64_t stride_a, const void* b,
                    cudaDataType b_type, int64_t ldb, int64_t stride_b,
                    const void* beta, void* c, cudaDataType c_type, int64_t ldc,
                    int64_t stride_c, int64_t batch,
                    cublasComputeType_t compute, const char* api) {
  if (R().Enter() != cudaSuccess) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (alpha == nullptr || beta == nullptr ||
      (transa != CUBLAS_OP_N && transa != CUBLAS_OP_T) ||
      (transb != CUBLAS_OP_N && transb != CUBLAS_OP_T)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  cuda_testing::GemmCall call;
  cuda_testing::GemmType b_gemm_type;
  if (!ToGemmType(a_type, &call.ab_type) || !ToGemmType(b_type, &b_gemm_type) ||
      b_gemm_type != call.ab_type || c_type != CUDA_R_32F ||
      (compute != CUBLAS_COMPUTE_32F &&
       compute != CUBLAS_COMPUTE_32F_PEDANTIC &&
       !(compute == CUBLAS_COMPUTE_32F_FAST_TF32 &&
         call.ab_type == cuda_testing::GemmType::kF32)) ||
      handle->pointer_mode != CUBLAS_POINTER_MODE_HOST) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  call.tf32 = compute == CUBLAS_COMPUTE_32F_FAST_TF32;
  call.trans_a = transa == CUBLAS_OP_T;
  call.trans_b = transb == CUBLAS_OP_T;
  call.m = m;
  call.n = n;
  call.k = k;
  call.a = a;
  call.lda = lda;
  call.stride_a = stride_a;
  call.b = b;
  call.ldb = ldb;
  call.stride_b = stride_b;
  call.c = static_cast<float*>(c);
  call.ldc = ldc;
  call.stride_c = stride_c;
  call.batch = batch;
  call.alpha = *static_cast<const float*>(alpha);
  call.beta = *static_cast<const float*>(beta);
  if (!cuda_testing::CheckGemm(call).ok()) return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
  cudaError_t error = cudaSuccess;
  CUstream_st* stream = R().Resolve(handle->stream, &error);
  if (stream == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  const int device = stream->device;
  // A launch into a ruined context fails.
  if (R().Sticky(device) != cudaSuccess) {
    R().Fail(R().Sticky(device));
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  cudaError_t execution_fault = cudaSuccess;
  if (R().CountLaunch(device, &execution_fault) != cudaSuccess) {
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  struct Operand {
    const void* address;
    size_t bytes;
    bool write;
  };
  std::vector<Operand> operands = {
      {call.a, k == 0 ? 0 : cuda_testing::ExtentA(call), false},
      {call.b, k == 0 ? 0 : cuda_testing::ExtentB(call), false},
      {call.c, cuda_testing::ExtentC(call), true}};
  if (handle->workspace != nullptr && handle->workspace_bytes > 0) {
    operands.push_back({handle->workspace, handle->workspace_bytes, true});
  }
  Op op;
  op.label =
      absl::StrCat(api, "(m=", m, ", n=", n, ", k=", k, ", batch=", batch, ")");
  for (const Operand& operand : operands) {
    if (operand.bytes == 0) continue;
    const uintptr_t begin = reinterpret_cast<uintptr_t>(operand.address);
    op.accesses.push_back(
        AccessRange{begin, begin + operand.bytes, operand.write});
  }
  const std::string label = op.label;
  op.body = [call, operands, device, execution_fault,
             label]() mutable -> cudaError_t {
    if (execution_fault != cudaSuccess) {
      R().Fault(device, execution_fault, absl::StrCat(label, ": injected"));
      return execution_fault;
    }
    void* translated[3] = {};
    for (size_t i = 0; i < operands.size(); ++i) {
      if (operands[i].bytes == 0) continue;
      const PointerInfo info =
          R().memory().Classify(operands[i].address, operands[i].bytes);
      const bool reachable =
          info.kind == PointerKind::kDevice &&
          (info.device == device || R().PeerEnabled(device, info.device));
      void* host = reachable ? R().memory().Translate(operands[i].address,
                                                      operands[i].bytes)
                             : nullptr;
      if (host == nullptr) {
        R().Fault(
            device, cudaErrorIllegalAddress,
            absl::StrCat(label, " touches ", operands[i].bytes, " bytes at ",
                         R().memory().Describe(operands[i].address)));
        return cudaErrorIllegalAddress;
      }
      if (i < 3) translated[i] = host;
    }
    call.a = translated[0];
    call.b = translated[1];
    call.c = static_cast<float*>(translated[2]);
    cuda_testing::RunGemm(call);
    return cudaSuccess;
  };
  R().Enqueue(stream, std::move(op));
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace
}  // namespace ferry::fake_cuda_internal

using ::ferry::fake_cuda_internal::R;

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      R().Sticky(device) != cudaSuccess) {
    return CUBLAS_STATUS_NOT_INITIALIZED;
  }
  R().TouchContext(device);
  *handle = new cublasContext();
  (*handle)->device = device;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t* stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (stream == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *stream = handle->stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace,
                                     size_t bytes) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (workspace == nullptr && bytes > 0) return CUBLAS_STATUS_INVALID_VALUE;
  if (bytes > 0) {
    const ferry::fake_cuda_internal::PointerInfo info =
        R().memory().Classify(workspace, bytes);
    if (info.kind != ferry::fake_cuda_internal::PointerKind::kDevice ||
        info.device != handle->device) {
      return CUBLAS_STATUS_INVALID_VALUE;
    }
  }
  handle->workspace = workspace;
  handle->workspace_bytes = bytes;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetPointerMode_v2(cublasHandle_t handle,
                                       cublasPointerMode_t* mode) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mode == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = handle->pointer_mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t handle,
                                       cublasPointerMode_t mode) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->pointer_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->math_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t* mode) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mode == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = handle->math_mode;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "the GPU program failed to execute";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "the functionality requested is not supported";
    default:
      return "an internal operation failed";
  }
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k,
                            const void* alpha, const void* a,
                            cudaDataType a_type, int lda, const void* b,
                            cudaDataType b_type, int ldb, const void* beta,
                            void* c, cudaDataType c_type, int ldc,
                            cublasComputeType_t compute,
                            cublasGemmAlgo_t /*algo*/) {
  return ferry::fake_cuda_internal::Gemm(
      handle, transa, transb, m, n, k, alpha, a, a_type, lda, 0, b, b_type, ldb,
      0, beta, c, c_type, ldc, 0, 1, compute, "cublasGemmEx");
}

cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
    int m, int n, int k, const void* alpha, const void* a, cudaDataType a_type,
    int lda, long long int stride_a, const void* b, cudaDataType b_type,
    int ldb, long long int stride_b, const void* beta, void* c,
    cudaDataType c_type, int ldc, long long int stride_c, int batch,
    cublasComputeType_t compute, cublasGemmAlgo_t /*algo*/) {
  return ferry::fake_cuda_internal::Gemm(
      handle, transa, transb, m, n, k, alpha, a, a_type, lda, stride_a, b,
      b_type, ldb, stride_b, beta, c, c_type, ldc, stride_c, batch, compute,
      "cublasGemmStridedBatchedEx");
}

}  // extern "C"
