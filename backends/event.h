// Event: a point on a backend's timeline, awaitable.
//
// Every backend stream advances a TimelineSemaphore as its operations
// complete; an Event is (that timeline, the value its stream reaches when the
// work enqueued before the event is done). It is a cheap value: copying one
// needs no pool and no device call. Host code blocks with Synchronize(),
// coroutines `co_await event`, and other backends enqueue a device-side wait
// with Backend::Wait(event). A device fault fails the timeline, and every
// wait on its events returns that fault.
#ifndef FERRY_BACKENDS_EVENT_H_
#define FERRY_BACKENDS_EVENT_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "ferry/runtime/timeline_semaphore.h"

namespace ferry {

// Thread-safe.
class Event {
 public:
  // An event that is already complete.
  Event();
  Event(std::shared_ptr<TimelineSemaphore> timeline, uint64_t value)
      : timeline_(std::move(timeline)), value_(value) {}

  bool IsComplete() const { return timeline_->Value() >= value_; }
  // OK when complete, the timeline's failure, or DeadlineExceeded.
  absl::Status Synchronize(absl::Time deadline = absl::InfiniteFuture()) const {
    return timeline_->WaitBlocking(value_, deadline);
  }
  // `co_await event.Wait(options)`: absl::Status, as Synchronize.
  TimelineSemaphore::WaitAwaiter Wait(WaitOptions options = {}) const {
    return timeline_->Wait(value_, std::move(options));
  }
  TimelineSemaphore::WaitAwaiter operator co_await() const { return Wait(); }

  const std::shared_ptr<TimelineSemaphore>& timeline() const {
    return timeline_;
  }
  uint64_t value() const { return value_; }

 private:
  std::shared_ptr<TimelineSemaphore> timeline_;
  uint64_t value_ = 0;
};

}  // namespace ferry

#endif  // FERRY_BACKENDS_EVENT_H_
