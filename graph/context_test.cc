#include "ferry/graph/context.h"

#include <cstdint>
#include <utility>

#include "ferry/runtime/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

using ::ferry::testing::StatusIs;
using ::testing::HasSubstr;

TEST(ContextTest, NewTensorShapes) {
  Context ctx;
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * t,
                             ctx.NewTensor(DType::kF32, {5, 3}, "x"));
  EXPECT_EQ(t->ne, (std::array<int64_t, 4>{5, 3, 1, 1}));
  EXPECT_EQ(t->nb, (std::array<int64_t, 4>{4, 20, 60, 60}));
  EXPECT_EQ(t->name, "x");
  EXPECT_EQ(t->op, Op::kNone);
  EXPECT_EQ(t->data, nullptr);
  EXPECT_EQ(t->buffer, nullptr);

  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * scalar, ctx.NewTensor(DType::kI32, {}));
  EXPECT_EQ(scalar->NumElements(), 1);
  EXPECT_EQ(ctx.num_tensors(), 2);
  EXPECT_THAT(ctx.tensors(), ::testing::ElementsAre(t, scalar));
}

TEST(ContextTest, NewTensorErrors) {
  Context ctx;
  EXPECT_THAT(
      ctx.NewTensor(DType::kF32, {1, 2, 3, 4, 5}, "big"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("5 dims given")));
  EXPECT_THAT(ctx.NewTensor(DType::kF32, {4, -1}, "neg"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("dim 1 is negative")));
  EXPECT_THAT(
      ctx.NewTensor(DType::kF32, {INT64_MAX / 2, 4}, "huge"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("overflows")));
  EXPECT_EQ(ctx.num_tensors(), 0);
}

TEST(ContextTest, AddressesStayStable) {
  Context ctx;
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * first, ctx.NewTensor(DType::kF32, {1}));
  for (int i = 0; i < 5000; ++i) {
    ASSERT_TRUE(ctx.NewTensor(DType::kF32, {i + 1}).ok());
  }
  EXPECT_EQ(ctx.tensors()[0], first);
  EXPECT_EQ(first->ne[0], 1);
  Context moved = std::move(ctx);
  EXPECT_EQ(moved.tensors()[0], first);
  EXPECT_EQ(moved.num_tensors(), 5001);
}

TEST(ContextTest, AllocateHostData) {
  Context ctx;
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * a, ctx.NewTensor(DType::kF32, {3, 5}));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * b, ctx.NewTensor(DType::kF16, {7}));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * empty, ctx.NewTensor(DType::kF32, {0}));
  Tensor view = *a;
  view.view_src = a;
  view.view_offset = 8;
  view.data = nullptr;
  Tensor* v = ctx.AddTensor(view);
  FERRY_ASSERT_OK(ctx.AllocateHostData());
  ASSERT_NE(a->data, nullptr);
  ASSERT_NE(b->data, nullptr);
  EXPECT_NE(empty->data, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a->data) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data) % 64, 0u);
  EXPECT_EQ(v->data, static_cast<char*>(a->data) + 8);
  // Zeroed, and distinct non-overlapping blocks.
  EXPECT_EQ(static_cast<float*>(a->data)[14], 0.0f);
  EXPECT_GE(static_cast<char*>(b->data), static_cast<char*>(a->data) + 60);

  // A second call places only new tensors.
  void* old = a->data;
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * c, ctx.NewTensor(DType::kF32, {2}));
  FERRY_ASSERT_OK(ctx.AllocateHostData());
  EXPECT_EQ(a->data, old);
  EXPECT_NE(c->data, nullptr);
}

TEST(ContextTest, AllocateHostDataViewOfUnplacedForeignTensor) {
  Context other;
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * foreign,
                             other.NewTensor(DType::kF32, {4}, "foreign"));
  Context ctx;
  Tensor view = *foreign;
  view.view_src = foreign;
  ctx.AddTensor(view);
  EXPECT_THAT(
      ctx.AllocateHostData(),
      StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("'foreign'")));
}

}  // namespace
}  // namespace ferry
