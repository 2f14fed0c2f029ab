#include "ferry/backends/cuda/internal/gated_issue_queue.h"

#include <memory>
#include <thread>
#include <vector>

#include "ferry/runtime/status_matchers.h"
#include "ferry/runtime/timeline_semaphore.h"
#include "gtest/gtest.h"

namespace ferry::cuda_internal {
namespace {

using ::ferry::testing::StatusIs;

class GatedIssueQueueTest : public ::testing::Test {
 protected:
  GatedIssueQueue::Step Append(int value) {
    return [this, value]() -> absl::Status {
      order_.push_back(value);
      return absl::OkStatus();
    };
  }

  std::vector<int> order_;
  std::vector<absl::Status> failures_;
  GatedIssueQueue queue_{
      [this](absl::Status status) { failures_.push_back(status); }};
};

TEST_F(GatedIssueQueueTest, RunsAtOnceWhenNothingIsHeld) {
  queue_.Run(Append(1));
  queue_.Run(Append(2));
  EXPECT_EQ(order_, (std::vector<int>{1, 2}));
}

TEST_F(GatedIssueQueueTest, CompleteEventsDoNotGate) {
  queue_.WaitFor(Event());
  queue_.Run(Append(1));
  EXPECT_EQ(order_, (std::vector<int>{1}));
}

TEST_F(GatedIssueQueueTest, HoldsStepsUntilTheEventThenRunsThemInOrder) {
  auto timeline = std::make_shared<TimelineSemaphore>();
  queue_.Run(Append(1));
  queue_.WaitFor(Event(timeline, 1));
  queue_.Run(Append(2));
  queue_.WaitFor(Event(timeline, 2));
  queue_.Run(Append(3));
  EXPECT_EQ(order_, (std::vector<int>{1}));
  EXPECT_TRUE(queue_.holding());
  FERRY_ASSERT_OK(timeline->Signal(1));
  EXPECT_EQ(order_, (std::vector<int>{1, 2}));
  FERRY_ASSERT_OK(timeline->Signal(2));
  EXPECT_EQ(order_, (std::vector<int>{1, 2, 3}));
  EXPECT_FALSE(queue_.holding());
  queue_.Run(Append(4));  // Not held any more.
  EXPECT_EQ(order_, (std::vector<int>{1, 2, 3, 4}));
  EXPECT_TRUE(failures_.empty());
}

TEST_F(GatedIssueQueueTest, ReleasedFromAnotherThread) {
  auto timeline = std::make_shared<TimelineSemaphore>();
  queue_.WaitFor(Event(timeline, 1));
  for (int i = 0; i < 100; ++i) queue_.Run(Append(i));
  std::thread signaller([&] { FERRY_ASSERT_OK(timeline->Signal(1)); });
  queue_.WaitIdle();
  signaller.join();
  ASSERT_EQ(order_.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order_[i], i);
}

TEST_F(GatedIssueQueueTest, EnqueuesRaceWithRelease) {
  auto timeline = std::make_shared<TimelineSemaphore>();
  constexpr int kSteps = 2000;
  std::thread signaller([&] {
    for (uint64_t v = 1; v <= 50; ++v) FERRY_ASSERT_OK(timeline->Signal(v));
  });
  for (int i = 0; i < kSteps; ++i) {
    if (i % 40 == 0) queue_.WaitFor(Event(timeline, 1 + i / 40));
    queue_.Run(Append(i));
  }
  signaller.join();
  queue_.WaitIdle();
  ASSERT_EQ(order_.size(), static_cast<size_t>(kSteps));
  for (int i = 0; i < kSteps; ++i) EXPECT_EQ(order_[i], i);
}

TEST_F(GatedIssueQueueTest, FailedGateDropsHeldStepsUntilReset) {
  auto timeline = std::make_shared<TimelineSemaphore>();
  queue_.WaitFor(Event(timeline, 1));
  queue_.Run(Append(1));
  timeline->Fail(absl::DataLossError("producer faulted"));
  queue_.WaitIdle();
  EXPECT_TRUE(order_.empty());
  ASSERT_EQ(failures_.size(), 1u);
  EXPECT_THAT(failures_[0], StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_TRUE(queue_.failed());
  queue_.Run(Append(2));  // Still skipped.
  EXPECT_TRUE(order_.empty());
  queue_.Reset();
  queue_.Run(Append(3));
  EXPECT_EQ(order_, (std::vector<int>{3}));
}

TEST_F(GatedIssueQueueTest, AlreadyFailedEventFailsAtOnce) {
  auto timeline = std::make_shared<TimelineSemaphore>();
  timeline->Fail(absl::InternalError("gone"));
  queue_.WaitFor(Event(timeline, 1));
  EXPECT_EQ(failures_.size(), 1u);
  EXPECT_TRUE(queue_.failed());
}

TEST_F(GatedIssueQueueTest, FailingStepDropsTheRest) {
  auto timeline = std::make_shared<TimelineSemaphore>();
  queue_.WaitFor(Event(timeline, 1));
  queue_.Run([] { return absl::InternalError("launch failed"); });
  queue_.Run(Append(1));
  FERRY_ASSERT_OK(timeline->Signal(1));
  EXPECT_TRUE(order_.empty());
  ASSERT_EQ(failures_.size(), 1u);
  EXPECT_THAT(failures_[0], StatusIs(absl::StatusCode::kInternal));
}

// Steps queued with RunAlways (the backend's fences for freed memory) run
// in order even after a failure drops the steps around them.
TEST_F(GatedIssueQueueTest, RunAlwaysStepsSurviveFailures) {
  auto timeline = std::make_shared<TimelineSemaphore>();
  queue_.WaitFor(Event(timeline, 1));
  queue_.Run([] { return absl::InternalError("launch failed"); });
  queue_.Run(Append(1));
  queue_.RunAlways(Append(2));
  queue_.Run(Append(3));
  FERRY_ASSERT_OK(timeline->Signal(1));
  EXPECT_EQ(order_, (std::vector<int>{2}));
  queue_.RunAlways(Append(4));  // Not held, still failed: runs at once.
  EXPECT_EQ(order_, (std::vector<int>{2, 4}));
}

}  // namespace
}  // namespace ferry::cuda_internal
