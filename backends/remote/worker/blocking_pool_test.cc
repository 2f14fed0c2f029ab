#include "ferry/backends/remote/worker/blocking_pool.h"

#include <atomic>

#include "absl/synchronization/notification.h"
#include "ferry/runtime/status_matchers.h"
#include "gtest/gtest.h"

namespace ferry::remote {
namespace {

using ::ferry::testing::StatusIs;

TEST(BlockingPoolTest, RunsWorkAndRefusesPastItsQueue) {
  FERRY_ASSERT_OK_AND_ASSIGN(auto pool, BlockingPool::Create(1, 2));
  absl::Notification release, started;
  std::atomic<int> ran{0};
  FERRY_ASSERT_OK(pool->Run([&] {
    started.Notify();
    release.WaitForNotification();
    ++ran;
  }));
  started.WaitForNotification();
  FERRY_ASSERT_OK(pool->Run([&] { ++ran; }));
  FERRY_ASSERT_OK(pool->Run([&] { ++ran; }));
  EXPECT_THAT(pool->Run([&] { ++ran; }),
              StatusIs(absl::StatusCode::kResourceExhausted));
  release.Notify();
  pool.reset();  // Runs what was queued.
  EXPECT_EQ(ran.load(), 3);
}

TEST(BlockingPoolTest, RefusesNonsenseSizes) {
  EXPECT_THAT(BlockingPool::Create(0, 1),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(BlockingPool::Create(1, 0),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace ferry::remote
