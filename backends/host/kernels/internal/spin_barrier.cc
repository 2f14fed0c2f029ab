#include "ferry/backends/host/kernels/internal/spin_barrier.h"

#include <atomic>
#include <cstdint>
#include <thread>

namespace ferry {
namespace cpu_kernels_internal {

void SpinBackoff(int spins) {
  if (spins < SpinBarrier::kSpinsBeforeYield) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  } else {
    std::this_thread::yield();
  }
}

void SpinBarrier::ArriveAndWait() {
  // Read the round before arriving: the last arrival may end it at once.
  const uint32_t round = round_.load(std::memory_order_acquire);
  if (arrived_.fetch_add(1, std::memory_order_acq_rel) == count_ - 1) {
    // Last: reset for the next round, then release everyone. Nobody
    // arrives for the next round before seeing the new round number.
    arrived_.store(0, std::memory_order_relaxed);
    // Sequentially consistent with a sleeper's count and futex check: it
    // either sees the new round or is counted here.
    round_.store(round + 1, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) round_.notify_all();
    return;
  }
  for (int spins = 0; round_.load(std::memory_order_acquire) == round;
       ++spins) {
    if (spins < kSpinsBeforeSleep) {
      SpinBackoff(spins);
      continue;
    }
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    round_.wait(round, std::memory_order_seq_cst);
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
  }
}

}  // namespace cpu_kernels_internal
}  // namespace ferry
