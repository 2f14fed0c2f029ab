#include "ferry/models/gguf/gguf_tensor_reader.h"

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "ferry/models/gguf/testing/gguf_builder.h"
#include "ferry/runtime/io_reactor.h"
#include "ferry/runtime/status_matchers.h"
#include "ferry/runtime/sync_wait.h"
#include "ferry/runtime/thread_pool.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ferry::gguf {
namespace {

using ::ferry::gguf::testing::GgufBuilder;
using ::ferry::testing::IsOk;
using ::ferry::testing::StatusIs;
using quant::QuantType;
using ::testing::HasSubstr;

std::string WriteTemp(const std::string& name, const std::string& bytes) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir ? dir : "/tmp") + "/" + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::string Pattern(size_t n, int seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(i * 7 + seed);
  return s;
}

class GgufTensorReaderTest : public ::testing::TestWithParam<bool> {};

TEST_P(GgufTensorReaderTest, ReadsTensorsThroughTheReactor) {
  GgufBuilder b;
  b.SetString("general.architecture", "llama")
      .AddTensor("a", {32, 3}, QuantType::kQ8_0, Pattern(3 * 34, 1))
      .AddTensor("b", {5}, QuantType::kF32, Pattern(20, 2));
  const std::string path = WriteTemp("reader.gguf", b.Build());
  FERRY_ASSERT_OK_AND_ASSIGN(auto reader, GgufTensorReader::Open(path));
  ThreadPool pool(2);
  IoReactorOptions options;
  options.force_fallback = GetParam();
  FERRY_ASSERT_OK_AND_ASSIGN(auto io, IoReactor::Create(&pool, options));

  const GgufTensorInfo& a = *reader->gguf().FindTensor("a");
  std::vector<std::byte> dst(a.size);
  ASSERT_THAT(SyncWait(reader->Read(*io, a, absl::MakeSpan(dst))), IsOk());
  EXPECT_EQ(std::string(reinterpret_cast<char*>(dst.data()), dst.size()),
            Pattern(3 * 34, 1));

  const GgufTensorInfo& t = *reader->gguf().FindTensor("b");
  std::vector<std::byte> part(8);
  ASSERT_THAT(SyncWait(reader->ReadRange(*io, t, 12, absl::MakeSpan(part))),
              IsOk());
  EXPECT_EQ(std::string(reinterpret_cast<char*>(part.data()), 8),
            Pattern(20, 2).substr(12));

  EXPECT_THAT(SyncWait(reader->ReadRange(*io, t, 16, absl::MakeSpan(part))),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("'b'")));
  EXPECT_THAT(SyncWait(reader->Read(*io, t, absl::MakeSpan(part))),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tensor 'b' has 20 bytes")));
  GgufTensorInfo stranger = t;
  EXPECT_THAT(SyncWait(reader->Read(*io, stranger, absl::MakeSpan(dst))),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_P(GgufTensorReaderTest, ReadsManyTensorsInChunks) {
  GgufBuilder b;
  for (int i = 0; i < 5; ++i) {
    b.AddTensor("t" + std::to_string(i), {32, 10 + i}, QuantType::kQ8_0,
                Pattern(34 * (10 + i), i));
  }
  const std::string path = WriteTemp("many.gguf", b.Build());
  FERRY_ASSERT_OK_AND_ASSIGN(auto reader, GgufTensorReader::Open(path));
  ThreadPool pool(2);
  IoReactorOptions options;
  options.force_fallback = GetParam();
  FERRY_ASSERT_OK_AND_ASSIGN(auto io, IoReactor::Create(&pool, options));
  std::vector<std::vector<std::byte>> buffers;
  std::vector<TensorDestination> reads;
  for (const GgufTensorInfo& t : reader->gguf().tensors()) {
    buffers.emplace_back(t.size);
  }
  for (size_t i = 0; i < buffers.size(); ++i) {
    reads.push_back({&reader->gguf().tensors()[i], absl::MakeSpan(buffers[i])});
  }
  // Chunks of 100 bytes, 3 in flight: tensors split across batches.
  ASSERT_THAT(SyncWait(reader->ReadTensors(*io, reads, 3, 100)), IsOk());
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(std::string(reinterpret_cast<char*>(buffers[i].data()),
                          buffers[i].size()),
              Pattern(34 * (10 + i), i));
  }
  reads[2].dst = reads[2].dst.subspan(1);
  EXPECT_THAT(SyncWait(reader->ReadTensors(*io, reads)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'t2'")));
}

INSTANTIATE_TEST_SUITE_P(IoUringAndFallback, GgufTensorReaderTest,
                         ::testing::Values(false, true), [](const auto& info) {
                           return info.param ? "pread" : "io_uring";
                         });

TEST(GgufTensorReaderOpenTest, CorruptFileIsAnError) {
  GgufBuilder b;
  b.AddTensor("a", {4}, QuantType::kF32, Pattern(16, 0));
  const std::string bytes = b.Build();
  const std::string path =
      WriteTemp("cut.gguf", bytes.substr(0, bytes.size() - 20));
  EXPECT_THAT(GgufTensorReader::Open(path),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr(path)));
}

}  // namespace
}  // namespace ferry::gguf
