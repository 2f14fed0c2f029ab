#include "ferry/backends/cuda/internal/gated_issue_queue.h"

#include <utility>

#include "ferry/runtime/executor.h"
#include "ferry/runtime/promise.h"

namespace ferry::cuda_internal {

GatedIssueQueue::GatedIssueQueue(FailureHandler on_failure)
    : on_failure_(std::move(on_failure)) {}

GatedIssueQueue::~GatedIssueQueue() { WaitIdle(); }

void GatedIssueQueue::RunLocked(Step step, bool always) {
  if (failed_ && !always) return;  // Dropped, as work behind a failure is.
  absl::Status status = std::move(step)();
  if (!status.ok() && !failed_) FailLocked(std::move(status));
}

void GatedIssueQueue::FailLocked(absl::Status status) {
  failed_ = true;
  on_failure_(std::move(status));
}

void GatedIssueQueue::Run(Step step) { Enqueue(std::move(step), false); }

void GatedIssueQueue::RunAlways(Step step) { Enqueue(std::move(step), true); }

void GatedIssueQueue::Enqueue(Step step, bool always) {
  std::lock_guard<std::mutex> lock(mu_);
  if (blocked_) {
    held_.push_back(Item{std::move(step), std::nullopt, always});
    return;
  }
  RunLocked(std::move(step), always);
}

void GatedIssueQueue::WaitFor(const Event& event) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (blocked_) {
      held_.push_back(Item{std::nullopt, event, false});
      return;
    }
    if (event.IsComplete()) return;
    absl::Status status = event.timeline()->status();
    if (!status.ok()) {
      FailLocked(std::move(status));
      return;
    }
    blocked_ = true;
  }
  // Outside the lock: the event may complete at once and resume inline.
  Detach(AwaitGate(event));
}

Task<void> GatedIssueQueue::AwaitGate(Event gate) {
  // Held steps are issued inline by the thread that completes the gate (a
  // CPU or sim stream worker, the CUDA completion poller, a thread that
  // signals a timeline), not posted to an executor, deliberately: they are
  // ferry's own issue steps, never user continuations (those resume on
  // executors, event.h); each only enqueues GPU work and never waits for
  // anything the completing thread must do (a pageable copy may block, but
  // only on GPU progress), so it costs that thread microseconds, while a hop
  // would put a thread wake-up between the producer finishing and the GPU
  // starting. Steps leave the thread as they found it (current device, no
  // pending CUDA error: CudaDevice::Scope).
  static InlineExecutor inline_executor;
  WaitOptions options;
  options.resume_on = &inline_executor;
  absl::Status status = co_await gate.Wait(std::move(options));
  Resume(std::move(status));
}

void GatedIssueQueue::Resume(absl::Status status) {
  std::optional<Event> next_gate;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!status.ok() && !failed_) FailLocked(std::move(status));
    while (!held_.empty()) {
      Item item = std::move(held_.front());
      held_.pop_front();
      if (item.step.has_value()) {
        RunLocked(std::move(*item.step), item.always);
        continue;
      }
      if (failed_ || item.gate->IsComplete()) continue;
      absl::Status gate_status = item.gate->timeline()->status();
      if (!gate_status.ok()) {
        FailLocked(std::move(gate_status));
        continue;
      }
      next_gate = std::move(item.gate);
      break;
    }
    if (!next_gate.has_value()) {
      blocked_ = false;
      idle_cv_.notify_all();
      return;
    }
  }
  Detach(AwaitGate(std::move(*next_gate)));
}

void GatedIssueQueue::WaitIdle() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [this] { return !blocked_; });
}

bool GatedIssueQueue::holding() const {
  std::lock_guard<std::mutex> lock(mu_);
  return blocked_;
}

bool GatedIssueQueue::failed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_;
}

void GatedIssueQueue::Reset() {
  std::lock_guard<std::mutex> lock(mu_);
  failed_ = false;
}

}  // namespace ferry::cuda_internal
