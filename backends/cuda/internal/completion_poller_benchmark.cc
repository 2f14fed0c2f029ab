// How long the completion poller takes to notice completed work, with a
// host flag standing in for a CUDA event (no GPU needed): the latency from
// the flag flipping to `done` running on the poller thread, when the work
// completes at once (spin phase) and after a delay (the backoff's sleeps).
// Run with ./bazelw run --config=opt
// //backends/cuda/internal:completion_poller_benchmark
#include <benchmark/benchmark.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "absl/synchronization/notification.h"
#include "ferry/backends/cuda/internal/completion_poller.h"

namespace ferry::cuda_internal {
namespace {

using Clock = std::chrono::steady_clock;

// range(0): microseconds between Watch and the flag flipping.
void BM_CompletionLatency(benchmark::State& state) {
  CompletionPoller poller("bench");
  const uint64_t lane = poller.NewLane();
  const auto delay = std::chrono::microseconds(state.range(0));
  double total_ns = 0;
  for (auto _ : state) {
    std::atomic<bool> flag{false};
    std::atomic<int64_t> flipped_at{0};
    absl::Notification done;
    Clock::time_point seen;
    poller.Watch(
        lane, [&]() -> absl::StatusOr<bool> { return flag.load(); },
        [&](absl::Status) {
          seen = Clock::now();
          done.Notify();
        });
    const auto until = Clock::now() + delay;
    while (Clock::now() < until) {
    }
    const auto flip = Clock::now();
    flag.store(true);
    done.WaitForNotification();
    total_ns += std::chrono::duration<double, std::nano>(seen - flip).count();
  }
  state.counters["latency_us"] =
      total_ns / 1000.0 / static_cast<double>(state.iterations());
}
BENCHMARK(BM_CompletionLatency)
    ->Arg(0)
    ->Arg(10)
    ->Arg(100)
    ->Arg(1000)
    ->UseRealTime();

}  // namespace
}  // namespace ferry::cuda_internal
