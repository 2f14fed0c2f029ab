// Many batches in flight through the public API, as a user would write it:
// every batch gets its own inputs and its own outputs, whatever the number
// of copy slots, from coroutines (WhenAll) and from threads (Submit), and
// continuations never run on a device's thread.
#include <atomic>
#include <cmath>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ferry/backends/cpu/cpu_backend.h"
#include "ferry/backends/sim/sim_device.h"
#include "ferry/models/llama/llama_graph.h"
#include "ferry/models/llama/llama_model.h"
#include "ferry/models/llama/testing/llama_testing.h"
#include "ferry/runtime/executor.h"
#include "ferry/runtime/status_matchers.h"
#include "ferry/runtime/sync_wait.h"
#include "ferry/runtime/thread_pool.h"
#include "ferry/runtime/when_all.h"
#include "ferry/sched/scheduler.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

using llama::BuildLlamaGraph;
using llama::LlamaConfig;
using llama::LlamaGraph;
using llama::LlamaInputs;
using llama::LlamaModel;
using llama::MakeLlamaInputs;

constexpr LlamaConfig kConfig = ::ferry::testing::TinyLlamaConfig();
constexpr int64_t kTokens = 8;
constexpr int kBatches = 64;

std::vector<int32_t> Prompt(int k) {
  std::vector<int32_t> out;
  for (int64_t i = 0; i < kTokens; ++i) {
    out.push_back(
        static_cast<int32_t>((k * 37 + i * 11 + k * i) % kConfig.n_vocab));
  }
  return out;
}

// A model and its graph on a list of backends, with a scheduler.
struct Setup {
  std::unique_ptr<LlamaModel> model;
  LlamaGraph graph;
  std::unique_ptr<Scheduler> sched;
  std::vector<LlamaInputs> inputs;  // Per batch.

  BatchIo Io(int k, std::vector<float>& logits) const {
    logits.assign(static_cast<size_t>(graph.logits->NumElements()), NAN);
    BatchIo io;
    io.In(*graph.tokens, inputs[k].tokens.data(), inputs[k].tokens.size() * 4)
        .In(*graph.pos, inputs[k].pos.data(), inputs[k].pos.size() * 4)
        .In(*graph.mask, inputs[k].mask.data(), inputs[k].mask.size() * 4)
        .Out(*graph.logits, logits.data(), logits.size() * 4);
    return io;
  }
};

std::unique_ptr<Setup> MakeSetup(std::vector<Backend*> backends, int n_copies,
                                 std::vector<double> split = {}) {
  auto s = std::make_unique<Setup>();
  auto model = LlamaModel::Create(kConfig, backends, {.split = split});
  EXPECT_THAT(model, testing::IsOk());
  s->model = *std::move(model);
  EXPECT_THAT(s->model->FillRandom(7), testing::IsOk());
  auto graph = BuildLlamaGraph(*s->model, {.n_tokens = kTokens});
  EXPECT_THAT(graph, testing::IsOk());
  s->graph = *std::move(graph);
  auto sched = Scheduler::Create(backends, {.n_copies = n_copies});
  EXPECT_THAT(sched, testing::IsOk());
  s->sched = *std::move(sched);
  for (int k = 0; k < kBatches; ++k) {
    auto in = MakeLlamaInputs(s->graph, kConfig.n_vocab, Prompt(k));
    EXPECT_THAT(in, testing::IsOk());
    s->inputs.push_back(*std::move(in));
  }
  return s;
}

class ConcurrentBatchesTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    FERRY_ASSERT_OK_AND_ASSIGN(cpu_, GetCpuDevice().CreateBackend("threads=2"));
    for (int i = 0; i < 2; ++i) {
      FERRY_ASSERT_OK_AND_ASSIGN(
          auto device,
          SimDevice::Create(absl::StrCat("concurrent_sim", i), "lat=1us"));
      FERRY_ASSERT_OK_AND_ASSIGN(auto backend, device->CreateBackend());
      devices_.push_back(std::move(device));
      sims_.push_back(std::move(backend));
    }
    // The reference: the CPU alone, one batch at a time.
    auto reference = MakeSetup({cpu_.get()}, 1);
    expected_.resize(kBatches);
    for (int k = 0; k < kBatches; ++k) {
      FERRY_ASSERT_OK(reference->sched->Compute(
          reference->graph.graph, reference->Io(k, expected_[k])));
    }
  }

  void ExpectAllMatch(const std::vector<std::vector<float>>& got) {
    ASSERT_EQ(got.size(), expected_.size());
    for (int k = 0; k < kBatches; ++k) {
      ASSERT_EQ(got[k].size(), expected_[k].size());
      for (size_t i = 0; i < got[k].size(); ++i) {
        // Not NaN, and the same batch's logits (NaN fails the comparison).
        ASSERT_TRUE(std::abs(got[k][i] - expected_[k][i]) <= 1e-4f)
            << "batch " << k << " logit " << i << ": " << got[k][i] << " vs "
            << expected_[k][i];
      }
    }
  }

  std::vector<Backend*> Backends() {
    return {sims_[0].get(), sims_[1].get(), cpu_.get()};
  }

  std::unique_ptr<Backend> cpu_;
  std::vector<std::unique_ptr<SimDevice>> devices_;
  std::vector<std::unique_ptr<Backend>> sims_;
  std::vector<std::vector<float>> expected_;
};

// One batch: its inputs are captured when ComputeAsync is called, so the
// caller wipes them at once, before awaiting.
Task<absl::Status> OneBatch(Scheduler* sched, const Graph* graph, BatchIo io,
                            LlamaInputs* inputs,
                            std::atomic<int>* on_device_thread) {
  Task<absl::Status> batch = sched->ComputeAsync(*graph, std::move(io));
  std::fill(inputs->tokens.begin(), inputs->tokens.end(), 0);
  std::fill(inputs->mask.begin(), inputs->mask.end(), NAN);
  absl::Status status = co_await std::move(batch);
  if (IsDeviceThread()) on_device_thread->fetch_add(1);
  co_return status;
}

// The pattern of the issue this fixed: every coroutine writes the graph's
// own input tensors (shared by all) and then awaits ComputeAsync.
Task<absl::Status> SharedInputsBatch(Scheduler* sched, const LlamaGraph* g,
                                     const LlamaInputs* in, float* logits,
                                     size_t bytes) {
  FERRY_CO_RETURN_IF_ERROR(SetTensorData(*g->tokens, in->tokens.data()));
  FERRY_CO_RETURN_IF_ERROR(SetTensorData(*g->pos, in->pos.data()));
  FERRY_CO_RETURN_IF_ERROR(SetTensorData(*g->mask, in->mask.data()));
  co_return co_await sched->ComputeAsync(
      g->graph, BatchIo().Out(*g->logits, logits, bytes));
}

TEST_P(ConcurrentBatchesTest, CoroutinesWithWhenAllEachGetTheirOwnResult) {
  auto s = MakeSetup(Backends(), GetParam(), {1, 1, 0});
  std::vector<std::vector<float>> got(kBatches);
  std::atomic<int> on_device_thread{0};
  std::vector<Task<absl::Status>> tasks;
  for (int k = 0; k < kBatches; ++k) {
    tasks.push_back(OneBatch(s->sched.get(), &s->graph.graph, s->Io(k, got[k]),
                             &s->inputs[k], &on_device_thread));
  }
  for (const absl::Status& status : SyncWait(WhenAll(std::move(tasks)))) {
    FERRY_EXPECT_OK(status);
  }
  EXPECT_EQ(on_device_thread.load(), 0);
  ExpectAllMatch(got);
  EXPECT_EQ(s->sched->n_copies(), GetParam());
  EXPECT_EQ(s->sched->stats().batches, kBatches);
  EXPECT_GT(s->sched->num_splits(), 1);
}

TEST_P(ConcurrentBatchesTest, CoroutinesSharingTheGraphsInputTensors) {
  auto s = MakeSetup(Backends(), GetParam(), {1, 1, 0});
  FERRY_ASSERT_OK(s->sched->AllocGraph(s->graph.graph));
  std::vector<std::vector<float>> got(kBatches);
  const size_t elements = static_cast<size_t>(s->graph.logits->NumElements());
  std::vector<Task<absl::Status>> tasks;
  for (int k = 0; k < kBatches; ++k) {
    got[k].assign(elements, NAN);
    tasks.push_back(SharedInputsBatch(s->sched.get(), &s->graph, &s->inputs[k],
                                      got[k].data(), elements * 4));
  }
  for (const absl::Status& status : SyncWait(WhenAll(std::move(tasks)))) {
    FERRY_EXPECT_OK(status);
  }
  ExpectAllMatch(got);
}

TEST_P(ConcurrentBatchesTest, CoroutinesOnAPoolResumeOnThePool) {
  auto s = MakeSetup(Backends(), GetParam(), {1, 1, 0});
  ThreadPool pool(3);
  std::vector<std::vector<float>> got(kBatches);
  std::atomic<int> off_pool{0};
  auto batch = [](ThreadPool* pool, Scheduler* sched, const Graph* graph,
                  BatchIo io,
                  std::atomic<int>* off_pool) -> Task<absl::Status> {
    co_await pool->Schedule();
    absl::Status status = co_await sched->ComputeAsync(*graph, std::move(io));
    if (!pool->IsWorkerThread() || IsDeviceThread()) off_pool->fetch_add(1);
    co_return status;
  };
  std::vector<Task<absl::Status>> tasks;
  for (int k = 0; k < kBatches; ++k) {
    tasks.push_back(batch(&pool, s->sched.get(), &s->graph.graph,
                          s->Io(k, got[k]), &off_pool));
  }
  for (const absl::Status& status : SyncWait(WhenAll(std::move(tasks)))) {
    FERRY_EXPECT_OK(status);
  }
  EXPECT_EQ(off_pool.load(), 0);
  ExpectAllMatch(got);
}

TEST_P(ConcurrentBatchesTest, SubmitFromSeveralThreads) {
  auto s = MakeSetup(Backends(), GetParam(), {1, 1, 0});
  std::vector<std::vector<float>> got(kBatches);
  constexpr int kThreads = 4;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<Event> events;
      for (int k = t; k < kBatches; k += kThreads) {
        absl::StatusOr<Event> done =
            s->sched->Submit(s->graph.graph, s->Io(k, got[k]));
        if (!done.ok()) {
          ADD_FAILURE() << done.status();
          failures.fetch_add(1);
          continue;
        }
        events.push_back(*done);
      }
      for (const Event& event : events) {
        if (!event.WaitBlocking().ok()) failures.fetch_add(1);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  ExpectAllMatch(got);
}

INSTANTIATE_TEST_SUITE_P(NCopies, ConcurrentBatchesTest,
                         ::testing::Values(1, 2, 4, 8));

}  // namespace
}  // namespace ferry
