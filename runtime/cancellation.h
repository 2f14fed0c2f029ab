// Cancellation: a CancellationSource requests cancellation; the
// CancellationTokens it hands out observe it. Awaiting operations that take a
// token (TimelineSemaphore::Wait, io reads, ...) wake with
// absl::CancelledError once it is cancelled.
//
// Callbacks registered through CancellationCallback run once, on the thread
// that calls Cancel(), or at once if the token is already cancelled. When a
// CancellationCallback is destroyed, its callback is not running and will not
// run (unless it is being destroyed from inside that very callback).
#ifndef FERRY_RUNTIME_CANCELLATION_H_
#define FERRY_RUNTIME_CANCELLATION_H_

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"

namespace ferry {

class CancellationCallback;

namespace runtime_internal {

class CancellationState {
 public:
  bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }
  // Returns true if this call cancelled it (false if it already was).
  bool Cancel();
  // Returns false (and does not register) if already cancelled.
  bool Register(CancellationCallback* callback);
  void Deregister(CancellationCallback* callback);

 private:
  std::atomic<bool> cancelled_{false};
  std::mutex mu_;
  std::condition_variable done_cv_;
  CancellationCallback* head_ ABSL_GUARDED_BY(mu_) = nullptr;
  CancellationCallback* running_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::thread::id running_thread_ ABSL_GUARDED_BY(mu_);
};

}  // namespace runtime_internal

// Observes a CancellationSource. Cheap to copy. A default-constructed token
// is never cancelled. Thread-safe.
class CancellationToken {
 public:
  CancellationToken() = default;

  bool IsCancelled() const { return state_ != nullptr && state_->cancelled(); }
  bool CanBeCancelled() const { return state_ != nullptr; }

 private:
  friend class CancellationSource;
  friend class CancellationCallback;
  explicit CancellationToken(
      std::shared_ptr<runtime_internal::CancellationState> state)
      : state_(std::move(state)) {}

  std::shared_ptr<runtime_internal::CancellationState> state_;
};

// Requests cancellation of everything holding one of its tokens.
// Thread-safe.
class CancellationSource {
 public:
  CancellationSource()
      : state_(std::make_shared<runtime_internal::CancellationState>()) {}

  CancellationToken Token() const { return CancellationToken(state_); }
  // Cancels and runs every registered callback. Idempotent.
  void Cancel() { state_->Cancel(); }
  bool IsCancelled() const { return state_->cancelled(); }

 private:
  std::shared_ptr<runtime_internal::CancellationState> state_;
};

// Runs `callback` when `token` is cancelled, for as long as this object
// lives. Thread-compatible (the object), thread-safe against Cancel().
class CancellationCallback {
 public:
  CancellationCallback(CancellationToken token,
                       absl::AnyInvocable<void() &&> callback);
  ~CancellationCallback();

  CancellationCallback(const CancellationCallback&) = delete;
  CancellationCallback& operator=(const CancellationCallback&) = delete;

 private:
  friend class runtime_internal::CancellationState;

  std::shared_ptr<runtime_internal::CancellationState> state_;
  absl::AnyInvocable<void() &&> callback_;
  CancellationCallback* prev_ = nullptr;
  CancellationCallback* next_ = nullptr;
  bool registered_ = false;
};

}  // namespace ferry

#endif  // FERRY_RUNTIME_CANCELLATION_H_
