// Dot products of a quantized weight row with an activation row, the inner
// loop of a quantized mul_mat (as ggml computes it): the activation row is
// quantized once into VecDotActivationType(weight type) with QuantizeRow,
// then dotted with many weight rows, integer products inside each block and
// one float multiply-add per block.
//
//   weight   activation   result
//   q4_0     q8_0         sum_b d_w d_a sum_j (q_w - 8) q_a
//   q4_1     q8_1         sum_b d_w d_a sum_j q_w q_a + m_w s_a
//   q5_0     q8_0         sum_b d_w d_a sum_j (q_w - 16) q_a
//   q5_1     q8_1         sum_b d_w d_a sum_j q_w q_a + m_w s_a
//   q8_0     q8_0         sum_b d_w d_a sum_j q_w q_a
//   q2_K..q6_K  q8_K      per super-block: d_a (d_w sum_s sc_s sum_j q_w q_a
//                         - dmin_w sum_s m_s bsum_a) (block_formats.h)
//   iq4_xs   q8_K         sum_b d_w d_a sum_s sc_s sum_j grid[q_w] q_a
//   iq4_nl   q8_0         sum_b d_w d_a sum_j grid[q_w] q_a
//   f32/f16/bf16  f32     sum_j w_j a_j
//
// Paths: scalar, AVX2 and AVX-512, picked at run time (PreferredIsa());
// every path is tested against the scalar one. (q5, K and iq4 types have no
// AVX-512 kernel of their own: the AVX-512 table hands out the AVX2 ones.)
// Use:
//   const VecDotFn dot = FindVecDot(QuantType::kQ4_1);   // once
//   QuantizeRow(VecDotActivationType(QuantType::kQ4_1), x, act, n);
//   for (row ...) y[row] = dot(w + row * RowBytes(kQ4_1, n), act, n);
#ifndef FERRY_BACKENDS_HOST_VEC_DOT_H_
#define FERRY_BACKENDS_HOST_VEC_DOT_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "ferry/quant/quant_type.h"
#include "ferry/runtime/cpu_features.h"

namespace ferry::quant {

// Returns the dot product of the `n`-element weight row at `w` with the
// activation row at `act`. `n` must be a multiple of the weight type's block
// size (and of 32 for quantized types); rows must be 2-byte aligned (q8_K
// activations 4-byte). Pure
// function: thread-safe.
using VecDotFn = float (*)(const void* w, const void* act, int64_t n);

// The activation format VecDot takes for weights of type `weight`, or
// Unimplemented when there is no kernel for that weight type.
absl::StatusOr<QuantType> VecDotActivationType(QuantType weight);

// The ISA whose kernel is fastest for `weight` on this CPU. Measured
// (vec_dot_benchmark, 1536 x 576 rows): AVX-512 wins for f32/f16/bf16
// (1.2-1.5x AVX2) but its integer block kernels run at 0.8-0.9x of the
// AVX2 ones (per-block scale broadcasts and lane shuffles cost what the
// wider multiply saves), so quantized types prefer AVX2.
Isa PreferredIsa(QuantType weight);

// The kernel for weight type `weight` on `isa`, or nullptr if there is none
// or `isa` is not supported by this CPU.
VecDotFn FindVecDot(QuantType weight, Isa isa);
inline VecDotFn FindVecDot(QuantType weight) {
  return FindVecDot(weight, PreferredIsa(weight));
}

// One dot product with the preferred kernel: Unimplemented if `weight` has
// none, InvalidArgument if `n` is not a whole number of blocks. For loops,
// look the kernel up once with FindVecDot instead.
absl::StatusOr<float> VecDot(QuantType weight, const void* w, const void* act,
                             int64_t n);

}  // namespace ferry::quant

#endif  // FERRY_BACKENDS_HOST_VEC_DOT_H_
