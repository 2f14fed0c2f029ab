#include "ferry/runtime/cpu_features.h"

namespace ferry {
namespace {

Isa DetectIsa() {
  __builtin_cpu_init();
  // __builtin_cpu_supports also checks that the OS saves the vector state.
  const bool avx2 = __builtin_cpu_supports("avx2") &&
                    __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("f16c");
  if (avx2 && __builtin_cpu_supports("avx512f") &&
      __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq")) {
    return Isa::kAvx512;
  }
  return avx2 ? Isa::kAvx2 : Isa::kScalar;
}

}  // namespace

Isa BestIsa() {
  static const Isa isa = DetectIsa();
  return isa;
}

bool IsaSupported(Isa isa) {
  return static_cast<int>(isa) <= static_cast<int>(BestIsa());
}

absl::string_view IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
  }
  return "?";
}

}  // namespace ferry
