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
//   ... -- --model=model.gguf --prompt="Hi"   (or a Hugging Face directory)
//
// The flags are in pipelined_inference_flags.h; a model a person has opens
// through models/open_model.h, with its tokenizer and chat template.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ferry/engine/auto_options.h"
#include "ferry/engine/engine.h"
#include "ferry/examples/backend_list.h"
#include "ferry/examples/inference_run.h"
#include "ferry/examples/npy.h"
#include "ferry/examples/pipelined_inference_flags.h"
#include "ferry/examples/results_writer.h"
#include "ferry/examples/run_report.h"
#include "ferry/examples/safetensors.h"
#include "ferry/examples/timeline_svg.h"
#include "ferry/examples/workload.h"
#include "ferry/models/llama/llama_model.h"
#include "ferry/models/open_model.h"
#include "ferry/runtime/io_reactor.h"
#include "ferry/runtime/status_macros.h"
#include "ferry/runtime/thread_pool.h"
#include "ferry/runtime/trace.h"
#include "ferry/tokenizer/chat_template.h"
#include "ferry/tokenizer/tokenizer.h"

namespace ferry::examples {
namespace {

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
  llama::LlamaConfig config = ConfigFromFlags();
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  if (const std::string path = absl::GetFlag(FLAGS_write_weights);
      !path.empty()) {
    FERRY_RETURN_IF_ERROR(config.Validate());
    FERRY_RETURN_IF_ERROR(CheckWritable("write_weights", path));
    FERRY_RETURN_IF_ERROR(WriteRandomWeights(path, config, seed));
    std::printf("wrote %s: %s\n", path.c_str(), config.ToString().c_str());
    return absl::OkStatus();
  }
  FERRY_ASSIGN_OR_RETURN(llama::LlamaModelOptions model_options,
                         ModelOptionsFromFlags());
  FERRY_ASSIGN_OR_RETURN(
      ExampleBackends backends,
      MakeBackends(BackendsFromFlags(), absl::GetFlag(FLAGS_sim),
                   absl::GetFlag(FLAGS_cpu_threads)));
  const bool tracing = !trace_path.empty() || !timeline_path.empty();
  std::unique_ptr<llama::LlamaModel> model;
  std::string loaded;
  OpenedModel opened;  // Its tokenizer and chat template, with --model.
  if (const std::string path = absl::GetFlag(FLAGS_model); !path.empty()) {
    OpenModelOptions open_options;
    open_options.model = model_options;
    open_options.chat_template = ChatTemplateFromFlags();
    FERRY_ASSIGN_OR_RETURN(opened,
                           OpenModel(path, backends.list, open_options));
    model = std::move(opened.model);
    loaded = absl::StrCat(opened.summary, "\n");
  } else if (const std::string path = absl::GetFlag(FLAGS_weights);
             !path.empty()) {
    ThreadPool pool(2);
    FERRY_ASSIGN_OR_RETURN(auto io, IoReactor::Create(&pool));
    LoadStats load;
    TraceRecorder::Global().SetEnabled(tracing);
    FERRY_ASSIGN_OR_RETURN(
        model, LoadLlamaModel(path, backends.list, model_options, *io, &load));
    TraceRecorder::Global().SetEnabled(false);
    loaded = absl::StrFormat(
        "loaded %s with %s: %s in %.3f s (%s through pinned staging)\n", path,
        io->name(), FormatBytes(static_cast<double>(load.bytes)), load.seconds,
        FormatBytes(static_cast<double>(load.staged_bytes)));
  } else {
    FERRY_RETURN_IF_ERROR(config.Validate());
    FERRY_ASSIGN_OR_RETURN(
        model, llama::LlamaModel::Create(config, backends.list, model_options));
    FERRY_RETURN_IF_ERROR(model->FillRandom(seed));
  }
  const llama::LlamaConfig& c = model->config();
  const tokenizer::Tokenizer* tok = opened.tokenizer.get();

  std::vector<engine::Request> requests;
  const bool from_file = !absl::GetFlag(FLAGS_prompts).empty();
  const std::string prompt_text = absl::GetFlag(FLAGS_prompt);
  TextEncoder encode;
  if (tok != nullptr) {
    encode = [tok](absl::string_view text) { return tok->Encode(text); };
  }
  ChatFormatter chat;
  if (opened.chat_template.has_value()) {
    chat = [&opened](absl::Span<const tokenizer::ChatMessage> messages) {
      return opened.chat_template->Apply(messages,
                                         {.bos_token = opened.bos_token});
    };
  }
  if (from_file) {
    FERRY_ASSIGN_OR_RETURN(
        requests, ReadRequests(absl::GetFlag(FLAGS_prompts), c.n_vocab,
                               absl::GetFlag(FLAGS_gen_tokens), encode, chat));
  } else if (!prompt_text.empty()) {
    std::string text = prompt_text;
    if (chat != nullptr) {
      FERRY_ASSIGN_OR_RETURN(text, chat({{"user", prompt_text}}));
    }
    engine::Request r;
    r.id = "prompt";
    FERRY_ASSIGN_OR_RETURN(r.prompt, tok->Encode(text));
    if (r.prompt.empty()) {
      return absl::InvalidArgumentError("--prompt encodes to no tokens");
    }
    r.max_new_tokens = absl::GetFlag(FLAGS_gen_tokens);
    requests.push_back(std::move(r));
  } else {
    requests = MakeRequests(WorkloadFromFlags(), c.n_vocab);
  }
  // Text prompts end at the tokenizer's end of sequence (ChatML's
  // <|im_end|> in SmolLM2).
  if ((from_file || !prompt_text.empty()) && tok != nullptr &&
      tok->eos_id() >= 0) {
    for (engine::Request& r : requests) r.stop_tokens.push_back(tok->eos_id());
  }
  // Picked for the model and the requests; flags override.
  engine::EngineOptions options = engine::ChooseEngineOptions(*model, requests);
  ApplyEngineFlags(c.n_ctx, options);
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
  std::fprintf(out, "backends: %s", BackendsFromFlags().c_str());
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
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<ResultsWriter> writer,
                         ResultsWriter::Open(output_path, from_file, requests,
                                             tok, !logits_path.empty()));
  const ResultSink sink = [&writer](size_t k, const engine::Result& res) {
    return writer->Write(k, res);
  };
  std::vector<RunResult> runs;
  for (size_t i = 0; i < configs.size(); ++i) {
    FERRY_ASSIGN_OR_RETURN(
        RunResult r,
        RunOnce(*model, backends.Devices(), options, requests, configs[i],
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

  if (!prompt_text.empty()) std::printf("%s\n", writer->answer(0).c_str());
  if (!output_path.empty()) {
    std::fprintf(out, "results: %s\n", output_path.c_str());
  }
  if (!logits_path.empty()) {
    FERRY_RETURN_IF_ERROR(WriteNpy(logits_path, writer->logits(),
                                   {writer->logits_rows(), c.n_vocab}));
    std::fprintf(out, "logits: %s (%lld rows of %lld)\n", logits_path.c_str(),
                 static_cast<long long>(writer->logits_rows()),
                 static_cast<long long>(c.n_vocab));
  }
  if (!trace_path.empty() || !timeline_path.empty()) {
    // Spans devices recorded elsewhere (remote workers') join the trace.
    for (Device* d : backends.Devices()) {
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
