// Row-major weight rows laid out as groups of the 8-row layout
// (quant_group_layout.h) in thread-local scratch, for tiles that read groups
// only (the AVX-512 ones), and the tiles' thread-local scratch. Compiled
// without ISA flags: ISA-specific files share no inline or template code
// through it (the linker keeps one copy of such code, which could be another
// ISA's: a std::vector grown in an AVX-512 file could run on an AVX2 CPU).
#ifndef FERRY_BACKENDS_HOST_INTERNAL_QUANT_TILE_ROW_MAJOR_H_
#define FERRY_BACKENDS_HOST_INTERNAL_QUANT_TILE_ROW_MAJOR_H_

#include <cstddef>
#include <cstdint>

#include "ferry/backends/host/internal/quant_tile_kernels.h"
#include "ferry/graph/dtype.h"

namespace ferry {
namespace cpu_internal {

// Lays out weight rows [i0, i0 + rows) of p.w (row-major, p.w_row_bytes
// apart, of `dtype`, which QuantGroupLayout takes) as ceil(rows / 8)
// consecutive groups (missing rows of the last repeat the last row) and
// returns them; valid until the calling thread's next call.
const std::byte* LayOutRowMajorGroups(const QuantTileArgs& p, DType dtype,
                                      int64_t i0, int rows);

// `bytes` of thread-local scratch (aligned for floats) for a tile's
// per-token values; valid until the calling thread's next call. Apart from
// LayOutRowMajorGroups' scratch, so both may be in use at once.
std::byte* TileTokenScratch(size_t bytes);

// `bytes` of thread-local scratch (aligned for floats) for a group a tile
// lays out itself; valid until the calling thread's next call. Apart from
// the two above.
std::byte* TileGroupScratch(size_t bytes);

}  // namespace cpu_internal
}  // namespace ferry

#endif  // FERRY_BACKENDS_HOST_INTERNAL_QUANT_TILE_ROW_MAJOR_H_
