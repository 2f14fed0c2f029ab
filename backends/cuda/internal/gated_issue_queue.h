// GatedIssueQueue: issues a device stream's work in order on the host, and
// holds back whatever follows a wait on a host-side event that has not
// happened yet.
//
// A CUDA stream can wait for a CUDA event on the device, but not for a CPU
// or simulated backend's timeline. ferry's Backend::Wait must not block the
// enqueuing thread either, so the CUDA backend issues its CUDA calls through
// this queue: steps run at once while nothing is held back; after
// WaitFor(event) on an incomplete event, later steps are kept here and
// issued, in order, by the thread that completes the event (a coroutine
// resumed inline by it, never a CUDA callback; see AwaitGate for why
// inline). A step that fails, or a gate whose
// event fails, reports through `on_failure` and drops what is held behind
// it; the queue then skips steps until Reset(), as ferry's Stream does.
#ifndef FERRY_BACKENDS_CUDA_INTERNAL_GATED_ISSUE_QUEUE_H_
#define FERRY_BACKENDS_CUDA_INTERNAL_GATED_ISSUE_QUEUE_H_

#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "ferry/backends/event.h"
#include "ferry/runtime/task.h"

namespace ferry::cuda_internal {

// Thread-safe. Steps run one at a time, under the queue's lock.
class GatedIssueQueue {
 public:
  using Step = absl::AnyInvocable<absl::Status() &&>;
  using FailureHandler = absl::AnyInvocable<void(absl::Status)>;

  // `on_failure` runs under the queue's lock, once per failure.
  explicit GatedIssueQueue(FailureHandler on_failure);
  // Waits until nothing is held back (the gates' events must complete).
  ~GatedIssueQueue();

  GatedIssueQueue(const GatedIssueQueue&) = delete;
  GatedIssueQueue& operator=(const GatedIssueQueue&) = delete;

  // Runs `step` now if nothing is held back, else after what is.
  void Run(Step step);
  // The same, but `step` also runs after a failure (when other steps are
  // dropped): for bookkeeping that must happen in order, e.g. fences that
  // mark when the work queued before them is done.
  void RunAlways(Step step);
  // Later steps run only once `event` completes.
  void WaitFor(const Event& event);
  // Blocks until nothing is held back.
  void WaitIdle();
  // True while later steps would be held. Only WaitFor (the enqueuer) turns
  // it on, so a false answer means the enqueuer's next Run runs at once.
  bool holding() const;
  // True if steps are being skipped after a failure.
  bool failed() const;
  // Ends skipping after a failure (call once idle).
  void Reset();

 private:
  struct Item {
    std::optional<Step> step;   // Empty for a gate.
    std::optional<Event> gate;  // Set for a gate.
    bool always = false;        // Runs even after a failure.
  };

  void Enqueue(Step step, bool always);
  // Runs a step (or skips it after a failure, unless `always`).
  void RunLocked(Step step, bool always) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FailLocked(absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Called once `gate` completed with `status`: issues held steps up to the
  // next incomplete gate.
  void Resume(absl::Status status);
  Task<void> AwaitGate(Event gate);

  FailureHandler on_failure_;
  mutable std::mutex mu_;
  std::condition_variable idle_cv_;
  std::deque<Item> held_ ABSL_GUARDED_BY(mu_);
  bool blocked_ ABSL_GUARDED_BY(mu_) = false;  // A gate is awaited.
  bool failed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace ferry::cuda_internal

#endif  // FERRY_BACKENDS_CUDA_INTERNAL_GATED_ISSUE_QUEUE_H_
