#include "ferry/backends/stream.h"

#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "ferry/runtime/executor.h"
#include "ferry/runtime/status_macros.h"

namespace ferry {

Stream::Stream(std::string name, const Device* device, StreamMode mode)
    : name_(std::move(name)),
      device_(device),
      mode_(mode),
      timeline_(std::make_shared<TimelineSemaphore>(0)),
      worker_([this] { Loop(); }) {}

Stream::~Stream() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    worker_until_ = std::numeric_limits<uint64_t>::max();
  }
  work_cv_.notify_all();
  worker_.join();
}

void Stream::WakeWorker() {
  if (worker_until_ == next_seq_ - 1) return;
  worker_until_ = next_seq_ - 1;
  work_cv_.notify_one();
}

Event Stream::Enqueue(Op op) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t seq = next_seq_++;
  queue_.push_back(Item{std::move(op), Event(), seq, timeline_});
  WakeWorker();
  return Event(timeline_, seq, device_);
}

void Stream::EnqueueDeferred(Op op) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t seq = next_seq_++;
  queue_.push_back(Item{std::move(op), Event(), seq, timeline_});
  if (mode_ == StreamMode::kWorker) WakeWorker();
}

void Stream::EnqueueWait(Event event) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t seq = next_seq_++;
  queue_.push_back(Item{nullptr, std::move(event), seq, timeline_});
  if (mode_ == StreamMode::kWorker) WakeWorker();
}

Event Stream::Record() {
  std::lock_guard<std::mutex> lock(mu_);
  // Whoever holds the event may wait on it without synchronizing.
  WakeWorker();
  return Event(timeline_, next_seq_ - 1, device_);
}

void Stream::RunQueuedHere(const std::shared_ptr<TimelineSemaphore>& timeline,
                           uint64_t last) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    // Sleeps (not spins) while the worker runs an item, which may be a wait
    // on another stream's event.
    idle_cv_.wait(
        lock, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !busy_; });
    if (queue_.empty() || queue_.front().seq > last ||
        queue_.front().timeline != timeline) {
      return;
    }
    Item item = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    {
      DeviceThreadScope device_thread;
      Run(item);
    }
    lock.lock();
    busy_ = false;
    // The worker may have been asked for the items behind this one.
    work_cv_.notify_one();
    idle_cv_.notify_all();
  }
}

absl::Status Stream::Synchronize() {
  std::shared_ptr<TimelineSemaphore> timeline;
  uint64_t last;
  {
    std::lock_guard<std::mutex> lock(mu_);
    timeline = timeline_;
    last = next_seq_ - 1;
    if (mode_ == StreamMode::kWorker) WakeWorker();
  }
  if (mode_ == StreamMode::kCallerRuns) RunQueuedHere(timeline, last);
  absl::Status status = timeline->WaitBlocking(last);
  if (status.ok()) return status;
  // Failed: wait until nothing runs, dropping what is still queued on the
  // failed timeline (with kCallerRuns the worker may never be asked for it),
  // then start a fresh timeline so the stream can be used again.
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    idle_cv_.wait(
        lock, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !busy_; });
    if (queue_.empty() || queue_.front().timeline != timeline) break;
    queue_.pop_front();
  }
  if (timeline_ == timeline) {
    timeline_ = std::make_shared<TimelineSemaphore>(next_seq_ - 1);
  }
  return status;
}

void Stream::Run(Item& item) {
  if (!item.timeline->status().ok()) return;  // Dropped behind a failure.
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

void Stream::Loop() {
  DeviceThreadScope device_thread;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return (stopping_ && queue_.empty()) ||
             (!busy_ && !queue_.empty() && queue_.front().seq <= worker_until_);
    });
    if (queue_.empty()) return;  // Stopping with nothing left.
    Item item = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    Run(item);
    lock.lock();
    busy_ = false;
    idle_cv_.notify_all();
  }
}

}  // namespace ferry
