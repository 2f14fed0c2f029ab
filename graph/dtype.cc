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
      "unknown dtype '", name, "' (expected f32, f16, bf16, i32)"));
}

}  // namespace ferry
