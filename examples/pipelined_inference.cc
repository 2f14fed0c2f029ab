// pipelined_inference: batched llama inference split across backends, with
// micro-batches pipelined through the scheduler so that one device computes
// while the next one's inputs are still being copied.
//
// With no flags it builds a small llama-style model with random weights,
// splits its layers over two simulated GPUs (sim0, sim1) and the CPU, runs
// the prompt micro-batches twice (one batch in flight, then --n_copies in
// flight), generates a few tokens with the KV cache, and prints throughput,
// latency, device utilisation and copy traffic. Try:
//
//   ./bazelw run -c opt //examples:pipelined_inference
//   ... -- --backends=sim0,sim1,sim2,sim3,cpu --trace=/tmp/run.json
//          --timeline=/tmp/run.svg
//   ... -- --write_weights=/tmp/llama.safetensors     (then --weights=...)
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "ferry/backends/backend.h"
#include "ferry/backends/buffer.h"
#include "ferry/backends/cpu/cpu_backend.h"
#include "ferry/backends/linked/linked_devices.h"
#include "ferry/backends/registry.h"
#include "ferry/backends/sim/sim_device.h"
#include "ferry/examples/llama_model.h"
#include "ferry/examples/safetensors.h"
#include "ferry/examples/timeline_svg.h"
#include "ferry/runtime/io_reactor.h"
#include "ferry/runtime/status_macros.h"
#include "ferry/runtime/thread_pool.h"
#include "ferry/runtime/trace.h"
#include "ferry/sched/scheduler.h"

ABSL_FLAG(std::string, backends, "sim0,sim1,cpu",
          "Backends in priority order, the CPU last: simN (simulated GPUs), "
          "cpu, or any registered device (e.g. cuda0).");
ABSL_FLAG(std::string, sim, "flops=10G,bw=20GB/s,h2d=2GB/s,d2h=2GB/s,d2d=4GB/s",
          "SimConfig for every simulated device (see backends/sim/"
          "sim_config.h).");
ABSL_FLAG(std::string, split, "",
          "Proportions of layers per backend, e.g. 1,1,0 (default: equal "
          "over the accelerators).");
ABSL_FLAG(int, cpu_threads, 0, "CPU backend threads (0: all cores).");
ABSL_FLAG(int, layers, 8, "Transformer layers.");
ABSL_FLAG(int64_t, embd, 256, "Embedding size.");
ABSL_FLAG(int64_t, heads, 8, "Attention heads.");
ABSL_FLAG(int64_t, kv_heads, 4, "KV heads (grouped-query attention).");
ABSL_FLAG(int64_t, ff, 704, "FFN hidden size.");
ABSL_FLAG(int64_t, vocab, 4096, "Vocabulary size.");
ABSL_FLAG(int64_t, ctx, 256, "Context length (KV cache rows).");
ABSL_FLAG(int64_t, prompt_tokens, 512,
          "Prompt tokens per batch; split into micro-batches of --ubatch.");
ABSL_FLAG(int64_t, ubatch, 32, "Tokens per micro-batch.");
ABSL_FLAG(int, batches, 4, "Batches of --prompt_tokens to process.");
ABSL_FLAG(int, n_copies, 4, "Micro-batches in flight when pipelined.");
ABSL_FLAG(int, gen_tokens, 16,
          "Tokens to generate after the first micro-batch (KV cache).");
ABSL_FLAG(uint64_t, seed, 42, "Seed of the random weights and prompts.");
ABSL_FLAG(std::string, weights, "",
          "Load weights (and the config) from this safetensors file.");
ABSL_FLAG(std::string, write_weights, "",
          "Write random weights for the config to this safetensors file and "
          "exit.");
ABSL_FLAG(std::string, trace, "",
          "Write a Chrome trace (Perfetto) of the pipelined run here.");
ABSL_FLAG(std::string, timeline, "",
          "Write an SVG timeline of the pipelined run here.");

namespace ferry::examples {
namespace {

struct Backends {
  std::vector<std::unique_ptr<Backend>> owned;
  std::vector<Backend*> list;
  std::vector<SimDevice*> sims;  // Per backend, null if not simulated.
};

absl::StatusOr<Backends> MakeBackends(const std::string& spec,
                                      const std::string& sim_options) {
  FERRY_RETURN_IF_ERROR(RegisterLinkedDevices(Registry::Global()));
  CreateBackendsOptions options;
  options.family_options["sim"] = sim_options;
  if (const int threads = absl::GetFlag(FLAGS_cpu_threads); threads > 0) {
    options.backend_params["cpu"] = absl::StrCat("threads=", threads);
  }
  FERRY_ASSIGN_OR_RETURN(BackendList list,
                         Registry::Global().CreateBackends(spec, options));
  if (list.backends.back()->device().type() != DeviceType::kCpu) {
    return absl::InvalidArgumentError(
        absl::StrCat("--backends='", spec, "' must end with cpu"));
  }
  Backends out;
  for (Backend* backend : list.backends) {
    out.list.push_back(backend);
    out.sims.push_back(dynamic_cast<SimDevice*>(&backend->device()));
  }
  out.owned = std::move(list.owned);
  return out;
}

std::string Percent(double x) { return absl::StrFormat("%5.1f%%", 100 * x); }

std::string Bytes(double b) {
  if (b >= (1 << 20)) return absl::StrFormat("%.1f MiB", b / (1 << 20));
  if (b >= 1024) return absl::StrFormat("%.1f KiB", b / 1024);
  return absl::StrFormat("%.0f B", b);
}

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i =
      static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

// A progress bar on stderr, drawn only on a terminal.
class Progress {
 public:
  Progress(std::string label, int64_t total)
      : label_(std::move(label)),
        total_(total),
        on_(::isatty(2) && total >= 8) {}
  void Update(int64_t done) {
    if (!on_) return;
    const int width = 30;
    const int fill =
        static_cast<int>(width * done / std::max<int64_t>(1, total_));
    std::fprintf(stderr, "\r  %-12s [%s%s] %lld/%lld", label_.c_str(),
                 std::string(fill, '#').c_str(),
                 std::string(width - fill, '.').c_str(),
                 static_cast<long long>(done), static_cast<long long>(total_));
    if (done == total_) std::fprintf(stderr, "\r%*s\r", 70, "");
    std::fflush(stderr);
  }

 private:
  std::string label_;
  int64_t total_;
  bool on_;
};

// Waits for batch events in order on its own thread and records when each
// completed, so the submitting thread never blocks on them.
class CompletionWatcher {
 public:
  CompletionWatcher() : thread_([this] { Loop(); }) {}
  ~CompletionWatcher() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void Add(Event event, std::chrono::steady_clock::time_point submitted) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back({std::move(event), submitted});
    }
    cv_.notify_all();
  }
  // Blocks until every added event completed; returns latencies (seconds)
  // or the first error.
  absl::StatusOr<std::vector<double>> Finish() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
    if (!status_.ok()) return status_;
    return latencies_;
  }
  int64_t completed() const { return completed_.load(); }

 private:
  struct Item {
    Event event;
    std::chrono::steady_clock::time_point submitted;
  };
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      Item item = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
      lock.unlock();
      absl::Status s = item.event.WaitBlocking();
      const double latency =
          std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                        item.submitted)
              .count();
      lock.lock();
      if (!s.ok() && status_.ok()) status_ = s;
      latencies_.push_back(latency);
      completed_.fetch_add(1);
      busy_ = false;
      cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  bool stop_ = false;
  bool busy_ = false;
  absl::Status status_;
  std::vector<double> latencies_;
  std::atomic<int64_t> completed_{0};
  std::thread thread_;
};

struct EngineUse {
  std::string name;  // "sim0/compute"
  double busy = 0;   // Fraction of the run's modelled time.
  int64_t bytes = 0;
  int64_t slip_ns = 0;  // Host work beyond the model (see SimEngineStats).
};

struct RunResult {
  int n_copies = 0;
  double wall_s = 0;
  double model_s = 0;  // Modelled time on the sim clock (0: no sims).
  std::vector<double> latencies;
  std::vector<EngineUse> engines;
  int64_t copy_bytes = 0;  // Scheduler split-input copies, all batches.
  int64_t copies = 0;
  int num_splits = 0;
  std::string splits;
  std::vector<float> first_logits;  // Of micro-batch 0, for a check.
};

// The prompt tokens of micro-batch `k`.
std::vector<int32_t> PromptTokens(int64_t k, int64_t n, int64_t n_vocab,
                                  uint64_t seed) {
  std::vector<int32_t> out(static_cast<size_t>(n));
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(k) + 1;
  for (auto& t : out) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    t = static_cast<int32_t>(x % static_cast<uint64_t>(n_vocab));
  }
  return out;
}

// Processes `n_micro` prompt micro-batches with `n_copies` in flight.
absl::StatusOr<RunResult> RunPrefill(const LlamaModel& model,
                                     const Backends& backends, int n_copies,
                                     int64_t n_micro, bool trace) {
  const LlamaConfig& c = model.config();
  const int64_t ub = absl::GetFlag(FLAGS_ubatch);
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  FERRY_ASSIGN_OR_RETURN(
      auto sched, Scheduler::Create(backends.list, {.n_copies = n_copies}));
  // Each micro-batch is an independent prompt chunk (a request of `ub`
  // tokens); the KV cache is not written here (see the generation phase).
  FERRY_ASSIGN_OR_RETURN(LlamaGraph g,
                         BuildLlamaGraph(model, {.n_tokens = ub}));
  FERRY_RETURN_IF_ERROR(sched->AllocGraph(g.graph));
  RunResult r;
  r.n_copies = sched->n_copies();
  r.num_splits = sched->num_splits();
  r.splits = sched->DescribeSplits();
  for (const auto& row : sched->stats().copy_bytes) {
    for (int64_t b : row) r.copy_bytes += b;
  }
  for (const auto& row : sched->stats().copies) {
    for (int64_t n : row) r.copies += n;
  }
  r.copy_bytes *= n_micro;
  r.copies *= n_micro;
  Backend* out_backend = sched->GetTensorBackend(*g.logits);
  if (out_backend == nullptr) return absl::InternalError("logits unassigned");
  const size_t logits_bytes = static_cast<size_t>(g.logits->NumBytes());
  // Micro-batch 0's logits are kept; later ones rotate through n_copies + 1
  // host buffers (a buffer is rewritten only after its batch completed).
  // Pinned memory where the device offers it: a download into pageable
  // memory is synchronous (as cudaMemcpyAsync's is), which would make every
  // Submit wait for the previous batch and defeat the pipeline.
  std::vector<std::unique_ptr<Buffer>> pinned;
  std::vector<float*> host;
  std::vector<std::vector<float>> pageable;
  BufferType* pinned_type = out_backend->device().host_buffer_type();
  for (int i = 0; i < r.n_copies + 2; ++i) {
    if (pinned_type != nullptr) {
      FERRY_ASSIGN_OR_RETURN(pinned.emplace_back(),
                             pinned_type->Allocate(logits_bytes));
      host.push_back(static_cast<float*>(pinned.back()->base()));
    } else {
      pageable.emplace_back(logits_bytes / sizeof(float));
      host.push_back(pageable.back().data());
    }
  }

  // Warm-up (first-touch of buffers, kernel scratch).
  FERRY_RETURN_IF_ERROR(
      SetLlamaInputs(g, c.n_vocab, PromptTokens(0, ub, c.n_vocab, seed)));
  FERRY_RETURN_IF_ERROR(sched->Compute(g.graph));

  for (SimDevice* sim : backends.sims) {
    if (sim != nullptr) sim->ResetStats();
  }
  SimDevice* clock = nullptr;
  for (SimDevice* sim : backends.sims) clock = clock ? clock : sim;
  // Only the pipelined run is traced (after the weights' load, if any).
  TraceRecorder::Global().SetEnabled(trace);
  const int64_t model_t0 = clock ? clock->ModelNowNanos() : 0;
  const auto t0 = std::chrono::steady_clock::now();
  Progress progress(absl::StrCat("n_copies=", r.n_copies), n_micro);
  {
    CompletionWatcher watcher;
    Event previous;
    for (int64_t k = 0; k < n_micro; ++k) {
      // With one copy slot the scheduler reads inputs that live on their own
      // backend (the token ids on the CPU) in place when the batch runs:
      // the previous batch must be done before they are rewritten.
      if (r.n_copies == 1 && k > 0)
        FERRY_RETURN_IF_ERROR(previous.WaitBlocking());
      FERRY_RETURN_IF_ERROR(
          SetLlamaInputs(g, c.n_vocab, PromptTokens(k, ub, c.n_vocab, seed)));
      FERRY_ASSIGN_OR_RETURN(Event done, sched->Submit(g.graph));
      // Latency counts from when the batch was accepted (Submit waits for a
      // free copy slot first).
      const auto submitted = std::chrono::steady_clock::now();
      float* dst = host[k == 0 ? 0 : 1 + (k - 1) % (host.size() - 1)];
      FERRY_RETURN_IF_ERROR(
          out_backend->EnqueueGetTensor(*g.logits, dst, 0, logits_bytes));
      previous = done;
      watcher.Add(done, submitted);
      progress.Update(watcher.completed());
    }
    FERRY_ASSIGN_OR_RETURN(r.latencies, watcher.Finish());
    FERRY_RETURN_IF_ERROR(sched->Synchronize());
    progress.Update(n_micro);
  }
  r.wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  if (trace) TraceRecorder::Global().SetEnabled(false);
  r.first_logits.assign(host[0], host[0] + logits_bytes / sizeof(float));
  if (clock != nullptr) {
    int64_t end = model_t0;
    for (SimDevice* sim : backends.sims) {
      if (sim == nullptr) continue;
      for (int e = 0; e < kNumSimEngines; ++e) {
        end = std::max(end, sim->stats(static_cast<SimEngineKind>(e)).clock_ns);
      }
    }
    r.model_s = static_cast<double>(end - model_t0) / 1e9;
    for (SimDevice* sim : backends.sims) {
      if (sim == nullptr) continue;
      for (int e = 0; e < kNumSimEngines; ++e) {
        const auto kind = static_cast<SimEngineKind>(e);
        const SimEngineStats s = sim->stats(kind);
        r.engines.push_back(
            {absl::StrCat(sim->name(), "/", SimEngineKindName(kind)),
             r.model_s > 0 ? static_cast<double>(s.busy_ns) / 1e9 / r.model_s
                           : 0,
             kind == SimEngineKind::kCompute ? 0 : s.bytes, s.slip_ns});
      }
    }
  }
  return r;
}

struct GenResult {
  int64_t prompt = 0;
  double prefill_s = 0;
  std::vector<int32_t> tokens;
  double gen_s = 0;
};

// One sequence: prefill of `ubatch` tokens into the KV cache, then greedy
// generation one token at a time over the cache.
absl::StatusOr<GenResult> RunGeneration(LlamaModel& model,
                                        const Backends& backends) {
  const LlamaConfig& c = model.config();
  const int64_t n_prompt = std::min(absl::GetFlag(FLAGS_ubatch), c.n_ctx - 1);
  const int n_gen = static_cast<int>(
      std::min<int64_t>(absl::GetFlag(FLAGS_gen_tokens), c.n_ctx - n_prompt));
  GenResult r;
  r.prompt = n_prompt;
  if (n_gen <= 0 || n_prompt <= 0) return r;
  FERRY_RETURN_IF_ERROR(model.ClearKvCache());
  FERRY_ASSIGN_OR_RETURN(auto sched,
                         Scheduler::Create(backends.list, {.n_copies = 1}));
  std::vector<int32_t> next =
      PromptTokens(-1, n_prompt, c.n_vocab, absl::GetFlag(FLAGS_seed));
  int64_t n_past = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (int step = 0; step <= n_gen; ++step) {
    const int64_t nt = static_cast<int64_t>(next.size());
    FERRY_ASSIGN_OR_RETURN(LlamaGraph g,
                           BuildLlamaGraph(model, {.n_tokens = nt,
                                                   .n_past = n_past,
                                                   .use_kv_cache = true,
                                                   .last_token_only = true}));
    FERRY_RETURN_IF_ERROR(sched->AllocGraph(g.graph));
    FERRY_RETURN_IF_ERROR(SetLlamaInputs(g, c.n_vocab, next));
    FERRY_RETURN_IF_ERROR(sched->Compute(g.graph));
    std::vector<float> logits(static_cast<size_t>(c.n_vocab));
    FERRY_RETURN_IF_ERROR(GetTensorData(*g.logits, logits.data()));
    n_past += nt;
    next = Argmax(logits, c.n_vocab);
    r.tokens.push_back(next[0]);
    if (step == 0) {
      r.prefill_s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
              .count();
      t0 = std::chrono::steady_clock::now();
    }
  }
  r.gen_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
                .count();
  return r;
}

absl::StatusOr<std::vector<double>> ParseSplit(const std::string& text) {
  std::vector<double> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    double v = 0;
    if (!absl::SimpleAtod(part, &v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--split: '", part, "' is not a number"));
    }
    out.push_back(v);
  }
  return out;
}

void PrintRun(const RunResult& r, int64_t tokens) {
  const double p50 = Quantile(r.latencies, 0.5) * 1e3;
  const double p99 = Quantile(r.latencies, 0.99) * 1e3;
  std::printf("  n_copies=%d: %8.0f tok/s wall", r.n_copies,
              static_cast<double>(tokens) / r.wall_s);
  if (r.model_s > 0) {
    std::printf(", %8.0f tok/s modelled",
                static_cast<double>(tokens) / r.model_s);
  }
  std::printf("  | micro-batch latency p50 %.2f ms, p99 %.2f ms\n", p50, p99);
}

absl::Status Run() {
  LlamaConfig config;
  config.n_layer = absl::GetFlag(FLAGS_layers);
  config.n_embd = absl::GetFlag(FLAGS_embd);
  config.n_head = absl::GetFlag(FLAGS_heads);
  config.n_head_kv = absl::GetFlag(FLAGS_kv_heads);
  config.n_ff = absl::GetFlag(FLAGS_ff);
  config.n_vocab = absl::GetFlag(FLAGS_vocab);
  config.n_ctx = absl::GetFlag(FLAGS_ctx);
  const uint64_t seed = absl::GetFlag(FLAGS_seed);

  if (const std::string path = absl::GetFlag(FLAGS_write_weights);
      !path.empty()) {
    FERRY_RETURN_IF_ERROR(WriteRandomWeights(path, config, seed));
    std::printf("wrote %s: %s\n", path.c_str(), config.ToString().c_str());
    return absl::OkStatus();
  }
  const int64_t ub = absl::GetFlag(FLAGS_ubatch);
  const int n_copies = absl::GetFlag(FLAGS_n_copies);
  if (ub < 1) return absl::InvalidArgumentError("--ubatch must be >= 1");
  if (n_copies < 1)
    return absl::InvalidArgumentError("--n_copies must be >= 1");
  const int64_t per_batch =
      std::max<int64_t>(1, absl::GetFlag(FLAGS_prompt_tokens) / ub);
  const int64_t n_micro = per_batch * std::max(1, absl::GetFlag(FLAGS_batches));

  FERRY_ASSIGN_OR_RETURN(
      Backends backends,
      MakeBackends(absl::GetFlag(FLAGS_backends), absl::GetFlag(FLAGS_sim)));
  LlamaModelOptions options;
  FERRY_ASSIGN_OR_RETURN(options.split, ParseSplit(absl::GetFlag(FLAGS_split)));

  const bool trace = !absl::GetFlag(FLAGS_trace).empty() ||
                     !absl::GetFlag(FLAGS_timeline).empty();
  std::unique_ptr<LlamaModel> model;
  ThreadPool pool(2);
  if (const std::string path = absl::GetFlag(FLAGS_weights); !path.empty()) {
    FERRY_ASSIGN_OR_RETURN(auto io, IoReactor::Create(&pool));
    LoadStats load;
    LoadOptions load_options;
    for (SimDevice* sim : backends.sims) {
      if (sim != nullptr && !load_options.now) {
        load_options.now = [sim] { return sim->ModelNowNanos(); };
      }
    }
    TraceRecorder::Global().SetEnabled(trace);
    FERRY_ASSIGN_OR_RETURN(model, LoadLlamaModel(path, backends.list, options,
                                                 *io, &load, load_options));
    TraceRecorder::Global().SetEnabled(false);
    std::printf("loaded %s with %s: %s in %.3f s (%s through pinned staging)\n",
                path.c_str(), std::string(io->name()).c_str(),
                Bytes(static_cast<double>(load.bytes)).c_str(), load.seconds,
                Bytes(static_cast<double>(load.staged_bytes)).c_str());
  } else {
    FERRY_ASSIGN_OR_RETURN(model,
                           LlamaModel::Create(config, backends.list, options));
    FERRY_RETURN_IF_ERROR(model->FillRandom(seed));
  }
  const LlamaConfig& c = model->config();
  std::printf("ferry pipelined inference: llama %s\n", c.ToString().c_str());
  std::printf("backends: %s", absl::GetFlag(FLAGS_backends).c_str());
  if (std::any_of(backends.sims.begin(), backends.sims.end(),
                  [](SimDevice* s) { return s != nullptr; })) {
    std::printf("  (sim: %s)", absl::GetFlag(FLAGS_sim).c_str());
  }
  std::printf("\nplacement:\n%s", model->DescribePlacement().c_str());
  std::printf("prefill: %lld micro-batches of %lld tokens (%lld tokens)\n",
              static_cast<long long>(n_micro), static_cast<long long>(ub),
              static_cast<long long>(n_micro * ub));

  FERRY_ASSIGN_OR_RETURN(RunResult serial,
                         RunPrefill(*model, backends, 1, n_micro, false));
  FERRY_ASSIGN_OR_RETURN(
      RunResult piped, RunPrefill(*model, backends, n_copies, n_micro, trace));
  std::printf(
      "schedule: %d splits, %lld copies/micro-batch, %s copied in all\n",
      piped.num_splits, static_cast<long long>(piped.copies / n_micro),
      Bytes(static_cast<double>(piped.copy_bytes)).c_str());
  std::printf("%s", piped.splits.c_str());
  std::printf("prefill throughput:\n");
  const int64_t tokens = n_micro * ub;
  PrintRun(serial, tokens);
  PrintRun(piped, tokens);
  std::printf("  pipelining speedup: %.2fx wall", serial.wall_s / piped.wall_s);
  if (piped.model_s > 0) {
    std::printf(", %.2fx modelled", serial.model_s / piped.model_s);
  }
  std::printf("\n");
  float max_diff = 0;
  for (size_t i = 0; i < serial.first_logits.size(); ++i) {
    max_diff = std::max(
        max_diff, std::abs(serial.first_logits[i] - piped.first_logits[i]));
  }
  std::printf("  logits of micro-batch 0, pipelined vs not: max |diff| %g\n",
              max_diff);
  if (!piped.engines.empty()) {
    std::printf("engine busy (pipelined run, share of %.2f ms modelled):\n",
                piped.model_s * 1e3);
    double busy_sum = 0;
    for (const EngineUse& e : piped.engines) {
      busy_sum += e.busy;
      if (e.busy == 0 && e.bytes == 0) continue;
      std::printf("  %-14s %s", e.name.c_str(), Percent(e.busy).c_str());
      if (e.bytes > 0) {
        std::printf("  %s", Bytes(static_cast<double>(e.bytes)).c_str());
      }
      if (e.slip_ns > piped.model_s * 1e9 / 20) {
        std::printf(
            "  (host lagged the model by %.1f ms: slow host; raise "
            "scale= in --sim)",
            static_cast<double>(e.slip_ns) / 1e6);
      }
      std::printf("\n");
    }
    double serial_sum = 0;
    for (const EngineUse& e : serial.engines) serial_sum += e.busy;
    std::printf(
        "  overlap: %.2f engines busy on average (%.2f without pipelining)\n",
        busy_sum, serial_sum);
  }

  FERRY_ASSIGN_OR_RETURN(GenResult gen, RunGeneration(*model, backends));
  if (!gen.tokens.empty()) {
    std::printf(
        "generation (KV cache): prompt %lld tokens in %.1f ms, then %zu "
        "steps at %.1f tok/s; greedy tokens: %s\n",
        static_cast<long long>(gen.prompt), gen.prefill_s * 1e3,
        gen.tokens.size() - 1,
        static_cast<double>(gen.tokens.size() - 1) / gen.gen_s,
        absl::StrJoin(gen.tokens, " ").c_str());
  }
  if (const std::string path = absl::GetFlag(FLAGS_trace); !path.empty()) {
    FERRY_RETURN_IF_ERROR(TraceRecorder::Global().WriteChromeTrace(path));
    std::printf("trace: %s (open in https://ui.perfetto.dev)\n", path.c_str());
  }
  if (const std::string path = absl::GetFlag(FLAGS_timeline); !path.empty()) {
    FERRY_RETURN_IF_ERROR(WriteTimelineSvg(path));
    std::printf("timeline: %s\n", path.c_str());
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace ferry::examples

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Runs a llama-style model split over simulated devices and the CPU, "
      "one micro-batch at a time and pipelined, and reports throughput, "
      "latency and overlap. With no flags it runs in a few seconds.");
  absl::ParseCommandLine(argc, argv);
  const absl::Status status = ferry::examples::Run();
  if (!status.ok()) {
    std::fprintf(stderr, "pipelined_inference: %s\n",
                 status.ToString().c_str());
    return 1;
  }
  return 0;
}
