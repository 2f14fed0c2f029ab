// Costs of the coroutine runtime's basic operations, each beside the
// baseline it should be compared with in the same run.
#include <functional>
#include <thread>
#include <vector>

#include "benchmark/benchmark.h"
#include "ferry/runtime/promise.h"
#include "ferry/runtime/sync_wait.h"
#include "ferry/runtime/task.h"
#include "ferry/runtime/thread_pool.h"
#include "ferry/runtime/timeline_semaphore.h"
#include "ferry/runtime/when_all.h"

namespace ferry {
namespace {

__attribute__((noinline)) int PlainAddOne(int v) {
  benchmark::ClobberMemory();
  return v + 1;
}

Task<int> TaskAddOne(int v) { co_return v + 1; }

// (1) Baselines: a plain call and a std::function call.
void BM_PlainCall(benchmark::State& state) {
  int v = 0;
  for (auto _ : state) benchmark::DoNotOptimize(v = PlainAddOne(v));
}
BENCHMARK(BM_PlainCall);

void BM_StdFunctionCall(benchmark::State& state) {
  std::function<int(int)> fn = PlainAddOne;
  benchmark::DoNotOptimize(fn);
  int v = 0;
  for (auto _ : state) benchmark::DoNotOptimize(v = fn(v));
}
BENCHMARK(BM_StdFunctionCall);

// (1) Create, await and complete a trivial task from inside a coroutine.
Task<void> AwaitTrivialTasks(benchmark::State& state) {
  int v = 0;
  for (auto _ : state) benchmark::DoNotOptimize(v = co_await TaskAddOne(v));
}
void BM_TaskCreateAwaitComplete(benchmark::State& state) {
  SyncWait(AwaitTrivialTasks(state));
}
BENCHMARK(BM_TaskCreateAwaitComplete);

// (2) Hop from the calling thread onto the pool and back (SyncWait wakes).
Task<void> Hop(ThreadPool* pool) { co_await pool->Schedule(); }
void BM_HopOntoPoolAndBack(benchmark::State& state) {
  ThreadPool pool(static_cast<int>(state.range(0)));
  for (auto _ : state) SyncWait(Hop(&pool));
}
BENCHMARK(BM_HopOntoPoolAndBack)->Arg(1)->Arg(2)->UseRealTime();

// (3) WhenAll of 1,000 tasks: completing inline, and each hopping the pool.
void BM_WhenAllInline1000(benchmark::State& state) {
  for (auto _ : state) {
    std::vector<Task<int>> tasks;
    tasks.reserve(1000);
    for (int i = 0; i < 1000; ++i) tasks.push_back(TaskAddOne(i));
    benchmark::DoNotOptimize(SyncWait(WhenAll(std::move(tasks))));
  }
  state.SetItemsProcessed(state.iterations() * 1000);
}
BENCHMARK(BM_WhenAllInline1000);

Task<int> HopAddOne(ThreadPool* pool, int v) {
  co_await pool->Schedule();
  co_return v + 1;
}
void BM_WhenAllOnPool1000(benchmark::State& state) {
  ThreadPool pool(2);
  for (auto _ : state) {
    std::vector<Task<int>> tasks;
    tasks.reserve(1000);
    for (int i = 0; i < 1000; ++i) tasks.push_back(HopAddOne(&pool, i));
    benchmark::DoNotOptimize(SyncWait(WhenAll(std::move(tasks))));
  }
  state.SetItemsProcessed(state.iterations() * 1000);
}
BENCHMARK(BM_WhenAllOnPool1000)->UseRealTime();

// (4) Semaphore signal to waiter resume, same thread: Signal() resumes the
// waiting coroutine inline before it returns.
Task<void> WaitSequence(TimelineSemaphore* sem, int64_t count) {
  for (int64_t i = 1; i <= count; ++i) (void)co_await sem->Wait(i);
}
void BM_SemaphoreSignalToResumeInline(benchmark::State& state) {
  const int64_t n = state.max_iterations;
  TimelineSemaphore sem;
  Detach(WaitSequence(&sem, n));  // Runs until it waits for 1.
  uint64_t v = 0;
  for (auto _ : state) benchmark::DoNotOptimize(sem.Signal(++v));
}
BENCHMARK(BM_SemaphoreSignalToResumeInline);

// (4) Cross-thread ping-pong: a pool coroutine waits for ping k and signals
// pong k; the benchmark thread signals ping and blocks on pong. One iteration
// is two signal-to-resume latencies.
Task<void> Ponger(ThreadPool* pool, TimelineSemaphore* ping,
                  TimelineSemaphore* pong, int64_t count) {
  co_await pool->Schedule();
  WaitOptions options;
  options.resume_on = pool;
  for (int64_t i = 1; i <= count; ++i) {
    (void)co_await ping->Wait(i, options);
    (void)pong->Signal(i);
  }
}
void BM_SemaphorePingPongAcrossThreads(benchmark::State& state) {
  ThreadPool pool(1);
  TimelineSemaphore ping, pong;
  const int64_t n = state.max_iterations;
  std::thread runner([&] { SyncWait(Ponger(&pool, &ping, &pong, n)); });
  uint64_t v = 0;
  for (auto _ : state) {
    (void)ping.Signal(++v);
    (void)pong.WaitBlocking(v);
  }
  runner.join();
}
BENCHMARK(BM_SemaphorePingPongAcrossThreads)->UseRealTime();

}  // namespace
}  // namespace ferry
