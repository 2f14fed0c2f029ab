#include "ferry/graph/op_cost.h"

#include "ferry/graph/dtype.h"

namespace ferry {
namespace {

int64_t PackedBytes(const Tensor* t) {
  if (t == nullptr) return 0;
  return t->NumElements() / DTypeBlockSize(t->dtype) * t->ElementSize();
}

}  // namespace

int64_t OpFlops(const Tensor& node) {
  const int64_t n = node.NumElements();
  switch (node.op) {
    case Op::kMulMat:
      return node.src[0] == nullptr ? 0 : 2 * node.src[0]->ne[0] * n;
    case Op::kAdd:
    case Op::kSub:
    case Op::kMul:
    case Op::kDiv:
    case Op::kScale:
    case Op::kRelu:
      return n;
    case Op::kSilu:
      return 4 * n;  // neg, exp, add, div.
    case Op::kGelu:
      return 8 * n;  // cube, fma, mul, tanh, add, 2 mul.
    case Op::kTanh:
      return 4 * n;  // exp, add, div, sub.
    case Op::kRmsNorm:
      return 3 * n;  // square, sum, scale.
    case Op::kNorm:
      return 5 * n;  // sum, sub, square, sum, scale.
    case Op::kSoftMax:
      return 5 * n;  // scale+mask, max, sub+exp, sum, div.
    case Op::kRope:
      return 6 * n;  // sin, cos, 4 mul/add per pair, amortized.
    default:
      return 0;
  }
}

int64_t OpBytes(const Tensor& node) {
  if (node.op == Op::kNone || IsViewOp(node.op)) return 0;
  if (node.op == Op::kGetRows && node.src[0] != nullptr) {
    // Only the gathered rows of src[0] are read.
    const Tensor& a = *node.src[0];
    const int64_t rows_read = node.NumRows();
    return rows_read * a.RowBytes() + PackedBytes(node.src[1]) +
           PackedBytes(&node);
  }
  if (node.op == Op::kSetRows && node.src[0] != nullptr &&
      node.src[2] != nullptr) {
    // Reads the rows and ids, writes as many rows of dst; the rest of dst
    // is untouched.
    const int64_t rows = node.src[0]->ne[1];
    return PackedBytes(node.src[0]) + PackedBytes(node.src[1]) +
           rows * node.src[2]->RowBytes();
  }
  int64_t bytes = PackedBytes(&node);
  for (int i = 0; i < kMaxSrc; ++i) {
    // cpy's src[1] is its own destination: written, not read.
    if (node.op == Op::kCpy && i == 1) continue;
    bytes += PackedBytes(node.src[i]);
  }
  return bytes;
}

}  // namespace ferry
