#include "ferry/alloc/weights.h"

#include "ferry/alloc/testing/failing_buffer_type.h"
#include "ferry/backends/host_buffer.h"
#include "ferry/graph/context.h"
#include "ferry/graph/ops.h"
#include "ferry/runtime/status_matchers.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

using ::ferry::testing::IsOk;
using ::ferry::testing::StatusIs;
using ::testing::HasSubstr;

TEST(WeightsTest, PacksIntoOneBuffer) {
  HostBufferType type("host", 64, nullptr);
  Context ctx;
  Tensor* a = *ctx.NewTensor(DType::kF32, {10}, "a");
  Tensor* b = *ctx.NewTensor(DType::kF32, {32, 4}, "b");
  Tensor* v = *View1D(ctx, b, 8, 32);
  absl::StatusOr<std::vector<std::unique_ptr<Buffer>>> buffers =
      AllocateWeights(ctx, type);
  ASSERT_THAT(buffers.status(), IsOk());
  ASSERT_EQ(buffers->size(), 1u);
  Buffer& buf = *(*buffers)[0];
  EXPECT_EQ(buf.usage(), BufferUsage::kWeights);
  EXPECT_EQ(a->data, buf.base());
  EXPECT_EQ(b->data, static_cast<char*>(buf.base()) + 64);
  EXPECT_EQ(v->data, static_cast<char*>(b->data) + 32);
  EXPECT_EQ(buf.size(), 64u + 512u);
}

TEST(WeightsTest, SplitsAtMaxSize) {
  HostBufferType type("small", 64, nullptr, 1024);
  Context ctx;
  for (int i = 0; i < 7; ++i) {
    ASSERT_THAT(ctx.NewTensor(DType::kF32, {100}).status(), IsOk());  // 400 B.
  }
  absl::StatusOr<std::vector<std::unique_ptr<Buffer>>> buffers =
      AllocateWeights(ctx, type);
  ASSERT_THAT(buffers.status(), IsOk());
  // Two 400-byte tensors (padded to 448) per 1 KiB buffer.
  ASSERT_EQ(buffers->size(), 4u);
  for (const auto& b : *buffers) {
    EXPECT_LE(b->size(), 1024u);
    EXPECT_EQ(b->usage(), BufferUsage::kWeights);
  }
  for (Tensor* t : ctx.tensors()) EXPECT_NE(t->buffer, nullptr);
}

TEST(WeightsTest, TensorLargerThanMaxSizeIsNamed) {
  HostBufferType type("small", 64, nullptr, 1024);
  Context ctx;
  ASSERT_THAT(ctx.NewTensor(DType::kF32, {10}, "ok").status(), IsOk());
  ASSERT_THAT(ctx.NewTensor(DType::kF32, {1000}, "huge").status(), IsOk());
  EXPECT_THAT(
      AllocateWeights(ctx, type).status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'huge'")));
  for (Tensor* t : ctx.tensors()) EXPECT_EQ(t->data, nullptr);
}

TEST(WeightsTest, FailingAllocationLeavesNothingPlaced) {
  testing::FailingBufferType type(64, 1024, /*fail_after=*/1);
  Context ctx;
  for (int i = 0; i < 4; ++i) {
    ASSERT_THAT(ctx.NewTensor(DType::kF32, {200}).status(), IsOk());
  }
  EXPECT_THAT(AllocateWeights(ctx, type).status(),
              StatusIs(absl::StatusCode::kResourceExhausted));
  for (Tensor* t : ctx.tensors()) {
    EXPECT_EQ(t->data, nullptr);
    EXPECT_EQ(t->buffer, nullptr);
  }
}

TEST(WeightsTest, EmptyContextGivesNoBuffers) {
  HostBufferType type("host", 64, nullptr);
  Context ctx;
  absl::StatusOr<std::vector<std::unique_ptr<Buffer>>> buffers =
      AllocateWeights(ctx, type);
  ASSERT_THAT(buffers.status(), IsOk());
  EXPECT_TRUE(buffers->empty());
}

}  // namespace
}  // namespace ferry
