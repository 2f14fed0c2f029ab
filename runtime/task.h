// Task<T>: ferry's lazy coroutine task.
//
// A Task does nothing until it is awaited (or handed to SyncWait, WhenAll or
// Detach). Starting a task and resuming its awaiter are transfers of control
// made through a per-thread trampoline (Resume() below) rather than by
// compiler tail calls: GCC turns symmetric transfer into a real call at -O0,
// -O1 and under ASan/TSan, and a million-deep chain of synchronously
// completing co_awaits then overflows the stack. With the trampoline the
// stack stays flat at every optimisation level.
// A task carries a value of T or an exception; fallible ferry operations use
// T = absl::Status or absl::StatusOr<U> so errors are values, not exceptions.
//
// Lambda pitfall: a coroutine lambda's captures live in the lambda object,
// not in the coroutine frame. `[x] () -> Task<> { use(x); co_return; }()`
// destroys the lambda (and x) at the end of the full expression while the lazy
// task still refers to it. Pass state as coroutine parameters (copied into the
// frame), or wrap the lambda with CoInvoke(), which moves it into a frame.
#ifndef FERRY_RUNTIME_TASK_H_
#define FERRY_RUNTIME_TASK_H_

#include <coroutine>
#include <deque>
#include <exception>
#include <functional>
#include <optional>
#include <type_traits>
#include <utility>

namespace ferry {

template <typename T = void>
class Task;

namespace runtime_internal {

// Per-thread run loop for coroutine transfers. While a Resume() call is
// running on a thread, nested Resume() calls queue their handle and return;
// the outermost call runs the queue in FIFO order.
struct Trampoline {
  bool active = false;
  std::deque<std::coroutine_handle<>> pending;
};

inline thread_local Trampoline trampoline;

}  // namespace runtime_internal

// Resumes `handle` on the calling thread. If the thread is already inside
// Resume() (i.e. inside a coroutine), `handle` runs as soon as the current
// coroutine suspends instead of nested on the stack. Executors and awaitables
// resume coroutines only through this function.
inline void Resume(std::coroutine_handle<> handle) {
  runtime_internal::Trampoline& t = runtime_internal::trampoline;
  if (t.active) {
    t.pending.push_back(handle);
    return;
  }
  t.active = true;
  handle.resume();
  while (!t.pending.empty()) {
    std::coroutine_handle<> next = t.pending.front();
    t.pending.pop_front();
    next.resume();
  }
  t.active = false;
}

namespace runtime_internal {

// Runs a nested, independent trampoline for its lifetime (SyncWait inside a
// coroutine must not queue behind the coroutine that is blocking).
class NestedTrampolineScope {
 public:
  NestedTrampolineScope()
      : saved_active_(trampoline.active),
        saved_pending_(std::move(trampoline.pending)) {
    trampoline.active = false;
    trampoline.pending.clear();
  }
  ~NestedTrampolineScope() {
    trampoline.active = saved_active_;
    trampoline.pending = std::move(saved_pending_);
  }
  NestedTrampolineScope(const NestedTrampolineScope&) = delete;
  NestedTrampolineScope& operator=(const NestedTrampolineScope&) = delete;

 private:
  bool saved_active_;
  std::deque<std::coroutine_handle<>> saved_pending_;
};

class TaskPromiseBase {
 public:
  struct FinalAwaiter {
    bool await_ready() noexcept { return false; }
    template <typename Promise>
    void await_suspend(std::coroutine_handle<Promise> handle) noexcept {
      std::coroutine_handle<> continuation = handle.promise().continuation_;
      if (continuation) Resume(continuation);
    }
    void await_resume() noexcept {}
  };

  std::suspend_always initial_suspend() noexcept { return {}; }
  FinalAwaiter final_suspend() noexcept { return {}; }
  void unhandled_exception() noexcept { exception_ = std::current_exception(); }
  void set_continuation(std::coroutine_handle<> continuation) noexcept {
    continuation_ = continuation;
  }

 protected:
  void RethrowIfException() {
    if (exception_) std::rethrow_exception(exception_);
  }

 private:
  std::coroutine_handle<> continuation_;
  std::exception_ptr exception_;
};

template <typename T>
class TaskPromise final : public TaskPromiseBase {
 public:
  Task<T> get_return_object() noexcept;

  template <typename U = T>
  requires std::is_convertible_v<U&&, T>
  void return_value(U&& value) noexcept(
      std::is_nothrow_constructible_v<T, U&&>) {
    value_.emplace(std::forward<U>(value));
  }

  T TakeResult() {
    RethrowIfException();
    return std::move(*value_);
  }

 private:
  std::optional<T> value_;
};

template <>
class TaskPromise<void> final : public TaskPromiseBase {
 public:
  Task<void> get_return_object() noexcept;
  void return_void() noexcept {}
  void TakeResult() { RethrowIfException(); }
};

}  // namespace runtime_internal

// A lazily started coroutine producing a T. Move-only; destroying a Task that
// never ran (or has finished) frees its frame. A Task may be awaited once.
// Thread-compatible.
template <typename T>
class [[nodiscard]] Task {
 public:
  using promise_type = runtime_internal::TaskPromise<T>;
  using value_type = T;

  Task() noexcept = default;
  Task(Task&& other) noexcept : handle_(std::exchange(other.handle_, {})) {}
  Task& operator=(Task&& other) noexcept {
    if (this != &other) {
      Reset();
      handle_ = std::exchange(other.handle_, {});
    }
    return *this;
  }
  Task(const Task&) = delete;
  Task& operator=(const Task&) = delete;
  ~Task() { Reset(); }

  // True if this task holds a coroutine (was not moved from).
  bool valid() const noexcept { return static_cast<bool>(handle_); }

  auto operator co_await() && noexcept { return Awaiter{handle_}; }
  auto operator co_await() & noexcept { return Awaiter{handle_}; }

  // Gives up ownership of the coroutine frame (used by WhenAll and friends).
  std::coroutine_handle<promise_type> Release() noexcept {
    return std::exchange(handle_, {});
  }

 private:
  friend promise_type;
  explicit Task(std::coroutine_handle<promise_type> handle) noexcept
      : handle_(handle) {}

  void Reset() noexcept {
    if (handle_) std::exchange(handle_, {}).destroy();
  }

  struct Awaiter {
    std::coroutine_handle<promise_type> handle;
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> awaiting) noexcept {
      handle.promise().set_continuation(awaiting);
      Resume(handle);  // Starts the task once `awaiting` has suspended.
    }
    T await_resume() { return handle.promise().TakeResult(); }
  };

  std::coroutine_handle<promise_type> handle_;
};

namespace runtime_internal {

template <typename T>
Task<T> TaskPromise<T>::get_return_object() noexcept {
  return Task<T>(std::coroutine_handle<TaskPromise<T>>::from_promise(*this));
}
inline Task<void> TaskPromise<void>::get_return_object() noexcept {
  return Task<void>(
      std::coroutine_handle<TaskPromise<void>>::from_promise(*this));
}

template <typename T>
struct IsTask : std::false_type {};
template <typename T>
struct IsTask<Task<T>> : std::true_type {};

}  // namespace runtime_internal

template <typename T>
concept TaskType = runtime_internal::IsTask<std::remove_cvref_t<T>>::value;

// Calls `fn(args...)`, a callable returning a Task, keeping `fn` and `args`
// alive in a coroutine frame until that task completes. Use it for coroutine
// lambdas with captures.
template <typename Fn, typename... Args>
requires TaskType<std::invoke_result_t<Fn&, Args&...>>
    std::invoke_result_t<Fn&, Args&...> CoInvoke(Fn fn, Args... args) {
  co_return co_await std::invoke(fn, args...);
}

}  // namespace ferry

#endif  // FERRY_RUNTIME_TASK_H_
