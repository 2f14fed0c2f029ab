// Promise<T> / Future<T>: a one-shot value passed from a producer to one
// consumer, awaitable. The write side (Promise) sets a value or an error;
// the read side (Future) awaits an absl::StatusOr<T>. A Promise destroyed
// without being set breaks its future with a Cancelled error.
//
// Detach(task) starts a Task<void> that nobody awaits (fire and forget).
#ifndef FERRY_RUNTIME_PROMISE_H_
#define FERRY_RUNTIME_PROMISE_H_

#include <coroutine>
#include <exception>
#include <memory>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "ferry/runtime/status_macros.h"
#include "ferry/runtime/task.h"
#include "ferry/runtime/timeline_semaphore.h"

namespace ferry {
namespace runtime_internal {

template <typename T>
struct SharedValue {
  TimelineSemaphore ready;
  // Written once before `ready` is signalled; read only after it.
  std::optional<absl::StatusOr<T>> result;
};

struct DetachedCoroutine {
  struct promise_type {
    DetachedCoroutine get_return_object() noexcept { return {}; }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    // A detached task has nobody to report to.
    void unhandled_exception() noexcept { std::terminate(); }
  };
};

inline DetachedCoroutine RunDetached(Task<void> task) {
  co_await std::move(task);
}

}  // namespace runtime_internal

// Starts `task` now on the calling thread; its frame frees itself when done.
// An exception escaping a detached task terminates the process.
inline void Detach(Task<void> task) {
  runtime_internal::RunDetached(std::move(task));
}

template <typename T>
class Future;

// The write side. Move-only; thread-compatible (set it from one thread).
template <typename T>
class Promise {
 public:
  Promise() : state_(std::make_shared<runtime_internal::SharedValue<T>>()) {}
  Promise(Promise&&) noexcept = default;
  Promise& operator=(Promise&&) noexcept = default;
  ~Promise() {
    if (state_ != nullptr && !state_->result.has_value()) {
      Set(absl::CancelledError("promise destroyed without a value"));
    }
  }

  // Returns the read side. Call at most once.
  Future<T> GetFuture() { return Future<T>(state_); }

  void SetValue(T value) { Set(std::move(value)); }
  void SetError(absl::Status status) {
    FERRY_CHECK(!status.ok());
    Set(std::move(status));
  }

 private:
  void Set(absl::StatusOr<T> result) {
    FERRY_CHECK(!state_->result.has_value());
    state_->result.emplace(std::move(result));
    FERRY_CHECK(state_->ready.Signal(1).ok());
  }

  std::shared_ptr<runtime_internal::SharedValue<T>> state_;
};

// The read side. Move-only; awaited once.
template <typename T>
class Future {
 public:
  Future(Future&&) noexcept = default;
  Future& operator=(Future&&) noexcept = default;

  bool IsReady() const { return state_->ready.Value() >= 1; }

  // Awaits the value (or the producer's error, a deadline or cancellation).
  Task<absl::StatusOr<T>> Get(WaitOptions options = {}) {
    auto state = state_;  // Keep the state alive across the suspension.
    FERRY_CO_RETURN_IF_ERROR(co_await state->ready.Wait(1, std::move(options)));
    co_return std::move(*state->result);
  }

  // Blocks the calling thread until the value is set.
  absl::StatusOr<T> GetBlocking(absl::Time deadline = absl::InfiniteFuture()) {
    FERRY_RETURN_IF_ERROR(state_->ready.WaitBlocking(1, deadline));
    return std::move(*state_->result);
  }

 private:
  friend class Promise<T>;
  explicit Future(std::shared_ptr<runtime_internal::SharedValue<T>> state)
      : state_(std::move(state)) {}

  std::shared_ptr<runtime_internal::SharedValue<T>> state_;
};

}  // namespace ferry

#endif  // FERRY_RUNTIME_PROMISE_H_
