// The Hugging Face loader on small synthetic directories: config.json and
// index parsing with their errors, every weight equal to the file's values
// (f32 exactly, f16 and bf16 as rounded), sharding, every error naming the
// file and tensor, and HF's rotate-half rope on unpermuted Q/K giving the
// logits that GGUF's permuted layout gives with the normal rope.
#include "ferry/models/llama/llama_hf.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ferry/backends/buffer.h"
#include "ferry/backends/cpu/cpu_backend.h"
#include "ferry/graph/dtype.h"
#include "ferry/graph/testing/reference.h"
#include "ferry/models/llama/llama_graph.h"
#include "ferry/runtime/io_reactor.h"
#include "ferry/runtime/status_matchers.h"
#include "ferry/runtime/thread_pool.h"
#include "ferry/sched/scheduler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ferry::llama {
namespace {

using ::ferry::testing::IsOk;
using ::ferry::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kConfigJson[] = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "hidden_act": "silu", "hidden_size": 32, "intermediate_size": 48,
  "num_hidden_layers": 2, "num_attention_heads": 4,
  "num_key_value_heads": 2, "max_position_embeddings": 64,
  "rms_norm_eps": 1e-05, "rope_theta": 100000.0, "vocab_size": 40,
  "tie_word_embeddings": TIED, "bos_token_id": 1, "eos_token_id": [2, 3],
  "torch_dtype": "bfloat16"})";

std::string ConfigJson(bool tied) {
  std::string s = kConfigJson;
  s.replace(s.find("TIED"), 4, tied ? "true" : "false");
  return s;
}

TEST(ParseHfConfigTest, ReadsEveryField) {
  FERRY_ASSERT_OK_AND_ASSIGN(HfConfig c, ParseHfConfig(ConfigJson(true), "c"));
  EXPECT_EQ(c.llama.n_layer, 2);
  EXPECT_EQ(c.llama.n_embd, 32);
  EXPECT_EQ(c.llama.n_head, 4);
  EXPECT_EQ(c.llama.n_head_kv, 2);
  EXPECT_EQ(c.llama.n_ff, 48);
  EXPECT_EQ(c.llama.n_vocab, 40);
  EXPECT_EQ(c.llama.n_ctx, 64);
  EXPECT_FLOAT_EQ(c.llama.eps, 1e-5f);
  EXPECT_FLOAT_EQ(c.llama.rope_freq_base, 1e5f);
  EXPECT_EQ(c.llama.rope_mode, RopeMode::kNeox);
  EXPECT_TRUE(c.llama.tie_embeddings);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_id, 2);
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  FERRY_ASSERT_OK_AND_ASSIGN(c, ParseHfConfig(ConfigJson(false), "c", 16));
  EXPECT_FALSE(c.llama.tie_embeddings);
  EXPECT_EQ(c.llama.n_ctx, 16);
}

TEST(ParseHfConfigTest, AbsentKeysTakeTransformersDefaults) {
  FERRY_ASSERT_OK_AND_ASSIGN(
      HfConfig c, ParseHfConfig(R"({"model_type": "llama", "hidden_size": 32,
                        "num_hidden_layers": 1, "num_attention_heads": 4,
                        "intermediate_size": 8, "vocab_size": 10})",
                                "c"));
  EXPECT_EQ(c.llama.head_count_kv(), 4);
  EXPECT_EQ(c.llama.n_ctx, 2048);
  EXPECT_FLOAT_EQ(c.llama.eps, 1e-6f);
  EXPECT_FLOAT_EQ(c.llama.rope_freq_base, 10000.0f);
  EXPECT_FALSE(c.llama.tie_embeddings);
  EXPECT_EQ(c.bos_token_id, -1);
}

TEST(ParseHfConfigTest, ErrorsNameFileAndKey) {
  const std::string good = ConfigJson(true);
  auto edit = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    const size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return s.replace(at, from.size(), to);
  };
  EXPECT_THAT(ParseHfConfig("[1]", "dir/config.json"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("dir/config.json: not a JSON object")));
  EXPECT_THAT(
      ParseHfConfig("{", "dir/config.json"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not JSON")));
  EXPECT_THAT(ParseHfConfig(edit("\"hidden_size\": 32,", ""), "f.json"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("f.json"), HasSubstr("'hidden_size'"),
                             HasSubstr("missing"))));
  EXPECT_THAT(
      ParseHfConfig(edit("\"vocab_size\": 40", "\"vocab_size\": 4.5"),
                    "f.json"),
      StatusIs(absl::StatusCode::kInvalidArgument,
               AllOf(HasSubstr("'vocab_size'"), HasSubstr("not an integer"))));
  EXPECT_THAT(
      ParseHfConfig(
          edit("\"num_key_value_heads\": 2", "\"num_key_value_heads\": 3"),
          "f.json"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("f.json")));
  EXPECT_THAT(ParseHfConfig(edit("\"model_type\": \"llama\"",
                                 "\"model_type\": \"mamba\""),
                            "f.json"),
              StatusIs(absl::StatusCode::kUnimplemented,
                       AllOf(HasSubstr("f.json"), HasSubstr("mamba"))));
  EXPECT_THAT(ParseHfConfig(
                  edit("\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\""),
                  "f.json"),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("gelu")));
  EXPECT_THAT(ParseHfConfig(edit("\"torch_dtype\"",
                                 "\"rope_scaling\": {\"type\": \"linear\", "
                                 "\"factor\": 2}, \"torch_dtype\""),
                            "f.json"),
              StatusIs(absl::StatusCode::kUnimplemented,
                       HasSubstr("rope type 'linear'")));
  EXPECT_THAT(
      ParseHfConfig(
          edit("\"torch_dtype\"", "\"attention_bias\": true, \"torch_dtype\""),
          "f.json"),
      StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("attention_bias")));
  // A head size of its own (qwen3, gemma2) is read.
  FERRY_ASSERT_OK_AND_ASSIGN(
      HfConfig own_head,
      ParseHfConfig(
          edit("\"torch_dtype\"", "\"head_dim\": 16, \"torch_dtype\""),
          "f.json"));
  EXPECT_EQ(own_head.llama.head_dim(), 16);
  EXPECT_THAT(ParseHfConfig(edit("\"rms_norm_eps\": 1e-05",
                                 "\"rms_norm_eps\": \"small\""),
                            "f.json"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("'rms_norm_eps'")));
  EXPECT_THAT(
      ParseHfConfig(edit("\"rms_norm_eps\": 1e-05", "\"rms_norm_eps\": -1"),
                    "f.json"),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("'rms_norm_eps'")));
  EXPECT_THAT(ParseHfConfig(edit("\"bos_token_id\": 1", "\"bos_token_id\": 40"),
                            "f.json"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("'bos_token_id'")));
  EXPECT_THAT(ParseHfConfig(edit("\"tie_word_embeddings\": true",
                                 "\"tie_word_embeddings\": 1"),
                            "f.json"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("'tie_word_embeddings'")));
  EXPECT_THAT(ParseHfConfig(edit("\"num_hidden_layers\": 2",
                                 "\"num_hidden_layers\": 99999999999"),
                            "f.json"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("num_hidden_layers")));
  EXPECT_THAT(
      ParseHfConfig(good, "f.json", -1),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("negative")));
}

TEST(ParseHfIndexTest, MapsTensorsToPlainFileNames) {
  FERRY_ASSERT_OK_AND_ASSIGN(auto map,
                             ParseHfIndex(R"({"metadata": {"total_size": 8},
          "weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}})",
                                          "i.json"));
  EXPECT_EQ(map, (std::map<std::string, std::string>{{"a", "s1.safetensors"},
                                                     {"b", "s2.safetensors"}}));
  EXPECT_THAT(ParseHfIndex(R"({"metadata": {}})", "i.json"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("i.json"), HasSubstr("weight_map"))));
  EXPECT_THAT(ParseHfIndex(R"({"weight_map": {}})", "i.json"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("empty")));
  EXPECT_THAT(ParseHfIndex(R"({"weight_map": {"a": 3}})", "i.json"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("weight_map['a']")));
  for (const char* bad : {"../x.safetensors", "/etc/passwd", "..", ""}) {
    EXPECT_THAT(
        ParseHfIndex(absl::StrCat(R"({"weight_map": {"a": ")", bad, "\"}}"),
                     "i.json"),
        StatusIs(absl::StatusCode::kInvalidArgument,
                 HasSubstr("not a file in the directory")))
        << bad;
  }
}

TEST(HfTensorNameTest, MapsCanonicalNames) {
  EXPECT_EQ(HfTensorName("tok_embd"), "model.embed_tokens.weight");
  EXPECT_EQ(HfTensorName("output_norm"), "model.norm.weight");
  EXPECT_EQ(HfTensorName("output"), "lm_head.weight");
  EXPECT_EQ(HfTensorName("blk.12.attn_q"),
            "model.layers.12.self_attn.q_proj.weight");
  EXPECT_EQ(HfTensorName("blk.0.attn_k"),
            "model.layers.0.self_attn.k_proj.weight");
  EXPECT_EQ(HfTensorName("blk.0.attn_v"),
            "model.layers.0.self_attn.v_proj.weight");
  EXPECT_EQ(HfTensorName("blk.0.attn_output"),
            "model.layers.0.self_attn.o_proj.weight");
  EXPECT_EQ(HfTensorName("blk.1.attn_norm"),
            "model.layers.1.input_layernorm.weight");
  EXPECT_EQ(HfTensorName("blk.1.ffn_norm"),
            "model.layers.1.post_attention_layernorm.weight");
  EXPECT_EQ(HfTensorName("blk.1.ffn_gate"),
            "model.layers.1.mlp.gate_proj.weight");
  EXPECT_EQ(HfTensorName("blk.1.ffn_up"), "model.layers.1.mlp.up_proj.weight");
  EXPECT_EQ(HfTensorName("blk.1.ffn_down"),
            "model.layers.1.mlp.down_proj.weight");
}

// One tensor of a safetensors file being written.
struct StTensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;  // Outermost first.
  std::string bytes;
};

void WriteFile(const std::string& path, const std::string& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
  std::fclose(f);
}

void WriteSafetensors(const std::string& path,
                      const std::vector<StTensor>& tensors) {
  std::string json = "{";
  std::string data;
  for (const StTensor& t : tensors) {
    absl::StrAppend(&json, json.size() > 1 ? "," : "", "\"", t.name,
                    "\":{\"dtype\":\"", t.dtype, "\",\"shape\":[",
                    absl::StrJoin(t.shape, ","), "],\"data_offsets\":[",
                    data.size(), ",", data.size() + t.bytes.size(), "]}");
    data += t.bytes;
  }
  json += "}";
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[i] = static_cast<char>(json.size() >> (8 * i));
  WriteFile(path, out + json + data);
}

// `values` stored as `dtype`; `rounded` gets what a loader must read back.
std::string Encode(const std::string& dtype, const std::vector<float>& values,
                   std::vector<float>& rounded) {
  std::string out;
  rounded.clear();
  for (float v : values) {
    if (dtype == "F16") {
      const Half h = F32ToF16(v);
      out.append(reinterpret_cast<const char*>(&h), 2);
      rounded.push_back(F16ToF32(h));
    } else if (dtype == "BF16") {
      const BFloat16 b = F32ToBF16(v);
      out.append(reinterpret_cast<const char*>(&b), 2);
      rounded.push_back(BF16ToF32(b));
    } else {
      out.append(reinterpret_cast<const char*>(&v), 4);
      rounded.push_back(v);
    }
  }
  return out;
}

class LoadHfTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FERRY_ASSERT_OK_AND_ASSIGN(cpu_, GetCpuDevice().CreateBackend("threads=1"));
    FERRY_ASSERT_OK_AND_ASSIGN(io_, IoReactor::Create(&pool_));
    dir_ = absl::StrCat(
        ::testing::TempDir(), "/hf_",
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    ::mkdir(dir_.c_str(), 0755);
    for (const char* f : {kHfConfigFile, kHfWeightsFile, kHfIndexFile,
                          "a.safetensors", "b.safetensors"}) {
      ::unlink(absl::StrCat(dir_, "/", f).c_str());
    }
  }

  // Writes the directory of a model with FillRandom-like values (each
  // weight as RandomWeightValues makes it), in `dtype`, in `shards` files;
  // records what each weight must load as.
  void WriteModel(bool tied, const std::string& dtype, int shards) {
    WriteFile(absl::StrCat(dir_, "/", kHfConfigFile), ConfigJson(tied));
    FERRY_ASSERT_OK_AND_ASSIGN(HfConfig c, ParseHfConfig(ConfigJson(tied), ""));
    FERRY_ASSERT_OK_AND_ASSIGN(auto unplaced,
                               LlamaModel::CreateUnplaced(c.llama));
    std::vector<StTensor> tensors;
    for (Tensor* t : unplaced->Weights()) {
      std::vector<float> v(static_cast<size_t>(t->NumElements()));
      RandomWeightValues(t->name, t->ne[1], 3, absl::MakeSpan(v));
      std::vector<int64_t> shape;
      for (int d = 1; d >= 0; --d) {
        if (d == 0 || t->ne[d] > 1) shape.push_back(t->ne[d]);
      }
      StTensor st{HfTensorName(t->name), dtype, shape, ""};
      st.bytes = Encode(dtype, v, expected_[t->name]);
      tensors.push_back(std::move(st));
    }
    if (shards == 1) {
      WriteSafetensors(absl::StrCat(dir_, "/", kHfWeightsFile), tensors);
      return;
    }
    const size_t half = tensors.size() / 2;
    std::vector<StTensor> a(tensors.begin(), tensors.begin() + half);
    std::vector<StTensor> b(tensors.begin() + half, tensors.end());
    WriteSafetensors(absl::StrCat(dir_, "/a.safetensors"), a);
    WriteSafetensors(absl::StrCat(dir_, "/b.safetensors"), b);
    std::string index = R"({"metadata": {}, "weight_map": {)";
    for (size_t i = 0; i < tensors.size(); ++i) {
      absl::StrAppend(&index, i ? "," : "", "\"", tensors[i].name, "\": \"",
                      i < half ? "a" : "b", ".safetensors\"");
    }
    index += "}}";
    WriteFile(absl::StrCat(dir_, "/", kHfIndexFile), index);
  }

  absl::StatusOr<std::unique_ptr<LlamaModel>> Load() {
    return LoadLlamaHf(dir_, {cpu_.get()}, {}, *io_);
  }

  void ExpectWeightsAsWritten(const LlamaModel& model) {
    for (Tensor* t : model.Weights()) {
      FERRY_ASSERT_OK_AND_ASSIGN(std::vector<float> got,
                                 ::ferry::testing::ReadTensor(*t));
      ASSERT_EQ(got.size(), expected_[t->name].size()) << t->name;
      for (size_t i = 0; i < got.size(); ++i) {
        // Bitwise: the loader's conversion is exact.
        ASSERT_EQ(std::memcmp(&got[i], &expected_[t->name][i], 4), 0)
            << t->name << "[" << i << "] " << got[i] << " vs "
            << expected_[t->name][i];
      }
    }
  }

  // Replaces `from` with `to` (same length) in the file at `path`.
  void Patch(const std::string& path, const std::string& from,
             const std::string& to) {
    ASSERT_EQ(from.size(), to.size());
    FILE* f = std::fopen(path.c_str(), "rb");
    ASSERT_NE(f, nullptr);
    std::string bytes;
    char buf[65536];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) bytes.append(buf, n);
    std::fclose(f);
    const size_t at = bytes.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    bytes.replace(at, from.size(), to);
    WriteFile(path, bytes);
  }

  ThreadPool pool_{2};
  std::unique_ptr<Backend> cpu_;
  std::unique_ptr<IoReactor> io_;
  std::string dir_;
  std::map<std::string, std::vector<float>> expected_;
};

TEST_F(LoadHfTest, F32SingleFileLoadsExactly) {
  WriteModel(/*tied=*/false, "F32", 1);
  HfLoadStats stats;
  FERRY_ASSERT_OK_AND_ASSIGN(
      auto model, LoadLlamaHf(dir_, {cpu_.get()}, {}, *io_, 0, &stats));
  EXPECT_EQ(model->config().rope_mode, RopeMode::kNeox);
  EXPECT_FALSE(model->config().tie_embeddings);
  EXPECT_EQ(stats.shards, 1);
  EXPECT_EQ(stats.file_bytes, stats.weight_bytes);
  ExpectWeightsAsWritten(*model);
}

TEST_F(LoadHfTest, F16AndBf16InShardsLoadAsRounded) {
  for (const char* dtype : {"F16", "BF16"}) {
    WriteModel(/*tied=*/true, dtype, 2);
    HfLoadStats stats;
    FERRY_ASSERT_OK_AND_ASSIGN(
        auto model, LoadLlamaHf(dir_, {cpu_.get()}, {}, *io_, 0, &stats));
    EXPECT_TRUE(model->config().tie_embeddings);
    EXPECT_EQ(stats.shards, 2);
    EXPECT_EQ(2 * stats.file_bytes, stats.weight_bytes);
    ExpectWeightsAsWritten(*model);
    FERRY_ASSERT_OK_AND_ASSIGN(HfConfig c, ReadHfDirectory(dir_));
    EXPECT_EQ(c.llama.n_layer, 2);
  }
}

TEST_F(LoadHfTest, ErrorsNameFileAndTensor) {
  const std::string weights = absl::StrCat(dir_, "/", kHfWeightsFile);
  EXPECT_THAT(Load(),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr(dir_), HasSubstr("config.json"))));
  WriteModel(false, "F32", 1);
  Patch(weights, "model.layers.1.mlp.up_proj", "model.layers.1.mlp.up_proX");
  EXPECT_THAT(Load(), StatusIs(absl::StatusCode::kNotFound,
                               AllOf(HasSubstr(dir_),
                                     HasSubstr("model.layers.1.mlp.up_proj"))));
  WriteModel(false, "F32", 1);
  Patch(weights, R"("model.norm.weight":{"dtype":"F32")",
        R"("model.norm.weight":{"dtype":"I32")");
  EXPECT_THAT(Load(),
              StatusIs(absl::StatusCode::kUnimplemented,
                       AllOf(HasSubstr(weights), HasSubstr("model.norm.weight"),
                             HasSubstr("I32"))));
  WriteModel(false, "F32", 1);
  Patch(
      weights,
      R"("model.layers.0.self_attn.q_proj.weight":{"dtype":"F32","shape":[32,32])",
      R"("model.layers.0.self_attn.q_proj.weight":{"dtype":"F32","shape":[16,64])");
  EXPECT_THAT(Load(), StatusIs(absl::StatusCode::kInvalidArgument,
                               AllOf(HasSubstr(weights), HasSubstr("q_proj"),
                                     HasSubstr("[16, 64]"))));
  // Untied: lm_head is needed.
  WriteModel(false, "F32", 1);
  Patch(weights, "lm_head.weight", "lm_heax.weight");
  EXPECT_THAT(Load(), StatusIs(absl::StatusCode::kNotFound,
                               HasSubstr("lm_head.weight")));
  // A truncated file fails in its header check, naming it.
  WriteModel(false, "F32", 1);
  ::truncate(weights.c_str(), 1000);
  EXPECT_THAT(Load(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr(weights)));
  ::unlink(weights.c_str());
  EXPECT_THAT(Load(), StatusIs(absl::StatusCode::kNotFound,
                               AllOf(HasSubstr(kHfWeightsFile),
                                     HasSubstr(kHfIndexFile))));
  EXPECT_THAT(LoadLlamaHf(absl::StrCat(dir_, "/", kHfConfigFile), {cpu_.get()},
                          {}, *io_),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("not a directory")));
}

TEST_F(LoadHfTest, ShardErrorsNameIndexAndShard) {
  const std::string index = absl::StrCat(dir_, "/", kHfIndexFile);
  WriteModel(true, "BF16", 2);
  // The index sends a tensor to the shard that does not hold it.
  Patch(index, R"("model.embed_tokens.weight": "a.)",
        R"("model.embed_tokens.weight": "b.)");
  EXPECT_THAT(Load(), StatusIs(absl::StatusCode::kNotFound,
                               AllOf(HasSubstr(index),
                                     HasSubstr("model.embed_tokens.weight"),
                                     HasSubstr("b.safetensors"))));
  WriteModel(true, "BF16", 2);
  ::unlink(absl::StrCat(dir_, "/b.safetensors").c_str());
  EXPECT_THAT(Load(), StatusIs(absl::StatusCode::kNotFound,
                               HasSubstr("b.safetensors")));
  WriteModel(true, "BF16", 2);
  Patch(index, R"("a.safetensors")", R"("/.safetensors")");
  EXPECT_THAT(Load(), StatusIs(absl::StatusCode::kInvalidArgument,
                               HasSubstr("not a file in the directory")));
}

// A config asking for a huge model fails on its missing tensors before
// anything is allocated (creating the model would ask for gigabytes).
TEST_F(LoadHfTest, ValidatesBeforeAllocating) {
  WriteModel(false, "F32", 1);
  std::string big = ConfigJson(false);
  big.replace(big.find("\"hidden_size\": 32"), 17, "\"hidden_size\": 65536");
  big.replace(big.find("\"vocab_size\": 40"), 16, "\"vocab_size\": 262144");
  WriteFile(absl::StrCat(dir_, "/", kHfConfigFile), big);
  EXPECT_THAT(Load(), StatusIs(absl::StatusCode::kInvalidArgument,
                               HasSubstr("the config needs")));
}

// Logits of every position of `tokens` through one forward pass on `cpu`.
std::vector<float> Logits(const LlamaModel& model, Backend* cpu,
                          const std::vector<int32_t>& tokens) {
  auto g =
      BuildLlamaGraph(model, {.n_tokens = static_cast<int64_t>(tokens.size())});
  EXPECT_THAT(g.status(), IsOk());
  auto sched = Scheduler::Create({cpu});
  EXPECT_THAT(sched.status(), IsOk());
  auto in = MakeLlamaInputs(*g, model.config().n_vocab, tokens);
  EXPECT_THAT(in.status(), IsOk());
  std::vector<float> out(static_cast<size_t>(g->logits->NumElements()));
  BatchIo io;
  io.In(*g->tokens, in->tokens.data(), in->tokens.size() * 4)
      .In(*g->pos, in->pos.data(), in->pos.size() * 4)
      .In(*g->mask, in->mask.data(), in->mask.size() * 4)
      .Out(*g->logits, out.data(), out.size() * 4);
  EXPECT_THAT((*sched)->Compute(g->graph, io), IsOk());
  return out;
}

// GGUF stores a head's Q/K rows so that rows (2i, 2i+1) rotate together
// (the normal rope); HF stores them so that rows i and i + head_dim/2 do
// (rotate-half, kNeox). Loading the HF rows with kNeox must give the logits
// of the GGUF rows with kNormal.
TEST_F(LoadHfTest, RotateHalfOnHfRowsMatchesNormalRopeOnGgufRows) {
  WriteModel(false, "F32", 1);
  FERRY_ASSERT_OK_AND_ASSIGN(auto hf, Load());
  LlamaConfig normal = hf->config();
  normal.rope_mode = RopeMode::kNormal;
  FERRY_ASSERT_OK_AND_ASSIGN(auto gguf,
                             LlamaModel::Create(normal, {cpu_.get()}));
  const int64_t hd = normal.head_dim();
  for (Tensor* t : gguf->Weights()) {
    Tensor* src = hf->FindWeight(t->name);
    ASSERT_NE(src, nullptr);
    FERRY_ASSERT_OK_AND_ASSIGN(std::vector<float> v,
                               ::ferry::testing::ReadTensor(*src));
    const bool q = t->name.ends_with("attn_q"), k = t->name.ends_with("attn_k");
    if (q || k) {
      // GGUF row (head h, 2i + j) is HF row (head h, j * hd/2 + i).
      const int64_t row = t->ne[0], rows = t->ne[1];
      std::vector<float> permuted(v.size());
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t h = r / hd, in = r % hd;
        const int64_t hf_row = h * hd + (in % 2) * (hd / 2) + in / 2;
        std::copy_n(v.begin() + hf_row * row, row, permuted.begin() + r * row);
      }
      v = std::move(permuted);
    }
    FERRY_ASSERT_OK(::ferry::testing::WriteTensor(*t, v));
  }
  const std::vector<int32_t> tokens = {3, 17, 5, 39, 0, 22, 8, 8};
  const std::vector<float> a = Logits(*hf, cpu_.get(), tokens);
  const std::vector<float> b = Logits(*gguf, cpu_.get(), tokens);
  ASSERT_EQ(a.size(), b.size());
  double max_diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(a[i] - b[i]);
    max_diff = std::isnan(d) ? INFINITY : std::max(max_diff, d);  // NaN fails.
  }
  EXPECT_LT(max_diff, 1e-4);
  // And the rope style matters here: HF rows with the normal rope differ.
  LlamaConfig wrong = hf->config();
  wrong.rope_mode = RopeMode::kNormal;
  FERRY_ASSERT_OK_AND_ASSIGN(auto mixed,
                             LlamaModel::Create(wrong, {cpu_.get()}));
  for (Tensor* t : mixed->Weights()) {
    FERRY_ASSERT_OK_AND_ASSIGN(
        std::vector<float> v,
        ::ferry::testing::ReadTensor(*hf->FindWeight(t->name)));
    FERRY_ASSERT_OK(::ferry::testing::WriteTensor(*t, v));
  }
  const std::vector<float> c = Logits(*mixed, cpu_.get(), tokens);
  double wrong_diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    wrong_diff = std::max(wrong_diff, std::fabs(double{a[i]} - c[i]));
  }
  EXPECT_GT(wrong_diff, 1e-2);
}

}  // namespace
}  // namespace ferry::llama
