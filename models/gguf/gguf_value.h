// GgufValue: one metadata value of a GGUF file (a scalar, a string or an
// array of them), and GgufArray. Arrays of numbers keep their elements
// packed as in the file, so a 128k-entry score table is one allocation.
#ifndef FERRY_MODELS_GGUF_GGUF_VALUE_H_
#define FERRY_MODELS_GGUF_GGUF_VALUE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <variant>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace ferry::gguf {

// GGUF's metadata value types, with their ids in the file.
enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

// "uint32", "string", ...; "type <id>" for an unknown id.
std::string GgufValueTypeName(GgufValueType type);

// Bytes of one scalar of `type`; 0 for kString, kArray and unknown ids.
size_t GgufScalarSize(GgufValueType type);

// C++ types of GGUF scalars, for GgufArray::Elements<T>().
template <typename T>
struct GgufScalarTraits;
#define FERRY_GGUF_SCALAR(cpp, enumerator)                            \
  template <>                                                         \
  struct GgufScalarTraits<cpp> {                                      \
    static constexpr GgufValueType kType = GgufValueType::enumerator; \
  }
FERRY_GGUF_SCALAR(uint8_t, kUint8);
FERRY_GGUF_SCALAR(int8_t, kInt8);
FERRY_GGUF_SCALAR(uint16_t, kUint16);
FERRY_GGUF_SCALAR(int16_t, kInt16);
FERRY_GGUF_SCALAR(uint32_t, kUint32);
FERRY_GGUF_SCALAR(int32_t, kInt32);
FERRY_GGUF_SCALAR(float, kFloat32);
FERRY_GGUF_SCALAR(bool, kBool);
FERRY_GGUF_SCALAR(uint64_t, kUint64);
FERRY_GGUF_SCALAR(int64_t, kInt64);
FERRY_GGUF_SCALAR(double, kFloat64);
#undef FERRY_GGUF_SCALAR

// An array value. Exactly one of the storage members is used, by
// element_type: `scalars` (packed little-endian), `strings` or `arrays`.
struct GgufArray {
  GgufValueType element_type = GgufValueType::kUint8;
  uint64_t size = 0;
  std::vector<std::byte> scalars;
  std::vector<std::string> strings;
  std::vector<GgufArray> arrays;

  // The elements as T when element_type matches T exactly, else an empty
  // span. (Bools are stored as one byte 0 or 1, as bool is here.)
  template <typename T>
  absl::Span<const T> Elements() const {
    if (element_type != GgufScalarTraits<T>::kType) return {};
    return {reinterpret_cast<const T*>(scalars.data()),
            static_cast<size_t>(size)};
  }
};

// A metadata value. Thread-compatible.
class GgufValue {
 public:
  using Storage =
      std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float,
                   bool, std::string, GgufArray, uint64_t, int64_t, double>;

  GgufValue() = default;
  explicit GgufValue(Storage storage) : storage_(std::move(storage)) {}

  // The variant index equals the GGUF type id by construction.
  GgufValueType type() const {
    return static_cast<GgufValueType>(storage_.index());
  }
  const Storage& storage() const { return storage_; }

  // Each returns nullptr when the value is of another type.
  const std::string* AsString() const {
    return std::get_if<std::string>(&storage_);
  }
  const GgufArray* AsArray() const { return std::get_if<GgufArray>(&storage_); }
  template <typename T>
  const T* As() const {
    return std::get_if<T>(&storage_);
  }

  // A short description for messages and dumps: the value of a scalar, the
  // first characters of a string, "array[49152] of string".
  std::string DebugString() const;

 private:
  Storage storage_;
};

static_assert(std::variant_size_v<GgufValue::Storage> == 13);

}  // namespace ferry::gguf

#endif  // FERRY_MODELS_GGUF_GGUF_VALUE_H_
