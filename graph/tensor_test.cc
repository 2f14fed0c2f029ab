#include "ferry/graph/tensor.h"

#include "gtest/gtest.h"

namespace ferry {
namespace {

Tensor Make(DType dtype, std::array<int64_t, kMaxDims> ne) {
  Tensor t;
  t.dtype = dtype;
  t.ne = ne;
  t.nb = ContiguousStrides(dtype, ne);
  return t;
}

TEST(TensorTest, ContiguousStridesAndSizes) {
  const Tensor t = Make(DType::kF16, {8, 3, 2, 1});
  EXPECT_EQ(t.nb, (std::array<int64_t, 4>{2, 16, 48, 96}));
  EXPECT_EQ(t.NumElements(), 48);
  EXPECT_EQ(t.NumRows(), 6);
  EXPECT_EQ(t.NumBytes(), 96);
  EXPECT_EQ(t.RowBytes(), 16);
  EXPECT_TRUE(t.IsContiguous());
  EXPECT_FALSE(t.IsPermuted());
  EXPECT_FALSE(t.IsTransposed());
  EXPECT_EQ(t.ShapeString(), "[8, 3, 2, 1] f16");
}

TEST(TensorTest, TransposedIsNotContiguous) {
  Tensor t = Make(DType::kF32, {4, 3, 1, 1});
  std::swap(t.ne[0], t.ne[1]);
  std::swap(t.nb[0], t.nb[1]);
  EXPECT_FALSE(t.IsContiguous());
  EXPECT_TRUE(t.IsTransposed());
  EXPECT_TRUE(t.IsPermuted());
  EXPECT_FALSE(t.HasContiguousRows());
  // Span from first to last byte: same 48 bytes.
  EXPECT_EQ(t.NumBytes(), 48);
}

TEST(TensorTest, StridedViewBytes) {
  // Two rows of 4 floats out of rows of 10 floats.
  Tensor t = Make(DType::kF32, {4, 2, 1, 1});
  t.nb[1] = 40;
  t.nb[2] = t.nb[3] = 80;
  EXPECT_FALSE(t.IsContiguous());
  EXPECT_TRUE(t.HasContiguousRows());
  EXPECT_EQ(t.NumBytes(), 40 + 16);
}

TEST(TensorTest, UnitDimsIgnoredForContiguity) {
  Tensor t = Make(DType::kF32, {4, 1, 3, 1});
  t.nb[1] = 12345;  // Any stride for a size-1 dim.
  t.nb[3] = 7;
  EXPECT_TRUE(t.IsContiguous());
}

TEST(TensorTest, EmptyTensor) {
  const Tensor t = Make(DType::kF32, {4, 0, 1, 1});
  EXPECT_EQ(t.NumElements(), 0);
  EXPECT_EQ(t.NumBytes(), 0);
}

TEST(TensorTest, CanRepeat) {
  const Tensor big = Make(DType::kF32, {8, 6, 4, 2});
  EXPECT_TRUE(CanRepeat(Make(DType::kF32, {8, 1, 1, 1}), big));
  EXPECT_TRUE(CanRepeat(Make(DType::kF32, {1, 6, 1, 2}), big));
  EXPECT_TRUE(CanRepeat(Make(DType::kF32, {4, 3, 2, 1}), big));
  EXPECT_TRUE(CanRepeat(big, big));
  EXPECT_FALSE(CanRepeat(Make(DType::kF32, {3, 1, 1, 1}), big));
  EXPECT_FALSE(CanRepeat(big, Make(DType::kF32, {8, 1, 1, 1})));
  EXPECT_FALSE(CanRepeat(Make(DType::kF32, {0, 1, 1, 1}), big));
  EXPECT_TRUE(CanRepeat(Make(DType::kF32, {0, 1, 1, 1}),
                        Make(DType::kF32, {0, 2, 1, 1})));
}

TEST(TensorTest, SameShapeIgnoresDTypeAndStrides) {
  Tensor a = Make(DType::kF32, {4, 3, 1, 1});
  const Tensor b = Make(DType::kF16, {4, 3, 1, 1});
  a.nb[1] = 100;
  EXPECT_TRUE(SameShape(a, b));
  EXPECT_FALSE(SameShape(a, Make(DType::kF32, {3, 4, 1, 1})));
}

TEST(TensorTest, OpParamsAndFlags) {
  Tensor t;
  t.SetParamF32(0, 0.125f);
  t.SetParamI32(1, -7);
  EXPECT_EQ(t.ParamF32(0), 0.125f);
  EXPECT_EQ(t.ParamI32(1), -7);
  t.flags = kTensorFlagInput | kTensorFlagWeight;
  EXPECT_TRUE(t.HasFlag(kTensorFlagInput));
  EXPECT_FALSE(t.HasFlag(kTensorFlagOutput));
  EXPECT_TRUE(t.HasFlag(kTensorFlagWeight));
}

TEST(TensorTest, NumSrc) {
  Tensor a;
  Tensor b;
  EXPECT_EQ(b.NumSrc(), 0);
  b.src = {&a, nullptr, &a};
  EXPECT_EQ(b.NumSrc(), 3);
}

TEST(TensorTest, DebugString) {
  Tensor t = Make(DType::kF32, {2, 2, 1, 1});
  t.name = "w";
  EXPECT_EQ(t.DebugString(), "'w' none [2, 2, 1, 1] f32 nb=[4, 8, 16, 16]");
}

}  // namespace
}  // namespace ferry
