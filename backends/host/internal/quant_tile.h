// Tiles of a quantized mul_mat: 8 weight rows at a time by up to 4 tokens
// (q4_0, q4_1, q5_0, q5_1, q8_0: quant_tile_avx2.cc; q2_K, q3_K, q4_K, q5_K,
// q6_K: quant_k_tile_avx2.cc; iq4_nl, iq4_xs: quant_iq4_tile_avx2.cc),
// each weight block unpacked once for every token of the tile and each
// activation block loaded once for the 8 rows, the integer products of a
// block summed in registers and scaled once per block (as llamafile's
// tinyBLAS and ggml's repacked GEMMs do). Weights are row-major (laid out a
// group at a time as they are read) or already in groups of 8 rows
// (QuantTileArgs::grouped, quant_group_layout.h). Measured (AVX2-only EPYC,
// one thread, 1536 x 576): q4_1 per token against one token's vec_dot time,
// 8 tokens 0.31x, 32 tokens 0.29x; grouped weights at one token 0.32x
// (q4_0, q4_1), 0.50x (q8_0) and 0.38x (q5_0) of vec_dot's time; 576 x
// 1536 grouped at one token: q4_K 0.74x, q6_K 0.7x, iq4_xs 0.72x, q2_K
// 0.81x (0.49x at 8 tokens, 0.48x at 32), and iq4_nl (1536 x 576) 0.42x.
// The AVX-512 tiles (quant_tile_avx512.cc, quant_k_tile_avx512.cc,
// quant_iq4_tile_avx512.cc) do the same arithmetic 16 rows (two groups) at
// a time, half the instructions per product; not yet measured on AVX-512
// hardware (quant_mat_mul_benchmark's path 3), so quant::PreferredIsa still
// picks the AVX2 tiles there. Their tests also run on SIMDe
// (avx512_intrinsics.h) on CPUs without AVX-512.
//
//   dst[j * ldc + i] = vec_dot(weight row i, activation row j)
//
// Activations are rows of quant::VecDotActivationType(weight), as VecDot
// takes them; the results equal VecDot's up to the order of float sums.
#ifndef FERRY_BACKENDS_HOST_INTERNAL_QUANT_TILE_H_
#define FERRY_BACKENDS_HOST_INTERNAL_QUANT_TILE_H_

#include "ferry/backends/host/internal/quant_tile_kernels.h"
#include "ferry/quant/quant_type.h"
#include "ferry/runtime/cpu_features.h"

namespace ferry {
namespace cpu_internal {

// The tile kernel for weights of `weight` on `isa`, or nullptr where there
// is none (the caller then uses VecDot one pair at a time) or `isa` is not
// supported by this CPU. On kAvx512 the AVX-512 tiles (16 rows at a time:
// quant_group_tile_avx512.h) where a type has one, its AVX2 tile where not.
QuantTileFn FindQuantTile(quant::QuantType weight, Isa isa);

}  // namespace cpu_internal
}  // namespace ferry

#endif  // FERRY_BACKENDS_HOST_INTERNAL_QUANT_TILE_H_
