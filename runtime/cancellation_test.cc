#include "ferry/runtime/cancellation.h"

#include <atomic>
#include <optional>
#include <thread>

#include "gtest/gtest.h"

namespace ferry {
namespace {

TEST(CancellationTest, DefaultTokenIsNeverCancelled) {
  CancellationToken token;
  EXPECT_FALSE(token.CanBeCancelled());
  EXPECT_FALSE(token.IsCancelled());
}

TEST(CancellationTest, CancelRunsRegisteredCallbacksOnce) {
  CancellationSource source;
  int runs = 0;
  CancellationCallback a(source.Token(), [&] { ++runs; });
  CancellationCallback b(source.Token(), [&] { ++runs; });
  EXPECT_FALSE(source.Token().IsCancelled());
  source.Cancel();
  source.Cancel();
  EXPECT_TRUE(source.Token().IsCancelled());
  EXPECT_EQ(runs, 2);
}

TEST(CancellationTest, RegisteringAfterCancelRunsImmediately) {
  CancellationSource source;
  source.Cancel();
  bool ran = false;
  CancellationCallback callback(source.Token(), [&] { ran = true; });
  EXPECT_TRUE(ran);
}

TEST(CancellationTest, DestroyedCallbackNeverRuns) {
  CancellationSource source;
  bool ran = false;
  {
    CancellationCallback callback(source.Token(), [&] { ran = true; });
  }
  source.Cancel();
  EXPECT_FALSE(ran);
}

TEST(CancellationTest, DestroyWaitsForACallbackRunningElsewhere) {
  for (int round = 0; round < 200; ++round) {
    CancellationSource source;
    std::atomic<int> state{0};  // 1 = callback running, 2 = finished.
    std::optional<CancellationCallback> callback;
    callback.emplace(source.Token(), [&] {
      state.store(1);
      std::this_thread::yield();
      state.store(2);
    });
    std::thread canceller([&] { source.Cancel(); });
    callback.reset();
    // After the destructor returns the callback is either done or never ran.
    const int seen = state.load();
    EXPECT_TRUE(seen == 0 || seen == 2) << seen;
    canceller.join();
  }
}

}  // namespace
}  // namespace ferry
