// LlamaConfig: the hyperparameters of a llama-style decoder-only transformer
// (Llama, SmolLM2, Qwen2-without-bias share this shape), independent of
// where its weights come from.
//
// A weight layout (ferry's safetensors files, GGUF, Hugging Face
// directories) is a loader: it reads a LlamaConfig from its metadata, makes
// a LlamaModel (llama_model.h) and fills the model's tensors, which carry
// canonical names (LlamaModel::Weights). What differs between layouts and
// changes the graph is a field here (rope style, tied embeddings), not a
// fork of the graph.
#ifndef FERRY_MODELS_LLAMA_LLAMA_CONFIG_H_
#define FERRY_MODELS_LLAMA_LLAMA_CONFIG_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "ferry/graph/ops.h"

namespace ferry::llama {

// Thread-compatible (a value type).
struct LlamaConfig {
  int n_layer = 4;
  int64_t n_embd = 256;
  int64_t n_head = 8;
  // Grouped-query attention: K/V heads (n_head a multiple of it); 0: as
  // many as n_head.
  int64_t n_head_kv = 0;
  int64_t n_ff = 704;
  int64_t n_vocab = 4096;
  // Positions the model was made for; sequences are at most this long.
  int64_t n_ctx = 512;
  float eps = 1e-5f;
  float rope_freq_base = 10000.0f;
  // kNormal rotates pairs (2i, 2i+1) as GGUF's llama weights expect;
  // Hugging Face checkpoints rotate halves (kNeox, "rotate_half").
  RopeMode rope_mode = RopeMode::kNormal;
  // The output matrix is the token embedding (no separate output weight).
  bool tie_embeddings = false;

  int64_t head_count_kv() const { return n_head_kv > 0 ? n_head_kv : n_head; }
  int64_t head_dim() const { return n_embd / n_head; }
  int64_t kv_dim() const { return head_dim() * head_count_kv(); }
  // InvalidArgument naming the first bad field; bounds every size so that
  // weights of a valid config fit in memory arithmetic (no overflow).
  absl::Status Validate() const;
  // Parameters (weights only).
  int64_t NumParams() const;
  std::string ToString() const;
};

}  // namespace ferry::llama

#endif  // FERRY_MODELS_LLAMA_LLAMA_CONFIG_H_
