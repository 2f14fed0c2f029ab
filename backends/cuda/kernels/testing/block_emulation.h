// Block-level emulation of CUDA kernels on the host, for the fake CUDA
// runtime: every thread of a block is a fiber on the calling host thread
// (ThreadSanitizer and AddressSanitizer are told about each), run until it
// reaches a barrier for __syncthreads or a warp shuffle (emulated through
// per-warp slots and barriers), then the next. So a row kernel's
// reductions run with the very sequence of shuffles, shared memory writes
// and barriers the GPU runs, and ThreadSanitizer sees a missing barrier as
// the data race it is (only barriers order the fibers for it). Threads
// that do not all reach a barrier (divergence: a GPU would hang or
// misbehave) are reported instead of hanging. Testonly.
#ifndef FERRY_BACKENDS_CUDA_KERNELS_TESTING_BLOCK_EMULATION_H_
#define FERRY_BACKENDS_CUDA_KERNELS_TESTING_BLOCK_EMULATION_H_

#include <cstdint>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
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
// `threads` threads (a multiple of 32, at most 1024) on the calling thread:
// the threads of a block interleaved at their barriers, blocks one after
// another. Internal error when the threads of a block diverged at a
// barrier. Thread-safe (each host thread has fibers of its own).
absl::Status RunBlocks(int64_t blocks, int threads, ThreadBody body);

}  // namespace ferry::cuda_kernels_testing

#endif  // FERRY_BACKENDS_CUDA_KERNELS_TESTING_BLOCK_EMULATION_H_
