#include "ferry/backends/host/kernels/internal/spin_barrier.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace ferry {
namespace cpu_kernels_internal {
namespace {

TEST(SpinBarrierTest, NoThreadPassesARoundBeforeAllArrive) {
  // Each thread writes its slot of round r, passes the barrier and checks
  // every slot holds r; a second barrier keeps the next round's writes
  // out of the check. A barrier that lets one thread through early makes
  // it see a stale slot.
  constexpr int kThreads = 4;
  constexpr int kRounds = 500;
  SpinBarrier barrier(kThreads);
  std::vector<std::atomic<int>> slots(kThreads);
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 1; r <= kRounds; ++r) {
        slots[t].store(r, std::memory_order_relaxed);
        barrier.ArriveAndWait();
        for (int u = 0; u < kThreads; ++u) {
          if (slots[u].load(std::memory_order_relaxed) != r) ++errors;
        }
        barrier.ArriveAndWait();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
}

TEST(SpinBarrierTest, OneThreadNeverWaits) {
  SpinBarrier barrier(1);
  for (int i = 0; i < 10; ++i) barrier.ArriveAndWait();
}

}  // namespace
}  // namespace cpu_kernels_internal
}  // namespace ferry
