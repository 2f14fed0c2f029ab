#include "ferry/alloc/graph_allocator.h"

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ferry/alloc/memory_bounds.h"
#include "ferry/alloc/testing/alloc_checker.h"
#include "ferry/alloc/testing/failing_buffer_type.h"
#include "ferry/alloc/testing/random_graph.h"
#include "ferry/backends/host_buffer.h"
#include "ferry/graph/context.h"
#include "ferry/graph/graph.h"
#include "ferry/graph/ops.h"
#include "ferry/models/llama/llama_graph.h"
#include "ferry/models/llama/llama_model.h"
#include "ferry/models/llama/testing/llama_testing.h"
#include "ferry/runtime/status_matchers.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

using ::ferry::testing::CheckGraphAllocation;
using ::ferry::testing::IsOk;
using ::ferry::testing::StatusIs;
using ::testing::HasSubstr;

// A chain x -> rms_norm -> scale -> mul_mat(w) -> silu, x an input, the
// last node an output.
struct Chain {
  Context weights;
  Context ctx;
  Tensor* x = nullptr;
  Tensor* norm = nullptr;
  Tensor* scaled = nullptr;
  Tensor* mm = nullptr;
  Tensor* out = nullptr;
  Graph graph;
};

std::unique_ptr<Chain> MakeChain(int64_t rows = 4) {
  auto c = std::make_unique<Chain>();
  c->x = *c->ctx.NewTensor(DType::kF32, {64, rows}, "x");
  SetInput(*c->x);
  Tensor* w = *c->weights.NewTensor(DType::kF32, {64, 64}, "w");
  SetWeight(*w);
  EXPECT_THAT(c->weights.AllocateHostData(), IsOk());
  c->norm = *RmsNorm(c->ctx, c->x, 1e-5f);
  c->scaled = *Scale(c->ctx, c->norm, 2.0f);
  c->mm = *MulMat(c->ctx, w, c->scaled);
  c->out = *Silu(c->ctx, c->mm);
  SetOutput(*c->out);
  Tensor* outs[] = {c->out};
  c->graph = *Graph::Build(outs);
  return c;
}

TEST(GraphAllocatorTest, PlansChainInPlace) {
  HostBufferType type("host", 64, nullptr);
  GraphAllocator galloc({&type});
  auto c = MakeChain();
  ASSERT_THAT(galloc.Reserve(c->graph), IsOk());
  ASSERT_THAT(galloc.Allocate(c->graph), IsOk());
  int in_place = 0;
  EXPECT_THAT(CheckGraphAllocation(c->graph, &in_place), IsOk());
  // scale runs in place over rms_norm; silu over mul_mat. rms_norm may not
  // run over x (an input).
  EXPECT_EQ(c->scaled->data, c->norm->data);
  EXPECT_EQ(c->out->data, c->mm->data);
  EXPECT_NE(c->norm->data, c->x->data);
  EXPECT_EQ(in_place, 2);
  EXPECT_EQ(galloc.last_plan().num_in_place, 2);
  EXPECT_EQ(c->x->buffer->usage(), BufferUsage::kCompute);
  // x (1 KiB) lives throughout; norm/scaled and mm/out alternate: 3 KiB.
  EXPECT_EQ(galloc.buffer_size(0), 3u * 1024);
  EXPECT_EQ(galloc.reserve_count(), 1);
}

TEST(GraphAllocatorTest, InPlaceCanBeDisabled) {
  HostBufferType type("host", 64, nullptr);
  GraphAllocator galloc({&type}, {.in_place = false});
  auto c = MakeChain();
  ASSERT_THAT(galloc.Reserve(c->graph), IsOk());
  ASSERT_THAT(galloc.Allocate(c->graph), IsOk());
  int in_place = -1;
  EXPECT_THAT(CheckGraphAllocation(c->graph, &in_place), IsOk());
  EXPECT_EQ(in_place, 0);
  EXPECT_NE(c->scaled->data, c->norm->data);
}

TEST(GraphAllocatorTest, OutputsAreNeverInPlaceSources) {
  HostBufferType type("host", 64, nullptr);
  GraphAllocator galloc({&type});
  auto c = MakeChain();
  SetOutput(*c->norm);
  ASSERT_THAT(galloc.Reserve(c->graph), IsOk());
  ASSERT_THAT(galloc.Allocate(c->graph), IsOk());
  EXPECT_THAT(CheckGraphAllocation(c->graph), IsOk());
  EXPECT_NE(c->scaled->data, c->norm->data);
}

TEST(GraphAllocatorTest, AllocateWithoutReserveDoesNotFit) {
  HostBufferType type("host", 64, nullptr);
  GraphAllocator galloc({&type});
  auto c = MakeChain();
  EXPECT_THAT(galloc.Allocate(c->graph),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("does not fit the reserved buffers")));
  for (Tensor* t : c->graph.nodes()) EXPECT_EQ(t->data, nullptr);
  EXPECT_EQ(c->x->data, nullptr);
  EXPECT_EQ(galloc.failed_allocations(), 1);
}

TEST(GraphAllocatorTest, FastPathAndBiggerGraphs) {
  HostBufferType type("host", 64, nullptr);
  GraphAllocator galloc({&type});
  auto small = MakeChain(4);
  ASSERT_THAT(galloc.Reserve(small->graph), IsOk());
  const size_t reserved = galloc.buffer_size(0);
  Buffer* const before = galloc.buffer(0, 0);

  // The same topology in a fresh graph: the cached plan is re-applied.
  auto again = MakeChain(4);
  ASSERT_THAT(galloc.Allocate(again->graph), IsOk());
  EXPECT_TRUE(galloc.last_plan().fast_path);
  EXPECT_EQ(galloc.fast_allocations(), 1);
  EXPECT_THAT(CheckGraphAllocation(again->graph), IsOk());
  // Re-allocating an allocated graph re-places it the same way.
  void* const out_data = again->out->data;
  ASSERT_THAT(galloc.Allocate(again->graph), IsOk());
  EXPECT_EQ(again->out->data, out_data);

  // A smaller graph fits without growing (planned, not cached).
  auto smaller = MakeChain(2);
  ASSERT_THAT(galloc.Allocate(smaller->graph), IsOk());
  EXPECT_FALSE(galloc.last_plan().fast_path);
  EXPECT_EQ(galloc.planned_allocations(), 1);
  EXPECT_THAT(CheckGraphAllocation(smaller->graph), IsOk());

  // A bigger one does not: it says so, places nothing, grows nothing.
  auto big = MakeChain(16);
  EXPECT_THAT(galloc.Allocate(big->graph),
              StatusIs(absl::StatusCode::kResourceExhausted));
  for (Tensor* t : big->graph.nodes()) EXPECT_EQ(t->data, nullptr);
  EXPECT_EQ(galloc.buffer_size(0), reserved);
  EXPECT_EQ(galloc.buffer(0, 0), before);
  EXPECT_EQ(galloc.reserve_count(), 1);

  // The caller re-reserves (counted) and allocates.
  ASSERT_THAT(galloc.Reserve(big->graph), IsOk());
  EXPECT_EQ(galloc.reserve_count(), 2);
  ASSERT_THAT(galloc.Allocate(big->graph), IsOk());
  EXPECT_THAT(CheckGraphAllocation(big->graph), IsOk());
  // Reserving a smaller graph keeps the bigger buffers.
  ASSERT_THAT(galloc.Reserve(small->graph), IsOk());
  EXPECT_EQ(galloc.reserve_count(), 2);
}

// A graph placed in buffers that were since freed (this allocator grew them,
// or another allocator is gone) is placed again, without reading them.
TEST(GraphAllocatorTest, GraphInFreedBuffersIsPlacedAgain) {
  HostBufferType type("host", 64, nullptr);
  auto small = MakeChain(4);
  {
    GraphAllocator gone({&type});
    ASSERT_THAT(gone.Reserve(small->graph), IsOk());
    ASSERT_THAT(gone.Allocate(small->graph), IsOk());
  }
  GraphAllocator galloc({&type});
  ASSERT_THAT(galloc.Reserve(small->graph), IsOk());
  ASSERT_THAT(galloc.Allocate(small->graph), IsOk());
  EXPECT_EQ(small->out->buffer, galloc.buffer(0, 0));
  auto big = MakeChain(16);
  ASSERT_THAT(galloc.Reserve(big->graph), IsOk());  // Frees small's buffer.
  ASSERT_THAT(galloc.Allocate(small->graph), IsOk());
  EXPECT_EQ(small->out->buffer, galloc.buffer(0, 0));
  EXPECT_THAT(CheckGraphAllocation(small->graph), IsOk());
  // An owner's placement overrides the allocator's, and then stays.
  Context host;
  Tensor* data = *host.NewTensor(DType::kF32, {64, 4});
  ASSERT_THAT(host.AllocateHostData(), IsOk());
  auto mine = WrapHostMemory(&type, data->data, 64 * 4 * sizeof(float));
  ASSERT_THAT(mine, IsOk());
  ASSERT_THAT(PlaceTensor(**mine, *small->out, 0), IsOk());
  EXPECT_TRUE(HasPresetMemory(*small->out));
  ASSERT_THAT(galloc.Allocate(small->graph), IsOk());
  EXPECT_EQ(small->out->buffer, mine->get());
}

TEST(GraphAllocatorTest, WiringChangeMissesTheCache) {
  HostBufferType type("host", 64, nullptr);
  GraphAllocator galloc({&type});
  auto a = MakeChain();
  ASSERT_THAT(galloc.Reserve(a->graph), IsOk());
  // Same ops and shapes, but scale reads x instead of rms_norm's result:
  // rms_norm's result then has no reader, and liveness differs.
  auto b = MakeChain();
  b->scaled->src[0] = b->x;
  Tensor* outs[] = {b->out, b->norm};
  b->graph = *Graph::Build(outs);
  absl::Status s = galloc.Allocate(b->graph);
  EXPECT_FALSE(galloc.last_plan().fast_path && s.ok());
  if (s.ok()) {
    EXPECT_THAT(CheckGraphAllocation(b->graph), IsOk());
  }
}

TEST(GraphAllocatorTest, SpillsIntoChunksAtMaxSize) {
  // Every tensor is 1 KiB; the type allows 2 KiB per buffer.
  HostBufferType type("small", 64, nullptr, 2048);
  GraphAllocator galloc({&type});
  auto c = MakeChain();
  ASSERT_THAT(galloc.Reserve(c->graph), IsOk());
  EXPECT_GE(galloc.num_buffers(0), 2);
  for (int i = 0; i < galloc.num_buffers(0); ++i) {
    EXPECT_LE(galloc.buffer(0, i)->size(), 2048u);
  }
  ASSERT_THAT(galloc.Allocate(c->graph), IsOk());
  EXPECT_THAT(CheckGraphAllocation(c->graph), IsOk());
}

TEST(GraphAllocatorTest, TensorLargerThanMaxSizeIsInvalid) {
  HostBufferType type("tiny", 64, nullptr, 512);
  GraphAllocator galloc({&type});
  auto c = MakeChain();
  EXPECT_THAT(galloc.Reserve(c->graph),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("maximum buffer size")));
  EXPECT_EQ(galloc.num_buffers(0), 0);
  EXPECT_EQ(galloc.reserve_count(), 0);
}

TEST(GraphAllocatorTest, FailingBufferAllocationLeavesNothing) {
  testing::FailingBufferType type(64, 2048, /*fail_after=*/1);
  GraphAllocator galloc({&type});
  auto c = MakeChain();
  EXPECT_THAT(galloc.Reserve(c->graph),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("out of memory")));
  EXPECT_EQ(galloc.num_buffers(0), 0);
  EXPECT_EQ(galloc.buffer_size(0), 0u);
  EXPECT_EQ(galloc.reserve_count(), 0);
  EXPECT_THAT(galloc.Allocate(c->graph),
              StatusIs(absl::StatusCode::kResourceExhausted));
  for (Tensor* t : c->graph.nodes()) EXPECT_EQ(t->data, nullptr);
  type.set_fail_after(100);
  ASSERT_THAT(galloc.Reserve(c->graph), IsOk());
  ASSERT_THAT(galloc.Allocate(c->graph), IsOk());
  EXPECT_THAT(CheckGraphAllocation(c->graph), IsOk());
}

TEST(GraphAllocatorTest, CycleIsInvalid) {
  HostBufferType type("host", 64, nullptr);
  GraphAllocator galloc({&type});
  auto c = MakeChain();
  c->norm->src[0] = c->out;  // After Build: the graph now has a cycle.
  EXPECT_THAT(galloc.Reserve(c->graph),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cycle")));
  EXPECT_EQ(galloc.num_buffers(0), 0);
}

TEST(GraphAllocatorTest, MissingSourceIsInvalid) {
  HostBufferType type("host", 64, nullptr);
  GraphAllocator galloc({&type});
  auto c = MakeChain();
  Context other;
  c->scaled->src[0] = *other.NewTensor(DType::kF32, {64, 4}, "stray");
  EXPECT_THAT(galloc.Reserve(c->graph),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("not in the graph")));
}

TEST(GraphAllocatorTest, UnallocatedWeightIsAPrecondition) {
  HostBufferType type("host", 64, nullptr);
  GraphAllocator galloc({&type});
  Context ctx;
  Tensor* w = *ctx.NewTensor(DType::kF32, {8, 8}, "w");
  SetWeight(*w);
  Tensor* x = *ctx.NewTensor(DType::kF32, {8, 2}, "x");
  SetInput(*x);
  Tensor* y = *MulMat(ctx, w, x);
  Tensor* outs[] = {y};
  Graph g = *Graph::Build(outs);
  EXPECT_THAT(galloc.Reserve(g), StatusIs(absl::StatusCode::kFailedPrecondition,
                                          HasSubstr("'w'")));
}

TEST(GraphAllocatorTest, BadAssignmentIsInvalid) {
  HostBufferType type("host", 64, nullptr);
  GraphAllocator galloc({&type});
  auto c = MakeChain();
  std::vector<int> node_types(c->graph.nodes().size(), 1);
  EXPECT_THAT(galloc.Reserve(c->graph, {.node_types = node_types}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  std::vector<int> short_types(1, 0);
  EXPECT_THAT(galloc.Reserve(c->graph, {.node_types = short_types}),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// Hundreds of seeded random DAGs over three buffer types (alignments 32,
// 256 and 64, the last one with a 16 KiB max buffer size so that plans
// spill into several chunks).
TEST(GraphAllocatorTest, RandomGraphsPassTheChecker) {
  HostBufferType a("a32", 32, nullptr);
  HostBufferType b("b256", 256, nullptr);
  HostBufferType c("c64", 64, nullptr, 16384);
  int total_in_place = 0;
  int total_fast = 0;
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    SCOPED_TRACE(absl::StrCat("seed ", seed));
    const testing::RandomGraphOptions options{
        .num_ops = 10 + static_cast<int>(seed % 50),
        .num_types = 1 + static_cast<int>(seed % 3)};
    absl::StatusOr<testing::RandomGraph> g =
        testing::MakeRandomGraph(seed, options);
    ASSERT_THAT(g.status(), IsOk());
    ASSERT_THAT(g->weights->AllocateHostData(), IsOk());
    const BufferAssignment assign{.leaf_types = g->leaf_types,
                                  .node_types = g->node_types};
    std::vector<BufferType*> types = {&a, &b, &c};
    types.resize(static_cast<size_t>(options.num_types));
    absl::StatusOr<std::vector<MemoryBounds>> bounds =
        ComputeMemoryBounds(g->graph, types, assign);
    ASSERT_THAT(bounds.status(), IsOk());
    GraphAllocator galloc(types);
    ASSERT_THAT(galloc.Reserve(g->graph, assign), IsOk());
    ASSERT_THAT(galloc.Allocate(g->graph, assign), IsOk());
    total_fast += galloc.last_plan().fast_path ? 1 : 0;
    int in_place = 0;
    ASSERT_THAT(CheckGraphAllocation(g->graph, &in_place), IsOk());
    total_in_place += in_place;
    for (size_t t = 0; t < types.size(); ++t) {
      // A single chunk can never beat the in-place aware bound.
      if (galloc.num_buffers(static_cast<int>(t)) <= 1) {
        EXPECT_GE(static_cast<int64_t>(galloc.buffer_size(static_cast<int>(t))),
                  (*bounds)[t].in_place);
      }
      EXPECT_LE((*bounds)[t].in_place, (*bounds)[t].strict);
    }
    // Re-allocate the same graph (fast path) and check again.
    ASSERT_THAT(galloc.Allocate(g->graph, assign), IsOk());
    ASSERT_THAT(CheckGraphAllocation(g->graph), IsOk());
  }
  EXPECT_GT(total_in_place, 100);
  EXPECT_EQ(total_fast, 300);
}

// Allocating a graph into the buffers reserved for another one: either it
// fits and checks, or it says so and leaves nothing placed.
TEST(GraphAllocatorTest, RandomGraphsIntoForeignReservations) {
  HostBufferType a("a32", 32, nullptr);
  HostBufferType c("c64", 64, nullptr, 16384);
  std::vector<BufferType*> types = {&a, &c};
  int fits = 0;
  int misses = 0;
  GraphAllocator galloc(types);
  for (uint64_t seed = 1000; seed < 1100; ++seed) {
    SCOPED_TRACE(absl::StrCat("seed ", seed));
    absl::StatusOr<testing::RandomGraph> g =
        testing::MakeRandomGraph(seed, {.num_ops = 30, .num_types = 2});
    ASSERT_THAT(g.status(), IsOk());
    ASSERT_THAT(g->weights->AllocateHostData(), IsOk());
    const BufferAssignment assign{.leaf_types = g->leaf_types,
                                  .node_types = g->node_types};
    absl::Status s = galloc.Allocate(g->graph, assign);
    if (s.ok()) {
      ++fits;
      ASSERT_THAT(CheckGraphAllocation(g->graph), IsOk());
      continue;
    }
    ASSERT_THAT(s, StatusIs(absl::StatusCode::kResourceExhausted));
    ++misses;
    for (Tensor* t : g->graph.nodes()) ASSERT_EQ(t->data, nullptr);
    ASSERT_THAT(galloc.Reserve(g->graph, assign), IsOk());
    ASSERT_THAT(galloc.Allocate(g->graph, assign), IsOk());
    ASSERT_THAT(CheckGraphAllocation(g->graph), IsOk());
  }
  EXPECT_GT(fits, 10);
  EXPECT_GT(misses, 0);
  EXPECT_EQ(galloc.reserve_count(), misses);
}

struct LlamaCase {
  int64_t n_tokens;
  bool last_only;
};

TEST(GraphAllocatorTest, LlamaGraphsCheckAndMeetTheTarget) {
  llama::LlamaConfig config{
      .n_layer = 4, .n_embd = 256, .n_head = 4, .n_ff = 704, .n_vocab = 1000};
  absl::StatusOr<std::unique_ptr<llama::LlamaModel>> model =
      testing::MakeFakePlacedLlamaModel(config);
  ASSERT_THAT(model.status(), IsOk());
  HostBufferType type("host", 64, nullptr);
  for (LlamaCase lc :
       {LlamaCase{1, false}, LlamaCase{32, false}, LlamaCase{32, true},
        LlamaCase{128, true}, LlamaCase{128, false}}) {
    SCOPED_TRACE(
        absl::StrCat("n_tokens ", lc.n_tokens, " last ", lc.last_only));
    absl::StatusOr<llama::LlamaGraph> g = llama::BuildLlamaGraph(
        **model, {.n_tokens = lc.n_tokens, .last_token_only = lc.last_only});
    ASSERT_THAT(g.status(), IsOk());
    BufferType* types[] = {&type};
    absl::StatusOr<std::vector<MemoryBounds>> bounds =
        ComputeMemoryBounds(g->graph, types);
    ASSERT_THAT(bounds.status(), IsOk());
    GraphAllocator galloc({&type});
    ASSERT_THAT(galloc.Reserve(g->graph), IsOk());
    ASSERT_THAT(galloc.Allocate(g->graph), IsOk());
    ASSERT_THAT(CheckGraphAllocation(g->graph), IsOk());
    const double peak = static_cast<double>(galloc.buffer_size(0));
    EXPECT_GE(peak, static_cast<double>((*bounds)[0].in_place));
    EXPECT_LE(peak, 1.02 * static_cast<double>((*bounds)[0].in_place));
    EXPECT_GT(galloc.last_plan().num_in_place, 0);
  }
}

TEST(GraphAllocatorTest, SeveralBufferTypesInOneGraph) {
  HostBufferType a("a", 32, nullptr);
  HostBufferType b("b", 256, nullptr);
  GraphAllocator galloc({&a, &b});
  auto c = MakeChain();
  // Alternate the nodes between the types; the input goes to b.
  std::vector<int> node_types;
  for (size_t i = 0; i < c->graph.nodes().size(); ++i) {
    node_types.push_back(static_cast<int>(i % 2));
  }
  std::vector<int> leaf_types;
  for (Tensor* leaf : c->graph.leafs()) {
    leaf_types.push_back(leaf == c->x ? 1 : 0);
  }
  const BufferAssignment assign{.leaf_types = leaf_types,
                                .node_types = node_types};
  ASSERT_THAT(galloc.Reserve(c->graph, assign), IsOk());
  ASSERT_THAT(galloc.Allocate(c->graph, assign), IsOk());
  EXPECT_THAT(CheckGraphAllocation(c->graph), IsOk());
  EXPECT_EQ(c->x->buffer->type(), &b);
  for (size_t i = 0; i < c->graph.nodes().size(); ++i) {
    const Tensor* n = c->graph.nodes()[i];
    EXPECT_EQ(n->buffer->type(), i % 2 == 0 ? static_cast<BufferType*>(&a)
                                            : static_cast<BufferType*>(&b));
  }
  EXPECT_GT(galloc.buffer_size(0), 0u);
  EXPECT_GT(galloc.buffer_size(1), 0u);
}

}  // namespace
}  // namespace ferry
