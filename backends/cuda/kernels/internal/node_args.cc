#include "ferry/backends/cuda/kernels/internal/node_args.h"

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "ferry/backends/cuda/kernels/internal/desc.h"
#include "ferry/graph/dtype.h"
#include "ferry/graph/op.h"
#include "ferry/graph/ops.h"
#include "ferry/graph/tensor.h"

namespace ferry {
namespace cuda_kernels_internal {
namespace {

static_assert(
    static_cast<int>(ElemType::kF32) == static_cast<int>(DType::kF32) &&
    static_cast<int>(ElemType::kF16) == static_cast<int>(DType::kF16) &&
    static_cast<int>(ElemType::kBF16) == static_cast<int>(DType::kBF16) &&
    static_cast<int>(ElemType::kI32) == static_cast<int>(DType::kI32) &&
    static_cast<int>(ElemType::kQ4_0) == static_cast<int>(DType::kQ4_0) &&
    static_cast<int>(ElemType::kQ4_1) == static_cast<int>(DType::kQ4_1) &&
    static_cast<int>(ElemType::kQ5_0) == static_cast<int>(DType::kQ5_0) &&
    static_cast<int>(ElemType::kQ5_1) == static_cast<int>(DType::kQ5_1) &&
    static_cast<int>(ElemType::kQ8_0) == static_cast<int>(DType::kQ8_0) &&
    static_cast<int>(ElemType::kQ2_K) == static_cast<int>(DType::kQ2_K) &&
    static_cast<int>(ElemType::kQ3_K) == static_cast<int>(DType::kQ3_K) &&
    static_cast<int>(ElemType::kQ4_K) == static_cast<int>(DType::kQ4_K) &&
    static_cast<int>(ElemType::kQ5_K) == static_cast<int>(DType::kQ5_K) &&
    static_cast<int>(ElemType::kQ6_K) == static_cast<int>(DType::kQ6_K) &&
    static_cast<int>(ElemType::kIQ4_NL) == static_cast<int>(DType::kIQ4_NL) &&
    static_cast<int>(ElemType::kIQ4_XS) == static_cast<int>(DType::kIQ4_XS));

int64_t AlignUp(int64_t bytes) {
  const auto alignment = static_cast<int64_t>(kScratchAlignment);
  return (bytes + alignment - 1) / alignment * alignment;
}

int64_t ElemSize(ElemType type) {
  return type == ElemType::kF16 || type == ElemType::kBF16 ? 2 : 4;
}

// Where mul_mat's operand copies go in its scratch: b's at 0, a's after.
struct MulMatScratch {
  bool copy_a = false;
  bool copy_b = false;
  int64_t b_bytes = 0;  // Aligned.
  int64_t a_bytes = 0;  // Aligned.
};

// The type cuBLAS multiplies a mul_mat's a and b in: a's, or f16 for a
// block-quantized a (dequantized first).
DType GemmType(const Tensor& a) {
  return IsQuantized(a.dtype) ? DType::kF16 : a.dtype;
}

MulMatScratch LayOutMulMatScratch(const Tensor& node) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  const int64_t k = a.ne[0];
  MulMatScratch s;
  if (node.NumElements() == 0 || k == 0 || UsesQuantDot(node)) return s;
  if (IsQuantized(a.dtype)) {
    const int64_t half = DTypeBlockBytes(DType::kF16);
    s.copy_a = true;
    s.copy_b = true;
    s.b_bytes = AlignUp(b.NumElements() * half);
    s.a_bytes = AlignUp(a.NumElements() * half);
    return s;
  }
  // cuBLAS wants ld >= k: rows that overlap (views with a row stride below
  // k, even 0) are made contiguous first. A single row's stride is unused.
  s.copy_a = a.ne[1] > 1 && a.nb[1] < k * a.ElementSize();
  s.copy_b =
      a.dtype != DType::kF32 || (b.ne[1] > 1 && b.nb[1] < k * b.ElementSize());
  if (s.copy_b) {
    s.b_bytes = AlignUp(b.NumElements() * a.ElementSize());
  }
  if (s.copy_a) s.a_bytes = AlignUp(a.NumElements() * a.ElementSize());
  return s;
}

// A contiguous tensor of `type` and shape `ne` at `data`.
TensorDesc ContiguousDesc(void* data, ElemType type,
                          const std::array<int64_t, kMaxDims>& ne) {
  TensorDesc d;
  d.data = data;
  d.type = type;
  int64_t stride = ElemSize(type);
  for (int i = 0; i < kMaxDims; ++i) {
    d.ne[i] = ne[i];
    d.nb[i] = stride;
    stride *= ne[i];
  }
  return d;
}

// True if element e of `t` lies at byte e * element size: a contiguous
// layout (dimensions of extent 1 may have any stride).
bool IsContiguous(const TensorDesc& t) {
  int64_t expected = ElemSize(t.type);
  for (int i = 0; i < kMaxDims; ++i) {
    if (t.ne[i] != 1 && t.nb[i] != expected) return false;
    expected *= t.ne[i];
  }
  return true;
}

bool SameShape(const TensorDesc& a, const TensorDesc& b) {
  for (int i = 0; i < kMaxDims; ++i) {
    if (a.ne[i] != b.ne[i]) return false;
  }
  return true;
}

// How element e of a result shaped like `dst` is found in `t`.
Addressing AddressingOf(const TensorDesc& t, const TensorDesc& dst) {
  if (SameShape(t, dst) && IsContiguous(t)) return Addressing::kLinear;
  if (t.ne[0] == dst.ne[0] && t.ne[1] == 1 && t.ne[2] == 1 && t.ne[3] == 1 &&
      (t.ne[0] == 1 || t.nb[0] == ElemSize(t.type))) {
    return Addressing::kRow;
  }
  return Addressing::kGeneral;
}

bool FitsInt(int64_t v) {
  return v >= 0 && v <= std::numeric_limits<int32_t>::max();
}

// Appends batch offsets one at a time, merging runs with constant strides
// (and equal element-size multiples) into strided batched calls.
class BatchRuns {
 public:
  BatchRuns(int64_t a_size, int64_t b_size, std::vector<GemmBatch>* out)
      : a_size_(a_size), b_size_(b_size), out_(out) {}

  void Add(int64_t a_off, int64_t b_off, int64_t c_off) {
    if (!out_->empty() && Extends(out_->back(), a_off, b_off, c_off)) return;
    GemmBatch batch;
    batch.a_offset = a_off;
    batch.b_offset = b_off;
    batch.c_offset = c_off;
    out_->push_back(batch);
  }

 private:
  // Strides in elements for the byte step `delta`, if it is a non-negative
  // multiple of `size`.
  static std::optional<int64_t> Stride(int64_t delta, int64_t size) {
    if (delta < 0 || delta % size != 0) return std::nullopt;
    return delta / size;
  }

  bool Extends(GemmBatch& run, int64_t a_off, int64_t b_off,
               int64_t c_off) const {
    if (run.count == std::numeric_limits<int32_t>::max()) return false;
    if (run.count == 1) {
      const std::optional<int64_t> sa = Stride(a_off - run.a_offset, a_size_);
      const std::optional<int64_t> sb = Stride(b_off - run.b_offset, b_size_);
      const std::optional<int64_t> sc =
          Stride(c_off - run.c_offset, sizeof(float));
      if (!sa || !sb || !sc) return false;
      run.stride_a = *sa;
      run.stride_b = *sb;
      run.stride_c = *sc;
      run.count = 2;
      return true;
    }
    const int64_t n = run.count;
    if (a_off != run.a_offset + n * run.stride_a * a_size_ ||
        b_off != run.b_offset + n * run.stride_b * b_size_ ||
        c_off != run.c_offset +
                     n * run.stride_c * static_cast<int64_t>(sizeof(float))) {
      return false;
    }
    ++run.count;
    return true;
  }

  int64_t a_size_;
  int64_t b_size_;
  std::vector<GemmBatch>* out_;
};

}  // namespace

TensorDesc Describe(const Tensor& t) {
  TensorDesc d;
  d.data = t.data;
  d.type = static_cast<ElemType>(t.dtype);
  for (int i = 0; i < kMaxDims; ++i) {
    d.ne[i] = t.ne[i];
    d.nb[i] = t.nb[i];
  }
  return d;
}

bool UsesQuantDot(const Tensor& node) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  return IsQuantized(a.dtype) && b.ne[1] <= kQuantDotMaxColumns &&
         node.NumElements() > 0;
}

QuantDotArgs MakeQuantDotArgs(const Tensor& node) {
  QuantDotArgs args;
  args.a = Describe(*node.src[0]);
  args.b = Describe(*node.src[1]);
  args.dst = Describe(node);
  args.r2 = args.b.ne[2] / args.a.ne[2];
  args.r3 = args.b.ne[3] / args.a.ne[3];
  return args;
}

size_t MulMatScratchBytes(const Tensor& node) {
  const MulMatScratch s = LayOutMulMatScratch(node);
  return static_cast<size_t>(s.b_bytes + s.a_bytes);
}

size_t RopeScratchBytes(const Tensor& node) {
  const int64_t half = node.ParamI32(0) / 2;
  const int64_t positions = node.src[1]->ne[0];
  return static_cast<size_t>(
      AlignUp(2 * half * positions * static_cast<int64_t>(sizeof(float))));
}

absl::StatusOr<GemmPlan> PlanMulMat(const Tensor& node, void* scratch,
                                    size_t scratch_bytes) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  const int64_t k = a.ne[0];
  const int64_t m = a.ne[1];
  const int64_t n = b.ne[1];
  GemmPlan plan;
  plan.c = static_cast<float*>(node.data);
  plan.output_bytes = node.NumElements() * static_cast<int64_t>(sizeof(float));
  if (node.NumElements() == 0) return plan;
  if (k == 0) {
    plan.zero_output = true;
    return plan;
  }
  const MulMatScratch layout = LayOutMulMatScratch(node);
  if (scratch_bytes < static_cast<size_t>(layout.a_bytes + layout.b_bytes) ||
      (layout.a_bytes + layout.b_bytes > 0 && scratch == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda kernels: mul_mat needs ", layout.a_bytes + layout.b_bytes,
        " scratch bytes, got ", scratch_bytes, " (", node.DebugString(), ")"));
  }
  plan.ab_type = static_cast<ElemType>(GemmType(a));
  const int64_t ab_size = DTypeBlockBytes(GemmType(a));
  auto* scratch_bytes_ptr = static_cast<std::byte*>(scratch);

  // B operand: b itself, or its conversion to a's type in scratch.
  std::array<int64_t, kMaxDims> b_nb = b.nb;
  plan.b = b.data;
  if (layout.copy_b) {
    CopyArgs copy = MakeCopyArgs(
        Describe(b), ContiguousDesc(scratch_bytes_ptr, plan.ab_type, b.ne));
    for (int i = 0; i < kMaxDims; ++i) b_nb[i] = copy.dst.nb[i];
    plan.b = scratch_bytes_ptr;
    plan.copy_b = copy;
  }
  // A operand: a itself, or a contiguous copy in scratch.
  std::array<int64_t, kMaxDims> a_nb = a.nb;
  plan.a = a.data;
  if (layout.copy_a) {
    std::byte* at = scratch_bytes_ptr + layout.b_bytes;
    const TensorDesc to = ContiguousDesc(at, plan.ab_type, a.ne);
    for (int i = 0; i < kMaxDims; ++i) a_nb[i] = to.nb[i];
    plan.a = at;
    if (IsQuantized(a.dtype)) {
      DequantArgs dequant;
      dequant.src = Describe(a);
      dequant.dst = to;
      dequant.index = MakeElementIndex(to.ne);
      plan.dequant_a = dequant;
    } else {
      plan.copy_a = MakeCopyArgs(Describe(a), to);
    }
  }

  // Column-major view: A = a's rows as k x m (ld = row stride), op T;
  // B = b's rows as k x n, op N; C = m x n with ldc = m, i.e. the row-major
  // [n][m] result. A single row's stride is never read: use k.
  const int64_t lda = m == 1 ? k : a_nb[1] / ab_size;
  const int64_t ldb = n == 1 ? k : b_nb[1] / ab_size;
  const int64_t ldc = m;
  for (const auto& [name, value] : {std::pair<const char*, int64_t>{"m", m},
                                    {"n", n},
                                    {"k", k},
                                    {"lda", lda},
                                    {"ldb", ldb},
                                    {"ldc", ldc}}) {
    if (!FitsInt(value)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cuda kernels: mul_mat: ", name, " = ", value,
          " does not fit cuBLAS's int (", node.DebugString(), ")"));
    }
  }
  plan.m = static_cast<int32_t>(m);
  plan.n = static_cast<int32_t>(n);
  plan.k = static_cast<int32_t>(k);
  plan.lda = static_cast<int32_t>(lda);
  plan.ldb = static_cast<int32_t>(ldb);
  plan.ldc = static_cast<int32_t>(ldc);

  // Batches (i2, i3) of b, i2 fastest; a's batch is (i2 / r2, i3 / r3).
  const int64_t r2 = b.ne[2] / a.ne[2];
  const int64_t r3 = b.ne[3] / a.ne[3];
  BatchRuns runs(ab_size, ab_size, &plan.batches);
  for (int64_t i3 = 0; i3 < b.ne[3]; ++i3) {
    for (int64_t i2 = 0; i2 < b.ne[2]; ++i2) {
      runs.Add((i2 / r2) * a_nb[2] + (i3 / r3) * a_nb[3],
               i2 * b_nb[2] + i3 * b_nb[3], i2 * node.nb[2] + i3 * node.nb[3]);
    }
  }
  return plan;
}

BinaryArgs MakeBinaryArgs(const Tensor& node) {
  BinaryArgs args;
  args.a = Describe(*node.src[0]);
  args.b = Describe(*node.src[1]);
  args.dst = Describe(node);
  args.index = MakeElementIndex(args.dst.ne);
  args.dst_linear = IsContiguous(args.dst);
  args.a_at = AddressingOf(args.a, args.dst);
  if (args.a_at == Addressing::kRow) args.a_at = Addressing::kGeneral;
  args.b_at = AddressingOf(args.b, args.dst);
  for (int i = 0; i < kMaxDims; ++i) {
    args.b_div[i] = MakeFastDiv(static_cast<uint32_t>(
        args.index.fast && args.b.ne[i] > 0 ? args.b.ne[i] : 1));
  }
  switch (node.op) {
    case Op::kSub:
      args.kind = BinaryKind::kSub;
      break;
    case Op::kMul:
      args.kind = BinaryKind::kMul;
      break;
    case Op::kDiv:
      args.kind = BinaryKind::kDiv;
      break;
    default:
      args.kind = BinaryKind::kAdd;
      break;
  }
  return args;
}

UnaryArgs MakeUnaryArgs(const Tensor& node) {
  UnaryArgs args;
  args.a = Describe(*node.src[0]);
  args.dst = Describe(node);
  args.index = MakeElementIndex(args.dst.ne);
  args.linear = IsContiguous(args.a) && IsContiguous(args.dst);
  switch (node.op) {
    case Op::kSilu:
      args.kind = UnaryKind::kSilu;
      break;
    case Op::kGelu:
      args.kind = UnaryKind::kGelu;
      break;
    case Op::kRelu:
      args.kind = UnaryKind::kRelu;
      break;
    case Op::kTanh:
      args.kind = UnaryKind::kTanh;
      break;
    default:
      args.kind = UnaryKind::kScale;
      args.scale = node.ParamF32(0);
      break;
  }
  return args;
}

NormArgs MakeNormArgs(const Tensor& node) {
  NormArgs args;
  args.a = Describe(*node.src[0]);
  args.dst = Describe(node);
  args.center = node.op == Op::kNorm;
  args.eps = node.ParamF32(0);
  return args;
}

SoftMaxArgs MakeSoftMaxArgs(const Tensor& node) {
  SoftMaxArgs args;
  args.a = Describe(*node.src[0]);
  args.dst = Describe(node);
  if (node.src[1] != nullptr) {
    args.mask = Describe(*node.src[1]);
    args.has_mask = true;
  }
  args.scale = node.ParamF32(0);
  return args;
}

absl::StatusOr<RopeArgs> MakeRopeArgs(const Tensor& node, void* scratch,
                                      size_t scratch_bytes) {
  RopeArgs args;
  args.a = Describe(*node.src[0]);
  args.pos = Describe(*node.src[1]);
  args.dst = Describe(node);
  args.n_dims = node.ParamI32(0);
  args.neox = node.ParamI32(1) == static_cast<int32_t>(RopeMode::kNeox);
  args.freq_base = node.ParamF32(2);
  args.freq_scale = node.ParamF32(3);
  const int64_t half = args.n_dims / 2;
  const int64_t positions = node.src[1]->ne[0];
  const size_t needed = RopeScratchBytes(node);
  if (scratch_bytes < needed || (needed > 0 && scratch == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda kernels: rope needs ", needed, " scratch bytes, got ",
        scratch_bytes, " (", node.DebugString(), ")"));
  }
  args.table =
      ContiguousDesc(scratch, ElemType::kF32, {2 * half, positions, 1, 1});
  const int64_t table_shape[4] = {half, positions, 1, 1};
  args.table_index = MakeElementIndex(table_shape);
  return args;
}

GetRowsArgs MakeGetRowsArgs(const Tensor& node) {
  GetRowsArgs args;
  args.a = Describe(*node.src[0]);
  args.ids = Describe(*node.src[1]);
  args.dst = Describe(node);
  args.index = MakeElementIndex(args.dst.ne);
  return args;
}

SetRowsArgs MakeSetRowsArgs(const Tensor& node) {
  SetRowsArgs args;
  args.rows = Describe(*node.src[0]);
  args.ids = Describe(*node.src[1]);
  args.dst = Describe(node);
  args.index = MakeElementIndex(args.rows.ne);
  return args;
}

CopyArgs MakeCopyArgs(const Tensor& src, const Tensor& dst) {
  return MakeCopyArgs(Describe(src), Describe(dst));
}

CopyArgs MakeCopyArgs(const TensorDesc& src, const TensorDesc& dst) {
  CopyArgs args;
  args.src = src;
  args.dst = dst;
  args.same_shape = SameShape(src, dst);
  args.linear = IsContiguous(src) && IsContiguous(dst);
  args.dst_index = MakeElementIndex(dst.ne);
  args.src_index = MakeElementIndex(src.ne);
  return args;
}

ConcatArgs MakeConcatArgs(const Tensor& node) {
  ConcatArgs args;
  args.a = Describe(*node.src[0]);
  args.b = Describe(*node.src[1]);
  args.dst = Describe(node);
  args.dim = node.ParamI32(0);
  args.index = MakeElementIndex(args.dst.ne);
  return args;
}

absl::Status UnsupportedOp(const Tensor& node) {
  return absl::UnimplementedError(
      absl::StrCat("cuda kernels: op ", OpName(node.op), " has no kernel (",
                   node.DebugString(), ")"));
}

}  // namespace cuda_kernels_internal
}  // namespace ferry
