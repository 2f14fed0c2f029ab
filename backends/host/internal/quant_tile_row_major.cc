#include "ferry/backends/host/internal/quant_tile_row_major.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "ferry/backends/host/internal/quant_group_layout.h"
#include "ferry/backends/host/internal/quant_tile_kernels.h"
#include "ferry/graph/dtype.h"

namespace ferry {
namespace cpu_internal {
namespace {

// Grows `scratch` to at least `bytes`, never shrinking it: a resize down
// and up again would zero the regrown bytes on every call (the tiles ask
// for sizes that vary with their token counts).
void GrowTo(std::vector<std::byte>& scratch, size_t bytes) {
  if (scratch.size() < bytes) scratch.resize(bytes);
}

}  // namespace

const std::byte* LayOutRowMajorGroups(const QuantTileArgs& p, DType dtype,
                                      int64_t i0, int rows) {
  const QuantGroupLayout layout(dtype, {p.k, kGroupRows, 1, 1});
  const int64_t groups = (rows + kGroupRows - 1) / kGroupRows;
  // Grown once per thread, then reused.
  thread_local std::vector<std::byte> scratch;
  GrowTo(scratch, static_cast<size_t>(groups * layout.group_bytes()));
  const auto row_bytes = static_cast<size_t>(layout.row_bytes());
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t r = 0; r < kGroupRows; ++r) {
      const int64_t row = i0 + std::min<int64_t>(g * kGroupRows + r, rows - 1);
      layout.Pack(p.w + row * p.w_row_bytes, static_cast<size_t>(r) * row_bytes,
                  row_bytes, scratch.data() + g * layout.group_bytes());
    }
  }
  return scratch.data();
}

std::byte* TileTokenScratch(size_t bytes) {
  // Grown once per thread, then reused.
  thread_local std::vector<std::byte> scratch;
  GrowTo(scratch, bytes);
  return scratch.data();
}

std::byte* TileGroupScratch(size_t bytes) {
  // Grown once per thread, then reused.
  thread_local std::vector<std::byte> scratch;
  GrowTo(scratch, bytes);
  return scratch.data();
}

}  // namespace cpu_internal
}  // namespace ferry
