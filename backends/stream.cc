#include "ferry/backends/stream.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "ferry/runtime/executor.h"
#include "ferry/runtime/status_macros.h"

namespace ferry {

Stream::Stream(std::string name, const Device* device)
    : name_(std::move(name)),
      device_(device),
      timeline_(std::make_shared<TimelineSemaphore>(0)),
      worker_([this] { Loop(); }) {}

Stream::~Stream() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  worker_.join();
}

Event Stream::Enqueue(Op op) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t seq = next_seq_++;
  queue_.push_back(Item{std::move(op), Event(), seq, timeline_});
  work_cv_.notify_one();
  return Event(timeline_, seq, device_);
}

void Stream::EnqueueWait(Event event) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t seq = next_seq_++;
  queue_.push_back(Item{nullptr, std::move(event), seq, timeline_});
  work_cv_.notify_one();
}

Event Stream::Record() const {
  std::lock_guard<std::mutex> lock(mu_);
  return Event(timeline_, next_seq_ - 1, device_);
}

absl::Status Stream::Synchronize() {
  std::shared_ptr<TimelineSemaphore> timeline;
  uint64_t last;
  {
    std::lock_guard<std::mutex> lock(mu_);
    timeline = timeline_;
    last = next_seq_ - 1;
  }
  absl::Status status = timeline->WaitBlocking(last);
  if (status.ok()) return status;
  // Failed: wait until the worker has dropped everything queued on the
  // failed timeline, then start a fresh one so the stream can be used again.
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !busy_ && (queue_.empty() || queue_.front().timeline != timeline);
  });
  if (timeline_ == timeline) {
    timeline_ = std::make_shared<TimelineSemaphore>(next_seq_ - 1);
  }
  return status;
}

void Stream::Loop() {
  DeviceThreadScope device_thread;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stopping_ || !queue_.empty();
    });
    if (queue_.empty()) return;  // Stopping with nothing left.
    Item item = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();

    if (item.timeline->status().ok()) {
      absl::Status status;
      if (item.op) {
        status = std::move(item.op)();
      } else {
        status = item.wait_on.WaitBlocking();
      }
      if (status.ok()) {
        FERRY_CHECK(item.timeline->Signal(item.seq).ok() ||
                    !item.timeline->status().ok());
      } else {
        item.timeline->Fail(absl::Status(
            status.code(), absl::StrCat(name_, ": ", status.message())));
      }
    }
    // Items behind a failure are dropped: their timeline is failed already.

    lock.lock();
    busy_ = false;
    idle_cv_.notify_all();
  }
}

}  // namespace ferry
