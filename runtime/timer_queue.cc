#include "ferry/runtime/timer_queue.h"

#include <chrono>

#include "absl/time/clock.h"

namespace ferry {

TimerQueue::TimerQueue() : thread_([this] { Loop(); }) {}

TimerQueue::~TimerQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

TimerQueue& TimerQueue::Default() {
  static TimerQueue* const queue = new TimerQueue();
  return *queue;
}

TimerQueue::TimerId TimerQueue::Schedule(
    absl::Time deadline, absl::AnyInvocable<void() &&> callback) {
  std::lock_guard<std::mutex> lock(mu_);
  const TimerId id = next_id_++;
  const bool earliest =
      timers_.empty() || deadline < timers_.begin()->first.first;
  timers_.emplace(std::make_pair(deadline, id), std::move(callback));
  deadlines_.emplace(id, deadline);
  if (earliest) cv_.notify_all();
  return id;
}

bool TimerQueue::Cancel(TimerId id) {
  std::unique_lock<std::mutex> lock(mu_);
  if (auto it = deadlines_.find(id); it != deadlines_.end()) {
    timers_.erase(std::make_pair(it->second, id));
    deadlines_.erase(it);
    return true;
  }
  if (running_ == id && std::this_thread::get_id() != thread_.get_id()) {
    cv_.wait(lock, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return running_ != id;
    });
  }
  return false;
}

void TimerQueue::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    if (timers_.empty()) {
      cv_.wait(lock);
      continue;
    }
    const absl::Time deadline = timers_.begin()->first.first;
    if (absl::Now() < deadline) {
      cv_.wait_until(lock, absl::ToChronoTime(deadline));
      continue;
    }
    auto node = timers_.extract(timers_.begin());
    running_ = node.key().second;
    deadlines_.erase(running_);
    lock.unlock();
    std::move(node.mapped())();
    lock.lock();
    running_ = 0;
    cv_.notify_all();
  }
}

}  // namespace ferry
