#include "ferry/backends/host/internal/quant_tile.h"

#include "ferry/backends/host/internal/quant_tile_kernels.h"

namespace ferry {
namespace cpu_internal {

QuantTileFn FindQuantTile(quant::QuantType weight, Isa isa) {
  if (isa == Isa::kScalar || !IsaSupported(isa)) return nullptr;
  if (isa == Isa::kAvx512) {
    for (QuantTileFn (*table)(quant::QuantType) :
         {Avx512QuantTile, Avx512KQuantTile, Avx512Iq4QuantTile}) {
      if (const QuantTileFn tile = table(weight); tile != nullptr) return tile;
    }
  }
  for (QuantTileFn (*table)(quant::QuantType) :
       {Avx2QuantTile, Avx2KQuantTile, Avx2Iq4QuantTile}) {
    if (const QuantTileFn tile = table(weight); tile != nullptr) return tile;
  }
  return nullptr;
}

}  // namespace cpu_internal
}  // namespace ferry
