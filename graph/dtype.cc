#include "ferry/graph/dtype.h"

#include <array>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ferry {
namespace {

constexpr std::array<DTypeTraits, kNumDTypes> kTraits = {{
    {"f32", 1, 4, true},
    {"f16", 1, 2, true},
    {"bf16", 1, 2, true},
    {"i32", 1, 4, false},
    // ggml's block formats (quant/block_formats.h).
    {"q4_0", 32, 18, false},
    {"q4_1", 32, 20, false},
    {"q5_0", 32, 22, false},
    {"q5_1", 32, 24, false},
    {"q8_0", 32, 34, false},
    {"q2_K", 256, 84, false},
    {"q3_K", 256, 110, false},
    {"q4_K", 256, 144, false},
    {"q5_K", 256, 176, false},
    {"q6_K", 256, 210, false},
    {"iq4_nl", 32, 18, false},
    {"iq4_xs", 256, 136, false},
}};

}  // namespace

const DTypeTraits& GetDTypeTraits(DType dtype) {
  return kTraits[static_cast<int>(dtype)];
}

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  for (int i = 0; i < kNumDTypes; ++i) {
    if (kTraits[i].name == name) return static_cast<DType>(i);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown dtype '", name,
      "' (expected f32, f16, bf16, i32, q4_0, q4_1, q5_0, q5_1, q8_0, q2_K, "
      "q3_K, q4_K, q5_K, q6_K, iq4_nl or iq4_xs)"));
}

}  // namespace ferry
