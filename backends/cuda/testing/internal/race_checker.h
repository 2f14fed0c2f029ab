// The fake CUDA runtime's device-memory race check.
//
// Every operation on a fake stream (copy, memset, kernel, GEMM) says which
// bytes it reads and writes, and carries a vector clock: for each stream,
// the last operation of that stream it is ordered after (by stream order,
// event waits and the legacy default stream's implicit synchronization).
// When an operation is enqueued, every conflicting operation (one of the
// two writes the bytes) that is still in flight must be ordered before it;
// otherwise the two may run in either order or at once on a GPU: a race,
// reported with both operations. Completed operations are forgotten: the
// host can only have ordered them by waiting for them, which a host thread
// may do in ways the fake cannot see, so they are never reported.
#ifndef FERRY_BACKENDS_CUDA_TESTING_INTERNAL_RACE_CHECKER_H_
#define FERRY_BACKENDS_CUDA_TESTING_INTERNAL_RACE_CHECKER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ferry::fake_cuda_internal {

// For each stream id, the sequence number of the last of its operations
// that happened before.
class VectorClock {
 public:
  uint64_t Get(int stream) const {
    return static_cast<size_t>(stream) < clock_.size() ? clock_[stream] : 0;
  }
  void Set(int stream, uint64_t seq);
  void Join(const VectorClock& other);
  // True if operation `seq` of `stream` happened before.
  bool Covers(int stream, uint64_t seq) const { return Get(stream) >= seq; }

 private:
  std::vector<uint64_t> clock_;
};

struct AccessRange {
  uintptr_t begin = 0;
  uintptr_t end = 0;  // Exclusive.
  bool write = false;
};

struct OpInfo {
  int stream = 0;
  uint64_t seq = 0;
  std::string label;  // e.g. "cudaMemcpyAsync(h2d, 4096 bytes) on stream 3".
};

// Thread-compatible (the fake calls it under its lock).
class RaceChecker {
 public:
  // Checks `op` (ordered after `clock`) against the operations in flight,
  // then records it as in flight. Returns a report per race found.
  std::vector<std::string> Add(const OpInfo& op, const VectorClock& clock,
                               const std::vector<AccessRange>& accesses);
  // Operation `seq` of `stream` completed.
  void Remove(int stream, uint64_t seq);
  size_t in_flight() const { return entries_.size(); }

 private:
  struct Entry {
    OpInfo op;
    AccessRange range;
  };
  std::vector<Entry> entries_;
};

}  // namespace ferry::fake_cuda_internal

#endif  // FERRY_BACKENDS_CUDA_TESTING_INTERNAL_RACE_CHECKER_H_
