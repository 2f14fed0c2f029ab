#include "ferry/sched/graph_compare.h"

#include <memory>
#include <vector>

#include "ferry/backends/cpu/cpu_backend.h"
#include "ferry/backends/host_buffer.h"
#include "ferry/backends/sim/sim_device.h"
#include "ferry/graph/context.h"
#include "ferry/graph/ops.h"
#include "ferry/runtime/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

// A test double: the CPU backend, except that relu results are corrupted.
class FakeBuggyReluBackend final : public Backend {
 public:
  FakeBuggyReluBackend() : inner_(*GetCpuDevice().CreateBackend("threads=1")) {}
  absl::string_view name() const override { return "buggy"; }
  Device& device() const override { return inner_->device(); }
  absl::Status EnqueueSetTensor(Tensor& t, const void* d, size_t o,
                                size_t n) override {
    return inner_->EnqueueSetTensor(t, d, o, n);
  }
  absl::Status EnqueueGetTensor(const Tensor& t, void* d, size_t o,
                                size_t n) override {
    return inner_->EnqueueGetTensor(t, d, o, n);
  }
  absl::Status EnqueueCompute(NodeSpan nodes) override {
    FERRY_RETURN_IF_ERROR(inner_->EnqueueCompute(nodes));
    for (Tensor* node : nodes) {
      if (node->op != Op::kRelu) continue;
      FERRY_RETURN_IF_ERROR(inner_->EnqueueSetTensor(
          *node, garbage_.data(), 0,
          std::min<size_t>(garbage_.size() * 4, node->NumBytes())));
    }
    return absl::OkStatus();
  }
  Event Record() override { return inner_->Record(); }
  absl::Status EnqueueWait(const Event& e) override {
    return inner_->EnqueueWait(e);
  }
  absl::Status Synchronize() override { return inner_->Synchronize(); }

 private:
  std::unique_ptr<Backend> inner_;
  std::vector<float> garbage_ = std::vector<float>(16, 123.0f);
};

struct SmallGraph {
  Context ctx;
  std::unique_ptr<Buffer> buffer;
  Graph graph;
};

// x -> silu -> mul_mat(w, .) -> relu -> scale, with data in host memory.
std::unique_ptr<SmallGraph> MakeGraph() {
  auto g = std::make_unique<SmallGraph>();
  Tensor* x = *g->ctx.NewTensor(DType::kF32, {32, 4}, "x");
  Tensor* w = *g->ctx.NewTensor(DType::kF16, {32, 16}, "w");
  Tensor* a = *Silu(g->ctx, x);
  a->name = "a";
  Tensor* b = *MulMat(g->ctx, w, a);
  b->name = "b";
  Tensor* c = *Relu(g->ctx, b);
  c->name = "c";
  Tensor* d = *Scale(g->ctx, c, 0.5f);
  d->name = "d";
  g->graph = *Graph::Build({d});
  EXPECT_THAT(g->ctx.AllocateHostData(), testing::IsOk());
  static HostBufferType host("host", 64, nullptr);
  // AllocateHostData gives memory but no buffer: wrap each leaf.
  std::vector<float> xs(32 * 4);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = 0.05f * (i % 17) - 0.4f;
  std::memcpy(x->data, xs.data(), xs.size() * 4);
  auto* wh = static_cast<Half*>(w->data);
  for (int i = 0; i < 32 * 16; ++i) wh[i] = F32ToF16(0.01f * (i % 23) - 0.1f);
  g->buffer = *WrapHostMemory(&host, x->data, x->NumBytes());
  x->buffer = g->buffer.get();
  static std::vector<std::unique_ptr<Buffer>> keep;
  keep.push_back(*WrapHostMemory(&host, w->data, w->NumBytes()));
  w->buffer = keep.back().get();
  return g;
}

TEST(GraphCompareTest, CpuAndSimAgreeNodeByNode) {
  auto graph = MakeGraph();
  auto cpu = *GetCpuDevice().CreateBackend("threads=2");
  auto sim_device = *SimDevice::Create("compare_sim", "");
  auto sim = *sim_device->CreateBackend();
  FERRY_ASSERT_OK_AND_ASSIGN(GraphComparison result,
                             CompareGraphBackends(graph->graph, *cpu, *sim));
  EXPECT_EQ(result.nodes_compared, 4);
  EXPECT_EQ(result.first_mismatch, -1) << result.mismatch_name;
  EXPECT_LE(result.max_nmse, 1e-12);
}

TEST(GraphCompareTest, ReportsTheFirstNodeThatDiffers) {
  auto graph = MakeGraph();
  auto cpu = *GetCpuDevice().CreateBackend("threads=1");
  FakeBuggyReluBackend buggy;
  FERRY_ASSERT_OK_AND_ASSIGN(GraphComparison result,
                             CompareGraphBackends(graph->graph, *cpu, buggy));
  EXPECT_EQ(result.first_mismatch, 2);
  EXPECT_EQ(result.mismatch_name, "c");
  EXPECT_EQ(result.mismatch_op, "relu");
  EXPECT_GT(result.mismatch_nmse, 1.0);
}

TEST(GraphCompareTest, CopyGraphReproducesLeafData) {
  auto graph = MakeGraph();
  auto sim_device = *SimDevice::Create("copy_sim", "");
  auto sim = *sim_device->CreateBackend();
  FERRY_ASSERT_OK_AND_ASSIGN(GraphCopy copy, CopyGraph(graph->graph, *sim));
  ASSERT_EQ(copy.graph.num_nodes(), graph->graph.num_nodes());
  auto find = [](const Graph& g, const char* name) -> const Tensor* {
    for (const Tensor* t : g.leafs()) {
      if (t->name == name) return t;
    }
    return nullptr;
  };
  const Tensor* x = find(graph->graph, "x");
  const Tensor* x_copy = find(copy.graph, "x");
  ASSERT_NE(x_copy, nullptr);
  EXPECT_NE(x_copy->buffer, x->buffer);
  std::vector<float> back(x->NumElements());
  FERRY_ASSERT_OK(GetTensorData(*x_copy, back.data()));
  EXPECT_EQ(std::memcmp(back.data(), x->data, x->NumBytes()), 0);
}

}  // namespace
}  // namespace ferry
