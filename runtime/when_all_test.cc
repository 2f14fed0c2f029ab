#include "ferry/runtime/when_all.h"

#include <atomic>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "ferry/runtime/cancellation.h"
#include "ferry/runtime/status_matchers.h"
#include "ferry/runtime/sync_wait.h"
#include "ferry/runtime/task.h"
#include "ferry/runtime/thread_pool.h"
#include "ferry/runtime/timeline_semaphore.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

using ::ferry::testing::IsOk;
using ::ferry::testing::StatusIs;

Task<int> SquareOnPool(ThreadPool* pool, int v) {
  co_await pool->Schedule();
  co_return v* v;
}

TEST(WhenAllTest, VectorResultsComeBackInOrder) {
  ThreadPool pool(3);
  std::vector<Task<int>> tasks;
  for (int i = 0; i < 100; ++i) tasks.push_back(SquareOnPool(&pool, i));
  std::vector<int> results = SyncWait(WhenAll(std::move(tasks)));
  ASSERT_EQ(results.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(results[i], i * i);
}

TEST(WhenAllTest, EmptyVector) {
  EXPECT_TRUE(SyncWait(WhenAll(std::vector<Task<int>>{})).empty());
}

Task<std::string> Word() { co_return "word"; }
Task<void> Nothing() { co_return; }

TEST(WhenAllTest, FixedSetReturnsATuple) {
  ThreadPool pool(2);
  auto [a, b, c] = SyncWait(WhenAll(SquareOnPool(&pool, 3), Word(), Nothing()));
  EXPECT_EQ(a, 9);
  EXPECT_EQ(b, "word");
  (void)c;
}

Task<int> ThrowAfterHop(ThreadPool* pool) {
  co_await pool->Schedule();
  throw std::runtime_error("child failed");
}

Task<int> CountFinished(ThreadPool* pool, std::atomic<int>* finished) {
  co_await pool->Schedule();
  finished->fetch_add(1);
  co_return 1;
}

TEST(WhenAllTest, ExceptionIsRethrownAfterAllChildrenFinish) {
  ThreadPool pool(2);
  std::atomic<int> finished{0};
  std::vector<Task<int>> tasks;
  tasks.push_back(ThrowAfterHop(&pool));
  for (int i = 0; i < 10; ++i) tasks.push_back(CountFinished(&pool, &finished));
  EXPECT_THROW(SyncWait(WhenAll(std::move(tasks))), std::runtime_error);
  EXPECT_EQ(finished.load(), 10);
}

Task<absl::Status> FailAfter(ThreadPool* pool, absl::Duration delay) {
  co_await pool->Schedule();
  absl::SleepFor(delay);
  co_return absl::UnavailableError("link down");
}

// Waits on a semaphore nobody signals; only cancellation ends it.
Task<absl::Status> WaitUntilCancelled(TimelineSemaphore* never,
                                      CancellationToken token,
                                      std::atomic<int>* woke) {
  WaitOptions options;
  options.cancellation = std::move(token);
  absl::Status status = co_await never->Wait(1, std::move(options));
  woke->fetch_add(1);
  co_return status;
}

TEST(WhenAllOkTest, FirstErrorCancelsSiblingsAndEveryChildFinishes) {
  ThreadPool pool(2);
  TimelineSemaphore never;
  CancellationSource cancel;
  std::atomic<int> woke{0};
  std::vector<Task<absl::Status>> tasks;
  for (int i = 0; i < 5; ++i) {
    tasks.push_back(WaitUntilCancelled(&never, cancel.Token(), &woke));
  }
  tasks.push_back(FailAfter(&pool, absl::Milliseconds(2)));
  absl::Status status = SyncWait(WhenAllOk(std::move(tasks), &cancel));
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(woke.load(), 5);
  EXPECT_TRUE(cancel.IsCancelled());
}

Task<absl::StatusOr<int>> MaybeValue(ThreadPool* pool, int v) {
  co_await pool->Schedule();
  if (v < 0) co_return absl::InvalidArgumentError("negative");
  co_return v;
}

TEST(WhenAllOkTest, StatusOrValuesInOrderOrFirstError) {
  ThreadPool pool(2);
  std::vector<Task<absl::StatusOr<int>>> ok;
  for (int i = 0; i < 5; ++i) ok.push_back(MaybeValue(&pool, i));
  auto values = SyncWait(WhenAllOk(std::move(ok)));
  ASSERT_THAT(values, IsOk());
  EXPECT_EQ(*values, (std::vector<int>{0, 1, 2, 3, 4}));

  std::vector<Task<absl::StatusOr<int>>> bad;
  bad.push_back(MaybeValue(&pool, 1));
  bad.push_back(MaybeValue(&pool, -1));
  EXPECT_THAT(SyncWait(WhenAllOk(std::move(bad))),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace ferry
