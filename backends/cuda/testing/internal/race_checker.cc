#include "ferry/backends/cuda/testing/internal/race_checker.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace ferry::fake_cuda_internal {

void VectorClock::Set(int stream, uint64_t seq) {
  if (static_cast<size_t>(stream) >= clock_.size()) {
    clock_.resize(static_cast<size_t>(stream) + 1, 0);
  }
  clock_[stream] = std::max(clock_[stream], seq);
}

void VectorClock::Join(const VectorClock& other) {
  if (other.clock_.size() > clock_.size()) clock_.resize(other.clock_.size());
  for (size_t i = 0; i < other.clock_.size(); ++i) {
    clock_[i] = std::max(clock_[i], other.clock_[i]);
  }
}

std::vector<std::string> RaceChecker::Add(
    const OpInfo& op, const VectorClock& clock,
    const std::vector<AccessRange>& accesses) {
  std::vector<std::string> reports;
  for (const AccessRange& mine : accesses) {
    if (mine.begin >= mine.end) continue;
    for (const Entry& other : entries_) {
      if (!mine.write && !other.range.write) continue;
      if (other.range.end <= mine.begin || mine.end <= other.range.begin) {
        continue;
      }
      if (other.op.stream == op.stream ||
          clock.Covers(other.op.stream, other.op.seq)) {
        continue;
      }
      const uintptr_t lo = std::max(mine.begin, other.range.begin);
      const uintptr_t hi = std::min(mine.end, other.range.end);
      reports.push_back(absl::StrFormat(
          "fake CUDA: race on device memory [%#x, %#x) (%d bytes): %s %s "
          "it while %s, still in flight, %s it, and nothing orders the two "
          "(no event wait, not the same stream)",
          lo, hi, hi - lo, op.label, mine.write ? "writes" : "reads",
          other.op.label, other.range.write ? "writes" : "reads"));
    }
  }
  for (const AccessRange& mine : accesses) {
    if (mine.begin < mine.end) entries_.push_back(Entry{op, mine});
  }
  return reports;
}

void RaceChecker::Remove(int stream, uint64_t seq) {
  entries_.erase(std::remove_if(entries_.begin(), entries_.end(),
                                [&](const Entry& e) {
                                  return e.op.stream == stream &&
                                         e.op.seq == seq;
                                }),
                 entries_.end());
}

}  // namespace ferry::fake_cuda_internal
