#include "ferry/backends/host/kernels/range_attention_node.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "ferry/backends/host/kernels/internal/vec.h"
#include "ferry/graph/dtype.h"
#include "ferry/graph/op.h"

namespace ferry {
namespace cpu_kernels {
namespace {

namespace vec = ::ferry::cpu_kernels_internal;

absl::Status Invalid(const Tensor& node, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(
      "cpu kernels: range_attention: ", why, " (", node.ShapeString(), ")"));
}

// Query heads per kv head (head h reads kv head h / Group).
int64_t Group(const Tensor& node) {
  return node.src[0]->ne[1] / (node.src[1]->ne[0] / node.src[0]->ne[0]);
}

}  // namespace

absl::Status CheckRangeAttention(const Tensor& node) {
  const Tensor* q = node.src[0];
  const Tensor* k = node.src[1];
  const Tensor* v = node.src[2];
  const Tensor* ranges = node.src[3];
  if (q == nullptr || k == nullptr || v == nullptr || ranges == nullptr) {
    return Invalid(node, "needs q, k, v and ranges");
  }
  for (const Tensor* t : {&node, q, k, v}) {
    const bool cache = t == k || t == v;
    if (!(t->dtype == DType::kF32 || (cache && t->dtype == DType::kF16)) ||
        !t->HasContiguousRows()) {
      return absl::UnimplementedError(absl::StrCat(
          "cpu kernels: range_attention: q and the result must be f32, k and "
          "v f32 or f16, all with contiguous rows (",
          t->ShapeString(), ")"));
    }
  }
  if (k->dtype != v->dtype) {
    return Invalid(node, "k and v must have one dtype");
  }
  if (ranges->dtype != DType::kI32 || !ranges->IsContiguous() ||
      ranges->ne[0] != 2 || ranges->ne[1] != q->ne[2] || ranges->ne[2] != 1 ||
      ranges->ne[3] != 1) {
    return Invalid(node, "ranges must be [2, q.ne[2]] i32, contiguous");
  }
  const int64_t hd = q->ne[0];
  if (q->ne[3] != 1 || k->ne[2] != 1 || k->ne[3] != 1 || k->ne != v->ne ||
      k->nb != v->nb || hd < 1 || k->ne[0] % hd != 0 ||
      q->ne[1] % (k->ne[0] / hd) != 0) {
    return Invalid(node,
                   "needs q [hd, n_head, T], k and v [hd * n_kv, C] alike, "
                   "n_head a multiple of n_kv");
  }
  if (node.ne != q->ne || !node.IsContiguous()) {
    return Invalid(node, "result must be contiguous, shaped as q");
  }
  return absl::OkStatus();
}

namespace {

// K and V rows read per step: a chunk (8 KiB of f16 at head_dim 64) stays in
// L1 while every query head of its kv head reads it.
constexpr int64_t kChunkRows = 64;

// The per-thread scratch: each query head's scores over the whole cache,
// then (f16 caches) the query heads rounded to f16.
struct Scratch {
  size_t scores_bytes;
  size_t queries_bytes;
};

Scratch ScratchOf(const Tensor& node) {
  const auto rows = static_cast<size_t>(node.src[1]->ne[1]);
  const auto group = static_cast<size_t>(Group(node));
  const auto hd = static_cast<size_t>(node.src[0]->ne[0]);
  const size_t queries = node.src[1]->dtype == DType::kF32 ? 0 : group * hd;
  return {RoundUpToScratchAlignment(group * rows * sizeof(float)),
          RoundUpToScratchAlignment(queries * sizeof(float))};
}

// x[i] = float(half(x[i])).
void RoundThroughF16(float* x, int64_t n) {
  constexpr int64_t kPiece = 64;
  Half half[kPiece];
  for (int64_t i = 0; i < n; i += kPiece) {
    const int64_t m = std::min(kPiece, n - i);
    vec::ConvertRow(DType::kF32, x + i, DType::kF16, half, m);
    vec::ConvertRow(DType::kF16, half, DType::kF32, x + i, m);
  }
}

}  // namespace

size_t RangeAttentionScratchBytes(const Tensor& node, int nth) {
  const Scratch s = ScratchOf(node);
  return (s.scores_bytes + s.queries_bytes) * static_cast<size_t>(nth);
}

void RangeAttentionNode(const Tensor& node, int ith, int nth,
                        const KernelContext& ctx) {
  const Tensor& q = *node.src[0];
  const Tensor& k = *node.src[1];
  const Tensor& v = *node.src[2];
  const auto* ranges = static_cast<const int32_t*>(node.src[3]->data);
  const int64_t hd = q.ne[0];
  const int64_t n_tokens = q.ne[2];
  const int64_t group = Group(node);
  const int64_t n_kv = q.ne[1] / group;
  const int64_t rows = k.ne[1];
  const float scale = node.ParamF32(0);
  const bool f16 = k.dtype == DType::kF16;
  const Scratch layout = ScratchOf(node);
  std::byte* mine =
      static_cast<std::byte*>(ctx.scratch) +
      (layout.scores_bytes + layout.queries_bytes) * static_cast<size_t>(ith);
  // Head g's scores, then its softmax weights, at scores + g * rows.
  auto* scores = reinterpret_cast<float*>(mine);
  auto* rounded_q = reinterpret_cast<float*>(mine + layout.scores_bytes);
  const auto elem = static_cast<int64_t>(DTypeBlockBytes(k.dtype));
  const int64_t stride = k.nb[1] / elem;  // Elements between cache rows.
  // Row r of kv head kvh in `cache`.
  const auto row = [&](const void* cache, int64_t kvh, int64_t r) {
    return static_cast<const std::byte*>(cache) + r * k.nb[1] + kvh * hd * elem;
  };
  // Token t's query heads of kv head kvh over the token's range.
  const auto attend = [&](int64_t t, int64_t kvh) {
    const int64_t begin = std::clamp<int64_t>(ranges[2 * t], 0, rows);
    const int64_t end = std::clamp<int64_t>(ranges[2 * t + 1], begin, rows);
    const int64_t n = end - begin;
    const auto* q0 = static_cast<const std::byte*>(q.data) + t * q.nb[2] +
                     kvh * group * q.nb[1];
    auto* out0 = static_cast<std::byte*>(node.data) + t * node.nb[2] +
                 kvh * group * node.nb[1];
    auto out = [&](int64_t g) {
      return reinterpret_cast<float*>(out0 + g * node.nb[1]);
    };
    for (int64_t g = 0; g < group; ++g) std::fill(out(g), out(g) + hd, 0.0f);
    if (n == 0) return;
    // With an f16 cache the products are of f16 values (q and the softmax
    // weights rounded to f16, as f16 GEMMs and GPU attention kernels have
    // them) summed in f32.
    auto query = [&](int64_t g) {
      return reinterpret_cast<const float*>(q0 + g * q.nb[1]);
    };
    if (f16) {
      for (int64_t g = 0; g < group; ++g) {
        std::copy(query(g), query(g) + hd, rounded_q + g * hd);
      }
      RoundThroughF16(rounded_q, group * hd);
    }
    // Every query head of the kv head reads a chunk of K rows, then of V
    // rows, while it is in cache.
    for (int64_t r = 0; r < n; r += kChunkRows) {
      const int64_t m = std::min(kChunkRows, n - r);
      const std::byte* k_rows = row(k.data, kvh, begin + r);
      for (int64_t g = 0; g < group; ++g) {
        float* s = scores + g * rows + r;
        if (f16) {
          vec::DotRowsF16(rounded_q + g * hd,
                          reinterpret_cast<const Half*>(k_rows), stride, m, hd,
                          scale, s);
        } else {
          vec::DotRows(query(g), reinterpret_cast<const float*>(k_rows), stride,
                       m, hd, scale, s);
        }
      }
    }
    for (int64_t g = 0; g < group; ++g) {
      float* p = scores + g * rows;
      const float max = *std::max_element(p, p + n);
      const float sum = vec::ExpSubRow(p, max, n);
      vec::ScaleRow(p, 1.0f / sum, p, n);
      if (f16) RoundThroughF16(p, n);
    }
    for (int64_t r = 0; r < n; r += kChunkRows) {
      const int64_t m = std::min(kChunkRows, n - r);
      const std::byte* v_rows = row(v.data, kvh, begin + r);
      for (int64_t g = 0; g < group; ++g) {
        const float* p = scores + g * rows + r;
        if (f16) {
          vec::AxpyRowsF16(p, reinterpret_cast<const Half*>(v_rows), stride, m,
                           hd, out(g));
        } else {
          vec::AxpyRows(p, reinterpret_cast<const float*>(v_rows), stride, m,
                        hd, out(g));
        }
      }
    }
  };
  if (n_tokens >= 2 * nth) {
    // A thread takes every kv head of its tokens one after another, so
    // it walks a token's cache rows while they are near.
    for (int64_t t = ith; t < n_tokens; t += nth) {
      for (int64_t kvh = 0; kvh < n_kv; ++kvh) attend(t, kvh);
    }
  } else {
    for (int64_t u = ith; u < n_tokens * n_kv; u += nth) {
      attend(u / n_kv, u % n_kv);
    }
  }
}

}  // namespace cpu_kernels
}  // namespace ferry
