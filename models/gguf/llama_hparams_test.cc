#include "ferry/models/gguf/llama_hparams.h"

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
using ::ferry::testing::StatusIs;
using quant::QuantType;
using ::testing::AllOf;
using ::testing::HasSubstr;

struct Shape {
  int n_layer = 2, n_embd = 64, n_head = 4, n_head_kv = 2, n_ff = 96,
      n_vocab = 40;
  bool tied = true;
  bool with_head_kv = true;
};

GgufBuilder Llama(const Shape& s) {
  GgufBuilder b;
  b.SetString("general.architecture", "llama")
      .SetU32("llama.block_count", s.n_layer)
      .SetU32("llama.embedding_length", s.n_embd)
      .SetU32("llama.attention.head_count", s.n_head)
      .SetU32("llama.feed_forward_length", s.n_ff)
      .SetU32("llama.context_length", 256)
      .SetU32("llama.vocab_size", s.n_vocab)
      .SetF32("llama.rope.freq_base", 100000.0f)
      .SetF32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  if (s.with_head_kv) b.SetU32("llama.attention.head_count_kv", s.n_head_kv);
  const int64_t e = s.n_embd, kv = s.n_embd / s.n_head * s.n_head_kv;
  auto add = [&](const std::string& name, std::vector<int64_t> dims) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    const bool quantized = dims.size() == 2;
    const QuantType type = quantized ? QuantType::kQ4_1 : QuantType::kF32;
    b.AddTensor(name, dims, type,
                std::string(quantized ? n / 32 * 20 : n * 4, '\0'));
  };
  add("token_embd.weight", {e, s.n_vocab});
  for (int il = 0; il < s.n_layer; ++il) {
    const std::string p = absl::StrCat("blk.", il, ".");
    add(p + "attn_norm.weight", {e});
    add(p + "attn_q.weight", {e, e});
    add(p + "attn_k.weight", {e, kv});
    add(p + "attn_v.weight", {e, kv});
    add(p + "attn_output.weight", {e, e});
    add(p + "ffn_norm.weight", {e});
    add(p + "ffn_gate.weight", {e, s.n_ff});
    add(p + "ffn_up.weight", {e, s.n_ff});
    add(p + "ffn_down.weight", {s.n_ff, e});
  }
  add("output_norm.weight", {e});
  if (!s.tied) add("output.weight", {e, s.n_vocab});
  return b;
}

absl::StatusOr<LlamaHParams> Read(const std::string& bytes) {
  MemoryGgufSource source(bytes, "tiny.gguf");
  FERRY_ASSIGN_OR_RETURN(GgufFile f, GgufFile::Parse(source));
  return ReadLlamaHParams(f);
}

TEST(LlamaHParamsTest, ReadsTiedModel) {
  FERRY_ASSERT_OK_AND_ASSIGN(LlamaHParams hp, Read(Llama({}).Build()));
  EXPECT_EQ(hp.n_layer, 2);
  EXPECT_EQ(hp.n_embd, 64);
  EXPECT_EQ(hp.n_head, 4);
  EXPECT_EQ(hp.n_head_kv, 2);
  EXPECT_EQ(hp.n_ff, 96);
  EXPECT_EQ(hp.n_ctx_train, 256);
  EXPECT_EQ(hp.n_vocab, 40);
  EXPECT_EQ(hp.n_rot, 16);
  EXPECT_EQ(hp.head_dim(), 16);
  EXPECT_EQ(hp.kv_dim(), 32);
  EXPECT_FLOAT_EQ(hp.rope_freq_base, 100000.0f);
  EXPECT_FLOAT_EQ(hp.rope_freq_scale, 1.0f);
  EXPECT_FLOAT_EQ(hp.rms_norm_eps, 1e-5f);
  EXPECT_TRUE(hp.tied_embeddings);
}

TEST(LlamaHParamsTest, UntiedAndDefaultHeadCountKv) {
  Shape s;
  s.tied = false;
  s.with_head_kv = false;
  s.n_head_kv = s.n_head;
  FERRY_ASSERT_OK_AND_ASSIGN(LlamaHParams hp, Read(Llama(s).Build()));
  EXPECT_FALSE(hp.tied_embeddings);
  EXPECT_EQ(hp.n_head_kv, 4);
}

TEST(LlamaHParamsTest, ErrorsNameKeyOrTensor) {
  GgufBuilder missing = Llama({});
  missing.SetString("general.architecture2", "x");
  Shape bad_heads;
  bad_heads.n_head = 5;  // 64 % 5 != 0 (tensors still built with 64/5).
  EXPECT_THAT(Read(Llama(bad_heads).Build()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("tiny.gguf"),
                             HasSubstr("not a multiple of n_head"))));
  Shape bad_kv;
  bad_kv.n_head_kv = 3;
  EXPECT_THAT(
      Read(Llama(bad_kv).Build()),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("n_head_kv 3")));

  GgufBuilder no_eps;
  no_eps.SetString("general.architecture", "llama")
      .SetU32("llama.block_count", 1)
      .SetU32("llama.embedding_length", 8)
      .SetU32("llama.attention.head_count", 2)
      .SetU32("llama.feed_forward_length", 8)
      .SetU32("llama.context_length", 8)
      .SetU32("llama.vocab_size", 8);
  EXPECT_THAT(Read(no_eps.Build()),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("'llama.attention.layer_norm_rms_epsilon'")));

  // qwen2 is read (its keys named after it); mamba is not a family.
  GgufBuilder qwen;
  qwen.SetString("general.architecture", "qwen2");
  EXPECT_THAT(Read(qwen.Build()),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("'qwen2.block_count' is missing")));
  GgufBuilder mamba;
  mamba.SetString("general.architecture", "mamba");
  EXPECT_THAT(Read(mamba.Build()),
              StatusIs(absl::StatusCode::kUnimplemented,
                       HasSubstr("'mamba', not one ferry runs")));

  // A model whose n_ff key disagrees with its tensors.
  GgufBuilder wrong_ff = Llama({});
  std::string bytes = wrong_ff.Build();
  const size_t at = bytes.find("llama.feed_forward_length") + 25 + 4;
  bytes[at] = 64;  // n_ff 96 -> 64.
  EXPECT_THAT(Read(bytes),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("tensor 'blk.0.ffn_gate.weight'"),
                             HasSubstr("[64, 96]"), HasSubstr("[64, 64]"))));
}

}  // namespace
}  // namespace ferry::gguf
