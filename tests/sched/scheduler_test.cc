// The scheduler on real backends: the CPU and simulated devices.
#include "ferry/sched/scheduler.h"

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ferry/alloc/weights.h"
#include "ferry/backends/cpu/cpu_backend.h"
#include "ferry/backends/sim/sim_device.h"
#include "ferry/graph/context.h"
#include "ferry/graph/graph.h"
#include "ferry/graph/ops.h"
#include "ferry/graph/testing/reference.h"
#include "ferry/models/llama/llama_graph.h"
#include "ferry/models/llama/llama_model.h"
#include "ferry/models/llama/testing/llama_testing.h"
#include "ferry/runtime/status_matchers.h"
#include "ferry/runtime/sync_wait.h"
#include "ferry/runtime/trace.h"
#include "ferry/runtime/when_all.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

using ::ferry::testing::IsOk;
using ::ferry::testing::StatusIs;
using ::testing::HasSubstr;

constexpr llama::LlamaConfig kTinyLlama = {
    .n_layer = 2, .n_embd = 64, .n_head = 4, .n_ff = 96, .n_vocab = 50};

using PlacedModel = std::unique_ptr<llama::LlamaModel>;

absl::StatusOr<PlacedModel> MakeModel(BufferType& type) {
  return testing::MakePlacedLlamaModel(kTinyLlama, type);
}

absl::StatusOr<std::vector<float>> ReadLogits(const Tensor& logits) {
  std::vector<float> out(logits.NumElements());
  FERRY_RETURN_IF_ERROR(GetTensorData(logits, out.data()));
  return out;
}

class SchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FERRY_ASSERT_OK_AND_ASSIGN(cpu_, GetCpuDevice().CreateBackend("threads=2"));
  }

  // A sim device and a backend on it.
  Backend* AddSim(absl::string_view config) {
    auto device =
        SimDevice::Create(absl::StrCat("test_sim", sims_.size()), config);
    EXPECT_THAT(device, IsOk());
    auto backend = (*device)->CreateBackend();
    EXPECT_THAT(backend, IsOk());
    sim_devices_.push_back(std::move(*device));
    sims_.push_back(std::move(*backend));
    return sims_.back().get();
  }

  // Logits of the tiny llama computed on the CPU alone.
  std::vector<float> CpuOnlyLogits(int64_t n_tokens, uint64_t seed) {
    auto model = MakeModel(*cpu_->default_buffer_type());
    EXPECT_THAT(model, IsOk());
    auto graph = llama::BuildLlamaGraph(
        **model, {.n_tokens = n_tokens, .last_token_only = false});
    EXPECT_THAT(graph, IsOk());
    auto sched = Scheduler::Create({cpu_.get()});
    EXPECT_THAT(sched, IsOk());
    EXPECT_THAT((*sched)->AllocGraph(graph->graph), IsOk());
    EXPECT_THAT(testing::FillLlamaInputs(*graph, kTinyLlama.n_vocab, seed),
                IsOk());
    EXPECT_THAT((*sched)->Compute(graph->graph), IsOk());
    auto logits = ReadLogits(*graph->logits);
    EXPECT_THAT(logits, IsOk());
    return *logits;
  }

  std::unique_ptr<Backend> cpu_;
  std::vector<std::unique_ptr<SimDevice>> sim_devices_;
  std::vector<std::unique_ptr<Backend>> sims_;
};

TEST_F(SchedulerTest, RejectsBadBackendLists) {
  Backend* sim = AddSim("");
  EXPECT_THAT(Scheduler::Create({}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Scheduler::Create({cpu_.get(), sim}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("CPU")));
  EXPECT_THAT(Scheduler::Create({cpu_.get(), cpu_.get()}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("twice")));
  EXPECT_THAT(Scheduler::Create({sim, cpu_.get()}, {.n_copies = -1}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  FERRY_ASSERT_OK_AND_ASSIGN(auto two, Scheduler::Create({sim, cpu_.get()}));
  EXPECT_EQ(two->n_copies(), 4);
  FERRY_ASSERT_OK_AND_ASSIGN(auto one, Scheduler::Create({cpu_.get()}));
  EXPECT_EQ(one->n_copies(), 1);
}

// x (input) -> a = x*2 -> b = mul_mat(w, a) -> c = relu(b), with w a weight on
// the sim device that only runs mul_mat: splits and copies by hand.
TEST_F(SchedulerTest, SplitsAndCopiesMatchHandCount) {
  Backend* sim = AddSim("ops=mul_mat");
  Context weights;
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * w,
                             weights.NewTensor(DType::kF32, {16, 8}, "w"));
  FERRY_ASSERT_OK_AND_ASSIGN(
      auto wbufs, AllocateWeights(weights, *sim->default_buffer_type()));
  std::vector<float> wv(16 * 8);
  for (size_t i = 0; i < wv.size(); ++i)
    wv[i] = 0.01f * static_cast<float>(i % 13);
  FERRY_ASSERT_OK(SetTensorData(*w, wv.data()));

  Context ctx;
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * x,
                             ctx.NewTensor(DType::kF32, {16, 3}, "x"));
  SetInput(*x);
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * a, Scale(ctx, x, 2.0f));
  a->name = "a";
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * b, MulMat(ctx, w, a));
  b->name = "b";
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * c, Relu(ctx, b));
  c->name = "c";
  SetOutput(*c);
  FERRY_ASSERT_OK_AND_ASSIGN(Graph graph, Graph::Build({c}));

  FERRY_ASSERT_OK_AND_ASSIGN(
      auto sched, Scheduler::Create({sim, cpu_.get()}, {.n_copies = 2}));
  FERRY_ASSERT_OK(sched->AllocGraph(graph));
  // cpu: [a], sim: [b], cpu: [c].
  EXPECT_EQ(sched->num_splits(), 3) << sched->DescribeSplits();
  EXPECT_EQ(sched->GetTensorBackend(*a), cpu_.get());
  EXPECT_EQ(sched->GetTensorBackend(*b), sim);
  EXPECT_EQ(sched->GetTensorBackend(*c), cpu_.get());
  // Copies per batch: x into the CPU slot (user input, n_copies > 1),
  // a cpu->sim, b sim->cpu.
  EXPECT_EQ(sched->stats().num_split_inputs, 3) << sched->DescribeSplits();
  EXPECT_EQ(sched->stats().copies[1][0], 1);  // cpu -> sim
  EXPECT_EQ(sched->stats().copies[0][1], 1);  // sim -> cpu
  EXPECT_EQ(sched->stats().copies[1][1], 1);  // user input slot on cpu
  EXPECT_EQ(sched->stats().copy_bytes[1][0], 16 * 3 * 4);
  EXPECT_THAT(sched->DescribeAssignment(), HasSubstr("uses a weight"));

  std::vector<float> xv(48);
  for (int i = 0; i < 48; ++i) xv[i] = 0.1f * static_cast<float>(i % 7) - 0.3f;
  FERRY_ASSERT_OK(SetTensorData(*x, xv.data()));
  FERRY_ASSERT_OK(sched->Compute(graph));
  std::vector<float> out(8 * 3);
  FERRY_ASSERT_OK(GetTensorData(*c, out.data()));
  for (int n = 0; n < 3; ++n) {
    for (int m = 0; m < 8; ++m) {
      double dot = 0;
      for (int k = 0; k < 16; ++k) dot += wv[m * 16 + k] * 2.0 * xv[n * 16 + k];
      EXPECT_NEAR(out[n * 8 + m], std::max(dot, 0.0), 1e-5) << m << "," << n;
    }
  }
}

TEST_F(SchedulerTest, PinsAreRespected) {
  Backend* sim = AddSim("");
  Context ctx;
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * x, ctx.NewTensor(DType::kF32, {32}, "x"));
  SetInput(*x);
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * a, Silu(ctx, x));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * b, Scale(ctx, a, 3.0f));
  FERRY_ASSERT_OK_AND_ASSIGN(Graph graph, Graph::Build({b}));
  FERRY_ASSERT_OK_AND_ASSIGN(auto sched, Scheduler::Create({sim, cpu_.get()}));
  FERRY_ASSERT_OK(sched->SetTensorBackend(*a, *sim));
  FERRY_ASSERT_OK(sched->AllocGraph(graph));
  EXPECT_EQ(sched->GetTensorBackend(*a), sim);
  EXPECT_THAT(sched->DescribeAssignment(), HasSubstr("pinned by the user"));
  std::vector<float> xv(32, 1.0f), out(32);
  FERRY_ASSERT_OK(SetTensorData(*x, xv.data()));
  FERRY_ASSERT_OK(sched->Compute(graph));
  FERRY_ASSERT_OK(GetTensorData(*b, out.data()));
  EXPECT_NEAR(out[0], 3.0f / (1.0f + std::exp(-1.0f)), 1e-5);
  // A pin onto a backend that cannot run the op is refused.
  Backend* narrow = AddSim("ops=mul_mat");
  FERRY_ASSERT_OK_AND_ASSIGN(auto sched2,
                             Scheduler::Create({narrow, cpu_.get()}));
  EXPECT_THAT(sched2->SetTensorBackend(*a, *narrow),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("silu")));
}

TEST_F(SchedulerTest, UnsupportedEverywhereNamesOpAndBackends) {
  // The graph builder refuses an i32 add, so build an f32 one and retype it:
  // no backend has an i32 add kernel.
  Backend* sim = AddSim("ops=mul_mat");
  Context ctx;
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * x,
                             ctx.NewTensor(DType::kF32, {4}, "ints"));
  SetInput(*x);
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * y, Add(ctx, x, x));
  x->dtype = DType::kI32;
  y->dtype = DType::kI32;
  FERRY_ASSERT_OK_AND_ASSIGN(Graph graph, Graph::Build({y}));
  FERRY_ASSERT_OK_AND_ASSIGN(auto sched, Scheduler::Create({sim, cpu_.get()}));
  EXPECT_THAT(sched->AllocGraph(graph),
              StatusIs(absl::StatusCode::kUnimplemented,
                       ::testing::AllOf(HasSubstr("add"), HasSubstr("cpu"),
                                        HasSubstr("test_sim"))));
}

// A transformer split across two sim devices and the CPU equals the CPU.
TEST_F(SchedulerTest, LlamaAcrossSimsAndCpuEqualsCpuOnly) {
  const std::vector<float> expected = CpuOnlyLogits(8, 3);
  Backend* sim0 = AddSim("ops=mul_mat,rms_norm,mul,add");
  Backend* sim1 = AddSim("ops=-soft_max");
  FERRY_ASSERT_OK_AND_ASSIGN(PlacedModel model,
                             MakeModel(*sim0->default_buffer_type()));
  FERRY_ASSERT_OK_AND_ASSIGN(
      llama::LlamaGraph graph,
      llama::BuildLlamaGraph(*model,
                             {.n_tokens = 8, .last_token_only = false}));
  FERRY_ASSERT_OK_AND_ASSIGN(auto sched,
                             Scheduler::Create({sim0, sim1, cpu_.get()}));
  FERRY_ASSERT_OK(sched->AllocGraph(graph.graph));
  EXPECT_GT(sched->num_splits(), 2) << sched->DescribeSplits();
  FERRY_ASSERT_OK(testing::FillLlamaInputs(graph, kTinyLlama.n_vocab, 3));
  FERRY_ASSERT_OK(sched->Compute(graph.graph));
  FERRY_ASSERT_OK_AND_ASSIGN(std::vector<float> logits,
                             ReadLogits(*graph.logits));
  EXPECT_LE(testing::Nmse(expected, logits), 1e-8);
}

// With n_copies = 4, K batches in flight give what one at a time gives.
TEST_F(SchedulerTest, PipelinedBatchesMatchOneAtATime) {
  Backend* sim0 = AddSim("");
  FERRY_ASSERT_OK_AND_ASSIGN(PlacedModel model,
                             MakeModel(*sim0->default_buffer_type()));
  FERRY_ASSERT_OK_AND_ASSIGN(
      llama::LlamaGraph graph,
      llama::BuildLlamaGraph(*model,
                             {.n_tokens = 8, .last_token_only = false}));
  FERRY_ASSERT_OK_AND_ASSIGN(
      auto sched, Scheduler::Create({sim0, cpu_.get()}, {.n_copies = 4}));
  FERRY_ASSERT_OK(sched->AllocGraph(graph.graph));
  constexpr int kBatches = 6;
  std::vector<std::vector<float>> one_at_a_time;
  for (int k = 0; k < kBatches; ++k) {
    FERRY_ASSERT_OK(
        testing::FillLlamaInputs(graph, kTinyLlama.n_vocab, 100 + k));
    FERRY_ASSERT_OK(sched->Compute(graph.graph));
    FERRY_ASSERT_OK_AND_ASSIGN(auto logits, ReadLogits(*graph.logits));
    one_at_a_time.push_back(std::move(logits));
  }
  // Pipelined: submit all, reading each batch's logits with an async
  // download enqueued right after it (the outputs are rewritten by the next
  // batch). The logits live on the CPU here, so read them once the batch's
  // event completes, before submitting batch k + 1... except that would
  // serialize; instead give each batch its own logits copy via a CPU
  // download ordered on the CPU stream.
  std::vector<std::vector<float>> pipelined(
      kBatches, std::vector<float>(graph.logits->NumElements()));
  Backend* logits_backend = sched->GetTensorBackend(*graph.logits);
  ASSERT_NE(logits_backend, nullptr);
  std::vector<Event> done;
  for (int k = 0; k < kBatches; ++k) {
    FERRY_ASSERT_OK(
        testing::FillLlamaInputs(graph, kTinyLlama.n_vocab, 100 + k));
    FERRY_ASSERT_OK_AND_ASSIGN(Event event, sched->Submit(graph.graph));
    FERRY_ASSERT_OK(logits_backend->EnqueueGetTensor(
        *graph.logits, pipelined[k].data(), 0, graph.logits->NumBytes()));
    done.push_back(event);
  }
  FERRY_ASSERT_OK(sched->Synchronize());
  for (int k = 0; k < kBatches; ++k) {
    FERRY_EXPECT_OK(done[k].WaitBlocking());
    EXPECT_EQ(pipelined[k], one_at_a_time[k]) << "batch " << k;
  }
  EXPECT_EQ(sched->stats().re_reserves, 0);
}

TEST_F(SchedulerTest, ComputeAsyncFromSeveralCoroutines) {
  Backend* sim0 = AddSim("");
  FERRY_ASSERT_OK_AND_ASSIGN(PlacedModel model,
                             MakeModel(*sim0->default_buffer_type()));
  FERRY_ASSERT_OK_AND_ASSIGN(
      llama::LlamaGraph graph,
      llama::BuildLlamaGraph(*model, {.n_tokens = 4, .last_token_only = true}));
  FERRY_ASSERT_OK_AND_ASSIGN(auto sched, Scheduler::Create({sim0, cpu_.get()}));
  FERRY_ASSERT_OK(sched->AllocGraph(graph.graph));
  FERRY_ASSERT_OK(testing::FillLlamaInputs(graph, kTinyLlama.n_vocab, 1));
  FERRY_ASSERT_OK(SyncWait(sched->ComputeAsync(graph.graph)));
  FERRY_ASSERT_OK_AND_ASSIGN(auto first, ReadLogits(*graph.logits));
  std::vector<Task<absl::Status>> batches;
  for (int k = 0; k < 3; ++k)
    batches.push_back(sched->ComputeAsync(graph.graph));
  FERRY_ASSERT_OK(SyncWait(WhenAllOk(std::move(batches))));
  FERRY_ASSERT_OK_AND_ASSIGN(auto again, ReadLogits(*graph.logits));
  EXPECT_EQ(first, again);
  EXPECT_EQ(sched->stats().batches, 4);
}

// More callers than copy slots: each waits for the previous caller's
// enqueue and then for the last batch on its slot, so none rewrites a
// slot's copies (here, of the user inputs) before the batch that read them
// has run. Checked on the trace: batch k + n_copies starts copying only
// after batch k's compute ended. (On the CPU the waiters resume on its
// stream's thread, so a shared slot would be overwritten before its batch
// runs: wrong inputs, not a data race TSan could see.)
TEST_F(SchedulerTest, MoreComputeAsyncCallersThanSlots) {
  FERRY_ASSERT_OK_AND_ASSIGN(PlacedModel model,
                             MakeModel(*cpu_->default_buffer_type()));
  for (int n_copies : {1, 2}) {
    // A graph per scheduler: its activations point into that scheduler's
    // buffers.
    FERRY_ASSERT_OK_AND_ASSIGN(
        llama::LlamaGraph graph,
        llama::BuildLlamaGraph(*model,
                               {.n_tokens = 4, .last_token_only = true}));
    FERRY_ASSERT_OK_AND_ASSIGN(
        auto sched, Scheduler::Create({cpu_.get()}, {.n_copies = n_copies}));
    FERRY_ASSERT_OK(sched->AllocGraph(graph.graph));
    ASSERT_EQ(sched->num_splits(), 1);
    FERRY_ASSERT_OK(testing::FillLlamaInputs(graph, kTinyLlama.n_vocab, 1));
    FERRY_ASSERT_OK(SyncWait(sched->ComputeAsync(graph.graph)));
    FERRY_ASSERT_OK_AND_ASSIGN(auto first, ReadLogits(*graph.logits));

    TraceRecorder& trace = TraceRecorder::Global();
    trace.Clear();
    trace.SetEnabled(true);
    constexpr int kCallers = 7;
    std::vector<Task<absl::Status>> batches;
    for (int k = 0; k < kCallers; ++k) {
      batches.push_back(sched->ComputeAsync(graph.graph));
    }
    FERRY_ASSERT_OK(SyncWait(WhenAllOk(std::move(batches))));
    trace.SetEnabled(false);
    FERRY_ASSERT_OK_AND_ASSIGN(auto again, ReadLogits(*graph.logits));
    EXPECT_EQ(first, again) << "n_copies " << n_copies;
    EXPECT_EQ(sched->stats().batches, 1 + kCallers);

    const std::vector<std::string> tracks = trace.TrackNames();
    std::vector<const TraceSpan*> copies;
    std::vector<const TraceSpan*> computes;
    const std::vector<TraceSpan> spans = trace.Spans();
    for (const TraceSpan& span : spans) {
      const std::string& track = tracks[static_cast<size_t>(span.track)];
      if (track == "sched/enqueue" && span.name.rfind("copy ", 0) == 0) {
        copies.push_back(&span);
      } else if (track == "cpu/compute") {
        computes.push_back(&span);
      }
    }
    const int per_batch = sched->stats().num_split_inputs;
    ASSERT_GT(per_batch, 0);
    ASSERT_EQ(copies.size(), static_cast<size_t>(kCallers * per_batch));
    // One span per compute node, the same nodes in every batch.
    ASSERT_EQ(computes.size() % kCallers, 0u);
    const size_t nodes = computes.size() / kCallers;
    ASSERT_GT(nodes, 0u);
    for (int k = 0; k + n_copies < kCallers; ++k) {
      const TraceSpan& reuse = *copies[(k + n_copies) * per_batch];
      // The same slot (the batch before them took ticket 0).
      EXPECT_EQ(reuse.args[2].value, (k + 1) % n_copies);
      EXPECT_GE(reuse.begin_ns, computes[(k + 1) * nodes - 1]->end_ns)
          << "batch " << k + n_copies << " rewrote slot " << (k + 1) % n_copies
          << " before batch " << k << " ran (n_copies " << n_copies << ")";
    }
    trace.Clear();
    // Submit after them takes the next turn.
    FERRY_ASSERT_OK_AND_ASSIGN(Event done, sched->Submit(graph.graph));
    FERRY_ASSERT_OK(done.WaitBlocking());
  }
}

// Host-side spans on "sched/enqueue": one per split-input copy and one per
// split's compute, named after what they move or run.
TEST_F(SchedulerTest, EnqueueSpansForEachSplitAndCopy) {
  Backend* sim = AddSim("ops=mul_mat");
  FERRY_ASSERT_OK_AND_ASSIGN(PlacedModel model,
                             MakeModel(*sim->default_buffer_type()));
  FERRY_ASSERT_OK_AND_ASSIGN(
      llama::LlamaGraph graph,
      llama::BuildLlamaGraph(*model, {.n_tokens = 4, .last_token_only = true}));
  FERRY_ASSERT_OK_AND_ASSIGN(
      auto sched, Scheduler::Create({sim, cpu_.get()}, {.n_copies = 2}));
  FERRY_ASSERT_OK(sched->AllocGraph(graph.graph));
  FERRY_ASSERT_OK(testing::FillLlamaInputs(graph, kTinyLlama.n_vocab, 1));
  TraceRecorder& trace = TraceRecorder::Global();
  trace.Clear();
  trace.SetEnabled(true);
  FERRY_ASSERT_OK(sched->Compute(graph.graph));
  trace.SetEnabled(false);
  const std::vector<std::string> tracks = trace.TrackNames();
  int splits = 0;
  int copies = 0;
  for (const TraceSpan& span : trace.Spans()) {
    if (tracks[static_cast<size_t>(span.track)] != "sched/enqueue") continue;
    EXPECT_LE(span.begin_ns, span.end_ns);
    EXPECT_EQ(span.args[2].value, 0) << span.name;  // Slot of batch 0.
    if (span.name.rfind("split ", 0) == 0) {
      EXPECT_EQ(span.args[1].value, splits) << span.name;
      ++splits;
    } else {
      EXPECT_EQ(span.name.rfind("copy ", 0), 0u) << span.name;
      EXPECT_GT(span.args[0].value, 0) << span.name;  // Bytes.
      ++copies;
    }
  }
  EXPECT_EQ(splits, sched->num_splits());
  EXPECT_EQ(copies, sched->stats().num_split_inputs);
  trace.Clear();
}

TEST_F(SchedulerTest, FaultMidGraphIsAStatusAndSchedulerRecovers) {
  Backend* sim0 = AddSim("");
  FERRY_ASSERT_OK_AND_ASSIGN(PlacedModel model,
                             MakeModel(*sim0->default_buffer_type()));
  FERRY_ASSERT_OK_AND_ASSIGN(
      llama::LlamaGraph graph,
      llama::BuildLlamaGraph(*model, {.n_tokens = 4, .last_token_only = true}));
  FERRY_ASSERT_OK_AND_ASSIGN(auto sched, Scheduler::Create({sim0, cpu_.get()}));
  FERRY_ASSERT_OK(sched->AllocGraph(graph.graph));
  FERRY_ASSERT_OK(testing::FillLlamaInputs(graph, kTinyLlama.n_vocab, 1));
  FERRY_ASSERT_OK(sched->Compute(graph.graph));
  FERRY_ASSERT_OK_AND_ASSIGN(auto good, ReadLogits(*graph.logits));
  sim_devices_[0]->SetFaults({.kernel = 3});
  absl::Status status = sched->Compute(graph.graph);
  EXPECT_FALSE(status.ok());
  (void)sched->Synchronize();
  sched->Reset();
  FERRY_ASSERT_OK(sched->Compute(graph.graph));
  FERRY_ASSERT_OK_AND_ASSIGN(auto after, ReadLogits(*graph.logits));
  EXPECT_EQ(good, after);
}

TEST_F(SchedulerTest, EvalCallbackObservesAndCancels) {
  Backend* sim0 = AddSim("");
  FERRY_ASSERT_OK_AND_ASSIGN(PlacedModel model,
                             MakeModel(*sim0->default_buffer_type()));
  FERRY_ASSERT_OK_AND_ASSIGN(
      llama::LlamaGraph graph,
      llama::BuildLlamaGraph(*model, {.n_tokens = 4, .last_token_only = true}));
  FERRY_ASSERT_OK_AND_ASSIGN(auto sched, Scheduler::Create({sim0, cpu_.get()}));
  FERRY_ASSERT_OK(sched->AllocGraph(graph.graph));
  FERRY_ASSERT_OK(testing::FillLlamaInputs(graph, kTinyLlama.n_vocab, 1));
  int observed = 0;
  sched->SetEvalCallback([&](Tensor& node, bool ask) {
    if (ask) return node.op == Op::kSoftMax;
    ++observed;
    return observed < 2;  // Stop after the second soft_max.
  });
  EXPECT_THAT(sched->Compute(graph.graph),
              StatusIs(absl::StatusCode::kCancelled));
  EXPECT_EQ(observed, 2);
  sched->SetEvalCallback(nullptr);
  FERRY_EXPECT_OK(sched->Compute(graph.graph));
}

}  // namespace
}  // namespace ferry
