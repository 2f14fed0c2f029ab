#include "ferry/backends/host/kernels/kernel_runner.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "ferry/backends/host/kernels/kernels.h"
#include "ferry/graph/op.h"
#include "ferry/runtime/status_macros.h"

namespace ferry {
namespace cpu_kernels {
namespace {

bool ComputesSomething(const Tensor& node) {
  return node.op != Op::kNone && !IsViewOp(node.op);
}

}  // namespace

void KernelRunner::FreeDeleter::operator()(std::byte* p) const { std::free(p); }

KernelRunner::KernelRunner(int nth) : nth_(nth), barrier_(nth) {
  FERRY_CHECK(nth >= 1);
  workers_.reserve(static_cast<size_t>(nth - 1));
  for (int ith = 1; ith < nth; ++ith) {
    workers_.emplace_back([this, ith] { WorkerLoop(ith); });
  }
}

KernelRunner::~KernelRunner() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

absl::Status KernelRunner::Run(absl::Span<Tensor* const> nodes,
                               std::function<bool()> should_abort,
                               bool validate) {
  size_t scratch = 0;
  bool computes = false;
  for (const Tensor* node : nodes) {
    if (validate) FERRY_RETURN_IF_ERROR(CheckSupported(*node));
    scratch = std::max(scratch, ScratchBytes(*node, nth_));
    computes = computes || ComputesSomething(*node);
  }
  // Waking the workers for nothing would let a later Run change the list
  // while they still read it.
  if (!computes) return absl::OkStatus();
  if (scratch > scratch_bytes_) {
    // Rounded up: aligned_alloc needs a multiple of the alignment.
    const size_t bytes = RoundUpToScratchAlignment(scratch);
    scratch_.reset(
        static_cast<std::byte*>(std::aligned_alloc(kScratchAlignment, bytes)));
    if (scratch_ == nullptr) {
      scratch_bytes_ = 0;
      return absl::ResourceExhaustedError(
          absl::StrCat("cpu: cannot allocate ", bytes, " bytes of scratch"));
    }
    scratch_bytes_ = scratch;
  }
  ctx_.scratch = scratch_.get();
  ctx_.scratch_bytes = scratch_bytes_;
  ctx_.barrier = &barrier_;
  // Only computing nodes: after the barrier of the last one no thread looks
  // at the list (or the caller's graph) again.
  compute_nodes_.clear();
  for (Tensor* node : nodes) {
    if (ComputesSomething(*node)) compute_nodes_.push_back(node);
  }
  should_abort_ = std::move(should_abort);
  counters_[0].value.store(0, std::memory_order_relaxed);
  uint64_t generation;
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation = generation_.fetch_add(1, std::memory_order_release) + 1;
  }
  wake_.notify_all();
  Compute(0, generation);
  if ((abort_key_.load(std::memory_order_relaxed) >> 32) == generation) {
    return absl::CancelledError("cpu: graph compute aborted by callback");
  }
  return absl::OkStatus();
}

void KernelRunner::WorkerLoop(int ith) {
  // Sleeping uses a mutex and condition variable, not std::atomic::wait:
  // libstdc++ 12 waits on 64-bit atomics through a proxy that can miss
  // notify_all.
  uint64_t seen = 0;
  while (true) {
    // Poll for a while: most Runs follow the previous one closely.
    const auto poll_end = std::chrono::steady_clock::now() +
                          std::chrono::nanoseconds(kIdlePollNanos);
    for (int spins = 0; generation_.load(std::memory_order_acquire) == seen;
         ++spins) {
      if (spins % 256 == 255 && std::chrono::steady_clock::now() > poll_end) {
        break;
      }
      cpu_kernels_internal::SpinBackoff(spins);
    }
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] {
        return generation_.load(std::memory_order_relaxed) != seen;
      });
      seen = generation_.load(std::memory_order_relaxed);
      if (stop_) return;
    }
    Compute(ith, seen);
  }
}

void KernelRunner::Compute(int ith, uint64_t generation) {
  // The count is read once: after the last barrier a thread touches neither
  // the list (which the next Run rewrites) nor the nodes.
  const size_t count = compute_nodes_.size();
  KernelContext ctx = ctx_;
  for (size_t i = 0; i < count; ++i) {
    ctx.work_counter = &counters_[i % 2].value;
    ComputeNode(*compute_nodes_[i], ith, nth_, ctx);
    if (ith == 0) {
      counters_[(i + 1) % 2].value.store(0, std::memory_order_relaxed);
    }
    // Thread 0 decides before the barrier and names the exact (run, node)
    // it stops after: a slow thread leaving an earlier barrier late must
    // not mistake a later decision for its own.
    const uint64_t key = (generation << 32) | (i + 1);
    if (ith == 0 && should_abort_ && should_abort_()) {
      abort_key_.store(key, std::memory_order_relaxed);
    }
    barrier_.ArriveAndWait();
    if (abort_key_.load(std::memory_order_relaxed) == key) break;
  }
}

}  // namespace cpu_kernels
}  // namespace ferry
