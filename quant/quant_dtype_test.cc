#include "ferry/quant/quant_dtype.h"

#include "ferry/runtime/status_matchers.h"
#include "gtest/gtest.h"

namespace ferry::quant {
namespace {

using ::ferry::testing::StatusIs;

// Each dtype maps to the ggml type of the same name and block geometry, and
// back.
TEST(QuantDTypeTest, EveryDTypeRoundTrips) {
  for (int i = 0; i < kNumDTypes; ++i) {
    const DType dtype = static_cast<DType>(i);
    const QuantType type = QuantTypeOf(dtype);
    EXPECT_EQ(QuantTypeName(type), DTypeName(dtype));
    EXPECT_EQ(BlockSize(type), DTypeBlockSize(dtype));
    EXPECT_EQ(BlockBytes(type), DTypeBlockBytes(dtype));
    FERRY_ASSERT_OK_AND_ASSIGN(DType back, DTypeOf(type));
    EXPECT_EQ(back, dtype);
  }
}

TEST(QuantDTypeTest, TypesWithoutDTypeAreRefused) {
  EXPECT_THAT(DTypeOf(QuantType::kQ8_K),
              StatusIs(absl::StatusCode::kUnimplemented));
  EXPECT_THAT(DTypeOf(QuantType::kQ8_1),
              StatusIs(absl::StatusCode::kUnimplemented));
}

}  // namespace
}  // namespace ferry::quant
