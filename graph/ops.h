// Graph-building operations, with ggml's semantics.
//
// Each function checks its arguments' shapes and dtypes, then creates the
// result tensor in `ctx` (metadata only: nothing is computed). Errors are
// InvalidArgumentError naming the op and the shapes involved, e.g.
//   "mul_mat: a [64, 32, 1, 1] f32 and b [48, 8, 1, 1] f32 need equal ne[0]".
//
// Conventions kernel writers rely on:
//   * Results of computing ops are fresh contiguous tensors, except cpy,
//     whose result aliases b (view_src = b's root) and writes into it.
//   * Any tensor with view_src != null is placed at view_src->data +
//     view_offset; view_src is always a tensor that is not itself a view.
//   * Inputs may be strided (views, permutes) unless stated: ops marked
//     "rows contiguous" require nb[0] == element size of that input.
//   * OpCanRunInPlace (op.h) ops must tolerate dst == src[0].
//   * Op params (Tensor::op_params, 32-bit words) are listed per op:
//     i32[k] is an int32 in word k, f32[k] a float in word k.
//   * Block-quantized tensors (q4_0 ... q8_0, q2_K ... q6_K, iq4_nl,
//     iq4_xs; dtype.h) are
//     accepted only as mul_mat's a and get_rows' a, plus by the view ops
//     that keep dim 0 (reshape, views, permutes leaving dim 0 in place);
//     every other op refuses them with an InvalidArgumentError.
#ifndef FERRY_GRAPH_OPS_H_
#define FERRY_GRAPH_OPS_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ferry/graph/context.h"
#include "ferry/graph/tensor.h"

namespace ferry {

// Matrix product. a: [K, M, A2, A3] f32/f16/bf16 or quantized (then K is a
// multiple of the block size, as the tensor's creation checked; kernels may
// round b to an 8-bit block format first, as ggml does), b: [K, N, B2, B3] f32,
// both rows contiguous; B2 % A2 == 0 and B3 % A3 == 0. Result: f32
// [M, N, B2, B3] with dst[i3][i2][n][m] = sum_k a[j3][j2][m][k] *
// b[i3][i2][n][k], where j2 = i2 / (B2 / A2) and j3 = i3 / (B3 / A3).
// src = {a, b}.
absl::StatusOr<Tensor*> MulMat(Context& ctx, Tensor* a, Tensor* b);

// Element-wise a op b, with b broadcast onto a (CanRepeat(*b, *a)): element
// (i0..i3) of a pairs with (i0 % b.ne[0], ..., i3 % b.ne[3]) of b. Both f32,
// rows contiguous. Result: f32, a's shape. src = {a, b}. In place.
absl::StatusOr<Tensor*> Add(Context& ctx, Tensor* a, Tensor* b);
absl::StatusOr<Tensor*> Sub(Context& ctx, Tensor* a, Tensor* b);
absl::StatusOr<Tensor*> Mul(Context& ctx, Tensor* a, Tensor* b);
absl::StatusOr<Tensor*> Div(Context& ctx, Tensor* a, Tensor* b);

// a * s. a f32, rows contiguous. f32[0] = s. src = {a}. In place.
absl::StatusOr<Tensor*> Scale(Context& ctx, Tensor* a, float s);

// Over each row (ne[0]): x / sqrt(mean(x^2) + eps). a f32, rows contiguous;
// eps finite and >= 0. f32[0] = eps. src = {a}. In place.
absl::StatusOr<Tensor*> RmsNorm(Context& ctx, Tensor* a, float eps);

// Over each row: (x - mean) / sqrt(variance + eps), variance = mean((x -
// mean)^2). Same constraints and params as RmsNorm. In place.
absl::StatusOr<Tensor*> Norm(Context& ctx, Tensor* a, float eps);

// Row-wise softmax over ne[0] of (a * scale + mask). a f32 rows contiguous.
// mask may be null; else f32 rows contiguous with mask.ne[0] == a.ne[0],
// mask.ne[1] >= a.ne[1] (extra rows unused), a.ne[2] % mask.ne[2] == 0 and
// a.ne[3] % mask.ne[3] == 0: row (i1, i2, i3) of a adds mask row
// (i1, i2 % mask.ne[2], i3 % mask.ne[3]). -inf mask entries are allowed (a
// fully masked row gives NaN, as in ggml). f32[0] = scale. src = {a, mask}
// (src[1] null without mask). In place.
absl::StatusOr<Tensor*> SoftMax(Context& ctx, Tensor* a, Tensor* mask,
                                float scale);

// Rotary position embedding modes (values match ggml's mode bits).
enum class RopeMode : int32_t {
  kNormal = 0,  // Rotates pairs (2i, 2i+1).
  kNeox = 2,    // Rotates pairs (i, i + n_dims/2).
};

// Rotary embedding. a: [head_dim, n_head, n_tokens, A3] f32 rows contiguous;
// pos: i32 [n_tokens] contiguous. Rotates the first n_dims (even, <=
// head_dim) elements of each head; the rest are copied. For pair i in
// [0, n_dims/2) of token t: theta = pos[t] * freq_scale *
// freq_base^(-2i/n_dims); (x0, x1) -> (x0 cos - x1 sin, x0 sin + x1 cos).
// Params: i32[0] = n_dims, i32[1] = mode, f32[2] = freq_base,
// f32[3] = freq_scale. freq_factors, when given (llama-3 rope scaling), is
// f32 contiguous [n_dims / 2]: pair i's theta is divided by
// freq_factors[i]. src = {a, pos, freq_factors} (src[2] null without).
// In place.
absl::StatusOr<Tensor*> Rope(Context& ctx, Tensor* a, Tensor* pos, int n_dims,
                             RopeMode mode, float freq_base = 10000.0f,
                             float freq_scale = 1.0f,
                             Tensor* freq_factors = nullptr);

// Gathers rows. a: [E, R, A2, A3] f32/f16/bf16 or quantized (rows are
// dequantized), rows contiguous; ids: i32
// [N, A2, A3, 1] rows contiguous (a 1-D [N] when A2 = A3 = 1). Result: f32
// [E, N, A2, A3], dst[i3][i2][n] = a[i3][i2][ids[i3][i2][n]]. Ids must be in
// [0, R) at compute time (the reference returns OutOfRangeError otherwise).
// src = {a, ids}.
absl::StatusOr<Tensor*> GetRows(Context& ctx, Tensor* a, Tensor* ids);

// Copies a's elements into b, converting dtype: both f32/f16/bf16, or both
// i32; equal element counts, any shapes and strides. Elements are matched in
// logical order (i0 fastest, then i1, i2, i3). The result has b's dtype,
// shape and strides and aliases b (view_src = b's root); computing it writes
// b. src = {a, b}.
absl::StatusOr<Tensor*> Cpy(Context& ctx, Tensor* a, Tensor* b);

// Scatters rows (ggml's set_rows): row n of `rows` goes to row ids[n] of
// `dst`. dst: [E, R] f32/f16/bf16 with contiguous rows (a 2-D tensor, e.g. a
// KV cache); rows: f32 [E, N] rows contiguous; ids: i32 [N] contiguous,
// at compute time distinct and in [0, R), or -1 for a row that goes nowhere
// (padding). Kernels skip every id outside [0, R); the reference evaluator
// returns OutOfRangeError for one other than -1, and for a repeated id. The
// result has dst's dtype, shape and strides and aliases dst (view_src = dst's
// root): computing it writes the N rows of dst and leaves the others as they
// were, so a fixed graph can write a batch's K/V rows at per-token cache cells
// given as data. src = {rows, ids, dst}.
absl::StatusOr<Tensor*> SetRows(Context& ctx, Tensor* dst, Tensor* rows,
                                Tensor* ids);

// Attention of each token over its own range of cache rows, read in place:
// the fused form a micro-batch of several sequences uses, so that a token
// reads only its sequence's cells and no window is gathered or masked.
// q: [hd, n_head, T] f32 with contiguous rows; k, v: [hd * n_kv, C] 2-D with
// contiguous rows, both f32 or both f16 (K and V caches; n_head a multiple
// of n_kv; with f16 ones, q and the softmax weights are rounded to f16 and
// the products of f16 values summed in f32, as f16 GEMMs do); ranges:
// [2, T] i32 contiguous: token t attends over cache rows [ranges[0, t],
// ranges[1, t]). Head h reads kv head h / (n_head / n_kv):
//   out[:, h, t] = sum_r softmax_r(scale * q[:, h, t] . k[r, kvh]) v[r, kvh].
// An empty range gives zeros. At compute time ranges lie within [0, C];
// kernels clamp one that does not, the reference evaluator returns
// OutOfRangeError. Result [hd, n_head, T] f32, contiguous. f32[0] = scale.
// src = {q, k, v, ranges}.
absl::StatusOr<Tensor*> RangeAttention(Context& ctx, Tensor* q, Tensor* k,
                                       Tensor* v, Tensor* ranges, float scale);

// Contiguous copy of a (any strides, any unquantized dtype), same dtype and
// shape.
// src = {a}.
absl::StatusOr<Tensor*> Cont(Context& ctx, Tensor* a);

// Views of a's memory with the given shape, byte strides (nb[0] is the
// element size) and byte offset from a's first byte. ne >= 0; strides and
// offset >= 0 and multiples of the element size; the view must lie within
// a's NumBytes(). src = {a}; view_src = a's root, view_offset = a's offset +
// offset. Result op: kView.
absl::StatusOr<Tensor*> View1D(Context& ctx, Tensor* a, int64_t ne0,
                               int64_t offset);
absl::StatusOr<Tensor*> View2D(Context& ctx, Tensor* a, int64_t ne0,
                               int64_t ne1, int64_t nb1, int64_t offset);
absl::StatusOr<Tensor*> View3D(Context& ctx, Tensor* a, int64_t ne0,
                               int64_t ne1, int64_t ne2, int64_t nb1,
                               int64_t nb2, int64_t offset);
absl::StatusOr<Tensor*> View4D(Context& ctx, Tensor* a, int64_t ne0,
                               int64_t ne1, int64_t ne2, int64_t ne3,
                               int64_t nb1, int64_t nb2, int64_t nb3,
                               int64_t offset);

// View of contiguous a with a new shape (at most 4 dims, same element
// count), contiguous strides. src = {a}.
absl::StatusOr<Tensor*> Reshape(Context& ctx, Tensor* a,
                                absl::Span<const int64_t> shape);

// Strided view moving a's dim i to position axis_i (ggml semantics:
// ne[axis_i] = a.ne[i], nb[axis_i] = a.nb[i]); the axes are a permutation
// of 0..3. i32[0..3] = axes. src = {a}.
absl::StatusOr<Tensor*> Permute(Context& ctx, Tensor* a, int axis0, int axis1,
                                int axis2, int axis3);

// Permute(a, 1, 0, 2, 3), with op kTranspose. i32[0..3] = {1, 0, 2, 3}.
absl::StatusOr<Tensor*> Transpose(Context& ctx, Tensor* a);

// Element-wise activations; a f32 rows contiguous, result f32 a's shape.
// silu(x) = x / (1 + exp(-x)); relu(x) = max(x, 0); gelu uses the tanh
// approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), like
// ggml; tanh soft-caps scores (gemma2). src = {a}. In place.
absl::StatusOr<Tensor*> Silu(Context& ctx, Tensor* a);
absl::StatusOr<Tensor*> Gelu(Context& ctx, Tensor* a);
absl::StatusOr<Tensor*> Relu(Context& ctx, Tensor* a);
absl::StatusOr<Tensor*> Tanh(Context& ctx, Tensor* a);

// Concatenates a and b along `dim` (0..3): same unquantized dtype, equal ne in
// every other dim; any strides. Result contiguous, a's dtype, ne[dim] =
// a.ne[dim] + b.ne[dim]. i32[0] = dim. src = {a, b}.
absl::StatusOr<Tensor*> Concat(Context& ctx, Tensor* a, Tensor* b, int dim);

// Flag setters (see TensorFlag in tensor.h).
inline void SetInput(Tensor& t) { t.flags |= kTensorFlagInput; }
inline void SetOutput(Tensor& t) { t.flags |= kTensorFlagOutput; }
inline void SetWeight(Tensor& t) { t.flags |= kTensorFlagWeight; }

}  // namespace ferry

#endif  // FERRY_GRAPH_OPS_H_
