#include "ferry/backends/host/kernels/kernels.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ferry/backends/host/internal/packed_layout.h"
#include "ferry/backends/host/internal/quant_group_layout.h"
#include "ferry/backends/host/kernels/internal/vec.h"
#include "ferry/backends/host/kernels/kernel_context.h"
#include "ferry/backends/host/kernels/mat_mul_node.h"
#include "ferry/backends/host/kernels/range_attention_node.h"
#include "ferry/backends/host/packed_state.h"
#include "ferry/graph/dtype.h"
#include "ferry/graph/op.h"
#include "ferry/graph/ops.h"
#include "ferry/graph/tensor.h"
#include "ferry/quant/dequantize.h"
#include "ferry/quant/quant_dtype.h"
#include "ferry/runtime/status_macros.h"

namespace ferry {
namespace cpu_kernels {
namespace {

namespace vec = ::ferry::cpu_kernels_internal;
using vec::BinaryOp;

// ---------------------------------------------------------------------------
// CheckSupported.

std::string DescribeNode(const Tensor& node) {
  std::string out = absl::StrCat("node ", node.ShapeString(), " nb = [",
                                 absl::StrJoin(node.nb, ", "), "]");
  for (int i = 0; i < kMaxSrc; ++i) {
    const Tensor* src = node.src[i];
    if (src == nullptr) continue;
    absl::StrAppend(&out, ", src", i, " ", src->ShapeString(), " nb = [",
                    absl::StrJoin(src->nb, ", "), "]");
  }
  return out;
}

absl::Status Unimplemented(const Tensor& node, absl::string_view why) {
  return absl::UnimplementedError(absl::StrCat("cpu kernels: ", OpName(node.op),
                                               ": ", why, " (",
                                               DescribeNode(node), ")"));
}

absl::Status Invalid(const Tensor& node, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("cpu kernels: ", OpName(node.op), ": ", why, " (",
                   DescribeNode(node), ")"));
}

bool IsFloat(DType dtype) { return GetDTypeTraits(dtype).is_float; }

absl::Status CheckDType(const Tensor& node, absl::string_view what,
                        const Tensor& t, std::initializer_list<DType> allowed) {
  for (DType dtype : allowed) {
    if (t.dtype == dtype) return absl::OkStatus();
  }
  return Unimplemented(
      node, absl::StrCat(what, " dtype ", DTypeName(t.dtype), " unsupported"));
}

absl::Status CheckRows(const Tensor& node, absl::string_view what,
                       const Tensor& t) {
  if (t.HasContiguousRows()) return absl::OkStatus();
  return Invalid(node, absl::StrCat(what, " needs contiguous rows"));
}

absl::Status CheckContiguousResult(const Tensor& node) {
  if (node.IsContiguous()) return absl::OkStatus();
  return Invalid(node, "result must be contiguous");
}

absl::Status CheckSameShape(const Tensor& node, absl::string_view what,
                            const Tensor& t) {
  if (node.ne == t.ne) return absl::OkStatus();
  return Invalid(node, absl::StrCat("result shape must equal ", what, "'s"));
}

// Checks the node itself is an f32 contiguous result of a's shape, a f32
// with contiguous rows.
absl::Status CheckRowWise(const Tensor& node, const Tensor& a) {
  FERRY_RETURN_IF_ERROR(CheckDType(node, "a", a, {DType::kF32}));
  FERRY_RETURN_IF_ERROR(CheckDType(node, "result", node, {DType::kF32}));
  FERRY_RETURN_IF_ERROR(CheckRows(node, "a", a));
  FERRY_RETURN_IF_ERROR(CheckSameShape(node, "a", a));
  return CheckContiguousResult(node);
}

// What mul_mat's a and get_rows' table may be: the float types and every
// block type (quant/ dequantizes and backends/host/vec_dot.h dots all of them).
constexpr std::initializer_list<DType> kWeightTypes = {
    DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ4_0,   DType::kQ4_1,
    DType::kQ5_0, DType::kQ5_1, DType::kQ8_0, DType::kQ2_K,   DType::kQ3_K,
    DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kIQ4_NL, DType::kIQ4_XS};

absl::Status CheckMulMat(const Tensor& node, const Tensor& a, const Tensor& b) {
  FERRY_RETURN_IF_ERROR(CheckDType(node, "a", a, kWeightTypes));
  FERRY_RETURN_IF_ERROR(CheckDType(node, "b", b, {DType::kF32}));
  FERRY_RETURN_IF_ERROR(CheckDType(node, "result", node, {DType::kF32}));
  if (a.ne[0] != b.ne[0]) return Invalid(node, "a and b need equal ne[0]");
  for (int i = 2; i < kMaxDims; ++i) {
    if (a.ne[i] <= 0 || b.ne[i] % a.ne[i] != 0) {
      return Invalid(
          node,
          absl::StrCat("b.ne[", i, "] must be a multiple of a.ne[", i, "]"));
    }
  }
  const std::array<int64_t, kMaxDims> expected = {a.ne[1], b.ne[1], b.ne[2],
                                                  b.ne[3]};
  if (node.ne != expected) {
    return Invalid(node, "result must be [a.ne[1], b.ne[1], b.ne[2], b.ne[3]]");
  }
  FERRY_RETURN_IF_ERROR(CheckRows(node, "a", a));
  FERRY_RETURN_IF_ERROR(CheckRows(node, "b", b));
  if (a.nb[1] % a.ElementSize() != 0 || b.nb[1] % b.ElementSize() != 0) {
    return Invalid(node, "row strides must be multiples of the element size");
  }
  return CheckContiguousResult(node);
}

absl::Status CheckBinary(const Tensor& node, const Tensor& a, const Tensor& b) {
  FERRY_RETURN_IF_ERROR(CheckRowWise(node, a));
  FERRY_RETURN_IF_ERROR(CheckDType(node, "b", b, {DType::kF32}));
  FERRY_RETURN_IF_ERROR(CheckRows(node, "b", b));
  if (!CanRepeat(b, a)) return Invalid(node, "b cannot broadcast onto a");
  return absl::OkStatus();
}

absl::Status CheckSoftMax(const Tensor& node, const Tensor& a,
                          const Tensor* mask) {
  FERRY_RETURN_IF_ERROR(CheckRowWise(node, a));
  if (mask == nullptr) return absl::OkStatus();
  FERRY_RETURN_IF_ERROR(CheckDType(node, "mask", *mask, {DType::kF32}));
  FERRY_RETURN_IF_ERROR(CheckRows(node, "mask", *mask));
  if (mask->ne[0] != a.ne[0] || mask->ne[1] < a.ne[1]) {
    return Invalid(node, "mask needs ne[0] == a.ne[0] and ne[1] >= a.ne[1]");
  }
  for (int i = 2; i < kMaxDims; ++i) {
    if (mask->ne[i] <= 0 || a.ne[i] % mask->ne[i] != 0) {
      return Invalid(
          node,
          absl::StrCat("a.ne[", i, "] must be a multiple of mask.ne[", i, "]"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckRope(const Tensor& node, const Tensor& a, const Tensor& pos) {
  FERRY_RETURN_IF_ERROR(CheckRowWise(node, a));
  FERRY_RETURN_IF_ERROR(CheckDType(node, "pos", pos, {DType::kI32}));
  const std::array<int64_t, kMaxDims> expected = {a.ne[2], 1, 1, 1};
  if (pos.ne != expected || !pos.HasContiguousRows()) {
    return Invalid(node, "pos must be contiguous [a.ne[2]]");
  }
  const int32_t n_dims = node.ParamI32(0);
  if (n_dims <= 0 || n_dims % 2 != 0 || n_dims > a.ne[0]) {
    return Invalid(node, absl::StrCat("n_dims = ", n_dims,
                                      " must be even, > 0 and <= a.ne[0]"));
  }
  const int32_t mode = node.ParamI32(1);
  if (mode != static_cast<int32_t>(RopeMode::kNormal) &&
      mode != static_cast<int32_t>(RopeMode::kNeox)) {
    return Unimplemented(node, absl::StrCat("rope mode ", mode));
  }
  if (const Tensor* factors = node.src[2]; factors != nullptr) {
    FERRY_RETURN_IF_ERROR(
        CheckDType(node, "freq_factors", *factors, {DType::kF32}));
    if (factors->ne[0] != n_dims / 2 || factors->NumElements() != n_dims / 2 ||
        !factors->IsContiguous()) {
      return Invalid(node, "freq_factors must be contiguous [n_dims / 2]");
    }
  }
  return absl::OkStatus();
}

absl::Status CheckGetRows(const Tensor& node, const Tensor& a,
                          const Tensor& ids) {
  FERRY_RETURN_IF_ERROR(CheckDType(node, "a", a, kWeightTypes));
  FERRY_RETURN_IF_ERROR(CheckDType(node, "ids", ids, {DType::kI32}));
  FERRY_RETURN_IF_ERROR(CheckDType(node, "result", node, {DType::kF32}));
  FERRY_RETURN_IF_ERROR(CheckRows(node, "a", a));
  FERRY_RETURN_IF_ERROR(CheckRows(node, "ids", ids));
  if (ids.ne[1] != a.ne[2] || ids.ne[2] != a.ne[3] || ids.ne[3] != 1) {
    return Invalid(node, "ids must be [N, a.ne[2], a.ne[3], 1]");
  }
  const std::array<int64_t, kMaxDims> expected = {a.ne[0], ids.ne[0], a.ne[2],
                                                  a.ne[3]};
  if (node.ne != expected) {
    return Invalid(node,
                   "result must be [a.ne[0], ids.ne[0], a.ne[2], a.ne[3]]");
  }
  return CheckContiguousResult(node);
}

absl::Status CheckSetRows(const Tensor& node, const Tensor& rows,
                          const Tensor& ids, const Tensor& dst) {
  FERRY_RETURN_IF_ERROR(
      CheckDType(node, "dst", dst, {DType::kF32, DType::kF16, DType::kBF16}));
  FERRY_RETURN_IF_ERROR(CheckDType(node, "rows", rows, {DType::kF32}));
  FERRY_RETURN_IF_ERROR(CheckDType(node, "ids", ids, {DType::kI32}));
  FERRY_RETURN_IF_ERROR(CheckRows(node, "rows", rows));
  FERRY_RETURN_IF_ERROR(CheckRows(node, "ids", ids));
  FERRY_RETURN_IF_ERROR(CheckRows(node, "result", node));
  if (node.dtype != dst.dtype || node.ne != dst.ne || node.nb != dst.nb) {
    return Invalid(node, "result must have dst's dtype, shape and strides");
  }
  if (node.ne[2] != 1 || node.ne[3] != 1 || rows.ne[0] != node.ne[0] ||
      rows.ne[1] != ids.ne[0] || rows.NumRows() != rows.ne[1] ||
      ids.NumElements() != ids.ne[0]) {
    return Invalid(node, "needs dst [E, R], rows [E, N], ids [N]");
  }
  return absl::OkStatus();
}

absl::Status CheckCpy(const Tensor& node, const Tensor& a, const Tensor& b) {
  if (a.dtype != b.dtype && !(IsFloat(a.dtype) && IsFloat(b.dtype))) {
    return Unimplemented(
        node, absl::StrCat("cannot convert ", DTypeName(a.dtype), " to ",
                           DTypeName(b.dtype)));
  }
  if (a.NumElements() != b.NumElements()) {
    return Invalid(node, "a and b need equal element counts");
  }
  if (node.dtype != b.dtype || node.ne != b.ne || node.nb != b.nb) {
    return Invalid(node, "result must have b's dtype, shape and strides");
  }
  return absl::OkStatus();
}

absl::Status CheckConcat(const Tensor& node, const Tensor& a, const Tensor& b) {
  const int32_t dim = node.ParamI32(0);
  if (dim < 0 || dim >= kMaxDims) {
    return Invalid(node, absl::StrCat("dim ", dim, " outside [0, 4)"));
  }
  if (a.dtype != b.dtype || node.dtype != a.dtype) {
    return Invalid(node, "a, b and result need the same dtype");
  }
  std::array<int64_t, kMaxDims> expected = a.ne;
  expected[dim] += b.ne[dim];
  for (int i = 0; i < kMaxDims; ++i) {
    if (i != dim && a.ne[i] != b.ne[i]) {
      return Invalid(node, "a and b need equal ne outside dim");
    }
  }
  if (node.ne != expected) return Invalid(node, "result shape mismatch");
  return CheckContiguousResult(node);
}

// Refuses nodes that would read (or write) a weight stored in the CPU's
// panel layout as if it were rows: only mul_mat's `a` and get_rows' table
// know the panels, and views into a packed weight have no row-major bytes.
absl::Status CheckPackedOperands(const Tensor& node) {
  if (GetPackedState(node) != PackedState::kPlain) {
    const Tensor& owner = node.view_src != nullptr ? *node.view_src : node;
    return Unimplemented(
        node, absl::StrCat("writes into '", owner.name,
                           "', a weight stored packed (cpu_packed)"));
  }
  for (int i = 0; i < kMaxSrc; ++i) {
    const Tensor* src = node.src[i];
    if (src == nullptr) continue;
    switch (GetPackedState(*src)) {
      case PackedState::kPlain:
        break;
      case PackedState::kPacked:
        if (i == 0 && (node.op == Op::kMulMat || node.op == Op::kGetRows)) {
          break;
        }
        return Unimplemented(
            node, absl::StrCat("src", i, " '", src->name,
                               "' is stored packed (cpu_packed); only mul_mat "
                               "(as a) and get_rows (as the table) read it"));
      case PackedState::kViewOfPacked:
        return Unimplemented(
            node, absl::StrCat("src", i, " '", src->name, "' is a view into '",
                               src->view_src->name,
                               "', a weight stored packed (cpu_packed)"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckSources(const Tensor& node, int count) {
  for (int i = 0; i < count; ++i) {
    if (node.src[i] == nullptr) {
      return Invalid(node, absl::StrCat("src[", i, "] is null"));
    }
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Work partition and addressing.

struct Range {
  int64_t begin;
  int64_t end;
};

// Part ith of nth nearly equal parts of [0, n).
Range Split(int64_t n, int ith, int nth) {
  return {n * ith / nth, n * (ith + 1) / nth};
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

struct RowIndex {
  int64_t i1, i2, i3;
};

RowIndex RowOf(const Tensor& t, int64_t r) {
  RowIndex idx;
  idx.i1 = r % t.ne[1];
  r /= t.ne[1];
  idx.i2 = r % t.ne[2];
  idx.i3 = r / t.ne[2];
  return idx;
}

template <typename T = std::byte>
T* RowPtr(const Tensor& t, int64_t i1, int64_t i2, int64_t i3) {
  return reinterpret_cast<T*>(static_cast<std::byte*>(t.data) + i1 * t.nb[1] +
                              i2 * t.nb[2] + i3 * t.nb[3]);
}

template <typename T = std::byte>
T* RowPtr(const Tensor& t, const RowIndex& r) {
  return RowPtr<T>(t, r.i1, r.i2, r.i3);
}

// Calls fn(row, c0, c1) for thread ith's share of t's elements, as segments
// [c0, c1) of rows. Whole rows when there are enough of them; otherwise rows
// are cut into up to nth parts (of >= 256 elements, cut at multiples of 16)
// so that a few long rows still keep every thread busy.
template <typename Fn>
void ForEachSegment(const Tensor& t, int ith, int nth, Fn fn) {
  const int64_t rows = t.NumRows();
  const int64_t ne0 = t.ne[0];
  if (rows == 0 || ne0 == 0) return;
  int64_t parts = 1;
  if (rows < nth) {
    parts =
        std::min<int64_t>(CeilDiv(nth, rows), std::max<int64_t>(1, ne0 / 256));
  }
  const auto boundary = [&](int64_t p) {
    return p == parts ? ne0 : ne0 * p / parts / 16 * 16;
  };
  const Range units = Split(rows * parts, ith, nth);
  if (parts == 1) {
    // Whole rows: step the row index instead of dividing for each row
    // (rows can be short: a head's 64 elements).
    if (units.begin >= units.end) return;
    RowIndex r = RowOf(t, units.begin);
    for (int64_t u = units.begin; u < units.end; ++u) {
      fn(r, int64_t{0}, ne0);
      if (++r.i1 == t.ne[1]) {
        r.i1 = 0;
        if (++r.i2 == t.ne[2]) {
          r.i2 = 0;
          ++r.i3;
        }
      }
    }
    return;
  }
  for (int64_t u = units.begin; u < units.end; ++u) {
    const int64_t part = u % parts;
    fn(RowOf(t, u / parts), boundary(part), boundary(part + 1));
  }
}

// Calls fn(row) for thread ith's share of t's rows.
template <typename Fn>
void ForEachRow(const Tensor& t, int ith, int nth, Fn fn) {
  const Range rows = Split(t.NumRows(), ith, nth);
  for (int64_t r = rows.begin; r < rows.end; ++r) fn(RowOf(t, r));
}

// ---------------------------------------------------------------------------
// Kernels.

void BinaryKernel(const Tensor& node, BinaryOp op, int ith, int nth) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  ForEachSegment(node, ith, nth,
                 [&](const RowIndex& r, int64_t c0, int64_t c1) {
                   const float* x = RowPtr<const float>(a, r);
                   const float* y = RowPtr<const float>(
                       b, r.i1 % b.ne[1], r.i2 % b.ne[2], r.i3 % b.ne[3]);
                   float* d = RowPtr<float>(node, r);
                   const int64_t bn = b.ne[0];
                   if (bn == node.ne[0]) {
                     vec::BinaryRow(op, x + c0, y + c0, d + c0, c1 - c0);
                   } else if (bn == 1) {
                     vec::BinaryRowScalar(op, x + c0, y[0], d + c0, c1 - c0);
                   } else {
                     for (int64_t c = c0; c < c1;) {
                       const int64_t bc = c % bn;
                       const int64_t len = std::min(c1 - c, bn - bc);
                       vec::BinaryRow(op, x + c, y + bc, d + c, len);
                       c += len;
                     }
                   }
                 });
}

template <typename RowFn>
void UnaryKernel(const Tensor& node, int ith, int nth, RowFn row_fn) {
  const Tensor& a = *node.src[0];
  ForEachSegment(node, ith, nth,
                 [&](const RowIndex& r, int64_t c0, int64_t c1) {
                   row_fn(RowPtr<const float>(a, r) + c0,
                          RowPtr<float>(node, r) + c0, c1 - c0);
                 });
}

void NormKernel(const Tensor& node, bool center, int ith, int nth) {
  const Tensor& a = *node.src[0];
  const int64_t n = node.ne[0];
  const double eps = node.ParamF32(0);
  ForEachRow(node, ith, nth, [&](const RowIndex& r) {
    const float* x = RowPtr<const float>(a, r);
    float* d = RowPtr<float>(node, r);
    const float mean =
        center ? static_cast<float>(static_cast<double>(vec::SumRow(x, n)) /
                                    static_cast<double>(n))
               : 0.0f;
    const double sum_sq = vec::SumSquaresRow(x, mean, n);
    const auto inv = static_cast<float>(
        1.0 / std::sqrt(sum_sq / static_cast<double>(n) + eps));
    vec::AffineRow(x, mean, inv, d, n);
  });
}

void SoftMaxKernel(const Tensor& node, int ith, int nth) {
  const Tensor& a = *node.src[0];
  const Tensor* mask = node.src[1];
  const int64_t n = node.ne[0];
  const float scale = node.ParamF32(0);
  ForEachRow(node, ith, nth, [&](const RowIndex& r) {
    const float* x = RowPtr<const float>(a, r);
    float* d = RowPtr<float>(node, r);
    const float* m = mask == nullptr
                         ? nullptr
                         : RowPtr<const float>(*mask, r.i1, r.i2 % mask->ne[2],
                                               r.i3 % mask->ne[3]);
    // Row-wise in place: each pass reads an element before writing it.
    const float max = vec::ScaleMaskMaxRow(x, m, scale, d, n);
    if (max == -std::numeric_limits<float>::infinity()) {
      // Fully masked row: NaN, like ggml and the reference.
      std::fill(d, d + n, std::numeric_limits<float>::quiet_NaN());
      return;
    }
    const float sum = vec::ExpSubRow(d, max, n);
    vec::ScaleRow(d, 1.0f / sum, d, n);
  });
}

// Per-thread rope scratch, for half = n_dims / 2 pairs: each pair's
// frequency (double), then one token's reduced angles, sin and cos (half
// floats each) and the interleaved cos2 / nsin2 rows (n_dims floats each).
struct RopeScratch {
  double* theta;
  float* angle;
  float* sin;
  float* cos;
  float* cos2;
  float* nsin2;
};

size_t RopeScratchBytesPerThread(const Tensor& node) {
  const size_t half = static_cast<size_t>(node.ParamI32(0)) / 2;
  return RoundUpToScratchAlignment(half * sizeof(double)) +
         RoundUpToScratchAlignment(7 * half * sizeof(float));
}

RopeScratch RopeScratchOf(const Tensor& node, int ith,
                          const KernelContext& ctx) {
  const size_t half = static_cast<size_t>(node.ParamI32(0)) / 2;
  std::byte* base = static_cast<std::byte*>(ctx.scratch) +
                    RopeScratchBytesPerThread(node) * static_cast<size_t>(ith);
  RopeScratch s;
  s.theta = reinterpret_cast<double*>(base);
  s.angle = reinterpret_cast<float*>(
      base + RoundUpToScratchAlignment(half * sizeof(double)));
  s.sin = s.angle + half;
  s.cos = s.sin + half;
  s.cos2 = s.cos + half;
  s.nsin2 = s.cos2 + 2 * half;
  return s;
}

void RopeKernel(const Tensor& node, int ith, int nth,
                const KernelContext& ctx) {
  const Tensor& a = *node.src[0];
  const Tensor& pos = *node.src[1];
  const int64_t n = node.ne[0];
  const int64_t n_dims = node.ParamI32(0);
  const int64_t half = n_dims / 2;
  const bool neox = node.ParamI32(1) == static_cast<int32_t>(RopeMode::kNeox);
  FERRY_CHECK(ctx.scratch_bytes >=
              RopeScratchBytesPerThread(node) * static_cast<size_t>(nth));
  const RopeScratch s = RopeScratchOf(node, ith, ctx);
  // theta_k = freq_scale * base^(-2k / n_dims), in double: a position times
  // theta_k is reduced modulo 2 pi before it becomes a float, so large
  // positions keep their accuracy.
  const double theta_scale = std::pow(static_cast<double>(node.ParamF32(2)),
                                      -2.0 / static_cast<double>(n_dims));
  double theta = node.ParamF32(3);
  const auto* factors = node.src[2] != nullptr
                            ? static_cast<const float*>(node.src[2]->data)
                            : nullptr;
  for (int64_t k = 0; k < half; ++k) {
    s.theta[k] = factors != nullptr ? theta / factors[k] : theta;
    theta *= theta_scale;
  }
  int64_t cached_token = -1;
  const auto* positions = static_cast<const int32_t*>(pos.data);

  ForEachRow(node, ith, nth, [&](const RowIndex& r) {
    if (r.i2 != cached_token) {
      // One token's angles: reduced in double, sin and cos in float.
      vec::RopeAnglesRow(positions[r.i2], s.theta, s.angle, half);
      vec::SinCosRow(s.angle, s.sin, s.cos, half);
      if (!neox) {
        for (int64_t k = 0; k < half; ++k) {
          s.cos2[2 * k] = s.cos2[2 * k + 1] = s.cos[k];
          s.nsin2[2 * k] = -s.sin[k];
          s.nsin2[2 * k + 1] = s.sin[k];
        }
      }
      cached_token = r.i2;
    }
    const float* x = RowPtr<const float>(a, r);
    float* d = RowPtr<float>(node, r);
    // In place is safe: each pair is read before it is written.
    if (neox) {
      vec::RopeNeoxRow(x, s.cos, s.sin, d, half);
    } else {
      vec::RopeNormalRow(x, s.cos2, s.nsin2, d, n_dims);
    }
    if (d != x && n > n_dims) {
      std::memcpy(d + n_dims, x + n_dims,
                  static_cast<size_t>(n - n_dims) * sizeof(float));
    }
  });
}

float ToF32(float x) { return x; }
float ToF32(Half x) { return F16ToF32(x); }
float ToF32(BFloat16 x) { return BF16ToF32(x); }

// Gathers row m of slice `slice` of a packed table: one element per panel
// row, kPanelWidth elements apart.
template <typename T>
void GatherPackedRow(const T* table, const cpu_internal::PackedLayout& layout,
                     int64_t slice, int64_t m, float* dst) {
  using cpu_internal::kPanelWidth;
  const T* column = table + slice * layout.SliceElements() +
                    (m / kPanelWidth) * kPanelWidth * layout.k() +
                    m % kPanelWidth;
  for (int64_t k = 0; k < layout.k(); ++k) {
    dst[k] = ToF32(column[k * kPanelWidth]);
  }
}

void GetRowsKernel(const Tensor& node, int ith, int nth) {
  const Tensor& a = *node.src[0];
  const Tensor& ids = *node.src[1];
  const int64_t n = node.ne[0];
  const bool packed = GetPackedState(a) == PackedState::kPacked;
  const cpu_internal::PackedLayout layout(a.dtype, a.ne);
  ForEachRow(node, ith, nth, [&](const RowIndex& r) {
    // ids [N, A2, A3, 1]: element (i1, i2, i3) names row i1 of batch (i2,
    // i3); its rows are contiguous (nb[0] = 4).
    const int32_t id = *reinterpret_cast<const int32_t*>(
        static_cast<const std::byte*>(ids.data) + r.i1 * ids.nb[0] +
        r.i2 * ids.nb[1] + r.i3 * ids.nb[2]);
    float* d = RowPtr<float>(node, r);
    if (id < 0 || id >= a.ne[1]) {
      std::fill(d, d + n, std::numeric_limits<float>::quiet_NaN());
      return;
    }
    if (packed && IsQuantized(a.dtype)) {
      // Rows in groups: gather the row's bytes back, then dequantize.
      const cpu_internal::QuantGroupLayout groups(a.dtype, a.ne);
      thread_local std::vector<std::byte> row;
      row.resize(static_cast<size_t>(groups.row_bytes()));
      const int64_t at = id + (r.i2 + r.i3 * a.ne[2]) * a.ne[1];
      groups.Unpack(a.data, static_cast<size_t>(at * groups.row_bytes()),
                    row.size(), row.data());
      (void)quant::DequantizeRow(quant::QuantTypeOf(a.dtype), row.data(), d, n);
      return;
    }
    if (packed) {
      const int64_t slice = r.i2 + r.i3 * a.ne[2];
      switch (a.dtype) {
        case DType::kF16:
          return GatherPackedRow(static_cast<const Half*>(a.data), layout,
                                 slice, id, d);
        case DType::kBF16:
          return GatherPackedRow(static_cast<const BFloat16*>(a.data), layout,
                                 slice, id, d);
        default:
          return GatherPackedRow(static_cast<const float*>(a.data), layout,
                                 slice, id, d);
      }
    }
    if (IsQuantized(a.dtype)) {
      // Cannot fail: n is a whole number of blocks (CheckSupported).
      (void)quant::DequantizeRow(quant::QuantTypeOf(a.dtype),
                                 RowPtr(a, id, r.i2, r.i3), d, n);
      return;
    }
    vec::ConvertRow(a.dtype, RowPtr(a, id, r.i2, r.i3), DType::kF32, d, n);
  });
}

// Thread ith writes its share of the N rows (ids are distinct, so threads
// never write the same row); rows with an id outside [0, R) are skipped.
void SetRowsKernel(const Tensor& node, int ith, int nth) {
  const Tensor& rows = *node.src[0];
  const Tensor& ids = *node.src[1];
  const Range range = Split(rows.ne[1], ith, nth);
  for (int64_t n = range.begin; n < range.end; ++n) {
    const int32_t id = *reinterpret_cast<const int32_t*>(
        static_cast<const std::byte*>(ids.data) + n * ids.nb[0]);
    if (id < 0 || id >= node.ne[1]) continue;
    vec::ConvertRow(DType::kF32, RowPtr(rows, n, 0, 0), node.dtype,
                    RowPtr(node, id, 0, 0), node.ne[0]);
  }
}

// A position in a tensor walked in logical order (i0 fastest).
struct Cursor {
  const Tensor* t;
  std::array<int64_t, kMaxDims> i;

  Cursor(const Tensor& tensor, int64_t flat) : t(&tensor) {
    for (int d = 0; d < kMaxDims; ++d) {
      i[d] = flat % tensor.ne[d];
      flat /= tensor.ne[d];
    }
  }
  std::byte* Address() const {
    return static_cast<std::byte*>(t->data) + i[0] * t->nb[0] +
           i[1] * t->nb[1] + i[2] * t->nb[2] + i[3] * t->nb[3];
  }
  int64_t LeftInRow() const { return t->ne[0] - i[0]; }
  // Moves `count` elements on; count <= LeftInRow().
  void Advance(int64_t count) {
    i[0] += count;
    for (int d = 0; d + 1 < kMaxDims && i[d] == t->ne[d]; ++d) {
      i[d] = 0;
      ++i[d + 1];
    }
  }
};

// Side of the square blocks TransposeCopy moves at a time: 16 x 16 f32 is
// 16 lines read and 16 written, all in L1.
constexpr int64_t kTransposeBlock = 16;

template <int kBytes>
void TransposeBlocks(const Tensor& src, const Tensor& dst, int j, int ith,
                     int nth) {
  // The two dimensions besides 0 and j, walked as the outer loop.
  int other[2];
  int n_other = 0;
  for (int d = 1; d < kMaxDims; ++d) {
    if (d != j) other[n_other++] = d;
  }
  const int64_t ne0 = dst.ne[0];
  const int64_t nej = dst.ne[j];
  const int64_t j_blocks = CeilDiv(nej, kTransposeBlock);
  const int64_t outer = dst.ne[other[0]] * dst.ne[other[1]];
  const Range units = Split(outer * j_blocks, ith, nth);
  for (int64_t u = units.begin; u < units.end; ++u) {
    const int64_t jb = (u % j_blocks) * kTransposeBlock;
    const int64_t o = u / j_blocks;
    const int64_t ip = o % dst.ne[other[0]];
    const int64_t iq = o / dst.ne[other[0]];
    const std::byte* s = static_cast<const std::byte*>(src.data) +
                         ip * src.nb[other[0]] + iq * src.nb[other[1]] +
                         jb * src.nb[j];
    std::byte* d = static_cast<std::byte*>(dst.data) + ip * dst.nb[other[0]] +
                   iq * dst.nb[other[1]] + jb * dst.nb[j];
    const int64_t j_len = std::min(kTransposeBlock, nej - jb);
    for (int64_t i0 = 0; i0 < ne0; i0 += kTransposeBlock) {
      const int64_t i_len = std::min(kTransposeBlock, ne0 - i0);
      for (int64_t a = 0; a < i_len; ++a) {
        const std::byte* sa = s + (i0 + a) * src.nb[0];
        std::byte* da = d + (i0 + a) * kBytes;
        for (int64_t b = 0; b < j_len; ++b) {
          std::memcpy(da + b * dst.nb[j], sa + b * kBytes, kBytes);
        }
      }
    }
  }
}

// Copies src into contiguous dst of the same shape and dtype when src's
// rows are strided (a permute moved another dimension j innermost, as
// attention's V transpose does): rows would read one element per cache
// line, so (dim 0, dim j) tiles are moved in square blocks instead.
// Returns false, doing nothing, when the layout is not of that kind.
bool TransposeCopy(const Tensor& src, const Tensor& dst, int ith, int nth) {
  const int64_t es = src.ElementSize();
  if (src.dtype != dst.dtype || (es != 2 && es != 4) || src.ne != dst.ne ||
      !dst.IsContiguous() || src.nb[0] == es || src.ne[0] < 2) {
    return false;
  }
  for (int j = 1; j < kMaxDims; ++j) {
    if (src.nb[j] != es || src.ne[j] < 2) continue;
    if (es == 4) {
      TransposeBlocks<4>(src, dst, j, ith, nth);
    } else {
      TransposeBlocks<2>(src, dst, j, ith, nth);
    }
    return true;
  }
  return false;
}

// Describes the same-shape copy src -> dst with fewer dimensions: drops
// those of size 1 and merges neighbours that are contiguous in both
// (src.nb[d] == src.nb[p] * ne[p], same for dst). A permuted view with a
// size-1 dimension innermost (attention's V transpose at one token) becomes
// one contiguous row instead of a row per element. src must not be empty.
void CollapseCopyDims(const Tensor& src, const Tensor& dst, Tensor& src_out,
                      Tensor& dst_out) {
  std::array<int64_t, kMaxDims> ne{}, src_nb{}, dst_nb{};
  int n = 0;
  for (int d = 0; d < kMaxDims; ++d) {
    if (src.ne[d] == 1) continue;
    if (n > 0 && src.nb[d] == src_nb[n - 1] * ne[n - 1] &&
        dst.nb[d] == dst_nb[n - 1] * ne[n - 1]) {
      ne[n - 1] *= src.ne[d];
      continue;
    }
    ne[n] = src.ne[d];
    src_nb[n] = src.nb[d];
    dst_nb[n] = dst.nb[d];
    ++n;
  }
  if (n == 0) {  // One element.
    ne[0] = 1;
    src_nb[0] = src.ElementSize();
    dst_nb[0] = dst.ElementSize();
    n = 1;
  }
  for (int d = n; d < kMaxDims; ++d) {
    ne[d] = 1;
    src_nb[d] = src_nb[d - 1] * ne[d - 1];
    dst_nb[d] = dst_nb[d - 1] * ne[d - 1];
  }
  for (auto [in, out, nb] : {std::tuple{&src, &src_out, &src_nb},
                             std::tuple{&dst, &dst_out, &dst_nb}}) {
    out->dtype = in->dtype;
    out->data = in->data;
    out->ne = ne;
    out->nb = *nb;
  }
}

void CopySameShape(const Tensor& src, const Tensor& dst, int ith, int nth) {
  if (TransposeCopy(src, dst, ith, nth)) return;
  const int64_t es = src.ElementSize();
  if (src.dtype == dst.dtype && src.nb[0] == es && dst.nb[0] == es) {
    // Rows of bytes (attention's head-major to token-major copy: 512 of
    // them per layer, 128 elements each): no per-row dispatch.
    ForEachSegment(
        dst, ith, nth, [&](const RowIndex& r, int64_t c0, int64_t c1) {
          std::memcpy(RowPtr(dst, r) + c0 * es, RowPtr(src, r) + c0 * es,
                      static_cast<size_t>((c1 - c0) * es));
        });
    return;
  }
  ForEachSegment(dst, ith, nth, [&](const RowIndex& r, int64_t c0, int64_t c1) {
    vec::ConvertStrided(src.dtype, RowPtr(src, r) + c0 * src.nb[0], src.nb[0],
                        dst.dtype, RowPtr(dst, r) + c0 * dst.nb[0], dst.nb[0],
                        c1 - c0);
  });
}

// Copies src's elements into dst (converting dtype) in logical order; the
// shapes may differ when the element counts match.
void CopyKernel(const Tensor& src, const Tensor& dst, int ith, int nth) {
  if (src.ne == dst.ne) {
    if (src.NumElements() == 0) return;
    Tensor src_c, dst_c;
    CollapseCopyDims(src, dst, src_c, dst_c);
    return CopySameShape(src_c, dst_c, ith, nth);
  }
  const int64_t total = dst.NumElements();
  if (total == 0) return;
  // Elements in runs of at least 256 (threads split at those boundaries).
  const int64_t units = std::max<int64_t>(1, total / 256);
  const Range u = Split(units, ith, nth);
  const int64_t begin = u.begin == 0 ? 0 : total * u.begin / units;
  const int64_t end = u.end == units ? total : total * u.end / units;
  if (begin >= end) return;
  Cursor s(src, begin);
  Cursor d(dst, begin);
  for (int64_t e = begin; e < end;) {
    const int64_t run = std::min({end - e, s.LeftInRow(), d.LeftInRow()});
    vec::ConvertStrided(src.dtype, s.Address(), src.nb[0], dst.dtype,
                        d.Address(), dst.nb[0], run);
    s.Advance(run);
    d.Advance(run);
    e += run;
  }
}

void ConcatKernel(const Tensor& node, int ith, int nth) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  const int dim = node.ParamI32(0);
  const int64_t elem = node.ElementSize();
  ForEachRow(node, ith, nth, [&](const RowIndex& r) {
    std::byte* d = RowPtr(node, r);
    if (dim == 0) {
      vec::ConvertStrided(a.dtype, RowPtr(a, r), a.nb[0], node.dtype, d, elem,
                          a.ne[0]);
      vec::ConvertStrided(b.dtype, RowPtr(b, r), b.nb[0], node.dtype,
                          d + a.ne[0] * elem, elem, b.ne[0]);
      return;
    }
    std::array<int64_t, kMaxDims> i = {0, r.i1, r.i2, r.i3};
    const Tensor* src = &a;
    if (i[dim] >= a.ne[dim]) {
      i[dim] -= a.ne[dim];
      src = &b;
    }
    vec::ConvertStrided(src->dtype, RowPtr(*src, i[1], i[2], i[3]), src->nb[0],
                        node.dtype, d, elem, node.ne[0]);
  });
}

}  // namespace

absl::Status CheckSupported(const Tensor& node) {
  if (node.op == Op::kNone || IsViewOp(node.op)) return absl::OkStatus();
  // Block types only as mul_mat's weight and get_rows' table.
  const bool reads_weight = node.op == Op::kMulMat || node.op == Op::kGetRows;
  for (const Tensor* t : std::initializer_list<const Tensor*>{
           &node, reads_weight ? nullptr : node.src[0], node.src[1],
           node.src[2], node.src[3]}) {
    if (t != nullptr && IsQuantized(t->dtype)) {
      return Unimplemented(node,
                           absl::StrCat("block dtype ", DTypeName(t->dtype),
                                        " is only supported as mul_mat's and "
                                        "get_rows' a"));
    }
  }
  FERRY_RETURN_IF_ERROR(CheckPackedOperands(node));
  switch (node.op) {
    case Op::kMulMat:
      FERRY_RETURN_IF_ERROR(CheckSources(node, 2));
      return CheckMulMat(node, *node.src[0], *node.src[1]);
    case Op::kAdd:
    case Op::kSub:
    case Op::kMul:
    case Op::kDiv:
      FERRY_RETURN_IF_ERROR(CheckSources(node, 2));
      return CheckBinary(node, *node.src[0], *node.src[1]);
    case Op::kScale:
    case Op::kRmsNorm:
    case Op::kNorm:
    case Op::kSilu:
    case Op::kGelu:
    case Op::kRelu:
    case Op::kTanh:
      FERRY_RETURN_IF_ERROR(CheckSources(node, 1));
      return CheckRowWise(node, *node.src[0]);
    case Op::kSoftMax:
      FERRY_RETURN_IF_ERROR(CheckSources(node, 1));
      return CheckSoftMax(node, *node.src[0], node.src[1]);
    case Op::kRope:
      FERRY_RETURN_IF_ERROR(CheckSources(node, 2));
      return CheckRope(node, *node.src[0], *node.src[1]);
    case Op::kGetRows:
      FERRY_RETURN_IF_ERROR(CheckSources(node, 2));
      return CheckGetRows(node, *node.src[0], *node.src[1]);
    case Op::kCpy:
      FERRY_RETURN_IF_ERROR(CheckSources(node, 2));
      return CheckCpy(node, *node.src[0], *node.src[1]);
    case Op::kSetRows:
      FERRY_RETURN_IF_ERROR(CheckSources(node, 3));
      return CheckSetRows(node, *node.src[0], *node.src[1], *node.src[2]);
    case Op::kCont:
      FERRY_RETURN_IF_ERROR(CheckSources(node, 1));
      if (node.dtype != node.src[0]->dtype) {
        return Invalid(node, "result must have a's dtype");
      }
      FERRY_RETURN_IF_ERROR(CheckSameShape(node, "a", *node.src[0]));
      return CheckContiguousResult(node);
    case Op::kConcat:
      FERRY_RETURN_IF_ERROR(CheckSources(node, 2));
      return CheckConcat(node, *node.src[0], *node.src[1]);
    case Op::kRangeAttention:
      return CheckRangeAttention(node);
    default:
      return Unimplemented(node, "op has no CPU kernel");
  }
}

size_t ScratchBytes(const Tensor& node, int nth) {
  switch (node.op) {
    case Op::kRope:
      return RopeScratchBytesPerThread(node) * static_cast<size_t>(nth);
    case Op::kMulMat:
      return MatMulScratchBytes(node, nth);
    case Op::kRangeAttention:
      return RangeAttentionScratchBytes(node, nth);
    default:
      return 0;
  }
}

void ComputeNode(const Tensor& node, int ith, int nth,
                 const KernelContext& ctx) {
  switch (node.op) {
    case Op::kMulMat:
      return MatMulNode(node, ith, nth, ctx);
    case Op::kAdd:
      return BinaryKernel(node, BinaryOp::kAdd, ith, nth);
    case Op::kSub:
      return BinaryKernel(node, BinaryOp::kSub, ith, nth);
    case Op::kMul:
      return BinaryKernel(node, BinaryOp::kMul, ith, nth);
    case Op::kDiv:
      return BinaryKernel(node, BinaryOp::kDiv, ith, nth);
    case Op::kScale: {
      const float s = node.ParamF32(0);
      return UnaryKernel(node, ith, nth,
                         [s](const float* x, float* d, int64_t n) {
                           vec::ScaleRow(x, s, d, n);
                         });
    }
    case Op::kSilu:
      return UnaryKernel(node, ith, nth, vec::SiluRow);
    case Op::kGelu:
      return UnaryKernel(node, ith, nth, vec::GeluRow);
    case Op::kRelu:
      return UnaryKernel(node, ith, nth, vec::ReluRow);
    case Op::kTanh:  // Soft-capping only: a scalar loop is enough.
      return UnaryKernel(node, ith, nth,
                         [](const float* x, float* d, int64_t n) {
                           for (int64_t i = 0; i < n; ++i)
                             d[i] = std::tanh(x[i]);
                         });
    case Op::kRmsNorm:
      return NormKernel(node, /*center=*/false, ith, nth);
    case Op::kNorm:
      return NormKernel(node, /*center=*/true, ith, nth);
    case Op::kSoftMax:
      return SoftMaxKernel(node, ith, nth);
    case Op::kRope:
      return RopeKernel(node, ith, nth, ctx);
    case Op::kGetRows:
      return GetRowsKernel(node, ith, nth);
    case Op::kCpy:
      return CopyKernel(*node.src[0], node, ith, nth);
    case Op::kCont:
      return CopyKernel(*node.src[0], node, ith, nth);
    case Op::kConcat:
      return ConcatKernel(node, ith, nth);
    case Op::kSetRows:
      return SetRowsKernel(node, ith, nth);
    case Op::kRangeAttention:
      return RangeAttentionNode(node, ith, nth, ctx);
    default:
      return;  // Leafs and views compute nothing.
  }
}

}  // namespace cpu_kernels
}  // namespace ferry
