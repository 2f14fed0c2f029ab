#include "ferry/models/llama/llama_config.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ferry::llama {

absl::Status LlamaConfig::Validate() const {
  auto bad = [](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("llama config: ", what));
  };
  // Far above any real model, low enough that products of two stay exact.
  constexpr int64_t kMaxDim = int64_t{1} << 24;
  if (n_layer < 1 || n_layer > 4096) return bad("layers must be in [1, 4096]");
  if (n_embd < 2 || n_embd > kMaxDim || n_head < 1 || n_embd % n_head != 0) {
    return bad(absl::StrCat("embd (", n_embd, ") must be a multiple of heads (",
                            n_head, ") and at most ", kMaxDim));
  }
  if (head_dim() % 2 != 0) {
    return bad(absl::StrCat("head size embd/heads = ", head_dim(),
                            " must be even (rope)"));
  }
  if (n_head_kv < 0 || n_head % head_count_kv() != 0) {
    return bad(absl::StrCat("heads (", n_head,
                            ") must be a multiple of kv heads (", n_head_kv,
                            ")"));
  }
  if (n_ff < 1 || n_ff > kMaxDim) {
    return bad(absl::StrCat("ff must be in [1, ", kMaxDim, "]"));
  }
  if (n_vocab < 2 || n_vocab > kMaxDim) {
    return bad(absl::StrCat("vocab must be in [2, ", kMaxDim, "]"));
  }
  if (n_ctx < 1 || n_ctx > kMaxDim) {
    return bad(absl::StrCat("ctx must be in [1, ", kMaxDim, "]"));
  }
  if (!(eps >= 0) || !std::isfinite(eps)) return bad("eps must be >= 0");
  if (!(rope_freq_base > 0) || !std::isfinite(rope_freq_base)) {
    return bad("rope frequency base must be > 0");
  }
  if (rope_mode != RopeMode::kNormal && rope_mode != RopeMode::kNeox) {
    return bad("unknown rope mode");
  }
  return absl::OkStatus();
}

int64_t LlamaConfig::NumParams() const {
  const int64_t per_layer = 2 * n_embd + 2 * n_embd * n_embd +
                            2 * n_embd * kv_dim() + 3 * n_embd * n_ff;
  return n_layer * per_layer + (tie_embeddings ? 1 : 2) * n_embd * n_vocab +
         n_embd;
}

std::string LlamaConfig::ToString() const {
  return absl::StrFormat(
      "layers=%d embd=%d heads=%d kv_heads=%d ff=%d vocab=%d ctx=%d "
      "(%.2fM params)",
      n_layer, n_embd, n_head, head_count_kv(), n_ff, n_vocab, n_ctx,
      static_cast<double>(NumParams()) / 1e6);
}

}  // namespace ferry::llama
