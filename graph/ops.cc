#include "ferry/graph/ops.h"

#include <array>
#include <cmath>
#include <cstddef>
#include <initializer_list>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ferry/runtime/status_macros.h"

namespace ferry {
namespace {

using Shape = std::array<int64_t, kMaxDims>;

absl::Status Error(Op op, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(OpName(op), ": ", message));
}

// "a [4, 2, 1, 1] f32".
std::string Describe(absl::string_view arg, const Tensor& t) {
  return absl::StrCat(arg, " ", t.ShapeString());
}

absl::Status CheckNotNull(Op op, absl::string_view arg, const Tensor* t) {
  if (t == nullptr) return Error(op, absl::StrCat(arg, " is null"));
  return absl::OkStatus();
}

absl::Status CheckDType(Op op, absl::string_view arg, const Tensor& t,
                        std::initializer_list<DType> allowed) {
  for (DType dtype : allowed) {
    if (t.dtype == dtype) return absl::OkStatus();
  }
  std::string names;
  for (DType dtype : allowed) {
    absl::StrAppend(&names, names.empty() ? "" : "/", DTypeName(dtype));
  }
  return Error(op, absl::StrCat(Describe(arg, t), " must be ", names));
}

// Only mul_mat's weight and get_rows' table may be block-quantized.
absl::Status CheckNotQuantized(Op op, absl::string_view arg, const Tensor& t) {
  if (!IsQuantized(t.dtype)) return absl::OkStatus();
  return Error(op, absl::StrCat(Describe(arg, t),
                                ": quantized tensors are only accepted as "
                                "mul_mat's a and get_rows' a"));
}

// The types mul_mat's weight and get_rows' table may have.
constexpr std::initializer_list<DType> kWeightTypes = {
    DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ4_0,   DType::kQ4_1,
    DType::kQ5_0, DType::kQ5_1, DType::kQ8_0, DType::kQ2_K,   DType::kQ3_K,
    DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kIQ4_NL, DType::kIQ4_XS};

absl::Status CheckRows(Op op, absl::string_view arg, const Tensor& t) {
  if (!t.HasContiguousRows()) {
    return Error(
        op, absl::StrCat(Describe(arg, t), " needs contiguous rows (nb[0] = ",
                         t.ElementSize(), "), has nb = [",
                         absl::StrJoin(t.nb, ", "), "]; use cont first"));
  }
  return absl::OkStatus();
}

// A fresh contiguous result of `dtype` and `ne`.
Tensor NewResult(Op op, DType dtype, const Shape& ne) {
  Tensor t;
  t.op = op;
  t.dtype = dtype;
  t.ne = ne;
  t.nb = ContiguousStrides(dtype, ne);
  return t;
}

// Makes `t` alias the memory of `base` at `offset` bytes from base's start.
void AliasOf(Tensor& t, Tensor& base, int64_t offset) {
  Tensor* root = base.view_src != nullptr ? base.view_src : &base;
  t.view_src = root;
  t.view_offset = base.view_offset + offset;
  t.buffer = root->buffer;
  if (root->data != nullptr) {
    t.data = static_cast<std::byte*>(root->data) + t.view_offset;
  }
}

absl::StatusOr<Tensor*> Binary(Context& ctx, Op op, Tensor* a, Tensor* b) {
  FERRY_RETURN_IF_ERROR(CheckNotNull(op, "a", a));
  FERRY_RETURN_IF_ERROR(CheckNotNull(op, "b", b));
  FERRY_RETURN_IF_ERROR(CheckDType(op, "a", *a, {DType::kF32}));
  FERRY_RETURN_IF_ERROR(CheckDType(op, "b", *b, {DType::kF32}));
  if (!CanRepeat(*b, *a)) {
    return Error(op, absl::StrCat(Describe("b", *b), " cannot broadcast onto ",
                                  Describe("a", *a),
                                  " (a.ne[i] must be a multiple of b.ne[i])"));
  }
  FERRY_RETURN_IF_ERROR(CheckRows(op, "a", *a));
  FERRY_RETURN_IF_ERROR(CheckRows(op, "b", *b));
  Tensor t = NewResult(op, DType::kF32, a->ne);
  t.src = {a, b};
  return ctx.AddTensor(std::move(t));
}

absl::StatusOr<Tensor*> Unary(Context& ctx, Op op, Tensor* a) {
  FERRY_RETURN_IF_ERROR(CheckNotNull(op, "a", a));
  FERRY_RETURN_IF_ERROR(CheckDType(op, "a", *a, {DType::kF32}));
  FERRY_RETURN_IF_ERROR(CheckRows(op, "a", *a));
  Tensor t = NewResult(op, DType::kF32, a->ne);
  t.src[0] = a;
  return ctx.AddTensor(std::move(t));
}

absl::StatusOr<Tensor*> NormImpl(Context& ctx, Op op, Tensor* a, float eps) {
  if (!std::isfinite(eps) || eps < 0) {
    return Error(op, absl::StrCat("eps must be finite and >= 0, got ", eps));
  }
  FERRY_ASSIGN_OR_RETURN(Tensor * t, Unary(ctx, op, a));
  t->SetParamF32(0, eps);
  return t;
}

}  // namespace

absl::StatusOr<Tensor*> MulMat(Context& ctx, Tensor* a, Tensor* b) {
  constexpr Op kOp = Op::kMulMat;
  FERRY_RETURN_IF_ERROR(CheckNotNull(kOp, "a", a));
  FERRY_RETURN_IF_ERROR(CheckNotNull(kOp, "b", b));
  FERRY_RETURN_IF_ERROR(CheckDType(kOp, "a", *a, kWeightTypes));
  FERRY_RETURN_IF_ERROR(CheckDType(kOp, "b", *b, {DType::kF32}));
  const std::string both =
      absl::StrCat(Describe("a", *a), " and ", Describe("b", *b));
  if (a->ne[0] != b->ne[0]) {
    return Error(kOp, absl::StrCat(both, " need equal ne[0]"));
  }
  for (int i = 2; i < kMaxDims; ++i) {
    if (a->ne[i] <= 0 || b->ne[i] % a->ne[i] != 0) {
      return Error(kOp, absl::StrCat(both, ": b.ne[", i,
                                     "] must be a multiple of a.ne[", i, "]"));
    }
  }
  FERRY_RETURN_IF_ERROR(CheckRows(kOp, "a", *a));
  FERRY_RETURN_IF_ERROR(CheckRows(kOp, "b", *b));
  Tensor t =
      NewResult(kOp, DType::kF32, {a->ne[1], b->ne[1], b->ne[2], b->ne[3]});
  t.src = {a, b};
  return ctx.AddTensor(std::move(t));
}

absl::StatusOr<Tensor*> Add(Context& ctx, Tensor* a, Tensor* b) {
  return Binary(ctx, Op::kAdd, a, b);
}
absl::StatusOr<Tensor*> Sub(Context& ctx, Tensor* a, Tensor* b) {
  return Binary(ctx, Op::kSub, a, b);
}
absl::StatusOr<Tensor*> Mul(Context& ctx, Tensor* a, Tensor* b) {
  return Binary(ctx, Op::kMul, a, b);
}
absl::StatusOr<Tensor*> Div(Context& ctx, Tensor* a, Tensor* b) {
  return Binary(ctx, Op::kDiv, a, b);
}

absl::StatusOr<Tensor*> Scale(Context& ctx, Tensor* a, float s) {
  FERRY_ASSIGN_OR_RETURN(Tensor * t, Unary(ctx, Op::kScale, a));
  t->SetParamF32(0, s);
  return t;
}

absl::StatusOr<Tensor*> RmsNorm(Context& ctx, Tensor* a, float eps) {
  return NormImpl(ctx, Op::kRmsNorm, a, eps);
}

absl::StatusOr<Tensor*> Norm(Context& ctx, Tensor* a, float eps) {
  return NormImpl(ctx, Op::kNorm, a, eps);
}

absl::StatusOr<Tensor*> SoftMax(Context& ctx, Tensor* a, Tensor* mask,
                                float scale) {
  constexpr Op kOp = Op::kSoftMax;
  FERRY_RETURN_IF_ERROR(CheckNotNull(kOp, "a", a));
  FERRY_RETURN_IF_ERROR(CheckDType(kOp, "a", *a, {DType::kF32}));
  FERRY_RETURN_IF_ERROR(CheckRows(kOp, "a", *a));
  if (mask != nullptr) {
    FERRY_RETURN_IF_ERROR(CheckDType(kOp, "mask", *mask, {DType::kF32}));
    FERRY_RETURN_IF_ERROR(CheckRows(kOp, "mask", *mask));
    const std::string both =
        absl::StrCat(Describe("a", *a), " and ", Describe("mask", *mask));
    if (mask->ne[0] != a->ne[0]) {
      return Error(kOp, absl::StrCat(both, " need equal ne[0]"));
    }
    if (mask->ne[1] < a->ne[1]) {
      return Error(kOp, absl::StrCat(both, ": mask needs ne[1] >= a.ne[1]"));
    }
    for (int i = 2; i < kMaxDims; ++i) {
      if (mask->ne[i] <= 0 || a->ne[i] % mask->ne[i] != 0) {
        return Error(kOp,
                     absl::StrCat(both, ": a.ne[", i,
                                  "] must be a multiple of mask.ne[", i, "]"));
      }
    }
  }
  Tensor t = NewResult(kOp, DType::kF32, a->ne);
  t.src = {a, mask};
  t.SetParamF32(0, scale);
  return ctx.AddTensor(std::move(t));
}

absl::StatusOr<Tensor*> Rope(Context& ctx, Tensor* a, Tensor* pos, int n_dims,
                             RopeMode mode, float freq_base, float freq_scale,
                             Tensor* freq_factors) {
  constexpr Op kOp = Op::kRope;
  FERRY_RETURN_IF_ERROR(CheckNotNull(kOp, "a", a));
  FERRY_RETURN_IF_ERROR(CheckNotNull(kOp, "pos", pos));
  FERRY_RETURN_IF_ERROR(CheckDType(kOp, "a", *a, {DType::kF32}));
  FERRY_RETURN_IF_ERROR(CheckDType(kOp, "pos", *pos, {DType::kI32}));
  FERRY_RETURN_IF_ERROR(CheckRows(kOp, "a", *a));
  if (pos->ne[1] != 1 || pos->ne[2] != 1 || pos->ne[3] != 1 ||
      pos->ne[0] != a->ne[2] || !pos->HasContiguousRows()) {
    return Error(kOp, absl::StrCat(Describe("pos", *pos),
                                   " must be contiguous [a.ne[2]] for ",
                                   Describe("a", *a)));
  }
  if (n_dims <= 0 || n_dims % 2 != 0 || n_dims > a->ne[0]) {
    return Error(kOp, absl::StrCat("n_dims = ", n_dims,
                                   " must be even, > 0 and <= a.ne[0] for ",
                                   Describe("a", *a)));
  }
  if (mode != RopeMode::kNormal && mode != RopeMode::kNeox) {
    return Error(kOp, absl::StrCat("unknown mode ", static_cast<int>(mode)));
  }
  if (!std::isfinite(freq_base) || freq_base <= 0 ||
      !std::isfinite(freq_scale)) {
    return Error(kOp, absl::StrCat("freq_base = ", freq_base,
                                   " must be finite and > 0, freq_scale = ",
                                   freq_scale, " finite"));
  }
  if (freq_factors != nullptr) {
    FERRY_RETURN_IF_ERROR(
        CheckDType(kOp, "freq_factors", *freq_factors, {DType::kF32}));
    if (freq_factors->NumElements() != n_dims / 2 ||
        freq_factors->ne[0] != n_dims / 2 || !freq_factors->IsContiguous()) {
      return Error(kOp, absl::StrCat(Describe("freq_factors", *freq_factors),
                                     " must be contiguous [n_dims / 2 = ",
                                     n_dims / 2, "]"));
    }
  }
  Tensor t = NewResult(kOp, DType::kF32, a->ne);
  t.src = {a, pos, freq_factors};
  t.SetParamI32(0, n_dims);
  t.SetParamI32(1, static_cast<int32_t>(mode));
  t.SetParamF32(2, freq_base);
  t.SetParamF32(3, freq_scale);
  return ctx.AddTensor(std::move(t));
}

absl::StatusOr<Tensor*> GetRows(Context& ctx, Tensor* a, Tensor* ids) {
  constexpr Op kOp = Op::kGetRows;
  FERRY_RETURN_IF_ERROR(CheckNotNull(kOp, "a", a));
  FERRY_RETURN_IF_ERROR(CheckNotNull(kOp, "ids", ids));
  FERRY_RETURN_IF_ERROR(CheckDType(kOp, "a", *a, kWeightTypes));
  FERRY_RETURN_IF_ERROR(CheckDType(kOp, "ids", *ids, {DType::kI32}));
  FERRY_RETURN_IF_ERROR(CheckRows(kOp, "a", *a));
  FERRY_RETURN_IF_ERROR(CheckRows(kOp, "ids", *ids));
  if (ids->ne[1] != a->ne[2] || ids->ne[2] != a->ne[3] || ids->ne[3] != 1) {
    return Error(kOp,
                 absl::StrCat(Describe("a", *a), " and ", Describe("ids", *ids),
                              ": ids must be [N, a.ne[2], a.ne[3], 1]"));
  }
  Tensor t =
      NewResult(kOp, DType::kF32, {a->ne[0], ids->ne[0], a->ne[2], a->ne[3]});
  t.src = {a, ids};
  return ctx.AddTensor(std::move(t));
}

absl::StatusOr<Tensor*> Cpy(Context& ctx, Tensor* a, Tensor* b) {
  constexpr Op kOp = Op::kCpy;
  FERRY_RETURN_IF_ERROR(CheckNotNull(kOp, "a", a));
  FERRY_RETURN_IF_ERROR(CheckNotNull(kOp, "b", b));
  FERRY_RETURN_IF_ERROR(CheckNotQuantized(kOp, "a", *a));
  FERRY_RETURN_IF_ERROR(CheckNotQuantized(kOp, "b", *b));
  const bool a_float = GetDTypeTraits(a->dtype).is_float;
  const bool b_float = GetDTypeTraits(b->dtype).is_float;
  const std::string both =
      absl::StrCat(Describe("a", *a), " and ", Describe("b", *b));
  if (a->dtype != b->dtype && !(a_float && b_float)) {
    return Error(
        kOp, absl::StrCat(both, ": cannot convert between ",
                          DTypeName(a->dtype), " and ", DTypeName(b->dtype)));
  }
  if (a->NumElements() != b->NumElements()) {
    return Error(kOp, absl::StrCat(both, " need equal element counts"));
  }
  Tensor t;
  t.op = kOp;
  t.dtype = b->dtype;
  t.ne = b->ne;
  t.nb = b->nb;
  t.src = {a, b};
  AliasOf(t, *b, 0);
  t.name = absl::StrCat(b->name, " (copy of ", a->name, ")");
  return ctx.AddTensor(std::move(t));
}

absl::StatusOr<Tensor*> RangeAttention(Context& ctx, Tensor* q, Tensor* k,
                                       Tensor* v, Tensor* ranges, float scale) {
  constexpr Op kOp = Op::kRangeAttention;
  FERRY_RETURN_IF_ERROR(CheckNotNull(kOp, "q", q));
  FERRY_RETURN_IF_ERROR(CheckNotNull(kOp, "k", k));
  FERRY_RETURN_IF_ERROR(CheckNotNull(kOp, "v", v));
  FERRY_RETURN_IF_ERROR(CheckNotNull(kOp, "ranges", ranges));
  FERRY_RETURN_IF_ERROR(CheckDType(kOp, "q", *q, {DType::kF32}));
  FERRY_RETURN_IF_ERROR(CheckDType(kOp, "k", *k, {DType::kF32, DType::kF16}));
  FERRY_RETURN_IF_ERROR(CheckDType(kOp, "v", *v, {k->dtype}));
  for (auto [arg, t] :
       {std::pair<const char*, Tensor*>{"q", q}, {"k", k}, {"v", v}}) {
    FERRY_RETURN_IF_ERROR(CheckRows(kOp, arg, *t));
  }
  FERRY_RETURN_IF_ERROR(CheckDType(kOp, "ranges", *ranges, {DType::kI32}));
  const std::string all =
      absl::StrCat(Describe("q", *q), ", ", Describe("k", *k), ", ",
                   Describe("v", *v), ", ", Describe("ranges", *ranges));
  const int64_t hd = q->ne[0];
  if (q->ne[3] != 1 || k->ne[2] != 1 || k->ne[3] != 1 || k->ne != v->ne ||
      k->nb != v->nb) {
    return Error(kOp, absl::StrCat(all, ": q must be 3-D, k and v 2-D alike"));
  }
  if (hd < 1 || k->ne[0] % hd != 0 || k->ne[0] / hd < 1 ||
      q->ne[1] % (k->ne[0] / hd) != 0) {
    return Error(kOp, absl::StrCat(all,
                                   ": k.ne[0] must be q.ne[0] times a divisor "
                                   "of q.ne[1] (the kv heads)"));
  }
  if (ranges->ne[0] != 2 || ranges->ne[1] != q->ne[2] || ranges->ne[2] != 1 ||
      ranges->ne[3] != 1 || !ranges->IsContiguous()) {
    return Error(kOp,
                 absl::StrCat(all, ": ranges must be [2, q.ne[2]] contiguous"));
  }
  Tensor t = NewResult(kOp, DType::kF32, q->ne);
  t.src = {q, k, v, ranges};
  t.SetParamF32(0, scale);
  return ctx.AddTensor(std::move(t));
}

absl::StatusOr<Tensor*> SetRows(Context& ctx, Tensor* dst, Tensor* rows,
                                Tensor* ids) {
  constexpr Op kOp = Op::kSetRows;
  FERRY_RETURN_IF_ERROR(CheckNotNull(kOp, "dst", dst));
  FERRY_RETURN_IF_ERROR(CheckNotNull(kOp, "rows", rows));
  FERRY_RETURN_IF_ERROR(CheckNotNull(kOp, "ids", ids));
  FERRY_RETURN_IF_ERROR(
      CheckDType(kOp, "dst", *dst, {DType::kF32, DType::kF16, DType::kBF16}));
  FERRY_RETURN_IF_ERROR(CheckDType(kOp, "rows", *rows, {DType::kF32}));
  FERRY_RETURN_IF_ERROR(CheckDType(kOp, "ids", *ids, {DType::kI32}));
  FERRY_RETURN_IF_ERROR(CheckRows(kOp, "dst", *dst));
  FERRY_RETURN_IF_ERROR(CheckRows(kOp, "rows", *rows));
  FERRY_RETURN_IF_ERROR(CheckRows(kOp, "ids", *ids));
  const std::string all =
      absl::StrCat(Describe("dst", *dst), ", ", Describe("rows", *rows), ", ",
                   Describe("ids", *ids));
  if (dst->ne[2] != 1 || dst->ne[3] != 1 || rows->ne[2] != 1 ||
      rows->ne[3] != 1 || ids->ne[1] != 1 || ids->ne[2] != 1 ||
      ids->ne[3] != 1) {
    return Error(kOp, absl::StrCat(all, ": dst and rows must be 2-D, ids 1-D"));
  }
  if (rows->ne[0] != dst->ne[0] || rows->ne[1] != ids->ne[0]) {
    return Error(kOp,
                 absl::StrCat(all, ": rows must be [dst.ne[0], ids.ne[0]]"));
  }
  Tensor t;
  t.op = kOp;
  t.dtype = dst->dtype;
  t.ne = dst->ne;
  t.nb = dst->nb;
  t.src = {rows, ids, dst};
  AliasOf(t, *dst, 0);
  t.name = absl::StrCat(dst->name, " (rows set)");
  return ctx.AddTensor(std::move(t));
}

absl::StatusOr<Tensor*> Cont(Context& ctx, Tensor* a) {
  FERRY_RETURN_IF_ERROR(CheckNotNull(Op::kCont, "a", a));
  FERRY_RETURN_IF_ERROR(CheckNotQuantized(Op::kCont, "a", *a));
  Tensor t = NewResult(Op::kCont, a->dtype, a->ne);
  t.src[0] = a;
  t.name = absl::StrCat(a->name, " (cont)");
  return ctx.AddTensor(std::move(t));
}

absl::StatusOr<Tensor*> View4D(Context& ctx, Tensor* a, int64_t ne0,
                               int64_t ne1, int64_t ne2, int64_t ne3,
                               int64_t nb1, int64_t nb2, int64_t nb3,
                               int64_t offset) {
  constexpr Op kOp = Op::kView;
  FERRY_RETURN_IF_ERROR(CheckNotNull(kOp, "a", a));
  Tensor t;
  t.op = kOp;
  t.dtype = a->dtype;
  t.ne = {ne0, ne1, ne2, ne3};
  t.nb = {a->ElementSize(), nb1, nb2, nb3};
  const int64_t element = a->ElementSize();
  const auto describe_view = [&] {
    return absl::StrCat("view ", t.ShapeString(), " nb = [",
                        absl::StrJoin(t.nb, ", "), "] offset ", offset, " of ",
                        Describe("a", *a));
  };
  if (DTypeBlockSize(a->dtype) != 1) {
    return Error(kOp,
                 absl::StrCat(describe_view(), ": block types unsupported"));
  }
  for (int i = 0; i < kMaxDims; ++i) {
    if (t.ne[i] < 0 || t.nb[i] < 0 || t.nb[i] % element != 0) {
      return Error(
          kOp,
          absl::StrCat(describe_view(),
                       ": ne must be >= 0 and nb >= 0 multiples of ", element));
    }
  }
  if (offset < 0 || offset % element != 0) {
    return Error(
        kOp, absl::StrCat(describe_view(),
                          ": offset must be >= 0 and a multiple of ", element));
  }
  // Overflow-safe bound: every term is checked before it is added.
  int64_t end = offset;
  if (t.NumElements() > 0) {
    end += element;
    for (int i = 0; i < kMaxDims; ++i) {
      int64_t term;
      if (__builtin_mul_overflow(t.ne[i] - 1, t.nb[i], &term) ||
          __builtin_add_overflow(end, term, &end)) {
        end = INT64_MAX;
        break;
      }
    }
  }
  if (end > a->NumBytes()) {
    return Error(kOp, absl::StrCat(describe_view(), ": ends at byte ", end,
                                   ", past a's ", a->NumBytes(), " bytes"));
  }
  t.src[0] = a;
  AliasOf(t, *a, offset);
  t.name = absl::StrCat(a->name, " (view)");
  return ctx.AddTensor(std::move(t));
}

namespace {

// Stride of the dim after one of `ne` elements at stride `nb`; saturates so
// that absurd user input fails View4D's bounds check instead of overflowing.
// Only used for dims of size 1, whose stride no element uses.
int64_t NextStride(int64_t nb, int64_t ne) {
  int64_t result;
  if (__builtin_mul_overflow(nb, ne, &result)) return 0;
  return result;
}

}  // namespace

absl::StatusOr<Tensor*> View1D(Context& ctx, Tensor* a, int64_t ne0,
                               int64_t offset) {
  if (a == nullptr) return Error(Op::kView, "a is null");
  const int64_t nb1 = NextStride(ne0, a->ElementSize());
  return View4D(ctx, a, ne0, 1, 1, 1, nb1, nb1, nb1, offset);
}

absl::StatusOr<Tensor*> View2D(Context& ctx, Tensor* a, int64_t ne0,
                               int64_t ne1, int64_t nb1, int64_t offset) {
  const int64_t nb2 = NextStride(nb1, ne1);
  return View4D(ctx, a, ne0, ne1, 1, 1, nb1, nb2, nb2, offset);
}

absl::StatusOr<Tensor*> View3D(Context& ctx, Tensor* a, int64_t ne0,
                               int64_t ne1, int64_t ne2, int64_t nb1,
                               int64_t nb2, int64_t offset) {
  return View4D(ctx, a, ne0, ne1, ne2, 1, nb1, nb2, NextStride(nb2, ne2),
                offset);
}

absl::StatusOr<Tensor*> Reshape(Context& ctx, Tensor* a,
                                absl::Span<const int64_t> shape) {
  constexpr Op kOp = Op::kReshape;
  FERRY_RETURN_IF_ERROR(CheckNotNull(kOp, "a", a));
  const std::string target = absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
  if (shape.size() > static_cast<size_t>(kMaxDims)) {
    return Error(kOp, absl::StrCat(Describe("a", *a), " to ", target,
                                   ": at most 4 dims"));
  }
  if (!a->IsContiguous()) {
    return Error(kOp, absl::StrCat(Describe("a", *a),
                                   " is not contiguous; use cont first"));
  }
  Shape ne = {1, 1, 1, 1};
  int64_t count = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0 || __builtin_mul_overflow(count, shape[i], &count)) {
      return Error(kOp, absl::StrCat(Describe("a", *a), " to ", target,
                                     ": invalid dims"));
    }
    ne[i] = shape[i];
  }
  if (count != a->NumElements() || ne[0] % DTypeBlockSize(a->dtype) != 0) {
    return Error(kOp, absl::StrCat(Describe("a", *a), " to ", target,
                                   ": element counts differ (",
                                   a->NumElements(), " vs ", count, ")"));
  }
  Tensor t = NewResult(kOp, a->dtype, ne);
  t.src[0] = a;
  AliasOf(t, *a, 0);
  t.name = absl::StrCat(a->name, " (reshaped)");
  return ctx.AddTensor(std::move(t));
}

namespace {

absl::StatusOr<Tensor*> PermuteImpl(Context& ctx, Op op, Tensor* a,
                                    const std::array<int, kMaxDims>& axes,
                                    absl::string_view suffix) {
  FERRY_RETURN_IF_ERROR(CheckNotNull(op, "a", a));
  std::array<bool, kMaxDims> seen = {};
  for (int axis : axes) {
    if (axis < 0 || axis >= kMaxDims || seen[axis]) {
      return Error(op, absl::StrCat("axes (", absl::StrJoin(axes, ", "),
                                    ") are not a permutation of 0..3 for ",
                                    Describe("a", *a)));
    }
    seen[axis] = true;
  }
  if (IsQuantized(a->dtype) && axes[0] != 0) {
    return Error(op, absl::StrCat(Describe("a", *a),
                                  ": a block type's dim 0 cannot move"));
  }
  Tensor t;
  t.op = op;
  t.dtype = a->dtype;
  for (int i = 0; i < kMaxDims; ++i) {
    t.ne[axes[i]] = a->ne[i];
    t.nb[axes[i]] = a->nb[i];
    t.SetParamI32(i, axes[i]);
  }
  t.src[0] = a;
  AliasOf(t, *a, 0);
  t.name = absl::StrCat(a->name, suffix);
  return ctx.AddTensor(std::move(t));
}

}  // namespace

absl::StatusOr<Tensor*> Permute(Context& ctx, Tensor* a, int axis0, int axis1,
                                int axis2, int axis3) {
  return PermuteImpl(ctx, Op::kPermute, a, {axis0, axis1, axis2, axis3},
                     " (permuted)");
}

absl::StatusOr<Tensor*> Transpose(Context& ctx, Tensor* a) {
  return PermuteImpl(ctx, Op::kTranspose, a, {1, 0, 2, 3}, " (transposed)");
}

absl::StatusOr<Tensor*> Silu(Context& ctx, Tensor* a) {
  return Unary(ctx, Op::kSilu, a);
}
absl::StatusOr<Tensor*> Gelu(Context& ctx, Tensor* a) {
  return Unary(ctx, Op::kGelu, a);
}
absl::StatusOr<Tensor*> Relu(Context& ctx, Tensor* a) {
  return Unary(ctx, Op::kRelu, a);
}
absl::StatusOr<Tensor*> Tanh(Context& ctx, Tensor* a) {
  return Unary(ctx, Op::kTanh, a);
}

absl::StatusOr<Tensor*> Concat(Context& ctx, Tensor* a, Tensor* b, int dim) {
  constexpr Op kOp = Op::kConcat;
  FERRY_RETURN_IF_ERROR(CheckNotNull(kOp, "a", a));
  FERRY_RETURN_IF_ERROR(CheckNotNull(kOp, "b", b));
  const std::string both =
      absl::StrCat(Describe("a", *a), " and ", Describe("b", *b));
  if (dim < 0 || dim >= kMaxDims) {
    return Error(kOp, absl::StrCat(both, ": dim ", dim, " not in [0, 3]"));
  }
  if (a->dtype != b->dtype) {
    return Error(kOp, absl::StrCat(both, " need equal dtypes"));
  }
  FERRY_RETURN_IF_ERROR(CheckNotQuantized(kOp, "a", *a));
  Shape ne = a->ne;
  for (int i = 0; i < kMaxDims; ++i) {
    if (i != dim && a->ne[i] != b->ne[i]) {
      return Error(kOp, absl::StrCat(both, " need equal ne[", i,
                                     "] to concat along dim ", dim));
    }
  }
  ne[dim] += b->ne[dim];
  Tensor t = NewResult(kOp, a->dtype, ne);
  t.src = {a, b};
  t.SetParamI32(0, dim);
  return ctx.AddTensor(std::move(t));
}

}  // namespace ferry
