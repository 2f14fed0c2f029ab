// libFuzzer entry point for the GGUF parser: any bytes must give a status,
// never a crash, a hang, a sanitizer report or a huge allocation; a parsed
// file's tensors must lie inside it. With FERRY_FUZZ_SELF_TEST it is a unit
// test that runs the entry point over seed files and their mutations.
// build_fuzzer.sh builds the real libFuzzer binary with clang.
#include <cstddef>
#include <cstdint>
#include <string>

#include "ferry/models/gguf/gguf_file.h"
#include "ferry/models/gguf/gguf_source.h"
#include "ferry/models/gguf/llama_hparams.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  ferry::gguf::MemoryGgufSource source(bytes, "fuzz.gguf");
  auto file = ferry::gguf::GgufFile::Parse(source);
  if (!file.ok()) return 0;
  if (file->data_offset() > size) __builtin_trap();
  for (const auto& t : file->tensors()) {
    if (t.offset > file->data_size() || t.size > file->data_size() - t.offset) {
      __builtin_trap();
    }
  }
  for (const auto& [key, value] : file->metadata()) {
    (void)value.DebugString();
    (void)file->GetInt(key);
    (void)file->GetFloat(key);
    (void)file->GetStringArray(key);
    (void)file->GetArrayOf<float>(key);
  }
  (void)ferry::gguf::ReadLlamaHParams(*file);
  return 0;
}

#ifdef FERRY_FUZZ_SELF_TEST
#include <random>
#include <vector>

#include "ferry/models/gguf/testing/gguf_builder.h"
#include "gtest/gtest.h"

namespace {

using ::ferry::gguf::testing::GgufBuilder;
using ::ferry::quant::QuantType;

std::vector<std::string> Seeds() {
  GgufBuilder a;
  a.SetString("general.architecture", "llama")
      .SetU32("llama.block_count", 1)
      .SetStrings("tokenizer.ggml.tokens", {"a", "bc", ""})
      .SetF32s("tokenizer.ggml.scores", {1, 2, 3})
      .SetBool("b", true)
      .AddTensor("t", {32, 2}, QuantType::kQ4_0, std::string(36, '\1'))
      .AddTensor("u", {3}, QuantType::kF16, std::string(6, '\2'));
  GgufBuilder b;
  b.SetU32("general.alignment", 64)
      .AddTensor("x", {4}, QuantType::kF32, std::string(16, '\3'));
  return {a.Build(), b.Build(), GgufBuilder().Build()};
}

TEST(GgufFuzzTest, SeedsAndMutationsNeverCrash) {
  std::mt19937_64 rng(1);
  for (const std::string& seed : Seeds()) {
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(seed.data()),
                           seed.size());
    for (int i = 0; i < 4000; ++i) {
      std::string input = seed;
      const int edits = 1 + static_cast<int>(rng() % 4);
      for (int e = 0; e < edits && !input.empty(); ++e) {
        const size_t at = rng() % input.size();
        switch (rng() % 4) {
          case 0:
            input[at] = static_cast<char>(rng());
            break;
          case 1:  // A large or boundary value in a length/count field.
            for (int k = 0; k < 8 && at + k < input.size(); ++k) {
              input[at + k] = static_cast<char>(rng() % 2 ? 0xFF : 0x00);
            }
            break;
          case 2:
            input.erase(at, 1 + rng() % 8);
            break;
          default:
            input.insert(at, 1, static_cast<char>(rng()));
        }
      }
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()),
                             input.size());
    }
  }
}

}  // namespace
#endif  // FERRY_FUZZ_SELF_TEST
