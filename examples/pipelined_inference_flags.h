// The flags of pipelined_inference (examples/pipelined_inference.cc), and
// their checks and translations into the options the program builds from.
// Every check runs before anything is made, so a bad flag is refused at once
// with the flag's name.
#ifndef FERRY_EXAMPLES_PIPELINED_INFERENCE_FLAGS_H_
#define FERRY_EXAMPLES_PIPELINED_INFERENCE_FLAGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ferry/engine/engine.h"
#include "ferry/examples/workload.h"
#include "ferry/models/llama/llama_model.h"

ABSL_DECLARE_FLAG(std::string, backends);
ABSL_DECLARE_FLAG(std::string, sim);
ABSL_DECLARE_FLAG(std::string, split);
ABSL_DECLARE_FLAG(std::string, split_by);
ABSL_DECLARE_FLAG(int, cpu_threads);
ABSL_DECLARE_FLAG(int, layers);
ABSL_DECLARE_FLAG(int64_t, embd);
ABSL_DECLARE_FLAG(int64_t, heads);
ABSL_DECLARE_FLAG(int64_t, kv_heads);
ABSL_DECLARE_FLAG(int64_t, ff);
ABSL_DECLARE_FLAG(int64_t, vocab);
ABSL_DECLARE_FLAG(int64_t, ctx);
ABSL_DECLARE_FLAG(uint64_t, seed);
ABSL_DECLARE_FLAG(std::string, weights);
ABSL_DECLARE_FLAG(std::string, model);
ABSL_DECLARE_FLAG(std::string, prompt);
ABSL_DECLARE_FLAG(bool, chat);
ABSL_DECLARE_FLAG(std::string, chat_template);
ABSL_DECLARE_FLAG(std::string, write_weights);
ABSL_DECLARE_FLAG(std::string, prompts);
ABSL_DECLARE_FLAG(std::string, workload);
ABSL_DECLARE_FLAG(int, requests);
ABSL_DECLARE_FLAG(int64_t, prompt_tokens);
ABSL_DECLARE_FLAG(int, gen_tokens);
ABSL_DECLARE_FLAG(std::string, output);
ABSL_DECLARE_FLAG(std::string, dump_logits);
ABSL_DECLARE_FLAG(int, n_copies);
ABSL_DECLARE_FLAG(int, max_sequences);
ABSL_DECLARE_FLAG(int64_t, max_seq_len);
ABSL_DECLARE_FLAG(int64_t, batch_tokens);
ABSL_DECLARE_FLAG(int64_t, kv_window);
ABSL_DECLARE_FLAG(bool, window_buckets);
ABSL_DECLARE_FLAG(bool, compare);
ABSL_DECLARE_FLAG(bool, compare_static);
ABSL_DECLARE_FLAG(std::string, trace);
ABSL_DECLARE_FLAG(std::string, timeline);

namespace ferry::examples {

// --backends, or its default: the CPU for a real model (--model), two
// simulated accelerators and the CPU for the demo's random weights.
std::string BackendsFromFlags();

// InvalidArgument "--FLAG: WHY".
absl::Status InvalidFlag(absl::string_view flag, absl::string_view why);

// Checks every numeric flag's range, --workload's value and the flags
// that exclude or need each other (--model, --weights, --prompt, --prompts).
absl::Status ValidateFlags();

// Fails now, not after the run, when `path` (the value of --`flag`) cannot
// be written (missing directory, no permission): NotFound or
// PermissionDenied naming both. Leaves an empty file. OK for "".
absl::Status CheckWritable(absl::string_view flag, const std::string& path);

// --split's proportions ("1,1,0"); each a finite number >= 0.
absl::StatusOr<std::vector<double>> ParseSplit(const std::string& text);

// The random model's shape from --layers, --embd, ... (not validated).
llama::LlamaConfig ConfigFromFlags();

// The synthetic requests of --workload, --requests, --prompt_tokens,
// --gen_tokens and --seed.
SyntheticWorkload WorkloadFromFlags();

// OpenModelOptions::chat_template from --chat_template and --chat.
std::string ChatTemplateFromFlags();

// Placement from --split and --split_by.
absl::StatusOr<llama::LlamaModelOptions> ModelOptionsFromFlags();

// Overrides the engine options picked for the model (`options`, with
// context `n_ctx`) with the flags that were set (--max_seq_len,
// --max_sequences, --batch_tokens, --kv_window, --n_copies,
// --window_buckets).
void ApplyEngineFlags(int64_t n_ctx, engine::EngineOptions& options);

}  // namespace ferry::examples

#endif  // FERRY_EXAMPLES_PIPELINED_INFERENCE_FLAGS_H_
