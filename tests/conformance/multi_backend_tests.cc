// Conformance: ordering between backends (copies wait for their producers,
// events order work across backends, failures travel only through waits).
#include <memory>
#include <vector>

#include "absl/time/clock.h"
#include "ferry/graph/context.h"
#include "ferry/graph/graph.h"
#include "ferry/graph/ops.h"
#include "ferry/runtime/status_matchers.h"
#include "ferry/runtime/timeline_semaphore.h"
#include "ferry/tests/conformance/conformance.h"
#include "gmock/gmock.h"

namespace ferry::testing {
namespace {

// Copies with EnqueueCopyTensor, or, where a pair has no async path
// (Unimplemented, as the contract allows), synchronizes and copies.
void CopyAcross(Backend& dst, Backend& src, const Tensor& from, Tensor& to) {
  absl::Status status = dst.EnqueueCopyTensor(src, from, to);
  if (absl::IsUnimplemented(status)) {
    ASSERT_THAT(src.Synchronize(), IsOk());
    ASSERT_THAT(CopyTensor(from, to), IsOk());
    return;
  }
  ASSERT_THAT(status, IsOk());
}

TEST_P(MultiBackendConformanceTest, CopyFromTheCpuWaitsForItsProducer) {
  std::unique_ptr<Backend> cpu = CpuBackend();
  ASSERT_NE(cpu, nullptr);
  // On the CPU (held): h = 3 * x. Then the backend copies h into d.
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * x,
                             ctx_.NewTensor(DType::kF32, {1024}, "x"));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * h, Scale(ctx_, x, 3.0f));
  FERRY_ASSERT_OK_AND_ASSIGN(Graph graph, Graph::Build({h}));
  // In the device's pinned memory: a copy from pageable memory may block
  // until its producer is done, which the held gate would never let be.
  const bool pinned = NeedsHostBuffer();
  Place(graph,
        pinned ? device().host_buffer_type() : cpu->default_buffer_type());
  Tensor* d = NewDeviceTensor(1024, "d");
  ASSERT_NE(d, nullptr);
  Write(*x, Iota(1024));
  Write(*h, std::vector<float>(1024, -1.0f));
  ManualEvent gate;
  if (!pinned) gate.Open();
  FERRY_ASSERT_OK(cpu->EnqueueWait(gate.event()));
  FERRY_ASSERT_OK(cpu->EnqueueCompute(graph.nodes()));
  absl::Status copied = backend().EnqueueCopyTensor(*cpu, *h, *d);
  if (absl::IsUnimplemented(copied)) {
    gate.Open();
    FERRY_ASSERT_OK(cpu->Synchronize());
    FERRY_ASSERT_OK(CopyTensor(*h, *d));
  } else {
    FERRY_ASSERT_OK(copied);
    gate.Open();
  }
  FERRY_ASSERT_OK(backend().Synchronize());
  EXPECT_EQ(Read(*d), Iota(1024, 3.0f)) << "the copy read h before it was made";
}

TEST_P(MultiBackendConformanceTest, CopyToTheCpuWaitsForItsProducer) {
  std::unique_ptr<Backend> cpu = CpuBackend();
  ASSERT_NE(cpu, nullptr);
  // On the backend (held): y = -x. The CPU stream copies y into host memory.
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * x,
                             ctx_.NewTensor(DType::kF32, {777}, "x"));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * y, Scale(ctx_, x, -1.0f));
  FERRY_ASSERT_OK_AND_ASSIGN(Graph graph, Graph::Build({y}));
  Place(graph);
  Write(*x, Iota(777, 0.5f));
  const bool pinned = NeedsHostBuffer();  // As above.
  Tensor* host = NewTensorIn(
      pinned ? *device().host_buffer_type() : *cpu->default_buffer_type(), 777,
      "host");
  ASSERT_NE(host, nullptr);
  ManualEvent gate;
  if (!pinned) gate.Open();
  FERRY_ASSERT_OK(backend().EnqueueWait(gate.event()));
  FERRY_ASSERT_OK(backend().EnqueueCompute(graph.nodes()));
  absl::Status copied = cpu->EnqueueCopyTensor(backend(), *y, *host);
  gate.Open();
  if (absl::IsUnimplemented(copied)) {
    FERRY_ASSERT_OK(backend().Synchronize());
    FERRY_ASSERT_OK(CopyTensor(*y, *host));
  } else {
    FERRY_ASSERT_OK(copied);
  }
  FERRY_ASSERT_OK(cpu->Synchronize());
  EXPECT_EQ(Read(*host), Iota(777, -0.5f));
}

TEST_P(MultiBackendConformanceTest, AnEventOrdersWorkOnAnotherBackend) {
  std::unique_ptr<Backend> other = SecondBackend();
  ASSERT_NE(other, nullptr);
  // Backend (held): y = 2x. Other, after its event: z = y + y.
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * x,
                             ctx_.NewTensor(DType::kF32, {300}, "x"));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * y, Scale(ctx_, x, 2.0f));
  FERRY_ASSERT_OK_AND_ASSIGN(Graph first, Graph::Build({y}));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * z, Add(ctx_, y, y));
  FERRY_ASSERT_OK_AND_ASSIGN(Graph second, Graph::Build({z}));
  Place(second);  // Places x, y and z.
  Write(*x, Iota(300));
  ManualEvent gate;
  FERRY_ASSERT_OK(backend().EnqueueWait(gate.event()));
  FERRY_ASSERT_OK(backend().EnqueueCompute(first.nodes()));
  FERRY_ASSERT_OK(other->EnqueueWait(backend().Record()));
  FERRY_ASSERT_OK(other->EnqueueCompute(NodeSpan(&second.nodes().back(), 1)));
  Event done = other->Record();
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_FALSE(done.IsComplete()) << "ran before the event it waits for";
  gate.Open();
  FERRY_ASSERT_OK(done.WaitBlocking());
  EXPECT_EQ(Read(*z), Iota(300, 4.0f));
}

TEST_P(MultiBackendConformanceTest, TwoBackendsOfADeviceDoNotWaitForEachOther) {
  std::unique_ptr<Backend> other = SecondBackend();
  ASSERT_NE(other, nullptr);
  Tensor* t = NewDeviceTensor(64, "t");
  ASSERT_NE(t, nullptr);
  ManualEvent gate;
  FERRY_ASSERT_OK(backend().EnqueueWait(gate.event()));
  Event held = backend().Record();
  // The other backend's work completes while this one is held.
  const std::vector<float> in = Iota(64, 9.0f);
  std::vector<float> out(64, 0.0f);
  FERRY_ASSERT_OK(other->EnqueueSetTensor(*t, in.data(), 0, 256));
  FERRY_ASSERT_OK(other->EnqueueGetTensor(*t, out.data(), 0, 256));
  FERRY_ASSERT_OK(
      other->Record().WaitBlocking(absl::Now() + absl::Seconds(30)));
  EXPECT_EQ(out, in);
  EXPECT_FALSE(held.IsComplete());
  gate.Open();
  FERRY_EXPECT_OK(held.WaitBlocking());
}

TEST_P(MultiBackendConformanceTest, WorkOnTheCpuOrderedByTheBackendsEvent) {
  std::unique_ptr<Backend> cpu = CpuBackend();
  ASSERT_NE(cpu, nullptr);
  // y = 3x on this backend; then, on the CPU stream, z = 2 * copy(y).
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * x,
                             ctx_.NewTensor(DType::kF32, {4096}, "x"));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * y, Scale(ctx_, x, 3.0f));
  FERRY_ASSERT_OK_AND_ASSIGN(Graph graph, Graph::Build({y}));
  Place(graph);
  Context host_ctx;
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * y_host,
                             host_ctx.NewTensor(DType::kF32, {4096}, "y_host"));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * z, Scale(host_ctx, y_host, 2.0f));
  FERRY_ASSERT_OK_AND_ASSIGN(Graph host_graph, Graph::Build({z}));
  Place(host_graph, cpu->default_buffer_type());
  std::vector<float> in(4096, 2.0f), out(4096, 0.0f);
  FERRY_ASSERT_OK(backend().EnqueueSetTensor(*x, in.data(), 0, in.size() * 4));
  FERRY_ASSERT_OK(backend().EnqueueCompute(graph.nodes()));
  CopyAcross(*cpu, backend(), *y, *y_host);
  FERRY_ASSERT_OK(cpu->EnqueueCompute(host_graph.nodes()));
  FERRY_ASSERT_OK(cpu->EnqueueGetTensor(*z, out.data(), 0, out.size() * 4));
  FERRY_ASSERT_OK(cpu->Record().WaitBlocking());
  for (float v : out) ASSERT_EQ(v, 12.0f);
  FERRY_EXPECT_OK(backend().Synchronize());
}

TEST_P(MultiBackendConformanceTest, AFailedProducerFailsItsWaiters) {
  std::unique_ptr<Backend> cpu = CpuBackend();
  ASSERT_NE(cpu, nullptr);
  auto failing = std::make_shared<TimelineSemaphore>(0);
  failing->Fail(absl::AbortedError("producer died"));
  FERRY_ASSERT_OK(backend().EnqueueWait(Event(failing, 1)));
  Event produced = backend().Record();
  FERRY_ASSERT_OK(cpu->EnqueueWait(produced));
  EXPECT_THAT(cpu->Synchronize(), StatusIs(absl::StatusCode::kAborted));
  EXPECT_THAT(backend().Synchronize(), StatusIs(absl::StatusCode::kAborted));
  // Both recovered.
  FERRY_EXPECT_OK(cpu->Synchronize());
  FERRY_EXPECT_OK(backend().Synchronize());
}

}  // namespace
}  // namespace ferry::testing
