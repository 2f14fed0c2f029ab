#include "ferry/models/llama/llama_batch.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "ferry/graph/ops.h"
#include "ferry/models/llama/llama_graph.h"
#include "ferry/runtime/status_macros.h"

namespace ferry::llama {
namespace {

constexpr float kMasked = -std::numeric_limits<float>::infinity();
// set_rows's id for a row that goes nowhere (graph/ops.h).
constexpr int32_t kNoCell = -1;

struct CacheAttention {
  const LlamaKvCache* cache;
  Tensor* kv_dst;
  Tensor* kv_window;  // Or kv_ranges.
  Tensor* kv_ranges;
  int64_t head_dim;
  int64_t kv_heads;
  float kq_scale;
};

// Writes the current tokens' K and V into the cache, then attends over the
// window's cells of the written cache, or each token over its range of it
// (reading the set_rows results orders the reads after the writes).
absl::StatusOr<internal::AttentionKv> AttendCache(void* state, Context& ctx,
                                                  int layer, Tensor* q,
                                                  Tensor* k, Tensor* v) {
  const auto& s = *static_cast<const CacheAttention*>(state);
  const int64_t nt = k->ne[2];
  const int64_t kv_dim = s.head_dim * s.kv_heads;
  FERRY_ASSIGN_OR_RETURN(Tensor * k_rows, Reshape(ctx, k, {kv_dim, nt}));
  FERRY_ASSIGN_OR_RETURN(Tensor * v_rows, Reshape(ctx, v, {kv_dim, nt}));
  FERRY_ASSIGN_OR_RETURN(Tensor * k_all,
                         SetRows(ctx, s.cache->k(layer), k_rows, s.kv_dst));
  FERRY_ASSIGN_OR_RETURN(Tensor * v_all,
                         SetRows(ctx, s.cache->v(layer), v_rows, s.kv_dst));
  internal::AttentionKv out;
  if (s.kv_ranges != nullptr) {
    FERRY_ASSIGN_OR_RETURN(
        out.out, RangeAttention(ctx, q, k_all, v_all, s.kv_ranges, s.kq_scale));
    return out;
  }
  const int64_t n_window = s.kv_window->ne[0];
  FERRY_ASSIGN_OR_RETURN(Tensor * k_win, GetRows(ctx, k_all, s.kv_window));
  FERRY_ASSIGN_OR_RETURN(Tensor * v_win, GetRows(ctx, v_all, s.kv_window));
  FERRY_ASSIGN_OR_RETURN(
      out.k, Reshape(ctx, k_win, {s.head_dim, s.kv_heads, n_window}));
  FERRY_ASSIGN_OR_RETURN(
      out.v, Reshape(ctx, v_win, {s.head_dim, s.kv_heads, n_window}));
  return out;
}

}  // namespace

bool CanAttendByRanges(const LlamaModel& model, DType cache_type) {
  const LlamaConfig& c = model.config();
  if (c.attn_softcap > 0 ||
      (c.sliding_window > 0 && c.sliding_window < c.n_ctx)) {
    return false;
  }
  // A node of the model's head shapes, for the devices to judge.
  Context ctx;
  const int64_t n_cells = 2;
  absl::StatusOr<Tensor*> q =
      ctx.NewTensor(DType::kF32, {c.head_dim(), c.n_head, 1});
  absl::StatusOr<Tensor*> k = ctx.NewTensor(cache_type, {c.kv_dim(), n_cells});
  absl::StatusOr<Tensor*> v = ctx.NewTensor(cache_type, {c.kv_dim(), n_cells});
  absl::StatusOr<Tensor*> ranges = ctx.NewTensor(DType::kI32, {2, 1});
  if (!q.ok() || !k.ok() || !v.ok() || !ranges.ok()) return false;
  absl::StatusOr<Tensor*> node = RangeAttention(ctx, *q, *k, *v, *ranges, 1.0f);
  if (!node.ok()) return false;
  for (Backend* backend : model.backends()) {
    if (!backend->SupportsOp(**node)) return false;
  }
  return true;
}

absl::Status LlamaBatchShape::Validate() const {
  constexpr int64_t kMax = int64_t{1} << 20;
  if (n_tokens < 1 || n_tokens > kMax) {
    return absl::InvalidArgumentError(absl::StrCat(
        "llama batch: ", n_tokens, " tokens; must be in [1, ", kMax, "]"));
  }
  if (n_window < 2 || n_window > kMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("llama batch: window of ", n_window,
                     " cells; must be in [2, ", kMax, "]"));
  }
  if (n_outputs < 1 || n_outputs > n_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("llama batch: ", n_outputs,
                                                   " outputs; must be in [1, ",
                                                   n_tokens, "]"));
  }
  return absl::OkStatus();
}

absl::StatusOr<LlamaBatchGraph> BuildLlamaBatchGraph(
    const LlamaModel& model, const LlamaKvCache& cache,
    const LlamaBatchShape& shape) {
  FERRY_RETURN_IF_ERROR(shape.Validate());
  if (cache.n_cells() < 2) {
    return absl::InvalidArgumentError(
        "llama batch: the KV cache needs at least 2 cells");
  }
  const LlamaConfig& c = model.config();
  LlamaBatchGraph g;
  g.shape = shape;
  g.ctx = std::make_unique<Context>();
  Context& ctx = *g.ctx;
  const int64_t nt = shape.n_tokens;
  FERRY_ASSIGN_OR_RETURN(g.tokens, ctx.NewTensor(DType::kI32, {nt}, "tokens"));
  FERRY_ASSIGN_OR_RETURN(g.pos, ctx.NewTensor(DType::kI32, {nt}, "pos"));
  FERRY_ASSIGN_OR_RETURN(g.kv_dst, ctx.NewTensor(DType::kI32, {nt}, "kv_dst"));
  if (shape.attend_by_ranges) {
    if (c.attn_softcap > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("llama batch: ", c.arch,
                       " soft-caps attention; range attention cannot"));
    }
    FERRY_ASSIGN_OR_RETURN(g.kv_ranges,
                           ctx.NewTensor(DType::kI32, {2, nt}, "kv_ranges"));
  } else {
    FERRY_ASSIGN_OR_RETURN(
        g.kv_window, ctx.NewTensor(DType::kI32, {shape.n_window}, "kv_window"));
    FERRY_ASSIGN_OR_RETURN(
        g.mask, ctx.NewTensor(DType::kF32, {shape.n_window, nt}, "mask"));
  }
  FERRY_ASSIGN_OR_RETURN(
      g.out_rows, ctx.NewTensor(DType::kI32, {shape.n_outputs}, "out_rows"));
  for (Tensor* t : {g.tokens, g.pos, g.kv_dst, g.kv_window, g.mask, g.kv_ranges,
                    g.out_rows}) {
    if (t != nullptr) SetInput(*t);
  }
  const float kq_scale =
      c.attn_scale > 0 ? c.attn_scale
                       : 1.0f / std::sqrt(static_cast<float>(c.head_dim()));
  CacheAttention state{&cache,      g.kv_dst,     g.kv_window,
                       g.kv_ranges, c.head_dim(), c.head_count_kv(),
                       kq_scale};
  // Within n_ctx a window at least as long hides nothing: the causal mask
  // serves its layers too.
  Tensor* swa_mask = g.mask;
  if (c.sliding_window > 0 && c.sliding_window < c.n_ctx) {
    return absl::UnimplementedError(absl::StrCat(
        "llama batch: ", c.arch, " has sliding-window layers of ",
        c.sliding_window, " positions, shorter than its context of ", c.n_ctx,
        "; the batch graph cannot mask them yet (use n_ctx <= the window)"));
  }
  FERRY_ASSIGN_OR_RETURN(Tensor * cur, internal::BuildLlamaBody(
                                           model, ctx, g.tokens, g.pos, g.mask,
                                           swa_mask, AttendCache, &state));
  FERRY_ASSIGN_OR_RETURN(cur, GetRows(ctx, cur, g.out_rows));
  FERRY_ASSIGN_OR_RETURN(g.logits, internal::BuildLlamaLogits(model, ctx, cur));
  g.logits->name = "logits";
  SetOutput(*g.logits);
  Tensor* outputs[] = {g.logits};
  FERRY_ASSIGN_OR_RETURN(g.graph, Graph::Build(outputs));
  return g;
}

LlamaBatchBuilder::LlamaBatchBuilder(const LlamaBatchShape& shape,
                                     int32_t pad_cell)
    : shape_(shape), full_shape_(shape), pad_cell_(pad_cell) {
  Clear();
}

void LlamaBatchBuilder::Clear() {
  shape_ = full_shape_;
  const auto nt = static_cast<size_t>(shape_.n_tokens);
  const auto nw = static_cast<size_t>(shape_.n_window);
  n_tokens_ = n_window_ = n_outputs_ = 0;
  tokens_.assign(nt, 0);
  pos_.assign(nt, 0);
  kv_dst_.assign(nt, kNoCell);
  out_rows_.assign(static_cast<size_t>(shape_.n_outputs), 0);
  if (shape_.attend_by_ranges) {
    // Padding sees the scratch cell only.
    kv_ranges_.resize(2 * nt);
    for (size_t t = 0; t < nt; ++t) {
      kv_ranges_[2 * t] = pad_cell_;
      kv_ranges_[2 * t + 1] = pad_cell_ + 1;
    }
    return;
  }
  kv_window_.assign(nw, pad_cell_);
  // Padding rows see the last window entry only; no row sees it otherwise.
  mask_.assign(nt * nw, kMasked);
  for (size_t t = 0; t < nt; ++t) mask_[t * nw + nw - 1] = 0.0f;
}

absl::StatusOr<std::vector<int>> LlamaBatchBuilder::Add(
    absl::Span<const int32_t> tokens, int64_t first_pos,
    absl::Span<const int32_t> cells, absl::Span<const int> logits_at) {
  const auto n = static_cast<int64_t>(tokens.size());
  const int64_t context = first_pos + n;
  if (n < 1 || first_pos < 0 || static_cast<int64_t>(cells.size()) < context) {
    return absl::InvalidArgumentError(
        absl::StrCat("llama batch: ", n, " tokens at position ", first_pos,
                     " with ", cells.size(), " cells"));
  }
  for (int i : logits_at) {
    if (i < 0 || i >= n) {
      return absl::InvalidArgumentError(absl::StrCat(
          "llama batch: logits index ", i, " outside [0, ", n, ")"));
    }
  }
  if (shape_.attend_by_ranges) {
    for (int64_t p = 1; p < context; ++p) {
      if (cells[static_cast<size_t>(p)] != cells[0] + p) {
        return absl::InvalidArgumentError(absl::StrCat(
            "llama batch: range attention needs consecutive cells; position ",
            p, " has cell ", cells[static_cast<size_t>(p)], " after ",
            cells[static_cast<size_t>(p - 1)]));
      }
    }
  }
  if (n > tokens_left() || context > window_left() ||
      static_cast<int64_t>(logits_at.size()) > outputs_left()) {
    return absl::OutOfRangeError(absl::StrCat(
        "llama batch: no room for ", n, " tokens over ", context,
        " cells with ", logits_at.size(), " outputs (left: ", tokens_left(),
        ", ", window_left(), ", ", outputs_left(), ")"));
  }
  const auto nw = static_cast<size_t>(shape_.n_window);
  const int64_t w0 = n_window_;
  for (int64_t p = 0; p < context && !shape_.attend_by_ranges; ++p) {
    kv_window_[static_cast<size_t>(w0 + p)] = cells[static_cast<size_t>(p)];
  }
  for (int64_t i = 0; i < n; ++i) {
    const auto t = static_cast<size_t>(n_tokens_ + i);
    const int64_t position = first_pos + i;
    tokens_[t] = tokens[static_cast<size_t>(i)];
    pos_[t] = static_cast<int32_t>(position);
    kv_dst_[t] = cells[static_cast<size_t>(position)];
    if (shape_.attend_by_ranges) {
      kv_ranges_[2 * t] = cells[0];
      kv_ranges_[2 * t + 1] = cells[0] + static_cast<int32_t>(position) + 1;
      continue;
    }
    float* row = &mask_[t * nw];
    row[nw - 1] = kMasked;
    std::fill(row + w0, row + w0 + position + 1, 0.0f);
  }
  std::vector<int> rows;
  for (int i : logits_at) {
    out_rows_[static_cast<size_t>(n_outputs_)] =
        static_cast<int32_t>(n_tokens_ + i);
    rows.push_back(static_cast<int>(n_outputs_++));
  }
  n_tokens_ += n;
  n_window_ += context;
  return rows;
}

absl::Status LlamaBatchBuilder::Narrow(const LlamaBatchShape& to) {
  FERRY_RETURN_IF_ERROR(to.Validate());
  if (to.n_window < n_window_ + 1 || to.n_window > shape_.n_window ||
      to.n_tokens < n_tokens_ || to.n_tokens > shape_.n_tokens ||
      to.n_outputs < n_outputs_ || to.n_outputs > shape_.n_outputs) {
    return absl::InvalidArgumentError(absl::StrCat(
        "llama batch: cannot narrow a batch of ", shape_.n_tokens, " tokens, ",
        shape_.n_outputs, " outputs and a window of ", shape_.n_window,
        " entries with ", n_tokens_, ", ", n_outputs_, " and ", n_window_,
        " (and padding's) used to ", to.n_tokens, ", ", to.n_outputs, " and ",
        to.n_window));
  }
  if (to.attend_by_ranges != shape_.attend_by_ranges) {
    return absl::InvalidArgumentError(
        "llama batch: cannot narrow between window and range attention");
  }
  const auto nt = static_cast<size_t>(to.n_tokens);
  const auto from = static_cast<size_t>(shape_.n_window);
  const auto w = static_cast<size_t>(to.n_window);
  if (to.attend_by_ranges) {
    // Ranges name cache cells, not window entries: they stay.
    kv_ranges_.resize(2 * nt);
  } else {
    // Row t moves from t * from down to t * w, so moving rows in order
    // never overwrites one not yet moved (row 0 stays). Rows past nt are
    // padding's.
    for (size_t t = 0; t < nt && w < from; ++t) {
      const float padding = mask_[t * from + from - 1];
      if (t > 0) {
        std::copy_n(mask_.begin() + static_cast<ptrdiff_t>(t * from), w - 1,
                    mask_.begin() + static_cast<ptrdiff_t>(t * w));
      }
      mask_[t * w + w - 1] = padding;
    }
    mask_.resize(nt * w);
    kv_window_.resize(w);
    kv_window_[w - 1] = pad_cell_;
  }
  tokens_.resize(nt);
  pos_.resize(nt);
  kv_dst_.resize(nt);
  out_rows_.resize(static_cast<size_t>(to.n_outputs));
  shape_ = to;
  return absl::OkStatus();
}

}  // namespace ferry::llama
