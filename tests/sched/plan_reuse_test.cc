// The scheduler reuses its last plan only for a graph that matches it
// exactly: a changed shape, op, op parameter, pin or weight buffer is
// planned again, and results follow the graph as it is now.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "ferry/alloc/weights.h"
#include "ferry/backends/cpu/cpu_backend.h"
#include "ferry/backends/sim/sim_device.h"
#include "ferry/graph/context.h"
#include "ferry/graph/graph.h"
#include "ferry/graph/ops.h"
#include "ferry/models/llama/llama_graph.h"
#include "ferry/models/llama/llama_model.h"
#include "ferry/models/llama/testing/llama_testing.h"
#include "ferry/runtime/status_matchers.h"
#include "ferry/sched/scheduler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr llama::LlamaConfig kTinyLlama = {
    .n_layer = 2, .n_embd = 64, .n_head = 4, .n_ff = 96, .n_vocab = 50};

// x (input, [16, n]) -> a = x * 2 -> b = mul_mat(w, a) -> c = relu(b), with
// w a weight on a sim device that only runs mul_mat: a and c run on the
// CPU and read copies (of x, and of b), so they are cloned per slot.
struct SmallGraph {
  Context ctx;
  Tensor* x = nullptr;
  Tensor* a = nullptr;
  Tensor* b = nullptr;
  Tensor* c = nullptr;
  Graph graph;
};

class PlanReuseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FERRY_ASSERT_OK_AND_ASSIGN(cpu_, GetCpuDevice().CreateBackend("threads=1"));
    FERRY_ASSERT_OK_AND_ASSIGN(sim_device_,
                               SimDevice::Create("reuse_sim", "ops=mul_mat"));
    FERRY_ASSERT_OK_AND_ASSIGN(sim_, sim_device_->CreateBackend());
    FERRY_ASSERT_OK_AND_ASSIGN(w_,
                               weights_.NewTensor(DType::kF32, {16, 8}, "w"));
    FERRY_ASSERT_OK_AND_ASSIGN(
        wbufs_, AllocateWeights(weights_, *sim_->default_buffer_type()));
    wv_.resize(16 * 8);
    for (size_t i = 0; i < wv_.size(); ++i) {
      wv_[i] = 0.01f * static_cast<float>(i % 13) - 0.05f;
    }
    FERRY_ASSERT_OK(SetTensorData(*w_, wv_.data()));
  }

  std::unique_ptr<SmallGraph> Build(int64_t n) {
    auto g = std::make_unique<SmallGraph>();
    g->x = *g->ctx.NewTensor(DType::kF32, {16, n}, "x");
    SetInput(*g->x);
    g->a = *Scale(g->ctx, g->x, 2.0f);
    g->a->name = "a";
    g->b = *MulMat(g->ctx, w_, g->a);
    g->b->name = "b";
    g->c = *Relu(g->ctx, g->b);
    g->c->name = "c";
    SetOutput(*g->c);
    g->graph = *Graph::Build({g->c});
    return g;
  }

  // Fills x, computes, and returns c.
  std::vector<float> Run(Scheduler& sched, SmallGraph& g) {
    std::vector<float> xv(g.x->NumElements());
    for (size_t i = 0; i < xv.size(); ++i) {
      xv[i] = 0.1f * static_cast<float>(i % 7) - 0.3f;
    }
    EXPECT_THAT(SetTensorData(*g.x, xv.data()), testing::IsOk());
    EXPECT_THAT(sched.Compute(g.graph), testing::IsOk());
    std::vector<float> out(g.c->NumElements());
    EXPECT_THAT(GetTensorData(*g.c, out.data()), testing::IsOk());
    return out;
  }

  // c computed by hand: act(w * (scale * x)).
  std::vector<float> Expected(const SmallGraph& g, float scale, bool silu) {
    const int64_t n = g.x->ne[1];
    std::vector<float> out(8 * n);
    for (int64_t j = 0; j < n; ++j) {
      for (int m = 0; m < 8; ++m) {
        double dot = 0;
        for (int k = 0; k < 16; ++k) {
          const float x = 0.1f * static_cast<float>((j * 16 + k) % 7) - 0.3f;
          dot += wv_[m * 16 + k] * scale * x;
        }
        out[j * 8 + m] = static_cast<float>(silu ? dot / (1.0 + std::exp(-dot))
                                                 : std::max(dot, 0.0));
      }
    }
    return out;
  }

  std::unique_ptr<Scheduler> MakeScheduler() {
    auto sched = Scheduler::Create({sim_.get(), cpu_.get()}, {.n_copies = 2});
    EXPECT_THAT(sched, testing::IsOk());
    return std::move(*sched);
  }

  std::unique_ptr<Backend> cpu_;
  std::unique_ptr<SimDevice> sim_device_;
  std::unique_ptr<Backend> sim_;
  Context weights_;
  Tensor* w_ = nullptr;
  std::vector<std::unique_ptr<Buffer>> wbufs_;
  std::vector<float> wv_;
};

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-5) << "element " << i;
  }
}

int CountOf(const std::string& text, const std::string& what) {
  int count = 0;
  for (size_t at = text.find(what); at != std::string::npos;
       at = text.find(what, at + 1)) {
    ++count;
  }
  return count;
}

TEST_F(PlanReuseTest, SameGraphReusesThePlanAndItMatchesAFreshOne) {
  auto g = Build(3);
  auto sched = MakeScheduler();
  FERRY_ASSERT_OK(sched->AllocGraph(g->graph));
  const std::string assignment = sched->DescribeAssignment();
  const std::string splits = sched->DescribeSplits();
  EXPECT_EQ(sched->stats().plans_reused, 0);
  ExpectNear(Run(*sched, *g), Expected(*g, 2.0f, false));
  for (int k = 0; k < 3; ++k) {
    sched->Reset();
    FERRY_ASSERT_OK(sched->AllocGraph(g->graph));
    ExpectNear(Run(*sched, *g), Expected(*g, 2.0f, false));
  }
  EXPECT_EQ(sched->stats().plans_reused, 3);
  EXPECT_EQ(sched->stats().graphs_planned, 4);
  // Activations the scheduler placed do not change the plan or its reasons.
  EXPECT_EQ(sched->DescribeAssignment(), assignment);
  EXPECT_EQ(sched->DescribeSplits(), splits);
  // Only the weight is assigned by its buffer.
  EXPECT_EQ(CountOf(assignment, "already in a buffer"), 1) << assignment;
  EXPECT_THAT(assignment, HasSubstr("uses a weight"));
  // A new scheduler, on a new copy of the graph, plans the same.
  auto g2 = Build(3);
  auto fresh = MakeScheduler();
  FERRY_ASSERT_OK(fresh->AllocGraph(g2->graph));
  EXPECT_EQ(fresh->DescribeAssignment(), assignment);
  EXPECT_EQ(fresh->DescribeSplits(), splits);
  EXPECT_EQ(sched->stats().num_split_inputs, fresh->stats().num_split_inputs);
  EXPECT_EQ(sched->stats().copy_bytes, fresh->stats().copy_bytes);
}

TEST_F(PlanReuseTest, ReserveThenAllocReuses) {
  auto g = Build(3);
  auto sched = MakeScheduler();
  FERRY_ASSERT_OK(sched->Reserve(g->graph));
  FERRY_ASSERT_OK(sched->AllocGraph(g->graph));
  EXPECT_EQ(sched->stats().plans_reused, 1);
  ExpectNear(Run(*sched, *g), Expected(*g, 2.0f, false));
}

TEST_F(PlanReuseTest, RebuiltGraphReusesThePlanWithItsOwnTensors) {
  auto g1 = Build(3);
  auto g2 = Build(3);
  auto sched = MakeScheduler();
  FERRY_ASSERT_OK(sched->AllocGraph(g1->graph));
  ExpectNear(Run(*sched, *g1), Expected(*g1, 2.0f, false));
  FERRY_ASSERT_OK(sched->AllocGraph(g2->graph));
  EXPECT_EQ(sched->stats().plans_reused, 1);
  EXPECT_EQ(sched->GetTensorBackend(*g2->b), sim_.get());
  EXPECT_EQ(sched->GetTensorBackend(*g1->b), nullptr);  // Not planned now.
  // The copies read g2's tensors, not g1's.
  ExpectNear(Run(*sched, *g2), Expected(*g2, 2.0f, false));
  std::vector<float> stale(g1->x->NumElements(), 0.0f);
  FERRY_ASSERT_OK(SetTensorData(*g1->x, stale.data()));
  ExpectNear(Run(*sched, *g2), Expected(*g2, 2.0f, false));
  // And back.
  FERRY_ASSERT_OK(sched->AllocGraph(g1->graph));
  EXPECT_EQ(sched->stats().plans_reused, 2);
  ExpectNear(Run(*sched, *g1), Expected(*g1, 2.0f, false));
}

TEST_F(PlanReuseTest, DifferentShapeIsPlannedAgain) {
  auto g3 = Build(3);
  auto g5 = Build(5);
  auto sched = MakeScheduler();
  FERRY_ASSERT_OK(sched->AllocGraph(g3->graph));
  const int64_t bytes3 = sched->stats().copy_bytes[1][0];
  FERRY_ASSERT_OK(sched->AllocGraph(g5->graph));
  EXPECT_EQ(sched->stats().plans_reused, 0);
  EXPECT_EQ(sched->stats().copy_bytes[1][0], bytes3 / 3 * 5);
  ExpectNear(Run(*sched, *g5), Expected(*g5, 2.0f, false));
}

TEST_F(PlanReuseTest, ChangedOpParamIsPlannedAgain) {
  auto g = Build(3);
  auto sched = MakeScheduler();
  FERRY_ASSERT_OK(sched->AllocGraph(g->graph));
  ExpectNear(Run(*sched, *g), Expected(*g, 2.0f, false));
  // a reads the copy of x, so it runs as a per-slot clone: a reused plan
  // would still scale by 2.
  g->a->SetParamF32(0, 3.0f);
  FERRY_ASSERT_OK(sched->AllocGraph(g->graph));
  EXPECT_EQ(sched->stats().plans_reused, 0);
  ExpectNear(Run(*sched, *g), Expected(*g, 3.0f, false));
}

TEST_F(PlanReuseTest, ChangedOpIsPlannedAgain) {
  auto g = Build(3);
  auto sched = MakeScheduler();
  FERRY_ASSERT_OK(sched->AllocGraph(g->graph));
  ExpectNear(Run(*sched, *g), Expected(*g, 2.0f, false));
  // c reads the copy of b (sim -> cpu), so it is a clone too.
  g->c->op = Op::kSilu;
  FERRY_ASSERT_OK(sched->AllocGraph(g->graph));
  EXPECT_EQ(sched->stats().plans_reused, 0);
  EXPECT_THAT(sched->DescribeAssignment(), HasSubstr("silu"));
  ExpectNear(Run(*sched, *g), Expected(*g, 2.0f, true));
}

// SupportsOp answers are kept across plans only for nodes whose key and
// sources' keys did not change: c moves off a device that runs relu but not
// silu.
TEST_F(PlanReuseTest, ChangedOpIsAskedAgainWhereItRuns) {
  FERRY_ASSERT_OK_AND_ASSIGN(auto relu_device,
                             SimDevice::Create("relu_sim", "ops=mul_mat,relu"));
  FERRY_ASSERT_OK_AND_ASSIGN(auto relu_sim, relu_device->CreateBackend());
  w_->buffer = nullptr;
  w_->data = nullptr;
  FERRY_ASSERT_OK_AND_ASSIGN(
      auto bufs, AllocateWeights(weights_, *relu_sim->default_buffer_type()));
  FERRY_ASSERT_OK(SetTensorData(*w_, wv_.data()));
  auto g = Build(3);
  FERRY_ASSERT_OK_AND_ASSIGN(
      auto sched, Scheduler::Create({relu_sim.get(), cpu_.get()}, {}));
  FERRY_ASSERT_OK(sched->AllocGraph(g->graph));
  EXPECT_EQ(sched->GetTensorBackend(*g->c), relu_sim.get());
  ExpectNear(Run(*sched, *g), Expected(*g, 2.0f, false));
  g->c->op = Op::kSilu;
  FERRY_ASSERT_OK(sched->AllocGraph(g->graph));
  EXPECT_EQ(sched->stats().plans_reused, 0);
  EXPECT_EQ(sched->GetTensorBackend(*g->c), cpu_.get());
  ExpectNear(Run(*sched, *g), Expected(*g, 2.0f, true));
  // As a new scheduler plans it.
  auto g2 = Build(3);
  g2->c->op = Op::kSilu;
  FERRY_ASSERT_OK_AND_ASSIGN(
      auto fresh, Scheduler::Create({relu_sim.get(), cpu_.get()}, {}));
  FERRY_ASSERT_OK(fresh->AllocGraph(g2->graph));
  EXPECT_EQ(fresh->DescribeAssignment(), sched->DescribeAssignment());
  EXPECT_EQ(fresh->DescribeSplits(), sched->DescribeSplits());
  sched.reset();
  fresh.reset();
  w_->buffer = nullptr;  // Before its buffer goes away.
  w_->data = nullptr;
}

TEST_F(PlanReuseTest, ChangedPinIsPlannedAgain) {
  auto g = Build(3);
  auto sched = MakeScheduler();
  FERRY_ASSERT_OK(sched->AllocGraph(g->graph));
  EXPECT_EQ(sched->GetTensorBackend(*g->b), sim_.get());
  EXPECT_EQ(sched->num_splits(), 3);
  sched->Reset();
  FERRY_ASSERT_OK(sched->SetTensorBackend(*g->b, *cpu_));
  FERRY_ASSERT_OK(sched->AllocGraph(g->graph));
  EXPECT_EQ(sched->stats().plans_reused, 0);
  EXPECT_EQ(sched->GetTensorBackend(*g->b), cpu_.get());
  EXPECT_THAT(sched->DescribeAssignment(), HasSubstr("pinned by the user"));
  ExpectNear(Run(*sched, *g), Expected(*g, 2.0f, false));
  // Re-pinning elsewhere before the next AllocGraph is noticed too.
  FERRY_ASSERT_OK(sched->SetTensorBackend(*g->b, *sim_));
  ExpectNear(Run(*sched, *g), Expected(*g, 2.0f, false));
  EXPECT_EQ(sched->GetTensorBackend(*g->b), sim_.get());
  EXPECT_EQ(sched->stats().plans_reused, 0);
  // Reset drops the pin: planned again, b back on the sim by its weight.
  sched->Reset();
  FERRY_ASSERT_OK(sched->AllocGraph(g->graph));
  EXPECT_EQ(sched->stats().plans_reused, 0);
  EXPECT_THAT(sched->DescribeAssignment(), Not(HasSubstr("pinned")));
  EXPECT_EQ(sched->GetTensorBackend(*g->b), sim_.get());
}

TEST_F(PlanReuseTest, WeightMovedToAnotherBufferIsPlannedAgain) {
  auto g = Build(3);
  auto sched = MakeScheduler();
  FERRY_ASSERT_OK(sched->AllocGraph(g->graph));
  EXPECT_EQ(sched->GetTensorBackend(*g->b), sim_.get());
  ExpectNear(Run(*sched, *g), Expected(*g, 2.0f, false));

  // Same type, another buffer (new contents): planned again.
  w_->buffer = nullptr;
  w_->data = nullptr;
  FERRY_ASSERT_OK_AND_ASSIGN(
      auto sim_bufs, AllocateWeights(weights_, *sim_->default_buffer_type()));
  for (float& v : wv_) v = -v;
  FERRY_ASSERT_OK(SetTensorData(*w_, wv_.data()));
  FERRY_ASSERT_OK(sched->AllocGraph(g->graph));
  EXPECT_EQ(sched->stats().plans_reused, 0);
  ExpectNear(Run(*sched, *g), Expected(*g, 2.0f, false));

  // Into host memory: b follows its weight to the CPU (3 tokens are too
  // few for the sim to ask for the op), one split.
  w_->buffer = nullptr;
  w_->data = nullptr;
  FERRY_ASSERT_OK_AND_ASSIGN(
      auto cpu_bufs, AllocateWeights(weights_, *cpu_->default_buffer_type()));
  FERRY_ASSERT_OK(SetTensorData(*w_, wv_.data()));
  FERRY_ASSERT_OK(sched->AllocGraph(g->graph));
  EXPECT_EQ(sched->stats().plans_reused, 0);
  EXPECT_EQ(sched->GetTensorBackend(*g->b), cpu_.get());
  EXPECT_EQ(sched->num_splits(), 1) << sched->DescribeSplits();
  ExpectNear(Run(*sched, *g), Expected(*g, 2.0f, false));

  // The weights buffer's usage matters too (kWeights pins ops to it).
  cpu_bufs[0]->set_usage(BufferUsage::kAny);
  FERRY_ASSERT_OK(sched->AllocGraph(g->graph));
  EXPECT_EQ(sched->stats().plans_reused, 0);
  FERRY_ASSERT_OK(sched->AllocGraph(g->graph));
  EXPECT_EQ(sched->stats().plans_reused, 1);
  w_->buffer = nullptr;  // Before its buffer goes away.
  w_->data = nullptr;
}

// A llama split over a sim and the CPU: the reused plan computes what a
// fresh scheduler computes (on its own copy of the graph), batch after batch.
TEST_F(PlanReuseTest, LlamaReusedPlanEqualsFreshPlan) {
  FERRY_ASSERT_OK_AND_ASSIGN(auto model,
                             llama::LlamaModel::CreateUnplaced(kTinyLlama));
  FERRY_ASSERT_OK_AND_ASSIGN(auto bufs,
                             AllocateWeights(*model->weight_contexts()[0],
                                             *sim_->default_buffer_type()));
  for (Tensor* t : model->weight_contexts()[0]->tensors()) {
    std::vector<float> v(t->NumElements());
    for (size_t i = 0; i < v.size(); ++i) {
      v[i] = t->ne[1] == 1 ? 1.0f : 0.02f * static_cast<float>(i % 11) - 0.1f;
    }
    FERRY_ASSERT_OK(SetTensorData(*t, v.data()));
  }
  FERRY_ASSERT_OK_AND_ASSIGN(
      auto graph, llama::BuildLlamaGraph(
                      *model, {.n_tokens = 8, .last_token_only = false}));
  auto sched = MakeScheduler();
  for (int k = 0; k < 3; ++k) {
    sched->Reset();
    FERRY_ASSERT_OK(sched->AllocGraph(graph.graph));
    FERRY_ASSERT_OK(testing::FillLlamaInputs(graph, kTinyLlama.n_vocab, k));
    FERRY_ASSERT_OK(sched->Compute(graph.graph));
    std::vector<float> reused(graph.logits->NumElements());
    FERRY_ASSERT_OK(GetTensorData(*graph.logits, reused.data()));

    FERRY_ASSERT_OK_AND_ASSIGN(
        auto other, llama::BuildLlamaGraph(
                        *model, {.n_tokens = 8, .last_token_only = false}));
    auto fresh = MakeScheduler();
    FERRY_ASSERT_OK(fresh->AllocGraph(other.graph));
    FERRY_ASSERT_OK(testing::FillLlamaInputs(other, kTinyLlama.n_vocab, k));
    EXPECT_EQ(fresh->DescribeSplits(), sched->DescribeSplits());
    EXPECT_EQ(fresh->DescribeAssignment(), sched->DescribeAssignment());
    FERRY_ASSERT_OK(fresh->Compute(other.graph));
    std::vector<float> planned(other.logits->NumElements());
    FERRY_ASSERT_OK(GetTensorData(*other.logits, planned.data()));
    EXPECT_EQ(reused, planned) << "batch " << k;
  }
  EXPECT_EQ(sched->stats().plans_reused, 2);
}

// Graphs that alternate between two token counts differ almost everywhere:
// the scheduler stops comparing keys part way and forgets every SupportsOp
// answer from there on. Each plan must still be a fresh scheduler's.
TEST_F(PlanReuseTest, LlamaAlternatingTokenCountsPlanAsFresh) {
  FERRY_ASSERT_OK_AND_ASSIGN(auto model,
                             llama::LlamaModel::CreateUnplaced(kTinyLlama));
  FERRY_ASSERT_OK_AND_ASSIGN(auto bufs,
                             AllocateWeights(*model->weight_contexts()[0],
                                             *sim_->default_buffer_type()));
  FERRY_ASSERT_OK_AND_ASSIGN(
      auto a, llama::BuildLlamaGraph(
                  *model, {.n_tokens = 8, .last_token_only = false}));
  FERRY_ASSERT_OK_AND_ASSIGN(
      auto b, llama::BuildLlamaGraph(
                  *model, {.n_tokens = 9, .last_token_only = false}));
  auto sched = MakeScheduler();
  for (int k = 0; k < 4; ++k) {
    const llama::LlamaGraph& graph = k % 2 == 0 ? a : b;
    sched->Reset();
    // Graph a's tensors point into buffers freed when b grew them, and
    // (from k = 2) into the last fresh scheduler's freed buffers: they are
    // placed again without reading those (ASan checks).
    FERRY_ASSERT_OK(sched->AllocGraph(graph.graph));
    const std::string assignment = sched->DescribeAssignment();
    const std::string splits = sched->DescribeSplits();
    auto fresh = MakeScheduler();
    FERRY_ASSERT_OK(fresh->AllocGraph(graph.graph));
    EXPECT_EQ(fresh->DescribeAssignment(), assignment) << "graph " << k;
    EXPECT_EQ(fresh->DescribeSplits(), splits) << "graph " << k;
  }
  EXPECT_EQ(sched->stats().plans_reused, 0);
  EXPECT_EQ(sched->stats().re_reserves, 1);  // b outgrew a's buffers.
}

}  // namespace
}  // namespace ferry
