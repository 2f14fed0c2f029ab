#include "ferry/graph/dtype.h"

#include <cmath>
#include <cstdint>
#include <limits>

#include "ferry/runtime/status_matchers.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

using ::ferry::testing::StatusIs;

TEST(DTypeTest, TraitsAndParse) {
  EXPECT_EQ(DTypeBlockBytes(DType::kF32), 4);
  EXPECT_EQ(DTypeBlockBytes(DType::kBF16), 2);
  EXPECT_EQ(DTypeName(DType::kI32), "i32");
  EXPECT_EQ(*ParseDType("f16"), DType::kF16);
  EXPECT_THAT(ParseDType("q4_k"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(DTypeTest, QuantizedBlockGeometry) {
  EXPECT_EQ(*ParseDType("q4_1"), DType::kQ4_1);
  EXPECT_EQ(DTypeBlockSize(DType::kQ4_0), 32);
  EXPECT_EQ(DTypeBlockBytes(DType::kQ4_0), 18);
  EXPECT_EQ(DTypeBlockBytes(DType::kQ4_1), 20);
  EXPECT_EQ(DTypeBlockBytes(DType::kQ5_0), 22);
  EXPECT_EQ(DTypeBlockBytes(DType::kQ5_1), 24);
  EXPECT_EQ(DTypeBlockBytes(DType::kQ8_0), 34);
  EXPECT_TRUE(IsQuantized(DType::kQ8_0));
  EXPECT_FALSE(IsQuantized(DType::kF16));
  for (int i = 0; i < kNumDTypes; ++i) {
    const DType dtype = static_cast<DType>(i);
    EXPECT_EQ(*ParseDType(DTypeName(dtype)), dtype);
  }
}

// Every f16 value converts to f32 and back unchanged.
TEST(DTypeTest, F16RoundTripsAllValues) {
  for (uint32_t bits = 0; bits < 0x10000u; ++bits) {
    const Half h{static_cast<uint16_t>(bits)};
    const float f = F16ToF32(h);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(F16ToF32(F32ToF16(f))));
      continue;
    }
    ASSERT_EQ(F32ToF16(f).bits, bits) << "f=" << f;
  }
}

TEST(DTypeTest, F16RoundsToNearestEven) {
  EXPECT_EQ(F16ToF32(F32ToF16(1.0f + 1.0f / 4096)), 1.0f);  // Tie, to even.
  EXPECT_EQ(F16ToF32(F32ToF16(1.0f + 3.0f / 4096)), 1.0f + 4.0f / 4096);
  EXPECT_EQ(F16ToF32(F32ToF16(65504.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(F16ToF32(F32ToF16(65520.0f))));
  EXPECT_EQ(F16ToF32(F32ToF16(1e-8f)), 0.0f);
  EXPECT_EQ(F16ToF32(F32ToF16(6e-8f)), 5.9604644775390625e-8f);
}

TEST(DTypeTest, BF16RoundTripAndRounding) {
  for (uint32_t bits = 0; bits < 0x10000u; bits += 7) {
    const BFloat16 b{static_cast<uint16_t>(bits)};
    const float f = BF16ToF32(b);
    if (std::isnan(f)) continue;
    ASSERT_EQ(F32ToBF16(f).bits, bits);
  }
  EXPECT_EQ(BF16ToF32(F32ToBF16(1.00390625f)), 1.0f);  // Tie, to even.
  EXPECT_TRUE(std::isnan(
      BF16ToF32(F32ToBF16(std::numeric_limits<float>::quiet_NaN()))));
}

}  // namespace
}  // namespace ferry
