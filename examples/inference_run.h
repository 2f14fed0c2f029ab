// One run of a workload through an engine: every request submitted at once,
// each result handed on as it finishes, and what the report needs measured
// (throughput, latencies, each engine's busy share, bytes copied).
#ifndef FERRY_EXAMPLES_INFERENCE_RUN_H_
#define FERRY_EXAMPLES_INFERENCE_RUN_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ferry/backends/device.h"
#include "ferry/engine/engine.h"
#include "ferry/models/llama/llama_model.h"

namespace ferry::examples {

struct RunConfig {
  std::string label;
  int n_copies = 1;
  bool static_batching = false;
  bool trace = false;  // Records the global trace during the run.
};

struct RunResult {
  RunConfig config;
  std::vector<engine::Result> results;  // In the requests' order.
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

// Called with each request's index and result as it finishes, on the
// thread running RunOnce; an error fails the run.
using ResultSink = std::function<absl::Status(size_t, const engine::Result&)>;

// Runs `requests` on `model` with `options` changed by `config`, a progress
// bar on stderr. `devices` are those the model runs on, whose engine
// counters the run reads. The first failing request fails the run.
absl::StatusOr<RunResult> RunOnce(const llama::LlamaModel& model,
                                  const std::vector<Device*>& devices,
                                  engine::EngineOptions options,
                                  const std::vector<engine::Request>& requests,
                                  const RunConfig& config,
                                  const ResultSink& sink);

}  // namespace ferry::examples

#endif  // FERRY_EXAMPLES_INFERENCE_RUN_H_
