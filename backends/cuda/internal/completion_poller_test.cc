#include "ferry/backends/cuda/internal/completion_poller.h"

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "ferry/runtime/default_executor.h"
#include "ferry/runtime/executor.h"
#include "ferry/runtime/status_matchers.h"
#include "gtest/gtest.h"

namespace ferry::cuda_internal {
namespace {

using ::ferry::testing::StatusIs;

// A fake device event: done once the test sets it.
struct FakeEvent {
  std::atomic<bool> done{false};
  CompletionPoller::Query AsQuery() {
    return [this]() -> absl::StatusOr<bool> {
      return done.load(std::memory_order_acquire);
    };
  }
};

TEST(CompletionPollerTest, DeliversCompletion) {
  CompletionPoller poller("test");
  const uint64_t lane = poller.NewLane();
  FakeEvent event;
  absl::Notification notified;
  poller.Watch(lane, event.AsQuery(), [&](absl::Status status) {
    EXPECT_THAT(status, ::ferry::testing::IsOk());
    notified.Notify();
  });
  EXPECT_FALSE(notified.WaitForNotificationWithTimeout(absl::Milliseconds(5)));
  event.done = true;
  notified.WaitForNotification();
  EXPECT_EQ(poller.completed(), 1u);
}

// Item 10 of issue #15: the poller is a device thread, so no awaiting
// coroutine ever picks it to resume on (event.h); a continuation that
// blocked there would stall every later completion of the device.
TEST(CompletionPollerTest, RunsAsADeviceThread) {
  CompletionPoller poller("test");
  const uint64_t lane = poller.NewLane();
  FakeEvent event;
  event.done = true;
  // std::mutex, not absl::Notification: TSan must see the ordering.
  std::mutex mu;
  std::condition_variable cv;
  bool delivered = false;
  bool device_thread = false;
  Executor* current = &DefaultExecutor();
  std::thread::id thread;
  poller.Watch(lane, event.AsQuery(), [&](absl::Status) {
    std::lock_guard<std::mutex> lock(mu);
    device_thread = IsDeviceThread();
    current = Executor::Current();
    thread = std::this_thread::get_id();
    delivered = true;
    cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return delivered; });
  EXPECT_TRUE(device_thread);
  EXPECT_EQ(current, nullptr);
  EXPECT_EQ(thread, poller.thread_id());
}

TEST(CompletionPollerTest, LaneCompletesInOrderEvenIfLaterIsReadyFirst) {
  CompletionPoller poller("test");
  const uint64_t lane = poller.NewLane();
  FakeEvent first, second;
  std::mutex mu;
  std::vector<int> order;
  absl::Notification both;
  poller.Watch(lane, first.AsQuery(), [&](absl::Status) {
    std::lock_guard<std::mutex> lock(mu);
    order.push_back(1);
  });
  poller.Watch(lane, second.AsQuery(), [&](absl::Status) {
    {
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(2);
    }
    both.Notify();
  });
  second.done = true;
  absl::SleepFor(absl::Milliseconds(2));
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_TRUE(order.empty());
  }
  first.done = true;
  both.WaitForNotification();
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
}

TEST(CompletionPollerTest, LanesAreIndependent) {
  CompletionPoller poller("test");
  const uint64_t a = poller.NewLane();
  const uint64_t b = poller.NewLane();
  FakeEvent blocked, ready;
  absl::Notification b_done;
  poller.Watch(a, blocked.AsQuery(), [](absl::Status) {});
  poller.Watch(b, ready.AsQuery(), [&](absl::Status) { b_done.Notify(); });
  ready.done = true;
  b_done.WaitForNotification();
  EXPECT_EQ(poller.pending(), 1u);
  blocked.done = true;
}

TEST(CompletionPollerTest, QueryErrorsReachDone) {
  CompletionPoller poller("test");
  absl::Notification notified;
  poller.Watch(
      poller.NewLane(),
      []() -> absl::StatusOr<bool> {
        return absl::InternalError("illegal address");
      },
      [&](absl::Status status) {
        EXPECT_THAT(status, StatusIs(absl::StatusCode::kInternal));
        notified.Notify();
      });
  notified.WaitForNotification();
}

TEST(CompletionPollerTest, DoneMayWatchMore) {
  CompletionPoller poller("test");
  const uint64_t lane = poller.NewLane();
  absl::Notification second_done;
  poller.Watch(
      lane, []() -> absl::StatusOr<bool> { return true; },
      [&](absl::Status) {
        poller.Watch(
            lane, []() -> absl::StatusOr<bool> { return true; },
            [&](absl::Status) { second_done.Notify(); });
      });
  second_done.WaitForNotification();
}

TEST(CompletionPollerTest, ManyThreadsManyEntries) {
  CompletionPoller poller("test");
  constexpr int kThreads = 4;
  constexpr int kPerThread = 500;
  std::atomic<int> completed{0};
  std::vector<int> last(kThreads, -1);  // Written by the poller thread only.
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const uint64_t lane = poller.NewLane();
      for (int i = 0; i < kPerThread; ++i) {
        poller.Watch(
            lane, []() -> absl::StatusOr<bool> { return true; },
            [&, t, i](absl::Status) {
              EXPECT_EQ(last[t] + 1, i);  // In order within the lane.
              last[t] = i;
              completed.fetch_add(1);
            });
      }
    });
  }
  for (auto& thread : threads) thread.join();
  while (completed.load() < kThreads * kPerThread) std::this_thread::yield();
}

TEST(CompletionPollerTest, DestructorWaitsForPendingEntries) {
  FakeEvent event;
  std::atomic<bool> delivered{false};
  std::thread completer;
  {
    CompletionPoller poller("test");
    poller.Watch(poller.NewLane(), event.AsQuery(),
                 [&](absl::Status) { delivered = true; });
    completer = std::thread([&] {
      absl::SleepFor(absl::Milliseconds(5));
      event.done = true;
    });
  }
  EXPECT_TRUE(delivered.load());
  completer.join();
}

}  // namespace
}  // namespace ferry::cuda_internal
