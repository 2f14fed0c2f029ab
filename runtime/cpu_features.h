// Instruction sets ferry's host kernels have paths for, and which of them
// this CPU (and OS) supports: the one ISA enum and the one detection that
// quantize/dequantize, vec_dot, the GEMM and the row primitives all follow.
#ifndef FERRY_RUNTIME_CPU_FEATURES_H_
#define FERRY_RUNTIME_CPU_FEATURES_H_

#include "absl/strings/string_view.h"

namespace ferry {

// Ordered: a CPU that supports one supports every earlier one.
enum class Isa {
  kScalar = 0,
  kAvx2 = 1,    // AVX2 + FMA + F16C.
  kAvx512 = 2,  // AVX-512 F/BW/VL/DQ + FMA + F16C.
};

// The widest ISA this CPU supports (detected once). Thread-safe.
Isa BestIsa();

// Whether kernels for `isa` can run here.
bool IsaSupported(Isa isa);

absl::string_view IsaName(Isa isa);

}  // namespace ferry

#endif  // FERRY_RUNTIME_CPU_FEATURES_H_
