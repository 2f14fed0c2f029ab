// WhenAll: await several tasks started together.
//
// Children start one after another on the awaiting thread and run
// concurrently from their first suspension on. The parent resumes (on the
// thread that finishes the last child) only when every child has finished,
// so nothing is left dangling. Results come back in argument order.
//   WhenAll(vector<Task<T>>)  -> Task<vector<T>>  (Task<void> for T = void)
//   WhenAll(Task<A>, Task<B>) -> Task<tuple<A, B>> (void results as monostate)
// If a child throws, the first exception (in completion order) is rethrown
// after all have finished.
//   WhenAllOk(vector<Task<absl::Status>>, cancel)  -> Task<absl::Status>
//   WhenAllOk(vector<Task<absl::StatusOr<T>>>, cancel)
//                                   -> Task<absl::StatusOr<vector<T>>>
// report the first error in completion order and, if given a
// CancellationSource, cancel it on that error so siblings that wait on its
// tokens stop early.
#ifndef FERRY_RUNTIME_WHEN_ALL_H_
#define FERRY_RUNTIME_WHEN_ALL_H_

#include <atomic>
#include <coroutine>
#include <cstddef>
#include <exception>
#include <mutex>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ferry/runtime/cancellation.h"
#include "ferry/runtime/task.h"

namespace ferry {
namespace runtime_internal {

// Counts finished children; the last one resumes the parent.
class WhenAllLatch {
 public:
  explicit WhenAllLatch(size_t children) : remaining_(children + 1) {}

  // Called by the parent after starting every child. Returns true if it must
  // suspend (some child is still running).
  bool TryAwait(std::coroutine_handle<> parent) {
    parent_ = parent;
    return remaining_.fetch_sub(1, std::memory_order_acq_rel) > 1;
  }

  // Called when a child finishes; returns the parent if it was the last,
  // else a null handle.
  std::coroutine_handle<> ChildDone() {
    if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      return parent_;
    }
    return {};
  }

  void RecordException(std::exception_ptr error) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!exception_) exception_ = std::move(error);
  }
  void RethrowIfException() {
    if (exception_) std::rethrow_exception(exception_);
  }

 private:
  std::atomic<size_t> remaining_;
  std::coroutine_handle<> parent_;
  std::mutex mu_;
  std::exception_ptr exception_;
};

// A child coroutine: awaits one task, stores the result, signals the latch.
class WhenAllChild {
 public:
  struct promise_type {
    WhenAllLatch* latch = nullptr;
    WhenAllChild get_return_object() noexcept {
      return WhenAllChild(
          std::coroutine_handle<promise_type>::from_promise(*this));
    }
    std::suspend_always initial_suspend() noexcept { return {}; }
    auto final_suspend() noexcept {
      struct Awaiter {
        bool await_ready() noexcept { return false; }
        void await_suspend(std::coroutine_handle<promise_type> h) noexcept {
          std::coroutine_handle<> parent = h.promise().latch->ChildDone();
          if (parent) Resume(parent);
        }
        void await_resume() noexcept {}
      };
      return Awaiter{};
    }
    void return_void() noexcept {}
    void unhandled_exception() noexcept {
      latch->RecordException(std::current_exception());
    }
  };

  explicit WhenAllChild(std::coroutine_handle<promise_type> handle)
      : handle_(handle) {}
  WhenAllChild(WhenAllChild&& other) noexcept
      : handle_(std::exchange(other.handle_, {})) {}
  WhenAllChild& operator=(WhenAllChild&&) = delete;
  ~WhenAllChild() {
    if (handle_) handle_.destroy();
  }

  void Start(WhenAllLatch* latch) {
    handle_.promise().latch = latch;
    Resume(handle_);
  }

 private:
  std::coroutine_handle<promise_type> handle_;
};

template <typename T>
using WhenAllSlot =
    std::conditional_t<std::is_void_v<T>, std::monostate, std::optional<T>>;

// Runs `task`, storing its value into `slot` and calling `on_done(value&)`.
template <typename T, typename OnDone>
WhenAllChild MakeWhenAllChild(Task<T> task, WhenAllSlot<T>& slot,
                              OnDone on_done) {
  if constexpr (std::is_void_v<T>) {
    co_await std::move(task);
    (void)slot;
    (void)on_done;
  } else {
    slot.emplace(co_await std::move(task));
    on_done(*slot);
  }
}

// Awaits a set of started children.
class WhenAllAwaiter {
 public:
  WhenAllAwaiter(std::vector<WhenAllChild>& children, WhenAllLatch& latch)
      : children_(children), latch_(latch) {}
  bool await_ready() const noexcept { return children_.empty(); }
  bool await_suspend(std::coroutine_handle<> parent) {
    for (WhenAllChild& child : children_) child.Start(&latch_);
    return latch_.TryAwait(parent);
  }
  void await_resume() { latch_.RethrowIfException(); }

 private:
  std::vector<WhenAllChild>& children_;
  WhenAllLatch& latch_;
};

struct NoOnDone {
  template <typename V>
  void operator()(V&) const {}
};

// Records the first error among Status / StatusOr results.
class FirstError {
 public:
  explicit FirstError(CancellationSource* cancel) : cancel_(cancel) {}
  void Record(const absl::Status& status) {
    if (status.ok()) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!first_.ok()) return;
      first_ = status;
    }
    if (cancel_ != nullptr) cancel_->Cancel();
  }
  absl::Status Take() { return std::move(first_); }

 private:
  CancellationSource* cancel_;
  std::mutex mu_;
  absl::Status first_;
};

template <typename T>
struct StatusOrValue;
template <typename T>
struct StatusOrValue<absl::StatusOr<T>> {
  using type = T;
};

}  // namespace runtime_internal

template <typename T>
Task<std::conditional_t<std::is_void_v<T>, void, std::vector<T>>> WhenAll(
    std::vector<Task<T>> tasks) {
  using namespace runtime_internal;  // NOLINT: internal helpers only.
  std::vector<WhenAllSlot<T>> slots(tasks.size());
  std::vector<WhenAllChild> children;
  children.reserve(tasks.size());
  for (size_t i = 0; i < tasks.size(); ++i) {
    children.push_back(
        MakeWhenAllChild(std::move(tasks[i]), slots[i], NoOnDone{}));
  }
  WhenAllLatch latch(children.size());
  co_await WhenAllAwaiter(children, latch);
  if constexpr (!std::is_void_v<T>) {
    std::vector<T> results;
    results.reserve(slots.size());
    for (auto& slot : slots) results.push_back(std::move(*slot));
    co_return results;
  }
}

template <typename... Ts>
Task<std::tuple<std::conditional_t<std::is_void_v<Ts>, std::monostate, Ts>...>>
WhenAll(Task<Ts>... tasks) {
  using namespace runtime_internal;  // NOLINT: internal helpers only.
  std::tuple<WhenAllSlot<Ts>...> slots;
  std::vector<WhenAllChild> children;
  children.reserve(sizeof...(Ts));
  [&]<size_t... I>(std::index_sequence<I...>) {
    (children.push_back(
         MakeWhenAllChild(std::move(tasks), std::get<I>(slots), NoOnDone{})),
     ...);
  }
  (std::index_sequence_for<Ts...>{});
  WhenAllLatch latch(children.size());
  co_await WhenAllAwaiter(children, latch);
  co_return [&]<size_t... I>(std::index_sequence<I...>) {
    return std::tuple<
        std::conditional_t<std::is_void_v<Ts>, std::monostate, Ts>...>(
        [&]() -> decltype(auto) {
          if constexpr (std::is_void_v<Ts>) {
            return std::monostate{};
          } else {
            return std::move(*std::get<I>(slots));
          }
        }()...);
  }
  (std::index_sequence_for<Ts...>{});
}

inline Task<absl::Status> WhenAllOk(
    std::vector<Task<absl::Status>> tasks,
    CancellationSource* cancel_on_error = nullptr) {
  using namespace runtime_internal;  // NOLINT: internal helpers only.
  FirstError first_error(cancel_on_error);
  std::vector<WhenAllSlot<absl::Status>> slots(tasks.size());
  std::vector<WhenAllChild> children;
  children.reserve(tasks.size());
  for (size_t i = 0; i < tasks.size(); ++i) {
    children.push_back(MakeWhenAllChild(
        std::move(tasks[i]), slots[i],
        [&first_error](absl::Status& s) { first_error.Record(s); }));
  }
  WhenAllLatch latch(children.size());
  co_await WhenAllAwaiter(children, latch);
  co_return first_error.Take();
}

template <typename T>
Task<absl::StatusOr<std::vector<T>>> WhenAllOk(
    std::vector<Task<absl::StatusOr<T>>> tasks,
    CancellationSource* cancel_on_error = nullptr) {
  using namespace runtime_internal;  // NOLINT: internal helpers only.
  FirstError first_error(cancel_on_error);
  std::vector<WhenAllSlot<absl::StatusOr<T>>> slots(tasks.size());
  std::vector<WhenAllChild> children;
  children.reserve(tasks.size());
  for (size_t i = 0; i < tasks.size(); ++i) {
    children.push_back(MakeWhenAllChild(std::move(tasks[i]), slots[i],
                                        [&first_error](absl::StatusOr<T>& s) {
                                          first_error.Record(s.status());
                                        }));
  }
  WhenAllLatch latch(children.size());
  co_await WhenAllAwaiter(children, latch);
  absl::Status error = first_error.Take();
  if (!error.ok()) co_return error;
  std::vector<T> results;
  results.reserve(slots.size());
  for (auto& slot : slots) results.push_back(std::move(**slot));
  co_return results;
}

}  // namespace ferry

#endif  // FERRY_RUNTIME_WHEN_ALL_H_
