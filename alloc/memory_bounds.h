// Lower bounds on a graph's compute memory, to judge the graph allocator.
//
// Both bounds are the maximum over the execution order of the bytes live at
// once (sizes aligned as the allocator aligns them; lifetimes as in
// internal/liveness.h; tensors that already have data do not count):
//   * strict: every tensor has its own memory while it lives;
//   * in_place: a node may take over a dying source's memory under the
//     in-place rules, so the two count once at that step.
// No placement can need less than `in_place` bytes (per buffer type) while
// following those rules; fragmentation is what a plan needs above it.
#ifndef FERRY_ALLOC_MEMORY_BOUNDS_H_
#define FERRY_ALLOC_MEMORY_BOUNDS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ferry/alloc/graph_allocator.h"
#include "ferry/backends/buffer.h"
#include "ferry/graph/graph.h"

namespace ferry {

struct MemoryBounds {
  int64_t strict = 0;
  int64_t in_place = 0;
};

// Returns the bounds per buffer type (indices as in `assignment`). Call it
// before allocating the graph: tensors with data count as preset. Errors as
// for GraphAllocator::Measure.
absl::StatusOr<std::vector<MemoryBounds>> ComputeMemoryBounds(
    const Graph& graph, absl::Span<BufferType* const> types,
    BufferAssignment assignment = {});

}  // namespace ferry

#endif  // FERRY_ALLOC_MEMORY_BOUNDS_H_
