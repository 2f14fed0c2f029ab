// Event: a point on a backend's timeline, awaitable, that knows its device.
//
// Every backend stream advances a TimelineSemaphore as its operations
// complete; an Event is (that timeline, the value its stream reaches when the
// work enqueued before the event is done), plus the device whose work it
// marks and, where the device has one, a native handle (a CUDA event) that
// other backends of that kind can wait on without going through the host.
// It is a cheap value: copying one needs no pool and no device call.
//
// Waiting, in the three ways every ferry object uses:
//   co_await event               awaitable; resumes on an executor (below)
//   event.WaitBlocking()          blocks the calling thread
//   backend.EnqueueWait(event)    later work on `backend` waits for it;
//                                 Device::WaitMode says whether on the device
//                                 or held on the host
// A device fault fails the timeline, and every wait on its events returns
// that fault.
//
// Where a coroutine resumes is chosen, never inherited from the thread that
// completes the event: `co_await event` resumes on the executor the
// awaiting thread runs for (Executor::Current(): a ThreadPool worker's pool,
// a SyncWait's calling thread), else on DefaultExecutor(); Wait(options)
// with options.resume_on names another. It never resumes on a device
// thread (a stream worker, a completion poller), so code after the
// co_await may block, e.g. call Synchronize(), without deadlocking a device.
// An event that is already complete does not suspend.
#ifndef FERRY_BACKENDS_EVENT_H_
#define FERRY_BACKENDS_EVENT_H_

#include <cstdint>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "ferry/runtime/default_executor.h"
#include "ferry/runtime/timeline_semaphore.h"

namespace ferry {

class Device;

// A device's own handle for an event (a CUDA event recorded on a stream),
// for backends of that device kind to wait on device-side. Immutable once
// made. Thread-safe.
class NativeEvent {
 public:
  virtual ~NativeEvent() = default;
};

// Thread-safe.
class Event {
 public:
  // An event that is already complete (belongs to no device).
  Event();
  // Work on `device` (nullptr: host work) that is done when `timeline`
  // reaches `value`; `native` is the device's handle for it, if any.
  Event(std::shared_ptr<TimelineSemaphore> timeline, uint64_t value,
        const Device* device = nullptr,
        std::shared_ptr<const NativeEvent> native = nullptr)
      : timeline_(std::move(timeline)),
        value_(value),
        device_(device),
        native_(std::move(native)) {}

  bool IsComplete() const { return timeline_->Value() >= value_; }
  // Blocks until complete: OK, the timeline's failure, or DeadlineExceeded.
  absl::Status WaitBlocking(
      absl::Time deadline = absl::InfiniteFuture()) const {
    return timeline_->WaitBlocking(value_, deadline);
  }
  // `co_await event.Wait(options)`: absl::Status, as WaitBlocking. Resumes
  // on options.resume_on, or on CallerExecutor() when it is null.
  TimelineSemaphore::WaitAwaiter Wait(WaitOptions options = {}) const {
    if (options.resume_on == nullptr) options.resume_on = &CallerExecutor();
    return timeline_->Wait(value_, std::move(options));
  }
  TimelineSemaphore::WaitAwaiter operator co_await() const { return Wait(); }

  const std::shared_ptr<TimelineSemaphore>& timeline() const {
    return timeline_;
  }
  uint64_t value() const { return value_; }
  // The device whose work this event marks; nullptr for host work and for
  // the complete event.
  const Device* device() const { return device_; }
  // The device's native handle, or nullptr.
  const std::shared_ptr<const NativeEvent>& native() const { return native_; }

 private:
  std::shared_ptr<TimelineSemaphore> timeline_;
  uint64_t value_ = 0;
  const Device* device_ = nullptr;
  std::shared_ptr<const NativeEvent> native_;
};

}  // namespace ferry

#endif  // FERRY_BACKENDS_EVENT_H_
