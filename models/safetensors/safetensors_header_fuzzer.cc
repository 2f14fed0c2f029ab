// libFuzzer entry point for the safetensors header parser: any bytes, as a
// header of any data-section size, must give a status, never a crash, a
// hang or a sanitizer report. With FERRY_FUZZ_SELF_TEST it is a unit test
// that runs the entry point over seeds and their mutations.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "ferry/models/safetensors/safetensors_header.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The first 8 bytes pick the data-section size, the rest is the header.
  uint64_t data_size = 0;
  if (size >= 8) {
    std::memcpy(&data_size, data, 8);
    data += 8;
    size -= 8;
  }
  const std::string json(reinterpret_cast<const char*>(data), size);
  auto header = ferry::safetensors::ParseSafetensorsHeader(json, data_size,
                                                           "fuzz.safetensors");
  if (header.ok()) {
    for (const auto& [name, info] : header->tensors) {
      if (info.begin > info.end || info.end > data_size) __builtin_trap();
    }
  }
  return 0;
}

#ifdef FERRY_FUZZ_SELF_TEST
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace {

TEST(SafetensorsHeaderFuzzTest, SeedsAndMutationsNeverCrash) {
  const std::vector<std::string> seeds = {
      R"({"__metadata__":{"n_layer":"2"},"a":{"dtype":"F32","shape":[2,3],)"
      R"("data_offsets":[0,24]}})",
      R"({"b":{"dtype":"F16","shape":[],"data_offsets":[0,2],"x":[{}]}})",
      "{}",
      R"({"a\u00e9":{"shape":[1],"dtype":"I8","data_offsets":[0,1]}})",
  };
  std::mt19937_64 rng(1);
  for (const std::string& seed : seeds) {
    for (int i = 0; i < 3000; ++i) {
      std::string input(8, '\0');
      const uint64_t data_size = rng() % 64;
      std::memcpy(input.data(), &data_size, 8);
      std::string body = seed;
      const int edits = 1 + static_cast<int>(rng() % 4);
      for (int e = 0; e < edits && !body.empty(); ++e) {
        const size_t at = rng() % body.size();
        switch (rng() % 3) {
          case 0:
            body[at] = static_cast<char>(rng());
            break;
          case 1:
            body.erase(at, 1 + rng() % 4);
            break;
          default:
            body.insert(at, 1, "{}[]\",:0-9e\\u"[rng() % 14]);
        }
      }
      input += body;
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()),
                             input.size());
    }
  }
}

}  // namespace
#endif  // FERRY_FUZZ_SELF_TEST
