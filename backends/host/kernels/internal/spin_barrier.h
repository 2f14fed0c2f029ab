// SpinBarrier: the barrier between the nodes a CPU backend's threads compute.
//
// Nodes are often a few microseconds long (a norm over one token's row), so
// a barrier that puts threads to sleep costs more than the node: waking a
// sleeping thread is a futex call on one side and, on a virtual machine, an
// inter-processor interrupt of tens of microseconds on the other. Threads
// that arrive early therefore spin (with PAUSE), as ggml's CPU threads do;
// after kSpinsBeforeYield rounds they yield between checks, and after
// kSpinsBeforeSleep they sleep on the round's futex until the last thread
// arrives. On a machine with more runnable threads than cores the thread
// that is late has lost its core: spinning and yielding only keep it from
// running (a run of SmolLM2 took 40x as long on a loaded 2-core machine),
// while a sleeper hands its core over at once.
#ifndef FERRY_BACKENDS_HOST_KERNELS_INTERNAL_SPIN_BARRIER_H_
#define FERRY_BACKENDS_HOST_KERNELS_INTERNAL_SPIN_BARRIER_H_

#include <atomic>
#include <cstdint>

namespace ferry {
namespace cpu_kernels_internal {

// Spins briefly (PAUSE), then yields: call with the number of checks so far.
// Callers that can wait longer sleep after kSpinsBeforeSleep checks.
void SpinBackoff(int spins);

// A reusable barrier for a fixed number of threads. Thread-safe.
class SpinBarrier {
 public:
  static constexpr int kSpinsBeforeYield = 1024;
  static constexpr int kSpinsBeforeSleep = kSpinsBeforeYield + 64;

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
  // 32 bits: std::atomic::wait on it is a plain futex wait.
  std::atomic<uint32_t> round_{0};
  // Threads asleep on round_ (the last arrival wakes them only if any).
  std::atomic<int> sleepers_{0};
};

}  // namespace cpu_kernels_internal
}  // namespace ferry

#endif  // FERRY_BACKENDS_HOST_KERNELS_INTERNAL_SPIN_BARRIER_H_
