#include "ferry/alloc/graph_signature.h"

#include <memory>

#include "ferry/backends/host_buffer.h"
#include "ferry/graph/context.h"
#include "ferry/graph/graph.h"
#include "ferry/graph/ops.h"
#include "ferry/runtime/status_matchers.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

// x [64, n] -> rms_norm -> mul_mat by a weight -> scale: a small graph
// whose token count is n.
struct Small {
  Context ctx;
  Tensor* w = nullptr;
  Graph graph;
};

std::unique_ptr<Small> Build(int64_t n, float scale = 0.5f) {
  auto s = std::make_unique<Small>();
  Tensor* x = *s->ctx.NewTensor(DType::kF32, {64, n}, "x");
  SetInput(*x);
  s->w = *s->ctx.NewTensor(DType::kF32, {64, 32}, "w");
  Tensor* h = *RmsNorm(s->ctx, x, 1e-5f);
  Tensor* y = *MulMat(s->ctx, s->w, h);
  Tensor* z = *Scale(s->ctx, y, scale);
  s->graph = *Graph::Build({z});
  return s;
}

TEST(GraphSignatureTest, NumbersNodesThenLeafs) {
  auto g = Build(8);
  GraphSignature sig;
  FERRY_ASSERT_OK(sig.Update(g->graph));
  EXPECT_EQ(sig.num_nodes(), static_cast<size_t>(g->graph.num_nodes()));
  EXPECT_EQ(sig.size(),
            static_cast<size_t>(g->graph.num_nodes() + g->graph.num_leafs()));
  for (size_t i = 0; i < sig.size(); ++i) {
    EXPECT_EQ(sig.tensor(i)->scratch_index, static_cast<int32_t>(i));
    EXPECT_EQ(sig.IndexOf(sig.tensor(i)), static_cast<int32_t>(i));
  }
  EXPECT_EQ(sig.tensor(0), g->graph.node(0));
  EXPECT_FALSE(sig.unchanged());  // Nothing to compare with.
  // Wiring by number; the input leaf is marked.
  const int32_t x = sig.IndexOf(g->graph.node(0)->src[0]);
  EXPECT_TRUE(sig.Has(static_cast<size_t>(x), GraphSignature::kKindUserInput));
  EXPECT_EQ(sig.wiring(0).src[0], x);
  EXPECT_TRUE(sig.Has(0, GraphSignature::kKindComputes));
}

TEST(GraphSignatureTest, SameGraphIsUnchangedAndKeepsItsGeneration) {
  auto g = Build(8);
  GraphSignature sig;
  FERRY_ASSERT_OK(sig.Update(g->graph));
  const uint64_t generation = sig.generation();
  FERRY_ASSERT_OK(sig.Update(g->graph));
  EXPECT_TRUE(sig.unchanged());
  EXPECT_TRUE(sig.same_tensors());
  EXPECT_EQ(sig.generation(), generation);
  // A rebuilt graph of the same shape: same content, other tensor objects.
  auto again = Build(8);
  FERRY_ASSERT_OK(sig.Update(again->graph));
  EXPECT_TRUE(sig.unchanged());
  EXPECT_FALSE(sig.same_tensors());
  EXPECT_EQ(sig.generation(), generation);
  for (size_t i = 0; i < sig.size(); ++i) EXPECT_FALSE(sig.changed(i));
}

TEST(GraphSignatureTest, DifferencesAreFoundTensorByTensor) {
  auto g = Build(8);
  GraphSignature sig;
  FERRY_ASSERT_OK(sig.Update(g->graph));
  const uint64_t generation = sig.generation();
  // An op param differs (scale): only that node changed.
  auto scaled = Build(8, 0.25f);
  FERRY_ASSERT_OK(sig.Update(scaled->graph));
  EXPECT_FALSE(sig.unchanged());
  EXPECT_NE(sig.generation(), generation);
  int changed = 0;
  for (size_t i = 0; i < sig.size(); ++i) changed += sig.changed(i) ? 1 : 0;
  EXPECT_EQ(changed, 1);
  EXPECT_TRUE(sig.changed(sig.num_nodes() - 1));  // The scale node.
  // Another token count changes shapes all along.
  auto longer = Build(9);
  FERRY_ASSERT_OK(sig.Update(longer->graph));
  EXPECT_FALSE(sig.unchanged());
  EXPECT_TRUE(sig.changed(0));
}

TEST(GraphSignatureTest, PresetMemoryIsPartOfIt) {
  auto g = Build(4);
  GraphSignature sig;
  FERRY_ASSERT_OK(sig.Update(g->graph));
  HostBufferType type("host", 64, nullptr);
  FERRY_ASSERT_OK_AND_ASSIGN(auto buffer, type.Allocate(64 * 32 * 4));
  buffer->set_usage(BufferUsage::kWeights);
  FERRY_ASSERT_OK(PlaceTensor(*buffer, *g->w, 0));
  FERRY_ASSERT_OK(sig.Update(g->graph));
  EXPECT_FALSE(sig.unchanged());
  const size_t w = static_cast<size_t>(sig.IndexOf(g->w));
  EXPECT_TRUE(sig.key(w).preset);
  EXPECT_EQ(sig.key(w).buffer, buffer.get());
  EXPECT_TRUE(sig.Has(w, GraphSignature::kKindWeight));
  // Memory a graph allocator placed is not part of it.
  GraphSignature before = sig;
  g->graph.node(0)->data = buffer->base();
  g->graph.node(0)->flags |= kTensorFlagAllocated;
  FERRY_ASSERT_OK(sig.Update(g->graph));
  EXPECT_TRUE(sig.unchanged());
  EXPECT_TRUE(sig.SameContent(before));
}

TEST(GraphSignatureTest, SameContentIgnoresTensorIdentity) {
  auto a = Build(8);
  auto b = Build(8);
  auto c = Build(16);
  GraphSignature sa, sb, sc;
  FERRY_ASSERT_OK(sa.Update(a->graph));
  FERRY_ASSERT_OK(sb.Update(b->graph));
  FERRY_ASSERT_OK(sc.Update(c->graph));
  EXPECT_TRUE(sa.SameContent(sb));
  EXPECT_FALSE(sa.SameContent(sc));
  EXPECT_NE(sa.generation(), sb.generation());  // Generations never meet.
}

}  // namespace
}  // namespace ferry
