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
    if (t->dtype != DType::kF32 || !t->HasContiguousRows()) {
      return absl::UnimplementedError(absl::StrCat(
          "cpu kernels: range_attention: q, k, v and the result must be f32 "
          "with contiguous rows (",
          t->ShapeString(), ")"));
    }
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

size_t RangeAttentionScratchBytes(const Tensor& node, int nth) {
  const auto rows = static_cast<size_t>(node.src[1]->ne[1]);
  return RoundUpToScratchAlignment(rows * sizeof(float)) *
         static_cast<size_t>(nth);
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
  // One head's scores, then its softmax weights.
  auto* scores = reinterpret_cast<float*>(
      static_cast<std::byte*>(ctx.scratch) +
      RoundUpToScratchAlignment(static_cast<size_t>(rows) * sizeof(float)) *
          static_cast<size_t>(ith));
  const auto* k_base = static_cast<const std::byte*>(k.data);
  const auto* v_base = static_cast<const std::byte*>(v.data);
  for (int64_t u = ith; u < n_tokens * n_kv; u += nth) {
    const int64_t t = u / n_kv;
    const int64_t kvh = u % n_kv;
    const int64_t begin = std::clamp<int64_t>(ranges[2 * t], 0, rows);
    const int64_t end = std::clamp<int64_t>(ranges[2 * t + 1], begin, rows);
    const int64_t n = end - begin;
    const auto* q0 = static_cast<const std::byte*>(q.data) + t * q.nb[2] +
                     kvh * group * q.nb[1];
    auto* out0 = static_cast<std::byte*>(node.data) + t * node.nb[2] +
                 kvh * group * node.nb[1];
    const auto k_stride = k.nb[1] / static_cast<int64_t>(sizeof(float));
    const auto v_stride = v.nb[1] / static_cast<int64_t>(sizeof(float));
    const float* k_rows =
        reinterpret_cast<const float*>(k_base + begin * k.nb[1]) + kvh * hd;
    const float* v_rows =
        reinterpret_cast<const float*>(v_base + begin * v.nb[1]) + kvh * hd;
    for (int64_t g = 0; g < group; ++g) {
      auto* out = reinterpret_cast<float*>(out0 + g * node.nb[1]);
      std::fill(out, out + hd, 0.0f);
      if (n == 0) continue;
      const auto* qh = reinterpret_cast<const float*>(q0 + g * q.nb[1]);
      vec::DotRows(qh, k_rows, k_stride, n, hd, scale, scores);
      const float max = *std::max_element(scores, scores + n);
      const float sum = vec::ExpSubRow(scores, max, n);
      vec::ScaleRow(scores, 1.0f / sum, scores, n);
      vec::AxpyRows(scores, v_rows, v_stride, n, hd, out);
    }
  }
}

}  // namespace cpu_kernels
}  // namespace ferry
