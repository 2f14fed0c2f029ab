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

namespace {

// x * w, RMS-normed over rows first.
absl::StatusOr<Tensor*> NormTimes(Context& ctx, Tensor* x, Tensor* w,
                                  float eps) {
  FERRY_ASSIGN_OR_RETURN(Tensor * n, RmsNorm(ctx, x, eps));
  return Mul(ctx, n, w);
}

// cap * tanh(x * scale / cap).
absl::StatusOr<Tensor*> SoftCap(Context& ctx, Tensor* x, float scale,
                                float cap) {
  FERRY_ASSIGN_OR_RETURN(x, Scale(ctx, x, scale / cap));
  FERRY_ASSIGN_OR_RETURN(x, Tanh(ctx, x));
  return Scale(ctx, x, cap);
}

// Rows [first, first + rows) of every column of a [*, nt] matrix, as a
// contiguous [ne0, rows / ne0, nt] tensor (a piece of a fused product).
absl::StatusOr<Tensor*> Rows3D(Context& ctx, Tensor* m, int64_t first,
                               int64_t ne0, int64_t ne1) {
  const int64_t nt = m->ne[1];
  const int64_t es = static_cast<int64_t>(m->nb[0]);
  FERRY_ASSIGN_OR_RETURN(
      Tensor * v, View3D(ctx, m, ne0, ne1, nt, ne0 * es, m->nb[1], first * es));
  return Cont(ctx, v);
}

// Q, K and V of the current tokens, [head_dim, heads, n_tokens] each.
struct Qkv {
  Tensor* q;
  Tensor* k;
  Tensor* v;
};

absl::StatusOr<Qkv> Project(const LlamaConfig& c, const LlamaLayer& l,
                            Context& ctx, Tensor* cur) {
  const int64_t nt = cur->ne[1];
  const int64_t hd = c.head_dim();
  const int64_t nkv = c.head_count_kv();
  Qkv out;
  if (l.wqkv != nullptr) {
    FERRY_ASSIGN_OR_RETURN(Tensor * qkv, MulMat(ctx, l.wqkv, cur));
    FERRY_ASSIGN_OR_RETURN(out.q, Rows3D(ctx, qkv, 0, hd, c.n_head));
    FERRY_ASSIGN_OR_RETURN(out.k, Rows3D(ctx, qkv, c.q_dim(), hd, nkv));
    FERRY_ASSIGN_OR_RETURN(out.v,
                           Rows3D(ctx, qkv, c.q_dim() + c.kv_dim(), hd, nkv));
    return out;
  }
  FERRY_ASSIGN_OR_RETURN(out.q, MulMat(ctx, l.wq, cur));
  FERRY_ASSIGN_OR_RETURN(out.k, MulMat(ctx, l.wk, cur));
  FERRY_ASSIGN_OR_RETURN(out.v, MulMat(ctx, l.wv, cur));
  if (l.bq != nullptr) {
    FERRY_ASSIGN_OR_RETURN(out.q, Add(ctx, out.q, l.bq));
    FERRY_ASSIGN_OR_RETURN(out.k, Add(ctx, out.k, l.bk));
    FERRY_ASSIGN_OR_RETURN(out.v, Add(ctx, out.v, l.bv));
  }
  FERRY_ASSIGN_OR_RETURN(out.q, Reshape(ctx, out.q, {hd, c.n_head, nt}));
  FERRY_ASSIGN_OR_RETURN(out.k, Reshape(ctx, out.k, {hd, nkv, nt}));
  FERRY_ASSIGN_OR_RETURN(out.v, Reshape(ctx, out.v, {hd, nkv, nt}));
  return out;
}

// The gated feed-forward of normed `cur`.
absl::StatusOr<Tensor*> FeedForward(const LlamaConfig& c, const LlamaLayer& l,
                                    Context& ctx, Tensor* cur) {
  Tensor* gate;
  Tensor* up;
  if (l.w_gate == nullptr) {  // Fused: gate rows, then up rows.
    FERRY_ASSIGN_OR_RETURN(Tensor * gu, MulMat(ctx, l.w_up, cur));
    FERRY_ASSIGN_OR_RETURN(gate, Rows3D(ctx, gu, 0, c.n_ff, 1));
    FERRY_ASSIGN_OR_RETURN(up, Rows3D(ctx, gu, c.n_ff, c.n_ff, 1));
    FERRY_ASSIGN_OR_RETURN(gate, Reshape(ctx, gate, {c.n_ff, cur->ne[1]}));
    FERRY_ASSIGN_OR_RETURN(up, Reshape(ctx, up, {c.n_ff, cur->ne[1]}));
  } else {
    FERRY_ASSIGN_OR_RETURN(gate, MulMat(ctx, l.w_gate, cur));
    FERRY_ASSIGN_OR_RETURN(up, MulMat(ctx, l.w_up, cur));
  }
  FERRY_ASSIGN_OR_RETURN(gate, c.ffn_act == FfnActivation::kGeluTanh
                                   ? Gelu(ctx, gate)
                                   : Silu(ctx, gate));
  FERRY_ASSIGN_OR_RETURN(cur, Mul(ctx, gate, up));
  return MulMat(ctx, l.w_down, cur);
}

// Attention of q [hd, n_head, nt] over kv's keys and values, masked:
// [q_dim, nt].
absl::StatusOr<Tensor*> Attend(const LlamaConfig& c, Context& ctx, int il,
                               Tensor* q, const AttentionKv& kv, Tensor* mask,
                               Tensor* swa_mask, float kq_scale, int64_t nt) {
  FERRY_ASSIGN_OR_RETURN(q, Permute(ctx, q, 0, 2, 1, 3));  // [hd, nt, nh]
  FERRY_ASSIGN_OR_RETURN(Tensor * k,
                         Permute(ctx, kv.k, 0, 2, 1, 3));  // [hd, n, nkv]
  FERRY_ASSIGN_OR_RETURN(Tensor * kq, MulMat(ctx, k, q));  // [n, nt, nh]
  Tensor* layer_mask = c.IsSlidingLayer(il) ? swa_mask : mask;
  if (c.attn_softcap > 0) {
    FERRY_ASSIGN_OR_RETURN(kq, SoftCap(ctx, kq, kq_scale, c.attn_softcap));
    FERRY_ASSIGN_OR_RETURN(kq, SoftMax(ctx, kq, layer_mask, 1.0f));
  } else {
    FERRY_ASSIGN_OR_RETURN(kq, SoftMax(ctx, kq, layer_mask, kq_scale));
  }
  FERRY_ASSIGN_OR_RETURN(Tensor * v,
                         Permute(ctx, kv.v, 1, 2, 0, 3));  // [n, hd, nkv]
  FERRY_ASSIGN_OR_RETURN(v, Cont(ctx, v));
  FERRY_ASSIGN_OR_RETURN(Tensor * kqv, MulMat(ctx, v, kq));  // [hd, nt, nh]
  FERRY_ASSIGN_OR_RETURN(kqv, Permute(ctx, kqv, 0, 2, 1, 3));
  FERRY_ASSIGN_OR_RETURN(Tensor * cur, Cont(ctx, kqv));
  return Reshape(ctx, cur, {c.q_dim(), nt});
}

}  // namespace

absl::StatusOr<Tensor*> BuildLlamaBody(const LlamaModel& model, Context& ctx,
                                       Tensor* tokens, Tensor* pos,
                                       Tensor* mask, Tensor* swa_mask,
                                       AttendFn attend, void* state) {
  const LlamaConfig& c = model.config();
  const int64_t nt = tokens->ne[0];
  const int64_t hd = c.head_dim();
  const float kq_scale = c.attn_scale > 0
                             ? c.attn_scale
                             : 1.0f / std::sqrt(static_cast<float>(hd));
  const int n_rot = static_cast<int>(hd);
  if (c.sliding_window > 0 && swa_mask == nullptr) {
    return absl::InvalidArgumentError(
        "llama: a model with sliding-window layers needs their mask");
  }

  FERRY_ASSIGN_OR_RETURN(Tensor * inp, GetRows(ctx, model.tok_embd(), tokens));
  if (c.scale_embeddings) {
    FERRY_ASSIGN_OR_RETURN(
        inp, Scale(ctx, inp, std::sqrt(static_cast<float>(c.n_embd))));
  }
  inp->name = "inp_embd";  // Names the tensors that cross stages.
  for (int il = 0; il < c.n_layer; ++il) {
    const LlamaLayer& l = model.layers()[il];
    FERRY_ASSIGN_OR_RETURN(Tensor * cur,
                           NormTimes(ctx, inp, l.attn_norm, c.eps));
    FERRY_ASSIGN_OR_RETURN(Qkv qkv, Project(c, l, ctx, cur));
    Tensor* q = qkv.q;
    Tensor* k = qkv.k;
    if (l.q_norm != nullptr) {  // Per head, over head_dim.
      FERRY_ASSIGN_OR_RETURN(q, NormTimes(ctx, q, l.q_norm, c.eps));
      FERRY_ASSIGN_OR_RETURN(k, NormTimes(ctx, k, l.k_norm, c.eps));
    }
    FERRY_ASSIGN_OR_RETURN(q, Rope(ctx, q, pos, n_rot, c.rope_mode,
                                   c.rope_freq_base, 1.0f, l.rope_freqs));
    FERRY_ASSIGN_OR_RETURN(k, Rope(ctx, k, pos, n_rot, c.rope_mode,
                                   c.rope_freq_base, 1.0f, l.rope_freqs));
    FERRY_ASSIGN_OR_RETURN(AttentionKv kv, attend(state, ctx, il, q, k, qkv.v));
    if (kv.out != nullptr) {
      FERRY_ASSIGN_OR_RETURN(cur, Reshape(ctx, kv.out, {c.q_dim(), nt}));
    } else {
      FERRY_ASSIGN_OR_RETURN(
          cur, Attend(c, ctx, il, q, kv, mask, swa_mask, kq_scale, nt));
    }
    FERRY_ASSIGN_OR_RETURN(cur, MulMat(ctx, l.wo, cur));
    if (l.attn_post_norm != nullptr) {
      FERRY_ASSIGN_OR_RETURN(cur, NormTimes(ctx, cur, l.attn_post_norm, c.eps));
    }
    FERRY_ASSIGN_OR_RETURN(Tensor * ffn_inp, Add(ctx, cur, inp));
    FERRY_ASSIGN_OR_RETURN(cur, NormTimes(ctx, ffn_inp, l.ffn_norm, c.eps));
    FERRY_ASSIGN_OR_RETURN(cur, FeedForward(c, l, ctx, cur));
    if (l.ffn_post_norm != nullptr) {
      FERRY_ASSIGN_OR_RETURN(cur, NormTimes(ctx, cur, l.ffn_post_norm, c.eps));
    }
    FERRY_ASSIGN_OR_RETURN(inp, Add(ctx, cur, ffn_inp));
    inp->name = absl::StrCat("blk.", il, ".out");
  }
  return NormTimes(ctx, inp, model.output_norm(), c.eps);
}

absl::StatusOr<Tensor*> BuildLlamaLogits(const LlamaModel& model, Context& ctx,
                                         Tensor* hidden) {
  FERRY_ASSIGN_OR_RETURN(Tensor * logits, MulMat(ctx, model.output(), hidden));
  if (const float cap = model.config().final_softcap; cap > 0) {
    FERRY_ASSIGN_OR_RETURN(logits, SoftCap(ctx, logits, 1.0f, cap));
  }
  return logits;
}

}  // namespace internal

namespace {

// Attention within the current tokens.
absl::StatusOr<internal::AttentionKv> AttendCurrent(void*, Context&, int,
                                                    Tensor*, Tensor* k,
                                                    Tensor* v) {
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
  if (c.sliding_window > 0) {
    g.sliding_window = c.sliding_window;
    FERRY_ASSIGN_OR_RETURN(g.mask_swa,
                           ctx.NewTensor(DType::kF32, {nt, nt}, "mask_swa"));
    ferry::SetInput(*g.mask_swa);
  }
  FERRY_ASSIGN_OR_RETURN(Tensor * cur, internal::BuildLlamaBody(
                                           model, ctx, g.tokens, g.pos, g.mask,
                                           g.mask_swa, AttendCurrent, nullptr));
  if (options.last_token_only) {
    FERRY_ASSIGN_OR_RETURN(
        cur, View2D(ctx, cur, c.n_embd, 1, cur->nb[1], (nt - 1) * cur->nb[1]));
  }
  FERRY_ASSIGN_OR_RETURN(g.logits, internal::BuildLlamaLogits(model, ctx, cur));
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
  if (graph.mask_swa != nullptr) {
    // Also hides keys `sliding_window` or more positions back.
    in.mask_swa = in.mask;
    for (int64_t q = 0; q < nt; ++q) {
      for (int64_t k = 0; k <= q - graph.sliding_window; ++k) {
        in.mask_swa[static_cast<size_t>(q * nt + k)] =
            -std::numeric_limits<float>::infinity();
      }
    }
  }
  return in;
}

absl::Status SetLlamaInputs(const LlamaGraph& graph, int64_t n_vocab,
                            absl::Span<const int32_t> tokens) {
  FERRY_ASSIGN_OR_RETURN(LlamaInputs in,
                         MakeLlamaInputs(graph, n_vocab, tokens));
  if (graph.mask_swa != nullptr) {
    FERRY_RETURN_IF_ERROR(WriteInput(*graph.mask_swa, in.mask_swa.data(),
                                     in.mask_swa.size() * 4));
  }
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
