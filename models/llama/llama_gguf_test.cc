#include "ferry/models/llama/llama_gguf.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ferry/backends/buffer.h"
#include "ferry/backends/cpu/cpu_backend.h"
#include "ferry/models/gguf/testing/gguf_builder.h"
#include "ferry/quant/dequantize.h"
#include "ferry/quant/quantize.h"
#include "ferry/runtime/io_reactor.h"
#include "ferry/runtime/status_matchers.h"
#include "ferry/runtime/thread_pool.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ferry::llama {
namespace {

using ::ferry::gguf::testing::GgufBuilder;
using ::ferry::quant::QuantType;
using ::ferry::testing::IsOk;
using ::ferry::testing::StatusIs;
using ::testing::HasSubstr;

constexpr int64_t kEmbd = 32, kFf = 64, kVocab = 8, kKv = 16;

// Rows of pseudo-random values quantized to `type`.
std::string Quantized(QuantType type, int64_t ne0, int64_t ne1, int seed) {
  std::vector<float> row(static_cast<size_t>(ne0));
  const int64_t row_bytes = quant::RowBytes(type, ne0);
  std::string out(static_cast<size_t>(row_bytes * ne1), '\0');
  uint32_t state = 2654435761u * static_cast<uint32_t>(seed + 1);
  for (int64_t r = 0; r < ne1; ++r) {
    for (float& v : row) {
      state = state * 1664525u + 1013904223u;
      v = static_cast<float>(state >> 8) / (1 << 24) - 0.5f;
    }
    EXPECT_THAT(
        quant::QuantizeRow(type, row.data(), out.data() + r * row_bytes, ne0),
        IsOk());
  }
  return out;
}

// A one-layer llama with GQA (2 heads, 1 KV head), tied embeddings, q8_0
// embedding, q4_1 matrices and f32 norms, as SmolLM2's file has them.
GgufBuilder TinyLlama(QuantType matrices = QuantType::kQ4_1) {
  GgufBuilder b;
  b.SetString("general.architecture", "llama")
      .SetU32("llama.block_count", 1)
      .SetU32("llama.embedding_length", kEmbd)
      .SetU32("llama.attention.head_count", 2)
      .SetU32("llama.attention.head_count_kv", 1)
      .SetU32("llama.feed_forward_length", kFf)
      .SetU32("llama.context_length", 128)
      .SetU32("llama.vocab_size", kVocab)
      .SetF32("llama.rope.freq_base", 100000.0f)
      .SetF32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  int seed = 0;
  auto add = [&](const std::string& name, int64_t ne0, int64_t ne1,
                 QuantType type) {
    b.AddTensor(
        name,
        ne1 == 1 ? std::vector<int64_t>{ne0} : std::vector<int64_t>{ne0, ne1},
        type, Quantized(type, ne0, ne1, seed++));
  };
  add("token_embd.weight", kEmbd, kVocab, QuantType::kQ8_0);
  add("blk.0.attn_norm.weight", kEmbd, 1, QuantType::kF32);
  add("blk.0.attn_q.weight", kEmbd, kEmbd, matrices);
  add("blk.0.attn_k.weight", kEmbd, kKv, matrices);
  add("blk.0.attn_v.weight", kEmbd, kKv, matrices);
  add("blk.0.attn_output.weight", kEmbd, kEmbd, matrices);
  add("blk.0.ffn_norm.weight", kEmbd, 1, QuantType::kF32);
  add("blk.0.ffn_gate.weight", kEmbd, kFf, matrices);
  add("blk.0.ffn_up.weight", kEmbd, kFf, matrices);
  add("blk.0.ffn_down.weight", kFf, kEmbd, matrices);
  add("output_norm.weight", kEmbd, 1, QuantType::kF32);
  return b;
}

std::string WriteFile(const std::string& bytes, const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = absl::StrCat(dir ? dir : "/tmp", "/", name);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  EXPECT_NE(f, nullptr);
  EXPECT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
  std::fclose(f);
  return path;
}

class LlamaGgufTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FERRY_ASSERT_OK_AND_ASSIGN(cpu_, GetCpuDevice().CreateBackend("threads=1"));
    FERRY_ASSERT_OK_AND_ASSIGN(io_, IoReactor::Create(&pool_));
  }
  absl::StatusOr<std::unique_ptr<LlamaModel>> Load(
      const GgufBuilder& b, const std::string& name,
      const LlamaModelOptions& options = {}) {
    return LoadLlamaGguf(WriteFile(b.Build(), name), {cpu_.get()}, options,
                         *io_);
  }

  ThreadPool pool_{2};
  std::unique_ptr<Backend> cpu_;
  std::unique_ptr<IoReactor> io_;
};

// The file's tensor of weight t: info and raw bytes.
struct FileTensor {
  const gguf::GgufTensorInfo* info;
  std::vector<char> raw;
};
FileTensor FindFileTensor(const gguf::GgufFile& file, const std::string& bytes,
                          const Tensor& t) {
  FileTensor f;
  f.info = file.FindTensor(GgufTensorName(t.name));
  if (f.info == nullptr) return f;
  const auto begin = static_cast<int64_t>(file.data_offset() + f.info->offset);
  f.raw.assign(bytes.begin() + begin,
               bytes.begin() + begin + static_cast<int64_t>(f.info->size));
  return f;
}

TEST_F(LlamaGgufTest, MapsConfigAndKeepsQuantizedWeights) {
  const GgufBuilder b = TinyLlama();
  FERRY_ASSERT_OK_AND_ASSIGN(std::unique_ptr<LlamaModel> model,
                             Load(b, "tiny.gguf"));
  const LlamaConfig& c = model->config();
  EXPECT_EQ(c.n_layer, 1);
  EXPECT_EQ(c.n_embd, kEmbd);
  EXPECT_EQ(c.head_count_kv(), 1);
  EXPECT_EQ(c.n_ff, kFf);
  EXPECT_EQ(c.n_vocab, kVocab);
  EXPECT_EQ(c.n_ctx, 128);
  EXPECT_FLOAT_EQ(c.rope_freq_base, 100000.0f);
  EXPECT_FLOAT_EQ(c.eps, 1e-5f);
  EXPECT_EQ(c.rope_mode, RopeMode::kNormal);
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_EQ(model->output(), model->tok_embd());

  // The CPU computes on every block type: quantized weights keep the file's
  // type and bytes; f32 ones stay f32.
  const std::string bytes = b.Build();
  FERRY_ASSERT_OK_AND_ASSIGN(
      gguf::GgufFile file,
      gguf::GgufFile::Open(WriteFile(bytes, "tiny_again.gguf")));
  int quantized = 0;
  for (Tensor* t : model->Weights()) {
    SCOPED_TRACE(t->name);
    const FileTensor f = FindFileTensor(file, bytes, *t);
    ASSERT_NE(f.info, nullptr);
    EXPECT_EQ(quant::QuantTypeName(f.info->type), DTypeName(t->dtype));
    quantized += IsQuantized(t->dtype);
    std::vector<char> have(static_cast<size_t>(t->NumBytes()));
    ASSERT_THAT(GetTensorData(*t, have.data()), IsOk());
    EXPECT_EQ(have, f.raw);
  }
  EXPECT_GT(quantized, 0);
}

TEST_F(LlamaGgufTest, F32WeightsDequantizesEveryWeight) {
  const GgufBuilder b = TinyLlama();
  LlamaModelOptions options;
  options.weight_dtype = F32Weights;
  FERRY_ASSERT_OK_AND_ASSIGN(std::unique_ptr<LlamaModel> model,
                             Load(b, "tiny_f32.gguf", options));
  // Every weight holds exactly DequantizeRow of the file's bytes.
  const std::string bytes = b.Build();
  FERRY_ASSERT_OK_AND_ASSIGN(
      gguf::GgufFile file,
      gguf::GgufFile::Open(WriteFile(bytes, "tiny_f32_again.gguf")));
  for (Tensor* t : model->Weights()) {
    SCOPED_TRACE(t->name);
    EXPECT_EQ(t->dtype, DType::kF32);
    const FileTensor f = FindFileTensor(file, bytes, *t);
    ASSERT_NE(f.info, nullptr);
    std::vector<float> want(static_cast<size_t>(f.info->num_elements()));
    const int64_t row = f.info->dims[0];
    const int64_t row_bytes = quant::RowBytes(f.info->type, row);
    for (int64_t r = 0; r < f.info->num_rows(); ++r) {
      ASSERT_THAT(
          quant::DequantizeRow(f.info->type, f.raw.data() + r * row_bytes,
                               want.data() + r * row, row),
          IsOk());
    }
    std::vector<float> have(want.size());
    ASSERT_THAT(GetTensorData(*t, have.data()), IsOk());
    EXPECT_EQ(have, want);
  }
}

// A weight_dtype naming another block type gets the file's values
// dequantized and quantized again.
TEST_F(LlamaGgufTest, WeightDTypeConvertsBetweenBlockTypes) {
  const GgufBuilder b = TinyLlama();
  LlamaModelOptions options;
  options.weight_dtype = [](const std::string& name, const Device&) {
    return name == "blk.0.ffn_up" ? DType::kQ8_0 : DType::kF32;
  };
  FERRY_ASSERT_OK_AND_ASSIGN(std::unique_ptr<LlamaModel> model,
                             Load(b, "tiny_q8.gguf", options));
  Tensor* up = model->FindWeight("blk.0.ffn_up");
  ASSERT_NE(up, nullptr);
  EXPECT_EQ(up->dtype, DType::kQ8_0);
  const std::string bytes = b.Build();
  FERRY_ASSERT_OK_AND_ASSIGN(
      gguf::GgufFile file,
      gguf::GgufFile::Open(WriteFile(bytes, "tiny_q8_again.gguf")));
  const FileTensor f = FindFileTensor(file, bytes, *up);
  ASSERT_NE(f.info, nullptr);
  const int64_t row = f.info->dims[0];
  const int64_t row_bytes = quant::RowBytes(f.info->type, row);
  const int64_t q8_row_bytes = quant::RowBytes(QuantType::kQ8_0, row);
  std::vector<char> want(
      static_cast<size_t>(q8_row_bytes * f.info->num_rows()));
  std::vector<float> values(static_cast<size_t>(row));
  for (int64_t r = 0; r < f.info->num_rows(); ++r) {
    ASSERT_THAT(quant::DequantizeRow(f.info->type, f.raw.data() + r * row_bytes,
                                     values.data(), row),
                IsOk());
    ASSERT_THAT(quant::QuantizeRow(QuantType::kQ8_0, values.data(),
                                   want.data() + r * q8_row_bytes, row),
                IsOk());
  }
  std::vector<char> have(want.size());
  ASSERT_THAT(GetTensorData(*up, have.data()), IsOk());
  EXPECT_EQ(have, want);
}

TEST_F(LlamaGgufTest, AnUntiedOutputIsLoadedToo) {
  GgufBuilder b = TinyLlama();
  b.AddTensor("output.weight", {kEmbd, kVocab}, QuantType::kQ8_0,
              Quantized(QuantType::kQ8_0, kEmbd, kVocab, 99));
  FERRY_ASSERT_OK_AND_ASSIGN(std::unique_ptr<LlamaModel> model,
                             Load(b, "untied.gguf"));
  EXPECT_FALSE(model->config().tie_embeddings);
  EXPECT_NE(model->output(), model->tok_embd());
}

TEST_F(LlamaGgufTest, ErrorsNameTheFileAndTheTensorOrKey) {
  {
    GgufBuilder b;
    b.SetString("general.architecture", "llama");
    EXPECT_THAT(Load(b, "arch_only.gguf").status(),
                StatusIs(absl::StatusCode::kNotFound,
                         AllOf(HasSubstr("arch_only.gguf"),
                               HasSubstr("llama.block_count"))));
  }
  {
    GgufBuilder b = TinyLlama();
    b.SetString("general.architecture", "gpt2");
    EXPECT_THAT(
        Load(b, "gpt2.gguf").status(),
        StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("gpt2")));
  }
  {
    GgufBuilder b = TinyLlama();
    b.SetU32("llama.rope.dimension_count", 8);
    EXPECT_THAT(Load(b, "n_rot.gguf").status(),
                StatusIs(absl::StatusCode::kUnimplemented,
                         AllOf(HasSubstr("n_rot.gguf"),
                               HasSubstr("rope.dimension_count"))));
  }
  // Other types DequantizeRow supports load too.
  for (QuantType type : {QuantType::kBF16, QuantType::kF16, QuantType::kQ8_0,
                         QuantType::kQ5_1}) {
    EXPECT_THAT(Load(TinyLlama(type), "types.gguf").status(), IsOk());
  }
}

TEST_F(LlamaGgufTest, UnsupportedTypesAndShapesAreRefusedBeforeAllocating) {
  // A small model whose tensor `name` has the given dims, type and bytes
  // (left out when `data` is empty).
  const auto with = [](const std::string& name, std::vector<int64_t> dims,
                       QuantType type, std::string data) {
    GgufBuilder b;
    b.SetString("general.architecture", "llama")
        .SetU32("llama.block_count", 1)
        .SetU32("llama.embedding_length", 256)
        .SetU32("llama.attention.head_count", 2)
        .SetU32("llama.feed_forward_length", 256)
        .SetU32("llama.context_length", 64)
        .SetU32("llama.vocab_size", 4)
        .SetF32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
    auto add = [&](const std::string& n, std::vector<int64_t> d) {
      if (n == name) {
        if (!data.empty()) b.AddTensor(n, dims, type, data);
        return;
      }
      int64_t rows = d.size() > 1 ? d[1] : 1;
      b.AddTensor(n, d, QuantType::kF32,
                  std::string(static_cast<size_t>(d[0] * rows * 4), '\0'));
    };
    add("token_embd.weight", {256, 4});
    for (const char* m : {"attn_q", "attn_k", "attn_v", "attn_output",
                          "ffn_gate", "ffn_up", "ffn_down"}) {
      add(absl::StrCat("blk.0.", m, ".weight"), {256, 256});
    }
    add("blk.0.attn_norm.weight", {256});
    add("blk.0.ffn_norm.weight", {256});
    add("output_norm.weight", {256});
    return b;
  };
  // iq2_xxs (no kernels): 256 elements in 66 bytes a block.
  EXPECT_THAT(
      Load(with("blk.0.ffn_up.weight", {256, 256}, QuantType::kIQ2_XXS,
                std::string(256 * 66, '\0')),
           "iq2.gguf")
          .status(),
      StatusIs(absl::StatusCode::kUnimplemented,
               AllOf(HasSubstr("iq2.gguf"), HasSubstr("blk.0.ffn_up.weight"),
                     HasSubstr("iq2_xxs"))));
  // q4_K (256 elements in 144 bytes a block) loads, and stays q4_K.
  {
    auto model = Load(with("blk.0.ffn_up.weight", {256, 256}, QuantType::kQ4_K,
                           std::string(256 * 144, '\0')),
                      "q4k.gguf");
    ASSERT_THAT(model, IsOk());
    int q4k = 0;
    for (Tensor* w : (*model)->Weights()) q4k += w->dtype == DType::kQ4_K;
    EXPECT_EQ(q4k, 1);
  }
  // Wrong shape.
  EXPECT_THAT(Load(with("blk.0.attn_k.weight", {256, 128}, QuantType::kF32,
                        std::string(256 * 128 * 4, '\0')),
                   "shape.gguf")
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("shape.gguf"),
                             HasSubstr("blk.0.attn_k.weight"))));
  EXPECT_THAT(Load(with("blk.0.ffn_norm.weight", {}, QuantType::kF32, ""),
                   "missing.gguf")
                  .status(),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr("missing.gguf"),
                             HasSubstr("blk.0.ffn_norm.weight"))));
  // And with every tensor right, it loads.
  EXPECT_THAT(Load(with("", {}, QuantType::kF32, ""), "ok.gguf").status(),
              IsOk());
}

}  // namespace
}  // namespace ferry::llama
