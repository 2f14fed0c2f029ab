#include "ferry/backends/host/vec_dot.h"

#include "absl/strings/str_cat.h"
#include "ferry/backends/host/internal/vec_dot_kernels.h"

namespace ferry::quant {

absl::StatusOr<QuantType> VecDotActivationType(QuantType weight) {
  switch (weight) {
    case QuantType::kQ4_0:
    case QuantType::kQ5_0:
    case QuantType::kQ8_0:
    case QuantType::kIQ4_NL:
      return QuantType::kQ8_0;
    case QuantType::kQ2_K:
    case QuantType::kQ3_K:
    case QuantType::kQ4_K:
    case QuantType::kQ5_K:
    case QuantType::kQ6_K:
    case QuantType::kIQ4_XS:
      return QuantType::kQ8_K;
    case QuantType::kQ4_1:
    case QuantType::kQ5_1:
      return QuantType::kQ8_1;
    case QuantType::kF32:
    case QuantType::kF16:
    case QuantType::kBF16:
      return QuantType::kF32;
    default:
      return absl::UnimplementedError(absl::StrCat(
          "no vec_dot kernel for ", QuantTypeName(weight), " weights"));
  }
}

Isa PreferredIsa(QuantType weight) {
  const Isa best = BestIsa();
  switch (weight) {
    case QuantType::kQ4_0:
    case QuantType::kQ4_1:
    case QuantType::kQ5_0:
    case QuantType::kQ5_1:
    case QuantType::kQ8_0:
    case QuantType::kQ2_K:
    case QuantType::kQ3_K:
    case QuantType::kQ4_K:
    case QuantType::kQ5_K:
    case QuantType::kQ6_K:
    case QuantType::kIQ4_NL:
    case QuantType::kIQ4_XS:
      return best == Isa::kAvx512 ? Isa::kAvx2 : best;
    default:
      return best;
  }
}

VecDotFn FindVecDot(QuantType weight, Isa isa) {
  if (!IsaSupported(isa)) return nullptr;
  switch (isa) {
    case Isa::kAvx512:
      return quant_internal::Avx512VecDot(weight);
    case Isa::kAvx2:
      return quant_internal::Avx2VecDot(weight);
    case Isa::kScalar:
      return quant_internal::ScalarVecDot(weight);
  }
  return nullptr;
}

absl::StatusOr<float> VecDot(QuantType weight, const void* w, const void* act,
                             int64_t n) {
  const VecDotFn fn = FindVecDot(weight);
  if (fn == nullptr) {
    return absl::UnimplementedError(absl::StrCat(
        "no vec_dot kernel for ", QuantTypeName(weight), " weights"));
  }
  if (n < 0 || n % BlockSize(weight) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("row of ", n, " elements is not a whole number of ",
                     QuantTypeName(weight), " blocks"));
  }
  return fn(w, act, n);
}

}  // namespace ferry::quant
