#include "ferry/models/gguf/gguf_file.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>
#include <type_traits>
#include <variant>

#include "absl/strings/str_cat.h"
#include "ferry/runtime/file.h"
#include "ferry/runtime/status_macros.h"

namespace ferry::gguf {

int64_t GgufTensorInfo::num_elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

int64_t GgufTensorInfo::num_rows() const {
  return dims.empty() ? 0 : num_elements() / dims[0];
}

// Reads the header sequentially through a bounded buffer, checking every
// length against the bytes left before allocating for it.
class GgufParser {
 public:
  explicit GgufParser(GgufSource& source)
      : source_(source), size_(source.size()) {}

  absl::StatusOr<GgufFile> Parse();

 private:
  static constexpr size_t kChunk = size_t{1} << 20;
  // ReadString's max_length for strings limited only by the file's size.
  static constexpr uint64_t kNoLimit = ~uint64_t{0};

  uint64_t remaining() const { return size_ - pos_; }

  // An error naming the file, the offset and `what`.
  absl::Status Error(absl::StatusCode code, absl::string_view what) const {
    return absl::Status(code, absl::StrCat(source_.name(), ": ", what,
                                           " (at offset ", pos_, ")"));
  }
  absl::Status Truncated(absl::string_view what, uint64_t need) const {
    return Error(absl::StatusCode::kDataLoss,
                 absl::StrCat(what, " needs ", need, " bytes but only ",
                              remaining(), " remain (truncated file?)"));
  }

  absl::Status Read(void* dst, size_t n, absl::string_view what);
  template <typename T>
  absl::StatusOr<T> ReadScalar(absl::string_view what) {
    T v;
    FERRY_RETURN_IF_ERROR(Read(&v, sizeof(T), what));
    return v;
  }
  absl::StatusOr<std::string> ReadString(absl::string_view what,
                                         uint64_t max_length);
  absl::StatusOr<GgufValue> ReadValue(GgufValueType type,
                                      absl::string_view what, int depth);
  absl::StatusOr<GgufArray> ReadArray(absl::string_view what, int depth);
  absl::Status ReadTensorInfo(GgufFile& file);
  absl::Status CheckTensorPlacement(GgufFile& file);

  GgufSource& source_;
  const uint64_t size_;
  uint64_t pos_ = 0;
  std::vector<std::byte> buffer_;
  uint64_t buffer_start_ = 0;
};

absl::Status GgufParser::Read(void* dst, size_t n, absl::string_view what) {
  if (n > remaining()) return Truncated(what, n);
  auto* out = static_cast<std::byte*>(dst);
  while (n > 0) {
    if (pos_ >= buffer_start_ && pos_ < buffer_start_ + buffer_.size()) {
      const size_t at = static_cast<size_t>(pos_ - buffer_start_);
      const size_t take = std::min(n, buffer_.size() - at);
      std::memcpy(out, buffer_.data() + at, take);
      out += take;
      n -= take;
      pos_ += take;
    } else if (n >= kChunk) {
      FERRY_RETURN_IF_ERROR(source_.ReadAt(pos_, {out, n}));
      pos_ += n;
      return absl::OkStatus();
    } else {
      buffer_.resize(
          static_cast<size_t>(std::min<uint64_t>(kChunk, remaining())));
      buffer_start_ = pos_;
      FERRY_RETURN_IF_ERROR(source_.ReadAt(pos_, absl::MakeSpan(buffer_)));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> GgufParser::ReadString(absl::string_view what,
                                                   uint64_t max_length) {
  FERRY_ASSIGN_OR_RETURN(uint64_t length,
                         ReadScalar<uint64_t>(absl::StrCat(what, " length")));
  if (length > max_length) {
    return Error(absl::StatusCode::kInvalidArgument,
                 absl::StrCat(what, " is ", length, " bytes long, over the ",
                              max_length, "-byte limit"));
  }
  if (length > remaining()) return Truncated(what, length);
  std::string s(static_cast<size_t>(length), '\0');
  FERRY_RETURN_IF_ERROR(Read(s.data(), s.size(), what));
  return s;
}

absl::StatusOr<GgufArray> GgufParser::ReadArray(absl::string_view what,
                                                int depth) {
  if (depth >= kGgufMaxArrayDepth) {
    return Error(
        absl::StatusCode::kInvalidArgument,
        absl::StrCat(what, ": arrays nested deeper than ", kGgufMaxArrayDepth));
  }
  GgufArray array;
  FERRY_ASSIGN_OR_RETURN(
      uint32_t element_type,
      ReadScalar<uint32_t>(absl::StrCat(what, ": array element type")));
  if (element_type > static_cast<uint32_t>(GgufValueType::kFloat64)) {
    return Error(
        absl::StatusCode::kInvalidArgument,
        absl::StrCat(what, ": unknown array element type ", element_type));
  }
  array.element_type = static_cast<GgufValueType>(element_type);
  FERRY_ASSIGN_OR_RETURN(
      array.size, ReadScalar<uint64_t>(absl::StrCat(what, ": array length")));
  const std::string elements =
      absl::StrCat(what, ": array of ", array.size, " ",
                   GgufValueTypeName(array.element_type));
  // The fewest bytes one element can take in the file.
  const size_t scalar = GgufScalarSize(array.element_type);
  const uint64_t min_element =
      scalar != 0 ? scalar
                  : (array.element_type == GgufValueType::kString ? 8 : 12);
  if (array.size > remaining() / min_element) {
    return Truncated(elements,
                     std::numeric_limits<uint64_t>::max() / 2 < array.size
                         ? std::numeric_limits<uint64_t>::max()
                         : array.size * min_element);
  }
  const size_t count = static_cast<size_t>(array.size);
  switch (array.element_type) {
    case GgufValueType::kString:
      array.strings.reserve(count);
      for (size_t i = 0; i < count; ++i) {
        FERRY_ASSIGN_OR_RETURN(
            std::string s,
            ReadString(absl::StrCat(what, "[", i, "]"), kNoLimit));
        array.strings.push_back(std::move(s));
      }
      break;
    case GgufValueType::kArray:
      array.arrays.reserve(count);
      for (size_t i = 0; i < count; ++i) {
        FERRY_ASSIGN_OR_RETURN(
            GgufArray inner,
            ReadArray(absl::StrCat(what, "[", i, "]"), depth + 1));
        array.arrays.push_back(std::move(inner));
      }
      break;
    default:
      array.scalars.resize(count * scalar);
      FERRY_RETURN_IF_ERROR(
          Read(array.scalars.data(), array.scalars.size(), elements));
      if (array.element_type == GgufValueType::kBool) {
        for (size_t i = 0; i < count; ++i) {
          if (static_cast<uint8_t>(array.scalars[i]) > 1) {
            return Error(absl::StatusCode::kInvalidArgument,
                         absl::StrCat(what, "[", i, "]: bool is ",
                                      static_cast<int>(array.scalars[i]),
                                      ", not 0 or 1"));
          }
        }
      }
      break;
  }
  return array;
}

absl::StatusOr<GgufValue> GgufParser::ReadValue(GgufValueType type,
                                                absl::string_view what,
                                                int depth) {
  // Scalars: read into the variant alternative of the same index.
  auto scalar = [&](auto zero) -> absl::StatusOr<GgufValue> {
    using T = decltype(zero);
    FERRY_ASSIGN_OR_RETURN(T v, ReadScalar<T>(what));
    return GgufValue(GgufValue::Storage(v));
  };
  switch (type) {
    case GgufValueType::kUint8:
      return scalar(uint8_t{});
    case GgufValueType::kInt8:
      return scalar(int8_t{});
    case GgufValueType::kUint16:
      return scalar(uint16_t{});
    case GgufValueType::kInt16:
      return scalar(int16_t{});
    case GgufValueType::kUint32:
      return scalar(uint32_t{});
    case GgufValueType::kInt32:
      return scalar(int32_t{});
    case GgufValueType::kFloat32:
      return scalar(float{});
    case GgufValueType::kUint64:
      return scalar(uint64_t{});
    case GgufValueType::kInt64:
      return scalar(int64_t{});
    case GgufValueType::kFloat64:
      return scalar(double{});
    case GgufValueType::kBool: {
      FERRY_ASSIGN_OR_RETURN(uint8_t b, ReadScalar<uint8_t>(what));
      if (b > 1) {
        return Error(absl::StatusCode::kInvalidArgument,
                     absl::StrCat(what, ": bool is ", static_cast<int>(b),
                                  ", not 0 or 1"));
      }
      return GgufValue(GgufValue::Storage(b == 1));
    }
    case GgufValueType::kString: {
      FERRY_ASSIGN_OR_RETURN(std::string s, ReadString(what, kNoLimit));
      return GgufValue(GgufValue::Storage(std::move(s)));
    }
    case GgufValueType::kArray: {
      FERRY_ASSIGN_OR_RETURN(GgufArray a, ReadArray(what, depth));
      return GgufValue(GgufValue::Storage(std::move(a)));
    }
  }
  return Error(
      absl::StatusCode::kInvalidArgument,
      absl::StrCat(what, ": unknown value type ", static_cast<uint32_t>(type)));
}

absl::Status GgufParser::ReadTensorInfo(GgufFile& file) {
  const size_t index = file.tensors_.size();
  GgufTensorInfo t;
  FERRY_ASSIGN_OR_RETURN(
      t.name,
      ReadString(absl::StrCat("tensor #", index, " name"), kGgufMaxTensorName));
  const std::string what = absl::StrCat("tensor '", t.name, "'");
  if (t.name.empty()) {
    return Error(absl::StatusCode::kInvalidArgument,
                 absl::StrCat("tensor #", index, " has an empty name"));
  }
  if (file.tensor_index_.contains(t.name)) {
    return Error(absl::StatusCode::kInvalidArgument,
                 absl::StrCat(what, " appears twice"));
  }
  FERRY_ASSIGN_OR_RETURN(uint32_t n_dims,
                         ReadScalar<uint32_t>(absl::StrCat(what, " n_dims")));
  if (n_dims < 1 || n_dims > kGgufMaxDims) {
    return Error(
        absl::StatusCode::kInvalidArgument,
        absl::StrCat(what, " has ", n_dims, " dims, not 1 to ", kGgufMaxDims));
  }
  int64_t elements = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    FERRY_ASSIGN_OR_RETURN(uint64_t dim,
                           ReadScalar<uint64_t>(absl::StrCat(what, " dims")));
    if (dim < 1 || dim > static_cast<uint64_t>(
                             std::numeric_limits<int64_t>::max() / elements)) {
      return Error(absl::StatusCode::kInvalidArgument,
                   absl::StrCat(what, " dim ", d, " is ", dim,
                                dim < 1 ? " (must be at least 1)"
                                        : " (element count overflows)"));
    }
    elements *= static_cast<int64_t>(dim);
    t.dims.push_back(static_cast<int64_t>(dim));
  }
  FERRY_ASSIGN_OR_RETURN(uint32_t type_id,
                         ReadScalar<uint32_t>(absl::StrCat(what, " type")));
  const quant::QuantTypeInfo* info = quant::FindQuantTypeInfo(type_id);
  if (info == nullptr) {
    return Error(absl::StatusCode::kInvalidArgument,
                 absl::StrCat(what, " has unknown ggml type id ", type_id));
  }
  t.type = info->type;
  absl::StatusOr<int64_t> row_bytes = quant::RowBytesChecked(t.type, t.dims[0]);
  if (!row_bytes.ok()) {
    return Error(absl::StatusCode::kInvalidArgument,
                 absl::StrCat(what, ": ", row_bytes.status().message()));
  }
  const int64_t rows = elements / t.dims[0];
  if (*row_bytes != 0 &&
      rows > std::numeric_limits<int64_t>::max() / *row_bytes) {
    return Error(absl::StatusCode::kInvalidArgument,
                 absl::StrCat(what, ": byte size overflows"));
  }
  t.size = static_cast<uint64_t>(*row_bytes * rows);
  FERRY_ASSIGN_OR_RETURN(t.offset,
                         ReadScalar<uint64_t>(absl::StrCat(what, " offset")));
  file.tensor_index_.emplace(t.name, index);
  file.tensors_.push_back(std::move(t));
  return absl::OkStatus();
}

absl::Status GgufParser::CheckTensorPlacement(GgufFile& file) {
  const uint64_t data_size = file.data_size();
  for (const GgufTensorInfo& t : file.tensors_) {
    if (t.offset % file.alignment_ != 0) {
      return file.Error(absl::StatusCode::kInvalidArgument,
                        absl::StrCat("tensor '", t.name, "' offset ", t.offset,
                                     " is not a multiple of the alignment ",
                                     file.alignment_));
    }
    if (t.offset > data_size || t.size > data_size - t.offset) {
      return file.Error(absl::StatusCode::kDataLoss,
                        absl::StrCat("tensor '", t.name, "' (", t.size,
                                     " bytes at data offset ", t.offset,
                                     ") ends past the data section's ",
                                     data_size, " bytes (truncated file?)"));
    }
  }
  std::vector<size_t> order(file.tensors_.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return file.tensors_[a].offset < file.tensors_[b].offset;
  });
  for (size_t i = 1; i < order.size(); ++i) {
    const GgufTensorInfo& prev = file.tensors_[order[i - 1]];
    const GgufTensorInfo& cur = file.tensors_[order[i]];
    if (prev.offset + prev.size > cur.offset) {
      return file.Error(
          absl::StatusCode::kInvalidArgument,
          absl::StrCat("tensors '", prev.name, "' [", prev.offset, ", ",
                       prev.offset + prev.size, ") and '", cur.name, "' [",
                       cur.offset, ", ", cur.offset + cur.size, ") overlap"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<GgufFile> GgufParser::Parse() {
  GgufFile file;
  file.name_ = source_.name();
  file.file_size_ = size_;
  char magic[4];
  FERRY_RETURN_IF_ERROR(Read(magic, 4, "magic"));
  if (std::memcmp(magic, "GGUF", 4) != 0) {
    return Error(absl::StatusCode::kInvalidArgument,
                 "not a GGUF file (no \"GGUF\" magic)");
  }
  FERRY_ASSIGN_OR_RETURN(file.version_, ReadScalar<uint32_t>("version"));
  if ((file.version_ & 0xFFFFu) == 0 && file.version_ != 0) {
    return Error(absl::StatusCode::kUnimplemented,
                 absl::StrCat("big-endian GGUF (version bytes ", file.version_,
                              ") is not supported"));
  }
  if (file.version_ != 2 && file.version_ != 3) {
    return Error(absl::StatusCode::kUnimplemented,
                 absl::StrCat("GGUF version ", file.version_,
                              " is not supported (only 2 and 3)"));
  }
  FERRY_ASSIGN_OR_RETURN(uint64_t tensor_count,
                         ReadScalar<uint64_t>("tensor count"));
  FERRY_ASSIGN_OR_RETURN(uint64_t kv_count,
                         ReadScalar<uint64_t>("metadata count"));
  // Smallest encodings: a key/value is 8 + 1 + 4 + 1 bytes, a tensor info
  // 8 + 1 + 4 + 8 + 4 + 8.
  if (kv_count > remaining() / 14) {
    return Truncated(
        absl::StrCat(kv_count, " metadata entries"),
        kv_count > (uint64_t{1} << 59) ? ~uint64_t{0} : kv_count * 14);
  }
  if (tensor_count > remaining() / 33) {
    return Truncated(
        absl::StrCat(tensor_count, " tensor infos"),
        tensor_count > (uint64_t{1} << 58) ? ~uint64_t{0} : tensor_count * 33);
  }
  file.metadata_.reserve(static_cast<size_t>(kv_count));
  for (uint64_t i = 0; i < kv_count; ++i) {
    FERRY_ASSIGN_OR_RETURN(
        std::string key,
        ReadString(absl::StrCat("metadata key #", i), kGgufMaxKeyLength));
    if (key.empty()) {
      return Error(absl::StatusCode::kInvalidArgument,
                   absl::StrCat("metadata key #", i, " is empty"));
    }
    const std::string what = absl::StrCat("metadata key '", key, "'");
    if (file.metadata_index_.contains(key)) {
      return Error(absl::StatusCode::kInvalidArgument,
                   absl::StrCat(what, " appears twice"));
    }
    FERRY_ASSIGN_OR_RETURN(uint32_t type,
                           ReadScalar<uint32_t>(absl::StrCat(what, " type")));
    if (type > static_cast<uint32_t>(GgufValueType::kFloat64)) {
      return Error(absl::StatusCode::kInvalidArgument,
                   absl::StrCat(what, " has unknown value type ", type));
    }
    FERRY_ASSIGN_OR_RETURN(
        GgufValue value, ReadValue(static_cast<GgufValueType>(type), what, 0));
    file.metadata_index_.emplace(key, file.metadata_.size());
    file.metadata_.emplace_back(std::move(key), std::move(value));
  }
  if (const GgufValue* a = file.Find("general.alignment"); a != nullptr) {
    const uint32_t* alignment = a->As<uint32_t>();
    if (alignment == nullptr || *alignment == 0 ||
        (*alignment & (*alignment - 1)) != 0) {
      return Error(
          absl::StatusCode::kInvalidArgument,
          absl::StrCat("metadata key 'general.alignment' is ", a->DebugString(),
                       " of type ", GgufValueTypeName(a->type()),
                       "; expected a power of two as uint32"));
    }
    file.alignment_ = *alignment;
  }
  file.tensors_.reserve(static_cast<size_t>(tensor_count));
  for (uint64_t i = 0; i < tensor_count; ++i) {
    FERRY_RETURN_IF_ERROR(ReadTensorInfo(file));
  }
  // The data section starts at the next multiple of the alignment (a file
  // without tensors may end before it).
  const uint64_t padding =
      (file.alignment_ - pos_ % file.alignment_) % file.alignment_;
  file.data_offset_ = padding > remaining() ? size_ : pos_ + padding;
  if (padding > remaining() && tensor_count > 0) {
    return Truncated("padding before the data section", padding);
  }
  FERRY_RETURN_IF_ERROR(CheckTensorPlacement(file));
  return file;
}

absl::StatusOr<GgufFile> GgufFile::Parse(GgufSource& source) {
  return GgufParser(source).Parse();
}

absl::StatusOr<File> OpenGgufForRead(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(
        absl::StrCat("cannot open '", path, "': ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    const char* kind = S_ISDIR(st.st_mode)    ? "a directory"
                       : S_ISFIFO(st.st_mode) ? "a FIFO"
                       : S_ISCHR(st.st_mode)  ? "a character device"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "not a regular file";
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": is ", kind, "; expected a GGUF file"));
  }
  return File::Open(path);
}

absl::StatusOr<GgufFile> GgufFile::Open(const std::string& path) {
  FERRY_ASSIGN_OR_RETURN(File file, OpenGgufForRead(path));
  FERRY_ASSIGN_OR_RETURN(int64_t size, file.Size());
  FileGgufSource source(file, static_cast<uint64_t>(size));
  return Parse(source);
}

const GgufValue* GgufFile::Find(absl::string_view key) const {
  auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

const GgufTensorInfo* GgufFile::FindTensor(absl::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

absl::Status GgufFile::Error(absl::StatusCode code,
                             absl::string_view what) const {
  return absl::Status(code, absl::StrCat(name_, ": ", what));
}

absl::Status GgufFile::TypeError(absl::string_view key, const GgufValue& value,
                                 absl::string_view expected) const {
  std::string actual = GgufValueTypeName(value.type());
  if (const GgufArray* a = value.AsArray(); a != nullptr) {
    actual = absl::StrCat("array of ", GgufValueTypeName(a->element_type));
  }
  return Error(absl::StatusCode::kInvalidArgument,
               absl::StrCat("metadata key '", key, "' is ", actual,
                            ", expected ", expected));
}

namespace {

absl::Status Missing(const GgufFile& file, absl::string_view key) {
  return file.Error(absl::StatusCode::kNotFound,
                    absl::StrCat("metadata key '", key, "' is missing"));
}

}  // namespace

absl::StatusOr<int64_t> GgufFile::GetInt(absl::string_view key) const {
  const GgufValue* value = Find(key);
  if (value == nullptr) return Missing(*this, key);
  std::optional<int64_t> result;
  bool too_big = false;
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, uint64_t>) {
          if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
            too_big = true;
          } else {
            result = static_cast<int64_t>(v);
          }
        } else if constexpr (std::is_integral_v<T> &&
                             !std::is_same_v<T, bool>) {
          result = static_cast<int64_t>(v);
        }
      },
      value->storage());
  if (too_big) {
    return Error(absl::StatusCode::kInvalidArgument,
                 absl::StrCat("metadata key '", key, "' = ",
                              value->DebugString(), " does not fit int64"));
  }
  if (!result.has_value()) return TypeError(key, *value, "an integer");
  return *result;
}

absl::StatusOr<double> GgufFile::GetFloat(absl::string_view key) const {
  const GgufValue* value = Find(key);
  if (value == nullptr) return Missing(*this, key);
  if (const float* f = value->As<float>()) return *f;
  if (const double* d = value->As<double>()) return *d;
  return TypeError(key, *value, "float32 or float64");
}

absl::StatusOr<bool> GgufFile::GetBool(absl::string_view key) const {
  const GgufValue* value = Find(key);
  if (value == nullptr) return Missing(*this, key);
  if (const bool* b = value->As<bool>()) return *b;
  return TypeError(key, *value, "bool");
}

absl::StatusOr<std::string> GgufFile::GetString(absl::string_view key) const {
  const GgufValue* value = Find(key);
  if (value == nullptr) return Missing(*this, key);
  if (const std::string* s = value->AsString()) return *s;
  return TypeError(key, *value, "string");
}

absl::StatusOr<const GgufArray*> GgufFile::GetArray(
    absl::string_view key) const {
  const GgufValue* value = Find(key);
  if (value == nullptr) return Missing(*this, key);
  if (const GgufArray* a = value->AsArray()) return a;
  return TypeError(key, *value, "an array");
}

absl::StatusOr<absl::Span<const std::string>> GgufFile::GetStringArray(
    absl::string_view key) const {
  FERRY_ASSIGN_OR_RETURN(const GgufArray* array, GetArray(key));
  if (array->element_type != GgufValueType::kString) {
    return TypeError(key, *Find(key), "array of string");
  }
  return absl::MakeConstSpan(array->strings);
}

}  // namespace ferry::gguf
