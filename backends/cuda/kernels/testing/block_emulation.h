// Block-level emulation of CUDA kernels on the host, for the fake CUDA
// runtime: every thread of a block runs on its own host thread, at the
// same time as the block's others, with a barrier for __syncthreads and
// warp shuffles emulated through per-warp slots and barriers. So a row
// kernel's reductions run with the very sequence of shuffles, shared
// memory writes and barriers the GPU runs, and ThreadSanitizer sees a
// missing barrier as the data race it is. Threads that do not all reach a
// barrier (divergence: a GPU would hang or misbehave) are reported instead
// of hanging. Testonly.
#ifndef FERRY_BACKENDS_CUDA_KERNELS_TESTING_BLOCK_EMULATION_H_
#define FERRY_BACKENDS_CUDA_KERNELS_TESTING_BLOCK_EMULATION_H_

#include <cstdint>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "ferry/backends/cuda/kernels/internal/index_math.h"

namespace ferry::cuda_kernels_testing {

class EmulatedBlock;

// What BlockReduce (kernel_math.h) needs from one emulated thread: warp
// shuffles and the block barrier. Thread-hostile: one per thread.
class HostSync {
 public:
  HostSync(EmulatedBlock* block, int64_t tid) : block_(block), tid_(tid) {}
  // __shfl_xor_sync(0xffffffff, v, lane_mask): the value of lane
  // (lane ^ lane_mask) of this thread's warp; every lane must call it.
  float ShflXor(float v, int lane_mask);
  // __syncthreads().
  void SyncThreads();

 private:
  EmulatedBlock* block_;
  int64_t tid_;
};

// The body of one thread: its position, its sync, its block's 32 floats of
// shared memory.
using ThreadBody =
    absl::FunctionRef<void(const cuda_kernels_internal::GridPosition& at,
                           HostSync& sync, float* shared)>;

// Runs `body` for every thread of a launch of `blocks` blocks of
// `threads` threads (a multiple of 32, at most 1024), the threads of a
// block at once, blocks one after another. Internal error when the threads
// of a block diverged at a barrier. Thread-safe (launches from several
// threads run one at a time).
absl::Status RunBlocks(int64_t blocks, int threads, ThreadBody body);

// How long a barrier waits for the rest of its block before it reports
// divergence (30 s by default: sanitizers slow threads down a lot).
void SetBarrierTimeoutForTesting(absl::Duration timeout);

}  // namespace ferry::cuda_kernels_testing

#endif  // FERRY_BACKENDS_CUDA_KERNELS_TESTING_BLOCK_EMULATION_H_
