// SyncWait: runs a Task from plain (non-coroutine) code and blocks until it
// completes. The task starts on the calling thread; while it runs, the
// calling thread is its Executor::Current(), so continuations that resume
// on the caller's executor (e.g. after awaiting a device event) run on the
// calling thread too.
#ifndef FERRY_RUNTIME_SYNC_WAIT_H_
#define FERRY_RUNTIME_SYNC_WAIT_H_

#include <condition_variable>
#include <coroutine>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <type_traits>
#include <utility>

#include "ferry/runtime/executor.h"
#include "ferry/runtime/task.h"

namespace ferry {
namespace runtime_internal {

// The calling thread's run loop. While a SyncWait runs on a thread, its run
// loop is the thread's Executor::Current(): continuations posted to it run
// on that thread, the one blocked in SyncWait, so code after a co_await in
// a SyncWait'ed task continues where SyncWait was called (unless it is a
// device thread, which never runs continuations). Posts that arrive while
// no SyncWait runs on the loop's thread go to DefaultExecutor(). Loops are
// never freed (an awaiter may keep a loop's address after SyncWait
// returns): a thread's loop is recycled for a new thread when it exits.
// Thread-safe.
class ThreadRunLoop final : public Executor {
 public:
  static ThreadRunLoop& ForThisThread();

  void Post(std::coroutine_handle<> handle) override;

  // Resumes posted handles on the calling thread until `done` is set (by
  // SetDone), then hands those still queued to DefaultExecutor().
  void RunUntilDone(const bool& done);
  // Sets `done` and wakes RunUntilDone.
  void SetDone(bool& done);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::coroutine_handle<>> queue_;  // Guarded by mu_.
  int active_ = 0;  // RunUntilDone calls in progress; guarded by mu_.
};

// The coroutine SyncWait runs: awaits the user's task, then tells the loop.
class SyncWaitDriver {
 public:
  struct promise_type {
    ThreadRunLoop* loop = nullptr;
    bool* done = nullptr;
    SyncWaitDriver get_return_object() noexcept {
      return SyncWaitDriver(
          std::coroutine_handle<promise_type>::from_promise(*this));
    }
    std::suspend_always initial_suspend() noexcept { return {}; }
    auto final_suspend() noexcept {
      struct Awaiter {
        bool await_ready() noexcept { return false; }
        void await_suspend(std::coroutine_handle<promise_type> h) noexcept {
          h.promise().loop->SetDone(*h.promise().done);
        }
        void await_resume() noexcept {}
      };
      return Awaiter{};
    }
    void return_void() noexcept {}
    // The driver body catches everything into the result slot.
    void unhandled_exception() noexcept { std::terminate(); }
  };

  explicit SyncWaitDriver(std::coroutine_handle<promise_type> handle)
      : handle_(handle) {}
  SyncWaitDriver(SyncWaitDriver&& other) noexcept
      : handle_(std::exchange(other.handle_, {})) {}
  ~SyncWaitDriver() {
    if (handle_) handle_.destroy();
  }

  void RunAndWait() {
    ThreadRunLoop& loop = ThreadRunLoop::ForThisThread();
    bool done = false;
    handle_.promise().loop = &loop;
    handle_.promise().done = &done;
    NestedTrampolineScope scope;
    {
      ScopedCurrentExecutor current(IsDeviceThread() ? nullptr : &loop);
      Resume(handle_);
    }
    loop.RunUntilDone(done);
  }

 private:
  std::coroutine_handle<promise_type> handle_;
};

template <typename T>
using SyncWaitStorage =
    std::conditional_t<std::is_void_v<T>, bool, std::optional<T>>;

template <typename T>
SyncWaitDriver MakeSyncWaitDriver(Task<T>& task, SyncWaitStorage<T>& result,
                                  std::exception_ptr& error) {
  try {
    if constexpr (std::is_void_v<T>) {
      co_await task;
      result = true;
    } else {
      result.emplace(co_await task);
    }
  } catch (...) {
    error = std::current_exception();
  }
}

}  // namespace runtime_internal

// Runs `task` to completion, blocking the calling thread, and returns its
// result (rethrowing its exception). Must not be called from a thread the
// task needs in order to finish (e.g. the only worker of its pool).
template <typename T>
T SyncWait(Task<T> task) {
  runtime_internal::SyncWaitStorage<T> result{};
  std::exception_ptr error;
  runtime_internal::MakeSyncWaitDriver(task, result, error).RunAndWait();
  if (error) std::rethrow_exception(error);
  if constexpr (!std::is_void_v<T>) return std::move(*result);
}

}  // namespace ferry

#endif  // FERRY_RUNTIME_SYNC_WAIT_H_
