#include "ferry/graph/ops.h"

#include <array>
#include <cstdint>
#include <vector>

#include "ferry/graph/context.h"
#include "ferry/runtime/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

using ::ferry::testing::IsOk;
using ::ferry::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

using Shape = std::array<int64_t, 4>;

constexpr absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;

class OpsTest : public ::testing::Test {
 protected:
  Tensor* T(DType dtype, std::vector<int64_t> shape, const char* name = "") {
    absl::StatusOr<Tensor*> t = ctx_.NewTensor(dtype, shape, name);
    EXPECT_THAT(t, IsOk());
    return *t;
  }
  Tensor* F32(std::vector<int64_t> shape, const char* name = "") {
    return T(DType::kF32, shape, name);
  }

  Context ctx_;
};

TEST_F(OpsTest, MulMatShapes) {
  FERRY_ASSERT_OK_AND_ASSIGN(
      Tensor * r,
      MulMat(ctx_, T(DType::kF16, {64, 32, 2}), F32({64, 8, 6, 3})));
  EXPECT_EQ(r->ne, (Shape{32, 8, 6, 3}));
  EXPECT_EQ(r->dtype, DType::kF32);
  EXPECT_EQ(r->op, Op::kMulMat);
  EXPECT_TRUE(r->IsContiguous());
  EXPECT_EQ(r->src[0]->dtype, DType::kF16);
}

// Block-quantized tensors: rows of ne0 / 32 blocks, ne0 a multiple of 32;
// only mul_mat's and get_rows' a, and views keeping dim 0.
TEST_F(OpsTest, QuantizedTensorsOnlyAsWeights) {
  Tensor* q = T(DType::kQ4_1, {64, 6}, "q");
  EXPECT_EQ(q->RowBytes(), 2 * 20);
  EXPECT_EQ(q->nb[1], 40);
  EXPECT_EQ(q->NumBytes(), 6 * 40);
  EXPECT_THAT(ctx_.NewTensor(DType::kQ8_0, {48, 2}, "odd"),
              StatusIs(kInvalid, HasSubstr("not a multiple of the q8_0 block "
                                           "size 32")));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * r, MulMat(ctx_, q, F32({64, 3})));
  EXPECT_EQ(r->ne, (Shape{6, 3, 1, 1}));
  EXPECT_EQ(r->dtype, DType::kF32);
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * rows,
                             GetRows(ctx_, q, T(DType::kI32, {2})));
  EXPECT_EQ(rows->ne, (Shape{64, 2, 1, 1}));
  EXPECT_EQ(rows->dtype, DType::kF32);
  FERRY_EXPECT_OK(Reshape(ctx_, q, {64, 3, 2}).status());
  FERRY_EXPECT_OK(Permute(ctx_, q, 0, 2, 1, 3).status());
  const auto refused = StatusIs(kInvalid, HasSubstr("[64, 6, 1, 1] q4_1"));
  EXPECT_THAT(MulMat(ctx_, F32({64, 6}), q), refused);
  EXPECT_THAT(Add(ctx_, q, q), refused);
  EXPECT_THAT(Cont(ctx_, q), refused);
  EXPECT_THAT(Cpy(ctx_, q, F32({64, 6})), refused);
  EXPECT_THAT(Cpy(ctx_, F32({64, 6}), q), refused);
  EXPECT_THAT(Concat(ctx_, q, q, 1), refused);
  EXPECT_THAT(Transpose(ctx_, q), refused);
  EXPECT_THAT(SetRows(ctx_, q, F32({64, 1}), T(DType::kI32, {1})), refused);
}

TEST_F(OpsTest, MulMatErrors) {
  EXPECT_THAT(
      MulMat(ctx_, F32({64, 32}), F32({48, 8})),
      StatusIs(kInvalid, HasSubstr("mul_mat: a [64, 32, 1, 1] f32 and b [48, "
                                   "8, 1, 1] f32 need equal ne[0]")));
  EXPECT_THAT(MulMat(ctx_, F32({64, 32, 3}), F32({64, 8, 4})),
              StatusIs(kInvalid, AllOf(HasSubstr("mul_mat"),
                                       HasSubstr("b.ne[2] must be a multiple "
                                                 "of a.ne[2]"))));
  EXPECT_THAT(MulMat(ctx_, F32({64, 32, 1, 2}), F32({64, 8, 1, 3})),
              StatusIs(kInvalid, HasSubstr("b.ne[3]")));
  EXPECT_THAT(MulMat(ctx_, T(DType::kI32, {4, 4}), F32({4, 4})),
              StatusIs(kInvalid, HasSubstr("a [4, 4, 1, 1] i32 must be "
                                           "f32/f16/bf16")));
  EXPECT_THAT(MulMat(ctx_, F32({4, 4}), T(DType::kF16, {4, 4})),
              StatusIs(kInvalid, HasSubstr("b [4, 4, 1, 1] f16 must be f32")));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * at, Transpose(ctx_, F32({4, 4})));
  EXPECT_THAT(MulMat(ctx_, at, F32({4, 4})),
              StatusIs(kInvalid, HasSubstr("needs contiguous rows")));
  EXPECT_THAT(MulMat(ctx_, nullptr, F32({4, 4})),
              StatusIs(kInvalid, HasSubstr("mul_mat: a is null")));
}

TEST_F(OpsTest, MulMatAcceptsPermutedBatches) {
  // Rows stay contiguous; batch dims swapped.
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * p,
                             Permute(ctx_, F32({8, 4, 2, 3}), 0, 1, 3, 2));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * r, MulMat(ctx_, p, F32({8, 5, 3, 2})));
  EXPECT_EQ(r->ne, (Shape{4, 5, 3, 2}));
}

TEST_F(OpsTest, BinaryBroadcast) {
  Tensor* a = F32({8, 6, 4, 2});
  for (auto op : {&Add, &Sub, &Mul, &Div}) {
    FERRY_ASSERT_OK_AND_ASSIGN(Tensor * r, op(ctx_, a, F32({8, 1, 2, 1})));
    EXPECT_EQ(r->ne, a->ne);
    EXPECT_EQ(r->src[0], a);
  }
  EXPECT_THAT(Add(ctx_, a, F32({8, 4})),
              StatusIs(kInvalid, HasSubstr("add: b [8, 4, 1, 1] f32 cannot "
                                           "broadcast onto a [8, 6, 4, 2] "
                                           "f32")));
  EXPECT_THAT(Sub(ctx_, F32({8}), a),
              StatusIs(kInvalid, HasSubstr("sub: b [8, 6, 4, 2] f32 cannot")));
  EXPECT_THAT(Mul(ctx_, a, T(DType::kF16, {8})),
              StatusIs(kInvalid, HasSubstr("mul: b [8, 1, 1, 1] f16 must be "
                                           "f32")));
  EXPECT_THAT(Div(ctx_, T(DType::kI32, {8}), F32({8})),
              StatusIs(kInvalid, HasSubstr("div: a [8, 1, 1, 1] i32")));
}

TEST_F(OpsTest, UnaryAndNormErrors) {
  Tensor* h = T(DType::kF16, {4});
  EXPECT_THAT(Scale(ctx_, h, 2.0f), StatusIs(kInvalid, HasSubstr("scale: a")));
  EXPECT_THAT(Silu(ctx_, h), StatusIs(kInvalid, HasSubstr("silu: a [4")));
  EXPECT_THAT(Gelu(ctx_, h), StatusIs(kInvalid, HasSubstr("gelu: a [4")));
  EXPECT_THAT(Relu(ctx_, h), StatusIs(kInvalid, HasSubstr("relu: a [4")));
  EXPECT_THAT(RmsNorm(ctx_, h, 1e-5f),
              StatusIs(kInvalid, HasSubstr("rms_norm: a [4")));
  EXPECT_THAT(Norm(ctx_, F32({4}), -1.0f),
              StatusIs(kInvalid, HasSubstr("norm: eps must be")));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * r, RmsNorm(ctx_, F32({4, 2}), 1e-6f));
  EXPECT_EQ(r->ParamF32(0), 1e-6f);
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * s, Scale(ctx_, F32({4, 2}), 0.5f));
  EXPECT_EQ(s->ParamF32(0), 0.5f);
}

TEST_F(OpsTest, SoftMax) {
  Tensor* a = F32({16, 4, 8, 2});
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * r, SoftMax(ctx_, a, nullptr, 0.5f));
  EXPECT_EQ(r->ne, a->ne);
  EXPECT_EQ(r->src[1], nullptr);
  EXPECT_EQ(r->ParamF32(0), 0.5f);
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * m, SoftMax(ctx_, a, F32({16, 6}), 1.0f));
  EXPECT_EQ(m->src[1]->ne[1], 6);
  EXPECT_THAT(SoftMax(ctx_, a, F32({15, 4}), 1.0f),
              StatusIs(kInvalid, HasSubstr("soft_max: a [16, 4, 8, 2] f32 and "
                                           "mask [15, 4, 1, 1] f32 need equal "
                                           "ne[0]")));
  EXPECT_THAT(SoftMax(ctx_, a, F32({16, 3}), 1.0f),
              StatusIs(kInvalid, HasSubstr("mask needs ne[1] >= a.ne[1]")));
  EXPECT_THAT(SoftMax(ctx_, a, F32({16, 4, 3}), 1.0f),
              StatusIs(kInvalid, HasSubstr("multiple of mask.ne[2]")));
  EXPECT_THAT(SoftMax(ctx_, a, T(DType::kI32, {16, 4}), 1.0f),
              StatusIs(kInvalid, HasSubstr("mask [16, 4, 1, 1] i32")));
}

TEST_F(OpsTest, Rope) {
  Tensor* a = F32({64, 8, 5});
  Tensor* pos = T(DType::kI32, {5});
  FERRY_ASSERT_OK_AND_ASSIGN(
      Tensor * r, Rope(ctx_, a, pos, 32, RopeMode::kNeox, 500000.0f, 0.25f));
  EXPECT_EQ(r->ne, a->ne);
  EXPECT_EQ(r->ParamI32(0), 32);
  EXPECT_EQ(r->ParamI32(1), 2);
  EXPECT_EQ(r->ParamF32(2), 500000.0f);
  EXPECT_EQ(r->ParamF32(3), 0.25f);
  EXPECT_THAT(Rope(ctx_, a, T(DType::kI32, {4}), 64, RopeMode::kNormal),
              StatusIs(kInvalid, HasSubstr("rope: pos [4, 1, 1, 1] i32 must be "
                                           "contiguous [a.ne[2]] for a [64, 8, "
                                           "5, 1] f32")));
  EXPECT_THAT(
      Rope(ctx_, a, F32({5}), 64, RopeMode::kNormal),
      StatusIs(kInvalid, HasSubstr("pos [5, 1, 1, 1] f32 must be i32")));
  EXPECT_THAT(Rope(ctx_, a, pos, 65, RopeMode::kNormal),
              StatusIs(kInvalid, HasSubstr("n_dims = 65")));
  EXPECT_THAT(Rope(ctx_, a, pos, 66, RopeMode::kNormal),
              StatusIs(kInvalid, HasSubstr("<= a.ne[0]")));
  EXPECT_THAT(Rope(ctx_, a, pos, 64, static_cast<RopeMode>(1)),
              StatusIs(kInvalid, HasSubstr("unknown mode")));
  EXPECT_THAT(Rope(ctx_, a, pos, 64, RopeMode::kNormal, 0.0f),
              StatusIs(kInvalid, HasSubstr("freq_base")));
  // Frequency factors: f32 [n_dims / 2].
  Tensor* factors = F32({16});
  FERRY_ASSERT_OK_AND_ASSIGN(
      Tensor * scaled,
      Rope(ctx_, a, pos, 32, RopeMode::kNeox, 10000.0f, 1.0f, factors));
  EXPECT_EQ(scaled->src[2], factors);
  EXPECT_EQ(r->src[2], nullptr);
  EXPECT_THAT(
      Rope(ctx_, a, pos, 32, RopeMode::kNeox, 10000.0f, 1.0f, F32({32})),
      StatusIs(kInvalid, HasSubstr("n_dims / 2 = 16")));
  EXPECT_THAT(Rope(ctx_, a, pos, 32, RopeMode::kNeox, 10000.0f, 1.0f,
                   T(DType::kI32, {16})),
              StatusIs(kInvalid, HasSubstr("must be f32")));
}

TEST_F(OpsTest, Tanh) {
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * t, Tanh(ctx_, F32({8, 3})));
  EXPECT_EQ(t->op, Op::kTanh);
  EXPECT_EQ(OpName(t->op), "tanh");
  EXPECT_EQ(t->ne, (Shape{8, 3, 1, 1}));
}

TEST_F(OpsTest, GetRows) {
  FERRY_ASSERT_OK_AND_ASSIGN(
      Tensor * r,
      GetRows(ctx_, T(DType::kF16, {16, 100}), T(DType::kI32, {7})));
  EXPECT_EQ(r->ne, (Shape{16, 7, 1, 1}));
  EXPECT_EQ(r->dtype, DType::kF32);
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * batched, GetRows(ctx_, F32({16, 100, 3}),
                                                       T(DType::kI32, {7, 3})));
  EXPECT_EQ(batched->ne, (Shape{16, 7, 3, 1}));
  EXPECT_THAT(GetRows(ctx_, F32({16, 100}), F32({7})),
              StatusIs(kInvalid, HasSubstr("get_rows: ids [7, 1, 1, 1] f32 "
                                           "must be i32")));
  EXPECT_THAT(GetRows(ctx_, F32({16, 100, 3}), T(DType::kI32, {7})),
              StatusIs(kInvalid, HasSubstr("ids must be [N, a.ne[2]")));
  EXPECT_THAT(GetRows(ctx_, T(DType::kI32, {16, 100}), T(DType::kI32, {7})),
              StatusIs(kInvalid, HasSubstr("a [16, 100, 1, 1] i32 must be")));
}

TEST_F(OpsTest, SetRowsAliasesDestination) {
  Tensor* cache = T(DType::kF16, {16, 100}, "k_cache");
  FERRY_ASSERT_OK_AND_ASSIGN(
      Tensor * r, SetRows(ctx_, cache, F32({16, 7}), T(DType::kI32, {7})));
  EXPECT_EQ(r->op, Op::kSetRows);
  EXPECT_EQ(r->view_src, cache);
  EXPECT_EQ(r->ne, cache->ne);
  EXPECT_EQ(r->dtype, DType::kF16);
  EXPECT_EQ(r->src[2], cache);
  EXPECT_THAT(SetRows(ctx_, cache, F32({15, 7}), T(DType::kI32, {7})),
              StatusIs(kInvalid, HasSubstr("rows must be [dst.ne[0]")));
  EXPECT_THAT(SetRows(ctx_, cache, F32({16, 7}), T(DType::kI32, {6})),
              StatusIs(kInvalid, HasSubstr("rows must be [dst.ne[0]")));
  EXPECT_THAT(SetRows(ctx_, cache, F32({16, 7}), F32({7})),
              StatusIs(kInvalid, HasSubstr("ids [7, 1, 1, 1] f32 must be")));
  EXPECT_THAT(
      SetRows(ctx_, F32({16, 10, 2}), F32({16, 7}), T(DType::kI32, {7})),
      StatusIs(kInvalid, HasSubstr("must be 2-D")));
}

TEST_F(OpsTest, CpyAliasesDestination) {
  Tensor* a = F32({4, 3});
  Tensor* b = T(DType::kF16, {12}, "dst");
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * r, Cpy(ctx_, a, b));
  EXPECT_EQ(r->op, Op::kCpy);
  EXPECT_EQ(r->dtype, DType::kF16);
  EXPECT_EQ(r->ne, b->ne);
  EXPECT_EQ(r->view_src, b);
  EXPECT_EQ(r->view_offset, 0);
  EXPECT_EQ(r->src[0], a);
  EXPECT_EQ(r->src[1], b);
  EXPECT_THAT(Cpy(ctx_, a, F32({11})),
              StatusIs(kInvalid, HasSubstr("cpy: a [4, 3, 1, 1] f32 and b [11, "
                                           "1, 1, 1] f32 need equal element "
                                           "counts")));
  EXPECT_THAT(Cpy(ctx_, a, T(DType::kI32, {12})),
              StatusIs(kInvalid, HasSubstr("cannot convert between f32 and "
                                           "i32")));
  // Into a view: the result aliases the view's root at its offset.
  Tensor* cache = F32({8, 10}, "cache");
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * slot, View1D(ctx_, cache, 8, 3 * 32));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * w, Cpy(ctx_, F32({8}), slot));
  EXPECT_EQ(w->view_src, cache);
  EXPECT_EQ(w->view_offset, 96);
}

TEST_F(OpsTest, ContOfTransposed) {
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * t,
                             Transpose(ctx_, T(DType::kF16, {4, 3})));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * c, Cont(ctx_, t));
  EXPECT_EQ(c->ne, (Shape{3, 4, 1, 1}));
  EXPECT_EQ(c->dtype, DType::kF16);
  EXPECT_TRUE(c->IsContiguous());
  EXPECT_EQ(c->view_src, nullptr);
  EXPECT_THAT(Cont(ctx_, nullptr), StatusIs(kInvalid, HasSubstr("cont")));
}

TEST_F(OpsTest, Views) {
  Tensor* a = F32({10, 6}, "a");
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * v, View2D(ctx_, a, 4, 3, 80, 8));
  EXPECT_EQ(v->op, Op::kView);
  EXPECT_EQ(v->ne, (Shape{4, 3, 1, 1}));
  EXPECT_EQ(v->nb, (Shape{4, 80, 240, 240}));
  EXPECT_EQ(v->view_src, a);
  EXPECT_EQ(v->view_offset, 8);
  EXPECT_EQ(v->name, "a (view)");
  // A view of a view points at the root with the offsets summed.
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * vv, View1D(ctx_, v, 2, 4));
  EXPECT_EQ(vv->view_src, a);
  EXPECT_EQ(vv->view_offset, 12);
  EXPECT_EQ(vv->src[0], v);
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * v3, View3D(ctx_, a, 5, 2, 3, 40, 80, 0));
  EXPECT_EQ(v3->nb, (Shape{4, 40, 80, 240}));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * v4,
                             View4D(ctx_, a, 10, 6, 1, 1, 40, 240, 240, 0));
  EXPECT_TRUE(v4->IsContiguous());

  // Bounds: last view element must stay within a's 240 bytes.
  EXPECT_THAT(View1D(ctx_, a, 61, 0),
              StatusIs(kInvalid, HasSubstr("view: view [61, 1, 1, 1] f32")));
  EXPECT_THAT(View1D(ctx_, a, 60, 4),
              StatusIs(kInvalid, HasSubstr("ends at byte 244, past a's 240")));
  EXPECT_THAT(View2D(ctx_, a, 4, 3, 81, 0),
              StatusIs(kInvalid, HasSubstr("multiples of 4")));
  EXPECT_THAT(View1D(ctx_, a, 4, -4),
              StatusIs(kInvalid, HasSubstr("offset must be >= 0")));
  EXPECT_THAT(View4D(ctx_, a, 4, 5, 1, 1, int64_t{1} << 61, 8, 8, 0),
              StatusIs(kInvalid, HasSubstr("past a's")));
  EXPECT_THAT(View2D(ctx_, a, 4, 3, int64_t{1} << 62, 0),
              StatusIs(kInvalid, HasSubstr("past a's")));
  EXPECT_THAT(View1D(ctx_, a, -1, 0), StatusIs(kInvalid));
}

TEST_F(OpsTest, ViewPropagatesData) {
  Tensor* a = F32({8});
  float storage[8] = {};
  a->data = storage;
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * v, View1D(ctx_, a, 2, 8));
  EXPECT_EQ(v->data, &storage[2]);
}

TEST_F(OpsTest, Reshape) {
  Tensor* a = F32({6, 4}, "a");
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * r, Reshape(ctx_, a, {3, 2, 4}));
  EXPECT_EQ(r->op, Op::kReshape);
  EXPECT_EQ(r->ne, (Shape{3, 2, 4, 1}));
  EXPECT_EQ(r->nb, (Shape{4, 12, 24, 96}));
  EXPECT_EQ(r->view_src, a);
  EXPECT_THAT(Reshape(ctx_, a, {5, 5}),
              StatusIs(kInvalid, HasSubstr("reshape: a [6, 4, 1, 1] f32 to "
                                           "[5, 5]: element counts differ")));
  EXPECT_THAT(Reshape(ctx_, a, {1, 1, 1, 1, 24}),
              StatusIs(kInvalid, HasSubstr("at most 4 dims")));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * t, Transpose(ctx_, a));
  EXPECT_THAT(Reshape(ctx_, t, {24}),
              StatusIs(kInvalid, HasSubstr("not contiguous")));
}

TEST_F(OpsTest, PermuteFollowsGgml) {
  Tensor* a = F32({2, 3, 4, 5});
  // Source dim i goes to position axis_i.
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * p, Permute(ctx_, a, 2, 0, 3, 1));
  EXPECT_EQ(p->ne, (Shape{3, 5, 2, 4}));
  EXPECT_EQ(p->nb, (Shape{a->nb[1], a->nb[3], a->nb[0], a->nb[2]}));
  EXPECT_EQ(p->op, Op::kPermute);
  EXPECT_EQ(p->ParamI32(0), 2);
  EXPECT_EQ(p->ParamI32(3), 1);
  EXPECT_TRUE(p->IsPermuted());
  EXPECT_EQ(p->view_src, a);
  EXPECT_THAT(Permute(ctx_, a, 0, 1, 1, 3),
              StatusIs(kInvalid, HasSubstr("permute: axes (0, 1, 1, 3) are "
                                           "not a permutation")));
  EXPECT_THAT(Permute(ctx_, a, 0, 1, 2, 4), StatusIs(kInvalid));

  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * t, Transpose(ctx_, a));
  EXPECT_EQ(t->op, Op::kTranspose);
  EXPECT_EQ(t->ne, (Shape{3, 2, 4, 5}));
  EXPECT_EQ(t->nb, (Shape{8, 4, 24, 96}));
  EXPECT_TRUE(t->IsTransposed());
}

TEST_F(OpsTest, Concat) {
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * c,
                             Concat(ctx_, F32({4, 3, 2}), F32({4, 5, 2}), 1));
  EXPECT_EQ(c->ne, (Shape{4, 8, 2, 1}));
  EXPECT_EQ(c->ParamI32(0), 1);
  EXPECT_THAT(Concat(ctx_, F32({4, 3}), F32({5, 3}), 1),
              StatusIs(kInvalid, HasSubstr("concat: a [4, 3, 1, 1] f32 and b "
                                           "[5, 3, 1, 1] f32 need equal ne[0] "
                                           "to concat along dim 1")));
  EXPECT_THAT(Concat(ctx_, F32({4}), T(DType::kF16, {4}), 0),
              StatusIs(kInvalid, HasSubstr("need equal dtypes")));
  EXPECT_THAT(Concat(ctx_, F32({4}), F32({4}), 4),
              StatusIs(kInvalid, HasSubstr("dim 4 not in [0, 3]")));
}

TEST_F(OpsTest, Flags) {
  Tensor* t = F32({4});
  SetInput(*t);
  SetOutput(*t);
  EXPECT_TRUE(t->HasFlag(kTensorFlagInput));
  EXPECT_TRUE(t->HasFlag(kTensorFlagOutput));
  EXPECT_FALSE(t->HasFlag(kTensorFlagWeight));
  SetWeight(*t);
  EXPECT_TRUE(t->HasFlag(kTensorFlagWeight));
}

}  // namespace
}  // namespace ferry
