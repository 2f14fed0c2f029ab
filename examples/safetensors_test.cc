#include "ferry/examples/safetensors.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "ferry/backends/cpu/cpu_backend.h"
#include "ferry/models/llama/llama_model.h"
#include "ferry/runtime/io_reactor.h"
#include "ferry/runtime/status_matchers.h"
#include "ferry/runtime/thread_pool.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ferry::examples {
namespace {

using ::ferry::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

class LoadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FERRY_ASSERT_OK_AND_ASSIGN(cpu_, GetCpuDevice().CreateBackend("threads=1"));
    FERRY_ASSERT_OK_AND_ASSIGN(io_, IoReactor::Create(&pool_));
    path_ = absl::StrCat(::testing::TempDir(), "/model.safetensors");
  }
  absl::StatusOr<std::unique_ptr<LlamaModel>> Load() {
    return LoadLlamaModel(path_, {cpu_.get()}, {}, *io_);
  }
  // Rewrites the file with `edit` applied to its bytes.
  void Edit(const std::function<void(std::string&)>& edit) {
    std::string bytes;
    {
      FILE* f = std::fopen(path_.c_str(), "rb");
      ASSERT_NE(f, nullptr);
      char buf[65536];
      size_t n;
      while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) bytes.append(buf, n);
      std::fclose(f);
    }
    edit(bytes);
    FILE* f = std::fopen(path_.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
  }

  ThreadPool pool_{2};
  std::unique_ptr<Backend> cpu_;
  std::unique_ptr<IoReactor> io_;
  std::string path_;
  LlamaConfig config_{.n_layer = 2,
                      .n_embd = 32,
                      .n_head = 4,
                      .n_head_kv = 2,
                      .n_ff = 48,
                      .n_vocab = 40,
                      .n_ctx = 16};
};

TEST_F(LoadTest, RoundTripsRandomWeights) {
  FERRY_ASSERT_OK(WriteRandomWeights(path_, config_, 5));
  FERRY_ASSERT_OK_AND_ASSIGN(auto loaded, Load());
  FERRY_ASSERT_OK_AND_ASSIGN(auto filled,
                             LlamaModel::Create(config_, {cpu_.get()}));
  FERRY_ASSERT_OK(filled->FillRandom(5));
  const auto a = loaded->Weights();
  const auto b = filled->Weights();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i]->name, b[i]->name);
    EXPECT_EQ(std::memcmp(a[i]->data, b[i]->data, a[i]->NumBytes()), 0)
        << a[i]->name;
  }
}

TEST_F(LoadTest, TruncatedFileNamesFileAndTensor) {
  FERRY_ASSERT_OK(WriteRandomWeights(path_, config_, 5));
  Edit([](std::string& b) { b.resize(b.size() - 100); });
  EXPECT_THAT(Load(), StatusIs(absl::StatusCode::kDataLoss,
                               AllOf(HasSubstr(path_), HasSubstr("'output'"))));
}

TEST_F(LoadTest, OversizedHeaderIsRefused) {
  FERRY_ASSERT_OK(WriteRandomWeights(path_, config_, 5));
  Edit([](std::string& b) { b[7] = 0x7f; });
  EXPECT_THAT(Load(), StatusIs(absl::StatusCode::kInvalidArgument,
                               AllOf(HasSubstr(path_), HasSubstr("limit"))));
  Edit([](std::string& b) {
    b[7] = 0;
    b[3] = 0x01;
  });  // < limit, > file.
  EXPECT_THAT(Load(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("truncated")));
}

TEST_F(LoadTest, MissingTensorWrongDtypeWrongShape) {
  auto rewrite = [&](const std::string& from, const std::string& to) {
    FERRY_ASSERT_OK(WriteRandomWeights(path_, config_, 5));
    Edit([&](std::string& b) {
      const size_t at = b.find(from);
      ASSERT_NE(at, std::string::npos) << from;
      b.replace(at, from.size(), to);  // Same length: offsets stay valid.
    });
  };
  rewrite("\"blk.1.ffn_up\"", "\"blk.1.ffn_uq\"");
  EXPECT_THAT(Load(),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr(path_), HasSubstr("blk.1.ffn_up"))));
  rewrite("\"output_norm\":{\"dtype\":\"F32\",\"shape\":[32]",
          "\"output_norm\":{\"dtype\":\"I32\",\"shape\":[32]");
  EXPECT_THAT(Load(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("output_norm"), HasSubstr("I32"))));
  rewrite("\"blk.0.attn_q\":{\"dtype\":\"F32\",\"shape\":[32, 32]",
          "\"blk.0.attn_q\":{\"dtype\":\"F32\",\"shape\":[16, 64]");
  EXPECT_THAT(Load(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("blk.0.attn_q"), HasSubstr("shape"))));
}

TEST_F(LoadTest, FifoAndDirectoryAreRefusedWithoutBlocking) {
  const std::string fifo = absl::StrCat(::testing::TempDir(), "/weights.fifo");
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // Without the check, open() blocks here until a writer opens the FIFO.
  EXPECT_THAT(LoadLlamaModel(fifo, {cpu_.get()}, {}, *io_),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr(fifo), HasSubstr("is a FIFO"))));
  ::unlink(fifo.c_str());
  EXPECT_THAT(LoadLlamaModel(::testing::TempDir(), {cpu_.get()}, {}, *io_),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("is a directory")));
  EXPECT_THAT(LoadLlamaModel("/no/such/file", {cpu_.get()}, {}, *io_),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/no/such")));
}

// A tiny file whose metadata asks for a huge model (and context) is refused
// for its missing tensors before anything is allocated: creating the model
// first would ask the CPU for gigabytes.
TEST_F(LoadTest, ValidatesTheFileAgainstItsConfigBeforeAllocating) {
  const std::string header =
      R"({"__metadata__":{"n_layer":"64","n_embd":"65536","n_head":"64",)"
      R"("n_head_kv":"64","n_ff":"65536","n_vocab":"65536",)"
      R"("n_ctx":"4000000"}})";
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) {
    bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  }
  bytes += header;
  FILE* f = std::fopen(path_.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
  EXPECT_THAT(Load(), StatusIs(absl::StatusCode::kNotFound,
                               AllOf(HasSubstr(path_),
                                     HasSubstr("missing tensor 'tok_embd'"))));
}

}  // namespace
}  // namespace ferry::examples
