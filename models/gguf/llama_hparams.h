// LlamaHParams: the hyperparameters of a llama-style model (llama, qwen2,
// qwen3, phi3, gemma2), read from a GGUF file's metadata ("<arch>.*" keys)
// and checked for consistency with each other and, for llama, with the
// file's tensors.
#ifndef FERRY_MODELS_GGUF_LLAMA_HPARAMS_H_
#define FERRY_MODELS_GGUF_LLAMA_HPARAMS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ferry/models/gguf/gguf_file.h"

namespace ferry::gguf {

struct LlamaHParams {
  std::string arch;         // general.architecture
  int64_t n_layer = 0;      // llama.block_count
  int64_t n_embd = 0;       // llama.embedding_length
  int64_t n_head = 0;       // llama.attention.head_count
  int64_t n_head_kv = 0;    // llama.attention.head_count_kv (default n_head)
  int64_t n_ff = 0;         // llama.feed_forward_length
  int64_t n_ctx_train = 0;  // llama.context_length
  int64_t n_vocab = 0;      // llama.vocab_size, else the tokenizer's size
  int64_t n_rot = 0;        // llama.rope.dimension_count (default head_dim)
  float rope_freq_base = 10000.0f;  // llama.rope.freq_base
  // 1 / llama.rope.scaling.factor for linear scaling, else 1.
  float rope_freq_scale = 1.0f;
  float rms_norm_eps = 0;  // llama.attention.layer_norm_rms_epsilon
  // True when the file has no output.weight: the output projection reuses
  // token_embd.weight.
  bool tied_embeddings = false;
  // llama.attention.key_length (0: n_embd / n_head).
  int64_t n_embd_head = 0;
  // gemma2.attn_logit_softcapping, gemma2.final_logit_softcapping (0: none).
  float attn_softcap = 0;
  float final_softcap = 0;
  // <arch>.attention.sliding_window (0: none).
  int64_t sliding_window = 0;

  int64_t head_dim() const {
    if (n_embd_head > 0) return n_embd_head;
    return n_head > 0 ? n_embd / n_head : 0;
  }
  int64_t kv_dim() const { return head_dim() * n_head_kv; }

  // InvalidArgument naming the field if a value is out of range or the
  // values disagree (n_embd % n_head, n_head % n_head_kv, n_rot).
  absl::Status Validate() const;
};

// Reads and validates the hyperparameters of a llama, qwen2, qwen3, phi3 or
// gemma2 GGUF file (Unimplemented naming any other architecture and the
// file); for llama, also checks that every tensor a llama model uses is
// present with the shape they imply (token_embd, output_norm, output unless
// tied, and per layer attn_norm, attn_q/k/v/output, ffn_norm,
// ffn_gate/up/down). Errors name the file and the key or tensor.
absl::StatusOr<LlamaHParams> ReadLlamaHParams(const GgufFile& file);

}  // namespace ferry::gguf

#endif  // FERRY_MODELS_GGUF_LLAMA_HPARAMS_H_
