#include "ferry/quant/quant_dtype.h"

#include "absl/strings/str_cat.h"

namespace ferry::quant {

QuantType QuantTypeOf(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return QuantType::kF32;
    case DType::kF16:
      return QuantType::kF16;
    case DType::kBF16:
      return QuantType::kBF16;
    case DType::kI32:
      return QuantType::kI32;
    case DType::kQ4_0:
      return QuantType::kQ4_0;
    case DType::kQ4_1:
      return QuantType::kQ4_1;
    case DType::kQ5_0:
      return QuantType::kQ5_0;
    case DType::kQ5_1:
      return QuantType::kQ5_1;
    case DType::kQ8_0:
      return QuantType::kQ8_0;
    case DType::kQ2_K:
      return QuantType::kQ2_K;
    case DType::kQ3_K:
      return QuantType::kQ3_K;
    case DType::kQ4_K:
      return QuantType::kQ4_K;
    case DType::kQ5_K:
      return QuantType::kQ5_K;
    case DType::kQ6_K:
      return QuantType::kQ6_K;
    case DType::kIQ4_NL:
      return QuantType::kIQ4_NL;
    case DType::kIQ4_XS:
      return QuantType::kIQ4_XS;
  }
  return QuantType::kF32;  // Unreachable: every enumerator is listed.
}

absl::StatusOr<DType> DTypeOf(QuantType type) {
  for (int i = 0; i < kNumDTypes; ++i) {
    const DType dtype = static_cast<DType>(i);
    if (QuantTypeOf(dtype) == type) return dtype;
  }
  return absl::UnimplementedError(absl::StrCat(
      "ggml type ", QuantTypeName(type), " has no ferry graph dtype"));
}

}  // namespace ferry::quant
