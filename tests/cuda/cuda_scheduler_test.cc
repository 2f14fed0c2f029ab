// The scheduler with CUDA backends: the same checks the sim devices pass in
// tests/sched, on a GPU (cuda_scheduler_test, requires-gpu; skips, saying
// why, without one) and on the fake CUDA runtime (cuda_scheduler_test_on_fake,
// everywhere).
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ferry/backends/cpu/cpu_backend.h"
#include "ferry/backends/cuda/cuda_device.h"
#include "ferry/backends/cuda/cuda_probe.h"
#include "ferry/backends/cuda/testing/cuda_test_util.h"
#include "ferry/backends/registry.h"
#include "ferry/graph/context.h"
#include "ferry/graph/testing/reference.h"
#include "ferry/models/llama/llama_graph.h"
#include "ferry/models/llama/llama_model.h"
#include "ferry/models/llama/testing/llama_testing.h"
#include "ferry/runtime/status_matchers.h"
#include "ferry/runtime/sync_wait.h"
#include "ferry/runtime/when_all.h"
#include "ferry/sched/scheduler.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

constexpr llama::LlamaConfig kLlama = {
    .n_layer = 2, .n_embd = 256, .n_head = 4, .n_ff = 512, .n_vocab = 300};

using PlacedModel = std::unique_ptr<llama::LlamaModel>;

absl::StatusOr<PlacedModel> MakeModel(BufferType& type) {
  return testing::MakePlacedLlamaModel(kLlama, type);
}

absl::StatusOr<std::vector<float>> ReadLogits(const Tensor& logits) {
  std::vector<float> out(logits.NumElements());
  FERRY_RETURN_IF_ERROR(GetTensorData(logits, out.data()));
  return out;
}

class CudaSchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FERRY_CUDA_TEST_NEEDS_DEVICES(1);
    gpus_ = *CudaDeviceCount();
    FERRY_ASSERT_OK_AND_ASSIGN(cpu_, GetCpuDevice().CreateBackend("threads=2"));
    FERRY_ASSERT_OK_AND_ASSIGN(CudaDevice * cuda0,
                               cuda_testing::GlobalCudaDevice(0));
    FERRY_ASSERT_OK_AND_ASSIGN(cuda0_, cuda0->CreateBackend());
  }

  std::vector<float> CpuOnlyLogits(int64_t n_tokens, uint64_t seed) {
    auto model = MakeModel(*cpu_->default_buffer_type());
    EXPECT_THAT(model, testing::IsOk());
    auto graph = llama::BuildLlamaGraph(
        **model, {.n_tokens = n_tokens, .last_token_only = false});
    EXPECT_THAT(graph, testing::IsOk());
    auto sched = Scheduler::Create({cpu_.get()});
    EXPECT_THAT(sched, testing::IsOk());
    EXPECT_THAT((*sched)->AllocGraph(graph->graph), testing::IsOk());
    EXPECT_THAT(testing::FillLlamaInputs(*graph, kLlama.n_vocab, seed),
                testing::IsOk());
    EXPECT_THAT((*sched)->Compute(graph->graph), testing::IsOk());
    auto logits = ReadLogits(*graph->logits);
    EXPECT_THAT(logits, testing::IsOk());
    return *logits;
  }

  int gpus_ = 0;
  std::unique_ptr<Backend> cpu_;
  std::unique_ptr<Backend> cuda0_;
};

TEST_F(CudaSchedulerTest, LlamaOnGpuAndCpuEqualsCpuOnly) {
  const std::vector<float> expected = CpuOnlyLogits(8, 3);
  FERRY_ASSERT_OK_AND_ASSIGN(PlacedModel model,
                             MakeModel(*cuda0_->default_buffer_type()));
  FERRY_ASSERT_OK_AND_ASSIGN(
      llama::LlamaGraph graph,
      llama::BuildLlamaGraph(*model,
                             {.n_tokens = 8, .last_token_only = false}));
  FERRY_ASSERT_OK_AND_ASSIGN(auto sched,
                             Scheduler::Create({cuda0_.get(), cpu_.get()}));
  FERRY_ASSERT_OK(sched->AllocGraph(graph.graph));
  FERRY_ASSERT_OK(testing::FillLlamaInputs(graph, kLlama.n_vocab, 3));
  FERRY_ASSERT_OK(sched->Compute(graph.graph));
  FERRY_ASSERT_OK_AND_ASSIGN(std::vector<float> logits,
                             ReadLogits(*graph.logits));
  // cuBLAS sums in another order than the CPU: close, not bit-equal.
  EXPECT_LE(testing::Nmse(expected, logits), 1e-6) << sched->DescribeSplits();
}

TEST_F(CudaSchedulerTest, HostWeightsAreOffloadedForLargeBatches) {
  const std::vector<float> expected = CpuOnlyLogits(64, 5);
  FERRY_ASSERT_OK_AND_ASSIGN(PlacedModel model,
                             MakeModel(*cpu_->default_buffer_type()));
  FERRY_ASSERT_OK_AND_ASSIGN(
      llama::LlamaGraph graph,
      llama::BuildLlamaGraph(*model,
                             {.n_tokens = 64, .last_token_only = false}));
  FERRY_ASSERT_OK_AND_ASSIGN(auto sched,
                             Scheduler::Create({cuda0_.get(), cpu_.get()}));
  FERRY_ASSERT_OK(sched->AllocGraph(graph.graph));
  EXPECT_GT(sched->stats().copies[1][0], 0) << sched->DescribeAssignment();
  FERRY_ASSERT_OK(testing::FillLlamaInputs(graph, kLlama.n_vocab, 5));
  FERRY_ASSERT_OK(sched->Compute(graph.graph));
  FERRY_ASSERT_OK_AND_ASSIGN(std::vector<float> logits,
                             ReadLogits(*graph.logits));
  EXPECT_LE(testing::Nmse(expected, logits), 1e-6);
}

// Eight batches through two copy slots: a slot rewritten before its
// previous batch finished would corrupt that batch's inputs.
TEST_F(CudaSchedulerTest, CopySlotsAreReusedOnlyAfterTheirBatch) {
  FERRY_ASSERT_OK_AND_ASSIGN(PlacedModel model,
                             MakeModel(*cuda0_->default_buffer_type()));
  FERRY_ASSERT_OK_AND_ASSIGN(
      llama::LlamaGraph graph,
      llama::BuildLlamaGraph(*model,
                             {.n_tokens = 8, .last_token_only = false}));
  FERRY_ASSERT_OK_AND_ASSIGN(
      auto sched,
      Scheduler::Create({cuda0_.get(), cpu_.get()}, {.n_copies = 2}));
  // Twice n_copies: every slot is reused (the fake runtime emulates each
  // kernel on the host, so the batches are few and small).
  constexpr int kBatches = 4;
  // Each batch's inputs go in with it (captured at Submit) and its logits
  // come back into its own vector: any number in flight.
  std::vector<llama::LlamaInputs> inputs;
  for (int k = 0; k < kBatches; ++k) {
    std::mt19937_64 rng(100 + k);
    std::vector<int32_t> ids(static_cast<size_t>(graph.n_tokens));
    for (int32_t& id : ids) id = static_cast<int32_t>(rng() % kLlama.n_vocab);
    FERRY_ASSERT_OK_AND_ASSIGN(
        llama::LlamaInputs in,
        llama::MakeLlamaInputs(graph, kLlama.n_vocab, ids));
    inputs.push_back(std::move(in));
  }
  auto io = [&](int k, std::vector<float>& logits) {
    logits.assign(static_cast<size_t>(graph.logits->NumElements()), NAN);
    return BatchIo()
        .In(*graph.tokens, inputs[k].tokens.data(), inputs[k].tokens.size() * 4)
        .In(*graph.pos, inputs[k].pos.data(), inputs[k].pos.size() * 4)
        .In(*graph.mask, inputs[k].mask.data(), inputs[k].mask.size() * 4)
        .Out(*graph.logits, logits.data(), logits.size() * 4);
  };
  std::vector<std::vector<float>> one_at_a_time(kBatches), pipelined(kBatches);
  for (int k = 0; k < kBatches; ++k) {
    FERRY_ASSERT_OK(sched->Compute(graph.graph, io(k, one_at_a_time[k])));
  }
  std::vector<Event> done;
  for (int k = 0; k < kBatches; ++k) {
    FERRY_ASSERT_OK_AND_ASSIGN(Event event,
                               sched->Submit(graph.graph, io(k, pipelined[k])));
    done.push_back(event);
  }
  for (const Event& event : done) FERRY_ASSERT_OK(event.WaitBlocking());
  for (int k = 0; k < kBatches; ++k) {
    EXPECT_EQ(pipelined[k], one_at_a_time[k]) << "batch " << k;
  }
  EXPECT_NE(one_at_a_time[0], one_at_a_time[1]) << "inputs must differ";
}

TEST_F(CudaSchedulerTest, ComputeAsyncFromSeveralCoroutines) {
  FERRY_ASSERT_OK_AND_ASSIGN(PlacedModel model,
                             MakeModel(*cuda0_->default_buffer_type()));
  FERRY_ASSERT_OK_AND_ASSIGN(
      llama::LlamaGraph graph,
      llama::BuildLlamaGraph(*model, {.n_tokens = 4, .last_token_only = true}));
  FERRY_ASSERT_OK_AND_ASSIGN(auto sched,
                             Scheduler::Create({cuda0_.get(), cpu_.get()}));
  FERRY_ASSERT_OK(sched->AllocGraph(graph.graph));
  FERRY_ASSERT_OK(testing::FillLlamaInputs(graph, kLlama.n_vocab, 1));
  FERRY_ASSERT_OK(SyncWait(sched->ComputeAsync(graph.graph)));
  FERRY_ASSERT_OK_AND_ASSIGN(auto first, ReadLogits(*graph.logits));
  std::vector<Task<absl::Status>> batches;
  for (int k = 0; k < 3; ++k) {
    batches.push_back(sched->ComputeAsync(graph.graph));
  }
  FERRY_ASSERT_OK(SyncWait(WhenAllOk(std::move(batches))));
  FERRY_ASSERT_OK_AND_ASSIGN(auto again, ReadLogits(*graph.logits));
  EXPECT_EQ(first, again);
}

TEST_F(CudaSchedulerTest, LayersSplitAcrossTwoGpus) {
  if (gpus_ < 2) GTEST_SKIP() << "needs two GPUs";
  const std::vector<float> expected = CpuOnlyLogits(8, 9);
  FERRY_ASSERT_OK_AND_ASSIGN(CudaDevice * cuda1_device,
                             cuda_testing::GlobalCudaDevice(1));
  FERRY_ASSERT_OK_AND_ASSIGN(auto cuda1, cuda1_device->CreateBackend());
  FERRY_ASSERT_OK_AND_ASSIGN(PlacedModel model,
                             MakeModel(*cuda0_->default_buffer_type()));
  FERRY_ASSERT_OK_AND_ASSIGN(
      llama::LlamaGraph graph,
      llama::BuildLlamaGraph(*model,
                             {.n_tokens = 8, .last_token_only = false}));
  FERRY_ASSERT_OK_AND_ASSIGN(
      auto sched, Scheduler::Create({cuda0_.get(), cuda1.get(), cpu_.get()}));
  // Pin the second half of the nodes to cuda1: peer copies in between.
  for (size_t i = graph.graph.nodes().size() / 2;
       i < graph.graph.nodes().size(); ++i) {
    Tensor* node = graph.graph.nodes()[i];
    if (cuda1->SupportsOp(*node)) {
      FERRY_ASSERT_OK(sched->SetTensorBackend(*node, *cuda1));
    }
  }
  FERRY_ASSERT_OK(sched->AllocGraph(graph.graph));
  FERRY_ASSERT_OK(testing::FillLlamaInputs(graph, kLlama.n_vocab, 9));
  FERRY_ASSERT_OK(sched->Compute(graph.graph));
  EXPECT_GT(sched->stats().copies[0][1], 0);
  FERRY_ASSERT_OK_AND_ASSIGN(std::vector<float> logits,
                             ReadLogits(*graph.logits));
  EXPECT_LE(testing::Nmse(expected, logits), 1e-6);
}

}  // namespace
}  // namespace ferry
