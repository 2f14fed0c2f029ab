// The example llama gives the CPU's logits when its layers are split over
// two simulated devices and the CPU with micro-batches pipelined, and its KV
// cache gives what recomputing the whole context gives.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "ferry/backends/backend.h"
#include "ferry/backends/buffer.h"
#include "ferry/backends/cpu/cpu_backend.h"
#include "ferry/backends/event.h"
#include "ferry/backends/sim/sim_device.h"
#include "ferry/graph/testing/reference.h"
#include "ferry/models/llama/llama_batch.h"
#include "ferry/models/llama/llama_graph.h"
#include "ferry/models/llama/llama_kv_cache.h"
#include "ferry/models/llama/llama_model.h"
#include "ferry/models/llama/testing/llama_testing.h"
#include "ferry/runtime/status_matchers.h"
#include "ferry/sched/scheduler.h"
#include "gtest/gtest.h"

namespace ferry::llama {
namespace {

using ::ferry::testing::TinyPrompt;
constexpr LlamaConfig kConfig = ::ferry::testing::TinyLlamaConfig();
constexpr int64_t kUbatch = 8;
constexpr int kMicroBatches = 6;

class LlamaPipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FERRY_ASSERT_OK_AND_ASSIGN(cpu_, GetCpuDevice().CreateBackend("threads=2"));
    for (int i = 0; i < 2; ++i) {
      FERRY_ASSERT_OK_AND_ASSIGN(
          auto device, SimDevice::Create(absl::StrCat("llama_sim", i), ""));
      FERRY_ASSERT_OK_AND_ASSIGN(auto backend, device->CreateBackend());
      sim_devices_.push_back(std::move(device));
      sims_.push_back(std::move(backend));
    }
  }

  // Logits of every micro-batch, n_copies batches in flight.
  std::vector<std::vector<float>> Prefill(
      std::vector<Backend*> backends, int n_copies,
      const LlamaModelOptions& options = {}) {
    auto model = LlamaModel::Create(kConfig, backends, options);
    EXPECT_TRUE(model.ok()) << model.status();
    EXPECT_TRUE((*model)->FillRandom(9).ok());
    auto g = BuildLlamaGraph(**model, {.n_tokens = kUbatch});
    EXPECT_TRUE(g.ok()) << g.status();
    auto sched = Scheduler::Create(backends, {.n_copies = n_copies});
    EXPECT_TRUE(sched.ok()) << sched.status();
    EXPECT_TRUE((*sched)->AllocGraph(g->graph).ok());
    Backend* out = (*sched)->GetTensorBackend(*g->logits);
    const size_t bytes = static_cast<size_t>(g->logits->NumBytes());
    // Pinned downloads where offered, so that Submit does not block.
    BufferType* pinned_type = out->device().host_buffer_type();
    std::vector<std::unique_ptr<Buffer>> pinned;
    std::vector<std::vector<float>> result(kMicroBatches);
    std::vector<float*> dst;
    for (int k = 0; k < kMicroBatches; ++k) {
      result[k].resize(bytes / 4);
      if (pinned_type != nullptr) {
        auto b = pinned_type->Allocate(bytes);
        EXPECT_TRUE(b.ok());
        dst.push_back(static_cast<float*>((*b)->base()));
        pinned.push_back(std::move(*b));
      } else {
        dst.push_back(result[k].data());
      }
    }
    Event previous;
    for (int k = 0; k < kMicroBatches; ++k) {
      // With one copy slot, inputs on their own backend are read in place
      // when the batch runs, not at Submit: wait before rewriting them.
      if (n_copies == 1 && k > 0) {
        EXPECT_TRUE(previous.WaitBlocking().ok());
      }
      EXPECT_TRUE(
          SetLlamaInputs(*g, kConfig.n_vocab, TinyPrompt(k, kUbatch)).ok());
      auto done = (*sched)->Submit(g->graph);
      EXPECT_TRUE(done.ok()) << done.status();
      if (done.ok()) previous = *done;
      EXPECT_TRUE(out->EnqueueGetTensor(*g->logits, dst[k], 0, bytes).ok());
    }
    EXPECT_TRUE((*sched)->Synchronize().ok());
    if (pinned_type != nullptr) {
      for (int k = 0; k < kMicroBatches; ++k) {
        std::copy(dst[k], dst[k] + bytes / 4, result[k].begin());
      }
    }
    EXPECT_EQ((*sched)->stats().re_reserves, 0);
    return result;
  }

  std::unique_ptr<Backend> cpu_;
  std::vector<std::unique_ptr<SimDevice>> sim_devices_;
  std::vector<std::unique_ptr<Backend>> sims_;
};

TEST_F(LlamaPipelineTest, PipelinedAcrossSimsMatchesCpuAlone) {
  const auto expected = Prefill({cpu_.get()}, 1);
  const auto actual = Prefill({sims_[0].get(), sims_[1].get(), cpu_.get()}, 4);
  ASSERT_EQ(expected.size(), actual.size());
  for (int k = 0; k < kMicroBatches; ++k) {
    EXPECT_LE(testing::Nmse(expected[k], actual[k]), 1e-6) << "batch " << k;
  }
  // The micro-batches differ, so equal logits are not an accident.
  EXPECT_GT(testing::Nmse(expected[0], expected[1]), 1e-3);
}

// A split by weight bytes of 2:1 cuts inside layer 2 (after its ffn_up) and
// still gives the CPU's logits: the activations crossing the cut go along.
TEST_F(LlamaPipelineTest, SplitInsideALayerMatchesCpuAlone) {
  const auto expected = Prefill({cpu_.get()}, 1);
  const LlamaModelOptions by_bytes = {.split = {2, 1, 0},
                                      .split_unit = SplitUnit::kWeightBytes};
  const auto actual =
      Prefill({sims_[0].get(), sims_[1].get(), cpu_.get()}, 4, by_bytes);
  ASSERT_EQ(expected.size(), actual.size());
  for (int k = 0; k < kMicroBatches; ++k) {
    EXPECT_LE(testing::Nmse(expected[k], actual[k]), 1e-6) << "batch " << k;
  }
}

// Parameters of `model`'s weights on each backend, the embedding left out.
std::vector<double> ParamsPerBackend(const LlamaModel& model) {
  std::vector<double> out(model.backends().size(), 0);
  for (const auto& [w, b] : model.WeightBackends()) {
    if (w != model.tok_embd()) out[b] += static_cast<double>(w->NumElements());
  }
  return out;
}

TEST_F(LlamaPipelineTest, SplitByWeightBytesBalancesTheStages) {
  const std::vector<Backend*> backends = {sims_[0].get(), sims_[1].get(),
                                          cpu_.get()};
  const std::vector<double> split = {2, 1, 0};
  FERRY_ASSERT_OK_AND_ASSIGN(
      auto by_layers, LlamaModel::Create(kConfig, backends, {.split = split}));
  FERRY_ASSERT_OK_AND_ASSIGN(
      auto by_bytes,
      LlamaModel::Create(
          kConfig, backends,
          {.split = split, .split_unit = SplitUnit::kWeightBytes}));
  // A cut keeps pieces whole; the largest is attn_norm with Q, K and V.
  const double e = kConfig.n_embd, kv = kConfig.kv_dim();
  const double half_piece = (e + e * e + 2 * e * kv) / 2;
  const std::vector<double> layers = ParamsPerBackend(*by_layers);
  const std::vector<double> bytes = ParamsPerBackend(*by_bytes);
  const double target = (bytes[0] + bytes[1]) * 2 / 3;
  EXPECT_EQ(bytes[0] + bytes[1], layers[0] + layers[1]);
  EXPECT_EQ(bytes[2], 0);
  EXPECT_GT(std::abs(layers[0] - target), half_piece) << "a case too easy";
  EXPECT_LE(std::abs(bytes[0] - target), half_piece);

  // Each weight in its backend's memory; in the forward pass's order the
  // backends never go back; exactly one layer is cut.
  int previous = 0;
  for (const auto& [w, b] : by_bytes->WeightBackends()) {
    EXPECT_EQ(w->buffer->type(),
              b == 2 ? cpu_->device().weights_buffer_type()
                     : backends[b]->device().default_buffer_type())
        << w->name;
    if (w == by_bytes->tok_embd()) continue;
    EXPECT_GE(b, previous) << w->name;
    previous = b;
  }
  int cut_layers = 0;
  for (const LlamaLayer& l : by_bytes->layers()) {
    bool cut = false;
    for (Tensor* w : {l.attn_norm, l.wq, l.wk, l.wv, l.wo, l.ffn_norm, l.w_gate,
                      l.w_up, l.w_down}) {
      cut = cut || w->buffer->type() != l.wq->buffer->type();
    }
    cut_layers += cut ? 1 : 0;
  }
  EXPECT_EQ(cut_layers, 1);
  EXPECT_EQ(by_bytes->layers()[2].w_up->buffer->type(),
            sims_[0]->device().default_buffer_type());
  EXPECT_EQ(by_bytes->layers()[2].w_down->buffer->type(),
            sims_[1]->device().default_buffer_type());
  // A layer's backend is its attention's, where its K and V cache go.
  FERRY_ASSERT_OK_AND_ASSIGN(auto cache, LlamaKvCache::Create(*by_bytes, 8));
  for (int il = 0; il < kConfig.n_layer; ++il) {
    const LlamaLayer& l = by_bytes->layers()[il];
    EXPECT_EQ(cache->k(il)->buffer->type(), l.wk->buffer->type());
    EXPECT_EQ(backends[l.backend]->device().default_buffer_type(),
              l.wv->buffer->type());
  }
  EXPECT_NE(by_bytes->DescribePlacement().find("(of 2: blk.2.ffn_down)"),
            std::string::npos)
      << by_bytes->DescribePlacement();

  // Whole layers by hand and a cut by bytes do not mix.
  EXPECT_EQ(LlamaModel::Create(kConfig, backends,
                               {.split_unit = SplitUnit::kWeightBytes,
                                .layer_backends = {0, 0, 1, 1}})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  // An output placed by hand stays there, out of the count.
  FERRY_ASSERT_OK_AND_ASSIGN(
      auto head_on_cpu,
      LlamaModel::Create(kConfig, backends,
                         {.split = split,
                          .split_unit = SplitUnit::kWeightBytes,
                          .output_backend = 2}));
  EXPECT_EQ(head_on_cpu->output_backend(), 2);
  EXPECT_EQ(ParamsPerBackend(*head_on_cpu)[2], e + e * kConfig.n_vocab);
}

// Between two stages cut at a layer boundary only the residual stream
// crosses: the next layer's attention norm runs on the next stage, which
// reads the residual anyway (ggml's scheduler also sends the norm).
TEST_F(LlamaPipelineTest, AWholeLayerCutSendsTheResidualAlone) {
  std::vector<Backend*> backends = {sims_[0].get(), sims_[1].get(), cpu_.get()};
  FERRY_ASSERT_OK_AND_ASSIGN(
      auto model, LlamaModel::Create(kConfig, backends, {.split = {1, 1, 0}}));
  FERRY_ASSERT_OK_AND_ASSIGN(auto g,
                             BuildLlamaGraph(*model, {.n_tokens = kUbatch}));
  FERRY_ASSERT_OK_AND_ASSIGN(auto sched, Scheduler::Create(backends, {}));
  FERRY_ASSERT_OK(sched->AllocGraph(g.graph));
  const int64_t residual = kConfig.n_embd * kUbatch * sizeof(float);
  EXPECT_EQ(sched->stats().copy_bytes[0][1], residual)
      << sched->DescribeSplits();
}

TEST_F(LlamaPipelineTest, SplitPlacesLayersOnEachBackend) {
  FERRY_ASSERT_OK_AND_ASSIGN(
      auto model,
      LlamaModel::Create(kConfig, {sims_[0].get(), sims_[1].get(), cpu_.get()},
                         {.split = {3, 1, 0}}));
  std::vector<int> on(3, 0);
  for (const LlamaLayer& l : model->layers()) ++on[l.backend];
  EXPECT_EQ(on, (std::vector<int>{3, 1, 0}));
  EXPECT_EQ(model->layers()[0].wq->buffer->type(),
            sims_[0]->device().default_buffer_type());
  FERRY_ASSERT_OK_AND_ASSIGN(auto cache, LlamaKvCache::Create(*model, 8));
  EXPECT_EQ(cache->k(0)->buffer->type(),
            sims_[0]->device().default_buffer_type());
  EXPECT_EQ(cache->v(3)->buffer->type(),
            sims_[1]->device().default_buffer_type());
  // The CPU's weights (the token embedding here) go in its weights type:
  // panels, packed once at load.
  EXPECT_EQ(model->tok_embd()->buffer->type(),
            cpu_->device().weights_buffer_type());
  EXPECT_NE(cpu_->device().weights_buffer_type(),
            cpu_->device().default_buffer_type());
  EXPECT_FALSE(
      LlamaModel::Create(kConfig, {cpu_.get()}, {.split = {1, 2}}).ok());
  // cpu_weights_type keeps them row-major in host memory.
  FERRY_ASSERT_OK_AND_ASSIGN(
      auto plain,
      LlamaModel::Create(
          kConfig, {cpu_.get()},
          {.cpu_weights_type = cpu_->device().default_buffer_type()}));
  EXPECT_TRUE(plain->layers()[0].wq->buffer->is_host());
}

// Prompt then token-by-token generation through the engine's micro-batch
// graph, with the KV cache split over the sims (set_rows and get_rows run
// where each layer's cache lives), gives the logits of a cache-free pass
// over the whole context; with whole layers per sim and with a layer cut.
class LlamaKvCacheTest : public LlamaPipelineTest,
                         public ::testing::WithParamInterface<SplitUnit> {};

TEST_P(LlamaKvCacheTest, KvCacheMatchesFullRecompute) {
  std::vector<Backend*> backends = {sims_[0].get(), sims_[1].get(), cpu_.get()};
  FERRY_ASSERT_OK_AND_ASSIGN(
      auto model,
      LlamaModel::Create(kConfig, backends,
                         {.split = {2, 1, 0}, .split_unit = GetParam()}));
  FERRY_ASSERT_OK(model->FillRandom(3));
  FERRY_ASSERT_OK_AND_ASSIGN(auto cache,
                             LlamaKvCache::Create(*model, kConfig.n_ctx + 1));
  const LlamaBatchShape shape{
      .n_tokens = kUbatch, .n_window = 24, .n_outputs = 2};
  FERRY_ASSERT_OK_AND_ASSIGN(LlamaBatchGraph g,
                             BuildLlamaBatchGraph(*model, *cache, shape));
  LlamaBatchBuilder batch(shape, static_cast<int32_t>(kConfig.n_ctx));
  std::vector<int32_t> cells;
  for (int32_t c = 0; c < kConfig.n_ctx; ++c) cells.push_back(c);
  FERRY_ASSERT_OK_AND_ASSIGN(auto sched, Scheduler::Create(backends));
  std::vector<int32_t> context = TinyPrompt(1, kUbatch);
  std::vector<int32_t> next = context;
  int64_t n_past = 0;
  for (int step = 0; step < 5; ++step) {
    const int nt = static_cast<int>(next.size());
    batch.Clear();
    FERRY_ASSERT_OK_AND_ASSIGN(std::vector<int> rows,
                               batch.Add(next, n_past, cells, {nt - 1}));
    std::vector<float> logits(kConfig.n_vocab * shape.n_outputs);
    BatchIo io;
    io.In(*g.tokens, batch.tokens().data(), batch.tokens().size() * 4)
        .In(*g.pos, batch.pos().data(), batch.pos().size() * 4)
        .In(*g.kv_dst, batch.kv_dst().data(), batch.kv_dst().size() * 4)
        .In(*g.kv_window, batch.kv_window().data(),
            batch.kv_window().size() * 4)
        .In(*g.mask, batch.mask().data(), batch.mask().size() * 4)
        .In(*g.out_rows, batch.out_rows().data(), batch.out_rows().size() * 4)
        .Out(*g.logits, logits.data(), logits.size() * 4);
    FERRY_ASSERT_OK(sched->Compute(g.graph, io));
    const std::vector<float> cached(
        logits.begin() + rows[0] * kConfig.n_vocab,
        logits.begin() + (rows[0] + 1) * kConfig.n_vocab);

    // The same context, all at once, without the cache (its own scheduler:
    // the batch graph's plan stays).
    FERRY_ASSERT_OK_AND_ASSIGN(auto full_sched, Scheduler::Create(backends));
    FERRY_ASSERT_OK_AND_ASSIGN(
        LlamaGraph full,
        BuildLlamaGraph(*model,
                        {.n_tokens = static_cast<int64_t>(context.size()),
                         .last_token_only = true}));
    FERRY_ASSERT_OK(full_sched->AllocGraph(full.graph));
    FERRY_ASSERT_OK(SetLlamaInputs(full, kConfig.n_vocab, context));
    FERRY_ASSERT_OK(full_sched->Compute(full.graph));
    std::vector<float> recomputed(kConfig.n_vocab);
    FERRY_ASSERT_OK(GetTensorData(*full.logits, recomputed.data()));
    EXPECT_LE(testing::Nmse(recomputed, cached), 1e-6) << "step " << step;

    n_past += nt;
    next = Argmax(cached, kConfig.n_vocab);
    context.push_back(next[0]);
  }
  // The first scheduler planned the batch graph once.
  EXPECT_EQ(sched->stats().graphs_planned, 1);
}

INSTANTIATE_TEST_SUITE_P(SplitUnits, LlamaKvCacheTest,
                         ::testing::Values(SplitUnit::kLayers,
                                           SplitUnit::kWeightBytes),
                         [](const auto& info) {
                           return info.param == SplitUnit::kLayers
                                      ? "WholeLayers"
                                      : "ByWeightBytes";
                         });

}  // namespace
}  // namespace ferry::llama
