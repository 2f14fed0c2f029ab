#include "ferry/runtime/timer_queue.h"

#include <atomic>
#include <mutex>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

TEST(TimerQueueTest, FiresInDeadlineOrder) {
  TimerQueue queue;
  std::mutex mu;
  std::vector<int> order;
  std::atomic<int> fired{0};
  const absl::Time now = absl::Now();
  for (int i : {3, 1, 2}) {
    queue.Schedule(now + absl::Milliseconds(5 * i), [&, i] {
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(i);
      fired.fetch_add(1);
    });
  }
  while (fired.load() < 3) absl::SleepFor(absl::Milliseconds(1));
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
}

TEST(TimerQueueTest, CancelledTimerNeverFires) {
  TimerQueue queue;
  std::atomic<bool> fired{false};
  auto id = queue.Schedule(absl::Now() + absl::Milliseconds(20),
                           [&] { fired.store(true); });
  EXPECT_TRUE(queue.Cancel(id));
  absl::SleepFor(absl::Milliseconds(40));
  EXPECT_FALSE(fired.load());
  EXPECT_FALSE(queue.Cancel(id));
}

TEST(TimerQueueTest, CancelWaitsForARunningCallback) {
  TimerQueue queue;
  std::atomic<int> state{0};
  auto id = queue.Schedule(absl::Now(), [&] {
    state.store(1);
    absl::SleepFor(absl::Milliseconds(20));
    state.store(2);
  });
  while (state.load() == 0) absl::SleepFor(absl::Microseconds(100));
  EXPECT_FALSE(queue.Cancel(id));
  EXPECT_EQ(state.load(), 2);
}

}  // namespace
}  // namespace ferry
