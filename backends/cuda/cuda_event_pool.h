// CudaEventPool: timing-free CUDA events of one device, reused.
//
// Creating a CUDA event costs a driver call; the backend records one per
// Record() and several per freed buffer, so events are pooled. A pooled
// event is held by shared_ptr (PooledCudaEvent) wherever it is still needed
// (the completion poller, a fence in any device's allocator, an Event's
// native handle) and returns to its pool when the last holder lets go. The
// pool is itself shared by its events, so it outlives its device if they do.
#ifndef FERRY_BACKENDS_CUDA_CUDA_EVENT_POOL_H_
#define FERRY_BACKENDS_CUDA_CUDA_EVENT_POOL_H_

#include <cuda_runtime_api.h>

#include <memory>
#include <mutex>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"

namespace ferry {

class CudaEventPool;

// One event from a pool. Immutable; the event itself is recorded and
// queried with the CUDA API. Thread-safe.
class PooledCudaEvent {
 public:
  PooledCudaEvent(std::shared_ptr<CudaEventPool> pool, cudaEvent_t event)
      : pool_(std::move(pool)), event_(event) {}
  ~PooledCudaEvent();
  PooledCudaEvent(const PooledCudaEvent&) = delete;
  PooledCudaEvent& operator=(const PooledCudaEvent&) = delete;

  cudaEvent_t get() const { return event_; }
  int ordinal() const;

 private:
  std::shared_ptr<CudaEventPool> pool_;
  const cudaEvent_t event_;
};

// Thread-safe.
class CudaEventPool : public std::enable_shared_from_this<CudaEventPool> {
 public:
  explicit CudaEventPool(int ordinal) : ordinal_(ordinal) {}
  // Destroys the pooled events.
  ~CudaEventPool();

  int ordinal() const { return ordinal_; }
  // An event of the device, from the pool or new (the device's context
  // must be current: CudaDevice::Scope). A CUDA error as a status.
  absl::StatusOr<std::shared_ptr<PooledCudaEvent>> Acquire();

 private:
  friend class PooledCudaEvent;
  void Release(cudaEvent_t event);

  const int ordinal_;
  std::mutex mu_;
  std::vector<cudaEvent_t> free_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ferry

#endif  // FERRY_BACKENDS_CUDA_CUDA_EVENT_POOL_H_
