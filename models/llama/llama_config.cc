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
  if (n_embd < 2 || n_embd > kMaxDim || n_head < 1 || n_head > n_embd * 16 ||
      (n_embd_head == 0 && n_embd % n_head != 0)) {
    return bad(absl::StrCat("embd (", n_embd, ") must be a multiple of heads (",
                            n_head, ") and at most ", kMaxDim));
  }
  if (n_embd_head < 0 || n_embd_head > kMaxDim ||
      (n_embd_head > 0 && n_embd_head * n_head > kMaxDim)) {
    return bad(absl::StrCat("head size ", n_embd_head, " is out of range"));
  }
  if (head_dim() % 2 != 0 || head_dim() < 2) {
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
  for (float v : {attn_scale, attn_softcap, final_softcap}) {
    if (!(v >= 0) || !std::isfinite(v)) {
      return bad("attention scale and soft-caps must be finite and >= 0");
    }
  }
  if (sliding_window < 0) return bad("sliding window must be >= 0");
  const RopeScaling& r = rope_scaling;
  if (r.factor != 0 &&
      (!(r.factor >= 1) || !std::isfinite(r.factor) ||
       !(r.high_freq_factor > r.low_freq_factor) || !(r.low_freq_factor > 0) ||
       !std::isfinite(r.high_freq_factor) || r.original_ctx < 1)) {
    return bad(absl::StrFormat(
        "llama3 rope scaling factor %g, low %g, high %g, original context %d "
        "is not factor >= 1, 0 < low < high, context >= 1",
        r.factor, r.low_freq_factor, r.high_freq_factor, r.original_ctx));
  }
  if (fused_qkv && attn_bias) return bad("fused QKV has no biases");
  return absl::OkStatus();
}

std::vector<float> LlamaConfig::RopeFreqFactors() const {
  const RopeScaling& r = rope_scaling;
  if (r.factor == 0) return {};
  const int64_t half = head_dim() / 2;
  const double low_wavelen = static_cast<double>(r.original_ctx) /
                             static_cast<double>(r.low_freq_factor);
  const double high_wavelen = static_cast<double>(r.original_ctx) /
                              static_cast<double>(r.high_freq_factor);
  std::vector<float> out(static_cast<size_t>(half));
  for (int64_t k = 0; k < half; ++k) {
    const double freq = std::pow(
        static_cast<double>(rope_freq_base),
        -2.0 * static_cast<double>(k) / static_cast<double>(head_dim()));
    const double wavelen = 2 * M_PI / freq;
    double divisor = 1;
    if (wavelen > low_wavelen) {
      divisor = r.factor;
    } else if (wavelen >= high_wavelen) {
      // Between the two: the scaled and unscaled frequencies mixed.
      const double smooth =
          (static_cast<double>(r.original_ctx) / wavelen - r.low_freq_factor) /
          (r.high_freq_factor - r.low_freq_factor);
      divisor = 1 / ((1 - smooth) / r.factor + smooth);
    }
    out[static_cast<size_t>(k)] = static_cast<float>(divisor);
  }
  return out;
}

absl::Status ApplyFamily(absl::string_view arch, LlamaConfig& c) {
  c.arch = std::string(arch);
  if (arch == "llama") return absl::OkStatus();
  if (arch == "qwen2") {
    c.attn_bias = true;
  } else if (arch == "qwen3") {
    c.qk_norm = true;
  } else if (arch == "phi3") {
    c.fused_qkv = true;
    c.fused_gate_up = true;
  } else if (arch == "gemma2") {
    c.ffn_act = FfnActivation::kGeluTanh;
    c.post_norms = true;
    c.scale_embeddings = true;
  } else {
    return absl::UnimplementedError(absl::StrCat(
        "architecture '", arch,
        "' is not one ferry runs (llama, qwen2, qwen3, phi3, gemma2)"));
  }
  return absl::OkStatus();
}

int64_t LlamaConfig::NumParams() const {
  const int64_t per_layer =
      (post_norms ? 4 : 2) * n_embd + 2 * n_embd * q_dim() +
      2 * n_embd * kv_dim() + 3 * n_embd * n_ff +
      (attn_bias ? q_dim() + 2 * kv_dim() : 0) + (qk_norm ? 2 * head_dim() : 0);
  return n_layer * per_layer + (tie_embeddings ? 1 : 2) * n_embd * n_vocab +
         n_embd;
}

std::string LlamaConfig::ToString() const {
  return absl::StrFormat(
      "%s layers=%d embd=%d heads=%d kv_heads=%d ff=%d vocab=%d ctx=%d "
      "(%.2fM params)",
      arch, n_layer, n_embd, n_head, head_count_kv(), n_ff, n_vocab, n_ctx,
      static_cast<double>(NumParams()) / 1e6);
}

}  // namespace ferry::llama
