// CompletionPoller: one host thread that turns device-side completion
// (CUDA events) into host-side signals, without CUDA host callbacks.
//
// Why polling: a CUDA host function (cudaLaunchHostFunc) may not call CUDA,
// runs on the driver's single callback thread and stalls its stream until it
// returns, so resuming coroutines there is forbidden and slow. Instead each
// recorded event is watched here: the thread asks cudaEventQuery-style
// `query` functions whether the work is done and calls `done` outside any
// lock, from a thread that may call CUDA. It spins briefly after new work
// (completions usually follow within microseconds), then backs off to short
// sleeps, and blocks on a condition variable when nothing is watched, so an
// idle device costs no CPU.
//
// Entries are grouped in lanes (one per stream timeline): only a lane's
// oldest entry is queried, and a lane's entries complete in the order they
// were watched, as the timeline values they signal require.
//
// The thread is a device thread (runtime/executor.h's DeviceThreadScope):
// timeline signals from `done` resume awaiting coroutines on executors,
// never here, so a continuation that blocks cannot stall completions.
#ifndef FERRY_BACKENDS_CUDA_INTERNAL_COMPLETION_POLLER_H_
#define FERRY_BACKENDS_CUDA_INTERNAL_COMPLETION_POLLER_H_

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ferry::cuda_internal {

// Thread-safe.
class CompletionPoller {
 public:
  // True once the watched work is done; an error if it failed.
  using Query = absl::AnyInvocable<absl::StatusOr<bool>()>;
  // Called once with OK or the query's error, on the poller thread.
  using Done = absl::AnyInvocable<void(absl::Status) &&>;

  struct Options {
    // Queries in a row without a completion before the thread sleeps.
    int spin_polls = 256;
    // Sleeps double from 1 µs up to this.
    absl::Duration max_sleep = absl::Microseconds(50);
    // Run by the thread once at start (e.g. cudaSetDevice).
    absl::AnyInvocable<void()> on_thread_start;
  };

  explicit CompletionPoller(std::string name) : CompletionPoller(name, {}) {}
  CompletionPoller(std::string name, Options options);
  // Waits until every watched entry has completed, then stops the thread.
  ~CompletionPoller();

  CompletionPoller(const CompletionPoller&) = delete;
  CompletionPoller& operator=(const CompletionPoller&) = delete;

  // A new lane id; lanes are never reused.
  uint64_t NewLane();
  // Watches `query`; `done` runs after it reports done (or fails) and after
  // every earlier entry of `lane` has completed.
  void Watch(uint64_t lane, Query query, Done done);
  // Entries not yet found complete.
  size_t pending() const;
  // Completions delivered so far.
  uint64_t completed() const;
  // The polling thread's id (for tests: what runs on it).
  std::thread::id thread_id() const { return thread_.get_id(); }

 private:
  struct Entry {
    uint64_t lane;
    Query query;
    Done done;
  };
  struct Lane {
    uint64_t id;
    std::deque<Entry> entries;
  };

  void Loop();

  const std::string name_;
  Options options_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable idle_cv_;
  std::deque<Lane> lanes_ ABSL_GUARDED_BY(mu_);  // Only lanes with entries.
  size_t pending_ ABSL_GUARDED_BY(mu_) = 0;
  size_t delivering_ ABSL_GUARDED_BY(mu_) = 0;  // Done calls running.
  uint64_t completed_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_lane_ ABSL_GUARDED_BY(mu_) = 1;
  bool woken_ ABSL_GUARDED_BY(mu_) = false;  // New work since last poll.
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace ferry::cuda_internal

#endif  // FERRY_BACKENDS_CUDA_INTERNAL_COMPLETION_POLLER_H_
