// Loads a llama-architecture GGUF file (llama.cpp's format) into a
// LlamaModel placed across backends.
//
// Hyperparameters come from the "llama.*" metadata (gguf/llama_hparams.h);
// GGUF tensor names map onto the model's canonical ones ("token_embd.weight"
// -> "tok_embd", "blk.3.attn_q.weight" -> "blk.3.attn_q", ...). GGUF's
// converter stores the Q and K rows of llama models permuted for
// llama.cpp's "normal" rope (pairs 2i, 2i+1), so the config uses
// RopeMode::kNormal and the weights load as they are.
//
// Quantized weights (q4_0, q4_1, q5_0, q5_1, q8_0, f16, bf16; the SmolLM2
// file has q4_1, q8_0 and f32) are DEQUANTIZED AT LOAD to f32: the graph
// has no quantized dtypes yet, so f32 is what every backend computes on
// today. This costs memory (4 bytes a weight instead of ~0.6) and decode
// speed (decode reads every weight once per token); kernels that compute
// on the blocks as they are (models/quant/vec_dot.h) are the follow-up.
//
// Everything is checked before anything is allocated: the architecture,
// every hyperparameter, every tensor's presence, shape and type. Errors
// name the file and the key or tensor.
#ifndef FERRY_MODELS_LLAMA_LLAMA_GGUF_H_
#define FERRY_MODELS_LLAMA_LLAMA_GGUF_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ferry/backends/backend.h"
#include "ferry/models/gguf/gguf_file.h"
#include "ferry/models/llama/llama_config.h"
#include "ferry/models/llama/llama_model.h"
#include "ferry/runtime/io_reactor.h"

namespace ferry::llama {

// The GGUF name of the model's weight called `canonical`
// ("blk.0.attn_q" -> "blk.0.attn_q.weight", "tok_embd" ->
// "token_embd.weight").
std::string GgufTensorName(const std::string& canonical);

// The config of the llama model in `file`, with n_ctx positions (0: the
// file's training context, capped at 4096 so a KV cache stays small unless
// the caller asks for more). Also checks every tensor the model needs
// (present, shape, a type DequantizeRow supports).
absl::StatusOr<LlamaConfig> LlamaConfigFromGguf(const gguf::GgufFile& file,
                                                int64_t n_ctx = 0);

struct GgufLoadStats {
  int64_t file_bytes = 0;    // Tensor bytes read from the file.
  int64_t weight_bytes = 0;  // f32 bytes written into the model.
  double seconds = 0;
};

// Reads the file at `path`, validates it (LlamaConfigFromGguf), creates the
// model on `backends` with `options` and fills every weight, dequantized to
// f32. Tensor bytes are read through `io` (io_uring or its fallback).
absl::StatusOr<std::unique_ptr<LlamaModel>> LoadLlamaGguf(
    const std::string& path, std::vector<Backend*> backends,
    const LlamaModelOptions& options, IoReactor& io, int64_t n_ctx = 0,
    GgufLoadStats* stats = nullptr);

}  // namespace ferry::llama

#endif  // FERRY_MODELS_LLAMA_LLAMA_GGUF_H_
