// Stream: an in-order queue of operations run by one worker thread, with a
// timeline that rises as they complete.
//
// Host-side backends (the CPU backend, the simulated device's engines) are
// built on it: Enqueue returns at once, operations run in order, Record()
// gives an Event for the work enqueued so far, EnqueueWait makes later work
// wait for another stream's event without blocking the host. An operation
// that fails fails the timeline (every waiter sees the error) and the stream
// drops the operations queued behind it; Synchronize() then returns the
// error and starts a fresh timeline, so the stream is usable again.
#ifndef FERRY_BACKENDS_STREAM_H_
#define FERRY_BACKENDS_STREAM_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "ferry/backends/event.h"
#include "ferry/runtime/timeline_semaphore.h"

namespace ferry {

// Thread-safe.
class Stream {
 public:
  using Op = absl::AnyInvocable<absl::Status() &&>;

  // Starts the worker thread; `name` appears in errors, and the events
  // carry `device` (the device whose work this stream runs, or null).
  explicit Stream(std::string name, const Device* device = nullptr);
  // Runs what is queued, then joins the worker.
  ~Stream();

  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  const std::string& name() const { return name_; }

  // Queues `op`; returns the event marking its completion.
  Event Enqueue(Op op);
  // Later operations start only after `event` completes; if it fails, this
  // stream fails with the same status.
  void EnqueueWait(Event event);
  // An event for everything enqueued so far.
  Event Record() const;
  // Blocks until everything enqueued so far has run. Returns OK, or the
  // failure that stopped the stream (which is then cleared).
  absl::Status Synchronize();

 private:
  struct Item {
    Op op;          // Null for a wait.
    Event wait_on;  // Used when `op` is null.
    uint64_t seq = 0;
    std::shared_ptr<TimelineSemaphore> timeline;
  };

  void Loop();

  const std::string name_;
  const Device* const device_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable idle_cv_;
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<TimelineSemaphore> timeline_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread worker_;
};

}  // namespace ferry

#endif  // FERRY_BACKENDS_STREAM_H_
