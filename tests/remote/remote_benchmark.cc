// Remote devices against the numbers that matter for them, each beside its
// baseline in the same run (ratios in the report, not absolutes):
//   BM_Upload / BM_Download      a 64 MiB tensor copy from/to pinned memory
//                                (compare: ucx_perftest tag_bw, same UCX_TLS)
//   BM_RoundTrip4KiB             a 4 KiB download and its event
//   BM_WeightUpload/bytes/packed weights from pageable memory, synchronous,
//                                as raw bytes or into the weights type
//   BM_WorkerFileLoad/bytes/packed  weights read by the worker from its disk
//   BM_WorkerToWorker            a split input copied worker to worker
//   BM_Llama8/mode/split/steady  the 8-layer llama (n_embd 2048) as ggml's
//                                harness builds it: mode 0 local CPU (2
//                                threads), 1 two stages in one process (1
//                                thread each), 2 two ferry_worker processes
//                                (1 thread each), 3 as 0 with row-major
//                                weights (not packed into panels); `split`
//                                layers on the first stage (4: halves, as
//                                ggml's harness; 5: closest to balanced in
//                                whole layers, the output matrix being on
//                                the second; 0: half the weight bytes each,
//                                cut inside layer 4); logits
//                                read after every micro-batch (async,
//                                pinned), n_copies 4. steady 0: each pass of
//                                4 micro-batches ends with a synchronize (as
//                                llama_decode returns), so the pipeline fills
//                                and drains every pass; 1: passes follow each
//                                other with only the 4 logits slots bounding
//                                what is in flight (a server's stream).
//                                busy_us_per_token: compute time summed
//                                over the devices (workers report theirs);
//                                stage_copy_kib: activations sent from the
//                                first stage to the second per micro-batch.
// The transport is UCX_TLS's. On one host UCX 1.13 gives ferry's endpoints
// (which ask for peer-failure reports) TCP for messages, and cross-memory
// attach for bulk bytes unless UCX_TLS leaves cma out:
//   UCX_TLS=tcp ./bazelw run --config=opt //tests/remote:remote_benchmark
// tests/remote/netns_benchmark.sh runs it on hosts of its own over shaped
// links (FERRY_BENCH_WORKERS).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "benchmark/benchmark.h"
#include "ferry/backends/backend.h"
#include "ferry/backends/buffer.h"
#include "ferry/backends/cpu/cpu_backend.h"
#include "ferry/backends/device.h"
#include "ferry/backends/remote/client/remote_device.h"
#include "ferry/backends/remote/testing/worker_process.h"
#include "ferry/graph/context.h"
#include "ferry/models/llama/llama_graph.h"
#include "ferry/models/llama/llama_model.h"
#include "ferry/runtime/status_macros.h"
#include "ferry/sched/scheduler.h"

namespace ferry {
namespace {

using remote::testing::WorkerProcess;

std::string WeightsDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return tmp != nullptr ? tmp : "/tmp";
}

struct Workers {
  std::vector<std::unique_ptr<WorkerProcess>> processes;
  std::vector<std::unique_ptr<Device>> devices;
};

// Two workers serving their CPU, for the whole run: those named by
// FERRY_BENCH_WORKERS (HOST:PORT,HOST:PORT, e.g. on other hosts; the file
// load benchmark needs them to share WeightsDir() as their --weights_dir),
// or two started here.
Workers& GetWorkers() {
  static Workers* workers = [] {
    auto* w = new Workers;
    if (const char* named = std::getenv("FERRY_BENCH_WORKERS")) {
      for (absl::string_view address : absl::StrSplit(named, ',')) {
        auto d = MakeRemoteDevice(absl::StrCat(address, "/cpu"));
        FERRY_CHECK(d.ok());
        w->devices.push_back(std::move(*d));
      }
      FERRY_CHECK(w->devices.size() == 2);
      return w;
    }
    for (int i = 0; i < 2; ++i) {
      auto p = WorkerProcess::Start(
          {"--devices=cpu", "--weights_dir=" + WeightsDir()});
      FERRY_CHECK(p.ok());
      auto d = MakeRemoteDevice((*p)->address() + "/cpu");
      FERRY_CHECK(d.ok());
      w->processes.push_back(std::move(*p));
      w->devices.push_back(std::move(*d));
    }
    // The workers go with the benchmark (their devices stay, unused).
    std::atexit([] {
      for (auto& p : GetWorkers().processes) p->Kill();
    });
    return w;
  }();
  return *workers;
}

struct Placed {
  Context ctx;
  std::vector<std::unique_ptr<Buffer>> buffers;
  // An f32 vector of `bytes`, or (`rows` > 1) a matrix of `rows` rows.
  Tensor* New(BufferType& type, int64_t bytes, const char* name,
              int64_t rows = 1) {
    auto t = ctx.NewTensor(DType::kF32, {bytes / 4 / rows, rows}, name);
    FERRY_CHECK(t.ok());
    auto b = type.Allocate(type.AllocSize(**t));
    FERRY_CHECK(b.ok());
    FERRY_CHECK(PlaceTensor(**b, **t, 0).ok());
    buffers.push_back(std::move(*b));
    return *t;
  }
};

void BM_Upload(benchmark::State& state) {
  Device& device = *GetWorkers().devices[0];
  const int64_t bytes = state.range(0);
  auto backend = device.CreateBackend("threads=1");
  FERRY_CHECK(backend.ok());
  Placed p;
  Tensor* t = p.New(*device.default_buffer_type(), bytes, "t");
  Tensor* host = p.New(*device.host_buffer_type(), bytes, "host");
  for (auto _ : state) {
    FERRY_CHECK((*backend)->EnqueueSetTensor(*t, host->data, 0, bytes).ok());
    FERRY_CHECK((*backend)->Synchronize().ok());
  }
  state.SetBytesProcessed(state.iterations() * bytes);
}
BENCHMARK(BM_Upload)->Arg(64 << 20)->Arg(1 << 20)->UseRealTime();

void BM_Download(benchmark::State& state) {
  Device& device = *GetWorkers().devices[0];
  const int64_t bytes = state.range(0);
  auto backend = device.CreateBackend("threads=1");
  FERRY_CHECK(backend.ok());
  Placed p;
  Tensor* t = p.New(*device.default_buffer_type(), bytes, "t");
  Tensor* host = p.New(*device.host_buffer_type(), bytes, "host");
  for (auto _ : state) {
    FERRY_CHECK((*backend)->EnqueueGetTensor(*t, host->data, 0, bytes).ok());
    FERRY_CHECK((*backend)->Synchronize().ok());
  }
  state.SetBytesProcessed(state.iterations() * bytes);
}
BENCHMARK(BM_Download)->Arg(64 << 20)->UseRealTime();

void BM_RoundTrip4KiB(benchmark::State& state) {
  Device& device = *GetWorkers().devices[0];
  auto backend = device.CreateBackend("threads=1");
  FERRY_CHECK(backend.ok());
  Placed p;
  Tensor* t = p.New(*device.default_buffer_type(), 4096, "t");
  Tensor* host = p.New(*device.host_buffer_type(), 4096, "host");
  for (auto _ : state) {
    FERRY_CHECK((*backend)->EnqueueGetTensor(*t, host->data, 0, 4096).ok());
    FERRY_CHECK((*backend)->Synchronize().ok());
  }
}
BENCHMARK(BM_RoundTrip4KiB)->UseRealTime();

// Arg 1: 0 the device's memory as raw bytes, 1 its weights type (the
// worker's CPU packs the matrix into panels as the bytes arrive).
void BM_WeightUpload(benchmark::State& state) {
  Device& device = *GetWorkers().devices[0];
  const int64_t bytes = state.range(0);
  const bool packed = state.range(1) != 0;
  Placed p;
  Tensor* t = packed ? p.New(*device.weights_buffer_type(), bytes, "w", 2048)
                     : p.New(*device.default_buffer_type(), bytes, "w");
  std::vector<char> host(static_cast<size_t>(bytes), 1);
  for (auto _ : state) {
    FERRY_CHECK(SetTensorData(*t, host.data()).ok());
  }
  state.SetBytesProcessed(state.iterations() * bytes);
}
BENCHMARK(BM_WeightUpload)
    ->Args({64 << 20, 0})
    ->Args({64 << 20, 1})
    ->UseRealTime();

void BM_WorkerFileLoad(benchmark::State& state) {
  Device& device = *GetWorkers().devices[0];
  const int64_t bytes = state.range(0);
  const std::string name = "remote_benchmark_weights.bin";
  {
    std::ofstream out(WeightsDir() + "/" + name, std::ios::binary);
    std::vector<char> zeros(1 << 20, 3);
    for (int64_t i = 0; i < bytes; i += zeros.size()) {
      out.write(zeros.data(), zeros.size());
    }
  }
  auto backend = device.CreateBackend("threads=1");
  FERRY_CHECK(backend.ok());
  const bool packed = state.range(1) != 0;
  Placed p;
  Tensor* t = packed ? p.New(*device.weights_buffer_type(), bytes, "w", 2048)
                     : p.New(*device.default_buffer_type(), bytes, "w");
  for (auto _ : state) {
    FERRY_CHECK(
        EnqueueLoadFromWorkerFile(**backend, *t, 0, bytes, name, 0).ok());
    FERRY_CHECK((*backend)->Synchronize().ok());
  }
  state.SetBytesProcessed(state.iterations() * bytes);
}
BENCHMARK(BM_WorkerFileLoad)
    ->Args({64 << 20, 0})
    ->Args({64 << 20, 1})
    ->UseRealTime();

void BM_WorkerToWorker(benchmark::State& state) {
  Workers& w = GetWorkers();
  const int64_t bytes = state.range(0);
  auto b0 = w.devices[0]->CreateBackend("threads=1");
  auto b1 = w.devices[1]->CreateBackend("threads=1");
  FERRY_CHECK(b0.ok() && b1.ok());
  Placed p;
  Tensor* src = p.New(*w.devices[0]->default_buffer_type(), bytes, "src");
  Tensor* dst = p.New(*w.devices[1]->default_buffer_type(), bytes, "dst");
  const RemoteTraffic before = GetRemoteTraffic();
  for (auto _ : state) {
    FERRY_CHECK((*b1)->EnqueueCopyTensor(**b0, *src, *dst).ok());
    FERRY_CHECK((*b1)->Synchronize().ok());
  }
  const RemoteTraffic after = GetRemoteTraffic();
  state.counters["client_bytes"] =
      static_cast<double>(after.bytes_sent - before.bytes_sent +
                          after.bytes_received - before.bytes_received);
  state.SetBytesProcessed(state.iterations() * bytes);
}
BENCHMARK(BM_WorkerToWorker)->Arg(64 << 20)->UseRealTime();

// The harness's model: 8 layers, n_embd 2048, 16 heads (no GQA), n_ff 5632,
// vocab 32000, f32 weights; 32 tokens per micro-batch, 4 per pass.
constexpr llama::LlamaConfig kLlama = {.n_layer = 8,
                                       .n_embd = 2048,
                                       .n_head = 16,
                                       .n_head_kv = 16,
                                       .n_ff = 5632,
                                       .n_vocab = 32000,
                                       .n_ctx = 32};
constexpr int64_t kTokens = 32;
constexpr int kMicroBatches = 4;

void BM_Llama8(benchmark::State& state) {
  const int mode = static_cast<int>(state.range(0));
  const int split = static_cast<int>(state.range(1));
  const bool steady = state.range(2) != 0;
  std::vector<std::unique_ptr<Backend>> owned;
  auto add = [&](absl::StatusOr<std::unique_ptr<Backend>> b) {
    FERRY_CHECK(b.ok());
    owned.push_back(std::move(*b));
  };
  llama::LlamaModelOptions options;
  if (mode == 0 || mode == 3) {
    add(GetCpuDevice().CreateBackend("threads=2"));
    // Mode 3: weights row-major, as a worker holds them (its buffers are
    // raw bytes the client writes; they are not packed into panels).
    if (mode == 3) {
      options.cpu_weights_type = GetCpuDevice().default_buffer_type();
    }
  } else {
    if (mode == 1) {
      add(GetCpuDevice().CreateBackend("threads=1"));
      add(GetCpuDevice().CreateBackend("threads=1"));
    } else {
      add(GetWorkers().devices[0]->CreateBackend("threads=1"));
      add(GetWorkers().devices[1]->CreateBackend("threads=1"));
    }
    add(GetCpuDevice().CreateBackend("threads=1"));  // The embedding.
    if (split == 0) {
      options.split = {1, 1, 0};
      options.split_unit = llama::SplitUnit::kWeightBytes;
    } else {
      for (int layer = 0; layer < kLlama.n_layer; ++layer) {
        options.layer_backends.push_back(layer < split ? 0 : 1);
      }
    }
  }
  std::vector<Backend*> backends;
  for (auto& b : owned) backends.push_back(b.get());
  auto start = absl::Now();
  auto model = llama::LlamaModel::Create(kLlama, backends, options);
  FERRY_CHECK(model.ok());
  FERRY_CHECK((*model)->FillRandom(1).ok());
  const double upload_s = absl::ToDoubleSeconds(absl::Now() - start);
  auto g = llama::BuildLlamaGraph(**model, {.n_tokens = kTokens});
  FERRY_CHECK(g.ok());
  auto sched = Scheduler::Create(backends, {.n_copies = 4});
  FERRY_CHECK(sched.ok());
  // Mode 1's stages are backends of one CPU: the pins say which holds
  // which layers (without them every layer ran on the first).
  for (const auto& [weight, b] : (*model)->WeightBackends()) {
    FERRY_CHECK((*sched)->SetTensorBackend(*weight, *backends[b]).ok());
  }
  FERRY_CHECK((*sched)->AllocGraph(g->graph).ok());
  Backend* out = (*sched)->GetTensorBackend(*g->logits);
  const size_t bytes = static_cast<size_t>(g->logits->NumBytes());
  BufferType* pinned = out->device().host_buffer_type();
  if (pinned == nullptr) pinned = GetCpuDevice().default_buffer_type();
  std::vector<std::unique_ptr<Buffer>> slots;
  std::vector<Event> slot_done(4);
  for (int i = 0; i < 4; ++i) {
    auto b = pinned->Allocate(bytes);
    FERRY_CHECK(b.ok());
    slots.push_back(std::move(*b));
  }
  std::vector<int32_t> tokens(kTokens);
  int k = 0;
  auto pass = [&] {
    for (int ub = 0; ub < kMicroBatches; ++ub, ++k) {
      for (int64_t i = 0; i < kTokens; ++i) {
        tokens[i] = static_cast<int32_t>((k * 131 + i * 17) % kLlama.n_vocab);
      }
      // The slot's previous logits must have landed before it is reused.
      FERRY_CHECK(slot_done[k % 4].WaitBlocking().ok());
      FERRY_CHECK(llama::SetLlamaInputs(*g, kLlama.n_vocab, tokens).ok());
      auto done = (*sched)->Submit(g->graph);
      FERRY_CHECK(done.ok());
      FERRY_CHECK(
          out->EnqueueGetTensor(*g->logits, slots[k % 4]->base(), 0, bytes)
              .ok());
      slot_done[k % 4] = out->Record();
    }
    if (!steady) FERRY_CHECK((*sched)->Synchronize().ok());
  };
  // Warm-up. Steady: its micro-batches still in flight when the clock
  // starts stand for the last pass's still in flight when it stops (the
  // slots keep that at 4 both times), so the timed work is what is counted.
  pass();
  // Compute time summed over the devices (workers report theirs), per
  // token: the same work on every mode, so a mode whose kernels run slower
  // shows it here whatever the overlap.
  auto busy_ns = [&] {
    int64_t total = 0;
    std::vector<const Device*> seen;
    for (Backend* b : backends) {
      if (std::find(seen.begin(), seen.end(), &b->device()) != seen.end()) {
        continue;
      }
      seen.push_back(&b->device());
      for (const DeviceCounters& e : b->device().engine_stats()) {
        total += e.busy_ns;
      }
    }
    return total;
  };
  const int64_t busy_before = busy_ns();
  for (auto _ : state) pass();
  FERRY_CHECK((*sched)->Synchronize().ok());
  state.counters["busy_us_per_token"] =
      static_cast<double>(busy_ns() - busy_before) / 1e3 /
      static_cast<double>(state.iterations() * kMicroBatches * kTokens);
  state.SetItemsProcessed(state.iterations() * kMicroBatches * kTokens);
  state.counters["upload_s"] = upload_s;
  if (mode == 1 || mode == 2) {
    // Activations from the first stage to the second, per micro-batch.
    state.counters["stage_copy_kib"] =
        static_cast<double>((*sched)->stats().copy_bytes[0][1]) / 1024;
  }
  state.SetLabel(mode == 0   ? "local cpu, 2 threads"
                 : mode == 1 ? "two stages in one process, 1 thread each"
                 : mode == 2 ? "two ferry workers, 1 thread each"
                             : "local cpu, 2 threads, row-major weights");
}
BENCHMARK(BM_Llama8)
    ->ArgNames({"mode", "split", "steady"})
    ->Args({0, 8, 0})
    ->Args({3, 8, 0})
    ->Args({1, 4, 0})
    ->Args({2, 4, 0})
    ->Args({1, 5, 0})
    ->Args({2, 5, 0})
    ->Args({1, 5, 1})
    ->Args({2, 5, 1})
    ->Args({1, 0, 1})
    ->Args({2, 0, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(3);

}  // namespace
}  // namespace ferry
