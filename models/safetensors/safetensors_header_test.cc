// The safetensors header parser: tensors and metadata, errors that name the
// file and tensor, offsets that must tile the data section.
#include "ferry/models/safetensors/safetensors_header.h"

#include <string>

#include "ferry/runtime/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ferry::safetensors {
namespace {

using ::ferry::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kFile[] = "w.safetensors";

TEST(ParseSafetensorsHeaderTest, ParsesTensorsAndMetadata) {
  FERRY_ASSERT_OK_AND_ASSIGN(SafetensorsHeader h,
                             ParseSafetensorsHeader(
                                 R"({"__metadata__": {"n_layer": "2"},
              "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
              "b\u0041": {"shape": [], "dtype": "F16",
                          "data_offsets": [24, 26], "extra": [1, {"x": null}]}})",
                                 26, kFile));
  EXPECT_EQ(h.metadata.at("n_layer"), "2");
  ASSERT_EQ(h.tensors.size(), 2u);
  EXPECT_EQ(h.tensors.at("a").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(h.tensors.at("bA").dtype, "F16");
  EXPECT_EQ(h.tensors.at("bA").end, 26u);
}

TEST(ParseSafetensorsHeaderTest, ErrorsNameFileAndTensor) {
  EXPECT_THAT(ParseSafetensorsHeader("{\"a\": ", 0, kFile),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr(kFile), HasSubstr("tensor 'a'"))));
  EXPECT_THAT(ParseSafetensorsHeader("not json", 0, kFile),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(kFile)));
  EXPECT_THAT(
      ParseSafetensorsHeader("{} x", 0, kFile),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("trailing")));
  // Offsets past the data: truncated.
  EXPECT_THAT(
      ParseSafetensorsHeader(
          R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})",
          8, kFile),
      StatusIs(absl::StatusCode::kDataLoss,
               AllOf(HasSubstr(kFile), HasSubstr("'w'"))));
  // Size disagrees with dtype x shape.
  EXPECT_THAT(
      ParseSafetensorsHeader(
          R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8]}})", 8,
          kFile),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'w'")));
  EXPECT_THAT(
      ParseSafetensorsHeader(
          R"({"w": {"dtype": "Q9", "shape": [4], "data_offsets": [0, 8]}})", 8,
          kFile),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dtype")));
  EXPECT_THAT(ParseSafetensorsHeader(R"({"w": {"dtype": "F32"}})", 8, kFile),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'w'")));
  EXPECT_THAT(ParseSafetensorsHeader(
                  R"({"w": {"dtype": "F32", "shape": [99999999999999999999],
                    "data_offsets": [0, 8]}})",
                  8, kFile),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseSafetensorsHeader(std::string(100, '['), 0, kFile),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// Hugging Face's safetensors refuses these; so does ferry.
TEST(ParseSafetensorsHeaderTest, TensorsMustTileTheDataSection) {
  // Overlapping byte ranges.
  EXPECT_THAT(
      ParseSafetensorsHeader(
          R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
              "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
          12, kFile),
      StatusIs(absl::StatusCode::kInvalidArgument,
               AllOf(HasSubstr(kFile), HasSubstr("'b'"),
                     HasSubstr("overlap tensor 'a'"))));
  // Two tensors sharing the same bytes.
  EXPECT_THAT(
      ParseSafetensorsHeader(
          R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
              "b": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})",
          8, kFile),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("overlap")));
  // A gap.
  EXPECT_THAT(
      ParseSafetensorsHeader(
          R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
          12, kFile),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("gap")));
  // Trailing garbage after the last tensor.
  EXPECT_THAT(
      ParseSafetensorsHeader(
          R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 9,
          kFile),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("1 bytes after the last tensor")));
  // Tiled in any key order is fine.
  EXPECT_THAT(
      ParseSafetensorsHeader(
          R"({"b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]},
              "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})",
          16, kFile),
      ::ferry::testing::IsOk());
}

}  // namespace
}  // namespace ferry::safetensors
