// Conformance: backend.h's rule 1 (EnqueueCompute reads node metadata
// before it returns; data when the work runs). Rule 2 (host memory of
// async transfers) is checked in buffer_tests.cc.
#include <memory>
#include <vector>

#include "ferry/graph/context.h"
#include "ferry/graph/graph.h"
#include "ferry/graph/ops.h"
#include "ferry/runtime/status_matchers.h"
#include "ferry/runtime/timeline_semaphore.h"
#include "ferry/tests/conformance/conformance.h"
#include "gmock/gmock.h"

namespace ferry::testing {
namespace {

TEST_P(CaptureConformanceTest, NodeMetadataIsReadAtEnqueue) {
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * x,
                             ctx_.NewTensor(DType::kF32, {256}, "x"));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * y, Scale(ctx_, x, 2.0f));
  FERRY_ASSERT_OK_AND_ASSIGN(Graph graph, Graph::Build({y}));
  Place(graph);
  Tensor* other = NewDeviceTensor(256, "other");
  ASSERT_NE(other, nullptr);
  Write(*x, Iota(256));
  Write(*other, std::vector<float>(256, 100.0f));
  ManualEvent gate;
  FERRY_ASSERT_OK(backend().EnqueueWait(gate.event()));
  FERRY_ASSERT_OK(backend().EnqueueCompute(graph.nodes()));
  // Change the node before it runs: its op param and its source.
  y->SetParamF32(0, 5.0f);
  y->src[0] = other;
  gate.Open();
  FERRY_ASSERT_OK(backend().Synchronize());
  EXPECT_EQ(Read(*y), Iota(256, 2.0f)) << "the node was read after enqueue";
}

TEST_P(CaptureConformanceTest, TensorObjectsMayGoAwayAfterEnqueue) {
  auto ctx = std::make_unique<Context>();
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * x,
                             ctx->NewTensor(DType::kF32, {128}, "x"));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * y, Scale(*ctx, x, -1.0f));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * z, Add(*ctx, y, x));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * w, Scale(*ctx, z, 3.0f));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * u, Add(*ctx, w, x));
  auto graph = std::make_unique<Graph>();
  FERRY_ASSERT_OK_AND_ASSIGN(*graph, Graph::Build({u}));
  Place(*graph);
  Write(*x, Iota(128, 1.0f, 1.0f));
  // Keep a tensor of the same placement to read the result after.
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * result,
                             ctx_.NewTensor(DType::kF32, {128}, "result"));
  result->buffer = u->buffer;
  result->data = u->data;
  ManualEvent gate;
  FERRY_ASSERT_OK(backend().EnqueueWait(gate.event()));
  FERRY_ASSERT_OK(backend().EnqueueCompute(graph->nodes()));
  graph.reset();
  ctx.reset();  // Every Tensor object of the graph is gone.
  gate.Open();
  FERRY_ASSERT_OK(backend().Synchronize());
  EXPECT_EQ(Read(*result), Iota(128, 1.0f, 1.0f));  // (-x + x) * 3 + x.
}

TEST_P(CaptureConformanceTest, DataIsReadWhenTheWorkRuns) {
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * x,
                             ctx_.NewTensor(DType::kF32, {64}, "x"));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * y, Scale(ctx_, x, 2.0f));
  FERRY_ASSERT_OK_AND_ASSIGN(Graph graph, Graph::Build({y}));
  Place(graph);
  Write(*x, std::vector<float>(64, 1.0f));
  ManualEvent gate;
  FERRY_ASSERT_OK(backend().EnqueueWait(gate.event()));
  FERRY_ASSERT_OK(backend().EnqueueCompute(graph.nodes()));
  // A synchronous write through the buffer, before the compute runs.
  Write(*x, std::vector<float>(64, 7.0f));
  gate.Open();
  FERRY_ASSERT_OK(backend().Synchronize());
  EXPECT_EQ(Read(*y), std::vector<float>(64, 14.0f));
}

}  // namespace
}  // namespace ferry::testing
