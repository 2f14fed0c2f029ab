#include "ferry/models/gguf/llama_hparams.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ferry/runtime/status_macros.h"

namespace ferry::gguf {
namespace {

// Sizes past these are not a llama model but a corrupt or hostile file.
constexpr int64_t kMaxLayers = 1 << 12;
constexpr int64_t kMaxWidth = int64_t{1} << 20;
constexpr int64_t kMaxVocab = int64_t{1} << 24;
constexpr int64_t kMaxContext = int64_t{1} << 26;

absl::Status CheckRange(const char* field, int64_t value, int64_t lo,
                        int64_t hi) {
  if (value < lo || value > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " is ", value, ", outside [", lo, ", ", hi, "]"));
  }
  return absl::OkStatus();
}

// An integer key, or `fallback` when absent and `fallback` >= 0.
absl::StatusOr<int64_t> IntKey(const GgufFile& file, const std::string& key,
                               int64_t fallback = -1) {
  if (fallback >= 0 && !file.Has(key)) return fallback;
  return file.GetInt(key);
}

absl::Status CheckTensor(const GgufFile& file, const std::string& name,
                         std::vector<int64_t> dims) {
  const GgufTensorInfo* t = file.FindTensor(name);
  if (t == nullptr) {
    return file.Error(absl::StatusCode::kNotFound,
                      absl::StrCat("tensor '", name, "' is missing"));
  }
  // Trailing 1s are equivalent ([576] == [576, 1]).
  std::vector<int64_t> have = t->dims;
  while (have.size() > 1 && have.back() == 1) have.pop_back();
  while (dims.size() > 1 && dims.back() == 1) dims.pop_back();
  if (have != dims) {
    return file.Error(absl::StatusCode::kInvalidArgument,
                      absl::StrCat("tensor '", name, "' has dims [",
                                   absl::StrJoin(have, ", "),
                                   "], the hyperparameters imply [",
                                   absl::StrJoin(dims, ", "), "]"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status LlamaHParams::Validate() const {
  FERRY_RETURN_IF_ERROR(CheckRange("n_layer", n_layer, 1, kMaxLayers));
  FERRY_RETURN_IF_ERROR(CheckRange("n_embd", n_embd, 1, kMaxWidth));
  FERRY_RETURN_IF_ERROR(CheckRange("n_head", n_head, 1, n_embd));
  FERRY_RETURN_IF_ERROR(CheckRange("n_head_kv", n_head_kv, 1, n_head));
  FERRY_RETURN_IF_ERROR(CheckRange("n_ff", n_ff, 1, kMaxWidth));
  FERRY_RETURN_IF_ERROR(CheckRange("n_ctx_train", n_ctx_train, 1, kMaxContext));
  FERRY_RETURN_IF_ERROR(CheckRange("n_vocab", n_vocab, 1, kMaxVocab));
  if (n_embd_head == 0 && n_embd % n_head != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "n_embd ", n_embd, " is not a multiple of n_head ", n_head));
  }
  if (n_head % n_head_kv != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "n_head ", n_head, " is not a multiple of n_head_kv ", n_head_kv));
  }
  FERRY_RETURN_IF_ERROR(CheckRange("n_embd_head", n_embd_head, 0, kMaxWidth));
  FERRY_RETURN_IF_ERROR(CheckRange("n_rot", n_rot, 2, head_dim()));
  if (n_rot % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("n_rot ", n_rot, " is odd"));
  }
  auto positive = [](const char* field, float v) -> absl::Status {
    if (!(v > 0) || !std::isfinite(v)) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, " is ", v, ", not a positive finite number"));
    }
    return absl::OkStatus();
  };
  FERRY_RETURN_IF_ERROR(positive("rope_freq_base", rope_freq_base));
  FERRY_RETURN_IF_ERROR(positive("rope_freq_scale", rope_freq_scale));
  FERRY_RETURN_IF_ERROR(positive("rms_norm_eps", rms_norm_eps));
  if (rms_norm_eps >= 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("rms_norm_eps is ", rms_norm_eps, ", not below 1"));
  }
  return absl::OkStatus();
}

absl::StatusOr<LlamaHParams> ReadLlamaHParams(const GgufFile& file) {
  FERRY_ASSIGN_OR_RETURN(std::string arch,
                         file.GetString("general.architecture"));
  if (arch != "llama" && arch != "qwen2" && arch != "qwen3" && arch != "phi3" &&
      arch != "gemma2") {
    return file.Error(
        absl::StatusCode::kUnimplemented,
        absl::StrCat("general.architecture is '", arch,
                     "', not one ferry runs (llama, qwen2, qwen3, phi3, "
                     "gemma2)"));
  }
  const std::string p = arch + ".";
  LlamaHParams hp;
  hp.arch = arch;
  FERRY_ASSIGN_OR_RETURN(hp.n_layer, IntKey(file, p + "block_count"));
  FERRY_ASSIGN_OR_RETURN(hp.n_embd, IntKey(file, p + "embedding_length"));
  FERRY_ASSIGN_OR_RETURN(hp.n_head, IntKey(file, p + "attention.head_count"));
  FERRY_ASSIGN_OR_RETURN(hp.n_head_kv,
                         IntKey(file, p + "attention.head_count_kv",
                                std::max<int64_t>(hp.n_head, 0)));
  FERRY_ASSIGN_OR_RETURN(hp.n_ff, IntKey(file, p + "feed_forward_length"));
  FERRY_ASSIGN_OR_RETURN(hp.n_ctx_train, IntKey(file, p + "context_length"));
  if (file.Has(p + "vocab_size")) {
    FERRY_ASSIGN_OR_RETURN(hp.n_vocab, file.GetInt(p + "vocab_size"));
  } else {
    FERRY_ASSIGN_OR_RETURN(auto tokens,
                           file.GetStringArray("tokenizer.ggml.tokens"));
    hp.n_vocab = static_cast<int64_t>(tokens.size());
  }
  FERRY_ASSIGN_OR_RETURN(hp.n_embd_head,
                         IntKey(file, p + "attention.key_length", 0));
  if (hp.n_embd_head > 0 && hp.n_head > 0 &&
      hp.n_embd_head == hp.n_embd / hp.n_head) {
    hp.n_embd_head = 0;  // The default, said explicitly.
  }
  FERRY_ASSIGN_OR_RETURN(hp.n_rot, IntKey(file, p + "rope.dimension_count",
                                          std::max<int64_t>(hp.head_dim(), 0)));
  if (file.Has(p + "rope.freq_base")) {
    FERRY_ASSIGN_OR_RETURN(double base, file.GetFloat(p + "rope.freq_base"));
    hp.rope_freq_base = static_cast<float>(base);
  }
  if (file.Has(p + "rope.scaling.type")) {
    // A StatusOr held by name, not FERRY_ASSIGN_OR_RETURN into a string:
    // GCC 12 at -O2 warns (maybe-uninitialized) on the moved-into string.
    absl::StatusOr<std::string> type_or =
        file.GetString(p + "rope.scaling.type");
    if (!type_or.ok()) return type_or.status();
    const std::string& type = *type_or;
    if (type == "linear") {
      FERRY_ASSIGN_OR_RETURN(double factor,
                             file.GetFloat(p + "rope.scaling.factor"));
      hp.rope_freq_scale = factor > 0 ? static_cast<float>(1.0 / factor) : 0;
    } else if (type != "none") {
      return file.Error(
          absl::StatusCode::kUnimplemented,
          absl::StrCat(p, "rope.scaling.type '", type, "' is not supported"));
    }
  }
  FERRY_ASSIGN_OR_RETURN(double eps,
                         file.GetFloat(p + "attention.layer_norm_rms_epsilon"));
  hp.rms_norm_eps = static_cast<float>(eps);
  for (auto [key, out] :
       {std::pair{"attn_logit_softcapping", &hp.attn_softcap},
        std::pair{"final_logit_softcapping", &hp.final_softcap}}) {
    if (file.Has(p + key)) {
      FERRY_ASSIGN_OR_RETURN(double cap, file.GetFloat(p + key));
      if (!(cap >= 0) || !std::isfinite(cap)) {
        return file.Error(absl::StatusCode::kInvalidArgument,
                          absl::StrCat(p, key, " is ", cap));
      }
      *out = static_cast<float>(cap);
    }
  }
  FERRY_ASSIGN_OR_RETURN(hp.sliding_window,
                         IntKey(file, p + "attention.sliding_window", 0));
  if (hp.sliding_window < 0) {
    return file.Error(absl::StatusCode::kInvalidArgument,
                      absl::StrCat(p, "attention.sliding_window is negative"));
  }
  hp.tied_embeddings = file.FindTensor("output.weight") == nullptr;
  if (absl::Status s = hp.Validate(); !s.ok()) {
    return file.Error(absl::StatusCode::kInvalidArgument,
                      absl::StrCat(arch, " hyperparameters: ", s.message()));
  }
  // The other families' tensors are checked by the model's loader.
  if (arch != "llama") return hp;

  const int64_t e = hp.n_embd, kv = hp.kv_dim(), ff = hp.n_ff;
  FERRY_RETURN_IF_ERROR(
      CheckTensor(file, "token_embd.weight", {e, hp.n_vocab}));
  FERRY_RETURN_IF_ERROR(CheckTensor(file, "output_norm.weight", {e}));
  if (!hp.tied_embeddings) {
    FERRY_RETURN_IF_ERROR(CheckTensor(file, "output.weight", {e, hp.n_vocab}));
  }
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const std::string blk = absl::StrCat("blk.", il, ".");
    FERRY_RETURN_IF_ERROR(CheckTensor(file, blk + "attn_norm.weight", {e}));
    FERRY_RETURN_IF_ERROR(CheckTensor(file, blk + "attn_q.weight",
                                      {e, hp.n_head * hp.head_dim()}));
    FERRY_RETURN_IF_ERROR(CheckTensor(file, blk + "attn_k.weight", {e, kv}));
    FERRY_RETURN_IF_ERROR(CheckTensor(file, blk + "attn_v.weight", {e, kv}));
    FERRY_RETURN_IF_ERROR(CheckTensor(file, blk + "attn_output.weight",
                                      {hp.n_head * hp.head_dim(), e}));
    FERRY_RETURN_IF_ERROR(CheckTensor(file, blk + "ffn_norm.weight", {e}));
    FERRY_RETURN_IF_ERROR(CheckTensor(file, blk + "ffn_gate.weight", {e, ff}));
    FERRY_RETURN_IF_ERROR(CheckTensor(file, blk + "ffn_up.weight", {e, ff}));
    FERRY_RETURN_IF_ERROR(CheckTensor(file, blk + "ffn_down.weight", {ff, e}));
  }
  return hp;
}

}  // namespace ferry::gguf
