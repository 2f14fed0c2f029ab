#include "ferry/backends/cuda/internal/hazard_tracker.h"

#include <algorithm>

namespace ferry::cuda_internal {
namespace {

void SortAndMerge(std::vector<MemoryRange>& ranges) {
  std::sort(ranges.begin(), ranges.end(),
            [](const MemoryRange& a, const MemoryRange& b) {
              return a.begin < b.begin;
            });
  size_t out = 0;
  for (size_t i = 0; i < ranges.size(); ++i) {
    // Merge only overlapping ranges: adjacent ones (two copy slots side by
    // side) must stay apart or they would conflict falsely.
    if (out > 0 && ranges[i].begin < ranges[out - 1].end) {
      ranges[out - 1].end = std::max(ranges[out - 1].end, ranges[i].end);
    } else {
      ranges[out++] = ranges[i];
    }
  }
  ranges.resize(out);
}

}  // namespace

void MemoryAccess::Add(std::vector<MemoryRange>& ranges, const void* data,
                       size_t bytes) {
  if (bytes == 0) return;
  const auto begin = reinterpret_cast<uintptr_t>(data);
  ranges.push_back(MemoryRange{begin, begin + bytes});
}

void MemoryAccess::Finish() {
  SortAndMerge(reads_);
  SortAndMerge(writes_);
}

bool MemoryAccess::Overlap(const std::vector<MemoryRange>& a,
                           const std::vector<MemoryRange>& b) {
  if (a.empty() || b.empty()) return false;
  for (const MemoryRange& r : a) {
    // The first range of b ending after r begins; overlap if it starts
    // before r ends.
    auto it = std::upper_bound(b.begin(), b.end(), r.begin,
                               [](uintptr_t value, const MemoryRange& range) {
                                 return value < range.end;
                               });
    if (it != b.end() && it->begin < r.end) return true;
  }
  return false;
}

bool MemoryAccess::ConflictsWith(const MemoryAccess& other) const {
  return Overlap(writes_, other.writes_) || Overlap(writes_, other.reads_) ||
         Overlap(reads_, other.writes_);
}

HazardTracker::HazardTracker(int num_streams, size_t max_pending)
    : num_streams_(num_streams),
      max_pending_(std::max<size_t>(max_pending, 1)),
      streams_(num_streams),
      covered_(static_cast<size_t>(num_streams) * num_streams, 0) {}

std::vector<int> HazardTracker::Add(int stream, MemoryAccess access,
                                    bool wait_all) {
  // need[t]: this operation must come after t's operations [0, need[t]).
  std::vector<uint64_t> need(num_streams_, 0);
  std::vector<int> waits;
  for (int t = 0; t < num_streams_; ++t) {
    if (t == stream) continue;
    const Stream& other = streams_[t];
    const uint64_t from = covered(stream, t);
    if (from >= other.count) continue;  // Nothing new on t.
    if (wait_all || other.count - from > max_pending_) {
      need[t] = other.count;
    } else {
      for (uint64_t i = other.count; i > std::max(from, other.first); --i) {
        if (access.ConflictsWith(other.ops[i - 1 - other.first])) {
          need[t] = i;
          break;
        }
      }
    }
    if (need[t] > 0) waits.push_back(t);
  }
  // Drop a wait another chosen stream already implies (it waited for what
  // is needed on t).
  for (size_t i = 0; i < waits.size();) {
    const int t = waits[i];
    bool implied = false;
    for (int other : waits) {
      if (other != t && covered(other, t) >= need[t]) implied = true;
    }
    if (implied) {
      waits.erase(waits.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
  // Waiting for t's tail orders this stream after all of t's operations and
  // after everything t itself waited for.
  for (int t : waits) {
    covered(stream, t) = streams_[t].count;
    for (int u = 0; u < num_streams_; ++u) {
      if (u != stream && u != t) {
        covered(stream, u) = std::max(covered(stream, u), covered(t, u));
      }
    }
  }
  Stream& own = streams_[stream];
  own.ops.push_back(std::move(access));
  ++own.count;
  for (int t = 0; t < num_streams_; ++t) Prune(t);
  return waits;
}

void HazardTracker::Prune(int t) {
  // Drop what every other stream is already ordered after, and what is more
  // than max_pending_ behind (a stream that far behind waits unchecked).
  Stream& stream = streams_[t];
  uint64_t keep_from = stream.count;
  for (int s = 0; s < num_streams_; ++s) {
    if (s != t) keep_from = std::min(keep_from, covered(s, t));
  }
  if (stream.count > max_pending_) {
    keep_from = std::max(keep_from, stream.count - max_pending_);
  }
  while (stream.first < keep_from && !stream.ops.empty()) {
    stream.ops.pop_front();
    ++stream.first;
  }
}

void HazardTracker::Clear() {
  for (int t = 0; t < num_streams_; ++t) {
    for (int s = 0; s < num_streams_; ++s) covered(s, t) = streams_[t].count;
    Prune(t);
  }
}

}  // namespace ferry::cuda_internal
