#include "ferry/alloc/testing/llama_graph.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ferry/alloc/weights.h"
#include "ferry/backends/buffer.h"
#include "ferry/graph/ops.h"
#include "ferry/graph/testing/reference.h"
#include "ferry/runtime/status_macros.h"

namespace ferry::testing {
namespace {

absl::StatusOr<Tensor*> Weight(Context& ctx, std::vector<int64_t> shape,
                               const std::string& name) {
  FERRY_ASSIGN_OR_RETURN(Tensor * t, ctx.NewTensor(DType::kF32, shape, name));
  SetWeight(*t);
  return t;
}

}  // namespace

absl::StatusOr<std::unique_ptr<LlamaModel>> MakeLlamaModel(
    const LlamaConfig& config) {
  if (config.n_head <= 0 || config.n_embd % config.n_head != 0 ||
      (config.n_embd / config.n_head) % 2 != 0) {
    return absl::InvalidArgumentError("llama: bad n_embd / n_head");
  }
  auto model = std::make_unique<LlamaModel>();
  model->config = config;
  Context& ctx = model->ctx;
  const int64_t e = config.n_embd;
  FERRY_ASSIGN_OR_RETURN(model->tok_embd,
                         Weight(ctx, {e, config.n_vocab}, "tok_embd"));
  for (int il = 0; il < config.n_layer; ++il) {
    const std::string p = absl::StrCat("blk.", il, ".");
    LlamaLayer l;
    FERRY_ASSIGN_OR_RETURN(l.attn_norm, Weight(ctx, {e}, p + "attn_norm"));
    FERRY_ASSIGN_OR_RETURN(l.wq, Weight(ctx, {e, e}, p + "wq"));
    FERRY_ASSIGN_OR_RETURN(l.wk, Weight(ctx, {e, e}, p + "wk"));
    FERRY_ASSIGN_OR_RETURN(l.wv, Weight(ctx, {e, e}, p + "wv"));
    FERRY_ASSIGN_OR_RETURN(l.wo, Weight(ctx, {e, e}, p + "wo"));
    FERRY_ASSIGN_OR_RETURN(l.ffn_norm, Weight(ctx, {e}, p + "ffn_norm"));
    FERRY_ASSIGN_OR_RETURN(l.w_gate,
                           Weight(ctx, {e, config.n_ff}, p + "ffn_gate"));
    FERRY_ASSIGN_OR_RETURN(l.w_up, Weight(ctx, {e, config.n_ff}, p + "ffn_up"));
    FERRY_ASSIGN_OR_RETURN(l.w_down,
                           Weight(ctx, {config.n_ff, e}, p + "ffn_down"));
    model->layers.push_back(l);
  }
  FERRY_ASSIGN_OR_RETURN(model->output_norm, Weight(ctx, {e}, "output_norm"));
  FERRY_ASSIGN_OR_RETURN(model->output,
                         Weight(ctx, {e, config.n_vocab}, "output"));
  return model;
}

absl::StatusOr<LlamaGraph> BuildLlamaGraph(const LlamaModel& model,
                                           int64_t n_tokens,
                                           bool last_token_only) {
  const LlamaConfig& c = model.config;
  const int64_t nt = n_tokens;
  const int64_t hd = c.n_embd / c.n_head;
  LlamaGraph g;
  g.ctx = std::make_unique<Context>();
  Context& ctx = *g.ctx;
  FERRY_ASSIGN_OR_RETURN(g.tokens, ctx.NewTensor(DType::kI32, {nt}, "tokens"));
  FERRY_ASSIGN_OR_RETURN(g.pos, ctx.NewTensor(DType::kI32, {nt}, "pos"));
  FERRY_ASSIGN_OR_RETURN(g.mask, ctx.NewTensor(DType::kF32, {nt, nt}, "mask"));
  SetInput(*g.tokens);
  SetInput(*g.pos);
  SetInput(*g.mask);
  const float kq_scale = 1.0f / std::sqrt(static_cast<float>(hd));

  FERRY_ASSIGN_OR_RETURN(Tensor * inp, GetRows(ctx, model.tok_embd, g.tokens));
  for (const LlamaLayer& l : model.layers) {
    FERRY_ASSIGN_OR_RETURN(Tensor * cur, RmsNorm(ctx, inp, c.eps));
    FERRY_ASSIGN_OR_RETURN(cur, Mul(ctx, cur, l.attn_norm));
    FERRY_ASSIGN_OR_RETURN(Tensor * q, MulMat(ctx, l.wq, cur));
    FERRY_ASSIGN_OR_RETURN(Tensor * k, MulMat(ctx, l.wk, cur));
    FERRY_ASSIGN_OR_RETURN(Tensor * v, MulMat(ctx, l.wv, cur));
    FERRY_ASSIGN_OR_RETURN(q, Reshape(ctx, q, {hd, c.n_head, nt}));
    FERRY_ASSIGN_OR_RETURN(k, Reshape(ctx, k, {hd, c.n_head, nt}));
    FERRY_ASSIGN_OR_RETURN(
        q, Rope(ctx, q, g.pos, static_cast<int>(hd), RopeMode::kNormal));
    FERRY_ASSIGN_OR_RETURN(
        k, Rope(ctx, k, g.pos, static_cast<int>(hd), RopeMode::kNormal));
    FERRY_ASSIGN_OR_RETURN(q, Permute(ctx, q, 0, 2, 1, 3));
    FERRY_ASSIGN_OR_RETURN(k, Permute(ctx, k, 0, 2, 1, 3));
    FERRY_ASSIGN_OR_RETURN(Tensor * kq, MulMat(ctx, k, q));
    FERRY_ASSIGN_OR_RETURN(kq, SoftMax(ctx, kq, g.mask, kq_scale));
    FERRY_ASSIGN_OR_RETURN(v, Reshape(ctx, v, {hd, c.n_head, nt}));
    FERRY_ASSIGN_OR_RETURN(v, Permute(ctx, v, 1, 2, 0, 3));
    FERRY_ASSIGN_OR_RETURN(v, Cont(ctx, v));
    FERRY_ASSIGN_OR_RETURN(Tensor * kqv, MulMat(ctx, v, kq));
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
  FERRY_ASSIGN_OR_RETURN(cur, Mul(ctx, cur, model.output_norm));
  if (last_token_only) {
    FERRY_ASSIGN_OR_RETURN(
        cur, View2D(ctx, cur, c.n_embd, 1, cur->nb[1], (nt - 1) * cur->nb[1]));
  }
  FERRY_ASSIGN_OR_RETURN(g.logits, MulMat(ctx, model.output, cur));
  g.logits->name = "logits";
  SetOutput(*g.logits);
  Tensor* outputs[] = {g.logits};
  FERRY_ASSIGN_OR_RETURN(g.graph, Graph::Build(outputs));
  return g;
}

void FakePlaceWeights(Context& ctx) {
  // Never dereferenced; 4096-aligned so any alignment check passes.
  static char* const kFake = reinterpret_cast<char*>(uintptr_t{1} << 40);
  for (Tensor* t : ctx.tensors()) {
    if (t->data == nullptr) t->data = kFake;
  }
}

absl::StatusOr<PlacedLlamaModel> MakePlacedLlamaModel(const LlamaConfig& config,
                                                      BufferType& type,
                                                      float matrix_scale) {
  PlacedLlamaModel placed;
  FERRY_ASSIGN_OR_RETURN(placed.model, MakeLlamaModel(config));
  FERRY_ASSIGN_OR_RETURN(placed.buffers,
                         AllocateWeights(placed.model->ctx, type));
  uint64_t seed = 7;
  for (Tensor* t : placed.model->ctx.tensors()) {
    Context host_ctx;
    FERRY_ASSIGN_OR_RETURN(
        Tensor * host,
        host_ctx.NewTensor(t->dtype, {t->ne[0], t->ne[1], t->ne[2], t->ne[3]}));
    FERRY_RETURN_IF_ERROR(host_ctx.AllocateHostData());
    // Norm weights near 1, matrices small: keeps activations well scaled.
    const bool norm = t->ne[1] == 1;
    FERRY_RETURN_IF_ERROR(FillRandom(*host, seed++, norm ? 0.9f : -matrix_scale,
                                     norm ? 1.1f : matrix_scale));
    FERRY_RETURN_IF_ERROR(SetTensorData(*t, host->data));
  }
  return placed;
}

absl::Status FillLlamaInputs(const LlamaGraph& graph, int64_t n_vocab,
                             uint64_t seed) {
  const int64_t nt = graph.tokens->ne[0];
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(nt));
  std::vector<int32_t> pos(static_cast<size_t>(nt));
  for (int64_t i = 0; i < nt; ++i) {
    ids[static_cast<size_t>(i)] = static_cast<int32_t>(rng() % n_vocab);
    pos[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  }
  std::vector<float> mask(static_cast<size_t>(nt * nt));
  for (int64_t q = 0; q < nt; ++q) {
    for (int64_t k = 0; k < nt; ++k) {
      mask[static_cast<size_t>(q * nt + k)] =
          k <= q ? 0.0f : -std::numeric_limits<float>::infinity();
    }
  }
  auto set = [](Tensor& t, const void* data, size_t bytes) -> absl::Status {
    if (t.buffer != nullptr) return SetTensorData(t, data, 0, bytes);
    if (t.data == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("llama input '", t.name, "' has no memory"));
    }
    std::memcpy(t.data, data, bytes);
    return absl::OkStatus();
  };
  FERRY_RETURN_IF_ERROR(set(*graph.tokens, ids.data(), ids.size() * 4));
  FERRY_RETURN_IF_ERROR(set(*graph.pos, pos.data(), pos.size() * 4));
  FERRY_RETURN_IF_ERROR(set(*graph.mask, mask.data(), mask.size() * 4));
  return absl::OkStatus();
}

}  // namespace ferry::testing
