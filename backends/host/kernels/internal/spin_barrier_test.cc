#include "ferry/backends/host/kernels/internal/spin_barrier.h"

#include <atomic>
#include <chrono>
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

// A thread that arrives milliseconds late finds the others asleep (past
// their spins and yields): its arrival wakes them, every round, and none
// passes early. A lost wake-up hangs the test; an early pass is counted.
TEST(SpinBarrierTest, LateArrivalWakesSleepers) {
  constexpr int kThreads = 3;
  constexpr int kRounds = 20;
  SpinBarrier barrier(kThreads);
  std::atomic<int> arrived{0};
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 1; r <= kRounds; ++r) {
        if (t == r % kThreads) {
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        arrived.fetch_add(1);
        barrier.ArriveAndWait();
        if (arrived.load() < r * kThreads) ++errors;
        barrier.ArriveAndWait();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(arrived.load(), kRounds * kThreads);
}

TEST(SpinBarrierTest, OneThreadNeverWaits) {
  SpinBarrier barrier(1);
  for (int i = 0; i < 10; ++i) barrier.ArriveAndWait();
}

}  // namespace
}  // namespace cpu_kernels_internal
}  // namespace ferry
