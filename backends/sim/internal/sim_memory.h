// Memory for the simulated device: device memory the host cannot touch, and
// the process-wide registry of pinned host ranges.
//
// Device memory is host memory underneath, so the CPU kernels can compute on
// it. With the guard on, every allocation is a memfd mapped twice: once with
// PROT_NONE at the "device address" that Buffer::base() and Tensor::data
// hold (any host dereference faults with SIGSEGV), and once read-write at an
// alias that only the simulated engines use, after Translate(). With the
// guard off, one plain mapping serves as both.
#ifndef FERRY_BACKENDS_SIM_INTERNAL_SIM_MEMORY_H_
#define FERRY_BACKENDS_SIM_INTERNAL_SIM_MEMORY_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <shared_mutex>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"

namespace ferry {
namespace sim_internal {

// Thread-safe.
class SimMemory {
 public:
  explicit SimMemory(bool guarded) : guarded_(guarded) {}
  // Unmaps what is still mapped.
  ~SimMemory();
  SimMemory(const SimMemory&) = delete;
  SimMemory& operator=(const SimMemory&) = delete;

  bool guarded() const { return guarded_; }

  // Maps `size` bytes (whole pages, at least one; zero-filled) and returns
  // the device address, page-aligned. ResourceExhausted if the system
  // refuses.
  absl::StatusOr<char*> Map(size_t size);
  // Unmaps the mapping that starts at `device_address`.
  void Unmap(char* device_address);

  // Returns the engine-side address of device bytes [address, address +
  // size), which must lie inside one mapping; nullptr if they do not.
  char* Translate(const void* address, size_t size) const;

 private:
  struct Region {
    size_t size = 0;    // As requested.
    size_t mapped = 0;  // Whole pages.
    char* alias = nullptr;
  };

  const bool guarded_;
  mutable std::shared_mutex mu_;
  std::map<uintptr_t, Region> regions_ ABSL_GUARDED_BY(mu_);
};

// Host ranges allocated as pinned memory by any simulated device (pinned
// memory is portable across devices, as with cudaHostAllocPortable).
// Thread-safe.
class PinnedRanges {
 public:
  static PinnedRanges& Global();

  void Add(const void* begin, size_t size);
  void Remove(const void* begin);
  // True if [begin, begin + size) lies inside one pinned range.
  bool Contains(const void* begin, size_t size) const;

 private:
  mutable std::mutex mu_;
  std::map<uintptr_t, size_t> ranges_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sim_internal
}  // namespace ferry

#endif  // FERRY_BACKENDS_SIM_INTERNAL_SIM_MEMORY_H_
