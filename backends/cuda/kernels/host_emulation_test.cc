// Checks the CUDA kernels without a GPU: their own __host__ __device__ code,
// run by the host emulation, against the reference evaluator on every case
// of internal/kernel_test_cases.h; and the mul_mat -> cuBLAS plan.
#include "ferry/backends/cuda/kernels/host_emulation.h"

#include <cuda_runtime_api.h>

#include <cctype>
#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ferry/backends/cuda/kernels/cuda_kernels.h"
#include "ferry/backends/cuda/kernels/internal/kernel_test_cases.h"
#include "ferry/backends/cuda/kernels/internal/node_args.h"
#include "ferry/backends/host/kernels/kernels.h"
#include "ferry/graph/context.h"
#include "ferry/graph/graph.h"
#include "ferry/graph/op.h"
#include "ferry/graph/ops.h"
#include "ferry/graph/tensor.h"
#include "ferry/runtime/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ferry::cuda_kernels {
namespace {

using ::ferry::cuda_kernels_internal::AllKernelCases;
using ::ferry::cuda_kernels_internal::ExpectCaseMatches;
using ::ferry::cuda_kernels_internal::GemmPlan;
using ::ferry::cuda_kernels_internal::KernelCase;
using ::ferry::cuda_kernels_internal::PlanMulMat;
using ::ferry::testing::StatusIs;

const std::vector<KernelCase>& Cases() {
  static const auto* cases = new std::vector<KernelCase>(AllKernelCases());
  return *cases;
}

// Every node must be one the CPU kernels support (what the CUDA backend's
// supports_op accepts), then runs through the emulation.
absl::Status EmulateGraph(const Graph& graph) {
  for (Tensor* node : graph.nodes()) {
    absl::Status supported = cpu_kernels::CheckSupported(*node);
    if (!supported.ok()) return supported;
    absl::Status status = EmulateOnHost(*node);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

class HostEmulationTest : public ::testing::TestWithParam<size_t> {};

TEST_P(HostEmulationTest, MatchesReference) {
  ExpectCaseMatches(Cases()[GetParam()], &EmulateGraph);
}

std::string CaseName(const ::testing::TestParamInfo<size_t>& info) {
  std::string name = Cases()[info.param].name;
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(AllOps, HostEmulationTest,
                         ::testing::Range<size_t>(0, Cases().size()), CaseName);

// The cases cover every computing op, in place where allowed, and every
// dtype each op accepts; prints the case count per op and dtype.
TEST(HostEmulationCoverageTest, CasesCoverEveryOpAndDtype) {
  std::map<std::string, int> counts;
  std::set<Op> ops;
  std::set<Op> in_place_ops;
  std::set<std::string> op_dtypes;
  for (const KernelCase& test_case : Cases()) {
    Context ctx;
    FERRY_ASSERT_OK_AND_ASSIGN(Tensor * out, test_case.build(ctx));
    FERRY_ASSERT_OK_AND_ASSIGN(Graph graph, Graph::Build({out}));
    for (Tensor* node : graph.nodes()) {
      if (IsViewOp(node->op)) continue;
      FERRY_EXPECT_OK(cpu_kernels::CheckSupported(*node)) << test_case.name;
      ops.insert(node->op);
      if (test_case.in_place && node == out) {
        EXPECT_EQ(node->data, node->src[0]->data) << test_case.name;
        in_place_ops.insert(node->op);
      }
      // The dtype that selects the kernel: a's for most ops, the cache's for
      // set_rows.
      const DType dtype =
          node->op == Op::kSetRows ? node->dtype : node->src[0]->dtype;
      const std::string key = absl::StrCat(
          OpName(node->op), "/", DTypeName(dtype),
          node->op == Op::kCpy ? absl::StrCat(">", DTypeName(node->dtype))
                               : "");
      op_dtypes.insert(key);
      ++counts[key];
    }
  }
  for (int i = 0; i < kNumOps; ++i) {
    const Op op = static_cast<Op>(i);
    // CudaDevice refuses range_attention (cuda_backend_fake_test).
    if (op == Op::kNone || IsViewOp(op) || op == Op::kRangeAttention) continue;
    EXPECT_TRUE(ops.contains(op)) << OpName(op);
    EXPECT_EQ(in_place_ops.contains(op), OpCanRunInPlace(op)) << OpName(op);
  }
  for (const char* key :
       {"mul_mat/f32",   "mul_mat/f16",   "mul_mat/bf16", "get_rows/f32",
        "get_rows/f16",  "get_rows/bf16", "set_rows/f32", "set_rows/f16",
        "set_rows/bf16", "cpy/f32>f16",   "cpy/f32>bf16", "cpy/f16>f32",
        "cpy/f16>bf16",  "cpy/bf16>f32",  "cpy/bf16>f16", "cpy/i32>i32",
        "cont/i32",      "cont/bf16",     "concat/i32",   "concat/f16",
        "concat/bf16",   "concat/f32"}) {
    EXPECT_TRUE(op_dtypes.contains(key)) << key;
  }
  std::string summary =
      absl::StrCat(Cases().size(), " cases; nodes by op/dtype:");
  for (const auto& [key, count] : counts) {
    absl::StrAppend(&summary, " ", key, "=", count);
  }
  ::testing::Test::RecordProperty("coverage", summary);
  std::printf("%s\n", summary.c_str());
}

TEST(HostEmulationTest, LeafsAndViewsAreNoOps) {
  Context ctx;
  Tensor* a = *ctx.NewTensor(DType::kF32, {4, 3});
  Tensor* t = *Transpose(ctx, a);
  FERRY_EXPECT_OK(EmulateOnHost(*a));
  FERRY_EXPECT_OK(EmulateOnHost(*t));  // No data needed: nothing computed.
  EXPECT_EQ(ScratchBytes(*a), 0u);
}

TEST(HostEmulationTest, UnknownOpIsUnimplemented) {
  Context ctx;
  Tensor* a = *ctx.NewTensor(DType::kF32, {4, 3});
  Tensor node = **Relu(ctx, a);
  node.op = static_cast<Op>(200);
  EXPECT_THAT(EmulateOnHost(node), StatusIs(absl::StatusCode::kUnimplemented));
}

// ---------------------------------------------------------------------------
// The mul_mat plan handed to cuBLAS.

TEST(MulMatPlanTest, ContiguousBatchesAreOneStridedCall) {
  Context ctx;
  Tensor* a = *ctx.NewTensor(DType::kF32, {24, 5, 3, 2});
  Tensor* b = *ctx.NewTensor(DType::kF32, {24, 4, 3, 2});
  Tensor* out = *MulMat(ctx, a, b);
  EXPECT_EQ(ScratchBytes(*out), 0u);
  FERRY_ASSERT_OK_AND_ASSIGN(GemmPlan plan, PlanMulMat(*out, nullptr, 0));
  EXPECT_TRUE(plan.trans_a);
  EXPECT_FALSE(plan.trans_b);
  EXPECT_EQ(plan.m, 5);
  EXPECT_EQ(plan.n, 4);
  EXPECT_EQ(plan.k, 24);
  EXPECT_EQ(plan.lda, 24);
  EXPECT_EQ(plan.ldb, 24);
  EXPECT_EQ(plan.ldc, 5);
  ASSERT_EQ(plan.batches.size(), 1u);
  EXPECT_EQ(plan.batches[0].count, 6);
  EXPECT_EQ(plan.batches[0].stride_a, 24 * 5);
  EXPECT_EQ(plan.batches[0].stride_b, 24 * 4);
  EXPECT_EQ(plan.batches[0].stride_c, 5 * 4);
  EXPECT_FALSE(plan.copy_a.has_value());
  EXPECT_FALSE(plan.copy_b.has_value());
}

TEST(MulMatPlanTest, BroadcastWeightsUseZeroStride) {
  Context ctx;
  Tensor* a = *ctx.NewTensor(DType::kF32, {32, 8, 1, 1});
  Tensor* b = *ctx.NewTensor(DType::kF32, {32, 5, 6, 2});
  Tensor* out = *MulMat(ctx, a, b);
  FERRY_ASSERT_OK_AND_ASSIGN(GemmPlan plan, PlanMulMat(*out, nullptr, 0));
  ASSERT_EQ(plan.batches.size(), 1u);
  EXPECT_EQ(plan.batches[0].count, 12);
  EXPECT_EQ(plan.batches[0].stride_a, 0);
}

TEST(MulMatPlanTest, GroupedBroadcastSplitsIntoRuns) {
  Context ctx;
  Tensor* a = *ctx.NewTensor(DType::kF32, {32, 8, 2, 1});
  Tensor* b = *ctx.NewTensor(DType::kF32, {32, 5, 6, 1});
  Tensor* out = *MulMat(ctx, a, b);
  FERRY_ASSERT_OK_AND_ASSIGN(GemmPlan plan, PlanMulMat(*out, nullptr, 0));
  ASSERT_EQ(plan.batches.size(), 2u);
  for (const auto& batch : plan.batches) {
    EXPECT_EQ(batch.count, 3);
    EXPECT_EQ(batch.stride_a, 0);
  }
  EXPECT_EQ(plan.batches[1].a_offset, a->nb[2]);
}

TEST(MulMatPlanTest, HalfWeightsConvertBIntoScratch) {
  Context ctx;
  Tensor* a = *ctx.NewTensor(DType::kF16, {64, 48});
  Tensor* b_leaf = *ctx.NewTensor(DType::kF32, {70, 9});
  Tensor* b = *View2D(ctx, b_leaf, 64, 9, b_leaf->nb[1], 0);
  Tensor* out = *MulMat(ctx, a, b);
  const size_t bytes = ScratchBytes(*out);
  EXPECT_GE(bytes, 64u * 9u * 2u);
  EXPECT_EQ(bytes % 256, 0u);
  alignas(256) static char scratch[4096];
  EXPECT_THAT(PlanMulMat(*out, scratch, bytes - 1),
              StatusIs(absl::StatusCode::kInvalidArgument));
  FERRY_ASSERT_OK_AND_ASSIGN(GemmPlan plan, PlanMulMat(*out, scratch, bytes));
  ASSERT_TRUE(plan.copy_b.has_value());
  EXPECT_EQ(plan.b, scratch);
  EXPECT_EQ(plan.ldb, 64);  // Converted b is contiguous.
  EXPECT_EQ(plan.ab_type, cuda_kernels_internal::ElemType::kF16);
}

TEST(MulMatPlanTest, OverlappingRowsAreCopied) {
  Context ctx;
  Tensor* a_leaf = *ctx.NewTensor(DType::kF32, {64});
  Tensor* a = *View2D(ctx, a_leaf, 20, 5, 0, 0);  // Row stride 0.
  Tensor* b = *ctx.NewTensor(DType::kF32, {20, 3});
  Tensor* out = *MulMat(ctx, a, b);
  const size_t bytes = ScratchBytes(*out);
  EXPECT_GE(bytes, 20u * 5u * 4u);
  alignas(256) static char scratch[4096];
  FERRY_ASSERT_OK_AND_ASSIGN(GemmPlan plan, PlanMulMat(*out, scratch, bytes));
  ASSERT_TRUE(plan.copy_a.has_value());
  EXPECT_FALSE(plan.copy_b.has_value());
  EXPECT_EQ(plan.lda, 20);
}

TEST(MulMatPlanTest, DimensionsBeyondIntAreRejected) {
  // Metadata only: the plan computes addresses, it never reads data.
  Context ctx;
  Tensor* a = *ctx.NewTensor(DType::kF32, {4, 1});
  Tensor* b = *ctx.NewTensor(DType::kF32, {4, 1});
  Tensor node = **MulMat(ctx, a, b);
  Tensor big_b = *b;
  big_b.ne[1] = int64_t{1} << 31;
  big_b.nb = ContiguousStrides(big_b.dtype, big_b.ne);
  node.src[1] = &big_b;
  node.ne[1] = big_b.ne[1];
  node.nb = ContiguousStrides(node.dtype, node.ne);
  FERRY_ASSERT_OK(cpu_kernels::CheckSupported(node));
  EXPECT_THAT(PlanMulMat(node, nullptr, 0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("n = 2147483648")));
}

// ---------------------------------------------------------------------------
// Launch's paths that need no GPU.

TEST(LaunchWithoutGpuTest, LeafsAndViewsAreNoOps) {
  Context ctx;
  Tensor* a = *ctx.NewTensor(DType::kF32, {4, 3});
  FERRY_EXPECT_OK(Launch(*a, LaunchContext{}));
  FERRY_EXPECT_OK(Launch(**Transpose(ctx, a), LaunchContext{}));
}

TEST(LaunchWithoutGpuTest, MulMatWithoutCublasHandleFails) {
  Context ctx;
  Tensor* a = *ctx.NewTensor(DType::kF32, {8, 4});
  Tensor* b = *ctx.NewTensor(DType::kF32, {8, 2});
  Tensor* out = *MulMat(ctx, a, b);
  EXPECT_THAT(Launch(*out, LaunchContext{}),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       ::testing::HasSubstr("mul_mat")));
}

TEST(LaunchWithoutGpuTest, MulMatWithoutScratchFails) {
  Context ctx;
  Tensor* a = *ctx.NewTensor(DType::kBF16, {8, 4});
  Tensor* b = *ctx.NewTensor(DType::kF32, {8, 2});
  Tensor* out = *MulMat(ctx, a, b);
  EXPECT_GT(ScratchBytes(*out), 0u);
  EXPECT_THAT(Launch(*out, LaunchContext{}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("scratch")));
}

TEST(LaunchWithoutGpuTest, FailedLaunchNamesOpAndKernel) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0) {
    GTEST_SKIP() << "a CUDA device is present: launches would succeed";
  }
  Context ctx;
  Tensor* a = *ctx.NewTensor(DType::kF32, {8, 4});
  Tensor* out = *Silu(ctx, a);
  const absl::Status status = Launch(*out, LaunchContext{});
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), ::testing::HasSubstr("silu"));
  EXPECT_THAT(status.message(), ::testing::HasSubstr("UnaryKernel"));
}

}  // namespace
}  // namespace ferry::cuda_kernels
