// ThreadPool: a work-stealing executor.
//
// Each worker owns a queue. Work posted from a worker goes to its own queue
// (the coroutine that posted it is likely warm in that core's cache); work
// posted from outside is spread round-robin. An idle worker steals from the
// others, spins briefly (a hop onto the pool then costs about a microsecond
// instead of a futex wake), and only then sleeps.
//
// std::mutex rather than absl::Mutex: Debian's Abseil is not built with TSan
// annotations, and ferry's concurrency code must be TSan-clean.
#ifndef FERRY_RUNTIME_THREAD_POOL_H_
#define FERRY_RUNTIME_THREAD_POOL_H_

#include <atomic>
#include <condition_variable>
#include <coroutine>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "ferry/runtime/executor.h"

namespace ferry {

// Thread-safe.
class ThreadPool final : public Executor {
 public:
  // Starts `num_threads` workers (at least one).
  explicit ThreadPool(int num_threads);
  // Runs every queued coroutine to its next suspension, then joins workers.
  ~ThreadPool() override;

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  void Post(std::coroutine_handle<> handle) override;

  int num_threads() const { return static_cast<int>(workers_.size()); }

  // True when called from one of this pool's workers.
  bool IsWorkerThread() const;

 private:
  struct Worker {
    std::mutex mu;
    std::deque<std::coroutine_handle<>> queue ABSL_GUARDED_BY(mu);
    std::thread thread;
  };

  void WorkerLoop(int index);
  bool TryPop(int index, std::coroutine_handle<>& out);
  bool TrySteal(int index, std::coroutine_handle<>& out);

  std::vector<std::unique_ptr<Worker>> workers_;
  std::atomic<uint64_t> next_worker_{0};
  std::atomic<int64_t> pending_{0};  // Handles queued, not yet taken.
  std::atomic<int> sleeping_{0};

  std::mutex wake_mu_;
  std::condition_variable wake_cv_;
  bool stopping_ ABSL_GUARDED_BY(wake_mu_) = false;
};

}  // namespace ferry

#endif  // FERRY_RUNTIME_THREAD_POOL_H_
