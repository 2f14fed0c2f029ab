#include "ferry/backends/cuda/kernels/host_emulation.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ferry/backends/cuda/kernels/cuda_kernels.h"
#include "ferry/backends/cuda/kernels/internal/desc.h"
#include "ferry/backends/cuda/kernels/internal/host_emulation_kernels.h"
#include "ferry/backends/cuda/kernels/internal/node_args.h"
#include "ferry/backends/cuda/testing/emulated_gemm.h"
#include "ferry/graph/tensor.h"

namespace ferry::cuda_kernels {
namespace {

namespace internal = ::ferry::cuda_kernels_internal;

cuda_testing::GemmType ToGemmType(internal::ElemType type) {
  switch (type) {
    case internal::ElemType::kF16:
      return cuda_testing::GemmType::kF16;
    case internal::ElemType::kBF16:
      return cuda_testing::GemmType::kBF16;
    default:
      return cuda_testing::GemmType::kF32;
  }
}

// Runs node arguments with the host emulation of each kernel.
class HostRunner {
 public:
  template <typename Args>
  absl::Status Run(const Args& args) {
    Emulate(args);
    return absl::OkStatus();
  }

  absl::Status Run(const internal::GemmPlan& plan) {
    if (plan.zero_output) {
      std::memset(plan.c, 0, static_cast<size_t>(plan.output_bytes));
      return absl::OkStatus();
    }
    if (plan.copy_b) internal::EmulateCopy(*plan.copy_b);
    if (plan.copy_a) internal::EmulateCopy(*plan.copy_a);
    if (plan.dequant_a) internal::EmulateDequant(*plan.dequant_a);
    // Each batch run as the cublasGemm(StridedBatched)Ex call Launch makes.
    for (const internal::GemmBatch& batch : plan.batches) {
      cuda_testing::GemmCall call;
      call.trans_a = plan.trans_a;
      call.trans_b = plan.trans_b;
      call.m = plan.m;
      call.n = plan.n;
      call.k = plan.k;
      call.ab_type = ToGemmType(plan.ab_type);
      call.a = static_cast<const std::byte*>(plan.a) + batch.a_offset;
      call.lda = plan.lda;
      call.stride_a = batch.stride_a;
      call.b = static_cast<const std::byte*>(plan.b) + batch.b_offset;
      call.ldb = plan.ldb;
      call.stride_b = batch.stride_b;
      call.c = reinterpret_cast<float*>(reinterpret_cast<std::byte*>(plan.c) +
                                        batch.c_offset);
      call.ldc = plan.ldc;
      call.stride_c = batch.stride_c;
      call.batch = batch.count;
      if (batch.count < 1) {
        return absl::InvalidArgumentError("emulated cuBLAS: invalid batch");
      }
      absl::Status status = cuda_testing::CheckGemm(call);
      if (!status.ok()) return status;
      cuda_testing::RunGemm(call);
    }
    return absl::OkStatus();
  }

 private:
  static void Emulate(const internal::BinaryArgs& a) {
    internal::EmulateBinary(a);
  }
  static void Emulate(const internal::UnaryArgs& a) {
    internal::EmulateUnary(a);
  }
  static void Emulate(const internal::NormArgs& a) { internal::EmulateNorm(a); }
  static void Emulate(const internal::SoftMaxArgs& a) {
    internal::EmulateSoftMax(a);
  }
  static void Emulate(const internal::RopeArgs& a) { internal::EmulateRope(a); }
  static void Emulate(const internal::GetRowsArgs& a) {
    internal::EmulateGetRows(a);
  }
  static void Emulate(const internal::SetRowsArgs& a) {
    internal::EmulateSetRows(a);
  }
  static void Emulate(const internal::CopyArgs& a) { internal::EmulateCopy(a); }
  static void Emulate(const internal::QuantDotArgs& a) {
    internal::EmulateQuantDot(a);
  }
  static void Emulate(const internal::ConcatArgs& a) {
    internal::EmulateConcat(a);
  }
};

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

}  // namespace

absl::Status EmulateOnHost(const Tensor& node) {
  const size_t bytes = ScratchBytes(node);
  std::unique_ptr<void, FreeDeleter> scratch;
  if (bytes > 0) {
    scratch.reset(std::aligned_alloc(internal::kScratchAlignment, bytes));
    if (scratch == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("EmulateOnHost: no ", bytes, " bytes of scratch"));
    }
  }
  HostRunner runner;
  return internal::DispatchNode(node, scratch.get(), bytes, runner);
}

}  // namespace ferry::cuda_kernels
