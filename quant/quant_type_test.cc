#include "ferry/quant/quant_type.h"

#include "ferry/runtime/status_matchers.h"
#include "gtest/gtest.h"

namespace ferry::quant {
namespace {

using ::ferry::testing::IsOk;
using ::ferry::testing::StatusIs;

TEST(QuantTypeTest, KnownIdsRoundTrip) {
  int known = 0;
  for (uint32_t id = 0; id < 64; ++id) {
    const QuantTypeInfo* info = FindQuantTypeInfo(id);
    if (info == nullptr) {
      EXPECT_THAT(QuantTypeFromId(id),
                  StatusIs(absl::StatusCode::kInvalidArgument));
      continue;
    }
    ++known;
    EXPECT_EQ(static_cast<uint32_t>(info->type), id);
    EXPECT_EQ(&GetQuantTypeInfo(info->type), info);
    EXPECT_GT(info->block_size, 0);
    EXPECT_GT(info->block_bytes, 0);
  }
  EXPECT_EQ(known, 34);
  EXPECT_EQ(FindQuantTypeInfo(4), nullptr);  // Retired q4_2.
  EXPECT_EQ(FindQuantTypeInfo(0xFFFFFFFFu), nullptr);
}

TEST(QuantTypeTest, Geometry) {
  EXPECT_EQ(QuantTypeName(QuantType::kQ4_1), "q4_1");
  EXPECT_EQ(BlockSize(QuantType::kQ4_1), 32);
  EXPECT_EQ(BlockBytes(QuantType::kQ4_1), 20);
  EXPECT_EQ(RowBytes(QuantType::kQ4_1, 576), 360);
  EXPECT_EQ(RowBytes(QuantType::kQ8_0, 576), 612);
  EXPECT_EQ(RowBytes(QuantType::kF32, 3), 12);
  EXPECT_EQ(RowBytes(QuantType::kQ6_K, 512), 420);
}

TEST(QuantTypeTest, RowBytesCheckedRejectsBadLengths) {
  EXPECT_THAT(RowBytesChecked(QuantType::kQ4_0, 33),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(RowBytesChecked(QuantType::kF16, -2),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(RowBytesChecked(QuantType::kF64, int64_t{1} << 61),
              StatusIs(absl::StatusCode::kInvalidArgument));
  auto ok = RowBytesChecked(QuantType::kQ8_0, 64);
  ASSERT_THAT(ok, IsOk());
  EXPECT_EQ(*ok, 68);
}

}  // namespace
}  // namespace ferry::quant
