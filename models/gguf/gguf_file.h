// GgufFile: the parsed and validated header of a GGUF v2/v3 file: its
// metadata, its tensor infos and where the tensor data lies.
//
// Layout (little-endian): "GGUF", u32 version, u64 tensor_count,
// u64 metadata_kv_count, the key/value pairs (string key, u32 type, value),
// the tensor infos (string name, u32 n_dims, u64 dims[n_dims] innermost
// first, u32 ggml type, u64 offset), padding to `general.alignment`
// (default 32), then the data section; tensor offsets are relative to it.
//
// Parse() checks everything before trusting it: every count and length
// against the bytes left in the file before allocating for it, value and
// tensor types, bools, duplicate keys and names, dims and their byte size
// (overflow), alignment, each tensor inside the data section and no two
// overlapping. Errors are InvalidArgument/DataLoss statuses naming the file
// and the key or tensor (and offset); memory use is bounded by a small
// multiple of the file size.
//
// Use:
//   FERRY_ASSIGN_OR_RETURN(GgufFile gguf, GgufFile::Open(path));
//   FERRY_ASSIGN_OR_RETURN(int64_t n_layer, gguf.GetInt("llama.block_count"));
//   const GgufTensorInfo* t = gguf.FindTensor("token_embd.weight");
#ifndef FERRY_MODELS_GGUF_GGUF_FILE_H_
#define FERRY_MODELS_GGUF_GGUF_FILE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "ferry/models/gguf/gguf_source.h"
#include "ferry/models/gguf/gguf_value.h"
#include "ferry/quant/quant_type.h"
#include "ferry/runtime/file.h"

namespace ferry::gguf {

inline constexpr uint32_t kGgufDefaultAlignment = 32;
// ggml's limits: 4 dims, names shorter than 64 bytes.
inline constexpr int kGgufMaxDims = 4;
inline constexpr size_t kGgufMaxTensorName = 63;
// Keys longer than this are rejected (the spec's limit is 65535).
inline constexpr size_t kGgufMaxKeyLength = 65535;
// Arrays of arrays deeper than this are rejected.
inline constexpr int kGgufMaxArrayDepth = 8;

// Opens `path` for reading, refusing (InvalidArgument naming the path and
// what it is) anything but a regular file: open() of a FIFO blocks until a
// writer comes, and a directory is no GGUF file.
absl::StatusOr<File> OpenGgufForRead(const std::string& path);

struct GgufTensorInfo {
  std::string name;
  // ggml's ne: innermost (contiguous) dimension first, 1 to 4 entries.
  std::vector<int64_t> dims;
  quant::QuantType type = quant::QuantType::kF32;
  uint64_t offset = 0;  // Relative to the data section.
  uint64_t size = 0;    // Bytes.

  int64_t num_elements() const;
  // Rows of dims[0] elements.
  int64_t num_rows() const;
};

// Thread-compatible; immutable after Parse.
class GgufFile {
 public:
  // Opens and parses the file at `path`.
  static absl::StatusOr<GgufFile> Open(const std::string& path);
  // Parses the header from `source`. Does not keep `source`.
  static absl::StatusOr<GgufFile> Parse(GgufSource& source);

  const std::string& name() const { return name_; }
  uint32_t version() const { return version_; }
  uint64_t file_size() const { return file_size_; }
  uint32_t alignment() const { return alignment_; }
  // File offset of the data section and its size in bytes.
  uint64_t data_offset() const { return data_offset_; }
  uint64_t data_size() const { return file_size_ - data_offset_; }

  // Metadata in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const {
    return metadata_;
  }
  // nullptr when `key` is absent.
  const GgufValue* Find(absl::string_view key) const;
  bool Has(absl::string_view key) const { return Find(key) != nullptr; }

  // Typed accessors. NotFound if the key is absent; InvalidArgument naming
  // the key if its type does not fit. GetInt takes any integer type whose
  // value fits int64; GetFloat float32 or float64.
  absl::StatusOr<int64_t> GetInt(absl::string_view key) const;
  absl::StatusOr<double> GetFloat(absl::string_view key) const;
  absl::StatusOr<bool> GetBool(absl::string_view key) const;
  absl::StatusOr<std::string> GetString(absl::string_view key) const;
  absl::StatusOr<const GgufArray*> GetArray(absl::string_view key) const;
  // An array whose elements are exactly of type T (or of string, for
  // GetStringArray); the span stays valid as long as this GgufFile.
  template <typename T>
  absl::StatusOr<absl::Span<const T>> GetArrayOf(absl::string_view key) const;
  absl::StatusOr<absl::Span<const std::string>> GetStringArray(
      absl::string_view key) const;

  // Tensors in file order.
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  // nullptr when absent.
  const GgufTensorInfo* FindTensor(absl::string_view name) const;

  // An error naming the file and `what`, for callers that validate further.
  absl::Status Error(absl::StatusCode code, absl::string_view what) const;

 private:
  friend class GgufParser;
  GgufFile() = default;

  absl::Status TypeError(absl::string_view key, const GgufValue& value,
                         absl::string_view expected) const;

  std::string name_;
  uint32_t version_ = 0;
  uint64_t file_size_ = 0;
  uint32_t alignment_ = kGgufDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  absl::flat_hash_map<std::string, size_t> metadata_index_;
  std::vector<GgufTensorInfo> tensors_;
  absl::flat_hash_map<std::string, size_t> tensor_index_;
};

template <typename T>
absl::StatusOr<absl::Span<const T>> GgufFile::GetArrayOf(
    absl::string_view key) const {
  const GgufValue* value = Find(key);
  if (value == nullptr) {
    return Error(
        absl::StatusCode::kNotFound,
        std::string("metadata key '") + std::string(key) + "' is missing");
  }
  const GgufArray* array = value->AsArray();
  if (array == nullptr || array->element_type != GgufScalarTraits<T>::kType) {
    return TypeError(
        key, *value,
        "array of " + GgufValueTypeName(GgufScalarTraits<T>::kType));
  }
  return array->Elements<T>();
}

}  // namespace ferry::gguf

#endif  // FERRY_MODELS_GGUF_GGUF_FILE_H_
