#include "ferry/backends/stream.h"

#include <atomic>
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

}  // namespace
}  // namespace ferry
