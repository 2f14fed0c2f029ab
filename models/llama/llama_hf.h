// Loads a Hugging Face llama-architecture directory (what transformers'
// save_pretrained writes) into a LlamaModel placed across backends:
//   config.json                      hyperparameters (LlamaConfig below)
//   model.safetensors                the weights, or
//   model.safetensors.index.json     {"weight_map": {tensor: shard file}}
//                                    with the shards beside it.
// HF tensor names map onto the model's canonical ones
// ("model.layers.3.self_attn.q_proj.weight" -> "blk.3.attn_q", ...).
// Weights may be F32, F16 or BF16; they are converted to f32 at load (the
// graph computes on f32, as for GGUF). HF stores Q and K for rotate-half
// rope (row i of a head pairs with row i + head_dim/2), which is
// RopeMode::kNeox, so the weights load as they are; GGUF's converter
// permutes the same rows for RopeMode::kNormal instead.
//
// Everything is checked before anything is allocated: every config key
// used (type and range; features ferry lacks, such as rope_scaling or
// attention biases, are Unimplemented), the index and its shard names,
// every shard's header, and every weight's presence, dtype and shape.
// Errors name the file and the key or tensor. Tensor data is read through
// the io_uring reactor.
#ifndef FERRY_MODELS_LLAMA_LLAMA_HF_H_
#define FERRY_MODELS_LLAMA_LLAMA_HF_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ferry/backends/backend.h"
#include "ferry/models/llama/llama_config.h"
#include "ferry/models/llama/llama_model.h"
#include "ferry/runtime/io_reactor.h"

namespace ferry::llama {

inline constexpr char kHfConfigFile[] = "config.json";
inline constexpr char kHfWeightsFile[] = "model.safetensors";
inline constexpr char kHfIndexFile[] = "model.safetensors.index.json";

// What config.json says beyond the LlamaConfig.
struct HfConfig {
  LlamaConfig llama;
  int32_t bos_token_id = -1;  // -1: not given.
  int32_t eos_token_id = -1;  // The first, if config.json lists several.
  std::string torch_dtype;    // "bfloat16", ...; "" if not given.
};

// Parses config.json text; `file` prefixes errors. n_ctx as for
// LlamaConfigFromGguf: 0 takes max_position_embeddings, capped at 4096.
// Keys that are absent take transformers' LlamaConfig defaults, except
// hidden_size, num_hidden_layers, num_attention_heads, intermediate_size
// and vocab_size, which must be there.
absl::StatusOr<HfConfig> ParseHfConfig(absl::string_view json,
                                       const std::string& file,
                                       int64_t n_ctx = 0);

// Parses model.safetensors.index.json text: tensor name -> shard file name.
// Shard names must be plain file names (no directories), so a directory
// cannot point outside itself.
absl::StatusOr<std::map<std::string, std::string>> ParseHfIndex(
    absl::string_view json, const std::string& file);

// The HF name of the model's weight called `canonical` ("blk.0.attn_q" ->
// "model.layers.0.self_attn.q_proj.weight", "output" -> "lm_head.weight",
// "blk.0.attn_q.bias" -> "...q_proj.bias"), in the family `config` is of
// (phi3 fuses gate and up, gemma2 names its norms otherwise).
std::string HfTensorName(const std::string& canonical,
                         const LlamaConfig& config = LlamaConfig());

// Reads and checks the directory at `dir` (config, index, every shard's
// header, every weight) without allocating the model.
absl::StatusOr<HfConfig> ReadHfDirectory(const std::string& dir,
                                         int64_t n_ctx = 0);

struct HfLoadStats {
  int64_t file_bytes = 0;    // Tensor bytes read from the files.
  int64_t weight_bytes = 0;  // f32 bytes written into the model.
  int shards = 0;
  double seconds = 0;
};

// Reads the directory at `dir` (ReadHfDirectory), creates the model on
// `backends` with `options` and fills every weight, converted to f32.
// Nothing stays allocated on error.
absl::StatusOr<std::unique_ptr<LlamaModel>> LoadLlamaHf(
    const std::string& dir, std::vector<Backend*> backends,
    const LlamaModelOptions& options, IoReactor& io, int64_t n_ctx = 0,
    HfLoadStats* stats = nullptr);

}  // namespace ferry::llama

#endif  // FERRY_MODELS_LLAMA_LLAMA_HF_H_
