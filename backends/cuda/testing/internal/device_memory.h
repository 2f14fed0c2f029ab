// The fake CUDA runtime's memory: device allocations as host memory the
// host cannot touch, pinned and registered host ranges, and what a pointer
// is.
//
// With the guard on, each allocation is a memfd mapped twice: PROT_NONE at
// the device address cudaMalloc returns (a host dereference faults) and
// read-write at a private alias that only the fake's engines use after
// Translate(). New allocations are filled with 0xff (NaN as floats) so a
// read of memory nobody wrote shows. Freed ranges stay reserved, PROT_NONE,
// in a quarantine of recent frees, so a stale device pointer is recognised
// (and faults on the host) instead of aliasing a new allocation.
#ifndef FERRY_BACKENDS_CUDA_TESTING_INTERNAL_DEVICE_MEMORY_H_
#define FERRY_BACKENDS_CUDA_TESTING_INTERNAL_DEVICE_MEMORY_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"

namespace ferry::fake_cuda_internal {

enum class PointerKind {
  kDevice,         // In a live device allocation.
  kDeviceOverrun,  // Starts in a live allocation and runs past its end.
  kFreed,          // In a quarantined (freed) device allocation.
  kPinned,         // cudaHostAlloc'ed or cudaHostRegister'ed host memory.
  kPageable,       // Any other host address.
};

struct PointerInfo {
  PointerKind kind = PointerKind::kPageable;
  int device = -1;     // For kDevice/kFreed: the owning device.
  uintptr_t base = 0;  // The allocation or host range.
  size_t size = 0;
};

// Thread-safe.
class DeviceMemory {
 public:
  explicit DeviceMemory(bool guarded) : guarded_(guarded) {}
  ~DeviceMemory();
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  // Maps `size` bytes (> 0) of device memory for `device`; ResourceExhausted
  // if the system refuses.
  absl::StatusOr<void*> Allocate(int device, size_t size);
  // Frees the allocation starting at `address`: false if there is none.
  // The range is quarantined.
  bool Free(void* address, int* device, size_t* size);

  // Host memory of cudaHostAlloc (ResourceExhausted if refused), and its
  // release (false if `address` is not such memory).
  absl::StatusOr<void*> AllocateHost(size_t size);
  bool FreeHost(void* address);
  // Host registration of [address, address + size), page-granular as in
  // CUDA: AlreadyExists if a page is registered already; PermissionDenied
  // if a page is not writable and `read_only` is false; InvalidArgument if
  // a page is not mapped.
  absl::Status Register(void* address, size_t size, bool read_only);
  // False unless `address` starts a registration.
  bool Unregister(void* address);

  // What [address, address + bytes) is: kDevice only if the whole range
  // lies in one live allocation, kPinned only if it lies in one pinned
  // range.
  PointerInfo Classify(const void* address, size_t bytes) const;
  // The host address the fake's engines use for device bytes [address,
  // address + bytes) of a live allocation; nullptr if they are not one.
  void* Translate(const void* address, size_t bytes) const;
  // Describes what lies at `address`, for error messages.
  std::string Describe(const void* address) const;

 private:
  struct Allocation {
    int device = 0;
    size_t size = 0;    // As requested.
    size_t mapped = 0;  // Whole pages.
    char* alias = nullptr;
  };
  struct HostRange {
    size_t size = 0;
    bool allocated = false;  // cudaHostAlloc (else registered).
    bool read_only = false;
  };

  // Entry of `map` containing `address`, or end().
  template <typename Map>
  static typename Map::const_iterator Containing(const Map& map,
                                                 uintptr_t address);
  void EvictQuarantineLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const bool guarded_;
  mutable std::mutex mu_;
  std::map<uintptr_t, Allocation> live_ ABSL_GUARDED_BY(mu_);
  std::map<uintptr_t, Allocation> freed_ ABSL_GUARDED_BY(mu_);
  std::deque<uintptr_t> quarantine_order_ ABSL_GUARDED_BY(mu_);
  size_t quarantined_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uintptr_t, HostRange> host_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ferry::fake_cuda_internal

#endif  // FERRY_BACKENDS_CUDA_TESTING_INTERNAL_DEVICE_MEMORY_H_
