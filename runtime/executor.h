// Executors: where coroutines resume.
//
// An Executor takes coroutine handles and resumes them on its own terms:
// InlineExecutor resumes at once on the calling thread, ManualExecutor queues
// them until a test drains it, ThreadPool (thread_pool.h) resumes them on
// worker threads. `co_await executor.Schedule()` moves the awaiting coroutine
// onto the executor. Awaitables that complete on a foreign thread (a device
// worker, the io_uring poller, a timer) take an `Executor*` saying where the
// waiter resumes; nullptr means inline on the completing thread.
#ifndef FERRY_RUNTIME_EXECUTOR_H_
#define FERRY_RUNTIME_EXECUTOR_H_

#include <coroutine>
#include <cstddef>
#include <deque>
#include <mutex>

#include "absl/base/thread_annotations.h"
#include "ferry/runtime/task.h"

namespace ferry {

// Thread-safe (implementations must accept Post from any thread).
class Executor {
 public:
  virtual ~Executor() = default;

  // Arranges for `handle` to be resumed on this executor, exactly once.
  virtual void Post(std::coroutine_handle<> handle) = 0;

  struct ScheduleAwaiter {
    Executor* executor;
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> handle) const {
      executor->Post(handle);
    }
    void await_resume() const noexcept {}
  };

  // `co_await executor.Schedule()` continues the coroutine on this executor.
  ScheduleAwaiter Schedule() { return ScheduleAwaiter{this}; }
};

// Resumes handles immediately on the posting thread. Thread-safe.
class InlineExecutor final : public Executor {
 public:
  void Post(std::coroutine_handle<> handle) override { Resume(handle); }
};

// Queues handles until RunUntilIdle() is called; deterministic for tests.
// Thread-safe.
class ManualExecutor final : public Executor {
 public:
  void Post(std::coroutine_handle<> handle) override {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(handle);
  }

  // Resumes queued handles (including ones posted while running) until the
  // queue is empty. Returns how many were resumed.
  size_t RunUntilIdle() {
    size_t resumed = 0;
    for (;;) {
      std::coroutine_handle<> next;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (queue_.empty()) return resumed;
        next = queue_.front();
        queue_.pop_front();
      }
      Resume(next);
      ++resumed;
    }
  }

  size_t pending() const {
    std::lock_guard<std::mutex> lock(mu_);
    return queue_.size();
  }

 private:
  mutable std::mutex mu_;
  std::deque<std::coroutine_handle<>> queue_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ferry

#endif  // FERRY_RUNTIME_EXECUTOR_H_
