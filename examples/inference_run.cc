#include "ferry/examples/inference_run.h"

#include <algorithm>
#include <chrono>

#include "ferry/examples/progress_bar.h"
#include "ferry/runtime/status_macros.h"
#include "ferry/runtime/sync_wait.h"
#include "ferry/runtime/task.h"
#include "ferry/runtime/trace.h"
#include "ferry/runtime/when_all.h"

namespace ferry::examples {
namespace {

std::vector<DeviceCounters> AllEngineStats(
    const std::vector<Device*>& devices) {
  std::vector<DeviceCounters> out;
  for (const Device* d : devices) {
    for (DeviceCounters& s : d->engine_stats()) out.push_back(std::move(s));
  }
  return out;
}

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

}  // namespace

absl::StatusOr<RunResult> RunOnce(const llama::LlamaModel& model,
                                  const std::vector<Device*>& devices,
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
  ProgressBar progress(config.label, total);
  const std::vector<DeviceCounters> before = AllEngineStats(devices);
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
  const std::vector<DeviceCounters> after = AllEngineStats(devices);
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

}  // namespace ferry::examples
