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
// Quantized weights (q4_0, q4_1, q5_0, q5_1, q8_0, the K-quants q2_K..q6_K,
// iq4_nl and iq4_xs; the SmolLM2 file has q4_1 matrices, a q8_0 token
// embedding, tied as the output, and f32 norms; its Q4_K_M requantization
// has q4_K/q6_K ffn_down and q5_0 elsewhere) are KEPT QUANTIZED where the
// device holding them computes on them (its SupportsOp accepts mul_mat, and
// get_rows for the embedding, on that dtype: the CPU and sim devices do;
// CUDA takes mul_mat on q4_0/q4_1/q8_0 but not get_rows on them, and no
// K-quant or iq4 type), as llama.cpp does: decode reads ~0.6 bytes a weight
// instead of 4. Elsewhere, or when the caller's
// LlamaModelOptions::weight_dtype says so (F32Weights), they are dequantized
// to f32 at load (a device never has to fall back to the CPU
// for a weight it holds). f16 and bf16 file tensors load as f32.
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
  int64_t weight_bytes = 0;  // Bytes written into the model's weights.
  double seconds = 0;
};

// A LlamaModelOptions::weight_dtype that stores every weight as f32 (the
// file's blocks dequantized at load): ~5.5x the memory of q4_1 and slower
// decode, but products without ferry's 8-bit rounding of activations.
DType F32Weights(const std::string& name, const Device& device);

// Reads the file at `path`, validates it (LlamaConfigFromGguf), creates the
// model on `backends` with `options` and fills every weight: in the dtype
// options.weight_dtype picks (the file's values converted: dequantized,
// then quantized again if it names another block type), or when that is
// null, the file's own type where the device computes on it and f32
// elsewhere (see above). Tensor bytes are read through `io` (io_uring or
// its fallback).
absl::StatusOr<std::unique_ptr<LlamaModel>> LoadLlamaGguf(
    const std::string& path, std::vector<Backend*> backends,
    const LlamaModelOptions& options, IoReactor& io, int64_t n_ctx = 0,
    GgufLoadStats* stats = nullptr);

}  // namespace ferry::llama

#endif  // FERRY_MODELS_LLAMA_LLAMA_GGUF_H_
