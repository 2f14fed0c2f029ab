#include "ferry/runtime/cancellation.h"

#include <utility>

namespace ferry {
namespace runtime_internal {

bool CancellationState::Cancel() {
  std::unique_lock<std::mutex> lock(mu_);
  if (cancelled_.load(std::memory_order_relaxed)) return false;
  cancelled_.store(true, std::memory_order_release);
  running_thread_ = std::this_thread::get_id();
  while (head_ != nullptr) {
    CancellationCallback* callback = head_;
    head_ = callback->next_;
    if (head_ != nullptr) head_->prev_ = nullptr;
    callback->registered_ = false;
    running_ = callback;
    auto fn = std::move(callback->callback_);
    lock.unlock();
    // The callback may destroy its CancellationCallback (e.g. by resuming
    // the coroutine that owns it); nothing here touches it afterwards.
    std::move(fn)();
    lock.lock();
    running_ = nullptr;
    done_cv_.notify_all();
  }
  return true;
}

bool CancellationState::Register(CancellationCallback* callback) {
  std::lock_guard<std::mutex> lock(mu_);
  if (cancelled_.load(std::memory_order_relaxed)) return false;
  callback->next_ = head_;
  callback->prev_ = nullptr;
  if (head_ != nullptr) head_->prev_ = callback;
  head_ = callback;
  callback->registered_ = true;
  return true;
}

void CancellationState::Deregister(CancellationCallback* callback) {
  std::unique_lock<std::mutex> lock(mu_);
  if (callback->registered_) {
    if (callback->prev_ != nullptr) {
      callback->prev_->next_ = callback->next_;
    } else {
      head_ = callback->next_;
    }
    if (callback->next_ != nullptr) callback->next_->prev_ = callback->prev_;
    callback->registered_ = false;
    return;
  }
  // Already taken by Cancel(): wait until it has run, unless we are inside it.
  if (running_ == callback && running_thread_ != std::this_thread::get_id()) {
    done_cv_.wait(lock, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return running_ != callback;
    });
  }
}

}  // namespace runtime_internal

CancellationCallback::CancellationCallback(
    CancellationToken token, absl::AnyInvocable<void() &&> callback)
    : state_(std::move(token.state_)), callback_(std::move(callback)) {
  if (state_ == nullptr) return;
  if (!state_->Register(this)) {
    state_ = nullptr;  // Already cancelled: run now, nothing to deregister.
    std::move(callback_)();
  }
}

CancellationCallback::~CancellationCallback() {
  if (state_ != nullptr) state_->Deregister(this);
}

}  // namespace ferry
