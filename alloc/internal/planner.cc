#include "ferry/alloc/internal/planner.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ferry::alloc_internal {
namespace {

int64_t Cap(const ChunkLimits& limits, size_t chunk) {
  if (chunk < limits.caps.size()) return limits.caps[chunk];
  return limits.allow_new_chunks ? limits.new_chunk_cap : 0;
}

bool MayOpen(const ChunkLimits& limits, size_t chunk) {
  return chunk < limits.caps.size() || limits.allow_new_chunks;
}

// Greedy best fit of `order` (block indices of one type). Fills addresses
// and chunk sizes; returns false when a block fits nowhere.
bool PlaceGreedy(const Liveness& live, const std::vector<int32_t>& order,
                 const ChunkLimits& limits,
                 std::vector<DynamicAddress>& address,
                 std::vector<int64_t>& chunk_sizes) {
  std::vector<std::vector<int32_t>> placed;
  chunk_sizes.clear();
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (int32_t b : order) {
    const Block& block = live.blocks[static_cast<size_t>(b)];
    bool done = false;
    for (size_t c = 0; !done && MayOpen(limits, c); ++c) {
      const int64_t cap = Cap(limits, c);
      if (block.size > cap) {
        if (c >= limits.caps.size()) return false;  // New chunks are no bigger.
        continue;
      }
      while (placed.size() <= c) {
        placed.emplace_back();
        chunk_sizes.push_back(0);
      }
      ranges.clear();
      for (int32_t other : placed[c]) {
        const Block& o = live.blocks[static_cast<size_t>(other)];
        if (o.start <= block.end && block.start <= o.end) {
          const DynamicAddress& a = address[static_cast<size_t>(other)];
          ranges.emplace_back(a.offset, a.offset + o.size);
        }
      }
      std::sort(ranges.begin(), ranges.end());
      int64_t prev_end = 0;
      int64_t best_offset = -1;
      int64_t best_gap = std::numeric_limits<int64_t>::max();
      for (const auto& [begin, end] : ranges) {
        const int64_t gap = begin - prev_end;
        if (gap >= block.size && gap < best_gap) {
          best_gap = gap;
          best_offset = prev_end;
        }
        prev_end = std::max(prev_end, end);
      }
      if (best_offset < 0 && prev_end + block.size <= cap) {
        best_offset = prev_end;
      }
      if (best_offset < 0) continue;
      address[static_cast<size_t>(b)] = {static_cast<int>(c), best_offset};
      placed[c].push_back(b);
      chunk_sizes[c] = std::max(chunk_sizes[c], best_offset + block.size);
      done = true;
    }
    if (!done) return false;
  }
  while (!chunk_sizes.empty() && chunk_sizes.back() == 0) {
    chunk_sizes.pop_back();
  }
  return true;
}

// ggml's online allocator in execution order.
bool PlaceOnline(const Liveness& live, const std::vector<int32_t>& blocks,
                 const ChunkLimits& limits, int64_t alignment,
                 std::vector<DynamicAddress>& address,
                 std::vector<int64_t>& chunk_sizes) {
  int64_t max_size = limits.allow_new_chunks ? limits.new_chunk_cap : 0;
  for (int64_t cap : limits.caps) max_size = std::max(max_size, cap);
  max_size = max_size / alignment * alignment;
  if (max_size < alignment) return blocks.empty();
  const int max_chunks = limits.allow_new_chunks
                             ? std::numeric_limits<int>::max()
                             : static_cast<int>(limits.caps.size());
  DynamicAllocator dyn(alignment, max_size, max_chunks);
  // Blocks by start step, then by end step for frees.
  std::vector<int32_t> by_start = blocks;
  std::stable_sort(by_start.begin(), by_start.end(), [&](int32_t a, int32_t b) {
    return live.blocks[static_cast<size_t>(a)].start <
           live.blocks[static_cast<size_t>(b)].start;
  });
  std::vector<int32_t> by_end = blocks;
  std::stable_sort(by_end.begin(), by_end.end(), [&](int32_t a, int32_t b) {
    return live.blocks[static_cast<size_t>(a)].end <
           live.blocks[static_cast<size_t>(b)].end;
  });
  size_t next_alloc = 0;
  size_t next_free = 0;
  for (int32_t step = kBeforeGraph; step <= live.num_steps; ++step) {
    for (; next_alloc < by_start.size() &&
           live.blocks[static_cast<size_t>(by_start[next_alloc])].start == step;
         ++next_alloc) {
      const int32_t b = by_start[next_alloc];
      absl::StatusOr<DynamicAddress> a =
          dyn.Allocate(live.blocks[static_cast<size_t>(b)].size);
      if (!a.ok()) return false;
      address[static_cast<size_t>(b)] = *a;
    }
    for (; next_free < by_end.size() &&
           live.blocks[static_cast<size_t>(by_end[next_free])].end == step;
         ++next_free) {
      const int32_t b = by_end[next_free];
      if (step == live.num_steps) continue;  // Outputs are never freed.
      dyn.Free(address[static_cast<size_t>(b)],
               live.blocks[static_cast<size_t>(b)].size);
    }
  }
  chunk_sizes.clear();
  for (int c = 0; c < dyn.num_chunks(); ++c) {
    chunk_sizes.push_back(dyn.high_water(c));
    if (dyn.high_water(c) > Cap(limits, static_cast<size_t>(c))) return false;
  }
  return true;
}

int64_t Sum(const std::vector<int64_t>& v) {
  return std::accumulate(v.begin(), v.end(), int64_t{0});
}

}  // namespace

int64_t MemoryPlan::TotalBytes(int type) const {
  return Sum(chunk_sizes[static_cast<size_t>(type)]);
}

int64_t MemoryPlan::TotalBytes() const {
  int64_t total = 0;
  for (const auto& sizes : chunk_sizes) total += Sum(sizes);
  return total;
}

absl::StatusOr<MemoryPlan> PlanMemory(const Liveness& live,
                                      absl::Span<const ChunkLimits> limits,
                                      absl::Span<const int64_t> alignments,
                                      PlanStrategy strategy) {
  const size_t num_types = limits.size();
  MemoryPlan plan;
  plan.block_address.assign(live.blocks.size(), DynamicAddress{});
  plan.chunk_sizes.resize(num_types);
  std::vector<std::vector<int32_t>> by_type(num_types);
  for (size_t b = 0; b < live.blocks.size(); ++b) {
    by_type[static_cast<size_t>(live.blocks[b].type)].push_back(
        static_cast<int32_t>(b));
  }
  std::vector<DynamicAddress> scratch(live.blocks.size());
  std::vector<int64_t> scratch_sizes;
  for (size_t t = 0; t < num_types; ++t) {
    const std::vector<int32_t>& blocks = by_type[t];
    if (blocks.empty()) continue;
    int64_t best_total = std::numeric_limits<int64_t>::max();
    auto consider = [&](bool ok) {
      if (!ok) return;
      const int64_t total = Sum(scratch_sizes);
      if (total >= best_total) return;
      best_total = total;
      for (int32_t b : blocks) {
        plan.block_address[static_cast<size_t>(b)] =
            scratch[static_cast<size_t>(b)];
      }
      plan.chunk_sizes[t] = scratch_sizes;
    };
    auto blk = [&](int32_t b) -> const Block& {
      return live.blocks[static_cast<size_t>(b)];
    };
    auto span = [&](int32_t b) -> int64_t {
      return static_cast<int64_t>(blk(b).end) - blk(b).start + 1;
    };
    if (strategy != PlanStrategy::kOnline) {
      std::vector<int32_t> order = blocks;
      // 1. Largest first, longer-lived first among equals.
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
        if (blk(a).size != blk(b).size) return blk(a).size > blk(b).size;
        return span(a) > span(b);
      });
      consider(PlaceGreedy(live, order, limits[t], scratch, scratch_sizes));
      // 2. Largest lifetime-area (bytes x steps) first.
      order = blocks;
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
        const double area_a = static_cast<double>(blk(a).size) * span(a);
        const double area_b = static_cast<double>(blk(b).size) * span(b);
        return area_a > area_b;
      });
      consider(PlaceGreedy(live, order, limits[t], scratch, scratch_sizes));
      // 3. Longest-lived first (they settle at the bottom), then largest.
      order = blocks;
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
        if (span(a) != span(b)) return span(a) > span(b);
        return blk(a).size > blk(b).size;
      });
      consider(PlaceGreedy(live, order, limits[t], scratch, scratch_sizes));
      // 4. Execution order (best fit with lookahead of what is still live).
      order = blocks;
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
        return blk(a).start < blk(b).start;
      });
      consider(PlaceGreedy(live, order, limits[t], scratch, scratch_sizes));
    }
    if (strategy != PlanStrategy::kOffline) {
      consider(PlaceOnline(live, blocks, limits[t], alignments[t], scratch,
                           scratch_sizes));
    }
    if (best_total == std::numeric_limits<int64_t>::max()) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "graph does not fit the reserved buffers of buffer type ", t));
    }
  }
  return plan;
}

}  // namespace ferry::alloc_internal
