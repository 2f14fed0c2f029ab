// TimelineSemaphore: a 64-bit counter that only rises, awaitable.
//
// `co_await sem.Wait(v)` resumes once the value reaches v. A failure is
// sticky: Fail(status) wakes every present waiter with that status and every
// future Wait returns it at once. Waits take a deadline, a cancellation token
// and the executor to resume on. Backend events and copy-slot reuse are built
// on it (IREE's semaphore model); AsyncEvent is the one-shot special case.
#ifndef FERRY_RUNTIME_TIMELINE_SEMAPHORE_H_
#define FERRY_RUNTIME_TIMELINE_SEMAPHORE_H_

#include <atomic>
#include <coroutine>
#include <cstdint>
#include <mutex>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "ferry/runtime/cancellation.h"
#include "ferry/runtime/executor.h"
#include "ferry/runtime/timer_queue.h"

namespace ferry {

struct WaitOptions {
  // The wait fails with DeadlineExceeded after this time.
  absl::Time deadline = absl::InfiniteFuture();
  // The wait fails with Cancelled when this token is cancelled.
  CancellationToken cancellation;
  // Where the waiter resumes; nullptr resumes it inline on the thread that
  // completes the wait (the signaller, the timer thread, or the canceller).
  Executor* resume_on = nullptr;
};

// Thread-safe. Must outlive its waiters.
class TimelineSemaphore {
 public:
  explicit TimelineSemaphore(uint64_t initial_value = 0)
      : value_(initial_value) {}
  ~TimelineSemaphore();

  TimelineSemaphore(const TimelineSemaphore&) = delete;
  TimelineSemaphore& operator=(const TimelineSemaphore&) = delete;

  // The current value (a snapshot).
  uint64_t Value() const { return value_.load(std::memory_order_acquire); }

  // Raises the value to `value` and wakes the waiters it satisfies.
  // Signalling a value not above the current one is a no-op if equal and an
  // InvalidArgument error if lower; signalling a failed semaphore returns its
  // failure.
  absl::Status Signal(uint64_t value);

  // Marks the semaphore failed with `status` (not OK), waking every waiter.
  // The first failure sticks; later ones are ignored.
  void Fail(absl::Status status);

  // OK, or the sticky failure.
  absl::Status status() const;

  class WaitAwaiter;
  // `co_await sem.Wait(v)` yields absl::Status: OK once Value() >= v, the
  // failure, DeadlineExceeded or Cancelled.
  WaitAwaiter Wait(uint64_t value, WaitOptions options = {});

  // Blocks the calling thread; same results as Wait.
  absl::Status WaitBlocking(uint64_t value,
                            absl::Time deadline = absl::InfiniteFuture());

  class WaitAwaiter {
   public:
    WaitAwaiter(TimelineSemaphore* semaphore, uint64_t value,
                WaitOptions options)
        : semaphore_(semaphore), target_(value), options_(std::move(options)) {}
    WaitAwaiter(const WaitAwaiter&) = delete;
    WaitAwaiter& operator=(const WaitAwaiter&) = delete;

    bool await_ready();
    bool await_suspend(std::coroutine_handle<> handle);
    absl::Status await_resume() { return std::move(result_); }

   private:
    friend class TimelineSemaphore;
    enum class Completion { kSignalled, kTimer, kCancelled };

    // Called by whoever unlinked this waiter; finishes and resumes it.
    void Complete(absl::Status status, Completion by);

    TimelineSemaphore* semaphore_;
    uint64_t target_;
    WaitOptions options_;
    absl::Status result_;
    std::coroutine_handle<> handle_;
    // Intrusive list links; guarded by semaphore_->mu_.
    WaitAwaiter* prev_ = nullptr;
    WaitAwaiter* next_ = nullptr;
    bool linked_ = false;
    TimerQueue::TimerId timer_ = 0;
    std::optional<CancellationCallback> on_cancel_;
  };

 private:
  // Unlinks `waiter` if still linked; returns whether it did.
  bool Unlink(WaitAwaiter* waiter) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Link(WaitAwaiter* waiter) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::atomic<uint64_t> value_;
  std::atomic<bool> failed_{false};
  mutable std::mutex mu_;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  WaitAwaiter* head_ ABSL_GUARDED_BY(mu_) = nullptr;
};

// A one-shot event: Set() once, and every present and future waiter resumes.
// Thread-safe.
class AsyncEvent {
 public:
  void Set() { (void)semaphore_.Signal(1); }
  bool IsSet() const { return semaphore_.Value() >= 1; }
  TimelineSemaphore::WaitAwaiter Wait(WaitOptions options = {}) {
    return semaphore_.Wait(1, std::move(options));
  }
  absl::Status WaitBlocking(absl::Time deadline = absl::InfiniteFuture()) {
    return semaphore_.WaitBlocking(1, deadline);
  }

 private:
  TimelineSemaphore semaphore_;
};

}  // namespace ferry

#endif  // FERRY_RUNTIME_TIMELINE_SEMAPHORE_H_
