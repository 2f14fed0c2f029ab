#include "ferry/backends/cuda/internal/completion_poller.h"

#include <algorithm>
#include <utility>

#include "absl/time/clock.h"
#include "ferry/runtime/executor.h"

namespace ferry::cuda_internal {

CompletionPoller::CompletionPoller(std::string name, Options options)
    : name_(std::move(name)), options_(std::move(options)) {
  thread_ = std::thread([this] { Loop(); });
}

CompletionPoller::~CompletionPoller() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    idle_cv_.wait(lock, [this] { return pending_ == 0 && delivering_ == 0; });
    stopping_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
}

uint64_t CompletionPoller::NewLane() {
  std::lock_guard<std::mutex> lock(mu_);
  return next_lane_++;
}

void CompletionPoller::Watch(uint64_t lane, Query query, Done done) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = std::find_if(lanes_.begin(), lanes_.end(),
                           [lane](const Lane& l) { return l.id == lane; });
    if (it == lanes_.end()) {
      lanes_.push_back(Lane{lane, {}});
      it = lanes_.end() - 1;
    }
    it->entries.push_back(Entry{lane, std::move(query), std::move(done)});
    ++pending_;
    woken_ = true;
  }
  work_cv_.notify_one();
}

size_t CompletionPoller::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_;
}

uint64_t CompletionPoller::completed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return completed_;
}

void CompletionPoller::Loop() {
  DeviceThreadScope device_thread;
  if (options_.on_thread_start) options_.on_thread_start();
  struct Finished {
    Done done;
    absl::Status status;
  };
  std::vector<Finished> finished;
  int idle_polls = 0;
  absl::Duration sleep = absl::Microseconds(1);
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    work_cv_.wait(lock, [this] { return stopping_ || pending_ > 0; });
    if (pending_ == 0 && stopping_) return;
    if (woken_) {
      woken_ = false;
      idle_polls = 0;
      sleep = absl::Microseconds(1);
    }
    // Query each lane's oldest entries; queries are cheap and thread-safe.
    for (Lane& lane : lanes_) {
      while (!lane.entries.empty()) {
        absl::StatusOr<bool> ready = lane.entries.front().query();
        if (ready.ok() && !*ready) break;
        finished.push_back(
            Finished{std::move(lane.entries.front().done), ready.status()});
        lane.entries.pop_front();
      }
    }
    lanes_.erase(
        std::remove_if(lanes_.begin(), lanes_.end(),
                       [](const Lane& l) { return l.entries.empty(); }),
        lanes_.end());
    if (!finished.empty()) {
      // Outside the lock: `done` signals timelines whose waiters resume
      // inline here and may watch more work.
      const size_t n = finished.size();
      pending_ -= n;
      completed_ += n;
      delivering_ += n;
      lock.unlock();
      for (Finished& f : finished) std::move(f.done)(std::move(f.status));
      finished.clear();
      lock.lock();
      delivering_ -= n;
      if (pending_ == 0 && delivering_ == 0) idle_cv_.notify_all();
      idle_polls = 0;
      sleep = absl::Microseconds(1);
      continue;
    }
    if (pending_ == 0) continue;
    // Nothing completed: spin a while, then sleep with backoff. New work
    // (woken_) cuts a sleep short.
    if (++idle_polls <= options_.spin_polls) {
      lock.unlock();
      std::this_thread::yield();
      lock.lock();
      continue;
    }
    work_cv_.wait_for(lock, absl::ToChronoMicroseconds(sleep),
                      [this] { return woken_ || stopping_; });
    sleep = std::min(sleep * 2, options_.max_sleep);
  }
}

}  // namespace ferry::cuda_internal
