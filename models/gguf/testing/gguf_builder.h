// GgufBuilder: writes GGUF v3 bytes for tests (valid files to parse, and
// corrupted ones by editing the result). Not a general writer: values are
// given as GgufValue, tensor data as bytes.
#ifndef FERRY_MODELS_GGUF_TESTING_GGUF_BUILDER_H_
#define FERRY_MODELS_GGUF_TESTING_GGUF_BUILDER_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "ferry/models/gguf/gguf_value.h"
#include "ferry/quant/quant_type.h"

namespace ferry::gguf::testing {

// Thread-compatible.
class GgufBuilder {
 public:
  GgufBuilder& Set(std::string key, GgufValue value);
  GgufBuilder& SetString(std::string key, std::string value);
  GgufBuilder& SetU32(std::string key, uint32_t value);
  GgufBuilder& SetF32(std::string key, float value);
  GgufBuilder& SetBool(std::string key, bool value);
  GgufBuilder& SetStrings(std::string key, std::vector<std::string> values);
  GgufBuilder& SetF32s(std::string key, const std::vector<float>& values);
  GgufBuilder& SetI32s(std::string key, const std::vector<int32_t>& values);

  // Adds a tensor; `data` must hold its exact byte size (RowBytes * rows).
  // Offsets are assigned in order, aligned to the alignment.
  GgufBuilder& AddTensor(std::string name, std::vector<int64_t> dims,
                         quant::QuantType type, std::string data);

  // The file's bytes; `alignment` is also written as general.alignment
  // unless it is the default 32.
  std::string Build(uint32_t alignment = 32) const;

 private:
  struct Tensor {
    std::string name;
    std::vector<int64_t> dims;
    quant::QuantType type;
    std::string data;
  };
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::vector<Tensor> tensors_;
};

// Appends the GGUF encoding of `value` (without its type id) to `out`.
void AppendGgufValue(const GgufValue& value, std::string& out);

}  // namespace ferry::gguf::testing

#endif  // FERRY_MODELS_GGUF_TESTING_GGUF_BUILDER_H_
