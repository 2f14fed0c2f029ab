// KernelRunner: computes graph nodes with the CPU op kernels on a fixed team
// of threads, the way a CPU backend does (ComputeNode on every thread, a
// barrier between nodes). For tests and benchmarks.
#ifndef FERRY_BACKENDS_HOST_KERNELS_KERNEL_RUNNER_H_
#define FERRY_BACKENDS_HOST_KERNELS_KERNEL_RUNNER_H_

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "ferry/backends/host/kernels/internal/spin_barrier.h"
#include "ferry/backends/host/kernels/kernel_context.h"
#include "ferry/graph/tensor.h"

namespace ferry {
namespace cpu_kernels {

// Owns nth - 1 worker threads (the caller of Run is thread 0) and the
// scratch memory. Run calls must not overlap. Between nodes the threads
// meet at a spinning barrier (spin_barrier.h); after a Run the workers poll
// for the next one for kIdlePollNanos before they sleep, so a graph that
// follows shortly (the next node of an eval callback, the next decode step)
// does not pay for waking them.
// Thread-compatible.
class KernelRunner {
 public:
  // Starts nth - 1 workers; nth >= 1.
  static constexpr int64_t kIdlePollNanos = 200'000;

  explicit KernelRunner(int nth);
  KernelRunner(const KernelRunner&) = delete;
  KernelRunner& operator=(const KernelRunner&) = delete;
  ~KernelRunner();

  int nth() const { return nth_; }

  // Checks every node with CheckSupported (returning its error), then
  // computes them in order on all threads. Tensors' data must be host
  // memory. Does not take ownership of the nodes. `should_abort`, if set, is
  // called after each node; returning true stops the run, which then
  // returns Cancelled.
  // `validate` false skips CheckSupported for callers that checked already
  // (the CPU backend checks when work is enqueued).
  absl::Status Run(absl::Span<Tensor* const> nodes,
                   std::function<bool()> should_abort = nullptr,
                   bool validate = true);

 private:
  struct FreeDeleter {
    void operator()(std::byte* p) const;
  };

  void WorkerLoop(int ith);
  void Compute(int ith, uint64_t generation);

  const int nth_;
  cpu_kernels_internal::SpinBarrier barrier_;
  std::mutex mu_;
  std::condition_variable wake_;
  // Written under mu_ (so sleepers cannot miss a change), read without it by
  // polling workers.
  std::atomic<uint64_t> generation_{0};
  bool stop_ = false;  // Guarded by mu_.
  // Written by Run before it bumps generation_, read by the workers after.
  std::vector<Tensor*> compute_nodes_;
  std::function<bool()> should_abort_;
  // (generation << 32 | node step) of the last abort.
  std::atomic<uint64_t> abort_key_{0};
  KernelContext ctx_;
  // Work counters of consecutive nodes, alternating: while the threads use
  // node i's, thread 0 zeroes node i + 1's (all left node i - 1 behind the
  // last barrier), and the barrier after node i publishes the zero.
  struct alignas(64) Counter {
    std::atomic<int64_t> value{0};
  };
  Counter counters_[2];
  std::unique_ptr<std::byte, FreeDeleter> scratch_;
  size_t scratch_bytes_ = 0;
  std::vector<std::thread> workers_;
};

}  // namespace cpu_kernels
}  // namespace ferry

#endif  // FERRY_BACKENDS_HOST_KERNELS_KERNEL_RUNNER_H_
