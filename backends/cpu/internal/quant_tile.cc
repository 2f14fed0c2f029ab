#include "ferry/backends/cpu/internal/quant_tile.h"

#include "ferry/backends/cpu/internal/quant_tile_kernels.h"

namespace ferry {
namespace cpu_internal {

QuantTileFn FindQuantTile(quant::QuantType weight, quant::Isa isa) {
  if (isa == quant::Isa::kScalar || !quant::IsaSupported(isa)) return nullptr;
  return Avx2QuantTile(weight);
}

}  // namespace cpu_internal
}  // namespace ferry
