#include "ferry/alloc/memory_bounds.h"

#include "ferry/alloc/internal/liveness.h"
#include "ferry/runtime/status_macros.h"

namespace ferry {

absl::StatusOr<std::vector<MemoryBounds>> ComputeMemoryBounds(
    const Graph& graph, absl::Span<BufferType* const> types,
    BufferAssignment assignment) {
  FERRY_ASSIGN_OR_RETURN(
      alloc_internal::Liveness live,
      alloc_internal::AnalyzeLiveness(
          graph, types, assignment.leaf_types, assignment.node_types,
          [](const Tensor& t) { return t.data != nullptr; },
          /*in_place=*/true));
  std::vector<MemoryBounds> bounds(types.size());
  for (size_t t = 0; t < types.size(); ++t) {
    bounds[t].strict =
        alloc_internal::PeakLiveBytes(live, static_cast<int>(t), false);
    bounds[t].in_place =
        alloc_internal::PeakLiveBytes(live, static_cast<int>(t), true);
  }
  return bounds;
}

}  // namespace ferry
