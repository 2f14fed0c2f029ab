// Computes graphs with the CPU kernels twice: once with every tensor in its
// own memory, once in the memory the graph allocator planned (in-place ops,
// reuse after the last consumer, several buffer types, spilling into several
// buffers). The graph's outputs must be bit-identical.
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "ferry/alloc/graph_allocator.h"
#include "ferry/alloc/testing/alloc_checker.h"
#include "ferry/alloc/testing/random_graph.h"
#include "ferry/alloc/weights.h"
#include "ferry/backends/host/kernels/kernel_runner.h"
#include "ferry/backends/host_buffer.h"
#include "ferry/graph/graph.h"
#include "ferry/graph/testing/reference.h"
#include "ferry/models/llama/llama_graph.h"
#include "ferry/models/llama/llama_model.h"
#include "ferry/models/llama/testing/llama_testing.h"
#include "ferry/runtime/status_macros.h"
#include "ferry/runtime/status_matchers.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

using ::ferry::testing::IsOk;

// Nodes whose values the caller may read: flagged outputs and nodes no
// other node reads.
std::vector<Tensor*> Results(const Graph& graph) {
  absl::flat_hash_set<const Tensor*> read;
  for (Tensor* n : graph.nodes()) {
    for (Tensor* s : n->src) {
      if (s != nullptr) read.insert(s);
    }
  }
  std::vector<Tensor*> out;
  for (Tensor* n : graph.nodes()) {
    if (n->HasFlag(kTensorFlagOutput) || !read.contains(n)) out.push_back(n);
  }
  return out;
}

// Fills weights and inputs the same way in both runs.
absl::Status FillLeafs(const Graph& graph, uint64_t seed) {
  for (size_t i = 0; i < graph.leafs().size(); ++i) {
    Tensor& t = *graph.leafs()[i];
    if (t.dtype == DType::kI32) {
      FERRY_RETURN_IF_ERROR(
          ::ferry::testing::FillRandom(t, seed + i, 0.0f, 64.0f));
    } else {
      FERRY_RETURN_IF_ERROR(
          ::ferry::testing::FillRandom(t, seed + i, -0.5f, 0.5f));
    }
  }
  return absl::OkStatus();
}

std::vector<std::vector<uint8_t>> Bytes(const std::vector<Tensor*>& ts) {
  std::vector<std::vector<uint8_t>> out;
  for (const Tensor* t : ts) {
    absl::StatusOr<std::vector<float>> v = ::ferry::testing::ReadTensor(*t);
    EXPECT_THAT(v.status(), IsOk());
    std::vector<uint8_t> b(v->size() * sizeof(float));
    if (!b.empty()) std::memcpy(b.data(), v->data(), b.size());
    out.push_back(std::move(b));
  }
  return out;
}

// KernelRunner's workers may still scan the trailing non-computing nodes
// (views) of a graph after Run returned on thread 0, so every graph a runner
// ran is kept alive until the runner is destroyed: the tests declare
// `keep_` before their local runner.
class PlannedMemoryTest : public ::testing::Test {
 protected:
  std::vector<::ferry::testing::RandomGraph> keep_random_;
  std::vector<::ferry::llama::LlamaGraph> keep_llama_;
  std::vector<std::unique_ptr<::ferry::llama::LlamaModel>> keep_models_;
  HostBufferType weights_type_{"weights", 64, nullptr};
  HostBufferType a_{"a32", 32, nullptr};
  HostBufferType b_{"b256", 256, nullptr};
  HostBufferType c_{"c64", 64, nullptr, 16384};
};

TEST_F(PlannedMemoryTest, RandomGraphsAreBitIdentical) {
  cpu_kernels::KernelRunner runner(2);
  int in_place = 0;
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    SCOPED_TRACE(absl::StrCat("seed ", seed));
    const ::ferry::testing::RandomGraphOptions options{
        .num_ops = 20 + static_cast<int>(seed % 30),
        .num_types = 1 + static_cast<int>(seed % 3)};
    // Own memory.
    absl::StatusOr<::ferry::testing::RandomGraph> own =
        ::ferry::testing::MakeRandomGraph(seed, options);
    ASSERT_THAT(own.status(), IsOk());
    ASSERT_THAT(own->weights->AllocateHostData(), IsOk());
    ASSERT_THAT(own->ctx->AllocateHostData(), IsOk());
    ASSERT_THAT(FillLeafs(own->graph, seed * 100), IsOk());
    ASSERT_THAT(runner.Run(own->graph.nodes()), IsOk());
    const auto expected = Bytes(Results(own->graph));

    // Planned memory.
    absl::StatusOr<::ferry::testing::RandomGraph> planned =
        ::ferry::testing::MakeRandomGraph(seed, options);
    ASSERT_THAT(planned.status(), IsOk());
    absl::StatusOr<std::vector<std::unique_ptr<Buffer>>> weights =
        AllocateWeights(*planned->weights, weights_type_);
    ASSERT_THAT(weights.status(), IsOk());
    std::vector<BufferType*> types = {&a_, &b_, &c_};
    types.resize(static_cast<size_t>(options.num_types));
    GraphAllocator galloc(types);
    const BufferAssignment assign{.leaf_types = planned->leaf_types,
                                  .node_types = planned->node_types};
    ASSERT_THAT(galloc.Reserve(planned->graph, assign), IsOk());
    ASSERT_THAT(galloc.Allocate(planned->graph, assign), IsOk());
    ASSERT_THAT(::ferry::testing::CheckGraphAllocation(planned->graph), IsOk());
    in_place += galloc.last_plan().num_in_place;
    ASSERT_THAT(FillLeafs(planned->graph, seed * 100), IsOk());
    ASSERT_THAT(runner.Run(planned->graph.nodes()), IsOk());
    const auto actual = Bytes(Results(planned->graph));
    ASSERT_EQ(actual.size(), expected.size());
    for (size_t i = 0; i < actual.size(); ++i) {
      EXPECT_TRUE(actual[i] == expected[i])
          << "result " << i << " '" << Results(planned->graph)[i]->name
          << "' differs";
    }
    keep_random_.push_back(*std::move(own));
    keep_random_.push_back(*std::move(planned));
  }
  EXPECT_GT(in_place, 50);
}

TEST_F(PlannedMemoryTest, LlamaGraphIsBitIdentical) {
  cpu_kernels::KernelRunner runner(2);
  const ::ferry::llama::LlamaConfig config{
      .n_layer = 2, .n_embd = 64, .n_head = 4, .n_ff = 160, .n_vocab = 100};
  for (bool last_only : {false, true}) {
    SCOPED_TRACE(absl::StrCat("last_only ", last_only));
    auto own_model = *::ferry::llama::LlamaModel::CreateUnplaced(config);
    auto own = *::ferry::llama::BuildLlamaGraph(
        *own_model, {.n_tokens = 8, .last_token_only = last_only});
    ASSERT_THAT(own_model->weight_contexts()[0]->AllocateHostData(), IsOk());
    ASSERT_THAT(own.ctx->AllocateHostData(), IsOk());
    ASSERT_THAT(FillLeafs(own.graph, 7), IsOk());
    ASSERT_THAT(::ferry::testing::FillLlamaInputs(own, config.n_vocab, 3),
                IsOk());
    ASSERT_THAT(runner.Run(own.graph.nodes()), IsOk());
    const auto expected = Bytes({own.logits});

    auto model = *::ferry::llama::LlamaModel::CreateUnplaced(config);
    auto planned = *::ferry::llama::BuildLlamaGraph(
        *model, {.n_tokens = 8, .last_token_only = last_only});
    absl::StatusOr<std::vector<std::unique_ptr<Buffer>>> weights =
        AllocateWeights(*model->weight_contexts()[0], weights_type_);
    ASSERT_THAT(weights.status(), IsOk());
    GraphAllocator galloc({&c_});
    ASSERT_THAT(galloc.Reserve(planned.graph), IsOk());
    ASSERT_THAT(galloc.Allocate(planned.graph), IsOk());
    ASSERT_THAT(::ferry::testing::CheckGraphAllocation(planned.graph), IsOk());
    EXPECT_GT(galloc.last_plan().num_in_place, 0);
    ASSERT_THAT(FillLeafs(planned.graph, 7), IsOk());
    ASSERT_THAT(::ferry::testing::FillLlamaInputs(planned, config.n_vocab, 3),
                IsOk());
    ASSERT_THAT(runner.Run(planned.graph.nodes()), IsOk());
    EXPECT_TRUE(Bytes({planned.logits}) == expected);
    keep_llama_.push_back(std::move(own));
    keep_llama_.push_back(std::move(planned));
    keep_models_.push_back(std::move(own_model));
    keep_models_.push_back(std::move(model));
  }
}

}  // namespace
}  // namespace ferry
