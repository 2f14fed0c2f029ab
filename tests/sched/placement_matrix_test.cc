// Pipelining holds for every placement: with n_copies = 4, batches through
// two simulated devices and the CPU reach >= 0.9 of the bound the slowest
// stage sets, whether the head, the embedding, or a middle layer is on the
// CPU, whether the CPU's weights are pageable or pinned, with op offload on
// or off. Measured on the sims' modelled clock: devices' busy time is
// modelled, the CPU's is its real busy time on that clock.
//
// The bound: every engine (a sim's compute and copy engines, the CPU's
// compute) must do its share of every batch, so B batches take at least the
// busiest engine's total; the efficiency is that total over the elapsed
// time. Pipelining can only help where another stage has work to overlap
// (the busiest engine is less than ~85% of all work); single-stage cases are
// reported, not judged.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ferry/backends/cpu/cpu_backend.h"
#include "ferry/backends/sim/sim_device.h"
#include "ferry/models/llama/llama_graph.h"
#include "ferry/models/llama/llama_model.h"
#include "ferry/runtime/sanitizer_build.h"
#include "ferry/runtime/status_matchers.h"
#include "ferry/sched/scheduler.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

using llama::BuildLlamaGraph;
using llama::LlamaConfig;
using llama::LlamaInputs;
using llama::LlamaModel;
using llama::LlamaModelOptions;
using llama::MakeLlamaInputs;

constexpr LlamaConfig kConfig = {.n_layer = 8,
                                 .n_embd = 128,
                                 .n_head = 4,
                                 .n_head_kv = 2,
                                 .n_ff = 352,
                                 .n_vocab = 1024,
                                 .n_ctx = 64};
constexpr int64_t kTokens = 32;  // Op offload starts at 32 rows.
// Under sanitizers only correctness is checked: fewer batches.
constexpr int kBatches = kSanitizerBuild ? 8 : 40;
// The modelled devices run at 1/scale of real time, so that their real
// work (the CPU kernels) keeps up with the model.
constexpr double kScale = 6.0;
constexpr char kSimConfig[] =
    "flops=10G,bw=40GB/s,h2d=4GB/s,d2h=4GB/s,d2d=8GB/s,lat=10us,scale=6";

struct Case {
  std::string name;
  LlamaModelOptions model;  // Indices: 0 = sim0, 1 = sim1, 2 = cpu.
  bool op_offload = true;
  bool pinned_cpu_weights = false;
};

struct Measurement {
  double elapsed_ns = 0;  // Modelled.
  double bound_ns = 0;    // Busiest engine's total.
  double total_ns = 0;    // All engines' work.
  double slip_ns = 0;     // Real work that overran the model (host too slow).
  std::string busiest;
  std::string head;  // The backend that computed the logits.
  std::vector<std::vector<float>> logits;
};

class PlacementMatrixTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::printf("\n%-34s %-11s %10s %10s %10s %8s %8s  %s\n", "weights",
                "head runs", "1 copy ms", "4 copies", "bound ms", "speedup",
                "of bound", "busiest engine");
  }

  void SetUp() override {
    FERRY_ASSERT_OK_AND_ASSIGN(cpu_, GetCpuDevice().CreateBackend("threads=2"));
    for (int i = 0; i < 2; ++i) {
      FERRY_ASSERT_OK_AND_ASSIGN(
          auto device,
          SimDevice::Create(absl::StrCat("matrix_sim", i), kSimConfig));
      FERRY_ASSERT_OK_AND_ASSIGN(auto backend, device->CreateBackend());
      devices_.push_back(std::move(device));
      sims_.push_back(std::move(backend));
    }
  }

  Measurement Measure(const Case& c, int n_copies) {
    Measurement run;
    std::vector<Backend*> backends = {sims_[0].get(), sims_[1].get(),
                                      cpu_.get()};
    LlamaModelOptions options = c.model;
    if (c.pinned_cpu_weights) {
      options.cpu_weights_type = devices_[0]->host_buffer_type();
    }
    auto model = LlamaModel::Create(kConfig, backends, options);
    EXPECT_THAT(model, testing::IsOk());
    if (!model.ok()) return run;
    EXPECT_THAT((*model)->FillRandom(3), testing::IsOk());
    auto graph = BuildLlamaGraph(**model, {.n_tokens = kTokens});
    EXPECT_THAT(graph, testing::IsOk());
    auto sched = Scheduler::Create(
        backends, {.n_copies = n_copies, .op_offload = c.op_offload});
    EXPECT_THAT(sched, testing::IsOk());
    EXPECT_THAT((*sched)->AllocGraph(graph->graph), testing::IsOk());
    if (Backend* head = (*sched)->GetTensorBackend(*graph->logits)) {
      run.head = std::string(head->name());
    }
    std::vector<LlamaInputs> inputs;
    for (int k = 0; k < kBatches; ++k) {
      std::vector<int32_t> tokens;
      for (int64_t i = 0; i < kTokens; ++i) {
        tokens.push_back(
            static_cast<int32_t>((k * 13 + i * 7) % kConfig.n_vocab));
      }
      inputs.push_back(*MakeLlamaInputs(*graph, kConfig.n_vocab, tokens));
    }
    run.logits.resize(kBatches);
    // One batch first: plan, warm the caches; not measured.
    auto io = [&](int k) {
      run.logits[k].assign(static_cast<size_t>(graph->logits->NumElements()),
                           NAN);
      return BatchIo()
          .In(*graph->tokens, inputs[k].tokens.data(), kTokens * 4)
          .In(*graph->pos, inputs[k].pos.data(), kTokens * 4)
          .In(*graph->mask, inputs[k].mask.data(), inputs[k].mask.size() * 4)
          .Out(*graph->logits, run.logits[k].data(), run.logits[k].size() * 4);
    };
    EXPECT_THAT((*sched)->Compute(graph->graph, io(0)), testing::IsOk());

    for (auto& device : devices_) device->ResetStats();
    auto cpu_busy = [] {
      return static_cast<double>(GetCpuDevice().engine_stats()[0].busy_ns);
    };
    const double cpu_before = cpu_busy();
    const double start = static_cast<double>(devices_[0]->ModelNowNanos());
    Event last;
    for (int k = 0; k < kBatches; ++k) {
      auto done = (*sched)->Submit(graph->graph, io(k));
      EXPECT_THAT(done, testing::IsOk());
      if (done.ok()) last = *done;
    }
    EXPECT_THAT(last.WaitBlocking(), testing::IsOk());
    run.elapsed_ns = static_cast<double>(devices_[0]->ModelNowNanos()) - start;

    auto note = [&](const std::string& name, double ns) {
      run.total_ns += ns;
      if (ns > run.bound_ns) {
        run.bound_ns = ns;
        run.busiest = name;
      }
    };
    for (auto& device : devices_) {
      for (const DeviceCounters& e : device->engine_stats()) {
        note(e.name, static_cast<double>(e.busy_ns));
      }
      for (SimEngineKind kind : {SimEngineKind::kCompute, SimEngineKind::kH2D,
                                 SimEngineKind::kD2H, SimEngineKind::kD2D}) {
        run.slip_ns += static_cast<double>(device->stats(kind).slip_ns);
      }
    }
    note("cpu/compute", (cpu_busy() - cpu_before) / kScale);
    EXPECT_THAT((*sched)->Synchronize(), testing::IsOk());
    return run;
  }

  void Check(const Case& c) {
    const Measurement one = Measure(c, 1);
    const Measurement four = Measure(c, 4);
    // The same logits either way (and not NaN).
    for (int k = 0; k < kBatches; ++k) {
      for (size_t i = 0; i < one.logits[k].size(); ++i) {
        ASSERT_TRUE(std::abs(one.logits[k][i] - four.logits[k][i]) <= 1e-4f)
            << c.name << " batch " << k << " logit " << i;
      }
    }
    const double of_bound = four.bound_ns / four.elapsed_ns;
    const bool overlap = four.bound_ns < 0.85 * four.total_ns;
    std::printf(
        "%-34s %-11s %10.1f %10.1f %10.1f %7.2fx %7.2f%s  %s%s\n",
        c.name.c_str(), four.head.c_str(), one.elapsed_ns / 1e6,
        four.elapsed_ns / 1e6, four.bound_ns / 1e6,
        one.elapsed_ns / four.elapsed_ns, of_bound,
        overlap ? "" : " (single stage)", four.busiest.c_str(),
        four.slip_ns > 0.05 * four.elapsed_ns
            ? absl::StrFormat(" (host slip %.1f ms)", four.slip_ns / 1e6)
                  .c_str()
            : "");
    if (kSanitizerBuild) {
      std::printf("  (sanitized build: timings reported, not judged)\n");
      return;
    }
    if (overlap) {
      EXPECT_GE(of_bound, 0.9) << c.name << ": n_copies=4 reached " << of_bound
                               << " of the slowest-stage bound";
    }
  }

  std::unique_ptr<Backend> cpu_;
  std::vector<std::unique_ptr<SimDevice>> devices_;
  std::vector<std::unique_ptr<Backend>> sims_;
};

TEST_F(PlacementMatrixTest, AllOnDevices) {
  Check({.name = "all on devices",
         .model = {.split = {1, 1, 0}, .embedding_backend = 0}});
}

// Each placement of weights on the CPU, with op offload on (a device that
// asks for the op takes it: the weights are copied to it every batch) and
// off (the CPU computes it).
class PlacementMatrixOffloadTest : public PlacementMatrixTest,
                                   public ::testing::WithParamInterface<bool> {
 protected:
  void CheckBoth(const std::string& name, LlamaModelOptions model,
                 bool pinned = false) {
    const bool offload = GetParam();
    Check({.name = absl::StrCat(name, offload ? ", offload" : ", no offload"),
           .model = std::move(model),
           .op_offload = offload,
           .pinned_cpu_weights = pinned});
  }
};

TEST_P(PlacementMatrixOffloadTest, HeadOnTheCpu) {
  CheckBoth("head on cpu",
            {.split = {1, 1, 0}, .embedding_backend = 0, .output_backend = 2});
}

TEST_P(PlacementMatrixOffloadTest, EmbeddingAndHeadOnTheCpu) {
  CheckBoth("embd + head on cpu", {.split = {1, 1, 0}, .output_backend = 2});
}

TEST_P(PlacementMatrixOffloadTest, ALayerOnTheCpuInTheMiddle) {
  CheckBoth("middle layer on cpu", {.layer_backends = {0, 0, 0, 2, 1, 1, 1, 1},
                                    .embedding_backend = 0});
}

TEST_P(PlacementMatrixOffloadTest, AllWeightsOnTheCpuPageable) {
  CheckBoth("all on cpu, pageable", {.split = {0, 0, 1}});
}

TEST_P(PlacementMatrixOffloadTest, AllWeightsOnTheCpuPinned) {
  CheckBoth("all on cpu, pinned", {.split = {0, 0, 1}}, /*pinned=*/true);
}

INSTANTIATE_TEST_SUITE_P(Offload, PlacementMatrixOffloadTest, ::testing::Bool(),
                         [](const auto& info) {
                           return info.param ? "On" : "Off";
                         });

}  // namespace
}  // namespace ferry
