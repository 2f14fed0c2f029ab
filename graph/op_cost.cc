#include "ferry/graph/op_cost.h"

#include <algorithm>

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
    case Op::kRangeAttention:
      // The ranges are data: as if each token saw a quarter of the cache
      // (dot and axpy per row seen, 2 flops each per element).
      return node.src[1] == nullptr
                 ? 0
                 : 4 * n * std::max<int64_t>(1, node.src[1]->ne[1] / 4);
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
  if (node.op == Op::kRangeAttention && node.src[1] != nullptr) {
    // q, ranges and the result, and (as OpFlops assumes) a quarter of the
    // K and V rows.
    const Tensor& k = *node.src[1];
    return PackedBytes(node.src[0]) + PackedBytes(node.src[3]) +
           PackedBytes(&node) +
           2 * std::max<int64_t>(1, k.ne[1] / 4) * k.RowBytes();
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
