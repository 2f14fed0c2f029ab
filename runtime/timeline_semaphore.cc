#include "ferry/runtime/timeline_semaphore.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "ferry/runtime/status_macros.h"
#include "ferry/runtime/sync_wait.h"
#include "ferry/runtime/task.h"

namespace ferry {

TimelineSemaphore::~TimelineSemaphore() {
  std::lock_guard<std::mutex> lock(mu_);
  // Destroying a semaphore that coroutines still wait on would strand them.
  FERRY_CHECK(head_ == nullptr);
}

absl::Status TimelineSemaphore::Signal(uint64_t value) {
  WaitAwaiter* ready = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.ok()) return failure_;
    const uint64_t current = value_.load(std::memory_order_relaxed);
    if (value < current) {
      return absl::InvalidArgumentError(
          absl::StrCat("timeline semaphore signalled to ", value,
                       " below its value ", current));
    }
    if (value == current) return absl::OkStatus();
    value_.store(value, std::memory_order_release);
    for (WaitAwaiter* w = head_; w != nullptr;) {
      WaitAwaiter* next = w->next_;
      if (w->target_ <= value) {
        Unlink(w);
        w->next_ = ready;
        ready = w;
      }
      w = next;
    }
  }
  while (ready != nullptr) {
    WaitAwaiter* next = ready->next_;  // Read before the waiter resumes.
    ready->Complete(absl::OkStatus(), WaitAwaiter::Completion::kSignalled);
    ready = next;
  }
  return absl::OkStatus();
}

void TimelineSemaphore::Fail(absl::Status status) {
  FERRY_CHECK(!status.ok());
  WaitAwaiter* waiters = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.ok()) return;
    failure_ = status;
    failed_.store(true, std::memory_order_release);
    while (head_ != nullptr) {
      WaitAwaiter* w = head_;
      Unlink(w);
      w->next_ = waiters;
      waiters = w;
    }
  }
  while (waiters != nullptr) {
    WaitAwaiter* next = waiters->next_;
    waiters->Complete(status, WaitAwaiter::Completion::kSignalled);
    waiters = next;
  }
}

absl::Status TimelineSemaphore::status() const {
  if (!failed_.load(std::memory_order_acquire)) return absl::OkStatus();
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

TimelineSemaphore::WaitAwaiter TimelineSemaphore::Wait(uint64_t value,
                                                       WaitOptions options) {
  return WaitAwaiter(this, value, std::move(options));
}

namespace {
Task<absl::Status> WaitTask(TimelineSemaphore* semaphore, uint64_t value,
                            absl::Time deadline) {
  WaitOptions options;
  options.deadline = deadline;
  co_return co_await semaphore->Wait(value, std::move(options));
}
}  // namespace

absl::Status TimelineSemaphore::WaitBlocking(uint64_t value,
                                             absl::Time deadline) {
  return SyncWait(WaitTask(this, value, deadline));
}

void TimelineSemaphore::Link(WaitAwaiter* waiter) {
  waiter->prev_ = nullptr;
  waiter->next_ = head_;
  if (head_ != nullptr) head_->prev_ = waiter;
  head_ = waiter;
  waiter->linked_ = true;
}

bool TimelineSemaphore::Unlink(WaitAwaiter* waiter) {
  if (!waiter->linked_) return false;
  if (waiter->prev_ != nullptr) {
    waiter->prev_->next_ = waiter->next_;
  } else {
    head_ = waiter->next_;
  }
  if (waiter->next_ != nullptr) waiter->next_->prev_ = waiter->prev_;
  waiter->prev_ = waiter->next_ = nullptr;
  waiter->linked_ = false;
  return true;
}

bool TimelineSemaphore::WaitAwaiter::await_ready() {
  if (semaphore_->failed_.load(std::memory_order_acquire)) {
    result_ = semaphore_->status();
    return true;
  }
  if (semaphore_->Value() >= target_) return true;
  if (options_.cancellation.IsCancelled()) {
    result_ = absl::CancelledError("wait on timeline semaphore cancelled");
    return true;
  }
  return false;
}

bool TimelineSemaphore::WaitAwaiter::await_suspend(
    std::coroutine_handle<> handle) {
  handle_ = handle;
  // Arm the timer and the cancellation callback before linking: each only
  // acts on a linked waiter, and the checks under the lock below cover the
  // case where one fired before the link.
  const bool has_deadline = options_.deadline != absl::InfiniteFuture();
  if (has_deadline) {
    timer_ = TimerQueue::Default().Schedule(options_.deadline, [this] {
      bool unlinked;
      {
        std::lock_guard<std::mutex> lock(semaphore_->mu_);
        unlinked = semaphore_->Unlink(this);
      }
      if (unlinked) {
        Complete(absl::DeadlineExceededError(
                     absl::StrCat("timeline semaphore did not reach ", target_,
                                  " before the deadline")),
                 Completion::kTimer);
      }
    });
  }
  if (options_.cancellation.CanBeCancelled()) {
    on_cancel_.emplace(options_.cancellation, [this] {
      bool unlinked;
      {
        std::lock_guard<std::mutex> lock(semaphore_->mu_);
        unlinked = semaphore_->Unlink(this);
      }
      if (unlinked) {
        Complete(absl::CancelledError("wait on timeline semaphore cancelled"),
                 Completion::kCancelled);
      }
    });
  }
  {
    std::lock_guard<std::mutex> lock(semaphore_->mu_);
    if (!semaphore_->failure_.ok()) {
      result_ = semaphore_->failure_;
    } else if (semaphore_->value_.load(std::memory_order_relaxed) >= target_) {
      result_ = absl::OkStatus();
    } else if (options_.cancellation.IsCancelled()) {
      result_ = absl::CancelledError("wait on timeline semaphore cancelled");
    } else if (has_deadline && absl::Now() >= options_.deadline) {
      result_ = absl::DeadlineExceededError(
          absl::StrCat("timeline semaphore did not reach ", target_,
                       " before the deadline"));
    } else {
      semaphore_->Link(this);
      return true;  // From here on, whoever unlinks us completes us.
    }
  }
  // Completed without suspending: disarm before the frame moves on.
  if (timer_ != 0) TimerQueue::Default().Cancel(timer_);
  on_cancel_.reset();
  return false;
}

void TimelineSemaphore::WaitAwaiter::Complete(absl::Status status,
                                              Completion by) {
  result_ = std::move(status);
  if (by != Completion::kTimer && timer_ != 0) {
    TimerQueue::Default().Cancel(timer_);
  }
  if (by != Completion::kCancelled) on_cancel_.reset();
  Executor* executor = options_.resume_on;
  std::coroutine_handle<> handle = handle_;
  // `this` may be destroyed as soon as the coroutine resumes.
  if (executor != nullptr) {
    executor->Post(handle);
  } else {
    Resume(handle);
  }
}

}  // namespace ferry
