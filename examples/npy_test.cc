#include "ferry/examples/npy.h"

#include <cstring>
#include <string>
#include <vector>

#include "ferry/runtime/status_matchers.h"
#include "gtest/gtest.h"

namespace ferry::examples {
namespace {

TEST(NpyTest, HeaderIsNumpysFormatOne) {
  std::string bytes;
  const std::vector<float> values = {1, 2, 3, 4, 5, 6};
  FERRY_ASSERT_OK(EncodeNpy(values, {2, 3}, &bytes));
  ASSERT_GE(bytes.size(), 10u);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const size_t header_len =
      static_cast<uint8_t>(bytes[8]) | static_cast<uint8_t>(bytes[9]) << 8;
  EXPECT_EQ((10 + header_len) % 64, 0u);
  const std::string header = bytes.substr(10, header_len);
  EXPECT_EQ(header.back(), '\n');
  EXPECT_NE(header.find("'descr': '<f4'"), std::string::npos);
  EXPECT_NE(header.find("'shape': (2, 3)"), std::string::npos);
  ASSERT_EQ(bytes.size(), 10 + header_len + 24);
  float back[6];
  std::memcpy(back, bytes.data() + 10 + header_len, 24);
  EXPECT_EQ(std::vector<float>(back, back + 6), values);
  FERRY_ASSERT_OK(EncodeNpy({7}, {1}, &bytes));
  EXPECT_NE(bytes.find("'shape': (1,)"), std::string::npos);
}

TEST(NpyTest, ShapeMustMatch) {
  std::string bytes;
  EXPECT_THAT(EncodeNpy({1, 2, 3}, {2, 2}, &bytes),
              ::ferry::testing::StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace ferry::examples
