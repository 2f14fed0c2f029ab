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
//
// A stream made with StreamMode::kCallerRuns also lets Synchronize() run the
// queued operations on the synchronizing thread itself: work queued with
// EnqueueDeferred and then synchronized never changes threads, which saves
// two thread hand-offs (tens of microseconds) per graph on a host backend.
// The worker still runs whatever someone may wait on without synchronizing:
// everything up to an Enqueue's event or a Record().
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

// Who runs deferred operations (EnqueueDeferred) when Synchronize() is
// called: the worker (kWorker) or the synchronizing thread (kCallerRuns).
enum class StreamMode { kWorker, kCallerRuns };

// Thread-safe.
class Stream {
 public:
  using Op = absl::AnyInvocable<absl::Status() &&>;

  // Starts the worker thread; `name` appears in errors, and the events
  // carry `device` (the device whose work this stream runs, or null).
  explicit Stream(std::string name, const Device* device = nullptr,
                  StreamMode mode = StreamMode::kWorker);
  // Runs what is queued, then joins the worker.
  ~Stream();

  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  const std::string& name() const { return name_; }

  // Queues `op`; returns the event marking its completion. The worker
  // starts it (and everything queued before it) as soon as it can.
  Event Enqueue(Op op);
  // Queues `op`. kWorker: as Enqueue. kCallerRuns: the worker is not woken;
  // `op` runs when a later Enqueue or Record hands the work before it to the
  // worker, or on the thread calling Synchronize.
  void EnqueueDeferred(Op op);
  // Later operations start only after `event` completes; if it fails, this
  // stream fails with the same status. Deferred as EnqueueDeferred is.
  void EnqueueWait(Event event);
  // An event for everything enqueued so far; the worker starts that work.
  Event Record();
  // Blocks until everything enqueued so far has run. Returns OK, or the
  // failure that stopped the stream (which is then cleared). With
  // kCallerRuns the caller runs the queued operations itself, in order,
  // while the worker is not running one; a wait on an event that is not
  // complete blocks the caller (it does not spin).
  absl::Status Synchronize();

 private:
  struct Item {
    Op op;          // Null for a wait.
    Event wait_on;  // Used when `op` is null.
    uint64_t seq = 0;
    std::shared_ptr<TimelineSemaphore> timeline;
  };

  void Loop();
  // Runs (or, behind a failure, drops) `item` with the lock released.
  void Run(Item& item);
  // Lets the worker run everything queued so far.
  void WakeWorker() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // kCallerRuns: runs queued items up to `last` of `timeline` on this
  // thread, one at a time, never beside the worker.
  void RunQueuedHere(const std::shared_ptr<TimelineSemaphore>& timeline,
                     uint64_t last);

  const std::string name_;
  const Device* const device_;
  const StreamMode mode_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable idle_cv_;
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<TimelineSemaphore> timeline_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  // The worker runs items up to this sequence number; deferred ones above
  // it wait for a wake-up or a Synchronize.
  uint64_t worker_until_ ABSL_GUARDED_BY(mu_) = 0;
  // An item is running (on the worker or a synchronizing thread): items
  // run one at a time, in order.
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread worker_;
};

}  // namespace ferry

#endif  // FERRY_BACKENDS_STREAM_H_
