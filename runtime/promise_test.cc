#include "ferry/runtime/promise.h"

#include <string>
#include <thread>

#include "ferry/runtime/status_matchers.h"
#include "ferry/runtime/sync_wait.h"
#include "ferry/runtime/task.h"
#include "ferry/runtime/thread_pool.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

using ::ferry::testing::StatusIs;

TEST(PromiseTest, ValueCrossesThreads) {
  Promise<std::string> promise;
  Future<std::string> future = promise.GetFuture();
  std::thread producer(
      [p = std::move(promise)]() mutable { p.SetValue("hello"); });
  auto value = SyncWait(future.Get());
  producer.join();
  ASSERT_TRUE(value.ok());
  EXPECT_EQ(*value, "hello");
}

TEST(PromiseTest, ErrorAndBrokenPromise) {
  Promise<int> failing;
  Future<int> failed = failing.GetFuture();
  failing.SetError(absl::NotFoundError("nothing"));
  EXPECT_THAT(failed.GetBlocking(), StatusIs(absl::StatusCode::kNotFound));

  Future<int> broken = [] {
    Promise<int> abandoned;
    return abandoned.GetFuture();
  }();
  EXPECT_THAT(broken.GetBlocking(), StatusIs(absl::StatusCode::kCancelled));
}

Task<void> SetLater(ThreadPool* pool, Promise<int> promise) {
  co_await pool->Schedule();
  promise.SetValue(42);
}

TEST(PromiseTest, DetachedTaskFulfilsPromise) {
  ThreadPool pool(1);
  Promise<int> promise;
  Future<int> future = promise.GetFuture();
  Detach(SetLater(&pool, std::move(promise)));
  EXPECT_EQ(*future.GetBlocking(), 42);
}

}  // namespace
}  // namespace ferry
