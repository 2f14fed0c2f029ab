// Encode and decode throughput (MB/s of UTF-8 text) on the test corpus
// (testdata/corpus.json: many scripts, emoji, code) joined and repeated to
// about 1 MiB. testdata/bench_reference.py measures `tokenizers` and
// llama.cpp on the same text; benchmark_vs_reference.sh runs both:
//   tokenizer/benchmark_vs_reference.sh
// The SmolLM2 benchmarks need tools/fetch_smollm2.sh's file.
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "benchmark/benchmark.h"
#include "ferry/models/gguf/gguf_file.h"
#include "ferry/models/gguf/testing/smollm2.h"
#include "ferry/tokenizer/gguf_tokenizer.h"
#include "ferry/tokenizer/hf_tokenizer_json.h"
#include "ferry/tokenizer/stream_decoder.h"
#include "ferry/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace ferry::tokenizer {
namespace {

constexpr size_t kTargetBytes = size_t{1} << 20;

// The corpus strings joined by newlines, repeated to ~1 MiB (the same text
// bench_reference.py builds). Times are wall-clock, as Python measures them.
const std::string& Text() {
  static const std::string* text = [] {
    std::ifstream in("tokenizer/testdata/corpus.json");
    std::stringstream s;
    s << in.rdbuf();
    std::string joined;
    for (const auto& line : nlohmann::json::parse(s.str())) {
      joined += line.get<std::string>();
      joined += '\n';
    }
    auto* out = new std::string();
    while (out->size() < kTargetBytes) *out += joined;
    return out;
  }();
  return *text;
}

const Tokenizer* Load(const std::string& which) {
  static auto* cache = new std::map<std::string, std::unique_ptr<Tokenizer>>();
  auto it = cache->find(which);
  if (it != cache->end()) return it->second.get();
  std::unique_ptr<Tokenizer> tok;
  if (which == "smollm2") {
    if (auto path = gguf::testing::FindSmolLm2Gguf()) {
      auto file = gguf::GgufFile::Open(*path);
      if (file.ok())
        tok = std::move(TokenizerFromGguf(*file)).value_or(nullptr);
    }
  } else {
    tok = std::move(TokenizerFromHfJsonFile("tokenizer/testdata/" + which +
                                            ".tokenizer.json"))
              .value_or(nullptr);
  }
  return (*cache)[which] = std::move(tok), (*cache)[which].get();
}

void BM_Encode(benchmark::State& state, std::string which) {
  const Tokenizer* tok = Load(which);
  if (tok == nullptr) {
    state.SkipWithError("tokenizer not available (tools/fetch_smollm2.sh)");
    return;
  }
  const std::string& text = Text();
  size_t tokens = 0;
  for (auto _ : state) {
    auto ids = tok->Encode(text);
    tokens = ids->size();
    benchmark::DoNotOptimize(ids->data());
  }
  state.SetBytesProcessed(state.iterations() * text.size());
  state.counters["tokens"] = static_cast<double>(tokens);
}

// The same text one line at a time (many short encodes, as a batch of
// prompts would be).
void BM_EncodeLines(benchmark::State& state, std::string which) {
  const Tokenizer* tok = Load(which);
  if (tok == nullptr) {
    state.SkipWithError("tokenizer not available (tools/fetch_smollm2.sh)");
    return;
  }
  const std::vector<std::string> lines = absl::StrSplit(Text(), '\n');
  size_t tokens = 0;
  for (auto _ : state) {
    tokens = 0;
    for (const std::string& line : lines) tokens += tok->Encode(line)->size();
    benchmark::DoNotOptimize(tokens);
  }
  state.SetBytesProcessed(state.iterations() * Text().size());
  state.counters["tokens"] = static_cast<double>(tokens);
}

void BM_Decode(benchmark::State& state, std::string which) {
  const Tokenizer* tok = Load(which);
  if (tok == nullptr) {
    state.SkipWithError("tokenizer not available (tools/fetch_smollm2.sh)");
    return;
  }
  const std::vector<int32_t> ids = *tok->Encode(Text());
  for (auto _ : state) {
    std::string text = tok->Decode(ids);
    benchmark::DoNotOptimize(text.data());
  }
  state.SetBytesProcessed(state.iterations() * Text().size());
}

void BM_StreamDecode(benchmark::State& state, std::string which) {
  const Tokenizer* tok = Load(which);
  if (tok == nullptr) {
    state.SkipWithError("tokenizer not available (tools/fetch_smollm2.sh)");
    return;
  }
  const std::vector<int32_t> ids = *tok->Encode(Text());
  for (auto _ : state) {
    StreamDecoder stream(*tok);
    size_t bytes = 0;
    for (int32_t id : ids) bytes += stream.Push(id).size();
    bytes += stream.Finish().size();
    benchmark::DoNotOptimize(bytes);
  }
  state.SetBytesProcessed(state.iterations() * Text().size());
}

BENCHMARK_CAPTURE(BM_Encode, smollm2_gguf, "smollm2")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Encode, bytelevel_json, "bytelevel")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Encode, llama3_style_json, "llama3_style")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Encode, spm_style_json, "spm_style")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_EncodeLines, smollm2_gguf, "smollm2")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_EncodeLines, bytelevel_json, "bytelevel")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Decode, smollm2_gguf, "smollm2")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_StreamDecode, smollm2_gguf, "smollm2")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace ferry::tokenizer
