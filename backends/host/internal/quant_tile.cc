#include "ferry/backends/host/internal/quant_tile.h"

#include "ferry/backends/host/internal/quant_tile_kernels.h"

namespace ferry {
namespace cpu_internal {

QuantTileFn FindQuantTile(quant::QuantType weight, Isa isa) {
  if (isa == Isa::kScalar || !IsaSupported(isa)) return nullptr;
  return Avx2QuantTile(weight);
}

}  // namespace cpu_internal
}  // namespace ferry
