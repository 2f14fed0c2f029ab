#include "ferry/alloc/testing/random_graph.h"

#include <random>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "ferry/graph/ops.h"
#include "ferry/runtime/status_macros.h"

namespace ferry::testing {

absl::StatusOr<RandomGraph> MakeRandomGraph(uint64_t seed,
                                            const RandomGraphOptions& options) {
  std::mt19937_64 rng(seed);
  auto uniform = [&](int n) { return static_cast<int>(rng() % n); };
  constexpr int64_t kCols[] = {8, 16, 32, 64};
  constexpr int64_t kRows[] = {1, 2, 3, 4, 8, 16};

  RandomGraph g;
  g.weights = std::make_unique<Context>();
  g.ctx = std::make_unique<Context>();
  Context& ctx = *g.ctx;
  // Tensors usable as sources: 2-D f32 with contiguous rows.
  std::vector<Tensor*> pool;
  absl::flat_hash_set<Tensor*> consumed;
  absl::flat_hash_map<int64_t, Tensor*> positions;  // Per token count.
  int counter = 0;
  auto name = [&](const char* what) { return absl::StrCat(what, counter++); };

  auto new_input = [&]() -> absl::StatusOr<Tensor*> {
    FERRY_ASSIGN_OR_RETURN(
        Tensor * t,
        ctx.NewTensor(DType::kF32, {kCols[uniform(4)], kRows[uniform(6)]},
                      name("in")));
    SetInput(*t);
    g.inputs.push_back(t);
    return t;
  };
  auto new_weight = [&](std::vector<int64_t> shape) -> absl::StatusOr<Tensor*> {
    FERRY_ASSIGN_OR_RETURN(Tensor * t,
                           g.weights->NewTensor(DType::kF32, shape, name("w")));
    SetWeight(*t);
    return t;
  };
  const int num_inputs = 1 + uniform(3);
  for (int i = 0; i < num_inputs; ++i) {
    FERRY_ASSIGN_OR_RETURN(Tensor * t, new_input());
    pool.push_back(t);
  }
  // Prefers recent tensors so chains form (and in-place chances arise).
  auto pick = [&]() -> Tensor* {
    const int n = static_cast<int>(pool.size());
    const int back = uniform(std::min(n, 6));
    return uniform(4) == 0 ? pool[static_cast<size_t>(uniform(n))]
                           : pool[static_cast<size_t>(n - 1 - back)];
  };

  for (int step = 0; step < options.num_ops; ++step) {
    Tensor* a = pick();
    Tensor* out = nullptr;
    const bool contiguous = a->IsContiguous();
    switch (uniform(12)) {
      case 0:
      case 1: {  // Binary element-wise with a same-shape or broadcast b.
        Tensor* b = nullptr;
        for (int tries = 0; tries < 8 && b == nullptr; ++tries) {
          Tensor* c = pick();
          if (SameShape(*c, *a)) b = c;
        }
        if (b == nullptr) {
          FERRY_ASSIGN_OR_RETURN(b, new_weight({a->ne[0]}));
        }
        const int which = uniform(3);
        FERRY_ASSIGN_OR_RETURN(out, which == 0   ? Add(ctx, a, b)
                                    : which == 1 ? Mul(ctx, a, b)
                                                 : Sub(ctx, a, b));
        break;
      }
      case 2:
      case 3: {  // Unary / row-wise, may run in place.
        auto unary = [&](int which) -> absl::StatusOr<Tensor*> {
          switch (which) {
            case 0:
              return Silu(ctx, a);
            case 1:
              return Scale(ctx, a, 0.5f);
            case 2:
              return RmsNorm(ctx, a, 1e-5f);
            case 3:
              return Norm(ctx, a, 1e-5f);
            case 4:
              return SoftMax(ctx, a, nullptr, 0.7f);
            default:
              return Relu(ctx, a);
          }
        };
        FERRY_ASSIGN_OR_RETURN(out, unary(uniform(6)));
        break;
      }
      case 4:
      case 5: {  // Mat-mul with a weight.
        FERRY_ASSIGN_OR_RETURN(Tensor * w,
                               new_weight({a->ne[0], kCols[uniform(4)]}));
        FERRY_ASSIGN_OR_RETURN(out, MulMat(ctx, w, a));
        break;
      }
      case 6: {  // View of some rows.
        const int64_t rows = 1 + uniform(static_cast<int>(a->ne[1]));
        const int64_t first = uniform(static_cast<int>(a->ne[1] - rows + 1));
        FERRY_ASSIGN_OR_RETURN(
            out, View2D(ctx, a, a->ne[0], rows, a->nb[1], first * a->nb[1]));
        break;
      }
      case 7: {  // Reshape (contiguous only), else cont.
        if (contiguous && a->ne[0] % 2 == 0) {
          FERRY_ASSIGN_OR_RETURN(out,
                                 Reshape(ctx, a, {a->ne[0] / 2, a->ne[1] * 2}));
        } else {
          FERRY_ASSIGN_OR_RETURN(out, Cont(ctx, a));
        }
        break;
      }
      case 8: {  // Transpose then cont.
        FERRY_ASSIGN_OR_RETURN(Tensor * t, Transpose(ctx, a));
        FERRY_ASSIGN_OR_RETURN(out, Cont(ctx, t));
        break;
      }
      case 9: {  // Rope over [ne0, 1, ne1] (one head per token).
        if (!contiguous || a->ne[0] % 2 != 0) {
          FERRY_ASSIGN_OR_RETURN(out, Gelu(ctx, a));
          break;
        }
        Tensor*& pos = positions[a->ne[1]];
        if (pos == nullptr) {
          FERRY_ASSIGN_OR_RETURN(
              pos, ctx.NewTensor(DType::kI32, {a->ne[1]}, name("pos")));
          SetInput(*pos);
          g.inputs.push_back(pos);
        }
        FERRY_ASSIGN_OR_RETURN(Tensor * r,
                               Reshape(ctx, a, {a->ne[0], 1, a->ne[1]}));
        FERRY_ASSIGN_OR_RETURN(
            Tensor * roped,
            Rope(ctx, r, pos, static_cast<int>(a->ne[0]), RopeMode::kNormal));
        FERRY_ASSIGN_OR_RETURN(out, Reshape(ctx, roped, {a->ne[0], a->ne[1]}));
        break;
      }
      case 10: {  // Cpy a into a fresh node b (b = a * 2 computed first).
        FERRY_ASSIGN_OR_RETURN(Tensor * b, Scale(ctx, a, 2.0f));
        FERRY_ASSIGN_OR_RETURN(Tensor * c, Silu(ctx, a));
        FERRY_ASSIGN_OR_RETURN(out, Cpy(ctx, c, b));
        break;
      }
      default: {  // A fresh input joins.
        FERRY_ASSIGN_OR_RETURN(out, new_input());
        break;
      }
    }
    // At most 64 x 64 elements, so a mat-mul result stays within 16 KiB.
    if (out->ne[0] <= 64 && out->ne[1] <= 64 && out->ne[2] == 1 &&
        out->ne[3] == 1 && out->HasContiguousRows()) {
      pool.push_back(out);
    }
    if (uniform(10) == 0 && out->op != Op::kNone) SetOutput(*out);
  }
  // Outputs: every tensor nothing reads, plus the flagged ones.
  for (Tensor* t : ctx.tensors()) {
    for (Tensor* s : t->src) {
      if (s != nullptr) consumed.insert(s);
    }
  }
  std::vector<Tensor*> outputs;
  for (Tensor* t : ctx.tensors()) {
    if (t->op == Op::kNone) continue;
    if (!consumed.contains(t) || t->HasFlag(kTensorFlagOutput)) {
      outputs.push_back(t);
    }
  }
  FERRY_ASSIGN_OR_RETURN(g.graph, Graph::Build(outputs));
  for (size_t i = 0; i < g.graph.leafs().size(); ++i) {
    g.leaf_types.push_back(uniform(options.num_types));
  }
  for (size_t i = 0; i < g.graph.nodes().size(); ++i) {
    g.node_types.push_back(uniform(options.num_types));
  }
  return g;
}

}  // namespace ferry::testing
