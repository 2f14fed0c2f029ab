// Two ferry_worker processes as pipeline stages: the example llama split
// over them (and the local CPU) gives the local run's logits, split inputs
// go from worker to worker without passing through this process, and a
// worker killed mid-batch fails the run with Unavailable (no hang), after
// which new connections work.
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "ferry/backends/backend.h"
#include "ferry/backends/buffer.h"
#include "ferry/backends/cpu/cpu_backend.h"
#include "ferry/backends/device.h"
#include "ferry/backends/event.h"
#include "ferry/backends/remote/client/remote_device.h"
#include "ferry/backends/remote/testing/worker_process.h"
#include "ferry/graph/context.h"
#include "ferry/graph/graph.h"
#include "ferry/graph/ops.h"
#include "ferry/graph/testing/reference.h"
#include "ferry/models/llama/llama_graph.h"
#include "ferry/models/llama/llama_model.h"
#include "ferry/models/llama/testing/llama_testing.h"
#include "ferry/runtime/status_matchers.h"
#include "ferry/runtime/timeline_semaphore.h"
#include "ferry/runtime/trace.h"
#include "ferry/sched/scheduler.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

using llama::BuildLlamaGraph;
using llama::LlamaConfig;
using llama::LlamaModel;
using llama::SetLlamaInputs;
using remote::testing::WorkerProcess;
using ::testing::HasSubstr;

using ::ferry::testing::TinyPrompt;
constexpr LlamaConfig kConfig = ::ferry::testing::TinyLlamaConfig();
constexpr int64_t kUbatch = 8;
constexpr int kMicroBatches = 6;

class RemotePipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 2; ++i) {
      FERRY_ASSERT_OK_AND_ASSIGN(auto worker,
                                 WorkerProcess::Start({"--devices=cpu"}));
      workers_.push_back(std::move(worker));
    }
    FERRY_ASSERT_OK_AND_ASSIGN(cpu_, GetCpuDevice().CreateBackend("threads=1"));
  }

  // A backend on worker i's CPU (its device outlives the backend).
  std::unique_ptr<Backend> Remote(int i) {
    auto device = MakeRemoteDevice(workers_[i]->address() + "/cpu");
    EXPECT_TRUE(device.ok()) << device.status();
    if (!device.ok()) return nullptr;
    auto backend = (*device)->CreateBackend("threads=1");
    EXPECT_TRUE(backend.ok()) << backend.status();
    devices_.push_back(std::move(*device));
    return backend.ok() ? std::move(*backend) : nullptr;
  }

  // Logits of every micro-batch, n_copies batches in flight; the layers on
  // the first backends, the embedding on the CPU (the last).
  // `after_warmup` runs once the first n_copies micro-batches are done (each
  // copy slot places split inputs apart, so each slot has its own splits).
  absl::StatusOr<std::vector<std::vector<float>>> Prefill(
      std::vector<Backend*> backends, int n_copies,
      std::function<void()> after_warmup = nullptr) {
    llama::LlamaModelOptions options;
    if (backends.size() > 1) {
      options.split.assign(backends.size(), 1.0);
      options.split.back() = 0.0;
    }
    FERRY_ASSIGN_OR_RETURN(auto model,
                           LlamaModel::Create(kConfig, backends, options));
    FERRY_RETURN_IF_ERROR(model->FillRandom(9));
    FERRY_ASSIGN_OR_RETURN(auto g,
                           BuildLlamaGraph(*model, {.n_tokens = kUbatch}));
    FERRY_ASSIGN_OR_RETURN(auto sched,
                           Scheduler::Create(backends, {.n_copies = n_copies}));
    FERRY_RETURN_IF_ERROR(sched->AllocGraph(g.graph));
    Backend* out = sched->GetTensorBackend(*g.logits);
    const size_t bytes = static_cast<size_t>(g.logits->NumBytes());
    BufferType* pinned_type = out->device().host_buffer_type();
    std::vector<std::unique_ptr<Buffer>> pinned;
    std::vector<std::vector<float>> result(kMicroBatches);
    std::vector<float*> dst;
    for (int k = 0; k < kMicroBatches; ++k) {
      result[k].resize(bytes / 4);
      if (pinned_type != nullptr) {
        FERRY_ASSIGN_OR_RETURN(auto b, pinned_type->Allocate(bytes));
        dst.push_back(static_cast<float*>(b->base()));
        pinned.push_back(std::move(b));
      } else {
        dst.push_back(result[k].data());
      }
    }
    Event previous;
    for (int k = 0; k < kMicroBatches; ++k) {
      if (n_copies == 1 && k > 0)
        FERRY_RETURN_IF_ERROR(previous.WaitBlocking());
      FERRY_RETURN_IF_ERROR(
          SetLlamaInputs(g, kConfig.n_vocab, TinyPrompt(k, kUbatch)));
      FERRY_ASSIGN_OR_RETURN(previous, sched->Submit(g.graph));
      FERRY_RETURN_IF_ERROR(out->EnqueueGetTensor(*g.logits, dst[k], 0, bytes));
      if (k == n_copies - 1 && after_warmup != nullptr) {
        FERRY_RETURN_IF_ERROR(previous.WaitBlocking());
        after_warmup();
      }
    }
    FERRY_RETURN_IF_ERROR(sched->Synchronize());
    if (pinned_type != nullptr) {
      for (int k = 0; k < kMicroBatches; ++k) {
        std::copy(dst[k], dst[k] + bytes / 4, result[k].begin());
      }
    }
    return result;
  }

  // A tensor of `n` f32 in a buffer of its own on `b`'s device.
  Tensor* Place(Backend& b, Context& ctx, int64_t n, const char* name) {
    auto t = ctx.NewTensor(DType::kF32, {n}, name);
    EXPECT_TRUE(t.ok()) << t.status();
    if (!t.ok()) return nullptr;
    auto buffer = b.default_buffer_type()->Allocate((*t)->NumBytes());
    EXPECT_TRUE(buffer.ok()) << buffer.status();
    if (!buffer.ok()) return nullptr;
    EXPECT_TRUE(PlaceTensor(**buffer, **t, 0).ok());
    buffers_.push_back(std::move(*buffer));
    return *t;
  }

  std::vector<std::unique_ptr<WorkerProcess>> workers_;
  std::vector<std::unique_ptr<Device>> devices_;
  std::unique_ptr<Backend> cpu_;
  std::vector<std::unique_ptr<Buffer>> buffers_;  // Freed before devices_.
};

TEST_F(RemotePipelineTest, TwoWorkersAsStagesMatchTheLocalRun) {
  FERRY_ASSERT_OK_AND_ASSIGN(auto expected, Prefill({cpu_.get()}, 1));
  std::unique_ptr<Backend> w0 = Remote(0);
  std::unique_ptr<Backend> w1 = Remote(1);
  ASSERT_NE(w0, nullptr);
  ASSERT_NE(w1, nullptr);
  FERRY_ASSERT_OK_AND_ASSIGN(std::vector<int64_t> before,
                             GetWorkerStats(w1->device()));
  // Each worker's compute engine, as the worker counts it, under the
  // remote device's name.
  std::vector<DeviceCounters> engines_before;
  for (Backend* b : {w0.get(), w1.get()}) {
    std::vector<DeviceCounters> e = b->device().engine_stats();
    ASSERT_EQ(e.size(), 1u) << b->device().name();
    EXPECT_EQ(e[0].name, absl::StrCat(b->device().name(), "/compute"));
    engines_before.push_back(e[0]);
  }
  // Splits are defined on the workers by the first batches (one set per
  // copy slot), then launched by id: the later batches define nothing.
  std::vector<int64_t> defined_after_warmup;
  FERRY_ASSERT_OK_AND_ASSIGN(auto actual,
                             Prefill({w0.get(), w1.get(), cpu_.get()}, 4, [&] {
                               for (Backend* b : {w0.get(), w1.get()}) {
                                 auto stats = GetWorkerStats(b->device());
                                 ASSERT_TRUE(stats.ok()) << stats.status();
                                 defined_after_warmup.push_back((*stats)[6]);
                               }
                             }));
  for (int i = 0; i < 2; ++i) {
    Backend* b = i == 0 ? w0.get() : w1.get();
    FERRY_ASSERT_OK_AND_ASSIGN(std::vector<int64_t> stats,
                               GetWorkerStats(b->device()));
    ASSERT_EQ(defined_after_warmup.size(), 2u);
    EXPECT_GT(defined_after_warmup[i], 0) << "worker " << i;
    EXPECT_LE(defined_after_warmup[i], 4) << "worker " << i;
    EXPECT_EQ(stats[6], defined_after_warmup[i])
        << "worker " << i << " got new graphs after the warm-up";
  }
  for (int i = 0; i < 2; ++i) {
    Backend* b = i == 0 ? w0.get() : w1.get();
    std::vector<DeviceCounters> e = b->device().engine_stats();
    ASSERT_EQ(e.size(), 1u) << b->device().name();
    EXPECT_GT(e[0].ops, engines_before[i].ops) << b->device().name();
    EXPECT_GT(e[0].busy_ns, engines_before[i].busy_ns) << b->device().name();
  }
  ASSERT_EQ(expected.size(), actual.size());
  for (int k = 0; k < kMicroBatches; ++k) {
    EXPECT_LE(testing::Nmse(expected[k], actual[k]), 1e-6) << "batch " << k;
  }
  EXPECT_GT(testing::Nmse(expected[0], expected[1]), 1e-3);
  // The activations between the stages went from worker 0 to worker 1.
  FERRY_ASSERT_OK_AND_ASSIGN(std::vector<int64_t> after,
                             GetWorkerStats(w1->device()));
  const int64_t activation = kConfig.n_embd * kUbatch * 4;
  EXPECT_GE(after[2] - before[2], kMicroBatches * activation)
      << "peer bytes into worker 1";
}

// With the client's recorder on, the workers record their nodes' spans; the
// client collects them onto its own tracks and clock, each span once. (The
// stages' overlap is not asserted: this model's stages take tens of
// microseconds, near a transfer's latency.)
TEST_F(RemotePipelineTest, WorkerSpansJoinTheClientsTrace) {
  std::unique_ptr<Backend> w0 = Remote(0);
  std::unique_ptr<Backend> w1 = Remote(1);
  ASSERT_NE(w0, nullptr);
  ASSERT_NE(w1, nullptr);
  const int64_t before = TraceRecorder::NowNanos();
  TraceRecorder::Global().SetEnabled(true);
  absl::StatusOr<std::vector<std::vector<float>>> run =
      Prefill({w0.get(), w1.get(), cpu_.get()}, 4);
  TraceRecorder::Global().SetEnabled(false);
  const int64_t after = TraceRecorder::NowNanos();
  FERRY_ASSERT_OK(run.status());
  TraceRecorder trace;
  FERRY_ASSERT_OK(w0->device().CollectTrace(trace));
  FERRY_ASSERT_OK(w1->device().CollectTrace(trace));
  const std::vector<std::string> tracks = trace.TrackNames();
  std::vector<std::vector<TraceSpan>> by_worker(2);
  // The clocks are one here; the offset the pings estimate errs by up to
  // half a round trip.
  constexpr int64_t kSlack = 2'000'000;
  for (const TraceSpan& span : trace.Spans()) {
    const std::string& track = tracks[span.track];
    EXPECT_GE(span.begin_ns, before - kSlack) << track << " " << span.name;
    EXPECT_LE(span.end_ns, after + kSlack) << track << " " << span.name;
    EXPECT_LE(span.begin_ns, span.end_ns);
    for (int i = 0; i < 2; ++i) {
      Backend* b = i == 0 ? w0.get() : w1.get();
      if (track == absl::StrCat(b->device().name(), "/compute")) {
        by_worker[i].push_back(span);
      }
    }
  }
  ASSERT_FALSE(by_worker[0].empty());
  ASSERT_FALSE(by_worker[1].empty());
  // Named as the local CPU names them: op, then the output's name (the
  // graph names each layer's output "blk.N.out").
  int layer_outputs = 0;
  for (const TraceSpan& span : by_worker[0]) {
    layer_outputs += absl::StartsWith(span.name, "add blk.") &&
                     absl::EndsWith(span.name, ".out");
  }
  EXPECT_GT(layer_outputs, 0) << by_worker[0][0].name;
  // Collected spans do not come again.
  const size_t collected = trace.Spans().size();
  FERRY_ASSERT_OK(w0->device().CollectTrace(trace));
  FERRY_ASSERT_OK(w1->device().CollectTrace(trace));
  EXPECT_EQ(trace.Spans().size(), collected);
}

// A weight the worker reads from its own file into its CPU's weights type is
// laid out in panels as it lands (any byte ranges, in pieces of a few MiB):
// read back it is the file's bytes, and a mul_mat by it is right.
TEST_F(RemotePipelineTest, AWeightLoadedFromTheWorkersFileIsPackedThere) {
  const std::string dir = std::getenv("TEST_TMPDIR");
  constexpr int64_t kK = 2048, kRows = 520, kN = 3;  // 4.3 MB: two pieces.
  std::vector<float> weights(kK * kRows);
  for (size_t i = 0; i < weights.size(); ++i) {
    weights[i] = static_cast<float>((i * 7919) % 211) * 0.01f - 1.0f;
  }
  const size_t total = weights.size() * 4;
  {
    std::ofstream file(dir + "/w.bin", std::ios::binary);
    file << std::string(100, 'x');  // The weight starts at offset 100.
    file.write(reinterpret_cast<const char*>(weights.data()),
               static_cast<std::streamsize>(total));
  }
  FERRY_ASSERT_OK_AND_ASSIGN(
      auto worker,
      WorkerProcess::Start({"--devices=cpu", "--weights_dir=" + dir}));
  FERRY_ASSERT_OK_AND_ASSIGN(auto device,
                             MakeRemoteDevice(worker->address() + "/cpu"));
  FERRY_ASSERT_OK_AND_ASSIGN(auto backend, device->CreateBackend("threads=1"));
  BufferType& type = *device->weights_buffer_type();
  ASSERT_NE(&type, device->default_buffer_type());
  Context ctx;
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * w,
                             ctx.NewTensor(DType::kF32, {kK, kRows}, "w"));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * x,
                             ctx.NewTensor(DType::kF32, {kK, kN}, "x"));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * y, MulMat(ctx, w, x));
  EXPECT_GT(type.AllocSize(*w), total);  // The last panel's padding.
  FERRY_ASSERT_OK_AND_ASSIGN(auto weights_buffer,
                             type.Allocate(type.AllocSize(*w)));
  FERRY_ASSERT_OK(PlaceTensor(*weights_buffer, *w, 0));
  const size_t cut = 4 * 1234 + 1;  // Inside an element.
  FERRY_ASSERT_OK(
      EnqueueLoadFromWorkerFile(*backend, *w, 0, cut, "w.bin", 100));
  FERRY_ASSERT_OK(EnqueueLoadFromWorkerFile(*backend, *w, cut, total - cut,
                                            "w.bin", 100 + cut));
  FERRY_ASSERT_OK(backend->Synchronize());
  std::vector<float> back(weights.size());
  FERRY_ASSERT_OK(GetTensorData(*w, back.data()));
  EXPECT_EQ(back, weights);

  std::vector<std::unique_ptr<Buffer>> activations;
  for (Tensor* t : {x, y}) {
    FERRY_ASSERT_OK_AND_ASSIGN(
        auto b, device->default_buffer_type()->Allocate(t->NumBytes()));
    FERRY_ASSERT_OK(PlaceTensor(*b, *t, 0));
    activations.push_back(std::move(b));
  }
  std::vector<float> input(kK * kN);
  for (size_t i = 0; i < input.size(); ++i) {
    input[i] = static_cast<float>(i % 13) * 0.1f - 0.6f;
  }
  FERRY_ASSERT_OK(SetTensorData(*x, input.data()));
  FERRY_ASSERT_OK_AND_ASSIGN(Graph graph, Graph::Build({y}));
  FERRY_ASSERT_OK(backend->Compute(graph));
  std::vector<float> out(kRows * kN);
  FERRY_ASSERT_OK(GetTensorData(*y, out.data()));
  for (int64_t j = 0; j < kN; ++j) {
    for (int64_t m = 0; m < kRows; ++m) {
      double sum = 0, magnitude = 0;
      for (int64_t k = 0; k < kK; ++k) {
        const double term =
            static_cast<double>(weights[m * kK + k]) * input[j * kK + k];
        sum += term;
        magnitude += std::abs(term);
      }
      // NaN fails: the comparison is false.
      ASSERT_TRUE(std::abs(out[j * kRows + m] - sum) <= 1e-5 * magnitude)
          << "row " << m << " column " << j << ": " << out[j * kRows + m]
          << " vs " << sum;
    }
  }
}

TEST_F(RemotePipelineTest, WorkerToWorkerCopyBypassesTheClient) {
  std::unique_ptr<Backend> w0 = Remote(0);
  std::unique_ptr<Backend> w1 = Remote(1);
  ASSERT_NE(w0, nullptr);
  ASSERT_NE(w1, nullptr);
  constexpr int64_t n = 1 << 18;  // 1 MiB of f32.
  Context ctx;
  Tensor* src = Place(*w0, ctx, n, "src");
  Tensor* dst = Place(*w1, ctx, n, "dst");
  ASSERT_TRUE(src != nullptr && dst != nullptr);
  std::vector<float> values(n);
  for (int64_t i = 0; i < n; ++i)
    values[i] = static_cast<float>(i % 977) - 3.5f;
  FERRY_ASSERT_OK(SetTensorData(*src, values.data()));
  FERRY_ASSERT_OK_AND_ASSIGN(std::vector<int64_t> before,
                             GetWorkerStats(w1->device()));
  const RemoteTraffic client_before = GetRemoteTraffic();
  for (int i = 0; i < 4; ++i) {
    FERRY_ASSERT_OK(w1->EnqueueCopyTensor(*w0, *src, *dst));
  }
  FERRY_ASSERT_OK(w1->Synchronize());
  FERRY_ASSERT_OK(w0->Synchronize());
  const RemoteTraffic client_after = GetRemoteTraffic();
  FERRY_ASSERT_OK_AND_ASSIGN(std::vector<int64_t> after,
                             GetWorkerStats(w1->device()));
  EXPECT_EQ(client_after.bytes_sent - client_before.bytes_sent, 0);
  EXPECT_EQ(client_after.bytes_received - client_before.bytes_received, 0);
  EXPECT_EQ(after[2] - before[2], 4 * n * 4) << "peer bytes into worker 1";
  std::vector<float> got(n);
  FERRY_ASSERT_OK(GetTensorData(*dst, got.data()));
  EXPECT_EQ(got, values);
}

// A copy whose sending worker dies before it sends: the client tells the
// receiving worker, whose stream fails at once instead of waiting out its
// 60 s transfer timeout.
TEST_F(RemotePipelineTest, AReceiverIsToldAtOnceWhenItsSenderDies) {
  std::unique_ptr<Backend> w0 = Remote(0);
  std::unique_ptr<Backend> w1 = Remote(1);
  ASSERT_NE(w0, nullptr);
  ASSERT_NE(w1, nullptr);
  constexpr int64_t n = 1024;
  Context ctx;
  Tensor* src = Place(*w0, ctx, n, "src");
  Tensor* dst = Place(*w1, ctx, n, "dst");
  ASSERT_TRUE(src != nullptr && dst != nullptr);
  // The sender's stream waits for this before it sends; it never comes.
  auto never = std::make_shared<TimelineSemaphore>(0);
  FERRY_ASSERT_OK(w0->EnqueueWait(Event(never, 1)));
  FERRY_ASSERT_OK(w1->EnqueueCopyTensor(*w0, *src, *dst));
  absl::SleepFor(absl::Milliseconds(200));  // The commands reach them.
  const std::string victim = workers_[0]->address();
  workers_[0]->Kill();
  const absl::Time start = absl::Now();
  EXPECT_THAT(
      w1->Synchronize(),
      testing::StatusIs(absl::StatusCode::kUnavailable, HasSubstr(victim)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  (void)never->Signal(1);
}

TEST_F(RemotePipelineTest, AKilledWorkerFailsTheRunWithUnavailable) {
  std::unique_ptr<Backend> w0 = Remote(0);
  std::unique_ptr<Backend> w1 = Remote(1);
  ASSERT_NE(w0, nullptr);
  ASSERT_NE(w1, nullptr);
  std::vector<Backend*> backends = {w0.get(), w1.get(), cpu_.get()};
  llama::LlamaModelOptions options;
  options.split = {1, 1, 0};
  FERRY_ASSERT_OK_AND_ASSIGN(auto model,
                             LlamaModel::Create(kConfig, backends, options));
  FERRY_ASSERT_OK(model->FillRandom(9));
  FERRY_ASSERT_OK_AND_ASSIGN(auto g,
                             BuildLlamaGraph(*model, {.n_tokens = kUbatch}));
  FERRY_ASSERT_OK_AND_ASSIGN(auto sched,
                             Scheduler::Create(backends, {.n_copies = 2}));
  FERRY_ASSERT_OK(sched->AllocGraph(g.graph));
  FERRY_ASSERT_OK(SetLlamaInputs(g, kConfig.n_vocab, TinyPrompt(0, kUbatch)));
  FERRY_ASSERT_OK(sched->Compute(g.graph));  // Works before the kill.
  const std::string victim = workers_[1]->address();
  FERRY_ASSERT_OK(SetLlamaInputs(g, kConfig.n_vocab, TinyPrompt(1, kUbatch)));
  absl::StatusOr<Event> batch = sched->Submit(g.graph);
  workers_[1]->Kill();
  const absl::Time start = absl::Now();
  absl::Status status =
      batch.ok() ? batch->WaitBlocking(absl::Now() + absl::Seconds(30))
                 : batch.status();
  // Either the batch had finished before the kill, or it failed; the next
  // one must fail, naming the worker, within the deadline.
  if (status.ok()) {
    absl::StatusOr<Event> next = sched->Submit(g.graph);
    status = next.ok() ? next->WaitBlocking(absl::Now() + absl::Seconds(30))
                       : next.status();
  }
  EXPECT_THAT(status, testing::StatusIs(absl::StatusCode::kUnavailable,
                                        HasSubstr(victim)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  EXPECT_THAT(sched->Synchronize(),
              testing::StatusIs(absl::StatusCode::kUnavailable));
  // Events of the dead worker's streams fail too, at once.
  EXPECT_THAT(w1->Record().WaitBlocking(absl::Now() + absl::Seconds(5)),
              testing::StatusIs(absl::StatusCode::kUnavailable));
  // The surviving worker still works, and a new worker can be used.
  FERRY_EXPECT_OK(w0->Synchronize());
  FERRY_ASSERT_OK_AND_ASSIGN(auto fresh,
                             WorkerProcess::Start({"--devices=cpu"}));
  FERRY_ASSERT_OK_AND_ASSIGN(auto device,
                             MakeRemoteDevice(fresh->address() + "/cpu"));
  FERRY_ASSERT_OK_AND_ASSIGN(auto backend, device->CreateBackend());
  FERRY_EXPECT_OK(backend->Synchronize());
}

}  // namespace
}  // namespace ferry
