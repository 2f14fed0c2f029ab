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
#include "ferry/graph/dtype.h"
#include "ferry/graph/tensor.h"

namespace ferry::cuda_kernels {
namespace {

namespace internal = ::ferry::cuda_kernels_internal;

float LoadAsFloat(internal::ElemType type, const std::byte* p) {
  switch (type) {
    case internal::ElemType::kF16: {
      Half h;
      std::memcpy(&h, p, sizeof(h));
      return F16ToF32(h);
    }
    case internal::ElemType::kBF16: {
      BFloat16 b;
      std::memcpy(&b, p, sizeof(b));
      return BF16ToF32(b);
    }
    default: {
      float f;
      std::memcpy(&f, p, sizeof(f));
      return f;
    }
  }
}

// Column-major C (m x n) = op(A) op(B) with f32 accumulation, as
// cublasGemmEx computes it, after checking the arguments cuBLAS checks.
absl::Status EmulateGemm(const internal::GemmPlan& plan, const std::byte* a,
                         const std::byte* b, float* c) {
  const int64_t m = plan.m, n = plan.n, k = plan.k;
  const int64_t a_rows = plan.trans_a ? k : m;
  const int64_t b_rows = plan.trans_b ? n : k;
  if (m < 0 || n < 0 || k < 0 || plan.lda < std::max<int64_t>(1, a_rows) ||
      plan.ldb < std::max<int64_t>(1, b_rows) ||
      plan.ldc < std::max<int64_t>(1, m)) {
    return absl::InvalidArgumentError(
        absl::StrCat("emulated cuBLAS: invalid GEMM m=", m, " n=", n, " k=", k,
                     " lda=", plan.lda, " ldb=", plan.ldb, " ldc=", plan.ldc));
  }
  const int64_t size = plan.ab_type == internal::ElemType::kF32 ? 4 : 2;
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < m; ++i) {
      float sum = 0.0f;
      for (int64_t p = 0; p < k; ++p) {
        const int64_t ai = plan.trans_a ? p + i * plan.lda : i + p * plan.lda;
        const int64_t bi = plan.trans_b ? j + p * plan.ldb : p + j * plan.ldb;
        sum += LoadAsFloat(plan.ab_type, a + ai * size) *
               LoadAsFloat(plan.ab_type, b + bi * size);
      }
      c[i + j * plan.ldc] = sum;
    }
  }
  return absl::OkStatus();
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
    const int64_t size = plan.ab_type == internal::ElemType::kF32 ? 4 : 2;
    for (const internal::GemmBatch& batch : plan.batches) {
      if (batch.count < 1 || batch.stride_a < 0 || batch.stride_b < 0 ||
          batch.stride_c < 0) {
        return absl::InvalidArgumentError("emulated cuBLAS: invalid batch");
      }
      for (int64_t s = 0; s < batch.count; ++s) {
        const std::byte* a = static_cast<const std::byte*>(plan.a) +
                             batch.a_offset + s * batch.stride_a * size;
        const std::byte* b = static_cast<const std::byte*>(plan.b) +
                             batch.b_offset + s * batch.stride_b * size;
        float* c = reinterpret_cast<float*>(
            reinterpret_cast<std::byte*>(plan.c) + batch.c_offset +
            s * batch.stride_c * static_cast<int64_t>(sizeof(float)));
        absl::Status status = EmulateGemm(plan, a, b, c);
        if (!status.ok()) return status;
      }
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
  static void Emulate(const internal::CopyArgs& a) { internal::EmulateCopy(a); }
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
