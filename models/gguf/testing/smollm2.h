// Finds the real SmolLM2-135M-Instruct Q4_1 GGUF for the tests that need it
// (it is 94 MiB, so not in the repository): $FERRY_SMOLLM2_GGUF, else
// $FERRY_CACHE_DIR/smollm2/, else $HOME/.cache/ferry/smollm2/, where
// tools/fetch_smollm2.sh puts it.
#ifndef FERRY_MODELS_GGUF_TESTING_SMOLLM2_H_
#define FERRY_MODELS_GGUF_TESTING_SMOLLM2_H_

#include <optional>
#include <string>

namespace ferry::gguf::testing {

inline constexpr char kSmolLm2FileName[] = "SmolLM2-135M-Instruct.Q4_1.gguf";

// The path of the file, or nullopt if none of the places has it.
std::optional<std::string> FindSmolLm2Gguf();

// What a skipped test prints: where it looked and how to fetch the file.
std::string SmolLm2MissingMessage();

// The SmolLM2 GGUF requantized to `type` ("Q4_K_M", "Q6_K", ...) by
// tools/requantize_smollm2.sh, SmolLM2-135M-Instruct.<type>.gguf in
// $FERRY_CACHE_DIR/smollm2/ or $HOME/.cache/ferry/smollm2/, or nullopt.
std::optional<std::string> FindSmolLm2Requantized(const std::string& type);

// What a test skipped for the lack of that file prints.
std::string SmolLm2RequantizedMissingMessage(const std::string& type);

}  // namespace ferry::gguf::testing

// Skips the current test, visibly, when the model file is absent; else
// declares `std::string var` holding its path.
#define FERRY_REQUIRE_SMOLLM2(var)                                   \
  const std::optional<std::string> var##_found =                     \
      ::ferry::gguf::testing::FindSmolLm2Gguf();                     \
  if (!var##_found.has_value()) {                                    \
    GTEST_SKIP() << ::ferry::gguf::testing::SmolLm2MissingMessage(); \
  }                                                                  \
  const std::string var = *var##_found

#endif  // FERRY_MODELS_GGUF_TESTING_SMOLLM2_H_
