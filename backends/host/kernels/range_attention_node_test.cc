// range_attention on the host kernels against the reference evaluator:
// grouped heads, ranges of many lengths (empty, one row, the whole cache),
// head_dim 40 (five 8-float vectors, no 16), 1 to 4 threads; ranges outside
// the cache clamped; malformed nodes refused; f16 caches, read a chunk at a
// time, alike.
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ferry/backends/host/kernels/kernel_runner.h"
#include "ferry/backends/host/kernels/kernels.h"
#include "ferry/graph/context.h"
#include "ferry/graph/graph.h"
#include "ferry/graph/ops.h"
#include "ferry/graph/testing/reference.h"
#include "ferry/runtime/status_matchers.h"
#include "gtest/gtest.h"

namespace ferry::cpu_kernels {
namespace {

using ::ferry::testing::EvaluateReference;
using ::ferry::testing::FillRandom;
using ::ferry::testing::Nmse;
using ::ferry::testing::ReadTensor;
using ::ferry::testing::StatusIs;
using ::ferry::testing::WriteTensor;

constexpr int64_t kHeadDim = 40;
constexpr int64_t kHeads = 6;
constexpr int64_t kKvHeads = 2;
constexpr int64_t kRows = 37;

struct Attention {
  Context ctx;
  Tensor* q;
  Tensor* k;
  Tensor* v;
  Tensor* ranges;
  Tensor* out;
};

void Build(Attention& a, const std::vector<int32_t>& ranges,
           DType cache = DType::kF32, int64_t rows = kRows) {
  const auto n_tokens = static_cast<int64_t>(ranges.size() / 2);
  FERRY_ASSERT_OK_AND_ASSIGN(
      a.q, a.ctx.NewTensor(DType::kF32, {kHeadDim, kHeads, n_tokens}));
  FERRY_ASSERT_OK_AND_ASSIGN(
      a.k, a.ctx.NewTensor(cache, {kHeadDim * kKvHeads, rows}));
  FERRY_ASSERT_OK_AND_ASSIGN(
      a.v, a.ctx.NewTensor(cache, {kHeadDim * kKvHeads, rows}));
  FERRY_ASSERT_OK_AND_ASSIGN(a.ranges,
                             a.ctx.NewTensor(DType::kI32, {2, n_tokens}));
  FERRY_ASSERT_OK_AND_ASSIGN(
      a.out, RangeAttention(a.ctx, a.q, a.k, a.v, a.ranges, 0.3f));
  FERRY_ASSERT_OK(a.ctx.AllocateHostData());
  FERRY_ASSERT_OK(FillRandom(*a.q, 1, -2, 2));
  FERRY_ASSERT_OK(FillRandom(*a.k, 2, -2, 2));
  FERRY_ASSERT_OK(FillRandom(*a.v, 3));
  std::vector<float> as_floats(ranges.begin(), ranges.end());
  FERRY_ASSERT_OK(WriteTensor(*a.ranges, as_floats));
}

// Runs a.out on nth threads, its result poisoned first.
std::vector<float> RunKernels(Attention& a, int nth) {
  std::vector<float> poison(static_cast<size_t>(a.out->NumElements()), -7.0f);
  EXPECT_TRUE(WriteTensor(*a.out, poison).ok());
  EXPECT_TRUE(CheckSupported(*a.out).ok());
  KernelRunner runner(nth);
  Tensor* nodes[] = {a.out};
  EXPECT_TRUE(runner.Run(nodes).ok());
  absl::StatusOr<std::vector<float>> got = ReadTensor(*a.out);
  EXPECT_TRUE(got.ok());
  return got.ok() ? *got : std::vector<float>();
}

TEST(RangeAttentionNodeTest, MatchesReference) {
  Attention a;
  Build(a, {0, 1, 3, 20, 5, 5, 0, kRows, 30, kRows, 36, kRows});
  FERRY_ASSERT_OK_AND_ASSIGN(Graph graph, Graph::Build({a.out}));
  FERRY_ASSERT_OK(EvaluateReference(graph));
  FERRY_ASSERT_OK_AND_ASSIGN(std::vector<float> want, ReadTensor(*a.out));
  // The empty range (token 2) gives zeros.
  for (int64_t i = 0; i < kHeadDim * kHeads; ++i) {
    ASSERT_EQ(want[static_cast<size_t>(2 * kHeadDim * kHeads + i)], 0.0f);
  }
  for (int nth : {1, 2, 3, 4}) {  // 4: by (token, kv head) pairs.
    SCOPED_TRACE(absl::StrCat("nth=", nth));
    EXPECT_LE(Nmse(want, RunKernels(a, nth)), 1e-10);  // Fails on NaN too.
  }
}

// An f16 cache of 150 rows: ranges within one 64-row chunk, across chunk
// ends and over a partial last chunk; the reference reads the same f16
// values, so only the order of the sums differs.
TEST(RangeAttentionNodeTest, F16CacheMatchesReference) {
  constexpr int64_t kF16Rows = 150;
  Attention a;
  Build(a, {0, 1, 3, 150, 5, 5, 0, 64, 63, 129, 100, 150, 64, 128}, DType::kF16,
        kF16Rows);
  FERRY_ASSERT_OK_AND_ASSIGN(Graph graph, Graph::Build({a.out}));
  FERRY_ASSERT_OK(EvaluateReference(graph));
  FERRY_ASSERT_OK_AND_ASSIGN(std::vector<float> want, ReadTensor(*a.out));
  for (int nth : {1, 2, 3, 4}) {  // 4: by (token, kv head) pairs.
    SCOPED_TRACE(absl::StrCat("nth=", nth));
    EXPECT_LE(Nmse(want, RunKernels(a, nth)), 1e-10);  // Fails on NaN too.
  }
}

TEST(RangeAttentionNodeTest, ClampsRangesOutsideTheCache) {
  Attention clamped;
  Build(clamped, {-5, 3, 30, 99, 40, 50});
  Attention inside;
  Build(inside, {0, 3, 30, kRows, kRows, kRows});
  EXPECT_EQ(RunKernels(clamped, 2), RunKernels(inside, 2));
  // The reference refuses them instead.
  FERRY_ASSERT_OK_AND_ASSIGN(Graph graph, Graph::Build({clamped.out}));
  EXPECT_THAT(EvaluateReference(graph),
              StatusIs(absl::StatusCode::kOutOfRange));
}

TEST(RangeAttentionNodeTest, MalformedNodesAreRefused) {
  Attention a;
  Build(a, {0, 1, 0, 2});
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * short_ranges,
                             a.ctx.NewTensor(DType::kI32, {2, 1}));
  a.out->src[3] = short_ranges;
  EXPECT_THAT(CheckSupported(*a.out),
              StatusIs(absl::StatusCode::kInvalidArgument));
  a.out->src[3] = a.ranges;
  FERRY_ASSERT_OK_AND_ASSIGN(
      Tensor * odd_k, a.ctx.NewTensor(DType::kF32, {kHeadDim * 4, kRows}));
  a.out->src[1] = odd_k;  // 4 kv heads do not divide 6 heads.
  EXPECT_THAT(CheckSupported(*a.out),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// The graph-level constructor refuses what the kernel would.
TEST(RangeAttentionNodeTest, OpRefusesBadShapes) {
  Context ctx;
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * q, ctx.NewTensor(DType::kF32, {8, 3, 4}));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * k, ctx.NewTensor(DType::kF32, {16, 9}));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * ranges,
                             ctx.NewTensor(DType::kI32, {2, 4}));
  // 2 kv heads do not divide 3 heads.
  EXPECT_THAT(RangeAttention(ctx, q, k, k, ranges, 1.0f),
              StatusIs(absl::StatusCode::kInvalidArgument));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * k1, ctx.NewTensor(DType::kF32, {8, 9}));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * short_ranges,
                             ctx.NewTensor(DType::kI32, {2, 3}));
  EXPECT_THAT(RangeAttention(ctx, q, k1, k1, short_ranges, 1.0f),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // K and V of different dtypes, and a cache type the kernels do not read.
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * k1_f16,
                             ctx.NewTensor(DType::kF16, {8, 9}));
  EXPECT_THAT(RangeAttention(ctx, q, k1_f16, k1, ranges, 1.0f),
              StatusIs(absl::StatusCode::kInvalidArgument));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * k1_bf16,
                             ctx.NewTensor(DType::kBF16, {8, 9}));
  EXPECT_THAT(RangeAttention(ctx, q, k1_bf16, k1_bf16, ranges, 1.0f),
              StatusIs(absl::StatusCode::kInvalidArgument));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * out,
                             RangeAttention(ctx, q, k1, k1, ranges, 1.0f));
  EXPECT_EQ(out->op, Op::kRangeAttention);
  EXPECT_EQ(OpName(out->op), "range_attention");
  EXPECT_EQ(out->ne, q->ne);
}

}  // namespace
}  // namespace ferry::cpu_kernels
