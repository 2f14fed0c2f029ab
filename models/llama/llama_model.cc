#include "ferry/examples/llama_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ferry/alloc/weights.h"
#include "ferry/graph/ops.h"
#include "ferry/runtime/status_macros.h"

namespace ferry::examples {
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
                                  const std::string& name) {
  FERRY_ASSIGN_OR_RETURN(Tensor * t, ctx.NewTensor(DType::kF32, shape, name));
  SetWeight(*t);
  return t;
}

std::string MiB(size_t bytes) {
  return absl::StrFormat("%.1f MiB", static_cast<double>(bytes) / (1 << 20));
}

}  // namespace

absl::Status LlamaConfig::Validate() const {
  auto bad = [](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("llama config: ", what));
  };
  if (n_layer < 1) return bad("layers must be >= 1");
  if (n_embd < 2 || n_head < 1 || n_embd % n_head != 0) {
    return bad(absl::StrCat("embd (", n_embd, ") must be a multiple of heads (",
                            n_head, ")"));
  }
  if (head_dim() % 2 != 0) {
    return bad(absl::StrCat("head size embd/heads = ", head_dim(),
                            " must be even (rope)"));
  }
  if (n_head_kv < 1 || n_head % n_head_kv != 0) {
    return bad(absl::StrCat("heads (", n_head,
                            ") must be a multiple of kv heads (", n_head_kv,
                            ")"));
  }
  if (n_ff < 1) return bad("ff must be >= 1");
  if (n_vocab < 2) return bad("vocab must be >= 2");
  if (n_ctx < 1) return bad("ctx must be >= 1");
  if (!(eps >= 0) || !std::isfinite(eps)) return bad("eps must be >= 0");
  return absl::OkStatus();
}

int64_t LlamaConfig::NumParams() const {
  const int64_t per_layer = 2 * n_embd + 2 * n_embd * n_embd +
                            2 * n_embd * kv_dim() + 3 * n_embd * n_ff;
  return n_layer * per_layer + 2 * n_embd * n_vocab + n_embd;
}

std::string LlamaConfig::ToString() const {
  return absl::StrFormat(
      "layers=%d embd=%d heads=%d kv_heads=%d ff=%d vocab=%d ctx=%d "
      "(%.2fM params)",
      n_layer, n_embd, n_head, n_head_kv, n_ff, n_vocab, n_ctx,
      static_cast<double>(NumParams()) / 1e6);
}

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

  auto model = absl::WrapUnique(new LlamaModel());
  model->config_ = config;
  model->backends_ = backends;
  for (int b = 0; b < nb; ++b) {
    model->weight_ctx_.push_back(std::make_unique<Context>());
    model->cache_ctx_.push_back(std::make_unique<Context>());
  }
  // Layer il goes to the first backend whose cumulative share passes it,
  // unless the caller chose each layer's backend.
  std::vector<int> layer_backend(static_cast<size_t>(config.n_layer));
  if (!options.layer_backends.empty()) {
    if (static_cast<int>(options.layer_backends.size()) != config.n_layer) {
      return absl::InvalidArgumentError(
          absl::StrCat("llama: ", options.layer_backends.size(),
                       " layer backends for ", config.n_layer, " layers"));
    }
    layer_backend = options.layer_backends;
  } else {
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
      layer_backend[il] = b;
    }
  }
  for (int b : layer_backend) {
    if (b < 0 || b >= nb) {
      return absl::InvalidArgumentError(
          absl::StrCat("llama: layer backend ", b, " is not in [0, ", nb, ")"));
    }
  }
  const int embedding =
      options.embedding_backend < 0 ? nb - 1 : options.embedding_backend;
  const int output = options.output_backend < 0 ? layer_backend.back()
                                                : options.output_backend;
  if (embedding >= nb || output >= nb) {
    return absl::InvalidArgumentError(
        absl::StrCat("llama: embedding/output backend outside [0, ", nb, ")"));
  }
  model->embedding_backend_ = embedding;
  model->output_backend_ = output;

  const int64_t e = config.n_embd;
  const int64_t kv = config.kv_dim();
  const int cpu = nb - 1;
  FERRY_ASSIGN_OR_RETURN(model->tok_embd_,
                         NewWeight(*model->weight_ctx_[embedding],
                                   {e, config.n_vocab}, "tok_embd"));
  for (int il = 0; il < config.n_layer; ++il) {
    const int b = layer_backend[il];
    Context& ctx = *model->weight_ctx_[b];
    const std::string p = absl::StrCat("blk.", il, ".");
    LlamaLayer l;
    l.backend = b;
    FERRY_ASSIGN_OR_RETURN(l.attn_norm, NewWeight(ctx, {e}, p + "attn_norm"));
    FERRY_ASSIGN_OR_RETURN(l.wq, NewWeight(ctx, {e, e}, p + "attn_q"));
    FERRY_ASSIGN_OR_RETURN(l.wk, NewWeight(ctx, {e, kv}, p + "attn_k"));
    FERRY_ASSIGN_OR_RETURN(l.wv, NewWeight(ctx, {e, kv}, p + "attn_v"));
    FERRY_ASSIGN_OR_RETURN(l.wo, NewWeight(ctx, {e, e}, p + "attn_output"));
    FERRY_ASSIGN_OR_RETURN(l.ffn_norm, NewWeight(ctx, {e}, p + "ffn_norm"));
    FERRY_ASSIGN_OR_RETURN(l.w_gate,
                           NewWeight(ctx, {e, config.n_ff}, p + "ffn_gate"));
    FERRY_ASSIGN_OR_RETURN(l.w_up,
                           NewWeight(ctx, {e, config.n_ff}, p + "ffn_up"));
    FERRY_ASSIGN_OR_RETURN(l.w_down,
                           NewWeight(ctx, {config.n_ff, e}, p + "ffn_down"));
    if (options.kv_cache) {
      Context& cctx = *model->cache_ctx_[b];
      FERRY_ASSIGN_OR_RETURN(
          l.k_cache,
          cctx.NewTensor(DType::kF32, {kv, config.n_ctx}, p + "k_cache"));
      FERRY_ASSIGN_OR_RETURN(
          l.v_cache,
          cctx.NewTensor(DType::kF32, {kv, config.n_ctx}, p + "v_cache"));
    }
    model->layers_.push_back(l);
  }
  FERRY_ASSIGN_OR_RETURN(
      model->output_norm_,
      NewWeight(*model->weight_ctx_[output], {e}, "output_norm"));
  FERRY_ASSIGN_OR_RETURN(
      model->output_,
      NewWeight(*model->weight_ctx_[output], {e, config.n_vocab}, "output"));

  // One weights buffer (and one cache buffer) per backend that has any.
  model->weight_bytes_.assign(nb, 0);
  model->cache_bytes_.assign(nb, 0);
  for (int i = 0; i < nb; ++i) {
    BufferType* type = backends[i]->device().default_buffer_type();
    if (i == cpu && options.cpu_weights_type != nullptr) {
      type = options.cpu_weights_type;
    }
    for (int which = 0; which < 2; ++which) {
      Context& ctx =
          which == 0 ? *model->weight_ctx_[i] : *model->cache_ctx_[i];
      if (ctx.num_tensors() == 0) continue;
      auto buffers = AllocateWeights(ctx, *type);
      if (!buffers.ok()) {
        return absl::Status(buffers.status().code(),
                            absl::StrCat("llama: allocating ",
                                         which == 0 ? "weights" : "KV cache",
                                         " on ", backends[i]->name(), ": ",
                                         buffers.status().message()));
      }
      for (auto& buffer : *buffers) {
        (which == 0 ? model->weight_bytes_ : model->cache_bytes_)[i] +=
            buffer->size();
        model->buffers_.push_back(std::move(buffer));
      }
    }
  }
  FERRY_RETURN_IF_ERROR(model->ClearKvCache());
  return model;
}

std::vector<Tensor*> LlamaModel::Weights() const {
  std::vector<Tensor*> out = {tok_embd_};
  for (const LlamaLayer& l : layers_) {
    out.insert(out.end(), {l.attn_norm, l.wq, l.wk, l.wv, l.wo, l.ffn_norm,
                           l.w_gate, l.w_up, l.w_down});
  }
  out.push_back(output_norm_);
  out.push_back(output_);
  return out;
}

std::string LlamaModel::DescribePlacement() const {
  std::string out;
  const int nb = static_cast<int>(backends_.size());
  for (int b = 0; b < nb; ++b) {
    int first = -1, last = -1;
    for (int il = 0; il < config_.n_layer; ++il) {
      if (layers_[il].backend != b) continue;
      if (first < 0) first = il;
      last = il;
    }
    absl::StrAppend(&out, "  ", backends_[b]->name(), ": ");
    if (first < 0) {
      absl::StrAppend(&out, "no layers");
    } else {
      absl::StrAppend(&out, "layers ", first, "-", last);
    }
    if (b == embedding_backend_) absl::StrAppend(&out, " + token embedding");
    if (b == output_backend_) absl::StrAppend(&out, " + output");
    absl::StrAppend(&out, " (weights ", MiB(weight_bytes_[b]), ", KV cache ",
                    MiB(cache_bytes_[b]), ")\n");
  }
  return out;
}

absl::Status LlamaModel::FillRandom(uint64_t seed) {
  std::vector<float> values;
  for (Tensor* t : Weights()) {
    values.resize(static_cast<size_t>(t->NumElements()));
    RandomWeightValues(t->name, t->ne[1], seed, absl::MakeSpan(values));
    FERRY_RETURN_IF_ERROR(SetTensorData(*t, values.data()));
  }
  return ClearKvCache();
}

absl::Status LlamaModel::ClearKvCache() {
  for (const LlamaLayer& l : layers_) {
    for (Tensor* t : {l.k_cache, l.v_cache}) {
      if (t == nullptr) continue;
      FERRY_RETURN_IF_ERROR(t->buffer->MemsetTensor(
          *t, 0, 0, static_cast<size_t>(t->NumBytes())));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<LlamaGraph> BuildLlamaGraph(const LlamaModel& model,
                                           const LlamaGraphOptions& options) {
  const LlamaConfig& c = model.config();
  const int64_t nt = options.n_tokens;
  const int64_t n_past = options.use_kv_cache ? options.n_past : 0;
  const int64_t n_kv = n_past + nt;
  const int64_t hd = c.head_dim();
  const int64_t kv = c.kv_dim();
  if (nt < 1) return absl::InvalidArgumentError("llama: n_tokens must be >= 1");
  if (options.use_kv_cache) {
    if (!model.has_kv_cache()) {
      return absl::FailedPreconditionError("llama: model has no KV cache");
    }
    if (n_past < 0 || n_kv > c.n_ctx) {
      return absl::OutOfRangeError(absl::StrCat("llama: ", n_past, " + ", nt,
                                                " tokens exceed the context (",
                                                c.n_ctx, ")"));
    }
  }
  LlamaGraph g;
  g.n_tokens = nt;
  g.n_past = n_past;
  g.ctx = std::make_unique<Context>();
  Context& ctx = *g.ctx;
  FERRY_ASSIGN_OR_RETURN(g.tokens, ctx.NewTensor(DType::kI32, {nt}, "tokens"));
  FERRY_ASSIGN_OR_RETURN(g.pos, ctx.NewTensor(DType::kI32, {nt}, "pos"));
  FERRY_ASSIGN_OR_RETURN(g.mask,
                         ctx.NewTensor(DType::kF32, {n_kv, nt}, "mask"));
  SetInput(*g.tokens);
  SetInput(*g.pos);
  SetInput(*g.mask);
  const float kq_scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<Tensor*> roots;

  FERRY_ASSIGN_OR_RETURN(Tensor * inp,
                         GetRows(ctx, model.tok_embd(), g.tokens));
  for (const LlamaLayer& l : model.layers()) {
    FERRY_ASSIGN_OR_RETURN(Tensor * cur, RmsNorm(ctx, inp, c.eps));
    FERRY_ASSIGN_OR_RETURN(cur, Mul(ctx, cur, l.attn_norm));
    FERRY_ASSIGN_OR_RETURN(Tensor * q, MulMat(ctx, l.wq, cur));
    FERRY_ASSIGN_OR_RETURN(Tensor * k, MulMat(ctx, l.wk, cur));
    FERRY_ASSIGN_OR_RETURN(Tensor * v, MulMat(ctx, l.wv, cur));
    FERRY_ASSIGN_OR_RETURN(q, Reshape(ctx, q, {hd, c.n_head, nt}));
    FERRY_ASSIGN_OR_RETURN(k, Reshape(ctx, k, {hd, c.n_head_kv, nt}));
    FERRY_ASSIGN_OR_RETURN(v, Reshape(ctx, v, {hd, c.n_head_kv, nt}));
    FERRY_ASSIGN_OR_RETURN(
        q, Rope(ctx, q, g.pos, static_cast<int>(hd), RopeMode::kNormal));
    FERRY_ASSIGN_OR_RETURN(
        k, Rope(ctx, k, g.pos, static_cast<int>(hd), RopeMode::kNormal));
    if (options.use_kv_cache) {
      // Store this step's K and V rows at n_past.
      const int64_t row = l.k_cache->nb[1];
      FERRY_ASSIGN_OR_RETURN(Tensor * k_dst,
                             View2D(ctx, l.k_cache, kv, nt, row, n_past * row));
      FERRY_ASSIGN_OR_RETURN(Tensor * v_dst,
                             View2D(ctx, l.v_cache, kv, nt, row, n_past * row));
      FERRY_ASSIGN_OR_RETURN(Tensor * k_store, Cpy(ctx, k, k_dst));
      FERRY_ASSIGN_OR_RETURN(Tensor * v_store, Cpy(ctx, v, v_dst));
      roots.push_back(k_store);
      roots.push_back(v_store);
      if (n_past > 0) {
        // Attend over the cached rows followed by the current ones.
        FERRY_ASSIGN_OR_RETURN(
            Tensor * k_past,
            View3D(ctx, l.k_cache, hd, c.n_head_kv, n_past, hd * 4, row, 0));
        FERRY_ASSIGN_OR_RETURN(
            Tensor * v_past,
            View3D(ctx, l.v_cache, hd, c.n_head_kv, n_past, hd * 4, row, 0));
        FERRY_ASSIGN_OR_RETURN(k, Concat(ctx, k_past, k, 2));
        FERRY_ASSIGN_OR_RETURN(v, Concat(ctx, v_past, v, 2));
      }
    }
    FERRY_ASSIGN_OR_RETURN(q, Permute(ctx, q, 0, 2, 1, 3));  // [hd, nt, nh]
    FERRY_ASSIGN_OR_RETURN(k, Permute(ctx, k, 0, 2, 1, 3));  // [hd, kv, nkv]
    FERRY_ASSIGN_OR_RETURN(Tensor * kq, MulMat(ctx, k, q));  // [n_kv, nt, nh]
    FERRY_ASSIGN_OR_RETURN(kq, SoftMax(ctx, kq, g.mask, kq_scale));
    FERRY_ASSIGN_OR_RETURN(v, Permute(ctx, v, 1, 2, 0, 3));  // [n_kv, hd, nkv]
    FERRY_ASSIGN_OR_RETURN(v, Cont(ctx, v));
    FERRY_ASSIGN_OR_RETURN(Tensor * kqv, MulMat(ctx, v, kq));  // [hd, nt, nh]
    FERRY_ASSIGN_OR_RETURN(kqv, Permute(ctx, kqv, 0, 2, 1, 3));
    FERRY_ASSIGN_OR_RETURN(cur, Cont(ctx, kqv));
    FERRY_ASSIGN_OR_RETURN(cur, Reshape(ctx, cur, {c.n_embd, nt}));
    FERRY_ASSIGN_OR_RETURN(cur, MulMat(ctx, l.wo, cur));
    FERRY_ASSIGN_OR_RETURN(Tensor * ffn_inp, Add(ctx, cur, inp));
    FERRY_ASSIGN_OR_RETURN(cur, RmsNorm(ctx, ffn_inp, c.eps));
    FERRY_ASSIGN_OR_RETURN(cur, Mul(ctx, cur, l.ffn_norm));
    FERRY_ASSIGN_OR_RETURN(Tensor * gate, MulMat(ctx, l.w_gate, cur));
    FERRY_ASSIGN_OR_RETURN(Tensor * up, MulMat(ctx, l.w_up, cur));
    FERRY_ASSIGN_OR_RETURN(gate, Silu(ctx, gate));
    FERRY_ASSIGN_OR_RETURN(cur, Mul(ctx, gate, up));
    FERRY_ASSIGN_OR_RETURN(cur, MulMat(ctx, l.w_down, cur));
    FERRY_ASSIGN_OR_RETURN(inp, Add(ctx, cur, ffn_inp));
  }
  FERRY_ASSIGN_OR_RETURN(Tensor * cur, RmsNorm(ctx, inp, c.eps));
  FERRY_ASSIGN_OR_RETURN(cur, Mul(ctx, cur, model.output_norm()));
  if (options.last_token_only) {
    FERRY_ASSIGN_OR_RETURN(
        cur, View2D(ctx, cur, c.n_embd, 1, cur->nb[1], (nt - 1) * cur->nb[1]));
  }
  FERRY_ASSIGN_OR_RETURN(g.logits, MulMat(ctx, model.output(), cur));
  g.logits->name = "logits";
  SetOutput(*g.logits);
  roots.push_back(g.logits);
  FERRY_ASSIGN_OR_RETURN(g.graph, Graph::Build(roots));
  return g;
}

absl::StatusOr<LlamaInputs> MakeLlamaInputs(const LlamaGraph& graph,
                                            int64_t n_vocab,
                                            absl::Span<const int32_t> tokens) {
  const int64_t nt = graph.n_tokens;
  if (static_cast<int64_t>(tokens.size()) != nt) {
    return absl::InvalidArgumentError(
        absl::StrCat("llama: ", tokens.size(), " tokens for a graph of ", nt));
  }
  for (int32_t id : tokens) {
    if (id < 0 || id >= n_vocab) {
      return absl::OutOfRangeError(
          absl::StrCat("llama: token ", id, " outside [0, ", n_vocab, ")"));
    }
  }
  LlamaInputs in;
  in.tokens.assign(tokens.begin(), tokens.end());
  const int64_t n_kv = graph.n_past + nt;
  in.pos.resize(static_cast<size_t>(nt));
  std::iota(in.pos.begin(), in.pos.end(), static_cast<int32_t>(graph.n_past));
  in.mask.resize(static_cast<size_t>(n_kv * nt));
  for (int64_t q = 0; q < nt; ++q) {
    for (int64_t k = 0; k < n_kv; ++k) {
      in.mask[static_cast<size_t>(q * n_kv + k)] =
          k <= graph.n_past + q ? 0.0f
                                : -std::numeric_limits<float>::infinity();
    }
  }
  return in;
}

absl::Status SetLlamaInputs(const LlamaGraph& graph, int64_t n_vocab,
                            absl::Span<const int32_t> tokens) {
  FERRY_ASSIGN_OR_RETURN(LlamaInputs in,
                         MakeLlamaInputs(graph, n_vocab, tokens));
  FERRY_RETURN_IF_ERROR(SetTensorData(*graph.tokens, in.tokens.data()));
  FERRY_RETURN_IF_ERROR(SetTensorData(*graph.pos, in.pos.data()));
  FERRY_RETURN_IF_ERROR(SetTensorData(*graph.mask, in.mask.data()));
  return absl::OkStatus();
}

std::vector<int32_t> Argmax(absl::Span<const float> logits, int64_t n_vocab) {
  std::vector<int32_t> out;
  for (size_t r = 0; r + n_vocab <= logits.size(); r += n_vocab) {
    const float* row = logits.data() + r;
    out.push_back(
        static_cast<int32_t>(std::max_element(row, row + n_vocab) - row));
  }
  return out;
}

}  // namespace ferry::examples
