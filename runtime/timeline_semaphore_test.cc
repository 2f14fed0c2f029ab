#include "ferry/runtime/timeline_semaphore.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "ferry/runtime/cancellation.h"
#include "ferry/runtime/executor.h"
#include "ferry/runtime/promise.h"
#include "ferry/runtime/status_matchers.h"
#include "ferry/runtime/sync_wait.h"
#include "ferry/runtime/task.h"
#include "ferry/runtime/thread_pool.h"
#include "ferry/runtime/when_all.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

using ::ferry::testing::IsOk;
using ::ferry::testing::StatusIs;

Task<absl::Status> WaitFor(TimelineSemaphore* sem, uint64_t value,
                           std::atomic<int>* resumed,
                           WaitOptions options = {}) {
  absl::Status status = co_await sem->Wait(value, std::move(options));
  resumed->fetch_add(1);
  co_return status;
}

TEST(TimelineSemaphoreTest, ReadyWaitDoesNotSuspend) {
  TimelineSemaphore sem(5);
  std::atomic<int> resumed{0};
  EXPECT_THAT(SyncWait(WaitFor(&sem, 3, &resumed)), IsOk());
  EXPECT_THAT(SyncWait(WaitFor(&sem, 5, &resumed)), IsOk());
}

Task<void> AwaitAll(std::vector<Task<absl::Status>> waits, bool* done) {
  EXPECT_THAT(co_await WhenAllOk(std::move(waits)), IsOk());
  *done = true;
}

TEST(TimelineSemaphoreTest, WaitersResumeWhenTheirValueIsReached) {
  TimelineSemaphore sem;
  ManualExecutor executor;
  std::atomic<int> resumed{0};
  std::vector<Task<absl::Status>> waits;
  for (uint64_t v : {1, 2, 3}) {
    WaitOptions options;
    options.resume_on = &executor;
    waits.push_back(WaitFor(&sem, v, &resumed, options));
  }
  bool done = false;
  Detach(AwaitAll(std::move(waits), &done));  // Runs until all three wait.
  EXPECT_EQ(executor.pending(), 0u);
  FERRY_EXPECT_OK(sem.Signal(2));
  // Waiters for 1 and 2 were handed to the executor; 3 still waits.
  EXPECT_EQ(executor.pending(), 2u);
  EXPECT_EQ(resumed.load(), 0);
  executor.RunUntilIdle();
  EXPECT_EQ(resumed.load(), 2);
  EXPECT_FALSE(done);
  FERRY_EXPECT_OK(sem.Signal(3));
  executor.RunUntilIdle();
  EXPECT_EQ(resumed.load(), 3);
  EXPECT_TRUE(done);
  EXPECT_EQ(sem.Value(), 3u);
}

TEST(TimelineSemaphoreTest, ValueOnlyRises) {
  TimelineSemaphore sem(4);
  FERRY_EXPECT_OK(sem.Signal(4));  // Same value: no-op.
  EXPECT_THAT(sem.Signal(3), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(sem.Value(), 4u);
}

TEST(TimelineSemaphoreTest, FailureWakesEveryWaiterAndSticks) {
  TimelineSemaphore sem;
  ThreadPool pool(2);
  std::atomic<int> resumed{0};
  std::vector<Task<absl::Status>> waits;
  for (int i = 0; i < 8; ++i) {
    WaitOptions options;
    options.resume_on = &pool;
    waits.push_back(WaitFor(&sem, 10 + i, &resumed, options));
  }
  std::thread failer([&] {
    absl::SleepFor(absl::Milliseconds(5));
    sem.Fail(absl::DataLossError("device lost"));
  });
  auto results = SyncWait(WhenAll(std::move(waits)));
  failer.join();
  for (const absl::Status& s : results) {
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kDataLoss));
  }
  // Future waits and signals see the same failure.
  EXPECT_THAT(SyncWait(WaitFor(&sem, 1, &resumed)),
              StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(sem.Signal(100), StatusIs(absl::StatusCode::kDataLoss));
  sem.Fail(absl::InternalError("second failure is ignored"));
  EXPECT_THAT(sem.status(), StatusIs(absl::StatusCode::kDataLoss));
}

TEST(TimelineSemaphoreTest, DeadlineExpires) {
  TimelineSemaphore sem;
  std::atomic<int> resumed{0};
  WaitOptions options;
  options.deadline = absl::Now() + absl::Milliseconds(10);
  const absl::Time start = absl::Now();
  EXPECT_THAT(SyncWait(WaitFor(&sem, 1, &resumed, options)),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(9));
  // A past deadline fails at once; a satisfied wait ignores the deadline.
  options.deadline = absl::Now() - absl::Seconds(1);
  EXPECT_THAT(SyncWait(WaitFor(&sem, 1, &resumed, options)),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
  FERRY_EXPECT_OK(sem.Signal(1));
  EXPECT_THAT(SyncWait(WaitFor(&sem, 1, &resumed, options)), IsOk());
}

TEST(TimelineSemaphoreTest, BlockingWaitWithDeadline) {
  TimelineSemaphore sem;
  EXPECT_THAT(sem.WaitBlocking(1, absl::Now() + absl::Milliseconds(5)),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
  std::thread signaller([&] {
    absl::SleepFor(absl::Milliseconds(5));
    FERRY_EXPECT_OK(sem.Signal(7));
  });
  FERRY_EXPECT_OK(sem.WaitBlocking(7));
  signaller.join();
}

TEST(TimelineSemaphoreTest, CancellationWakesWaiter) {
  TimelineSemaphore sem;
  CancellationSource source;
  std::atomic<int> resumed{0};
  WaitOptions options;
  options.cancellation = source.Token();
  std::thread canceller([&] {
    absl::SleepFor(absl::Milliseconds(5));
    source.Cancel();
  });
  EXPECT_THAT(SyncWait(WaitFor(&sem, 1, &resumed, options)),
              StatusIs(absl::StatusCode::kCancelled));
  canceller.join();
  // Already cancelled: fails without suspending.
  EXPECT_THAT(SyncWait(WaitFor(&sem, 1, &resumed, options)),
              StatusIs(absl::StatusCode::kCancelled));
}

// Signal, deadline and cancellation race on many waiters; each waiter must
// resume exactly once with one of the three outcomes (TSan checks the rest).
TEST(TimelineSemaphoreTest, RacingCompletionsResumeEachWaiterOnce) {
  ThreadPool pool(3);
  for (int round = 0; round < 50; ++round) {
    TimelineSemaphore sem;
    CancellationSource source;
    std::atomic<int> resumed{0};
    std::vector<Task<absl::Status>> waits;
    for (int i = 0; i < 16; ++i) {
      WaitOptions options;
      options.resume_on = &pool;
      options.cancellation = source.Token();
      options.deadline = absl::Now() + absl::Microseconds(50 * (i % 4));
      waits.push_back(WaitFor(&sem, 1, &resumed, options));
    }
    std::thread signaller([&] { FERRY_EXPECT_OK(sem.Signal(1)); });
    std::thread canceller([&] { source.Cancel(); });
    auto results = SyncWait(WhenAll(std::move(waits)));
    signaller.join();
    canceller.join();
    EXPECT_EQ(resumed.load(), 16);
    for (const absl::Status& s : results) {
      EXPECT_TRUE(s.ok() || absl::IsCancelled(s) || absl::IsDeadlineExceeded(s))
          << s;
    }
  }
}

TEST(AsyncEventTest, SetWakesPresentAndFutureWaiters) {
  AsyncEvent event;
  EXPECT_FALSE(event.IsSet());
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(2));
    event.Set();
  });
  FERRY_EXPECT_OK(event.WaitBlocking());
  setter.join();
  EXPECT_TRUE(event.IsSet());
  auto wait_again = [](AsyncEvent* e) -> Task<absl::Status> {
    co_return co_await e->Wait();
  };
  FERRY_EXPECT_OK(SyncWait(wait_again(&event)));
}

}  // namespace
}  // namespace ferry
