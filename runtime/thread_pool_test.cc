#include "ferry/runtime/thread_pool.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "ferry/runtime/executor.h"
#include "ferry/runtime/sync_wait.h"
#include "ferry/runtime/task.h"
#include "ferry/runtime/when_all.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

Task<std::thread::id> HopAndReportThread(Executor* executor) {
  co_await executor->Schedule();
  co_return std::this_thread::get_id();
}

TEST(ThreadPoolTest, ScheduleHopsOntoAWorker) {
  ThreadPool pool(2);
  const std::thread::id worker = SyncWait(HopAndReportThread(&pool));
  EXPECT_NE(worker, std::this_thread::get_id());
}

Task<bool> RunsOnWorker(ThreadPool* pool) {
  co_await pool->Schedule();
  co_return pool->IsWorkerThread();
}

TEST(ThreadPoolTest, IsWorkerThread) {
  ThreadPool pool(1);
  EXPECT_FALSE(pool.IsWorkerThread());
  EXPECT_TRUE(SyncWait(RunsOnWorker(&pool)));
}

Task<void> CountOnce(ThreadPool* pool, std::atomic<int>* slot) {
  co_await pool->Schedule();
  slot->fetch_add(1, std::memory_order_relaxed);
}

// 100,000 tasks spread across the pool each run exactly once.
TEST(ThreadPoolTest, HundredThousandTasksEachCompleteOnce) {
  constexpr int kTasks = 100'000;
  ThreadPool pool(4);
  auto counts = std::make_unique<std::atomic<int>[]>(kTasks);
  std::vector<Task<void>> tasks;
  tasks.reserve(kTasks);
  for (int i = 0; i < kTasks; ++i)
    tasks.push_back(CountOnce(&pool, &counts[i]));
  SyncWait(WhenAll(std::move(tasks)));
  int wrong = 0;
  for (int i = 0; i < kTasks; ++i) wrong += counts[i].load() != 1;
  EXPECT_EQ(wrong, 0);
}

Task<void> PostFromWorker(ThreadPool* pool, std::atomic<int>* done, int depth) {
  co_await pool->Schedule();
  if (depth > 0) {
    std::vector<Task<void>> children;
    children.push_back(PostFromWorker(pool, done, depth - 1));
    children.push_back(PostFromWorker(pool, done, depth - 1));
    co_await WhenAll(std::move(children));
  }
  done->fetch_add(1);
}

TEST(ThreadPoolTest, WorkPostedFromWorkersIsStolenAndCompletes) {
  ThreadPool pool(3);
  std::atomic<int> done{0};
  SyncWait(PostFromWorker(&pool, &done, 10));
  EXPECT_EQ(done.load(), (1 << 11) - 1);
}

TEST(ThreadPoolTest, ManualExecutorRunsQueuedWorkInOrder) {
  ManualExecutor executor;
  std::vector<int> order;
  auto step = [](ManualExecutor* e, std::vector<int>* out,
                 int v) -> Task<void> {
    co_await e->Schedule();
    out->push_back(v);
  };
  std::vector<Task<void>> tasks;
  for (int i = 0; i < 3; ++i) tasks.push_back(step(&executor, &order, i));
  auto all = WhenAll(std::move(tasks));
  // Nothing ran yet: the tasks are queued on the manual executor.
  std::thread runner([&] { SyncWait(std::move(all)); });
  while (executor.pending() < 3) std::this_thread::yield();
  EXPECT_TRUE(order.empty());
  EXPECT_EQ(executor.RunUntilIdle(), 3u);
  runner.join();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
}

}  // namespace
}  // namespace ferry
