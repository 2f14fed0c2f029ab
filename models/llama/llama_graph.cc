#include "ferry/models/llama/llama_graph.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "ferry/backends/buffer.h"
#include "ferry/graph/ops.h"
#include "ferry/runtime/status_macros.h"

namespace ferry::llama {
namespace internal {

absl::StatusOr<Tensor*> BuildLlamaBody(const LlamaModel& model, Context& ctx,
                                       Tensor* tokens, Tensor* pos,
                                       Tensor* mask, AttendFn attend,
                                       void* state) {
  const LlamaConfig& c = model.config();
  const int64_t nt = tokens->ne[0];
  const int64_t hd = c.head_dim();
  const float kq_scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int n_rot = static_cast<int>(hd);

  FERRY_ASSIGN_OR_RETURN(Tensor * inp, GetRows(ctx, model.tok_embd(), tokens));
  inp->name = "inp_embd";  // Names the tensors that cross stages.
  for (int il = 0; il < c.n_layer; ++il) {
    const LlamaLayer& l = model.layers()[il];
    FERRY_ASSIGN_OR_RETURN(Tensor * cur, RmsNorm(ctx, inp, c.eps));
    FERRY_ASSIGN_OR_RETURN(cur, Mul(ctx, cur, l.attn_norm));
    FERRY_ASSIGN_OR_RETURN(Tensor * q, MulMat(ctx, l.wq, cur));
    FERRY_ASSIGN_OR_RETURN(Tensor * k, MulMat(ctx, l.wk, cur));
    FERRY_ASSIGN_OR_RETURN(Tensor * v, MulMat(ctx, l.wv, cur));
    FERRY_ASSIGN_OR_RETURN(q, Reshape(ctx, q, {hd, c.n_head, nt}));
    FERRY_ASSIGN_OR_RETURN(k, Reshape(ctx, k, {hd, c.head_count_kv(), nt}));
    FERRY_ASSIGN_OR_RETURN(v, Reshape(ctx, v, {hd, c.head_count_kv(), nt}));
    FERRY_ASSIGN_OR_RETURN(
        q, Rope(ctx, q, pos, n_rot, c.rope_mode, c.rope_freq_base));
    FERRY_ASSIGN_OR_RETURN(
        k, Rope(ctx, k, pos, n_rot, c.rope_mode, c.rope_freq_base));
    FERRY_ASSIGN_OR_RETURN(AttentionKv kv, attend(state, ctx, il, k, v));
    FERRY_ASSIGN_OR_RETURN(q, Permute(ctx, q, 0, 2, 1, 3));     // [hd, nt, nh]
    FERRY_ASSIGN_OR_RETURN(k, Permute(ctx, kv.k, 0, 2, 1, 3));  // [hd, n, nkv]
    FERRY_ASSIGN_OR_RETURN(Tensor * kq, MulMat(ctx, k, q));     // [n, nt, nh]
    FERRY_ASSIGN_OR_RETURN(kq, SoftMax(ctx, kq, mask, kq_scale));
    FERRY_ASSIGN_OR_RETURN(v, Permute(ctx, kv.v, 1, 2, 0, 3));  // [n, hd, nkv]
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
    inp->name = absl::StrCat("blk.", il, ".out");
  }
  FERRY_ASSIGN_OR_RETURN(Tensor * cur, RmsNorm(ctx, inp, c.eps));
  return Mul(ctx, cur, model.output_norm());
}

}  // namespace internal

namespace {

// Attention within the current tokens.
absl::StatusOr<internal::AttentionKv> AttendCurrent(void*, Context&, int,
                                                    Tensor* k, Tensor* v) {
  return internal::AttentionKv{k, v};
}

absl::Status WriteInput(Tensor& t, const void* data, size_t bytes) {
  if (t.buffer != nullptr) return SetTensorData(t, data, 0, bytes);
  if (t.data == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("llama input '", t.name, "' has no memory"));
  }
  std::memcpy(t.data, data, bytes);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LlamaGraph> BuildLlamaGraph(const LlamaModel& model,
                                           const LlamaGraphOptions& options) {
  const LlamaConfig& c = model.config();
  const int64_t nt = options.n_tokens;
  if (nt < 1) return absl::InvalidArgumentError("llama: n_tokens must be >= 1");
  LlamaGraph g;
  g.n_tokens = nt;
  g.ctx = std::make_unique<Context>();
  Context& ctx = *g.ctx;
  FERRY_ASSIGN_OR_RETURN(g.tokens, ctx.NewTensor(DType::kI32, {nt}, "tokens"));
  FERRY_ASSIGN_OR_RETURN(g.pos, ctx.NewTensor(DType::kI32, {nt}, "pos"));
  FERRY_ASSIGN_OR_RETURN(g.mask, ctx.NewTensor(DType::kF32, {nt, nt}, "mask"));
  ferry::SetInput(*g.tokens);
  ferry::SetInput(*g.pos);
  ferry::SetInput(*g.mask);
  FERRY_ASSIGN_OR_RETURN(
      Tensor * cur, internal::BuildLlamaBody(model, ctx, g.tokens, g.pos,
                                             g.mask, AttendCurrent, nullptr));
  if (options.last_token_only) {
    FERRY_ASSIGN_OR_RETURN(
        cur, View2D(ctx, cur, c.n_embd, 1, cur->nb[1], (nt - 1) * cur->nb[1]));
  }
  FERRY_ASSIGN_OR_RETURN(g.logits, MulMat(ctx, model.output(), cur));
  g.logits->name = "logits";
  SetOutput(*g.logits);
  Tensor* outputs[] = {g.logits};
  FERRY_ASSIGN_OR_RETURN(g.graph, Graph::Build(outputs));
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
  in.pos.resize(static_cast<size_t>(nt));
  std::iota(in.pos.begin(), in.pos.end(), 0);
  in.mask.resize(static_cast<size_t>(nt * nt));
  for (int64_t q = 0; q < nt; ++q) {
    for (int64_t k = 0; k < nt; ++k) {
      in.mask[static_cast<size_t>(q * nt + k)] =
          k <= q ? 0.0f : -std::numeric_limits<float>::infinity();
    }
  }
  return in;
}

absl::Status SetLlamaInputs(const LlamaGraph& graph, int64_t n_vocab,
                            absl::Span<const int32_t> tokens) {
  FERRY_ASSIGN_OR_RETURN(LlamaInputs in,
                         MakeLlamaInputs(graph, n_vocab, tokens));
  FERRY_RETURN_IF_ERROR(
      WriteInput(*graph.tokens, in.tokens.data(), in.tokens.size() * 4));
  FERRY_RETURN_IF_ERROR(
      WriteInput(*graph.pos, in.pos.data(), in.pos.size() * 4));
  return WriteInput(*graph.mask, in.mask.data(), in.mask.size() * 4);
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

}  // namespace ferry::llama
