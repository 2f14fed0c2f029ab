#include "ferry/backends/cuda/testing/emulated_gemm.h"

#include <vector>

#include "ferry/runtime/status_matchers.h"
#include "gtest/gtest.h"

namespace ferry::cuda_testing {
namespace {

using ::ferry::testing::StatusIs;

// Column-major 2x3 A (op N) times 3x2 B (op N), alpha 2, beta 1.
TEST(EmulatedGemmTest, ComputesAlphaOpAOpBPlusBetaC) {
  const std::vector<float> a = {1, 2, 3, 4, 5, 6};  // [[1,3,5],[2,4,6]]
  const std::vector<float> b = {1, 0, 1, 0, 1, 0};  // [[1,0],[0,1],[1,0]]
  std::vector<float> c = {1, 1, 1, 1};
  GemmCall call;
  call.m = 2;
  call.n = 2;
  call.k = 3;
  call.a = a.data();
  call.lda = 2;
  call.b = b.data();
  call.ldb = 3;
  call.c = c.data();
  call.ldc = 2;
  call.alpha = 2.0f;
  call.beta = 1.0f;
  FERRY_ASSERT_OK(CheckGemm(call));
  RunGemm(call);
  // A B = [[6, 3], [8, 4]] (column-major {6, 8, 3, 4}).
  EXPECT_EQ(c, (std::vector<float>{13, 17, 7, 9}));
  EXPECT_EQ(ExtentA(call), 6 * sizeof(float));
  EXPECT_EQ(ExtentC(call), 4 * sizeof(float));
}

TEST(EmulatedGemmTest, RejectsWhatCublasRejects) {
  GemmCall call;
  call.m = 4;
  call.n = 1;
  call.k = 2;
  call.lda = 3;  // Below m for op N.
  call.ldb = 2;
  call.ldc = 4;
  EXPECT_THAT(CheckGemm(call), StatusIs(absl::StatusCode::kInvalidArgument));
  call.lda = 4;
  FERRY_EXPECT_OK(CheckGemm(call));
  call.trans_a = true;  // Now A is k x m: lda >= k suffices.
  call.lda = 2;
  FERRY_EXPECT_OK(CheckGemm(call));
  call.m = -1;
  EXPECT_THAT(CheckGemm(call), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace ferry::cuda_testing
