#include "ferry/graph/testing/reference.h"

#include <cmath>
#include <limits>
#include <vector>

#include "ferry/graph/context.h"
#include "ferry/graph/graph.h"
#include "ferry/graph/ops.h"
#include "ferry/runtime/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ferry::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::FloatNear;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::Pointwise;

constexpr float kTol = 1e-5f;

class ReferenceTest : public ::testing::Test {
 protected:
  // Creates a leaf of `dtype` and `shape`; values are written after
  // AllocateHostData by Run().
  Tensor* Leaf(DType dtype, std::vector<int64_t> shape,
               std::vector<float> values) {
    absl::StatusOr<Tensor*> t = ctx_.NewTensor(dtype, shape);
    EXPECT_THAT(t, IsOk());
    pending_.push_back({*t, std::move(values)});
    return *t;
  }
  Tensor* F32(std::vector<int64_t> shape, std::vector<float> values) {
    return Leaf(DType::kF32, std::move(shape), std::move(values));
  }
  Tensor* I32(std::vector<int64_t> shape, std::vector<float> values) {
    return Leaf(DType::kI32, std::move(shape), std::move(values));
  }

  // Allocates host data, writes leaf values, evaluates and reads `out`.
  std::vector<float> Run(absl::StatusOr<Tensor*> out) {
    EXPECT_THAT(out, IsOk());
    if (!out.ok()) return {};
    absl::StatusOr<Graph> graph = Graph::Build({*out});
    EXPECT_THAT(graph, IsOk());
    EXPECT_THAT(ctx_.AllocateHostData(), IsOk());
    for (auto& [t, values] : pending_) {
      EXPECT_THAT(WriteTensor(*t, values), IsOk());
    }
    pending_.clear();
    EXPECT_THAT(EvaluateReference(*graph), IsOk());
    absl::StatusOr<std::vector<float>> result = ReadTensor(**out);
    EXPECT_THAT(result, IsOk());
    return result.ok() ? *result : std::vector<float>{};
  }

  Context ctx_;
  std::vector<std::pair<Tensor*, std::vector<float>>> pending_;
};

auto Near(std::vector<float> expected) {
  return Pointwise(FloatNear(kTol), expected);
}

TEST_F(ReferenceTest, MulMatByHand) {
  // a: rows m = [1 2 3], [4 5 6]; b: rows n = [1 0 -1], [2 1 0].
  Tensor* a = F32({3, 2}, {1, 2, 3, 4, 5, 6});
  Tensor* b = F32({3, 2}, {1, 0, -1, 2, 1, 0});
  // dst[n][m] = a[m] . b[n]; m is the inner dim.
  EXPECT_THAT(Run(MulMat(ctx_, a, b)), ElementsAre(-2, -2, 4, 13));
}

// Quantized tensors: WriteTensor quantizes (q8_0 holds these small integers
// exactly: block scale 127/127), ReadTensor and the evaluator dequantize.
TEST_F(ReferenceTest, QuantizedWeightsAreDequantized) {
  std::vector<float> a_values(64), b_values(64, 0.0f);
  for (int i = 0; i < 64; ++i) a_values[i] = static_cast<float>(i % 32 - 16);
  a_values[0] = 127;  // Scale 1 in the first row's block.
  a_values[32] = 127;
  b_values[0] = 1;
  b_values[33] = 2;
  Tensor* a = Leaf(DType::kQ8_0, {32, 2}, a_values);
  Tensor* b = F32({32, 2}, b_values);
  // dst[n][m] = a[m] . b[n]: row 0 of a starts 127, -15; row 1 127, -15.
  EXPECT_THAT(Run(MulMat(ctx_, a, b)), ElementsAre(127, 127, -30, -30));
  FERRY_ASSERT_OK_AND_ASSIGN(std::vector<float> read, ReadTensor(*a));
  EXPECT_THAT(read, ElementsAreArray(a_values));
}

TEST_F(ReferenceTest, MulMatBroadcastsBatches) {
  Tensor* a = Leaf(DType::kF16, {2, 1, 2}, {1, 0, 0, 1});
  Tensor* b = F32({2, 1, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  // b batches 0,1 use a batch 0; b batches 2,3 use a batch 1.
  EXPECT_THAT(Run(MulMat(ctx_, a, b)), ElementsAre(1, 3, 6, 8));
}

TEST_F(ReferenceTest, MulMatPermutedInputs) {
  // b stored as [K=2, B=2, N=2] and permuted to [K, N, B]: batch and row
  // dims swap, rows stay contiguous.
  Tensor* a = F32({2, 1}, {1, 10});
  Tensor* b_raw = F32({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  absl::StatusOr<Tensor*> b = Permute(ctx_, b_raw, 0, 2, 1, 3);
  ASSERT_THAT(b, IsOk());
  // Logical b[k][n][batch] = b_raw[k][batch][n]:
  // batch 0: n0 = (1,2), n1 = (5,6); batch 1: n0 = (3,4), n1 = (7,8).
  EXPECT_THAT(Run(MulMat(ctx_, a, *b)), ElementsAre(21, 65, 43, 87));
}

TEST_F(ReferenceTest, BinaryBroadcast) {
  Tensor* a = F32({3, 2}, {1, 2, 3, 4, 5, 6});
  EXPECT_THAT(Run(Add(ctx_, a, F32({3}, {10, 20, 30}))),
              ElementsAre(11, 22, 33, 14, 25, 36));
  EXPECT_THAT(Run(Sub(ctx_, a, F32({1, 2}, {1, 2}))),
              ElementsAre(0, 1, 2, 2, 3, 4));
  EXPECT_THAT(Run(Mul(ctx_, a, F32({1}, {-2}))),
              ElementsAre(-2, -4, -6, -8, -10, -12));
  EXPECT_THAT(Run(Div(ctx_, a, F32({1, 2}, {2, 4}))),
              ElementsAre(0.5, 1, 1.5, 1, 1.25, 1.5));
}

TEST_F(ReferenceTest, BinaryOnStridedView) {
  // Columns 1..2 of a 4x2 matrix: rows of 2 with a row stride of 4 floats.
  Tensor* m = F32({4, 2}, {0, 1, 2, 0, 0, 3, 4, 0});
  absl::StatusOr<Tensor*> v = View2D(ctx_, m, 2, 2, 16, 4);
  ASSERT_THAT(v, IsOk());
  EXPECT_THAT(Run(Add(ctx_, *v, F32({2}, {10, 100}))),
              ElementsAre(11, 102, 13, 104));
}

TEST_F(ReferenceTest, UnaryOps) {
  Tensor* x = F32({4}, {-2, -0.5, 0, 1});
  EXPECT_THAT(Run(Scale(ctx_, x, 3)), ElementsAre(-6, -1.5, 0, 3));
  EXPECT_THAT(Run(Relu(ctx_, x)), ElementsAre(0, 0, 0, 1));
  EXPECT_THAT(Run(Silu(ctx_, x)),
              Near({-2 / (1 + std::exp(2.0f)), -0.5f / (1 + std::exp(0.5f)), 0,
                    1 / (1 + std::exp(-1.0f))}));
  // gelu(1) with the tanh approximation: 0.841192, not erf's 0.841345.
  EXPECT_THAT(Run(Gelu(ctx_, x)),
              Near({-0.0454023f, -0.1542859f, 0, 0.8411920f}));
}

TEST_F(ReferenceTest, Norms) {
  Tensor* x = F32({2, 2}, {3, 4, 1, 1});
  // rms of (3, 4) = sqrt(12.5).
  EXPECT_THAT(Run(RmsNorm(ctx_, x, 0)), Near({0.8485281f, 1.1313708f, 1, 1}));
  Tensor* y = F32({3}, {1, 2, 3});
  EXPECT_THAT(Run(Norm(ctx_, y, 0)), Near({-1.2247449f, 0, 1.2247449f}));
  // eps is added to the variance.
  EXPECT_THAT(Run(Norm(ctx_, y, 1.0f / 3)), Near({-1, 0, 1}));
}

TEST_F(ReferenceTest, SoftMaxKnownRow) {
  Tensor* x = F32({3}, {1, 2, 3});
  EXPECT_THAT(Run(SoftMax(ctx_, x, nullptr, 1)),
              Near({0.0900306f, 0.2447285f, 0.6652410f}));
}

TEST_F(ReferenceTest, SoftMaxScaleAndBroadcastMask) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  // Two rows in dim 2 share the single mask row.
  Tensor* x = F32({3, 1, 2}, {1, 2, 3, 3, 2, 1});
  Tensor* mask = F32({3, 2}, {0, -kInf, 0, 7, 7, 7});  // Row 1 unused.
  const float e = std::exp(-4.0f);
  EXPECT_THAT(Run(SoftMax(ctx_, x, mask, 2)),
              Near({e / (1 + e), 0, 1 / (1 + e), 1 / (1 + e), 0, e / (1 + e)}));
}

TEST_F(ReferenceTest, SoftMaxInPlace) {
  // The allocator may place soft_max's result over its source.
  Tensor* x = F32({3, 2}, {1, 2, 3, 0, 0, 0});
  absl::StatusOr<Tensor*> s = SoftMax(ctx_, x, nullptr, 1);
  ASSERT_THAT(s, IsOk());
  ASSERT_THAT(ctx_.AllocateHostData(), IsOk());
  (*s)->data = x->data;
  EXPECT_THAT(Run(*s), Near({0.0900306f, 0.2447285f, 0.6652410f, 1.0f / 3,
                             1.0f / 3, 1.0f / 3}));
}

TEST_F(ReferenceTest, RopeNormal) {
  // One head of 6, two tokens at positions 0 and 1; rotate the first 4.
  Tensor* x = F32({6, 1, 2}, {1, 0, 1, 0, 7, 8, 1, 0, 1, 0, 7, 8});
  Tensor* pos = I32({2}, {0, 1});
  const float t1 = 0.01f;  // 10000^(-2/4).
  EXPECT_THAT(Run(Rope(ctx_, x, pos, 4, RopeMode::kNormal)),
              Near({1, 0, 1, 0, 7, 8, std::cos(1.0f), std::sin(1.0f),
                    std::cos(t1), std::sin(t1), 7, 8}));
}

TEST_F(ReferenceTest, RopeNeoxWithFreqScale) {
  Tensor* x = F32({4, 1, 1}, {1, 1, 0, 0});
  Tensor* pos = I32({1}, {4});
  // freq_scale 0.5: theta = 2 for pair 0 (dims 0, 2), 0.02 for pair 1 (1, 3).
  EXPECT_THAT(
      Run(Rope(ctx_, x, pos, 4, RopeMode::kNeox, 10000, 0.5)),
      Near({std::cos(2.0f), std::cos(0.02f), std::sin(2.0f), std::sin(0.02f)}));
}

TEST_F(ReferenceTest, RopeRotatesPairsWithinEachHead) {
  // Two heads; x0 = 0, x1 = 1 in each rotated pair: (-sin, cos).
  Tensor* x = F32({2, 2, 1}, {0, 1, 0, 2});
  Tensor* pos = I32({1}, {3});
  EXPECT_THAT(Run(Rope(ctx_, x, pos, 2, RopeMode::kNormal)),
              Near({-std::sin(3.0f), std::cos(3.0f), -2 * std::sin(3.0f),
                    2 * std::cos(3.0f)}));
}

TEST_F(ReferenceTest, GetRows) {
  Tensor* table = Leaf(DType::kF16, {2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor* ids = I32({3}, {2, 0, 2});
  EXPECT_THAT(Run(GetRows(ctx_, table, ids)), ElementsAre(5, 6, 1, 2, 5, 6));
}

TEST_F(ReferenceTest, GetRowsBatched) {
  Tensor* table = F32({1, 2, 2}, {1, 2, 3, 4});
  Tensor* ids = I32({2, 2}, {1, 1, 0, 1});
  EXPECT_THAT(Run(GetRows(ctx_, table, ids)), ElementsAre(2, 2, 3, 4));
}

TEST_F(ReferenceTest, GetRowsOutOfRange) {
  Tensor* table = F32({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor* ids = I32({1}, {3});
  absl::StatusOr<Tensor*> rows = GetRows(ctx_, table, ids);
  ASSERT_THAT(rows, IsOk());
  FERRY_ASSERT_OK_AND_ASSIGN(Graph g, Graph::Build({*rows}));
  ASSERT_THAT(ctx_.AllocateHostData(), IsOk());
  ASSERT_THAT(WriteTensor(*ids, std::vector<float>{3}), IsOk());
  EXPECT_THAT(EvaluateReference(g),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("id 3")));
}

TEST_F(ReferenceTest, CpyTransposedIntoF16) {
  Tensor* a = F32({3, 2}, {1, 2, 3, 4, 5, 6});
  absl::StatusOr<Tensor*> t = Transpose(ctx_, a);
  ASSERT_THAT(t, IsOk());
  Tensor* dst = Leaf(DType::kF16, {6}, {0, 0, 0, 0, 0, 0});
  absl::StatusOr<Tensor*> cpy = Cpy(ctx_, *t, dst);
  EXPECT_THAT(Run(cpy), ElementsAre(1, 4, 2, 5, 3, 6));
  // The copy landed in dst's memory.
  EXPECT_EQ((*cpy)->data, dst->data);
  EXPECT_THAT(*ReadTensor(*dst), ElementsAre(1, 4, 2, 5, 3, 6));
}

TEST_F(ReferenceTest, CpyIntoViewOfCache) {
  Tensor* cache = F32({2, 3}, {0, 0, 0, 0, 0, 0});
  absl::StatusOr<Tensor*> slot = View1D(ctx_, cache, 2, 8);
  ASSERT_THAT(slot, IsOk());
  Tensor* k = F32({2}, {7, 9});
  Run(Cpy(ctx_, k, *slot));
  EXPECT_THAT(*ReadTensor(*cache), ElementsAre(0, 0, 7, 9, 0, 0));
}

TEST_F(ReferenceTest, ContOfPermuted) {
  Tensor* a = F32({2, 3, 2}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  absl::StatusOr<Tensor*> p = Permute(ctx_, a, 2, 0, 1, 3);
  ASSERT_THAT(p, IsOk());
  // a's dim 0 moves to position 2, dim 1 to 0, dim 2 to 1: p is [3, 2, 2]
  // with p[j0][j1][j2] = a[j2][j0][j1], stored at j2 + 2 j0 + 6 j1 in a.
  std::vector<float> expected;
  for (int j2 = 0; j2 < 2; ++j2) {
    for (int j1 = 0; j1 < 2; ++j1) {
      for (int j0 = 0; j0 < 3; ++j0) expected.push_back(j2 + 2 * j0 + 6 * j1);
    }
  }
  absl::StatusOr<Tensor*> c = Cont(ctx_, *p);
  EXPECT_THAT(Run(c), ElementsAreArray(expected));
  EXPECT_TRUE((*c)->IsContiguous());
}

TEST_F(ReferenceTest, ReshapeThenAdd) {
  Tensor* a = F32({4}, {1, 2, 3, 4});
  absl::StatusOr<Tensor*> r = Reshape(ctx_, a, {2, 2});
  ASSERT_THAT(r, IsOk());
  EXPECT_THAT(Run(Add(ctx_, *r, F32({1, 2}, {10, 20}))),
              ElementsAre(11, 12, 23, 24));
}

TEST_F(ReferenceTest, Concat) {
  Tensor* a = F32({2, 2}, {1, 2, 3, 4});
  Tensor* b = F32({1, 2}, {5, 6});
  EXPECT_THAT(Run(Concat(ctx_, a, b, 0)), ElementsAre(1, 2, 5, 3, 4, 6));
  Tensor* c = F32({2, 1}, {7, 8});
  EXPECT_THAT(Run(Concat(ctx_, a, c, 1)), ElementsAre(1, 2, 3, 4, 7, 8));
}

TEST_F(ReferenceTest, ConcatTransposedSource) {
  Tensor* a = F32({2, 2}, {1, 2, 3, 4});
  absl::StatusOr<Tensor*> t = Transpose(ctx_, a);
  ASSERT_THAT(t, IsOk());
  Tensor* b = F32({2, 1}, {9, 9});
  EXPECT_THAT(Run(Concat(ctx_, *t, b, 1)), ElementsAre(1, 3, 2, 4, 9, 9));
}

TEST_F(ReferenceTest, ChainedGraph) {
  // y = relu(w x + bias) with a 2x2 w.
  Tensor* w = F32({2, 2}, {1, -1, 2, 0});
  Tensor* x = F32({2, 1}, {3, 5});
  Tensor* bias = F32({2}, {1, -7});
  absl::StatusOr<Tensor*> h = MulMat(ctx_, w, x);
  ASSERT_THAT(h, IsOk());
  absl::StatusOr<Tensor*> y = Add(ctx_, *h, bias);
  ASSERT_THAT(y, IsOk());
  // w x = (3 - 5, 6) = (-2, 6); + bias = (-1, -1); relu = (0, 0).
  EXPECT_THAT(Run(Relu(ctx_, *y)), ElementsAre(0, 0));
  EXPECT_THAT(*ReadTensor(**y), ElementsAre(-1, -1));
}

TEST_F(ReferenceTest, MissingDataIsAnError) {
  absl::StatusOr<Tensor*> x = ctx_.NewTensor(DType::kF32, {2}, "x");
  ASSERT_THAT(x, IsOk());
  absl::StatusOr<Tensor*> y = Relu(ctx_, *x);
  ASSERT_THAT(y, IsOk());
  FERRY_ASSERT_OK_AND_ASSIGN(Graph g, Graph::Build({*y}));
  EXPECT_THAT(
      EvaluateReference(g),
      StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("leaf 'x'")));
  EXPECT_THAT(ReadTensor(**x), StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_F(ReferenceTest, FillRandomIsSeededAndInRange) {
  Tensor* a = F32({64}, std::vector<float>(64));
  Tensor* b = F32({64}, std::vector<float>(64));
  Tensor* ids = I32({64}, std::vector<float>(64));
  ASSERT_THAT(ctx_.AllocateHostData(), IsOk());
  ASSERT_THAT(FillRandom(*a, 42), IsOk());
  ASSERT_THAT(FillRandom(*b, 42), IsOk());
  ASSERT_THAT(FillRandom(*ids, 7, 0, 10), IsOk());
  const std::vector<float> va = *ReadTensor(*a);
  EXPECT_EQ(va, *ReadTensor(*b));
  for (float v : va) {
    EXPECT_GE(v, -1.0f);
    EXPECT_LT(v, 1.0f);
  }
  ASSERT_THAT(FillRandom(*b, 43), IsOk());
  EXPECT_NE(va, *ReadTensor(*b));
  const std::vector<float> vi = *ReadTensor(*ids);
  for (float v : vi) {
    EXPECT_EQ(v, std::floor(v));
    EXPECT_GE(v, 0);
    EXPECT_LT(v, 10);
  }
  EXPECT_THAT(FillRandom(*a, 1, 1, 1),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(ReferenceTest, WriteTensorChecksSize) {
  Tensor* a = F32({4}, {1, 2, 3, 4});
  ASSERT_THAT(ctx_.AllocateHostData(), IsOk());
  EXPECT_THAT(WriteTensor(*a, std::vector<float>{1, 2}),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(NmseTest, Values) {
  EXPECT_EQ(Nmse(std::vector<float>{1, 2}, std::vector<float>{1, 2}), 0);
  EXPECT_DOUBLE_EQ(Nmse(std::vector<float>{3, 4}, std::vector<float>{3, 5}),
                   1.0 / 25);
  EXPECT_TRUE(std::isnan(Nmse(std::vector<float>{1}, std::vector<float>{})));
  EXPECT_TRUE(std::isnan(
      Nmse(std::vector<float>{1}, std::vector<float>{std::nanf("")})));
}

// set_rows: -1 sends a row nowhere (padding); any other id outside the
// cache, or one repeated, is refused (kernels skip the first and would race
// on the second).
TEST_F(ReferenceTest, SetRowsSkipsMinusOneAndRefusesBadIds) {
  Tensor* cache = F32({2, 3}, {0, 1, 10, 11, 20, 21});
  Tensor* rows = F32({2, 3}, {-1, -2, 5, 6, -3, -4});
  EXPECT_THAT(Run(SetRows(ctx_, cache, rows, I32({3}, {2, -1, 0}))),
              ElementsAre(-3, -4, 10, 11, -1, -2));
  for (const std::vector<float>& ids :
       {std::vector<float>{0, 3, 1}, std::vector<float>{0, -2, 1},
        std::vector<float>{1, 2, 1}}) {
    Context ctx;
    absl::StatusOr<Tensor*> c = ctx.NewTensor(DType::kF32, {2, 3});
    absl::StatusOr<Tensor*> r = ctx.NewTensor(DType::kF32, {2, 3});
    absl::StatusOr<Tensor*> i = ctx.NewTensor(DType::kI32, {3});
    ASSERT_THAT(c, IsOk());
    ASSERT_THAT(r, IsOk());
    ASSERT_THAT(i, IsOk());
    absl::StatusOr<Tensor*> out = SetRows(ctx, *c, *r, *i);
    ASSERT_THAT(out, IsOk());
    absl::StatusOr<Graph> graph = Graph::Build({*out});
    ASSERT_THAT(graph, IsOk());
    ASSERT_THAT(ctx.AllocateHostData(), IsOk());
    ASSERT_THAT(WriteTensor(**c, std::vector<float>(6, 0.0f)), IsOk());
    ASSERT_THAT(WriteTensor(**r, std::vector<float>(6, 1.0f)), IsOk());
    ASSERT_THAT(WriteTensor(**i, ids), IsOk());
    EXPECT_THAT(EvaluateReference(*graph), Not(IsOk())) << ids[1];
  }
}

}  // namespace
}  // namespace ferry::testing
