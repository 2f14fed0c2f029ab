// pipelined_inference: batch inference with the engine (engine/engine.h):
// many requests at once on a llama model whose layers are split over
// devices, micro-batches pipelined across them during prefill and decode,
// continuous batching.
//
// With no flags it makes a small model with random weights, splits its
// layers over two simulated GPUs (sim0, sim1) and the CPU, runs a workload
// of requests with mixed prompt and output lengths twice (one micro-batch in
// flight, then --n_copies in flight) and reports throughput, time to first
// token, inter-token latency, each engine's busy share, bytes copied and
// overlap side by side. Try:
//
//   ./bazelw run //examples:pipelined_inference
//   ... -- --workload=decode             (64 sequences decoding at once)
//   ... -- --compare_static              (also static batches)
//   ... -- --prompts=in.jsonl --output=out.jsonl --dump_logits=l.npy
//   ... -- --trace=/tmp/run.json --timeline=/tmp/run.svg
//   ... -- --write_weights=/tmp/llama.safetensors   (then --weights=...)
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "ferry/backends/backend.h"
#include "ferry/backends/linked/linked_devices.h"
#include "ferry/backends/registry.h"
#include "ferry/engine/auto_options.h"
#include "ferry/engine/engine.h"
#include "ferry/examples/npy.h"
#include "ferry/examples/safetensors.h"
#include "ferry/examples/timeline_svg.h"
#include "ferry/examples/workload.h"
#include "ferry/models/gguf/gguf_file.h"
#include "ferry/models/llama/llama_gguf.h"
#include "ferry/models/llama/llama_hf.h"
#include "ferry/models/llama/llama_model.h"
#include "ferry/runtime/io_reactor.h"
#include "ferry/runtime/status_macros.h"
#include "ferry/runtime/sync_wait.h"
#include "ferry/runtime/task.h"
#include "ferry/runtime/thread_pool.h"
#include "ferry/runtime/trace.h"
#include "ferry/runtime/when_all.h"
#include "ferry/tokenizer/gguf_tokenizer.h"
#include "ferry/tokenizer/hf_tokenizer_json.h"
#include "ferry/tokenizer/stream_decoder.h"
#include "ferry/tokenizer/tokenizer.h"

ABSL_FLAG(std::string, backends, "sim0,sim1,cpu",
          "Backends in priority order, the CPU last: simN (simulated GPUs), "
          "cpu, or any registered device (e.g. cuda0).");
ABSL_FLAG(std::string, sim, "flops=10G,bw=20GB/s,h2d=2GB/s,d2h=2GB/s,d2d=4GB/s",
          "SimConfig for every simulated device (see backends/sim/"
          "sim_config.h).");
ABSL_FLAG(std::string, split, "",
          "Proportions of layers per backend, e.g. 1,1,0 (default: equal "
          "over the accelerators).");
ABSL_FLAG(std::string, split_by, "layers",
          "What --split's proportions count: layers (whole layers per "
          "backend, as llama.cpp) or weights (weight bytes, a cut may fall "
          "inside a layer: stages balance when the layers do not divide "
          "evenly).");
ABSL_FLAG(int, cpu_threads, 0, "CPU backend threads (0: all cores).");
ABSL_FLAG(int, layers, 8, "Transformer layers (random weights).");
ABSL_FLAG(int64_t, embd, 256, "Embedding size.");
ABSL_FLAG(int64_t, heads, 8, "Attention heads.");
ABSL_FLAG(int64_t, kv_heads, 4, "KV heads (grouped-query attention).");
ABSL_FLAG(int64_t, ff, 704, "FFN hidden size.");
ABSL_FLAG(int64_t, vocab, 4096, "Vocabulary size.");
ABSL_FLAG(int64_t, ctx, 1024, "The model's context length.");
ABSL_FLAG(uint64_t, seed, 42, "Seed of the random weights and workload.");
ABSL_FLAG(std::string, weights, "",
          "Load weights (and the config) from this safetensors file.");
ABSL_FLAG(std::string, model, "",
          "Load a llama GGUF file (e.g. SmolLM2 from tools/fetch_smollm2.sh) "
          "or a Hugging Face directory (config.json, model.safetensors or "
          "its sharded index, tokenizer.json; tools/make_smollm2_hf.sh makes "
          "one): its config, weights (a GGUF's kept quantized where the "
          "device computes on them, else f32) and tokenizer. "
          "Prompts may then be text (--prompt, or \"text\" in --prompts).");
ABSL_FLAG(std::string, prompt, "",
          "One prompt as text (needs --model); the answer is printed as "
          "text.");
ABSL_FLAG(bool, chat, true,
          "Wrap --prompt in the model's chat template (ChatML, the only one "
          "supported; SmolLM2's) when its GGUF has one.");
ABSL_FLAG(std::string, write_weights, "",
          "Write random weights for the config to this safetensors file and "
          "exit.");
ABSL_FLAG(std::string, prompts, "",
          "JSON lines of requests: {\"id\", \"tokens\", \"max_new_tokens\", "
          "\"stop\", \"temperature\", \"top_k\", \"top_p\", \"seed\", "
          "\"logits_positions\"}. Default: a synthetic --workload.");
ABSL_FLAG(std::string, workload, "mixed",
          "Synthetic requests: 'mixed' (--requests with prompts of 8 to "
          "--prompt_tokens tokens and 4 to --gen_tokens new tokens) or "
          "'decode' (--requests sequences of 4-token prompts generating "
          "--gen_tokens each).");
ABSL_FLAG(int, requests, 32, "Synthetic requests.");
ABSL_FLAG(int64_t, prompt_tokens, 48, "Longest synthetic prompt.");
ABSL_FLAG(int, gen_tokens, 24, "Most new tokens per synthetic request.");
ABSL_FLAG(std::string, output, "",
          "Write results as JSON lines here (default: stdout when --prompts "
          "is given; the report then goes to stderr).");
ABSL_FLAG(std::string, dump_logits, "",
          "Write the logits of the requests' logits_positions here (.npy, "
          "float32 [rows, vocab]; results name each position's row).");
ABSL_FLAG(int, n_copies, 0,
          "Micro-batches in flight when pipelined (0: one per pipeline stage "
          "plus one).");
ABSL_FLAG(int, max_sequences, 0,
          "Sequences active at once (KV slots); 0: as many as requests, at "
          "most 64.");
ABSL_FLAG(int64_t, max_seq_len, 0,
          "KV cells per sequence; 0: the longest request's prompt + new "
          "tokens.");
ABSL_FLAG(int64_t, batch_tokens, 0,
          "Most tokens per micro-batch (each runs on the smallest power of two "
          "that holds its tokens); 0: picked for the model and requests "
          "(engine/auto_options.h).");
ABSL_FLAG(int64_t, kv_window, 0,
          "Cache cells one micro-batch attends over, at least a slot; 0: "
          "picked for the model and requests.");
ABSL_FLAG(bool, window_buckets, true,
          "Run each micro-batch on the smallest window (powers of two from 64 "
          "up to --kv_window) that holds its sequences' contexts.");
ABSL_FLAG(bool, compare, false,
          "Also run with one micro-batch in flight and compare (always done "
          "for a synthetic workload).");
ABSL_FLAG(bool, compare_static, false,
          "Also run static batches (a batch admitted only when the previous "
          "one finished), pipelined, for comparison.");
ABSL_FLAG(std::string, trace, "",
          "Write a Chrome trace (Perfetto) of the pipelined run here.");
ABSL_FLAG(std::string, timeline, "",
          "Write an SVG timeline of the pipelined run here.");

namespace ferry::examples {
namespace {

absl::Status Invalid(absl::string_view flag, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", why));
}

// Every numeric flag in range, before anything is made.
absl::Status ValidateFlags() {
  auto at_least = [](absl::string_view flag, int64_t value,
                     int64_t min) -> absl::Status {
    if (value < min) {
      return Invalid(flag, absl::StrCat(value, " must be >= ", min));
    }
    return absl::OkStatus();
  };
  for (absl::Status s : {
           at_least("cpu_threads", absl::GetFlag(FLAGS_cpu_threads), 0),
           at_least("layers", absl::GetFlag(FLAGS_layers), 1),
           at_least("requests", absl::GetFlag(FLAGS_requests), 1),
           at_least("prompt_tokens", absl::GetFlag(FLAGS_prompt_tokens), 1),
           at_least("gen_tokens", absl::GetFlag(FLAGS_gen_tokens), 1),
           at_least("n_copies", absl::GetFlag(FLAGS_n_copies), 0),
           at_least("max_sequences", absl::GetFlag(FLAGS_max_sequences), 0),
           at_least("max_seq_len", absl::GetFlag(FLAGS_max_seq_len), 0),
           at_least("batch_tokens", absl::GetFlag(FLAGS_batch_tokens), 0),
           at_least("kv_window", absl::GetFlag(FLAGS_kv_window), 0),
       }) {
    if (!s.ok()) return s;
  }
  if (absl::GetFlag(FLAGS_cpu_threads) > 1024) {
    return Invalid("cpu_threads", "at most 1024");
  }
  if (absl::GetFlag(FLAGS_n_copies) > 64) {
    return Invalid("n_copies", "at most 64");
  }
  if (absl::GetFlag(FLAGS_requests) > 100000) {
    return Invalid("requests", "at most 100000");
  }
  const std::string w = absl::GetFlag(FLAGS_workload);
  if (w != "mixed" && w != "decode") {
    return Invalid("workload",
                   absl::StrCat("'", w, "' is not 'mixed' or 'decode'"));
  }
  return absl::OkStatus();
}

// Fails now, not after the run, when an output file cannot be written
// (missing directory, no permission). Leaves an empty file.
absl::Status CheckWritable(absl::string_view flag, const std::string& path) {
  if (path.empty()) return absl::OkStatus();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_NONBLOCK, 0644);
  if (fd < 0) {
    const int err = errno;
    std::string why = std::strerror(err);
    if (err == ENOENT) {
      const size_t slash = path.rfind('/');
      why =
          absl::StrCat("directory '",
                       slash == std::string::npos ? "." : path.substr(0, slash),
                       "' does not exist");
    }
    return absl::Status(
        err == ENOENT ? absl::StatusCode::kNotFound
                      : absl::StatusCode::kPermissionDenied,
        absl::StrCat("--", flag, "=", path, ": cannot write: ", why));
  }
  ::close(fd);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<double>> ParseSplit(const std::string& text) {
  std::vector<double> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    double v = 0;
    if (!absl::SimpleAtod(part, &v) || !std::isfinite(v) || v < 0) {
      return Invalid("split",
                     absl::StrCat("'", part, "' is not a finite number >= 0"));
    }
    out.push_back(v);
  }
  return out;
}

struct Backends {
  std::vector<std::unique_ptr<Backend>> owned;
  std::vector<Backend*> list;
  // A device whose clock is modelled (a sim): the run is timed on it.
  const Device* modelled = nullptr;
};

absl::StatusOr<Backends> MakeBackends() {
  const std::string spec = absl::GetFlag(FLAGS_backends);
  FERRY_RETURN_IF_ERROR(RegisterLinkedDevices(Registry::Global()));
  CreateBackendsOptions options;
  options.family_options["sim"] = absl::GetFlag(FLAGS_sim);
  if (const int threads = absl::GetFlag(FLAGS_cpu_threads); threads > 0) {
    options.backend_params["cpu"] = absl::StrCat("threads=", threads);
  }
  absl::StatusOr<BackendList> list =
      Registry::Global().CreateBackends(spec, options);
  if (!list.ok()) {
    return absl::Status(list.status().code(),
                        absl::StrCat("--backends: ", list.status().message()));
  }
  if (list->backends.back()->device().type() != DeviceType::kCpu) {
    return Invalid("backends", absl::StrCat("'", spec, "' must end with cpu"));
  }
  Backends out;
  for (Backend* backend : list->backends) {
    out.list.push_back(backend);
    if (out.modelled == nullptr && backend->device().props().modelled_clock) {
      out.modelled = &backend->device();
    }
  }
  out.owned = std::move(list->owned);
  return out;
}

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto i =
      static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

std::string Bytes(double b) {
  if (b >= (1 << 20)) return absl::StrFormat("%.1f MiB", b / (1 << 20));
  if (b >= 1024) return absl::StrFormat("%.1f KiB", b / 1024);
  return absl::StrFormat("%.0f B", b);
}

// A progress bar on stderr, drawn on a terminal once a run has lasted two
// seconds.
class Progress {
 public:
  Progress(std::string label, int64_t total)
      : label_(std::move(label)), total_(total), thread_([this] { Loop(); }) {}
  ~Progress() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    if (drawn_) std::fprintf(stderr, "\r%*s\r", 78, "");
  }
  void Add(int64_t n) { done_ += n; }

 private:
  void Loop() {
    if (!::isatty(2)) return;
    const auto start = std::chrono::steady_clock::now();
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, std::chrono::milliseconds(200),
                         [&] { return stop_; })) {
      if (std::chrono::steady_clock::now() - start < std::chrono::seconds(2)) {
        continue;
      }
      const int64_t done = done_.load();
      const int width = 30;
      const int fill =
          static_cast<int>(width * done / std::max<int64_t>(1, total_));
      std::fprintf(stderr, "\r  %-18s [%s%s] %lld/%lld tokens", label_.c_str(),
                   std::string(fill, '#').c_str(),
                   std::string(width - fill, '.').c_str(),
                   static_cast<long long>(done),
                   static_cast<long long>(total_));
      std::fflush(stderr);
      drawn_ = true;
    }
  }

  std::string label_;
  int64_t total_;
  std::atomic<int64_t> done_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool drawn_ = false;
  std::thread thread_;
};

struct RunConfig {
  std::string label;
  int n_copies = 1;
  bool static_batching = false;
  bool trace = false;
};

struct RunResult {
  RunConfig config;
  std::vector<engine::Result> results;
  double seconds = 0;  // On the engine's clock (modelled with sims).
  double wall_seconds = 0;
  int64_t generated = 0, prompt = 0;
  std::vector<double> ttft_ms, itl_ms;
  std::vector<std::pair<std::string, double>> busy;  // Engine, share.
  double slowest_compute_ns = 0;  // Busiest accelerator compute engine.
  int64_t bytes_copied = 0;
  engine::EngineStats stats;
  int64_t non_finite = 0;
  int64_t window = 0;
};

// Each device of the backends once.
std::vector<Device*> Devices(const Backends& b) {
  std::vector<Device*> out;
  for (Backend* backend : b.list) {
    Device* d = &backend->device();
    if (std::find(out.begin(), out.end(), d) == out.end()) out.push_back(d);
  }
  return out;
}

std::vector<DeviceCounters> AllEngineStats(const Backends& b) {
  std::vector<DeviceCounters> out;
  for (const Device* d : Devices(b)) {
    for (DeviceCounters& s : d->engine_stats()) out.push_back(std::move(s));
  }
  return out;
}

// Called with each request's index and result as it finishes, on the
// thread running RunOnce.
using ResultSink = std::function<absl::Status(size_t, const engine::Result&)>;

// Submits one request and hands its result to `sink` when it finishes.
Task<absl::StatusOr<engine::Result>> Serve(engine::Engine& eng,
                                           engine::Request request,
                                           size_t index,
                                           const ResultSink& sink) {
  absl::StatusOr<engine::Result> result =
      co_await eng.Generate(std::move(request));
  if (result.ok() && sink) FERRY_CO_RETURN_IF_ERROR(sink(index, *result));
  co_return result;
}

absl::StatusOr<RunResult> RunOnce(const llama::LlamaModel& model,
                                  const Backends& backends,
                                  engine::EngineOptions options,
                                  const std::vector<engine::Request>& requests,
                                  const RunConfig& config,
                                  const ResultSink& sink) {
  options.n_copies = config.n_copies;
  options.static_batching = config.static_batching;
  FERRY_ASSIGN_OR_RETURN(auto eng, engine::Engine::Create(model, options));
  RunResult r;
  r.config = config;
  r.window = eng->batch_shape().n_window;
  int64_t total = 0;
  for (const auto& q : requests) total += q.max_new_tokens;
  Progress progress(config.label, total);
  const std::vector<DeviceCounters> before = AllEngineStats(backends);
  TraceRecorder::Global().SetEnabled(config.trace);
  const int64_t t0 = eng->NowNanos();
  const auto wall0 = std::chrono::steady_clock::now();
  // Every request at once; each result goes to the sink as it finishes.
  std::vector<Task<absl::StatusOr<engine::Result>>> serving;
  for (size_t k = 0; k < requests.size(); ++k) {
    engine::Request q = requests[k];
    q.on_token = [&progress](int32_t) { progress.Add(1); };
    serving.push_back(Serve(*eng, std::move(q), k, sink));
  }
  FERRY_ASSIGN_OR_RETURN(r.results, SyncWait(WhenAllOk(std::move(serving))));
  const int64_t t1 = eng->NowNanos();
  r.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0)
          .count();
  FERRY_RETURN_IF_ERROR(eng->Synchronize());
  if (config.trace) TraceRecorder::Global().SetEnabled(false);
  r.stats = eng->stats();
  r.seconds = static_cast<double>(t1 - t0) / 1e9;
  const std::vector<DeviceCounters> after = AllEngineStats(backends);
  for (size_t i = 0; i < after.size() && i < before.size(); ++i) {
    const double busy =
        static_cast<double>(after[i].busy_ns - before[i].busy_ns);
    r.busy.emplace_back(after[i].name, busy / 1e9 / r.seconds);
    r.bytes_copied += after[i].bytes - before[i].bytes;
    if (after[i].name.find("/compute") != std::string::npos &&
        after[i].name.rfind("cpu", 0) != 0) {
      r.slowest_compute_ns = std::max(r.slowest_compute_ns, busy);
    }
  }
  for (size_t k = 0; k < r.results.size(); ++k) {
    const engine::Result& res = r.results[k];
    r.generated += static_cast<int64_t>(res.tokens.size());
    r.prompt += static_cast<int64_t>(requests[k].prompt.size());
    r.non_finite += res.non_finite_logits;
    if (!res.tokens.empty()) {
      r.ttft_ms.push_back(
          static_cast<double>(res.first_token_ns - res.submitted_ns) / 1e6);
    }
    for (size_t i = 1; i < res.token_ns.size(); ++i) {
      r.itl_ms.push_back(
          static_cast<double>(res.token_ns[i] - res.token_ns[i - 1]) / 1e6);
    }
  }
  return r;
}

void PrintReport(std::FILE* out, const std::vector<RunResult>& runs,
                 bool modelled) {
  const char* clock = modelled ? "modelled" : "wall";
  std::fprintf(out, "%-34s", "");
  for (const RunResult& r : runs)
    std::fprintf(out, "%20s", r.config.label.c_str());
  std::fprintf(out, "\n");
  auto row = [&](const char* name, auto value) {
    std::fprintf(out, "  %-32s", name);
    for (const RunResult& r : runs) {
      std::fprintf(out, "%20s", value(r).c_str());
    }
    std::fprintf(out, "\n");
  };
  row(absl::StrCat("time (", clock, ")").c_str(),
      [](const RunResult& r) { return absl::StrFormat("%.3f s", r.seconds); });
  row("generated tokens/s", [](const RunResult& r) {
    return absl::StrFormat("%.1f", r.generated / r.seconds);
  });
  row("all tokens/s (prompt + new)", [](const RunResult& r) {
    return absl::StrFormat("%.1f", (r.generated + r.prompt) / r.seconds);
  });
  row("time to first token p50/p99", [](const RunResult& r) {
    return absl::StrFormat("%.1f/%.1f ms", Quantile(r.ttft_ms, 0.5),
                           Quantile(r.ttft_ms, 0.99));
  });
  row("inter-token latency p50/p99", [](const RunResult& r) {
    return absl::StrFormat("%.1f/%.1f ms", Quantile(r.itl_ms, 0.5),
                           Quantile(r.itl_ms, 0.99));
  });
  row("micro-batches (mean fill)", [](const RunResult& r) {
    const int64_t used = r.stats.prefill_tokens + r.stats.decode_tokens;
    return absl::StrFormat(
        "%lld (%.0f%%)", static_cast<long long>(r.stats.micro_batches),
        100.0 * used / std::max<int64_t>(1, used + r.stats.padded_tokens));
  });
  row("most in flight",
      [](const RunResult& r) { return absl::StrCat(r.stats.max_in_flight); });
  row("bytes copied", [](const RunResult& r) {
    return Bytes(static_cast<double>(r.bytes_copied));
  });
  if (modelled) {
    row("slowest-stage bound, tokens/s", [](const RunResult& r) {
      return absl::StrFormat("%.1f",
                             r.generated / (r.slowest_compute_ns / 1e9));
    });
    row("share of the bound reached", [](const RunResult& r) {
      return absl::StrFormat("%.2f", r.slowest_compute_ns / 1e9 / r.seconds);
    });
  }
  std::fprintf(out, "  engine busy (share of the run):\n");
  for (size_t e = 0; e < runs[0].busy.size(); ++e) {
    bool any = false;
    for (const RunResult& r : runs) any |= r.busy[e].second > 0.0005;
    if (!any) continue;
    std::fprintf(out, "    %-30s", runs[0].busy[e].first.c_str());
    for (const RunResult& r : runs) {
      std::fprintf(out, "%19.1f%%", 100 * r.busy[e].second);
    }
    std::fprintf(out, "\n");
  }
  row("overlap (engines busy at once)", [](const RunResult& r) {
    double sum = 0;
    for (const auto& b : r.busy) sum += b.second;
    return absl::StrFormat("%.2f", sum);
  });
  if (runs.size() > 1) {
    std::fprintf(out, "  speedup of %s over %s: %.2fx (%s)\n",
                 runs[1].config.label.c_str(), runs[0].config.label.c_str(),
                 runs[0].seconds / runs[1].seconds, clock);
  }
  for (size_t i = 2; i < runs.size(); ++i) {
    std::fprintf(
        out, "  %s vs %s: %.2fx the throughput, TTFT p50 %.1f vs %.1f ms\n",
        runs[1].config.label.c_str(), runs[i].config.label.c_str(),
        runs[i].seconds / runs[1].seconds, Quantile(runs[1].ttft_ms, 0.5),
        Quantile(runs[i].ttft_ms, 0.5));
  }
}

// The runs must agree: same tokens, same logits (NaN-aware: a NaN in one
// run and not the other is a difference, and any NaN/Inf is reported).
std::string CompareRuns(const std::vector<RunResult>& runs, int* problems) {
  std::string out;
  const RunResult& base = runs.back();
  for (size_t i = 0; i + 1 < runs.size(); ++i) {
    int differ = 0;
    double max_diff = 0;
    int64_t nan_mismatch = 0;
    for (size_t k = 0; k < base.results.size(); ++k) {
      const engine::Result& a = runs[i].results[k];
      const engine::Result& b = base.results[k];
      differ += a.tokens != b.tokens;
      for (size_t j = 0; j < a.logits.size() && j < b.logits.size(); ++j) {
        for (size_t v = 0; v < a.logits[j].second.size(); ++v) {
          const float x = a.logits[j].second[v], y = b.logits[j].second[v];
          if (std::isnan(x) != std::isnan(y) || (std::isinf(x) && x != y)) {
            ++nan_mismatch;
          } else if (std::isfinite(x)) {
            max_diff = std::max(max_diff, std::fabs(double{x} - y));
          }
        }
      }
    }
    absl::StrAppendFormat(&out,
                          "  check: %s vs %s: %d of %zu requests' tokens "
                          "differ; logits max |diff| %g, NaN/Inf mismatches "
                          "%lld\n",
                          runs[i].config.label, base.config.label, differ,
                          base.results.size(), max_diff,
                          static_cast<long long>(nan_mismatch));
    *problems += differ + (nan_mismatch > 0);
  }
  for (const RunResult& r : runs) {
    if (r.non_finite == 0) continue;
    int reqs = 0;
    for (const auto& res : r.results) reqs += res.non_finite_logits > 0;
    absl::StrAppendFormat(&out,
                          "  WARNING: %s: %lld NaN/Inf logits in %d "
                          "requests (their tokens are meaningless)\n",
                          r.config.label, static_cast<long long>(r.non_finite),
                          reqs);
    ++*problems;
  }
  return out;
}

absl::Status Run() {
  FERRY_RETURN_IF_ERROR(ValidateFlags());
  const std::string trace_path = absl::GetFlag(FLAGS_trace);
  const std::string timeline_path = absl::GetFlag(FLAGS_timeline);
  const std::string output_path = absl::GetFlag(FLAGS_output);
  const std::string logits_path = absl::GetFlag(FLAGS_dump_logits);
  for (const auto& [flag, path] :
       {std::pair<const char*, std::string>{"trace", trace_path},
        {"timeline", timeline_path},
        {"output", output_path},
        {"dump_logits", logits_path}}) {
    FERRY_RETURN_IF_ERROR(CheckWritable(flag, path));
  }
  llama::LlamaConfig config;
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
    FERRY_RETURN_IF_ERROR(config.Validate());
    FERRY_RETURN_IF_ERROR(CheckWritable("write_weights", path));
    FERRY_RETURN_IF_ERROR(WriteRandomWeights(path, config, seed));
    std::printf("wrote %s: %s\n", path.c_str(), config.ToString().c_str());
    return absl::OkStatus();
  }
  llama::LlamaModelOptions model_options;
  FERRY_ASSIGN_OR_RETURN(model_options.split,
                         ParseSplit(absl::GetFlag(FLAGS_split)));
  if (const std::string by = absl::GetFlag(FLAGS_split_by); by == "weights") {
    model_options.split_unit = llama::SplitUnit::kWeightBytes;
  } else if (by != "layers") {
    return Invalid("split_by",
                   absl::StrCat("'", by, "' is neither layers nor weights"));
  }
  FERRY_ASSIGN_OR_RETURN(Backends backends, MakeBackends());
  const bool tracing = !trace_path.empty() || !timeline_path.empty();
  std::unique_ptr<llama::LlamaModel> model;
  ThreadPool pool(2);
  std::string loaded;
  std::unique_ptr<tokenizer::Tokenizer> tok;
  bool chatml = false;
  const std::string model_path = absl::GetFlag(FLAGS_model);
  if (!model_path.empty() && !absl::GetFlag(FLAGS_weights).empty()) {
    return absl::InvalidArgumentError(
        "--model and --weights are exclusive; give one");
  }
  if (!absl::GetFlag(FLAGS_prompt).empty() && model_path.empty()) {
    return absl::InvalidArgumentError(
        "--prompt needs --model (a GGUF file or HF directory with a "
        "tokenizer)");
  }
  if (!absl::GetFlag(FLAGS_prompt).empty() &&
      !absl::GetFlag(FLAGS_prompts).empty()) {
    return absl::InvalidArgumentError(
        "--prompt and --prompts are exclusive; give one");
  }
  struct stat model_stat;
  if (!model_path.empty() && ::stat(model_path.c_str(), &model_stat) == 0 &&
      S_ISDIR(model_stat.st_mode)) {
    // A Hugging Face directory: config.json, safetensors, tokenizer.json.
    // Its config and weight files are checked before the tokenizer is read.
    FERRY_RETURN_IF_ERROR(llama::ReadHfDirectory(model_path).status());
    FERRY_ASSIGN_OR_RETURN(tokenizer::HfDirectoryTokenizer hf_tok,
                           tokenizer::TokenizerFromHfDirectory(model_path));
    tok = std::move(hf_tok.tokenizer);
    chatml = absl::StrContains(hf_tok.chat_template, "<|im_start|>");
    FERRY_ASSIGN_OR_RETURN(auto io, IoReactor::Create(&pool));
    llama::HfLoadStats load;
    FERRY_ASSIGN_OR_RETURN(
        model, llama::LoadLlamaHf(model_path, backends.list, model_options, *io,
                                  /*n_ctx=*/0, &load));
    loaded = absl::StrFormat(
        "loaded %s with %s: %s of tensors in %d file(s) converted to %s of "
        "f32 weights in %.3f s\n",
        model_path, io->name(), Bytes(static_cast<double>(load.file_bytes)),
        load.shards, Bytes(static_cast<double>(load.weight_bytes)),
        load.seconds);
  } else if (!model_path.empty()) {
    FERRY_ASSIGN_OR_RETURN(gguf::GgufFile gguf,
                           gguf::GgufFile::Open(model_path));
    FERRY_ASSIGN_OR_RETURN(tok, tokenizer::TokenizerFromGguf(gguf));
    if (gguf.Has("tokenizer.chat_template")) {
      FERRY_ASSIGN_OR_RETURN(std::string tmpl,
                             gguf.GetString("tokenizer.chat_template"));
      chatml = absl::StrContains(tmpl, "<|im_start|>");
    }
    FERRY_ASSIGN_OR_RETURN(auto io, IoReactor::Create(&pool));
    llama::GgufLoadStats load;
    FERRY_ASSIGN_OR_RETURN(
        model, llama::LoadLlamaGguf(model_path, backends.list, model_options,
                                    *io, /*n_ctx=*/0, &load));
    loaded = absl::StrFormat(
        "loaded %s with %s: %s of tensors loaded as %s of weights "
        "in %.3f s\n",
        model_path, io->name(), Bytes(static_cast<double>(load.file_bytes)),
        Bytes(static_cast<double>(load.weight_bytes)), load.seconds);
  } else if (const std::string path = absl::GetFlag(FLAGS_weights);
             !path.empty()) {
    FERRY_ASSIGN_OR_RETURN(auto io, IoReactor::Create(&pool));
    LoadStats load;
    TraceRecorder::Global().SetEnabled(tracing);
    FERRY_ASSIGN_OR_RETURN(
        model, LoadLlamaModel(path, backends.list, model_options, *io, &load));
    TraceRecorder::Global().SetEnabled(false);
    loaded = absl::StrFormat(
        "loaded %s with %s: %s in %.3f s (%s through pinned staging)\n", path,
        io->name(), Bytes(static_cast<double>(load.bytes)), load.seconds,
        Bytes(static_cast<double>(load.staged_bytes)));
  } else {
    FERRY_RETURN_IF_ERROR(config.Validate());
    FERRY_ASSIGN_OR_RETURN(
        model, llama::LlamaModel::Create(config, backends.list, model_options));
    FERRY_RETURN_IF_ERROR(model->FillRandom(seed));
  }
  const llama::LlamaConfig& c = model->config();

  std::vector<engine::Request> requests;
  const bool from_file = !absl::GetFlag(FLAGS_prompts).empty();
  const std::string prompt_text = absl::GetFlag(FLAGS_prompt);
  TextEncoder encode;
  if (tok != nullptr) {
    encode = [&tok](absl::string_view text) { return tok->Encode(text); };
  }
  // Text prompts end at the tokenizer's end of sequence (ChatML's
  // <|im_end|> in SmolLM2).
  auto add_stop = [&tok](engine::Request& r) {
    if (tok != nullptr && tok->eos_id() >= 0) {
      r.stop_tokens.push_back(tok->eos_id());
    }
  };
  if (from_file) {
    FERRY_ASSIGN_OR_RETURN(
        requests, ReadRequests(absl::GetFlag(FLAGS_prompts), c.n_vocab,
                               absl::GetFlag(FLAGS_gen_tokens), encode));
    for (engine::Request& r : requests) add_stop(r);
  } else if (!prompt_text.empty()) {
    const bool chat = chatml && absl::GetFlag(FLAGS_chat);
    const std::string text =
        chat ? absl::StrCat("<|im_start|>user\n", prompt_text,
                            "<|im_end|>\n<|im_start|>assistant\n")
             : prompt_text;
    engine::Request r;
    r.id = "prompt";
    FERRY_ASSIGN_OR_RETURN(r.prompt, tok->Encode(text));
    if (r.prompt.empty()) {
      return absl::InvalidArgumentError("--prompt encodes to no tokens");
    }
    r.max_new_tokens = absl::GetFlag(FLAGS_gen_tokens);
    add_stop(r);
    requests.push_back(std::move(r));
  } else {
    SyntheticWorkload w;
    w.requests = absl::GetFlag(FLAGS_requests);
    w.seed = seed;
    w.max_new = absl::GetFlag(FLAGS_gen_tokens);
    if (absl::GetFlag(FLAGS_workload) == "decode") {
      w.min_prompt = w.max_prompt = 4;
      w.min_new = w.max_new;
    } else {
      w.max_prompt = absl::GetFlag(FLAGS_prompt_tokens);
      w.min_prompt = std::min<int64_t>(8, w.max_prompt);
      w.min_new = std::min(4, w.max_new);
    }
    requests = MakeRequests(w, c.n_vocab);
  }
  // Picked for the model and the requests; flags override.
  engine::EngineOptions options = engine::ChooseEngineOptions(*model, requests);
  if (const int64_t len = absl::GetFlag(FLAGS_max_seq_len); len > 0) {
    options.max_sequence_len = std::min(len, c.n_ctx);
  }
  if (const int n = absl::GetFlag(FLAGS_max_sequences); n > 0) {
    options.max_sequences = n;
  }
  if (const int64_t n = absl::GetFlag(FLAGS_batch_tokens); n > 0) {
    options.batch_tokens = n;
  }
  if (const int64_t w = absl::GetFlag(FLAGS_kv_window); w > 0) {
    options.batch_window = std::max(w, options.max_sequence_len + 1);
  } else if (absl::GetFlag(FLAGS_max_seq_len) > 0) {
    options.batch_window =
        std::max(options.batch_window, options.max_sequence_len + 1);
  }
  if (const int n = absl::GetFlag(FLAGS_n_copies); n > 0) {
    options.n_copies = n;
  }
  options.window_buckets = absl::GetFlag(FLAGS_window_buckets);
  if (const Device* device = backends.modelled; device != nullptr) {
    options.clock = [device] { return device->ClockNanos(); };
  }

  // The report goes to stdout, unless the results do.
  std::FILE* out = (from_file || !prompt_text.empty()) && output_path.empty()
                       ? stderr
                       : stdout;
  std::fprintf(out, "ferry pipelined inference: llama %s\n",
               c.ToString().c_str());
  std::fprintf(out, "%s", loaded.c_str());
  std::fprintf(out, "backends: %s", absl::GetFlag(FLAGS_backends).c_str());
  if (backends.modelled != nullptr) {
    std::fprintf(out, "  (sim: %s)", absl::GetFlag(FLAGS_sim).c_str());
  }
  std::fprintf(out, "\nplacement:\n%s", model->DescribePlacement().c_str());
  int64_t prompt_total = 0, new_total = 0;
  for (const auto& q : requests) {
    prompt_total += static_cast<int64_t>(q.prompt.size());
    new_total += q.max_new_tokens;
  }
  std::fprintf(out,
               "workload: %zu requests, %lld prompt tokens, up to %lld new "
               "(%s)\n",
               requests.size(), static_cast<long long>(prompt_total),
               static_cast<long long>(new_total),
               from_file              ? absl::GetFlag(FLAGS_prompts).c_str()
               : !prompt_text.empty() ? "--prompt"
                                      : absl::GetFlag(FLAGS_workload).c_str());

  // A user's job runs once; a synthetic workload (or --compare) also with
  // one micro-batch in flight, and the runs must agree.
  const int n_copies = options.n_copies;
  std::vector<RunConfig> configs;
  if (absl::GetFlag(FLAGS_compare) || absl::GetFlag(FLAGS_compare_static) ||
      (!from_file && prompt_text.empty())) {
    configs.push_back({"one in flight", 1, false, false});
  }
  configs.push_back(
      {absl::StrCat("pipelined x", n_copies), n_copies, false, tracing});
  const size_t main_index = configs.size() - 1;
  if (absl::GetFlag(FLAGS_compare_static)) {
    configs.push_back({"static batches", n_copies, true, false});
  }

  // The main run's results stream out as requests finish (a failure later
  // loses none of them); its logits rows go to --dump_logits at the end.
  std::FILE* results_file = nullptr;
  if (!output_path.empty()) {
    results_file = std::fopen(output_path.c_str(), "w");
    if (results_file == nullptr) {
      return absl::UnavailableError(absl::StrCat(
          "--output=", output_path, ": cannot write: ", std::strerror(errno)));
    }
  } else if (from_file) {
    results_file = stdout;
  }
  absl::Cleanup close_results = [&] {
    if (results_file != nullptr && results_file != stdout) {
      std::fclose(results_file);
    }
  };
  std::vector<float> dump;
  int64_t dump_rows = 0;
  std::vector<std::string> answers(requests.size());
  const ResultSink sink = [&](size_t k,
                              const engine::Result& res) -> absl::Status {
    // Tokens to text a token at a time, as a stream would: a character cut
    // across tokens comes out whole, once its last byte arrives.
    std::string text;
    if (tok != nullptr) {
      tokenizer::StreamDecoder decoder(*tok, {.skip_special = true});
      for (int32_t t : res.tokens) text += decoder.Push(t);
      text += decoder.Finish();
    }
    answers[k] = text;
    if (results_file == nullptr) return absl::OkStatus();
    std::vector<std::pair<int64_t, int64_t>> rows;
    for (const auto& [pos, logits] : res.logits) {
      rows.emplace_back(pos, dump_rows++);
      dump.insert(dump.end(), logits.begin(), logits.end());
    }
    const std::string line = absl::StrCat(
        ResultToJson(res, static_cast<int64_t>(requests[k].prompt.size()),
                     logits_path.empty() ? decltype(rows){} : rows,
                     tok != nullptr ? &text : nullptr),
        "\n");
    if (std::fputs(line.c_str(), results_file) < 0 ||
        std::fflush(results_file) != 0) {
      return absl::UnavailableError(absl::StrCat(
          "writing results to ", output_path.empty() ? "stdout" : output_path));
    }
    return absl::OkStatus();
  };
  std::vector<RunResult> runs;
  for (size_t i = 0; i < configs.size(); ++i) {
    FERRY_ASSIGN_OR_RETURN(
        RunResult r,
        RunOnce(*model, backends, options, requests, configs[i],
                i == main_index ? sink : ResultSink()),
        "run '", configs[i].label, "'");
    runs.push_back(std::move(r));
  }
  std::fprintf(out,
               "engine: %d sequences x %lld cells, micro-batches of %lld "
               "tokens over a %lld-cell window\n",
               options.max_sequences,
               static_cast<long long>(options.max_sequence_len),
               static_cast<long long>(options.batch_tokens),
               static_cast<long long>(runs[0].window));
  PrintReport(out, runs, backends.modelled != nullptr);
  int problems = 0;
  std::fprintf(out, "%s", CompareRuns(runs, &problems).c_str());

  if (!prompt_text.empty()) std::printf("%s\n", answers[0].c_str());
  if (!output_path.empty()) {
    std::fprintf(out, "results: %s\n", output_path.c_str());
  }
  if (!logits_path.empty()) {
    FERRY_RETURN_IF_ERROR(WriteNpy(logits_path, dump, {dump_rows, c.n_vocab}));
    std::fprintf(out, "logits: %s (%lld rows of %lld)\n", logits_path.c_str(),
                 static_cast<long long>(dump_rows),
                 static_cast<long long>(c.n_vocab));
  }
  if (!trace_path.empty() || !timeline_path.empty()) {
    // Spans devices recorded elsewhere (remote workers') join the trace.
    for (Device* d : Devices(backends)) {
      FERRY_RETURN_IF_ERROR(d->CollectTrace(TraceRecorder::Global()));
    }
  }
  if (!trace_path.empty()) {
    FERRY_RETURN_IF_ERROR(TraceRecorder::Global().WriteChromeTrace(trace_path));
    std::fprintf(out, "trace: %s (open in https://ui.perfetto.dev)\n",
                 trace_path.c_str());
  }
  if (!timeline_path.empty()) {
    FERRY_RETURN_IF_ERROR(WriteTimelineSvg(timeline_path));
    std::fprintf(out, "timeline: %s\n", timeline_path.c_str());
  }
  if (problems > 0) {
    return absl::DataLossError(
        absl::StrCat(problems, " check(s) failed (see above)"));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace ferry::examples

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Batch inference with continuous batching on a llama-style model split "
      "over simulated devices and the CPU, one micro-batch in flight and "
      "pipelined; reports throughput, latency and overlap. With no flags it "
      "runs in a few seconds.");
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) {
    std::fprintf(stderr,
                 "pipelined_inference: unexpected argument '%s' (flags are "
                 "--name=value; see --help)\n",
                 rest[1]);
    return 2;
  }
  const absl::Status status = ferry::examples::Run();
  if (!status.ok()) {
    std::fprintf(stderr, "pipelined_inference: %s\n",
                 status.ToString().c_str());
    return 1;
  }
  return 0;
}
