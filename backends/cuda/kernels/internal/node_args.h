// Turns graph nodes into the kernels' plain arguments (desc.h), and mul_mat
// nodes into a column-major GEMM plan for cuBLAS. Shared by Launch
// (cuda_kernels.cc) and its host emulation, so both run from the same
// arguments.
#ifndef FERRY_BACKENDS_CUDA_KERNELS_INTERNAL_NODE_ARGS_H_
#define FERRY_BACKENDS_CUDA_KERNELS_INTERNAL_NODE_ARGS_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ferry/backends/cuda/kernels/internal/desc.h"
#include "ferry/backends/cuda/kernels/internal/index_math.h"
#include "ferry/graph/op.h"
#include "ferry/graph/tensor.h"

namespace ferry {
namespace cuda_kernels_internal {

// Alignment of each region inside a node's scratch.
inline constexpr size_t kScratchAlignment = 256;

// Describes `t` (its data pointer, dtype, ne and nb) for the kernels.
TensorDesc Describe(const Tensor& t);

// One cuBLAS call of a GEMM plan: `count` products (strided batched when
// count > 1), the first at byte offsets a/b/c_offset from the plan's bases,
// each next one `stride_*` elements further.
struct GemmBatch {
  int64_t a_offset = 0;
  int64_t b_offset = 0;
  int64_t c_offset = 0;
  int64_t stride_a = 0;
  int64_t stride_b = 0;
  int64_t stride_c = 0;
  int32_t count = 1;
};

// mul_mat as column-major GEMMs: C (m x n, ldc) = op(A) * op(B), where A is
// a's rows seen as a k x m column-major matrix (op T) and B is b's rows as
// k x n (op N), so C^T is ferry's row-major [n][m] result. Operands whose
// rows overlap (row stride < k, which cuBLAS rejects) and f32 b under f16 or
// bf16 a are first copied into scratch (copy_a / copy_b) as contiguous
// tensors of the GEMM's type; a and b then point there.
struct GemmPlan {
  // k == 0: the result is all zeros; fill output_bytes at c and stop.
  bool zero_output = false;
  int64_t output_bytes = 0;
  // A block-quantized a, dequantized to f16 in scratch (then like copy_a).
  std::optional<DequantArgs> dequant_a;
  std::optional<CopyArgs> copy_a;
  std::optional<CopyArgs> copy_b;
  ElemType ab_type = ElemType::kF32;  // Of A and B as cuBLAS reads them.
  const void* a = nullptr;
  const void* b = nullptr;
  float* c = nullptr;
  bool trans_a = true;
  bool trans_b = false;
  int32_t m = 0, n = 0, k = 0;
  int32_t lda = 0, ldb = 0, ldc = 0;
  std::vector<GemmBatch> batches;  // Empty when there is nothing to compute.
};

// mul_mat with a block-quantized a and at most this many columns of b
// (decode) runs QuantDotArgs, a's blocks dequantized as they are read; wider
// ones (prompts) dequantize a to f16 in scratch for a cuBLAS GEMM.
inline constexpr int64_t kQuantDotMaxColumns = 8;
// True if mul_mat `node` runs as QuantDotArgs.
bool UsesQuantDot(const Tensor& node);
QuantDotArgs MakeQuantDotArgs(const Tensor& node);

// Returns the scratch bytes PlanMulMat needs for `node` (a mul_mat).
size_t MulMatScratchBytes(const Tensor& node);
// Returns the scratch bytes MakeRopeArgs needs for `node` (a rope): its
// angle table.
size_t RopeScratchBytes(const Tensor& node);

// Plans mul_mat `node` (which passed cpu_kernels::CheckSupported) over
// `scratch` (MulMatScratchBytes(node) bytes, 256-byte aligned; only
// addresses are computed). Returns InvalidArgumentError when a dimension or
// leading dimension does not fit cuBLAS's int, or scratch is too small.
absl::StatusOr<GemmPlan> PlanMulMat(const Tensor& node, void* scratch,
                                    size_t scratch_bytes);

// Argument builders for the other computing ops.
BinaryArgs MakeBinaryArgs(const Tensor& node);
UnaryArgs MakeUnaryArgs(const Tensor& node);
NormArgs MakeNormArgs(const Tensor& node);
SoftMaxArgs MakeSoftMaxArgs(const Tensor& node);
// rope's angle table goes to `scratch` (RopeScratchBytes(node) bytes);
// InvalidArgument if it is smaller.
absl::StatusOr<RopeArgs> MakeRopeArgs(const Tensor& node, void* scratch,
                                      size_t scratch_bytes);
GetRowsArgs MakeGetRowsArgs(const Tensor& node);
SetRowsArgs MakeSetRowsArgs(const Tensor& node);
CopyArgs MakeCopyArgs(const Tensor& src, const Tensor& dst);
CopyArgs MakeCopyArgs(const TensorDesc& src, const TensorDesc& dst);
ConcatArgs MakeConcatArgs(const Tensor& node);

// Returns UnimplementedError naming node's op.
absl::Status UnsupportedOp(const Tensor& node);

// Builds node's arguments and hands them to runner.Run(args), which returns
// absl::Status and has an overload for each argument struct above and for
// GemmPlan. Leafs and view ops return OK without a call; an op without a
// kernel returns UnimplementedError.
template <typename Runner>
absl::Status DispatchNode(const Tensor& node, void* scratch,
                          size_t scratch_bytes, Runner& runner) {
  switch (node.op) {
    case Op::kMulMat: {
      if (UsesQuantDot(node)) return runner.Run(MakeQuantDotArgs(node));
      absl::StatusOr<GemmPlan> plan = PlanMulMat(node, scratch, scratch_bytes);
      if (!plan.ok()) return plan.status();
      return runner.Run(*plan);
    }
    case Op::kAdd:
    case Op::kSub:
    case Op::kMul:
    case Op::kDiv:
      return runner.Run(MakeBinaryArgs(node));
    case Op::kScale:
    case Op::kSilu:
    case Op::kGelu:
    case Op::kRelu:
    case Op::kTanh:
      return runner.Run(MakeUnaryArgs(node));
    case Op::kRmsNorm:
    case Op::kNorm:
      return runner.Run(MakeNormArgs(node));
    case Op::kSoftMax:
      return runner.Run(MakeSoftMaxArgs(node));
    case Op::kRope: {
      absl::StatusOr<RopeArgs> args =
          MakeRopeArgs(node, scratch, scratch_bytes);
      if (!args.ok()) return args.status();
      return runner.Run(*args);
    }
    case Op::kGetRows:
      return runner.Run(MakeGetRowsArgs(node));
    case Op::kSetRows:
      return runner.Run(MakeSetRowsArgs(node));
    case Op::kCpy:  // Writes b's memory, which node describes.
    case Op::kCont:
      return runner.Run(MakeCopyArgs(*node.src[0], node));
    case Op::kConcat:
      return runner.Run(MakeConcatArgs(node));
    default:
      if (node.op == Op::kNone || IsViewOp(node.op)) return absl::OkStatus();
      return UnsupportedOp(node);
  }
}

}  // namespace cuda_kernels_internal
}  // namespace ferry

#endif  // FERRY_BACKENDS_CUDA_KERNELS_INTERNAL_NODE_ARGS_H_
