#include "ferry/backends/cuda/kernels/cuda_kernels.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "ferry/backends/cuda/cuda_status.h"
#include "ferry/backends/cuda/kernels/internal/desc.h"
#include "ferry/backends/cuda/kernels/internal/device_kernels.h"
#include "ferry/backends/cuda/kernels/internal/node_args.h"
#include "ferry/graph/dtype.h"
#include "ferry/graph/op.h"
#include "ferry/graph/tensor.h"
#include "ferry/runtime/status_macros.h"

namespace ferry::cuda_kernels {
namespace {

namespace internal = ::ferry::cuda_kernels_internal;

cudaDataType_t CudaType(internal::ElemType type) {
  switch (type) {
    case internal::ElemType::kF16:
      return CUDA_R_16F;
    case internal::ElemType::kBF16:
      return CUDA_R_16BF;
    default:
      return CUDA_R_32F;
  }
}

// Runs node arguments (internal/node_args.h) on the device.
class DeviceRunner {
 public:
  DeviceRunner(const Tensor& node, const LaunchContext& ctx)
      : node_(node), ctx_(ctx) {}

  absl::Status Run(const internal::BinaryArgs& args) {
    return Check(internal::LaunchBinary(args, ctx_.stream), "BinaryKernel");
  }
  absl::Status Run(const internal::UnaryArgs& args) {
    return Check(internal::LaunchUnary(args, ctx_.stream), "UnaryKernel");
  }
  absl::Status Run(const internal::NormArgs& args) {
    return Check(internal::LaunchNorm(args, ctx_.stream), "NormKernel");
  }
  absl::Status Run(const internal::SoftMaxArgs& args) {
    return Check(internal::LaunchSoftMax(args, ctx_.stream), "SoftMaxKernel");
  }
  absl::Status Run(const internal::RopeArgs& args) {
    return Check(internal::LaunchRope(args, ctx_.stream), "RopeKernel");
  }
  absl::Status Run(const internal::GetRowsArgs& args) {
    return Check(internal::LaunchGetRows(args, ctx_.stream), "GetRowsKernel");
  }
  absl::Status Run(const internal::SetRowsArgs& args) {
    return Check(internal::LaunchSetRows(args, ctx_.stream), "SetRowsKernel");
  }
  absl::Status Run(const internal::CopyArgs& args) {
    return Check(internal::LaunchCopy(args, ctx_.stream), "CopyKernel");
  }
  absl::Status Run(const internal::ConcatArgs& args) {
    return Check(internal::LaunchConcat(args, ctx_.stream), "ConcatKernel");
  }
  absl::Status Run(const internal::QuantDotArgs& args) {
    return Check(internal::LaunchQuantDot(args, ctx_.stream), "QuantDotKernel");
  }

  absl::Status Run(const internal::GemmPlan& plan) {
    if (plan.zero_output) {
      return Check(
          cudaMemsetAsync(plan.c, 0, static_cast<size_t>(plan.output_bytes),
                          ctx_.stream),
          "cudaMemsetAsync");
    }
    if (plan.batches.empty()) return absl::OkStatus();
    if (ctx_.cublas == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("cuda kernels: mul_mat: no cuBLAS handle (",
                       node_.DebugString(), ")"));
    }
    cublasPointerMode_t mode;
    FERRY_RETURN_IF_ERROR(CheckCublas(cublasGetPointerMode(ctx_.cublas, &mode),
                                      "cublasGetPointerMode"));
    if (mode != CUBLAS_POINTER_MODE_HOST) {
      return absl::FailedPreconditionError(
          "cuda kernels: mul_mat needs CUBLAS_POINTER_MODE_HOST");
    }
    if (plan.copy_b) {
      FERRY_RETURN_IF_ERROR(Check(
          internal::LaunchCopy(*plan.copy_b, ctx_.stream), "CopyKernel(b)"));
    }
    if (plan.copy_a) {
      FERRY_RETURN_IF_ERROR(Check(
          internal::LaunchCopy(*plan.copy_a, ctx_.stream), "CopyKernel(a)"));
    }
    if (plan.dequant_a) {
      FERRY_RETURN_IF_ERROR(
          Check(internal::LaunchDequant(*plan.dequant_a, ctx_.stream),
                "DequantKernel(a)"));
    }
    // TF32 (10-bit mantissas in the products) only for f32 x f32, and only
    // when the caller opted in.
    const cublasComputeType_t compute =
        ctx_.allow_tf32 && plan.ab_type == internal::ElemType::kF32
            ? CUBLAS_COMPUTE_32F_FAST_TF32
            : CUBLAS_COMPUTE_32F;
    const float alpha = 1.0f;
    const float beta = 0.0f;
    const cudaDataType_t ab_type = CudaType(plan.ab_type);
    const cublasOperation_t op_a = plan.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_b = plan.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    for (const internal::GemmBatch& batch : plan.batches) {
      const void* a = static_cast<const std::byte*>(plan.a) + batch.a_offset;
      const void* b = static_cast<const std::byte*>(plan.b) + batch.b_offset;
      void* c = reinterpret_cast<std::byte*>(plan.c) + batch.c_offset;
      if (batch.count == 1) {
        FERRY_RETURN_IF_ERROR(
            CheckCublas(cublasGemmEx(ctx_.cublas, op_a, op_b, plan.m, plan.n,
                                     plan.k, &alpha, a, ab_type, plan.lda, b,
                                     ab_type, plan.ldb, &beta, c, CUDA_R_32F,
                                     plan.ldc, compute, CUBLAS_GEMM_DEFAULT),
                        "cublasGemmEx"));
      } else {
        FERRY_RETURN_IF_ERROR(CheckCublas(
            cublasGemmStridedBatchedEx(
                ctx_.cublas, op_a, op_b, plan.m, plan.n, plan.k, &alpha, a,
                ab_type, plan.lda, batch.stride_a, b, ab_type, plan.ldb,
                batch.stride_b, &beta, c, CUDA_R_32F, plan.ldc, batch.stride_c,
                batch.count, compute, CUBLAS_GEMM_DEFAULT),
            "cublasGemmStridedBatchedEx"));
      }
    }
    return absl::OkStatus();
  }

 private:
  absl::Status Check(cudaError_t error, absl::string_view call) const {
    if (error == cudaSuccess) return absl::OkStatus();
    return CudaToStatus(
        error, absl::StrCat("cuda kernels: ", OpName(node_.op), ": ", call,
                            " (", node_.ShapeString(), ")"));
  }

  absl::Status CheckCublas(cublasStatus_t status,
                           absl::string_view call) const {
    if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
    const std::string message = absl::StrCat(
        "cuda kernels: ", OpName(node_.op), ": ", call,
        " failed: ", cublasGetStatusName(status), " (",
        cublasGetStatusString(status), ") for ", node_.DebugString());
    switch (status) {
      case CUBLAS_STATUS_INVALID_VALUE:
        return absl::InvalidArgumentError(message);
      case CUBLAS_STATUS_NOT_SUPPORTED:
      case CUBLAS_STATUS_ARCH_MISMATCH:
        return absl::UnimplementedError(message);
      case CUBLAS_STATUS_ALLOC_FAILED:
        return absl::ResourceExhaustedError(message);
      case CUBLAS_STATUS_NOT_INITIALIZED:
        return absl::FailedPreconditionError(message);
      default:
        return absl::InternalError(message);
    }
  }

  const Tensor& node_;
  const LaunchContext& ctx_;
};

}  // namespace

bool ReadsWeightsOf(DType dtype) {
  switch (dtype) {
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ8_0:
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kIQ4_NL:
    case DType::kIQ4_XS:
      return true;
    default:
      return false;
  }
}

size_t ScratchBytes(const Tensor& node) {
  if (node.op == Op::kRope) return internal::RopeScratchBytes(node);
  if (node.op != Op::kMulMat) return 0;
  return internal::MulMatScratchBytes(node);
}

absl::Status Launch(const Tensor& node, const LaunchContext& ctx) {
  DeviceRunner runner(node, ctx);
  return internal::DispatchNode(node, ctx.scratch, ctx.scratch_bytes, runner);
}

}  // namespace ferry::cuda_kernels
