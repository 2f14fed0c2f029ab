#include "ferry/models/llama/llama_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "ferry/alloc/weights.h"
#include "ferry/graph/ops.h"
#include "ferry/runtime/status_macros.h"

namespace ferry::llama {
namespace {

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t HashName(const std::string& name) {
  uint64_t h = 1469598103934665603ull;
  for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  return h;
}

absl::StatusOr<Tensor*> NewWeight(Context& ctx, std::vector<int64_t> shape,
                                  const std::string& name,
                                  DType dtype = DType::kF32) {
  FERRY_ASSIGN_OR_RETURN(Tensor * t, ctx.NewTensor(dtype, shape, name));
  SetWeight(*t);
  return t;
}

std::string MiB(size_t bytes) {
  return absl::StrFormat("%.1f MiB", static_cast<double>(bytes) / (1 << 20));
}

}  // namespace

void RandomWeightValues(const std::string& name, int64_t ne1, uint64_t seed,
                        absl::Span<float> out) {
  uint64_t state = seed ^ HashName(name);
  const bool norm = ne1 == 1;
  const int64_t ne0 = ne1 > 0 ? static_cast<int64_t>(out.size()) / ne1 : 1;
  // Matrices: uniform with variance 1/fan_in; norms: uniform in [0.9, 1.1].
  const float lo = norm ? 0.9f : -std::sqrt(3.0f / static_cast<float>(ne0));
  const float hi = norm ? 1.1f : -lo;
  for (float& v : out) {
    const double u = static_cast<double>(SplitMix64(state) >> 11) * 0x1.0p-53;
    v = lo + static_cast<float>(u) * (hi - lo);
  }
}

absl::StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::Create(
    const LlamaConfig& config, std::vector<Backend*> backends,
    const LlamaModelOptions& options) {
  FERRY_RETURN_IF_ERROR(config.Validate());
  const int nb = static_cast<int>(backends.size());
  if (nb == 0) return absl::InvalidArgumentError("llama: no backends");
  std::vector<double> split = options.split;
  if (split.empty()) {
    // Equal layer counts on every accelerator (measured better than
    // weighting the output matrix in at this granularity), none on the CPU.
    split.assign(nb, nb == 1 ? 1.0 : 0.0);
    for (int b = 0; b + 1 < nb; ++b) split[b] = 1.0;
  }
  if (static_cast<int>(split.size()) != nb) {
    return absl::InvalidArgumentError(
        absl::StrCat("llama: --split has ", split.size(), " proportions for ",
                     nb, " backends"));
  }
  double total = 0;
  for (double s : split) {
    if (!(s >= 0) || !std::isfinite(s)) {
      return absl::InvalidArgumentError(
          "llama: split proportions must be finite and >= 0");
    }
    total += s;
  }
  if (total <= 0) {
    return absl::InvalidArgumentError("llama: split proportions sum to 0");
  }
  if (!std::isfinite(total)) {
    return absl::InvalidArgumentError(
        "llama: split proportions overflow when summed; use smaller numbers");
  }

  auto model = absl::WrapUnique(new LlamaModel());
  model->config_ = config;
  model->backends_ = backends;
  for (int b = 0; b < nb; ++b) {
    model->weight_ctx_.push_back(std::make_unique<Context>());
  }
  // Each piece of each layer gets a backend: the caller's per layer, or the
  // first backend whose cumulative share passes it (counting layers, or
  // parameters up to the piece's middle).
  std::vector<LayerPlacement> placement(static_cast<size_t>(config.n_layer));
  int weighted_output = -1;
  if (!options.layer_backends.empty()) {
    if (options.split_unit != SplitUnit::kLayers) {
      return absl::InvalidArgumentError(
          "llama: layer backends place whole layers; they cannot be "
          "combined with a split by weight bytes");
    }
    if (static_cast<int>(options.layer_backends.size()) != config.n_layer) {
      return absl::InvalidArgumentError(
          absl::StrCat("llama: ", options.layer_backends.size(),
                       " layer backends for ", config.n_layer, " layers"));
    }
    for (int il = 0; il < config.n_layer; ++il) {
      const int b = options.layer_backends[il];
      if (b < 0 || b >= nb) {
        return absl::InvalidArgumentError(absl::StrCat(
            "llama: layer backend ", b, " is not in [0, ", nb, ")"));
      }
      placement[il].fill(b);
    }
  } else if (options.split_unit == SplitUnit::kLayers) {
    std::vector<int> end_layer(nb);
    double cum = 0;
    for (int b = 0; b < nb; ++b) {
      cum += split[b];
      end_layer[b] =
          static_cast<int>(std::lround(cum / total * config.n_layer));
    }
    end_layer[nb - 1] = config.n_layer;
    int b = 0;
    for (int il = 0; il < config.n_layer; ++il) {
      while (il >= end_layer[b]) ++b;
      placement[il].fill(b);
    }
  } else {
    const double e = static_cast<double>(config.n_embd);
    const double q = static_cast<double>(config.q_dim());
    const double kv = static_cast<double>(config.kv_dim());
    const double ff = static_cast<double>(config.n_ff);
    // Biases and the extra norms are left out: rounding errors of a split.
    std::array<double, kLayerPieces> piece = {
        e + e * q + 2 * e * kv,  // attn_norm, attn_q, attn_k, attn_v
        q * e,                   // attn_output
        e + e * ff,              // ffn_norm, ffn_gate
        e * ff,                  // ffn_up
        ff * e};                 // ffn_down
    if (config.fused_gate_up) {  // Gate and up are one piece.
      piece[2] += piece[3];
      piece[3] = 0;
    }
    // The output norm and matrix count where the split places them.
    const double output_piece =
        options.output_backend >= 0
            ? 0
            : e + (config.tie_embeddings
                       ? 0
                       : e * static_cast<double>(config.n_vocab));
    const double params =
        config.n_layer * std::accumulate(piece.begin(), piece.end(), 0.0) +
        output_piece;
    std::vector<double> share_end(nb);
    double cum = 0;
    for (int b = 0; b < nb; ++b) {
      cum += split[b];
      share_end[b] = cum / total * params;
    }
    double at = 0;
    int b = 0;
    const auto place = [&](double size) {
      const double middle = at + size / 2;
      while (b + 1 < nb && middle >= share_end[b]) ++b;
      at += size;
      return b;
    };
    for (int il = 0; il < config.n_layer; ++il) {
      for (int p = 0; p < kLayerPieces; ++p) placement[il][p] = place(piece[p]);
    }
    if (options.output_backend < 0) weighted_output = place(output_piece);
  }
  const int embedding =
      options.embedding_backend < 0 ? nb - 1 : options.embedding_backend;
  const int output = options.output_backend >= 0 ? options.output_backend
                     : weighted_output >= 0      ? weighted_output
                                                 : placement.back().back();
  if (embedding >= nb || output >= nb) {
    return absl::InvalidArgumentError(
        absl::StrCat("llama: embedding/output backend outside [0, ", nb, ")"));
  }
  model->embedding_backend_ = embedding;
  model->output_backend_ = output;

  FERRY_RETURN_IF_ERROR(
      model->MakeTensors(placement, embedding, output, options));
  // One weights buffer per backend that has any.
  const int cpu = nb - 1;
  model->weight_bytes_.assign(nb, 0);
  for (int i = 0; i < nb; ++i) {
    BufferType* type = backends[i]->device().weights_buffer_type();
    if (i == cpu && options.cpu_weights_type != nullptr) {
      type = options.cpu_weights_type;
    }
    Context& ctx = *model->weight_ctx_[i];
    if (ctx.num_tensors() == 0) continue;
    auto buffers = AllocateWeights(ctx, *type);
    if (!buffers.ok()) {
      return absl::Status(
          buffers.status().code(),
          absl::StrCat("llama: allocating weights on ", backends[i]->name(),
                       ": ", buffers.status().message()));
    }
    for (auto& buffer : *buffers) {
      model->weight_bytes_[i] += buffer->size();
      model->buffers_.push_back(std::move(buffer));
    }
  }
  return model;
}

absl::StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::CreateUnplaced(
    const LlamaConfig& config) {
  FERRY_RETURN_IF_ERROR(config.Validate());
  auto model = absl::WrapUnique(new LlamaModel());
  model->config_ = config;
  model->weight_ctx_.push_back(std::make_unique<Context>());
  model->weight_bytes_.assign(1, 0);
  FERRY_RETURN_IF_ERROR(model->MakeTensors(
      std::vector<LayerPlacement>(static_cast<size_t>(config.n_layer),
                                  LayerPlacement{}),
      0, 0));
  return model;
}

absl::StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::CreateInBufferType(
    const LlamaConfig& config, BufferType& type) {
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> model,
                         CreateUnplaced(config));
  FERRY_ASSIGN_OR_RETURN(auto buffers,
                         AllocateWeights(*model->weight_ctx_[0], type));
  for (auto& buffer : buffers) {
    model->weight_bytes_[0] += buffer->size();
    model->buffers_.push_back(std::move(buffer));
  }
  return model;
}

absl::Status LlamaModel::MakeTensors(
    const std::vector<LayerPlacement>& layer_placement, int embedding,
    int output, const LlamaModelOptions& options) {
  const LlamaConfig& config = config_;
  const int64_t e = config.n_embd;
  const int64_t kv = config.kv_dim();
  // Weight `name` of shape `shape` in backend b's context, in the dtype the
  // options choose for that backend's device.
  const auto new_weight =
      [&](int b, std::vector<int64_t> shape,
          const std::string& name) -> absl::StatusOr<Tensor*> {
    const DType dtype = options.weight_dtype && !backends_.empty()
                            ? options.weight_dtype(name, backends_[b]->device())
                            : DType::kF32;
    FERRY_ASSIGN_OR_RETURN(
        Tensor * t, NewWeight(*weight_ctx_[b], std::move(shape), name, dtype));
    weight_backends_.emplace_back(t, b);
    return t;
  };
  FERRY_ASSIGN_OR_RETURN(
      tok_embd_, new_weight(embedding, {e, config.n_vocab}, "tok_embd"));
  const int64_t q = config.q_dim();
  const int64_t hd = config.head_dim();
  const int64_t ff = config.n_ff;
  for (int il = 0; il < config.n_layer; ++il) {
    const LayerPlacement& b = layer_placement[il];
    const std::string p = absl::StrCat("blk.", il, ".");
    LlamaLayer l;
    l.backend = b[0];
    FERRY_ASSIGN_OR_RETURN(l.attn_norm, new_weight(b[0], {e}, p + "attn_norm"));
    if (config.fused_qkv) {
      FERRY_ASSIGN_OR_RETURN(l.wqkv,
                             new_weight(b[0], {e, q + 2 * kv}, p + "attn_qkv"));
    } else {
      FERRY_ASSIGN_OR_RETURN(l.wq, new_weight(b[0], {e, q}, p + "attn_q"));
      FERRY_ASSIGN_OR_RETURN(l.wk, new_weight(b[0], {e, kv}, p + "attn_k"));
      FERRY_ASSIGN_OR_RETURN(l.wv, new_weight(b[0], {e, kv}, p + "attn_v"));
    }
    if (config.attn_bias) {
      FERRY_ASSIGN_OR_RETURN(l.bq, new_weight(b[0], {q}, p + "attn_q.bias"));
      FERRY_ASSIGN_OR_RETURN(l.bk, new_weight(b[0], {kv}, p + "attn_k.bias"));
      FERRY_ASSIGN_OR_RETURN(l.bv, new_weight(b[0], {kv}, p + "attn_v.bias"));
    }
    if (config.qk_norm) {
      FERRY_ASSIGN_OR_RETURN(l.q_norm,
                             new_weight(b[0], {hd}, p + "attn_q_norm"));
      FERRY_ASSIGN_OR_RETURN(l.k_norm,
                             new_weight(b[0], {hd}, p + "attn_k_norm"));
    }
    if (config.rope_freq_factors) {
      FERRY_ASSIGN_OR_RETURN(l.rope_freqs,
                             new_weight(b[0], {hd / 2}, p + "rope_freqs"));
    }
    FERRY_ASSIGN_OR_RETURN(l.wo, new_weight(b[1], {q, e}, p + "attn_output"));
    if (config.post_norms) {
      FERRY_ASSIGN_OR_RETURN(l.attn_post_norm,
                             new_weight(b[1], {e}, p + "post_attention_norm"));
    }
    FERRY_ASSIGN_OR_RETURN(l.ffn_norm, new_weight(b[2], {e}, p + "ffn_norm"));
    if (config.fused_gate_up) {
      // Gate and up stay together: the piece of the gate.
      FERRY_ASSIGN_OR_RETURN(l.w_up,
                             new_weight(b[2], {e, 2 * ff}, p + "ffn_up"));
    } else {
      FERRY_ASSIGN_OR_RETURN(l.w_gate,
                             new_weight(b[2], {e, ff}, p + "ffn_gate"));
      FERRY_ASSIGN_OR_RETURN(l.w_up, new_weight(b[3], {e, ff}, p + "ffn_up"));
    }
    FERRY_ASSIGN_OR_RETURN(l.w_down, new_weight(b[4], {ff, e}, p + "ffn_down"));
    if (config.post_norms) {
      FERRY_ASSIGN_OR_RETURN(l.ffn_post_norm,
                             new_weight(b[4], {e}, p + "post_ffw_norm"));
    }
    layers_.push_back(l);
  }
  FERRY_ASSIGN_OR_RETURN(output_norm_, new_weight(output, {e}, "output_norm"));
  if (config.tie_embeddings) {
    output_ = tok_embd_;
  } else {
    FERRY_ASSIGN_OR_RETURN(output_,
                           new_weight(output, {e, config.n_vocab}, "output"));
  }
  return absl::OkStatus();
}

std::vector<Tensor*> LlamaModel::Weights() const {
  std::vector<Tensor*> out = {tok_embd_};
  for (const LlamaLayer& l : layers_) {
    for (Tensor* t :
         {l.attn_norm, l.wqkv, l.wq, l.wk, l.wv, l.bq, l.bk, l.bv, l.q_norm,
          l.k_norm, l.rope_freqs, l.wo, l.attn_post_norm, l.ffn_norm, l.w_gate,
          l.w_up, l.w_down, l.ffn_post_norm}) {
      if (t != nullptr) out.push_back(t);
    }
  }
  out.push_back(output_norm_);
  if (output_ != tok_embd_) out.push_back(output_);
  return out;
}

std::vector<std::pair<Tensor*, int>> LlamaModel::WeightBackends() const {
  if (backends_.empty()) return {};
  return weight_backends_;
}

Tensor* LlamaModel::FindWeight(absl::string_view name) const {
  for (Tensor* t : Weights()) {
    if (t->name == name) return t;
  }
  return nullptr;
}

std::string LlamaModel::DescribePlacement() const {
  std::string out;
  const int nb = static_cast<int>(backends_.size());
  const auto backend_of = [&](const Tensor* w) {
    for (const auto& [t, b] : weight_backends_) {
      if (t == w) return b;
    }
    return -1;
  };
  // The matrices of layer il on backend b, where the layer is split.
  const auto part_on = [&](int il, int b) {
    const LlamaLayer& l = layers_[il];
    std::vector<std::string> names;
    bool whole = true;
    for (const Tensor* w :
         {l.wqkv, l.wq, l.wk, l.wv, l.wo, l.w_gate, l.w_up, l.w_down}) {
      if (w == nullptr) continue;
      if (backend_of(w) == b) {
        names.push_back(w->name);
      } else {
        whole = false;
      }
    }
    return whole ? std::string() : absl::StrJoin(names, ", ");
  };
  for (int b = 0; b < nb; ++b) {
    int first = -1, last = -1;
    for (int il = 0; il < config_.n_layer; ++il) {
      const LlamaLayer& l = layers_[il];
      bool here = false;
      for (const Tensor* w :
           {l.attn_norm, l.wo, l.ffn_norm, l.w_up, l.w_down}) {
        here = here || backend_of(w) == b;
      }
      if (!here) continue;
      if (first < 0) first = il;
      last = il;
    }
    absl::StrAppend(&out, "  ", backends_[b]->name(), ": ");
    if (first < 0) {
      absl::StrAppend(&out, "no layers");
    } else {
      absl::StrAppend(&out, "layers ", first, "-", last);
      for (int il : {first, last}) {
        const std::string part = part_on(il, b);
        if (!part.empty()) absl::StrAppend(&out, " (of ", il, ": ", part, ")");
        if (first == last) break;
      }
    }
    if (b == embedding_backend_) absl::StrAppend(&out, " + token embedding");
    if (b == output_backend_) absl::StrAppend(&out, " + output");
    absl::StrAppend(&out, " (weights ", MiB(weight_bytes_[b]), ")\n");
  }
  return out;
}

absl::Status LlamaModel::FillRandom(uint64_t seed) {
  std::vector<float> values;
  for (Tensor* t : Weights()) {
    if (t->dtype != DType::kF32) {
      return absl::FailedPreconditionError(
          absl::StrCat("llama: FillRandom needs f32 weights; '", t->name,
                       "' is ", DTypeName(t->dtype)));
    }
    values.resize(static_cast<size_t>(t->NumElements()));
    RandomWeightValues(t->name, t->ne[1], seed, absl::MakeSpan(values));
    FERRY_RETURN_IF_ERROR(SetTensorData(*t, values.data()));
  }
  return absl::OkStatus();
}

}  // namespace ferry::llama
