// LlamaConfig: the hyperparameters of a llama-style decoder-only transformer
// and the description of its block, independent of where its weights come
// from. Llama, SmolLM2, Qwen2, Qwen3, Phi-3 and Gemma 2 share one graph
// (llama_graph.h); what a family changes in the block is a field here (a
// bias, an extra norm, a fused matrix, an activation), set by the family's
// loader (ApplyFamily), not a copy of the graph.
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
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "ferry/graph/ops.h"

namespace ferry::llama {

// The activation of the feed-forward gate.
enum class FfnActivation {
  kSilu,      // SwiGLU (llama, qwen, phi3).
  kGeluTanh,  // GeGLU with gelu's tanh approximation (gemma).
};

// Thread-compatible (a value type).
struct LlamaConfig {
  // The family ("llama", "qwen2", "qwen3", "phi3", "gemma2"), for messages;
  // the fields below say what its block has.
  std::string arch = "llama";
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
  // Size of an attention head; 0: n_embd / n_head (qwen3 and gemma2 give
  // their own).
  int64_t n_embd_head = 0;

  // The block. Defaults are llama's.
  // Q, K and V projections have biases (qwen2).
  bool attn_bias = false;
  // Q and K are RMS-normed per head, with weights [head_dim], before rope
  // (qwen3).
  bool qk_norm = false;
  // Q, K and V are one matrix [n_embd, q_dim + 2 kv_dim] (phi3).
  bool fused_qkv = false;
  // Gate and up are one matrix [n_embd, 2 n_ff], gate rows first (phi3).
  bool fused_gate_up = false;
  FfnActivation ffn_act = FfnActivation::kSilu;
  // The attention's and the FFN's outputs are RMS-normed before their
  // residual adds (gemma2).
  bool post_norms = false;
  // Norm weights w act as (1 + w) (gemma's checkpoints; GGUF's converter
  // adds the 1, so only a Hugging Face loader sets it: the loader adds it).
  bool norm_plus_one = false;
  // The token embeddings are multiplied by sqrt(n_embd) (gemma).
  bool scale_embeddings = false;
  // The scale of q.k; 0: 1/sqrt(head_dim) (gemma2:
  // 1/sqrt(query_pre_attn_scalar)).
  float attn_scale = 0;
  // Soft-capping cap * tanh(x / cap) of the attention scores (after
  // scaling, before the mask) and of the logits; 0: none (gemma2).
  float attn_softcap = 0;
  float final_softcap = 0;
  // Layers il with il % 2 == 0 attend to at most the last `sliding_window`
  // positions (their own included); 0: every layer attends to all
  // (gemma2). The batch graph cannot mask them yet: it refuses a model
  // whose window is shorter than n_ctx.
  int64_t sliding_window = 0;
  // Llama-3 rope scaling (rope_type "llama3"): frequencies whose
  // wavelength exceeds original_ctx / low_freq_factor are divided by
  // `factor`, those below original_ctx / high_freq_factor kept, the ones
  // between interpolated. factor 0: none.
  struct RopeScaling {
    float factor = 0;
    float low_freq_factor = 1;
    float high_freq_factor = 4;
    int64_t original_ctx = 8192;
  };
  RopeScaling rope_scaling;
  // Each layer carries rope frequency divisors (LlamaLayer::rope_freqs):
  // from rope_scaling (Hugging Face) or the file (GGUF's rope_freqs).
  bool rope_freq_factors = false;

  int64_t head_count_kv() const { return n_head_kv > 0 ? n_head_kv : n_head; }
  int64_t head_dim() const {
    return n_embd_head > 0 ? n_embd_head : n_embd / n_head;
  }
  int64_t q_dim() const { return head_dim() * n_head; }
  int64_t kv_dim() const { return head_dim() * head_count_kv(); }
  bool IsSlidingLayer(int il) const {
    return sliding_window > 0 && il % 2 == 0;
  }
  // Per rotated pair k (head_dim / 2 of them), the divisor of its
  // frequency under rope_scaling; empty without it.
  std::vector<float> RopeFreqFactors() const;
  // InvalidArgument naming the first bad field; bounds every size so that
  // weights of a valid config fit in memory arithmetic (no overflow).
  absl::Status Validate() const;
  // Parameters (weights only).
  int64_t NumParams() const;
  std::string ToString() const;
};

// Sets the block fields of `config` that family `arch` fixes ("llama",
// "qwen2": Q/K/V biases, "qwen3": per-head Q/K norms, "phi3": fused QKV and
// gate/up, "gemma2": GeGLU, post-norms, scaled embeddings); its
// hyperparameters (softcaps, window, head size) come from the file.
// Unimplemented naming `arch` for any other family.
absl::Status ApplyFamily(absl::string_view arch, LlamaConfig& config);

}  // namespace ferry::llama

#endif  // FERRY_MODELS_LLAMA_LLAMA_CONFIG_H_
