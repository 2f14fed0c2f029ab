// CudaNativeEvent: the CUDA event behind an Event of a CUDA backend, its
// NativeEvent handle (event.h), so another CUDA backend (of any GPU of the
// process) waits for it on the device with cudaStreamWaitEvent.
//
// A backend's work may be held on the host (behind an EnqueueWait on a
// host-side event) when Record() returns its Event; the CUDA event is
// recorded when the record is issued to CUDA. Until then a device-side wait
// is impossible (a wait on an unrecorded CUDA event waits for nothing), so
// waiters hold their work on the host until the Event completes instead.
#ifndef FERRY_BACKENDS_CUDA_CUDA_NATIVE_EVENT_H_
#define FERRY_BACKENDS_CUDA_CUDA_NATIVE_EVENT_H_

#include <atomic>
#include <memory>

#include "ferry/backends/cuda/cuda_event_pool.h"
#include "ferry/backends/event.h"

namespace ferry {

// Thread-safe. Its only change is issued(), once, from false to true.
class CudaNativeEvent final : public NativeEvent {
 public:
  explicit CudaNativeEvent(std::shared_ptr<PooledCudaEvent> event)
      : event_(std::move(event)) {}

  const std::shared_ptr<PooledCudaEvent>& event() const { return event_; }
  // True once cudaEventRecord was issued after the work the Event marks.
  bool issued() const { return issued_.load(std::memory_order_acquire); }
  // Called by the backend right after it issued the record.
  void MarkIssued() const { issued_.store(true, std::memory_order_release); }

  // `event`'s handle if it is a CUDA backend's, else nullptr.
  static const CudaNativeEvent* Of(const Event& event) {
    return dynamic_cast<const CudaNativeEvent*>(event.native().get());
  }

 private:
  const std::shared_ptr<PooledCudaEvent> event_;
  mutable std::atomic<bool> issued_{false};
};

}  // namespace ferry

#endif  // FERRY_BACKENDS_CUDA_CUDA_NATIVE_EVENT_H_
