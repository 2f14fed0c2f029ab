// The operations a ferry graph node can compute, and their static properties.
//
// `Op` is the node kind stored in every Tensor (op.h has no dependency on
// Tensor so that tensor.h can include it). The cost model, which needs shapes,
// lives in op_cost.h.
#ifndef FERRY_GRAPH_OP_H_
#define FERRY_GRAPH_OP_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace ferry {

// What a tensor computes. kNone marks a leaf (input, weight or constant).
// See ops.h for each op's semantics and op_params layout.
enum class Op : uint8_t {
  kNone = 0,
  kMulMat,
  kAdd,
  kSub,
  kMul,
  kDiv,
  kScale,
  kRmsNorm,
  kNorm,
  kSoftMax,
  kRope,
  kGetRows,
  kCpy,
  kCont,
  kView,
  kReshape,
  kPermute,
  kTranspose,
  kSilu,
  kGelu,
  kRelu,
  kConcat,
  kSetRows,
  kTanh,
  kRangeAttention,
};

inline constexpr int kNumOps = static_cast<int>(Op::kRangeAttention) + 1;

// Returns the op's lower-case name ("mul_mat", "soft_max", ...), or "unknown"
// for a value outside the enum.
absl::string_view OpName(Op op);

// Returns true for view, reshape, permute and transpose: the result aliases
// its source's memory (view_src/view_offset) and computes nothing.
bool IsViewOp(Op op);

// Returns true for ops whose node computes data: not kNone (a leaf) and not
// a view op. Backends run these nodes and skip the others.
inline bool IsComputeOp(Op op) { return op != Op::kNone && !IsViewOp(op); }

// Returns true for ops whose kernels must tolerate dst aliasing src[0] (same
// address, same layout): add, sub, mul, div, scale, silu, gelu, relu,
// rms_norm, norm, soft_max and rope. The graph allocator may then place the
// result in src[0]'s memory. Row-wise ops (norms, soft_max, rope) must read a
// whole row before overwriting it, or work element by element in order.
bool OpCanRunInPlace(Op op);

}  // namespace ferry

#endif  // FERRY_GRAPH_OP_H_
