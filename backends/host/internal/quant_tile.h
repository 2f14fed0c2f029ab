// Tiles of a quantized mul_mat for a few tokens (2 to kMinGemmTokens - 1):
// a block of weight rows times a block of activation rows, each weight
// block unpacked once for every token of the tile and each activation block
// loaded once for every row, the integer products of a block summed in
// registers and scaled once per block (as llamafile's tinyBLAS does for
// ggml's block types). One row and one token at a time (quant::VecDot)
// unpacks every weight block once per token: at 8 tokens the tiles take
// 0.71x of its time per token (quant_mat_mul_benchmark, q4_1, AVX2).
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
