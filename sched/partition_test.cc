// Partitioning as pure functions: graphs with tables of backend facts, no
// backend anywhere.
#include "ferry/sched/partition.h"

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ferry/alloc/graph_signature.h"
#include "ferry/backends/host_buffer.h"
#include "ferry/graph/context.h"
#include "ferry/graph/graph.h"
#include "ferry/graph/ops.h"
#include "ferry/runtime/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

using ::ferry::testing::IsOk;
using ::ferry::testing::StatusIs;
using ::testing::HasSubstr;

// Backends: 0 = "acc0", 1 = "acc1" (accelerators), 2 = "cpu" (last).
// Each knows the ops it runs, whether it asks for offloaded ops, and the
// buffer types it uses.
struct Facts {
  std::vector<std::set<Op>> ops = {{}, {}, {}};  // Empty: every op.
  std::vector<bool> offloads = {false, false, false};
  std::vector<std::vector<const BufferType*>> types = {{}, {}, {}};
  // The signature the answers are asked about.
  const GraphSignature* sig = nullptr;
  int asked = 0;

  bool Supports(int b, int i) {
    ++asked;
    const std::set<Op>& set = ops[b];
    return set.empty() || set.count(sig->tensor(i)->op) > 0;
  }
};

class PartitionTest : public ::testing::Test {
 protected:
  PartitionTest()
      : acc0_mem_("acc0_mem", 64, nullptr),
        acc1_mem_("acc1_mem", 64, nullptr),
        host_("host", 64, nullptr) {
    facts_.types = {{&acc0_mem_}, {&acc1_mem_}, {&host_}};
  }

  absl::Status Run(const Graph& graph, PartitionOptions options = {},
                   std::vector<std::pair<int, int>> pins = {}) {
    FERRY_RETURN_IF_ERROR(sig_.Update(graph));
    facts_.sig = &sig_;
    auto supports = [&](int b, int i) { return facts_.Supports(b, i); };
    auto offload = [&](int b, int) { return facts_.offloads[b]; };
    auto uses = [&](int b, const BufferType* type) {
      for (const BufferType* t : facts_.types[b]) {
        if (t == type) return true;
      }
      return false;
    };
    auto name = [](int b) {
      return b == 2 ? std::string("cpu") : absl::StrCat("acc", b);
    };
    const PartitionFacts facts{.num_backends = 3,
                               .supports = supports,
                               .offload = offload,
                               .uses_buffer_type = uses,
                               .name = name};
    FERRY_RETURN_IF_ERROR(AssignBackends(sig_, facts, options, pins, p_));
    return CutSplits(sig_, options, p_);
  }

  int BackendOf(const Tensor* t) { return p_.backend[sig_.IndexOf(t)]; }
  AssignReason ReasonOf(const Tensor* t) { return p_.reason[sig_.IndexOf(t)]; }

  // A weight of `shape` placed (fake, never read) in a buffer of `type`.
  Tensor* Weight(BufferType& type, std::vector<int64_t> shape,
                 const char* name) {
    Tensor* w = *weights_.NewTensor(DType::kF32, shape, name);
    SetWeight(*w);
    auto buffer = type.Allocate(static_cast<size_t>(w->NumBytes()));
    EXPECT_THAT(buffer, IsOk());
    (*buffer)->set_usage(BufferUsage::kWeights);
    EXPECT_THAT(PlaceTensor(**buffer, *w, 0), IsOk());
    buffers_.push_back(*std::move(buffer));
    return w;
  }

  HostBufferType acc0_mem_, acc1_mem_, host_;
  Facts facts_;
  Context weights_;
  Context ctx_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
  GraphSignature sig_;
  Partition p_;
};

TEST_F(PartitionTest, NodesFollowTheirWeightsAndInputsGoToTheCpu) {
  Tensor* w = Weight(acc0_mem_, {16, 8}, "w");
  Tensor* x = *ctx_.NewTensor(DType::kF32, {16, 4}, "x");
  SetInput(*x);
  Tensor* y = *MulMat(ctx_, w, x);
  Tensor* z = *Relu(ctx_, y);
  Graph graph = *Graph::Build({z});
  FERRY_ASSERT_OK(Run(graph));
  EXPECT_EQ(BackendOf(x), 2);
  EXPECT_EQ(ReasonOf(x), AssignReason::kGraphInput);
  EXPECT_EQ(BackendOf(y), 0);
  EXPECT_EQ(ReasonOf(y), AssignReason::kWeight);
  EXPECT_EQ(BackendOf(z), 0);  // Expansion from the accelerator.
  EXPECT_EQ(ReasonOf(z), AssignReason::kExpandAccel);
  ASSERT_EQ(p_.splits.size(), 1u);
  // The user input is copied (callers may overwrite it at once).
  ASSERT_EQ(p_.copies.size(), 1u);
  EXPECT_TRUE(p_.copies[0].user_input);
  EXPECT_EQ(p_.copies[0].src_lane, -1);
  EXPECT_EQ(p_.copies[0].dst_backend, 0);
}

// A pipeline cut between two layers: the next stage's first norm (no
// weight of its own) runs on that stage, which reads the residual anyway,
// so the residual crosses alone, not the residual and its norm.
TEST_F(PartitionTest, ANormAtACutRunsWithItsConsumers) {
  Tensor* w0 = Weight(acc0_mem_, {16, 16}, "w0");
  Tensor* gamma1 = Weight(acc1_mem_, {16}, "gamma1");
  Tensor* w1 = Weight(acc1_mem_, {16, 16}, "w1");
  Tensor* x = *ctx_.NewTensor(DType::kF32, {16, 4}, "x");
  SetInput(*x);
  Tensor* h0 = *MulMat(ctx_, w0, x);
  Tensor* norm = *RmsNorm(ctx_, h0, 1e-5f);
  Tensor* scaled = *Mul(ctx_, norm, gamma1);
  Tensor* h1 = *MulMat(ctx_, w1, scaled);
  Tensor* out = *Add(ctx_, h1, h0);  // The residual.
  Graph graph = *Graph::Build({out});
  FERRY_ASSERT_OK(Run(graph));
  EXPECT_EQ(BackendOf(h0), 0);
  EXPECT_EQ(BackendOf(norm), 1);
  EXPECT_EQ(ReasonOf(norm), AssignReason::kPulledToConsumers);
  ASSERT_EQ(p_.splits.size(), 2u);
  std::vector<int> crossing;
  for (const InputCopy& copy : p_.copies) {
    if (!copy.user_input) crossing.push_back(copy.source);
  }
  EXPECT_THAT(crossing, ::testing::ElementsAre(sig_.IndexOf(h0)));

  // Without the residual, the norm's source would cross for it alone: it
  // stays where its source is.
  Tensor* alone =
      *MulMat(ctx_, w1, *Mul(ctx_, *RmsNorm(ctx_, h0, 1e-5f), gamma1));
  Graph no_residual = *Graph::Build({alone});
  FERRY_ASSERT_OK(Run(no_residual));
  EXPECT_EQ(BackendOf(alone->src[1]->src[0]), 0);
  EXPECT_EQ(ReasonOf(alone->src[1]->src[0]), AssignReason::kExpandAccel);

  // Nor does it move when acc1 does not run it.
  facts_.ops[1] = {Op::kMul, Op::kMulMat, Op::kAdd};
  FERRY_ASSERT_OK(Run(graph));
  EXPECT_EQ(BackendOf(norm), 0);
}

// Onto the CPU (the fallback) a node moves only if its work is about its
// bytes, as a norm's is; a product of two activations stays on the
// accelerator although its sources cross anyway.
TEST_F(PartitionTest, OnlyMemoryBoundNodesMoveOntoTheCpu) {
  Tensor* w0 = Weight(acc0_mem_, {64, 64}, "w0");
  Tensor* gamma = Weight(host_, {64}, "gamma");
  Tensor* g8 = Weight(host_, {8}, "g8");
  Tensor* x = *ctx_.NewTensor(DType::kF32, {64, 8}, "x");
  SetInput(*x);
  Tensor* h0 = *MulMat(ctx_, w0, x);
  Tensor* norm = *RmsNorm(ctx_, h0, 1e-5f);
  Tensor* scaled = *Mul(ctx_, norm, gamma);  // On the CPU, with gamma.
  Tensor* out = *Add(ctx_, scaled, h0);
  Graph cheap = *Graph::Build({out});
  FERRY_ASSERT_OK(Run(cheap));
  EXPECT_EQ(BackendOf(scaled), 2);
  EXPECT_EQ(BackendOf(norm), 2);
  EXPECT_EQ(ReasonOf(norm), AssignReason::kPulledToConsumers);

  Tensor* gram = *MulMat(ctx_, h0, h0);  // 8 x 8: 2 flops per byte.
  Tensor* weighted = *Mul(ctx_, gram, g8);
  Tensor* residual = *Mul(ctx_, h0, gamma);
  Graph heavy = *Graph::Build({weighted, residual});
  FERRY_ASSERT_OK(Run(heavy));
  EXPECT_EQ(BackendOf(weighted), 2);
  EXPECT_EQ(BackendOf(residual), 2);
  EXPECT_EQ(BackendOf(gram), 0);
  EXPECT_EQ(ReasonOf(gram), AssignReason::kExpandAccel);
}

TEST_F(PartitionTest, UnsupportedOpsCutSplitsAndCopyBothWays) {
  facts_.ops[0] = {Op::kMulMat};
  facts_.ops[1] = {Op::kMulMat};
  Tensor* w = Weight(acc0_mem_, {16, 8}, "w");
  Tensor* x = *ctx_.NewTensor(DType::kF32, {16, 4}, "x");
  SetInput(*x);
  Tensor* a = *Scale(ctx_, x, 2.0f);
  Tensor* b = *MulMat(ctx_, w, a);
  Tensor* c = *Relu(ctx_, b);
  Graph graph = *Graph::Build({c});
  FERRY_ASSERT_OK(Run(graph));
  EXPECT_EQ(BackendOf(a), 2);
  EXPECT_EQ(BackendOf(b), 0);
  EXPECT_EQ(BackendOf(c), 2);
  ASSERT_EQ(p_.splits.size(), 3u);
  EXPECT_EQ(p_.splits[0].backend, 2);
  EXPECT_EQ(p_.splits[1].backend, 0);
  EXPECT_EQ(p_.splits[2].backend, 2);
  // The CPU comes back: its second split runs on a lane of its own.
  EXPECT_EQ(p_.splits[0].lane, 0);
  EXPECT_NE(p_.splits[2].lane, p_.splits[0].lane);
  EXPECT_EQ(p_.lanes[p_.splits[2].lane].backend, 2);
  EXPECT_EQ(p_.lanes[p_.splits[2].lane].index, 1);
  // Copies: x (user) -> cpu, a cpu -> acc0, b acc0 -> cpu.
  ASSERT_EQ(p_.copies.size(), 3u);
  EXPECT_EQ(p_.copies[1].src_lane, p_.splits[0].lane);
  EXPECT_EQ(p_.copies[2].src_lane, p_.splits[1].lane);
  EXPECT_EQ(p_.copies[2].dst_lane, p_.splits[2].lane);
}

TEST_F(PartitionTest, ValuesCrossingLanesOfOneBackendAreCopied) {
  // x -> a (cpu) -> b (acc0) -> c = a + b (cpu, a later lane): `a` was
  // computed on the CPU's first lane, so the second lane gets a copy.
  facts_.ops[0] = {Op::kRelu};
  facts_.ops[2] = {};
  Tensor* x = *ctx_.NewTensor(DType::kF32, {8}, "x");
  SetInput(*x);
  Tensor* a = *Scale(ctx_, x, 2.0f);
  Tensor* b = *Relu(ctx_, a);
  Tensor* c = *Add(ctx_, a, b);
  Graph graph = *Graph::Build({c});
  FERRY_ASSERT_OK(sig_.Update(graph));  // Pins are given as numbers.
  FERRY_ASSERT_OK(Run(graph, {}, {{sig_.IndexOf(b), 0}}));
  ASSERT_EQ(p_.splits.size(), 3u) << "cpu, acc0, cpu";
  int copies_of_a = 0;
  for (const InputCopy& copy : p_.copies) {
    if (copy.source == sig_.IndexOf(a)) ++copies_of_a;
  }
  EXPECT_EQ(copies_of_a, 2) << "to acc0, and to the CPU's second lane";
}

TEST_F(PartitionTest, OffloadGoesToTheAcceleratorNextToTheOp) {
  // Layers on acc0 then acc1; the head's weight in host memory, both
  // accelerators ask for it: it runs after acc1's layers, on acc1 (not on
  // acc0, which would loop the pipeline back).
  facts_.offloads = {true, true, false};
  Tensor* w0 = Weight(acc0_mem_, {16, 16}, "w0");
  Tensor* w1 = Weight(acc1_mem_, {16, 16}, "w1");
  Tensor* head = Weight(host_, {16, 32}, "head");
  Tensor* x = *ctx_.NewTensor(DType::kF32, {16, 4}, "x");
  SetInput(*x);
  Tensor* h0 = *MulMat(ctx_, w0, x);
  Tensor* h1 = *MulMat(ctx_, w1, h0);
  Tensor* out = *MulMat(ctx_, head, h1);
  Graph graph = *Graph::Build({out});
  FERRY_ASSERT_OK(Run(graph));
  EXPECT_EQ(BackendOf(h0), 0);
  EXPECT_EQ(BackendOf(h1), 1);
  EXPECT_EQ(BackendOf(out), 1);
  EXPECT_EQ(ReasonOf(out), AssignReason::kOffload);
  // Off: the CPU computes it with its weight.
  FERRY_ASSERT_OK(Run(graph, {.op_offload = false}));
  EXPECT_EQ(BackendOf(out), 2);
  EXPECT_EQ(ReasonOf(out), AssignReason::kWeight);
  // On, but no accelerator asks for it: the CPU too.
  facts_.offloads = {false, false, false};
  FERRY_ASSERT_OK(Run(graph));
  EXPECT_EQ(BackendOf(out), 2);
}

TEST_F(PartitionTest, OffloadWithoutNeighboursGoesToTheFirstThatAsks) {
  facts_.offloads = {false, true, false};
  Tensor* w = Weight(host_, {16, 16}, "w");
  Tensor* x = *ctx_.NewTensor(DType::kF32, {16, 4}, "x");
  SetInput(*x);
  Tensor* y = *MulMat(ctx_, w, x);
  Graph graph = *Graph::Build({y});
  FERRY_ASSERT_OK(Run(graph));
  EXPECT_EQ(BackendOf(y), 1);
  EXPECT_EQ(ReasonOf(y), AssignReason::kOffload);
  // The weight is copied to acc1 every batch; no producer (lane -1).
  bool weight_copied = false;
  for (const InputCopy& copy : p_.copies) {
    if (copy.source == sig_.IndexOf(w)) {
      weight_copied = true;
      EXPECT_EQ(copy.src_lane, -1);
      EXPECT_EQ(copy.dst_backend, 1);
    }
  }
  EXPECT_TRUE(weight_copied);
}

TEST_F(PartitionTest, PinsWinAndErrorsNameTheNode) {
  Tensor* x = *ctx_.NewTensor(DType::kF32, {8}, "x");
  SetInput(*x);
  Tensor* a = *Silu(ctx_, x);
  a->name = "a";
  Graph graph = *Graph::Build({a});
  FERRY_ASSERT_OK(sig_.Update(graph));
  FERRY_ASSERT_OK(Run(graph, {}, {{sig_.IndexOf(a), 1}}));
  EXPECT_EQ(BackendOf(a), 1);
  EXPECT_EQ(ReasonOf(a), AssignReason::kPinned);
  // Nobody runs silu.
  facts_.ops = {{Op::kMulMat}, {Op::kMulMat}, {Op::kMulMat}};
  EXPECT_THAT(Run(graph),
              StatusIs(absl::StatusCode::kUnimplemented,
                       ::testing::AllOf(HasSubstr("'a'"),
                                        HasSubstr("acc0, acc1, cpu"))));
}

// Two backends of one device share its weights' buffer type: a pinned
// weight says which holds it, and its readers follow (two pipeline stages
// on one CPU, each with its own threads).
TEST_F(PartitionTest, ReadersFollowAPinnedWeight) {
  facts_.types = {{&host_}, {&host_}, {&host_}};
  Tensor* w0 = Weight(host_, {16, 16}, "w0");
  Tensor* w1 = Weight(host_, {16, 16}, "w1");
  Tensor* x = *ctx_.NewTensor(DType::kF32, {16, 4}, "x");
  SetInput(*x);
  Tensor* y0 = *MulMat(ctx_, w0, x);
  Tensor* y1 = *MulMat(ctx_, w1, y0);
  Graph graph = *Graph::Build({y1});
  FERRY_ASSERT_OK(Run(graph));
  EXPECT_EQ(BackendOf(y1), 0);  // Unpinned: the first that uses the type.
  FERRY_ASSERT_OK(sig_.Update(graph));
  FERRY_ASSERT_OK(
      Run(graph, {}, {{sig_.IndexOf(w0), 0}, {sig_.IndexOf(w1), 1}}));
  EXPECT_EQ(BackendOf(y0), 0);
  EXPECT_EQ(BackendOf(y1), 1);
  EXPECT_EQ(ReasonOf(y1), AssignReason::kWeight);
  EXPECT_EQ(p_.splits.size(), 2u);  // One per stage.
}

// A write into a view of a pinned tensor (a layer's KV cache) runs with it,
// not on the first backend using its memory: the stage that reads the cache
// is the one that wrote it.
TEST_F(PartitionTest, AViewOfAPinnedTensorStaysWithIt) {
  facts_.types = {{&host_}, {&host_}, {&host_}};
  Tensor* cache = Weight(host_, {64}, "cache");
  cache->flags &= ~kTensorFlagWeight;
  Tensor* x = *ctx_.NewTensor(DType::kF32, {16}, "x");
  SetInput(*x);
  Tensor* slot = *View1D(ctx_, cache, 16, 16 * 4);
  Tensor* write = *Cpy(ctx_, x, slot);
  write->name = "write";
  Graph graph = *Graph::Build({write});
  FERRY_ASSERT_OK(Run(graph));
  EXPECT_EQ(BackendOf(write), 0);
  FERRY_ASSERT_OK(sig_.Update(graph));
  FERRY_ASSERT_OK(Run(graph, {}, {{sig_.IndexOf(cache), 1}}));
  EXPECT_EQ(BackendOf(write), 1);
  EXPECT_EQ(ReasonOf(write), AssignReason::kViewSource);
}

TEST_F(PartitionTest, MemoryNoBackendUsesIsAnError) {
  HostBufferType alien("alien", 64, nullptr);
  Tensor* w = Weight(alien, {8}, "w");
  Tensor* x = *ctx_.NewTensor(DType::kF32, {8}, "x");
  SetInput(*x);
  Tensor* y = *Add(ctx_, x, w);
  Graph graph = *Graph::Build({y});
  EXPECT_THAT(Run(graph),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("alien")));
}

TEST_F(PartitionTest, MaxSplitInputsStartsNewSplits) {
  Tensor* x = *ctx_.NewTensor(DType::kF32, {8}, "x");
  SetInput(*x);
  Tensor* sum = x;
  for (int i = 0; i < 4; ++i) {
    Tensor* in = *ctx_.NewTensor(DType::kF32, {8}, absl::StrCat("in", i));
    SetInput(*in);
    sum = *Add(ctx_, sum, in);
  }
  Graph graph = *Graph::Build({sum});
  FERRY_ASSERT_OK(Run(graph));
  EXPECT_EQ(p_.splits.size(), 1u);
  FERRY_ASSERT_OK(Run(graph, {.max_split_inputs = 2}));
  EXPECT_EQ(p_.splits.size(), 3u);
  for (const Split& split : p_.splits) {
    EXPECT_LE(split.inputs_end - split.inputs_begin, 2);
    EXPECT_EQ(split.lane, p_.splits[0].lane) << "adjacent: one lane";
  }
  // One node needing more than the limit alone is an error.
  Tensor* a = *ctx_.NewTensor(DType::kF32, {8}, "a");
  Tensor* b = *ctx_.NewTensor(DType::kF32, {8}, "b");
  SetInput(*a);
  SetInput(*b);
  Tensor* ab = *Add(ctx_, a, b);
  Graph two = *Graph::Build({ab});
  EXPECT_THAT(Run(two, {.max_split_inputs = 1}),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("max_split_inputs = 1")));
}

TEST_F(PartitionTest, SourcesOutsideTheGraphAreRefused) {
  Tensor* x = *ctx_.NewTensor(DType::kF32, {8}, "x");
  SetInput(*x);
  Tensor* y = *Relu(ctx_, x);
  Graph graph = *Graph::Build({y});
  Tensor* stray = *ctx_.NewTensor(DType::kF32, {8}, "stray");
  y->src[0] = stray;  // Rewired after Build: not in the graph.
  EXPECT_THAT(Run(graph), StatusIs(absl::StatusCode::kInvalidArgument,
                                   HasSubstr("not in the graph")));
}

}  // namespace
}  // namespace ferry
