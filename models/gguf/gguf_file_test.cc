#include "ferry/models/gguf/gguf_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ferry/models/gguf/gguf_source.h"
#include "ferry/models/gguf/testing/gguf_builder.h"
#include "ferry/runtime/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ferry::gguf {
namespace {

using ::ferry::gguf::testing::GgufBuilder;
using ::ferry::testing::IsOk;
using ::ferry::testing::StatusIs;
using quant::QuantType;
using ::testing::AllOf;
using ::testing::HasSubstr;

absl::StatusOr<GgufFile> ParseBytes(const std::string& bytes) {
  MemoryGgufSource source(bytes, "test.gguf");
  return GgufFile::Parse(source);
}

std::string F32Bytes(size_t n) { return std::string(n * 4, '\x01'); }

GgufBuilder ValidBuilder() {
  GgufBuilder b;
  GgufArray nested;
  nested.element_type = GgufValueType::kArray;
  nested.size = 2;
  for (int i = 0; i < 2; ++i) {
    GgufArray inner;
    inner.element_type = GgufValueType::kUint16;
    inner.size = 3;
    inner.scalars.resize(6, std::byte{static_cast<unsigned char>(i + 1)});
    nested.arrays.push_back(inner);
  }
  b.SetString("general.architecture", "llama")
      .SetU32("llama.block_count", 2)
      .SetF32("llama.rope.freq_base", 10000.0f)
      .SetBool("tokenizer.ggml.add_bos_token", true)
      .Set("i8", GgufValue(GgufValue::Storage(int8_t{-3})))
      .Set("u64", GgufValue(GgufValue::Storage(uint64_t{1} << 40)))
      .Set("big", GgufValue(GgufValue::Storage(~uint64_t{0})))
      .Set("f64", GgufValue(GgufValue::Storage(2.5)))
      .SetStrings("tokenizer.ggml.tokens", {"a", "", "\xc3\xa9"})
      .SetF32s("tokenizer.ggml.scores", {0.5f, -1.0f, 2.0f})
      .SetI32s("tokenizer.ggml.token_type", {1, 3, 6})
      .Set("nested", GgufValue(GgufValue::Storage(nested)))
      .AddTensor("a", {8, 2}, QuantType::kF32, F32Bytes(16))
      .AddTensor("b", {64}, QuantType::kQ4_1, std::string(40, '\x02'))
      .AddTensor("c", {3}, QuantType::kF16, std::string(6, '\x03'));
  return b;
}

TEST(GgufFileTest, ParsesEveryValueTypeAndTensorInfo) {
  const std::string bytes = ValidBuilder().Build();
  FERRY_ASSERT_OK_AND_ASSIGN(GgufFile f, ParseBytes(bytes));
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.name(), "test.gguf");
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.data_offset() % 32, 0u);
  EXPECT_EQ(f.metadata().size(), 12u);
  EXPECT_EQ(f.metadata()[0].first, "general.architecture");

  EXPECT_EQ(*f.GetString("general.architecture"), "llama");
  EXPECT_EQ(*f.GetInt("llama.block_count"), 2);
  EXPECT_EQ(*f.GetInt("i8"), -3);
  EXPECT_EQ(*f.GetInt("u64"), int64_t{1} << 40);
  EXPECT_THAT(f.GetInt("big"), StatusIs(absl::StatusCode::kInvalidArgument,
                                        HasSubstr("does not fit int64")));
  EXPECT_FLOAT_EQ(*f.GetFloat("llama.rope.freq_base"), 10000.0f);
  EXPECT_DOUBLE_EQ(*f.GetFloat("f64"), 2.5);
  EXPECT_TRUE(*f.GetBool("tokenizer.ggml.add_bos_token"));
  auto tokens = f.GetStringArray("tokenizer.ggml.tokens");
  ASSERT_THAT(tokens, IsOk());
  EXPECT_THAT(*tokens, ::testing::ElementsAre("a", "", "\xc3\xa9"));
  auto scores = f.GetArrayOf<float>("tokenizer.ggml.scores");
  ASSERT_THAT(scores, IsOk());
  EXPECT_THAT(*scores, ::testing::ElementsAre(0.5f, -1.0f, 2.0f));
  auto types = f.GetArrayOf<int32_t>("tokenizer.ggml.token_type");
  ASSERT_THAT(types, IsOk());
  EXPECT_THAT(*types, ::testing::ElementsAre(1, 3, 6));
  auto nested = f.GetArray("nested");
  ASSERT_THAT(nested, IsOk());
  ASSERT_EQ((*nested)->arrays.size(), 2u);
  EXPECT_EQ((*nested)->arrays[1].Elements<uint16_t>()[2], 0x0202);

  ASSERT_EQ(f.tensors().size(), 3u);
  const GgufTensorInfo* a = f.FindTensor("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dims, (std::vector<int64_t>{8, 2}));
  EXPECT_EQ(a->size, 64u);
  EXPECT_EQ(a->offset, 0u);
  EXPECT_EQ(a->num_rows(), 2);
  const GgufTensorInfo* b = f.FindTensor("b");
  EXPECT_EQ(b->type, QuantType::kQ4_1);
  EXPECT_EQ(b->size, 40u);
  EXPECT_EQ(b->offset, 64u);
  EXPECT_EQ(f.FindTensor("c")->offset, 128u);
  EXPECT_EQ(f.FindTensor("missing"), nullptr);
  // Tensor bytes sit where the infos say.
  EXPECT_EQ(bytes[f.data_offset() + b->offset], '\x02');
}

TEST(GgufFileTest, TypedAccessorErrorsNameTheKey) {
  FERRY_ASSERT_OK_AND_ASSIGN(GgufFile f, ParseBytes(ValidBuilder().Build()));
  EXPECT_THAT(f.GetInt("nope"),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr("test.gguf"), HasSubstr("'nope'"))));
  EXPECT_THAT(f.GetInt("general.architecture"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("'general.architecture' is string")));
  EXPECT_THAT(f.GetString("llama.block_count"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(f.GetArrayOf<int32_t>("tokenizer.ggml.scores"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("array of float32, expected array of int32")));
  EXPECT_THAT(f.GetStringArray("tokenizer.ggml.scores"),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(GgufFileTest, OpenRefusesWhatIsNotARegularFile) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = tmp != nullptr ? tmp : "/tmp";
  const std::string fifo = dir + "/gguf_fifo";
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // Without the check, open() blocks here until a writer opens the FIFO.
  EXPECT_THAT(GgufFile::Open(fifo).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr(fifo), HasSubstr("is a FIFO"))));
  EXPECT_THAT(GgufFile::Open(dir).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("is a directory")));
  EXPECT_THAT(GgufFile::Open(dir + "/no_such.gguf").status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no_such.gguf")));
  ::unlink(fifo.c_str());
}

TEST(GgufFileTest, CustomAlignment) {
  FERRY_ASSERT_OK_AND_ASSIGN(GgufFile f, ParseBytes(ValidBuilder().Build(64)));
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.data_offset() % 64, 0u);
  EXPECT_EQ(f.FindTensor("b")->offset, 64u);
  EXPECT_EQ(f.FindTensor("c")->offset, 128u);
}

TEST(GgufFileTest, EveryTruncationIsAnErrorNotACrash) {
  const std::string bytes = ValidBuilder().Build();
  FERRY_ASSERT_OK_AND_ASSIGN(GgufFile f, ParseBytes(bytes));
  // Cutting into the last tensor's data must fail too.
  const uint64_t end = f.data_offset() + f.FindTensor("c")->offset + 6;
  for (size_t n = 0; n < end; ++n) {
    EXPECT_FALSE(ParseBytes(bytes.substr(0, n)).ok()) << "prefix " << n;
  }
}

// Patches `bytes` at the offset of the first occurrence of `marker` + `skip`.
std::string Patch(std::string bytes, absl::string_view marker, size_t skip,
                  const void* data, size_t n) {
  const size_t at = bytes.find(std::string(marker));
  EXPECT_NE(at, std::string::npos) << marker;
  std::memcpy(bytes.data() + at + skip, data, n);
  return bytes;
}

template <typename T>
std::string PatchValue(std::string bytes, absl::string_view marker, size_t skip,
                       T value) {
  return Patch(std::move(bytes), marker, skip, &value, sizeof(T));
}

TEST(GgufFileTest, RejectsBadHeaders) {
  const std::string good = ValidBuilder().Build();
  EXPECT_THAT(ParseBytes("GGUF"),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("test.gguf")));
  EXPECT_THAT(ParseBytes(PatchValue<uint32_t>(good, "GGUF", 0, 0x46554746)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("not a GGUF file")));
  EXPECT_THAT(
      ParseBytes(PatchValue<uint32_t>(good, "GGUF", 4, 1)),
      StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("version 1")));
  EXPECT_THAT(
      ParseBytes(PatchValue<uint32_t>(good, "GGUF", 4, 0x03000000)),
      StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("big-endian")));
  // Absurd counts fail before anything is allocated for them.
  EXPECT_THAT(ParseBytes(PatchValue<uint64_t>(good, "GGUF", 8, ~uint64_t{0})),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("tensor infos")));
  EXPECT_THAT(
      ParseBytes(PatchValue<uint64_t>(good, "GGUF", 16, uint64_t{1} << 62)),
      StatusIs(absl::StatusCode::kDataLoss, HasSubstr("metadata entries")));
}

TEST(GgufFileTest, RejectsBadMetadata) {
  const std::string good = ValidBuilder().Build();
  // Key length of "general.architecture" (8 bytes before the key).
  const size_t key_at = good.find("general.architecture") - 8;
  std::string huge_key = good;
  const uint64_t big = uint64_t{1} << 40;
  std::memcpy(huge_key.data() + key_at, &big, 8);
  EXPECT_THAT(ParseBytes(huge_key),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("metadata key #0 is 1099511627776 bytes")));
  // The value type after "general.architecture".
  EXPECT_THAT(
      ParseBytes(PatchValue<uint32_t>(good, "general.architecture", 20, 13)),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("'general.architecture' has unknown value type 13")));
  // String value length: type (4) then u64 length.
  EXPECT_THAT(
      ParseBytes(PatchValue<uint64_t>(good, "general.architecture", 24, big)),
      StatusIs(
          absl::StatusCode::kDataLoss,
          AllOf(HasSubstr("'general.architecture'"), HasSubstr("remain"))));
  // Bool byte 2.
  EXPECT_THAT(
      ParseBytes(
          PatchValue<uint8_t>(good, "tokenizer.ggml.add_bos_token", 32, 2)),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bool is 2")));
  // Array element count of the tokens: name, type (4), element type (4).
  const size_t tokens_skip = std::string("tokenizer.ggml.tokens").size() + 8;
  EXPECT_THAT(ParseBytes(PatchValue<uint64_t>(good, "tokenizer.ggml.tokens",
                                              tokens_skip, ~uint64_t{0} / 2)),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("'tokenizer.ggml.tokens': array of")));
  EXPECT_THAT(ParseBytes(PatchValue<uint32_t>(good, "tokenizer.ggml.tokens",
                                              tokens_skip - 4, 77)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unknown array element type 77")));
  // Duplicate key: rename "i8" to "u64"'s... use a builder instead.
  GgufBuilder dup;
  dup.SetU32("k", 1).SetU32("k", 2);
  EXPECT_THAT(ParseBytes(dup.Build()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("'k' appears twice")));
  // Deeply nested arrays.
  GgufArray deep;
  deep.element_type = GgufValueType::kUint8;
  for (int i = 0; i < kGgufMaxArrayDepth + 1; ++i) {
    GgufArray outer;
    outer.element_type = GgufValueType::kArray;
    outer.size = 1;
    outer.arrays.push_back(std::move(deep));
    deep = std::move(outer);
  }
  GgufBuilder nested;
  nested.Set("deep", GgufValue(GgufValue::Storage(deep)));
  EXPECT_THAT(
      ParseBytes(nested.Build()),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("nested deeper")));
}

TEST(GgufFileTest, RejectsBadAlignment) {
  GgufBuilder b;
  b.SetU32("general.alignment", 48)
      .AddTensor("t", {4}, QuantType::kF32, F32Bytes(4));
  EXPECT_THAT(ParseBytes(b.Build()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("'general.alignment'")));
  GgufBuilder wrong_type;
  wrong_type.SetF32("general.alignment", 32);
  EXPECT_THAT(ParseBytes(wrong_type.Build()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("power of two as uint32")));
}

// The tensor info of "t" after its name: n_dims (4), dims, type, offset.
TEST(GgufFileTest, RejectsBadTensorInfos) {
  auto one = [](std::vector<int64_t> dims, QuantType type, std::string data) {
    GgufBuilder b;
    b.AddTensor("blk.0.t", std::move(dims), type, std::move(data));
    return b.Build();
  };
  const std::string good = one({4, 2}, QuantType::kF32, F32Bytes(8));
  ASSERT_THAT(ParseBytes(good), IsOk());
  const size_t name = 7;
  EXPECT_THAT(
      ParseBytes(PatchValue<uint32_t>(good, "blk.0.t", name, 0)),
      StatusIs(absl::StatusCode::kInvalidArgument,
               AllOf(HasSubstr("tensor 'blk.0.t'"), HasSubstr("0 dims"))));
  EXPECT_THAT(
      ParseBytes(PatchValue<uint32_t>(good, "blk.0.t", name, 5)),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("5 dims")));
  EXPECT_THAT(
      ParseBytes(PatchValue<uint64_t>(good, "blk.0.t", name + 4, 0)),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dim 0 is 0")));
  EXPECT_THAT(
      ParseBytes(
          PatchValue<uint64_t>(good, "blk.0.t", name + 12, uint64_t{1} << 62)),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("overflows")));
  EXPECT_THAT(ParseBytes(PatchValue<uint32_t>(good, "blk.0.t", name + 20, 4)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unknown ggml type id 4")));
  // Q4_0 rows must be whole blocks of 32.
  EXPECT_THAT(
      ParseBytes(PatchValue<uint32_t>(good, "blk.0.t", name + 20, 2)),
      StatusIs(absl::StatusCode::kInvalidArgument,
               AllOf(HasSubstr("'blk.0.t'"), HasSubstr("q4_0 blocks"))));
  EXPECT_THAT(ParseBytes(PatchValue<uint64_t>(good, "blk.0.t", name + 24, 4)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("not a multiple of the alignment")));
  EXPECT_THAT(ParseBytes(PatchValue<uint64_t>(good, "blk.0.t", name + 24, 64)),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr("'blk.0.t'"),
                             HasSubstr("past the data section"))));
  EXPECT_THAT(ParseBytes(PatchValue<uint64_t>(good, "blk.0.t", name + 24,
                                              ~uint64_t{0} - 31)),
              StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(ParseBytes(one({4}, QuantType::kF32, F32Bytes(4)).substr(0, 60)),
              StatusIs(absl::StatusCode::kDataLoss));

  GgufBuilder long_name;
  long_name.AddTensor(std::string(64, 'x'), {4}, QuantType::kF32, F32Bytes(4));
  EXPECT_THAT(
      ParseBytes(long_name.Build()),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("63-byte limit")));
  GgufBuilder twice;
  twice.AddTensor("t", {4}, QuantType::kF32, F32Bytes(4))
      .AddTensor("t", {4}, QuantType::kF32, F32Bytes(4));
  EXPECT_THAT(ParseBytes(twice.Build()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("'t' appears twice")));
}

TEST(GgufFileTest, RejectsOverlappingTensors) {
  GgufBuilder b;
  b.AddTensor("first", {16}, QuantType::kF32, F32Bytes(16))
      .AddTensor("second", {16}, QuantType::kF32, F32Bytes(16));
  const std::string good = b.Build();
  ASSERT_THAT(ParseBytes(good), IsOk());
  // Move "second" (at 64) to 32: inside "first" [0, 64).
  const size_t skip = std::string("second").size() + 4 + 8 + 4;
  EXPECT_THAT(ParseBytes(PatchValue<uint64_t>(good, "second", skip, 32)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("'first' [0, 64)"),
                             HasSubstr("'second' [32, 96) overlap"))));
}

TEST(GgufFileTest, NoTensorsNoData) {
  GgufBuilder b;
  b.SetU32("x", 1);
  std::string bytes = b.Build();
  FERRY_ASSERT_OK_AND_ASSIGN(GgufFile f, ParseBytes(bytes));
  EXPECT_TRUE(f.tensors().empty());
  // Without padding at the end (a writer may stop right after the infos).
  const std::string unpadded = bytes.substr(0, 4 + 4 + 8 + 8 + 8 + 1 + 4 + 4);
  FERRY_ASSERT_OK_AND_ASSIGN(GgufFile g, ParseBytes(unpadded));
  EXPECT_EQ(g.data_size(), 0u);
}

TEST(GgufFileTest, OpenNamesMissingFile) {
  const auto f = GgufFile::Open("/nonexistent/model.gguf");
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(std::string(f.status().message()),
              HasSubstr("/nonexistent/model.gguf"));
}

}  // namespace
}  // namespace ferry::gguf
