// Executors: where coroutines resume.
//
// An Executor takes coroutine handles and resumes them on its own terms:
// InlineExecutor resumes at once on the calling thread, ManualExecutor queues
// them until a test drains it, ThreadPool (thread_pool.h) resumes them on
// worker threads. `co_await executor.Schedule()` moves the awaiting coroutine
// onto the executor. Awaitables that complete on a foreign thread (a device
// worker, the io_uring poller, a timer) take an `Executor*` saying where the
// waiter resumes; nullptr means inline on the completing thread.
//
// Executor::Current() is the executor whose work the calling thread is
// running: a ThreadPool worker's pool, the run loop of a SyncWait in
// progress, a ManualExecutor while it drains. Threads that run device work
// (stream workers, completion pollers) mark themselves with
// DeviceThreadScope; no continuation is ever picked to run there.
#ifndef FERRY_RUNTIME_EXECUTOR_H_
#define FERRY_RUNTIME_EXECUTOR_H_

#include <coroutine>
#include <cstddef>
#include <deque>
#include <mutex>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "ferry/runtime/task.h"

namespace ferry {

// Thread-safe (implementations must accept Post from any thread).
class Executor {
 public:
  virtual ~Executor() = default;

  // The executor the calling thread is running work for, or nullptr (a
  // plain thread, or a device thread).
  static Executor* Current();

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

namespace runtime_internal {
inline thread_local Executor* current_executor = nullptr;
inline thread_local bool device_thread = false;
}  // namespace runtime_internal

inline Executor* Executor::Current() {
  return runtime_internal::current_executor;
}

// Makes `executor` the calling thread's Executor::Current() for its scope.
class ScopedCurrentExecutor {
 public:
  explicit ScopedCurrentExecutor(Executor* executor)
      : saved_(std::exchange(runtime_internal::current_executor, executor)) {}
  ~ScopedCurrentExecutor() { runtime_internal::current_executor = saved_; }
  ScopedCurrentExecutor(const ScopedCurrentExecutor&) = delete;
  ScopedCurrentExecutor& operator=(const ScopedCurrentExecutor&) = delete;

 private:
  Executor* saved_;
};

// Marks the calling thread, for its scope, as a device thread: one that
// runs a device's work in order (a stream worker, a completion poller), so
// that a continuation blocking there could stall the device's own
// completions. Awaitables that choose where to resume never choose it.
class DeviceThreadScope {
 public:
  DeviceThreadScope()
      : saved_executor_(
            std::exchange(runtime_internal::current_executor, nullptr)),
        saved_(std::exchange(runtime_internal::device_thread, true)) {}
  ~DeviceThreadScope() {
    runtime_internal::device_thread = saved_;
    runtime_internal::current_executor = saved_executor_;
  }
  DeviceThreadScope(const DeviceThreadScope&) = delete;
  DeviceThreadScope& operator=(const DeviceThreadScope&) = delete;

 private:
  Executor* saved_executor_;
  bool saved_;
};

// True on a thread inside a DeviceThreadScope.
inline bool IsDeviceThread() { return runtime_internal::device_thread; }

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
    ScopedCurrentExecutor current(this);
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
