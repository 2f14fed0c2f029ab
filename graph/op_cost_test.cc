#include "ferry/graph/op_cost.h"

#include "ferry/graph/context.h"
#include "ferry/graph/ops.h"
#include "ferry/runtime/status_matchers.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

TEST(OpCostTest, MulMat) {
  Context ctx;
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * a, ctx.NewTensor(DType::kF16, {64, 32}));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * b, ctx.NewTensor(DType::kF32, {64, 8}));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * c, MulMat(ctx, a, b));
  EXPECT_EQ(OpFlops(*c), 2 * 64 * 32 * 8);
  EXPECT_EQ(OpBytes(*c), 64 * 32 * 2 + 64 * 8 * 4 + 32 * 8 * 4);
  EXPECT_EQ(OpFlops(*a), 0);
  EXPECT_EQ(OpBytes(*a), 0);
}

TEST(OpCostTest, ElementwiseViewsCopiesAndGather) {
  Context ctx;
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * x, ctx.NewTensor(DType::kF32, {16, 4}));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * bias, ctx.NewTensor(DType::kF32, {16}));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * y, Add(ctx, x, bias));
  EXPECT_EQ(OpFlops(*y), 64);
  EXPECT_EQ(OpBytes(*y), 256 + 64 + 256);

  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * t, Transpose(ctx, x));
  EXPECT_EQ(OpFlops(*t), 0);
  EXPECT_EQ(OpBytes(*t), 0);

  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * h, ctx.NewTensor(DType::kF16, {64}));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * cpy, Cpy(ctx, x, h));
  EXPECT_EQ(OpFlops(*cpy), 0);
  EXPECT_EQ(OpBytes(*cpy), 256 + 128);  // Reads x, writes h once.

  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * table,
                             ctx.NewTensor(DType::kF16, {16, 1000}));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * ids, ctx.NewTensor(DType::kI32, {3}));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * rows, GetRows(ctx, table, ids));
  EXPECT_EQ(OpBytes(*rows), 3 * 32 + 12 + 3 * 64);

  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * sm, SoftMax(ctx, x, nullptr, 1.0f));
  EXPECT_GT(OpFlops(*sm), OpFlops(*y));
}

}  // namespace
}  // namespace ferry
