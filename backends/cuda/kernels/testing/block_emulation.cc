#include "ferry/backends/cuda/kernels/testing/block_emulation.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

namespace ferry::cuda_kernels_testing {

using ::ferry::cuda_kernels_internal::GridPosition;

namespace {

std::atomic<int64_t> barrier_timeout_ms{30'000};

// A reusable barrier for `count` threads. After a timeout it is broken:
// every wait returns at once, so the threads run to their end.
class Barrier {
 public:
  explicit Barrier(int count) : count_(count) {}

  // False if the barrier timed out (now or before).
  bool Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    if (broken_) return false;
    const uint64_t generation = generation_;
    if (++arrived_ == count_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return true;
    }
    const std::chrono::milliseconds timeout(barrier_timeout_ms.load());
    if (!cv_.wait_for(lock, timeout,
                      [&] { return generation_ != generation || broken_; })) {
      broken_ = true;
      cv_.notify_all();
      return false;
    }
    return !broken_;
  }

 private:
  const int count_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool broken_ = false;
};

}  // namespace

// The state one block's threads share.
class EmulatedBlock {
 public:
  explicit EmulatedBlock(int threads)
      : threads_(threads), block_barrier_(threads), lanes_(threads) {
    for (int w = 0; w < (threads + 31) / 32; ++w) {
      warp_barriers_.push_back(std::make_unique<Barrier>(32));
    }
  }

  float ShflXor(int64_t tid, float v, int lane_mask) {
    // Each lane publishes its value, the warp meets, each lane reads its
    // partner's, and the warp meets again before the slots are reused.
    Barrier& warp = *warp_barriers_[tid / 32];
    lanes_[tid] = v;
    if (!warp.Wait()) diverged_.store(true);
    const int64_t partner = (tid & ~int64_t{31}) | ((tid & 31) ^ lane_mask);
    const float other = lanes_[partner];
    if (!warp.Wait()) diverged_.store(true);
    return other;
  }

  void SyncThreads() {
    if (!block_barrier_.Wait()) diverged_.store(true);
  }

  bool diverged() const { return diverged_.load(); }
  void MarkDiverged() { diverged_.store(true); }
  float* shared() { return shared_; }

 private:
  const int threads_;
  Barrier block_barrier_;
  std::vector<std::unique_ptr<Barrier>> warp_barriers_;
  std::vector<float> lanes_;
  float shared_[32] = {};
  std::atomic<bool> diverged_{false};
};

float HostSync::ShflXor(float v, int lane_mask) {
  return block_->ShflXor(tid_, v, lane_mask);
}

void HostSync::SyncThreads() { block_->SyncThreads(); }

namespace {

// Host threads kept for emulated GPU threads (a launch's worth at a time):
// worker i runs thread i of every block of the current launch.
class ThreadPool {
 public:
  static ThreadPool& Get() {
    static ThreadPool* const pool = new ThreadPool();
    return *pool;
  }

  absl::Status Run(int64_t blocks, int threads, ThreadBody body) {
    std::lock_guard<std::mutex> one_launch(launch_mu_);
    // Blocks run one after another on one block state: a barrier at each
    // block's end keeps a fast thread out of the next block until the
    // block's last thread is done with it.
    EmulatedBlock state(threads);
    Barrier block_end(threads);
    {
      std::unique_lock<std::mutex> lock(mu_);
      while (static_cast<int>(workers_.size()) < threads) {
        const int index = static_cast<int>(workers_.size());
        workers_.emplace_back([this, index] { Work(index); });
      }
      job_ = Job{blocks, threads, &body, &state, &block_end};
      finished_ = 0;
      ++generation_;
      cv_.notify_all();
      done_cv_.wait(lock, [&] { return finished_ == threads; });
      job_ = Job{};
    }
    if (state.diverged()) {
      return absl::InternalError(absl::StrCat(
          "the threads of a block (", threads,
          " per block) did not all reach a barrier or a warp shuffle "
          "together: on a GPU this kernel would hang or misbehave"));
    }
    return absl::OkStatus();
  }

 private:
  struct Job {
    int64_t blocks = 0;
    int threads = 0;
    ThreadBody* body = nullptr;
    EmulatedBlock* state = nullptr;
    Barrier* block_end = nullptr;
  };

  void Work(int index) {
    uint64_t seen = 0;
    while (true) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return generation_ != seen; });
        seen = generation_;
        job = job_;
      }
      if (index >= job.threads) continue;
      for (int64_t b = 0; b < job.blocks; ++b) {
        EmulatedBlock& block = *job.state;
        HostSync sync(&block, index);
        const GridPosition at{b, job.blocks, index, job.threads};
        (*job.body)(at, sync, block.shared());
        if (!job.block_end->Wait()) {
          block.MarkDiverged();
          break;
        }
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++finished_;
      }
      done_cv_.notify_all();
    }
  }

  std::mutex launch_mu_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable done_cv_;
  std::vector<std::thread> workers_;
  Job job_;
  uint64_t generation_ = 0;
  int finished_ = 0;
};

}  // namespace

void SetBarrierTimeoutForTesting(absl::Duration timeout) {
  barrier_timeout_ms.store(absl::ToInt64Milliseconds(timeout));
}

absl::Status RunBlocks(int64_t blocks, int threads, ThreadBody body) {
  if (threads <= 0 || threads > 1024 || threads % 32 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("block emulation: ", threads,
                     " threads per block (want a multiple of "
                     "32 up to 1024)"));
  }
  if (blocks <= 0) return absl::OkStatus();
  return ThreadPool::Get().Run(blocks, threads, body);
}

}  // namespace ferry::cuda_kernels_testing
