// Conformance: failures, how far they reach, and recovery.
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "ferry/graph/ops.h"
#include "ferry/runtime/status_matchers.h"
#include "ferry/runtime/sync_wait.h"
#include "ferry/runtime/timeline_semaphore.h"
#include "ferry/tests/conformance/conformance.h"
#include "gmock/gmock.h"

namespace ferry::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A round trip through the backend's queue works.
void ExpectHealthy(Backend& backend, Tensor& t) {
  const std::vector<float> in = Iota(t.NumElements(), 4.0f);
  std::vector<float> out(in.size(), 0.0f);
  const size_t bytes = in.size() * sizeof(float);
  ASSERT_THAT(backend.EnqueueSetTensor(t, in.data(), 0, bytes), IsOk());
  ASSERT_THAT(backend.EnqueueGetTensor(t, out.data(), 0, bytes), IsOk());
  ASSERT_THAT(backend.Record().WaitBlocking(), IsOk());
  EXPECT_EQ(out, in);
}

TEST_P(FailureConformanceTest, WaitingOnAFailedEventFailsTheBackend) {
  Tensor* t = NewDeviceTensor(32, "t");
  ASSERT_NE(t, nullptr);
  ManualEvent failed;
  failed.Fail();
  FERRY_ASSERT_OK(backend().EnqueueWait(failed.event()));
  EXPECT_THAT(backend().Record().WaitBlocking(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("planted")));
  EXPECT_THAT(backend().Synchronize(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("planted")));
  // Synchronize cleared it: the backend works again.
  FERRY_EXPECT_OK(backend().Synchronize());
  ExpectHealthy(backend(), *t);
}

TEST_P(FailureConformanceTest, WorkQueuedBehindAFailureIsDropped) {
  Tensor* t = NewDeviceTensor(64, "t");
  ASSERT_NE(t, nullptr);
  const std::vector<float> before = Iota(64, 1.0f);
  Write(*t, before);
  ManualEvent gate;
  FERRY_ASSERT_OK(backend().EnqueueWait(gate.event()));
  std::vector<float> overwrite(64, -3.0f);
  if (NeedsHostBuffer()) {
    // Pinned, so the enqueue does not block behind the held wait.
    FERRY_ASSERT_OK_AND_ASSIGN(auto host,
                               device().host_buffer_type()->Allocate(256));
    std::copy(overwrite.begin(), overwrite.end(),
              static_cast<float*>(host->base()));
    FERRY_ASSERT_OK(backend().EnqueueSetTensor(*t, host->base(), 0, 256));
    gate.Fail();
    EXPECT_THAT(backend().Synchronize(), StatusIs(absl::StatusCode::kDataLoss));
  } else {
    gate.Fail();
    // A pageable transfer may finish (here: fail) before returning.
    absl::Status enqueued =
        backend().EnqueueSetTensor(*t, overwrite.data(), 0, 256);
    if (enqueued.ok()) {
      EXPECT_THAT(backend().Synchronize(),
                  StatusIs(absl::StatusCode::kDataLoss));
    } else {
      EXPECT_THAT(enqueued, StatusIs(absl::StatusCode::kDataLoss));
    }
  }
  EXPECT_EQ(Read(*t), before) << "a transfer behind the failure ran";
}

TEST_P(FailureConformanceTest, EventsRecordedAfterAFailureReportIt) {
  ManualEvent failed;
  failed.Fail();
  FERRY_ASSERT_OK(backend().EnqueueWait(failed.event()));
  Event first = backend().Record();
  Event second = backend().Record();
  EXPECT_THAT(first.WaitBlocking(), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(second.WaitBlocking(), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(SyncWait([](Event e) -> Task<absl::Status> {
                co_return co_await e;
              }(second)),
              StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(backend().Synchronize(), StatusIs(absl::StatusCode::kDataLoss));
  // Events of work after recovery complete normally.
  Tensor* t = NewDeviceTensor(8, "t");
  ASSERT_NE(t, nullptr);
  ExpectHealthy(backend(), *t);
}

TEST_P(FailureConformanceTest, AFailureStaysOnItsBackend) {
  std::unique_ptr<Backend> other = SecondBackend();
  ASSERT_NE(other, nullptr);
  Tensor* t = NewDeviceTensor(16, "t");
  ASSERT_NE(t, nullptr);
  ManualEvent failed;
  failed.Fail();
  FERRY_ASSERT_OK(backend().EnqueueWait(failed.event()));
  EXPECT_THAT(backend().Record().WaitBlocking(), Not(IsOk()));
  // The other backend (same device) is untouched...
  ExpectHealthy(*other, *t);
  // ...unless it waits for the failed one.
  FERRY_ASSERT_OK(other->EnqueueWait(backend().Record()));
  EXPECT_THAT(other->Synchronize(), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(backend().Synchronize(), StatusIs(absl::StatusCode::kDataLoss));
  ExpectHealthy(*other, *t);
}

TEST_P(FailureConformanceTest, UnplacedNodeIsAStatus) {
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * x, ctx_.NewTensor(DType::kF32, {8}, "x"));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * y, Relu(ctx_, x));
  FERRY_ASSERT_OK_AND_ASSIGN(Graph graph, Graph::Build({y}));
  EXPECT_THAT(backend().EnqueueCompute(graph.nodes()), Not(IsOk()));
  FERRY_EXPECT_OK(backend().Synchronize());
}

TEST_P(FailureConformanceTest, NodeWithAnUnplacedSourceIsAStatus) {
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * x, ctx_.NewTensor(DType::kF32, {8}, "x"));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * w, ctx_.NewTensor(DType::kF32, {8}, "w"));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * y, Add(ctx_, x, w));
  FERRY_ASSERT_OK_AND_ASSIGN(Graph graph, Graph::Build({y}));
  // y and x placed, w not.
  Tensor* xs = NewDeviceTensor(8, "x_storage");
  Tensor* ys = NewDeviceTensor(8, "y_storage");
  ASSERT_NE(ys, nullptr);
  x->buffer = xs->buffer;
  x->data = xs->data;
  y->buffer = ys->buffer;
  y->data = ys->data;
  EXPECT_THAT(backend().EnqueueCompute(graph.nodes()),
              IsErrorWith(HasSubstr("'w'")));
  FERRY_EXPECT_OK(backend().Synchronize());
}

TEST_P(FailureConformanceTest, NodeReadingAnotherDevicesMemoryIsAStatus) {
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * x,
                             ctx_.NewTensor(DType::kF32, {64}, "x"));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * y, Scale(ctx_, x, 2.0f));
  FERRY_ASSERT_OK_AND_ASSIGN(Graph graph, Graph::Build({y}));
  Tensor* foreign = NewForeignTensor(64, "foreign");
  Tensor* ys = NewDeviceTensor(64, "y_storage");
  ASSERT_NE(ys, nullptr);
  x->buffer = foreign->buffer;
  x->data = foreign->data;
  y->buffer = ys->buffer;
  y->data = ys->data;
  EXPECT_THAT(backend().EnqueueCompute(graph.nodes()),
              IsErrorWith(HasSubstr("'x'")));
  FERRY_EXPECT_OK(backend().Synchronize());
}

TEST_P(FailureConformanceTest, UnsupportedNodeIsRefused) {
  // A node SupportsOp says no to is refused at enqueue, not computed.
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * a,
                             ctx_.NewTensor(DType::kF32, {8, 4}, "a"));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * b,
                             ctx_.NewTensor(DType::kF32, {8, 2}, "b"));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * c, MulMat(ctx_, a, b));
  FERRY_ASSERT_OK_AND_ASSIGN(Graph graph, Graph::Build({c}));
  b->dtype = DType::kI32;  // No backend multiplies by integer activations.
  b->nb = ContiguousStrides(DType::kI32, b->ne);
  ASSERT_FALSE(backend().SupportsOp(*c));
  // The refusal says why, as CheckOp does (less the name of the device,
  // which a remote one puts before its worker's reason).
  const absl::Status why = backend().CheckOp(*c);
  ASSERT_FALSE(why.ok());
  std::string reason(why.message());
  const std::string prefix = absl::StrCat(backend().device().name(), ": ");
  if (absl::StartsWith(reason, prefix)) reason.erase(0, prefix.size());
  EXPECT_FALSE(reason.empty());
  Place(graph);
  EXPECT_THAT(backend().EnqueueCompute(graph.nodes()),
              IsErrorWith(HasSubstr(reason)));
  FERRY_EXPECT_OK(backend().Synchronize());
}

}  // namespace
}  // namespace ferry::testing
