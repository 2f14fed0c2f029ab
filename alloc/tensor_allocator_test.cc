#include "ferry/alloc/tensor_allocator.h"

#include "ferry/backends/host_buffer.h"
#include "ferry/graph/context.h"
#include "ferry/graph/ops.h"
#include "ferry/runtime/status_matchers.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

using ::ferry::testing::IsOk;
using ::ferry::testing::StatusIs;

TEST(TensorAllocatorTest, PlacesLinearlyAndAligned) {
  HostBufferType type("host", 256, nullptr);
  std::unique_ptr<Buffer> buffer = *type.Allocate(1024);
  TensorAllocator talloc(*buffer);
  Context ctx;
  Tensor* a = *ctx.NewTensor(DType::kF32, {3}, "a");      // 12 bytes.
  Tensor* b = *ctx.NewTensor(DType::kF32, {64, 2}, "b");  // 512 bytes.
  Tensor* v = *View1D(ctx, b, 4, 16);
  ASSERT_THAT(talloc.Allocate(*a), IsOk());
  ASSERT_THAT(talloc.Allocate(*b), IsOk());
  ASSERT_THAT(talloc.Allocate(*v), IsOk());
  EXPECT_EQ(a->data, buffer->base());
  EXPECT_EQ(b->data, static_cast<char*>(buffer->base()) + 256);
  EXPECT_EQ(v->data, static_cast<char*>(b->data) + 16);
  EXPECT_EQ(v->buffer, buffer.get());
  EXPECT_EQ(talloc.offset(), 768u);
}

TEST(TensorAllocatorTest, FullBufferIsResourceExhausted) {
  HostBufferType type("host", 64, nullptr);
  std::unique_ptr<Buffer> buffer = *type.Allocate(100);
  TensorAllocator talloc(*buffer);
  Context ctx;
  Tensor* a = *ctx.NewTensor(DType::kF32, {16}, "a");  // 64 bytes.
  Tensor* b = *ctx.NewTensor(DType::kF32, {16}, "b");
  ASSERT_THAT(talloc.Allocate(*a), IsOk());
  EXPECT_THAT(talloc.Allocate(*b),
              StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(b->data, nullptr);
  EXPECT_EQ(talloc.offset(), 64u);
  EXPECT_THAT(talloc.Allocate(*a),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST(TensorAllocatorTest, ViewOfUnplacedSourceFails) {
  HostBufferType type("host", 64, nullptr);
  std::unique_ptr<Buffer> buffer = *type.Allocate(1024);
  TensorAllocator talloc(*buffer);
  Context ctx;
  Tensor* a = *ctx.NewTensor(DType::kF32, {16}, "a");
  Tensor* v = *View1D(ctx, a, 4, 0);
  EXPECT_THAT(talloc.Allocate(*v),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

}  // namespace
}  // namespace ferry
