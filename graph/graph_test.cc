#include "ferry/graph/graph.h"

#include <chrono>
#include <utility>
#include <vector>

#include "ferry/graph/context.h"
#include "ferry/graph/ops.h"
#include "ferry/runtime/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

using ::ferry::testing::IsOk;
using ::ferry::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Returns the position of t in span, or -1.
int IndexOf(absl::Span<Tensor* const> span, const Tensor* t) {
  for (size_t i = 0; i < span.size(); ++i) {
    if (span[i] == t) return static_cast<int>(i);
  }
  return -1;
}

// Every source of every node comes earlier in nodes, or is a leaf.
void ExpectTopological(const Graph& g) {
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const Tensor* n = g.nodes()[i];
    for (const Tensor* s : n->src) {
      if (s == nullptr) continue;
      if (s->op == Op::kNone) {
        EXPECT_GE(IndexOf(g.leafs(), s), 0) << s->name;
      } else {
        const int j = IndexOf(g.nodes(), s);
        EXPECT_GE(j, 0) << s->name;
        EXPECT_LT(j, static_cast<int>(i)) << s->name << " after " << n->name;
      }
    }
  }
}

class GraphTest : public ::testing::Test {
 protected:
  Tensor* F32(std::vector<int64_t> shape, const char* name) {
    absl::StatusOr<Tensor*> t = ctx_.NewTensor(DType::kF32, shape, name);
    EXPECT_THAT(t, IsOk());
    return *t;
  }

  Context ctx_;
};

TEST_F(GraphTest, OrderLeafsAndNodes) {
  Tensor* x = F32({4, 2}, "x");
  Tensor* w = F32({4, 3}, "w");
  Tensor* bias = F32({3}, "bias");
  SetInput(*x);
  SetWeight(*w);
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * h, MulMat(ctx_, w, x));
  h->name = "h";
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * y, Add(ctx_, h, bias));
  y->name = "y";
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * z, Relu(ctx_, y));
  z->name = "z";
  SetOutput(*z);
  F32({1}, "unused");

  FERRY_ASSERT_OK_AND_ASSIGN(Graph g, Graph::Build({z}));
  EXPECT_THAT(g.nodes(), ElementsAre(h, y, z));
  EXPECT_THAT(g.leafs(), ElementsAre(w, x, bias));
  EXPECT_EQ(g.num_nodes(), 3);
  EXPECT_EQ(g.num_leafs(), 3);
  EXPECT_EQ(g.node(1), y);

  // Building again (or with duplicate outputs) gives the same graph.
  FERRY_ASSERT_OK_AND_ASSIGN(Graph g2, Graph::Build({z, y, z}));
  EXPECT_THAT(g2.nodes(), ElementsAre(h, y, z));

  const std::string text = DumpText(g);
  EXPECT_THAT(text, HasSubstr("leaf 0: 'w' [4, 3, 1, 1] f32 weight\n"));
  EXPECT_THAT(text, HasSubstr("leaf 1: 'x' [4, 2, 1, 1] f32 input\n"));
  EXPECT_THAT(text, HasSubstr("node 0: mul_mat 'h' [3, 2, 1, 1] f32 <- leaf 0 "
                              "'w', leaf 1 'x'\n"));
  EXPECT_THAT(text, HasSubstr("node 2: relu 'z' [3, 2, 1, 1] f32 output <- "
                              "node 1 'y'\n"));

  const std::string dot = DumpDot(g);
  EXPECT_THAT(dot, HasSubstr("digraph ferry {"));
  EXPECT_THAT(dot, HasSubstr("\"leaf 0\" [shape=box, label=\"'w'\\n[4, 3, 1, "
                             "1] f32\"];"));
  EXPECT_THAT(dot, HasSubstr("\"node 0\" [label=\"mul_mat\\n'h'"));
  EXPECT_THAT(dot, HasSubstr("\"leaf 1\" -> \"node 0\" [label=\"1\"];"));
  EXPECT_THAT(dot, HasSubstr("\"node 1\" -> \"node 2\" [label=\"0\"];"));
}

TEST_F(GraphTest, DiamondVisitsSharedNodeOnce) {
  Tensor* x = F32({8}, "x");
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * s, Silu(ctx_, x));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * l, Scale(ctx_, s, 2.0f));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * r, Gelu(ctx_, s));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * out, Mul(ctx_, l, r));
  FERRY_ASSERT_OK_AND_ASSIGN(Graph g, Graph::Build({out}));
  EXPECT_THAT(g.nodes(), ElementsAre(s, l, r, out));
  EXPECT_THAT(g.leafs(), ElementsAre(x));
}

TEST_F(GraphTest, ViewsAndCpyVisitViewSource) {
  Tensor* cache = F32({8, 4}, "cache");
  Tensor* k = F32({8}, "k");
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * slot, View1D(ctx_, cache, 8, 32));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * store, Cpy(ctx_, k, slot));
  FERRY_ASSERT_OK_AND_ASSIGN(Graph g, Graph::Build({store}));
  EXPECT_THAT(g.nodes(), ElementsAre(slot, store));
  EXPECT_THAT(g.leafs(), ElementsAre(k, cache));
  EXPECT_THAT(DumpText(g), HasSubstr("(view of leaf 1 +32)"));
  EXPECT_THAT(DumpDot(g), HasSubstr("[style=dashed]"));

  // A view source reached only through view_src is still a leaf.
  Tensor other = *slot;
  other.src = {};
  Tensor* orphan = ctx_.AddTensor(other);
  FERRY_ASSERT_OK_AND_ASSIGN(Graph g2, Graph::Build({orphan}));
  EXPECT_THAT(g2.leafs(), ElementsAre(cache));
}

TEST_F(GraphTest, CycleIsAnError) {
  Tensor* x = F32({4}, "x");
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * a, Relu(ctx_, x));
  a->name = "a";
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * b, Silu(ctx_, a));
  b->name = "b";
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * c, Gelu(ctx_, b));
  c->name = "c";
  a->src[0] = c;  // a <- c <- b <- a.
  EXPECT_THAT(Graph::Build({c}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("cycle through 'c': gelu 'c' -> silu 'b' -> "
                                 "relu 'a' -> 'c'")));
  a->src[0] = a;  // Self loop.
  EXPECT_THAT(Graph::Build({a}), StatusIs(absl::StatusCode::kInvalidArgument,
                                          HasSubstr("cycle through 'a'")));
  a->src[0] = x;
  FERRY_EXPECT_OK(Graph::Build({c}));
}

TEST_F(GraphTest, NullOutput) {
  EXPECT_THAT(Graph::Build({nullptr}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("output 0 is null")));
}

// Each Build is a new graph, even of the same outputs; copies are the same
// graph; a moved-from graph is empty.
TEST_F(GraphTest, IdsNameBuilds) {
  Tensor* x = F32({4}, "x");
  Tensor* y = *Relu(ctx_, x);
  FERRY_ASSERT_OK_AND_ASSIGN(Graph a, Graph::Build({y}));
  FERRY_ASSERT_OK_AND_ASSIGN(Graph b, Graph::Build({y}));
  EXPECT_EQ(Graph().id(), 0u);
  EXPECT_NE(a.id(), 0u);
  EXPECT_NE(a.id(), b.id());
  Graph copy = a;
  EXPECT_EQ(copy.id(), a.id());
  const uint64_t b_id = b.id();
  Graph moved = std::move(b);
  EXPECT_EQ(moved.id(), b_id);
  EXPECT_EQ(moved.num_nodes(), 1);
  EXPECT_EQ(b.id(), 0u);  // NOLINT(bugprone-use-after-move): checked empty.
  EXPECT_EQ(b.num_nodes(), 0);
  a = std::move(moved);
  EXPECT_EQ(a.id(), b_id);
}

TEST_F(GraphTest, NodeRange) {
  Tensor* t = F32({4}, "x");
  std::vector<Tensor*> chain;
  for (int i = 0; i < 5; ++i) {
    FERRY_ASSERT_OK_AND_ASSIGN(t, Relu(ctx_, t));
    chain.push_back(t);
  }
  FERRY_ASSERT_OK_AND_ASSIGN(Graph g, Graph::Build({t}));
  FERRY_ASSERT_OK_AND_ASSIGN(GraphView v, g.NodeRange(1, 3));
  EXPECT_THAT(v, ElementsAre(chain[1], chain[2]));
  FERRY_ASSERT_OK_AND_ASSIGN(GraphView empty, g.NodeRange(5, 5));
  EXPECT_TRUE(empty.empty());
  EXPECT_THAT(g.NodeRange(3, 6), StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_THAT(g.NodeRange(3, 2), StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_THAT(g.NodeRange(-1, 2), StatusIs(absl::StatusCode::kOutOfRange));
}

// Deep graphs must not recurse: a 200k-long chain would overflow a
// recursive search's stack.
TEST_F(GraphTest, DeepChainBuildsIteratively) {
  Tensor* t = F32({1}, "x");
  constexpr int kDepth = 200000;
  for (int i = 0; i < kDepth; ++i) {
    FERRY_ASSERT_OK_AND_ASSIGN(t, Relu(ctx_, t));
  }
  FERRY_ASSERT_OK_AND_ASSIGN(Graph g, Graph::Build({t}));
  EXPECT_EQ(g.num_nodes(), kDepth);
  EXPECT_EQ(g.num_leafs(), 1);
  EXPECT_EQ(g.nodes().back(), t);
}

// A transformer-like graph: topological order holds and build is fast.
TEST_F(GraphTest, LayeredGraphIsTopologicalAndFast) {
  Tensor* x = F32({64, 8}, "x");
  Tensor* h = x;
  for (int layer = 0; layer < 100; ++layer) {
    Tensor* w = F32({64, 64}, "w");
    Tensor* g = F32({64}, "g");
    FERRY_ASSERT_OK_AND_ASSIGN(Tensor * n, RmsNorm(ctx_, h, 1e-5f));
    FERRY_ASSERT_OK_AND_ASSIGN(Tensor * ng, Mul(ctx_, n, g));
    FERRY_ASSERT_OK_AND_ASSIGN(Tensor * m, MulMat(ctx_, w, ng));
    FERRY_ASSERT_OK_AND_ASSIGN(Tensor * s, Silu(ctx_, m));
    FERRY_ASSERT_OK_AND_ASSIGN(Tensor * t, Transpose(ctx_, s));
    FERRY_ASSERT_OK_AND_ASSIGN(Tensor * c, Cont(ctx_, t));
    FERRY_ASSERT_OK_AND_ASSIGN(Tensor * r, Reshape(ctx_, c, {64, 8}));
    FERRY_ASSERT_OK_AND_ASSIGN(Tensor * sm, SoftMax(ctx_, r, nullptr, 1.0f));
    FERRY_ASSERT_OK_AND_ASSIGN(Tensor * a, Add(ctx_, sm, h));
    FERRY_ASSERT_OK_AND_ASSIGN(h, Scale(ctx_, a, 0.5f));
  }
  FERRY_ASSERT_OK_AND_ASSIGN(Graph g, Graph::Build({h}));
  EXPECT_EQ(g.num_nodes(), 1000);
  EXPECT_EQ(g.num_leafs(), 201);
  ExpectTopological(g);

  const auto start = std::chrono::steady_clock::now();
  constexpr int kRepeats = 100;
  for (int i = 0; i < kRepeats; ++i) {
    ASSERT_TRUE(Graph::Build({h}).ok());
  }
  const auto per_build = (std::chrono::steady_clock::now() - start) / kRepeats;
  // Generous bound for slow CI machines and sanitizers; typically ~10 us.
  EXPECT_LT(per_build, std::chrono::milliseconds(5));
}

}  // namespace
}  // namespace ferry
