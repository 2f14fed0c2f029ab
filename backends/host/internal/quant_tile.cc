#include "ferry/backends/host/internal/quant_tile.h"

#include "ferry/backends/host/internal/quant_tile_kernels.h"

namespace ferry {
namespace cpu_internal {

QuantTileFn FindQuantTile(quant::QuantType weight, Isa isa) {
  if (isa == Isa::kScalar || !IsaSupported(isa)) return nullptr;
  const QuantTileFn tile = Avx2QuantTile(weight);
  return tile != nullptr ? tile : Avx2KQuantTile(weight);
}

}  // namespace cpu_internal
}  // namespace ferry
