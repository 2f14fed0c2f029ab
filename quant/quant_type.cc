#include "ferry/quant/quant_type.h"

#include <array>
#include <limits>

#include "absl/strings/str_cat.h"

namespace ferry::quant {
namespace {

using T = QuantType;

// Block geometry from ggml's published block layouts (ggml-common.h).
constexpr QuantTypeInfo kInfos[] = {
    {T::kF32, "f32", 1, 4, true},
    {T::kF16, "f16", 1, 2, true},
    {T::kQ4_0, "q4_0", 32, 18, true},
    {T::kQ4_1, "q4_1", 32, 20, true},
    {T::kQ5_0, "q5_0", 32, 22, true},
    {T::kQ5_1, "q5_1", 32, 24, true},
    {T::kQ8_0, "q8_0", 32, 34, true},
    // ggml's block_q8_1 holds d and s as two halves: 4 + 32 bytes.
    {T::kQ8_1, "q8_1", 32, 36, true},
    {T::kQ2_K, "q2_K", 256, 84, true},
    {T::kQ3_K, "q3_K", 256, 110, true},
    {T::kQ4_K, "q4_K", 256, 144, true},
    {T::kQ5_K, "q5_K", 256, 176, true},
    {T::kQ6_K, "q6_K", 256, 210, true},
    {T::kQ8_K, "q8_K", 256, 292, false},
    {T::kIQ2_XXS, "iq2_xxs", 256, 66, false},
    {T::kIQ2_XS, "iq2_xs", 256, 74, false},
    {T::kIQ3_XXS, "iq3_xxs", 256, 98, false},
    {T::kIQ1_S, "iq1_s", 256, 50, false},
    {T::kIQ4_NL, "iq4_nl", 32, 18, true},
    {T::kIQ3_S, "iq3_s", 256, 110, false},
    {T::kIQ2_S, "iq2_s", 256, 82, false},
    {T::kIQ4_XS, "iq4_xs", 256, 136, true},
    {T::kI8, "i8", 1, 1, false},
    {T::kI16, "i16", 1, 2, false},
    {T::kI32, "i32", 1, 4, false},
    {T::kI64, "i64", 1, 8, false},
    {T::kF64, "f64", 1, 8, false},
    {T::kIQ1_M, "iq1_m", 256, 56, false},
    {T::kBF16, "bf16", 1, 2, true},
    {T::kTQ1_0, "tq1_0", 256, 54, false},
    {T::kTQ2_0, "tq2_0", 256, 66, false},
    {T::kMXFP4, "mxfp4", 32, 17, false},
    {T::kNVFP4, "nvfp4", 64, 36, false},
    {T::kQ1_0, "q1_0", 128, 18, false},
};

constexpr uint32_t kMaxId = static_cast<uint32_t>(T::kQ1_0);

}  // namespace

const QuantTypeInfo* FindQuantTypeInfo(uint32_t id) {
  // Ids are small and dense: index them once.
  static const auto* const by_id = [] {
    auto* table = new std::array<const QuantTypeInfo*, kMaxId + 1>();
    for (const QuantTypeInfo& info : kInfos) {
      (*table)[static_cast<uint32_t>(info.type)] = &info;
    }
    return table;
  }();
  return id <= kMaxId ? (*by_id)[id] : nullptr;
}

absl::StatusOr<QuantType> QuantTypeFromId(uint32_t id) {
  const QuantTypeInfo* info = FindQuantTypeInfo(id);
  if (info == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown ggml tensor type id ", id));
  }
  return info->type;
}

const QuantTypeInfo& GetQuantTypeInfo(QuantType type) {
  // Every enumerator is in kInfos (checked by quant_type_test).
  const QuantTypeInfo* info = FindQuantTypeInfo(static_cast<uint32_t>(type));
  return info != nullptr ? *info : kInfos[0];
}

absl::StatusOr<int64_t> RowBytesChecked(QuantType type, int64_t n) {
  const QuantTypeInfo& info = GetQuantTypeInfo(type);
  if (n < 0 || n % info.block_size != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("row of ", n, " elements is not a whole number of ",
                     info.name, " blocks of ", info.block_size));
  }
  const int64_t blocks = n / info.block_size;
  if (blocks > std::numeric_limits<int64_t>::max() / info.block_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "row of ", n, " ", info.name, " elements overflows int64 bytes"));
  }
  return blocks * info.block_bytes;
}

}  // namespace ferry::quant
