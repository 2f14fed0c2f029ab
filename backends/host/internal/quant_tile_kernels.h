// The tile kernels' operands and the per-ISA tables behind FindQuantTile
// (quant_tile.h).
#ifndef FERRY_BACKENDS_HOST_INTERNAL_QUANT_TILE_KERNELS_H_
#define FERRY_BACKENDS_HOST_INTERNAL_QUANT_TILE_KERNELS_H_

#include <cstddef>
#include <cstdint>

#include "ferry/quant/quant_type.h"

namespace ferry {
namespace cpu_internal {

struct QuantTileArgs {
  // Weight rows, w_row_bytes apart; with `grouped`, rows of a type that
  // QuantGroupLayout takes, in the layout of quant_group_layout.h (row ranges
  // then start at a multiple of kGroupRows).
  const std::byte* w = nullptr;
  int64_t w_row_bytes = 0;
  bool grouped = false;
  const std::byte* act = nullptr;  // Quantized activation rows.
  int64_t act_row_bytes = 0;
  float* dst = nullptr;  // dst[j * ldc + i] for weight row i, token j.
  int64_t ldc = 0;
  int64_t k = 0;  // Elements per row, whole blocks of the weight type.
  // Nonzero: names what `act` holds for the calling thread. Calls on one
  // thread with the same nonzero act_id (and act, k, tokens) read the same
  // activations, so a tile may reuse what it derived from them in an
  // earlier call (QuantMatMul hands a thread's rows to a tile in several
  // calls). 0: derive it again.
  uint64_t act_id = 0;
};

// Computes dst for weight rows [row_begin, row_end) and activation rows
// [token_begin, token_end). Pure: thread-safe for disjoint dst.
using QuantTileFn = void (*)(const QuantTileArgs& args, int64_t row_begin,
                             int64_t row_end, int64_t token_begin,
                             int64_t token_end);

// Compiled with AVX2 + FMA + F16C; nullptr for types without a tile.
QuantTileFn Avx2QuantTile(quant::QuantType weight);
// The same for the K formats (q2_K..q6_K), whose activations are q8_K,
// and for iq4_nl and iq4_xs.
QuantTileFn Avx2KQuantTile(quant::QuantType weight);
QuantTileFn Avx2Iq4QuantTile(quant::QuantType weight);

// Compiled with AVX-512 F, BW, VL + FMA + F16C, for the same types as the
// AVX2 ones (quant_tile_avx512.cc, quant_k_tile_avx512.cc,
// quant_iq4_tile_avx512.cc).
QuantTileFn Avx512QuantTile(quant::QuantType weight);
QuantTileFn Avx512KQuantTile(quant::QuantType weight);
QuantTileFn Avx512Iq4QuantTile(quant::QuantType weight);
// The same built on SIMDe for CPUs without AVX-512 (tests only:
// the *_emulated libraries, avx512_intrinsics.h).
namespace emulated {
QuantTileFn Avx512QuantTile(quant::QuantType weight);
QuantTileFn Avx512KQuantTile(quant::QuantType weight);
QuantTileFn Avx512Iq4QuantTile(quant::QuantType weight);
}  // namespace emulated

}  // namespace cpu_internal
}  // namespace ferry

#endif  // FERRY_BACKENDS_HOST_INTERNAL_QUANT_TILE_KERNELS_H_
