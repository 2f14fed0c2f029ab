#include "ferry/models/llama/llama_hf.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "ferry/backends/buffer.h"
#include "ferry/models/safetensors/safetensors_file.h"
#include "ferry/quant/dequantize.h"
#include "ferry/quant/quant_type.h"
#include "ferry/runtime/status_macros.h"
#include "ferry/runtime/sync_wait.h"
#include "nlohmann/json.hpp"

namespace ferry::llama {
namespace {

using Json = nlohmann::json;
using ::ferry::safetensors::SafetensorInfo;
using ::ferry::safetensors::SafetensorsFile;
using ::ferry::safetensors::SafetensorsShapeString;

// Positions a KV cache gets when the caller does not say (as for GGUF).
constexpr int64_t kDefaultMaxCtx = 4096;
// config.json and the index are small; anything bigger is not one.
constexpr int64_t kMaxJsonFile = int64_t{64} << 20;

absl::Status FileError(absl::StatusCode code, const std::string& file,
                       absl::string_view what) {
  return absl::Status(code, absl::StrCat(file, ": ", what));
}

absl::StatusOr<Json> ParseJsonObject(absl::string_view text,
                                     const std::string& file) {
  Json root = Json::parse(text.begin(), text.end(), nullptr,
                          /*allow_exceptions=*/false);
  if (root.is_discarded()) {
    return FileError(absl::StatusCode::kInvalidArgument, file, "not JSON");
  }
  if (!root.is_object()) {
    return FileError(absl::StatusCode::kInvalidArgument, file,
                     "not a JSON object");
  }
  return root;
}

// Reads a small regular file (refusing FIFOs, directories, huge files).
absl::StatusOr<std::string> ReadSmallFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat(path, ": ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return FileError(absl::StatusCode::kInvalidArgument, path,
                     "not a regular file");
  }
  if (st.st_size > kMaxJsonFile) {
    return FileError(absl::StatusCode::kInvalidArgument, path,
                     absl::StrCat("is ", st.st_size, " bytes, over the limit ",
                                  kMaxJsonFile));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return FileError(absl::StatusCode::kNotFound, path, "cannot open");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Typed reads of config.json keys; `found` says whether the key was there
// (and not null).
class ConfigReader {
 public:
  ConfigReader(const Json& root, const std::string& file)
      : root_(root), file_(file) {}

  absl::Status Error(absl::string_view key, absl::string_view what) const {
    return FileError(absl::StatusCode::kInvalidArgument, file_,
                     absl::StrCat("'", key, "' ", what));
  }
  const Json* Find(const char* key) const {
    auto it = root_.find(key);
    if (it == root_.end() || it->is_null()) return nullptr;
    return &*it;
  }
  absl::StatusOr<int64_t> Int(const char* key, bool required,
                              int64_t fallback) const {
    const Json* v = Find(key);
    if (v == nullptr) {
      if (required) return Error(key, "is missing");
      return fallback;
    }
    if (v->is_number_unsigned()) {
      const uint64_t u = v->get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Error(key, "is too large");
      }
      return static_cast<int64_t>(u);
    }
    if (v->is_number_integer()) return v->get<int64_t>();
    return Error(key, absl::StrCat("is not an integer (", v->dump(), ")"));
  }
  absl::StatusOr<double> Number(const char* key, double fallback) const {
    const Json* v = Find(key);
    if (v == nullptr) return fallback;
    if (!v->is_number()) {
      return Error(key, absl::StrCat("is not a number (", v->dump(), ")"));
    }
    return v->get<double>();
  }
  absl::StatusOr<bool> Bool(const char* key, bool fallback) const {
    const Json* v = Find(key);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) {
      return Error(key, absl::StrCat("is not true or false (", v->dump(), ")"));
    }
    return v->get<bool>();
  }
  absl::StatusOr<std::string> String(const char* key) const {
    const Json* v = Find(key);
    if (v == nullptr) return std::string();
    if (!v->is_string()) {
      return Error(key, absl::StrCat("is not a string (", v->dump(), ")"));
    }
    return v->get<std::string>();
  }
  // A token id: an integer, or a list of them (the first is taken).
  absl::StatusOr<int32_t> TokenId(const char* key, int64_t n_vocab) const {
    const Json* v = Find(key);
    if (v == nullptr) return -1;
    const Json* id = v;
    if (v->is_array()) {
      if (v->empty()) return -1;
      id = &(*v)[0];
    }
    if (!id->is_number_integer() || id->get<int64_t>() < 0 ||
        id->get<int64_t>() >= n_vocab) {
      return Error(key, absl::StrCat("is not a token id below vocab_size ",
                                     n_vocab, " (", v->dump(), ")"));
    }
    return static_cast<int32_t>(id->get<int64_t>());
  }

 private:
  const Json& root_;
  const std::string& file_;
};

absl::StatusOr<quant::QuantType> WeightType(const std::string& dtype) {
  if (dtype == "F32") return quant::QuantType::kF32;
  if (dtype == "F16") return quant::QuantType::kF16;
  if (dtype == "BF16") return quant::QuantType::kBF16;
  return absl::UnimplementedError(
      absl::StrCat("dtype ", dtype, " (ferry loads F32, F16 and BF16)"));
}

// The directory's weight files, opened, and where each tensor is.
struct HfDirectory {
  HfConfig config;
  std::vector<SafetensorsFile> shards;
  std::map<std::string, int> shard_of;  // HF tensor name -> shards index.
};

absl::StatusOr<HfDirectory> OpenHfDirectory(const std::string& dir,
                                            int64_t n_ctx) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat(dir, ": ", std::strerror(errno)));
  }
  if (!S_ISDIR(st.st_mode)) {
    return FileError(absl::StatusCode::kInvalidArgument, dir,
                     "is not a directory (a Hugging Face model is one)");
  }
  HfDirectory out;
  const std::string config_path = absl::StrCat(dir, "/", kHfConfigFile);
  FERRY_ASSIGN_OR_RETURN(std::string config_text, ReadSmallFile(config_path));
  FERRY_ASSIGN_OR_RETURN(out.config,
                         ParseHfConfig(config_text, config_path, n_ctx));

  const std::string single = absl::StrCat(dir, "/", kHfWeightsFile);
  const std::string index_path = absl::StrCat(dir, "/", kHfIndexFile);
  struct stat ws;
  if (::stat(single.c_str(), &ws) == 0) {
    FERRY_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open(single));
    for (const auto& [name, info] : f.header().tensors) out.shard_of[name] = 0;
    out.shards.push_back(std::move(f));
    return out;
  }
  if (::stat(index_path.c_str(), &ws) != 0) {
    return absl::NotFoundError(absl::StrCat(
        dir, ": has neither ", kHfWeightsFile, " nor ", kHfIndexFile));
  }
  FERRY_ASSIGN_OR_RETURN(std::string index_text, ReadSmallFile(index_path));
  FERRY_ASSIGN_OR_RETURN(auto weight_map, ParseHfIndex(index_text, index_path));
  std::map<std::string, int> shard_index;  // File name -> shards index.
  for (const auto& [tensor, file] : weight_map) {
    auto [it, inserted] =
        shard_index.emplace(file, static_cast<int>(out.shards.size()));
    if (inserted) {
      FERRY_ASSIGN_OR_RETURN(
          SafetensorsFile f,
          SafetensorsFile::Open(absl::StrCat(dir, "/", file)));
      out.shards.push_back(std::move(f));
    }
    const SafetensorsFile& shard = out.shards[it->second];
    if (!shard.header().tensors.contains(tensor)) {
      return FileError(absl::StatusCode::kNotFound, index_path,
                       absl::StrCat("maps tensor '", tensor, "' to ", file,
                                    ", which does not have it"));
    }
    out.shard_of[tensor] = it->second;
  }
  return out;
}

// Weights that config.json describes rather than a file holds.
bool IsComputed(const Tensor& t) {
  return absl::EndsWith(t.name, ".rope_freqs");
}

struct WeightSource {
  Tensor* tensor;
  const SafetensorsFile* shard;
  const SafetensorInfo* info;
  quant::QuantType type;
};

// The file, dtype and bytes of every weight of `model`, checked.
absl::StatusOr<std::vector<WeightSource>> MatchWeights(
    const HfDirectory& dir, const std::string& dir_name,
    const LlamaModel& model) {
  std::vector<WeightSource> out;
  for (Tensor* t : model.Weights()) {
    if (t->dtype != DType::kF32) {
      return absl::InternalError(absl::StrCat(
          "model weight '", t->name, "' is not f32; the HF loader fills f32"));
    }
    if (IsComputed(*t)) continue;
    const std::string name = HfTensorName(t->name, model.config());
    auto where = dir.shard_of.find(name);
    if (where == dir.shard_of.end()) {
      return FileError(absl::StatusCode::kNotFound, dir_name,
                       absl::StrCat("tensor '", name, "' is missing"));
    }
    const SafetensorsFile& shard = dir.shards[where->second];
    const SafetensorInfo& info = shard.header().tensors.at(name);
    absl::StatusOr<quant::QuantType> type = WeightType(info.dtype);
    if (!type.ok()) {
      return FileError(
          type.status().code(), shard.path(),
          absl::StrCat("tensor '", name, "' has ", type.status().message()));
    }
    // safetensors shapes are outermost first (reversed ne); trailing 1s of
    // ne are not dimensions.
    std::vector<int64_t> want(t->ne.begin(), t->ne.end());
    while (want.size() > 1 && want.back() == 1) want.pop_back();
    std::reverse(want.begin(), want.end());
    if (info.shape != want) {
      return FileError(
          absl::StatusCode::kInvalidArgument, shard.path(),
          absl::StrCat("tensor '", name, "' has shape ",
                       SafetensorsShapeString(info.shape),
                       ", the config needs ", SafetensorsShapeString(want)));
    }
    out.push_back({t, &shard, &info, *type});
  }
  return out;
}

}  // namespace

absl::StatusOr<HfConfig> ParseHfConfig(absl::string_view json,
                                       const std::string& file, int64_t n_ctx) {
  FERRY_ASSIGN_OR_RETURN(Json root, ParseJsonObject(json, file));
  ConfigReader r(root, file);
  FERRY_ASSIGN_OR_RETURN(std::string model_type, r.String("model_type"));
  if (model_type.empty()) {
    const Json* archs = r.Find("architectures");
    if (archs != nullptr && archs->is_array()) {
      for (const Json& a : *archs) {
        if (a == "LlamaForCausalLM") model_type = "llama";
      }
    }
  }
  HfConfig out;
  LlamaConfig& c = out.llama;
  if (absl::Status s = ApplyFamily(model_type, c); !s.ok()) {
    return FileError(
        absl::StatusCode::kUnimplemented, file,
        absl::StrCat("model_type '", model_type, "': ", s.message()));
  }
  // The FFN activation: silu, or gemma's tanh-approximated gelu.
  FERRY_ASSIGN_OR_RETURN(std::string act, r.String("hidden_act"));
  if (model_type == "gemma2") {
    FERRY_ASSIGN_OR_RETURN(std::string gemma_act,
                           r.String("hidden_activation"));
    if (!gemma_act.empty()) act = gemma_act;
    if (act != "gelu_pytorch_tanh" && act != "gelu_tanh") {
      return FileError(
          absl::StatusCode::kUnimplemented, file,
          absl::StrCat("hidden_activation '", act,
                       "' (ferry's gemma2 has gelu_pytorch_tanh)"));
    }
  } else if (!act.empty() && act != "silu") {
    return FileError(absl::StatusCode::kUnimplemented, file,
                     absl::StrCat("hidden_act '", act, "' (ferry has silu)"));
  }
  for (const char* bias : {"attention_bias", "mlp_bias"}) {
    FERRY_ASSIGN_OR_RETURN(bool has, r.Bool(bias, false));
    if (has) {
      return FileError(
          absl::StatusCode::kUnimplemented, file,
          absl::StrCat(bias, " is true; ferry's ", model_type, " has none"));
    }
  }
  FERRY_ASSIGN_OR_RETURN(bool qwen_swa, r.Bool("use_sliding_window", false));
  if (qwen_swa) {
    return FileError(absl::StatusCode::kUnimplemented, file,
                     "use_sliding_window is true (ferry's qwen attends to "
                     "every position)");
  }
  // Rope: transformers 4 writes rope_theta and rope_scaling, 5 one
  // rope_parameters object holding both.
  FERRY_ASSIGN_OR_RETURN(double theta, r.Number("rope_theta", 10000.0));
  const Json* rope = r.Find("rope_parameters");
  if (rope == nullptr) rope = r.Find("rope_scaling");
  if (rope != nullptr) {
    if (!rope->is_object()) {
      return r.Error("rope_parameters", "is not an object");
    }
    ConfigReader rr(*rope, file);
    FERRY_ASSIGN_OR_RETURN(theta, rr.Number("rope_theta", theta));
    FERRY_ASSIGN_OR_RETURN(std::string type, rr.String("rope_type"));
    if (type.empty()) {
      FERRY_ASSIGN_OR_RETURN(type, rr.String("type"));
    }
    FERRY_ASSIGN_OR_RETURN(double partial,
                           rr.Number("partial_rotary_factor", 1.0));
    if (partial != 1.0) {
      return FileError(absl::StatusCode::kUnimplemented, file,
                       absl::StrCat("partial_rotary_factor ", partial,
                                    " (ferry ropes whole heads)"));
    }
    if (type == "llama3") {
      LlamaConfig::RopeScaling& s = c.rope_scaling;
      FERRY_ASSIGN_OR_RETURN(double factor, rr.Number("factor", 0));
      FERRY_ASSIGN_OR_RETURN(double low, rr.Number("low_freq_factor", 1));
      FERRY_ASSIGN_OR_RETURN(double high, rr.Number("high_freq_factor", 4));
      FERRY_ASSIGN_OR_RETURN(
          s.original_ctx, rr.Int("original_max_position_embeddings", true, 0));
      s.factor = static_cast<float>(factor);
      s.low_freq_factor = static_cast<float>(low);
      s.high_freq_factor = static_cast<float>(high);
      c.rope_freq_factors = true;
    } else if (!type.empty() && type != "default") {
      return FileError(absl::StatusCode::kUnimplemented, file,
                       absl::StrCat("rope type '", type,
                                    "' (ferry has default and llama3)"));
    }
  }
  FERRY_ASSIGN_OR_RETURN(int64_t window, r.Int("sliding_window", false, 0));
  if (model_type == "gemma2") {
    c.norm_plus_one = true;
    FERRY_ASSIGN_OR_RETURN(double scalar, r.Number("query_pre_attn_scalar", 0));
    if (scalar > 0) c.attn_scale = static_cast<float>(1 / std::sqrt(scalar));
    FERRY_ASSIGN_OR_RETURN(double cap, r.Number("attn_logit_softcapping", 0));
    c.attn_softcap = static_cast<float>(cap);
    FERRY_ASSIGN_OR_RETURN(cap, r.Number("final_logit_softcapping", 0));
    c.final_softcap = static_cast<float>(cap);
    c.sliding_window = window;
    // Layers alternate: sliding first, as ferry's gemma2 does.
    if (const Json* types = r.Find("layer_types"); types != nullptr) {
      if (!types->is_array()) return r.Error("layer_types", "is not a list");
      for (size_t il = 0; il < types->size(); ++il) {
        const bool sliding = (*types)[il] == "sliding_attention";
        if (sliding != (il % 2 == 0)) {
          return FileError(
              absl::StatusCode::kUnimplemented, file,
              absl::StrCat("layer_types[", il, "] is ", (*types)[il].dump(),
                           "; ferry's gemma2 slides on even "
                           "layers only"));
        }
      }
    }
  }
  if (n_ctx < 0) {
    return FileError(absl::StatusCode::kInvalidArgument, file,
                     absl::StrCat("n_ctx ", n_ctx, " is negative"));
  }
  FERRY_ASSIGN_OR_RETURN(int64_t n_layer, r.Int("num_hidden_layers", true, 0));
  if (n_layer < 1 || n_layer > 100000) {
    return r.Error("num_hidden_layers",
                   absl::StrCat(n_layer, " is out of range"));
  }
  c.n_layer = static_cast<int>(n_layer);
  FERRY_ASSIGN_OR_RETURN(c.n_embd, r.Int("hidden_size", true, 0));
  FERRY_ASSIGN_OR_RETURN(c.n_head, r.Int("num_attention_heads", true, 0));
  FERRY_ASSIGN_OR_RETURN(c.n_head_kv,
                         r.Int("num_key_value_heads", false, c.n_head));
  FERRY_ASSIGN_OR_RETURN(c.n_ff, r.Int("intermediate_size", true, 0));
  FERRY_ASSIGN_OR_RETURN(c.n_vocab, r.Int("vocab_size", true, 0));
  FERRY_ASSIGN_OR_RETURN(int64_t n_ctx_train,
                         r.Int("max_position_embeddings", false, 2048));
  if (n_ctx_train < 1) {
    return r.Error("max_position_embeddings",
                   absl::StrCat(n_ctx_train, " is not positive"));
  }
  c.n_ctx = n_ctx > 0 ? n_ctx : std::min(n_ctx_train, kDefaultMaxCtx);
  if (model_type == "phi3" && window > 0 && c.n_ctx > window) {
    // Phi-3 slides every layer: within the window that is no limit, so the
    // context stops there.
    if (n_ctx > 0) {
      return FileError(absl::StatusCode::kUnimplemented, file,
                       absl::StrCat("n_ctx ", n_ctx,
                                    " exceeds phi3's sliding "
                                    "window of ",
                                    window));
    }
    c.n_ctx = window;
  }
  FERRY_ASSIGN_OR_RETURN(double eps, r.Number("rms_norm_eps", 1e-6));
  if (!(eps > 0 && eps < 1)) {
    return r.Error("rms_norm_eps", absl::StrCat(eps, " is not in (0, 1)"));
  }
  if (!(theta > 1 && theta < 1e12)) {
    return r.Error("rope_theta", absl::StrCat(theta, " is out of range"));
  }
  c.eps = static_cast<float>(eps);
  c.rope_freq_base = static_cast<float>(theta);
  // HF's rotate_half pairs dimension i with i + head_dim/2.
  c.rope_mode = RopeMode::kNeox;
  FERRY_ASSIGN_OR_RETURN(c.tie_embeddings,
                         r.Bool("tie_word_embeddings", false));
  if (absl::Status s = c.Validate(); !s.ok()) {
    return FileError(s.code(), file, s.message());
  }
  FERRY_ASSIGN_OR_RETURN(int64_t head_dim,
                         r.Int("head_dim", false, c.head_dim()));
  if (head_dim != c.head_dim()) {
    c.n_embd_head = head_dim;
    if (absl::Status s = c.Validate(); !s.ok()) {
      return FileError(s.code(), file, s.message());
    }
  }
  FERRY_ASSIGN_OR_RETURN(out.bos_token_id,
                         r.TokenId("bos_token_id", c.n_vocab));
  FERRY_ASSIGN_OR_RETURN(out.eos_token_id,
                         r.TokenId("eos_token_id", c.n_vocab));
  FERRY_ASSIGN_OR_RETURN(out.torch_dtype, r.String("torch_dtype"));
  return out;
}

absl::StatusOr<std::map<std::string, std::string>> ParseHfIndex(
    absl::string_view json, const std::string& file) {
  FERRY_ASSIGN_OR_RETURN(Json root, ParseJsonObject(json, file));
  auto map = root.find("weight_map");
  if (map == root.end() || !map->is_object()) {
    return FileError(absl::StatusCode::kInvalidArgument, file,
                     "'weight_map' is missing or not an object");
  }
  std::map<std::string, std::string> out;
  for (const auto& [tensor, shard] : map->items()) {
    if (!shard.is_string()) {
      return FileError(
          absl::StatusCode::kInvalidArgument, file,
          absl::StrCat("weight_map['", tensor, "'] is not a file name (",
                       shard.dump(), ")"));
    }
    const std::string name = shard.get<std::string>();
    if (name.empty() || name == "." || name == ".." ||
        absl::StrContains(name, '/') || absl::StrContains(name, '\0')) {
      return FileError(absl::StatusCode::kInvalidArgument, file,
                       absl::StrCat("weight_map['", tensor, "'] is '", name,
                                    "', not a file in the directory"));
    }
    out[tensor] = name;
  }
  if (out.empty()) {
    return FileError(absl::StatusCode::kInvalidArgument, file,
                     "'weight_map' is empty");
  }
  return out;
}

std::string HfTensorName(const std::string& canonical,
                         const LlamaConfig& config) {
  if (canonical == "tok_embd") return "model.embed_tokens.weight";
  if (canonical == "output_norm") return "model.norm.weight";
  if (canonical == "output") return "lm_head.weight";
  // "blk.N.<part>" or "blk.N.<part>.bias"
  const std::vector<std::string> parts = absl::StrSplit(canonical, '.');
  static const auto* const kLayerNames = new std::map<std::string, std::string>{
      {"attn_norm", "input_layernorm"},
      {"attn_q", "self_attn.q_proj"},
      {"attn_k", "self_attn.k_proj"},
      {"attn_v", "self_attn.v_proj"},
      {"attn_qkv", "self_attn.qkv_proj"},
      {"attn_q_norm", "self_attn.q_norm"},
      {"attn_k_norm", "self_attn.k_norm"},
      {"attn_output", "self_attn.o_proj"},
      {"ffn_norm", "post_attention_layernorm"},
      {"ffn_gate", "mlp.gate_proj"},
      {"ffn_up", "mlp.up_proj"},
      {"ffn_down", "mlp.down_proj"},
  };
  // Gemma 2 names its four norms around attention and the FFN differently:
  // its post_attention_layernorm follows attention.
  static const auto* const kPostNormNames =
      new std::map<std::string, std::string>{
          {"post_attention_norm", "post_attention_layernorm"},
          {"ffn_norm", "pre_feedforward_layernorm"},
          {"post_ffw_norm", "post_feedforward_layernorm"},
      };
  const bool bias = parts.size() == 4 && parts[3] == "bias";
  if ((parts.size() == 3 || bias) && parts[0] == "blk") {
    std::string part = parts[2];
    if (config.fused_gate_up && part == "ffn_up") {
      part = "mlp.gate_up_proj";
    } else if (auto it = kPostNormNames->find(part);
               config.post_norms && it != kPostNormNames->end()) {
      part = it->second;
    } else if (auto it = kLayerNames->find(part); it != kLayerNames->end()) {
      part = it->second;
    } else {
      return canonical;
    }
    return absl::StrCat("model.layers.", parts[1], ".", part,
                        bias ? ".bias" : ".weight");
  }
  return canonical;  // Not a llama weight; no HF file has it.
}

absl::StatusOr<HfConfig> ReadHfDirectory(const std::string& dir,
                                         int64_t n_ctx) {
  FERRY_ASSIGN_OR_RETURN(HfDirectory d, OpenHfDirectory(dir, n_ctx));
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> unplaced,
                         LlamaModel::CreateUnplaced(d.config.llama));
  FERRY_RETURN_IF_ERROR(MatchWeights(d, dir, *unplaced).status());
  return d.config;
}

absl::StatusOr<std::unique_ptr<LlamaModel>> LoadLlamaHf(
    const std::string& dir, std::vector<Backend*> backends,
    const LlamaModelOptions& options, IoReactor& io, int64_t n_ctx,
    HfLoadStats* stats) {
  const auto start = std::chrono::steady_clock::now();
  FERRY_ASSIGN_OR_RETURN(HfDirectory d, OpenHfDirectory(dir, n_ctx));
  {  // Every weight checked before the model is allocated.
    FERRY_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> unplaced,
                           LlamaModel::CreateUnplaced(d.config.llama));
    FERRY_RETURN_IF_ERROR(MatchWeights(d, dir, *unplaced).status());
  }
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> model,
                         LlamaModel::Create(d.config.llama, backends, options));
  FERRY_ASSIGN_OR_RETURN(std::vector<WeightSource> weights,
                         MatchWeights(d, dir, *model));
  // In file order, so reads of a shard go forward.
  std::sort(weights.begin(), weights.end(),
            [](const WeightSource& a, const WeightSource& b) {
              return std::make_pair(a.shard, a.info->begin) <
                     std::make_pair(b.shard, b.info->begin);
            });
  // A tensor at a time: its bytes read through the reactor into a staging
  // vector, converted to f32, copied into its buffer.
  HfLoadStats local;
  local.shards = static_cast<int>(d.shards.size());
  const LlamaConfig& config = model->config();
  if (config.rope_freq_factors) {
    const std::vector<float> factors = config.RopeFreqFactors();
    for (const LlamaLayer& l : model->layers()) {
      FERRY_RETURN_IF_ERROR(SetTensorData(*l.rope_freqs, factors.data(), 0,
                                          factors.size() * sizeof(float)));
    }
  }
  std::vector<std::byte> raw;
  std::vector<float> values;
  for (const WeightSource& w : weights) {
    const uint64_t bytes = w.info->end - w.info->begin;
    const int64_t n = w.tensor->NumElements();
    raw.resize(bytes);
    values.resize(static_cast<size_t>(n));
    FERRY_RETURN_IF_ERROR(SyncWait(
        io.Read(w.shard->file(), absl::MakeSpan(raw),
                static_cast<int64_t>(w.shard->data_base() + w.info->begin))));
    if (absl::Status s =
            quant::DequantizeRow(w.type, raw.data(), values.data(), n);
        !s.ok()) {
      return FileError(
          s.code(), w.shard->path(),
          absl::StrCat("tensor '", HfTensorName(w.tensor->name, config),
                       "': ", s.message()));
    }
    // Gemma's checkpoints store norm weights as offsets from 1.
    if (config.norm_plus_one && absl::EndsWith(w.tensor->name, "norm")) {
      for (float& v : values) v += 1.0f;
    }
    FERRY_RETURN_IF_ERROR(SetTensorData(*w.tensor, values.data(), 0,
                                        values.size() * sizeof(float)));
    local.file_bytes += static_cast<int64_t>(bytes);
    local.weight_bytes += static_cast<int64_t>(values.size() * sizeof(float));
  }
  local.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  if (stats != nullptr) *stats = local;
  return model;
}

}  // namespace ferry::llama
