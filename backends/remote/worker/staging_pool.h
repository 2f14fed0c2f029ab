// StagingPool: host buffers for bytes on their way into or out of a
// device's memory, kept for reuse. A fresh buffer's pages are faulted in
// and zeroed by the kernel on first touch, which cost as much CPU as the
// copy itself when every 4 MiB piece of a weight upload took a new one.
#ifndef FERRY_BACKENDS_REMOTE_WORKER_STAGING_POOL_H_
#define FERRY_BACKENDS_REMOTE_WORKER_STAGING_POOL_H_

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "ferry/backends/buffer.h"

namespace ferry::remote {

// Thread-safe; buffers may be released on any thread, also after the pool
// is gone (they are then freed).
class StagingPool {
 public:
  // Keeps at most `max_kept_bytes` of released buffers, and hands out at
  // most `max_in_use_bytes` at once (past it: ResourceExhausted).
  explicit StagingPool(size_t max_kept_bytes,
                       size_t max_in_use_bytes = ~size_t{0});

  // A buffer of `type` of at least `size` bytes; it comes back to the pool
  // when its last reference goes. Sizes up to 16 MiB round up to a power
  // of two of at least 64 KiB, so that near sizes share buffers; larger
  // ones are allocated exactly and not kept.
  absl::StatusOr<std::shared_ptr<Buffer>> Acquire(BufferType& type,
                                                  size_t size);

  // Bytes of released buffers kept now, and of buffers handed out.
  size_t kept_bytes() const;
  size_t in_use_bytes() const;

 private:
  struct Kept {
    mutable std::mutex mu;
    size_t max_bytes = 0;
    size_t bytes ABSL_GUARDED_BY(mu) = 0;
    size_t max_in_use = 0;
    size_t in_use ABSL_GUARDED_BY(mu) = 0;
    std::map<std::pair<BufferType*, size_t>,
             std::vector<std::unique_ptr<Buffer>>>
        free ABSL_GUARDED_BY(mu);
  };
  std::shared_ptr<Kept> kept_;
};

}  // namespace ferry::remote

#endif  // FERRY_BACKENDS_REMOTE_WORKER_STAGING_POOL_H_
