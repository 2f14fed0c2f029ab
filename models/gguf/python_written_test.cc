// Files written by the python gguf package (testdata/make_testdata.py) and,
// when present, the real SmolLM2 file: ferry's parser, tensor reader and
// dequantizers must give the values python's give.
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "ferry/models/gguf/gguf_file.h"
#include "ferry/models/gguf/gguf_tensor_reader.h"
#include "ferry/models/gguf/llama_hparams.h"
#include "ferry/models/gguf/testing/smollm2.h"
#include "ferry/quant/dequantize.h"
#include "ferry/runtime/io_reactor.h"
#include "ferry/runtime/status_matchers.h"
#include "ferry/runtime/sync_wait.h"
#include "ferry/runtime/thread_pool.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ferry::gguf {
namespace {

using ::ferry::testing::IsOk;
using quant::QuantType;

struct Expected {
  std::string name, type;
  int64_t elements = 0;
  double sum = 0, sum_squares = 0;
  std::vector<float> first;
};

std::vector<Expected> LoadExpected(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << path;
  std::vector<Expected> out;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream s(line);
    Expected e;
    s >> e.name >> e.type >> e.elements >> e.sum >> e.sum_squares;
    float v;
    while (s >> v) e.first.push_back(v);
    out.push_back(e);
  }
  return out;
}

// Reads every expected tensor through the reactor, dequantizes it row by
// row and compares with python's numbers.
void CheckTensors(const std::string& path, const std::string& expected_path) {
  FERRY_ASSERT_OK_AND_ASSIGN(auto reader, GgufTensorReader::Open(path));
  ThreadPool pool(2);
  FERRY_ASSERT_OK_AND_ASSIGN(auto io, IoReactor::Create(&pool));
  const std::vector<Expected> expected = LoadExpected(expected_path);
  ASSERT_FALSE(expected.empty());
  for (const Expected& e : expected) {
    SCOPED_TRACE(e.name);
    const GgufTensorInfo* t = reader->gguf().FindTensor(e.name);
    ASSERT_NE(t, nullptr);
    std::string type_name(quant::QuantTypeName(t->type));
    for (char& c : type_name) c = static_cast<char>(std::toupper(c));
    EXPECT_EQ(type_name, e.type);
    ASSERT_EQ(t->num_elements(), e.elements);
    std::vector<std::byte> bytes(t->size);
    ASSERT_THAT(SyncWait(reader->Read(*io, *t, absl::MakeSpan(bytes))), IsOk());
    const int64_t n = t->dims[0];
    const int64_t row_bytes = quant::RowBytes(t->type, n);
    std::vector<float> row(n);
    double sum = 0, sum_squares = 0;
    for (int64_t r = 0; r < t->num_rows(); ++r) {
      ASSERT_THAT(quant::DequantizeRow(t->type, bytes.data() + r * row_bytes,
                                       row.data(), n),
                  IsOk());
      if (r == 0) {
        for (size_t i = 0; i < e.first.size(); ++i) {
          EXPECT_EQ(row[i], e.first[i]) << "element " << i;
        }
      }
      for (float v : row) {
        sum += v;
        sum_squares += static_cast<double>(v) * v;
      }
    }
    EXPECT_NEAR(sum, e.sum, 1e-9 * e.sum_squares + 1e-9);
    EXPECT_NEAR(sum_squares, e.sum_squares, 1e-9 * e.sum_squares);
  }
}

TEST(PythonWrittenTest, TinyLlama) {
  const std::string path = "models/gguf/testdata/tiny_llama.gguf";
  FERRY_ASSERT_OK_AND_ASSIGN(GgufFile f, GgufFile::Open(path));
  EXPECT_EQ(f.version(), 3u);
  FERRY_ASSERT_OK_AND_ASSIGN(LlamaHParams hp, ReadLlamaHParams(f));
  EXPECT_EQ(hp.n_layer, 1);
  EXPECT_EQ(hp.n_embd, 64);
  EXPECT_EQ(hp.n_head_kv, 2);
  EXPECT_EQ(hp.n_vocab, 32);
  EXPECT_FLOAT_EQ(hp.rms_norm_eps, 1e-6f);
  EXPECT_TRUE(hp.tied_embeddings);
  EXPECT_EQ(*f.GetString("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(f.GetStringArray("tokenizer.ggml.tokens")->size(), 32u);
  EXPECT_EQ(*f.GetInt("tokenizer.ggml.eos_token_id"), 31);
  CheckTensors(path, "models/gguf/testdata/tiny_llama.expected");
}

TEST(PythonWrittenTest, SmolLm2) {
  FERRY_REQUIRE_SMOLLM2(path);
  FERRY_ASSERT_OK_AND_ASSIGN(GgufFile f, GgufFile::Open(path));
  FERRY_ASSERT_OK_AND_ASSIGN(LlamaHParams hp, ReadLlamaHParams(f));
  EXPECT_EQ(hp.n_layer, 30);
  EXPECT_EQ(hp.n_embd, 576);
  EXPECT_EQ(hp.n_head, 9);
  EXPECT_EQ(hp.n_head_kv, 3);
  EXPECT_EQ(hp.n_ff, 1536);
  EXPECT_EQ(hp.n_ctx_train, 8192);
  EXPECT_EQ(hp.n_vocab, 49152);
  EXPECT_EQ(hp.n_rot, 64);
  EXPECT_FLOAT_EQ(hp.rope_freq_base, 100000.0f);
  EXPECT_FLOAT_EQ(hp.rms_norm_eps, 1e-5f);
  EXPECT_TRUE(hp.tied_embeddings);
  std::map<std::string, int> types;
  for (const GgufTensorInfo& t : f.tensors()) {
    ++types[std::string(quant::QuantTypeName(t.type))];
  }
  EXPECT_THAT(types, ::testing::ElementsAre(::testing::Pair("f32", 61),
                                            ::testing::Pair("q4_1", 210),
                                            ::testing::Pair("q8_0", 1)));
  CheckTensors(path, "models/gguf/testdata/smollm2.expected");
}

}  // namespace
}  // namespace ferry::gguf
