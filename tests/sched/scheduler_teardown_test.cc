// Destroying a Scheduler while ComputeAsync callers still wait for their
// turn or a free slot, as a program shutting down would (issue #32 item 7):
// ~Scheduler waits for the batches in flight and fails every caller still
// waiting with Cancelled, instead of crashing (a semaphore destroyed under
// its waiters) or racing their enqueue.
#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "ferry/backends/cpu/cpu_backend.h"
#include "ferry/backends/sim/sim_device.h"
#include "ferry/models/llama/llama_graph.h"
#include "ferry/models/llama/llama_model.h"
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

constexpr LlamaConfig kConfig = {.n_layer = 2,
                                 .n_embd = 32,
                                 .n_head = 2,
                                 .n_head_kv = 1,
                                 .n_ff = 48,
                                 .n_vocab = 32,
                                 .n_ctx = 16};
constexpr int64_t kTokens = 4;
constexpr int kCallers = 6;

class SchedulerTeardownTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    FERRY_ASSERT_OK_AND_ASSIGN(cpu_, GetCpuDevice().CreateBackend("threads=1"));
    // Every kernel takes 2 ms of wall time: batches stay in flight while
    // later callers wait behind them.
    FERRY_ASSERT_OK_AND_ASSIGN(
        sim_device_, SimDevice::Create(absl::StrCat("teardown_sim", GetParam()),
                                       "launch=2ms"));
    FERRY_ASSERT_OK_AND_ASSIGN(sim_, sim_device_->CreateBackend());
    const std::vector<Backend*> backends = {sim_.get(), cpu_.get()};
    FERRY_ASSERT_OK_AND_ASSIGN(model_, LlamaModel::Create(kConfig, backends));
    FERRY_ASSERT_OK(model_->FillRandom(3));
    FERRY_ASSERT_OK_AND_ASSIGN(graph_,
                               BuildLlamaGraph(*model_, {.n_tokens = kTokens}));
    FERRY_ASSERT_OK_AND_ASSIGN(
        sched_, Scheduler::Create(backends, {.n_copies = GetParam()}));
    FERRY_ASSERT_OK_AND_ASSIGN(
        inputs_, MakeLlamaInputs(graph_, kConfig.n_vocab, {1, 2, 3, 4}));
    logits_.assign(
        kCallers,
        std::vector<float>(static_cast<size_t>(graph_.logits->NumElements())));
  }

  BatchIo Io(int k) {
    BatchIo io;
    io.In(*graph_.tokens, inputs_.tokens.data(), inputs_.tokens.size() * 4)
        .In(*graph_.pos, inputs_.pos.data(), inputs_.pos.size() * 4)
        .In(*graph_.mask, inputs_.mask.data(), inputs_.mask.size() * 4)
        .Out(*graph_.logits, logits_[k].data(), logits_[k].size() * 4);
    return io;
  }

  // Every caller got OK (its batch ran) or Cancelled (it was still waiting),
  // and at least one was still waiting.
  static void ExpectOkOrCancelled(const std::vector<absl::Status>& statuses) {
    int cancelled = 0;
    for (const absl::Status& status : statuses) {
      if (absl::IsCancelled(status)) {
        ++cancelled;
        continue;
      }
      FERRY_EXPECT_OK(status);
    }
    EXPECT_GT(cancelled, 0) << "no caller was still waiting at teardown";
  }

  std::unique_ptr<Backend> cpu_;
  std::unique_ptr<SimDevice> sim_device_;
  std::unique_ptr<Backend> sim_;
  std::unique_ptr<LlamaModel> model_;
  LlamaGraph graph_;
  LlamaInputs inputs_;
  std::vector<std::vector<float>> logits_;
  std::unique_ptr<Scheduler> sched_;
};

// Callers on their own threads, each blocked in SyncWait on its task.
TEST_P(SchedulerTeardownTest, CallersOnThreadsGetOkOrCancelled) {
  FERRY_ASSERT_OK(sched_->AllocGraph(graph_.graph));
  std::vector<absl::Status> statuses(kCallers);
  std::atomic<int> started{0};
  std::vector<std::thread> callers;
  for (int k = 0; k < kCallers; ++k) {
    callers.emplace_back([this, k, &statuses, &started] {
      Task<absl::Status> task = sched_->ComputeAsync(graph_.graph, Io(k));
      started.fetch_add(1);
      statuses[k] = SyncWait(std::move(task));
    });
  }
  while (started.load() < kCallers) absl::SleepFor(absl::Milliseconds(1));
  absl::SleepFor(absl::Milliseconds(20));  // The tasks took their tickets.
  sched_.reset();
  for (std::thread& caller : callers) caller.join();
  ExpectOkOrCancelled(statuses);
}

// Callers as coroutines on a pool, awaited together.
TEST_P(SchedulerTeardownTest, CoroutinesOnAPoolGetOkOrCancelled) {
  ThreadPool pool(2);
  auto caller = [](ThreadPool* pool, Scheduler* sched, const Graph* graph,
                   BatchIo io) -> Task<absl::Status> {
    co_await pool->Schedule();
    co_return co_await sched->ComputeAsync(*graph, std::move(io));
  };
  std::vector<Task<absl::Status>> tasks;
  for (int k = 0; k < kCallers; ++k) {
    tasks.push_back(caller(&pool, sched_.get(), &graph_.graph, Io(k)));
  }
  std::vector<absl::Status> statuses;
  std::thread waiter([&] { statuses = SyncWait(WhenAll(std::move(tasks))); });
  absl::SleepFor(absl::Milliseconds(30));
  sched_.reset();
  waiter.join();
  ASSERT_EQ(statuses.size(), static_cast<size_t>(kCallers));
  ExpectOkOrCancelled(statuses);
}

INSTANTIATE_TEST_SUITE_P(Slots, SchedulerTeardownTest, ::testing::Values(1, 2),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return absl::StrCat("n_copies", info.param);
                         });

}  // namespace
}  // namespace ferry
