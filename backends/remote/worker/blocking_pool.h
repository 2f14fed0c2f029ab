// BlockingPool: a few threads for work that may block (opening and reading
// files, resolving names), so the worker's loop thread never does. Its queue
// is bounded: work past it is refused with ResourceExhausted, not queued.
#ifndef FERRY_BACKENDS_REMOTE_WORKER_BLOCKING_POOL_H_
#define FERRY_BACKENDS_REMOTE_WORKER_BLOCKING_POOL_H_

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ferry::remote {

class BlockingPool {
 public:
  // Fails (never throws) if the threads cannot be started.
  static absl::StatusOr<std::unique_ptr<BlockingPool>> Create(
      int threads, size_t max_queued);
  // Runs what was queued, then joins.
  ~BlockingPool();

  // Thread-safe. Queues `fn` to run on one of the pool's threads.
  absl::Status Run(absl::AnyInvocable<void() &&> fn);

 private:
  explicit BlockingPool(size_t max_queued) : max_queued_(max_queued) {}
  void Work();

  const size_t max_queued_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<absl::AnyInvocable<void() &&>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace ferry::remote

#endif  // FERRY_BACKENDS_REMOTE_WORKER_BLOCKING_POOL_H_
