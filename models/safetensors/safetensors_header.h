// The safetensors header: an 8-byte little-endian length, then JSON
//   {"__metadata__": {"key": "value", ...},
//    "name": {"dtype": "F32", "shape": [rows, cols],
//             "data_offsets": [begin, end]}, ...}
// parsed by a small hand-written parser for that subset of JSON (anything
// else inside a tensor entry is skipped). Kept apart from the loader so the
// libFuzzer target links nothing but this and Abseil.
#ifndef FERRY_MODELS_SAFETENSORS_SAFETENSORS_HEADER_H_
#define FERRY_MODELS_SAFETENSORS_SAFETENSORS_HEADER_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace ferry::safetensors {

// Headers larger than this are refused (safetensors' own limit).
inline constexpr uint64_t kMaxSafetensorsHeader = uint64_t{100} << 20;

struct SafetensorInfo {
  std::string dtype;           // "F32", "F16", ...
  std::vector<int64_t> shape;  // Outermost first.
  uint64_t begin = 0;          // Byte offsets in the data section.
  uint64_t end = 0;
};

struct SafetensorsHeader {
  std::map<std::string, std::string> metadata;
  std::map<std::string, SafetensorInfo> tensors;
};

// Parses the JSON header of `file` (named in errors). `data_size` is the
// size of the data section: every tensor's offsets must lie within it, be
// ordered and match dtype x shape. InvalidArgument / DataLoss errors name
// the file and, where there is one, the tensor. Never crashes on any input.
absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(
    absl::string_view json, uint64_t data_size, const std::string& file);

// Bytes per element of a safetensors dtype name, or 0 if unknown.
int SafetensorsDTypeSize(absl::string_view dtype);

// "[2, 3]".
std::string SafetensorsShapeString(absl::Span<const int64_t> shape);

}  // namespace ferry::safetensors

#endif  // FERRY_MODELS_SAFETENSORS_SAFETENSORS_HEADER_H_
