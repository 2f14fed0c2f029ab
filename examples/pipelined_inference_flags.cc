#include "ferry/examples/pipelined_inference_flags.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

ABSL_FLAG(std::string, backends, "",
          "Backends in priority order, the CPU last: simN (simulated GPUs), "
          "cpu, or any registered device (e.g. cuda0). Default: cpu with "
          "--model, else sim0,sim1,cpu (the demo's random weights).");
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
          "Wrap --prompt in the model's chat template when it has one; "
          "false: no template at all (as --chat_template=none).");
ABSL_FLAG(std::string, chat_template, "",
          "The chat template of --prompt and of \"messages\" in --prompts: "
          "'' the model's own (GGUF tokenizer.chat_template or "
          "tokenizer_config.json; an unknown one is an error naming it), or "
          "a family in its place: chatml (qwen), llama3, gemma, phi3; none: "
          "no template.");
ABSL_FLAG(std::string, write_weights, "",
          "Write random weights for the config to this safetensors file and "
          "exit.");
ABSL_FLAG(std::string, prompts, "",
          "JSON lines of requests: {\"id\", \"tokens\" (or \"text\", or "
          "\"messages\": [{\"role\", \"content\"}], with --model), "
          "\"max_new_tokens\", "
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
ABSL_FLAG(std::string, kv_cache_type, "",
          "The KV cache's cell type: f32, or f16 (half the memory, "
          "llama.cpp's default; attention then multiplies f16 values, "
          "summed in f32); empty: f32.");
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

absl::Status InvalidFlag(absl::string_view flag, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", why));
}

absl::Status ValidateFlags() {
  auto at_least = [](absl::string_view flag, int64_t value,
                     int64_t min) -> absl::Status {
    if (value < min) {
      return InvalidFlag(flag, absl::StrCat(value, " must be >= ", min));
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
    return InvalidFlag("cpu_threads", "at most 1024");
  }
  if (absl::GetFlag(FLAGS_n_copies) > 64) {
    return InvalidFlag("n_copies", "at most 64");
  }
  if (absl::GetFlag(FLAGS_requests) > 100000) {
    return InvalidFlag("requests", "at most 100000");
  }
  const bool has_model = !absl::GetFlag(FLAGS_model).empty();
  const bool has_prompt = !absl::GetFlag(FLAGS_prompt).empty();
  if (has_model && !absl::GetFlag(FLAGS_weights).empty()) {
    return absl::InvalidArgumentError(
        "--model and --weights are exclusive; give one");
  }
  if (has_prompt && !has_model) {
    return absl::InvalidArgumentError(
        "--prompt needs --model (a GGUF file or HF directory with a "
        "tokenizer)");
  }
  if (has_prompt && !absl::GetFlag(FLAGS_prompts).empty()) {
    return absl::InvalidArgumentError(
        "--prompt and --prompts are exclusive; give one");
  }
  if (const std::string t = absl::GetFlag(FLAGS_kv_cache_type);
      !t.empty() && t != "f32" && t != "f16") {
    return InvalidFlag("kv_cache_type",
                       absl::StrCat("'", t, "' is not 'f32' or 'f16'"));
  }
  const std::string w = absl::GetFlag(FLAGS_workload);
  if (w != "mixed" && w != "decode") {
    return InvalidFlag("workload",
                       absl::StrCat("'", w, "' is not 'mixed' or 'decode'"));
  }
  return absl::OkStatus();
}

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
      return InvalidFlag(
          "split", absl::StrCat("'", part, "' is not a finite number >= 0"));
    }
    out.push_back(v);
  }
  return out;
}

llama::LlamaConfig ConfigFromFlags() {
  llama::LlamaConfig config;
  config.n_layer = absl::GetFlag(FLAGS_layers);
  config.n_embd = absl::GetFlag(FLAGS_embd);
  config.n_head = absl::GetFlag(FLAGS_heads);
  config.n_head_kv = absl::GetFlag(FLAGS_kv_heads);
  config.n_ff = absl::GetFlag(FLAGS_ff);
  config.n_vocab = absl::GetFlag(FLAGS_vocab);
  config.n_ctx = absl::GetFlag(FLAGS_ctx);
  return config;
}

SyntheticWorkload WorkloadFromFlags() {
  SyntheticWorkload w;
  w.requests = absl::GetFlag(FLAGS_requests);
  w.seed = absl::GetFlag(FLAGS_seed);
  w.max_new = absl::GetFlag(FLAGS_gen_tokens);
  if (absl::GetFlag(FLAGS_workload) == "decode") {
    w.min_prompt = w.max_prompt = 4;
    w.min_new = w.max_new;
  } else {
    w.max_prompt = absl::GetFlag(FLAGS_prompt_tokens);
    w.min_prompt = std::min<int64_t>(8, w.max_prompt);
    w.min_new = std::min(4, w.max_new);
  }
  return w;
}

std::string ChatTemplateFromFlags() {
  const std::string choice = absl::GetFlag(FLAGS_chat_template);
  if (choice.empty() && !absl::GetFlag(FLAGS_chat)) return "none";
  return choice;
}

absl::StatusOr<llama::LlamaModelOptions> ModelOptionsFromFlags() {
  llama::LlamaModelOptions options;
  absl::StatusOr<std::vector<double>> split =
      ParseSplit(absl::GetFlag(FLAGS_split));
  if (!split.ok()) return split.status();
  options.split = *std::move(split);
  if (const std::string by = absl::GetFlag(FLAGS_split_by); by == "weights") {
    options.split_unit = llama::SplitUnit::kWeightBytes;
  } else if (by != "layers") {
    return InvalidFlag(
        "split_by", absl::StrCat("'", by, "' is neither layers nor weights"));
  }
  return options;
}

void ApplyEngineFlags(int64_t n_ctx, engine::EngineOptions& options) {
  if (const int64_t len = absl::GetFlag(FLAGS_max_seq_len); len > 0) {
    options.max_sequence_len = std::min(len, n_ctx);
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
  if (const std::string t = absl::GetFlag(FLAGS_kv_cache_type); !t.empty()) {
    options.kv_cache_type = t == "f16" ? DType::kF16 : DType::kF32;
  }
  options.window_buckets = absl::GetFlag(FLAGS_window_buckets);
}

std::string BackendsFromFlags() {
  std::string backends = absl::GetFlag(FLAGS_backends);
  if (!backends.empty()) return backends;
  // A real model runs on the real machine; the demo's random weights (made
  // here or written by --write_weights) show the pipeline over simulated
  // accelerators.
  return absl::GetFlag(FLAGS_model).empty() ? "sim0,sim1,cpu" : "cpu";
}

}  // namespace ferry::examples
