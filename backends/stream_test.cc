#include "ferry/backends/stream.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "ferry/backends/event.h"
#include "ferry/runtime/status_matchers.h"
#include "ferry/runtime/sync_wait.h"
#include "ferry/runtime/task.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

using ::ferry::testing::IsOk;
using ::ferry::testing::StatusIs;
using ::testing::HasSubstr;

TEST(StreamTest, RunsInOrderAndEventsComplete) {
  Stream stream("s");
  std::vector<int> order;
  Event first = stream.Enqueue([&] {
    absl::SleepFor(absl::Milliseconds(2));
    order.push_back(1);
    return absl::OkStatus();
  });
  stream.Enqueue([&] {
    order.push_back(2);
    return absl::OkStatus();
  });
  Event last = stream.Record();
  FERRY_ASSERT_OK(last.WaitBlocking());
  EXPECT_TRUE(first.IsComplete());
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  FERRY_EXPECT_OK(stream.Synchronize());
}

TEST(StreamTest, DefaultEventIsComplete) {
  Event event;
  EXPECT_TRUE(event.IsComplete());
  FERRY_EXPECT_OK(event.WaitBlocking());
}

TEST(StreamTest, CrossStreamWaitOrdersWork) {
  Stream producer("producer"), consumer("consumer");
  std::atomic<int> value{0};
  producer.Enqueue([&] {
    absl::SleepFor(absl::Milliseconds(10));
    value.store(42);
    return absl::OkStatus();
  });
  consumer.EnqueueWait(producer.Record());
  int seen = -1;
  consumer.Enqueue([&] {
    seen = value.load();
    return absl::OkStatus();
  });
  FERRY_ASSERT_OK(consumer.Synchronize());
  EXPECT_EQ(seen, 42);
}

Task<absl::Status> AwaitEvent(Event event) { co_return co_await event; }

TEST(StreamTest, EventsAreAwaitable) {
  Stream stream("s");
  stream.Enqueue([] { return absl::OkStatus(); });
  FERRY_EXPECT_OK(SyncWait(AwaitEvent(stream.Record())));
}

TEST(StreamTest, FailureStopsTheStreamUntilSynchronize) {
  Stream stream("gpu0");
  bool ran_after_failure = false;
  Event failing = stream.Enqueue([] { return absl::InternalError("fault"); });
  stream.Enqueue([&] {
    ran_after_failure = true;
    return absl::OkStatus();
  });
  Event after = stream.Record();
  EXPECT_THAT(SyncWait(AwaitEvent(after)),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("gpu0: fault")));
  EXPECT_THAT(stream.Synchronize(), StatusIs(absl::StatusCode::kInternal));
  EXPECT_FALSE(ran_after_failure);
  EXPECT_THAT(failing.WaitBlocking(), StatusIs(absl::StatusCode::kInternal));
  // Usable again after Synchronize reported the failure.
  bool ran = false;
  stream.Enqueue([&] {
    ran = true;
    return absl::OkStatus();
  });
  FERRY_EXPECT_OK(stream.Synchronize());
  EXPECT_TRUE(ran);
}

TEST(StreamTest, FailedEventFailsTheWaitingStream) {
  Stream producer("producer"), consumer("consumer");
  producer.Enqueue([] { return absl::DataLossError("bad copy"); });
  consumer.EnqueueWait(producer.Record());
  EXPECT_THAT(consumer.Synchronize(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("bad copy")));
  EXPECT_THAT(producer.Synchronize(), StatusIs(absl::StatusCode::kDataLoss));
}

// Waits up to 10 s for `event`; false if it did not complete (a hang would
// otherwise stop the whole test binary).
bool CompletesSoon(const Event& event) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!event.IsComplete()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

TEST(CallerRunsStreamTest, SynchronizeRunsDeferredWorkOnTheCaller) {
  Stream stream("s", nullptr, StreamMode::kCallerRuns);
  std::vector<int> order;
  std::vector<std::thread::id> threads;
  for (int i = 0; i < 3; ++i) {
    stream.EnqueueDeferred([&, i] {
      order.push_back(i);
      threads.push_back(std::this_thread::get_id());
      return absl::OkStatus();
    });
  }
  FERRY_ASSERT_OK(stream.Synchronize());
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
  EXPECT_THAT(threads, ::testing::Each(std::this_thread::get_id()));
  EXPECT_TRUE(stream.Record().IsComplete());
}

TEST(CallerRunsStreamTest, RecordHandsDeferredWorkToTheWorker) {
  Stream stream("s", nullptr, StreamMode::kCallerRuns);
  std::thread::id ran_on;
  stream.EnqueueDeferred([&] {
    ran_on = std::this_thread::get_id();
    return absl::OkStatus();
  });
  // No Synchronize: whoever holds the event may only wait on it.
  Event event = stream.Record();
  ASSERT_TRUE(CompletesSoon(event));
  FERRY_EXPECT_OK(event.WaitBlocking());
  EXPECT_NE(ran_on, std::this_thread::get_id());
  FERRY_EXPECT_OK(stream.Synchronize());
}

TEST(CallerRunsStreamTest, FailureDropsLaterWorkAndClearsOnSynchronize) {
  Stream stream("cpu0", nullptr, StreamMode::kCallerRuns);
  bool ran_after_failure = false;
  stream.EnqueueDeferred([] { return absl::InternalError("fault"); });
  stream.EnqueueDeferred([&] {
    ran_after_failure = true;
    return absl::OkStatus();
  });
  EXPECT_THAT(stream.Synchronize(),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("cpu0: fault")));
  EXPECT_FALSE(ran_after_failure);
  bool ran = false;
  stream.EnqueueDeferred([&] {
    ran = true;
    return absl::OkStatus();
  });
  FERRY_EXPECT_OK(stream.Synchronize());
  EXPECT_TRUE(ran);
}

TEST(CallerRunsStreamTest, WaitsForAnotherStreamsEvent) {
  // The producer is caller-runs too: its Record must start its work, or the
  // consumer's Synchronize would wait forever.
  Stream producer("producer", nullptr, StreamMode::kCallerRuns);
  Stream consumer("consumer", nullptr, StreamMode::kCallerRuns);
  std::atomic<int> value{0};
  producer.EnqueueDeferred([&] {
    absl::SleepFor(absl::Milliseconds(20));
    value.store(42);
    return absl::OkStatus();
  });
  consumer.EnqueueWait(producer.Record());
  int seen = -1;
  consumer.EnqueueDeferred([&] {
    seen = value.load();
    return absl::OkStatus();
  });
  FERRY_ASSERT_OK(consumer.Synchronize());
  EXPECT_EQ(seen, 42);
  FERRY_EXPECT_OK(producer.Synchronize());
}

TEST(CallerRunsStreamTest, FailedEventFailsTheWaitingStream) {
  Stream producer("producer");
  Stream consumer("consumer", nullptr, StreamMode::kCallerRuns);
  producer.Enqueue([] { return absl::DataLossError("bad copy"); });
  consumer.EnqueueWait(producer.Record());
  EXPECT_THAT(consumer.Synchronize(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("bad copy")));
  EXPECT_THAT(producer.Synchronize(), StatusIs(absl::StatusCode::kDataLoss));
}

TEST(CallerRunsStreamTest, SynchronizeWaitsWhileTheWorkerRunsAnOperation) {
  Stream stream("s", nullptr, StreamMode::kCallerRuns);
  std::atomic<bool> release{false};
  std::atomic<bool> first_started{false};
  std::atomic<bool> first_done{false};
  stream.EnqueueDeferred([&] {
    first_started.store(true);
    while (!release.load()) absl::SleepFor(absl::Milliseconds(1));
    first_done.store(true);
    return absl::OkStatus();
  });
  Event first = stream.Record();  // The worker takes the first operation.
  while (!first_started.load()) absl::SleepFor(absl::Milliseconds(1));
  bool second_saw_first_done = false;
  stream.EnqueueDeferred([&] {
    second_saw_first_done = first_done.load();
    return absl::OkStatus();
  });
  std::thread releaser([&] {
    absl::SleepFor(absl::Milliseconds(30));
    release.store(true);
  });
  FERRY_EXPECT_OK(stream.Synchronize());
  releaser.join();
  EXPECT_TRUE(first.IsComplete());
  EXPECT_TRUE(second_saw_first_done);
}

// Two threads enqueue, record and synchronize at once: operations run on the
// worker and on both callers, but one at a time and each thread's in order.
// The counters are plain ints, so TSan sees any two that overlap.
TEST(CallerRunsStreamTest, ConcurrentCallersRunOneOperationAtATime) {
  Stream stream("s", nullptr, StreamMode::kCallerRuns);
  constexpr int kOps = 2000;
  std::atomic<bool> running{false};
  int total = 0;
  std::vector<int> seen[2];
  auto enqueuer = [&](int t) {
    for (int i = 0; i < kOps; ++i) {
      stream.EnqueueDeferred([&, t, i] {
        EXPECT_FALSE(running.exchange(true));
        ++total;
        seen[t].push_back(i);
        running.store(false);
        return absl::OkStatus();
      });
      if (i % 7 == 0) {
        Event event = stream.Record();
        if (i % 21 == 0) {
          EXPECT_TRUE(CompletesSoon(event));
        }
      }
      if (i % 3 == 0) {
        EXPECT_TRUE(stream.Synchronize().ok());
      }
    }
  };
  std::thread a(enqueuer, 0);
  std::thread b(enqueuer, 1);
  a.join();
  b.join();
  FERRY_ASSERT_OK(stream.Synchronize());
  EXPECT_EQ(total, 2 * kOps);
  for (const std::vector<int>& list : seen) {
    ASSERT_EQ(list.size(), static_cast<size_t>(kOps));
    for (int i = 0; i < kOps; ++i) EXPECT_EQ(list[i], i);
  }
}

}  // namespace
}  // namespace ferry
