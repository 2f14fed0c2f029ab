// Tiles of a quantized mul_mat for 2 tokens or more: a block of weight rows
// times a block of activation rows, each weight block unpacked once for
// every token of the tile and each activation block loaded once for every
// row, the integer products of a block summed in registers and scaled once
// per block (as llamafile's tinyBLAS and ggml's repacked GEMMs do). One row
// and one token at a time (quant::VecDot) unpacks every weight block once
// per token. q4_0 and q4_1 tiles take 8 rows at a time, laid out so that one
// vector holds the 8 rows' sums: per token, 8 tokens cost 0.35x and 32
// tokens 0.30x of one token's time (quant_mat_mul_benchmark, q4_1, AVX2,
// 1536 x 576); q8_0's take 2 rows by 4 tokens (0.71x at 8 tokens).
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
// supported by this CPU. AVX2 kernels serve AVX-512 too.
QuantTileFn FindQuantTile(quant::QuantType weight, Isa isa);

}  // namespace cpu_internal
}  // namespace ferry

#endif  // FERRY_BACKENDS_HOST_INTERNAL_QUANT_TILE_H_
