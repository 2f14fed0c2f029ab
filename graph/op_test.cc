#include "ferry/graph/op.h"

#include "gtest/gtest.h"

namespace ferry {
namespace {

TEST(OpTest, Names) {
  EXPECT_EQ(OpName(Op::kNone), "none");
  EXPECT_EQ(OpName(Op::kMulMat), "mul_mat");
  EXPECT_EQ(OpName(Op::kSoftMax), "soft_max");
  EXPECT_EQ(OpName(Op::kGetRows), "get_rows");
  EXPECT_EQ(OpName(Op::kConcat), "concat");
  EXPECT_EQ(OpName(static_cast<Op>(200)), "unknown");
  for (int i = 0; i < kNumOps; ++i) {
    EXPECT_NE(OpName(static_cast<Op>(i)), "unknown") << i;
  }
}

TEST(OpTest, ViewOps) {
  EXPECT_TRUE(IsViewOp(Op::kView));
  EXPECT_TRUE(IsViewOp(Op::kReshape));
  EXPECT_TRUE(IsViewOp(Op::kPermute));
  EXPECT_TRUE(IsViewOp(Op::kTranspose));
  EXPECT_FALSE(IsViewOp(Op::kCpy));
  EXPECT_FALSE(IsViewOp(Op::kCont));
  EXPECT_FALSE(IsViewOp(Op::kNone));
}

TEST(OpTest, InPlace) {
  for (Op op : {Op::kAdd, Op::kSub, Op::kMul, Op::kDiv, Op::kScale, Op::kSilu,
                Op::kGelu, Op::kRelu, Op::kRmsNorm, Op::kNorm, Op::kSoftMax,
                Op::kRope}) {
    EXPECT_TRUE(OpCanRunInPlace(op)) << OpName(op);
  }
  for (Op op : {Op::kNone, Op::kMulMat, Op::kGetRows, Op::kCpy, Op::kCont,
                Op::kView, Op::kConcat}) {
    EXPECT_FALSE(OpCanRunInPlace(op)) << OpName(op);
  }
}

}  // namespace
}  // namespace ferry
