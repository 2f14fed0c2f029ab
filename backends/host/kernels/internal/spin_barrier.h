// SpinBarrier: the barrier between the nodes a CPU backend's threads compute.
//
// Nodes are often a few microseconds long (a norm over one token's row), so
// a barrier that puts threads to sleep costs more than the node: waking a
// sleeping thread is a futex call on one side and, on a virtual machine, an
// inter-processor interrupt of tens of microseconds on the other. Threads
// that arrive early therefore spin (with PAUSE), as ggml's CPU threads do;
// after kSpinsBeforeYield rounds they yield between checks, so that on an
// oversubscribed machine a late thread still gets the core it waits for.
#ifndef FERRY_BACKENDS_HOST_KERNELS_INTERNAL_SPIN_BARRIER_H_
#define FERRY_BACKENDS_HOST_KERNELS_INTERNAL_SPIN_BARRIER_H_

#include <atomic>
#include <cstdint>

namespace ferry {
namespace cpu_kernels_internal {

// Spins briefly (PAUSE), then yields: call with the number of checks so far.
void SpinBackoff(int spins);

// A reusable barrier for a fixed number of threads. Thread-safe.
class SpinBarrier {
 public:
  static constexpr int kSpinsBeforeYield = 1024;

  // `count` threads take part; count >= 1.
  explicit SpinBarrier(int count) : count_(count) {}
  SpinBarrier(const SpinBarrier&) = delete;
  SpinBarrier& operator=(const SpinBarrier&) = delete;

  // Returns once all `count` threads have called it in this round. Writes
  // made before it by any thread are visible after it to all.
  void ArriveAndWait();

 private:
  const int count_;
  std::atomic<int> arrived_{0};
  std::atomic<uint32_t> round_{0};
};

}  // namespace cpu_kernels_internal
}  // namespace ferry

#endif  // FERRY_BACKENDS_HOST_KERNELS_INTERNAL_SPIN_BARRIER_H_
