// SyncWait: runs a Task from plain (non-coroutine) code and blocks until it
// completes. The task starts on the calling thread and may hop elsewhere.
#ifndef FERRY_RUNTIME_SYNC_WAIT_H_
#define FERRY_RUNTIME_SYNC_WAIT_H_

#include <atomic>
#include <condition_variable>
#include <coroutine>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>
#include <utility>

#include "ferry/runtime/task.h"

namespace ferry {
namespace runtime_internal {

// A binary latch: one thread waits, another sets it once.
class BlockingLatch {
 public:
  void Set() {
    // The waiter may return and destroy this latch as soon as it can take
    // the lock after `set_`, so nothing is touched after the unlock.
    std::lock_guard<std::mutex> lock(mu_);
    set_.store(true, std::memory_order_release);
    cv_.notify_one();
  }

  void Wait() {
    // A short spin catches work that completes within microseconds (a hop
    // onto a pool and back) without a futex sleep and wake.
    for (int i = 0; i < 200 && !set_.load(std::memory_order_acquire); ++i) {
      std::this_thread::yield();
    }
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return set_.load(std::memory_order_acquire); });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> set_{false};
};

// The coroutine SyncWait runs: awaits the user's task, then sets the latch.
class SyncWaitDriver {
 public:
  struct promise_type {
    BlockingLatch* latch = nullptr;
    SyncWaitDriver get_return_object() noexcept {
      return SyncWaitDriver(
          std::coroutine_handle<promise_type>::from_promise(*this));
    }
    std::suspend_always initial_suspend() noexcept { return {}; }
    auto final_suspend() noexcept {
      struct Awaiter {
        bool await_ready() noexcept { return false; }
        void await_suspend(std::coroutine_handle<promise_type> h) noexcept {
          h.promise().latch->Set();
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
    BlockingLatch latch;
    handle_.promise().latch = &latch;
    {
      NestedTrampolineScope scope;
      Resume(handle_);
    }
    latch.Wait();
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
