// Plain descriptions of tensors and op arguments handed to the CUDA kernels
// (internal/device_kernels.h) and to their host emulation. No CUDA, Abseil or
// graph headers: nvcc compiles the files that include it, and the structs go
// to kernels by value.
#ifndef FERRY_BACKENDS_CUDA_KERNELS_INTERNAL_DESC_H_
#define FERRY_BACKENDS_CUDA_KERNELS_INTERNAL_DESC_H_

#include <cstdint>

namespace ferry {
namespace cuda_kernels_internal {

// Element types; values equal ferry::DType's. The block-quantized ones
// (blocks of 32 or 256 elements, internal/quant_formats.h) are read only,
// as mul_mat's a (QuantDotArgs, DequantArgs).
enum class ElemType : int32_t {
  kF32 = 0,
  kF16 = 1,
  kBF16 = 2,
  kI32 = 3,
  kQ4_0 = 4,
  kQ4_1 = 5,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ2_K = 9,
  kQ3_K = 10,
  kQ4_K = 11,
  kQ5_K = 12,
  kQ6_K = 13,
  kIQ4_NL = 14,
  kIQ4_XS = 15,
};

// One tensor as the kernels see it: a device (or, when emulated, host)
// address, its element type and ggml-style shape and byte strides. Does not
// own `data`.
struct TensorDesc {
  void* data = nullptr;
  ElemType type = ElemType::kF32;
  int64_t ne[4] = {1, 1, 1, 1};
  int64_t nb[4] = {0, 0, 0, 0};
};

// Division by a divisor fixed at launch (index_math.h makes and uses it).
struct FastDiv {
  uint32_t divisor = 1;
  uint32_t multiplier = 1;
  uint32_t shift = 0;
};

// How an element kernel splits flat indices of its result's shape `ne`
// into coordinates (index_math.h): with FastDiv when `fast` (fewer than
// 2^32 elements), else with 64-bit division.
struct ElementIndex {
  int64_t ne[4] = {1, 1, 1, 1};
  FastDiv div[3];
  bool fast = false;
};

enum class BinaryKind : int32_t { kAdd, kSub, kMul, kDiv };

// Where an element kernel finds element e of an operand of the result's
// shape: at e (contiguous, same shape), at e mod ne[0] (a contiguous row
// repeated), or through its coordinates (anything else).
enum class Addressing : int32_t { kLinear, kRow, kGeneral };
enum class UnaryKind : int32_t { kScale, kSilu, kGelu, kRelu, kTanh };

// add/sub/mul/div: dst = a op b, b broadcast onto a; all f32.
struct BinaryArgs {
  TensorDesc a, b, dst;
  BinaryKind kind = BinaryKind::kAdd;
  ElementIndex index;  // Of dst.
  bool dst_linear = false;
  Addressing a_at = Addressing::kGeneral;
  Addressing b_at = Addressing::kGeneral;
  FastDiv b_div[4];  // By b.ne[i], for broadcasting b's coordinates.
};

// scale/silu/gelu/relu on f32.
struct UnaryArgs {
  TensorDesc a, dst;
  UnaryKind kind = UnaryKind::kScale;
  float scale = 1.0f;
  ElementIndex index;   // Of dst.
  bool linear = false;  // a and dst contiguous: element e at e.
};

// rms_norm (center = false) and norm (center = true).
struct NormArgs {
  TensorDesc a, dst;
  bool center = false;
  float eps = 0.0f;
};

// soft_max(a * scale + mask); mask unused unless has_mask.
struct SoftMaxArgs {
  TensorDesc a, mask, dst;
  bool has_mask = false;
  float scale = 1.0f;
};

// rope in two kernels: the first fills `table` (f32, [2 * n_dims / 2,
// positions]: cos and sin of each position's angle for each pair, in
// scratch), the second rotates each row's pairs with it, so the angles'
// pow/sin/cos run once per position and pair, not once per head.
struct RopeArgs {
  TensorDesc a, pos, dst;
  TensorDesc table;
  int32_t n_dims = 0;
  bool neox = false;
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;
  ElementIndex table_index;  // Of the table's [n_dims / 2, positions].
};

// get_rows: a f32/f16/bf16, ids i32, dst f32.
struct GetRowsArgs {
  TensorDesc a, ids, dst;
  ElementIndex index;  // Of dst.
};

// set_rows: rows f32 [E, N], ids i32 [N], dst f32/f16/bf16 [E, R]: row n of
// rows goes to row ids[n] of dst; rows with an id outside [0, R) are skipped
// (as on the CPU). The kernel walks rows' elements.
struct SetRowsArgs {
  TensorDesc rows, ids, dst;
  ElementIndex index;  // Of rows.
};

// Copies src's elements into dst in logical order (i0 fastest), converting
// between float types; same_shape when src.ne == dst.ne (one index for
// both); linear when both are contiguous (element e at e in both).
struct CopyArgs {
  TensorDesc src, dst;
  bool same_shape = false;
  bool linear = false;
  ElementIndex dst_index;
  ElementIndex src_index;
};

// mul_mat with a block-quantized a for a few columns of b (decode): each
// result element dst[i0][i1][i2][i3] = dot(row i0 of a's batch
// (i2 / r2, i3 / r3), row i1 of b's batch (i2, i3)), with a's blocks
// dequantized as they are read. b f32 with contiguous rows, dst f32.
struct QuantDotArgs {
  TensorDesc a, b, dst;
  int64_t r2 = 1;  // b.ne[2] / a.ne[2].
  int64_t r3 = 1;  // b.ne[3] / a.ne[3].
};

// Block-quantized src (contiguous rows of whole blocks) into dst, f16 of
// src's shape (contiguous), for a GEMM on cuBLAS.
struct DequantArgs {
  TensorDesc src, dst;
  ElementIndex index;  // Of dst.
};

// concat along dim; a, b and dst have one element type.
struct ConcatArgs {
  TensorDesc a, b, dst;
  int32_t dim = 0;
  ElementIndex index;  // Of dst.
};

}  // namespace cuda_kernels_internal
}  // namespace ferry

#endif  // FERRY_BACKENDS_CUDA_KERNELS_INTERNAL_DESC_H_
