// Offline memory planning: assigns every block of a Liveness an address
// (chunk, offset) so that blocks whose lifetimes overlap never share bytes.
//
// With the whole graph's lifetimes known before anything is placed, the
// planner runs greedy best-fit placement (TFLite's "greedy by size" idea:
// each block goes into the tightest gap among the already placed blocks that
// overlap it in time, else above them) under several orders (by size, by
// lifetime-area, by lifetime, by start), plus ggml's online best-fit
// allocator in execution order, and keeps the plan with the fewest bytes.
#ifndef FERRY_ALLOC_INTERNAL_PLANNER_H_
#define FERRY_ALLOC_INTERNAL_PLANNER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ferry/alloc/dynamic_allocator.h"
#include "ferry/alloc/internal/liveness.h"

namespace ferry::alloc_internal {

// Where one buffer type's chunks may grow.
struct ChunkLimits {
  // Existing chunks and their capacities (bytes).
  std::vector<int64_t> caps;
  // Whether further chunks may be opened, each of at most new_chunk_cap.
  bool allow_new_chunks = true;
  int64_t new_chunk_cap = INT64_MAX;
};

enum class PlanStrategy : uint8_t {
  kBest,     // Every strategy below; the smallest plan that fits.
  kOffline,  // Greedy best fit with full liveness knowledge only.
  kOnline,   // ggml's online allocator in execution order only.
};

struct MemoryPlan {
  std::vector<DynamicAddress> block_address;      // Per block.
  std::vector<std::vector<int64_t>> chunk_sizes;  // Per type, per chunk.

  int64_t TotalBytes(int type) const;
  int64_t TotalBytes() const;
};

// Plans `liveness` for `limits.size()` buffer types with alignment
// `alignments[type]`. Returns ResourceExhaustedError when no strategy fits the
// limits.
absl::StatusOr<MemoryPlan> PlanMemory(const Liveness& liveness,
                                      absl::Span<const ChunkLimits> limits,
                                      absl::Span<const int64_t> alignments,
                                      PlanStrategy strategy);

}  // namespace ferry::alloc_internal

#endif  // FERRY_ALLOC_INTERNAL_PLANNER_H_
