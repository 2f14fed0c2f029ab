// Conformance: events, waits, and where awaiting coroutines resume.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "ferry/runtime/executor.h"
#include "ferry/runtime/promise.h"
#include "ferry/runtime/status_matchers.h"
#include "ferry/runtime/sync_wait.h"
#include "ferry/runtime/thread_pool.h"
#include "ferry/runtime/timeline_semaphore.h"
#include "ferry/tests/conformance/conformance.h"
#include "gmock/gmock.h"

namespace ferry::testing {
namespace {

// Runs `body` on another thread; fails the test and aborts if it does not
// finish within `limit` (a deadlock would otherwise hang the suite).
void FinishesWithin(std::chrono::seconds limit, std::function<void()> body) {
  std::packaged_task<void()> task(std::move(body));
  std::future<void> done = task.get_future();
  std::thread thread(std::move(task));
  if (done.wait_for(limit) != std::future_status::ready) {
    std::fprintf(stderr, "deadlock: the body did not finish within %llds\n",
                 static_cast<long long>(limit.count()));
    std::abort();
  }
  thread.join();
}

TEST_P(EventConformanceTest, RecordOnAnEmptyStreamIsComplete) {
  Event event = backend().Record();
  EXPECT_TRUE(event.IsComplete());
  FERRY_EXPECT_OK(event.WaitBlocking());
  FERRY_EXPECT_OK(SyncWait(
      [](Event e) -> Task<absl::Status> { co_return co_await e; }(event)));
}

TEST_P(EventConformanceTest, RecordedEventCoversEarlierWork) {
  Tensor* t = NewDeviceTensor(2048, "t");
  ASSERT_NE(t, nullptr);
  const std::vector<float> in = Iota(2048, 1.5f);
  std::vector<float> out(2048, 0.0f);
  FERRY_ASSERT_OK(backend().EnqueueSetTensor(*t, in.data(), 0, 2048 * 4));
  FERRY_ASSERT_OK(backend().EnqueueGetTensor(*t, out.data(), 0, 2048 * 4));
  Event event = backend().Record();
  FERRY_ASSERT_OK(event.WaitBlocking());
  EXPECT_TRUE(event.IsComplete());
  EXPECT_EQ(out, in);
}

TEST_P(EventConformanceTest, EventsNameTheirDevice) {
  ManualEvent gate;
  FERRY_ASSERT_OK(backend().EnqueueWait(gate.event()));
  Event event = backend().Record();
  EXPECT_EQ(event.device(), &device());
  EXPECT_EQ(device().WaitMode(event), EventWaitMode::kDevice)
      << "a device waits for its own events device-side";
  gate.Open();
  FERRY_EXPECT_OK(event.WaitBlocking());
}

TEST_P(EventConformanceTest, EnqueueWaitReturnsAtOnceAndHoldsLaterWork) {
  Tensor* t = NewDeviceTensor(64, "t");
  ASSERT_NE(t, nullptr);
  Write(*t, std::vector<float>(64, 1.0f));
  ManualEvent gate;
  const std::vector<float> in(64, 2.0f);
  std::vector<float> out(64, 0.0f);
  FERRY_ASSERT_OK(backend().EnqueueWait(gate.event()));
  if (NeedsHostBuffer()) {
    // Pinned memory: the transfers themselves must not block either.
    FERRY_ASSERT_OK_AND_ASSIGN(auto host,
                               device().host_buffer_type()->Allocate(512));
    auto* pin = static_cast<float*>(host->base());
    std::copy(in.begin(), in.end(), pin);
    FERRY_ASSERT_OK(backend().EnqueueSetTensor(*t, pin, 0, 256));
    FERRY_ASSERT_OK(backend().EnqueueGetTensor(*t, pin + 64, 0, 256));
    Event done = backend().Record();
    absl::SleepFor(absl::Milliseconds(30));
    EXPECT_FALSE(done.IsComplete()) << "work ran before the wait completed";
    gate.Open();
    FERRY_ASSERT_OK(done.WaitBlocking());
    EXPECT_TRUE(std::equal(in.begin(), in.end(), pin + 64));
    return;
  }
  Event done = backend().Record();
  absl::SleepFor(absl::Milliseconds(30));
  EXPECT_FALSE(done.IsComplete());
  gate.Open();
  FERRY_ASSERT_OK(done.WaitBlocking());
}

TEST_P(EventConformanceTest, WaitBlockingHonoursItsDeadline) {
  ManualEvent gate;
  FERRY_ASSERT_OK(backend().EnqueueWait(gate.event()));
  Event held = backend().Record();
  EXPECT_THAT(held.WaitBlocking(absl::Now() + absl::Milliseconds(20)),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
  gate.Open();
  FERRY_EXPECT_OK(held.WaitBlocking());
}

TEST_P(EventConformanceTest, AwaitingResumesOnTheCallersThreadNotADevices) {
  ManualEvent gate;
  FERRY_ASSERT_OK(backend().EnqueueWait(gate.event()));
  Event held = backend().Record();
  ASSERT_FALSE(held.IsComplete());
  gate.OpenLater(absl::Milliseconds(10));
  const std::thread::id caller = std::this_thread::get_id();
  std::thread::id resumed_on;
  bool on_device_thread = true;
  FERRY_ASSERT_OK(SyncWait(
      [](Event e, std::thread::id* where, bool* device) -> Task<absl::Status> {
        absl::Status status = co_await e;
        *where = std::this_thread::get_id();
        *device = IsDeviceThread();
        co_return status;
      }(held, &resumed_on, &on_device_thread)));
  EXPECT_EQ(resumed_on, caller) << "SyncWait's thread is the executor";
  EXPECT_FALSE(on_device_thread);
}

TEST_P(EventConformanceTest, AwaitingFromAPoolResumesOnThePool) {
  ThreadPool pool(2);
  ManualEvent gate;
  FERRY_ASSERT_OK(backend().EnqueueWait(gate.event()));
  Event held = backend().Record();
  gate.OpenLater(absl::Milliseconds(10));
  bool on_pool = false;
  bool on_device_thread = true;
  FERRY_ASSERT_OK(SyncWait([](ThreadPool* pool, Event e, bool* on_pool,
                              bool* device) -> Task<absl::Status> {
    co_await pool->Schedule();
    absl::Status status = co_await e;
    *on_pool = pool->IsWorkerThread();
    *device = IsDeviceThread();
    co_return status;
  }(&pool, held, &on_pool, &on_device_thread)));
  EXPECT_TRUE(on_pool);
  EXPECT_FALSE(on_device_thread);
}

Task<void> AwaitThenBlock(Backend* b, Tensor* t, const float* in, Event e,
                          std::promise<absl::Status>* result,
                          bool* on_device_thread) {
  absl::Status status = co_await e;
  *on_device_thread = IsDeviceThread();
  // Blocking calls on the same backend after the co_await.
  if (status.ok()) status = b->EnqueueSetTensor(*t, in, 0, 1024);
  if (status.ok()) status = b->Synchronize();
  if (status.ok()) status = b->Record().WaitBlocking();
  result->set_value(status);
}

// Code after a co_await may block on the same backend: it never runs on a
// thread the backend needs to make progress. The coroutine starts on a
// plain thread (no executor), so the event's completion picks where it
// resumes.
TEST_P(EventConformanceTest, BlockingAfterCoAwaitDoesNotDeadlock) {
  Tensor* t = NewDeviceTensor(256, "t");
  ASSERT_NE(t, nullptr);
  const std::vector<float> in = Iota(256);
  Backend* b = &backend();
  bool on_device_thread = true;
  FinishesWithin(std::chrono::seconds(60), [&] {
    ManualEvent gate;
    ASSERT_THAT(b->EnqueueWait(gate.event()), IsOk());
    Event held = b->Record();
    std::promise<absl::Status> result;
    std::thread([&] {
      Detach(AwaitThenBlock(b, t, in.data(), held, &result, &on_device_thread));
    }).join();
    gate.Open();
    EXPECT_THAT(result.get_future().get(), IsOk());
  });
  EXPECT_FALSE(on_device_thread);
  EXPECT_EQ(Read(*t), in);
}

}  // namespace
}  // namespace ferry::testing
