#include "ferry/graph/op.h"

#include <array>

namespace ferry {
namespace {

constexpr std::array<absl::string_view, kNumOps> kOpNames = {
    "none",    "mul_mat",  "add",       "sub",  "mul",
    "div",     "scale",    "rms_norm",  "norm", "soft_max",
    "rope",    "get_rows", "cpy",       "cont", "view",
    "reshape", "permute",  "transpose", "silu", "gelu",
    "relu",    "concat",   "set_rows",  "tanh", "range_attention",
};

}  // namespace

absl::string_view OpName(Op op) {
  const int index = static_cast<int>(op);
  if (index < 0 || index >= kNumOps) return "unknown";
  return kOpNames[index];
}

bool IsViewOp(Op op) {
  switch (op) {
    case Op::kView:
    case Op::kReshape:
    case Op::kPermute:
    case Op::kTranspose:
      return true;
    default:
      return false;
  }
}

bool OpCanRunInPlace(Op op) {
  switch (op) {
    case Op::kAdd:
    case Op::kSub:
    case Op::kMul:
    case Op::kDiv:
    case Op::kScale:
    case Op::kSilu:
    case Op::kGelu:
    case Op::kRelu:
    case Op::kTanh:
    case Op::kRmsNorm:
    case Op::kNorm:
    case Op::kSoftMax:
    case Op::kRope:
      return true;
    default:
      return false;
  }
}

}  // namespace ferry
