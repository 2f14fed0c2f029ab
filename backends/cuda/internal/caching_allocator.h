// CachingAllocator: a stream-ordered caching pool over a device's raw
// allocator (cudaMalloc), with PyTorch's reuse rule.
//
// cudaMalloc and cudaFree are slow and cudaFree synchronizes the device, so
// freed blocks are kept and handed out again. A block may still be read or
// written by work queued on device streams when it is freed, so every free
// names the stream that owns the block and fences (events) recorded on the
// other streams that used it:
//   - the owning stream may reuse it as soon as those fences complete (its
//     own later work runs after its earlier work);
//   - any other stream also waits for `own_fence`, recorded on the owner.
// Sizes are rounded (512 B below 1 MiB, 2 MiB above) so blocks fit later
// requests; a cached block serves a request up to 2x smaller than itself.
// When the device is out of memory, idle cached blocks are released and the
// allocation retried; if it still fails, cached blocks whose fences are
// pending on the device are waited for (not those whose work is still held
// on the host: that could wait forever), released, and the allocation
// retried once more; then it fails with ResourceExhausted, naming the
// sizes. Memory goes back to the device (cudaFree, which synchronizes the
// device) outside the allocator's lock, so other threads keep allocating
// from the cache meanwhile.
#ifndef FERRY_BACKENDS_CUDA_INTERNAL_CACHING_ALLOCATOR_H_
#define FERRY_BACKENDS_CUDA_INTERNAL_CACHING_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ferry::cuda_internal {

// The device's own allocator (cudaMalloc/cudaFree in the backend; a host
// fake in tests).
class RawDeviceMemory {
 public:
  virtual ~RawDeviceMemory() = default;
  // ResourceExhausted when the device is out of memory.
  virtual absl::StatusOr<void*> Allocate(size_t size) = 0;
  virtual void Free(void* ptr) = 0;
};

// A point on a stream (a recorded CUDA event in the backend).
class Fence {
 public:
  virtual ~Fence() = default;
  // True once the work before the fence has completed; errors count as
  // complete (the work will not touch the memory any more).
  virtual bool IsComplete() = 0;
  // Blocks until complete and returns true, if completing needs nothing
  // from the host (the work is on the device); returns false at once
  // otherwise (work still held on the host behind an event).
  virtual bool Wait() = 0;
  // Blocks until complete, work still held on the host included (until the
  // thread that releases it has issued it, then until the device ran it):
  // for memory that cannot be handed back later, e.g. pinned host memory
  // about to be unpinned or freed. By default Wait().
  virtual void WaitIncludingHeld() { (void)Wait(); }
};

using FenceList = std::vector<std::shared_ptr<Fence>>;

// Stream identifiers: any nonzero value naming a stream; kNoStream for a
// block with no owner (only fences guard it).
inline constexpr uint64_t kNoStream = 0;

struct CachingAllocatorStats {
  size_t allocated_bytes = 0;  // In blocks handed out.
  size_t cached_bytes = 0;     // In free blocks kept.
  size_t peak_bytes = 0;       // Peak of allocated + cached.
  int64_t hits = 0;            // Requests served from the cache.
  int64_t misses = 0;          // Requests that called the raw allocator.
  int64_t releases = 0;        // Cached blocks given back to the device.
  int64_t oom_retries = 0;     // Out-of-memory retries after releasing.
};

// Thread-safe.
class CachingAllocator {
 public:
  struct Block {
    void* ptr = nullptr;
    size_t size = 0;  // Rounded size.
  };

  // `memory` must outlive the allocator.
  explicit CachingAllocator(RawDeviceMemory* memory) : memory_(memory) {}
  // Gives every cached block back. Blocks still handed out are leaked (their
  // memory is the device's until the process ends) and counted on stderr.
  ~CachingAllocator();

  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  static size_t RoundSize(size_t size);

  // A block of at least `size` bytes (> 0) for `stream`.
  absl::StatusOr<Block> Allocate(size_t size, uint64_t stream);
  // Returns `block` to the cache; see the class comment for the fences.
  void Free(Block block, uint64_t stream, std::shared_ptr<Fence> own_fence,
            FenceList other_fences);
  // Gives cached blocks whose fences have completed back to the device;
  // returns the bytes released.
  size_t ReleaseIdle();

  CachingAllocatorStats stats() const;

 private:
  struct Cached {
    Block block;
    uint64_t stream;
    std::shared_ptr<Fence> own_fence;
    FenceList other_fences;
  };

  // Whether `cached` may be handed to `stream` now (drops completed fences).
  static bool Reusable(Cached& cached, uint64_t stream);
  // Takes the cached blocks whose fences completed out of the cache.
  std::vector<Block> TakeIdleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives `blocks` back to the device (outside the lock); returns bytes.
  size_t Release(const std::vector<Block>& blocks);
  // Waits for the fences of the cached blocks that the device alone will
  // complete, and releases those blocks; returns bytes released.
  size_t WaitAndReleaseCached();
  void UpdatePeak() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CountOomRetry();

  RawDeviceMemory* const memory_;
  mutable std::mutex mu_;
  std::multimap<size_t, Cached> cache_ ABSL_GUARDED_BY(mu_);  // By size.
  CachingAllocatorStats stats_ ABSL_GUARDED_BY(mu_);
  int64_t live_blocks_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ferry::cuda_internal

#endif  // FERRY_BACKENDS_CUDA_INTERNAL_CACHING_ALLOCATOR_H_
