// HazardTracker: decides which of a backend's streams a new operation must
// wait for, from the memory the operations read and write.
//
// The CUDA backend runs uploads, downloads and kernels on three streams.
// Ordering every operation after the one before it (whatever its stream)
// would be correct but would serialize copies with compute; instead an
// operation waits for another stream only if one of that stream's
// operations not yet waited for touches memory it touches in a conflicting
// way (read after write, write after read, write after write). Then the
// upload of batch k+1's inputs into a free copy slot runs while batch k's
// kernels run, as the scheduler's pipelining intends, while every pair of
// operations on the same bytes keeps the order they were enqueued in.
//
// Waiting for a stream means waiting for its tail (everything enqueued on it
// so far), which also orders the waiter after whatever that stream had
// waited for. Operations may ask to wait for every stream (wait_all): the
// backend does so for kernels, whose memory is only recorded for others to
// check against. A stream keeps at most `max_pending` operations that some
// other stream has not waited for yet; beyond that the next operation from
// any other stream waits, so the checks stay bounded.
//
// Addresses are plain integers: device and pinned host memory share CUDA's
// unified address space, so host and device ranges never overlap falsely.
#ifndef FERRY_BACKENDS_CUDA_INTERNAL_HAZARD_TRACKER_H_
#define FERRY_BACKENDS_CUDA_INTERNAL_HAZARD_TRACKER_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

namespace ferry::cuda_internal {

// Bytes [begin, end).
struct MemoryRange {
  uintptr_t begin = 0;
  uintptr_t end = 0;
};

// What an operation reads and writes. Build with AddRead/AddWrite, then
// Finish() (sorts and merges, for the checks' binary searches).
class MemoryAccess {
 public:
  void AddRead(const void* data, size_t bytes) { Add(reads_, data, bytes); }
  void AddWrite(const void* data, size_t bytes) { Add(writes_, data, bytes); }
  void Finish();

  // True if the two accesses conflict (one writes what the other touches).
  bool ConflictsWith(const MemoryAccess& other) const;

  const std::vector<MemoryRange>& reads() const { return reads_; }
  const std::vector<MemoryRange>& writes() const { return writes_; }

 private:
  static void Add(std::vector<MemoryRange>& ranges, const void* data,
                  size_t bytes);
  // Whether any range of `a` overlaps one of sorted, merged `b`.
  static bool Overlap(const std::vector<MemoryRange>& a,
                      const std::vector<MemoryRange>& b);

  std::vector<MemoryRange> reads_;
  std::vector<MemoryRange> writes_;
};

// Thread-compatible (the backend calls it under its issue lock).
class HazardTracker {
 public:
  HazardTracker(int num_streams, size_t max_pending);

  // Registers an operation on `stream` (its access Finish()ed) and returns
  // the other streams whose tails it must wait for first.
  std::vector<int> Add(int stream, MemoryAccess access, bool wait_all);
  // Everything enqueued so far has completed (after a synchronization).
  void Clear();

  // Operations kept for checking (for tests).
  size_t pending(int stream) const { return streams_[stream].ops.size(); }

 private:
  struct Stream {
    std::deque<MemoryAccess> ops;  // ops[i] has index first + i.
    uint64_t first = 0;            // Index of ops.front().
    uint64_t count = 0;            // Operations ever added.
  };

  // covered_[s][t]: stream s is ordered after t's operations [0, value).
  uint64_t& covered(int s, int t) { return covered_[s * num_streams_ + t]; }
  void Prune(int t);

  const int num_streams_;
  const size_t max_pending_;
  std::vector<Stream> streams_;
  std::vector<uint64_t> covered_;
};

}  // namespace ferry::cuda_internal

#endif  // FERRY_BACKENDS_CUDA_INTERNAL_HAZARD_TRACKER_H_
